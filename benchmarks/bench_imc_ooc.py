"""GIMC semi-supervised clustering out of core (issue 11): a generated problem in one store.

Store (``--rows`` n, default 1M; written here with the ``DatasetWriter``, seeded per chunk):

* ``X`` (n, ``--d``) float64: ``--clusters`` Gaussian blobs (centres N(0, 4 I), unit noise);
* ``y`` (n, 1): the blob of each row (only to score the result);
* ``obs`` (n, n) coo: ``--pairs`` x n constraints, ``--pairs`` random partners per row,
  value 1 if both rows share a blob else 0.

``GIMCClustering`` (GIMC-LFF, ``m = --m``, rank = clusters, ``--iters`` outer iterations of
``--cg-iter`` CG steps) is fitted on the store inside one spawned Dask worker whose memory limit
is a quarter of the store's logical size (``_worker_rss``; the driver keeps the n x k factors
P and Q, the worker streams the feature and constraint blocks).  With ``--alpha auto`` (the
default) the fit is several IMC fits: one per selection candidate on 80 % of the constraints
(held in memory, scattered to the worker block by block and kept there within the engine's
scatter budget, ``scatter_budget_bytes``: a quarter of the worker limit), then the refit.
Recorded: per fit phase (``fit_phases``: each candidate, then the refit) its start-up seconds,
its iterations' seconds and the worker's RSS peak during it; ``iterations`` is the refit's;
passes, the worker's peak RSS and the clustering error, and
the serialized bytes of every graph sent to the cluster (one per pass; a graph above Dask's
large-graph threshold of 10 MB is an error, issue 27).

    nice -n 10 python benchmarks/bench_imc_ooc.py      # 1M rows x 500 features, 20n constraints (4 GB)
    # results/imc_ooc_1m.json: 1M rows x 10 features, a 1 GiB worker
    nice -n 10 python benchmarks/bench_imc_ooc.py --rows 1000000 --d 10 --m 50 --iters 2 \
        --block-rows 100000 --min-limit-mib 1024 --out benchmarks/results/imc_ooc_1m.json
    python benchmarks/bench_imc_ooc.py --rows 20000 --iters 1 --quiet --out /tmp/x.json
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

import numpy as np
import scipy.sparse as sp

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from benchmarks import _worker_rss as rss  # noqa: E402
from benchmarks.bench_cluster_scaling import graph_bytes, graph_summary  # noqa: E402

DEFAULT_OUT = os.path.join(HERE, "results", "imc_ooc.json")


def make_store(url, n, d, k, pairs, block_rows, seed=0):
    """Write the store chunk by chunk; the labels of all rows are drawn first (n int8)."""
    from ooc_lowrank.storage import DatasetWriter

    rng = np.random.default_rng([seed, 0])
    centres = 2.0 * rng.standard_normal((k, d))
    y = rng.integers(0, k, n).astype(np.int8)
    with DatasetWriter(url, block_rows=block_rows, overwrite=True,
                       attrs={"generator": "benchmarks/bench_imc_ooc.py", "seed": seed}) as w:
        w.add_dense("X", n_cols=d, dtype="float64")
        w.add_dense("y", n_cols=1, dtype="float64")
        w.add_coo("obs", n_cols=n, dtype="float64")
        for c, s in enumerate(range(0, n, block_rows)):
            e = min(s + block_rows, n)
            r = np.random.default_rng([seed, c + 1])
            yb = y[s:e]
            Xb = centres[yb] + r.standard_normal((e - s, d))
            cols = np.sort(r.integers(0, n, (e - s, pairs)), axis=1)
            vals = (y[cols] == yb[:, None]).astype(np.float64)
            obs = sp.csr_matrix((vals.ravel(), cols.ravel(), pairs * np.arange(e - s + 1)),
                                shape=(e - s, n))
            w.append(X=Xb, y=yb[:, None].astype(np.float64), obs=obs)


def fit_phases(ticks, est):
    """The callback's ticks ``(phase, iteration, elapsed, objective, worker RSS peak)`` as one
    record per IMC fit: the selection fits (``alpha="auto"``: one per candidate, in the grid's
    order) and the final fit, each with its start-up seconds (feature maps, initialization: up
    to its first iteration), its iterations' seconds and the worker's RSS peak during it."""
    names = [f"selection alpha={lam:g}" for lam in (est.alpha_scores_ or {})] + ["fit"]
    out = []
    for ph in sorted({t[0] for t in ticks}):
        mine = [t for t in ticks if t[0] == ph]
        out.append({
            "phase": names[ph] if ph < len(names) - 1 else f"fit alpha={est.alpha_:g}",
            "init_seconds": mine[0][2],
            "iterations": [{"iteration": b[1], "seconds": b[2] - p[2], "objective": b[3]}
                           for p, b in zip(mine[:-1], mine[1:], strict=True)],
            "peak_worker_rss": max(t[4] for t in mine),
        })  # fmt: skip
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--d", type=int, default=500)
    p.add_argument("--clusters", type=int, default=5)
    p.add_argument("--pairs", type=int, default=20, help="constraints per row (|Omega| / n)")
    p.add_argument("--m", type=int, default=50)
    p.add_argument("--iters", type=int, default=2)
    p.add_argument("--alpha", default="auto",
                   help='GIMCClustering alpha: "auto" (the default: selection fits, then the '
                   "refit) or a number")
    p.add_argument("--cg-iter", type=int, default=5)
    p.add_argument("--block-rows", type=int, default=25_000)
    p.add_argument("--limit-fraction", type=float, default=0.25)
    p.add_argument("--min-limit-mib", type=float, default=0,
                   help="floor of the worker limit (a worker process alone takes ~150 MiB, more "
                   "than a quarter of a small store)")
    p.add_argument("--threads", type=int, default=1, help="threads of the worker")
    p.add_argument("--workdir", default=None)
    p.add_argument("--out", default=DEFAULT_OUT)
    p.add_argument("--quiet", action="store_true")
    a = p.parse_args(argv)
    a.alpha = a.alpha if a.alpha == "auto" else float(a.alpha)
    log = (lambda *x: None) if a.quiet else (lambda *x: print(*x, flush=True))
    from ooc_lowrank.imc import GIMCClustering, clustering_error
    from ooc_lowrank.storage import open_dataset

    work = a.workdir or tempfile.mkdtemp(prefix="imc-ooc-")
    url = os.path.join(work, f"imc-clustering-{a.rows}.zarr")
    block_rows = min(a.block_rows, max(a.rows // 4, 1))
    t = time.perf_counter()
    make_store(url, a.rows, a.d, a.clusters, a.pairs, block_rows)
    ds = open_dataset(url)
    logical = rss.logical_bytes(ds)
    log(f"generated {url} ({logical / 2**20:.0f} MiB logical) in {time.perf_counter() - t:.1f}s")
    limit = int(max(a.limit_fraction * logical, a.min_limit_mib * 2**20))
    ticks = []  # (fit phase, iteration, elapsed in the phase's fit, objective, worker RSS peak)
    peak = {}

    def tick(it, el, f):
        # each IMC fit (alpha="auto": one per candidate, then the refit) counts its iterations
        # from 1: a counter that does not grow starts the next fit phase
        phase = ticks[-1][0] + (it <= ticks[-1][1]) if ticks else 0
        ticks.append((phase, it, el, f, peak.get("phase", 0)))
        peak["phase"] = 0

    est = GIMCClustering(n_clusters=a.clusters, n_features_map=a.m, max_iter=a.iters,
                         cg_iter=a.cg_iter, tol=0.0, n_init=3, random_state=0, alpha=a.alpha,
                         callback=tick)  # fmt: skip
    load_before = os.getloadavg()
    t0 = time.perf_counter()
    with rss.limited_worker(limit, threads=a.threads) as (_client, peak_), \
            graph_bytes() as graphs:  # fmt: skip
        peak = peak_
        from ooc_lowrank import engine

        budget = engine.scatter_budget()  # what the engine may keep scattered per worker
        est.fit(ds, constraints=ds)
    total = time.perf_counter() - t0
    y = ds["y"].read()[:, 0]
    phases = fit_phases(ticks, est)
    its = phases[-1]["iterations"] if phases else []
    res = {
        "benchmark": "imc_ooc",
        "settings": vars(a) | {"block_rows": block_rows},
        "rows": a.rows, "constraints": a.rows * a.pairs,
        "store_logical_bytes": logical, "worker_limit_bytes": limit,
        "quarter_of_store_bytes": logical // 4, "scatter_budget_bytes": budget,
        "peak_worker_rss": peak["worker"], "worker_baseline_rss": peak.get("baseline"),
        "driver_maxrss": rss.driver_maxrss(),
        "init_seconds": phases[-1]["init_seconds"] if phases else None,
        # the final fit's iterations (alpha="auto": the refit); every fit in "fit_phases"
        "iterations": its, "fit_phases": phases, "alpha": float(est.alpha_),
        "selection_seconds": est.selection_time_, "selection_passes": est.selection_passes_,
        "n_passes": int(est.imc_.n_passes_),
        "graph_bytes_per_pass": graph_summary(graphs),
        "fit_seconds_total": total,
        "clustering_error": float(clustering_error(est.labels_, y)),
        "loadavg_before": load_before,
    }
    for ph in phases:
        log(f"{ph['phase']}: init {ph['init_seconds']:.1f}s, "
            + ", ".join(f"iteration {i['iteration']} {i['seconds']:.1f}s" for i in ph["iterations"])
            + f"; worker peak {ph['peak_worker_rss'] / 2**20:.0f} MiB")  # fmt: skip
    log(f"{a.rows} rows, {a.rows * a.pairs} constraints: alpha {est.alpha_} "
        f"(selection {est.selection_time_:.0f}s); refit "
        + ", ".join(f"iteration {i['iteration']} {i['seconds']:.1f}s" for i in its)
        + f"; {res['n_passes']} passes, graphs {res['graph_bytes_per_pass']}; worker peak {peak['worker'] / 2**20:.0f} MiB of "
        f"{limit / 2**20:.0f} MiB limit (baseline {peak.get('baseline', 0) / 2**20:.0f} MiB); error {res['clustering_error']:.4f}; "
        f"total {total:.0f}s (load {os.getloadavg()[0]:.1f})")
    rss.write_results(res, a.out)
    if a.workdir is None:
        shutil.rmtree(work, ignore_errors=True)
    return res


if __name__ == "__main__":
    main()
