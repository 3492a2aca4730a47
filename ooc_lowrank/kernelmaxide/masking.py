"""Labels with missing entries: representation, validation and the paper's masking protocol.

Representation (SPEC 4.1)
    An observed-label matrix is a sparse ``(n_samples, n_labels)`` CSR matrix whose *stored*
    entries are the observed ones: ``+1`` observed positive, ``-1`` observed negative (stored
    explicitly).  Every entry that is not stored is missing.  So "0 = missing" never collides
    with "negative", and a row with no stored entry is an instance with no observed label (a
    test row in the transductive setting).  In a store it is a ``csr`` array, by convention
    named ``"Y_obs"`` next to the full 0/1 labels ``"Y"``.

Masking protocol (SPEC 4.6)
    From full 0/1 labels: for each label, ``omega`` % of the training positives and ``omega``
    % of the training negatives are observed (``round``, at least one when the label has any
    training positive / negative), drawn uniformly without replacement; everything else is
    missing, test rows entirely.  Out of core the draw takes two passes over the label blocks:
    the first counts positives per (block, label); the per-label totals are split across
    blocks by a multivariate hypergeometric draw (so the counts are exact and the subset is
    uniform), then the second pass picks the rows inside each block with a generator seeded by
    ``(seed, block)``.  The result depends on ``seed`` and on the row blocks.
"""

from __future__ import annotations

import numbers
import os

import numpy as np
import scipy.sparse as sp

from ooc_lowrank._validation import check_random_state, check_scalar, param_error

__all__ = ["check_observed_labels", "mask_labels", "mask_labels_store", "split_rows"]


def check_observed_labels(Y, name="Y", where=""):
    """Validate one block of observed labels and return it as CSR float64.

    Rules: 2-D sparse matrix (a dense array is accepted only if it holds no 0, i.e. every entry
    observed), every stored value exactly ``+1`` or ``-1``, no duplicate (row, label) entries.
    """
    if not sp.issparse(Y):
        A = np.asarray(Y)
        if A.ndim != 2:
            raise ValueError(f"{name} must be 2-D (n_samples, n_labels); got shape {A.shape}")
        if A.size and np.any(A == 0):
            raise ValueError(
                f"{name} is dense and holds 0 entries{where}: a dense matrix cannot say which "
                "entries are missing. Pass a scipy.sparse matrix whose stored entries are the "
                "observed labels (+1 / -1), e.g. ooc_lowrank.kernelmaxide.mask_labels(Y01, 20)"
            )
        Y = sp.csr_matrix(A)
    Y = sp.csr_matrix(Y, dtype=np.float64, copy=False)
    d = Y.data
    if d.size and not np.all((d == 1.0) | (d == -1.0)):
        bad = float(d[~((d == 1.0) | (d == -1.0))][0])
        raise ValueError(
            f"{name} must store only observed labels +1 (positive) or -1 (negative){where}; "
            f"found {bad!r}. Missing entries are simply not stored; convert 0/1 labels with "
            "mask_labels or store observed negatives as explicit -1"
        )
    if not Y.has_canonical_format:
        C = Y.copy()
        C.sum_duplicates()
        if C.nnz != Y.nnz:
            raise ValueError(f"{name} has duplicate (row, label) entries{where}; store each once")
    return Y


def split_rows(n_rows, test_fraction, random_state=None):
    """Boolean mask of training rows: a uniform ``1 - test_fraction`` share of ``n_rows``."""
    check_scalar(test_fraction, "test_fraction", low=0.0, high=1.0, high_inclusive=False)
    rng = np.random.default_rng(_seed(random_state))
    n_test = int(round(test_fraction * n_rows))
    train = np.ones(n_rows, dtype=bool)
    train[rng.choice(n_rows, size=n_test, replace=False)] = False
    return train


def _seed(random_state):
    """An integer seed: an int is used as given (its range checked, the error naming
    ``random_state``), anything else draws one."""
    rs = check_random_state(random_state)
    if isinstance(random_state, (int, np.integer)) and not isinstance(random_state, bool):
        return int(random_state)
    return int(rs.randint(2**31 - 1))


def _n_keep(count, omega):
    k = np.floor(count * (omega / 100.0) + 0.5).astype(np.int64)
    return np.where(count > 0, np.clip(k, 1, count), 0)


def _positives(Yb):
    P = sp.csr_matrix(Yb) if sp.issparse(Yb) else sp.csr_matrix(np.asarray(Yb))
    P = sp.csr_matrix(P > 0, dtype=np.int8)
    P.sum_duplicates()
    return P


def _block_counts(P, train_b):
    """Positive and negative training rows per label in one block: two int64 vectors."""
    pos = np.asarray(P[train_b].sum(axis=0), dtype=np.int64).ravel()
    return pos, int(train_b.sum()) - pos


def _select_block(P, train_b, n_pos, n_neg, rng):
    """Observed entries of one block: (rows, cols, values) with exactly ``n_pos[j]`` positive
    and ``n_neg[j]`` negative training rows of label ``j``."""
    Pc = sp.csc_matrix(P)
    tr = np.flatnonzero(train_b)
    rows, cols, vals = [], [], []
    for j in range(P.shape[1]):
        prow = Pc.indices[Pc.indptr[j] : Pc.indptr[j + 1]]
        prow = np.sort(prow[train_b[prow]])
        if n_pos[j]:
            r = prow[rng.choice(prow.size, size=int(n_pos[j]), replace=False)]
            rows.append(r), cols.append(np.full(r.size, j)), vals.append(np.ones(r.size))
        if n_neg[j]:
            nrow = np.setdiff1d(tr, prow, assume_unique=True)
            r = nrow[rng.choice(nrow.size, size=int(n_neg[j]), replace=False)]
            rows.append(r), cols.append(np.full(r.size, j)), vals.append(-np.ones(r.size))
    if not rows:
        return sp.csr_matrix(P.shape, dtype=np.float64)
    r, c, v = np.concatenate(rows), np.concatenate(cols), np.concatenate(vals)
    M = sp.csr_matrix((v, (r, c)), shape=P.shape, dtype=np.float64)
    M.sort_indices()
    return M


def _check_omega(omega):
    return check_scalar(
        omega,
        "omega",
        low=0.0,
        low_inclusive=False,
        high=100.0,
        fix="Give the observed share of each label's positives and negatives in percent, "
        "e.g. omega=20",
    )


def _plan(counts_pos, counts_neg, omega, rng):
    """Split each label's kept totals over the blocks: (n_blocks, L) int arrays."""
    tot_p, tot_n = counts_pos.sum(axis=0), counts_neg.sum(axis=0)
    kp, kn = _n_keep(tot_p, omega), _n_keep(tot_n, omega)
    plan_p = np.zeros_like(counts_pos)
    plan_n = np.zeros_like(counts_neg)
    for j in range(counts_pos.shape[1]):
        if kp[j]:
            plan_p[:, j] = rng.multivariate_hypergeometric(counts_pos[:, j], int(kp[j]))
        if kn[j]:
            plan_n[:, j] = rng.multivariate_hypergeometric(counts_neg[:, j], int(kn[j]))
    return plan_p, plan_n


def _mask_blocks(read, bounds, train, omega, seed):
    """Two passes over label blocks ``read(s, e)``; yields the observed CSR block by block."""
    nb = len(bounds) - 1
    cp, cn = [], []
    for b in range(nb):
        s, e = int(bounds[b]), int(bounds[b + 1])
        p, q = _block_counts(_positives(read(s, e)), train[s:e])
        cp.append(p), cn.append(q)
    L = cp[0].size if cp else 0
    counts_pos = np.array(cp, dtype=np.int64).reshape(nb, L)
    counts_neg = np.array(cn, dtype=np.int64).reshape(nb, L)
    plan_p, plan_n = _plan(counts_pos, counts_neg, omega, np.random.default_rng(seed))
    for b in range(nb):
        s, e = int(bounds[b]), int(bounds[b + 1])
        rng = np.random.default_rng([seed, b])
        yield s, e, _select_block(_positives(read(s, e)), train[s:e], plan_p[b], plan_n[b], rng)


def _train_mask(train, n):
    if train is None:
        return np.ones(n, dtype=bool)
    t = np.asarray(train)
    if t.dtype == bool:
        if t.shape != (n,):
            raise param_error("train", f"as a boolean mask must have shape ({n},)", t.shape)
        return t
    if t.ndim != 1 or t.dtype.kind not in "iu" or (t.size and (t.min() < 0 or t.max() >= n)):
        raise param_error(
            "train",
            f"must be a boolean mask of length {n} or row indices in [0, {n})",
            f"array of dtype {t.dtype} and shape {t.shape}",
        )
    m = np.zeros(n, dtype=bool)
    m[t] = True
    return m


def mask_labels(Y, omega, *, train=None, random_state=None, block_rows=None):
    """Observed labels from full 0/1 labels by the paper's protocol (SPEC 4.6).

    Parameters
    ----------
    Y : csr_matrix or ndarray of shape (n_samples, n_labels)
        Full labels; entries ``> 0`` are positives, all others negatives.
    omega : float in (0, 100]
        Percentage of each label's training positives and of its training negatives observed.
    train : ndarray of bool (n_samples,) or of int, optional
        Training rows (default: all).  Other rows get no observed label.
    random_state : int, RandomState or None
    block_rows : int, optional
        Rows per block of the two-pass draw (default: one block); the drawn subset depends on
        the blocks (see the module docstring), its counts do not.

    Returns
    -------
    csr_matrix of shape (n_samples, n_labels), float64
        Stored entries: ``+1`` observed positive, ``-1`` observed negative.
    """
    _check_omega(omega)
    if block_rows is not None:
        check_scalar(block_rows, "block_rows", kind=numbers.Integral, low=1, fix="e.g. 100000")
    seed = _seed(random_state)
    Y = _check_full_labels(Y)
    n = Y.shape[0]
    tr = _train_mask(train, n)
    br = n if block_rows is None else int(block_rows)
    bounds = np.unique(np.r_[np.arange(0, n, br), n])
    Yc = sp.csr_matrix(Y)
    parts = [blk for _, _, blk in _mask_blocks(lambda s, e: Yc[s:e], bounds, tr, omega, seed)]
    return sp.vstack(parts, format="csr")


def _check_full_labels(Y, name="Y"):
    """Full labels for :func:`mask_labels`: 2-D, at least one row, a real numeric dtype,
    finite values (a NaN would silently become an observed negative); CSR or ndarray."""
    if not sp.issparse(Y):
        Y = np.asarray(Y)
        if Y.ndim != 2:
            raise ValueError(f"{name} must be 2-D (n_samples, n_labels); got shape {Y.shape}")
    if Y.dtype.kind not in "fiub":
        raise param_error(
            name,
            "must hold full 0/1 labels (entries > 0 positive, the others negative) of a real "
            "numeric dtype",
            str(Y.dtype),
            f"Pass {name} as a float, integer or bool array",
            exc=TypeError,
        )
    if Y.shape[0] == 0:
        raise param_error(
            name,
            "has no rows: there is no label to mask (shape)",
            Y.shape,
            f"Pass a {name} with at least one row",
        )
    data = Y.data if sp.issparse(Y) else Y
    if data.dtype.kind == "f" and data.size and not np.isfinite(data).all():
        bad = float(data[~np.isfinite(data)][0])
        raise param_error(
            name,
            "must hold full 0/1 labels (entries > 0 positive, the others negative), every "
            "value finite: a NaN is not a missing label here, it would become an observed "
            "negative",
            bad,
            f"Fill the unknown entries of {name} (0 or 1), or build the observed labels "
            "(+1 / -1 stored, missing not stored) yourself",
        )
    return Y


def mask_labels_store(
    src, dest, omega, *, test_fraction=0.0, random_state=None, labels="Y", overwrite=False
):
    """Write ``dest``: the arrays of store ``src`` plus ``Y_obs`` (observed labels, +1 / -1
    CSR) and ``train`` (dense (n, 1) int8: 1 for training rows), streaming row blocks.

    Two passes over ``src[labels]`` (counts, then selection) and one over the other arrays.
    The CLI form is ``ooc-lowrank mask-labels SRC DEST --omega 20 --seed 0``.  ``src`` and
    ``dest`` are paths (str or os.PathLike) or fsspec URLs; an existing store at ``dest`` is
    replaced only with ``overwrite=True``, anything else there (or ``src`` itself) never.
    """
    from ooc_lowrank.storage import DatasetWriter, check_destination, open_dataset

    _check_omega(omega)
    ds = open_dataset(src) if isinstance(src, (str, os.PathLike)) else src
    check_destination(dest, overwrite=overwrite, inputs=[ds.url])
    if labels not in ds:
        raise param_error(
            "labels", f"must name an array of store {ds.url!r} (has {ds.names})", labels
        )
    Yh = ds[labels]
    n = ds.n_rows
    seed = _seed(random_state)
    tr = split_rows(n, test_fraction, seed) if test_fraction else np.ones(n, dtype=bool)
    B = ds.block_rows
    bounds = np.unique(np.r_[np.arange(0, n, B), n])
    attrs = dict(ds.attrs)
    attrs.update({"mask_omega": float(omega), "mask_seed": seed, "mask_test_fraction": test_fraction})
    with DatasetWriter(dest, block_rows=B, attrs=attrs, overwrite=overwrite) as w:
        for name in ds.names:
            h = ds[name]
            add = {"dense": w.add_dense, "csr": w.add_csr, "coo": w.add_coo}[h.kind]
            add(name, n_cols=h.shape[1], dtype=str(h.dtype))
        w.add_csr("Y_obs", n_cols=Yh.shape[1], dtype="float32")
        w.add_dense("train", n_cols=1, dtype="int8")
        for s, e, obs in _mask_blocks(Yh.read, bounds, tr, omega, seed):
            blocks = {name: ds[name].read(s, e) for name in ds.names}
            w.append(**blocks, Y_obs=obs.astype(np.float32), train=tr[s:e, None].astype(np.int8))
    return dest

