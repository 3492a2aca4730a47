"""``GreedyLowRank``: scikit-learn style estimator for GLRL / EGLRL / R1MP / nonsmooth GLRL.

Data: an observation store (``Dataset`` whose ``"obs"`` array has kind ``coo``, or that array
itself, or a store path) or in-memory ``(rows, cols, values)`` with ``shape=``.  The observed
entries stream through :mod:`ooc_lowrank.engine` in row blocks; only the factors live in memory.

Duplicate (row, col) entries: ``duplicates="error"`` (default) refuses them before any work;
``duplicates="keep"`` treats each stored copy as a separate observation (the loss is summed over
the copies, so for the square loss a duplicated pair weighs twice and is fitted to the mean).
"""

from __future__ import annotations

import numbers

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator

from ooc_lowrank import _base, _checkpoint, _estimate, engine
from ooc_lowrank._inputs import as_input
from ooc_lowrank._persist import (
    ModelFileError,
    ModelReader,
    build_checked,
    check_params,
)
from ooc_lowrank._validation import check_scalar, param_error
from ooc_lowrank.glrl import _blocks
from ooc_lowrank.glrl.core import (
    REFITS,
    SCHEDULES,
    PursuitOptions,
    bias_init,
    greedy_pursuit,
    resolve_greedy_l2,
    resolve_init,
    resolve_refit_solver,
)
from ooc_lowrank.glrl.losses import LOSSES, get_loss
from ooc_lowrank.kernels import glrl as _k

METRICS = ("mae", "rmse", "sign_accuracy")
INITS = ("auto", "zero", "mean", "bias", "bias-l1")
_NOT_SAVED = ("callback", "validation")
_PAIR_CHUNK = 1 << 20


def _is_handle(X):
    return hasattr(X, "read") and hasattr(X, "kind") and hasattr(X, "block_rows")


def _obs_handle(X, name="X"):
    """The ``coo`` array handle of a store, a Dataset or a handle; None for other inputs."""
    X = _base.open_if_path(X)
    if _base.is_dataset(X):
        if "obs" not in X.names:
            raise ValueError(
                f"{name} must be an observation store with an array 'obs' of kind 'coo'; the "
                f"store has {list(X.names)}. Convert ratings or edges with the ooc-lowrank "
                "converters (MovieLens u.data, SNAP signed edges)"
            )
        X = X["obs"]
    if _is_handle(X):
        if X.kind != "coo":
            raise ValueError(
                f"{name}['obs'] must have kind 'coo' (observed entries); got kind {X.kind!r}"
            )
        return X
    return None


def _pairs_to_csr(X, shape, name="X"):
    """Validate ``(rows, cols, values)`` and build a row-sorted CSR keeping duplicates."""
    if not isinstance(X, (tuple, list)):  # pydata sparse, np.matrix, float16 -> scipy / float32
        X = as_input(X, name)
    if sp.issparse(X):
        coo = sp.coo_matrix(X)
        if shape is None:
            shape = coo.shape
        X = (coo.row, coo.col, coo.data)
    if not (isinstance(X, (tuple, list)) and len(X) == 3):
        raise TypeError(
            f"{name} must be an observation store (Dataset or path), its 'obs' array, a "
            f"(rows, cols, values) tuple or a scipy.sparse matrix; got {type(X).__name__}"
        )
    if shape is None:
        raise ValueError(
            "shape must be given with (rows, cols, values) input; got None. Pass "
            "shape=(n_rows, n_cols) so that train and test index the same matrix"
        )
    m, n = _check_shape(shape)
    rows, cols, vals = (np.asarray(a) for a in X)
    for nm, a in (("rows", rows), ("cols", cols)):
        if a.ndim != 1 or a.dtype.kind not in "iu":
            raise TypeError(
                f"{name} {nm} must be a 1-D integer array; got {a.dtype} "
                f"with shape {a.shape}. Use np.asarray({nm}, dtype=np.int64)"
            )
    if vals.ndim != 1 or vals.dtype.kind not in "fiub":
        raise TypeError(
            f"{name} values must be a 1-D numeric array; got {vals.dtype} with shape {vals.shape}"
        )
    if not (rows.size == cols.size == vals.size):
        raise ValueError(
            f"{name} rows, cols and values must have the same length; got "
            f"{rows.size}, {cols.size}, {vals.size}"
        )
    for nm, a, lim in (("rows", rows, m), ("cols", cols, n)):
        if a.size and (a.min() < 0 or a.max() >= lim):
            bad = a.min() if a.min() < 0 else a.max()
            raise ValueError(
                f"{name} {nm} must lie in [0, {lim}) for shape {tuple(shape)}; got {int(bad)}. "
                "Use 0-based indices and a shape that covers every index"
            )
    vals = vals.astype(np.float64) if vals.dtype.kind != "f" else as_input(vals, name)
    rows = rows.astype(np.int64)
    order = np.argsort(rows, kind="stable")
    indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=m))]).astype(np.int64)
    return sp.csr_matrix((vals[order], cols.astype(np.int64)[order], indptr), shape=(m, n))


def _check_shape(shape):
    try:
        m, n = (int(s) for s in shape)
    except (TypeError, ValueError):
        raise param_error("shape", "must be a pair (n_rows, n_cols) of integers", shape) from None
    if m < 1 or n < 1:
        raise param_error("shape", "must have n_rows >= 1 and n_cols >= 1", shape)
    return m, n


def check_metrics(metrics):
    """``metrics`` (None, a sequence or a comma-separated str) as a list of names from
    :data:`METRICS`; an error naming the unknown ones."""
    if metrics is None:
        metrics = METRICS
    if isinstance(metrics, str):
        metrics = [m.strip() for m in metrics.split(",") if m.strip()]
    bad = [m for m in metrics if m not in METRICS]
    if bad:
        raise param_error("metrics", f"must be chosen from {METRICS}", bad)
    return list(metrics)


def observation_metrics(B, U, V, theta, metrics):
    """MAE / RMSE / sign accuracy of ``U diag(theta) V^T`` on the observed entries of ``B``
    (one pass); also used by two-sided IMC (``theta = 1``)."""
    cnt, sae, sse, agree, nonzero = _make_reduce(B)(_blocks.metrics_block, (U, V, theta))[0]
    if cnt == 0:
        raise ValueError("X must hold at least one observed entry to evaluate; got none")
    out = {"n": int(cnt)}
    for m in metrics:
        if m == "mae":
            out[m] = float(sae / cnt)
        elif m == "rmse":
            out[m] = float(np.sqrt(sse / cnt))
        else:
            out[m] = float(agree / max(nonzero, 1.0))
    return out


def _make_reduce(B, budget=None):
    """``reduce(fn, args)``: one pass of ``fn`` over the blocks of ``B`` (offset=True).

    A store holding a **single** block that fits ``budget`` bytes is read once and kept in
    memory; the engine then calls the block function directly on that one in-memory block
    (its single-block fast path, bitwise identical to the graph path).

    ``reduce.gradient_cache`` is the ``grad_cache`` of :func:`greedy_pursuit`: when the
    observations are in memory (given as arrays, or persisted because they fit ``budget``) and
    their gradients fit too (8 bytes an entry), one pass keeps each step's per-entry gradients
    as CSR blocks sharing the observations' structure; the power passes of the step read them.
    Streaming fits (``cache_bytes=0``, or data larger than the budget) never cache.
    """
    budget = engine.DEFAULT_CACHE_BYTES if budget is None else int(budget)
    if B.n_blocks == 1 and _is_handle(B.source) and B.nbytes <= budget:
        B = engine.as_blocked(B.source.read(0, B.shape[0]))

    def reduce(fn, args):
        out = engine.map_reduce(fn, B, args=args, offset=True)
        return out if isinstance(out, tuple) else (out,)

    def gradient_cache(U, V, theta, loss, delta):
        if _is_handle(B.source) or 8 * int(B.nnz or 0) > budget:
            return None
        G = engine.map_rows_persisted(
            _blocks.grad_csr_block,
            B,
            args=(U, V, theta, loss, delta),
            n_cols=B.shape[1],
            kind="csr",
            nnz=B.nnz,
            offset=True,
        )

        def matvec(u, v):
            return engine.map_reduce(_blocks.cached_power_block, G, args=(u, v), offset=True)

        return matvec

    reduce.gradient_cache = gradient_cache
    return reduce


@_base.params
class _SharedParams(_base.RunControl, _base.Streaming):
    """The parameters :class:`GreedyLowRank` and :class:`~ooc_lowrank.GreedyLowRankCV` share
    (same names, same meaning, same defaults; documented in :class:`GreedyLowRank`)."""

    loss: str = "square"
    n_components: int = 10
    init: str = "auto"
    power_iter: int = 20
    power_tol: float = 1e-3
    lbfgs_iter: int = 5
    huber_delta: float = 1.0
    nu: float = 0.95
    bias_sweeps: int = 5
    duplicates: str = "error"
    n_iter_no_change: int = 5


@_base.params
class GreedyLowRank(_base.Loadable, BaseEstimator, _SharedParams):
    """Greedy low-rank pursuit on observed entries (Yao & Kwok; SPEC section 2).

    Parameters
    ----------
    loss : {"square", "logistic", "huber", "l1", "hinge"}
        ``"square"`` with ``refit="full"`` is R1MP.  ``"logistic"``/``"hinge"`` need labels
        in {-1, +1}.  ``"l1"`` and ``"hinge"`` use the nonsmooth algorithm (SPEC 2.4).
    n_components : int
        Number of rank-one terms (rank budget).
    refit : {"auto", "full", "economic", "none"}
        Coefficient update after each greedy step: GLRL, EGLRL or none (``None`` is read as
        ``"none"``).  ``"auto"``: full for smooth losses, none for nonsmooth ones (the only
        choice allowed there).  With a non-zero ``init`` the economic refit scales only the
        greedy terms, ``X = X_0 + alpha X_greedy + beta u v^T``, and leaves the start ``X_0``
        as it is (SPEC's ``X_0 = 0`` makes the two readings equal).
    power_iter, power_tol : int, float
        Power method passes per singular pair and early-stop tolerance (R1MP: 20, 1e-3).
        20 was the best of {5, 10, 20} on validation splits for the L1 and square losses
        (MovieLens) and of {5, 20} for the logistic loss (Epinions).
    lbfgs_iter : int
        L-BFGS-B iterations per refit (SPEC: at most 5); 0 turns the refit off.
    refit_solver : {"auto", "exact", "lbfgs"}, default="auto"
        For the square loss (without ``greedy_l1``) a refit is a least-squares problem:
        ``"exact"`` solves it from one pass, as the R1MP reference code does (economic: a
        2 x 2 system; full: the basis Gram on the observed entries, kept between steps, so
        each step's pass adds one column, O(rank) per entry).  ``"lbfgs"``: at most
        ``lbfgs_iter`` L-BFGS-B iterations, one pass each (SPEC GLRL-6/7).  ``"auto"``:
        ``"exact"`` where it applies, ``"lbfgs"`` for the other losses (whose few L-BFGS
        iterations SPEC keeps as implicit regularization).
    alpha : float
        Optional ``l2 / 2 * ||X||_F^2`` term (full matrix, the start's terms included: with
        ``init="bias"`` it shrinks the biases), off by default.
    greedy_l2 : float or None, default=None
        ``greedy_l2 / 2 * sum_k theta_k^2`` over the greedy terms only (``theta_k`` is the
        Frobenius norm of the k-th unit rank-one term; the terms of the start ``X_0``, e.g.
        the biases, are not penalized, unlike ``alpha``).  In the refits, the initial step
        ``s / (L + greedy_l2)`` and the (monotone) objective for smooth losses; a shrink of
        the greedy coefficients by ``1 - eta_t greedy_l2`` each step for nonsmooth ones.
        None: chosen from the loss and the start
        (:func:`ooc_lowrank.glrl.core.resolve_greedy_l2`: 0.01 for the logistic loss from
        the bias start, chosen on validation data of Epinions; 0 otherwise, where it did not
        help or was not measured); the value used is stored in ``greedy_l2_``.  It is an
        absolute value on a loss summed over the entries: on data of a very different size
        cross-validate it (``GreedyLowRankCV(greedy_l2s=...)``).
    greedy_l1 : float
        Optional ``greedy_l1 * sum_k |theta_k|`` over the greedy terms only, a bound on their
        nuclear norm (the penalty that alternating solvers' factor l2 amounts to).  Smooth
        losses keep the greedy coefficients ``>= 0`` in the refits (the penalty is then
        linear); nonsmooth ones soft-threshold them by ``eta_t greedy_l1`` each step.
    huber_delta : float
        Threshold of the Huber loss.
    nu, max_inner, step_size, step_schedule :
        Nonsmooth settings: inner stop ``||G - Ghat|| <= nu ||G||``, at most ``max_inner``
        rank-one terms per step, step ``eta_t`` = ``step_size / sqrt(t)`` ("sqrt"),
        ``step_size / t`` ("inverse"), ``step_size`` ("constant"), or the best of
        ``step_size / sqrt(t) * 2^k``, k = -6..10, evaluated in one pass ("search").
        ``"auto"``: ``1 / (l2 t)`` when ``l2 > 0``, else "sqrt".  Defaults chosen on
        validation splits of MovieLens training folds (L1, rank 10;
        ``benchmarks/glrl_defaults.py``): ``max_inner=2``, ``step_size=2`` with "sqrt" (the
        "inverse" schedule was within 1e-4 MAE; "search" and ``step_size=4`` were worse;
        ``nu`` made no difference at ``max_inner <= 2``).
    init : {"auto", "zero", "mean", "bias", "bias-l1"}
        Starting iterate.  ``"auto"`` (default) looks at the training values (in the
        validation pass, no extra pass): rating-like values (non-negative, non-zero mean) and
        labels ({-1, +1} or {0, 1}) start at ``"bias"`` (``"mean"`` when ``rank < 3``); real
        values of both signs at ``"zero"``.  Chosen on validation splits of MovieLens and
        Epinions (:func:`ooc_lowrank.glrl.core.resolve_init`); the choice is stored in
        ``init_``.  ``"zero"``: ``X_0 = 0`` (SPEC).  ``"mean"``: ``X_0 = mean(values) 1 1^T``,
        stored as a first rank-one term that counts in the rank budget (the mean comes from
        the validation pass, so it costs nothing extra).  Greedy pursuit on a zero-filled residual
        otherwise spends its first terms on the observation pattern (e.g. rating counts).
        ``"bias"``: ``X_0 = mean + b_u 1^T + 1 b_i^T`` (global mean plus row and column
        biases), a **rank-2** start ``[mean + b_u, 1] [1, b_i]^T`` that counts two terms of
        the rank budget; the biases are regularized means fitted by ``bias_sweeps``
        alternating sweeps (2 passes each) with ridge ``bias_reg``.  ``"bias-l1"``: the same
        with L1 IRLS weights (robust, median-like biases).
    bias_reg, bias_sweeps : float, int
        Settings of ``init="bias"`` / ``"bias-l1"``.  ``bias_reg=5`` was better than 10 on
        validation splits for the L1 loss (MovieLens) and the logistic loss (Epinions), and
        within 0.0013 RMSE for the square loss.
    duplicates : {"error", "keep"}
        Policy for repeated (row, col) pairs (see module docstring).
    validation : tuple or store, optional
        ``(rows, cols, values)`` or an observation store: mean loss evaluated after each
        step; the best iterate is kept and the fit stops after ``n_iter_no_change`` steps
        without improvement.
    n_iter_no_change : int
    max_iter : int, optional
        Cap on greedy (outer) steps; default: until the rank budget is used.
    block_rows : int, optional
        Rows per block (default: the store's blocks, or about 16 MB per block in memory).
    cache_bytes : int, optional
        Observation blocks read from a store are kept in memory across passes when they fit
        this budget (default :data:`ooc_lowrank.engine.DEFAULT_CACHE_BYTES`); 0 streams.  With
        the observations in memory, each greedy step also caches its per-entry gradients
        (8 bytes an entry, when they fit) so that its power passes cost O(1) per entry, not
        O(rank) (``n_cache_passes_`` counts them; ``n_passes_`` counts passes over the data).
    random_state : int, Generator or None
        Only used for the power method's random restart.
    verbose : bool
        Log progress at INFO level on the ``"ooc_lowrank"`` logger.
    callback : callable, optional
        ``callback(iteration, elapsed_seconds, objective)`` after each greedy step.
    tol : float, default=0.0
        Stop after a greedy step that lowers the training objective by less than ``tol`` times
        its previous value (an increase, possible for the nonsmooth losses, stops it too).  The
        default ``0`` never stops on it: every step of the rank budget (or ``max_iter``) is
        taken, as before ``tol`` existed, so default results are unchanged.

    Notes
    -----
    **scikit-learn's estimator checks** (``parametrize_with_checks``) assume ``fit(X, y)`` on
    samples and targets; this estimator's input is different. ``fit`` takes the observed entries of
    one (n_rows, n_cols) matrix (a store, ``(rows, cols, values)`` or a scipy.sparse matrix whose
    stored entries are the observations) and ``predict`` takes ``(rows, cols)`` index pairs. The
    checks that fit do not apply: they pass a dense (n_samples, n_features) ``X`` and a target
    ``y``, which here would mean a fully observed matrix whose rows are not samples and whose
    columns are not features, so ``n_features_in_``, the shapes of ``predict(X)``, sample-order
    invariance and the handling of ``y`` have no counterpart. The API checks (clone, repr,
    ``get_params`` / ``set_params``, ``__init__`` storing only its parameters, tags) do apply and
    run in ``tests/test_sklearn_api.py``.
    """

    refit: str | None = "auto"
    refit_solver: str = "auto"
    alpha: float = 0.0
    greedy_l2: float | None = None
    greedy_l1: float = 0.0
    max_inner: int = 2
    step_size: float = 2.0
    step_schedule: str = "auto"
    bias_reg: float = 5.0
    validation: object = None
    max_iter: int | None = None
    tol: float = 0.0

    # ------------------------------------------------------------------ validation
    def _check_params(self):
        lo = get_loss(self.loss)
        check_scalar(
            self.n_components,
            "n_components",
            kind=numbers.Integral,
            low=1,
            fix="Use n_components >= 1 (the number of rank-one terms)",
        )
        refit = "none" if self.refit is None else self.refit  # the CLI parses "none" as None
        if refit not in ("auto",) + REFITS:
            raise param_error("refit", f"must be one of {('auto',) + REFITS}", self.refit)
        if not lo.smooth and refit not in ("auto", "none"):
            raise param_error(
                "refit",
                f"must be 'none' or 'auto' for the nonsmooth loss {self.loss!r} "
                "(SPEC 2.4: no coefficient refit)",
                self.refit,
                "Use refit='none'",
            )
        check_scalar(self.power_iter, "power_iter", kind=numbers.Integral, low=1)
        check_scalar(self.power_tol, "power_tol", low=0.0)
        check_scalar(self.lbfgs_iter, "lbfgs_iter", kind=numbers.Integral, low=0)
        check_scalar(self.alpha, "alpha", low=0.0)
        if self.greedy_l2 is not None:
            check_scalar(self.greedy_l2, "greedy_l2", low=0.0, fix="Use None (auto) or >= 0")
        check_scalar(self.greedy_l1, "greedy_l1", low=0.0)
        resolve_refit_solver(self.refit_solver, lo.name, self.greedy_l1)
        check_scalar(self.huber_delta, "huber_delta", low=0.0, low_inclusive=False)
        check_scalar(self.nu, "nu", low=0.0, high=1.0, low_inclusive=False, high_inclusive=False)
        check_scalar(self.max_inner, "max_inner", kind=numbers.Integral, low=1)
        check_scalar(self.step_size, "step_size", low=0.0, low_inclusive=False)
        if self.step_schedule not in SCHEDULES:
            raise param_error("step_schedule", f"must be one of {SCHEDULES}", self.step_schedule)
        if self.init not in INITS:
            raise param_error("init", f"must be one of {INITS}", self.init)
        if self.init in ("bias", "bias-l1") and self.n_components < 3:
            raise param_error(
                "n_components",
                "must be >= 3 with init='bias' (the biases use two terms of the budget)",
                self.n_components,
                "Use init='mean' or a larger rank",
            )
        check_scalar(self.bias_reg, "bias_reg", low=0.0)
        check_scalar(self.bias_sweeps, "bias_sweeps", kind=numbers.Integral, low=1)
        if self.duplicates not in ("error", "keep"):
            raise param_error("duplicates", "must be 'error' or 'keep'", self.duplicates)
        if self.n_iter_no_change is not None:
            check_scalar(self.n_iter_no_change, "n_iter_no_change", kind=numbers.Integral, low=1)
        _base.check_common_params(self, min_iter=1, max_iter_none=True)
        return lo, refit

    def _blocked(self, X, shape, name="X"):
        """``(Blocked, (n_rows, n_cols))`` for any supported observation input."""
        h = _obs_handle(X, name)
        if h is not None:
            if shape is not None and tuple(int(s) for s in shape) != tuple(h.shape):
                raise param_error(
                    "shape",
                    f"must match the store's shape {tuple(h.shape)}",
                    shape,
                    "Omit shape= for store input",
                )
            B = engine.as_blocked(h, block_rows=self.block_rows, name=name)
            return B, tuple(int(s) for s in h.shape)
        csr = _pairs_to_csr(X, shape, name)
        return engine.as_blocked(csr, block_rows=self.block_rows, name=name), csr.shape

    def _check_data(self, B, shape, lo, name="X"):
        """One validation pass over the blocks: errors before any fitting work."""
        counts = _make_reduce(B)(_blocks.check_block, (int(shape[1]), bool(lo.labels_pm1)))[0]
        nnz, nonfinite, badlab, oor, dup, total = counts[:6]
        if nnz == 0:
            raise ValueError(
                f"{name} must hold at least one observed entry; got an empty "
                "observation set. Check the converter's input file"
            )
        if oor:
            raise ValueError(
                f"{name} column indices must lie in [0, {shape[1]}); {int(oor)} do not"
            )
        if nonfinite:
            raise ValueError(
                f"{name} values must be finite; got {int(nonfinite)} NaN/inf "
                "values. Drop them before fitting"
            )
        if badlab:
            raise ValueError(
                f"{name} values must be labels in {{-1, +1}} for loss={self.loss!r}; "
                f"{int(badlab)} of {int(nnz)} are not. Map labels with np.where(y > 0, 1, -1) "
                "or use loss='square'"
            )
        if dup and self.duplicates == "error":
            raise ValueError(
                f"{name} must not repeat a (row, col) pair with duplicates='error'; found "
                f"{int(dup)} repeated entries. Aggregate them (e.g. average) or pass "
                "duplicates='keep' to treat each copy as a separate observation"
            )
        # counts[6:] = values outside {-1, +1}, outside {0, 1}, negative (for init="auto")
        return int(nnz), float(total / nnz), tuple(int(x) for x in counts[6:])

    def _validation_scorer(self, lo, shape):
        val = self.validation
        if val is None:
            return None
        code, delta = lo.code, float(self.huber_delta)
        Bv, vshape = self._blocked(val, shape if _obs_handle(val) is None else None, "validation")
        if tuple(vshape) != tuple(shape):
            raise param_error(
                "validation",
                f"must index the same matrix shape {shape}",
                vshape,
                "Convert it with --shape ROWS,COLS",
            )
        self._check_data(Bv, shape, lo, "validation")
        run = _make_reduce(Bv)

        def score(U, V, theta):
            s, c = run(_blocks.loss_block, (U, V, theta, code, delta))[0]
            return float(s / max(c, 1.0))

        return score

    def _check_rank(self, shape):
        """``n_components <= min(n_rows, n_cols)``: a matrix of that shape has no more independent
        rank-one terms (scikit-learn's ``TruncatedSVD`` refuses such a rank too)."""
        most = int(min(shape))
        if int(self.n_components) > most:
            raise param_error(
                "n_components",
                f"must be <= min(n_rows, n_cols) = {most} for the {shape[0]} x {shape[1]} "
                "observed matrix (a matrix of that shape has rank at most that; further "
                "rank-one terms add nothing and the fit would not end for a huge rank)",
                self.n_components,
                f"Use n_components <= {most}",
            )

    # ------------------------------------------------------------------ fit
    def fit(self, X, y=None, *, shape=None, checkpoint=None, checkpoint_every=5):
        """Fit on observed entries.

        Parameters
        ----------
        X : Dataset, store path, coo ArrayHandle, (rows, cols, values) or scipy.sparse
            Observed entries; ``rows`` and ``cols`` are 0-based.
        y : None
            Ignored (the values are part of ``X``).
        shape : (int, int), optional
            ``(n_rows, n_cols)``; required for array input.
        checkpoint : str, os.PathLike or None
            Directory (or fsspec URL) for the fit's small state (factors, RNG state, current
            gradient pass, histories; JSON + npz, written atomically).  If it already holds a
            checkpoint of this fit (same parameters and data), the fit resumes from it and
            ends with the same model as an uninterrupted fit; a checkpoint of another fit is
            an error.  Kept after the fit (a new call returns at once, or continues when
            ``max_iter`` was raised).
        checkpoint_every : int, default=5
            Save after every ``checkpoint_every``-th greedy step (and when the fit stops).

        Returns
        -------
        self
        """
        lo, refit = self._check_params()
        _checkpoint.check_checkpoint_args(checkpoint, checkpoint_every)
        B, shp = self._blocked(X, shape)
        self._check_rank(shp)
        # refuse a pass that cannot fit a worker (locally: the memory available)
        _estimate.check_fits(_estimate.glrl_estimate(self, B, shp))
        nnz, mean, (not_pm1, not_01, negative) = self._check_data(B, shp, lo)
        init = resolve_init(
            self.init,
            rank=int(self.n_components),
            mean=mean,
            n_not_pm1=not_pm1,
            n_not_01=not_01,
            n_negative=negative,
        )
        greedy_l2 = resolve_greedy_l2(self.greedy_l2, loss=self.loss, init=init)
        scorer = self._validation_scorer(lo, shp)
        if B.n_blocks > 1 or engine.active_client() is not None:
            (B,) = engine.maybe_persist(B, budget=self.cache_bytes)
        reduce = _make_reduce(B, self.cache_bytes)
        init_factors, init_passes = None, 0
        ckpt = _checkpoint.open_checkpoint(
            checkpoint, checkpoint_every, self, extra={"mean": mean}, X=B
        )
        restored = ckpt.load() if ckpt is not None else None
        if restored is not None:  # the start is part of the saved state
            init_passes = int(restored[2].get("init_passes", 0))
        elif init in ("bias", "bias-l1"):
            init_factors, init_passes = bias_init(
                reduce,
                shp,
                mean,
                reg=float(self.bias_reg),
                n_sweeps=int(self.bias_sweeps),
                irls_eps=1e-2 if init == "bias-l1" else 0.0,
            )
        if ckpt is not None:
            ckpt.extra["init_passes"] = init_passes

        options = PursuitOptions.from_params(  # GreedyLowRank's parameters of the same name
            self.get_params(),
            rank=self.n_components,
            refit=refit,
            l2=self.alpha,
            greedy_l2=greedy_l2,
            tol=float(self.tol),
        )
        res = greedy_pursuit(
            reduce,
            shp,
            options,
            validation=scorer,
            callback=self.callback,
            init_offset=mean if init == "mean" else None,
            init_factors=init_factors,
            grad_cache=reduce.gradient_cache,
            checkpoint=ckpt,
        )
        self.U_, self.V_, self.theta_ = res.U, res.V, res.theta
        self.shape_ = tuple(int(s) for s in shp)
        self.init_ = init
        self.greedy_l2_ = greedy_l2
        self.n_components_ = int(res.theta.size)
        self.objective_path_ = np.asarray(res.objective)
        self.validation_path_ = np.asarray(res.validation)
        self.inner_counts_ = np.asarray(res.inner_counts, dtype=np.int64)
        self.step_sizes_ = np.asarray(res.step_sizes)
        self.step_times_ = np.asarray(res.times)
        self.n_iter_ = int(res.n_iter)
        self.best_iter_ = int(res.best_iter)
        self.n_passes_ = int(res.n_passes) + init_passes
        self.n_cache_passes_ = int(res.n_cache_passes)
        # fit diagnostics (not saved with the model): the passes of n_passes_ by kind
        self.n_passes_by_kind_ = dict(res.pass_kinds)
        if init_passes:
            self.n_passes_by_kind_["init"] = self.n_passes_by_kind_.get("init", 0) + init_passes
        self.n_observed_ = nnz
        return self

    def estimate(self, X, y=None, *, shape=None, client=None):
        """Passes, per-worker memory and store size of ``fit(X, shape=shape)``, before fitting.

        Reads no data block.  Returns a dict: ``passes_per_iteration`` (``typical``: the power
        passes and the gradient, ``max``: with the refit and step passes), ``max_passes``,
        ``store_bytes``, ``block_rows``, ``task_bytes`` (one block task: its block and the
        ``G v`` / ``G^T u`` vectors), ``worker_bytes`` (process, tasks, reduction buffers,
        factors, cached share), ``worker_memory_limit``, ``memory_cap`` and ``fits`` (locally
        against the available memory), ``suggest`` when it does not fit.  See
        :mod:`ooc_lowrank._estimate`.
        """
        self._check_params()
        B, shp = self._blocked(X, shape)
        return _estimate.glrl_estimate(self, B, shp, client=client)

    # ------------------------------------------------------------------ predict
    def _check_fitted(self):
        if not hasattr(self, "theta_"):
            from sklearn.exceptions import NotFittedError

            raise NotFittedError("This GreedyLowRank instance is not fitted yet; call fit first")
        self._check_factors()

    def _check_factors(self):
        """Cheap shape checks before any Numba kernel indexes the factors (the fitted
        attributes may have been modified in memory): ``U_`` (n_rows, k), ``V_`` (n_cols, k),
        ``theta_`` (k,), float32/float64, ``n_rows, n_cols = shape_``."""
        try:
            m, n = (int(s) for s in self.shape_)
        except (TypeError, ValueError):
            raise TypeError(
                f"GreedyLowRank.shape_ must be a pair of integers; got {self.shape_!r}. "
                "Refit or reload the model"
            ) from None
        k = np.shape(self.theta_)[0] if np.ndim(self.theta_) == 1 else None
        for name, want in (("theta_", (k,)), ("U_", (m, k)), ("V_", (n, k))):
            a = getattr(self, name)
            if not isinstance(a, np.ndarray):
                raise TypeError(
                    f"GreedyLowRank.{name} must be a NumPy array; got {type(a).__name__}. The "
                    "fitted attributes were modified; refit or reload the model"
                )
            if a.dtype not in (np.float32, np.float64) or a.shape != want or k is None:
                raise ValueError(
                    f"GreedyLowRank.{name} must be a float32/float64 array of shape {want} "
                    f"(shape_={self.shape_}, k = len(theta_)); got {a.dtype} of shape "
                    f"{a.shape}. The fitted attributes were modified; refit or reload the model"
                )

    def _check_index(self, a, lim, name):
        a = np.asarray(a)
        if a.ndim != 1 or a.dtype.kind not in "iu":
            raise TypeError(
                f"{name} must be a 1-D integer array; got {a.dtype} with shape {a.shape}"
            )
        if a.size and (a.min() < 0 or a.max() >= lim):
            bad = a.min() if a.min() < 0 else a.max()
            raise ValueError(
                f"{name} must lie in [0, {lim}) (fitted shape {self.shape_}); got {int(bad)}"
            )
        return a.astype(np.int64)

    def predict(self, rows, cols):
        """Predictions ``X[rows[k], cols[k]]``, computed in chunks of pairs.

        Returns
        -------
        ndarray of shape (n_pairs,)
        """
        self._check_fitted()
        rows = self._check_index(rows, self.shape_[0], "rows")
        cols = self._check_index(cols, self.shape_[1], "cols")
        if rows.size != cols.size:
            raise ValueError(
                f"rows and cols must have the same length; got {rows.size} and {cols.size}"
            )
        out = np.empty(rows.size)
        U, V, th = self.U_, self.V_, self.theta_
        for s in range(0, rows.size, _PAIR_CHUNK):
            e = min(s + _PAIR_CHUNK, rows.size)
            _k.predict_pairs(rows[s:e], cols[s:e], U, V, th, out[s:e])
        return out

    def top_k(self, rows, k=10):
        """Top-``k`` columns of the given rows, one row of scores at a time.

        Returns
        -------
        indices : ndarray of shape (n_rows_asked, k), int64
        scores : ndarray of shape (n_rows_asked, k)
        """
        self._check_fitted()
        rows = self._check_index(rows, self.shape_[0], "rows")
        check_scalar(k, "k", kind=numbers.Integral, low=1, high=self.shape_[1])
        idx = np.empty((rows.size, k), np.int64)
        val = np.empty((rows.size, k))
        _k.top_k_rows(rows, self.U_, self.V_, self.theta_, int(k), idx, val)
        return idx, val

    def evaluate(self, X, metrics=METRICS, *, shape=None):
        """Metrics on held-out observed entries (one pass).

        Parameters
        ----------
        X : store, Dataset, (rows, cols, values) or scipy.sparse
        metrics : sequence of {"mae", "rmse", "sign_accuracy"} or comma-separated str

        Returns
        -------
        dict
        """
        self._check_fitted()
        metrics = check_metrics(metrics)
        B, shp = self._blocked(X, shape or (self.shape_ if _obs_handle(X) is None else None))
        if tuple(shp) != self.shape_:
            raise ValueError(
                f"X must index the fitted matrix shape {self.shape_}; got {shp}. "
                "Convert the test file with --shape ROWS,COLS"
            )
        return observation_metrics(B, self.U_, self.V_, self.theta_, metrics)

    # ------------------------------------------------------------------ persistence
    def _state(self):
        """``(params, arrays, extra)`` of the fitted model, as :meth:`save` writes them (and
        :meth:`_from_saved` reads them; :class:`GreedyLowRankCV` embeds them)."""
        self._check_fitted()
        params = _base.saved_params(self, _NOT_SAVED)
        arrays = {
            "U": self.U_,
            "V": self.V_,
            "theta": self.theta_,
            "objective_path": self.objective_path_,
            "validation_path": self.validation_path_,
            "inner_counts": self.inner_counts_,
            "step_sizes": self.step_sizes_,
            "step_times": self.step_times_,
        }
        extra = {
            "shape": list(self.shape_),
            "n_iter": self.n_iter_,
            "best_iter": self.best_iter_,
            "n_passes": self.n_passes_,
            "n_cache_passes": self.n_cache_passes_,
            "n_observed": self.n_observed_,
            "init": self.init_,
            "greedy_l2": self.greedy_l2_,
        }
        return params, arrays, extra

    @classmethod
    def _from_saved(cls, params, arrays, extra):
        """The estimator of a loaded model; every JSON value and array is checked first
        (type, dtype, shape against ``shape`` and each other, finiteness)."""
        params = {
            k: (tuple(v) if isinstance(v, list) else v)
            for k, v in check_params(cls, params, ignore_unknown=True).items()
        }
        est = build_checked(cls, params, cls._check_params)
        r = ModelReader(arrays, extra)
        shape = r.value("shape", "list")
        if len(shape) != 2 or not all(
            isinstance(s, int) and not isinstance(s, bool) and s >= 1 for s in shape
        ):
            raise ModelFileError(
                "model.json", "extra.shape", "must be [n_rows, n_cols] with both >= 1", shape
            )
        m, n = shape
        est.U_ = r.array("U", (m, None), meaning="n_rows of extra.shape x k")
        k = est.U_.shape[1]
        est.V_ = r.array("V", (n, k), meaning="n_cols of extra.shape x k, the columns of 'U'")
        est.theta_ = r.array("theta", (k,), meaning="k, the columns of 'U' and 'V'")
        est.objective_path_ = r.array("objective_path", (None,))
        est.validation_path_ = r.array("validation_path", (None,), finite=False)
        est.inner_counts_ = r.array("inner_counts", (None,), kind="int")
        est.step_sizes_ = r.array("step_sizes", (None,))
        est.step_times_ = r.array("step_times", (None,))
        est.shape_ = (m, n)
        est.n_components_ = int(k)
        est.n_iter_ = r.value("n_iter", "int", low=0)
        est.best_iter_ = r.value("best_iter", "int", low=0)
        est.n_passes_ = r.value("n_passes", "int", low=0)
        est.n_cache_passes_ = r.value("n_cache_passes", "int", low=0, default=0)
        est.n_observed_ = r.value("n_observed", "int", low=0)
        est.init_ = r.value(
            "init", "str", default=est.init, choices=("zero", "mean", "bias", "bias-l1")
        )
        est.greedy_l2_ = r.value(  # older files: the explicit value, or 0 (the old default)
            "greedy_l2", "float", low=0.0, default=float(est.greedy_l2 or 0.0)
        )
        r.finish()
        est._check_fitted()
        return est


__all__ = ["GreedyLowRank", "LOSSES", "METRICS"]
