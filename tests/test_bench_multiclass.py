"""The multi-class GIMC benchmark at tiny size (real segment and mfeat data)."""

from __future__ import annotations

import json

from conftest import data_file


def test_bench_gimc_multiclass_small(tmp_path, monkeypatch):
    from benchmarks import bench_gimc_multiclass as bench

    for parts in bench.DATASETS.values():
        data_file(*parts)  # skips, naming the file, when a dataset is missing
    monkeypatch.setenv(bench.ENV, str(data_file(*bench.DATASETS["segment"]).parents[1]))
    out = tmp_path / "mc.json"
    res = bench.main(["--small", "--quiet", "--out", str(out)])
    saved = json.loads(out.read_text())
    assert saved["benchmark"] == "gimc_multiclass" and saved["small"] is True
    assert saved["protocol"]["m"] == 16
    assert set(saved["datasets"]) == {"segment", "mfeat"}
    for name, n_classes in (("segment", 7), ("mfeat", 10)):
        ds = res["datasets"][name]
        assert ds["status"] == "ok" and ds["n_classes"] == n_classes
        assert saved["datasets"][name]["summary"].keys() == set(bench.METHODS)
        (run,) = ds["runs"]
        assert run["n_train"] + run["n_test"] == 300 and run["n_test"] == 90
        for method in bench.METHODS:
            r = run["methods"][method]
            assert 0 < r["test_accuracy"] <= 1
            assert r["test_accuracy"] > 1.5 / n_classes, (name, method, r["test_accuracy"])
            assert r["gamma_mult"] in bench.SMALL_GAMMA_MULTS and r["alpha"] in bench.SMALL_ALPHAS
            assert r["gamma"] == r["gamma_mult"] * run["gamma0"] and r["fit_seconds"] > 0
            assert len(r["grid"]) == len(bench.SMALL_GAMMA_MULTS) * len(bench.SMALL_ALPHAS)
        assert run["methods"]["GIMC-LFF"]["n_features"] == 32
        assert run["methods"]["Nystroem+Ridge"]["n_features"] == 16


def test_bench_gimc_multiclass_missing_data(tmp_path, monkeypatch, capsys):
    from benchmarks import bench_gimc_multiclass as bench

    monkeypatch.setenv(bench.ENV, str(tmp_path / "nowhere"))
    out = tmp_path / "mc.json"
    res = bench.main(["--small", "--quiet", "--out", str(out)])
    msg = capsys.readouterr().out
    assert "OOC_LOWRANK_DATA" in msg and str(tmp_path / "nowhere") in msg
    saved = json.loads(out.read_text())
    for name in bench.DATASETS:
        assert saved["datasets"][name]["status"] == "skipped"
        assert res["datasets"][name]["status"] == "skipped"
