"""Plain-NumPy twins of every GIMC kernel and algorithm step (float64, no engine, no Numba).

Ported from ``../shared/spec/gradcheck/check_gimc.py`` (SPEC 1.2-1.4, 5.3, 5.4).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp


def dense(X):
    return X.toarray() if sp.issparse(X) else np.asarray(X)


# kernels -----------------------------------------------------------------------------------


def csr_t_dense_add(X, B, out):
    """``out + X^T B`` in float64 (twin of ``kernels.csr.csr_t_dense_add``)."""
    return np.asarray(out, np.float64) + dense(X).astype(np.float64).T @ np.asarray(B, np.float64)


def fourier_features(Z, scale):
    Z = np.asarray(Z, dtype=np.float64)
    return np.hstack([np.cos(Z), np.sin(Z)]) * scale


def lff_xi(Phi, G):
    m = Phi.shape[1] // 2
    return G[:, m:] * Phi[:, :m] - G[:, :m] * Phi[:, m:]


def rbf_from_dot(XU, xsq, usq, gamma):
    d2 = (
        np.asarray(xsq, float)[:, None]
        + np.asarray(usq, float)[None, :]
        - 2 * np.asarray(XU, float)
    )
    return np.exp(-gamma * np.maximum(d2, 0.0))


def col_sq(U):
    """Squared column norms in float64 (twin of ``kernels.rbf.col_sq_add`` on zeros)."""
    U = np.asarray(U, np.float64)
    return (U * U).sum(0)


def lnys_t(G, C):
    T = np.asarray(G, float) * np.asarray(C, float)
    return T, T.sum(0)


# feature maps ------------------------------------------------------------------------------


def phi_lff(X, U):
    m = U.shape[1]
    return fourier_features(dense(X) @ U, 1.0 / np.sqrt(m))


def phi_nys(X, U, gamma, M=None):
    X = dense(X)
    sq = (X * X).sum(1)[:, None] + (U * U).sum(0)[None, :] - 2 * X @ U
    C = np.exp(-gamma * np.maximum(sq, 0.0))
    return C if M is None else C @ M


def phi_spec(X, U, spec):
    """Phi for a FeatureSpec (list of parts) computed directly."""
    out = []
    for p in spec.parts:
        Up = U[:, p.start : p.stop]
        out.append(phi_lff(X, Up) if p.kind == "fourier" else phi_nys(X, Up, p.gamma, p.M))
    return np.hstack(out)


def lff_backprop(X, U, G):
    m = U.shape[1]
    X = dense(X)
    Z = X @ U
    return X.T @ ((G[:, m:] * np.cos(Z) - G[:, :m] * np.sin(Z)) / np.sqrt(m))


def nys_backprop(X, U, gamma, G):
    X = dense(X)
    C = phi_nys(X, U, gamma)
    T = G * C
    return 2.0 * gamma * (X.T @ T - U * T.sum(0)[None, :])


# algorithm steps ---------------------------------------------------------------------------


def objective_direct(X, A, U, W, spec, alpha):
    Phi = phi_spec(X, U, spec)
    return 0.5 * alpha * np.sum(W**2) + 0.5 * np.sum((dense(A) - Phi @ W) ** 2)


def w_step(Phi, A, alpha):
    D = Phi.shape[1]
    return np.linalg.solve(Phi.T @ Phi + alpha * np.eye(D), Phi.T @ dense(A))


def grad_U(X, A, U, W, spec):
    Phi = phi_spec(X, U, spec)
    G = Phi @ (W @ W.T) - dense(A) @ W.T
    g = np.zeros_like(U, dtype=float)
    for p in spec.parts:
        if not p.learn:
            continue
        Gp = G[:, p.phi_start : p.phi_stop]
        Up = U[:, p.start : p.stop]
        if p.kind == "fourier":
            g[:, p.start : p.stop] = lff_backprop(X, Up, Gp)
        else:
            g[:, p.start : p.stop] = nys_backprop(X, Up, p.gamma, Gp)
    return g


def fd_grad(f, U, eps=1e-6):
    g = np.zeros_like(U)
    for idx in np.ndindex(U.shape):
        Up = U.copy()
        Um = U.copy()
        Up[idx] += eps
        Um[idx] -= eps
        g[idx] = (f(Up) - f(Um)) / (2 * eps)
    return g


def fit_naive(
    X, A, U0, spec, alpha, max_iter, tol=1e-4, n_trials=2, c1=1e-4, max_trials=20,
    growth=2.0, safety=0.75,
):
    """In-memory GIMC with the same Armijo schedule as the core (for end-to-end comparisons).

    Armijo tests the objective after the W-step of each trial; the first trial is 0.1 ||U|| / ||g||
    in the first iteration, then ``safety`` x the minimizer of the quadratic through
    ``f(0), f'(0) = -||g||^2, f(eta)`` of the last accepted step, at most ``growth`` x that step.
    """
    U = np.array(U0, float)
    A = dense(A).astype(float)
    Phi = phi_spec(X, U, spec)
    W = w_step(Phi, A, alpha)
    f = objective_direct(X, A, U, W, spec, alpha)
    hist = [f]
    eta_next = None
    if not spec.learns:
        return U, W, hist
    for _ in range(max_iter):
        g = grad_U(X, A, U, W, spec)
        gn2 = np.sum(g * g)
        if gn2 == 0:
            break
        eta0 = 0.1 * np.linalg.norm(U) / np.sqrt(gn2) if eta_next is None else eta_next
        acc = None
        for t in range(max_trials):
            eta = eta0 * 0.5**t
            Wt = w_step(phi_spec(X, U - eta * g, spec), A, alpha)
            ft = objective_direct(X, A, U - eta * g, Wt, spec, alpha)
            if ft <= f - c1 * eta * gn2:
                acc, W, fn = eta, Wt, ft
                break
        if acc is None:
            break
        U = U - acc * g
        curv = fn - f + acc * gn2  # curvature * acc^2 / 2 of the quadratic model
        eta_next = growth * acc
        if curv > 0:
            eta_next = min(safety * acc**2 * gn2 / (2 * curv), growth * acc)
        hist.append(fn)
        if f - fn <= tol * abs(f):
            break
        f = fn
    return U, W, hist


# metrics -----------------------------------------------------------------------------------


def precision_at_k(scores, Y, k):
    Y = dense(Y)
    top = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return float(np.mean(np.take_along_axis(Y, top, axis=1).sum(1) / k))


def ndcg_at_k(scores, Y, k):
    Y = dense(Y)
    top = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    gains = np.take_along_axis(Y, top, axis=1)
    disc = 1.0 / np.log2(np.arange(2, k + 2))
    dcg = (gains * disc[: gains.shape[1]]).sum(1)
    npos = np.minimum(Y.sum(1), k).astype(int)
    idcg = np.array([disc[:c].sum() for c in npos])
    return float(np.mean(np.where(idcg > 0, dcg / np.where(idcg > 0, idcg, 1), 0.0)))


def accuracy(scores, y):
    return float(np.mean(np.argmax(scores, axis=1) == np.asarray(y)))
