"""Which hold-out picks KernelMaxide-n's ``gamma`` and ``lam`` (or Maxide's ``k`` and ``lam``,
``--method maxide``) best (issue 9, selector noise).

For each yahoo set, omega and repetition of the SPEC 4.6 protocol (90/10 instance split, masked
training labels, test rows in ``X`` with no label), every setting of the grid is

* scored on two hold-outs of the *observed training labels* (``split_observed``, a quarter):
  ``entries`` (random observed entries, rows keep their other labels) and ``rows`` (whole rows'
  observed labels, as the test rows have none), each by three scores: the ranking loss over
  each row's held-out (+, -) pairs (the library's), ``_auc`` 1 - AUC per label over its
  held-out entries, ``_sq`` the squared error at the held-out entries;
* fitted on all observed labels and scored on the test rows (ranking loss): only to judge the
  selectors afterwards, never to choose anything in the library.

The verdict per selector is the test ranking loss of the setting it picks, against the best of
the grid on test (regret).  Results: every score of every cell, one JSON.

    python benchmarks/kernelmaxide_selection.py arts business health --reps 2 --out sel.json
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
from ooc_lowrank.gimc.features import median_gamma, sample_rows  # noqa: E402
from ooc_lowrank.kernelmaxide import KernelMaxide, Maxide, mask_labels, split_rows  # noqa: E402
from ooc_lowrank.kernelmaxide.cv import split_observed  # noqa: E402


def label_auc_loss(S, Yval):
    """1 - AUC per label over its held-out (+, -) entries (ties count half), averaged over the
    labels that hold out both classes: many more pairs than a row's few held-out labels."""
    Yc = Yval.tocsc()
    losses = []
    for j in range(Yc.shape[1]):
        rows, vals = Yc.indices[Yc.indptr[j] : Yc.indptr[j + 1]], Yc.data[Yc.indptr[j] : Yc.indptr[j + 1]]
        pos, neg = S[rows[vals > 0], j], S[rows[vals < 0], j]
        if len(pos) and len(neg):
            d = pos[:, None] - neg[None, :]
            losses.append(float(np.mean((d < 0) + 0.5 * (d == 0))))
    return float(np.mean(losses)) if losses else float("nan")


SCORES = ("", "_auc", "_sq")


def run_cell(name, X, Y, omega, rep, a):
    n = X.shape[0]
    train = split_rows(n, 0.1, rep)
    Yobs = mask_labels(Y, omega, train=train, random_state=rep)
    test = ~train
    splits = {by: split_observed(Yobs, 0.25, rep, by=by) for by in a.holdouts}
    out = {"dataset": name, "omega": omega, "rep": rep, "method": a.method, "settings": []}
    if a.method == "kernelmaxide":
        g0 = out["gamma_median"] = median_gamma(sample_rows(X, 1000, np.random.default_rng(rep)))
        grid = [{"gamma_scale": s, "lam": lam} for s in a.gamma_scales for lam in a.lams]

        def make(gamma_scale, lam):
            return KernelMaxide(n_features_map=a.landmarks, gamma=g0 * gamma_scale, alpha=lam,
                                max_iter=a.max_iter, random_state=rep)  # fmt: skip
    else:
        grid = [{"k": k, "lam": lam} for k in a.maxide_k for lam in a.maxide_lams]

        def make(k, lam):
            return Maxide(n_components=k or None, alpha=lam, max_iter=a.max_iter, random_state=rep)

    t0 = time.perf_counter()
    for setting in grid:
        row = dict(setting)
        for by, (Yfit, Yval) in splits.items():
            est = make(**setting).fit(X, Yfit)
            S = est.decision_function(X)
            row[f"holdout_{by}"] = float(est.observed_ranking_loss(X, Yval))
            row[f"holdout_{by}_auc"] = label_auc_loss(S, Yval)
            row[f"holdout_{by}_sq"] = float(np.mean((S[Yval.nonzero()] - Yval.data) ** 2))
        est = make(**setting).fit(X, Yobs)
        row["test"] = float(metrics.ranking_loss(Y[test], est.decision_function(X[test])))
        out["settings"].append(row)
    out["seconds"] = time.perf_counter() - t0
    best = min(r["test"] for r in out["settings"])
    out["best_test"] = best
    for by in [h + sc for h in a.holdouts for sc in SCORES]:
        pick = min(out["settings"], key=lambda r, by=by: r[f"holdout_{by}"])
        out[f"pick_{by}"] = {**{k: pick[k] for k in grid[0]}, "test": pick["test"],
                             "regret": pick["test"] - best}  # fmt: skip
    print(name, omega, rep, {by: round(out[f"pick_{by}"]["test"], 4) for by in
          [h + sc for h in a.holdouts for sc in SCORES]}, "best", round(best, 4),
          f"{out['seconds']:.0f}s", flush=True)  # fmt: skip
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("datasets", nargs="+")
    ap.add_argument("--omega", type=float, nargs="+", default=[10, 20, 30, 40])
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--first-rep", type=int, default=0)
    ap.add_argument("--landmarks", type=int, default=1000)
    ap.add_argument("--max-iter", type=int, default=100)
    ap.add_argument("--gamma-scales", type=float, nargs="+", default=[1.0, 2.0, 4.0])
    ap.add_argument("--lams", type=float, nargs="+", default=[0.5, 2.0, 8.0, 32.0])
    ap.add_argument("--method", choices=["kernelmaxide", "maxide"], default="kernelmaxide")
    ap.add_argument("--maxide-lams", type=float, nargs="+", default=[2.0**k for k in range(-2, 6)])
    ap.add_argument("--maxide-k", type=int, nargs="+", default=[100, 0], help="0 = all")
    ap.add_argument("--holdouts", nargs="+", default=["entries", "rows"])
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    cells = []
    for name in a.datasets:
        X, Y = datasets.load_yahoo(name)
        for omega in a.omega:
            for rep in range(a.first_rep, a.first_rep + a.reps):
                cells.append(run_cell(name, X, Y, omega, rep, a))
                with open(a.out, "w") as f:
                    json.dump({"settings": vars(a), "cells": cells}, f, indent=1)
    for by in [h + sc for h in a.holdouts for sc in SCORES]:
        reg = [c[f"pick_{by}"]["regret"] for c in cells]
        print(f"{by}: mean regret {np.mean(reg):.4f}, max {np.max(reg):.4f}, "
              f"mean test {np.mean([c[f'pick_{by}']['test'] for c in cells]):.4f}")


if __name__ == "__main__":
    main()
