"""A yahoo dataset end to end with KernelMaxide-n, KernelMaxide-f and Maxide (missing labels).

For each ``omega`` in {10, 20, 30, 40}: a random 90/10 instance split, ``omega`` % of each
label's training positives and negatives observed (``mask_labels``, the paper's protocol, SPEC
4.6), the test rows in ``X`` with no observed label (transductive); fit KernelMaxide-n
(``n_landmarks`` Nystrom landmarks), KernelMaxide-f (every row a landmark: the exact kernel)
and Maxide (linear); ranking loss on the test rows.  Writes ``yahoo_kernelmaxide.json`` and a
PNG of ranking loss against ``omega`` (skipped with a message when matplotlib is missing).

Hyperparameters are fixed (``gamma = --gamma-mult x`` the median heuristic, ``--lam``,
``--maxide-lam``), not tuned per cell: ``benchmarks/kernelmaxide_yahoo.py`` runs the paper's
protocol with hold-out selection on the observed labels.

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
import scipy.io as sio

from ooc_lowrank import metrics
from ooc_lowrank.gimc.features import median_gamma
from ooc_lowrank.kernelmaxide import KernelMaxide, Maxide, mask_labels, split_rows

OMEGAS = (10, 20, 30, 40)


def load_yahoo(folder, name):
    """All instances of ``{name}.mat`` (its train and test parts) and their 0/1 labels."""
    path = os.path.join(folder, f"{name}.mat")
    if not os.path.exists(path):
        raise SystemExit(f"missing {path} (set OOC_LOWRANK_DATA or --data)")
    d = sio.loadmat(path)
    X = np.vstack([d["train_data"], d["test_data"]]).astype(np.float64)
    Y = (np.hstack([d["train_target"], d["test_target"]]).T > 0).astype(np.float64)
    return X, Y


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
    args = ap.parse_args(argv)
    out = args.out or tempfile.mkdtemp(prefix="yahoo-kernelmaxide-")
    os.makedirs(out, exist_ok=True)

    X, Y = load_yahoo(args.data, args.dataset)
    rng = np.random.default_rng(args.seed)
    if args.max_rows is not None and args.max_rows < X.shape[0]:
        keep = np.sort(rng.choice(X.shape[0], args.max_rows, replace=False))
        X, Y = X[keep], Y[keep]
    n = X.shape[0]
    gamma = args.gamma_mult * median_gamma(X[rng.choice(n, min(n, 1000), replace=False)])
    print(f"{args.dataset}: {n} instances, {X.shape[1]} features, {Y.shape[1]} labels; "
          f"gamma {gamma:.3g}")
    train = split_rows(n, 0.1, args.seed)
    methods = {
        "KernelMaxide-n": lambda: KernelMaxide(n_landmarks=min(args.landmarks, n), gamma=gamma,
                                               lam=args.lam, max_iter=args.max_iter,
                                               random_state=args.seed),
        "KernelMaxide-f": lambda: KernelMaxide(n_landmarks=None, gamma=gamma, lam=args.lam,
                                               max_iter=args.max_iter, random_state=args.seed),
        "Maxide": lambda: Maxide(lam=args.maxide_lam, max_iter=args.max_iter),
    }
    results = {name: [] for name in methods}
    for omega in args.omega:
        Yobs = mask_labels(Y, omega, train=train, random_state=args.seed)
        for name, make in methods.items():
            t = time.perf_counter()
            est = make().fit(X, Yobs)
            secs = time.perf_counter() - t
            rl = metrics.ranking_loss(Y[~train], est.decision_function(X[~train]))
            results[name].append({"omega": omega, "ranking_loss": rl, "seconds": secs,
                                  "iterations": est.n_iter_})
            print(f"omega {omega:4g}%  {name:15s} ranking loss {rl:.4f}  ({secs:.1f} s, "
                  f"{est.n_iter_} iterations)")
    with open(os.path.join(out, "yahoo_kernelmaxide.json"), "w") as f:
        json.dump({"dataset": args.dataset, "n": n, "gamma": gamma, "lam": args.lam,
                   "maxide_lam": args.maxide_lam, "results": results}, f, indent=1)
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
