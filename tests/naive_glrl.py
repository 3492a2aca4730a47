"""Plain-NumPy twins of the GLRL kernels and algorithm steps (slow, obviously correct)."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.optimize import minimize

from ooc_lowrank.glrl.losses import get_loss


def to_csr(rows, cols, vals, shape):
    """CSR with duplicates kept, entries sorted by row (stable)."""
    rows = np.asarray(rows, np.int64)
    order = np.argsort(rows, kind="stable")
    indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=shape[0]))])
    return sp.csr_matrix(
        (np.asarray(vals, float)[order], np.asarray(cols)[order], indptr), shape=shape
    )


def serial_reduce(csr, bounds):
    """``reduce(fn, args)`` over the row blocks ``bounds`` of ``csr``, summed in a loop; the
    row outputs of ``fn`` (``fn.row_outputs``: vectors of a block's rows) are written at the
    block's rows of a full-length vector."""

    def reduce(fn, args):
        rows_at = set(getattr(fn, "row_outputs", ()))
        total = None
        for s, e in zip(bounds[:-1], bounds[1:], strict=True):
            out = fn(int(s), csr[s:e], *args)
            out = out if isinstance(out, tuple) else (out,)
            out = [np.asarray(o, dtype=np.float64) for o in out]
            for i in rows_at:
                full = np.zeros(csr.shape[0])
                full[s:e] = out[i]
                out[i] = full
            total = out if total is None else [a + b for a, b in zip(total, out, strict=True)]
        return tuple(total)

    return reduce


def predict(U, V, theta, rows, cols):
    return ((U[rows] * V[cols]) * theta).sum(axis=1)


def power_pass(rows, cols, vals, U, V, theta, loss, delta, u, v, m, n):
    """Twin of kernels.glrl.power_pass over all entries."""
    lo = get_loss(loss)
    x = predict(U, V, theta, rows, cols)
    g = lo.grad(x, vals, delta)
    gv = np.bincount(rows, weights=g * v[cols], minlength=m)
    gtu = np.bincount(cols, weights=g * u[rows], minlength=n)
    stats = np.array([lo.value(x, vals, delta).sum(), (g * g).sum(), (g * x).sum()])
    return gv, gtu, stats


def refit_full(rows, cols, vals, U, V, theta, loss, delta):
    lo = get_loss(loss)
    B = U[rows] * V[cols]
    x = B @ theta
    return lo.value(x, vals, delta).sum(), B.T @ lo.grad(x, vals, delta)


def refit_econ(rows, cols, vals, U, V, theta_prev, alpha, beta, loss, delta, n_fixed=0):
    lo = get_loss(loss)
    p, f = theta_prev.size, n_fixed
    xf = predict(U[:, :f], V[:, :f], theta_prev[:f], rows, cols)
    xp = predict(U[:, f:p], V[:, f:p], theta_prev[f:], rows, cols)
    w = U[rows, p] * V[cols, p]
    x = xf + alpha * xp + beta * w
    g = lo.grad(x, vals, delta)
    return lo.value(x, vals, delta).sum(), np.array([g @ xp, g @ w])


def dense_grad(rows, cols, vals, U, V, theta, loss, delta, shape):
    lo = get_loss(loss)
    G = np.zeros(shape)
    np.add.at(G, (rows, cols), lo.grad(predict(U, V, theta, rows, cols), vals, delta))
    return G


def glrl_dense(rows, cols, vals, shape, loss, rank, refit, lbfgs_iter=5, n_power=500):
    """Reference smooth GLRL with exact SVDs of the dense gradient (small problems only)."""
    lo = get_loss(loss)
    m, n = shape
    U, V, theta = np.zeros((m, 0)), np.zeros((n, 0)), np.zeros(0)
    objs = [lo.value(np.zeros(len(vals)), vals).sum()]
    for _ in range(rank):
        G = dense_grad(rows, cols, vals, U, V, theta, loss, 1.0, shape)
        Us, ss, Vts = np.linalg.svd(-G)
        u, s, v = Us[:, 0], ss[0], Vts[0]
        U, V = np.column_stack([U, u]), np.column_stack([V, v])
        th0 = np.append(theta, s / lo.lipschitz)
        if refit == "none":
            theta = th0
        elif refit == "full":

            def f(z, U=U, V=V):
                return refit_full(rows, cols, vals, U, V, z, loss, 1.0)

            r = minimize(f, th0, jac=True, method="L-BFGS-B", options={"maxiter": lbfgs_iter})
            theta = r.x if r.fun <= f(th0)[0] else th0
        objs.append(lo.value(predict(U, V, theta, rows, cols), vals).sum())
    return U, V, theta, np.array(objs)


def refit_gram(rows, cols, vals, U, V, j0):
    """Twin of kernels.glrl.refit_gram_pass: columns ``j0:`` of ``B^T B`` and ``B^T o``."""
    B = U[rows] * V[cols]
    return B.T @ B[:, j0:], B[:, j0:].T @ np.asarray(vals, float)


def econ_hessian(rows, cols, vals, U, V, theta_prev, alpha, beta, loss, delta, n_fixed=0):
    """The 2 x 2 Hessian of the economic refit by central differences of its gradient."""
    h = 1e-6
    H = np.empty((2, 2))
    for j, (da, db) in enumerate(((h, 0.0), (0.0, h))):
        args = (loss, delta, n_fixed)
        _, gp = refit_econ(rows, cols, vals, U, V, theta_prev, alpha + da, beta + db, *args)
        _, gm = refit_econ(rows, cols, vals, U, V, theta_prev, alpha - da, beta - db, *args)
        H[:, j] = (gp - gm) / (2 * h)
    return H


def check_block(block, n_cols, labels_pm1):
    """Twin of ``_blocks.check_block`` (the NumPy version it replaced)."""
    indptr, cols, vals = block.indptr, block.indices, np.asarray(block.data)
    nnz = cols.shape[0]
    nonfinite = int(np.count_nonzero(~np.isfinite(vals))) if vals.dtype.kind == "f" else 0
    not_pm1 = int(np.count_nonzero((vals != 1) & (vals != -1)))
    not_01 = int(np.count_nonzero((vals != 0) & (vals != 1)))
    negative = int(np.count_nonzero(vals < 0))
    c64 = cols.astype(np.int64)
    out_of_range = int(np.count_nonzero((c64 < 0) | (c64 >= n_cols)))
    dup = 0
    if nnz:  # entries beyond the first of each (row, col) pair
        rows = np.repeat(np.arange(indptr.shape[0] - 1, dtype=np.int64), np.diff(indptr))
        dup = nnz - len(set(zip(rows.tolist(), c64.tolist(), strict=True)))
    total = float(vals[np.isfinite(vals)].sum()) if nnz else 0.0
    bad = not_pm1 if labels_pm1 else 0
    return np.array(
        [nnz, nonfinite, bad, out_of_range, dup, total, not_pm1, not_01, negative], dtype=float
    )
