"""Zarr dataset format: round trips, fsspec URLs, atomic writes, validation on open."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ooc_lowrank.storage import DatasetWriter, StoreError, open_dataset, write_arrays


def _dir_bytes(path):
    out = {}
    for root, _, files in os.walk(path):
        for f in files:
            p = os.path.join(root, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, path)] = fh.read()
    return out


@st.composite
def _matrices(draw):
    n = draw(st.integers(1, 60))
    d = draw(st.integers(1, 9))
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    seed = draw(st.integers(0, 2**31 - 1))
    r = np.random.default_rng(seed)
    dense = r.standard_normal((n, d)).astype(dtype)
    mask = r.random((n, d)) < draw(st.sampled_from([0.0, 0.1, 0.5]))
    mask[r.random(n) < 0.3] = False  # empty rows
    if d > 1:
        mask[:, 0] = False  # an empty column
    csr = sp.csr_matrix(np.where(mask, dense, 0).astype(dtype))
    block_rows = draw(st.integers(max(1, n // 4), n + 3))  # at most ~5 blocks: zarr ops cost ms
    pieces = draw(st.lists(st.integers(1, 17), min_size=1, max_size=8))
    return dense, csr, block_rows, pieces


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(_matrices())
def test_round_trip_dense_and_csr(tmp_path, case):
    dense, csr, block_rows, pieces = case
    url = str(tmp_path / f"rt-{abs(hash((dense.tobytes(), block_rows))) % 10**9}.zarr")
    n = dense.shape[0]
    with DatasetWriter(url, block_rows=block_rows, attrs={"src": "hyp"}, overwrite=True) as w:
        w.add_dense("X", dense.shape[1], dense.dtype)
        w.add_csr("Y", csr.shape[1], csr.dtype)
        w.add_coo("obs", csr.shape[1], csr.dtype)
        s, k = 0, 0
        while s < n:  # uneven appends, independent of block_rows
            e = min(n, s + pieces[k % len(pieces)])
            w.append(X=dense[s:e], Y=csr[s:e], obs=csr[s:e])
            s, k = e, k + 1
    ds = open_dataset(url, verify="full")
    assert ds.n_rows == n and ds.block_rows == block_rows and ds.attrs == {"src": "hyp"}
    X = ds["X"].read()
    assert X.dtype == dense.dtype and np.array_equal(X, dense)
    Y = ds["Y"].read()
    assert Y.dtype == csr.dtype and (Y != csr).nnz == 0
    assert np.array_equal(Y.indptr, csr.indptr)
    O = ds["obs"].read()
    assert (O != csr).nnz == 0
    # block reads equal slices, for every block
    for s0, e0, blk in ds["Y"].iter_blocks():
        assert (blk != csr[s0:e0]).nnz == 0
    # the explicit row array of the COO kind is consistent
    import zarr

    rows = zarr.open_group(url, mode="r")["obs/row"][:]
    assert np.array_equal(rows, np.repeat(np.arange(n), np.diff(csr.indptr)))


def test_one_row_one_block(tmp_path):
    X = np.array([[1.5, -2.0]], dtype=np.float32)
    ds = write_arrays(str(tmp_path / "one.zarr"), {"X": X})
    assert ds.n_rows == 1 and len(ds.row_blocks) == 2
    assert np.array_equal(ds["X"].read(), X)


def test_big_endian_input_stored_native_and_reopens(tmp_path):
    # a '>f8' / '>i4' array used to write a store whose metadata said '>f8' while zarr read
    # float64 back: the store then failed to open.  Stores hold native byte order.
    X = np.arange(12, dtype=">f8").reshape(4, 3) / 7
    Y = np.arange(4, dtype=">i4").reshape(4, 1)
    write_arrays(str(tmp_path / "be.zarr"), {"X": X, "Y": Y})
    ds = open_dataset(str(tmp_path / "be.zarr"), verify="full")
    assert ds["X"].read().dtype == np.float64 and ds["Y"].read().dtype == np.int32
    assert ds["X"].read().dtype.isnative
    assert np.array_equal(ds["X"].read(), X) and np.array_equal(ds["Y"].read(), Y)


def test_duplicates_kept_in_coo(tmp_path):
    m = sp.csr_matrix(
        (np.array([1.0, 2.0, 3.0]), np.array([1, 1, 0]), np.array([0, 2, 3])), shape=(2, 3)
    )
    with DatasetWriter(str(tmp_path / "d.zarr")) as w:
        w.add_coo("obs", 3)
        w.append(obs=m)
    got = open_dataset(str(tmp_path / "d.zarr"))["obs"].read()
    assert got.nnz == 3 and list(got.indices) == [1, 1, 0]


def test_memory_url_and_xarray():
    X = np.arange(12, dtype=np.float64).reshape(6, 2)
    ds = write_arrays(
        "memory://ooc-test/x.zarr",
        {"X": X, "Y": sp.csr_matrix(np.eye(6, 3))},
        block_rows=4,
        overwrite=True,
    )
    assert np.array_equal(ds["X"].read(2, 5), X[2:5])
    xa = ds.to_xarray()
    assert xa["X"].dims == ("sample", "feature")
    assert np.array_equal(xa["X"].values, X)
    info = ds.info()
    assert info["arrays"]["Y"]["nnz"] == 3 and info["bytes_on_disk"] > 0
    json.dumps(info)


def test_remote_replace_failing_mid_copy_keeps_old_store(monkeypatch):
    # object stores have no atomic rename: a replacement that fails while its files are copied
    # in must leave the previous store readable at the same URL
    import fsspec

    from ooc_lowrank import storage

    url = "memory://ooc-test/replace.zarr"
    old = np.arange(12, dtype=np.float64).reshape(6, 2)
    write_arrays(url, {"X": old}, block_rows=4, overwrite=True)
    fs = fsspec.filesystem("memory")
    real_copy_tree, calls = storage._copy_tree, []

    def failing_copy_tree(fs_, src, dst):
        calls.append((src, dst))
        if len(calls) == 2:  # the new store's copy-in (the first call backs up the old one)
            fs_.copy(sorted(fs_.find(src))[0], dst.rstrip("/") + "/partial")
            raise OSError("network down")
        return real_copy_tree(fs_, src, dst)

    monkeypatch.setattr(storage, "_copy_tree", failing_copy_tree)
    with pytest.raises(OSError, match="network down"):
        write_arrays(url, {"X": -old}, block_rows=4, overwrite=True)
    monkeypatch.undo()
    assert len(calls) == 3  # backup, failed copy-in, restore
    assert np.array_equal(open_dataset(url, verify="full")["X"].read(), old)
    left = [p for p in fs.find("/ooc-test") if ".replace.zarr." in p]
    assert left == []  # neither the backup nor the temporary store is left behind
    write_arrays(url, {"X": -old}, block_rows=4, overwrite=True)  # a working replace
    assert np.array_equal(open_dataset(url)["X"].read(), -old)
    assert [p for p in fs.find("/ooc-test") if ".replace.zarr." in p] == []


def test_exception_during_write_leaves_nothing_and_keeps_old(tmp_path):
    url = str(tmp_path / "s.zarr")
    write_arrays(url, {"X": np.ones((10, 3))})
    before = _dir_bytes(url)
    with pytest.raises(RuntimeError, match="boom"):
        with DatasetWriter(url, overwrite=True, block_rows=2) as w:
            w.add_dense("X", 3)
            w.append(X=np.zeros((5, 3)))
            raise RuntimeError("boom")
    assert _dir_bytes(url) == before
    assert open_dataset(url)["X"].read().sum() == 30
    assert [p for p in os.listdir(tmp_path) if p != "s.zarr"] == []  # temp store removed


def test_new_store_interrupted_is_not_valid(tmp_path):
    url = str(tmp_path / "new.zarr")
    with pytest.raises(ValueError):
        with DatasetWriter(url, block_rows=2) as w:
            w.add_dense("X", 2)
            w.append(X=np.ones((4, 2)))
            w.append(X=np.array([[np.nan, 1.0]]))
    with pytest.raises(StoreError, match="no store"):
        open_dataset(url)


def test_sigkill_during_write_never_corrupts(tmp_path):
    url = str(tmp_path / "k.zarr")
    write_arrays(url, {"X": np.full((8, 2), 7.0)})
    before = _dir_bytes(url)
    code = textwrap.dedent(f"""
        import os, signal, numpy as np
        from ooc_lowrank.storage import DatasetWriter
        w = DatasetWriter({url!r}, overwrite=True, block_rows=4)
        w.add_dense("X", 2)
        for i in range(10):
            w.append(X=np.zeros((4, 2)))
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True)
    assert p.returncode == -9
    assert _dir_bytes(url) == before
    assert open_dataset(url)["X"].read()[0, 0] == 7.0
    # the leftover temporary store never opens as a valid dataset
    for name in os.listdir(tmp_path):
        if name != "k.zarr":
            with pytest.raises(StoreError):
                open_dataset(str(tmp_path / name))


def test_writer_refuses_existing_without_overwrite(tmp_path):
    url = str(tmp_path / "e.zarr")
    write_arrays(url, {"X": np.ones((2, 2))})
    with pytest.raises(FileExistsError, match="overwrite=True"):
        DatasetWriter(url)


def test_writer_validates_blocks(tmp_path):
    with DatasetWriter(str(tmp_path / "v.zarr")) as w:
        w.add_dense("X", 3)
        w.add_csr("Y", 2)
        with pytest.raises(ValueError, match="same number of rows"):
            w.append(X=np.ones((2, 3)), Y=sp.csr_matrix((3, 2)))
        with pytest.raises(ValueError, match=r"shape \(rows, 3\)"):
            w.append(X=np.ones((2, 4)), Y=sp.csr_matrix((2, 2)))
        with pytest.raises(ValueError, match="missing"):
            w.append(X=np.ones((2, 3)))
        with pytest.raises(ValueError, match="out of range"):
            bad = sp.csr_matrix((np.ones(1), np.array([5]), np.array([0, 1, 1])), shape=(2, 2))
            w.append(X=np.ones((2, 3)), Y=bad)
        w.append(X=np.ones((2, 3)), Y=sp.csr_matrix((2, 2)))
    assert open_dataset(str(tmp_path / "v.zarr")).n_rows == 2


@pytest.mark.parametrize("dtype", ["float32", "float64", "int16", "bool"])
def test_direct_chunk_files_equal_zarr_encoding(tmp_path, dtype):
    # the writer writes dense chunks itself (no zarr __setitem__): every file must hold exactly
    # the bytes zarr writes for the same rows, the padded last chunk included
    import zarr

    rng = np.random.default_rng(0)
    X = (rng.standard_normal((23, 7)) * 100).astype(dtype)
    url = tmp_path / "d.zarr"
    with DatasetWriter(str(url), block_rows=5) as w:
        w.add_dense("X", n_cols=7, dtype=dtype)
        assert set(w._direct) == set()  # decided when the arrays are created
        for s in range(0, 23, 3):  # appends that straddle the chunk boundaries
            w.append(X=X[s : s + 3])
        assert set(w._direct) == {"X"}
    ref = zarr.open_group(str(tmp_path / "ref.zarr"), mode="w").create_array(
        "X", shape=(23, 7), chunks=(5, 7), dtype=dtype,
        compressors=None, fill_value=0, config={"write_empty_chunks": True},
    )  # fmt: skip
    ref[:] = X
    for i in range(5):
        got = (url / "X" / "c" / str(i) / "0").read_bytes()
        assert got == (tmp_path / "ref.zarr" / "X" / "c" / str(i) / "0").read_bytes(), i
    ds = open_dataset(str(url), verify="full")  # sizes and CRCs against the manifest
    h = ds["X"]
    np.testing.assert_array_equal(h.read(), X)
    assert zarr.open_array(str(url / "X")).shape == (23, 7)
    # reads take the same direct route (raw chunk files, no zarr), any row range
    assert h._raw_layout() and h._raw_layout()[1] == 5
    for a, b in [(0, 5), (3, 17), (20, 23), (4, 4), (22, 23)]:
        got = h.read(a, b)
        assert got.dtype == np.dtype(dtype) and got.flags.c_contiguous
        np.testing.assert_array_equal(got, X[a:b])
        np.testing.assert_array_equal(got, h._get(h._zarr(), a, b))


@pytest.mark.parametrize("kind", ["csr", "coo"])
def test_sparse_parts_read_raw_equal_zarr(tmp_path, kind):
    # indptr / column / value chunk files are read straight from disk (no zarr call) and give
    # exactly what zarr gives, for any row range (ranges straddling chunk boundaries included)
    rng = np.random.default_rng(1)
    X = sp.random(1500, 20, density=0.5, format="csr", random_state=rng, dtype=np.float32)
    url = str(tmp_path / "s.zarr")
    write_arrays(url, {"Y": X}, block_rows=64, kinds={"Y": kind})
    h = open_dataset(url)["Y"]
    names = ("indices", "data") if kind == "csr" else ("col", "value")
    raw = h._raw_parts()
    assert set(raw) == {"indptr", *names} and raw[names[0]][1] < X.nnz / 2  # several chunks
    z = h._zarr()
    for a, b in [(0, 1500), (3, 1017), (1499, 1500), (5, 5), (400, 900)]:
        got = h.read(a, b)
        assert (got != X[a:b]).nnz == 0 and got.dtype == X.dtype
        ip = h._get(z["indptr"], a, b + 1)
        np.testing.assert_array_equal(h._get_part(z, "indptr", a, b + 1), ip)
        for nm in names:
            np.testing.assert_array_equal(
                h._get_part(z, nm, int(ip[0]), int(ip[-1])), h._get(z[nm], int(ip[0]), int(ip[-1]))
            )


@pytest.mark.parametrize("kind", ["csr", "coo"])
def test_direct_sparse_chunk_files_equal_zarr_writes(tmp_path, kind, monkeypatch):
    # the writer writes the 1-D sparse arrays' chunks itself as they fill (the last one padded
    # at close): every chunk file, shape and value equals what zarr's own writes give (the
    # writer forced through zarr __setitem__ by a raw layout it does not recognize)
    import zarr

    import ooc_lowrank.storage as storage

    rng = np.random.default_rng(2)
    X = sp.random(700, 40, density=0.4, format="csr", random_state=rng, dtype=np.float32)
    X.data[X.indptr[5] : X.indptr[9]] = 0  # empty rows
    X.eliminate_zeros()

    def write(url):
        with DatasetWriter(str(url), block_rows=64) as w:
            w.add_csr("Y", n_cols=40) if kind == "csr" else w.add_coo("Y", n_cols=40)
            for s in range(0, 700, 50):  # appends that straddle blocks and chunks
                w.append(Y=X[s : s + 50])
            return dict(w._direct1d)

    direct = write(tmp_path / "d.zarr")
    monkeypatch.setattr(storage, "_raw_chunk_dtype", lambda arr: None)
    assert write(tmp_path / "z.zarr") == {}
    names = ["indptr"] + (["indices", "data"] if kind == "csr" else ["col", "value", "row"])
    assert set(direct) == {f"Y/{n}" for n in names}
    for n in names:
        d, z = tmp_path / "d.zarr" / "Y" / n, tmp_path / "z.zarr" / "Y" / n
        zd, zz = zarr.open_array(str(d)), zarr.open_array(str(z))
        assert zd.shape == zz.shape and zd.chunks == zz.chunks
        chunks = sorted(os.listdir(z / "c"), key=int)
        assert len(chunks) > 1 and chunks == sorted(os.listdir(d / "c"), key=int)
        for c in chunks:
            assert (d / "c" / c).read_bytes() == (z / "c" / c).read_bytes(), (n, c)
    got = open_dataset(str(tmp_path / "d.zarr"), verify="full")["Y"].read()
    assert (sp.csr_matrix(got) != X).nnz == 0
