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
        lambda: KernelMaxide(random_state=seed, n_features_map=5).fit(X, Yo),
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
    with pytest.raises(exc, match="alphas"):
        select_lam(GIMCClustering(), X, cons, alphas=lams)


# ---------------------------------------------------------------------------------------------
# issue 23 items 3 and 8: what reaches an estimator's boundary (ooc_lowrank/_inputs.py).  Each
# line is one probe's reproducer: refused with a named error before any work, or accepted with
# the meaning it obviously has (the same model as the plain NumPy / SciPy input).
# ---------------------------------------------------------------------------------------------


def _boundary_data():
    rng = np.random.default_rng(0)
    X = rng.random((40, 5))
    Y = (rng.random((40, 3)) < 0.4).astype(np.float64)
    Y[0] = 1.0
    Yo = sp.csr_matrix(np.where(Y > 0, 1.0, np.where(rng.random((40, 3)) < 0.5, -1.0, 0.0)))
    return X, Y, Yo


_X, _Y, _YO = _boundary_data()
_Y2 = _Y.copy()
_Y2[1, 1] = 2.0


def _gimc():
    from ooc_lowrank import GIMC

    return GIMC(n_features_map=8, max_iter=2, random_state=0)


def _km():
    from ooc_lowrank import KernelMaxide

    return KernelMaxide(n_features_map=10, max_iter=3, random_state=0)


def _df(X, **extra):
    pd = pytest.importorskip("pandas")
    df = pd.DataFrame(X, columns=[f"f{j}" for j in range(X.shape[1])])
    for k, v in extra.items():
        df[k] = v
    return df


def _dask_df(X):
    dd = pytest.importorskip("dask.dataframe")
    return dd.from_pandas(X if hasattr(X, "columns") else _df(X), npartitions=2)


def _pydata(A):
    sparse = pytest.importorskip("sparse")
    return sparse.COO.from_scipy_sparse(A) if sp.issparse(A) else sparse.COO.from_numpy(A)


def _ddY(Y):
    return da.from_array(Y, chunks=(20, -1))


def _clusters(X):
    from ooc_lowrank.imc.clustering import GIMCClustering

    cons = (np.array([0, 1, 2]), np.array([3, 4, 5]), np.array([1.0, 0.0, 1.0]))
    return GIMCClustering(n_clusters=2, random_state=0).fit(X, constraints=cons)


# (id, action, exception, message fragment)
REFUSED_INPUTS = [
    ("gimc-dask-Y-holding-2", lambda: _gimc().fit(_ddY(_X), _ddY(_Y2)), ValueError, "0/1 labels"),
    ("gimc-dask-Y-pm1", lambda: _gimc().fit(_ddY(_X), _ddY(2 * _Y - 1)), ValueError, "0/1 lab"),
    ("gimc-all-zero-Y", lambda: _gimc().fit(_X, 0 * _Y), ValueError, "no positive label"),
    ("gimc-all-zero-dask-Y", lambda: _gimc().fit(_X, _ddY(0 * _Y)), ValueError, "no positive"),
    ("gimc-df-str", lambda: _gimc().fit(_df(_X, s=["a"] * 40), _Y), TypeError, "'s' \\(str"),
    (
        "gimc-df-category",
        lambda: _gimc().fit(_df(_X, c=__import__("pandas").Categorical(["a", "b"] * 20)), _Y),
        TypeError,
        "numeric columns.*'c' \\(category\\).*OneHotEncoder",
    ),
    ("km-df-str", lambda: _km().fit(_df(_X, s=["a"] * 40), _YO), TypeError, "numeric columns"),
    (
        "maxide-dask-df-str",
        lambda: __import__("ooc_lowrank").Maxide().fit(_dask_df(_df(_X, s=["a"] * 40)), _YO),
        TypeError,
        "numeric columns.*'s' \\(str",
    ),
    (
        "gimc-dask-continuous-y",
        lambda: _gimc().fit(_ddY(_X), da.from_array(_X[:, 0], chunks=20)),
        ValueError,
        "Unknown label type",
    ),
    ("gimc-1d-X", lambda: _gimc().fit(_X[:, 0], _Y), ValueError, "X: must be 2-D.*reshape"),
    ("km-1d-X", lambda: _km().fit(_X[:, 0], _YO), ValueError, "X: must be 2-D.*reshape"),
    ("clustering-1d-X", lambda: _clusters(_X[:, 0]), ValueError, "X: must be 2-D.*reshape"),
    (
        "gimc-ragged-labels",
        lambda: _gimc().fit(_X, [[0, 1]] + [[2]] * 39),
        ValueError,
        "ragged.*MultiLabelBinarizer",
    ),
    (
        "gimc-label-lists",
        lambda: _gimc().fit(_X, [["a", "b"]] * 40),
        TypeError,
        "0/1 label matrix.*MultiLabelBinarizer",
    ),
]


@pytest.mark.parametrize("case", REFUSED_INPUTS, ids=[c[0] for c in REFUSED_INPUTS])
def test_boundary_refuses_with_a_named_error(case):
    _, action, exc, frag = case
    with pytest.raises(exc, match=frag):
        action()


def _same(a, b):
    # float32 fits over differently blocked inputs (dask chunks of 20 rows vs one block) agree
    # to rounding only: the block partials are summed in another order (measured 2e-6..5e-5
    # absolute across block_rows on small GIMC fits); a wrong conversion differs far more
    np.testing.assert_allclose(a.coef_, b.coef_, rtol=1e-4, atol=1e-6)


# (id, fit with the odd input, fit with the plain input it means); the models must agree
ACCEPTED_INPUTS = [
    ("gimc-pydata-X", lambda: _gimc().fit(_pydata(_X), _Y), lambda: _gimc().fit(_X, _Y)),
    ("gimc-pydata-Y", lambda: _gimc().fit(_X, _pydata(_Y)), lambda: _gimc().fit(_X, _Y)),
    ("gimc-dask-df", lambda: _gimc().fit(_dask_df(_X), _Y), lambda: _gimc().fit(_X, _Y)),
    (
        "gimc-dask-int-X",
        lambda: _gimc().fit(_ddY((_X * 9).astype(np.int64)), _Y),
        lambda: _gimc().fit((_X * 9).astype(np.int64), _Y),
    ),
    (
        "gimc-dask-float16-X",
        lambda: _gimc().fit(_ddY(_X.astype(np.float16)), _Y),
        lambda: _gimc().fit(_X.astype(np.float16).astype(np.float32), _Y),
    ),
    ("km-dask-df", lambda: _km().fit(_dask_df(_X), _YO), lambda: _km().fit(_X, _YO)),
    (
        "gimc-pydata-dok-float16",
        lambda: _gimc().fit(__import__("sparse").DOK.from_numpy(_X.astype(np.float16)), _Y),
        lambda: _gimc().fit(sp.csr_matrix(_X.astype(np.float16).astype(np.float32)), _Y),
    ),
    (
        "gimc-dask-of-pydata",
        lambda: _gimc().fit(da.from_array(_pydata(_X), chunks=(20, 5), asarray=False), _Y),
        lambda: _gimc().fit(sp.csr_matrix(_X), _Y),
    ),
    ("km-pydata-X-Y", lambda: _km().fit(_pydata(_X), _pydata(_YO)), lambda: _km().fit(_X, _YO)),
    (
        "maxide-dask-df",
        lambda: __import__("ooc_lowrank").Maxide(max_iter=3).fit(_dask_df(_X), _YO),
        lambda: __import__("ooc_lowrank").Maxide(max_iter=3).fit(_X, _YO),
    ),
]


@pytest.mark.parametrize("case", ACCEPTED_INPUTS, ids=[c[0] for c in ACCEPTED_INPUTS])
def test_boundary_converts_what_has_an_obvious_meaning(case):
    _, odd, plain = case
    _same(odd(), plain())


def test_np_matrix_inputs_are_arrays():
    with pytest.warns(PendingDeprecationWarning):
        M, YM = np.matrix(_X), np.matrix(_Y)
    g = _gimc().fit(M, YM)
    _same(g, _gimc().fit(_X, _Y))
    np.testing.assert_allclose(g.decision_function(M), g.decision_function(_X))


@pytest.mark.parametrize("lazy", [False, True])
def test_predicting_zero_rows_gives_an_empty_result(lazy):
    """scikit-learn returns empty predictions for 0 rows; a Dask chunks error or "0 samples"
    used to come out instead."""
    X0 = _ddY(_X[:0]) if lazy else _X[:0]
    g = _gimc().fit(_X, _Y)
    out = [g.decision_function(X0), g.predict(X0), *g.predict_topk(X0, 2)]
    km = _km().fit(_X, _YO)
    out += [km.decision_function(X0), km.predict_topk(X0, 2)]
    shapes = [tuple(getattr(o, "compute", lambda o=o: o)().shape) for o in out]
    assert shapes == [(0, 3), (0, 3), (0, 2), (0, 2), (0, 3), (0, 2)]


def test_imc_float16_row_features_are_upcast():
    """float16 row features ran float16 arithmetic and overflowed (RMSE 1.92 against 0.36 for
    the same values in float64); they are float32 now (pytest turns the overflow warning of
    the old code into an error)."""
    from ooc_lowrank import InductiveMatrixCompletion

    rng = np.random.default_rng(1)
    R = sp.random(30, 20, density=0.3, random_state=0, format="csr")
    Xr, Xc = (rng.random((30, 4)) * 100).astype(np.float16), rng.random((20, 3))
    kw = dict(n_components=3, random_state=0, max_iter=5)
    with np.errstate(all="raise"):
        a = InductiveMatrixCompletion(**kw).fit(R, X_row=Xr, X_col=Xc)
    b = InductiveMatrixCompletion(**kw).fit(R, X_row=Xr.astype(np.float32), X_col=Xc)
    np.testing.assert_allclose(a.objective_, b.objective_, rtol=1e-6)


def test_observations_as_pydata_sparse_or_float16_values():
    """Observations as a pydata sparse array (was: "must be an observation store ... got COO")
    or with float16 values (was: scipy's "does not support dtype float16")."""
    from ooc_lowrank import GreedyLowRank

    R = sp.random(30, 20, density=0.3, random_state=0, format="csr", dtype=np.float32)
    c = R.tocoo()
    v16 = c.data.astype(np.float16)
    pairs = (c.row, c.col)
    ref = GreedyLowRank(n_components=2).fit(R).predict(*pairs)
    np.testing.assert_allclose(GreedyLowRank(n_components=2).fit(_pydata(R)).predict(*pairs), ref)
    f16 = GreedyLowRank(n_components=2).fit((*pairs, v16), shape=R.shape).predict(*pairs)
    f32 = GreedyLowRank(n_components=2).fit((*pairs, v16.astype(np.float32)), shape=R.shape)
    np.testing.assert_allclose(f16, f32.predict(*pairs), rtol=1e-6)


def test_dask_dataframe_in_gives_dask_out():
    """A Dask DataFrame is a lazy input: converted to a Dask array (known chunks), never
    computed whole by the estimator (it used to go through NumPy)."""
    g = _gimc().fit(_X, _Y)
    out = g.decision_function(_dask_df(_X))
    assert isinstance(out, da.Array)
    np.testing.assert_allclose(out.compute(), g.decision_function(_X))


def test_dask_label_checks_cost_no_compute(counting_scheduler):
    """The 0/1 check of Dask labels runs inside the passes' block reads and the all-zero check
    uses ||Y||^2 of the first pass: a fit with Dask labels makes exactly the computes of a fit
    with the same labels in memory."""
    Xd = _ddY(_X)
    _gimc().fit(Xd, _Y)
    in_memory = counting_scheduler.count
    g = _gimc().fit(Xd, _ddY(_Y))
    assert counting_scheduler.count == 2 * in_memory and g.n_passes_ > 0
    with pytest.raises(ValueError, match="0/1 labels"):
        _gimc().fit(Xd, _ddY(_Y2))
    assert counting_scheduler.count == 2 * in_memory + 2  # the row sample, then the first pass


@pytest.mark.parametrize("where", [2, 3, 4])
def test_indptr_checked_in_pieces(tmp_path, monkeypatch, where):
    """Opening a store checks indptr a piece at a time (a store of 10^8 rows must not load
    its whole indptr): a decrease inside a piece or across two pieces is found and named at
    its global position."""
    from ooc_lowrank import storage

    monkeypatch.setattr(storage, "_INDPTR_CHECK_PIECE", 3)
    path = _good_store(str(tmp_path / "s.zarr"))
    ip = zarr.open_group(path, mode="r")["Y/indptr"][:]
    _corrupt_array(path, "Y/indptr", np.array([ip[where - 1] - 1]), slice(where, where + 1))
    with pytest.raises(StoreError, match=rf"non-decreasing.*indptr\[{where - 1}\]"):
        open_dataset(path)
