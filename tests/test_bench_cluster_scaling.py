"""The cluster scaling benchmark's busy-machine measures (issue 27): the task threads' CPU
seconds on a worker, and the busiest worker's share of the task compute."""

from __future__ import annotations

import sys
import time

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def _burn(seconds):
    t = time.thread_time()
    while time.thread_time() - t < seconds:
        pass
    return seconds


def test_task_cpu_seconds_count_the_tasks_work(cluster_client):
    from benchmarks.bench_cluster_scaling import _cpu_seconds

    before = cluster_client.run(_cpu_seconds)
    (w, _), *_ = before.items()
    cluster_client.submit(_burn, 0.3, workers=[w], pure=False).result()
    after = cluster_client.run(_cpu_seconds)
    spent = after[w][1] - (before[w][1] or 0.0)
    assert after[w][1] is not None
    assert 0.25 <= spent  # the task's CPU second, found in the executor threads
    assert after[w][0] - before[w][0] >= spent - 0.02  # the process counts them too


def test_task_summary_compute_share():
    from benchmarks.bench_cluster_scaling import task_summary

    def rec(worker, start, stop, action="compute"):
        return {"worker": worker, "startstops": [{"action": action, "start": start, "stop": stop}]}

    out = task_summary([rec("a", 0, 3), rec("b", 0, 1), rec("a", 3, 4, "transfer")])
    assert out["n_tasks"] == 3
    assert out["compute_seconds"] == 4.0 and out["transfer_seconds"] == 1.0
    assert out["compute_share_max"] == 0.75
    assert task_summary([])["compute_share_max"] is None
