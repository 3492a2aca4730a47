"""ooc_lowrank._blas: OpenBLAS's AVX-512 kernels on AMD CPUs, only when nobody chose."""

import os
import subprocess
import sys

from ooc_lowrank._blas import coretype_for

AMD512 = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 26
flags\t\t: fpu sse2 avx avx2 fma avx512f avx512dq avx512cd avx512bw avx512vl avx512_vnni
processor\t: 1
vendor_id\t: AuthenticAMD
flags\t\t: fpu sse2 avx avx2 fma avx512f avx512dq avx512cd avx512bw avx512vl avx512_vnni
"""
AMD2 = AMD512.replace(" avx512f avx512dq avx512cd avx512bw avx512vl avx512_vnni", "")
INTEL512 = AMD512.replace("AuthenticAMD", "GenuineIntel")
PARTIAL = AMD512.replace(" avx512bw", "")


def test_amd_with_avx512_gets_skylakex_only_when_nobody_chose():
    assert coretype_for(AMD512, {}, numpy_loaded=False) == "SkylakeX"
    assert coretype_for(AMD512, {"OPENBLAS_CORETYPE": "Haswell"}, numpy_loaded=False) is None
    assert coretype_for(AMD512, {}, numpy_loaded=True) is None  # too late: OpenBLAS loaded
    assert coretype_for(AMD512, {"OOC_LOWRANK_BLAS_CORETYPE": "keep"}, numpy_loaded=False) is None


def test_other_cpus_are_left_to_openblas():
    assert coretype_for(AMD2, {}, numpy_loaded=False) is None  # no AVX-512
    assert coretype_for(PARTIAL, {}, numpy_loaded=False) is None  # a subset missing
    assert coretype_for(INTEL512, {}, numpy_loaded=False) is None  # OpenBLAS knows these
    assert coretype_for("", {}, numpy_loaded=False) is None


def test_import_follows_the_rule_on_this_machine():
    """A fresh interpreter importing ooc_lowrank first: the variable it ends with is the one
    the rule gives for this machine's /proc/cpuinfo and environment."""
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
    code = "import os, ooc_lowrank; print(os.environ.get('OPENBLAS_CORETYPE'))"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True).stdout.strip()  # fmt: skip
    try:
        with open("/proc/cpuinfo") as f:
            want = coretype_for(f.read(), env, numpy_loaded=False)
    except OSError:
        want = None
    assert out == str(want)
    env["OPENBLAS_CORETYPE"] = "Haswell"  # an explicit choice is kept
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True).stdout.strip()  # fmt: skip
    assert out == "Haswell"
