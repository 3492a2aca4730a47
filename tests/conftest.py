"""Shared fixtures: data directory, seeded RNGs, a 2-worker LocalCluster, counting scheduler."""

from __future__ import annotations

import os
import zlib
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
DATA_DIR = Path(os.environ.get("OOC_LOWRANK_DATA", REPO.parent / "shared" / "data"))


def pytest_sessionstart(session):
    """Start ``tests/_prewarm.py`` (the slowest kernels compiled into the cache in the
    background; see its docstring) unless ``OOC_TEST_PREWARM=0`` or in a pytest-xdist worker."""
    import subprocess
    import sys

    if os.environ.get("OOC_TEST_PREWARM", "1") == "0" or hasattr(session.config, "workerinput"):
        return
    session.config._ooc_prewarm = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("_prewarm.py"))],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def pytest_sessionfinish(session):
    proc = getattr(session.config, "_ooc_prewarm", None)
    if proc is not None and proc.poll() is None:
        proc.kill()
        proc.wait()


def data_file(*parts) -> Path:
    """Path of a real dataset file; skips the test (saying which file) when it is missing."""
    p = DATA_DIR.joinpath(*parts)
    if not p.exists():
        pytest.skip(f"dataset file missing: {p} (set OOC_LOWRANK_DATA to the shared data folder)")
    return p


@pytest.fixture
def rng(request):
    """A NumPy Generator seeded from the test's name (stable, never global)."""
    seed = zlib.crc32(request.node.nodeid.encode())
    return np.random.default_rng(seed)


@pytest.fixture(scope="session")
def cluster_client():
    """A 2-worker, 1-thread-each process LocalCluster shared by the session's tests."""
    distributed = pytest.importorskip("distributed")
    cluster = distributed.LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        dashboard_address=None,
        memory_limit="2GiB",
    )
    client = distributed.Client(cluster, set_as_default=False)
    try:
        yield client
    finally:
        client.close()
        cluster.close()


class CountingScheduler:
    """A dask scheduler that counts ``dask.compute`` calls (flox's raise_if_dask_computes)."""

    def __init__(self, max_computes=None):
        self.count = 0
        self.max_computes = max_computes

    def __call__(self, dsk, keys, **kwargs):
        import dask

        self.count += 1
        if self.max_computes is not None and self.count > self.max_computes:
            raise RuntimeError(f"too many computes: {self.count} > {self.max_computes}")
        return dask.get(dsk, keys, **kwargs)


@pytest.fixture
def counting_scheduler():
    import dask

    sched = CountingScheduler()
    with dask.config.set(scheduler=sched):
        yield sched
