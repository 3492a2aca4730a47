"""Fourier-feature kernels (GIMC-LFF, SPEC 1.2 and 1.4.3).

* :func:`fourier_features` writes ``Phi = [cos Z, sin Z] * scale`` for ``Z = X U`` in one pass
  with a branch-free polynomial sin/cos that LLVM vectorizes (range reduction in float64,
  minimax-grade Taylor polynomials on ``[-pi/4, pi/4]``; max abs error about 2e-7 in float32,
  about 1e-15 in float64).
* :func:`lff_xi` writes the elementwise part of the LFF U-gradient,
  ``Xi = G_s o cos(Z)/sqrt(m) - G_c o sin(Z)/sqrt(m) = G_s o Phi_c - G_c o Phi_s``, without any
  extra ``(n, m)`` temporary (the caller may pass ``out = G[:, :m]``).

Kernels never write to their inputs (read-only Zarr/Dask chunks are normal).  Plain-NumPy twins
live in ``tests/naive_gimc.py``.
"""

from __future__ import annotations

import numpy as np
from ooc_lowrank.kernels._numba import njit

_TWO_OVER_PI = 0.6366197723675814
_PI_2_HI = 1.5707963267948966
_PI_2_LO = 6.123233995736766e-17


@njit
def _ff_f32(Z, scale, out):
    # Branch-free so LLVM vectorizes: quadrant arithmetic in float, range reduction in float64
    # (one fused multiply-subtract; exact enough for |z| < 1e6), polynomials in float32.
    n, m = Z.shape
    s32 = np.float32(scale)
    one = np.float32(1.0)
    two = np.float32(2.0)
    four = np.float32(4.0)
    half = np.float32(0.5)
    quarter = np.float32(0.25)
    for i in range(n):
        zi = Z[i]
        oc = out[i, :m]
        os_ = out[i, m:]
        for r in range(m):
            z = zi[r]
            k = np.floor(z * np.float32(_TWO_OVER_PI) + half)
            x = np.float32(np.float64(z) - np.float64(k) * _PI_2_HI)
            q = k - four * np.floor(k * quarter)
            odd = q - two * np.floor(q * half)
            hs = np.floor(q * half)
            t = q + one
            t = t - four * np.floor(t * quarter)
            hc = np.floor(t * half)
            x2 = x * x
            s = x * (
                one
                + x2
                * (
                    np.float32(-1.0 / 6.0)
                    + x2
                    * (
                        np.float32(1.0 / 120.0)
                        + x2 * (np.float32(-1.0 / 5040.0) + x2 * np.float32(1.0 / 362880.0))
                    )
                )
            )
            c = one + x2 * (
                np.float32(-0.5)
                + x2
                * (
                    np.float32(1.0 / 24.0)
                    + x2 * (np.float32(-1.0 / 720.0) + x2 * np.float32(1.0 / 40320.0))
                )
            )
            sv = (one - odd) * s + odd * c
            cv = (one - odd) * c + odd * s
            oc[r] = (one - two * hc) * cv * s32
            os_[r] = (one - two * hs) * sv * s32


@njit
def _ff_f64(Z, scale, out):
    n, m = Z.shape
    for i in range(n):
        zi = Z[i]
        oc = out[i, :m]
        os_ = out[i, m:]
        for r in range(m):
            z = zi[r]
            k = np.floor(z * _TWO_OVER_PI + 0.5)
            x = (z - k * _PI_2_HI) - k * _PI_2_LO
            q = k - 4.0 * np.floor(k * 0.25)
            odd = q - 2.0 * np.floor(q * 0.5)
            hs = np.floor(q * 0.5)
            t = q + 1.0
            t = t - 4.0 * np.floor(t * 0.25)
            hc = np.floor(t * 0.5)
            x2 = x * x
            s = x * (
                1.0
                + x2
                * (
                    -1.0 / 6.0
                    + x2
                    * (
                        1.0 / 120.0
                        + x2
                        * (
                            -1.0 / 5040.0
                            + x2
                            * (
                                1.0 / 362880.0
                                + x2
                                * (
                                    -1.0 / 39916800.0
                                    + x2 * (1.0 / 6227020800.0 + x2 * (-1.0 / 1307674368000.0))
                                )
                            )
                        )
                    )
                )
            )
            c = 1.0 + x2 * (
                -0.5
                + x2
                * (
                    1.0 / 24.0
                    + x2
                    * (
                        -1.0 / 720.0
                        + x2
                        * (
                            1.0 / 40320.0
                            + x2
                            * (
                                -1.0 / 3628800.0
                                + x2 * (1.0 / 479001600.0 + x2 * (-1.0 / 87178291200.0))
                            )
                        )
                    )
                )
            )
            sv = (1.0 - odd) * s + odd * c
            cv = (1.0 - odd) * c + odd * s
            oc[r] = (1.0 - 2.0 * hc) * cv * scale
            os_[r] = (1.0 - 2.0 * hs) * sv * scale


def fourier_features(Z, scale, out=None):
    """Fused ``[cos Z, sin Z] * scale``.

    Parameters
    ----------
    Z : ndarray of shape (n_samples, m), float32 or float64, C order
        Projections ``X U`` (read only).
    scale : float
        Usually ``1 / sqrt(m)``.
    out : ndarray of shape (n_samples, 2 * m), same dtype as ``Z``, optional
        Output buffer (allocated when omitted).  Must not alias ``Z``.

    Returns
    -------
    out : ndarray of shape (n_samples, 2 * m)
    """
    n, m = Z.shape
    if out is None:
        out = np.empty((n, 2 * m), dtype=Z.dtype)
    if Z.dtype == np.float32:
        _ff_f32(Z, float(scale), out)
    else:
        _ff_f64(Z, float(scale), out)
    return out


@njit
def _lff_xi(Phi, G, out):
    n, m = out.shape
    for i in range(n):
        pc = Phi[i, :m]
        ps = Phi[i, m:]
        gc = G[i, :m]
        gs = G[i, m:]
        oi = out[i]
        for r in range(m):
            oi[r] = gs[r] * pc[r] - gc[r] * ps[r]


def lff_xi(Phi, G, out=None):
    """Elementwise part of the LFF U-gradient, ``Xi = G_s o Phi_c - G_c o Phi_s``.

    With ``Phi = [cos Z, sin Z] / sqrt(m)`` this equals
    ``(G_s o cos Z - G_c o sin Z) / sqrt(m)`` (SPEC 1.4.3), so ``grad_U = X^T Xi``.

    Parameters
    ----------
    Phi : ndarray of shape (n_samples, 2 * m)
        Fourier features (read only).
    G : ndarray of shape (n_samples, 2 * m)
        ``df/dPhi`` for this feature block.
    out : ndarray of shape (n_samples, m), optional
        May be ``G[:, :m]`` (each entry is read before it is written); allocated when omitted.

    Returns
    -------
    out : ndarray of shape (n_samples, m)
    """
    n, two_m = Phi.shape
    if out is None:
        out = np.empty((n, two_m // 2), dtype=np.result_type(Phi.dtype, G.dtype))
    _lff_xi(Phi, G, out)
    return out
