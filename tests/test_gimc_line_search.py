"""GIMC's line search (SPEC 1.3, 5.3): trials and passes counted, the step rules, and the
time model's trial terms (issue 25)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp

from ooc_lowrank import _estimate
from ooc_lowrank.gimc import GIMC, core


def _ml_data(seed=0, n=300, d=6, L=8):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    S = np.cos(X @ rng.standard_normal((d, L))) + 0.3 * rng.standard_normal((n, L))
    return X, sp.csr_matrix((S > 0.8).astype(float))


_ORIG = (core.reduced_objective, core.fit_gimc, core.first_trial)


def _fit(monkeypatch, rule="quadratic", n_trials=1, first_scale=None, capped=False, **kw):
    """A tiny GIMC fit; returns (estimator, FitResult, trials judged per iteration counted
    from outside).  ``first_scale``: the first iteration's first trial is that many times
    today's (a start far too long), then cut to :func:`core.objective_step_cap` only when
    ``capped``."""
    judged, per_iter, got = [0], [], {}
    orig_ro, orig_fit, orig_first = _ORIG  # not an earlier call's wrappers

    def counting(*a, **k):
        judged[0] += 1
        return orig_ro(*a, **k)

    def callback(it, elapsed, f):
        if it:
            per_iter.append(judged[0])
            judged[0] = 0

    def fit(*a, **k):
        got["res"] = orig_fit(*a, **k)
        return got["res"]

    def first(U, gnorm2, eta_next, f=None):
        if eta_next is not None:
            return orig_first(U, gnorm2, eta_next, f)
        eta = orig_first(U, gnorm2, eta_next) * first_scale
        return min(eta, core.objective_step_cap(f, gnorm2)) if capped else eta

    monkeypatch.setattr(core, "reduced_objective", counting)
    monkeypatch.setattr(core, "fit_gimc", fit)
    monkeypatch.setattr(core, "STEP_RULE", rule)
    if first_scale is not None:
        monkeypatch.setattr(core, "first_trial", first)
    X, Y = _ml_data()
    params = dict(n_features_map=6, max_iter=5, tol=0.0, n_trials=n_trials, random_state=0)
    est = GIMC(callback=callback, **{**params, **kw}).fit(X, Y)
    return est, got["res"], per_iter


@pytest.mark.parametrize("n_trials", [1, 3])
def test_trials_per_iteration_are_counted_and_give_the_passes(monkeypatch, n_trials):
    """``FitResult.trials`` are the trials judged (counted from outside) and
    ``_estimate.gimc_passes`` of them is the fit's own pass count."""
    est, res, per_iter = _fit(monkeypatch, n_trials=n_trials, first_scale=64.0)
    assert res.trials == per_iter  # every judged trial counted, in its iteration
    assert len(res.trials) == est.n_iter_ == 5
    assert res.trials[0] >= 2  # a first trial 64x too long is rejected
    passes = 1 + est.n_iter_ + sum(math.ceil(t / n_trials) for t in res.trials)
    assert est.n_passes_ == passes == _estimate.gimc_passes(est.n_iter_, res.trials, n_trials)
    X, Y = _ml_data()
    assert est.n_passes_ <= est.estimate(X, Y)["max_passes"]


def _armijo_trials(rule, f0, G, c, eta0, monkeypatch):
    """Trials the line search makes on the exact quadratic ``f(eta) = f0 - eta G + c eta^2 / 2``
    (slope ``-G``, ``G`` = ||g||^2) from ``eta0``, one trial per pass."""
    monkeypatch.setattr(core, "STEP_RULE", rule)
    eta, n = eta0, 0
    while n < core.MAX_TRIALS:
        n += 1
        f1 = f0 - eta * G + 0.5 * c * eta * eta
        if f1 <= f0 - core.C1 * eta * G:
            return n, eta
        eta = core.backtrack(eta, f0, f1, G)
    return n, None


def test_backtracking_on_a_quadratic_known_trials(monkeypatch):
    # the minimizer is eta* = G / c = 1; Armijo accepts eta <= 2 (1 - C1)
    f0, G, c = 10.0, 4.0, 4.0
    # halving (SPEC 5.3): 100 -> 50 -> ... -> 1.5625, the 7th trial
    n, eta = _armijo_trials("quadratic", f0, G, c, 100.0, monkeypatch)
    assert (n, eta) == (7, 100.0 / 64)
    # interpolation: 100 -> 10 (the model's 1 clipped to 0.1 x 100) -> 1 (exact on a quadratic)
    n, eta = _armijo_trials("interp", f0, G, c, 100.0, monkeypatch)
    assert n == 3 and eta == pytest.approx(1.0)
    # a first trial Armijo accepts is one trial under both rules
    for rule in ("quadratic", "interp"):
        assert _armijo_trials(rule, f0, G, c, 1.5, monkeypatch) == (1, 1.5)
    # a non-finite trial objective: halving, or the clip's 10x cut
    monkeypatch.setattr(core, "STEP_RULE", "quadratic")
    assert core.backtrack(8.0, f0, np.inf, G) == 4.0
    monkeypatch.setattr(core, "STEP_RULE", "interp")
    assert core.backtrack(8.0, f0, np.inf, G) == pytest.approx(0.8)


def test_next_first_trial_is_the_safe_quadratic_minimizer_capped_at_twice_the_step():
    # SPEC 5.3's "next initial eta is 2x the last accepted one" is the cap; below it 3/4 of the
    # minimizer of the quadratic through f, the slope and the accepted trial
    f0, G, c = 10.0, 4.0, 4.0  # minimizer 1
    for eta in (0.3, 1.0, 1.9):
        f1 = f0 - eta * G + 0.5 * c * eta * eta
        assert core.next_trial(eta, f0, f1, G) == pytest.approx(min(0.75, 2 * eta))
    assert core.next_trial(0.1, f0, f0 - 0.1 * G, G) == pytest.approx(0.2)  # no curvature: 2x


def test_default_rule_trials_are_halvings_whatever_the_grouping(monkeypatch):
    # the default rule's trials are eta0 / 2^k (SPEC 5.3), so the fit does not depend on how
    # many trials a pass holds; only the passes differ
    fits = {t: _fit(monkeypatch, n_trials=t, first_scale=64.0) for t in (1, 4)}
    (e1, r1, _), (e4, r4, _) = fits[1], fits[4]
    assert r1.trials == r4.trials and r1.trials[0] >= 2
    np.testing.assert_array_equal(e1.objective_, e4.objective_)
    assert e4.n_passes_ < e1.n_passes_
    first = r1.step_sizes[0]
    eta0 = first * 2 ** (r1.trials[0] - 1)
    assert np.log2(eta0 / first) == r1.trials[0] - 1  # exact halvings


def test_interp_rule_cuts_a_long_first_trial_in_fewer_trials(monkeypatch):
    _, halving, _ = _fit(monkeypatch, first_scale=1024.0)
    est, interp, per_iter = _fit(monkeypatch, rule="interp", first_scale=1024.0)
    assert interp.trials == per_iter
    assert interp.trials[0] < halving.trials[0]
    assert np.all(np.diff(est.objective_) <= 0)  # still descent steps only


def test_time_model_gives_the_fit_at_typical_and_slow_search_trials():
    e = {"n_features": 50, "n_params": 20, "n_phi": 20, "n_labels": 30, "n_trials": 1,
         "n_blocks": 4, "n_rows": 4000, "dtype": "float32", "iterations": 10}  # fmt: skip
    cal = {"rows": 1000, "big": False, "fresh_bytes_per_second": 1e9,
           "first_touch_bytes_per_second": 1e9, "grad_block_seconds": 0.5,
           "stats_block_seconds": 0.25, "grad_driver_seconds": 0.1,
           "stats_driver_seconds": 0.05, "judge_seconds": 0.2, "step_seconds": 0.01,
           "source": "test"}  # fmt: skip
    t = _estimate._gimc_calibrated_time(e, cal, 0.0, 0.0, 2, 6e8)
    assert t["trials_per_iteration"] == _estimate.TYPICAL_TRIALS
    extra = _estimate.SLOW_SEARCH_TRIALS - _estimate.TYPICAL_TRIALS
    assert t["seconds_per_fit_slow_search"] == pytest.approx(
        t["seconds_per_fit"] + 10 * extra * t["seconds_per_trial"])
    assert t["seconds_per_fit"] == pytest.approx(t["setup_seconds"]
                                                 + 10 * t["seconds_per_iteration"])
    assert f"{_estimate.SLOW_SEARCH_TRIALS:g} trials per iteration" in t["assumptions"]


def test_step_rule_and_grad_precision_benchmarks_tiny(tmp_path):
    """``benchmarks/gimc_step_rule.py`` and ``gimc_grad_precision.py`` at tiny size (they
    cannot rot); the float32 gradient of a tiny problem agrees with the float64 one."""
    import json

    from benchmarks import gimc_grad_precision, gimc_step_rule

    out = tmp_path / "s.json"
    small = ["--del-rows", "300", "--del-features", "2000", "--del-labels", "200",
             "--del-topics", "5", "--del-m", "8", "--max-iter", "2"]  # fmt: skip
    r = gimc_step_rule.main(["--only", "delicious", *small, "--out", str(out)])
    rec = json.loads(out.read_text())["results"]["delicious"]
    assert set(core.STEP_RULES) <= set(rec) and rec == r["results"]["delicious"]
    for rule in core.STEP_RULES:
        assert rec[rule]["n_passes"] == 1 + rec[rule]["n_iter"] + sum(rec[rule]["trials"])
    g = gimc_grad_precision.main(["--rows", "300", "--features", "2000", "--labels", "200",
                                  "--topics", "5", "--m", "8", "--iters", "1",
                                  "--out", str(tmp_path / "g.json")])  # fmt: skip
    assert g["relative_error"] < 1e-3 and g["cosine"] > 0.999
    assert set(g["parts"]) == {"fourier", "nystrom"}


def test_rejection_bound_holds_on_quadratics_and_is_tight_at_the_armijo_edge():
    # f(eta) = f0 - eta G + c eta^2 / 2: the best decrease is G^2 / (2c); any rejected trial's
    # bound is at least that, and the bound at the largest accepted step is within 1 % of it
    f0 = 10.0
    for G, c in ((4.0, 4.0), (1e-3, 7.0), (50.0, 0.01)):
        best = G * G / (2.0 * c)
        edge = 2.0 * (1.0 - core.C1) * G / c  # Armijo accepts eta <= edge
        for eta in (edge * 1.0001, edge * 3.0, edge * 1e3):
            f1 = f0 - eta * G + 0.5 * c * eta * eta
            assert f1 > f0 - core.C1 * eta * G  # rejected
            assert core.rejection_bound(eta, G) >= best
        assert core.rejection_bound(edge, G) == pytest.approx(best, rel=1e-2)


def test_a_rejection_whose_bound_is_below_tol_stops_the_fit_without_more_passes(monkeypatch):
    # wiring: once a rejected trial's bound is <= tol |f| the fit stops (converged, no step);
    # tol = 0 never stops on it (benchmarks run every iteration with --tol 0)
    monkeypatch.setattr(core, "rejection_bound", lambda eta, gnorm2: 1e-300)
    est, res, per_iter = _fit(monkeypatch, first_scale=64.0, tol=1e-12)
    assert res.converged and est.n_iter_ == 0 and res.trials == []
    assert est.n_passes_ == 1 + 1 + 1  # the statistics pass, one gradient pass, one trial
    est0, res0, _ = _fit(monkeypatch, first_scale=64.0, tol=0.0)
    assert est0.n_iter_ == 5 and res0.trials[0] >= 2


def test_objective_step_cap_bounds_the_minimizer_of_nonnegative_quadratics_and_saves_trials(
    monkeypatch,
):
    # f(eta) = f0 - eta G + c eta^2 / 2 with a minimum >= 0 has its minimizer G / c <= 2 f0 / G
    for f0, G in ((10.0, 4.0), (3.0, 1e-2), (1e6, 1e8)):
        c_min = G * G / (2.0 * f0)  # the flattest such quadratic: minimum exactly 0
        for c in (c_min, 3.0 * c_min, 1e3 * c_min):
            assert G / c <= core.objective_step_cap(f0, G) * (1 + 1e-12)
        assert G / c_min == pytest.approx(core.objective_step_cap(f0, G))
    assert core.first_trial(np.ones((3, 2)), 4.0, 10.0, f=1.0) == 0.5  # capped
    assert core.first_trial(np.ones((3, 2)), 4.0, 0.1, f=1.0) == 0.1  # below the cap
    # a first trial 1024x too long: the cap removes most of its halvings, same descent
    _, long, _ = _fit(monkeypatch, first_scale=1024.0)
    est, capped, per_iter = _fit(monkeypatch, first_scale=1024.0, capped=True)
    assert capped.trials == per_iter and capped.trials[0] < long.trials[0]
    assert np.all(np.diff(est.objective_) <= 0)
