"""Multi-view machine solvers over engine passes (SPEC section 3).

Objective (MVM-10 with the loss averaged over rows, so ``reg_weight`` does not scale with n)::

    F(Theta) = (1/n) sum_i loss(yhat_i, y_i) + reg_weight * Omega(Theta)

with ``Omega`` the squared Frobenius norm (``"l2"``, MVM-14) or the smoothed l1
``sum sqrt(theta^2 + eps)`` (``"l1"``, MVM-15, eps = 1e-8).

Two solvers:

``lbfgs`` (batch, distributed)
    Each evaluation of ``(F, grad F)`` is **one pass**: the engine maps
    :func:`ooc_lowrank.mvm._blocks.loss_grad` over row blocks and sums in float64 in a fixed
    order, so the iterates do not depend on the scheduler or worker count (to rounding).  Our
    own L-BFGS (:func:`_fit_lbfgs_batched`, one per model in lockstep) drives it; its line
    search may take more than one evaluation per iteration (``n_passes_`` counts them all).
``sgd`` (SPEC Algorithm 1, sequential)
    AdaGrad steps (the plain rule diverges, SPEC 3.5), one Numba sweep per window of rows;
    each epoch visits windows of :data:`SHUFFLE_ROWS` rows in a seeded random order and the
    rows of a window in a seeded random order (an approximate global shuffle, SPEC 3.7) that
    does not depend on the input's chunking, with the next window read while the kernel runs.
    One pass per epoch; memory: the factors, AdaGrad's accumulators and two windows.

A classifier over ``K > 2`` classes fits ``K`` one-vs-rest models in the same passes: the
factors are ``(I + m, K k)`` (model ``c`` in columns ``c k .. (c + 1) k - 1``), the objective
the sum of the models' objectives.
"""

from __future__ import annotations

import functools
import logging
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ooc_lowrank import engine
from ooc_lowrank._blocksize import TARGET_BLOCK_BYTES
from ooc_lowrank._progress import progress_log
from ooc_lowrank._validation import NonFiniteError
from ooc_lowrank.kernels import mvm as _k
from ooc_lowrank.mvm import _blocks

logger = logging.getLogger("ooc_lowrank")

LOSS_CODES = {"square": _k.SQUARE, "logistic": _k.LOGISTIC, "hinge": _k.HINGE}
REG_CODES = {"none": 0, "l2": 1, "l1": 2}
L1_EPS = 1e-8


def penalty(theta, reg, axis=None):
    """``Omega(theta)`` and its gradient (MVM-14/15, MVM-20/21); ``axis``: sum over that axis
    only (one value per model)."""
    if reg == "l2":
        return (theta * theta).sum(axis=axis), 2.0 * theta
    if reg == "l1":
        r = np.sqrt(theta * theta + L1_EPS)
        return r.sum(axis=axis), theta / r
    return (0.0 if axis is None else np.zeros(theta.shape[0])), np.zeros_like(theta)


class _Layout:
    """Where each view's columns and bias row sit in the stacked ``theta``."""

    def __init__(self, view_sizes):
        self.view_sizes = tuple(int(v) for v in view_sizes)
        self.n_views = len(self.view_sizes)
        self.n_feat = int(sum(self.view_sizes))
        self.col_view = np.repeat(np.arange(self.n_views, dtype=np.int64), self.view_sizes)

    def kw(self, n_views_in):
        """Keyword arguments of the block functions."""
        return dict(n_views_in=n_views_in, view_sizes=self.view_sizes)


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
        st = {"best_iter": self.best_iter, "bad": self.bad, "has_best": False}
        if self.best_theta is not None:
            arrays["best_theta"] = self.best_theta[0]
            arrays["best_b0"] = np.asarray(self.best_theta[1], float)
            st["has_best"] = True
        return st, arrays

    def restore(self, st, arrays):
        self.path = [float(v) for v in arrays["path"]]
        self.val_path = [float(v) for v in arrays["val_path"]]
        self.best = float(arrays["best"][0])
        self.best_iter, self.bad = int(st["best_iter"]), int(st["bad"])
        if st["has_best"]:
            self.best_theta = (np.array(arrays["best_theta"]), np.array(arrays["best_b0"]))

    def __call__(self, it, objective, theta):
        """Record; return True when training should stop (no improvement for ``patience``).

        ``theta`` is the state ``(factors, intercepts)``; None is allowed without ``score``."""
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
                self.best_theta = (np.array(theta[0]), np.array(theta[1], float))
            else:
                self.bad += 1
                stop = self.bad >= self.patience
        progress_log(self.verbose)(msg + f" ({elapsed:.1f} s)")
        if self.callback is not None:
            self.callback(it, elapsed, float(objective))
        return stop


def _save(checkpoint, it, monitor, state, arrays):
    mst, marr = monitor.state()
    marr = {"m_" + k: v for k, v in marr.items()}
    checkpoint.save(it, {**state, "monitor": mst}, {**arrays, **marr})


def _restore_monitor(monitor, st, arr):
    monitor.restore(st["monitor"], {k[2:]: v for k, v in arr.items() if k.startswith("m_")})


#: Largest in-memory dense input (bytes) that :func:`_pass_inputs` copies into one contiguous
#: array per view for an L-BFGS fit.
SPLIT_VIEWS_BYTES = 256 * 2**20
#: Multiply-adds per pass (rows x features x factor columns of all models) from which
#: :func:`_pass_inputs` cuts a single in-memory block into :data:`PASS_BLOCKS` row blocks.
PARALLEL_WORK = 20_000_000
PASS_BLOCKS = 2
#: Smallest ``tol`` at which an L-BFGS fit of in-memory dense views multiplies in float32
#: (:func:`_pass_inputs`): the classifier's default.  Its objective rule stops a model when
#: an iteration gains <= ``1e-3 tol max(|F|, 1)``, i.e. >= 1e-6 absolute, above the float32
#: rounding of the mean loss (measured on mfeat at the one-vs-rest solution: <= 2.3e-6
#: relative of a mean loss of 3e-4..7e-4, max gradient error 2e-8 against tol 1e-3); the
#: regressor's default 1e-6 asks for 1e-9 and keeps float64.
FLOAT32_MIN_TOL = 1e-3
#: Bytes of one row block of a float32 pass (its float32 view rows and view sums, ``4 (I + m
#: K k)`` per row): the blocks of the float32 copies hold at most this much (see
#: :func:`_pass_inputs`; the engine's block target).
FLOAT32_BLOCK_BYTES = TARGET_BLOCK_BYTES


def _pass_inputs(views, y, layout, width, float32=False):
    """The views and target an L-BFGS fit passes to every pass (``width``: the factor columns
    of all models, ``K k``), and the dtype of its dense products.

    * An in-memory dense matrix holding several views side by side becomes one C-contiguous
      copy per view, made once per fit (the same row blocks), so each pass's per-view GEMMs
      read contiguous operands instead of column slices (measured on mfeat, 1,000 x 649 in 6
      views: about 13 % less GEMM time per pass at 10 one-vs-rest models); not above
      :data:`SPLIT_VIEWS_BYTES`.
    * ``float32`` (the fit's ``tol >= FLOAT32_MIN_TOL``) and every view and the target in
      memory, the views dense and at most :data:`SPLIT_VIEWS_BYTES`: the per-view copies are
      float32 (a list of views is copied too) and the passes multiply in float32 (the
      kernels, the loss and the sums over blocks stay float64).  Measured on mfeat (1,000 x
      649, 10 one-vs-rest models, one BLAS thread): a pass's GEMMs 7.7 ms -> 2.8 ms; fits
      with the same iterations and test accuracy.  The copies' row blocks are cut from ``n``
      and the model alone (``nb`` blocks of ``ceil(n / nb)`` rows, the last one shorter:
      at most :data:`FLOAT32_BLOCK_BYTES` of float32 rows and view sums each, at least
      :data:`PASS_BLOCKS` blocks when the pass is large enough, below), never from the input's
      chunking: a block's gradient is a float32 sum over its rows, so the model is then the
      same, bitwise, for any chunking of the same in-memory data.
    * In-memory inputs of a single row block whose pass costs at least :data:`PARALLEL_WORK`
      multiply-adds are cut into :data:`PASS_BLOCKS` row blocks, so the engine's direct path
      runs them on two cores (one BLAS thread each, which degrades gracefully on a busy
      machine where two BLAS threads on one block ran 4-20x slower).  Measured on mfeat with
      10 one-vs-rest models beside another busy process: 1.58 s against 2.01 s per fit; a
      single model (1/10 of the work) was slower cut, hence the threshold.  The block count
      does not depend on the machine, so neither does the model.

    Anything else (out-of-core or sparse data) is returned as is, with float64 products.

    Returns ``(views, y, products)``."""
    n = int(views[0].shape[0])
    parallel = n >= 2 * PASS_BLOCKS and n * layout.n_feat * int(width) >= PARALLEL_WORK
    small = sum(v.nbytes for v in views) <= SPLIT_VIEWS_BYTES
    in_memory = all(b.in_memory for b in (*views, y))
    if float32 and small and in_memory and all(v.kind == "dense" for v in views):
        cap = max(1, FLOAT32_BLOCK_BYTES // (4 * (layout.n_feat + layout.n_views * int(width))))
        nb = max(-(-n // cap), PASS_BLOCKS if parallel else 1)
        rows = max(1, -(-n // nb))  # blocked once (about 1 ms per Dask collection built)
        views = [engine.as_blocked(np.ascontiguousarray(part, dtype=np.float32), block_rows=rows)
                 for part in _blocks._view_parts([v.source for v in views], layout.view_sizes)]
        return views, y.rechunk(views[0].bounds), np.float32
    if len(views) == 1 and layout.n_views > 1:
        (v,) = views
        if v.in_memory and v.kind == "dense" and small:
            offs = np.concatenate([[0], np.cumsum(layout.view_sizes)])
            views = [
                engine.as_blocked(np.ascontiguousarray(v.source[:, offs[p]:offs[p + 1]]))
                .rechunk(v.bounds)
                for p in range(layout.n_views)
            ]
    if views[0].n_blocks == 1 and in_memory and parallel:
        bounds = np.linspace(0, n, PASS_BLOCKS + 1).round().astype(np.int64)
        views, y = [b.rechunk(bounds) for b in views], y.rechunk(bounds)
    return views, y, np.float64


def fit_lbfgs(views, y, theta0, b0, layout, *, loss, task, reg, reg_weight, n, max_iter, tol,
              monitor, checkpoint=None, n_models=1):
    """Batch L-BFGS over engine passes on ``(theta, intercepts)``: :func:`_fit_lbfgs_batched`,
    one L-BFGS per model in lockstep (a classifier's one-vs-rest models), each evaluation one
    pass for all of them.

    ``theta0`` is ``(I + m, n_models k)`` and ``b0`` ``(n_models,)``.

    ``checkpoint``: save the iterate (and the counters and monitor) after every
    ``checkpoint.every``-th iteration and at the end; resume from a saved one by starting
    L-BFGS again at the saved iterate with the remaining iterations.  The restart drops
    L-BFGS's curvature pairs, so a resumed fit is not bitwise the uninterrupted one: its first
    iterations after the restart take steepest-descent like steps, and it converges to a
    solution of the same quality, not the same bits.

    Stopping: a model stops when its largest gradient entry is <= ``tol`` or its objective
    decreased by <= ``1e-3 tol`` (relative) in one iteration (SciPy L-BFGS-B's ``gtol`` and
    ``ftol``), or after ``max_iter`` iterations.

    In-memory dense views multiply in float32 when ``tol >= FLOAT32_MIN_TOL``
    (:func:`_pass_inputs`).

    Returns ``(theta, b0, n_iter, n_passes)``."""
    views, y, products = _pass_inputs(views, y, layout, theta0.shape[1],
                                      float32=float(tol) >= FLOAT32_MIN_TOL)
    return _fit_lbfgs_batched(
        views, y, theta0, b0, layout, loss=loss, task=task, reg=reg, reg_weight=reg_weight,
        n=n, max_iter=max_iter, tol=tol, monitor=monitor, checkpoint=checkpoint,
        n_models=n_models, products=products,
    )


#: L-BFGS memory (curvature pairs kept) and line-search trials of the batched solver
LBFGS_MEMORY = 10
MAX_LINE_SEARCH = 20


def _two_loop(G, S, Y, rho, gamma, order, models=None, out=None):
    """L-BFGS directions ``-H_c g_c`` of several models (one row each): rows ``models``
    (default: all) of ``out`` (default: a new zero ``(K, D)`` array), which is returned.

    ``G`` ``(K, D)``; ``S``, ``Y`` ``(K, M, D)`` the curvature pairs in a ring of ``M`` slots
    shared by the models, ``order`` the slots newest first; ``rho`` ``(K, M)`` the pairs'
    ``1 / s.y``, 0 for an empty slot (which then contributes nothing); ``gamma`` ``(K,)`` the
    initial scaling ``s.y / y.y`` of each model's newest pair (1 without pairs).  The kernel
    :func:`ooc_lowrank.kernels.mvm.lbfgs_two_loop` runs one model at a time, its pairs in
    cache across both loops (10 models of 6,551 entries, 10 pairs each: 0.5 ms against 1.25 ms
    for the former loop over the slots with every model's vector work in one NumPy call per
    slot; best of 30, busy machine)."""
    K = G.shape[0]
    out = np.zeros_like(G) if out is None else out
    models = np.arange(K) if models is None else np.asarray(models, dtype=np.int64)
    _k.lbfgs_two_loop(G, S, Y, rho, gamma, np.asarray(order, dtype=np.int64), models, out)
    return out


def _backtrack(alpha, f0, d0, ft, dt):
    """Next trial steps of models whose trial ``alpha`` failed Armijo: the minimizer of the
    cubic through ``(0, f0, d0)`` and ``(alpha, ft, dt)`` (values and directional
    derivatives; the pass computed the gradient at the trial anyway), else of the quadratic
    through ``f0, d0, ft``; clipped to ``[0.1, 0.5] alpha`` (Nocedal & Wright, eq. 3.59)."""
    with np.errstate(all="ignore"):
        d1 = d0 + dt - 3.0 * (ft - f0) / alpha
        disc = d1 * d1 - d0 * dt
        d2 = np.sqrt(np.maximum(disc, 0.0))
        cubic = alpha - alpha * (dt + d2 - d1) / (dt - d0 + 2.0 * d2)
        denom = 2.0 * (ft - f0 - alpha * d0)
        quad = -d0 * alpha * alpha / denom
    a = np.where(np.isfinite(cubic) & (disc >= 0) & np.isfinite(dt), cubic,
                 np.where(np.isfinite(denom) & (denom > 0), quad, 0.0))
    return np.minimum(np.maximum(a, 0.1 * alpha), 0.5 * alpha)


def _fit_lbfgs_batched(views, y, theta0, b0, layout, *, loss, task, reg, reg_weight, n,
                       max_iter, tol, monitor, checkpoint, n_models, products=np.float64):
    """``n_models`` independent L-BFGS minimizations (one per one-vs-rest model) in lockstep:
    every evaluation is **one pass** that returns the objective and gradient of every model.

    Each model has its own curvature pairs (:data:`LBFGS_MEMORY`), its own first trial step
    (``1 / ||g||`` without curvature pairs, else ``min(1, 2 x`` its last accepted step)) and
    its own backtracking line search (Armijo, ``c1 = 1e-4``; :func:`_backtrack`'s cubic
    through the values and slopes at 0 and at the trial, whose gradient the pass computed;
    a pair with ``s.y <= 1e-10 y.y`` is skipped), so its iterates are those of a separate fit of that model, not of one
    L-BFGS on the sum (which mixes the models' curvatures: measured on mfeat, 10 classes, the
    joint fit reached 0.927 test accuracy after 200 iterations where separate fits reached
    0.955 after 100).  A model stops when its largest gradient entry is <= ``tol``, its
    objective decreased by <= ``1e-3 tol`` (relative) in one iteration, or no step is found;
    an iteration is one step of every model still running.  Measured on mfeat (10 classes,
    100 iterations) against the former rule (first trial 1, quadratic backtracking): 183
    passes against 207 (a retry pass evaluates only the models still searching), the same
    accuracy; one binary class: 125 passes against SciPy L-BFGS-B's 153.  The history is held as
    ``(K, M, D)`` arrays and :func:`_two_loop` runs the running models' loops in one kernel
    call; the rest of the per-iteration vector work covers the running models only.
    Checkpoints as
    :func:`fit_lbfgs` (a resumed fit restarts each model's L-BFGS at the saved iterate).
    ``products``: the dtype of the dense path's GEMMs (:func:`_blocks.dense_loss_grad`).

    Returns ``(theta, b0, n_iter, n_passes)``."""
    K, rows = int(n_models), theta0.shape[0]
    k = theta0.shape[1] // K
    passes = [0]

    def pack(theta, b):  # (I + m, K' k), (K',) -> one row per model: factors, intercept
        Kp = len(b)
        T = np.asarray(theta).reshape(rows, Kp, k).transpose(1, 0, 2).reshape(Kp, rows * k)
        return np.concatenate([T, np.reshape(b, (Kp, 1))], axis=1)

    def unpack(X):
        Kp = X.shape[0]
        T = X[:, :-1].reshape(Kp, rows, k).transpose(1, 0, 2).reshape(rows, Kp * k)
        return np.ascontiguousarray(T), X[:, -1].copy()

    def evaluate(Xs, idx=None):
        """Objectives and gradients of the models ``idx`` (default: all) at ``Xs`` (one row
        per model): one pass, whose arithmetic covers those models only (a line search that
        still runs for a few models costs a pass, not K models' products)."""
        fn = functools.partial(
            _blocks.loss_grad, **layout.kw(len(views)), loss=LOSS_CODES[loss], task=task,
            n_models=Xs.shape[0], models=None if idx is None else tuple(int(c) for c in idx),
            products=np.dtype(products).name,
        )
        Kp = Xs.shape[0]  # the output shapes given: no probe call of fn per pass
        total, grad, gb = engine.map_reduce(fn, *views, y, args=unpack(Xs),
                                            shapes=[(Kp,), (rows, Kp * k), (Kp,)])
        passes[0] += 1
        pen, dpen = penalty(Xs[:, :-1], reg, axis=1)
        G = pack(grad, np.asarray(gb))
        G /= n
        G[:, :-1] += reg_weight * dpen
        F = np.asarray(total, float) / n + reg_weight * pen
        bad = ~(np.isfinite(F) & np.isfinite(G).all(axis=1))
        F[bad] = np.inf
        return F, G

    X = pack(theta0, b0)
    it = 0
    restored = checkpoint.load() if checkpoint is not None else None
    if restored is not None:
        st, arr = restored[0], restored[1]
        X = np.array(arr["x"], dtype=np.float64).reshape(K, -1)
        it, passes[0] = int(st["n_iter"]), int(st["n_passes"])
        _restore_monitor(monitor, st, arr)
        if st["done"] or it >= int(max_iter):
            return (*unpack(X), it, passes[0])

    def save(done):
        _save(checkpoint, it, monitor, {"n_iter": it, "n_passes": passes[0], "done": done},
              {"x": X})

    # curvature pairs of every model, newest last (see _two_loop)
    S, Yp = np.zeros((K, LBFGS_MEMORY, X.shape[1])), np.zeros((K, LBFGS_MEMORY, X.shape[1]))
    rho, gamma = np.zeros((K, LBFGS_MEMORY)), np.ones(K)
    head = 0  # the ring's next slot: every iteration takes one (a model that skips a pair
    # leaves it empty, so each model keeps the pairs of its last LBFGS_MEMORY iterations)
    last_alpha = np.ones(K)
    active = np.ones(K, bool)
    stopped = False
    with engine.one_blas_thread():  # see fit_lbfgs
        F, G = evaluate(X)
        if not np.isfinite(F).all():
            raise NonFiniteError(
                "the MVM objective became non-finite; the model is a degree-m polynomial in "
                "the factors (SPEC 3.5): scale the features (e.g. to unit variance) or lower "
                "init_std"
            )
        while it < int(max_iter) and active.any():
            act = np.flatnonzero(active)
            order = [(head - 1 - j) % LBFGS_MEMORY for j in range(LBFGS_MEMORY)]
            gamma[~rho.any(axis=1)] = 1.0  # every pair skipped or forgotten
            P = _two_loop(G, S, Yp, rho, gamma, order, act)
            # the vector work below covers the running models only (all of them: no copy)
            run = slice(None) if act.size == K else act
            gp = np.zeros(K)
            gp[run] = np.einsum("ad,ad->a", G[run], P[run])
            bad = active & ~(gp < 0)  # not a descent direction: forget the pairs
            rho[bad], gamma[bad] = 0.0, 1.0
            P[bad] = -G[bad]
            gp[bad] = -(G[bad] * G[bad]).sum(axis=1)
            # first step: 1 / ||g|| without curvature pairs, else twice the last accepted step
            # capped at 1 (a model whose last step was cut starts below 1)
            fresh = active & ~rho.any(axis=1)
            alpha = np.minimum(1.0, 2.0 * last_alpha)
            alpha[fresh] = np.minimum(
                1.0, 1.0 / np.maximum(np.linalg.norm(G[fresh], axis=1), 1e-300))
            Xn, Fn, Gn = X.copy(), F.copy(), G.copy()
            searching = active.copy()
            for _ in range(MAX_LINE_SEARCH):
                idx = np.flatnonzero(searching)
                Xt = X[idx] + alpha[idx, None] * P[idx]
                Ft, Gt = evaluate(Xt, None if idx.size == K else idx)
                ok = Ft <= F[idx] + 1e-4 * alpha[idx] * gp[idx]
                Xn[idx[ok]], Fn[idx[ok]], Gn[idx[ok]] = Xt[ok], Ft[ok], Gt[ok]
                last_alpha[idx[ok]] = alpha[idx[ok]]
                searching[idx[ok]] = False
                if not searching.any():
                    break
                f = idx[~ok]
                slope = (Gt[~ok] * P[f]).sum(axis=1)  # at the trial: the pass computed Gt
                alpha[f] = _backtrack(alpha[f], F[f], gp[f], Ft[~ok], slope)
            active &= ~searching  # no acceptable step found: that model stops where it is
            s_, y_ = Xn[run] - X[run], Gn[run] - G[run]
            sy, yy = np.einsum("ad,ad->a", s_, y_), np.einsum("ad,ad->a", y_, y_)
            keep = active[run] & (sy > 1e-10 * yy)
            kept = np.arange(K)[run][keep]
            S[kept, head], Yp[kept, head] = s_[keep], y_[keep]
            rho[:, head] = 0.0
            rho[kept, head] = 1.0 / sy[keep]
            gamma[kept] = sy[keep] / yy[keep]
            head = (head + 1) % LBFGS_MEMORY
            scale = np.maximum(np.maximum(np.abs(F[run]), np.abs(Fn[run])), 1.0)
            done = np.zeros(K, bool)
            done[run] = ((np.abs(Gn[run]).max(axis=1) <= tol)
                         | (F[run] - Fn[run] <= 1e-3 * tol * scale))
            X, F, G = Xn, Fn, Gn
            active &= ~done
            it += 1
            # the factors only when the monitor scores them (a validation set)
            stopped = monitor(it, float(F.sum()),
                              unpack(X) if monitor.score is not None else None)
            if checkpoint is not None and (stopped or checkpoint.due(it)):
                save(stopped)
            if stopped:
                break
    if checkpoint is not None:
        save(stopped or it < int(max_iter))
    return (*unpack(X), it, passes[0])


#: SGD has diverged when an epoch's mean training loss exceeds this many times ``loss_scale``
DIVERGED = 1e6

#: SGD's visiting order: each epoch visits windows of this many consecutive rows in a seeded
#: random order, and the rows of a window in a seeded random order.  The windows are defined on
#: the row numbers, not on the input's blocks, so the order (and the model) is the same for any
#: chunking of the same data.
SHUFFLE_ROWS = 65536


def _window_reader(views, y, task, n_models):
    """``read(start, stop)``: rows ``start:stop`` of every view, joined as one CSR matrix, and
    the signed target; in-memory inputs are sliced, store arrays read just those rows, Dask
    arrays compute the blocks that overlap the rows (and slice them)."""

    def read(s, e):
        got = [engine.read_rows(v, s, e) for v in (*views, y)]
        return _blocks.joined_csr(got[:-1]), _blocks.signed_target(got[-1], task, n_models)

    return read


def _window_sweep(theta, accum, bias, layout, loss, reg, reg_weight, learning_rate):
    """``sweep(M, yb, perm)``: one AdaGrad sweep of every model over a window (``M`` the joined
    CSR rows, ``yb`` the signed target, ``perm`` the visiting order), updating ``theta`` /
    ``accum`` / ``bias`` (per model, as :func:`fit_sgd` keeps them) in place; returns the
    window's summed loss."""
    K = theta.shape[0]
    lcode, rcode = LOSS_CODES[loss], REG_CODES[reg]
    cv = _blocks.col_view(layout.view_sizes)

    def sweep(M, yb, perm):
        total = 0.0
        for c in range(K):
            total += _k.sgd_block(
                M.indptr, M.indices, M.data, yb if K == 1 else np.ascontiguousarray(yb[:, c]),
                perm, theta[c], accum[c], cv, layout.n_feat, layout.n_views, lcode,
                float(learning_rate), rcode, float(reg_weight), L1_EPS, 1.0, bias[c],
            )
        return total

    return sweep


def _spread_windows(n, rows, n_windows, min_window):
    """``(starts, w)``: ``rows`` of ``n`` rows as up to ``n_windows`` windows of ``w`` rows
    (at least ``min_window`` rows each when ``rows`` allows) spread evenly to the last row."""
    rows = int(min(n, max(1, rows)))
    n_win = int(max(1, min(n_windows, -(-rows // max(int(min_window), 1)), rows)))
    w = rows // n_win
    return np.linspace(0, n - w, n_win).astype(np.int64), int(w)


def lbfgs_calibration(views, y, layout, *, loss, task, n_components, init_std, n_models=1,
                      rows, n_windows=8, seed=0):
    """Time an L-BFGS pass's own block task on a slice of the input: ``rows`` rows in up to
    ``n_windows`` windows spread evenly over it, each read twice (the second read timed: a
    block task's decoding, the page cache warm) and given once to :func:`_blocks.loss_grad`
    (the fit's block function, float64 products: a store's; one BLAS thread, as the engine
    runs it) at factors drawn as the fit draws them (after a call on a few rows that loads
    the compiled kernel; the better of two sweeps).

    Returns a dict: ``rows``, ``starts``, ``window_rows``, ``read_cpu_seconds`` (the
    process's CPU time of the reads: a store decodes on its own threads),
    ``block_cpu_seconds`` (the calling thread's CPU time in the block function),
    ``block_seconds`` (wall, for reference), ``cpu_seconds_per_row`` (reads and block
    function: a block task does both, one task per core) and ``seconds`` (the calibration's
    own wall time).  CPU time, not wall: a short timing samples other processes' load at one
    moment (see :func:`sgd_calibration`)."""
    t_all = time.perf_counter()
    starts, w = _spread_windows(int(views[0].shape[0]), rows, n_windows, 1)
    nv = len(views)

    def read(s):
        return [engine.read_rows(v, int(s), int(s) + w) for v in (*views, y)]

    [read(s) for s in starts]  # the page cache warm: the disk is the time model's own term
    t = time.process_time()
    windows = [read(s) for s in starts]
    rcpu = time.process_time() - t
    rng = np.random.RandomState(seed)
    K, k = int(n_models), int(n_components)
    theta = rng.normal(0.0, init_std, (layout.n_feat + layout.n_views, K * k))
    b0 = np.zeros(K)
    fn = functools.partial(_blocks.loss_grad, **layout.kw(nv), loss=LOSS_CODES[loss],
                           task=task, n_models=K)  # fmt: skip
    wall = cpu = np.inf
    with engine.one_blas_thread():  # as the engine runs block tasks
        fn(*(b[:16] for b in windows[0]), theta, b0)  # loads the compiled kernels
        for _ in range(2):  # the better of two sweeps (the first may touch memory first)
            t, c = time.perf_counter(), time.thread_time()
            for blocks in windows:
                fn(*blocks, theta, b0)
            wall, cpu = min(wall, time.perf_counter() - t), min(cpu, time.thread_time() - c)
    n_rows = int(len(starts) * w)
    return {"rows": n_rows, "starts": starts.tolist(), "window_rows": w,
            "read_cpu_seconds": rcpu, "block_cpu_seconds": cpu, "block_seconds": wall,
            "cpu_seconds_per_row": (rcpu + cpu) / max(n_rows, 1),
            "seconds": time.perf_counter() - t_all}


def sgd_calibration(views, y, layout, *, loss, task, reg, reg_weight, learning_rate,
                    n_components, init_std, n_models=1, rows, n_windows=8, seed=0):
    """Time :func:`fit_sgd`'s own work on a slice of the input: ``rows`` rows in up to
    ``n_windows`` windows spread evenly over the input (read with the fit's window reader: a
    store reads just those rows).  Each window is read twice, the second time from memory /
    the page cache (the reader thread's own work: decoding, the joined CSR, the signed
    target), and swept once by the kernel from factors drawn as the fit draws them (after a
    sweep of a few rows that loads the compiled kernel).

    Returns a dict: ``rows``, ``nnz``, ``starts`` and ``window_rows`` of the slice,
    ``updates`` (``(nnz + rows x views) x k x models``: the unit of
    :func:`ooc_lowrank._estimate.work_per_pass`), ``kernel_seconds`` (wall) and
    ``kernel_cpu_seconds`` (the sweeping thread's CPU time: below the wall time on a busy
    machine), ``reader_seconds`` (the second read) and ``reader_cpu_seconds`` (the process's
    CPU time meanwhile: a store decodes on its own threads),
    ``first_read_seconds``, ``updates_per_second`` (the updates over the slower of the kernel
    and the reader in CPU seconds: the fit overlaps them on two threads; a calibration of a
    second or so samples other processes' load at one moment, which wall time turns into
    noise: on a machine loaded ~3.5x a 0.25 CPU-second sweep took 2.5 s of wall, 10x, while the
    fit's next minute ran at 3.6x), ``updates_per_second_wall`` (the same in wall time, for
    reference) and ``seconds`` (the calibration's own wall time)."""
    t_all = time.perf_counter()
    starts, w = _spread_windows(int(views[0].shape[0]), rows, n_windows, SHUFFLE_ROWS)
    n_win = len(starts)
    read = _window_reader(views, y, task, n_models)
    t = time.perf_counter()
    windows = [read(int(s), int(s) + w) for s in starts]
    first = time.perf_counter() - t
    t, rcpu = time.perf_counter(), time.process_time()  # the store's own reader threads too
    for s in starts:
        read(int(s), int(s) + w)
    reader, rcpu = time.perf_counter() - t, time.process_time() - rcpu
    rng = np.random.RandomState(seed)
    K, k = int(n_models), int(n_components)
    theta = rng.normal(0.0, init_std, (K, layout.n_feat + layout.n_views, k))
    accum, bias = np.zeros_like(theta), np.zeros((K, 2))
    sweep = _window_sweep(theta, accum, bias, layout, loss, reg, reg_weight, learning_rate)
    M0, y0 = windows[0]  # a sweep of a few rows loads the compiled kernel (same arrays:
    sweep(M0, y0, np.arange(min(M0.shape[0], 256), dtype=np.int64))  # same signature)
    t, cpu = time.perf_counter(), time.thread_time()
    for M, yb in windows:  # the fit's main thread: the window's order, the kernel's sweep
        sweep(M, yb, rng.permutation(M.shape[0]).astype(np.int64))
    kernel, cpu = time.perf_counter() - t, time.thread_time() - cpu
    nnz = int(sum(M.nnz for M, _ in windows))
    updates = float(nnz + n_win * w * layout.n_views) * k * K
    return {"rows": int(n_win * w), "nnz": nnz,
            "starts": starts.tolist(), "window_rows": int(w), "updates": updates,
            "kernel_seconds": kernel, "kernel_cpu_seconds": cpu, "reader_seconds": reader,
            "reader_cpu_seconds": rcpu, "first_read_seconds": first,
            "updates_per_second": updates / max(cpu, rcpu, 1e-9),
            "updates_per_second_wall": updates / max(kernel, reader, 1e-9),
            "seconds": time.perf_counter() - t_all}


def fit_sgd(views, y, theta0, b0, layout, *, loss, task, reg, reg_weight, n, n_epochs,
            learning_rate, rng, monitor, checkpoint=None, loss_scale=np.inf, n_models=1):
    """AdaGrad SGD, one streaming pass per epoch.

    Visiting order: windows of :data:`SHUFFLE_ROWS` consecutive rows in a seeded random order,
    the rows of each window in a seeded random order (an approximate global shuffle, SPEC 3.7;
    a true one when ``n <= SHUFFLE_ROWS``).  The order depends on the seed and ``n`` only, so
    the same data in any chunking (NumPy, Dask, a store with any ``block_rows``) give the same
    model (to rounding: the target mean that starts a regressor's intercept is a blocked sum).  Cost: a store or Dask input whose blocks are larger than the windows is
    read about ``1 + block_rows / SHUFFLE_ROWS`` times per epoch (a window reads the rows it
    needs from a store, but the whole overlapping blocks of a Dask array).

    ``theta0`` is ``(I + m, n_models k)`` and ``b0`` ``(n_models,)``: the one-vs-rest models of
    a classifier share each window read (one kernel sweep per model).

    ``loss_scale``: the mean loss of a trivial model (regression: the mean of ``y^2`` plus 1;
    classification: 1); an epoch whose mean training loss exceeds ``DIVERGED`` times it, or
    non-finite factors, raise :class:`~ooc_lowrank._validation.NonFiniteError` (the steps were
    too large: the factors exploded while staying finite).

    ``checkpoint``: save the factors, AdaGrad's accumulators, the intercepts (and their
    accumulators), the state of ``rng`` (a ``RandomState``) and the monitor after every
    ``checkpoint.every``-th epoch and at the end; resume from a saved one bitwise as if never
    interrupted.

    Returns ``(theta, b0, n_epochs_run, n_passes)``."""
    K = int(n_models)
    k = theta0.shape[1] // K
    # per model: its factors, AdaGrad's sums, [intercept, its AdaGrad sum] (contiguous)
    theta = np.ascontiguousarray(np.asarray(theta0, float).reshape(-1, K, k).transpose(1, 0, 2))
    accum = np.zeros_like(theta)
    bias = np.zeros((K, 2))
    bias[:, 0] = np.ravel(b0)
    starts = np.arange(0, n, SHUFFLE_ROWS)
    read = _window_reader(views, y, task, K)

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
    # after a resume: the sweep updates the restored arrays in place
    sweep = _window_sweep(theta, accum, bias, layout, loss, reg, reg_weight, learning_rate)

    def save(stop):
        name, keys, pos, has_gauss, cached = rng.get_state()
        _save(checkpoint, epoch, monitor,
              {"epoch": epoch, "stopped": stop, "rng": [name, pos, has_gauss, cached]},
              {"theta": theta, "accum": accum, "bias": bias, "rng_keys": keys})

    def wide():
        return theta.transpose(1, 0, 2).reshape(theta.shape[1], K * k), bias[:, 0].copy()

    if stopped:
        return (*wide(), epoch, epoch)
    nw = len(starts)
    with ThreadPoolExecutor(max_workers=1) as pool:
        for epoch in range(start + 1, int(n_epochs) + 1):
            order = rng.permutation(nw)
            total = 0.0

            def window(j, order=order):
                s = int(starts[order[j]])
                return pool.submit(read, s, min(s + SHUFFLE_ROWS, n))

            fut = window(0)
            for j in range(nw):
                M, yb = fut.result()
                if j + 1 < nw:
                    fut = window(j + 1)
                total += sweep(M, yb, rng.permutation(M.shape[0]).astype(np.int64))
            pen, _ = penalty(theta, reg)
            obj = total / n + reg_weight * pen
            finite = np.isfinite(obj) and np.isfinite(theta).all() and np.isfinite(bias).all()
            if not finite or total / n > DIVERGED * loss_scale * K:
                what = ("non-finite loss or factors" if not finite else
                        f"mean training loss {total / n:.3g}, over {DIVERGED:.0e} times the "
                        f"{loss_scale * K:.3g} of a trivial model")
                raise NonFiniteError(
                    f"SGD diverged in epoch {epoch} ({what}): lower learning_rate (now "
                    f"{learning_rate}), scale the features, or use solver='lbfgs'"
                )
            stopped = monitor(epoch, obj, wide())
            if stopped:
                break
            if checkpoint is not None and checkpoint.due(epoch):
                save(False)
    if checkpoint is not None:
        save(stopped)
    return (*wide(), epoch, epoch)
