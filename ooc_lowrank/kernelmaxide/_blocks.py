"""KernelMaxide / Maxide block functions: one row block of ``X`` and of the observed labels in,
small numpy out (SPEC 4.3-4.5; derivation in docs/kernelmaxide.md).

The feature map ``F`` (n x r) is either the Nystrom factor ``F = K(X, landmarks) M`` with
``M = (K_rr^+)^(1/2)`` or the rank-k Nystrom map ``M`` (r x k; the kernel block from each
row's nonzeros for CSR and mostly-zero dense rows, ``kernels.kernelmaxide.rbf_sparse_rows``,
else by the GIMC Nystrom block, ``gimc._blocks.features_block``), or Maxide's linear basis
``A = X P`` with ``P = V_k Sigma_k^-1``.  Only rows with at least one observed label (the set
UT) enter training, so every training block function computes ``F`` for those rows only.  When
``kind is None`` (:data:`CACHED`) the first input already *is* ``F`` (cached, zero rows outside
UT).

All functions are pure: inputs (read-only store / Dask chunks) are never modified.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ooc_lowrank import metrics
from ooc_lowrank._validation import NonFiniteError
from ooc_lowrank.kernels import kernelmaxide as kernels
from ooc_lowrank.gimc import _blocks as gimc_blocks

#: the error of an overflowing ``X^T X`` (Maxide; ``X`` itself finite)
XTX_OVERFLOW = (
    "X: the Gram matrix X^T X overflows float64 (feature values too large for their squares "
    "to be summed over the rows). Scale or standardize X before fitting (e.g. "
    "sklearn.preprocessing.StandardScaler or MaxAbsScaler), or fix the bad entries"
)


@dataclass(frozen=True)
class FeatureMap:
    """``kind="nystrom"``: ``U`` landmarks as columns (d x r), ``M`` the normalization
    ``(K_rr^+)^(1/2)`` (r x r) or the rank-k Nystrom map ``V_k diag(l_k)^-1/2`` (r x k, the top
    k eigenpairs of ``K_rr``), ``gamma`` the RBF width: ``F = K(X, landmarks) M``.
    ``kind="kernel"`` (KernelMaxide-f, and KernelMaxide's fitted orthonormal basis with its map
    folded into the weights): ``U`` the rows (training rows with an observed label, or the
    landmarks) as columns, ``M=None``: ``F = K(X, U)``, the raw kernel columns.
    ``kind="linear"``: ``U`` the projection ``P`` (d x k).  Block functions receive
    :meth:`args` (top-level arrays, so the engine ships them once per graph, not once per
    task)."""

    kind: str
    U: np.ndarray
    M: np.ndarray | None = None
    gamma: float = 0.0

    @property
    def n_features(self) -> int:
        """Columns of ``F``: those of ``M`` when given (the rank-k Nystrom map ``M`` of shape
        (r, k) has ``k``), else one per column of ``U``."""
        return int(self.U.shape[1] if self.M is None else self.M.shape[1])

    def args(self):
        return (self.kind, self.U, self.M, self.gamma)


#: dense blocks with at most this fraction of nonzero entries (and every CSR block) compute the
#: kernel block from each row's nonzeros (``kernels.kernelmaxide.rbf_sparse_rows``: ``nnz r``
#: multiply-adds against ``n d r`` for BLAS).  4,000 x 462 rows against 1,000 landmarks,
#: float64, one thread (busy machine): 21 / 32 / 57 / 81 / 136 ms at 5 / 10 / 20 / 30 / 50 %
#: nonzeros against 92 for BLAS + exp at any density (issue 24; was 0.1 with scipy's CSR x dense)
SPARSE_DENSITY = 0.25

#: float64 rows of the rank-k Nystrom map (KernelMaxide's orthonormal basis) take their kernel
#: block, its ``exp`` and the product ``K M`` in float32 (issue 24: 14 + 19 ms in place of 32 +
#: 39 for Arts' 4,486 UT rows against 1,000 landmarks, one thread) when the float32 rounding is
#: bounded below this relative size: the kernel's exponent, ``gamma ||x - u||^2`` from
#: ``||x||^2 + ||u||^2 - 2 x.u``, errs by at most ``eps32 gamma (max ||x||^2 + max ||u||^2)
#: (nnz + 2)`` (nnz: nonzeros of the widest row), and the columns of ``K M`` (M's columns
#: ``v_j / sqrt(l_j)``) by about ``eps32 (max_j ||M_j||^2 / min_j ||M_j||^2)`` = ``eps32
#: l_max / l_min``.  Yahoo Arts / Business / Health: 2e-5 and 4e-5; far-from-zero rows or a
#: steep spectrum fall back to float64.  F is returned in float64; ranking loss unchanged to
#: six digits, coefficients within 7e-6 (benchmarks/results/kernelmaxide_f32_features.json)
F32_TOL = 1e-4
_EPS32 = float(np.finfo(np.float32).eps)

#: ``args`` of a cached F (the first input already holds F).
CACHED = (None, None, None, 0.0)


def mostly_zero(Xb):
    """Whether the kernel of the rows of ``Xb`` is computed from their nonzeros: CSR input, or
    at most ``SPARSE_DENSITY`` of the dense block's entries nonzero."""
    return sp.issparse(Xb) or np.count_nonzero(Xb) <= SPARSE_DENSITY * Xb.size


def _float32_map(M):
    """``M`` in float32 when the product ``K M`` may run in float32 (:data:`F32_TOL`), else
    None: a rank-k Nystrom map (r x k, k < r) whose column norms spread little."""
    if M is None or M.shape[0] == M.shape[1] or M.shape[1] == 0:
        return None
    cn = np.einsum("ij,ij->j", M, M)
    if not (cn.min() > 0 and _EPS32 * cn.max() / cn.min() <= F32_TOL):
        return None
    return M.astype(np.float32)


def _float32_features(Xb, U, M32, gamma):
    """``K(Xb, U) M`` of mostly-zero float64 rows computed in float32 (:data:`F32_TOL`),
    returned in float64; None when the kernel's rounding bound fails (or it overflows)."""
    if sp.issparse(Xb):
        X32 = sp.csr_matrix(Xb, dtype=np.float32)
        width = int(np.diff(X32.indptr).max()) if X32.shape[0] else 0
    else:
        X32, width = Xb.astype(np.float32), Xb.shape[1]
    U32 = np.ascontiguousarray(U, dtype=np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        K, xsq = kernels.rbf_sparse_rows(X32, U32, gamma)
        usq = np.einsum("ij,ij->j", U32, U32, dtype=np.float64)
        big = float(xsq.max(initial=0.0)) + float(usq.max(initial=0.0))
    if not (np.isfinite(big) and _EPS32 * gamma * big * (width + 2) <= F32_TOL):
        return None
    return (K @ M32).astype(np.float64)


def features(Xb, kind, U, M, gamma):
    """``F`` of one block, shape (n_b, r), in ``Xb``'s float dtype (float64 for integers).
    The rank-k Nystrom map of mostly-zero float64 rows runs in float32 when its rounding is
    bounded (:data:`F32_TOL`)."""
    dt = Xb.dtype if Xb.dtype in (np.float32, np.float64) else np.dtype(np.float64)
    if Xb.dtype != dt:
        Xb = Xb.astype(dt)
    U = U.astype(dt, copy=False)
    if kind == "linear":
        return np.ascontiguousarray(Xb @ U)
    square = M is not None and M.shape[0] == M.shape[1]
    if mostly_zero(Xb):
        # mostly zero rows (bag-of-words data such as the yahoo sets, 7 % nonzero): the dot
        # products from each row's nonzeros, fused with the kernel (issue 24)
        if sp.issparse(Xb):
            Xb = sp.csr_matrix(Xb)
            if not Xb.has_canonical_format:  # duplicates would add their squares apart
                Xb = Xb.copy()
                Xb.sum_duplicates()
        M32 = _float32_map(M) if dt == np.float64 and kind == "nystrom" else None
        if M32 is not None:
            F = _float32_features(Xb, U, M32, gamma)
            if F is not None:
                return F
        K, xsq = kernels.rbf_sparse_rows(Xb, U, gamma)
        if not np.isfinite(xsq).all():
            gimc_blocks._row_sq(Xb, dt)  # raises the overflow error naming the row
    else:
        part = ("nystrom", U.shape[1], gamma, M if square else None, False)
        K = gimc_blocks.features_block(Xb, U, gimc_blocks.FeatureSpec.build([part]))
        if square:
            return K
    # the rank-k Nystrom map (r x k, KernelMaxide's orthonormal basis) or KM-6's (r x r)
    return K if M is None else K @ M.astype(dt, copy=False)


def _ut(Xb, Yb, kind, U, M, gamma):
    """``(F_u, Y_u)``: features and observed labels of the block's rows with an observation."""
    Yb = sp.csr_matrix(Yb)
    if kind is None:  # cached F: rows outside UT are zero and have no residual; no copy
        return np.asarray(Xb), Yb
    rows = np.flatnonzero(np.diff(Yb.indptr))
    return features(Xb[rows], kind, U, M, gamma), Yb[rows]


def _residual(F, Yu, W):
    """The values of ``R_Omega(F W - Y)`` on ``Yu``'s CSR pattern (float64), computed at the
    observed entries only (Numba kernel)."""
    return kernels.observed_residual(F, W, Yu.indptr, Yu.indices, Yu.data)


def label_stats_block(Yb):
    """``([bad, n_ut, n_neg, dense_zeros], per_label)`` for one block of observed labels:
    stored values other than +-1, rows with an observation, observed negatives (stored -1),
    zeros of a dense block (a dense matrix cannot mark an entry missing), and observed entries
    per label."""
    zeros = Yb.size - np.count_nonzero(Yb) if isinstance(Yb, np.ndarray) else 0
    Yb = sp.csr_matrix(Yb)
    d = Yb.data
    bad = np.count_nonzero((d != 1.0) & (d != -1.0))
    per = np.bincount(Yb.indices, minlength=Yb.shape[1]).astype(np.float64)
    stats = [bad, np.count_nonzero(np.diff(Yb.indptr)), np.count_nonzero(d == -1.0), zeros]
    return np.array(stats, dtype=np.float64), per


def ut_rows_block(Yb):
    """1 for the rows of the block with an observed label, else 0: (n_b, 1) int8."""
    return (np.diff(sp.csr_matrix(Yb).indptr) > 0).astype(np.int8)[:, None]


def xtx_block(Xb):
    """``X_b^T X_b`` (d x d, float64) for Maxide's left singular vectors; a non-finite sum of
    finite entries (the engine refuses NaN / inf as blocks are read) is an overflow."""
    with np.errstate(over="ignore", invalid="ignore"):
        if sp.issparse(Xb):
            X64 = sp.csr_matrix(Xb, dtype=np.float64)
            G = np.asarray((X64.T @ X64).toarray())
        else:
            X64 = np.asarray(Xb, dtype=np.float64)
            G = X64.T @ X64
    if not np.isfinite(G).all():
        raise NonFiniteError(XTX_OVERFLOW)
    return G


def gram_block(Xb, Yb, kind, U, M, gamma):
    """``(F_u^T F_u, n_observed)``: the r x r Gram of the UT rows and the observed count."""
    F, Yu = _ut(Xb, Yb, kind, U, M, gamma)
    F64 = F.astype(np.float64, copy=False)
    return F64.T @ F64, np.array([Yu.nnz], dtype=np.float64)


def grad_block(Xb, Yb, kind, U, M, gamma, W):
    """``(E_b, F_u^T R_b)`` at the prediction weights ``W`` (r x m): the block's share of
    ``E = 1/2 ||R_Omega(F W - Y)||^2`` and of ``P = F^T R_Omega(F W - Y)`` (r x m)."""
    F, Yu = _ut(Xb, Yb, kind, U, M, gamma)
    R = _residual(F, Yu, W)
    P = kernels.residual_t_f(F, Yu.indptr, Yu.indices, R, Yu.shape[1])
    return np.array([0.5 * np.dot(R, R)]), P


def loss_block(Xb, Yb, kind, U, M, gamma, Ws):
    """``E_b`` for each trial weight matrix ``Ws[t]`` (t, r, m): one vector of t sums."""
    F, Yu = _ut(Xb, Yb, kind, U, M, gamma)
    out = np.empty(Ws.shape[0], dtype=np.float64)
    for t in range(Ws.shape[0]):
        d = _residual(F, Yu, Ws[t])
        out[t] = 0.5 * np.dot(d, d)
    return out


def features_rows_block(row_start, Xb, ut, kind, U, M, gamma, known=None, F_known=None):
    """``F`` for the cache: the block's UT rows computed, the other rows zero.

    ``known`` (int, one per row of ``X``): for a row whose features are known already (a
    landmark: its kernel row is ``K_rr``'s, so its features are the Nystrom map's ``K_rr M``,
    formed when ``M`` was), the row of ``F_known`` (r_known x r) that holds them, else -1;
    those rows are copied, not computed (issue 24).  Which rows are known does not depend on
    the blocks, so neither does ``F``."""
    rows = np.flatnonzero(ut[row_start : row_start + Xb.shape[0]])
    dt = Xb.dtype if Xb.dtype in (np.float32, np.float64) else np.dtype(np.float64)
    out = np.zeros((Xb.shape[0], U.shape[1] if M is None else M.shape[1]), dtype=dt)
    if known is not None and rows.size:
        pos = known[row_start + rows]
        have = pos >= 0
        out[rows[have]] = F_known[pos[have]]
        rows = rows[~have]
    if rows.size:
        out[rows] = features(Xb[rows], kind, U, M, gamma)
    return out


def rotate_block(Fb, Rt):
    """``F_b R^T`` for the cache (float64 ``R^T`` applied in ``F``'s dtype): with the span root
    folded into the cached features, the APG runs with ``R = I`` (docs/kernelmaxide.md)."""
    return Fb @ Rt.astype(Fb.dtype, copy=False)


def scores_block(Xb, kind, U, M, gamma, W):
    """Decision values ``F_b W`` (n_b, m)."""
    F = features(Xb, kind, U, M, gamma)
    return F @ W.astype(F.dtype, copy=False)


def topk_block(Xb, kind, U, M, gamma, W, k):
    """Top-k label indices per row, best first (ties: lower index), as float64 (n_b, k)."""
    return metrics.topk_from_scores(scores_block(Xb, kind, U, M, gamma, W), k).astype(np.float64)


def eval_block(Xb, Yb, kind, U, M, gamma, W, parsed, K, want_rl):
    """Metric sums of one block: P@k / nDCG@k sums (order of ``parsed``) then the ranking-loss
    ``[sum, count]``; the (n_b, m) score block is transient."""
    S = scores_block(Xb, kind, U, M, gamma, W)
    top = metrics.topk_from_scores(S, K) if parsed else np.zeros((S.shape[0], 0), np.int64)
    Yp = metrics._positive_csr(Yb)
    head = metrics.metric_sums_block(Yp, top, parsed) if parsed else np.zeros(0)
    rl = metrics.ranking_loss_block(Yp, S) if want_rl else np.zeros(2)
    return np.concatenate([head, rl])


def observed_rl_block(Xb, Vb, kind, U, M, gamma, W):
    """``[sum, count]`` of the per-row ranking loss over the observed (+1, -1) pairs of ``Vb``
    (held-out observed labels); scores are computed for the rows with an entry only."""
    Vb = sp.csr_matrix(Vb)
    rows = np.flatnonzero(np.diff(Vb.indptr))
    if not rows.size:
        return np.zeros(2)
    Vu = Vb[rows]
    rl = kernels.observed_ranking_loss_rows(
        scores_block(Xb[rows], kind, U, M, gamma, W), Vu.indptr, Vu.indices, Vu.data
    )
    ok = rl >= 0
    return np.array([rl[ok].sum(), np.count_nonzero(ok)], dtype=np.float64)


def observed_sq_block(Xb, Vb, kind, U, M, gamma, W):
    """``[sum, count]`` of the squared error ``(s_ij - y_ij)^2`` at the observed entries of
    ``Vb`` (held-out labels, +1 / -1); scores are computed for the rows with an entry only."""
    Vb = sp.csr_matrix(Vb)
    rows = np.flatnonzero(np.diff(Vb.indptr))
    if not rows.size:
        return np.zeros(2)
    Vu = Vb[rows]
    S = scores_block(Xb[rows], kind, U, M, gamma, W)
    local = np.repeat(np.arange(rows.size), np.diff(Vu.indptr))
    r = S[local, Vu.indices] - Vu.data
    return np.array([float(r @ r), r.size], dtype=np.float64)
