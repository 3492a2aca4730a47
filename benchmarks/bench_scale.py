"""Scale benchmarks of issue 25: the GIMC paper's own sizes, and stores larger than RAM.

Every size is an argument; the defaults are the full sizes of the issue.  Scenarios:

``nuswide``
    NUS-WIDE-shaped dense multi-label data (``generate_multilabel``: planted RBF label
    structure, so P@k on the generated test rows means something), GIMC-LFF, ``--iters``
    iterations, in memory.  Reports total time, passes, seconds per steady iteration, the
    roofline of one iteration (its BLAS products timed in the same run, two one-thread BLAS
    calls side by side as the engine runs them) and their ratio, P@1/3/5.
``delicious``
    Delicious-large-shaped sparse data (written here: a topic model, power-law label and
    feature frequencies, labels mostly from the row's topic), GIMC ``features="both"``.
    Reports time, passes, peak RSS, top-k prediction time of the test rows, P@1/3/5.
    ``estimate()`` times the fit's passes on a slice of the store (``time_calibration``);
    ``estimate_vs_measured`` compares its model for the measured iterations, for the
    measured passes and for ``--iters``.
``disk-gimc`` / ``disk-mvm``
    A store of ``--gb`` gigabytes fitted from disk: GIMC-LFF (``--iters``) or
    ``MultiViewMachineRegressor(solver="sgd")`` (``--epochs``).  The free disk is checked before
    anything is written (refused unless the store fits with 10 % to spare) and the store is
    deleted afterwards (``--keep`` keeps it).  Reports seconds per pass, bytes read from disk per
    pass (``/proc/self/io``), the disk's direct-read bandwidth (``O_DIRECT`` reads of the
    store's own chunk files, same run), the compute-only time of a pass (the same fit on a
    page-cache-resident slice of ``--slice-gb``, scaled to the store's rows), peak RSS, the
    ratio pass / max(compute, disk), and the rows / non-zeros read per pass against the
    store's.  Below RAM size (validation runs), ``--cold`` drops the store's pages before every
    pass (``storage.drop_page_cache``) so reads still come from disk.
``codecs``
    Decompression throughput of none / lz4 / zstd (numcodecs, as zarr v3 codecs use) on the
    array kinds of a store (dense float32 features, CSR indices and data, observation
    arrays) against this disk's direct-read bandwidth: compression pays only where decoding
    is faster than the disk and the ratio is well above 1.

Each scenario prints ``estimate()`` and its time model (``_estimate.rough_time`` with the
machine's GEMM / sparse / SGD rates measured in the same run, and the disk scenarios' measured
direct-read bandwidth) before its fit, and stores ``estimate_vs_measured`` (fit seconds, passes,
the fit's own memory: its peak RSS above the RSS it started from, ``FitPeakRSS``; goal: within
1.5x; the disk scenarios also seconds per pass, GIMC's like-with-like comparisons and, for
multi-view SGD, the model against the fit thread's CPU seconds: the kernel's thread, whose
calibration counts CPU time, so a busy machine's wall time can be told apart).  The disk
scenarios check that every pass read each array it touched whole (rows and
non-zeros equal to the store's; exit status 1 otherwise).  The multi-view store is sized from a
generated sample's bytes per row.
Results: ``benchmarks/results/scale_<scenario>.json`` (overwritten).

    python benchmarks/bench_scale.py nuswide                        # ~10-30 min
    python benchmarks/bench_scale.py nuswide --rows 20000 --test-rows 2000 --iters 3 --m 100
    python benchmarks/bench_scale.py disk-gimc --gb 36 --workdir /work/tmp_scale
    python benchmarks/bench_scale.py disk-gimc --gb 1 --cold      # validation size
    python benchmarks/bench_scale.py disk-mvm --gb 2 --estimate-only \
        --compare benchmarks/results/scale_disk_mvm.json   # estimate() vs the recorded 36 GB fit
    python benchmarks/bench_scale.py delicious --test-rows 20000 --estimate-only \
        --compare benchmarks/results/scale_delicious.json  # the same for the recorded GIMC fit
    python benchmarks/bench_scale.py delicious --rows 20000 --test-rows 2000 --iters 3  # proxy
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import mmap
import multiprocessing as mp
import os
import resource
import shutil
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
RESULTS = os.path.join(HERE, "results")


def log(*a):
    print(*a, flush=True)


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class FitPeakRSS:
    """Peak RSS of this process over a span (the fit), not counting what came before (store
    generation, opening): resets the kernel's high-water mark (``/proc/self/clear_refs`` 5,
    Linux >= 4.0) at ``start`` and reads ``VmHWM`` at ``stop``; where the reset is refused, a
    sampling thread (psutil, every 20 ms) takes the peak instead.  ``rss_start``: RSS when the
    span began (the process's own share before the fit)."""

    def __init__(self):
        import psutil

        self._proc, self._stop, self._thread, self.method = psutil.Process(), None, None, None

    @staticmethod
    def _status(key):
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
        raise KeyError(key)

    def start(self):
        self.rss_start = int(self._proc.memory_info().rss)
        try:
            with open("/proc/self/clear_refs", "w") as fh:
                fh.write("5")
            self._status("VmHWM")
            self.method = "VmHWM after clear_refs"
            return self
        except (OSError, KeyError):
            pass
        self.method, self._peak, self._stop = "psutil sampling (20 ms)", self.rss_start, \
            threading.Event()

        def sample():
            while not self._stop.wait(0.02):
                self._peak = max(self._peak, int(self._proc.memory_info().rss))

        self._thread = threading.Thread(target=sample, daemon=True)
        self._thread.start()
        return self

    def stop(self):
        """Peak RSS (bytes) since :meth:`start`."""
        if self._thread is None:
            self.peak = self._status("VmHWM")
        else:
            self._stop.set()
            self._thread.join()
            self.peak = max(self._peak, int(self._proc.memory_info().rss))
        return self.peak


def machine_now(disk_bytes_per_second=None):
    """The time model's machine constants measured in this run (not the cached ones: the
    comparison must use the machine as it is now), with this run's disk bandwidth."""
    from ooc_lowrank._estimate import machine_constants

    mc = machine_constants(recalibrate=True, cache=False)
    if disk_bytes_per_second:
        mc["disk_bytes_per_second"] = float(disk_bytes_per_second)
        mc["source"] += "; disk measured in this run"
    log("machine:", json.dumps(_jsonable({k: v for k, v in mc.items()})))
    return mc


def warm_up_gimc():
    """A tiny GIMC fit first: the process's one-time costs (kernels loaded or compiled, the
    block thread pool, BLAS buffers; about 100-150 MiB) are then not counted as the measured
    fit's time and memory (the whole-process peak RSS is reported too)."""
    import numpy as np
    import scipy.sparse as sp

    from ooc_lowrank import GIMC

    rng = np.random.default_rng(0)
    X = rng.standard_normal((300, 20)).astype(np.float32)
    Y = sp.csr_matrix((np.ones(300, np.float32), rng.integers(0, 5, 300), np.arange(301)),
                      shape=(300, 5))
    GIMC(n_features_map=8, max_iter=2, random_state=0).fit(X, Y)
    GIMC(n_features_map=8, max_iter=2, random_state=0).fit(sp.csr_matrix(X), Y)


def predict(e, mc):
    """Print and return the time model of the estimate ``e`` before its fit."""
    from ooc_lowrank._estimate import rough_time

    t = rough_time(e, machine=mc)
    log(f"estimate before the fit: {t['seconds_per_fit']:.1f} s ({t['passes']} passes, "
        f"{t['seconds_per_pass']:.2f} s per pass: read {t['read_seconds_per_pass']:.2f}, compute "
        f"{t['compute_seconds_per_pass']:.2f}, driver {t['driver_seconds_per_iteration']:.2f} "
        f"per iteration); memory {e['worker_bytes'] / 2**20:.0f} MiB above the process")
    return t


def versus(estimated, measured):
    """``{"estimate", "measured", "ratio"}`` (ratio measured / estimate; goal within 1.5x)."""
    r = measured / estimated if estimated and measured is not None else None
    return {"estimate": estimated, "measured": measured, "ratio": r,
            "within_1_5x": None if r is None else bool(1 / 1.5 <= r <= 1.5)}


def gimc_time_vs_measured(e, mc, total, n_iter, n_passes):
    """The GIMC time model of ``e`` against a measured fit (``total`` seconds, ``n_iter``
    iterations, ``n_passes`` passes), like with like: the estimate for the measured number of
    iterations (setup + seconds per iteration x iterations: tol stopped the fit, which no
    estimate knows), for the measured passes (the same, with the measured trials instead of
    the typical count: checks the time per pass alone), and for ``max_iter``; also the model
    without the slice calibration (the machine's synthetic rates)."""
    from ooc_lowrank._estimate import rough_time

    t = rough_time(e, machine=mc)
    out = {"seconds_fit_max_iter": versus(t["seconds_per_fit"], total)}
    if t.get("calibrated"):
        T = int(e["n_trials"])
        trials = (n_passes - 1 - n_iter) * T  # at most: the last pass of a search may stop early
        per_iter = t["seconds_per_iteration"] - t["trials_per_iteration"] * t["seconds_per_trial"]
        out["seconds_fit_measured_iterations"] = versus(
            t["setup_seconds"] + n_iter * t["seconds_per_iteration"], total)
        out["seconds_fit_measured_passes"] = versus(
            t["setup_seconds"] + n_iter * per_iter + trials * t["seconds_per_trial"], total)
        out["passes_measured_iterations"] = versus(
            1 + n_iter * (1 + t["trials_per_iteration"] / T), n_passes)
        out["seconds_per_iteration_estimate"] = t["seconds_per_iteration"]
        out["seconds_per_iteration_measured"] = (total - t["setup_seconds"]) / max(n_iter, 1)
    e0 = {k: v for k, v in e.items() if k != "time_calibration"}
    t0 = rough_time({**e0, "iterations": n_iter}, machine=mc)
    out["seconds_fit_synthetic_rate"] = versus(t0["seconds_per_fit"], total)  # n_iter iters
    out["time_model"] = t
    return out


@contextlib.contextmanager
def gimc_fit_result():
    """Keep the ``gimc.core.FitResult`` of the GIMC fits run inside (a dict, ``"result"`` the
    last): its Armijo trials per iteration (``trials``) and accepted steps, which the estimator
    does not keep."""
    from ooc_lowrank.gimc import core

    got, orig = {}, core.fit_gimc

    def fit(*args, **kwargs):
        got["result"] = orig(*args, **kwargs)
        return got["result"]

    core.fit_gimc = fit
    try:
        yield got
    finally:
        core.fit_gimc = orig


def search_record(res):
    """The line search of a fit: trials per iteration, their mean and the accepted steps."""
    return {"trials": list(res.trials),
            "trials_per_iteration": sum(res.trials) / max(len(res.trials), 1),
            "step_sizes": [float(s) for s in res.step_sizes]}


def _fit_memory_estimate(e):
    """Bytes the estimate says the fit adds to the calling process (local scheduler: the
    worker's tasks and state; multi-view SGD: its epochs run in the calling process, the
    factors and two windows, ``client_bytes``)."""
    if e.get("solver") == "sgd":
        return int(e["client_bytes"])
    return max(int(e.get("worker_bytes") or 0), int(e.get("client_bytes") or 0))


def _jsonable(o):
    import numpy as np

    if isinstance(o, dict):
        return {str(k): _jsonable(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_jsonable(v) for v in o]
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    return o


def save(name, out, path=None):
    path = path or os.path.join(RESULTS, f"scale_{name}.json")
    with open(path, "w") as fh:
        json.dump(_jsonable(out), fh, indent=1)
    log(f"wrote {path}")


def in_child(fn, *args):
    """Run ``fn(*args)`` in a spawned process (generation must not count in this one's peak RSS)."""
    ctx = mp.get_context("spawn")
    p = ctx.Process(target=fn, args=args)
    p.start()
    p.join()
    if p.exitcode != 0:
        raise RuntimeError(f"{fn.__name__} failed in its child process (exit {p.exitcode})")


# ---------------------------------------------------------------------------------------------
# measurements shared by the scenarios
# ---------------------------------------------------------------------------------------------


def side_by_side(fn, n_threads=2, repeats=3):
    """Best wall time of ``n_threads`` concurrent calls of ``fn`` (one BLAS thread each, as
    the engine runs block tasks): the calibration's own timer."""
    from ooc_lowrank._estimate import _side_by_side

    return _side_by_side(fn, n_threads, repeats)


def gimc_roofline(n_rows, d, m, block_rows, dtype="float32", seed=0):
    """Seconds of the BLAS products of one steady GIMC-LFF iteration (a gradient pass and a
    one-trial line-search pass) over ``n_rows`` rows, timed on ``block_rows``-row blocks here:
    per row ``X U`` (the line-search pass; the gradient pass reuses the features it kept),
    ``Phi^T Phi`` (syrk), ``Phi (W W^T)``, ``X^T Xi``; the roofline ignores sin/cos, reading
    and reductions."""
    import numpy as np

    rng = np.random.default_rng(seed)
    D = 2 * m
    b = int(min(block_rows, n_rows))
    X = rng.standard_normal((b, d), dtype=np.float32).astype(dtype)
    U = rng.standard_normal((d, m), dtype=np.float32).astype(dtype)
    Phi = rng.standard_normal((b, D), dtype=np.float32).astype(dtype)
    WWt = rng.standard_normal((D, D), dtype=np.float32).astype(dtype)
    Xi = rng.standard_normal((b, m), dtype=np.float32).astype(dtype)
    ops = {
        "X@U": (lambda: X @ U, 2.0 * b * d * m, 1),  # stats pass (kept Phi: not gradient)
        "Phi^T Phi (syrk)": (lambda: Phi.T @ Phi, 1.0 * b * D * D, 1),
        "Phi@WWt": (lambda: Phi @ WWt, 2.0 * b * D * D, 1),
        "X^T Xi": (lambda: X.T @ Xi, 2.0 * b * d * m, 1),
    }
    for f, _, _ in ops.values():  # warm up
        f()
    scale = n_rows / b
    parts, total, flops = {}, 0.0, 0.0
    for name, (f, fl, times) in ops.items():
        t = side_by_side(f) / 2.0  # two blocks in that wall time
        parts[name] = {"gflops": fl / t / 1e9, "seconds_per_iteration": t * scale * times}
        total += t * scale * times
        flops += fl * scale * times
    return {"seconds": total, "flop": flops, "gflops": flops / total / 1e9, "parts": parts,
            "block_rows": b}


def _drop_file_pages(paths):
    """Flush and drop ``paths`` from the page cache (as ``storage.drop_page_cache`` does for a
    store), so the next read of them comes from the disk."""
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def _spread(paths, limit_bytes):
    """Every k-th of ``paths`` (in name order: all arrays, start to end of the rows), about
    ``limit_bytes`` in all."""
    paths = sorted(paths)
    total = sum(os.path.getsize(p) for p in paths)
    return paths[::max(1, math.ceil(total / max(limit_bytes, 1)))]


def direct_read_bandwidth(paths, limit_bytes=2 << 30, piece=16 << 20):
    """Bytes / second read with ``O_DIRECT`` (no page cache) from ``paths`` (up to
    ``limit_bytes``), as ``dd iflag=direct`` would; None where O_DIRECT is refused.

    The files read are spread over ``paths`` (every k-th in name order) and dropped from the
    page cache first (``O_DIRECT`` flushes dirty pages but may still be served from a cache
    below the guest: a store just written on a VM's disk read at 1436 MB/s this way where
    ``dd`` of an older file reads ~620 MB/s).  Also returned: ``cold_buffered``, ordinary
    reads of every other spread file after dropping its pages (how a fit reads chunk files:
    whole files through the page cache), ``disk_read_bytes`` from ``/proc/self/io`` for both
    (what the disk really served) and ``files``."""
    if not hasattr(os, "O_DIRECT"):
        return None
    from ooc_lowrank.storage import process_read_bytes

    files = _spread(paths, 2 * limit_bytes)
    direct, buffered = files[::2], files[1::2]
    _drop_file_pages(files)
    buf = mmap.mmap(-1, piece)  # page-aligned, as O_DIRECT needs
    done, t, r0 = 0, time.perf_counter(), process_read_bytes()
    try:
        for p in direct:
            fd = os.open(p, os.O_RDONLY | os.O_DIRECT)
            try:
                off = 0
                while done < limit_bytes:
                    n = os.preadv(fd, [buf], off)
                    done += n
                    off += n
                    if n < piece:
                        break
            finally:
                os.close(fd)
            if done >= limit_bytes:
                break
    except OSError as e:
        log(f"O_DIRECT reads refused ({e}); no direct-read bandwidth")
        return None
    dt = time.perf_counter() - t
    r1 = process_read_bytes()
    got, t2 = 0, time.perf_counter()
    for p in buffered:
        with open(p, "rb", buffering=0) as fh:
            while chunk := fh.read(piece):
                got += len(chunk)
        if got >= limit_bytes:
            break
    dt2 = time.perf_counter() - t2
    r2 = process_read_bytes()
    return {"bytes": done, "seconds": dt, "bytes_per_second": done / dt,
            "disk_read_bytes": None if r0 is None else r1 - r0,
            "cold_buffered": {"bytes": got, "seconds": dt2,
                              "bytes_per_second": got / dt2 if got else None,
                              "disk_read_bytes": None if r0 is None else r2 - r1},
            "files": len(files)}


def chunk_files(url):
    out = []
    for d, _, files in os.walk(url):
        out += [os.path.join(d, f) for f in files if "/c/" in os.path.join(d, f) + "/"]
    return sorted(out, key=os.path.getsize, reverse=True)


def du(url):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(url) for f in fs)


def check_disk(workdir, need_bytes, what):
    free = shutil.disk_usage(workdir).free
    if need_bytes * 1.1 > free:
        raise SystemExit(
            f"--gb: the {what} store needs {need_bytes / 1e9:.1f} GB and 10 % to spare "
            f"({need_bytes * 1.1 / 1e9:.1f} GB) but {workdir} has {free / 1e9:.1f} GB free; "
            "pass a smaller --gb or a --workdir on a larger disk"
        )
    return free


class ReadCounter:
    """Counts rows and non-zeros read through ``ArrayHandle.read`` per array (this process)."""

    def __init__(self):
        from ooc_lowrank import storage

        self._cls, self._orig = storage.ArrayHandle, storage.ArrayHandle.read
        self.rows, self.nnz, self.ranges = {}, {}, {}
        self._lock = threading.Lock()
        counter = self

        def read(handle, start=0, stop=None):
            out = counter._orig(handle, start, stop)
            with counter._lock:
                k = handle.name
                counter.rows[k] = counter.rows.get(k, 0) + int(out.shape[0])
                counter.nnz[k] = counter.nnz.get(k, 0) + int(getattr(out, "nnz", out.size))
                r = counter.ranges.setdefault(k, {})
                key = (int(start), int(start) + int(out.shape[0]))
                r[key] = r.get(key, 0) + 1
            return out

        self._cls.read = read

    def snapshot(self):
        with self._lock:
            return dict(self.rows), dict(self.nnz)

    def mark(self, passes):
        """Append the rows and non-zeros read per array since the last mark to ``passes``."""
        rows, nnz = self.snapshot()
        r0, z0 = getattr(self, "_last", ({}, {}))
        passes.append({"rows": {k: v - r0.get(k, 0) for k, v in rows.items() if v - r0.get(k, 0)},
                       "nnz": {k: v - z0.get(k, 0) for k, v in nnz.items() if v - z0.get(k, 0)}})
        self._last = (rows, nnz)

    def min_reads_per_row(self, name, n_rows):
        """How many times every row of ``name`` was read, at least (0: some row never)."""
        import numpy as np

        diff = np.zeros(n_rows + 1, np.int64)
        for (s, e), c in self.ranges.get(name, {}).items():
            diff[s] += c
            diff[e] -= c
        return int(np.cumsum(diff)[:-1].min()) if n_rows else 0

    def close(self):
        self._cls.read = self._orig


class PassHook:
    """Wraps ``engine.compute`` (one per pass, or per group of SGD blocks): drops the store's
    pages from the page cache before each (``cold``) and records when each starts."""

    def __init__(self, url, cold, counter=None):
        from ooc_lowrank import engine
        from ooc_lowrank.storage import drop_page_cache

        self._engine, self._orig, self.starts, self.passes = engine, engine.compute, [], []
        hook = self

        def compute(*lazy, **kw):
            if cold:
                drop_page_cache(url)
            hook.starts.append(time.perf_counter())
            if counter is not None:
                counter.mark([])  # reads before this pass are not its own
            out = hook._orig(*lazy, **kw)
            if counter is not None:
                counter.mark(hook.passes)
            return out

        engine.compute = compute

    def close(self):
        self._engine.compute = self._orig


def check_passes(passes, store_rows, store_nnz):
    """``(ok, bad)``: every array a pass read was read whole (its rows and non-zeros equal the
    store's: nothing skipped or truncated); ``bad`` lists the passes that were not."""
    bad = []
    for i, p in enumerate(passes):
        for k, r in p["rows"].items():
            if r != store_rows[k] or p["nnz"].get(k, 0) != store_nnz[k]:
                bad.append({"pass": i, "array": k, "rows": r, "nnz": p["nnz"].get(k, 0),
                            "store_rows": store_rows[k], "store_nnz": store_nnz[k]})
    return bool(passes) and not bad, bad


def est_summary(e):
    keys = ("passes_init", "passes_per_iteration", "max_passes", "store_bytes", "block_rows",
            "n_blocks", "resident", "read_bytes_per_pass", "task_bytes", "worker_bytes",
            "memory_cap", "fits", "seconds", "seconds_per_pass", "time_seconds",
            "sgd_calibration", "time_calibration")
    return {k: e[k] for k in keys if k in e}


# ---------------------------------------------------------------------------------------------
# data
# ---------------------------------------------------------------------------------------------


def _gen_multilabel(url, n, d, L, per_row, seed):
    from ooc_lowrank.generators import generate_multilabel

    t = time.perf_counter()
    generate_multilabel(url, n_rows=n, n_features=d, n_labels=L, labels_per_row=per_row,
                        seed=seed, overwrite=True)
    log(f"generated {url}: {n} x {d}, {L} labels, {du(url) / 1e9:.2f} GB in "
        f"{time.perf_counter() - t:.0f} s")


def _power_law(rng, n_items, size, a):
    """Draws from a truncated Zipf-like law over ``0..n_items-1`` (item 0 most frequent)."""
    import numpy as np

    u = rng.random(size)
    # inverse CDF of p(x) ~ (x + 1)^-a on [0, n_items)
    if abs(a - 1.0) < 1e-9:
        x = np.expm1(u * np.log1p(n_items))
    else:
        x = ((1 + u * ((n_items + 1) ** (1 - a) - 1)) ** (1 / (1 - a))) - 1
    return np.minimum(x.astype(np.int64), n_items - 1)


def _unique_rows(cols, n_cols):
    """CSR pattern of the distinct entries of each row of ``cols`` (m, k)."""
    import numpy as np

    cols = np.sort(cols, axis=1)
    keep = np.ones(cols.shape, bool)
    keep[:, 1:] = cols[:, 1:] != cols[:, :-1]
    counts = keep.sum(axis=1)
    indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    return indptr, cols[keep].astype(np.int32)


def delicious_chunk(rng, m, d, L, nnz, lpr, n_topics, seed):
    """``m`` rows of the topic model: features and labels mostly from the row's topic."""
    import numpy as np
    import scipy.sparse as sp

    prm = np.random.default_rng([seed, 7])
    feat_perm = prm.permutation(d).astype(np.int64)  # feature popularity order
    lab_perm = prm.permutation(L).astype(np.int64)
    topic = _power_law(rng, n_topics, m, 0.8)
    # a topic owns a window of popular-ish features / labels, offset by a hash of the topic
    f_off = (topic * 2654435761) % d
    l_off = (topic * 40503) % L
    n_top = int(0.7 * nnz)
    fc = np.empty((m, nnz), np.int64)
    fc[:, :n_top] = (f_off[:, None] + _power_law(rng, 4000, (m, n_top), 1.0)) % d
    fc[:, n_top:] = _power_law(rng, d, (m, nnz - n_top), 1.1)
    fc = feat_perm[fc]
    indptr, idx = _unique_rows(fc, d)
    val = rng.random(idx.size).astype(np.float32) + 0.5
    X = sp.csr_matrix((val, idx, indptr), shape=(m, d))
    norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
    X = sp.csr_matrix(sp.diags((1 / norms).astype(np.float32)) @ X)
    k = max(1, int(lpr))
    k_top = int(0.7 * k)
    lc = np.empty((m, k), np.int64)
    lc[:, :k_top] = (l_off[:, None] + _power_law(rng, 600, (m, k_top), 1.0)) % L
    lc[:, k_top:] = _power_law(rng, L, (m, k - k_top), 1.2)
    lc = lab_perm[lc]
    lp, li = _unique_rows(lc, L)
    Y = sp.csr_matrix((np.ones(li.size, np.float32), li, lp), shape=(m, L))
    return X, Y


def _gen_delicious(url, n, d, L, nnz, lpr, n_topics, seed, stream, block_rows=20_000):
    import numpy as np

    from ooc_lowrank.storage import DatasetWriter

    t = time.perf_counter()
    with DatasetWriter(url, block_rows=block_rows, overwrite=True,
                       attrs={"generator": "benchmarks/bench_scale.py delicious", "seed": seed,
                              "stream": stream}) as w:
        w.add_csr("X", n_cols=d, dtype="float32")
        w.add_csr("Y", n_cols=L, dtype="float32")
        for c, s in enumerate(range(0, n, block_rows)):
            X, Y = delicious_chunk(np.random.default_rng([seed, stream, c]), min(block_rows, n - s),
                                   d, L, nnz, lpr, n_topics, seed)
            w.append(X=X, Y=Y)
    log(f"generated {url}: {n} rows, {du(url) / 1e9:.2f} GB in {time.perf_counter() - t:.0f} s")


def _gen_mvm(workdir, n, seed):
    from benchmarks import bench_mvm_ooc

    bench_mvm_ooc.ensure_store(workdir, n, False, log, seed=seed)


def precision_at(Y, top, ks=(1, 3, 5)):
    import numpy as np

    from ooc_lowrank.metrics import _hits

    h = _hits(Y, top)
    return {f"P@{k}": float(np.mean(h[:, :k].sum(axis=1) / k)) for k in ks}


# ---------------------------------------------------------------------------------------------
# scenarios
# ---------------------------------------------------------------------------------------------


def run_nuswide(a):
    import numpy as np

    from ooc_lowrank import GIMC
    from ooc_lowrank.storage import open_dataset

    os.makedirs(a.workdir, exist_ok=True)
    url = os.path.join(a.workdir, "nuswide.zarr")
    n = a.rows + a.test_rows
    in_child(_gen_multilabel, url, n, a.features, a.labels, a.labels_per_row, a.seed)
    try:
        ds = open_dataset(url)
        X, Y = ds["X"].read(0, a.rows), ds["Y"].read(0, a.rows)
        Xt, Yt = ds["X"].read(a.rows, n), ds["Y"].read(a.rows, n)
    finally:
        if not a.keep:
            shutil.rmtree(url, ignore_errors=True)
    est = GIMC(n_features_map=a.m, max_iter=a.iters, random_state=0)
    if a.tol is not None:
        est.set_params(tol=a.tol)
    e = est.estimate(X, Y)
    log("estimate:", json.dumps(_jsonable(est_summary(e))))
    tm = predict(e, machine_now())
    warm_up_gimc()
    roof = gimc_roofline(a.rows, a.features, a.m, e["block_rows"])
    log(f"roofline: {roof['seconds']:.2f} s per iteration at {roof['gflops']:.0f} GFLOP/s")
    ticks = []
    est.set_params(callback=lambda it, el, obj: ticks.append((it, el)))
    fit_rss = FitPeakRSS().start()
    t = time.perf_counter()
    with gimc_fit_result() as got:
        est.fit(X, Y)
    total = time.perf_counter() - t
    rss_fit = fit_rss.stop()
    el = np.array([e_ for _, e_ in ticks])
    steady = np.diff(el)[1:] if len(el) > 2 else np.diff(el)
    per_iter = float(np.median(steady)) if steady.size else float("nan")
    t = time.perf_counter()
    top, _ = est.predict_topk(Xt, k=5)
    t_pred = time.perf_counter() - t
    out = {
        "args": vars(a), "total_seconds": total, "init_seconds": float(el[0]),
        "n_iter": est.n_iter_, "n_passes": est.n_passes_,
        "passes_per_iteration": (est.n_passes_ - 1) / max(est.n_iter_, 1),
        "seconds_per_steady_iteration_median": per_iter,
        "iteration_seconds": np.diff(el).tolist(), "line_search": search_record(got["result"]),
        "roofline": roof, "roofline_ratio": roof["seconds"] / per_iter,
        "predict_topk_seconds": t_pred, "test": precision_at(Yt, top),
        "peak_rss_bytes": peak_rss_bytes(), "peak_rss_bytes_fit": rss_fit,
        "rss_bytes_fit_start": fit_rss.rss_start, "estimate": est_summary(e),
        "time_model": tm,
        "estimate_vs_measured": {
            "seconds_fit": versus(tm["seconds_per_fit"], total),
            "passes": versus(tm["passes"], est.n_passes_),
            "fit_memory_bytes": versus(_fit_memory_estimate(e), rss_fit - fit_rss.rss_start),
        },
        "objective_first_last": [float(est.objective_[0]), float(est.objective_[-1])],
        "goal": "total <= 650 s at 161,789 rows / 100 iterations; roofline_ratio >= 0.75",
    }
    log(json.dumps(_jsonable({k: v for k, v in out.items() if k != "iteration_seconds"}),
                   indent=1))
    save("nuswide", out, a.out)


def run_delicious(a):
    import numpy as np

    from ooc_lowrank import GIMC
    from ooc_lowrank.storage import open_dataset

    os.makedirs(a.workdir, exist_ok=True)
    tr, te = (os.path.join(a.workdir, f"delicious-{s}.zarr") for s in ("train", "test"))
    args = (a.features, a.labels, a.nnz_per_row, a.labels_per_row, a.topics, a.seed)
    in_child(_gen_delicious, tr, a.rows, *args, 0)
    in_child(_gen_delicious, te, a.test_rows, *args, 1)
    try:
        ds, dt = open_dataset(tr), open_dataset(te)
        est = GIMC(n_features_map=a.m, features="both", max_iter=a.iters, random_state=0)
        t = time.perf_counter()
        e = est.estimate(ds)
        t_est = time.perf_counter() - t
        log(f"estimate ({t_est:.2f} s):", json.dumps(_jsonable(est_summary(e))))
        if "time_calibration" in e:
            log("estimate's pass calibration on the store:",
                json.dumps(_jsonable(e["time_calibration"])))
        if e.get("fits") is False or a.estimate_only:  # record the estimate, no fit
            mc = machine_now() if a.estimate_only else None
            out = {"args": vars(a), "completed": False, "estimate": _jsonable(e),
                   "estimate_seconds": t_est,
                   "time_model": predict(e, mc) if a.estimate_only else None,
                   "why": "--estimate-only" if a.estimate_only else
                          "estimate(): worker_bytes > memory_cap (state_bytes_per_worker, "
                          "reduce_bytes_per_worker: see ooc_lowrank/_estimate.py)"}
            if a.estimate_only and a.compare:  # the model at the recorded run's rows
                with open(a.compare) as fh:
                    rec = json.load(fh)
                n = int(rec["args"]["rows"])
                er = {**e, "n_rows": n, "n_blocks": int(math.ceil(n / e["block_rows"]))}
                out["compare"] = {"recorded": a.compare, "recorded_rows": n,
                                  "recorded_seconds": rec["total_seconds"],
                                  "recorded_n_iter": rec["n_iter"],
                                  "recorded_n_passes": rec["n_passes"],
                                  **gimc_time_vs_measured(er, mc, rec["total_seconds"],
                                                          rec["n_iter"], rec["n_passes"])}
            log(json.dumps(_jsonable({k: e[k] for k in (
                "worker_bytes", "task_bytes", "reduce_bytes_per_worker",
                "state_bytes_per_worker", "memory_cap", "fits", "block_rows", "n_blocks")})))
            if "compare" in out:
                log(json.dumps(_jsonable({k: v for k, v in out["compare"].items()
                                          if k != "time_model"}), indent=1))
            save("delicious_estimate" if a.estimate_only else "delicious", out, a.out)
            return
        mc = machine_now()
        tm = predict(e, mc)
        warm_up_gimc()
        ticks = []
        est.set_params(callback=lambda it, el, obj: ticks.append((it, el)))
        from ooc_lowrank.gimc import core

        fit_rss = FitPeakRSS().start()
        t = time.perf_counter()
        rule, core.STEP_RULE = core.STEP_RULE, a.step_rule or core.STEP_RULE
        try:
            with gimc_fit_result() as got:
                est.fit(ds)
        finally:
            core.STEP_RULE = rule
        total = time.perf_counter() - t
        rss_fit = fit_rss.stop()
        Xt, Yt = dt["X"].read(), dt["Y"].read()
        t = time.perf_counter()
        top, _ = est.predict_topk(Xt, k=5)
        t_pred = time.perf_counter() - t
    finally:
        if not a.keep:
            for u in (tr, te):
                shutil.rmtree(u, ignore_errors=True)
    el = np.array([e_ for _, e_ in ticks])
    out = {
        "args": vars(a), "total_seconds": total, "init_seconds": float(el[0]),
        "n_iter": est.n_iter_, "n_passes": est.n_passes_,
        "iteration_seconds": np.diff(el).tolist(), "line_search": search_record(got["result"]),
        "peak_rss_bytes_fit": rss_fit, "rss_bytes_fit_start": fit_rss.rss_start,
        "peak_rss_bytes": peak_rss_bytes(),
        "predict_topk_seconds": t_pred, "test": precision_at(Yt, top),
        "estimate": est_summary(e), "estimate_seconds": t_est, "time_model": tm,
        "estimate_vs_measured": {
            **{k: v for k, v in gimc_time_vs_measured(e, mc, total, est.n_iter_,
                                                      est.n_passes_).items()
               if k != "time_model"},
            "passes_max_iter": versus(tm["passes"], est.n_passes_),
            "fit_memory_bytes": versus(_fit_memory_estimate(e), rss_fit - fit_rss.rss_start),
        },
        "goal": "time <= 4,724 s; peak RSS <= 12 GiB; estimate within 1.5x (measured "
                "iterations)",
    }
    log(json.dumps(_jsonable({k: v for k, v in out.items() if k != "iteration_seconds"}),
                   indent=1))
    save("delicious", out, a.out)


def _probe_bytes_per_row(a, workdir):
    """Marginal bytes per row of the dense multi-label store: stores of ``--probe-rows`` and
    twice as many rows (then deleted); the difference leaves out fixed metadata and partial
    chunks."""
    sizes = []
    for n in (int(a.probe_rows), 2 * int(a.probe_rows)):
        url = os.path.join(workdir, "probe-gimc.zarr")
        in_child(_gen_multilabel, url, n, a.features, a.labels, a.labels_per_row, a.seed)
        sizes.append(du(url))
        shutil.rmtree(url, ignore_errors=True)
    return (sizes[1] - sizes[0]) / int(a.probe_rows)


def _sample_bytes_per_row_mvm(a, rows=20_000):
    """Store bytes per row of the multi-view store, from a generated sample in memory: each
    CSR view's values, int32 column indices and int64 ``indptr`` entry per row, and the
    float64 target (uncompressed stores: the chunk files hold exactly these bytes; a small
    probe store instead pads its partial chunks and overstated the size by 26 %)."""
    import numpy as np

    from benchmarks.bench_mvm_ooc import _true_factors, make_chunk, view_dims

    dims = view_dims(False)
    *views, y = make_chunk(np.random.default_rng([a.seed, 0]), rows, dims,
                           _true_factors(dims, a.seed))
    per = sum(v.nnz * (v.data.itemsize + 4) + 8 * rows for v in views) + rows * 8
    return per / rows


def run_disk(a, kind):
    import numpy as np

    from ooc_lowrank import GIMC, MultiViewMachineRegressor
    from ooc_lowrank._estimate import rough_time
    from ooc_lowrank.storage import drop_page_cache, open_dataset, process_read_bytes

    os.makedirs(a.workdir, exist_ok=True)
    bpr = _probe_bytes_per_row(a, a.workdir) if kind == "gimc" else \
        _sample_bytes_per_row_mvm(a)
    n = int(math.ceil(a.gb * 1e9 / bpr))
    free = check_disk(a.workdir, n * bpr, kind)
    log(f"{kind}: {n} rows x {bpr:.0f} B = {n * bpr / 1e9:.1f} GB; {free / 1e9:.0f} GB free")
    if kind == "gimc":
        url = os.path.join(a.workdir, "disk-gimc.zarr")
        in_child(_gen_multilabel, url, n, a.features, a.labels, a.labels_per_row, a.seed)
    else:
        url = os.path.join(a.workdir, f"mvm-sparse-{n}.zarr")
        in_child(_gen_mvm, a.workdir, n, a.seed)
    try:
        ds = open_dataset(url)
        size = du(url)
        if size < 0.98 * a.gb * 1e9:
            log(f"WARNING: the store is {size / 1e9:.2f} GB, below --gb {a.gb:g} "
                f"({bpr:.0f} bytes per row were expected, {size / n:.0f} came out)")
        bw = direct_read_bandwidth(chunk_files(url), limit_bytes=min(2 << 30, size))
        log(f"store {size / 1e9:.2f} GB; direct reads "
            f"{(bw or {}).get('bytes_per_second', float('nan')) / 1e6:.0f} MB/s")
        mc = machine_now(bw["bytes_per_second"] if bw else None)

        def make(cb):
            if kind == "gimc":
                return GIMC(n_features_map=a.m, max_iter=a.iters, random_state=0, callback=cb)
            return MultiViewMachineRegressor(solver="sgd", n_epochs=a.epochs, random_state=0,
                                             callback=cb)

        est = make(None)
        t_est = time.perf_counter()
        e = est.estimate(ds)
        t_est = time.perf_counter() - t_est
        log(f"estimate ({t_est:.2f} s):", json.dumps(_jsonable(est_summary(e))))
        if "sgd_calibration" in e:
            log("estimate's SGD calibration on the store:",
                json.dumps(_jsonable(e["sgd_calibration"])))
        tm = predict(e, mc)
        # the same model with the machine's synthetic rates (what estimate() used before it
        # timed the store's own rows: SGD's sweep, GIMC's passes)
        tm_synthetic = rough_time({k: v for k, v in e.items()
                                   if k not in ("sgd_calibration", "time_calibration")},
                                  machine=mc)
        if a.estimate_only:
            return _estimate_only(a, kind, e, mc, tm, tm_synthetic, t_est, size, bw)
        if kind == "gimc":  # (multi-view SGD: the calibration above fitted one already)
            warm_up_gimc()
        ticks, sgd_passes, tick_reads = [], [], []

        def cb(*args):
            ticks.append(time.perf_counter())
            tick_reads.append(process_read_bytes())
            if kind == "mvm":  # an SGD epoch reads its windows without engine.compute
                counter.mark(sgd_passes)
            if a.cold:
                drop_page_cache(url)

        drop_page_cache(url)
        rss_base = peak_rss_bytes()  # the process before the fit (imports, opened store)
        counter = ReadCounter()
        hook = PassHook(url, a.cold, counter)
        fit_rss = FitPeakRSS().start()
        r0 = process_read_bytes()
        t, cpu, cpu_main = time.perf_counter(), time.process_time(), time.thread_time()
        est = make(cb)
        counter.mark([])
        with gimc_fit_result() as got:
            est.fit(ds)
        total = time.perf_counter() - t
        cpu, cpu_main = time.process_time() - cpu, time.thread_time() - cpu_main
        r1 = process_read_bytes()
        rss_fit = fit_rss.stop()
        counter.close()
        hook.close()
        rss = peak_rss_bytes()
        passes = int(est.n_passes_)
        store_rows = {k: ds.n_rows for k in ds.names}
        store_nnz = {k: int(ds[k].nnz if ds[k].nnz is not None else ds[k].shape[0] * ds[k].shape[1])
                     for k in ds.names}
        per_pass_rows = {k: v / passes for k, v in counter.rows.items()}
        min_reads = {k: counter.min_reads_per_row(k, ds.n_rows) for k in counter.rows}
        # passes that read the features: every GIMC pass; MVM SGD: one per epoch (its first
        # pass reads the target only)
        data_arrays = ["X"] if kind == "gimc" else ["X0", "X1", "X2"]
        data_passes = passes if kind == "gimc" else int(est.n_iter_)
        per_pass_nnz = {k: v / passes for k, v in counter.nnz.items()}
        # every pass (engine passes; SGD epochs) read each array it touched whole
        pass_reads = hook.passes + sgd_passes
        whole, bad = check_passes(pass_reads, store_rows, store_nnz)
        data_read = {k: sum(p["rows"].get(k, 0) for p in pass_reads) for k in data_arrays}
        whole = whole and all(v == data_passes * ds.n_rows for v in data_read.values())
        # compute-only: the same fit on a cache-resident slice, scaled to the store's rows
        n_s = max(1, min(n, int(a.slice_gb * 1e9 / bpr)))
        arrays = {k: ds[k].read(0, n_s) for k in ds.names}
        ticks_s = []
        est_s = make(lambda *args: ticks_s.append(time.perf_counter()))
        t = time.perf_counter()
        if kind == "gimc":
            est_s.fit(arrays["X"], arrays["Y"])
        else:
            est_s.fit([arrays[f"X{p}"] for p in range(3)], arrays["y"].ravel())
        total_s = time.perf_counter() - t
        compute_pass = total_s / int(est_s.n_passes_) * n / n_s
    finally:
        if not a.keep:
            shutil.rmtree(url, ignore_errors=True)
    read_pass = None if r0 is None else (r1 - r0) / passes
    # from the disk per iteration (GIMC: its passes; SGD: an epoch, the first one with the
    # target-only setup pass): with --gb below twice the RAM, later epochs find part of the
    # store in the page cache (36 GB store, 24 GiB RAM: 22.5 GB per pass on average over
    # 3 passes, of which one reads the target only)
    read_ticks = None if r0 is None else np.diff([r0, *tick_reads]).tolist()
    disk_pass = size / bw["bytes_per_second"] if bw else None
    per_pass = total / passes
    bound = max(compute_pass, disk_pass or 0.0)
    # the time model printed before the fit (tm) against the fit: the whole fit, a pass, and
    # for GIMC like with like (the measured iterations and trials; tol may stop a fit early)
    time_vs = {"seconds_fit": versus(tm["seconds_per_fit"], total),
               "seconds_per_pass": versus(tm["seconds_per_pass"], per_pass),
               "seconds_fit_synthetic_rate": versus(tm_synthetic["seconds_per_fit"], total)}
    if kind == "gimc":
        g = gimc_time_vs_measured(e, mc, total, int(est.n_iter_), passes)
        time_vs.update({k: v for k, v in g.items() if k != "time_model"})
    else:  # on a busy machine: the SGD kernel runs on the fit's own thread, so its CPU
        # seconds are the fit's time had other processes left it a core
        time_vs["seconds_fit_vs_fit_thread_cpu"] = versus(tm["seconds_per_fit"], cpu_main)
    out = {
        "args": vars(a), "kind": kind, "n_rows": n, "store_bytes": size,
        "total_seconds": total, "n_passes": passes, "seconds_per_pass": per_pass,
        "cpu_seconds_fit": cpu, "fit_thread_cpu_seconds": cpu_main,
        "tick_seconds": np.diff(np.array(ticks)).tolist(),
        "read_bytes_per_pass": read_pass, "read_bytes_total": None if r0 is None else r1 - r0,
        "read_bytes_per_iteration": read_ticks, "direct_read": bw,
        "disk_seconds_per_pass": disk_pass,
        "compute_seconds_per_pass": compute_pass, "compute_slice_rows": n_s,
        "ratio_pass_to_bound": per_pass / bound,
        "peak_rss_bytes": rss,
        "peak_rss_bytes_fit": rss_fit, "rss_bytes_fit_start": fit_rss.rss_start,
        "peak_rss_fit_method": fit_rss.method,
        "passes_read_whole_arrays": whole, "passes_not_whole": bad[:20],
        "pass_reads": pass_reads,
        "rows_read_per_pass": per_pass_rows, "nnz_read_per_pass": per_pass_nnz,
        "store_rows": store_rows, "store_nnz": store_nnz,
        "every_row_read_at_least": min_reads,
        "data_passes": data_passes,
        "rows_read_equal_store": all(min_reads.get(k, 0) >= data_passes for k in data_arrays),
        "n_computes": len(hook.starts),
        "estimate": est_summary(e), "estimate_seconds": t_est,
        "time_model": tm,
        "estimate_vs_measured": {
            **time_vs,
            "fit_memory_bytes": versus(_fit_memory_estimate(e), rss_fit - fit_rss.rss_start),
            "passes_typical": [e["passes_init"] + e["passes_per_iteration"]["typical"]
                               * (a.iters if kind == "gimc" else a.epochs), passes],
            "max_passes": e.get("max_passes"),
            "rss_before_fit": rss_base,
            "worker_bytes_plus_rss_before_fit_vs_peak_rss": [
                (e.get("worker_bytes") or 0) + rss_base, rss],
            "read_bytes_per_pass": [e.get("read_bytes_per_pass"), read_pass],
            "worker_bytes_vs_peak_rss": [e.get("worker_bytes"), rss],
        },
        "line_search": search_record(got["result"]) if "result" in got else None,
        "cold_every_pass": bool(a.cold),
        "goal": "ratio_pass_to_bound <= 1.3; peak RSS of the fit <= 2 GiB; every pass reads "
                "the store's rows and non-zeros; estimate within 1.5x of time and memory",
    }
    log(json.dumps(_jsonable({k: v for k, v in out.items()
                              if k not in ("tick_seconds", "pass_reads", "time_model")}),
                   indent=1))
    save(f"disk_{kind}", out, a.out)
    if not whole:
        raise SystemExit(f"disk-{kind}: a pass did not read the whole store: {bad[:3]} "
                         f"(feature rows read {data_read}, expected {data_passes} x {ds.n_rows})")


def _scaled_to(e, rec):
    """The multi-view SGD estimate ``e`` with the rows, non-zeros and bytes of the store a
    recorded run fitted (``rec``: a ``scale_disk_mvm.json``): the same data distribution, so
    the same calibrated rate, at the recorded size."""
    n = int(rec["n_rows"])
    nnz = {k: int(v) for k, v in rec["store_nnz"].items()}
    return {**e, "n_rows": n, "n_nonzeros": sum(v for k, v in nnz.items() if k != "y"),
            "read_bytes_per_pass": int(rec["store_bytes"]), "init_read_bytes": 8 * n,
            "store_bytes": int(rec["store_bytes"]),
            "n_blocks": int(math.ceil(n / max(int(e["block_rows"]), 1)))}


def _estimate_only(a, kind, e, mc, tm, tm_synthetic, t_est, size, bw):
    """``--estimate-only``: the estimate and its time model, no fit; with ``--compare`` the
    model at the recorded run's size against its measured fit seconds."""
    from ooc_lowrank._estimate import rough_time

    out = {"args": vars(a), "kind": kind, "store_bytes": size, "direct_read": bw,
           "estimate": est_summary(e), "estimate_seconds": t_est,
           "seconds_fit_estimate": tm["seconds_per_fit"],
           "seconds_fit_estimate_synthetic_rate": tm_synthetic["seconds_per_fit"]}
    if getattr(a, "compare", None):
        with open(a.compare) as fh:
            rec = json.load(fh)
        t = rough_time(_scaled_to(e, rec), machine=mc)
        t0 = rough_time(_scaled_to({k: v for k, v in e.items() if k != "sgd_calibration"},
                                   rec), machine=mc)  # fmt: skip
        out["compare"] = {"recorded": a.compare, "recorded_n_rows": rec["n_rows"],
                          "seconds_fit": versus(t["seconds_per_fit"], rec["total_seconds"]),
                          "seconds_fit_synthetic_rate": versus(t0["seconds_per_fit"],
                                                               rec["total_seconds"]),
                          "time_model": t}
    log(json.dumps(_jsonable({k: v for k, v in out.items() if k != "args"}), indent=1))
    if a.out:
        save(f"disk_{kind}_estimate", out, a.out)
    return out


def run_codecs(a):
    """Decode throughput of none / lz4 / zstd per array kind against direct disk reads."""
    import numpy as np
    import numcodecs

    from benchmarks.bench_mvm_ooc import _true_factors, make_chunk, view_dims
    from ooc_lowrank.generators import generate_multilabel
    from ooc_lowrank.storage import open_dataset

    os.makedirs(a.workdir, exist_ok=True)
    url = os.path.join(a.workdir, "codecs.zarr")
    generate_multilabel(url, n_rows=16384, n_features=1134, n_labels=1000, labels_per_row=5,
                        overwrite=True)
    ds = open_dataset(url)
    X = ds["X"].read()
    Y = ds["Y"].read()
    dims = view_dims(False)
    X0, X1, X2, _ = make_chunk(np.random.default_rng(0), 200_000, dims, _true_factors(dims, 0))
    rng = np.random.default_rng(0)
    obs_rows = np.sort(rng.integers(0, 1_000_000, 2_000_000)).astype(np.int64)
    kinds = {
        "dense float32 (generated features)": X,
        "CSR indices int32 (labels)": Y.indices.astype(np.int32),
        "CSR indices int32 (sparse text view)": X2.indices.astype(np.int32),
        "CSR data float32 (sparse view, constant)": X2.data,
        "CSR indptr int64": X2.indptr.astype(np.int64),
        "observation rows int64 (sorted)": obs_rows,
        "observation values float64": rng.standard_normal(2_000_000),
    }
    shutil.rmtree(url, ignore_errors=True)
    bw = a.disk_bytes_per_second
    if bw is None:
        tmp = os.path.join(a.workdir, "codecs-dd.bin")
        with open(tmp, "wb") as fh:
            for _ in range(64):
                fh.write(os.urandom(16 << 20))
            os.fsync(fh.fileno())
        r = direct_read_bandwidth([tmp], limit_bytes=1 << 30)
        os.remove(tmp)
        bw = r["bytes_per_second"] if r else 620e6
    codecs = {"lz4": numcodecs.LZ4(), "zstd-1": numcodecs.Zstd(level=1),
              "zstd-3": numcodecs.Zstd(level=3),
              "blosc-lz4-shuffle": numcodecs.Blosc("lz4", 5, numcodecs.Blosc.SHUFFLE)}
    res = {}
    for name, arr in kinds.items():
        raw = np.ascontiguousarray(arr).tobytes()
        row = {"raw_bytes": len(raw)}
        for cname, c in codecs.items():
            enc = c.encode(raw)
            t = time.perf_counter()
            reps = 0
            while time.perf_counter() - t < 0.3:
                c.decode(enc)
                reps += 1
            dec = (time.perf_counter() - t) / reps
            ratio = len(raw) / len(enc)
            # seconds per raw byte when reading compressed from disk and decoding (one core)
            t_comp = (len(enc) / bw + dec) / len(raw)
            row[cname] = {"ratio": ratio, "decode_GBps": len(raw) / dec / 1e9,
                          "effective_GBps_from_disk": 1 / t_comp / 1e9}
        row["none_effective_GBps_from_disk"] = bw / 1e9
        best = max(codecs, key=lambda c: row[c]["effective_GBps_from_disk"])
        row["best"] = best if row[best]["effective_GBps_from_disk"] > 1.1 * bw / 1e9 else "none"
        res[name] = row
        log(f"{name}: best {row['best']}; " + ", ".join(
            f"{c} x{row[c]['ratio']:.2f} {row[c]['effective_GBps_from_disk']:.2f} GB/s"
            for c in codecs) + f", none {bw / 1e9:.2f} GB/s")
    save("codecs", {"disk_bytes_per_second": bw, "kinds": res,
                    "rule": "a codec is worth it when (compressed bytes / disk bandwidth + decode "
                            "time) beats raw bytes / disk bandwidth by > 10 %, one core decoding"},
         a.out)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="scenario", required=True)

    def common(s):
        s.add_argument("--workdir", default=os.path.join(os.getcwd(), "tmp_bench_scale"))
        s.add_argument("--seed", type=int, default=0)
        s.add_argument("--keep", action="store_true", help="keep the generated stores")
        s.add_argument("--out", default=None, help="result file (default results/scale_*.json)")
        return s

    s = common(sub.add_parser("nuswide"))
    s.add_argument("--rows", type=int, default=161_789)
    s.add_argument("--test-rows", type=int, default=107_859)
    s.add_argument("--features", type=int, default=1134)
    s.add_argument("--labels", type=int, default=1000)
    s.add_argument("--labels-per-row", type=float, default=5.0)
    s.add_argument("--m", type=int, default=500)
    s.add_argument("--iters", type=int, default=100)
    s.add_argument("--tol", type=float, default=None,
                   help="GIMC tol (default: the library's; 0 runs all --iters iterations)")
    s = common(sub.add_parser("delicious"))
    s.add_argument("--rows", type=int, default=196_606)
    s.add_argument("--test-rows", type=int, default=100_095)
    s.add_argument("--features", type=int, default=782_585)
    s.add_argument("--nnz-per-row", type=int, default=300)
    s.add_argument("--labels", type=int, default=205_443)
    s.add_argument("--labels-per-row", type=float, default=75.0)
    s.add_argument("--topics", type=int, default=2000)
    s.add_argument("--m", type=int, default=500)
    s.add_argument("--iters", type=int, default=20)
    s.add_argument("--step-rule", default=None,
                   help="GIMC line-search rule (gimc.core.STEP_RULES; default: the library's)")
    s.add_argument("--estimate-only", action="store_true",
                   help="generate the stores, print estimate() and its time model, no fit "
                        "(results/scale_delicious_estimate.json)")
    s.add_argument("--compare", default=None, metavar="RESULT_JSON",
                   help="with --estimate-only: the time model at the rows of a recorded run "
                        "(e.g. results/scale_delicious.json) vs its measured fit")
    for kind in ("gimc", "mvm"):
        s = common(sub.add_parser(f"disk-{kind}"))
        s.add_argument("--gb", type=float, default=36.0)
        s.add_argument("--slice-gb", type=float, default=1.0)
        s.add_argument("--probe-rows", type=int, default=20_000,
                       help="disk-gimc: rows of the probe stores that measure bytes per row "
                            "(disk-mvm: measured on a generated sample in memory)")
        s.add_argument("--cold", action="store_true",
                       help="drop the store's pages before every pass (stores < RAM)")
        s.add_argument("--estimate-only", action="store_true",
                       help="generate the store, print estimate() and its time model, no fit "
                            "(written only with --out)")
        if kind == "gimc":
            s.add_argument("--features", type=int, default=1134)
            s.add_argument("--labels", type=int, default=1000)
            s.add_argument("--labels-per-row", type=float, default=5.0)
            s.add_argument("--m", type=int, default=500)
            s.add_argument("--iters", type=int, default=3)
        else:
            s.add_argument("--epochs", type=int, default=2)
            s.add_argument("--compare", default=None, metavar="RESULT_JSON",
                           help="with --estimate-only: the time model at the size of a recorded "
                                "run (e.g. results/scale_disk_mvm.json) vs its measured fit")
    s = common(sub.add_parser("codecs"))
    s.add_argument("--disk-bytes-per-second", type=float, default=None)
    a = p.parse_args(argv)
    if a.scenario.startswith("disk-"):
        from ooc_lowrank import engine

        budget, engine.DEFAULT_CACHE_BYTES = engine.DEFAULT_CACHE_BYTES, 0  # stream every pass
        try:
            run_disk(a, a.scenario[5:])
        finally:
            engine.DEFAULT_CACHE_BYTES = budget
    else:
        {"nuswide": run_nuswide, "delicious": run_delicious, "codecs": run_codecs}[a.scenario](a)


if __name__ == "__main__":
    main()
