"""Faults on a distributed cluster: every worker gone while the scheduler lives (issue 14, item 7).

A pass whose cluster has no worker left must fail after a bounded wait with an error that says
what happened and what to do, instead of waiting forever.
"""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import time

import dask
import numpy as np
import pytest
import scipy.sparse as sp

from ooc_lowrank import engine
from ooc_lowrank.engine import NoWorkersError

distributed = pytest.importorskip("distributed")


# a block function the worker processes can import (this test module is not on their path)
_row_sums = functools.partial(np.sum, axis=0)


@pytest.fixture
def scheduler_only():
    """A live scheduler without workers (a LocalCluster of 0 workers)."""
    cluster = distributed.LocalCluster(n_workers=0, dashboard_address=":0", processes=True)
    client = distributed.Client(cluster, set_as_default=False)
    try:
        yield cluster, client
    finally:
        client.close()
        cluster.close()


@pytest.mark.timeout(120)
def test_a_pass_without_workers_fails_after_the_configured_wait(scheduler_only):
    _, client = scheduler_only
    B = engine.as_blocked(np.ones((40, 3)), block_rows=10)
    t0 = time.monotonic()
    with dask.config.set({"ooc_lowrank.no_worker_timeout": 1.0}):
        with pytest.raises(NoWorkersError) as e:
            engine.map_reduce(_row_sums, B, client=client)
    waited = time.monotonic() - t0
    msg = str(e.value)
    assert "no Dask worker" in msg and "1 s" in msg and "scheduler" in msg
    assert "ooc_lowrank.no_worker_timeout" in msg and "OOC_LOWRANK_NO_WORKER_TIMEOUT" in msg
    assert waited >= 1.0
    assert client.processing() == {} or all(not v for v in client.processing().values())


def test_no_worker_timeout_is_validated(scheduler_only):
    _, client = scheduler_only
    B = engine.as_blocked(np.ones((4, 3)))
    with dask.config.set({"ooc_lowrank.no_worker_timeout": -1}):
        with pytest.raises(ValueError, match="no_worker_timeout must be a number > 0; got -1"):
            engine.map_reduce(_row_sums, B, client=client)


def test_no_worker_timeout_default_and_env(monkeypatch):
    assert engine.no_worker_timeout() == engine.DEFAULT_NO_WORKER_TIMEOUT == 60.0
    monkeypatch.setenv("OOC_LOWRANK_NO_WORKER_TIMEOUT", "7.5")
    assert engine.no_worker_timeout() == 7.5
    with dask.config.set({"ooc_lowrank.no_worker_timeout": 3}):
        assert engine.no_worker_timeout() == 3.0


def _start_workers(address, n):
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "distributed.cli.dask_worker", address, "--no-nanny"]
    cmd += ["--nthreads", "1", "--no-dashboard"]
    return [
        subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(n)
    ]


@pytest.fixture
def killable_workers(scheduler_only):
    """The scheduler-only cluster plus two worker processes without a nanny (nothing restarts
    them when they are killed)."""
    cluster, client = scheduler_only
    procs = _start_workers(cluster.scheduler_address, 2)
    try:
        client.wait_for_workers(2, timeout=60)
        yield client, procs
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(30)


def _kill(procs):
    for p in procs:
        os.kill(p.pid, signal.SIGKILL)
    for p in procs:
        p.wait(30)


@pytest.mark.timeout(120)
def test_passes_fail_clearly_after_every_worker_is_killed(killable_workers):
    client, procs = killable_workers
    B = engine.as_blocked(np.arange(120.0).reshape(40, 3), block_rows=10)
    with dask.config.set({"ooc_lowrank.no_worker_timeout": 1.0}):
        first = engine.map_reduce(_row_sums, B, client=client)
        np.testing.assert_array_equal(first, np.arange(120.0).reshape(40, 3).sum(0))
        _kill(procs)
        with pytest.raises(NoWorkersError, match="no Dask worker alive for 1 s"):
            engine.map_reduce(_row_sums, B, client=client)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_fit_fails_clearly_when_every_worker_is_killed_mid_fit(scheduler_only):
    """Two worker processes (no nanny: nothing restarts them) are SIGKILLed after the first
    iteration of a GIMC fit; the scheduler lives.  The fit must raise, not hang."""
    from ooc_lowrank.gimc import GIMC

    cluster, client = scheduler_only
    procs = _start_workers(cluster.scheduler_address, 2)
    try:
        client.wait_for_workers(2, timeout=60)
        r = np.random.default_rng(0)
        X = r.standard_normal((200, 5))
        Y = sp.csr_matrix((r.random((200, 4)) < 0.3).astype(float))

        def kill_all(it, elapsed, obj):
            if it == 1:
                for p in procs:
                    os.kill(p.pid, signal.SIGKILL)
                for p in procs:
                    p.wait(30)

        est = GIMC(n_features_map=6, max_iter=5, tol=0.0, block_rows=50, callback=kill_all)
        with dask.config.set({"scheduler": client, "ooc_lowrank.no_worker_timeout": 2.0}):
            with pytest.raises(NoWorkersError, match="no Dask worker alive for 2 s"):
                est.fit(X, Y)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(30)
