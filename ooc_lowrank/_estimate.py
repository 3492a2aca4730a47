"""Memory and pass estimates before a fit (``GIMC(...).estimate(X, Y)``, :func:`estimate_memory`).

The model counts the arrays each pass allocates per row block (the block functions of
:mod:`ooc_lowrank.gimc._blocks`), the engine's float64 reduction buffers, the small state
shipped to every worker, the share of cached inputs each worker keeps, and a fixed process
overhead.  It is checked against the allocations of the real block functions in
``tests/test_estimate.py``.

Notation: ``n`` rows of the largest block, ``d`` input features, ``M`` learned parameters per
input feature (``m_total``), ``D`` feature-map width (``Phi``), ``L`` labels, ``T`` trials per
line-search pass, ``s`` the block dtype's itemsize.

* statistics pass, per block: ``Z0, X direction, Z`` (``3 n M s``), ``Phi`` (``n D s``), per
  trial the Gram ``D^2`` and ``A^T Phi`` ``L D`` outputs (``T (D^2 + L D) s``), and the
  engine's float64 copy of them (``T (D^2 + L D) 8``);
* gradient pass, per block: ``Z`` (``n M s``), ``Phi`` and ``G`` (``2 n D s``), ``A W^T``
  or the residual (``n D s`` or ``2 n L s``), ``X^T Xi`` (``d M (8 + s)``);
* both: the input block itself (dense ``n d s``; CSR ``nnz (s + index) + 8 (n + 1)``) and the
  label block (CSR, one copy more when transposed for ``A^T Phi``).
"""

from __future__ import annotations

import math

import numpy as np

from . import engine

#: Resident memory of a Dask worker process with NumPy, SciPy, Numba and the kernels loaded,
#: before any task (measured about 150-200 MiB RSS on Linux; rounded up).
WORKER_BASE_BYTES = 256 * 2**20
#: Fraction of ``memory_limit`` a worker may use before Dask pauses it (``distributed.worker.
#: memory.pause`` default 0.8); an estimate above it does not fit.
WORKER_PAUSE_FRACTION = 0.8
#: Line-search trials the GIMC core tries at most per iteration (``gimc.core.MAX_TRIALS``).
MAX_TRIALS = 20


class WorkerMemoryError(MemoryError):
    """A fit would need more memory per worker than the workers' ``memory_limit``."""


def _csr_bytes(nnz, n_rows, itemsize, index_itemsize=4):
    return int(nnz) * (itemsize + index_itemsize) + 8 * (int(n_rows) + 1)


def _max_block(B):
    """``(rows, nnz)`` of the largest row block of ``B`` (nnz None for dense)."""
    bounds = np.asarray(B.bounds, dtype=np.int64)
    rows = np.diff(bounds)
    if B.kind == "dense":
        return int(rows.max(initial=0)), None
    src = B.source
    ip = getattr(src, "indptr", None)
    if ip is not None and len(ip) == B.shape[0] + 1:  # in-memory CSR: exact
        return int(rows.max(initial=0)), int(np.diff(np.asarray(ip)[bounds]).max(initial=0))
    nnz = int(B.nnz or 0)  # store / dask: the average density over the largest block
    i = int(np.argmax(rows))
    return int(rows[i]), int(math.ceil(nnz * rows[i] / max(B.shape[0], 1)))


def _input_bytes(B):
    """Bytes of ``B`` as stored / held in memory (no compression in our stores)."""
    s = np.dtype(B.dtype).itemsize
    if B.kind == "dense":
        return int(np.prod(B.shape)) * s
    idx = 8 if B.shape[1] >= 2**31 else 4
    return _csr_bytes(B.nnz or 0, B.shape[0], s, idx)


def _block_bytes(B, rows=None):
    n, nnz = _max_block(B)
    if rows is not None and n:
        nnz = None if nnz is None else int(math.ceil(nnz * rows / n))
        n = int(rows)
    s = np.dtype(B.dtype).itemsize if np.dtype(B.dtype).kind == "f" else 8
    if B.kind == "dense":
        return n * B.shape[1] * s, n
    return _csr_bytes(nnz, n, s, 8 if B.shape[1] >= 2**31 else 4), n


def gimc_task_bytes(
    n, d, M, D, L, itemsize, n_trials, *, x_bytes, a_bytes, transposed_a, n_parts=1
):
    """Bytes one GIMC block task allocates, ``{"stats": ..., "grad": ...}`` (block functions
    only, not their inputs; see the module docstring for the terms).  With several feature
    parts (``features="both"``) each part's projections are copied contiguous (``n M s``)."""
    s, T = int(itemsize), int(n_trials)
    labels = a_bytes * (2 if transposed_a else 1) + (n * M * s if n_parts > 1 else 0)
    stats = labels + 3 * n * M * s + n * D * s + d * M * s + T * (D * D + L * D) * s
    wwt = 2 * L >= D  # grad_block forms Phi (W W^T) when L >= D / 2, else the residual
    extra = n * D * s if wwt else 2 * n * L * s
    grad = labels + n * M * s + 2 * n * D * s + extra + d * M * (8 + s)
    return {"stats": int(stats), "grad": int(grad), "x_block": int(x_bytes)}


def _cluster(client):
    """``(n_workers, threads_per_worker, memory_limit)`` of the active cluster, or Nones."""
    sched = engine.active_client(client)
    if sched is None or not hasattr(sched, "scheduler_info"):
        return None, None, None
    try:
        workers = sched.scheduler_info().get("workers", {})
    except Exception:  # an unreachable scheduler: the fit will report the real error
        return None, None, None
    if not workers:
        return 0, None, None
    threads = max(int(w.get("nthreads") or 1) for w in workers.values())
    limits = [int(w.get("memory_limit") or 0) for w in workers.values()]
    return len(workers), threads, (min(limits) if min(limits) > 0 else None)


def gimc_estimate(est, XB, AB, n_labels, *, client=None):
    """The estimate dict of :meth:`GIMC.estimate` for blocked inputs ``XB`` and ``AB``."""
    m = int(est.n_components)
    kinds = ["fourier", "nystrom"] if est.features == "both" else [est.features]
    M = m * len(kinds)
    D = sum(2 * m if k == "fourier" else m for k in kinds)
    n_rows, d = (int(x) for x in XB.shape)
    L = int(n_labels)
    s = np.dtype(XB.dtype).itemsize
    store_bytes = _input_bytes(XB) + _input_bytes(AB)
    in_memory = XB.in_memory and AB.in_memory
    n_workers, threads, limit = _cluster(client)
    budget = engine.DEFAULT_CACHE_BYTES if est.cache_bytes is None else int(est.cache_bytes)
    if limit and n_workers:
        budget = min(budget, int(0.5 * limit * n_workers))
    resident = in_memory or store_bytes <= budget
    n_trials = int(est.n_trials) if est.n_trials is not None else (1 if resident else 2)

    def worker_bytes(rows, m_):
        M_ = m_ * len(kinds)
        D_ = sum(2 * m_ if k == "fourier" else m_ for k in kinds)
        xb, n = _block_bytes(XB, rows)
        ab, _ = _block_bytes(AB, rows)
        t = gimc_task_bytes(
            n,
            d,
            M_,
            D_,
            L,
            s,
            n_trials,
            x_bytes=xb,
            a_bytes=ab,
            transposed_a=L > 4 * n,
            n_parts=len(kinds),
        )
        out64 = n_trials * (D_ * D_ + L * D_) * 8
        task = xb + ab + max(t["stats"] + out64, t["grad"])
        n_blocks = XB.n_blocks
        chains = engine._n_chains(n_blocks, out64 // 8) if out64 >= engine.CHAIN_BYTES else 1
        per_worker_chains = math.ceil(chains / max(n_workers or 1, 1))
        state = 2 * d * M_ * s + D_ * L * s + (D_ * D_ * s if 2 * L >= D_ else 0)
        cached = store_bytes / max(n_workers or 1, 1) if (resident and n_workers) else 0
        total = (
            (WORKER_BASE_BYTES if n_workers else 0)
            + (threads or 1) * task
            + per_worker_chains * out64
            + state
            + cached
        )
        return int(total), t, int(task), int(out64 * per_worker_chains), int(state), int(cached)

    rows_max, _ = _max_block(XB)
    total, t, task, reduce_b, state, cached = worker_bytes(None, m)
    iters = int(est.max_iter)
    out = {
        "method": "GIMC",
        "n_rows": n_rows,
        "n_features": d,
        "n_labels": L,
        "n_components": m,
        "n_params": M,
        "n_phi": D,
        "dtype": str(np.dtype(XB.dtype)),
        "block_rows": rows_max,
        "n_blocks": int(XB.n_blocks),
        "store_bytes": int(store_bytes),
        "resident": bool(resident),
        "n_trials": n_trials,
        "passes_init": 1,
        "passes_per_iteration": {"typical": 2, "max": 1 + math.ceil(MAX_TRIALS / n_trials)},
        "max_passes": 1 + iters * (1 + math.ceil(MAX_TRIALS / n_trials)),
        "read_bytes_per_pass": 0 if resident else int(store_bytes),
        "task_alloc_bytes": {"stats": t["stats"], "grad": t["grad"]},
        "task_bytes": task,
        "reduce_bytes_per_worker": reduce_b,
        "state_bytes_per_worker": state,
        "cache_bytes_per_worker": cached,
        "n_workers": n_workers,
        "threads_per_worker": threads,
        "worker_memory_limit": limit,
        "worker_bytes": total,
        "fits": None if not limit else bool(total <= WORKER_PAUSE_FRACTION * limit),
    }
    if out["fits"] is False:
        out["suggest"] = _gimc_suggest(worker_bytes, rows_max, m, WORKER_PAUSE_FRACTION * limit)
    return out


def _largest(fits, hi):
    """Largest integer ``k`` in ``[1, hi]`` with ``fits(k)`` (monotone), or 0."""
    lo, best = 1, 0
    while lo <= hi:
        mid = (lo + hi) // 2
        if fits(mid):
            best, lo = mid, mid + 1
        else:
            hi = mid - 1
    return best


def _gimc_suggest(worker_bytes, rows, m, cap):
    return {
        "block_rows": _largest(lambda r: worker_bytes(r, m)[0] <= cap, rows - 1),
        "n_components": _largest(lambda k: worker_bytes(rows, k)[0] <= cap, m - 1),
    }


def _gib(b):
    return f"{b / 2**30:.2f} GiB"


def check_fits(estimate):
    """Raise :class:`WorkerMemoryError` (numbers and fix) when ``estimate["fits"]`` is False."""
    if estimate.get("fits") is not False:
        return
    e, sug = estimate, estimate["suggest"]
    fixes = []
    if sug["block_rows"]:
        fixes.append(
            f"smaller row blocks (block_rows <= {sug['block_rows']}; for a store, convert it "
            f"again with --block-rows {sug['block_rows']})"
        )
    if sug["n_components"]:
        fixes.append(f"a smaller n_components (<= {sug['n_components']})")
    fixes.append("workers with more memory or fewer threads each")
    raise WorkerMemoryError(
        f"{e['method']} would need about {_gib(e['worker_bytes'])} per worker, more than "
        f"{WORKER_PAUSE_FRACTION:.0%} of the workers' memory_limit {_gib(e['worker_memory_limit'])}"
        f" (n_components={e['n_components']}, D={e['n_phi']}, block_rows={e['block_rows']}, "
        f"threads_per_worker={e['threads_per_worker']}, n_trials={e['n_trials']}: "
        f"{_gib(e['task_bytes'])} per task, {_gib(e['reduce_bytes_per_worker'])} of reduction "
        f"buffers, {_gib(e['cache_bytes_per_worker'])} of cached input). Use "
        + "; or ".join(fixes)
        + ". Nothing was computed; GIMC(...).estimate(X, Y) shows the numbers"
    )


def estimate_memory(estimator, X, Y=None, **kwargs):
    """``estimator.estimate(X, Y)``: passes, per-worker memory and store size before a fit."""
    if not hasattr(estimator, "estimate"):
        raise TypeError(
            f"estimator must have an estimate() method (GIMC); got {type(estimator).__name__}"
        )
    return estimator.estimate(X, Y, **kwargs)
