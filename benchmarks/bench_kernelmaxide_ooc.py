"""KernelMaxide out of core (issue 9): one fit on a generated store larger than its worker.

A dense store (default 2M rows x 500 float32 features, 100 labels; ``generate_multilabel``)
is masked by the paper's protocol (``mask_labels_store``: 30 % of each label's positives and
of its negatives observed, every row a training row).  KernelMaxide-n (streamed ``F``:
``cache_bytes=0``, so every pass recomputes the kernel blocks from ``X``) runs ``--max-iter``
APG iterations inside one spawned Dask worker whose memory limit is a quarter of the store's
logical size (``X`` + ``Y_obs``).  Reported: seconds per APG iteration and engine passes per
iteration (each iteration separately: the first ones grow the Lipschitz estimate, later ones
are the steady state), the setup passes (label check, landmark Gram, ``G = F_UT^T F_UT``),
and the peak RSS of the worker, and the serialized bytes of every graph sent to the cluster
(``setup["graph_bytes_per_pass"]``; one graph per pass; a graph above Dask's large-graph
threshold of 10 MB is an error, issue 27).  The JIT is warmed up on a small in-memory fit first.

    nice -n 10 python benchmarks/bench_kernelmaxide_ooc.py            # 2M x 500 (8 GB on disk)
    python benchmarks/bench_kernelmaxide_ooc.py --small               # seconds
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from benchmarks import _worker_rss as rss  # noqa: E402
from benchmarks.bench_cluster_scaling import graph_bytes, graph_summary  # noqa: E402

DEFAULT_OUT = os.path.join(HERE, "results", "kernelmaxide_ooc.json")


def ensure_store(workdir, n, d, L, omega, log):
    """The masked store ``km-{n}x{d}-L{L}-obs{omega}.zarr`` (generated once, then reused)."""
    from ooc_lowrank.generators import generate_multilabel
    from ooc_lowrank.kernelmaxide import mask_labels_store

    url = os.path.join(workdir, f"km-{n}x{d}-L{L}-obs{omega:g}.zarr")
    if os.path.exists(url):
        return url
    src = os.path.join(workdir, f"km-{n}x{d}-L{L}-full.zarr")
    t = time.perf_counter()
    generate_multilabel(src, n_rows=n, n_features=d, n_labels=L, labels_per_row=5.0, seed=0,
                        overwrite=True)
    log(f"generated {src} in {time.perf_counter() - t:.1f}s")
    t = time.perf_counter()
    mask_labels_store(src, url, omega, test_fraction=0.0, random_state=0, overwrite=True)
    log(f"masked (omega={omega}) into {url} in {time.perf_counter() - t:.1f}s")
    shutil.rmtree(src, ignore_errors=True)
    return url



class PassClock:
    """Counts and times the engine passes of KernelMaxide fits (``core.Passes._run``)."""

    def __init__(self):
        self.times = []

    def __enter__(self):
        from ooc_lowrank.kernelmaxide import core

        self._core, self._orig = core, core.Passes._run
        clock = self

        def run(passes, fn, args):
            out = clock._orig(passes, fn, args)
            clock.times.append((fn.__name__, time.perf_counter()))
            return out

        core.Passes._run = run
        return self

    def __exit__(self, *exc):
        self._core.Passes._run = self._orig


def run_fit(ds, *, n_landmarks, lam, max_iter, limit, threads, warm):
    """Fit on the limited worker; returns the per-iteration record."""
    from ooc_lowrank.kernelmaxide import KernelMaxide

    its = []
    if warm is not None:  # JIT and thread pools, in this process and on the worker
        KernelMaxide(n_features_map=8, alpha=lam, max_iter=2, random_state=0).fit(*warm)
    with PassClock() as clock, rss.limited_worker(limit, threads=threads) as (client, peak), \
            graph_bytes() as graphs:  # fmt: skip
        client.run(_warm_worker)

        def cb(it, elapsed, obj):
            its.append((it, time.perf_counter(), float(obj), len(clock.times)))

        t0 = time.perf_counter()
        est = KernelMaxide(n_features_map=n_landmarks, alpha=lam, max_iter=max_iter, tol=0.0,
                           cache_bytes=0, random_state=0, callback=cb)
        est.fit(ds)
        total = time.perf_counter() - t0
    iters = []
    prev_t, prev_p = t0, 0
    # passes before the first iteration's gradient pass are setup
    first_grad = next(i for i, (name, _) in enumerate(clock.times) if name == "grad_block")
    prev_t, prev_p = clock.times[first_grad - 1][1] if first_grad else t0, first_grad
    setup = {"passes_kernelmaxide": first_grad, "seconds": prev_t - t0,
             "engine_passes_outside_apg": est.n_passes_ - len(clock.times)}
    for it, t, obj, npass in its:
        iters.append({"iteration": it, "seconds": t - prev_t, "passes": npass - prev_p,
                      "objective": obj})
        prev_t, prev_p = t, npass
    setup["graph_bytes_per_pass"] = graph_summary(graphs)
    return est, iters, setup, total, peak


def _warm_worker():
    """Compile the kernels the passes use inside the worker process (first call JIT)."""
    import numpy as np
    import scipy.sparse as sp

    from ooc_lowrank.kernelmaxide import KernelMaxide

    rng = np.random.default_rng(0)
    X = rng.standard_normal((64, 4)).astype(np.float32)
    Y = sp.csr_matrix(np.where(rng.random((64, 3)) < 0.5, 1.0, -1.0))
    KernelMaxide(n_features_map=8, max_iter=2, random_state=0).fit(X, Y)
    return True


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--small", action="store_true", help="20k x 20, 10 labels, 50 landmarks")
    p.add_argument("--rows", type=int, default=None, help="default 2,000,000")
    p.add_argument("--features", type=int, default=None, help="default 500")
    p.add_argument("--labels", type=int, default=None, help="default 100")
    p.add_argument("--omega", type=float, default=30.0)
    p.add_argument("--landmarks", type=int, default=None, help="default 1000")
    p.add_argument("--lam", type=float, default=2.0)
    p.add_argument("--max-iter", type=int, default=4)
    p.add_argument("--threads", type=int, default=1, help="threads of the worker")
    p.add_argument("--limit-mb", type=float, default=None,
                   help="worker memory limit (default: a quarter of the store's logical size)")
    p.add_argument("--workdir", default=None, help="keeps the store there for reruns")
    p.add_argument("--out", default=DEFAULT_OUT)
    p.add_argument("--quiet", action="store_true")
    a = p.parse_args(argv)
    log = (lambda *x: None) if a.quiet else (lambda *x: print(*x, flush=True))
    small = dict(n=20_000, d=20, L=10, r=50) if a.small else dict(n=2_000_000, d=500, L=100, r=1000)
    n = a.rows or small["n"]
    d = a.features or small["d"]
    L = a.labels or small["L"]
    r = a.landmarks or small["r"]
    workdir = a.workdir or tempfile.mkdtemp(prefix="bench-km-")
    os.makedirs(workdir, exist_ok=True)
    from ooc_lowrank.storage import open_dataset

    out = {"benchmark": "kernelmaxide_ooc", "small": a.small, "loadavg_before": os.getloadavg()}
    try:
        url = ensure_store(workdir, n, d, L, a.omega, log)
        ds = open_dataset(url)
        store = rss.logical_bytes(ds, ("X", "Y_obs"))
        # a worker needs ~300 MB whatever the store: the small run is a smoke test
        limit = a.limit_mb * 2**20 if a.limit_mb else max(store / 4, 600 * 2**20 if a.small else 0)
        warm = (ds["X"].read(0, 500), ds["Y_obs"].read(0, 500))
        est, iters, setup, total, peak = run_fit(
            ds, n_landmarks=r, lam=a.lam, max_iter=a.max_iter, limit=limit, threads=a.threads,
            warm=warm,
        )
        steady = iters[1:] or iters
        out.update({
            "n": n, "d": d, "labels": L, "omega": a.omega, "n_landmarks": r, "lam": a.lam,
            "observed_entries": int(ds["Y_obs"].nnz), "block_rows": ds.block_rows,
            "n_blocks": -(-n // ds.block_rows),
            "store_logical_bytes": store, "store_disk_bytes": rss.dir_bytes(url),
            "worker_memory_limit": int(limit), "worker_threads": a.threads,
            "store_over_limit": store / limit,
            "peak_worker_rss": peak["worker"], "peak_rss_over_limit": peak["worker"] / limit,
            "driver_peak_rss": rss.driver_maxrss(),
            "setup": setup, "iterations": iters,
            "seconds_per_iteration_steady": float(np.mean([i["seconds"] for i in steady])),
            "passes_per_iteration_steady": float(np.mean([i["passes"] for i in steady])),
            "seconds_per_pass_steady": float(
                sum(i["seconds"] for i in steady) / max(sum(i["passes"] for i in steady), 1)
            ),
            "seconds_fit_total": total, "n_passes_fit": est.n_passes_,
            "trials_per_pass": "2 (streamed F default)",
        })
        log(
            f"KernelMaxide-n r={r} on {n} x {d}, {L} labels, {a.omega:g}% observed: "
            f"store {store / 2**20:.0f} MiB, worker limit {limit / 2**20:.0f} MiB, "
            f"peak worker RSS {peak['worker'] / 2**20:.0f} MiB; setup {setup['seconds']:.1f}s; "
            + "; ".join(f"it {i['iteration']}: {i['seconds']:.1f}s {i['passes']} passes"
                        for i in iters)
        )
    finally:
        if not a.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    return rss.write_results(out, a.out)


if __name__ == "__main__":
    main()
    sys.exit(0)
