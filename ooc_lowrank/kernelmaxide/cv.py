"""Model selection for KernelMaxide and Maxide on the observed training labels only.

:class:`KernelMaxideCV` (grid ``gamma`` x ``lam``) and :class:`MaxideCV` (grid
``n_components`` x ``lam``) do what the paper's protocol asks (SPEC 4.6: parameters by
cross-validation on the *observed* training labels): a random ``validation_fraction`` of the
labelled rows (all their observed labels, ``holdout="rows"``, the default) or of the observed
entries (``holdout="entries"``) is held out, every setting is fitted on the rest, and scored by
the ranking loss over the held-out (positive, negative) pairs of each row
(:meth:`KernelMaxide.observed_ranking_loss`; ties are errors; the default) or by the squared
error at the held-out entries (:meth:`KernelMaxide.observed_squared_error`); ``n_splits`` such hold-outs
(seeds ``random_state + s``) are averaged.  The best setting (lowest mean, first of ties) is
refitted on all observed labels.  Each fit is exactly ``KernelMaxide(**base, **setting)``, but
the settings that differ only in ``lam`` share one setup per hold-out (feature map, cached
``F``, Gram, span root: about 45 % of a KernelMaxide-n fit's CPU on Arts; ``_fit_lams``);
``tests/test_kernelmaxide.py`` checks the models against separate fits and the choice on a
problem with a clearly best ``lam``.
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

from ooc_lowrank import _base, engine
from ooc_lowrank._validation import check_random_state, check_scalar, format_table, param_error
from ooc_lowrank.gimc.cv import GIMCCV
from ooc_lowrank.gimc.features import median_gamma, sample_rows
from ooc_lowrank.kernelmaxide.estimator import (
    _SAMPLE,
    KernelMaxide,
    Maxide,
    _check_label_dtype,
    _is_lazy,
    _SharedParams,
    fit_inputs,
    no_negative_error,
)
from ooc_lowrank.kernelmaxide.masking import check_observed_labels

logger = logging.getLogger("ooc_lowrank")

__all__ = ["KernelMaxideCV", "MaxideCV", "split_observed"]


def split_observed(Y, fraction, random_state=None, by="entries"):
    """``(Y_fit, Y_val)``: the observed entries of ``Y`` (CSR, +1 / -1 stored) split at random.

    ``by="entries"``: each observed entry is held out with probability ``fraction``.
    ``by="rows"``: each row with an observed label is held out whole (all its observed
    entries) with probability ``fraction``; the held-out rows keep no label in ``Y_fit``, as
    the test rows of the transductive protocol.
    """
    if by not in ("entries", "rows"):
        raise param_error("by", 'must be "entries" or "rows"', by, 'e.g. by="rows"')
    Y = sp.coo_matrix(check_observed_labels(Y, name="Y"))
    rng = check_random_state(random_state)
    if by == "entries":
        hold = rng.random_sample(Y.nnz) < fraction
    else:
        hold = (rng.random_sample(Y.shape[0]) < fraction)[Y.row]

    def part(m):
        return sp.csr_matrix((Y.data[m], (Y.row[m], Y.col[m])), shape=Y.shape)

    return part(~hold), part(hold)


#: validation scores (lower is better) -> the estimator method computing them on held-out labels
_SCORERS = {"squared_error": "observed_squared_error", "ranking_loss": "observed_ranking_loss"}


def _labels_in_memory(Y):
    """Observed labels as CSR in memory (a store array is read once: ``nnz`` entries)."""
    if _is_lazy(Y):
        (Y,) = engine.compute(engine.as_blocked(Y, name="Y").dask)
    else:
        _check_label_dtype(Y)
    Y = check_observed_labels(Y if sp.issparse(Y) else np.asarray(Y), name="Y")
    if Y.nnz and not np.any(Y.data == -1.0):
        raise no_negative_error("Y")
    return Y


def _setup_groups(grid):
    """Indices of the grid's settings grouped by everything but ``lam`` (first-seen order):
    the settings of a group share a fit's setup."""
    groups = {}
    for i, s in enumerate(grid):
        groups.setdefault(tuple((k, v) for k, v in s.items() if k != "lam"), []).append(i)
    return list(groups.values())


def _fmt(v):
    return "all" if v is None else f"{v:.6g}" if isinstance(v, float) else str(v)


@_base.params
class _ObservedSearch(BaseEstimator, _SharedParams):
    """Shared hold-out search; subclasses define ``_estimator``, ``_base`` and ``_settings``."""

    _estimator = None

    validation_fraction: float = 0.25
    holdout: str = "rows"
    scoring: str = "ranking_loss"
    n_splits: int = 3
    refit: bool = True

    def _base(self, seed):
        """The estimator parameters shared by every fit of the grid (the search logs and calls
        back on its own: ``verbose`` and ``callback`` stay with it; the refit gets the
        ``callback``)."""
        return _base.shared_params(
            self, self._estimator, exclude=("callback", "verbose"), random_state=seed
        )

    def _check_common(self):
        _base.check_callback(self.callback)
        check_scalar(
            self.validation_fraction,
            "validation_fraction",
            low=0.0,
            high=1.0,
            low_inclusive=False,
            high_inclusive=False,
            fix="Hold out a fraction of the observed labels, e.g. validation_fraction=0.25",
        )
        if self.holdout not in ("entries", "rows"):
            raise param_error(
                "holdout",
                'must be "entries" (random observed labels) or "rows" (whole rows\' labels)',
                self.holdout,
                'e.g. holdout="rows"',
            )
        if self.scoring not in _SCORERS:
            raise param_error(
                "scoring",
                f"must be one of {sorted(_SCORERS)}",
                self.scoring,
                'e.g. scoring="squared_error"',
            )
        check_scalar(self.n_splits, "n_splits", kind=numbers.Integral, low=1, fix="e.g. n_splits=3")
        if not isinstance(self.refit, (bool, np.bool_)):
            raise param_error("refit", "must be True or False", self.refit, exc=TypeError)
        seed = 0 if self.random_state is None else self.random_state
        if not isinstance(seed, numbers.Integral) or isinstance(seed, (bool, np.bool_)):
            raise param_error(
                "random_state", "must be an int or None (it seeds the hold-outs)", seed, exc=TypeError
            )
        top = 2**32 - int(self.n_splits)  # the hold-outs use the seeds random_state + s
        if not 0 <= int(seed) <= top:
            raise param_error(
                "random_state",
                f"must be in [0, 2**32 - n_splits] = [0, {top}] (hold-out s uses the seed "
                "random_state + s)",
                seed,
                "e.g. random_state=0",
            )
        return int(seed)

    def fit(self, X, Y=None):
        """Select the setting on held-out observed labels of ``Y``, then refit on all of them.

        Parameters
        ----------
        X, Y : as for :meth:`KernelMaxide.fit` (a store Dataset with ``Y=None`` uses ``X`` and
            ``Y_obs``).  The observed labels are held in memory (``nnz`` entries); ``X`` is
            read through the estimator (block by block for store / Dask input).

        Returns
        -------
        self
        """
        seed = self._check_common()
        grid = self._settings(X, None, validate_only=True)  # bad grids fail before any work
        base = self._base(seed)
        for s in grid:  # the estimator's own checks (gamma_scales stand in for gammas)
            self._estimator(**base, **s)._validate_params()
        X, Y = fit_inputs(X, Y)
        Y = _labels_in_memory(Y)
        grid = self._settings(X, seed)
        t0 = time.perf_counter()
        scores = np.empty((int(self.n_splits), len(grid)))
        for k in range(int(self.n_splits)):
            Yfit, Yval = split_observed(
                Y, float(self.validation_fraction), seed + k, by=self.holdout
            )
            if Yval.nnz == 0 or Yfit.nnz == 0:
                raise ValueError(
                    f"validation_fraction={self.validation_fraction} leaves "
                    f"{'no held-out' if Yval.nnz == 0 else 'no training'} observed label "
                    f"(Y has {Y.nnz} observed entries); observe more labels or change it"
                )
            if not np.any(Yfit.data == -1.0):
                # a fit without any observed negative is refused (every score would be
                # positive): say which hold-out took them, not what the fit would say
                raise ValueError(
                    f"hold-out {k} (validation_fraction={self.validation_fraction}, "
                    f"holdout={self.holdout!r}, seed {seed + k}) holds out every observed "
                    f"negative (-1) of Y ({int(np.sum(Y.data == -1.0))} in all), so its fit would "
                    "have none; observe more negatives, lower validation_fraction or use "
                    'holdout="entries"'
                )
            for idx in _setup_groups(grid):
                # one setup (feature map, cached F, Gram, span root) per (split, gamma / k),
                # one APG per lam: the same models as separate fits
                first = {key: v for key, v in grid[idx[0]].items() if key != "alpha"}
                ests = self._estimator(**base, **first, alpha=grid[idx[0]]["alpha"])._fit_lams(
                    X, Yfit, [grid[i]["alpha"] for i in idx]
                )
                for i, est in zip(idx, ests):
                    scores[k, i] = getattr(est, _SCORERS[self.scoring])(X, Yval)
                    if self.verbose:
                        logger.info(
                            "hold-out %d %s: %s %.5f", k, grid[i], self.scoring, scores[k, i]
                        )
        self.cv_time_ = time.perf_counter() - t0
        mean = np.nanmean(scores, axis=0) if np.isfinite(scores).any() else scores.mean(axis=0)
        res = {"params": [dict(s) for s in grid]}
        for name in grid[0]:
            res[f"param_{name}"] = np.array([s[name] for s in grid])
        for k in range(scores.shape[0]):
            res[f"split{k}_test_score"] = scores[k]
        res["mean_test_score"] = mean
        res["std_test_score"] = scores.std(axis=0)
        ranked = np.where(np.isfinite(mean), np.round(mean, 12), np.inf)
        res["rank_test_score"] = rankdata(ranked, method="min").astype(np.int32)
        self.cv_results_ = res
        self.best_index_ = i = int(np.argmin(res["rank_test_score"]))
        self.best_params_ = dict(grid[i])
        self.best_score_ = float(mean[i])
        self.n_splits_ = int(self.n_splits)
        if self.refit:
            t0 = time.perf_counter()
            refit = self._estimator(**base, **self.best_params_, callback=self.callback)
            self.best_estimator_ = refit.fit(X, Y)
            self.refit_time_ = time.perf_counter() - t0
        return self

    def format_cv_table(self):
        """The hold-out table as aligned text, best first (``ooc-lowrank fit ...-cv`` prints it)."""
        check_is_fitted(self, "cv_results_")
        res = self.cv_results_
        keys = list(res["params"][0])
        lines = [["rank", *keys, f"mean {self.scoring.replace('_', ' ')}", "std"]]
        for i in np.argsort(res["rank_test_score"], kind="stable"):
            lines.append(
                [str(res["rank_test_score"][i])]
                + [_fmt(res["params"][i][key]) for key in keys]
                + [f"{res['mean_test_score'][i]:.4f}", f"{res['std_test_score'][i]:.4f}"]
            )
        return format_table(lines)

    # -- delegation to the refitted model ---------------------------------------------------
    def _best(self):
        return _base.refitted(self, "use refit=True or fit the estimator with best_params_")

    def decision_function(self, X):
        return self._best().decision_function(X)

    def predict_topk(self, X, k=5):
        return self._best().predict_topk(X, k)

    def evaluate(self, dataset, metrics_=None, *, Y=None):
        return self._best().evaluate(dataset, metrics_, Y=Y)

    def observed_ranking_loss(self, X, Y):
        return self._best().observed_ranking_loss(X, Y)

    def save(self, path, *, overwrite=False):
        """Save the refitted model (``ooc_lowrank.load(path)`` returns the refitted
        :class:`KernelMaxide` / :class:`Maxide`; the table is in ``cv_results_``).

        An existing model at ``path`` is replaced only with ``overwrite=True``; anything else
        there (a store, a folder, a file) is never replaced.
        """
        self._best().save(path, overwrite=overwrite)


@_base.params
class KernelMaxideCV(_ObservedSearch):
    """:class:`KernelMaxide` with ``gamma`` and ``alpha`` chosen on held-out observed labels.

    Parameters
    ----------
    n_features_map : int or None, default=1000
        As in :class:`KernelMaxide` (``None``: KernelMaxide-f).
    n_components : "auto", int or None, default="auto"
        As in :class:`KernelMaxide` (``"auto"``: the orthonormal basis of 100 kernel
        directions with landmarks; ``None``: SPEC KM-6).
    gamma_scales : sequence of float or None, default=(1.0, 2.0, 4.0)
        RBF widths as multiples of the median heuristic (``1 / median ||x_i - x_j||^2`` on 1000
        rows; in the yahoo protocol runs the hold-out chose 1, 2 and 4 times it,
        docs/kernelmaxide.md section 8).
    gammas : sequence of float or None, default=None
        Absolute widths instead of ``gamma_scales`` (pass ``gamma_scales=None``).
    alphas : sequence of float, default=(0.5, 2.0, 8.0, 32.0)
        Trace-norm weights.
    validation_fraction : float, default=0.25
        Share of the observed labels (``holdout="entries"``) or of the labelled rows
        (``holdout="rows"``) held out per split.
    scoring : {"ranking_loss", "squared_error"}, default="ranking_loss"
        Validation score on the held-out labels, lower is better: the ranking loss over each
        held-out row's (+, -) pairs (the protocol's test metric), or the squared error of the
        scores at the held-out entries (the model's own loss).
    holdout : {"rows", "entries"}, default="rows"
        What is held out: whole rows' observed labels (those rows are unlabelled in the fit, as
        test rows are), or random observed labels (the held-out rows keep their other labels);
        see :func:`split_observed`.  The defaults were chosen on 24 cells of the yahoo protocol
        (3 sets x omega 10-40 % x repetitions 0 and 1; ``benchmarks/kernelmaxide_selection.py``,
        docs/kernelmaxide.md section 8): against the best setting of the grid on the test rows,
        rows + ranking loss chose settings 0.0032 worse on average (one hold-out each;
        KernelMaxide-n; Maxide 0.0027), entries + ranking loss 0.0058 (Maxide 0.0068), entries
        + squared error 0.0038 (Maxide 0.0090).  A row holds few observed labels (about 3 of 26 on Arts at 10 %), so a
        quarter of the entries rarely leaves a (+, -) pair inside a row.
    n_splits : int, default=3
        Random hold-outs (seeds ``random_state + s``) averaged; each costs one fit per setting
        (one setup per ``gamma``).  On the 24 yahoo cells
        (``benchmarks/kernelmaxide_selection_splits.py``, docs/kernelmaxide.md section 6b) 3
        hold-outs chose settings 0.0019 worse than the best of the grid on test on average (max
        0.0147; Arts 0.0033), 1 hold-out 0.0032 (max 0.0252; Arts 0.0075); Maxide 0.0019
        against 0.0027.  A finer gamma grid (scales 1, 1.5, 2, 3, 4) with 3 hold-outs was no
        better (0.0022) at 61 fits instead of 37, a one-standard-error rule worse (0.0028).
    refit : bool, default=True
    max_iter, tol, n_trials, cache_bytes, block_rows
        As in :class:`KernelMaxide`.
    random_state : int or None, default=None
        Seeds the hold-outs (None: 0) and every fit's landmarks.
    verbose : bool, default=False
        Log each fit's score at INFO level.
    callback : callable or None, default=None
        ``callback(iteration, elapsed_seconds, objective)`` after each APG iteration of the refit
        on all observed labels (``refit=True``), as :class:`KernelMaxide` takes it; the
        hold-out fits do not call it.

    Attributes
    ----------
    cv_results_ : dict
        ``params``, ``param_<name>``, ``split{k}_test_score``, ``mean_test_score``,
        ``std_test_score``, ``rank_test_score`` (1 = lowest ranking loss).
    best_params_, best_score_, best_index_, best_estimator_, gamma_median_, cv_time_, refit_time_

    Notes
    -----
    **scikit-learn's estimator checks** (``parametrize_with_checks``) assume ``fit(X, y)`` on
    samples and targets; this estimator's input is different. ``fit(X, Y)`` takes observed labels as
    :class:`~ooc_lowrank.kernelmaxide.KernelMaxide` (stored ``+1`` / ``-1``, missing entries not
    stored); the checks' targets are refused on purpose, so the checks that fit do not apply. The
    API checks (clone, repr, ``get_params`` / ``set_params``, ``__init__`` storing only its
    parameters, tags) do apply and run in ``tests/test_sklearn_api.py``.
    """

    _estimator = KernelMaxide

    n_features_map: int = 1000
    n_components: int | str | None = "auto"
    gamma_scales: tuple | None = (1.0, 2.0, 4.0)
    gammas: tuple | None = None
    alphas: tuple = (0.5, 2.0, 8.0, 32.0)

    def _settings(self, X, seed, validate_only=False):
        scales, gammas = GIMCCV._gamma_grid(self, "[1, 2, 4]", "[0.5, 1]")
        lams = GIMCCV._grid(self.alphas, "alphas", "alphas=[0.5, 2, 8, 32]")
        if gammas is None:
            if validate_only:
                gammas = scales
            else:
                src = engine.as_blocked(X, name="X")
                src = src.source if src.in_memory else X
                self.gamma_median_ = median_gamma(
                    sample_rows(src, _SAMPLE, np.random.default_rng(seed))
                )
                gammas = [self.gamma_median_ * s for s in scales]
        return [{"gamma": g, "alpha": lam} for g in gammas for lam in lams]


@_base.params
class MaxideCV(_ObservedSearch):
    """:class:`Maxide` with ``n_components`` and ``alpha`` chosen on held-out observed labels.

    Parameters
    ----------
    n_components_grid : sequence of int or None, default=(100, None)
        Numbers of left singular vectors ``k`` (``None`` in the list: the numerical rank).  The
        default holds :class:`Maxide`'s own default ``k = 100`` and every direction, so the
        search never excludes the fixed default (twice the fits of one ``k``).
    alphas : sequence of float, default=(0.25, 1.0, 4.0, 16.0)
    validation_fraction, holdout, scoring, n_splits, refit, max_iter, tol, n_trials, cache_bytes,
    block_rows, random_state, verbose, callback
        As in :class:`KernelMaxideCV`.

    Attributes
    ----------
    As :class:`KernelMaxideCV` (without ``gamma_median_``).

    Notes
    -----
    **scikit-learn's estimator checks** (``parametrize_with_checks``) assume ``fit(X, y)`` on
    samples and targets; this estimator's input is different. ``fit(X, Y)`` takes observed labels as
    :class:`~ooc_lowrank.kernelmaxide.Maxide` (stored ``+1`` / ``-1``, missing entries not stored);
    the checks' targets are refused on purpose, so the checks that fit do not apply. The API checks
    (clone, repr, ``get_params`` / ``set_params``, ``__init__`` storing only its parameters, tags)
    do apply and run in ``tests/test_sklearn_api.py``.
    """

    _estimator = Maxide

    n_components_grid: tuple = (100, None)
    alphas: tuple = (0.25, 1.0, 4.0, 16.0)


    def _settings(self, X, seed, validate_only=False):
        lams = GIMCCV._grid(self.alphas, "alphas", "alphas=[0.25, 1, 4, 16]")
        ks = self.n_components_grid
        if isinstance(ks, (str, bytes)) or not np.iterable(ks) or not len(list(ks)):
            raise param_error(
                "n_components_grid",
                "must be a non-empty list of positive ints or None",
                ks,
                "e.g. n_components_grid=[50, 100, None]",
                exc=TypeError,
            )
        ks = list(ks)
        for k in ks:
            if k is not None and (
                isinstance(k, (bool, np.bool_)) or not isinstance(k, numbers.Integral) or k < 1
            ):
                raise param_error(
                    "n_components_grid",
                    f"must hold only ints >= 1 or None (found {k!r})",
                    ks,
                    "e.g. n_components_grid=[50, 100, None]",
                )
        if len(set(ks)) != len(ks):
            raise param_error("n_components_grid", "must not repeat a value", ks, "remove the duplicates")
        return [{"n_components": None if k is None else int(k), "alpha": lam}
                for k in ks for lam in lams]  # fmt: skip
