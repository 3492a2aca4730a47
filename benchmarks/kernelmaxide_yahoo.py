"""KernelMaxide-f / KernelMaxide-n / Maxide / KernelBSVM on yahoo sets, the paper's protocol
(SPEC 4.6).

All 5000 instances of each ``.mat`` (``ooc_lowrank.datasets.load_yahoo``), a random 90/10
instance split, ``omega`` % of each label's training positives and negatives observed
(``mask_labels``), the test rows in ``X`` with no observed label (transductive).
Hyperparameters by the library's own selection on the *observed training labels only*
(``KernelMaxideCV`` / ``MaxideCV`` with their default hold-out: a quarter of the labelled
training rows lose their observed labels, score = ranking loss over those rows' held-out (+, -)
pairs, refit on all observed labels; KernelMaxide-n's grid is ``KernelMaxideCV``'s default).  KernelMaxide-f
uses KernelMaxide-n's choice (one exact-kernel fit per cell).  KernelBSVM: one scikit-learn RBF
``SVC`` per label on that label's observed training rows, ``gamma`` from the same grid and
``C`` from ``--svm-cs``, chosen on the same held-out observed labels, ``decision_function``
scores.  Ranking loss on the test rows; seconds per final fit (and of the whole selection).

Cells run repetition-major (every dataset and omega of repetition 0, then repetition 1, ...)
and the JSON is rewritten after every cell, so a run stopped early holds whole repetitions.

    python benchmarks/kernelmaxide_yahoo.py arts business health --reps 10 --out res.json
    python benchmarks/kernelmaxide_yahoo.py --merge a.json b.json --out merged.json  # table
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

from ooc_lowrank import metrics
from ooc_lowrank.datasets import load_yahoo
from ooc_lowrank.kernelmaxide import KernelMaxide, KernelMaxideCV, MaxideCV, mask_labels, split_rows
from ooc_lowrank.kernelmaxide.cv import split_observed
from ooc_lowrank.kernels.kernelmaxide import observed_ranking_loss_rows


def observed_rl(S, V):
    rl = observed_ranking_loss_rows(S, V.indptr, V.indices, V.data)
    return float(rl[rl >= 0].mean())


def bsvm_scores(K, Yobs, C, rows_out):
    """Scores (len(rows_out) x m) of one RBF SVC per label on its observed rows, from the
    precomputed RBF kernel ``K`` of all rows (the same models as ``SVC(kernel="rbf")``; libsvm's
    own kernel evaluation made prediction 10x slower than the fits).  A label whose observed
    rows hold one class only scores 0.  Returns the scores and the seconds of the fits."""
    from sklearn.svm import SVC

    Yc = Yobs.tocsc()
    S = np.zeros((len(rows_out), Yobs.shape[1]))
    fit_s = 0.0
    for j in range(Yobs.shape[1]):
        rows = Yc.indices[Yc.indptr[j] : Yc.indptr[j + 1]]
        y = Yc.data[Yc.indptr[j] : Yc.indptr[j + 1]]
        if np.unique(y).size < 2:
            continue
        t = time.perf_counter()
        mdl = SVC(C=C, kernel="precomputed").fit(K[np.ix_(rows, rows)], y)
        fit_s += time.perf_counter() - t
        S[:, j] = mdl.decision_function(K[np.ix_(rows_out, rows)])
    return S, fit_s


def rbf(X, gamma):
    from sklearn.metrics.pairwise import rbf_kernel

    return rbf_kernel(X, gamma=gamma)


def run_cell(name, X, Y, omega, rep, a):
    n = X.shape[0]
    train = split_rows(n, 0.1, rep)
    Yobs = mask_labels(Y, omega, train=train, random_state=rep)
    test = ~train
    res = {"dataset": name, "omega": omega, "rep": rep, "n_obs": int(Yobs.nnz),
           "load_before": os.getloadavg()[0]}  # fmt: skip

    def rl(S):
        return float(metrics.ranking_loss(Y[test], S))

    t = time.perf_counter()
    # KernelMaxideCV's own defaults (grid, hold-outs) unless given on the command line
    grid = {k: v for k, v in (("gamma_scales", a.gamma_scales), ("alphas", a.lams),
                              ("n_splits", a.n_splits)) if v is not None}  # fmt: skip
    cv = KernelMaxideCV(n_features_map=a.landmarks, max_iter=a.max_iter, random_state=rep,
                        **grid).fit(X, Yobs)  # fmt: skip
    best = cv.best_estimator_
    res["kernelmaxide_n"] = dict(
        rl=rl(best.decision_function(X[test])), gamma=best.gamma, lam=best.alpha,
        gamma_scale=best.gamma / cv.gamma_median_, time=cv.refit_time_,
        select_time=time.perf_counter() - t, n_iter=best.n_iter_, val=cv.best_score_,
        n_splits=cv.n_splits_, gamma_scales=list(cv.gamma_scales), lams=list(cv.alphas),
    )  # fmt: skip
    print(f"{name} omega={omega} rep={rep} KM-n: {res['kernelmaxide_n']}", flush=True)
    if a.full:
        t = time.perf_counter()
        f = KernelMaxide(n_features_map=None, gamma=best.gamma, alpha=best.alpha,
                         max_iter=a.max_iter, random_state=rep).fit(X, Yobs)  # fmt: skip
        res["kernelmaxide_f"] = dict(rl=rl(f.decision_function(X[test])), gamma=best.gamma,
                                     lam=best.alpha, time=time.perf_counter() - t, n_iter=f.n_iter_)  # fmt: skip
        print(f"  KM-f: {res['kernelmaxide_f']}", flush=True)
    t = time.perf_counter()
    mcv = MaxideCV(n_components_grid=[k or None for k in a.maxide_k], alphas=a.maxide_lams,
                   max_iter=a.max_iter, random_state=rep).fit(X, Yobs)  # fmt: skip
    mb = mcv.best_estimator_
    res["maxide"] = dict(rl=rl(mb.decision_function(X[test])), k=mb.n_components, lam=mb.alpha,
                         time=mcv.refit_time_, select_time=time.perf_counter() - t,
                         n_iter=mb.n_iter_, val=mcv.best_score_)  # fmt: skip
    print(f"  Maxide: {res['maxide']}", flush=True)
    if a.bsvm:
        g0 = cv.gamma_median_  # the same gamma grid as KernelMaxide-n
        t = time.perf_counter()
        # the hold-out the CV classes used (their defaults: a quarter of the labelled rows)
        Yfit, Yval = split_observed(Yobs, 0.25, rep, by="rows")
        vrows = np.flatnonzero(np.diff(Yval.indptr))
        grid = []
        for s in cv.gamma_scales:
            K = rbf(X, g0 * s)
            for C in a.svm_cs:
                S, _ = bsvm_scores(K, Yfit, C, vrows)
                grid.append((observed_rl(S, Yval[vrows]), s, C))
        v, s, C = min(grid)
        tk = time.perf_counter()
        K = rbf(X, g0 * s)
        k_s = time.perf_counter() - tk
        S, fit_s = bsvm_scores(K, Yobs, C, np.flatnonzero(test))
        res["kernelbsvm"] = dict(rl=rl(S), gamma_scale=s, C=C, time=fit_s + k_s, kernel_time=k_s,
                                 select_time=time.perf_counter() - t, val=v)  # fmt: skip
        print(f"  KernelBSVM: {res['kernelbsvm']}", flush=True)
    res["load_after"] = os.getloadavg()[0]
    return res


#: SPEC 4.6 (the paper's Tables 2-3): ranking loss at omega = 10 / 20 / 30 / 40 %
PAPER = {
    "arts": {
        "kernelmaxide_f": (0.1514, 0.1365, 0.1264, 0.1266),
        "kernelmaxide_n": (0.1527, 0.1382, 0.1278, 0.1289),
        "maxide": (0.1596, 0.1500, 0.1421, 0.1422),
        "kernelbsvm": (0.2325, 0.2262, 0.2138, 0.2110),
    },
    "business": {
        "kernelmaxide_f": (0.0424, 0.0428, 0.0359, 0.0366),
        "kernelmaxide_n": (0.0434, 0.0446, 0.0386, 0.0393),
        "maxide": (0.0457, 0.0488, 0.0444, 0.0458),
        "kernelbsvm": (0.0785, 0.0833, 0.0722, 0.0724),
    },
    "health": {
        "kernelmaxide_f": (0.0597, 0.0540, 0.0491, 0.0491),
        "kernelmaxide_n": (0.0616, 0.0562, 0.0519, 0.0503),
        "maxide": (0.0691, 0.0652, 0.0609, 0.0607),
        "kernelbsvm": (0.1130, 0.1144, 0.1124, 0.1127),
    },
}
METHODS = ("kernelmaxide_f", "kernelmaxide_n", "maxide", "kernelbsvm")
NAMES = {"kernelmaxide_f": "KM-f", "kernelmaxide_n": "KM-n", "maxide": "Maxide",
         "kernelbsvm": "KernelBSVM"}  # fmt: skip


def summarize(runs):
    """Markdown table (mean +- std over repetitions, paper value beside) and per-cell verdicts
    from the runs of several result files (a repeated (dataset, omega, rep) counts once)."""
    cells = {}
    for r in runs:
        cells[(r["dataset"].lower(), float(r["omega"]), int(r["rep"]))] = r
    keys = sorted({(d, o) for d, o, _ in cells})
    lines = ["| dataset | omega | reps | " + " | ".join(
        f"{NAMES[m]} RL (paper)" for m in METHODS) + " | KM-n - paper | ordering f <= n < Maxide | "
        "seconds per fit f / n / Maxide / BSVM |",
        "|---|---|---|" + "---|" * (len(METHODS) + 3)]  # fmt: skip
    verdicts = []
    for d, o in keys:
        rs = [cells[k] for k in sorted(cells) if k[0] == d and k[1] == o]
        row = [d, f"{o:g}", str(len(rs))]
        mean = {}
        for m in METHODS:
            v = [r[m]["rl"] for r in rs if m in r]
            if not v:
                row.append("-")
                continue
            mean[m] = float(np.mean(v))
            paper = PAPER.get(d, {}).get(m, (None,) * 4)[[10, 20, 30, 40].index(int(o))]
            row.append(f"{mean[m]:.4f} +- {np.std(v):.4f} ({paper:.4f})")
        paper_n = PAPER[d]["kernelmaxide_n"][[10, 20, 30, 40].index(int(o))]
        gap = mean["kernelmaxide_n"] - paper_n
        order = (mean.get("kernelmaxide_f", -np.inf) <= mean["kernelmaxide_n"] < mean["maxide"])
        row += [f"{gap:+.4f}", "yes" if order else "no"]
        secs = [f"{np.median([r[m]['time'] for r in rs if m in r]):.1f}" if mean.get(m) is not None
                else "-" for m in METHODS]  # fmt: skip
        row.append(" / ".join(secs))
        lines.append("| " + " | ".join(row) + " |")
        verdicts.append(dict(dataset=d, omega=o, reps=len(rs), km_n_gap=gap,
                             within_0003=gap <= 0.003, ordering=bool(order),
                             means=mean))  # fmt: skip
    return "\n".join(lines), verdicts


def merge(paths, out):
    runs = []
    for p in paths:
        with open(p) as f:
            runs += json.load(f)["runs"]
    table, verdicts = summarize(runs)
    print(table)
    if out:
        with open(out, "w") as f:
            json.dump({"runs": runs, "verdicts": verdicts, "table": table}, f, indent=1)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--merge":
        ap = argparse.ArgumentParser()
        ap.add_argument("--merge", nargs="+", required=True, help="result JSON files")
        ap.add_argument("--out", default=None)
        a = ap.parse_args()
        return merge(a.merge, a.out)
    ap = argparse.ArgumentParser()
    ap.add_argument("datasets", nargs="+", help="yahoo set names or .mat paths")
    ap.add_argument("--omega", type=float, nargs="+", default=[10, 20, 30, 40])
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--first-rep", type=int, default=0)
    ap.add_argument("--landmarks", type=int, default=1000)
    ap.add_argument("--max-iter", type=int, default=100)
    ap.add_argument("--gamma-scales", type=float, nargs="+", default=None,
                    help="KernelMaxideCV's gamma_scales (default: its default)")  # fmt: skip
    ap.add_argument("--lams", type=float, nargs="+", default=None,
                    help="KernelMaxideCV's lams (default: its default)")  # fmt: skip
    ap.add_argument("--n-splits", type=int, default=None,
                    help="KernelMaxideCV's n_splits (default: its default)")  # fmt: skip
    ap.add_argument("--maxide-lams", type=float, nargs="+", default=[2.0**k for k in range(-2, 6)])
    ap.add_argument("--maxide-k", type=int, nargs="+", default=[100, 0], help="0 = all")
    ap.add_argument("--svm-cs", type=float, nargs="+", default=[1.0, 10.0])
    ap.add_argument("--no-full", dest="full", action="store_false")
    ap.add_argument("--no-bsvm", dest="bsvm", action="store_false")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    data = {name: load_yahoo(name) for name in a.datasets}
    rows = []
    for rep in range(a.first_rep, a.first_rep + a.reps):
        for name in a.datasets:
            X, Y = data[name]
            for omega in a.omega:
                rows.append(run_cell(name, X, Y, omega, rep, a))
                if a.out:
                    with open(a.out, "w") as f:
                        json.dump({"args": vars(a), "runs": rows}, f, indent=1)


if __name__ == "__main__":
    main()
