"""Block functions of the multi-view machine: one row block of the views (and target) in, a
small NumPy result out.

Two paths compute the same numbers (to rounding):

* **dense**: when every view block of a pass is an ndarray, per-view BLAS products
  ``S_p = X_p @ Theta_p + bias_p`` ``(rows, K k)``, the outputs and the slope-weighted
  leave-one-out products ``dl * prod_{q != p} S_q`` by two Numba sweeps
  (``kernels.mvm.dense_outputs`` / ``dense_weighted_loo``, in place, no temporaries), and the
  gradient ``X_p.T @ (...)``: two GEMMs per view, no conversion of the block;
* **csr**: otherwise the views of a block are joined into one CSR matrix whose columns are the
  views side by side and :mod:`ooc_lowrank.kernels.mvm` walks each row's nonzeros.

``K`` models share every pass (the classifier's one-vs-rest over ``K`` classes): ``theta`` is
``(I + m, K k)`` with model ``c`` in columns ``c k .. (c + 1) k - 1`` and the intercepts ``b0``
are ``(K,)``.  The target block is then the class index of each row (0 .. K-1), signed per
model as +1 (its class) / -1 (every other class); with ``K = 1`` it is the target itself.
"""

from __future__ import annotations

import functools

import numpy as np
import scipy.sparse as sp
import scipy.special

from ooc_lowrank.kernels import mvm as _k


@functools.lru_cache(maxsize=64)
def col_view(view_sizes):
    """The view of every stacked column, ``(I,)`` int64 (the kernels' ``col_view``)."""
    return np.repeat(np.arange(len(view_sizes), dtype=np.int64), view_sizes)


def _all_dense(blocks):
    return not any(sp.issparse(b) for b in blocks)


def joined_csr(blocks):
    """The views of one row block as one float64 CSR matrix (views side by side).

    Dense blocks are converted directly (a mask of the nonzeros, no COO detour): the kernels
    treat a stored zero like a missing entry, but SGD's lazy regulariser touches stored entries
    only, so only true nonzeros are stored."""
    if _all_dense(blocks):
        D = np.hstack([np.asarray(b, dtype=np.float64) for b in blocks]) if len(blocks) > 1 \
            else np.asarray(blocks[0], dtype=np.float64)
        mask = D != 0
        indptr = np.concatenate([[0], np.cumsum(mask.sum(axis=1))]).astype(np.int64)
        indices = np.nonzero(mask)[1].astype(np.int32)
        return sp.csr_matrix((D[mask], indices, indptr), shape=D.shape)
    parts = [b if sp.issparse(b) else sp.csr_matrix(np.asarray(b)) for b in blocks]
    M = parts[0] if len(parts) == 1 else sp.hstack(parts, format="csr")
    M = sp.csr_matrix(M, dtype=np.float64)
    if not M.has_canonical_format:
        M = M.copy()
        M.sum_duplicates()
    return M


def _view_parts(blocks, view_sizes):
    """The dense views of a block, one ``(rows, I_p)`` array each: the blocks themselves, or
    column slices of one block holding every view side by side (no copy)."""
    if len(blocks) == len(view_sizes):
        return [np.asarray(b) for b in blocks]
    (B,) = blocks
    B = np.asarray(B)
    offs = np.concatenate([[0], np.cumsum(view_sizes)])
    return [B[:, offs[p]:offs[p + 1]] for p in range(len(view_sizes))]


def signed_target(yb, task, n_models=1, models=None):
    """Target block as float64: ``(rows,)`` for one model (classification labels 0 -> -1,
    SPEC 3.9), ``(rows, n_models)`` of +1 / -1 for one-vs-rest models (``yb``: class index;
    ``models``: the classes of the models, default ``0 .. n_models - 1``)."""
    y = np.asarray(yb.toarray() if sp.issparse(yb) else yb, dtype=np.float64).reshape(-1)
    if models is not None or n_models > 1:
        models = np.arange(n_models) if models is None else np.asarray(models)
        return np.where(y[:, None] == models, 1.0, -1.0)
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


# ------------------------------------------------------------------------------ dense path


def loss_and_slope(yhat, y, loss):
    """Vectorized ``kernels.mvm._loss_and_slope``: loss values and ``dloss/dyhat``."""
    if loss == _k.SQUARE:
        r = yhat - y
        return r * r, 2.0 * r
    t = y * yhat
    if loss == _k.LOGISTIC:
        return np.logaddexp(0.0, -t), -y * scipy.special.expit(-t)
    hit = t < 1.0
    return np.where(hit, 1.0 - t, 0.0), np.where(hit, -y, 0.0)


def dense_sums(parts, theta, n_feat, products=np.float64):
    """``S[p] = X_p @ Theta_p + bias row p`` for every view, one ``(m, rows, K k)`` array
    (MVM-9).  ``products``: the dtype of the GEMMs and of ``S`` (float64 whatever the views'
    dtype; float32: ``theta`` rounded to float32, views of another dtype converted per call)."""
    products = np.dtype(products)
    S = np.empty((len(parts), parts[0].shape[0], theta.shape[1]), products)
    theta_p = theta.astype(products, copy=False)
    off = 0
    for p, X in enumerate(parts):
        w = X.shape[1]
        if X.dtype == products:
            np.matmul(X, theta_p[off:off + w], out=S[p])
        else:
            S[p] = X.astype(products) @ theta_p[off:off + w]
        S[p] += theta_p[n_feat + p]
        off += w
    return S


def dense_outputs(S, b0):
    """Model outputs ``b0 + yhat`` ``(rows, K)`` from the view sums ``S``."""
    out = np.empty((S.shape[1], b0.shape[0]))
    _k.dense_outputs(S, S.shape[2] // b0.shape[0], b0, out)
    return out


def dense_loss_grad(parts, y, theta, b0, loss, n_feat, products=np.float64):
    """``(loss sums (K,), grad (I + m, K k), grad_b0 (K,))`` of dense views (the twin of
    ``kernels.mvm.loss_grad_block``, one model per ``k`` columns); ``y`` ``(rows, K)``
    signed.

    ``products`` (float64 or float32): the dtype of the per-view GEMMs and of the view sums
    ``S``; the kernels form products, outputs and slopes in float64 either way, and the
    gradient is returned in float64 (a float32 GEMM per view block, :func:`dense_sums`)."""
    S = dense_sums(parts, theta, n_feat, products)
    val, dl = loss_and_slope(dense_outputs(S, b0), y, loss)
    grad = np.empty_like(theta)
    # S[p] <- dl * prod_{q != p} S[q]; the bias rows' gradient (its column sums) in the sweep
    _k.dense_weighted_loo(S, theta.shape[1] // b0.shape[0], dl, grad[n_feat:])
    off = 0
    for p, X in enumerate(parts):
        w = X.shape[1]
        if X.dtype == S.dtype == np.float64:
            np.matmul(X.T, S[p], out=grad[off:off + w])
        else:
            grad[off:off + w] = X.astype(S.dtype, copy=False).T @ S[p]
        off += w
    return val.sum(axis=0), grad, dl.sum(axis=0)


# ------------------------------------------------------------------------------ block functions


def model_slices(theta, n_models):
    """``(c, columns of model c as a contiguous (I + m, k) array)`` for each model."""
    k = theta.shape[1] // n_models
    for c in range(n_models):
        yield c, slice(c * k, (c + 1) * k), np.ascontiguousarray(theta[:, c * k:(c + 1) * k])


def outputs(blocks, theta, b0, view_sizes):
    """Model outputs ``b0 + yhat`` of a block's rows, ``(rows, K)``, by either path."""
    n_feat, n_views = int(sum(view_sizes)), len(view_sizes)
    if _all_dense(blocks):
        return dense_outputs(dense_sums(_view_parts(blocks, view_sizes), theta, n_feat), b0)
    M = joined_csr(blocks)
    cv = col_view(view_sizes)
    out = np.empty((M.shape[0], b0.shape[0]))
    for c, _, th in model_slices(theta, b0.shape[0]):
        out[:, c] = _k.predict_block(M.indptr, M.indices, M.data, th, cv, n_feat, n_views,
                                     float(b0[c]))
    return out


def loss_grad(*items, n_views_in, view_sizes, loss, task, n_models=1, models=None,
              products="float64"):
    """``(loss_sums, grad_theta, grad_b0)`` of a block: the summed loss of each of the
    ``n_models`` models ``(K,)``, the gradient ``(I + m, K k)`` and the intercepts' ``(K,)``;
    ``models``: the classes of one-vs-rest models when not ``0 .. K-1`` (a subset);
    ``products``: the dense path's GEMM dtype (:func:`dense_loss_grad`; the CSR path is
    float64).

    ``items`` = view blocks, target block, theta ``(I + m, K k)``, b0 ``(K,)``."""
    blocks, yb = items[:n_views_in], items[n_views_in]
    theta, b0 = items[n_views_in + 1], np.atleast_1d(np.asarray(items[n_views_in + 2], float))
    n_feat, n_views = int(sum(view_sizes)), len(view_sizes)
    y = signed_target(yb, task, n_models, models)
    if _all_dense(blocks):
        return dense_loss_grad(_view_parts(blocks, view_sizes), y.reshape(len(y), -1), theta,
                               b0, loss, n_feat, np.dtype(products))
    M = joined_csr(blocks)
    cv = col_view(view_sizes)
    y = y.reshape(len(y), -1)
    grad = np.empty_like(theta)
    total, gb = np.empty(b0.shape[0]), np.empty(b0.shape[0])
    for c, cols, th in model_slices(theta, b0.shape[0]):
        total[c], g, gb[c] = _k.loss_grad_block(
            M.indptr, M.indices, M.data, np.ascontiguousarray(y[:, c]), th, cv, n_feat,
            n_views, loss, float(b0[c]),
        )
        grad[:, cols] = g
    return total, grad, gb


def decision(*items, n_views_in, view_sizes):
    """Model outputs of a block's rows ``(rows, K)``: ``items`` = view blocks, theta, b0."""
    blocks, theta, b0 = items[:n_views_in], items[n_views_in], items[n_views_in + 1]
    return outputs(blocks, theta, np.atleast_1d(np.asarray(b0, float)), view_sizes)


def metric_sums(*items, n_views_in, view_sizes, task, n_models=1):
    """Sums for streaming metrics: count, |err|, err^2, correct (sign, or the arg-max of the
    one-vs-rest outputs)."""
    blocks, yb = items[:n_views_in], items[n_views_in]
    theta, b0 = items[n_views_in + 1], np.atleast_1d(np.asarray(items[n_views_in + 2], float))
    f = outputs(blocks, theta, b0, view_sizes)
    y = signed_target(yb, task, n_models)
    if n_models > 1:
        correct = float((f.argmax(axis=1) == y.argmax(axis=1)).sum())
        return np.array([y.shape[0], 0.0, 0.0, correct])
    f = f[:, 0]
    err = f - y
    correct = float(((f > 0) == (y > 0)).sum())
    return np.array([y.size, np.abs(err).sum(), (err * err).sum(), correct])
