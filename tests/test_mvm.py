"""Multi-view machines: kernels against NumPy twins and the brute-force tensor, gradients against
finite differences, recovery of a generated CP model, chunk and scheduler invariance, bad input."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import naive_mvm as naive
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
    m = MultiViewMachineRegressor(n_factors=2, reg_weight=1e-7, random_state=0, max_iter=500,
                                  solver="lbfgs")
    m.fit(views, y)  # one in-memory block: no graph per pass
    # the target's noise is 0.05, its spread 0.41
    assert m.evaluate(cp_store)["rmse"] < 0.08 and np.std(y) > 0.3
    np.testing.assert_allclose(m.predict(views), m.predict(cp_store).compute(), rtol=1e-10)
    assert np.all(np.diff(m.objective_path_) <= 1e-12)  # L-BFGS-B iterates never go up


def test_sgd_learns_and_is_reproducible(cp_store):
    views, y = _arrays(cp_store)
    kw = dict(n_factors=2, solver="sgd", n_epochs=15, random_state=5, learning_rate=0.05)
    a = MultiViewMachineRegressor(**kw).fit(cp_store)
    b = MultiViewMachineRegressor(**kw).fit(cp_store)
    np.testing.assert_array_equal(a.coef_, b.coef_)
    assert a.evaluate(cp_store)["rmse"] < 0.6 * np.std(y)
    assert a.objective_path_[-1] < a.objective_path_[0]


@pytest.mark.parametrize("block_rows", [None, 256, 999])
def test_lbfgs_is_chunk_invariant(cp_store, block_rows):
    views, y = _arrays(cp_store)
    kw = dict(n_factors=2, random_state=0, max_iter=15, solver="lbfgs")
    ref = MultiViewMachineRegressor(**kw, block_rows=1500).fit(views, y)
    got = MultiViewMachineRegressor(**kw, block_rows=block_rows).fit(views, y)
    np.testing.assert_allclose(got.coef_, ref.coef_, rtol=1e-8, atol=1e-10)


def test_views_as_one_matrix_equal_views_as_a_list(cp_store):
    views, y = _arrays(cp_store)
    kw = dict(n_factors=2, random_state=0, max_iter=10, solver="lbfgs")
    a = MultiViewMachineRegressor(**kw).fit(views, y)
    b = MultiViewMachineRegressor(**kw, view_sizes=(4, 5, 3)).fit(np.hstack(views), y)
    c = MultiViewMachineRegressor(**kw, view_sizes=(4, 5, 3)).fit(sp.csr_matrix(np.hstack(views)), y)
    np.testing.assert_allclose(a.coef_, b.coef_, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(a.coef_, c.coef_, rtol=1e-9, atol=1e-12)


def test_local_cluster_equals_threaded(cp_store, cluster_client):
    import dask

    kw = dict(n_factors=2, random_state=0, max_iter=3, solver="lbfgs")
    ref = MultiViewMachineRegressor(**kw).fit(cp_store)
    with dask.config.set(scheduler=cluster_client):
        got = MultiViewMachineRegressor(**kw).fit(cp_store)
    np.testing.assert_allclose(got.coef_, ref.coef_, rtol=1e-9, atol=1e-12)


def test_early_stopping_keeps_the_best_iterate(cp_store, rng):
    views, y = _arrays(cp_store)
    tr, va = slice(0, 1000), slice(1000, None)
    m = MultiViewMachineRegressor(n_factors=2, random_state=0, solver="sgd", n_epochs=40,
                                  n_iter_no_change=3)
    m.fit([v[tr] for v in views], y[tr], eval_set=([v[va] for v in views], y[va]))
    assert len(m.validation_path_) == m.n_iter_
    assert m.best_iter_ == 1 + int(np.argmin(m.validation_path_))
    mse = np.mean((m.predict([v[va] for v in views]) - y[va]) ** 2)
    assert mse == pytest.approx(m.validation_path_.min(), rel=1e-9)


def test_save_load_roundtrip(cp_store, tmp_path):
    m = MultiViewMachineRegressor(n_factors=2, random_state=0, max_iter=5).fit(cp_store)
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
    c = MultiViewMachineClassifier(n_factors=3, random_state=0).fit([X1, X2], y2)
    assert list(c.classes_) == ["no", "yes"]
    assert c.score([X1, X2], y2) > 0.9
    assert set(c.evaluate([X1, X2], y=np.where(score > 0, 1, -1))) == {"accuracy", "auc"}
    y3 = np.digitize(score, [-0.5, 0.5])
    ovr = OneVsRestClassifier(MultiViewMachineClassifier(n_factors=3, view_sizes=(3, 2), random_state=0))
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
        (dict(n_factors=0), "n_factors must be >= 1"),
        (dict(reg="l3"), "reg must be one of"),
        (dict(reg_weight=float("nan")), "reg_weight must be finite"),
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
    with pytest.raises(ValueError, match="exactly two classes"):
        MultiViewMachineClassifier().fit(X, rng.integers(0, 3, 30))
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
