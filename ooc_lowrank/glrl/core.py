"""Functional core of greedy low-rank pursuit (SPEC 2.2-2.4, 5.2), testable without the estimator.

The data enter only through ``reduce(fn, args)``: one call is **one pass** over the blocks of
observed entries; it applies the block function ``fn(row_start, block, *args)`` (see
:mod:`ooc_lowrank.glrl._blocks`) to every block and returns the float64 sums of its results.
The estimator wires ``reduce`` to :func:`ooc_lowrank.engine.map_reduce`; tests wire it to a
plain loop over CSR blocks.  Everything the core keeps is O((n_rows + n_cols) * rank).

Algorithms
----------
* Smooth losses (square, logistic, huber), SPEC 2.3: greedy direction = top singular pair of
  ``-grad phi`` (power method, R1MP convention: start at ones, ``power_iter`` rounds, stop when
  the unit vectors move less than ``power_tol``), initial coefficient ``s / L``, then
  ``refit="full"`` (GLRL; square loss + full = R1MP), ``"economic"`` (EGLRL) or ``"none"``;
  refits use L-BFGS-B with at most ``lbfgs_iter`` iterations warm-started at the greedy step,
  keeping the warm start if L-BFGS returns a worse value; for the square loss they are
  least-squares problems and are solved exactly from one pass (``refit_solver``), as the
  R1MP reference code does.
* Nonsmooth losses (l1, hinge), SPEC 2.4: subgradient, rank-``p_t`` approximation built by
  deflation until ``||G - Ghat||_F <= nu ||G||_F`` or ``max_inner`` or the rank budget,
  step ``X <- X - eta_t Ghat`` with ``eta_t`` from ``step_schedule``; the best iterate seen is
  returned (by validation score if given, else by training objective).

Power method and passes
-----------------------
One power iteration is one pass: the fused kernel returns ``G v`` and ``G^T u`` for the
current pair together, and the pair is updated as ``v <- G^T u / |u|^2``, ``u <- G v / |v|^2``
(the "block variant" of SPEC 2.7: two interleaved R1MP chains, the same convergence per pass
as the sequential form).  The returned pair is *chain-consistent*: ``(G v / |G v|, v / |v|)``
or ``(u / |u|, G^T u / |G^T u|)``, whichever has the larger exact value ``|G v| / |v|`` or
``|G^T u| / |u|`` (the best over the passes); the mixed pair ``(u, v)`` takes one vector from
each chain and underestimates ``sigma_1`` badly while the chains are unconverged (issue 13,
``docs/glrl_fidelity.md``).  The first pass of each greedy step also yields the objective
of the current iterate (no separate objective pass).
"""

from __future__ import annotations

import functools
import logging
import time
from dataclasses import dataclass, field, fields, replace

import numpy as np
from scipy.optimize import minimize

from ooc_lowrank import engine
from ooc_lowrank._progress import progress_log
from ooc_lowrank._validation import NonFiniteError, param_error
from ooc_lowrank.glrl import _blocks
from ooc_lowrank.glrl.losses import get_loss

logger = logging.getLogger("ooc_lowrank")

REFITS = ("full", "economic", "none")
SCHEDULES = ("auto", "sqrt", "inverse", "constant", "search")


@dataclass
class GreedyResult:
    """Output of :func:`greedy_pursuit` (the prediction is ``(U * theta) @ V.T``)."""

    U: np.ndarray  #: (n_rows, k) unit columns
    V: np.ndarray  #: (n_cols, k) unit columns
    theta: np.ndarray  #: (k,)
    #: training objective after each step (index 0: the starting iterate)
    objective: list = field(default_factory=list)
    validation: list = field(default_factory=list)  #: validation score after each step
    inner_counts: list = field(default_factory=list)  #: rank-one terms added per step
    step_sizes: list = field(default_factory=list)
    n_passes: int = 0  #: passes over the observed entries
    #: ``n_passes`` by kind: ``power`` (power-method passes, the first of each step included:
    #: it also gives the step's objective), ``refit`` (coefficient refits), ``step`` (step
    #: searches), ``grad_cache`` (building a step's gradient cache); :data:`PASS_KINDS`
    pass_kinds: dict = field(default_factory=dict)
    n_cache_passes: int = 0  #: power-method passes over the in-memory gradient cache
    n_iter: int = 0  #: greedy (outer) steps taken
    best_iter: int = 0  #: step whose iterate is returned
    times: list = field(default_factory=list)  #: wall seconds of each step


#: Values of ``refit_solver`` (:func:`greedy_pursuit`).
REFIT_SOLVERS = ("auto", "exact", "lbfgs")

#: Kinds of passes counted in :attr:`GreedyResult.pass_kinds`, by block function.
PASS_KINDS = {
    "power_block": "power",
    "power_split_block": "power",
    "refit_full_block": "refit",
    "refit_econ_block": "refit",
    "refit_gram_block": "refit",
    "step_search_block": "step",
    "bias_block": "init",
}


class _Counter:
    """Wraps ``reduce`` and counts passes, in total (``n``) and by kind (``kinds``)."""

    def __init__(self, reduce):
        self.reduce = reduce
        self.n = 0
        self.kinds = {}

    def count(self, kind):
        self.n += 1
        self.kinds[kind] = self.kinds.get(kind, 0) + 1

    def __call__(self, fn, args):
        self.count(PASS_KINDS.get(getattr(fn, "__name__", ""), "other"))
        out = self.reduce(fn, args)
        return out if isinstance(out, tuple) else (out,)


def _lowrank_apply(lowrank, x, left):
    """Sum over ``(A, c, B)`` of ``A diag(c) B^T x`` (left) or ``B diag(c) A^T x``."""
    out = 0.0
    for A, c, B in lowrank:
        if c.size == 0:
            continue
        out = out + (A @ (c * (B.T @ x)) if left else B @ (c * (A.T @ x)))
    return out


def top_triplet(matvec, m, n, *, lowrank=(), n_iter=20, tol=1e-3, rng=None, first=None):
    """Top singular triplet of ``M = G + sum A diag(c) B^T`` by the fused power method.

    Parameters
    ----------
    matvec : callable
        ``matvec(u, v) -> (G v, G^T u, stats)``, one pass over the data (sparse part only).
    m, n : int
        Shape of ``G``.
    lowrank : sequence of (A, c, B)
        Low-rank parts, ``A`` (m, k), ``c`` (k,), ``B`` (n, k).
    n_iter, tol : int, float
        At most ``n_iter`` passes; stop when both unit vectors move less than ``tol``.
    first : tuple, optional
        Result of ``matvec(ones(m), ones(n))`` if already computed.

    Returns
    -------
    u : ndarray of shape (m,)
    s : float
        ``u^T M v >= 0`` for the returned unit pair.
    v : ndarray of shape (n,)
    info : dict
        ``stats`` of the first pass, ``sparse_uv`` = ``u^T G v`` (sparse part only),
        ``passes``.
    """
    rng = np.random.default_rng(rng)
    u = np.ones(m)
    v = np.ones(n)
    res = first if first is not None else matvec(u, v)
    passes = 0 if first is not None else 1
    stats0 = res[2]
    restarted = False
    best = None  # (s, u_hat, v_hat, sparse_uv) of the best chain-consistent pair seen
    for k in range(max(1, n_iter)):
        gv_s, gtu_s = res[0], res[1]
        gv = gv_s + _lowrank_apply(lowrank, v, True)
        gtu = gtu_s + _lowrank_apply(lowrank, u, False)
        nu2, nv2 = u @ u, v @ v
        u_new = gv / nv2
        v_new = gtu / nu2
        nun, nvn = np.linalg.norm(u_new), np.linalg.norm(v_new)
        if nun == 0.0 or nvn == 0.0 or not (np.isfinite(nun) and np.isfinite(nvn)):
            if k == 0 and not restarted:
                # SPEC 5.2: random restart when G^T 1 = 0 (or G 1 = 0)
                restarted = True
                u = rng.standard_normal(m)
                v = rng.standard_normal(n)
                res = matvec(u, v)
                passes += 1
                continue
            break
        # The fused pass runs two interleaved chains (v -> G v and u -> G^T u).  The mixed pair
        # (u, v) takes one vector from each chain: early on they are barely aligned and
        # u^T G v can be a small fraction of sigma_1 (measured on the L1 subgradient of a
        # MovieLens half after the bias start: 8.1 against svds 22.4 after 20 passes).  Each
        # chain's own pair has an exact value: (G v / |G v|, v / |v|) gives |G v| / |v|, and
        # (u / |u|, G^T u / |G^T u|) gives |G^T u| / |u| (both non-decreasing along a chain).
        un_hat, vn_hat = u_new / nun, v_new / nvn
        u_hat, v_hat = u / np.sqrt(nu2), v / np.sqrt(nv2)
        s_a = nun * np.sqrt(nv2)  # |G v| / |v|, pair (un_hat, v_hat)
        s_b = nvn * np.sqrt(nu2)  # |G^T u| / |u|, pair (u_hat, vn_hat)
        if s_a >= s_b:
            cand = (s_a, un_hat, v_hat, (un_hat @ gv_s) / np.sqrt(nv2))
        else:
            cand = (s_b, u_hat, vn_hat, (vn_hat @ gtu_s) / np.sqrt(nu2))
        if best is None or cand[0] > best[0]:
            best = cand
        du = min(np.linalg.norm(un_hat - u_hat), np.linalg.norm(un_hat + u_hat))
        dv = min(np.linalg.norm(vn_hat - v_hat), np.linalg.norm(vn_hat + v_hat))
        if max(du, dv) < tol or k == n_iter - 1:
            break
        u, v = u_new, v_new
        res = matvec(u, v)
        passes += 1
    if best is None:  # the matrix vanished on both sides: s = 0 for the current pair
        best = (0.0, u / np.linalg.norm(u), v / np.linalg.norm(v), 0.0)
    s, u_hat, v_hat, sparse_uv = best
    return (
        u_hat,
        float(s),
        v_hat,
        {"stats": stats0, "sparse_uv": float(sparse_uv), "passes": passes},
    )


def _gram(U, V):
    return (U.T @ U) * (V.T @ V)


def _one_blas_thread(fn):
    """``fn`` run with BLAS limited to one thread (see :func:`greedy_pursuit`, Notes)."""

    @functools.wraps(fn)
    def driver(*args, **kwargs):
        with engine.one_blas_thread():
            return fn(*args, **kwargs)

    return driver


@dataclass(frozen=True, kw_only=True)
class PursuitOptions:
    """The settings of :func:`greedy_pursuit`, built once by the caller (the estimator with
    :meth:`from_params` from its own parameters) and handed on unchanged.

    Parameters
    ----------
    loss : str
        One of :data:`ooc_lowrank.glrl.losses.LOSSES`.
    rank : int
        Number of rank-one terms (the rank budget for nonsmooth losses).
    refit : {"auto", "full", "economic", "none"}
        ``"auto"`` is ``"full"`` for smooth losses and ``"none"`` for nonsmooth ones.
    power_iter, power_tol : int, float
        Power-method passes per singular pair and early-stop tolerance.
    lbfgs_iter : int
        L-BFGS-B iterations per refit; 0 turns the refit off.
    refit_solver : {"auto", "exact", "lbfgs"}
        How a refit is solved.  ``"lbfgs"``: at most ``lbfgs_iter`` L-BFGS-B iterations (SPEC
        GLRL-6/7), one pass per evaluation.  ``"exact"`` (square loss, ``greedy_l1 = 0``
        only): the refit is a linear least-squares problem, solved from one pass that gives
        its gradient and Hessian, as the R1MP reference code does (SPEC 2.2): economic, a
        2 x 2 system; full, the basis Gram on the observed entries, kept between steps so a
        step's pass adds its new column only (O(t) per entry).  ``"auto"``: ``"exact"``
        where it applies, else ``"lbfgs"``.  ``lbfgs_iter = 0`` turns either off.
    l2 : float
        ``l2 / 2 * ||X||_F^2`` over the whole ``m x n`` matrix, start terms included (SPEC 2.3).
    greedy_l2 : float
        ``greedy_l2 / 2 * sum_k theta_k^2`` over the **greedy** terms only (not the ``k0``
        terms of a start ``X_0`` such as the biases); ``theta_k`` is the Frobenius norm of
        the unit rank-one term ``theta_k u_k v_k^T``.  Smooth losses: part of the refit
        objective (full: gradient ``greedy_l2 * theta_k`` on the greedy coefficients;
        economic: ``greedy_l2 * (alpha |theta_g|^2, beta)``), of the initial step
        ``s / (L + l2 + greedy_l2)`` and of the recorded objective, which stays monotone.
        Nonsmooth losses: each step first shrinks the greedy coefficients by
        ``max(0, 1 - eta_t greedy_l2)`` (the penalty's gradient step), then adds the new terms.
    greedy_l1 : float
        ``greedy_l1 * sum_k |theta_k|`` over the greedy terms only: with unit terms this bounds
        the nuclear norm of the greedy part, ``||X_g||_* <= sum |theta_k|`` (the factor
        penalty ``lam/2 (|P|^2 + |Q|^2)`` of alternating solvers is ``lam ||X||_*`` at its
        optimum).  Smooth losses: the refits keep the greedy coefficients ``>= 0`` (L-BFGS-B
        bounds; the greedy step is ``max(s - greedy_l1, 0) / L >= 0``), where the penalty is
        linear, ``greedy_l1 * sum theta_g``.  Nonsmooth losses: soft-thresholding of the
        greedy coefficients by ``eta_t greedy_l1`` each step.
    huber_delta : float
        Threshold of the Huber loss.
    nu, max_inner : float, int
        Nonsmooth losses: a step adds rank-one terms until ``||G - Ghat||_F <= nu ||G||_F``
        or ``max_inner`` terms.
    step_size, step_schedule : float, str
        Nonsmooth losses: step ``eta_t`` from the schedule (one of :data:`SCHEDULES`).
    n_iter_no_change : int
        With a ``validation``: stop after this many steps without improvement.
    random_state : int, Generator or None
        Seeds the power method.
    verbose : bool or int
        Progress lines on the ``ooc_lowrank`` logger.
    max_iter : int, optional
        Stop after this many greedy (outer) steps even if the rank budget is not used up.
    tol : float
        Stop after a greedy step that lowers the objective by less than ``tol`` times the
        previous objective's magnitude (an increase, possible for nonsmooth losses, stops it
        too).  ``0`` (default): no such stop, every step of the rank budget is taken.
    """

    loss: str = "square"
    rank: int = 10
    refit: str = "auto"
    power_iter: int = 20
    power_tol: float = 1e-3
    lbfgs_iter: int = 5
    refit_solver: str = "auto"
    l2: float = 0.0
    greedy_l2: float = 0.0
    greedy_l1: float = 0.0
    huber_delta: float = 1.0
    nu: float = 0.95
    max_inner: int = 5
    step_size: float = 2.0
    step_schedule: str = "auto"
    n_iter_no_change: int = 5
    random_state: object = None
    verbose: bool = False
    max_iter: int | None = None
    tol: float = 0.0

    @classmethod
    def from_params(cls, params, **overrides):
        """The options named like a key of ``params`` (an estimator's ``get_params()``) with
        its values, then ``overrides`` (the options an estimator names otherwise or resolves
        first); the others keep their defaults."""
        names = [f.name for f in fields(cls)]
        return cls(**({k: params[k] for k in names if k in params} | overrides))


@_one_blas_thread
def greedy_pursuit(
    reduce,
    shape,
    options=None,
    *,
    validation=None,
    callback=None,
    init_offset=None,
    init_factors=None,
    grad_cache=None,
    checkpoint=None,
    **settings,
):
    """Greedy low-rank pursuit on observed entries (GLRL / EGLRL / R1MP / nonsmooth GLRL).

    Parameters
    ----------
    reduce : callable
        ``reduce(fn, args)`` runs one pass (see module docstring).
    shape : (int, int)
        ``(n_rows, n_cols)`` of the matrix.
    options : PursuitOptions, optional
        The algorithm's settings (default: ``PursuitOptions()``).
    **settings
        Fields of :class:`PursuitOptions` that replace those of ``options`` (``rank=3``).
    validation : callable, optional
        ``validation(U, V, theta) -> float`` (lower is better), evaluated after each step;
        the best-scoring iterate is returned and the fit stops after ``n_iter_no_change``
        steps without improvement.
    callback : callable, optional
        ``callback(iteration, elapsed, objective)`` after each greedy step.
    init_offset : float, optional
        Start from ``X_0 = init_offset * 1 1^T`` (one rank-one term of the budget).
    init_factors : (U0, V0, theta0), optional
        Start from ``X_0 = U0 diag(theta0) V0^T`` (e.g. :func:`bias_init`); its ``k0`` terms
        count in the rank budget.  Overrides ``init_offset``.
    grad_cache : callable, optional
        ``grad_cache(U, V, theta, loss_code, delta) -> matvec or None``: one pass that keeps
        the step's per-entry gradients (where memory allows); ``matvec(u, v) -> (G v, G^T u)``
        then reads the cache, O(1) per entry instead of O(t).  The gradient of a step is fixed
        while its power method runs, so the result is the same; the cache is rebuilt every
        step.  Cached passes are counted in ``n_cache_passes``, not ``n_passes``.
    checkpoint : ooc_lowrank._checkpoint.Checkpoint, optional
        Resume from its saved state if it has one (the iterate, the RNG state, the current
        gradient pass, histories and counters: the continuation is bitwise the uninterrupted
        fit); save after every ``checkpoint.every``-th greedy step and when the fit stops.

    Returns
    -------
    GreedyResult

    Notes
    -----
    The driver's own arithmetic between passes (the power method's norms and products on
    full-length vectors, the refits) runs with BLAS limited to one thread, whatever the
    scheduler: on a loaded 2-core machine two OpenBLAS threads made each ``norm`` of a
    270,000-vector 20 ms instead of 0.3 ms, time during which a cluster's workers wait for the
    next pass (1.5 s of driver time per 22-pass fit; issue 27).
    """
    o = replace(PursuitOptions() if options is None else options, **settings)
    lossobj = get_loss(o.loss)
    m, n = int(shape[0]), int(shape[1])
    refit = ("full" if lossobj.smooth else "none") if o.refit == "auto" else o.refit
    exact = resolve_refit_solver(o.refit_solver, lossobj.name, o.greedy_l1)
    run = _Counter(reduce)
    rng = np.random.default_rng(o.random_state)
    log = progress_log(o.verbose)
    code, delta, l2 = lossobj.code, float(o.huber_delta), float(o.l2)
    gl2, gl1 = float(o.greedy_l2), float(o.greedy_l1)

    def power_pass(U, V, theta, u, v):
        # V apart from v: unchanged over the step's passes, shipped to a cluster once
        return run(_blocks.power_split_block, (U, V, theta, code, delta, u, v))

    def step_matvec(U, V, theta):
        """The power method's ``matvec`` for this step: from the gradient cache if one is
        offered and pays off (more than two power passes), else a fused pass over the data."""
        cached = None
        if grad_cache is not None and o.power_iter > 2:
            cached = grad_cache(U, V, theta, code, delta)
        if cached is None:
            return lambda u, v: power_pass(U, V, theta, u, v)
        run.count("grad_cache")  # building the cache read the data once

        def matvec(u, v):
            res.n_cache_passes += 1
            gv, gtu = cached(u, v)
            return gv, gtu, None

        return matvec

    U = np.zeros((m, 0))
    V = np.zeros((n, 0))
    theta = np.zeros(0)
    used = 0
    if init_offset is not None and init_offset != 0.0:
        # X_0 = c 1 1^T as a first rank-one term (counted in the rank budget)
        U = np.full((m, 1), 1.0 / np.sqrt(m))
        V = np.full((n, 1), 1.0 / np.sqrt(n))
        theta = np.array([float(init_offset) * np.sqrt(m * n)])
        used = 1
    if init_factors is not None:
        U, V, theta = (np.asarray(a, dtype=np.float64) for a in init_factors)
        U, V, theta = U.reshape(m, -1).copy(), V.reshape(n, -1).copy(), theta.ravel().copy()
        used = theta.size
    n_start = theta.size  # terms of X_0: the economic refit does not rescale them
    normal = None  # exact full refit: (B^T B, B^T o) of the basis on Omega (theta-free)
    res = GreedyResult(U, V, theta)
    t0 = time.perf_counter()
    restored = checkpoint.load() if checkpoint is not None else None
    stopped = False
    if restored is None:
        first = power_pass(U, V, theta, np.ones(m), np.ones(n))
        res.objective.append(float(first[2][0]))
        _check_finite(res.objective[0], (U, V, theta), "at the starting point")
        snapshots = [(U.shape[1], theta.copy())]  # the start X_0 (k0 terms)
        best_score = np.inf
        if validation is not None:
            best_score = float(validation(U, V, theta))
            res.validation.append(best_score)
        best_obj = res.objective[0]
        res.best_iter = 0
        since_best = 0
        t = 0
    else:
        st, arr = restored[0], restored[1]
        U, V, theta = arr["U"].copy(), arr["V"].copy(), arr["theta"].copy()
        first = (arr["first_gv"].copy(), arr["first_gtu"].copy(), arr["first_stats"].copy())
        cuts = np.cumsum([0] + st["snap_lens"])
        snapshots = [
            (k, arr["snap_theta"][cuts[i] : cuts[i + 1]].copy())
            for i, k in enumerate(st["snap_ks"])
        ]
        rng.bit_generator.state = st["rng"]
        used, n_start, t, stopped = st["used"], st["n_start"], st["t"], st["stopped"]
        best_score, best_obj, since_best = st["best_score"], st["best_obj"], st["since_best"]
        res.best_iter, run.n, res.n_cache_passes = st["best_iter"], st["n_passes"], st["n_cache"]
        run.kinds = dict(st.get("pass_kinds", {}))  # absent from older checkpoints
        for key in ("objective", "validation", "inner_counts", "step_sizes", "times"):
            setattr(res, key, list(st[key]))
        if "refit_gram" in arr:
            normal = (arr["refit_gram"].copy(), arr["refit_rhs"].copy())

    def save_checkpoint():
        state = {
            "used": used,
            "n_start": n_start,
            "t": t,
            "stopped": stopped,
            "best_score": best_score,
            "best_obj": best_obj,
            "since_best": since_best,
            "best_iter": res.best_iter,
            "n_passes": run.n,
            "n_cache": res.n_cache_passes,
            "pass_kinds": dict(run.kinds),
            "rng": rng.bit_generator.state,
            "snap_ks": [k for k, _ in snapshots],
            "snap_lens": [th.size for _, th in snapshots],
        }
        for key in ("objective", "validation", "inner_counts", "step_sizes", "times"):
            state[key] = getattr(res, key)
        arrays = {"U": U, "V": V, "theta": theta}
        arrays["snap_theta"] = np.concatenate([th for _, th in snapshots])
        arrays.update(first_gv=first[0], first_gtu=first[1], first_stats=first[2])
        if normal is not None:
            arrays["refit_gram"], arrays["refit_rhs"] = normal
        checkpoint.save(t, state, arrays)

    while not stopped and used < o.rank and (o.max_iter is None or t < o.max_iter):
        t_step = time.perf_counter()
        t += 1
        K = _gram(U, V)
        base = [(U, l2 * theta, V)] if l2 > 0 and theta.size else []

        matvec = step_matvec(U, V, theta)

        if lossobj.smooth:
            u, s, v, info = top_triplet(
                matvec,
                m,
                n,
                lowrank=base,
                n_iter=o.power_iter,
                tol=o.power_tol,
                rng=rng,
                first=first,
            )
            if s <= 1e-300:
                log("GLRL step %d: gradient vanished on the observed entries; stopping", t)
                stopped = True
                break
            # (u, s, v) is the top triplet of +grad; the descent direction is u (-v)^T
            v = -v
            U = np.column_stack([U, u])
            V = np.column_stack([V, v])
            # minimizer of the quadratic upper bound of the penalized objective along u v^T
            L = lossobj.lipschitz + l2 + gl2
            step0 = max(s - gl1, 0.0) / L
            if refit == "none":
                theta = np.append(theta, step0)
            elif refit == "full" and exact:
                theta, normal = _refit_full_exact(
                    run, U, V, np.append(theta, step0), l2, o.lbfgs_iter,
                    greedy_l2=gl2, n_fixed=n_start, normal=normal,
                )
            elif refit == "full":
                theta = _refit_full(
                    run, U, V, np.append(theta, step0), code, delta, l2, o.lbfgs_iter,
                    greedy_l2=gl2, greedy_l1=gl1, n_fixed=n_start,
                )
            else:
                theta = _refit_econ(
                    run, U, V, theta, step0, code, delta, l2, o.lbfgs_iter, n_fixed=n_start,
                    greedy_l2=gl2, greedy_l1=gl1, exact=exact,
                )
            res.inner_counts.append(1)
            res.step_sizes.append(step0)
            used += 1
        else:
            g_stats = first[2]
            gnorm2 = g_stats[1]
            if l2 > 0:
                gnorm2 += 2 * l2 * g_stats[2] + l2 * l2 * theta @ K @ theta
            Uc, Vc, sc = np.zeros((m, 0)), np.zeros((n, 0)), np.zeros(0)
            cross = 0.0
            i = 0
            while True:
                i += 1
                lr = base + [(Uc, -sc, Vc)]
                u, s, v, info = top_triplet(
                    matvec,
                    m,
                    n,
                    lowrank=lr,
                    n_iter=o.power_iter,
                    tol=o.power_tol,
                    rng=rng,
                    first=first,
                )
                guv = info["sparse_uv"]
                if l2 > 0 and theta.size:
                    guv += l2 * np.sum(theta * (U.T @ u) * (V.T @ v))
                Uc = np.column_stack([Uc, u])
                Vc = np.column_stack([Vc, v])
                sc = np.append(sc, s)
                cross += s * guv
                resid2 = gnorm2 - 2 * cross + sc @ _gram(Uc, Vc) @ sc
                spent = i >= o.max_inner or used + i >= o.rank
                if resid2 <= o.nu * o.nu * gnorm2 or spent or s <= 1e-300:
                    break
            eta = _step(o.step_schedule, o.step_size, t, l2)
            if gl2 > 0:  # gradient step of greedy_l2 / 2 |theta_g|^2 on the greedy terms
                theta = theta.copy()
                theta[n_start:] *= max(0.0, 1.0 - eta * gl2)
            if gl1 > 0:  # proximal step of greedy_l1 |theta_g|_1: soft-thresholding
                theta = theta.copy()
                tg = theta[n_start:]
                theta[n_start:] = np.sign(tg) * np.maximum(np.abs(tg) - eta * gl1, 0.0)
            # X <- X - eta * Ghat = X + sum (eta s_i) u_i (-v_i)^T
            U = np.column_stack([U, Uc])
            V = np.column_stack([V, -Vc])
            if o.step_schedule == "search":
                eta = _search_step(run, U, V, theta, sc, eta, code, delta, l2)
            theta = np.append(theta, eta * sc)
            res.inner_counts.append(i)
            res.step_sizes.append(eta)
            used += i
        first = power_pass(U, V, theta, np.ones(m), np.ones(n))
        obj = float(first[2][0])
        if l2 > 0:
            obj += 0.5 * l2 * theta @ _gram(U, V) @ theta
        obj += 0.5 * gl2 * theta[n_start:] @ theta[n_start:] + gl1 * np.abs(theta[n_start:]).sum()
        _check_finite(obj, (U, V, theta), f"after greedy step {t}")
        res.objective.append(obj)
        snapshots.append((U.shape[1], theta.copy()))
        elapsed = time.perf_counter() - t0
        res.times.append(time.perf_counter() - t_step)
        if validation is not None:
            score = float(validation(U, V, theta))
            res.validation.append(score)
            if score < best_score:
                best_score, res.best_iter, since_best = score, t, 0
            else:
                since_best += 1
        elif obj < best_obj or lossobj.smooth:
            best_obj, res.best_iter = min(obj, best_obj), t
        log(
            "GLRL step %d: rank %d, objective %.6g, %.3fs, %d passes",
            t,
            U.shape[1],
            obj,
            res.times[-1],
            run.n,
        )
        if callback is not None:
            callback(t, elapsed, obj)
        if validation is not None and o.n_iter_no_change and since_best >= o.n_iter_no_change:
            log("GLRL: validation score did not improve for %d steps; stopping", since_best)
            stopped = True
            break
        prev = res.objective[-2]
        if o.tol > 0 and prev - obj < o.tol * max(abs(prev), 1e-300):
            log("GLRL step %d: relative objective decrease below tol=%g; stopping", t, o.tol)
            stopped = True
            break
        if checkpoint is not None and checkpoint.due(t):
            save_checkpoint()
    if checkpoint is not None:
        save_checkpoint()
    res.n_iter = t
    k, th = snapshots[res.best_iter]
    res.U, res.V, res.theta = U[:, :k].copy(), V[:, :k].copy(), th
    res.n_passes = run.n
    res.pass_kinds = dict(run.kinds)
    return res


def _check_finite(obj, factors, where):
    """Stop with :class:`NonFiniteError` when the objective or a factor is NaN / inf."""
    bad = "the training objective" if not np.isfinite(obj) else None
    if bad is None:
        for name, a in zip(("U", "V", "theta"), factors, strict=True):
            if not np.isfinite(a).all():
                bad = f"the factor {name}"
                break
    if bad is None:
        return
    raise NonFiniteError(
        f"GreedyLowRank: {bad} is not finite (objective {obj!r}) {where}. Likely cause: the "
        "scale of the observed values (e.g. one value of 1e300, whose square overflows "
        "float64) or a too large step_size. Scale the values (e.g. divide them by their "
        "largest absolute value), fix the bad entries, or lower step_size"
    )


def resolve_refit_solver(refit_solver, loss, greedy_l1):
    """Whether the refits are solved exactly (``refit_solver`` of :func:`greedy_pursuit`):
    ``"exact"`` and ``"auto"`` for the square loss without ``greedy_l1`` (a least-squares
    refit), else L-BFGS.  Raises a ValueError naming the rule for a bad value or for
    ``"exact"`` where it does not apply."""
    if refit_solver not in REFIT_SOLVERS:
        raise param_error("refit_solver", f"must be one of {REFIT_SOLVERS}", refit_solver)
    exact_ok = loss == "square" and float(greedy_l1) == 0.0
    if refit_solver == "exact" and not exact_ok:
        raise param_error(
            "refit_solver",
            "'exact' needs loss='square' and greedy_l1=0 (a least-squares refit)",
            refit_solver,
            f"loss={loss!r}, greedy_l1={greedy_l1!r}: use refit_solver='auto' (exact where it "
            "applies) or 'lbfgs'",
        )
    return exact_ok and refit_solver != "lbfgs"


def resolve_init(init, *, rank, mean, n_not_pm1, n_not_01, n_negative):
    """The starting iterate of ``init="auto"``, from statistics of the training values.

    Rating-like values (none negative, non-zero mean, e.g. 1-5 stars) and two-valued labels
    ({-1, +1} signs or {0, 1}) start at the biases, ``"bias"`` (``"mean"`` when ``rank < 3``
    leaves no room for the rank-2 bias start).  Real values of both signs that are not labels,
    and all-zero values, start at ``X_0 = 0`` (``"zero"``, SPEC).  Any other ``init`` is
    returned as given.

    Evidence (``benchmarks/glrl_defaults.py``, validation splits of training data only): on
    MovieLens (L1, rank 10) the bias start is what makes GLRL beat the global mean (best
    validation MAE 0.734, against 0.811 from the mean and 1.69 from ``X_0 = 0``, which spends
    its terms on the rating counts); on Epinions signs (logistic, rank 40) it raises
    validation accuracy from 0.913 (zero) and 0.922 (mean) to 0.944.  {0, 1} labels are
    {-1, +1} labels mapped by ``(y + 1) / 2``, which the bias start follows exactly, so they
    are treated alike.  For data of both signs there was no evidence that a start helps; it
    would use two terms of the rank budget.

    Parameters
    ----------
    init : str
        The ``init`` parameter.
    rank : int
        The rank budget.
    mean : float
        Mean of the training values.
    n_not_pm1, n_not_01, n_negative : int
        Counts of values outside {-1, +1}, outside {0, 1}, and below 0.

    Returns
    -------
    str
        One of ``"zero"``, ``"mean"``, ``"bias"``, ``"bias-l1"``.
    """
    if init != "auto":
        return init
    all_zero = n_negative == 0 and mean == 0.0
    labels = n_not_pm1 == 0 or n_not_01 == 0
    rating_like = n_negative == 0 and mean != 0.0
    if all_zero or not (labels or rating_like):
        return "zero"
    return "bias" if rank >= 3 else "mean"


#: greedy_l2 of ``greedy_l2=None`` for the logistic loss from the bias start (see below)
GREEDY_L2_LOGISTIC = 0.01


def resolve_greedy_l2(greedy_l2, *, loss, init):
    """The penalty on the greedy coefficients of ``greedy_l2=None`` (any number is returned
    as given): :data:`GREEDY_L2_LOGISTIC` for the logistic loss from the bias start, else 0.

    Evidence (``benchmarks/glrl_fidelity.py`` part ``penalty``, validation data only: 1/9 of
    the training part of Epinions fold 0, GLRL rank 40): validation accuracy 0.9460 without the
    penalty, 0.9500 at 0.003 and 0.01, 0.9494 at 0.03, 0.9488 at 0.1, 0.947-0.945 at 0.3-30.
    The greedy terms after the bias start overfit the signs (training loss 0.061 -> 0.100 at
    0.01); the whole-matrix ``l2`` is no cure, it shrinks the bias terms.  On MovieLens L1
    (rank 10, 50/50 validation splits) no value in 0.003-0.1 changed the MAE by more than
    4e-4, so nonsmooth losses keep 0; for the square and Huber losses (R1MP) there is no
    measurement and SPEC's unpenalized refit is kept.  The value is absolute, on a loss summed
    over the entries (602,000 entries in the Epinions validation fits): on data of a very
    different size cross-validate it (``GreedyLowRankCV(greedy_l2s=...)``).
    """
    if greedy_l2 is not None:
        return float(greedy_l2)
    return GREEDY_L2_LOGISTIC if loss == "logistic" and init in ("bias", "bias-l1") else 0.0


def bias_init(reduce, shape, mean, *, reg=10.0, n_sweeps=5, irls_eps=0.0):
    """Biases ``X_0 = mu + b_u 1^T + 1 b_i^T`` as a rank-2 factored start (2 passes a sweep).

    Alternating regularized (weighted) means: ``b_u = sum_b w (o - mu - b_i) / (reg + sum w)``,
    then the same for ``b_i``; ``irls_eps > 0`` uses the L1 IRLS weights (robust biases), 0 the
    square loss (the usual baseline predictor).  Returns ``((U0, V0, theta0), passes)`` with
    unit columns ``U0 = [mu + b_u, 1] / norms`` and ``V0 = [1, b_i] / norms``.
    """
    m, n = int(shape[0]), int(shape[1])
    run = _Counter(reduce)
    bu, bi = np.zeros(m), np.zeros(n)
    for _ in range(int(n_sweeps)):
        (r,) = run(_blocks.bias_block, (float(mean), bu, bi, 0, float(irls_eps)))
        bu = r[:m] / (reg + r[m:])
        (c,) = run(_blocks.bias_block, (float(mean), bu, bi, 1, float(irls_eps)))
        bi = c[:n] / (reg + c[n:])
    a = mean + bu
    cols_u = [a, np.ones(m)]
    cols_v = [np.ones(n), bi]
    U, V, th = [], [], []
    for x, y in zip(cols_u, cols_v, strict=True):
        nx, ny = np.linalg.norm(x), np.linalg.norm(y)
        if nx == 0.0 or ny == 0.0:
            continue
        U.append(x / nx)
        V.append(y / ny)
        th.append(nx * ny)
    if not th:  # all values zero: start at X_0 = 0 (no terms used)
        return (np.zeros((m, 0)), np.zeros((n, 0)), np.zeros(0)), run.n
    return (np.column_stack(U), np.column_stack(V), np.array(th)), run.n


def _step(schedule, c, t, l2):
    """Step size eta_t (SPEC GLRL-9): 1/(mu t) when strongly convex ("auto" with l2 > 0)."""
    if schedule == "auto":
        if l2 > 0:
            return 1.0 / (l2 * t)
        schedule = "sqrt"
    if schedule in ("sqrt", "search"):
        return c / np.sqrt(t)
    if schedule == "inverse":
        return c / t
    return c


def _search_step(run, U, V, theta, sc, eta, code, delta, l2, span=(-6, 10)):
    """Best of the steps ``eta * 2^k`` (k in span) for the new terms, in one pass."""
    steps = eta * 2.0 ** np.arange(span[0], span[1] + 1)
    p = theta.size
    coef = np.concatenate([theta, sc])
    (vals,) = run(_blocks.step_search_block, (U, V, coef, p, steps, code, delta))
    if l2 > 0:
        K = _gram(U, V)
        for j, e in enumerate(steps):
            c = np.concatenate([theta, e * sc])
            vals[j] += 0.5 * l2 * c @ K @ c
    return float(steps[int(np.argmin(vals))])


def _lbfgs(fun, x0, maxiter, bounds=None):
    cache = {}

    def f(z):
        key = z.tobytes()
        if key not in cache:
            cache[key] = fun(z)
        return cache[key]

    f0, _ = f(np.asarray(x0, float))
    out = minimize(
        f,
        x0,
        jac=True,
        method="L-BFGS-B",
        bounds=bounds,
        options={"maxiter": maxiter, "maxfun": max(10, 3 * maxiter)},
    )
    if not np.isfinite(out.fun) or out.fun > f0:
        return np.asarray(x0, float)  # SPEC 2.3 [E]: keep the warm start if L-BFGS is worse
    return out.x


def full_refit_objective(run, U, V, code, delta, l2, greedy_l2=0.0, n_fixed=0, greedy_l1=0.0):
    """``fun(theta) -> (phi, grad)`` of the full refit (SPEC GLRL-6), one pass per call.

    ``phi`` includes ``l2 / 2 * theta^T K theta`` (``K = U^T U * V^T V``: ``||X||_F^2``) and
    ``greedy_l2 / 2 * |theta[n_fixed:]|^2`` (the greedy terms; the first ``n_fixed`` terms are
    a start ``X_0``, unpenalized) and ``greedy_l1 * sum theta[n_fixed:]`` (linear: the
    refit keeps those coefficients ``>= 0``, see :func:`_refit_full`).
    """
    K = _gram(U, V) if l2 > 0 else None
    f0, gl2, gl1 = int(n_fixed), float(greedy_l2), float(greedy_l1)

    def fun(th):
        grad, st = run(_blocks.refit_full_block, (U, V, th, code, delta))
        f = float(st[0])
        if l2 > 0:
            Kt = K @ th
            f += 0.5 * l2 * th @ Kt
            grad = grad + l2 * Kt
        if gl2 > 0:
            tg = th[f0:]
            f += 0.5 * gl2 * tg @ tg
            grad = grad.copy()
            grad[f0:] += gl2 * tg
        if gl1 > 0:
            f += gl1 * th[f0:].sum()
            grad = grad.copy()
            grad[f0:] += gl1
        return f, grad

    return fun


def econ_refit_objective(
    run, U, V, theta, code, delta, l2, n_fixed=0, greedy_l2=0.0, greedy_l1=0.0, hessian=False
):
    """``fun((alpha, beta)) -> (phi, grad)`` of the economic refit (SPEC GLRL-7), one pass.

    ``U``, ``V`` hold the previous terms followed by the new one; ``theta`` the previous
    coefficients.  The first ``n_fixed`` terms (a start ``X_0`` such as the biases of
    ``init="bias"``; not part of SPEC, where ``X_0 = 0``) are kept as they are and only the
    greedy terms are scaled: ``X = X_0 + alpha X_greedy + beta u v^T``.  ``greedy_l2`` adds
    ``greedy_l2 / 2 * (alpha^2 |theta_g|^2 + beta^2)`` (``theta_g = theta[n_fixed:]``) and
    ``greedy_l1 * (alpha sum theta_g + beta)`` (linear: ``alpha, beta >= 0``, ``theta_g >= 0``).
    ``hessian=True``: ``fun`` returns ``(phi, grad, hess)`` with the 2 x 2 Hessian, same pass.
    """
    p, f = theta.size, int(n_fixed)
    gl2, gl1 = float(greedy_l2), float(greedy_l1)
    tg2, tg1 = float(theta[f:] @ theta[f:]), float(theta[f:].sum())
    if l2 > 0:
        K = _gram(U, V)  # (p + 1, p + 1)

    def coef(a, b):
        return np.concatenate([theta[:f], a * theta[f:], [b]])

    def fun(ab):
        a, b = float(ab[0]), float(ab[1])
        (out,) = run(_blocks.refit_econ_block, (U, V, theta, a, b, code, delta, f, hessian))
        fval, grad = float(out[0]), np.array([out[1], out[2]])
        if hessian:
            H = np.array([[out[3], out[4]], [out[4], out[5]]])
        if l2 > 0:
            c = coef(a, b)
            Kc = K @ c
            fval += 0.5 * l2 * c @ Kc
            grad = grad + l2 * np.array([Kc[f:p] @ theta[f:], Kc[p]])
            if hessian:  # c is affine in (alpha, beta): dc/dalpha = (0, theta_g, 0), dc/dbeta = e_p
                tgv = theta[f:]
                kgp = K[f:p, p] @ tgv
                H = H + l2 * np.array([[tgv @ K[f:p, f:p] @ tgv, kgp], [kgp, K[p, p]]])
        if gl2 > 0:
            fval += 0.5 * gl2 * (a * a * tg2 + b * b)
            grad = grad + gl2 * np.array([a * tg2, b])
            if hessian:
                H = H + gl2 * np.diag([tg2, 1.0])
        if gl1 > 0:
            fval += gl1 * (a * tg1 + b)
            grad = grad + gl1 * np.array([tg1, 1.0])
        return (fval, grad, H) if hessian else (fval, grad)

    return fun


def _refit_full(
    run, U, V, theta0, code, delta, l2, maxiter, greedy_l2=0.0, n_fixed=0, greedy_l1=0.0
):
    """GLRL: theta = argmin phi(sum theta_i u_i v_i^T), L-BFGS warm-started at theta0
    (greedy coefficients bounded below by 0 when ``greedy_l1 > 0``)."""
    if maxiter <= 0:
        return theta0
    fun = full_refit_objective(run, U, V, code, delta, l2, greedy_l2, n_fixed, greedy_l1)
    bounds = None
    if greedy_l1 > 0:
        bounds = [(None, None)] * int(n_fixed) + [(0.0, None)] * (theta0.size - int(n_fixed))
    return _lbfgs(fun, theta0, maxiter, bounds)


def _newton_step(x0, grad, hess):
    """``x0 - hess^+ grad``: the minimizer of a convex quadratic with that gradient at ``x0``
    and that (positive semi-definite) Hessian; directions of (near-)zero curvature, e.g. a
    basis term that vanishes on every observed entry, are left unchanged.  ``None`` when the
    step is not finite or does not decrease the quadratic.  (A resumed fit repeats these steps
    bit for bit: what once made it differ was a per-entry gradient from the data pass, which
    the exact refits no longer use, not this solve.)"""
    w, Q = np.linalg.eigh(0.5 * (hess + hess.T))
    keep = w > max(float(w.max(initial=0.0)), 0.0) * 1e-12
    if not keep.any():
        return None
    d = -(Q[:, keep] @ ((Q[:, keep].T @ grad) / w[keep]))
    if not np.all(np.isfinite(d)) or float(grad @ d) > 0:
        return None
    return x0 + d


def _refit_full_exact(
    run, U, V, theta0, l2, maxiter, greedy_l2=0.0, n_fixed=0, normal=None
):
    """Exact full refit of the square loss, R1MP's least squares: ``(B^T B + P) theta = B^T o``
    with ``B`` the basis on the observed entries and ``P`` the penalties' Hessian.  One pass
    gives the new column of ``B^T B`` and ``B^T o`` (all of them when ``normal``, the pair for
    the first ``t - 1`` terms, is not given); the step is Newton's from ``theta0``.  Returns
    ``(theta, normal)``."""
    t = theta0.size
    if maxiter <= 0:
        return theta0, normal
    j0 = normal[0].shape[0] if normal is not None and normal[0].shape[0] == t - 1 else 0
    cols, rhs_new = run(_blocks.refit_gram_block, (U, V, j0))
    H = np.empty((t, t))
    rhs = np.empty(t)
    if j0:
        H[:j0, :j0] = normal[0]
        rhs[:j0] = normal[1]
    H[:, j0:] = cols
    H[j0:, :j0] = cols[:j0].T
    rhs[j0:] = rhs_new
    Ht = H.copy()
    if l2 > 0:
        Ht += l2 * _gram(U, V)
    f0 = int(n_fixed)
    if greedy_l2 > 0:
        Ht[np.arange(f0, t), np.arange(f0, t)] += greedy_l2
    grad = Ht @ theta0 - rhs
    theta = _newton_step(theta0, grad, Ht)
    return (theta0 if theta is None else theta), (H, rhs)


def _refit_econ(
    run, U, V, theta, step0, code, delta, l2, maxiter, n_fixed=0, greedy_l2=0.0, greedy_l1=0.0,
    exact=False,
):
    """EGLRL: (alpha, beta) = argmin phi(X_0 + alpha X + beta u v^T), warm start (1, s/L);
    ``exact`` (square loss, no ``greedy_l1``): the 2 x 2 least-squares solve, one pass."""
    ab = np.array([1.0, step0])
    if maxiter > 0 and exact:
        fun = econ_refit_objective(
            run, U, V, theta, code, delta, l2, n_fixed, greedy_l2, 0.0, hessian=True
        )
        _, g, H = fun(ab)
        new = _newton_step(ab, g, H)
        ab = ab if new is None else new
    elif maxiter > 0:
        fun = econ_refit_objective(
            run, U, V, theta, code, delta, l2, n_fixed, greedy_l2, greedy_l1
        )
        ab = _lbfgs(fun, ab, maxiter, [(0.0, None)] * 2 if greedy_l1 > 0 else None)
    f = int(n_fixed)
    return np.concatenate([theta[:f], theta[f:] * ab[0], [ab[1]]])
