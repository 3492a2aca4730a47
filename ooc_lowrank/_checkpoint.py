"""Checkpoint and resume for iterative fits (``fit(..., checkpoint=PATH, checkpoint_every=N)``).

A checkpoint is a directory (or an fsspec URL) holding the **small state** of a fit, the state
the next iteration needs (factors, counters, step sizes, RNG state, histories), never the data:

* ``state.json``: format, version, the fit's *fingerprint* (estimator, parameters that change
  the result, data shape / dtype / row blocks / nnz), the iteration, JSON state, the name and
  SHA-256 of the arrays file;
* ``arrays-<iteration>-<token>.npz``: the NumPy arrays (loaded with ``allow_pickle=False``).

Commit protocol: the arrays file is written first (under a temporary name, then renamed), then
``state.json`` is replaced (temporary file + ``os.replace``; one object PUT on object storage).
Replacing ``state.json`` is the commit point: a process killed at any moment leaves either the
previous checkpoint or the new one, both complete.  Arrays files that ``state.json`` no longer
names are removed after the commit.  No pickle anywhere.

A fit called with an existing checkpoint first compares fingerprints: a checkpoint written for
other parameters or other data is an error (delete it or pass another path), never silently
reused.  ``max_iter`` is not part of the fingerprint, so a finished fit can be extended by
calling it again with a larger ``max_iter``.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import numbers
import os
import uuid

import numpy as np

from ._persist import _jsonable
from ._validation import check_scalar, param_error

logger = logging.getLogger("ooc_lowrank")

FORMAT = "ooc_lowrank.checkpoint"
VERSION = 1
STATE = "state.json"

#: estimator parameters that never change a fit's result (or may change between runs).
IGNORED_PARAMS = ("callback", "verbose", "max_iter", "n_trials", "cache_bytes")


def _normalize(obj):
    """JSON round trip (tuples -> lists, numpy scalars -> Python) for comparisons."""
    return json.loads(json.dumps(_jsonable(obj)))


def params_fingerprint(estimator) -> dict:
    """Parameters of ``estimator`` that determine its fit (JSON-able)."""
    out = {}
    for k, v in estimator.get_params().items():
        if k in IGNORED_PARAMS:
            continue
        if isinstance(v, (list, tuple)) and all(
            x is None or isinstance(x, (bool, numbers.Number, str)) for x in v
        ):
            v = list(v)
        elif v is not None and not isinstance(v, (bool, numbers.Number, str)):
            # a RandomState / Generator instance, validation data: named by type and shape
            v = f"<{type(v).__name__}{list(np.shape(v)) if hasattr(v, 'shape') else ''}>"
        out[k] = v
    return out


def data_fingerprint(**blocked) -> dict:
    """Shape, dtype, kind, nnz and row blocks of each :class:`engine.Blocked` input, and the
    store version (``store_id``) of store-backed ones."""
    out = {}
    for name, b in blocked.items():
        bounds = np.asarray(b.bounds, dtype=np.int64)
        out[name] = {
            "shape": [int(s) for s in b.shape],
            "dtype": str(b.dtype),
            "kind": b.kind,
            "nnz": None if b.nnz is None else int(b.nnz),
            "n_blocks": int(bounds.size - 1),
            "bounds_sha256": hashlib.sha256(bounds.tobytes()).hexdigest()[:16],
        }
        sid = getattr(b.source, "store_id", None)
        if sid is not None:  # a store replaced since the checkpoint is other data
            out[name]["store_id"] = sid
    return out


def check_checkpoint_args(checkpoint, checkpoint_every):
    """Validate ``fit(checkpoint=, checkpoint_every=)`` (boundary errors)."""
    if checkpoint is not None and not isinstance(checkpoint, (str, os.PathLike)):
        raise param_error(
            "checkpoint",
            "must be a directory path or URL (str or os.PathLike) or None",
            checkpoint,
            "e.g. fit(X, Y, checkpoint='fit.ckpt')",
            exc=TypeError,
        )
    check_scalar(
        checkpoint_every,
        "checkpoint_every",
        kind=numbers.Integral,
        low=1,
        fix="Save every N >= 1 iterations, e.g. checkpoint_every=5",
    )
    if checkpoint is not None:
        _check_checkpoint_dir(os.fspath(checkpoint))


def _is_ours(name) -> bool:
    """A file a :class:`Checkpoint` writes (arrays files, temporaries)."""
    return name.startswith((f".{STATE}.tmp-", "arrays-", ".arrays-"))


def _check_checkpoint_dir(path):
    """Refuse, before any work, a ``checkpoint`` path that exists and is not a directory, or is
    a non-empty directory that is not an ooc_lowrank checkpoint (a store, a model, a user
    folder): nothing is ever written into it.  A missing path or an empty folder is fine."""
    if "://" in path:
        import fsspec.core

        fs, root = fsspec.core.url_to_fs(path)
        if not fs.exists(root):
            return
        if not fs.isdir(root):
            names = None
        else:
            names = [p.rstrip("/").rsplit("/", 1)[-1] for p in fs.ls(root, detail=False)]
    else:
        if not os.path.lexists(path):
            return
        names = os.listdir(path) if os.path.isdir(path) else None
    if names is None:
        raise param_error(
            "checkpoint",
            "must be a directory (or a path that does not exist yet)",
            path,
            "Pass a new folder name, e.g. checkpoint='fit.ckpt'",
        )
    if not names:
        return
    if STATE in names:  # damaged JSON is left to Checkpoint.load, which names the damage
        try:
            doc = json.loads(Checkpoint(path, 1, {})._read(STATE))
        except (json.JSONDecodeError, UnicodeDecodeError):
            doc = {"format": FORMAT}
        ours = isinstance(doc, dict) and doc.get("format") == FORMAT
    else:  # only the files of a first save that was interrupted
        ours = all(_is_ours(n) for n in names)
    if not ours:
        raise param_error(
            "checkpoint",
            f"exists and is not an ooc_lowrank checkpoint (a non-empty folder without a {STATE} "
            f"of format {FORMAT!r}), so nothing is written into it",
            path,
            "Pass a new or empty folder, e.g. checkpoint='fit.ckpt'",
        )


class CheckpointMismatchError(ValueError):
    """The checkpoint at a path was written by a different fit (parameters or data)."""


class Checkpoint:
    """One fit's checkpoint directory.

    Parameters
    ----------
    path : str or os.PathLike
        Local directory or fsspec URL (created on the first save).
    every : int
        Save after every ``every``-th iteration (and when the fit stops).
    fingerprint : dict
        JSON-able description of the fit; a checkpoint with another fingerprint is refused.

    Attributes
    ----------
    extra, extra_arrays : dict
        Caller state saved with every checkpoint (e.g. the estimator's feature map and
        validation history); mutate them in place, they are read at each save.
    """

    def __init__(self, path, every, fingerprint):
        self.path = os.fspath(path)
        self.every = int(every)
        self.fingerprint = _normalize(fingerprint)
        self.extra: dict = {}
        self.extra_arrays: dict = {}
        self.n_saves = 0
        self._restored = None
        self._loaded = False
        if "://" in self.path:
            import fsspec.core

            self._fs, self._root = fsspec.core.url_to_fs(self.path)
        else:
            self._fs, self._root = None, os.path.abspath(self.path)

    # ---------------------------------------------------------------- file helpers
    def _join(self, name):
        return f"{self._root.rstrip('/')}/{name}" if self._fs else os.path.join(self._root, name)

    def _exists(self, name):
        p = self._join(name)
        return self._fs.exists(p) if self._fs else os.path.exists(p)

    def _read(self, name):
        p = self._join(name)
        if self._fs:
            with self._fs.open(p, "rb") as f:
                return f.read()
        with open(p, "rb") as f:
            return f.read()

    def _write_atomic(self, name, data: bytes):
        p = self._join(name)
        if self._fs:  # one object PUT: atomic on object stores
            self._fs.makedirs(self._root, exist_ok=True)
            self._fs.pipe_file(p, data)
            return
        os.makedirs(self._root, exist_ok=True)
        tmp = self._join(f".{name}.tmp-{uuid.uuid4().hex[:8]}")
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, p)
        except BaseException:
            if os.path.exists(tmp):
                os.remove(tmp)
            raise

    def _list(self):
        if self._fs:
            return [p.rsplit("/", 1)[-1] for p in self._fs.ls(self._root, detail=False)]
        return os.listdir(self._root)

    def _remove(self, name):
        p = self._join(name)
        if self._fs:
            self._fs.rm(p)
        else:
            os.remove(p)

    # ---------------------------------------------------------------- API
    def load(self):
        """``(state, arrays, extra, extra_arrays)`` of the saved checkpoint, or None.

        Raises :class:`CheckpointMismatchError` when the checkpoint belongs to another fit and
        ``ValueError`` when it is unreadable.  The result is cached (the estimator and the
        core may both ask).
        """
        if self._loaded:
            return self._restored
        self._loaded = True
        if not self._exists(STATE):
            if self._fs is None and os.path.exists(self._root) and not os.path.isdir(self._root):
                raise param_error(
                    "checkpoint",
                    "must be a directory (or a path that does not exist yet)",
                    self.path,
                    "Pass a new folder name, e.g. checkpoint='fit.ckpt'",
                )
            return None
        where = f"checkpoint {self.path!r}"
        try:
            doc = json.loads(self._read(STATE))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ValueError(
                f"{where}: {STATE} is not valid JSON ({e}); delete the folder to start over"
            ) from None
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise ValueError(
                f"{where}: {STATE} is not an ooc_lowrank checkpoint (format "
                f"{doc.get('format') if isinstance(doc, dict) else None!r}); pass another path"
            )
        if doc.get("version") != VERSION:
            raise ValueError(
                f"{where}: checkpoint version must be {VERSION}; got {doc.get('version')!r}. "
                "Delete it to start over"
            )
        theirs = doc.get("fingerprint")
        if theirs != self.fingerprint:
            raise CheckpointMismatchError(
                f"{where} was written by a different fit: {_diff(theirs, self.fingerprint)}. "
                "Resume with the same estimator parameters and data, or delete the folder "
                "(or pass another checkpoint path) to start a new fit"
            )
        try:
            raw = self._read(doc["arrays"])
        except FileNotFoundError:
            raise ValueError(
                f"{where}: arrays file {doc['arrays']!r} named by {STATE} is missing; the "
                "checkpoint was damaged outside ooc_lowrank. Delete the folder to start over"
            ) from None
        if hashlib.sha256(raw).hexdigest() != doc.get("sha256"):
            raise ValueError(
                f"{where}: arrays file {doc['arrays']!r} does not match its SHA-256 in {STATE} "
                "(modified or truncated). Delete the folder to start over"
            )
        with np.load(io.BytesIO(raw), allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        core = {k[2:]: v for k, v in arrays.items() if k.startswith("c:")}
        ext = {k[2:]: v for k, v in arrays.items() if k.startswith("e:")}
        self._restored = (doc["state"], core, doc.get("extra", {}), ext)
        logger.info("resuming from %s at iteration %d", where, int(doc["iteration"]))
        return self._restored

    def due(self, iteration) -> bool:
        """Whether ``iteration`` is a save point."""
        return int(iteration) % self.every == 0

    def save(self, iteration, state: dict, arrays: dict):
        """Save ``state`` (JSON-able) and ``arrays`` atomically (see the module docstring)."""
        buf = io.BytesIO()
        payload = {f"c:{k}": np.asarray(v) for k, v in arrays.items()}
        payload.update({f"e:{k}": np.asarray(v) for k, v in self.extra_arrays.items()})
        np.savez(buf, **payload)
        raw = buf.getvalue()
        name = f"arrays-{int(iteration)}-{uuid.uuid4().hex[:8]}.npz"
        self._write_atomic(name, raw)
        doc = {
            "format": FORMAT,
            "version": VERSION,
            "fingerprint": self.fingerprint,
            "iteration": int(iteration),
            "arrays": name,
            "sha256": hashlib.sha256(raw).hexdigest(),
            "state": _jsonable(state),
            "extra": _jsonable(self.extra),
        }
        self._write_atomic(STATE, json.dumps(doc).encode())
        self.n_saves += 1
        for old in self._list():  # after the commit: files state.json no longer names
            if old != name and old.startswith("arrays-") and old.endswith(".npz"):
                try:
                    self._remove(old)
                except OSError:  # pragma: no cover - a concurrent cleaner; harmless
                    pass
        logger.debug("checkpoint %r saved at iteration %d", self.path, int(iteration))


def _diff(theirs, ours, prefix=""):
    """First difference between two fingerprints, as text."""
    if isinstance(theirs, dict) and isinstance(ours, dict):
        for k in list(ours) + [k for k in theirs if k not in ours]:  # in fingerprint order
            if theirs.get(k) != ours.get(k):
                return _diff(theirs.get(k), ours.get(k), f"{prefix}{k}.")
    return f"{prefix.rstrip('.') or 'fingerprint'} is {theirs!r} there and {ours!r} here"


def open_checkpoint(path, every, estimator, extra=None, **blocked):
    """A :class:`Checkpoint` for ``estimator`` fitted on ``blocked`` inputs, or None.

    ``extra``: more JSON-able facts about the data (e.g. the mean of the observed values).
    """
    if path is None:
        return None
    fp = {
        "estimator": type(estimator).__name__,
        "params": params_fingerprint(estimator),
        "data": data_fingerprint(**blocked),
    }
    if extra:
        fp["data"].update(extra)
    return Checkpoint(path, every, fp)
