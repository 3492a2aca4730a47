"""Functional core of two-sided IMC / GIMC-LFF (SPEC 1.5.1-1.5.3, 1.5.6, 5.1).

Model: ``B = Phi_U(X1) W H^T Phi_V(X2)^T``, objective (GIMC-13)

    f = 1/2 sum_{(i,j) in Omega} (p_i^T q_j - S_ij)^2 + lam/2 (||W||^2 + ||H||^2),

with ``P = Phi_U W`` (n1, k) and ``Q = Phi_V H`` (n2, k) the only per-item state held in memory.
Data are touched only through the engine, each pass one ``engine.compute``:

* X-pass (map): ``Phi Delta`` (n, k) for a direction or the factors;
* X-pass (reduce): ``Phi^T Z`` (D, k) or the feature-parameter gradient for ``df/dPhi = Z W^T``;
* Omega-pass: ``R Q`` / ``M Q`` row-aligned (map), or ``R^T P`` / ``M^T P`` (reduce, (n2, k)),
  or the loss alone;
* fused pass (X-blocks and the Omega-blocks of the same rows together): ``Phi^T (E Q)`` for a
  gradient or a Hessian-vector product in one pass.  The row side always fuses; the column side
  fuses when the column-sorted observations are in memory, else takes three passes.

One outer iteration: a W-step (CG on the Hessian operator ``Phi_U^T P_Omega(Phi_U Delta Q^T) Q +
lam Delta``, warm-started at the current W), an H-step (the same with the sides swapped), then,
with learned features, one Armijo step on U and one on V (SPEC 1.3, 5.3).  CG iterates decrease
the convex quadratic monotonically and Armijo accepts descent steps only, so ``f`` is
non-increasing.  All small algebra is float64.
"""

from __future__ import annotations

import copy
import functools
import logging
import os
from dataclasses import dataclass, field

import numpy as np

from ooc_lowrank import engine
from ooc_lowrank._progress import Progress
from ooc_lowrank._validation import NonFiniteError
from ooc_lowrank.gimc import _blocks as _gb
from ooc_lowrank.gimc.core import C1, MAX_TRIALS
from ooc_lowrank.imc import _blocks

logger = logging.getLogger("ooc_lowrank")

#: CG preconditioning (``fit_imc(precondition=True)``): sides with at most this many features
#: (``D``) get a :class:`Preconditioner` (an eigendecomposition of a ``D x D`` matrix once per
#: fit, about 0.2 s at ``D = 1000``) ...
PRECOND_MAX_FEATURES = 2048
#: ... keeping the top this many eigenpairs (Segment, m = 500: the 100th eigenvalue of
#: ``Phi^T diag(c) Phi`` is 4e-4 of the largest, the 300th 6e-6).
PRECOND_RANK = 256


@dataclass
class Side:
    """One side of the model: its row-blocked features, feature map and parameters."""

    X: engine.Blocked  # (n, d)
    spec: _gb.FeatureSpec | None  # None: identity map
    U: np.ndarray | None  # (d, m_total) float64, None for the identity map

    @property
    def learns(self) -> bool:
        return self.spec is not None and self.spec.learns

    @property
    def n_features(self) -> int:
        return int(self.X.shape[1]) if self.spec is None else self.spec.n_features

    def u_arg(self, U=None):
        U = self.U if U is None else U
        if U is None:
            return None
        dt = self.X.dtype if self.X.dtype in (np.float32, np.float64) else np.dtype(np.float64)
        return U.astype(dt)


@dataclass
class FitResult:
    """What :func:`fit_imc` returns."""

    W: np.ndarray  # (D1, k)
    H: np.ndarray  # (D2, k)
    U: np.ndarray | None
    V: np.ndarray | None
    P: np.ndarray  # (n1, k) = Phi_U W
    Q: np.ndarray  # (n2, k) = Phi_V H
    objective: list = field(default_factory=list)  # after every outer iteration (0 = init)
    cg_iterations: list = field(default_factory=list)  # (W-step, H-step) per iteration
    step_sizes: list = field(default_factory=list)  # (eta_U, eta_V) per iteration
    n_iter: int = 0
    n_passes: int = 0
    converged: bool = False


class Problem:
    """The data of one fit (observations and both sides) and its passes, counted."""

    def __init__(self, obs, rows: Side, cols: Side, lam: float, obs_t=None, cache_bytes=None):
        self.obs, self.rows, self.cols, self.lam = obs, rows, cols, float(lam)
        # the observations sorted by column (n2, n1), when available
        self.obs_t = self._transposed_fits(obs, obs_t)
        self.n_passes = 0
        self.cache_bytes = engine.DEFAULT_CACHE_BYTES if cache_bytes is None else int(cache_bytes)
        self._held = {}  # id(side) -> (the U its Phi was computed at, Side over the held Phi)
        self._shared_bytes = 0  # held features kept by a cache outside this problem
        self._trial = None  # (side, U, key) of the last one-pass trial

    @staticmethod
    def _transposed_fits(obs, obs_t):
        """``obs_t``, or None on a distributed cluster where the in-memory observations and
        their transposed copy together would take more than half of what the workers keep
        scattered (:func:`ooc_lowrank.engine.scatter_budget`; the rest is for the factors
        ``P``, ``Q``): the two would evict each other and be shipped again pass after pass
        (issue 27: 2 x 200 MB per pass at 1M items).  Without it the column side takes three
        passes per product over the held observations."""
        budget = engine.scatter_budget()
        if budget is None or obs_t is None or not obs.in_memory:
            return obs_t
        n_workers, _ = engine._workers(engine.active_client())
        if (obs.nbytes + obs_t.nbytes) / n_workers <= budget / 2:
            return obs_t
        logger.info(
            "IMC: no transposed copy of the observations on the cluster (%.0f MiB for both "
            "per worker > half the scatter budget, %.0f MiB): column-side products take "
            "three passes", (obs.nbytes + obs_t.nbytes) / n_workers / 2**20, budget / 2**21,
        )  # fmt: skip
        return None

    def features(self, side: Side) -> Side:
        """``side`` with its feature matrix ``Phi`` computed once and held (the identity map over
        ``Phi``), while its feature parameters stay the same; ``side`` itself for the identity
        map or when the held ``Phi`` of both sides would exceed ``cache_bytes``.

        The passes of a W- or H-step (CG: a gradient and up to ``cg_iter`` Hessian-vector
        products) all read ``Phi`` at the same ``U``: computing it once (one X-pass, counted)
        instead of in every pass removes the ``X U`` product and the ``cos``/``sin`` of the
        feature map from all but one of them (Segment, m = 500: about 1,100 passes per fit).
        """
        if side.spec is None:
            return side
        hit = self._held.get(id(side))
        if hit is not None and hit[0] is side.U:
            return hit[1]
        dt = np.dtype(side.u_arg().dtype)
        nbytes = int(side.X.shape[0]) * side.spec.n_features * dt.itemsize
        others = self._shared_bytes + sum(
            _held_bytes(h) for k, h in self._held.items() if k != id(side)
        )
        # on a cluster: half the workers' memory, less what the scatter cache may keep there
        # (the observations, P, Q); held feature blocks and those both filled a worker
        cap = engine._cluster_cache_cap(None)
        if cap is not None:
            cap -= engine._workers(engine.active_client())[0] * engine.scatter_budget()
        if nbytes + others > (self.cache_bytes if cap is None else min(cap, self.cache_bytes)):
            return side
        self.n_passes += 1
        PhiB = engine.map_rows_persisted(
            _blocks.phi_block,
            side.X,
            args=(side.u_arg(), side.spec),
            n_cols=side.spec.n_features,
            kind="dense",
        )
        held = Side(X=PhiB, spec=None, U=None)
        self._held[id(side)] = (side.U, held)
        return held

    def hold_initial_features(self, held=None, kept=True):
        """The features of both sides at their current (initial) parameters, shared by fits of
        the same sides on other observations or ``lam`` (a selection's candidates and refit).

        ``held=None``: computed and held (:meth:`features`: one pass per side whose ``Phi``
        fits the budget) and returned, per side ``(U, Side over Phi)`` or None; else the list
        returned by an earlier fit, held here at no pass (its ``U`` must be the side's).
        With ``kept`` (the caller keeps the list for later fits) its bytes count against this
        problem's budget beside the features it holds itself."""
        sides = (self.rows, self.cols)
        if held is None:
            for side in sides:
                self.features(side)
            out = [self._held.get(id(side)) for side in sides]
            self._shared_bytes = sum(_held_bytes(h) for h in out if h is not None) if kept else 0
            return out
        for side, h in zip(sides, held, strict=True):
            if h is not None:
                if h[0] is not side.U:
                    raise ValueError("held features were computed at other feature parameters")
                self._held[id(side)] = h
        self._shared_bytes = sum(_held_bytes(h) for h in held if h is not None) if kept else 0
        return held

    def preconditioners(self, cache=None):
        """``(for the W-step, for the H-step)``: a :class:`Preconditioner` per side; ``(None,
        None)`` (no pass spent) when a side has more than :data:`PRECOND_MAX_FEATURES` features
        (its eigendecomposition would cost more than it saves) or no observations aligned with
        its rows (the column side without ``obs_t``), and for ``lam = 0`` (no shift: ``M`` may
        be singular).  Two passes, one per side (``Phi^T diag(c) Phi`` and the counts ``c``).

        ``cache``: a dict shared by fits of the same sides, feature parameters and observations
        at other ``lam`` (the candidates of a ``lam`` selection): the first computes and stores
        the eigendecompositions, the others reuse them (no pass)."""
        sides = ((self.rows, self.obs), (self.cols, self.obs_t))
        if self.lam <= 0 or any(
            obs is None or side.n_features > PRECOND_MAX_FEATURES for side, obs in sides
        ):
            return None, None
        if cache is not None and "pre" in cache:
            return tuple(p.with_lam(self.lam) for p in cache["pre"])
        grams, counts = [], []
        for side, obs in sides:
            D = side.n_features
            held = self.features(side)
            self.n_passes += 1
            G, c = engine.map_reduce(
                _blocks.weighted_gram_block,
                held.X,
                obs,
                args=(held.u_arg(), held.spec),
                shapes=[(D, D), (int(side.X.shape[0]),)],
            )
            grams.append(G)
            counts.append(c)
        pre = (
            Preconditioner(grams[0], self.lam, counts[1]),
            Preconditioner(grams[1], self.lam, counts[0]),
        )
        if cache is not None:
            cache["pre"] = pre
        return pre

    def fused(self, side: Side, obs, Delta, other, residual, image=False):
        """``(Phi^T (E other), sum E^2 / 2)`` in one pass over ``side.X`` and ``obs`` (row-aligned):
        ``E_ij = (Phi Delta)_i^T other_j`` (minus the value if ``residual``); with ``image``
        also ``Phi Delta`` (n, k), third."""
        side = self.features(side)
        self.n_passes += 1
        args = (side.u_arg(), side.spec, np.ascontiguousarray(Delta), other, bool(residual))
        shapes = [(side.n_features, Delta.shape[1]), ()]
        if image:
            S, out, loss = engine.map_reduce(
                _blocks.fused_image_block, side.X, obs, args=args,
                shapes=[(int(side.X.shape[0]), Delta.shape[1]), *shapes],
            )  # fmt: skip
            return out, float(loss), S
        out, loss = engine.map_reduce(_blocks.fused_block, side.X, obs, args=args, shapes=shapes)
        return out, float(loss)

    # X-passes ------------------------------------------------------------------------
    def project(self, side: Side, Delta, U=None):
        """``Phi(X) Delta`` (n, k) float64, one X-pass (``U``: at other feature parameters)."""
        if U is None:
            side = self.features(side)
        self.n_passes += 1
        Delta = np.ascontiguousarray(Delta, dtype=np.float64)
        return engine.map_rows_compute(
            _blocks.project_block,
            side.X,
            args=(side.u_arg(U), side.spec, Delta),
            n_cols=Delta.shape[1],
        )

    def phit(self, side: Side, Z):
        """``Phi(X)^T Z`` (D, k), one X-pass."""
        side = self.features(side)
        self.n_passes += 1
        return engine.map_reduce(
            _blocks.phit_block,
            side.X,
            Z,
            args=(side.u_arg(), side.spec),
            shapes=[(side.n_features, Z.shape[1])],
        )[0]

    def feature_grad(self, side: Side, Z, F):
        """Gradient w.r.t. the side's feature parameters for ``df/dPhi = Z F^T``, one X-pass."""
        self.n_passes += 1
        args = (side.u_arg(), side.spec, np.ascontiguousarray(F.T))
        hit = self._held.get(id(side))
        if hit is not None and hit[0] is side.U:  # Phi at this U is held: not recomputed
            gX, colsum = engine.map_reduce(
                _blocks.backprop_held_block, side.X, hit[1].X, Z, args=args
            )
        else:
            gX, colsum = engine.map_reduce(_blocks.backprop_block, side.X, Z, args=args)
        return _gb.finalize_grad(gX, colsum, side.U, side.spec)

    def obs_of(self, side: Side):
        """The observations whose rows are ``side``'s rows (``obs`` for the row side, ``obs_t``
        for the column side), or None (the column side without ``obs_t``)."""
        return self.obs if side is self.rows else self.obs_t

    def feature_grad_loss(self, side: Side, F, own, other):
        """``(gradient w.r.t. the side's feature parameters, sum R^2 / 2)`` for ``df/dPhi = (R
        other) F^T``, ``R`` the residual at the side's factor ``own = Phi F`` (n, k) and the
        other side's ``other``.  One pass over ``side.X`` and the side's row-aligned
        observations (:meth:`obs_of`); the column side without ``obs_t`` takes two (``R^T P``
        scattered, then :meth:`feature_grad`)."""
        obs = self.obs_of(side)
        if obs is None:
            RtP, loss = self.omega_cols(other, own, True)
            return self.feature_grad(side, RtP, F), loss
        self.n_passes += 1
        args = (side.u_arg(), side.spec, np.ascontiguousarray(F.T), other)
        hit = self._held.get(id(side))
        if hit is not None and hit[0] is side.U:  # Phi at this U is held: not recomputed
            gX, colsum, loss = engine.map_reduce(
                _blocks.grad_loss_held_block, side.X, hit[1].X, obs, own, args=args
            )
        else:
            gX, colsum, loss = engine.map_reduce(
                _blocks.grad_loss_block, side.X, obs, own, args=args
            )
        return _gb.finalize_grad(gX, colsum, side.U, side.spec), float(loss)

    def trial(self, side: Side, U, F, other):
        """``(sum R^2 / 2, F')`` at the side's trial parameters ``U``: its new factor ``F' =
        Phi_U F`` (n, k) and the loss with the other side's ``other``.  One pass over
        ``side.X`` and its row-aligned observations (:func:`_blocks.trial_block`); the column
        side without ``obs_t`` takes two (an X-pass, then an Omega-pass)."""
        obs = self.obs_of(side)
        if obs is None:
            Fn = self.project(side, F, U)
            return self.loss(other, Fn), Fn
        self.n_passes += 1
        F = np.ascontiguousarray(F, dtype=np.float64)
        key = None  # the trial's features, kept where the driver can take them
        if id(side) in self._held and engine.runs_direct(side.X, obs):
            key = ("imc-trial", id(self), os.urandom(8).hex())
        self._trial = (side, U, key)
        Fn, loss = engine.map_reduce(
            _blocks.trial_block,
            side.X,
            obs,
            args=(side.u_arg(U), side.spec, F, other, key),
            offset=True,
            shapes=[(int(side.X.shape[0]), F.shape[1]), ()],
        )
        return float(loss), Fn

    def keep_trial_features(self, side: Side):
        """After ``side``'s last trial was accepted (``side.U`` is its ``U``): hold the features
        it computed (kept in this process on the direct path), so that the next W- or H-step
        needs no pass to compute them again (the same bits as :meth:`features`)."""
        trial, self._trial = self._trial, None
        if trial is None or trial[0] is not side or trial[1] is not side.U or trial[2] is None:
            return
        starts = side.X.bounds[:-1]
        blocks = [_gb._phi_take(trial[2], s) for s in starts]
        if any(b is None for b in blocks):  # evicted (another fit's trial): computed again
            return
        held = engine.from_held_blocks(blocks, side.X.bounds, "dense")
        self._held[id(side)] = (side.U, Side(X=held, spec=None, U=None))

    # Omega-passes --------------------------------------------------------------------
    def omega_rows(self, P, Q, residual):
        """``(E Q, sum E^2 / 2)`` with E = R (residual) or M, one Omega-pass."""
        self.n_passes += 1
        k = Q.shape[1]
        out = engine.map_rows_compute(
            _blocks.omega_rows_block, self.obs, P, args=(Q, bool(residual)), n_cols=k + 1
        )
        return out[:, :k], float(out[:, k].sum())

    def omega_cols(self, P, Q, residual):
        """``(E^T P, sum E^2 / 2)``, one Omega-pass."""
        self.n_passes += 1
        EtP, loss = engine.map_reduce(
            _blocks.omega_cols_block,
            self.obs,
            P,
            args=(Q, bool(residual)),
            shapes=[Q.shape, ()],
        )
        return EtP, float(loss)

    def omega_loss(self, P, Q):
        """``[sum R^2 / 2, sum B S, sum B^2, sum S^2, nnz]``, one Omega-pass."""
        self.n_passes += 1
        return engine.map_reduce(
            _blocks.omega_loss_block, self.obs, P, args=(Q,), shapes=[(5,)]
        )[0]

    def loss(self, P, Q):
        """``sum R^2 / 2``, one Omega-pass."""
        return float(self.omega_loss(P, Q)[0])

    def objective(self, loss, W, H):
        return loss + 0.5 * self.lam * (float(np.sum(W * W)) + float(np.sum(H * H)))

    # gradients and Hessian-vector products (also used by the tests) -------------------
    # The row side is always fused (one pass over X_row and the observations, which share
    # rows); the column side is fused when the column-sorted observations ``obs_t`` exist, and
    # otherwise takes three passes: ``S = Phi_V Delta``, the scattered ``M^T P``, ``Phi_V^T``.
    def grad_W(self, W, P, Q):
        return self.fused(self.rows, self.obs, W, Q, True)[0] + self.lam * W

    def grad_H(self, H, P, Q):
        if self.obs_t is not None:
            return self.fused(self.cols, self.obs_t, H, P, True)[0] + self.lam * H
        RtP, _ = self.omega_cols(P, Q, True)
        return self.phit(self.cols, RtP) + self.lam * H

    # ``image=True``: ``(H Delta, Phi Delta)``, the direction's image for :func:`cg`'s ``image``
    def hvp_W(self, Delta, Q, image=False):
        if image:
            out, _, S = self.fused(self.rows, self.obs, Delta, Q, False, image=True)
            return out + self.lam * Delta, S
        return self.fused(self.rows, self.obs, Delta, Q, False)[0] + self.lam * Delta

    def hvp_H(self, Delta, P, image=False):
        if self.obs_t is not None:
            if image:
                out, _, S = self.fused(self.cols, self.obs_t, Delta, P, False, image=True)
                return out + self.lam * Delta, S
            return self.fused(self.cols, self.obs_t, Delta, P, False)[0] + self.lam * Delta
        S = self.project(self.cols, Delta)
        MtP, _ = self.omega_cols(P, S, False)
        out = self.phit(self.cols, MtP) + self.lam * Delta
        return (out, S) if image else out


def _held_bytes(hit):
    """Bytes of a held feature matrix (a :attr:`Problem._held` value)."""
    X = hit[1].X
    return int(X.shape[0]) * int(X.shape[1]) * X.dtype.itemsize


def cg(x, r, hvp, tol, max_iter, precond=None, image=None):
    """Conjugate gradient on ``H x = b`` from ``x`` with residual ``r = b - H x``.

    Stops when ``||r|| <= tol ||r_0||`` or after ``max_iter`` products.  Returns ``x`` and the
    number of iterations.  Each iterate lowers the quadratic (``H`` is positive definite).
    ``precond``: a function ``r -> M^{-1} r`` for a symmetric positive definite ``M``
    (preconditioned CG; the same stopping rule on the unpreconditioned residual).
    ``image``: ``Phi x`` (n, k) for an ``hvp`` that returns ``(H p, Phi p)``: it is updated
    with ``x`` (``x += alpha p``, ``image += alpha Phi p``) and returned third, so that the
    new factor ``Phi x`` needs no X-pass of its own (equal to projecting ``x`` afresh up to
    rounding).
    """
    x = np.array(x, dtype=np.float64)
    r = np.array(r, dtype=np.float64)
    img = None if image is None else np.array(image, dtype=np.float64)
    product = hvp if img is None else _Imaged(hvp, img)
    x, it = _cg(x, r, product, tol, max_iter, precond)
    return (x, it) if img is None else (x, it, img)


class _Imaged:
    """An ``hvp`` returning ``(H p, Phi p)`` seen by the CG loops as ``p -> H p``; ``step(alpha)``
    adds ``alpha Phi p`` of the last product to the image."""

    def __init__(self, hvp, img):
        self.hvp, self.img, self.last = hvp, img, None

    def __call__(self, p):
        Hp, self.last = self.hvp(p)
        return Hp

    def step(self, alpha):
        self.img += alpha * self.last


def _cg(x, r, hvp, tol, max_iter, precond):
    r0 = float(np.sqrt(np.sum(r * r)))
    if r0 == 0.0:
        return x, 0
    if precond is not None:
        return _pcg(x, r, r0, hvp, tol, max_iter, precond)
    step = getattr(hvp, "step", None)
    p = r.copy()
    rs = r0 * r0
    it = 0
    for it in range(1, max_iter + 1):
        Hp = hvp(p)
        curv = float(np.sum(p * Hp))
        if not curv > 0.0:  # numerically flat direction: nothing left to gain
            return x, it
        alpha = rs / curv
        x += alpha * p
        if step is not None:
            step(alpha)
        r -= alpha * Hp
        rs_new = float(np.sum(r * r))
        if np.sqrt(rs_new) <= tol * r0:
            break
        p = r + (rs_new / rs) * p
        rs = rs_new
    return x, it


def _pcg(x, r, r0, hvp, tol, max_iter, precond):
    """:func:`cg` with a preconditioner (``x``, ``r`` float64 copies, ``r0 = ||r|| > 0``)."""
    step = getattr(hvp, "step", None)
    z = precond(r)
    p = z.copy()
    rz = float(np.sum(r * z))
    it = 0
    for it in range(1, max_iter + 1):
        Hp = hvp(p)
        curv = float(np.sum(p * Hp))
        if not (curv > 0.0 and rz > 0.0):  # flat direction or a spent residual
            return x, it
        alpha = rz / curv
        x += alpha * p
        if step is not None:
            step(alpha)
        r -= alpha * Hp
        if np.sqrt(float(np.sum(r * r))) <= tol * r0 or it == max_iter:
            break
        z = precond(r)
        rz_new = float(np.sum(r * z))
        p = z + (rz_new / rz) * p
        rz = rz_new
    return x, it


class Preconditioner:
    """A Kronecker preconditioner for one side's CG step (W- or H-step).

    The step's Hessian is ``sum_i phi_i phi_i^T (x) C_i + lam I`` with ``C_i = sum_{j in
    Omega_i} q_j q_j^T`` (``q``: the other side's factor rows).  With ``C_i`` replaced by
    ``c_i C`` (``c_i = |Omega_i|``, ``C`` the mean of ``q_j q_j^T`` over the observed entries)
    it becomes ``G (x) C + lam I`` with ``G = Phi^T diag(c) Phi``, inverted in the eigenbases
    of ``G`` (computed once, at the feature parameters of the first step: a stale ``G`` keeps
    ``M`` positive definite, only less exact) and of the small ``C`` (every step).  Only the
    top :data:`PRECOND_RANK` eigenpairs of ``G`` are kept; the rest of the spectrum is treated
    as the smallest kept eigenvalue.  Applying it costs ``4 D r k`` flops, no data pass.
    """

    def __init__(self, G, lam, other_counts):
        from scipy.linalg import eigh

        D = G.shape[0]
        r = min(D, PRECOND_RANK)
        with engine.one_blas_thread():
            ev, V = eigh(G, subset_by_index=[D - r, D - 1])
        self.ev, self.V = np.maximum(ev, 0.0), np.ascontiguousarray(V)
        self.low = float(self.ev[0]) if r < D else 0.0
        self.lam = float(lam)
        self.w = np.asarray(other_counts, dtype=np.float64) / max(float(np.sum(other_counts)), 1.0)

    def with_lam(self, lam):
        """The same preconditioner for another ``lam`` (no new eigendecomposition)."""
        out = copy.copy(self)
        out.lam = float(lam)
        return out

    def at(self, F):
        """``r -> M^{-1} r`` for the other side's factor ``F`` (n_other, k)."""
        # C-ordered, aligned copies: the products' bits depend on the layout (a factor or
        # gradient fetched from a cluster can come Fortran-ordered or misaligned, and NumPy's
        # matmul then takes other loops), so the threaded and distributed fits give the same bits
        F = np.array(F, dtype=np.float64, order="C")
        with engine.one_blas_thread():
            mu, VC = np.linalg.eigh(F.T @ (F * self.w[:, None]))
        mu = np.maximum(mu, 0.0)
        d_kept = 1.0 / (self.ev[:, None] * mu[None, :] + self.lam)
        d_rest = 1.0 / (self.low * mu + self.lam)
        V = self.V

        def apply(R):
            with engine.one_blas_thread():  # skinny products: one BLAS thread is faster
                Rc = np.array(R, dtype=np.float64, order="C") @ VC
                return (V @ ((V.T @ Rc) * (d_kept - d_rest)) + Rc * d_rest) @ VC.T

        return apply


def _check_finite(what, when, *values):
    for v in values:
        if not np.all(np.isfinite(v)):
            raise NonFiniteError(
                f"{what} became non-finite {when}. Lower the regularization's inverse (raise "
                "lam), scale the features, or check the observed values for extreme entries"
            )


def _feature_step(side: Side, g, f, eta_prev, trial):
    """One Armijo step on ``side.U`` (SPEC 1.3, 5.3) along the gradient ``g``.

    ``trial(U)`` gives ``(f, the side's new factor)`` at trial parameters ``U``
    (:meth:`Problem.trial`: one pass).  On acceptance ``side.U`` is updated and
    ``(eta, f_new, new_factor)`` returned; None (U unchanged, logged) if no trial descends.
    """
    gn2 = float(np.sum(g * g))
    if gn2 == 0.0:
        return None
    scale = 0.1 * np.linalg.norm(side.U) / np.sqrt(gn2)
    eta = scale if eta_prev is None else min(2.0 * eta_prev, scale)
    for _ in range(MAX_TRIALS):
        cand = side.U - eta * g
        f_new, Fn = trial(cand)
        if np.isfinite(f_new) and f_new <= f - C1 * eta * gn2:
            side.U = cand
            return eta, f_new, Fn
        eta *= 0.5
    logger.info("IMC: the feature line search found no descent step; parameters kept")
    return None


def _trial(prob: Problem, side: Side, F, other, reg):
    """``U -> (f, the side's new factor)`` for :func:`_feature_step` (``reg``: the penalty)."""

    def trial(U):
        loss, Fn = prob.trial(side, U, F, other)
        return reg + loss, Fn

    return trial


def init_factors(prob: Problem, k, rng):
    """Random ``W, H ~ N(0, 1/D)`` scaled by the least-squares factor ``c`` minimizing
    ``sum (c p_i^T q_j - S_ij)^2`` (one Omega-pass), so the first CG starts at the data scale."""
    W = rng.standard_normal((prob.rows.n_features, k)) / np.sqrt(prob.rows.n_features)
    H = rng.standard_normal((prob.cols.n_features, k)) / np.sqrt(prob.cols.n_features)
    P = prob.project(prob.rows, W)
    Q = prob.project(prob.cols, H)
    _, bs, bb, _, _ = prob.omega_loss(P, Q)
    c = bs / bb if bb > 0 else 1.0
    if c == 0.0 or not np.isfinite(c):
        c = 1.0
    a = np.sqrt(abs(c))
    return W * a * np.sign(c), H * a, P * a * np.sign(c), Q * a


def fit_imc(
    prob: Problem,
    k,
    *,
    max_iter=20,
    cg_iter=20,
    cg_tol=1e-3,
    tol=1e-6,
    rng=None,
    init=None,
    callback=None,
    verbose=False,
    precondition=False,
):
    """Alternate W-step, H-step (CG) and, for learned sides, one Armijo step on U and V.

    Parameters
    ----------
    prob : Problem
    k : int
        Rank.
    max_iter : int
        Outer iterations.
    cg_iter, cg_tol : int, float
        CG iterations per W- or H-step and its relative residual target.
    tol : float
        Stop when an outer iteration lowers ``f`` by less than ``tol * |f|``.
    rng : numpy Generator
    init : (W, H) or None
        Starting factors (default: :func:`init_factors`).
    callback : callable(iteration, elapsed, objective) or None
    verbose : bool
        Progress lines at INFO (DEBUG otherwise) on the ``ooc_lowrank`` logger.
    precondition : bool or dict
        Preconditioned CG (:meth:`Problem.preconditioners`, two passes after the
        initialization); sides it does not apply to keep plain CG.  A dict: preconditioned,
        with that dict as the cache of fits that differ only in ``lam`` (same observations,
        sides, feature parameters and ``rng`` state): the first fit stores its preconditioners
        and its initialization (``W, H, P, Q`` and the loss; they do not depend on ``lam``),
        the others start from them without a pass.

    Returns
    -------
    FitResult
    """
    progress = Progress(verbose, callback)
    rng = np.random.default_rng(0) if rng is None else rng
    cache = precondition if isinstance(precondition, dict) else None
    if cache is not None and init is None and "init" in cache:  # another lam's fit made it
        W, H, P, Q, loss0 = (np.array(a) if isinstance(a, np.ndarray) else a
                             for a in cache["init"])  # fmt: skip
    else:
        if init is None:
            W, H, P, Q = init_factors(prob, k, rng)
        else:
            W, H = (np.array(a, dtype=np.float64) for a in init)
            P, Q = prob.project(prob.rows, W), prob.project(prob.cols, H)
        loss0 = prob.loss(P, Q)
        if cache is not None and init is None:
            cache["init"] = (W.copy(), H.copy(), P.copy(), Q.copy(), loss0)
    f = prob.objective(loss0, W, H)
    _check_finite("the objective", "at the initialization", f)
    res = FitResult(W=W, H=H, U=prob.rows.U, V=prob.cols.U, P=P, Q=Q, objective=[f])
    progress(0, f, "IMC init: objective %.6g", f)
    pre_w = pre_h = None
    if (precondition or isinstance(precondition, dict)) and max_iter > 0:
        pre_w, pre_h = prob.preconditioners(cache)
    eta_u = eta_v = None
    for it in range(1, max_iter + 1):
        # W-step: r = b - H_W(W) = -grad_W
        # the CG products also give the directions' images: P = Phi_U W and Q = Phi_V H
        # follow W and H without an X-pass each (P, Q are Phi W, Phi H here: the initial
        # projections, the CG's images, or an accepted feature trial's factor)
        mw = None if pre_w is None else pre_w.at(Q)
        hw = functools.partial(prob.hvp_W, Q=Q, image=True)
        W, nw, P = cg(W, -prob.grad_W(W, P, Q), hw, cg_tol, cg_iter, mw, image=P)
        mh = None if pre_h is None else pre_h.at(P)
        hh = functools.partial(prob.hvp_H, P=P, image=True)
        H, nh, Q = cg(H, -prob.grad_H(H, P, Q), hh, cg_tol, cg_iter, mh, image=Q)
        res.cg_iterations.append((nw, nh))
        steps = [0.0, 0.0]
        if prob.rows.learns or prob.cols.learns:
            # each side: its gradient and the loss in one pass, one pass per Armijo trial
            reg = prob.objective(0.0, W, H)
            f_new = None
            if prob.rows.learns:
                g, loss = prob.feature_grad_loss(prob.rows, W, P, Q)
                f_new = reg + loss
                out = _feature_step(prob.rows, g, f_new, eta_u, _trial(prob, prob.rows, W, Q, reg))
                if out is not None:
                    eta_u, f_new, P = out
                    steps[0] = eta_u
                    prob.keep_trial_features(prob.rows)
            if prob.cols.learns:
                g, loss = prob.feature_grad_loss(prob.cols, H, Q, P)
                f_new = reg + loss if f_new is None else f_new
                out = _feature_step(prob.cols, g, f_new, eta_v, _trial(prob, prob.cols, H, P, reg))
                if out is not None:
                    eta_v, f_new, Q = out
                    steps[1] = eta_v
                    prob.keep_trial_features(prob.cols)
        else:
            f_new = prob.objective(prob.loss(P, Q), W, H)
        _check_finite("the objective or the factors", f"after iteration {it}", f_new, W, H)
        res.step_sizes.append(tuple(steps))
        res.objective.append(f_new)
        res.n_iter = it
        progress(it, f_new, "IMC iteration %d: objective %.6g, CG %d/%d", it, f_new, nw, nh)
        if f - f_new <= tol * max(abs(f), 1e-300):
            f = f_new
            res.converged = True
            break
        f = f_new
    if prob.rows.learns or prob.cols.learns:
        _gb.clear_phi_cache()  # a rejected last trial's features are not kept past the fit
    res.W, res.H, res.P, res.Q = W, H, P, Q
    res.U, res.V = prob.rows.U, prob.cols.U
    res.n_passes = prob.n_passes
    return res
