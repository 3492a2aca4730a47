"""GIMC Numba kernels against their plain-NumPy twins (tests/naive_gimc.py)."""

from __future__ import annotations

import naive_gimc as nv
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ooc_lowrank.kernels.fourier import fourier_features, lff_xi
from ooc_lowrank.kernels.rbf import col_sq_add, lnys_t, rbf_from_dot

TOL = {np.float32: 5e-6, np.float64: 1e-12}


def _ro(a):
    a = np.ascontiguousarray(a)
    a.setflags(write=False)
    return a


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("spread", [0.1, 3.0, 100.0])
def test_fourier_features_matches_numpy(rng, dtype, spread):
    Z = _ro((rng.standard_normal((37, 19)) * spread).astype(dtype))
    out = fourier_features(Z, 0.25)
    assert out.dtype == dtype and out.shape == (37, 38)
    ref = nv.fourier_features(Z, 0.25)
    # float32: error of the kernel itself is ~1e-7 relative to the float32 input value
    np.testing.assert_allclose(out, ref, atol=TOL[dtype], rtol=0)


def test_fourier_features_into_strided_out(rng):
    Z = _ro(rng.standard_normal((10, 4)).astype(np.float32))
    big = np.zeros((10, 12), np.float32)
    fourier_features(Z, 1.0, big[:, 2:10])
    np.testing.assert_allclose(big[:, 2:10], nv.fourier_features(Z, 1.0), atol=5e-7)
    assert not big[:, :2].any() and not big[:, 10:].any()


@settings(max_examples=25, deadline=None)
@given(n=st.integers(0, 30), m=st.integers(1, 17), seed=st.integers(0, 2**16))
def test_fourier_features_shapes(n, m, seed):
    Z = np.random.default_rng(seed).standard_normal((n, m))
    np.testing.assert_allclose(fourier_features(Z, 1.0), nv.fourier_features(Z, 1.0), atol=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_lff_xi_and_in_place(rng, dtype):
    Phi = _ro(rng.standard_normal((23, 14)).astype(dtype))
    G = rng.standard_normal((23, 14)).astype(dtype)
    ref = nv.lff_xi(Phi.astype(float), G.astype(float))
    np.testing.assert_allclose(lff_xi(Phi, _ro(G.copy())), ref, rtol=TOL[dtype], atol=TOL[dtype])
    G2 = G.copy()
    out = lff_xi(Phi, G2, out=G2[:, :7])  # the documented in-place use
    np.testing.assert_allclose(out, ref, rtol=TOL[dtype], atol=TOL[dtype])
    np.testing.assert_array_equal(G2[:, 7:], G[:, 7:])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_rbf_from_dot(rng, dtype):
    X = rng.standard_normal((31, 6)).astype(dtype)
    U = np.hstack([X[:3].T, rng.standard_normal((6, 9))]).astype(dtype)  # includes exact hits
    XU, xsq, usq = _ro(X @ U), _ro((X * X).sum(1)), _ro((U * U).sum(0))
    for gamma in (1e-3, 0.3, 50.0):
        out = rbf_from_dot(XU, xsq, usq, gamma)
        ref = nv.rbf_from_dot(XU, xsq, usq, gamma)
        if dtype == np.float32:  # float32 distances: exp error ~ gamma * eps * ||x||^2
            np.testing.assert_allclose(out, ref, rtol=2e-5, atol=1e-6)
        else:
            np.testing.assert_allclose(out, ref, rtol=1e-12, atol=1e-300)
        assert np.all(out <= 1.0) and np.all(out >= 0.0)
    np.testing.assert_allclose(np.diag(rbf_from_dot(XU, xsq, usq, 0.5)[:3, :3]), 1.0, rtol=1e-5)
    buf = np.array(XU)
    rbf_from_dot(buf, xsq, usq, 0.3, out=buf)  # in place on a caller-owned buffer
    np.testing.assert_allclose(buf, nv.rbf_from_dot(XU, xsq, usq, 0.3), rtol=2e-6)


def test_rbf_clip_negative_distance():
    # rounding can make ||x||^2 + ||u||^2 - 2 x.u slightly negative: clipped to 0 -> k = 1
    XU = np.array([[1.0 + 1e-7]], np.float32)
    out = rbf_from_dot(XU, np.ones(1, np.float32), np.ones(1, np.float32), 10.0)
    assert out[0, 0] == pytest.approx(1.0, abs=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_col_sq_add_sums_in_float64(rng, dtype):
    """Landmark norms of a read-only column slice, summed in float64 whatever U's dtype: as
    exact as the float64 twin on the same values (a float32 sum of 200,000 rows is 1e-5 off)."""
    U = _ro((0.01 * rng.standard_normal((200_000, 6)) + 0.01).astype(dtype))
    out = np.full(3, 1.0)
    col_sq_add(U[:, 2:5], out)
    ref = 1.0 + nv.col_sq(U[:, 2:5])
    np.testing.assert_allclose(out, ref, rtol=1e-12)
    with pytest.raises(ValueError, match="float64 out of shape"):
        col_sq_add(U, np.zeros(6, dtype=np.float32))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_lnys_t(rng, dtype):
    G = rng.standard_normal((40, 8)).astype(dtype)
    C = _ro(rng.random((40, 8)).astype(dtype))
    T, cs = lnys_t(_ro(G.copy()), C)
    Tr, csr = nv.lnys_t(G, C)
    np.testing.assert_allclose(T, Tr, rtol=TOL[dtype])
    np.testing.assert_allclose(cs, csr, rtol=1e-6 if dtype == np.float32 else 1e-12)
    assert cs.dtype == np.float64
    G2 = G.copy()
    lnys_t(G2, C, out=G2)
    np.testing.assert_allclose(G2, Tr, rtol=TOL[dtype])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_csr_t_dense_add_matches_numpy(rng, dtype):
    import scipy.sparse as sp

    from ooc_lowrank.kernels.csr import csr_t_dense_add

    X = sp.random(23, 41, density=0.1, format="csr", random_state=1, dtype=dtype)
    X[5] = 0  # an empty row
    X = sp.csr_matrix(X)
    B = _ro(rng.standard_normal((23, 6)).astype(dtype))
    wide = rng.standard_normal((41, 10))
    ref = nv.csr_t_dense_add(X, B, wide[:, 2:8])
    out = wide.copy()
    ro = [_ro(a) for a in (X.indptr, X.indices, X.data)]
    csr_t_dense_add(*ro, B, out[:, 2:8])  # a column slice of a wider accumulator
    np.testing.assert_allclose(out[:, 2:8], ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(out[:, :2], wide[:, :2])  # nothing outside the view
    np.testing.assert_array_equal(out[:, 8:], wide[:, 8:])
    with pytest.raises(ValueError, match="expected B"):
        csr_t_dense_add(*ro, B[:, :3], out[:, 2:8])
