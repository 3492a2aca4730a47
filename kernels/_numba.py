"""Numba policy for every kernel in :mod:`ooc_lowrank.kernels` (the only place it is set).

* ``nogil=True`` always, so Dask threads overlap inside kernels.
* ``cache=True`` so tests and the CLI do not recompile on every run.  The cache files live in a
  per-user folder (:func:`cache_dir`), never next to the source: Numba's default, a
  ``__pycache__`` inside the installed package, is left behind by ``pip uninstall`` and then
  shadows an editable install of the same package as an empty namespace package (issue 23).
* An explicit fastmath flag set *without* ``nnan``/``ninf``: NaN and inf keep their IEEE
  meaning (inputs are validated at the boundary, but a kernel must never silently turn a
  NaN into a number).  No kernel may pass its own ``fastmath=``.
* Kernels are serial by default: the Dask scheduler owns the cores (one kernel per Dask
  thread).  ``parallel_njit`` exists for the rare kernel that runs outside Dask.
"""

from __future__ import annotations

import getpass
import os
import sys
import tempfile
import threading

import numba
from numba.core import config as _numba_config

#: Fastmath flags used by every kernel (no ``nnan``, no ``ninf``).
FASTMATH = frozenset({"nsz", "arcp", "contract", "afn", "reassoc"})


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("ooc-lowrank")
    except Exception:  # noqa: BLE001 - not installed (a source checkout on sys.path)
        return "dev"


def _user_cache_root() -> str:
    """The platform's per-user cache folder (what ``platformdirs.user_cache_dir`` returns)."""
    if sys.platform == "win32":
        base = os.environ.get("LOCALAPPDATA") or os.path.expanduser("~\\AppData\\Local")
    elif sys.platform == "darwin":
        base = os.path.expanduser("~/Library/Caches")
    else:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return base


def _writable(path: str) -> bool:
    try:
        os.makedirs(path, exist_ok=True)
        tempfile.TemporaryFile(dir=path).close()
    except OSError:
        return False
    return True


def _choose_cache_dir() -> str | None:
    """``$OOC_LOWRANK_NUMBA_CACHE_DIR``, else ``<user cache>/ooc_lowrank/numba/<version>``, else
    a per-user folder under the temporary directory; None (no caching) if none is writable."""
    explicit = os.environ.get("OOC_LOWRANK_NUMBA_CACHE_DIR")
    user = os.getuid() if hasattr(os, "getuid") else getpass.getuser()
    candidates = [
        os.path.join(_user_cache_root(), "ooc_lowrank", "numba", _version()),
        os.path.join(tempfile.gettempdir(), f"ooc_lowrank-numba-{user}", _version()),
    ]
    return next((c for c in ([explicit] if explicit else candidates) if _writable(c)), None)


#: Where the kernels' compiled code is cached (None: not cached).  Numba adds one sub-folder
#: per source folder (named after it plus a hash of its path), so several installs can share it.
CACHE_DIR = _choose_cache_dir()
_CACHE_LOCK = threading.Lock()


def cache_dir() -> str | None:
    """The folder holding the kernels' Numba cache (outside the package; None: no cache).
    ``NUMBA_CACHE_DIR``, when set, takes precedence (as for every Numba function)."""
    return _numba_config.CACHE_DIR or CACHE_DIR


def _jit(sigs, opts, func):
    """``numba.njit(*sigs, **opts)(func)`` with the cache in :data:`CACHE_DIR`.

    Numba picks a cache folder when the function is decorated: ``NUMBA_CACHE_DIR`` if set (the
    user's choice, kept), else ``__pycache__`` next to the source.  For our kernels only,
    ``numba.config.CACHE_DIR`` is set for the duration of the decoration and restored at once,
    so the user's own ``cache=True`` functions and the environment are untouched.
    """
    if opts.get("cache") and CACHE_DIR is None:  # nowhere outside the package: no cache
        opts = {**opts, "cache": False}
    if not opts.get("cache"):
        return numba.njit(*sigs, **opts)(func)
    with _CACHE_LOCK:
        saved = _numba_config.CACHE_DIR
        if not saved:
            _numba_config.CACHE_DIR = CACHE_DIR
        try:
            return numba.njit(*sigs, **opts)(func)
        finally:
            _numba_config.CACHE_DIR = saved


def njit(*args, **kwargs):
    """``numba.njit`` with the project's policy (nogil, cache outside the package, FASTMATH)."""
    if "fastmath" in kwargs:
        raise TypeError("kernels must not set fastmath locally; edit kernels/_numba.py")
    opts = {"nogil": True, "cache": True, "fastmath": set(FASTMATH)}
    opts.update(kwargs)
    if len(args) == 1 and callable(args[0]):
        return _jit((), opts, args[0])
    return lambda func: _jit(args, opts, func)


def parallel_njit(*args, **kwargs):
    """Like :func:`njit` with ``parallel=True`` (each prange iteration owns its output rows)."""
    kwargs["parallel"] = True
    return njit(*args, **kwargs)
