"""Hostile stores, labels and sources: a table of probes that must fail loudly and clearly.

Each row of :data:`PROBES` is ``(name, setup, exception, message fragment)``: ``setup(tmp_path)``
builds (and tampers with) whatever it needs and returns a zero-argument action; the action must
raise ``exception`` with a message containing the fragment.  Add a row for every new hazard.
Tests of behaviour that must *succeed* (store and in-memory paths agreeing, cleanup of temporary
folders) follow the table.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
import zarr
from conftest import data_file

from ooc_lowrank import OOCLowRankWarning
from ooc_lowrank.gimc import GIMC
from ooc_lowrank.io import ConversionError, convert
from ooc_lowrank.storage import DatasetWriter, StoreError, open_dataset, write_arrays


def _store(tmp, name="s.zarr", *, zeros_block=True):
    """A 10-row store, block_rows=4: dense X (its block 1 all zero) and csr 0/1 Y."""
    X = np.arange(1, 41, dtype=np.float32).reshape(10, 4)
    if zeros_block:
        X[4:8] = 0.0  # a legitimately all-zero chunk must be stored, not skipped
    Y = sp.csr_matrix(np.eye(10, 3, dtype=np.float32))
    path = str(tmp / name)
    write_arrays(path, {"X": X, "Y": Y}, block_rows=4)
    return path


def _rm(path, key):
    os.remove(os.path.join(path, *key.split("/")))


def _truncate(path, key, keep=5):
    p = os.path.join(path, *key.split("/"))
    with open(p, "r+b") as fh:
        fh.truncate(keep)


def _flip(path, key):
    p = os.path.join(path, *key.split("/"))
    with open(p, "r+b") as fh:
        b = bytearray(fh.read())
        b[0] ^= 0xFF
        fh.seek(0)
        fh.write(bytes(b))


def _fit(path, **kw):
    return lambda: GIMC(n_features_map=4, max_iter=1, random_state=0, **kw).fit(path)


def _read_all(ds):
    for n in ds.names:
        for _ in ds[n].iter_blocks():
            pass


def _tamper_then(fn, tamper):
    """Open the store first, tamper with it, then run ``fn(ds)`` (damage after open)."""

    def setup(tmp):
        p = _store(tmp)
        ds = open_dataset(p)
        tamper(p)
        return lambda: fn(ds)

    return setup


def _tampered(tamper, action=open_dataset):
    def setup(tmp):
        p = _store(tmp)
        tamper(p)
        return lambda: action(p)

    return setup


def _memory_store_then(tamper_key, after_open):
    """A ``memory://`` store (the fsspec code path) with one chunk removed."""

    def setup(tmp):
        import fsspec

        url = f"memory://hostile/{tmp.name}/m.zarr"
        X = np.arange(1, 41, dtype=np.float32).reshape(10, 4)
        write_arrays(url, {"X": X}, block_rows=4, overwrite=True)
        fs = fsspec.filesystem("memory")

        def rm():
            fs.rm(f"/hostile/{tmp.name}/m.zarr/{tamper_key}")

        if after_open:
            ds = open_dataset(url)
            rm()
            return lambda: ds["X"].read()
        rm()
        return lambda: open_dataset(url)

    return setup


def _write_text(rel, text):
    def tamper(p):
        with open(os.path.join(p, rel), "w") as fh:
            fh.write(text)

    return tamper


def _evaluate_on(tamper, arrays=None):
    """A multi-label model (3 labels) evaluated on a store: ``_store`` or ``arrays``."""

    def setup(tmp):
        X = np.random.default_rng(1).standard_normal((10, 4)).astype(np.float32)
        est = GIMC(n_features_map=4, max_iter=1, random_state=0)
        est.fit(X, sp.csr_matrix(np.eye(10, 3, dtype=np.float32)))
        p = _store(tmp) if arrays is None else write_arrays(str(tmp / "e.zarr"), arrays).url
        tamper(p)
        return lambda: est.evaluate(p)

    return setup


def _label_store(Y, name="Y", kind=None):
    def setup(tmp):
        p = str(tmp / "lab.zarr")
        X = np.random.default_rng(0).standard_normal((12, 3)).astype(np.float32)
        write_arrays(p, {"X": X, name: Y}, block_rows=5, kinds=kind)
        return _fit(p)

    return setup


def _bad_csr(value, row):
    Y = np.zeros((12, 3), np.float32)
    Y[:, 0] = 1.0
    Y[row, 1] = value
    return sp.csr_matrix(Y)


def _ratings(lines, **kw):
    def setup(tmp):
        src = tmp / "u.data"
        src.write_text("".join(f"{line}\n" for line in lines))
        return lambda: convert("movielens", str(src), str(tmp / "r.zarr"), **kw)

    return setup


def _empty_source(fmt, text="", **opts):
    def setup(tmp):
        src = tmp / "empty.txt"
        src.write_text(text)
        return lambda: convert(fmt, str(src), str(tmp / "e.zarr"), **opts)

    return setup


# (name, setup(tmp_path) -> action, exception, message fragment)
PROBES = [
    # -- item 2: deleted chunks never read as zeros -------------------------------------------
    ("deleted-dense-chunk", _tampered(lambda p: _rm(p, "X/c/1/0")), StoreError, "c/1/0"),
    ("deleted-zero-chunk-names-array", _tampered(lambda p: _rm(p, "X/c/1/0")), StoreError, "'X'"),
    ("deleted-last-chunk", _tampered(lambda p: _rm(p, "X/c/2/0")), StoreError, "missing chunk"),
    (
        "deleted-indices-chunk",
        _tampered(lambda p: _rm(p, "Y/indices/c/0")),
        StoreError,
        "Y/indices",
    ),
    (
        "deleted-indptr-chunk",
        _tampered(lambda p: _rm(p, "Y/indptr/c/1")),
        StoreError,
        "missing chunk",
    ),
    (
        "deleted-chunk-verify-full",
        _tampered(lambda p: _rm(p, "X/c/0/0"), lambda p: open_dataset(p, verify="full")),
        StoreError,
        "missing chunk",
    ),
    (
        "deleted-chunk-after-open-read",
        _tamper_then(lambda ds: ds["X"].read(), lambda p: _rm(p, "X/c/1/0")),
        StoreError,
        "missing chunk",
    ),
    (
        "deleted-sparse-chunk-after-open-read",
        _tamper_then(lambda ds: ds["Y"].read(), lambda p: _rm(p, "Y/data/c/0")),
        StoreError,
        "missing chunk",
    ),
    (
        "deleted-chunk-fit",
        _tampered(lambda p: _rm(p, "X/c/1/0"), lambda p: _fit(p)()),
        StoreError,
        "missing chunk",
    ),
    ("deleted-manifest", _tampered(lambda p: _rm(p, "manifest.json")), StoreError, "manifest"),
    # -- truncated / corrupt chunks name store, array and chunk -------------------------------
    ("truncated-chunk-open", _tampered(lambda p: _truncate(p, "X/c/0/0")), StoreError, "c/0/0"),
    (
        "truncated-chunk-after-open-read",
        _tamper_then(lambda ds: ds["X"].read(0, 4), lambda p: _truncate(p, "X/c/0/0")),
        StoreError,
        "X/c/0/0",
    ),
    (
        "truncated-sparse-after-open-read",
        _tamper_then(lambda ds: ds["Y"].read(), lambda p: _truncate(p, "Y/indices/c/0", 3)),
        StoreError,
        "Y/indices",
    ),
    (
        "flipped-bytes-verify-full",
        _tampered(lambda p: _flip(p, "X/c/2/0"), lambda p: open_dataset(p, verify="full")),
        StoreError,
        "checksum",
    ),
    # -- item 6: labels in a store are validated, naming array, value and row ----------------
    ("store-label-2", _label_store(_bad_csr(2.0, 7)), ValueError, "row 7"),
    ("store-label-minus-1", _label_store(_bad_csr(-1.0, 3)), ValueError, "-1.0"),
    ("store-label-half", _label_store(_bad_csr(0.5, 11)), ValueError, "0/1"),
    (
        "store-label-names-store",
        _label_store(_bad_csr(0.5, 11)),
        ValueError,
        "lab.zarr', array 'Y'",
    ),
    (
        "store-class-column-continuous",
        _label_store(np.r_[np.zeros(6), np.ones(5), 0.5][:, None], name="y"),
        ValueError,
        "row 11",
    ),
    (
        "store-dense-multilabel-bad",
        _label_store(np.eye(12, 3) * 3.0, name="Y"),
        ValueError,
        "0/1",
    ),
    # -- item 9: absurd ids without --shape; empty sources ----------------------------------
    (
        "ratings-id-4e9",
        _ratings(["1\t1\t5\t0", "2\t3\t4\t0", "4000000000\t2\t3\t0"]),
        ConversionError,
        "line 3",
    ),
    (
        "ratings-id-4e9-fix",
        _ratings(["1\t1\t5\t0", "4000000000\t2\t3\t0"]),
        ConversionError,
        "shape",
    ),
    (
        "ratings-id-1e8",
        _ratings(["1\t1\t5\t0", "2\t3\t4\t0", "100000000\t2\t3\t0"]),
        ConversionError,
        "100000000",
    ),
    ("ratings-item-1e8", _ratings(["1\t1\t5\t0", "2\t100000000\t4\t0"]), ConversionError, "line 2"),
    ("empty-svmlight", _empty_source("svmlight"), ConversionError, "no rows"),
    (
        "empty-svmlight-comments-only",
        _empty_source("svmlight", "# nothing\n"),
        ConversionError,
        "no rows",
    ),
    # -- item 11: paths are accepted, a missing path is named ----------------------------------
    ("gimc-fit-missing-path", lambda tmp: _fit(str(tmp / "absent.zarr")), StoreError, "no store"),
    # -- more store hazards ---------------------------------------------------------------------
    ("memory-url-deleted-chunk", _memory_store_then("X/c/1/0", False), StoreError, "c/1/0"),
    (
        "memory-url-deleted-after-open",
        _memory_store_then("X/c/2/0", True),
        StoreError,
        "missing chunk",
    ),
    (
        "garbage-manifest",
        _tampered(_write_text("manifest.json", "{not json")),
        StoreError,
        "manifest",
    ),
    (
        "manifest-lists-no-arrays",
        _tampered(_write_text("manifest.json", "{}")),
        StoreError,
        "not in the chunk manifest",
    ),
    (
        "truncated-indptr-open",
        _tampered(lambda p: _truncate(p, "Y/indptr/c/0", 9)),
        StoreError,
        "'Y/indptr/c/0' has 9 bytes",
    ),
    (
        "evaluate-deleted-chunk",
        _evaluate_on(lambda p: _rm(p, "Y/data/c/0")),
        StoreError,
        "Y/data",
    ),
    (
        "evaluate-multilabel-model-on-class-store",
        _evaluate_on(lambda p: None, arrays={"X": np.ones((6, 4)), "y": np.ones((6, 1))}),
        ValueError,
        "3 columns",
    ),
    (
        "store-without-labels",
        lambda tmp: _fit(write_arrays(str(tmp / "nol.zarr"), {"X": np.ones((4, 2))}).url),
        ValueError,
        "no label array",
    ),
    (
        "empty-arff-no-rows",
        _empty_source(
            "arff", "@relation r\n@attribute a numeric\n@attribute l {0,1}\n@data\n", n_labels=1
        ),
        ConversionError,
        "no rows",
    ),
    (
        "snap-node-id-4e9",
        lambda tmp: (
            (tmp / "e.txt").write_text("0\t1\t1\n4000000000\t2\t-1\n"),
            lambda: convert("snap", str(tmp / "e.txt"), str(tmp / "e.zarr")),
        )[1],
        ConversionError,
        "line 2",
    ),
]


@pytest.mark.parametrize("probe", PROBES, ids=[p[0] for p in PROBES])
def test_probe(tmp_path, probe):
    _, setup, exc, frag = probe
    action = setup(tmp_path)
    with pytest.raises(exc) as info:
        action()
    assert frag in str(info.value), str(info.value)


def test_probe_count():
    assert len(PROBES) >= 25  # the table only grows


# ---------------------------------------------------------------------------------------------
# behaviour that must succeed


def test_writer_stores_all_zero_chunks_and_manifest(tmp_path):
    p = _store(tmp_path)
    assert os.path.exists(os.path.join(p, "X", "c", "1", "0"))  # all-zero block written
    ds = open_dataset(p, verify="full")
    assert np.array_equal(ds["X"].read(4, 8), np.zeros((4, 4), np.float32))


def test_store_without_manifest_opens_with_warning(tmp_path):
    p = _store(tmp_path)
    _rm(p, "manifest.json")
    _rm(p, "X/c/1/0")  # the old writer skipped all-zero chunks
    g = zarr.open_group(p, mode="r+")
    meta = dict(g.attrs["ooc_lowrank"])
    meta.pop("manifest")
    g.attrs["ooc_lowrank"] = meta
    with pytest.warns(OOCLowRankWarning, match="rebuild_manifest"):
        open_dataset(p)
    from ooc_lowrank.storage import rebuild_manifest

    assert rebuild_manifest(p)["X"] == 1
    assert os.path.exists(os.path.join(p, "X", "c", "1", "0"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ds = open_dataset(p, verify="full")
    assert ds["X"].read()[0, 0] == 1.0 and not ds["X"].read(4, 8).any()
    _rm(p, "X/c/0/0")
    with pytest.raises(StoreError, match="missing chunk"):
        open_dataset(p)


def _multiclass(rng, n=300, d=5, C=4):
    centers = rng.standard_normal((C, d)) * 3
    y = rng.integers(0, C, n)
    X = (centers[y] + rng.standard_normal((n, d))).astype(np.float32)
    return X, y


def test_multiclass_evaluate_store_equals_memory(tmp_path, rng):
    X, y = _multiclass(rng, C=5)
    labels = np.array([3, 5, 7, 11, 13])[y]  # raw class values, not 0..C-1
    p = str(tmp_path / "mc.zarr")
    write_arrays(p, {"X": X, "y": labels.astype(np.float64)[:, None]}, block_rows=64)
    est = GIMC(n_features_map=20, max_iter=3, random_state=0).fit(X, labels)
    mem = est.evaluate(X, ["accuracy", "p@1"], Y=labels)
    store = est.evaluate(open_dataset(p), ["accuracy", "p@1"])
    assert mem["accuracy"] > 0.5
    assert store == pytest.approx(mem)
    # fitting from the store gives the same model and predictions in the raw label values
    est2 = GIMC(n_features_map=20, max_iter=3, random_state=0).fit(p)
    assert set(np.unique(est2.predict(X))) <= {3, 5, 7, 11, 13}
    assert np.array_equal(est2.classes_, [3, 5, 7, 11, 13])
    assert est2.evaluate(p)["accuracy"] == pytest.approx(mem["accuracy"], abs=0.05)


def test_gimc_fit_accepts_paths_and_dataset_y(tmp_path, rng):
    X, y = _multiclass(rng, C=3)
    p = str(tmp_path / "y.zarr")
    write_arrays(p, {"X": X, "y": (y + 1).astype(np.float64)[:, None]}, block_rows=100)
    est = GIMC(n_features_map=10, max_iter=2, random_state=0).fit(p, eval_set=p, eval_every=1)
    assert est.classes_.tolist() == [1, 2, 3] and not est.multilabel_
    assert set(est.eval_history_) == {0, 1, 2} and est.eval_history_[2]["accuracy"] > 0.5
    assert open_dataset(p).info()["chunk_manifest"] is True
    out = str(tmp_path / "pred.zarr")
    est.predict_to_store(open_dataset(p), out, top_k=1)
    assert set(np.unique(open_dataset(out)["labels"].read())) <= {1, 2, 3}


@pytest.mark.parametrize(
    "fmt,parts,opts",
    [
        ("dense_text", ("segment", "segment.dat"), {}),
        ("svmlight", ("mushrooms", "mushrooms.gz"), {}),
    ],
)
def test_converted_single_label_stores_fit(tmp_path, fmt, parts, opts):
    src = data_file(*parts)
    dest = str(tmp_path / "c.zarr")
    convert(fmt, str(src), dest, **opts)
    ds = open_dataset(dest)
    est = GIMC(n_features_map=30, max_iter=2, random_state=0, normalize_rows=fmt == "dense_text")
    est.fit(ds)
    raw = np.unique(ds["y"].read())
    assert np.array_equal(est.classes_, raw.astype(np.int64))
    acc = est.evaluate(ds)["accuracy"]
    pred = est.predict(ds["X"].read()[:50])
    assert set(np.unique(pred)) <= set(raw.tolist())
    assert acc > 1.5 / raw.size  # better than chance, from the raw 1..C labels


def test_mat_single_column_labels_named_y(tmp_path):
    src = data_file("mfeat-handwritten", "handwritten.mat")
    dest = str(tmp_path / "m.zarr")
    convert("mat", str(src), dest)
    ds = open_dataset(dest)
    assert "y" in ds.names and "Y" not in ds.names
    assert ds["y"].shape == (2000, 1)


def test_ratings_moderate_ids_still_infer_shape(tmp_path):
    src = tmp_path / "u.data"
    src.write_text("1\t1\t5\t0\n2\t3\t4\t0\n50\t7\t3\t0\n")
    convert("movielens", str(src), str(tmp_path / "r.zarr"))
    assert open_dataset(str(tmp_path / "r.zarr"))["obs"].shape == (50, 7)
    # the documented escape hatch: an explicit shape allows large ids
    src.write_text("1\t1\t5\t0\n1100000\t2\t3\t0\n")
    convert("movielens", str(src), str(tmp_path / "r2.zarr"), shape=(1100000, 2))


def _leftovers(tmp_path, keep):
    return sorted(n for n in os.listdir(tmp_path) if n not in keep)


def test_exception_inside_close_leaves_no_temp(tmp_path, monkeypatch):
    import ooc_lowrank.storage as storage

    def boom(tmp, dest):
        raise OSError("disk full")

    monkeypatch.setattr(storage, "_commit", boom)
    with pytest.raises(OSError, match="disk full"):
        with DatasetWriter(str(tmp_path / "c.zarr"), block_rows=2) as w:
            w.add_dense("X", 2)
            w.append(X=np.ones((5, 2)))
    assert _leftovers(tmp_path, ()) == []


_KILLED_WRITER = """
import os, signal, sys, time, numpy as np
from ooc_lowrank.storage import DatasetWriter
w = DatasetWriter({url!r}, overwrite=True, block_rows=4)
w.add_dense("X", 2)
for i in range(10):
    w.append(X=np.zeros((4, 2)))
print("ready", flush=True)
{tail}
"""


def _run_and_kill(template, sig, **fmt):
    """Run ``template`` in a child until it prints "ready"; then SIGTERM it (it sleeps) or let
    it SIGKILL itself; check that it died of that signal."""
    tail = "time.sleep(60)" if sig == signal.SIGTERM else "os.kill(os.getpid(), signal.SIGKILL)"
    code = textwrap.dedent(template.format(tail=tail, **fmt))
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert p.stdout.readline().strip() == b"ready"
    if sig == signal.SIGTERM:
        p.send_signal(signal.SIGTERM)
    p.wait(timeout=60)
    assert p.returncode == -sig


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_killed_writer_temp_is_removed(tmp_path, sig):
    url = str(tmp_path / "k.zarr")
    write_arrays(url, {"X": np.full((8, 2), 7.0)})
    _run_and_kill(_KILLED_WRITER, sig, url=url)
    left = _leftovers(tmp_path, {"k.zarr"})
    if sig == signal.SIGTERM:
        assert left == []  # cleaned up by the handler, then died of SIGTERM as before
    else:
        assert left and all(n.startswith(".k.zarr.tmp-") for n in left)
        # the next write to the same destination removes the dead process's folder
        write_arrays(url, {"X": np.ones((3, 2))}, overwrite=True)
        assert _leftovers(tmp_path, {"k.zarr"}) == []
    assert open_dataset(url)["X"].read()[0, 0] in (7.0, 1.0)


def test_live_writers_temp_is_kept(tmp_path):
    """Another live process's temporary folder is never touched."""
    url = str(tmp_path / "live.zarr")
    code = textwrap.dedent(_KILLED_WRITER.format(url=url, tail="time.sleep(60)"))
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    try:
        assert p.stdout.readline().strip() == b"ready"
        before = _leftovers(tmp_path, ())
        write_arrays(str(tmp_path / "live.zarr"), {"X": np.ones((3, 2))})
        assert set(before) <= set(_leftovers(tmp_path, ()))
    finally:
        p.kill()
        p.wait()
    time.sleep(0)


_KILLED_CONVERT = """
import os, signal, sys, time
from ooc_lowrank.io import convert

def progress(done):
    print("ready", flush=True)
    {tail}

convert("movielens", {src!r}, {dest!r}, tmpdir={spill!r}, block_rows=1, progress=progress)
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_killed_convert_leaves_no_temp(tmp_path, sig):
    """A convert killed mid-way: store temp and sort spill folders never outlive the next run."""
    src, spill, out = tmp_path / "u.data", tmp_path / "spill", tmp_path / "out"
    spill.mkdir()
    out.mkdir()
    src.write_text("".join(f"{u}\t{i}\t3\t0\n" for u in range(1, 30) for i in (1, 2)))
    dest = str(out / "r.zarr")
    _run_and_kill(_KILLED_CONVERT, sig, src=str(src), dest=dest, spill=str(spill))
    if sig == signal.SIGTERM:
        assert os.listdir(spill) == [] and os.listdir(out) == []
    else:
        assert os.listdir(spill) and os.listdir(out)  # SIGKILL: nothing could run
    convert("movielens", str(src), dest, tmpdir=str(spill))  # the next run cleans up
    assert os.listdir(spill) == [] and os.listdir(out) == ["r.zarr"]
    assert open_dataset(dest)["obs"].nnz == 58


def test_stale_old_store_is_kept_when_it_is_the_only_copy(tmp_path):
    """Killed between _commit's two renames: the .old folder is the previous store; keep it."""
    from ooc_lowrank.storage import _host_tag

    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True
    )
    pid = int(dead.stdout)
    old = tmp_path / f".k.zarr.old-{pid}-{_host_tag()}-abcd1234"
    tmp = tmp_path / f".k.zarr.tmp-{pid}-{_host_tag()}-abcd1234"
    write_arrays(str(old), {"X": np.ones((2, 2))})
    tmp.mkdir()
    write_arrays(str(tmp_path / "k.zarr"), {"X": np.zeros((2, 2))})
    assert _leftovers(tmp_path, {"k.zarr"}) == [old.name]  # dead tmp removed, old kept
    write_arrays(str(tmp_path / "k.zarr"), {"X": np.zeros((2, 2))}, overwrite=True)
    assert _leftovers(tmp_path, {"k.zarr"}) == []  # the store exists again: old is stale


def test_arff_named_classes_fit_and_predict_names(tmp_path, rng):
    """A single nominal class attribute ({sky,grass,path}) becomes "y" plus class_names; GIMC
    predicts the names, and store and in-memory evaluation agree."""
    X, y = _multiclass(rng, n=120, d=3, C=3)
    names = np.array(["sky", "grass", "path"])[y]
    body = "".join(f"{a:.5f},{b:.5f},{c:.5f},{k}\n" for (a, b, c), k in zip(X, names, strict=True))
    src = tmp_path / "c.arff"
    src.write_text(
        "@relation r\n@attribute a numeric\n@attribute b numeric\n@attribute c numeric\n"
        "@attribute class {sky,grass,path}\n@data\n" + body
    )
    dest = str(tmp_path / "c.zarr")
    convert("arff", str(src), dest, n_labels=1)
    ds = open_dataset(dest)
    assert ds.attrs["class_names"] == ["grass", "path", "sky"] and ds["y"].shape == (120, 1)
    est = GIMC(n_features_map=10, max_iter=2, random_state=0).fit(dest, eval_set=dest)
    assert est.classes_.tolist() == ["grass", "path", "sky"]
    assert set(est.predict(ds["X"].read())) <= {"grass", "path", "sky"}
    mem = est.evaluate(ds["X"].read(), ["accuracy"], Y=names)
    assert est.evaluate(ds, ["accuracy"]) == pytest.approx(mem) and mem["accuracy"] > 0.5
    assert est.eval_history_[est.n_iter_] == pytest.approx(mem)


def test_write_into_a_folder_that_does_not_exist_yet(tmp_path):
    # the stale-temp sweep must not list a parent folder that the writer is about to create
    from ooc_lowrank.storage import write_arrays

    dest = tmp_path / "new" / "deeper" / "d.zarr"
    ds = write_arrays(str(dest), {"X": np.ones((4, 2))})
    assert ds.n_rows == 4


def _writer(dest, value):
    w = DatasetWriter(dest, overwrite=True)
    w.add_dense("X", n_cols=2, dtype="float64")
    w.append(X=np.full((5, 2), float(value)))
    return w


def test_two_writers_committing_to_one_path_at_once_both_succeed(tmp_path, monkeypatch):
    """Issue 23 item 7: two ``generate --overwrite`` to one path at once.  Writer B commits
    while writer A has moved the old store aside and not yet put its own in place: A used to
    fail ("Directory not empty") and leave the old store beside; now the last writer wins."""
    dest = str(tmp_path / "r.zarr")
    write_arrays(dest, {"X": np.zeros((5, 2))})
    a, b = _writer(dest, 1), _writer(dest, 2)
    real, state = os.rename, {"b": False}

    def rename(src, dst):
        real(src, dst)
        if not state["b"] and str(src) == dest and ".old-" in str(dst):
            state["b"] = True  # A just moved the old store aside: B commits now
            b.close()

    monkeypatch.setattr(os, "rename", rename)
    a.close()
    monkeypatch.undo()
    assert state["b"]
    np.testing.assert_array_equal(open_dataset(dest)["X"].read(), np.ones((5, 2)))
    assert os.listdir(tmp_path) == ["r.zarr"]  # no .tmp / .old left


def test_a_writer_whose_store_vanishes_under_its_commit_retries(tmp_path, monkeypatch):
    """The other interleaving: A finds the old store, B moves it aside before A's rename."""
    dest = str(tmp_path / "r.zarr")
    write_arrays(dest, {"X": np.zeros((5, 2))})
    a, b = _writer(dest, 1), _writer(dest, 2)
    real, state = os.rename, {"b": False}

    def rename(src, dst):
        if not state["b"] and str(src) == dest and ".old-" in str(dst):
            state["b"] = True
            real(src, dst + "-b")  # B moves the store aside first (mid-commit) ...
            b.close()  # ... and puts its own in place
            shutil.rmtree(dst + "-b")
            raise FileNotFoundError(2, "No such file or directory", src)  # A's view
        return real(src, dst)

    monkeypatch.setattr(os, "rename", rename)
    a.close()
    monkeypatch.undo()
    np.testing.assert_array_equal(open_dataset(dest)["X"].read(), np.ones((5, 2)))
    assert os.listdir(tmp_path) == ["r.zarr"]


def test_open_right_after_a_write_retries_a_concurrent_replacement(tmp_path, monkeypatch):
    """After its write, the CLI (and a generator) opens the store again; another writer's
    replacement at that moment made that open report a corrupt store.  It is retried."""
    from ooc_lowrank import storage

    dest = str(tmp_path / "r.zarr")
    write_arrays(dest, {"X": np.zeros((5, 2))})
    real, calls = storage.open_dataset, []

    def flaky(url, **kw):
        calls.append(url)
        if len(calls) == 1:
            raise StoreError(url, "X", "chunk 'X/c/0/0' has 7 bytes, the manifest records 80",
                             None, "The store is corrupt; write it again")  # fmt: skip
        return real(url, **kw)

    monkeypatch.setattr(storage, "open_dataset", flaky)
    assert storage.open_written(dest).n_rows == 5 and len(calls) == 2
    monkeypatch.setattr(storage, "open_dataset", lambda url, **kw: (_ for _ in ()).throw(
        StoreError(url, None, "no store at this location")))  # fmt: skip
    with pytest.raises(StoreError, match="another process replaced or removed it"):
        storage.open_written(dest)


# ---------------------------------------------------------------- issue 23 item 10: free disk


def test_generate_refuses_a_store_larger_than_the_free_disk_before_writing(tmp_path):
    """``generate multilabel --rows 10**15`` started writing (2.7 GB a minute, on its way to
    filling the disk).  The size is extrapolated from the first rows and refused first."""
    from ooc_lowrank.generators import generate_multilabel
    from ooc_lowrank.storage import DiskSpaceError

    dest = tmp_path / "big.zarr"
    with pytest.raises(DiskSpaceError, match=r"the whole store of 1000000000000000 rows needs "
                       r"about .* PiB, more than the .* free on the filesystem of .*refused before "
                       r"writing it.*fewer rows"):  # fmt: skip
        generate_multilabel(str(dest), n_rows=10**15, n_features=4, n_labels=3, block_rows=500)
    assert os.listdir(tmp_path) == []


def test_converter_and_writer_check_the_free_disk_before_each_block(tmp_path, monkeypatch):
    """Converters share the writer's check (``storage.check_free_space``): a block that does not
    fit the free space is refused before it is written, and nothing is left behind."""
    import collections
    import shutil as _shutil

    from ooc_lowrank.storage import DiskSpaceError, check_free_space

    src = tmp_path / "a.svm"
    src.write_text("".join(f"1 1:{i}.5 3:1.0\n" for i in range(50)))
    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(_shutil, "disk_usage", lambda p: usage(10**6, 10**6 - 100, 100))
    with pytest.raises(DiskSpaceError, match=r"more than the 100 bytes free"):
        convert("svmlight", [str(src)], str(tmp_path / "a.zarr"))
    with pytest.raises(DiskSpaceError, match=r"store '.*x.zarr': the next 50 rows needs about"):
        write_arrays(str(tmp_path / "x.zarr"), {"X": np.ones((50, 4))})
    assert sorted(os.listdir(tmp_path)) == ["a.svm"]
    check_free_space("memory://x.zarr", 10**30)  # object stores report no free space: no check
    check_free_space(str(tmp_path / "new" / "deeper" / "s.zarr"), 99)  # nearest folder's disk
    with pytest.raises(DiskSpaceError):
        check_free_space(str(tmp_path / "new" / "deeper" / "s.zarr"), 101)
