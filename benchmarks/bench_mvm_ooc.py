"""Multi-view machines out of core (issue 10): a generated store with three sparse views.

Store (``--rows``, default 10M; written here with the ``DatasetWriter``, seeded per chunk):

* ``X0`` "user": one-hot id among 100,000 + one-hot age bucket among 10 (2 non-zeros);
* ``X1`` "item": one-hot id among 20,000 + two genres among 20 (3 non-zeros);
* ``X2`` "text": 20 distinct words among 10,000, value ``1/sqrt(20)`` (20 non-zeros);
* ``y``: a rank-4 multi-view machine (MVM-9) of the three views + N(0, 0.1^2) noise.

Measured in one run:

1. ``sgd``: the Numba kernel ``kernels.mvm.sgd_block`` over one epoch of every block (rows
   shuffled per block, AdaGrad, l2), timing the kernel calls only: samples / second / core (the
   kernel is sequential: one core).  Peers on the same blocks, same run:
   ``numpy_rowwise`` -- the same epoch in plain NumPy, one row at a time, vectorized over the
   row's non-zeros and the factors (the same updates: checked against the kernel on the rows it
   runs, ``--numpy-rows`` of them, it is too slow for a whole epoch); ``numpy_block`` -- NumPy
   vectorized per block (every row of a block at once through sparse products, one AdaGrad
   step per block: the fastest pure-NumPy epoch over the same data, a mini-batch variant, not
   the same updates).  Also one SGD epoch of the estimator end to end (reading included).
2. ``lbfgs``: ``MultiViewMachineRegressor(solver="lbfgs")`` for ``--lbfgs-iter`` iterations
   inside one spawned Dask worker whose memory limit is a quarter of the store's logical size:
   seconds per evaluation (one engine pass: loss + gradient summed over blocks) and the
   worker's peak RSS.

    nice -n 10 python benchmarks/bench_mvm_ooc.py                 # 10M rows
    python benchmarks/bench_mvm_ooc.py --small                    # seconds
"""

from __future__ import annotations

import argparse
import contextlib
import math
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

DEFAULT_OUT = os.path.join(HERE, "results", "mvm_ooc.json")
#: (ids, extra one-hot groups) per view; text view handled apart
USERS, AGES, ITEMS, GENRES, WORDS, WORDS_PER_ROW = 100_000, 10, 20_000, 20, 10_000, 20
RANK = 4


def view_dims(small):
    s = 100 if small else 1
    return (USERS // s + AGES, ITEMS // s + GENRES, WORDS // s)


def _true_factors(dims, seed):
    rng = np.random.default_rng([seed, 999])
    nnz = (2, 3, WORDS_PER_ROW)
    th = []
    for p, (ip, z) in enumerate(zip(dims, nnz, strict=True)):
        t = rng.standard_normal((ip + 1, RANK))
        t[:-1] *= math.sqrt(1.0 / z) if p < 2 else 1.0  # unit-variance sums per view
        if p == 0:
            t /= math.sqrt(RANK)
        th.append(t)
    return th


def make_chunk(rng, m, dims, thetas):
    """Three CSR views and the target of ``m`` rows."""
    n_u, n_i, n_w = dims[0] - AGES, dims[1] - GENRES, dims[2]
    u = rng.integers(0, n_u, m)
    a = n_u + rng.integers(0, AGES, m)
    X0 = sp.csr_matrix((np.ones(2 * m, np.float32), np.c_[u, a].ravel(), 2 * np.arange(m + 1)),
                       shape=(m, dims[0]))
    it = rng.integers(0, n_i, m)
    g1 = n_i + rng.integers(0, GENRES // 2, m)
    g2 = n_i + GENRES // 2 + rng.integers(0, GENRES // 2, m)
    X1 = sp.csr_matrix((np.ones(3 * m, np.float32), np.c_[it, g1, g2].ravel(),
                        3 * np.arange(m + 1)), shape=(m, dims[1]))
    binw = n_w // WORDS_PER_ROW  # one word per bin: distinct and sorted
    cols = (np.arange(WORDS_PER_ROW) * binw)[None, :] + rng.integers(0, binw, (m, WORDS_PER_ROW))
    X2 = sp.csr_matrix((np.full(m * WORDS_PER_ROW, 1 / math.sqrt(WORDS_PER_ROW), np.float32),
                        cols.ravel(), WORDS_PER_ROW * np.arange(m + 1)), shape=(m, dims[2]))
    prod = np.ones((m, RANK))
    for X, t in zip((X0, X1, X2), thetas, strict=True):
        prod *= X @ t[:-1] + t[-1]
    y = prod.sum(axis=1) + 0.1 * rng.standard_normal(m)
    return X0, X1, X2, y[:, None]


def ensure_store(workdir, n, small, log, block_rows=100_000, seed=0):
    from ooc_lowrank.storage import DatasetWriter

    url = os.path.join(workdir, f"mvm-sparse-{n}{'-small' if small else ''}.zarr")
    if os.path.exists(url):
        return url
    dims = view_dims(small)
    thetas = _true_factors(dims, seed)
    block_rows = min(block_rows, max(n // 4, 1))
    t = time.perf_counter()
    with DatasetWriter(url, block_rows=block_rows, overwrite=True,
                       attrs={"generator": "benchmarks/bench_mvm_ooc.py", "seed": seed}) as w:
        for p, ip in enumerate(dims):
            w.add_csr(f"X{p}", n_cols=ip, dtype="float32")
        w.add_dense("y", n_cols=1, dtype="float64")
        for c, s in enumerate(range(0, n, block_rows)):
            m = min(block_rows, n - s)
            X0, X1, X2, y = make_chunk(np.random.default_rng([seed, c]), m, dims, thetas)
            w.append(X0=X0, X1=X1, X2=X2, y=y)
    log(f"generated {url} in {time.perf_counter() - t:.1f}s")
    return url



# ---------------------------------------------------------------------------------------------
# NumPy peers
# ---------------------------------------------------------------------------------------------


def numpy_sgd_rows(M, y, order, theta, accum, col_view, n_feat, n_views, eta, reg_weight, b0):
    """The kernel's epoch (square loss, l2, intercept) in NumPy, one row at a time."""
    for i in order:
        a, b = M.indptr[i], M.indptr[i + 1]
        c, x = M.indices[a:b], M.data[a:b]
        v = col_view[c]
        s = theta[n_feat:n_feat + n_views].copy()
        np.add.at(s, v, x[:, None] * theta[c])
        pre = np.cumprod(np.vstack([np.ones((1, s.shape[1])), s[:-1]]), axis=0)
        suf = np.vstack([np.cumprod(s[::-1], axis=0)[::-1][1:], np.ones((1, s.shape[1]))])
        g = pre * suf
        yhat = float((pre[-1] * s[-1]).sum()) + b0[0]
        dl = 2.0 * (yhat - y[i])
        if dl != 0.0:
            b0[1] += dl * dl
            b0[0] -= eta * dl / (math.sqrt(b0[1]) + 1e-12)
        rb = np.arange(n_feat, n_feat + n_views)
        for r, gr_model in ((rb, dl * g), (c, (dl * x)[:, None] * g[v])):
            th = theta[r]
            gr = gr_model + reg_weight * 2.0 * th
            nz = gr != 0.0
            acc = accum[r] + np.where(nz, gr * gr, 0.0)
            theta[r] = np.where(nz, th - eta * gr / (np.sqrt(acc) + 1e-12), th)
            accum[r] = acc
    return theta


def numpy_block_step(views, y, theta, accum, offs, n_feat, eta, reg_weight):
    """One vectorized AdaGrad step for a whole block (mini-batch of every row)."""
    S = [X @ theta[offs[p]:offs[p + 1]] + theta[n_feat + p] for p, X in enumerate(views)]
    S = np.stack(S)  # (m, rows, k)
    pre = np.concatenate([np.ones_like(S[:1]), np.cumprod(S[:-1], axis=0)])
    suf = np.concatenate([np.cumprod(S[::-1], axis=0)[::-1][1:], np.ones_like(S[:1])])
    G = pre * suf
    yhat = (pre[-1] * S[-1]).sum(axis=1)
    dl = 2.0 * (yhat - y) / y.shape[0]
    grad = np.zeros_like(theta)
    for p, X in enumerate(views):
        W = dl[:, None] * G[p]
        grad[offs[p]:offs[p + 1]] = X.T @ W
        grad[n_feat + p] = W.sum(axis=0)
    grad += reg_weight * 2.0 * theta * (grad != 0.0)
    accum += grad * grad
    theta -= eta * grad / (np.sqrt(accum) + 1e-12)
    return float(((yhat - y) ** 2).sum())


# ---------------------------------------------------------------------------------------------
# parts
# ---------------------------------------------------------------------------------------------


@contextlib.contextmanager
def _clock(wall, cpu, key):
    """Add the wall and this thread's CPU seconds of the block to ``wall[key]``, ``cpu[key]``."""
    w, c = time.perf_counter(), time.thread_time()
    yield
    wall[key] = wall.get(key, 0.0) + time.perf_counter() - w
    cpu[key] = cpu.get(key, 0.0) + time.thread_time() - c


def bench_sgd(ds, k, numpy_rows, log, eta=0.05, reg_weight=3e-3):
    from ooc_lowrank.kernels import mvm as K

    from ooc_lowrank.mvm import _blocks

    dims = [ds[f"X{p}"].shape[1] for p in range(3)]
    n_feat, n_views = sum(dims), 3
    offs = np.r_[0, np.cumsum(dims)]
    col_view = np.repeat(np.arange(3), dims).astype(np.int64)
    rng = np.random.default_rng(0)
    theta0 = rng.normal(0, 0.1, (n_feat + n_views, k))
    n, B = ds.n_rows, ds.block_rows
    bounds = list(range(0, n, B)) + [n]

    def blocks():
        for s, e in zip(bounds[:-1], bounds[1:], strict=True):
            views = [ds[f"X{p}"].read(s, e) for p in range(3)]
            yb = np.asarray(ds["y"].read(s, e), np.float64).ravel()
            yield views, _blocks.joined_csr(views), yb

    def kernel(M, yb, order, theta, accum, b0):
        return K.sgd_block(M.indptr, M.indices, M.data, yb, order, theta, accum, col_view,
                           n_feat, n_views, K.SQUARE, eta, 1, reg_weight, 1e-8, 1.0, b0)

    # warm-up (JIT) on a few rows, then the epoch
    first_views, M0, y0 = next(blocks())
    kernel(M0, y0, np.arange(10, dtype=np.int64), theta0.copy(), np.zeros_like(theta0),
           np.zeros(2))
    theta, accum, b0 = theta0.copy(), np.zeros_like(theta0), np.zeros(2)
    wall = {"kernel": 0.0, "block": 0.0}
    cpu = {"kernel": 0.0, "block": 0.0}
    th_b, acc_b = theta0.copy(), np.zeros_like(theta0)
    t_all = time.perf_counter()
    nnz = 0
    for views, M, yb in blocks():
        order = rng.permutation(M.shape[0]).astype(np.int64)
        with _clock(wall, cpu, "kernel"):
            kernel(M, yb, order, theta, accum, b0)
        with _clock(wall, cpu, "block"):
            numpy_block_step(views, yb, th_b, acc_b, offs, n_feat, eta, reg_weight)
        nnz += M.nnz
    t_all = time.perf_counter() - t_all
    # NumPy row-by-row on the first rows of the first block, against the kernel on the same rows
    m = min(numpy_rows, M0.shape[0])
    order = np.random.default_rng(1).permutation(M0.shape[0])[:m].astype(np.int64)
    th_k, acc_k, b_k = theta0.copy(), np.zeros_like(theta0), np.zeros(2)
    with _clock(wall, cpu, "kernel_sub"):
        kernel(M0, y0, order, th_k, acc_k, b_k)
    th_n, acc_n, b_n = theta0.copy(), np.zeros_like(theta0), np.zeros(2)
    with _clock(wall, cpu, "rowwise"):
        numpy_sgd_rows(M0, y0, order, th_n, acc_n, col_view, n_feat, n_views, eta, reg_weight,
                       b_n)
    agree = float(np.abs(th_k - th_n).max())
    res = {
        "rows": n, "nnz": nnz, "n_factors": k, "view_dims": dims, "block_rows": B,
        "seconds_wall": wall, "seconds_cpu": cpu,
        # per core = per CPU-second of the (sequential) calling thread: robust to machine load
        "kernel_samples_per_s_per_core": n / cpu["kernel"],
        "kernel_samples_per_s_wall": n / wall["kernel"],
        "epoch_seconds_with_reading_and_peers": t_all,
        "numpy_block_samples_per_s_per_core": n / cpu["block"],
        "kernel_over_numpy_block": cpu["block"] / cpu["kernel"],
        "numpy_rowwise_rows": m,
        "numpy_rowwise_samples_per_s_per_core": m / cpu["rowwise"],
        "kernel_samples_per_s_per_core_same_rows": m / cpu["kernel_sub"],
        "kernel_over_numpy_rowwise": cpu["rowwise"] / cpu["kernel_sub"],
        "numpy_rowwise_max_abs_diff_vs_kernel": agree,
    }
    log(f"[sgd] kernel {res['kernel_samples_per_s_per_core']:.3g} samples/s/core over {n} rows "
        f"({cpu['kernel']:.1f} s CPU, {wall['kernel']:.1f} s wall); numpy per block "
        f"{res['numpy_block_samples_per_s_per_core']:.3g}/s/core "
        f"(kernel x{res['kernel_over_numpy_block']:.2f}); numpy per row "
        f"{res['numpy_rowwise_samples_per_s_per_core']:.3g}/s/core on {m} rows (kernel "
        f"x{res['kernel_over_numpy_rowwise']:.0f}; max |diff| {agree:.1e})")
    return res


def bench_estimator_epoch(ds, k, log):
    from ooc_lowrank.mvm import MultiViewMachineRegressor

    est = MultiViewMachineRegressor(n_components=k, solver="sgd", n_epochs=1, random_state=0)
    t, c = time.perf_counter(), time.process_time()
    est.fit(ds)
    s, cs = time.perf_counter() - t, time.process_time() - c
    res = {"seconds": s, "cpu_seconds": cs, "samples_per_s": ds.n_rows / s,
           "samples_per_cpu_s": ds.n_rows / cs, "passes": est.n_passes_}
    log(f"[sgd estimator] 1 epoch end to end {s:.1f}s ({res['samples_per_s']:.3g} samples/s)")
    return res


def bench_lbfgs(ds, k, max_iter, limit, log, threads=1):
    from ooc_lowrank import engine
    from ooc_lowrank.mvm import MultiViewMachineRegressor

    calls = []
    orig = engine.map_reduce

    def timed(*a, **kw):
        t = time.perf_counter()
        out = orig(*a, **kw)
        calls.append(time.perf_counter() - t)
        return out

    engine.map_reduce = timed
    try:
        with rss.limited_worker(limit, threads=threads) as (client, peak):
            c0 = sum(client.run(time.process_time).values())
            t = time.perf_counter()
            est = MultiViewMachineRegressor(n_components=k, solver="lbfgs", max_iter=max_iter,
                                            random_state=0).fit(ds)
            total = time.perf_counter() - t
            worker_cpu = sum(client.run(time.process_time).values()) - c0
    finally:
        engine.map_reduce = orig
    evals = calls[-(est.n_passes_ - 1):] if est.n_passes_ > 1 else calls
    res = {
        "max_iter": max_iter, "n_iter": est.n_iter_, "passes": est.n_passes_,
        "evaluations": len(evals), "seconds_per_evaluation": float(np.mean(evals)),
        "seconds_per_evaluation_all": evals, "seconds_fit_total": total,
        "worker_cpu_seconds_fit": worker_cpu,
        "worker_cpu_seconds_per_pass": worker_cpu / est.n_passes_,
        "worker_memory_limit": int(limit), "worker_threads": threads,
        "peak_worker_rss": peak["worker"], "peak_rss_over_limit": peak["worker"] / limit,
    }
    log(f"[lbfgs] {res['seconds_per_evaluation']:.1f}s per evaluation ({len(evals)} evaluations),"
        f" worker limit {limit / 2**20:.0f} MiB, peak worker RSS {peak['worker'] / 2**20:.0f} MiB")
    return res


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--small", action="store_true", help="20k rows, views 100x smaller")
    p.add_argument("--rows", type=int, default=None, help="default 10,000,000 (20,000 small)")
    p.add_argument("--n-factors", type=int, default=8)
    p.add_argument("--numpy-rows", type=int, default=20_000)
    p.add_argument("--lbfgs-iter", type=int, default=3)
    p.add_argument("--threads", type=int, default=1, help="threads of the worker")
    p.add_argument("--only", nargs="+", default=["sgd", "sgd_estimator", "lbfgs"])
    p.add_argument("--limit-mb", type=float, default=None)
    p.add_argument("--workdir", default=None, help="keeps the store there for reruns")
    p.add_argument("--out", default=DEFAULT_OUT)
    p.add_argument("--quiet", action="store_true")
    a = p.parse_args(argv)
    log = (lambda *x: None) if a.quiet else (lambda *x: print(*x, flush=True))
    n = a.rows or (20_000 if a.small else 10_000_000)
    workdir = a.workdir or tempfile.mkdtemp(prefix="bench-mvm-")
    os.makedirs(workdir, exist_ok=True)
    from ooc_lowrank.storage import open_dataset

    out = {"benchmark": "mvm_ooc", "small": a.small, "loadavg_before": os.getloadavg()}
    try:
        url = ensure_store(workdir, n, a.small, log)
        ds = open_dataset(url)
        store = rss.logical_bytes(ds)
        limit = a.limit_mb * 2**20 if a.limit_mb else max(store / 4, 600 * 2**20 if a.small else 0)
        out.update({"rows": n, "store_logical_bytes": store, "store_disk_bytes": rss.dir_bytes(url),
                    "nnz_per_row": [2, 3, WORDS_PER_ROW], "view_dims": list(view_dims(a.small)),
                    "true_rank": RANK})
        if "sgd" in a.only:
            out["sgd"] = bench_sgd(ds, a.n_factors, a.numpy_rows, log)
        if "sgd_estimator" in a.only:
            out["sgd_estimator"] = bench_estimator_epoch(ds, a.n_factors, log)
        if "lbfgs" in a.only:
            out["lbfgs"] = bench_lbfgs(ds, a.n_factors, a.lbfgs_iter, limit, log, a.threads)
            out["lbfgs"]["store_over_limit"] = store / limit
        out["driver_peak_rss"] = rss.driver_maxrss()
    finally:
        if not a.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    return rss.write_results(out, a.out)


if __name__ == "__main__":
    main()
    sys.exit(0)
