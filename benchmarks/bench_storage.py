"""Storage benchmark: store read throughput and an engine Gram pass against plain NumPy peers.

Measures, each in a **fresh subprocess** (one warm-up run, then the median of ``--repeats``
runs; peak RSS = ``VmHWM`` of that subprocess, see :func:`peak_rss`):

* write throughput (GB/s) of a dense float32 array held in memory, through
  :class:`ooc_lowrank.storage.DatasetWriter` (blocks of the store's ``block_rows`` appended;
  finite check, chunk files, CRC manifest, commit) as a ratio to ``np.save`` of the same array;
* read throughput (GB/s of logical bytes) of a dense float32 store and of a CSR store, read
  block by block through :class:`ooc_lowrank.storage.ArrayHandle` (one thread) and through an
  engine pass (``engine.map_reduce`` with a trivial block function, Dask threads), as a ratio to
  ``np.load`` of the same bytes from ``.npy`` files (one file for dense; ``indptr``,
  ``indices`` and ``data`` for CSR);
* the Gram matrix ``X^T X`` through ``engine.map_reduce`` (block function ``ssyrk``, float64
  accumulation) for two block sizes, as a time ratio to one in-memory NumPy product
  ``X.T @ X`` on the same data (loaded before timing); an in-memory ``ssyrk`` is reported too.

All reads are **page-cache reads**: the files were just written and the page cache cannot be
dropped here (no root), so these numbers are decode/copy/first-touch costs, not disk I/O.
The machine is shared: the JSON records the load average before and after.

Usage::

    python benchmarks/bench_storage.py            # ~2 GB dense (1M x 500 float32) + ~2 GB CSR
    python benchmarks/bench_storage.py --small    # seconds; what tests/test_benchmarks_tiny.py runs
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "results", "storage.json")


# ---------------------------------------------------------------------------------------------
# data
# ---------------------------------------------------------------------------------------------


def _prepare(workdir, rows, cols, csr_rows, csr_cols, csr_nnz_per_row, log):
    """Write the two stores with the generators and the .npy copies of the same bytes."""
    from ooc_lowrank import generators as G

    dense, csr = os.path.join(workdir, "dense.zarr"), os.path.join(workdir, "csr.zarr")
    t = time.perf_counter()
    ds = G.generate_multilabel(
        dense, n_rows=rows, n_features=cols, n_labels=10, seed=0, overwrite=True
    )
    log(f"wrote {dense} ({rows} x {cols} float32) in {time.perf_counter() - t:.1f} s")
    t = time.perf_counter()
    cs = G.generate_multilabel(
        csr,
        n_rows=csr_rows,
        n_features=csr_cols,
        density=csr_nnz_per_row / csr_cols,
        n_labels=10,
        seed=0,
        overwrite=True,
    )
    log(
        f"wrote {csr} ({csr_rows} x {csr_cols}, nnz {cs['X'].nnz}) in "
        f"{time.perf_counter() - t:.1f} s"
    )
    # .npy copies, streamed block by block (bounded memory)
    h = ds["X"]
    out = np.lib.format.open_memmap(
        os.path.join(workdir, "X.npy"), mode="w+", dtype=h.dtype, shape=h.shape
    )
    for s, e, b in h.iter_blocks():
        out[s:e] = b
    out.flush()
    del out
    h = cs["X"]
    ip = np.lib.format.open_memmap(
        os.path.join(workdir, "indptr.npy"), mode="w+", dtype=np.int64, shape=(h.shape[0] + 1,)
    )
    ind = np.lib.format.open_memmap(
        os.path.join(workdir, "indices.npy"), mode="w+", dtype=h.index_dtype, shape=(h.nnz,)
    )
    dat = np.lib.format.open_memmap(
        os.path.join(workdir, "data.npy"), mode="w+", dtype=h.dtype, shape=(h.nnz,)
    )
    ip[0] = 0
    for s, e, b in h.iter_blocks():
        k0 = int(ip[s])
        ip[s + 1 : e + 1] = b.indptr[1:] + k0
        ind[k0 : k0 + b.nnz] = b.indices
        dat[k0 : k0 + b.nnz] = b.data
    for a in (ip, ind, dat):
        a.flush()
    return {
        "dense_store": dense,
        "csr_store": csr,
        "dense_bytes": int(np.prod(ds["X"].shape)) * ds["X"].dtype.itemsize,
        "csr_bytes": int(cs["X"].nnz) * (cs["X"].dtype.itemsize + cs["X"].index_dtype.itemsize)
        + 8 * (csr_rows + 1),
        "dense_disk_bytes": ds.info()["bytes_on_disk"],
        "csr_disk_bytes": cs.info()["bytes_on_disk"],
        "dense_block_rows": ds.block_rows,
        "csr_block_rows": cs.block_rows,
        "dense_shape": list(ds["X"].shape),
        "csr_shape": list(cs["X"].shape),
        "csr_nnz": int(cs["X"].nnz),
    }


# ---------------------------------------------------------------------------------------------
# measurements (run inside a worker subprocess)
# ---------------------------------------------------------------------------------------------


def _count_block(b):
    return np.array([float(b.shape[0])])


def _gram_block(b):
    """``b^T b`` of one block.  NumPy computes the product of an array with its own transpose
    by syrk and releases the GIL while BLAS runs; ``scipy.linalg.blas.ssyrk``'s wrapper holds
    the GIL, which serialised the engine's concurrent block tasks (quiet machine, 1M x 500
    float32: 2.9 s against 2.2 s for one thread in memory)."""
    d = b.shape[1]
    if b.shape[0] == 0:
        return np.zeros((d, d))
    return b.T @ b


def _gram_block_scipy(b):
    """The in-memory ``ssyrk`` peer (upper triangle; scipy's wrapper, GIL held)."""
    from scipy.linalg.blas import dsyrk, ssyrk

    syrk = ssyrk if b.dtype == np.float32 else dsyrk
    return syrk(1.0, b.T, trans=0)  # b.T is Fortran-ordered: no copy


def _symmetrize(upper):
    return np.triu(upper) + np.triu(upper, 1).T


def _measure(name, workdir, block_rows):
    """Return (callable doing one run, bytes it reads or None)."""
    from ooc_lowrank import engine
    from ooc_lowrank.storage import open_dataset

    if name in ("read_dense_store", "read_csr_store", "read_dense_engine", "read_csr_engine"):
        store = "dense.zarr" if "dense" in name else "csr.zarr"
        h = open_dataset(os.path.join(workdir, store))["X"]
        if name.endswith("_store"):

            def run():
                for _ in h.iter_blocks(block_rows):
                    pass
        else:
            blocked = engine.as_blocked(h, block_rows=block_rows)

            def run():
                engine.map_reduce(_count_block, blocked)

        return run
    if name in ("write_dense_npy", "write_dense_store"):
        from ooc_lowrank.storage import DatasetWriter

        X = np.load(os.path.join(workdir, "X.npy"))  # in memory before timing
        B = block_rows or open_dataset(os.path.join(workdir, "dense.zarr")).block_rows
        dest = os.path.join(workdir, "w.npy" if name.endswith("npy") else "w.zarr")

        if name.endswith("npy"):

            def run():
                np.save(dest, X)
        else:

            def run():  # the library's write path: blocks of B rows appended, manifest, commit
                with DatasetWriter(dest, block_rows=B) as w:
                    w.add_dense("X", n_cols=X.shape[1], dtype=X.dtype)
                    for s in range(0, X.shape[0], B):
                        w.append(X=X[s : s + B])

        def reset():  # untimed: remove the last run's output
            if os.path.isdir(dest):
                shutil.rmtree(dest)
            elif os.path.exists(dest):
                os.remove(dest)

        run.reset = reset
        return run
    if name == "read_dense_npy":
        return lambda: np.load(os.path.join(workdir, "X.npy"))
    if name == "read_csr_npy":

        def run():
            return [
                np.load(os.path.join(workdir, f"{k}.npy")) for k in ("indptr", "indices", "data")
            ]

        return run
    if name == "gram_engine":
        h = open_dataset(os.path.join(workdir, "dense.zarr"))["X"]
        blocked = engine.as_blocked(h, block_rows=block_rows)
        return lambda: _symmetrize(engine.map_reduce(_gram_block, blocked))
    if name in ("gram_numpy", "gram_numpy_1thread", "gram_numpy_syrk"):
        X = np.load(os.path.join(workdir, "X.npy"))  # loaded before timing: in-memory peer
        if name == "gram_numpy":
            return lambda: X.T @ X
        if name == "gram_numpy_1thread":  # what each Dask thread's BLAS gets in the engine
            from threadpoolctl import threadpool_limits

            def run():
                with threadpool_limits(limits=1, user_api="blas"):
                    return X.T @ X

            return run
        return lambda: _symmetrize(_gram_block_scipy(X))
    raise ValueError(f"unknown measurement {name!r}")


def peak_rss():
    """Peak resident set size of this process in bytes.

    Linux ``VmHWM`` (reset by ``execve``).  ``ru_maxrss`` is only the fallback: on Linux it
    carries over the parent's RSS through fork + exec, so a fresh subprocess would report its
    parent's footprint.
    """
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _worker(name, workdir, block_rows, repeats):
    base = peak_rss()
    run = _measure(name, workdir, block_rows)
    reset = getattr(run, "reset", lambda: None)
    reset()
    run()  # warm-up: imports, JIT, first touch, zarr metadata
    times, cpu = [], []
    for _ in range(repeats):
        reset()
        t, c = time.perf_counter(), time.process_time()
        run()
        times.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    reset()
    peak = peak_rss()
    return {
        "name": name,
        "block_rows": block_rows,
        "times": times,
        "seconds": statistics.median(times),
        # CPU seconds of this process (all threads): less sensitive than wall time to other
        # processes on a shared machine
        "cpu_seconds": statistics.median(cpu),
        "cpu_times": cpu,
        "peak_rss": peak,
        "base_rss": base,
    }


def _run_worker(name, workdir, block_rows, repeats, in_process):
    if in_process:
        return _worker(name, workdir, block_rows, repeats)
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "--_worker",
        name,
        "--workdir",
        workdir,
        "--repeats",
        str(repeats),
    ]
    if block_rows is not None:
        cmd += ["--block-rows", str(block_rows)]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"benchmark worker {name} failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------------------------------
# driver
# ---------------------------------------------------------------------------------------------


def _table(rows):
    head = (
        f"{'measurement':<22}{'block_rows':>11}{'median s':>10}{'GB/s':>8}{'ratio':>8}"
        f"{'peak RSS MB':>13}  vs"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        gbs = "" if r.get("gb_per_s") is None else f"{r['gb_per_s']:.2f}"
        ratio = "" if r.get("ratio") is None else f"{r['ratio']:.2f}"
        br = "" if r.get("block_rows") is None else str(r["block_rows"])
        lines.append(
            f"{r['name']:<22}{br:>11}{r['seconds']:>10.3f}{gbs:>8}{ratio:>8}"
            f"{r['peak_rss'] / 2**20:>13.0f}  {r.get('vs', '')}"
        )
    return "\n".join(lines)


def main(argv=None):
    """Run the benchmark; returns the result dict (also written as JSON to ``--out``)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--small", action="store_true", help="tiny sizes (for the unit test)")
    p.add_argument("--rows", type=int, default=None, help="dense rows (default 1,000,000)")
    p.add_argument("--cols", type=int, default=None, help="dense columns (default 500)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument(
        "--workdir",
        default=None,
        help="where to write the data (default: a temp dir, removed afterwards)",
    )
    p.add_argument("--keep", action="store_true", help="keep the data in --workdir")
    p.add_argument("--reuse", action="store_true", help="reuse data already in --workdir")
    p.add_argument("--out", default=DEFAULT_OUT, help="JSON output path")
    p.add_argument(
        "--in-process",
        action="store_true",
        help="run measurements in this process (no fresh subprocess per measurement)",
    )
    p.add_argument("--quiet", action="store_true")
    p.add_argument(
        "--only",
        default=None,
        help="comma-separated measurement names or groups (write, read, gram) to run",
    )
    p.add_argument("--_worker", default=None, help=argparse.SUPPRESS)
    p.add_argument("--block-rows", type=int, default=None, help=argparse.SUPPRESS)
    a = p.parse_args(argv)

    if a._worker:
        print(json.dumps(_worker(a._worker, a.workdir, a.block_rows, a.repeats)))
        return None

    log = (lambda *x: None) if a.quiet else (lambda *x: print(*x, flush=True))
    rows = a.rows or (20_000 if a.small else 1_000_000)
    cols = a.cols or (50 if a.small else 500)
    nnz_row = 25 if a.small else 250
    csr_cols = 2_000 if a.small else 20_000
    # CSR of about the same logical bytes as the dense array (8 bytes per entry)
    csr_rows = max(1, rows * cols * 4 // (nnz_row * 8))
    tmp = a.workdir is None
    workdir = a.workdir or tempfile.mkdtemp(prefix="ooc_bench_storage_")
    os.makedirs(workdir, exist_ok=True)
    load_before = os.getloadavg()
    try:
        info_path = os.path.join(workdir, "info.json")
        if a.reuse and os.path.exists(info_path):
            info = json.load(open(info_path))
        else:
            info = _prepare(workdir, rows, cols, csr_rows, csr_cols, nnz_row, log)
            json.dump(info, open(info_path, "w"))
        B1 = info["dense_block_rows"]
        B2 = 256 if a.small else 65_536
        if B2 == B1:
            B2 = B1 * 4
        plan = [
            ("write_dense_npy", None),
            ("write_dense_store", None),
            ("read_dense_npy", None),
            ("read_dense_store", None),
            ("read_dense_engine", None),
            ("read_csr_npy", None),
            ("read_csr_store", None),
            ("read_csr_engine", None),
            ("gram_numpy", None),
            ("gram_numpy_1thread", None),
            ("gram_numpy_syrk", None),
            ("gram_engine", B1),
            ("gram_engine", B2),
        ]
        if a.only:
            keep = set(a.only.split(","))
            plan = [x for x in plan if x[0] in keep or x[0].split("_")[0] in keep]
        results = []
        for name, br in plan:
            r = _run_worker(name, workdir, br, a.repeats, a.in_process)
            results.append(r)
            log(
                f"  {name:<20} block_rows={br}  median {r['seconds']:.3f} s  "
                f"peak RSS {r['peak_rss'] / 2**20:.0f} MB"
            )
        by = {(r["name"], r["block_rows"]): r for r in results}
        for r in results:
            kind = "dense" if "dense" in r["name"] or r["name"].startswith("gram") else "csr"
            if r["name"].startswith(("read", "write")):
                op = r["name"].split("_")[0]
                nbytes = info[f"{kind}_bytes"]
                r["bytes"] = nbytes
                r["gb_per_s"] = nbytes / r["seconds"] / 1e9
                peer_key = (f"{op}_{kind}_npy", None)
                if not r["name"].endswith("_npy") and peer_key in by:
                    peer = by[peer_key]
                    r["ratio"] = r["gb_per_s"] / (nbytes / peer["seconds"] / 1e9)
                    r["vs"] = f"GB/s ratio to {op}_{kind}_npy"
            elif r["name"] != "gram_numpy" and ("gram_numpy", None) in by:
                r["ratio"] = r["seconds"] / by[("gram_numpy", None)]["seconds"]
                r["vs"] = "time ratio to gram_numpy (X.T @ X in memory)"
        load_after = os.getloadavg()
        res = {
            "benchmark": "storage",
            "small": bool(a.small),
            "repeats": a.repeats,
            "subprocess_per_measurement": not a.in_process,
            "note": "page-cache reads (page cache not dropped); shared machine, see loadavg",
            "loadavg_before": load_before,
            "loadavg_after": load_after,
            "cpu_count": os.cpu_count(),
            "data": info,
            "results": results,
        }
        table = _table(results)
        log(table)
        log(
            f"dense {info['dense_shape']} float32 = {info['dense_bytes'] / 1e9:.2f} GB; csr "
            f"{info['csr_shape']} nnz {info['csr_nnz']} = {info['csr_bytes'] / 1e9:.2f} GB "
            f"({info['csr_disk_bytes'] / 1e9:.2f} GB on disk); load avg before {load_before}, "
            f"after {load_after}"
        )
        res["table"] = table
        os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)
        return res
    finally:
        if tmp and not a.keep:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(HERE))  # run from a checkout without installing
    main()
