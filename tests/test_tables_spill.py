"""Interactions spilled in their one read (io.tables._SpillOnce, issue 26).

Keys interned first-seen while reading, records spilled to buckets cut at order-key quantiles
of the first batch, ids mapped to sorted indices per bucket, oversized buckets re-spilled: the
store must be byte-identical to the replay path (``_PairsOnce``) and to the two-read path with
the training vocabularies (``vocabulary_from``), and the entries the NumPy twin's.
"""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_tables import _chunk_bytes, naive_bucket_csr

from ooc_lowrank.io import ConversionError
from ooc_lowrank.io import tables
from ooc_lowrank.io.tables import convert_table
from ooc_lowrank.kernels.buckets import intern_dense, remap_packed, string_order_keys
from ooc_lowrank.storage import open_dataset

POLICIES = ["error", "last", "sum", "mean"]


def _table(keys, policy, n=2400, seed=3, order=None):
    """Ratings with int64 (dense), wide int64 (span above the dense table) or string keys
    sharing their first 8 bytes ("user_000..."); distinct pairs under policy 'error'."""
    rng = np.random.default_rng(seed)
    if policy == "error":
        p = rng.permutation(90 * 40)[:n]
        u, i = p // 40, p % 40
    else:
        u, i = rng.integers(0, 90, n), rng.integers(0, 40, n)
    if keys == "string":
        uk, ik = [f"user_000{x:03d}" for x in u.tolist()], [f"i{x}" for x in i.tolist()]
    elif keys == "wide":
        uk, ik = u * 10**15 - 4 * 10**16, i * 3
    else:
        uk, ik = u * 7 - 100, i * 3
    t = pa.table({"u": uk, "i": ik, "v": rng.integers(1, 9, n).astype(np.float64)})
    if order == "sorted":  # the first batch sees only the lowest row keys
        t = t.take(pa.array(np.argsort(u, kind="stable")))
    return t, u, i


def _parquet(t, folder, files=3):
    os.makedirs(folder)
    step = -(-t.num_rows // files)
    for k in range(files):
        pq.write_table(t.slice(k * step, step), os.path.join(folder, f"p{k}.parquet"))
    return str(folder)


def _kw(policy, **kw):
    out = dict(kind="interactions", row_key="u", col_key="i", value="v", duplicates=policy)
    out.update(batch_rows=500, bucket_nnz=300, dtype="float32")
    out.update(kw)
    return out


@pytest.fixture
def spill_always(monkeypatch):
    """Every table with a known row count takes the spill-once path; a list of its reads."""
    made = []
    real = tables._SpillOnce.__init__

    def spy(self, *a):
        made.append(1)
        real(self, *a)

    monkeypatch.setattr(tables, "_KEEP_ENTRIES_BYTES", 0)
    monkeypatch.setattr(tables._SpillOnce, "__init__", spy)
    return made


@pytest.mark.parametrize("keys", ["int64", "wide", "string"])
@pytest.mark.parametrize("policy", POLICIES)
def test_spill_once_equals_replay_two_reads_and_numpy_twin(tmp_path, monkeypatch, keys, policy):
    t, u, i = _table(keys, policy)
    src = _parquet(t, tmp_path / "pq")
    convert_table(src, str(tmp_path / "replay.zarr"), **_kw(policy))  # _PairsOnce (default)
    made = []
    real = tables._SpillOnce.__init__
    monkeypatch.setattr(tables._SpillOnce, "__init__", lambda s, *a: made.append(1) or real(s, *a))
    monkeypatch.setattr(tables, "_KEEP_ENTRIES_BYTES", 0)
    convert_table(src, str(tmp_path / "spill.zarr"), **_kw(policy))
    assert made == [1]
    two = str(tmp_path / "two.zarr")
    convert_table(src, two, vocabulary_from=str(tmp_path / "spill.zarr"), **_kw(policy))
    spilled = _chunk_bytes(tmp_path / "spill.zarr")
    assert len(spilled) > 4
    assert spilled == _chunk_bytes(tmp_path / "replay.zarr") == _chunk_bytes(two)
    # the NumPy twin: sorted key order, stable (row, col) order, the policy
    ru, ri = np.unique(np.asarray(t.column("u").to_pylist()), return_inverse=True)
    cu, ci = np.unique(np.asarray(t.column("i").to_pylist()), return_inverse=True)
    v = t.column("v").to_numpy()[:, None]
    ptr, cols, vals = naive_bucket_csr(ri, ci, v, ru.size, "last" if policy == "error" else policy)
    got = open_dataset(tmp_path / "spill.zarr")["obs"].read()
    np.testing.assert_array_equal(got.indptr, ptr)
    np.testing.assert_array_equal(got.indices, cols)
    np.testing.assert_array_equal(got.data, vals[:, 0].astype(np.float32))


@pytest.mark.parametrize("keys", ["int64", "string"])
@pytest.mark.parametrize("policy", ["error", "sum"])
def test_oversized_bucket_respilled_same_store(tmp_path, monkeypatch, spill_always, keys, policy):
    """A table sorted by row key: the first batch's quantiles put every later row in the last
    bucket, far above the tiny bucket_nnz; it is re-spilled into row ranges of at most
    bucket_nnz entries (each part loaded alone) and the store is the replay path's."""
    t, _, _ = _table(keys, policy, order="sorted")
    src = _parquet(t, tmp_path / "pq")
    splits, loads = [], []
    real_init = tables._SpilledBuckets.__init__

    def spy(self, once):
        real_init(self, once)
        splits.extend(it for it in self._items if it[0] == "split")

    monkeypatch.setattr(tables._SpilledBuckets, "__init__", spy)
    real_load = tables._SpilledBuckets.load

    def load(self, bi, sort=False):
        rec = real_load(self, bi)
        loads.append((rec.size, np.unique(rec["rc"] >> 32).size))
        return rec

    monkeypatch.setattr(tables._SpilledBuckets, "load", load)
    convert_table(src, str(tmp_path / "spill.zarr"), **_kw(policy, bucket_nnz=120))
    assert spill_always == [1] and len(splits) > 4
    # a bucket over the limit holds one row with more entries than that, never two rows
    assert loads and all(size <= 120 or n_rows == 1 for size, n_rows in loads)
    monkeypatch.setattr(tables, "_KEEP_ENTRIES_BYTES", 1 << 30)
    convert_table(src, str(tmp_path / "replay.zarr"), **_kw(policy, bucket_nnz=120))
    assert _chunk_bytes(tmp_path / "spill.zarr") == _chunk_bytes(tmp_path / "replay.zarr")


@pytest.mark.parametrize("keys", ["int64", "string"])
def test_spill_once_independent_of_batch_and_bucket_sizes(tmp_path, spill_always, keys):
    """Batches of 1, 37 and all rows, buckets of 50, 400 entries and one bucket (kept in
    memory): the same chunk files; a random-order and a sorted table alike."""
    for order in (None, "sorted"):
        t, _, _ = _table(keys, "mean", n=900, seed=9, order=order)
        out = []
        for k, (batch, bucket) in enumerate([(1, 50), (37, 400), (900, 10**6)]):
            dest = tmp_path / f"{order}{k}.zarr"
            convert_table(t, str(dest), **_kw("mean", batch_rows=batch, bucket_nnz=bucket))
            out.append(_chunk_bytes(dest))
        assert out[0] == out[1] == out[2] and len(out[0]) > 2
    assert len(spill_always) == 6


def test_spill_once_duplicates_named_nothing_left(tmp_path, spill_always):
    """Duplicate pairs without a policy: the error names a pair by its keys, before the store
    is opened; no store, no scratch file left."""
    t = pa.table(
        {
            "u": [f"u{k % 50}" for k in range(1000)],
            "i": [f"i{k % 7}" for k in range(1000)],
            "v": np.ones(1000),
        }
    )
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    with pytest.raises(ConversionError, match=r"duplicate \(row, column\) pairs.*\('u"):
        convert_table(t, str(tmp_path / "d.zarr"), tmpdir=str(scratch), **_kw("error"))
    assert spill_always == [1]
    assert not (tmp_path / "d.zarr").exists() and os.listdir(scratch) == []


def test_int_interner_dense_then_hashed_keeps_ids(monkeypatch):
    """_IntInterner: ids in first-seen order through the dense table, kept when a key outside
    the span moves it to the hash table; counts per id; finish sorts the keys."""
    monkeypatch.setattr(tables, "_MAX_DENSE_SPAN", 64)
    it = tables._IntInterner()
    a = it.add(pa.array([5, 3, 5, 9, -2], pa.int64()))
    b = it.add(pa.array([9, 40, 3], pa.int64()))  # still within the span (table grown)
    c = it.add(pa.array([10**12, 40, -7, 10**12], pa.int64()))  # beyond: hashed
    d = it.add(pa.array([], pa.int64()))
    np.testing.assert_array_equal(a, [0, 1, 0, 2, 3])
    np.testing.assert_array_equal(b, [2, 4, 1])
    np.testing.assert_array_equal(c, [5, 4, 6, 5])
    assert d.size == 0 and it._hash is not None
    np.testing.assert_array_equal(it.order_keys(0, it.n), [5, 3, 9, -2, 40, 10**12, -7])
    voc, counts, where = it.finish()
    assert voc.keys.to_pylist() == [-7, -2, 3, 5, 9, 40, 10**12]
    np.testing.assert_array_equal(counts, [1, 1, 2, 2, 2, 2, 2])
    np.testing.assert_array_equal(where, [3, 2, 4, 1, 5, 6, 0])


def test_intern_dense_kernel_vs_numpy():
    rng = np.random.default_rng(0)
    keys = rng.integers(-20, 30, 500)
    lut = np.full(50, -1, np.int32)
    key_of = np.empty(500, np.int64)
    out = np.empty(500, np.int64)
    n = intern_dense(keys, -20, lut, 0, key_of, out)
    first = np.unique(keys, return_index=True)[1]
    in_order = keys[np.sort(first)]  # distinct keys in first-seen order
    assert n == in_order.size
    np.testing.assert_array_equal(key_of[:n], in_order)
    np.testing.assert_array_equal(in_order[out], keys)


def test_string_order_keys_never_contradict_byte_order():
    rng = np.random.default_rng(1)
    words = ["", "a", "ab", "u1", "u10", "u2", "\u00ff", "zzzzzzzz", "zzzzzzzzz", "user_0001"]
    words += ["".join(rng.choice(list("ab\x00\u00e9z"), rng.integers(0, 12))) for _ in range(300)]
    arr = pa.array(words, pa.large_string())
    data, offsets = tables._string_parts(arr)
    out = np.empty(len(words), np.int64)
    string_order_keys(data, offsets, 0, len(words), out)
    by_bytes = np.argsort(np.array([w.encode() for w in words], dtype=object), kind="stable")
    assert (np.diff(out[by_bytes]) >= 0).all()
    # the first 8 bytes decide: equal prefixes, equal keys; different ones, different keys
    pre = [w.encode()[:8].ljust(8, b"\x00") for w in words]
    for a in range(0, len(words), 7):
        for b in range(1, len(words), 11):
            assert (out[a] == out[b]) == (pre[a] == pre[b])


def test_remap_packed_kernel_vs_numpy():
    rng = np.random.default_rng(2)
    r, c = rng.integers(0, 40, 300), rng.integers(0, 70, 300)
    row_of, col_of = rng.permutation(40).astype(np.int64), rng.permutation(70).astype(np.int64)
    words = np.stack([(r << 32) | c, rng.integers(0, 9, 300)], axis=1)
    extra = words[:, 1].copy()
    remap_packed(words, row_of, col_of)
    np.testing.assert_array_equal(words[:, 0], (row_of[r] << 32) | col_of[c])
    np.testing.assert_array_equal(words[:, 1], extra)


def test_bench_tables_spill_body_at_tiny_size(tmp_path):
    """benchmarks/bench_tables_spill.py at tiny size (structure only; no timing is asserted):
    both paths measured for both key types, the forced limit restored, nothing left behind."""
    from benchmarks import bench_tables_spill

    keep = tables._KEEP_ENTRIES_BYTES
    out = tmp_path / "r.json"
    res = bench_tables_spill.main(
        ["--rows", "3000", "--files", "2", "--repeat", "1", "--quiet", "--out", str(out)]
        + ["--workdir", str(tmp_path / "w")]
    )
    assert tables._KEEP_ENTRIES_BYTES == keep and out.exists()
    for keys in ("int64", "string"):
        for path in ("replay", "spill"):
            assert res[keys][path]["cpu_seconds"] > 0 and res[keys][path]["ratio_to_scan"] > 0
    assert not (tmp_path / "w").exists()


def test_string_interner_uncounted_keeps_a_dictionary_key_seen_later():
    """_StringInterner(count=False) flags keys seen without counting; a dictionary's unused
    key stays out of the vocabulary unless a later batch holds it (then flagged, not lost)."""
    it = tables._StringInterner(count=False)
    d = pa.DictionaryArray.from_arrays(pa.array([0, 2, 0], pa.int32()), pa.array(["b", "x", "a"]))
    np.testing.assert_array_equal(it.add(d), [0, 2, 0])
    np.testing.assert_array_equal(it.add(pa.array(["c", "x"])), [3, 1])
    voc, counts, where = it.finish()
    assert voc.keys.to_pylist() == ["a", "b", "c", "x"] and counts.tolist() == [1, 1, 1, 1]
    np.testing.assert_array_equal(where, [1, 3, 0, 2])
    it = tables._StringInterner(count=False)
    it.add(d)
    voc, _, where = it.finish()  # "x" never seen: left out
    assert voc.keys.to_pylist() == ["a", "b"] and where[1] == -1


def test_sort_strings_equals_byte_order():
    """_sort_strings (a sort of the first 8 bytes, Arrow's sort within runs of equal ones) is
    the byte order of the strings: long shared prefixes, short keys, NUL bytes, non-ASCII."""
    rng = np.random.default_rng(4)
    words = ["user_0000" + str(x) for x in rng.integers(0, 500, 200)] + ["", "a", "a\x00", "\u00e9"]
    words += ["".join(rng.choice(list("ab\x00\u00e9z"), rng.integers(0, 11))) for _ in range(400)]
    words = list(dict.fromkeys(words))
    arr = pa.array(words, pa.large_string())
    data, offsets = tables._string_parts(arr)
    prefix = np.empty(len(words), np.int64)
    string_order_keys(data, offsets, 0, len(words), prefix)
    perm = tables._sort_strings(arr, prefix)
    assert [words[k] for k in perm] == sorted(words, key=lambda w: w.encode())


@pytest.mark.parametrize("policy", ["last", "mean"])
def test_spill_once_weights_and_no_value_column(tmp_path, monkeypatch, policy):
    """A weight column (a second coo array, same entries) and a table without a value column
    (ones): the spill-once stores equal the replay path's, array by array."""
    t, _, _ = _table("string", policy, n=1500, seed=6)
    t = t.append_column("w", pa.array(np.random.default_rng(6).random(t.num_rows)))
    for extra in (dict(weight="w"), dict(value=None)):
        kw = _kw(policy, **extra)
        convert_table(t, str(tmp_path / "replay.zarr"), overwrite=True, **kw)
        monkeypatch.setattr(tables, "_KEEP_ENTRIES_BYTES", 0)
        convert_table(t, str(tmp_path / "spill.zarr"), overwrite=True, **kw)
        monkeypatch.setattr(tables, "_KEEP_ENTRIES_BYTES", 1 << 30)
        for a in ("obs", "weight") if "weight" in extra else ("obs",):
            got = _chunk_bytes(tmp_path / "spill.zarr", a)
            assert got == _chunk_bytes(tmp_path / "replay.zarr", a) and len(got) > 2
