"""Saving and loading fitted models without pickle.

A model is a directory (or an fsspec URL) holding ``model.json`` (estimator class, format
version, hyperparameters, small JSON state) and ``arrays.npz`` (NumPy arrays, loaded with
``allow_pickle=False``).  Writes go to a temporary sibling and are renamed into place, so an
interrupted save never corrupts an existing model.

Loading trusts nothing in those files: :class:`ModelReader` checks every JSON value's type and
every array's dtype, shape (against the model's metadata and the other arrays) and finiteness
before an estimator is built, so a tampered or damaged model fails at load with a
:class:`ModelFileError` naming the model, the file and the key, never later inside a kernel.
"""

from __future__ import annotations

import io
import json
import math
import os
import shutil
import uuid
import zipfile
import zlib

import numpy as np

from ooc_lowrank._validation import error_message
from ooc_lowrank.storage import MODEL_FORMAT, is_model  # noqa: F401 (is_model importable here)

MODEL_FORMAT_VERSION = 1

#: estimator class name -> "module:attr", filled by the estimator modules via `register`.
_REGISTRY: dict[str, str] = {
    "GIMC": "ooc_lowrank.gimc:GIMC",
    "GIMCCV": "ooc_lowrank.gimc:GIMCCV",
    "GreedyLowRank": "ooc_lowrank.glrl:GreedyLowRank",
    "GreedyLowRankCV": "ooc_lowrank.glrl:GreedyLowRankCV",
    "MultiViewMachineRegressor": "ooc_lowrank.mvm:MultiViewMachineRegressor",
    "MultiViewMachineClassifier": "ooc_lowrank.mvm:MultiViewMachineClassifier",
    "KernelMaxide": "ooc_lowrank.kernelmaxide:KernelMaxide",
    "Maxide": "ooc_lowrank.kernelmaxide:Maxide",
    "InductiveMatrixCompletion": "ooc_lowrank.imc:InductiveMatrixCompletion",
}

#: Parameters renamed by issue 29 (one vocabulary, docs/api.md): estimator class -> {name in
#: model files written before the rename: current name}.  :func:`load_model` translates them,
#: so old model files still load; ``tools/rename_vocab.py`` renames the code from this table.
RENAMED_PARAMS: dict[str, dict[str, str]] = {
    "GIMC": {"n_components": "n_features_map"},
    "GIMCCV": {"n_components": "n_features_map"},
    "GreedyLowRank": {"rank": "n_components", "l2": "alpha"},
    "GreedyLowRankCV": {"rank": "n_components", "l2s": "alphas"},
    "InductiveMatrixCompletion": {"lam": "alpha"},
    "GIMCClustering": {"lam": "alpha"},
    "KernelMaxide": {"n_landmarks": "n_features_map", "lam": "alpha"},
    "Maxide": {"lam": "alpha"},
    "KernelMaxideCV": {"n_landmarks": "n_features_map", "lams": "alphas"},
    "MaxideCV": {"lams": "alphas"},
    "MultiViewMachineRegressor": {"n_factors": "n_components", "reg_weight": "alpha"},
    "MultiViewMachineClassifier": {"n_factors": "n_components", "reg_weight": "alpha"},
}
#: CV estimators whose model files hold their base estimator's parameters too (the grid
#: settings in ``extra.params_list``, the refitted model in ``extra.best.params``)
_CV_BASE = {"GIMCCV": "GIMC", "GreedyLowRankCV": "GreedyLowRank"}


def _renamed(table, params):
    """``params`` with the old names of ``table`` replaced (a current name already there wins)."""
    if not isinstance(params, dict):
        return params
    return {(table[k] if k in table and table[k] not in params else k): v
            for k, v in params.items()}


def translate_params(name, params, extra):
    """``(params, extra)`` of a model file of estimator ``name`` with the parameter names of
    before issue 29 translated to the current ones (:data:`RENAMED_PARAMS`)."""
    params = _renamed(RENAMED_PARAMS.get(name, {}), params)
    base = RENAMED_PARAMS.get(_CV_BASE.get(name, ""), {})
    if base and isinstance(extra, dict):
        extra = dict(extra)
        if isinstance(extra.get("params_list"), list):
            extra["params_list"] = [_renamed(base, p) for p in extra["params_list"]]
        if isinstance(extra.get("best"), dict):
            extra["best"] = dict(extra["best"], params=_renamed(base, extra["best"].get("params")))
    return params, extra


_DAMAGED = (
    "The model files were edited or damaged; save the model again from a fitted estimator "
    "(est.save(path))"
)


class ModelFileError(ValueError):
    """A saved model is malformed: the message names the model, the file, the key, the rule,
    the value found and the fix.  ``path`` is filled in by :func:`load`."""

    def __init__(self, file, key, rule, value=None, fix=_DAMAGED, path=None):
        self.file, self.key, self.rule, self.value, self.fix = file, key, rule, value, fix
        self.path = path
        where = (f"model {path!r}: " if path is not None else "") + file
        if key is not None:
            where += f", key {key!r}"
        super().__init__(error_message(where, rule, value, fix))

    def at(self, path):
        """The same error naming the model location ``path``."""
        return ModelFileError(self.file, self.key, self.rule, self.value, self.fix, str(path))


_MISSING = object()
_KINDS = {
    "int": ((int,), "an integer"),
    "float": ((int, float), "a finite number"),
    "bool": ((bool,), "true or false"),
    "str": ((str,), "a string"),
    "list": ((list,), "a list"),
    "dict": ((dict,), "an object"),
}


def _short(v):
    r = repr(v)
    return r if len(r) <= 80 else r[:77] + "..."


class ModelReader:
    """Checked access to a loaded model (``params``, ``arrays``, ``extra`` of :func:`load_model`).

    Every accessor raises :class:`ModelFileError` naming the file and key on a missing key, a
    wrong type, a wrong dtype, a wrong shape or a non-finite value; :meth:`finish` refuses
    arrays nobody asked for.
    """

    def __init__(self, arrays, extra):
        self.arrays, self.extra = arrays, extra
        self._used = set()

    def value(self, key, kind, *, low=None, default=_MISSING, choices=None):
        """``extra[key]`` checked to be of ``kind`` (a key of ``_KINDS``: "int", "float", ...)."""
        if key not in self.extra:
            if default is not _MISSING:
                return default
            raise ModelFileError("model.json", f"extra.{key}", "is missing")
        return check_value(self.extra[key], f"extra.{key}", kind, low=low, choices=choices)

    def array(self, name, shape, *, kind="float", finite=True, meaning=None):
        """``arrays[name]`` with ``shape`` (a tuple of ints, ``None`` for any length).

        ``kind``: "float" (float32 or float64), "int" (any integer) or "label" (integer,
        float or bool).  Float arrays must be finite unless ``finite=False``.
        """
        if name not in self.arrays:
            raise ModelFileError(
                "arrays.npz", name, f"is missing (the archive has {sorted(self.arrays)})"
            )
        self._used.add(name)
        a = self.arrays[name]
        ok = {
            "float": a.dtype in (np.float32, np.float64),
            "int": a.dtype.kind in "iu",
            "label": a.dtype.kind in "iub" or a.dtype in (np.float32, np.float64),
        }[kind]
        if not ok:
            want = {"float": "float32 or float64", "int": "an integer", "label": "numeric"}[kind]
            raise ModelFileError("arrays.npz", name, f"must have dtype {want}", f"dtype {a.dtype}")
        if a.ndim != len(shape) or any(
            s is not None and s != n for s, n in zip(shape, a.shape, strict=True)
        ):
            dims = ["*" if s is None else str(s) for s in shape]
            want = f"({dims[0]},)" if len(dims) == 1 else f"({', '.join(dims)})"
            why = f" ({meaning})" if meaning else ""
            raise ModelFileError(
                "arrays.npz", name, f"must have shape {want}{why}", f"shape {a.shape}"
            )
        if finite and a.dtype.kind == "f" and not np.isfinite(a).all():
            bad = a[~np.isfinite(a)][0]
            n_bad = int(np.count_nonzero(~np.isfinite(a)))
            raise ModelFileError(
                "arrays.npz", name, "must hold only finite values", f"{n_bad} entries like {bad}"
            )
        return a

    def finish(self):
        """Refuse arrays that the model does not define (junk added to the archive)."""
        extra = sorted(set(self.arrays) - self._used)
        if extra:
            raise ModelFileError(
                "arrays.npz",
                extra[0],
                f"is not an array of this model (it has {sorted(self._used)})",
            )


def check_value(v, key, kind, *, low=None, choices=None, file="model.json"):
    """Check one JSON value's type (and bound / choices); return it."""
    types, what = _KINDS[kind]
    bad_type = not isinstance(v, types) or (kind != "bool" and isinstance(v, bool))
    if bad_type or (kind == "float" and not math.isfinite(v)):
        raise ModelFileError(file, key, f"must be {what}", _short(v))
    if low is not None and v < low:
        raise ModelFileError(file, key, f"must be >= {low}", _short(v))
    if choices is not None and v not in choices:
        raise ModelFileError(file, key, f"must be one of {list(choices)}", _short(v))
    return v


def check_params(cls, params, *, ignore_unknown=False):
    """``params`` of model.json checked against ``cls``'s parameters; returns a dict."""
    if not isinstance(params, dict):
        raise ModelFileError("model.json", "params", "must be an object", _short(params))
    names = set(cls._get_param_names())
    unknown = sorted(set(params) - names)
    if unknown and not ignore_unknown:
        raise ModelFileError(
            "model.json", f"params.{unknown[0]}", f"is not a {cls.__name__} parameter"
        )
    return {k: v for k, v in params.items() if k in names}


def build_checked(cls, params, validate):
    """``cls(**params)`` whose hyperparameters pass ``validate(est)`` (the fit-time checks)."""
    est = cls(**params)
    try:
        validate(est)
    except (TypeError, ValueError) as e:
        raise ModelFileError(
            "model.json", "params", f"holds an invalid hyperparameter: {e}", fix=_DAMAGED
        ) from None
    return est


def register(name: str, target: str) -> None:
    """Register an estimator class for :func:`load` (``target`` is ``"module:attr"``)."""
    _REGISTRY[name] = target


def _jsonable(v):
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating,)):
        return float(v)
    if isinstance(v, np.ndarray):
        return v.tolist()
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    raise TypeError(f"cannot save value of type {type(v).__name__} in model JSON: {v!r}")


def save_model(
    path,
    estimator: str,
    params: dict,
    arrays: dict,
    extra: dict | None = None,
    *,
    overwrite: bool = False,
) -> None:
    """Save a model atomically.  ``params`` and ``extra`` must be JSON-serialisable.

    An existing model at ``path`` is replaced only when ``overwrite``; anything else there (a
    store, a user folder, a file) is never replaced (:func:`storage.check_destination`).
    """
    from ooc_lowrank.storage import check_destination

    path = os.fspath(path) if isinstance(path, os.PathLike) else str(path)
    check_destination(path, "model", overwrite=overwrite, name="path")
    doc = {
        "format": MODEL_FORMAT,
        "format_version": MODEL_FORMAT_VERSION,
        "estimator": estimator,
        "params": _jsonable({k: v for k, v in params.items() if not callable(v)}),
        "extra": _jsonable(extra or {}),
    }
    buf = io.BytesIO()
    np.savez(buf, **{k: np.asarray(v) for k, v in arrays.items()})
    for k, v in arrays.items():
        if np.asarray(v).dtype == object:
            raise TypeError(f"array {k!r} has dtype object; only numeric arrays can be saved")
    if "://" in path:
        import fsspec.core

        fs, p = fsspec.core.url_to_fs(path)
        tmp = f"{p.rstrip('/')}.tmp-{uuid.uuid4().hex[:8]}"
        try:
            fs.makedirs(tmp, exist_ok=True)
            with fs.open(f"{tmp}/arrays.npz", "wb") as f:
                f.write(buf.getvalue())
            with fs.open(f"{tmp}/model.json", "w") as f:
                f.write(json.dumps(doc, indent=1))
            # again: something may have appeared
            check_destination(path, "model", overwrite=overwrite, name="path")
            # the old model is moved aside, not deleted, until the new one is in place
            old = f"{p.rstrip('/')}.old-{uuid.uuid4().hex[:8]}" if fs.exists(p) else None
            if old is not None:
                fs.mv(p, old, recursive=True)
            try:
                fs.mv(tmp, p, recursive=True)
            except BaseException:
                if old is not None:
                    if fs.exists(p):
                        fs.rm(p, recursive=True)
                    fs.mv(old, p, recursive=True)  # put the old model back
                raise
            if old is not None:
                fs.rm(old, recursive=True)
        except BaseException:
            if fs.exists(tmp):
                fs.rm(tmp, recursive=True)
            raise
        return
    from ooc_lowrank.storage import _sibling, sibling_temporary

    p = os.path.abspath(path)
    # temporaries of earlier saves killed by SIGKILL are reaped here, as for stores
    with sibling_temporary(p, "model") as tmp:
        with open(os.path.join(tmp, "arrays.npz"), "wb") as f:
            f.write(buf.getvalue())
        with open(os.path.join(tmp, "model.json"), "w") as f:
            json.dump(doc, f, indent=1)
        # again: something may have appeared
        check_destination(path, "model", overwrite=overwrite, name="path")
        if os.path.exists(p):
            old = _sibling(p, "old")
            os.rename(p, old)
            try:
                os.rename(tmp, p)
            except BaseException:
                os.rename(old, p)  # put the old model back
                raise
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, p)


def _read_npz(raw):
    """Arrays of an npz archive (no pickle); damage becomes a :class:`ModelFileError`."""
    if raw[:2] != b"PK":  # numpy would try it as .npy or pickle and suggest unsafe loading
        raise ModelFileError(
            "arrays.npz", None, "is not a NumPy .npz archive (no zip header; nothing is unpickled)"
        )
    try:
        z = np.load(io.BytesIO(raw), allow_pickle=False)
        if not isinstance(z, np.lib.npyio.NpzFile):
            raise ValueError("it holds a single .npy array, not an .npz archive")
        with z:
            return {k: z[k] for k in z.files}
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError, KeyError) as e:
        raise ModelFileError(
            "arrays.npz", None, f"cannot be read as a NumPy .npz archive ({e})"
        ) from None


def load_model(path):
    """Return ``(estimator_name, params, arrays, extra)``; never unpickles anything.

    The JSON document's structure is checked here (an object with a string ``estimator`` and
    objects ``params`` and ``extra``); the estimators check the contents (:class:`ModelReader`).
    """
    path = str(path)
    try:
        if "://" in path:
            import fsspec.core

            fs, p = fsspec.core.url_to_fs(path)
            with fs.open(f"{p.rstrip('/')}/model.json", "rb") as f:
                text = f.read()
            with fs.open(f"{p.rstrip('/')}/arrays.npz", "rb") as f:
                raw = f.read()
        else:
            with open(os.path.join(path, "model.json"), "rb") as f:
                text = f.read()
            with open(os.path.join(path, "arrays.npz"), "rb") as f:
                raw = f.read()
    except FileNotFoundError as e:
        name = os.path.basename(str(getattr(e, "filename", "") or "")) or "model.json"
        raise FileNotFoundError(
            f"no model at {path!r}: {name} is missing (a model is a folder with model.json and "
            "arrays.npz); fit and save one first"
        ) from None
    try:
        doc = json.loads(text.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ModelFileError("model.json", None, f"is not valid JSON ({e})").at(path) from None
    try:
        if not isinstance(doc, dict):
            raise ModelFileError("model.json", None, "must hold a JSON object", type(doc).__name__)
        if doc.get("format") != MODEL_FORMAT or doc.get("format_version") != MODEL_FORMAT_VERSION:
            raise ModelFileError(
                "model.json",
                "format",
                f"must be {MODEL_FORMAT!r} version {MODEL_FORMAT_VERSION}",
                f"{doc.get('format')!r} version {doc.get('format_version')!r}",
                fix="Load it with the ooc_lowrank version that saved it",
            )
        name = check_value(doc.get("estimator"), "estimator", "str")
        params = doc.get("params", _MISSING)
        if params is _MISSING:
            raise ModelFileError("model.json", "params", "is missing")
        check_value(params, "params", "dict")
        extra = check_value(doc.get("extra", {}), "extra", "dict")
        params, extra = translate_params(name, params, extra)
        arrays = _read_npz(raw)
    except ModelFileError as e:
        raise e.at(path) from None
    return name, params, arrays, extra


def from_saved(cls, path, params, arrays, extra):
    """``cls._from_saved(...)`` with every error naming the model ``path``."""
    try:
        return cls._from_saved(params, arrays, extra)
    except ModelFileError as e:
        raise e.at(path) from None


def load_as(cls, path):
    """Load a model saved by ``cls.save``: refused, naming both, when ``path`` holds another
    estimator (the ``load`` classmethod of every estimator)."""
    name, params, arrays, extra = load_model(path)
    if name != cls.__name__:
        article = "an" if cls.__name__[0] in "AEIOU" else "a"
        raise ValueError(f"model {path!r} holds a {name!r}, not {article} {cls.__name__}")
    return from_saved(cls, path, params, arrays, extra)


def load(path):
    """Load any saved ooc_lowrank model (``ooc_lowrank.load``)."""
    import importlib

    name, params, arrays, extra = load_model(path)
    if name not in _REGISTRY:
        raise ModelFileError(
            "model.json",
            "estimator",
            f"is an unknown estimator (known: {sorted(_REGISTRY)})",
            repr(name),
            path=str(path),
        )
    mod, attr = _REGISTRY[name].split(":")
    cls = getattr(importlib.import_module(mod), attr)
    return from_saved(cls, path, params, arrays, extra)
