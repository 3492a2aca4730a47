"""The same fit on a 2-process LocalCluster as in threads (issue 23, item 4).

Arrays deserialized on a worker can start at any byte of a network frame; NumPy's matmul
multiplies a misaligned operand with its own loop instead of BLAS, with another summation order,
so a block gave another result on the cluster and GIMCClustering's embedding drifted 8 % from the
threaded one.  The engine hands block functions aligned arrays only.
"""

from __future__ import annotations

import dask
import numpy as np

from ooc_lowrank import engine
from ooc_lowrank.imc.clustering import GIMCClustering, sample_constraints


def _blobs(rng, n=300, d=10, k=3):
    centers = rng.standard_normal((k, d)) * 4
    y = rng.integers(0, k, n)
    return centers[y] + rng.standard_normal((n, d)), y


def test_misaligned_blocks_are_copied_aligned():
    a = np.arange(40, dtype=np.float64).reshape(8, 5)
    buf = np.zeros(a.nbytes + 8, dtype=np.uint8)
    off = 1 if buf.ctypes.data % 8 == 0 else 0
    mis = np.ndarray(a.shape, a.dtype, buffer=buf, offset=off + (8 - buf.ctypes.data % 8) % 8)
    mis[...] = a
    assert not mis.flags.aligned
    out = engine._aligned([mis, a, 3])
    assert out[0].flags.aligned and np.array_equal(out[0], a)
    assert out[1] is a and out[2] == 3


def test_clustering_on_a_cluster_equals_the_threaded_fit(cluster_client, rng):
    X, y = _blobs(rng)
    cons = sample_constraints(y, 5 * X.shape[0], random_state=1)
    # one iteration is enough to show the difference (3e-17 before the fix; over 10
    # iterations the fit amplifies it to an embedding 8 % away); every pass is ~0.2 s here
    kw = dict(n_clusters=3, alpha=1.0, n_features_map=100, max_iter=1, cg_iter=1, block_rows=100,
              n_init=1, random_state=0)  # fmt: skip
    threaded = GIMCClustering(**kw).fit(X, constraints=cons)
    with dask.config.set(scheduler=cluster_client):
        dist = GIMCClustering(**kw).fit(X, constraints=cons)
    # the engine's reductions have a fixed order and every block function now sees the same
    # (aligned) arrays on both schedulers: the same bits, not merely the same to rounding
    assert np.array_equal(dist.imc_.row_factors_, threaded.imc_.row_factors_)
    assert np.array_equal(dist.embedding_, threaded.embedding_)
    assert np.array_equal(dist.labels_, threaded.labels_)


def _misaligned_count(Xb, Zb):
    return np.array([float(not Xb.flags.aligned) + float(not Zb.flags.aligned)])


def test_block_functions_see_aligned_arrays_on_a_cluster(cluster_client, rng):
    X = rng.standard_normal((300, 10))
    Z = rng.standard_normal((300, 3))
    got = engine.map_reduce(
        _misaligned_count, engine.as_blocked(X, block_rows=10), Z, client=cluster_client
    )
    assert float(np.asarray(got).ravel()[0]) == 0.0
