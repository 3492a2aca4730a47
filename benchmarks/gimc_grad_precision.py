"""Precision of GIMC's large-state gradient pass (float32 accumulators, issue 25).

On the Delicious-large topic model of ``bench_scale.py delicious`` (sizes are arguments), fits
GIMC ``features="both"`` for ``--iters`` iterations, then computes the gradient pass at the
fit's ``U`` and ``W`` twice with the block functions the fit uses: in float32 (the fit's
large-state mode) and in float64 (the same inputs widened), and reports the relative error of
the float32 gradient, its cosine with the float64 one, and the error per feature part (LFF,
LNYS).  A noisy gradient makes Armijo reject long steps: a suspect for the full Delicious
fit's 4.6 line-search trials per iteration (``results/gimc_step_rule.json``).

    python benchmarks/gimc_grad_precision.py                           # tenth size, ~5 min busy
    python benchmarks/gimc_grad_precision.py --rows 196606 --features 782585 --labels 205443 \
        --topics 2000 --iters 5                                         # full size, ~25 min
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, default=20_000)
    p.add_argument("--features", type=int, default=78_259)
    p.add_argument("--labels", type=int, default=20_544)
    p.add_argument("--topics", type=int, default=200)
    p.add_argument("--m", type=int, default=500)
    p.add_argument("--iters", type=int, default=3)
    p.add_argument("--out", default=os.path.join(HERE, "results", "gimc_grad_precision.json"))
    a = p.parse_args(argv)
    import scipy.sparse as sp

    from benchmarks.bench_scale import delicious_chunk, gimc_fit_result
    from ooc_lowrank import engine
    from ooc_lowrank.gimc import GIMC, _blocks

    rng = np.random.default_rng([0, 0, 0])
    X, Y = delicious_chunk(rng, a.rows, a.features, a.labels, 300, 75.0, a.topics, 0)
    X, Y = sp.csr_matrix(X), sp.csr_matrix(Y)
    est = GIMC(n_features_map=a.m, features="both", max_iter=a.iters, random_state=0)
    with gimc_fit_result() as got:
        est.fit(X, Y)
    res, spec, L = got["result"], est.spec_, a.labels
    U32 = np.ascontiguousarray(res.U, dtype=np.float32)
    WT32 = np.ascontiguousarray(np.asarray(res.W, dtype=np.float32).T)  # (L, D)

    def grad(dt):
        Xd = engine.as_blocked(sp.csr_matrix(X, dtype=dt))
        Ad = engine.as_blocked(sp.csr_matrix(Y, dtype=dt))
        U, WT = U32.astype(dt), WT32.astype(dt)
        WWt = (WT.T @ WT).astype(dt)
        fn = _blocks.grad_block_into32 if dt == np.float32 else _blocks.grad_block_into
        (g,) = engine.compute(engine.reduce_blocks(
            fn, Xd, Ad, args=(U, spec, WWt, WT, L, False, None, None), offset=True,
            shapes=_blocks.grad_shapes(spec, a.features)))  # fmt: skip
        return np.asarray(_blocks.finalize_grad(g[0], g[1], U, spec, inplace=True), np.float64)

    g32, g64 = grad(np.float32), grad(np.float64)
    e, parts = g32 - g64, {}
    for part in spec.parts:
        cols = slice(part.start, part.stop)
        parts[part.kind] = {
            "relative_error": float(np.linalg.norm(e[:, cols]) / np.linalg.norm(g64[:, cols])),
            "share_of_gradient_norm2": float(np.sum(g64[:, cols] ** 2) / np.sum(g64**2)),
        }
    out = {"benchmark": "gimc_grad_precision", "args": vars(a), "trials": res.trials,
           "objective": res.objective,
           "relative_error": float(np.linalg.norm(e) / np.linalg.norm(g64)),
           "cosine": float(np.sum(g32 * g64) / np.linalg.norm(g32) / np.linalg.norm(g64)),
           "parts": parts}  # fmt: skip
    print(json.dumps(out, indent=1))
    with open(a.out, "w") as fh:
        json.dump(out, fh, indent=1)
    return out


if __name__ == "__main__":
    main()
