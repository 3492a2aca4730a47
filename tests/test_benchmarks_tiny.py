"""Each benchmark's body at tiny size, so the benchmarks cannot rot (flox/tests/test_asv.py)."""

from __future__ import annotations

import json


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
        "read_dense_npy",
        "read_dense_store",
        "read_csr_store",
        "gram_numpy",
        "gram_engine",
    } <= {n for n, _ in names}
    assert len({b for n, b in names if n == "gram_engine"}) == 2  # two block sizes
    for r in res["results"]:
        assert r["seconds"] > 0 and r["peak_rss"] > 0
        if r["name"].startswith("read") and not r["name"].endswith("npy"):
            assert r["ratio"] > 0
