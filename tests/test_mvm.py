"""Multi-view machines: kernels against NumPy twins and the brute-force tensor, gradients against
finite differences, recovery of a generated CP model, chunk and scheduler invariance, bad input."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import naive_mvm as naive
from ooc_lowrank import engine as ooc_engine
from ooc_lowrank import load
from ooc_lowrank.kernels import mvm as _k
from ooc_lowrank.mvm import MultiViewMachineClassifier, MultiViewMachineRegressor
from ooc_lowrank.mvm import _blocks, core
from ooc_lowrank.storage import write_arrays

LOSSES = {"square": _k.SQUARE, "logistic": _k.LOGISTIC, "hinge": _k.HINGE}


def _problem(rng, n=40, dims=(3, 4, 2), k=3, sparse=False):
    views = [rng.standard_normal((n, d)) for d in dims]
    if sparse:
        views = [sp.random(n, d, density=0.4, format="csr", random_state=int(rng.integers(1e6)))
                 for d in dims]
    layout = core._Layout(dims)
    theta = rng.normal(0, 0.5, size=(layout.n_feat + layout.n_views, k))
    return views, layout, theta


def _kernel_loss_grad(views, y, theta, layout, loss):
    M = _blocks.joined_csr(views)
    total, grad, _ = _k.loss_grad_block(M.indptr, M.indices, M.data, y, theta, layout.col_view,
                                        layout.n_feat, layout.n_views, LOSSES[loss], 0.0)
    return total, grad


def test_linear_time_form_equals_brute_force_tensor(rng):
    views, layout, theta = _problem(rng, n=6, dims=(2, 3, 2), k=2)
    factors = naive.split(theta, layout.view_sizes)
    M = _blocks.joined_csr(views)
    got = _k.predict_block(M.indptr, M.indices, M.data, theta, layout.col_view, layout.n_feat,
                           layout.n_views, 0.0)
    np.testing.assert_allclose(got, naive.brute_force(views, factors), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got, naive.predict(views, factors), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("loss", list(LOSSES))
@pytest.mark.parametrize("sparse", [False, True])
def test_loss_grad_kernel_equals_numpy_twin(rng, loss, sparse):
    views, layout, theta = _problem(rng, sparse=sparse)
    dense_views = [v.toarray() if sp.issparse(v) else v for v in views]
    y = np.sign(rng.standard_normal(40)) if loss != "square" else rng.standard_normal(40)
    total, grad = _kernel_loss_grad(views, y, theta, layout, loss)
    ref_total, ref_grads = naive.loss_grad(dense_views, y, naive.split(theta, layout.view_sizes), loss)
    assert total == pytest.approx(ref_total, rel=1e-12)
    for g, r in zip(naive.split(grad, layout.view_sizes), ref_grads, strict=True):
        np.testing.assert_allclose(g, r, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("loss", ["square", "logistic"])
@pytest.mark.parametrize("reg", ["l2", "l1"])
def test_objective_gradient_against_finite_differences(rng, loss, reg):
    views, layout, theta = _problem(rng, n=25)
    y = np.sign(rng.standard_normal(25)) if loss != "square" else rng.standard_normal(25)
    lam = 0.3

    def F(th):
        total, grad = _kernel_loss_grad(views, y, th, layout, loss)
        pen, dpen = core.penalty(th, reg)
        return total / 25 + lam * pen, grad / 25 + lam * dpen

    _, g = F(theta)
    h = 1e-6
    for idx in [(0, 0), (4, 1), (layout.n_feat, 2), (layout.n_feat + 2, 0)]:
        tp, tm = theta.copy(), theta.copy()
        tp[idx] += h
        tm[idx] -= h
        fd = (F(tp)[0] - F(tm)[0]) / (2 * h)
        assert g[idx] == pytest.approx(fd, rel=1e-6, abs=1e-8)


def test_intercept_gradient_against_finite_differences(rng):
    views, layout, theta = _problem(rng, n=25)
    y = rng.standard_normal(25)
    M = _blocks.joined_csr(views)

    def F(b):
        return _k.loss_grad_block(M.indptr, M.indices, M.data, y, theta, layout.col_view,
                                  layout.n_feat, layout.n_views, _k.SQUARE, b)

    h = 1e-6
    assert F(0.3)[2] == pytest.approx((F(0.3 + h)[0] - F(0.3 - h)[0]) / (2 * h), rel=1e-6)


def test_all_zero_factor_column_needs_no_division(rng):
    views, layout, theta = _problem(rng)
    theta[:, 1] = 0.0  # every s^(p)_1 = 0: dividing prod_q s_q by s_p would give 0/0
    y = rng.standard_normal(40)
    total, grad = _kernel_loss_grad(views, y, theta, layout, "square")
    _, ref = naive.loss_grad(views, y, naive.split(theta, layout.view_sizes), "square")
    assert np.isfinite(grad).all()
    for g, r in zip(naive.split(grad, layout.view_sizes), ref, strict=True):
        np.testing.assert_allclose(g, r, rtol=1e-10, atol=1e-12)
    theta[layout.n_feat:, 1] = 0.0
    theta[:3, 1] = 1.0  # only one view's column nonzero: the others' leave-one-out is 0 * ...
    _, grad = _kernel_loss_grad(views, y, theta, layout, "square")
    _, ref = naive.loss_grad(views, y, naive.split(theta, layout.view_sizes), "square")
    for g, r in zip(naive.split(grad, layout.view_sizes), ref, strict=True):
        np.testing.assert_allclose(g, r, rtol=1e-10, atol=1e-12)


def test_two_views_equal_cross_view_second_order_model(rng):
    # SPEC 3.6: with m = 2, yhat = b0 + x1.w1 + x2.w2 + x1^T V1 V2^T x2, with the linear and bias
    # terms tied to the bias factors
    views, layout, theta = _problem(rng, n=10, dims=(4, 3), k=3)
    (A, B) = naive.split(theta, layout.view_sizes)
    V1, a = A[:-1], A[-1]
    V2, b = B[:-1], B[-1]
    x1, x2 = views
    ref = (a * b).sum() + x1 @ (V1 @ b) + x2 @ (V2 @ a) + np.einsum("ni,ij,nj->n", x1, V1 @ V2.T, x2)
    M = _blocks.joined_csr(views)
    got = _k.predict_block(M.indptr, M.indices, M.data, theta, layout.col_view, 7, 2, 0.0)
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("reg", ["l2", "l1"])
def test_sgd_kernel_equals_numpy_twin(rng, reg):
    views, layout, theta = _problem(rng, n=30, sparse=True)
    dense_views = [v.toarray() for v in views]
    y = rng.standard_normal(30)
    order = rng.permutation(30).astype(np.int64)
    accum = np.zeros_like(theta)
    M = _blocks.joined_csr(views)
    th = theta.copy()
    _k.sgd_block(M.indptr, M.indices, M.data, y, order, th, accum, layout.col_view,
                 layout.n_feat, layout.n_views, _k.SQUARE, 0.05, core.REG_CODES[reg], 0.01, 1e-8, 1.0,
                 np.zeros(0))
    f, a = naive.sgd_sweep(dense_views, y, naive.split(theta, layout.view_sizes),
                           [np.zeros((d + 1, 3)) for d in layout.view_sizes], order, "square",
                           0.05, reg, 0.01)
    for g, r in zip(naive.split(th, layout.view_sizes), f, strict=True):
        np.testing.assert_allclose(g, r, rtol=1e-10, atol=1e-12)
    for g, r in zip(naive.split(accum, layout.view_sizes), a, strict=True):
        np.testing.assert_allclose(g, r, rtol=1e-10, atol=1e-12)


def test_sgd_kernel_does_not_write_to_its_input(rng):
    views, layout, theta = _problem(rng, n=20)
    M = _blocks.joined_csr(views)
    data = M.data.copy()
    data.flags.writeable = False
    y = rng.standard_normal(20)
    y.flags.writeable = False
    _k.sgd_block(M.indptr, M.indices, data, y, np.arange(20), theta, np.zeros_like(theta),
                 layout.col_view, layout.n_feat, layout.n_views, 0, 0.01, 1, 0.0, 1e-8, 1.0, np.zeros(2))
    np.testing.assert_array_equal(data, M.data)


# ------------------------------------------------------------------------------ estimator


@pytest.fixture
def cp_store(tmp_path):
    from ooc_lowrank.generators import generate_multiview

    return generate_multiview(str(tmp_path / "mv.zarr"), n_rows=1500, seed=3, view_dims=(4, 5, 3),
                              rank=2, noise_std=0.05, block_rows=400, dtype="float64")


def _arrays(ds):
    return [ds[f"X{p}"].read() for p in range(3)], ds["y"].read()[:, 0]


def test_lbfgs_recovers_a_generated_cp_model(cp_store):
    views, y = _arrays(cp_store)
    m = MultiViewMachineRegressor(n_components=2, alpha=1e-7, random_state=0, max_iter=500,
                                  solver="lbfgs")
    m.fit(views, y)  # one in-memory block: no graph per pass
    # the target's noise is 0.05, its spread 0.41
    assert m.evaluate(cp_store)["rmse"] < 0.08 and np.std(y) > 0.3
    np.testing.assert_allclose(m.predict(views), m.predict(cp_store).compute(), rtol=1e-10)
    assert np.all(np.diff(m.objective_path_) <= 1e-12)  # L-BFGS-B iterates never go up


def test_sgd_learns_and_is_reproducible(cp_store):
    views, y = _arrays(cp_store)
    kw = dict(n_components=2, solver="sgd", n_epochs=15, random_state=5, learning_rate=0.05)
    a = MultiViewMachineRegressor(**kw).fit(cp_store)
    b = MultiViewMachineRegressor(**kw).fit(cp_store)
    np.testing.assert_array_equal(a.coef_, b.coef_)
    assert a.evaluate(cp_store)["rmse"] < 0.6 * np.std(y)
    assert a.objective_path_[-1] < a.objective_path_[0]


@pytest.mark.parametrize("block_rows", [None, 256, 999])
def test_lbfgs_is_chunk_invariant(cp_store, block_rows):
    views, y = _arrays(cp_store)
    kw = dict(n_components=2, random_state=0, max_iter=15, solver="lbfgs")
    ref = MultiViewMachineRegressor(**kw, block_rows=1500).fit(views, y)
    got = MultiViewMachineRegressor(**kw, block_rows=block_rows).fit(views, y)
    np.testing.assert_allclose(got.coef_, ref.coef_, rtol=1e-8, atol=1e-10)


def test_views_as_one_matrix_equal_views_as_a_list(cp_store):
    views, y = _arrays(cp_store)
    kw = dict(n_components=2, random_state=0, max_iter=10, solver="lbfgs")
    a = MultiViewMachineRegressor(**kw).fit(views, y)
    b = MultiViewMachineRegressor(**kw, view_sizes=(4, 5, 3)).fit(np.hstack(views), y)
    c = MultiViewMachineRegressor(**kw, view_sizes=(4, 5, 3)).fit(sp.csr_matrix(np.hstack(views)), y)
    np.testing.assert_allclose(a.coef_, b.coef_, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(a.coef_, c.coef_, rtol=1e-9, atol=1e-12)


def test_local_cluster_equals_threaded(cp_store, cluster_client):
    import dask

    kw = dict(n_components=2, random_state=0, max_iter=3, solver="lbfgs")
    ref = MultiViewMachineRegressor(**kw).fit(cp_store)
    with dask.config.set(scheduler=cluster_client):
        got = MultiViewMachineRegressor(**kw).fit(cp_store)
    np.testing.assert_allclose(got.coef_, ref.coef_, rtol=1e-9, atol=1e-12)


def test_early_stopping_keeps_the_best_iterate(cp_store, rng):
    views, y = _arrays(cp_store)
    tr, va = slice(0, 1000), slice(1000, None)
    m = MultiViewMachineRegressor(n_components=2, random_state=0, solver="sgd", n_epochs=40,
                                  n_iter_no_change=3)
    m.fit([v[tr] for v in views], y[tr], eval_set=([v[va] for v in views], y[va]))
    assert len(m.validation_path_) == m.n_iter_
    assert m.best_iter_ == 1 + int(np.argmin(m.validation_path_))
    mse = np.mean((m.predict([v[va] for v in views]) - y[va]) ** 2)
    assert mse == pytest.approx(m.validation_path_.min(), rel=1e-9)


def test_save_load_roundtrip(cp_store, tmp_path):
    m = MultiViewMachineRegressor(n_components=2, random_state=0, max_iter=5).fit(cp_store)
    m.save(str(tmp_path / "m.model"))
    r = load(str(tmp_path / "m.model"))
    assert isinstance(r, MultiViewMachineRegressor)
    views, _ = _arrays(cp_store)
    np.testing.assert_array_equal(r.predict(views), m.predict(views))
    assert [f.shape for f in r.factors_] == [(5, 2), (6, 2), (4, 2)]


def test_classifier_any_two_labels_and_one_vs_rest(rng):
    from sklearn.multiclass import OneVsRestClassifier

    n = 600
    X1, X2 = rng.standard_normal((n, 3)), rng.standard_normal((n, 2))
    score = X1[:, 0] * X2[:, 0] + X1[:, 1]
    y2 = np.where(score > 0, "yes", "no")
    c = MultiViewMachineClassifier(n_components=3, random_state=0).fit([X1, X2], y2)
    assert list(c.classes_) == ["no", "yes"]
    assert c.score([X1, X2], y2) > 0.9
    assert set(c.evaluate([X1, X2], y=np.where(score > 0, 1, -1))) == {"accuracy", "auc"}
    y3 = np.digitize(score, [-0.5, 0.5])
    ovr = OneVsRestClassifier(MultiViewMachineClassifier(n_components=3, view_sizes=(3, 2), random_state=0))
    ovr.fit(np.hstack([X1, X2]), y3)
    assert ovr.score(np.hstack([X1, X2]), y3) > 0.75


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda V, y: ([V[0], V[1][:-1]], y), "as many rows"),
        (lambda V, y: ([V[0], np.where(V[1] > 2, np.nan, V[1])], y), "NaN"),
        (lambda V, y: (V, y[:-1]), "as many rows"),
    ],
)
def test_bad_training_input(rng, make, match):
    V = [rng.standard_normal((50, 3)) * 3, rng.standard_normal((50, 2)) * 3]
    y = rng.standard_normal(50)
    X, yy = make(V, y)
    with pytest.raises(ValueError, match=match):
        MultiViewMachineRegressor().fit(X, yy)


def test_bad_predict_input(rng):
    V = [rng.standard_normal((50, 3)), rng.standard_normal((50, 2))]
    m = MultiViewMachineRegressor(max_iter=2).fit(V, rng.standard_normal(50))
    with pytest.raises(ValueError, match="widths"):
        m.predict([V[0]])  # a missing view
    with pytest.raises(ValueError, match="widths"):
        m.predict([V[0], np.ones((50, 4))])  # a view of a different width


@pytest.mark.parametrize(
    "params, match",
    [
        (dict(n_components=0), "n_components must be >= 1"),
        (dict(reg="l3"), "reg must be one of"),
        (dict(alpha=float("nan")), "alpha must be finite"),
        (dict(init_std=0.0), "init_std must be > 0"),
        (dict(solver="adam"), "solver must be one of"),
        (dict(loss="logistic"), "loss must be one of"),
        (dict(view_sizes=(2, 2)), "view_sizes must add up"),
    ],
)
def test_bad_parameters_are_clear_errors(rng, params, match):
    with pytest.raises((ValueError, TypeError), match=match):
        MultiViewMachineRegressor(**params).fit(rng.standard_normal((20, 5)), rng.standard_normal(20))


def test_classifier_label_rules(rng, tmp_path):
    X = [rng.standard_normal((30, 2)), rng.standard_normal((30, 2))]
    with pytest.raises(ValueError, match="at least two classes"):
        MultiViewMachineClassifier().fit(X, np.full(30, 4))
    ds = write_arrays(str(tmp_path / "c.zarr"),
                      {"X0": X[0], "X1": X[1], "y": rng.integers(0, 3, (30, 1)).astype(float)})
    with pytest.raises(ValueError, match=r"\{-1, \+1\} or \{0, 1\}"):
        MultiViewMachineClassifier().fit(ds)


def test_movielens_views_converter_folds_share_columns(tmp_path):
    from conftest import DATA_DIR

    from ooc_lowrank.io import ConversionError, convert

    d = DATA_DIR / "movielens-100k"
    if not (d / "u.user").exists():
        pytest.skip(f"dataset missing: {d} (set OOC_LOWRANK_DATA)")
    side = dict(user_file=str(d / "u.user"), item_file=str(d / "u.item"))
    convert("movielens_views", str(d / "u1.test.gz"), str(tmp_path / "t.zarr"), **side)
    convert("movielens_views", str(d / "u2.test.gz"), str(tmp_path / "t2.zarr"), **side)
    from ooc_lowrank.storage import open_dataset

    a, b = open_dataset(str(tmp_path / "t.zarr")), open_dataset(str(tmp_path / "t2.zarr"))
    assert a["X0"].shape[1] == b["X0"].shape[1] == 943 + 7 + 2 + 21
    assert a["X1"].shape[1] == b["X1"].shape[1] == 1682 + 19
    row = a["X0"].read(0, 1)
    assert row.nnz == 4  # id, age bucket, gender, occupation
    bad = tmp_path / "bad.data"
    bad.write_text("1\t1\t5\t0\n99999\t1\t3\t0\n")
    with pytest.raises(ConversionError, match="line 2.*user id not in u.user"):
        convert("movielens_views", str(bad), str(tmp_path / "b.zarr"), **side)


# ------------------------------------------------------------------------------ dense path


def _signed(y, K):
    return np.where(y[:, None] == np.arange(K), 1.0, -1.0) if K > 1 else y


@pytest.mark.parametrize("loss", list(LOSSES))
@pytest.mark.parametrize("K", [1, 3])
def test_dense_path_equals_csr_kernel_and_numpy_twin(rng, loss, K):
    """The dense block path (BLAS products per view) against the CSR kernel path and the NumPy
    twin, for one model and for three one-vs-rest models, views as a list or side by side."""
    views, layout, _ = _problem(rng, n=50)
    k = 3
    theta = rng.normal(0, 0.5, size=(layout.n_feat + layout.n_views, K * k))
    b0 = rng.normal(size=K)
    if K > 1:
        y = rng.integers(0, K, 50).astype(float)
    else:
        y = np.sign(rng.standard_normal(50)) if loss != "square" else rng.standard_normal(50)
    kw = dict(view_sizes=layout.view_sizes, loss=LOSSES[loss], task="classification"
              if loss != "square" else "regression", n_models=K)
    dense = _blocks.loss_grad(*views, y[:, None], theta, b0, n_views_in=3, **kw)
    side = _blocks.loss_grad(np.hstack(views), y[:, None], theta, b0, n_views_in=1, **kw)
    csr = _blocks.loss_grad(*[sp.csr_matrix(v) for v in views], y[:, None], theta, b0,
                            n_views_in=3, **kw)
    for got in (side, csr):
        for a, b in zip(dense, got, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
    ys = _signed(y, K).reshape(50, -1)
    for c in range(K):
        factors = naive.split(theta[:, c * k:(c + 1) * k], layout.view_sizes)
        # the twin has no intercept: add b0 to its yhat and take the loss slope from there
        yhat = naive.predict(views, factors) + b0[c]
        val, dl = naive.loss_and_slope(yhat, ys[:, c], loss)
        assert dense[0][c] == pytest.approx(val.sum(), rel=1e-12)
        assert dense[2][c] == pytest.approx(dl.sum(), rel=1e-10, abs=1e-12)
        s = np.stack(naive.sums(views, factors))
        for p, v in enumerate(views):
            others = np.prod(np.delete(s, p, axis=0), axis=0)
            ref = np.column_stack([v, np.ones(50)]).T @ (dl[:, None] * others)
            got = naive.split(dense[1][:, c * k:(c + 1) * k], layout.view_sizes)[p]
            np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-12)


def test_dense_joined_csr_keeps_only_nonzeros(rng):
    A = rng.standard_normal((6, 3))
    A[A < 0.2] = 0.0
    B = rng.standard_normal((6, 2))
    M = _blocks.joined_csr([A, B])
    ref = sp.csr_matrix(np.hstack([A, B]))
    assert M.nnz == ref.nnz and M.has_canonical_format
    np.testing.assert_array_equal(M.toarray(), ref.toarray())


# ------------------------------------------------------------------------------ multi-class


def _three_classes(rng, n=300):
    X1, X2 = rng.standard_normal((n, 3)), rng.standard_normal((n, 2))
    score = X1[:, 0] * X2[:, 0] + X1[:, 1]
    return [X1, X2], np.digitize(score, [-0.5, 0.5])


def test_one_vs_rest_models_in_lockstep_equal_separate_fits(rng):
    """The batched L-BFGS keeps one L-BFGS per model: model c of a joint 3-class fit equals a
    fit of the binary problem 'class c or not' alone from the same start (to rounding)."""
    V, y = _three_classes(rng, n=200)
    layout = core._Layout((3, 2))
    K, k = 3, 2
    theta0 = rng.normal(0, 0.3, size=(layout.n_feat + layout.n_views, K * k))
    b0 = rng.normal(size=K)
    views = [ooc_engine.as_blocked(v) for v in V]

    def fit(yy, th, b, K):
        yb = ooc_engine.as_blocked(yy.astype(float)[:, None])
        mon = core._Monitor(None, 5, None, False)
        return core._fit_lbfgs_batched(
            views, yb, th, b, layout, loss="logistic", task="classification", reg="l2",
            reg_weight=1e-3, n=200, max_iter=8, tol=0.0, monitor=mon, checkpoint=None,
            n_models=K)

    theta, b, n_iter, passes = fit(y, theta0, b0, K)
    assert n_iter == 8 and passes >= 9
    for c in range(K):
        cols = slice(c * k, (c + 1) * k)
        th_c, b_c, _, _ = fit((y == c).astype(int), theta0[:, cols].copy(), b0[c:c + 1], 1)
        np.testing.assert_allclose(theta[:, cols], th_c, rtol=1e-7, atol=1e-9)
        assert b[c] == pytest.approx(b_c[0], rel=1e-7, abs=1e-9)


@pytest.mark.parametrize("solver", ["lbfgs", "sgd"])
def test_classifier_handles_three_classes_itself(rng, solver, tmp_path):
    V, y = _three_classes(rng)
    labels = np.array(["lo", "mid", "hi"])[y]
    c = MultiViewMachineClassifier(n_components=3, random_state=0, solver=solver, n_epochs=20,
                                   max_iter=60).fit(V, labels)
    assert list(c.classes_) == ["hi", "lo", "mid"]
    assert c.coef_.shape == (3, 3 + 2 + 2, 3) and c.intercept_.shape == (3,)
    f = c.decision_function(V)
    assert f.shape == (300, 3)
    np.testing.assert_array_equal(c.predict(V), c.classes_[f.argmax(axis=1)])
    assert c.score(V, labels) > 0.75
    P = c.predict_proba(V)
    np.testing.assert_allclose(P.sum(axis=1), 1.0)
    assert c.evaluate(V, y=labels) == {"accuracy": pytest.approx(c.score(V, labels))}
    c.save(str(tmp_path / "m"))
    r = load(str(tmp_path / "m"))
    np.testing.assert_array_equal(r.predict(V), c.predict(V))
    assert [f.shape for f in r.factors_] == [(3, 4, 3), (3, 3, 3)]


def test_predict_proba_before_fit_is_not_fitted_error():
    from sklearn.exceptions import NotFittedError

    with pytest.raises(NotFittedError):
        MultiViewMachineClassifier().predict_proba(np.ones((3, 2)))


def test_auto_solver_lbfgs_for_dense_views_sgd_for_sparse(rng):
    V = [rng.standard_normal((60, 3)), rng.standard_normal((60, 2))]
    y = rng.standard_normal(60)
    kw = dict(max_iter=3, n_epochs=1, random_state=0)
    assert MultiViewMachineRegressor(**kw).fit(V, y).solver_ == "lbfgs"
    assert MultiViewMachineRegressor(**kw).fit([sp.csr_matrix(V[0]), V[1]], y).solver_ == "sgd"
    one_sparse = [ooc_engine.as_blocked(np.zeros((2, 3))),
                  ooc_engine.as_blocked(sp.csr_matrix((2, 4)))]
    assert MultiViewMachineRegressor()._resolved_solver(one_sparse) == "sgd"
    assert MultiViewMachineRegressor(solver="lbfgs")._resolved_solver(one_sparse) == "lbfgs"


# ------------------------------------------------------------------------------ SGD order


def test_one_vs_rest_models_that_stop_early_equal_separate_fits_in_any_chunking(rng):
    """Models of a joint fit that converge at different iterations drop out (the driver's
    vector work and the passes cover the running ones only) without changing the others: each
    model equals its binary fit alone, and the joint fit does not depend on the chunking."""
    V, y = _three_classes(rng, n=200)
    layout = core._Layout((3, 2))
    K, k = 3, 2
    theta0 = rng.normal(0, 0.3, size=(layout.n_feat + layout.n_views, K * k))
    b0 = rng.normal(size=K)

    def fit(yy, th, b, K, bounds=None):
        views = [ooc_engine.as_blocked(v) for v in V]
        yb = ooc_engine.as_blocked(yy.astype(float)[:, None])
        if bounds is not None:
            views, yb = [v.rechunk(bounds) for v in views], yb.rechunk(bounds)
        mon = core._Monitor(None, 5, None, False)
        return core._fit_lbfgs_batched(
            views, yb, th, b, layout, loss="logistic", task="classification", reg="l2",
            reg_weight=1e-2, n=200, max_iter=200, tol=1e-3, monitor=mon, checkpoint=None,
            n_models=K)

    theta, b, n_iter, _ = fit(y, theta0, b0, K)
    alone = [fit((y == c).astype(int), theta0[:, c * k:(c + 1) * k].copy(), b0[c:c + 1], 1)
             for c in range(K)]
    assert len({a[2] for a in alone}) > 1 and n_iter == max(a[2] for a in alone) < 200
    for c, (th_c, b_c, _, _) in enumerate(alone):
        np.testing.assert_allclose(theta[:, c * k:(c + 1) * k], th_c, rtol=1e-6, atol=1e-9)
        assert b[c] == pytest.approx(b_c[0], rel=1e-6, abs=1e-9)
    chunked = fit(y, theta0, b0, K, bounds=np.array([0, 70, 71, 200]))
    np.testing.assert_allclose(chunked[0], theta, rtol=1e-6, atol=1e-9)
    assert chunked[2] == n_iter


def test_sgd_model_does_not_depend_on_the_chunking(rng, tmp_path, monkeypatch):
    """Issue 23 item 5: the same data as NumPy views, Dask views chunked two ways and a store
    give the same SGD model, to rounding (the visiting order is defined on row numbers; the
    target mean that starts the intercept is a blocked sum, equal to rounding only)."""
    import dask.array as da

    monkeypatch.setattr(core, "SHUFFLE_ROWS", 128)  # several windows, each across blocks
    n = 500
    V = [rng.standard_normal((n, 3)), sp.random(n, 6, density=0.3, format="csr",
                                                random_state=1)]
    y = V[0][:, 0] * V[1].toarray()[:, 1] + 0.1 * rng.standard_normal(n)
    kw = dict(n_components=2, solver="sgd", n_epochs=3, random_state=4)
    ref = MultiViewMachineRegressor(**kw).fit(V, y)
    ds = write_arrays(str(tmp_path / "s.zarr"), {"X0": V[0], "X1": V[1], "y": y[:, None]},
                      block_rows=77)
    fits = [
        MultiViewMachineRegressor(**kw, block_rows=50).fit(V, y),
        MultiViewMachineRegressor(**kw).fit(
            [da.from_array(V[0], chunks=(97, 3)), da.from_array(V[1], chunks=(211, 6))], y),
        MultiViewMachineRegressor(**kw).fit(ds),
    ]
    for got in fits:
        np.testing.assert_allclose(got.coef_, ref.coef_, rtol=1e-9, atol=1e-12)
        assert got.intercept_ == pytest.approx(ref.intercept_, rel=1e-9)


def test_mvm_auto_benchmark_runs_at_tiny_size(tmp_path):
    """benchmarks/mvm_auto.py's body at tiny size: its structure, never a time."""
    import json

    from conftest import DATA_DIR

    if not (DATA_DIR / "mfeat-handwritten" / "handwritten.mat").exists():
        pytest.skip("dataset missing: mfeat-handwritten (set OOC_LOWRANK_DATA)")
    from benchmarks import mvm_auto

    out = tmp_path / "a.json"
    res = mvm_auto.main(["--small", "--out", str(out)])
    assert json.loads(out.read_text())["benchmark"] == "mvm_auto"
    for key in ("mfeat_one_class", "generated_dense_4x5x3"):
        assert set(res[key]) == {"lbfgs", "sgd"}
        assert res[key]["lbfgs"]["solver"] == "lbfgs" and res[key]["sgd"]["passes"] == 11


def test_dense_path_with_a_zero_factor_column_needs_no_division(rng):
    views, layout, theta = _problem(rng)
    theta[:, 1] = 0.0  # every S[p] column 1 is 0: dividing the product by S[p] would give 0/0
    y = rng.standard_normal(40)[:, None]
    kw = dict(view_sizes=layout.view_sizes, loss=_k.SQUARE, task="regression")
    dense = _blocks.loss_grad(*views, y, theta, np.zeros(1), n_views_in=3, **kw)
    csr = _blocks.loss_grad(*[sp.csr_matrix(v) for v in views], y, theta, np.zeros(1),
                            n_views_in=3, **kw)
    assert np.isfinite(dense[1]).all()
    for a, b in zip(dense, csr, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


def test_lbfgs_pass_inputs_split_views_and_rows(rng, monkeypatch):
    """An in-memory matrix of several views side by side is split once per L-BFGS fit into
    contiguous per-view arrays over the same row blocks, and a single in-memory block of a
    large enough pass is cut into row blocks; a fit from it equals a fit from the list of
    views in one block (to rounding); sparse data and small passes are kept.  Products stay
    float64 unless asked (the fit's tol) and possible (below)."""
    V, y = _three_classes(rng, n=120)
    X = np.hstack(V)
    layout = core._Layout((3, 2))
    yb = ooc_engine.as_blocked(y.astype(float)[:, None])
    views = [ooc_engine.as_blocked(X)]
    parts, y2, products = core._pass_inputs(views, yb, layout, 4)
    assert len(parts) == 2 and y2 is yb and products == np.float64
    for p, (a, b) in enumerate([(0, 3), (3, 5)]):
        assert parts[p].source.flags.c_contiguous
        np.testing.assert_array_equal(parts[p].source, X[:, a:b])
        np.testing.assert_array_equal(parts[p].bounds, [0, 120])
    single = [ooc_engine.as_blocked(sp.csr_matrix(X))]
    assert core._pass_inputs(single, yb, layout, 4)[0] is single
    assert core._pass_inputs(single, yb, layout, 4, float32=True)[2] == np.float64  # sparse
    monkeypatch.setattr(core, "PARALLEL_WORK", 120 * 5 * 4)
    parts, y2, _ = core._pass_inputs(views, yb, layout, 4)
    for b in (*parts, y2):
        np.testing.assert_array_equal(b.bounds, [0, 60, 120])
    assert core._pass_inputs(views, yb, layout, 3)[1] is yb  # below the threshold
    kw = dict(n_components=2, random_state=0, solver="lbfgs", max_iter=15, tol=1e-6)
    cut = MultiViewMachineClassifier(view_sizes=(3, 2), **kw).fit(X, y)
    monkeypatch.setattr(core, "PARALLEL_WORK", np.inf)
    whole = MultiViewMachineClassifier(**kw).fit(V, y)
    np.testing.assert_allclose(cut.coef_, whole.coef_, rtol=1e-6, atol=1e-9)


def test_float32_pass_inputs_do_not_depend_on_the_chunking(rng, monkeypatch):
    """With float32 products the per-view float32 copies are cut into row blocks from ``n``
    alone: the same blocks for one matrix or a list of views in any chunking; a Dask view
    keeps float64 products and its own blocks."""
    import dask.array as da

    V, y = _three_classes(rng, n=130)
    layout = core._Layout((3, 2))
    monkeypatch.setattr(core, "FLOAT32_BLOCK_BYTES", 50 * 4 * (5 + 2 * 4))  # 50 rows
    want = [0, 44, 88, 130]  # ceil(130 / 50) = 3 blocks of ceil(130 / 3) rows
    for views in ([ooc_engine.as_blocked(np.hstack(V))],
                  [ooc_engine.as_blocked(v, block_rows=20) for v in V],
                  [ooc_engine.as_blocked(v, block_rows=97) for v in V]):
        yb = ooc_engine.as_blocked(y.astype(float)[:, None]).rechunk(views[0].bounds)
        parts, y2, products = core._pass_inputs(views, yb, layout, 4, float32=True)
        assert products == np.float32 and len(parts) == 2
        for b, v in zip(parts, V, strict=True):
            assert b.source.dtype == np.float32 and b.source.flags.c_contiguous
            np.testing.assert_array_equal(b.source, v.astype(np.float32))
        for b in (*parts, y2):
            np.testing.assert_array_equal(b.bounds, want)
    lazy = [ooc_engine.as_blocked(da.from_array(V[0], chunks=40)), ooc_engine.as_blocked(V[1])]
    yb = ooc_engine.as_blocked(y.astype(float)[:, None])
    assert core._pass_inputs(lazy, yb, layout, 4, float32=True)[2] == np.float64


def test_float32_products_gradient_matches_float64(rng):
    """The dense path with float32 GEMMs: the loss sums and gradient of a float64 evaluation
    to float32 rounding, returned as float64."""
    V = [rng.standard_normal((300, w)) for w in (7, 4, 3)]
    I, K, k = 14, 3, 4
    theta = rng.normal(0, 0.3, (I + 3, K * k))
    theta[I:] += 1.0
    y = np.where(rng.random((300, K)) < 0.5, 1.0, -1.0)
    b0 = rng.normal(size=K)
    ref = _blocks.dense_loss_grad(V, y, theta, b0, _k.LOGISTIC, I)
    for parts in (V, [v.astype(np.float32) for v in V]):
        got = _blocks.dense_loss_grad(parts, y, theta, b0, _k.LOGISTIC, I, np.float32)
        for g, r in zip(got, ref, strict=True):
            assert g.dtype == np.float64
            np.testing.assert_allclose(g, r, rtol=2e-5, atol=2e-5 * np.abs(r).max())
        assert not np.array_equal(got[1], ref[1])  # really float32 products


@pytest.mark.parametrize("block_rows", [None, 37, 101])
def test_classifier_float32_fit_is_the_same_for_any_chunking(rng, block_rows):
    """The classifier's default tol (>= core.FLOAT32_MIN_TOL) multiplies in float32 on
    in-memory views: the model is bitwise the same for any block_rows and for one matrix or
    a list of views, and close to the float64 fit (tol below the threshold: same
    iterations here, the same predictions)."""
    V, y = _three_classes(rng, n=300)
    kw = dict(n_components=2, random_state=0, solver="lbfgs", max_iter=40)
    ref = MultiViewMachineClassifier(**kw, block_rows=300).fit(V, y)
    got = MultiViewMachineClassifier(**kw, block_rows=block_rows).fit(V, y)
    one = MultiViewMachineClassifier(**kw, view_sizes=(3, 2), block_rows=block_rows).fit(
        np.hstack(V), y)
    np.testing.assert_array_equal(got.coef_, ref.coef_)
    np.testing.assert_array_equal(one.coef_, ref.coef_)
    assert ref.tol >= core.FLOAT32_MIN_TOL
    f64 = MultiViewMachineClassifier(**kw, block_rows=block_rows,
                                     tol=0.999 * core.FLOAT32_MIN_TOL).fit(V, y)
    assert not np.array_equal(f64.coef_, ref.coef_)
    assert abs(f64.n_iter_ - ref.n_iter_) <= 2
    assert np.mean(f64.predict(V) == ref.predict(V)) >= 0.99


def test_two_loop_of_all_models_equals_one_model_at_a_time(rng):
    """``core._two_loop`` (every model's L-BFGS loop in one NumPy call per slot of a ring
    shared by the models) equals the one-model two-loop for models with full, partial, gappy
    (skipped pairs) and empty histories."""
    M, D, head = 4, 7, 1  # the ring's next slot: slot 0 is the newest, then 3, 2, 1
    order = [0, 3, 2, 1]
    used = [[0, 3, 2, 1], [0, 3], [], [2], [0, 2]]  # per model: its filled slots
    K = len(used)
    G = rng.standard_normal((K, D))
    S, Y = rng.standard_normal((K, M, D)), rng.standard_normal((K, M, D))  # junk when empty
    rho, gamma = np.zeros((K, M)), np.ones(K)
    pairs = []
    for c, slots in enumerate(used):
        oldest_first = [j for j in reversed(order) if j in slots]
        for j in oldest_first:
            Y[c, j] = S[c, j] + 0.3 * rng.standard_normal(D)  # s.y > 0
            rho[c, j] = 1.0 / (S[c, j] @ Y[c, j])
        if slots:
            newest = oldest_first[-1]
            gamma[c] = (S[c, newest] @ Y[c, newest]) / (Y[c, newest] @ Y[c, newest])
        pairs.append(([S[c, j] for j in oldest_first], [Y[c, j] for j in oldest_first]))
    assert head == (order[0] + 1) % M
    P = core._two_loop(G, S, Y, rho, gamma, order)
    for c in range(K):
        np.testing.assert_allclose(P[c], naive.two_loop(G[c], *pairs[c]), rtol=1e-12)
    np.testing.assert_array_equal(P[2], -G[2])  # no pairs: steepest descent
    # a subset of the models (the ones still running): only their rows are written
    out = np.full_like(G, 7.0)
    core._two_loop(G, S, Y, rho, gamma, order, np.array([4, 1]), out)
    np.testing.assert_allclose(out[[1, 4]], P[[1, 4]], rtol=1e-14)
    assert (out[[0, 2, 3]] == 7.0).all()


def test_backtrack_is_the_cubic_minimizer_clipped():
    """A failed trial step is cut to the minimizer of the cubic through the values and slopes
    at 0 and at the trial (exact on a cubic), within [0.1, 0.5] of the trial step."""
    phi = [lambda a: 2 * a**3 - 0.5 * a, lambda a: 6 * a**2 - 0.5]  # minimizer sqrt(1/12)
    a = core._backtrack(np.array([1.0]), np.array([0.0]), np.array([phi[1](0)]),
                        np.array([phi[0](1.0)]), np.array([phi[1](1.0)]))
    assert a[0] == pytest.approx(np.sqrt(1 / 12), rel=1e-12)
    # a trial far beyond the minimizer: clipped to 0.1 of it; a non-finite trial: 0.1 too
    a = core._backtrack(np.array([100.0, 1.0]), np.zeros(2), np.array([-0.5, -1.0]),
                        np.array([phi[0](100.0), np.inf]), np.array([phi[1](100.0), np.nan]))
    np.testing.assert_allclose(a, [10.0, 0.1])


def test_one_vs_rest_fit_costs_the_passes_of_one_fit_not_k(rng):
    """The K one-vs-rest models share every pass: a joint fit takes about the passes of its
    slowest binary fit (a line-search retry evaluates only the models still searching),
    far from the K fits' sum; one model goes through the same solver (passes counted)."""
    V, y = _three_classes(rng, n=200)
    kw = dict(n_components=2, random_state=0, solver="lbfgs", max_iter=25, tol=0.0)
    joint = MultiViewMachineClassifier(**kw).fit(V, y)
    single = [MultiViewMachineClassifier(**kw).fit(V, (y == c).astype(int)) for c in range(3)]
    p = [s.n_passes_ for s in single]
    assert joint.n_iter_ == 25 and all(s.n_iter_ == 25 for s in single)
    assert max(p) <= joint.n_passes_ < sum(p) / 2
    # first trial step min(1, 2 x the last accepted one): retries are the exception
    assert all(q <= 1.5 * 25 + 2 for q in p)


def test_lbfgs_pass_calls_the_block_function_once_per_block(rng, monkeypatch):
    """An L-BFGS pass over several blocks runs the block function once per block and nothing
    else (the output shapes are given to the engine, no probe call on a one-row block)."""
    V, y = _three_classes(rng, n=120)
    calls = []
    real = _blocks.loss_grad

    def counted(*items, **kw):
        calls.append(np.shape(items[0])[0])
        return real(*items, **kw)

    monkeypatch.setattr(_blocks, "loss_grad", counted)
    kw = dict(n_components=2, random_state=0, solver="lbfgs", max_iter=5, block_rows=40)
    m = MultiViewMachineClassifier(**kw, tol=1e-6).fit(V, y)  # float64: the input's blocks
    # n_passes_ also counts the target's validation pass
    assert m.n_passes_ >= 6 and calls.count(40) == len(calls) == 3 * (m.n_passes_ - 1)
    calls.clear()  # float32 products (the default tol): blocks cut from n alone, here one
    m = MultiViewMachineClassifier(**kw).fit(V, y)
    assert m.n_passes_ >= 6 and calls.count(120) == len(calls) == m.n_passes_ - 1


def test_mvm_lbfgs_defaults_benchmark_runs_at_tiny_size(tmp_path):
    """benchmarks/mvm_lbfgs_defaults.py's body at tiny size: its structure, never a time."""
    import json

    from conftest import DATA_DIR

    if not (DATA_DIR / "mfeat-handwritten" / "handwritten.mat").exists():
        pytest.skip("dataset missing: mfeat-handwritten (set OOC_LOWRANK_DATA)")
    from benchmarks import mvm_lbfgs_defaults

    out = tmp_path / "d.json"
    res = mvm_lbfgs_defaults.main(["--rows", "120", "--folds", "2", "--grid", "1e-2:1e-3,1e-3:1e-6",
                                   "--max-iter", "3", "--out", str(out)])
    assert json.loads(out.read_text())["benchmark"] == "mvm_lbfgs_defaults"
    assert [(r["reg_weight"], r["tol"]) for r in res["validation"]] == [(1e-2, 1e-3), (1e-3, 1e-6)]
    assert all(len(r["folds"]) == 2 and r["mean"]["n_iter"] <= 3 for r in res["validation"])
    test = res["defaults_on_test"]
    assert (test["reg_weight"], test["tol"]) == (1e-2, 1e-3) and test["n_iter"] <= 3


def test_classifier_lbfgs_defaults_differ_from_the_regressor():
    """The classifier's alpha / tol defaults (docs/mvm.md) are its own; the regressor's
    (MovieLens-validated) are unchanged; both are plain get_params values."""
    c, r = MultiViewMachineClassifier().get_params(), MultiViewMachineRegressor().get_params()
    assert (c["alpha"], c["tol"]) == (1e-2, 1e-3)
    assert (r["alpha"], r["tol"]) == (1e-3, 1e-6)
    assert set(c) == set(r)
