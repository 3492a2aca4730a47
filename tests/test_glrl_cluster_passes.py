"""What one GLRL pass costs a distributed cluster, by structure (issue 27): passes, tasks per
pass and round trips to the workers per pass; no timing.

A streamed power pass over a store of ``B`` row blocks is ``B`` chain links (each reads its
block and runs the block function: one task per block) plus one task that assembles the
chains' totals; a refit pass (small outputs: a tree) is ``B`` block tasks plus the tree's
steps; the arguments that change every pass (``u`` and ``v``, full-length
vectors above the engine's scatter threshold) reach the workers in **one** scatter per pass,
the step's constants (``U``, ``V``) once per greedy step.
"""

from __future__ import annotations

import dask
import numpy as np
import pytest

from ooc_lowrank import engine
from ooc_lowrank.glrl import GreedyLowRank
from ooc_lowrank.storage import write_arrays

N_ROWS, N_COLS, BR = 12_000, 9_000, 1_500  # vectors of 72-96 kB: above SCATTER_BYTES


@pytest.fixture
def store(tmp_path):
    import scipy.sparse as sp

    rng = np.random.default_rng(0)
    X = sp.random(N_ROWS, N_COLS, density=8 / N_COLS, format="csr", random_state=rng)
    X.data = np.sign(X.data - 0.5).astype(np.float32)
    return write_arrays(str(tmp_path / "obs.zarr"), {"obs": X}, kinds={"obs": "coo"},
                        block_rows=BR)  # fmt: skip


def test_glrl_streamed_pass_structure_on_a_cluster(store, cluster_client, monkeypatch):
    assert engine.SCATTER_BYTES <= 8 * min(N_ROWS, N_COLS)
    n_blocks = -(-N_ROWS // BR)
    scatters, graphs = [], []
    real_scatter, real_compute = cluster_client.scatter, engine._compute_on_cluster

    def scatter(data, *a, **kw):
        scatters.append(len(data) if isinstance(data, list) else 1)
        return real_scatter(data, *a, **kw)

    def compute_on_cluster(client, targets):
        graphs.append(sum(len(t.__dask_graph__()) for t in targets))
        return real_compute(client, targets)

    monkeypatch.setattr(cluster_client, "scatter", scatter)
    monkeypatch.setattr(engine, "_compute_on_cluster", compute_on_cluster)
    engine._SCATTER_CACHE.clear()
    kw = dict(loss="square", n_components=2, init="zero", refit="full", power_iter=4,
              power_tol=0.0, cache_bytes=0, random_state=0)  # fmt: skip
    with dask.config.set(scheduler=cluster_client):
        est = GreedyLowRank(**kw).fit(store)
    local = GreedyLowRank(**kw).fit(store)
    engine._SCATTER_CACHE.clear()

    # passes: the objective pass at X = 0, then per step 3 more power passes, one exact refit,
    # and the objective pass of the new iterate (also the next step's first power pass)
    assert est.n_passes_by_kind_ == {"power": 1 + 2 * 4, "refit": 2}
    assert est.n_passes_ == 11 and est.n_cache_passes_ == 0
    # one compute per pass, plus the data check's
    assert len(graphs) == 1 + est.n_passes_
    # a streamed pass: one task per block (the link reads its block) + the chains' total
    # (power passes) or the tree's one step at 8 blocks (refits: they were 2 tasks per block
    # + the tree before the tree's graph read its blocks in its own tasks, issue 27)
    assert graphs[1:] == [n_blocks + 1] * est.n_passes_, graphs
    # one scatter round trip per pass at most (was one per changed argument: two per power
    # pass); the power passes' two changing vectors go together
    assert len(scatters) <= est.n_passes_, scatters
    assert scatters.count(2) >= 2 * 3, scatters
    # and the same model as on the local threads, bit for bit
    np.testing.assert_array_equal(est.objective_path_, local.objective_path_)
    np.testing.assert_array_equal(est.theta_, local.theta_)


def test_glrl_power_passes_ship_only_the_new_vectors(store, cluster_client, monkeypatch):
    """A power pass sends the workers ``u`` and ``v`` only: ``V`` is unchanged over a greedy
    step's passes and arrives once (with the refit that made it), not inside a new ``[V, v]``
    every pass (issue 27: 34 MB per pass at 1.4M columns, rank 2)."""
    calls = []
    real_scatter = cluster_client.scatter

    def scatter(data, *a, **kw):
        calls.append([x for x in (data if isinstance(data, list) else [data])])
        return real_scatter(data, *a, **kw)

    monkeypatch.setattr(cluster_client, "scatter", scatter)
    engine._SCATTER_CACHE.clear()
    sent0 = dict(engine.SCATTER_STATS)
    kw = dict(loss="square", n_components=2, init="zero", refit="full", power_iter=4,
              power_tol=0.0, cache_bytes=0, random_state=0)  # fmt: skip
    with dask.config.set(scheduler=cluster_client):
        est = GreedyLowRank(**kw).fit(store)
    n_workers = len(cluster_client.scheduler_info()["workers"])
    sent = engine.SCATTER_STATS["bytes"] - sent0["bytes"]
    engine._SCATTER_CACHE.clear()

    arrays = [c for c in calls if all(isinstance(x, np.ndarray) for x in c)]
    power = [c for c in arrays if any(x.shape == (N_ROWS,) for x in c)]  # the ones carrying u
    assert len(power) >= 2 * 3, [[x.shape for x in c] for c in arrays]
    assert all(x.ndim == 1 for c in power for x in c), [[x.shape for x in c] for c in power]
    assert max(sum(x.nbytes for x in c) for c in power) <= 8 * (N_ROWS + N_COLS)
    # in all: u and v per power pass, U and V once per refit (t + 1 columns at step t)
    unit = 8 * (N_ROWS + N_COLS)
    budget = unit * (est.n_passes_by_kind_["power"] + sum(range(1, est.n_iter_ + 1)))
    assert 0 < sent <= n_workers * budget, (sent, n_workers * budget)
