"""Plain-NumPy twins for KernelMaxide / Maxide (float64, no engine, no Numba).

Ported from ``../shared/spec/gradcheck/check_kernelmaxide.py`` (SPEC 4.2-4.6): the ranking loss
by brute force over label pairs, the explicit Nystrom factor, and the *direct* corrected
Algorithm 1 on the ``n_UT x m`` matrix ``C`` with an explicit ``K_{all,UT}`` (the
implementation the factored span form in ``ooc_lowrank.kernelmaxide.core`` must reproduce).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp


def dense(X):
    return X.toarray() if sp.issparse(X) else np.asarray(X, dtype=np.float64)


def ranking_loss_rows(S, Ypos):
    """``RL_i`` by brute force over all (pos, neg) pairs; -1 where undefined."""
    S = np.asarray(S, dtype=np.float64)
    P = dense(Ypos) > 0
    out = np.full(S.shape[0], -1.0)
    for i in range(S.shape[0]):
        pos, neg = S[i, P[i]], S[i, ~P[i]]
        if pos.size and neg.size:
            out[i] = np.mean(pos[:, None] <= neg[None, :])
    return out


def ranking_loss(Ypos, S):
    r = ranking_loss_rows(S, Ypos)
    return float(r[r >= 0].mean()) if (r >= 0).any() else float("nan")


def rbf(A, B, gamma):
    A, B = dense(A), dense(B)
    sq = (A * A).sum(1)[:, None] + (B * B).sum(1)[None, :] - 2 * A @ B.T
    return np.exp(-gamma * np.maximum(sq, 0))


def nystrom_factor(X, landmarks, gamma, thresh=1e-10):
    """``F = K(X, landmarks) V diag(ev^-1/2)`` keeping ``ev > thresh * ev.max()`` (n x r')."""
    Krr = rbf(landmarks, landmarks, gamma)
    ev, V = np.linalg.eigh(Krr)
    keep = ev > thresh * ev.max()
    return rbf(X, landmarks, gamma) @ (V[:, keep] / np.sqrt(ev[keep]))


def rank_k_nystrom_basis(X, landmarks, gamma, k, ut, extra=0):
    """KernelMaxide(n_components=k)'s basis: the Nystrom features ``K(X, L) V diag(l)^-1/2`` of
    the top ``k + extra`` eigenpairs of ``K_rr`` (a full ``eigh``), then the top ``k``
    directions of their Gram on the rows ``ut``, orthonormal there (any rotation of them: the
    APG is invariant to it)."""
    ev, V = np.linalg.eigh(rbf(landmarks, landmarks, gamma))
    kk = min(k + extra, ev.size)
    F = rbf(X, landmarks, gamma) @ (V[:, -kk:] / np.sqrt(ev[-kk:]))
    g, Q = np.linalg.eigh(F[ut].T @ F[ut])
    return F @ (Q[:, -k:] / np.sqrt(g[-k:]))


def svt(B, tau):
    U, s, Vt = np.linalg.svd(B, full_matrices=False)
    return (U * np.maximum(s - tau, 0)) @ Vt


def apg_direct(
    K, Yobs, lam, *, max_iter=100, tol=1e-5, gamma_ls=2.0, L0=1.0, slack=1e-12,
    restart="function",
):  # fmt: skip
    """Corrected Algorithm 1 (SPEC 4.4) on ``C`` (n_UT x m) with an explicit ``K`` (n x n_UT)
    whose columns are the UT rows.  ``Yobs``: (n, m) observed labels (+1/-1 stored).

    ``restart="function"``: reset the momentum (``theta = theta_prev = 1``) when the objective
    rose; ``"gradient"``: when ``<Z - C_new, C_new - C> > 0`` (O'Donoghue & Candes 2015);
    ``None``: plain FISTA.

    Returns ``(C, iterates, objectives)``; ``iterates[k]`` is ``C`` after iteration ``k``.
    """
    Y = dense(Yobs)
    obs = dense(Yobs) != 0
    K = np.asarray(K, dtype=np.float64)

    def E(C):
        return 0.5 * np.sum((obs * (K @ C - Y)) ** 2)

    def grad(C):
        return K.T @ (obs * (K @ C - Y))

    m = Y.shape[1]
    C_prev = np.zeros((K.shape[1], m))
    C = C_prev.copy()
    th_prev = th = 1.0
    L = L0
    F_old = E(C)
    iterates, objs = [], [F_old]
    for _ in range(max_iter):
        Z = C + th * (1 / th_prev - 1) * (C - C_prev)
        g, EZ = grad(Z), E(Z)
        while True:
            Cn = svt(Z - g / L, lam / L)
            H = np.sum((Cn - Z) * g) + 0.5 * L * np.sum((Cn - Z) ** 2)
            if E(Cn) - EZ <= H + slack * abs(EZ):
                break
            L *= gamma_ls
        F_new = lam * np.linalg.norm(Cn, "nuc") + E(Cn)
        if restart == "gradient":
            reset = np.sum((Z - Cn) * (Cn - C)) > 0
        else:
            reset = restart == "function" and F_new > F_old
        C_prev, C = C, Cn
        if reset:
            th_prev = th = 1.0
        else:
            th_prev, th = th, (np.sqrt(th**4 + 4 * th**2) - th**2) / 2
        iterates.append(C.copy())
        objs.append(F_new)
        if abs(F_new - F_old) < tol * F_new:
            break
        F_old = F_new
    return C, iterates, np.array(objs)


def objective(K, Yobs, lam, C):
    Y = dense(Yobs)
    obs = Y != 0
    return lam * np.linalg.norm(C, "nuc") + 0.5 * np.sum((obs * (K @ C - Y)) ** 2)


def left_singular(X, k):
    U, s, _ = np.linalg.svd(dense(X), full_matrices=False)
    return U[:, :k], s[:k]


def observed_residual(F, W, Yobs):
    """Values of ``R_Omega(F W - Y)`` in ``Yobs``'s CSR order, by the dense product."""
    Y = sp.csr_matrix(Yobs)
    rows = np.repeat(np.arange(Y.shape[0]), np.diff(Y.indptr))
    return (np.asarray(F, np.float64) @ np.asarray(W, np.float64))[rows, Y.indices] - Y.data


def residual_t_f(F, Yobs, res):
    """``F^T R`` with ``R`` the CSR of ``Yobs``'s pattern holding ``res``."""
    Y = sp.csr_matrix(Yobs)
    R = sp.csr_matrix((res, Y.indices, Y.indptr), shape=Y.shape)
    return np.asarray(R.T @ np.asarray(F, np.float64)).T


def observed_ranking_loss_rows(S, Yobs):
    """Ranking loss of each row over its observed (+1, -1) pairs only; -1 where undefined."""
    Y = sp.csr_matrix(Yobs)
    out = np.full(Y.shape[0], -1.0)
    for i in range(Y.shape[0]):
        c, v = Y.indices[Y.indptr[i] : Y.indptr[i + 1]], Y.data[Y.indptr[i] : Y.indptr[i + 1]]
        pos, neg = S[i, c[v > 0]], S[i, c[v < 0]]
        if pos.size and neg.size:
            out[i] = np.mean(pos[:, None] <= neg[None, :])
    return out
