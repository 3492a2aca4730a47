"""GIMC ``alpha="auto"`` (issue 24): the ridge weight of frozen features (IMC-RFF / IMC-NYS)
chosen by leave-one-out top-1 hits on the training rows, against a brute-force NumPy twin."""

from __future__ import annotations

import naive_gimc as nv
import numpy as np
import pytest
import scipy.sparse as sp

from ooc_lowrank.gimc import GIMC, core


def _data(rng, n=240, d=6, L=9):
    X = rng.standard_normal((n, d))
    S = np.cos(X @ rng.standard_normal((d, L))) + 0.5 * rng.standard_normal((n, L))
    A = (S > 0.7).astype(float)
    A[3] = 0.0  # a row without labels
    return X, sp.csr_matrix(A)


def _loo_rates_naive(Phi, A, alphas, stride):
    """Leave-one-out top-1 rate per alpha by refitting the ridge without each scored row."""
    G, B = Phi.T @ Phi, Phi.T @ A
    rows = np.arange(0, Phi.shape[0], stride)
    rates = []
    for a in alphas:
        hits = 0.0
        for i in rows:
            p = Phi[i]
            W = np.linalg.solve(G - np.outer(p, p) + a * np.eye(G.shape[0]), B - np.outer(p, A[i]))
            hits += A[i, np.argmax(p @ W)]
        rates.append(hits / rows.size)
    return np.array(rates)


@pytest.mark.parametrize("block_rows", [None, 67])
def test_auto_alpha_is_the_loo_best_of_a_naive_refit(rng, monkeypatch, block_rows):
    monkeypatch.setattr(core, "LOO_ROWS", 80)  # every 3rd of 240 rows; blocks of 67 rows
    X, Y = _data(rng)                           # start off the stride
    g = GIMC(n_features_map=15, learn_features=False, alpha="auto", random_state=0,
             block_rows=block_rows).fit(X, Y)  # fmt: skip
    Phi, A = nv.phi_lff(X, g.components_), Y.toarray()
    alphas = np.array(sorted(g.alpha_scores_))
    np.testing.assert_allclose(alphas, core.loo_alphas(Phi.T @ Phi), rtol=1e-10)
    naive = _loo_rates_naive(Phi, A, alphas, stride=3)
    np.testing.assert_allclose([g.alpha_scores_[a] for a in alphas], naive, atol=1e-12)
    assert len(set(naive)) > 1  # the candidates differ: the choice means something
    best = alphas[len(alphas) - 1 - np.argmax(naive[::-1])]  # ties: the largest alpha
    assert g.alpha_ == pytest.approx(best, rel=1e-12)
    W = np.linalg.solve(Phi.T @ Phi + g.alpha_ * np.eye(Phi.shape[1]), Phi.T @ A)
    np.testing.assert_allclose(g.coef_, W, rtol=1e-6, atol=1e-8)
    assert g.n_passes_ == 2  # statistics, then the selection pass


def test_auto_alpha_multiclass_and_chunk_invariance(rng):
    X, Y = _data(rng, n=200)
    y = np.asarray(Y.argmax(axis=1)).ravel() + 10  # class labels, not positions
    ref = GIMC(n_features_map=10, learn_features=False, alpha="auto", random_state=0).fit(X, y)
    g = GIMC(n_features_map=10, learn_features=False, alpha="auto", random_state=0,
             block_rows=53).fit(X, y)  # fmt: skip
    assert g.alpha_ == ref.alpha_ and g.alpha_scores_ == pytest.approx(ref.alpha_scores_)
    Phi = nv.phi_lff(X, g.components_)
    onehot = (y[:, None] == np.unique(y)[None, :]).astype(float)
    naive = _loo_rates_naive(Phi, onehot, sorted(g.alpha_scores_), stride=1)
    np.testing.assert_allclose([g.alpha_scores_[a] for a in sorted(g.alpha_scores_)], naive,
                               atol=1e-12)  # fmt: skip


def test_auto_alpha_with_learned_features_is_the_default_weight(rng):
    X, Y = _data(rng, n=150)
    kw = dict(n_features_map=8, max_iter=3, random_state=0)
    g = GIMC(alpha="auto", **kw).fit(X, Y)
    ref = GIMC(alpha=1.0, **kw).fit(X, Y)
    assert g.alpha_ == 1.0 and g.alpha_scores_ == {}
    np.testing.assert_array_equal(g.coef_, ref.coef_)


class _Learns:
    learns = True


def test_auto_alpha_refused_by_the_core_for_learned_features():
    with pytest.raises(ValueError, match='alpha="auto".*learn_features=False'):
        core._select_alpha(None, None, None, _Learns(), 2, False, [(np.eye(2), np.zeros((1, 2)))],
                           None)  # fmt: skip


def test_bad_alpha_string_names_the_fix():
    with pytest.raises(TypeError, match='alpha.*alpha="auto"'):
        GIMC(alpha="best").fit(np.zeros((4, 2)) + np.arange(4)[:, None], np.array([0, 1, 0, 1]))


def test_auto_alpha_above_the_budget_takes_the_fallback(rng, monkeypatch):
    monkeypatch.setattr(core, "LOO_MAX_BYTES", 8 * 20 * 9 - 1)  # D = 20 features x 9 labels
    X, Y = _data(rng, n=80)
    g = GIMC(n_features_map=10, learn_features=False, random_state=0).fit(X, Y)
    assert g.alpha_ == core.AUTO_ALPHA_FALLBACK and g.alpha_scores_ == {} and g.n_passes_ == 1


def test_auto_alpha_with_frozen_nystrom_features(rng, monkeypatch):
    monkeypatch.setattr(core, "LOO_ROWS", 50)  # every 3rd of 150 rows
    X, Y = _data(rng, n=150)
    g = GIMC(features="nystrom", n_features_map=12, learn_features=False, random_state=0).fit(X, Y)
    Phi, A = nv.phi_spec(X, g.components_, g.spec_), Y.toarray()
    alphas = np.array(sorted(g.alpha_scores_))
    naive = _loo_rates_naive(Phi, A, alphas, stride=3)
    np.testing.assert_allclose([g.alpha_scores_[a] for a in alphas], naive, atol=1e-12)
    W = np.linalg.solve(Phi.T @ Phi + g.alpha_ * np.eye(Phi.shape[1]), Phi.T @ A)
    np.testing.assert_allclose(g.coef_, W, rtol=1e-6, atol=1e-8)


def test_auto_alpha_sparse_float32_rows_normalized_same_for_any_chunking(rng):
    X, Y = _data(rng, n=200)
    Xs = sp.csr_matrix(np.where(X > 0.5, X, 0.0).astype(np.float32))
    kw = dict(n_features_map=10, learn_features=False, normalize_rows=True, random_state=0)
    ref = GIMC(**kw).fit(Xs, Y)
    g = GIMC(block_rows=61, **kw).fit(Xs, Y)
    # float32 blocks: the Gram (hence the candidates' scale) differs by rounding per chunking
    assert g.alpha_ == pytest.approx(ref.alpha_, rel=1e-6) and ref.alpha_scores_
    np.testing.assert_allclose(list(g.alpha_scores_), list(ref.alpha_scores_), rtol=1e-6)
    np.testing.assert_array_equal(list(g.alpha_scores_.values()), list(ref.alpha_scores_.values()))
    np.testing.assert_allclose(g.coef_, ref.coef_, rtol=1e-4, atol=1e-6)


def _widths_fit(X, Y, monkeypatch, **kw):
    """A fit scoring the extra kernel width (the size gate opened) and the same fit with the
    gate closed (its ``components_`` are the draw at ``gamma_scale``)."""
    monkeypatch.setattr(core, "LOO_ROWS", 80)
    monkeypatch.setattr(core, "WIDTH_ROWS_PER_COST", 0)
    g = GIMC(n_features_map=15, learn_features=False, random_state=0, **kw).fit(X, Y)
    monkeypatch.setattr(core, "WIDTH_ROWS_PER_COST", 10**9)
    base = GIMC(n_features_map=15, learn_features=False, random_state=0, **kw).fit(X, Y)
    return g, base


@pytest.mark.parametrize("block_rows", [None, 67])
def test_auto_alpha_scores_the_median_width_jointly(rng, monkeypatch, block_rows):
    X, Y = _data(rng)
    g, base = _widths_fit(X, Y, monkeypatch, block_rows=block_rows)
    A = Y.toarray()
    assert base.gamma_scores_ == {} and base.n_passes_ == g.n_passes_ == 2  # no extra pass
    g0 = base.gamma_[0]
    assert sorted(g.gamma_scores_) == pytest.approx([g0, g0 / base.gamma_scale])
    rates = {}
    for gam in sorted(g.gamma_scores_):  # U scaled by sqrt(gamma / gamma_0): the same draw
        Phi = nv.phi_lff(X, base.components_ * np.sqrt(gam / g0))
        alphas = core.loo_alphas(Phi.T @ Phi)
        rates[gam] = (alphas, _loo_rates_naive(Phi, A, alphas, stride=3))
        assert g.gamma_scores_[gam] == pytest.approx(rates[gam][1].max(), abs=1e-12)
    best = max(rates, key=lambda k: (rates[k][1].max(), -k))  # ties: the default width
    assert g.gamma_ == pytest.approx([best], rel=1e-12)
    alphas, naive = rates[best]
    assert g.alpha_ == pytest.approx(alphas[len(alphas) - 1 - np.argmax(naive[::-1])], rel=1e-12)
    np.testing.assert_allclose([g.alpha_scores_[a] for a in sorted(g.alpha_scores_)], naive,
                               atol=1e-12)  # fmt: skip
    np.testing.assert_allclose(g.components_, base.components_ * np.sqrt(best / g0), rtol=1e-12)
    Phi = nv.phi_lff(X, g.components_)
    W = np.linalg.solve(Phi.T @ Phi + g.alpha_ * np.eye(Phi.shape[1]), Phi.T @ A)
    np.testing.assert_allclose(g.coef_, W, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(g.decision_function(X), Phi @ W, rtol=1e-6, atol=1e-8)


def test_the_median_width_wins_when_its_leave_one_out_rate_is_higher(rng, monkeypatch):
    # labels of a narrow RBF structure: the median heuristic's width beats 1/8 of it
    X = rng.standard_normal((300, 4))
    C = rng.standard_normal((12, 4))
    y = np.argmin(((X[:, None, :] - C[None]) ** 2).sum(-1), axis=1)
    g, base = _widths_fit(X, y, monkeypatch)
    assert g.gamma_[0] == pytest.approx(base.gamma_[0] / base.gamma_scale)
    assert g.gamma_scores_[g.gamma_[0]] > g.gamma_scores_[base.gamma_[0]]
    assert g.score(X, y) >= base.score(X, y)


def test_width_selection_needs_the_median_heuristic_and_frozen_fourier(rng, monkeypatch):
    monkeypatch.setattr(core, "WIDTH_ROWS_PER_COST", 0)
    X, Y = _data(rng, n=120)
    kw = dict(n_features_map=8, random_state=0)
    for extra in ({"gamma": 0.3}, {"features": "nystrom", "learn_features": False},
                  {"gamma_scale": 1.0, "learn_features": False}, {"alpha": 0.5,
                  "learn_features": False}):  # fmt: skip
        g = GIMC(**kw, **extra).fit(X, Y)
        assert g.gamma_scores_ == {}, extra
    assert GIMC(**kw, learn_features=False).fit(X, Y).gamma_scores_  # the gate is open


def test_width_selection_size_gate():
    n_min = core.WIDTH_ROWS_PER_COST * (400 + core.LOO_ROWS)
    assert core.width_selection(n_min, 400) and not core.width_selection(n_min - 1, 400)
    assert not core.width_selection(4880, 1000)  # the Bibtex shape: fixed work dominates
    assert core.width_selection(32_000, 400)  # the demo shape


def test_estimate_counts_the_widths_statistics(rng, monkeypatch):
    X, Y = _data(rng, n=120)
    kw = dict(n_features_map=20, learn_features=False, random_state=0)
    closed = GIMC(**kw).estimate(X, Y)
    monkeypatch.setattr(core, "WIDTH_ROWS_PER_COST", 0)
    opened = GIMC(**kw).estimate(X, Y)
    D, L = 40, Y.shape[1]  # the first pass's accumulator: a (D, D) Gram and (L, D) per width
    assert opened["reduce_bytes_per_worker"] - closed["reduce_bytes_per_worker"] == (
        8 * (D * D + L * D)
    )
    assert opened["n_trials"] == closed["n_trials"] and opened["max_passes"] == closed["max_passes"]


def test_eigh_gram_leaves_the_gram_intact(rng):
    P = rng.standard_normal((30, 6))
    for dt in (np.float64, np.float32):
        G = P.T @ P
        ref = G.copy()
        s, Q = core.eigh_gram(G, dt)
        np.testing.assert_array_equal(G, ref)
        assert Q.dtype == dt and s.dtype == np.float64
        np.testing.assert_allclose((Q.astype(float) * s) @ Q.T.astype(float), ref,
                                   rtol=0, atol=1e-4 * np.abs(ref).max())  # fmt: skip
