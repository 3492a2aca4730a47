"""Graph hygiene on a distributed cluster (issue 27): every pass ships keys, not data.

Constants of a pass (landmarks, factors) and in-memory row-aligned state (IMC's row factor
``P``, a NumPy ``X``) of :data:`ooc_lowrank.engine.SCATTER_BYTES` or more are scattered to the
workers once per change; a pass's graph carries only keys and small arguments.  Checked for
every method on the 2-process cluster of ``conftest.py``: Dask's own large-graph warning is
turned into an error at a threshold of ``PER_TASK`` bytes per row block.
"""

from __future__ import annotations

import re
import warnings

import dask
import numpy as np
import pytest
import scipy.sparse as sp

PER_TASK = 64 * 2**10  # bytes of serialized graph per row block, at most
N_BLOCKS = 8


@pytest.fixture
def graph_sizes(cluster_client):
    """Yields a list that collects the serialized size of every graph sent during the test;
    a graph above ``PER_TASK * N_BLOCKS`` bytes is an error (Dask's warning, raised)."""
    sizes: list[int] = []
    limit = PER_TASK * N_BLOCKS
    with dask.config.set(
        {"scheduler": cluster_client, "distributed.admin.large-graph-warning-threshold": "1B"}
    ), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield sizes
    for w in caught:
        m = re.search(r"Sending large graph of size ([\d.]+ \w+)", str(w.message))
        if m:
            sizes.append(dask.utils.parse_bytes(m.group(1).replace(" ", "")))
    assert sizes, "no graph was sent to the cluster"
    too_big = [s for s in sizes if s > limit]
    assert not too_big, (
        f"{len(too_big)} of {len(sizes)} graphs above {PER_TASK} bytes per block "
        f"(largest {max(too_big)} bytes for {N_BLOCKS} blocks)"
    )


def _data(n=12000, d=40, L=12, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)).astype(np.float32)
    Y = sp.random(n, L, density=0.15, format="csr", random_state=seed, dtype=np.float32)
    Y.data[:] = 1
    return rng, X, Y


BR = 1500  # 12000 rows -> 8 blocks


def test_gimc_passes_ship_keys(graph_sizes):
    from ooc_lowrank import GIMC

    _, X, Y = _data()
    GIMC(n_features_map=100, max_iter=2, block_rows=BR, random_state=0).fit(X, Y)


def test_kernelmaxide_and_maxide_passes_ship_keys(graph_sizes):
    from ooc_lowrank.kernelmaxide import KernelMaxide, Maxide

    rng, X, Y = _data()
    Yo = Y.copy()
    Yo.data = np.where(rng.random(Yo.nnz) < 0.5, 1.0, -1.0).astype(np.float32)
    KernelMaxide(n_features_map=400, max_iter=3, random_state=0).fit(X, Yo)
    Maxide(max_iter=3, random_state=0).fit(X, Yo)


def test_imc_and_glrl_passes_ship_keys(graph_sizes):
    from ooc_lowrank.glrl import GreedyLowRank
    from ooc_lowrank.imc import InductiveMatrixCompletion

    rng, X, _ = _data()
    obs = sp.random(12000, 2000, density=0.002, format="csr", random_state=2)
    InductiveMatrixCompletion(n_components=5, max_iter=1, cg_iter=3, block_rows=BR,
                              random_state=0).fit(
        obs, X_row=X, X_col=rng.normal(size=(2000, 10))
    )
    GreedyLowRank(n_components=2, block_rows=BR, random_state=0).fit(obs)


def test_clustering_passes_ship_keys(graph_sizes):
    from ooc_lowrank.imc import GIMCClustering

    rng = np.random.default_rng(3)
    n = 6000
    X = rng.normal(size=(n, 8))
    r, c = rng.integers(0, n, size=(2, 4 * n))
    v = (rng.random(4 * n) < 0.5).astype(float)
    GIMCClustering(n_clusters=4, alpha=1.0, n_features_map=100, max_iter=1, cg_iter=3,
                   block_rows=n // N_BLOCKS, random_state=0).fit(X, constraints=(r, c, v))  # fmt: skip


def test_mvm_passes_ship_keys(graph_sizes):
    from ooc_lowrank.mvm import MultiViewMachineRegressor

    rng, X, _ = _data()
    MultiViewMachineRegressor(view_sizes=[20, 20], solver="lbfgs", max_iter=3, block_rows=BR,
                              random_state=0).fit(X, rng.normal(size=len(X)))  # fmt: skip


def test_scheduler_client_get_is_the_client(cluster_client):
    """``dask.config.set(scheduler=client.get)`` (the out-of-core benchmarks' harness) is the
    distributed client: its constants are scattered, not embedded (the 1M-item IMC benchmark
    sent 0.8 MB graphs per pass at 20,000 rows, 40 MB at 1M)."""
    from ooc_lowrank import engine

    with dask.config.set(scheduler=cluster_client.get):
        assert engine.active_client() is cluster_client
