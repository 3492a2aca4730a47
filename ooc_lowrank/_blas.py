"""Choose OpenBLAS's AVX-512 kernels on AMD CPUs that OpenBLAS does not recognise.

OpenBLAS picks its kernels by CPU model when it loads.  On AMD processors newer than it knows
(this project's machine: an AMD EPYC of family 26 with AVX-512, OpenBLAS 0.3.30/0.3.31 of the
NumPy/SciPy wheels) it falls back to its AVX2 "Haswell" kernels.  Its "SkylakeX" kernels run
there and are about 1.8x faster on the products the fits spend their time in (one thread,
16384 x 1000 float32: ssyrk 101 -> 184 GFLOP/s, ``A.T @ A`` 108 -> 191, measured on the quiet
machine; docs/performance.md).  ``OPENBLAS_CORETYPE`` selects them, but only if it is set
before OpenBLAS loads, i.e. before NumPy is imported.

:func:`prefer_avx512_openblas` (called first thing in ``ooc_lowrank/__init__``) sets
``OPENBLAS_CORETYPE=SkylakeX`` when all of these hold: the variable is unset, NumPy is not
imported yet, ``OOC_LOWRANK_BLAS_CORETYPE`` is not ``"keep"``, and the CPU is an AMD one whose
flags include every AVX-512 subset the SkylakeX kernels use (F, CD, BW, DQ, VL).  Intel CPUs
with AVX-512 are recognised by OpenBLAS and left alone.  Processes started from this one
(Dask's local workers) inherit the variable.  A program that imports NumPy before
``ooc_lowrank`` keeps OpenBLAS's own choice; set the variable in the shell for it.
"""

from __future__ import annotations

import os
import sys

#: the AVX-512 subsets OpenBLAS's SkylakeX kernels use
AVX512_NEEDED = frozenset({"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"})


def coretype_for(cpuinfo: str, environ, numpy_loaded: bool):
    """The ``OPENBLAS_CORETYPE`` to set (``"SkylakeX"``) or ``None``, from the text of
    ``/proc/cpuinfo``, an environment mapping and whether NumPy is already loaded."""
    if numpy_loaded or environ.get("OPENBLAS_CORETYPE"):
        return None
    if environ.get("OOC_LOWRANK_BLAS_CORETYPE", "").lower() == "keep":
        return None
    vendor, flags = None, set()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "vendor_id" and vendor is None:
            vendor = value.strip()
        elif key == "flags" and not flags:
            flags = set(value.split())
    if vendor == "AuthenticAMD" and AVX512_NEEDED <= flags:
        return "SkylakeX"
    return None


def prefer_avx512_openblas():
    """Set ``OPENBLAS_CORETYPE`` as :func:`coretype_for` decides (Linux; elsewhere nothing)."""
    try:
        with open("/proc/cpuinfo") as f:
            text = f.read()
    except OSError:
        return None
    core = coretype_for(text, os.environ, "numpy" in sys.modules)
    if core is not None:
        os.environ["OPENBLAS_CORETYPE"] = core
    return core
