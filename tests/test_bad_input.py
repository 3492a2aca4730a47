"""Bad input table: each malformed input gives its intended, clear error and no store changes.

Converter-specific malformed files live in ``tests/malformed_inputs.py`` (test_converters).
"""

from __future__ import annotations

import json
import os

import dask.array as da
import numpy as np
import pytest
import scipy.sparse as sp
import zarr

from ooc_lowrank import engine
from ooc_lowrank.cli import main as cli_main
from ooc_lowrank.storage import DatasetWriter, StoreError, open_dataset, write_arrays


def _snapshot(root):
    out = {}
    for d, _, files in os.walk(root):
        for f in files:
            p = os.path.join(d, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, root)] = fh.read()
    return out


def _good_store(path):
    X = np.arange(40, dtype=np.float32).reshape(10, 4)
    Y = sp.csr_matrix(np.eye(10, 3, dtype=np.float32))
    write_arrays(path, {"X": X, "Y": Y}, block_rows=4)
    return path


def _edit_meta(path, fn):
    g = zarr.open_group(path, mode="r+")
    meta = dict(g.attrs["ooc_lowrank"])
    fn(meta)
    g.attrs["ooc_lowrank"] = meta


def _corrupt_array(path, name, values, sl=slice(None)):
    g = zarr.open_group(path, mode="r+")
    a = g[name]
    a[sl] = values


def open_and_read_all(path):
    ds = open_dataset(path)
    for n in ds.names:
        for _ in ds[n].iter_blocks():
            pass


# (id, corrupt(path) -> None, action(path), exception, message fragment)
STORE_CASES = [
    (
        "missing-store",
        lambda p: None,
        lambda p: open_dataset(p + ".nope"),
        StoreError,
        "no store at this location",
    ),
    (
        "wrong-format-version",
        lambda p: _edit_meta(p, lambda m: m.update(format_version=99)),
        open_dataset,
        StoreError,
        "format_version must be 1",
    ),
    (
        "wrong-format-name",
        lambda p: _edit_meta(p, lambda m: m.update(format="other")),
        open_dataset,
        StoreError,
        "format must be",
    ),
    (
        "missing-metadata",
        lambda p: zarr.open_group(p, mode="r+").attrs.__delitem__("ooc_lowrank"),
        open_dataset,
        StoreError,
        "missing ooc_lowrank metadata",
    ),
    (
        "indptr-not-monotone",
        lambda p: _corrupt_array(p, "Y/indptr", np.array([5]), slice(2, 3)),
        open_dataset,
        StoreError,
        "non-decreasing",
    ),
    (
        "index-out-of-range",
        lambda p: _corrupt_array(p, "Y/indices", np.array([99]), slice(0, 1)),
        open_and_read_all,
        StoreError,
        "out of range",
    ),
    (
        "negative-index",
        lambda p: _corrupt_array(p, "Y/indices", np.array([-3]), slice(1, 2)),
        open_and_read_all,
        StoreError,
        "out of range",
    ),
    (
        "nan-in-stored-dense",
        lambda p: _corrupt_array(p, "X", np.nan, (slice(5, 6), slice(0, 1))),
        open_and_read_all,
        StoreError,
        "finite",
    ),
    (
        "row-count-mismatch",
        lambda p: _edit_meta(p, lambda m: m["arrays"]["Y"].update(shape=[11, 3])),
        open_dataset,
        StoreError,
        "row count must equal",
    ),
    (
        "dense-shape-mismatch",
        lambda p: zarr.open_group(p, mode="r+")["X"].resize((9, 4)),
        open_dataset,
        StoreError,
        "stored shape differs",
    ),
    (
        "nnz-length-mismatch",
        lambda p: _edit_meta(p, lambda m: m["arrays"]["Y"].update(nnz=7)),
        open_dataset,
        StoreError,
        "length must equal nnz=7",
    ),
    (
        "bad-row-blocks",
        lambda p: _edit_meta(p, lambda m: m.update(row_blocks=[0, 3, 10])),
        open_dataset,
        StoreError,
        "row_blocks must be",
    ),
    (
        "unknown-kind",
        lambda p: _edit_meta(p, lambda m: m["arrays"]["Y"].update(kind="bsr")),
        open_dataset,
        StoreError,
        "kind must be one of",
    ),
    (
        "deleted-chunk-array",
        lambda p: __import__("shutil").rmtree(os.path.join(p, "Y", "indices")),
        open_dataset,
        StoreError,
        "missing or unreadable",
    ),
    (
        "not-a-zarr-store",
        lambda p: open(p + ".txt", "w").write("hello"),
        lambda p: open_dataset(p + ".txt"),
        StoreError,
        "not a readable Zarr",
    ),
]


@pytest.mark.parametrize("case", STORE_CASES, ids=[c[0] for c in STORE_CASES])
def test_corrupt_or_missing_store(tmp_path, case):
    _, corrupt, action, exc, frag = case
    path = _good_store(str(tmp_path / "s.zarr"))
    corrupt(path)
    before = _snapshot(tmp_path)
    with pytest.raises(exc, match=frag) as info:
        action(path)
    assert "store '" in str(info.value)  # names the store
    assert _snapshot(tmp_path) == before  # reading never modifies anything


def _write(path, **blocks):
    with DatasetWriter(path, overwrite=True, block_rows=4) as w:
        w.add_dense("X", 4)
        w.add_csr("Y", 3)
        w.append(**blocks)


GOOD_Y = sp.csr_matrix((2, 3), dtype=np.float32)
WRITE_CASES = [
    (
        "nan-in-dense-block",
        dict(X=np.array([[np.nan, 0, 0, 0], [0, 0, 0, 0]]), Y=GOOD_Y),
        ValueError,
        "finite",
    ),
    (
        "inf-in-csr-block",
        dict(X=np.zeros((2, 4)), Y=sp.csr_matrix(np.array([[np.inf, 0, 0], [0, 0, 0]]))),
        ValueError,
        "finite",
    ),
    ("wrong-column-count", dict(X=np.zeros((2, 5)), Y=GOOD_Y), ValueError, r"shape \(rows, 4\)"),
    ("rows-disagree", dict(X=np.zeros((3, 4)), Y=GOOD_Y), ValueError, "same number of rows"),
    ("non-numeric-dtype", dict(X=np.array([["a"] * 4, ["b"] * 4]), Y=GOOD_Y), TypeError, "numeric"),
    ("dense-for-csr", dict(X=np.zeros((2, 4)), Y=np.zeros((2, 3))), TypeError, "scipy.sparse"),
]


@pytest.mark.parametrize("case", WRITE_CASES, ids=[c[0] for c in WRITE_CASES])
def test_bad_blocks_never_touch_existing_store(tmp_path, case):
    _, blocks, exc, frag = case
    path = _good_store(str(tmp_path / "s.zarr"))
    before = _snapshot(tmp_path)
    with pytest.raises(exc, match=frag):
        _write(path, **blocks)
    assert _snapshot(tmp_path) == before


ENGINE_CASES = [
    (
        "column-chunked-dask",
        lambda: engine.as_blocked(da.ones((8, 4), chunks=(4, 2))),
        ValueError,
        "chunked along rows only",
    ),
    ("one-dimensional", lambda: engine.as_blocked(np.ones(8)), ValueError, "must be 2-D"),
    ("nan-in-memory", lambda: engine.as_blocked(np.array([[1.0, np.nan]])), ValueError, "finite"),
    (
        "rows-mismatch",
        lambda: engine.reduce_blocks(lambda a, b: a.sum(), np.ones((4, 2)), np.ones((5, 2))),
        ValueError,
        "as many rows",
    ),
    ("unsupported-type", lambda: engine.as_blocked({"a": 1}), TypeError, "must be a NumPy array"),
]


@pytest.mark.parametrize("case", ENGINE_CASES, ids=[c[0] for c in ENGINE_CASES])
def test_engine_rejects_bad_input(case):
    _, action, exc, frag = case
    with pytest.raises(exc, match=frag):
        action()


CLI_CASES = [
    ("info-missing-store", ["info", "{tmp}/absent.zarr"], "no store at this location"),
    ("info-corrupt", ["info", "{tmp}/corrupt.zarr"], "format_version must be 1"),
    (
        "generate-zero-rows",
        ["generate", "multilabel", "{tmp}/g.zarr", "--rows", "0"],
        "--rows must be >= 1",
    ),
    ("fit-unknown-method", ["fit", "svm", "{tmp}/s.zarr", "{tmp}/m"], "unknown method 'svm'"),
    ("evaluate-missing-model", ["evaluate", "{tmp}/nomodel", "{tmp}/s.zarr"], "no model at"),
]


@pytest.mark.parametrize("case", CLI_CASES, ids=[c[0] for c in CLI_CASES])
def test_cli_one_line_errors(tmp_path, capsys, case):
    _, argv, frag = case
    _good_store(str(tmp_path / "s.zarr"))
    _good_store(str(tmp_path / "corrupt.zarr"))
    _edit_meta(str(tmp_path / "corrupt.zarr"), lambda m: m.update(format_version=0))
    before = _snapshot(tmp_path)
    code = cli_main([a.format(tmp=tmp_path) for a in argv])
    err = capsys.readouterr().err
    assert code == 2
    assert frag in err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert _snapshot(tmp_path) == before


def test_cli_info_json(tmp_path, capsys):
    _good_store(str(tmp_path / "s.zarr"))
    assert cli_main(["info", str(tmp_path / "s.zarr"), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["n_rows"] == 10 and info["arrays"]["Y"]["nnz"] == 3
    assert info["arrays"]["X"]["shape"] == [10, 4] and info["n_blocks"] == 3


@pytest.mark.parametrize("seed", [-1, 2**40, 2.5, "a", True])
def test_random_state_errors_name_the_argument(seed):
    """Every estimator's ``random_state`` goes through one check whose message names it
    (numpy's own says only "Seed must be between 0 and 2**32 - 1")."""
    from ooc_lowrank import GIMC
    from ooc_lowrank.imc.clustering import GIMCClustering
    from ooc_lowrank.kernelmaxide import KernelMaxide
    from ooc_lowrank.mvm import MultiViewMachineRegressor

    X = np.random.default_rng(0).random((20, 3))
    Y = np.zeros((20, 2))
    Y[:, 0] = 1
    Yo = sp.csr_matrix(np.where(np.arange(40).reshape(20, 2) % 3 == 0, 1.0, -1.0))
    fits = [
        lambda: GIMC(random_state=seed, max_iter=1).fit(X, Y),
        lambda: KernelMaxide(random_state=seed, n_landmarks=5).fit(X, Yo),
        lambda: MultiViewMachineRegressor(random_state=seed).fit([X, X], X[:, 0]),
        lambda: GIMCClustering(n_clusters=2, random_state=seed).fit(
            X, constraints=(np.array([0, 1]), np.array([1, 2]), np.array([1.0, 0.0]))
        ),
    ]
    for fit in fits:
        with pytest.raises((TypeError, ValueError), match="random_state"):
            fit()


def test_random_state_accepts_a_generator():
    from ooc_lowrank._validation import check_random_state

    a = check_random_state(np.random.default_rng(3)).randint(1000, size=5)
    b = check_random_state(np.random.default_rng(3)).randint(1000, size=5)
    assert np.array_equal(a, b)
    assert check_random_state(7).randint(10**6) == np.random.RandomState(7).randint(10**6)


def test_clustering_refuses_before_any_work(monkeypatch):
    """n_clusters > rows, X without columns, a feature map larger than memory and more pairs
    than exist are refused before the IMC fit starts (they used to fail inside k-means after
    the whole fit, fit a constant model, or die in an allocation)."""
    from ooc_lowrank.imc.clustering import GIMCClustering, sample_constraints
    from ooc_lowrank.imc.estimator import InductiveMatrixCompletion

    def no_fit(*a, **k):
        raise AssertionError("the fit started")

    monkeypatch.setattr(InductiveMatrixCompletion, "_fit_prepared", no_fit)
    X = np.random.default_rng(0).random((60, 5))
    cons = sample_constraints(np.repeat([0, 1, 2], 20), 300, random_state=0)
    cases = [
        ({"n_clusters": 61}, X, "n_clusters must be <= the number of rows of X"),
        ({}, X[:, :0], "at least one feature column"),
        ({"n_features_map": 10**12}, X, "n_features_map needs"),
    ]
    for params, XX, msg in cases:
        with pytest.raises(ValueError, match=msg):
            GIMCClustering(**params).fit(XX, constraints=cons)
    with pytest.raises(ValueError, match="n_pairs must be <= 1770"):
        sample_constraints(np.repeat([0, 1, 2], 20), 10**12)


@pytest.mark.parametrize(
    "lams, exc", [((), ValueError), ((1.0, -1.0), ValueError), (("a",), TypeError)]
)
def test_select_lam_refuses_a_bad_grid(lams, exc):
    from ooc_lowrank.imc.clustering import GIMCClustering, sample_constraints, select_lam

    X = np.random.default_rng(0).random((30, 3))
    cons = sample_constraints(np.repeat([0, 1], 15), 100, random_state=0)
    with pytest.raises(exc, match="lams"):
        select_lam(GIMCClustering(), X, cons, lams=lams)
