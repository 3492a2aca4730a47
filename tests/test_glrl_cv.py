"""GreedyLowRankCV: K-fold CV over observed entries equals separate GreedyLowRank fits."""

from __future__ import annotations

import naive_glrl as naive
import numpy as np
import pytest

import ooc_lowrank
from ooc_lowrank.glrl import GreedyLowRank, GreedyLowRankCV
from ooc_lowrank.glrl.cv import _FoldView, entry_folds
from ooc_lowrank.storage import write_arrays

SHAPE = (40, 30)


def _ratings(seed=0, p=0.5):
    rng = np.random.default_rng(seed)
    M = rng.standard_normal((SHAPE[0], 2)) @ rng.standard_normal((2, SHAPE[1]))
    rows, cols = np.nonzero(rng.random(SHAPE) < p)
    vals = np.clip(np.round(3 + M[rows, cols] + 0.3 * rng.standard_normal(rows.size)), 1, 5)
    return rows.astype(np.int64), cols.astype(np.int64), vals


KW = dict(
    loss="l1",
    n_components=5,
    step_sizes=[1.0, 2.0],
    step_schedules=["sqrt"],
    max_inners=[1, 2],
    cv=3,
    power_iter=5,
    random_state=3,
    select_iter=True,
)


@pytest.fixture(scope="module")
def data():
    return _ratings()


@pytest.fixture(scope="module")
def fitted(data):
    return GreedyLowRankCV(**KW).fit(data, shape=SHAPE)


def test_entry_folds_are_a_seeded_hash(data):
    rows, cols, _ = data
    f = entry_folds(rows, cols, 3, 3)
    assert f.min() == 0 and f.max() == 2
    assert np.all(np.bincount(f) > rows.size / 3 * 0.8)
    # per entry, independent of the order / blocking of the entries
    perm = np.random.default_rng(0).permutation(rows.size)
    np.testing.assert_array_equal(entry_folds(rows[perm], cols[perm], 3, 3), f[perm])
    assert not np.array_equal(entry_folds(rows, cols, 3, 4), f)


def test_cv_results_equal_separate_fits(data, fitted):
    rows, cols, vals = data
    fold = entry_folds(rows, cols, 3, 3)
    res = fitted.cv_results_
    assert len(res["params"]) == 4
    base = dict(loss="l1", n_components=5, power_iter=5, random_state=3)
    for i, p in enumerate(res["params"]):
        for k in range(3):
            tr, va = fold != k, fold == k
            est = GreedyLowRank(**base, **p, validation=(rows[va], cols[va], vals[va])).fit(
                (rows[tr], cols[tr], vals[tr]), shape=SHAPE
            )
            mae = est.evaluate((rows[va], cols[va], vals[va]), ["mae"], shape=SHAPE)["mae"]
            assert res[f"split{k}_test_score"][i] == pytest.approx(mae, rel=1e-9, abs=1e-12)
            assert res[f"split{k}_best_iter"][i] == est.best_iter_
    scores = np.array([res[f"split{k}_test_score"] for k in range(3)])
    np.testing.assert_allclose(res["mean_test_score"], scores.mean(axis=0))
    np.testing.assert_allclose(res["std_test_score"], scores.std(axis=0))
    best = int(np.argmin(res["mean_test_score"]))  # MAE: lower is better
    assert res["rank_test_score"][best] == 1 and fitted.best_index_ == best
    assert fitted.best_score_ == res["mean_test_score"][best]
    assert fitted.scoring_ == "mae"


def test_refit_equals_greedy_low_rank_of_best_params(data, fitted):
    rows, cols, vals = data
    bp = fitted.best_params_
    assert set(bp) == {"step_size", "step_schedule", "max_inner", "max_iter"}
    its = [fitted.cv_results_[f"split{k}_best_iter"][fitted.best_index_] for k in range(3)]
    assert bp["max_iter"] == max(1, int(np.round(np.median(its))))
    ref = GreedyLowRank(**fitted.base_params(), **bp).fit((rows, cols, vals), shape=SHAPE)
    np.testing.assert_allclose(fitted.best_estimator_.U_, ref.U_)
    np.testing.assert_allclose(fitted.best_estimator_.theta_, ref.theta_)
    r, c = rows[:20], cols[:20]
    np.testing.assert_allclose(fitted.predict(r, c), ref.predict(r, c))
    np.testing.assert_array_equal(fitted.top_k([0, 1], 3)[0], ref.top_k([0, 1], 3)[0])
    ev = fitted.evaluate((rows, cols, vals), shape=SHAPE)
    assert ev == ref.evaluate((rows, cols, vals), shape=SHAPE)
    text = fitted.format_cv_table()
    assert "mean mae" in text and len(text.splitlines()) == 5


def test_store_input_equals_in_memory(data, fitted, tmp_path):
    rows, cols, vals = data
    ds = write_arrays(
        str(tmp_path / "obs.zarr"),
        {"obs": naive.to_csr(rows, cols, vals, SHAPE)},
        kinds={"obs": "coo"},
        block_rows=7,
    )
    # the fold views read the store block by block and keep their fold's entries
    fold = entry_folds(rows, cols, 3, 3)
    view = _FoldView(ds["obs"], 3, 1, 3, train=False)
    S = view.read(0, SHAPE[0]).tocoo()
    got = sorted(zip(S.row.tolist(), S.col.tolist(), S.data.tolist(), strict=True))
    m = fold == 1
    want = sorted(zip(rows[m].tolist(), cols[m].tolist(), vals[m].tolist(), strict=True))
    assert got == want
    est = GreedyLowRankCV(**KW).fit(ds)
    for key, v in fitted.cv_results_.items():
        if key == "params":
            assert v == est.cv_results_[key]
        elif v.dtype.kind == "f":
            np.testing.assert_allclose(est.cv_results_[key], v, rtol=1e-9, err_msg=key)
        else:
            np.testing.assert_array_equal(est.cv_results_[key], v, err_msg=key)
    assert est.best_params_ == fitted.best_params_
    np.testing.assert_allclose(est.best_estimator_.U_, fitted.best_estimator_.U_, rtol=1e-8)


def test_save_load(fitted, data, tmp_path):
    rows, cols, _ = data
    fitted.save(tmp_path / "m")
    back = ooc_lowrank.load(str(tmp_path / "m"))
    assert isinstance(back, GreedyLowRankCV)
    assert back.best_params_ == fitted.best_params_
    np.testing.assert_array_equal(
        back.cv_results_["mean_test_score"], fitted.cv_results_["mean_test_score"]
    )
    np.testing.assert_array_equal(back.predict(rows, cols), fitted.predict(rows, cols))
    assert back.format_cv_table() == fitted.format_cv_table()


def test_smooth_loss_grid_and_scoring(data):
    rows, cols, vals = data
    est = GreedyLowRankCV(
        loss="square", n_components=4, bias_regs=[1.0, 5.0], greedy_l2s=[0.0, 0.5], cv=2, power_iter=5,
        random_state=0, refit=False,
    ).fit((rows, cols, vals), shape=SHAPE)  # fmt: skip
    assert est.scoring_ == "rmse"
    grid = [(p["greedy_l2"], p["bias_reg"]) for p in est.cv_results_["params"]]
    assert grid == [(0.0, 1.0), (0.0, 5.0), (0.5, 1.0), (0.5, 5.0)]
    assert est.cv_results_["params"][0]["alpha"] == 0.0
    # the penalty changes the fits (same folds, same bias_reg)
    assert est.cv_results_["mean_test_score"][0] != est.cv_results_["mean_test_score"][2]
    assert not hasattr(est, "best_estimator_")
    # select_iter=False: the whole budget
    assert set(est.best_params_) == {"alpha", "greedy_l2", "bias_reg"}
    with pytest.raises(AttributeError, match="refit=False"):
        est.predict(rows, cols)


class _Boom(tuple):
    def __iter__(self):  # any read of the data fails the test
        raise AssertionError("the data was read before the grid was checked")


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(step_sizes=[1.0, -2.0]), "step_sizes must hold only finite numbers > 0"),
        (dict(step_sizes=[]), "step_sizes must not be empty"),
        (dict(step_sizes=2.0), "step_sizes must be a non-empty list"),
        (dict(step_sizes=[1.0, 1.0]), "step_sizes must not repeat"),
        (dict(max_inners=[1.5]), "max_inners must hold only int"),
        (dict(step_schedules=["fast"]), "step_schedules must hold only values"),
        (dict(bias_regs=[1.0]), "bias_regs applies only to smooth losses"),
        (dict(loss="square", step_sizes=[1.0]), "step_sizes applies only to nonsmooth"),
        (dict(loss="square", alphas=[-1.0]), "alphas must hold only finite numbers >= 0"),
        (dict(loss="square", greedy_l2s=[-1.0]), "greedy_l2s must hold only finite numbers >= 0"),
        (dict(greedy_l2s=[0.0]), "greedy_l2s applies only to smooth losses"),
        (dict(cv=1), "cv"),
        (dict(scoring="auc"), "scoring must be one of"),
        (dict(n_components=2, init="bias"), "n_components must be >= 3"),
    ],
)
def test_bad_grid_is_a_clear_error_before_any_work(kw, match):
    est = GreedyLowRankCV(**{"loss": "l1", **kw})
    with pytest.raises((ValueError, TypeError), match=match):
        est.fit(_Boom((1, 2, 3)), shape=SHAPE)


def test_damaged_saved_model_is_a_model_file_error(fitted, tmp_path):
    import json

    from ooc_lowrank._persist import ModelFileError

    fitted.save(tmp_path / "m")
    doc = json.loads((tmp_path / "m" / "model.json").read_text())
    doc["extra"]["params_list"] = doc["extra"]["params_list"][:2]
    (tmp_path / "m" / "model.json").write_text(json.dumps(doc))
    with pytest.raises(ModelFileError, match="params_list"):
        ooc_lowrank.load(str(tmp_path / "m"))
    del doc["extra"]["n_splits"]
    (tmp_path / "m" / "model.json").write_text(json.dumps(doc))
    with pytest.raises(ModelFileError, match="malformed"):
        ooc_lowrank.load(str(tmp_path / "m"))


def test_save_load_with_the_losss_default_greedy_l2(data, tmp_path):
    """greedy_l2s=None (a smooth loss's default): the grid column holds None, which is not a
    numeric array; the model still saves and loads with the same cv_results_."""
    rows, cols, vals = data
    est = GreedyLowRankCV(
        loss="square", n_components=3, bias_regs=[1.0], cv=2, power_iter=3, random_state=0
    ).fit((rows, cols, vals), shape=SHAPE)
    assert est.cv_results_["param_greedy_l2"].dtype == object
    est.save(tmp_path / "m")
    back = ooc_lowrank.load(str(tmp_path / "m"))
    assert back.best_params_ == est.best_params_
    assert list(back.cv_results_["param_greedy_l2"]) == list(est.cv_results_["param_greedy_l2"])
    np.testing.assert_array_equal(back.predict(rows, cols), est.predict(rows, cols))
