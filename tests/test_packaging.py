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
