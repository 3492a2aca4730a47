"""GreedyLowRankCV on MovieLens 100K (L1 loss, rank 10): the setting chosen by 5-fold CV
over the observed entries of ``uN.base`` (read from a Zarr store, fold views block by block)
and its test MAE on ``uN.test``, against ``GreedyLowRank``'s defaults and against the chosen
setting refitted with the whole rank budget (``select_iter=False``) (issue 12).  Writes
``benchmarks/results/glrl_cv.json``.

Run: ``OMP_NUM_THREADS=1 nice -n 10 python benchmarks/glrl_cv.py [--folds u1,u2] [--data DIR]``
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from ooc_lowrank.glrl import GreedyLowRank, GreedyLowRankCV
from ooc_lowrank.io.ratings import convert_movielens

HERE = Path(__file__).resolve().parent
SHAPE = (943, 1682)
METRICS = ("mae", "rmse")


def run_fold(d, fold, n_splits, work):
    """Defaults vs GreedyLowRankCV (and its setting at the whole rank budget) on one fold."""
    train, test = str(work / f"{fold}.base.zarr"), str(work / f"{fold}.test.zarr")
    convert_movielens(str(d / f"{fold}.base.gz"), train, shape=SHAPE, overwrite=True)
    convert_movielens(str(d / f"{fold}.test.gz"), test, shape=SHAPE, overwrite=True)

    t0 = time.perf_counter()
    dflt = GreedyLowRank(loss="l1", n_components=10, random_state=0).fit(train)
    t_dflt = time.perf_counter() - t0

    t0 = time.perf_counter()
    cv = GreedyLowRankCV(loss="l1", n_components=10, cv=n_splits, random_state=0).fit(train)
    t_cv = time.perf_counter() - t0
    print(fold)
    print(cv.format_cv_table())
    no_it = {k: v for k, v in cv.best_params_.items() if k != "max_iter"}
    full = GreedyLowRank(**cv.base_params(), **no_it).fit(train)
    res = cv.cv_results_
    out = {
        "defaults": {
            "test": dflt.evaluate(test, METRICS),
            "seconds": t_dflt,
            "n_components": dflt.n_components_,
        },
        "cv": {
            "grid": res["params"],
            "mean_test_score": res["mean_test_score"].tolist(),
            "std_test_score": res["std_test_score"].tolist(),
            "median_best_iter": np.median(
                [res[f"split{k}_best_iter"] for k in range(n_splits)], axis=0
            ).tolist(),
            "best_params": cv.best_params_,
            "best_score_mae": cv.best_score_,
            "test": cv.evaluate(test, METRICS),
            "n_components": cv.best_estimator_.n_components_,
            "seconds": t_cv,
            "cv_seconds": cv.cv_time_,
            "refit_seconds": cv.refit_time_,
        },
        "cv_setting_whole_rank_budget": {
            "test": full.evaluate(test, METRICS),
            "n_components": full.n_components_,
        },
    }
    print({k: v["test"]["mae"] for k, v in out.items()}, cv.best_params_, f"{t_cv:.1f} s")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    default = os.environ.get("OOC_LOWRANK_DATA", str(HERE.parent.parent / "shared" / "data"))
    ap.add_argument("--data", default=default)
    ap.add_argument("--folds", default="u1,u2,u3,u4,u5")
    ap.add_argument("--cv", type=int, default=5)
    ap.add_argument("--out", default=str(HERE / "results" / "glrl_cv.json"))
    a = ap.parse_args()
    d = Path(a.data) / "movielens-100k"
    folds = [f.strip() for f in a.folds.split(",") if f.strip()]
    work = Path(tempfile.mkdtemp(prefix="glrl_cv_"))
    try:
        per = {f: run_fold(d, f, a.cv, work) for f in folds}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    summary = {
        key: float(np.mean([per[f][key]["test"]["mae"] for f in folds]))
        for key in ("defaults", "cv", "cv_setting_whole_rank_budget")
    }
    out = {
        "protocol": __doc__,
        "n_splits": a.cv,
        "mean_test_mae": summary,
        "folds": per,
    }
    print("mean test MAE over", folds, summary)
    Path(a.out).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
