"""Every script in examples/ (and the GIMC benchmark and demo) runs at a small size."""

from __future__ import annotations

import json
import runpy
import sys
from pathlib import Path

import pytest
from conftest import DATA_DIR

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((REPO / "examples").glob("*.py"))
#: small-size arguments per script (scripts that are small by design take none)
SMALL_ARGS = {
    "bibtex_end_to_end.py": ["--small"],
    "figure2.py": ["--small"],
    "movielens_glrl.py": [],
}
OWN_WORKDIR = {"bibtex_end_to_end.py", "figure2.py"}


def _needs_bibtex():
    if not (DATA_DIR / "bibtex" / "bibtex-train.arff.gz").exists():
        pytest.skip(f"dataset missing: {DATA_DIR / 'bibtex'} (set OOC_LOWRANK_DATA)")


@pytest.mark.parametrize("script", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_runs_small(script, tmp_path, monkeypatch):
    if script.name not in SMALL_ARGS:
        pytest.fail(f"examples/{script.name} has no small-size arguments in tests/test_examples.py")
    if "bibtex" in script.name or "figure2" in script.name:
        _needs_bibtex()
    args = list(SMALL_ARGS[script.name])
    if script.name in OWN_WORKDIR:
        args += ["--workdir", str(tmp_path / "data")]
    if script.name == "figure2.py":
        args += ["--out", str(tmp_path / "f2.png")]
    monkeypatch.setattr(sys, "argv", [str(script)] + args)
    monkeypatch.syspath_prepend(str(script.parent))
    with pytest.raises(SystemExit) as e:
        runpy.run_path(str(script), run_name="__main__")
    assert e.value.code in (0, None)
    if script.name == "figure2.py":
        assert json.loads((tmp_path / "f2.json").read_text())["m"] == [8, 16]


def test_demo_small(tmp_path):
    from ooc_lowrank.gimc.demo import run_demo

    res = run_demo(workdir=str(tmp_path), n_rows=3000, n_components=16, max_iter=2, quiet=True)
    for name in ("GIMC-LFF", "IMC-RFF"):
        assert set(res[name]) >= {"p@1", "p@3", "p@5", "seconds"}


def test_bench_gimc_small(tmp_path):
    sys.path.insert(0, str(REPO))
    from benchmarks import bench_gimc

    out = tmp_path / "gimc.json"
    res = bench_gimc.main(
        ["--small", "--quiet", "--only", "iteration", "vs_sklearn", "--out", str(out)]
    )
    assert json.loads(out.read_text())["benchmark"] == "gimc"
    assert res["iteration"]["passes_per_iteration"] >= 2
    assert res["iteration"]["achieved_gflops"] > 0 and res["iteration"]["blas_peak_gflops"] > 0
    assert res["vs_sklearn"]["time_ratio_sklearn_over_ours"] > 0
