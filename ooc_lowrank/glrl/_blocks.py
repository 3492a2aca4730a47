"""Block functions of GLRL: one row block of observed entries in, a small NumPy result out.

Each function has the engine's ``offset=True`` signature ``fn(row_start, block, *args)``:
``block`` is a ``scipy.sparse.csr_matrix`` of shape ``(rows_in_block, n_cols)`` whose
``indices`` are column ids and whose ``data`` are the observed values (duplicates kept).
Results are summed over blocks by the engine (float64 tree reduction): scalar statistics
and full-length column-side vectors.  Row-side vectors (``G v`` of the power passes) are the
block's rows only, declared with ``fn.row_outputs`` (:func:`ooc_lowrank.engine.reduce_blocks`);
the engine places them at the block's rows of the full-length result.

Policy on predictions at observed entries: they are **recomputed** from the factors inside
each kernel (O(t) per entry, t = current rank) instead of being cached per block.  This keeps
the memory at O((n_rows + n_cols) * rank) plus one block on every scheduler and makes every
pass a pure function of (block, small state), hence bit-reproducible across schedulers.
"""

from __future__ import annotations

import threading
import weakref

import numpy as np
import scipy.sparse as sp

from ooc_lowrank.glrl.losses import _value
from ooc_lowrank.kernels import glrl as _k


def _parts(block):
    return block.indptr, block.indices, block.data


def pack_columns(V, v):
    """``V`` with ``v`` appended as its last column, ``(n_cols, t + 1)`` float64: the column
    side of a power pass in the layout :func:`power_block` reads (one row per entry)."""
    Vv = np.empty((V.shape[0], V.shape[1] + 1))
    Vv[:, :-1] = V
    Vv[:, -1] = v
    return Vv


def power_block(row_start, block, U, Vv, theta, loss, delta, u):
    """Gradient on the block fused with ``G v`` and ``G^T u``; ``Vv = pack_columns(V, v)``.

    Returns ``(gv (rows_in_block,), gtu (n_cols,), stats (3,))`` with ``stats = (sum loss,
    sum g^2, sum g x)``; ``gv`` holds the block's rows (a row output, module doc).
    """
    indptr, cols, vals = _parts(block)
    gv = np.empty(indptr.shape[0] - 1)
    gtu = np.zeros(Vv.shape[0])
    stats = np.zeros(3)
    _k.power_pass(
        indptr, cols, vals, np.int64(row_start), U, Vv, theta, loss, delta, u, gv, gtu, stats
    )
    return gv, gtu, stats


power_block.row_outputs = (0,)

_PACK_LOCK = threading.Lock()
_PACKED = [None]  # (weakref to V, weakref to v, pack_columns(V, v)): this process's last pack


def _forget_pack(ref):
    with _PACK_LOCK:
        if _PACKED[0] is not None and ref in _PACKED[0][:2]:
            _PACKED[0] = None


def packed_columns(V, v):
    """:func:`pack_columns` of ``(V, v)``, built once per pair of objects in this process: every
    block of a pass gets the same ``V`` and ``v`` (a distributed worker passes each task the
    object it holds for the scattered key; the local paths pass the caller's arrays), so one
    pack serves the pass.  Forgotten when ``V`` or ``v`` is freed; a copy of either (a
    misaligned frame re-aligned by the engine) is packed again, to the same values."""
    with _PACK_LOCK:
        memo = _PACKED[0]
        if memo is not None and memo[0]() is V and memo[1]() is v:
            return memo[2]
    Vv = pack_columns(V, v)
    with _PACK_LOCK:
        _PACKED[0] = (weakref.ref(V, _forget_pack), weakref.ref(v, _forget_pack), Vv)
    return Vv


def power_split_block(row_start, block, U, V, theta, loss, delta, u, v):
    """:func:`power_block` with the column side sent as ``V`` and ``v`` apart
    (:func:`packed_columns` joins them where the blocks are): across the power passes of one
    greedy step ``V`` is unchanged, so a cluster receives it once per step and only the new
    ``v`` (and ``u``) per pass, instead of a new ``[V, v]`` every pass (issue 27)."""
    return power_block(row_start, block, U, packed_columns(V, v), theta, loss, delta, u)


power_split_block.row_outputs = (0,)


def grad_csr_block(row_start, block, U, V, theta, loss, delta):
    """The block's per-entry (sub)gradients as a CSR matrix with the block's structure
    (``indptr`` and ``indices`` shared with ``block``, ``data`` = gradients, float64)."""
    indptr, cols, vals = _parts(block)
    g = np.empty(cols.shape[0])
    _k.grad_entries(indptr, cols, vals, np.int64(row_start), U, V, theta, loss, delta, g)
    out = sp.csr_matrix(block.shape, dtype=np.float64)
    out.data, out.indices, out.indptr = g, block.indices, block.indptr
    return out


def cached_power_block(row_start, gblock, u, v):
    """``(G v (rows_in_block,), G^T u (n_cols,))`` of one block of cached gradients (``G v``
    a row output, module doc)."""
    gv = np.empty(gblock.indptr.shape[0] - 1)
    gtu = np.zeros(v.shape[0])
    _k.cached_matvecs(
        gblock.indptr, gblock.indices, gblock.data, np.int64(row_start), u, v, gv, gtu
    )
    return gv, gtu


cached_power_block.row_outputs = (0,)


def refit_full_block(row_start, block, U, V, theta, loss, delta):
    """``(grad (t,), [sum loss])`` of the full coefficient refit at ``theta``."""
    indptr, cols, vals = _parts(block)
    grad = np.zeros(theta.shape[0])
    stats = np.zeros(1)
    _k.refit_full_pass(
        indptr, cols, vals, np.int64(row_start), U, V, theta, loss, delta, grad, stats
    )
    return grad, stats


def refit_gram_block(row_start, block, U, V, j0):
    """``(gram (t, t - j0), rhs (t - j0,))``: columns ``j0:`` of the basis Gram ``B^T B`` and
    of ``B^T o`` on the block's observed entries (the square loss's full refit)."""
    indptr, cols, vals = _parts(block)
    t = U.shape[1]
    gram = np.zeros((t, t - int(j0)))
    rhs = np.zeros(t - int(j0))
    _k.refit_gram_pass(
        indptr, cols, vals, np.int64(row_start), U, V, np.int64(j0), np.empty(t), gram, rhs
    )
    return gram, rhs


def refit_econ_block(
    row_start, block, U, V, theta_prev, alpha, beta, loss, delta, n_fixed=0, hessian=False
):
    """``[sum loss, d/dalpha, d/dbeta]`` of the economic refit (loss part only); the first
    ``n_fixed`` terms (the start ``X_0``) are not scaled by ``alpha``.  ``hessian=True``
    appends ``[d2/dalpha2, d2/dalpha dbeta, d2/dbeta2]``."""
    indptr, cols, vals = _parts(block)
    out = np.zeros(6 if hessian else 3)
    _k.refit_econ_pass(
        indptr,
        cols,
        vals,
        np.int64(row_start),
        U,
        V,
        theta_prev,
        np.int64(n_fixed),
        float(alpha),
        float(beta),
        loss,
        delta,
        out,
    )
    return out


def step_search_block(row_start, block, U, V, theta, n_prev, steps, loss, delta):
    """Loss sums of ``x_prev + eta_j d`` for each candidate step ``eta_j``."""
    indptr, cols, vals = _parts(block)
    out = np.zeros(steps.shape[0])
    _k.step_search_pass(
        indptr,
        cols,
        vals,
        np.int64(row_start),
        U,
        V,
        theta,
        np.int64(n_prev),
        steps,
        loss,
        delta,
        out,
    )
    return out


def metrics_block(row_start, block, U, V, theta):
    """``[count, sum |err|, sum err^2, #sign agreements, #nonzero labels]`` on one block."""
    indptr, cols, vals = _parts(block)
    pred = np.empty(cols.shape[0])
    _k.predict_block(indptr, cols, np.int64(row_start), U, V, theta, pred)
    o = np.asarray(vals, dtype=np.float64)
    err = pred - o
    return np.array(
        [
            float(o.size),
            float(np.abs(err).sum()),
            float((err * err).sum()),
            float(np.count_nonzero((np.sign(pred) == np.sign(o)) & (o != 0))),
            float(np.count_nonzero(o)),
        ]
    )


def loss_block(row_start, block, U, V, theta, loss, delta):
    """``[sum loss, count]`` at the model's predictions (validation objective)."""
    indptr, cols, vals = _parts(block)
    pred = np.empty(cols.shape[0])
    _k.predict_block(indptr, cols, np.int64(row_start), U, V, theta, pred)
    val = _value(loss, pred, np.asarray(vals, dtype=np.float64), delta)
    return np.array([float(val.sum()), float(cols.shape[0])])


def check_block(row_start, block, n_cols, labels_pm1):
    """Validation counts of one block: ``[nnz, #non-finite values, #labels not in {-1, +1},
    #column ids outside [0, n_cols), #repeated (row, col) pairs, sum of finite values,
    #values not in {-1, +1}, #values not in {0, 1}, #negative values]``.

    The third entry counts only when ``labels_pm1`` (it is an error then); the last three
    always count, for ``init="auto"`` (:func:`ooc_lowrank.glrl.core.resolve_init`).
    """
    indptr, cols, vals = _parts(block)
    nnz = cols.shape[0]
    vals = np.asarray(vals)
    c = np.zeros(6)
    _k.check_counts(indptr, cols, vals, np.int64(n_cols), c)  # one pass (was ~10 + a sort)
    nonfinite, not_pm1, not_01, negative, out_of_range, dup = (float(x) for x in c)
    bad_lab = not_pm1 if labels_pm1 else 0.0
    # NumPy's (pairwise) sum as before: the mean of the bias start is bitwise unchanged
    if not nnz:
        total = 0.0
    elif nonfinite:
        total = float(vals[np.isfinite(vals)].sum())
    else:
        total = float(vals.sum())
    return np.array(
        [float(nnz), nonfinite, bad_lab, out_of_range, dup, total, not_pm1, not_01, negative]
    )


def bias_block(row_start, block, mu, bu, bi, side, irls_eps):
    """Sums for one alternating update of the bias init ``X_0 = mu + b_u 1^T + 1 b_i^T``.

    ``side=0``: per-row ``[sum w (o - mu - b_i), sum w]`` (length ``2 * n_rows``); ``side=1``:
    per-column ``[sum w (o - mu - b_u), sum w]`` (length ``2 * n_cols``).  ``w = 1`` when
    ``irls_eps <= 0`` (square loss), else the L1 IRLS weight ``1 / max(|o - x_0|, irls_eps)``.
    """
    indptr, cols, vals = _parts(block)
    nb = indptr.shape[0] - 1
    rows = row_start + np.repeat(np.arange(nb, dtype=np.int64), np.diff(indptr))
    o = np.asarray(vals, dtype=np.float64)
    c = np.asarray(cols, dtype=np.int64)
    res_u = o - mu - bi[c]  # target of b_u
    res_i = o - mu - bu[rows]  # target of b_i
    if irls_eps > 0:
        w = 1.0 / np.maximum(np.abs(res_u - bu[rows]), irls_eps)
    else:
        w = np.ones_like(o)
    if side == 0:
        m = bu.shape[0]
        return np.concatenate(
            [np.bincount(rows, w * res_u, minlength=m), np.bincount(rows, w, minlength=m)]
        )
    n = bi.shape[0]
    return np.concatenate([np.bincount(c, w * res_i, minlength=n), np.bincount(c, w, minlength=n)])
