"""A yahoo dataset end to end with KernelMaxide-n, KernelMaxide-f and Maxide (missing labels).

For each ``omega`` in {10, 20, 30, 40}: a random 90/10 instance split, ``omega`` % of each
label's training positives and negatives observed (``mask_labels``, the paper's protocol, SPEC
4.6), the test rows in ``X`` with no observed label (transductive); fit KernelMaxide-n
(``n_features_map`` Nystrom landmarks), KernelMaxide-f (every row a landmark: the exact kernel)
and Maxide (linear); ranking loss on the test rows.  Writes ``yahoo_kernelmaxide.json`` and a
PNG of ranking loss against ``omega`` (skipped with a message when matplotlib is missing).

Hyperparameters are chosen by the library's built-in selection on the observed training labels
only (``KernelMaxideCV``: ``gamma`` x ``lam``; ``MaxideCV``: ``lam``; KernelMaxide-f uses
KernelMaxide-n's choice); ``--fixed`` uses fixed ones instead (``gamma = --gamma-mult x`` the
median heuristic, ``--lam``, ``--maxide-lam``).  ``benchmarks/kernelmaxide_yahoo.py`` runs the
paper's whole protocol (three sets, repetitions, KernelBSVM).

    python examples/yahoo_kernelmaxide.py [--dataset arts] [--data DIR] [--out DIR]
    python examples/yahoo_kernelmaxide.py --max-rows 400 --landmarks 50 --max-iter 20  # seconds
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

import numpy as np

from ooc_lowrank import metrics
from ooc_lowrank.datasets import load_yahoo
from ooc_lowrank.gimc.features import median_gamma
from ooc_lowrank.kernelmaxide import (
    KernelMaxide,
    KernelMaxideCV,
    Maxide,
    MaxideCV,
    mask_labels,
    split_rows,
)

OMEGAS = (10, 20, 30, 40)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default_data = os.path.join(
        os.environ.get("OOC_LOWRANK_DATA",
                       os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data")),
        "yahoo")
    ap.add_argument("--data", default=default_data, help="folder with arts.mat, Business.mat...")
    ap.add_argument("--dataset", default="arts", help="arts, Business or Health")
    ap.add_argument("--omega", type=float, nargs="+", default=list(OMEGAS))
    ap.add_argument("--out", default=None, help="folder for the JSON and the PNG (default: temp)")
    ap.add_argument("--max-rows", type=int, default=None, help="keep N random rows (small runs)")
    ap.add_argument("--landmarks", type=int, default=1000, help="KernelMaxide-n landmarks")
    ap.add_argument("--gamma-mult", type=float, default=2.0, help="gamma = this x median heuristic")
    ap.add_argument("--lam", type=float, default=2.0, help="KernelMaxide trace-norm weight")
    ap.add_argument("--maxide-lam", type=float, default=4.0, help="Maxide trace-norm weight")
    ap.add_argument("--max-iter", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--fixed", action="store_true",
                    help="fixed hyperparameters instead of the built-in selection")
    args = ap.parse_args(argv)
    out = args.out or tempfile.mkdtemp(prefix="yahoo-kernelmaxide-")
    os.makedirs(out, exist_ok=True)

    X, Y = load_yahoo(args.dataset, folder=args.data)
    rng = np.random.default_rng(args.seed)
    if args.max_rows is not None and args.max_rows < X.shape[0]:
        keep = np.sort(rng.choice(X.shape[0], args.max_rows, replace=False))
        X, Y = X[keep], Y[keep]
    n = X.shape[0]
    gamma = args.gamma_mult * median_gamma(X[rng.choice(n, min(n, 1000), replace=False)])
    print(f"{args.dataset}: {n} instances, {X.shape[1]} features, {Y.shape[1]} labels"
          + (f"; fixed gamma {gamma:.3g}" if args.fixed else "; gamma and lam by selection"))
    train = split_rows(n, 0.1, args.seed)
    it = dict(max_iter=args.max_iter, random_state=args.seed)
    nl = min(args.landmarks, n)
    results = {name: [] for name in ("KernelMaxide-n", "KernelMaxide-f", "Maxide")}
    for omega in args.omega:
        Yobs = mask_labels(Y, omega, train=train, random_state=args.seed)
        if args.fixed:
            made = {
                "KernelMaxide-n": KernelMaxide(n_features_map=nl, gamma=gamma, alpha=args.lam, **it),
                "Maxide": Maxide(alpha=args.maxide_lam, **it),
            }
        else:  # built-in selection on held-out observed training labels
            made = {"KernelMaxide-n": KernelMaxideCV(n_features_map=nl, **it),
                    "Maxide": MaxideCV(**it)}
        for name in ("KernelMaxide-n", "KernelMaxide-f", "Maxide"):
            t = time.perf_counter()
            if name == "KernelMaxide-f":  # KernelMaxide-n's gamma and lam, the exact kernel
                kn = made["KernelMaxide-n"]
                kn = getattr(kn, "best_estimator_", kn)
                est = KernelMaxide(n_features_map=None, gamma=kn.gamma_, alpha=kn.alpha, **it).fit(X, Yobs)
            else:
                est = made[name].fit(X, Yobs)
            secs = time.perf_counter() - t
            best = getattr(est, "best_estimator_", est)
            rl = metrics.ranking_loss(Y[~train], est.decision_function(X[~train]))
            results[name].append({"omega": omega, "ranking_loss": rl, "seconds": secs,
                                  "iterations": best.n_iter_, "lam": best.alpha,
                                  "chosen": getattr(est, "best_params_", None)})
            print(f"omega {omega:4g}%  {name:15s} ranking loss {rl:.4f}  ({secs:.1f} s"
                  f"{' with selection' if hasattr(est, 'best_params_') else ''}, "
                  f"{best.n_iter_} iterations, alpha {best.alpha:g})")
    with open(os.path.join(out, "yahoo_kernelmaxide.json"), "w") as f:
        json.dump({"dataset": args.dataset, "n": n, "fixed": args.fixed, "gamma_fixed": gamma,
                   "results": results}, f, indent=1)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no PNG (pip install matplotlib)")
        return results
    fig, ax = plt.subplots(figsize=(6, 4))
    for (name, rows), mk in zip(results.items(), "osd", strict=True):
        ax.plot([r["omega"] for r in rows], [r["ranking_loss"] for r in rows], marker=mk,
                label=name)
    ax.set_xlabel("omega: % of each label's training entries observed")
    ax.set_ylabel("ranking loss (test rows)")
    ax.set_title(f"yahoo {args.dataset} ({n} instances)")
    ax.legend()
    fig.tight_layout()
    png = os.path.join(out, "yahoo_kernelmaxide.png")
    fig.savefig(png, dpi=100)
    print(f"wrote {png}")
    return results


if __name__ == "__main__":
    main()
    raise SystemExit(0)
