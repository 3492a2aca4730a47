"""Two-sided IMC on MovieLens 100K with user and item side features, against scikit-surprise SVD
in the same run (RMSE / MAE on the five official splits u1..u5).

Features (:func:`ooc_lowrank.datasets.load_movielens_side_features`): users = age bucket,
gender, occupation (one-hot) and a constant; items = the 19 genres and a constant.  Variants:

* ``IMC side``: identity maps on the side features only (a cold-start capable model: a new user
  or movie needs only its side features);
* ``IMC ids+side``: a one-hot id block prepended on both sides (matrix completion plus side
  information).

Selection (on training data only): ``lam`` from ``--lams`` per variant by the RMSE on 20 % of
``u1.base`` held out (seed 0); the chosen value is then used on every fold.  ``rank`` is fixed
(``--rank``, 10).  Surprise ``SVD`` runs with its defaults (100 factors, 20 epochs, biases) and
``random_state=0``; the global mean of the training ratings is the floor.

    python benchmarks/imc_movielens.py                    # writes results/imc_movielens.json
    python benchmarks/imc_movielens.py --folds 1 --max-iter 2 --lams 10 --out /tmp/x.json
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
sys.path.insert(0, REPO)
from benchmarks.bench_gimc_multiclass import data_dir  # noqa: E402

VARIANTS = {"IMC side": False, "IMC ids+side": True}


def fit_imc(obs, users, items, *, rank, lam, max_iter, seed):
    from ooc_lowrank.datasets import MOVIELENS_100K_SHAPE
    from ooc_lowrank.imc import InductiveMatrixCompletion

    est = InductiveMatrixCompletion(
        n_components=rank, alpha=lam, max_iter=max_iter, tol=1e-5, random_state=seed
    )
    return est.fit(obs, X_row=users, X_col=items, shape=MOVIELENS_100K_SHAPE)


def surprise_svd(train, test, seed):
    import pandas as pd
    from surprise import SVD, Dataset, Reader, accuracy

    reader = Reader(rating_scale=(1, 5))
    df = pd.DataFrame({"u": train[0], "i": train[1], "r": train[2]})
    trainset = Dataset.load_from_df(df, reader).build_full_trainset()
    algo = SVD(random_state=seed).fit(trainset)
    pred = algo.test(list(zip(test[0], test[1], test[2], strict=True)))
    return accuracy.rmse(pred, verbose=False), accuracy.mae(pred, verbose=False)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--folds", nargs="+", type=int, default=[1, 2, 3, 4, 5])
    p.add_argument("--rank", type=int, default=10)
    p.add_argument("--lams", nargs="+", type=float, default=[3.0, 10.0, 30.0, 100.0, 300.0, 1000.0])
    p.add_argument("--max-iter", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=os.path.join(HERE, "results", "imc_movielens.json"))
    a = p.parse_args(argv)
    from ooc_lowrank.datasets import load_movielens, load_movielens_side_features

    folder = os.path.join(data_dir(), "movielens-100k")
    if not os.path.exists(os.path.join(folder, "u.user")):
        print(f"MovieLens 100K not found in {folder}; set OOC_LOWRANK_DATA", file=sys.stderr)
        return 2

    def ratings(name):
        path = os.path.join(folder, name)
        return load_movielens(path + ".gz" if os.path.exists(path + ".gz") else path)

    feats = {v: load_movielens_side_features(folder, ids=ids) for v, ids in VARIANTS.items()}
    kw = dict(rank=a.rank, max_iter=a.max_iter, seed=a.seed)
    t0 = time.time()
    # lam per variant on u1.base alone (20 % held out)
    r, c, v = ratings("u1.base")
    val = np.random.default_rng(a.seed).random(r.size) < 0.2
    selection = {}
    for name, (users, items) in feats.items():
        scores = {}
        for lam in a.lams:
            m = fit_imc((r[~val], c[~val], v[~val]), users, items, lam=lam, **kw)
            scores[lam] = m.evaluate((r[val], c[val], v[val]), ["rmse"])["rmse"]
        selection[name] = {"validation_rmse": {str(k): s for k, s in scores.items()},
                           "lam": min(scores, key=scores.get)}
        print(f"{name}: validation RMSE by lam " + ", ".join(
            f"{k:g}: {s:.4f}" for k, s in scores.items()), flush=True)
    folds = []
    for f in a.folds:
        train, test = ratings(f"u{f}.base"), ratings(f"u{f}.test")
        rec = {"fold": f, "load_avg": os.getloadavg()}
        for name, (users, items) in feats.items():
            t = time.time()
            m = fit_imc(train, users, items, lam=selection[name]["lam"], **kw)
            rec[name] = {**m.evaluate(test, ["rmse", "mae"]), "seconds": round(time.time() - t, 1),
                         "n_iter": int(m.n_iter_), "n_passes": int(m.n_passes_)}
        t = time.time()
        rmse, mae = surprise_svd(train, test, a.seed)
        rec["surprise SVD"] = {"rmse": rmse, "mae": mae, "seconds": round(time.time() - t, 1)}
        mean = float(train[2].mean())
        rec["global mean"] = {"rmse": float(np.sqrt(np.mean((test[2] - mean) ** 2))),
                              "mae": float(np.mean(np.abs(test[2] - mean)))}
        folds.append(rec)
        print(f"u{f}: " + "  ".join(f"{k} RMSE {rec[k]['rmse']:.4f}" for k in
                                    (*VARIANTS, "surprise SVD", "global mean")), flush=True)
    methods = (*VARIANTS, "surprise SVD", "global mean")
    summary = {k: {s: float(np.mean([fd[k][s] for fd in folds])) for s in ("rmse", "mae")}
               for k in methods}
    res = {"benchmark": "imc_movielens", "settings": vars(a), "selection": selection,
           "folds": folds, "mean": summary, "seconds": round(time.time() - t0, 1)}
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as fh:
        json.dump(res, fh, indent=1)
    for k in methods:
        print(f"mean over folds {k}: RMSE {summary[k]['rmse']:.4f}  MAE {summary[k]['mae']:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
