"""Exact against L-BFGS refits of the square loss (``GreedyLowRank(refit_solver=...)``).

MovieLens 100K u1..u5, square loss, rank 10, the library's defaults otherwise (bias start,
power_iter 20): test RMSE / MAE, passes over the data by kind, and fit seconds, for the full
(R1MP) and economic (EGLRL) refits solved exactly (one pass per step) or by at most
``lbfgs_iter = 5`` L-BFGS-B iterations (SPEC GLRL-6/7).

    python benchmarks/glrl_refit_solver.py --out benchmarks/results/glrl_refit_solver.json
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

from ooc_lowrank.datasets import load_movielens
from ooc_lowrank.glrl import GreedyLowRank

DATA = Path(os.environ.get("OOC_LOWRANK_DATA", Path(__file__).resolve().parents[2] / "shared/data"))


def run(folds=(1, 2, 3, 4, 5), rank=10, data=DATA):
    folder = Path(data) / "movielens-100k"
    if not (folder / "u1.base.gz").exists():
        raise SystemExit(f"MovieLens 100K is missing: {folder}/u1.base.gz (set OOC_LOWRANK_DATA)")
    rows = []
    for fold in folds:
        tr = load_movielens(folder / f"u{fold}.base.gz")
        te = load_movielens(folder / f"u{fold}.test.gz")
        for refit in ("full", "economic"):
            for solver in ("lbfgs", "exact"):
                t0 = time.perf_counter()
                est = GreedyLowRank(
                    loss="square", n_components=rank, refit=refit, refit_solver=solver, random_state=0
                ).fit(tr, shape=(943, 1682))
                fit_s = time.perf_counter() - t0
                p = est.predict(te[0], te[1])
                rows.append(
                    {
                        "fold": fold,
                        "refit": refit,
                        "solver": solver,
                        "rmse": float(np.sqrt(np.mean((p - te[2]) ** 2))),
                        "mae": float(np.mean(np.abs(p - te[2]))),
                        "n_passes": int(est.n_passes_),
                        "passes_by_kind": dict(est.n_passes_by_kind_),
                        "n_iter": int(est.n_iter_),
                        "fit_s": fit_s,
                    }
                )
                print(rows[-1], flush=True)
    summary = {}
    for refit in ("full", "economic"):
        for solver in ("lbfgs", "exact"):
            sel = [r for r in rows if r["refit"] == refit and r["solver"] == solver]
            summary[f"{refit}/{solver}"] = {
                k: float(np.mean([r[k] for r in sel])) for k in ("rmse", "mae", "n_passes", "fit_s")
            }
    return {"folds": list(folds), "rank": rank, "runs": rows, "mean": summary}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--folds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    ap.add_argument("--rank", type=int, default=10)
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    res = run(tuple(a.folds), a.rank)
    print(json.dumps(res["mean"], indent=1))
    if a.out:
        Path(a.out).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
