"""Row-block engine: reductions equal NumPy for any chunking and scheduler; one compute per call."""

from __future__ import annotations

import logging

import dask
import dask.array as da
import numba as nb
import numpy as np
import pytest
import scipy.sparse as sp

from ooc_lowrank import engine
from ooc_lowrank.storage import write_arrays


def _gram_and_cross(Xb, Yb, w):
    """A typical block function: X^T X, Y^T X w and a count (float64 accumulation)."""
    Xb64 = np.asarray(Xb.toarray() if sp.issparse(Xb) else Xb, dtype=np.float64)
    return Xb64.T @ Xb64, np.asarray(Yb.T @ (Xb64 @ w)), np.array([Xb64.shape[0]], float)


def _reference(X, Y, w):
    X64 = np.asarray(X.toarray() if sp.issparse(X) else X, dtype=np.float64)
    return X64.T @ X64, np.asarray(Y.T @ (X64 @ w)), np.array([X64.shape[0]], float)


CHUNKINGS = {
    "one": lambda n: [0, n],
    "two": lambda n: [0, n // 2, n],
    "uneven": lambda n: [0, 1, 7, 50, n - 3, n],
}


@pytest.fixture
def data(rng):
    n, d, L = 211, 6, 4
    X = rng.standard_normal((n, d)).astype(np.float32)
    Xs = sp.random(n, d, density=0.3, format="csr", random_state=1, dtype=np.float64)
    Y = sp.random(n, L, density=0.2, format="csr", random_state=2, dtype=np.float32)
    w = rng.standard_normal((d, 2))
    return X, Xs, Y, w


@pytest.mark.parametrize("chunking", list(CHUNKINGS))
@pytest.mark.parametrize("scheduler", ["sync", "threads"])
@pytest.mark.parametrize("sparse_x", [False, True])
@pytest.mark.parametrize("chains", [False, True])
def test_reduce_equals_numpy(data, chunking, scheduler, sparse_x, chains):
    X, Xs, Y, w = data
    Xin = Xs if sparse_x else X
    bounds = np.array(CHUNKINGS[chunking](X.shape[0]))
    bx = engine.as_blocked(Xin).rechunk(bounds)
    with dask.config.set(scheduler=scheduler):
        got = engine.map_reduce(_gram_and_cross, bx, Y, args=(w,), chains=chains)
    ref = _reference(Xin, Y, w)
    for g, r in zip(got, ref, strict=True):
        np.testing.assert_allclose(g, r, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("chunking", list(CHUNKINGS))
@pytest.mark.parametrize("sparse_x", [False, True])
def test_reduce_equals_numpy_on_local_cluster(data, chunking, sparse_x, cluster_client):
    X, Xs, Y, w = data
    Xin = Xs if sparse_x else X
    bx = engine.as_blocked(Xin).rechunk(np.array(CHUNKINGS[chunking](X.shape[0])))
    got = engine.map_reduce(_gram_and_cross, bx, Y, args=(w,), client=cluster_client)
    for g, r in zip(got, _reference(Xin, Y, w), strict=True):
        np.testing.assert_allclose(g, r, rtol=1e-12, atol=1e-12)


@nb.njit(cache=False, nogil=True)
def _loop_gram(X, Y, w):
    """X^T X, Y^T X w and a count by plain loops: arithmetic independent of buffer alignment."""
    n, d = X.shape
    G = np.zeros((d, d))
    Xw = np.zeros(n)
    for i in range(n):
        for a in range(d):
            Xw[i] += X[i, a] * w[a]
            for b in range(d):
                G[a, b] += X[i, a] * X[i, b]
    C = np.zeros((Y.shape[1], 1))
    for i in range(n):
        for j in range(Y.shape[1]):
            C[j, 0] += Y[i, j] * Xw[i]
    return G, C


def _loop_block(Xb, Yb, w):
    G, C = _loop_gram(np.ascontiguousarray(Xb, dtype=np.float64), np.asarray(Yb, float), w)
    return G, C, np.array([Xb.shape[0]], float)


@pytest.mark.parametrize("chains", [False, True])
def test_reduction_order_is_fixed_across_schedulers(data, cluster_client, chains):
    # the engine's part (the order in which block results are summed) is bitwise deterministic:
    # with an alignment-independent block function, every scheduler gives the same bits
    X, _, Y, w = data
    w = np.ascontiguousarray(w[:, 0])
    Yd = np.asarray(Y.toarray() if sp.issparse(Y) else Y, float)
    bx = engine.as_blocked(X, block_rows=23)
    outs = []
    kw = dict(args=(w,), chains=chains)
    for sched in ["sync", "threads"]:
        with dask.config.set(scheduler=sched):
            outs.append(engine.map_reduce(_loop_block, bx, Yd, **kw))
    outs.append(engine.map_reduce(_loop_block, bx, Yd, client=cluster_client, **kw))
    for o in outs[1:]:
        for a, b in zip(outs[0], o, strict=True):
            assert np.array_equal(a, b)  # bitwise
    # and the sum is the right one
    ref = _reference(X, Yd, w)
    np.testing.assert_allclose(outs[0][0], ref[0], rtol=1e-12)


@pytest.mark.parametrize("chains", [False, True])
def test_blas_block_functions_agree_across_schedulers_to_rounding(data, cluster_client, chains):
    # BLAS may take alignment- and thread-dependent paths: equal to rounding, not bitwise
    X, _, Y, w = data
    bx = engine.as_blocked(X, block_rows=23)
    kw = dict(args=(w,), chains=chains)
    with dask.config.set(scheduler="threads"):
        local = engine.map_reduce(_gram_and_cross, bx, Y, **kw)
    dist = engine.map_reduce(_gram_and_cross, bx, Y, client=cluster_client, **kw)
    for a, b in zip(local, dist, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def test_store_inputs_on_local_cluster(tmp_path, data, cluster_client):
    X, Xs, Y, w = data
    ds = write_arrays(str(tmp_path / "e.zarr"), {"X": X, "Xs": Xs, "Y": Y}, block_rows=40)
    ref = _reference(Xs, Y, w)
    got = engine.map_reduce(_gram_and_cross, ds["Xs"], ds["Y"], args=(w,), client=cluster_client)
    for g, r in zip(got, ref, strict=True):
        np.testing.assert_allclose(g, r, rtol=1e-12, atol=1e-12)
    # another chunking of the same store agrees to round-off
    got2 = engine.map_reduce(
        _gram_and_cross, engine.as_blocked(ds["X"], block_rows=17), ds["Y"], args=(w,)
    )
    for g, r in zip(got2, _reference(X, Y, w), strict=True):
        np.testing.assert_allclose(g, r, rtol=1e-12, atol=1e-10)


def test_offset_and_map_rows(data):
    X, _, _, _ = data
    u = np.arange(X.shape[0], dtype=np.float64)

    def rowsum_weighted(start, Xb, u):
        return u[start : start + Xb.shape[0]] @ np.asarray(Xb, np.float64)

    got = engine.map_reduce(
        rowsum_weighted, engine.as_blocked(X, block_rows=30), args=(u,), offset=True
    )
    np.testing.assert_allclose(got, u @ X.astype(np.float64), rtol=1e-12)
    lazy = engine.map_rows(
        lambda Xb: np.asarray(Xb, np.float64).sum(1, keepdims=True),
        engine.as_blocked(X, block_rows=50),
        n_cols=1,
    )
    assert isinstance(lazy, da.Array) and lazy.chunks[0] == (50, 50, 50, 50, 11)
    (vals,) = engine.compute(lazy)
    np.testing.assert_allclose(vals[:, 0], X.astype(np.float64).sum(1), rtol=1e-6)


def test_one_compute_per_call_and_fixed_graph(data, counting_scheduler):
    X, _, Y, w = data
    bx = engine.as_blocked(X, block_rows=20)
    sizes = []
    for _ in range(3):
        red = engine.reduce_blocks(_gram_and_cross, bx, Y, args=(w,))
        sizes.append(len(red.packed.__dask_graph__()))
        engine.compute(red)
    assert counting_scheduler.count == 3
    assert len(set(sizes)) == 1  # graph size does not grow with iterations
    a, b = engine.compute(
        engine.reduce_blocks(_gram_and_cross, bx, Y, args=(w,)),
        engine.map_rows(lambda Xb: np.asarray(Xb)[:, :1], bx, n_cols=1, dtype=np.float32),
    )
    assert counting_scheduler.count == 4  # two results, one compute


def test_dask_input_validation():
    x = da.ones((10, 4), chunks=(5, 2))
    with pytest.raises(ValueError, match=r"rechunk\(\{1: X.shape\[1\]\}\)"):
        engine.as_blocked(x)
    with pytest.raises(ValueError, match="2-D"):
        engine.as_blocked(np.ones(5))
    with pytest.raises(ValueError, match="finite"):
        engine.as_blocked(np.array([[1.0, np.inf]]))
    with pytest.raises(ValueError, match="as many rows"):
        engine.map_reduce(lambda a, b: a.sum(), np.ones((4, 2)), np.ones((5, 2)))
    b = engine.as_blocked(da.ones((10, 4), chunks=(3, 4)))
    assert b.kind == "dense" and list(b.bounds) == [0, 3, 6, 9, 10]


def test_cache_decision_is_logged(tmp_path, data, caplog):
    X, _, _, _ = data
    ds = write_arrays(str(tmp_path / "c.zarr"), {"X": X}, block_rows=50)
    b = engine.as_blocked(ds["X"])
    with caplog.at_level(logging.INFO, logger="ooc_lowrank"):
        (kept,) = engine.maybe_persist(b, budget=10**9)
        (streamed,) = engine.maybe_persist(b, budget=10)
    assert "caching" in caplog.text and "streaming" in caplog.text
    assert streamed is b and kept is not b
    np.testing.assert_array_equal(engine.compute(kept.dask)[0], X)


def test_large_outputs_are_summed_along_bounded_chains(data):
    X, _, Y, w = data
    bx = engine.as_blocked(X, block_rows=10)  # 22 blocks

    def big(Xb):  # 4 MB output per block: chained by default
        out = np.zeros(512 * 1024)
        out[: Xb.shape[0]] = np.asarray(Xb, np.float64)[:, 0]
        return out

    red = engine.reduce_blocks(big, bx)
    keys = [str(k) for k in dict(red.packed.__dask_graph__())]
    assert sum("reduce-chain" in k for k in keys) == 22
    # chain totals wait for the final sum: at most REDUCE_BYTES of them (64 MB / 4 MB = 16)
    assert engine._n_chains(22, 512 * 1024) == 8
    assert engine._n_chains(22, 4 * 2**20) == 2  # 32 MB outputs: two chains
    assert engine._n_chains(1, 4 * 2**20) == 1
    with dask.config.set({"ooc_lowrank.reduce_chains": 5}):
        assert engine._n_chains(22, 4 * 2**20) == 5
    (got,) = engine.compute(red)
    tree = engine.map_reduce(big, bx, chains=False)
    np.testing.assert_allclose(got, tree, rtol=1e-12)
    ref = np.zeros(512 * 1024)
    for s in range(0, X.shape[0], 10):
        ref[: min(10, X.shape[0] - s)] += X[s : s + 10, 0]
    np.testing.assert_allclose(got, ref, rtol=1e-12)
    # small outputs keep the tree (full parallelism)
    red_small = engine.reduce_blocks(_gram_and_cross, bx, Y, args=(w,))
    assert not any("reduce-chain" in str(k) for k in dict(red_small.packed.__dask_graph__()))


def _rows_and_cols(start, Xb, u):
    """A block function with a row output: ``(X u)[block rows]``, plus column sums."""
    Xb64 = np.asarray(Xb.toarray() if sp.issparse(Xb) else Xb, dtype=np.float64)
    return Xb64 @ u, Xb64.sum(0)


_rows_and_cols.row_outputs = (0,)


@pytest.mark.parametrize("chunking", list(CHUNKINGS))
@pytest.mark.parametrize("scheduler", ["sync", "threads"])
@pytest.mark.parametrize("chains", [False, True])
@pytest.mark.parametrize("sparse_x", [False, True])
@pytest.mark.parametrize("width", [None, 2])
def test_row_outputs_are_placed_at_the_block_rows(
    data, chunking, scheduler, chains, sparse_x, width
):
    """Row outputs (n_b,) or (n_b, width) come back as (n, ...) with each block's rows at their
    place (2-D: issue 24, IMC's one-pass line-search trial returns its factor rows this way),
    the shapes probed or given."""
    X, Xs, _, _ = data
    Xin = Xs if sparse_x else X
    X64 = np.asarray(Xin.toarray() if sparse_x else Xin, np.float64)
    u = np.arange(X.shape[1] * (width or 1), dtype=np.float64).reshape(X.shape[1], -1)
    u = u[:, 0] if width is None else u
    shapes = [(X.shape[0], width), (X.shape[1],)] if width and chains else None
    bx = engine.as_blocked(Xin).rechunk(np.array(CHUNKINGS[chunking](X.shape[0])))
    with dask.config.set(scheduler=scheduler):
        xu, colsum = engine.map_reduce(
            _rows_and_cols, bx, args=(u,), offset=True, chains=chains, shapes=shapes
        )
    assert xu.shape == (X.shape[0], *u.shape[1:])  # the probe's one row, widened to all
    blocks = zip(bx.bounds[:-1], bx.bounds[1:], strict=True)
    want = np.concatenate([_rows_and_cols(s, X64[s:e], u)[0] for s, e in blocks])
    np.testing.assert_allclose(xu, want, rtol=1e-13)  # each block's own rows, nothing added
    np.testing.assert_allclose(colsum, X64.sum(0), rtol=1e-12)


def test_row_outputs_must_have_one_value_per_block_row(data):
    def short(start, Xb):
        return np.zeros(max(Xb.shape[0] - 1, 0)), np.zeros(2)

    short.row_outputs = (0,)
    with pytest.raises(ValueError, match=r"row output 0 on rows \d+:\d+; expected \d+ \(one"):
        engine.map_reduce(short, engine.as_blocked(data[0], block_rows=100), offset=True)


def test_chained_reduction_checks_output_size(data):
    X = data[0]
    calls = iter(range(100))

    def ragged(Xb):
        return np.zeros(2**20 if next(calls) == 0 else 2**20 + 1)  # probe gives the size

    with pytest.raises(ValueError, match="expected 1048576"):
        engine.map_reduce(ragged, engine.as_blocked(X, block_rows=100), chains=True)


def test_fan_in_bounded_by_output_size():
    assert engine._fan_in(10) == 8
    assert engine._fan_in(2 * 2**20) == 4  # 16 MB partials: 4 at a time stay under 64 MB
    assert engine._fan_in(50 * 2**20) == 2
    red = engine.reduce_blocks(
        lambda b: np.zeros((1024, 1024)), np.ones((64, 2)), shapes=None, chains=False
    )
    # the tree's graph (a Delayed since issue 27) sums to the flat output
    (flat,) = dask.compute(red.packed, scheduler="sync")
    assert flat.shape == (1024 * 1024,) and not flat.any()
    # a chained reduction ends in one Delayed total (no one-chunk array to copy at finalize)
    red = engine.reduce_blocks(lambda b: np.ones((1024, 1024)), np.ones((64, 2)), chains=True)
    (total,) = engine.compute(red)
    assert total.shape == (1024, 1024) and total[0, 0] == 1.0


def test_cache_budget_capped_by_cluster_memory(tmp_path, data, cluster_client, caplog):
    X, _, _, _ = data
    ds = write_arrays(str(tmp_path / "c.zarr"), {"X": X}, block_rows=50)
    cap = engine._cluster_cache_cap(cluster_client)
    assert cap is not None and cap <= 2 * 2 * 2**30  # half of 2 workers x 2 GiB
    b = engine.as_blocked(ds["X"])
    with caplog.at_level(logging.INFO, logger="ooc_lowrank"):
        (out,) = engine.maybe_persist(b, budget=10**12, client=cluster_client)
    assert "capped" in caplog.text and "caching" in caplog.text


def test_single_block_fast_path_is_bitwise_the_graph_path(data, counting_scheduler):
    X, _, Y, w = data
    seen = []

    def fn(Xb, Yb, w):
        seen.append(Xb is X)  # the fast path hands over the in-memory source itself
        return _gram_and_cross(Xb, Yb, w)

    bx = engine.as_blocked(X, block_rows=10**6)
    via_graph = engine.map_reduce(fn, bx, Y, args=(w,))  # user-set scheduler: graph path
    assert counting_scheduler.count == 1 and not seen[-1]
    with dask.config.set(scheduler=None):  # default local scheduler: direct call
        direct = engine.map_reduce(fn, bx, Y, args=(w,))
    assert counting_scheduler.count == 1 and seen[-1]
    for a, b in zip(via_graph, direct, strict=True):
        assert a.dtype == b.dtype == np.float64 and np.array_equal(a, b)


def test_map_rows_compute_direct_path_equals_the_graph_path(data, counting_scheduler):
    X, _, _, w = data
    seen = []

    def fn(Xb, w):
        seen.append(Xb is X)
        return Xb @ w

    bx = engine.as_blocked(X, block_rows=10**6)
    via_graph = engine.map_rows_compute(fn, bx, args=(w,), n_cols=w.shape[1])
    assert counting_scheduler.count == 1 and not seen[-1]
    with dask.config.set(scheduler=None):
        direct = engine.map_rows_compute(fn, bx, args=(w,), n_cols=w.shape[1])
    assert counting_scheduler.count == 1 and seen[-1]
    blocks = engine.map_rows_compute(fn, engine.as_blocked(X, block_rows=7), args=(w,),
                                     n_cols=w.shape[1])  # fmt: skip
    assert direct.dtype == np.float64 and np.array_equal(direct, via_graph)
    np.testing.assert_allclose(blocks, X @ w, rtol=1e-12)


def test_block_function_modules_do_not_import_sklearn():
    """Workers unpickle block functions from these modules; scikit-learn (~50 MB resident)
    must not come with them (the estimators are imported lazily)."""
    import subprocess
    import sys

    code = (
        "import sys, ooc_lowrank.gimc._blocks, ooc_lowrank.glrl._blocks, ooc_lowrank.engine;"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'sklearn'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("block_rows", [None, 50])
def test_map_rows_persisted_is_map_rows_kept_in_memory(data, block_rows, counting_scheduler):
    X, Xs, _, _ = data
    B = engine.as_blocked(Xs, block_rows=block_rows)

    def scale_rows(start, Xb, c):
        out = sp.csr_matrix(Xb, dtype=np.float64, copy=True)
        out.data *= c
        return out

    n0 = counting_scheduler.count
    P = engine.map_rows_persisted(
        scale_rows, B, args=(2.0,), n_cols=X.shape[1], kind="csr", nnz=Xs.nnz, offset=True
    )
    assert P.kind == "csr" and P.n_blocks == B.n_blocks and list(P.bounds) == list(B.bounds)
    assert counting_scheduler.count - n0 == 1  # one compute (a graph scheduler is set)
    got = engine.map_reduce(lambda Xb: np.asarray(Xb.sum(axis=0)).ravel(), P)
    np.testing.assert_allclose(got, 2.0 * np.asarray(Xs.sum(axis=0)).ravel(), rtol=1e-12)
    with dask.config.set(scheduler=None):  # local threads: one in-memory block is mapped directly
        one = engine.map_rows_persisted(
            scale_rows,
            engine.as_blocked(Xs),
            args=(3.0,),
            n_cols=X.shape[1],
            kind="csr",
            offset=True,
        )
    assert sp.issparse(one.source) and np.allclose(one.source.toarray(), 3.0 * Xs.toarray())


@pytest.mark.parametrize("chains", [False, True])
def test_fortran_ordered_block_outputs_sum_in_c_order(rng, chains):
    # a non-symmetric Fortran-ordered output must come back as itself, not its transpose
    X = rng.standard_normal((90, 3))

    def outer(Xb):
        return np.asfortranarray(Xb.T @ Xb[:, :2])  # (3, 2), Fortran-ordered

    got = engine.map_reduce(outer, engine.as_blocked(X, block_rows=20), chains=chains)
    np.testing.assert_allclose(got, X.T @ X[:, :2], rtol=1e-12)


def test_large_args_are_scattered_once_on_a_cluster(rng, cluster_client):
    # factors shared by several passes travel to the workers once: the graphs reference the
    # same scattered key, and the results equal the local ones bitwise
    X = rng.standard_normal((300, 4))
    U = rng.standard_normal((40_000, 4))  # 1.2 MB, above SCATTER_BYTES
    engine._SCATTER_CACHE.clear()

    def f(Xb, U, s):
        return Xb.T @ Xb * s + U[:4].T @ U[:4]

    bx = engine.as_blocked(X, block_rows=50)
    local = [engine.map_reduce(f, bx, args=(U, s)) for s in (1.0, 2.0)]
    with dask.config.set(scheduler=cluster_client):
        reds = [engine.reduce_blocks(f, bx, args=(U, s)) for s in (1.0, 2.0)]
        got = [engine.compute(r)[0] for r in reds]
        # a chained reduction (large outputs) takes the same path
        big = engine.map_reduce(
            lambda Xb, U: np.outer(U[:, 0], Xb.sum(0)), bx, args=(U,), chains=True
        )
    assert len(engine._SCATTER_CACHE) == 1  # one scatter served all three graphs
    ((fut, nb),) = engine._SCATTER_CACHE.values()
    assert nb == U.nbytes and fut.status == "finished"
    np.testing.assert_allclose(big, np.outer(U[:, 0], X.sum(0)), rtol=1e-12)
    for a, b in zip(local, got, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12)  # BLAS: equal to rounding (engine docstring)
    # small arguments never leave the graph
    assert engine._unwrap_args((np.ones(10),), cluster_client)[0].shape == (10,)


def test_map_rows_scatters_large_args_on_a_cluster(rng, cluster_client):
    # row maps (predictions) reference the scattered array, not a copy inside each graph
    X = rng.standard_normal((300, 4))
    W = rng.standard_normal((4, 40_000))  # 1.3 MB, above SCATTER_BYTES
    engine._SCATTER_CACHE.clear()

    def f(Xb, W):
        return Xb @ W[:, :3]

    bx = engine.as_blocked(X, block_rows=50)
    with dask.config.set(scheduler=cluster_client):
        arr = engine.map_rows(f, bx, args=(W,), n_cols=3)
        held = [v for v in dict(arr.__dask_graph__()).values() if isinstance(v, np.ndarray)]
        assert not any(v.nbytes >= W.nbytes for v in held)  # W is not inside the graph
        got = arr.compute()
        again = engine.map_rows(f, bx, args=(W,), n_cols=3).compute()
    assert len(engine._SCATTER_CACHE) == 1  # one scatter served both graphs
    np.testing.assert_allclose(got, X @ W[:, :3], rtol=1e-12)
    np.testing.assert_array_equal(got, again)


def test_scatter_cache_is_bounded(rng, cluster_client, monkeypatch):
    engine._SCATTER_CACHE.clear()
    arrays = [rng.standard_normal(2**18) for _ in range(engine.SCATTER_CACHE_ENTRIES + 3)]  # 2 MiB
    futs = [engine._scattered(a, cluster_client) for a in arrays]
    assert len(engine._SCATTER_CACHE) == engine.SCATTER_CACHE_ENTRIES
    assert engine._scattered(arrays[-1], cluster_client) is futs[-1]  # a hit, no new scatter
    monkeypatch.setattr(engine, "SCATTER_CACHE_BYTES", 5 * 2**20)
    engine._scattered(arrays[0], cluster_client)
    assert len(engine._SCATTER_CACHE) == 2  # 4 MiB: the newest two
    np.testing.assert_array_equal(futs[-1].result(), arrays[-1])
    engine._SCATTER_CACHE.clear()


def test_in_memory_inputs_persist_on_a_cluster_only(rng, cluster_client):
    X = rng.standard_normal((200, 3))
    B = engine.as_blocked(X, block_rows=50)
    (local,) = engine.maybe_persist(B)
    assert local is B  # local schedulers: already in memory, unchanged
    with dask.config.set(scheduler=cluster_client):
        assert engine.active_client() is cluster_client
        (kept,) = engine.maybe_persist(B)
        assert kept is not B and kept.source is None  # on the workers now
        got = engine.map_reduce(lambda b: b.T @ b, kept)
    np.testing.assert_allclose(got, engine.map_reduce(lambda b: b.T @ b, B), rtol=1e-12)
    with dask.config.set(scheduler="threads"):
        assert engine.active_client() is None


@pytest.mark.parametrize("scheduler", ["sync", "threads"])
def test_chained_reduction_reads_store_blocks_inside_its_links(
    tmp_path, data, scheduler, monkeypatch
):
    """Store inputs of a chained reduction are read by the chain links themselves: no read
    task exists that a scheduler could run ahead of the links (memory stays one block per
    running link); the sums equal the tree's and NumPy's; persisted inputs are not re-read."""
    X, Xs, Y, w = data
    ds = write_arrays(str(tmp_path / "r.zarr"), {"X": X, "Xs": Xs, "Y": Y}, block_rows=40)
    bx = engine.as_blocked(ds["Xs"])
    by = engine.align(bx, engine.as_blocked(ds["Y"]))
    assert bx.reads is ds["Xs"] and by.reads is ds["Y"]
    red = engine.reduce_blocks(_gram_and_cross, bx, by, args=(w,), chains=True)
    keys = [str(k) for k in dict(red.packed.__dask_graph__())]
    assert sum("reduce-chain" in k for k in keys) == bx.n_blocks
    assert not any("read-" in k for k in keys), keys
    with dask.config.set(scheduler=scheduler):
        (got,) = engine.compute(red)
    tree = engine.map_reduce(_gram_and_cross, bx, by, args=(w,), chains=False)
    for g, t, r in zip(got, tree, _reference(Xs, Y, w), strict=True):
        np.testing.assert_allclose(g, t, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(g, r, rtol=1e-12, atol=1e-12)
    # a rechunked store input is read at its new bounds; a persisted one is never re-read
    b17 = engine.as_blocked(ds["X"], block_rows=17)
    assert b17.reads is ds["X"] and b17.n_blocks == -(-X.shape[0] // 17)
    kept = b17.persist()
    assert kept.reads is None
    red2 = engine.reduce_blocks(
        _gram_and_cross, kept, engine.align(kept, by), args=(w,), chains=True
    )
    calls = []
    orig = type(ds["X"]).read
    monkeypatch.setattr(
        type(ds["X"]), "read", lambda h, *a, **k: calls.append(h.name) or orig(h, *a, **k)
    )
    (got2,) = engine.compute(red2)
    assert "X" not in calls and calls.count("Y") == kept.n_blocks
    for g, r in zip(got2, _reference(X, Y, w), strict=True):
        np.testing.assert_allclose(g, r, rtol=1e-12, atol=1e-10)


def test_sparse_dask_input_rechunked_block_by_block(data):
    """A sparse Dask input aligned to other row blocks: each new block depends only on the old
    blocks that overlap it (no task gathers the whole array), and the sums are NumPy's."""
    _, Xs, Y, w = data
    old = [0, 30, 90, 150, Xs.shape[0]]
    parts = [
        da.from_delayed(
            dask.delayed(Xs[a:b].tocsr)(), shape=(b - a, Xs.shape[1]), dtype=Xs.dtype,
            meta=sp.csr_matrix((0, 0), dtype=Xs.dtype),
        )
        for a, b in zip(old[:-1], old[1:], strict=True)
    ]  # fmt: skip
    bx = engine.as_blocked(da.concatenate(parts, axis=0))
    assert bx.kind == "csr" and list(bx.bounds) == old
    new = np.array([0, 10, 40, 95, 100, Xs.shape[0]])
    rb = bx.rechunk(new)
    assert list(rb.bounds) == list(new)
    graph = dict(rb.dask.__dask_graph__())
    picks = [v for k, v in graph.items() if "_pick_rows" in str(k)]
    assert len(picks) == len(new) - 1
    # overlapping old blocks per new block: [0,10) 1, [10,40) 2, [40,95) 2, [95,100) 1, rest 2
    deps = sorted(len(v.dependencies) for v in picks)
    assert deps == [1, 1, 2, 2, 2], deps
    blocks = dask.compute(*rb.dask.to_delayed().ravel(), scheduler="sync")
    assert all(sp.issparse(b) for b in blocks)
    np.testing.assert_array_equal(sp.vstack(blocks).toarray(), Xs.toarray())
    got = engine.map_reduce(_gram_and_cross, rb, Y, args=(w,))
    for g, r in zip(got, _reference(Xs, Y, w), strict=True):
        np.testing.assert_allclose(g, r, rtol=1e-12, atol=1e-12)


def test_dask_blocks_are_checked_for_nan_as_they_are_read():
    """NaN / inf in a Dask input is refused by the engine in the first pass that reads the
    block, naming the argument and the block's rows, for every method (as store blocks)."""
    X = np.ones((60, 3))
    X[25, 1] = np.nan
    B = engine.as_blocked(da.from_array(X, chunks=(20, 3)), name="X_row")
    msg = r"^X_row must hold only finite values; found nan \(rows 20\.\.39\)"
    with pytest.raises(ValueError, match=msg):
        engine.map_reduce(lambda b: np.array([b.sum()]), B)
    ok = engine.as_blocked(da.from_array(np.ones((60, 3)), chunks=(20, 3)))
    assert engine.map_reduce(lambda b: np.array([b.sum()]), ok)[0] == 180.0


def _any_loop_block(Xb, Yb, w):
    return _loop_block(Xb.toarray() if sp.issparse(Xb) else Xb, Yb, w)


@pytest.mark.parametrize("chains", [False, True])
@pytest.mark.parametrize("source", ["numpy", "csr", "store"])
def test_direct_path_for_many_held_blocks_is_the_graph_path(tmp_path, data, chains, source):
    # several blocks held by this process on the default local scheduler: no graph is built
    # (a store is read once, by the cache's persist), and the sums are the graph path's, bitwise
    X, Xs, Y, w = data
    Yd = np.asarray(Y.toarray(), float)
    if source == "store":
        ds = write_arrays(str(tmp_path / "s.zarr"), {"X": X}, block_rows=23)
        (bx,) = engine.maybe_persist(engine.as_blocked(ds["X"]))
        assert bx.held is not None and len(bx.held) == bx.n_blocks == 10
    else:
        bx = engine.as_blocked(Xs if source == "csr" else X, block_rows=23)
    graphs = []
    with dask.config.set(scheduler=lambda dsk, keys, **kw: graphs.append(1) or dask.get(dsk, keys)):
        via_graph = engine.map_reduce(
            _any_loop_block, bx, Yd, args=(w[:, 0].copy(),), chains=chains
        )
        rows_graph = engine.map_reduce(_rows_and_cols, bx, args=(w[:, 0].copy(),), offset=True)
        map_graph = engine.map_rows_compute(lambda b, u: b @ u, bx, args=(w,), n_cols=2)
    assert len(graphs) == 3
    with dask.config.set(scheduler=None):  # the default policy: the direct path
        seen = []
        real = dask.base.named_schedulers["threads"]
        dask.base.named_schedulers["threads"] = lambda *a, **k: seen.append(1) or real(*a, **k)
        try:
            direct = engine.map_reduce(
                _any_loop_block, bx, Yd, args=(w[:, 0].copy(),), chains=chains
            )
            rows_direct = engine.map_reduce(_rows_and_cols, bx, args=(w[:, 0].copy(),), offset=True)
            map_direct = engine.map_rows_compute(lambda b, u: b @ u, bx, args=(w,), n_cols=2)
            P = engine.map_rows_persisted(lambda b: np.asarray(b @ w), bx, n_cols=2)
        finally:
            dask.base.named_schedulers["threads"] = real
    assert not seen  # no graph on the direct path
    for a, b in zip(
        (*via_graph, *rows_graph, map_graph), (*direct, *rows_direct, map_direct), strict=True
    ):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    assert P.held is not None and len(P.held) == bx.n_blocks
    np.testing.assert_array_equal(np.concatenate(P.held), map_direct)


def test_map_reduce_with_shapes_returns_a_tuple_for_one_block_as_for_many():
    X = np.arange(12.0).reshape(6, 2)

    def colsum(b):
        return b.sum(axis=0)

    one = engine.map_reduce(colsum, engine.as_blocked(X, block_rows=6), shapes=[(2,)])
    many = engine.map_reduce(colsum, engine.as_blocked(X, block_rows=2), shapes=[(2,)])
    assert isinstance(one, tuple) and isinstance(many, tuple)
    np.testing.assert_array_equal(one[0], many[0])


def test_direct_path_slices_a_small_sparse_input_once():
    S = sp.random(40, 5, density=0.3, format="csr", random_state=0)
    B = engine.as_blocked(S, block_rows=10)
    first = engine._memory_blocks(B)
    assert engine._memory_blocks(B) is first  # held: not sliced again on the next pass
    assert len(first) == 4 and (first[1] != S[10:20]).nnz == 0
    D = engine.as_blocked(S.toarray(), block_rows=10)  # dense slices are views: not kept
    assert engine._memory_blocks(D) is not engine._memory_blocks(D)


def test_in_memory_dense_input_is_not_copied():
    """Blocking an in-memory dense array keeps views of it (``da.from_array`` copied the whole
    array: a GIMC fit of an in-memory X held it twice); the blocks still read its rows."""
    import tracemalloc

    X = np.arange(400_000, dtype=np.float32).reshape(40_000, 10)
    tracemalloc.start()
    B = engine.as_blocked(X, name="X")
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < X.nbytes / 4
    np.testing.assert_array_equal(B.dask.compute(scheduler="sync"), X)


def _noisy_sums(Xb, Yb):
    """Outputs whose float64 sums depend on the order of the additions."""
    z = np.exp(Xb.astype(np.float64) * 7.0)
    return z.sum(axis=0) * 1e8, (z[:, :1] * Yb).sum(axis=0) + 1e-9


@pytest.mark.parametrize("split_every", [None, 3])
def test_store_tree_pass_is_one_task_per_block_and_bitwise_dasks_sum(tmp_path, split_every):
    """A tree pass over store inputs: one task per block (it reads its blocks of every input)
    plus the tree's steps, and the same bits as dask.array's ``sum(split_every=...)`` of the
    same blocks (the in-memory graph path), at one and several tree levels (issue 27)."""
    rng = np.random.default_rng(3)
    X, Y = rng.standard_normal((190, 5)), rng.standard_normal((190, 2))
    ds = write_arrays(str(tmp_path / "t.zarr"), {"X": X, "Y": Y}, block_rows=10)
    kw = dict(split_every=split_every, chains=False)
    red = engine.reduce_blocks(_noisy_sums, ds["X"], ds["Y"], **kw)
    graph = dict(red.packed.__dask_graph__())
    n_tree = 3 + 1 if split_every is None else 7 + 3 + 1  # 19 blocks: 8 + 8 + 3 -> 1; 7 -> 3 -> 1
    assert len(graph) == 19 + n_tree
    with dask.config.set(scheduler="sync"):
        got = engine.compute(red)[0]
        mem = [engine.as_blocked(A, block_rows=10) for A in (X, Y)]  # dask.array's sum
        ref = engine.compute(engine.reduce_blocks(_noisy_sums, *mem, **kw))[0]
    for a, b in zip(got, ref, strict=True):
        np.testing.assert_array_equal(a, b)


def test_misaligned_pass_arguments_are_copied_once_per_object():
    """A scattered argument arrives misaligned on a distributed worker, and every task of the
    worker gets the same object: its aligned copy is made once and shared (not once per block),
    with the same values, and forgotten when the source is freed."""
    import gc

    buf = bytearray(8 * 1000 + 1)
    a = np.frombuffer(buf, dtype=np.float64, offset=1, count=1000)
    assert not a.flags.aligned
    first = engine._aligned_args([a, 3])
    second = engine._aligned_args([a])
    assert first[0] is second[0] and first[0].flags.aligned and first[1] == 3
    np.testing.assert_array_equal(first[0], a)
    ok = np.arange(4.0)
    assert engine._aligned_args([ok])[0] is ok
    key = id(a)
    del a, first, second
    gc.collect()
    assert key not in engine._ALIGNED_ARGS
