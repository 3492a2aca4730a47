"""The GIMC estimator (scikit-learn contract) for multi-label and multi-class learning.

``GIMC(features="fourier")`` is GIMC-LFF, ``"nystrom"`` GIMC-LNYS, ``"both"`` the concatenation
(the paper's Delicious-large setting); ``learn_features=False`` gives exactly IMC-RFF / IMC-NYS
(random features frozen, one ridge solve).  The math lives in :mod:`ooc_lowrank.gimc.core`
(functional fit) and :mod:`ooc_lowrank.gimc._blocks` (per-block work).
"""

from __future__ import annotations

import copy
import logging
import numbers
import time

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils import check_random_state
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted

from ooc_lowrank import engine, metrics
from ooc_lowrank._persist import save_model
from ooc_lowrank._validation import check_scalar, param_error
from ooc_lowrank.gimc import _blocks, core
from ooc_lowrank.gimc.features import FourierFeatures, NystromFeatures, median_gamma, sample_rows

logger = logging.getLogger("ooc_lowrank")

_FEATURES = ("fourier", "nystrom", "both")


def _is_dataset(obj):
    return hasattr(obj, "names") and hasattr(obj, "n_rows") and hasattr(obj, "__getitem__")


def _split_eval_set(eval_set):
    """``(X_val, Y_val)`` from a pair or a store dataset."""
    if _is_dataset(eval_set):
        return eval_set["X"], (eval_set["Y"] if "Y" in eval_set.names else None)
    if isinstance(eval_set, (tuple, list)) and len(eval_set) == 2:
        return eval_set[0], eval_set[1]
    raise param_error(
        "eval_set",
        "must be a pair (X_val, Y_val) or a store dataset with arrays 'X' and 'Y'",
        type(eval_set).__name__,
        "e.g. fit(X, Y, eval_set=(X_val, Y_val))",
        exc=TypeError,
    )


def _is_lazy(X):
    import dask.array as da

    return isinstance(X, (da.Array, engine.Blocked)) or (hasattr(X, "read") and hasattr(X, "kind"))


def _check_X_memory(X, name="X"):
    """Validate an in-memory X with sklearn-compatible errors (complex, 1-D, object, empty)."""
    from sklearn.utils import check_array

    if sp.issparse(X):
        X = sp.csr_matrix(X)
    X = check_array(
        X,
        accept_sparse="csr",
        dtype=[np.float64, np.float32],
        ensure_all_finite=False,
        input_name=name,
    )
    data = X.data if sp.issparse(X) else X
    if data.size and not np.isfinite(data).all():
        bad = data[~np.isfinite(data)][0]
        raise ValueError(
            f"{name} must hold only finite values; found {float(bad)!r}. Remove or impute NaN/inf "
            "entries before fitting (e.g. sklearn.impute.SimpleImputer)"
        )
    if sp.issparse(X):
        X.sort_indices()
    return X


class GIMC(ClassifierMixin, BaseEstimator):
    """Goal-directed inductive matrix completion for multi-label / multi-class learning.

    Model: ``scores(x) = phi_U(x)^T W`` with ``min_{W,U} alpha/2 ||W||^2 + 1/2 ||A - Phi W||^2``
    (SPEC 1.4).  Fitting streams row blocks of ``X`` and ``Y`` through the engine: about two
    passes per iteration, nothing of size (n_samples, n_labels) or (n_samples, n_samples).

    Parameters
    ----------
    features : {"fourier", "nystrom", "both"}, default="fourier"
        Fourier features (LFF/RFF), RBF Nystrom features (LNYS/NYS), or both side by side.
    n_components : int, default=500
        ``m``: projections (Fourier, ``2m`` features) and/or landmarks (Nystrom, ``m``).
    gamma : float or None, default=None
        RBF width ``exp(-gamma ||x - y||^2)``; ``None``: median heuristic on a row sample.
    alpha : float, default=1.0
        Ridge weight ``lambda`` on ``W`` (> 0).
    learn_features : bool, default=True
        Learn ``U`` (GIMC); ``False`` freezes the random features (IMC-RFF / IMC-NYS, where the
        Nystrom map is normalized, ``M = (E^+)^(1/2)``).
    max_iter : int, default=100
        Maximum number of U-steps.
    tol : float, default=1e-4
        Stop when the relative objective decrease of an iteration is at most ``tol``.
    landmarks : {"random", "kmeans"}, default="random"
        Nystrom landmark initialization.
    normalize_rows : bool, default=False
        Scale every row of ``X`` to unit L2 norm (all-zero rows stay zero) before the feature
        map.  Applied block by block inside the model, identically in ``fit`` and in every
        prediction method, so train and test data get the same preprocessing; the median
        heuristic for ``gamma=None`` then runs on normalized rows.  Useful for bag-of-words
        inputs such as Bibtex.
    n_trials : int or None, default=None
        Armijo trial steps evaluated per line-search pass.  The trials are tried in the same
        order whatever their grouping, so the fit is the same; only the work differs.  A trial
        costs a Gram product (``n D^2``), a pass costs a read of the data.  ``None``: 1 when the
        data are held in memory (NumPy / scipy input, or a store small enough to cache), where
        an extra pass is cheap and an unneeded trial is not (Bibtex, m=3000: 6.0 s against
        10.5 s per iteration); 2 when the data are streamed from a store or a Dask graph each
        pass, where reads dominate.
    block_rows : int or None, default=None
        Rows per block for in-memory input (store / Dask input keeps its own blocks).  ``None``:
        equal blocks whose feature matrix ``Phi`` is about 16 MB (the per-row work scales
        with the feature dimension, not with the input width), so the threads stay balanced.
    cache_bytes : int or None, default=None
        Store inputs up to this many bytes are kept in memory (or on the workers) across
        passes; larger ones are streamed from the store every pass.  ``None``: the engine's
        budget (``engine.DEFAULT_CACHE_BYTES``); ``0`` always streams.
    random_state : int, RandomState, Generator or None, default=None
    verbose : int, default=0
        ``>0`` logs one line per iteration on the ``ooc_lowrank`` logger (INFO).
    callback : callable or None, default=None
        ``callback(iteration, elapsed_seconds, objective)`` after the init and every iteration.

    Attributes
    ----------
    components_ : ndarray of shape (n_features_in_, m_total)
        Learned projections / landmarks (parts side by side).
    coef_ : ndarray of shape (n_phi, n_labels)
        ``W``.
    gamma_ : list of float
        Kernel width per feature part.
    classes_ : ndarray
        Class labels (multi-class) or ``arange(n_labels)`` (multi-label).
    multilabel_ : bool
    objective_ : ndarray
        Objective after the init and after every accepted step (non-increasing).
    n_iter_, n_passes_ : int
        U-steps taken; passes over the data.
    n_trials_ : int
        Armijo trials per line-search pass that the fit used (``n_trials`` resolved).
    eval_history_ : dict
        ``{iteration: {metric: value}}`` from ``fit(eval_set=...)`` (empty without one).
    n_features_in_ : int
    """

    def __init__(
        self,
        *,
        features="fourier",
        n_components=500,
        gamma=None,
        alpha=1.0,
        learn_features=True,
        max_iter=100,
        tol=1e-4,
        landmarks="random",
        normalize_rows=False,
        n_trials=None,
        block_rows=None,
        cache_bytes=None,
        random_state=None,
        verbose=0,
        callback=None,
    ):
        self.features = features
        self.n_components = n_components
        self.gamma = gamma
        self.alpha = alpha
        self.learn_features = learn_features
        self.max_iter = max_iter
        self.tol = tol
        self.landmarks = landmarks
        self.normalize_rows = normalize_rows
        self.n_trials = n_trials
        self.block_rows = block_rows
        self.cache_bytes = cache_bytes
        self.random_state = random_state
        self.verbose = verbose
        self.callback = callback

    # ------------------------------------------------------------------ validation

    def _validate_params(self):
        if self.features not in _FEATURES:
            raise param_error(
                "features",
                "must be one of 'fourier', 'nystrom', 'both'",
                self.features,
                "e.g. GIMC(features='fourier')",
            )
        check_scalar(
            self.n_components,
            "n_components",
            kind=numbers.Integral,
            low=1,
            fix="Use at least one feature, e.g. n_components=500",
        )
        if self.gamma is not None:
            check_scalar(
                self.gamma,
                "gamma",
                low=0.0,
                low_inclusive=False,
                fix="Pass a positive kernel width, or gamma=None for the median heuristic",
            )
        check_scalar(
            self.alpha,
            "alpha",
            low=0.0,
            low_inclusive=False,
            fix="Use a positive ridge weight, e.g. alpha=1.0",
        )
        check_scalar(self.max_iter, "max_iter", kind=numbers.Integral, low=0)
        check_scalar(self.tol, "tol", low=0.0)
        if self.n_trials is not None:
            check_scalar(self.n_trials, "n_trials", kind=numbers.Integral, low=1, high=20)
        if self.landmarks not in ("random", "kmeans"):
            raise param_error("landmarks", "must be 'random' or 'kmeans'", self.landmarks)
        if not isinstance(self.normalize_rows, (bool, np.bool_)):
            raise param_error(
                "normalize_rows", "must be True or False", self.normalize_rows, exc=TypeError
            )
        if self.block_rows is not None:
            check_scalar(self.block_rows, "block_rows", kind=numbers.Integral, low=1)
        if self.cache_bytes is not None:
            check_scalar(self.cache_bytes, "cache_bytes", kind=numbers.Integral, low=0)
        if self.callback is not None and not callable(self.callback):
            raise param_error(
                "callback",
                "must be callable(iteration, elapsed, objective)",
                self.callback,
                exc=TypeError,
            )

    def _feature_row_bytes(self, X):
        """Bytes of one row of ``Phi``: the per-row work that sizes in-memory blocks."""
        m = int(self.n_components)
        width = {"fourier": 2 * m, "nystrom": m, "both": 3 * m}.get(self.features, 2 * m)
        itemsize = np.dtype(X.dtype).itemsize if np.dtype(X.dtype).kind == "f" else 8
        return width * itemsize

    def _memory_block_rows(self, X):
        """Rows per block of in-memory ``X``: ``block_rows`` if set, else the engine's equal
        blocks of about :data:`engine.TARGET_BLOCK_BYTES` of ``Phi``."""
        if self.block_rows is not None:
            return int(self.block_rows)
        return engine._default_rows(self._feature_row_bytes(X), int(X.shape[0]))

    def _prepare_X(self, X, *, reset):
        """Blocked X (validated; in-memory data checked completely now)."""
        if _is_lazy(X):
            B = engine.as_blocked(X, name="X")
            if B.dtype.kind != "f":
                raise TypeError(f"X must have a float dtype (float32 or float64); got {B.dtype}")
        else:
            X = _check_X_memory(X)
            B = engine.as_blocked(
                X, block_rows=self.block_rows, row_bytes=self._feature_row_bytes(X), name="X"
            )
        if len(B.shape) != 2:
            raise ValueError(f"X must be 2-D (n_samples, n_features); got shape {B.shape}")
        if reset:
            self.n_features_in_ = int(B.shape[1])
        elif B.shape[1] != self.n_features_in_:
            raise ValueError(
                f"X has {B.shape[1]} features, but GIMC is expecting {self.n_features_in_} "
                "features as input (as in fit); pass data with the same columns as in fit"
            )
        return B, X

    def _prepare_Y(self, Y, n_rows):
        """Return (Blocked labels, n_labels, codes, classes, multilabel)."""
        if Y is None:
            raise ValueError(
                "GIMC requires y to be passed, but the target y is None. Y must be "
                "a 0/1 label matrix (n_samples, n_labels) or a class "
                "vector (n_samples,); or pass a store dataset with arrays 'X' and 'Y'"
            )
        import dask.array as da

        is_handle = hasattr(Y, "read") and hasattr(Y, "kind")
        if not (is_handle or sp.issparse(Y) or isinstance(Y, (da.Array, engine.Blocked))):
            Y = np.asarray(Y)
        nY = Y.shape[0]
        if nY != n_rows:
            raise ValueError(
                f"Y must have as many rows as X: Y has {nY} rows, X has {n_rows}. Pass the labels "
                "of exactly the rows of X"
            )
        if is_handle:  # store array
            if Y.kind in ("csr", "coo"):
                return engine.as_blocked(Y, name="Y"), int(Y.shape[1]), False, None, True
            if Y.shape[1] == 1:  # class ids 0..C-1 (a small (n, 1) column, read once)
                vals = np.unique(Y.read())
                if not np.array_equal(vals, np.arange(vals.size)):
                    raise ValueError(
                        f"Y (class ids in a store) must hold the integers 0..C-1; got values "
                        f"{vals[:5].tolist()}... Re-encode the classes as 0..C-1"
                    )
                return (
                    engine.as_blocked(Y, name="Y"),
                    int(vals.size),
                    True,
                    vals.astype(np.int64),
                    False,
                )
            return engine.as_blocked(Y, name="Y"), int(Y.shape[1]), False, None, True
        if isinstance(Y, (da.Array, engine.Blocked)):
            Bd = Y if isinstance(Y, engine.Blocked) else None
            if Bd is None and Y.ndim == 1:
                classes = np.unique(engine.compute(Y)[0])
                codes_arr = da.map_blocks(
                    lambda b: np.searchsorted(classes, b)[:, None],
                    Y,
                    new_axis=1,
                    chunks=(Y.chunks[0], (1,)),
                    dtype=np.int64,
                )
                return (engine.as_blocked(codes_arr, name="Y"), len(classes), True, classes, False)
            B = Bd or engine.as_blocked(Y, name="Y")
            return B, int(B.shape[1]), False, None, True
        if sp.issparse(Y) or (np.ndim(Y) == 2 and np.shape(Y)[1] > 1):
            Ycsr = (
                sp.csr_matrix(Y, dtype=np.float64)
                if sp.issparse(Y)
                else sp.csr_matrix(np.asarray(Y, dtype=np.float64))
            )
            bad = Ycsr.data[(Ycsr.data != 0) & (Ycsr.data != 1)]
            if bad.size:
                raise ValueError(
                    f"Y (multi-label) must hold only 0/1 labels; found value {float(bad[0])!r}. "
                    "Binarize "
                    "it, e.g. (Y > 0).astype(np.float32), or pass a class vector for multi-class"
                )
            Ycsr.eliminate_zeros()
            return Ycsr, int(Ycsr.shape[1]), False, None, True
        from sklearn.utils.validation import column_or_1d

        y = column_or_1d(Y, warn=True)
        check_classification_targets(y)
        classes, codes = np.unique(y, return_inverse=True)
        return codes.reshape(-1, 1).astype(np.int64), len(classes), True, classes, False

    def _check_eval_set(self, Xv, Yv):
        """Shape checks of a validation set before any work (cheap: no data pass)."""
        try:
            B, _ = self._prepare_X(Xv, reset=False)
        except (ValueError, TypeError) as e:
            raise type(e)(f"eval_set: X_val: {e}") from e
        if Yv is None:
            raise ValueError(
                "eval_set needs labels: pass (X_val, Y_val) or a store dataset with 'Y'"
            )
        n_y = Yv.shape[0] if hasattr(Yv, "shape") else len(Yv)
        if n_y != B.shape[0]:
            raise ValueError(
                f"eval_set: Y_val has {n_y} rows but X_val has {B.shape[0]}; they must match"
            )

    # ------------------------------------------------------------------ fit

    def _init_parts(self, X, rng):
        """Initial U (d x m_total) and the feature spec."""
        return self._init_from_sample(sample_rows(X, 1000, rng), rng)

    def _init_from_sample(self, S, rng):
        """:meth:`_init_parts` after the row sample ``S`` was drawn (GIMCCV draws it per fold)."""
        if self.normalize_rows:
            S = _blocks.l2_normalize_rows(S)
        gamma = median_gamma(S) if self.gamma is None else float(self.gamma)
        kinds = ["fourier", "nystrom"] if self.features == "both" else [self.features]
        learn = bool(self.learn_features)
        Us, parts = [], []
        for kind in kinds:
            seed = int(rng.integers(2**31 - 1))
            if kind == "fourier":
                t = FourierFeatures(n_components=self.n_components, gamma=gamma, random_state=seed)
                t.fit(S)
                Us.append(t.components_)
                parts.append(("fourier", t.components_.shape[1], gamma, None, learn))
            else:
                t = NystromFeatures(
                    n_components=self.n_components,
                    gamma=gamma,
                    landmarks=self.landmarks,
                    normalize=not learn,
                    random_state=seed,
                )
                t.fit(S)
                Us.append(t.components_)
                parts.append(("nystrom", t.components_.shape[1], gamma, t.normalization_, learn))
        return np.hstack(Us), _blocks.FeatureSpec.build(parts, row_norm=self.normalize_rows)

    def fit(self, X, Y=None, *, eval_set=None, eval_every=5, eval_metrics=None):
        """Fit on ``X`` (n_samples, n_features) and labels ``Y``.

        Parameters
        ----------
        X : ndarray, scipy.sparse matrix, dask array, store array or store Dataset
            Dense or CSR features.  A store ``Dataset`` with ``Y=None`` uses ``ds["X"]``,
            ``ds["Y"]``.
        Y : sparse/dense 0/1 matrix of shape (n_samples, n_labels), or array of shape
            (n_samples,) of class labels (multi-class; one-hot internally).
        eval_set : (X_val, Y_val) or store Dataset, optional
            Held-out data scored during the fit (one pass over ``X_val`` per scoring) with the
            parameters of that iteration; the history lands in ``eval_history_``.  Use it to
            choose ``max_iter`` (the number of U-steps is GIMC's main regularizer besides
            ``alpha``) without refitting once per candidate.
        eval_every : int, default=5
            Score ``eval_set`` after the initialization, every ``eval_every`` iterations and
            after the last one.
        eval_metrics : list of str or comma-separated str, optional
            As in :meth:`evaluate` (default ``p@1,p@3,p@5`` multi-label, ``accuracy``
            multi-class).

        Returns
        -------
        self
        """
        self._validate_params()
        if eval_set is not None:
            check_scalar(eval_every, "eval_every", kind=numbers.Integral, low=1)
            if eval_metrics is not None:
                metrics.parse_metrics(eval_metrics)  # a bad metric name fails before any work
        if _is_dataset(X):
            ds = X
            X = ds["X"]
            if Y is None:
                Y = ds["Y"]
        XB, Xmem = self._prepare_X(X, reset=True)
        n = XB.shape[0]
        A, n_labels, codes, classes, multilabel = self._prepare_Y(Y, n)
        AB = engine.align(XB, engine.as_blocked(A, name="Y"), names=("X", "Y"))
        rs = check_random_state(self.random_state)
        rng = np.random.default_rng(rs.randint(2**31 - 1))
        monitor, history = None, {}
        if eval_set is not None:
            probe = copy.copy(self)  # scores intermediate states; self is untouched until the end
            probe.spec_, probe.n_labels_, probe.multilabel_ = None, n_labels, multilabel
            probe.classes_ = classes if classes is not None else np.arange(n_labels)
            Xv, Yv = _split_eval_set(eval_set)
            probe._check_eval_set(Xv, Yv)

            def score(it, U, W):
                probe.components_, probe.coef_ = U, W
                history[it] = probe.evaluate(Xv, eval_metrics, Y=Yv)

            def monitor(it, U, W):
                if it % int(eval_every) == 0:
                    score(it, U, W)

        U0, spec = self._init_parts(Xmem if not _is_lazy(Xmem) else XB, rng)
        if eval_set is not None:
            probe.spec_ = spec
        kept = engine.maybe_persist(XB, AB, budget=self.cache_bytes)
        resident = all(k is not b or b.in_memory for k, b in zip(kept, (XB, AB), strict=True))
        XB, AB = kept
        n_trials = self.n_trials if self.n_trials is not None else (1 if resident else 2)
        if self.verbose:
            logger.setLevel(min(logger.level or logging.INFO, logging.INFO))
        t0 = time.perf_counter()
        res = core.fit_gimc(
            XB,
            AB,
            U0,
            spec,
            alpha=float(self.alpha),
            n_labels=n_labels,
            codes=codes,
            max_iter=int(self.max_iter),
            tol=float(self.tol),
            n_trials=int(n_trials),
            callback=self.callback,
            monitor=monitor,
        )
        if eval_set is not None and res.n_iter not in history:  # the last iteration
            score(res.n_iter, res.U, res.W)
        self.fit_time_ = time.perf_counter() - t0
        self.components_ = res.U
        self.coef_ = res.W
        self.spec_ = spec
        self.gamma_ = [p.gamma for p in spec.parts]
        self.objective_ = np.asarray(res.objective)
        self.n_iter_ = res.n_iter
        self.n_passes_ = res.n_passes
        self.n_trials_ = int(n_trials)
        self.eval_history_ = history
        self.multilabel_ = multilabel
        self.n_labels_ = n_labels
        self.classes_ = classes if classes is not None else np.arange(n_labels)
        return self

    # ------------------------------------------------------------------ prediction

    def _dtype_for(self, B):
        return B.dtype if B.dtype in (np.float32, np.float64) else np.dtype(np.float64)

    def _args(self, dt):
        return self.components_.astype(dt), self.spec_, np.ascontiguousarray(self.coef_, dtype=dt)

    def decision_function(self, X):
        """Scores ``phi_U(x)^T W`` of shape (n_samples, n_labels); lazy (Dask) for lazy input.

        Binary multi-class problems follow scikit-learn: shape (n_samples,), the score of
        ``classes_[1]`` minus that of ``classes_[0]``.  For many labels prefer
        :meth:`predict_topk` (no (n_samples, n_labels) matrix)."""
        check_is_fitted(self, "coef_")
        B, _ = self._prepare_X(X, reset=False)
        dt = self._dtype_for(B)
        U, spec, W = self._args(dt)
        arr = engine.map_rows(
            _blocks.scores_block, B, args=(U, spec, W), n_cols=self.n_labels_, dtype=dt
        )
        if not self.multilabel_ and self.n_labels_ == 2:
            arr = arr[:, 1] - arr[:, 0]
        if _is_lazy(X):
            return arr
        return engine.compute(arr)[0]

    def predict_topk(self, X, k=5):
        """Top-k labels and scores per row, best first, computed block by block.

        Returns
        -------
        labels : ndarray of shape (n_samples, k)
            Label indices (multi-label) or class labels (multi-class).
        scores : ndarray of shape (n_samples, k), float64
            Lazy Dask arrays for lazy input.
        """
        check_is_fitted(self, "coef_")
        check_scalar(k, "k", kind=numbers.Integral, low=1, fix="Ask for at least one label")
        k = min(int(k), self.n_labels_)
        B, _ = self._prepare_X(X, reset=False)
        dt = self._dtype_for(B)
        U, spec, W = self._args(dt)
        arr = engine.map_rows(
            _blocks.topk_block, B, args=(U, spec, W, k), n_cols=2 * k, dtype=np.float64
        )
        if _is_lazy(X):
            idx = arr[:, :k].astype(np.int64)
            if not self.multilabel_:
                classes = self.classes_
                idx = idx.map_blocks(lambda b: classes[b], dtype=classes.dtype)
            return idx, arr[:, k:]
        (out,) = engine.compute(arr)
        idx = out[:, :k].astype(np.int64)
        return (idx if self.multilabel_ else self.classes_[idx]), out[:, k:]

    def predict(self, X):
        """Multi-class: the argmax class, shape (n_samples,).  Multi-label: a CSR 0/1 matrix
        (n_samples, n_labels) marking labels with score >= 0.5 (the midpoint of the 0/1
        targets); use :meth:`predict_topk` for ranked output."""
        check_is_fitted(self, "coef_")
        if not self.multilabel_:
            lab, _ = self.predict_topk(X, 1)
            return lab[:, 0]
        S = self.decision_function(X)
        if _is_lazy(X):
            return S.map_blocks(
                lambda b: sp.csr_matrix(b >= 0.5, dtype=np.float64), meta=sp.csr_matrix((0, 0))
            )
        return sp.csr_matrix(S >= 0.5, dtype=np.float64)

    def score(self, X, y, sample_weight=None):
        """Accuracy (multi-class) or precision@1 (multi-label)."""
        if not self.multilabel_:
            return super().score(X, y, sample_weight=sample_weight)
        lab, _ = self.predict_topk(X, 1)
        return metrics.finalize(
            metrics.metric_sums_block(sp.csr_matrix(y), lab, [("p", 1)]), lab.shape[0], [("p", 1)]
        )["p@1"]

    def evaluate(self, dataset, metrics_=None, *, Y=None):
        """Metrics over a store dataset (or an X with ``Y=``) in one pass.

        Parameters
        ----------
        dataset : store Dataset (arrays "X", "Y") or X
        metrics_ : list of str or comma-separated str, default: p@1,p@3,p@5 (multi-label) or
            accuracy (multi-class)

        Returns
        -------
        dict, e.g. ``{"p@1": 0.65, "p@3": 0.41, "p@5": 0.30}``
        """
        check_is_fitted(self, "coef_")
        if metrics_ is None:
            metrics_ = ["p@1", "p@3", "p@5"] if self.multilabel_ else ["accuracy"]
        parsed = metrics.parse_metrics(metrics_)
        if _is_dataset(dataset):
            X, Y = dataset["X"], dataset["Y"]
        else:
            X = dataset
        B, _ = self._prepare_X(X, reset=False)
        if Y is None:
            raise ValueError("evaluate needs labels: pass a dataset with 'Y' or Y=...")
        codes = False
        if not self.multilabel_ and not (hasattr(Y, "read") or sp.issparse(Y)):
            yv = np.asarray(Y).ravel()
            pos = np.searchsorted(self.classes_, yv)
            pos = np.clip(pos, 0, len(self.classes_) - 1)
            Y = np.where(self.classes_[pos] == yv, pos, -1).reshape(-1, 1)
            codes = True
        YB = engine.align(B, engine.as_blocked(Y, name="Y"), names=("X", "Y"))
        dt = self._dtype_for(B)
        U, spec, W = self._args(dt)
        K = min(metrics.max_k(parsed), self.n_labels_)
        sums = engine.map_reduce(
            _eval_block, B, YB, args=(U, spec, W, K, parsed, codes), shapes=[(len(parsed),)]
        )
        return metrics.finalize(np.asarray(sums).ravel(), B.shape[0], parsed)

    def predict_to_store(self, dataset, out_url, top_k=5, *, overwrite=False):
        """Write the top-k labels (int64) and scores (float32) of every row to a new store with
        dense arrays ``labels`` and ``scores`` of shape (n_samples, top_k)."""
        from ooc_lowrank.storage import DatasetWriter

        X = dataset["X"] if _is_dataset(dataset) else dataset
        B, _ = self._prepare_X(X, reset=False)
        k = min(int(top_k), self.n_labels_)
        dt = self._dtype_for(B)
        U, spec, W = self._args(dt)
        arr = engine.map_rows(
            _blocks.topk_block, B, args=(U, spec, W, k), n_cols=2 * k, dtype=np.float64
        )
        (out,) = engine.compute(arr)
        br = int(getattr(dataset, "block_rows", 0) or 65536)
        with DatasetWriter(
            out_url, block_rows=br, overwrite=overwrite, attrs={"top_k": k, "model": "GIMC"}
        ) as w:
            w.add_dense("labels", n_cols=k, dtype="int64")
            w.add_dense("scores", n_cols=k, dtype="float32")
            for s in range(0, out.shape[0], br):
                blk = out[s : s + br]
                lab = blk[:, :k].astype(np.int64)
                if not self.multilabel_ and np.issubdtype(self.classes_.dtype, np.integer):
                    lab = self.classes_[lab].astype(np.int64)
                w.append(labels=lab, scores=blk[:, k:].astype(np.float32))
        return out_url

    # ------------------------------------------------------------------ persistence

    def save(self, path, *, overwrite=True):
        """Save to a directory (JSON + npz; loading runs no pickle): ``ooc_lowrank.load(path)``."""
        save_model(path, "GIMC", *self._state(), overwrite=overwrite)

    def _state(self):
        """``(params, arrays, extra)`` as saved; :meth:`_from_saved` reads them back."""
        check_is_fitted(self, "coef_")
        arrays = {"components": self.components_, "coef": self.coef_, "objective": self.objective_}
        parts = []
        for i, p in enumerate(self.spec_.parts):
            parts.append([p.kind, p.m, p.gamma, p.M is not None, p.learn])
            if p.M is not None:
                arrays[f"M{i}"] = p.M
        extra = {
            "parts": parts,
            "n_features_in": self.n_features_in_,
            "n_labels": self.n_labels_,
            "multilabel": self.multilabel_,
            "n_iter": self.n_iter_,
            "n_passes": self.n_passes_,
            "n_trials": self.n_trials_,
            "eval_history": {str(k): v for k, v in getattr(self, "eval_history_", {}).items()},
        }
        if self.multilabel_ or self.classes_.dtype.kind in "iufb":
            arrays["classes"] = self.classes_
        else:
            extra["classes"] = [str(c) for c in self.classes_]
        params = {k: v for k, v in self.get_params().items() if k != "callback"}
        return params, arrays, extra

    @classmethod
    def _from_saved(cls, params, arrays, extra):
        est = cls(**params)
        parts = []
        for i, (kind, m, gamma, has_M, learn) in enumerate(extra["parts"]):
            parts.append(
                (kind, int(m), float(gamma), arrays[f"M{i}"] if has_M else None, bool(learn))
            )
        est.spec_ = _blocks.FeatureSpec.build(parts, row_norm=bool(params.get("normalize_rows")))
        est.components_ = arrays["components"]
        est.coef_ = arrays["coef"]
        est.objective_ = arrays["objective"]
        est.gamma_ = [p.gamma for p in est.spec_.parts]
        est.n_features_in_ = int(extra["n_features_in"])
        est.n_labels_ = int(extra["n_labels"])
        est.multilabel_ = bool(extra["multilabel"])
        est.n_iter_ = int(extra["n_iter"])
        est.n_passes_ = int(extra["n_passes"])
        est.n_trials_ = int(extra.get("n_trials", 2))  # models saved before n_trials_ existed
        est.eval_history_ = {int(k): v for k, v in extra.get("eval_history", {}).items()}
        est.classes_ = arrays["classes"] if "classes" in arrays else np.asarray(extra["classes"])
        return est

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        tags.classifier_tags.multi_label = False
        return tags


def _eval_block(Xb, Yb, U, spec, W, K, parsed, codes):
    top = _blocks.topk_block(Xb, U, spec, W, K)[:, :K]
    return metrics.metric_sums_block(Yb, top, parsed, codes=codes)
