"""Multi-view machine kernels (SPEC section 3): prediction, loss + gradient, one SGD sweep.

Layout shared by every kernel.  The ``m`` views of a row block arrive as **one** CSR matrix
whose columns are the views side by side (view ``p`` owns columns ``off[p] .. off[p+1]-1``;
``col_view[c]`` is the view of column ``c``).  The factors of all views are stacked in one
array ``theta`` of shape ``(I + m, k)``: row ``c < I`` is feature ``c``'s factor row and row
``I + p`` is view ``p``'s **bias factor** (the constant-1 augmentation ``z^(p) = [x^(p); 1]``).

Per row (MVM-9): ``s[p, f] = theta[I + p, f] + sum_{c in view p} x_c theta[c, f]`` and
``yhat = sum_f prod_p s[p, f]``.  The leave-one-out products ``g[p, f] = prod_{q != p} s[q, f]``
(the model gradient MVM-16 up to ``x_c``) come from prefix and suffix products: never a
division, so an all-zero factor column is fine (SPEC 3.4).

Losses (``loss`` code): 0 square ``(yhat - y)^2`` (no 1/2, SPEC 3.9), 1 logistic
``log(1 + exp(-y yhat))``, 2 hinge ``max(0, 1 - y yhat)`` (subgradient 0 at the kink), labels
in {-1, +1} for 1 and 2.  Cost per row: ``O(k (nnz + m))``.
"""

from __future__ import annotations

import math

import numpy as np

from ._numba import njit

SQUARE, LOGISTIC, HINGE = 0, 1, 2


@njit
def _row_sums(indptr, indices, data, i, theta, col_view, n_feat, s):
    m, k = s.shape
    for p in range(m):
        for f in range(k):
            s[p, f] = theta[n_feat + p, f]
    for e in range(indptr[i], indptr[i + 1]):
        c = indices[e]
        p = col_view[c]
        x = data[e]
        for f in range(k):
            s[p, f] += x * theta[c, f]


@njit
def _leave_one_out(s, g):
    """``g[p, f] = prod_{q != p} s[q, f]`` by prefix/suffix products; returns ``yhat``."""
    m, k = s.shape
    yhat = 0.0
    for f in range(k):
        acc = 1.0
        for p in range(m):
            g[p, f] = acc
            acc *= s[p, f]
        yhat += acc
        acc = 1.0
        for p in range(m - 1, -1, -1):
            g[p, f] *= acc
            acc *= s[p, f]
    return yhat


@njit
def _loss_and_slope(yhat, y, loss):
    """Loss value and its derivative with respect to ``yhat``."""
    if loss == SQUARE:
        r = yhat - y
        return r * r, 2.0 * r
    if loss == LOGISTIC:
        t = y * yhat
        # log(1 + exp(-t)) computed without overflow for either sign of t
        if t > 0:
            val = math.log1p(math.exp(-t))
            slope = -y * math.exp(-t) / (1.0 + math.exp(-t))
        else:
            val = -t + math.log1p(math.exp(t))
            slope = -y / (1.0 + math.exp(t))
        return val, slope
    t = y * yhat
    if t < 1.0:
        return 1.0 - t, -y
    return 0.0, 0.0


@njit
def _reg_slope(th, reg, reg_weight, eps):
    """``reg_weight * dOmega/dtheta`` (MVM-20: l2, MVM-21: smoothed l1; 0 for none)."""
    if reg == 1:
        return reg_weight * 2.0 * th
    if reg == 2:
        return reg_weight * th / math.sqrt(th * th + eps)
    return 0.0


@njit
def predict_block(indptr, indices, data, theta, col_view, n_feat, n_views, b0):
    """Model output ``b0 + yhat`` (MVM-9 plus an intercept) for every row of a block;
    shape ``(n_rows,)``."""
    n = indptr.shape[0] - 1
    k = theta.shape[1]
    s = np.empty((n_views, k))
    g = np.empty((n_views, k))
    out = np.empty(n)
    for i in range(n):
        _row_sums(indptr, indices, data, i, theta, col_view, n_feat, s)
        out[i] = b0 + _leave_one_out(s, g)
    return out


@njit
def loss_grad_block(indptr, indices, data, y, theta, col_view, n_feat, n_views, loss, b0):
    """Summed loss over a block's rows of ``b0 + yhat`` and its gradient.

    Returns ``(loss_sum, grad, grad_b0)`` with ``grad`` of ``theta``'s shape ``(I + m, k)``.
    """
    n = indptr.shape[0] - 1
    k = theta.shape[1]
    s = np.empty((n_views, k))
    g = np.empty((n_views, k))
    grad = np.zeros(theta.shape)
    total = 0.0
    gb = 0.0
    for i in range(n):
        _row_sums(indptr, indices, data, i, theta, col_view, n_feat, s)
        yhat = b0 + _leave_one_out(s, g)
        val, dl = _loss_and_slope(yhat, y[i], loss)
        total += val
        if dl == 0.0:
            continue
        gb += dl
        for p in range(n_views):
            for f in range(k):
                grad[n_feat + p, f] += dl * g[p, f]
        for e in range(indptr[i], indptr[i + 1]):
            c = indices[e]
            p = col_view[c]
            w = dl * data[e]
            for f in range(k):
                grad[c, f] += w * g[p, f]
    return total, grad, gb


@njit
def sgd_block(
    indptr, indices, data, y, order, theta, accum, col_view, n_feat, n_views, loss, eta,
    reg, reg_weight, eps, scale, b0,
):
    """One AdaGrad SGD sweep over the rows of a block in the given ``order`` (SPEC Algorithm 1).

    ``theta`` and ``accum`` (AdaGrad's sums of squared gradients, same shape) are the solver's
    own state and are updated in place, like ``b0 = [intercept, its AdaGrad sum]`` (the
    intercept is not regularised; ``b0`` of length 0 means no intercept); the data are only read.  All updates of one row use
    the gradient at the factors from the start of that row (simultaneous updates, SPEC 3.5).
    The regulariser (``reg`` 0 none, 1 l2 ``||theta||^2``, 2 smoothed l1
    ``sum sqrt(theta^2 + eps)``) is applied to the touched rows only (lazy, as in Algorithm 1),
    weighted by ``reg_weight``.  ``scale`` multiplies the loss gradient (``1`` for the summed
    loss).  Returns the sum over rows of the loss before each row's update.
    """
    k = theta.shape[1]
    s = np.empty((n_views, k))
    g = np.empty((n_views, k))
    total = 0.0
    for t in range(order.shape[0]):
        i = order[t]
        _row_sums(indptr, indices, data, i, theta, col_view, n_feat, s)
        yhat = _leave_one_out(s, g)
        if b0.shape[0]:
            yhat += b0[0]
        val, dl = _loss_and_slope(yhat, y[i], loss)
        total += val
        dl *= scale
        if b0.shape[0] and dl != 0.0:
            b0[1] += dl * dl
            b0[0] -= eta * dl / (math.sqrt(b0[1]) + 1e-12)
        for p in range(n_views):
            r = n_feat + p
            for f in range(k):
                th = theta[r, f]
                gr = dl * g[p, f] + _reg_slope(th, reg, reg_weight, eps)
                accum[r, f] += gr * gr
                theta[r, f] = th - eta * gr / (math.sqrt(accum[r, f]) + 1e-12)
        for e in range(indptr[i], indptr[i + 1]):
            c = indices[e]
            p = col_view[c]
            w = dl * data[e]
            for f in range(k):
                th = theta[c, f]
                gr = w * g[p, f] + _reg_slope(th, reg, reg_weight, eps)
                if gr == 0.0:
                    continue
                accum[c, f] += gr * gr
                theta[c, f] = th - eta * gr / (math.sqrt(accum[c, f]) + 1e-12)
    return total


# ------------------------------------------------------------------------------ dense path
# The dense block path (ooc_lowrank.mvm._blocks) forms each view's sums S[p] = X_p @ Theta_p +
# bias row p with BLAS, ``S`` of shape (m, rows, K k) for K models of k columns each; these two
# kernels do the elementwise rest in one sweep each, without temporaries.


@njit
def dense_outputs(S, k, b0, out):
    """``out[i, c] = b0[c] + sum_{f in model c} prod_p S[p, i, c k + f]`` (MVM-9 per model);
    ``out`` is ``(rows, K)``.  Per row, the products run over ``p`` with the columns innermost
    (contiguous, vectorized); the same operations in the same order as a loop over ``p``
    innermost."""
    m, n, width = S.shape
    prod = np.empty(width)
    for i in range(n):
        for j in range(width):
            prod[j] = S[0, i, j]
        for p in range(1, m):
            for j in range(width):
                prod[j] *= S[p, i, j]
        for c in range(out.shape[1]):
            acc = b0[c]
            for f in range(c * k, (c + 1) * k):
                acc += prod[f]
            out[i, c] = acc


@njit
def dense_weighted_loo(S, k, dl, colsum):
    """Overwrite ``S[p, i, j]`` with ``dl[i, j // k] * prod_{q != p} S[q, i, j]`` (the factor
    of ``z^(p)`` in the gradient, MVM-16 times the loss slope), by prefix and suffix products
    (no division, SPEC 3.4), and write ``colsum[p, j] = sum_i`` of the new ``S[p, i, j]``
    (float64 ``(m, K k)``, rows in order: the gradient of the bias rows, as
    ``S[p].sum(axis=0, dtype=np.float64)`` sums them).  ``S`` is the solver's own temporary;
    ``dl`` is ``(rows, K)``.  Per row, the columns are innermost (contiguous, vectorized)."""
    m, n, width = S.shape
    s = np.empty((m, width))
    acc = np.empty(width)
    colsum[:] = 0.0
    for i in range(n):
        for p in range(m):
            for j in range(width):
                s[p, j] = S[p, i, j]
        for j in range(width):
            acc[j] = dl[i, j // k]
        for p in range(m):
            for j in range(width):
                S[p, i, j] = acc[j]
                acc[j] *= s[p, j]
        for j in range(width):
            acc[j] = 1.0
        for p in range(m - 1, -1, -1):
            for j in range(width):
                S[p, i, j] *= acc[j]
                colsum[p, j] += S[p, i, j]
                acc[j] *= s[p, j]


# ------------------------------------------------------------------------------ L-BFGS driver


@njit
def _dot(u, v):
    acc = 0.0
    for d in range(u.shape[0]):
        acc += u[d] * v[d]
    return acc


@njit
def _axpy(alpha, x, y):
    """``y += alpha x`` in place."""
    for d in range(y.shape[0]):
        y[d] += alpha * x[d]


@njit
def lbfgs_two_loop(G, S, Y, rho, gamma, order, models, out):
    """L-BFGS directions ``out[c] = -H_c G[c]`` of the models ``c`` in ``models`` (the other
    rows of ``out`` are left alone), by the two-loop recursion over each model's curvature
    pairs: ``S``, ``Y`` ``(K, M, D)``, a ring of ``M`` slots visited newest first in ``order``;
    ``rho`` ``(K, M)`` the pairs' ``1 / s.y``, 0 for an empty slot (skipped); ``gamma`` ``(K,)``
    the initial scaling.

    One model at a time, so its direction (``D`` floats) and its pairs stay in cache across
    both loops (the NumPy twin ``tests/naive_mvm.py::two_loop`` runs the textbook recursion of
    one model; a loop over the slots with every model's vector work in one NumPy call streamed
    all models' pairs through memory four times per iteration)."""
    a = np.empty(S.shape[1])
    for c in models:
        q = out[c]
        q[:] = G[c]
        for j in order:
            if rho[c, j] != 0.0:
                a[j] = rho[c, j] * _dot(S[c, j], q)
                _axpy(-a[j], Y[c, j], q)
        q *= gamma[c]
        for jj in range(len(order) - 1, -1, -1):
            j = order[jj]
            if rho[c, j] != 0.0:
                _axpy(a[j] - rho[c, j] * _dot(Y[c, j], q), S[c, j], q)
        q *= -1.0
