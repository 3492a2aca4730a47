"""Two-sided IMC block functions: one row block in, small numpy out (SPEC 1.5.2, 1.5.6, 5.1).

Two kinds of blocks:

* **X-blocks** (rows of the row features ``X1`` or the column features ``X2``): the feature map
  ``Phi`` of the block is ``Xb`` itself (``spec is None``, the identity map; dense or CSR kept
  as is) or the GIMC feature map (:func:`ooc_lowrank.gimc._blocks.features_block`).
* **Omega-blocks** (rows of the observation CSR: ``indices`` are the observed columns, ``data``
  the observed values), aligned with a row-aligned factor block ``Pb`` (n_b, k); the column-side
  factor ``Q`` (n2, k) is small state.  Entry predictions ``p_i^T q_j`` come from the GLRL
  kernel :func:`ooc_lowrank.kernels.glrl.predict_block` (no (nnz, k) temporaries).

``residual=True`` uses ``R_ij = p_i^T q_j - S_ij`` (gradients, objective); ``residual=False``
uses ``M_ij = p_i^T q_j`` (the Hessian-vector product, where ``Pb`` or ``Q`` is the image
``Phi Delta`` of a direction).  Nothing here modifies its inputs.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ooc_lowrank.gimc import _blocks as _gb
from ooc_lowrank.kernels import glrl as _kg


def _parts(Ob):
    Ob = sp.csr_matrix(Ob)
    return (
        np.ascontiguousarray(Ob.indptr, dtype=np.int64),
        np.ascontiguousarray(Ob.indices, dtype=np.int64),
        np.asarray(Ob.data, dtype=np.float64),
        Ob.shape,
    )


# ----------------------------------------------------------------------------------------
# X-blocks
# ----------------------------------------------------------------------------------------


def phi_block(Xb, U, spec):
    """``Phi`` of one block: ``Xb`` (identity, ``spec is None``) or GIMC features (n_b, D)."""
    if spec is None:
        return Xb
    return _gb.features_block(Xb, U, spec)


def _times(Phi, A):
    """``Phi @ A`` for a thin ``A`` (D, k).  A dense float64 ``Phi`` is multiplied as
    ``(A^T Phi^T)^T``: the same dot products (bitwise equal on the shapes measured) at about
    twice the speed, since OpenBLAS's thin-``N`` dgemm path is the slow one (Segment block
    1155 x 1000, k = 7, one thread: 1.30 -> 0.69 ms).  Other inputs: ``Phi @ A`` as is (in
    float32 the swapped form is slower)."""
    A = A.astype(Phi.dtype, copy=False)
    if isinstance(Phi, np.ndarray) and Phi.dtype == np.float64:
        return (A.T @ Phi.T).T
    return Phi @ A


def _t_times(Phi, Z):
    """``Phi^T Z`` (D, k) in float64 for a thin ``Z`` (n_b, k); dense float64 ``Phi`` as
    ``(Z^T Phi)^T`` (see :func:`_times`: 1.22 -> 0.65 ms on the same block)."""
    Z = np.asarray(Z, dtype=Phi.dtype)
    if isinstance(Phi, np.ndarray) and Phi.dtype == np.float64:
        out = (Z.T @ Phi).T
    else:
        out = Phi.T @ Z
    return np.ascontiguousarray(np.asarray(out, dtype=np.float64))


def project_block(Xb, U, spec, Delta):
    """``Phi_b Delta`` (n_b, k) in float64 (``P = Phi_U W`` when ``Delta = W``)."""
    return np.asarray(_times(phi_block(Xb, U, spec), Delta), dtype=np.float64)


def phit_block(Xb, Zb, U, spec):
    """``Phi_b^T Z_b`` (D, k): the X-pass that closes a gradient or a Hessian-vector product."""
    return _t_times(phi_block(Xb, U, spec), Zb)


def backprop_block(Xb, Zb, U, spec, Wt):
    """Feature-parameter gradient pieces for ``df/dPhi_b = Z_b W^T`` (SPEC 1.5.3).

    ``Z_b`` is ``(R Q)_b`` (row side) or ``(R^T P)_b`` (column side); returns ``X_b^T Xi_b``
    (d, m_total) and the LNYS column sums, summed by the engine and finished by
    :func:`ooc_lowrank.gimc._blocks.finalize_grad`.
    """
    return _backprop(Xb, _gb.features_block(Xb, U, spec), Zb, spec, Wt)


def backprop_held_block(Xb, Phib, Zb, U, spec, Wt):
    """:func:`backprop_block` with the block's features ``Phib`` at ``U`` given (held by
    :meth:`ooc_lowrank.imc.core.Problem.features`; read only): the same bits without the
    feature map's ``X U`` and ``cos``/``sin``."""
    return _backprop(Xb, Phib, Zb, spec, Wt)


def _backprop(Xb, Phi, Zb, spec, Wt):
    G = np.asarray(Zb, dtype=Phi.dtype) @ Wt.astype(Phi.dtype, copy=False)
    return _gb.backprop_block(_gb._prep(Xb, spec), Phi, G, spec)


# ----------------------------------------------------------------------------------------
# Omega-blocks
# ----------------------------------------------------------------------------------------


def entry_values(Ob, Pb, Q, residual):
    """``p_i^T q_j`` (minus ``S_ij`` if ``residual``) at the block's entries, storage order."""
    indptr, cols, vals, _ = _parts(Ob)
    k = Q.shape[1]
    out = np.empty(cols.shape[0], dtype=np.float64)
    _kg.predict_block(
        indptr,
        cols,
        0,
        np.ascontiguousarray(Pb, dtype=np.float64),
        np.ascontiguousarray(Q, dtype=np.float64),
        np.ones(k),
        out,
    )
    if residual:
        out -= vals
    return out, indptr, cols


def omega_rows_block(Ob, Pb, Q, residual):
    """Row-aligned Omega-pass: ``[(E Q)_b, per-row sum of E^2 / 2]`` as (n_b, k + 1), with
    ``E = R`` (residual) or ``E = M``; ``E Q`` is ``R Q`` (W-gradient) or ``M Q`` (W-step HVP)."""
    e, indptr, cols = entry_values(Ob, Pb, Q, residual)
    nb = indptr.shape[0] - 1
    E = sp.csr_matrix((e, cols, indptr), shape=(nb, Q.shape[0]))
    out = np.empty((nb, Q.shape[1] + 1), dtype=np.float64)
    out[:, :-1] = E @ Q
    rows = np.repeat(np.arange(nb), np.diff(indptr))
    out[:, -1] = 0.5 * np.bincount(rows, weights=e * e, minlength=nb)
    return out


def omega_cols_block(Ob, Pb, Q, residual):
    """Column-scattered Omega-pass: ``E_b^T P_b`` (n2, k) and ``sum E^2 / 2`` (reduced by the
    engine); ``R^T P`` (H-gradient) or ``M^T P`` with ``Q = Phi_V Delta`` (H-step HVP)."""
    e, indptr, cols = entry_values(Ob, Pb, Q, residual)
    nb = indptr.shape[0] - 1
    E = sp.csr_matrix((e, cols, indptr), shape=(nb, Q.shape[0]))
    return np.asarray(E.T @ np.asarray(Pb, dtype=np.float64)), np.array(0.5 * float(e @ e))


def omega_loss_block(Ob, Pb, Q):
    """``[sum R^2 / 2, sum B S, sum B^2, sum S^2, nnz]`` with ``B_ij = p_i^T q_j`` (objective,
    and the least-squares scale of a random initialization)."""
    b, indptr, cols = entry_values(Ob, Pb, Q, False)
    s = _parts(Ob)[2]
    r = b - s
    return np.array([0.5 * r @ r, b @ s, b @ b, s @ s, float(s.size)])


def weighted_gram_block(Xb, Ob, U, spec):
    """``Phi_b^T diag(c_b) Phi_b`` (D, D) and ``c_b`` (n_b,), the number of observed entries in
    each row of the row-aligned Omega-block: the pieces of the CG preconditioner
    (:func:`ooc_lowrank.imc.core.Preconditioner`)."""
    Phi = phi_block(Xb, U, spec)
    c = np.diff(_parts(Ob)[0]).astype(np.float64)
    if sp.issparse(Phi):
        G = (Phi.T @ Phi.multiply(c[:, None]).tocsr()).toarray()
    else:
        G = np.asarray(Phi, dtype=np.float64)
        G = G.T @ (G * c[:, None])
    return np.asarray(G, dtype=np.float64), c


weighted_gram_block.row_outputs = (1,)


# ----------------------------------------------------------------------------------------
# fused X + Omega blocks (the observations' rows are the side's rows)
# ----------------------------------------------------------------------------------------


def fused_block(Xb, Ob, U, spec, Delta, Q, residual):
    """One block of a side whose rows index the observations' rows: ``Phi_b^T (E_b Q)`` (D, k)
    and ``sum E_b^2 / 2`` with ``E_ij = (Phi_b Delta)_i^T q_j`` (minus ``S_ij`` if
    ``residual``).  ``Delta = W`` and ``residual=True`` give the W-gradient's data term; a
    direction and ``residual=False`` the Hessian-vector product, in one pass instead of three.
    """
    return _fused(Xb, Ob, U, spec, Delta, Q, residual)[1:]


def fused_image_block(Xb, Ob, U, spec, Delta, Q, residual):
    """:func:`fused_block` and, first, the block's image ``Phi_b Delta`` (n_b, k) as a row
    output: a CG step that updates ``W`` by ``alpha Delta`` updates ``P = Phi W`` by
    ``alpha Phi Delta`` from it, with no X-pass to project ``W`` afresh."""
    return _fused(Xb, Ob, U, spec, Delta, Q, residual)


fused_image_block.row_outputs = (0,)


def _fused(Xb, Ob, U, spec, Delta, Q, residual):
    Phi = phi_block(Xb, U, spec)
    S = project_block(Phi, None, None, Delta)
    EQ = omega_rows_block(Ob, S, Q, residual)
    return S, _t_times(Phi, EQ[:, :-1]), np.array(EQ[:, -1].sum())


# ----------------------------------------------------------------------------------------
# the feature step (SPEC 1.3, 5.3) in one pass per gradient and per Armijo trial
# ----------------------------------------------------------------------------------------


def trial_block(start, Xb, Ob, U, spec, F, other, key):
    """One Armijo trial of a side whose rows index the observations' rows, in one pass: the
    block's new factor rows ``F'_b = Phi_b(U) F`` (n_b, k) at the trial parameters ``U`` and
    ``sum E_b^2 / 2`` with ``E_ij = f'_i^T other_j - S_ij``.

    The trial then needs no X-pass for ``F'`` followed by an Omega-pass for the loss: both
    come from the block in hand (the same bits: :func:`project_block`, and the loss of
    :func:`omega_loss_block`).  ``key``: the block's features ``Phi_b(U)`` are kept in this
    process under ``(key, start)`` (GIMC's one-generation cache), for the driver to hold them
    if the trial is accepted (:meth:`ooc_lowrank.imc.core.Problem.keep_trial_features`)."""
    Phi = phi_block(Xb, U, spec)
    if key is not None:
        _gb._phi_put(key, start, Phi)
    Fn = np.asarray(_times(Phi, F), dtype=np.float64)
    e, _, _ = entry_values(Ob, Fn, other, True)
    return Fn, np.array(0.5 * float(e @ e))


trial_block.row_outputs = (0,)


def _residual_times(Ob, Fb, other):
    """``(R_b other, sum R_b^2 / 2)`` with ``R_ij = f_i^T other_j - S_ij`` on the block's
    entries (``Fb`` the block's factor rows)."""
    e, indptr, cols = entry_values(Ob, Fb, other, True)
    E = sp.csr_matrix((e, cols, indptr), shape=(indptr.shape[0] - 1, other.shape[0]))
    return E @ other, np.array(0.5 * float(e @ e))


def grad_loss_block(Xb, Ob, Fb, U, spec, Ft, other):
    """The feature-parameter gradient pieces of :func:`backprop_block` for ``df/dPhi_b =
    (R_b other) F^T`` and ``sum R_b^2 / 2``, the residual computed from the block's
    observations (rows aligned with ``Xb``) and its factor rows ``Fb``: one pass instead of an
    Omega-pass for ``R other`` followed by the X-pass of the gradient."""
    return grad_loss_held_block(Xb, _gb.features_block(Xb, U, spec), Ob, Fb, U, spec, Ft, other)


def grad_loss_held_block(Xb, Phib, Ob, Fb, U, spec, Ft, other):
    """:func:`grad_loss_block` with the block's features ``Phib`` at ``U`` given (held)."""
    Z, loss = _residual_times(Ob, Fb, other)
    return (*_backprop(Xb, Phib, Z, spec, Ft), loss)
