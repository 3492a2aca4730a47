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
    assert r["passes_read_whole_arrays"] and len(r["pass_reads"]) == r["n_passes"]
    assert r["compute_seconds_per_pass"] > 0
    vs = r["estimate_vs_measured"]
    assert vs["seconds_fit"]["estimate"] > 0 and vs["seconds_fit"]["measured"] > 0
    # the GIMC time model, printed before the fit, per pass and like with like
    assert vs["seconds_per_pass"]["measured"] == pytest.approx(r["seconds_per_pass"])
    assert r["estimate"]["time_calibration"]["rows"] > 0  # the passes timed on the store
    assert vs["seconds_fit_measured_passes"]["measured"] == r["total_seconds"]
    assert r["line_search"]["trials"]
    assert r["cpu_seconds_fit"] >= r["fit_thread_cpu_seconds"] > 0
    assert r["peak_rss_bytes_fit"] >= r["rss_bytes_fit_start"] > 0
    assert not list((tmp_path / "w").glob("*.zarr"))  # stores deleted


@pytest.mark.slow  # a spawned generator process and the machine's calibration: ~30 s here
def test_bench_scale_disk_mvm_estimate_only_tiny(tmp_path):
    """``disk-mvm --estimate-only --compare``: the estimate calibrated on the store's rows,
    its time model at the recorded run's size against its measured seconds, no fit."""
    import os

    from benchmarks import bench_scale

    rec = os.path.join(os.path.dirname(bench_scale.__file__), "results", "scale_disk_mvm.json")
    out = tmp_path / "e.json"
    bench_scale.main(["disk-mvm", "--gb", "0.01", "--estimate-only", "--compare", rec,
                      "--out", str(out), "--workdir", str(tmp_path / "w")])
    r = json.loads(out.read_text())
    assert r["estimate"]["sgd_calibration"]["rows"] > 0
    c = r["compare"]
    assert c["seconds_fit"]["measured"] == json.load(open(rec))["total_seconds"]
    assert c["time_model"]["work_per_pass"]["sgd"] > 1000 * r["estimate"]["sgd_calibration"][
        "updates"]  # the recorded store's size, not the tiny one
    assert not list((tmp_path / "w").glob("*.zarr"))


@pytest.mark.slow  # spawned generator processes and the machine's calibration: ~40 s here
def test_bench_scale_delicious_tiny(tmp_path):
    """``delicious`` at tiny size: the estimate times the fit's passes on the store's rows and
    is compared with the fit for the measured iterations and passes (and max_iter);
    ``--estimate-only --compare`` scales it to a recorded run's rows, no fit."""
    import os

    from benchmarks import bench_scale

    small = ["--features", "400", "--nnz-per-row", "8", "--labels", "30", "--labels-per-row",
             "3", "--topics", "5", "--m", "8", "--iters", "2", "--workdir", str(tmp_path / "w")]
    out = tmp_path / "d.json"
    bench_scale.main(["delicious", "--rows", "600", "--test-rows", "100", *small,
                      "--out", str(out)])
    r = json.loads(out.read_text())
    assert r["estimate"]["time_calibration"]["rows"] > 0
    vs = r["estimate_vs_measured"]
    assert vs["seconds_fit_measured_iterations"]["measured"] == r["total_seconds"]
    assert vs["passes_measured_iterations"]["measured"] == r["n_passes"]
    assert vs["seconds_fit_max_iter"]["estimate"] > 0
    ls = r["line_search"]  # the fit's own trial counts give its passes
    assert len(ls["trials"]) == r["n_iter"] == len(ls["step_sizes"])
    assert r["n_passes"] == 1 + r["n_iter"] + sum(ls["trials"])
    rec = os.path.join(os.path.dirname(bench_scale.__file__), "results", "scale_delicious.json")
    est = tmp_path / "e.json"
    bench_scale.main(["delicious", "--rows", "600", "--test-rows", "100", *small,
                      "--estimate-only", "--compare", rec, "--out", str(est)])
    c = json.loads(est.read_text())["compare"]
    recorded = json.load(open(rec))
    assert c["seconds_fit_measured_iterations"]["measured"] == recorded["total_seconds"]
    assert c["time_model"]["iterations"] == 2 and c["recorded_rows"] == recorded["args"]["rows"]
    assert not list((tmp_path / "w").glob("*.zarr"))


def test_bench_scale_refuses_a_store_that_does_not_fit(tmp_path):
    from benchmarks import bench_scale

    with pytest.raises(SystemExit, match="10 % to spare"):
        bench_scale.check_disk(str(tmp_path), 10**18, "gimc")


def test_bench_scale_pass_check_finds_a_truncated_pass():
    """Every pass must read each array it touches whole: a pass short of one row, or of one
    non-zero, is reported."""
    from benchmarks import bench_scale

    rows, nnz = {"X": 10, "Y": 10}, {"X": 40, "Y": 25}
    whole = {"rows": {"X": 10, "Y": 10}, "nnz": {"X": 40, "Y": 25}}
    assert bench_scale.check_passes([whole, whole], rows, nnz) == (True, [])
    short = {"rows": {"X": 9}, "nnz": {"X": 36}}
    ok, bad = bench_scale.check_passes([whole, short], rows, nnz)
    assert not ok and bad[0]["pass"] == 1 and bad[0]["rows"] == 9
    ok, bad = bench_scale.check_passes([{"rows": {"X": 10}, "nnz": {"X": 39}}], rows, nnz)
    assert not ok and bad[0]["nnz"] == 39
    assert bench_scale.check_passes([], rows, nnz)[0] is False


def test_fit_peak_rss_excludes_what_came_before():
    """The fit's peak RSS starts from the RSS at start(): a large array freed before start() is
    not counted, one allocated after it is."""
    import numpy as np
    from benchmarks import bench_scale

    big = np.ones(200 * 2**20 // 8)
    del big
    p = bench_scale.FitPeakRSS().start()
    a = np.ones(64 * 2**20 // 8)
    peak = p.stop()
    del a
    assert 60 * 2**20 <= peak - p.rss_start < 190 * 2**20


def test_direct_read_bandwidth_reads_spread_files_from_the_disk(tmp_path):
    """The disk's bandwidth is read from files spread over the store (every k-th by name, not
    only the largest) after dropping their pages, and the buffered cold reads a fit does are
    measured too: ``/proc/self/io`` shows the disk served them (a file just written is in the
    page cache: without the drop the buffered read is a memory copy)."""
    import os

    from benchmarks import bench_scale
    from ooc_lowrank.storage import process_read_bytes

    paths = []
    for i in range(8):
        p = tmp_path / f"c{i}"
        p.write_bytes(os.urandom(1 << 20))
        paths.append(str(p))
    r = bench_scale.direct_read_bandwidth(paths[::-1], limit_bytes=2 << 20, piece=1 << 20)
    if r is None:
        pytest.skip("O_DIRECT refused by this filesystem")
    assert r["files"] == 4  # c0, c2, c4, c6: direct c0 and c4, buffered c2 and c6
    assert r["bytes"] == 2 << 20 and r["cold_buffered"]["bytes"] == 2 << 20
    if process_read_bytes() is not None:
        assert r["cold_buffered"]["disk_read_bytes"] >= 0.9 * (2 << 20)
