"""KernelMaxide / Maxide: missing-label representation, masking, ranking loss, the factored APG
against the direct one (tests/naive_kernelmaxide.py), estimators, chunk invariance, bad input."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp

import naive_kernelmaxide as naive
from ooc_lowrank import metrics
from ooc_lowrank.kernelmaxide import check_observed_labels, mask_labels, mask_labels_store
from ooc_lowrank.kernels.kernelmaxide import observed_residual, ranking_loss_rows, residual_t_f


def _labels(rng, n, L, p=0.3):
    Y = (rng.random((n, L)) < p).astype(np.float64)
    Y[0] = 0.0  # a row without positives
    Y[1] = 1.0  # a row without negatives
    return sp.csr_matrix(Y)


# ------------------------------------------------------------------ observed-label representation


def test_check_observed_accepts_pm1_and_keeps_missing_unstored():
    Y = sp.csr_matrix(np.array([[1.0, -1.0, 0.0], [0.0, 0.0, -1.0]]))
    out = check_observed_labels(Y)
    assert out.nnz == 3 and set(out.data) == {1.0, -1.0}


@pytest.mark.parametrize(
    "Y, msg",
    [
        (sp.csr_matrix(np.array([[1.0, 2.0]])), r"\+1 .*-1.*found 2\.0"),
        (sp.csr_matrix(np.array([[1.0, 0.5]])), "found 0.5"),
        (np.array([[1.0, 0.0]]), "dense and holds 0"),
    ],
)
def test_check_observed_rejects(Y, msg):
    with pytest.raises(ValueError, match=msg):
        check_observed_labels(Y, name="Y")


def test_check_observed_explicit_zero_is_rejected():
    Y = sp.csr_matrix((np.array([1.0, 0.0]), np.array([0, 1]), np.array([0, 2])), shape=(1, 2))
    with pytest.raises(ValueError, match="found 0.0"):
        check_observed_labels(Y)


# ------------------------------------------------------------------ masking protocol


@pytest.mark.parametrize("block_rows", [None, 7, 50])
def test_mask_labels_counts_per_label(rng, block_rows):
    n, L, omega = 120, 6, 20
    Y = _labels(rng, n, L)
    train = np.ones(n, bool)
    train[rng.choice(n, 12, replace=False)] = False
    obs = mask_labels(Y, omega, train=train, random_state=0, block_rows=block_rows)
    assert obs.shape == Y.shape
    assert set(np.unique(obs.data)) <= {-1.0, 1.0}
    D, Yd = obs.toarray(), Y.toarray()
    assert not D[~train].any(), "test rows must have no observed label"
    for j in range(L):
        npos = int((Yd[train, j] > 0).sum())
        nneg = int(train.sum()) - npos
        kp = max(1, int(np.floor(npos * omega / 100 + 0.5))) if npos else 0
        kn = max(1, int(np.floor(nneg * omega / 100 + 0.5))) if nneg else 0
        assert (D[:, j] == 1).sum() == kp
        assert (D[:, j] == -1).sum() == kn
        # observed values agree with the truth
        assert np.all(Yd[D[:, j] == 1, j] == 1) and np.all(Yd[D[:, j] == -1, j] == 0)


def test_mask_labels_seeded_and_varies_with_seed(rng):
    Y = _labels(rng, 80, 5)
    a = mask_labels(Y, 30, random_state=3)
    b = mask_labels(Y, 30, random_state=3)
    c = mask_labels(Y, 30, random_state=4)
    assert (a != b).nnz == 0
    assert (a != c).nnz > 0


def test_mask_labels_is_uniform(rng):
    """Each training positive is observed with probability ~omega (over seeds)."""
    Y = sp.csr_matrix(np.ones((40, 1)))
    hits = np.zeros(40)
    for s in range(300):
        hits += mask_labels(Y, 25, random_state=s, block_rows=9).toarray()[:, 0] > 0
    assert np.all(np.abs(hits / 300 - 0.25) < 0.12)


def test_mask_labels_bad_omega(rng):
    Y = _labels(rng, 10, 3)
    for bad in (0, -5, 101):
        with pytest.raises(ValueError, match="omega"):
            mask_labels(Y, bad)


def test_mask_labels_store_roundtrip(tmp_path, rng):
    from ooc_lowrank.storage import open_dataset, write_arrays

    n, L = 90, 4
    X = rng.standard_normal((n, 3)).astype(np.float32)
    Y = _labels(rng, n, L).astype(np.float32)
    src = str(tmp_path / "src.zarr")
    write_arrays(src, {"X": X, "Y": Y}, block_rows=25)
    dest = mask_labels_store(src, str(tmp_path / "m.zarr"), 20, test_fraction=0.1, random_state=0)
    ds = open_dataset(dest)
    obs = ds["Y_obs"].read(0, n)
    train = ds["train"].read(0, n)[:, 0].astype(bool)
    assert (~train).sum() == 9
    assert not obs.toarray()[~train].any()
    np.testing.assert_array_equal(ds["X"].read(0, n), X)
    check_observed_labels(obs)
    # the same draw as the in-memory path with the store's blocks
    ref = mask_labels(Y, 20, train=train, random_state=ds.attrs["mask_seed"], block_rows=25)
    assert (sp.csr_matrix(obs, dtype=np.float64) != ref).nnz == 0


# ------------------------------------------------------------------ ranking loss


def test_ranking_loss_spec_toy():
    S = np.array([[0.9, 0.2, 0.5, 0.1], [0.3, 0.8, 0.6, 0.7]])
    Y = np.array([[1, 0, 1, 0], [1, 1, 0, 0]])
    assert metrics.ranking_loss(Y, S) == pytest.approx(0.25, abs=1e-15)


def test_ranking_loss_ties_are_errors():
    S = np.array([[1.0, 1.0, 0.0]])
    Y = np.array([[1, 0, 0]])
    assert metrics.ranking_loss(Y, S) == pytest.approx(0.5)  # tie with one of two negatives
    assert metrics.ranking_loss(Y, np.zeros((1, 3))) == 1.0


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_ranking_loss_kernel_vs_brute_force(rng, dtype):
    n, L = 200, 9
    Y = _labels(rng, n, L)
    S = rng.integers(0, 4, size=(n, L)).astype(dtype)  # many ties
    S[::3] = rng.standard_normal((S[::3].shape[0], L))
    got = ranking_loss_rows(S, Y.indptr, Y.indices)
    want = naive.ranking_loss_rows(S, Y)
    np.testing.assert_allclose(got, want, atol=1e-12)
    assert got[0] == -1 and got[1] == -1


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_observed_products_vs_dense_twins(rng, dtype):
    """The pass kernels on the observed entries equal the dense products restricted to them
    (rows without an observation, unsorted column indices, an empty trailing row)."""
    n, r, m = 40, 13, 7
    F = rng.standard_normal((n, r)).astype(dtype)
    W = rng.standard_normal((r, m))
    D = rng.random((n, m))
    D[n - 1] = 1.0  # an empty trailing row
    Y = sp.csr_matrix(np.where(D < 0.15, 1.0, np.where(D < 0.3, -1.0, 0.0)))
    Y.indices[: Y.indptr[3]] = Y.indices[: Y.indptr[3]][::-1].copy()  # unsorted is allowed
    tol = 1e-12 if dtype == np.float64 else 1e-5
    res = observed_residual(F, W, Y.indptr, Y.indices, Y.data)
    np.testing.assert_allclose(res, naive.observed_residual(F, W.astype(dtype), Y), rtol=tol, atol=tol)
    P = residual_t_f(F, Y.indptr, Y.indices, res, m)
    np.testing.assert_allclose(P, naive.residual_t_f(F, Y, res), rtol=tol, atol=tol)
    assert P.shape == (r, m)


def test_ranking_loss_block_sums_and_explicit_negatives(rng):
    Y = _labels(rng, 50, 5)
    S = rng.standard_normal((50, 5))
    Ypm = Y.copy()
    Ypm.data[:] = 1.0
    Ypm = Ypm - sp.csr_matrix(Y.toarray() == 0, dtype=np.float64)  # explicit -1 for negatives
    parts = [metrics.ranking_loss_block(Y[s : s + 13], S[s : s + 13]) for s in range(0, 50, 13)]
    tot = np.sum(parts, axis=0)
    assert tot[0] / tot[1] == pytest.approx(naive.ranking_loss(Y, S), abs=1e-14)
    assert metrics.ranking_loss(Ypm, S) == pytest.approx(naive.ranking_loss(Y, S), abs=1e-14)


def test_ranking_loss_shape_mismatch():
    with pytest.raises(ValueError, match="shape"):
        metrics.ranking_loss(np.eye(3), np.zeros((3, 2)))


# ------------------------------------------------------------------ the factored APG (SPEC 4.2-4.4)

from ooc_lowrank import engine  # noqa: E402
from ooc_lowrank.gimc.features import nystrom_normalization  # noqa: E402
from ooc_lowrank.kernelmaxide import _blocks, core  # noqa: E402


@pytest.fixture
def toy(rng):
    """60 x 5 features, 6 labels, rows 48.. are test rows (no observed label)."""
    n, d, m = 60, 5, 6
    X = rng.standard_normal((n, d))
    Ytrue = (X @ rng.standard_normal((d, m)) + 0.3 > 0).astype(float)
    train = np.arange(n) < 48
    Yobs = mask_labels(Ytrue, 40, train=train, random_state=0)
    gamma = 0.3
    land = X[rng.choice(n, 20, replace=False)]
    U = np.ascontiguousarray(land.T)
    fmap = _blocks.FeatureMap("nystrom", U, nystrom_normalization(U, gamma), gamma)
    F = naive.rbf(X, land, gamma) @ fmap.M
    UT = np.flatnonzero(np.diff(Yobs.indptr))
    return dict(X=X, Ytrue=Ytrue, train=train, Yobs=Yobs, gamma=gamma, land=land, fmap=fmap, F=F, UT=UT)


def _passes(t, bounds=None, cached=False):
    XB = engine.as_blocked(t["X"])
    if bounds is not None:
        XB = XB.rechunk(bounds)
    YB = engine.align(XB, engine.as_blocked(t["Yobs"]))
    if cached:
        ut = (np.diff(t["Yobs"].indptr) > 0).astype(np.int8)
        FB = engine.map_rows_persisted(
            _blocks.features_rows_block, XB, args=(ut, *t["fmap"].args()), n_cols=20, offset=True
        )
        return core.Passes(FB, YB, None)
    return core.Passes(XB, YB, t["fmap"])


@pytest.mark.parametrize(
    "bounds, cached, max_iter",
    [
        (None, False, 100),
        ([0, 30, 60], False, 20),
        ([0, 7, 8, 41, 60], False, 20),
        ([0, 13, 60], True, 20),
    ],
)
def test_factored_span_form_equals_direct(toy, bounds, cached, max_iter):
    """Same iterates as the direct n_UT x m APG with an explicit K_{all,UT} (to 1e-10)."""
    t = toy
    F, UT = t["F"], t["UT"]
    K = F @ F[UT].T
    lam = 0.5
    C_direct, iterates, objs = naive.apg_direct(K, t["Yobs"], lam, max_iter=max_iter)
    p = _passes(t, bounds, cached)
    G, nobs = p.gram()
    np.testing.assert_allclose(G, F[UT].T @ F[UT], rtol=1e-12, atol=1e-12)
    assert nobs == t["Yobs"].nnz
    R = core.span_root(G)
    got = []
    res = core.apg(
        p, R, lam, 6, 0.5 * nobs, max_iter=max_iter, on_iterate=lambda k, C: got.append(C.copy())
    )
    assert len(got) == len(iterates) >= 20
    Rp = np.linalg.pinv(R)
    for Ch, Cd in zip(got, iterates, strict=True):
        np.testing.assert_allclose(F[UT] @ Rp @ Ch, Cd, atol=1e-10 * np.abs(Cd).max())
    np.testing.assert_allclose(res.objective, objs, rtol=1e-10)
    np.testing.assert_allclose(F @ res.W, K @ C_direct, atol=1e-10 * np.abs(K @ C_direct).max())
    # passes: 1 gram + per iteration one gradient pass and >= 1 trial pass
    assert res.n_passes >= 1 + 2 * res.n_iter


def test_gradient_pass_vs_finite_differences(toy, rng):
    t = toy
    F, UT = t["F"], t["UT"]
    K = F @ F[UT].T
    Y = t["Yobs"].toarray()
    obs = Y != 0
    C = 0.1 * rng.standard_normal((UT.size, 6))
    E, P = _passes(t, [0, 25, 60]).grad(F[UT].T @ C)
    Efun = lambda c: 0.5 * np.sum((obs * (K @ c - Y)) ** 2)  # noqa: E731
    assert E == pytest.approx(Efun(C), rel=1e-12)
    fd = np.zeros_like(C)
    h = 1e-6
    for i in range(C.shape[0]):
        for j in range(C.shape[1]):
            e = np.zeros_like(C)
            e[i, j] = h
            fd[i, j] = (Efun(C + e) - Efun(C - e)) / (2 * h)
    np.testing.assert_allclose(F[UT] @ P, fd, rtol=1e-6, atol=1e-7 * np.abs(fd).max())


def test_svt_is_the_prox(rng):
    B = rng.standard_normal((8, 5))
    lam, L = 0.7, 3.0
    P, nuc = core.svt(B, lam / L)
    assert nuc == pytest.approx(np.linalg.norm(P, "nuc"), rel=1e-12)
    obj = lambda C: lam * np.linalg.norm(C, "nuc") + 0.5 * L * np.sum((C - B) ** 2)  # noqa: E731
    worst = min(obj(P + 1e-3 * rng.standard_normal(P.shape)) - obj(P) for _ in range(200))
    assert worst > 0
    np.testing.assert_allclose(P, naive.svt(B, lam / L), atol=1e-13)


def test_tseng_theta_is_fista():
    th, tk = 1.0, 1.0
    for _ in range(50):
        new = core.next_theta(th)
        tk = (1 + np.sqrt(1 + 4 * tk * tk)) / 2
        assert abs(new - 1 / tk) < 1e-12
        assert abs((1 - new) / new**2 - 1 / th**2) < 1e-8 / th**2
        th = new


def test_apg_objective_close_to_long_reference_run(toy):
    t = toy
    F, UT = t["F"], t["UT"]
    K = F @ F[UT].T
    lam = 0.05
    p = _passes(t)
    G, nobs = p.gram()
    res = core.apg(p, core.span_root(G), lam, 6, 0.5 * nobs, max_iter=1000, tol=1e-5)
    _, _, ref = naive.apg_direct(K, t["Yobs"], lam, max_iter=5000, tol=0.0)
    assert res.converged
    assert abs(res.objective[-1] - ref[-1]) / ref[-1] < 1e-2
    assert res.objective[-1] >= ref[-1] - 1e-9


@pytest.mark.parametrize("lam", [0.5, 2.0])
def test_apg_restart_reaches_reference_in_fewer_iterations(toy, lam):
    """Adaptive restart (function test: the default; gradient test) reaches the long reference run's objective to 1e-5
    relative in fewer iterations than plain FISTA; no run ends below it (same optimum)."""
    t = toy
    F, UT = t["F"], t["UT"]
    _, _, ref = naive.apg_direct(F @ F[UT].T, t["Yobs"], lam, max_iter=5000, tol=0.0)
    fstar = ref.min()
    reach = {}
    for restart in (None, "function", "gradient"):
        p = _passes(t)
        G, nobs = p.gram()
        res = core.apg(
            p, core.span_root(G), lam, 6, 0.5 * nobs, max_iter=400, tol=0.0, restart=restart
        )
        assert res.objective[-1] >= fstar - 1e-9 * fstar
        hit = np.nonzero(res.objective - fstar <= 1e-5 * fstar)[0]
        reach[restart] = int(hit[0]) if hit.size else np.inf
        if restart == "function":
            # after a rise the momentum is reset, so the next step is a proximal gradient
            # step from the iterate: the objective never rises twice in a row
            up = np.diff(res.objective) > 1e-12 * res.objective[1:]
            assert up.any() and not (up[1:] & up[:-1]).any()
    assert reach["function"] < reach[None]
    assert reach["gradient"] < reach[None]


def test_factored_nystrom_kernel_equals_explicit(toy):
    t = toy
    X, land, g = t["X"], t["land"], t["gamma"]
    F = _blocks.features(X, *t["fmap"].args())
    Knr, Krr = naive.rbf(X, land, g), naive.rbf(land, land, g)
    Ktil = Knr @ np.linalg.pinv(Krr, rcond=1e-12) @ Knr.T
    np.testing.assert_allclose(F @ F.T, Ktil, atol=1e-8 * np.abs(Ktil).max())
    np.testing.assert_allclose(F, t["F"], atol=1e-12)


# ------------------------------------------------------------------ estimators

import dask  # noqa: E402
import dask.array as da  # noqa: E402

import ooc_lowrank as ool  # noqa: E402
from ooc_lowrank import OOCLowRankWarning  # noqa: E402
from ooc_lowrank.kernelmaxide import KernelMaxide, Maxide  # noqa: E402


def test_kernelmaxide_f_equals_exact_kernel_solution(toy):
    """n_features_map=None (every row): the fit is the exact-kernel direct APG's solution."""
    t = toy
    X, g, UT = t["X"], t["gamma"], t["UT"]
    est = KernelMaxide(n_features_map=None, gamma=g, alpha=0.5, max_iter=100, random_state=0)
    est.fit(X, t["Yobs"])
    Kex = naive.rbf(X, X, g)[:, UT]
    C, its, objs = naive.apg_direct(Kex, t["Yobs"], 0.5, max_iter=100)
    want = Kex @ C
    np.testing.assert_allclose(est.decision_function(X), want, atol=1e-6 * np.abs(want).max())
    assert est.n_iter_ == len(its)
    np.testing.assert_allclose(est.objective_, objs, rtol=1e-6)


def test_maxide_equals_direct_twin_and_basis_is_left_singular(toy):
    t = toy
    X = t["X"]
    est = Maxide(alpha=0.5, max_iter=100).fit(X, t["Yobs"])
    A = X @ est.projection_
    np.testing.assert_allclose(A.T @ A, np.eye(A.shape[1]), atol=1e-10)
    U, s = naive.left_singular(X, X.shape[1])
    np.testing.assert_allclose(np.abs(U.T @ A), np.eye(5), atol=1e-8)  # same vectors up to sign
    np.testing.assert_allclose(est.singular_values_, s, rtol=1e-10)
    W, _, objs = naive.apg_direct(A, t["Yobs"], 0.5, max_iter=100)
    np.testing.assert_allclose(est.coef_, W, atol=1e-10 * np.abs(W).max())
    np.testing.assert_allclose(est.objective_, objs, rtol=1e-10)


def test_kernelmaxide_orthonormal_basis_is_maxide_on_kernel_features(toy):
    """n_components=k: Maxide's direct APG on A = the rank-k Nystrom features (the top k
    eigenpairs of the landmarks' kernel K_rr) orthonormalized on the UT rows (NumPy twin), in
    memory, chunked and with a streamed F; the fitted map is folded into coef_ (r x m)."""
    t = toy
    X, UT, k = t["X"], t["UT"], 4
    kw = dict(n_features_map=20, gamma=t["gamma"], alpha=0.5, n_components=k, random_state=0)
    est = KernelMaxide(**kw).fit(X, t["Yobs"])
    from ooc_lowrank.kernelmaxide.estimator import RITZ_EXTRA

    A = naive.rank_k_nystrom_basis(X, est.landmarks_, t["gamma"], k, UT, RITZ_EXTRA)
    np.testing.assert_allclose(A[UT].T @ A[UT], np.eye(k), atol=1e-10)
    kk = min(20, k + RITZ_EXTRA)
    M = est.normalization_  # the Nystrom map: M^T K_rr M = I on the top kk eigenvectors
    np.testing.assert_allclose(M.T @ naive.rbf(est.landmarks_, est.landmarks_, t["gamma"]) @ M,
                               np.eye(kk), atol=1e-10)  # fmt: skip
    W, its, objs = naive.apg_direct(A[UT], t["Yobs"][UT], 0.5, max_iter=100)
    want = A @ W
    scale = np.abs(want).max()
    np.testing.assert_allclose(est.decision_function(X), want, atol=1e-8 * scale)
    assert est.n_iter_ == len(its) and est.coef_.shape == (20, t["Yobs"].shape[1])
    assert est.fmap_.kind == "kernel" and M.shape == (20, kk)
    np.testing.assert_allclose(est.objective_, objs, rtol=1e-8)
    for other in (
        KernelMaxide(**kw).fit(_dask(X, 7), t["Yobs"]),
        KernelMaxide(**kw, cache_bytes=0).fit(X, t["Yobs"]),
    ):
        np.testing.assert_allclose(other.decision_function(X), want, atol=1e-8 * scale)
        assert other.n_iter_ == est.n_iter_


def test_kernelmaxide_n_components_above_the_rank_keeps_every_direction(toy):
    """k larger than the landmarks: the basis is every kept direction (k' = r' <= 20)."""
    kw = dict(n_features_map=20, gamma=toy["gamma"], alpha=0.5, random_state=0)
    a = KernelMaxide(**kw, n_components=500).fit(toy["X"], toy["Yobs"])
    b = KernelMaxide(**kw, n_components=20).fit(toy["X"], toy["Yobs"])
    np.testing.assert_array_equal(a.decision_function(toy["X"]), b.decision_function(toy["X"]))
    assert a.rank_ <= 20


def test_kernelmaxide_n_components_needs_landmarks(toy):
    with pytest.raises(ValueError, match="n_components.*n_features_map"):
        KernelMaxide(n_features_map=None, n_components=3).fit(toy["X"], toy["Yobs"])
    with pytest.raises(ValueError, match="n_components"):
        KernelMaxide(n_components=0).fit(toy["X"], toy["Yobs"])


def _dask(X, chunks):
    return da.from_array(X, chunks=(chunks, X.shape[1]))


@pytest.mark.parametrize("cls", [KernelMaxide, Maxide])
def test_chunk_invariance_and_cache_paths(toy, cls):
    t = toy
    kw = dict(alpha=0.5, max_iter=12, random_state=0)
    if cls is KernelMaxide:
        kw.update(n_features_map=20, gamma=t["gamma"])
    ref = cls(**kw).fit(t["X"], t["Yobs"])
    for chunks, cache in [((30, 30), None), ((7, 1, 52), None), ((25, 35), 0)]:
        est = cls(**kw, cache_bytes=cache).fit(_dask(t["X"], chunks), t["Yobs"])
        np.testing.assert_allclose(est.coef_, ref.coef_, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(est.objective_, ref.objective_, rtol=1e-12)


def test_store_input_equals_memory(tmp_path, toy):
    from ooc_lowrank.storage import open_dataset, write_arrays

    t = toy
    url = str(tmp_path / "d.zarr")
    write_arrays(
        url,
        {"X": t["X"], "Y": sp.csr_matrix(t["Ytrue"]), "Y_obs": t["Yobs"]},
        block_rows=16,
    )
    ds = open_dataset(url)
    kw = dict(n_features_map=20, gamma=0.3, alpha=0.5, max_iter=10, random_state=0)
    a = KernelMaxide(**kw).fit(ds)
    b = KernelMaxide(**kw, cache_bytes=0).fit(ds)  # streamed: F recomputed from the store
    np.testing.assert_allclose(a.coef_, b.coef_, rtol=1e-10, atol=1e-12)
    S = a.decision_function(ds["X"])
    assert isinstance(S, da.Array)
    res = a.evaluate(ds, "ranking_loss,p@1")
    Sm = S.compute()
    assert res["ranking_loss"] == pytest.approx(metrics.ranking_loss(t["Ytrue"], Sm), abs=1e-12)
    assert res["p@1"] == pytest.approx(metrics.precision_at_k(t["Ytrue"], Sm, 1), abs=1e-12)


def test_float32_path(toy):
    t = toy
    kw = dict(n_features_map=20, gamma=0.3, alpha=0.5, max_iter=20, random_state=0)
    a = KernelMaxide(**kw).fit(t["X"], t["Yobs"])
    b = KernelMaxide(**kw).fit(t["X"].astype(np.float32), t["Yobs"])
    Sb = b.decision_function(t["X"].astype(np.float32))
    assert Sb.dtype == np.float32
    Sa = a.decision_function(t["X"])
    np.testing.assert_allclose(Sb, Sa, atol=1e-3 * np.abs(Sa).max())


def test_predict_topk_save_load_callback(tmp_path, toy):
    t = toy
    seen = []
    est = KernelMaxide(n_features_map=20, alpha=0.5, max_iter=5, random_state=0, callback=lambda *a: seen.append(a))
    est.fit(t["X"], t["Yobs"])
    assert [s[0] for s in seen] == list(range(1, est.n_iter_ + 1))
    assert seen[-1][2] == pytest.approx(est.objective_[-1])
    S = est.decision_function(t["X"])
    top = est.predict_topk(t["X"], 3)
    np.testing.assert_array_equal(top, metrics.topk_from_scores(S, 3))
    assert isinstance(est.predict_topk(_dask(t["X"], (30, 30)), 3), da.Array)
    for e in (est, Maxide(alpha=0.5, max_iter=5).fit(t["X"], t["Yobs"])):
        e.save(str(tmp_path / type(e).__name__))
        back = ool.load(str(tmp_path / type(e).__name__))
        assert type(back) is type(e)
        np.testing.assert_array_equal(back.decision_function(t["X"]), e.decision_function(t["X"]))


def test_label_without_observation_warns_and_fits(toy):
    t = toy
    Y = t["Yobs"].tolil()
    Y[:, 2] = 0
    Y = sp.csr_matrix(Y)
    Y.eliminate_zeros()
    with pytest.warns(OOCLowRankWarning, match=r"1 label\(s\) have no observed entry \(first: \[2\]\)"):
        est = KernelMaxide(n_features_map=20, alpha=0.5, max_iter=5, random_state=0).fit(t["X"], Y)
    assert np.isfinite(est.coef_).all()


@pytest.mark.parametrize(
    "params, data, exc, msg",
    [
        ({"alpha": 0}, None, ValueError, "alpha must be > 0"),
        ({"alpha": -1.0}, None, ValueError, "alpha must be > 0"),
        ({"n_features_map": 61}, None, ValueError, r"n_features_map must be <= the number of rows of X \(60\)"),
        ({"n_features_map": 0}, None, ValueError, "n_features_map must be >= 1"),
        ({"gamma": -1.0}, None, ValueError, "gamma must be > 0"),
        ({"n_features_map": None, "cache_bytes": 1000}, None, MemoryError, "n_features_map=None .* needs about"),
        ({}, "bad_values", ValueError, r"found 2\.0"),
        ({}, "empty", ValueError, "no observed label at all"),
        ({}, "rows", ValueError, "Y must have as many rows as X"),
        ({}, "nan", ValueError, "X must hold only finite values"),
        ({}, "dense01", ValueError, "dense and holds 0"),
    ],
)
def test_bad_input_fails_before_work(toy, params, data, exc, msg, monkeypatch):
    t = toy
    X, Y = t["X"], t["Yobs"]
    if data == "bad_values":
        Y = Y.copy()
        Y.data[0] = 2.0
    elif data == "empty":
        Y = sp.csr_matrix(Y.shape)
    elif data == "rows":
        Y = Y[:50]
    elif data == "nan":
        X = X.copy()
        X[3, 1] = np.nan
    elif data == "dense01":
        Y = t["Ytrue"]
    calls = []
    monkeypatch.setattr(core, "apg", lambda *a, **k: calls.append(1))
    with pytest.raises(exc, match=msg):
        KernelMaxide(**{"n_features_map": 20, **params}).fit(X, Y)
    assert not calls


def test_store_labels_bad_values_found_by_the_check_pass(tmp_path, toy):
    from ooc_lowrank.storage import open_dataset, write_arrays

    t = toy
    Y = t["Yobs"].copy()
    Y.data[5] = 3.0
    ds = write_arrays(str(tmp_path / "b.zarr"), {"X": t["X"], "Y_obs": Y}, block_rows=16)
    with pytest.raises(ValueError, match="found 1 other stored values"):
        KernelMaxide(n_features_map=20).fit(open_dataset(ds.url))


@pytest.mark.slow
def test_local_cluster_fit_equals_threaded(toy, cluster_client):
    t = toy
    kw = dict(n_features_map=20, gamma=0.3, alpha=0.5, max_iter=8, random_state=0)
    ref = KernelMaxide(**kw).fit(_dask(t["X"], (30, 30)), t["Yobs"])
    with dask.config.set(scheduler=cluster_client):
        est = KernelMaxide(**kw).fit(_dask(t["X"], (30, 30)), t["Yobs"])
    np.testing.assert_allclose(est.coef_, ref.coef_, rtol=1e-12, atol=1e-14)


def test_prediction_is_lazy_and_fit_computes_once_per_pass(toy, counting_scheduler):
    t = toy
    Xd = _dask(t["X"], (30, 30))
    est = KernelMaxide(n_features_map=20, gamma=0.3, alpha=0.5, max_iter=4, random_state=0)
    est.fit(Xd, t["Yobs"])
    # n_passes_ = label check + persist F + gram + per iteration (grad + >= 1 trial pass);
    # one more compute reads the landmark rows
    assert counting_scheduler.count == est.n_passes_ + 1
    assert est.n_passes_ >= 3 + 2 * est.n_iter_
    before = counting_scheduler.count
    S = est.decision_function(Xd)
    top = est.predict_topk(Xd, 2)
    assert counting_scheduler.count == before
    assert S.shape == (60, 6) and top.shape == (60, 2)


def test_n_trials_does_not_change_the_fit(toy):
    t = toy
    kw = dict(n_features_map=20, gamma=0.3, alpha=0.5, max_iter=15, random_state=0)
    fits = [KernelMaxide(**kw, n_trials=k).fit(t["X"], t["Yobs"]) for k in (None, 1, 3)]
    for f in fits[1:]:
        np.testing.assert_allclose(f.coef_, fits[0].coef_, rtol=1e-12, atol=1e-14)
    assert fits[2].n_passes_ <= fits[1].n_passes_


def test_tampered_model_is_refused_at_load(tmp_path, toy):
    import io
    import os

    from ooc_lowrank._persist import ModelFileError

    t = toy
    est = KernelMaxide(n_features_map=20, alpha=0.5, max_iter=3, random_state=0).fit(t["X"], t["Yobs"])
    path = str(tmp_path / "m")
    est.save(path)
    with np.load(os.path.join(path, "arrays.npz")) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["coef"] = arrays["coef"][:, :3]  # wrong number of labels
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    with open(os.path.join(path, "arrays.npz"), "wb") as f:
        f.write(buf.getvalue())
    with pytest.raises(ModelFileError, match="coef"):
        ool.load(path)


@pytest.mark.parametrize("cls", [KernelMaxide, Maxide])
def test_sparse_X_equals_dense(rng, cls):
    X = rng.standard_normal((80, 6))
    X[X < 0.3] = 0
    Yo = mask_labels((rng.random((80, 5)) < 0.3).astype(float), 40, random_state=0)
    kw = dict(n_features_map=20, random_state=0) if cls is KernelMaxide else {}
    a = cls(max_iter=10, **kw).fit(X, Yo)
    b = cls(max_iter=10, **kw).fit(sp.csr_matrix(X), Yo)
    np.testing.assert_allclose(b.coef_, a.coef_, atol=1e-12 * np.abs(a.coef_).max())
    np.testing.assert_allclose(
        b.decision_function(sp.csr_matrix(X)), a.decision_function(X), atol=1e-12
    )


# ------------------------------------------------------------------ model selection (KernelMaxideCV)

from ooc_lowrank.kernels.kernelmaxide import observed_ranking_loss_rows  # noqa: E402


def test_observed_ranking_loss_kernel_vs_brute_force(rng):
    n, m = 50, 8
    S = rng.integers(0, 3, size=(n, m)).astype(float)  # ties
    D = rng.random((n, m))
    Y = sp.csr_matrix(np.where(D < 0.3, 1.0, np.where(D < 0.6, -1.0, 0.0)))
    got = observed_ranking_loss_rows(S, Y.indptr, Y.indices, Y.data)
    np.testing.assert_allclose(got, naive.observed_ranking_loss_rows(S, Y), atol=1e-15)
    assert (got == -1).any() and (got > 0).any()


def _lam_problem():
    """Rank-2 labels of a linear model with 15 % of them flipped, half observed: a huge lam
    shrinks every score to 0 (all held-out pairs tie, loss 1), a tiny one fits the flips."""
    r = np.random.default_rng(5)
    n, d, m = 200, 6, 8
    X = r.standard_normal((n, d))
    Y = (X @ r.standard_normal((d, 2)) @ r.standard_normal((2, m)) > 0).astype(float)
    flip = r.random(Y.shape) < 0.15
    Y[flip] = 1 - Y[flip]
    return X, mask_labels(Y, 50, random_state=0)


def test_kernelmaxide_cv_picks_the_clearly_best_lam():
    from ooc_lowrank.kernelmaxide import KernelMaxideCV, MaxideCV
    from ooc_lowrank.kernelmaxide.cv import split_observed

    X, Yobs = _lam_problem()
    kw = dict(n_features_map=100, max_iter=100, random_state=0)
    cv = KernelMaxideCV(**kw, gammas=[1.0], gamma_scales=None, alphas=[1e4, 3.0, 1e-3],
                        holdout="entries").fit(X, Yobs)  # fmt: skip
    res = cv.cv_results_
    assert cv.best_params_ == {"gamma": 1.0, "alpha": 3.0}
    assert res["mean_test_score"][0] == 1.0  # every score 0: all held-out pairs are ties
    assert res["mean_test_score"][1] < res["mean_test_score"][2] - 0.05
    best = cv.best_estimator_
    assert best.alpha == 3.0 and best.gamma == 1.0
    # the score is the twin's over the hold-out the search used, the refit uses every label
    Yfit, Yval = split_observed(Yobs, 0.25, 0)
    est = KernelMaxide(**kw, gamma=1.0, alpha=3.0).fit(X, Yfit)
    rl = naive.observed_ranking_loss_rows(est.decision_function(X), Yval)
    assert res["split0_test_score"][1] == pytest.approx(rl[rl >= 0].mean(), abs=1e-12)
    full = KernelMaxide(**kw, gamma=1.0, alpha=3.0).fit(X, Yobs)
    np.testing.assert_array_equal(best.coef_, full.coef_)
    assert "mean ranking loss" in cv.format_cv_table()
    m = MaxideCV(alphas=[1e4, 1.0], max_iter=50).fit(X, Yobs)
    # the default grid holds Maxide's default k = 100 (issue 28), first; here above the rank
    # of X, so the same fits as None and the tie goes to the first
    assert list(m.cv_results_["param_n_components"]) == [100, 100, None, None]
    assert m.best_params_ == {"n_components": 100, "alpha": 1.0}
    # the defaults: whole rows held out, the same choice, scored on split_observed(by="rows")
    rows = KernelMaxideCV(**kw, gammas=[1.0], gamma_scales=None, alphas=[1e4, 3.0],
                          refit=False).fit(X, Yobs)  # fmt: skip
    assert rows.best_params_ == {"gamma": 1.0, "alpha": 3.0}
    Yfit, Yval = split_observed(Yobs, 0.25, 0, by="rows")
    est = KernelMaxide(**kw, gamma=1.0, alpha=3.0).fit(X, Yfit)
    rl = naive.observed_ranking_loss_rows(est.decision_function(X), Yval)
    assert rows.cv_results_["split0_test_score"][1] == pytest.approx(rl[rl >= 0].mean(), abs=1e-12)


def _store(tmp_path, t):
    from ooc_lowrank.storage import open_dataset, write_arrays

    url = str(tmp_path / "s.zarr")
    arrays = {"X": t["X"], "Y": sp.csr_matrix(t["Ytrue"]), "Y_obs": t["Yobs"]}
    write_arrays(url, arrays, block_rows=16)
    return open_dataset(url)


@pytest.mark.parametrize(
    "cls, kw",
    [
        (KernelMaxide, dict(n_features_map=20, gamma=0.3)),
        (KernelMaxide, dict(n_features_map=None, gamma=0.3)),
        (Maxide, dict(n_components=4)),
    ],
)
@pytest.mark.parametrize("source", ["memory", "dask", "dask streamed", "store", "store streamed"])
def test_fit_lams_shares_the_setup_and_equals_separate_fits(tmp_path, toy, cls, kw, source):
    """KernelMaxideCV's path: one setup, one APG per lam, the same models as separate fits
    (bitwise on the same input), for cached and streamed F and store / Dask input."""
    t = toy
    if "streamed" in source and kw.get("n_features_map", 1) is None:
        pytest.skip("KernelMaxide-f always caches its kernel")
    X = {"memory": t["X"], "dask": _dask(t["X"], (25, 35))}.get(source.split()[0])
    Y = t["Yobs"]
    if X is None:
        X, Y = _store(tmp_path, t), None
    kw = dict(kw, max_iter=15, random_state=0, cache_bytes=0 if "streamed" in source else None)
    lams = [0.2, 2.0, 20.0]
    from ooc_lowrank.kernelmaxide import estimator as est_mod

    setups = []
    real = est_mod._MaxideBase._setup
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(
            est_mod._MaxideBase, "_setup", lambda self, *a: setups.append(1) or real(self, *a)
        )
        shared = cls(**kw, alpha=1.0)._fit_lams(X, Y, lams)
        assert len(setups) == 1
        for lam, got in zip(lams, shared):
            want = cls(**kw, alpha=lam).fit(X, Y)
            assert got.alpha == lam
            np.testing.assert_array_equal(got.coef_, want.coef_)
            np.testing.assert_array_equal(got.objective_, want.objective_)
            assert (got.n_iter_, got.n_passes_, got.rank_, got.n_ut_) == (
                want.n_iter_, want.n_passes_, want.rank_, want.n_ut_)  # fmt: skip
            for a in cls._feature_attrs:
                np.testing.assert_array_equal(getattr(got, a), getattr(want, a))
            np.testing.assert_array_equal(
                got.decision_function(t["X"]), want.decision_function(t["X"])
            )
    assert len({id(e) for e in shared}) == 3 and len(setups) == 4


def test_kernelmaxide_cv_scores_equal_separate_fits(toy):
    """Every hold-out score of the search (shared setups) is the score of a separate fit."""
    from ooc_lowrank.kernelmaxide import KernelMaxideCV
    from ooc_lowrank.kernelmaxide.cv import split_observed

    t = toy
    kw = dict(n_features_map=20, max_iter=15, random_state=3)
    cv = KernelMaxideCV(**kw, gammas=[0.1, 0.3], gamma_scales=None, alphas=[0.2, 2.0], n_splits=2,
                        validation_fraction=0.3, refit=False).fit(t["X"], t["Yobs"])  # fmt: skip
    for k in range(2):
        Yfit, Yval = split_observed(t["Yobs"], 0.3, 3 + k, by="rows")
        for i, p in enumerate(cv.cv_results_["params"]):
            est = KernelMaxide(**kw, **p).fit(t["X"], Yfit)
            got = cv.cv_results_[f"split{k}_test_score"][i]
            want = est.observed_ranking_loss(t["X"], Yval)
            assert got == want or (np.isnan(got) and np.isnan(want))
    splits = np.vstack([cv.cv_results_[f"split{k}_test_score"] for k in range(2)])
    np.testing.assert_array_equal(cv.cv_results_["mean_test_score"], np.nanmean(splits, axis=0))
    assert KernelMaxideCV().n_splits == 3  # the default (docs/kernelmaxide.md section 6b)


def test_kernelmaxide_cv_squared_error_score_is_the_held_out_squared_error():
    from ooc_lowrank.kernelmaxide import KernelMaxideCV, MaxideCV
    from ooc_lowrank.kernelmaxide.cv import split_observed

    X, Yobs = _lam_problem()
    kw = dict(n_features_map=100, max_iter=100, random_state=0)
    kw = dict(kw, n_components=None)  # SPEC KM-6: the CV machinery, not the model
    cv = KernelMaxideCV(**kw, gammas=[1.0], gamma_scales=None, alphas=[1e4, 3.0], refit=False,
                        holdout="entries", scoring="squared_error")  # fmt: skip
    cv.fit(X, Yobs)
    assert cv.best_params_ == {"gamma": 1.0, "alpha": 3.0}
    Yfit, Yval = split_observed(Yobs, 0.25, 0)
    for i, lam in enumerate([1e4, 3.0]):
        S = KernelMaxide(**kw, gamma=1.0, alpha=lam).fit(X, Yfit).decision_function(X)
        r, c = Yval.nonzero()
        want = np.mean((S[r, c] - np.asarray(Yval[r, c]).ravel()) ** 2)
        assert cv.cv_results_["split0_test_score"][i] == pytest.approx(want, rel=1e-10)
    assert cv.cv_results_["mean_test_score"][0] == pytest.approx(1.0, abs=1e-3)  # scores ~ 0
    assert "mean squared error" in cv.format_cv_table()
    m = MaxideCV(alphas=[1e4, 1.0], max_iter=50, scoring="squared_error").fit(X, Yobs)
    assert m.best_params_["alpha"] == 1.0


def test_split_observed_rows_holds_out_whole_rows():
    from ooc_lowrank.kernelmaxide.cv import split_observed

    _, Yobs = _lam_problem()
    Yfit, Yval = split_observed(Yobs, 0.3, 4, by="rows")
    fit_rows = np.flatnonzero(np.diff(Yfit.indptr))
    val_rows = np.flatnonzero(np.diff(Yval.indptr))
    assert len(np.intersect1d(fit_rows, val_rows)) == 0  # no row on both sides
    np.testing.assert_array_equal((Yfit + Yval).toarray(), Yobs.toarray())  # nothing lost
    for i in val_rows:  # a held-out row keeps every one of its observed labels, none in the fit
        assert Yval[i].nnz == Yobs[i].nnz
    labelled = np.flatnonzero(np.diff(Yobs.indptr))
    assert 0.15 < len(val_rows) / len(labelled) < 0.45
    again = split_observed(Yobs, 0.3, 4, by="rows")[1]
    assert (again != Yval).nnz == 0  # seeded
    with pytest.raises(ValueError, match='by must be "entries" or "rows"'):
        split_observed(Yobs, 0.3, 4, by="cols")


@pytest.mark.parametrize(
    "params, exc, msg",
    [
        ({"alphas": []}, ValueError, "alphas must not be empty"),
        ({"alphas": [1.0, -2.0]}, ValueError, r"alphas must hold only finite numbers > 0 \(found -2.0\)"),
        ({"alphas": "1,2"}, TypeError, "alphas must be a non-empty list"),
        ({"alphas": [1.0, 1.0]}, ValueError, "alphas must not repeat a value"),
        ({"gamma_scales": [0.0]}, ValueError, "gamma_scales must hold only finite numbers > 0"),
        ({"gammas": [1.0]}, ValueError, "exactly one must be given"),
        ({"validation_fraction": 1.0}, ValueError, "validation_fraction must be < 1"),
        ({"n_splits": 0}, ValueError, "n_splits must be >= 1"),
        ({"holdout": "cols"}, ValueError, 'holdout must be "entries"'),
        ({"scoring": "auc"}, ValueError, "scoring must be one of"),
    ],
)
def test_kernelmaxide_cv_bad_grid_fails_before_work(toy, params, exc, msg, monkeypatch):
    from ooc_lowrank.kernelmaxide import KernelMaxideCV

    calls = []
    monkeypatch.setattr(core, "apg", lambda *a, **k: calls.append(1))
    with pytest.raises(exc, match=msg):
        KernelMaxideCV(**params).fit(toy["X"], toy["Yobs"])
    assert not calls


# ------------------------------------------------------------------ the yahoo loader

from conftest import data_file  # noqa: E402


def test_load_yahoo_by_name_and_path_and_errors(tmp_path):
    from ooc_lowrank.datasets import load_yahoo

    folder = data_file("yahoo", "arts.mat").parent
    X, Y = load_yahoo("ARTS", folder=folder)  # any case
    assert X.shape == (5000, 462) and Y.shape == (5000, 26) and X.dtype == np.float64
    assert set(np.unique(Y)) == {0.0, 1.0} and Y.sum(axis=1).max() <= 14  # SPEC 4.6 Table 1
    X2, Y2 = load_yahoo(folder / "arts.mat", dtype=np.float32)
    assert X2.dtype == np.float32 and np.array_equal(Y2, Y)
    with pytest.raises(FileNotFoundError, match="path_or_name 'nosuch': no nosuch.mat"):
        load_yahoo("nosuch", folder=folder)
    import scipy.io as sio

    sio.savemat(tmp_path / "bad.mat", {"train_data": np.zeros((2, 2))})
    with pytest.raises(ValueError, match="must hold train_data, test_data"):
        load_yahoo(tmp_path / "bad.mat")


def _planted():
    """400 x 8 features, 10 labels of a rank-3 nonlinear model, 30 % of the training labels
    observed, rows 360.. are test rows: SPEC KM-6's span form does not meet the 1e-5 stop in
    600 iterations on it (its UT Gram's eigenvalues spread over decades)."""
    r = np.random.default_rng(3)
    n, d, m = 400, 8, 10
    X = r.standard_normal((n, d))
    Y = (np.tanh(X @ r.standard_normal((d, 3))) @ r.standard_normal((3, m)) > 0).astype(float)
    return X, mask_labels(Y, 30, train=np.arange(n) < 360, random_state=0)


def test_kernelmaxide_defaults_meet_the_stopping_rule_in_few_iterations():
    """KernelMaxide-n's default (the orthonormal kernel basis, issue 24) is well conditioned:
    the paper's 1e-5 relative-change stop (SPEC 4.4) fires, within 40 iterations, where SPEC
    KM-6 (n_components=None) runs into max_iter."""
    X, Yobs = _planted()
    est = KernelMaxide(n_features_map=150, random_state=0).fit(X, Yobs)
    assert est.converged_ and est.n_iter_ <= 40
    km6 = KernelMaxide(n_features_map=150, n_components=None, random_state=0).fit(X, Yobs)
    assert not km6.converged_ and km6.n_iter_ == 100


def test_kernelmaxide_default_objective_is_the_trace_norm_of_the_ut_scores():
    """SPEC check of where the default differs from KM-6: its objective is Maxide's KM-1 on
    the orthonormal kernel basis, ``lam ||S_UT||_* + 1/2 ||R_Omega(S - Y)||^2`` with ``S`` the
    fitted scores (``||W||_* = ||A_UT W||_*``), i.e. ``lam ||K~_UT C||_*`` in the paper's
    ``C`` where KM-6 has ``lam ||C||_*``; ``objective_`` is that value at ``coef_``."""
    X, Yobs = _planted()
    est = KernelMaxide(n_features_map=150, random_state=0).fit(X, Yobs)
    S = est.decision_function(X)
    ut = np.flatnonzero(np.diff(Yobs.indptr))
    Yc = Yobs.tocoo()
    E = 0.5 * np.sum((S[Yc.row, Yc.col] - Yc.data) ** 2)
    want = est.alpha * np.linalg.svd(S[ut], compute_uv=False).sum() + E
    np.testing.assert_allclose(est.objective_[-1], want, rtol=1e-8)


@pytest.mark.parametrize("repeat_landmarks", [False, True])
def test_nystrom_map_is_the_top_eigenpairs_of_the_landmark_kernel(repeat_landmarks):
    """The orthonormal basis's map ``M = V_k diag(l_k)^-1/2`` (issue 24: no r x r
    eigendecomposition, no UT Gram of r columns): exact below the randomized threshold, subspace
    iteration above it; ``M^T K_rr M = I`` either way.  Repeated landmarks (``K_rr`` singular):
    the zero eigenvalues are dropped, never inverted."""
    from ooc_lowrank.kernelmaxide.estimator import nystrom_map

    r = np.random.default_rng(4)
    L = r.standard_normal((60, 5))
    if repeat_landmarks:
        L = np.vstack([L[:30], L[:30]])
    U, gamma = np.ascontiguousarray(L.T), 0.2
    K = _kernel(L, gamma)
    ev, V = np.linalg.eigh(K)
    for k, rand in [(5, False), (8, False), (40, False), (5, True)]:
        if rand:
            M = core.randomized_orthonormal_root(lambda B: K @ B, 60, k, n_iter=8).T
        else:
            M = nystrom_map(U, gamma, k)
        kk = M.shape[1]
        assert kk == (min(k, 30) if repeat_landmarks else k)
        np.testing.assert_allclose(M.T @ K @ M, np.eye(kk), atol=1e-8)
        # the span of the top kk eigenvectors (cosines of the principal angles are 1)
        cos = np.linalg.svd(V[:, -kk:].T @ np.linalg.qr(M)[0], compute_uv=False)
        np.testing.assert_allclose(cos, 1.0, atol=1e-6 if rand else 1e-8)


def _kernel(L, gamma):
    sq = np.sum(L * L, axis=1)
    return np.exp(-gamma * np.maximum(sq[:, None] + sq[None, :] - 2 * L @ L.T, 0.0))


def test_kernelmaxide_n_components_auto():
    """"auto": the orthonormal basis of 100 directions with landmarks, SPEC KM-6 with the
    exact kernel; any other string is refused naming the argument."""
    X, Yobs = _planted()
    assert KernelMaxide(n_features_map=None)._components() is None
    assert KernelMaxide()._components() == 100
    f = KernelMaxide(n_features_map=None, max_iter=3).fit(X[:120], Yobs[:120])
    assert f.normalization_ is None
    with pytest.raises(ValueError, match="n_components"):
        KernelMaxide(n_components="all").fit(X, Yobs)


def test_randomized_orthonormal_root_is_the_top_eigenspace():
    """Subspace iteration (issue 24, many landmarks): ``R G R^T = I`` exactly on the returned
    directions, which span the top-k eigenvectors of G; one product with G per iteration."""
    r = np.random.default_rng(5)
    n, k = 200, 10
    V = np.linalg.qr(r.standard_normal((n, n)))[0]
    g = 100.0 * 0.7 ** np.arange(n)
    G = (V * g) @ V.T
    calls = []

    def gram_times(B):
        calls.append(B.shape)
        return G @ B

    R = core.randomized_orthonormal_root(gram_times, n, k, oversample=10, n_iter=3, seed=1)
    assert R.shape == (k, n) and calls == [(n, k + 10)] * 3
    np.testing.assert_allclose(R @ G @ R.T, np.eye(k), atol=1e-10)
    cos = np.linalg.svd(V[:, :k].T @ np.linalg.qr(R.T)[0], compute_uv=False)
    np.testing.assert_allclose(cos, 1.0, atol=1e-5)
    exact = core.orthonormal_root(G, k)  # the same directions up to sign
    np.testing.assert_allclose(np.abs(R @ G @ exact.T), np.eye(k), atol=1e-4)


def test_randomized_orthonormal_root_float32_sketch():
    """``sketch_dtype=np.float32`` (issue 24): the subspace products get float32 blocks, the
    Rayleigh-Ritz product float64; ``R G R^T = I`` still to float64 rounding, and the same
    directions as the float64 sketch to float32 accuracy."""
    r = np.random.default_rng(6)
    n, k = 200, 10
    V = np.linalg.qr(r.standard_normal((n, n)))[0]
    G = (V * (100.0 * 0.8 ** np.arange(n))) @ V.T
    G32, dtypes = G.astype(np.float32), []

    def gram_times(B):
        dtypes.append(B.dtype)
        return (G32 if B.dtype == np.float32 else G) @ B

    R = core.randomized_orthonormal_root(gram_times, n, k, n_iter=3, sketch_dtype=np.float32)
    assert dtypes == [np.float32, np.float32, np.float64]
    np.testing.assert_allclose(R @ G @ R.T, np.eye(k), atol=1e-10)
    R64 = core.randomized_orthonormal_root(lambda B: G @ B, n, k, n_iter=3)
    cos = np.linalg.svd(np.linalg.qr(R64.T)[0].T @ np.linalg.qr(R.T)[0], compute_uv=False)
    np.testing.assert_allclose(cos, 1.0, atol=1e-5)


def test_kernelmaxide_many_landmarks_use_the_randomized_basis(monkeypatch):
    """n_landmarks > RANDOMIZED_RATIO (k + oversample): the basis from subspace iteration on
    the UT Gram (no extra pass), cached and streamed F alike, with the exact basis's scores."""
    from ooc_lowrank.kernelmaxide import estimator as est_mod

    X, Yobs = _planted()
    kw = dict(n_features_map=150, n_components=5, random_state=0)
    monkeypatch.setattr(est_mod, "RITZ_EXTRA", 0)  # the map of 5 eigenpairs: randomized
    assert 150 > est_mod.RANDOMIZED_RATIO * (5 + est_mod.RANDOMIZED_OVERSAMPLE)
    calls = []
    root = core.randomized_orthonormal_root
    monkeypatch.setattr(
        core, "randomized_orthonormal_root", lambda *a, **k: calls.append(1) or root(*a, **k)
    )
    a = KernelMaxide(**kw).fit(X, Yobs)
    s = KernelMaxide(**kw, cache_bytes=0).fit(X, Yobs)
    assert len(calls) == 2
    monkeypatch.setattr(est_mod, "RANDOMIZED_RATIO", 10**9)
    b = KernelMaxide(**kw).fit(X, Yobs)
    assert len(calls) == 2 and a.n_passes_ == b.n_passes_
    Sa, Sb = a.decision_function(X), b.decision_function(X)
    np.testing.assert_allclose(s.decision_function(X), Sa, atol=1e-8 * np.abs(Sa).max())
    # the subspace error of 4 iterations with 20 extra directions: scores within 1 % of the
    # exact basis's here (a wrong basis is off by the scores' own size)
    np.testing.assert_allclose(Sa, Sb, atol=1e-2 * np.abs(Sb).max())


@pytest.mark.parametrize("n_components, ritz", [(None, None), (5, 0)])
def test_landmark_rows_take_their_features_from_the_nystrom_map(monkeypatch, n_components, ritz):
    """In-memory X (issue 24): the landmarks' own features ``K_rr M`` come with the Nystrom map
    (from the eigensolver's products, exact or randomized root), so the cached F computes only
    the other UT rows; the fit equals the one from a Dask X (every UT row computed, uneven
    chunks) to rounding, and ``K_rr M`` is the product it replaces."""
    from ooc_lowrank.kernelmaxide import estimator as est_mod

    X, Yobs = _planted()
    kw = dict(n_features_map=150, random_state=0)
    if ritz is not None:  # 150 > RANDOMIZED_RATIO (5 + oversample): the randomized root
        monkeypatch.setattr(est_mod, "RITZ_EXTRA", ritz)
        kw["n_components"] = n_components
    computed = []
    feats = _blocks.features
    monkeypatch.setattr(
        _blocks, "features", lambda Xb, *a: computed.append(Xb.shape[0]) or feats(Xb, *a)
    )
    a = KernelMaxide(**kw).fit(X, Yobs)
    n_a, computed[:] = sum(computed), []
    b = KernelMaxide(**kw).fit(_dask(X, 97), Yobs)
    n_b = sum(computed)
    ut = np.diff(Yobs.indptr) > 0
    np.testing.assert_array_equal(a.landmarks_, b.landmarks_)
    rows = np.flatnonzero(ut)
    n_land_ut = np.count_nonzero((X[rows][:, None, :] == a.landmarks_[None]).all(-1).any(1))
    assert n_b == ut.sum() and n_a == ut.sum() - n_land_ut > 0
    Sa, Sb = a.decision_function(X), b.decision_function(X)
    np.testing.assert_allclose(Sa, Sb, atol=1e-8 * np.abs(Sb).max())
    U, g = np.ascontiguousarray(a.landmarks_.T), a.gamma_
    k = 200 if ritz is None else 5
    M, KM = est_mod.nystrom_map(U, g, k, return_product=True)
    np.testing.assert_array_equal(M, est_mod.nystrom_map(U, g, k))
    np.testing.assert_allclose(KM, _kernel(a.landmarks_, g) @ M, atol=1e-9 * np.abs(KM).max())


@pytest.mark.parametrize("density", [0.05, 0.5])
def test_features_of_mostly_zero_dense_rows_and_rank_k_map_vs_twin(rng, density, monkeypatch):
    """``features`` (issue 24): dense rows with few nonzeros (``SPARSE_DENSITY``) take the
    kernel from their nonzeros, the rank-k Nystrom map (r x k ``M``) one product ``K M``; equal
    to the NumPy twin, the dense BLAS path, and themselves over any row split."""
    X = rng.standard_normal((40, 30)) * (rng.random((40, 30)) < density)
    L = rng.standard_normal((12, 30)) * (rng.random((12, 30)) < 0.3)
    U, gamma = np.ascontiguousarray(L.T), 0.05
    K = naive.rbf(X, L, gamma)
    for M in (None, rng.standard_normal((12, 4)), rng.standard_normal((12, 12))):
        kind = "kernel" if M is None else "nystrom"
        want = K if M is None else K @ M
        got = _blocks.features(X, kind, U, M, gamma)
        # the rank-k map of mostly-zero rows: float32 inside (F32_TOL), float64 out
        f32 = M is not None and M.shape[1] < 12 and density <= _blocks.SPARSE_DENSITY
        tol = 1e-5 if f32 else 1e-12
        assert got.dtype == np.float64
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.abs(want).max())
        if f32:  # float32 rounding, not float64's
            assert np.abs(got - want).max() > 1e-12 * np.abs(want).max()
        parts = np.vstack([_blocks.features(X[a:b], kind, U, M, gamma)
                           for a, b in [(0, 1), (1, 17), (17, 40)]])  # fmt: skip
        np.testing.assert_allclose(parts, got, rtol=1e-14, atol=1e-14 * np.abs(got).max())
        monkeypatch.setattr(_blocks, "SPARSE_DENSITY", -1.0)  # the dense BLAS path
        dense = _blocks.features(X, kind, U, M, gamma)
        monkeypatch.undo()
        np.testing.assert_allclose(dense, got, rtol=tol, atol=tol * np.abs(got).max())


def test_float32_rank_k_features_fall_back_to_float64(rng):
    """``features`` of the rank-k map (issue 24) runs in float32 only within ``F32_TOL``: rows
    far from the origin (the exponent from ``||x||^2 + ||u||^2 - 2 x.u`` cancels) or a map
    whose columns' norms spread over decades (a steep kernel spectrum) take float64, equal to
    the twin to float64 rounding; float32 rows stay float32."""
    X = rng.standard_normal((30, 20)) * (rng.random((30, 20)) < 0.1)
    far = X.copy()
    far[:, 0] = 1e4  # every row far from the origin along one column, as close as before
    M = rng.standard_normal((8, 3))
    for Xs, Ms in [(far, M), (X, M * np.array([1.0, 1e3, 1.0]))]:
        Ls = Xs[:8]
        d2 = ((Xs[:, None, :] - Ls[None]) ** 2).sum(-1)  # no cancellation
        gamma = 1.0 / np.median(d2)
        want = np.exp(-gamma * d2) @ Ms
        got = _blocks.features(Xs, "nystrom", np.ascontiguousarray(Ls.T), Ms, gamma)
        np.testing.assert_allclose(got, want, rtol=1e-7, atol=1e-7 * np.abs(want).max())
    L = X[:8]
    U = np.ascontiguousarray(L.T)
    got32 = _blocks.features(X.astype(np.float32), "nystrom", U, M, 0.1)
    assert got32.dtype == np.float32
    # the float32 path itself: CSR rows give the dense rows' bits, float32 rounding of the twin
    dense = _blocks.features(X, "nystrom", U, M, 0.1)
    np.testing.assert_array_equal(_blocks.features(sp.csr_matrix(X), "nystrom", U, M, 0.1), dense)
    want = naive.rbf(X, L, 0.1) @ M
    np.testing.assert_allclose(dense, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_rbf_sparse_rows_kernel_vs_twin(rng, dtype):
    """``rbf_sparse_rows`` (issue 24): the kernel block from each row's nonzeros equals the NumPy
    twin for dense and CSR rows (empty rows, 1..9 nonzeros around the unroll by four, unsorted
    CSR indices), read-only inputs, every row the same bits alone as in the block."""
    from ooc_lowrank.kernels.kernelmaxide import rbf_sparse_rows

    n, d, r, gamma = 23, 30, 17, 0.07
    X = np.zeros((n, d))
    for i in range(1, n):  # row 0 empty; rows with 1 .. 9 nonzeros and some fuller rows
        cols = rng.choice(d, size=min(d, i if i < 10 else 3 * i // 2), replace=False)
        X[i, cols] = rng.standard_normal(cols.size)
    X = X.astype(dtype)
    U = (rng.standard_normal((d, r)) * (rng.random((d, r)) < 0.5)).astype(dtype)
    want = naive.rbf(X.astype(np.float64), U.T.astype(np.float64), gamma)
    tol = 1e-12 if dtype == np.float64 else 2e-5
    C = sp.csr_matrix(X)
    perm = [rng.permutation(np.arange(a, b)) for a, b in zip(C.indptr[:-1], C.indptr[1:])]
    perm = np.concatenate(perm).astype(np.int64)
    shuffled = sp.csr_matrix((C.data[perm], C.indices[perm], C.indptr), shape=C.shape)
    X.flags.writeable = U.flags.writeable = False
    for Xin in (X, C, shuffled):
        K, xsq = rbf_sparse_rows(Xin, U, gamma)
        assert K.dtype == dtype and K.shape == (n, r)
        np.testing.assert_allclose(K, want, rtol=tol, atol=tol)
        np.testing.assert_allclose(xsq, (X.astype(np.float64) ** 2).sum(1), rtol=tol)
        rows = np.vstack([rbf_sparse_rows(Xin[i : i + 1], U, gamma)[0] for i in range(n)])
        np.testing.assert_array_equal(rows, K)


def test_median_heuristic_and_landmark_kernel_from_nonzeros_equal_the_dense_ones(rng):
    """Mostly-zero rows (issue 24): the median heuristic's pair distances and the landmarks'
    kernel ``K_rr`` come from the rows' nonzeros; the same gamma and ``K_rr`` (symmetric) as
    the dense products of ``gimc.features.median_gamma`` and the twin."""
    from ooc_lowrank.gimc.features import median_gamma, sample_rows
    from ooc_lowrank.kernelmaxide.estimator import rbf_gram

    X = rng.standard_normal((300, 40)) * (rng.random((300, 40)) < 0.06)
    assert _blocks.mostly_zero(X)
    est = KernelMaxide(random_state=0)
    got = est._gamma(X, np.random.default_rng(7))
    want = median_gamma(sample_rows(X, 1000, np.random.default_rng(7)))
    np.testing.assert_allclose(got, want, rtol=1e-12)
    L = X[:50]
    K = rbf_gram(np.ascontiguousarray(L.T), got)
    np.testing.assert_array_equal(K, K.T)
    np.testing.assert_allclose(K, naive.rbf(L, L, got), rtol=1e-12, atol=1e-14)


def test_setup_kernels_by_row_parts_are_bitwise_the_whole(rng, monkeypatch):
    """The driver's setup runs in row parts on the engine's pool (issue 24): ``rbf_sparse_rows``
    / ``sq_dists_sparse_rows`` into row slices of one ``out`` give the bits of one call, so
    ``rbf_gram`` and the median heuristic do not depend on the part count; a wrong ``out`` is
    refused naming it."""
    from ooc_lowrank import engine
    from ooc_lowrank.kernelmaxide import estimator as est_mod
    from ooc_lowrank.kernels.kernelmaxide import rbf_sparse_rows, sq_dists_sparse_rows

    X = rng.standard_normal((300, 40)) * (rng.random((300, 40)) < 0.06)
    U = np.ascontiguousarray(X[:270].T)
    whole_k, whole_d = rbf_sparse_rows(X, U, 0.3)[0], sq_dists_sparse_rows(X, U)
    K, D = np.empty_like(whole_k), np.empty_like(whole_d)
    for lo, hi in [(0, 1), (1, 130), (130, 300)]:
        rbf_sparse_rows(X[lo:hi], U, 0.3, out=K[lo:hi])
        sq_dists_sparse_rows(X[lo:hi], U, out=D[lo:hi])
    np.testing.assert_array_equal(K, whole_k)
    np.testing.assert_array_equal(D, whole_d)
    with pytest.raises(ValueError, match="out: must be a C-contiguous float64"):
        rbf_sparse_rows(X, U, 0.3, out=np.empty((300, 270), dtype=np.float32))
    with pytest.raises(ValueError, match="out: must be"):
        rbf_sparse_rows(X, U, 0.3, out=np.empty((270, 300)).T)
    assert engine.local_map(lambda i: i * i, 5) == [0, 1, 4, 9, 16]
    for A in (U.T, np.ascontiguousarray(U.T)):  # a transposed (F-ordered) operand; C-ordered
        np.testing.assert_allclose(core.matmul_rows(A, X.T[:, :9]), A @ X.T[:, :9], rtol=1e-13,
                                   atol=1e-13)  # fmt: skip
    parts = [est_mod.rbf_gram(U, 0.3), est_mod.KernelMaxide()._gamma(X, np.random.default_rng(1))]
    monkeypatch.setattr(core, "ROW_PARTS", 1)
    one = [est_mod.rbf_gram(U, 0.3), est_mod.KernelMaxide()._gamma(X, np.random.default_rng(1))]
    np.testing.assert_array_equal(parts[0], one[0])
    assert parts[1] == one[1]
    np.testing.assert_array_equal(parts[0], 0.5 * (whole_k[:270] + whole_k[:270].T))


def test_exact_median_is_numpy_median_bitwise(rng):
    """The median heuristic's median by selection between sample quantiles (issue 24) is
    ``np.median``'s value and type, odd and even sizes, ties, sorted / reversed input, a zero
    majority, non-finite values (the full ``np.median``) and small arrays."""
    from ooc_lowrank.gimc.features import exact_median

    r = rng
    cases = [
        r.random(499_500), r.random(100_001), r.integers(0, 5, 200_000).astype(float),
        np.ones(60_000), np.sort(r.random(70_000)), np.sort(r.random(70_001))[::-1].copy(),
        r.standard_normal(40_000) ** 3, np.r_[np.zeros(50_000), r.random(50_000)],
        np.r_[np.zeros(52_000), r.random(48_000)], np.r_[r.random(50_000), np.inf, np.nan],
        r.random(7), np.zeros(0),
    ]  # fmt: skip
    for v in cases:
        with np.errstate(invalid="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # the empty array's mean
            want, got = np.median(v), exact_median(v)
        assert type(got) is type(want)
        np.testing.assert_array_equal(got, want)


def test_randomized_orthonormal_root_qr_fallback(monkeypatch):
    """The Rayleigh-Ritz on the LU basis is the generalized eigenproblem ``(Q^T G Q, Q^T Q)``;
    when that fails (``Q^T Q`` not numerically positive definite) an orthonormal basis and the
    standard problem give the same directions, ``R G R^T = I`` still."""
    import scipy.linalg

    r = np.random.default_rng(8)
    n, k = 120, 6
    V = np.linalg.qr(r.standard_normal((n, n)))[0]
    G = (V * (50.0 * 0.7 ** np.arange(n))) @ V.T
    want = core.randomized_orthonormal_root(lambda B: G @ B, n, k, n_iter=3)

    calls = []

    def refuse(a, b=None, **kw):
        calls.append(b is not None)
        raise np.linalg.LinAlgError("not positive definite")

    monkeypatch.setattr(scipy.linalg, "eigh", refuse)
    R = core.randomized_orthonormal_root(lambda B: G @ B, n, k, n_iter=3)
    assert calls == [True]  # the generalized problem was tried first
    np.testing.assert_allclose(R @ G @ R.T, np.eye(k), atol=1e-10)
    np.testing.assert_allclose(np.abs(R @ G @ want.T), np.eye(k), atol=1e-8)


def test_features_of_csr_rows_with_duplicate_entries(rng):
    """A CSR block with duplicate stored entries (non-canonical) is the sum of its entries: the
    same features as its dense form (the kernel's row norm would add the duplicates' squares
    apart)."""
    X = rng.standard_normal((6, 10)) * (rng.random((6, 10)) < 0.3)
    C = sp.csr_matrix(X)
    # every entry stored twice as two halves (built from its arrays: scipy keeps them)
    dup = sp.csr_matrix((np.repeat(C.data / 2, 2), np.repeat(C.indices, 2), 2 * C.indptr),
                        shape=X.shape)  # fmt: skip
    assert dup.nnz == 2 * C.nnz and not dup.has_canonical_format
    U = rng.standard_normal((10, 4))
    np.testing.assert_allclose(_blocks.features(dup, "kernel", U, None, 0.2),
                               naive.rbf(X, U.T, 0.2), rtol=1e-12)  # fmt: skip


def test_features_overflowing_row_norm_names_the_row():
    """A row whose squared norm overflows is refused by the sparse-row kernel path too."""
    X = np.zeros((4, 20))
    X[2, 3] = 1e200
    U = np.ones((20, 3))
    from ooc_lowrank._validation import NonFiniteError

    with pytest.raises(NonFiniteError, match="row 2"):
        _blocks.features(X, "kernel", U, None, 0.1)


def test_maxide_auto_alpha_is_the_held_out_selection_and_saves(tmp_path):
    """``Maxide(alpha="auto")`` (issue 28): each weight ``a`` is scored by separate fits
    ``Maxide(alpha=a * share)`` on the rows hold-outs of split_observed (``share`` = the fit's
    observed entries / all, the loss being a sum over them) although they share one setup;
    the lowest mean wins and the model is ``Maxide(alpha=alpha_)``'s; ``alpha_`` is saved."""
    from ooc_lowrank import load
    from ooc_lowrank.kernelmaxide.cv import split_observed
    from ooc_lowrank.kernelmaxide.estimator import AUTO_ALPHAS, AUTO_FRACTION, AUTO_SPLITS

    X, Yobs = _planted()
    est = Maxide(n_components=6, alpha="auto", random_state=3).fit(X, Yobs)
    want = np.zeros(len(AUTO_ALPHAS))
    for s in range(AUTO_SPLITS):
        Yfit, Yval = split_observed(Yobs, AUTO_FRACTION, 3 + s, by="rows")
        share = Yfit.nnz / Yobs.nnz
        assert share < 0.9
        for j, a in enumerate(AUTO_ALPHAS):
            e = Maxide(n_components=6, alpha=a * share).fit(X, Yfit)
            want[j] += e.observed_ranking_loss(X, Yval) / AUTO_SPLITS
    np.testing.assert_allclose(list(est.alpha_scores_.values()), want, rtol=1e-10)
    assert est.alpha == "auto" and est.alpha_ == AUTO_ALPHAS[int(np.argmin(want))]
    fixed = Maxide(n_components=6, alpha=est.alpha_).fit(X, Yobs)
    np.testing.assert_array_equal(est.coef_, fixed.coef_)
    assert est.n_passes_ > fixed.n_passes_  # the hold-out fits are counted
    # another seed, other hold-outs
    other = Maxide(n_components=6, alpha="auto", random_state=4).fit(X, Yobs)
    assert other.alpha_scores_ != est.alpha_scores_
    est.save(tmp_path / "m")
    back = load(tmp_path / "m")
    assert back.alpha == "auto" and back.alpha_ == est.alpha_


def test_maxide_auto_alpha_falls_back_without_a_scorable_hold_out():
    """No held-out row with an observed positive and negative: the fixed fallback weight."""
    from ooc_lowrank.kernelmaxide.estimator import AUTO_FALLBACK

    X, _ = _planted()
    r = np.arange(40)
    # one observed label per row: no held-out row has a pair to rank
    Y = sp.csr_matrix((np.where(r % 2, 1.0, -1.0), (r, r % 3)), shape=(X.shape[0], 3))
    est = Maxide(n_components=4, alpha="auto").fit(X, Y)
    assert est.alpha_ == AUTO_FALLBACK and np.isnan(list(est.alpha_scores_.values())).all()


@pytest.mark.parametrize("alpha, msg", [("best", 'alpha must be "auto" or a positive float'),
                                        (0.0, "alpha must be > 0")])  # fmt: skip
def test_maxide_bad_alpha_fails_before_work(toy, alpha, msg):
    with pytest.raises(ValueError, match=msg):
        Maxide(alpha=alpha).fit(toy["X"], toy["Yobs"])


def test_median_heuristic_on_the_landmarks_reuses_their_distances(rng, monkeypatch):
    """``gamma=None`` with at least 1000 landmarks (issue 24): the median heuristic runs on the
    first 1000 landmarks' own pairs and their distances give ``K_rr`` too, so the setup computes
    one r x r set of distances and no separate kernel of the landmarks (``rbf_gram`` is not
    called).  ``gamma_`` is ``1 / median`` of the landmarks' pair distances (the twin's); the
    landmarks are still the second row sample of the seed (the rows of earlier fits)."""
    from ooc_lowrank.gimc.features import sample_rows
    from ooc_lowrank.kernelmaxide import estimator as est_mod

    n, d = 1100, 40
    X = rng.standard_normal((n, d)) * (rng.random((n, d)) < 0.1)
    X[:, 0] += 1.0  # no empty row
    Y = np.where(X[:, :3] > 0, 1.0, -1.0) * (rng.random((n, 3)) < 0.5)
    calls = {"rbf_gram": 0, "sq_dists": 0}
    rbf_gram, sq_dists = est_mod.rbf_gram, est_mod.sq_dists_sparse_rows

    def counted(name, fn):
        def wrapper(*a, **k):
            calls[name] += 1
            return fn(*a, **k)
        return wrapper

    monkeypatch.setattr(est_mod, "rbf_gram", counted("rbf_gram", rbf_gram))
    monkeypatch.setattr(est_mod, "sq_dists_sparse_rows", counted("sq_dists", sq_dists))
    est = KernelMaxide(n_features_map=1000, max_iter=3, random_state=0).fit(X, sp.csr_matrix(Y))
    assert calls["rbf_gram"] == 0
    assert calls["sq_dists"] == core.ROW_PARTS  # the landmarks' distances, once (by row parts)
    L = est.landmarks_
    sq = (L * L).sum(1)
    D2 = np.maximum(sq[:, None] + sq[None, :] - 2 * L @ L.T, 0.0)
    want = 1.0 / np.median(D2[np.triu_indices(1000, 1)])
    np.testing.assert_allclose(est.gamma_, want, rtol=1e-12)
    seeded = np.random.default_rng(np.random.RandomState(0).randint(2**31 - 1))
    sample_rows(X, 1000, seeded)
    np.testing.assert_array_equal(L, sample_rows(X, 1000, seeded))
    # fewer landmarks than the heuristic's sample: its own sample, and K_rr by rbf_gram
    KernelMaxide(n_features_map=300, max_iter=2, random_state=0).fit(X, sp.csr_matrix(Y))
    assert calls["rbf_gram"] == 1
