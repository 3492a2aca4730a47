"""Block functions of the multi-view machine: one row block of the views (and target) in, a
small NumPy result out.  The views of a block are joined into one CSR matrix whose columns are
the views side by side (the layout of :mod:`ooc_lowrank.kernels.mvm`)."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ooc_lowrank.kernels import mvm as _k


def joined_csr(blocks):
    """The views of one row block as one float64 CSR matrix (views side by side)."""
    parts = [b if sp.issparse(b) else sp.csr_matrix(np.asarray(b)) for b in blocks]
    M = parts[0] if len(parts) == 1 else sp.hstack(parts, format="csr")
    M = sp.csr_matrix(M, dtype=np.float64)
    if not M.has_canonical_format:
        M = M.copy()
        M.sum_duplicates()
    return M


def signed_target(yb, task):
    """Target block as float64 ``(rows,)``; classification labels 0 -> -1 (SPEC 3.9)."""
    y = np.asarray(yb.toarray() if sp.issparse(yb) else yb, dtype=np.float64).reshape(-1)
    if task == "classification":
        y = np.where(y > 0, 1.0, -1.0)
    return y


def label_counts(yb):
    """Counts of target values -1, 0, +1, other and non-finite in a block (validation pass)."""
    y = np.asarray(yb.toarray() if sp.issparse(yb) else yb, dtype=np.float64).reshape(-1)
    fin = np.isfinite(y)
    neg, zero, pos = (y == -1).sum(), (y == 0).sum(), (y == 1).sum()
    return np.array([neg, zero, pos, fin.sum() - neg - zero - pos, (~fin).sum()], float)


def target_stats(yb):
    """Count, sum and sum of squares of a regression target block."""
    y = np.asarray(yb.toarray() if sp.issparse(yb) else yb, dtype=np.float64).reshape(-1)
    return np.array([y.size, y.sum(), (y * y).sum(), (~np.isfinite(y)).sum()])


def loss_grad(*items, n_views_in, n_feat, n_views, loss, task):
    """``(loss_sum, grad_theta, grad_b0)`` of a block.

    ``items`` = view blocks, target block, theta, col_view, b0 (intercept)."""
    blocks, yb = items[:n_views_in], items[n_views_in]
    theta, col_view, b0 = items[n_views_in + 1], items[n_views_in + 2], items[n_views_in + 3]
    M = joined_csr(blocks)
    y = signed_target(yb, task)
    total, grad, gb = _k.loss_grad_block(
        M.indptr, M.indices, M.data, y, theta, col_view, n_feat, n_views, loss, float(b0)
    )
    return np.array([total]), grad, np.array([gb])


def decision(*items, n_views_in, n_feat, n_views, b0):
    """Model output of a block's rows as ``(rows, 1)``: ``items`` = view blocks, theta, col_view."""
    blocks, theta, col_view = items[:n_views_in], items[n_views_in], items[n_views_in + 1]
    M = joined_csr(blocks)
    out = _k.predict_block(M.indptr, M.indices, M.data, theta, col_view, n_feat, n_views, b0)
    return out[:, None]


def metric_sums(*items, n_views_in, n_feat, n_views, b0, task):
    """Sums for streaming metrics: count, |err|, err^2, correct sign (classification)."""
    blocks, yb = items[:n_views_in], items[n_views_in]
    theta, col_view = items[n_views_in + 1], items[n_views_in + 2]
    M = joined_csr(blocks)
    f = _k.predict_block(M.indptr, M.indices, M.data, theta, col_view, n_feat, n_views, b0)
    y = signed_target(yb, task)
    err = f - y
    correct = float(((f > 0) == (y > 0)).sum())
    return np.array([y.size, np.abs(err).sum(), (err * err).sum(), correct])
