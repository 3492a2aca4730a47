"""KernelMaxide-n's rank-k Nystrom features in float32 (issue 24, ``_blocks.F32_TOL``) against
float64, the same fit otherwise: test ranking loss (omega, split and mask of repetition 0 of SPEC
4.6), the validation ranking loss on held-out observed labels of the *training* rows (a quarter
of the labelled rows, ``split_observed(..., by="rows")``), iterations, the coefficients'
relative difference and the fit's process CPU seconds (minimum of ``--repeat``), with
``Maxide()``'s beside it (the ratio is what issue 24 asks about).

    python benchmarks/kernelmaxide_f32_features.py --datasets arts business health \
        --omegas 10 20 40 --out benchmarks/results/kernelmaxide_f32_features.json
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

from ooc_lowrank import datasets, metrics  # noqa: E402
from ooc_lowrank.kernelmaxide import KernelMaxide, Maxide, _blocks, mask_labels, split_rows  # noqa: E402
from ooc_lowrank.kernelmaxide.cv import split_observed  # noqa: E402


def cpu_fit(make, X, Yobs, repeat):
    """``(model, min CPU seconds)`` of ``repeat`` fits of ``make()``."""
    best, est = np.inf, None
    for _ in range(repeat):
        c = time.process_time()
        est = make().fit(X, Yobs)
        best = min(best, time.process_time() - c)
    return est, best


def one(X, Y, omega, landmarks, repeat, tol):
    """Both precisions (``tol``: ``F32_TOL`` in force; -1 turns float32 off) on one setting."""
    train = split_rows(X.shape[0], 0.1, 0)
    Yobs = mask_labels(Y, omega, train=train, random_state=0)
    Yfit, Yval = split_observed(Yobs, 0.25, 0, by="rows")
    saved, out = _blocks.F32_TOL, {}
    try:
        for name, t in (("float32", tol), ("float64", -1.0)):
            _blocks.F32_TOL = t

            def make():
                return KernelMaxide(n_features_map=landmarks, random_state=0)

            est, cpu = cpu_fit(make, X, Yobs, repeat)
            val = make().fit(X, Yfit).observed_ranking_loss(X, Yval)
            S = est.decision_function(X[~train])
            out[name] = {
                "test_ranking_loss": float(metrics.ranking_loss(Y[~train], S)),
                "validation_ranking_loss": float(val),
                "n_iter": int(est.n_iter_),
                "cpu_seconds": cpu,
                "coef": est.coef_,
            }
    finally:
        _blocks.F32_TOL = saved
    a, b = out["float32"].pop("coef"), out["float64"].pop("coef")
    out["coef_relative_difference"] = float(np.linalg.norm(a - b) / np.linalg.norm(b))
    _, mx = cpu_fit(Maxide, X, Yobs, repeat)
    out["maxide_cpu_seconds"] = mx
    out["ratio_cpu_float32"] = out["float32"]["cpu_seconds"] / mx
    out["ratio_cpu_float64"] = out["float64"]["cpu_seconds"] / mx
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--datasets", nargs="+", default=["arts"])
    ap.add_argument("--omegas", nargs="+", type=int, default=[20])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--rows", type=int, help="first rows only (a smoke run)")
    ap.add_argument("--landmarks", type=int, default=1000)
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    out = {"args": vars(a), "F32_TOL": _blocks.F32_TOL}
    for name in a.datasets:
        X, Y = datasets.load_yahoo(name)
        if a.rows:
            X, Y = X[: a.rows], Y[: a.rows]
        for omega in a.omegas:
            res = one(X, Y, omega, min(a.landmarks, X.shape[0]), a.repeat, _blocks.F32_TOL)
            out[f"{name}_omega{omega}"] = res
            print(name, omega, json.dumps(res), flush=True)
            with open(a.out, "w") as f:
                json.dump(out, f, indent=1)
    return out


if __name__ == "__main__":
    main()
