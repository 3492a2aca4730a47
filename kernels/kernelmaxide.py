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

:func:`rbf_sparse_rows` is the RBF kernel block ``K(X_b, landmarks)`` of rows with few nonzeros
(the yahoo sets: 7.5 % of 462 columns), issue 24: each row's dot products with the ``r``
landmarks are ``sum_j x_ij U[j, :]`` over its nonzeros only (``nnz r`` multiply-adds in place of
``d r``; four nonzeros per sweep of the row, so the output row is loaded and stored once per four
``U`` rows), fused with the squared norm and ``-gamma max(||x||^2 + ||u||^2 - 2 x.u, 0)``; NumPy's
vectorized ``exp`` then runs in place on the block (2-3x Numba's scalar ``exp`` in float64).  Dense
rows are scanned for their nonzeros inside the kernel (no CSR conversion).  Arts, 4,486 x 462
rows against 1,000 landmarks, float64, one thread: 30 ms in place of 72 (scipy CSR conversion,
CSR x dense, fused Numba exp).  Every row is computed alone in a fixed order, so a row's kernel
values do not depend on the block it came in.  NumPy twin: ``tests/naive_kernelmaxide.py::rbf``.
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


@njit
def _acc_row(o, U, idx, val, start, stop):
    """``o += sum_p val[p] U[idx[p]]`` for ``p`` in ``[start, stop)``, four rows of ``U`` per
    sweep of ``o``; returns ``sum_p val[p]^2``."""
    r = o.shape[0]
    xs = o.dtype.type(0)
    for c in range(r):
        o[c] = 0.0
    p = start
    while p + 4 <= stop:
        v0, v1, v2, v3 = val[p], val[p + 1], val[p + 2], val[p + 3]
        u0, u1, u2, u3 = U[idx[p]], U[idx[p + 1]], U[idx[p + 2]], U[idx[p + 3]]
        for c in range(r):
            o[c] += v0 * u0[c] + v1 * u1[c] + v2 * u2[c] + v3 * u3[c]
        xs += v0 * v0 + v1 * v1 + v2 * v2 + v3 * v3
        p += 4
    while p < stop:
        v = val[p]
        u = U[idx[p]]
        for c in range(r):
            o[c] += v * u[c]
        xs += v * v
        p += 1
    return xs


@njit
def _neg_scaled_d2(o, xs, usq, gamma):
    """``o <- -gamma max(xs + usq - 2 o, 0)`` (``o`` holds the dot products), in ``o``'s
    dtype."""
    two, zero = o.dtype.type(2), o.dtype.type(0)
    for c in range(o.shape[0]):
        o[c] = -gamma * max(xs + usq[c] - two * o[c], zero)


@njit
def _rbf_arg_csr(indptr, indices, data, U, usq, gamma, out, xsq):
    g = out.dtype.type(gamma)
    for i in range(indptr.shape[0] - 1):
        xs = _acc_row(out[i], U, indices, data, indptr[i], indptr[i + 1])
        xsq[i] = xs
        _neg_scaled_d2(out[i], xs, usq, g)


@njit
def _rbf_arg_dense(Xb, U, usq, gamma, out, xsq, idx, val):
    n, d = Xb.shape
    g = out.dtype.type(gamma)
    for i in range(n):
        k = 0
        for j in range(d):
            v = Xb[i, j]
            if v != 0:
                idx[k] = j
                val[k] = v
                k += 1
        xs = _acc_row(out[i], U, idx, val, 0, k)
        xsq[i] = xs
        _neg_scaled_d2(out[i], xs, usq, g)


def _neg_scaled_sq_dists(Xb, U, gamma, out=None):
    """``(-gamma max(||x_i - u_c||^2, 0), ||x_i||^2)`` of rows with few nonzeros (see
    :func:`rbf_sparse_rows`), written into ``out`` when given."""
    dt = Xb.dtype
    U = np.ascontiguousarray(U, dtype=dt)
    usq = np.einsum("ij,ij->j", U, U)
    n = Xb.shape[0]
    out = _out(out, (n, U.shape[1]), dt)
    xsq = np.empty(n, dtype=dt)
    if hasattr(Xb, "indptr"):
        _rbf_arg_csr(
            np.ascontiguousarray(Xb.indptr, dtype=np.int64),
            np.ascontiguousarray(Xb.indices, dtype=np.int64),
            np.ascontiguousarray(Xb.data),
            U, usq, float(gamma), out, xsq,
        )  # fmt: skip
    else:
        d = Xb.shape[1]
        _rbf_arg_dense(np.ascontiguousarray(Xb), U, usq, float(gamma), out, xsq,
                       np.empty(d, dtype=np.int64), np.empty(d, dtype=dt))  # fmt: skip
    return out, xsq


def _out(out, shape, dtype):
    """``out`` (C-contiguous, of ``shape`` and ``dtype``: refused otherwise) or a new array."""
    if out is None:
        return np.empty(shape, dtype=dtype)
    if out.shape != shape or out.dtype != dtype or not out.flags.c_contiguous:
        raise ValueError(
            f"out: must be a C-contiguous {np.dtype(dtype).name} array of shape {shape}; got "
            f"{out.dtype.name} {out.shape} (C-contiguous: {out.flags.c_contiguous}). Pass a row "
            "slice of a C-contiguous array of that dtype, or out=None"
        )
    return out


def rbf_sparse_rows(Xb, U, gamma, out=None):
    """RBF kernel block ``K[i, c] = exp(-gamma ||x_i - u_c||^2)`` of rows with few nonzeros.

    Parameters
    ----------
    Xb : ndarray or scipy.sparse CSR matrix of shape (n_samples, n_features), float32 or float64
        Read only; dense rows are scanned for their nonzeros.
    U : ndarray of shape (n_features, r), the dtype of ``Xb``
        Landmarks as columns.
    gamma : float
    out : ndarray of shape (n_samples, r), the dtype of ``Xb``, C-contiguous, optional
        Written in place and returned as ``K`` (e.g. a row slice of a larger kernel matrix, so
        that row parts computed on separate threads need no copy).  Each row's values do not
        depend on the rows computed with it.

    Returns
    -------
    K : ndarray of shape (n_samples, r), the dtype of ``Xb``
    xsq : ndarray of shape (n_samples,)
        Squared row norms ``||x_i||^2`` (the caller checks them for overflow).
    """
    out, xsq = _neg_scaled_sq_dists(Xb, U, gamma, out)
    np.exp(out, out=out)
    return out, xsq


def sq_dists_sparse_rows(Xb, U, out=None):
    """Squared distances ``max(||x_i - u_c||^2, 0)`` (n_samples, r) of rows with few nonzeros
    to the columns of ``U``, the same arithmetic as :func:`rbf_sparse_rows` without the
    ``exp`` (the median heuristic of the kernel width); into ``out`` when given."""
    return _neg_scaled_sq_dists(Xb, U, -1.0, out)[0]
