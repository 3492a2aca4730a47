"""Thread counts inside distributed tasks (issue 27): a block function on a worker runs with
Numba's and BLAS's thread counts at the engine's per-task setting (default one), not at
Numba's default of every core of the machine."""

from __future__ import annotations

import os

import numpy as np
import pytest

from ooc_lowrank import engine


def _threads_seen(Xb):
    """Per block: (Numba threads, BLAS threads) as this task sees them."""
    import numba
    import threadpoolctl

    blas = [i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"]
    return np.array([numba.get_num_threads(), max(blas, default=1)], dtype=np.float64)


def _set_worker_env(value):
    if value is None:
        os.environ.pop("OOC_LOWRANK_TASK_THREADS", None)
    else:
        os.environ["OOC_LOWRANK_TASK_THREADS"] = value


def _numba_pool():
    import numba

    return int(numba.config.NUMBA_NUM_THREADS)


def _seen(client, n_blocks=4):
    X = np.zeros((8 * n_blocks, 3))
    tree = engine.compute(engine.reduce_blocks(_threads_seen, engine.as_blocked(X, block_rows=8),
                                               client=client), client=client)[0]  # fmt: skip
    chain = engine.compute(engine.reduce_blocks(_threads_seen, engine.as_blocked(X, block_rows=8),
                                                chains=True, client=client), client=client)[0]  # fmt: skip
    return tree / n_blocks, chain / n_blocks


def test_distributed_task_runs_kernels_with_one_thread(cluster_client):
    for seen in _seen(cluster_client):
        assert seen.tolist() == [1.0, 1.0]


def test_distributed_task_threads_follow_the_worker_setting(cluster_client):
    pool = min(cluster_client.run(_numba_pool).values())
    if pool < 2:
        pytest.skip("the workers' Numba pool has one thread on this machine")
    cluster_client.run(_set_worker_env, "2")
    try:
        for seen in _seen(cluster_client):
            assert seen[0] == 2.0  # BLAS: process-wide, Numba: per thread; both at the setting
            assert seen[1] == 2.0
        cluster_client.run(_set_worker_env, "0")
        with pytest.raises(ValueError, match="task_threads must be an integer >= 1"):
            _seen(cluster_client, n_blocks=1)
    finally:
        cluster_client.run(_set_worker_env, None)
    for seen in _seen(cluster_client):
        assert seen.tolist() == [1.0, 1.0]  # restored to the default after each task


def test_local_threads_leave_numba_alone():
    import numba

    before = numba.get_num_threads()
    X = np.zeros((32, 3))
    got = engine.compute(engine.reduce_blocks(_threads_seen, engine.as_blocked(X, block_rows=8)))
    assert got[0][0] == 4 * before  # not on a worker: the local paths hold their own policy
