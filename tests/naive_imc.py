"""Plain NumPy twins of two-sided IMC / GIMC clustering (SPEC 1.5, after gradcheck/check_gimc.py).

Dense ``n1 x n2`` matrices everywhere: small test sizes only.
"""

from __future__ import annotations

import numpy as np


def phi(X, U, kind, gamma=None):
    """Feature map: identity, LFF ``[cos XU, sin XU] / sqrt(m)`` or Nystrom (M = I)."""
    X = np.asarray(X.toarray() if hasattr(X, "toarray") else X, dtype=np.float64)
    if kind == "identity":
        return X
    if kind == "fourier":
        Z = X @ U
        return np.hstack([np.cos(Z), np.sin(Z)]) / np.sqrt(U.shape[1])
    sq = (X * X).sum(1)[:, None] + (U * U).sum(0)[None, :] - 2 * X @ U
    return np.exp(-gamma * np.maximum(sq, 0.0))


def backprop(X, U, G, kind, gamma=None):
    """df/dU for ``Phi = phi(X, U)`` given ``G = df/dPhi``."""
    X = np.asarray(X.toarray() if hasattr(X, "toarray") else X, dtype=np.float64)
    if kind == "fourier":
        m = U.shape[1]
        Z = X @ U
        return X.T @ ((G[:, m:] * np.cos(Z) - G[:, :m] * np.sin(Z)) / np.sqrt(m))
    C = phi(X, U, "nystrom", gamma)
    T = G * C
    return 2.0 * gamma * (X.T @ T - U * T.sum(0)[None, :])


def residual(PhiU, PhiV, W, H, rows, cols, vals):
    P, Q = PhiU @ W, PhiV @ H
    res = np.sum(P[rows] * Q[cols], axis=1) - vals
    R = np.zeros((PhiU.shape[0], PhiV.shape[0]))
    np.add.at(R, (rows, cols), res)
    return R, P, Q, res


def objective(PhiU, PhiV, W, H, rows, cols, vals, lam):
    res = residual(PhiU, PhiV, W, H, rows, cols, vals)[3]
    return 0.5 * res @ res + 0.5 * lam * (np.sum(W * W) + np.sum(H * H))


def grads(PhiU, PhiV, W, H, rows, cols, vals, lam):
    """``(grad_W, grad_H, G_U, G_V)`` with ``G_U = R Q W^T``, ``G_V = R^T P H^T``."""
    R, P, Q, _ = residual(PhiU, PhiV, W, H, rows, cols, vals)
    return (
        PhiU.T @ R @ Q + lam * W,
        PhiV.T @ R.T @ P + lam * H,
        R @ Q @ W.T,
        R.T @ P @ H.T,
    )


def hvp_W(PhiU, Q, D, rows, cols, lam):
    T = PhiU @ D
    M = np.zeros((PhiU.shape[0], Q.shape[0]))
    np.add.at(M, (rows, cols), np.sum(T[rows] * Q[cols], axis=1))
    return PhiU.T @ (M @ Q) + lam * D


def pair_error(pi, truth):
    """``1 - Rand index`` over all unordered pairs (the SPEC 1.7 definition, O(n^2))."""
    iu = np.triu_indices(len(pi), 1)
    return float(np.mean((pi[iu[0]] == pi[iu[1]]) != (truth[iu[0]] == truth[iu[1]])))
