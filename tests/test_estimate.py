"""Estimates before a fit: ``GIMC(...).estimate(X, Y)`` / ``estimate_memory`` and the refusal
of a fit whose passes cannot fit a worker's ``memory_limit``.

The memory model is compared with what the real block functions allocate (``tracemalloc``
sees every NumPy / SciPy buffer, including the syrk output): the model adds every array a
block function creates as if all were alive at once, so it must not be below the measured peak
by more than the transients it ignores (einsum / cast scratch), and not above it by more than
the arrays that are freed before the peak (``A W^T`` in the gradient pass, the trial ``U_t``).
Measured ratios (peak / model) are 0.88-0.99 over the cases below; the test allows [0.7, 1.1]:
the model may overstate by up to ~30% (it is used to refuse fits, so erring high is the safe
side) and never understate by more than 10%.
"""

from __future__ import annotations

import tracemalloc

import dask
import numpy as np
import pytest
import scipy.sparse as sp

from ooc_lowrank import engine
from ooc_lowrank._estimate import WorkerMemoryError, estimate_memory
from ooc_lowrank.gimc import GIMC, _blocks
from ooc_lowrank.storage import _du, write_arrays


def _data(rng, n, d, L, dtype=np.float64, density=None):
    X = rng.standard_normal((n, d)).astype(dtype)
    if density is not None:
        X[rng.random((n, d)) > density] = 0.0
        X = sp.csr_matrix(X)
    Y = sp.csr_matrix((rng.random((n, L)) < 0.1).astype(dtype))
    return X, Y


def _peak(fn, *args):
    fn(*args)  # warm up (JIT, caches) outside the measurement
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        fn(*args)
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


CASES = [
    dict(features="fourier", n=3000, d=40, L=12, m=64, dtype=np.float64),
    dict(features="fourier", n=3000, d=40, L=12, m=64, dtype=np.float32),
    dict(features="both", n=2000, d=60, L=8, m=48, dtype=np.float64, density=0.1),
    dict(features="nystrom", n=2000, d=30, L=200, m=64, dtype=np.float64),  # L >= D/2: W W^T
]


@pytest.mark.parametrize("case", CASES, ids=["lff64", "lff32", "both-csr", "lnys-manyL"])
def test_block_memory_model_matches_measured_allocations(case, rng):
    c = dict(case)
    X, Y = _data(rng, c["n"], c["d"], c["L"], c["dtype"], c.get("density"))
    est = GIMC(features=c["features"], n_components=c["m"], n_trials=2, block_rows=c["n"])
    e = est.estimate(X, Y)
    assert e["n_blocks"] == 1 and e["block_rows"] == c["n"] and e["n_trials"] == 2
    # the block functions' inputs, as the fit passes them (one block)
    M, D, L = e["n_params"], e["n_phi"], e["n_labels"]
    parts = []
    for k in ["fourier", "nystrom"] if c["features"] == "both" else [c["features"]]:
        parts.append((k, c["m"], 0.1, None, True))
    spec = _blocks.FeatureSpec.build(parts)
    dt = np.dtype(c["dtype"])
    U = (0.1 * rng.standard_normal((c["d"], M))).astype(dt)
    direction = (0.01 * rng.standard_normal((c["d"], M))).astype(dt)
    W = rng.standard_normal((D, L))
    WWt = (W @ W.T).astype(dt) if 2 * L >= D else None
    Wt = np.ascontiguousarray(W.T).astype(dt)
    stats = _peak(_blocks.stats_block, X, Y, U, direction, (1.0, 0.5), spec, L, False, False)
    grad = _peak(_blocks.grad_block, X, Y, U, spec, WWt, Wt, L, False)
    for name, got in (("stats", stats), ("grad", grad)):
        model = e["task_alloc_bytes"][name]
        assert 0.7 <= got / model <= 1.1, (name, got, model, got / model)


def test_estimate_reports_passes_sizes_and_store_bytes(rng, tmp_path):
    X, Y = _data(rng, 1200, 25, 9)
    url = str(tmp_path / "s.zarr")
    write_arrays(url, {"X": X, "Y": Y}, block_rows=300)
    from ooc_lowrank.storage import open_dataset

    ds = open_dataset(url)
    e = GIMC(n_components=40, max_iter=10, cache_bytes=0).estimate(ds)
    assert e["n_rows"] == 1200 and e["n_blocks"] == 4 and e["block_rows"] == 300
    assert e["n_phi"] == 80 and e["n_params"] == 40 and not e["resident"]
    assert e["n_trials"] == 2 and e["passes_per_iteration"] == {"typical": 2, "max": 11}
    assert e["max_passes"] == 1 + 10 * 11 and e["read_bytes_per_pass"] == e["store_bytes"]
    on_disk = _du(url)
    # arrays as stored (no compression) + a few kB of JSON metadata
    assert e["store_bytes"] <= on_disk <= e["store_bytes"] * 1.02 + 64 * 1024, (on_disk, e)
    assert e["fits"] is None and e["worker_memory_limit"] is None  # no cluster: no verdict
    resident = GIMC(n_components=40).estimate(X, Y)
    assert resident["resident"] and resident["n_trials"] == 1
    assert resident["passes_per_iteration"]["max"] == 21
    assert estimate_memory(GIMC(n_components=40), X, Y) == resident
    assert not hasattr(GIMC(), "n_features_in_")  # estimate leaves the estimator unfitted
    with pytest.raises(TypeError, match="must have an estimate"):
        estimate_memory(object(), X, Y)


def test_fit_that_cannot_fit_a_worker_is_refused_before_it_starts(rng, cluster_client):
    X, Y = _data(rng, 200, 6, 5)
    big = GIMC(n_components=9000, max_iter=1)  # D = 18000: a 2.6 GB Gram statistic per task
    with dask.config.set(scheduler=cluster_client):
        e = big.estimate(X, Y)
        assert e["n_workers"] == 2 and e["worker_memory_limit"] == 2 * 2**30
        assert e["fits"] is False and e["worker_bytes"] > 0.8 * 2 * 2**30
        m_ok = e["suggest"]["n_components"]
        assert 0 < m_ok < 9000
        with pytest.raises(WorkerMemoryError) as err:
            big.fit(X, Y)
        assert not hasattr(big, "coef_")
        msg = str(err.value)
        assert "per worker" in msg and "memory_limit 2.00 GiB" in msg
        assert f"n_components (<= {m_ok})" in msg and "n_components=9000" in msg
        ok = GIMC(n_components=m_ok).estimate(X, Y)
        assert ok["fits"] is True
        assert GIMC(n_components=m_ok + 1).estimate(X, Y)["fits"] is False
        small = GIMC(n_components=8, max_iter=1).fit(X, Y)  # fits: runs
    assert small.n_iter_ == 1


def test_block_rows_suggestion_for_wide_blocks(cluster_client):
    """When the blocks, not the statistics, are too large, smaller blocks are the fix.  Lazy
    Dask inputs (never computed): 1.6 GB row blocks."""
    import dask.array as da

    def inputs(rows):
        X = da.zeros((800_000, 2_000), chunks=(rows, 2_000), dtype=np.float32)
        Y = da.zeros((800_000, 3), chunks=(rows, 3), dtype=np.float32)
        return X, Y

    with dask.config.set(scheduler=cluster_client):
        e = GIMC(n_components=100).estimate(*inputs(200_000))
        assert e["fits"] is False and not e["resident"] and e["block_rows"] == 200_000
        r = e["suggest"]["block_rows"]
        assert 0 < r < 200_000
        assert GIMC(n_components=100).estimate(*inputs(r))["fits"] is True
        assert GIMC(n_components=100).estimate(*inputs(int(r * 1.2)))["fits"] is False
    assert engine.active_client() is None
