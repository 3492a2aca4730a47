"""Saving and loading fitted models without pickle.

A model is a directory (or an fsspec URL) holding ``model.json`` (estimator class, format
version, hyperparameters, small JSON state) and ``arrays.npz`` (NumPy arrays, loaded with
``allow_pickle=False``).  Writes go to a temporary sibling and are renamed into place, so an
interrupted save never corrupts an existing model.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import uuid

import numpy as np

MODEL_FORMAT = "ooc_lowrank.model"
MODEL_FORMAT_VERSION = 1

#: estimator class name -> "module:attr", filled by the estimator modules via `register`.
_REGISTRY: dict[str, str] = {
    "GIMC": "ooc_lowrank.gimc:GIMC",
    "GIMCCV": "ooc_lowrank.gimc:GIMCCV",
    "GreedyLowRank": "ooc_lowrank.glrl:GreedyLowRank",
}


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
    overwrite: bool = True,
) -> None:
    """Save a model atomically.  ``params`` and ``extra`` must be JSON-serialisable."""
    path = str(path)
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
        if fs.exists(p) and not overwrite:
            raise FileExistsError(f"model {path!r} exists; pass overwrite=True")
        tmp = f"{p.rstrip('/')}.tmp-{uuid.uuid4().hex[:8]}"
        fs.makedirs(tmp, exist_ok=True)
        with fs.open(f"{tmp}/arrays.npz", "wb") as f:
            f.write(buf.getvalue())
        with fs.open(f"{tmp}/model.json", "w") as f:
            f.write(json.dumps(doc, indent=1))
        if fs.exists(p):
            fs.rm(p, recursive=True)
        fs.mv(tmp, p, recursive=True)
        return
    p = os.path.abspath(path)
    if os.path.exists(p) and not overwrite:
        raise FileExistsError(f"model {path!r} exists; pass overwrite=True")
    tmp = os.path.join(os.path.dirname(p), f".{os.path.basename(p)}.tmp-{uuid.uuid4().hex[:8]}")
    os.makedirs(tmp)
    try:
        with open(os.path.join(tmp, "arrays.npz"), "wb") as f:
            f.write(buf.getvalue())
        with open(os.path.join(tmp, "model.json"), "w") as f:
            json.dump(doc, f, indent=1)
        if os.path.exists(p):
            old = os.path.join(
                os.path.dirname(p), f".{os.path.basename(p)}.old-{uuid.uuid4().hex[:8]}"
            )
            os.rename(p, old)
            os.rename(tmp, p)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, p)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def load_model(path):
    """Return ``(estimator_name, params, arrays, extra)``; never unpickles anything."""
    path = str(path)
    try:
        if "://" in path:
            import fsspec.core

            fs, p = fsspec.core.url_to_fs(path)
            with fs.open(f"{p.rstrip('/')}/model.json") as f:
                doc = json.loads(f.read())
            with fs.open(f"{p.rstrip('/')}/arrays.npz", "rb") as f:
                raw = f.read()
        else:
            with open(os.path.join(path, "model.json")) as f:
                doc = json.load(f)
            with open(os.path.join(path, "arrays.npz"), "rb") as f:
                raw = f.read()
    except FileNotFoundError:
        raise FileNotFoundError(
            f"no model at {path!r} (expected model.json and arrays.npz); fit and save one first"
        ) from None
    except json.JSONDecodeError as e:
        raise ValueError(f"model {path!r}: model.json is not valid JSON ({e})") from None
    if doc.get("format") != MODEL_FORMAT or doc.get("format_version") != MODEL_FORMAT_VERSION:
        raise ValueError(
            f"model {path!r}: format must be {MODEL_FORMAT!r} version {MODEL_FORMAT_VERSION}; got "
            f"{doc.get('format')!r} version {doc.get('format_version')!r}"
        )
    with np.load(io.BytesIO(raw), allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    return doc["estimator"], doc["params"], arrays, doc.get("extra", {})


def load(path):
    """Load any saved ooc_lowrank model (``ooc_lowrank.load``)."""
    import importlib

    name, params, arrays, extra = load_model(path)
    if name not in _REGISTRY:
        raise ValueError(f"model {path!r}: unknown estimator {name!r}; known: {sorted(_REGISTRY)}")
    mod, attr = _REGISTRY[name].split(":")
    cls = getattr(importlib.import_module(mod), attr)
    return cls._from_saved(params, arrays, extra)
