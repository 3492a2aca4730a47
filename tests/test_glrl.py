"""GLRL / EGLRL / R1MP / nonsmooth GLRL: SPEC checks 16-23, estimator contract, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import naive_glrl as naive
import numpy as np
import pytest
import scipy.sparse as sp

import ooc_lowrank
from ooc_lowrank.glrl import GreedyLowRank, greedy_pursuit, top_triplet
from ooc_lowrank.glrl import core as glrl_core
from ooc_lowrank.glrl.losses import get_loss
from ooc_lowrank.storage import write_arrays


def _lowrank(rng, m=60, n=50, r=3, p=0.35, kind="real", noise=0.0):
    M = rng.standard_normal((m, r)) @ rng.standard_normal((r, n))
    mask = rng.random((m, n)) < p
    rows, cols = np.nonzero(mask)
    vals = M[rows, cols] + noise * rng.standard_normal(rows.size)
    if kind == "sign":
        vals = np.where(M[rows, cols] + 0.3 * rng.standard_normal(rows.size) >= 0, 1.0, -1.0)
    return M, rows, cols, vals


def _reduce(rows, cols, vals, shape, bounds=None):
    csr = naive.to_csr(rows, cols, vals, shape)
    return naive.serial_reduce(csr, bounds if bounds is not None else [0, shape[0]])


# ----------------------------------------------------------------------------- SPEC 17, 18
def test_power_method_vs_lapack(rng):  # SPEC check 17
    M, rows, cols, vals = _lowrank(rng, kind="sign")
    m, n = M.shape
    g = get_loss("logistic").grad(0.3 * rng.standard_normal(rows.size), vals)
    csr = naive.to_csr(rows, cols, g, (m, n))
    G = csr.toarray()

    def matvec(u, v):
        return G @ v, G.T @ u, np.zeros(3)

    u, s, v, info = top_triplet(matvec, m, n, n_iter=2000, tol=1e-13)
    Us, ss, Vts = np.linalg.svd(G)
    assert abs(s - ss[0]) / ss[0] < 1e-10
    assert 2 - abs(u @ Us[:, 0]) - abs(v @ Vts[0]) < 1e-8
    np.testing.assert_allclose(u @ G @ v, s, rtol=1e-12)  # returned value is the exact u^T G v


def test_power_method_with_lowrank_part_vs_lapack(rng):  # SPEC check 18 (deflation mat-vec)
    m, n = 40, 30
    G = sp.random(m, n, density=0.3, random_state=1).toarray()
    A, B, c = rng.standard_normal((m, 2)), rng.standard_normal((n, 2)), np.array([1.5, -0.7])
    D = G + A @ np.diag(c) @ B.T
    u, s, v, _ = top_triplet(
        lambda u, v: (G @ v, G.T @ u, np.zeros(3)),
        m,
        n,
        lowrank=[(A, c, B)],
        n_iter=3000,
        tol=1e-13,
    )
    assert abs(s - np.linalg.svd(D, compute_uv=False)[0]) < 1e-9 * s


def test_power_method_restarts_when_ones_is_in_the_null_space(rng):
    G = np.zeros((4, 4))
    G[0, 0], G[0, 1] = 1.0, -1.0  # G 1 = 0
    G[1, 0], G[1, 1] = -1.0, 1.0
    u, s, v, _ = top_triplet(
        lambda u, v: (G @ v, G.T @ u, np.zeros(3)), 4, 4, n_iter=200, tol=1e-12, rng=0
    )
    np.testing.assert_allclose(s, 2.0, rtol=1e-8)


def test_power_method_returns_a_chain_consistent_pair_near_sigma1():
    """Issue 13: the fused pass runs two interleaved chains; returning the mixed pair (u from
    one chain, v from the other) gave u^T G v far below sigma_1 on sign-like (sub)gradients
    whose row and column sums are near zero (MovieLens L1 after the bias start: 8.1 against
    22.4 after 20 passes).  Each chain's own pair has an exact value and converges."""
    rng = np.random.default_rng(0)
    m, n = 200, 300
    G = sp.random(
        m, n, density=0.05, random_state=1, data_rvs=lambda k: rng.choice([-1.0, 1.0], k)
    ).toarray()
    s1 = np.linalg.svd(G, compute_uv=False)[0]
    for n_iter in (10, 20):
        u, s, v, info = top_triplet(
            lambda u, v: (G @ v, G.T @ u, np.zeros(3)), m, n, n_iter=n_iter, tol=1e-3
        )
        assert s >= 0.9 * s1, (n_iter, s, s1)
        np.testing.assert_allclose(u @ G @ v, s, rtol=1e-12)  # exact value of the pair
        np.testing.assert_allclose(info["sparse_uv"], s, rtol=1e-12)
        np.testing.assert_allclose([np.linalg.norm(u), np.linalg.norm(v)], 1.0)


def test_power_method_sparse_uv_with_lowrank_part(rng):
    m, n = 40, 30
    G = sp.random(m, n, density=0.3, random_state=2).toarray()
    A, B, c = rng.standard_normal((m, 1)), rng.standard_normal((n, 1)), np.array([-0.8])
    u, s, v, info = top_triplet(
        lambda u, v: (G @ v, G.T @ u, np.zeros(3)), m, n, lowrank=[(A, c, B)], n_iter=7, tol=0.0
    )
    np.testing.assert_allclose(info["sparse_uv"], u @ G @ v, rtol=1e-12)
    np.testing.assert_allclose(s, u @ (G + A @ np.diag(c) @ B.T) @ v, rtol=1e-12)


# ----------------------------------------------------------------------------- SPEC 16, 19
@pytest.mark.parametrize("loss", ["square", "logistic", "huber"])
@pytest.mark.parametrize("l2", [0.0, 0.3])
@pytest.mark.parametrize(
    "greedy_l2, greedy_l1, n_fixed", [(0.0, 0.0, 0), (0.7, 0.0, 0), (0.7, 0.0, 2), (0.0, 1.3, 2)]
)
def test_full_refit_gradient_vs_fd(loss, l2, greedy_l2, greedy_l1, n_fixed, rng):  # SPEC 19
    M, rows, cols, vals = _lowrank(rng, kind="sign" if loss == "logistic" else "real")
    m, n = M.shape
    run = glrl_core._Counter(_reduce(rows, cols, vals, (m, n), [0, 17, 60]))
    U = np.linalg.qr(rng.standard_normal((m, 4)))[0]
    V = np.linalg.qr(rng.standard_normal((n, 4)))[0]
    fun = glrl_core.full_refit_objective(
        run, U, V, get_loss(loss).code, 1.0, l2, greedy_l2, n_fixed, greedy_l1
    )
    th = rng.standard_normal(4)
    if greedy_l1 > 0:  # greedy_l1 * sum(theta_g) is the penalty on theta_g >= 0
        th = np.abs(th)
    f0, g = fun(th)
    eps = 1e-4
    fd = np.array([(fun(th + eps * e)[0] - fun(th - eps * e)[0]) / (2 * eps) for e in np.eye(4)])
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("loss", ["square", "logistic", "huber"])
@pytest.mark.parametrize("l2", [0.0, 0.3])
@pytest.mark.parametrize("n_fixed", [0, 2])
@pytest.mark.parametrize("greedy_l2, greedy_l1", [(0.0, 0.0), (0.7, 0.0), (0.0, 1.3)])
def test_econ_refit_gradient_vs_fd(loss, l2, n_fixed, greedy_l2, greedy_l1, rng):  # SPEC 19
    M, rows, cols, vals = _lowrank(rng, kind="sign" if loss == "logistic" else "real")
    m, n = M.shape
    run = glrl_core._Counter(_reduce(rows, cols, vals, (m, n)))
    U = np.linalg.qr(rng.standard_normal((m, 4)))[0]
    V = np.linalg.qr(rng.standard_normal((n, 4)))[0]
    fun = glrl_core.econ_refit_objective(
        run, U, V, np.abs(rng.standard_normal(3)), get_loss(loss).code, 1.0, l2, n_fixed,
        greedy_l2, greedy_l1,
    )  # fmt: skip
    ab = np.array([0.9, -0.4])
    f0, g = fun(ab)
    eps = 1e-4
    fd = np.array([(fun(ab + eps * e)[0] - fun(ab - eps * e)[0]) / (2 * eps) for e in np.eye(2)])
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-6)


# ----------------------------------------------------------------------------- SPEC 20, 21
def test_greedy_step_guaranteed_decrease(rng):  # SPEC check 20
    M, rows, cols, vals = _lowrank(rng, kind="sign")
    m, n = M.shape
    res = greedy_pursuit(
        _reduce(rows, cols, vals, (m, n)),
        (m, n),
        loss="logistic",
        rank=1,
        refit="none",
        power_iter=500,
        power_tol=1e-12,
    )
    s = res.theta[0] * 0.25  # theta = s / L
    assert res.objective[0] - res.objective[1] >= s * s / (2 * 0.25) - 1e-9


@pytest.mark.parametrize("loss", ["square", "logistic", "huber"])
@pytest.mark.parametrize("refit", ["full", "economic", "none"])
@pytest.mark.parametrize("greedy_l2, greedy_l1", [(0.0, 0.0), (2.0, 0.0), (0.0, 3.0)])
def test_objective_never_increases(loss, refit, greedy_l2, greedy_l1, rng):  # SPEC check 21
    M, rows, cols, vals = _lowrank(rng, kind="sign" if loss == "logistic" else "real", noise=0.1)
    m, n = M.shape
    res = greedy_pursuit(
        _reduce(rows, cols, vals, (m, n), [0, 20, 21, 60]),
        (m, n),
        loss=loss,
        rank=6,
        refit=refit,
        l2=0.01 if loss == "huber" else 0.0,
        greedy_l2=greedy_l2,
        greedy_l1=greedy_l1,
    )
    obj = np.asarray(res.objective)
    assert np.all(np.diff(obj) <= 1e-9 * obj[0]), obj
    assert obj[-1] < obj[0]


def _start_plus_one_term(rng, m=9, n=7, a=6.0, sigma=4.0):
    """Fully observed ``O = a e f^T + sigma p q^T`` with unit ``e, f`` and ``p _|_ e``,
    ``q _|_ f``; the start ``X_0 = a e f^T`` (one term, exact)."""
    e, f = np.ones(m) / np.sqrt(m), np.ones(n) / np.sqrt(n)
    p = rng.standard_normal(m)
    p -= (p @ e) * e
    q = rng.standard_normal(n)
    q -= (q @ f) * f
    p, q = p / np.linalg.norm(p), q / np.linalg.norm(q)
    O = a * np.outer(e, f) + sigma * np.outer(p, q)
    rows, cols = np.nonzero(np.ones((m, n)))
    start = (e[:, None], f[:, None], np.array([a]))
    return _reduce(rows, cols, O[rows, cols], (m, n)), start


@pytest.mark.parametrize("refit", ["full", "economic"])
def test_greedy_l2_shrinks_only_the_greedy_terms(refit, rng):
    # square loss, O fully observed: after the start a e f^T the gradient is -sigma p q^T, the
    # greedy term is (p, q) and the penalized refit min 1/2 |O - X|^2 + lam/2 theta_1^2 has
    # theta = (a, sigma / (1 + lam)) in closed form; the whole-matrix l2 = lam instead gives
    # (a, sigma) / (1 + lam): it shrinks the start too.
    a, sigma, lam = 6.0, 4.0, 0.5
    red, start = _start_plus_one_term(rng, a=a, sigma=sigma)
    kw = dict(loss="square", rank=2, refit=refit, init_factors=start, lbfgs_iter=50,
              power_iter=200, power_tol=0.0)  # fmt: skip
    greedy = greedy_pursuit(red, (9, 7), greedy_l2=lam, **kw)
    np.testing.assert_allclose(greedy.theta, [a, sigma / (1 + lam)], rtol=1e-6)
    np.testing.assert_allclose(greedy.objective[-1], 0.5 * lam / (1 + lam) * sigma**2, rtol=1e-6)
    whole = greedy_pursuit(red, (9, 7), l2=lam, **kw)
    if refit == "full":  # the economic refit leaves the start as it is
        np.testing.assert_allclose(whole.theta, np.array([a, sigma]) / (1 + lam), rtol=1e-6)
    plain = greedy_pursuit(red, (9, 7), **kw)
    np.testing.assert_allclose(plain.theta, [a, sigma], rtol=1e-6)
    # greedy_l1 = lam: min 1/2 (t - sigma)^2 + lam t over t >= 0 is t = sigma - lam (and 0
    # for lam >= sigma: the greedy term is switched off, the start kept)
    for lam1, t1 in ((1.5, sigma - 1.5), (5.0, 0.0)):
        l1 = greedy_pursuit(red, (9, 7), greedy_l1=lam1, **kw)
        np.testing.assert_allclose(l1.theta, [a, t1], rtol=1e-6, atol=1e-8)


def test_greedy_l2_nonsmooth_shrinks_the_greedy_coefficients(rng):
    # each nonsmooth step first multiplies the greedy coefficients by 1 - eta_t lam; the start
    # terms are left alone.  Step 1 is the same with and without the penalty.
    M, rows, cols, vals = _lowrank(rng, noise=0.1)
    m, n = M.shape
    red = _reduce(rows, cols, vals, (m, n))
    start = (np.ones((m, 1)) / np.sqrt(m), np.ones((n, 1)) / np.sqrt(n), np.array([0.3]))
    lam = 0.2
    kw = dict(loss="l1", rank=3, max_inner=1, step_schedule="constant", step_size=1.5,
              init_factors=start, max_iter=2)  # fmt: skip
    plain = greedy_pursuit(red, (m, n), **kw)
    pen = greedy_pursuit(red, (m, n), greedy_l2=lam, **kw)
    # both return the last iterate (start + the two steps' terms); step 2's subgradient is
    # taken at the step-1 iterate, so its term is the same in both fits
    assert plain.theta.size == pen.theta.size == 3
    th = plain.theta
    np.testing.assert_allclose(pen.theta, [th[0], th[1] * (1 - 1.5 * lam), th[2]], rtol=1e-12)
    np.testing.assert_allclose(pen.U, plain.U, rtol=1e-12)
    # greedy_l1: soft-thresholding by eta * lam instead
    soft = greedy_pursuit(red, (m, n), greedy_l1=5.0, **kw)
    np.testing.assert_allclose(soft.theta, [th[0], th[1] - 1.5 * 5.0, th[2]], rtol=1e-12)


def test_refits_beat_no_refit(rng):
    M, rows, cols, vals = _lowrank(rng, kind="sign")
    m, n = M.shape
    red = _reduce(rows, cols, vals, (m, n))
    f = {
        r: greedy_pursuit(red, (m, n), loss="logistic", rank=3, refit=r).objective[-1]
        for r in ("none", "economic", "full")
    }
    assert f["full"] <= f["economic"] + 1e-9 and f["economic"] <= f["none"] + 1e-9


def test_no_refit_matches_dense_reference(rng):
    """GLRL without refit with an (almost) exact power method = the dense-SVD reference."""
    M, rows, cols, vals = _lowrank(rng, noise=0.1)
    m, n = M.shape
    res = greedy_pursuit(
        _reduce(rows, cols, vals, (m, n)),
        (m, n),
        loss="square",
        rank=3,
        refit="none",
        power_iter=3000,
        power_tol=1e-14,
    )
    U, V, th, objs = naive.glrl_dense(rows, cols, vals, (m, n), "square", 3, "none")
    np.testing.assert_allclose(res.objective, objs, rtol=1e-7)
    np.testing.assert_allclose((res.U * res.theta) @ res.V.T, (U * th) @ V.T, atol=1e-6)


def test_r1mp_recovers_fully_observed_low_rank_matrix(rng):
    """Square loss + full refit (R1MP) at the true rank, every entry observed (as COO)."""
    m, n, r = 80, 60, 4
    M = rng.standard_normal((m, r)) @ rng.standard_normal((r, n))
    rows, cols = np.nonzero(np.ones((m, n), bool))
    res = greedy_pursuit(
        _reduce(rows, cols, M[rows, cols], (m, n), [0, 25, 50, 75, 80]),
        (m, n),
        loss="square",
        rank=r,
        refit="full",
        power_iter=300,
        power_tol=1e-12,
        lbfgs_iter=20,
    )
    X = (res.U * res.theta) @ res.V.T
    assert np.linalg.norm(X - M) / np.linalg.norm(M) < 1e-3


# ----------------------------------------------------------------------------- SPEC 22, 23
def test_l1_subgradient_bound(rng):  # SPEC check 22 (FD part in test_glrl_kernels)
    lo = get_loss("l1")
    g = lo.grad(rng.standard_normal(500), rng.standard_normal(500))
    assert np.linalg.norm(g) <= np.sqrt(500) + 1e-12


def test_nonsmooth_residual_formula(rng):  # SPEC check 23 (inner residual)
    m, n = 30, 20
    G = sp.random(m, n, density=0.4, random_state=3).toarray()
    Uk = rng.standard_normal((m, 2))
    Vk = rng.standard_normal((n, 2))
    sk = np.array([2.0, 0.5])
    dense = np.sum((G - (Uk * sk) @ Vk.T) ** 2)
    cross = sum(sk[i] * (Uk[:, i] @ G @ Vk[:, i]) for i in range(2))
    formula = np.sum(G * G) - 2 * cross + sk @ glrl_core._gram(Uk, Vk) @ sk
    assert abs(dense - formula) / dense < 1e-12


@pytest.mark.parametrize("schedule", ["sqrt", "search"])
def test_nonsmooth_l1_reduces_objective(schedule, rng):  # SPEC check 23
    m, n, r = 60, 50, 3
    M = rng.standard_normal((m, r)) @ rng.standard_normal((r, n))
    O = M + 0.05 * rng.standard_normal((m, n))
    outl = rng.random((m, n)) < 0.05
    O[outl] += 10 * rng.standard_normal(outl.sum())
    rows, cols = np.nonzero(rng.random((m, n)) < 0.35)
    vals = O[rows, cols]
    res = greedy_pursuit(
        _reduce(rows, cols, vals, (m, n)),
        (m, n),
        loss="l1",
        rank=10,
        step_size=2.0,
        nu=0.95,
        step_schedule=schedule,
    )
    assert min(res.objective) < res.objective[0]
    assert sum(res.inner_counts) <= 10 and res.U.shape[1] <= 10
    assert all(1 <= p <= 5 for p in res.inner_counts)
    # the returned iterate is the best one seen
    x = naive.predict(res.U, res.V, res.theta, rows, cols)
    np.testing.assert_allclose(np.abs(x - vals).sum(), min(res.objective), rtol=1e-10)


def test_nonsmooth_hinge_runs_and_improves(rng):
    M, rows, cols, vals = _lowrank(rng, kind="sign")
    est = GreedyLowRank(loss="hinge", n_components=5, step_size=1.0).fit((rows, cols, vals), shape=M.shape)
    assert est.objective_path_.min() < est.objective_path_[0]
    assert est.evaluate((rows, cols, vals), ["sign_accuracy"])["sign_accuracy"] > 0.6


# ----------------------------------------------------------------------------- exact refits
@pytest.mark.parametrize(
    "l2, greedy_l2, init", [(0.0, 0.0, None), (0.05, 3.0, None), (0.0, 2.0, 1.5)]
)
def test_exact_full_refit_is_the_least_squares_solution(l2, greedy_l2, init, rng):
    """R1MP: after every step theta solves the penalized least squares of its basis, with one
    refit pass per step (the Gram's new column)."""
    M, rows, cols, vals = _lowrank(rng, noise=0.1)
    seen = []

    def cb(t, elapsed, obj):
        seen.append(t)

    res = greedy_pursuit(
        _reduce(rows, cols, vals, M.shape, [0, 17, 40, 60]), M.shape, loss="square", rank=5,
        refit="full", refit_solver="exact", l2=l2, greedy_l2=greedy_l2, init_offset=init,
        power_iter=8, random_state=0, callback=cb,
    )
    assert res.pass_kinds["refit"] == res.n_iter == len(seen)
    B = res.U[rows] * res.V[cols]
    P = l2 * (res.U.T @ res.U) * (res.V.T @ res.V)
    k0 = 1 if init is not None else 0
    P[np.arange(k0, B.shape[1]), np.arange(k0, B.shape[1])] += greedy_l2
    want = np.linalg.solve(B.T @ B + P, B.T @ vals)
    np.testing.assert_allclose(res.theta, want, rtol=1e-9, atol=1e-9)
    assert np.all(np.diff(res.objective) <= 1e-9 * np.abs(res.objective[:-1]))


@pytest.mark.parametrize("t", [1, 2, 7, 15])
def test_newton_step_is_the_pseudo_inverse_step(t, rng):
    B = rng.standard_normal((3 * t, t))
    g = rng.standard_normal(t)
    x0 = rng.standard_normal(t)
    H = B.T @ B
    np.testing.assert_allclose(
        glrl_core._newton_step(x0, g, H) - x0, -np.linalg.solve(H, g), rtol=1e-9, atol=1e-12
    )
    if t > 1:  # a singular Hessian: a direction with no curvature is left unchanged
        B[:, 0] = 0.0
        H = B.T @ B
        d = glrl_core._newton_step(x0, g, H) - x0
        assert d[0] == 0.0
        np.testing.assert_allclose(d, -np.linalg.pinv(H) @ g, rtol=1e-9, atol=1e-12)
    assert glrl_core._newton_step(x0, g, np.zeros((t, t))) is None


def test_exact_economic_refit_is_the_two_column_least_squares(rng):
    M, rows, cols, vals = _lowrank(rng, noise=0.1)
    red = _reduce(rows, cols, vals, M.shape, [0, 25, 60])
    res = greedy_pursuit(red, M.shape, loss="square", rank=4, refit="economic",
                         refit_solver="exact", power_iter=8, random_state=0)
    assert res.pass_kinds["refit"] == res.n_iter
    # the last step: alpha X_{t-1} + beta u v^T is the least-squares fit of those two columns
    prev = res.U[rows, :-1] * res.V[cols, :-1] @ res.theta[:-1]
    w = res.U[rows, -1] * res.V[cols, -1]
    coef = np.linalg.lstsq(np.column_stack([prev, w]), vals, rcond=None)[0]
    np.testing.assert_allclose(coef[0], 1.0, atol=1e-9)  # theta[:-1] already holds alpha
    np.testing.assert_allclose(coef[1], res.theta[-1], rtol=1e-9)


@pytest.mark.parametrize("refit", ["full", "economic"])
def test_exact_refit_reaches_the_converged_lbfgs_objective(refit, rng):
    M, rows, cols, vals = _lowrank(rng, noise=0.1)
    kw = dict(loss="square", rank=4, refit=refit, power_iter=8, random_state=0)
    ex = greedy_pursuit(_reduce(rows, cols, vals, M.shape), M.shape, refit_solver="exact", **kw)
    lb = greedy_pursuit(_reduce(rows, cols, vals, M.shape), M.shape, refit_solver="lbfgs",
                        lbfgs_iter=100, **kw)
    np.testing.assert_allclose(ex.objective, lb.objective, rtol=1e-6)
    assert ex.n_passes < lb.n_passes


def test_exact_refit_solver_is_refused_where_it_does_not_apply(counting_scheduler):
    rows, cols, vals = np.array([0, 1]), np.array([0, 1]), np.array([1.0, -1.0])
    for kw in (dict(loss="logistic"), dict(greedy_l1=0.1), dict(loss="huber")):
        with pytest.raises(ValueError, match="refit_solver 'exact' needs loss='square' and"):
            GreedyLowRank(refit_solver="exact", **kw).fit((rows, cols, vals), shape=(2, 2))
    with pytest.raises(ValueError, match="refit_solver must be one of"):
        GreedyLowRank(refit_solver="newton").fit((rows, cols, vals), shape=(2, 2))
    assert counting_scheduler.count == 0


# ----------------------------------------------------------------------------- invariance
@pytest.mark.parametrize("refit", ["full", "economic"])
def test_exact_refits_give_the_same_result_for_any_blocking(refit, rng):
    M, rows, cols, vals = _lowrank(rng, noise=0.1)
    fits = []
    for br in (60, 30, 7):  # 1 block, 2 blocks, uneven blocks
        est = GreedyLowRank(loss="square", n_components=4, refit=refit, power_iter=6, block_rows=br)
        fits.append(est.fit((rows, cols, vals), shape=M.shape))
    for f in fits[1:]:
        np.testing.assert_allclose(f.objective_path_, fits[0].objective_path_, rtol=1e-9)
        np.testing.assert_allclose(f.theta_, fits[0].theta_, rtol=1e-7)


@pytest.mark.parametrize("refit", ["full", "economic", "none"])
def test_same_result_for_any_blocking(refit, rng):
    M, rows, cols, vals = _lowrank(rng, kind="sign")
    fits = []
    for br in (None, 30, 7):  # 1 block, 2 blocks, uneven blocks
        est = GreedyLowRank(loss="logistic", n_components=3, refit=refit, power_iter=6, block_rows=br or 60)
        fits.append(est.fit((rows, cols, vals), shape=M.shape))
    for f in fits[1:]:
        np.testing.assert_allclose(f.objective_path_, fits[0].objective_path_, rtol=1e-9)
        np.testing.assert_allclose(
            f.predict(rows, cols), fits[0].predict(rows, cols), rtol=1e-7, atol=1e-8
        )


@pytest.mark.parametrize(
    "kw",
    [
        dict(loss="logistic", n_components=2, refit="economic", power_iter=4, lbfgs_iter=2),
        dict(loss="square", n_components=3, refit="full", power_iter=4),  # exact: Gram kept
        dict(loss="square", n_components=3, refit="economic", power_iter=4),  # exact 2 x 2
    ],
    ids=["logistic-lbfgs", "square-full-exact", "square-econ-exact"],
)
def test_store_and_local_cluster_give_identical_results(kw, rng, tmp_path, cluster_client):
    import dask

    M, rows, cols, vals = _lowrank(rng, kind="sign" if kw["loss"] == "logistic" else "real")
    ds = write_arrays(
        str(tmp_path / "obs.zarr"),
        {"obs": naive.to_csr(rows, cols, vals, M.shape)},
        kinds={"obs": "coo"},
        block_rows=13,
    )
    local = GreedyLowRank(**kw).fit(ds)
    with dask.config.set(scheduler=cluster_client):
        dist = GreedyLowRank(**kw).fit(ds)
    np.testing.assert_array_equal(dist.objective_path_, local.objective_path_)
    np.testing.assert_array_equal(dist.theta_, local.theta_)
    arrays = GreedyLowRank(**kw, block_rows=13).fit((rows, cols, vals), shape=M.shape)
    np.testing.assert_allclose(arrays.objective_path_, local.objective_path_, rtol=1e-12)


def test_one_pass_per_power_iteration(rng, counting_scheduler):
    M, rows, cols, vals = _lowrank(rng)
    kw = dict(loss="square", n_components=3, refit="none", power_iter=7, power_tol=0.0, block_rows=20)
    # several blocks: the engine path; cache_bytes=0: no gradient cache, every pass streams
    est = GreedyLowRank(cache_bytes=0, **kw).fit((rows, cols, vals), shape=M.shape)
    # 1 validation pass + 1 objective pass at X=0 + per step: power_iter passes, the last of
    # which (the objective pass of the new iterate) doubles as the next step's first pass
    assert counting_scheduler.count == 2 + 3 * 7
    assert est.n_passes_ == 1 + 3 * 7 and est.n_cache_passes_ == 0


def test_gradient_cache_reads_the_data_twice_per_step(rng, counting_scheduler):
    M, rows, cols, vals = _lowrank(rng)
    kw = dict(loss="logistic", n_components=3, refit="full", power_iter=7, power_tol=0.0, block_rows=20)
    kw["init"] = "zero"  # three greedy steps (init="auto" would spend two terms on biases)
    S = np.sign(vals)
    ref = GreedyLowRank(cache_bytes=0, **kw).fit((rows, cols, S), shape=M.shape)
    n0 = counting_scheduler.count
    est = GreedyLowRank(**kw).fit((rows, cols, S), shape=M.shape)
    # per step: the shared first pass, one pass that caches the gradients, 6 power passes over
    # the cache (one compute each, no data read), then the refit passes as without the cache
    assert est.n_cache_passes_ == 3 * 6
    assert est.n_passes_ == ref.n_passes_ - 3 * 6 + 3
    assert counting_scheduler.count - n0 == (ref.n_passes_ + 1) + 3  # + 1 validation pass
    np.testing.assert_allclose(est.theta_, ref.theta_, rtol=1e-10)
    np.testing.assert_allclose(np.abs(est.U_), np.abs(ref.U_), rtol=1e-8, atol=1e-12)


# ----------------------------------------------------------------------------- estimator
def test_estimator_predict_topk_evaluate_save_load(rng, tmp_path):
    M, rows, cols, vals = _lowrank(rng, noise=0.05)
    seen = []
    est = GreedyLowRank(
        loss="square",
        n_components=5,
        init="mean",
        power_iter=8,
        callback=lambda i, t, f: seen.append((i, f)),
    )
    assert est.fit((rows, cols, vals), shape=M.shape) is est
    assert [i for i, _ in seen] == [1, 2, 3, 4] and est.n_components_ == 5
    X = (est.U_ * est.theta_) @ est.V_.T
    np.testing.assert_allclose(est.predict(rows, cols), X[rows, cols], rtol=1e-12)
    idx, sc = est.top_k(np.array([0, 3]), k=5)
    np.testing.assert_array_equal(idx, np.argsort(-X[[0, 3]], axis=1, kind="stable")[:, :5])
    ev = est.evaluate((rows, cols, vals), "mae,rmse,sign_accuracy")
    err = X[rows, cols] - vals
    np.testing.assert_allclose(ev["mae"], np.abs(err).mean(), rtol=1e-12)
    np.testing.assert_allclose(ev["rmse"], np.sqrt((err**2).mean()), rtol=1e-12)
    np.testing.assert_allclose(
        ev["sign_accuracy"], np.mean(np.sign(X[rows, cols]) == np.sign(vals))
    )
    est.save(tmp_path / "m")
    back = ooc_lowrank.load(tmp_path / "m")
    assert isinstance(back, GreedyLowRank) and back.get_params()["init"] == "mean"
    np.testing.assert_array_equal(back.predict(rows, cols), est.predict(rows, cols))
    assert back.evaluate((rows, cols, vals)) == est.evaluate((rows, cols, vals))


def test_fit_on_store_float32(rng, tmp_path):
    M, rows, cols, vals = _lowrank(rng)
    csr = naive.to_csr(rows, cols, vals.astype(np.float32), M.shape)
    csr.data = csr.data.astype(np.float32)
    ds = write_arrays(str(tmp_path / "s.zarr"), {"obs": csr}, kinds={"obs": "coo"}, block_rows=11)
    est = GreedyLowRank(loss="square", n_components=2, power_iter=5).fit(ds)
    ref = GreedyLowRank(loss="square", n_components=2, power_iter=5, block_rows=11).fit(
        (rows, cols, vals.astype(np.float32)), shape=M.shape
    )
    np.testing.assert_allclose(est.objective_path_, ref.objective_path_, rtol=1e-9)
    assert est.evaluate(ds)["n"] == rows.size


def test_validation_early_stopping_keeps_best(rng):
    M, rows, cols, vals = _lowrank(rng, p=0.5, noise=0.5)
    tr = rng.random(rows.size) < 0.8
    est = GreedyLowRank(
        loss="square",
        n_components=15,
        validation=(rows[~tr], cols[~tr], vals[~tr]),
        n_iter_no_change=2,
        power_iter=8,
    )
    est.fit((rows[tr], cols[tr], vals[tr]), shape=M.shape)
    best = int(np.argmin(est.validation_path_))
    assert est.best_iter_ == best and est.n_components_ == best
    assert len(est.validation_path_) <= best + 3


def test_duplicates_policy(rng):
    rows = np.array([0, 0, 1, 2, 2])
    cols = np.array([1, 1, 0, 2, 0])
    vals = np.array([1.0, 3.0, 2.0, -1.0, 0.5])
    msg = r"repeat a \(row, col\) pair.*1 repeated.*duplicates='keep'"
    with pytest.raises(ValueError, match=msg):
        GreedyLowRank(n_components=1).fit((rows, cols, vals), shape=(3, 3))
    est = GreedyLowRank(n_components=1, duplicates="keep", refit="full").fit(
        (rows, cols, vals), shape=(3, 3)
    )
    assert est.n_observed_ == 5  # both copies are separate observations


@pytest.mark.parametrize(
    "bad,match",
    [
        (dict(rows=np.array([0, 5])), r"rows must lie in \[0, 4\).*got 5"),
        (dict(cols=np.array([0, -1])), r"cols must lie in \[0, 3\).*got -1"),
        (
            dict(rows=np.array([], int), cols=np.array([], int), vals=np.array([])),
            "at least one observed entry",
        ),
        (dict(vals=np.array([1.0, np.nan])), "finite"),
    ],
)
def test_bad_input_is_refused_before_work(bad, match, counting_scheduler):
    d = dict(rows=np.array([0, 1]), cols=np.array([0, 1]), vals=np.array([1.0, -1.0]))
    d.update(bad)
    with pytest.raises(ValueError, match=match):
        GreedyLowRank(n_components=2).fit((d["rows"], d["cols"], d["vals"]), shape=(4, 3))
    assert counting_scheduler.count <= 1  # at most the validation pass ran


def test_bad_labels_and_params():
    rows, cols = np.array([0, 1, 2]), np.array([0, 1, 2])
    with pytest.raises(ValueError, match=r"labels in \{-1, \+1\} for loss='logistic'.*1 of 3"):
        GreedyLowRank(loss="logistic", n_components=2).fit(
            (rows, cols, np.array([1.0, -1.0, 0.0])), shape=(3, 3)
        )  # rank <= min(shape): a larger one is refused first (issue 23)
    with pytest.raises(ValueError, match="n_components must be >= 1; got 0"):
        GreedyLowRank(n_components=0).fit((rows, cols, np.ones(3)), shape=(3, 3))
    with pytest.raises(ValueError, match="refit must be 'none' or 'auto' for the nonsmooth"):
        GreedyLowRank(loss="l1", refit="full").fit((rows, cols, np.ones(3)), shape=(3, 3))
    with pytest.raises(ValueError, match="loss must be one of"):
        GreedyLowRank(loss="hamming").fit((rows, cols, np.ones(3)), shape=(3, 3))
    with pytest.raises(ValueError, match="shape must be given"):
        GreedyLowRank().fit((rows, cols, np.ones(3)))
    with pytest.raises(ValueError, match=r"cols must lie in \[0, 3\)"):
        GreedyLowRank(n_components=1).fit((rows, cols, np.ones(3)), shape=(3, 3)).predict(rows, cols + 1)


def test_store_without_obs_is_refused(tmp_path):
    ds = write_arrays(str(tmp_path / "d.zarr"), {"X": np.ones((3, 2))})
    with pytest.raises(ValueError, match="array 'obs' of kind 'coo'"):
        GreedyLowRank().fit(ds)


def _bench_glrl():
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "bench_glrl", Path(__file__).resolve().parents[1] / "benchmarks" / "bench_glrl.py"
    )
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


@pytest.mark.slow  # issue 29: 97 s of a 1431 s default run on the busy machine (JIT of every part)
def test_benchmark_body_tiny(tmp_path):
    """The benchmark bodies run end to end at a tiny size (they cannot rot; ``-m slow``)."""
    from conftest import DATA_DIR

    res = _bench_glrl().run(
        tiny=True, parts=("a", "c", "pass"), data_dir=DATA_DIR, out_dir=tmp_path
    )
    assert "tiny_acpass" in json.loads((tmp_path / "glrl.json").read_text())
    assert res["large"]["nnz"] == 3000 and res["large"]["passes"] > 0
    ps = res["pass"]
    assert ps["nnz"] == 3000 and ps["read_pass_s"] > 0 and ps["passes_per_greedy_step"] > 1
    # structure of the fit's passes (no time asserted): every pass counted under one kind; at
    # most power_iter power passes a step plus the first; the square loss's economic refit is
    # one pass a step (the exact 2 x 2 solve); no step search
    kinds, n_iter = ps["fit_passes_by_kind"], ps["fit_n_iter"]
    assert sum(kinds.values()) == ps["fit_n_passes"] and set(kinds) <= {"power", "refit"}
    assert kinds["power"] <= 1 + n_iter * ps["fit_power_iter"]
    assert kinds["refit"] == n_iter
    assert res["large"]["passes"] <= res["large"]["n_iter"] * (res["large"]["power_iter"] + 2)
    if "folds" in res["movielens"]:
        assert 0 < res["movielens"]["glrl_mae_mean"] < 4


def test_epinions_loader_reproduces_the_papers_matrix():
    """Rows with >= 2 observations, then columns with >= 2: the paper's 42,470 x 40,700."""
    from conftest import data_file

    from ooc_lowrank.datasets import load_epinions

    path = data_file("signed-epinions", "soc-sign-epinions.txt.gz")
    r, c, s, shape, info = load_epinions(path)
    assert shape == (42470, 40700) and info["n_edges"] == r.size == 752865
    assert r.max() < shape[0] and c.max() < shape[1] and set(np.unique(s)) == {-1.0, 1.0}
    assert np.bincount(c, minlength=shape[1]).min() >= 2  # every kept column has >= 2


# ----------------------------------------------------------------------------- bias init
def _additive(rng, m=40, n=30, p=0.5):
    bu, bi = rng.standard_normal(m), rng.standard_normal(n)
    mask = rng.random((m, n)) < p
    rows, cols = np.nonzero(mask)
    return bu, bi, rows, cols, 3.0 + bu[rows] + bi[cols]


@pytest.mark.parametrize("init", ["bias", "bias-l1"])
def test_bias_init_fits_additive_matrix_as_rank_two(init, rng):
    """X_0 = mu + b_u 1^T + 1 b_i^T: an exactly additive matrix is fitted by the start alone."""
    bu, bi, rows, cols, vals = _additive(rng)
    if init == "bias-l1":  # robust biases ignore a few gross outliers
        vals = vals.copy()
        vals[::37] += 50.0
    (U, V, th), passes = glrl_core.bias_init(
        _reduce(rows, cols, vals, (40, 30)),
        (40, 30),
        float(vals.mean()),
        reg=0.0,
        n_sweeps=60,
        irls_eps=1e-6 if init == "bias-l1" else 0.0,
    )
    assert U.shape == (40, 2) and V.shape == (30, 2) and passes == 120
    np.testing.assert_allclose(np.linalg.norm(U, axis=0), 1.0)
    pred = ((U * th) @ V.T)[rows, cols]
    clean = 3.0 + bu[rows] + bi[cols]
    ok = np.ones(rows.size, bool)
    if init == "bias-l1":
        ok[::37] = False
    err = np.abs(pred[ok] - clean[ok])
    if init == "bias":
        assert err.max() < 1e-6
    else:  # IRLS converges slowly but the outliers do not pull the fit
        assert np.median(err) < 1e-2 and err.max() < 0.1


@pytest.mark.parametrize("loss", ["l1", "square"])
def test_bias_init_counts_two_terms_and_helps(loss, rng):
    bu, bi, rows, cols, vals = _additive(rng)
    M = rng.standard_normal((40, 1)) @ rng.standard_normal((1, 30))
    vals = vals + M[rows, cols]
    kw = dict(loss=loss, n_components=4, power_iter=10, step_size=1.0)
    fits = {
        i: GreedyLowRank(init=i, **kw).fit((rows, cols, vals), shape=(40, 30))
        for i in ("mean", "bias")
    }
    assert fits["bias"].n_components_ == 4  # 2 bias terms + 2 greedy terms
    assert fits["bias"].n_passes_ > fits["bias"].n_iter_  # bias sweeps are counted
    mae = {i: f.evaluate((rows, cols, vals), ["mae"])["mae"] for i, f in fits.items()}
    assert mae["bias"] < mae["mean"]
    # identical for any blocking
    other = GreedyLowRank(init="bias", block_rows=7, **kw).fit((rows, cols, vals), shape=(40, 30))
    np.testing.assert_allclose(
        other.predict(rows, cols), fits["bias"].predict(rows, cols), rtol=1e-7, atol=1e-8
    )


def test_bias_init_params_are_checked():
    rows, cols = np.array([0, 1, 2]), np.array([0, 1, 2])
    with pytest.raises(ValueError, match="n_components must be >= 3 with init='bias'"):
        GreedyLowRank(init="bias", n_components=2).fit((rows, cols, np.ones(3)), shape=(3, 3))
    with pytest.raises(ValueError, match="init must be one of"):
        GreedyLowRank(init="median").fit((rows, cols, np.ones(3)), shape=(3, 3))
    with pytest.raises(ValueError, match="bias_reg"):
        GreedyLowRank(init="bias", bias_reg=-1.0).fit((rows, cols, np.ones(3)), shape=(3, 3))


# ----------------------------------------------------------------------------- defaults (issue 12)
@pytest.mark.parametrize(
    "init, rank, mean, counts, expected",
    [
        ("auto", 10, 3.5, (100, 100, 0), "bias"),  # 1-5 star ratings
        ("auto", 2, 3.5, (100, 100, 0), "mean"),  # no room for the rank-2 bias start
        ("auto", 10, 0.7, (0, 100, 40), "bias"),  # signed {-1, +1} labels
        ("auto", 10, 0.0, (0, 100, 50), "bias"),  # balanced signs
        ("auto", 2, 0.7, (0, 100, 40), "mean"),
        ("auto", 10, 0.4, (60, 0, 0), "bias"),  # {0, 1} labels
        ("auto", 10, 0.2, (100, 100, 30), "zero"),  # real values of both signs
        ("auto", 10, 0.0, (100, 100, 0), "zero"),  # all zero
        ("mean", 10, 0.7, (0, 100, 40), "mean"),  # an explicit init is kept
        ("bias-l1", 10, 3.5, (100, 100, 0), "bias-l1"),
    ],
)
def test_resolve_init_rules(init, rank, mean, counts, expected):
    got = glrl_core.resolve_init(
        init, rank=rank, mean=mean, n_not_pm1=counts[0], n_not_01=counts[1], n_negative=counts[2]
    )
    assert got == expected


def _ratings(rng, m=120, n=80, p=0.3):
    """Synthetic 1-5 star ratings (mean about 3.5): biases + a rank-2 taste + noise."""
    bu, bi = 0.5 * rng.standard_normal(m), 0.7 * rng.standard_normal(n)
    A, B = rng.standard_normal((m, 2)), rng.standard_normal((n, 2))
    rows, cols = np.nonzero(rng.random((m, n)) < p)
    x = 3.5 + bu[rows] + bi[cols] + 0.4 * np.sum(A[rows] * B[cols], 1)
    vals = np.clip(np.rint(x + 0.5 * rng.standard_normal(rows.size)), 1, 5)
    test = rng.random(rows.size) < 0.2
    tr = (rows[~test], cols[~test], vals[~test])
    te = (rows[test], cols[test], vals[test])
    return tr, te, (m, n)


@pytest.mark.parametrize("loss", ["l1", "square"])
def test_auto_init_resolution_is_fitted_and_saved(loss, rng, tmp_path):
    tr, _, shape = _ratings(rng)
    est = GreedyLowRank(loss=loss, n_components=4, power_iter=5).fit(tr, shape=shape)
    assert est.init == "auto" and est.init_ == "bias"
    assert est.n_components_ == 4  # the two bias terms count in the budget
    est.save(tmp_path / "m")
    assert ooc_lowrank.load(tmp_path / "m").init_ == "bias"
    small = GreedyLowRank(loss=loss, n_components=2, power_iter=5).fit(tr, shape=shape)
    assert small.init_ == "mean"
    signs = (tr[0], tr[1], np.where(tr[2] > 3, 1.0, -1.0))
    for lo in ("logistic", loss):
        assert GreedyLowRank(loss=lo, n_components=3, power_iter=5).fit(signs, shape=shape).init_ == "bias"
    binary = (tr[0], tr[1], (tr[2] > 3).astype(float))
    assert GreedyLowRank(loss=loss, n_components=3, power_iter=5).fit(binary, shape=shape).init_ == "bias"
    centred = (tr[0], tr[1], tr[2] - 3.0)
    assert GreedyLowRank(loss=loss, n_components=3, power_iter=5).fit(centred, shape=shape).init_ == "zero"
    assert GreedyLowRank(loss=loss, n_components=3, init="mean").fit(tr, shape=shape).init_ == "mean"


@pytest.mark.parametrize(
    "greedy_l2, loss, init, expected",
    [
        (None, "logistic", "bias", glrl_core.GREEDY_L2_LOGISTIC),
        (None, "logistic", "bias-l1", glrl_core.GREEDY_L2_LOGISTIC),
        (None, "logistic", "zero", 0.0),
        (None, "logistic", "mean", 0.0),
        (None, "square", "bias", 0.0),
        (None, "l1", "bias", 0.0),
        (0.5, "l1", "bias", 0.5),
        (0.0, "logistic", "bias", 0.0),
    ],
)
def test_resolve_greedy_l2_rules(greedy_l2, loss, init, expected):
    assert glrl_core.resolve_greedy_l2(greedy_l2, loss=loss, init=init) == expected


def test_auto_greedy_l2_is_fitted_saved_and_used(rng, tmp_path):
    tr, _, shape = _ratings(rng)
    signs = (tr[0], tr[1], np.where(tr[2] > 3, 1.0, -1.0))
    kw = dict(loss="logistic", n_components=4, power_iter=5)
    est = GreedyLowRank(**kw).fit(signs, shape=shape)
    assert est.greedy_l2 is None and est.greedy_l2_ == glrl_core.GREEDY_L2_LOGISTIC
    explicit = GreedyLowRank(greedy_l2=glrl_core.GREEDY_L2_LOGISTIC, **kw).fit(signs, shape=shape)
    np.testing.assert_array_equal(est.theta_, explicit.theta_)
    off = GreedyLowRank(greedy_l2=0.0, **kw).fit(signs, shape=shape)
    assert off.greedy_l2_ == 0.0 and not np.array_equal(off.theta_, est.theta_)
    est.save(tmp_path / "m")
    assert ooc_lowrank.load(tmp_path / "m").greedy_l2_ == glrl_core.GREEDY_L2_LOGISTIC
    assert GreedyLowRank(loss="l1", n_components=4, power_iter=5).fit(tr, shape=shape).greedy_l2_ == 0.0
    with pytest.raises(ValueError, match="greedy_l2"):
        GreedyLowRank(greedy_l2=-1.0).fit(tr, shape=shape)


@pytest.mark.parametrize("refit", ["none", "auto"])
def test_default_l1_glrl_beats_the_global_mean_on_ratings(refit, rng):
    """Issue 12: ``fit glrl --loss l1 --n-components 10`` with every other parameter at its default
    must predict ratings better than their mean (the zero start did far worse)."""
    tr, te, shape = _ratings(rng)
    est = GreedyLowRank(loss="l1", n_components=10, refit=refit, random_state=0).fit(tr, shape=shape)
    mae = est.evaluate(te, ["mae"], shape=shape)["mae"]
    mae_mean = float(np.mean(np.abs(te[2] - tr[2].mean())))
    assert mae < 0.85 * mae_mean, (mae, mae_mean)


def test_glrl_defaults_benchmark_tiny(tmp_path):
    """benchmarks/glrl_defaults.py runs end to end at a tiny size (it cannot rot)."""
    import importlib.util

    from conftest import data_file

    data_file("movielens-100k", "u1.base.gz")
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "glrl_defaults.py"
    spec = importlib.util.spec_from_file_location("glrl_defaults", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "d.json"
    res = bench.run(("l1", "test"), data_dir=data_file(), out=out, tiny=True,
                    epinions_folds=())  # fmt: skip
    assert out.exists() and res["l1"]["chosen"]["init"] in ("zero", "bias")
    (row,) = res["test"]["movielens"]["l1"]["splits"]
    assert row["init_"] == "bias" and row["mae"] < row["global_mean"]["mae"]


@pytest.mark.parametrize("init", ["mean", "bias"])
def test_best_iterate_at_the_start_keeps_the_start_terms(init):
    # when no greedy step improves on X_0 (rank budget used by the start), the fitted factors
    # are the start's k0 terms: U_, V_ and theta_ agree (they once kept 0 columns of U, V)
    r = np.array([0, 1, 2, 0])
    c = np.array([0, 1, 2, 1])
    v = np.array([4.0, 3.0, 5.0, 4.0])
    rank = 1 if init == "mean" else 3
    est = GreedyLowRank(n_components=rank, init=init).fit((r, c, v), shape=(3, 3))
    k = est.theta_.size
    assert est.U_.shape == (3, k) and est.V_.shape == (3, k) and k >= 1
    pred = est.predict(r, c)
    assert np.isfinite(pred).all() and np.abs(pred - v).mean() < np.abs(v).mean()


def test_glrl_fidelity_benchmark_pieces_tiny():
    """benchmarks/glrl_fidelity.py: the AltMin solver lowers the logistic loss below the SVD
    start and the power check reports the library's value against svds (tiny synthetic data)."""
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "glrl_fidelity.py"
    spec = importlib.util.spec_from_file_location("glrl_fidelity", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    rng = np.random.default_rng(3)
    m, n = 30, 25
    A = rng.standard_normal((m, 2)) @ rng.standard_normal((2, n))
    rr, cc = np.nonzero(rng.random((m, n)) < 0.5)
    y = np.where(A[rr, cc] >= 0, 1.0, -1.0)
    P, Q, info = bench.altmin_logistic((rr, cc, y), (m, n), 2, 0.1, maxiter=50)
    assert bench._acc(bench._pred_pq(P, Q, rr, cc), y) > 0.9 and info["iters"] > 0
    (row,) = bench._power_check({"n_components": 3}, (rr, cc, y), (m, n), (1,), "logistic", (20,))
    assert 0.0 <= row["power_20"]["rel_gap"] < 0.05
    # the robust MF baseline fits a noisy rank-2 rating matrix better than its median
    R = 3.0 + A / np.abs(A).max()
    pred = bench.robust_mf((rr, cc, R[rr, cc]), (m, n), 2, 0.1, maxiter=200)
    err = np.abs(pred(rr, cc) - R[rr, cc]).mean()
    assert err < 0.3 * np.abs(R[rr, cc] - np.median(R[rr, cc])).mean()


def test_pursuit_options_object_and_keywords_agree(rng):
    """``greedy_pursuit``'s settings are one ``PursuitOptions`` (issue 29): an options object,
    keywords, or an object with keyword overrides give the same fit; an unknown setting is a
    TypeError naming it."""
    M, rows, cols, vals = _lowrank(rng, m=20, n=15)
    red = _reduce(rows, cols, vals, M.shape)
    opts = glrl_core.PursuitOptions(loss="l1", rank=3, max_inner=2, random_state=0)
    a = greedy_pursuit(red, M.shape, opts)
    b = greedy_pursuit(red, M.shape, loss="l1", rank=3, max_inner=2, random_state=0)
    c = greedy_pursuit(red, M.shape, glrl_core.PursuitOptions(loss="l1"), rank=3, max_inner=2,
                       random_state=0)  # fmt: skip
    for other in (b, c):
        np.testing.assert_array_equal(a.theta, other.theta)
        assert a.objective == other.objective
    with pytest.raises(TypeError, match="ranks"):
        greedy_pursuit(red, M.shape, ranks=3)


def test_estimator_hands_its_parameters_to_the_pursuit_options():
    """Every ``PursuitOptions`` field is a ``GreedyLowRank`` parameter of the same name but
    ``rank`` (``n_components``) and ``l2`` (``alpha``), which the estimator passes itself."""
    import dataclasses

    names = {f.name for f in dataclasses.fields(glrl_core.PursuitOptions)}
    assert names - set(GreedyLowRank().get_params()) == {"rank", "l2"}
    est = GreedyLowRank(nu=0.5, max_inner=3, power_tol=0.01, random_state=7, max_iter=4)
    o = glrl_core.PursuitOptions.from_params(est.get_params(), rank=4, refit="none")
    assert (o.nu, o.max_inner, o.power_tol, o.random_state, o.max_iter) == (0.5, 3, 0.01, 7, 4)
    assert (o.rank, o.refit, o.l2, o.loss) == (4, "none", 0.0, "square")
