"""KernelMaxide / Maxide: the corrected Algorithm 1 (SPEC 4.4) in the factored span form.

Problem (SPEC KM-6 with the Nystrom kernel ``K~ = F F^T``, F of shape n x r):

    min_C  lam ||C||_*  +  1/2 || R_Omega(F F_UT^T C - Y) ||_F^2 ,   C of shape n_UT x m.

Span form (docs/kernelmaxide.md): every APG iterate is ``C = F_UT T``.  With ``G = F_UT^T F_UT
= R^T R`` (R of shape r' x r, from the eigendecomposition of G) the map ``C -> Chat = R T``
preserves inner products, Frobenius distances and singular values, so the APG runs on the
r' x m matrix ``Chat`` exactly as on ``C``:

* predictions ``K~ C = F (R^T Chat)``: the *weights* ``W = R^T Chat`` (r x m) are all a pass
  needs;
* gradient ``K~_{all,UT}^T R_Omega = F_UT (F^T R_Omega)`` becomes ``R P`` with ``P = F^T
  R_Omega`` (r x m, one reduction);
* the SVT of ``Z - grad/L`` is the SVT of the r' x m matrix ``Zhat - R P / L`` (its Gram is the
  m x m matrix ``Q^T G Q`` of the brief, but the SVD of the r' x m matrix is better
  conditioned).

Maxide (SPEC KM-1) is the same iteration with ``F = A`` (orthonormal columns) and ``R = I``:
``Chat`` *is* W.

Passes per iteration: one gradient pass at ``Z`` (``E(Z)`` and ``P``), then one pass per group
of ``n_trials`` line-search trials (``E`` of each candidate).  The accepted trial's ``E`` is
the objective's smooth part, so no other pass is needed.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np
import scipy.linalg

from ooc_lowrank import engine
from ooc_lowrank._progress import Progress
from ooc_lowrank.kernelmaxide import _blocks

logger = logging.getLogger("ooc_lowrank")

__all__ = [
    "APGResult",
    "Identity",
    "Passes",
    "apg",
    "next_theta",
    "orthonormal_root",
    "randomized_orthonormal_root",
    "span_root",
    "svt",
]


class Passes:
    """The engine passes of one fit over aligned ``X`` (or cached ``F``) and observed ``Y``.

    ``fmap=None`` means ``XB`` already holds ``F`` (cached, zero rows outside UT).
    ``client``: the engine's scheduler policy applies when None.
    """

    def __init__(self, XB, YB, fmap, client=None):
        self.XB, self.YB, self.fmap, self.client = XB, YB, fmap, client
        self.fargs = _blocks.CACHED if fmap is None else fmap.args()
        self.count = 0

    def _run(self, fn, args):
        self.count += 1
        return engine.map_reduce(fn, self.XB, self.YB, args=(*self.fargs, *args), client=self.client)

    def gram(self):
        """``(G, n_observed)`` with ``G = F_UT^T F_UT`` (r x r)."""
        G, nobs = self._run(_blocks.gram_block, ())
        return G, float(nobs[0])

    def grad(self, W):
        """``(E, P)`` at weights ``W``: ``E = 1/2||R_Omega(F W - Y)||^2``, ``P = F^T R_Omega``."""
        E, P = self._run(_blocks.grad_block, (np.ascontiguousarray(W),))
        return float(E[0]), P

    def losses(self, Ws):
        """``E`` at each weight matrix of ``Ws`` (t, r, m), in one pass."""
        return np.atleast_1d(self._run(_blocks.loss_block, (np.ascontiguousarray(Ws),)))


class Identity:
    """``R = I`` of size ``k`` without forming it (Maxide, and KernelMaxide-f whose features are
    the exact kernel columns of the UT rows, so ``Chat = C``): ``R @ A`` and ``R.T @ A`` are
    ``A`` itself."""

    def __init__(self, k):
        self.shape = (int(k), int(k))

    @property
    def T(self):
        return self

    def __matmul__(self, A):
        return A


#: the driver's setup products and kernel blocks (``K_rr``, ``K_rr B``, the median heuristic's
#: distances, the Rayleigh-Ritz products) run as this many row parts on the engine's local pool
#: (``engine.local_map``): no pass runs then, so both cores are the driver's (issue 24).  A fixed
#: count, so the parts -- and the products' rounding -- do not depend on the machine; rows of
#: the sparse-row kernel are computed alone, so its parts are bitwise the whole
ROW_PARTS = 2
#: parts of fewer rows than this are not made (thread hand-off costs more than they save)
MIN_PART_ROWS = 128


def by_row_parts(n, part, min_rows=MIN_PART_ROWS):
    """``part(lo, hi)`` on ``ROW_PARTS`` consecutive row ranges covering ``range(n)`` (one range
    when a part would have fewer than ``min_rows`` rows), in parallel on the engine's local pool;
    each call writes only its own rows of the caller's output."""
    k = ROW_PARTS if n >= ROW_PARTS * min_rows else 1
    b = np.linspace(0, n, k + 1).astype(np.int64)
    engine.local_map(lambda i: part(int(b[i]), int(b[i + 1])), k)


def matmul_rows(A, B):
    """``A @ B`` by row parts of ``A`` on the local pool (:func:`by_row_parts`; parts of at
    least 32 rows: the setup's products have inner dimensions of hundreds)."""
    out = np.empty((A.shape[0], B.shape[1]), dtype=np.result_type(A, B))
    by_row_parts(A.shape[0], lambda lo, hi: np.matmul(A[lo:hi], B, out=out[lo:hi]), 32)
    return out


def span_root(G, rtol=1e-13):
    """``R`` (r' x r) with ``R^T R = G`` up to the eigenvalues ``<= rtol * max`` dropped."""
    G = 0.5 * (G + G.T)
    ev, V = np.linalg.eigh(G)
    top = max(float(ev[-1]), 0.0) if ev.size else 0.0
    keep = ev > rtol * top
    if not keep.any():
        return np.zeros((0, G.shape[0]))
    return np.sqrt(ev[keep])[:, None] * V[:, keep].T


def orthonormal_root(G, k, rtol=1e-13, *, return_product=False):
    """``R`` (k' x r) with ``R G R^T = I``: ``diag(g^-1/2) V^T`` on the ``k`` largest eigenpairs
    ``(g, V)`` of ``G = F_UT^T F_UT`` (those ``<= rtol * max`` dropped, so ``k' <= k``).  The
    features ``F R^T`` are then orthonormal on the UT rows: the top ``k`` left singular vectors
    of ``F_UT`` extended to every row (``KernelMaxide(n_components=k)``, docs/kernelmaxide.md
    section 8, "The orthonormal kernel basis").

    ``return_product=True``: ``(R, G R^T)``, the second (r x k') from the eigenpairs
    (``V diag(g^1/2)``), no product."""
    G = 0.5 * (G + G.T)
    r = G.shape[0]
    kk = min(int(k), r)
    if kk <= 0:
        return (np.zeros((0, r)), np.zeros((r, 0))) if return_product else np.zeros((0, r))
    # the full divide-and-conquer eigh: on one thread 3.4 ms at r = 200 against 7.9 for the
    # top half by LAPACK's MRRR subset driver (evr), and within 5 % of it at r = 1000
    ev, V = np.linalg.eigh(G)
    ev, V = ev[::-1][:kk], V[:, ::-1][:, :kk]
    top = max(float(ev[0]), 0.0)
    kk = min(int(k), int(np.count_nonzero(ev > rtol * top))) if top > 0 else 0
    s = np.sqrt(ev[:kk])
    R = V[:, :kk].T / s[:, None]
    return (R, V[:, :kk] * s) if return_product else R


def randomized_orthonormal_root(
    gram_times,
    r,
    k,
    *,
    oversample=20,
    n_iter=4,
    seed=0,
    rtol=1e-13,
    sketch_dtype=np.float64,
    return_product=False,
):
    """:func:`orthonormal_root` by subspace iteration: ``n_iter`` products ``gram_times(B) = G
    B`` (``B`` of shape r x l, ``l = k + oversample``) from a fixed Gaussian start (``seed``),
    each replaced by the ``P L`` of its pivoted LU (the same span, well conditioned), then
    Rayleigh-Ritz on the last block's span.  ``R G R^T = I`` holds exactly on the returned
    ``k' <= k`` directions (``R = diag(t^-1/2) (Q V)^T`` with ``V^T Q^T G Q V = diag(t)``,
    ``V^T Q^T Q V = I``); they span the top ``k`` eigenvectors of ``G`` up to the subspace error,
    which shrinks like ``(g_{l+1} / g_k)^(n_iter - 1)`` (Halko, Martinsson & Tropp 2011,
    sections 4.5 and 5.5).  Cost: ``n_iter`` r x r x l products in place of the r x r
    eigendecomposition (and, for ``G = M^T H M``, of forming ``G``).

    ``sketch_dtype=np.float32``: the first ``n_iter - 1`` products and their LUs run in
    float32 (``gram_times`` is called with float32 blocks; half the cost); only the subspace
    comes from them.  The Rayleigh-Ritz product and eigendecomposition stay float64, so ``R G
    R^T = I`` holds to float64 rounding whatever the basis ``Q`` (``Q^T G Q`` is formed from
    the ``Q`` used).

    ``return_product=True``: ``(R, G R^T)``, the second (r x k') from the Rayleigh-Ritz
    product ``G Q`` already formed (``(G Q) V diag(t^-1/2)``: an r x l x k' product in place of
    an r x r x k' one); KernelMaxide's features of the landmark rows (issue 24)."""
    kk = min(int(k), r)
    if kk <= 0:
        return (np.zeros((0, r)), np.zeros((r, 0))) if return_product else np.zeros((0, r))
    l = min(r, kk + int(oversample))
    # a Gaussian block is well conditioned: its span is orthonormalized after the first product;
    # between products only the span matters, kept well conditioned by a pivoted LU (``P L``,
    # as scikit-learn's randomized_range_finder; a quarter of a QR's cost at r x l = 1000 x
    # 220).  The last block too: the Rayleigh-Ritz on its span is the generalized problem
    # ``(Q^T G Q) v = t (Q^T Q) v`` in float64 (issue 24: 19 ms against 23 for a float32 QR
    # and the standard problem at 1000 x 220, one thread), with a QR if ``Q^T Q`` is not
    # numerically positive definite
    Q = np.random.default_rng(seed).standard_normal((r, l)).astype(sketch_dtype, copy=False)
    for _ in range(int(n_iter) - 1):
        Q = scipy.linalg.lu(gram_times(Q), permute_l=True, check_finite=False)[0]
    if int(n_iter) <= 1:
        Q = np.linalg.qr(Q)[0]
    Q = Q.astype(np.float64, copy=False)
    GQ = gram_times(Q)
    T = matmul_rows(Q.T, GQ)
    try:
        # the divide-and-conquer driver: 5.8 ms against 11.5 for scipy's default ("gv") at
        # l = 220 on one thread (issue 24)
        ev, V = scipy.linalg.eigh(0.5 * (T + T.T), Q.T @ Q, driver="gvd", check_finite=False)
    except np.linalg.LinAlgError:  # a (numerically) rank-deficient block: orthonormal basis
        Q = np.linalg.qr(Q)[0]
        GQ = gram_times(Q)
        T = Q.T @ GQ
        ev, V = np.linalg.eigh(0.5 * (T + T.T))
    ev, V = ev[::-1], V[:, ::-1]
    top = max(float(ev[0]), 0.0)
    kk = min(kk, int(np.count_nonzero(ev > rtol * top))) if top > 0 else 0
    s = np.sqrt(ev[:kk])
    R = matmul_rows(Q, V[:, :kk]).T / s[:, None]
    return (R, matmul_rows(GQ, V[:, :kk] / s)) if return_product else R


def svt(B, tau):
    """Singular value thresholding ``D_tau(B) = U max(S - tau, 0) V^T`` and its nuclear norm."""
    if B.size == 0:
        return B.copy(), 0.0
    U, s, Vt = np.linalg.svd(B, full_matrices=False)
    sh = np.maximum(s - tau, 0.0)
    k = int(np.count_nonzero(sh))
    return (U[:, :k] * sh[:k]) @ Vt[:k], float(sh.sum())


def next_theta(th):
    """Tseng's ``theta_{k+1} = (sqrt(theta^4 + 4 theta^2) - theta^2) / 2`` (= 1 / t_{k+1} of
    FISTA; ``(1 - theta_{k+1}) / theta_{k+1}^2 = 1 / theta_k^2``)."""
    return (np.sqrt(th**4 + 4 * th**2) - th**2) / 2


@dataclass
class APGResult:
    Chat: np.ndarray
    W: np.ndarray
    n_iter: int
    objective: np.ndarray
    L: float
    n_passes: int
    converged: bool
    history: list = field(default_factory=list)


def apg(
    passes,
    R,
    lam,
    n_labels,
    E0,
    *,
    max_iter=100,
    tol=1e-5,
    gamma_ls=2.0,
    L0=1.0,
    n_trials=2,
    max_doublings=200,
    restart="function",
    callback=None,
    on_iterate=None,
    checkpoint=None,
    verbose=False,
):
    """Corrected Algorithm 1 (SPEC 4.4) on ``Chat`` (r' x m); ``W = R^T Chat``.

    Parameters
    ----------
    passes : Passes
    R : ndarray of shape (r', r) or Identity
        ``R^T R = F_UT^T F_UT`` (KernelMaxide-n) or the identity (Maxide, KernelMaxide-f).
    lam : float
    n_labels : int
    E0 : float
        ``E(0) = 1/2 ||Y_Omega||^2``.
    n_trials : int
        Line-search trials ``L, 2L, ...`` evaluated per pass (the accepted ``L`` is the same as
        trying them one at a time).  A pass that rejects all of them doubles the next batch
        (up to 32), so growing ``L`` from ``L0 = 1`` to ``L_f`` takes O(log log L_f) passes.
    restart : {"function", "gradient", None}
        Adaptive restart of the momentum (O'Donoghue & Candes 2015): ``theta = theta_prev = 1``
        (the next ``Z`` is the iterate itself) when the objective rose (``"function"``, the
        default: the same iterates as plain FISTA while the objective decreases) or when
        ``<Z - C_new, C_new - C> > 0`` (``"gradient"``: the momentum points uphill); ``None``:
        plain FISTA.  Same fixed point; measurements in docs/kernelmaxide.md section 8.
    callback : callable, optional
        ``callback(iteration, elapsed_seconds, objective)`` after every iteration.
    on_iterate : callable, optional
        ``on_iterate(iteration, Chat)`` (tests compare iterates).
    checkpoint : ooc_lowrank._checkpoint.Checkpoint, optional
        Resume from its saved state (``Chat``, the previous iterate, ``theta``, ``L``, the
        objective path and the pass count; iterations continue from the saved one, bitwise as
        if never interrupted); save after every ``checkpoint.every``-th iteration and when the
        fit stops.  ``R`` is saved with the state when it is an array (the caller may reuse it
        on resume).
    verbose : bool
        Progress lines at INFO (DEBUG otherwise) on the ``ooc_lowrank`` logger.

    Returns
    -------
    APGResult
    """
    rp = R.shape[0]
    C_prev = np.zeros((rp, n_labels))
    C = C_prev.copy()
    th_prev = th = 1.0
    L = float(L0)
    F_old = float(E0)
    objs = [F_old]
    progress = Progress(verbose, callback)
    converged = False
    k = 0
    restored = checkpoint.load() if checkpoint is not None else None
    if restored is not None:
        st, arr = restored[0], restored[1]
        C, C_prev = np.array(arr["C"], dtype=np.float64), np.array(arr["C_prev"], dtype=np.float64)
        objs = [float(v) for v in arr["objective"]]
        th_prev, th, L = float(st["th_prev"]), float(st["th"]), float(st["L"])
        k, converged = int(st["n_iter"]), bool(st["converged"])
        F_old = objs[-1]
        passes.count = int(st["n_passes"])
        if converged:
            return APGResult(C, R.T @ C, k, np.array(objs), L, passes.count, converged)

    def save_checkpoint(it):
        checkpoint.save(
            it,
            {
                "th_prev": th_prev,
                "th": th,
                "L": L,
                "n_iter": it,
                "converged": converged,
                "n_passes": passes.count,
            },
            {"C": C, "C_prev": C_prev, "objective": np.array(objs)}
            | ({"R": R} if isinstance(R, np.ndarray) else {}),
        )

    start = k
    for k in range(start + 1, max_iter + 1):
        beta = th * (1.0 / th_prev - 1.0)
        Z = C + beta * (C - C_prev)
        EZ, P = passes.grad(R.T @ Z)
        g = R @ P
        accepted = None
        doublings = 0
        t = int(n_trials)
        while accepted is None:
            Ls = L * gamma_ls ** np.arange(t)
            cands = [svt(Z - g / Lj, lam / Lj) for Lj in Ls]
            Es = passes.losses(np.stack([R.T @ c for c, _ in cands]))
            for j, Lj in enumerate(Ls):
                D = cands[j][0] - Z
                H = float(np.sum(D * g) + 0.5 * Lj * np.sum(D * D))
                if Es[j] - EZ <= H + 1e-12 * abs(EZ):
                    accepted = (cands[j][0], cands[j][1], float(Es[j]), float(Lj))
                    break
            if accepted is None:
                L = float(Ls[-1] * gamma_ls)
                doublings += t
                t = min(2 * t, 32)  # far from L_f (L0 = 1): widen the next batch
                if doublings > max_doublings:
                    raise FloatingPointError(
                        f"line search did not find a step after {doublings} doublings of L "
                        f"(L={L:.3g}); the data may hold inf/NaN or be badly scaled"
                    )
        C_new, nuc, E_new, L = accepted
        F_new = lam * nuc + E_new
        if restart == "gradient":
            # O'Donoghue & Candes (2015): the momentum C - C_prev points against the
            # generalised gradient L (Z - C_new)
            reset = float(np.sum((Z - C_new) * (C_new - C))) > 0.0
        elif restart == "function":
            reset = F_new > F_old
        else:
            reset = False
        C_prev, C = C, C_new
        th_prev, th = (1.0, 1.0) if reset else (th, next_theta(th))
        objs.append(F_new)
        if on_iterate is not None:
            on_iterate(k, C)
        progress(k, F_new, "maxide iter %d: objective %.6g, L %.3g", k, F_new, L)
        if abs(F_new - F_old) < tol * F_new:
            converged = True
            break
        F_old = F_new
        if checkpoint is not None and checkpoint.due(k):
            save_checkpoint(k)
    if checkpoint is not None:
        save_checkpoint(k)
    return APGResult(C, R.T @ C, k, np.array(objs), L, passes.count, converged)
