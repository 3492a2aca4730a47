"""KernelMaxide kernels: the ranking loss (SPEC 4.6) and the two products of an APG pass
restricted to the observed entries (SPEC 4.4).

:func:`observed_residual` / :func:`residual_t_f`: the residual ``R_Omega(F W - Y)`` needs the
predictions only at the observed entries, and ``P = F^T R_Omega`` only their rows of ``F``.
With ``|Omega|`` a fraction ``rho`` of ``n x m`` (``rho`` about omega x train share, 0.09-0.36
in the paper's protocol), both cost ``|Omega| r`` multiply-adds instead of the ``n r m`` of
the dense products, and rows without an observation cost nothing.  NumPy twins:
``tests/naive_kernelmaxide.py::observed_residual`` / ``residual_t_f``.

:func:`ranking_loss_rows` computes, for each row of a score block, the fraction of
(positive, negative) label pairs ordered wrongly, ``f_il <= f_il'`` counting as an error (ties are
errors, the Zhang-Zhou convention).  Per row: sort the scores once (``O(L log L)``), walk the
groups of equal scores from the highest down, and charge every positive in a group with the
negatives strictly above it plus all negatives of its own group.  Rows without a positive or
without a negative get ``-1`` (excluded by the caller).

Inputs are read only.  The NumPy twin (brute force over all pairs) is
``tests/naive_kernelmaxide.py::ranking_loss_rows``.
"""

from __future__ import annotations

import numpy as np
from ooc_lowrank.kernels._numba import njit


@njit
def _ranking_loss_rows(S, indptr, indices, out, pos):
    n, L = S.shape
    for i in range(n):
        for j in range(L):
            pos[j] = False
        npos = 0
        for p in range(indptr[i], indptr[i + 1]):
            c = indices[p]
            if not pos[c]:
                pos[c] = True
                npos += 1
        nneg = L - npos
        if npos == 0 or nneg == 0:
            out[i] = -1.0
            continue
        order = np.argsort(-S[i])
        neg_above = 0
        errors = 0.0
        g = 0
        while g < L:
            s = S[i, order[g]]
            e = g
            gp = 0
            gn = 0
            while e < L and S[i, order[e]] == s:
                if pos[order[e]]:
                    gp += 1
                else:
                    gn += 1
                e += 1
            errors += gp * (neg_above + gn)
            neg_above += gn
            g = e
        out[i] = errors / (npos * nneg)


def ranking_loss_rows(S, indptr, indices):
    """Per-row ranking loss of a score block.

    Parameters
    ----------
    S : ndarray of shape (n_samples, n_labels), float32 or float64
        Scores (read only; no NaN: validated by the caller).
    indptr, indices : ndarray of int
        CSR structure of the positive labels of each row (values are not read).

    Returns
    -------
    ndarray of shape (n_samples,), float64
        ``RL_i`` in [0, 1], or ``-1`` for rows with no positive or no negative label.
    """
    S = np.ascontiguousarray(S)
    n, L = S.shape
    out = np.empty(n, dtype=np.float64)
    _ranking_loss_rows(
        S,
        np.ascontiguousarray(indptr, dtype=np.int64),
        np.ascontiguousarray(indices, dtype=np.int64),
        out,
        np.zeros(L, dtype=np.bool_),
    )
    return out


@njit
def _observed_residual(F, WT, indptr, indices, y, out):
    r = F.shape[1]
    for i in range(indptr.shape[0] - 1):
        for p in range(indptr[i], indptr[i + 1]):
            j = indices[p]
            acc = 0.0
            for k in range(r):
                acc += F[i, k] * WT[j, k]
            out[p] = acc - y[p]


@njit
def _residual_t_f(F, indptr, indices, res, PT):
    r = F.shape[1]
    for i in range(indptr.shape[0] - 1):
        for p in range(indptr[i], indptr[i + 1]):
            j = indices[p]
            v = res[p]
            for k in range(r):
                PT[j, k] += v * F[i, k]


def _csr_index(indptr, indices):
    return (
        np.ascontiguousarray(indptr, dtype=np.int64),
        np.ascontiguousarray(indices, dtype=np.int64),
    )


def observed_residual(F, W, indptr, indices, y):
    """``(F W)[i, j] - y_p`` for every stored entry ``p = (i, j)`` of a CSR pattern.

    Parameters
    ----------
    F : ndarray of shape (n, r), float32 or float64 (read only)
    W : ndarray of shape (r, m)
    indptr, indices : CSR structure of the observed entries (n rows, m columns)
    y : ndarray of shape (nnz,)
        The observed values.

    Returns
    -------
    ndarray of shape (nnz,), float64 (accumulated in float64)
    """
    F = np.ascontiguousarray(F)
    WT = np.ascontiguousarray(np.asarray(W).T, dtype=F.dtype)
    ip, ix = _csr_index(indptr, indices)
    out = np.empty(ix.shape[0], dtype=np.float64)
    _observed_residual(F, WT, ip, ix, np.ascontiguousarray(y, dtype=np.float64), out)
    return out


def residual_t_f(F, indptr, indices, res, n_labels):
    """``F^T R`` (r x m, float64) for the sparse ``R`` with pattern (indptr, indices) and values
    ``res``: every stored entry adds ``res_p F[i]`` to column ``j`` of the result."""
    F = np.ascontiguousarray(F)
    ip, ix = _csr_index(indptr, indices)
    PT = np.zeros((int(n_labels), F.shape[1]), dtype=np.float64)
    _residual_t_f(F, ip, ix, np.ascontiguousarray(res, dtype=np.float64), PT)
    return PT.T


@njit
def _observed_ranking_loss_rows(S, indptr, indices, y, out):
    for i in range(indptr.shape[0] - 1):
        npos = 0
        nneg = 0
        err = 0.0
        for p in range(indptr[i], indptr[i + 1]):
            if y[p] > 0:
                npos += 1
                sp_ = S[i, indices[p]]
                for q in range(indptr[i], indptr[i + 1]):
                    if y[q] < 0 and sp_ <= S[i, indices[q]]:
                        err += 1.0
            elif y[p] < 0:
                nneg += 1
        out[i] = err / (npos * nneg) if npos > 0 and nneg > 0 else -1.0


def observed_ranking_loss_rows(S, indptr, indices, y):
    """Per-row ranking loss restricted to the observed (+1, -1) pairs of a CSR pattern.

    For row ``i``: the fraction of (observed positive, observed negative) label pairs with
    ``S[i, pos] <= S[i, neg]`` (ties are errors, as in SPEC 4.6); ``-1`` when the row has no
    observed positive or no observed negative.  The score of held-out observed labels
    (model selection on the observed training labels only).  ``O(k^2)`` per row for ``k``
    observed entries of the row.
    """
    S = np.ascontiguousarray(S)
    ip, ix = _csr_index(indptr, indices)
    out = np.empty(ip.shape[0] - 1, dtype=np.float64)
    _observed_ranking_loss_rows(S, ip, ix, np.ascontiguousarray(y, dtype=np.float64), out)
    return out
