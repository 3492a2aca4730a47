"""GIMC benchmarks (issue 3), each figure a ratio to a peer measured in the same run.

1. ``iteration``: one GIMC-LFF iteration on a generated dense store (default 1M x 500 float32,
   m = 500, L = 1000 sparse labels): seconds per iteration, passes over the data, achieved
   GFLOP/s (flop model below) and the float32 BLAS peak measured in the same run, before and
   after the fit: the best of several shapes (4096^3, 8000 x 1000 x 1000 and the fit's own block
   shapes X_b U, syrk of Phi_b, Phi_b W W^T, each reported) with every core in BLAS, whatever
   thread limit the caller set (threads before / during are recorded); the ratio achieved / peak
   is the figure.
1a. ``breakdown``: seconds of each stage of one row block (16,384 x 500, m = 500, L = 1000; one
   BLAS thread, as a Dask task runs): products, sin/cos, syrk, label products, accumulation.
1b. ``passes``: passes per iteration over 20 iterations (the first included), the objective
   path and the task count of every pass's graph, resident and streamed (the regression guard
   of tests/test_benchmarks_tiny.py runs it small).
2. ``vs_sklearn``: IMC-RFF (``GIMC(learn_features=False)``) against scikit-learn
   ``RBFSampler(n_components=2m) + Ridge`` on the same in-memory data at the same feature
   dimension ``2m``: time ratio, and P@1/3/5 of both.
3. ``out_of_core``: peak RSS of a fit whose store is >= 4x the memory limit of its single Dask
   worker (``LocalCluster``, streaming: ``cache_bytes=0``).  The limit is set from the store
   size (``store_bytes / 4.05``); ``--oc-rows`` sizes the store, so a larger ``--oc-m`` (whose
   per-block statistics need more worker memory) gets a larger store, never a looser ratio.
   A worker killed by its nanny ends the run with that message instead of a hang.

Flop model of one iteration (n rows, d features, m projections, D = 2m, nnz(A) label entries,
T trial steps per line-search pass): gradient pass ``4ndm + 2nD^2 + 2 nnz(A) D``; each
line-search pass ``4ndm + T (nD(D+1) + 2 nnz(A) D)``.  cos/sin are not counted.

Usage::

    python benchmarks/bench_gimc.py             # full size (writes a 2 GB store; several minutes)
    python benchmarks/bench_gimc.py --small     # seconds; run by tests/test_examples.py
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "results", "gimc.json")


def _blas_info():
    from threadpoolctl import threadpool_info

    return [
        {k: i.get(k) for k in ("internal_api", "num_threads", "version", "architecture")}
        for i in threadpool_info()
        if i.get("user_api") == "blas"
    ]


def blas_peak(shapes=None, repeats=5, threads=None):
    """The best float32 GFLOP/s this machine does, per shape, with every core in BLAS (or
    ``threads`` BLAS threads: the peak of a worker with that many).

    Measured inside ``threadpool_limits(os.cpu_count())``, so a BLAS thread limit left by the
    caller (``OPENBLAS_NUM_THREADS=1``, an enclosing ``threadpool_limits``) cannot lower it; the
    thread counts before and during the measurement are returned.  ``shapes`` are
    ``(name, op, n, k, m)``: ``gemm`` ``(n x k) @ (k x m)`` (2nkm flop) or ``syrk`` the lower
    half of ``P^T P`` for ``P`` of ``n x k`` (``n k (k + 1)`` flop).  Each shape takes the best of
    ``repeats`` runs after one warm-up; ``peak`` is the best over the shapes.
    """
    from scipy.linalg.blas import ssyrk
    from threadpoolctl import threadpool_limits

    if shapes is None:
        shapes = [
            ("sgemm_4096^3", "gemm", 4096, 4096, 4096),
            ("sgemm_8000x1000x1000", "gemm", 8000, 1000, 1000),
        ]
    rng = np.random.default_rng(0)
    before = _blas_info()
    out = {"blas_before": before, "shapes": {}}
    with threadpool_limits(limits=threads or os.cpu_count() or 1, user_api="blas"):
        out["blas_during"] = _blas_info()
        for name, op, n, k, m in shapes:
            A = rng.standard_normal((n, k), dtype=np.float32)
            if op == "gemm":
                B = rng.standard_normal((k, m), dtype=np.float32)
                run, flop = (lambda: A @ B), 2.0 * n * k * m
            else:
                At = np.asfortranarray(A)
                run, flop = (lambda: ssyrk(1.0, At, trans=1, lower=1)), float(n) * k * (k + 1)
            run()
            best = 0.0
            for _ in range(repeats):
                t = time.perf_counter()
                run()
                best = max(best, flop / (time.perf_counter() - t) / 1e9)
            out["shapes"][name] = {"op": op, "n": n, "k": k, "m": m, "gflops": best}
    out["peak"] = max(v["gflops"] for v in out["shapes"].values())
    out["peak_shape"] = max(out["shapes"], key=lambda s: out["shapes"][s]["gflops"])
    return out


def fit_shapes(n_b, d, m):
    """The BLAS shapes of one GIMC-LFF row block (``n_b`` rows, ``D = 2m``): the projection
    ``X_b U``, the Gram ``Phi_b^T Phi_b`` (syrk) and ``Phi_b (W W^T)``."""
    D = 2 * m
    return [
        (f"block_XU_{n_b}x{d}x{m}", "gemm", n_b, d, m),
        (f"block_syrk_{n_b}x{D}", "syrk", n_b, D, D),
        (f"block_PhiWWt_{n_b}x{D}x{D}", "gemm", n_b, D, D),
    ]


def ensure_store(workdir, n, d, L, log, block_rows=None):
    from ooc_lowrank.generators import generate_multilabel

    tail = "" if block_rows is None else f"-b{block_rows}"
    url = os.path.join(workdir, f"dense-{n}x{d}{tail}.zarr")
    if not os.path.exists(url):
        t = time.perf_counter()
        generate_multilabel(
            url,
            n_rows=n,
            n_features=d,
            n_labels=L,
            labels_per_row=5.0,
            seed=0,
            block_rows=block_rows,
        )
        log(f"generated {url} in {time.perf_counter() - t:.1f}s")
    return url


def iteration_flops(n, d, m, nnzA, T=1):
    """The minimal-pass flop model of one iteration (issue 15): a gradient pass and one
    line-search pass of ``T`` trials (see the module docstring)."""
    D = 2 * m
    return (4 * n * d * m + 2 * n * D * D + 2 * nnzA * D) + (
        4 * n * d * m + T * (n * D * (D + 1) + 2 * nnzA * D)
    )


def steady_seconds(marks):
    """Seconds of each iteration from the callback's elapsed marks, and the figure: one
    iteration's own time, or the median of iterations 2..N."""
    done = sorted(marks)
    per_it = [marks[i] - marks[i - 1] for i in done[1:]]
    it_s = per_it[0] if len(per_it) == 1 else float(np.median(per_it[1:]))
    return per_it, it_s


def bench_iteration(workdir, n, d, m, L, log, iters=1):
    from ooc_lowrank.gimc import GIMC
    from ooc_lowrank.storage import open_dataset

    url = ensure_store(workdir, n, d, L, log)

    ds = open_dataset(url)
    nnzA = int(ds["Y"].nnz)
    shapes = [
        ("sgemm_4096^3", "gemm", 4096, 4096, 4096),
        ("sgemm_8000x1000x1000", "gemm", 8000, 1000, 1000),
    ]
    if n < 100_000:  # --small: a quick reference shape
        shapes = [("sgemm_1024^3", "gemm", 1024, 1024, 1024)]
    shapes += fit_shapes(int(ds.block_rows), d, m)
    peak_before = blas_peak(shapes)
    marks = {}

    def cb(it, elapsed, obj):
        marks[it] = elapsed

    # warm-up on a few rows (JIT compile, thread pools)
    GIMC(n_features_map=8, max_iter=1, random_state=0).fit(
        ds["X"].read(0, 2000), ds["Y"].read(0, 2000)
    )
    g = GIMC(n_features_map=m, max_iter=iters, tol=0.0, random_state=0, callback=cb)
    t = time.perf_counter()
    g.fit(ds)
    total = time.perf_counter() - t
    peak_after = blas_peak(shapes)
    per_it, it_s = steady_seconds(marks)
    passes = (g.n_passes_ - 1) / max(len(per_it), 1)  # per iteration, minus the initial pass
    T = g.n_trials_  # trials per line-search pass (resolved; 1 by default)
    flops = iteration_flops(n, d, m, nnzA, T)
    peak = max(peak_before["peak"], peak_after["peak"])
    res = {
        "n": n,
        "d": d,
        "m": m,
        "L": L,
        "nnz_labels": nnzA,
        "store_gb": n * d * 4 / 1e9,
        "seconds_per_iteration": it_s,
        "iterations": len(per_it),
        "seconds_each_iteration": per_it,
        "steady_state": "median of iterations 2..N" if len(per_it) > 1 else "one iteration",
        "passes_per_iteration": passes,
        "trials_per_pass": T,
        "seconds_init_pass": marks[0],
        "seconds_fit_total": total,
        "gflop_iteration": flops / 1e9,
        "achieved_gflops": flops / it_s / 1e9,
        "blas_peak_gflops": peak,
        "blas_peak_before": peak_before["peak"],
        "blas_peak_after": peak_after["peak"],
        "blas_peak_by_shape": {
            k: max(peak_before["shapes"][k]["gflops"], peak_after["shapes"][k]["gflops"])
            for k in peak_before["shapes"]
        },
        "blas_threads": {
            "before": peak_before["blas_before"],
            "during": peak_before["blas_during"],
        },
        "block_rows": int(ds.block_rows),
        "ratio_to_peak": flops / it_s / 1e9 / peak,
    }
    return res, url


class _GraphCounter:
    """A dask scheduler recording the task count of every graph it runs (one per pass), then
    running it like the engine's default (threads, one BLAS thread per task)."""

    def __init__(self):
        self.sizes = []

    def __call__(self, dsk, keys, **kwargs):
        import dask.threaded

        from ooc_lowrank import engine

        graph = dsk.__dask_graph__() if hasattr(dsk, "__dask_graph__") else dsk
        self.sizes.append(len(graph))
        with engine.one_blas_thread():
            return dask.threaded.get(dsk, keys, num_workers=os.cpu_count() or 1, **kwargs)


def bench_passes(workdir, n, d, m, L, log, iters=20, n_blocks=8):
    """Passes per iteration over ``iters`` iterations (the first included, the initial
    statistics pass counted), the objective path and the task count of every pass's graph, for
    resident and streamed, with the default trials per pass (``n_trials_`` is recorded)."""
    import dask

    from ooc_lowrank.gimc import GIMC
    from ooc_lowrank.storage import open_dataset

    url = ensure_store(workdir, n, d, L, log, block_rows=-(-n // n_blocks))
    ds = open_dataset(url)
    out = {"n": n, "d": d, "m": m, "L": L, "iterations": iters, "blocks": n_blocks}
    for mode in ("resident", "streamed"):
        counter = _GraphCounter()
        g = GIMC(
            n_features_map=m,
            max_iter=iters,
            tol=0.0,
            random_state=0,
            cache_bytes=None if mode == "resident" else 0,
        )
        t = time.perf_counter()
        with dask.config.set(scheduler=counter):
            g.fit(ds)
        secs = time.perf_counter() - t
        sizes = counter.sizes
        out[mode] = {
            "n_iter": g.n_iter_,
            "n_passes": g.n_passes_,
            "passes_per_iteration": g.n_passes_ / max(g.n_iter_, 1),
            "trials_per_pass": g.n_trials_,
            "objective": [float(v) for v in g.objective_],
            "graph_tasks_per_pass": sizes,
            "graph_tasks_first_iteration": sizes[1:3] if len(sizes) >= 3 else sizes,
            "graph_tasks_max": max(sizes) if sizes else 0,
            "seconds": secs,
            "loadavg": os.getloadavg(),
        }
        log(
            f"[passes] {mode}: {g.n_passes_} passes / {g.n_iter_} iterations = "
            f"{g.n_passes_ / max(g.n_iter_, 1):.2f}; objective {g.objective_[0]:.6g} -> "
            f"{g.objective_[-1]:.6g}; graph tasks {min(sizes) if sizes else 0}-"
            f"{max(sizes) if sizes else 0}"
        )
    return out


def bench_breakdown(n_b, d, m, L, log, repeats=3):
    """Seconds of each stage of one row block's work (best of ``repeats``, one BLAS thread as
    a Dask task gets): the products ``X_b U``, the trial update of ``Z``, sin/cos, the syrk,
    ``A^T Phi``, ``Phi W W^T``, ``A W^T``, ``Xi``, ``X^T Xi``, the float64 accumulation the
    engine does, and the whole block functions (one and two trials, gradient)."""
    import scipy.sparse as sp
    from threadpoolctl import threadpool_limits

    from ooc_lowrank.gimc import _blocks as B
    from ooc_lowrank.kernels.fourier import fourier_features, lff_xi

    D = 2 * m
    rng = np.random.default_rng(0)
    X = rng.standard_normal((n_b, d), dtype=np.float32)
    U = (rng.standard_normal((d, m)) * 0.05).astype(np.float32)
    G0 = (rng.standard_normal((d, m)) * 0.01).astype(np.float32)
    A = sp.random(n_b, L, density=min(1.0, 5 / L), format="csr", dtype=np.float32, random_state=0)
    A.data[:] = 1
    W = (rng.standard_normal((D, L)) * 0.01).astype(np.float32)
    WWt, Wt = (W @ W.T).astype(np.float32), np.ascontiguousarray(W.T)
    spec = B.FeatureSpec.build([("fourier", m, 0.01, None, True)])

    def best(f):
        f()
        t_best = float("inf")
        for _ in range(repeats):
            t = time.perf_counter()
            f()
            t_best = min(t_best, time.perf_counter() - t)
        return t_best

    sec = {}
    with threadpool_limits(limits=1, user_api="blas"):
        Z0, Zg = X @ U, X @ G0
        Phi, Z = np.empty((n_b, D), np.float32), np.empty_like(Z0)
        sec["X_U"] = best(lambda: X @ U)
        sec["Z_trial_update"] = best(
            lambda: np.subtract(Z0, np.multiply(Zg, np.float32(0.1), out=Z), out=Z)
        )
        sec["sincos"] = best(lambda: fourier_features(Z, 1 / np.sqrt(m), Phi))
        sec["syrk"] = best(lambda: B._gram(Phi))
        sec["AT_Phi"] = best(lambda: np.asarray(A.T @ Phi))
        sec["Phi_WWt"] = best(lambda: Phi @ WWt)
        G = Phi @ WWt
        sec["A_Wt"] = best(lambda: np.asarray(A @ Wt))
        sec["Xi"] = best(lambda: lff_xi(Phi, G, out=G[:, :m]))
        Xi = np.ascontiguousarray(G[:, :m])
        sec["XT_Xi"] = best(lambda: X.T @ Xi)
        outs = [B._gram(Phi), np.asarray(A.T @ Phi)]
        acc = np.zeros(sum(o.size for o in outs))

        def fold():
            k = 0
            for o in outs:
                acc[k : k + o.size] += o.reshape(-1)
                k += o.size

        sec["accumulate_float64"] = best(fold)
        sec["stats_block_1_trial"] = best(
            lambda: B.stats_block(X, A, U, G0, (0.1,), spec, L, False, False)
        )
        sec["stats_block_2_trials"] = best(
            lambda: B.stats_block(X, A, U, G0, (0.1, 0.05), spec, L, False, False)
        )
        sec["grad_block"] = best(lambda: B.grad_block(X, A, U, spec, WWt, Wt, L, False))
    flop = {
        "X_U": 2 * n_b * d * m,
        "syrk": n_b * D * (D + 1),
        "Phi_WWt": 2 * n_b * D * D,
        "XT_Xi": 2 * n_b * d * m,
    }
    out = {
        "n_b": n_b,
        "d": d,
        "m": m,
        "L": L,
        "labels_per_row": 5,
        "blas_threads": 1,
        "seconds": sec,
        "gflops_1_thread": {k: flop[k] / sec[k] / 1e9 for k in flop},
        "loadavg": os.getloadavg(),
    }
    log("[breakdown] " + ", ".join(f"{k} {1e3 * v:.1f} ms" for k, v in sec.items()))
    return out


def _precision(Y, S, ks=(1, 3, 5)):
    from ooc_lowrank import metrics

    return {f"p@{k}": metrics.precision_at_k(Y, S, k) for k in ks}


def bench_vs_sklearn(n, d, m, L, log, repeats=5, threads=None):
    """IMC-RFF against ``RBFSampler + Ridge`` on the same in-memory data (see module doc).

    ``threads=None``: each side as it runs by default (ours: the engine's threaded scheduler,
    one Dask thread per core with one BLAS thread each; scikit-learn: multi-threaded BLAS).
    ``threads=1``: both sides on one thread (``threadpool_limits(1)`` around both, ours on
    the synchronous scheduler), the comparison that stays fair on a shared machine.  Both
    wall seconds and CPU seconds (``time.process_time``, all threads of the process) are
    recorded for every run, the runs alternate, and the figures are the best of ``repeats``;
    ``os.getloadavg()`` is recorded around every run.
    """
    import contextlib

    import dask
    import scipy.sparse as sp
    from sklearn.kernel_approximation import RBFSampler
    from sklearn.linear_model import Ridge
    from threadpoolctl import threadpool_limits

    from ooc_lowrank.generators import generate_multilabel
    from ooc_lowrank.gimc import GIMC
    from ooc_lowrank.gimc.features import median_gamma

    tmp = tempfile.mkdtemp(prefix="bench-gimc-")
    try:
        ds = generate_multilabel(
            os.path.join(tmp, "d.zarr"), n_rows=n, n_features=d, n_labels=L, seed=1
        )
        X, Y = ds["X"].read(), ds["Y"].read()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    cut = int(0.8 * n)
    Xtr, Ytr, Xte, Yte = X[:cut], Y[:cut], X[cut:], Y[cut:]
    gamma = median_gamma(Xtr[:1000])
    alpha = 1.0
    Ytr_dense = Ytr.toarray() if sp.issparse(Ytr) else Ytr

    def limited():
        if threads is None:
            return contextlib.nullcontext()
        stack = contextlib.ExitStack()
        stack.enter_context(threadpool_limits(limits=int(threads)))
        if int(threads) == 1:
            stack.enter_context(dask.config.set(scheduler="synchronous"))
        return stack

    def ours():
        return GIMC(
            n_features_map=m, gamma=gamma, alpha=alpha, learn_features=False, random_state=0
        ).fit(Xtr, Ytr)

    def sklearn():
        rbf = RBFSampler(gamma=gamma, n_components=2 * m, random_state=0)
        return rbf, Ridge(alpha=alpha).fit(rbf.fit_transform(Xtr), Ytr_dense)

    with limited():
        GIMC(n_features_map=8, learn_features=False, random_state=0).fit(Xtr[:500], Ytr[:500])
        # alternate the two, best of `repeats` each: the first large allocation of a process
        # pays its page faults, and whoever runs second reuses the memory the first one freed
        wall = {"ours": [], "sklearn": []}
        cpu = {"ours": [], "sklearn": []}
        load = []
        for _ in range(repeats):
            for name, fn in (("ours", ours), ("sklearn", sklearn)):
                load.append(os.getloadavg()[0])
                t, c = time.perf_counter(), time.process_time()
                res = fn()
                wall[name].append(time.perf_counter() - t)
                cpu[name].append(time.process_time() - c)
                if name == "ours":
                    g = res
                else:
                    rbf, ridge = res
        load.append(os.getloadavg()[0])
        t, c = time.perf_counter(), time.process_time()
        p_ours = g.evaluate(Xte, ["p@1", "p@3", "p@5"], Y=Yte)
        ev_ours = (time.perf_counter() - t, time.process_time() - c)
        t, c = time.perf_counter(), time.process_time()
        p_sk = _precision(Yte, ridge.predict(rbf.transform(Xte)))
        ev_sk = (time.perf_counter() - t, time.process_time() - c)
        blas = _blas_info()  # thread counts as the runs saw them
    t_ours, t_sk = min(wall["ours"]), min(wall["sklearn"])
    c_ours, c_sk = min(cpu["ours"]), min(cpu["sklearn"])
    return {
        "n_train": cut,
        "d": d,
        "m": m,
        "features": 2 * m,
        "L": L,
        "gamma": gamma,
        "alpha": alpha,
        "threads": threads,
        "repeats": repeats,
        "passes_ours": g.n_passes_,
        "seconds_ours": t_ours,
        "seconds_ours_all": wall["ours"],
        "seconds_sklearn_all": wall["sklearn"],
        "seconds_sklearn": t_sk,
        "time_ratio_sklearn_over_ours": t_sk / t_ours,
        "cpu_seconds_ours": c_ours,
        "cpu_seconds_sklearn": c_sk,
        "cpu_seconds_ours_all": cpu["ours"],
        "cpu_seconds_sklearn_all": cpu["sklearn"],
        "cpu_ratio_sklearn_over_ours": c_sk / c_ours,
        "loadavg_1min_runs": load,
        "evaluate_seconds_ours": {"wall": ev_ours[0], "cpu": ev_ours[1]},
        "predict_seconds_sklearn": {"wall": ev_sk[0], "cpu": ev_sk[1]},
        "blas": blas,
        "ours": p_ours,
        "sklearn": p_sk,
    }


def bench_out_of_core(url, m, limit_bytes, log, iters=1, threads=1, small=False):
    """A streamed fit (``cache_bytes=0``) inside one Dask worker limited to ``limit_bytes``;
    with ``iters`` > 1 also the steady-state seconds per iteration and their ratio to the BLAS
    peak measured in this process before and after (the flop model of ``iteration``)."""
    sys.path.insert(0, os.path.dirname(HERE))
    from benchmarks import _worker_rss as rss
    from ooc_lowrank.gimc import GIMC
    from ooc_lowrank.storage import open_dataset

    ds = open_dataset(url)
    n, d = ds["X"].shape
    store_bytes = n * d * ds["X"].dtype.itemsize
    shapes = [("sgemm_1024^3", "gemm", 1024, 1024, 1024)] if small else [
        ("sgemm_4096^3", "gemm", 4096, 4096, 4096),
        ("sgemm_8000x1000x1000", "gemm", 8000, 1000, 1000),
    ]
    shapes += fit_shapes(int(ds.block_rows), d, m)
    # the roofline of the worker: as many BLAS threads as it has task threads
    peak_before = blas_peak(shapes, threads=threads) if iters > 1 else None
    marks = {}
    with rss.limited_worker(limit_bytes, threads=threads) as (_client, peak):
        t = time.perf_counter()
        g = GIMC(n_features_map=m, max_iter=iters, tol=0.0, cache_bytes=0, random_state=0,
                 callback=lambda it, el, f: marks.__setitem__(it, el)).fit(ds)  # fmt: skip
        secs = time.perf_counter() - t
    out = {
        "store_bytes": store_bytes,
        "worker_memory_limit": int(limit_bytes),
        "worker_threads": threads,
        "store_over_limit": store_bytes / limit_bytes,
        "block_rows": ds.block_rows,
        "peak_worker_rss": peak["worker"],
        "worker_baseline_rss": peak.get("baseline"),
        "peak_rss_over_limit": peak["worker"] / limit_bytes,
        "seconds": secs,
        "passes": g.n_passes_,
        "driver_peak_rss": _maxrss(),
    }
    if iters > 1:
        per_it, it_s = steady_seconds(marks)
        flops = iteration_flops(n, d, m, int(ds["Y"].nnz), g.n_trials_)
        pk = max(peak_before["peak"], blas_peak(shapes, threads=threads)["peak"])
        out.update(
            iterations=len(per_it),
            seconds_each_iteration=per_it,
            seconds_per_iteration=it_s,
            passes_per_iteration=(g.n_passes_ - 1) / max(len(per_it), 1),
            achieved_gflops=flops / it_s / 1e9,
            blas_peak_gflops=pk,
            blas_peak_threads=threads,
            ratio_to_peak=flops / it_s / 1e9 / pk,
        )
    return out


def _maxrss():
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--small", action="store_true")
    p.add_argument("--workdir", default=None)
    p.add_argument("--keep", action="store_true", help="keep the generated store")
    p.add_argument("--out", default=DEFAULT_OUT)
    p.add_argument(
        "--only",
        nargs="+",
        default=["iteration", "breakdown", "passes", "vs_sklearn", "out_of_core"],
    )
    p.add_argument("--quiet", action="store_true")
    p.add_argument(
        "--oc-m",
        type=int,
        default=None,
        help="m of the out-of-core fit (default 500; 8 with --small): the per-block "
        "statistics (D^2 + L D floats, D = 2m), one chained accumulator and the block "
        "temporaries must fit the worker's limit",
    )
    p.add_argument(
        "--oc-rows",
        type=int,
        default=None,
        help="rows of the out-of-core store (default 1.2M x 500 float32 = 2.4 GB; the "
        "worker limit is store bytes / 4.05)",
    )
    p.add_argument(
        "--passes-rows",
        type=int,
        default=None,
        help="rows of the passes-per-iteration problem (default 100,000; 20,000 with --small)",
    )
    p.add_argument("--passes-iter", type=int, default=20, help="iterations of the passes part")
    p.add_argument("--oc-iters", type=int, default=1,
                   help="iterations of the out-of-core fit (> 1: median of iterations 2..N and "
                   "its ratio to the BLAS peak, as the iteration part)")
    p.add_argument("--oc-threads", type=int, default=1, help="threads of the out-of-core worker")
    p.add_argument(
        "--sk-threads",
        type=int,
        default=None,
        help="vs_sklearn: run both sides on this many threads (1: one BLAS thread each and "
        "ours on the synchronous scheduler, the fair comparison on a shared machine); "
        "default: each side as it runs by default",
    )
    p.add_argument("--sk-repeats", type=int, default=5, help="vs_sklearn: alternated runs per side")
    p.add_argument("--iter-iters", type=int, default=1,
                   help="iterations of the iteration part (> 1: median of iterations 2..N)")
    args = p.parse_args(argv)
    log = (lambda *a: None) if args.quiet else (lambda *a: print(*a, flush=True))
    if args.small:
        it = dict(n=20_000, d=50, m=32, L=50)
        ps = dict(n=20_000, d=50, m=32, L=50)
        sk = dict(n=5_000, d=20, m=32, L=20)
    else:
        it = dict(n=1_000_000, d=500, m=500, L=1000)
        ps = dict(n=100_000, d=100, m=128, L=200)
        sk = dict(n=100_000, d=100, m=500, L=100)
    workdir = args.workdir or tempfile.mkdtemp(prefix="bench-gimc-")
    os.makedirs(workdir, exist_ok=True)
    out = {"benchmark": "gimc", "small": args.small, "loadavg_before": os.getloadavg()}
    try:
        if "iteration" in args.only:
            out["iteration"], url = bench_iteration(workdir, log=log, iters=args.iter_iters, **it)
            r = out["iteration"]
            log(
                f"[1] GIMC-LFF iteration n={r['n']} d={r['d']} m={r['m']} L={r['L']}: "
                f"{r['seconds_per_iteration']:.2f} s/iteration, "
                f"{r['passes_per_iteration']} passes, "
                f"{r['achieved_gflops']:.1f} GFLOP/s vs sgemm peak {r['blas_peak_gflops']:.1f} "
                f"(ratio {r['ratio_to_peak']:.2f})"
            )
        if "breakdown" in args.only:
            bd = dict(n_b=2048, d=50, m=32, L=50)
            if not args.small:
                bd = dict(n_b=16384, d=500, m=500, L=1000)
            out["breakdown"] = bench_breakdown(log=log, **bd)
        if "passes" in args.only:
            if args.passes_rows:
                ps["n"] = args.passes_rows
            out["passes"] = bench_passes(workdir, log=log, iters=args.passes_iter, **ps)
        if "vs_sklearn" in args.only:
            out["vs_sklearn"] = r = bench_vs_sklearn(
                log=log, threads=args.sk_threads, repeats=args.sk_repeats, **sk
            )
            log(
                f"[2] IMC-RFF {r['seconds_ours']:.2f}s vs RBFSampler+Ridge "
                f"{r['seconds_sklearn']:.2f}s "
                f"(sklearn/ours {r['time_ratio_sklearn_over_ours']:.2f}; CPU "
                f"{r['cpu_seconds_ours']:.2f}s vs {r['cpu_seconds_sklearn']:.2f}s, ratio "
                f"{r['cpu_ratio_sklearn_over_ours']:.2f}; threads {r['threads']}; load "
                f"{min(r['loadavg_1min_runs']):.1f}-{max(r['loadavg_1min_runs']):.1f}); "
                "P@1/3/5 ours "
                + "/".join(f"{100 * r['ours'][k]:.2f}" for k in ("p@1", "p@3", "p@5"))
                + " sklearn "
                + "/".join(f"{100 * r['sklearn'][k]:.2f}" for k in ("p@1", "p@3", "p@5"))
            )
        if "out_of_core" in args.only:
            oc_m = args.oc_m or (8 if args.small else 500)
            oc_n = args.oc_rows or (it["n"] if args.small else 1_200_000)
            oc_url = ensure_store(workdir, oc_n, it["d"], it["L"], log)
            # small: a smoke test (a worker needs ~300 MB whatever the store); full: 4.05x
            limit = 600 * 2**20 if args.small else oc_n * it["d"] * 4 / 4.05
            out["out_of_core"] = r = bench_out_of_core(
                oc_url, oc_m, int(limit), log, iters=args.oc_iters, threads=args.oc_threads,
                small=args.small,
            )
            r["m"] = oc_m
            log(
                f"[3] out-of-core fit: store {r['store_bytes'] / 2**20:.0f} MiB = "
                f"{r['store_over_limit']:.1f}x worker limit "
                f"{r['worker_memory_limit'] / 2**20:.0f} MiB; "
                f"peak worker RSS {r['peak_worker_rss'] / 2**20:.0f} MiB "
                f"({r['peak_rss_over_limit']:.2f}x limit), {r['seconds']:.1f}s"
                + (f"; {r['seconds_per_iteration']:.2f} s/iteration, ratio to peak "
                   f"{r['ratio_to_peak']:.2f}" if "ratio_to_peak" in r else "")
            )
    finally:
        if not (args.keep or args.workdir):
            shutil.rmtree(workdir, ignore_errors=True)
    out["loadavg_after"] = os.getloadavg()
    for part in ("iteration", "vs_sklearn", "out_of_core"):  # machine load seen by each part
        if part in out:
            out[part]["loadavg"] = [out["loadavg_before"], out["loadavg_after"]]
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    merged = {}
    if os.path.exists(args.out):  # --only a few parts: keep the other parts' last results
        try:
            with open(args.out) as f:
                merged = json.load(f)
        except ValueError:
            merged = {}
    merged.update(out)
    with open(args.out, "w") as f:
        json.dump(merged, f, indent=1, default=float)
    return out


if __name__ == "__main__":
    main()
    sys.exit(0)
