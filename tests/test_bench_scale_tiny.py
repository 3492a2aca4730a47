"""benchmarks/bench_scale.py at tiny size (issue 25), so the scale benchmarks cannot rot."""

from __future__ import annotations

import json

import pytest


@pytest.mark.slow  # spawned generator processes: about a minute on this machine
def test_bench_scale_scenarios_tiny(tmp_path):
    from benchmarks import bench_scale

    work = ["--workdir", str(tmp_path / "w")]
    nus = tmp_path / "nus.json"
    bench_scale.main(["nuswide", "--rows", "600", "--test-rows", "200", "--features", "20",
                      "--labels", "10", "--m", "8", "--iters", "2", "--out", str(nus), *work])
    r = json.loads(nus.read_text())
    assert r["n_passes"] >= 1 + 2 * r["n_iter"] and 0 < r["test"]["P@1"] <= 1
    dg = tmp_path / "dg.json"
    bench_scale.main(["disk-gimc", "--gb", "0.004", "--slice-gb", "0.001", "--probe-rows", "1000",
                      "--features", "20", "--labels", "10", "--m", "8", "--iters", "1", "--cold",
                      "--out", str(dg), *work])
    r = json.loads(dg.read_text())
    assert r["rows_read_equal_store"] and r["every_row_read_at_least"]["X"] >= r["n_passes"]
    assert r["compute_seconds_per_pass"] > 0
    assert not list((tmp_path / "w").glob("*.zarr"))  # stores deleted


def test_bench_scale_refuses_a_store_that_does_not_fit(tmp_path):
    from benchmarks import bench_scale

    with pytest.raises(SystemExit, match="10 % to spare"):
        bench_scale.check_disk(str(tmp_path), 10**18, "gimc")
