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
    "figure1_toy.py": ["--n", "40", "--d", "6", "--rank", "3", "--m", "10",
                       "--fractions", "0.2", "0.4", "--max-iter", "2", "--lams", "1"],
    "figure2.py": ["--small"],
    "segment_clustering.py": ["--rows", "200", "--m", "10", "--max-iter", "2", "--lams", "1",
                              "--c", "3"],
    "movielens_glrl.py": [],
    "movielens_mvm.py": ["--max-rows", "3000"],
    "yahoo_kernelmaxide.py": ["--max-rows", "300", "--landmarks", "40", "--max-iter", "3"],
}
OWN_WORKDIR = {"bibtex_end_to_end.py", "figure2.py", "segment_clustering.py"}


def _needs_bibtex():
    if not (DATA_DIR / "bibtex" / "bibtex-train.arff.gz").exists():
        pytest.skip(f"dataset missing: {DATA_DIR / 'bibtex'} (set OOC_LOWRANK_DATA)")


@pytest.mark.parametrize("script", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_runs_small(script, tmp_path, monkeypatch):
    if script.name not in SMALL_ARGS:
        pytest.fail(f"examples/{script.name} has no small-size arguments in tests/test_examples.py")
    if "bibtex" in script.name or "figure2" in script.name:
        _needs_bibtex()
    if script.name == "movielens_mvm.py" and not (DATA_DIR / "movielens-100k" / "u.user").exists():
        pytest.skip(f"dataset missing: {DATA_DIR / 'movielens-100k'} (set OOC_LOWRANK_DATA)")
    if script.name == "yahoo_kernelmaxide.py" and not (DATA_DIR / "yahoo" / "arts.mat").exists():
        pytest.skip(f"dataset missing: {DATA_DIR / 'yahoo'} (set OOC_LOWRANK_DATA)")
    args = list(SMALL_ARGS[script.name])
    if script.name == "yahoo_kernelmaxide.py":
        args += ["--out", str(tmp_path / "yahoo"), "--data", str(DATA_DIR / "yahoo")]
    if script.name == "movielens_mvm.py":
        args += ["--out", str(tmp_path / "mvm"), "--data", str(DATA_DIR / "movielens-100k")]
    if script.name == "segment_clustering.py" and not (DATA_DIR / "segment").exists():
        pytest.skip(f"dataset missing: {DATA_DIR / 'segment'} (set OOC_LOWRANK_DATA)")
    if script.name == "figure1_toy.py":
        args += ["--out", str(tmp_path / "f1.png")]
    if script.name in OWN_WORKDIR:
        args += ["--workdir", str(tmp_path / "data")]
    if script.name == "figure2.py":
        args += ["--out", str(tmp_path / "f2.png")]
    monkeypatch.setattr(sys, "argv", [str(script)] + args)
    monkeypatch.syspath_prepend(str(script.parent))
    with pytest.raises(SystemExit) as e:
        runpy.run_path(str(script), run_name="__main__")
    assert e.value.code in (0, None)
    if script.name == "yahoo_kernelmaxide.py":
        res = json.loads((tmp_path / "yahoo" / "yahoo_kernelmaxide.json").read_text())["results"]
        assert sorted(res) == ["KernelMaxide-f", "KernelMaxide-n", "Maxide"]
        for rows in res.values():
            assert [r["omega"] for r in rows] == [10, 20, 30, 40]
            assert all(0 <= r["ranking_loss"] <= 1 for r in rows)
    if script.name == "figure2.py":
        assert json.loads((tmp_path / "f2.json").read_text())["m"] == [8, 16]
    if script.name == "figure1_toy.py":
        res = json.loads((tmp_path / "f1.json").read_text())["relative_error"]
        assert sorted(res) == ["GIMC-LFF", "IMC", "IMC-RFF", "MC"]
        assert all(len(v) == 2 and all(0 < e < 10 for e in v) for v in res.values())
        # the figure needs matplotlib (the `bench` extra); without it the example says so and
        # writes only the numbers
        import importlib.util

        has_mpl = importlib.util.find_spec("matplotlib") is not None
        assert (tmp_path / "f1.png").exists() is has_mpl
        if has_mpl:
            assert (tmp_path / "f1.png").stat().st_size > 0


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
    # running one part again keeps the other part's results in the file; --sk-threads 1 runs
    # both sides under a one-thread BLAS limit (recorded as the runs saw it)
    res1 = bench_gimc.main(
        ["--small", "--quiet", "--only", "vs_sklearn", "--sk-threads", "1", "--out", str(out)]
    )
    assert json.loads(out.read_text())["iteration"] == json.loads(json.dumps(res["iteration"]))
    assert res1["vs_sklearn"]["threads"] == 1
    assert all(b["num_threads"] == 1 for b in res1["vs_sklearn"]["blas"])


def test_bibtex_cv_small(tmp_path):
    # K-fold selection end to end at a tiny size: pooled CV scores, a chosen iteration that the
    # history holds, and one test evaluation per seed
    _needs_bibtex()
    sys.path.insert(0, str(REPO))
    from benchmarks import bibtex_cv

    out = tmp_path / "cv.json"
    argv = ["--workdir", str(tmp_path / "data"), "--m", "16", "--gamma-scale", "0.25",
            "--alpha", "1", "3", "--max-iter", "2", "--eval-every", "1", "--folds", "2",
            "--imc-normalize-rows", "true", "--imc-gamma-scale", "0.25", "--imc-alpha", "0.3",
            "--seeds", "0", "1", "--json", str(out)]  # fmt: skip
    assert bibtex_cv.main(argv) == 0
    res = json.loads(out.read_text())
    gimc = res["cv"]["GIMC-LFF"]
    assert len(gimc) == 2 and sorted(gimc[0]["cv_by_iteration"]) == ["0", "1", "2"]
    assert res["chosen"]["GIMC-LFF"]["max_iter"] in (0, 1, 2)
    assert res["chosen"]["IMC-RFF"]["learn_features"] is False
    for name in ("GIMC-LFF", "IMC-RFF"):
        assert sorted(res["test"][name]["runs"]) == ["0", "1"]
        assert 0 < res["test"][name]["mean"]["p@1"] <= 100
