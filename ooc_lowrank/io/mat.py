"""MATLAB ``.mat`` files to a dataset.

**Memory:** MATLAB v4/v5/v7 files are compressed per variable and ``scipy.io.loadmat`` reads
each variable whole, so this converter holds the selected variables in memory while it writes
them (in row blocks).  It is *not* bounded-memory for the reading side; files bigger than RAM
should be converted to a text format or read with ``h5py`` (v7.3 / HDF5 files are rejected with
that advice: scipy cannot read them).  The writing side streams as usual.

Variables are chosen with ``variables`` (``{dest_name: variable}`` or
``"X=train_data,Y=train_target"``), e.g. yahoo: ``X=train_data,Y=train_target``; Bibtex XC
split: ``X=Xtest,Y=Ytest``.
Defaults: ``X`` and, if present, ``Y``.

* Orientation: each array must have the dataset's ``n_rows`` samples along its rows or its
  columns.  ``orientation="auto"`` takes ``n_rows`` from the first variable's rows and transposes
  any other variable whose *columns* match it (the yahoo and bibtex files store labels as
  labels x instances); ``"rows"``/``"columns"`` or ``"Y=columns"`` force it per array.
* Label matrices: destination arrays named ``Y...`` with two or more columns (option ``labels``)
  must hold only {0, 1} or only {-1, +1} (yahoo's targets); they are stored as csr 0/1 float32.
  A single-column ``Y`` (class ids, as mfeat's ``Y``) is stored dense ``(n_samples, 1)``
  under the name ``y``, the class-label name every converter and estimator uses.
* Cell arrays of views (mfeat-handwritten's ``X`` is a 1 x 6 cell) become ``X0 ... X5``.
* Other arrays: sparse -> csr, dense -> dense; values cast to ``dtype`` (default float64).
"""

from __future__ import annotations

import os

import numpy as np
import scipy.io as sio
import scipy.sparse as sp

from ._common import (
    ConversionError,
    converter,
)

__all__ = ["convert_mat"]


def _parse_mapping(value, name, default_value=None) -> dict[str, str]:
    """``{"X": "train_data"}`` from a dict, a list of names, or ``"X=train_data,Y"``."""
    if value is None:
        return {}
    if isinstance(value, dict):
        return {str(k): str(v) for k, v in value.items()}
    items = value.split(",") if isinstance(value, str) else list(value)
    out = {}
    for item in items:
        item = str(item).strip()
        if not item:
            continue
        if "=" in item:
            k, v = (s.strip() for s in item.split("=", 1))
        else:
            k, v = item, item if default_value is None else default_value
        if not k or not v:
            raise ConversionError(None, None, f"option {name}= must look like 'A=B,C=D'", value)
        out[k] = v
    return out


def _load(path, names):
    try:
        return sio.loadmat(path, variable_names=names)
    except NotImplementedError:
        raise ConversionError(
            path,
            None,
            "MATLAB v7.3 (HDF5) files are not supported by scipy.io.loadmat",
            None,
            "save with -v7 in MATLAB, or export the arrays to svmlight / npy",
        ) from None
    except Exception as e:  # MatReadError, ValueError, TypeError, OSError, zlib.error...
        raise ConversionError(path, None, "not a readable MATLAB .mat file", str(e)) from None


def _as_2d(path, var, a):
    if sp.issparse(a):
        return a
    a = np.asarray(a)
    if a.dtype.kind not in "fiub":
        raise ConversionError(
            path,
            None,
            f"variable {var!r} is not numeric",
            str(a.dtype),
            "choose numeric variables with variables=",
        )
    if a.ndim == 1:
        a = a[:, None]
    if a.ndim != 2:
        raise ConversionError(path, None, f"variable {var!r} must be 2-D", a.shape)
    return a


def _check_finite(path, var, a):
    data = a.data if sp.issparse(a) else a
    if data.dtype.kind == "f" and not np.isfinite(data).all():
        if sp.issparse(a):
            coo = a.tocoo()
            k = int(np.argmax(~np.isfinite(coo.data)))
            where, bad = (int(coo.row[k]), int(coo.col[k])), coo.data[k]
        else:
            where = tuple(int(i) for i in np.argwhere(~np.isfinite(a))[0])
            bad = a[where]
        raise ConversionError(
            path,
            None,
            f"variable {var!r} holds NaN/inf at {where}",
            bad,
            "impute or drop such values before converting",
        )


def _binary_labels(path, var, a) -> sp.csr_matrix:
    """0/1 or -1/+1 label matrix -> csr of ones."""
    vals = np.unique(a.data if sp.issparse(a) else a)
    if sp.issparse(a):
        ok = np.isin(vals, (0, 1)).all()
    else:
        ok = np.isin(vals, (0, 1)).all() or np.isin(vals, (-1, 1)).all()
    if not ok:
        raise ConversionError(
            path,
            None,
            f"label matrix {var!r} must hold only {{0, 1}} or only {{-1, +1}}",
            vals[:10].tolist(),
            "store it under a name not starting with 'Y' or pass labels= "
            "without it to keep it as data",
        )
    m = sp.csr_matrix(a > 0) if sp.issparse(a) else sp.csr_matrix(a > 0)
    m = m.astype(np.float32)
    m.sort_indices()
    return m


_OPTIONS = ("block_rows", "dtype", "overwrite", "progress")


@converter("mat", *_OPTIONS, dtype_of="non-label arrays", max_count=1)
def convert_mat(srcs, dest, opts, *, variables=None, orientation="auto", labels="auto"):
    """Convert variables of one MATLAB ``.mat`` file (v4-v7) to a dataset.

    Parameters
    ----------
    srcs : path or [path]
        One ``.mat`` file (the whole selected variables are loaded by scipy; see module doc).
    dest : str
        Store location handed to ``DatasetWriter``.
    variables : dict, str or list, optional
        Destination name -> variable name, e.g. ``{"X": "train_data", "Y": "train_target"}`` or
        ``"X=train_data,Y=train_target"``; a bare name keeps its name.  Default: ``X`` and, if
        the file has it, ``Y``.
    orientation : {"auto", "rows", "columns"} or dict or str, default "auto"
        Whether samples run along an array's rows or its columns; per array as
        ``"Y=columns"`` or ``{"Y": "columns"}``.  ``"auto"``: see the module doc.
    labels : "auto", str, list or False, default "auto"
        Destination arrays stored as 0/1 label matrices (csr).  ``"auto"``: arrays named ``Y...``
        with at least two columns.  ``False`` / ``""``: none.
    """
    (path,) = srcs
    if not os.path.exists(path):
        raise ConversionError(path, None, "source file does not exist")
    dt, block_rows = opts.dtype, opts.block_rows
    try:
        available = [name for name, _, _ in sio.whosmat(path)]
    except NotImplementedError:
        _load(path, None)  # raises the v7.3 message
        raise
    except Exception as e:  # scipy raises MatReadError, ValueError, TypeError, OSError...
        raise ConversionError(path, None, "not a readable MATLAB .mat file", str(e)) from None
    mapping = _parse_mapping(variables, "variables")
    if not mapping:
        if "X" not in available:
            raise ConversionError(
                path,
                None,
                "no variable 'X' in the file and no variables= given",
                available,
                "pass e.g. variables='X=train_data,Y=train_target'",
            )
        mapping = {"X": "X"}
        if "Y" in available:
            mapping["Y"] = "Y"
    missing = [v for v in mapping.values() if v not in available]
    if missing:
        raise ConversionError(
            path,
            None,
            f"variable(s) {missing} not in the file",
            available,
            "choose among the variables listed",
        )
    orient = {}
    if isinstance(orientation, str) and "=" not in orientation:
        o = orientation.strip().lower() or "auto"
        orient = {k: o for k in mapping}
    else:
        orient = _parse_mapping(orientation, "orientation")
    for k, o in orient.items():
        if o not in ("auto", "rows", "columns"):
            raise ConversionError(
                None, None, "orientation must be auto, rows or columns", f"{k}={o}"
            )
    if labels is False or labels is None or labels == "":
        label_set: set[str] | None = set()
    elif isinstance(labels, str) and labels.strip().lower() == "auto":
        label_set = None
    else:
        label_set = set(_parse_mapping(labels, "labels"))

    raw = _load(path, sorted(set(mapping.values())))
    arrays: dict[str, object] = {}
    sources: dict[str, str] = {}
    for dest_name, var in mapping.items():
        a = raw[var]
        if isinstance(a, np.ndarray) and a.dtype == object:  # cell array of views
            for i, view in enumerate(a.ravel(order="F")):
                arrays[f"{dest_name}{i}"] = _as_2d(path, f"{var}{{{i + 1}}}", view)
                sources[f"{dest_name}{i}"] = f"{var}{{{i + 1}}}"
                orient.setdefault(f"{dest_name}{i}", orient.get(dest_name, "auto"))
        else:
            arrays[dest_name] = _as_2d(path, var, a)
            sources[dest_name] = var
    del raw

    # orientation
    n_rows = None
    transposed = []
    for name, a in arrays.items():
        o = orient.get(name, "auto")
        if o == "columns" or (
            o == "auto" and n_rows is not None and a.shape[0] != n_rows and a.shape[1] == n_rows
        ):
            arrays[name] = a.T
            transposed.append(name)
        if n_rows is None:
            n_rows = arrays[name].shape[0]
        if arrays[name].shape[0] != n_rows:
            raise ConversionError(
                path,
                None,
                f"variable {sources[name]!r} has no dimension "
                f"equal to n_rows={n_rows} (taken from the first variable)",
                a.shape,
                "check variables= and orientation=",
            )

    # one column of class ids is named "y", as every converter and the estimators name it
    one_col = "Y" in arrays and arrays["Y"].shape[1] == 1 and "y" not in arrays
    if one_col and (label_set is None or "Y" not in label_set):
        arrays["y"], sources["y"] = arrays.pop("Y"), sources.pop("Y")

    specs = []
    attrs = {
        "source_format": "mat",
        "source_files": [os.path.basename(path)],
        "variables": sources,
        "transposed": transposed,
    }
    for name, a in list(arrays.items()):
        _check_finite(path, sources[name], a)
        is_label = (
            (name in label_set)
            if label_set is not None
            else (name.startswith("Y") and a.shape[1] >= 2)
        )
        if is_label:
            arrays[name] = _binary_labels(path, sources[name], a)
            specs.append((name, "csr", a.shape[1], np.float32))
        elif sp.issparse(a):
            m = sp.csr_matrix(a, dtype=dt)
            m.sort_indices()
            arrays[name] = m
            specs.append((name, "csr", a.shape[1], dt))
        else:
            specs.append((name, "dense", a.shape[1], dt))
    attrs["label_arrays"] = [s[0] for s in specs if s[3] == np.float32 and s[1] == "csr"]

    step = block_rows or _rows_per_block(arrays, n_rows)

    def blocks():
        for s in range(0, n_rows, step):
            yield {
                k: (v[s : s + step] if sp.issparse(v) else np.asarray(v[s : s + step], dtype=dt))
                for k, v in arrays.items()
            }

    return opts.write(dest, specs, blocks(), attrs)


def _rows_per_block(arrays, n_rows, target=8 << 20):
    row_bytes = 0.0
    for a in arrays.values():
        row_bytes += (a.nnz * 12 / max(n_rows, 1)) if sp.issparse(a) else a.shape[1] * 8
    return int(max(1, min(n_rows or 1, target // max(row_bytes, 1.0))))
