"""Hostile inputs to the multi-view machines: each one gets an error naming the argument (before
any pass over the data), never a raw library error or a silently wrong answer."""

from __future__ import annotations

import json

import dask
import dask.array as da
import numpy as np
import pytest
from sklearn.metrics import accuracy_score, roc_auc_score

import ooc_lowrank
from ooc_lowrank._persist import ModelFileError
from ooc_lowrank._validation import NonFiniteError
from ooc_lowrank.mvm import MultiViewMachineClassifier as MVC
from ooc_lowrank.mvm import MultiViewMachineRegressor as MVR


@pytest.fixture
def data():
    rng = np.random.default_rng(0)
    V = [rng.normal(size=(60, 3)), rng.normal(size=(60, 2))]
    return V, V[0][:, 0] * V[1][:, 0] + 0.5 * V[0][:, 1] + 0.1 * rng.normal(size=60)


def _unreadable(n):
    """A Dask column that fails the test if any pass reads it."""

    def boom():
        raise AssertionError("a pass over the data ran before the parameters were checked")

    return da.from_delayed(dask.delayed(boom)(), shape=(n, 1), dtype=float)


@pytest.mark.parametrize("labels", [(5, 7), ("a", "b")], ids=["ints-5-7", "strings"])
def test_classifier_evaluate_encodes_y_through_classes(data, labels):
    V, score = data
    y = np.where(score > 0, labels[1], labels[0])
    m = MVC(n_components=3, n_epochs=5, random_state=0).fit(V, y)
    assert list(m.classes_) == list(labels)
    got = m.evaluate(V, y=y)
    f = m.decision_function(V)
    assert got["accuracy"] == pytest.approx(accuracy_score(y, m.predict(V)))
    assert got["auc"] == pytest.approx(roc_auc_score(y == labels[1], f))
    assert got["accuracy"] == pytest.approx(m.score(V, y))
    bad = y.copy()
    bad[3] = 9 if isinstance(labels[0], int) else "z"
    with pytest.raises(ValueError, match=r"^y holds labels that are not classes of the model"):
        m.evaluate(V, y=bad)


@pytest.mark.parametrize("solver", ["sgd", "lbfgs"])
def test_nan_in_a_dask_view_is_named(data, solver):
    V, y = data
    A = V[0].copy()
    A[50, 1] = np.nan
    kw = dict(n_epochs=2, max_iter=3, solver=solver, random_state=0)
    with pytest.raises(ValueError, match=r"X\[0\] must hold only finite values; found nan"):
        MVR(**kw).fit([da.from_array(A, chunks=20), V[1]], y)
    B = V[1].copy()
    B[5, 0] = np.inf
    with pytest.raises(ValueError, match=r"X\[1\] must hold only finite values; found inf"):
        MVR(**kw).fit([V[0], da.from_array(B, chunks=20)], y)
    m = MVR(**kw).fit(V, y)
    with pytest.raises(ValueError, match=r"X\[0\] must hold only finite values"):
        m.predict([da.from_array(A, chunks=20), V[1]]).compute()


def _edit(path, f):
    doc = json.loads((path / "model.json").read_text())
    f(doc)
    (path / "model.json").write_text(json.dumps(doc))


@pytest.mark.parametrize(
    "cls, edit, key, match",
    [
        (MVR, lambda d: d["params"].update(n_components=-5), "params", "n_components must be >= 1"),
        (MVR, lambda d: d["params"].update(solver="zzz"), "params", "solver must be one of"),
        (MVR, lambda d: d["extra"].update(view_sizes=[6, -1]), "extra.view_sizes[1]", ">= 1"),
        (MVR, lambda d: d["extra"].update(view_sizes=[2, 2]), "coef", "must have shape (6, 3)"),
        (MVR, lambda d: d["extra"].pop("view_sizes"), "extra.view_sizes", "is missing"),
        (MVR, lambda d: d["params"].update(n_components=4), "coef", "must have shape (7, 4)"),
        (MVC, lambda d: d["extra"].update(classes=[1]), "extra.classes", "at least two"),
        (MVC, lambda d: d["extra"].update(classes=[1, 1]), "extra.classes", "distinct"),
        (MVC, lambda d: d["extra"].update(loss="square"), "extra.loss", "must be one of"),
    ],
    ids=["n_components", "solver", "view_sizes-neg", "view_sizes-shape", "view_sizes-missing",
         "n_components-shape", "classes-one", "classes-same", "loss"],
)
def test_load_validates_an_edited_model(data, tmp_path, cls, edit, key, match):
    V, y = data
    path = tmp_path / "m.model"
    cls(n_components=3, n_epochs=2, random_state=0).fit(V, y > 0 if cls is MVC else y).save(str(path))
    _edit(path, edit)
    for load in (ooc_lowrank.load, cls.load):
        with pytest.raises(ModelFileError) as e:
            load(str(path))
        msg = str(e.value)
        file = "arrays.npz" if key == "coef" else "model.json"
        assert f"model {str(path)!r}: {file}, key {key!r}" in msg, msg
        assert match in msg, msg


def test_load_refuses_a_model_of_another_estimator(data, tmp_path):
    from ooc_lowrank.kernelmaxide import KernelMaxide, mask_labels

    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 4))
    Yo = mask_labels((rng.random((40, 3)) < 0.4).astype(float), 30, random_state=0)
    path = tmp_path / "km.model"
    KernelMaxide(n_features_map=10, max_iter=3, random_state=0).fit(X, Yo).save(str(path))
    with pytest.raises(ValueError, match="not a MultiViewMachineRegressor"):
        MVR.load(str(path))
    _edit(path, lambda d: d.update(estimator="MultiViewMachineRegressor"))
    with pytest.raises(ModelFileError, match=r"km\.model.*(extra\.view_sizes|key 'params')"):
        ooc_lowrank.load(str(path))


def test_degenerate_shapes_are_named(data):
    V, y = data
    kw = dict(n_epochs=2, random_state=0)
    cases = [
        ([V[0][:0], V[1][:0]], y[:0], r"X\[0\] must have at least one row"),
        (V[0][:0], y[:0], r"X must have at least one row"),
        ([V[0], V[1][:, :0]], y, r"X\[1\] must have at least one column"),
        ([V[0][:, 0], V[1]], y, r"X\[0\] must be 2-D \(n_samples, n_features of the view\); "
         r"got shape \(60,\)"),
        ([V[0], V[1][:-1]], y, r"X\[1\] must have as many rows as X\[0\]"),
        ([da.from_array(V[0][:0]), V[1][:0]], y[:0], r"X\[0\] must have at least one row"),
    ]
    for X, yy, match in cases:
        with pytest.raises(ValueError, match=match):
            MVR(**kw).fit(X, yy)
    m = MVR(**kw).fit(V, y)
    with pytest.raises(ValueError, match=r"X\[0\] must be 2-D"):
        m.predict([V[0][:, 0], V[1]])


def test_block_rows_learning_rate_and_init_std(data):
    V, y = data
    for bad in ("a", 2.5):
        with pytest.raises(TypeError, match=r"^block_rows must be an integer"):
            MVR(n_epochs=2, block_rows=bad).fit([V[0], V[1]], _unreadable(60))
    with pytest.raises(ValueError, match=r"^block_rows must be >= 1"):
        MVR(n_epochs=2, block_rows=0).fit(V, _unreadable(60))
    with pytest.raises(ValueError, match=r"^init_std must be <= 1.*got 1e\+300"):
        MVR(n_epochs=2, init_std=1e300).fit(V, _unreadable(60))
    for cls, yy in ((MVR, y), (MVC, y > 0)):
        with pytest.raises(NonFiniteError, match=r"SGD diverged.*lower learning_rate"):
            cls(n_epochs=3, learning_rate=1e10, random_state=0, solver="sgd").fit(V, yy)
    # a sane fit is not flagged, and stays sane
    m = MVR(n_epochs=3, random_state=0).fit(V, y)
    assert np.abs(m.predict(V)).max() < 100


@pytest.mark.parametrize("seed", ["a", 2.5, -1])
def test_random_state_is_checked_before_any_pass(data, seed):
    V, _ = data
    with pytest.raises((TypeError, ValueError), match=r"^random_state must be"):
        MVR(n_epochs=2, random_state=seed).fit(V, _unreadable(60))


def test_dataframe_views_and_zero_row_predictions():
    """Issue 23 item 8 for MVM: Dask DataFrames (also inside a list of views) are converted as
    every estimator converts them (a Dask 'convert to a boolean' error before); 0 rows predict
    to an empty result, as scikit-learn's estimators do."""
    pd = pytest.importorskip("pandas")
    dd = pytest.importorskip("dask.dataframe")
    from ooc_lowrank.mvm import MultiViewMachineClassifier, MultiViewMachineRegressor

    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(120, 6)), rng.normal(size=120)
    kw = dict(view_sizes=[3, 3], max_iter=5, random_state=0)
    want = MultiViewMachineRegressor(**kw).fit(X, y).predict(X)
    for Xi in (
        dd.from_pandas(pd.DataFrame(X), npartitions=2),
        [dd.from_pandas(pd.DataFrame(X[:, :3]), npartitions=3), pd.DataFrame(X[:, 3:])],
    ):
        got = MultiViewMachineRegressor(**kw).fit(Xi, y).predict(Xi)
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-9, atol=1e-12)
    reg = MultiViewMachineRegressor(**kw).fit(X, y)
    assert reg.predict(X[:0]).shape == (0,)
    clf = MultiViewMachineClassifier(**kw).fit(X, (np.arange(120) % 3))
    assert clf.predict(X[:0]).shape == (0,) and clf.predict_proba(X[:0]).shape == (0, 3)
    with pytest.raises(ValueError, match="at least one row"):
        MultiViewMachineRegressor(**kw).fit(X[:0], y[:0])
