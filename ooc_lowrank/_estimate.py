"""Memory and pass estimates before a fit (``GIMC(...).estimate(X, Y)``, :func:`estimate_memory`).

The model counts the arrays each pass allocates per row block (the block functions of
:mod:`ooc_lowrank.gimc._blocks`), the engine's float64 reduction buffers, the small state
shipped to every worker, the share of cached inputs each worker keeps, and a fixed process
overhead.  It is checked against the allocations of the real block functions in
``tests/test_estimate.py``.  Every fit refuses, before any pass, an estimate above
:data:`WORKER_PAUSE_FRACTION` of a distributed worker's ``memory_limit``, or, on the local
scheduler, above the memory available to the process now (``psutil``), naming the
``block_rows`` / size parameter that would fit (:func:`check_fits`).

Notation: ``n`` rows of the largest block, ``d`` input features, ``M`` learned parameters per
input feature (``m_total``), ``D`` feature-map width (``Phi``), ``L`` labels, ``T`` trials per
line-search pass, ``s`` the block dtype's itemsize.

* statistics pass, per block: ``Z0, X direction, Z`` (``3 n M s``), ``Phi`` (``n D s``), per
  trial the Gram ``D^2`` and ``A^T Phi`` ``L D`` outputs (``T (D^2 + L D) s``), and the
  engine's float64 copy of them (``T (D^2 + L D) 8``), a dense block's aligned copy of a
  trial's ``U`` (``d M s``; none for CSR);
* gradient pass, per block: ``Phi`` (``n D s``) throughout, with the largest of ``Z``
  (``n M s``, freed once ``Phi`` is made; nothing when the line search kept ``Phi``), ``G``
  and ``A W^T`` or the residual (``n D s`` and ``n D s`` or ``2 n L s``), ``G`` and one
  part's ``X^T Xi`` added into the chain's accumulator (dense: the product, ``d M_p s``;
  CSR: one scatter-add of all parts' terms side by side, ``n M s`` with several parts, as
  float64 casts with the block's values, ``n M 8 + nnz 8``); one float64 accumulator
  ``d M 8`` per chain (one chain when it is above ``engine.ONE_CHAIN_BYTES``); the kept ``Phi`` of a whole pass (``n_rows D s``, state, when
  at most ``PHI_CACHE_BYTES``);
* both: the input block itself (dense ``n d s``; CSR ``nnz (s + index) + 8 (n + 1)``) and the
  label block (CSR, one copy more when transposed for ``A^T Phi``).
* large-state mode (a float64 ``U`` above ``LARGE_STATE_BYTES``, ``gimc.core.large_state``):
  the statistics block adds into its chain's accumulator (``X U``, ``X g``, a trial's ``Z``:
  ``3 n M s``; ``Phi`` and one Gram); state in the data's dtype: ``U`` (``d M s``), ``W^T``
  (``L D s``), the kept projections ``X U`` (``n_rows M s``, at most ``Z_CACHE_BYTES``); the
  line search also holds the gradient (``d M s``) beside the statistics accumulator
  (``T (D^2 + L D) s``, a trial's ``W^T`` solved into it), the gradient pass its accumulator
  (``(d + 1) M s``), one chain each above ``engine.ONE_CHAIN_BYTES``.

Time (:func:`rough_time`): from the machine's calibrated GEMM / sparse / SGD rates, or, for a
GIMC fit on a store or Dask input (``estimate(calibrate=...)``), from the fit's own passes
timed on a slice of the input with the fit's state at full size
(:func:`_gimc_time_calibration`): the sparse gathers and scatter-adds against a 3.1 GB ``U``
at the Delicious-large shape are memory-bound, which a small synthetic product does not
measure (issue 25: 31 s per pass modelled, about 75 s measured).  The number of iterations
a ``tol`` stop leaves is unknowable before the fit: the estimate gives the seconds per
iteration (at :data:`TYPICAL_TRIALS` line-search trials), per further trial, and for
``max_iter``.
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
#: Largest block features ``Phi`` (n x D) a GIMC fit keeps between passes
#: (``gimc.core.PHI_CACHE_BYTES``).
PHI_CACHE_BYTES = 2**30
#: Trials per line-search pass when ``n_trials`` is None (``gimc.core.DEFAULT_N_TRIALS``).
DEFAULT_N_TRIALS = 1
#: A float64 ``U`` above this many bytes puts a GIMC fit in its large-state mode
#: (``gimc.core.LARGE_STATE_BYTES``); its projections ``X U`` are kept between passes up to
#: ``Z_CACHE_BYTES`` (``gimc.core.Z_CACHE_BYTES``).
LARGE_STATE_BYTES = 2**28
Z_CACHE_BYTES = 2**30


class WorkerMemoryError(MemoryError):
    """A fit would need more memory per worker than the workers' ``memory_limit`` (or, on the
    local scheduler, than the memory available on this machine)."""


def _available_memory() -> int:
    """Bytes of memory available to a new allocation now (``psutil``; local scheduler)."""
    import psutil

    return int(psutil.virtual_memory().available)


def _cap(n_workers, limit):
    """Bytes one worker may use, or None (no verdict): :data:`WORKER_PAUSE_FRACTION` of a
    distributed worker's ``memory_limit``; on the local scheduler (``n_workers`` None) the
    memory available now, all of it (the estimate errs high, and a fit refused here could
    only swap or fail)."""
    if n_workers is None:
        return _available_memory()
    return WORKER_PAUSE_FRACTION * limit if limit else None


def _concurrent_tasks(n_workers, threads):
    """Block tasks one worker runs at once: its threads; on the local scheduler (``n_workers``
    None) one per core, as the engine's block pool and Dask's threaded scheduler run them."""
    import os

    if n_workers is None:
        return os.cpu_count() or 1
    return threads or 1


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


def _block_nnz(B, rows=None):
    """Nonzeros of the largest row block of a CSR ``B`` (of ``rows`` rows if given); None for
    dense."""
    n, nnz = _max_block(B)
    if nnz is None or rows is None or not n:
        return nnz
    return int(math.ceil(nnz * rows / n))


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
    n,
    d,
    M,
    D,
    L,
    itemsize,
    n_trials,
    *,
    x_bytes,
    a_bytes,
    transposed_a,
    n_parts=1,
    x_nnz=None,
    large=False,
):
    """Bytes one GIMC block task allocates, ``{"stats": ..., "grad": ...}`` (block functions
    only, not their inputs; see the module docstring for the terms).  With several feature
    parts (``features="both"``) each part's projections are copied contiguous (``n M s``).
    ``x_nnz``: nonzeros of a CSR block (None: dense).  ``large``: the large-state mode, whose
    statistics block adds into the chain's accumulator (``X U``, ``X g`` and a trial's ``Z``,
    ``Phi`` and one Gram; the label block untransposed; no output of the full size) and whose
    gradient block adds into an accumulator of the data's dtype (no float64 casts)."""
    s, T = int(itemsize), int(n_trials)
    if large:
        mp = -(-M // max(int(n_parts), 1))
        stats = a_bytes + 3 * n * M * s + n * D * s + D * D * s
        if s == 8 and x_nnz is not None:
            stats += 8 * n * D  # csr_t_dense_add's float64 cast of Phi: no cast in float32
        extra = n * D * s if 2 * L >= D else 2 * n * L * s
        fused = n * M * s if n_parts > 1 else 0  # CSR: all parts' terms side by side
        xt = d * mp * s if x_nnz is None else fused + (0 if s == 4 else 8 * (n * M + int(x_nnz)))
        zs = n * M * s + (n * mp * s if n_parts > 1 else 0)
        grad = a_bytes + n * D * s + max(zs, n * D * s + max(extra, xt))
        return {"stats": int(stats), "grad": int(grad), "x_block": int(x_bytes)}
    labels = a_bytes * (2 if transposed_a else 1) + (n * M * s if n_parts > 1 else 0)
    trial = d * M * s if x_nnz is None else 0  # the dense GEMM's own copy of a trial's U
    stats = labels + 3 * n * M * s + n * D * s + trial + T * (D * D + L * D) * s
    wwt = 2 * L >= D  # grad_block forms Phi (W W^T) when L >= D / 2, else the residual
    extra = n * D * s if wwt else 2 * n * L * s
    # Phi lives throughout; Z is freed before G, the label products before back-propagation,
    # which forms one part's X^T Xi (dense) or float64 casts (CSR) at a time
    mp = -(-M // max(int(n_parts), 1))
    # CSR with several parts: their terms side by side (n M s) and its float64 cast (n M 8)
    fused = n * M * s if n_parts > 1 else 0
    xt = d * mp * s if x_nnz is None else fused + 8 * (n * M + int(x_nnz))
    zs = n * M * s + (n * mp * s if n_parts > 1 else 0)  # Z and one part's contiguous copy
    grad = a_bytes * (2 if transposed_a else 1) + n * D * s + max(zs, n * D * s + max(extra, xt))
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


def gimc_estimate(est, XB, AB, n_labels, *, client=None, codes=False, calibrate=False):
    """The estimate dict of :meth:`GIMC.estimate` for blocked inputs ``XB`` and ``AB``.

    ``calibrate``: time the fit's own passes on a slice of the input with the fit's state at
    full size (:func:`_gimc_time_calibration`, ``time_calibration`` in the result), which the
    time model (:func:`rough_time`) then uses instead of the machine's synthetic rates
    (``codes``: ``AB`` holds class codes, as the fit's label blocks)."""
    m = int(est.n_features_map)
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
    n_trials = int(est.n_trials) if est.n_trials is not None else DEFAULT_N_TRIALS
    stats_trials = n_trials  # output pairs of a statistics pass
    widths = est._gamma_factors() if hasattr(est, "_gamma_factors") else None
    if widths:  # alpha="auto" scores the widths in the first statistics pass, a pair each
        from .gimc import core

        if core.width_selection(n_rows, D):
            stats_trials = max(n_trials, 1 + len(widths))

    def worker_bytes(rows, m_):
        M_ = m_ * len(kinds)
        D_ = sum(2 * m_ if k == "fourier" else m_ for k in kinds)
        large = 8 * d * M_ > LARGE_STATE_BYTES
        xb, n = _block_bytes(XB, rows)
        if XB.in_memory and XB.kind == "dense":  # its row blocks are views, not copies
            xb = 0
        ab, _ = _block_bytes(AB, rows)
        t = gimc_task_bytes(
            n,
            d,
            M_,
            D_,
            L,
            s,
            stats_trials,
            x_bytes=xb,
            a_bytes=ab,
            transposed_a=L > 4 * n,
            n_parts=len(kinds),
            x_nnz=_block_nnz(XB, rows),
            large=large,
        )
        n_blocks = XB.n_blocks if rows is None else math.ceil(n_rows / max(int(rows), 1))
        if large:
            return _gimc_large_bytes(t, xb, ab, n_blocks, n_rows, d, M_, D_, L, s, n_trials)
        out64 = stats_trials * (D_ * D_ + L * D_) * 8
        task = xb + ab + max(t["stats"] + out64, t["grad"])
        chains = engine._n_chains(n_blocks, out64 // 8) if out64 >= engine.CHAIN_BYTES else 1
        per_worker_chains = math.ceil(chains / max(n_workers or 1, 1))
        acc = (d + 1) * M_  # the gradient pass's accumulator (float64 values) per chain
        acc_chains = math.ceil(engine._n_chains(n_blocks, acc, True) / max(n_workers or 1, 1))
        state = 2 * d * M_ * s + D_ * L * s + (D_ * D_ * s if 2 * L >= D_ else 0)
        phi = n_rows * D_ * s  # a single trial's features, kept for the next gradient pass
        state += phi if phi <= PHI_CACHE_BYTES else 0
        if not n_workers:  # this process is also the driver: U and g (float64), and W, the
            # statistics A^T Phi and a trial's W (D x L float64 each) while a trial is judged
            state += 16 * d * M_ + 24 * D_ * L
        cached = store_bytes / max(n_workers or 1, 1) if (resident and n_workers) else 0
        total = (
            (WORKER_BASE_BYTES if n_workers else 0)
            + _concurrent_tasks(n_workers, threads) * task
            + max(per_worker_chains * out64, acc_chains * 8 * acc)
            + state
            + cached
        )
        reduce_b = max(out64 * per_worker_chains, acc_chains * 8 * acc)
        return int(total), t, int(task), int(reduce_b), int(state), int(cached)

    def _gimc_large_bytes(t, xb, ab, n_blocks, n_rows, d, M_, D_, L, s, T):
        """:func:`worker_bytes` in the large-state mode (``gimc.core.large_state``): the
        state in the data's dtype ``s``; the line search holds ``U``, its gradient, the kept
        projections ``X U``, ``W^T`` (L, D) and the statistics accumulator (a trial's ``W^T``
        is solved into its ``A^T Phi``); the gradient pass ``U``, ``W^T`` and the gradient's
        accumulator."""
        task = xb + ab + max(t["stats"], t["grad"])
        workers = max(n_workers or 1, 1)
        grad_acc = (d + 1) * M_
        stats_acc = T * (D_ * D_ + L * D_) + 1
        grad_chains = math.ceil(engine._n_chains(n_blocks, grad_acc, True) / workers)
        stats_chains = math.ceil(engine._n_chains(n_blocks, stats_acc, True) / workers)
        z = n_rows * M_ * s
        z = z if z <= Z_CACHE_BYTES else 0
        state = d * M_ * s + L * D_ * s + D_ * D_ * s + z // workers
        if n_workers:  # U and the gradient shipped to every worker, W^T: the driver's too
            reduce_b = max(grad_chains * grad_acc, stats_chains * stats_acc) * s
            state += d * M_ * s
        else:  # the gradient is held through the line search beside its statistics
            reduce_b = max(grad_chains * grad_acc * s, d * M_ * s + stats_chains * stats_acc * s)
        cached = store_bytes / workers if (resident and n_workers) else 0
        total = (
            (WORKER_BASE_BYTES if n_workers else 0)
            + _concurrent_tasks(n_workers, threads) * task
            + reduce_b
            + state
            + cached
        )
        return int(total), t, int(task), int(reduce_b), int(state), int(cached)

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
        "iterations": iters,
        "passes_per_iteration": {"typical": 2, "max": 1 + math.ceil(MAX_TRIALS / n_trials)},
        "max_passes": 1 + iters * (1 + math.ceil(MAX_TRIALS / n_trials)),
        "read_bytes_per_pass": 0 if resident else int(store_bytes),
        # the time model's terms (rough_time): the input's kind and stored non-zeros
        "x_kind": XB.kind,
        "x_nnz": int(XB.nnz or 0) if XB.kind != "dense" else n_rows * d,
        "y_nnz": int(AB.nnz or 0),
        "task_alloc_bytes": {"stats": t["stats"], "grad": t["grad"]},
        "task_bytes": task,
        "reduce_bytes_per_worker": reduce_b,
        "state_bytes_per_worker": state,
        "cache_bytes_per_worker": cached,
        "n_workers": n_workers,
        "threads_per_worker": threads,
        "worker_memory_limit": limit,
        "worker_bytes": total,
    }
    cap = _cap(n_workers, limit)
    out["memory_cap"] = None if cap is None else int(cap)
    out["fits"] = None if cap is None else bool(total <= cap)
    if out["fits"] is False:
        out["suggest"] = _gimc_suggest(worker_bytes, rows_max, m, cap)
    if calibrate:
        out["time_calibration"] = _gimc_time_calibration(est, XB, AB, n_labels, codes, out)
    return out


#: Trials per GIMC iteration assumed by the time model: the first trial of an iteration (3/4 of
#: the quadratic model's minimizer, at most twice the last accepted step) is accepted in most
#: iterations: 1.0-1.1 trials per iteration on Bibtex, the demo shape, yahoo Arts and
#: Business, mfeat, segment and a Delicious-shaped store at a tenth of the full size
#: (``benchmarks/gimc_step_rule.py``, 10 iterations each; NUS-WIDE shape 1.1 over 100).
TYPICAL_TRIALS = 1.1

#: The most trials per iteration a recorded fit needed: the Delicious-large shape at full size,
#: 23 trials in 5 iterations (5, 5, 2, 1, 10; ``results/scale_delicious.json``), not seen at a
#: tenth of its size.  The time model also gives the fit's time at this many
#: (``seconds_per_fit_slow_search``): the line search's cost is known per trial, its count
#: only once the fit runs.
SLOW_SEARCH_TRIALS = 4.6


def gimc_passes(iterations, trials, n_trials=1):
    """Passes of a GIMC fit (``gimc.core.fit_gimc``) of ``iterations`` U-steps whose line
    searches tried ``trials`` steps (a sequence, one count per iteration), ``n_trials`` per
    pass: the initial statistics pass, then per iteration a gradient pass and one statistics
    pass per ``n_trials`` trials."""
    trials = list(trials)
    if len(trials) != int(iterations):
        raise ValueError(f"trials: one count per iteration ({iterations}); got {len(trials)}")
    return 1 + int(iterations) + sum(math.ceil(int(t) / int(n_trials)) for t in trials)


def _gimc_calibration_spec(est, S, m):
    """The feature spec a fit of ``est`` would build (parts, ``normalize_rows`` resolved on
    the rows ``S``, ``gamma`` from them) without drawing ``U``; a frozen Nystrom part gets an
    identity normalization (the same products as the fit's)."""
    from .gimc import _blocks
    from .gimc.estimator import _looks_like_bag_of_words
    from .gimc.features import median_gamma

    norm = est.normalize_rows
    row_norm = bool(_looks_like_bag_of_words(S) if norm == "auto" else norm)
    S = _blocks.l2_normalize_rows(S[:1000]) if row_norm else S[:1000]
    gamma = float(est.gamma) if est.gamma is not None else float(est.gamma_scale) * median_gamma(S)
    gamma = gamma if np.isfinite(gamma) and gamma > 0 else 1.0
    kinds = ["fourier", "nystrom"] if est.features == "both" else [est.features]
    learn = bool(est.learn_features)
    parts = [(k, m, gamma, None if (k == "fourier" or learn) else np.eye(m), learn) for k in kinds]
    return _blocks.FeatureSpec.build(parts, row_norm=row_norm), gamma


def _refault_rate(nbytes=2**28, repeats=2):
    """Bytes per second at which a new large array is first written (its pages faulted in and
    zeroed by the kernel: every pass accumulator above the allocator's mmap threshold is),
    the last of ``repeats`` allocations of ``nbytes`` (the first may also pay the VM's first
    use of the memory)."""
    import time

    rate = None
    for _ in range(repeats):
        t = time.perf_counter()
        a = np.zeros(nbytes // 4, dtype=np.float32)
        a[::1024] = 1.0  # one write per 4 KiB page
        rate = nbytes / max(time.perf_counter() - t, 1e-9)
        del a
    return rate


def _gimc_alpha(est):
    """A GIMC's ridge weight for the calibration's W-step timing (``"auto"``: its default)."""
    from ooc_lowrank.gimc.estimator import DEFAULT_ALPHA

    return DEFAULT_ALPHA if isinstance(est.alpha, str) else float(est.alpha)


def _gimc_time_calibration(est, XB, AB, n_labels, codes, e, n_windows=8, seed=0):
    """:func:`ooc_lowrank.gimc.core.pass_calibration` on rows of the input itself: at most
    one row block (the fit's ``block_rows``) and :func:`calibration_rows` of the input's bytes,
    read as ``n_windows`` windows spread evenly over the rows; ``U`` allocated at full size
    in the fit's dtype (the time of its first touch gives the rate at which the passes'
    accumulators are first written).  Skipped (``skipped``: why) when the fit does not fit or
    the state would not fit in the memory available now.  Adds what it read and its own
    wall time (``seconds``)."""
    import time

    import scipy.sparse as sp

    from .gimc import core

    t_all = time.perf_counter()
    n, d = (int(x) for x in XB.shape)
    M, D, L, T = e["n_params"], e["n_phi"], int(n_labels), int(e["n_trials"])
    big = core.large_state(d, M)
    s = np.dtype(XB.dtype).itemsize
    sdt = np.dtype(XB.dtype) if big else np.dtype(np.float64)
    # the calibration's own arrays: U, W (L x D), the larger pass accumulator, the gradient
    need = d * M * sdt.itemsize * 2 + L * D * sdt.itemsize + (d + 1) * M * (s if big else 8)
    avail = _available_memory()
    why = None
    if e.get("n_workers") is not None:
        why = ("a Dask cluster is active (the calibration times block functions in this "
               "process, on the local scheduler)")  # fmt: skip
    elif e.get("fits") is False:
        why = "the fit itself does not fit (fits=False)"
    elif n == 0:
        why = "the input has no rows"
    elif need > 0.8 * avail:
        why = (f"its state ({need / 2**30:.2f} GiB: U, W and a pass accumulator at full size) "
               f"is more than 80 % of the {avail / 2**30:.2f} GiB available now")  # fmt: skip
    if why:
        return {"skipped": f"no time calibration: {why}; the time model uses the machine's "
                           "synthetic rates"}  # fmt: skip
    rows = int(min(calibration_rows(e["store_bytes"], n), e["block_rows"], n))
    n_win = int(max(1, min(n_windows, rows)))
    w = rows // n_win
    starts = np.linspace(0, n - w, n_win).astype(np.int64)
    t = time.perf_counter()
    xs = [engine.read_rows(XB, int(a), int(a) + w) for a in starts]
    ys = [engine.read_rows(AB, int(a), int(a) + w) for a in starts]
    Xs = sp.vstack(xs, format="csr") if sp.issparse(xs[0]) else np.concatenate(xs)
    Ys = sp.vstack(ys, format="csr") if sp.issparse(ys[0]) else np.concatenate(ys)
    t_read = time.perf_counter() - t
    spec, gamma = _gimc_calibration_spec(est, Xs, int(est.n_features_map))
    rng = np.random.default_rng(seed)
    t = time.perf_counter()
    tile = (np.sqrt(2.0 * gamma) * rng.standard_normal((min(d, 4096), M))).astype(sdt)
    U = np.empty((d, M), dtype=sdt)
    for a in range(0, d, tile.shape[0]):
        U[a : a + tile.shape[0]] = tile[: d - a]
    t_fill = time.perf_counter() - t
    refault = _refault_rate()
    cal = core.pass_calibration(Xs, Ys, U, spec, n_labels=L, codes=codes, alpha=_gimc_alpha(est),
                                n_trials=T, seed=seed)  # fmt: skip
    del U
    cal["windows"] = {"starts": starts.tolist(), "rows": int(w)}
    cal["rows_read"] = int(n_win * w)
    cal["x_nnz"] = int(Xs.nnz) if sp.issparse(Xs) else None
    cal["bytes"] = int(e["store_bytes"] * cal["rows_read"] / max(n, 1))
    cal["read_seconds"] = t_read
    cal["first_touch_bytes_per_second"] = d * M * sdt.itemsize / max(t_fill, 1e-9)
    cal["fresh_bytes_per_second"] = refault
    cal["seconds"] = time.perf_counter() - t_all
    cal["source"] = (
        f"GIMC passes timed on {cal['rows_read']} rows of the input ({cal['bytes'] / 2**20:.1f} "
        f"MiB, {n_win} windows spread over it) with the fit's state at full size (U {d} x {M} "
        f"{sdt.name}, W {D} x {L}), scaled by rows; {cal['seconds']:.1f} s of its own, the "
        "machine as busy as now"
    )
    return cal


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
        "n_features_map": _largest(lambda k: worker_bytes(rows, k)[0] <= cap, m - 1),
    }


def _gib(b):
    g = b / 2**30
    return f"{g:.2f} GiB" if g < 1e6 else f"{g:.3g} GiB"


def check_fits(estimate):
    """Raise :class:`WorkerMemoryError` (numbers and fix) when ``estimate["fits"]`` is False."""
    if estimate.get("fits") is not False:
        return
    e, sug = estimate, estimate["suggest"]
    name = e.get("suggest_param", "n_features_map")
    fixes = []
    if sug.get(name):
        fixes.append(f"a smaller {name} (<= {sug[name]})")
    if sug["block_rows"]:
        fixes.append(
            f"smaller row blocks (block_rows <= {sug['block_rows']}; for a store, convert it "
            f"again with --block-rows {sug['block_rows']})"
        )
    if e["n_workers"] is None:  # local scheduler
        where = (
            f"more than the {_gib(e['memory_cap'])} of memory available on this machine "
            "(local scheduler"
        )
        fixes.append("more free memory, or a Dask cluster with enough memory per worker")
    else:
        where = (
            f"more than {WORKER_PAUSE_FRACTION:.0%} of the workers' memory_limit "
            f"{_gib(e['worker_memory_limit'])} (threads_per_worker={e['threads_per_worker']}"
        )
        fixes.append("workers with more memory or fewer threads each")
    if "detail" in e:  # GreedyLowRank, KernelMaxide / Maxide, multi-view machines
        detail = f"{e['detail']}: " + f"{_gib(e['state_bytes_per_worker'])} of shipped state, "
        call = f"{e['method']}(...).estimate(...)"
    else:
        detail = (
            f"n_features_map={e['n_components']}, D={e['n_phi']}, block_rows={e['block_rows']}, "
            f"n_trials={e['n_trials']}: "
        )
        call = "GIMC(...).estimate(X, Y)"
    raise WorkerMemoryError(
        f"{e['method']} would need about {_gib(e['worker_bytes'])}"
        f"{' per worker' if e['n_workers'] is not None else ''}, {where}; "
        f"{detail}{_gib(e['task_bytes'])} per task, {_gib(e['reduce_bytes_per_worker'])} of "
        f"reduction buffers, {_gib(e['cache_bytes_per_worker'])} of cached input). Use "
        + "; or ".join(fixes)
        + f". Nothing was computed; {call} shows the numbers"
    )


def estimate_memory(estimator, X, Y=None, **kwargs):
    """``estimator.estimate(X, Y)``: passes, per-worker memory and store size before a fit."""
    if not hasattr(estimator, "estimate"):
        raise TypeError(
            "estimator must have an estimate() method (GIMC, GreedyLowRank, KernelMaxide, "
            f"Maxide, MultiViewMachine*); got {type(estimator).__name__}"
        )
    return estimator.estimate(X, Y, **kwargs)


# ---------------------------------------------------------------------------------------------
# GreedyLowRank, KernelMaxide / Maxide, multi-view machines: the same accounting (process base,
# ``threads_per_worker`` block tasks, float64 reduction buffers, shipped state, cached input
# share) with each method's block functions.
# ---------------------------------------------------------------------------------------------


def _worker_total(n_workers, threads, task, reduce_bytes, state, cached):
    return int(
        (WORKER_BASE_BYTES if n_workers else 0)
        + _concurrent_tasks(n_workers, threads) * task
        + reduce_bytes
        + state
        + cached
    )


def _reduce_per_worker(n_blocks, out_floats, n_workers):
    """Bytes of float64 reduction buffers of ``out_floats`` floats one worker holds at once."""
    out64 = int(out_floats) * 8
    chains = engine._n_chains(n_blocks, out_floats) if out64 >= engine.CHAIN_BYTES else 1
    return int(out64 * math.ceil(chains / max(n_workers or 1, 1)))


def _memory_fields(task, reduce_b, state, cached, cluster, total):
    """The per-worker memory entries of an estimate dict (``cluster`` from :func:`_cluster`)."""
    n_workers, threads, limit = cluster
    return {
        "task_bytes": int(task),
        "reduce_bytes_per_worker": int(reduce_b),
        "state_bytes_per_worker": int(state),
        "cache_bytes_per_worker": int(cached),
        "n_workers": n_workers,
        "threads_per_worker": threads,
        "worker_memory_limit": limit,
        "worker_bytes": int(total),
    }


def _finish(out, worker_bytes, limit, rows_max, size_name, size):
    """Common tail: the verdict and, when it does not fit, what would.  ``worker_bytes(rows,
    size)`` is the model with other block rows / another size parameter."""
    cap = _cap(out["n_workers"], limit)
    out["memory_cap"] = None if cap is None else int(cap)
    out["fits"] = None if cap is None else bool(out["worker_bytes"] <= cap)
    if out["fits"] is False:
        out["suggest"] = {
            "block_rows": _largest(lambda r: worker_bytes(r, size) <= cap, rows_max - 1),
            size_name: _largest(lambda k: worker_bytes(rows_max, k) <= cap, size - 1)
            if size
            else 0,
        }
        out["suggest_param"] = size_name
    return out


def glrl_task_bytes(nnz, n, n_cols, rank, *, cached=False):
    """Bytes one GreedyLowRank block task allocates, ``{"power", "grad_cache", "refit"}``
    (block functions only, not their input block): the power pass returns ``G v``
    (the block's ``n`` rows) and ``G^T u`` (``n_cols``) float64 vectors; building the gradient cache
    (``cached``) keeps a float64 gradient per observed entry of the block; the refit passes
    return ``rank`` floats.  Measured: the power pass allocates 1.0-1.02 of the model."""
    power = 8 * (int(n) + int(n_cols) + 3)
    grad = 8 * int(nnz) + 8 * (int(n) + 1) if cached else 0
    return {"power": int(power), "grad_cache": int(grad), "refit": int(8 * (int(rank) + 1))}


def glrl_estimate(est, B, shape, *, client=None):
    """The estimate dict of :meth:`GreedyLowRank.estimate` for the blocked observations ``B``."""
    m_rows, n_cols = (int(s) for s in shape)
    rank = int(est.n_components)
    store_bytes = _input_bytes(B)
    n_workers, threads, limit = _cluster(client)
    budget = engine.DEFAULT_CACHE_BYTES if est.cache_bytes is None else int(est.cache_bytes)
    if limit and n_workers:
        budget = min(budget, int(0.5 * limit * n_workers))
    resident = B.in_memory or store_bytes <= budget
    grad_cache = int(est.power_iter) > 2 and 8 * int(B.nnz or 0) <= budget
    rows_max, _ = _max_block(B)

    def worker_bytes(rows, k):
        xb, n = _block_bytes(B, rows)
        _, nnz = _max_block(B) if rows is None else (n, None)
        nnz = int(math.ceil((B.nnz or 0) * n / max(B.shape[0], 1))) if nnz is None else nnz
        t = glrl_task_bytes(nnz, n, n_cols, k, cached=grad_cache)
        task = xb + max(t.values())
        reduce_b = _reduce_per_worker(B.n_blocks, m_rows + n_cols + 3, n_workers)
        state = 8 * (m_rows + n_cols) * (k + 2)  # U, V (rank columns) and u, v
        cache = (store_bytes + (8 * int(B.nnz or 0) if grad_cache else 0)) if resident else 0
        cached = cache / max(n_workers or 1, 1) if n_workers else 0
        total = _worker_total(n_workers, threads, task, reduce_b, state, cached)
        return total, t, task, reduce_b, state, cached

    total, t, task, reduce_b, state, cached = worker_bytes(None, rank)
    refit = 0 if est.refit == "none" else int(est.lbfgs_iter) + 1
    inner = int(est.max_inner) if hasattr(est, "max_inner") and est.max_inner else 1
    per = int(est.power_iter) + 1 + refit + inner + 1
    steps = rank if est.max_iter is None else min(rank, int(est.max_iter))
    out = {
        "method": "GreedyLowRank",
        "n_rows": m_rows,
        "n_cols": n_cols,
        "n_observed": int(B.nnz or 0),
        "rank": rank,
        "dtype": str(np.dtype(B.dtype)),
        "block_rows": rows_max,
        "n_blocks": int(B.n_blocks),
        "store_bytes": int(store_bytes),
        "resident": bool(resident),
        "gradient_cache": bool(grad_cache),
        "passes_init": 1,
        "iterations": steps,
        "passes_per_iteration": {"typical": int(est.power_iter) + 2, "max": per},
        "max_passes": 1 + steps * per,
        "read_bytes_per_pass": 0 if resident else int(store_bytes),
        "task_alloc_bytes": t,
        **_memory_fields(task, reduce_b, state, int(cached), (n_workers, threads, limit), total),
        "detail": f"n_components={rank}, n_rows={m_rows}, n_cols={n_cols}",
    }
    return _finish(out, lambda r, k: worker_bytes(r, k)[0], limit, rows_max, "n_components", rank)


def maxide_task_bytes(n, d, r, L, nnz_y, itemsize, *, streamed, n_trials, x_bytes=None):
    """Bytes one KernelMaxide / Maxide block task allocates, ``{"features", "grad", "loss"}``
    (block functions only, not their inputs), for a block of ``n`` rows all with an observed
    label (the worst case), ``nnz_y`` observed labels, ``r`` features, ``L`` labels.

    * features (streamed ``F`` only): the rows of ``X`` with an observation (``x_bytes``), the
      kernel block and ``F`` (``2 n r s``), the ``r`` landmark norms and the observed labels
      of those rows (a CSR copy);
    * gradient: the products run on the observed entries only (Numba kernels): the residual
      values and int64 copies of the CSR index (``16 nnz + 8 n``), ``W^T`` in ``F``'s dtype
      and the float64 ``P^T`` (``r L (s + 8)``);
    * loss (per trial, sequentially): the residual, the index copies and ``W^T``.
    """
    s = int(itemsize)
    nnz = int(nnz_y)
    feat = ((x_bytes or 0) + 2 * n * r * s + r * s + 12 * nnz + 8 * (n + 1)) if streamed else 0
    resid = 16 * nnz + 8 * (n + 1)
    grad = resid + r * L * (s + 8)
    loss = resid + r * L * s + 8 * int(n_trials)
    return {"features": int(feat), "grad": int(grad), "loss": int(loss)}


def maxide_estimate(est, XB, YB, *, client=None):
    """The estimate dict of ``KernelMaxide(...).estimate`` / ``Maxide(...).estimate``."""
    n_rows, d = (int(x) for x in XB.shape)
    L = int(YB.shape[1])
    nystrom = hasattr(est, "n_features_map")
    if nystrom:
        r = n_rows if est.n_features_map is None else min(int(est.n_features_map), n_rows)
        size_name = "n_features_map"
    else:
        r = d if est.n_components is None else min(int(est.n_components), d)
        size_name = "n_components"
    s = np.dtype(XB.dtype).itemsize if np.dtype(XB.dtype).kind == "f" else 8
    store_bytes = _input_bytes(XB) + _input_bytes(YB)
    n_workers, threads, limit = _cluster(client)
    budget = engine.DEFAULT_CACHE_BYTES if est.cache_bytes is None else int(est.cache_bytes)
    rows_max, _ = _max_block(XB)

    def worker_bytes(rows, r_):
        streamed = n_rows * r_ * s > budget
        n_trials = int(est.n_trials or (2 if streamed else 1))
        xb, n = _block_bytes(XB, rows)
        yb, _ = _block_bytes(YB, rows)
        nnz_y = int(math.ceil((YB.nnz or 0) * n / max(n_rows, 1)))
        t = maxide_task_bytes(n, d, r_, L, nnz_y, s, streamed=streamed, n_trials=n_trials,
                              x_bytes=xb)
        inp = (xb if streamed else n * r_ * s) + yb
        task = inp + t["features"] + max(t["grad"], t["loss"])
        reduce_b = _reduce_per_worker(XB.n_blocks, max(r_ * L, r_ * r_) + 1, n_workers)
        state = 8 * (d * r_ + (r_ * r_ if nystrom else 0) + n_trials * r_ * L)
        # held on the workers: a cached F, and Y when it is in memory (scattered block by block);
        # a store or Dask Y is read by every pass, not held (measured at 2M x 500: issue 27)
        cache = (0 if streamed else n_rows * r_ * s) + (_input_bytes(YB) if YB.in_memory else 0)
        cached = cache / max(n_workers or 1, 1) if n_workers else 0
        total = _worker_total(n_workers, threads, task, reduce_b, state, cached)
        return total, t, task, reduce_b, state, cached, streamed, n_trials

    total, t, task, reduce_b, state, cached, streamed, n_trials = worker_bytes(None, r)
    iters = int(est.max_iter)
    out = {
        "method": type(est).__name__,
        "n_rows": n_rows,
        "n_features": d,
        "n_labels": L,
        size_name: r,
        "n_observed": int(YB.nnz or 0),
        "dtype": str(np.dtype(XB.dtype)),
        "block_rows": rows_max,
        "n_blocks": int(XB.n_blocks),
        "store_bytes": int(store_bytes),
        "f_cached": not streamed,
        "n_trials": n_trials,
        # label check, (F cache), Gram or X^T X
        "passes_init": 2 + (0 if streamed else 1),
        # a gradient pass and one line-search pass (more while L grows from 1)
        "iterations": iters,
        "passes_per_iteration": {"typical": 2},
        "min_passes": 2 + (0 if streamed else 1) + 2 * iters,
        "read_bytes_per_pass": int(store_bytes) if streamed else int(_input_bytes(YB)),
        "task_alloc_bytes": t,
        **_memory_fields(task, reduce_b, state, int(cached), (n_workers, threads, limit), total),
        "detail": f"{size_name}={r}, n_labels={L}, block_rows={rows_max}, F "
        + ("streamed" if streamed else "cached"),
    }
    if isinstance(getattr(est, "alpha", None), str):  # Maxide(alpha="auto")
        from ooc_lowrank.kernelmaxide.estimator import AUTO_ALPHAS, AUTO_SPLITS

        # one APG and one scoring pass per hold-out and weight, on the shared setup
        out["selection_fits"] = fits = AUTO_SPLITS * len(AUTO_ALPHAS)
        out["min_passes"] += fits * (2 * iters + 1)
    return _finish(out, lambda rw, k: worker_bytes(rw, k)[0], limit, rows_max, size_name, r)


def mvm_task_bytes(n, nnz, n_params, n_factors, dense=False, n_views=1):
    """Bytes one multi-view machine loss/gradient block task allocates (not its inputs).

    Views with a sparse block (the CSR path): the views joined into one float64 CSR matrix
    (``hstack`` and its temporaries: ``2 (12 nnz + 8 (n + 1))``), the signed target (``8 n``),
    the gradient (``8 n_params n_factors``).  Every view dense (the dense path, ``dense=True``):
    the views' sums ``(m, n, k)`` (overwritten in place by the weighted leave-one-out
    products), ``8 n k m``, the target, outputs and loss slopes (``24 n``) and the gradient.
    ``n_factors`` counts the columns of all models (``K k`` for one-vs-rest).  Measured:
    0.9-1.0 of the model."""
    tail = 8 * int(n) + 8 * int(n_params) * int(n_factors)
    if dense:
        return int(8 * int(n) * int(n_factors) * int(n_views) + 16 * int(n) + tail)
    csr = 12 * int(nnz) + 8 * (int(n) + 1)
    return int(2 * csr + tail)


#: Input bytes an estimate may read to calibrate its time model on the user's own data (a
#: store's rows): ``CALIBRATION_FRACTION`` of the input, at least ``CALIBRATION_MIN_BYTES`` (a
#: steady timing) and at most ``CALIBRATION_MAX_BYTES`` (the estimate stays cheap).
CALIBRATION_MAX_BYTES = 64 * 2**20
CALIBRATION_MIN_BYTES = 16 * 2**20
CALIBRATION_FRACTION = 0.01


def calibration_rows(input_bytes, n_rows):
    """Rows of an input of ``input_bytes`` over ``n_rows`` rows a calibration reads (see
    :data:`CALIBRATION_MAX_BYTES`)."""
    budget = min(CALIBRATION_MAX_BYTES, max(CALIBRATION_FRACTION * input_bytes,
                                            CALIBRATION_MIN_BYTES))  # fmt: skip
    return int(min(n_rows, max(1, budget * n_rows // max(int(input_bytes), 1))))


def _mvm_sgd_calibration(est, views, yb, store_bytes):
    """:func:`ooc_lowrank.mvm.core.sgd_calibration` on rows of the store itself (the SGD
    kernel's updates per second depend on the data: a 36 GB generated store ran at 171M
    updates/s where a small synthetic calibration read 40-61M), plus what it read."""
    from .mvm.core import _Layout, sgd_calibration

    n = int(views[0].shape[0])
    rows = calibration_rows(store_bytes, n)
    cal = sgd_calibration(
        views, yb, _Layout([int(v.shape[1]) for v in views]), loss=est._check_params(),
        task=est._task, reg=est.reg, reg_weight=float(est.alpha),
        learning_rate=float(est.learning_rate), n_components=int(est.n_components),
        init_std=float(est.init_std), rows=rows,
    )
    cal["bytes"] = int(store_bytes * cal["rows"] / max(n, 1))
    cal["source"] = (
        f"SGD timed on {cal['rows']} rows of the store ({cal['bytes'] / 2**20:.0f} MiB, "
        f"{len(cal['starts'])} windows spread over it; kernel {cal['kernel_cpu_seconds']:.3f} "
        f"CPU s ({cal['kernel_seconds']:.3f} s wall), reader {cal['reader_cpu_seconds']:.3f} "
        "CPU s from memory), scaled by non-zeros and rows; the reader overlaps the kernel on "
        "a second core; CPU time: the fit's time on cores other processes leave free"
    )
    return cal


def _mvm_lbfgs_calibration(est, views, yb, store_bytes):
    """:func:`ooc_lowrank.mvm.core.lbfgs_calibration` on rows of the store itself: the pass's
    block function is kernel-bound on narrow factors (1M x 3 dense views of 20, k = 10: the
    GEMM-rate model said 0.05 s of compute per pass, the fit's passes took 1.15 CPU s each)."""
    from .mvm.core import _Layout, lbfgs_calibration

    n = int(views[0].shape[0])
    cal = lbfgs_calibration(
        views, yb, _Layout([int(v.shape[1]) for v in views]), loss=est._check_params(),
        task=est._task, n_components=int(est.n_components), init_std=float(est.init_std),
        n_models=1, rows=calibration_rows(store_bytes, n),
    )
    cal["source"] = (
        f"the L-BFGS block function timed on {cal['rows']} rows of the store "
        f"({len(cal['starts'])} windows spread over it; reads {cal['read_cpu_seconds']:.3f} "
        f"and block function {cal['block_cpu_seconds']:.3f} CPU s), scaled by rows, one block "
        "task per core"
    )
    return cal


def mvm_estimate(est, views, yb, *, client=None, calibrate=False):
    """The estimate dict of ``MultiViewMachine*(...).estimate`` for blocked ``views``, ``yb``.

    ``calibrate``: SGD on a store times the fit's own window sweep on a slice of the store
    (:func:`_mvm_sgd_calibration`, ``sgd_calibration`` in the result), L-BFGS on a store (local
    scheduler) its pass's block function (:func:`_mvm_lbfgs_calibration`,
    ``lbfgs_calibration``), which the time model (:func:`rough_time`) then uses instead of the
    machine's synthetic SGD / GEMM / sparse rates."""
    n_rows = int(views[0].shape[0])
    widths = [int(v.shape[1]) for v in views]
    if len(views) == 1 and est.view_sizes is not None:
        widths = [int(w) for w in est.view_sizes]
    P = sum(widths) + len(widths)
    k = int(est.n_components)
    store_bytes = sum(_input_bytes(v) for v in views) + _input_bytes(yb)
    n_workers, threads, limit = _cluster(client)
    rows_max, _ = _max_block(views[0])
    solver = est._resolved_solver(views)
    sgd = solver == "sgd"

    def worker_bytes(rows, k_):
        inp, nnz, n = 0, 0, rows_max if rows is None else int(rows)
        for v in (*views, yb):
            b, n = _block_bytes(v, rows)
            inp += b
        for v in views:
            bn, bnnz = _max_block(v)
            dens = (bnnz / max(bn, 1)) if bnnz is not None else v.shape[1]
            nnz += int(math.ceil(dens * n))
        t = mvm_task_bytes(n, nnz, P, k_, dense=all(v.kind == "dense" for v in views),
                           n_views=len(widths))
        task = inp + t
        reduce_b = 0 if sgd else _reduce_per_worker(views[0].n_blocks, P * k_ + 2, n_workers)
        state = 0 if sgd else 8 * (P * k_ + P)
        total = _worker_total(n_workers, threads, task, reduce_b, state, 0)
        return total, t, task, reduce_b, state

    total, t, task, reduce_b, state = worker_bytes(None, k)
    iters = int(est.n_epochs if sgd else est.max_iter)
    client = int(24 * (P * k + 1))
    if sgd:  # the factors and AdaGrad's sums, and two windows (one read ahead): their view
        # blocks and the views joined as one float64 CSR matrix with the target
        from .mvm.core import SHUFFLE_ROWS

        nw = min(rows_max, SHUFFLE_ROWS)
        window = sum(_block_bytes(v, nw)[0] for v in (*views, yb))
        nnz_w = sum(int(math.ceil(((_max_block(v)[1] or 0) / max(_max_block(v)[0], 1)
                                   if v.kind != "dense" else v.shape[1]) * nw)) for v in views)
        client = int(16 * P * k + 2 * (window + 12 * nnz_w + 16 * nw))
    out = {
        "method": type(est).__name__,
        "solver": solver,
        "n_rows": n_rows,
        "view_sizes": widths,
        "n_factors": k,
        "n_params": P * k + 1,
        "block_rows": rows_max,
        "n_blocks": int(views[0].n_blocks),
        "store_bytes": int(store_bytes),
        "passes_init": 1,
        # SGD: one pass per epoch; L-BFGS: one per evaluation, up to 20 in a line search
        "iterations": iters,
        "passes_per_iteration": {"typical": 1, "max": 1 if sgd else 20},
        "max_passes": 1 + iters * (1 if sgd else 20),
        "read_bytes_per_pass": int(store_bytes),
        # SGD's first pass reads the target only (its mean starts the intercept)
        "init_read_bytes": int(_input_bytes(yb)) if sgd else int(store_bytes),
        "n_nonzeros": int(sum(int(v.nnz or 0) if v.kind != "dense" else n_rows * int(v.shape[1])
                              for v in views)),
        "sparse_views": any(v.kind != "dense" for v in views),
        "task_alloc_bytes": {"loss_grad": int(t)},
        **_memory_fields(task, reduce_b, state, 0, (n_workers, threads, limit), total),
        # SGD runs in the calling process: the factors, AdaGrad's sums, two windows
        "client_bytes": client,
        "detail": f"n_components={k}, {P} factor rows, block_rows={rows_max}",
    }
    if calibrate and all(v.reads is not None for v in (*views, yb)):
        if sgd:
            out["sgd_calibration"] = _mvm_sgd_calibration(est, views, yb, store_bytes)
        elif n_workers is None:  # L-BFGS on the local scheduler (a cluster's tasks: not here)
            out["lbfgs_calibration"] = _mvm_lbfgs_calibration(est, views, yb, store_bytes)
    return _finish(out, lambda rw, kk: worker_bytes(rw, kk)[0], limit, rows_max, "n_components", k)


# ---------------------------------------------------------------------------------------------
# Inductive matrix completion and the semi-supervised clustering built on it (an IMC fit of the
# n x n constraint matrix with both sides the same features).
# ---------------------------------------------------------------------------------------------


def _side_width(kind, B, m):
    """``D``, the feature width of one IMC side: ``d`` (identity), ``2 m`` (Fourier), ``m``."""
    if kind == "identity":
        return int(B.shape[1])
    m = min(int(m), int(B.shape[0]))
    return 2 * m if kind == "fourier" else m


def imc_passes(cg_iter, learns, fused_cols):
    """``(typical, max)`` passes per IMC outer iteration (:func:`ooc_lowrank.imc.core.fit_imc`):
    a W-step (gradient, up to ``cg_iter`` Hessian-vector products, ``P``), the same for H (three
    passes per product when the column side is not fused: store observations), the loss; with
    learned features, the residual pass, per side a feature gradient, Armijo trials (an X-pass
    and a loss pass each; one typical, :data:`MAX_TRIALS` at most) and the new held ``Phi``.
    The typical count assumes CG stops after a third of ``cg_iter`` products."""
    h_grad, h_hvp = (1, 1) if fused_cols else (2, 3)
    cg = int(cg_iter)

    def per(n_cg, trials):
        base = (1 + n_cg + 1) + (h_grad + n_cg * h_hvp + 1) + 1
        if learns:
            base += 1 + 2 * (1 + 2 * trials + 1)
        return base

    return per(max(1, math.ceil(cg / 3)), 1), per(cg, MAX_TRIALS)


def imc_estimate(est, obs, Br, Bc, *, client=None, method=None):
    """The estimate dict of an IMC fit (``InductiveMatrixCompletion`` parameters on ``est``) of
    the blocked observations ``obs`` (n1 x n2) with row / column features ``Br`` / ``Bc``.

    Per worker: ``threads_per_worker`` tasks, each an observation block (CSR: ``nnz_b (8 + 4)``),
    its rows' features (``Br`` block) and held ``Phi`` block (``n_b D1 8``), the residual on its
    observations (``8 nnz_b``) and its ``D x k`` float64 output; float64 reduction buffers of
    ``D k``; the shipped state ``W, H`` (``D k``), ``P, Q`` (``(n1 + n2) k``) and the feature
    parameters (``d m``), all float64; the held ``Phi`` of both sides (float64, when they fit
    the cache budget; split over the workers)."""
    k = int(est.n_components)
    m = int(est.n_features_map)
    n1, n2 = (int(s) for s in obs.shape)
    nnz = int(obs.nnz or 0)
    D1 = _side_width(est.row_map, Br, m)
    D2 = _side_width(est.col_map, Bc, m)
    learns = bool(est.learn_features) and est.row_map != "identity"
    fused_cols = bool(obs.in_memory)
    store_bytes = _input_bytes(obs) + _input_bytes(Br) + _input_bytes(Bc)
    n_workers, threads, limit = _cluster(client)
    budget = engine.DEFAULT_CACHE_BYTES if est.cache_bytes is None else int(est.cache_bytes)
    if limit and n_workers:
        budget = min(budget, int(0.5 * limit * n_workers))
    held = sum(8 * B.shape[0] * D for B, kind, D in
               ((Br, est.row_map, D1), (Bc, est.col_map, D2)) if kind != "identity")  # fmt: skip
    held_ok = held <= budget
    rows_max, _ = _max_block(obs)
    D = max(D1, D2)

    def worker_bytes(rows, k_):
        ob, n = _block_bytes(obs, rows)
        xb, _ = _block_bytes(Br, n)
        xb2, _ = _block_bytes(Bc, n)
        nnz_b = int(math.ceil(nnz * n / max(n1, 1)))
        task = ob + max(xb, xb2) + 8 * n * D + 8 * nnz_b + 8 * D * k_ + 8 * n * k_
        reduce_b = _reduce_per_worker(obs.n_blocks, D * k_ + 1, n_workers)
        params = sum(8 * B.shape[1] * min(m, B.shape[0]) for B, kind in
                     ((Br, est.row_map), (Bc, est.col_map)) if kind != "identity")  # fmt: skip
        state = 8 * ((D1 + D2) * k_ + (n1 + n2) * k_) + params
        cached = (held if held_ok else 0) / max(n_workers or 1, 1) if n_workers else 0
        total = _worker_total(n_workers, threads, task, reduce_b, state, cached)
        return total, task, reduce_b, state, cached

    total, task, reduce_b, state, cached = worker_bytes(None, k)
    typical, most = imc_passes(est.cg_iter, learns, fused_cols)
    iters = int(est.max_iter)
    init = 3 + (0 if not held_ok else sum(k_ != "identity" for k_ in (est.row_map, est.col_map)))

    def d_eff(B):
        return B.shape[1] if B.kind == "dense" else (B.nnz or 0) / max(B.shape[0], 1)

    out = {
        "method": method or type(est).__name__,
        "n_rows": n1,
        "n_cols": n2,
        "n_observed": nnz,
        "n_components": k,
        "n_phi": [D1, D2],
        "block_rows": rows_max,
        "n_blocks": int(obs.n_blocks),
        "store_bytes": int(store_bytes),
        "phi_held": bool(held_ok),
        "passes_init": init,
        "iterations": iters,
        "passes_per_iteration": {"typical": typical, "max": most},
        "max_passes": init + iters * most,
        # observations streamed when not in memory; the features only when Phi is not held
        "read_bytes_per_pass": (0 if obs.in_memory else _input_bytes(obs))
        + (0 if held_ok or (Br.in_memory and Bc.in_memory) else _input_bytes(Br)),
        # a fused pass: Phi Delta and Phi^T (E other) (4 n D k), the residual (4 nnz k), and
        # X U when Phi is not held
        "flops_per_pass": int(4 * (n1 * D1 + nnz) * k
                              + (0 if held_ok else 2 * n1 * d_eff(Br) * min(m, D1))),  # fmt: skip
        **_memory_fields(task, reduce_b, state, int(cached), (n_workers, threads, limit), total),
        "detail": f"n_components={k}, D={D1}/{D2}, block_rows={rows_max}, Phi "
        + ("held" if held_ok else "recomputed per pass"),
    }
    return _finish(out, lambda r, kk: worker_bytes(r, kk)[0], limit, rows_max, "n_components", k)


# ---------------------------------------------------------------------------------------------
# A rough time per pass and per fit (``fit ... --dry-run``): data, compute and scheduler terms
# of docs/scaling.md's model with stated defaults.
# ---------------------------------------------------------------------------------------------

#: Disk read bandwidth assumed when none is given: this machine's direct-I/O read (PERF_NOTES).
DEFAULT_DISK_BYTES_PER_S = 600e6
#: Useful GFLOP/s per core assumed when none is given: a quarter of the dense GIMC rate measured
#: here (83 GFLOP/s per core); sparse and Numba passes are slower per flop.
DEFAULT_GFLOPS_PER_CORE = 20.0
#: Scheduler time per task: threaded scheduler (assumed), distributed (measured here: 5 ms per
#: block of an empty in-memory pass on a 2-process LocalCluster, whose graph had 2.17 tasks per
#: block: the block's task, dask.array's alias of it, the tree's share; ``bench_scheduler.py``).
SECONDS_PER_TASK = {"threads": 1e-4, "distributed": 2.3e-3}
#: Tasks per row block in one pass over a store (issue 27): one task reads the block and runs
#: the block function; a tree adds one step per 7-8 blocks, chains one task per pass.
TASKS_PER_BLOCK = 1.15


def _flops_per_pass(e):
    """The method's arithmetic per pass when its estimate does not give it (see each term)."""
    if "flops_per_pass" in e:
        return int(e["flops_per_pass"])
    n = int(e.get("n_rows") or 0)
    if e["method"] == "GIMC":  # X U and Phi, Gram / A^T Phi per trial, back-propagation
        d, M, D, L, T = e["n_features"], e["n_params"], e["n_phi"], e["n_labels"], e["n_trials"]
        return int(n * (3 * d * M + T * (D * D + L * D) + 2 * D * min(L, D)))
    nnz = int(e.get("n_observed") or 0)
    if "rank" in e:  # GLRL: an inner product of rank terms per observed entry, G v and G^T u
        return int(2 * nnz * (e["rank"] + 2))
    if "view_sizes" in e:  # MVM: per row, the views' sums and the gradient (6 P k)
        return int(6 * n * (sum(e["view_sizes"]) + len(e["view_sizes"])) * e["n_factors"])
    r = e.get("n_features_map", e.get("n_components", 0))  # KernelMaxide / Maxide
    feat = 0 if e.get("f_cached", True) else 2 * n * r * e.get("n_features", 0)
    return int(4 * nnz * r + feat)


#: Machine constants used when none were measured here (:func:`machine_constants`): GEMM per
#: core with two one-thread BLAS calls side by side (quiet runs of bench_scale: 100 GFLOP/s
#: float32), a sparse (CSR x dense) product per core, the multi-view SGD kernel's updates per
#: second (one core; an update is one non-zero or view term times one factor; quiet disk MVM
#: run: 122.6M rows x 28 terms x 10 factors in 300 s per epoch) and the disk's direct reads.
DEFAULT_MACHINE = {
    "gemm_gflops_per_core": {"float32": 100.0, "float64": 50.0},
    "sparse_gflops_per_core": 1.0,
    "sgd_updates_per_second": 1.1e8,
    "disk_bytes_per_second": DEFAULT_DISK_BYTES_PER_S,
    "source": "defaults (no calibration cached)",
}
#: Fraction of the calibrated GEMM rate a streamed GIMC pass reaches (sin/cos, reductions,
#: reading from the page cache; NUS-WIDE shape, quiet: 0.81 of its roofline).
GEMM_EFFICIENCY = 0.8
#: Environment variable naming the machine-constants cache (default
#: ``~/.cache/ooc_lowrank/machine.json``).
MACHINE_ENV = "OOC_LOWRANK_MACHINE"


def machine_cache_path():
    import os

    return os.environ.get(MACHINE_ENV) or os.path.join(
        os.path.expanduser("~"), ".cache", "ooc_lowrank", "machine.json")  # fmt: skip


def _side_by_side(fn, n_threads, repeats=3):
    """Best wall time of ``n_threads`` concurrent calls of ``fn`` under a one-thread BLAS limit
    (how the engine runs block tasks)."""
    import threading
    import time

    from threadpoolctl import threadpool_limits

    best = math.inf
    with threadpool_limits(1, user_api="blas"):
        fn()  # warm up
        for _ in range(repeats):
            ts = [threading.Thread(target=fn) for _ in range(n_threads)]
            t = time.perf_counter()
            for th in ts:
                th.start()
            for th in ts:
                th.join()
            best = min(best, time.perf_counter() - t)
    return best


def _sgd_rate(rows=(20_000, 100_000), nnz_row=25, n_feat=20_000, k=10):
    """Multi-view SGD updates per second: the estimator's epoch on generated CSR views, as the
    difference of two fits of ``rows`` rows (after a small warm-up fit, so compiling is not
    counted; the views are generated before the clock starts), so that a fit's fixed cost
    (setup pass, checks) is not charged to the per-update rate.  Timing one small fit with its
    data generation inside read 40M updates/s where a 36 GB store's epochs ran at ~170M."""
    import time

    import scipy.sparse as sp

    from .mvm import MultiViewMachineRegressor

    rng = np.random.default_rng(0)
    per = (2, 3, nnz_row - 5)

    def views(n):
        out = []
        for z in per:
            idx = rng.integers(0, n_feat, (n, z))
            out.append(sp.csr_matrix((np.ones(n * z, np.float32), idx.ravel(),
                                      z * np.arange(n + 1)), shape=(n, n_feat)))  # fmt: skip
        return out, rng.standard_normal(n)

    def fit(data):
        est = MultiViewMachineRegressor(solver="sgd", n_epochs=1, n_components=k, random_state=0)
        t = time.perf_counter()
        est.fit(*data)
        return time.perf_counter() - t

    fit(views(500))
    small, large = views(rows[0]), views(rows[1])
    dt = fit(large) - fit(small)
    per_fit = (rows[1] - rows[0]) * (nnz_row + len(per)) * k
    return per_fit / dt if dt > 0 else per_fit / fit(large)


def calibrate_machine(cores=None):
    """Measure this machine's constants now (a few seconds): GEMM GFLOP/s per core (float32 and
    float64, ``cores`` one-thread products side by side), CSR x dense GFLOP/s per core, the
    multi-view SGD kernel's updates per second.  The disk's bandwidth is not measured here (it
    needs a file larger than the page cache): :data:`DEFAULT_DISK_BYTES_PER_S` unless given."""
    import os
    import time

    import scipy.sparse as sp

    cores = int(cores or os.cpu_count() or 1)
    rng = np.random.default_rng(0)
    out = {"gemm_gflops_per_core": {}}
    for dt in ("float32", "float64"):
        A = rng.standard_normal((2048, 1024)).astype(dt)
        B = rng.standard_normal((1024, 512)).astype(dt)
        t = _side_by_side(lambda A=A, B=B: A @ B, cores)
        out["gemm_gflops_per_core"][dt] = 2.0 * 2048 * 1024 * 512 / t / 1e9
    rows, z, width = 20_000, 30, 100_000  # CSR by hand (sp.random permutes rows x cols ids)
    S = sp.csr_matrix((rng.random(rows * z, dtype=np.float32),
                       np.sort(rng.integers(0, width, (rows, z)), axis=1).ravel(),
                       z * np.arange(rows + 1)), shape=(rows, width))  # fmt: skip
    U = rng.standard_normal((100_000, 256)).astype(np.float32)
    t = _side_by_side(lambda: S @ U, 1)
    out["sparse_gflops_per_core"] = 2.0 * S.nnz * 256 / t / 1e9
    out["sgd_updates_per_second"] = _sgd_rate()
    out["disk_bytes_per_second"] = DEFAULT_DISK_BYTES_PER_S
    out["cores"] = cores
    out["source"] = f"calibrated {time.strftime('%Y-%m-%d %H:%M:%S')}"
    return out


def machine_constants(*, calibrate=False, recalibrate=False, cache=True):
    """The machine constants of the time model: the cached calibration
    (:func:`machine_cache_path`), else, with ``calibrate``, a new one (saved when ``cache``),
    else :data:`DEFAULT_MACHINE`.  ``recalibrate`` measures again whatever is cached."""
    import json
    import os

    path = machine_cache_path()
    if not recalibrate:
        try:
            with open(path) as fh:
                return {**DEFAULT_MACHINE, **json.load(fh)}
        except (OSError, ValueError):
            pass
    if not (calibrate or recalibrate):
        return dict(DEFAULT_MACHINE)
    m = {**DEFAULT_MACHINE, **calibrate_machine()}
    if cache:
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as fh:
                json.dump(m, fh, indent=1)
        except OSError:  # a read-only home: the constants are still returned
            pass
    return m


def work_per_pass(e):
    """The arithmetic of one pass of the fit ``e`` by kind: ``{"gemm": flop, "sparse": flop,
    "sgd": updates, "other": flop, "driver_per_iteration": flop}`` (GEMM: dense BLAS products;
    sparse: CSR x dense; sgd: the multi-view SGD kernel's non-zero x factor updates; other: the
    methods without a kind-aware model, at the generic rate; driver: the calling process's
    solves per iteration, e.g. GIMC's ``W``).  GIMC's pass is the mean of its statistics pass
    (``X U``, ``Phi^T Phi`` by syrk per trial, ``A^T Phi``) and its gradient pass (``X U``,
    ``Phi (W W^T)`` or the residual, ``X^T Xi``)."""
    w = {"gemm": 0.0, "sparse": 0.0, "sgd": 0.0, "other": 0.0, "driver_per_iteration": 0.0}
    n = int(e.get("n_rows") or 0)
    if e.get("method") == "GIMC" and "x_kind" in e:
        d, M, D, L, T = e["n_features"], e["n_params"], e["n_phi"], e["n_labels"], e["n_trials"]
        dense = e["x_kind"] == "dense"
        xu = 2.0 * (n * d if dense else e["x_nnz"]) * M  # X U, and X^T Xi
        wwt = 2.0 * n * D * D if 2 * L >= D else 4.0 * n * D * L
        gemm = T * n * D * D + wwt  # syrk per trial; Phi (W W^T) / residual
        w["gemm" if dense else "sparse"] = (2 * xu + xu) / 2  # X U twice, X^T Xi once
        w["gemm"] += gemm / 2
        w["sparse"] += 2.0 * T * e.get("y_nnz", 0) * D / 2  # A^T Phi per trial
        w["driver_per_iteration"] = D**3 / 3 + 2.0 * D * D * L  # Cholesky, then W for L labels
        return w
    if "view_sizes" in e and e.get("solver") == "sgd":
        views = len(e["view_sizes"])
        w["sgd"] = float(e.get("n_nonzeros", 0) + n * views) * e["n_factors"]
        return w
    if "view_sizes" in e and "n_nonzeros" in e:  # L-BFGS: forward and gradient, 6 flop per term
        P = sum(e["view_sizes"]) + len(e["view_sizes"])
        key = "sparse" if e.get("sparse_views") else "gemm"
        w[key] = 6.0 * (e["n_nonzeros"] if key == "sparse" else n * P) * e["n_factors"]
        return w
    w["other"] = float(_flops_per_pass(e))
    return w


def rough_time(e, *, disk_bytes_per_s=None, gflops_per_core=None, cores=None, machine=None):
    """``{"seconds_per_pass", "passes", "seconds_per_fit", ..., "assumptions"}`` for the
    estimate dict ``e``.

    Per pass ``max(read bytes / bandwidth, compute) + TASKS_PER_BLOCK x blocks x seconds per
    task`` (reading and compute overlap), compute from :func:`work_per_pass` at the machine's
    rates (``machine``, default :func:`machine_constants`: a cached calibration or
    :data:`DEFAULT_MACHINE`): GEMM at :data:`GEMM_EFFICIENCY` of ``cores`` x the GEMM rate of the
    input's dtype, sparse products at ``cores`` x the sparse rate, multi-view SGD on one core,
    other methods at ``gflops_per_core`` (default :data:`DEFAULT_GFLOPS_PER_CORE`; given, it also
    replaces the GEMM rate).  The fit: ``passes_init`` setup passes (reading
    ``init_read_bytes`` when the method says so) + ``iterations x typical`` passes + the
    driver's solves per iteration at the GEMM rate of all cores; ``seconds_per_pass`` is the
    fit's time over its passes.  The assumptions are returned."""
    import os

    mc = dict(machine or machine_constants())
    bw = float(disk_bytes_per_s or mc.get("disk_bytes_per_second") or DEFAULT_DISK_BYTES_PER_S)
    gf = float(gflops_per_core or DEFAULT_GFLOPS_PER_CORE)
    dtype = str(e.get("dtype") or "float64")
    gemm_rate = float(gflops_per_core or mc["gemm_gflops_per_core"].get(
        dtype, mc["gemm_gflops_per_core"]["float64"]))  # fmt: skip
    dist = e.get("n_workers") is not None
    if cores is None:
        cores = (e["n_workers"] or 1) * (e.get("threads_per_worker") or 1) if dist else (
            os.cpu_count() or 1)  # fmt: skip
    per_task = SECONDS_PER_TASK["distributed" if dist else "threads"]
    read = int(e.get("read_bytes_per_pass") or 0)
    w = work_per_pass(e)
    t_gemm = w["gemm"] / (cores * gemm_rate * GEMM_EFFICIENCY * 1e9)
    t_sparse = w["sparse"] / (cores * float(mc["sparse_gflops_per_core"]) * 1e9)
    cal = e.get("sgd_calibration")  # timed on the input's own rows (a store's slice)
    sgd_rate = float(cal["updates_per_second"] if cal else mc["sgd_updates_per_second"])
    t_sgd = w["sgd"] / sgd_rate
    t_other = w["other"] / (cores * gf * 1e9)
    tasks = TASKS_PER_BLOCK * int(e.get("n_blocks") or 1)
    lcal = e.get("lbfgs_calibration")  # the L-BFGS block task timed on the store's own rows
    t_cal = 0.0
    if lcal:  # replaces the flop count at generic rates: one block task per core
        t_gemm = t_sparse = 0.0
        t_cal = lcal["cpu_seconds_per_row"] * int(e["n_rows"]) / max(1, min(int(cores), int(tasks)))
    t_flops = t_gemm + t_sparse + t_sgd + t_other + t_cal
    n_readers = (e["n_workers"] or 1) if dist else 1
    t_read = read / (bw * n_readers)
    t_sched = tasks * per_task
    per_pass = max(t_read, t_flops) + t_sched
    ppi = e.get("passes_per_iteration", {})
    iters = e.get("iterations")
    if iters is None:
        iters = e.get("max_iter", 0)
    init = int(e.get("passes_init", 1))
    passes = init + int(iters) * int(ppi.get("typical", 1))
    init_read = int(e.get("init_read_bytes", read))
    if "init_read_bytes" in e:  # a setup pass that only reads (e.g. the target's mean)
        t_init = init_read / (bw * n_readers) + t_sched
    else:
        t_init = per_pass
    t_driver = w["driver_per_iteration"] / (cores * gemm_rate * 1e9)
    total = init * t_init + (passes - init) * per_pass + int(iters) * t_driver
    where = (f"{e['n_workers']} workers" if dist else "the local threaded scheduler")
    out = {
        "seconds_per_pass": total / max(passes, 1),
        "read_seconds_per_pass": t_read,
        "compute_seconds_per_pass": t_flops,
        "compute_seconds_by_kind": {"gemm": t_gemm, "sparse": t_sparse, "sgd": t_sgd,
                                    "other": t_other, "calibrated": t_cal},  # fmt: skip
        "driver_seconds_per_iteration": t_driver,
        "scheduler_seconds_per_pass": t_sched,
        "flops_per_pass": int(w["gemm"] + w["sparse"] + w["other"]) or int(w["sgd"]),
        "work_per_pass": w,
        "tasks_per_pass": tasks,
        "passes": passes,
        "seconds_per_fit": total,
        "machine": mc,
        "assumptions": (
            f"disk {bw / 1e6:.0f} MB/s per worker; {gf:g} GFLOP/s per core x {cores} cores "
            f"(generic), GEMM {gemm_rate:.3g} x {GEMM_EFFICIENCY:g} and sparse "
            f"{float(mc['sparse_gflops_per_core']):.3g} GFLOP/s per core, SGD {sgd_rate:.3g} "
            f"updates/s on one core ({cal['source'] if cal else mc.get('source')}); "
            + (f"{lcal['source']}; " if lcal else "")
            + f"{per_task * 1e3:g} ms per task on "
            f"{where}, {TASKS_PER_BLOCK} tasks per block; reading and compute overlap; "
            f"{passes} passes ({init} setup + {iters} iterations x "
            f"{ppi.get('typical', 1)} typical); a rough guide from measured constants"
        ),
    }
    gcal = e.get("time_calibration")
    if e.get("method") == "GIMC" and gcal and "skipped" not in gcal:  # the passes were timed
        out.update(_gimc_calibrated_time(e, gcal, t_read, t_sched, cores, bw))
    return out


def gimc_pass_seconds(e, cal, cores):
    """Seconds of one GIMC gradient pass and one statistics pass (``n_trials`` trials) over all
    rows of the estimate ``e``, from its slice calibration ``cal``
    (:func:`_gimc_time_calibration`): the steady block time scaled by rows over the passes'
    parallelism (the engine's chains of each pass, at most ``cores``), the accumulator's first
    touch at the measured rate, and the driver's work around the pass."""
    d, M, D, L, T = e["n_features"], e["n_params"], e["n_phi"], e["n_labels"], e["n_trials"]
    nb, scale = int(e["n_blocks"]), e["n_rows"] / max(cal["rows"], 1)
    acc_s = np.dtype(e["dtype"]).itemsize if cal["big"] else 8
    fresh = float(cal["fresh_bytes_per_second"])
    sizes = {"grad": (d + 1) * M, "stats": T * (D * D + L * D)}
    out = {}
    for kind, size in sizes.items():
        # accumulating passes (the gradient; the statistics in the large-state mode) run on
        # engine._n_chains chains; the other statistics pass on chains when its block output
        # is large, else a tree (every core)
        acc = kind == "grad" or cal["big"]
        chained = acc or 8 * size >= engine.CHAIN_BYTES
        par = engine._n_chains(nb, size, acc) if chained else nb
        par = max(1, min(int(cores), par))
        first_touch = size * acc_s / fresh if acc else 0.0
        out[kind] = (cal[f"{kind}_block_seconds"] * scale / par + first_touch
                     + cal[f"{kind}_driver_seconds"])  # fmt: skip
    return out["grad"], out["stats"]


def _gimc_calibrated_time(e, cal, t_read, t_sched, cores, bw):
    """:func:`rough_time` of a GIMC estimate with a slice calibration: per iteration a
    gradient pass, :data:`TYPICAL_TRIALS` trials (one statistics pass per ``n_trials``) each
    judged by a W-step, and the accepted step; the initial statistics pass and ``U``'s first
    touch before them.  Reading overlaps compute (a pass takes the longer)."""
    T = int(e["n_trials"])
    grad, stats = gimc_pass_seconds(e, cal, cores)
    grad, stats = max(grad, t_read) + t_sched, max(stats, t_read) + t_sched
    trial = stats / T + cal["judge_seconds"]  # one more trial, on average
    per_iter = grad + TYPICAL_TRIALS * trial + cal["step_seconds"]
    d, M = e["n_features"], e["n_params"]
    sdt = np.dtype(e["dtype"]).itemsize if cal["big"] else 8
    first = float(cal.get("first_touch_bytes_per_second") or cal["fresh_bytes_per_second"])
    setup = d * M * sdt / first + stats + cal["judge_seconds"]
    iters = e.get("iterations")
    iters = int(e.get("max_iter", 0) if iters is None else iters)
    passes = 1 + iters * (1 + TYPICAL_TRIALS / T)
    total = setup + iters * per_iter
    slow = total + iters * (SLOW_SEARCH_TRIALS - TYPICAL_TRIALS) * trial
    return {
        "seconds_per_pass": total / max(passes, 1),
        "read_seconds_per_pass": t_read,
        "compute_seconds_per_pass": (grad + stats) / 2,
        "grad_pass_seconds": grad,
        "stats_pass_seconds": stats,
        "seconds_per_trial": trial,
        "seconds_per_iteration": per_iter,
        "setup_seconds": setup,
        "trials_per_iteration": TYPICAL_TRIALS,
        "trials_per_iteration_slow_search": SLOW_SEARCH_TRIALS,
        "seconds_per_fit_slow_search": slow,
        "driver_seconds_per_iteration": cal["grad_driver_seconds"] + cal["step_seconds"]
        + TYPICAL_TRIALS * cal["judge_seconds"],
        "scheduler_seconds_per_pass": t_sched,
        "passes": passes,
        "iterations": iters,
        "seconds_per_fit": total,
        "calibrated": True,
        "assumptions": (
            f"{cal['source']}; {TYPICAL_TRIALS:g} line-search trials per iteration (the first "
            f"trial accepted in most iterations; each further trial costs {trial:.3g} s; "
            f"{slow:.3g} s at {SLOW_SEARCH_TRIALS:g} trials per iteration, the most a recorded "
            "fit needed), "
            f"{iters} iterations (max_iter: tol may stop the fit earlier, which no estimate "
            "can know; seconds_per_iteration is the cost of each); disk "
            f"{bw / 1e6:.0f} MB/s per worker, reading and compute overlap; the machine's "
            "GFLOP/s per core rates are not used (flops_per_pass: for reference)"
        ),
    }
