"""What a fit leaves on the workers of a distributed cluster (issue 27).

IMC with in-memory observations (what ``GIMCClustering(alpha="auto")`` fits on) at 1M items
filled a 1 GiB worker: the observations and their transposed copy were scattered whole,
replicated on every worker, sliced into copies there in every pass, and the stale factors of
earlier passes stayed in the scatter cache; a replaced entry was dropped only after the new
one had been shipped.  Here a small problem runs with a scatter budget small enough to behave
like the big one.
"""

from __future__ import annotations

import time
import warnings

import dask
import numpy as np
import pytest
import scipy.sparse as sp

from ooc_lowrank import engine


def _scattered_bytes(dask_worker):
    """Bytes of scattered data (keys ``<type>-<id>``, as ``client.scatter`` names them) held by
    a worker; persisted feature blocks and task results are not counted."""
    from dask.sizeof import sizeof

    return sum(
        sizeof(v)
        for k, v in dask_worker.data.items()
        if isinstance(k, str) and k.split("-", 1)[0] in ("csr_matrix", "ndarray")
    )


def test_imc_scatters_blocks_within_the_budget(cluster_client, monkeypatch):
    from ooc_lowrank.imc import InductiveMatrixCompletion

    rng = np.random.default_rng(3)
    n, d, k, br = 4_000, 6, 2, 1_000
    X = rng.standard_normal((n, d))
    obs = sp.random(n, n, density=10 / n, format="coo", random_state=rng)
    trip = (obs.row, obs.col, np.round(obs.data))
    obs_bytes = obs.nnz * 12 + 8 * (n + 1)  # float64 values, int32 indices, row pointers
    # per worker: half the observations (their blocks are spread over the 2 workers), P and Q
    # (replicated); the observations and their transposed copy do not fit together
    budget = obs_bytes // 2 + 2 * n * k * 8 + 64 * 2**10
    monkeypatch.setattr(engine, "SCATTER_CACHE_BYTES", budget)
    kw = dict(n_components=k, row_map="fourier", col_map="fourier", n_features_map=8,
              max_iter=1, cg_iter=2, tol=0.0, block_rows=br, random_state=0)  # fmt: skip
    local = InductiveMatrixCompletion(**kw).fit(trip, X_row=X, X_col=X, shape=(n, n))

    shipped, over = [], []  # rows of every scattered sparse object; cache bytes above budget
    real_scatter = cluster_client.scatter

    def scatter(data, *a, **kws):
        items = data if isinstance(data, list) else [data]
        shipped.extend(x.shape[0] for x in items if sp.issparse(x))
        # what the cache holds when new data arrives: stale entries were released first
        held = sum(nb for key, (_, nb) in engine._SCATTER_CACHE.items()
                   if key[0] == id(cluster_client))  # fmt: skip
        if held > budget:
            over.append(held)
        return real_scatter(data, *a, **kws)

    monkeypatch.setattr(cluster_client, "scatter", scatter)
    engine._SCATTER_CACHE.clear()
    with dask.config.set(
        {"scheduler": cluster_client, "distributed.admin.large-graph-warning-threshold": "512kB"}
    ), warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*large graph.*")
        est = InductiveMatrixCompletion(**kw).fit(trip, X_row=X, X_col=X, shape=(n, n))
    try:
        assert est.n_passes_ > 10
        # observations travel as row blocks, never whole (no worker slices copies of a whole)
        assert shipped and max(shipped) <= br, shipped
        assert not over, (over, budget)
        # between passes the workers keep at most the budget each (release is asynchronous:
        # the client's release reaches them through the scheduler, so poll)
        deadline = time.monotonic() + 10.0
        while max(held := cluster_client.run(_scattered_bytes).values()) > budget:
            if time.monotonic() > deadline:
                pytest.fail(f"workers hold {list(held)} bytes of scattered data > {budget}")
            time.sleep(0.05)
    finally:
        engine._SCATTER_CACHE.clear()
    np.testing.assert_allclose(est.objective_, local.objective_, rtol=1e-10)
    np.testing.assert_allclose(est.row_factors_, local.row_factors_, rtol=1e-8, atol=1e-10)
