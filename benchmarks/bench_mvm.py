"""Multi-view machines on MovieLens 100K (user and item side views) and mfeat-handwritten,
against peers measured in the same run.

* Regression (rating), folds u1..u5: MVM regressor with library defaults (SGD) and with
  ``solver="lbfgs"``; myFM's second-order FM (Bayesian, Gibbs sampling, rank 10) on the same
  features (the two views side by side); scikit-surprise SVD on the ratings alone.
* Binary (rating >= 4): MVM classifier (defaults) vs myFM's ordered-probit-free
  ``MyFMGibbsClassifier`` at rank 10: accuracy and AUC.
* mfeat-handwritten (6 views, 10 classes): ``OneVsRestClassifier(MultiViewMachineClassifier)``
  with ``solver="lbfgs"``
  vs scikit-learn's RBF ``SVC`` on the concatenated, standardized views (stratified 50/50 split).

Peers are optional (``pip install myfm scikit-surprise``; myFM needs ``setuptools<81``); a
missing peer is reported as such.  Results go to ``benchmarks/results/mvm.json``.

    python benchmarks/bench_mvm.py [--folds 1 2 3 4 5] [--lbfgs-folds 1] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

import numpy as np
import scipy.sparse as sp

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.environ.get("OOC_LOWRANK_DATA", os.path.join(HERE, "..", "..", "shared", "data"))


def _timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def movielens(folds, lbfgs_folds, work):
    from sklearn.metrics import roc_auc_score

    from ooc_lowrank.io.multiview import convert_movielens_views
    from ooc_lowrank.mvm import MultiViewMachineClassifier, MultiViewMachineRegressor

    d = os.path.join(DATA, "movielens-100k")
    side = dict(user_file=os.path.join(d, "u.user"), item_file=os.path.join(d, "u.item"))
    res = {}
    for k in folds:
        row = {}
        tr = convert_movielens_views(os.path.join(d, f"u{k}.base.gz"), f"{work}/u{k}b.zarr",
                                     overwrite=True, **side)
        te = convert_movielens_views(os.path.join(d, f"u{k}.test.gz"), f"{work}/u{k}t.zarr",
                                     overwrite=True, **side)
        m, s = _timed(lambda tr=tr: MultiViewMachineRegressor(random_state=0).fit(tr))
        row["mvm_sgd"] = dict(m.evaluate(te), seconds=s)
        if k in lbfgs_folds:
            m, s = _timed(lambda tr=tr: MultiViewMachineRegressor(solver="lbfgs", random_state=0).fit(tr))
            row["mvm_lbfgs"] = dict(m.evaluate(te), seconds=s, passes=m.n_passes_)
        Xtr = sp.hstack([tr["X0"].read(), tr["X1"].read()], format="csr")
        Xte = sp.hstack([te["X0"].read(), te["X1"].read()], format="csr")
        ytr, yte = tr["y"].read()[:, 0], te["y"].read()[:, 0]
        try:
            import myfm

            fm, s = _timed(lambda: myfm.MyFMRegressor(rank=10, random_seed=0).fit(
                Xtr, ytr, n_iter=200, n_kept_samples=190))
            p = fm.predict(Xte)
            row["myfm_gibbs_rank10"] = dict(rmse=float(np.sqrt(np.mean((p - yte) ** 2))),
                                            mae=float(np.mean(np.abs(p - yte))), seconds=s)
            btr = (ytr >= 4).astype(int)
            bte = (yte >= 4).astype(int)
            fc, s = _timed(lambda: myfm.MyFMClassifier(rank=10, random_seed=0).fit(
                Xtr, btr, n_iter=200, n_kept_samples=190))
            pp = fc.predict_proba(Xte)
            row["myfm_classifier_rank10"] = dict(accuracy=float(np.mean((pp > 0.5) == bte)),
                                                 auc=float(roc_auc_score(bte, pp)), seconds=s)
        except ImportError as e:
            row["myfm"] = f"not installed: {e}"
        mc, s = _timed(lambda: MultiViewMachineClassifier(random_state=0).fit(
            [tr["X0"].read(), tr["X1"].read()], (ytr >= 4).astype(int)))
        row["mvm_classifier"] = dict(mc.evaluate([te["X0"].read(), te["X1"].read()],
                                                 y=(yte >= 4).astype(int)), seconds=s)
        try:
            from surprise import SVD, Dataset, Reader

            def load(f):
                a = np.loadtxt(os.path.join(d, f), dtype=int)[:, :3]
                return a

            a_tr, a_te = load(f"u{k}.base.gz"), load(f"u{k}.test.gz")
            import pandas as pd

            data = Dataset.load_from_df(pd.DataFrame(a_tr, columns=["u", "i", "r"]),
                                        Reader(rating_scale=(1, 5)))
            algo = SVD(random_state=0)
            _, s = _timed(lambda: algo.fit(data.build_full_trainset()))
            p = np.array([algo.predict(u, i).est for u, i, _ in a_te])
            row["surprise_svd"] = dict(rmse=float(np.sqrt(np.mean((p - a_te[:, 2]) ** 2))),
                                       mae=float(np.mean(np.abs(p - a_te[:, 2]))), seconds=s)
        except ImportError as e:
            row["surprise"] = f"not installed: {e}"
        print(f"u{k}", json.dumps(row), flush=True)
        res[f"u{k}"] = row
    return res


def mfeat_split():
    """mfeat-handwritten's six views side by side, a stratified 50/50 split (seed 0),
    standardized on the training half: ``(Xtr, Xte, ytr, yte, view_sizes)``."""
    import scipy.io
    from sklearn.model_selection import train_test_split
    from sklearn.preprocessing import StandardScaler

    mat = scipy.io.loadmat(os.path.join(DATA, "mfeat-handwritten", "handwritten.mat"))
    views = [np.asarray(v, float) for v in mat["X"].ravel()]
    y = np.asarray(mat["Y"]).ravel()
    X = np.hstack(views)
    sizes = [v.shape[1] for v in views]
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.5, stratify=y, random_state=0)
    sc = StandardScaler().fit(Xtr)
    return sc.transform(Xtr), sc.transform(Xte), ytr, yte, sizes


def mfeat():
    from sklearn.multiclass import OneVsRestClassifier
    from sklearn.svm import SVC

    from ooc_lowrank.mvm import MultiViewMachineClassifier

    Xtr, Xte, ytr, yte, sizes = mfeat_split()
    # dense, low-dimensional views: the L-BFGS solver (docs/mvm.md).  On a 25% validation split
    # of the training half, L-BFGS (100 iterations) reached 0.928 accuracy, SGD with default
    # settings 0.67 and with 40 epochs at learning rate 0.02 0.76.
    ovr = OneVsRestClassifier(MultiViewMachineClassifier(view_sizes=sizes, random_state=0,
                                                         solver="lbfgs", max_iter=100))
    _, s1 = _timed(lambda: ovr.fit(Xtr, ytr))
    svc = SVC()
    _, s2 = _timed(lambda: svc.fit(Xtr, ytr))
    out = {"mvm_ovr": dict(accuracy=float(ovr.score(Xte, yte)), seconds=s1),
           "sklearn_svc_rbf": dict(accuracy=float(svc.score(Xte, yte)), seconds=s2)}
    print("mfeat", json.dumps(out), flush=True)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--folds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    ap.add_argument("--lbfgs-folds", type=int, nargs="*", default=[1])
    ap.add_argument("--skip-mfeat", action="store_true")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "mvm.json"))
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as work:
        res = {"benchmark": "mvm", "movielens": movielens(args.folds, set(args.lbfgs_folds), work)}
    if not args.skip_mfeat:
        res["mfeat"] = mfeat()
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)
    return res


if __name__ == "__main__":
    main()
