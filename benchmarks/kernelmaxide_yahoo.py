"""KernelMaxide-n / KernelMaxide-f / Maxide on a yahoo dataset, the paper's protocol (SPEC 4.6).

All 5000 instances (the .mat train and test parts together), a random 90/10 instance split,
``omega`` % of each label's training positives and negatives observed (``mask_labels``), the
test rows in ``X`` with no observed label (transductive).  Hyperparameters by hold-out
validation on the *observed training labels only*: 25 % of the observed entries are held out,
the score is the ranking loss restricted to the held-out (positive, negative) pairs of each row
(ties are errors); the best setting is refit on all observed labels.  Ranking loss on the test
rows, time per fit.

    python benchmarks/kernelmaxide_yahoo.py arts --omega 20 --reps 1 --out results.json
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np
import scipy.io as sio
import scipy.sparse as sp

from ooc_lowrank import metrics
from ooc_lowrank.gimc.features import median_gamma
from ooc_lowrank.kernelmaxide import KernelMaxide, Maxide, mask_labels, split_rows

DATA = os.environ.get(
    "OOC_LOWRANK_DATA", os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data")
)


def load(name):
    d = sio.loadmat(os.path.join(DATA, "yahoo", f"{name}.mat"))
    X = np.vstack([d["train_data"], d["test_data"]]).astype(np.float64)
    Y = (np.hstack([d["train_target"], d["test_target"]]).T > 0).astype(np.float64)
    return X, Y


def heldout_rl(S, V):
    """Mean over rows of the ranking loss among the held-out observed entries ``V`` (+1/-1)."""
    V = sp.csr_matrix(V)
    tot, cnt = 0.0, 0
    for i in range(V.shape[0]):
        a, b = V.indptr[i], V.indptr[i + 1]
        if b == a:
            continue
        c, v = V.indices[a:b], V.data[a:b]
        pos, neg = S[i, c[v > 0]], S[i, c[v < 0]]
        if pos.size and neg.size:
            tot += np.mean(pos[:, None] <= neg[None, :])
            cnt += 1
    return tot / max(cnt, 1)


def split_observed(Yobs, frac, seed):
    rng = np.random.default_rng(seed)
    Y = sp.coo_matrix(Yobs)
    hold = rng.random(Y.nnz) < frac
    mk = lambda m: sp.csr_matrix((Y.data[m], (Y.row[m], Y.col[m])), shape=Y.shape)  # noqa: E731
    return mk(~hold), mk(hold)


def fit_time(est, X, Y):
    t = time.perf_counter()
    est.fit(X, Y)
    return time.perf_counter() - t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dataset")
    ap.add_argument("--omega", type=float, nargs="+", default=[20])
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--gamma-mult", type=float, nargs="+", default=[0.5, 1.0, 2.0])
    ap.add_argument("--lams", type=float, nargs="+", default=[0.5, 2.0, 8.0])
    ap.add_argument("--maxide-lams", type=float, nargs="+", default=[2.0**k for k in range(-2, 8)])
    ap.add_argument("--maxide-k", type=int, nargs="+", default=[25, 50, 100, 0], help="0 = all")
    ap.add_argument("--full", action="store_true", help="also KernelMaxide-f at KM-n's choice")
    ap.add_argument("--maxide-only", action="store_true")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    X, Y = load(a.dataset)
    n = X.shape[0]
    g0 = median_gamma(X[np.random.default_rng(0).choice(n, 1000, replace=False)])
    rows = []
    for omega in a.omega:
        for rep in range(a.reps):
            train = split_rows(n, 0.1, rep)
            Yobs = mask_labels(Y, omega, train=train, random_state=rep)
            Yfit, Yval = split_observed(Yobs, 0.25, 1000 + rep)
            res = {"dataset": a.dataset, "omega": omega, "rep": rep, "n_obs": int(Yobs.nnz)}
            # KernelMaxide-n: hold-out grid
            grid = []
            for gm in [] if a.maxide_only else a.gamma_mult:
                for lam in a.lams:
                    est = KernelMaxide(n_landmarks=1000, gamma=g0 * gm, lam=lam, random_state=rep)
                    t = fit_time(est, X, Yfit)
                    v = heldout_rl(est.decision_function(X), Yval)
                    grid.append((v, gm, lam, t))
                    print(f"  KM-n gamma={gm}*g0 lam={lam}: val RL {v:.4f} ({t:.1f} s)", flush=True)
            if grid:
                v, gm, lam, _ = min(grid)
                est = KernelMaxide(n_landmarks=1000, gamma=g0 * gm, lam=lam, random_state=rep)
                t = fit_time(est, X, Yobs)
                rl = metrics.ranking_loss(Y[~train], est.decision_function(X[~train]))
                res["kernelmaxide_n"] = dict(
                    rl=rl, gamma_mult=gm, lam=lam, time=t, n_iter=est.n_iter_, val=v
                )
                print(f"KM-n omega={omega} rep={rep}: RL {rl:.4f} (gamma {gm}*g0, lam {lam}, {t:.1f} s)")
            if a.full and grid:
                est = KernelMaxide(n_landmarks=None, gamma=g0 * gm, lam=lam, random_state=rep)
                t = fit_time(est, X, Yobs)
                rl = metrics.ranking_loss(Y[~train], est.decision_function(X[~train]))
                res["kernelmaxide_f"] = dict(rl=rl, gamma_mult=gm, lam=lam, time=t, n_iter=est.n_iter_)
                print(f"KM-f omega={omega} rep={rep}: RL {rl:.4f} ({t:.1f} s)", flush=True)
            # Maxide: k (top left singular vectors) and lam on the same hold-out
            grid = []
            for k in a.maxide_k:
                for lam in a.maxide_lams:
                    est = Maxide(lam=lam, n_components=k or None)
                    t = fit_time(est, X, Yfit)
                    grid.append((heldout_rl(est.decision_function(X), Yval), k, lam, t))
            v, k, lam, _ = min(grid)
            est = Maxide(lam=lam, n_components=k or None)
            t = fit_time(est, X, Yobs)
            rl = metrics.ranking_loss(Y[~train], est.decision_function(X[~train]))
            res["maxide"] = dict(rl=rl, k=k, lam=lam, time=t, n_iter=est.n_iter_, val=v)
            print(f"Maxide omega={omega} rep={rep}: RL {rl:.4f} (k {k}, lam {lam}, {t:.1f} s)", flush=True)
            rows.append(res)
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"median_gamma": g0, "runs": rows}, f, indent=1)


if __name__ == "__main__":
    main()
