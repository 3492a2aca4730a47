"""``GIMCCV``: K-fold cross-validated GIMC over gamma x alpha x iteration count, out of core.

All the fits of the grid advance together: every pass over the data is one ``engine``
reduction whose block function (:func:`ooc_lowrank.gimc._cv_blocks.cv_block`) serves a list
of requests, one or a few per fit.  Rows belong to folds by a seeded assignment (a column of
fold ids aligned with the row blocks of ``X``); inside a block, the rows of fold ``k`` are its
validation rows and the others its training rows, so one read of a block serves every fold.

What is shared and what is not (``T = n_gammas x n_alphas x K`` fits):

* **Reads of the data.**  One pass serves all the fits of a batch (all ``T`` unless their
  statistics exceed ``batch_bytes``).  Separate fits read the data ``T`` times as often.
* **Statistics at the initial point.**  The initial ``U`` does not depend on alpha; for
  Fourier features with more than 1000 training rows per fold it does not depend on the fold
  either (same seed, same draw), and then one pass returns ``Phi^T Phi``, ``A^T Phi`` and
  ``||A||^2`` *per fold* for each gamma: the training statistics of fold ``k`` are the total
  minus fold ``k``'s own.  Every alpha is solved from them (alpha enters only the m x m
  solve).  This is all the work of IMC-RFF / IMC-NYS (``learn_features=False``): the whole
  grid costs 2 passes and ``n_gammas`` Gram products of the data.
* **Learned features (GIMC-LFF / LNYS) are not shared across alphas or folds**: the U-step's
  gradient depends on ``W``, hence on alpha and on the fold's rows, so every (gamma, alpha,
  fold) is its own trajectory with its own line search; the arithmetic per trajectory is that
  of a separate fit on the fold's training rows.  What is saved: the reads (above), the
  initial statistics (above), and the choice of the iteration count: the validation rows of
  fold ``k`` are scored with the fit's ``(U, W)`` during the gradient pass that reads them
  anyway, so every iteration count ``0..max_iter`` is scored from one trajectory at no extra
  pass (separate fits would run one fit per iteration count, or one validation pass per
  scoring with ``fit(eval_set=...)``).
* A trajectory that stops early (``tol``, no descent step, zero gradient) keeps its last
  model for the larger iteration counts, which is what a separate fit with that ``max_iter``
  returns.

Each fit of the grid is, up to floating-point summation order, exactly
``GIMC(gamma=..., alpha=..., max_iter=..., random_state=seed).fit(X[train_k], Y[train_k])``
scored on ``X[val_k]`` (tests/test_gimc_cv.py checks this), including its initial point.
"""

from __future__ import annotations

import copy
import logging
import numbers
import time

import numpy as np
import scipy.sparse as sp
from scipy.stats import rankdata
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.validation import check_is_fitted

from ooc_lowrank import _base, engine, metrics
from ooc_lowrank._validation import check_random_state, check_scalar, format_table, param_error
from ooc_lowrank.gimc import _blocks, _cv_blocks, core
from ooc_lowrank.gimc._cv_blocks import req_shapes
from ooc_lowrank.gimc.estimator import GIMC, _is_lazy, _SharedParams, gimc_tags
from ooc_lowrank.gimc.features import median_gamma, sample_rows

logger = logging.getLogger("ooc_lowrank")

__all__ = ["GIMCCV", "kfold_ids"]

#: Default memory for the statistics of one pass (bytes); more fits are split into batches.
BATCH_BYTES = 256 * 2**20


def kfold_ids(n_samples, n_splits, seed):
    """Fold id of every row: a ``numpy.random.default_rng(seed)`` permutation cut into
    ``n_splits`` near-equal parts (``np.array_split``); shape (n_samples,), int16."""
    ids = np.empty(int(n_samples), dtype=np.int16)
    perm = np.random.default_rng(seed).permutation(int(n_samples))
    for j, part in enumerate(np.array_split(perm, int(n_splits))):
        ids[part] = j
    return ids


# ----------------------------------------------------------------------------------------
# one fit of the grid, advanced pass by pass
# ----------------------------------------------------------------------------------------


class _Fit:
    """State of one (gamma, alpha, fold) trajectory; mirrors :func:`core.fit_gimc`."""

    def __init__(self, g, a, k, alpha, U, spec):
        self.g, self.a, self.k, self.alpha = g, a, k, float(alpha)
        self.U, self.spec = U, spec
        self.W = self.f = self.a2 = None
        self.it, self.eta_next, self.grad, self.gnorm2, self.eta0 = 0, None, None, None, None
        self.b, self.etas, self.state = 0, None, None
        self.history = {}  # iteration -> metric sums on the validation rows


class _Batch:
    """Requests of one pass: arrays are deduplicated by identity and indexed in the plan."""

    def __init__(self, dt):
        self.dt, self.plan, self.arrays, self._ids, self.handlers = dt, [], [], {}, []
        self._keep = []  # the planned objects stay alive, so their ids stay unique

    def arr(self, a, cast=True):
        key = id(a)
        if key not in self._ids:
            self._ids[key] = len(self.arrays)
            b = np.ascontiguousarray(a, dtype=self.dt) if cast else a
            self.arrays.append(b)
            self._keep.append(a)
        return self._ids[key]

    def add(self, req, handler):
        self.plan.append(req)
        self.handlers.append(handler)


@_base.params
class GIMCCV(_base.Loadable, ClassifierMixin, BaseEstimator, _SharedParams):
    """GIMC with built-in K-fold cross-validation of gamma, alpha and the iteration count.

    All ``n_gammas x n_alphas x cv`` fits advance together: one pass over the data serves all
    of them, and every iteration count ``0..max_iter`` is scored on the validation rows from
    one trajectory (see the module docstring of :mod:`ooc_lowrank.gimc.cv` for exactly what is
    shared).  The best setting is refitted on all the data (``refit=True``) and the object then
    predicts like that :class:`~ooc_lowrank.GIMC`.

    Parameters
    ----------
    features : {"fourier", "nystrom", "both"}, default="fourier"
    n_features_map : int, default=500
    gamma_scales : sequence of float or None, default=(0.0625, 0.125, 0.25)
        Kernel widths as multiples of the median heuristic (``1 / median ||x_i - x_j||^2`` on
        1000 training rows, after row normalization if ``normalize_rows``).
    gammas : sequence of float or None, default=None
        Absolute kernel widths instead of ``gamma_scales`` (pass ``gamma_scales=None``).
    alphas : sequence of float, default=(0.3, 1.0, 3.0, 10.0)
        Ridge weights on ``W``.
    learn_features : bool, default=True
        GIMC (learned features) or IMC-RFF / IMC-NYS (``False``: the iteration count is 0).
    max_iter : int, default=40
        Largest iteration count of the grid; every count ``0..max_iter`` is scored.
    cv : int or array-like of shape (n_samples,), default=5
        Number of folds (a seeded permutation, :func:`kfold_ids`), or the fold id
        (``0..K-1``) of every row.
    scoring : {"p@1", "p@3", "p@5", ..., "accuracy"}, default="p@1"
        Any single metric of :func:`ooc_lowrank.metrics.parse_metrics`.
    refit : bool, default=True
        Refit the best setting on all the data (``best_estimator_``).
    tol : float, default=0.0
        As in :class:`GIMC`; 0 runs every fit to ``max_iter`` (the count is chosen by CV).
    landmarks, normalize_rows, n_trials, block_rows, cache_bytes, verbose
        As in :class:`GIMC`.
    callback : callable or None, default=None
        ``callback(iteration, elapsed_seconds, objective)`` after the init and every iteration
        of the refit on all the data (``refit=True``), as :class:`GIMC` takes it; the
        cross-validation fits do not call it.
    batch_bytes : int or None, default=None
        Memory for the statistics of one pass (``n_trials (D^2 + L D)`` float64 per learned
        fit, ``D`` the feature dimension); more fits run in successive batches, each with its
        own passes.  ``None``: :data:`BATCH_BYTES` (256 MiB).
    random_state : int, RandomState or None, default=None
        Seeds the folds, the median heuristic's sample and every fit (all fits and the refit
        use the same seed, as ``GIMC(random_state=seed)`` would).

    Attributes
    ----------
    cv_results_ : dict of arrays
        As scikit-learn's searches: ``params``, ``param_gamma_scale`` (with
        ``gamma_scales``), ``param_gamma``, ``param_alpha``, ``param_max_iter``,
        ``split{k}_test_score``, ``mean_test_score``, ``std_test_score``, ``rank_test_score``.
    best_index_, best_params_, best_score_ :
        The setting with the highest mean validation score (first of ties, i.e. the
        smallest gamma, alpha and iteration count).
    best_estimator_ : GIMC
        Refitted on all the data (``refit=True``).
    median_gamma_ : float or None
    n_passes_ : int
        Passes over the data of the cross-validation (the refit's are
        ``best_estimator_.n_passes_``).
    n_batches_ : int
    n_iter_ : int
        U-steps of the refitted model (``best_estimator_.n_iter_``).
    cv_time_, refit_time_ : float
        Seconds.
    """

    gamma_scales: tuple | None = (0.0625, 0.125, 0.25)
    gammas: tuple | None = None
    alphas: tuple = (0.3, 1.0, 3.0, 10.0)
    max_iter: int = 40
    cv: object = 5
    scoring: str = "p@1"
    refit: bool = True
    tol: float = 0.0
    batch_bytes: int | None = None

    # ------------------------------------------------------------------ validation

    def _base(self, seed):
        """A GIMC with the shared parameters (gamma/alpha/max_iter filled per fit; the
        ``callback`` is the search's own)."""
        return GIMC(
            **_base.shared_params(
                self, GIMC, exclude=("callback",), gamma=1.0, alpha=1.0, random_state=seed
            )
        )

    @staticmethod
    def _grid(values, name, example):
        if values is None or isinstance(values, (str, bytes)) or not np.iterable(values):
            raise param_error(
                name,
                "must be a non-empty list of positive numbers",
                values,
                f"e.g. {example}",
                exc=TypeError,
            )
        vals = list(values)
        if not vals:
            raise param_error(name, "must not be empty", values, f"e.g. {example}")
        for v in vals:
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Real):
                raise param_error(
                    name, "must hold only real numbers", values, f"e.g. {example}", exc=TypeError
                )
            if not np.isfinite(v) or v <= 0:
                raise param_error(
                    name,
                    f"must hold only finite numbers > 0 (found {v!r})",
                    values,
                    f"e.g. {example}",
                )
        if len(set(float(v) for v in vals)) != len(vals):
            raise param_error(name, "must not repeat a value", values, "remove the duplicates")
        return [float(v) for v in vals]

    @staticmethod
    def _gamma_grid(search, scales_example, gammas_example):
        """``(scales, None)`` or ``(None, gammas)``: a search's ``gamma_scales`` or ``gammas``
        (exactly one given), checked by :meth:`_grid` (GIMCCV and KernelMaxideCV)."""
        name = type(search).__name__
        if (search.gammas is None) == (search.gamma_scales is None):
            raise param_error(
                "gammas / gamma_scales",
                "exactly one must be given (scales multiply the median heuristic)",
                (search.gammas, search.gamma_scales),
                f"e.g. {name}(gamma_scales={scales_example}) or {name}(gammas={gammas_example}, "
                "gamma_scales=None)",
            )
        if search.gamma_scales is not None:
            example = f"gamma_scales={scales_example}"
            return GIMCCV._grid(search.gamma_scales, "gamma_scales", example), None
        return None, GIMCCV._grid(search.gammas, "gammas", f"gammas={gammas_example}")

    def _validate_grid(self):
        scales, gammas = self._gamma_grid(self, "[0.125, 0.25, 0.5]", "[0.01, 0.1]")
        alphas = self._grid(self.alphas, "alphas", "alphas=[0.3, 1, 3, 10]")
        check_scalar(
            self.max_iter,
            "max_iter",
            kind=numbers.Integral,
            low=0,
            fix="Use the largest iteration count to score, e.g. max_iter=40",
        )
        parsed = metrics.parse_metrics(self.scoring) if isinstance(self.scoring, str) else None
        if parsed is None or len(parsed) != 1:
            raise param_error(
                "scoring",
                "must name exactly one metric",
                self.scoring,
                "e.g. scoring='p@1' (or 'p@3', 'p@5', 'accuracy')",
            )
        if not isinstance(self.cv, numbers.Integral) or isinstance(self.cv, bool):
            if not np.iterable(self.cv) or isinstance(self.cv, str):
                raise param_error(
                    "cv",
                    "must be an int >= 2 or an array of fold ids (one per row)",
                    self.cv,
                    "e.g. cv=5",
                    exc=TypeError,
                )
        else:
            check_scalar(self.cv, "cv", kind=numbers.Integral, low=2, fix="Use e.g. cv=5")
        if not isinstance(self.refit, (bool, np.bool_)):
            raise param_error("refit", "must be True or False", self.refit, exc=TypeError)
        if self.batch_bytes is not None:
            check_scalar(self.batch_bytes, "batch_bytes", kind=numbers.Integral, low=1)
        return scales, gammas, alphas, parsed

    def _fold_ids(self, n, seed):
        if isinstance(self.cv, numbers.Integral):
            if self.cv > n:
                raise param_error(
                    "cv",
                    f"must be at most the number of rows (n_samples={n})",
                    self.cv,
                    "use fewer folds",
                )
            return kfold_ids(n, self.cv, seed), int(self.cv)
        ids = np.asarray(self.cv)
        if ids.ndim != 1 or ids.shape[0] != n or ids.dtype.kind not in "iu":
            raise param_error(
                "cv",
                f"as an array must hold one integer fold id per row ({n} rows)",
                f"array of shape {ids.shape} and dtype {ids.dtype}",
                "e.g. kfold_ids(n, 5, 0)",
            )
        K = int(ids.max()) + 1 if n else 0
        counts = np.bincount(ids, minlength=K) if ids.min() >= 0 else None
        if counts is None or K < 2 or (counts == 0).any():
            raise param_error(
                "cv",
                "fold ids must be 0..K-1 (K >= 2), every fold non-empty",
                f"ids from {ids.min()} to {ids.max()}",
                "renumber the folds 0..K-1",
            )
        return ids.astype(np.int16), K

    # ------------------------------------------------------------------ fit

    def fit(self, X, Y=None):
        """Cross-validate the grid on ``X`` (n_samples, n_features) and labels ``Y``, then
        refit the best setting on all of them.

        Parameters
        ----------
        X, Y : as :meth:`GIMC.fit` (NumPy, scipy.sparse, Dask, store arrays or a Dataset)

        Returns
        -------
        self
        """
        scales, gammas, alphas, parsed = self._validate_grid()
        seed = (
            int(self.random_state)
            if isinstance(self.random_state, numbers.Integral)
            else int(check_random_state(self.random_state).randint(2**31 - 1))
        )
        base = self._base(seed)
        base._validate_params()
        _base.check_callback(self.callback)
        if self.verbose:
            logger.setLevel(min(logger.level or logging.INFO, logging.INFO))
        if _base.is_dataset(X):
            ds = X
            X = ds["X"]
            if Y is None:
                Y = ds["Y"]
        XB, Xmem = base._prepare_X(X, reset=True)
        X_in, Y_in = Xmem, Y  # X as converted at the boundary (a Dask DataFrame once)
        n = XB.shape[0]
        A, n_labels, codes, classes, multilabel = base._prepare_Y(Y, n)
        AB = engine.align(XB, engine.as_blocked(A, name="Y"), names=("X", "Y"))
        fold, K = self._fold_ids(n, seed)
        FB = engine.align(XB, engine.as_blocked(fold.reshape(-1, 1), name="cv"), names=("X", "cv"))
        t0 = time.perf_counter()
        src = Xmem if not _is_lazy(Xmem) else XB
        if scales is not None:
            S0 = sample_rows(src, 1000, np.random.default_rng(seed))
            if self.normalize_rows:
                S0 = _blocks.l2_normalize_rows(S0)
            self.median_gamma_ = median_gamma(S0)
            gammas = [s * self.median_gamma_ for s in scales]
        else:
            self.median_gamma_ = None
        inits = self._initial_points(base, XB, fold, K, gammas, seed)
        XB, AB, FB = engine.maybe_persist(XB, AB, FB, budget=self.cache_bytes)
        n_trials = int(self.n_trials if self.n_trials is not None else core.DEFAULT_N_TRIALS)
        learn = bool(self.learn_features)
        max_iter = int(self.max_iter) if learn else 0
        self._ctx = dict(
            XB=XB,
            AB=AB,
            FB=FB,
            dt=np.dtype(XB.dtype),
            K=K,
            n_labels=n_labels,
            codes=codes,
            parsed=parsed,
            top_k=min(metrics.max_k(parsed), n_labels),
            d=XB.shape[1],
            n_trials=n_trials,
            max_iter=max_iter,
            tol=float(self.tol),
        )
        fits = [
            _Fit(g, a, k, alpha, *inits[g][k])
            for g in range(len(gammas))
            for a, alpha in enumerate(alphas)
            for k in range(K)
        ]
        self.n_passes_ = 0
        batches = self._batches(fits, inits, K, n_labels, n_trials, learn)
        try:
            for i, batch in enumerate(batches):
                logger.info("GIMCCV batch %d/%d: %d fits", i + 1, len(batches), len(batch))
                # the driver's Cholesky solves on one BLAS thread (see core.fit_gimc)
                with engine.one_blas_thread():
                    self._run(batch, inits, learn)
        finally:
            del self._ctx  # the (possibly persisted) data
        self.n_batches_ = len(batches)
        self.cv_time_ = time.perf_counter() - t0
        self._results(fits, gammas, scales, alphas, max_iter, fold, K)
        self.multilabel_, self.n_labels_ = multilabel, n_labels
        if self.refit:
            best = self.best_params_
            est = copy.deepcopy(base).set_params(
                gamma=best["gamma"], alpha=best["alpha"], max_iter=best["max_iter"],
                callback=self.callback,
            )
            t1 = time.perf_counter()
            self.best_estimator_ = est.fit(X_in, Y_in)
            self.refit_time_ = time.perf_counter() - t1
        return self

    def _initial_points(self, base, XB, fold, K, gammas, seed):
        """``inits[g][k] = (U0, spec)``: exactly what ``GIMC(gamma, random_state=seed).fit``
        draws on the in-memory rows of fold ``k``'s training set."""
        need_rows = self.features != "fourier"  # Fourier draws use only the column count
        inits = [[None] * K for _ in gammas]
        for k in range(K):
            train = np.flatnonzero(fold != k)
            rs = check_random_state(seed)
            rng = np.random.default_rng(rs.randint(2**31 - 1))
            idx = np.sort(rng.choice(train.size, size=min(train.size, 1000), replace=False))
            if need_rows:
                S = _take_rows(XB, train[idx])
            else:
                S = np.zeros((idx.size, XB.shape[1]))
            for g, gamma in enumerate(gammas):
                est = copy.copy(base).set_params(gamma=gamma)
                U0, spec = est._init_from_sample(S, copy.deepcopy(rng))
                inits[g][k] = (U0, spec)
        return inits

    def _batches(self, fits, inits, K, n_labels, n_trials, learn):
        budget = BATCH_BYTES if self.batch_bytes is None else int(self.batch_bytes)
        D = inits[0][0][1].n_features
        per = 8 * (D * D + n_labels * D) * (n_trials if learn else 1)
        if not learn:  # statistics per gamma (and fold), shared by the alphas
            n_g = len(inits)
            per_g = per * K
            size = max(1, budget // per_g)
            n_b = -(-n_g // size)
            size = -(-n_g // n_b)
            return [[f for f in fits if s <= f.g < s + size] for s in range(0, n_g, size)]
        size = max(1, budget // per)
        n_b = -(-len(fits) // size)
        size = -(-len(fits) // n_b)
        return [fits[s : s + size] for s in range(0, len(fits), size)]

    def _pass(self, batch):
        c = self._ctx
        shapes = []
        for req in batch.plan:
            shapes += req_shapes(req, c["d"], c["n_labels"], c["K"], len(c["parsed"]))
        args = (tuple(batch.plan), c["n_labels"], c["codes"], c["K"], c["parsed"], c["top_k"])
        res = engine.map_reduce(
            _cv_blocks.cv_block,
            c["XB"],
            c["AB"],
            c["FB"],
            args=args + tuple(batch.arrays),
            shapes=shapes,
        )
        self.n_passes_ += 1
        pos = 0
        for req, handler in zip(batch.plan, batch.handlers, strict=True):
            n_out = len(req_shapes(req, c["d"], c["n_labels"], c["K"], len(c["parsed"])))
            handler(res[pos : pos + n_out])
            pos += n_out

    def _run(self, fits, inits, learn):
        """Advance the fits of one batch to the end, one pass serving all of them."""
        c = self._ctx
        dt, K, n_trials = c["dt"], c["K"], c["n_trials"]
        # ---- initial statistics: per fold from one pass when the folds share U0
        b = _Batch(dt)
        groups = sorted({f.g for f in fits})
        for g in groups:
            U0s = [inits[g][k][0] for k in range(K)]
            mine = [f for f in fits if f.g == g]
            shared = all(np.array_equal(U0s[0], U) for U in U0s[1:]) and all(
                p.M is None for k in range(K) for p in inits[g][k][1].parts
            )
            if shared:
                b.add(("fstats", b.arr(U0s[0]), inits[g][0][1]), _own_stats(mine, K))
            else:
                for k in sorted({f.k for f in mine}):
                    b.add(
                        ("stats", k, b.arr(U0s[k]), None, (0.0,), inits[g][k][1], True),
                        _train_stats([f for f in mine if f.k == k]),
                    )
        self._pass(b)
        for f in fits:
            f.state = "grad" if learn and c["max_iter"] > 0 else "score"
        # ---- the iterations
        while True:
            active = [f for f in fits if f.state is not None]
            if not active:
                break
            b = _Batch(dt)
            scores = {}
            for f in active:
                if f.state == "score":  # fits sharing U and fold share the features
                    scores.setdefault((id(f.U), f.k), []).append(f)
                elif f.state == "grad":
                    L, D = f.W.shape[1], f.W.shape[0]
                    WWt = None if 2 * L < D else f.W @ f.W.T
                    req = (
                        "grad",
                        f.k,
                        b.arr(f.U),
                        f.spec,
                        None if WWt is None else b.arr(WWt),
                        b.arr(f.W.T),
                        b.arr(f.W),
                    )
                    b.add(req, _on_grad(f))
                else:  # line search
                    f.etas = core.trial_steps(f.eta0, f.b, n_trials)
                    req = (
                        "stats",
                        f.k,
                        b.arr(f.U),
                        b.arr(f.grad),
                        tuple(float(e) for e in f.etas),
                        f.spec,
                        False,
                    )
                    b.add(req, _on_trials(f, c))
            for (_, k), group in scores.items():
                req = (
                    "score",
                    k,
                    b.arr(group[0].U),
                    group[0].spec,
                    tuple(b.arr(f.W) for f in group),
                )
                b.add(req, _on_scores(group))
            self._pass(b)

    # ------------------------------------------------------------------ results

    def _results(self, fits, gammas, scales, alphas, max_iter, fold, K):
        n_val = np.bincount(fold.astype(np.int64), minlength=K).astype(np.float64)
        iters = list(range(max_iter + 1))
        by = {(f.g, f.a, f.k): f for f in fits}
        params, split = [], [[] for _ in range(K)]
        for g, gamma in enumerate(gammas):
            for a, alpha in enumerate(alphas):
                for it in iters:
                    p = {"gamma": float(gamma), "alpha": float(alpha), "max_iter": int(it)}
                    if scales is not None:
                        p = {"gamma_scale": float(scales[g])} | p
                    params.append(p)
                    for k in range(K):
                        h = by[(g, a, k)].history
                        last = max(i for i in h if i <= it)
                        split[k].append(float(h[last][0]) / n_val[k])
        split = np.asarray(split)
        mean = split.mean(axis=0)
        res = {"params": params}
        for key in params[0]:
            res[f"param_{key}"] = np.array([p[key] for p in params])
        for k in range(K):
            res[f"split{k}_test_score"] = split[k]
        res["mean_test_score"] = mean
        res["std_test_score"] = split.std(axis=0)
        res["rank_test_score"] = rankdata(-np.round(mean, 12), method="min").astype(np.int32)
        self.cv_results_ = res
        self.best_index_ = int(np.argmin(res["rank_test_score"]))
        self.best_params_ = dict(params[self.best_index_])
        self.best_score_ = float(mean[self.best_index_])
        self.n_splits_ = K

    # ------------------------------------------------------------------ summary

    def cv_table(self):
        """One row per (gamma, alpha) at its best iteration count, best first: dicts with the
        parameters, ``mean_test_score``, ``std_test_score`` and ``rank`` (of the row)."""
        check_is_fitted(self, "cv_results_")
        res = self.cv_results_
        best = {}
        for i, p in enumerate(res["params"]):
            key = (p["gamma"], p["alpha"])
            if key not in best or res["mean_test_score"][i] > res["mean_test_score"][best[key]]:
                best[key] = i
        order = sorted(best.values(), key=lambda i: (-res["mean_test_score"][i], i))
        return [
            dict(
                res["params"][i],
                mean_test_score=float(res["mean_test_score"][i]),
                std_test_score=float(res["std_test_score"][i]),
                rank=r + 1,
            )
            for r, i in enumerate(order)
        ]

    def format_cv_table(self):
        """:meth:`cv_table` as aligned text (what ``ooc-lowrank fit ... --cv K`` prints)."""
        rows = self.cv_table()
        keys = [k for k in rows[0] if k not in ("mean_test_score", "std_test_score", "rank")]
        head = ["rank", *keys, f"mean {self.scoring}", "std"]
        lines = [head]
        for r in rows:
            lines.append(
                [str(r["rank"]), *(f"{r[k]:.6g}" for k in keys)]
                + [f"{r['mean_test_score']:.4f}", f"{r['std_test_score']:.4f}"]
            )
        return format_table(lines)

    def __sklearn_tags__(self):
        return gimc_tags(super().__sklearn_tags__())  # what GIMC accepts, the search accepts

    # ------------------------------------------------------------------ delegation

    def _best(self):
        return _base.refitted(self, "refit with GIMCCV(refit=True) or fit GIMC(**best_params_)")

    classes_ = property(lambda self: self._best().classes_)
    n_features_in_ = property(lambda self: self._best().n_features_in_)
    n_iter_ = property(lambda self: self._best().n_iter_)  # U-steps of the refit

    def predict(self, X):
        """:meth:`GIMC.predict` of the refitted model."""
        return self._best().predict(X)

    def predict_topk(self, X, k=5):
        """:meth:`GIMC.predict_topk` of the refitted model."""
        return self._best().predict_topk(X, k)

    def decision_function(self, X):
        """:meth:`GIMC.decision_function` of the refitted model."""
        return self._best().decision_function(X)

    def evaluate(self, dataset, metrics_=None, *, Y=None):
        """:meth:`GIMC.evaluate` of the refitted model."""
        return self._best().evaluate(dataset, metrics_, Y=Y)

    def predict_to_store(self, dataset, out_url, top_k=5, *, overwrite=False):
        """:meth:`GIMC.predict_to_store` of the refitted model."""
        return self._best().predict_to_store(dataset, out_url, top_k, overwrite=overwrite)

    def score(self, X, y, sample_weight=None):
        """:meth:`GIMC.score` of the refitted model."""
        return self._best().score(X, y, sample_weight=sample_weight)

    # ------------------------------------------------------------------ persistence

    def _state(self):
        """``(params, arrays, extra)`` of the fitted model, as :meth:`save` writes them and
        :meth:`_from_saved` reads them back."""
        check_is_fitted(self, "cv_results_")
        params = _base.saved_params(self)
        arrays = {}
        if not isinstance(self.cv, numbers.Integral):
            arrays["cv_fold_ids"] = np.asarray(self.cv)
            params["cv"] = "array"
        for key in ("gamma_scales", "gammas", "alphas"):
            if params[key] is not None:
                params[key] = [float(v) for v in params[key]]
        extra = {
            "best_index": self.best_index_,
            "median_gamma": self.median_gamma_,
            "n_passes": self.n_passes_,
            "n_batches": self.n_batches_,
            "n_splits": self.n_splits_,
            "cv_time": self.cv_time_,
            "multilabel": self.multilabel_,
            "n_labels": self.n_labels_,
        }
        _base.search_state(self, arrays, extra)
        return params, arrays, extra

    @classmethod
    def _from_saved(cls, params, arrays, extra):
        params = dict(params)
        if params.get("cv") == "array":
            params["cv"] = arrays["cv_fold_ids"]
        est = cls(**params)
        est.cv_results_ = res = _base.restore_search(arrays, extra)
        est.best_index_ = int(extra["best_index"])
        est.best_params_ = dict(res["params"][est.best_index_])
        est.best_score_ = float(res["mean_test_score"][est.best_index_])
        est.median_gamma_ = extra["median_gamma"]
        est.n_passes_ = int(extra["n_passes"])
        est.n_batches_ = int(extra["n_batches"])
        est.n_splits_ = int(extra["n_splits"])
        est.cv_time_ = float(extra["cv_time"])
        est.multilabel_, est.n_labels_ = bool(extra["multilabel"]), int(extra["n_labels"])
        _base.restore_best(est, GIMC, arrays, extra)
        return est


# ----------------------------------------------------------------------------------------
# result handlers (one per request; they advance the fits like core.fit_gimc does)
# ----------------------------------------------------------------------------------------


def _take_rows(XB, rows):
    """Rows ``rows`` (sorted) of a blocked input, in memory (CSR or ndarray)."""
    if XB.in_memory:
        src = XB.source
        return sp.csr_matrix(src)[rows] if sp.issparse(src) else np.asarray(src)[rows]
    (S,) = engine.compute(XB.dask[rows])
    return sp.csr_matrix(S) if sp.issparse(S) else np.asarray(S)


def _start(f, S_PP, S_AP, a2):
    f.a2 = a2
    f.W = core.w_step(S_PP, S_AP, f.alpha)
    f.f = core.objective(f.W, S_PP, S_AP, a2, f.alpha)


def _own_stats(fits, K):
    """Handler of an ``fstats`` request: training statistics = total - the fold's own."""

    def handle(res):
        own = [
            (
                _blocks.symmetrize_lower(res[3 * j]),
                np.asarray(res[3 * j + 1]),
                float(res[3 * j + 2]),
            )
            for j in range(K)
        ]
        tot_pp = sum(o[0] for o in own)
        tot_ap = sum(o[1] for o in own)
        tot_a2 = sum(o[2] for o in own)
        for f in fits:
            pp, ap, a2 = own[f.k]
            _start(f, tot_pp - pp, tot_ap - ap, tot_a2 - a2)

    return handle


def _train_stats(fits):
    def handle(res):
        S_PP, S_AP = core._unpack_stats(res, 1)[0]
        for f in fits:
            _start(f, S_PP, S_AP, float(res[-1]))

    return handle


def _on_scores(fits):
    def handle(res):
        for f, sums in zip(fits, res, strict=True):
            f.history[f.it] = np.array(sums)  # a copy: a view would pin the pass result
            f.state = None

    return handle


def _on_grad(f):
    def handle(res):
        f.history[f.it] = np.array(res[2])  # a copy: a view would pin the pass result
        g = _blocks.finalize_grad(res[0], res[1], f.U, f.spec)
        gnorm2 = float(np.sum(g * g))
        if not np.isfinite(gnorm2) or gnorm2 == 0.0:
            f.state = None  # converged at a scored state
            return
        f.eta0 = core.first_trial(f.U, gnorm2, f.eta_next, f.f)
        f.grad, f.gnorm2, f.b, f.state = g, gnorm2, 0, "ls"

    return handle


def _on_trials(f, c):
    def handle(res):
        for eta, (spp, sap) in zip(f.etas, core._unpack_stats(res, len(f.etas)), strict=True):
            W1, f_new = core.reduced_objective(spp, sap, f.a2, f.alpha)
            if f_new <= f.f - core.C1 * eta * f.gnorm2:
                f.U = f.U - eta * f.grad
                f.eta_next = core.next_trial(eta, f.f, f_new, f.gnorm2)
                f.W = W1
                f.it += 1
                stop = f.f - f_new <= c["tol"] * max(abs(f.f), 1e-300)
                f.f = f_new
                f.state = "score" if stop or f.it >= c["max_iter"] else "grad"
                f.grad = None
                return
        f.b += len(f.etas)
        bound = core.rejection_bound(f.etas[-1], f.gnorm2) <= c["tol"] * max(abs(f.f), 1e-300)
        if f.b >= core.MAX_TRIALS or bound:  # no (useful) descent step: the state is final
            f.state = None

    return handle
