"""GLRL Numba kernels against their NumPy twins (tests/naive_glrl.py) and finite differences."""

from __future__ import annotations

import naive_glrl as naive
import numpy as np
import pytest
from ooc_lowrank.kernels import glrl as K

from ooc_lowrank.glrl import _blocks
from ooc_lowrank.glrl._blocks import pack_columns as pack
from ooc_lowrank.glrl.losses import LOSSES, get_loss

ALL = sorted(LOSSES)
#: (values dtype, index dtype, read-only inputs) of the kernels' matches-naive tests.  The float32
#: / int32 case is exactly what the estimators pass (writable scipy CSR blocks), so it compiles no
#: Numba signature of its own on a cold cache (each GLRL pass kernel takes seconds to compile);
#: the float64 case covers int64 indices and read-only inputs (STYLE 10).
DTYPES = [(np.float64, np.int64, True), (np.float32, np.int32, False)]
#: The same for the two large fused pass kernels (power_pass, refit_full_pass), each signature of
#: which costs a cold cache 8-11 s of compilation: their read-only / int64 signature is compiled
#: by ``-m slow`` only (the library passes writable int32 blocks of float32 or float64 values,
#: which the default run compiles), and the default run checks instead that they leave every
#: input unchanged (:func:`_unchanged`), the property read-only chunks rely on.
DTYPES_FUSED = [
    pytest.param(np.float64, np.int64, True, marks=pytest.mark.slow),
    (np.float32, np.int32, False),
]


def _unchanged(before, after):
    for a, b in zip(before, after, strict=True):
        np.testing.assert_array_equal(a, b)


def _problem(rng, loss, m=23, n=17, t=3, p=0.4, dtype=np.float64, idx=np.int64, readonly=True):
    mask = rng.random((m, n)) < p
    mask[5] = False  # an empty row
    rows, cols = np.nonzero(mask)
    lo = get_loss(loss)
    vals = (
        np.where(rng.random(rows.size) < 0.5, -1.0, 1.0)
        if lo.labels_pm1
        else rng.normal(0, 2, rows.size)
    )
    csr = naive.to_csr(rows, cols, vals.astype(dtype), (m, n))
    csr.indices = csr.indices.astype(idx)
    csr.data = csr.data.astype(dtype)
    U = rng.standard_normal((m, t))
    V = rng.standard_normal((n, t))
    theta = rng.standard_normal(t)
    r, c = np.repeat(np.arange(m), np.diff(csr.indptr)), csr.indices.astype(np.int64)
    for a in (csr.indptr, csr.indices, csr.data, U, V, theta):
        a.flags.writeable = not readonly  # kernels must accept read-only inputs
    return csr, U, V, theta, r, c, csr.data.astype(np.float64)


@pytest.mark.parametrize("loss", ALL)
def test_loss_grad_vs_finite_differences(loss, rng):
    lo = get_loss(loss)
    o = np.where(rng.random(200) < 0.5, -1.0, 1.0) if lo.labels_pm1 else rng.normal(0, 2, 200)
    x = rng.normal(0, 2, 200)
    if not lo.smooth:  # away from the kinks
        kink = o if loss == "l1" else o  # |x - o| kink at x = o; hinge kink at o x = 1 -> x = o
        x = np.where(np.abs(x - kink) < 1e-3, x + 0.01, x)
    eps = 1e-6
    fd = (lo.value(x + eps, o, 0.7) - lo.value(x - eps, o, 0.7)) / (2 * eps)
    np.testing.assert_allclose(lo.grad(x, o, 0.7), fd, rtol=1e-6, atol=1e-7)
    # kernel scalar version agrees with the NumPy family
    kv = np.array([K.loss_value_grad(lo.code, xi, oi, 0.7) for xi, oi in zip(x, o, strict=True)])
    np.testing.assert_allclose(kv[:, 0], lo.value(x, o, 0.7), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(kv[:, 1], lo.grad(x, o, 0.7), rtol=1e-12, atol=1e-14)


def test_logistic_is_stable_for_large_margins():
    lo = get_loss("logistic")
    for x in (-800.0, 800.0):
        v, g = K.loss_value_grad(lo.code, x, 1.0, 1.0)
        assert np.isfinite(v) and np.isfinite(g)
    np.testing.assert_allclose(K.loss_value_grad(lo.code, 800.0, -1.0, 1.0), (800.0, 1.0))


def test_nonsmooth_subgradients_at_kinks_are_zero():
    assert K.loss_value_grad(K.L1, 2.0, 2.0, 1.0) == (0.0, 0.0)
    assert K.loss_value_grad(K.HINGE, 1.0, 1.0, 1.0) == (0.0, 0.0)


@pytest.mark.parametrize("loss", ALL)
@pytest.mark.parametrize("dtype,idx,readonly", DTYPES_FUSED)
def test_power_pass_matches_naive(loss, dtype, idx, readonly, rng):
    csr, U, V, theta, r, c, o = _problem(rng, loss, dtype=dtype, idx=idx, readonly=readonly)
    m, n = csr.shape
    u, v = rng.standard_normal(m), rng.standard_normal(n)
    code = get_loss(loss).code
    Vp = pack(V, v)
    inputs = (csr.indptr, csr.indices, csr.data, U, Vp, theta, u)
    before = [a.copy() for a in inputs]
    gv, gtu, st = _blocks.power_block(0, csr, U, Vp, theta, code, 0.7, u)
    _unchanged(before, inputs)
    gv2, gtu2, st2 = naive.power_pass(r, c, o, U, V, theta, loss, 0.7, u, v, m, n)
    np.testing.assert_allclose(gv, gv2, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(gtu, gtu2, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(st, st2, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("loss", ALL)
def test_power_pass_is_block_additive(loss, rng):
    """Blocks with a row offset return their rows of G v; partial G^T u vectors add up."""
    # writable int32 CSR, as the estimators pass it (row slices are writable copies anyway): no
    # kernel signature of its own (read-only and int64 inputs: the matches-naive tests)
    csr, U, V, theta, r, c, o = _problem(rng, loss, idx=np.int32, readonly=False)
    m, n = csr.shape
    u, v = rng.standard_normal(m), rng.standard_normal(n)
    code = get_loss(loss).code
    full = _blocks.power_block(0, csr, U, pack(V, v), theta, code, 1.0, u)
    parts = [
        _blocks.power_block(s, csr[s:e], U, pack(V, v), theta, code, 1.0, u)
        for s, e in [(0, 4), (4, 5), (5, 6), (6, 23)]
    ]
    assert [p[0].shape[0] for p in parts] == [4, 1, 1, 17]
    np.testing.assert_allclose(np.concatenate([p[0] for p in parts]), full[0], rtol=1e-12)
    for k in (1, 2):
        np.testing.assert_allclose(sum(p[k] for p in parts), full[k], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("loss", ALL)  # every code: the specialized copies and the generic one
@pytest.mark.parametrize("dtype,idx,readonly", DTYPES_FUSED)
def test_refit_full_pass_matches_naive(loss, dtype, idx, readonly, rng):
    csr, U, V, theta, r, c, o = _problem(rng, loss, dtype=dtype, idx=idx, readonly=readonly)
    code = get_loss(loss).code
    inputs = (csr.indptr, csr.indices, csr.data, U, V, theta)
    before = [a.copy() for a in inputs]
    grad, st = _blocks.refit_full_block(0, csr, U, V, theta, code, 0.7)
    _unchanged(before, inputs)
    f2, g2 = naive.refit_full(r, c, o, U, V, theta, loss, 0.7)
    np.testing.assert_allclose(st[0], f2, rtol=1e-12)
    np.testing.assert_allclose(grad, g2, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("loss", ["square", "l1"])  # register copies per rank / generic loop
@pytest.mark.parametrize("t", [0, 1, 2, 5, K.MAX_FIXED_RANK, K.MAX_FIXED_RANK + 1, 12])
@pytest.mark.parametrize("dtype,idx,readonly", DTYPES_FUSED)
def test_power_and_refit_full_passes_match_naive_at_every_rank(loss, t, dtype, idx, readonly, rng):
    csr, U, V, theta, r, c, o = _problem(rng, loss, t=t, dtype=dtype, idx=idx, readonly=readonly)
    m, n = csr.shape
    u, v = rng.standard_normal(m), rng.standard_normal(n)
    code = get_loss(loss).code
    gv, gtu, st = _blocks.power_block(0, csr, U, pack(V, v), theta, code, 0.7, u)
    gv2, gtu2, st2 = naive.power_pass(r, c, o, U, V, theta, loss, 0.7, u, v, m, n)
    for a, b in ((gv, gv2), (gtu, gtu2), (st, st2)):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
    grad, fst = _blocks.refit_full_block(0, csr, U, V, theta, code, 0.7)
    f2, g2 = naive.refit_full(r, c, o, U, V, theta, loss, 0.7)
    np.testing.assert_allclose(fst[0], f2, rtol=1e-12)
    np.testing.assert_allclose(grad, g2, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("loss", ["square", "logistic", "huber"])
@pytest.mark.parametrize("n_fixed", [0, 1, 3])
def test_refit_econ_pass_matches_naive(loss, n_fixed, rng):
    csr, U, V, theta, r, c, o = _problem(rng, loss, t=4)
    code = get_loss(loss).code
    out = _blocks.refit_econ_block(0, csr, U, V, theta[:3], 0.8, -0.3, code, 0.7, n_fixed)
    f2, g2 = naive.refit_econ(r, c, o, U, V, theta[:3], 0.8, -0.3, loss, 0.7, n_fixed)
    np.testing.assert_allclose(out, np.r_[f2, g2], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("loss", ["square", "logistic", "huber"])
@pytest.mark.parametrize("n_fixed", [0, 2])
def test_refit_econ_hessian_matches_finite_differences(loss, n_fixed, rng):
    csr, U, V, theta, r, c, o = _problem(rng, loss, t=4)
    code = get_loss(loss).code
    out = _blocks.refit_econ_block(0, csr, U, V, theta[:3], 0.8, -0.3, code, 0.7, n_fixed, True)
    f2, g2 = naive.refit_econ(r, c, o, U, V, theta[:3], 0.8, -0.3, loss, 0.7, n_fixed)
    np.testing.assert_allclose(out[:3], np.r_[f2, g2], rtol=1e-10, atol=1e-12)
    H = naive.econ_hessian(r, c, o, U, V, theta[:3], 0.8, -0.3, loss, 0.7, n_fixed)
    np.testing.assert_allclose(out[3:], [H[0, 0], H[0, 1], H[1, 1]], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("loss", ["square", "logistic", "huber"])
def test_loss_curvature_vs_finite_differences(loss, rng):
    lo = get_loss(loss)
    o = np.where(rng.random(200) < 0.5, -1.0, 1.0) if lo.labels_pm1 else rng.normal(0, 2, 200)
    x = rng.normal(0, 2, 200)
    away = np.abs(np.abs(x - o) - 0.7) > 1e-3  # away from Huber's kink
    x, o = x[away], o[away]
    h = 1e-6
    fd = (lo.grad(x + h, o, 0.7) - lo.grad(x - h, o, 0.7)) / (2 * h)
    got = np.array([K.loss_curvature(lo.code, a, b, 0.7) for a, b in zip(x, o, strict=True)])
    np.testing.assert_allclose(got, fd, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("j0", [0, 2, 4])
def test_refit_gram_pass_matches_naive(j0, dtype, rng):
    csr, U, V, theta, r, c, o = _problem(rng, "square", t=5, dtype=dtype, idx=np.int32)
    gram, rhs = _blocks.refit_gram_block(0, csr, U, V, j0)
    g2, r2 = naive.refit_gram(r, c, o, U, V, j0)
    np.testing.assert_allclose(gram, g2, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(rhs, r2, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64])
@pytest.mark.parametrize("labels_pm1", [False, True])
def test_check_block_matches_numpy(dtype, labels_pm1, rng):
    import scipy.sparse as sp

    m, n = 40, 30
    for case in range(6):
        nnz = int(rng.integers(0, 200))
        rows = np.sort(rng.integers(0, m, nnz))
        cols = rng.integers(-2 if case == 2 else 0, n + (3 if case == 2 else 0), nnz)
        if case == 3:  # sorted, strictly increasing rows: no repeat
            order = np.lexsort((cols, rows))
            rows, cols = rows[order], cols[order]
            keep = np.r_[True, (rows[1:] != rows[:-1]) | (cols[1:] != cols[:-1])]
            rows, cols = rows[keep], cols[keep]
        vals = rng.choice([-1.0, 0.0, 1.0, 2.5, -0.5], rows.size)
        if case == 4 and dtype != np.int64:
            vals[::7] = np.nan
            vals[1::11] = np.inf
        if dtype == np.int64:
            vals = np.round(vals)
        indptr = np.r_[0, np.cumsum(np.bincount(rows, minlength=m))]
        blk = sp.csr_matrix((vals.astype(dtype), cols.astype(np.int32), indptr), shape=(m, n + 5))
        got = _blocks.check_block(0, blk, n, labels_pm1)
        want = naive.check_block(blk, n, labels_pm1)
        np.testing.assert_array_equal(got, want, err_msg=f"case {case}")


def test_step_search_pass(rng):
    csr, U, V, theta, r, c, o = _problem(rng, "l1", t=4)
    steps = np.array([0.0, 0.5, 2.0])
    out = _blocks.step_search_block(0, csr, U, V, theta, 2, steps, K.L1, 1.0)
    lo = get_loss("l1")
    xp = naive.predict(U[:, :2], V[:, :2], theta[:2], r, c)
    d = naive.predict(U[:, 2:], V[:, 2:], theta[2:], r, c)
    ref = [lo.value(xp + s * d, o).sum() for s in steps]
    np.testing.assert_allclose(out, ref, rtol=1e-12)


def test_predict_and_topk_kernels(rng):
    csr, U, V, theta, r, c, o = _problem(rng, "square")
    out = np.empty(r.size)
    K.predict_pairs(r, c, U, V, theta, out)
    np.testing.assert_allclose(out, naive.predict(U, V, theta, r, c), rtol=1e-12)
    out2 = np.empty(r.size)
    K.predict_block(csr.indptr, csr.indices, np.int64(0), U, V, theta, out2)
    np.testing.assert_allclose(out2, out, rtol=1e-12)
    rows = np.array([0, 7, 22])
    idx = np.empty((3, 4), np.int64)
    val = np.empty((3, 4))
    K.top_k_rows(rows, U, V, theta, 4, idx, val)
    X = (U * theta) @ V.T
    np.testing.assert_array_equal(idx, np.argsort(-X[rows], axis=1, kind="stable")[:, :4])
    np.testing.assert_allclose(val, np.take_along_axis(X[rows], idx, 1), rtol=1e-12)


def test_empty_block(rng):
    import scipy.sparse as sp

    blk = sp.csr_matrix((0, 5))
    U, V, th = np.ones((3, 1)), np.ones((5, 1)), np.ones(1)
    gv, gtu, st = _blocks.power_block(3, blk, U, pack(V, np.ones(5)), th, K.SQUARE, 1.0, np.ones(3))
    assert not gv.any() and not gtu.any() and not st.any()


@pytest.mark.parametrize("loss", ["square", "logistic", "huber", "l1", "hinge"])
@pytest.mark.parametrize("idx", [np.int32, np.int64])
def test_gradient_cache_matches_naive_and_the_fused_pass(loss, idx, rng):
    import scipy.sparse as sp

    csr, U, V, theta, r, c, o = _problem(rng, loss, t=4, idx=idx)
    m, n = csr.shape
    code = get_loss(loss).code
    G = _blocks.grad_csr_block(0, csr, U, V, theta, code, 0.7)
    lo = get_loss(loss)
    np.testing.assert_allclose(
        G.data, lo.grad(naive.predict(U, V, theta, r, c), o, 0.7), rtol=1e-12, atol=1e-15
    )
    assert G.indices is csr.indices and G.indptr is csr.indptr  # structure shared, not copied
    u, v = rng.standard_normal(m), rng.standard_normal(n)
    gv, gtu = _blocks.cached_power_block(0, G, u, v)
    Gd = G.toarray()
    np.testing.assert_allclose(gv, Gd @ v, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gtu, Gd.T @ u, rtol=1e-12, atol=1e-12)
    # the fused pass on writable int32 copies: the signature the library and the other default
    # tests compile (a read-only one costs a cold cache 8 s: DTYPES_FUSED)
    w = sp.csr_matrix(
        (csr.data.copy(), csr.indices.astype(np.int32), csr.indptr.astype(np.int32)), csr.shape
    )
    fused = _blocks.power_block(0, w, U.copy(), pack(V, v), theta.copy(), code, 0.7, u)
    np.testing.assert_allclose(gv, fused[0], rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(gtu, fused[1], rtol=1e-13, atol=1e-14)


@pytest.mark.parametrize("loss", ALL)
@pytest.mark.parametrize("dtype,idx,readonly", DTYPES)
def test_grad_entries_matches_naive(loss, dtype, idx, readonly, rng):
    # per-entry gradients in storage order, from the kernel's specialized (square, l1, huber)
    # and generic (logistic, hinge) copies, against the NumPy loss family at the predictions
    csr, U, V, theta, r, c, o = _problem(rng, loss, t=20, dtype=dtype, idx=idx, readonly=readonly)
    g = _blocks.grad_csr_block(0, csr, U, V, theta, get_loss(loss).code, 0.7)
    pred = ((U[r] * theta) * V[c]).sum(axis=1)
    np.testing.assert_allclose(g.data, get_loss(loss).grad(pred, o, 0.7), rtol=1e-10, atol=1e-12)
    assert g.indices is csr.indices and g.indptr is csr.indptr


def test_check_block_counts_repeated_pairs_like_unique(rng):
    # repeated (row, col) pairs: triplicates count twice, the same column in two rows never
    import scipy.sparse as sp

    m, n = 30, 7
    rows = rng.integers(0, m, 400)
    cols = rng.integers(0, n, 400)
    order = np.argsort(rows, kind="stable")
    rows, cols = rows[order], cols[order]
    indptr = np.r_[0, np.cumsum(np.bincount(rows, minlength=m))]
    blk = sp.csr_matrix((np.ones(rows.size), cols, indptr), shape=(m, n))
    assert blk.nnz == 400  # duplicates kept, not summed
    want = rows.size - np.unique(rows * n + cols).size
    assert want > 50
    for start in (0, 1000):
        assert _blocks.check_block(start, blk, n, False)[4] == want
    empty = sp.csr_matrix((3, n))
    assert _blocks.check_block(0, empty, n, False)[4] == 0


def test_packed_columns_packs_once_per_pair():
    rng = np.random.default_rng(3)
    V, v, w = rng.standard_normal((7, 2)), rng.standard_normal(7), rng.standard_normal(7)
    a = _blocks.packed_columns(V, v)
    np.testing.assert_array_equal(a, pack(V, v))
    assert _blocks.packed_columns(V, v) is a  # the blocks of one pass share one pack
    b = _blocks.packed_columns(V, w)
    assert b is not a and np.array_equal(b, pack(V, w))
    assert _blocks.packed_columns(V, v.copy()) is not b  # another object: packed again
    del v, w, a, b
    assert _blocks._PACKED[0] is None  # freed with its vectors
