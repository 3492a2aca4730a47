"""The ooc_lowrank Zarr v3 dataset format: one place for reading, writing and validating stores.

A *dataset* is a Zarr v3 group whose arrays all describe the same ``n_rows`` samples and share
the same row blocks (``block_rows`` rows each, the last one shorter).  Three kinds of array:

``dense``
    2-D array ``(n_rows, n_cols)`` chunked by rows only: chunks ``(block_rows, n_cols)``.
``csr``
    Sparse rows (features ``X``, labels ``Y``): a subgroup with ``indptr`` int64
    ``(n_rows + 1,)``, ``indices`` int32/int64 ``(nnz,)`` and ``data`` ``(nnz,)``.  Any row range
    ``[s, e)`` is the contiguous slice ``indptr[s]:indptr[e]``, so a row block is read without
    touching the others' entries.
``coo``
    Observed entries of a partially observed matrix (ratings, signed edges, partially observed
    labels), sorted by row: ``row`` int64, ``col``, ``value`` ``(nnz,)`` and ``indptr`` int64
    ``(n_rows + 1,)`` whose values at the block boundaries are the block offsets.  Duplicate
    ``(row, col)`` pairs are kept as written.

The root group's attribute ``"ooc_lowrank"`` holds the metadata: format name and version, number
of rows, row-block boundaries, each array's kind, shape, dtype and nnz, and user attributes
(label names, source file...).  It is written **last**, and a store is written under a temporary
name and renamed into place only after it is complete, so an interrupted write (exception,
SIGKILL) never leaves something that opens as a valid store and never damages a store that
already existed under that name.

Every chunk of every array is written, even an all-zero one (Zarr's default skips them and
reads a missing chunk as its fill value, so a deleted chunk file would read as zeros).  The
writer records each chunk's key, byte size and CRC-32 in ``manifest.json`` (named in the
metadata, written before it).  :func:`open_dataset` lists the store once and fails on a missing
or resized chunk; ``verify="full"`` also checks every checksum; every block read checks that
the chunks it covers exist.  Stores written before the manifest existed open with an
:class:`OOCLowRankWarning` (a missing chunk cannot be told from an all-zero one there);
:func:`rebuild_manifest` adds one (writing any missing chunk explicitly as zeros).

Every store version has an identity, the metadata's ``store_id`` (a random token drawn by the
writer; stores written before it existed use a checksum of their metadata).  A reader remembers
it when the store is opened and, after every block read, checks that the root ``zarr.json`` is
still the one it opened (one ``stat``, or one small GET remotely; the identity is read again only
when that changed), so a store replaced under a running fit (``convert --overwrite``) stops it
with :class:`StoreReplacedError` instead of mixing two stores' blocks into one model.

Temporary stores are named ``.<name>.tmp-<pid>-<host>-<random>``.  An exception or SIGTERM
removes them (the SIGTERM handler then hands the signal to the previous handler); after a
SIGKILL, the next write to the same destination on the same host removes the folders of
processes that are no longer alive.

Stores may be local paths or fsspec URLs (``memory://``, ``s3://`` with s3fs installed).
"""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import signal
import socket
import threading
import time
import uuid
import warnings
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import zarr

from ._blocksize import TARGET_BLOCK_BYTES, default_block_rows  # noqa: F401 (both importable here)
from ._validation import (
    OOCLowRankWarning,
    StoreError,
    check_csr_structure,
    check_finite_block,
    param_error,
)

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "ArrayHandle",
    "Dataset",
    "DatasetWriter",
    "StoreError",
    "StoreReplacedError",
    "default_block_rows",
    "drop_page_cache",
    "open_dataset",
    "process_read_bytes",
    "rebuild_manifest",
]

logger = logging.getLogger("ooc_lowrank")

FORMAT_NAME = "ooc_lowrank.dataset"
FORMAT_VERSION = 1
_META_KEY = "ooc_lowrank"
MANIFEST_FILE = "manifest.json"
_NNZ_CHUNK = 1 << 22  # upper bound on entries per chunk of 1-D sparse arrays
_INDPTR_CHUNK = 1 << 20  # upper bound on rows per indptr chunk
_MIN_NNZ_CHUNK = 1 << 12


def _pow2_at_least(x: float) -> int:
    return 1 << max(0, int(np.ceil(np.log2(max(x, 1.0)))))


_KINDS = ("dense", "csr", "coo")


# ---------------------------------------------------------------------------------------------
# locations: local paths and fsspec URLs
# ---------------------------------------------------------------------------------------------


def _is_url(loc: str) -> bool:
    return "://" in loc and not loc.startswith("file://")


def _local_path(loc: str) -> str:
    return os.path.abspath(loc[len("file://") :] if loc.startswith("file://") else loc)


def _fs(loc: str):
    import fsspec.core

    return fsspec.core.url_to_fs(loc)


def _exists(loc: str) -> bool:
    if not _is_url(loc):
        return os.path.exists(_local_path(loc))
    fs, path = _fs(loc)
    return fs.exists(path)


def _remove(loc: str) -> None:
    if not _is_url(loc):
        p = _local_path(loc)
        if os.path.isdir(p):
            shutil.rmtree(p, ignore_errors=True)
        elif os.path.exists(p):
            os.remove(p)
        return
    fs, path = _fs(loc)
    if fs.exists(path):
        fs.rm(path, recursive=True)


def is_store(loc) -> bool:
    """Whether ``loc`` (local path or fsspec URL) holds an ooc_lowrank store: a root
    ``zarr.json`` carrying the ooc_lowrank metadata.  Unreadable or foreign means False."""
    loc = os.fspath(loc) if isinstance(loc, os.PathLike) else str(loc)
    try:
        doc = json.loads(_read_file(loc, "zarr.json"))
    except (OSError, ValueError):
        return False
    attrs = doc.get("attributes") if isinstance(doc, dict) else None
    meta = attrs.get(_META_KEY) if isinstance(attrs, dict) else None
    return isinstance(meta, dict) and meta.get("format") == FORMAT_NAME


#: the ``format`` of a saved model's ``model.json`` (:mod:`ooc_lowrank._persist` writes it)
MODEL_FORMAT = "ooc_lowrank.model"


def is_model(path) -> bool:
    """Whether ``path`` (local path or fsspec URL) holds a saved ooc_lowrank model: a directory
    whose ``model.json`` declares the model format.  Unreadable or foreign means False."""
    path = os.fspath(path) if isinstance(path, os.PathLike) else str(path)
    try:
        if "://" in path:
            import fsspec.core

            fs, p = fsspec.core.url_to_fs(path)
            with fs.open(f"{p.rstrip('/')}/model.json", "rb") as f:
                doc = json.loads(f.read())
        else:
            with open(os.path.join(path, "model.json"), "rb") as f:
                doc = json.loads(f.read())
    except (OSError, ValueError):
        return False
    return isinstance(doc, dict) and doc.get("format") == MODEL_FORMAT


def _norm(loc) -> str:
    """A location in one spelling: URLs without a trailing slash, local paths resolved."""
    loc = str(loc)
    return loc.rstrip("/") if _is_url(loc) else os.path.realpath(_local_path(loc))


def input_stores(*objs):
    """The paths or URLs of the ``objs`` that name a store (a path, or a :class:`Dataset` /
    array handle opened from one): the inputs an output must not overwrite."""
    out = []
    for obj in objs:
        if isinstance(obj, (str, os.PathLike)):
            out.append(os.fspath(obj))
        elif isinstance(getattr(obj, "url", None), str):
            out.append(obj.url)
    return out


def overlapping_input(loc, inputs):
    """The first of ``inputs`` (None entries skipped) that ``loc`` is, contains or lies
    inside, or None."""
    out = _norm(loc)
    for inp in inputs:
        if inp is None:
            continue
        i = _norm(os.fspath(inp) if isinstance(inp, os.PathLike) else inp)
        if out == i or out.startswith(i.rstrip("/") + "/") or i.startswith(out.rstrip("/") + "/"):
            return inp
    return None


#: what each kind of output is recognised by, for the messages
_MARKERS = {
    "store": "no zarr.json with ooc_lowrank metadata",
    "model": "no model.json of format 'ooc_lowrank.model'",
}


def check_destination(loc, what="store", *, overwrite, inputs=(), name="dest") -> None:
    """Refuse to write ``what`` ("store" or "model") at ``loc`` when it is, contains or lies
    inside one of the input stores ``inputs``, when something other than a ``what`` is there
    (whatever ``overwrite`` says), or a ``what`` is there and not ``overwrite``.  Does no work
    otherwise.  The CLI's ``check_output`` applies the same rules with its own wording."""
    loc = os.fspath(loc) if isinstance(loc, os.PathLike) else str(loc)
    inp = overlapping_input(loc, inputs)
    if inp is not None:
        raise param_error(
            name, f"must not be, contain or lie inside the input store {inp!r}", loc,
            "Write to another path",
        )  # fmt: skip
    exists = _exists(loc) or (not _is_url(loc) and os.path.islink(_local_path(loc)))
    if not exists:
        return
    ours = is_model if what == "model" else is_store
    if not ours(loc):
        raise param_error(
            name,
            f"exists and is not an ooc_lowrank {what} ({_MARKERS[what]}), so it is never "
            "replaced",
            loc,
            "Choose a new path, or remove it yourself if it is really disposable",
            exc=FileExistsError,
        )
    if not overwrite:
        raise param_error(
            name, f"already holds an ooc_lowrank {what}", loc,
            "pass overwrite=True (CLI: --overwrite) to replace it, or choose another path",
            exc=FileExistsError,
        )  # fmt: skip


class DiskSpaceError(OSError):
    """A local write would not fit the free space of its filesystem (checked before writing)."""


def _bytes_text(n) -> str:
    n = float(n)
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if n < 1024 or unit == "EiB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} EiB"


def check_free_space(loc, need_bytes, *, name="store", what="the output") -> None:
    """Refuse to write ``what`` (about ``need_bytes``) at the local path ``loc`` when the
    filesystem holding it has less free space (``shutil.disk_usage`` of the nearest existing
    folder).  The one place where stores, generators and converters check the disk; fsspec
    URLs are not checked (an object store reports no free space)."""
    loc = os.fspath(loc) if isinstance(loc, os.PathLike) else str(loc)
    if _is_url(loc) or need_bytes <= 0:
        return
    folder = os.path.dirname(os.path.abspath(_local_path(loc)))
    while folder and not os.path.isdir(folder):
        parent = os.path.dirname(folder)
        if parent == folder:
            return
        folder = parent
    try:
        free = shutil.disk_usage(folder).free
    except OSError:
        return  # cannot tell: the write itself reports a full disk
    if need_bytes > free:
        raise DiskSpaceError(
            f"{name} {loc!r}: {what} needs about {_bytes_text(need_bytes)}, more than the "
            f"{_bytes_text(free)} free on the filesystem of {folder}; refused before writing it. "
            "Free disk space, write to another filesystem, or write fewer rows"
        )


class StoreAccessError(PermissionError):
    """An object store refused access to a location, or no credentials were found."""


#: botocore / s3fs exception class names that mean "credentials missing or refused".
_AUTH_ERRORS = ("NoCredentialsError", "PartialCredentialsError", "CredentialRetrievalError")


def _access_error(loc: str, e: BaseException, action: str):
    """A :class:`StoreAccessError` for ``e`` raised while accessing remote ``loc``, else None.

    Credentials missing (botocore's ``NoCredentialsError``) or refused (s3fs turns
    ``InvalidAccessKeyId`` / ``SignatureDoesNotMatch`` / ``AccessDenied`` into
    ``PermissionError``) become one message naming the location and the fix.
    """
    if not _is_url(loc) or isinstance(e, StoreAccessError):
        return None
    names = {c.__name__ for c in type(e).__mro__}
    if not (names & set(_AUTH_ERRORS) or isinstance(e, PermissionError)):
        return None
    what = "no credentials were found" if names & set(_AUTH_ERRORS) else "access was refused"
    return StoreAccessError(
        f"cannot {action} {loc!r}: {what} ({type(e).__name__}: {e}). Check the credentials: "
        "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE), plus "
        "AWS_ENDPOINT_URL_S3 for an S3-compatible server, and the bucket's permissions"
    )


def _host_tag() -> str:
    return f"{zlib.crc32(socket.gethostname().encode()):08x}"


def _sibling(loc: str, tag: str) -> str:
    """``.<name>.<tag>-<pid>-<host>-<random>`` next to ``loc`` (see :func:`_remove_stale`)."""
    loc = loc.rstrip("/")
    head, _, name = loc.rpartition("/")
    suffix = f"{tag}-{os.getpid()}-{_host_tag()}-{uuid.uuid4().hex[:8]}"
    if not _is_url(loc):
        p = _local_path(loc)
        return os.path.join(os.path.dirname(p), f".{os.path.basename(p)}.{suffix}")
    return f"{head}/.{name}.{suffix}"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def _reap_stale(parent: str, prefix: str) -> list[str]:
    """Remove folders ``<parent>/<prefix><pid>-<host>-<random>`` whose process (on this host)
    is gone; return the names of the others with that prefix (live or foreign)."""
    try:
        names = os.listdir(parent)
    except OSError:
        return []
    host, kept = _host_tag(), []
    for n in names:
        if not n.startswith(prefix):
            continue
        parts = n[len(prefix) :].split("-")
        if len(parts) == 3 and parts[0].isdigit() and parts[1] == host:
            pid = int(parts[0])
            if pid != os.getpid() and not _pid_alive(pid):
                logger.info("removing %s, left by process %d which is gone", n, pid)
                shutil.rmtree(os.path.join(parent, n), ignore_errors=True)
                continue
        kept.append(n)
    return kept


def _remove_stale(loc: str, what: str = "store") -> None:
    """Remove temporaries (``what``: store or model) left next to ``loc`` by dead processes of
    this host (SIGKILL).

    Only local destinations: a process on another machine cannot be checked.
    """
    if _is_url(loc):
        return
    p = _local_path(loc.rstrip("/"))
    parent, base = os.path.dirname(p), os.path.basename(p)
    _reap_stale(parent, f".{base}.tmp-")
    if os.path.exists(p):
        _reap_stale(parent, f".{base}.old-")
        return
    # killed between the two renames of _commit: the .old folder is the only copy of the
    # previous store; keep it for the user to rename back
    if not os.path.isdir(parent or "."):
        return  # a new folder: nothing can be stale in it
    for n in os.listdir(parent or "."):
        if n.startswith(f".{base}.old-"):
            logger.warning("%s holds the previous %s of %s; rename it back", n, what, p)


# SIGTERM: abort every open writer, then hand the signal to whoever had it before.
_ACTIVE: set = set()
_SIG_LOCK = threading.RLock()  # re-entrant: the handler may run while the lock is held
_PREV_HANDLER = None
_INSTALLED = False


def _on_sigterm(signum, frame):
    prev = _PREV_HANDLER
    for w in list(_ACTIVE):
        try:
            w.abort()
        except Exception:  # noqa: BLE001 - best effort while dying
            pass
    _uninstall_sigterm()
    if callable(prev):
        prev(signum, frame)
    elif prev != signal.SIG_IGN:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)


def _register(w) -> None:
    global _PREV_HANDLER, _INSTALLED
    with _SIG_LOCK:
        _ACTIVE.add(w)
        if not _INSTALLED and threading.current_thread() is threading.main_thread():
            try:
                _PREV_HANDLER = signal.signal(signal.SIGTERM, _on_sigterm)
                _INSTALLED = True
            except (ValueError, OSError):  # not allowed here (embedded interpreter...)
                pass


def _unregister(w) -> None:
    with _SIG_LOCK:
        _ACTIVE.discard(w)
        if not _ACTIVE:
            _uninstall_sigterm()


def _uninstall_sigterm() -> None:
    global _PREV_HANDLER, _INSTALLED
    if not _INSTALLED or threading.current_thread() is not threading.main_thread():
        return
    prev, _PREV_HANDLER, _INSTALLED = _PREV_HANDLER, None, False
    try:
        if signal.getsignal(signal.SIGTERM) is _on_sigterm:
            signal.signal(signal.SIGTERM, prev if prev is not None else signal.SIG_DFL)
    except (ValueError, OSError, TypeError):
        pass


class _ScratchDir:
    """A private scratch folder removed on exit, on SIGTERM, and (after a SIGKILL) by the next
    scratch folder of the same prefix once its process is gone."""

    def __init__(self, prefix, dir=None):  # noqa: A002 - tempfile's word
        import tempfile

        self.parent = dir or tempfile.gettempdir()
        _reap_stale(self.parent, prefix)
        self.path = tempfile.mkdtemp(
            prefix=f"{prefix}{os.getpid()}-{_host_tag()}-", dir=self.parent
        )

    def __enter__(self):
        _register(self)
        return self.path

    def __exit__(self, *exc):
        self.abort()
        return False

    def abort(self):
        _unregister(self)
        shutil.rmtree(self.path, ignore_errors=True)


class _SiblingDir(_ScratchDir):
    """``.<name>.tmp-<pid>-<host>-<random>`` beside ``loc`` (after reaping the stale ones)."""

    def __init__(self, loc, what):  # noqa: D107 - see sibling_temporary
        _remove_stale(loc, what)
        self.path = _sibling(loc, "tmp")
        os.makedirs(self.path)


def sibling_temporary(loc, what="store"):
    """Context manager: a new folder beside the local path ``loc``, named as the store writer
    names its temporaries (its path).  Temporaries of dead writers of ``loc`` (SIGKILL) are
    removed first, a live writer's are left alone; the new folder is removed when the block
    exits (also by an exception or SIGTERM) unless it was renamed away."""
    return _SiblingDir(loc, what)


def scratch_dir(prefix, dir=None):  # noqa: A002
    """Context manager: a temporary folder ``<dir>/<prefix><pid>-<host>-<random>`` (its path).

    Removed when the block exits (also by an exception or SIGTERM); a folder left by a killed
    process (SIGKILL) is removed by the next ``scratch_dir`` of the same prefix and folder.
    """
    return _ScratchDir(prefix, dir)


# ---------------------------------------------------------------------------------------------
# chunk manifests
# ---------------------------------------------------------------------------------------------


def _array_paths(arrays: dict) -> list[str]:
    """Zarr array paths of a dataset's arrays (``X``, ``Y/indptr``, ``Y/indices``, ...)."""
    out = []
    for name, m in arrays.items():
        kind = m.get("kind") if isinstance(m, dict) else m
        if kind == "dense":
            out.append(name)
        else:
            parts = (
                ("indptr", "indices", "data")
                if kind == "csr"
                else ("indptr", "col", "value", "row")
            )
            out += [f"{name}/{q}" for q in parts]
    return out


def _chunk_grid_keys(shape, chunks) -> list[str]:
    """Every chunk key (``c/i/j``) of a regular grid; none when a dimension is empty."""
    counts = [-(-int(s) // int(c)) for s, c in zip(shape, chunks, strict=True)]
    if any(k == 0 for k in counts):
        return []
    idx = np.indices(counts).reshape(len(counts), -1).T
    return ["c/" + "/".join(str(int(i)) for i in row) for row in idx]


def _list_files(loc: str) -> dict[str, int]:
    """``{relative path: size}`` of every file under ``loc`` (one listing)."""
    out = {}
    if not _is_url(loc):
        root = _local_path(loc)
        for d, _, files in os.walk(root):
            rel = os.path.relpath(d, root).replace(os.sep, "/")
            for f in files:
                key = f if rel == "." else f"{rel}/{f}"
                try:
                    out[key] = os.path.getsize(os.path.join(d, f))
                except OSError:
                    pass
        return out
    fs, path = _fs(loc)
    base = path.strip("/")
    for f, info in fs.find(path.rstrip("/"), detail=True).items():
        rel = f.strip("/")
        if rel.startswith(base + "/"):
            out[rel[len(base) + 1 :]] = int(info.get("size") or 0)
    return out


def _read_file(loc: str, rel: str) -> bytes:
    if not _is_url(loc):
        with open(os.path.join(_local_path(loc), *rel.split("/")), "rb") as fh:
            return fh.read()
    fs, path = _fs(loc)
    return fs.cat_file(f"{path.rstrip('/')}/{rel}")


def _write_file(loc: str, rel: str, data) -> None:
    """Write ``data`` (bytes or any C-contiguous buffer) to ``loc/rel``, creating folders."""
    if not _is_url(loc):
        full = os.path.join(_local_path(loc), *rel.split("/"))
        try:
            fh = open(full, "wb")
        except FileNotFoundError:  # a chunk's folder (c/i/) not made yet
            os.makedirs(os.path.dirname(full), exist_ok=True)
            fh = open(full, "wb")
        with fh:
            fh.write(data)
        return
    fs, path = _fs(loc)
    fs.pipe_file(f"{path.rstrip('/')}/{rel}", bytes(memoryview(data).cast("B")))


def _copy_in(loc: str, rel: str, src: str, piece: int = 1 << 23) -> list[int]:
    """Copy local file ``src`` to ``loc/rel`` piece by piece; returns ``[bytes, crc32]``."""
    if not _is_url(loc):
        full = os.path.join(_local_path(loc), *rel.split("/"))
        os.makedirs(os.path.dirname(full), exist_ok=True)
        out = open(full, "wb")  # noqa: SIM115 - closed below
    else:
        fs, path = _fs(loc)
        out = fs.open(f"{path.rstrip('/')}/{rel}", "wb")
    size, crc = 0, 0
    with open(src, "rb") as fh, out:
        while data := fh.read(piece):
            out.write(data)
            size, crc = size + len(data), zlib.crc32(data, crc)
    return [size, crc]


def _raw_chunk_dtype(arr):
    """The dtype whose C-ordered bytes are exactly ``arr``'s chunk files (one ``bytes`` codec,
    no filter or compressor, C order, ``c/i/j`` keys), or None when zarr's encoding is anything
    else (the writer then goes through ``__setitem__``)."""
    from zarr.codecs import BytesCodec

    try:
        md = arr.metadata
        codecs = list(md.codecs)
        sep = md.chunk_key_encoding.separator
        enc = md.chunk_key_encoding.name
    except AttributeError:  # not zarr format 3
        return None
    if len(codecs) != 1 or not isinstance(codecs[0], BytesCodec) or (enc, sep) != ("default", "/"):
        return None
    if arr.order != "C":
        return None
    dt = np.dtype(arr.dtype)
    if dt.itemsize == 1:
        return dt
    endian = getattr(codecs[0].endian, "value", codecs[0].endian)
    return dt.newbyteorder("<" if endian == "little" else ">")


def _build_manifest(loc: str, paths: list[str], known: dict | None = None) -> dict:
    """``{array path: {chunk key: [bytes, crc32]}}`` of the chunks present under ``loc``.

    ``known`` maps full chunk paths to the ``(bytes, crc32)`` of the buffer the writer wrote
    there; a listed file of that size takes its CRC from there instead of being read back.
    """
    files = _list_files(loc)
    known = known or {}
    out = {}
    for ap in paths:
        pre = f"{ap}/c/"
        man = {}
        for k, size in sorted(files.items()):
            if not k.startswith(pre):
                continue
            kn = known.get(k)
            crc = kn[1] if kn is not None and kn[0] == size else zlib.crc32(_read_file(loc, k))
            man[k[len(ap) + 1 :]] = [size, crc]
        out[ap] = man
    return out


def _load_manifest(url: str, meta: dict):
    """The store's manifest, or None for stores written before manifests existed."""
    name = meta.get("manifest")
    if name is None:
        return None
    try:
        man = json.loads(_read_file(url, str(name)))
        if not isinstance(man, dict) or not all(isinstance(v, dict) for v in man.values()):
            raise ValueError("not a mapping of arrays to chunks")
    except Exception as e:  # noqa: BLE001 - any failure means the same thing
        raise StoreError(
            url,
            None,
            f"the chunk manifest {name!r} is missing or unreadable",
            repr(e),
            "The store is incomplete or corrupt; write it again",
        ) from None
    return man


def _check_manifest(url: str, g, meta: dict, *, checksums: bool) -> bool:
    """Check every expected chunk against the manifest; False for a pre-manifest store."""
    man = _load_manifest(url, meta)
    if man is None:
        warnings.warn(
            f"store {url!r} was written before chunk manifests existed: a missing chunk file "
            "would read as zeros and cannot be detected. Run "
            "ooc_lowrank.storage.rebuild_manifest(url) once (or convert the data again)",
            OOCLowRankWarning,
            stacklevel=3,
        )
        return False
    files = _list_files(url)
    for ap in _array_paths(meta["arrays"]):
        expected = man.get(ap)
        if expected is None:
            raise StoreError(
                url,
                ap,
                "array is not in the chunk manifest",
                None,
                "The store is corrupt; write it again",
            )
        try:
            za = g[ap]
            grid = _chunk_grid_keys(za.shape, za.chunks)
        except Exception as e:  # noqa: BLE001 - zarr raises several types
            raise StoreError(
                url,
                ap,
                "array is missing or unreadable",
                repr(e),
                "The store is incomplete or corrupt; write it again",
            ) from None
        for key in grid:
            if key not in expected:
                raise StoreError(
                    url,
                    ap,
                    "chunk missing from the manifest",
                    key,
                    "The store is corrupt; write it again",
                )
        for key, (size, crc) in expected.items():
            full = f"{ap}/{key}"
            if full not in files:
                raise StoreError(
                    url,
                    ap,
                    f"missing chunk {full!r} (deleted or never written)",
                    None,
                    "The store is incomplete; restore the file or write the store again",
                )
            if files[full] != size:
                raise StoreError(
                    url,
                    ap,
                    f"chunk {full!r} has {files[full]} bytes, the manifest "
                    f"records {size} (truncated or overwritten)",
                    None,
                    "The store is corrupt; restore the file or write the store again",
                )
            if checksums and zlib.crc32(_read_file(url, full)) != crc:
                raise StoreError(
                    url,
                    ap,
                    f"chunk {full!r} fails its checksum (CRC-32 differs from the manifest)",
                    None,
                    "The store is corrupt; write it again",
                )
    return True


#: Attempts of a local commit that another writer of the same path keeps interrupting.
_COMMIT_ATTEMPTS = 20

# ---------------------------------------------------------------------------------------------
# store identity: every pass reads one version of a store
# ---------------------------------------------------------------------------------------------


class StoreReplacedError(StoreError):
    """A store was replaced (or removed) while it was being read.

    Raised by a block read (and by :func:`open_dataset`) when the store under the path is no
    longer the version that was opened: its identity (``store_id``, written at creation) changed.
    The data already read and the data still to read come from different stores, so the result
    would match neither; re-run the computation on the store now in place.
    """

    def __init__(self, store, old, new, array=None, when="being read"):
        self.old_id, self.new_id = old, new
        now = "removed" if new is None else new
        super().__init__(
            store,
            array,
            f"the store was replaced while {when} (identity {old or 'unknown'} -> {now})",
            None,
            "Every pass must read one version of a store: do not overwrite a store in use, "
            "and re-run the fit (or prediction) on the store now in place",
        )


def _store_id(meta: dict) -> str:
    """The identity of the store version holding ``meta``: its ``store_id`` (a random token the
    writer draws at creation), or, for stores written before identities existed, a checksum of
    the metadata (without the manifest name, which :func:`rebuild_manifest` adds in place)."""
    sid = meta.get("store_id")
    if isinstance(sid, str) and sid:
        return sid
    legacy = {k: v for k, v in meta.items() if k != "manifest"}
    return f"legacy-{zlib.crc32(json.dumps(legacy, sort_keys=True).encode()):08x}"


def _root_signature(loc: str):
    """A cheap fingerprint of the root ``zarr.json`` (None when it is missing): its inode, mtime
    and size locally (one ``stat``; an atomic replacement gives a new file), its bytes remotely
    (one small GET)."""
    try:
        if not _is_url(loc):
            st = os.stat(os.path.join(_local_path(loc), "zarr.json"))
            return (st.st_ino, st.st_mtime_ns, st.st_size)
        return _read_file(loc, "zarr.json")
    except (FileNotFoundError, NotADirectoryError):
        return None


def _current_store_id(loc: str):
    """The identity of the store now at ``loc``, or None when there is none (removed, or in the
    middle of a remote replacement)."""
    try:
        doc = json.loads(_read_file(loc, "zarr.json"))
        meta = doc["attributes"][_META_KEY]
        return _store_id(meta) if isinstance(meta, dict) else None
    except (FileNotFoundError, NotADirectoryError, ValueError, KeyError, TypeError):
        return None


class _StoreVersion:
    """The version of a store a reader opened: its identity and the root-metadata fingerprint
    seen then.  :meth:`check` costs one ``stat`` (remotely one small GET) and reads the identity
    again only when the fingerprint changed.  Travels with pickled array handles."""

    def __init__(self, url: str, store_id: str, signature):
        self.url, self.store_id, self.signature = url, store_id, signature

    def check(self, array=None, cause=None, when="being read"):
        """Raise :class:`StoreReplacedError` if the store in place is no longer this version.

        With ``cause`` (the error a read raised, which the caller re-raises when this returns),
        a failure of the check itself is ignored, so the original error is shown.
        """
        try:
            sig = _root_signature(self.url)
            if sig is not None and sig == self.signature:
                return
            now = _current_store_id(self.url)
        except Exception:
            if cause is None:
                raise
            return
        if now is not None and now == self.store_id:
            self.signature = sig  # the same store, its metadata rewritten in place
            return
        raise StoreReplacedError(self.url, self.store_id, now, array, when) from cause


def _commit(tmp: str, dest: str) -> None:
    """Move a finished store from ``tmp`` to ``dest``, replacing an old one atomically (local).

    Two writers committing to one path at once (``generate --overwrite`` twice): each rename
    may find the other's store just gone or just arrived.  The commit then looks again, and
    the last writer's store wins, as if the writes had run one after the other."""
    if not _is_url(dest):
        d, t = _local_path(dest), _local_path(tmp)
        for _ in range(_COMMIT_ATTEMPTS):
            if _commit_local(t, d, dest):
                return
        raise StoreError(
            dest,
            None,
            f"another process kept replacing this store while this write was moving into "
            f"place ({_COMMIT_ATTEMPTS} attempts); this write was discarded",
            None,
            "Write a path from one process at a time, then run the command again",
        )
    _commit_remote(tmp, dest)


def _commit_local(t: str, d: str, dest: str) -> bool:
    """One attempt of :func:`_commit`; False when another writer's rename got in between."""
    if not os.path.lexists(d):
        try:
            os.rename(t, d)
            return True
        except OSError as e:
            if e.errno in (errno.ENOTEMPTY, errno.EEXIST):  # another writer's store arrived
                return False
            raise
    old = _sibling(dest, "old")
    try:
        os.rename(d, old)  # atomic on POSIX; the new store follows at once
    except FileNotFoundError:  # another writer moved it aside just now
        return False
    try:
        os.rename(t, d)
    except OSError as e:
        if e.errno in (errno.ENOTEMPTY, errno.EEXIST):
            # another writer's store arrived in between: it replaced the one moved aside,
            # which is now only a stale copy; this store replaces the other writer's next
            shutil.rmtree(old, ignore_errors=True)
            return False
        os.rename(old, d)  # put the old store back
        raise
    except BaseException:
        os.rename(old, d)
        raise
    shutil.rmtree(old, ignore_errors=True)
    return True


def _commit_remote(tmp: str, dest: str) -> None:
    # Object stores have no atomic rename: copy every file but the root metadata first, then the
    # root zarr.json (which carries the completion marker), so a reader never sees a half store
    # as valid.  An existing remote store is first copied to a ``.old`` sibling (complete, with
    # its marker), so a failure while the new one is copied in never loses it: the old store is
    # copied back, or, if that fails too, the error names the sibling that holds it.
    fs, tpath = _fs(tmp)
    _, dpath = _fs(dest)
    old = None
    if fs.exists(dpath):
        old = _fs(_sibling(dest, "old"))[1]
        _copy_tree(fs, dpath, old)
        # the root metadata first: a reader of the old store then fails every later block
        # read as "replaced" (see _StoreVersion), never as a missing chunk
        fs.rm(f"{dpath.rstrip('/')}/zarr.json")
        fs.rm(dpath, recursive=True)
    try:
        _copy_tree(fs, tpath, dpath)
    except BaseException as exc:
        if old is None:
            raise
        try:
            if fs.exists(dpath):
                fs.rm(dpath, recursive=True)
            _copy_tree(fs, old, dpath)
            fs.rm(old, recursive=True)
        except Exception:
            raise StoreError(
                dest,
                None,
                f"replacing the store failed ({exc!r}) and so did putting the old one back",
                fix=f"the previous store is intact at {old!r}; copy it back to {dest!r}",
            ) from exc
        raise
    if old is not None:
        fs.rm(old, recursive=True)
    fs.rm(tpath, recursive=True)


def _copy_tree(fs, src: str, dst: str) -> None:
    """Copy a store folder on ``fs``: every file, then the root ``zarr.json`` last."""
    src, dst = src.rstrip("/"), dst.rstrip("/")
    root_meta = f"{src}/zarr.json"
    for f in sorted(fs.find(src)):
        if f.rstrip("/") == root_meta.lstrip("/") or f == root_meta:
            continue
        fs.copy(f, dst + f[len(src) :])
    fs.copy(root_meta, f"{dst}/zarr.json")


# ---------------------------------------------------------------------------------------------
# writing
# ---------------------------------------------------------------------------------------------


@dataclass
class _Spec:
    name: str
    kind: str
    n_cols: int
    dtype: np.dtype
    index_dtype: np.dtype | None = None


def _concat_csr(pieces: list[sp.csr_matrix], n_cols: int, dtype) -> sp.csr_matrix:
    """Concatenate CSR row blocks keeping duplicates and order (scipy's vstack may not)."""
    if len(pieces) == 1:
        return pieces[0]
    data = np.concatenate([p.data for p in pieces]).astype(dtype, copy=False)
    indices = np.concatenate([p.indices for p in pieces])
    nnz = np.cumsum([0] + [p.indptr[-1] for p in pieces])
    indptr = np.concatenate(
        [[0]] + [p.indptr[1:].astype(np.int64) + nnz[i] for i, p in enumerate(pieces)]
    )
    n = sum(p.shape[0] for p in pieces)
    return sp.csr_matrix((data, indices, indptr), shape=(n, n_cols))


class DatasetWriter:
    """Stream row blocks into a new dataset store with bounded memory.

    Parameters
    ----------
    url : str
        Destination: a local path or an fsspec URL (``memory://...``, ``s3://...``).
    block_rows : int, optional
        Rows per stored row block.  Default: chosen from the first appended block so that a
        row block holds about 16 MB.
    attrs : dict, optional
        JSON-serialisable user attributes (label names, source file...).
    overwrite : bool, default False
        Replace an existing store at ``url``.  The old store stays intact until the new one is
        complete.  Anything else at ``url`` (a model, a folder, a file) is never replaced.
    expected_rows : int, optional
        Rows the store will hold, when known (generators, converters that count first).  Before
        the first block is written, the store's size is extrapolated from the appended rows
        and checked against the free disk space (:func:`check_free_space`); every block is
        checked before it is written in any case.

    Examples
    --------
    >>> with DatasetWriter("data.zarr") as w:          # doctest: +SKIP
    ...     w.add_dense("X", n_cols=500, dtype="float32")
    ...     w.add_csr("Y", n_cols=1000, dtype="float32")
    ...     for Xb, Yb in blocks:
    ...         w.append(X=Xb, Y=Yb)
    """

    def __init__(self, url, *, block_rows=None, attrs=None, overwrite=False, expected_rows=None):
        self.url = os.fspath(url) if isinstance(url, os.PathLike) else str(url)
        self.expected_rows = None if expected_rows is None else int(expected_rows)
        try:
            check_destination(self.url, overwrite=overwrite, name="url")
        except Exception as e:
            err = _access_error(self.url, e, "write a store at")
            if err is None:
                raise
            raise err from None
        if block_rows is not None and (int(block_rows) < 1):
            raise ValueError(f"block_rows must be >= 1; got {block_rows!r}")
        self.block_rows = None if block_rows is None else int(block_rows)
        self.attrs = dict(attrs or {})
        try:
            json.dumps(self.attrs)
        except TypeError as e:
            raise TypeError(f"attrs must be JSON-serialisable: {e}") from None
        self._specs: dict[str, _Spec] = {}
        self._buf: dict[str, list] = {}
        self._buf_rows = 0
        self._n_rows = 0
        self._nnz: dict[str, int] = {}
        self._tmp = None
        self._group = None
        self._closed = False
        self._sample = None
        self._auto_rows = False
        self._arrays: dict[str, zarr.Array] = {}
        self._direct: dict[str, np.dtype] = {}  # dense arrays whose chunks are written as raw bytes
        # 1-D sparse arrays written as raw chunks: path -> [dtype, chunk length, chunks written,
        # pending pieces, pending length]; full chunks go out as they fill, the last at close
        self._direct1d: dict[str, list] = {}
        self._written: dict[str, tuple[int, int]] = {}  # chunk path -> (bytes, crc32) written
        self._files: dict[str, str] = {}  # side files: path in the store -> local source file
        _remove_stale(self.url)

    # -- declaration ---------------------------------------------------------------------------
    def _add(self, name, kind, n_cols, dtype):
        if self._group is not None:
            raise RuntimeError("declare every array before the first append()")
        if not isinstance(name, str) or not name or "/" in name:
            raise ValueError(f"array name must be a non-empty string without '/'; got {name!r}")
        if name in self._specs:
            raise ValueError(f"array {name!r} is declared twice")
        n_cols = int(n_cols)
        if n_cols < 0:
            raise ValueError(f"n_cols of {name!r} must be >= 0; got {n_cols}")
        dtype = np.dtype(dtype)
        if dtype.kind not in "fiub":
            raise TypeError(f"dtype of {name!r} must be numeric; got {dtype}")
        # stores hold native byte order (what zarr reads back): a big-endian '>f8' input is
        # stored as float64, its values converted block by block on append
        dtype = dtype.newbyteorder("=")
        idt = None
        if kind != "dense":
            idt = np.dtype(np.int32 if n_cols < 2**31 - 1 else np.int64)
        self._specs[name] = _Spec(name, kind, n_cols, dtype, idt)
        self._buf[name] = []
        self._nnz[name] = 0

    def add_dense(self, name, n_cols, dtype="float32"):
        """Declare a dense ``(n_rows, n_cols)`` array."""
        self._add(name, "dense", n_cols, dtype)

    def add_csr(self, name, n_cols, dtype="float32"):
        """Declare a sparse row (CSR) array with ``n_cols`` columns."""
        self._add(name, "csr", n_cols, dtype)

    def add_coo(self, name, n_cols, dtype="float64"):
        """Declare an observed-entry (COO, sorted by row) array with ``n_cols`` columns."""
        self._add(name, "coo", n_cols, dtype)

    def add_file(self, rel, src):
        """Copy the local file ``src`` into the store as ``rel`` when the store is written.

        For side data that is not row-aligned (key vocabularies of the table converters):
        ``rel`` is ``"side/<name>"``; the manifest records its size and CRC-32 under
        ``"/files"`` and :func:`read_side_file` checks them.  ``src`` must exist until close.
        """
        rel = str(rel)
        if not rel.startswith("side/") or ".." in rel.split("/"):
            raise ValueError(f"side file name must look like 'side/<name>'; got {rel!r}")
        self._files[rel] = os.fspath(src)

    # -- writing -------------------------------------------------------------------------------
    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.close()
        else:
            self.abort()
        return False

    def _choose_block_rows(self, first_blocks):
        if not self._specs:
            raise RuntimeError("declare at least one array (add_dense/add_csr/add_coo) first")
        self._sample = first_blocks
        if self.block_rows is None:
            self._auto_rows = True
            row_bytes = 0.0
            for name, b in first_blocks.items():
                s = self._specs[name]
                n = max(b.shape[0], 1)
                if s.kind == "dense":
                    row_bytes += s.n_cols * s.dtype.itemsize
                else:
                    row_bytes += b.nnz / n * (s.dtype.itemsize + s.index_dtype.itemsize) + 8
            self.block_rows = default_block_rows(row_bytes)

    def _open(self, first_blocks):
        """Create the temporary store and its arrays (at the first flush, or at close)."""
        if not self._specs:
            raise RuntimeError("declare at least one array (add_dense/add_csr/add_coo) first")
        self._tmp = _sibling(self.url, "tmp")
        _register(self)
        self._group = zarr.open_group(self._tmp, mode="w")
        # every chunk is written, all-zero ones too: a missing chunk is then always an error
        cfg = {"write_empty_chunks": True}
        arrays = self._arrays
        B = self.block_rows
        # 1-D sparse arrays get chunks of about one row block's entries, so each flush touches
        # at most two chunks (a fixed large chunk would be re-read and re-written every flush).
        ip_chunk = min(_INDPTR_CHUNK, B)
        nnz_chunk = {}
        for name, b in first_blocks.items():
            if self._specs[name].kind != "dense":
                per_block = b.nnz / max(b.shape[0], 1) * B
                nnz_chunk[name] = int(
                    min(_NNZ_CHUNK, max(_MIN_NNZ_CHUNK, _pow2_at_least(per_block)))
                )
        for s in self._specs.values():
            if s.kind == "dense":
                arrays[s.name] = self._group.create_array(
                    s.name,
                    shape=(0, s.n_cols),
                    chunks=(B, max(s.n_cols, 1)),
                    dtype=s.dtype,
                    compressors=None,
                    fill_value=0,
                    config=cfg,
                )
                raw = _raw_chunk_dtype(arrays[s.name])
                if raw is not None and s.n_cols > 0:
                    self._direct[s.name] = raw
            else:
                g = self._group.create_group(s.name)
                ip = g.create_array(
                    "indptr",
                    shape=(1,),
                    chunks=(ip_chunk,),
                    dtype="int64",
                    fill_value=0,
                    compressors=None,
                    config=cfg,
                )
                arrays[f"{s.name}/indptr"] = ip
                if _raw_chunk_dtype(ip) is None:
                    ip[:] = np.zeros(1, np.int64)
                else:
                    self._direct1d[f"{s.name}/indptr"] = [_raw_chunk_dtype(ip), ip_chunk, 0, [], 0]
                    self._put_1d(f"{s.name}/indptr", np.zeros(1, np.int64))
                names = ("indices", "data") if s.kind == "csr" else ("col", "value")
                ck = nnz_chunk.get(s.name, _MIN_NNZ_CHUNK)
                parts = [(names[0], s.index_dtype), (names[1], s.dtype)]
                if s.kind == "coo":
                    parts.append(("row", np.dtype("int64")))
                for part, dt in parts:
                    a = arrays[f"{s.name}/{part}"] = g.create_array(
                        part,
                        shape=(0,),
                        chunks=(ck,),
                        dtype=dt,
                        fill_value=0,
                        compressors=None,
                        config=cfg,
                    )
                    if _raw_chunk_dtype(a) is not None:
                        self._direct1d[f"{s.name}/{part}"] = [_raw_chunk_dtype(a), ck, 0, [], 0]

    def _check_block(self, name, b):
        s = self._specs[name]
        where = f" (array {name!r}, rows {self._n_rows + self._buf_rows}...)"
        if s.kind == "dense":
            if sp.issparse(b):
                b = b.toarray()
            b = np.asarray(b)
            if b.ndim == 1 and s.n_cols == 1:
                b = b[:, None]
            if b.ndim != 2 or b.shape[1] != s.n_cols:
                raise ValueError(
                    f"{name}: block must have shape (rows, {s.n_cols}){where}; got {b.shape}"
                )
            if b.dtype.kind not in "fiub":
                raise TypeError(f"{name}: block dtype must be numeric{where}; got {b.dtype}")
            check_finite_block(b, name, where)
            return np.ascontiguousarray(b, dtype=s.dtype)
        if not sp.issparse(b):
            raise TypeError(
                f"{name}: {s.kind} arrays take scipy.sparse CSR blocks{where}; "
                f"got {type(b).__name__}"
            )
        b = sp.csr_matrix(b) if b.format != "csr" else b
        if b.shape[1] != s.n_cols:
            raise ValueError(f"{name}: block must have {s.n_cols} columns{where}; got {b.shape[1]}")
        check_csr_structure(np.asarray(b.indptr), np.asarray(b.indices), s.n_cols, name, where)
        check_finite_block(b, name, where)
        return sp.csr_matrix(
            (
                b.data.astype(s.dtype, copy=False),
                b.indices.astype(s.index_dtype, copy=False),
                b.indptr.astype(np.int64, copy=False),
            ),
            shape=b.shape,
        )

    def append(self, **blocks):
        """Append the same rows to every declared array.

        Parameters
        ----------
        **blocks : ndarray or scipy.sparse matrix
            One block per declared array, keyed by name: dense ``(rows, n_cols)`` ndarrays for
            dense arrays; CSR ``(rows, n_cols)`` matrices for csr and coo arrays (for coo, the
            matrix's column indices are the observed columns; duplicates are kept).
        """
        if self._closed:
            raise RuntimeError("writer is closed")
        missing = set(self._specs) - set(blocks)
        extra = set(blocks) - set(self._specs)
        if missing or extra:
            raise ValueError(
                f"append() needs exactly the arrays {sorted(self._specs)}; "
                f"missing {sorted(missing)}, unknown {sorted(extra)}"
            )
        checked = {k: self._check_block(k, v) for k, v in blocks.items()}
        rows = {k: v.shape[0] for k, v in checked.items()}
        if len(set(rows.values())) > 1:
            raise ValueError(f"append() blocks must have the same number of rows; got {rows}")
        if self.block_rows is None or self._sample is None:
            self._choose_block_rows(checked)
        for k, v in checked.items():
            self._buf[k].append(v)
        self._buf_rows += next(iter(rows.values()))
        while self._buf_rows >= self.block_rows:
            self._flush(self.block_rows)

    def _take(self, name, nrows):
        """Pop the first ``nrows`` rows from the buffer of ``name``."""
        s = self._specs[name]
        pieces = self._buf[name]
        if s.kind == "dense":
            full = pieces[0] if len(pieces) == 1 else np.concatenate(pieces, axis=0)
            head, tail = full[:nrows], full[nrows:]
        else:  # the head as views (scipy's row slicing copies); the tail, kept, copied
            full = _concat_csr(pieces, s.n_cols, s.dtype)
            ip = full.indptr
            cut = int(ip[nrows])

            def part(a, b, i0, i1, base, copy):
                return sp.csr_matrix(
                    (full.data[i0:i1], full.indices[i0:i1], ip[a : b + 1] - base),
                    shape=(b - a, s.n_cols),
                    copy=copy,
                )

            n = full.shape[0]
            head = part(0, nrows, 0, cut, 0, False) if nrows < n else full
            tail = part(nrows, n, cut, int(ip[n]), cut, True)
        self._buf[name] = [tail] if tail.shape[0] else []
        return head

    def _row_bytes(self) -> float:
        """Bytes per row the buffered rows take in the store (uncompressed chunks)."""
        total = 0.0
        for name, s in self._specs.items():
            pieces = self._buf[name]
            if s.kind == "dense":
                total += s.n_cols * s.dtype.itemsize
                continue
            rows = sum(p.shape[0] for p in pieces)
            per_entry = s.dtype.itemsize + s.index_dtype.itemsize + (8 if s.kind == "coo" else 0)
            total += sum(p.nnz for p in pieces) * per_entry / max(rows, 1) + 8
        return total

    def _check_space(self, nrows):
        """Refuse a block (or, before the first one, the whole expected store) that does not
        fit the free disk space."""
        rows = nrows
        if self._n_rows == 0 and self.expected_rows is not None:
            rows = max(self.expected_rows, nrows)
        if self._n_rows == 0 and self.expected_rows is not None:
            what = f"the whole store of {self.expected_rows} rows"
        else:
            what = f"the next {nrows} rows"
        check_free_space(self.url, int(self._row_bytes() * rows), what=what)

    def _flush(self, nrows):
        self._check_space(nrows)
        if self._group is None:
            self._open(self._sample)
        start, stop = self._n_rows, self._n_rows + nrows
        for name, s in self._specs.items():
            blk = self._take(name, nrows)
            if s.kind == "dense":
                if name in self._direct:  # one whole chunk per flush (start is a multiple of B)
                    self._write_chunk(name, start // self.block_rows, blk)
                    continue
                arr = self._arrays[name]
                arr.resize((stop, s.n_cols))
                arr[start:stop] = blk
                continue
            g = {k.split("/", 1)[1]: a for k, a in self._arrays.items() if k.startswith(name + "/")}
            n0 = self._nnz[name]
            n1 = n0 + blk.nnz
            names = ("indices", "data") if s.kind == "csr" else ("col", "value")
            parts = [("indptr", blk.indptr[1:].astype(np.int64) + n0, start + 1, stop + 1)]
            parts += [(names[0], blk.indices, n0, n1), (names[1], blk.data, n0, n1)]
            if s.kind == "coo":
                rows = np.repeat(np.arange(start, stop, dtype=np.int64), np.diff(blk.indptr))
                parts.append(("row", rows, n0, n1))
            for key, vals, i0, i1 in parts:
                if f"{name}/{key}" in self._direct1d:
                    self._put_1d(f"{name}/{key}", vals)
                    continue
                a = g[key]
                a.resize((i1,))
                if i1 > i0:
                    a[i0:i1] = vals
            self._nnz[name] = n1
        self._n_rows = stop
        self._buf_rows -= nrows

    def _put_1d(self, path, vals, final=False):
        """Append ``vals`` to the 1-D array ``path`` written as raw chunks: every chunk that
        fills is written at once (no zarr resize, read-modify-write of a partial chunk or
        metadata rewrite per flush); ``final``: the rest too, padded with the fill value 0, as
        zarr writes an edge chunk."""
        d = self._direct1d[path]
        dt, ck = d[0], d[1]
        if len(vals):
            d[3].append(np.asarray(vals, dtype=dt))
            d[4] += len(vals)
        if d[4] < ck and not (final and d[4]):
            if len(vals):  # held past this call: never a view of the caller's block
                d[3][-1] = d[3][-1].copy()
            return
        buf = d[3][0] if len(d[3]) == 1 else np.concatenate(d[3])
        n_full = buf.size // ck
        for j in range(n_full):
            self._write_raw(f"{path}/c/{d[2]}", buf[j * ck : (j + 1) * ck])
            d[2] += 1
        rest = buf[n_full * ck :]
        if final and rest.size:
            last = np.zeros(ck, dt)
            last[: rest.size] = rest
            self._write_raw(f"{path}/c/{d[2]}", last)
            d[2] += 1
            rest = rest[:0]
        d[3], d[4] = ([rest.copy()] if rest.size else []), rest.size

    def _write_raw(self, key, buf):
        buf = np.ascontiguousarray(buf)
        _write_file(self._tmp, key, buf)
        self._written[key] = (buf.nbytes, zlib.crc32(buf))

    def _write_chunk(self, name, i, blk):
        """Write row block ``i`` of dense ``name`` as its chunk file, bypassing zarr's
        ``__setitem__`` (selection, fill checks, an encoding copy and a metadata rewrite per
        block): the file holds exactly what zarr's ``bytes`` codec writes, the chunk's values in
        little-endian order, the last chunk padded with the fill value 0 to ``block_rows`` rows.
        Its size and CRC-32 go to the manifest without reading the file back."""
        B = self.block_rows
        buf = np.ascontiguousarray(blk, dtype=self._direct[name])
        if buf.shape[0] < B:
            full = np.zeros((B, buf.shape[1]), dtype=buf.dtype)
            full[: buf.shape[0]] = buf
            buf = full
        self._write_raw(f"{name}/c/{i}/0", buf)

    def close(self):
        """Flush, write the manifest, the metadata last, and move the finished store into place.

        Any exception on the way removes the temporary store (an old store at ``url`` stays).
        """
        if self._closed:
            return
        try:
            self._close()
        except BaseException:
            self.abort()
            raise
        finally:
            _unregister(self)

    def _close(self):
        if self._group is None:
            if self._buf_rows and self._auto_rows:
                # fewer rows than one automatic block: store them as one exact block
                self.block_rows = self._buf_rows
            if self.block_rows is None:  # no rows appended: still a valid (empty) dataset
                self.block_rows = 1
            self._open(self._sample or {})
        if self._buf_rows:
            self._flush(self._buf_rows)
        n, B = self._n_rows, self.block_rows
        bounds = list(range(0, n, B)) + [n]
        meta = {
            "format": FORMAT_NAME,
            "format_version": FORMAT_VERSION,
            "n_rows": n,
            "block_rows": B,
            "row_blocks": bounds,
            "arrays": {
                s.name: {
                    "kind": s.kind,
                    "shape": [n, s.n_cols],
                    "dtype": s.dtype.str,
                    "index_dtype": None if s.index_dtype is None else s.index_dtype.str,
                    "nnz": None if s.kind == "dense" else self._nnz[s.name],
                }
                for s in self._specs.values()
            },
            "attrs": self.attrs,
            "manifest": MANIFEST_FILE,
            # identity of this version: readers check it on every block (StoreReplacedError)
            "store_id": uuid.uuid4().hex,
        }
        for name in self._direct:  # chunks written directly: the shape is set once, now
            self._arrays[name].resize((n, self._specs[name].n_cols))
        for path, d in self._direct1d.items():
            length = d[2] * d[1] + d[4]  # written chunks, then the pending rest
            self._put_1d(path, (), final=True)
            self._arrays[path].resize((length,))
        manifest = _build_manifest(self._tmp, _array_paths(meta["arrays"]), self._written)
        if self._files:
            manifest["/files"] = {}
            for rel, src in self._files.items():
                manifest["/files"][rel] = _copy_in(self._tmp, rel, src)
        _write_file(self._tmp, MANIFEST_FILE, json.dumps(manifest).encode())
        self._group.attrs[_META_KEY] = meta  # the completion marker: written last
        self._closed = True
        _commit(self._tmp, self.url)
        self._tmp = None
        logger.info("wrote %s: %d rows, arrays %s", self.url, n, sorted(self._specs))

    def abort(self):
        """Discard everything written so far; an existing store at ``url`` is left untouched."""
        self._closed = True
        _unregister(self)
        if self._tmp is not None:
            _remove(self._tmp)


# ---------------------------------------------------------------------------------------------
# reading
# ---------------------------------------------------------------------------------------------


class ArrayHandle:
    """Lazy handle on one array of a dataset (picklable: reopens the store in each process).

    Attributes
    ----------
    kind : {"dense", "csr", "coo"}
    shape : tuple of int
        ``(n_rows, n_cols)``.
    dtype : numpy.dtype
        Value dtype.
    nnz : int or None
        Stored entries (sparse kinds).
    block_rows : int
        Rows per stored block.
    """

    def __init__(self, url, name, meta, n_rows, block_rows, strict_chunks=True, version=None):
        self.url, self.name = url, name
        #: the store version opened (a _StoreVersion): every block read checks it is still there
        self._version = version
        #: stores with a chunk manifest: every chunk exists, so a missing one is an error
        self.strict_chunks = bool(strict_chunks)
        self.kind = meta["kind"]
        self.shape = (int(n_rows), int(meta["shape"][1]))
        self.dtype = np.dtype(meta["dtype"])
        self.index_dtype = (
            None if meta.get("index_dtype") is None else np.dtype(meta["index_dtype"])
        )
        self.nnz = meta.get("nnz")
        self.block_rows = int(block_rows)
        self._z = None
        # direct chunk-file reads: dense (file dtype, chunk rows) or False (through zarr);
        # sparse {part: (file dtype, chunk items)} (see _raw_layout / _raw_parts)
        self._raw = None

    def __getstate__(self):
        d = self.__dict__.copy()
        d["_z"] = None
        d["_raw"] = None
        return d

    def __repr__(self):
        extra = "" if self.kind == "dense" else f", nnz={self.nnz}"
        return (
            f"<ArrayHandle {self.name!r} {self.kind} shape={self.shape} dtype={self.dtype}{extra}>"
        )

    @property
    def ndim(self):
        return 2

    @property
    def store_id(self):
        """Identity of the store version this handle reads (see :class:`StoreReplacedError`)."""
        return None if self._version is None else self._version.store_id

    def _zarr(self):
        if self._z is None:
            g = zarr.open_group(self.url, mode="r")
            self._z = g[self.name]
        return self._z

    def _err(self, rule, value=None, fix=None):
        return StoreError(self.url, self.name, rule, value, fix)

    def _check_chunks(self, part, lo, hi):
        """Raise if a chunk holding items ``[lo, hi)`` of ``part`` (a zarr array) is missing.

        Zarr reads a missing chunk as its fill value; a store with a manifest has every chunk,
        so absence means deletion.  One ``stat`` per chunk read (a HEAD request remotely).
        """
        if not self.strict_chunks or hi <= lo:
            return
        c = int(part.chunks[0])
        path = self.name if part is self._zarr() else f"{self.name}/{part.basename}"
        tail = "/0" if part.ndim == 2 else ""
        if part.ndim == 2 and part.shape[1] == 0:
            return
        keys = [f"{path}/c/{i}{tail}" for i in range(lo // c, (hi - 1) // c + 1)]
        if not _is_url(self.url):
            root = _local_path(self.url)
            missing = [k for k in keys if not os.path.exists(os.path.join(root, *k.split("/")))]
        else:
            fs, base = _fs(self.url)
            missing = [k for k in keys if not fs.exists(f"{base.rstrip('/')}/{k}")]
        if missing:
            raise StoreError(
                self.url,
                path,
                f"missing chunk {missing[0]!r} (deleted after the store was written)",
                None,
                "The store is incomplete; restore the file or write the store again",
            )

    def _raw_layout(self):
        """``(file dtype, chunk rows)`` when dense chunks can be read as raw files (a local
        store whose chunk files are exactly zarr's ``bytes`` encoding, see
        :func:`_raw_chunk_dtype`), else False (reads go through zarr)."""
        if self._raw is None:
            self._raw = False
            if (
                self.kind == "dense"
                and self.strict_chunks
                and self.shape[1] > 0
                and not _is_url(self.url)
            ):
                z = self._zarr()
                dt = _raw_chunk_dtype(z)
                if dt is not None and z.ndim == 2 and int(z.chunks[1]) == self.shape[1]:
                    self._raw = (dt, int(z.chunks[0]))
        return self._raw

    def _raw_parts(self):
        """``{part: (file dtype, chunk items)}`` of the 1-D parts of a sparse array (indptr and
        column / value arrays) whose chunk files can be read raw (as :meth:`_raw_layout`); a
        part missing from the dict goes through zarr."""
        if self._raw is None:
            self._raw = {}
            if self.kind != "dense" and self.strict_chunks and not _is_url(self.url):
                z = self._zarr()
                names = ("indices", "data") if self.kind == "csr" else ("col", "value")
                for part in ("indptr", *names):
                    a = z[part]
                    dt = _raw_chunk_dtype(a)
                    if dt is not None and a.ndim == 1:
                        self._raw[part] = (dt, int(a.chunks[0]))
        return self._raw

    def _read_raw(self, start, stop, dt, c, part=None):
        """Rows ``[start, stop)`` (items of the 1-D ``part`` of a sparse array, when given)
        read straight from the chunk files into one array (each thread reads its own block; no
        zarr event loop, no intermediate copy).  A missing or wrongly sized file is a
        :class:`StoreError` naming the chunk, as through zarr."""
        if part is None:
            path, tail, shape = self.name, ("0",), (stop - start, self.shape[1])
        else:
            path, tail, shape = f"{self.name}/{part}", (), (stop - start,)
        row_bytes = int(np.prod(shape[1:], dtype=np.int64)) * dt.itemsize
        out = np.empty(shape, dtype=dt)
        if stop <= start:
            return out if dt.isnative else out.astype(dt.newbyteorder("="))
        root = _local_path(self.url)
        for i in range(start // c, (stop - 1) // c + 1):
            lo, hi = max(start, i * c), min(stop, (i + 1) * c)
            key = "/".join((path, "c", str(i), *tail))
            try:
                fh = open(os.path.join(root, *key.split("/")), "rb", buffering=0)
            except FileNotFoundError:
                raise StoreError(
                    self.url,
                    path,
                    f"missing chunk {key!r} (deleted after the store was written)",
                    None,
                    "The store is incomplete; restore the file or write the store again",
                ) from None
            with fh:
                size = os.fstat(fh.fileno()).st_size
                view = memoryview(out[lo - start : hi - start]).cast("B")
                got = -1
                if size == c * row_bytes:
                    fh.seek((lo - i * c) * row_bytes)
                    got = fh.readinto(view)
                if got != len(view):
                    raise StoreError(
                        self.url,
                        path,
                        f"chunk(s) {key} cannot be decoded (truncated or corrupt)",
                        f"{size} bytes, expected {c * row_bytes}",
                        "The store is corrupt; restore the file or write the store again",
                    )
        return out if dt.isnative else out.astype(dt.newbyteorder("="))

    def _get_part(self, z, part, lo, hi):
        """Items ``[lo, hi)`` of the 1-D ``part`` of a sparse array: raw chunk-file reads when
        :meth:`_raw_parts` allows, else through zarr (:meth:`_get`)."""
        raw = self._raw_parts().get(part)
        if raw is not None:
            return self._read_raw(lo, hi, *raw, part=part)
        return self._get(z[part], lo, hi)

    def _get(self, part, lo, hi):
        """``part[lo:hi]`` with chunk checks; unreadable chunks name the array and chunk."""
        self._check_chunks(part, lo, hi)
        try:
            return np.asarray(part[lo:hi])
        except (ValueError, TypeError, RuntimeError) as e:
            c = int(part.chunks[0])
            path = self.name if part is self._zarr() else f"{self.name}/{part.basename}"
            tail = "/0" if part.ndim == 2 else ""
            keys = [f"{path}/c/{i}{tail}" for i in range(lo // c, max(hi - 1, lo) // c + 1)]
            raise StoreError(
                self.url,
                path,
                f"chunk(s) {', '.join(keys[:3])}{' ...' if len(keys) > 3 else ''} cannot be "
                "decoded (truncated or corrupt)",
                repr(e),
                "The store is corrupt; restore the file or write the store again",
            ) from None

    def read(self, start=0, stop=None):
        """Read rows ``[start, stop)``.

        Returns
        -------
        ndarray of shape (stop - start, n_cols) for dense arrays, else a
        ``scipy.sparse.csr_matrix`` of that shape (coo: column indices are the observed columns).
        Every block read is checked (finite values; for sparse kinds monotone indptr and column
        indices inside ``[0, n_cols)``), so a corrupt store can never hand a kernel a bad index.

        Raises
        ------
        StoreReplacedError
            When the store was replaced (or removed) since it was opened: checked after every
            read (and instead of the error a read of a replaced store raises), with one
            ``stat`` of the root metadata (one small GET remotely).
        """
        n = self.shape[0]
        stop = n if stop is None else stop
        if not (0 <= start <= stop <= n):
            raise IndexError(f"{self.name}: row range [{start}, {stop}) outside [0, {n})")
        if self._version is None:
            return self._read(start, stop)
        try:
            out = self._read(start, stop)
        except Exception as e:
            self._version.check(self.name, cause=e)
            raise
        # after the read: data read before a replacement is the opened version's
        self._version.check(self.name)
        return out

    def _read(self, start, stop):
        where = f" (rows {start}:{stop})"
        try:
            z = self._zarr()
            raw = self._raw_layout() if stop > start and self.kind == "dense" else False
            if raw:
                out = self._read_raw(start, stop, *raw)
            elif self.kind == "dense":
                out = self._get(z, start, stop)
            if raw or self.kind == "dense":
                if out.shape != (stop - start, self.shape[1]):
                    raise self._err("block has the wrong shape", out.shape)
                try:
                    check_finite_block(out, self.name, where)
                except ValueError as e:
                    raise self._err(
                        str(e), None, "The store is corrupt; convert it again"
                    ) from None
                return out
            ip = self._get_part(z, "indptr", start, stop + 1).astype(np.int64, copy=False)
            if ip.size != stop - start + 1:
                raise self._err("indptr is shorter than n_rows + 1", ip.size)
            k0, k1 = int(ip[0]), int(ip[-1])
            if k1 < k0 or k0 < 0 or k1 > (self.nnz or 0):
                raise self._err("indptr is not monotone or exceeds nnz", f"[{k0}, {k1}]")
            names = ("indices", "data") if self.kind == "csr" else ("col", "value")
            idx = self._get_part(z, names[0], k0, k1)
            val = self._get_part(z, names[1], k0, k1)
        except StoreError:
            raise
        except (KeyError, FileNotFoundError, OSError) as e:
            err = _access_error(self.url, e, "read")
            if err is not None:
                raise err from None
            raise self._err(
                "array data is missing or unreadable",
                repr(e),
                "The store is incomplete or corrupt; convert it again",
            ) from None
        local = ip - k0
        try:
            check_csr_structure(local, idx, self.shape[1], self.name, where)
            check_finite_block(val, self.name, where)
        except ValueError as e:
            raise self._err(str(e), None, "The store is corrupt; convert it again") from None
        return sp.csr_matrix((val, idx, local), shape=(stop - start, self.shape[1]))

    def iter_blocks(self, block_rows=None) -> Iterator[tuple[int, int, object]]:
        """Yield ``(start, stop, block)`` over the rows, one block at a time."""
        B = int(block_rows or self.block_rows)
        for s in range(0, self.shape[0], B):
            e = min(s + B, self.shape[0])
            yield s, e, self.read(s, e)

    def blocks(self, block_rows=None):
        """The array as a lazy row-blocked collection (:class:`ooc_lowrank.engine.Blocked`)."""
        from .engine import as_blocked

        return as_blocked(self, block_rows=block_rows)

    def to_dask(self, block_rows=None):
        """A dask array with row chunks (dense chunks: ndarray; sparse: scipy CSR)."""
        return self.blocks(block_rows).dask


class Dataset:
    """An opened, validated dataset store.  Index it by array name: ``ds["X"]``."""

    def __init__(self, url, meta, strict_chunks=True, version=None):
        self.url = url
        self.meta = meta
        #: identity of the store version opened (``meta["store_id"]``, or a checksum of the
        #: metadata for stores written before identities existed)
        self.store_id = _store_id(meta)
        self.n_rows = int(meta["n_rows"])
        self.block_rows = int(meta["block_rows"])
        self.row_blocks = np.asarray(meta["row_blocks"], dtype=np.int64)
        self.attrs = dict(meta.get("attrs", {}))
        self._handles = {
            name: ArrayHandle(url, name, m, self.n_rows, self.block_rows, strict_chunks, version)
            for name, m in meta["arrays"].items()
        }

    @property
    def names(self):
        return list(self._handles)

    def __contains__(self, name):
        return name in self._handles

    def __getitem__(self, name) -> ArrayHandle:
        try:
            return self._handles[name]
        except KeyError:
            raise KeyError(
                f"store {self.url!r} has no array {name!r}; it has {self.names}"
            ) from None

    def __repr__(self):
        arrs = ", ".join(f"{k}: {h.kind} {h.shape}" for k, h in self._handles.items())
        return f"<Dataset {self.url!r} n_rows={self.n_rows} [{arrs}]>"

    def to_xarray(self, block_rows=None):
        """An xarray.Dataset of the dense arrays (lazy, Dask-backed) with named dims.

        Dims are ``sample`` and ``feature`` (arrays named X...), ``label`` (Y...), else
        ``<name>_col``.
        """
        import xarray as xr

        out = {}
        for name, h in self._handles.items():
            if h.kind != "dense":
                continue
            dim = (
                "feature"
                if name.startswith("X")
                else "label"
                if name.startswith("Y")
                else (f"{name}_col")
            )
            if name.startswith("X") and name != "X":
                dim = f"feature_{name}"
            out[name] = xr.DataArray(h.to_dask(block_rows), dims=("sample", dim))
        return xr.Dataset(out, attrs={k: json.dumps(v) for k, v in self.attrs.items()})

    def info(self):
        """Summary: arrays, shapes, nnz, chunking and bytes on disk (dict, JSON-serialisable)."""
        arrays = {}
        for name, h in self._handles.items():
            arrays[name] = {
                "kind": h.kind,
                "shape": list(h.shape),
                "dtype": str(h.dtype),
                "nnz": h.nnz,
                "block_rows": self.block_rows,
            }
        return {
            "store": self.url,
            "format_version": self.meta["format_version"],
            "n_rows": self.n_rows,
            "block_rows": self.block_rows,
            "n_blocks": len(self.row_blocks) - 1,
            "bytes_on_disk": _du(self.url),
            "arrays": arrays,
            "attrs": self.attrs,
            "chunk_manifest": self.meta.get("manifest") is not None,
        }


def _du(loc):
    if not _is_url(loc):
        total = 0
        for root, _, files in os.walk(_local_path(loc)):
            total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
        return total
    fs, path = _fs(loc)
    return int(fs.du(path))


def _zarr_shape(g, path):
    return tuple(g[path].shape)


def open_dataset(url, *, verify="metadata") -> Dataset:
    """Open and validate a dataset store.

    Parameters
    ----------
    url : str or os.PathLike
        Local path or fsspec URL.
    verify : {"metadata", "full"}, default "metadata"
        ``"metadata"`` checks the format version, every array's presence, shape and dtype, the
        row counts, each sparse ``indptr`` (monotone, ends at nnz), and, with one listing of
        the store, that every chunk in the manifest exists with its recorded byte size.
        Column indices, finiteness and the presence of the chunks read are checked on every
        block read.  ``"full"`` also checks every chunk's CRC-32 and reads every block now.

    Raises
    ------
    StoreError
        Naming the store, the array, the rule and the value.

    Warns
    -----
    OOCLowRankWarning
        For a store written before chunk manifests existed (see :func:`rebuild_manifest`).
    """
    url = os.fspath(url) if isinstance(url, os.PathLike) else str(url)
    try:
        return _open_dataset(url, verify)
    except Exception as e:
        err = _access_error(url, e, "open the store")
        if err is None:
            raise
        raise err from None


def open_written(url) -> Dataset:
    """:func:`open_dataset` of a store this process has just written.

    Another process writing the same path at the same moment (two ``generate --overwrite``,
    the last one wins) may replace the store between the reads of one open, which then sees
    parts of two stores; the open is tried again, and a store that still does not open is
    reported as a concurrent write, not as damage.
    """
    last = None
    for attempt in range(5):
        try:
            return open_dataset(url)
        except (StoreError, OSError) as e:
            last = e
            time.sleep(0.05 * (attempt + 1))
    raise StoreError(
        str(url),
        None,
        "this write finished, but the store could not be opened right after it: another "
        f"process replaced or removed it at the same time ({last})",
        None,
        "Write a path from one process at a time, then check it with `ooc-lowrank info`",
    ) from last


def _open_dataset(url, verify):
    if not _exists(url):
        raise StoreError(
            url,
            None,
            "no store at this location",
            None,
            "Check the path, or create it with `ooc-lowrank convert` / `generate`",
        )
    sig = _root_signature(url)  # before the metadata: a replacement from here on is seen
    try:
        g = zarr.open_group(url, mode="r")
    except Exception as e:  # zarr raises several types for a non-group / broken metadata
        if _access_error(url, e, "open") is not None:
            raise  # open_dataset names the credentials problem
        raise StoreError(
            url,
            None,
            "not a readable Zarr v3 group",
            repr(e),
            "The store is incomplete or corrupt; write it again",
        ) from None
    meta = g.attrs.get(_META_KEY)
    if not isinstance(meta, dict):
        raise StoreError(
            url,
            None,
            "missing ooc_lowrank metadata (incomplete write or not an ooc_lowrank dataset)",
            None,
            "Write it again with DatasetWriter/convert",
        )
    version = _StoreVersion(url, _store_id(meta), sig)
    try:
        return _check_dataset(url, g, meta, verify, version)
    except StoreError as e:
        version.check(cause=e, when="being opened")
        raise


#: ``indptr`` entries checked at once when a store is opened (one indptr chunk, 8 MiB of int64:
#: opening a store of 10^8 rows must not hold its whole indptr, which a fit never needs at
#: once; measured at 20M rows: opening adds 356 MiB of peak RSS whole, 78 MiB in pieces).
_INDPTR_CHECK_PIECE = _INDPTR_CHUNK


def _unreadable(url, name, e):
    return StoreError(
        url,
        name,
        "array is missing or unreadable",
        repr(e),
        "The store is incomplete or corrupt; write it again",
    )


def _check_indptr_monotone(url, name, z, n):
    """``indptr`` of ``n + 1`` entries is non-decreasing, read :data:`_INDPTR_CHECK_PIECE`
    entries at a time (each piece overlaps the last by one entry)."""
    for s0 in range(0, n, _INDPTR_CHECK_PIECE):
        try:
            ip = np.asarray(z[s0 : min(s0 + _INDPTR_CHECK_PIECE, n) + 1], dtype=np.int64)
        except Exception as e:
            raise _unreadable(url, name, e) from None
        d = np.diff(ip)
        if np.any(d < 0):
            i = int(np.argmax(d < 0))
            raise StoreError(
                url,
                f"{name}/indptr",
                "must be non-decreasing",
                f"indptr[{s0 + i}]={ip[i]} > indptr[{s0 + i + 1}]={ip[i + 1]}",
            )


def _check_dataset(url, g, meta, verify, version):
    """Validate an opened store's metadata and chunks (see :func:`open_dataset`)."""
    if meta.get("format") != FORMAT_NAME:
        raise StoreError(url, None, f"format must be {FORMAT_NAME!r}", meta.get("format"))
    if meta.get("format_version") != FORMAT_VERSION:
        raise StoreError(
            url,
            None,
            f"format_version must be {FORMAT_VERSION}",
            meta.get("format_version"),
            "This store was written by another version of ooc_lowrank; convert "
            "the source data again",
        )
    try:
        n = int(meta["n_rows"])
        B = int(meta["block_rows"])
        bounds = np.asarray(meta["row_blocks"], dtype=np.int64)
        arrays = meta["arrays"]
    except (KeyError, TypeError, ValueError) as e:
        raise StoreError(url, None, "metadata is malformed", repr(e)) from None
    expect = np.asarray(list(range(0, n, B)) + [n], dtype=np.int64) if B > 0 else None
    if n < 0 or B < 1 or expect is None or not np.array_equal(bounds, expect):
        raise StoreError(
            url,
            None,
            "row_blocks must be 0, block_rows, 2*block_rows, ..., n_rows",
            f"n_rows={n}, block_rows={B}",
        )
    if verify not in ("metadata", "full"):
        raise ValueError(f"verify must be 'metadata' or 'full'; got {verify!r}")
    for name, m in arrays.items():
        if not isinstance(m, dict) or m.get("kind") not in _KINDS:
            kind = m.get("kind") if isinstance(m, dict) else m
            raise StoreError(url, name, f"kind must be one of {_KINDS}", kind)
    # chunks first: a missing chunk must never be reported as bad values read as zeros
    strict = _check_manifest(url, g, meta, checksums=verify == "full")
    for name, m in arrays.items():
        kind = m.get("kind")
        if kind not in _KINDS:
            raise StoreError(url, name, f"kind must be one of {_KINDS}", kind)
        shape = m.get("shape")
        if not shape or int(shape[0]) != n:
            raise StoreError(
                url,
                name,
                f"row count must equal the dataset's n_rows={n}",
                None if not shape else shape[0],
            )
        try:
            if kind == "dense":
                zs = _zarr_shape(g, name)
                if zs != (n, int(shape[1])):
                    raise StoreError(
                        url,
                        name,
                        "stored shape differs from the metadata",
                        f"{zs} vs {(n, int(shape[1]))}",
                    )
                if np.dtype(g[name].dtype) != np.dtype(m["dtype"]):
                    raise StoreError(
                        url,
                        name,
                        "stored dtype differs from the metadata",
                        f"{g[name].dtype} vs {m['dtype']}",
                    )
                continue
            nnz = int(m["nnz"])
            parts = ("indices", "data") if kind == "csr" else ("col", "value", "row")
            for p in parts:
                if _zarr_shape(g, f"{name}/{p}") != (nnz,):
                    raise StoreError(
                        url,
                        f"{name}/{p}",
                        f"length must equal nnz={nnz}",
                        _zarr_shape(g, f"{name}/{p}")[0],
                    )
            z_ip = g[f"{name}/indptr"]
            ip_len = int(z_ip.shape[0])
            if ip_len == n + 1:
                first, last = (int(z_ip[i]) for i in (0, n))
        except StoreError:
            raise
        except Exception as e:
            raise _unreadable(url, name, e) from None
        if ip_len != n + 1:
            raise StoreError(url, f"{name}/indptr", f"length must be n_rows + 1 = {n + 1}", ip_len)
        if first != 0 or last != nnz:
            raise StoreError(
                url,
                f"{name}/indptr",
                f"must start at 0 and end at nnz={nnz}",
                f"[{first}, ..., {last}]",
            )
        _check_indptr_monotone(url, name, z_ip, n)
    ds = Dataset(url, meta, strict, version)
    if verify == "full":
        for h in ds._handles.values():
            for _ in h.iter_blocks():
                pass
    elif verify != "metadata":
        raise ValueError(f"verify must be 'metadata' or 'full'; got {verify!r}")
    return ds


def read_side_file(url, rel) -> bytes:
    """The bytes of side file ``rel`` of the store at ``url`` (see
    :meth:`DatasetWriter.add_file`), checked against the size and CRC-32 in its manifest."""
    url = os.fspath(url) if isinstance(url, os.PathLike) else str(url)
    meta = open_dataset(url).meta
    man = _load_manifest(url, meta) or {}
    entry = man.get("/files", {}).get(rel)
    if entry is None:
        raise StoreError(
            url,
            rel,
            "the store has no such side file",
            None,
            "write the store with a converter that records it",
        )
    data = _read_file(url, rel)
    if [len(data), zlib.crc32(data)] != list(entry):
        raise StoreError(
            url,
            rel,
            "side file fails its size/CRC-32 check",
            None,
            "The store is corrupt; write it again",
        )
    return data


def rebuild_manifest(url) -> dict:
    """Add a chunk manifest to a store written before manifests existed.

    Such a store may lack chunks that were all zeros (the old writer skipped them); they are
    written now, explicitly, as zeros, so the store then reads exactly as before and any later
    deletion is detected.  Run it only on a store you trust to be complete; a chunk deleted
    before this call cannot be told from an all-zero one and becomes zeros.

    Returns
    -------
    dict
        ``{array path: number of chunks written as zeros}``.
    """
    url = str(url)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OOCLowRankWarning)
        ds = open_dataset(url)
    paths = _array_paths(ds.meta["arrays"])
    present = _list_files(url)
    filled = {}
    cfg = {"write_empty_chunks": True}
    for ap in paths:
        a = zarr.open_array(url, path=ap, mode="r+")
        a = a.with_config(cfg) if hasattr(a, "with_config") else a
        grid = _chunk_grid_keys(a.shape, a.chunks)
        missing = [k for k in grid if f"{ap}/{k}" not in present]
        for key in missing:
            idx = [int(i) for i in key[2:].split("/")]
            sl = tuple(
                slice(i * c, min((i + 1) * c, n))
                for i, c, n in zip(idx, a.chunks, a.shape, strict=True)
            )
            a[sl] = a[sl]  # the fill value, now stored
        filled[ap] = len(missing)
    manifest = _build_manifest(url, paths)
    _write_file(url, MANIFEST_FILE, json.dumps(manifest).encode())
    g = zarr.open_group(url, mode="r+")
    meta = dict(g.attrs[_META_KEY])
    meta["manifest"] = MANIFEST_FILE
    g.attrs[_META_KEY] = meta
    logger.info("chunk manifest written for %s; chunks written as zeros: %s", url, filled)
    return filled


def write_arrays(url, arrays: dict, *, block_rows=None, attrs=None, overwrite=False, kinds=None):
    """Write in-memory arrays (ndarray -> dense, scipy.sparse -> csr) as a dataset store.

    ``kinds`` may map a name to ``"coo"`` for observed-entry arrays given as sparse matrices.
    Returns the opened :class:`Dataset`.
    """
    kinds = dict(kinds or {})
    n = {k: v.shape[0] for k, v in arrays.items()}
    if len(set(n.values())) > 1:
        raise ValueError(f"arrays must have the same number of rows; got {n}")
    with DatasetWriter(url, block_rows=block_rows, attrs=attrs, overwrite=overwrite) as w:
        for k, v in arrays.items():
            kind = kinds.get(k, "csr" if sp.issparse(v) else "dense")
            v2 = v if sp.issparse(v) or np.ndim(v) == 2 else np.asarray(v).reshape(-1, 1)
            getattr(w, f"add_{kind}")(k, n_cols=v2.shape[1], dtype=v2.dtype)
        nrows = next(iter(n.values()), 0)
        step = w.block_rows or 65536
        for s in range(0, nrows, step):
            blk = {}
            for k, v in arrays.items():
                v2 = v if sp.issparse(v) or np.ndim(v) == 2 else np.asarray(v).reshape(-1, 1)
                blk[k] = sp.csr_matrix(v2)[s : s + step] if sp.issparse(v2) else v2[s : s + step]
            w.append(**blk)
    return open_dataset(url)


def drop_page_cache(url) -> int:
    """Drop a local store's files from the operating system's page cache (cold reads).

    Each file under the store is flushed (``fdatasync``: dirty pages cannot be dropped) and
    then advised ``POSIX_FADV_DONTNEED`` over its whole length, which needs no privileges.  The
    next pass reads the store from disk, so cold-read timings and ``/proc/self/io``
    ``read_bytes`` can be measured on stores smaller than RAM.  Advisory: a filesystem without a
    page cache of its own (tmpfs, some network filesystems) ignores it.

    Parameters
    ----------
    url : str, os.PathLike or Dataset
        A local store (path or ``file://`` URL) or a :class:`Dataset` opened from one.

    Returns
    -------
    int
        Bytes advised (the sum of the store's file sizes).
    """
    loc = url.url if isinstance(url, Dataset) else os.fspath(url)
    if _is_url(loc):
        raise ValueError(
            f"url must be a local store to drop its pages from the page cache; got {loc!r}: "
            "remote stores have no local page cache (pass a path)"
        )
    if not hasattr(os, "posix_fadvise"):
        raise OSError(
            "drop_page_cache needs os.posix_fadvise (POSIX, not available on this platform); "
            "measure cold reads on Linux"
        )
    root = _local_path(loc)
    total = 0
    for d, _, files in os.walk(root):
        for f in files:
            fd = os.open(os.path.join(d, f), os.O_RDONLY)
            try:
                os.fdatasync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                total += os.fstat(fd).st_size
            finally:
                os.close(fd)
    return total


def process_read_bytes() -> int | None:
    """Bytes this process has read from storage (``/proc/self/io`` ``read_bytes``), or None.

    None where the counter is not available (not Linux, or task I/O accounting is off).
    Page-cache hits are not counted: the difference around a pass is what came from disk.
    """
    try:
        with open("/proc/self/io") as fh:
            for line in fh:
                if line.startswith("read_bytes:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None
