"""GIMCCV: the joint cross-validation equals separate GIMC fits on the same folds."""

from __future__ import annotations

import dask
import numpy as np
import pytest
from test_gimc import _ml_data  # multi-label data with structure

import ooc_lowrank as ool
from ooc_lowrank.gimc import GIMC, GIMCCV
from ooc_lowrank.gimc.cv import kfold_ids

SMALL = dict(n_features_map=6, max_iter=4, random_state=3, gamma_scales=[0.5, 1.0], alphas=[0.3, 3.0])


def _separate(cv, X, Y, fold, metric):
    """cv_results_ rebuilt from separate GIMC fits (one per fold, gamma, alpha and count)."""
    K = int(fold.max()) + 1
    out = np.zeros((K, len(cv.cv_results_["params"])))
    for i, p in enumerate(cv.cv_results_["params"]):
        for k in range(K):
            tr, va = fold != k, fold == k
            g = GIMC(
                features=cv.features,
                n_features_map=cv.n_features_map,
                gamma=p["gamma"],
                alpha=p["alpha"],
                learn_features=cv.learn_features,
                max_iter=p["max_iter"],
                tol=cv.tol,
                normalize_rows=cv.normalize_rows,
                random_state=cv.random_state,
            ).fit(X[tr], Y[tr])
            out[k, i] = g.evaluate(X[va], [metric], Y=Y[va])[metric]
    return out


def _splits(cv):
    return np.array([cv.cv_results_[f"split{k}_test_score"] for k in range(cv.n_splits_)])


@pytest.mark.parametrize(
    "features,learn,metric",
    [("fourier", True, "p@1"), ("fourier", False, "p@3"), ("nystrom", True, "p@1")],
)
def test_cv_equals_separate_fits(rng, features, learn, metric):
    X, Y = _ml_data(rng, n=150, d=6, L=9)
    cv = GIMCCV(features=features, learn_features=learn, scoring=metric, cv=3, **SMALL).fit(X, Y)
    fold = kfold_ids(X.shape[0], 3, SMALL["random_state"])
    np.testing.assert_allclose(_splits(cv), _separate(cv, X, Y, fold, metric), atol=1e-12)
    # the grid: gammas x alphas x counts 0..max_iter (0 only without learning)
    n_it = SMALL["max_iter"] + 1 if learn else 1
    assert len(cv.cv_results_["params"]) == 2 * 2 * n_it
    np.testing.assert_allclose(
        cv.cv_results_["param_gamma"][:: 2 * n_it] / cv.median_gamma_, [0.5, 1.0]
    )
    assert cv.cv_results_["rank_test_score"][cv.best_index_] == 1
    assert cv.best_score_ == cv.cv_results_["mean_test_score"].max()


def test_multiclass_accuracy_and_fold_array(rng):
    X, _ = _ml_data(rng, n=120, d=6, L=9)
    y = np.where(X[:, 0] > 0.3, "a", np.where(X[:, 1] > 0, "b", "c"))
    fold = np.arange(X.shape[0]) % 4
    cv = GIMCCV(cv=fold, scoring="accuracy", **SMALL).fit(X, y)
    np.testing.assert_allclose(_splits(cv), _separate(cv, X, y, fold, "accuracy"), atol=1e-12)
    assert set(cv.predict(X)) <= {"a", "b", "c"}
    assert cv.classes_.tolist() == ["a", "b", "c"]


def test_refit_and_delegation(rng):
    X, Y = _ml_data(rng, n=150, d=6, L=9)
    cv = GIMCCV(cv=3, **SMALL).fit(X, Y)
    p = cv.best_params_
    ref = GIMC(
        n_features_map=6,
        gamma=p["gamma"],
        alpha=p["alpha"],
        max_iter=p["max_iter"],
        tol=0.0,
        random_state=3,
    ).fit(X, Y)
    np.testing.assert_allclose(cv.best_estimator_.coef_, ref.coef_)
    np.testing.assert_array_equal(cv.predict_topk(X, 3)[0], ref.predict_topk(X, 3)[0])
    assert cv.evaluate(X, ["p@1"], Y=Y) == ref.evaluate(X, ["p@1"], Y=Y)
    assert (cv.predict(X) != ref.predict(X)).nnz == 0


def test_chunk_invariance_and_passes(rng):
    X, Y = _ml_data(rng, n=150, d=6, L=9)
    a = GIMCCV(cv=3, block_rows=150, **SMALL).fit(X, Y)
    b = GIMCCV(cv=3, block_rows=37, refit=False, **SMALL).fit(X, Y)
    np.testing.assert_allclose(_splits(a), _splits(b), atol=1e-12)
    assert a.best_params_ == b.best_params_
    # every fit of the grid shares each pass: about 2 per iteration, not 2 per iteration per fit
    assert a.n_batches_ == 1 and a.n_passes_ <= 1 + 2 * SMALL["max_iter"] + 2 + 4
    # small batches (one fit each) give the same table with more passes
    c = GIMCCV(cv=3, batch_bytes=1, refit=False, **SMALL).fit(X, Y)
    np.testing.assert_allclose(_splits(c), _splits(a), atol=1e-12)
    assert c.n_batches_ == 2 * 2 * 3 and c.n_passes_ > a.n_passes_


def test_store_input_and_save_load(rng, tmp_path):
    X, Y = _ml_data(rng, n=150, d=6, L=9, dtype=np.float32)
    with ool.DatasetWriter(str(tmp_path / "d.zarr"), block_rows=40) as w:
        w.add_dense("X", n_cols=X.shape[1], dtype="float32")
        w.add_csr("Y", n_cols=Y.shape[1], dtype="float32")
        w.append(X=X, Y=Y)
    ds = ool.open_dataset(str(tmp_path / "d.zarr"))
    a = GIMCCV(cv=3, **SMALL).fit(ds)
    b = GIMCCV(cv=3, refit=False, **SMALL).fit(X, Y)
    np.testing.assert_allclose(_splits(a), _splits(b), atol=1e-5)
    a.save(tmp_path / "m")
    c = ool.load(tmp_path / "m")
    assert isinstance(c, GIMCCV) and c.best_params_ == a.best_params_
    for key, v in a.cv_results_.items():
        if key == "params":
            assert c.cv_results_[key] == v
        else:
            np.testing.assert_array_equal(c.cv_results_[key], v)
    np.testing.assert_array_equal(c.predict_topk(X, 2)[0], a.predict_topk(X, 2)[0])
    b.save(tmp_path / "n")
    assert not hasattr(ool.load(tmp_path / "n"), "best_estimator_")


def test_local_cluster_equals_threaded(rng, cluster_client):
    X, Y = _ml_data(rng, n=150, d=6, L=9)
    kw = dict(SMALL, cv=3, block_rows=50, refit=False, max_iter=2, alphas=[1.0])
    a = GIMCCV(**kw).fit(X, Y)
    with dask.config.set(scheduler=cluster_client):
        b = GIMCCV(**kw).fit(X, Y)
    np.testing.assert_array_equal(_splits(a), _splits(b))
    assert a.n_passes_ == b.n_passes_


@pytest.mark.parametrize(
    "kw,exc,words",
    [
        (dict(alphas=[1.0, -1.0]), ValueError, "alphas"),
        (dict(alphas=[]), ValueError, "alphas"),
        (dict(alphas=[1.0, 1.0]), ValueError, "repeat"),
        (dict(alphas=3.0), TypeError, "alphas"),
        (dict(gamma_scales=[0.5, float("nan")]), ValueError, "gamma_scales"),
        (dict(gamma_scales=["a"]), TypeError, "gamma_scales"),
        (dict(gammas=[0.1]), ValueError, "exactly one"),
        (dict(gamma_scales=None), ValueError, "exactly one"),
        (dict(max_iter=-1), ValueError, "max_iter"),
        (dict(max_iter=2.5), TypeError, "max_iter"),
        (dict(cv=1), ValueError, "cv"),
        (dict(cv=1000), ValueError, "cv"),
        (dict(cv=np.zeros(7, int)), ValueError, "cv"),
        (dict(scoring="p@0"), ValueError, "metric"),
        (dict(scoring="p@1,p@3"), ValueError, "scoring"),
        (dict(n_features_map=0), ValueError, "n_features_map"),
        (dict(batch_bytes=0), ValueError, "batch_bytes"),
    ],
)
def test_bad_grid_is_a_clear_error_before_any_work(rng, kw, exc, words):
    X, Y = _ml_data(rng, n=30, d=6, L=9)
    calls = []

    def counting(dsk, keys, **kwargs):
        calls.append(1)
        return dask.get(dsk, keys, **kwargs)

    params = dict(SMALL, cv=3) | kw
    with dask.config.set(scheduler=counting), pytest.raises(exc, match=words):
        GIMCCV(**params).fit(X, Y)
    assert not calls


def test_imc_grid_costs_two_passes_and_lnys_store_equals_memory(rng, tmp_path):
    X, Y = _ml_data(rng, n=150, d=6, L=9)
    imc = GIMCCV(cv=3, learn_features=False, refit=False, **SMALL).fit(X, Y)
    assert imc.n_passes_ == 2  # per-fold statistics, then every (gamma, alpha, fold) scored
    with ool.DatasetWriter(str(tmp_path / "d.zarr"), block_rows=40) as w:
        w.add_dense("X", n_cols=X.shape[1], dtype="float64")
        w.add_csr("Y", n_cols=Y.shape[1], dtype="float64")
        w.append(X=X, Y=Y)
    ds = ool.open_dataset(str(tmp_path / "d.zarr"))
    kw = dict(SMALL, features="nystrom", cv=3, refit=False, max_iter=2)
    a = GIMCCV(**kw).fit(ds)  # landmarks read from the store's fold rows
    b = GIMCCV(**kw).fit(X, Y)
    np.testing.assert_allclose(_splits(a), _splits(b), atol=1e-12)


def test_cv_table(rng):
    X, Y = _ml_data(rng, n=150, d=6, L=9)
    cv = GIMCCV(cv=3, refit=False, **SMALL).fit(X, Y)
    rows = cv.cv_table()
    assert len(rows) == 4 and rows[0]["rank"] == 1
    assert rows[0]["mean_test_score"] == cv.best_score_
    assert [r["mean_test_score"] for r in rows] == sorted(
        (r["mean_test_score"] for r in rows), reverse=True
    )
    text = cv.format_cv_table()
    assert "gamma_scale" in text and str(cv.best_params_["max_iter"]) in text


def test_benchmark_body_tiny(tmp_path):
    from benchmarks import gimc_cv

    out = gimc_cv.main(
        [
            "--tiny",
            "--folds",
            "2",
            "--m",
            "8",
            "--gamma-scales",
            "0.5",
            "1",
            "--alphas",
            "1",
            "--max-iter",
            "3",
            "--json",
            str(tmp_path / "r.json"),
        ]
    )
    assert out["separate_fits"]["max_abs_diff_vs_cv_results"] < 1e-5
    assert out["ratio_separate_over_gimccv"]["passes"] > 1


@pytest.mark.parametrize("learn", [True, False])
def test_shared_initial_statistics_equal_separate_fits(rng, monkeypatch, learn):
    # > 1000 training rows per fold: every fold draws the same Fourier U0, so one pass returns
    # per-fold statistics and fold k trains on (total - own)
    from ooc_lowrank.gimc import cv as cvmod

    calls = []
    real = cvmod._own_stats
    monkeypatch.setattr(cvmod, "_own_stats", lambda *a: calls.append(1) or real(*a))
    X, Y = _ml_data(rng, n=1600, d=5, L=6)
    kw = dict(SMALL, max_iter=2, learn_features=learn, cv=3, refit=False)
    cv = GIMCCV(**kw).fit(X, Y)
    assert len(calls) == 2  # one per gamma
    fold = kfold_ids(X.shape[0], 3, SMALL["random_state"])
    np.testing.assert_allclose(_splits(cv), _separate(cv, X, Y, fold, "p@1"), atol=1e-12)


def test_scores_do_not_pin_pass_results(rng, monkeypatch):
    # a score kept as a view of a pass's flat result kept that whole result (all the fits'
    # statistics) alive: +1 GB per minute on Bibtex at m = 500
    from ooc_lowrank.gimc import cv as cvmod

    made = []

    class Recorded(cvmod._Fit):
        def __init__(self, *a):
            super().__init__(*a)
            made.append(self)

    monkeypatch.setattr(cvmod, "_Fit", Recorded)
    X, Y = _ml_data(rng, n=150, d=6, L=9)
    GIMCCV(**dict(SMALL, cv=3, block_rows=50, refit=False, max_iter=2)).fit(X, Y)
    assert made and all(h.base is None for f in made for h in f.history.values())
