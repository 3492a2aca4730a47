"""RBF (Nystrom) kernels for GIMC-LNYS / IMC-NYS (SPEC 1.2 and 1.4.3).

* :func:`rbf_from_dot` turns the BLAS product ``XU = X U`` into the kernel block
  ``C_ir = exp(-gamma * max(||x_i||^2 + ||u_r||^2 - 2 x_i.u_r, 0))`` in one fused pass.  The
  float32 path uses a vectorizable exponential (range reduction ``t = k ln2 + x``, degree-7
  polynomial, ``2^k`` built from exponent bits; max relative error about 2e-7); float64 uses
  ``exp``.
* :func:`col_sq_add` adds the squared column norms of a float32/float64 ``U`` into a float64
  vector: the landmark norms ``||u_r||^2`` summed in float64 without a float64 copy of ``U``.
* :func:`lnys_t` writes ``T = G o C`` and accumulates its column sums ``1^T T`` in float64, the
  two pieces of ``grad_U = 2 gamma (X^T T - U diag(1^T T))``.

Kernels never write to their inputs except where the caller explicitly passes ``out`` aliasing a
buffer it owns (documented per function).  NumPy twins live in ``tests/naive_gimc.py``.
"""

from __future__ import annotations

import numpy as np
from ooc_lowrank.kernels._numba import njit

_LOG2E = 1.4426950408889634
_LN2 = 0.6931471805599453


@njit
def _rbf_f32(XU, xsq, usq, gamma, out, bits):
    n, m = XU.shape
    g = np.float32(gamma)
    zero = np.float32(0.0)
    two = np.float32(2.0)
    lo = np.float32(-87.0)
    one = np.float32(1.0)
    half = np.float32(0.5)
    fbits = bits.view(np.float32)
    for i in range(n):
        xi = XU[i]
        oi = out[i]
        xs = np.float32(xsq[i])
        for r in range(m):
            d2 = xs + usq[r] - two * xi[r]
            d2 = max(d2, zero)
            t = max(-g * d2, lo)
            k = np.floor(t * np.float32(_LOG2E) + half)
            x = np.float32(np.float64(t) - np.float64(k) * _LN2)
            p = one + x * (
                one
                + x
                * (
                    np.float32(0.5)
                    + x
                    * (
                        np.float32(1.0 / 6.0)
                        + x
                        * (
                            np.float32(1.0 / 24.0)
                            + x
                            * (
                                np.float32(1.0 / 120.0)
                                + x * (np.float32(1.0 / 720.0) + x * np.float32(1.0 / 5040.0))
                            )
                        )
                    )
                )
            )
            oi[r] = p
            bits[r] = (np.int32(k) + np.int32(127)) << np.int32(23)
        for r in range(m):
            oi[r] = oi[r] * fbits[r]


@njit
def _rbf_f64(XU, xsq, usq, gamma, out):
    n, m = XU.shape
    for i in range(n):
        xi = XU[i]
        oi = out[i]
        xs = xsq[i]
        for r in range(m):
            d2 = max(xs + usq[r] - 2.0 * xi[r], 0.0)
            oi[r] = np.exp(-gamma * d2)


def rbf_from_dot(XU, xsq, usq, gamma, out=None):
    """Fused RBF block from dot products.

    Parameters
    ----------
    XU : ndarray of shape (n_samples, m), float32 or float64, C order
        ``X @ U`` (read only unless ``out is XU``).
    xsq : ndarray of shape (n_samples,)
        Squared row norms ``||x_i||^2`` (same dtype as ``XU``).
    usq : ndarray of shape (m,)
        Squared landmark norms ``||u_r||^2`` (same dtype as ``XU``).
    gamma : float
        Kernel width, ``k(x, u) = exp(-gamma ||x - u||^2)``.
    out : ndarray of shape (n_samples, m), optional
        Output; may be ``XU`` itself when the caller owns it (each entry is read before written).

    Returns
    -------
    out : ndarray of shape (n_samples, m)
    """
    n, m = XU.shape
    dt = XU.dtype
    if out is None:
        out = np.empty((n, m), dtype=dt)
    xsq = np.ascontiguousarray(xsq, dtype=dt)
    usq = np.ascontiguousarray(usq, dtype=dt)
    if dt == np.float32:
        _rbf_f32(XU, xsq, usq, float(gamma), out, np.empty(m, dtype=np.int32))
    else:
        _rbf_f64(XU, xsq, usq, float(gamma), out)
    return out


@njit
def _col_sq_add(U, out):
    d, m = U.shape
    for i in range(d):
        ui = U[i]
        for r in range(m):
            v = np.float64(ui[r])
            out[r] += v * v


def col_sq_add(U, out):
    """``out += (U * U).sum(0)`` with every product and sum in float64.

    Parameters
    ----------
    U : ndarray of shape (d, m), float32 or float64
        Read only; may be a column slice of a wider C-ordered array (a view).
    out : ndarray of shape (m,), float64

    Returns
    -------
    out
    """
    if out.dtype != np.float64 or out.shape != (U.shape[1],):
        raise ValueError(
            f"col_sq_add: out has dtype {out.dtype} and shape {out.shape}, U has shape "
            f"{U.shape}; expected a float64 out of shape ({U.shape[1]},)"
        )
    _col_sq_add(U, out)
    return out


@njit
def _lnys_t(G, C, out, colsum):
    n, m = C.shape
    for i in range(n):
        gi = G[i]
        ci = C[i]
        oi = out[i]
        for r in range(m):
            t = gi[r] * ci[r]
            oi[r] = t
            colsum[r] += t


def lnys_t(G, C, out=None):
    """``T = G o C`` and its column sums in float64 (LNYS gradient, SPEC 1.4.3).

    Parameters
    ----------
    G : ndarray of shape (n_samples, m)
        ``df/dC`` for the Nystrom block (``G M^T`` when a fixed ``M`` is used).
    C : ndarray of shape (n_samples, m)
        Kernel block ``k(x_i, u_r)`` (read only).
    out : ndarray of shape (n_samples, m), optional
        May be ``G`` itself when the caller owns it.

    Returns
    -------
    T : ndarray of shape (n_samples, m)
    colsum : ndarray of shape (m,), float64
    """
    n, m = C.shape
    if out is None:
        out = np.empty((n, m), dtype=np.result_type(G.dtype, C.dtype))
    colsum = np.zeros(m, dtype=np.float64)
    _lnys_t(G, C, out, colsum)
    return out, colsum
