"""Model files saved before issue 29's renames (one parameter vocabulary, docs/api.md) still
load: their parameters are translated by ``_persist.RENAMED_PARAMS``.  The old files are crafted
from new ones by writing the old names into ``model.json`` (spelled out here, not taken from the
table, so a wrong table entry fails)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import ooc_lowrank
from ooc_lowrank._persist import RENAMED_PARAMS, load_as


def _as_old_file(path, old_names, cv_old_names=None):
    """Rewrite the saved ``model.json`` at ``path`` with the parameter names of before the
    rename: ``old_names`` maps current -> old names of ``params`` (``cv_old_names`` those of
    the base estimator in a CV model's ``extra.params_list`` / ``extra.best.params``)."""
    f = path / "model.json"
    doc = json.loads(f.read_text())
    for new, old in old_names.items():
        doc["params"][old] = doc["params"].pop(new)
    for new, old in (cv_old_names or {}).items():
        for p in doc["extra"].get("params_list", []):
            if new in p:
                p[old] = p.pop(new)
        best = doc["extra"].get("best", {}).get("params", {})
        if new in best:
            best[old] = best.pop(new)
    f.write_text(json.dumps(doc))
    return doc


def _glrl_obs():
    rng = np.random.default_rng(0)
    M = rng.normal(size=(12, 2)) @ rng.normal(size=(2, 9))
    r, c = np.nonzero(rng.random(M.shape) < 0.7)
    return (r.astype(np.int64), c.astype(np.int64), M[r, c]), M.shape


def _fit_glrl():
    from ooc_lowrank.glrl import GreedyLowRank

    obs, shape = _glrl_obs()
    est = GreedyLowRank(n_components=3, alpha=0.25, power_iter=5, random_state=0)
    return est.fit(obs, shape=shape), lambda e: e.predict(np.arange(5), np.arange(5))


def _fit_glrl_cv():
    from ooc_lowrank.glrl import GreedyLowRankCV

    obs, shape = _glrl_obs()
    est = GreedyLowRankCV(loss="square", n_components=3, alphas=[0.0, 0.5], greedy_l2s=[0.0],
                          bias_regs=[5.0], cv=2, power_iter=3, random_state=0)  # fmt: skip
    est.fit(obs, shape=shape)
    return est, lambda e: e.best_estimator_.predict(np.arange(5), np.arange(5))


def _km_data():
    from ooc_lowrank.kernelmaxide import mask_labels

    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 4))
    return X, mask_labels((rng.random((40, 3)) < 0.4).astype(np.float64), 30, random_state=0)


def _fit_kernelmaxide():
    from ooc_lowrank.kernelmaxide import KernelMaxide

    X, Yo = _km_data()
    est = KernelMaxide(n_features_map=15, alpha=0.7, max_iter=4, random_state=0).fit(X, Yo)
    return est, lambda e: e.decision_function(X[:6])


def _fit_maxide():
    from ooc_lowrank.kernelmaxide import Maxide

    X, Yo = _km_data()
    est = Maxide(n_components=3, alpha=0.7, max_iter=4).fit(X, Yo)
    return est, lambda e: e.decision_function(X[:6])


def _fit_mvm():
    from ooc_lowrank.mvm import MultiViewMachineRegressor

    rng = np.random.default_rng(0)
    views = [rng.normal(size=(50, 3)), rng.normal(size=(50, 2))]
    y = views[0][:, 0] * views[1][:, 1]
    est = MultiViewMachineRegressor(n_components=2, alpha=0.01, solver="lbfgs", max_iter=5,
                                    random_state=0).fit(views, y)  # fmt: skip
    return est, lambda e: e.predict([v[:6] for v in views])


def _fit_gimc():
    from ooc_lowrank.gimc import GIMC

    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 4))
    Y = (X[:, :3] > 0).astype(np.float64)
    est = GIMC(n_features_map=6, alpha=0.5, max_iter=2, random_state=0).fit(X, Y)
    return est, lambda e: e.decision_function(X[:6])


def _fit_imc():
    from ooc_lowrank.imc import InductiveMatrixCompletion

    rng = np.random.default_rng(0)
    X1, X2 = rng.normal(size=(10, 3)), rng.normal(size=(8, 3))
    r, c = np.nonzero(rng.random((10, 8)) < 0.6)
    v = (X1 @ X2.T)[r, c]
    est = InductiveMatrixCompletion(n_components=2, alpha=0.3, max_iter=2, random_state=0)
    est.fit((r.astype(np.int64), c.astype(np.int64), v), X_row=X1, X_col=X2, shape=(10, 8))
    return est, lambda e: e.predict(np.arange(4), np.arange(4))


# current name -> name in a model file of before the rename, spelled out per estimator
CASES = {
    "GreedyLowRank": (_fit_glrl, {"n_components": "rank", "alpha": "l2"}, None),
    "GreedyLowRankCV": (_fit_glrl_cv, {"n_components": "rank", "alphas": "l2s"},
                        {"n_components": "rank", "alpha": "l2"}),
    "KernelMaxide": (_fit_kernelmaxide, {"n_features_map": "n_landmarks", "alpha": "lam"}, None),
    "Maxide": (_fit_maxide, {"alpha": "lam"}, None),
    "MultiViewMachineRegressor": (_fit_mvm, {"n_components": "n_factors", "alpha": "reg_weight"},
                                  None),
    "GIMC": (_fit_gimc, {"n_features_map": "n_components"}, None),
    "InductiveMatrixCompletion": (_fit_imc, {"alpha": "lam"}, None),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_model_saved_with_the_old_parameter_names_loads_translated(name, tmp_path):
    fit, old_names, cv_old_names = CASES[name]
    est, predict = fit()
    path = tmp_path / "m"
    est.save(path)
    doc = _as_old_file(path, old_names, cv_old_names)
    assert set(old_names.values()) <= set(doc["params"])  # the file really has the old names
    assert not set(old_names) & set(doc["params"])
    back = ooc_lowrank.load(path)
    assert type(back) is type(est)
    want = {k: v for k, v in est.get_params().items() if not callable(v)}
    got = {k: v for k, v in back.get_params().items() if not callable(v)}
    assert set(got) == set(want)
    for k, v in want.items():
        assert np.all(np.asarray(got[k], dtype=object) == np.asarray(v, dtype=object)), k
    np.testing.assert_array_equal(predict(back), predict(est))
    # the loader of one class (``Estimator.load``) translates too
    assert type(load_as(type(est), path)) is type(est)


def test_every_saved_estimator_with_renamed_parameters_is_covered():
    from ooc_lowrank._persist import _REGISTRY

    renamed = {n for n in _REGISTRY if RENAMED_PARAMS.get(n)}
    # GIMCCV saves the same translated names as GIMC (tested above) and MultiViewMachine-
    # Classifier the regressor's: the table entries are checked against the estimators below
    assert renamed - set(CASES) <= {"GIMCCV", "MultiViewMachineClassifier"}


@pytest.mark.parametrize("cls_name", sorted(RENAMED_PARAMS))
def test_renamed_params_table_names_current_parameters(cls_name):
    """Every new name in the table is a current parameter and no old name is one (the old
    names of a class never come back as its parameters)."""
    import importlib

    mod = {"GIMCClustering": "imc", "KernelMaxideCV": "kernelmaxide", "MaxideCV": "kernelmaxide"}
    cls = getattr(importlib.import_module(f"ooc_lowrank.{mod[cls_name]}"), cls_name) if (
        cls_name in mod) else getattr(ooc_lowrank, cls_name)
    params = set(cls().get_params())
    table = RENAMED_PARAMS[cls_name]
    assert set(table.values()) <= params
    assert not (set(table) - set(table.values())) & params
