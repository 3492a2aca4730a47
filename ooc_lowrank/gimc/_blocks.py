"""GIMC block functions: one row block of ``X`` (and of the labels ``A``) in, small numpy out.

The feature map is described by a :class:`FeatureSpec`: a tuple of parts laid side by side.
Every part owns a column slice ``[start, stop)`` of the parameter matrix ``U`` (d x m_total)
and a column slice ``[phi_start, phi_stop)`` of ``Phi``:

* ``"fourier"`` (LFF / RFF, SPEC 1.2): ``Phi_p = [cos Z, sin Z] / sqrt(m)``, ``Z = X U_p``
  (``2 m`` columns).
* ``"nystrom"`` (LNYS / NYS): ``Phi_p = C M`` with ``C_ir = exp(-gamma ||x_i - u_r||^2)``
  (``m`` columns); ``M`` is ``None`` (identity, the learned variant) or a fixed m x m matrix
  (IMC-NYS, ``M = (E^+)^(1/2)``).

All functions here are pure: they never modify their inputs (read-only Zarr/Dask chunks) and
return float arrays that the engine sums over blocks in float64.  ``A`` blocks are either CSR
0/1 matrices (multi-label) or a column of class codes (multi-class, one-hot built here).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ooc_lowrank.kernels.csr import csr_t_dense_add
from ooc_lowrank.kernels.fourier import fourier_features, lff_xi
from ooc_lowrank.kernels.rbf import col_sq_add, lnys_t, rbf_from_dot


@dataclass(frozen=True)
class Part:
    """One feature map in the concatenation (see module docstring)."""

    kind: str  # "fourier" | "nystrom"
    start: int
    stop: int
    phi_start: int
    phi_stop: int
    gamma: float
    M: np.ndarray | None = None
    learn: bool = True

    @property
    def m(self) -> int:
        return self.stop - self.start


@dataclass(frozen=True)
class FeatureSpec:
    """Concatenated feature map: ``Phi = [Phi_part0, Phi_part1, ...]``.

    ``row_norm``: every row of ``X`` is scaled to unit L2 norm (all-zero rows stay zero) before
    the feature map, in every block function (fit and prediction alike).
    """

    parts: tuple
    row_norm: bool = False

    @property
    def n_params(self) -> int:
        return self.parts[-1].stop

    @property
    def n_features(self) -> int:
        return self.parts[-1].phi_stop

    @property
    def learns(self) -> bool:
        return any(p.learn for p in self.parts)

    @classmethod
    def build(cls, parts, row_norm=False):
        """``parts``: iterable of ``(kind, m, gamma, M, learn)``; offsets are filled in."""
        out, s, ps = [], 0, 0
        for kind, m, gamma, M, learn in parts:
            width = 2 * m if kind == "fourier" else m
            out.append(Part(kind, s, s + m, ps, ps + width, float(gamma), M, bool(learn)))
            s, ps = s + m, ps + width
        return cls(tuple(out), bool(row_norm))


# ----------------------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------------------


def l2_normalize_rows(Xb):
    """A copy of ``Xb`` (dense or CSR) with unit-L2 rows; all-zero rows stay zero.  Never
    modifies ``Xb`` (read-only store chunks)."""
    dt = Xb.dtype if Xb.dtype in (np.float32, np.float64) else np.dtype(np.float64)
    if sp.issparse(Xb):
        Xb = sp.csr_matrix(Xb)
        data = Xb.data.astype(np.float64)
        counts = np.diff(Xb.indptr)
        rows = np.repeat(np.arange(Xb.shape[0]), counts)
        sq = np.bincount(rows, weights=data * data, minlength=Xb.shape[0]).astype(np.float64)
        inv = np.divide(1.0, np.sqrt(sq), out=np.zeros_like(sq), where=sq > 0)
        new = (data * inv[rows]).astype(dt)
        return sp.csr_matrix((new, Xb.indices, Xb.indptr), shape=Xb.shape)
    X64 = np.asarray(Xb, dtype=np.float64)
    sq = np.einsum("ij,ij->i", X64, X64)
    inv = np.divide(1.0, np.sqrt(sq), out=np.zeros_like(sq), where=sq > 0)
    return (X64 * inv[:, None]).astype(dt)


def _prep(Xb, spec):
    return l2_normalize_rows(Xb) if spec.row_norm else Xb


def _dot(Xb, U):
    """``Xb @ U`` as a C-ordered ndarray of Xb's dtype (dense BLAS or scipy.sparse)."""
    Z = Xb @ U
    return np.ascontiguousarray(Z)


def _row_sq(Xb, dtype):
    """Squared row norms; an overflow (a feature value near sqrt(max)) is an error here, in
    every block, not only in the rows sampled at initialization: the RBF kernel of such a row
    would silently be exp(-inf) = 0."""
    if sp.issparse(Xb):
        out = np.asarray(Xb.multiply(Xb).sum(axis=1), dtype=dtype).ravel()
    else:
        out = np.einsum("ij,ij->i", Xb, Xb).astype(dtype, copy=False)
    if not np.isfinite(out).all():
        from ooc_lowrank._validation import NonFiniteError

        i = int(np.argmin(np.isfinite(out)))
        raise NonFiniteError(
            f"X: the squared norm of row {i} of a block overflows {np.dtype(dtype)} (a feature "
            "value too large, e.g. 1e300). Scale or normalize X before fitting (e.g. "
            "sklearn.preprocessing.MaxAbsScaler), or fix the bad entry"
        )
    return out


def label_block(Ab, n_labels, codes, dtype):
    """Labels of one block as CSR ``(n_b, n_labels)``; class codes become one-hot rows."""
    if codes:
        c = np.asarray(Ab).reshape(-1).astype(np.int64)
        n = c.shape[0]
        return sp.csr_matrix(
            (np.ones(n, dtype=dtype), c, np.arange(n + 1, dtype=np.int64)), shape=(n, n_labels)
        )
    if sp.issparse(Ab):
        return sp.csr_matrix(Ab, dtype=dtype)
    return sp.csr_matrix(np.asarray(Ab, dtype=dtype))


def _phi_from_dots(Z, xsq, usq, spec, out):
    """Fill ``out`` (n_b, D) from the projections ``Z = X U`` (n_b, m_total); may overwrite Z.

    Returns the list of raw kernel blocks ``C`` for Nystrom parts with a fixed ``M`` (else the
    corresponding view of ``out``).
    """
    Cs = []
    for p in spec.parts:
        Zp = Z[:, p.start : p.stop]
        if p.kind == "fourier":
            fourier_features(
                np.ascontiguousarray(Zp), 1.0 / np.sqrt(p.m), out[:, p.phi_start : p.phi_stop]
            )
            Cs.append(None)
        else:
            Zc = np.ascontiguousarray(Zp)
            if p.M is None:
                C = rbf_from_dot(
                    Zc, xsq, usq[p.start : p.stop], p.gamma, out[:, p.phi_start : p.phi_stop]
                )
            else:
                C = rbf_from_dot(Zc, xsq, usq[p.start : p.stop], p.gamma, Zc)
                np.matmul(C, p.M.astype(C.dtype, copy=False), out=out[:, p.phi_start : p.phi_stop])
            Cs.append(C)
    return Cs


def _needs_xsq(spec):
    return any(p.kind == "nystrom" for p in spec.parts)


def col_sq(U, dtype=None):
    """Squared column norms of ``U`` (d, m), summed in float64 by row slices and rounded once
    to ``dtype`` (default ``U``'s): the landmark norms ``||u_r||^2`` of the RBF kernel.

    A float32 sum over the d rows (``np.einsum`` accumulates sequentially) is off by about
    ``d eps`` relatively: 1e-5 at d = 30,000, i.e. ``d^2 = ||x||^2 + ||u||^2 - 2 x.u`` off by
    2e-4 for ``||u||^2 = 22``, a per-column factor ``exp(-gamma 2e-4)`` on the kernel block.
    The statistics pass used precise norms (:func:`stats_block_into`), so the gradient pass saw
    other features than the ones ``W`` was fitted to, and the LNYS column sums ``1^T T``
    (``diag(C^T G)``, about 70x smaller than their terms near the W-step's optimum) came out
    1-50 % wrong: the large-state float32 gradient 28 % off at a tenth of Delicious-large
    (issue 25, ``benchmarks/gimc_grad_precision.py``)."""
    out = col_sq_add(U, np.zeros(U.shape[1], dtype=np.float64))  # no float64 copy of U
    return out.astype(U.dtype if dtype is None else dtype)


def landmark_sq(U, spec, dtype):
    """The ``usq`` of :func:`features_block`: :func:`col_sq` of the Nystrom parts' columns of
    ``U`` (d, m_total), zeros for the other parts (whose features need none)."""
    usq = np.zeros(U.shape[1], dtype=dtype)
    for p in spec.parts:
        if p.kind == "nystrom":
            usq[p.start : p.stop] = col_sq(U[:, p.start : p.stop], dtype)
    return usq


def features_block(Xb, U, spec, prepped=False, keep_z=None, usq=None):
    """``Phi`` of one block, shape (n_b, D), dtype of ``Xb`` (``prepped``: ``Xb`` is already
    row-normalized as the spec asks).  ``keep_z``: called with the projections ``X U``, which
    the feature map then leaves intact (see :func:`z_keepable`).  ``usq``: the squared column
    norms of ``U`` (:func:`col_sq`; computed here when None and a Nystrom part needs them)."""
    Xb = Xb if prepped else _prep(Xb, spec)
    dt = Xb.dtype
    Z = _dot(Xb, U)
    if keep_z is not None:
        keep_z(Z)
    xsq = _row_sq(Xb, dt) if _needs_xsq(spec) else None
    if _needs_xsq(spec):
        usq = landmark_sq(U, spec, dt) if usq is None else np.asarray(usq, dtype=dt)
    Phi = np.empty((Z.shape[0], spec.n_features), dtype=dt)
    _phi_from_dots(Z, xsq, usq, spec, Phi)
    return Phi


def _gram(Phi):
    """``Phi^T Phi`` as a C-ordered (D, D) array (symmetric; callers read its lower triangle,
    see :func:`symmetrize_lower`).

    NumPy computes ``Phi.T @ Phi`` of one array with syrk (half the flops of a gemm) and, unlike
    ``scipy.linalg.blas.ssyrk``, releases the GIL while it runs: scipy's f2py wrapper holds it,
    which serialised the syrk of concurrent Dask block tasks (two threads of ssyrk on 4000 x
    1000 float32 blocks ran at 0.96x one thread; ``Phi.T @ Phi`` at 1.88x, same one-thread
    speed; docs/performance.md).
    """
    if Phi.shape[0] == 0:
        return np.zeros((Phi.shape[1], Phi.shape[1]), dtype=Phi.dtype)
    return Phi.T @ Phi


def symmetrize_lower(S):
    """Full symmetric matrix from the lower triangle of ``S`` (a :func:`_gram` output)."""
    L = np.tril(S)
    L += np.tril(S, -1).T
    return L


# ----------------------------------------------------------------------------------------
# passes
# ----------------------------------------------------------------------------------------


def stats_shapes(spec, n_labels, n_trials, with_a2):
    """Output shapes of :func:`stats_block` (given to the engine, which then does not call
    the block function on a probe block to find them: a D x D syrk and allocation per pass)."""
    D = spec.n_features
    return [(D, D), (n_labels, D)] * n_trials + ([()] if with_a2 else [])


def grad_shapes(spec, d):
    """Output shapes of :func:`grad_block` for ``d`` input features."""
    return [(d, spec.n_params), (spec.n_params,)]


def stats_block(Xb, Ab, U, direction, etas, spec, n_labels, codes, with_a2, keep=None,
                scales=None):
    """Statistics pass: for each trial ``U_t = U - eta_t * direction`` return
    ``tril(Phi_t^T Phi_t)`` (D, D) and ``A^T Phi_t`` (L, D); then ``||A_b||_F^2`` if asked.

    One read of the block serves every trial: ``X U_t = X U - eta_t X direction`` (two GEMMs
    whatever the number of trials).  With ``direction=None`` and ``U`` of shape
    ``(n_trials, d, m_total)`` (the trial matrices ``U - eta_t direction``, ``etas`` then only
    counts them) each trial is one GEMM ``X U_t``: the fit driver's choice, so that a single
    trial (the default) costs one ``n d m`` product, not two (issue 25).

    Parameters
    ----------
    Xb : ndarray or csr_matrix of shape (n_b, d)
    Ab : csr_matrix of shape (n_b, L) or ndarray of shape (n_b, 1) of class codes
    U : ndarray of shape (d, m_total) or (n_trials, d, m_total), dtype of Xb
    direction : ndarray of shape (d, m_total) or None (then ``etas`` must be ``(0.0,)``, or
        ``U`` holds one matrix per trial)
    etas : tuple of float
    keep : callable(Phi) or None
        Called with the features of a single trial (see :func:`stats_block_at`).
    scales : tuple of float or None
        Fourier parts only, ``direction`` None: trial ``t`` is ``U_t = scales[t] U`` (the
        kernel widths ``gamma scales[t]^2`` of one draw), its projections ``scales[t] X U``
        from the one GEMM ``X U`` (the same to rounding).
    """
    Xb = _prep(Xb, spec)
    dt = Xb.dtype
    A = label_block(Ab, n_labels, codes, dt)
    AT = A.T.tocsr() if A.shape[1] > 4 * A.shape[0] else A.T  # csc view: A^T Phi streams A
    if U.ndim == 3:  # one matrix per trial: one GEMM each
        return _stats_per_trial(Xb, A, AT, U, spec, with_a2, keep)
    Z0 = _dot(Xb, U)
    Zg = _dot(Xb, direction) if direction is not None else None
    nys = _needs_xsq(spec)
    xsq = _row_sq(Xb, dt) if nys else None
    n = Z0.shape[0]
    Phi = np.empty((n, spec.n_features), dtype=dt)
    # the feature map may overwrite Z: a single trial at U uses Z0 itself (no copy)
    Z = Z0 if len(etas) == 1 and (Zg is None or etas[0] == 0.0) else np.empty_like(Z0)
    out = []
    for t, eta in enumerate(etas):
        if scales is not None:
            np.multiply(Z0, dt.type(scales[t]), out=Z)
            Ut = None  # read by Nystrom parts only
        elif Zg is None or eta == 0.0:
            if Z is not Z0:
                Z[...] = Z0
            Ut = U
        else:
            np.multiply(Zg, dt.type(eta), out=Z)
            np.subtract(Z0, Z, out=Z)
            Ut = U - dt.type(eta) * direction
        _trial_stats(Z, xsq, Ut, spec, Phi, AT, out)
    return _stats_end(out, Phi, len(etas), A, with_a2, keep)


def _stats_per_trial(Xb, A, AT, Us, spec, with_a2, keep=None):
    """:func:`stats_block` for trial matrices ``Us`` (n_trials, d, m_total): ``X U_t`` each."""
    dt = Xb.dtype
    xsq = _row_sq(Xb, dt) if _needs_xsq(spec) else None
    Phi = np.empty((Xb.shape[0], spec.n_features), dtype=dt)
    out = []
    for Ut in Us:
        if not sp.issparse(Xb):  # own, aligned buffer: the same GEMM bits as a 2-D matrix
            Ut = Ut.copy()  # (a CSR product needs none: no d x m_total copy per block)
        Z = _dot(Xb, Ut)
        _trial_stats(Z, xsq, Ut, spec, Phi, AT, out)
    return _stats_end(out, Phi, len(Us), A, with_a2, keep)


def _trial_stats(Z, xsq, Ut, spec, Phi, AT, out):
    """One trial of :func:`stats_block`: its features ``Phi`` (written in place) from the dots
    ``Z = X U_t`` (``xsq``: the rows' squared norms, None unless a Nystrom part needs them),
    then ``tril(Phi^T Phi)`` and ``A^T Phi`` appended to ``out``."""
    usq = landmark_sq(Ut, spec, Phi.dtype) if xsq is not None else None
    _phi_from_dots(Z, xsq, usq, spec, Phi)
    out.append(_gram(Phi))
    out.append(np.asarray(AT @ Phi))


def _stats_end(out, Phi, n_trials, A, with_a2, keep):
    """The end of :func:`stats_block`: ``keep(Phi)`` for a single trial, ``||A_b||_F^2`` if
    asked; -> the outputs as a tuple."""
    if keep is not None and n_trials == 1:
        keep(Phi)
    if with_a2:
        out.append(np.array(float(np.dot(A.data.astype(np.float64), A.data))))
    return tuple(out)


def grad_block(Xb, Ab, U, spec, WWt, Wt, n_labels, codes):
    """Gradient pass (SPEC 1.4.3/1.4.6): returns ``X_b^T Xi_b`` (d, m_total) and the LNYS column
    sums ``1^T T_b`` (m_total,) (zeros for Fourier and frozen parts).

    ``G_b = Phi_b (W W^T) - A_b W^T`` is formed as an (n_b, D) array.  When ``WWt`` is None
    (the caller's choice for ``L < D/2``) it is ``(Phi_b W - A_b) W^T`` instead, cheaper by a
    factor ``D / 2L``; its transient (n_b, L) block is smaller than ``Phi_b``.
    """
    Xb, Phi, G = _grad_parts(Xb, Ab, U, spec, WWt, Wt, n_labels, codes)
    return backprop_block(Xb, Phi, G, spec)


def grad_block_into(
    acc, start, Xb, Ab, U, spec, WWt, Wt, n_labels, codes, phi_key=None, z_key=None, usq=None
):
    """:func:`grad_block` added into ``acc``, the flat float64 accumulator of an engine chain
    (``X^T Xi`` (d, m_total) then the column sums, C order): an accumulating block function
    (``engine.reduce_blocks`` with ``offset=True``: ``start`` is the block's first row), the
    fit's gradient pass.  A CSR block scatter-adds only the rows of its nonzero columns: no
    (d, m_total) array per block (issue 25).  ``phi_key``: the features of this block left by
    :func:`stats_block_at` under that key (the accepted trial's ``U``) are used, not recomputed
    (the same bits; computed as usual when this process has none).  ``z_key``: the block's
    projections ``X U`` are kept under ``(z_key, start)`` for the line search that follows
    (:func:`stats_block_into`).  ``usq``: the squared column norms of ``U`` (:func:`col_sq`,
    the driver's, once per pass; computed per block when None)."""
    d, mt = Xb.shape[1], spec.n_params
    Phi = None if phi_key is None else _phi_take(phi_key, start)
    keep_z = None
    if z_key is not None:
        keep_z = lambda Z: _phi_put(z_key, start, Z)  # noqa: E731
    Xb, Phi, G = _grad_parts(
        Xb, Ab, U, spec, WWt, Wt, n_labels, codes, Phi=Phi, keep_z=keep_z, usq=usq
    )
    backprop_block(Xb, Phi, G, spec, out=(acc[: d * mt].reshape(d, mt), acc[d * mt :]))


grad_block_into.accumulates = True


def grad_block_into32(*args, **kwargs):
    """:func:`grad_block_into` with a float32 accumulator (the fit's large-state mode)."""
    return grad_block_into(*args, **kwargs)


grad_block_into32.accumulates = True
grad_block_into32.accumulator_dtype = np.float32


def z_keepable(spec):
    """Whether the feature map leaves the projections ``X U`` intact (no part with a fixed
    ``M``, whose kernel block overwrites them), so that they can be kept for a line search."""
    return all(p.M is None for p in spec.parts)


def stats_block_into(acc, start, Xb, Ab, U, direction, etas, usqs, spec, n_labels, codes,
                     with_a2, z_key=None):
    """The statistics of :func:`stats_block` added into ``acc`` (the flat accumulator of an
    engine chain, the outputs of :func:`stats_shapes` in C order): the fit's statistics pass
    when its state is large (issue 25).  ``A^T Phi_t`` is a scatter-add of the block's label
    rows (:func:`csr_t_dense_add`), so no (L, D) array is made per block.

    Trial ``t`` is ``X (U - eta_t direction) = X U - eta_t X direction``: one product with the
    direction per block, any number of trials from it, and no (d, m_total) trial matrix.
    ``X U`` is the one the gradient pass kept under ``(z_key, start)`` (the same bits as
    recomputing it, which happens when this process has none).  ``usqs``: per trial, the
    squared column norms of ``U_t`` (the driver's, from column inner products; Nystrom parts
    only, else None).
    """
    Xb = _prep(Xb, spec)
    dt = Xb.dtype
    A = label_block(Ab, n_labels, codes, dt)
    D, L = spec.n_features, int(n_labels)
    Z0 = None if z_key is None else _phi_get(z_key, start)
    if Z0 is None:
        Z0 = _dot(Xb, U)
    Zg = None if direction is None else _dot(Xb, direction)
    xsq = _row_sq(Xb, dt) if _needs_xsq(spec) else None
    Phi = np.empty((Z0.shape[0], spec.n_features), dtype=dt)
    Z = np.empty_like(Z0)
    k = 0
    for t, eta in enumerate(etas):
        if Zg is None:
            Z[...] = Z0
        else:
            np.multiply(Zg, dt.type(eta), out=Z)
            np.subtract(Z0, Z, out=Z)
        _phi_from_dots(Z, xsq, None if xsq is None else usqs[t], spec, Phi)
        acc[k : k + D * D].reshape(D, D)[...] += _gram(Phi)
        k += D * D
        csr_t_dense_add(A.indptr, A.indices, A.data, Phi, acc[k : k + L * D].reshape(L, D))
        k += L * D
    if with_a2:
        acc[k] += float(np.dot(A.data.astype(np.float64), A.data))


stats_block_into.accumulates = True


def stats_block_into32(*args, **kwargs):
    """:func:`stats_block_into` with a float32 accumulator (the fit's large-state mode)."""
    return stats_block_into(*args, **kwargs)


stats_block_into32.accumulates = True
stats_block_into32.accumulator_dtype = np.float32


def stats_block_at(start, Xb, Ab, U, direction, etas, spec, n_labels, codes, with_a2, phi_key,
                   scales=None):
    """:func:`stats_block` of the block whose first row is ``start`` (``offset=True``); with a
    single trial and ``phi_key`` not None its features are kept in this process under
    ``(phi_key, start)`` for the next gradient pass (:func:`grad_block_into`)."""
    keep = None
    if phi_key is not None and len(etas) == 1:
        keep = lambda Phi: _phi_put(phi_key, start, Phi)  # noqa: E731
    return stats_block(Xb, Ab, U, direction, etas, spec, n_labels, codes, with_a2, keep=keep,
                       scales=scales)


# The features of the last single-trial statistics pass, per block start: one generation (key)
# at a time, so at most one pass's Phi (n D s) is held per process; a gradient pass takes
# (removes) its blocks' entries.  At the NUS-WIDE shape (D = 1,000, d = 1,134, m = 500) this
# saves the GEMM X U and the sin/cos of every block in every gradient pass (issue 25).
_PHI = {"key": None, "blocks": {}}
_PHI_LOCK = threading.Lock()


def _phi_put(key, start, Phi):
    with _PHI_LOCK:
        if _PHI["key"] != key:
            _PHI["key"], _PHI["blocks"] = key, {}
        _PHI["blocks"][int(start)] = Phi


def _phi_get(key, start):
    """Like :func:`_phi_take`, but the entry stays (several line-search passes read it)."""
    with _PHI_LOCK:
        return _PHI["blocks"].get(int(start)) if _PHI["key"] == key else None


def _phi_take(key, start):
    with _PHI_LOCK:
        return _PHI["blocks"].pop(int(start), None) if _PHI["key"] == key else None


def clear_phi_cache():
    """Drop the features kept by :func:`stats_block_at` (the fit driver, when it stops)."""
    with _PHI_LOCK:
        _PHI["key"], _PHI["blocks"] = None, {}


def _grad_parts(Xb, Ab, U, spec, WWt, Wt, n_labels, codes, Phi=None, keep_z=None, usq=None):
    """The block as the features see it, its features ``Phi`` (computed unless given) and
    ``G = df/dPhi`` (n_b, D)."""
    Xb = _prep(Xb, spec)
    dt = Xb.dtype
    A = label_block(Ab, n_labels, codes, dt)
    if Phi is None:
        Phi = features_block(Xb, U, spec, prepped=True, keep_z=keep_z, usq=usq)
    if WWt is None:  # few labels (L < D/2): residual form, transient (n_b, L) block
        R = Phi @ Wt.T
        R -= A.toarray()
        G = R @ Wt
    else:
        G = Phi @ WWt
        G -= np.asarray(A @ Wt)
    return Xb, Phi, G


def _add_xt(Xb, B, out):
    """``out += Xb^T B`` (``out`` a float64 (d, m) view): a scatter-add of the block's nonzero
    columns for CSR, one BLAS product for dense."""
    if sp.issparse(Xb):
        Xb = sp.csr_matrix(Xb)
        csr_t_dense_add(Xb.indptr, Xb.indices, Xb.data, B, out)
    else:
        out += Xb.T @ B


def backprop_block(Xb, Phi, G, spec, out=None):
    """Back-propagate ``G = df/dPhi`` (n_b, D) of one block to the feature parameters:
    ``X_b^T Xi_b`` (d, m_total) and the LNYS column sums (m_total,), for :func:`finalize_grad`.

    ``Xb`` is the block as the features saw it (row-normalized if the spec asks) and ``Phi``
    its features; ``G`` is overwritten (the caller owns it).  With ``out = (gX, colsum)``
    (float64 arrays of those shapes) the block's terms are added into them and nothing is
    returned."""
    if out is None:
        gX = np.zeros((Xb.shape[1], spec.n_params), dtype=np.float64)
        colsum = np.zeros(spec.n_params, dtype=np.float64)
        backprop_block(Xb, Phi, G, spec, out=(gX, colsum))
        return gX, colsum
    gX, colsum = out
    # a CSR block with several parts: one scatter-add of all parts' terms side by side, whose
    # rows of gX are contiguous (a column slice per part ran 2-3x slower, issue 25); the same
    # bits, since every entry is summed in the same order
    fused = sp.issparse(Xb) and len(spec.parts) > 1
    B = np.zeros((G.shape[0], spec.n_params), dtype=G.dtype) if fused else None
    for p in spec.parts:
        if not p.learn:
            continue
        Gp = G[:, p.phi_start : p.phi_stop]
        if p.kind == "fourier":
            Xi = lff_xi(Phi[:, p.phi_start : p.phi_stop], Gp, out=Gp[:, : p.m])
            if fused:
                B[:, p.start : p.stop] = Xi
            else:
                _add_xt(Xb, Xi, gX[:, p.start : p.stop])
        else:
            if p.M is not None:
                raise NotImplementedError("learned Nystrom parts use M = I")
            T, cs = lnys_t(Gp, Phi[:, p.phi_start : p.phi_stop], out=Gp)
            if fused:
                B[:, p.start : p.stop] = T
            else:
                _add_xt(Xb, T, gX[:, p.start : p.stop])
            colsum[p.start : p.stop] += cs
    if fused:
        _add_xt(Xb, B, gX)
    return None


def finalize_grad(gX, colsum, U, spec, inplace=False):
    """``grad_U`` from the reduced pieces.

    LFF parts as they are; LNYS parts ``2 gamma (X^T T - U diag(1^T T))``; frozen parts 0.
    ``inplace``: ``gX`` (float64, the caller's) becomes the gradient when it is writable (no
    (d, m_total) copy; the same bits).
    """
    own = inplace and gX.dtype in (np.float64, U.dtype) and gX.flags.writeable
    g = gX if own else np.array(gX, dtype=np.float64)
    for p in spec.parts:
        sl = slice(p.start, p.stop)
        if not p.learn:
            g[:, sl] = 0.0
        elif p.kind == "nystrom":
            # by row slices: no (d, m) temporaries (1.6 GB each in float32 at the
            # Delicious-large shape, issue 25); elementwise, so the same bits as whole
            cs = colsum[sl][None, :]
            for s in range(0, g.shape[0], _ROWS):
                r = slice(s, s + _ROWS)
                g[r, sl] = 2.0 * p.gamma * (g[r, sl] - U[r, sl] * cs)
    return g


#: Rows per slice of the in-place finalization of a (d, m_total) gradient.
_ROWS = 1 << 14


def scores_block(Xb, U, spec, W):
    """Decision values ``Phi_b W`` (n_b, L)."""
    Phi = features_block(Xb, U, spec)
    return Phi @ W


def topk_block(Xb, U, spec, W, k):
    """Top-k labels and scores of one block as one (n_b, 2k) float64 array
    ``[labels..., scores...]`` (labels sorted by decreasing score; exact as float64).

    The (n_b, L) score block is transient and processed in row slices of bounded size.
    """
    return topk_from_phi(features_block(Xb, U, spec), W, k)


def topk_from_phi(Phi, W, k):
    """:func:`topk_block` from the block's features ``Phi`` (n_b, D): several ``W`` can share
    one ``Phi`` (GIMCCV scores every alpha of a fold from the same features)."""
    n, L = Phi.shape[0], W.shape[1]
    out = np.empty((n, 2 * k), dtype=np.float64)
    step = max(1, int(2**22 // max(L, 1)))
    for s in range(0, n, step):
        S = Phi[s : s + step] @ W
        if k < L:
            idx = np.argpartition(-S, k - 1, axis=1)[:, :k]
        else:
            idx = np.broadcast_to(np.arange(L), (S.shape[0], L)).copy()
        sc = np.take_along_axis(S, idx, axis=1)
        order = np.argsort(-sc, axis=1, kind="stable")
        idx = np.take_along_axis(idx, order, axis=1)
        out[s : s + step, :k] = idx
        out[s : s + step, k:] = np.take_along_axis(sc, order, axis=1)
    return out


def loo_hits_block(start, Xb, Ab, Us, spec, n_labels, codes, Qs, invs, Bs, stride, phi_key=None):
    """Leave-one-out top-1 hits of the ridge solve for each candidate kernel width and alpha,
    on the rows of the block whose global index is a multiple of ``stride`` (``offset=True``:
    the same rows whatever the chunking).

    For width ``k`` (parameters ``Us[k]``), with ``S_PP = Q diag(s) Q^T`` the Gram of all rows,
    ``inv[j] = 1 / (s + alpha_j)`` and ``B = Q^T S_AP^T``, row ``i``'s fitted scores are
    ``t_i diag(inv[j]) B`` with ``t_i = phi_i Q``, its leverage ``h_i = t_i diag(inv[j])
    t_i^T``, and the scores of the fit without row ``i`` are ``(yhat_i - h_i a_i) / (1 - h_i)``
    (the ridge leave-one-out identity that ``sklearn.linear_model.RidgeCV`` uses).  A hit: the
    top-scored label of the left-out fit is one of the row's labels (P@1 / accuracy).  The
    positive factor ``1 / (1 - h_i)`` of a row does not move its top label, so it is not
    applied.  The products run in the block's dtype (float32 data: float32 GEMMs, as the
    statistics pass's Gram); the leverages are summed in float64.

    Parameters
    ----------
    start : int
    Xb, Ab : the blocks (as in :func:`stats_block`)
    Us : sequence of K ndarrays of shape (d, m_total), dtype of Xb
    Qs : sequence of K ndarrays of shape (D, D)
    invs : sequence of K ndarrays of shape (n_alphas, D)
    Bs : sequence of K ndarrays of shape (D, L)
    stride : int
    phi_key : the key of the statistics pass's kept features (a single width), or None

    Returns
    -------
    hits : ndarray of shape (K, n_alphas)
    """
    rows = np.arange((-int(start)) % stride, Xb.shape[0], stride)
    hits = np.zeros((len(Qs), invs[0].shape[0]))
    if rows.size == 0:
        return (hits,)
    kept = _phi_get(phi_key, start) if phi_key is not None and len(Qs) == 1 else None
    Xr = Xb[rows] if kept is None else None
    A = label_block(Ab[rows], n_labels, codes, np.float64)
    for k, (Q, inv, B) in enumerate(zip(Qs, invs, Bs, strict=True)):
        Phi = kept[rows] if kept is not None else features_block(Xr, Us[k], spec)
        dt = Phi.dtype
        T = Phi @ Q.astype(dt, copy=False)
        H = np.square(T, dtype=np.float64) @ inv.T  # (rows, n_alphas) leverages
        hits[k] = _loo_top_hits(T, H, inv, B, A)
    return (hits,)


#: Score columns per product in :func:`_loo_top_hits`: several alphas of few labels in one
#: GEMM (Bibtex: 13 alphas x 159 labels), label slices of many labels (no (rows, L) array).
LOO_COLS = 8192


def _loo_top_hits(T, H, inv, B, A):
    """Hits of :func:`loo_hits_block` for one width: for each alpha ``j`` the left-out top
    label of row ``i`` is the argmax of ``T_i diag(inv[j]) B - H_ij a_i`` (the positive factor
    ``1 / (1 - H_ij)`` dropped).  ``T`` (rows, D) in the data dtype, ``H`` (rows, n_alphas),
    ``inv`` (n_alphas, D), ``B`` (D, L), ``A`` CSR (rows, L) -> (n_alphas,) float64.

    Alphas go ``max(1, LOO_COLS // L)`` at a time through one GEMM ``T [w_j B ...]``."""
    rows, (D, L) = T.shape[0], B.shape
    group, width = max(1, LOO_COLS // L), min(L, LOO_COLS)
    out = np.zeros(inv.shape[0])
    for j0 in range(0, inv.shape[0], group):
        w = inv[j0 : j0 + group]  # (g, D)
        best = np.full((rows, w.shape[0]), -np.inf)
        hit = np.zeros((rows, w.shape[0]))  # the label value at the best score so far
        for c in range(0, L, width):
            Bc = B[:, c : c + width]
            Bw = (w[:, :, None] * Bc[None]).transpose(1, 0, 2).reshape(D, -1).astype(T.dtype)
            Ac = A[:, c : c + width].toarray()
            S = (T @ Bw).reshape(rows, w.shape[0], -1).astype(np.float64)
            S -= H[:, j0 : j0 + w.shape[0], None] * Ac[:, None, :]
            i = np.argmax(S, axis=2)
            v = np.take_along_axis(S, i[:, :, None], axis=2)[:, :, 0]
            better = v > best
            best[better] = v[better]
            hit[better] = np.take_along_axis(Ac, i, axis=1)[better]
        out[j0 : j0 + w.shape[0]] = hit.sum(axis=0)
    return out
