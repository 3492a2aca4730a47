"""Block function of GIMCCV: one row block serves every fit of a cross-validation pass.

Kept apart from :mod:`ooc_lowrank.gimc.cv` (which imports scikit-learn) so that Dask workers
unpickling :func:`cv_block` load only numpy, scipy and the kernels, like
:mod:`ooc_lowrank.gimc._blocks`.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ooc_lowrank import metrics
from ooc_lowrank.gimc import _blocks

# ----------------------------------------------------------------------------------------


def req_shapes(req, d, n_labels, n_folds, n_metrics):
    """Output shapes of one request (see :func:`cv_block`)."""
    kind = req[0]
    if kind == "stats":
        D = req[5].n_features
        out = [(D, D), (n_labels, D)] * len(req[4])
        return out + ([()] if req[6] else [])
    if kind == "fstats":
        D = req[2].n_features
        return [(D, D), (n_labels, D), ()] * n_folds
    if kind == "grad":
        P = req[3].n_params
        return [(d, P), (P,)] + ([(n_metrics,)] if req[6] is not None else [])
    if kind == "score":
        return [(n_metrics,)] * len(req[4])
    raise ValueError(f"unknown request {kind!r}")


def cv_block(Xb, Ab, Fb, plan, n_labels, codes, n_folds, parsed, top_k, *arrays):
    """One row block for every fit of a cross-validation pass.

    ``Fb`` (n_b, 1) holds the fold id of each row.  ``plan`` is a tuple of requests whose
    arrays are indices into ``arrays`` (so that the engine ships each array once per graph):

    * ``("stats", k, iU, iDir, etas, spec, with_a2)``: :func:`_blocks.stats_block` on the
      training rows of fold ``k`` (rows whose fold id is not ``k``);
    * ``("fstats", iU, spec)``: for every fold ``j``, ``stats_block`` (one trial, eta 0, with
      ``||A||^2``) on the rows *of* fold ``j``;
    * ``("grad", k, iU, spec, iWWt, iWt, iW)``: :func:`_blocks.grad_block` on the training
      rows of fold ``k``, then (``iW`` not None) the metric sums of ``(U, W)`` on its
      validation rows, as ``GIMC.evaluate`` computes them;
    * ``("score", k, iU, spec, (iW, ...))``: metric sums on the validation rows of fold ``k``
      for each ``W`` (the features ``Phi`` are computed once).

    Returns the outputs of all requests, in order, as one tuple (summed over blocks).
    """
    f = np.asarray(Fb).reshape(-1)
    d = Xb.shape[1]
    rows = {}

    def subset(key):
        if key not in rows:
            k, train = key
            idx = np.flatnonzero(f != k) if train else np.flatnonzero(f == k)
            if idx.size == 0:
                rows[key] = None
            else:
                Xs = Xb[idx] if sp.issparse(Xb) else np.asarray(Xb)[idx]
                As = Ab[idx] if sp.issparse(Ab) else np.asarray(Ab)[idx]
                rows[key] = (Xs, As)
        return rows[key]

    def zeros(shapes):
        return [np.zeros(s) for s in shapes]

    out = []
    for req in plan:
        kind = req[0]
        shapes = req_shapes(req, d, n_labels, n_folds, len(parsed))
        if kind == "stats":
            _, k, iU, iD, etas, spec, with_a2 = req
            sub = subset((k, True))
            if sub is None:
                out += zeros(shapes)
                continue
            D = None if iD is None else arrays[iD]
            out += _blocks.stats_block(
                sub[0], sub[1], arrays[iU], D, etas, spec, n_labels, codes, with_a2
            )
        elif kind == "fstats":
            _, iU, spec = req
            for j in range(n_folds):
                sub = subset((j, False))
                if sub is None:
                    out += zeros(shapes[:3])
                    continue
                out += _blocks.stats_block(
                    sub[0], sub[1], arrays[iU], None, (0.0,), spec, n_labels, codes, True
                )
        elif kind == "grad":
            _, k, iU, spec, iWWt, iWt, iW = req
            sub = subset((k, True))
            if sub is None:
                out += zeros(shapes[:2])
            else:
                WWt = None if iWWt is None else arrays[iWWt]
                out += _blocks.grad_block(
                    sub[0], sub[1], arrays[iU], spec, WWt, arrays[iWt], n_labels, codes
                )
            if iW is not None:
                out.append(
                    _score_sums(
                        subset((k, False)), arrays[iU], spec, [arrays[iW]], parsed, top_k, codes
                    )[0]
                )
        else:  # score
            _, k, iU, spec, iWs = req
            out += _score_sums(
                subset((k, False)),
                arrays[iU],
                spec,
                [arrays[i] for i in iWs],
                parsed,
                top_k,
                codes,
            )
    return tuple(out)


def _score_sums(sub, U, spec, Ws, parsed, top_k, codes):
    if sub is None:
        return [np.zeros(len(parsed)) for _ in Ws]
    Xs, As = sub
    Phi = _blocks.features_block(Xs, U, spec)
    res = []
    for W in Ws:
        top = _blocks.topk_from_phi(Phi, W, top_k)[:, :top_k]
        res.append(metrics.metric_sums_block(As, top, parsed, codes=codes))
    return res
