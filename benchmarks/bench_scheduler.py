"""Scheduler cost of one engine pass on a dask.distributed cluster (issue 27's scaling model).

A pass of the engine is one ``map_blocks`` over the row blocks plus a tree (or chain) reduction.
This measures, on a LocalCluster of worker processes, the wall time of a pass whose block
function does no work (so the time is the scheduler's and the transport's), at 100 / 1,000 /
10,000 blocks, and the serialized graph bytes; then the time of a GIMC-sized block (m = 500)
on one thread, so that the block size keeping the overhead under 5 % of a pass can be read off.

``python -m benchmarks.bench_scheduler [--blocks 100,1000,10000] [--workers 2] [--out PATH]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np


def _noop(Xb):
    return np.zeros(4)


def _gimc_like(Xb, U):
    Z = Xb @ U
    Phi = np.hstack([np.cos(Z), np.sin(Z)])
    return Phi.T @ Phi


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--blocks", default="100,1000,10000")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)

    import dask
    import distributed

    from ooc_lowrank import engine

    cluster = distributed.LocalCluster(n_workers=a.workers, threads_per_worker=1,
                                       processes=True, dashboard_address=None)  # fmt: skip
    client = distributed.Client(cluster)
    res = {"workers": a.workers, "threads_per_worker": 1, "passes": []}
    try:
        with dask.config.set(scheduler=client):
            for nb in [int(x) for x in a.blocks.split(",")]:
                X = np.zeros((nb * 4, 4))
                B = engine.as_blocked(X, block_rows=4)
                engine.map_reduce(_noop, B)  # warm-up: scatter, worker imports
                times = []
                for _ in range(a.repeats):
                    t = time.perf_counter()
                    engine.map_reduce(_noop, B)
                    times.append(time.perf_counter() - t)
                s = statistics.median(times)
                res["passes"].append({"blocks": nb, "seconds_per_pass": s,
                                      "ms_per_block": 1e3 * s / nb, "all": times})  # fmt: skip
                print(f"{nb:6d} blocks: {s:.3f} s per empty pass, {1e3 * s / nb:.3f} ms per block",
                      flush=True)  # fmt: skip
    finally:
        client.close()
        cluster.close()
    # one GIMC-like block on one thread (m = 500 learned frequencies, D = 1000 features)
    from threadpoolctl import threadpool_limits

    rng = np.random.default_rng(0)
    U = rng.standard_normal((100, 500)).astype(np.float32)
    blocks = {}
    with threadpool_limits(1, user_api="blas"):
        for rows in (1024, 4096, 16384, 65536):
            Xb = rng.standard_normal((rows, 100)).astype(np.float32)
            _gimc_like(Xb, U)
            t = time.perf_counter()
            for _ in range(3):
                _gimc_like(Xb, U)
            blocks[rows] = (time.perf_counter() - t) / 3
            print(f"GIMC-like block of {rows} rows x 100 (m = 500): {blocks[rows] * 1e3:.1f} ms")
    res["gimc_block_seconds"] = blocks
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)
    return res


if __name__ == "__main__":
    main()
