"""What one MVM L-BFGS pass costs a distributed cluster, by structure (issue 27); no timing.

A pass over a store of ``B`` row blocks (views and target read together) is ``B`` tasks, each
reading its block of every input and running the block function, plus the tree's steps
(``ceil(B / 8)`` + 1 at the small outputs of a pass): before, each block also had a
chunk-sum and an alias task (2.2 tasks per block at 24 blocks).
"""

from __future__ import annotations

import dask
import numpy as np

from ooc_lowrank import engine
from ooc_lowrank.mvm import MultiViewMachineRegressor
from ooc_lowrank.storage import write_arrays

N, BR = 4_000, 250  # 16 blocks: a two-level tree (8 + 8 -> 2 -> 1)


def test_mvm_lbfgs_pass_structure_on_a_cluster(tmp_path, cluster_client, monkeypatch):
    rng = np.random.default_rng(0)
    X0, X1 = rng.standard_normal((N, 6)), rng.standard_normal((N, 5))
    y = X0[:, 0] * X1[:, 1] + 0.1 * rng.standard_normal(N)
    ds = write_arrays(str(tmp_path / "mv.zarr"), {"X0": X0, "X1": X1, "y": y[:, None]},
                      block_rows=BR)  # fmt: skip
    graphs = []
    real = engine._compute_on_cluster

    def compute_on_cluster(client, targets):
        graphs.append(sum(len(t.__dask_graph__()) for t in targets))
        return real(client, targets)

    monkeypatch.setattr(engine, "_compute_on_cluster", compute_on_cluster)
    kw = dict(solver="lbfgs", max_iter=3, random_state=0)
    views = [ds["X0"], ds["X1"]]
    with dask.config.set(scheduler=cluster_client):
        est = MultiViewMachineRegressor(**kw).fit(views, ds["y"])
    local = MultiViewMachineRegressor(**kw).fit(views, ds["y"])
    n_blocks = -(-N // BR)
    assert n_blocks == 16 and len(graphs) >= 3
    # every pass: one task per block + the tree's 2 + 1 steps
    assert graphs == [n_blocks + 3] * len(graphs), graphs
    # and the same model as on the local threads, bit for bit
    np.testing.assert_array_equal(est.predict(views), local.predict(views))
