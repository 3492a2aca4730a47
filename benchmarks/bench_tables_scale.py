"""Table converters at scale (issue 26): interactions vs a pyarrow scan, Criteo-shaped MVM views.

1. **Interactions**: ``--rows`` random-order ratings ``(user, item, rating)`` in ``--files``
   Parquet files, int64 keys and string keys (``"u123"``, ``"i45"``) in turn.  In the same run:
   one ``pyarrow.dataset`` scan of the files (every column: the peer) and
   ``convert_table(kind="interactions", duplicates="last")``; time, the ratio to the scan, and
   the peak RSS.  Issue 26's targets at 200M rows: <= 3x the scan, <= 1.5 GiB.
2. **Criteo-shaped views**: ``--criteo-rows`` rows of 13 numeric columns ``I1..I13`` (float32,
   log-normal counts) and 26 categorical string columns ``C1..C26`` whose cardinalities grow
   as a power law from 10 to ``--max-cardinality`` (values drawn log-uniformly over the ids:
   a few frequent values, a long tail; 5% nulls in every fourth column), and a 0/1 target
   ``click``.  Converted to three MVM views (``num``: I1..I13, ``ca``: C1..C13, ``cb``:
   C14..C26) with signed hashing (``--hash-features`` columns per view) and with vocabularies
   (``--min-count``, an 'other' bucket), then one SGD epoch of
   ``MultiViewMachineClassifier`` on each store: times, store sizes, peak RSS.

Every measured step runs in a fresh subprocess (imports and the Numba JIT warmed up there
before the clock starts); its peak RSS is the largest of its own and its children's
(``getrusage``).  The free disk space is checked first; generated tables and stores are
deleted as soon as they are measured (``--keep`` keeps them).

    python -m benchmarks.bench_tables_scale --rows 2000000 --criteo-rows 1000000   # minutes
    python -m benchmarks.bench_tables_scale --rows 200000000 --files 40 \\
        --criteo-rows 20000000 --criteo-files 20                                    # full size
    python -m benchmarks.bench_tables_scale --rows 200000000 --files 40 --criteo-rows 0 \\
        --keys string                   # the 200M string-key interactions alone (issue 26)
    python -m benchmarks.bench_tables_scale --rows 20000000 --files 8 --criteo-rows 0 \\
        --keys int64 --out /tmp/t.json  # the 20M check (1-2 min busy); --out: keep the results
    python -m benchmarks.bench_tables_scale --rows 0 --criteo-rows 20000000 --criteo-files 20
                                        # the 20M-row Criteo-shaped part alone (issue 26)

The results file keeps one entry per part: a run that skips a part (``--rows 0``,
``--criteo-rows 0``, one ``--keys``) leaves the file's earlier entry for it in place (each
entry carries the ``time`` of the run that measured it).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "results", "tables_scale.json")

#: Bytes of disk per generated row, upper bounds (measured at 2M and 1M rows: about 38 and 400);
#: an interactions row also takes about 16-24 bytes of kept entries, 16 of spilled records and
#: 16 of store while it is converted (scratch in the system's temporary folder).
DISK_PER_INTERACTION = 120
DISK_PER_CRITEO_ROW = 500

_CHILD = r"""
import json, resource, sys, time
job = json.loads(sys.argv[1])
import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
from ooc_lowrank.io.tables import convert_table
tiny = dict(job.get("warm", {}))
if job["what"] == "convert":  # warm-up: imports, kernels loaded from the Numba cache
    opts = dict(job["options"])
    if opts["kind"] == "interactions":
        t = pa.table({"user": [1, 2], "item": [3, 4], "rating": [1.0, 2.0]})
    else:
        t = pa.table({"a": ["x", "y"], "b": [1.0, 2.0], "click": [0.0, 1.0]})
        opts.update(views={"v": ["a", "b"]}, numeric=None, target="click")
    convert_table(t, job["dest"] + ".warm", overwrite=True, **opts)
    import shutil; shutil.rmtree(job["dest"] + ".warm")
if job["what"] == "mvm":
    from ooc_lowrank.mvm import MultiViewMachineClassifier
    import scipy.sparse as sp
    rng = np.random.default_rng(0)
    views = [sp.random(64, 5, density=0.5, format="csr", random_state=i) for i in range(3)]
    MultiViewMachineClassifier(solver="sgd", n_epochs=1).fit(views, rng.integers(0, 2, 64))
t0 = time.perf_counter()
c0 = time.process_time()
out = {}
if job["what"] == "scan":
    out["rows"] = sum(b.num_rows for b in ds.dataset(job["src"], format="parquet").to_batches())
elif job["what"] == "convert":
    convert_table(job["src"], job["dest"], **job["options"])
else:
    m = MultiViewMachineClassifier(**job["options"]).fit(job["src"])
    out["n_features"] = int(m.coef_.shape[-2]) if hasattr(m, "coef_") else None
out["seconds"] = time.perf_counter() - t0
out["cpu_seconds"] = time.process_time() - c0
ru = resource.getrusage
out["peak_rss"] = 1024 * max(ru(resource.RUSAGE_SELF).ru_maxrss,
                             ru(resource.RUSAGE_CHILDREN).ru_maxrss)
print(json.dumps(out))
"""


def run_child(job, in_process=False):
    """Run one measured step (``job``: what, src, dest, options) in a fresh interpreter."""
    if in_process:  # tests: the same code, RSS then the whole test process's
        from contextlib import redirect_stdout
        from io import StringIO

        buf, argv = StringIO(), sys.argv
        sys.argv = ["x", json.dumps(job)]
        try:
            with redirect_stdout(buf):
                exec(_CHILD, {})  # noqa: S102 - our own code, as the subprocess runs it
        finally:
            sys.argv = argv
        return json.loads(buf.getvalue().strip().splitlines()[-1])
    env = dict(os.environ, PYTHONPATH=os.path.dirname(HERE))
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, json.dumps(job)],
        check=True,
        capture_output=True,
        text=True,
        env=env,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def _du(path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    return total


def check_disk(folder, need):
    free = shutil.disk_usage(folder).free
    if free < need:
        raise SystemExit(
            f"not enough free disk in {folder}: {free / 2**30:.1f} GiB free, about "
            f"{need / 2**30:.1f} GiB needed; pass --workdir on a larger disk or smaller sizes"
        )
    return free


def _keys(prefix, ids, string_keys):
    import pyarrow as pa
    import pyarrow.compute as pc

    arr = pa.array(ids)
    if not string_keys:
        return arr
    return pc.binary_join_element_wise(prefix, pc.cast(arr, pa.string()), "")


def generate_interactions(folder, rows, files, string_keys, seed=0):
    """``files`` Parquet files of random-order ratings (50 per user, 100 per item on average)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(seed)
    n_users, n_items = max(rows // 50, 10), max(rows // 100, 10)
    per = -(-rows // files)
    for k in range(files):
        m = min(per, rows - k * per)
        cols = {
            "user": _keys("u", rng.integers(0, n_users, m), string_keys),
            "item": _keys("i", rng.integers(0, n_items, m), string_keys),
            "rating": rng.integers(1, 6, m).astype(np.float32),
        }
        pq.write_table(pa.table(cols), os.path.join(folder, f"part-{k:04d}.parquet"))
    return folder


def criteo_cardinalities(max_cardinality):
    """Cardinality of C1..C26: a power law from 10 to ``max_cardinality``."""
    return [int(round(10 ** (1 + (np.log10(max_cardinality) - 1) * j / 25))) for j in range(26)]


def generate_criteo(folder, rows, files, max_cardinality, seed=0):
    """Criteo-shaped Parquet files: I1..I13 float32, C1..C26 strings (hex ids), click 0/1."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(seed)
    cards = criteo_cardinalities(max_cardinality)
    per = -(-rows // files)
    for k in range(files):
        m = min(per, rows - k * per)
        cols = {}
        for j in range(13):
            cols[f"I{j + 1}"] = np.floor(rng.lognormal(1.0 + j / 6, 1.0, m)).astype(np.float32)
        score = np.zeros(m)
        for j, card in enumerate(cards):
            ids = np.floor(np.exp(rng.random(m) * np.log(card))).astype(np.int64) - 1
            score += np.where(ids % 7 == 0, 0.3, -0.05)
            h = (ids * 2654435761 + j * 97) & 0xFFFFFFFF  # Criteo's values: 8 hex digits
            arr = pc.utf8_lpad(pc.cast(pa.array(h), pa.string()), 8, "0")
            if j % 4 == 3:
                arr = pc.if_else(pa.array(rng.random(m) < 0.05), pa.scalar(None, pa.string()), arr)
            cols[f"C{j + 1}"] = arr
        cols["click"] = (rng.random(m) < 1 / (1 + np.exp(-(score - 1.2)))).astype(np.float32)
        pq.write_table(pa.table(cols), os.path.join(folder, f"part-{k:04d}.parquet"))
    return folder


def _gib(b):
    return b / 2**30


def bench_interactions(a, work, log):
    out = []
    for tag in ("int64", "string") if a.keys == "both" else (a.keys,):
        string_keys = tag == "string"
        src = os.path.join(work, f"inter_{tag}")
        t0 = time.perf_counter()
        generate_interactions(src, a.rows, a.files, string_keys)
        gen = time.perf_counter() - t0
        scan = run_child({"what": "scan", "src": src}, a.in_process)
        dest = os.path.join(work, f"inter_{tag}.zarr")
        opts = dict(
            kind="interactions",
            row_key="user",
            col_key="item",
            value="rating",
            duplicates="last",
            dtype="float32",
        )
        if a.bucket_nnz:
            opts["bucket_nnz"] = a.bucket_nnz
        conv = run_child(
            {"what": "convert", "src": src, "dest": dest, "options": opts}, a.in_process
        )
        r = {
            "keys": tag,
            "rows": a.rows,
            "files": a.files,
            "generate_seconds": gen,
            "parquet_bytes": _du(src),
            "store_bytes": _du(dest),
            "scan_seconds": scan["seconds"],
            "scan_cpu_seconds": scan["cpu_seconds"],
            "scan_peak_rss": scan["peak_rss"],
            "convert_seconds": conv["seconds"],
            "convert_cpu_seconds": conv["cpu_seconds"],
            "convert_peak_rss": conv["peak_rss"],
            "ratio_to_scan": conv["seconds"] / max(scan["seconds"], 1e-9),
        }
        out.append(r)
        log(
            f"interactions, {tag} keys, {a.rows} rows: scan {r['scan_seconds']:.1f} s, convert "
            f"{r['convert_seconds']:.1f} s ({r['ratio_to_scan']:.1f}x), peak RSS "
            f"{_gib(r['convert_peak_rss']):.2f} GiB"
        )
        if not a.keep:
            shutil.rmtree(src)
            shutil.rmtree(dest)
    return out


def bench_criteo(a, work, log):
    src = os.path.join(work, "criteo")
    t0 = time.perf_counter()
    generate_criteo(src, a.criteo_rows, a.criteo_files, a.max_cardinality)
    res = {
        "rows": a.criteo_rows,
        "files": a.criteo_files,
        "cardinalities": criteo_cardinalities(a.max_cardinality),
        "generate_seconds": time.perf_counter() - t0,
        "parquet_bytes": _du(src),
        "scan": run_child({"what": "scan", "src": src}, a.in_process),
    }
    views = {
        "num": [f"I{j}" for j in range(1, 14)],
        "ca": [f"C{j}" for j in range(1, 14)],
        "cb": [f"C{j}" for j in range(14, 27)],
    }
    base = dict(kind="views", views=views, target="click", dtype="float32")
    for mode, extra in (
        ("hashing", {"hash_features": a.hash_features}),
        ("vocabulary", {"min_count": a.min_count, "other": True}),
    ):
        dest = os.path.join(work, f"criteo_{mode}.zarr")
        conv = run_child(
            {"what": "convert", "src": src, "dest": dest, "options": dict(base, **extra)},
            a.in_process,
        )
        from ooc_lowrank.storage import open_dataset

        ds = open_dataset(dest)
        widths = [int(ds[f"X{v}"].shape[1]) for v in range(3)]
        nnz = int(sum(ds[f"X{v}"].nnz for v in range(3)))
        mvm = run_child(
            {
                "what": "mvm",
                "src": dest,
                "options": dict(solver="sgd", n_epochs=1, n_components=a.n_factors, random_state=0),
            },
            a.in_process,
        )
        res[mode] = {
            "options": extra,
            "view_widths": widths,
            "nnz": nnz,
            "store_bytes": _du(dest),
            "convert": conv,
            "ratio_to_scan": conv["seconds"] / max(res["scan"]["seconds"], 1e-9),
            "mvm_sgd_epoch": mvm,
        }
        log(
            f"criteo {a.criteo_rows} rows, {mode}: convert {conv['seconds']:.1f} s "
            f"({res[mode]['ratio_to_scan']:.1f}x the scan, peak RSS "
            f"{_gib(conv['peak_rss']):.2f} GiB), views {widths}; one MVM SGD epoch "
            f"{mvm['seconds']:.1f} s (peak RSS {_gib(mvm['peak_rss']):.2f} GiB)"
        )
        if not a.keep:
            shutil.rmtree(dest)
    if not a.keep:
        shutil.rmtree(src)
    return res


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, default=2_000_000, help="interactions rows (0: skip)")
    p.add_argument("--files", type=int, default=8)
    p.add_argument(
        "--keys", choices=("both", "int64", "string"), default="both", help="interactions keys"
    )
    p.add_argument("--bucket-nnz", type=int, default=0, help="0: the converter's default")
    p.add_argument("--criteo-rows", type=int, default=1_000_000, help="0: skip")
    p.add_argument("--criteo-files", type=int, default=4)
    p.add_argument("--max-cardinality", type=int, default=1_000_000)
    p.add_argument("--hash-features", type=int, default=1 << 20, help="columns per view")
    p.add_argument("--min-count", type=int, default=10)
    p.add_argument("--n-factors", type=int, default=8)
    p.add_argument("--workdir", default=None, help="default: a new temporary folder")
    p.add_argument("--out", default=DEFAULT_OUT)
    p.add_argument("--keep", action="store_true", help="keep the generated data")
    p.add_argument("--in-process", action="store_true", help="(tests) no subprocesses")
    p.add_argument("--quiet", action="store_true")
    a = p.parse_args(argv)
    own = a.workdir is None
    work = tempfile.mkdtemp(prefix="bench_tables_scale_") if own else a.workdir
    os.makedirs(work, exist_ok=True)

    def log(msg):
        if not a.quiet:
            print(msg, flush=True)

    need = max(a.rows * DISK_PER_INTERACTION, a.criteo_rows * DISK_PER_CRITEO_ROW)
    free = check_disk(work, need)
    log(f"workdir {work}: {_gib(free):.0f} GiB free, about {_gib(need):.1f} GiB needed")
    res = {
        "benchmark": "tables_scale",
        "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "cpus": os.cpu_count(),
        "load_average_at_start": os.getloadavg(),
    }
    try:
        if a.rows:
            res["interactions"] = bench_interactions(a, work, log)
        if a.criteo_rows:
            res["criteo"] = bench_criteo(a, work, log)
    finally:
        if own and not a.keep:
            shutil.rmtree(work, ignore_errors=True)
    res["load_average_at_end"] = os.getloadavg()
    if a.out:
        os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
        merged = merge_results(a.out, res)
        with open(a.out, "w") as f:
            json.dump(merged, f, indent=1)
    return res


def merge_results(path, res):
    """``res`` with the parts a partial run skipped (``--criteo-rows 0``, ``--rows 0``, one
    ``--keys``) carried over from the results already at ``path``, each part stamped with the
    time of the run that measured it: one current file for the benchmark."""
    try:
        with open(path) as f:
            old = json.load(f)
    except (OSError, ValueError):
        old = {}
    if old.get("benchmark") != res["benchmark"]:
        old = {}
    out = dict(res)
    new_inter = [dict(r, time=r.get("time", res["time"])) for r in res.get("interactions", [])]
    tags = {r["keys"] for r in new_inter}
    kept = [dict(r, time=r.get("time", old.get("time"))) for r in old.get("interactions", [])]
    inter = [r for r in kept if r["keys"] not in tags] + new_inter
    if inter:
        out["interactions"] = sorted(inter, key=lambda r: r["keys"])
    if "criteo" in res:
        out["criteo"] = dict(res["criteo"], time=res["time"])
    elif "criteo" in old:
        out["criteo"] = dict(old["criteo"], time=old["criteo"].get("time", old.get("time")))
    return out


if __name__ == "__main__":
    main()
