"""``InductiveMatrixCompletion``: two-sided IMC / GIMC-LFF as a scikit-learn style estimator.

Observed entries of an ``n1 x n2`` matrix (an observation store with a ``coo`` array ``obs``, that
array, a store path, ``(rows, cols, values)`` with ``shape=``, or a scipy.sparse matrix) plus row
features ``X_row`` (n1, d1) and column features ``X_col`` (n2, d2), each dense or CSR, in memory,
Dask or store arrays.  Model ``phi_U(X_row) W H^T phi_V(X_col)^T`` (SPEC 1.5.1), fitted by
:func:`ooc_lowrank.imc.core.fit_imc`.  Only ``P = phi_U(X_row) W`` and ``Q = phi_V(X_col) H``
(n x k) live in memory; no ``n1 x n2`` matrix is ever formed.
"""

from __future__ import annotations

import copy
import numbers
import os

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from ooc_lowrank import _base, engine
from ooc_lowrank._inputs import as_features
from ooc_lowrank._persist import (
    ModelFileError,
    ModelReader,
    build_checked,
    check_params,
)
from ooc_lowrank._validation import check_random_state, check_scalar, param_error
from ooc_lowrank.gimc import _blocks as _gb
from ooc_lowrank.gimc.features import FourierFeatures, NystromFeatures
from ooc_lowrank.glrl import _blocks as _glrl_blocks
from ooc_lowrank.glrl.estimator import (
    _obs_handle,
    _pairs_to_csr,
    check_metrics,
    observation_metrics,
)
from ooc_lowrank.imc import _blocks, core
from ooc_lowrank.kernels import glrl as _kg

FEATURE_MAPS = ("identity", "fourier", "nystrom")
_TOPK_ROWS = 4096


def observations(X, shape, block_rows=None, name="X"):
    """Row-blocked observations and the matrix shape: store ``coo`` input as it is, array input
    as a row-sorted CSR (indices checked against ``shape`` here)."""
    h = _obs_handle(X, name)
    if h is not None:
        if shape is not None and tuple(int(s) for s in shape) != tuple(h.shape):
            raise param_error(
                "shape", f"must match the store's shape {tuple(h.shape)}", shape, "Omit shape="
            )
        return engine.as_blocked(h, block_rows=block_rows, name=name), tuple(map(int, h.shape))
    csr = _pairs_to_csr(X, shape, name)
    return engine.as_blocked(csr, block_rows=block_rows, name=name), tuple(csr.shape)


def transposed(B, block_rows=None):
    """The observations sorted by column, ``(n2, n1)`` CSR blocks, when they are held in memory
    (the column side's passes then fuse with its X-passes); None for store / Dask input, whose
    column side takes three passes per product instead of a transposed copy of ``Omega``."""
    if not B.in_memory:
        return None
    return engine.as_blocked(B.source.T.tocsr(), block_rows=block_rows, name="X")


def check_observations(B, shape, name="X", zero_one=False):
    """One streaming pass of validation counts (GLRL's): errors before any fitting work."""
    c = engine.map_reduce(_glrl_blocks.check_block, B, args=(int(shape[1]), False), offset=True)
    nnz, nonfinite, oor, not01 = int(c[0]), int(c[1]), int(c[3]), int(c[7])
    if nnz == 0:
        raise ValueError(
            f"{name} must hold at least one observed entry; got an empty observation set. "
            "Pass the observed (row, col, value) triplets"
        )
    if oor:
        raise ValueError(
            f"{name} column indices must lie in [0, {shape[1]}); {oor} do not. Use 0-based "
            "indices and a shape that covers every index"
        )
    if nonfinite:
        raise ValueError(f"{name} values must be finite; got {nonfinite} NaN/inf. Drop them")
    if zero_one and not01:
        raise ValueError(
            f"{name} values must be 0 (different cluster) or 1 (same cluster); {not01} of "
            f"{nnz} are not. Encode must-link as 1 and cannot-link as 0"
        )
    return nnz


def features_of(X, name):
    """A store path or ``Dataset`` gives its array ``X``; anything else is converted at the
    boundary (:func:`ooc_lowrank._inputs.as_features`: DataFrames, pydata sparse, float16 and
    integer features; 1-D refused)."""
    X = _base.open_if_path(X)
    if _base.is_dataset(X):
        old_columns = str(X.attrs.get("generator", "")).endswith(".columns")
        if "X" not in X.names and old_columns and "Y" in X.names:
            return X["Y"]  # a generator's column store written before the features were "X"
        if "X" not in X.names:
            raise ValueError(
                f"{name} must be a feature store with an array 'X'; the store has "
                f"{list(X.names)}. Convert the features with an ooc-lowrank converter"
            )
        X = X["X"]
    return as_features(X, name)


def _side_blocked(X, n_expected, what, name, block_rows):
    X = _side_features(X, n_expected, what, name)
    return engine.as_blocked(X, block_rows=block_rows, name=name)


def _side_features(X, n_expected, what, name):
    """``X`` as features, checked to have one row per ``what`` (``n_expected``) and >= 1 column."""
    if X is None:
        raise param_error(name, "is required", None, f"Pass the {what} features (n, d)")
    X = features_of(X, name)
    if int(X.shape[0]) != int(n_expected):
        raise ValueError(
            f"{name} must have one row per {what} of the observed matrix: the observations "
            f"have {n_expected} {what}s, {name} has {X.shape[0]} rows. Pass the features of "
            f"every {what} in index order (or fix shape=)"
        )
    if int(X.shape[1]) < 1:
        raise param_error(
            name, "must have at least one feature column", tuple(X.shape),
            f"Pass the {what} features as an (n, d) array with d >= 1",
        )  # fmt: skip
    return X


def _physical_memory():
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not POSIX
        return None


def check_map_fits(n_features_map, B, what):
    """Refuse, before any work, a feature map whose parameters (``d x n_features_map``
    float64: Fourier directions or Nystrom landmarks) and the features of one row block
    (``rows x 2 n_features_map``) cannot fit in half of this machine's memory."""
    rows = int(np.diff(np.asarray(B.bounds, dtype=np.int64)).max(initial=0))
    per_m = 8 * (int(B.shape[1]) + 2 * rows)
    need = per_m * int(n_features_map)
    ram = _physical_memory()
    if ram is not None and need > ram // 2:
        raise param_error(
            "n_features_map",
            f"needs {need / 2**30:.3g} GiB for the {what} feature map and one block of its "
            f"features ({B.shape[1]} features, {rows} rows a block), more than half of this "
            f"machine's {ram / 2**30:.3g} GiB",
            n_features_map,
            f"Use n_features_map <= {max(1, ram // 2 // per_m)}",
        )


@_base.params
class _SharedParams(_base.RunControl, _base.Streaming):
    """The parameters :class:`InductiveMatrixCompletion` and
    :class:`~ooc_lowrank.GIMCClustering` share (same names, same meaning, same defaults; the
    clustering hands them on to the completion it runs)."""

    n_features_map: int = 500
    gamma: float | None = None
    max_iter: int = 20
    cg_tol: float = 1e-3
    tol: float = 1e-6


@_base.params
class InductiveMatrixCompletion(_base.Loadable, BaseEstimator, _SharedParams):
    """Two-sided inductive matrix completion with ALS + CG (LEML-style), optionally with learned
    Fourier / Nystrom features on both sides (GIMC-LFF / GIMC-LNYS, SPEC 1.5).

    Parameters
    ----------
    n_components : int, default=10
        Rank ``k``.
    alpha : float, default=1.0
        Regularization ``alpha/2 (||W||^2 + ||H||^2)``.
    row_map, col_map : {"identity", "fourier", "nystrom"}, default="identity"
        Feature map of each side.
    n_features_map : int, default=500
        ``m``: Fourier projections (2m features) or Nystrom landmarks, per side.
    gamma : float or None, default=None
        RBF width for both non-identity maps; ``None``: median heuristic per side.
    learn_features : bool, default=False
        Learn ``U`` and ``V`` by one Armijo step per iteration (GIMC-LFF / LNYS).  Nystrom maps
        then use raw kernel columns (``M = I``).
    max_iter : int, default=20
        Outer iterations (one W-step, one H-step, then U/V steps).
    cg_iter : int, default=20
        CG iterations per W- or H-step (warm-started).
    cg_tol : float, default=1e-3
        CG stops at residual ``cg_tol * ||r_0||``.
    tol : float, default=1e-6
        Relative objective decrease under which the fit stops.
    block_rows : int or None
        Rows per block for in-memory inputs (default: about 16 MB).
    cache_bytes : int or None, default=None
        A learned or random feature map's ``Phi`` (both sides together) is computed once per
        W- / H-step and held in memory (or on the workers) up to this many bytes; above it every
        pass recomputes it from ``X``.  ``None``: the engine's budget
        (``engine.DEFAULT_CACHE_BYTES``); ``0`` always recomputes.
    random_state : int, RandomState, Generator or None
        Seed of the feature maps and the initialization.
    callback : callable(iteration, elapsed, objective) or None
        Called after the initialization (iteration 0) and every outer iteration.
    verbose : bool, default=False
        Log one line per outer iteration at INFO level on the ``"ooc_lowrank"`` logger (DEBUG
        otherwise).

    Attributes
    ----------
    W_ : ndarray of shape (D1, n_components)
    H_ : ndarray of shape (D2, n_components)
    row_params_, col_params_ : ndarray of shape (d, m) or None
        Feature parameters ``U`` and ``V`` (None for the identity map).
    row_factors_ : ndarray of shape (n1, n_components)
        ``P = phi_U(X_row) W``.
    col_factors_ : ndarray of shape (n2, n_components)
        ``Q = phi_V(X_col) H``.
    objective_ : ndarray of shape (``n_iter_`` + 1,)
    cg_iterations_ : ndarray of shape (``n_iter_``, 2)
    n_iter_, n_passes_ : int
    shape_ : (int, int)

    Notes
    -----
    **scikit-learn's estimator checks** (``parametrize_with_checks``) assume ``fit(X, y)`` on
    samples and targets; this estimator's input is different. ``fit`` takes the observed entries of
    one (n_rows, n_cols) matrix (a store, ``(rows, cols, values)`` or a scipy.sparse matrix whose
    stored entries are the observations) and ``predict`` takes ``(rows, cols)`` index pairs; it also
    needs the side features ``X_row=`` and ``X_col=``, which the checks never pass. The checks that
    fit do not apply: their ``X`` would be a fully observed matrix, their ``y`` has no meaning here,
    and ``transform_rows`` / ``transform_cols`` embed row or column features, not the samples of
    ``fit``. The API checks (clone, repr, ``get_params`` / ``set_params``, ``__init__`` storing only
    its parameters, tags) do apply and run in ``tests/test_sklearn_api.py``.
    """

    n_components: int = 10
    alpha: float = 1.0
    row_map: str = "identity"
    col_map: str = "identity"
    learn_features: bool = False
    cg_iter: int = 20

    # ------------------------------------------------------------------ validation
    def _check_params(self):
        check_scalar(self.n_components, "n_components", kind=numbers.Integral, low=1)
        check_scalar(
            self.alpha, "alpha", low=0.0, fix="Use a non-negative regularization, e.g. 1.0"
        )
        for nm in ("row_map", "col_map"):
            v = getattr(self, nm)
            if v not in FEATURE_MAPS:
                raise param_error(nm, f"must be one of {FEATURE_MAPS}", v)
        check_scalar(self.n_features_map, "n_features_map", kind=numbers.Integral, low=1)
        if self.gamma is not None:
            check_scalar(self.gamma, "gamma", low=0.0, low_inclusive=False)
        check_scalar(self.cg_iter, "cg_iter", kind=numbers.Integral, low=1)
        check_scalar(self.cg_tol, "cg_tol", low=0.0)
        _base.check_common_params(self)

    def _side(self, kind, X, rng):
        """A :class:`core.Side` for feature map ``kind`` on blocked ``X``."""
        if kind == "identity":
            return core.Side(X, None, None)
        learn = bool(self.learn_features)
        src = X.source if X.source is not None else X.dask
        seed = int(rng.integers(2**31 - 1))
        if kind == "fourier":
            t = FourierFeatures(
                n_components=self.n_features_map, gamma=self.gamma, random_state=seed
            ).fit(src)
            spec = _gb.FeatureSpec.build(
                [("fourier", t.components_.shape[1], t.gamma_, None, learn)]
            )
        else:
            t = NystromFeatures(
                n_components=self.n_features_map,
                gamma=self.gamma,
                normalize=not learn,
                random_state=seed,
            )
            t.fit(src)
            spec = _gb.FeatureSpec.build(
                [("nystrom", t.components_.shape[1], t.gamma_, t.normalization_, learn)]
            )
        return core.Side(X, spec, np.array(t.components_, dtype=np.float64))

    def _prepare(self, X, X_row, X_col, shape, zero_one=False, name="X"):
        self._check_params()
        obs, shape = observations(X, shape, self.block_rows, name)
        Br = _side_blocked(X_row, shape[0], "row", "X_row", self.block_rows)
        Bc = _side_blocked(X_col, shape[1], "column", "X_col", self.block_rows)
        for mp, B, what in ((self.row_map, Br, "row"), (self.col_map, Bc, "column")):
            if mp != "identity":
                check_map_fits(self.n_features_map, B, what)
        check_observations(obs, shape, name, zero_one=zero_one)
        return obs, shape, Br, Bc

    # ------------------------------------------------------------------ fit
    def fit(self, X, y=None, *, X_row=None, X_col=None, shape=None):
        """Fit on observed entries with row features ``X_row`` and column features ``X_col``.

        Parameters
        ----------
        X : Dataset, store path, coo ArrayHandle, (rows, cols, values) or scipy.sparse
            Observed entries of the (n1, n2) matrix; indices 0-based.
        y : None
            Ignored.
        X_row : Dataset, store path, array-like or CSR of shape (n1, d1)
            Row features (a store's array ``X``).
        X_col : Dataset, store path, array-like or CSR of shape (n2, d2)
            Column features (a store's array ``X``).
        shape : (int, int), optional
            Required for ``(rows, cols, values)`` input.

        Returns
        -------
        self
        """
        obs, shape, Br, Bc = self._prepare(X, X_row, X_col, shape)
        return self._fit_prepared(obs, shape, Br, Bc)

    def _fit_prepared(self, obs, shape, Br, Bc, precondition=False, maps=None):
        """The fit on validated, blocked inputs (:meth:`_prepare`'s output).

        ``precondition``: see :func:`ooc_lowrank.imc.core.fit_imc`; a dict is the cache of fits
        that differ only in ``alpha`` (same observations, sides and seed): it also keeps the
        observations' transposed copy.  ``maps``: a dict shared by fits of the same sides and
        seed on any observations (a selection's candidates and its refit): the feature maps
        and their features at the initial parameters are made once (no pass after the first
        fit); the features are handed to the last fit (``maps["last"] = True``), so that they
        are not held twice while it runs.
        """
        rs = check_random_state(self.random_state)
        rng = np.random.default_rng(rs.randint(2**31 - 1))
        if maps is not None and "sides" in maps:
            rows, cols = (copy.copy(s) for s in maps["sides"])  # U is replaced, never written
            rng = copy.deepcopy(maps["rng"])  # as left by the two maps' draws
        else:
            rows = self._side(self.row_map, Br, rng)
            cols = self._side(self.col_map, Bc, rng)
        cache = precondition if isinstance(precondition, dict) else {}
        if "obs_t" not in cache:
            cache["obs_t"] = transposed(obs, self.block_rows)
        prob = core.Problem(obs, rows, cols, self.alpha, cache["obs_t"],
                            cache_bytes=self.cache_bytes)  # fmt: skip
        if maps is not None:
            if "sides" not in maps:
                # copies: the fit replaces its sides' U
                maps["sides"], maps["rng"] = (copy.copy(rows), copy.copy(cols)), copy.deepcopy(rng)
                maps["held"] = prob.hold_initial_features()
            else:
                last = bool(maps.get("last"))
                prob.hold_initial_features(maps.pop("held") if last else maps["held"], not last)
        res = core.fit_imc(
            prob,
            int(self.n_components),
            max_iter=int(self.max_iter),
            cg_iter=int(self.cg_iter),
            cg_tol=float(self.cg_tol),
            tol=float(self.tol),
            rng=rng,
            callback=self.callback,
            verbose=self.verbose,
            precondition=precondition,
        )
        self.W_, self.H_ = res.W, res.H
        self.row_params_, self.col_params_ = res.U, res.V
        self._row_spec, self._col_spec = rows.spec, cols.spec
        self.row_factors_, self.col_factors_ = res.P, res.Q
        self.objective_ = np.asarray(res.objective)
        self.cg_iterations_ = np.asarray(res.cg_iterations, dtype=np.int64).reshape(-1, 2)
        self.step_sizes_ = np.asarray(res.step_sizes, dtype=np.float64).reshape(-1, 2)
        self.n_iter_, self.n_passes_, self.converged_ = res.n_iter, res.n_passes, res.converged
        self.shape_ = tuple(shape)
        return self

    # ------------------------------------------------------------------ prediction
    def _pairs(self, rows, cols=None):
        check_is_fitted(self, "W_")
        out = []
        for nm, a, lim in (("rows", rows, self.shape_[0]), ("cols", cols, self.shape_[1])):
            if a is None:
                continue
            a = np.asarray(a)
            if a.ndim != 1 or a.dtype.kind not in "iu":
                raise TypeError(f"{nm} must be a 1-D integer array; got {a.dtype} {a.shape}")
            if a.size and (a.min() < 0 or a.max() >= lim):
                bad = int(a.min() if a.min() < 0 else a.max())
                raise ValueError(f"{nm} must lie in [0, {lim}); got {bad}. Use 0-based indices")
            out.append(a.astype(np.int64))
        return out

    def predict(self, rows, cols):
        """``p_i^T q_j`` at the pairs ``(rows[t], cols[t])``; ndarray of shape (n_pairs,)."""
        rows, cols = self._pairs(rows, cols)
        if rows.size != cols.size:
            raise ValueError(
                f"rows and cols must have the same length; got {rows.size} and {cols.size}"
            )
        out = np.empty(rows.size, dtype=np.float64)
        k = self.row_factors_.shape[1]
        _kg.predict_pairs(rows, cols, self.row_factors_, self.col_factors_, np.ones(k), out)
        return out

    def top_k(self, rows, k=10):
        """The ``k`` best columns of each given row (descending), computed one row block at a
        time (no (n_rows, n2) score matrix).

        Returns
        -------
        indices : ndarray of shape (len(rows), k), int64
        scores : ndarray of shape (len(rows), k)
        """
        (rows,) = self._pairs(rows)
        check_scalar(k, "k", kind=numbers.Integral, low=1, high=self.shape_[1])
        idx = np.empty((rows.size, k), dtype=np.int64)
        val = np.empty((rows.size, k), dtype=np.float64)
        r = self.row_factors_.shape[1]
        for s in range(0, rows.size, _TOPK_ROWS):
            sl = slice(s, s + _TOPK_ROWS)
            _kg.top_k_rows(
                rows[sl], self.row_factors_, self.col_factors_, np.ones(r), int(k), idx[sl], val[sl]
            )
        return idx, val

    def evaluate(self, X, metrics=("mae", "rmse"), *, shape=None):
        """MAE / RMSE (and ``"sign_accuracy"``) of ``P Q^T`` on held-out observed entries of the
        fitted matrix (one pass, GLRL's metrics).

        Parameters
        ----------
        X : store, Dataset, coo ArrayHandle, (rows, cols, values) or scipy.sparse
        metrics : sequence of {"mae", "rmse", "sign_accuracy"} or comma-separated str

        Returns
        -------
        dict
        """
        check_is_fitted(self, "W_")
        metrics = check_metrics(metrics)
        B, shp = observations(X, shape or (self.shape_ if _obs_handle(X) is None else None))
        if tuple(shp) != tuple(self.shape_):
            raise ValueError(
                f"X must index the fitted matrix shape {self.shape_}; got {shp}. "
                "Convert the test file with --shape ROWS,COLS"
            )
        k = self.row_factors_.shape[1]
        return observation_metrics(B, self.row_factors_, self.col_factors_, np.ones(k), metrics)

    def predict_to_store(self, dataset, out_url, top_k=5, *, overwrite=False):
        """For (new) rows with features ``dataset`` (a store's ``X``, or an array), write the
        ``top_k`` best columns by ``phi_U(x) W H^T phi_V(X_col)^T`` to a new store: dense
        ``labels`` (int64 column indices) and ``scores`` (float32), (n_rows, top_k), computed
        one row block at a time."""
        from ooc_lowrank.storage import DatasetWriter, check_destination, input_stores

        check_is_fitted(self, "W_")
        check_scalar(top_k, "top_k", kind=numbers.Integral, low=1, fix="Ask for at least one")
        check_destination(  # before any work
            out_url, overwrite=overwrite, inputs=input_stores(dataset), name="out_url"
        )
        X = features_of(dataset, "dataset")
        k = min(int(top_k), self.shape_[1])
        P = self.transform_rows(X)
        r = P.shape[1]
        br = int(getattr(X, "block_rows", 0) or 65536)
        attrs = {"top_k": k, "model": "InductiveMatrixCompletion"}
        with DatasetWriter(out_url, block_rows=br, overwrite=overwrite, attrs=attrs) as w:
            w.add_dense("labels", n_cols=k, dtype="int64")
            w.add_dense("scores", n_cols=k, dtype="float32")
            for s in range(0, P.shape[0], br):
                rows = np.arange(s, min(s + br, P.shape[0]), dtype=np.int64)
                idx = np.empty((rows.size, k), dtype=np.int64)
                val = np.empty((rows.size, k), dtype=np.float64)
                _kg.top_k_rows(rows, P, self.col_factors_, np.ones(r), k, idx, val)
                w.append(labels=idx, scores=val.astype(np.float32))
        return out_url

    def _embed(self, X, params, spec, F):
        B = engine.as_blocked(features_of(X, "X"), name="X")
        side = core.Side(B, spec, params)
        if int(B.shape[1]) != (F.shape[0] if spec is None else params.shape[0]):
            raise ValueError(
                f"X has {B.shape[1]} features; the model was fitted with a different count. "
                "Pass features with the same columns as in fit"
            )
        (out,) = engine.compute(
            engine.map_rows(
                _blocks.project_block, B, args=(side.u_arg(), spec, F), n_cols=F.shape[1]
            )
        )
        return np.asarray(out)

    def transform_rows(self, X):
        """``phi_U(X) W`` (n, k) for (new) row features: the inductive row embedding."""
        check_is_fitted(self, "W_")
        return self._embed(X, self.row_params_, self._row_spec, self.W_)

    def transform_cols(self, X):
        """``phi_V(X) H`` (n, k) for (new) column features."""
        check_is_fitted(self, "W_")
        return self._embed(X, self.col_params_, self._col_spec, self.H_)
    # ------------------------------------------------------------------ persistence
    def _state(self):
        """``(params, arrays, extra)`` of the fitted model, as :meth:`save` writes them and
        :meth:`_from_saved` reads them back."""
        check_is_fitted(self, "W_")
        params = _base.saved_params(self)
        arrays = {
            "W": self.W_,
            "H": self.H_,
            "row_factors": self.row_factors_,
            "col_factors": self.col_factors_,
            "objective": self.objective_,
            "cg_iterations": self.cg_iterations_,
            "step_sizes": self.step_sizes_,
        }
        extra = {
            "shape": list(self.shape_),
            "n_iter": self.n_iter_,
            "n_passes": self.n_passes_,
            "converged": bool(self.converged_),
        }
        for side, U, spec in (
            ("row", self.row_params_, self._row_spec),
            ("col", self.col_params_, self._col_spec),
        ):
            if spec is not None:
                arrays[f"{side}_params"] = U
                extra[f"{side}_gamma"] = spec.parts[0].gamma
                if spec.parts[0].M is not None:
                    arrays[f"{side}_normalization"] = spec.parts[0].M
        return params, arrays, extra

    @classmethod
    def _from_saved(cls, params, arrays, extra):
        """The estimator of a loaded model; every value and array checked first."""
        params = check_params(cls, params, ignore_unknown=True)
        est = build_checked(cls, params, cls._check_params)
        r = ModelReader(arrays, extra)
        shape = r.value("shape", "list")
        if len(shape) != 2 or not all(isinstance(s, int) and s >= 1 for s in shape):
            raise ModelFileError("model.json", "extra.shape", "must be [n1, n2], both >= 1", shape)
        k = int(est.n_components)
        for side, kind in (("row", est.row_map), ("col", est.col_map)):
            U, spec = None, None
            if kind != "identity":
                U = r.array(f"{side}_params", (None, None))
                m = U.shape[1]
                M = None
                if kind == "nystrom" and not est.learn_features:
                    M = r.array(f"{side}_normalization", (m, m))
                gamma = r.value(f"{side}_gamma", "float")
                spec = _gb.FeatureSpec.build([(kind, m, gamma, M, bool(est.learn_features))])
            setattr(est, f"{side}_params_", U)
            setattr(est, f"_{side}_spec", spec)
        est.W_ = r.array("W", (None, k), meaning="row features x n_components")
        est.H_ = r.array("H", (None, k), meaning="column features x n_components")
        est.row_factors_ = r.array("row_factors", (shape[0], k))
        est.col_factors_ = r.array("col_factors", (shape[1], k))
        est.objective_ = r.array("objective", (None,))
        est.cg_iterations_ = r.array("cg_iterations", (None, 2), kind="int")
        est.step_sizes_ = r.array("step_sizes", (None, 2))
        est.n_iter_ = r.value("n_iter", "int", low=0)
        est.n_passes_ = r.value("n_passes", "int", low=0)
        est.converged_ = r.value("converged", "bool")
        est.shape_ = tuple(shape)
        r.finish()
        return est


__all__ = ["InductiveMatrixCompletion", "FEATURE_MAPS"]
