"""Multi-view machines with the scikit-learn contract: a regressor and a classifier (two or
more classes; one-vs-rest models fitted together for more than two).

Inputs (``X`` of ``fit``, ``predict``, ``decision_function`` (classifier), ``evaluate``):

* a store (path, URL or :class:`~ooc_lowrank.storage.Dataset`) holding the views ``X0 .. X{m-1}``
  (dense or csr, the names the storage format reserves) and the target ``y`` ``(n, 1)``;
* a list or tuple of ``m`` views (NumPy, scipy.sparse, Dask arrays or store arrays), each
  ``(n_samples, I_p)``;
* one matrix ``(n_samples, sum_p I_p)`` whose columns are the views side by side, split by
  ``view_sizes`` (this is the form scikit-learn's meta-estimators such as ``OneVsRestClassifier``
  and ``cross_val_score`` pass around; with ``view_sizes=None`` the matrix is one view, and the
  model is then a linear model).

Everything streams through :mod:`ooc_lowrank.engine` in row blocks; only the factors
(``k (I + m)`` floats) live in memory.
"""

from __future__ import annotations

import functools
import numbers
import os
import warnings

import numpy as np
import scipy.sparse as sp
import scipy.special
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.exceptions import DataConversionWarning
from sklearn.utils.multiclass import type_of_target

from ooc_lowrank import _base, _checkpoint, _estimate, engine
from ooc_lowrank._inputs import as_input
from ooc_lowrank._persist import (
    ModelFileError,
    ModelReader,
    build_checked,
    check_params,
    check_value,
)
from ooc_lowrank._validation import (
    check_random_state,
    check_scalar,
    param_error,
)
from ooc_lowrank.mvm import _blocks
from ooc_lowrank.mvm.core import REG_CODES, _Layout, _Monitor, fit_lbfgs, fit_sgd

SOLVERS = ("auto", "lbfgs", "sgd")

_NOT_SAVED = ("callback",)


def _is_arraylike_2d(a):
    return (
        sp.issparse(a)
        or (hasattr(a, "ndim") and getattr(a, "ndim", 0) == 2)
        or isinstance(a, engine.Blocked)
        or (hasattr(a, "read") and hasattr(a, "kind") and hasattr(a, "block_rows"))
    )


def _store_views(ds):
    names = sorted((n for n in ds.names if n[:1] == "X" and n[1:].isdigit()), key=lambda n: int(n[1:]))
    if not names:
        raise ValueError(
            f"store {getattr(ds, 'url', '')!r} has no views: multi-view data needs arrays named "
            f"X0, X1, ...; it has {list(ds.names)}. Write one array per view (e.g. with "
            "ooc_lowrank.io.multiview.convert_movielens_views)"
        )
    if [int(n[1:]) for n in names] != list(range(len(names))):
        raise ValueError(f"store views must be named X0..X{len(names) - 1} without gaps; got {names}")
    return [ds[n] for n in names]


def _check_view_shape(v, name, allow_empty=False):
    """Refuse a view that is not 2-D, has no rows (unless ``allow_empty``: prediction) or has no
    columns, before any block is read."""
    shape = getattr(v, "shape", None)
    if shape is None:
        return
    if len(shape) != 2:
        raise ValueError(
            f"{name} must be 2-D (n_samples, n_features of the view); got shape {tuple(shape)}. "
            "Reshape your data: x.reshape(-1, 1) for a single feature, x.reshape(1, -1) for a "
            "single sample"
        )
    if shape[0] == 0 and not allow_empty:
        raise ValueError(
            f"{name} must have at least one row (sample): found 0 sample(s) (shape="
            f"{tuple(shape)}) while a minimum of 1 is required. Pass a non-empty data set"
        )
    if shape[1] == 0:
        raise ValueError(
            f"{name} must have at least one column (feature): found 0 feature(s) (shape="
            f"{tuple(shape)}) while a minimum of 1 is required. Drop the empty view"
        )


def _numeric_view(v, name):
    """An in-memory view of object dtype as float64 (an entry that is not a number raises
    Python's own TypeError); complex views refused."""
    if isinstance(v, np.ndarray) or (sp.issparse(v)):
        if v.dtype.kind == "c":
            raise ValueError(f"{name}: Complex data not supported (dtype {v.dtype}); pass real "
                             "numbers")
        if v.dtype.kind == "O":
            return v.astype(np.float64)
    return v


@_base.params  # views: scipy.sparse native
class _BaseMVM(_base.SparseInput, _base.Loadable, BaseEstimator, _base.RunControl):
    _task = "regression"
    _losses = ()

    n_components: int = 10
    view_sizes: object = None
    loss: str | None = None
    reg: str = "l2"
    alpha: float = 1e-3
    init_std: float = 0.1
    solver: str = "auto"
    max_iter: int = 200
    n_epochs: int = 10
    learning_rate: float = 0.05
    tol: float = 1e-6
    n_iter_no_change: int | None = None
    block_rows: int | None = None

    # ------------------------------------------------------------------ validation
    def _resolved_loss(self):
        loss = self._losses[0] if self.loss is None else self.loss
        if loss not in self._losses:
            raise param_error(
                "loss", f"must be one of {self._losses} for {type(self).__name__}", self.loss
            )
        return loss

    def _check_params(self):
        check_scalar(self.n_components, "n_components", kind=numbers.Integral, low=1,
                     fix="Use n_components >= 1 (the CP rank k)")
        if self.reg not in REG_CODES:
            raise param_error("reg", f"must be one of {tuple(REG_CODES)}", self.reg)
        for name in ("alpha", "init_std", "learning_rate", "tol"):
            v = getattr(self, name)
            check_scalar(v, name, low=0.0)
            if not np.isfinite(v):
                raise param_error(name, "must be finite", v)
        if not self.init_std > 0:
            raise param_error("init_std", "must be > 0 (zero factors are a stationary point, "
                              "SPEC 3.4)", self.init_std)
        if self.init_std > 1.0:
            raise param_error(
                "init_std", "must be <= 1 (the model is a degree-m product of the factors: larger "
                "starting factors overflow the first predictions)", self.init_std,
                "Keep init_std small (default 0.1) and scale the features instead",
            )
        if not self.learning_rate > 0:
            raise param_error("learning_rate", "must be > 0", self.learning_rate)
        if self.solver not in SOLVERS:
            raise param_error("solver", f"must be one of {SOLVERS}", self.solver)
        for name in ("max_iter", "n_epochs"):
            check_scalar(getattr(self, name), name, kind=numbers.Integral, low=1)
        if self.n_iter_no_change is not None:
            check_scalar(self.n_iter_no_change, "n_iter_no_change", kind=numbers.Integral, low=1)
        self._check_block_rows()
        _base.check_callback(self.callback)
        if self.view_sizes is not None:
            vs = self.view_sizes
            if isinstance(vs, numbers.Integral) or not all(
                isinstance(v, numbers.Integral) and not isinstance(v, bool) and v >= 1 for v in vs
            ):
                raise param_error("view_sizes", "must be a sequence of positive integers (the "
                                  "width of each view, in column order)", vs)
        return self._resolved_loss()

    def _check_block_rows(self):
        if self.block_rows is not None:
            check_scalar(self.block_rows, "block_rows", kind=numbers.Integral, low=1,
                         fix="Use an integer number of rows per block, or None for the default")

    # ------------------------------------------------------------------ inputs
    def _views(self, X, *, name="X", expected=None):
        """(list of Blocked views aligned to the first, view sizes, dataset or None)."""
        self._check_block_rows()
        ds = None
        if isinstance(X, (str, os.PathLike)):
            from ooc_lowrank.storage import open_dataset

            X = open_dataset(str(X))
        if _base.is_dataset(X):
            ds = X
            raw = _store_views(ds)
        elif isinstance(X, (list, tuple)) and X and any(_is_arraylike_2d(a) for a in X):
            raw = list(X)  # a list of views (a view that is not 2-D is refused below)
        else:
            raw = [X]
        names = [f"{name}[{p}]" if len(raw) > 1 else name for p in range(len(raw))]
        raw = [  # DataFrames (pandas, Dask), pydata sparse, float16: as every estimator does
            _numeric_view(as_input(v, vname), vname) for v, vname in zip(raw, names, strict=True)
        ]
        for v, vname in zip(raw, names, strict=True):
            _check_view_shape(v, vname, allow_empty=expected is not None)
        views = [
            engine.as_blocked(v, block_rows=self.block_rows, name=vname)
            for v, vname in zip(raw, names, strict=True)
        ]
        for p, v in enumerate(views[1:], 1):
            views[p] = engine.align(views[0], v, names=(f"{name}[0]", f"{name}[{p}]"))
        widths = [int(v.shape[1]) for v in views]
        if len(views) == 1:
            sizes = tuple(self.view_sizes) if self.view_sizes is not None else tuple(widths)
            if sum(sizes) != widths[0]:
                raise param_error(
                    "view_sizes", f"must add up to the number of columns of {name} "
                    f"({widths[0]})", self.view_sizes,
                    "Give the width of each view, in column order",
                )
        else:
            sizes = tuple(widths)
            if self.view_sizes is not None and tuple(self.view_sizes) != sizes:
                raise param_error("view_sizes", f"must match the widths of the views {sizes}",
                                  self.view_sizes)
        if expected is not None and sum(sizes) != sum(expected):
            raise ValueError(
                f"{name} has {sum(sizes)} features, but {type(self).__name__} is expecting "
                f"{sum(expected)} features as input (views of widths {list(sizes)}; fitted on "
                f"{list(expected)}): pass the same views, in the same order and with the same "
                "columns as in training"
            )
        if expected is not None and tuple(sizes) != tuple(expected):
            raise ValueError(
                f"{name} has views of widths {list(sizes)}, but the model was fitted on views "
                f"of widths {list(expected)}: pass the same views, in the same order and with "
                "the same columns as in training"
            )
        return views, sizes, ds

    def _target(self, y, ds, ref, name="y"):
        if y is None:
            if ds is None or "y" not in ds.names:
                raise ValueError(
                    f"{type(self).__name__} requires y to be passed, but the target y is None: "
                    f"pass {name}, or a store with an array 'y'"
                )
            y = ds["y"]
        if isinstance(y, np.ndarray) and y.ndim == 2 and y.shape[1] == 1:
            warnings.warn(
                f"A column-vector {name} was passed when a 1d array was expected. Please change "
                "the shape of y to (n_samples,), for example using ravel().",
                DataConversionWarning, stacklevel=3,
            )
            y = y.ravel()
        if not _is_arraylike_2d(y) and not isinstance(y, engine.Blocked):
            y = np.asarray(y)
            if y.ndim != 1 and not (y.ndim == 2 and y.shape[1] == 1):
                raise ValueError(f"{name} must be 1-D (n_samples,); got shape {y.shape}")
            y = self._encode_memory(y.reshape(-1), name)[:, None]
        yb = engine.as_blocked(y, name=name, allow_nd1=True)
        if yb.shape[1] != 1:
            raise ValueError(f"{name} must have one column; got shape {yb.shape}")
        return engine.align(ref, yb, names=("X", name))

    def _encode_memory(self, y, name):
        if y.dtype.kind == "O":  # numbers held as objects
            try:
                y = y.astype(np.float64)
            except (TypeError, ValueError):
                pass
        if y.dtype.kind not in "fiub":
            raise TypeError(f"{name} must be numeric for {type(self).__name__}; got {y.dtype}")
        y = y.astype(np.float64)
        if not np.isfinite(y).all():
            raise ValueError(f"{name} contains NaN or inf; remove or impute those rows")
        return y

    # ------------------------------------------------------------------ fit
    def fit(self, X, y=None, *, eval_set=None, checkpoint=None, checkpoint_every=5):
        """Fit the factors.

        Parameters
        ----------
        X : store, list of views or matrix
            Views ``(n_samples, I_p)`` (see the module docstring).
        y : array-like of shape (n_samples,), optional
            Target; default: the store's ``y``.
        eval_set : (X_val, y_val) or store, optional
            Validation data: its mean loss after each iteration (L-BFGS) or epoch (SGD) is
            recorded in ``validation_path_``; the best iterate is kept and the fit stops after
            ``n_iter_no_change`` iterations without improvement.
        checkpoint : str, os.PathLike or None
            Directory (or fsspec URL) for the fit's small state (JSON + npz, written
            atomically): SGD saves the factors, AdaGrad's accumulators, the intercept, the
            random generator's state and the validation record, and a resumed SGD fit ends
            with the same model as an uninterrupted one, bitwise.  L-BFGS saves its iterate;
            a resumed L-BFGS fit restarts L-BFGS from it (its curvature history is lost), so
            it reaches a model of the same quality but not the same bits.  A checkpoint of
            another fit (parameters or data) is an error.  Kept after the fit: calling ``fit``
            again returns at once, or continues when ``n_epochs`` / ``max_iter`` was raised.
        checkpoint_every : int, default=5
            Save after every ``checkpoint_every``-th epoch (SGD) or iteration (L-BFGS), and
            when the fit stops.

        Returns
        -------
        self
        """
        loss = self._check_params()
        rng = check_random_state(self.random_state)
        _checkpoint.check_checkpoint_args(checkpoint, checkpoint_every)
        views, sizes, ds = self._views(X)
        yb = self._target(y, ds, views[0])
        # refuse a pass that cannot fit a worker (locally: the memory available)
        _estimate.check_fits(_estimate.mvm_estimate(self, views, yb))
        n, offset, loss_scale = self._target_summary(yb)
        ckpt = _checkpoint.open_checkpoint(
            checkpoint, checkpoint_every, self, **{f"X{p}": v for p, v in enumerate(views)}, y=yb
        )
        if ckpt is not None:  # more epochs extend a fit (as max_iter does)
            ckpt.fingerprint["params"].pop("n_epochs", None)
        layout = _Layout(sizes)
        K = self._n_models()
        theta0 = rng.normal(0.0, self.init_std,
                            size=(layout.n_feat + layout.n_views, K * self.n_components))
        solver = self._resolved_solver(views)
        if solver == "lbfgs":
            # L-BFGS: bias factors start at 1 (plus the noise), so the model starts close to a
            # constant plus one linear model per view, whose gradients do not vanish (with every
            # factor of order init_std, the gradient of an m-view model is of order
            # init_std^(m-1)); the constant (n_factors, the product of the bias factors) is
            # taken off the intercept.  Measured on mfeat (6 views, one-vs-rest): 0.936-0.956
            # test accuracy after 50 iterations against 0.893.  Not for SGD: on MovieLens u1
            # it raised SGD's test RMSE from 0.93 to 0.955 (docs/mvm.md)
            theta0[layout.n_feat:] += 1.0
            offset = offset - float(self.n_components)
        score = None
        if eval_set is not None:
            score = self._validation_scorer(eval_set, sizes, layout, loss)
        patience = self.n_iter_no_change
        if patience is None:
            patience = 5 if solver == "sgd" else 30
        monitor = _Monitor(score, patience, self.callback, self.verbose)
        common = dict(loss=loss, task=self._task, reg=self.reg, reg_weight=float(self.alpha),
                      n=n, monitor=monitor, checkpoint=ckpt, n_models=K)
        b0 = np.full(K, offset)
        if solver == "lbfgs":
            theta, b0, n_iter, n_passes = fit_lbfgs(
                views, yb, theta0, b0, layout, max_iter=self.max_iter, tol=float(self.tol),
                **common,
            )
        else:
            theta, b0, n_iter, n_passes = fit_sgd(
                views, yb, theta0, b0, layout, n_epochs=self.n_epochs,
                learning_rate=float(self.learning_rate), rng=rng, loss_scale=loss_scale,
                **common,
            )
        if monitor.best_theta is not None:
            (theta, b0), self.best_iter_ = monitor.best_theta, monitor.best_iter
        else:
            self.best_iter_ = n_iter
        self.solver_ = solver
        self._set_model(np.asarray(theta), np.asarray(b0, float), K)
        self.view_sizes_ = tuple(int(s) for s in sizes)
        self.n_views_ = layout.n_views
        self.n_features_in_ = layout.n_feat
        self.loss_ = loss
        self.n_iter_ = int(n_iter)
        self.n_passes_ = int(n_passes) + (1 if score is None else 1 + n_iter)
        self.objective_path_ = np.asarray(monitor.path, float)
        self.validation_path_ = np.asarray(monitor.val_path, float)
        return self

    def estimate(self, X, y=None, *, client=None):
        """Passes, per-worker memory and store size of ``fit(X, y)``, before fitting.

        Reads no data block, except that on a store SGD times its window sweep on a slice of
        the store (at most 64 MiB, about 1 %; ``sgd_calibration``: rows, seconds, updates per
        second, its own cost) and L-BFGS (local scheduler) its pass's block function
        (``lbfgs_calibration``: CPU seconds per row), which the time model
        (``ooc-lowrank estimate``) uses.  Returns
        a dict: ``passes_per_iteration`` (SGD: one per epoch; L-BFGS: one per evaluation,
        ``max`` 20 in a line search), ``max_passes``,
        ``store_bytes``, ``task_bytes`` (one block task: its blocks, the joined CSR and the
        gradient), ``worker_bytes``, ``client_bytes`` (SGD runs in the calling process),
        ``worker_memory_limit``, ``memory_cap`` and ``fits`` (locally against the available
        memory), ``suggest`` when it does not fit.  See :mod:`ooc_lowrank._estimate`.
        """
        self._check_params()
        views, _, ds = self._views(X)
        yb = _BaseMVM._target(self, y, ds, views[0])  # sizes only: no class encoding yet
        return _estimate.mvm_estimate(self, views, yb, client=client, calibrate=True)

    def _target_summary(self, yb):
        """One pass: row count, target offset and loss scale; classification labels checked."""
        if self._task == "classification" and len(getattr(self, "_pending_classes", ())) > 2:
            self.classes_ = self._pending_classes  # in memory, encoded as class indices
            del self._pending_classes
            return int(yb.shape[0]), 0.0, 1.0
        if self._task == "classification":
            counts = engine.map_reduce(_blocks.label_counts, yb)
            neg, zero, pos, other, bad = (int(c) for c in counts)
            if bad or other or (neg and zero):
                raise ValueError(
                    "y must hold two classes coded {-1, +1} or {0, 1} in a store (in memory, any "
                    f"two values); got {neg} x -1, {zero} x 0, {pos} x +1, {other} other and "
                    f"{bad} non-finite values"
                )
            if pos == 0 or neg + zero == 0:
                raise ValueError("y must contain both classes; only one class is present")
            if not hasattr(self, "_pending_classes"):
                self.classes_ = np.array([0, 1]) if zero else np.array([-1, 1])
            else:
                self.classes_ = self._pending_classes
                del self._pending_classes
            return neg + zero + pos, 0.0, 1.0
        cnt, s, ss, bad = engine.map_reduce(_blocks.target_stats, yb)
        if bad:
            raise ValueError(f"y contains {int(bad)} NaN or inf values; remove those rows")
        if cnt == 0:
            raise ValueError("no training rows: X has 0 samples")
        # loss_scale: the mean loss of predicting 0 (plus 1), the yardstick of SGD's divergence
        # check; classification: 1 (a logistic or hinge loss at yhat = 0 is below 1)
        offset = float(s / cnt) if self.fit_intercept_enabled() else 0.0
        return int(cnt), offset, float(ss / cnt) + 1.0

    def fit_intercept_enabled(self):
        return True

    def _n_models(self):
        """Models fitted jointly: one, or one per class (one-vs-rest) for 3+ classes."""
        return 1

    def _resolved_solver(self, views):
        """``solver``, with "auto" resolved: L-BFGS (on the dense path) when every view is
        dense, SGD when a view is sparse (measurements: ``docs/mvm.md``,
        ``benchmarks/results/mvm_auto.json``)."""
        if self.solver != "auto":
            return self.solver
        return "lbfgs" if all(v.kind == "dense" for v in views) else "sgd"

    def _set_model(self, theta, b0, K):
        """``coef_`` and ``intercept_`` from the stacked factors ``(I + m, K k)`` and the
        intercepts ``(K,)``: ``(I + m, k)`` and a float for one model, ``(K, I + m, k)`` and
        ``(K,)`` for one-vs-rest models."""
        if K == 1:
            self.coef_ = np.ascontiguousarray(theta)
            self.intercept_ = float(b0[0])
        else:
            k = theta.shape[1] // K
            self.coef_ = np.ascontiguousarray(theta.reshape(theta.shape[0], K, k).transpose(1, 0, 2))
            self.intercept_ = np.asarray(b0, float).copy()

    def _stacked(self):
        """``(theta (I + m, K k), b0 (K,))``: the fitted model in the block functions' layout."""
        if self.coef_.ndim == 2:
            return self.coef_, np.array([self.intercept_], float)
        K, rows, k = self.coef_.shape
        return (np.ascontiguousarray(self.coef_.transpose(1, 0, 2).reshape(rows, K * k)),
                np.asarray(self.intercept_, float))

    def _validation_scorer(self, eval_set, sizes, layout, loss):
        if _base.is_dataset(eval_set) or isinstance(eval_set, (str, os.PathLike)):
            Xv, yv = eval_set, None
        else:
            try:
                Xv, yv = eval_set
            except (TypeError, ValueError):
                raise param_error("eval_set", "must be (X_val, y_val) or a store", type(eval_set).__name__) from None
        vviews, _, vds = self._views(Xv, name="eval_set X", expected=sizes)
        vy = self._target(yv, vds, vviews[0], name="eval_set y")
        nv = vviews[0].shape[0]
        from ooc_lowrank.mvm.core import LOSS_CODES

        fn = functools.partial(_blocks.loss_grad, **layout.kw(len(vviews)), loss=LOSS_CODES[loss],
                               task=self._task, n_models=self._n_models())

        def score(state):
            theta, b0 = state
            total, _, _ = engine.map_reduce(fn, *vviews, vy, args=(theta, np.atleast_1d(b0)))
            return float(total.sum()) / max(nv, 1)

        return score

    # ------------------------------------------------------------------ predict
    def _check_fitted(self):
        if not hasattr(self, "coef_"):
            from sklearn.exceptions import NotFittedError

            raise NotFittedError(f"this {type(self).__name__} is not fitted yet; call fit first")
        rows = sum(self.view_sizes_) + len(self.view_sizes_)
        k = self.coef_.shape[-1] if self.coef_.ndim in (2, 3) else -1
        if self.coef_.shape[-2:] != (rows, k) or (self.coef_.ndim == 3) != (
            np.ndim(self.intercept_) == 1
        ):
            raise ValueError(
                f"coef_ has shape {self.coef_.shape}, inconsistent with view_sizes_ "
                f"{self.view_sizes_}: the model was altered; refit or reload it"
            )

    def _decision_lazy(self, X):
        self._check_fitted()
        views, _, _ = self._views(X, expected=self.view_sizes_)
        layout = _Layout(self.view_sizes_)
        theta, b0 = self._stacked()
        fn = functools.partial(_blocks.decision, **layout.kw(len(views)))
        return engine.map_rows(fn, *views, args=(theta, b0), n_cols=b0.shape[0])

    def _decision(self, X):
        """Model output ``yhat`` (MVM-9, plus the intercept), shape ``(n_samples,)``; a
        one-vs-rest classifier: one column per class, ``(n_samples, n_classes)``.

        Dask array in (or a store): a lazy Dask array out; NumPy/scipy in: NumPy out."""
        lazy = self._decision_lazy(X)
        one = lazy.shape[1] == 1
        if _returns_lazy(X):
            return lazy[:, 0] if one else lazy
        (out,) = engine.compute(lazy)
        out = np.asarray(out)
        return out[:, 0] if one else out

    def evaluate(self, X, metrics=None, y=None):
        """Streaming metrics over row blocks; returns ``{metric: value}``.

        Regressor: ``rmse``, ``mae``; classifier: ``accuracy`` and ``auc`` (AUC sorts the
        ``(n_samples,)`` scores, O(n) memory; everything else is O(1) per block).  A
        classifier's ``y`` holds labels of ``classes_`` (encoded as in ``fit``; in memory also
        the signed coding -1 / +1 for ``classes_[0]`` / ``classes_[1]``); another label is an
        error."""
        self._check_fitted()
        theta, b0 = self._stacked()
        K = b0.shape[0]
        if metrics is None:
            metrics = self._default_metrics if K == 1 else ("accuracy",)
        if isinstance(metrics, str):
            metrics = [m.strip() for m in metrics.split(",") if m.strip()]
        allowed = ("rmse", "mae", "accuracy", "auc")
        bad = [m for m in metrics if m not in allowed]
        if bad:
            raise param_error("metrics", f"must be among {allowed}", bad)
        if K > 1 and set(metrics) - {"accuracy"}:
            raise param_error("metrics", "must be 'accuracy' for a classifier of more than two "
                              "classes", list(metrics))
        views, _, ds = self._views(X, expected=self.view_sizes_)
        yb = self._target(y, ds, views[0])
        layout = _Layout(self.view_sizes_)
        fn = functools.partial(_blocks.metric_sums, **layout.kw(len(views)), task=self._task,
                               n_models=K)
        cnt, ae, se, correct = engine.map_reduce(fn, *views, yb, args=(theta, b0))
        cnt = max(cnt, 1.0)
        out = {}
        for m in metrics:
            if m == "rmse":
                out[m] = float(np.sqrt(se / cnt))
            elif m == "mae":
                out[m] = float(ae / cnt)
            elif m == "accuracy":
                out[m] = float(correct / cnt)
            else:
                from sklearn.metrics import roc_auc_score

                f = self._decision(views if len(views) > 1 else views[0])
                (yy,) = engine.compute(yb.dask)
                yy = _blocks.signed_target(yy, "classification" if self._task == "classification" else "regression")
                out[m] = float(roc_auc_score(yy > 0, np.asarray(f)))
        return out

    # ------------------------------------------------------------------ persistence
    @property
    def factors_(self):
        """Per-view factor matrices ``(I_p + 1, n_components)``, bias factor last (SPEC 3.1); a
        one-vs-rest classifier: ``(n_classes, I_p + 1, n_components)``."""
        self._check_fitted()
        out, start, nf = [], 0, sum(self.view_sizes_)
        C = self.coef_
        for p, w in enumerate(self.view_sizes_):
            out.append(np.concatenate([C[..., start:start + w, :], C[..., nf + p:nf + p + 1, :]],
                                      axis=-2))
            start += w
        return out

    def _state(self):
        """``(params, arrays, extra)`` of the fitted model, as :meth:`save` writes them and
        :meth:`_from_saved` reads them back."""
        self._check_fitted()
        params = _base.saved_params(self, _NOT_SAVED)
        if params.get("view_sizes") is not None:
            params["view_sizes"] = [int(v) for v in params["view_sizes"]]
        arrays = {
            "coef": self.coef_,
            "objective_path": self.objective_path_,
            "validation_path": self.validation_path_,
        }
        extra = {
            "view_sizes": list(self.view_sizes_),
            "intercept": np.asarray(self.intercept_).tolist(),
            "loss": self.loss_,
            "solver": self.solver_,
            "n_iter": self.n_iter_,
            "best_iter": self.best_iter_,
            "n_passes": self.n_passes_,
        }
        if hasattr(self, "classes_"):
            extra["classes"] = [v.item() if hasattr(v, "item") else v for v in self.classes_]
        return params, arrays, extra

    @classmethod
    def _from_saved(cls, params, arrays, extra):
        """The estimator of a loaded model: hyperparameters pass the fit-time checks, and every
        JSON value and array is checked (type, shape against ``view_sizes`` and ``n_components``,
        finiteness, two classes) before the estimator is built."""
        params = check_params(cls, params, ignore_unknown=True)
        if isinstance(params.get("view_sizes"), list):
            params["view_sizes"] = tuple(params["view_sizes"])
        est = build_checked(cls, params, cls._check_params)
        r = ModelReader(arrays, extra)
        sizes = r.value("view_sizes", "list")
        if not sizes:
            raise ModelFileError("model.json", "extra.view_sizes", "must not be empty", "[]")
        for p, w in enumerate(sizes):
            check_value(w, f"extra.view_sizes[{p}]", "int", low=1)
        if est.view_sizes is not None and tuple(est.view_sizes) != tuple(sizes):
            raise ModelFileError("model.json", "params.view_sizes",
                                 f"must equal extra.view_sizes {sizes}", list(est.view_sizes))
        rows = sum(sizes) + len(sizes)
        K = 1
        if cls._task == "classification":
            est.classes_ = _saved_classes(r.value("classes", "list"))
            K = 1 if len(est.classes_) == 2 else len(est.classes_)
        shape, meaning = (rows, est.n_components), "sum(view_sizes) + n_views x n_components"
        if K > 1:
            shape, meaning = (K,) + shape, "n_classes x " + meaning
        coef = r.array("coef", shape, meaning=meaning)
        est.objective_path_ = np.asarray(r.array("objective_path", (None,)), float)
        est.validation_path_ = np.asarray(r.array("validation_path", (None,), finite=False), float)
        if K == 1:
            est.intercept_ = float(r.value("intercept", "float"))
        else:
            b = r.value("intercept", "list")
            if len(b) != K:
                raise ModelFileError("model.json", "extra.intercept",
                                     f"must hold one number per class ({K})", b)
            est.intercept_ = np.array([check_value(v, f"extra.intercept[{c}]", "float")
                                       for c, v in enumerate(b)], float)
        est.loss_ = r.value("loss", "str", choices=cls._losses)
        est.solver_ = r.value("solver", "str", choices=("lbfgs", "sgd"),  # older files: none
                              default="sgd" if est.solver == "auto" else est.solver)
        for key in ("n_iter", "best_iter", "n_passes"):
            setattr(est, key + "_", r.value(key, "int", low=0))
        r.finish()
        est.view_sizes_ = tuple(sizes)
        est.coef_ = np.ascontiguousarray(coef, dtype=np.float64)
        est.n_views_ = len(sizes)
        est.n_features_in_ = sum(sizes)
        return est


def _saved_classes(classes):
    """``extra.classes`` of a saved classifier: two or more distinct labels of one JSON type,
    in increasing order."""
    key = "extra.classes"
    if len(classes) < 2:
        raise ModelFileError("model.json", key, "must hold at least two class labels (exactly "
                             "two for a binary model)", classes)
    kinds = {"bool" if isinstance(c, bool) else "str" if isinstance(c, str) else
             "number" if isinstance(c, (int, float)) else "other" for c in classes}
    if len(kinds) != 1 or "other" in kinds:
        raise ModelFileError("model.json", key, "must hold numbers, strings or booleans, all "
                             "of one kind", classes)
    out = np.asarray(classes)
    if out.dtype.kind == "f" and not np.isfinite(out).all():
        raise ModelFileError("model.json", key, "must hold finite labels", classes)
    if not np.all(out[:-1] < out[1:]):
        raise ModelFileError("model.json", key, "must hold distinct labels in increasing "
                             "order (for two classes: the positive class last)", classes)
    return out




def _encode_labels(y, classes, name, *, lazy=False):
    """Labels as +1 (``classes[1]``) / -1 (``classes[0]``); any other label is refused.

    In memory, a ``y`` none of whose labels is a class may be the signed coding {-1, +1}
    (``-1`` for ``classes[0]``).  A lazy ``y`` (store or Dask, encoded block by block) may use
    either store coding, {-1, +1} or {0, 1}, when ``classes`` is one of them."""
    y = np.asarray(y.toarray() if sp.issparse(y) else y)
    if len(classes) > 2:  # one-vs-rest models: the class index
        idx = np.clip(np.searchsorted(classes, y), 0, len(classes) - 1)
        unknown = classes[idx] != y
        if unknown.any():
            raise ValueError(
                f"{name} holds labels that are not classes of the model "
                f"{classes[:10].tolist()}; got {np.unique(y[unknown])[:5].tolist()}. Pass "
                "labels of the classes the model was fitted on (classes_)"
            )
        return idx.astype(np.float64)
    pos, neg = y == classes[1], y == classes[0]
    unknown = ~(pos | neg)
    if unknown.any():
        signed = y.dtype.kind in "iuf" and np.isin(y, (-1, 1)).all()
        if lazy and classes.tolist() in ([0, 1], [-1, 1]):
            if y.dtype.kind in "iuf" and np.isin(y, (-1, 0, 1)).all():
                return np.where(y == 1, 1.0, -1.0)
        elif not lazy and signed and not (pos | neg).any():
            return np.where(y == 1, 1.0, -1.0)
        raise ValueError(
            f"{name} holds labels that are not classes of the model {classes.tolist()}; "
            f"got {np.unique(y[unknown])[:5].tolist()}. Pass labels of the two classes the "
            "model was fitted on (classes_)"
        )
    return np.where(pos, 1.0, -1.0)


def _returns_lazy(X):
    import dask.array as da

    if isinstance(X, (list, tuple)):
        return any(isinstance(a, da.Array) or _base.is_dataset(a) for a in X) or any(
            hasattr(a, "read") and hasattr(a, "block_rows") for a in X
        )
    return isinstance(X, (da.Array, str, os.PathLike)) or _base.is_dataset(X) or (
        hasattr(X, "read") and hasattr(X, "block_rows")
    )




@_base.params
class MultiViewMachineRegressor(RegressorMixin, _BaseMVM):
    """Multi-view machine regressor (Cao et al. 2016; SPEC section 3).

    ``yhat(x) = intercept + sum_f prod_p (Theta^(p)T [x^(p); 1])_f``: every interaction across
    views up to order m (one feature per view in each term), CP-factorized with rank
    ``n_components``.  Trained on the mean square loss ``(yhat - y)^2`` plus ``alpha * Omega``.

    Parameters
    ----------
    n_components : int, default 10
        CP rank ``k``.
    view_sizes : sequence of int, optional
        Widths of the views when ``X`` is one matrix with the views side by side.
    loss : str, optional
        Regressor: "square" (``(yhat - y)^2``, the only choice).  Classifier: "logistic"
        (default) or "hinge".
    reg : {"l2", "l1", "none"}, default "l2"
        ``l2``: ``sum theta^2`` (MVM-14); ``l1``: smoothed ``sum sqrt(theta^2 + 1e-8)`` (MVM-15).
    alpha : float, default 1e-3
        Weight of the regulariser against the *mean* loss.  Default chosen on 10% validation
        splits of MovieLens u1/u2.base (k = 10, grid {1e-4, 1e-3, 3e-3}): best for L-BFGS
        (validation RMSE 0.922 / 0.942 against 0.938 / 0.956 at 3e-3) and within 0.001 of
        SGD's best (3e-3).
    init_std : float, default 0.1
        Factors start as ``N(0, init_std^2)`` (zero is a stationary point); in ``(0, 1]``.
    solver : {"auto", "lbfgs", "sgd"}, default "auto"
        ``lbfgs``: batch L-BFGS (our own, one per model in lockstep), one pass per
        evaluation, identical results on any cluster and chunking (to rounding); dense
        views take a BLAS path (two products per view and pass).  ``sgd``: AdaGrad SGD, SPEC
        Algorithm 1, one pass per epoch, sequential in the calling process, visiting windows of 65,536 rows in a seeded order, so its model too
        does not depend on the chunking (to rounding).  ``auto``: L-BFGS when every view is
        dense, SGD when a view is sparse (measured: ``docs/mvm.md``); ``solver_`` says which.
    max_iter : int, default 200
        L-BFGS iterations.
    n_epochs : int, default 10
        SGD epochs.  On MovieLens the validation RMSE bottoms out after 6-9 epochs and then
        rises (overfitting); with an ``eval_set`` the best epoch is kept automatically.
    learning_rate : float, default 0.05
        AdaGrad base step of the SGD solver.
    tol : float, default 1e-6
        L-BFGS stops a model when its largest gradient entry is <= ``tol`` or its objective
        fell by <= ``1e-3 tol`` (relative) in one iteration.
    n_iter_no_change : int, optional
        Early stopping patience when ``fit`` has an ``eval_set``: default 5 epochs (SGD) or 30
        iterations (L-BFGS, whose first iterations move the validation score up and down).
    block_rows : int, optional
        Rows per block (default: the store's, or about 16 MB of input per block).
    random_state : int, Generator or None
        Seeds the initial factors and SGD's shuffles.
    verbose : bool, default False
        Log each iteration at INFO level on the ``"ooc_lowrank"`` logger.
    callback : callable, optional
        ``callback(iteration, elapsed_seconds, objective)``.

    Attributes
    ----------
    coef_ : ndarray of shape (sum(view_sizes) + n_views, n_components)
        Stacked factors: feature rows of every view, then one bias row per view.
    factors_ : list of ndarray of shape (I_p + 1, n_components)
    intercept_ : float
        A learned constant added to the model (not regularised), started at the target's mean
        (regressor) or 0 (classifier).  The CP model has its own constant (the product of the
        bias factors), but a free intercept keeps a rank-k target representable at rank k
        whatever its offset.
    solver_ : str
        The solver used ("lbfgs" or "sgd"; ``solver="auto"`` resolved).
    view_sizes_, n_views_, n_features_in_, n_iter_, best_iter_, n_passes_,
    objective_path_, validation_path_
    """

    _task = "regression"
    _losses = ("square",)
    _default_metrics = ("rmse", "mae")

    def predict(self, X):
        """Predicted target (MVM-9 plus the intercept), shape ``(n_samples,)``.

        Dask array in (or a store): a lazy Dask array out; NumPy/scipy in: NumPy out."""
        return self._decision(X)


#: the regressor's Parameters section, shared by the classifier (one source, no drift)
_PARAMS_DOC = MultiViewMachineRegressor.__doc__[
    MultiViewMachineRegressor.__doc__.index("    Parameters\n") : MultiViewMachineRegressor.__doc__.index(
        "    Attributes\n"
    )
]


_REG_WEIGHT_DOC = (
    _PARAMS_DOC[_PARAMS_DOC.index("    alpha : "):_PARAMS_DOC.index("    init_std : ")],
    """    alpha : float, default 1e-2
        Weight of the regulariser against the *mean* loss.  Classifier default chosen with
        ``tol`` by 3-fold validation on the training half of mfeat-handwritten (one-vs-rest,
        10 classes, L-BFGS; grid ``benchmarks/mvm_lbfgs_defaults.py``, results
        ``benchmarks/results/mvm_lbfgs_defaults.json``): validation accuracy 0.969 in 90
        iterations against 0.964 in 200 at the regressor's (1e-3, 1e-6).
""",
)
_TOL_DOC = (
    _PARAMS_DOC[_PARAMS_DOC.index("    tol : "):_PARAMS_DOC.index("    n_iter_no_change : ")],
    """    tol : float, default 1e-3
        L-BFGS stops a model when its largest gradient entry is <= ``tol`` or its objective
        fell by <= ``1e-3 tol`` (relative) in one iteration (chosen with ``alpha``).
""",
)


@_base.params
class MultiViewMachineClassifier(ClassifierMixin, _BaseMVM):
    __doc__ = (
        """Multi-view machine classifier (logistic or hinge loss; SPEC section 3).

    In memory, ``y`` may hold any class values (``classes_``, sorted).  Two classes: one model,
    the larger class is the positive one.  Three or more: one-vs-rest inside ``fit``, as
    scikit-learn's ``LogisticRegression`` and ``SGDClassifier`` do: one model per class (its
    class +1, every other -1), fitted **jointly** (every pass over the data serves all of
    them; L-BFGS runs one L-BFGS per model in lockstep), predicting the class of the largest
    output.  In a store (or a Dask ``y``), ``y`` holds two classes coded {-1, +1} or {0, 1}.

    The classifier's L-BFGS defaults differ from the regressor's: ``alpha=1e-2`` and
    ``tol=1e-3`` (see those entries).

"""
        + _PARAMS_DOC.replace(
            _REG_WEIGHT_DOC[0], _REG_WEIGHT_DOC[1]).replace(_TOL_DOC[0], _TOL_DOC[1])
        + """    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
    coef_ : ndarray of shape (sum(view_sizes) + n_views, n_components), or (n_classes, ...) for
        three or more classes (one model per class)
    intercept_ : float, or ndarray of shape (n_classes,) for three or more classes
        Started at 0.
    factors_, view_sizes_, n_iter_, best_iter_, objective_path_, validation_path_
        As for :class:`MultiViewMachineRegressor`.
    """
    )

    _task = "classification"
    _losses = ("logistic", "hinge")
    _default_metrics = ("accuracy", "auc")

    # the regressor's parameters with the classifier's alpha and tol defaults
    alpha: float = 1e-2
    tol: float = 1e-3

    def fit_intercept_enabled(self):
        return False

    def _encode_memory(self, y, name):
        """In-memory labels as +1 (``classes_[1]``) / -1 (``classes_[0]``).  The training ``y``
        defines the classes; any other ``y`` (``evaluate``, ``eval_set``) is encoded through the
        fitted ``classes_`` exactly as the training ``y`` was, and a label outside them is
        refused."""
        if y.dtype.kind == "f" and not np.isfinite(y).all():
            raise ValueError(f"{name} contains NaN or inf; remove or impute those rows")
        if hasattr(self, "_fitting_y") and name == "y":
            kind = type_of_target(y)
            if kind.startswith("continuous"):
                raise ValueError(
                    f"Unknown label type: {kind}. {name} must hold class labels for "
                    f"{type(self).__name__} (got non-integer values such as "
                    f"{y[y != np.round(y)][:3].tolist()}); use MultiViewMachineRegressor for a "
                    "continuous target"
                )
            classes = np.unique(y)
            if classes.size < 2:
                raise ValueError(
                    f"{name} must hold at least two classes for {type(self).__name__}; got "
                    f"one class ({classes.tolist()}). Pass labels of two or more classes"
                )
            self._pending_classes = classes
        return _encode_labels(y, self._pending_classes if hasattr(self, "_pending_classes")
                              else self.classes_, name)

    def fit(self, X, y=None, *, eval_set=None, checkpoint=None, checkpoint_every=5):
        self._fitting_y = True
        try:
            return super().fit(
                X, y, eval_set=eval_set, checkpoint=checkpoint, checkpoint_every=checkpoint_every
            )
        finally:
            del self._fitting_y
            self.__dict__.pop("_pending_classes", None)

    fit.__doc__ = _BaseMVM.fit.__doc__

    def _target(self, y, ds, ref, name="y"):
        yb = super()._target(y, ds, ref, name)
        if hasattr(self, "_fitting_y") and name == "y":
            return yb  # the training labels: checked (and their classes set) by _target_summary
        if y is not None and not _is_arraylike_2d(y) and not isinstance(y, engine.Blocked):
            return yb  # in memory: already encoded by _encode_memory (as _BaseMVM._target does)
        # a lazy y (store or Dask): encoded through classes_ block by block, as it is read
        fn = functools.partial(_encode_labels, classes=self.classes_, name=name, lazy=True)
        arr = yb.dask.map_blocks(fn, dtype=np.float64, meta=np.empty((0, 0)))
        return engine.Blocked(arr, "dense", yb.source)

    def _n_models(self):
        classes = getattr(self, "_pending_classes", None)
        if classes is None:
            classes = self.classes_
        return 1 if len(classes) == 2 else len(classes)

    def decision_function(self, X):
        return self._decision(X)

    decision_function.__doc__ = _BaseMVM._decision.__doc__

    def _labels(self, f):
        """Class labels of decision values (one column: its sign; more: the arg-max)."""
        idx = (f > 0).astype(int) if f.ndim == 1 else f.argmax(axis=1)
        return self.classes_[idx]

    def predict(self, X):
        """Predicted class labels (values of ``classes_``), shape ``(n_samples,)``."""
        f = self.decision_function(X)
        if isinstance(f, np.ndarray):
            return self._labels(f)
        return f.map_blocks(self._labels, dtype=self.classes_.dtype,
                            drop_axis=None if f.ndim == 1 else 1)

    def predict_proba(self, X):
        """Class probabilities ``(n_samples, n_classes)`` (logistic loss only): the sigmoid of
        the output for two classes; for one-vs-rest models the sigmoids of the models' outputs
        normalized to sum to 1 (as scikit-learn's one-vs-rest ``LogisticRegression``)."""
        self._check_fitted()
        if self.loss_ != "logistic":
            raise AttributeError("predict_proba needs loss='logistic'")
        f = np.asarray(self.decision_function(X))
        p = scipy.special.expit(f)
        if f.ndim == 2:
            return p / p.sum(axis=1, keepdims=True)
        return np.column_stack([1 - p, p])


