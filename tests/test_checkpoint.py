"""Checkpoint and resume (``fit(..., checkpoint=PATH, checkpoint_every=N)``) for GIMC, GLRL,
KernelMaxide / Maxide and the multi-view machines (SGD bitwise; L-BFGS restarts from the
saved iterate).

An interrupted fit (an exception in a callback, or SIGKILL of a subprocess) resumed from its
checkpoint ends with exactly the model of an uninterrupted fit; a checkpoint of another fit is
refused; the files are JSON + npz written atomically.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from ooc_lowrank._checkpoint import CheckpointMismatchError
from ooc_lowrank.gimc import GIMC
from ooc_lowrank.glrl import GreedyLowRank
from ooc_lowrank.kernelmaxide import KernelMaxide, Maxide, mask_labels
from ooc_lowrank.mvm import MultiViewMachineClassifier, MultiViewMachineRegressor

REPO = Path(__file__).resolve().parents[1]


class Crash(Exception):
    pass


def _crash_at(k):
    def cb(it, elapsed, obj):
        if it == k:
            raise Crash(f"simulated crash at iteration {it}")

    return cb


def _gimc_data(seed=0, n=120, d=6, L=5, sparse=False):
    r = np.random.default_rng(seed)
    X = r.standard_normal((n, d))
    Y = sp.csr_matrix((r.random((n, L)) < 0.3).astype(float))
    if sparse:
        X[np.abs(X) < 0.8] = 0.0
        X = sp.csr_matrix(X)
    return X, Y


def _glrl_data(seed=0, m=50, n=40, kind="real"):
    r = np.random.default_rng(seed)
    M = r.standard_normal((m, 3)) @ r.standard_normal((3, n))
    rows, cols = np.nonzero(r.random((m, n)) < 0.4)
    vals = M[rows, cols]
    if kind == "sign":
        vals = np.where(vals >= 0, 1.0, -1.0)
    return (rows, cols, vals), (m, n)


def _same_gimc(a, b):
    np.testing.assert_array_equal(a.components_, b.components_)
    np.testing.assert_array_equal(a.coef_, b.coef_)
    np.testing.assert_array_equal(a.objective_, b.objective_)
    assert a.n_iter_ == b.n_iter_ and a.n_passes_ == b.n_passes_
    assert a.gamma_ == b.gamma_


def _same_glrl(a, b):
    for k in ("U_", "V_", "theta_", "objective_path_", "validation_path_", "step_sizes_"):
        np.testing.assert_array_equal(getattr(a, k), getattr(b, k), err_msg=k)
    assert (a.n_iter_, a.best_iter_, a.n_passes_) == (b.n_iter_, b.best_iter_, b.n_passes_)


GIMC_CASES = [
    dict(features="fourier", n_features_map=8, sparse=False),
    dict(features="both", n_features_map=6, sparse=True, normalize_rows=True),
]


@pytest.mark.parametrize("case", GIMC_CASES, ids=["fourier-dense", "both-csr"])
def test_gimc_resume_after_crash_equals_uninterrupted(case, tmp_path):
    case = dict(case)
    X, Y = _gimc_data(sparse=case.pop("sparse"))
    kw = dict(case, max_iter=9, tol=0.0, random_state=3)
    ref = GIMC(**kw).fit(X, Y)
    assert ref.n_iter_ == 9
    ck = tmp_path / "fit.ckpt"
    with pytest.raises(Crash):
        GIMC(**kw, callback=_crash_at(6)).fit(X, Y, checkpoint=ck, checkpoint_every=2)
    doc = json.loads((ck / "state.json").read_text())
    assert doc["iteration"] == 4 and doc["format"] == "ooc_lowrank.checkpoint"
    assert [p.name for p in ck.iterdir()] == ["state.json", doc["arrays"]] or sorted(
        p.name for p in ck.iterdir()
    ) == sorted(["state.json", doc["arrays"]])
    seen = []
    resumed = GIMC(**kw, callback=lambda it, e, f: seen.append(it)).fit(
        X, Y, checkpoint=ck, checkpoint_every=2
    )
    assert seen == [5, 6, 7, 8, 9]  # no init pass, iterations continue from 5
    _same_gimc(resumed, ref)


def test_gimc_resume_keeps_eval_history_and_spec(tmp_path):
    X, Y = _gimc_data(seed=1)
    Xv, Yv = _gimc_data(seed=2, n=40)
    kw = dict(features="nystrom", n_features_map=10, max_iter=6, tol=0.0, random_state=0)
    fit_kw = dict(eval_set=(Xv, Yv), eval_every=2)
    ref = GIMC(**kw).fit(X, Y, **fit_kw)
    ck = tmp_path / "c"
    with pytest.raises(Crash):
        GIMC(**kw, callback=_crash_at(5)).fit(X, Y, checkpoint=ck, checkpoint_every=1, **fit_kw)
    res = GIMC(**kw).fit(X, Y, checkpoint=ck, **fit_kw)
    _same_gimc(res, ref)
    assert res.eval_history_ == ref.eval_history_
    np.testing.assert_array_equal(res.spec_.parts[0].M, ref.spec_.parts[0].M)


def test_gimc_finished_checkpoint_returns_at_once_and_extends(tmp_path):
    X, Y = _gimc_data(seed=4)
    kw = dict(n_features_map=6, tol=0.0, random_state=1)
    ck = tmp_path / "c"
    short = GIMC(**kw, max_iter=3).fit(X, Y, checkpoint=ck, checkpoint_every=10)
    calls = []
    again = GIMC(**kw, max_iter=3, callback=lambda *a: calls.append(a)).fit(X, Y, checkpoint=ck)
    assert calls == [] and again.n_passes_ == short.n_passes_  # nothing recomputed
    _same_gimc(again, short)
    longer = GIMC(**kw, max_iter=7).fit(X, Y, checkpoint=ck)
    _same_gimc(longer, GIMC(**kw, max_iter=7).fit(X, Y))


def test_gimc_checkpoint_of_another_fit_is_refused(tmp_path):
    X, Y = _gimc_data()
    ck = tmp_path / "c"
    GIMC(n_features_map=6, max_iter=2, random_state=0).fit(X, Y, checkpoint=ck)
    with pytest.raises(CheckpointMismatchError, match=r"params\.alpha is 'auto' there and 2\.0 here"):
        GIMC(n_features_map=6, max_iter=2, random_state=0, alpha=2.0).fit(X, Y, checkpoint=ck)
    with pytest.raises(CheckpointMismatchError, match=r"data\.X\.shape is \[120, 6\] there and"):
        GIMC(n_features_map=6, max_iter=2, random_state=0).fit(X[:100], Y[:100], checkpoint=ck)
    with pytest.raises(CheckpointMismatchError, match="estimator is 'GIMC' there"):
        rows, cols = np.nonzero(X[:20] > 0)
        GreedyLowRank(n_components=2).fit((rows, cols, X[:20][rows, cols]), shape=(20, 6), checkpoint=ck)


def test_checkpoint_arguments_and_damage_are_reported(tmp_path):
    X, Y = _gimc_data()
    est = GIMC(n_features_map=6, max_iter=2, random_state=0)
    with pytest.raises(ValueError, match="checkpoint_every must be >= 1; got 0"):
        est.fit(X, Y, checkpoint=tmp_path / "a", checkpoint_every=0)
    with pytest.raises(TypeError, match="checkpoint must be a directory path"):
        est.fit(X, Y, checkpoint=123)
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(ValueError, match="checkpoint must be a directory"):
        est.fit(X, Y, checkpoint=f)
    ck = tmp_path / "c"
    est.fit(X, Y, checkpoint=ck)
    doc = json.loads((ck / "state.json").read_text())
    arr = ck / doc["arrays"]
    arr.write_bytes(arr.read_bytes()[:-10])
    with pytest.raises(ValueError, match="does not match its SHA-256"):
        est.fit(X, Y, checkpoint=ck)
    (ck / "state.json").write_text("{not json")
    with pytest.raises(ValueError, match="state.json is not valid JSON"):
        est.fit(X, Y, checkpoint=ck)


GLRL_CASES = [
    dict(loss="square", n_components=8, init="mean", kind="real"),
    dict(loss="logistic", n_components=6, refit="economic", kind="sign"),
    dict(loss="l1", n_components=8, max_inner=2, step_schedule="search", kind="real"),
    dict(loss="square", n_components=12, init="bias", bias_reg=10.0, validation=True, n_iter_no_change=3,
         kind="real"),
]


@pytest.mark.parametrize("case", GLRL_CASES, ids=["r1mp-mean", "logistic-econ", "l1", "bias-val"])
def test_glrl_resume_after_crash_equals_uninterrupted(case, tmp_path):
    case = dict(case)
    X, shape = _glrl_data(kind=case.pop("kind"))
    if case.pop("validation", False):  # hold out every 5th entry
        held = np.arange(X[0].size) % 5 == 0
        case["validation"] = tuple(a[held] for a in X)
        X = tuple(a[~held] for a in X)
    kw = dict(case, power_iter=5, random_state=0)
    ref = GreedyLowRank(**kw).fit(X, shape=shape)
    assert ref.n_iter_ >= 4
    ck = tmp_path / "c"
    with pytest.raises(Crash):
        GreedyLowRank(**kw, callback=_crash_at(3)).fit(
            X, shape=shape, checkpoint=ck, checkpoint_every=2
        )
    assert json.loads((ck / "state.json").read_text())["iteration"] == 2
    res = GreedyLowRank(**kw).fit(X, shape=shape, checkpoint=ck, checkpoint_every=2)
    _same_glrl(res, ref)


def test_glrl_checkpoint_of_other_data_is_refused(tmp_path):
    X, shape = _glrl_data()
    ck = tmp_path / "c"
    GreedyLowRank(n_components=3).fit(X, shape=shape, checkpoint=ck)
    rows, cols, vals = X
    with pytest.raises(CheckpointMismatchError, match=r"data\.mean is"):
        GreedyLowRank(n_components=3).fit((rows, cols, vals + 1.0), shape=shape, checkpoint=ck)


# ---------------------------------------------------------------------------- KernelMaxide


def _maxide_data(seed=0, n=80, d=5, L=6):
    r = np.random.default_rng(seed)
    X = r.standard_normal((n, d))
    Y = sp.csr_matrix((r.random((n, L)) < 0.3).astype(float))
    return X, mask_labels(Y, omega=50, random_state=seed)


def _same_maxide(a, b):
    np.testing.assert_array_equal(a.coef_, b.coef_)
    np.testing.assert_array_equal(a.objective_, b.objective_)
    np.testing.assert_array_equal(a.fmap_.U, b.fmap_.U)
    assert (a.n_iter_, a.n_passes_, a.rank_, a.converged_) == (
        b.n_iter_, b.n_passes_, b.rank_, b.converged_
    )


MAXIDE_CASES = [
    (KernelMaxide, dict(n_features_map=20)),
    (KernelMaxide, dict(n_features_map=20, cache_bytes=0)),  # F streamed, 2 trials per pass
    (Maxide, dict(n_components=4)),
]


@pytest.mark.parametrize("cls, case", MAXIDE_CASES, ids=["km-cached", "km-streamed", "maxide"])
def test_maxide_resume_after_crash_equals_uninterrupted(cls, case, tmp_path):
    X, Yo = _maxide_data()
    kw = dict(case, alpha=0.1, max_iter=8, tol=0.0, random_state=1)
    ref = cls(**kw).fit(X, Yo)
    assert ref.n_iter_ == 8
    ck = tmp_path / "c"
    with pytest.raises(Crash):
        cls(**kw, callback=_crash_at(3)).fit(X, Yo, checkpoint=ck, checkpoint_every=2)
    assert json.loads((ck / "state.json").read_text())["iteration"] == 2
    seen = []
    res = cls(**kw, callback=lambda it, e, f: seen.append(it)).fit(
        X, Yo, checkpoint=ck, checkpoint_every=2
    )
    assert seen == [3, 4, 5, 6, 7, 8]  # no feature map, no Gram pass: iterations continue
    _same_maxide(res, ref)
    if cls is KernelMaxide:
        np.testing.assert_array_equal(res.normalization_, ref.normalization_)
        assert res.gamma_ == ref.gamma_
    else:
        np.testing.assert_array_equal(res.singular_values_, ref.singular_values_)


def test_maxide_finished_checkpoint_extends_and_refuses_other_fit(tmp_path):
    X, Yo = _maxide_data(seed=2)
    kw = dict(n_features_map=15, alpha=0.1, tol=0.0, random_state=0)
    ck = tmp_path / "c"
    KernelMaxide(**kw, max_iter=4).fit(X, Yo, checkpoint=ck)
    seen = []
    res = KernelMaxide(**kw, max_iter=7, callback=lambda it, e, f: seen.append(it)).fit(
        X, Yo, checkpoint=ck
    )
    assert seen == [5, 6, 7]
    _same_maxide(res, KernelMaxide(**kw, max_iter=7).fit(X, Yo))
    with pytest.raises(CheckpointMismatchError, match=r"params\.alpha is"):
        KernelMaxide(**dict(kw, alpha=0.2), max_iter=7).fit(X, Yo, checkpoint=ck)


# ---------------------------------------------------------------------------- MVM


def _mvm_data(seed=0, n=300, task="regression"):
    r = np.random.default_rng(seed)
    V = [r.standard_normal((n, 4)), r.standard_normal((n, 3))]
    y = V[0][:, 0] * V[1][:, 1] + 0.1 * r.standard_normal(n)
    if task == "classification":
        y = np.where(y > 0, "yes", "no")
    return V, y


def _same_mvm(a, b):
    np.testing.assert_array_equal(a.coef_, b.coef_)
    for k in ("objective_path_", "validation_path_"):
        np.testing.assert_array_equal(getattr(a, k), getattr(b, k), err_msg=k)
    assert (a.intercept_, a.n_iter_, a.best_iter_, a.n_passes_) == (
        b.intercept_, b.n_iter_, b.best_iter_, b.n_passes_
    )


MVM_CASES = [
    (MultiViewMachineRegressor, dict(), False),
    (MultiViewMachineRegressor, dict(reg="l1"), True),  # eval_set: best epoch, patience
    (MultiViewMachineClassifier, dict(loss="hinge"), False),
]


@pytest.mark.parametrize("cls, case, val", MVM_CASES, ids=["reg", "reg-l1-val", "clf-hinge"])
def test_mvm_sgd_resume_after_crash_equals_uninterrupted(cls, case, val, tmp_path):
    task = "classification" if cls is MultiViewMachineClassifier else "regression"
    V, y = _mvm_data(task=task)
    fit_kw = {"eval_set": _mvm_data(seed=1, n=60, task=task)} if val else {}
    kw = dict(case, n_components=3, solver="sgd", n_epochs=7, block_rows=64, random_state=2,
              n_iter_no_change=2)
    ref = cls(**kw).fit(V, y, **fit_kw)
    ck = tmp_path / "c"
    with pytest.raises(Crash):
        cls(**kw, callback=_crash_at(3)).fit(V, y, checkpoint=ck, checkpoint_every=1, **fit_kw)
    assert json.loads((ck / "state.json").read_text())["iteration"] == 2
    res = cls(**kw).fit(V, y, checkpoint=ck, checkpoint_every=1, **fit_kw)
    _same_mvm(res, ref)
    # finished: raising n_epochs continues the same fit (unless patience stopped it)
    more = cls(**dict(kw, n_epochs=9)).fit(V, y, checkpoint=ck, **fit_kw)
    _same_mvm(more, cls(**dict(kw, n_epochs=9)).fit(V, y, **fit_kw))


def test_mvm_lbfgs_resume_restarts_from_the_saved_iterate(tmp_path):
    """L-BFGS resumes from the saved iterate with a fresh curvature history: the iterations
    before the crash are the uninterrupted ones bitwise, the rest reach the same quality."""
    V, y = _mvm_data()
    kw = dict(n_components=3, solver="lbfgs", max_iter=20, random_state=2)
    ref = MultiViewMachineRegressor(**kw).fit(V, y)
    assert ref.n_iter_ == 20
    ck = tmp_path / "c"
    with pytest.raises(Crash):
        MultiViewMachineRegressor(**kw, callback=_crash_at(3)).fit(
            V, y, checkpoint=ck, checkpoint_every=1
        )
    seen = []
    res = MultiViewMachineRegressor(**kw, callback=lambda it, e, f: seen.append(it)).fit(
        V, y, checkpoint=ck, checkpoint_every=1
    )
    assert seen == list(range(3, 21)) and res.n_iter_ == 20
    np.testing.assert_array_equal(res.objective_path_[:2], ref.objective_path_[:2])
    # the same quality or better (not converged after 20 iterations: the restart may land lower)
    assert res.objective_path_[-1] <= 1.05 * ref.objective_path_[-1]
    assert np.all(np.diff(res.objective_path_) <= 1e-12)  # still a descent method
    with pytest.raises(CheckpointMismatchError, match=r"params\.solver is"):
        MultiViewMachineRegressor(**dict(kw, solver="sgd")).fit(V, y, checkpoint=ck)


# ---------------------------------------------------------------------------- SIGKILL

_CHILD = textwrap.dedent(
    """
    import os, sys, time
    sys.path.insert(0, {tests!r})
    from test_checkpoint import make_estimator
    est, X, kw, fit_kw = make_estimator({which!r})
    marker = {marker!r}

    def cb(it, elapsed, obj):
        if it == {stop_at}:
            open(marker, "w").close()
            time.sleep(600)  # killed here, after the checkpoint of iteration {saved}

    est.set_params(callback=cb)
    est.fit(X, **fit_kw, checkpoint={ck!r}, checkpoint_every=2)
    """
)


def make_estimator(which):
    """(estimator, X, params, fit kwargs) shared by the SIGKILL child and the parent."""
    if which == "gimc":
        X, Y = _gimc_data(seed=7, n=150)
        kw = dict(features="fourier", n_features_map=8, max_iter=10, tol=0.0, random_state=5)
        return GIMC(**kw), X, kw, {"Y": Y}
    if which == "kernelmaxide":
        X, Yo = _maxide_data(seed=7)
        kw = dict(n_features_map=20, alpha=0.1, max_iter=8, tol=0.0, random_state=5)
        return KernelMaxide(**kw), X, kw, {"Y": Yo}
    if which == "mvm-sgd":
        V, y = _mvm_data(seed=7)
        kw = dict(n_components=3, solver="sgd", n_epochs=7, block_rows=64, random_state=5)
        return MultiViewMachineRegressor(**kw), V, kw, {"y": y}
    X, shape = _glrl_data(seed=8)
    kw = dict(loss="square", n_components=9, power_iter=5, random_state=2, init="mean")
    return GreedyLowRank(**kw), X, kw, {"shape": shape}


# One SIGKILL child in the default run (GIMC): the checkpoint writer it exercises is the one all
# methods share (ooc_lowrank/_checkpoint.py), and each method's resume-equals-uninterrupted is
# tested in process above.  The other methods' children (a fresh interpreter each, ~5-25 s on
# the busy 2-core machine) run with -m slow.
_SLOW_CHILDREN = ("glrl", "kernelmaxide", "mvm-sgd")


@pytest.mark.parametrize(
    "which",
    ["gimc", *(pytest.param(w, marks=pytest.mark.slow) for w in _SLOW_CHILDREN)],
)
def test_fit_killed_with_sigkill_resumes_to_the_identical_model(which, tmp_path):
    ck, marker = tmp_path / "ckpt", tmp_path / "at-iteration-5"
    code = _CHILD.format(
        tests=str(REPO / "tests"), which=which, marker=str(marker), ck=str(ck), stop_at=5, saved=4
    )
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():
            assert proc.poll() is None, proc.stderr.read().decode()[-3000:]
            assert time.monotonic() < deadline, "child never reached iteration 5"
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(30) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stderr.close()
    assert json.loads((ck / "state.json").read_text())["iteration"] == 4
    est, X, _, fit_kw = make_estimator(which)
    ref = make_estimator(which)[0].fit(X, **fit_kw)
    resumed = est.fit(X, **fit_kw, checkpoint=ck, checkpoint_every=2)
    same = {"gimc": _same_gimc, "glrl": _same_glrl, "kernelmaxide": _same_maxide}
    same.get(which, _same_mvm)(resumed, ref)
