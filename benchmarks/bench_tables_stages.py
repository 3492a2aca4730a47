"""CPU seconds per stage of an interactions table conversion, against one pyarrow scan (issue 26).

Generates ``--rows`` random-order ratings in ``--files`` Parquet files (int64 or string keys,
as :mod:`benchmarks.bench_tables_scale` does), then in this process: one ``pyarrow.dataset``
scan of the files (the peer) and ``convert_table(kind="interactions", duplicates="last")``,
with the converter's stage functions wrapped to add up the CPU time (``time.thread_time``) of
the thread that runs them: key mapping, values, the spill kernel and writes, the replay, the
bucket loads, the sort / merge (``bucket_csr``), the store writer's checks, file writes and
CRC-32.  What no wrapper sees (Arrow's decode in its own threads, glue) is the rest of the
process's CPU time.  CPU seconds and same-run ratios stay meaningful on a busy machine; no wall
time is reported.  ``--spill-once`` forces the path that tables of a known row count take
above ``_KEEP_ENTRIES_BYTES`` of entries (``_SpillOnce``: spilled to buckets in the one read),
so that a small run profiles it (``--read-twice``: its old name, from when integer keys were
read twice there instead).

    python -m benchmarks.bench_tables_stages --rows 20000000 --files 8 --keys int64 --spill-once
    python -m benchmarks.bench_tables_stages --rows 20000000 --files 8 --keys string
"""

from __future__ import annotations

import argparse
import collections
import functools
import json
import os
import shutil
import tempfile
import threading
import time
from contextlib import contextmanager

#: (module, object path, stage): the functions timed; a generator is timed per item.
STAGES = (
    ("ooc_lowrank.io.tables", "Vocabulary.index", "key mapping"),
    ("ooc_lowrank.io.tables", "_VocabBuilder.add", "key mapping"),
    ("ooc_lowrank.io.tables", "_StringInterner.add", "key mapping"),
    ("ooc_lowrank.io.tables", "_IntInterner.add", "key mapping"),
    ("ooc_lowrank.io.tables", "_SpilledBuckets._remap", "id remap"),
    ("ooc_lowrank.io.tables", "_SpilledBuckets.__init__", "re-spill of oversized buckets"),
    ("ooc_lowrank.io.tables", "_PairsOnce._index", "key mapping"),
    ("ooc_lowrank.io.tables", "_VocabBuilder.finish", "vocabulary finish"),
    ("ooc_lowrank.io.tables", "_StringInterner.finish", "vocabulary finish"),
    ("ooc_lowrank.io.tables", "_IntInterner.finish", "vocabulary finish"),
    ("ooc_lowrank.io.tables", "_keys", "key checks"),
    ("ooc_lowrank.io.tables", "_values", "values"),
    ("ooc_lowrank.io.tables", "TableSource._read", "parquet batches (python side)"),
    ("ooc_lowrank.io.tables", "_Replay.add", "replay write"),
    ("ooc_lowrank.io.tables", "_Replay.__iter__", "replay read"),
    ("ooc_lowrank.kernels.buckets", "spill_pairs", "spill kernel"),
    ("ooc_lowrank.io._common", "RowBuckets.append_parts", "spill write"),
    ("ooc_lowrank.io._common", "RowBuckets.load", "bucket load"),
    ("ooc_lowrank.kernels.buckets", "bucket_csr", "sort + merge (bucket_csr)"),
    ("ooc_lowrank.io.tables", "csr_from_parts", "store: blocks"),
    ("ooc_lowrank.storage", "DatasetWriter._check_block", "store: checks"),
    ("ooc_lowrank.storage", "DatasetWriter._take", "store: blocks"),
    ("ooc_lowrank.storage", "_write_file", "store: file writes"),
    ("ooc_lowrank.storage", "_build_manifest", "store: manifest"),
)


@contextmanager
def timed_stages(acc):
    """Wrap every :data:`STAGES` function so that its thread's CPU time adds to ``acc[stage]``
    (outermost call only); the store writer's CRC-32 too.  Everything restored on exit."""
    import importlib
    import inspect

    from ooc_lowrank import storage

    lock, depth, undo = threading.Lock(), threading.local(), []

    def add(stage, t0):
        with lock:
            acc[stage] += time.thread_time() - t0

    def timed(f, stage):
        if inspect.isgeneratorfunction(f):

            @functools.wraps(f)
            def gen(*a, **k):
                it = f(*a, **k)
                while True:
                    t0 = time.thread_time()
                    try:
                        x = next(it)
                    except StopIteration:
                        add(stage, t0)
                        return
                    add(stage, t0)
                    yield x

            return gen

        @functools.wraps(f)
        def call(*a, **k):
            d = getattr(depth, "d", 0)
            depth.d, t0 = d + 1, time.thread_time()
            try:
                return f(*a, **k)
            finally:
                depth.d = d
                if d == 0:
                    add(stage, t0)

        return call

    def patch(owner, name, stage):
        f = getattr(owner, name)
        undo.append((owner, name, owner.__dict__[name] if isinstance(owner, type) else f))
        setattr(owner, name, timed(f, stage))

    try:
        for mod, path, stage in STAGES:
            owner = importlib.import_module(mod)
            *outer, name = path.split(".")
            for o in outer:
                owner = getattr(owner, o)
            patch(owner, name, stage)
        real = storage.zlib  # the writer's CRC-32 of every chunk written
        undo.append((storage, "zlib", real))

        class _Zlib:
            crc32 = staticmethod(timed(real.crc32, "store: crc32"))

            def __getattr__(self, name):
                return getattr(real, name)

        storage.zlib = _Zlib()
        yield acc
    finally:
        for owner, name, f in reversed(undo):
            setattr(owner, name, f)


def profile(src, dest, spill_once=False):
    """Scan ``src`` once, convert it with timed stages; returns the CPU seconds."""
    import pyarrow as pa
    import pyarrow.dataset as ds

    from ooc_lowrank.io import tables
    from ooc_lowrank.io.tables import convert_table

    opts = dict(kind="interactions", row_key="user", col_key="item", value="rating")
    opts.update(duplicates="last", dtype="float32", overwrite=True)
    for keys in (([1, 2], [3, 4]), (["a", "b"], ["c", "d"])):  # warm-up: imports, JIT cache
        warm = pa.table({"user": keys[0], "item": keys[1], "rating": [1.0, 2.0]})
        convert_table(warm, dest + ".warm", **opts)
    shutil.rmtree(dest + ".warm")
    c0 = time.process_time()
    rows = sum(b.num_rows for b in ds.dataset(src, format="parquet").to_batches())
    scan = time.process_time() - c0
    acc = collections.Counter()
    keep = tables._KEEP_ENTRIES_BYTES
    try:
        if spill_once:
            tables._KEEP_ENTRIES_BYTES = 0
        with timed_stages(acc):
            c0 = time.process_time()
            convert_table(src, dest, **opts)
            total = time.process_time() - c0
    finally:
        tables._KEEP_ENTRIES_BYTES = keep
    stages = dict(sorted(acc.items(), key=lambda kv: -kv[1]))
    stages["rest (Arrow's threads, glue)"] = total - sum(acc.values())
    return {
        "rows": rows,
        "scan_cpu_seconds": scan,
        "convert_cpu_seconds": total,
        "cpu_ratio_to_scan": total / max(scan, 1e-9),
        "stages_cpu_seconds": stages,
    }


def main(argv=None):
    from benchmarks.bench_tables_scale import generate_interactions

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, default=2_000_000)
    p.add_argument("--files", type=int, default=4)
    p.add_argument("--keys", choices=("int64", "string"), default="int64")
    p.add_argument(
        "--spill-once",
        "--read-twice",
        dest="spill_once",
        action="store_true",
        help="force the spill-once path (_SpillOnce) of large tables",
    )
    p.add_argument("--workdir", default=None, help="default: a new temporary folder")
    p.add_argument("--out", default=None, help="a JSON file for the results")
    p.add_argument("--quiet", action="store_true")
    a = p.parse_args(argv)
    work = a.workdir or tempfile.mkdtemp(prefix="bench_tables_stages_")
    try:
        src = generate_interactions(
            os.path.join(work, "src"), a.rows, a.files, a.keys == "string"
        )
        res = profile(src, os.path.join(work, "out.zarr"), a.spill_once)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    res.update(keys=a.keys, files=a.files, spill_once=a.spill_once, time=time.ctime())
    res["load_average"] = os.getloadavg()
    if not a.quiet:
        for k, v in res["stages_cpu_seconds"].items():
            print(f"  {k:32s} {v:7.2f} CPU-s")
        print(
            f"{a.keys} keys, {res['rows']} rows: convert {res['convert_cpu_seconds']:.2f} CPU-s, "
            f"scan {res['scan_cpu_seconds']:.2f} CPU-s ({res['cpu_ratio_to_scan']:.1f}x)"
        )
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)
    return res


if __name__ == "__main__":
    main()
