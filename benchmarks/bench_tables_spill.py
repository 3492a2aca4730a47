"""Interactions without training vocabularies: the replay path against the spill-once path.

The evidence for ``ooc_lowrank.io.tables._KEEP_ENTRIES_BYTES`` (issue 26): the tables whose row
count is known and whose entries take more bytes than that go through ``_SpillOnce`` (keys
interned and records spilled to their row buckets in the one read), smaller ones (and tables
of unknown size: CSV, DataFrames) through ``_PairsOnce`` (entries kept, then replayed mapped to
sorted indices into the spill).  Generates ``--rows`` random-order ratings in ``--files``
Parquet files (as :mod:`benchmarks.bench_tables_scale`), then ``--repeat`` times, in this
process, alternating: one ``pyarrow.dataset`` scan (the peer), a conversion by each path.
Reports the minimum CPU seconds (``time.process_time``) and wall seconds of each, and their
ratios to the scan's; CPU seconds stay meaningful on a busy machine, wall seconds do not.

    python -m benchmarks.bench_tables_spill --rows 20000000 --files 8 --keys both --repeat 3
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time

PATHS = {"replay": 1 << 62, "spill": 0}  # the _KEEP_ENTRIES_BYTES that forces each path


def compare(src, dest, repeat):
    """Min CPU / wall seconds of a scan of ``src`` and of its conversion by either path."""
    import pyarrow as pa
    import pyarrow.dataset as ds

    from ooc_lowrank.io import tables
    from ooc_lowrank.io.tables import convert_table

    opts = dict(kind="interactions", row_key="user", col_key="item", value="rating")
    opts.update(duplicates="last", dtype="float32", overwrite=True)
    keep = tables._KEEP_ENTRIES_BYTES
    best = {}

    def timed(name, f):
        w, c = time.perf_counter(), time.process_time()
        f()
        w, c = time.perf_counter() - w, time.process_time() - c
        old = best.get(name, (float("inf"), float("inf")))
        best[name] = (min(old[0], c), min(old[1], w))

    try:
        for path, limit in PATHS.items():  # warm-up: imports, JIT cache, both paths
            tables._KEEP_ENTRIES_BYTES = limit
            for keys in (([1, 2], [3, 4]), (["a", "b"], ["c", "d"])):
                warm = pa.table({"user": keys[0], "item": keys[1], "rating": [1.0, 2.0]})
                convert_table(warm, dest, **opts)
        for _ in range(repeat):
            timed("scan", lambda: sum(b.num_rows for b in ds.dataset(src).to_batches()))
            for path, limit in PATHS.items():
                tables._KEEP_ENTRIES_BYTES = limit
                timed(path, lambda: convert_table(src, dest, **opts))
    finally:
        tables._KEEP_ENTRIES_BYTES = keep
        shutil.rmtree(dest, ignore_errors=True)
    scan_cpu, scan_wall = best["scan"]
    out = {"scan_cpu_seconds": scan_cpu, "scan_seconds": scan_wall}
    for path in PATHS:
        cpu, wall = best[path]
        out[path] = {
            "cpu_seconds": cpu,
            "seconds": wall,
            "cpu_ratio_to_scan": cpu / max(scan_cpu, 1e-9),
            "ratio_to_scan": wall / max(scan_wall, 1e-9),
        }
    return out


def main(argv=None):
    from benchmarks.bench_tables_scale import generate_interactions

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, default=2_000_000)
    p.add_argument("--files", type=int, default=4)
    p.add_argument("--keys", choices=("int64", "string", "both"), default="both")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--workdir", default=None, help="default: a new temporary folder")
    p.add_argument("--out", default=None, help="a JSON file for the results")
    p.add_argument("--quiet", action="store_true")
    a = p.parse_args(argv)
    work = a.workdir or tempfile.mkdtemp(prefix="bench_tables_spill_")
    res = {"benchmark": "tables_spill", "rows": a.rows, "files": a.files, "repeat": a.repeat}
    res["load_average_at_start"] = os.getloadavg()
    try:
        for keys in ("int64", "string") if a.keys == "both" else (a.keys,):
            src = generate_interactions(
                os.path.join(work, keys), a.rows, a.files, keys == "string"
            )
            res[keys] = r = compare(src, os.path.join(work, "out.zarr"), a.repeat)
            shutil.rmtree(src)
            if not a.quiet:
                print(
                    f"{keys} keys, {a.rows} rows: scan {r['scan_cpu_seconds']:.2f} CPU-s; "
                    + "; ".join(
                        f"{path} {m['cpu_seconds']:.2f} CPU-s ({m['cpu_ratio_to_scan']:.1f}x, "
                        f"wall {m['ratio_to_scan']:.1f}x)"
                        for path, m in ((path, r[path]) for path in PATHS)
                    )
                )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    res["load_average_at_end"] = os.getloadavg()
    res["time"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)
    return res


if __name__ == "__main__":
    main()
