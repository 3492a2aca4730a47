"""KernelMaxide / Maxide / mask_labels on hostile input: each bad input is refused with an error
naming the argument, before any pass over the data (no silent wrong answer, no raw library
error).  One test per class of the probe sweep (docs/kernelmaxide.md section 1 for labels)."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest
import scipy.sparse as sp

from ooc_lowrank._validation import NonFiniteError
from ooc_lowrank.kernelmaxide import (
    KernelMaxide,
    KernelMaxideCV,
    Maxide,
    MaxideCV,
    _blocks,
    cv,
    mask_labels,
    masking,
)
from ooc_lowrank.kernelmaxide.cv import split_observed
from ooc_lowrank.storage import open_dataset, write_arrays

KM = dict(n_features_map=20, max_iter=5, random_state=0)


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 5))
    Y01 = (rng.random((60, 4)) < 0.4).astype(np.float64)
    return X, Y01, mask_labels(Y01, 50, random_state=0)


@pytest.fixture(scope="module")
def fitted(data):
    X, _, Yo = data
    return KernelMaxide(**KM).fit(X, Yo)


def _no_pass(monkeypatch, module, name):
    """Make the block function ``module.name`` fail the test if a pass calls it."""

    def boom(*args, **kwargs):
        raise AssertionError(f"{name} ran: the error must come before any pass")

    monkeypatch.setattr(module, name, boom)


# 1. labels of another model: a clear error, not a number or a raw IndexError
@pytest.mark.parametrize("method", ["observed_ranking_loss", "observed_squared_error", "evaluate"])
def test_label_count_checked_before_the_pass(data, fitted, method, monkeypatch):
    X, Y01, Yo = data
    for fn in ("observed_rl_block", "observed_sq_block", "eval_block"):
        _no_pass(monkeypatch, _blocks, fn)
    with pytest.raises(ValueError, match=r"^Y must have 4 columns.*got 2"):
        if method == "evaluate":
            fitted.evaluate(X, Y=Y01[:, :2])
        else:
            getattr(fitted, method)(X, Yo[:, :2])
    with pytest.raises(ValueError, match=r"X has 3 features.*5"):
        fitted.observed_ranking_loss(X[:, :3], Yo)


# 2. full 0/1 labels in place of observed labels: refused on every path
@pytest.mark.parametrize("kind", ["sparse", "sparse bool", "dask dense", "store Y"])
def test_01_labels_refused(data, kind, tmp_path):
    X, Y01, Yo = data
    if kind == "store Y":
        ds = write_arrays(
            str(tmp_path / "s.zarr"), {"X": X, "Y": sp.csr_matrix(Y01), "Y_obs": Yo}, block_rows=16
        )
        X, Y = ds["X"], ds["Y"]
    else:
        Y = {
            "sparse": sp.csr_matrix(Y01),
            "sparse bool": sp.csr_matrix(Y01.astype(bool)),
            "dask dense": da.from_array(Y01, chunks=(20, 4)),
        }[kind]
    rule = "dense and holds 150 0 entries" if kind == "dask dense" else "no observed negative"
    with pytest.raises(ValueError, match=rf"^Y (is|has) {rule}"):
        KernelMaxide(**KM).fit(X, Y)
    if kind == "sparse":
        with pytest.raises(ValueError, match=r"^Y has no observed negative.*mask_labels"):
            Maxide(max_iter=5).fit(X, Y)
        with pytest.raises(ValueError, match=r"^Y has no observed negative"):
            KernelMaxideCV(**KM, alphas=(1.0,), n_splits=1).fit(X, Y)


def test_cv_hold_out_taking_every_negative_is_named(data):
    """A hold-out that leaves the fit without observed negatives says so (not the fit's error)."""
    X = data[0]
    rows = np.arange(20)
    Y = sp.csr_matrix(
        (np.r_[-1.0, np.ones(19)], (rows, rows % 4)), shape=(60, 4)
    )  # one observed negative, in row 0
    seed = next(
        s
        for s in range(200)
        if (lambda f, v: v.nnz and f.nnz and not (f.data == -1).any())(
            *split_observed(Y, 0.25, s, by="rows")
        )
    )
    est = KernelMaxideCV(**{**KM, "random_state": seed}, alphas=(1.0,), n_splits=1)
    with pytest.raises(ValueError, match=r"hold-out 0 .*every observed negative"):
        est.fit(X, Y)


# 3. mask_labels: NaN, block_rows, zero rows, complex, random_state
def test_mask_labels_refuses_bad_input(data, monkeypatch):
    Y01 = data[1]
    _no_pass(monkeypatch, masking, "_positives")
    Yn = Y01.copy()
    Yn[0, 1] = np.nan
    with pytest.raises(ValueError, match=r"^Y must hold full 0/1 labels.*got nan"):
        mask_labels(Yn, 100)
    with pytest.raises(ValueError, match=r"^Y must hold full 0/1 labels.*got nan"):
        mask_labels(sp.csr_matrix(Yn), 100)
    for bad in (2.5, "a", float("nan")):
        with pytest.raises(TypeError, match=r"^block_rows must be an integer"):
            mask_labels(Y01, 20, block_rows=bad)
    with pytest.raises(ValueError, match=r"^block_rows must be >= 1"):
        mask_labels(Y01, 20, block_rows=0)
    with pytest.raises(ValueError, match=r"^Y has no rows"):
        mask_labels(Y01[:0], 20)
    with pytest.raises(TypeError, match=r"^Y must hold full 0/1 labels.*complex128"):
        mask_labels(Y01 + 1j * Y01, 20)
    with pytest.raises(ValueError, match=r"^random_state must be in"):
        mask_labels(Y01, 20, random_state=-1)


def test_complex_labels_refused_in_fit(data):
    X, _, Yo = data
    with pytest.raises(TypeError, match=r"^Y must have a real numeric dtype.*complex128"):
        KernelMaxide(**KM).fit(X, Yo.astype(complex) * (1 + 1j))
    with pytest.raises(TypeError, match=r"^X must have a numeric dtype; got complex128"):
        KernelMaxide(**KM).fit(X.astype(complex), Yo)


# 4. NaN / inf in a Dask X, and values whose squares overflow
@pytest.mark.parametrize(
    "est, where",
    [
        (Maxide(max_iter=5), ""),
        (KernelMaxide(**KM), "the row sample of the median heuristic"),
        (KernelMaxide(n_features_map=5, gamma=0.1, max_iter=5, random_state=0), "rows 40..59"),
    ],
)
def test_dask_X_nonfinite_named(data, est, where):
    X, _, Yo = data
    Xn = X.copy()
    Xn[59, :] = np.nan
    with pytest.raises(ValueError, match=r"^X must hold only finite values; found nan") as e:
        est.fit(da.from_array(Xn, chunks=(20, 5)), Yo)
    assert where in str(e.value)


@pytest.mark.parametrize("lazy", [False, True])
@pytest.mark.parametrize("cls", [KernelMaxide, Maxide])
def test_overflowing_X_scale_named(data, cls, lazy):
    X, _, Yo = data
    Xh = X * 1e200
    est = cls(**KM) if cls is KernelMaxide else cls(max_iter=5)
    with pytest.raises(ValueError, match=r"^X.*overflow.*(Scale|standardize)"):
        est.fit(da.from_array(Xh, chunks=(20, 5)) if lazy else Xh, Yo)
    if cls is Maxide and lazy:
        with pytest.raises(NonFiniteError, match=r"X\^T X overflows"):
            est.fit(da.from_array(Xh, chunks=(20, 5)), Yo)


# 5. n_trials has an upper bound
@pytest.mark.parametrize("cls", [KernelMaxide, Maxide, KernelMaxideCV, MaxideCV])
def test_n_trials_bounded_before_any_work(data, cls, monkeypatch):
    X, _, Yo = data
    _no_pass(monkeypatch, _blocks, "label_stats_block")
    _no_pass(monkeypatch, cv, "_labels_in_memory")
    kw = {"n_features_map": 20} if cls in (KernelMaxide, KernelMaxideCV) else {}
    with pytest.raises(ValueError, match=r"^n_trials must be <= 64; got 1000000000"):
        cls(**kw, n_trials=10**9).fit(X, Yo)
    cls(**kw, n_trials=64)  # the bound itself is allowed


# 6. no rows, no features
@pytest.mark.parametrize("cls", [KernelMaxide, Maxide, KernelMaxideCV])
def test_empty_X_refused(data, cls):
    X, _, Yo = data
    with pytest.raises(ValueError, match=r"^X has no rows.*\(0, 5\)"):
        cls().fit(np.zeros((0, 5)), sp.csr_matrix((0, 4)))
    with pytest.raises(ValueError, match=r"^X has no features.*\(60, 0\)"):
        cls().fit(X[:, :0], Yo)


# 7. a store path reads the store's Y_obs
def test_fit_on_store_path_reads_Y_obs(data, tmp_path):
    X, Y01, Yo = data
    url = str(tmp_path / "s.zarr")
    write_arrays(url, {"X": X, "Y": sp.csr_matrix(Y01), "Y_obs": Yo}, block_rows=16)
    a = KernelMaxide(**KM).fit(url)
    b = KernelMaxide(**KM).fit(open_dataset(url))
    np.testing.assert_array_equal(a.coef_, b.coef_)
    c = KernelMaxide(**KM).fit(tmp_path / "s.zarr")  # os.PathLike too
    np.testing.assert_array_equal(a.coef_, c.coef_)


# 8. random_state is checked before any pass
def test_random_state_checked_before_any_pass(data, monkeypatch):
    X, _, Yo = data
    _no_pass(monkeypatch, _blocks, "label_stats_block")
    with pytest.raises(ValueError, match=r"^random_state must be in"):
        KernelMaxide(n_features_map=20, random_state=-1).fit(X, Yo)
    with pytest.raises(TypeError, match=r"^random_state must be None, an integer"):
        Maxide(random_state="a").fit(X, Yo)
    with pytest.raises(ValueError, match=r"^random_state must be in \[0, 2\*\*32 - n_splits\]"):
        KernelMaxideCV(n_features_map=20, n_splits=2, random_state=2**32 - 1).fit(X, Yo)


def test_a_model_file_relabelled_as_the_other_estimator_is_refused(tmp_path):
    """A KernelMaxide model whose model.json says "Maxide" (and the reverse) no longer loads
    as the other estimator with the wrong kind of feature map."""
    import json

    import ooc_lowrank
    from ooc_lowrank._persist import ModelFileError
    from ooc_lowrank.kernelmaxide import KernelMaxide, Maxide, mask_labels

    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 4))
    Yo = mask_labels((rng.random((40, 3)) < 0.4).astype(float), 50, random_state=0)
    for est, other in ((KernelMaxide(n_features_map=10, max_iter=2), "Maxide"),
                       (Maxide(max_iter=2), "KernelMaxide")):  # fmt: skip
        path = tmp_path / type(est).__name__
        est.fit(X, Yo).save(path)
        doc = json.loads((path / "model.json").read_text())
        doc["estimator"] = other
        (path / "model.json").write_text(json.dumps(doc))
        with pytest.raises(ModelFileError, match="kind"):
            ooc_lowrank.load(path)


@pytest.mark.parametrize("cls", [KernelMaxide, Maxide])
def test_block_rows_reaches_the_blocked_input_with_the_same_model(data, cls):
    """``block_rows`` (issue 29: every streaming estimator has it) sets the row blocks of an
    in-memory ``X``: the estimate sees 7-row blocks, and the model is the same."""
    X, _, Yo = data
    kw = dict(KM) if cls is KernelMaxide else dict(n_components=3, max_iter=5)
    assert cls(**kw, block_rows=7).estimate(X, Yo)["block_rows"] == 7
    assert cls(**kw).estimate(X, Yo)["block_rows"] > 7
    one = cls(**kw).fit(X, Yo)
    seven = cls(**kw, block_rows=7).fit(X, Yo)
    np.testing.assert_allclose(seven.decision_function(X), one.decision_function(X),
                               rtol=1e-7, atol=1e-9)  # fmt: skip
    with pytest.raises(ValueError, match="block_rows"):
        cls(**kw, block_rows=0).fit(X, Yo)
