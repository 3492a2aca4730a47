"""Numba policy for every kernel in :mod:`ooc_lowrank.kernels` (the only place it is set).

* ``nogil=True`` always, so Dask threads overlap inside kernels.
* ``cache=True`` so tests and the CLI do not recompile on every run.
* An explicit fastmath flag set *without* ``nnan``/``ninf``: NaN and inf keep their IEEE
  meaning (inputs are validated at the boundary, but a kernel must never silently turn a
  NaN into a number).  No kernel may pass its own ``fastmath=``.
* Kernels are serial by default: the Dask scheduler owns the cores (one kernel per Dask
  thread).  ``parallel_njit`` exists for the rare kernel that runs outside Dask.
"""

from __future__ import annotations

import numba

#: Fastmath flags used by every kernel (no ``nnan``, no ``ninf``).
FASTMATH = frozenset({"nsz", "arcp", "contract", "afn", "reassoc"})


def njit(*args, **kwargs):
    """``numba.njit`` with the project's policy (nogil, cache, FASTMATH)."""
    if "fastmath" in kwargs:
        raise TypeError("kernels must not set fastmath locally; edit kernels/_numba.py")
    opts = {"nogil": True, "cache": True, "fastmath": set(FASTMATH)}
    opts.update(kwargs)
    if args and callable(args[0]) and len(args) == 1:
        return numba.njit(**opts)(args[0])
    return numba.njit(*args, **opts)


def parallel_njit(*args, **kwargs):
    """Like :func:`njit` with ``parallel=True`` (each prange iteration owns its output rows)."""
    kwargs["parallel"] = True
    return njit(*args, **kwargs)
