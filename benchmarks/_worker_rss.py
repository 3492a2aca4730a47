"""One spawned Dask worker with a memory limit, and the peak RSS it reaches during a run.

Shared by the out-of-core benchmarks of KernelMaxide and MVM (the same measurement as
``bench_gimc.py``'s out-of-core part): a ``LocalCluster`` with one worker process, the limit
enforced by its nanny (no pausing or spilling, so a run that does not fit fails instead of
stalling), the worker's RSS polled every 50 ms from the driver with psutil.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time


@contextlib.contextmanager
def limited_worker(limit_bytes, threads=1, poll_seconds=0.05):
    """Yield ``(client, peak)``; ``peak["worker"]`` is the largest worker RSS seen (bytes);
    ``peak["phase"]`` the largest since the caller last set it to 0 (RSS per phase of a run).

    Inside the block, ``dask.config.set(scheduler=client.get)`` is in force, so engine passes
    run on the worker.  ``peak["baseline"]`` is the worker's RSS once it has imported the
    library, before any task: the fixed cost below which no limit can go.  A worker killed by its nanny sets ``peak["died"]`` and closes the
    client (its restart can hang in a spawned cluster), so the run fails with a message.
    """
    import dask
    import psutil
    from distributed import Client, LocalCluster

    cfg = {
        "distributed.worker.memory.pause": False,
        "distributed.worker.memory.spill": False,
        "distributed.worker.memory.target": False,
    }
    with dask.config.set(cfg):
        cluster = LocalCluster(
            n_workers=1,
            threads_per_worker=int(threads),
            processes=True,
            memory_limit=int(limit_bytes),
            dashboard_address=":0",
        )
        client = Client(cluster, set_as_default=False)
        peak = {"worker": 0, "died": False}
        stop = threading.Event()
        try:
            procs = [psutil.Process(p) for p in client.run(os.getpid).values()]
            # the floor every run pays: a worker process with the library imported
            client.run(_import_library)
            peak["baseline"] = max(p.memory_info().rss for p in procs)

            def poll():
                while not stop.is_set():
                    for p in procs:
                        try:
                            now = p.memory_info().rss
                            peak["worker"] = max(peak["worker"], now)
                            # a caller's phase peak: it resets peak["phase"] at a phase start
                            peak["phase"] = max(peak.get("phase", 0), now)
                        except psutil.Error:
                            peak["died"] = True
                            stop.set()
                            client.close()
                            return
                    time.sleep(poll_seconds)

            th = threading.Thread(target=poll, daemon=True)
            th.start()
            try:
                with dask.config.set(scheduler=client.get):
                    yield client, peak
            except Exception as e:
                if not peak["died"]:
                    raise
                raise RuntimeError(
                    f"the worker exceeded its memory limit ({limit_bytes / 2**20:.0f} MiB; "
                    f"peak seen {peak['worker'] / 2**20:.0f} MiB)"
                ) from e
        finally:
            stop.set()
            client.close()
            cluster.close()


def _import_library():
    import ooc_lowrank  # noqa: F401
    import ooc_lowrank.imc  # noqa: F401
    import ooc_lowrank.engine  # noqa: F401


def driver_maxrss():
    """Peak RSS of this (driver) process in bytes."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def dir_bytes(path):
    """Bytes on disk under ``path``."""
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            with contextlib.suppress(OSError):
                total += os.path.getsize(os.path.join(root, f))
    return total


def logical_bytes(ds, names=None):
    """Uncompressed bytes of a store's arrays (``names``, default all): dense
    ``n d itemsize``; CSR values + column indices (4 bytes) + row pointers (8 bytes)."""
    total = 0
    for name in ds.names if names is None else names:
        h = ds[name]
        if h.kind == "dense":
            total += h.shape[0] * h.shape[1] * h.dtype.itemsize
        else:
            total += int(h.nnz) * (h.dtype.itemsize + 4) + (h.shape[0] + 1) * 8
    return total


def write_results(out, path):
    """Add the load average after the run to ``out`` and write it as JSON to ``path``."""
    import json

    out["loadavg_after"] = os.getloadavg()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(out, f, indent=1, default=float)
    return out
