"""Multi-view machine solvers over engine passes (SPEC section 3).

Objective (MVM-10 with the loss averaged over rows, so ``reg_weight`` does not scale with n)::

    F(Theta) = (1/n) sum_i loss(yhat_i, y_i) + reg_weight * Omega(Theta)

with ``Omega`` the squared Frobenius norm (``"l2"``, MVM-14) or the smoothed l1
``sum sqrt(theta^2 + eps)`` (``"l1"``, MVM-15, eps = 1e-8).

Two solvers:

``lbfgs`` (batch, distributed)
    Each evaluation of ``(F, grad F)`` is **one pass**: the engine maps
    :func:`ooc_lowrank.mvm._blocks.loss_grad` over row blocks and sums in float64 in a fixed
    order, so the iterates do not depend on the scheduler or worker count (to rounding).  SciPy's
    L-BFGS-B drives it; its line search may take more than one evaluation per iteration
    (``n_passes_`` counts them all).
``sgd`` (SPEC Algorithm 1, sequential)
    AdaGrad steps (the plain rule diverges, SPEC 3.5), one Numba sweep per row block; each epoch
    visits the blocks in a seeded random order and the rows of a block in a seeded random order
    (an approximate global shuffle, SPEC 3.7), with the next block read while the kernel runs.
    One pass per epoch; memory: the factors, AdaGrad's accumulators and two blocks.
"""

from __future__ import annotations

import functools
import logging
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import scipy.optimize

from ooc_lowrank import engine
from ooc_lowrank._validation import NonFiniteError
from ooc_lowrank.kernels import mvm as _k
from ooc_lowrank.mvm import _blocks

logger = logging.getLogger("ooc_lowrank")

LOSS_CODES = {"square": _k.SQUARE, "logistic": _k.LOGISTIC, "hinge": _k.HINGE}
REG_CODES = {"none": 0, "l2": 1, "l1": 2}
L1_EPS = 1e-8


def penalty(theta, reg):
    """``Omega(theta)`` and its gradient (MVM-14/15, MVM-20/21)."""
    if reg == "l2":
        return float((theta * theta).sum()), 2.0 * theta
    if reg == "l1":
        r = np.sqrt(theta * theta + L1_EPS)
        return float(r.sum()), theta / r
    return 0.0, np.zeros_like(theta)


class _Layout:
    """Where each view's columns and bias row sit in the stacked ``theta``."""

    def __init__(self, view_sizes):
        self.view_sizes = tuple(int(v) for v in view_sizes)
        self.n_views = len(self.view_sizes)
        self.n_feat = int(sum(self.view_sizes))
        self.col_view = np.repeat(np.arange(self.n_views, dtype=np.int64), self.view_sizes)

    def kw(self, n_views_in):
        """Keyword arguments of the block functions (``col_view`` travels in ``args``)."""
        return dict(n_views_in=n_views_in, n_feat=self.n_feat, n_views=self.n_views)


class _Monitor:
    """Validation score after each epoch/iteration, best iterate, patience."""

    def __init__(self, score, n_iter_no_change, callback, verbose):
        self.score, self.patience = score, n_iter_no_change
        self.callback, self.verbose = callback, verbose
        self.best, self.best_theta, self.best_iter, self.bad = np.inf, None, 0, 0
        self.path, self.val_path = [], []
        self.t0 = time.perf_counter()

    def state(self):
        """``(json_state, arrays)`` of the monitor for a checkpoint."""
        arrays = {
            "path": np.asarray(self.path, float),
            "val_path": np.asarray(self.val_path, float),
            "best": np.array([self.best]),
        }
        st = {"best_iter": self.best_iter, "bad": self.bad, "best_b0": None}
        if self.best_theta is not None:
            arrays["best_theta"] = self.best_theta[0]
            st["best_b0"] = self.best_theta[1]
        return st, arrays

    def restore(self, st, arrays):
        self.path = [float(v) for v in arrays["path"]]
        self.val_path = [float(v) for v in arrays["val_path"]]
        self.best = float(arrays["best"][0])
        self.best_iter, self.bad = int(st["best_iter"]), int(st["bad"])
        if st["best_b0"] is not None:
            self.best_theta = (np.array(arrays["best_theta"]), float(st["best_b0"]))

    def __call__(self, it, objective, theta):
        """``theta`` is the state ``(factors, intercept)``."""
        """Record; return True when training should stop (no improvement for ``patience``)."""
        self.path.append(float(objective))
        elapsed = time.perf_counter() - self.t0
        msg = f"MVM iteration {it}: objective {objective:.6g}"
        stop = False
        if self.score is not None:
            v = float(self.score(theta))
            self.val_path.append(v)
            msg += f", validation {v:.6g}"
            if v < self.best - 1e-12 * abs(self.best if np.isfinite(self.best) else 1.0):
                self.best, self.best_iter, self.bad = v, it, 0
                self.best_theta = (theta[0].copy(), float(theta[1]))
            else:
                self.bad += 1
                stop = self.bad >= self.patience
        (logger.info if self.verbose else logger.debug)(msg + f" ({elapsed:.1f} s)")
        if self.callback is not None:
            self.callback(it, elapsed, float(objective))
        return stop


def _save(checkpoint, it, monitor, state, arrays):
    mst, marr = monitor.state()
    marr = {"m_" + k: v for k, v in marr.items()}
    checkpoint.save(it, {**state, "monitor": mst}, {**arrays, **marr})


def _restore_monitor(monitor, st, arr):
    monitor.restore(st["monitor"], {k[2:]: v for k, v in arr.items() if k.startswith("m_")})


def fit_lbfgs(views, y, theta0, b0, layout, *, loss, task, reg, reg_weight, n, max_iter, tol,
              monitor, checkpoint=None):
    """Batch L-BFGS-B over engine passes on ``(theta, intercept)``.

    ``checkpoint``: save the iterate (and the counters and monitor) after every
    ``checkpoint.every``-th iteration and at the end; resume from a saved one by starting
    L-BFGS-B again at the saved iterate with the remaining iterations.  The restart drops
    L-BFGS's curvature pairs (SciPy keeps them inside the solver), so a resumed fit is not
    bitwise the uninterrupted one: its first iterations after the restart take steepest-descent
    like steps, and it converges to a solution of the same quality, not the same bits.

    Returns ``(theta, b0, n_iter, n_passes)``."""
    shape = theta0.shape
    size = theta0.size
    fn = functools.partial(
        _blocks.loss_grad, **layout.kw(len(views)), loss=LOSS_CODES[loss], task=task
    )
    passes = [0]

    def fun(x):
        th, b = x[:size].reshape(shape), x[size]
        total, grad, gb = engine.map_reduce(
            fn, *views, y, args=(th, layout.col_view, np.array(b))
        )
        passes[0] += 1
        pen, dpen = penalty(th, reg)
        obj = float(total[0]) / n + reg_weight * pen
        if not np.isfinite(obj):
            raise NonFiniteError(
                "the MVM objective became non-finite; the model is a degree-m polynomial in "
                "the factors (SPEC 3.5): scale the features (e.g. to unit variance) or lower "
                "init_std"
            )
        g = np.concatenate([(grad / n + reg_weight * dpen).ravel(), [float(gb[0]) / n]])
        return obj, g

    it = [0]
    x0 = np.concatenate([theta0.ravel(), [b0]])
    restored = checkpoint.load() if checkpoint is not None else None
    if restored is not None:
        st, arr = restored[0], restored[1]
        x0 = np.array(arr["x"], dtype=np.float64)
        it[0], passes[0] = int(st["n_iter"]), int(st["n_passes"])
        _restore_monitor(monitor, st, arr)
        if st["done"] or it[0] >= int(max_iter):
            return x0[:size].reshape(shape), float(x0[size]), it[0], passes[0]

    def save(x, done):
        _save(checkpoint, it[0], monitor, {"n_iter": it[0], "n_passes": passes[0], "done": done},
              {"x": x})

    def cb(intermediate_result):
        it[0] += 1
        x = intermediate_result.x
        stop = monitor(it[0], intermediate_result.fun, (x[:size].reshape(shape), float(x[size])))
        if checkpoint is not None and (stop or checkpoint.due(it[0])):
            save(np.array(x), stop)
        if stop:
            raise StopIteration

    res = scipy.optimize.minimize(
        fun,
        x0,
        jac=True,
        method="L-BFGS-B",
        callback=cb,
        options={"maxiter": int(max_iter) - it[0], "gtol": tol, "ftol": tol * 1e-3},
    )
    if checkpoint is not None:  # done: stopped before the iteration cap (converged or patience)
        save(res.x, it[0] < int(max_iter))
    return res.x[:size].reshape(shape), float(res.x[size]), it[0], passes[0]


#: SGD has diverged when an epoch's mean training loss exceeds this many times ``loss_scale``
DIVERGED = 1e6


def fit_sgd(views, y, theta0, b0, layout, *, loss, task, reg, reg_weight, n, n_epochs,
            learning_rate, rng, monitor, checkpoint=None, loss_scale=np.inf):
    """AdaGrad SGD, one streaming pass per epoch.

    ``loss_scale``: the mean loss of a trivial model (regression: the mean of ``y^2`` plus 1;
    classification: 1); an epoch whose mean training loss exceeds ``DIVERGED`` times it, or
    non-finite factors, raise :class:`~ooc_lowrank._validation.NonFiniteError` (the steps were
    too large: the factors exploded while staying finite).

    ``checkpoint``: save the factors, AdaGrad's accumulators, the intercept (and its
    accumulator), the state of ``rng`` (a ``RandomState``) and the monitor after every
    ``checkpoint.every``-th epoch and at the end; resume from a saved one bitwise as if never
    interrupted.

    Returns ``(theta, b0, n_epochs_run, n_passes)``."""
    theta = np.array(theta0, dtype=np.float64, order="C")
    accum = np.zeros_like(theta)
    bias = np.array([b0, 0.0])
    ref = views[0]
    nb = ref.n_blocks
    bounds = ref.bounds
    lcode, rcode = LOSS_CODES[loss], REG_CODES[reg]

    def read(b):
        blocks = [v.dask.blocks[b] for v in views] + [y.dask.blocks[b]]
        got = engine.compute(*blocks)
        return _blocks.joined_csr(got[:-1]), _blocks.signed_target(got[-1], task)

    epoch, start, stopped = 0, 0, False
    restored = checkpoint.load() if checkpoint is not None else None
    if restored is not None:
        st, arr = restored[0], restored[1]
        theta = np.array(arr["theta"], dtype=np.float64, order="C")
        accum = np.array(arr["accum"], dtype=np.float64, order="C")
        bias = np.array(arr["bias"], dtype=np.float64)
        rs = st["rng"]
        rng.set_state((rs[0], np.asarray(arr["rng_keys"], dtype=np.uint32), int(rs[1]),
                       int(rs[2]), float(rs[3])))
        _restore_monitor(monitor, st, arr)
        epoch = start = int(st["epoch"])
        stopped = bool(st["stopped"])

    def save(stop):
        name, keys, pos, has_gauss, cached = rng.get_state()
        _save(checkpoint, epoch, monitor,
              {"epoch": epoch, "stopped": stop, "rng": [name, pos, has_gauss, cached]},
              {"theta": theta, "accum": accum, "bias": bias, "rng_keys": keys})

    if stopped:
        return theta, float(bias[0]), epoch, epoch
    with ThreadPoolExecutor(max_workers=1) as pool:
        for epoch in range(start + 1, int(n_epochs) + 1):
            order = rng.permutation(nb)
            total = 0.0
            fut = pool.submit(read, int(order[0]))
            for j in range(nb):
                M, yb = fut.result()
                if j + 1 < nb:
                    fut = pool.submit(read, int(order[j + 1]))
                perm = rng.permutation(int(bounds[order[j] + 1] - bounds[order[j]]))
                total += _k.sgd_block(
                    M.indptr, M.indices, M.data, yb, perm.astype(np.int64), theta, accum,
                    layout.col_view, layout.n_feat, layout.n_views, lcode,
                    float(learning_rate), rcode, float(reg_weight), L1_EPS, 1.0, bias,
                )
            pen, _ = penalty(theta, reg)
            obj = total / n + reg_weight * pen
            finite = np.isfinite(obj) and np.isfinite(theta).all() and np.isfinite(bias).all()
            if not finite or total / n > DIVERGED * loss_scale:
                what = ("non-finite loss or factors" if not finite else
                        f"mean training loss {total / n:.3g}, over {DIVERGED:.0e} times the "
                        f"{loss_scale:.3g} of a trivial model")
                raise NonFiniteError(
                    f"SGD diverged in epoch {epoch} ({what}): lower learning_rate (now "
                    f"{learning_rate}), scale the features, or use solver='lbfgs'"
                )
            stopped = monitor(epoch, obj, (theta, float(bias[0])))
            if stopped:
                break
            if checkpoint is not None and checkpoint.due(epoch):
                save(False)
    if checkpoint is not None:
        save(stopped)
    return theta, float(bias[0]), epoch, epoch
