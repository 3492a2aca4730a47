"""Functional core of GIMC for multi-label / multi-class learning (SPEC 1.3-1.4, 5.3).

``fit_gimc`` alternates an exact W-step (Cholesky of ``Phi^T Phi + alpha I``) with one Armijo
gradient step on the feature parameters ``U``.  Data are touched only through the engine:

* pass 0: statistics ``Phi^T Phi``, ``Phi^T A``, ``||A||_F^2`` at the initial ``U``;
* per iteration: one gradient pass, then one line-search pass that evaluates a batch of trial
  steps at once; the accepted trial's statistics feed the next W-step (about 2 passes per
  iteration).  Each pass is exactly one ``engine.compute``; the graph is rebuilt from the same
  blocked inputs every pass, so it never grows.  A single-trial pass keeps its block features
  (:data:`PHI_CACHE_BYTES`), so the next gradient pass, at the accepted ``U``, does not
  recompute ``X U`` and the feature map; the gradient pass adds each block's ``X^T Xi`` into
  one accumulator per engine chain (a scatter-add of the nonzero columns for CSR blocks).

The objective is evaluated with the Gram trick (SPEC 1.4.4) and is non-increasing by
construction: Armijo only accepts descent steps.  All reductions and the small dense algebra are
float64.

Line search (SPEC 5.3, two refinements that change no pass): each trial is judged after its own
W-step (the statistics of a trial are all the W-step needs, so this is a Cholesky, not a pass;
the reduced objective ``min_W f`` has the same gradient), which accepts the longer steps that
the following W-step turns into progress; and the first trial of an iteration is 3/4 of the
minimizer of the quadratic fitted to the previous accepted step (at most twice that step), so it
is rarely rejected.  On generated problems and Bibtex this takes 2.10-2.15 passes per iteration
over 20 iterations (2.9-3.1 with "fixed W, twice the last step") and reaches a lower objective.
Over 10 iterations it takes 1.0-1.1 trials per iteration on Bibtex, the demo shape, yahoo Arts
and Business, mfeat, segment and a Delicious-shaped store at a tenth of the full size; the
full Delicious-large shape took 4.6 (5, 5, 2, 1, 10; not understood yet).  Interpolating after a
rejected trial (``STEP_RULE = "interp"``, :func:`backtrack`) saved no pass on those problems and
ended 0.5 % higher on Bibtex, so the default halves (benchmarks/results/gimc_step_rule.json).
"""

from __future__ import annotations

import functools
import logging
import os
import time
from dataclasses import dataclass, field

import numpy as np
import scipy.linalg
import scipy.sparse as sp
from scipy.linalg import cho_factor, cho_solve

from ooc_lowrank import engine
from ooc_lowrank._validation import NonFiniteError
from ooc_lowrank.gimc import _blocks

logger = logging.getLogger("ooc_lowrank")

C1 = 1e-4
MAX_TRIALS = 20
#: Armijo trials per line-search pass when ``n_trials`` is None.  The first trial is accepted in
#: 85-95 % of iterations (docs/performance.md), so a second trial in the same pass (a syrk and
#: sin/cos of every block, about 45 % of a line-search block) mostly computes what is not used;
#: one trial per pass costs an extra pass in the other iterations instead, cheaper unless a
#: block's read takes longer than a few trials' compute (very slow remote stores: pass 2).
DEFAULT_N_TRIALS = 1
#: The next iteration's first trial is at most this multiple of the last accepted step.
MAX_GROWTH = 2.0
#: Fraction of the quadratic model's minimizer tried first: a margin for the curvature changing
#: between successive gradient directions (0.75 gave 2.10-2.15 passes per iteration over 20
#: iterations on Bibtex and two generated problems, against 2.10-2.25 for 1.0; the objective
#: after 20 iterations changed by < 0.1 %; benchmarks/results/gimc_line_search.json).
STEP_SAFETY = 0.75

#: The step rules :func:`fit_gimc` knows (``benchmarks/gimc_step_rule.py`` compares them).
STEP_RULES = {
    "quadratic": "first trial 3/4 of the quadratic model's minimizer from the last accepted "
    "step (at most 2x it); the first iteration 0.1 ||U|| / ||g||; a rejected trial halved",
    "interp": "as quadratic, but a rejected trial is followed by the minimizer of the "
    "quadratic through f, its slope and the rejected trial's objective, clipped to "
    "[0.1, 0.5] x the rejected step",
}
STEP_RULE = "quadratic"


def first_trial(U, gnorm2, eta_next, f=None):
    """The first Armijo trial step of an iteration (SPEC 5.3, with a model-based start).

    ``eta_next`` is :func:`next_trial` of the previous iteration; in the first iteration (None)
    the step moves ``U`` by a tenth of its norm, ``0.1 ||U|| / ||g||``.  ``f``: the objective
    at ``U``; the step is then at most ``2 f / gnorm2`` (:func:`objective_step_cap`).
    """
    if eta_next is not None:
        eta = float(eta_next)
    else:
        eta = float(0.1 * np.linalg.norm(U) / np.sqrt(gnorm2))
    return eta if f is None else min(eta, objective_step_cap(f, gnorm2))


def objective_step_cap(f, gnorm2):
    """``2 f / gnorm2``: the largest minimizer along ``-g`` of a quadratic with value ``f`` and
    slope ``-gnorm2`` at 0 whose minimum is not negative, as GIMC's objective (a squared loss
    plus a ridge term) is not: ``f - gnorm2^2 / (2 c) >= 0`` gives ``c >= gnorm2^2 / (2 f)``
    and the minimizer ``gnorm2 / c <= 2 f / gnorm2``.  Longer first trials are rejected unless
    the objective is far from its quadratic model: the Delicious-large-shaped fit's first
    iteration started 70x above it (``0.1 ||U|| / ||g||``), and every halving was a pass over
    the data (issue 25)."""
    return float(2.0 * max(float(f), 0.0) / float(gnorm2))


def trial_steps(eta0, start, n_trials):
    """Trials ``start .. start + n_trials - 1`` (at most ``MAX_TRIALS``) of ``eta0 / 2^k``: one
    line-search pass; the sequence does not depend on how it is grouped into passes."""
    return eta0 * 0.5 ** np.arange(start, min(start + n_trials, MAX_TRIALS))


def next_trial(eta, f, f1, gnorm2):
    """First trial step of the next iteration from the one just accepted.

    ``f`` and ``f1`` are the objective before the step and at the accepted trial ``eta`` (same
    ``W``), ``-gnorm2`` the slope there.  The quadratic through these three facts has its
    minimum at ``eta^2 gnorm2 / (2 (f1 - f + eta gnorm2))``; the curvature it implies along the
    gradient (a Rayleigh quotient, independent of the gradient's length) predicts the best step
    of the next iteration.  Armijo accepts up to about twice a quadratic's minimizer, so this
    start is rarely rejected, unlike "twice the last accepted step", which is rejected whenever
    the last step was near the largest acceptable one.  Capped at ``MAX_GROWTH * eta``.
    """
    excess = f1 - f + eta * gnorm2  # = curvature * eta^2 / 2 for a quadratic
    if not excess > 0.0:  # no positive curvature seen: grow
        return MAX_GROWTH * eta
    return min(STEP_SAFETY * eta * eta * gnorm2 / (2.0 * excess), MAX_GROWTH * eta)


def rejection_bound(eta, gnorm2):
    """Largest decrease of the objective along ``-g`` that a quadratic model allows once the
    Armijo trial ``eta`` was rejected (``-gnorm2`` the slope at 0).

    A rejection means ``f(eta) > f - C1 eta gnorm2``; for ``f(t) = f - t gnorm2 + c t^2 / 2``
    that is ``c > 2 (1 - C1) gnorm2 / eta``, so the model's best decrease ``gnorm2^2 / (2 c)`` is
    below ``eta gnorm2 / (4 (1 - C1))``.  When that is at most ``tol |f|``, the step that
    the search would still find could not pass the fit's relative-decrease test either: the fit
    stops there instead of halving the step further (the full Delicious-large-shaped fit
    rejected 8 trials in a row, down to a step of 5e-9, each a pass over the data; issue 25).
    """
    return float(eta) * float(gnorm2) / (4.0 * (1.0 - C1))


#: Smallest fraction of a rejected trial that :func:`backtrack` tries next.
SHRINK_MIN = 0.1


def backtrack(eta, f, f1, gnorm2):
    """The next trial after the trial ``eta`` (objective ``f1``) was rejected, ``f`` the
    objective before the step and ``-gnorm2`` its slope (SPEC 5.3 halves the step).

    ``STEP_RULE == "interp"``: the minimizer of the quadratic through ``f``, the slope and
    ``f1`` (safeguarded quadratic interpolation, Nocedal and Wright, 2006, section 3.5),
    clipped to ``[SHRINK_MIN eta, eta / 2]``: a first trial far too long (the first iteration's
    ``0.1 ||U|| / ||g||`` on sparse inputs with many rarely used features) is cut by up to 10x
    per trial instead of 2x; a non-finite ``f1`` gives ``SHRINK_MIN eta``.  Otherwise
    ``eta / 2``: the trials are ``eta0 / 2^k`` whatever the grouping into passes.
    """
    if STEP_RULE != "interp":
        return 0.5 * eta
    if not np.isfinite(f1):
        return SHRINK_MIN * eta
    excess = f1 - f + eta * gnorm2  # > (1 - C1) eta gnorm2 > 0 for a rejected trial
    return min(max(eta * eta * gnorm2 / (2.0 * excess), SHRINK_MIN * eta), 0.5 * eta)


@dataclass
class FitResult:
    """What :func:`fit_gimc` returns."""

    U: np.ndarray  # (d, m_total) float64 (large state: the data's dtype)
    W: np.ndarray  # (D, L) float64 (large state: the data's dtype, a transposed (L, D) array)
    objective: list = field(default_factory=list)  # f after every accepted step (index 0 = init)
    n_iter: int = 0
    n_passes: int = 0
    converged: bool = False
    step_sizes: list = field(default_factory=list)
    trials: list = field(default_factory=list)  # Armijo trials evaluated per iteration
    alpha: float | None = None  # the ridge weight used (alpha="auto": the one chosen)
    alpha_scores: dict = field(default_factory=dict)  # alpha="auto": {alpha: LOO top-1 rate}
    gamma_factor: float = 1.0  # alpha="auto" with gamma_factors: the kernel width factor chosen
    gamma_scores: dict = field(default_factory=dict)  # {factor: best LOO top-1 rate}


def w_step(S_PP, S_AP, alpha):
    """``W = (S_PP + alpha I)^{-1} S_AP^T`` by Cholesky (SPEC 1.4.2, corrected form).

    Parameters
    ----------
    S_PP : ndarray of shape (D, D)
    S_AP : ndarray of shape (L, D)
    alpha : float

    Returns
    -------
    W : ndarray of shape (D, L)
    """
    return cho_solve(_cho_ridge(S_PP, alpha), S_AP.T, check_finite=False)


def _cho_ridge(S_PP, alpha):
    """Cholesky factor of ``S_PP + alpha I`` (a tiny jitter when rounding made it singular)."""
    D = S_PP.shape[0]
    K = S_PP + alpha * np.eye(D)
    try:
        return cho_factor(K, lower=False, check_finite=False)
    except np.linalg.LinAlgError:
        jitter = 1e-10 * max(np.trace(K) / D, 1.0)
        return cho_factor(K + jitter * np.eye(D), lower=False, check_finite=False)


#: ``alpha="auto"`` (frozen features): the candidates, relative to the mean eigenvalue
#: ``trace(S_PP) / D`` of the Gram (``n / D`` for Fourier features, whose rows have unit
#: norm), 1e-6 .. 1, two per decade.  The alphas chosen on the benchmark datasets lay at
#: 1e-5 .. 0.3 of it (benchmarks/results/imc_rff_alpha.json).
LOO_RELATIVE_ALPHAS = np.logspace(-6.0, 0.0, 13)
#: Rows scored by the leave-one-out selection (every ``ceil(n / LOO_ROWS)``-th row): its cost
#: is ``LOO_ROWS x D x (D + 13 L)``, independent of ``n``.  1024 and 2048 chose alphas of the
#: same test score on the six datasets of benchmarks/imc_rff_alpha.py (five the same alpha);
#: 512 (``--loo-rows 512``, 2026-12-07) chose other alphas on 7 of its 11 datasets and scored
#: lower on 4 (Bibtex 56.5 -> 56.3, yahoo Business 88.1 -> 87.9, mfeat 99.2 -> 98.7, Segment
#: 95.2 -> 95.1 at the default width), higher on none by more than 0.3.
LOO_ROWS = 1024
#: ``alpha="auto"`` selects only when the float64 (D, L) matrix ``Q^T S_AP^T`` it ships to the
#: blocks takes at most this many bytes; above (the Delicious-large shape: 2.5 GB) the fit
#: takes :data:`AUTO_ALPHA_FALLBACK` and logs it.
LOO_MAX_BYTES = 2**28
AUTO_ALPHA_FALLBACK = 1.0


def loo_alphas(S_PP):
    """The candidates of ``alpha="auto"`` for the Gram ``S_PP`` (:data:`LOO_RELATIVE_ALPHAS`)."""
    scale = max(float(np.trace(S_PP)) / S_PP.shape[0], np.finfo(np.float64).tiny)
    return scale * LOO_RELATIVE_ALPHAS


#: ``alpha="auto"`` with frozen Fourier features and ``gamma=None`` (the estimator passes
#: the factors, see :func:`fit_gimc`) also scores a second kernel width by leave-one-out,
#: jointly with alpha, when the data have at least this many rows per column of the selection's
#: fixed work ``D + LOO_ROWS`` (the eigendecomposition, ``D^3``, and the scored rows,
#: ``LOO_ROWS x D^2``).  The gate is about cost only: a second width costs one more Gram in
#: the statistics pass plus that fixed work again, which on the Bibtex shape (4,880 rows,
#: D = 1,000) is most of the fit's time.  It is not a rule for the width itself: the width the
#: leave-one-out rate prefers is a property of the data, not of n / D (benchmarks/
#: imc_rff_width.py: gamma scale 0.125 .. 0.5 in 48 of the 50 (dataset, n / D) cells of ten
#: real datasets at n / D from 0.3 to 100; 1 .. 2 on the demo shape at n / D 32 .. 160, 0.5
#: at 320 and 640), so where it is scored it decides.  With the gate
#: open on every dataset (benchmarks/imc_rff_alpha.py, "widths scored") the choice changed
#: only on scene (test accuracy 75.1 -> 75.8); on the demo shape it takes the median
#: heuristic's width, test P@1 80.8 -> 84.2 (the peer RBFSampler + Ridge: 83.1).
WIDTH_ROWS_PER_COST = 10


def width_selection(n, D):
    """Whether ``alpha="auto"`` scores the extra kernel widths for ``n`` rows and ``D``
    features (:data:`WIDTH_ROWS_PER_COST`)."""
    return int(n) >= WIDTH_ROWS_PER_COST * (int(D) + LOO_ROWS)


def eigh_gram(S_PP, dtype):
    """``(s, Q)`` of the symmetric ``S_PP`` (D, D) in the data-path ``dtype``: float32 data
    give a Gram summed from float32 block products, whose small eigenvalues are only that
    accurate, so a float32 eigendecomposition (LAPACK ``syevd``: 0.09 s against 0.15 s in
    float64 at D = 1,000 on one core) loses nothing the data had; float64 data: float64."""
    dt = np.float32 if np.dtype(dtype) == np.float32 else np.float64
    # a copy (np.array): the fit reads S_PP again (the large-state W-step)
    s, Q = scipy.linalg.eigh(np.array(S_PP, dtype=dt), driver="evd", check_finite=False,
                             overwrite_a=True)  # fmt: skip
    return s.astype(np.float64), Q


def loo_reduction(X, A, Us, spec, n_labels, codes, grams, alphas, phi_key=None):
    """The lazy pass of ``alpha="auto"``: leave-one-out top-1 hits of the ridge solve for each
    kernel width (parameters ``Us[k]``, statistics ``grams[k] = (S_PP, S_AP)``) and each of
    ``alphas[k]`` on every ``ceil(n / LOO_ROWS)``-th row (:func:`_blocks.loo_hits_block`),
    from one eigendecomposition (:func:`eigh_gram`) of each (D, D) Gram of all rows.

    Returns the reduction and, per width, ``(s, Q, B = Q^T S_AP^T)`` (:func:`eigen_ridge`)."""
    dt = np.dtype(X.dtype)
    eigs, Qs, invs, Bs = [], [], [], []
    for (S_PP, S_AP), al in zip(grams, alphas, strict=True):
        s, Q = eigh_gram(S_PP, dt)
        invs.append(1.0 / (np.maximum(s, 0.0)[None, :] + np.asarray(al, np.float64)[:, None]))
        Bs.append(Q.T.astype(np.float64) @ np.asarray(S_AP, dtype=np.float64).T)
        Qs.append(Q)
        eigs.append((s, Q, Bs[-1]))
    stride = max(1, -(-int(X.shape[0]) // LOO_ROWS))
    args = (tuple(U.astype(dt, copy=False) for U in Us), spec, n_labels, codes, tuple(Qs),
            tuple(invs), tuple(Bs), stride, phi_key)  # fmt: skip
    red = engine.reduce_blocks(_blocks.loo_hits_block, X, A, args=args, offset=True,
                               shapes=[(len(Us), len(alphas[0]))])  # fmt: skip
    return red, eigs


def eigen_ridge(s, Q, B, a2, alpha):
    """``(W, f)`` of :func:`reduced_objective` from the eigendecomposition the selection made:
    ``S_PP = Q diag(s) Q^T`` (``s`` clipped at 0), ``B = Q^T S_AP^T`` (D, L), so
    ``W = Q diag(w) B`` with ``w = 1 / (s + alpha)`` (one GEMM instead of a Cholesky, its
    solve and the objective's ``S_PP W``: 0.03 s at D = 1,000, L = 159) and ``f = (||A||^2 -
    sum_k w_k ||B_k||^2) / 2`` (the Gram-trick objective at the exact W-step, as in
    :func:`reduced_objective_t`).  ``W`` float64 (D, L)."""
    w = 1.0 / (np.maximum(np.asarray(s, np.float64), 0.0) + float(alpha))
    B = np.asarray(B, dtype=np.float64)
    W = np.asarray(Q, dtype=np.float64) @ (B * w[:, None])
    return W, 0.5 * (float(a2) - float(np.einsum("k,kl,kl->", w, B, B)))


def pick_alpha(alphas, hits):
    """The candidate with the most hits; on ties the largest (the most regularized)."""
    hits = np.asarray(hits)
    return float(alphas[len(alphas) - 1 - int(np.argmax(hits[::-1]))])


#: Label columns of ``W`` per slice of :func:`objective` above this many labels: its
#: temporaries are (D, OBJECTIVE_COLS), not three (D, L) float64 arrays (2.5 GB each at the
#: Delicious-large shape, D = 1,500 and L = 205,443; issue 25).
OBJECTIVE_COLS = 8192


def objective(W, S_PP, S_AP, a2, alpha):
    """``alpha/2 ||W||^2 + 1/2 (<W W^T, S_PP> + ||A||^2 - 2 <W, S_AP^T>)`` (Gram trick).

    Up to :data:`OBJECTIVE_COLS` labels in one piece; more by column slices (the same value
    to rounding)."""
    L = W.shape[1]
    if L <= OBJECTIVE_COLS:
        fit = np.sum((S_PP @ W) * W) + a2 - 2.0 * np.sum(W * S_AP.T)
        return 0.5 * alpha * np.sum(W * W) + 0.5 * fit
    quad = cross = sq = 0.0
    for c in range(0, L, OBJECTIVE_COLS):
        Wc, Sc = W[:, c : c + OBJECTIVE_COLS], S_AP[c : c + OBJECTIVE_COLS]
        quad += np.sum((S_PP @ Wc) * Wc)
        cross += np.sum(Wc * Sc.T)
        sq += np.sum(Wc * Wc)
    return 0.5 * alpha * sq + 0.5 * (quad + a2 - 2.0 * cross)


def reduced_objective(S_PP, S_AP, a2, alpha):
    """``(W, f(W, U))`` with ``W`` the exact W-step for the statistics of ``U``.

    This is the objective the Armijo search tests (SPEC 5.3 on ``F(U) = min_W f(W, U)``, whose
    gradient is the same ``g`` because ``W`` is optimal, SPEC 1.4.3): ``W`` is re-solved for
    every trial (a Cholesky of ``D x D``, no pass over the data), so a step is judged after the
    W-step that follows it.  Non-finite statistics give ``(None, inf)``: the trial is rejected.
    """
    if not (np.all(np.isfinite(S_PP)) and np.all(np.isfinite(S_AP))):
        return None, np.inf
    W = w_step(S_PP, S_AP, alpha)
    return W, objective(W, S_PP, S_AP, a2, alpha)


_SCALE_HINT = (
    "Likely cause: the scale of X (e.g. one feature value of 1e300, whose square overflows "
    "float64, or values so large that the kernel features lose all precision). Scale or "
    "normalize X before fitting (e.g. sklearn.preprocessing.StandardScaler or MaxAbsScaler), "
    "or fix the bad entries"
)


def no_label_error(name="Y"):
    """The error for a multi-label matrix without a single 1.

    Not a warning: with ``A = 0`` the W-step gives ``W = 0`` exactly, every score of every
    label is 0 and the gradient in ``U`` is 0, so the "model" predicts nothing and learns
    nothing; such labels are a mistake upstream (labels lost in a conversion, a wrong column).
    """
    return ValueError(
        f"{name} (multi-label) holds no positive label: every entry is 0, so every score of "
        "the fitted model would be 0. Pass labels with at least one 1 (check the conversion "
        "of the labels), or class labels as a vector (n_samples,) for multi-class"
    )


def _check_finite(what, where, *arrays):
    """Stop the fit with :class:`NonFiniteError` when any of ``arrays`` holds NaN or inf."""
    for a in arrays:
        if not np.all(np.isfinite(a)):
            raise NonFiniteError(f"GIMC: NaN or inf in {what} {where}. {_SCALE_HINT}")


#: The fit keeps a single trial's block features ``Phi`` (n x D, the data dtype) for the next
#: gradient pass when they take at most this many bytes: the gradient pass then skips ``X U``
#: and the feature map (issue 25; 0.65 GB at the NUS-WIDE shape).
PHI_CACHE_BYTES = 2**30

#: Rows of ``U`` per slice when the trial matrices are formed: the float64 ``U - eta g`` is a
#: transient of this many rows, not of ``d`` (6.3 GB at the Delicious-large shape, issue 25).
TRIAL_ROWS = 1 << 14


def _trial_matrices(U, direction, etas, dt):
    """``[U - eta direction for eta in etas]`` rounded to ``dt``, shape (n_trials, d, m_total),
    formed by row slices (the same bits as whole: elementwise)."""
    out = np.empty((len(etas), *U.shape), dtype=dt)
    for t, e in enumerate(etas):
        for s in range(0, U.shape[0], TRIAL_ROWS):
            rows = slice(s, s + TRIAL_ROWS)
            out[t, rows] = U[rows] - float(e) * direction[rows]
    return out


def _sq_norm(g):
    """``sum(g * g)``; by row slices when ``g`` is larger than :data:`TRIAL_ROWS` rows (no
    (d, m_total) temporary; smaller ``g``: the same bits as ``np.sum(g * g)``)."""
    if g.shape[0] <= TRIAL_ROWS:
        return float(np.sum(g * g))
    return float(sum(np.sum(g[s : s + TRIAL_ROWS] ** 2) for s in range(0, g.shape[0], TRIAL_ROWS)))


def _step(U, eta, g):
    """A new array ``U - eta g`` (the old one may be held by a monitor), by row slices: no
    float64 (d, m_total) temporary besides the result (the same bits)."""
    out = np.empty_like(U)
    for s in range(0, U.shape[0], TRIAL_ROWS):
        rows = slice(s, s + TRIAL_ROWS)
        np.subtract(U[rows], eta * g[rows], out=out[rows])
    return out


#: Above this many bytes of a float64 (d, m_total) ``U`` the fit keeps its state small
#: (issue 25, the Delicious-large shape: 6.3 GB): ``U``, its gradient and the gradient's
#: accumulator in the data's dtype (float32 data: float32), ``U`` stepped in place, ``W`` and
#: the (L, D) statistics in the data's dtype, and a line search that evaluates
#: ``X (U - eta g) = X U - eta X g`` per block (``X U`` kept from the gradient pass when the
#: projections of all rows take at most :data:`Z_CACHE_BYTES`) instead of forming (d, m_total)
#: trial matrices.  The small dense algebra (Cholesky, ``W`` per label slice, inner products of
#: the objective and the line search) stays float64.  Below it, the float64 state of before.
LARGE_STATE_BYTES = 2**28

#: Largest projections ``X U`` (n x m_total, the data dtype) a large-state fit keeps from each
#: gradient pass for the line search that follows (0.79 GB at the Delicious-large shape).
Z_CACHE_BYTES = 2**30


def large_state(d, m_total):
    """Whether a fit with ``d`` input features and ``m_total`` parameters per feature uses the
    large-state mode (:data:`LARGE_STATE_BYTES`)."""
    return 8 * int(d) * int(m_total) > LARGE_STATE_BYTES


def _trial_usq(U, g, etas, dt):
    """Squared column norms of ``U - eta g`` for each ``eta`` (``g`` None: of ``U``), from the
    column inner products ``u.u, u.g, g.g`` taken in float64 by row slices (no (d, m_total)
    temporary), rounded to ``dt``."""
    m = U.shape[1]
    uu, ug, gg = np.zeros(m), np.zeros(m), np.zeros(m)
    for s in range(0, U.shape[0], TRIAL_ROWS):
        u = U[s : s + TRIAL_ROWS].astype(np.float64)
        uu += np.einsum("ij,ij->j", u, u)
        if g is not None:
            v = g[s : s + TRIAL_ROWS].astype(np.float64)
            ug += np.einsum("ij,ij->j", u, v)
            gg += np.einsum("ij,ij->j", v, v)
    return tuple((uu - 2.0 * e * ug + e * e * gg).astype(dt) for e in etas)


def _step_inplace(U, eta, g):
    """``U -= eta g`` by row slices (the large-state mode: no second (d, m_total) array)."""
    e = U.dtype.type(eta)
    for s in range(0, U.shape[0], TRIAL_ROWS):
        rows = slice(s, s + TRIAL_ROWS)
        U[rows] -= e * g[rows]
    return U


def reduced_objective_t(S_PP, S_AP, a2, alpha):
    """``(W^T, f)`` of :func:`reduced_objective` for the large-state mode: ``W^T`` (L, D) in
    the dtype of ``S_AP``, solved by label slices of :data:`OBJECTIVE_COLS` in float64 (no
    (D, L) float64 array), and ``f = (||A||^2 - <W, S_AP^T>) / 2``, which equals the Gram-trick
    objective at the exact W-step (``(S_PP + alpha I) W = S_AP^T`` turns ``alpha ||W||^2 +
    <W W^T, S_PP>`` into ``<W, S_AP^T>``): O(D L) instead of O(D^2 L) per trial.  A writable
    ``S_AP`` (the pass's own accumulator) is overwritten with ``W^T``: no second (L, D) array
    (1.2 GB at the Delicious-large shape)."""
    S_PP = np.asarray(S_PP, dtype=np.float64)
    if not (np.all(np.isfinite(S_PP)) and all(
        np.all(np.isfinite(S_AP[c : c + OBJECTIVE_COLS]))
        for c in range(0, S_AP.shape[0], OBJECTIVE_COLS)
    )):
        return None, np.inf
    c = _cho_ridge(S_PP, alpha)
    WT = S_AP if S_AP.flags.writeable else np.empty(S_AP.shape, dtype=S_AP.dtype)
    cross = 0.0
    for s in range(0, S_AP.shape[0], OBJECTIVE_COLS):
        Sc = S_AP[s : s + OBJECTIVE_COLS].astype(np.float64)
        Wc = cho_solve(c, Sc.T, check_finite=False)
        cross += float(np.sum(Wc * Sc.T))
        WT[s : s + OBJECTIVE_COLS] = Wc.T
    return WT, 0.5 * (a2 - cross)


def _unpack_stats(res, n_trials):
    out = []
    for t in range(n_trials):
        out.append((_blocks.symmetrize_lower(res[2 * t]), np.asarray(res[2 * t + 1])))
    return out


def _timed(fn, wrap):
    return fn if wrap is None else wrap(fn)


def grad_reduction(X, A, U, W, spec, n_labels, codes, *, big, phi_key=None, z_key=None,
                   wrap=None):
    """The lazy gradient pass of :func:`fit_gimc` at ``U``, ``W`` (``big``: the large-state
    mode, ``W`` the transpose of a C-ordered (L, D) array): ``X^T Xi`` and the LNYS column
    sums added into one accumulator per engine chain.  ``phi_key``: block features kept by
    the last single-trial statistics pass; ``z_key``: keep each block's ``X U`` under it for
    the line search.  ``wrap(fn)``: the block function as the engine should call it (a
    calibration's timer; None in a fit)."""
    dt = np.dtype(X.dtype)
    WWt = None if 2 * W.shape[1] < W.shape[0] else (W @ W.T).astype(dt)
    if big:  # W is the transpose of a C-ordered (L, D) array: no copy
        Wt, Ud = W.T, U
        grad_fn = _blocks.grad_block_into32 if dt == np.float32 else _blocks.grad_block_into
    else:
        Wt, Ud = np.ascontiguousarray(W.T).astype(dt), U.astype(dt)
        grad_fn = _blocks.grad_block_into
    # the landmark norms once per pass, summed in float64 (a float32 sum per block made the
    # large-state gradient 28 % off, issue 25)
    usq = _blocks.landmark_sq(Ud, spec, dt) if _blocks._needs_xsq(spec) else None
    return engine.reduce_blocks(
        _timed(grad_fn, wrap),
        X,
        A,
        args=(Ud, spec, WWt, Wt, n_labels, codes, phi_key, z_key, usq),
        offset=True,
        shapes=_blocks.grad_shapes(spec, X.shape[1]),
    )


def stats_reduction(X, A, U, direction, etas, spec, n_labels, codes, with_a2, *, big, key=None,
                    wrap=None):
    """The lazy statistics pass of :func:`fit_gimc` for the trials ``U - eta direction``
    (``direction`` None: at ``U``).  ``big``: the large-state mode (``X U - eta X direction``
    per block, accumulated in the data's dtype; ``key``: the projections kept by the gradient
    pass); else one GEMM ``X U_t`` per trial from the trial matrices (``key``: keep a single
    trial's block features for the next gradient pass).  ``wrap``: as in
    :func:`grad_reduction`."""
    dt = np.dtype(X.dtype)
    shapes = _blocks.stats_shapes(spec, n_labels, len(etas), with_a2)
    if big:
        nys = any(p.kind == "nystrom" for p in spec.parts)
        usqs = _trial_usq(U, direction, etas, dt) if nys else None
        fn = _blocks.stats_block_into32 if dt == np.float32 else _blocks.stats_block_into
        args = (U, direction, tuple(float(e) for e in etas), usqs, spec, n_labels, codes,
                with_a2, key)  # fmt: skip
        return engine.reduce_blocks(_timed(fn, wrap), X, A, args=args, offset=True,
                                    shapes=shapes)  # fmt: skip
    if direction is not None:
        # one GEMM X U_t per trial and block, U_t rounded to dt as the next gradient pass
        # will see it: the default single trial costs one n d m product instead of two
        # (X U and X direction: 13 % of a steady iteration's flops at the NUS-WIDE shape,
        # d = 1134, m = 500, L = 1000; issue 25), the same bits whatever the grouping
        U = _trial_matrices(U, direction, etas, dt)
        direction = None
    args = (
        U.astype(dt, copy=False),
        None if direction is None else direction.astype(dt),
        tuple(float(e) for e in etas),
        spec,
        n_labels,
        codes,
        with_a2,
        key,
    )
    return engine.reduce_blocks(_timed(_blocks.stats_block_at, wrap), X, A, args=args,
                                offset=True, shapes=shapes)  # fmt: skip


#: Labels whose W-step :func:`pass_calibration` times (scaled to all labels).
CALIBRATION_LABELS = 4 * OBJECTIVE_COLS


def pass_calibration(Xs, As, U, spec, *, n_labels, codes, alpha, n_trials=1, seed=0):
    """Time :func:`fit_gimc`'s own passes on a slice of its input, with the fit's state.

    ``Xs``, ``As``: rows of the input and their labels (ndarray or CSR, one block's worth),
    run as two identical row blocks of one pass (:func:`grad_reduction`,
    :func:`stats_reduction` with the block functions the fit uses): the first block pays the
    one-time costs (the pass accumulator's first touch of the pages it writes, loading the
    kernels), the second is the steady cost of a block of these rows.  ``U`` (d, m_total) is
    the fit's parameter array at full size, in the state's dtype (:func:`large_state`), and is
    modified (a step is taken); ``W`` (and ``W^T``) are allocated at full size here, filled
    with small values: gathers and scatter-adds against arrays of the fit's size are
    memory-bound, so only the real sizes time them right.  The large-state mode runs the
    gradient pass first (it keeps ``X U`` for the line search), the other mode the statistics
    pass first (it keeps ``Phi`` for the gradient pass), as the fit does.

    Returns a dict: ``rows`` (of one block), ``grad_block_seconds`` and
    ``stats_block_seconds`` (the steady block: the faster of the two), ``block_seconds`` (all
    block calls; ``block_cpu_seconds`` their threads' CPU time), ``grad_driver_seconds``
    (this process's work around a gradient pass: ``W W^T``, the gradient's finalization and
    norm), ``stats_driver_seconds`` (before a statistics pass: the trial matrices or the
    trials' column norms), ``judge_seconds`` (one trial's W-step and objective, timed on at
    most :data:`CALIBRATION_LABELS` labels and scaled; ``judge_cpu_seconds``),
    ``step_seconds`` (the accepted step), ``big``, ``n_trials`` and ``seconds`` (the
    calibration's own wall time)."""
    t_all = time.perf_counter()
    dt = np.dtype(Xs.dtype)
    d, L, D = int(U.shape[0]), int(n_labels), spec.n_features
    big = large_state(d, spec.n_params)
    R = int(Xs.shape[0])

    def twice(a):
        return sp.vstack([a, a], format="csr") if sp.issparse(a) else np.concatenate([a, a])

    X = engine.as_blocked(twice(Xs)).rechunk([0, R, 2 * R])
    A = engine.as_blocked(twice(As)).rechunk([0, R, 2 * R])
    rng = np.random.default_rng(seed)
    times = {"grad": [], "stats": []}
    cpu = {"grad": [], "stats": []}  # the block threads' CPU seconds (below wall when busy)

    def timer(kind):
        def wrap(fn):
            @functools.wraps(fn)  # keeps fn.accumulates / accumulator_dtype
            def timed(*a, **k):
                t, c = time.perf_counter(), time.thread_time()
                out = fn(*a, **k)
                times[kind].append(time.perf_counter() - t)
                cpu[kind].append(time.thread_time() - c)
                return out

            return timed

        return wrap

    sdt = dt if big else np.dtype(np.float64)
    tile = (0.01 * rng.standard_normal((min(L, 4096), D))).astype(sdt)
    WT = np.empty((L, D), dtype=sdt)  # the fit's W^T (large state) / W (D, L) as its transpose
    for s_ in range(0, L, tile.shape[0]):
        WT[s_ : s_ + tile.shape[0]] = tile[: L - s_]
    W = WT.T if big else np.ascontiguousarray(WT.T)
    del WT
    etas = trial_steps(1e-3, 0, n_trials)
    out = {"rows": R, "big": bool(big), "n_trials": int(n_trials)}
    key = ("calibration", os.urandom(8).hex())
    with engine.one_blas_thread():
        try:
            if not big:  # the statistics pass keeps Phi for the gradient pass
                t = time.perf_counter()
                red = stats_reduction(X, A, U, np.zeros_like(U), etas[:1], spec, L, codes, False,
                                      big=False, key=key, wrap=timer("stats"))  # fmt: skip
                out["stats_driver_seconds"] = time.perf_counter() - t
                (res,) = engine.compute(red)
                del red
            t = time.perf_counter()
            red = grad_reduction(X, A, U, W, spec, L, codes, big=big,
                                 phi_key=None if big else key, z_key=key if big else None,
                                 wrap=timer("grad"))  # fmt: skip
            t_wwt = time.perf_counter() - t
            (gres,) = engine.compute(red)
            del red, W
            t = time.perf_counter()
            g = _blocks.finalize_grad(gres[0], gres[1], U, spec, inplace=True)
            del gres
            gnorm2 = _sq_norm(g)
            out["grad_driver_seconds"] = t_wwt + time.perf_counter() - t
            g *= 1e-3 / max(np.sqrt(gnorm2), 1e-30)  # a small direction: finite features
            if big:
                t = time.perf_counter()
                red = stats_reduction(X, A, U, g, etas, spec, L, codes, False, big=True,
                                      key=key, wrap=timer("stats"))  # fmt: skip
                out["stats_driver_seconds"] = time.perf_counter() - t
                (res,) = engine.compute(red)
                del red
            spp, sap = _unpack_stats(res, 1)[0]
            del res
            # the W-step solves label slices one after the other: timed on at most
            # CALIBRATION_LABELS labels, scaled to all
            sub = min(L, CALIBRATION_LABELS)
            t, c = time.perf_counter(), time.thread_time()
            if big:
                reduced_objective_t(spp, sap[:sub], 1.0, alpha)
            else:
                reduced_objective(spp, sap[:sub], 1.0, alpha)
            out["judge_seconds"] = (time.perf_counter() - t) * L / sub
            out["judge_cpu_seconds"] = (time.thread_time() - c) * L / sub
            del spp, sap
            t = time.perf_counter()
            U = _step_inplace(U, 1.0, g) if big else _step(U, 1.0, g)
            out["step_seconds"] = time.perf_counter() - t
        finally:
            _blocks.clear_phi_cache()
    out["block_seconds"] = times
    out["block_cpu_seconds"] = cpu
    out["grad_block_seconds"] = min(times["grad"])
    out["stats_block_seconds"] = min(times["stats"])
    out["seconds"] = time.perf_counter() - t_all
    return out


def fit_gimc(
    X,
    A,
    U0,
    spec,
    *,
    alpha,
    n_labels,
    codes,
    max_iter=100,
    tol=1e-4,
    n_trials=2,
    callback=None,
    monitor=None,
    client=None,
    checkpoint=None,
    own_U0=False,
    gamma_factors=None,
):
    """Fit GIMC (or IMC when no part of ``spec`` learns) out of core.

    Parameters
    ----------
    X : engine.Blocked of shape (n_samples, n_features)
        Dense or CSR row blocks (float32 or float64; the block dtype is the data-path dtype).
    A : engine.Blocked of shape (n_samples, n_labels) or (n_samples, 1)
        0/1 CSR label blocks, or a column of class codes when ``codes`` is true.  Must share the
        row blocks of ``X``.
    U0 : ndarray of shape (n_features, m_total)
        Initial feature parameters.
    spec : _blocks.FeatureSpec
    alpha : float or "auto"
        Ridge weight ``lambda`` (> 0).  ``"auto"`` (frozen features only): chosen by
        leave-one-out top-1 hits over :func:`loo_alphas` (:func:`loo_reduction`, one more
        pass after the statistics pass); the result's ``alpha`` and ``alpha_scores``.
    n_labels : int
    codes : bool
    max_iter, tol : int, float
        Stop after ``max_iter`` U-steps or when the relative decrease of the objective is
        ``<= tol``, or, without a step, once a rejected Armijo trial bounds every step's
        decrease by ``tol`` of the objective (:func:`rejection_bound`).
    n_trials : int
        Armijo trial steps evaluated per line-search pass.
    callback : callable(iteration, elapsed, objective) or None
        Runs, like ``monitor``, under the fit's one-thread BLAS limit (see the code).
    monitor : callable(iteration, U, W) or None
        Called with the current parameters after the initialization (iteration 0) and after
        every accepted step (validation scoring, see ``GIMC.fit(eval_set=...)``).  ``U`` and
        ``W`` are the fit's own arrays: read them, do not modify them.
    checkpoint : ooc_lowrank._checkpoint.Checkpoint or None
        Resume from its saved state if it has one (no init pass; iterations continue from the
        saved one, bitwise as if never interrupted); save the state after every
        ``checkpoint.every``-th iteration and when the fit stops.
    own_U0 : bool
        The caller gives ``U0`` away: in the large-state mode (:func:`large_state`) a C-ordered
        writable ``U0`` of the state's dtype becomes the fit's ``U`` and is stepped in place
        (no second (d, m_total) array).
    gamma_factors : sequence of float or None
        ``alpha="auto"`` with frozen Fourier features only: kernel widths to score besides
        the given one, as factors of its ``gamma`` (``U`` scaled by ``sqrt(factor)``), jointly
        with alpha by the same leave-one-out pass, when :func:`width_selection` allows (a
        feature map and a Gram more per width in the statistics pass, no extra pass).  The
        result's ``U`` is the chosen width's and ``gamma_factor`` its factor.

    Returns
    -------
    FitResult
    """
    # The driver's dense algebra (the D x D Cholesky, W W^T) runs on one BLAS thread, like
    # every pass on the threaded scheduler: OpenBLAS threads made the Cholesky of D = 1000
    # 30x slower (0.75 s against 0.026 s) on this 2-core machine, and 2-10x slower at
    # D = 2000 and 4000 (docs/performance.md).
    with engine.one_blas_thread():
        try:
            return _fit_gimc(
                X,
                A,
                U0,
                spec,
                alpha=alpha,
                n_labels=n_labels,
                codes=codes,
                max_iter=max_iter,
                tol=tol,
                n_trials=n_trials,
                callback=callback,
                monitor=monitor,
                checkpoint=checkpoint,
                own_U0=own_U0,
                gamma_factors=gamma_factors,
            )
        finally:
            _blocks.clear_phi_cache()


def _select_alpha(X, A, Us, spec, n_labels, codes, grams, phi_key):
    """``alpha="auto"``: ``(k, alpha, {alpha: leave-one-out top-1 rate}, {k: best rate},
    eig)`` by one :func:`loo_reduction` pass over the kernel widths ``Us[k]`` with statistics
    ``grams[k]`` (frozen features only: with learned features the best alpha depends on where
    the features go).  The most hits win; ties go to the first width (the default) and the
    largest alpha (the most regularized).  ``eig``: ``(s, Q, B)`` of width ``k`` for
    :func:`eigen_ridge` (None with the fallback alpha)."""
    if spec.learns:
        raise ValueError(
            'alpha="auto" selects the ridge weight of frozen features (learn_features=False); '
            "with learned features pass a number, e.g. alpha=1.0"
        )
    S_PP, S_AP = grams[0]
    if 8 * S_PP.shape[0] * S_AP.shape[0] > LOO_MAX_BYTES:
        logger.info("GIMC alpha='auto': %d labels x %d features is above the selection's "
                    "budget; alpha %g", S_AP.shape[0], S_PP.shape[0], AUTO_ALPHA_FALLBACK)
        return 0, AUTO_ALPHA_FALLBACK, {}, {}, None
    alphas = [loo_alphas(g[0]) for g in grams]
    red, eigs = loo_reduction(X, A, Us, spec, n_labels, codes, grams, alphas, phi_key=phi_key)
    ((hits,),) = engine.compute(red)
    n_scored = -(-int(X.shape[0]) // max(1, -(-int(X.shape[0]) // LOO_ROWS)))
    rates = np.asarray(hits) / max(n_scored, 1)
    k = int(np.argmax(rates.max(axis=1)))  # ties: the first width
    best = pick_alpha(alphas[k], hits[k])
    logger.info("GIMC alpha='auto': width %d of %d, alpha %.3g (leave-one-out top-1 %.4f)",
                k + 1, len(Us), best, rates[k].max())  # fmt: skip
    scores = {float(a): float(r) for a, r in zip(alphas[k], rates[k], strict=True)}
    widths = {i: float(rates[i].max()) for i in range(len(Us))} if len(Us) > 1 else {}
    return k, best, scores, widths, eigs[k]


def _fit_gimc(
    X,
    A,
    U0,
    spec,
    *,
    alpha,
    n_labels,
    codes,
    max_iter,
    tol,
    n_trials,
    callback,
    monitor,
    checkpoint,
    own_U0=False,
    gamma_factors=None,
):
    """:func:`fit_gimc` under the caller's BLAS thread limit."""
    dt = np.dtype(X.dtype)
    t0 = time.perf_counter()
    big = large_state(X.shape[1], spec.n_params)  # the state's dtype is the data's (issue 25)
    sdt = dt if big else np.dtype(np.float64)
    own = own_U0 and big and isinstance(U0, np.ndarray) and U0.dtype == sdt
    U = U0 if own and U0.flags.c_contiguous and U0.flags.writeable else np.array(U0, dtype=sdt)
    n_passes = 0

    # a single trial's features are kept for the next gradient pass when they are small
    keep_phi = not big and X.shape[0] * spec.n_features * dt.itemsize <= PHI_CACHE_BYTES
    # large state: each gradient pass keeps X U for the line search (one product per block)
    keep_z = (
        big
        and _blocks.z_keepable(spec)
        and X.shape[0] * spec.n_params * dt.itemsize <= Z_CACHE_BYTES
    )
    fit_token = os.urandom(8).hex()
    z_key = None

    def stats_pass_big(U, direction, etas, with_a2):
        """:func:`stats_pass` of the large-state mode (:func:`stats_reduction`)."""
        nonlocal n_passes
        (res,) = engine.compute(stats_reduction(X, A, U, direction, etas, spec, n_labels,
                                                codes, with_a2, big=True, key=z_key))  # fmt: skip
        n_passes += 1
        return res, None

    def stats_pass(U, direction, etas, with_a2):
        """The statistics of the trials ``etas`` (one pass) and the key under which the block
        features of a single trial are kept for the next gradient pass (or None)."""
        nonlocal n_passes
        if big:
            return stats_pass_big(U, direction, etas, with_a2)
        key = (fit_token, n_passes) if keep_phi and len(etas) == 1 else None
        (res,) = engine.compute(stats_reduction(X, A, U, direction, etas, spec, n_labels, codes,
                                                with_a2, big=False, key=key))  # fmt: skip
        n_passes += 1
        return res, key

    restored = checkpoint.load() if checkpoint is not None else None
    phi_key = None  # a resumed fit computes its first gradient pass's features
    if restored is not None:
        st, arr = restored[0], restored[1]
        U, W = np.array(arr["U"], dtype=sdt), np.array(arr["W"], dtype=sdt)
        if big:  # held as W^T (L, D), C order: the gradient pass's A_b W^T
            W = np.ascontiguousarray(W.T).T
        a2, f, n_passes = float(st["a2"]), float(st["f"]), st["n_passes"]
        eta_next = st.get("eta_next")
        if "eta_next" not in st and st.get("eta_prev") is not None:  # saved by the 2x rule
            eta_next = 2.0 * float(st["eta_prev"])
        result = FitResult(
            U=U,
            W=W,
            objective=[float(v) for v in st["objective"]],
            n_iter=int(st["n_iter"]),
            converged=bool(st["converged"]),
            step_sizes=[float(v) for v in st["step_sizes"]],
            trials=[int(v) for v in st.get("trials", [])],
        )
        if result.converged:
            result.n_passes = n_passes
            return result
    else:
        factors = (1.0,)
        if (alpha == "auto" and gamma_factors and not big and not spec.learns
                and all(p.kind == "fourier" for p in spec.parts)
                and width_selection(X.shape[0], spec.n_features)):  # fmt: skip
            factors = (1.0, *(float(c) for c in gamma_factors))
        if len(factors) == 1:
            res, phi_key = stats_pass(U, None, (0.0,), True)
            Us = [U]
        else:  # one pass, one GEMM X U for all widths (Fourier: U_k = sqrt(c_k) U)
            Us = [U * np.sqrt(c) for c in factors]
            (res,) = engine.compute(engine.reduce_blocks(
                _blocks.stats_block_at, X, A, offset=True,
                args=(U.astype(dt), None, (0.0,) * len(Us), spec, n_labels, codes, True, None,
                      tuple(float(np.sqrt(c)) for c in factors)),
                shapes=_blocks.stats_shapes(spec, n_labels, len(Us), True)))  # fmt: skip
            n_passes += 1
            phi_key = None
        a2 = float(res[-1])
        if a2 == 0.0 and not codes:  # lazy labels: known after this first pass, at no cost
            raise no_label_error()
        grams = _unpack_stats(res, len(Us))
        for S_PP, S_AP in grams:
            _check_finite("the statistics Phi^T Phi, A^T Phi", "at the initial features", S_PP,
                          S_AP)  # fmt: skip
        scores, width_scores, k, eig = {}, {}, 0, None
        if alpha == "auto":  # frozen features: one more pass, leave-one-out over alphas
            k, alpha, scores, width_scores, eig = _select_alpha(X, A, Us, spec, n_labels, codes,
                                                                grams, phi_key)  # fmt: skip
            n_passes += 1 if scores else 0
        U, (S_PP, S_AP) = Us[k], grams[k]
        del grams, Us
        if eig is not None and not big:
            W, f = eigen_ridge(*eig, a2, alpha)
        elif big:
            W, f = reduced_objective_t(S_PP, S_AP, a2, alpha)
            W = W.T
        else:
            W = w_step(S_PP, S_AP, alpha)
            f = objective(W, S_PP, S_AP, a2, alpha)
        del res, S_AP
        _check_finite("the objective or W", "at the initialization", f, W)
        result = FitResult(U=U, W=W, objective=[f], alpha=float(alpha), alpha_scores=scores,
                           gamma_factor=factors[k],
                           gamma_scores={factors[i]: v for i, v in width_scores.items()})
        if callback is not None:
            callback(0, time.perf_counter() - t0, f)
        if monitor is not None:
            monitor(0, U, W)
        logger.info("GIMC init: objective %.6g", f)
        if not spec.learns:
            result.converged = True
            result.n_passes = n_passes
            return result
        eta_next = None

    def save_checkpoint(it):
        checkpoint.save(
            it,
            {
                "a2": a2,
                "f": f,
                "eta_next": eta_next,
                "n_passes": n_passes,
                "objective": result.objective,
                "step_sizes": result.step_sizes,
                "trials": result.trials,
                "n_iter": result.n_iter,
                "converged": result.converged,
            },
            {"U": U, "W": W},
        )

    for it in range(result.n_iter + 1, max_iter + 1):
        z_key = (fit_token, "z", it) if big and keep_z else None
        (gres,) = engine.compute(grad_reduction(X, A, U, W, spec, n_labels, codes, big=big,
                                                phi_key=phi_key, z_key=z_key))  # fmt: skip
        n_passes += 1
        g = _blocks.finalize_grad(gres[0], gres[1], U, spec, inplace=True)
        del gres  # g is the pass's accumulator itself (d x m_total float64, issue 25)
        gnorm2 = _sq_norm(g)
        _check_finite("the gradient with respect to U", f"at iteration {it}", gnorm2)
        if gnorm2 == 0.0:
            logger.info("GIMC iteration %d: zero gradient, stopping", it)
            result.converged = True
            break
        eta0 = first_trial(U, gnorm2, eta_next, f)
        accepted, n_tried, start = None, 0, eta0
        while accepted is None and n_tried < MAX_TRIALS:
            etas = trial_steps(start, 0, min(n_trials, MAX_TRIALS - n_tried))
            res, phi_key = stats_pass(U, g, etas, False)
            for eta, (spp, sap) in zip(etas, _unpack_stats(res, len(etas)), strict=True):
                n_tried += 1
                if big:
                    W1, f1 = reduced_objective_t(spp, sap, a2, alpha)
                    W1 = None if W1 is None else W1.T
                else:
                    W1, f1 = reduced_objective(spp, sap, a2, alpha)
                logger.debug("GIMC iteration %d trial %d: step %.4g objective %.10g "
                             "(Armijo needs <= %.10g; before the step %.10g)", it, n_tried,
                             eta, f1, f - C1 * eta * gnorm2, f)  # fmt: skip
                if f1 <= f - C1 * eta * gnorm2:
                    accepted = (eta, W1, f1)
                    break
                W1 = None
            del res, spp, sap
            if accepted is None and rejection_bound(eta, gnorm2) <= tol * max(abs(f), 1e-300):
                logger.debug("GIMC iteration %d: trial step %.3g rejected; by the quadratic "
                             "model no step decreases the objective by more than tol = %.3g "
                             "of it", it, eta, tol)  # fmt: skip
                break
            if accepted is None:  # the next pass's first trial, below the last rejected one
                start = backtrack(eta, f, f1, gnorm2)
        if accepted is None:
            logger.info("GIMC iteration %d: line search found no descent step; stopping", it)
            result.converged = True
            break
        eta, W, f_new = accepted
        accepted = None
        U = _step_inplace(U, eta, g) if big else _step(U, eta, g)
        g = None  # not held through the next gradient pass (d x m_total float64, issue 25)
        eta_next = next_trial(eta, f, f_new, gnorm2)
        logger.debug("GIMC iteration %d: first trial %.3g, accepted %.3g", it, eta0, eta)
        _check_finite("the objective, U or W", f"after iteration {it}", f_new, U, W)
        result.objective.append(f_new)
        result.step_sizes.append(eta)
        result.trials.append(n_tried)
        result.n_iter = it
        elapsed = time.perf_counter() - t0
        logger.info("GIMC iteration %d: objective %.6g step %.3g (%.1fs)", it, f_new, eta, elapsed)
        if callback is not None:
            callback(it, elapsed, f_new)
        if monitor is not None:
            monitor(it, U, W)
        if f - f_new <= tol * max(abs(f), 1e-300):
            f = f_new
            result.converged = True
            break
        f = f_new
        if checkpoint is not None and checkpoint.due(it):
            save_checkpoint(it)
    result.U, result.W, result.n_passes = U, W, n_passes
    if checkpoint is not None:
        save_checkpoint(result.n_iter)
    return result
