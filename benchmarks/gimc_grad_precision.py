"""Precision of GIMC's large-state gradient pass (float32 accumulators, issue 25).

On the Delicious-large topic model of ``bench_scale.py delicious`` (sizes are arguments), fits
GIMC ``features="both"`` for ``--iters`` iterations, then computes the gradient pass at the
fit's ``U`` and ``W`` twice with the block functions the fit uses: in float32 (the fit's
large-state mode) and in float64 (the same inputs widened), and reports the relative error of
the float32 gradient, its cosine with the float64 one, and the error per feature part (LFF,
LNYS).  A noisy gradient makes Armijo reject long steps: a suspect for the full Delicious
fit's 4.6 line-search trials per iteration (``results/gimc_step_rule.json``).

The cause (found with this script): the landmark norms ``||u_r||^2`` of the Nystrom part were
summed in float32 over the d rows of ``U`` in every gradient block (off 1e-5 relatively at
d = 30,000) while the statistics pass used float64 sums, so the LNYS column sums ``1^T T``,
which cancel about 70-fold, came out wrong.  ``--norms float32`` reruns the old sums (the
code before the fix, emulated by replacing ``_blocks.col_sq``) for a before/after in one
file: each run writes its record under ``runs[<norms>]`` of ``--out`` and keeps the others.
The fit runs in the large-state mode at any size (``core.LARGE_STATE_BYTES = 0``), so small
sizes test the full shape's code.

    python benchmarks/gimc_grad_precision.py --iters 8                 # tenth size, ~10 min busy
    python benchmarks/gimc_grad_precision.py --iters 8 --norms float32 # the same, before the fix
    python benchmarks/gimc_grad_precision.py --rows 196606 --features 782585 --labels 205443 \
        --topics 2000 --iters 5                                         # full size, ~25 min
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

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
    p.add_argument("--norms", choices=("float64", "float32"), default="float64",
                   help="float32: the landmark norms as before the fix (per block, float32)")
    p.add_argument("--out", default=os.path.join(HERE, "results", "gimc_grad_precision.json"))
    a = p.parse_args(argv)
    from ooc_lowrank.gimc import _blocks, core

    saved = core.LARGE_STATE_BYTES, _blocks.col_sq  # restored: a test runs main() in-process
    try:
        core.LARGE_STATE_BYTES = 0  # the large-state mode at any size (the full shape's mode)
        if a.norms == "float32":  # the code before the fix: a float32 sum over d rows
            _blocks.col_sq = lambda U, dtype=None: np.einsum("ij,ij->j", U, U).astype(
                U.dtype if dtype is None else dtype)  # fmt: skip
        return _run(a)
    finally:
        core.LARGE_STATE_BYTES, _blocks.col_sq = saved


def _run(a):
    import scipy.sparse as sp

    from benchmarks.bench_scale import delicious_chunk, gimc_fit_result
    from ooc_lowrank import engine
    from ooc_lowrank.gimc import GIMC, _blocks, core

    rng = np.random.default_rng([0, 0, 0])
    X, Y = delicious_chunk(rng, a.rows, a.features, a.labels, 300, 75.0, a.topics, 0)
    X, Y = sp.csr_matrix(X), sp.csr_matrix(Y)
    est = GIMC(n_features_map=a.m, features="both", max_iter=a.iters, random_state=0)
    t_fit = time.perf_counter()
    with gimc_fit_result() as got:
        est.fit(X, Y)
    t_fit = time.perf_counter() - t_fit
    res, spec, L = got["result"], est.spec_, a.labels
    U32 = np.ascontiguousarray(res.U, dtype=np.float32)
    WT32 = np.ascontiguousarray(np.asarray(res.W, dtype=np.float32).T)  # (L, D)

    cpu = []

    def grad(dt):
        """The fit's gradient pass (``core.grad_reduction``) at ``U``, ``W`` in ``dt``."""
        Xd = engine.as_blocked(sp.csr_matrix(X, dtype=dt))
        Ad = engine.as_blocked(sp.csr_matrix(Y, dtype=dt))
        U, WT = U32.astype(dt), WT32.astype(dt)
        c = time.process_time()
        (g,) = engine.compute(core.grad_reduction(Xd, Ad, U, WT.T, spec, L, False, big=True))
        g = _blocks.finalize_grad(g[0], g[1], U, spec, inplace=True)
        cpu.append(time.process_time() - c)
        return np.asarray(g, np.float64)

    g64 = grad(np.float64)
    cpu.clear()
    g32 = grad(np.float32)
    g32 = grad(np.float32)  # the second pass: compiled, pages touched
    e, parts = g32 - g64, {}
    for part in spec.parts:
        cols = slice(part.start, part.stop)
        parts[part.kind] = {
            "relative_error": float(np.linalg.norm(e[:, cols]) / np.linalg.norm(g64[:, cols])),
            "share_of_gradient_norm2": float(np.sum(g64[:, cols] ** 2) / np.sum(g64**2)),
        }
    run = {"args": vars(a), "trials": res.trials,
           "trials_per_iteration": sum(res.trials) / max(len(res.trials), 1),
           "objective": res.objective, "fit_seconds_busy": t_fit,
           "grad_pass_cpu_seconds": cpu,
           "relative_error": float(np.linalg.norm(e) / np.linalg.norm(g64)),
           "cosine": float(np.sum(g32 * g64) / np.linalg.norm(g32) / np.linalg.norm(g64)),
           "parts": parts}  # fmt: skip
    print(json.dumps(run, indent=1))
    out = {}
    if os.path.exists(a.out):
        with open(a.out) as fh:
            out = json.load(fh)
    if "runs" not in out:  # a file of before the fix: kept under a key of its own
        out = {"before_fix_first_run": out} if out else {}
    out = {"benchmark": "gimc_grad_precision", "note": NOTE, **out}
    out.setdefault("runs", {})[a.norms] = run
    with open(a.out, "w") as fh:
        json.dump(out, fh, indent=1)
    return run


NOTE = ("runs.float64: the fit and its float32 gradient pass with the landmark norms summed in "
        "float64 once per pass (the fix); runs.float32: the same with the float32 per-block "
        "sums of before the fix (emulated). relative_error, cosine: the float32 gradient "
        "pass against the same pass in float64 at the fit's U, W. grad_pass_cpu_seconds: "
        "process CPU of the float32 pass, twice (first call pays compilation), on a busy "
        "machine (about 7 processes on 2 cores); the two runs ran at different times, so their "
        "CPU seconds are no same-run ratio (the fix's own cost: one float64 sum over the "
        "Nystrom columns of U per pass, 0.05 s CPU at the tenth shape, instead of a float32 "
        "einsum over all of U in every block, 0.02 s each). before_fix_first_run: the record "
        "of the session that found the error (3 iterations).")


if __name__ == "__main__":
    main()
