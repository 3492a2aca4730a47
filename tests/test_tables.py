"""Table converters (io.tables): Parquet / CSV / Arrow / pandas / Dask tables to stores.

Acceptance: MovieLens u1.base written to Parquet with string keys converts to exactly the
entries ``convert movielens`` writes; Bibtex as a table with a list-of-labels column gives the
store ``convert arff`` gives.  Bad input: a named error and nothing left behind.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest
from conftest import data_file

from ooc_lowrank.cli import main
from ooc_lowrank.io import ConversionError, convert, read_vocabulary, topk_to_parquet
from ooc_lowrank.io.tables import convert_table
from ooc_lowrank.storage import open_dataset


def _obs(store):
    return open_dataset(store)["obs"].read().tocoo()


def _entries(store, row_keys=None, col_keys=None):
    """{(row key, col key): value} of an observation store (keys from its vocabularies)."""
    m = _obs(store)
    rk = read_vocabulary(store, "rows").to_pylist() if row_keys is None else row_keys
    ck = read_vocabulary(store, "cols").to_pylist() if col_keys is None else col_keys
    out = {}
    for r, c, v in zip(m.row, m.col, m.data, strict=True):
        assert (rk[r], ck[c]) not in out
        out[rk[r], ck[c]] = v
    return out


def _left_behind(folder):
    return sorted(f for f in os.listdir(folder) if f.startswith("."))


@pytest.fixture
def u1():
    src = data_file("movielens-100k", "u1.base.gz")
    return src, np.loadtxt(src, dtype=np.int64)


def test_movielens_parquet_string_keys_equals_convert_movielens(tmp_path, u1):
    """Acceptance: u1.base as shuffled Parquet files with string keys ("u196", "i242"): the
    store holds exactly the entries of `convert movielens`, under the key mapping."""
    src, a = u1
    t = pa.table(
        {
            "user_id": [f"u{u}" for u in a[:, 0]],
            "movie_id": [f"i{i}" for i in a[:, 1]],
            "rating": a[:, 2].astype(np.int32),
        }
    ).take(np.random.default_rng(0).permutation(len(a)))
    d = tmp_path / "ratings"
    d.mkdir()
    for k, s in enumerate(range(0, len(a), 30000)):  # a directory of three files
        pq.write_table(t.slice(s, 30000), d / f"part-{k}.parquet", row_group_size=4000)
    convert(
        "parquet",
        str(d),
        str(tmp_path / "t.zarr"),
        kind="interactions",
        row_key="user_id",
        col_key="movie_id",
        value="rating",
        batch_rows=5000,
        bucket_nnz=9000,
        block_rows=100,
    )
    convert("movielens", src, str(tmp_path / "m.zarr"))
    m = _obs(tmp_path / "m.zarr")
    want = {(f"u{r + 1}", f"i{c + 1}"): v for r, c, v in zip(m.row, m.col, m.data, strict=True)}
    got = _entries(tmp_path / "t.zarr")
    assert got == want and len(got) == 80000
    rows = read_vocabulary(tmp_path / "t.zarr", "rows").to_pylist()
    assert rows == sorted(rows) and len(rows) == 943
    ds = open_dataset(tmp_path / "t.zarr")
    assert ds["obs"].shape == (943, len(read_vocabulary(ds, "cols")))
    # entries of each row sorted by column
    o = ds["obs"].read()
    assert all(np.all(np.diff(o.indices[o.indptr[i] : o.indptr[i + 1]]) > 0) for i in range(943))


def test_int_keys_from_pandas_and_csv(tmp_path, u1):
    pd = pytest.importorskip("pandas")
    src, a = u1
    a = a[:3000]
    df = pd.DataFrame({"u": a[:, 0] * 1000, "i": a[:, 1], "r": a[:, 2].astype(float)})
    convert_table(
        df,
        str(tmp_path / "p.zarr"),
        kind="interactions",
        row_key="u",
        col_key="i",
        value="r",
        batch_rows=700,
    )
    pcsv.write_csv(pa.Table.from_pandas(df), tmp_path / "r.csv")
    convert(
        "csv",
        str(tmp_path / "r.csv"),
        str(tmp_path / "c.zarr"),
        kind="interactions",
        row_key="u",
        col_key="i",
        value="r",
    )
    want = {(int(u) * 1000, int(i)): float(r) for u, i, r in a[:, :3]}
    assert _entries(tmp_path / "p.zarr") == want == _entries(tmp_path / "c.zarr")
    assert read_vocabulary(tmp_path / "p.zarr", "rows").type == pa.int64()


def _dups():
    return pa.table(
        {
            "r": ["a", "b", "a", "a", "b"],
            "c": [1, 2, 1, 3, 2],
            "v": [1.0, 2.0, 5.0, 7.0, 4.0],
            "w": [1.0, 1.0, 3.0, 1.0, 2.0],
        }
    )


@pytest.mark.parametrize(
    "policy, want",
    [
        ("last", {("a", 1): 5.0, ("a", 3): 7.0, ("b", 2): 4.0}),
        ("sum", {("a", 1): 6.0, ("a", 3): 7.0, ("b", 2): 6.0}),
        ("mean", {("a", 1): 3.0, ("a", 3): 7.0, ("b", 2): 3.0}),
    ],
)
def test_duplicate_policies(tmp_path, policy, want):
    dest = tmp_path / "d.zarr"
    convert_table(
        _dups(),
        str(dest),
        kind="interactions",
        row_key="r",
        col_key="c",
        value="v",
        weight="w",
        duplicates=policy,
        batch_rows=2,
    )
    assert _entries(dest) == want
    w = open_dataset(dest)["weight"].read()
    assert w.nnz == 3
    if policy == "sum":
        assert sorted(w.data) == [1.0, 3.0, 4.0]


def _chunk_bytes(store, array="obs"):
    """Every chunk file of ``array`` in ``store``: {relative path: bytes}."""
    root = os.path.join(str(store), array)
    out = {}
    for folder, _, files in os.walk(root):
        for f in files:
            if f != "zarr.json":
                with open(os.path.join(folder, f), "rb") as fh:
                    out[os.path.relpath(os.path.join(folder, f), root)] = fh.read()
    return out


@pytest.mark.parametrize("keys", ["int64", "string"])
@pytest.mark.parametrize("policy", ["last", "sum"])
def test_one_read_store_equals_two_reads_and_the_numpy_twin(tmp_path, keys, policy):
    """The one-read path (keys counted or interned, entries replayed, spill kernel, bucket
    merge) writes chunk files byte-identical to the two-read path (the same table converted
    with its own vocabularies, vocabulary_from) over spilled buckets, and its entries are the
    NumPy twin's: sorted key order, stable (row, col) order, repeats merged by the policy."""
    rng = np.random.default_rng(11)
    n = 3000
    u, i = rng.integers(0, 90, n) * 1009 - 5000, rng.integers(0, 40, n) * 3
    mk = (lambda p, k: k) if keys == "int64" else (lambda p, k: [f"{p}{x}" for x in k.tolist()])
    v = rng.integers(1, 9, n).astype(np.float64)
    t = pa.table({"u": mk("u", u), "i": mk("i", i), "v": v})
    kw = dict(kind="interactions", row_key="u", col_key="i", value="v", duplicates=policy)
    kw.update(batch_rows=700, bucket_nnz=400, dtype="float32")
    convert_table(t, str(tmp_path / "one.zarr"), **kw)
    convert_table(t, str(tmp_path / "two.zarr"), vocabulary_from=str(tmp_path / "one.zarr"), **kw)
    one = _chunk_bytes(tmp_path / "one.zarr")
    assert one == _chunk_bytes(tmp_path / "two.zarr") and len(one) > 4
    # the NumPy twin: indices by sorted key order, then a stable lexsort and the policy
    ru, ri = np.unique(np.array(mk("u", u)), return_inverse=True)
    cu, ci = np.unique(np.array(mk("i", i)), return_inverse=True)
    ptr, cols, vals = naive_bucket_csr(ri, ci, v[:, None], ru.size, policy)
    got = open_dataset(tmp_path / "one.zarr")["obs"].read()
    np.testing.assert_array_equal(got.indptr, ptr)
    np.testing.assert_array_equal(got.indices, cols)
    np.testing.assert_array_equal(got.data, vals[:, 0].astype(np.float32))


@pytest.mark.parametrize("policy", ["last", "mean"])
def test_int_keys_past_the_entry_budget_read_twice_same_store(tmp_path, monkeypatch, policy):
    """Integer keys whose kept entries would outgrow _KEEP_ENTRIES_BYTES (row count from the
    Parquet footers) are read twice instead of replayed: the same chunk files as the one-read
    path; a CSV source (row count unknown without a read) keeps the one read."""
    from ooc_lowrank.io import tables

    rng = np.random.default_rng(5)
    n = 4000
    t = pa.table(
        {
            "u": rng.integers(0, 70, n) * 7919 - 10**12,
            "i": rng.integers(0, 50, n) * 3,
            "v": rng.integers(1, 9, n).astype(np.float32),
        }
    )
    os.makedirs(tmp_path / "pq")
    for k in range(3):
        pq.write_table(t.slice(k * 1500, 1500), str(tmp_path / "pq" / f"p{k}.parquet"))
    kw = dict(kind="interactions", row_key="u", col_key="i", value="v", duplicates=policy)
    kw.update(batch_rows=600, bucket_nnz=500, dtype="float32")
    convert_table(str(tmp_path / "pq"), str(tmp_path / "once.zarr"), **kw)
    monkeypatch.setattr(tables, "_KEEP_ENTRIES_BYTES", n * 24 - 1)
    replays = []
    real = tables._PairsOnce.__init__
    monkeypatch.setattr(
        tables._PairsOnce, "__init__", lambda self, *a: replays.append(1) or real(self, *a)
    )
    convert_table(str(tmp_path / "pq"), str(tmp_path / "twice.zarr"), **kw)
    assert replays == []
    once = _chunk_bytes(tmp_path / "once.zarr")
    assert once == _chunk_bytes(tmp_path / "twice.zarr") and len(once) > 4
    pcsv.write_csv(t, str(tmp_path / "t.csv"))
    convert_table(str(tmp_path / "t.csv"), str(tmp_path / "csv.zarr"), **kw)
    assert replays == [1]
    assert _chunk_bytes(tmp_path / "csv.zarr") == once


@pytest.mark.parametrize("vtype", ["float32", "int16", "float64"])
def test_kept_entries_narrow_values_only_when_exact(tmp_path, monkeypatch, vtype):
    """The one-read path keeps values of float32 / 16-bit integer columns in 4 bytes, wider
    ones in 8; the store is byte-identical to the two-read path's either way (sums of values
    that float32 cannot hold exactly, too)."""
    from ooc_lowrank.io import tables

    rng = np.random.default_rng(8)
    n = 3000
    v = rng.integers(-300, 300, n) + (0.1 if vtype == "float64" else 0.0)
    t = pa.table(
        {
            "u": [f"u{x}" for x in rng.integers(0, 80, n)],
            "i": [f"i{x}" for x in rng.integers(0, 30, n)],
            "v": pa.array(v).cast(vtype, safe=False),
            "w": pa.array(rng.integers(0, 100, n)).cast("int8"),
        }
    )
    dtypes = []
    real = tables._Replay.__init__
    def spy(self, path, dt, limit):
        dtypes.append(dt)
        real(self, path, dt, limit)

    monkeypatch.setattr(tables._Replay, "__init__", spy)
    kw = dict(kind="interactions", row_key="u", col_key="i", value="v", weight="w")
    kw.update(duplicates="sum", batch_rows=700, bucket_nnz=400, dtype="float64")
    convert_table(t, str(tmp_path / "one.zarr"), **kw)
    assert dtypes[0]["w"] == np.float32
    assert dtypes[0]["val"] == (np.float64 if vtype == "float64" else np.float32)
    convert_table(t, str(tmp_path / "two.zarr"), vocabulary_from=str(tmp_path / "one.zarr"), **kw)
    for a in ("obs", "weight"):
        one = _chunk_bytes(tmp_path / "one.zarr", a)
        assert one == _chunk_bytes(tmp_path / "two.zarr", a) and len(one) > 4


def test_spill_write_error_in_the_writer_thread_raised_nothing_left(tmp_path, monkeypatch):
    """A spill file write that fails in the background writer (disk full) is raised by the
    conversion, the scratch folder is removed and no store appears."""
    from ooc_lowrank.io import _common, tables

    calls = []
    monkeypatch.setattr(tables, "_KEEP_ENTRIES_BYTES", 0)  # read twice: a spill per batch

    def full(self, rec, counts):
        calls.append(1)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")

    monkeypatch.setattr(_common.RowBuckets, "append_parts", full)
    rng = np.random.default_rng(2)
    t = pa.table({"u": rng.integers(0, 300, 5000), "i": rng.integers(0, 90, 5000)})
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    with pytest.raises(OSError, match="No space left"):
        convert_table(
            t, str(tmp_path / "s.zarr"), kind="interactions", row_key="u", col_key="i",
            duplicates="sum", batch_rows=1000, bucket_nnz=800, tmpdir=str(scratch),
        )  # fmt: skip
    assert len(calls) >= 2 and not os.path.exists(tmp_path / "s.zarr")
    assert os.listdir(scratch) == []


@pytest.mark.parametrize("policy", ["error", "last", "sum", "mean"])
def test_one_bucket_in_memory_equals_spilled_buckets(tmp_path, policy):
    """One bucket (records kept in memory, no spill file) and one bucket per row or two
    (spilled, read back) write the same store, for every duplicates policy; batches of 3 rows."""
    rng = np.random.default_rng(5)
    pairs = rng.permutation(400) if policy == "error" else rng.integers(0, 80, 400)  # distinct
    t = pa.table(
        {
            "r": [f"u{k}" for k in (pairs // 10).tolist()],
            "c": (pairs % 10) * 7,
            "v": rng.integers(1, 6, pairs.size).astype(np.float64),
            "w": rng.random(pairs.size),
        }
    )
    stores = []
    for cap in (None, 5):
        dest = tmp_path / f"b{cap}.zarr"
        kw = _inter(weight="w", duplicates=policy, batch_rows=3, bucket_nnz=cap)
        convert_table(t, str(dest), **kw)
        ds = open_dataset(dest)
        stores.append((_entries(dest), ds["weight"].read().toarray()))
    assert stores[0][0] == stores[1][0]
    np.testing.assert_array_equal(stores[0][1], stores[1][1])


def test_large_vocabularies_read_plain_in_pass_2_same_store(tmp_path, monkeypatch):
    """Pass 2 reads string key columns dictionary-encoded up to _PLAIN_KEYS_ABOVE keys and plain
    above (forced here for both columns, then for one): the same store as the default."""
    import ooc_lowrank.io.tables as tables

    rng = np.random.default_rng(7)
    n = 3000
    t = pa.table(
        {
            "r": [f"u{k}" for k in rng.integers(0, 200, n)],
            "c": [f"i{k}" for k in rng.integers(0, 90, n)],
            "v": rng.integers(1, 6, n).astype(np.float64),
        }
    )
    pq.write_table(t, tmp_path / "t.parquet", row_group_size=700)
    got = []
    for limit in (1 << 16, 0, 100):
        monkeypatch.setattr(tables, "_PLAIN_KEYS_ABOVE", limit)
        dest = tmp_path / f"s{limit}.zarr"
        convert_table(str(tmp_path / "t.parquet"), str(dest), **_inter(duplicates="sum"))
        got.append(_entries(dest))
    assert got[0] == got[1] == got[2] and len(got[0]) > 2000


def test_vocabulary_from_a_training_store(tmp_path):
    train = pa.table({"r": ["x", "y", "z"], "c": ["p", "q", "p"], "v": [1.0, 2.0, 3.0]})
    convert_table(
        train, str(tmp_path / "tr.zarr"), kind="interactions", row_key="r", col_key="c", value="v"
    )
    test = pa.table({"r": ["z"], "c": ["q"], "v": [4.0]})
    convert_table(
        test,
        str(tmp_path / "te.zarr"),
        kind="interactions",
        row_key="r",
        col_key="c",
        value="v",
        vocabulary_from=str(tmp_path / "tr.zarr"),
    )
    o = _obs(tmp_path / "te.zarr")
    assert o.shape == (3, 2) and (o.row.tolist(), o.col.tolist()) == ([2], [1])
    with pytest.raises(ConversionError, match="'w'.*not in the vocabulary"):
        convert_table(
            pa.table({"r": ["w"], "c": ["q"], "v": [1.0]}),
            str(tmp_path / "x.zarr"),
            kind="interactions",
            row_key="r",
            col_key="c",
            value="v",
            vocabulary_from=str(tmp_path / "tr.zarr"),
        )


@pytest.fixture
def no_store_write(monkeypatch):
    """Fail the test if a conversion reaches the store writer: bad input must be named
    before anything is written."""
    import ooc_lowrank.io.tables as tables

    def refuse(*args, **kwargs):
        raise AssertionError("the store writer was reached before the error")

    monkeypatch.setattr(tables, "write_blocks", refuse)


def test_duplicates_in_a_later_bucket_named_before_writing(tmp_path, monkeypatch):
    """Duplicate pairs in the last of several external-sort buckets: every bucket is checked
    before the store writer starts, so an existing store at dest (overwrite=True) stays as it
    was, and neither the hidden store nor spill files are left behind."""
    rows = [f"u{i:03d}" for i in range(200)]
    t = pa.table({"r": rows + ["u199"], "c": [1] * 201, "v": np.arange(201.0)})
    dest, scratch = tmp_path / "d.zarr", tmp_path / "scratch"
    scratch.mkdir()
    convert_table(t.slice(0, 200), str(dest), **_inter())
    before = _entries(dest)
    import ooc_lowrank.io.tables as tables

    opened = []
    real = tables.write_blocks
    monkeypatch.setattr(tables, "write_blocks", lambda *a, **k: opened.append(1) or real(*a, **k))
    with pytest.raises(ConversionError, match=r"duplicate \(row, column\) pairs.*\('u199', 1\)"):
        convert_table(t, str(dest), bucket_nnz=16, overwrite=True, tmpdir=str(scratch), **_inter())
    assert opened == []  # the writer was never started
    assert _entries(dest) == before and _left_behind(tmp_path) == []
    assert os.listdir(scratch) == []
    # the same table with a policy: several buckets, one entry per pair
    convert_table(t, str(dest), bucket_nnz=16, overwrite=True, duplicates="last", **_inter())
    assert len(_entries(dest)) == 200 and _entries(dest)[("u199", 1)] == 200.0


def test_unseen_category_without_other_named_before_writing(tmp_path, no_store_write):
    """A test table's unseen category, training store converted with other=False: an error
    naming the value from the validating pass (the writer never starts)."""
    import ooc_lowrank.io.tables as tables

    train = pa.table({"u": ["a", "b"], "y": [1.0, 0.0]})
    with pytest.MonkeyPatch.context() as mp:  # the training store is written for real
        mp.setattr(tables, "write_blocks", _real_write_blocks())
        convert_table(
            train, str(tmp_path / "tr.zarr"), kind="views", views={"v": ["u"]}, other=False
        )
    with pytest.raises(ConversionError, match="value 'c' of column 'u' is not in the vocab"):
        convert_table(
            pa.table({"u": ["a", "c"], "y": [1.0, 1.0]}),
            str(tmp_path / "te.zarr"),
            kind="views",
            vocabulary_from=str(tmp_path / "tr.zarr"),
        )
    assert not (tmp_path / "te.zarr").exists() and _left_behind(tmp_path) == []


def _real_write_blocks():
    from ooc_lowrank.io import _common

    return _common.write_blocks


def _inter(**kw):
    return dict(kind="interactions", row_key="r", col_key="c", value="v", **kw)


@pytest.mark.parametrize(
    "table, kw, match",
    [
        (pa.table({"r": [1, 2], "c": [1, 2]}), _inter(), "value column 'v' is missing"),
        (
            pa.table({"r": ["a", None], "c": [1, 2], "v": [1.0, 2.0]}),
            _inter(),
            "row key column 'r' holds a null \\(row 1",
        ),
        (
            pa.table({"r": [1, 2], "c": [1, 2], "v": ["x", "y"]}),
            _inter(),
            "value column 'v' has type string",
        ),
        (pa.table({"r": [1, 2], "c": [1, 2], "v": [1.0, np.nan]}), _inter(), "non-finite value"),
        (_dups(), _inter(), r"duplicate \(row, column\) pairs.*\('a', 1\)"),
        (
            pa.table({"tags": [["x"], ["y", None]]}),
            dict(kind="labels", label_list="tags"),
            "list of row 1 of the table holds a null",
        ),
        (pa.table({"tags": [["x"], None]}), dict(kind="labels", label_list="tags"), "holds a null"),
        (pa.table({"a": [1.0]}), dict(kind="labels"), "needs label_list or class_column"),
        (pa.table({"a": [1.0]}), dict(kind="matrix"), "kind must be one of"),
        (
            pa.table({"id": [5, 7, 5], "a": [1.0, 2.0, 3.0]}),
            dict(kind="features", row_key="id", feature_columns="a"),
            r"row key column 'id' holds the key 5 twice \(rows 0 and 2",
        ),
        (
            pa.table({"id": ["x", "y", "z", "y"], "tags": [["a"], ["b"], [], ["a"]]}),
            dict(kind="labels", row_key="id", label_list="tags"),
            r"holds the key 'y' twice \(rows 1 and 3",
        ),
        (
            pa.table({"id": [1, 1], "u": ["a", "b"]}),
            dict(kind="views", row_key="id", views={"user": ["u"]}),
            "holds the key 1 twice",
        ),
        (
            pa.table({"r": pa.array([1, 2**63 + 1], pa.uint64()), "c": [1, 2], "v": [1.0, 2.0]}),
            _inter(),
            r"row key column 'r' holds the unsigned 64-bit key 9223372036854775809 \(row 1",
        ),
        (
            pa.table({"id": pa.array([2**64 - 1], pa.uint64()), "a": [1.0]}),
            dict(kind="features", row_key="id", feature_columns="a"),
            "unsigned 64-bit key 18446744073709551615",
        ),
        (
            pa.table({"u": pa.array([3, 2**63], pa.uint64())}),
            dict(kind="views", views={"user": ["u"]}, hash_features=8),
            r"view \(category\) column 'u' holds the unsigned 64-bit key 9223372036854775808",
        ),
    ],
)
def test_bad_input_named_error_nothing_left(tmp_path, no_store_write, table, kw, match):
    dest, scratch = tmp_path / "bad.zarr", tmp_path / "scratch"
    scratch.mkdir()
    with pytest.raises(ConversionError, match=match):
        convert_table(table, str(dest), batch_rows=1, tmpdir=str(scratch), **kw)
    assert not dest.exists() and _left_behind(tmp_path) == [] and os.listdir(scratch) == []


def test_schema_change_between_files(tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    pq.write_table(pa.table({"r": [1], "c": [1], "v": [1.0]}), d / "a.parquet")
    pq.write_table(pa.table({"r": ["x"], "c": [1], "v": [1.0]}), d / "b.parquet")
    with pytest.raises(
        ConversionError,
        match="schema changes between files: column 'r' is "
        "integer in .*a.parquet but string in .*b.parquet",
    ):
        convert("parquet", str(d / "*.parquet"), str(tmp_path / "s.zarr"), **_inter())
    pq.write_table(pa.table({"r": [1], "v": [1.0]}), d / "b.parquet")
    with pytest.raises(ConversionError, match="column 'c' is missing from .*b.parquet"):
        convert("parquet", str(d), str(tmp_path / "s.zarr"), **_inter())
    # int32 in one file, int64 in another: one type class, converted
    pq.write_table(
        pa.table({"r": pa.array([2], pa.int32()), "c": [1], "v": [2.0]}), d / "b.parquet"
    )
    convert(
        "parquet",
        [str(d / "a.parquet"), str(d / "b.parquet")],
        str(tmp_path / "s.zarr"),
        **_inter(),
    )
    assert _entries(tmp_path / "s.zarr") == {(1, 1): 1.0, (2, 1): 2.0}
    assert not (tmp_path / "missing.zarr").exists() and _left_behind(tmp_path) == []


def test_dask_partitions_and_schema_change(tmp_path):
    pd = pytest.importorskip("pandas")
    dd = pytest.importorskip("dask.dataframe")
    df = pd.DataFrame({"r": [3, 1, 2, 1], "c": [1, 1, 2, 2], "v": [1.0, 2.0, 3.0, 4.0]})
    ddf = dd.from_pandas(df, npartitions=2)
    convert_table(ddf, str(tmp_path / "d.zarr"), **_inter())
    assert _entries(tmp_path / "d.zarr") == {(3, 1): 1.0, (1, 1): 2.0, (2, 2): 3.0, (1, 2): 4.0}
    bad = dd.concat(
        [
            dd.from_pandas(df.iloc[:2], npartitions=1),
            dd.from_pandas(df.iloc[2:].astype({"r": str}), npartitions=1),
        ]
    )
    with pytest.raises(ConversionError, match="schema changes between partitions"):
        convert_table(bad, str(tmp_path / "e.zarr"), **_inter())
    assert not (tmp_path / "e.zarr").exists()


def test_bibtex_table_equals_convert_arff(tmp_path):
    """Acceptance: Bibtex as a table (feature index / value lists, a list of label names per
    row, labels in shuffled order within a row) gives the store `convert arff` writes."""
    src = data_file("bibtex", "bibtex-train.arff.gz")
    xml = data_file("bibtex", "bibtex.xml")
    convert("arff", src, str(tmp_path / "a.zarr"), xml=xml)
    ds = open_dataset(tmp_path / "a.zarr")
    X, Y = ds["X"].read(), ds["Y"].read()
    names = np.array(ds.attrs["label_names"], dtype=object)
    rng = np.random.default_rng(0)
    rows = range(X.shape[0])
    table = pa.table(
        {
            "doc": [f"d{i}" for i in rows],
            "idx": [X.indices[X.indptr[i] : X.indptr[i + 1]].tolist() for i in rows],
            "val": [X.data[X.indptr[i] : X.indptr[i + 1]].tolist() for i in rows],
            "tags": [
                rng.permutation(names[Y.indices[Y.indptr[i] : Y.indptr[i + 1]]]).tolist()
                for i in rows
            ],
        }
    )
    pq.write_table(table, tmp_path / "bibtex.parquet", row_group_size=1000)
    convert(
        "parquet",
        str(tmp_path / "bibtex.parquet"),
        str(tmp_path / "t.zarr"),
        kind="labels",
        row_key="doc",
        feature_indices="idx",
        feature_values="val",
        n_features=X.shape[1],
        label_list="tags",
        labels=list(names),
        batch_rows=777,
    )
    t = open_dataset(tmp_path / "t.zarr")
    X2, Y2 = t["X"].read(), t["Y"].read()
    assert t["X"].kind == "csr" and t["Y"].kind == "csr" and t["Y"].dtype == np.float32
    assert X2.shape == X.shape and (X2 != X).nnz == 0 and np.array_equal(X2.indices, X.indices)
    assert Y2.shape == Y.shape and (Y2 != Y).nnz == 0 and np.array_equal(Y2.indptr, Y.indptr)
    assert t.attrs["label_names"] == ds.attrs["label_names"]
    assert read_vocabulary(t, "rows")[5].as_py() == "d5"
    # without labels=: the sorted vocabulary, the same matrix with permuted columns
    convert(
        "parquet",
        str(tmp_path / "bibtex.parquet"),
        str(tmp_path / "s.zarr"),
        kind="labels",
        label_list="tags",
    )
    s = open_dataset(tmp_path / "s.zarr")
    order = np.argsort(names.astype(str))
    assert s.attrs["label_names"] == sorted(names) and "X" not in s
    assert (s["Y"].read() != Y[:, order]).nnz == 0


def test_features_dense_list_long_and_class(tmp_path):
    t = pa.table(
        {
            "id": [10, 11, 12],
            "a": [1.0, 2.0, 3.0],
            "b": pa.array([4, 5, 6], pa.int16()),
            "emb": pa.array([[1.0, 0.0], [0.0, 1.0], [2.0, 2.0]], pa.list_(pa.float32(), 2)),
            "cls": pa.array(["dog", "cat", "dog"]).dictionary_encode(),
        }
    )
    convert_table(
        t,
        str(tmp_path / "d.zarr"),
        kind="features",
        feature_columns="a,b",
        class_column="cls",
        row_key="id",
        batch_rows=2,
    )
    d = open_dataset(tmp_path / "d.zarr")
    assert np.array_equal(d["X"].read(), [[1, 4], [2, 5], [3, 6]])
    assert d["y"].read().ravel().tolist() == [1.0, 0.0, 1.0]
    assert d.attrs["class_names"] == ["cat", "dog"] and d.attrs["feature_names"] == ["a", "b"]
    assert read_vocabulary(d, "rows").to_pylist() == [10, 11, 12]
    convert_table(t, str(tmp_path / "e.zarr"), kind="features", feature_list="emb", dtype="float32")
    e = open_dataset(tmp_path / "e.zarr")["X"]
    assert e.dtype == np.float32 and np.array_equal(e.read(), [[1, 0], [0, 1], [2, 2]])
    long = pa.table({"doc": ["d2", "d1", "d2"], "word": ["the", "cat", "cat"], "n": [3, 1, 1]})
    convert_table(
        long,
        str(tmp_path / "l.zarr"),
        kind="features",
        row_key="doc",
        feature_key="word",
        value="n",
    )
    lx = open_dataset(tmp_path / "l.zarr")["X"]
    assert lx.kind == "csr" and lx.read().toarray().tolist() == [[1, 0], [1, 3]]
    assert read_vocabulary(tmp_path / "l.zarr", "cols").to_pylist() == ["cat", "the"]
    with pytest.raises(ConversionError, match="one length"):
        convert_table(
            pa.table({"e": [[1.0], [1.0, 2.0]]}),
            str(tmp_path / "f.zarr"),
            kind="features",
            feature_list="e",
        )


def test_topk_parquet_carries_the_keys(tmp_path):
    t = pa.table({"r": ["ann", "bob"], "c": ["i9", "i1"], "v": [1.0, 2.0]})
    convert_table(t, str(tmp_path / "s.zarr"), **_inter())
    out = topk_to_parquet(
        tmp_path / "top.parquet",
        [[1, 0], [0, 1]],
        [[0.9, 0.1], [0.8, 0.7]],
        store=str(tmp_path / "s.zarr"),
        rows=[1, 0],
    )
    got = pq.read_table(out).to_pylist()
    assert got[0] == {"row_key": "bob", "rank": 1, "key": "i9", "score": 0.9}
    assert [g["key"] for g in got] == ["i9", "i1", "i1", "i9"]
    assert [g["row_key"] for g in got] == ["bob", "bob", "ann", "ann"]


def test_cli_convert_parquet(tmp_path, capsys):
    pq.write_table(
        pa.table({"user": ["a", "b"], "item": [5, 6], "rating": [1.0, 2.0]}), tmp_path / "r.parquet"
    )
    rc = main(
        [
            "convert",
            "parquet",
            str(tmp_path / "r.parquet"),
            str(tmp_path / "s.zarr"),
            "--kind",
            "interactions",
            "--row-key",
            "user",
            "--col-key",
            "item",
            "--value",
            "rating",
            "-q",
        ]
    )
    assert rc == 0 and _entries(tmp_path / "s.zarr") == {("a", 5): 1.0, ("b", 6): 2.0}
    with pytest.raises(SystemExit):
        main(["convert", "--help"])
    text = capsys.readouterr().out
    assert "parquet:" in text and "--row-key" in text and "--duplicates" in text


def test_cli_predict_writes_parquet_with_the_user_keys(tmp_path, capsys):
    """labels kind -> fit GIMC -> `predict --parquet`: rows and labels under their own keys;
    the test table takes the training label vocabulary through vocabulary_from."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((120, 4))
    tags = ["red", "green", "blue"]
    lab = [[tags[j] for j in range(3) if X[i, j] > 0] for i in range(120)]

    def table(s):
        return pa.table(
            {
                "doc": [f"doc{i}" for i in s],
                "a": X[s, 0],
                "b": X[s, 1],
                "c": X[s, 2],
                "d": X[s, 3],
                "tags": [lab[i] for i in s],
            }
        )

    tr, te = str(tmp_path / "tr.zarr"), str(tmp_path / "te.zarr")
    kw = dict(kind="labels", row_key="doc", feature_columns="a,b,c,d", label_list="tags")
    convert_table(table(np.arange(100)), tr, **kw)
    test = table(np.arange(100, 120)).filter(pa.array([i % 2 == 0 for i in range(20)]))
    test = test.set_column(5, "tags", pa.array([["red"]] * test.num_rows))  # not all labels seen
    convert_table(test, te, vocabulary_from=tr, **kw)
    assert read_vocabulary(te, "labels").to_pylist() == ["blue", "green", "red"]
    model = str(tmp_path / "m")
    assert main(["fit", "gimc-lff", tr, model, "--n-features-map", "8", "--max-iter", "3", "-q"]) == 0
    out = str(tmp_path / "top.parquet")
    assert (
        main(
            ["predict", model, te, str(tmp_path / "p.zarr"), "--top-k", "2", "--parquet", out, "-q"]
        )
        == 0
    )
    got = pq.read_table(out).to_pylist()
    assert len(got) == 20 and got[0]["row_key"] == "doc100" and got[2]["row_key"] == "doc102"
    assert {g["key"] for g in got} <= set(tags) and [g["rank"] for g in got[:2]] == [1, 2]
    assert (
        main(
            ["predict", model, te, str(tmp_path / "q.zarr"), "--top-k", "2", "--parquet", out, "-q"]
        )
        == 2
    )
    assert "--parquet must not exist" in capsys.readouterr().err


def _ml_table(path, string_keys=True):
    a = np.loadtxt(path, dtype=np.int64)
    u = [f"u{x}" for x in a[:, 0]] if string_keys else a[:, 0]
    i = [f"i{x}" for x in a[:, 1]] if string_keys else a[:, 1]
    return pa.table({"user_id": u, "movie_id": i, "rating": a[:, 2].astype(float)})


@pytest.mark.slow  # ~40 s on the busy 2-core machine (two GLRL fits with their JIT warm-up)
def test_glrl_on_table_stores_matches_movielens_and_topk_keys(tmp_path):
    """Acceptance: vocabularies from u.data (string keys), u1.base / u1.test converted with
    them; the README's GLRL model (L1, rank 10) has the MAE it has on `convert movielens`
    stores, and its top-k Parquet carries the original keys."""
    from ooc_lowrank.glrl import GreedyLowRank

    ml = "movielens-100k"
    kw = dict(kind="interactions", row_key="user_id", col_key="movie_id", value="rating")
    full = str(tmp_path / "full.zarr")
    convert_table(_ml_table(data_file(ml, "u.data.gz")), full, **kw)
    maes, models = [], []
    for tag, conv in (("t", "table"), ("m", "movielens")):
        stores = []
        for part in ("u1.base.gz", "u1.test.gz"):
            dest = str(tmp_path / f"{tag}-{part}.zarr")
            if conv == "table":
                convert_table(_ml_table(data_file(ml, part)), dest, vocabulary_from=full, **kw)
            else:
                convert("movielens", data_file(ml, part), dest, shape=(943, 1682))
            stores.append(dest)
        model = GreedyLowRank(loss="l1", n_components=10, refit="none", random_state=0).fit(stores[0])
        maes.append(model.evaluate(stores[1], metrics="mae")["mae"])
        models.append(model)
    print("u1 test MAE, table stores / movielens stores:", maes)
    assert abs(maes[0] - maes[1]) < 2e-3, maes
    assert 0.72 < maes[0] < 0.76
    users = read_vocabulary(full, "rows").to_pylist()
    rows = np.array([users.index("u196"), users.index("u1")])
    idx, scores = models[0].top_k(rows, k=10)
    out = topk_to_parquet(tmp_path / "top.parquet", idx, scores, store=full, rows=rows)
    got = pq.read_table(out).to_pylist()
    assert [g["row_key"] for g in got[:6:5]] == ["u196", "u196"] and got[5]["rank"] == 6
    assert all(g["key"].startswith("i") for g in got) and got[10]["row_key"] == "u1"


def _ml_joined(ratings, users, items):
    """Ratings joined to u.user / u.item as one table (ages bucketed as MovieLens 1M does,
    genres as a list of flag positions)."""
    a = np.loadtxt(ratings, dtype=np.int64)
    with open(users, encoding="latin-1") as f:
        us = {int(p[0]): p for p in (ln.rstrip("\n").split("|") for ln in f if ln.strip())}
    with open(items, encoding="latin-1") as f:
        it = {int(p[0]): p for p in (ln.rstrip("\n").split("|") for ln in f if ln.strip())}
    edges = (18, 25, 35, 45, 50, 56)
    return pa.table(
        {
            "user_id": a[:, 0],
            "age": [int(np.searchsorted(edges, int(us[u][1]), side="right")) for u in a[:, 0]],
            "gender": [us[u][2] for u in a[:, 0]],
            "occupation": [us[u][3] for u in a[:, 0]],
            "movie_id": a[:, 1],
            "genres": [[j for j, f in enumerate(it[i][-19:]) if f == "1"] for i in a[:, 1]],
            "rating": a[:, 2].astype(float),
        }
    )


def test_movielens_views_from_joined_tables_equal_convert_movielens_views(tmp_path):
    """Acceptance: u.user / u.item joined to the ratings; vocabularies from u.data, u1.base
    converted with them (no 'other' bucket): the views `convert movielens_views` writes."""
    ml = "movielens-100k"
    side = (data_file(ml, "u.user"), data_file(ml, "u.item"))
    views = "user=user_id,age,gender,occupation;item=movie_id,genres"
    kw = dict(kind="views", views=views, target="rating", other=False, dtype="float32")
    full = str(tmp_path / "full.zarr")
    convert_table(_ml_joined(data_file(ml, "u.data.gz"), *side), full, **kw)
    t = str(tmp_path / "t.zarr")
    convert_table(
        _ml_joined(data_file(ml, "u1.base.gz"), *side),
        t,
        vocabulary_from=full,
        kind="views",
        target="rating",
        dtype="float32",
    )
    m = str(tmp_path / "m.zarr")
    convert("movielens_views", data_file(ml, "u1.base.gz"), m)
    a, b = open_dataset(t), open_dataset(m)
    for name in ("X0", "X1"):
        x, y = a[name].read(), b[name].read()
        assert x.shape == y.shape and x.dtype == y.dtype and (x != y).nnz == 0, name
    assert np.array_equal(a["y"].read(), b["y"].read())
    assert a.attrs["view_names"] == ["user", "item"]


def test_views_other_bucket_hashing_and_unseen(tmp_path):
    t = pa.table(
        {
            "user": [1, 2, 1, 3],
            "age": [20.0, 30.0, 20.0, 0.0],
            "g": ["F", "M", "F", None],
            "item": ["a", "b", "c", "a"],
            "genres": [[0, 2], [1], [], [2]],
            "r": [4.0, 3.0, 5.0, 1.0],
        }
    )
    v = {"user": ["user", "age", "g"], "item": ["item", "genres"]}
    tr = str(tmp_path / "v.zarr")
    convert_table(t, tr, kind="views", views=v, target="r", min_count=2, batch_rows=3)
    d = open_dataset(tr)
    # user: {1} + other, age, g: {F} + other (M rare, null missing); item {a} + other,
    # genres {2} + other
    assert d["X0"].read().toarray().tolist() == [
        [1, 0, 20, 1, 0],
        [0, 1, 30, 0, 1],
        [1, 0, 20, 1, 0],
        [0, 1, 0, 0, 1],
    ]
    assert d["X1"].read().toarray().tolist() == [
        [1, 0, 1, 1],
        [0, 1, 0, 1],
        [0, 1, 0, 0],
        [1, 0, 1, 0],
    ]
    # a test table: unseen values go to 'other', no error
    t2 = pa.table(
        {"user": [9], "age": [1.0], "g": ["X"], "item": ["a"], "genres": [[5]], "r": [1.0]}
    )
    convert_table(t2, str(tmp_path / "t.zarr"), kind="views", vocabulary_from=tr, target="r")
    assert open_dataset(tmp_path / "t.zarr")["X0"].read().toarray().tolist() == [[0, 1, 1, 0, 1]]
    # without 'other': the unseen value is an error naming it, nothing written
    convert_table(t, str(tmp_path / "n.zarr"), kind="views", views=v, target="r", other=False)
    with pytest.raises(ConversionError, match="value 9 of column 'user' is not in the vocab"):
        convert_table(
            t2,
            str(tmp_path / "u.zarr"),
            kind="views",
            target="r",
            vocabulary_from=str(tmp_path / "n.zarr"),
        )
    assert not (tmp_path / "u.zarr").exists()
    # signed hashing: n columns per view, +-1 entries, same result for the test table's keys
    convert_table(t, str(tmp_path / "h.zarr"), kind="views", views=v, hash_features=16)
    h = open_dataset(tmp_path / "h.zarr")
    x0 = h["X0"].read()
    assert x0.shape == (4, 16) and set(np.abs(x0.data)) <= {1.0, 20.0, 30.0}
    assert (x0[0] != x0[2]).nnz == 0 and "y" not in h
    convert_table(
        t2, str(tmp_path / "h2.zarr"), kind="views", vocabulary_from=str(tmp_path / "h.zarr")
    )
    from ooc_lowrank.io.tables import _name_seed, hash_keys

    hh = int(hash_keys(pa.array(["a"]), _name_seed("item"))[0])
    col, sign = hh % 16, (1.0 if hh >> 63 else -1.0)
    train_row = h["X1"].read()[0].toarray()[0]
    test_row = open_dataset(tmp_path / "h2.zarr")["X1"].read()[0].toarray()[0]
    assert train_row[col] == test_row[col] == sign


def naive_hash_strings(strings, seed):
    """NumPy twin of kernels.hashing.hash_strings."""
    mask = (1 << 64) - 1
    out = []
    for s in strings:
        h = 0xCBF29CE484222325 ^ seed
        for byte in s.encode("utf-8"):
            h = ((h ^ byte) * 0x100000001B3) & mask
        h = ((h ^ (h >> 30)) * 0xBF58476D1CE4E5B9) & mask
        h = ((h ^ (h >> 27)) * 0x94D049BB133111EB) & mask
        out.append(h ^ (h >> 31))
    return np.array(out, dtype=np.uint64)


def test_hash_kernel_matches_its_numpy_twin():
    from ooc_lowrank.io.tables import hash_keys

    strings = ["", "a", "user=42", "é€😀", "x" * 100]
    arr = pa.array(["pad"] + strings).slice(1)  # a sliced array: offsets start inside
    assert np.array_equal(hash_keys(arr, 7), naive_hash_strings(strings, 7))
    assert len(set(hash_keys(pa.array([str(i) for i in range(1000)])).tolist())) == 1000


def test_bench_tables_body_at_tiny_size(tmp_path):
    """benchmarks/bench_tables.py at tiny size (structure only; no timing is asserted)."""
    from benchmarks import bench_tables

    res = bench_tables.main(
        [
            "--rows",
            "3000",
            "--files",
            "3",
            "--bucket-nnz",
            "500",
            "--in-process",
            "--quiet",
            "--workdir",
            str(tmp_path),
        ]
    )
    assert [r["keys"] for r in res["results"]] == ["int64", "string"]
    for r in res["results"]:
        assert r["convert_seconds"] > 0 and r["scan_seconds"] > 0 and r["convert_peak_rss"] > 0
        ds = open_dataset(tmp_path / f"{r['keys']}.zarr")
        assert ds["obs"].nnz <= 3000 and ds.n_rows == len(read_vocabulary(ds, "rows"))


def test_bench_tables_stages_body_at_tiny_size(tmp_path):
    """benchmarks/bench_tables_stages.py at tiny size, both paths of integer keys and string
    keys (structure only; no timing is asserted): every timed function still exists, the hot
    stages are seen, the stages add up to the total, and the wrappers are removed after."""
    from benchmarks import bench_tables_stages

    from ooc_lowrank.io import tables
    from ooc_lowrank.kernels import buckets

    before = (tables.Vocabulary.index, buckets.bucket_csr, tables._KEEP_ENTRIES_BYTES)
    for args in (["--keys", "int64", "--read-twice"], ["--keys", "string"]):
        res = bench_tables_stages.main(
            ["--rows", "5000", "--files", "2", "--quiet", "--workdir", str(tmp_path / "w")]
            + args
        )
        st = res["stages_cpu_seconds"]
        assert res["rows"] == 5000 and {"key mapping", "sort + merge (bucket_csr)"} <= set(st)
        assert abs(sum(st.values()) - res["convert_cpu_seconds"]) < 1e-6
    assert before == (tables.Vocabulary.index, buckets.bucket_csr, tables._KEEP_ENTRIES_BYTES)
    assert not (tmp_path / "w").exists()


def test_csv_files_whose_inferred_types_differ(tmp_path):
    """CSV type inference gives int64 for '2' and double for '2.5': one numeric class, the
    value read as float64 from both files; a key column of int in one and string in the
    other is still an error."""
    (tmp_path / "a.csv").write_text("r,c,v\n1,x,2\n")
    (tmp_path / "b.csv").write_text("r,c,v\n2,y,2.5\n")
    convert("csv", str(tmp_path / "*.csv"), str(tmp_path / "s.zarr"), **_inter())
    assert _entries(tmp_path / "s.zarr") == {(1, "x"): 2.0, (2, "y"): 2.5}
    (tmp_path / "b.csv").write_text("r,c,v\nk,y,2.5\n")
    with pytest.raises(ConversionError, match="column 'r' is integer in .*a.csv but string"):
        convert("csv", str(tmp_path / "*.csv"), str(tmp_path / "t.zarr"), **_inter())


def test_sources_local_and_url_mixed_or_missing(tmp_path):
    pq.write_table(pa.table({"r": [1], "c": [1], "v": [1.0]}), tmp_path / "a.parquet")
    with pytest.raises(ConversionError, match="all local paths or all URLs"):
        convert_table(
            [str(tmp_path / "a.parquet"), "memory://x/b.parquet"],
            str(tmp_path / "s.zarr"),
            **_inter(),
        )
    with pytest.raises(ConversionError, match="no file matches the pattern"):
        convert_table(str(tmp_path / "*.csv"), str(tmp_path / "s.zarr"), **_inter())
    with pytest.raises(ConversionError, match="source does not exist"):
        convert_table(str(tmp_path / "b.parquet"), str(tmp_path / "s.zarr"), **_inter())
    assert sorted(os.listdir(tmp_path)) == ["a.parquet"]


@pytest.mark.parametrize("collide", [False, True])
def test_string_vocabulary_hash_table_matches_pyarrow_index_in(collide, monkeypatch):
    """Vocabulary.index on strings (kernels build_key_table / lookup_keys: one hash table of
    the vocabulary, probed per key) against pyarrow's index_in, with unicode, empty, long,
    unseen, sliced and NUL-holding keys; with every hash forced equal, the byte comparison alone
    tells keys apart."""
    import pyarrow.compute as pc

    import ooc_lowrank.io.tables as tables
    from ooc_lowrank.io.tables import Vocabulary

    if collide:
        monkeypatch.setattr(tables, "hash_keys", lambda k, seed=0: np.zeros(len(k), np.uint64))

    rng = np.random.default_rng(3)
    alphabet = list("ab\u00e9\u20ac") + ["", "zz", "x" * 40]
    keys = sorted({"".join(rng.choice(alphabet, rng.integers(0, 4))) for _ in range(300)})
    voc = Vocabulary(pa.array(rng.permutation(keys).tolist()))
    queries = pa.array(["pad"] + keys + ["unseen", "a" * 50, "b\u00e9" * 7]).slice(1)
    want = pc.index_in(queries, value_set=voc.keys).fill_null(-1).to_numpy(zero_copy_only=False)
    assert np.array_equal(voc.index(queries), want)
    many = queries.take(pa.array(rng.integers(0, len(queries), 5000)))  # each key searched once
    want = pc.index_in(many, value_set=voc.keys).fill_null(-1).to_numpy(zero_copy_only=False)
    assert np.array_equal(voc.index(many.slice(1)), want[1:])
    nul = Vocabulary(pa.array(["a", "a\x00"]))
    assert nul.index(pa.array(["a\x00", "a", "b", "a\x00\x00"])).tolist() == [1, 0, -1, -1]


def test_row_keys_equal_hashes_are_checked_exactly(tmp_path, monkeypatch):
    """Distinct row keys whose 64-bit hashes collide (forced here) convert; a repeat is named."""
    import ooc_lowrank.io.tables as tables

    monkeypatch.setattr(tables, "hash_keys", lambda keys, seed=0: np.zeros(len(keys), np.uint64))
    t = pa.table({"id": ["a", "b", "c"], "x": [1.0, 2.0, 3.0]})
    kw = dict(kind="features", row_key="id", feature_columns="x", batch_rows=2)
    convert_table(t, str(tmp_path / "ok.zarr"), **kw)
    assert read_vocabulary(str(tmp_path / "ok.zarr"), "rows").to_pylist() == ["a", "b", "c"]
    t = pa.table({"id": ["a", "b", "a"], "x": [1.0, 2.0, 3.0]})
    with pytest.raises(ConversionError, match=r"the key 'a' twice \(rows 0 and 2"):
        convert_table(t, str(tmp_path / "bad.zarr"), **kw)
    assert not (tmp_path / "bad.zarr").exists()


def test_sort_pairs_is_a_stable_sort_by_row_then_column():
    """The bucket sort (kernel sort_bucket: counting sort by row, then insertion sort or
    mergesort by column per row) equals its NumPy twin, a stable lexsort: repeated pairs keep
    their read order ('last' relies on it).  Short and long rows, empty rows and buckets."""
    from ooc_lowrank.io.tables import _sort_pairs

    rng = np.random.default_rng(0)
    shapes = ((300, 5, 4), (3000, 7, 2**40), (50, 60, 3), (900, 6, 10**6), (200, 300, 10**6))
    for n, n_rows, n_cols in shapes:  # long rows: mergesort
        rows, cols = rng.integers(0, n_rows, n), rng.integers(0, n_cols, n)
        rows[rows == 2] = 3  # an empty row
        want = np.lexsort((cols, rows))
        pos, r, c = _sort_pairs(rows, cols, n_rows, n_cols)
        np.testing.assert_array_equal(pos, want)
        np.testing.assert_array_equal(r, rows[want])
        np.testing.assert_array_equal(c, cols[want])
    assert all(a.size == 0 for a in _sort_pairs(rows[:0], cols[:0], 5, 4))


def naive_bucket_csr(rows, cols, vals, n_rows, policy):
    """NumPy twin of kernel bucket_csr: stable lexsort by (row, col), runs of equal pairs
    merged by policy ('last' keeps the last read, 'sum' / 'mean' of the run)."""
    order = np.lexsort((cols, rows))
    rows, cols, vals = rows[order], cols[order], vals[order]
    new = np.r_[True, (rows[1:] != rows[:-1]) | (cols[1:] != cols[:-1])] if rows.size else rows
    starts = np.flatnonzero(new)
    ends = np.r_[starts[1:], rows.size] if starts.size else starts
    if policy == "last":
        out = vals[ends - 1]
    else:
        out = np.add.reduceat(vals, starts, axis=0) if starts.size else vals[:0]
        if policy == "mean":
            out = out / (ends - starts)[:, None]
    ptr = np.r_[0, np.cumsum(np.bincount(rows[starts], minlength=n_rows))]
    return ptr, cols[starts], out


@pytest.mark.parametrize("policy", ["error", "last", "sum", "mean"])
def test_bucket_csr_matches_its_numpy_twin(policy):
    """Kernel bucket_csr (sort of one bucket fused with the merge of repeated pairs) equals its
    NumPy twin: packed (row << 32 | col) words and separate row / col words (columns >= 2**31),
    two value fields, rows from r0, empty rows, long rows (mergesort), an empty bucket."""
    from ooc_lowrank.kernels.buckets import bucket_csr

    from ooc_lowrank.io.tables import _POLICY_CODES

    rng = np.random.default_rng(3)
    shapes = ((400, 6, 5, True), (3000, 7, 2**40, False), (0, 3, 4, True), (900, 6, 10**6, True))
    # >= 4096 entries, >= 16 per row: the radix sort (radix_sort_pairs), packed and not
    shapes += ((6000, 40, 10**6, True), (5000, 9, 2**30, False))
    for n, n_rows, n_cols, packed in shapes:
        r0 = 10
        rows, cols = rng.integers(0, n_rows, n), rng.integers(0, min(n_cols, 50), n)
        cols *= n_cols // min(n_cols, 50)  # wide: columns up to 2**40, repeats all the same
        rows[rows == 2] = 3  # an empty row
        vals = rng.integers(0, 9, (n, 2)).astype(np.float64)
        if packed:
            bits = vals.view(np.int64)
            fields = [((rows + r0) << 32) | cols, bits[:, 0], bits[:, 1]]
            rf, cf, vf = 0, 0, [1, 2]
        else:
            bits = vals.view(np.int64)
            fields = [bits[:, 1], rows + r0, cols, bits[:, 0]]
            rf, cf, vf = 1, 2, [3, 0]
        words = np.ascontiguousarray(np.stack(fields, axis=1))
        ptr = np.empty(n_rows + 1, np.int64)
        out_cols, out_vals = np.empty(n, np.int64), np.empty((2, n))
        code, vf = _POLICY_CODES[policy], np.array(vf, np.int64)
        fvals, work = words.view(np.float64), np.full(4 * n + 5, -7, np.int64)  # dirty scratch
        m = bucket_csr(
            words, rf, cf, packed, r0, n_rows, fvals, vf, code, ptr, out_cols, out_vals, work
        )
        want = naive_bucket_csr(rows, cols, vals, n_rows, "last" if policy == "error" else policy)
        np.testing.assert_array_equal(ptr, want[0])
        np.testing.assert_array_equal(out_cols[:m], want[1])
        np.testing.assert_allclose(out_vals[:, :m].T, want[2], rtol=1e-12)
        out32 = (np.empty(n, np.int32), np.empty((2, n), np.float32))  # the store's dtypes
        m32 = bucket_csr(words, rf, cf, packed, r0, n_rows, fvals, vf, code, ptr, *out32, work)
        if not (n and cols.max() >= 2**31):
            assert m32 == m and np.array_equal(out32[0][:m], out_cols[:m])
            assert np.array_equal(out32[1][:, :m], out_vals[:, :m].astype(np.float32))
        assert n == 0 or m < n  # repeats were merged


def test_radix_sort_pairs_matches_a_stable_lexsort():
    """Kernel radix_sort_pairs (counting sorts by the column's digits, then by row) equals its
    NumPy twin, a stable lexsort by (row, column, read order), with the CSR row pointer: one to
    three digit passes (columns up to 2**31 - 1), one column, empty rows, repeated pairs."""
    from ooc_lowrank.kernels.buckets import radix_sort_pairs

    rng = np.random.default_rng(5)
    for n, n_rows, n_cols in ((5000, 30, 1), (5000, 30, 200), (7000, 3, 2**21), (4000, 50, 2**31)):
        rows, cols = rng.integers(0, n_rows, n), rng.integers(0, n_cols, n)
        cols[:50] = cols[50:100]  # repeats (same column, other rows / the same row)
        rows[rows == 1] = 2  # an empty row
        key = (cols << 32) | np.arange(n)
        scratch = [np.full(n, -3, np.int64) for _ in range(2)]
        ptr = np.full(n_rows + 1, -1, np.int64)
        perm, got = radix_sort_pairs(key, rows.copy(), *scratch, int(cols.max()), n_rows, ptr)
        want = np.lexsort((cols, rows))
        np.testing.assert_array_equal(perm, want)
        np.testing.assert_array_equal(got, cols[want])
        np.testing.assert_array_equal(ptr, np.r_[0, np.cumsum(np.bincount(rows, minlength=n_rows))])


def test_bucket_kernels_match_their_numpy_twins(tmp_path):
    """scatter_buckets (via RowBuckets.spill) is a stable partition by row range, cut_buckets
    (via bucket_starts) the greedy cut, count_into a bincount."""
    from ooc_lowrank.kernels.buckets import count_into

    from ooc_lowrank.io._common import RowBuckets, bucket_starts

    counts = np.array([3, 0, 5, 1, 9, 2, 2, 0, 4])
    for cap in (1, 4, 5, 10, 100):  # naive twin: the Python loop the kernel replaced
        want, acc = [0], 0
        for i, c in enumerate(counts.tolist()):
            if acc and acc + c > cap:
                want.append(i)
                acc = 0
            acc += c
        assert bucket_starts(counts, cap).tolist() == want + [counts.size]
    assert bucket_starts(np.zeros(0, np.int64), 4).tolist() == [0, 0]
    rng = np.random.default_rng(1)
    dt = np.dtype([("row", "<i8"), ("col", "<i8"), ("val", "<f8")])
    starts = np.array([0, 3, 3, 8, 10])
    buckets = RowBuckets(str(tmp_path), starts, dt)
    parts = []
    for n in (40, 0, 17):
        rec = np.empty(n, dt)
        rec["row"], rec["col"], rec["val"] = rng.integers(0, 10, n), np.arange(n), rng.random(n)
        buckets.spill(rec)
        parts.append(rec)
    allrec = np.concatenate(parts)
    for bi in range(len(buckets)):
        got = buckets.load(bi, sort=False).copy()
        want = allrec[(allrec["row"] >= starts[bi]) & (allrec["row"] < starts[bi + 1])]
        np.testing.assert_array_equal(got, want)  # read order kept, values bit-exact
    keys = rng.integers(5, 12, 100)
    out = np.zeros(8, np.int64)
    count_into(keys, 4, out)
    np.testing.assert_array_equal(out, np.bincount(keys - 4, minlength=8))


@pytest.mark.parametrize("packed", [True, False])
def test_spill_kernels_match_their_numpy_twins(packed):
    """spill_pairs builds the records of a batch and partitions them by bucket as a stable
    argsort by bucket of the records built in NumPy; bucket_of_rows is a searchsorted of the
    boundaries; lookup_dense a table lookup with -1 outside it."""
    from ooc_lowrank.kernels.buckets import bucket_of_rows, lookup_dense, spill_pairs

    rng = np.random.default_rng(5)
    starts = np.array([0, 3, 3, 8, 10])
    row_bucket = np.empty(10, np.int32)
    bucket_of_rows(starts, 10, row_bucket)
    np.testing.assert_array_equal(row_bucket, np.searchsorted(starts, np.arange(10), "right") - 1)
    n = 57
    ri, ci = rng.integers(0, 10, n), rng.integers(0, 2**31 - 1, n)
    vals = rng.standard_normal((2, n))
    if packed:
        want = np.stack([(ri << 32) | ci, *vals.view(np.int64)], axis=1)
    else:
        want = np.stack([ri, ci, *vals.view(np.int64)], axis=1)
    b = row_bucket[ri]
    want = want[np.argsort(b, kind="stable")]
    out, counts = np.empty_like(want), np.empty(4, np.int64)
    spill_pairs(ri, ci, packed, vals.view(np.int64), row_bucket, out, counts)
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(counts, np.bincount(b, minlength=4))
    lut = np.array([4, -1, 0, 7])
    keys = np.array([9, 10, 11, 12, 13, 8, -5])
    got = np.empty(keys.size, np.int64)
    lookup_dense(keys, 10, lut, got)
    np.testing.assert_array_equal(got, [-1, 4, -1, 0, 7, -1, -1])


def test_vocab_builder_dense_integer_counts_then_wide_keys():
    """Integer keys are counted in an array while their span is small, then (a key far away)
    through value_counts: the same sorted keys and counts either way."""
    from ooc_lowrank.io.tables import _VocabBuilder

    b = _VocabBuilder()
    for part in ([5, 3, 5], [-2], [], [2**40, 3]):
        b.add(pa.array(part, pa.int64()))
    voc, n = b.finish()
    assert voc.keys.to_pylist() == [-2, 3, 5, 2**40] and n.tolist() == [1, 2, 2, 1]
    b = _VocabBuilder()
    b.add(pa.array([7, 7, 9], pa.int64()))
    voc, n = b.finish()
    assert voc.keys.to_pylist() == [7, 9] and n.tolist() == [2, 1]
    assert voc.index(pa.array([9, 8, 7])).tolist() == [1, -1, 0]
    voc, n = _VocabBuilder().finish()
    assert len(voc) == 0 and n.size == 0


def _ratings(n=400, seed=0):
    rng = np.random.default_rng(seed)
    pairs = {(f"u{rng.integers(30)}", int(rng.integers(20))) for _ in range(n)}
    r, c = zip(*sorted(pairs), strict=True)
    return pa.table({"r": list(r), "c": list(c), "v": np.arange(len(r), dtype=np.float64)})


def test_split_interactions_by_pair_hash_uses_the_training_vocabularies(tmp_path):
    """A split by a hash of (row, col): every entry lands in exactly one store (or is dropped
    from test, counted, when a key of it is unseen in training); test indexes train's matrix."""
    t = _ratings()
    tr, te = str(tmp_path / "tr.zarr"), str(tmp_path / "te.zarr")
    kw = _inter(split_by=["r", "c"], test_fraction=0.3, test_dest=te, batch_rows=64)
    convert_table(t, tr, **kw)
    a, b = _entries(tr), _entries(te)
    assert read_vocabulary(te, "rows") == read_vocabulary(tr, "rows")
    assert read_vocabulary(te, "cols") == read_vocabulary(tr, "cols")
    assert _obs(te).shape == _obs(tr).shape and 0.15 < len(b) / t.num_rows < 0.45
    dropped = open_dataset(te).attrs["dropped_unseen"]
    whole = {(r, c): v for r, c, v in zip(*t.to_pydict().values(), strict=True)}
    assert not set(a) & set(b) and len(a) + len(b) + dropped == len(whole)
    assert {**a, **b}.items() <= whole.items()
    # the same seed splits the same way again; another seed differently
    convert_table(t, str(tmp_path / "tr2.zarr"), **dict(kw, test_dest=str(tmp_path / "t2")))
    assert _entries(tmp_path / "tr2.zarr") == a
    kw3 = dict(kw, test_dest=str(tmp_path / "t3"), split_seed=5)
    convert_table(t, str(tmp_path / "tr3.zarr"), **kw3)
    assert _entries(tmp_path / "tr3.zarr") != a


def test_split_by_row_key_consistent_across_kinds(tmp_path):
    """Split by user: test users are new rows (own row vocabulary, training columns), and a
    user features table split with the same seed sends every user to the same side."""
    t = _ratings()
    tr, te = str(tmp_path / "tr.zarr"), str(tmp_path / "te.zarr")
    convert_table(t, tr, **_inter(split_by="r", test_fraction=0.4, test_dest=te))
    train_users = set(read_vocabulary(tr, "rows").to_pylist())
    test_users = set(read_vocabulary(te, "rows").to_pylist())
    assert train_users and test_users and not train_users & test_users
    assert read_vocabulary(te, "cols") == read_vocabulary(tr, "cols")
    assert "rows sorted" in open_dataset(te).attrs["key_order"]
    users = sorted(train_users | test_users)
    feats = pa.table({"r": users, "age": np.arange(len(users), dtype=np.float64)})
    ftr, fte = str(tmp_path / "ftr.zarr"), str(tmp_path / "fte.zarr")
    convert_table(
        feats,
        ftr,
        kind="features",
        row_key="r",
        feature_columns="age",
        split_by="r",
        test_fraction=0.4,
        test_dest=fte,
    )
    assert set(read_vocabulary(ftr, "rows").to_pylist()) == train_users
    assert set(read_vocabulary(fte, "rows").to_pylist()) == test_users


def test_split_by_value_labels_use_the_training_label_vocabulary(tmp_path):
    t = pa.table(
        {
            "id": ["a", "b", "c", "d"],
            "fold": ["train", "train", "test", "test"],
            "tags": [["x"], ["y", "x"], ["x", "new"], []],
        }
    )
    tr, te = str(tmp_path / "tr.zarr"), str(tmp_path / "te.zarr")
    kw = dict(kind="labels", row_key="id", label_list="tags", split_by="fold")
    convert_table(t, tr, test_values="test", test_dest=te, **kw)
    assert read_vocabulary(te, "labels").to_pylist() == ["x", "y"]
    assert read_vocabulary(te, "rows").to_pylist() == ["c", "d"]
    assert open_dataset(te)["Y"].read().toarray().tolist() == [[1, 0], [0, 0]]  # "new" dropped
    with pytest.raises(ConversionError, match="'new' of column 'tags' is not in"):
        convert_table(t, tr, test_values="test", test_dest=te, unseen="error", overwrite=True, **kw)
    assert not os.path.exists(tr)  # the train store of a failed split is removed
    with pytest.raises(ConversionError, match="exactly one of test_fraction and test_values"):
        convert_table(t, tr, test_dest=te, test_fraction=0.5, test_values="test", **kw)
    with pytest.raises(ConversionError, match="a split needs split_by and test_dest"):
        convert_table(t, tr, kind="labels", label_list="tags", test_dest=te)


def test_cli_convert_parquet_split(tmp_path):
    pq.write_table(_ratings(), tmp_path / "r.parquet")
    tr, te = str(tmp_path / "tr.zarr"), str(tmp_path / "te.zarr")
    args = ["convert", "parquet", str(tmp_path / "r.parquet"), tr, "--kind", "interactions"]
    args += ["--row-key", "r", "--col-key", "c", "--value", "v", "--split-by", "r,c"]
    assert main(args + ["--test-fraction", "0.3", "--test-dest", te, "-q"]) == 0
    assert not set(_entries(tr)) & set(_entries(te)) and _entries(te)


def test_dictionary_keys_equal_plain_keys(tmp_path):
    """Keys read dictionary-encoded (Parquet, pandas categoricals with unused categories,
    dictionaries longer than a batch) give the store plain string keys give."""
    import pandas as pd

    t = _ratings(200, seed=1)
    plain = str(tmp_path / "plain.zarr")
    convert_table(t, plain, **_inter(batch_rows=7))
    df = t.to_pandas()
    df["r"] = pd.Categorical(df["r"], categories=sorted(set(df["r"])) + ["unused"])
    convert_table(df, str(tmp_path / "cat.zarr"), **_inter(batch_rows=7))
    assert _entries(tmp_path / "cat.zarr") == _entries(plain)
    pq.write_table(t, tmp_path / "t.parquet", row_group_size=100)
    for batch_rows in (None, 40, 7):  # batches of one row group share its dictionary (7: longer)
        dest = str(tmp_path / f"pq{batch_rows}.zarr")
        convert_table(str(tmp_path / "t.parquet"), dest, **_inter(batch_rows=batch_rows))
        assert _entries(dest) == _entries(plain)
        assert read_vocabulary(dest, "rows") == read_vocabulary(plain, "rows")


def test_split_table_sources_partition_the_rows():
    """split_table's two sources hold every row exactly once (by hash, and by an integer
    column's value given as text, as the CLI passes it)."""
    from ooc_lowrank.io import split_table

    t = pa.table({"k": [f"u{i % 17}" for i in range(300)], "year": np.arange(300) % 4 + 2020})
    t = t.append_column("i", pa.array(np.arange(300)))
    for kw in (dict(by="k", test_fraction=0.25), dict(by="year", test_values="2021,2023")):
        tr, te = split_table(t, batch_rows=64, **kw)
        a = np.concatenate([b.column(0).to_numpy() for b in tr.batches(["i"])])
        b = np.concatenate([b.column(0).to_numpy() for b in te.batches(["i"])])
        assert np.array_equal(np.sort(np.r_[a, b]), np.arange(300)) and a.size and b.size
        keys = np.asarray(t["k"])
        assert kw["by"] != "k" or not set(keys[a]) & set(keys[b])  # a key on one side only
    assert set(np.asarray(t["year"])[b] % 2) == {1}
    with pytest.raises(ConversionError, match="test_fraction must lie in"):
        split_table(t, "k", test_fraction=1.5)


def test_split_views_test_side_uses_the_training_columns(tmp_path):
    """Views split by user: the test store has the training columns; its users, unseen in
    training, fall in the user view's 'other' column."""
    rng = np.random.default_rng(0)
    t = pa.table(
        {
            "u": [f"u{i}" for i in rng.integers(0, 20, 200)],
            "m": rng.integers(0, 30, 200),
            "y": rng.random(200),
        }
    )
    tr, te = str(tmp_path / "tr.zarr"), str(tmp_path / "te.zarr")
    views = {"user": ["u"], "item": ["m"]}
    convert_table(
        t, tr, kind="views", views=views, target="y", split_by="u", test_fraction=0.3, test_dest=te
    )
    a, b = open_dataset(tr), open_dataset(te)
    assert a.n_rows + b.n_rows == 200 and b.n_rows > 0
    xa, xb = a["X0"].read(), b["X0"].read()
    assert xa.shape[1] == xb.shape[1] and xb[:, -1].sum() == b.n_rows and xa[:, -1].sum() == 0
    assert a["X1"].read().shape[1] == b["X1"].read().shape[1]


@pytest.mark.slow  # ~10 s on the busy 2-core machine: 6 conversions, 2 MVM fits, warm-ups
def test_bench_tables_scale_body_at_tiny_size(tmp_path):
    """benchmarks/bench_tables_scale.py at tiny size, in process (structure only; no timing is
    asserted): both key types, both view encodings, the MVM epochs, the data deleted after."""
    from benchmarks import bench_tables_scale

    out = tmp_path / "scale.json"
    res = bench_tables_scale.main(
        "--rows 3000 --files 2 --criteo-rows 400 --criteo-files 2 --max-cardinality 300 "
        f"--hash-features 64 --min-count 2 --n-factors 2 --in-process --quiet "
        f"--workdir {tmp_path / 'w'} --out {out}".split()
    )
    assert [r["keys"] for r in res["interactions"]] == ["int64", "string"]
    for r in res["interactions"]:
        assert r["convert_seconds"] > 0 and r["scan_seconds"] > 0 and r["convert_peak_rss"] > 0
    c = res["criteo"]
    assert c["cardinalities"][0] == 10 and c["cardinalities"][-1] == 300
    assert c["hashing"]["view_widths"] == [64, 64, 64]
    assert c["vocabulary"]["view_widths"][0] == 13  # the numeric view: one column each
    for mode in ("hashing", "vocabulary"):
        assert c[mode]["nnz"] > 0 and c[mode]["mvm_sgd_epoch"]["seconds"] > 0
    assert os.listdir(tmp_path / "w") == []  # generated data deleted
    assert json.loads(out.read_text())["benchmark"] == "tables_scale"


def test_csr_summed_matches_scipy_sum_duplicates():
    """The views' row builder (kernel sort_bucket + sums of repeated entries) equals scipy's
    coo -> csr with duplicates summed, with empty rows, long rows and no entries at all."""
    import scipy.sparse as sp

    from ooc_lowrank.io.tables import _csr_summed

    rng = np.random.default_rng(0)
    for n, w, m in ((5, 4, 40), (50, 3, 20), (3, 100, 0), (4, 2, 1), (2, 500, 300)):
        r, c, v = rng.integers(0, n, m), rng.integers(0, w, m), rng.random(m)
        got = _csr_summed(r, c, v, n, w, np.float64)
        want = sp.coo_matrix((v, (r, c)), shape=(n, w)).tocsr()
        want.sum_duplicates()
        np.testing.assert_array_equal(got.indptr, want.indptr)
        np.testing.assert_array_equal(got.indices, want.indices)
        np.testing.assert_allclose(got.data, want.data, rtol=1e-12)


@pytest.mark.parametrize("collide", [False, True])
def test_string_interner_numbers_keys_in_first_seen_order(collide, monkeypatch):
    """_StringInterner (kernel intern_strings, its table and key buffers grown from tiny while
    interning) against pyarrow's dictionary_encode of the whole stream (first-seen ids), with
    unicode, empty, long, sliced, NUL-holding and dictionary-encoded batches; with every hash
    forced equal, the byte comparison alone tells keys apart.  finish(): the sorted keys, their
    counts and the sorted index of every id."""
    import pyarrow.compute as pc

    import ooc_lowrank.io.tables as tables

    if collide:
        monkeypatch.setattr(tables, "hash_keys", lambda k, seed=0: np.zeros(len(k), np.uint64))
    rng = np.random.default_rng(11)
    alphabet = list("ab\u00e9\u20ac\x00") + ["", "zz", "x" * 300]
    pool = ["".join(rng.choice(alphabet, rng.integers(0, 4))) for _ in range(3000)]
    batches, stream = [], []
    for size in (1, 0, 7, 900, 5000, 30):
        b = [pool[k] for k in rng.integers(0, len(pool), size)]
        stream += b
        arr = pa.array(["pad"] + b, pa.large_string()).slice(1)
        batches.append(pc.dictionary_encode(arr) if size == 900 else arr)
    d = batches[3]  # its dictionary again (interned once), and a key in no row: left out
    unused = pa.DictionaryArray.from_arrays(
        pa.array([0, 1], pa.int32()),
        pa.concat_arrays([d.dictionary, pa.array(["NEVER"], d.dictionary.type)]),
    )
    batches[3:3] = [d.slice(0, 0)]
    batches.append(unused.slice(0, 0))
    it = tables._StringInterner()
    got = np.concatenate([it.add(b) for b in batches])
    want = pc.dictionary_encode(pa.array(stream))
    assert np.array_equal(got, want.indices.to_numpy())
    voc, counts, where = it.finish()
    keys = sorted(set(stream))
    assert voc.keys.to_pylist() == keys
    assert counts.tolist() == [stream.count(k) for k in keys]
    assert [keys[w] for w in where[: len(want.dictionary)]] == want.dictionary.to_pylist()
    assert where[len(want.dictionary) :].tolist() == [-1]  # "NEVER"


def test_bench_tables_scale_one_key_type_without_criteo(tmp_path):
    """--keys string --criteo-rows 0: the string-key interactions alone (the full-size run of
    issue 26's target without the Criteo part); structure only, no timing asserted."""
    from benchmarks import bench_tables_scale

    res = bench_tables_scale.main(
        f"--rows 2000 --files 2 --keys string --criteo-rows 0 --in-process --quiet "
        f"--workdir {tmp_path / 'w'} --out {tmp_path / 's.json'}".split()
    )
    assert [r["keys"] for r in res["interactions"]] == ["string"] and "criteo" not in res
    assert res["interactions"][0]["store_bytes"] > 0


def test_bench_tables_scale_partial_runs_merge_into_one_results_file(tmp_path):
    """A run of one part (one key type, or the Criteo part alone) replaces only that part of
    the results file; the others stay, stamped with the time they were measured."""
    from benchmarks.bench_tables_scale import merge_results

    path = tmp_path / "r.json"
    old = {"benchmark": "tables_scale", "time": "T0", "criteo": {"rows": 5}}
    old["interactions"] = [{"keys": "int64", "rows": 1}, {"keys": "string", "rows": 1}]
    path.write_text(json.dumps(old))
    res = {"benchmark": "tables_scale", "time": "T1"}
    res["interactions"] = [{"keys": "string", "rows": 2}]
    got = merge_results(str(path), res)
    assert got["time"] == "T1" and got["criteo"] == {"rows": 5, "time": "T0"}
    assert got["interactions"] == [
        {"keys": "int64", "rows": 1, "time": "T0"},
        {"keys": "string", "rows": 2, "time": "T1"},
    ]
    res = {"benchmark": "tables_scale", "time": "T2", "criteo": {"rows": 7}}
    path.write_text(json.dumps(got))
    got = merge_results(str(path), res)
    assert got["criteo"] == {"rows": 7, "time": "T2"} and len(got["interactions"]) == 2
    fresh = merge_results(str(tmp_path / "none.json"), res)
    assert fresh == dict(res, criteo={"rows": 7, "time": "T2"})
