"""Ranking-loss kernel for KernelMaxide evaluation (SPEC 4.6).

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
