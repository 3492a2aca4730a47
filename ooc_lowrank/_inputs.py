"""Input conversion at the boundary: every estimator's ``X`` and ``y`` / ``Y`` pass through here.

One place decides what a user's array-like means, before any work:

=====================================  ===========================================================
input                                  becomes
=====================================  ===========================================================
pandas DataFrame / Series (numeric)    ndarray (nullable columns: float64, ``pd.NA`` -> NaN, which
                                       the finite checks then name)
Dask DataFrame / Series (numeric)      Dask array with known chunks (``to_dask_array(lengths=True)``:
                                       one pass over the frame for its partition lengths)
pydata ``sparse`` array (COO, GCXS)    ``scipy.sparse.csr_matrix``; a Dask array of them: CSR blocks
``np.matrix``                          ndarray
float16 (NumPy, SciPy, Dask)           float32: float16 arithmetic overflows at 65504
integer / bool features (``X``)        float64, for NumPy, SciPy and Dask alike
=====================================  ===========================================================

Refused, with an error naming the argument, the rule, the value and the fix: DataFrame columns
that are not numbers (strings, categories, objects: encode them first), features that are not
2-D, ragged lists (for labels with the ``MultiLabelBinarizer`` hint).  Other dtypes (complex,
object) are left to the estimator's own dtype check (scikit-learn's messages for GIMC).

Store arrays, store datasets, paths and :class:`ooc_lowrank.engine.Blocked` pass unchanged
(stores are validated as they are read).  Nothing here imports Dask: Dask objects are recognized
by their type's module and converted through their own methods.

Use :func:`as_features` for feature matrices (``X``, ``X_row``, one MVM view) and
:func:`as_labels` for targets; :func:`as_input` is the part they share (the type conversions),
which :func:`ooc_lowrank.engine.as_blocked` also applies to whatever reaches it.
"""

from __future__ import annotations

import functools

import numpy as np
import scipy.sparse as sp

from ._validation import error_message

__all__ = [
    "as_features",
    "as_input",
    "as_labels",
    "check_01_block",
    "check_X_scale",
    "check_features_memory",
    "is_lazy",
]

_LABEL_HINT = (
    "For one list of labels per sample (scikit-learn's multi-label style) use "
    "sklearn.preprocessing.MultiLabelBinarizer().fit_transform(y) to make a 0/1 label matrix"
)


def _module(X) -> str:
    return type(X).__module__ or ""


def _is_pandas(X) -> bool:
    return _module(X).startswith("pandas") and hasattr(X, "to_numpy") and hasattr(X, "dtypes")


def _is_dask_frame(X) -> bool:
    m = _module(X)
    return (m.startswith("dask.dataframe") or m.startswith("dask_expr")) and hasattr(
        X, "to_dask_array"
    )


def _is_dask_array(X) -> bool:
    return _module(X).startswith("dask.array") and hasattr(X, "map_blocks")


def _is_pydata_sparse(X) -> bool:
    return _module(X).split(".")[0] == "sparse" and hasattr(X, "todense") and hasattr(X, "ndim")


def _column_dtypes(X):
    """``[(column, dtype)]`` of a (pandas or Dask) DataFrame or Series."""
    if hasattr(X, "columns"):
        return list(zip(X.columns, X.dtypes, strict=True))
    return [(getattr(X, "name", None), X.dtype)]


def _check_frame_columns(X, name):
    """Refuse DataFrame columns that hold no numbers (strings, categories, objects, dates)."""
    bad = [(c, dt) for c, dt in _column_dtypes(X) if getattr(dt, "kind", "O") not in "fiub"]
    if bad:
        shown = ", ".join(f"{c!r} ({dt})" for c, dt in bad[:5]) + (" ..." if len(bad) > 5 else "")
        raise TypeError(
            error_message(
                name,
                "must hold only numeric columns (a DataFrame's columns become the features)",
                f"{len(bad)} non-numeric column(s): {shown}",
                "Encode them first (sklearn.preprocessing.OneHotEncoder or OrdinalEncoder, "
                "pandas.get_dummies) or drop them",
            )
        )


def _frame_to_numpy(X):
    dts = [dt for _, dt in _column_dtypes(X)]
    if all(isinstance(dt, np.dtype) for dt in dts):
        return X.to_numpy()
    return X.to_numpy(dtype=np.float64, na_value=np.nan)  # nullable extension columns


def _pydata_to_scipy(X, name):
    if X.ndim == 1:
        return np.asarray(X.todense())
    if X.ndim != 2:
        raise ValueError(error_message(name, "must be 2-D", f"a sparse array of shape {X.shape}"))
    if X.dtype == np.float16:  # scipy.sparse has no float16
        X = X.astype(np.float32)
    if not hasattr(X, "to_scipy_sparse"):  # DOK
        X = X.asformat("coo")
    return sp.csr_matrix(X.to_scipy_sparse())


def _pydata_block(b, name="X"):
    return _pydata_to_scipy(b, name) if _is_pydata_sparse(b) else b


def _from_list(X, name, labels):
    try:
        return np.asarray(X)
    except ValueError as e:  # NumPy >= 1.24: "inhomogeneous shape"
        if labels:
            raise ValueError(
                f"{name} must be a label vector (n_samples,) or a 0/1 label matrix (n_samples, "
                f"n_labels); got a ragged list of {len(X)} rows of different lengths. "
                f"{_LABEL_HINT}"
            ) from e
        raise ValueError(
            f"{name} must be a rectangular 2-D array (n_samples, n_features); got a ragged "
            f"list of {len(X)} rows of different lengths. Give every row the same number of "
            "features"
        ) from e


def as_input(X, name="X", *, labels=False):
    """The type conversions both :func:`as_features` and :func:`as_labels` make (see the module
    docstring); anything else (stores, paths, Blocked, ndarrays, scipy.sparse) is returned as
    it is, except float16 data, which becomes float32."""
    if X is None or isinstance(X, (str, bytes)) or hasattr(X, "read"):
        return X
    if _is_pandas(X):
        if not labels:
            _check_frame_columns(X, name)
            return _frame_to_numpy(X)
        # labels may be strings; a nullable / categorical column of class labels -> its values
        return X.to_numpy()
    if _is_dask_frame(X):
        if not labels:
            _check_frame_columns(X, name)
        return X.to_dask_array(lengths=True)
    if _is_pydata_sparse(X):
        X = _pydata_to_scipy(X, name)
    elif isinstance(X, np.matrix):
        X = np.asarray(X)
    elif isinstance(X, (list, tuple)):
        X = _from_list(X, name, labels)
    elif _is_dask_array(X) and _is_pydata_sparse(getattr(X, "_meta", None)):
        dt = np.float32 if X.dtype == np.float16 else X.dtype
        X = X.map_blocks(  # (not map_blocks' own name=: that names the output's keys)
            functools.partial(_pydata_block, name=name),
            dtype=dt,
            meta=sp.csr_matrix((0, 0), dtype=dt),
        )
    if getattr(X, "dtype", None) == np.float16:
        X = X.astype(np.float32)
    return X


def as_features(X, name="X"):
    """A feature matrix converted at the boundary (see the module docstring): 2-D, numeric,
    integer / bool / float16 upcast (NumPy, SciPy and Dask alike).  Store arrays, store
    datasets, paths and ``Blocked`` are returned unchanged.

    This is the call every estimator makes on each feature argument before resolving it.
    """
    X = as_input(X, name)
    dt = getattr(X, "dtype", None)
    if dt is None or not hasattr(X, "shape") or hasattr(X, "read") or not hasattr(X, "ndim"):
        return X  # stores, datasets, Blocked: checked where they are read
    if X.ndim != 2:
        raise ValueError(
            error_message(
                name,
                "must be 2-D (n_samples, n_features)",
                f"shape {tuple(X.shape)}",
                "Reshape your data: x.reshape(-1, 1) for a single feature, x.reshape(1, -1) "
                "for a single sample",
            )
        )
    if dt.kind in "iub":
        X = X.astype(np.float64)
    return X


def as_labels(Y, name="Y"):
    """Labels converted at the boundary (see the module docstring): the type conversions of
    :func:`as_input`; a ragged list or a 2-D array of non-numbers is refused with the
    ``MultiLabelBinarizer`` hint.  Class vectors of any values (strings too) pass."""
    Y = as_input(Y, name, labels=True)
    if isinstance(Y, np.ndarray) and Y.ndim == 2 and Y.shape[1] > 1 and Y.dtype.kind not in "fiub":
        raise TypeError(
            error_message(
                name,
                "as a 2-D array must be a 0/1 label matrix (n_samples, n_labels) of numbers",
                f"dtype {Y.dtype}, shape {Y.shape}",
                _LABEL_HINT,
            )
        )
    if isinstance(Y, np.ndarray) and Y.dtype == object and Y.ndim == 1 and Y.size:
        if isinstance(Y[0], (list, tuple, set, frozenset, np.ndarray)):
            raise TypeError(
                error_message(
                    name,
                    "must hold one class label per sample, not a sequence of labels",
                    f"{type(Y[0]).__name__} {Y[0]!r} in row 0",
                    _LABEL_HINT,
                )
            )
    return Y


def check_01_block(block, name="Y", where=""):
    """Raise ValueError unless every stored entry of a label block is 0 or 1 (a multi-label
    matrix).  Called on each block as a pass reads it (Dask labels), so no extra pass."""
    data = block.data if sp.issparse(block) else np.asarray(block)
    if not data.size:
        return
    bad = (data != 0) & (data != 1)
    if bad.any():
        v = data.reshape(-1)[int(np.argmax(bad.reshape(-1)))]
        raise ValueError(
            f"{name} (multi-label) must hold only 0/1 labels; found value {float(v)!r}{where}. "
            f"Binarize it, e.g. ({name} > 0).astype(np.float32), or pass a class vector for "
            "multi-class"
        )


def is_lazy(X) -> bool:
    """True for inputs read block by block (Dask arrays and DataFrames, store arrays,
    ``Blocked``): their predictions stay lazy, their checks run as blocks are read."""
    return (
        _is_dask_array(X)
        or _is_dask_frame(X)
        or getattr(type(X), "_row_blocked", False) is True  # engine.Blocked (engine imports us)
        or (hasattr(X, "read") and hasattr(X, "kind"))
    )


def check_features_memory(X, name="X", min_rows=1):
    """An in-memory X (after :func:`as_features`) validated with scikit-learn's errors (complex,
    1-D, object, empty), NaN / inf and :func:`check_X_scale` refused; CSR with sorted indices,
    float32 or float64.  ``min_rows=0`` (prediction) lets 0 rows through to an empty result."""
    from sklearn.utils import check_array

    if sp.issparse(X):
        X = sp.csr_matrix(X)
    X = check_array(
        X,
        accept_sparse="csr",
        dtype=[np.float64, np.float32],
        ensure_all_finite=False,
        ensure_min_samples=min_rows,
        input_name=name,
    )
    data = X.data if sp.issparse(X) else X
    if data.size and not np.isfinite(data).all():
        bad = data[~np.isfinite(data)][0]
        raise ValueError(
            f"{name} must hold only finite values; found {float(bad)!r}. Remove or impute NaN/inf "
            "entries before fitting (e.g. sklearn.impute.SimpleImputer)"
        )
    check_X_scale(X, name)
    if sp.issparse(X):
        X.sort_indices()
    return X


def check_X_scale(X, name="X", where=""):
    """Refuse feature values whose squares overflow a row's squared norm in X's dtype.

    The RBF kernel and the median heuristic use ``||x||^2``; with ``|x_ij| > sqrt(max / d)``
    (float64, d = 100: 1.3e153) that sum can overflow to inf and the fit would return NaN.
    """
    data = X.data if sp.issparse(X) else np.asarray(X)
    if not data.size or data.dtype.kind != "f":
        return
    d = max(int(X.shape[1]), 1)
    limit = float(np.sqrt(np.finfo(data.dtype).max / d))
    hi, lo = float(data.max()), float(data.min())  # no temporary copy of X
    if max(hi, -lo) <= limit:
        return
    flat = data.ravel() if sp.issparse(X) else data.reshape(-1)
    j = int(np.argmax(flat) if hi >= -lo else np.argmin(flat))
    bad = float(flat[j])
    if sp.issparse(X):
        row = int(np.searchsorted(X.indptr, j, side="right") - 1)
        col = int(X.indices[j])
    else:
        row, col = (int(i) for i in np.unravel_index(j, data.shape))
    raise ValueError(
        f"{name} holds the feature value {bad:.3g} (row {row}, column {col}{where}); feature "
        f"values must stay within +-{limit:.3g} so that a row's squared norm does not overflow "
        f"{data.dtype} ({d} features). Scale or normalize {name} before fitting (e.g. "
        "sklearn.preprocessing.StandardScaler or MaxAbsScaler), or fix the bad entry"
    )
