"""The GIMC estimator (scikit-learn contract) for multi-label and multi-class learning.

``GIMC(features="fourier")`` is GIMC-LFF, ``"nystrom"`` GIMC-LNYS, ``"both"`` the concatenation
(the paper's Delicious-large setting); ``learn_features=False`` gives exactly IMC-RFF / IMC-NYS
(random features frozen, one ridge solve).  The math lives in :mod:`ooc_lowrank.gimc.core`
(functional fit) and :mod:`ooc_lowrank.gimc._blocks` (per-block work).
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import numbers
import time

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted

from ooc_lowrank import _base, _checkpoint, _estimate, engine, metrics
from ooc_lowrank._inputs import (
    as_features,
    as_labels,
    check_01_block,
    check_features_memory,
    check_X_scale,
)
from ooc_lowrank._inputs import is_lazy as _is_lazy
from ooc_lowrank._persist import (
    ModelFileError,
    ModelReader,
    build_checked,
    check_params,
    check_value,
)
from ooc_lowrank._validation import NonFiniteError, check_random_state, check_scalar, param_error
from ooc_lowrank.gimc import _blocks, core
from ooc_lowrank.gimc.features import FourierFeatures, NystromFeatures, median_gamma, sample_rows

logger = logging.getLogger("ooc_lowrank")

_FEATURES = ("fourier", "nystrom", "both")

#: ``normalize_rows="auto"`` normalizes inputs whose row sample has no negative entry and at
#: most this fraction of nonzero entries (bag-of-words / tf-idf shape).
_BOW_DENSITY = 0.2

#: Defaults chosen across ten multi-label datasets (``benchmarks/gimc_defaults.py``).
DEFAULT_GAMMA_SCALE = 0.125
DEFAULT_ALPHA = 1.0
DEFAULT_MAX_ITER = 10


def _looks_like_bag_of_words(S):
    """True when the rows ``S`` (dense or CSR) are nonnegative and at most ``_BOW_DENSITY``
    of their entries are nonzero: counts, binary words, tf-idf."""
    if S.shape[0] == 0 or S.shape[1] == 0:
        return False
    if sp.issparse(S):
        S = sp.csr_matrix(S)
        S.eliminate_zeros()
        nnz, neg = S.nnz, bool(S.nnz and S.data.min() < 0)
    else:
        S = np.asarray(S)
        nnz, neg = int(np.count_nonzero(S)), bool(S.size and S.min() < 0)
    return (not neg) and nnz <= _BOW_DENSITY * S.shape[0] * S.shape[1]


#: label arrays of a store, in order of preference: multi-label 0/1 ``Y``, class labels ``y``
LABEL_ARRAYS = ("Y", "y")


def _dataset_labels(ds, required=True):
    """The label array of a store dataset: ``Y`` if present, else ``y`` (class labels)."""
    for name in LABEL_ARRAYS:
        if name in ds.names:
            return ds[name]
    if not required:
        return None
    raise ValueError(
        f"store {getattr(ds, 'url', '?')!r} has no label array: it has {list(ds.names)}; GIMC "
        "needs 'Y' (0/1 label matrix) or 'y' (class labels, one column). Convert the data "
        "with its labels, or pass the labels as Y="
    )


def _handle_where(h):
    return f"store {getattr(h, 'url', '?')!r}, array {getattr(h, 'name', 'Y')!r}"


def _scan_store_labels(h, class_column):
    """One streaming pass over store labels: validate them, return the classes (class column).

    ``class_column``: the values are class labels and must be integers (any values, as in
    scikit-learn; a float dtype is the converters' storage type); returns the sorted classes
    as int64.  Otherwise the values must be 0/1 (a multi-label matrix).  Errors name the store,
    the array, the value and its row.
    """
    uniq = []
    for s0, _, b in h.iter_blocks():
        if class_column:
            v = np.asarray(b).reshape(-1)
            if v.dtype.kind == "f":
                bad = v != np.floor(v)
                if bad.any():
                    i = int(np.argmax(bad))
                    raise ValueError(
                        f"{_handle_where(h)}: class labels must be integers (one column of "
                        f"class ids); row {s0 + i} holds {float(v[i])!r}. Store class ids, or "
                        "0/1 label columns as a multi-label 'Y'"
                    )
            uniq.append(np.unique(v))
            continue
        data = b.data if sp.issparse(b) else np.asarray(b).reshape(-1)
        bad = (data != 0) & (data != 1)
        if bad.any():
            k = int(np.argmax(bad))
            if sp.issparse(b):
                row = int(np.searchsorted(b.indptr, k, side="right") - 1)
            else:
                row = k // max(b.shape[1], 1)
            raise ValueError(
                f"{_handle_where(h)}: multi-label Y must hold only 0/1 labels; row {s0 + row} "
                f"holds {float(data[k])!r}. Binarize it (e.g. Y > 0) and write the store again"
            )
    if class_column:
        vals = np.unique(np.concatenate(uniq)) if uniq else np.zeros(0)
        return vals.astype(np.int64)
    return None


def _class_names(ds, Y):
    """``attrs["class_names"]`` of a store whose ``y`` holds ranks of named classes, else None."""
    names = getattr(ds, "attrs", {}).get("class_names")
    if names is None or getattr(Y, "name", None) != "y":
        return None
    return np.asarray(names)


def _store_positions(classes, names):
    """Where each of ``classes`` (sorted names) sits in a store's sorted ``names``: increasing
    floats, integral for present classes, strictly between integers for absent ones."""
    lookup = {str(c): i for i, c in enumerate(names)}
    out, prev = [], -0.5
    for c in classes:
        i = lookup.get(str(c))
        prev = float(i) if i is not None else float(np.nextafter(prev, np.inf))
        out.append(prev)
    return np.asarray(out)


def _class_codes(YB, classes):
    """Lazy ``(n, 1)`` int64 codes of class labels (``-1`` for a class not in ``classes``)."""
    return engine.as_blocked(
        engine.map_rows(
            metrics.class_codes_block, YB, args=(np.asarray(classes),), n_cols=1, dtype=np.int64
        ),
        name="Y",
    )


def _dataset_arrays(X, Y):
    """``(X, Y)``: a store path or ``Dataset`` gives ``ds["X"]`` and (when ``Y`` is None) its
    label array (``Y``, else ``y``)."""
    X = _base.open_if_path(X)
    if _base.is_dataset(X):
        if Y is None:
            Y = _dataset_labels(X)
        X = X["X"]
    return X, Y


def _split_eval_set(eval_set):
    """``(X_val, Y_val)`` from a pair or a store dataset (or its path)."""
    eval_set = _base.open_if_path(eval_set)
    if _base.is_dataset(eval_set):
        return eval_set["X"], _dataset_labels(eval_set, required=False)
    if isinstance(eval_set, (tuple, list)) and len(eval_set) == 2:
        return eval_set[0], eval_set[1]
    raise param_error(
        "eval_set",
        "must be a pair (X_val, Y_val) or a store dataset with arrays 'X' and 'Y'",
        type(eval_set).__name__,
        "e.g. fit(X, Y, eval_set=(X_val, Y_val))",
        exc=TypeError,
    )


@_base.params
class _SharedParams(_base.RunControl, _base.Streaming):
    """The parameters :class:`GIMC` and :class:`~ooc_lowrank.GIMCCV` share (same names, same
    meaning, same defaults; documented in :class:`GIMC`)."""

    features: str = "fourier"
    n_features_map: int = 500
    learn_features: bool = True
    landmarks: str = "random"
    normalize_rows: bool | str = False
    n_trials: int | None = None
    verbose: int = 0


@_base.params
class GIMC(_base.Loadable, ClassifierMixin, BaseEstimator, _SharedParams):
    """Goal-directed inductive matrix completion for multi-label / multi-class learning.

    Model: ``scores(x) = phi_U(x)^T W`` with ``min_{W,U} alpha/2 ||W||^2 + 1/2 ||A - Phi W||^2``
    (SPEC 1.4).  Fitting streams row blocks of ``X`` and ``Y`` through the engine: about two
    passes per iteration, nothing of size (n_samples, n_labels) or (n_samples, n_samples).

    The defaults (``gamma_scale=0.125``, ``alpha=1`` (``"auto"`` resolves to it when features
    are learned), ``max_iter=10``, raw rows) were chosen for GIMC-LFF at ``n_features_map=500`` on ten multi-label datasets
    (``benchmarks/gimc_defaults.py``, results in ``benchmarks/results/gimc_defaults.json``):
    among constant settings and rules that normalize bag-of-words rows (``"auto"``), the one
    with the smallest mean loss of validation P@1 against each dataset's own best setting
    (1.9 points), selected on training rows only.  Normalizing bag-of-words rows did not
    win.  Tune a given dataset with cross-validation (``GIMCCV``).

    Parameters
    ----------
    features : {"fourier", "nystrom", "both"}, default="fourier"
        Fourier features (LFF/RFF), RBF Nystrom features (LNYS/NYS), or both side by side.
    n_features_map : int, default=500
        ``m``: projections (Fourier, ``2m`` features) and/or landmarks (Nystrom, ``m``).
    gamma : float or None, default=None
        RBF width ``exp(-gamma ||x - y||^2)``; ``None``: ``gamma_scale`` times the median
        heuristic ``1 / median ||x_i - x_j||^2`` on 1000 sampled rows (after row normalization
        when that is on).  The fitted value is ``gamma_``.
    gamma_scale : float, default=0.125
        Multiplier of the median heuristic when ``gamma=None`` (ignored otherwise).
    alpha : float or "auto", default="auto"
        Ridge weight ``lambda`` on ``W`` (> 0).  ``"auto"``: with ``learn_features=False``
        (IMC-RFF / IMC-NYS, one ridge solve) the candidate of ``1e-6 .. 1`` times the mean
        eigenvalue of ``Phi^T Phi`` (two per decade) with the most leave-one-out top-1 hits
        (P@1, or accuracy) on up to 1024 training rows, computed exactly from one
        eigendecomposition of the (D, D) Gram in one more pass over the data (the ties go to
        the larger alpha); the choice is ``alpha_``, the rates ``alpha_scores_``.  With
        Fourier features and ``gamma=None`` on data of at least ``10 (D + 1024)`` rows
        (``core.width_selection``) the median heuristic's own width (``gamma_scale=1``, the
        width of scikit-learn's RBFSampler / Nystroem with the median heuristic) is scored
        too, jointly with alpha, in the same two passes (one more Gram in the first): the best
        rate per width is ``gamma_scores_``, the width chosen ``gamma_``.  Beyond
        ``n_phi x n_labels = 2^25`` (``core.LOO_MAX_BYTES``) it takes 1.0 (logged).  Against
        ``alpha=1`` it raised test P@1 / accuracy on 8 of the 11 datasets of
        ``benchmarks/imc_rff_alpha.py`` (Bibtex 50.7 -> 56.5, demo shape 74.2 -> 84.2 with
        the width, Segment 89.9 -> 95.2, Medical 62.2 -> 83.4), left Yeast equal and lowered
        scene (75.8 -> 75.1) and Enron (75.7 -> 74.8)
        (``benchmarks/results/imc_rff_alpha.json``): ``alpha=1`` on unit-norm features
        mostly over-regularizes the frozen map.  With ``learn_features=True`` ``"auto"`` is
        ``1.0`` (chosen with the other GIMC-LFF defaults, see above).
    learn_features : bool, default=True
        Learn ``U`` (GIMC); ``False`` freezes the random features (IMC-RFF / IMC-NYS, where the
        Nystrom map is normalized, ``M = (E^+)^(1/2)``).
    max_iter : int, default=10
        Maximum number of U-steps.  The number of steps is GIMC's main regularizer besides
        ``alpha``: validation P@1 peaked after 5-30 steps on the benchmark datasets, then
        slowly decreased.
    tol : float, default=1e-4
        Stop when the relative objective decrease of an iteration is at most ``tol``.
    landmarks : {"random", "kmeans"}, default="random"
        Nystrom landmark initialization.
    normalize_rows : bool or "auto", default=False
        Scale every row of ``X`` to unit L2 norm (all-zero rows stay zero) before the feature
        map.  Applied block by block inside the model, identically in ``fit`` and in every
        prediction method, so train and test data get the same preprocessing; the median
        heuristic for ``gamma=None`` then runs on normalized rows.  ``"auto"`` (data-dependent)
        turns it on when the 1000 rows sampled for the median heuristic look like bag-of-words
        input: no negative entry and at most 20% of the entries nonzero (Bibtex, Enron,
        Medical, Corel5k, the yahoo tf-idf sets), and off otherwise (dense real-valued
        features such as Emotions, Scene, Yeast).  The resolved value is ``normalize_rows_``.
    n_trials : int or None, default=None
        Armijo trial steps evaluated per line-search pass.  The trials are tried in the same
        order whatever their grouping, so the fit is the same; only the work differs.  A trial
        costs a Gram product (``n D^2``), a pass costs a read of the data and the products
        ``X U``, ``X g``.  ``None``: 1 (``core.DEFAULT_N_TRIALS``), in memory or streamed: the
        first trial is accepted in 85-95 % of iterations, so a second trial per pass is mostly
        unused work (Bibtex, m=3000, in memory: 6.0 s against 10.5 s per iteration with 2).
        Raise it only when reading the data once costs more than several trials' compute
        (very slow remote stores).
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
    components_ : ndarray of shape (``n_features_in_``, m_total)
        Learned projections / landmarks (parts side by side).
    coef_ : ndarray of shape (n_phi, n_labels)
        ``W``.
    gamma_ : list of float
        Kernel width per feature part (``gamma``, or ``gamma_scale`` x the median heuristic).
    alpha_ : float
        The ridge weight of the fit (``alpha``, or the one ``alpha="auto"`` chose).
    alpha_scores_ : dict
        ``{alpha: leave-one-out top-1 rate}`` of ``alpha="auto"`` with frozen features
        (empty otherwise), at the kernel width chosen.
    gamma_scores_ : dict
        ``{gamma: best leave-one-out top-1 rate}`` of the kernel widths ``alpha="auto"``
        scored (empty when it scored only ``gamma_``).
    normalize_rows_ : bool
        Whether rows were L2-normalized (``normalize_rows`` resolved).
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

    gamma: float | None = None
    gamma_scale: float = DEFAULT_GAMMA_SCALE
    alpha: float | str = "auto"
    max_iter: int = DEFAULT_MAX_ITER
    tol: float = 1e-4

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
            self.n_features_map,
            "n_features_map",
            kind=numbers.Integral,
            low=1,
            fix="Use at least one feature, e.g. n_features_map=500",
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
            self.gamma_scale,
            "gamma_scale",
            low=0.0,
            low_inclusive=False,
            fix="Pass a positive multiplier of the median heuristic, e.g. gamma_scale=0.125",
        )
        if not (isinstance(self.alpha, str) and self.alpha == "auto"):
            check_scalar(
                self.alpha,
                "alpha",
                low=0.0,
                low_inclusive=False,
                fix='Use a positive ridge weight, e.g. alpha=1.0, or alpha="auto"',
            )
        _base.check_common_params(self)
        if self.n_trials is not None:
            check_scalar(self.n_trials, "n_trials", kind=numbers.Integral, low=1, high=20)
        if self.landmarks not in ("random", "kmeans"):
            raise param_error("landmarks", "must be 'random' or 'kmeans'", self.landmarks)
        if not (isinstance(self.normalize_rows, (bool, np.bool_)) or self.normalize_rows == "auto"):
            raise param_error(
                "normalize_rows",
                "must be True, False or 'auto'",
                self.normalize_rows,
                "e.g. normalize_rows='auto' (on for nonnegative sparse input)",
                exc=TypeError,
            )

    def _feature_row_bytes(self, X):
        """Bytes of one row of ``Phi``: the per-row work that sizes in-memory blocks."""
        m = int(self.n_features_map)
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
        """``(Blocked X, X converted)``: validated; in-memory data checked completely now."""
        X = as_features(X, "X")
        if _is_lazy(X):
            B = engine.as_blocked(X, name="X")
        else:
            X = check_features_memory(X, min_rows=1 if reset else 0)
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

        Y = as_labels(Y, "Y")
        is_handle = hasattr(Y, "read") and hasattr(Y, "kind")
        if not (is_handle or sp.issparse(Y) or isinstance(Y, (da.Array, engine.Blocked))):
            Y = np.asarray(Y)
        nY = Y.shape[0]
        if nY != n_rows:
            raise ValueError(
                f"Y must have as many rows as X: Y has {nY} rows, X has {n_rows}. Pass the labels "
                "of exactly the rows of X"
            )
        if is_handle:  # store array: validated in one streaming pass (labels are small)
            if Y.kind == "dense" and Y.shape[1] == 1:  # class labels of any integer values
                classes = _scan_store_labels(Y, class_column=True)
                codes_B = _class_codes(engine.as_blocked(Y, name="Y"), classes.astype(Y.dtype))
                return codes_B, int(classes.size), True, classes, False
            _scan_store_labels(Y, class_column=False)
            return engine.as_blocked(Y, name="Y"), int(Y.shape[1]), False, None, True
        if isinstance(Y, (da.Array, engine.Blocked)):
            Bd = Y if isinstance(Y, engine.Blocked) else None
            if Bd is None and Y.ndim == 1:
                classes = np.unique(engine.compute(Y)[0])
                check_classification_targets(classes)  # as for a NumPy y
                codes_arr = da.map_blocks(
                    lambda b: np.searchsorted(classes, b)[:, None],
                    Y,
                    new_axis=1,
                    chunks=(Y.chunks[0], (1,)),
                    dtype=np.int64,
                )
                return (engine.as_blocked(codes_arr, name="Y"), len(classes), True, classes, False)
            # 0/1 checked in each block as the passes read it (a NumPy Y is checked now)
            B = Bd or engine.as_blocked(Y, name="Y", check=check_01_block)
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
            if Ycsr.nnz == 0:  # refused before any work (lazy labels: after the first pass)
                raise core.no_label_error()
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
        S = sample_rows(X, 1000, rng)
        check_X_scale(S, "X", " of the row sample used for the initialization")
        return self._init_from_sample(S, rng)

    def _init_from_sample(self, S, rng):
        """:meth:`_init_parts` after the row sample ``S`` was drawn; the data-dependent
        defaults (``normalize_rows="auto"``, ``gamma=None``) are resolved on ``S``."""
        norm = self.normalize_rows
        row_norm = bool(_looks_like_bag_of_words(S) if norm == "auto" else norm)
        if row_norm:
            S = _blocks.l2_normalize_rows(S)
        if self.gamma is None:
            gamma = float(self.gamma_scale) * median_gamma(S)
        else:
            gamma = float(self.gamma)
        if not (np.isfinite(gamma) and gamma > 0):
            raise NonFiniteError(
                f"gamma=None: the median heuristic gave the kernel width {gamma!r} on a sample "
                "of X (squared distances overflowed or all rows are equal). Scale or normalize "
                "X (e.g. sklearn.preprocessing.StandardScaler) or pass gamma= explicitly"
            )
        kinds = ["fourier", "nystrom"] if self.features == "both" else [self.features]
        learn = bool(self.learn_features)
        # large state (core.large_state): U in the data's dtype from the start, each part's
        # float64 draw freed before the next (issue 25: 3.1 GB each at the Delicious shape)
        big = core.large_state(S.shape[1], self.n_features_map * len(kinds))
        udt = S.dtype if big and S.dtype == np.float32 else np.dtype(np.float64)
        Us, parts = [], []
        for kind in kinds:
            seed = int(rng.integers(2**31 - 1))
            if kind == "fourier":
                t = FourierFeatures(
                    n_components=self.n_features_map, gamma=gamma, random_state=seed
                )
                t.fit(S)
                Us.append(t.components_.astype(udt, copy=False))
                parts.append(("fourier", t.components_.shape[1], gamma, None, learn))
                del t
            else:
                t = NystromFeatures(
                    n_components=self.n_features_map,
                    gamma=gamma,
                    landmarks=self.landmarks,
                    normalize=not learn,
                    random_state=seed,
                )
                t.fit(S)
                Us.append(t.components_.astype(udt, copy=False))
                parts.append(("nystrom", t.components_.shape[1], gamma, t.normalization_, learn))
                del t
        return np.hstack(Us), _blocks.FeatureSpec.build(parts, row_norm=row_norm)

    def fit(
        self,
        X,
        Y=None,
        *,
        eval_set=None,
        eval_every=5,
        eval_metrics=None,
        checkpoint=None,
        checkpoint_every=5,
    ):
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
        checkpoint : str, os.PathLike or None
            Directory (or fsspec URL) for the fit's small state (``U``, ``W``, step size,
            counters, feature map, validation history; JSON + npz, written atomically).  If
            it already holds a checkpoint of this fit (same parameters and data shape), the
            fit resumes from it and ends with the same model as an uninterrupted fit; a
            checkpoint of another fit is an error.  Kept after the fit: calling ``fit`` again
            returns at once, or continues when ``max_iter`` was raised.
        checkpoint_every : int, default=5
            Save after every ``checkpoint_every``-th iteration (and when the fit stops).

        Returns
        -------
        self
        """
        self._validate_params()
        _checkpoint.check_checkpoint_args(checkpoint, checkpoint_every)
        if eval_set is not None:
            check_scalar(eval_every, "eval_every", kind=numbers.Integral, low=1)
            if eval_metrics is not None:
                metrics.parse_metrics(eval_metrics)  # a bad metric name fails before any work
        X = _base.open_if_path(X)
        names = None
        if _base.is_dataset(X):
            ds = X
            X = ds["X"]
            if Y is None:
                Y = _dataset_labels(ds)
                names = _class_names(ds, Y)
        XB, Xmem = self._prepare_X(X, reset=True)
        n = XB.shape[0]
        if n == 0:
            raise ValueError(
                "X has 0 samples; GIMC needs at least one row to fit. Check the store or array"
            )
        A, n_labels, codes, classes, multilabel = self._prepare_Y(Y, n)
        if names is not None and classes is not None:  # ranks of named classes -> the names
            if classes.min() < 0 or classes.max() >= names.size:
                raise ValueError(
                    f"{_handle_where(Y)}: class ranks must lie in [0, {names.size}) (the store's "
                    f"class_names); got {int(classes.min())}..{int(classes.max())}. The store "
                    "is corrupt; convert it again"
                )
            classes = names[classes]
        AB = engine.align(XB, engine.as_blocked(A, name="Y"), names=("X", "Y"))
        # refuse a pass that cannot fit a worker (locally: the memory available)
        _estimate.check_fits(_estimate.gimc_estimate(self, XB, AB, n_labels))
        rs = check_random_state(self.random_state)
        rng = np.random.default_rng(rs.randint(2**31 - 1))
        monitor, history = None, {}
        if eval_set is not None:
            probe = copy.copy(self)  # scores intermediate states; self is untouched until the end
            probe.spec_, probe.n_labels_, probe.multilabel_ = None, n_labels, multilabel
            probe.classes_ = classes if classes is not None else np.arange(n_labels)
            eval_ds = _base.open_if_path(eval_set)
            Xv, Yv = _split_eval_set(eval_ds)
            probe._check_eval_set(Xv, Yv)

            def score(it, U, W):
                probe.components_, probe.coef_ = U, W
                if _base.is_dataset(eval_ds):  # its labels, with its class names if any
                    history[it] = probe.evaluate(eval_ds, eval_metrics)
                else:
                    history[it] = probe.evaluate(Xv, eval_metrics, Y=Yv)

            def monitor(it, U, W):
                if it % int(eval_every) == 0:
                    score(it, U, W)

        ckpt = _checkpoint.open_checkpoint(checkpoint, checkpoint_every, self, X=XB, Y=AB)
        restored = ckpt.load() if ckpt is not None else None
        if restored is None:
            U0, spec = self._init_parts(Xmem if not _is_lazy(Xmem) else XB, rng)
        else:  # the saved feature map (gamma, Nystrom normalization) and history
            U0 = restored[1]["U"]
            spec = _spec_from_saved(
                restored[2]["parts"], restored[3], restored[2].get("row_norm", self.normalize_rows)
            )
            history.update({int(k): v for k, v in restored[2].get("eval_history", {}).items()})
        if ckpt is not None:
            ckpt.extra["parts"], ckpt.extra_arrays = _spec_to_saved(spec)
            ckpt.extra["row_norm"] = bool(spec.row_norm)  # normalize_rows="auto" resolved
            ckpt.extra["eval_history"] = history
        if eval_set is not None:
            probe.spec_ = spec
        XB, AB = engine.maybe_persist(XB, AB, budget=self.cache_bytes)
        n_trials = self.n_trials if self.n_trials is not None else core.DEFAULT_N_TRIALS
        if self.verbose:
            logger.setLevel(min(logger.level or logging.INFO, logging.INFO))
        t0 = time.perf_counter()
        res = core.fit_gimc(
            XB,
            AB,
            U0,
            spec,
            alpha=self._fit_alpha(),
            n_labels=n_labels,
            codes=codes,
            max_iter=int(self.max_iter),
            tol=float(self.tol),
            n_trials=int(n_trials),
            callback=self.callback,
            monitor=monitor,
            checkpoint=ckpt,
            own_U0=True,
            gamma_factors=self._gamma_factors(),
        )
        if eval_set is not None and res.n_iter not in history:  # the last iteration
            score(res.n_iter, res.U, res.W)
        self.fit_time_ = time.perf_counter() - t0
        self.components_ = res.U
        self.coef_ = res.W
        if res.gamma_factor != 1.0:  # alpha="auto" chose another kernel width (U scaled)
            spec = _blocks.FeatureSpec(
                tuple(dataclasses.replace(p, gamma=p.gamma * res.gamma_factor)
                      for p in spec.parts), spec.row_norm)  # fmt: skip
        self.spec_ = spec
        self.gamma_ = [p.gamma for p in spec.parts]
        self.alpha_ = float(res.alpha) if res.alpha is not None else float(self._fit_alpha())
        self.alpha_scores_ = dict(res.alpha_scores)
        self.gamma_scores_ = {g * self.gamma_[0] / res.gamma_factor: v
                              for g, v in res.gamma_scores.items()}  # fmt: skip
        self.normalize_rows_ = bool(spec.row_norm)
        self.objective_ = np.asarray(res.objective)
        self.n_iter_ = res.n_iter
        self.n_passes_ = res.n_passes
        self.n_trials_ = int(n_trials)
        self.eval_history_ = history
        self.multilabel_ = multilabel
        self.n_labels_ = n_labels
        self.classes_ = classes if classes is not None else np.arange(n_labels)
        return self

    def _gamma_factors(self):
        """The kernel widths ``alpha="auto"`` scores besides ``gamma_scale`` x the median
        heuristic, as factors of it: the median heuristic itself (``gamma_scale = 1``, the
        width of scikit-learn's RBFSampler / Nystroem peers), for frozen Fourier features
        with ``gamma=None`` (``core.width_selection`` decides whether the data are large
        enough for it to be worth a Gram more)."""
        auto = isinstance(self.alpha, str) and self.alpha == "auto"
        if not auto or self.learn_features or self.gamma is not None or self.features != "fourier":
            return None
        return None if float(self.gamma_scale) == 1.0 else (1.0 / float(self.gamma_scale),)

    def _fit_alpha(self):
        """``alpha`` as the fit takes it: ``"auto"`` stays ``"auto"`` (selected in the fit)
        for frozen features and is :data:`DEFAULT_ALPHA` for learned ones."""
        if isinstance(self.alpha, str):
            return "auto" if not self.learn_features else DEFAULT_ALPHA
        return float(self.alpha)

    def estimate(self, X, Y=None, *, client=None, calibrate=None):
        """Passes, per-worker memory and store size of ``fit(X, Y)``, before fitting.

        Reads no data block (labels stored as class ids are read once to count the classes),
        except that with ``calibrate`` (default: when ``X`` is a store or Dask array) it times
        the fit's own gradient and statistics passes on a slice of ``X`` (at most one row block
        and 64 MiB, windows spread over the rows) with the fit's state at full size
        (``time_calibration``: the block seconds, the driver's work, its own cost), which the
        time model (``ooc-lowrank estimate``, ``_estimate.rough_time``) uses.

        Returns
        -------
        dict
            ``passes_per_iteration`` (``typical`` 2, ``max``), ``max_passes``,
            ``store_bytes`` (inputs as stored), ``block_rows``, ``task_bytes`` (one block task:
            its input blocks and what the block functions allocate), ``worker_bytes`` (needed
            per worker: process, ``threads_per_worker`` tasks, reduction buffers, shipped
            state, cached input share), ``worker_memory_limit``, ``memory_cap`` and ``fits``
            (locally against the available memory), ``suggest`` (block_rows / n_features_map
            that fit) when it does not fit.  See :mod:`ooc_lowrank._estimate` for the model.
        """
        self._validate_params()
        probe = copy.copy(self)  # _prepare_X(reset=True) sets n_features_in_
        X, Y = _dataset_arrays(X, Y)
        XB, _ = probe._prepare_X(X, reset=True)
        A, n_labels, codes, _, _ = probe._prepare_Y(Y, XB.shape[0])
        AB = engine.align(XB, engine.as_blocked(A, name="Y"), names=("X", "Y"))
        if calibrate is None:
            calibrate = not XB.in_memory
        return _estimate.gimc_estimate(self, XB, AB, n_labels, client=client, codes=codes,
                                       calibrate=bool(calibrate))  # fmt: skip

    # ------------------------------------------------------------------ prediction

    def _dtype_for(self, B):
        return B.dtype if B.dtype in (np.float32, np.float64) else np.dtype(np.float64)

    def _check_model(self):
        """Cheap consistency checks of the fitted attributes before any kernel runs (they may
        have been modified in memory): types, float dtypes and shapes against ``spec_``."""
        spec = self.spec_
        want = {
            "components_": (int(self.n_features_in_), spec.n_params),
            "coef_": (spec.n_features, int(self.n_labels_)),
        }
        for name, shape in want.items():
            a = getattr(self, name)
            if not isinstance(a, np.ndarray):
                raise TypeError(
                    f"GIMC.{name} must be a NumPy array; got {type(a).__name__}. The fitted "
                    "attributes were modified; refit or reload the model"
                )
            if a.dtype not in (np.float32, np.float64) or a.shape != shape:
                raise ValueError(
                    f"GIMC.{name} must be a float32/float64 array of shape {shape} (from "
                    f"n_features_in_={self.n_features_in_}, n_labels_={self.n_labels_} and "
                    f"the feature parts); got {a.dtype} of shape {a.shape}. The fitted "
                    "attributes were modified; refit or reload the model"
                )
        for i, p in enumerate(spec.parts):
            if p.M is not None and np.shape(p.M) != (p.m, p.m):
                raise ValueError(
                    f"GIMC.spec_.parts[{i}].M must have shape {(p.m, p.m)}; got "
                    f"{np.shape(p.M)}. Refit or reload the model"
                )
        if np.shape(self.classes_) != (int(self.n_labels_),):
            raise ValueError(
                f"GIMC.classes_ must have shape ({self.n_labels_},) (n_labels_); got "
                f"{np.shape(self.classes_)}. Refit or reload the model"
            )

    def _args(self, dt):
        self._check_model()
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
        dataset = _base.open_if_path(dataset)
        names = None
        if _base.is_dataset(dataset):
            X = dataset["X"]
            if Y is None:
                Y = _dataset_labels(dataset)
                names = _class_names(dataset, Y)
        else:
            X = dataset
        B, _ = self._prepare_X(X, reset=False)
        if Y is None:
            raise ValueError("evaluate needs labels: pass a dataset with 'Y' or 'y', or Y=...")
        codes = False
        if self.multilabel_ and (np.ndim(Y) != 2 or Y.shape[1] != self.n_labels_):
            raise ValueError(
                f"Y must be a 0/1 label matrix with {self.n_labels_} columns (the labels of this "
                f"multi-label model); got shape {getattr(Y, 'shape', np.shape(Y))}. Evaluate on "
                "data with the same labels as in fit"
            )
        if not self.multilabel_:
            # class labels (in memory, a store column or a Dask array) -> codes of classes_,
            # block by block; a class unseen in fit gets -1 (always a miss)
            codes = True
            if hasattr(Y, "read") or isinstance(Y, engine.Blocked) or _is_lazy(Y):
                if getattr(Y, "ndim", 2) == 1:  # a 1-D Dask array of labels
                    Y = Y[:, None]
                YB = engine.as_blocked(Y, name="Y")
                if YB.shape[1] != 1 or YB.kind != "dense":
                    raise ValueError(
                        f"Y must hold one class label per row for this multi-class model; got "
                        f"shape {YB.shape} ({YB.kind}). Pass the class column (e.g. store "
                        "array 'y')"
                    )
                classes = self.classes_ if names is None else _store_positions(self.classes_, names)
                Y = _class_codes(YB, classes)
            else:
                Y = Y.toarray() if sp.issparse(Y) else Y
                Y = metrics.class_codes_block(np.asarray(Y).ravel(), self.classes_)
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
        from ooc_lowrank.storage import DatasetWriter, check_destination, input_stores

        dataset = _base.open_if_path(dataset)
        check_is_fitted(self, "coef_")
        check_scalar(top_k, "top_k", kind=numbers.Integral, low=1, fix="Ask for at least one label")
        check_destination(  # before any work
            out_url, overwrite=overwrite, inputs=input_stores(dataset), name="out_url"
        )
        X = dataset["X"] if _base.is_dataset(dataset) else dataset
        B, _ = self._prepare_X(X, reset=False)
        k = min(int(top_k), self.n_labels_)
        dt = self._dtype_for(B)
        U, spec, W = self._args(dt)
        arr = engine.map_rows(
            _blocks.topk_block, B, args=(U, spec, W, k), n_cols=2 * k, dtype=np.float64
        )
        (out,) = engine.compute(arr)
        br = int(getattr(dataset, "block_rows", 0) or 65536)
        # multi-class: labels in the classes' own values when they are numbers (int64 or
        # float64); other classes (strings) are written as indices into attrs["classes"]
        attrs = {"top_k": k, "model": "GIMC"}
        kind = "i" if self.multilabel_ else self.classes_.dtype.kind
        lab_dtype = {"i": "int64", "u": "int64", "b": "int64", "f": "float64"}.get(kind)
        if lab_dtype is None:
            lab_dtype = "int64"
            attrs["classes"] = [str(c) for c in self.classes_]
        with DatasetWriter(out_url, block_rows=br, overwrite=overwrite, attrs=attrs) as w:
            w.add_dense("labels", n_cols=k, dtype=lab_dtype)
            w.add_dense("scores", n_cols=k, dtype="float32")
            for s in range(0, out.shape[0], br):
                blk = out[s : s + br]
                lab = blk[:, :k].astype(np.int64)
                if not self.multilabel_ and "classes" not in attrs:
                    lab = self.classes_[lab].astype(lab_dtype)
                w.append(labels=lab, scores=blk[:, k:].astype(np.float32))
        return out_url

    # ------------------------------------------------------------------ persistence

    def _state(self):
        """``(params, arrays, extra)`` as saved; :meth:`_from_saved` reads them back."""
        check_is_fitted(self, "coef_")
        arrays = {"components": self.components_, "coef": self.coef_, "objective": self.objective_}
        parts, m_arrays = _spec_to_saved(self.spec_)
        arrays.update(m_arrays)
        extra = {
            "parts": parts,
            "n_features_in": self.n_features_in_,
            "n_labels": self.n_labels_,
            "multilabel": self.multilabel_,
            "n_iter": self.n_iter_,
            "n_passes": self.n_passes_,
            "n_trials": self.n_trials_,
            "alpha": float(self.alpha_),
            "normalize_rows": bool(self.spec_.row_norm),
            "eval_history": {str(k): v for k, v in getattr(self, "eval_history_", {}).items()},
        }
        if self.multilabel_ or self.classes_.dtype.kind in "iufb":
            arrays["classes"] = self.classes_
        else:
            extra["classes"] = [str(c) for c in self.classes_]
        params = _base.saved_params(self)
        return params, arrays, extra

    @classmethod
    def _from_saved(cls, params, arrays, extra):
        """The estimator of a loaded model; every JSON value and array is checked first
        (type, dtype, shape against the metadata and each other, finiteness)."""
        est = build_checked(cls, check_params(cls, params), cls._validate_params)
        r = ModelReader(arrays, extra)
        raw_parts = r.value("parts", "list")
        if not raw_parts:
            raise ModelFileError("model.json", "extra.parts", "must list at least one part", "[]")
        parts = []
        for i, item in enumerate(raw_parts):
            key = f"extra.parts[{i}]"
            if not (isinstance(item, list) and len(item) == 5):
                raise ModelFileError(
                    "model.json", key, "must be [kind, m, gamma, has_M, learn]", repr(item)
                )
            kind, m, gamma, has_M, learn = item
            check_value(kind, f"{key} kind", "str", choices=("fourier", "nystrom"))
            check_value(m, f"{key} m", "int", low=1)
            check_value(gamma, f"{key} gamma", "float")
            if gamma <= 0:
                raise ModelFileError("model.json", f"{key} gamma", "must be > 0", repr(gamma))
            check_value(has_M, f"{key} has_M", "bool")
            check_value(learn, f"{key} learn", "bool")
            M = r.array(f"M{i}", (m, m), meaning=f"m x m of part {i}") if has_M else None
            parts.append((kind, m, float(gamma), M, learn))
        # models saved before normalize_rows="auto" existed hold the bool in their params
        row_norm = r.value("normalize_rows", "bool", default=params.get("normalize_rows") is True)
        est.spec_ = _blocks.FeatureSpec.build(parts, row_norm=row_norm)
        est.normalize_rows_ = row_norm
        d = r.value("n_features_in", "int", low=1)
        n_labels = r.value("n_labels", "int", low=1)
        est.n_features_in_, est.n_labels_ = d, n_labels
        est.multilabel_ = r.value("multilabel", "bool")
        est.components_ = r.array(
            "components",
            (d, est.spec_.n_params),
            meaning="n_features_in x the sum of the parts' m, from model.json",
        )
        est.coef_ = r.array(
            "coef",
            (est.spec_.n_features, n_labels),
            meaning="the parts' feature count x n_labels, from model.json",
        )
        est.objective_ = r.array("objective", (None,))
        est.gamma_ = [p.gamma for p in est.spec_.parts]
        alpha = est.alpha if not isinstance(est.alpha, str) else est._fit_alpha()
        est.alpha_ = r.value("alpha", "float", default=alpha)  # older models: the parameter
        est.alpha_scores_ = {}
        est.gamma_scores_ = {}
        est.n_iter_ = r.value("n_iter", "int", low=0)
        est.n_passes_ = r.value("n_passes", "int", low=0)
        est.n_trials_ = r.value("n_trials", "int", low=1, default=2)  # older models lack it
        history = r.value("eval_history", "dict", default={})
        try:
            est.eval_history_ = {int(k): v for k, v in history.items()}
        except ValueError:
            raise ModelFileError(
                "model.json", "extra.eval_history", "must map iteration numbers to metrics"
            ) from None
        if "classes" in arrays:
            est.classes_ = r.array("classes", (n_labels,), kind="label", meaning="n_labels")
        else:
            classes = r.value("classes", "list")
            if len(classes) != n_labels or not all(isinstance(c, str) for c in classes):
                raise ModelFileError(
                    "model.json",
                    "extra.classes",
                    f"must list n_labels={n_labels} class names",
                    f"{len(classes)} entries",
                )
            est.classes_ = np.asarray(classes)
        r.finish()
        est._check_model()
        return est

    def __sklearn_tags__(self):
        return gimc_tags(super().__sklearn_tags__())


def gimc_tags(tags):
    """scikit-learn tags of GIMC and GIMCCV: CSR input; multi-class and multi-label targets.

    Two multi-label checks of ``parametrize_with_checks`` fail on purpose (``tests/test_gimc.py``
    lists them): ``predict`` of a multi-label model returns a ``scipy.sparse`` CSR 0/1 matrix
    (n_samples, n_labels), not a dense ndarray, because label counts reach the thousands
    (``predict_topk`` / ``decision_function`` give dense output).
    """
    tags.input_tags.sparse = True
    tags.classifier_tags.multi_label = True
    return tags


def _spec_to_saved(spec):
    """``(parts, arrays)``: the feature map as JSON rows and its ``M{i}`` arrays."""
    parts, arrays = [], {}
    for i, p in enumerate(spec.parts):
        parts.append([p.kind, p.m, p.gamma, p.M is not None, p.learn])
        if p.M is not None:
            arrays[f"M{i}"] = p.M
    return parts, arrays


def _spec_from_saved(parts, arrays, row_norm):
    """Inverse of :func:`_spec_to_saved`."""
    out = []
    for i, (kind, m, gamma, has_M, learn) in enumerate(parts):
        out.append((kind, int(m), float(gamma), arrays[f"M{i}"] if has_M else None, bool(learn)))
    return _blocks.FeatureSpec.build(out, row_norm=bool(row_norm))


def _eval_block(Xb, Yb, U, spec, W, K, parsed, codes):
    top = _blocks.topk_block(Xb, U, spec, W, K)[:, :K]
    return metrics.metric_sums_block(Yb, top, parsed, codes=codes)
