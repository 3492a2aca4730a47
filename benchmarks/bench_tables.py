"""Interactions table -> observation store: time against one pyarrow scan, and peak RSS.

Generates ``--rows`` random-order ratings (user, item, rating) in ``--files`` Parquet files,
int64 keys and string keys (``"u123"``, ``"i45"``), then for each variant measures, in the same
run: one ``pyarrow.dataset`` scan of the files (the peer) and ``convert_table(kind=
"interactions")``, each in a fresh subprocess whose own peak RSS is reported (``--in-process``
runs them here, RSS then being the whole process's).  Issue 26's scale target (200M rows,
RSS <= 1.5 GiB, <= 3x the scan) is run by hand with ``--rows 200000000``; the default is small.

    python -m benchmarks.bench_tables [--rows N] [--files K] [--out results.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

_CHILD = r"""
import json, resource, sys, time
import pyarrow.dataset as ds
kind, src, dest, bucket = sys.argv[1:5]
if kind != "scan":
    from ooc_lowrank.io import convert_table  # imports are not timed
t0 = time.perf_counter()
if kind == "scan":
    n = sum(b.num_rows for b in ds.dataset(src, format="parquet").to_batches())
else:
    convert_table(src, dest, kind="interactions", row_key="user", col_key="item",
                  value="rating", duplicates="last", bucket_nnz=int(bucket) or None)
dt = time.perf_counter() - t0
print(json.dumps({"seconds": dt, "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
                  * 1024}))
"""


def generate(folder, rows, files, string_keys, seed=0):
    """``files`` Parquet files of random-order ratings, written one file at a time."""
    from benchmarks.bench_tables_scale import generate_interactions

    return generate_interactions(folder, rows, files, string_keys, seed)


def _run(kind, src, dest, bucket, in_process):
    if in_process:
        ns: dict = {}
        argv = sys.argv
        sys.argv = ["x", kind, src, dest, str(bucket)]
        try:
            from contextlib import redirect_stdout
            from io import StringIO

            buf = StringIO()
            with redirect_stdout(buf):
                exec(_CHILD, ns)  # noqa: S102 - our own code, as the subprocess runs it
        finally:
            sys.argv = argv
        return json.loads(buf.getvalue())
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, kind, src, dest, str(bucket)],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, default=2_000_000)
    p.add_argument("--files", type=int, default=4)
    p.add_argument("--bucket-nnz", type=int, default=0, help="0: the converter's default")
    p.add_argument("--workdir", default=None)
    p.add_argument("--out", default=None)
    p.add_argument("--in-process", action="store_true")
    p.add_argument("--quiet", action="store_true")
    a = p.parse_args(argv)
    work = a.workdir or tempfile.mkdtemp(prefix="bench_tables_")
    results = []
    for string_keys in (False, True):
        tag = "string" if string_keys else "int64"
        src = generate(os.path.join(work, tag), a.rows, a.files, string_keys)
        scan = _run("scan", src, "", 0, a.in_process)
        dest = os.path.join(work, f"{tag}.zarr")
        conv = _run("convert", src, dest, a.bucket_nnz, a.in_process)
        r = {
            "keys": tag,
            "rows": a.rows,
            "files": a.files,
            "scan_seconds": scan["seconds"],
            "convert_seconds": conv["seconds"],
            "ratio_to_scan": conv["seconds"] / max(scan["seconds"], 1e-9),
            "scan_peak_rss": scan["peak_rss"],
            "convert_peak_rss": conv["peak_rss"],
        }
        results.append(r)
        if not a.quiet:
            print(
                f"{tag:6s} keys, {a.rows} rows in {a.files} files: scan {r['scan_seconds']:.2f} s, "
                f"convert {r['convert_seconds']:.2f} s ({r['ratio_to_scan']:.1f}x), peak RSS "
                f"{r['convert_peak_rss'] / 2**20:.0f} MiB (scan {r['scan_peak_rss'] / 2**20:.0f})"
            )
    res = {"benchmark": "tables", "time": time.strftime("%Y-%m-%dT%H:%M:%S"), "results": results}
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)
    return res


if __name__ == "__main__":
    main()
