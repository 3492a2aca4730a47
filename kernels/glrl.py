"""Numba kernels for greedy low-rank pursuit (GLRL / EGLRL / R1MP) over observed entries.

A block of observed entries arrives in CSR form: ``indptr`` (n_block_rows + 1,), ``cols``
(nnz,), ``vals`` (nnz,) and the global index ``row0`` of the block's first row.  The model is
kept factored, ``X = U diag(theta) V^T`` with ``U`` (n_rows, t) and ``V`` (n_cols, t); the
prediction at an observed entry ``(a, b)`` is recomputed on the fly as
``sum_i theta[i] * U[a, i] * V[b, i]`` (O(t) per entry, nothing of size |Omega| is kept).

Every kernel writes only into arrays the caller allocated and never into its inputs (Zarr and
Dask chunks are read-only).  The kernels are serial: Dask owns the cores.  Each kernel has a
plain-NumPy twin in ``tests/naive_glrl.py``.

Loss codes (``loss`` argument): 0 square ``(x - o)^2 / 2``, 1 logistic ``log(1 + exp(-o x))``
(o in {-1, +1}), 2 Huber with threshold ``delta``, 3 absolute ``|x - o|`` (subgradient
``sign(x - o)``, 0 at the kink), 4 hinge ``max(0, 1 - o x)`` (subgradient ``-o`` where
``o x < 1``, 0 at and beyond the kink).

The per-entry passes (:func:`power_pass`, :func:`grad_entries`, :func:`refit_full_pass`) call
their row loop (inlined) with the cheap loss codes as constants: the loss dispatch of every
entry then folds away (square: 1.3-1.6x faster passes at ranks 5-20); other codes share one
generic copy.

For the square loss at ranks 1 to :data:`MAX_FIXED_RANK`, :func:`power_pass` and
:func:`refit_full_pass` run a copy of their row loop compiled for that exact rank: a row's
weights ``theta[i] * U[a, i]`` (and the refit's per-row sums ``sum_b g V[b, i]``) are held in
a fixed-length tuple, i.e. in registers, and the rank loop unrolls.  In the generic loop they
are re-read from memory for every entry, because the scatter ``gtu_out[b] += ...`` (or
``grad_out[i] += ...``) may alias them as far as the compiler knows.  The power pass keeps
the products and the order of additions (within 3e-16 relative); the refit sums a row's
entries before multiplying by ``U[a, i]`` (within 1e-13).  Serial, one 1.6M-entry block of
the 20M-entry bench store, A/B in one process (best of 10): power pass 1.3-1.7x faster at
ranks 3-8, refit pass 1.2-2.2x; rank 12 unchanged (generic loop; an 8-long register part
with a memory tail for the other ranks was 1.8-2.1x slower).  Each copy costs about 1 s of
first-call compile (cached afterwards), so the other losses, whose time goes to the loss and
not the gathers, keep the generic loop only.
"""

from __future__ import annotations

import math

import numpy as np
from numba.cpython.unsafe.tuple import tuple_setitem
from numba.np.unsafe.ndarray import to_fixed_tuple
from ooc_lowrank.kernels._numba import njit

SQUARE = 0
LOGISTIC = 1
HUBER = 2
L1 = 3
HINGE = 4

#: Largest rank with a specialized (register-held weights) copy of the per-entry loops.
MAX_FIXED_RANK = 8


@njit
def loss_value_grad(loss, x, o, delta):
    """Loss value and (sub)gradient with respect to the prediction ``x`` at one entry."""
    if loss == SQUARE:
        r = x - o
        return 0.5 * r * r, r
    if loss == LOGISTIC:
        z = o * x
        if z >= 0.0:
            e = math.exp(-z)
            return math.log1p(e), -o * e / (1.0 + e)
        e = math.exp(z)
        return -z + math.log1p(e), -o / (1.0 + e)
    if loss == HUBER:
        r = x - o
        ar = abs(r)
        if ar <= delta:
            return 0.5 * r * r, r
        return delta * (ar - 0.5 * delta), delta if r > 0.0 else -delta
    if loss == L1:
        r = x - o
        if r > 0.0:
            return r, 1.0
        if r < 0.0:
            return -r, -1.0
        return 0.0, 0.0
    # HINGE
    z = o * x
    if z < 1.0:
        return 1.0 - z, -o
    return 0.0, 0.0


@njit
def loss_curvature(loss, x, o, delta):
    """Second derivative of the loss with respect to the prediction ``x`` at one entry (the
    smooth losses; 0 for the nonsmooth ones)."""
    if loss == SQUARE:
        return 1.0
    if loss == LOGISTIC:
        z = o * x
        if z >= 0.0:
            e = math.exp(-z)
            return e / ((1.0 + e) * (1.0 + e))
        e = math.exp(z)
        return e / ((1.0 + e) * (1.0 + e))
    if loss == HUBER:
        return 1.0 if abs(x - o) <= delta else 0.0
    return 0.0


@njit
def _predict_one(U, V, theta, a, b):
    s = 0.0
    for i in range(theta.shape[0]):
        s += theta[i] * U[a, i] * V[b, i]
    return s


@njit(inline="always")
def _power_rows(
    indptr, cols, vals, row0, U, Vv, theta, loss, delta, u, gv_out, gtu_out, stats_out, T
):
    """Body of :func:`power_pass`.  ``T`` is a constant: the rank itself (a register copy,
    module doc) or 0 (the generic loop: every weight read from memory in the ``range(T, t)``
    loop, which is empty in a register copy)."""
    n_rows = indptr.shape[0] - 1
    t = theta.shape[0]
    lsum = 0.0
    g2 = 0.0
    gx = 0.0
    wa = np.empty(T)
    for r in range(n_rows):
        a = row0 + r
        for i in range(T):
            wa[i] = theta[i] * U[a, i]
        w = to_fixed_tuple(wa, T)
        ua = u[a]
        acc = 0.0
        for k in range(indptr[r], indptr[r + 1]):
            b = cols[k]
            x = 0.0
            for i in range(T):
                x += w[i] * Vv[b, i]
            for i in range(T, t):
                x += theta[i] * U[a, i] * Vv[b, i]
            lv, g = loss_value_grad(loss, x, float(vals[k]), delta)
            lsum += lv
            g2 += g * g
            gx += g * x
            acc += g * Vv[b, t]
            gtu_out[b] += g * ua
        gv_out[r] = acc
    stats_out[0] += lsum
    stats_out[1] += g2
    stats_out[2] += gx


@njit(inline="always")
def _power_any_rank(
    indptr, cols, vals, row0, U, Vv, theta, loss, delta, u, gv_out, gtu_out, stats_out
):
    """:func:`_power_rows` with the rank's constant ``T``."""
    t = theta.shape[0]
    if t == 1:
        _power_rows(
            indptr, cols, vals, row0, U, Vv, theta, loss, delta, u, gv_out, gtu_out, stats_out, 1
        )
    elif t == 2:
        _power_rows(
            indptr, cols, vals, row0, U, Vv, theta, loss, delta, u, gv_out, gtu_out, stats_out, 2
        )
    elif t == 3:
        _power_rows(
            indptr, cols, vals, row0, U, Vv, theta, loss, delta, u, gv_out, gtu_out, stats_out, 3
        )
    elif t == 4:
        _power_rows(
            indptr, cols, vals, row0, U, Vv, theta, loss, delta, u, gv_out, gtu_out, stats_out, 4
        )
    elif t == 5:
        _power_rows(
            indptr, cols, vals, row0, U, Vv, theta, loss, delta, u, gv_out, gtu_out, stats_out, 5
        )
    elif t == 6:
        _power_rows(
            indptr, cols, vals, row0, U, Vv, theta, loss, delta, u, gv_out, gtu_out, stats_out, 6
        )
    elif t == 7:
        _power_rows(
            indptr, cols, vals, row0, U, Vv, theta, loss, delta, u, gv_out, gtu_out, stats_out, 7
        )
    elif t == 8:
        _power_rows(
            indptr, cols, vals, row0, U, Vv, theta, loss, delta, u, gv_out, gtu_out, stats_out, 8
        )
    else:  # rank 0 or above MAX_FIXED_RANK: the generic loop (T = 0)
        _power_rows(
            indptr, cols, vals, row0, U, Vv, theta, loss, delta, u, gv_out, gtu_out, stats_out, 0
        )


@njit
def power_pass(indptr, cols, vals, row0, U, Vv, theta, loss, delta, u, gv_out, gtu_out, stats_out):
    """Per-entry gradient fused with both power-method products, for one block.

    ``Vv`` is ``V`` with ``v`` as one more column, shape ``(n_cols, t + 1)``: an entry's
    column reads one contiguous row (``V[b, :]`` and ``v[b]`` share cache lines; 1.3x faster
    than two arrays on a 20000-column store, serial, rank 5).  With ``g`` the (sub)gradient
    of the loss at the current predictions on the block's entries:
    ``gv_out[r] = sum_b g[r, b] v[b]`` (``gv_out`` holds the block's rows only),
    ``gtu_out[b] += sum_r g[r, b] u[row0 + r]`` (a private partial vector for this block; the
    caller sums the blocks' vectors), and ``stats_out += (sum loss, sum g^2, sum g * x)``.
    """
    # a constant loss code folds the per-entry loss dispatch away; register copies per rank
    # for the square loss only (module doc)
    if loss == SQUARE:
        _power_any_rank(
            indptr, cols, vals, row0, U, Vv, theta, SQUARE, delta, u, gv_out, gtu_out, stats_out
        )
    elif loss == L1:
        _power_rows(
            indptr, cols, vals, row0, U, Vv, theta, L1, delta, u, gv_out, gtu_out, stats_out, 0
        )
    elif loss == HUBER:
        _power_rows(
            indptr, cols, vals, row0, U, Vv, theta, HUBER, delta, u, gv_out, gtu_out, stats_out, 0
        )
    else:
        _power_rows(
            indptr, cols, vals, row0, U, Vv, theta, loss, delta, u, gv_out, gtu_out, stats_out, 0
        )


@njit(inline="always")
def _grad_rows(indptr, cols, vals, row0, U, V, theta, loss, delta, g_out):
    """Body of :func:`grad_entries`, inlined once per specialized loss code."""
    n_rows = indptr.shape[0] - 1
    for r in range(n_rows):
        a = row0 + r
        for k in range(indptr[r], indptr[r + 1]):
            x = _predict_one(U, V, theta, a, cols[k])
            _, g = loss_value_grad(loss, x, float(vals[k]), delta)
            g_out[k] = g


@njit
def grad_entries(indptr, cols, vals, row0, U, V, theta, loss, delta, g_out):
    """Per-entry (sub)gradient of the loss at the current predictions, in storage order.

    The gradient of one greedy step is fixed while the power method runs; caching it makes
    every later power pass O(1) per entry (:func:`cached_matvecs`) instead of O(t).
    """
    if loss == SQUARE:
        _grad_rows(indptr, cols, vals, row0, U, V, theta, SQUARE, delta, g_out)
    elif loss == L1:
        _grad_rows(indptr, cols, vals, row0, U, V, theta, L1, delta, g_out)
    elif loss == HUBER:
        _grad_rows(indptr, cols, vals, row0, U, V, theta, HUBER, delta, g_out)
    else:
        _grad_rows(indptr, cols, vals, row0, U, V, theta, loss, delta, g_out)


@njit
def cached_matvecs(indptr, cols, g, row0, u, v, gv_out, gtu_out):
    """``G v`` and ``G^T u`` from cached per-entry gradients ``g`` (same order of additions as
    :func:`power_pass`): ``gv_out[r] = sum_b g v[b]`` (the block's rows only),
    ``gtu_out[b] += g u[row0 + r]``."""
    n_rows = indptr.shape[0] - 1
    for r in range(n_rows):
        a = row0 + r
        ua = u[a]
        acc = 0.0
        for k in range(indptr[r], indptr[r + 1]):
            b = cols[k]
            gk = g[k]
            acc += gk * v[b]
            gtu_out[b] += gk * ua
        gv_out[r] = acc


@njit(inline="always")
def _refit_full_rows(indptr, cols, vals, row0, U, V, theta, loss, delta, grad_out, stats_out, T):
    """Body of :func:`refit_full_pass`.  ``T`` is a constant: the rank itself (a register
    copy: a row's weights and its sums ``sum_b g V[b, i]`` in tuples, then ``grad_out[i] +=
    U[a, i] * sum``) or 0 (the generic loop: ``grad_out[i] += g U[a, i] V[b, i]`` per entry)."""
    n_rows = indptr.shape[0] - 1
    t = theta.shape[0]
    lsum = 0.0
    wa = np.empty(T)
    zero = to_fixed_tuple(np.zeros(T), T)
    for r in range(n_rows):
        a = row0 + r
        for i in range(T):
            wa[i] = theta[i] * U[a, i]
        w = to_fixed_tuple(wa, T)
        acc = zero
        for k in range(indptr[r], indptr[r + 1]):
            b = cols[k]
            x = 0.0
            for i in range(T):
                x += w[i] * V[b, i]
            for i in range(T, t):
                x += theta[i] * U[a, i] * V[b, i]
            lv, g = loss_value_grad(loss, x, float(vals[k]), delta)
            lsum += lv
            for i in range(T):
                acc = tuple_setitem(acc, i, acc[i] + g * V[b, i])
            for i in range(T, t):
                grad_out[i] += g * U[a, i] * V[b, i]
        for i in range(T):
            grad_out[i] += U[a, i] * acc[i]
    stats_out[0] += lsum


@njit(inline="always")
def _refit_full_any_rank(indptr, cols, vals, row0, U, V, theta, loss, delta, grad_out, stats_out):
    """:func:`_refit_full_rows` with the rank's constant ``T``."""
    t = theta.shape[0]
    if t == 1:
        _refit_full_rows(indptr, cols, vals, row0, U, V, theta, loss, delta, grad_out, stats_out, 1)
    elif t == 2:
        _refit_full_rows(indptr, cols, vals, row0, U, V, theta, loss, delta, grad_out, stats_out, 2)
    elif t == 3:
        _refit_full_rows(indptr, cols, vals, row0, U, V, theta, loss, delta, grad_out, stats_out, 3)
    elif t == 4:
        _refit_full_rows(indptr, cols, vals, row0, U, V, theta, loss, delta, grad_out, stats_out, 4)
    elif t == 5:
        _refit_full_rows(indptr, cols, vals, row0, U, V, theta, loss, delta, grad_out, stats_out, 5)
    elif t == 6:
        _refit_full_rows(indptr, cols, vals, row0, U, V, theta, loss, delta, grad_out, stats_out, 6)
    elif t == 7:
        _refit_full_rows(indptr, cols, vals, row0, U, V, theta, loss, delta, grad_out, stats_out, 7)
    elif t == 8:
        _refit_full_rows(indptr, cols, vals, row0, U, V, theta, loss, delta, grad_out, stats_out, 8)
    else:  # rank 0 or above MAX_FIXED_RANK: the generic loop (T = 0)
        _refit_full_rows(indptr, cols, vals, row0, U, V, theta, loss, delta, grad_out, stats_out, 0)


@njit
def refit_full_pass(indptr, cols, vals, row0, U, V, theta, loss, delta, grad_out, stats_out):
    """Objective and gradient in ``theta`` of ``sum loss(sum_i theta_i u_i(a) v_i(b), o_ab)``.

    ``grad_out[i] += sum_ab g_ab U[a, i] V[b, i]`` and ``stats_out[0] += sum loss``.
    """
    # register copies per rank for the square loss only (module doc)
    if loss == SQUARE:
        _refit_full_any_rank(
            indptr, cols, vals, row0, U, V, theta, SQUARE, delta, grad_out, stats_out
        )
    elif loss == L1:
        _refit_full_rows(indptr, cols, vals, row0, U, V, theta, L1, delta, grad_out, stats_out, 0)
    elif loss == HUBER:
        _refit_full_rows(
            indptr, cols, vals, row0, U, V, theta, HUBER, delta, grad_out, stats_out, 0
        )
    else:
        _refit_full_rows(indptr, cols, vals, row0, U, V, theta, loss, delta, grad_out, stats_out, 0)


@njit(inline="always")
def _econ_rows(indptr, cols, vals, row0, U, V, theta_prev, n_fixed, alpha, beta, loss, delta, out):
    """Body of :func:`refit_econ_pass`, inlined once per specialized loss code.  A row's
    weights ``theta_prev[i] * U[a, i]`` are formed once per row (the same products as per
    entry, so the same sums)."""
    n_rows = indptr.shape[0] - 1
    p = theta_prev.shape[0]
    hess = out.shape[0] >= 6
    wa = np.empty(p)
    lsum = 0.0
    ga = 0.0
    gb = 0.0
    haa = 0.0
    hab = 0.0
    hbb = 0.0
    for r in range(n_rows):
        a = row0 + r
        for i in range(p):
            wa[i] = theta_prev[i] * U[a, i]
        up = U[a, p]
        for k in range(indptr[r], indptr[r + 1]):
            b = cols[k]
            xf = 0.0
            for i in range(n_fixed):
                xf += wa[i] * V[b, i]
            xg = 0.0
            for i in range(n_fixed, p):
                xg += wa[i] * V[b, i]
            w = up * V[b, p]
            x = xf + alpha * xg + beta * w
            o = float(vals[k])
            lv, g = loss_value_grad(loss, x, o, delta)
            lsum += lv
            ga += g * xg
            gb += g * w
            if hess:
                c = loss_curvature(loss, x, o, delta)
                haa += c * xg * xg
                hab += c * xg * w
                hbb += c * w * w
    out[0] += lsum
    out[1] += ga
    out[2] += gb
    if hess:
        out[3] += haa
        out[4] += hab
        out[5] += hbb


@njit
def refit_econ_pass(
    indptr, cols, vals, row0, U, V, theta_prev, n_fixed, alpha, beta, loss, delta, out
):
    """Objective and gradient in ``(alpha, beta)`` of ``loss(x_f + alpha x_g + beta w, o)``.

    With ``p = len(theta_prev)``: ``x_f = sum_{i < n_fixed} theta_prev[i] U[a, i] V[b, i]`` (the
    start terms, which the refit does not scale), ``x_g`` the same sum over
    ``n_fixed <= i < p`` (the greedy terms) and ``w = U[a, p] V[b, p]`` (the new rank-one term).
    ``out[:3] += (sum loss, sum g x_g, sum g w)``.  ``n_fixed = 0`` is SPEC GLRL-7 exactly.
    With ``out`` of length 6 also the Hessian, with ``c`` the loss's curvature at the entry:
    ``out[3:] += (sum c x_g^2, sum c x_g w, sum c w^2)``.
    """
    if loss == SQUARE:
        _econ_rows(
            indptr, cols, vals, row0, U, V, theta_prev, n_fixed, alpha, beta, SQUARE, delta, out
        )
    elif loss == LOGISTIC:
        _econ_rows(
            indptr, cols, vals, row0, U, V, theta_prev, n_fixed, alpha, beta, LOGISTIC, delta, out
        )
    else:
        _econ_rows(
            indptr, cols, vals, row0, U, V, theta_prev, n_fixed, alpha, beta, loss, delta, out
        )


@njit
def refit_gram_pass(indptr, cols, vals, row0, U, V, j0, work, gram_out, rhs_out):
    """The square loss's full refit as least squares: columns ``j0:`` of the basis Gram and
    of its right-hand side on the observed entries, one pass.

    With ``b_i = U[a, i] V[b, i]`` (``t = U.shape[1]`` terms): ``gram_out[i, j - j0] +=
    sum b_i b_j`` and ``rhs_out[j - j0] += sum o b_j`` for ``j >= j0``.  The Gram does not
    depend on the coefficients, so the refit keeps it between greedy steps and asks for the
    new column only (``j0 = t - 1``): O(t) per entry.  No sum over the terms is formed per
    entry (only products), so the result does not depend on how the compiler vectorizes.
    ``work`` is scratch of length ``t``.
    """
    n_rows = indptr.shape[0] - 1
    t = U.shape[1]
    for r in range(n_rows):
        a = row0 + r
        for k in range(indptr[r], indptr[r + 1]):
            b = cols[k]
            for i in range(t):
                work[i] = U[a, i] * V[b, i]
            o = float(vals[k])
            for j in range(j0, t):
                wj = work[j]
                rhs_out[j - j0] += o * wj
                for i in range(t):
                    gram_out[i, j - j0] += wj * work[i]


@njit
def step_search_pass(indptr, cols, vals, row0, U, V, theta, n_prev, steps, loss, delta, out):
    """Objective of ``x_prev + eta * d`` for every candidate ``eta`` in ``steps``, one pass.

    ``x_prev`` uses the first ``n_prev`` terms of ``(U, V, theta)``; the direction ``d`` uses the
    remaining terms.  ``out[j] += sum loss(x_prev + steps[j] * d, o)``.
    """
    n_rows = indptr.shape[0] - 1
    t = theta.shape[0]
    ns = steps.shape[0]
    for r in range(n_rows):
        a = row0 + r
        for k in range(indptr[r], indptr[r + 1]):
            b = cols[k]
            xp = 0.0
            for i in range(n_prev):
                xp += theta[i] * U[a, i] * V[b, i]
            d = 0.0
            for i in range(n_prev, t):
                d += theta[i] * U[a, i] * V[b, i]
            o = float(vals[k])
            for j in range(ns):
                lv, _ = loss_value_grad(loss, xp + steps[j] * d, o, delta)
                out[j] += lv


@njit
def predict_pairs(rows, cols, U, V, theta, out):
    """``out[k] = sum_i theta[i] U[rows[k], i] V[cols[k], i]`` for arbitrary pairs."""
    for k in range(rows.shape[0]):
        out[k] = _predict_one(U, V, theta, rows[k], cols[k])


@njit
def predict_block(indptr, cols, row0, U, V, theta, out):
    """Predictions at a CSR block's entries, in storage order."""
    n_rows = indptr.shape[0] - 1
    for r in range(n_rows):
        a = row0 + r
        for k in range(indptr[r], indptr[r + 1]):
            out[k] = _predict_one(U, V, theta, a, cols[k])


@njit
def top_k_rows(rows, U, V, theta, k, out_idx, out_val):
    """Top-``k`` columns of ``X[rows]`` (descending), one row at a time (no dense X).

    ``out_idx`` and ``out_val`` are ``(len(rows), k)``; a row of scores is ``n_cols`` long.
    """
    n_cols = V.shape[0]
    t = theta.shape[0]
    w = np.empty(t)
    scores = np.empty(n_cols)
    for r in range(rows.shape[0]):
        a = rows[r]
        for i in range(t):
            w[i] = theta[i] * U[a, i]
        for b in range(n_cols):
            s = 0.0
            for i in range(t):
                s += w[i] * V[b, i]
            scores[b] = s
        order = np.argsort(-scores, kind="mergesort")
        for j in range(k):
            out_idx[r, j] = order[j]
            out_val[r, j] = scores[order[j]]


@njit
def check_counts(indptr, cols, vals, n_cols, out):
    """Validation counts of one CSR block in one pass (the twin is the NumPy version in
    ``tests/naive_glrl.py``): ``out += [#non-finite values, #values not in {-1, +1},
    #values not in {0, 1}, #negative values, #column ids outside [0, n_cols), #repeated
    (row, col) pairs]``.  A row whose columns increase strictly has no repeat; any other row
    is sorted in a scratch copy and its equal neighbours counted."""
    nonfinite = 0
    not_pm1 = 0
    not_01 = 0
    negative = 0
    out_of_range = 0
    dup = 0
    n_rows = indptr.shape[0] - 1
    for r in range(n_rows):
        lo = indptr[r]
        hi = indptr[r + 1]
        ordered = True
        for k in range(lo, hi):
            v = float(vals[k])
            if not math.isfinite(v):
                nonfinite += 1
            if v != 1.0 and v != -1.0:
                not_pm1 += 1
            if v != 0.0 and v != 1.0:
                not_01 += 1
            if v < 0.0:
                negative += 1
            c = np.int64(cols[k])
            if c < 0 or c >= n_cols:
                out_of_range += 1
            if k > lo and c <= np.int64(cols[k - 1]):
                ordered = False
        if not ordered:
            s = np.sort(cols[lo:hi].astype(np.int64))
            for k in range(1, s.shape[0]):
                if s[k] == s[k - 1]:
                    dup += 1
    out[0] += nonfinite
    out[1] += not_pm1
    out[2] += not_01
    out[3] += negative
    out[4] += out_of_range
    out[5] += dup
