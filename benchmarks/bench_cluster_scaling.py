"""Scaling efficiency from 1 to 2 worker processes (issue 27): GIMC, GLRL and MVM L-BFGS.

For each method a generated store of ``--gb`` GB (default 4: four times the default worker
``--memory-limit`` of 1 GiB, so nothing is cached on the workers and every pass streams the
store) is fitted on a ``LocalCluster`` of 1 and then 2 worker processes with one thread each and
that memory limit.  The store's chunk files are dropped from the page cache before each fit and,
while a fit runs, every ``--drop-every`` seconds (``os.posix_fadvise(..., POSIX_FADV_DONTNEED)``;
the machine's 24 GiB would otherwise hold a 4 GB store after its first pass), so passes read
from the storage.  Recorded per method and worker count: fit seconds, passes
(``n_passes_``; GLRL: plus its gradient-cache passes; MVM: L-BFGS evaluations + 1), seconds per pass, and the efficiency
``t1 / (2 t2)`` per pass and per fit (1.0: perfect scaling); the workers' CPU seconds and
those of their task threads (the same work on 1 and 2 workers, whatever a busy machine does to
wall time: the measure to compare there), the idle fraction and the busiest worker's share of
the compute (stragglers); and the serialized graph bytes of
every pass sent (Dask's large-graph warning recorded at a 1-byte threshold; a graph above
Dask's own 10 MB threshold is an error: :func:`graph_bytes`); the workers' compute and
transfer seconds from the task stream (:func:`task_summary`).

Stores (kept in ``--workdir`` for reruns; sizes from the generators' bytes per row):

* GIMC: ``generate multilabel`` (dense float32 X, d = ``--d``, 20 labels), GIMC-LFF m = ``--m``;
* GLRL: ``generate signed`` (float32 coo, ``--obs-per-row`` entries per row), rank ``--rank``;
* MVM: ``generate multiview`` (three dense float32 views of 20), L-BFGS, ``--mvm-iter`` iters.

    python benchmarks/bench_cluster_scaling.py                        # 4 GB per method
    # the quiet full run (about 15-20 min): stores 4x a 0.75 GiB worker, streamed, cold reads
    nice -n 10 python benchmarks/bench_cluster_scaling.py --gb 3 --memory-limit 0.75 \
        --cache-bytes 0 --workdir /tmp/cluster_scaling
    # warm (the page cache keeps the 4x-memory stores: each worker reads at memory speed, the
    # stand-in for a cluster's per-worker storage); run twice, keep the second (the first
    # run's 1-worker fits still read part of a fresh store from disk); about 6 min each
    nice -n 10 python benchmarks/bench_cluster_scaling.py --methods glrl,mvm --gb 3 \
        --memory-limit 0.75 --cache-bytes 0 --drop-every 0 --workdir /tmp/cluster_scaling \
        --out benchmarks/results/cluster_scaling_warm.json
    python benchmarks/bench_cluster_scaling.py --gb 0.02 --iters 1 --out /tmp/s.json   # seconds

Per pass it also records the scheduler's CPU seconds (on a LocalCluster the scheduler is a
thread of this process, so they are part of the driver's), the bytes the engine scattered to
the workers (a replicated argument counted once per worker) and the scatter calls.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import sys
import tempfile
import threading
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

DEFAULT_OUT = os.path.join(HERE, "results", "cluster_scaling.json")
#: Dask's own large-graph warning threshold (``distributed.admin.large-graph-warning-threshold``)
LARGE_GRAPH = 10 * 10**6


@contextlib.contextmanager
def graph_bytes(limit=LARGE_GRAPH):
    """Collect the serialized size of every graph the client sends (a list, yielded); raise
    ``RuntimeError`` on leaving if one was above ``limit`` bytes (Dask's large-graph warning,
    turned into an error)."""
    import dask

    sizes: list[int] = []
    with dask.config.set({"distributed.admin.large-graph-warning-threshold": "1B"}), \
            warnings.catch_warnings(record=True) as caught:  # fmt: skip
        warnings.simplefilter("always")
        yield sizes
    for w in caught:
        m = re.search(r"Sending large graph of size ([\d.]+ \w+)", str(w.message))
        if m:
            sizes.append(int(dask.utils.parse_bytes(m.group(1).replace(" ", ""))))
    big = [s for s in sizes if s > limit]
    if big:
        raise RuntimeError(
            f"{len(big)} of {len(sizes)} graphs above Dask's large-graph threshold of {limit} "
            f"bytes (largest {max(big)}): a constant of the pass is embedded in its tasks"
        )


def graph_summary(sizes):
    import numpy as np

    if not sizes:
        return {"graphs": 0}
    a = np.asarray(sizes)
    return {"graphs": int(a.size), "median_bytes": int(np.median(a)), "max_bytes": int(a.max()),
            "total_bytes": int(a.sum())}  # fmt: skip


def chunk_files(path):
    for root, _dirs, files in os.walk(path):
        for f in files:
            yield os.path.join(root, f)


def drop_page_cache(path):
    """Advise the kernel to drop ``path``'s files from the page cache (cold reads next)."""
    from ooc_lowrank.storage import drop_page_cache as drop

    drop(path)


@contextlib.contextmanager
def cold(path, every):
    """Drop ``path`` from the page cache now and every ``every`` seconds until the block ends
    (``every`` <= 0: never, the store stays in the page cache once read)."""
    if every <= 0:
        yield
        return
    drop_page_cache(path)
    stop = threading.Event()

    def loop():
        while not stop.wait(every):
            drop_page_cache(path)

    t = threading.Thread(target=loop, daemon=True)
    t.start()
    try:
        yield
    finally:
        stop.set()
        t.join()


def _du(path):
    return sum(os.path.getsize(f) for f in chunk_files(path))


def ensure_store(workdir, method, gb, a, log):
    """The method's store of about ``gb`` GB (rows from a 2,000-row probe's bytes per row) and
    the probe (the warm-up fits' store): ``(path, probe)``."""
    from ooc_lowrank import generators

    kinds = {
        "gimc": ("multilabel", {"n_features": a.d, "n_labels": 20}),
        "glrl": ("signed", {"n_obs_per_row": a.obs_per_row}),
        "mvm": ("multiview", {}),
    }
    kind, kw = kinds[method]
    path = os.path.join(workdir, f"{method}_{gb:g}gb.zarr")
    probe = os.path.join(workdir, f"{method}_probe.zarr")
    if not os.path.exists(os.path.join(probe, ".done")):
        generators.GENERATORS[kind](probe, n_rows=2000, overwrite=True, **kw)
        open(os.path.join(probe, ".done"), "w").close()
    if os.path.exists(os.path.join(path, ".done")):
        return path, probe
    per_row = _du(probe) / 2000
    n = max(2000, int(gb * 1e9 / per_row))
    log(f"{method}: generating {n} rows ({per_row:.0f} bytes per row) at {path}")
    t = time.perf_counter()
    generators.GENERATORS[kind](path, n_rows=n, overwrite=True, block_rows=a.block_rows, **kw)
    open(os.path.join(path, ".done"), "w").close()
    log(f"{method}: {_du(path) / 1e9:.2f} GB in {time.perf_counter() - t:.0f} s")
    return path, probe


def fit(method, path, a):
    """Fit ``method`` on the store at ``path``; ``(seconds, passes)``."""
    from ooc_lowrank.storage import open_dataset

    ds = open_dataset(path)
    t = time.perf_counter()
    if method == "gimc":
        from ooc_lowrank import GIMC

        est = GIMC(n_features_map=a.m, max_iter=a.iters, random_state=0,
                   cache_bytes=a.cache_bytes).fit(ds)  # fmt: skip
        passes = est.n_passes_
    elif method == "glrl":
        from ooc_lowrank.glrl import GreedyLowRank

        est = GreedyLowRank(n_components=a.rank, random_state=0, cache_bytes=a.cache_bytes).fit(ds)
        passes = est.n_passes_ + getattr(est, "n_cache_passes_", 0)  # data + gradient-cache
    else:
        from ooc_lowrank.mvm import MultiViewMachineRegressor

        est = MultiViewMachineRegressor(solver="lbfgs", max_iter=a.mvm_iter,
                                        random_state=0).fit(ds)  # fmt: skip
        passes = getattr(est, "n_passes_", None) or getattr(est, "n_iter_", 0) + 1
    return time.perf_counter() - t, int(passes)


def _warm_here(method, probe, a):
    """A fit of the probe store inside this process (on a worker: its kernels compiled)."""
    import dask

    with dask.config.set(scheduler="sync"):
        fit(method, probe, a)


def run(method, path, probe, n_workers, a, log):
    import dask
    import distributed

    from ooc_lowrank import engine

    cluster = distributed.LocalCluster(
        n_workers=n_workers, threads_per_worker=1, processes=True, dashboard_address=None,
        memory_limit=int(a.memory_limit * 2**30),
        # one thread means one core: the engine limits Numba and BLAS inside every task to
        # engine.task_threads() (default 1), so no NUMBA_NUM_THREADS is needed here
    )  # fmt: skip
    client = distributed.Client(cluster)
    try:
        with dask.config.set(scheduler=client):
            if a.warm:  # imports, JIT compilation, worker start-up: not the measurement
                fit(method, probe, a)  # the driver, and one worker (the probe is one block)
                client.run(_warm_here, method, probe, a)  # every worker's own JIT
            cpu0 = client.run(_cpu_seconds)
            sched0 = client.run_on_scheduler(_process_cpu)
            sent0 = dict(engine.SCATTER_STATS)
            with graph_bytes() as sizes, cold(path, a.drop_every), \
                    distributed.get_task_stream(client) as ts:  # fmt: skip
                drv0 = time.process_time()
                seconds, passes = fit(method, path, a)
                driver_cpu = time.process_time() - drv0
            sched_cpu = client.run_on_scheduler(_process_cpu) - sched0
            sched_pid = client.run_on_scheduler(os.getpid)
            sent = {k: engine.SCATTER_STATS[k] - sent0[k] for k in sent0}
            cpu1 = client.run(_cpu_seconds)
    finally:
        client.close()
        cluster.close()
    cpu = {w: cpu1[w][0] - cpu0[w][0] for w in cpu1 if w in cpu0}
    # threads started during the fit count from zero: their whole CPU time is the fit's
    task_cpu = {w: cpu1[w][1] - (cpu0[w][1] or 0.0) for w in cpu1
                if w in cpu0 and cpu1[w][1] is not None}  # fmt: skip
    tasks = task_summary(ts.data)
    log(f"{method}: {n_workers} worker(s): {seconds:.1f} s, {passes} passes, "
        f"{seconds / max(passes, 1):.2f} s per pass, driver CPU {driver_cpu / max(passes, 1):.3f} s "
        f"per pass, scheduler CPU {sched_cpu / max(passes, 1):.3f} s per pass, scattered "
        f"{sent['bytes'] / max(passes, 1) / 2**20:.1f} MiB per pass, workers' CPU {sum(cpu.values()):.1f} s "
        f"(task threads {sum(task_cpu.values()):.1f} s), "
        f"task compute {tasks.get('compute_seconds', 0):.1f} s")  # fmt: skip
    return {"seconds": seconds, "passes": passes, "seconds_per_pass": seconds / max(passes, 1),
            "worker_cpu_seconds": sum(cpu.values()),
            # the driver's own CPU per pass (graph building, scatters, gathers, the method's
            # arithmetic between passes): the per-pass fixed cost that does not shrink with workers
            "driver_cpu_seconds": driver_cpu,
            "driver_cpu_seconds_per_pass": driver_cpu / max(passes, 1),
            # the scheduler's CPU (task bookkeeping, transfers it relays) and the engine's
            # scatters (arguments replicated on every worker, counted once per worker).  A
            # LocalCluster's scheduler runs in this process (its IO loop thread): its CPU is
            # then part of driver_cpu_seconds, not in addition to it
            "scheduler_cpu_seconds_per_pass": sched_cpu / max(passes, 1),
            "scheduler_in_driver": sched_pid == os.getpid(),
            "scattered_bytes_per_pass": sent["bytes"] / max(passes, 1),
            "scatters_per_pass": sent["scatters"] / max(passes, 1),
            "task_cpu_seconds": sum(task_cpu.values()) if task_cpu else None,
            "task_cpu_seconds_each": sorted(task_cpu.values()),
            # the workers' time not spent in tasks: per-pass latency, stragglers, I/O waits
            "idle_fraction": 1 - tasks.get("compute_seconds", 0) / (n_workers * seconds),
            "graph": graph_summary(sizes), "tasks": tasks}  # fmt: skip


def _process_cpu():
    """This process's CPU seconds (user + system; run on the scheduler)."""
    t = os.times()
    return t.user + t.system


def _cpu_seconds():
    """This worker process's CPU seconds (user + system): ``(all its threads, its task-executor
    threads)``; the second is the work of the tasks whatever their wall time on a busy machine
    (Linux ``/proc``; None elsewhere)."""
    t = os.times()
    tasks = 0.0
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    for th in threading.enumerate():
        if "Dask-Default-Threads" not in th.name or th.native_id is None:
            continue
        try:
            with open(f"/proc/self/task/{th.native_id}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            return t.user + t.system, None
        tasks += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    return t.user + t.system, tasks


def task_summary(records):
    """Tasks run and the seconds the workers spent per kind of activity (``compute``,
    ``transfer`` between workers, ``disk-read`` of spilled data): transfers say whether blocks
    were read on one worker and used on the other."""
    out = {"n_tasks": len(records)}
    per_worker: dict = {}
    for r in records:
        for ss in r.get("startstops", ()):
            k = f"{ss['action']}_seconds"
            dt = float(ss["stop"] - ss["start"])
            out[k] = out.get(k, 0.0) + dt
            if ss["action"] == "compute":
                per_worker[r.get("worker")] = per_worker.get(r.get("worker"), 0.0) + dt
    # stragglers: the busiest worker's share of the compute (1 / n_workers when even)
    total = sum(per_worker.values())
    out["compute_share_max"] = max(per_worker.values()) / total if total else None
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--methods", default="gimc,glrl,mvm")
    p.add_argument("--gb", type=float, default=4.0, help="store size per method (GB)")
    p.add_argument("--memory-limit", type=float, default=1.0, help="per worker, GiB")
    p.add_argument("--block-rows", type=int, default=None, help="default: the store's default")
    p.add_argument("--d", type=int, default=100, help="GIMC features")
    p.add_argument("--m", type=int, default=100, help="GIMC n_features_map")
    p.add_argument("--iters", type=int, default=2, help="GIMC iterations")
    p.add_argument("--obs-per-row", type=int, default=100, help="GLRL entries per row")
    p.add_argument("--rank", type=int, default=2, help="GLRL rank")
    p.add_argument("--mvm-iter", type=int, default=3, help="MVM L-BFGS iterations")
    p.add_argument("--cache-bytes", type=int, default=None,
                   help="GIMC / GLRL cache_bytes (0: stream every pass, as a store 4x the "
                   "workers' memory does anyway; for a small validation run)")  # fmt: skip
    p.add_argument("--drop-every", type=float, default=1.0,
                   help="page-cache drop period, s (0: no drops; the store, 4x a worker's "
                   "memory limit but inside the machine's RAM, is then read from the page "
                   "cache: the stand-in for a cluster whose workers each read with their own "
                   "bandwidth, where the default measures this machine's one shared disk)")
    p.add_argument("--no-warm", dest="warm", action="store_false",
                   help="skip the warm-up fit (on a 2,000-row store) on each cluster")  # fmt: skip
    p.add_argument("--workdir", default=None, help="keeps the stores there for reruns")
    p.add_argument("--out", default=DEFAULT_OUT)
    p.add_argument("--quiet", action="store_true")
    a = p.parse_args(argv)
    log = (lambda *x: None) if a.quiet else (lambda *x: print(*x, flush=True))
    workdir = a.workdir or tempfile.mkdtemp(prefix="cluster_scaling_")
    os.makedirs(workdir, exist_ok=True)
    res = {"gb": a.gb, "memory_limit_gib": a.memory_limit, "threads_per_worker": 1,
           "cpu_count": os.cpu_count(), "loadavg_before": os.getloadavg(), "params": vars(a),
           "methods": {}}  # fmt: skip
    try:
        for method in a.methods.split(","):
            path, probe = ensure_store(workdir, method, a.gb, a, log)
            r = {"store_bytes": _du(path)}
            for w in (1, 2):
                r[f"workers_{w}"] = run(method, path, probe, w, a, log)
            t1, t2 = r["workers_1"], r["workers_2"]
            r["efficiency_per_pass"] = t1["seconds_per_pass"] / (2 * t2["seconds_per_pass"])
            r["efficiency_per_fit"] = t1["seconds"] / (2 * t2["seconds"])
            # the same work's CPU seconds, 1 vs 2 workers (1.0: no extra work; on a busy
            # machine this, not wall time, says whether the second worker wastes cycles)
            r["cpu_ratio"] = t1["worker_cpu_seconds"] / max(t2["worker_cpu_seconds"], 1e-9)
            if t1["task_cpu_seconds"] and t2["task_cpu_seconds"]:
                r["task_cpu_ratio"] = t1["task_cpu_seconds"] / t2["task_cpu_seconds"]
            r["task_compute_ratio"] = (t1["tasks"].get("compute_seconds", 0)
                                       / max(t2["tasks"].get("compute_seconds", 0), 1e-9))
            log(f"{method}: efficiency {r['efficiency_per_pass']:.2f} per pass, "
                f"{r['efficiency_per_fit']:.2f} per fit; CPU 1/2 workers {r['cpu_ratio']:.2f} "
                f"(tasks {r.get('task_cpu_ratio', float('nan')):.2f}), "
                f"task compute 1/2 workers {r['task_compute_ratio']:.2f}")  # fmt: skip
            res["methods"][method] = r
    finally:
        if a.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)
    return res


if __name__ == "__main__":
    main()
