"""``GreedyLowRankCV``: K-fold cross-validation of GLRL's step parameters over observed entries.

The **observed entries** (not the rows) are split into ``cv`` folds.  The fold of an entry is
a seeded hash of ``(row, col)`` (:func:`entry_folds`), so no assignment array is stored: for
store input, every fit reads the store block by block through a view
(:class:`_FoldView`) that keeps the entries of its fold (validation) or of the other folds
(training) as each block is read, and the entries are never all in memory at once.  For
in-memory input the folds are boolean masks of the entry arrays.

Each (setting, fold) is a separate :class:`GreedyLowRank` fit on the training entries with
``validation=`` the held-out fold: the fit keeps its best iterate on the held-out entries (the
rank / early stopping by validation of :class:`GreedyLowRank`), which is then scored with the
loss's natural metric (MAE for ``l1`` and ``huber``, RMSE for ``square``, sign accuracy for
``logistic`` and ``hinge``).  The grid covers the parameters that matter for the loss:
``step_size``, ``step_schedule`` and ``max_inner`` for the nonsmooth losses (``l1``,
``hinge``), ``l2`` and ``bias_reg`` for the smooth ones.  The best setting is refitted on all
entries (with ``select_iter=True``: for as many steps as the median over the folds of the
best iterate's step).

Each fit is exactly ``GreedyLowRank(**params, validation=val_k).fit(train_k)`` scored by
``.evaluate(val_k)``; ``tests/test_glrl_cv.py`` checks this.
"""

from __future__ import annotations

import logging
import numbers
import time

import numpy as np
import scipy.sparse as sp
from scipy.stats import rankdata
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from ooc_lowrank import _base
from ooc_lowrank._persist import ModelFileError
from ooc_lowrank._validation import check_scalar, format_table, param_error
from ooc_lowrank.glrl.core import SCHEDULES
from ooc_lowrank.glrl.estimator import GreedyLowRank, _obs_handle, _pairs_to_csr, _SharedParams
from ooc_lowrank.glrl.losses import get_loss

logger = logging.getLogger("ooc_lowrank")

__all__ = ["GreedyLowRankCV", "entry_folds"]

#: default grids (around GreedyLowRank's defaults; benchmarks/results/glrl_defaults.json:
#: L1 validation MAE step_size 1 / 2 / 4 -> 0.73484 / 0.73455 / 0.73854, "inverse" vs "sqrt"
#: within 1e-4, max_inner 1 / 2 / 5 within 4e-4; bias_reg 5 vs 10 within 0.003)
NONSMOOTH_GRID = {
    "step_size": (1.0, 2.0, 4.0),
    "step_schedule": ("sqrt", "inverse"),
    "max_inner": (1, 2),
}
#: greedy_l2 None: GreedyLowRank's auto value (0.01 for logistic from the bias start, else 0)
SMOOTH_GRID = {"alpha": (0.0,), "greedy_l2": (None,), "bias_reg": (2.0, 5.0, 10.0)}
#: scoring metric of each loss and whether larger is better
SCORING = {
    "l1": "mae",
    "huber": "mae",
    "square": "rmse",
    "logistic": "sign_accuracy",
    "hinge": "sign_accuracy",
}
_GREATER = {"mae": False, "rmse": False, "sign_accuracy": True}
_GRID_ARGS = {
    "step_size": "step_sizes",
    "step_schedule": "step_schedules",
    "max_inner": "max_inners",
    "alpha": "alphas",
    "greedy_l2": "greedy_l2s",
    "bias_reg": "bias_regs",
}
_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


def _mix(z):
    """splitmix64 finalizer on a uint64 array (wrapping arithmetic)."""
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


def entry_folds(rows, cols, n_splits, seed):
    """Fold id (``0..n_splits-1``, int64) of each observed entry ``(rows[i], cols[i])``.

    A hash of ``(row, col, seed)``: the same entry gets the same fold in every block, every
    process and every input form (store or arrays), and no assignment array is stored.
    Folds are near-equal in size (each entry falls in a fold with probability 1/n_splits).
    """
    with np.errstate(over="ignore"):
        s = _mix(np.array([int(seed) & 0xFFFFFFFFFFFFFFFF], dtype=np.uint64))[0]
        key = (np.asarray(rows).astype(np.uint64) << np.uint64(32)) ^ np.asarray(cols).astype(
            np.uint64
        )
        h = _mix(key ^ s)
    return (h % np.uint64(n_splits)).astype(np.int64)


class _FoldView:
    """A ``coo`` handle on a store's entries of one fold (``train=False``) or of the other
    folds (``train=True``): each block read from the store is filtered by :func:`entry_folds`.
    Picklable (holds the store handle, which reopens the store in each process)."""

    kind = "coo"

    def __init__(self, handle, n_splits, fold, seed, train):
        self.handle, self.n_splits, self.fold = handle, int(n_splits), int(fold)
        self.seed, self.train = int(seed), bool(train)
        self.shape, self.dtype = tuple(handle.shape), handle.dtype
        self.block_rows, self.url = handle.block_rows, handle.url
        part = "train" if train else "val"
        self.name = f"{handle.name}-cv{n_splits}-{part}{fold}-s{seed}"
        self.nnz = None  # unknown without a pass

    def read(self, start=0, stop=None):
        S = self.handle.read(start, stop)
        counts = np.diff(S.indptr)
        rows = np.repeat(np.arange(start, start + S.shape[0], dtype=np.int64), counts)
        f = entry_folds(rows, S.indices, self.n_splits, self.seed)
        keep = (f != self.fold) if self.train else (f == self.fold)
        kept = np.bincount(rows[keep] - start, minlength=S.shape[0])
        indptr = np.concatenate([[0], np.cumsum(kept)]).astype(np.int64)
        return sp.csr_matrix((S.data[keep], S.indices[keep], indptr), shape=S.shape)


@_base.params
class GreedyLowRankCV(_base.Loadable, BaseEstimator, _SharedParams):
    """GreedyLowRank with built-in K-fold cross-validation over the observed entries.

    The grid holds the parameters that matter for the loss (nonsmooth ``l1`` / ``hinge``:
    ``step_sizes`` x ``step_schedules`` x ``max_inners``; smooth losses: ``alphas`` x
    ``greedy_l2s`` x ``bias_regs``); the number of greedy steps (hence the rank used) is chosen
    per fold by validation on the held-out entries.  See :mod:`ooc_lowrank.glrl.cv`.

    Parameters
    ----------
    loss : {"square", "logistic", "huber", "l1", "hinge"}, default="square"
        As in :class:`GreedyLowRank`.
    n_components : int, default=10
        Rank budget of every fit.
    step_sizes : sequence of float or None, default=None
        Grid of ``step_size`` (nonsmooth losses only); None: (1, 2, 4).
    step_schedules : sequence of str or None, default=None
        Grid of ``step_schedule`` (nonsmooth losses only; "sqrt", "inverse", "constant",
        "search", "auto"); None: ("sqrt", "inverse").
    max_inners : sequence of int or None, default=None
        Grid of ``max_inner`` (nonsmooth losses only); None: (1, 2).
    alphas : sequence of float or None, default=None
        Grid of ``alpha`` (smooth losses only); None: (0,).
    greedy_l2s : sequence of float or None, default=None
        Grid of ``greedy_l2``, the penalty on the greedy terms only (smooth losses only);
        None: GreedyLowRank's automatic value alone (``greedy_l2=None``).
    bias_regs : sequence of float or None, default=None
        Grid of ``bias_reg`` (smooth losses only; used by ``init="bias"``); None: (2, 5, 10).
    cv : int, default=5
        Number of folds of the observed entries (a seeded hash of (row, col),
        :func:`entry_folds`).
    scoring : {"mae", "rmse", "sign_accuracy"} or None, default=None
        Held-out metric; None: MAE for l1 and huber, RMSE for square, sign accuracy for
        logistic and hinge.  Lower is better for mae and rmse (``rank_test_score`` 1 is the
        lowest error), higher for sign_accuracy.
    refit : bool, default=True
        Refit the best setting on all entries (``best_estimator_``).
    select_iter : bool, default=False
        True: refit with ``max_iter`` = the median over the folds of the best iterate's step
        (the number of steps chosen by validation).  False: the refit uses the whole rank
        budget (the folds' validation still picks each fit's best iterate for its score).
        On MovieLens 100K u1..u5 (L1, rank 10; ``benchmarks/glrl_cv.py``) the whole budget
        was never worse on test (mean test MAE in ``benchmarks/results/glrl_cv.json``): the
        refit sees 25 % more entries than a fold's training part and uses the extra steps.
    coef_refit : {"auto", "full", "economic", "none"}, default="auto"
        :class:`GreedyLowRank`'s ``refit`` (coefficient update after each step).
    init : {"auto", "zero", "mean", "bias", "bias-l1"}, default="auto"
        As in :class:`GreedyLowRank`.
    power_iter : int, default=20
        As in :class:`GreedyLowRank`.
    power_tol : float, default=0.001
        As in :class:`GreedyLowRank`.
    lbfgs_iter : int, default=5
        As in :class:`GreedyLowRank`.
    huber_delta : float, default=1.0
        As in :class:`GreedyLowRank`.
    nu : float, default=0.95
        As in :class:`GreedyLowRank`.
    bias_sweeps : int, default=5
        As in :class:`GreedyLowRank`.
    duplicates : {"error", "keep"}, default="error"
        As in :class:`GreedyLowRank`.
    n_iter_no_change : int, default=5
        Steps without improvement on the held-out fold before a fit stops.
    block_rows : int or None, default=None
        As in :class:`GreedyLowRank`.
    cache_bytes : int or None, default=None
        As in :class:`GreedyLowRank`.
    random_state : int or None, default=None
        Seeds the folds (None: seed 0) and every fit's power method.
    verbose : bool, default=False
        Log each fit at INFO level on the ``"ooc_lowrank"`` logger.
    callback : callable or None, default=None
        ``callback(iteration, elapsed_seconds, objective)`` after each greedy step of the refit
        on all entries (``refit=True``), as :class:`GreedyLowRank` takes it; the fold fits do
        not call it.

    Attributes
    ----------
    cv_results_ : dict of arrays
        As scikit-learn's searches: ``params``, ``param_<name>``, ``split{k}_test_score``,
        ``mean_test_score``, ``std_test_score``, ``rank_test_score``, plus
        ``split{k}_best_iter`` (the step of fold k's best iterate) and ``split{k}_n_val``.
    best_index_, best_params_, best_score_ :
        Best setting (first of ties); ``best_params_`` holds the grid parameters and, with
        ``select_iter=True``, ``max_iter``: the refit is ``GreedyLowRank(**base, **best_params_)``
        with ``base`` the shared parameters (:meth:`base_params`).
    best_estimator_ : GreedyLowRank
    scoring_ : str
    n_splits_ : int
    cv_time_, refit_time_ : float

    Notes
    -----
    **scikit-learn's estimator checks** (``parametrize_with_checks``) assume ``fit(X, y)`` on
    samples and targets; this estimator's input is different. ``fit`` takes the observed entries of
    one (n_rows, n_cols) matrix (a store, ``(rows, cols, values)`` or a scipy.sparse matrix whose
    stored entries are the observations) and ``predict`` takes ``(rows, cols)`` index pairs (as
    :class:`GreedyLowRank`, whose note applies). The checks that fit do not apply: a dense ``X`` and
    a target ``y`` would be a fully observed matrix whose rows are not samples and whose columns are
    not features. The API checks (clone, repr, ``get_params`` / ``set_params``, ``__init__`` storing
    only its parameters, tags) do apply and run in ``tests/test_sklearn_api.py``.
    """

    step_sizes: tuple | None = None
    step_schedules: tuple | None = None
    max_inners: tuple | None = None
    alphas: tuple | None = None
    greedy_l2s: tuple | None = None
    bias_regs: tuple | None = None
    cv: object = 5
    scoring: str | None = None
    refit: bool = True
    select_iter: bool = False
    coef_refit: str = "auto"

    # ------------------------------------------------------------------ validation
    def base_params(self):
        """The :class:`GreedyLowRank` parameters shared by every fit of the grid (its
        ``refit`` is our ``coef_refit``; the ``callback`` is the refit's, given there)."""
        return _base.shared_params(
            self,
            GreedyLowRank,
            exclude=("callback",),
            refit=self.coef_refit,
            random_state=self._seed(),
        )

    def _seed(self):
        return 0 if self.random_state is None else self.random_state

    @staticmethod
    def _values(values, arg, kind, low, example):
        """A grid argument as a list (a clear error for anything else)."""
        if isinstance(values, (str, bytes)) or not np.iterable(values):
            raise param_error(
                arg, "must be a non-empty list", values, f"e.g. {example}", exc=TypeError
            )
        vals = list(values)
        if not vals:
            raise param_error(arg, "must not be empty", values, f"e.g. {example}")
        out = []
        for v in vals:
            if kind == "str":
                if v not in SCHEDULES:
                    raise param_error(
                        arg, f"must hold only values of {SCHEDULES} (found {v!r})", values
                    )
                out.append(str(v))
                continue
            integral = isinstance(v, numbers.Integral)
            if (
                isinstance(v, (bool, np.bool_))
                or not isinstance(v, numbers.Real)
                or (kind == "int" and not integral)
            ):
                raise param_error(
                    arg,
                    f"must hold only {kind} numbers (found {v!r})",
                    values,
                    f"e.g. {example}",
                    exc=TypeError,
                )
            if not np.isfinite(v) or v < low[0] or (v == low[0] and not low[1]):
                rule = f"> {low[0]}" if not low[1] else f">= {low[0]}"
                raise param_error(
                    arg,
                    f"must hold only finite numbers {rule} (found {v!r})",
                    values,
                    f"e.g. {example}",
                )
            out.append(int(v) if kind == "int" else float(v))
        if len(set(out)) != len(out):
            raise param_error(arg, "must not repeat a value", values, "remove the duplicates")
        return out

    def _grid(self):
        """``(names, settings, scoring)``; every setting is checked by GreedyLowRank before
        any data is read."""
        lo = get_loss(self.loss)
        check_scalar(self.cv, "cv", kind=numbers.Integral, low=2, fix="Use e.g. cv=5")
        if not isinstance(self.refit, (bool, np.bool_)):
            raise param_error("refit", "must be True or False", self.refit, exc=TypeError)
        if not isinstance(self.select_iter, (bool, np.bool_)):
            raise param_error(
                "select_iter", "must be True or False", self.select_iter, exc=TypeError
            )
        scoring = SCORING[self.loss]
        if self.scoring is not None:
            if self.scoring not in _GREATER:
                raise param_error(
                    "scoring", f"must be one of {tuple(_GREATER)} or None", self.scoring
                )
            scoring = self.scoring
        mine = NONSMOOTH_GRID if not lo.smooth else SMOOTH_GRID
        other = SMOOTH_GRID if not lo.smooth else NONSMOOTH_GRID
        for name in other:
            arg = _GRID_ARGS[name]
            if getattr(self, arg) is not None:
                kind = "nonsmooth (l1, hinge)" if lo.smooth else "smooth"
                raise param_error(
                    arg,
                    f"applies only to {kind} losses, not loss={self.loss!r}",
                    getattr(self, arg),
                    f"Use {arg}=None, or cross-validate " + ", ".join(_GRID_ARGS[n] for n in mine),
                )
        specs = {
            "step_size": ("float", (0.0, False), "step_sizes=[1, 2, 4]"),
            "step_schedule": ("str", None, "step_schedules=['sqrt', 'inverse']"),
            "max_inner": ("int", (1, True), "max_inners=[1, 2]"),
            "alpha": ("float", (0.0, True), "alphas=[0, 0.1]"),
            "greedy_l2": ("float", (0.0, True), "greedy_l2s=[0, 0.01]"),
            "bias_reg": ("float", (0.0, True), "bias_regs=[2, 5, 10]"),
        }
        names, grids = list(mine), []
        for name in names:
            arg = _GRID_ARGS[name]
            v = getattr(self, arg)
            grids.append(list(mine[name]) if v is None else self._values(v, arg, *specs[name]))
        settings = [dict(zip(names, combo, strict=True)) for combo in _product(grids)]
        base = self.base_params()
        for s in settings:  # GreedyLowRank's own checks, before any work
            GreedyLowRank(**base, **s)._check_params()
        return names, settings, scoring

    # ------------------------------------------------------------------ fit
    def fit(self, X, y=None, *, shape=None):
        """Cross-validate the grid on the observed entries of ``X``, then refit.

        Parameters
        ----------
        X : Dataset, store path, coo ArrayHandle, (rows, cols, values) or scipy.sparse
            Observed entries, as for :meth:`GreedyLowRank.fit`.
        y : None
            Ignored.
        shape : (int, int), optional
            Required for array input.

        Returns
        -------
        self
        """
        names, settings, scoring = self._grid()
        _base.check_callback(self.callback)
        K, seed = int(self.cv), self._seed()
        if not isinstance(seed, numbers.Integral):
            raise param_error(
                "random_state",
                "must be an int or None (it seeds the folds)",
                seed,
                exc=TypeError,
            )
        handle = _obs_handle(X)
        if handle is None:
            csr = _pairs_to_csr(X, shape)
            shp = csr.shape
            rows = np.repeat(np.arange(shp[0], dtype=np.int64), np.diff(csr.indptr))
            cols, vals = csr.indices.astype(np.int64), csr.data
            fold = entry_folds(rows, cols, K, seed)
            full = (rows, cols, vals)

            def split(k):
                m = fold == k
                return (rows[~m], cols[~m], vals[~m]), (rows[m], cols[m], vals[m])

        else:
            shp, full = tuple(handle.shape), handle

            def split(k):
                return (_FoldView(handle, K, k, seed, True), _FoldView(handle, K, k, seed, False))

        fit_shape = shp if handle is None else None
        base = self.base_params()
        t0 = time.perf_counter()
        scores = np.empty((K, len(settings)))
        best_iter = np.empty((K, len(settings)), dtype=np.int64)
        n_val = np.empty(K, dtype=np.int64)
        for k in range(K):
            train, val = split(k)
            for i, s in enumerate(settings):
                est = GreedyLowRank(**base, **s, validation=val)
                est.fit(train, shape=fit_shape)
                ev = est.evaluate(val, (scoring,), shape=fit_shape)
                scores[k, i], best_iter[k, i], n_val[k] = ev[scoring], est.best_iter_, ev["n"]
                if self.verbose:
                    logger.info(
                        "fold %d %s: %s %.5f (best step %d)",
                        k,
                        s,
                        scoring,
                        scores[k, i],
                        est.best_iter_,
                    )
        self.cv_time_ = time.perf_counter() - t0
        self._results(names, settings, scores, best_iter, n_val, scoring)
        if self.refit:
            t0 = time.perf_counter()
            self.best_estimator_ = GreedyLowRank(
                **base, **self.best_params_, callback=self.callback
            ).fit(full, shape=fit_shape)
            self.refit_time_ = time.perf_counter() - t0
        return self

    def _results(self, names, settings, scores, best_iter, n_val, scoring):
        K = scores.shape[0]
        mean = scores.mean(axis=0)
        sign = -1.0 if _GREATER[scoring] else 1.0
        res = {"params": [dict(s) for s in settings]}
        for name in names:
            res[f"param_{name}"] = np.array([s[name] for s in settings])
        for k in range(K):
            res[f"split{k}_test_score"] = scores[k]
        res["mean_test_score"] = mean
        res["std_test_score"] = scores.std(axis=0)
        res["rank_test_score"] = rankdata(sign * np.round(mean, 12), method="min").astype(np.int32)
        for k in range(K):
            res[f"split{k}_best_iter"] = best_iter[k]
        res["split_n_val"] = np.asarray(n_val, dtype=np.int64)
        self.cv_results_ = res
        self.scoring_ = scoring
        self.n_splits_ = K
        self._choose()

    def _choose(self):
        res = self.cv_results_
        self.best_index_ = i = int(np.argmin(res["rank_test_score"]))
        self.best_params_ = dict(res["params"][i])
        if self.select_iter:
            it = np.array([res[f"split{k}_best_iter"][i] for k in range(self.n_splits_)])
            self.best_params_["max_iter"] = max(1, int(np.round(np.median(it))))
        self.best_score_ = float(res["mean_test_score"][i])

    # ------------------------------------------------------------------ summary
    def format_cv_table(self):
        """The CV table as aligned text, best first (what ``ooc-lowrank fit glrl-cv`` prints)."""
        check_is_fitted(self, "cv_results_")
        res = self.cv_results_
        order = np.argsort(res["rank_test_score"], kind="stable")
        keys = list(res["params"][0])
        K = self.n_splits_
        head = ["rank", *keys, f"mean {self.scoring_}", "std", "median best step"]
        lines = [head]
        for i in order:
            it = np.median([res[f"split{k}_best_iter"][i] for k in range(K)])
            lines.append(
                [str(res["rank_test_score"][i])]
                + [f"{res['params'][i][key]}" for key in keys]
                + [f"{res['mean_test_score'][i]:.4f}", f"{res['std_test_score'][i]:.4f}", f"{it:g}"]
            )
        return format_table(lines)

    # ------------------------------------------------------------------ delegation
    def _best(self):
        return _base.refitted(
            self, "use refit=True or fit GreedyLowRank(**est.base_params(), **est.best_params_)"
        )

    def predict(self, rows, cols):
        """:meth:`GreedyLowRank.predict` of the refitted model."""
        return self._best().predict(rows, cols)

    def top_k(self, rows, k=10):
        """:meth:`GreedyLowRank.top_k` of the refitted model."""
        return self._best().top_k(rows, k)

    def evaluate(self, X, metrics=None, *, shape=None):
        """:meth:`GreedyLowRank.evaluate` of the refitted model."""
        return self._best().evaluate(X, metrics, shape=shape)

    # ------------------------------------------------------------------ persistence
    def _state(self):
        """``(params, arrays, extra)`` of the fitted model, as :meth:`save` writes them and
        :meth:`_from_saved` reads them back."""
        check_is_fitted(self, "cv_results_")
        params = _base.saved_params(self)
        for arg in _GRID_ARGS.values():
            if params[arg] is not None:
                params[arg] = list(params[arg])
        arrays = {}
        extra = {"scoring": self.scoring_, "n_splits": self.n_splits_, "cv_time": self.cv_time_}
        # param_<name> columns are the grid again (rebuilt on load from params_list); one that
        # holds None (greedy_l2s=None: the loss's own default) is not a numeric array
        _base.search_state(self, arrays, extra, skip=_object_column)
        return params, arrays, extra

    @classmethod
    def _from_saved(cls, params, arrays, extra):
        params = {k: (tuple(v) if isinstance(v, list) else v) for k, v in params.items()}
        est = cls(**params)
        try:
            names, settings, scoring = est._grid()
            K = int(extra["n_splits"])
            res = _base.restore_search(arrays, extra)
            for name in names:
                if f"param_{name}" not in res:
                    res[f"param_{name}"] = np.array([s[name] for s in settings])
            if res["params"] != settings or K != est.cv or extra["scoring"] != scoring:
                raise ModelFileError(
                    "model.json",
                    "extra.params_list",
                    "must be the grid of the saved parameters",
                    res["params"],
                )
            for key in ["mean_test_score", "std_test_score", "rank_test_score"] + [
                f"split{k}_{s}" for k in range(K) for s in ("test_score", "best_iter")
            ]:
                if key not in res or np.shape(res[key]) != (len(settings),):
                    raise ModelFileError(
                        "arrays.npz",
                        f"cv_results/{key}",
                        f"must be an array of {len(settings)} values (one per setting)",
                        None if key not in res else np.shape(res[key]),
                    )
            est.cv_results_, est.scoring_, est.n_splits_ = res, scoring, K
            est.cv_time_ = float(extra["cv_time"])
            est._choose()
            _base.restore_best(est, GreedyLowRank, arrays, extra)
        except (KeyError, TypeError) as e:
            raise ModelFileError("model.json", None, f"is incomplete or malformed ({e})") from None
        return est


def _object_column(key, column):
    return key.startswith("param_") and np.asarray(column).dtype == object


def _product(grids):
    import itertools

    return itertools.product(*grids)
