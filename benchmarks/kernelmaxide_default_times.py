"""Per-fit time of the defaults (issues 24 and 28): ``KernelMaxide()`` (KernelMaxide-n) vs
``Maxide()``, back to back in one process, repeated; the former defaults (SPEC KM-6 span form,
``lam=1``; Maxide on every direction, ``lam=1``) and the built-in selection
(``KernelMaxideCV()``, ``MaxideCV()``) once each.  Records wall and process CPU seconds, the
ratio KernelMaxide-n / Maxide per repetition, iterations, whether the ``1e-5`` stop fired and
the test ranking loss (omega, split and mask of repetition 0 of SPEC 4.6).

On a shared machine compare the ratios, not the seconds.

    python benchmarks/kernelmaxide_default_times.py --datasets arts business health --repeat 5 \
        --out benchmarks/results/kernelmaxide_default_times.json
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
from ooc_lowrank.kernelmaxide import (  # noqa: E402
    KernelMaxide,
    KernelMaxideCV,
    Maxide,
    MaxideCV,
    mask_labels,
    split_rows,
)


def timed(est, X, Yobs, Y, test):
    c, w = time.process_time(), time.perf_counter()
    est.fit(X, Yobs)
    out = {"seconds": time.perf_counter() - w, "cpu_seconds": time.process_time() - c}
    best = getattr(est, "best_estimator_", est)
    out.update(n_iter=int(getattr(best, "n_iter_", -1)), converged=bool(getattr(best, "converged_", False)),
               test_ranking_loss=float(metrics.ranking_loss(Y[test], est.decision_function(X[test]))))  # fmt: skip
    if hasattr(est, "alpha_"):
        out["alpha"] = float(est.alpha_)  # Maxide(alpha="auto"): the weight it chose
    if hasattr(est, "best_params_"):
        out["best_params"] = {k: float(v) if v is not None else None for k, v in est.best_params_.items()}
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--datasets", nargs="+", default=["arts"])
    ap.add_argument("--omega", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--rows", type=int, help="first rows only (a smoke run)")
    ap.add_argument("--landmarks", type=int, default=1000)
    ap.add_argument("--no-cv", action="store_true", help="skip the built-in selection fits")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    out = {"args": vars(a)}
    for name in a.datasets:
        X, Y = datasets.load_yahoo(name)
        if a.rows:
            X, Y = X[: a.rows], Y[: a.rows]
        train = split_rows(X.shape[0], 0.1, 0)
        Yobs = mask_labels(Y, a.omega, train=train, random_state=0)
        L = a.landmarks
        res = {"kernelmaxide_n": [], "maxide": [], "maxide_alpha4": [], "ratio_wall": [],
               "ratio_cpu": []}  # fmt: skip
        for _ in range(a.repeat):
            k = timed(KernelMaxide(n_features_map=L, random_state=0), X, Yobs, Y, ~train)
            m = timed(Maxide(), X, Yobs, Y, ~train)  # alpha="auto": the selection inside fit
            res["kernelmaxide_n"].append(k)
            res["maxide"].append(m)
            # the fixed weight (the default before issue 28, round 3) beside it
            res["maxide_alpha4"].append(timed(Maxide(alpha=4.0), X, Yobs, Y, ~train))
            res["ratio_wall"].append(k["seconds"] / m["seconds"])
            res["ratio_cpu"].append(k["cpu_seconds"] / m["cpu_seconds"])
        res["median_ratio_wall"] = float(np.median(res["ratio_wall"]))
        res["median_ratio_cpu"] = float(np.median(res["ratio_cpu"]))
        res["median_maxide_auto_over_alpha4_cpu"] = float(np.median(
            [m["cpu_seconds"] / f["cpu_seconds"] for m, f in zip(res["maxide"], res["maxide_alpha4"])]
        ))  # fmt: skip
        res["former_kernelmaxide_n"] = timed(
            KernelMaxide(n_features_map=L, n_components=None, alpha=1.0, random_state=0), X, Yobs, Y, ~train
        )
        res["former_maxide"] = timed(Maxide(n_components=None, alpha=1.0), X, Yobs, Y, ~train)
        if not a.no_cv:
            res["kernelmaxide_cv"] = timed(KernelMaxideCV(n_features_map=L, random_state=0), X, Yobs, Y, ~train)
            res["maxide_cv"] = timed(MaxideCV(), X, Yobs, Y, ~train)
        out[name] = res
        print(name, {k: v for k, v in res.items() if k.startswith("median")}, flush=True)
        with open(a.out, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
