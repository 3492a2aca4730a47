"""What a GIMCClustering fit costs (issue 24: Segment's default fit under 5 s), counted in passes.

Pass counts are the cost measure here, never seconds: the engine's per-pass overhead for
in-memory inputs (no Dask graph built on the direct path), the one-pass Armijo trial and the
one-pass feature gradient of the IMC core, and what the ``alpha="auto"`` candidates share.
Where a change is a pure refactor the results are compared with the former path's bits.
"""

from __future__ import annotations

import dask
import numpy as np
import pytest

from ooc_lowrank import engine
from ooc_lowrank.imc import InductiveMatrixCompletion, core
from ooc_lowrank.imc.clustering import GIMCClustering, sample_constraints
from ooc_lowrank.imc.estimator import transposed


def test_in_memory_inputs_build_no_dask_array_on_the_direct_path(monkeypatch):
    """A NumPy input wrapped and aligned for a direct-path pass builds no Dask array (IMC wraps
    its factor ``P`` in every pass: about 2 ms of graph construction each, before); the graph
    path, which needs one, builds it on first use and gives the same sum."""
    rng = np.random.default_rng(0)
    X, w = rng.standard_normal((300, 4)), rng.standard_normal(300)
    built = []
    orig = engine._task_per_block
    monkeypatch.setattr(engine, "_task_per_block", lambda *a, **k: built.append(1) or orig(*a, **k))
    bx = engine.as_blocked(X, block_rows=70)
    direct = engine.map_reduce(_gram_of_rows, bx, w[:, None], shapes=[(4,)])[0]
    assert built == [] and bx._dask is None
    with dask.config.set(scheduler="sync"):  # a set scheduler: the graph path
        graph = engine.map_reduce(_gram_of_rows, bx, w[:, None], shapes=[(4,)])[0]
    assert built and bx._dask is not None
    np.testing.assert_array_equal(direct, graph)
    np.testing.assert_allclose(direct, X.T @ w, rtol=1e-12)


def _gram_of_rows(Xb, wb):
    return (np.asarray(Xb, np.float64).T @ wb[:, 0],)


def _data(seed, n1=40, n2=31, d=5, frac=0.3):
    rng = np.random.default_rng(seed)
    X1, X2 = rng.standard_normal((n1, d)), rng.standard_normal((n2, d))
    r, c = np.nonzero(rng.random((n1, n2)) < frac)
    return X1, X2, (r, c, rng.standard_normal(r.size))


def _problem(block_rows, fuse, seed=0):
    X1, X2, trip = _data(seed)
    est = InductiveMatrixCompletion(
        row_map="fourier", col_map="fourier", n_features_map=6, learn_features=True,
        block_rows=block_rows, gamma=0.3,
    )  # fmt: skip
    obs, _, Br, Bc = est._prepare(trip, X1, X2, (X1.shape[0], X2.shape[0]))
    rng = np.random.default_rng(seed + 1)
    rows, cols = est._side("fourier", Br, rng), est._side("fourier", Bc, rng)
    obs_t = transposed(obs, block_rows) if fuse else None
    prob = core.Problem(obs, rows, cols, 0.3, obs_t)
    W = rng.standard_normal((rows.n_features, 3))
    H = rng.standard_normal((cols.n_features, 3))
    return prob, W, H, prob.project(rows, W), prob.project(cols, H)


def _spent(prob, fn, *a):
    p0 = prob.n_passes
    out = fn(*a)
    return out, prob.n_passes - p0


@pytest.mark.parametrize("block_rows", [None, 7])
@pytest.mark.parametrize("side", ["rows", "cols", "cols_without_obs_t"])
def test_one_pass_trial_gives_the_two_pass_trials_factor_and_loss(block_rows, side):
    """``Problem.trial`` (one pass over a side's features and its row-aligned observations)
    gives the bits of the former trial's X-pass (``project`` at the trial ``U``) and its loss
    (an Omega-pass) to rounding; the column side without the transposed observations keeps
    the two passes."""
    prob, W, H, P, Q = _problem(block_rows, fuse=side != "cols_without_obs_t")
    s, F, other = (prob.rows, W, Q) if side == "rows" else (prob.cols, H, P)
    U = s.U + 0.01 * np.random.default_rng(5).standard_normal(s.U.shape)
    (loss, Fn), passes = _spent(prob, prob.trial, s, U, F, other)
    assert passes == (2 if side == "cols_without_obs_t" else 1)
    Fn_old, p_proj = _spent(prob, prob.project, s, F, U)
    loss_old, p_loss = _spent(prob, prob.loss, *((Fn_old, Q) if side == "rows" else (P, Fn_old)))
    assert p_proj == p_loss == 1
    np.testing.assert_array_equal(Fn, Fn_old)
    np.testing.assert_allclose(loss, loss_old, rtol=1e-13)
    if side == "rows":  # the same blocks and sum order: the same bits
        assert loss == loss_old


@pytest.mark.parametrize("block_rows", [None, 7])
@pytest.mark.parametrize("side", ["rows", "cols", "cols_without_obs_t"])
@pytest.mark.parametrize("held", [False, True])
def test_one_pass_feature_gradient_matches_omega_pass_then_backprop(block_rows, side, held):
    """``Problem.feature_grad_loss``: the gradient w.r.t. ``U`` (or ``V``) and the loss in one
    pass, against the former Omega-pass (``R Q`` or ``R^T P``) then the gradient's X-pass;
    with the features held or recomputed; chunking does not change it beyond rounding."""
    prob, W, H, P, Q = _problem(block_rows, fuse=side != "cols_without_obs_t")
    s, F, own, other = (prob.rows, W, P, Q) if side == "rows" else (prob.cols, H, Q, P)
    if held:
        prob.features(s)
    (g, loss), passes = _spent(prob, prob.feature_grad_loss, s, F, own, other)
    assert passes == (2 if side == "cols_without_obs_t" else 1)
    if side == "rows":
        Z, loss_old = prob.omega_rows(P, Q, True)
    else:
        Z, loss_old = prob.omega_cols(P, Q, True)
    g_old = prob.feature_grad(s, Z, F)
    np.testing.assert_allclose(g, g_old, rtol=1e-12, atol=1e-12 * np.abs(g_old).max())
    np.testing.assert_allclose(loss, loss_old, rtol=1e-13)
    ref, *_ = _problem(None, fuse=True)
    s_ref = ref.rows if side == "rows" else ref.cols
    g_ref, loss_ref = ref.feature_grad_loss(s_ref, F, own, other)
    np.testing.assert_allclose(g, g_ref, rtol=1e-12, atol=1e-12 * np.abs(g_ref).max())
    np.testing.assert_allclose(loss, loss_ref, rtol=1e-13)


def _blobs(seed=4, n=210, k=5, d=6):
    rng = np.random.default_rng(seed)
    y = np.repeat(np.arange(k), n // k)
    return rng.standard_normal((n, d)) * 0.6 + 3.0 * rng.standard_normal((k, d))[y], y


KW = dict(n_clusters=5, n_features_map=20, max_iter=4, tol=0.0, n_init=2, random_state=0)


def _count_costs(monkeypatch):
    """Spies on the feature step's passes: per call of ``trial`` / ``feature_grad_loss`` the
    passes it spent."""
    spent = {"trial": [], "feature_grad_loss": []}
    for name in spent:
        orig = getattr(core.Problem, name)

        def spy(self, *a, _orig=orig, _name=name, **k):
            p0 = self.n_passes
            out = _orig(self, *a, **k)
            spent[_name].append(self.n_passes - p0)
            return out

        monkeypatch.setattr(core.Problem, name, spy)
    return spent


def test_feature_steps_cost_one_pass_per_gradient_and_per_trial(monkeypatch):
    """With learned features each outer iteration spends, per side, one pass for the gradient
    and the loss and one per Armijo trial (the former step: an Omega-pass, the gradient's
    X-pass, then two passes per trial); the rest of the iteration is the two CG steps: the new
    factors are the CG's images (no projection pass each, before) and the features at the
    accepted parameters are those the trial computed (held, not computed again by the next CG
    step: one pass per accepted step before)."""
    X, y = _blobs()
    cons = sample_constraints(y, 10 * X.shape[0], random_state=0)
    spent = _count_costs(monkeypatch)
    m = GIMCClustering(alpha=1.0, **KW).fit(X, constraints=cons)
    imc = m.imc_
    assert spent["feature_grad_loss"] == [1] * (2 * imc.n_iter_)
    assert spent["trial"] and set(spent["trial"]) == {1}
    cg = int(imc.cg_iterations_.sum())
    accepted = int(np.count_nonzero(imc.step_sizes_))
    assert accepted > 0
    # init: 2 held features, 2 projections, the scale's and the objective's Omega-passes;
    # 2 preconditioner Grams; per iteration 2 CG gradients, 2 feature gradients; one per CG
    # product and per trial
    assert imc.n_passes_ == 6 + 2 + 4 * imc.n_iter_ + cg + len(spent["trial"])
    # the factors followed W and H through the CG images: Phi W to rounding
    np.testing.assert_allclose(m.imc_.transform_rows(X), imc.row_factors_, rtol=1e-9,
                               atol=1e-9 * np.abs(imc.row_factors_).max())  # fmt: skip
    np.testing.assert_allclose(m.imc_.transform_cols(X), imc.col_factors_, rtol=1e-9,
                               atol=1e-9 * np.abs(imc.col_factors_).max())  # fmt: skip


@pytest.mark.parametrize("side", ["rows", "cols", "cols_without_obs_t"])
@pytest.mark.parametrize("precond", [False, True])
def test_cg_image_follows_the_iterate(side, precond):
    """``cg(image=Phi x)`` with products that return the direction's image gives the iterate of
    the plain CG bit for bit and ``Phi x`` of it to rounding, with no pass beyond the
    products (the X-pass that projected the CG's result is saved)."""
    prob, W, H, P, Q = _problem(7, fuse=side != "cols_without_obs_t")
    prob.lam = 0.3
    if side == "rows":
        s, x0, img, grad, hvp = prob.rows, W, P, prob.grad_W(W, P, Q), prob.hvp_W
        other = {"Q": Q}
    else:
        s, x0, img, grad, hvp = prob.cols, H, Q, prob.grad_H(H, P, Q), prob.hvp_H
        other = {"P": P}
    pre = None
    if precond and side != "cols_without_obs_t":
        pw, ph = prob.preconditioners()
        pre = (pw.at(Q) if side == "rows" else ph.at(P))
    x1, it1 = core.cg(x0, -grad, lambda D: hvp(D, **other), 0.0, 4, pre)
    p0 = prob.n_passes
    x2, it2, img2 = core.cg(x0, -grad, lambda D: hvp(D, image=True, **other), 0.0, 4, pre,
                            image=img)  # fmt: skip
    per_product = 3 if side == "cols_without_obs_t" else 1
    assert prob.n_passes - p0 == per_product * it2 and it1 == it2 == 4
    np.testing.assert_array_equal(x1, x2)
    fresh = prob.project(s, x2)
    np.testing.assert_allclose(img2, fresh, rtol=1e-11, atol=1e-11 * np.abs(fresh).max())


def test_lam_candidates_and_refit_share_maps_initialization_and_features(monkeypatch):
    """``alpha="auto"``: the candidates after the first start from its feature maps, initial
    features, initialization and preconditioners (8 passes fewer each: 2 held features, 2
    projections, 2 Omega-passes, 2 Grams), the refit from the same maps and initial features
    (2 fewer); every fit gives the bits of a fit that makes its own."""
    from ooc_lowrank.imc.clustering import (
        HOLDOUT,
        SELECT_ITER,
        constraint_error,
        split_constraints,
    )

    X, y = _blobs()
    r, c, v = sample_constraints(y, 10 * X.shape[0], random_state=0)
    grid = (0.1, 0.5, 1.0)
    auto = GIMCClustering(alpha=grid, **KW).fit(X, constraints=(r, c, v))
    rs = np.random.RandomState(0)
    rs.randint(2**31 - 1), rs.randint(2**31 - 1)  # the model's and k-means' seeds
    tr, va = split_constraints(r.size, HOLDOUT, np.random.default_rng(rs.randint(2**31 - 1)))
    alone_passes = 1  # the selection's validation pass
    for lam in grid:
        alone = GIMCClustering(alpha=lam, **{**KW, "max_iter": min(KW["max_iter"], SELECT_ITER)})
        alone.fit(X, constraints=(r[tr], c[tr], v[tr]))
        assert constraint_error(alone.labels_, r[va], c[va], v[va]) == auto.alpha_scores_[lam]
        alone_passes += alone.imc_.n_passes_
    assert auto.selection_passes_ == alone_passes - 8 * (len(grid) - 1)
    fixed = GIMCClustering(alpha=auto.alpha_, **KW).fit(X, constraints=(r, c, v))
    np.testing.assert_array_equal(auto.imc_.objective_, fixed.imc_.objective_)
    np.testing.assert_array_equal(auto.embedding_, fixed.embedding_)
    assert auto.imc_.n_passes_ == fixed.imc_.n_passes_ - 2


def test_features_kept_from_the_accepted_trial_are_the_recomputed_ones(monkeypatch):
    """Holding the accepted trial's features (instead of computing them again in the next CG
    step's first pass) changes no bit of the fit and saves one pass per accepted step but the
    last iteration's (no CG step follows them)."""
    X, y = _blobs()
    cons = sample_constraints(y, 10 * X.shape[0], random_state=0)
    kept = GIMCClustering(alpha=1.0, **KW).fit(X, constraints=cons)
    monkeypatch.setattr(core.Problem, "keep_trial_features", lambda self, side: None)
    again = GIMCClustering(alpha=1.0, **KW).fit(X, constraints=cons)
    np.testing.assert_array_equal(kept.imc_.objective_, again.imc_.objective_)
    np.testing.assert_array_equal(kept.embedding_, again.embedding_)
    steps = again.imc_.step_sizes_
    saved = int(np.count_nonzero(steps[:-1]))
    assert saved > 0 and again.imc_.n_passes_ - kept.imc_.n_passes_ == saved
