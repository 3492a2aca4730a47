"""Ranking and classification metrics (SPEC 1.7, 5.4), in memory and block-wise over stores.

Conventions (extreme-classification): precision@k is ``(1/k) sum_{l in top_k(s_i)} A_il``
averaged over *all* rows (rows without a positive label count as 0); nDCG@k uses the binary
gains ``1/log2(rank + 1)`` and the ideal DCG of ``min(k, #positives)`` hits (0 for rows without
positives); accuracy is ``mean(argmax_j s_ij == c_i)``.  Ties in scores are broken by the lower
label index.

The block-wise path works on top-k label blocks: :func:`metric_sums_block` returns the per-block
*sums* that :func:`ooc_lowrank.engine.reduce_blocks` adds up, and :func:`finalize` divides by the
row count.  No (n_samples, n_labels) score matrix is ever needed.
"""

from __future__ import annotations

import re

import numpy as np
import scipy.sparse as sp

__all__ = [
    "accuracy",
    "class_codes_block",
    "finalize",
    "max_k",
    "metric_sums_block",
    "ndcg_at_k",
    "parse_metrics",
    "precision_at_k",
    "ranking_loss",
    "ranking_loss_block",
    "topk_from_scores",
]

_PAT = re.compile(r"^(p|precision|ndcg|n)@(\d+)$")


#: ``top_k`` that :func:`max_k` asks for when the ranking loss needs every label's rank.
FULL_RANKING = 2**31 - 1


def parse_metrics(metrics):
    """Normalize metric names, e.g. ``"p@1,ndcg@5,accuracy"`` ->
    ``[("p", 1), ("ndcg", 5), ("accuracy", 0)]``.

    ``ranking_loss`` (or ``rl``; SPEC 4.6) becomes two entries, ``("ranking_loss", 0)`` and
    ``("ranking_loss_rows", 0)``: the block sums of ``RL_i`` and of the rows counted, which
    :func:`finalize` divides (the loss averages over rows with a positive and a negative
    label, not over all rows).  It needs the full ranking (:func:`max_k` asks for every label).

    Raises
    ------
    ValueError
        For an unknown name (the message lists the accepted forms).
    """
    if isinstance(metrics, str):
        metrics = [m for m in metrics.split(",") if m.strip()]
    out = []
    for name in metrics:
        key = name.strip().lower()
        if key in ("accuracy", "acc"):
            out.append(("accuracy", 0))
            continue
        if key in ("ranking_loss", "rl"):
            out += [("ranking_loss", 0), ("ranking_loss_rows", 0)]
            continue
        mt = _PAT.match(key)
        if not mt or int(mt.group(2)) < 1:
            raise ValueError(
                f"metrics: unknown metric {name!r}; use p@K, ndcg@K (K >= 1), accuracy or "
                "ranking_loss, e.g. 'p@1,p@3,p@5'"
            )
        kind = "p" if mt.group(1) in ("p", "precision") else "ndcg"
        out.append((kind, int(mt.group(2))))
    return out


def class_codes_block(y, classes):
    """Class labels of a block -> codes ``0..C-1`` (index in sorted ``classes``), ``-1`` for a
    label not in ``classes`` (it then never matches a prediction).

    Parameters
    ----------
    y : ndarray of shape (n_b,) or (n_b, 1)
    classes : ndarray of shape (C,), sorted

    Returns
    -------
    ndarray of shape (n_b, 1), int64
    """
    yv = np.asarray(y).reshape(-1)
    classes = np.asarray(classes)
    if classes.size == 0:
        return np.full((yv.size, 1), -1, dtype=np.int64)
    pos = np.clip(np.searchsorted(classes, yv), 0, classes.size - 1)
    return np.where(classes[pos] == yv, pos, -1).astype(np.int64).reshape(-1, 1)


def metric_key(kind, k):
    return "accuracy" if kind == "accuracy" else f"{kind}@{k}"


def max_k(parsed):
    """The ``top_k`` the metrics need (:data:`FULL_RANKING` with the ranking loss: callers
    take ``min(max_k, n_labels)``)."""
    if any(kind == "ranking_loss" for kind, _ in parsed):
        return FULL_RANKING
    return max([k for _, k in parsed] + [1])


def topk_from_scores(scores, k):
    """Indices of the ``k`` largest scores per row, best first (ties: lower index first).

    Parameters
    ----------
    scores : ndarray of shape (n_samples, n_labels)
    k : int

    Returns
    -------
    ndarray of shape (n_samples, min(k, n_labels)), int64
    """
    scores = np.asarray(scores)
    k = min(int(k), scores.shape[1])
    return np.argsort(-scores, axis=1, kind="stable")[:, :k].astype(np.int64)


def _hits(Y, top):
    """``hits[i, j] = Y[i, top[i, j]]`` for CSR or dense Y (0/1)."""
    if sp.issparse(Y):
        Y = sp.csr_matrix(Y)
        n, k = top.shape
        rows = np.repeat(np.arange(n), k)
        return np.asarray(Y[rows, top.ravel()], dtype=np.float64).reshape(n, k)
    return np.take_along_axis(np.asarray(Y, dtype=np.float64), top, axis=1)


def _n_pos(Y):
    if sp.issparse(Y):
        return np.asarray((Y != 0).sum(axis=1)).ravel()
    return np.count_nonzero(np.asarray(Y), axis=1)


def metric_sums_block(Y, top, parsed, codes=False):
    """Per-block sums of the requested metrics, as one float64 vector (order of ``parsed``).

    Parameters
    ----------
    Y : csr_matrix or ndarray of shape (n_b, n_labels), or ndarray (n_b,) / (n_b, 1) of codes
    top : ndarray of shape (n_b, K)
        Top-K label indices per row, best first, ``K >= max_k(parsed)`` (or fewer labels).
        The ranking loss needs every label (``K = n_labels``); it is computed from this
        order, whose ties are broken by the lower label index (the score-based
        :func:`ranking_loss` counts ties as errors instead; the two agree without ties).
    parsed : list of (kind, k) from :func:`parse_metrics`
    codes : bool
        ``Y`` holds class codes (multi-class); "p@k" then means top-k accuracy / k.
    """
    top = np.asarray(top).astype(np.int64)
    n = top.shape[0]
    if codes:
        c = np.asarray(Y).reshape(-1).astype(np.int64)
        hits = (top == c[:, None]).astype(np.float64)
        npos = np.ones(n)
    else:
        hits = _hits(Y, top) if n else np.zeros((0, top.shape[1]))
        npos = _n_pos(Y) if n else np.zeros(0)
    out = np.zeros(len(parsed), dtype=np.float64)
    K = top.shape[1]
    disc = 1.0 / np.log2(np.arange(2, max(K, 1) + 2))
    for j, (kind, k) in enumerate(parsed):
        kk = min(k, K)
        if kind in ("ranking_loss", "ranking_loss_rows"):
            n_labels = None if codes else (Y.shape[1] if np.ndim(Y) == 2 else None)
            if n_labels is not None and K < n_labels:
                raise ValueError(
                    f"ranking_loss needs the rank of every label: top has {K} of {n_labels} "
                    "labels; pass top_k = min(max_k(parsed), n_labels)"
                )
            h = (hits > 0).astype(np.float64)
            npos_r = h.sum(axis=1)
            nneg = K - npos_r
            ok = (npos_r > 0) & (nneg > 0)
            if kind == "ranking_loss_rows":
                out[j] = np.count_nonzero(ok)
                continue
            # negatives ranked above each positive: its position minus the positives above it
            above = np.arange(K)[None, :] - (np.cumsum(h, axis=1) - h)
            err = (h * above).sum(axis=1)
            out[j] = (err[ok] / (npos_r[ok] * nneg[ok])).sum()
            continue
        if kind == "accuracy":
            out[j] = hits[:, 0].sum() if K else 0.0
        elif kind == "p":
            out[j] = hits[:, :kk].sum() / k
        else:
            dcg = (hits[:, :kk] * disc[:kk]).sum(axis=1)
            cdisc = np.concatenate([[0.0], np.cumsum(disc[:kk])])
            idcg = cdisc[np.minimum(npos, kk).astype(np.int64)]
            out[j] = np.where(idcg > 0, dcg / np.where(idcg > 0, idcg, 1.0), 0.0).sum()
    return out


def finalize(sums, n_rows, parsed):
    """Divide block sums by the number of rows: ``{"p@1": ..., "ndcg@3": ..., ...}``; the
    ranking loss by the rows it counted (``nan`` if none)."""
    n = max(int(n_rows), 1)
    sums = [float(s) for s in sums]
    kinds = [kind for kind, _ in parsed]
    out = {}
    for (kind, k), s in zip(parsed, sums, strict=False):
        if kind == "ranking_loss_rows":
            continue
        if kind == "ranking_loss":
            c = sums[kinds.index("ranking_loss_rows")]
            out["ranking_loss"] = s / c if c else float("nan")
            continue
        out[metric_key(kind, k)] = s / n
    return out


def precision_at_k(Y, scores, k):
    """Precision@k of ``scores`` against 0/1 labels ``Y`` (both (n_samples, n_labels))."""
    parsed = [("p", int(k))]
    return finalize(metric_sums_block(Y, topk_from_scores(scores, k), parsed), len(scores), parsed)[
        f"p@{k}"
    ]


def ndcg_at_k(Y, scores, k):
    """nDCG@k of ``scores`` against 0/1 labels ``Y``."""
    parsed = [("ndcg", int(k))]
    return finalize(metric_sums_block(Y, topk_from_scores(scores, k), parsed), len(scores), parsed)[
        f"ndcg@{k}"
    ]


def accuracy(y, scores_or_labels):
    """Accuracy of an argmax: ``scores_or_labels`` is (n_samples, n_classes) scores or (n_samples,)
    predicted codes; ``y`` holds class codes."""
    p = np.asarray(scores_or_labels)
    if p.ndim == 2:
        p = np.argmax(p, axis=1)
    return float(np.mean(p == np.asarray(y).reshape(-1)))


def _positive_csr(Y):
    """CSR of the positive entries (value > 0) of a label block; explicit -1 / 0 are dropped."""
    Y = sp.csr_matrix(Y) if sp.issparse(Y) else sp.csr_matrix(np.asarray(Y))
    if Y.nnz and not (Y.data > 0).all():
        Y = sp.csr_matrix(Y.multiply(Y > 0))
    Y.sum_duplicates()
    return Y


def ranking_loss_block(Y, scores):
    """Ranking-loss *sums* of one block: ``[sum_i RL_i, #rows counted]`` (SPEC 4.6).

    ``RL_i`` is the fraction of (positive, negative) label pairs of row ``i`` with
    ``f_pos <= f_neg`` (ties count as errors).  Positives are the entries ``> 0`` of ``Y``;
    every other label (0, missing, explicit -1) is a negative.  Rows without a positive or
    without a negative are not counted.  The block's ``(n_b, n_labels)`` scores are the only
    dense matrix needed; the engine adds the two sums over blocks.

    Parameters
    ----------
    Y : csr_matrix or ndarray of shape (n_b, n_labels)
    scores : ndarray of shape (n_b, n_labels)

    Returns
    -------
    ndarray of shape (2,), float64
    """
    from ooc_lowrank.kernels.kernelmaxide import ranking_loss_rows

    P = _positive_csr(Y)
    S = np.asarray(scores)
    if S.shape != P.shape:
        raise ValueError(f"scores must have the shape of Y {P.shape}; got {S.shape}")
    if S.dtype not in (np.float32, np.float64):
        S = S.astype(np.float64)
    rl = ranking_loss_rows(S, P.indptr, P.indices)
    ok = rl >= 0
    return np.array([rl[ok].sum(), ok.sum()], dtype=np.float64)


def ranking_loss(Y, scores):
    """Ranking loss (SPEC 4.6, ties count as errors) of ``scores`` against labels ``Y`` (both
    (n_samples, n_labels); positives are entries ``> 0``), averaged over the rows with at least
    one positive and one negative label (``nan`` if there is none)."""
    s, c = ranking_loss_block(Y, scores)
    return float(s / c) if c else float("nan")
