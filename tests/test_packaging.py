"""Packaging: the wheel installs kernels as ``ooc_lowrank.kernels``, no top-level ``kernels``."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.timeout(300)
def test_wheel_layout_and_import(tmp_path):
    wheel_dir = tmp_path / "wheel"
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            str(REPO),
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(wheel_dir),
            "-q",
        ],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 0, p.stderr
    (whl,) = wheel_dir.glob("ooc_lowrank-*.whl")
    names = zipfile.ZipFile(whl).namelist()
    assert "ooc_lowrank/kernels/_numba.py" in names
    assert "ooc_lowrank/kernels/__init__.py" in names
    assert "ooc_lowrank/py.typed" in names
    assert not [n for n in names if n.startswith("kernels/")], "a top-level `kernels` leaked"
    # install the wheel alone into an empty target folder and import it from there, with this
    # environment's dependencies (a --system-site-packages venv made from inside a venv would
    # see the base interpreter's packages, not this environment's)
    target = tmp_path / "site"
    p = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(whl)],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 0, p.stderr
    code = (
        "import ooc_lowrank, ooc_lowrank.kernels._numba as k, importlib.util as u; "
        "print(ooc_lowrank.__file__); print(k.__file__); print(u.find_spec('kernels'))"
    )
    env = {**os.environ, "PYTHONPATH": str(target)}
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert p.returncode == 0, p.stderr
    pkg, kfile, top = p.stdout.split()
    assert pkg.startswith(str(target)) and kfile.startswith(str(target)), (pkg, kfile)
    assert str(REPO) not in kfile
    assert top == "None"


def _kernel_dispatchers():
    import importlib
    import pkgutil

    import ooc_lowrank.kernels as K
    from numba.core.registry import CPUDispatcher

    out = []
    for m in pkgutil.iter_modules(K.__path__):
        mod = importlib.import_module(f"ooc_lowrank.kernels.{m.name}")
        out += [v for v in vars(mod).values() if isinstance(v, CPUDispatcher)]
    return K, out


def test_numba_cache_lives_outside_the_package():
    """Issue 23 item 1: Numba's cache files in ``site-packages/ooc_lowrank/kernels/__pycache__``
    survive ``pip uninstall`` and turn ``ooc_lowrank`` into an empty namespace package that
    shadows a later editable install.  Every cached kernel must cache outside the package."""
    from ooc_lowrank.kernels import _numba

    K, dispatchers = _kernel_dispatchers()
    assert len(dispatchers) > 10
    pkg = os.path.realpath(os.path.dirname(os.path.dirname(K.__file__)))  # ooc_lowrank's parent
    kdir = os.path.realpath(os.path.dirname(K.__file__))
    for d in dispatchers:
        path = getattr(d._cache, "_cache_path", None)
        assert path is not None, f"{d.py_func.__name__} is not cached"
        real = os.path.realpath(path)
        assert not real.startswith(kdir + os.sep) and real != kdir, (d.py_func.__name__, path)
        assert not real.startswith(os.path.join(pkg, "ooc_lowrank") + os.sep), path
    assert _numba.cache_dir() is not None
    assert os.path.commonpath([os.path.realpath(_numba.cache_dir()), kdir]) != kdir


def test_kernel_cache_policy_leaves_user_numba_alone(tmp_path):
    """Our cache folder is set only while our kernels are decorated: a user's own
    ``numba.njit(cache=True)`` function still caches where Numba puts it by default."""
    import numba
    from numba.core import config
    from ooc_lowrank.kernels import _numba

    before = config.CACHE_DIR
    src = tmp_path / "userfunc.py"
    src.write_text("import numba\n@numba.njit(cache=True)\ndef f(x):\n    return x + 1\n")
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import ooc_lowrank.kernels.fourier; "
        "import userfunc; print(userfunc.f._cache._cache_path)"
    )
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    p = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, env=env
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == str(tmp_path / "__pycache__")
    assert config.CACHE_DIR == before and numba.config.CACHE_DIR == before
    assert _numba.cache_dir() is not None
