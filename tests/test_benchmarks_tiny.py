"""Each benchmark's body at tiny size, so the benchmarks cannot rot (flox/tests/test_asv.py)."""

from __future__ import annotations

import json

import pytest


def test_bench_storage_small(tmp_path):
    from benchmarks import bench_storage

    out = tmp_path / "storage.json"
    res = bench_storage.main(
        [
            "--small",
            "--repeats",
            "1",
            "--quiet",
            "--in-process",
            "--out",
            str(out),
            "--workdir",
            str(tmp_path / "data"),
        ]
    )
    assert json.loads(out.read_text())["benchmark"] == "storage"
    names = {(r["name"], r["block_rows"]) for r in res["results"]}
    assert {
        "write_dense_npy",
        "write_dense_store",
        "read_dense_npy",
        "read_dense_store",
        "read_csr_store",
        "gram_numpy",
        "gram_engine",
    } <= {n for n, _ in names}
    assert len({b for n, b in names if n == "gram_engine"}) == 2  # two block sizes
    for r in res["results"]:
        assert r["seconds"] > 0 and r["peak_rss"] > 0
        if r["name"].startswith(("read", "write")) and not r["name"].endswith("npy"):
            assert r["ratio"] > 0 and r["cpu_seconds"] > 0


# slow: a spawned memory-limited Dask worker (as bench_imc_ooc below).  The default run keeps
# KernelMaxide's pass structure (test_kernelmaxide.py: one Gram pass, a gradient and >= 1 trial
# pass per APG iteration) and its LocalCluster fits' representatives.
@pytest.mark.slow
def test_bench_kernelmaxide_ooc_small(tmp_path):
    # generate + mask a store, fit on a memory-limited LocalCluster worker, per-iteration record
    from benchmarks import bench_kernelmaxide_ooc

    out = tmp_path / "km.json"
    res = bench_kernelmaxide_ooc.main(
        ["--small", "--rows", "3000", "--max-iter", "3", "--quiet", "--out", str(out)]
    )
    assert json.loads(out.read_text())["benchmark"] == "kernelmaxide_ooc"
    assert [i["iteration"] for i in res["iterations"]] == [1, 2, 3]
    # an iteration is a gradient pass plus at least one line-search pass
    assert all(i["passes"] >= 2 and i["seconds"] > 0 for i in res["iterations"])
    assert res["setup"]["passes_kernelmaxide"] == 1  # the Gram pass G = F_UT^T F_UT
    assert res["n_passes_fit"] == (
        sum(i["passes"] for i in res["iterations"]) + 1 + res["setup"]["engine_passes_outside_apg"]
    )
    assert 0.25 < res["observed_entries"] / (3000 * 10) < 0.35  # 30 % observed
    assert res["peak_worker_rss"] > 0


# slow: a spawned memory-limited Dask worker for the L-BFGS part (as bench_imc_ooc below).  The
# default run keeps the SGD kernel against its NumPy twin (test_mvm.py::
# test_sgd_kernel_equals_numpy_twin) and L-BFGS fits from a store (test_mvm.py::test_lbfgs_*).
@pytest.mark.slow
def test_bench_mvm_ooc_small(tmp_path):
    # sparse three-view store, the SGD kernel against its NumPy peers, L-BFGS on a limited worker
    from benchmarks import bench_mvm_ooc

    out = tmp_path / "mvm.json"
    res = bench_mvm_ooc.main(
        ["--small", "--rows", "3000", "--numpy-rows", "300", "--lbfgs-iter", "2", "--quiet",
         "--out", str(out)]
    )
    assert json.loads(out.read_text())["benchmark"] == "mvm_ooc"
    sgd = res["sgd"]
    assert sgd["rows"] == 3000 and sgd["nnz"] == 3000 * (2 + 3 + 20)
    # the row-by-row NumPy peer makes the kernel's updates
    assert sgd["numpy_rowwise_max_abs_diff_vs_kernel"] < 1e-10
    assert sgd["kernel_samples_per_s_per_core"] > 0
    assert sgd["numpy_block_samples_per_s_per_core"] > 0
    assert res["sgd_estimator"]["passes"] >= 2
    lb = res["lbfgs"]
    assert lb["evaluations"] == lb["passes"] - 1 >= 2 and lb["seconds_per_evaluation"] > 0
    assert lb["peak_worker_rss"] > 0


@pytest.mark.slow  # a spawned Dask worker: about a minute on this machine
def test_bench_imc_ooc_small(tmp_path):
    from benchmarks import bench_imc_ooc

    out = tmp_path / "imc_ooc.json"
    res = bench_imc_ooc.main(["--rows", "3000", "--pairs", "5", "--m", "8", "--iters", "2",
                              "--cg-iter", "2", "--min-limit-mib", "400", "--quiet",
                              "--out", str(out)])  # fmt: skip
    assert json.loads(out.read_text())["benchmark"] == "imc_ooc"
    assert [i["iteration"] for i in res["iterations"]] == [1, 2]
    # alpha="auto": one record per fit (each selection candidate, then the refit), whose
    # iteration counters restart (they once made negative seconds in one flat list)
    phases = res["fit_phases"]
    assert [p["phase"].split("=")[0] for p in phases] == ["selection alpha"] * (len(phases) - 1) + ["fit alpha"]
    assert len(phases) >= 3 and phases[-1]["iterations"] == res["iterations"]
    assert all(i["seconds"] > 0 for p in phases for i in p["iterations"])
    assert all(0 < p["peak_worker_rss"] <= res["peak_worker_rss"] for p in phases)
    assert res["constraints"] == 15000 and res["n_passes"] >= 2 * (2 * 2 + 2)
    assert 0 < res["peak_worker_rss"] <= res["worker_limit_bytes"]
    assert 0 <= res["clustering_error"] < 0.5


@pytest.mark.slow  # ~10-20 s: real Segment and Mushroom rows, every method and the lam grid
def test_imc_clustering_benchmark_small(tmp_path):
    from conftest import DATA_DIR

    from benchmarks import imc_clustering

    if not (DATA_DIR / "segment" / "segment.dat").exists():
        pytest.skip(f"dataset missing: {DATA_DIR / 'segment'} (set OOC_LOWRANK_DATA)")
    out = tmp_path / "c.json"
    res = imc_clustering.main(["--small", "--datasets", "segment", "--quiet", "--out", str(out)])
    table = json.loads(out.read_text())["datasets"]["segment"]["table"]
    assert {(r["c"], r["method"]) for r in table} == {
        (c, m) for c in (1, 5) for m in imc_clustering.METHODS
    }
    assert all(0 <= r["mean"] <= 1 and r["draws"] == 1 for r in table)
    assert res["datasets"]["segment"]["n"] == 300
    md = imc_clustering.report([str(out)])
    assert "| 1n |" in md and "| 5n |" in md and "(n = 300" in md


def test_bench_gimc_passes_structure(tmp_path):
    # the line search's regression guard (issue 15): over 20 iterations, the first included,
    # at most 2.2 passes per iteration, resident and streamed (one trial per pass), and
    # every pass's graph the size of the first iteration's (the graph never grows)
    from benchmarks import bench_gimc

    out = tmp_path / "gimc.json"
    res = bench_gimc.main(
        ["--small", "--quiet", "--only", "passes", "--passes-rows", "8000", "--out", str(out)]
    )
    assert json.loads(out.read_text())["passes"]["iterations"] == 20
    for mode in ("resident", "streamed"):
        r = res["passes"][mode]
        assert r["n_iter"] == 20, (mode, r["n_iter"])
        assert r["passes_per_iteration"] <= 2.2, (mode, r["n_passes"])
        assert all(b <= a for a, b in zip(r["objective"], r["objective"][1:]))
        sizes = r["graph_tasks_per_pass"]
        assert len(sizes) >= r["n_passes"] and max(sizes[3:]) <= max(sizes[:3]), sizes


# slow: every case of bench_small with its peers on real data (the longest default test, ~15 s
# quiet).  bench_small.main() itself stays in the default run (the test below, two cases); the
# engine's direct path (no graph for in-memory fits) is tested in test_engine / test_gimc.
@pytest.mark.slow
def test_bench_small_tiny_structure(tmp_path):
    # issue 24's measurement script at tiny size: every case, ours and peers, with the
    # structural numbers (passes, dask computes per fit, stage breakdown); never a wall time
    from conftest import DATA_DIR

    from benchmarks import bench_small

    if not (DATA_DIR / "mfeat-handwritten").exists():
        pytest.skip(f"datasets missing under {DATA_DIR} (set OOC_LOWRANK_DATA)")
    out = tmp_path / "small.json"
    res = bench_small.main(["--tiny", "--quiet", "--out", str(out)])
    assert json.loads(out.read_text())["benchmark"] == "small"
    assert set(res["cases"]) == set(bench_small.CASES)
    for name, case in res["cases"].items():
        assert "skipped" not in case and "error" not in case, (name, case.get("traceback", case))
        assert case["ours"], name
        for label, r in case["ours"].items():
            where = (name, label)
            assert r["seconds"] > 0 and case["metric"] in r["metric"], where
            assert isinstance(r["passes"], int) and r["passes"] >= 1, where
            assert r["dask_computes"] == len(r["graph_tasks"]), where
            assert r["dask_computes_per_pass"] == r["dask_computes"] / r["passes"], where
            assert set(bench_small.STAGES) <= set(r["breakdown"]), where
            assert all(r["breakdown"][s] >= 0 for s in bench_small.STAGES), where
            if "warmup" in r:
                assert r["warmup"]["jit_compile_seconds"] >= 0, where
        # a peer is measured (seconds, the case's metric) or says why it is not
        assert case["peers"] or name == "gimc_big", name
        for label, r in case["peers"].items():
            assert ("unavailable" in r) != ("seconds" in r), (name, label)
            if "seconds" in r:
                assert case["metric"] in r["metric"], (name, label)
        for label, r in case["ours"].items():
            assert set(r["time_ratio_to_peer"]) == {
                p for p, v in case["peers"].items() if "seconds" in v
            }, (name, label)
    # at most one dask compute per pass (STYLE 5); fits on in-memory data take the engine's
    # direct path: no graph at all (issue 24)
    for name, case in res["cases"].items():
        for label, r in case["ours"].items():
            assert r["dask_computes"] <= r["passes"] + 1, (name, label, r["graph_tasks"])
    for name in ("mvm_mfeat_binary", "mvm_mfeat_ovr", "kernelmaxide_arts", "clustering_segment",
                 "gimc_bibtex", "glrl_movielens"):  # fmt: skip
        for label, r in res["cases"][name]["ours"].items():
            assert r["dask_computes"] == 0 and r["breakdown"]["scheduler"] == 0, (name, label)
    for name in ("gimc_demo", "gimc_big"):
        assert res["cases"][name]["throughput"]["gflops"] > 0
    assert res["summary"]["gimc_throughput_demo_over_big"] > 0


def test_bench_small_tiny_without_optional_peers(tmp_path, monkeypatch):
    # myfm / scikit-surprise missing (CI installs neither): the peer is recorded as unavailable
    # with the reason, GLRL gets its documented fallback peer, and nothing else changes
    from conftest import DATA_DIR

    from benchmarks import bench_small

    if not (DATA_DIR / "movielens-100k").exists():
        pytest.skip(f"MovieLens missing under {DATA_DIR} (set OOC_LOWRANK_DATA)")
    monkeypatch.setattr(bench_small, "_unavailable", lambda mod, pip: f"{pip}: not installed")
    only = "mvm_movielens,glrl_movielens"
    out = str(tmp_path / "s.json")
    res = bench_small.main(["--tiny", "--quiet", "--no-profile", "--only", only, "--out", out])
    assert set(res["cases"]) == {"mvm_movielens", "glrl_movielens"}
    mvm, glrl = res["cases"]["mvm_movielens"], res["cases"]["glrl_movielens"]
    assert mvm["peers"] == {"myFM MyFMRegressor rank 10": {"unavailable": "myfm: not installed"}}
    assert glrl["peers"]["Surprise SVD()"] == {"unavailable": "scikit-surprise: not installed"}
    (fallback,) = [r for r in glrl["peers"].values() if "seconds" in r]
    assert 0 < fallback["metric"]["mae"] < 1.0  # a real model, better than a constant
    for case in (mvm, glrl):
        (r,) = case["ours"].values()
        assert "breakdown" not in r and r["passes"] >= 1
        assert set(r["time_ratio_to_peer"]) <= set(case["peers"])


# slow: 8-11 s on the busy 2-core machine (a generated store, nine GIMC fits and the sklearn
# peer, first imports); the selection the two benchmarks report (widths scored jointly with
# alpha, the size gate) is tested in the default run by tests/test_gimc_alpha.py
@pytest.mark.slow
def test_imc_rff_alpha_and_width_small(tmp_path):
    from benchmarks import imc_rff_alpha, imc_rff_width

    out = imc_rff_alpha.run("demo", [0.125], str(tmp_path), 1000, lambda s: None)
    runs = out["runs"]
    scored = runs["IMC-RFF gamma_scale=0.125 alpha=auto widths scored"]
    assert set(scored["loo_top1_per_gamma_scale"]) == {0.125, 1.0}
    assert scored["gamma_scale_"] in (0.125, 1.0) and scored["n_passes"] == 2
    # 800 training rows, D = 400: below core.width_selection, one width scored
    assert runs["IMC-RFF gamma_scale=0.125 alpha=auto"]["loo_top1_per_gamma_scale"] == {}
    assert "RBFSampler(400, median gamma) + Ridge(1)" in runs
    w = imc_rff_width.run("demo", str(tmp_path), 1000, lambda s: None, sizes=(8,),
                          scales=(0.125, 1.0))  # fmt: skip
    assert set(w) == {8} and len(w[8]["loo_top1"]) == len(w[8]["test"]) == 2
    assert w[8]["loo_best_scale"] in (0.125, 1.0)
