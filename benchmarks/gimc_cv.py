"""GIMCCV on Bibtex: the whole grid in shared passes against the same grid as separate fits.

``GIMCCV`` cross-validates gamma scale x alpha x iteration count on the training rows, refits
the best setting on all of them and is evaluated once on the test set.  The peer, measured in
the same run, is what ``benchmarks/bibtex_cv.py`` does: one ``GIMC.fit`` per (setting, fold)
with ``eval_set`` = the held-out fold scored after every iteration (the cheapest way to choose
the iteration count with separate fits).  Separate fits are run for ``--baseline-settings``
settings of the grid (all folds each); the check that they give the same validation scores as
``cv_results_`` is part of the output, and their cost per setting is multiplied by the grid
size for the whole-grid figure (written as such in the results).

Passes are counted in reads of the whole training set: a pass of a separate fit reads the
(K-1)/K training rows of its fold, an evaluation the 1/K validation rows.

    nice -n 10 python benchmarks/gimc_cv.py --folds 2 --m 500 --gamma-scales 0.0625 0.125 0.25 \\
        --alphas 0.3 1 3 10 --max-iter 40 --json benchmarks/results/gimc_cv.json

``--tiny`` runs the same body on a small synthetic problem (used by the tests).
Data: ``$OOC_LOWRANK_DATA/bibtex``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
METRICS = ("p@1", "p@3", "p@5")


def _load_bibtex(data_dir, workdir):
    sys.path.insert(0, str(REPO / "examples"))
    import bibtex_end_to_end as be

    from ooc_lowrank.storage import open_dataset

    src = be.data_dir(data_dir) / "bibtex"
    if not (src / "bibtex-train.arff.gz").exists():
        raise SystemExit(f"Bibtex not found in {src}; set OOC_LOWRANK_DATA")
    stores = be.convert(src, Path(workdir))
    tr, te = open_dataset(stores["train"]), open_dataset(stores["test"])
    return tr["X"].read(), tr["Y"].read(), te


def _tiny():
    import scipy.sparse as sp

    rng = np.random.default_rng(0)
    X = rng.standard_normal((300, 8)).astype(np.float32)
    S = np.cos(X @ rng.standard_normal((8, 12))) + 0.3 * rng.standard_normal((300, 12))
    Y = sp.csr_matrix((S > 0.6).astype(np.float32))
    return X[:200], Y[:200], (X[200:], Y[200:])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", default=None)
    p.add_argument("--workdir", default=None)
    p.add_argument("--folds", type=int, default=5)
    p.add_argument("--m", type=int, default=500)
    p.add_argument("--gamma-scales", type=float, nargs="+", default=[0.0625, 0.125, 0.25])
    p.add_argument("--alphas", type=float, nargs="+", default=[0.3, 1.0, 3.0, 10.0])
    p.add_argument("--max-iter", type=int, default=40)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--baseline-settings", type=int, default=1)
    p.add_argument("--tiny", action="store_true")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)

    from ooc_lowrank.gimc import GIMC, GIMCCV
    from ooc_lowrank.gimc.cv import kfold_ids

    if args.tiny:
        X, Y, test = _tiny()
    else:
        X, Y, test = _load_bibtex(args.data_dir, args.workdir or tempfile.mkdtemp(prefix="gcv-"))
    K, n = args.folds, X.shape[0]
    out = {
        "benchmark": "gimc_cv",
        "command": "python benchmarks/gimc_cv.py " + " ".join(argv or sys.argv[1:]),
        "data": "synthetic (tiny)" if args.tiny else "Bibtex (Mulan split), float32 CSR",
        "n_train": n,
        "folds": K,
        "grid": {
            "gamma_scales": args.gamma_scales,
            "alphas": args.alphas,
            "iterations": f"0..{args.max_iter}",
        },
        "load_average_start": os.getloadavg(),
    }

    def save():
        if args.json:
            Path(args.json).write_text(json.dumps(out, indent=1))

    def log(msg):
        print(msg, flush=True)

    # ---- GIMCCV: the whole grid
    cv = GIMCCV(
        n_features_map=args.m,
        gamma_scales=args.gamma_scales,
        alphas=args.alphas,
        max_iter=args.max_iter,
        cv=K,
        scoring="p@1",
        refit=False,
        random_state=args.seed,
    )
    c0 = time.process_time()
    cv.fit(X, Y)
    cv_cpu = time.process_time() - c0  # CPU seconds of all threads (the CV only)
    # the refit GIMCCV(refit=True) would do (tests/test_gimc_cv.py: the same model), timed apart
    p = cv.best_params_
    t0, c0 = time.perf_counter(), time.process_time()
    best = GIMC(
        n_features_map=args.m,
        gamma=p["gamma"],
        alpha=p["alpha"],
        max_iter=p["max_iter"],
        tol=0.0,
        random_state=args.seed,
    ).fit(X, Y)
    refit = (time.perf_counter() - t0, time.process_time() - c0)
    res = cv.cv_results_
    top = np.argsort(res["rank_test_score"], kind="stable")[:10]
    te = best.evaluate(test, list(METRICS)) if not args.tiny else best.evaluate(test[0], Y=test[1])
    out["gimccv"] = {
        "n_fits": len(args.gamma_scales) * len(args.alphas) * K,
        "passes": cv.n_passes_,
        "batches": cv.n_batches_,
        "seconds": round(cv.cv_time_, 1),
        "cpu_seconds": round(cv_cpu, 1),
        "best_params": cv.best_params_,
        "best_cv_p@1": round(100 * cv.best_score_, 2),
        "top10": [
            {**res["params"][i], "cv_p@1": round(100 * res["mean_test_score"][i], 2)} for i in top
        ],
        "median_gamma": cv.median_gamma_,
        "refit_seconds": round(refit[0], 1),
        "refit_cpu_seconds": round(refit[1], 1),
        "refit_passes": best.n_passes_,
        "test": {k: round(100 * v, 2) for k, v in te.items()},
    }
    log(f"GIMCCV: {json.dumps(out['gimccv'], default=float)}")
    save()

    # ---- separate fits (bibtex_cv.py's way) for the first settings of the grid
    fold = kfold_ids(n, K, args.seed)
    settings = [(s, a) for s in args.gamma_scales for a in args.alphas][: args.baseline_settings]
    runs, diffs = [], []
    for s, a in settings:
        t0, c0, passes = time.perf_counter(), time.process_time(), 0.0
        for k in range(K):
            tr, va = np.flatnonzero(fold != k), np.flatnonzero(fold == k)
            g = GIMC(
                n_features_map=args.m,
                gamma=s * cv.median_gamma_,
                alpha=a,
                max_iter=args.max_iter,
                tol=0.0,
                random_state=args.seed,
            ).fit(X[tr], Y[tr], eval_set=(X[va], Y[va]), eval_every=1, eval_metrics=["p@1"])
            passes += g.n_passes_ * tr.size / n + len(g.eval_history_) * va.size / n
            mask = (res["param_gamma_scale"] == s) & (res["param_alpha"] == a)
            for i in np.flatnonzero(mask):
                it = int(res["param_max_iter"][i])
                diffs.append(abs(g.eval_history_[it]["p@1"] - res[f"split{k}_test_score"][i]))
        runs.append(
            {
                "gamma_scale": s,
                "alpha": a,
                "seconds": time.perf_counter() - t0,
                "cpu_seconds": time.process_time() - c0,
                "passes": passes,
            }
        )
        log(f"separate fits gamma x{s} alpha {a}: {runs[-1]}")
    n_set = len(args.gamma_scales) * len(args.alphas)
    sec = float(np.mean([r["seconds"] for r in runs])) * n_set
    pas = float(np.mean([r["passes"] for r in runs])) * n_set
    cpu = float(np.mean([r["cpu_seconds"] for r in runs])) * n_set
    out["separate_fits"] = {
        "measured_settings": runs,
        "max_abs_diff_vs_cv_results": float(max(diffs)),
        "whole_grid_extrapolated": {
            "seconds": round(sec, 1),
            "cpu_seconds": round(cpu, 1),
            "passes": round(pas, 1),
        },
        "note": (
            f"{len(runs)} of {n_set} settings fitted separately (all {K} folds each, eval_set "
            "scored after every iteration); the whole-grid cost is their mean times the grid "
            "size; passes in reads of the whole training set"
        ),
    }
    out["ratio_separate_over_gimccv"] = {
        "passes": round(pas / cv.n_passes_, 2),
        "seconds": round(sec / cv.cv_time_, 2),
        "cpu_seconds": round(cpu / cv_cpu, 2),
    }
    out["load_average_end"] = os.getloadavg()
    log(f"ratios: {out['ratio_separate_over_gimccv']}")
    save()
    return out


if __name__ == "__main__":
    main()
