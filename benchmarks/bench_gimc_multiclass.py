"""GIMC multi-class accuracy on two real datasets against scikit-learn peers at the same dimension.

Datasets (read from ``$OOC_LOWRANK_DATA``, default ``../shared/data`` next to the repository; see
``SOURCES.md`` there): ``segment`` (UCI Statlog Image Segmentation, 2310 x 19, 7 classes) and
``mfeat`` (UCI Multiple Features / handwritten digits, ``handwritten.mat``; the six views
concatenated, 2000 x 649, 10 classes).  A missing file is reported and recorded as skipped.

Methods (``m = --m``, default 500):

* ``GIMC-LFF``  ``GIMC(features="fourier", learn_features=True)``  (2m features)
* ``GIMC-LNYS`` ``GIMC(features="nystrom", learn_features=True)``  (m features)
* ``IMC-RFF``   ``GIMC(features="fourier", learn_features=False)`` (2m features)
* ``IMC-NYS``   ``GIMC(features="nystrom", learn_features=False)`` (m features)
* ``RBFSampler+Ridge`` ``RBFSampler(n_components=2m) + RidgeClassifier`` (2m features)
* ``Nystroem+Ridge``   ``Nystroem(n_components=m) + RidgeClassifier``   (m features)

Protocol, per seed (``--seeds``):

1. Stratified 70/30 train/test split, ``train_test_split(X, y, test_size=0.3, stratify=y,
   random_state=seed)``.
2. Selection on the train part only: a stratified 80/20 fit/validation split of it
   (``random_state=seed``); ``StandardScaler`` fit on the fit rows; ``gamma0`` = median
   heuristic ``1 / median ||x_i - x_j||^2`` (:func:`ooc_lowrank.gimc.features.median_gamma`,
   the GIMC default) on at most 1000 standardized fit rows.  Every method (ours and the peers)
   is fit on the fit rows for every ``gamma = c * gamma0``, ``c`` in {0.25, 0.5, 1, 2, 4}, and
   ``alpha`` (GIMC ridge weight lambda / ``RidgeClassifier(alpha)``) in {0.01, 0.1, 1, 10};
   the pair with the best validation accuracy wins (ties: first in grid order).  The learned
   methods are fit with ``max_iter = --select-iter`` (default 10) during selection to keep the
   grid affordable.
3. Final: ``StandardScaler`` and ``gamma0`` recomputed on the whole train part, each method refit
   on it with its chosen ``(c, alpha)`` (learned methods: ``max_iter = --max-iter``, default 30,
   ``tol=1e-4``), and its accuracy on the test part reported.  The test part is never used
   for selection.  ``fit_seconds`` is the wall time of that final fit (Numba kernels are warmed
   up first); ``select_seconds`` that of the whole grid.

Notes: GIMC fits one-hot {0, 1} targets without intercept; ``RidgeClassifier`` fits {-1, +1}
targets with an intercept.  All random parts use ``random_state=seed``.

Usage::

    python benchmarks/bench_gimc_multiclass.py            # full (a few minutes on 2 cores)
    python benchmarks/bench_gimc_multiclass.py --small    # seconds; run by the tests
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
DEFAULT_OUT = os.path.join(HERE, "results", "gimc_multiclass.json")
ENV = "OOC_LOWRANK_DATA"

METHODS = ["GIMC-LFF", "GIMC-LNYS", "IMC-RFF", "IMC-NYS", "RBFSampler+Ridge", "Nystroem+Ridge"]
LEARNED = {"GIMC-LFF", "GIMC-LNYS"}
GAMMA_MULTS = [0.25, 0.5, 1.0, 2.0, 4.0]
ALPHAS = [0.01, 0.1, 1.0, 10.0]
SMALL_GAMMA_MULTS = [0.5, 1.0]
SMALL_ALPHAS = [0.1, 1.0]
DATASETS = {
    "segment": ("segment", "segment.dat"),
    "mfeat": ("mfeat-handwritten", "handwritten.mat"),
}


def data_dir():
    return os.environ.get(ENV, os.path.join(os.path.dirname(REPO), "shared", "data"))


def load_dataset(name, root):
    """``(X float64, y int)`` of a dataset; ``FileNotFoundError`` naming the path if missing."""
    path = os.path.join(root, *DATASETS[name])
    if not os.path.exists(path):
        raise FileNotFoundError(path)
    if name == "segment":
        a = np.loadtxt(path)  # 19 features, then the class 1..7
        return a[:, :-1].astype(np.float64), a[:, -1].astype(np.int64), path
    import scipy.io as sio

    mat = sio.loadmat(path)
    views = [np.asarray(v, dtype=np.float64) for v in mat["X"].ravel()]  # 1 x 6 cell of views
    return np.hstack(views), np.asarray(mat["Y"]).ravel().astype(np.int64), path


def make_estimator(method, *, m, gamma, alpha, seed, max_iter):
    from sklearn.kernel_approximation import Nystroem, RBFSampler
    from sklearn.linear_model import RidgeClassifier
    from sklearn.pipeline import make_pipeline

    from ooc_lowrank.gimc import GIMC

    if method == "RBFSampler+Ridge":
        return make_pipeline(
            RBFSampler(gamma=gamma, n_components=2 * m, random_state=seed),
            RidgeClassifier(alpha=alpha),
        )
    if method == "Nystroem+Ridge":
        return make_pipeline(
            Nystroem(kernel="rbf", gamma=gamma, n_components=m, random_state=seed),
            RidgeClassifier(alpha=alpha),
        )
    features = "fourier" if method in ("GIMC-LFF", "IMC-RFF") else "nystrom"
    return GIMC(
        features=features,
        n_features_map=m,
        gamma=gamma,
        alpha=alpha,
        learn_features=method in LEARNED,
        max_iter=max_iter,
        tol=1e-4,
        random_state=seed,
    )


def standardize(Xfit, *others):
    from sklearn.preprocessing import StandardScaler

    sc = StandardScaler().fit(Xfit)
    return [sc.transform(Xfit)] + [sc.transform(X) for X in others]


def gamma0_of(X, seed):
    """Median-heuristic gamma on at most 1000 rows (the GIMC default rule)."""
    from ooc_lowrank.gimc.features import median_gamma

    rng = np.random.default_rng(seed)
    idx = np.sort(rng.choice(X.shape[0], size=min(1000, X.shape[0]), replace=False))
    return float(median_gamma(X[idx]))


def warm_up():
    """Compile the Numba kernels once so that the timed fits do not include JIT time."""
    from ooc_lowrank.gimc import GIMC

    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((60, 5)), np.arange(60) % 3
    for feat in ("fourier", "nystrom"):
        for learn in (True, False):
            GIMC(
                features=feat, n_features_map=4, learn_features=learn, max_iter=2, random_state=0
            ).fit(X, y).predict(X)


def run_seed(X, y, seed, *, m, grid, select_iter, max_iter, log):
    from sklearn.model_selection import train_test_split

    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.3, stratify=y, random_state=seed)
    Xf, Xv, yf, yv = train_test_split(Xtr, ytr, test_size=0.2, stratify=ytr, random_state=seed)
    Xf, Xv = standardize(Xf, Xv)
    g0_sel = gamma0_of(Xf, seed)
    Xtr_s, Xte_s = standardize(Xtr, Xte)
    g0 = gamma0_of(Xtr_s, seed)
    mults, alphas = grid
    methods = {}
    for method in METHODS:
        t_sel = time.perf_counter()
        best = None
        val = []
        for c in mults:
            for a in alphas:
                est = make_estimator(
                    method,
                    m=m,
                    gamma=c * g0_sel,
                    alpha=a,
                    seed=seed,
                    max_iter=select_iter if method in LEARNED else max_iter,
                )
                acc = float(np.mean(est.fit(Xf, yf).predict(Xv) == yv))
                val.append({"gamma_mult": c, "alpha": a, "val_accuracy": acc})
                if best is None or acc > best[0]:
                    best = (acc, c, a)
        t_sel = time.perf_counter() - t_sel
        acc_v, c, a = best
        est = make_estimator(method, m=m, gamma=c * g0, alpha=a, seed=seed, max_iter=max_iter)
        t = time.perf_counter()
        est.fit(Xtr_s, ytr)
        t_fit = time.perf_counter() - t
        acc = float(np.mean(est.predict(Xte_s) == yte))
        r = {
            "test_accuracy": acc,
            "val_accuracy": acc_v,
            "gamma_mult": c,
            "gamma": c * g0,
            "alpha": a,
            "fit_seconds": t_fit,
            "select_seconds": t_sel,
            "n_features": (2 * m if method in ("GIMC-LFF", "IMC-RFF", "RBFSampler+Ridge") else m),
            "grid": val,
        }
        if hasattr(est, "n_iter_") and method in LEARNED:
            r["n_iter"] = int(est.n_iter_)
            r["objective_first_last"] = [float(est.objective_[0]), float(est.objective_[-1])]
        methods[method] = r
        log(
            f"  seed {seed} {method:17s} test acc {acc:.4f} (val {acc_v:.4f}, c={c:g}, "
            f"alpha={a:g}) fit {t_fit:.2f}s, selection {t_sel:.1f}s"
        )
    return {
        "seed": seed,
        "n_train": int(len(ytr)),
        "n_test": int(len(yte)),
        "n_select_fit": int(len(yf)),
        "n_select_val": int(len(yv)),
        "gamma0_selection": g0_sel,
        "gamma0": g0,
        "methods": methods,
    }


def summarize(runs):
    out = {}
    for method in METHODS:
        accs = np.array([r["methods"][method]["test_accuracy"] for r in runs])
        secs = np.array([r["methods"][method]["fit_seconds"] for r in runs])
        out[method] = {
            "test_accuracy_mean": float(accs.mean()),
            "test_accuracy_std": float(accs.std()),
            "fit_seconds_mean": float(secs.mean()),
            "chosen": [
                {
                    "gamma_mult": r["methods"][method]["gamma_mult"],
                    "alpha": r["methods"][method]["alpha"],
                }
                for r in runs
            ],
        }
    return out


def table(out):
    lines = [
        f"{'dataset':8s} {'method':17s} {'test acc':>15s} {'gamma (c x g0)':>22s} "
        f"{'alpha':>6s} {'fit s':>7s} {'select s':>9s}"
    ]
    for name, ds in out["datasets"].items():
        if ds["status"] != "ok":
            lines.append(f"{name:8s} skipped: {ds['reason']}")
            continue
        for method in METHODS:
            s = ds["summary"][method]
            runs = [r["methods"][method] for r in ds["runs"]]
            acc = f"{s['test_accuracy_mean']:.4f}"
            if len(runs) > 1:
                acc += f" +- {s['test_accuracy_std']:.4f}"
            r0 = runs[0]
            gam = f"{r0['gamma']:.4g} ({r0['gamma_mult']:g}x)"
            if len(runs) > 1:
                gam += " [seed0]"
            sel = np.mean([r["select_seconds"] for r in runs])
            lines.append(
                f"{name:8s} {method:17s} {acc:>15s} {gam:>22s} {r0['alpha']:>6g} "
                f"{s['fit_seconds_mean']:>7.2f} {sel:>9.1f}"
            )
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--small", action="store_true", help="m=16, 300 rows, a 2x2 grid (seconds)")
    p.add_argument("--m", type=int, default=None, help="n_features_map (default 500; 16 --small)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--max-iter", type=int, default=None, help="final fits (default 30; 5 --small)")
    p.add_argument(
        "--select-iter", type=int, default=None, help="learned fits in selection (10; 3 --small)"
    )
    p.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=list(DATASETS))
    p.add_argument("--out", default=DEFAULT_OUT)
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args(argv)
    log = (lambda *a: None) if args.quiet else (lambda *a: print(*a, flush=True))
    small = args.small
    m = args.m or (16 if small else 500)
    max_iter = args.max_iter or (5 if small else 30)
    select_iter = args.select_iter or (3 if small else 10)
    grid = (SMALL_GAMMA_MULTS, SMALL_ALPHAS) if small else (GAMMA_MULTS, ALPHAS)
    subsample = 300 if small else None
    root = data_dir()
    t_all = time.perf_counter()
    out = {
        "benchmark": "gimc_multiclass",
        "small": small,
        "loadavg_before": os.getloadavg(),
        "protocol": {
            "split": "stratified 70/30 train/test, train_test_split(stratify=y, random_state=seed)",
            "scaling": "StandardScaler fit on the training rows of each stage",
            "selection": "stratified 80/20 fit/validation split of the train part; "
            "best validation accuracy over the grid (ties: first in grid order)",
            "gamma": "c * gamma0, gamma0 = 1/median squared pairwise distance of <= 1000 "
            "standardized training rows (recomputed for the final fit)",
            "gamma_mults": grid[0],
            "alphas": grid[1],
            "final": "refit on the whole train part with the chosen (c, alpha); test accuracy",
            "m": m,
            "max_iter": max_iter,
            "select_iter": select_iter,
            "tol": 1e-4,
            "subsample_rows": subsample,
            "seeds": args.seeds,
        },
        "data_dir": root,
        "datasets": {},
    }
    warmed = False
    for name in args.datasets:
        try:
            X, y, path = load_dataset(name, root)
        except FileNotFoundError as e:
            msg = f"dataset file missing: {e.args[0]} (set {ENV} to the shared data folder)"
            print(f"[{name}] skipped: {msg}", flush=True)
            out["datasets"][name] = {"status": "skipped", "reason": msg}
            continue
        ds = {
            "status": "ok",
            "path": path,
            "n_rows": int(X.shape[0]),
            "n_features": int(X.shape[1]),
            "n_classes": int(np.unique(y).size),
        }
        if not warmed:
            warm_up()
            warmed = True
        log(f"[{name}] {X.shape[0]} x {X.shape[1]}, {ds['n_classes']} classes, m={m}")
        runs = []
        for seed in args.seeds:
            Xs, ys = X, y
            if subsample is not None and subsample < X.shape[0]:
                from sklearn.model_selection import train_test_split

                Xs, _, ys, _ = train_test_split(
                    X, y, train_size=subsample, stratify=y, random_state=seed
                )
            runs.append(
                run_seed(
                    Xs,
                    ys,
                    seed,
                    m=m,
                    grid=grid,
                    select_iter=select_iter,
                    max_iter=max_iter,
                    log=log,
                )
            )
        ds["runs"] = runs
        ds["summary"] = summarize(runs)
        out["datasets"][name] = ds
    out["total_seconds"] = time.perf_counter() - t_all
    out["loadavg_after"] = os.getloadavg()
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1, default=float)
    log(table(out))
    log(f"total {out['total_seconds']:.1f}s; wrote {args.out}")
    return out


if __name__ == "__main__":
    main()
    sys.exit(0)
