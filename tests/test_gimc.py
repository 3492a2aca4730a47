"""GIMC: math (SPEC 1.4 checks ported), the functional core, and the estimator contract."""

from __future__ import annotations

import dask
import dask.array as da
import naive_gimc as nv
import numpy as np
import pytest
import scipy.sparse as sp

from ooc_lowrank import engine
from ooc_lowrank.gimc import GIMC, FourierFeatures, NystromFeatures, _blocks, core

# ------------------------------------------------------------------------------ fixtures


def _problem(rng, n=60, d=5, L=7, density=0.3):
    X = rng.standard_normal((n, d))
    A = (rng.random((n, L)) < density).astype(float)
    A[0] = 0.0  # a row without labels
    return X, sp.csr_matrix(A)


def _spec(kinds, m, gamma, learn=True):
    return _blocks.FeatureSpec.build([(k, m, gamma, None, learn) for k in kinds])


def _U0(rng, X, kinds, m, gamma):
    Us = []
    for k in kinds:
        if k == "fourier":
            Us.append(rng.standard_normal((X.shape[1], m)) * np.sqrt(2 * gamma))
        else:
            Us.append(
                X[rng.choice(X.shape[0], m, replace=False)].T
                + 0.1 * rng.standard_normal((X.shape[1], m))
            )
    return np.hstack(Us)


def _ml_data(rng, n=400, d=8, L=12, dtype=np.float64):
    """Multi-label data with structure (labels from a nonlinear function of X)."""
    X = rng.standard_normal((n, d)).astype(dtype)
    P = rng.standard_normal((d, L))
    S = np.cos(X @ P) + 0.3 * rng.standard_normal((n, L))
    Y = sp.csr_matrix((S > 0.8).astype(dtype))
    return X, Y


SMALL = dict(n_features_map=12, max_iter=6, random_state=0)

# ------------------------------------------------------------------------------ SPEC checks


@pytest.mark.parametrize("kinds", [["fourier"], ["nystrom"], ["fourier", "nystrom"]])
def test_gradient_matches_finite_differences(rng, kinds):
    X, A = _problem(rng)
    gamma, m, alpha = 0.4, 5, 0.3
    spec = _spec(kinds, m, gamma)
    U = _U0(rng, X, kinds, m, gamma)
    W = rng.standard_normal((spec.n_features, A.shape[1])) * 0.5
    gX, cs = _blocks.grad_block(
        X, A, U, spec, W @ W.T, np.ascontiguousarray(W.T), A.shape[1], False
    )
    g = _blocks.finalize_grad(gX, cs, U, spec)
    g_fd = nv.fd_grad(lambda u: nv.objective_direct(X, A, u, W, spec, alpha), U)
    assert np.linalg.norm(g - g_fd) / np.linalg.norm(g_fd) < 1e-6
    np.testing.assert_allclose(g, nv.grad_U(X, A, U, W, spec), rtol=1e-10, atol=1e-12)
    # the residual form (used when L < D/2) gives the same gradient
    gX2, cs2 = _blocks.grad_block(X, A, U, spec, None, np.ascontiguousarray(W.T), A.shape[1], False)
    np.testing.assert_allclose(_blocks.finalize_grad(gX2, cs2, U, spec), g, rtol=1e-10, atol=1e-12)


def test_w_step_is_stationary_and_gram_trick(rng):
    X, A = _problem(rng)
    spec = _spec(["fourier"], 5, 0.4)
    U = _U0(rng, X, ["fourier"], 5, 0.4)
    res = _blocks.stats_block(X, A, U, None, (0.0,), spec, A.shape[1], False, True)
    S_PP, S_AP, a2 = _blocks.symmetrize_lower(res[0]), res[1], float(res[2])
    Phi = nv.phi_spec(X, U, spec)
    np.testing.assert_allclose(S_PP, Phi.T @ Phi, rtol=1e-12)
    np.testing.assert_allclose(S_AP, (Phi.T @ A.toarray()).T, rtol=1e-12)
    W = core.w_step(S_PP, S_AP, 0.3)
    gradW = Phi.T @ (Phi @ W - A.toarray()) + 0.3 * W
    assert np.linalg.norm(gradW) / np.linalg.norm(S_AP) < 1e-10
    W2 = rng.standard_normal(W.shape)
    f_direct = nv.objective_direct(X, A, U, W2, spec, 0.3)
    assert abs(core.objective(W2, S_PP, S_AP, a2, 0.3) - f_direct) / f_direct < 1e-12


def test_trial_batch_equals_direct_statistics(rng):
    X, A = _problem(rng)
    kinds = ["fourier", "nystrom"]
    spec = _spec(kinds, 4, 0.3)
    U = _U0(rng, X, kinds, 4, 0.3)
    g = rng.standard_normal(U.shape)
    etas = (0.1, 0.05, 0.0)
    res = _blocks.stats_block(X, A, U, g, etas, spec, A.shape[1], False, False)
    for t, eta in enumerate(etas):
        Phi = nv.phi_spec(X, U - eta * g, spec)
        np.testing.assert_allclose(
            _blocks.symmetrize_lower(res[2 * t]), Phi.T @ Phi, rtol=1e-10, atol=1e-12
        )
        np.testing.assert_allclose(res[2 * t + 1], A.T @ Phi, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("kinds", [["fourier"], ["nystrom"], ["fourier", "nystrom"]])
def test_pass_shapes_match_block_outputs(rng, kinds):
    """The shapes the core hands the engine (it then skips its probe call) are those of the
    block outputs; the one-trial pass at ``U`` (whose feature map may overwrite ``X U`` in
    place) gives the statistics of ``Phi(U)``."""
    X, A = _problem(rng)
    spec = _blocks.FeatureSpec.build(
        [(k, 4, 0.3, np.eye(4) * 0.5 if k == "nystrom" else None, False) for k in kinds]
    )
    U = _U0(rng, X, kinds, 4, 0.3)
    g = rng.standard_normal(U.shape)
    L = A.shape[1]
    for direction, etas, with_a2 in [(None, (0.0,), True), (g, (0.1, 0.05), False)]:
        res = _blocks.stats_block(X, A, U, direction, etas, spec, L, False, with_a2)
        assert [np.shape(r) for r in res] == _blocks.stats_shapes(spec, L, len(etas), with_a2)
    res = _blocks.stats_block(X, A, U, None, (0.0,), spec, L, False, True)
    Phi = nv.phi_spec(X, U, spec)
    np.testing.assert_allclose(_blocks.symmetrize_lower(res[0]), Phi.T @ Phi, rtol=1e-10)
    np.testing.assert_allclose(res[1], A.T @ Phi, rtol=1e-10, atol=1e-12)
    W = rng.standard_normal((spec.n_features, L))
    learn = _spec(kinds, 4, 0.3)
    out = _blocks.grad_block(X, A, U, learn, W @ W.T, np.ascontiguousarray(W.T), L, False)
    assert [np.shape(r) for r in out] == _blocks.grad_shapes(learn, X.shape[1])


@pytest.mark.parametrize("kinds", [["fourier"], ["nystrom"], ["fourier", "nystrom"]])
def test_core_fit_matches_naive_and_never_increases(rng, kinds):
    X, A = _problem(rng, n=80)
    spec = _spec(kinds, 5, 0.4)
    U0 = _U0(rng, X, kinds, 5, 0.4)
    r = core.fit_gimc(
        engine.as_blocked(X, block_rows=23),
        engine.as_blocked(A, block_rows=23),
        U0,
        spec,
        alpha=0.3,
        n_labels=A.shape[1],
        codes=False,
        max_iter=8,
        tol=0,
    )
    Un, Wn, hist = nv.fit_naive(X, A, U0, spec, 0.3, 8, tol=0)
    assert np.all(np.diff(r.objective) <= 0)
    np.testing.assert_allclose(r.objective, hist, rtol=1e-9)
    np.testing.assert_allclose(r.U, Un, rtol=1e-8, atol=1e-10)
    assert r.n_passes >= 1 + 2 * r.n_iter


# ------------------------------------------------------------------------------ estimator


@pytest.mark.parametrize("features", ["fourier", "nystrom", "both"])
@pytest.mark.parametrize("learn", [True, False])
def test_fit_objective_monotone_and_callback(rng, features, learn):
    X, Y = _ml_data(rng)
    seen = []
    g = GIMC(features=features, learn_features=learn, callback=lambda *a: seen.append(a), **SMALL)
    g.fit(X, Y)
    assert np.all(np.diff(g.objective_) <= 0)
    assert [s[0] for s in seen] == list(range(len(g.objective_)))
    assert [s[2] for s in seen] == list(g.objective_)
    if learn:
        assert g.objective_[-1] < g.objective_[0]
        assert g.n_iter_ >= 1
    else:
        assert g.n_passes_ == 2 and g.n_iter_ == 0  # statistics, alpha="auto" selection
    D = {"fourier": 24, "nystrom": 12, "both": 36}[features]
    assert g.coef_.shape == (D, Y.shape[1])


def test_gimc_beats_imc_on_structured_data(rng):
    X, Y = _ml_data(rng, n=800)
    kw = dict(n_features_map=20, alpha=0.5, random_state=1)
    lff = GIMC(max_iter=30, **kw).fit(X[:600], Y[:600])
    rff = GIMC(learn_features=False, **kw).fit(X[:600], Y[:600])
    assert lff.objective_[-1] < rff.objective_[-1]
    assert lff.evaluate(X[600:], Y=Y[600:])["p@1"] >= rff.evaluate(X[600:], Y=Y[600:])["p@1"] - 0.02


@pytest.mark.parametrize("block_rows", [None, 150, 97])
def test_chunk_invariance_of_whole_fit(rng, block_rows):
    X, Y = _ml_data(np.random.default_rng(5), n=300)
    ref = GIMC(features="both", block_rows=300, **SMALL).fit(X, Y)
    g = GIMC(features="both", block_rows=block_rows, **SMALL).fit(X, Y)
    np.testing.assert_allclose(g.objective_, ref.objective_, rtol=1e-9)
    np.testing.assert_allclose(g.components_, ref.components_, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(g.coef_, ref.coef_, rtol=1e-6, atol=1e-8)


def test_dask_chunks_invariance(rng):
    X, Y = _ml_data(np.random.default_rng(6), n=300)
    ref = GIMC(**SMALL).fit(X, Y)
    Xd = da.from_array(X, chunks=(70, -1))
    g = GIMC(**SMALL).fit(Xd, Y)
    np.testing.assert_allclose(g.objective_, ref.objective_, rtol=1e-9)


def test_float32_stays_float32_and_matches_float64(rng):
    X, Y = _ml_data(rng)
    g64 = GIMC(**SMALL).fit(X, Y)
    g32 = GIMC(**SMALL).fit(X.astype(np.float32), Y.astype(np.float32))
    np.testing.assert_allclose(g32.objective_[0], g64.objective_[0], rtol=1e-4)
    assert np.all(np.diff(g32.objective_) <= 0)
    s32 = g32.decision_function(X[:10].astype(np.float32))
    assert s32.dtype == np.float32
    np.testing.assert_allclose(s32, g64.decision_function(X[:10]), atol=0.05)


def test_dense_and_csr_X_agree(rng):
    X, Y = _ml_data(rng)
    X[np.abs(X) < 0.7] = 0.0
    gd = GIMC(features="both", **SMALL).fit(X, Y)
    gs = GIMC(features="both", **SMALL).fit(sp.csr_matrix(X), Y)
    np.testing.assert_allclose(gs.objective_, gd.objective_, rtol=1e-9)
    np.testing.assert_allclose(
        gs.decision_function(sp.csr_matrix(X[:20])),
        gd.decision_function(X[:20]),
        rtol=1e-8,
        atol=1e-10,
    )


@pytest.mark.parametrize("features", ["fourier", "both"])
def test_normalize_rows_equals_prenormalized_input(rng, tmp_path, features):
    from sklearn.preprocessing import normalize

    import ooc_lowrank

    X, Y = _ml_data(rng)
    X[np.abs(X) < 0.7] = 0.0
    X[3] = 0.0  # an all-zero row stays zero
    Xs = sp.csr_matrix(X)
    kw = dict(features=features, gamma=0.7, **SMALL)
    g = GIMC(normalize_rows=True, **kw).fit(Xs, Y)
    ref = GIMC(**kw).fit(normalize(X), Y)
    np.testing.assert_allclose(g.objective_, ref.objective_, rtol=1e-9)
    np.testing.assert_allclose(
        g.decision_function(X[:20]), ref.decision_function(normalize(X[:20])), rtol=1e-8, atol=1e-10
    )
    np.testing.assert_array_equal(g.predict_topk(Xs, 3)[0], ref.predict_topk(normalize(X), 3)[0])
    assert Xs.data.max() > 1.0  # the input was not modified in place
    g.save(tmp_path / "m")
    h = ooc_lowrank.load(tmp_path / "m")
    assert h.normalize_rows and h.spec_.row_norm
    np.testing.assert_array_equal(h.decision_function(X[:9]), g.decision_function(X[:9]))
    # median heuristic on normalized rows: every row has norm 1, so gamma_ stays O(1)
    g2 = GIMC(normalize_rows=True, features=features, **SMALL).fit(X * 100.0, Y)
    g3 = GIMC(normalize_rows=True, features=features, **SMALL).fit(X, Y)
    np.testing.assert_allclose(g2.gamma_, g3.gamma_, rtol=1e-9)


def test_multiclass_strings_and_accuracy(rng):
    X = rng.standard_normal((300, 4))
    y = np.where(X[:, 0] * X[:, 1] > 0, "pos", np.where(X[:, 2] > 0, "a", "b"))
    g = GIMC(n_features_map=30, max_iter=10, random_state=0).fit(X, y)
    assert list(g.classes_) == ["a", "b", "pos"]
    assert g.predict(X).dtype.kind == "U"
    acc = g.score(X, y)
    assert acc > 0.7
    assert g.evaluate(X, ["accuracy"], Y=y)["accuracy"] == pytest.approx(acc)
    lab, sc = g.predict_topk(X[:5], 2)
    assert lab.shape == (5, 2) and set(lab.ravel()) <= set(g.classes_)
    assert np.all(sc[:, 0] >= sc[:, 1])


def test_predict_topk_and_metrics_match_dense_scores(rng):
    X, Y = _ml_data(rng)
    g = GIMC(**SMALL).fit(X, Y)
    S = g.decision_function(X)
    lab, sc = g.predict_topk(X, 3)
    np.testing.assert_array_equal(lab, nv.dense(np.argsort(-S, axis=1, kind="stable")[:, :3]))
    np.testing.assert_allclose(sc, np.take_along_axis(S, lab, 1), rtol=1e-12)
    res = g.evaluate(X, ["p@1", "p@3", "ndcg@3"], Y=Y)
    assert res["p@1"] == pytest.approx(nv.precision_at_k(S, Y, 1))
    assert res["p@3"] == pytest.approx(nv.precision_at_k(S, Y, 3))
    assert res["ndcg@3"] == pytest.approx(nv.ndcg_at_k(S, Y, 3))
    P = g.predict(X)
    assert sp.issparse(P) and P.shape == Y.shape


def test_dask_in_dask_out(rng):
    X, Y = _ml_data(rng)
    g = GIMC(**SMALL).fit(X, Y)
    Xd = da.from_array(X, chunks=(100, -1))
    S = g.decision_function(Xd)
    lab, sc = g.predict_topk(Xd, 4)
    assert isinstance(S, da.Array) and isinstance(lab, da.Array) and isinstance(sc, da.Array)
    np.testing.assert_allclose(S.compute(), g.decision_function(X), rtol=1e-12)
    np.testing.assert_array_equal(lab.compute(), g.predict_topk(X, 4)[0])
    Phi = FourierFeatures(n_components=6, random_state=0).fit(Xd).transform(Xd)
    assert isinstance(Phi, da.Array) and Phi.shape == (X.shape[0], 12)


def test_one_compute_per_pass_and_lazy_prediction(rng, counting_scheduler):
    X, Y = _ml_data(rng)
    Xd = da.from_array(X, chunks=(100, -1))
    g = GIMC(**SMALL).fit(Xd, Y)
    # one small compute for the initialization sample, one that caches the Dask input in
    # memory (it fits the cache budget), then exactly one per pass
    assert counting_scheduler.count == 2 + g.n_passes_
    assert g.n_passes_ <= 1 + 3 * g.n_iter_
    counting_scheduler.count = 0
    lab, sc = g.predict_topk(Xd, 3)
    S = g.decision_function(Xd)
    assert counting_scheduler.count == 0  # nothing computed yet
    # the graph maps blocks: no task ever holds the full input or an n x L score matrix
    graph = dict(lab.__dask_graph__())
    assert not any(k[0].startswith("concatenate") for k in graph if isinstance(k, tuple))
    assert lab.chunks[0] == Xd.chunks[0] and S.chunks[0] == Xd.chunks[0]
    lab.compute()
    assert counting_scheduler.count == 1
    counting_scheduler.count = 0
    g.evaluate(Xd, ["p@1", "p@5"], Y=Y)
    assert counting_scheduler.count == 1


def test_distributed_fit_equals_threaded(rng, cluster_client):
    X, Y = _ml_data(rng, n=300)
    ref = GIMC(features="both", **SMALL).fit(X, Y)
    with dask.config.set(scheduler=cluster_client.get):
        g = GIMC(features="both", **SMALL).fit(X, Y)
    np.testing.assert_allclose(g.objective_, ref.objective_, rtol=1e-12)
    np.testing.assert_allclose(g.coef_, ref.coef_, rtol=1e-10, atol=1e-12)


# ------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    "params, match",
    [
        (dict(n_features_map=0), "n_features_map must be >= 1"),
        (dict(gamma=0.0), "gamma must be > 0"),
        (dict(gamma=-1.0), "gamma must be > 0"),
        (dict(alpha=0), "alpha must be > 0"),
        (dict(features="rbf"), "features must be one of"),
        (dict(normalize_rows="l2"), "normalize_rows must be True, False or 'auto'"),
        (dict(gamma_scale=0.0), "gamma_scale must be > 0"),
    ],
)
def test_bad_params_error_before_work(rng, counting_scheduler, params, match):
    X, Y = _ml_data(rng, n=50)
    with pytest.raises((ValueError, TypeError), match=match):
        GIMC(**params).fit(X, Y)
    assert counting_scheduler.count == 0


def test_bad_data_errors_before_work(rng, counting_scheduler):
    X, Y = _ml_data(rng, n=50)
    Xn = X.copy()
    Xn[3, 2] = np.nan
    with pytest.raises(ValueError, match=r"X must hold only finite values; found nan.*impute"):
        GIMC(**SMALL).fit(Xn, Y)
    Y2 = Y.toarray()
    Y2[0, 0] = 2.0
    with pytest.raises(
        ValueError,
        match=r"Y \(multi-label\) must hold only 0/1 labels; found "
        r"value 2\.0\. Binarize",
    ):
        GIMC(**SMALL).fit(X, sp.csr_matrix(Y2))
    with pytest.raises(ValueError, match="Y must have as many rows as X: Y has 49 rows, X has 50"):
        GIMC(**SMALL).fit(X, Y[:49])
    assert counting_scheduler.count == 0
    g = GIMC(**SMALL)
    with dask.config.set(scheduler="sync"):
        g.fit(X, Y)
    counting_scheduler.count = 0
    with pytest.raises(
        ValueError, match="X has 7 features, but GIMC is expecting 8 features as input"
    ):
        g.predict_topk(X[:, :7], 2)
    with pytest.raises(ValueError, match="X has 7 features"):
        g.decision_function(da.from_array(X[:, :7]))
    assert counting_scheduler.count == 0


# ------------------------------------------------------------------------------ persistence


def test_save_load_roundtrip(rng, tmp_path):
    import ooc_lowrank

    X, Y = _ml_data(rng)
    for features, learn in [("both", True), ("nystrom", False)]:
        g = GIMC(features=features, learn_features=learn, **SMALL).fit(X, Y)
        g.save(tmp_path / f"m-{features}")
        h = ooc_lowrank.load(tmp_path / f"m-{features}")
        assert isinstance(h, GIMC) and h.get_params() == {**g.get_params(), "callback": None}
        np.testing.assert_array_equal(h.decision_function(X[:9]), g.decision_function(X[:9]))
    y = np.array(["x", "y", "z"])[rng.integers(0, 3, X.shape[0])]
    g = GIMC(**SMALL).fit(X, y)
    g.save(tmp_path / "mc")
    h = ooc_lowrank.load(tmp_path / "mc")
    np.testing.assert_array_equal(h.predict(X), g.predict(X))


def test_store_fit_evaluate_predict_to_store(rng, tmp_path):
    from ooc_lowrank.storage import DatasetWriter, open_dataset

    X, Y = _ml_data(rng, n=500, dtype=np.float32)
    url = str(tmp_path / "train.zarr")
    with DatasetWriter(url, block_rows=128) as w:
        w.add_dense("X", n_cols=X.shape[1], dtype="float32")
        w.add_csr("Y", n_cols=Y.shape[1], dtype="float32")
        for s in range(0, 500, 100):
            w.append(X=X[s : s + 100], Y=Y[s : s + 100])
    ds = open_dataset(url)
    g = GIMC(**SMALL).fit(ds)
    ref = GIMC(**SMALL).fit(ds["X"], ds["Y"])
    np.testing.assert_allclose(g.objective_, ref.objective_, rtol=1e-12)
    assert np.all(np.diff(g.objective_) <= 0)
    res = g.evaluate(ds, "p@1,p@3")
    assert res == pytest.approx(g.evaluate(X, ["p@1", "p@3"], Y=Y))
    out = str(tmp_path / "pred.zarr")
    g.predict_to_store(ds, out, top_k=3)
    p = open_dataset(out)
    lab = p["labels"].read(0, 500)
    np.testing.assert_array_equal(lab, g.predict_topk(X, 3)[0])


# ------------------------------------------------------------------------------ transformers


def test_fourier_features_approximate_rbf(rng):
    X = rng.standard_normal((5, 3)) * 0.5
    f = FourierFeatures(n_components=20000, gamma=0.4, random_state=0).fit(X)
    Phi = f.transform(X)
    K = np.exp(-0.4 * ((X[:, None] - X[None]) ** 2).sum(-1))
    np.testing.assert_allclose(Phi @ Phi.T, K, atol=0.03)
    assert f.gamma_ == 0.4


def test_nystrom_exact_with_all_points_as_landmarks(rng):
    X = rng.standard_normal((30, 3))
    f = NystromFeatures(n_components=30, gamma=0.3, random_state=0).fit(X)
    Phi = f.transform(X)
    K = np.exp(-0.3 * ((X[:, None] - X[None]) ** 2).sum(-1))
    np.testing.assert_allclose(Phi @ Phi.T, K, atol=1e-6)
    fs = NystromFeatures(n_components=10, landmarks="kmeans", random_state=0).fit(sp.csr_matrix(X))
    assert fs.transform(sp.csr_matrix(X)).shape == (30, 10) and fs.gamma_ > 0


def test_median_heuristic(rng):
    from ooc_lowrank.gimc.features import median_gamma

    X = rng.standard_normal((200, 10))
    d2 = ((X[:, None] - X[None]) ** 2).sum(-1)[np.triu_indices(200, 1)]
    assert median_gamma(X) == pytest.approx(1 / np.median(d2))
    assert median_gamma(sp.csr_matrix(X)) == pytest.approx(1 / np.median(d2))


# ------------------------------------------------------------------------------ sklearn


#: scikit-learn checks GIMC and GIMCCV fail on purpose (their tags say multi_label=True, which
#: is true): a multi-label predict returns a CSR 0/1 matrix, not a dense ndarray (label counts
#: reach the thousands); test_multilabel_predict_is_representation_invariant checks the rest.
SPARSE_MULTILABEL_PREDICT = {
    "check_classifiers_multilabel_output_format_predict": "multi-label predict returns CSR",
    "check_classifiers_multilabel_representation_invariance": (
        "multi-label predict returns CSR (assert_array_equal cannot compare it)"
    ),
}


def _sklearn_checks():
    from sklearn.utils.estimator_checks import parametrize_with_checks

    from ooc_lowrank import GIMCCV

    return parametrize_with_checks(
        [
            GIMC(n_features_map=10, max_iter=3, random_state=0),
            GIMCCV(
                n_features_map=5, gamma_scales=(0.125,), alphas=(1.0,), max_iter=2, cv=2,
                random_state=0,
            ),
            FourierFeatures(n_components=10, random_state=0),
            NystromFeatures(n_components=5, random_state=0),
        ],  # fmt: skip
        expected_failed_checks=lambda est: (
            SPARSE_MULTILABEL_PREDICT if isinstance(est, (GIMC, GIMCCV)) else {}
        ),
    )


@_sklearn_checks()
def test_sklearn_contract(estimator, check):
    check(estimator)


def test_multilabel_predict_is_representation_invariant():
    """What check_classifiers_multilabel_representation_invariance asks, for a CSR predict:
    the same predictions (values, dtype, type) from a label matrix, a list of lists and a list
    of arrays (lists of lists go through ooc_lowrank._inputs.as_labels)."""
    from sklearn.datasets import make_multilabel_classification

    X, y = make_multilabel_classification(n_samples=100, n_features=10, n_classes=3, random_state=0)
    preds = [
        GIMC(n_features_map=10, max_iter=3, random_state=0).fit(X[:80], yy).predict(X[80:])
        for yy in (y[:80], y[:80].tolist(), list(y[:80]))
    ]
    for p in preds[1:]:
        assert type(p) is type(preds[0]) and p.dtype == preds[0].dtype
        assert (p != preds[0]).nnz == 0


def test_in_memory_blocks_are_sized_by_the_feature_dimension():
    """Equal blocks whose Phi is ~16 MB: per-row work scales with D = 2m, not with d."""
    from ooc_lowrank import engine

    X = np.zeros((100_000, 100), np.float32)
    g = GIMC(n_features_map=500)
    br = g._memory_block_rows(X)
    n_blocks = -(-X.shape[0] // br)
    assert br * 2 * 500 * 4 <= engine.TARGET_BLOCK_BYTES * 1.01 and n_blocks == 24
    assert n_blocks * br - X.shape[0] < n_blocks  # balanced: the last block is not a stub
    assert GIMC(n_features_map=500, features="nystrom")._memory_block_rows(X) == 8334
    assert GIMC(n_features_map=500, block_rows=777)._memory_block_rows(X) == 777
    assert GIMC(n_features_map=4)._memory_block_rows(X[:10]) == 10  # small data: one block


def test_trial_grouping_changes_work_not_the_fit(rng, tmp_path):
    # one trial per pass by default, in memory or lazy; the trials are tried in the same order
    # whatever the grouping, so the fits are identical and only the pass counts differ
    import ooc_lowrank

    X, Y = _ml_data(rng)
    auto = GIMC(**SMALL).fit(X, Y)
    assert auto.n_trials_ == 1
    fits = {t: GIMC(n_trials=t, **SMALL).fit(X, Y) for t in (1, 2, 5)}
    for t, g in fits.items():
        assert g.n_trials_ == t
        np.testing.assert_array_equal(g.objective_, auto.objective_)
        np.testing.assert_array_equal(g.components_, auto.components_)
    assert fits[1].n_passes_ >= fits[2].n_passes_ >= fits[5].n_passes_
    assert fits[5].n_passes_ == 1 + 2 * fits[5].n_iter_  # every first batch holds the step
    lazy = GIMC(**SMALL).fit(da.from_array(X, chunks=(100, -1)), Y)
    assert lazy.n_trials_ == 1
    np.testing.assert_allclose(lazy.objective_, auto.objective_, rtol=1e-12)
    auto.save(tmp_path / "m")
    assert ooc_lowrank.load(tmp_path / "m").n_trials_ == 1


def test_eval_set_history_equals_refits(rng, tmp_path):
    import ooc_lowrank

    X, Y = _ml_data(rng)
    Xv, Yv = _ml_data(np.random.default_rng(7), n=120)
    g = GIMC(**dict(SMALL, max_iter=5, tol=0.0)).fit(X, Y, eval_set=(Xv, Yv), eval_every=2)
    assert sorted(g.eval_history_) == [0, 2, 4, 5]  # init, every 2nd, and the last
    for k, scores in g.eval_history_.items():
        ref = GIMC(**dict(SMALL, max_iter=k, tol=0.0)).fit(X, Y)
        assert scores == ref.evaluate(Xv, Y=Yv)
    assert g.eval_history_[5] == g.evaluate(Xv, Y=Yv)
    g.save(tmp_path / "m")
    assert ooc_lowrank.load(tmp_path / "m").eval_history_ == g.eval_history_
    # multi-class: accuracy by default
    y = np.argmax(Y.toarray() if sp.issparse(Y) else Y, axis=1)
    yv = np.argmax(Yv.toarray() if sp.issparse(Yv) else Yv, axis=1)
    c = GIMC(**SMALL).fit(X, y, eval_set=(Xv, yv), eval_every=3)
    assert set(c.eval_history_[0]) == {"accuracy"}


def test_eval_set_errors_before_any_work(rng):
    X, Y = _ml_data(rng)
    calls = []
    g = GIMC(callback=lambda *a: calls.append(a), **SMALL)
    with pytest.raises(ValueError, match="eval_set: X_val: X has 3 features"):
        g.fit(X, Y, eval_set=(X[:, :3], Y))
    with pytest.raises(ValueError, match="Y_val has 10 rows but X_val has 20"):
        g.fit(X, Y, eval_set=(X[:20], Y[:10]))
    with pytest.raises(TypeError, match="eval_set must be a pair"):
        g.fit(X, Y, eval_set=X)
    with pytest.raises(ValueError, match="eval_every"):
        g.fit(X, Y, eval_set=(X, Y), eval_every=0)
    with pytest.raises(ValueError, match="p@x|metric"):
        g.fit(X, Y, eval_set=(X, Y), eval_metrics="p@x")
    assert calls == []  # no pass ran


# ------------------------------------------------------------------------------ defaults


def _bow_data(rng, n=300, d=60, L=8):
    """Nonnegative sparse counts (about 10% nonzero) with labels that depend on them."""
    X = rng.poisson(0.12, size=(n, d)).astype(np.float64) * rng.integers(1, 4, size=(n, 1))
    Y = sp.csr_matrix((X @ rng.standard_normal((d, L)) > 0.8).astype(np.float64))
    return sp.csr_matrix(X), Y


def test_default_values_are_the_benchmarked_rule():
    from ooc_lowrank.gimc import estimator

    p = GIMC().get_params()
    assert p["gamma"] is None and p["normalize_rows"] is False
    assert p["gamma_scale"] == estimator.DEFAULT_GAMMA_SCALE
    assert p["alpha"] == "auto"  # learned features: DEFAULT_ALPHA; frozen: selected (issue 24)
    assert GIMC()._fit_alpha() == estimator.DEFAULT_ALPHA
    assert GIMC(learn_features=False)._fit_alpha() == "auto"
    assert p["max_iter"] == estimator.DEFAULT_MAX_ITER
    # the benchmark that chose the rule classifies the datasets with the same threshold
    import benchmarks.gimc_defaults as bench

    assert bench.SPARSE_DENSITY == estimator._BOW_DENSITY


@pytest.mark.parametrize("kind", ["csr", "dense"])
def test_looks_like_bag_of_words(rng, kind):
    from ooc_lowrank.gimc.estimator import _looks_like_bag_of_words

    def f(A):
        return _looks_like_bag_of_words(sp.csr_matrix(A) if kind == "csr" else A)

    X = np.zeros((50, 40))
    X[:, :8] = rng.random((50, 8)) + 0.1  # exactly 20% nonzero: still bag-of-words
    assert f(X)
    X[0, 8] = 1.0  # one more nonzero: too dense
    assert not f(X)
    X[0, 8] = 0.0
    X[1, 1] = -0.5  # a negative entry: not counts
    assert not f(X)
    assert not f(rng.standard_normal((30, 5)))
    assert not f(rng.random((30, 5)))  # nonnegative but dense
    assert not f(np.zeros((0, 5)))


def test_auto_defaults_resolved_on_the_input(rng, tmp_path):
    """normalize_rows="auto": on for nonnegative sparse input, off for dense real features;
    gamma=None: gamma_ = gamma_scale x the median heuristic of the (normalized) rows."""
    import ooc_lowrank
    from ooc_lowrank.gimc._blocks import l2_normalize_rows
    from ooc_lowrank.gimc.features import median_gamma

    Xb, Yb = _bow_data(rng)  # n <= 1000: the heuristic's sample is every row
    auto = dict(n_features_map=12, max_iter=3, random_state=0, normalize_rows="auto")
    g = GIMC(**auto).fit(Xb, Yb)
    assert g.normalize_rows_ is True and g.spec_.row_norm
    scale = GIMC().gamma_scale
    assert g.gamma_ == [pytest.approx(scale * median_gamma(l2_normalize_rows(Xb)), rel=1e-12)]
    # the same as asking for it explicitly (the dense copy is classified the same way)
    ref = GIMC(n_features_map=12, max_iter=3, random_state=0, normalize_rows=True).fit(Xb, Yb)
    np.testing.assert_allclose(g.objective_, ref.objective_, rtol=1e-12)
    gd = GIMC(**auto).fit(Xb.toarray(), Yb)
    assert gd.normalize_rows_ is True
    g.save(tmp_path / "m")
    h = ooc_lowrank.load(tmp_path / "m")
    assert h.normalize_rows_ is True and h.spec_.row_norm and h.normalize_rows == "auto"
    np.testing.assert_array_equal(h.decision_function(Xb[:7]), g.decision_function(Xb[:7]))

    X, Y = _ml_data(rng)  # dense Gaussian features
    g = GIMC(**auto, gamma_scale=0.5).fit(X, Y)
    assert g.normalize_rows_ is False and not g.spec_.row_norm
    assert g.gamma_ == [pytest.approx(0.5 * median_gamma(X), rel=1e-12)]
    # explicit settings win over the data-dependent ones
    g = GIMC(n_features_map=12, max_iter=3, random_state=0, gamma=0.3, normalize_rows=True)
    g.fit(X, Y)
    assert g.normalize_rows_ is True and g.gamma_ == [0.3]


def test_models_saved_before_auto_defaults_load(rng, tmp_path):
    """A model saved with the bool normalize_rows and no resolved value keeps its preprocessing."""
    import json

    import ooc_lowrank

    X, Y = _ml_data(rng, n=60)
    g = GIMC(normalize_rows=True, **SMALL).fit(X, Y)
    g.save(tmp_path / "m")
    f = tmp_path / "m" / "model.json"
    doc = json.loads(f.read_text())
    del doc["extra"]["normalize_rows"], doc["params"]["gamma_scale"]
    f.write_text(json.dumps(doc))
    h = ooc_lowrank.load(tmp_path / "m")
    assert h.normalize_rows_ is True and h.spec_.row_norm
    np.testing.assert_array_equal(h.decision_function(X[:5]), g.decision_function(X[:5]))


def test_defaults_benchmark_rule_selection():
    """benchmarks/gimc_defaults.py: the rule minimizes the worst validation regret, and the
    leave-one-dataset-out rule is chosen without the held-out dataset."""
    import benchmarks.gimc_defaults as bench

    def row(norm, gs, p1_by_it):
        val = {str(it): {"p@1": p, "p@3": 0.0, "p@5": 0.0} for it, p in p1_by_it.items()}
        return {"norm": norm, "gs": gs, "alpha": 1.0, "val": val}

    # a: best at gs 0.25 (60), b (bag-of-words) at normalized gs 0.5 (70), c at gs 0.5 (50)
    res = {
        "data": {"a": {"bag_of_words": False}, "b": {"bag_of_words": True},
                 "c": {"bag_of_words": False}},
        "grid": {
            "a": {"1": row(False, 0.25, {5: 60, 10: 55}), "2": row(False, 0.5, {5: 57, 10: 58}),
                  "3": row(True, 0.25, {5: 59, 10: 54}), "4": row(True, 0.5, {5: 56, 10: 50})},
            "b": {"1": row(False, 0.25, {5: 61, 10: 62}), "2": row(False, 0.5, {5: 63, 10: 64}),
                  "3": row(True, 0.25, {5: 66, 10: 67}), "4": row(True, 0.5, {5: 68, 10: 70})},
            "c": {"1": row(False, 0.25, {5: 40, 10: 41}), "2": row(False, 0.5, {5: 49, 10: 50}),
                  "3": row(True, 0.25, {5: 30, 10: 30}), "4": row(True, 0.5, {5: 30, 10: 30})},
        },
    }
    sel = bench.select(res)
    assert sel["per_dataset_best"]["b"]["setting"]["normalize_rows"] is True
    # normalize bag-of-words rows, gs 0.5, 10 steps: regrets a 2, b 0, c 0
    assert sel["rule"]["rule"] == ("auto_norm", (0.5, 1.0, 10))
    assert sel["rule"]["max_regret"] == 2
    # without b, nothing asks for normalization; the constant raw setting is as good
    lo = sel["lodo"]["b"]
    assert lo["setting"] == [False, 0.5, 1.0, 10] and lo["val_regret"] == 70 - 64


# ------------------------------------------------------------------------------ direct path


@pytest.fixture
def threads_computes(monkeypatch):
    """Counts graphs run by the local threaded scheduler (the default policy's scheduler)."""
    import dask.base
    import dask.threaded

    calls = []

    def get(dsk, keys, **kw):
        calls.append(keys)
        return dask.threaded.get(dsk, keys, **kw)

    monkeypatch.setitem(dask.base.named_schedulers, "threads", get)
    return calls


@pytest.mark.parametrize("source", ["memory", "dask"])
def test_direct_path_builds_no_graph_per_pass_and_equals_the_graph_path(
    rng, tmp_path, threads_computes, source
):
    # several in-memory blocks on the default local scheduler: no Dask graph per pass (a Dask
    # input is cached once, then held), the same passes and the graph path's result bitwise
    X, Y = _ml_data(rng, n=300)
    Xin = X if source == "memory" else da.from_array(X, chunks=(60, -1))
    kw = dict(features="both", block_rows=60 if source == "memory" else None, **SMALL)
    g = GIMC(**kw).fit(Xin, Y)
    assert g.n_passes_ >= 2 * g.n_iter_ >= 2
    # a Dask input: the initialization sample and the cache (one persist), then no graph
    assert len(threads_computes) == (0 if source == "memory" else 2)
    with dask.config.set(scheduler="threads"):  # a set scheduler: the graph path
        ref = GIMC(**kw).fit(Xin, Y)
    assert len(threads_computes) >= ref.n_passes_  # one graph per pass
    assert (g.n_iter_, g.n_passes_) == (ref.n_iter_, ref.n_passes_)
    np.testing.assert_array_equal(g.objective_, ref.objective_)
    np.testing.assert_array_equal(g.components_, ref.components_)
    np.testing.assert_array_equal(g.coef_, ref.coef_)


# -------------------------------------------------------- gradient pass at scale (issue 25)


def _sparse_grad_problem(rng, n=300, d=5000, L=9, m=4, dtype=np.float32):
    X = sp.random(n, d, density=0.002, format="csr", random_state=3, dtype=dtype)
    X = sp.csr_matrix(X + sp.csr_matrix((np.ones(n, dtype), (np.arange(n), np.arange(n) % d)),
                                        shape=(n, d)))  # no empty row
    A = sp.csr_matrix((rng.random((n, L)) < 0.3).astype(dtype))
    spec = _spec(["fourier", "nystrom"], m, 0.5)
    U = (0.5 * rng.standard_normal((d, 2 * m))).astype(dtype)
    W = rng.standard_normal((spec.n_features, L)) * 0.5
    return X, A, spec, U, W


def _grad_args(U, spec, W, L, dt):
    return (U, spec, (W @ W.T).astype(dt), np.ascontiguousarray(W.T).astype(dt), L, False)


@pytest.mark.parametrize("block_rows", [300, 100, 77])
@pytest.mark.parametrize("csr", [True, False])
def test_accumulated_gradient_equals_per_block_sum(rng, block_rows, csr):
    """The fit's gradient pass (grad_block_into adding into one chain accumulator) equals the
    sum of the per-block grad_block outputs, for any chunking; CSR blocks scatter-add."""
    X, A, spec, U, W = _sparse_grad_problem(rng)
    X = X if csr else X.toarray()
    args = _grad_args(U, spec, W, A.shape[1], np.float32)
    ref_gX = np.zeros((X.shape[1], spec.n_params))
    ref_cs = np.zeros(spec.n_params)
    for s in range(0, X.shape[0], 50):  # the previous implementation, one block at a time
        gX, cs = _blocks.grad_block(X[s : s + 50], A[s : s + 50], *args)
        ref_gX += gX
        ref_cs += cs
    red = engine.reduce_blocks(
        _blocks.grad_block_into,
        engine.as_blocked(X, block_rows=block_rows),
        engine.as_blocked(A, block_rows=block_rows),
        args=args,
        offset=True,
        shapes=_blocks.grad_shapes(spec, X.shape[1]),
    )
    (gX, cs) = engine.compute(red)[0]
    scale = np.abs(ref_gX).max()
    np.testing.assert_allclose(gX, ref_gX, rtol=0, atol=2e-5 * scale)
    np.testing.assert_allclose(cs, ref_cs, rtol=2e-5, atol=2e-5 * np.abs(ref_cs).max())


@pytest.mark.parametrize("one_chain", [False, True])
def test_sparse_gradient_pass_allocates_no_per_block_d_by_m(rng, monkeypatch, one_chain):
    """Peak memory of the gradient pass on CSR blocks: the chains' accumulators (d x m_total
    float64 each) plus block-sized transients; no (d, m_total) array per block (the previous
    grad_block allocated two: its zeros and scipy's dense X^T Xi).  An accumulator above
    engine.ONE_CHAIN_BYTES (6.3 GB at the Delicious-large shape) has one chain: one in all."""
    import tracemalloc

    if one_chain:
        monkeypatch.setattr(engine, "ONE_CHAIN_BYTES", 2**20)
    X, A, spec, U, W = _sparse_grad_problem(rng, n=400, d=60_000, m=16)
    d, mt = X.shape[1], spec.n_params
    acc_bytes = 8 * (d * mt + mt)
    nb = 8
    Xb = engine.as_blocked(X, block_rows=50)
    Ab = engine.as_blocked(A, block_rows=50)
    assert Xb.n_blocks == nb
    args = _grad_args(U, spec, W, A.shape[1], np.float32)
    shapes = _blocks.grad_shapes(spec, d)
    n_chains = engine._n_chains(nb, d * mt + mt, True)
    assert n_chains == (1 if one_chain else 4)
    kw = dict(args=args, shapes=shapes, offset=True)
    engine.compute(engine.reduce_blocks(_blocks.grad_block_into, Xb, Ab, **kw))
    tracemalloc.start()
    try:
        engine.compute(
            engine.reduce_blocks(_blocks.grad_block_into, Xb, Ab, **kw)
        )
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # the accumulators, plus one partial per chain's last link at most, plus block transients
    block_bytes = 4 * 50 * (d // 100 + 4 * spec.n_features + A.shape[1]) * 8
    assert peak <= n_chains * acc_bytes + block_bytes + 2**20, (peak, n_chains, acc_bytes)


def test_fit_state_by_row_slices_equals_whole(rng, monkeypatch):
    """The driver's d x m_total arithmetic (trial matrices, the step, ||g||^2) by row slices of
    core.TRIAL_ROWS (no float64 (d, m_total) temporaries at the Delicious shape) gives the fit
    of the whole-array arithmetic: the same bits for the elementwise parts, ||g||^2 to
    rounding."""
    X, Y = _ml_data(rng, n=300, d=40)
    spec = _spec(["fourier", "nystrom"], 6, 0.2)
    U0 = _U0(rng, X, ["fourier", "nystrom"], 6, 0.2)
    kw = dict(alpha=0.5, n_labels=Y.shape[1], codes=False, max_iter=5, tol=0.0, n_trials=1)
    whole = core.fit_gimc(X, Y, U0, spec, **kw)
    U = rng.standard_normal((40, 12))
    g = rng.standard_normal((40, 12))
    monkeypatch.setattr(core, "TRIAL_ROWS", 7)
    np.testing.assert_array_equal(
        core._trial_matrices(U, g, (0.5, 0.25), np.float32),
        np.stack([(U - e * g).astype(np.float32) for e in (0.5, 0.25)]),
    )
    np.testing.assert_array_equal(core._step(U, 0.3, g), U - 0.3 * g)
    assert core._sq_norm(g) == pytest.approx(np.sum(g * g), rel=1e-14)
    sliced = core.fit_gimc(X, Y, U0, spec, **kw)
    np.testing.assert_allclose(sliced.U, whole.U, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(sliced.objective, whole.objective, rtol=1e-12)


def test_objective_by_label_slices_equals_whole(rng, monkeypatch):
    """Above core.OBJECTIVE_COLS labels the Gram-trick objective is summed by column slices of
    W (no (D, L) temporaries); the value equals the one-piece formula and the direct one."""
    X, A = _problem(rng, L=23)
    spec = _spec(["fourier"], 5, 0.4)
    U = _U0(rng, X, ["fourier"], 5, 0.4)
    res = _blocks.stats_block(X, A, U, None, (0.0,), spec, A.shape[1], False, True)
    S_PP, S_AP, a2 = _blocks.symmetrize_lower(res[0]), res[1], float(res[2])
    W = core.w_step(S_PP, S_AP, 0.3)
    whole = core.objective(W, S_PP, S_AP, a2, 0.3)
    monkeypatch.setattr(core, "OBJECTIVE_COLS", 4)  # 23 labels: 6 slices, the last short
    assert core.objective(W, S_PP, S_AP, a2, 0.3) == pytest.approx(whole, rel=1e-13)
    assert whole == pytest.approx(nv.objective_direct(X, A, U, W, spec, 0.3), rel=1e-10)


@pytest.mark.parametrize("csr", [False, True])
def test_kept_features_skip_the_gradient_pass_product_same_fit(rng, monkeypatch, csr):
    """The accepted single trial's block features are kept for the next gradient pass: the fit
    is bitwise the one that recomputes them, and each gradient pass then multiplies X U for no
    block (one X U_t per line-search block only)."""
    X, Y = _ml_data(rng, n=300, d=20)
    X = sp.csr_matrix(X) if csr else X
    spec = _spec(["fourier", "nystrom"], 6, 0.2)
    U0 = _U0(rng, np.asarray(X.todense()) if csr else X, ["fourier", "nystrom"], 6, 0.2)
    Xb, Yb = engine.as_blocked(X, block_rows=70), engine.as_blocked(Y, block_rows=70)
    kw = dict(alpha=0.5, n_labels=Y.shape[1], codes=False, max_iter=4, tol=0.0, n_trials=1)
    calls = []
    dot = _blocks._dot
    monkeypatch.setattr(_blocks, "_dot", lambda Xb, U: calls.append(U.shape) or dot(Xb, U))
    kept = core.fit_gimc(Xb, Yb, U0, spec, **kw)
    n_kept = len(calls)
    assert _blocks._PHI["blocks"] == {}  # cleared when the fit stops
    monkeypatch.setattr(core, "PHI_CACHE_BYTES", 0)
    calls.clear()
    fresh = core.fit_gimc(Xb, Yb, U0, spec, **kw)
    np.testing.assert_array_equal(kept.U, fresh.U)
    np.testing.assert_array_equal(kept.W, fresh.W)
    assert kept.objective == fresh.objective and kept.n_passes == fresh.n_passes
    # the gradient passes' X U products (5 blocks each, one pass per iteration) are gone
    assert len(calls) - n_kept == 5 * kept.n_iter, (len(calls), n_kept)
