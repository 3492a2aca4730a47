"""Which MVM solver ``solver="auto"`` should pick: L-BFGS and SGD (library defaults otherwise)
on dense low-dimensional views, dense wider views and sparse one-hot views, with time and test
quality measured in one run.  Results: ``benchmarks/results/mvm_auto.json``; the rule and its
reasons: ``docs/mvm.md``.

* mfeat-handwritten, one class (digit 0) against the rest: 6 dense standardized views, 649
  columns, 1,000 training rows (stratified 50/50 split); test accuracy.
* generated CP data (``generate_multiview``, rank 2, noise 0.05): 3 dense views of widths
  (4, 5, 3) and (200, 200, 200), 20,000 training rows; test RMSE (the noise floor is 0.05).
* MovieLens 100K u1 with user and item side views (2 sparse one-hot views, 2,674 columns,
  80,000 rows); test RMSE.  L-BFGS is capped at ``--movielens-lbfgs-iter`` iterations (the
  full default 200 took 197 s here before; docs/mvm.md).

    python benchmarks/mvm_auto.py [--out FILE] [--skip-movielens]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

import numpy as np

try:
    from benchmarks.bench_mvm import DATA, HERE, load_mfeat, write_results
except ImportError:  # run as a script from benchmarks/
    from bench_mvm import DATA, HERE, load_mfeat, write_results


def _run(make, fit, score):
    m = make()
    t = time.perf_counter()
    fit(m)
    s = time.perf_counter() - t
    return dict(seconds=round(s, 3), passes=int(m.n_passes_), n_iter=int(m.n_iter_),
                solver=m.solver_, **score(m))


def mfeat(rows=None):
    from ooc_lowrank.mvm import MultiViewMachineClassifier

    Xtr, Xte, ytr, yte, sizes = load_mfeat(rows)
    c = ytr.min()
    out = {}
    for solver in ("lbfgs", "sgd"):
        out[solver] = _run(
            lambda solver=solver: MultiViewMachineClassifier(view_sizes=sizes, solver=solver,
                                                             random_state=0),
            lambda m: m.fit(Xtr, ytr == c),
            lambda m: {"accuracy": float(m.score(Xte, yte == c))},
        )
    return out


def generated(view_dims, n_train, work):
    from ooc_lowrank.generators import generate_multiview
    from ooc_lowrank.mvm import MultiViewMachineRegressor

    ds = generate_multiview(os.path.join(work, f"g{sum(view_dims)}.zarr"), n_rows=n_train * 5 // 4,
                            seed=3, view_dims=view_dims, rank=2, noise_std=0.05,
                            dtype="float64", overwrite=True)
    V = [ds[f"X{p}"].read() for p in range(len(view_dims))]
    y = ds["y"].read()[:, 0]
    tr, te = slice(0, n_train), slice(n_train, None)
    out = {}
    for solver in ("lbfgs", "sgd"):
        out[solver] = _run(
            lambda solver=solver: MultiViewMachineRegressor(n_components=2, solver=solver,
                                                            random_state=0),
            lambda m: m.fit([v[tr] for v in V], y[tr]),
            lambda m: {"rmse": float(np.sqrt(np.mean((m.predict([v[te] for v in V]) - y[te]) ** 2)))},
        )
    return out


def movielens(work, lbfgs_iter):
    from ooc_lowrank.io.multiview import convert_movielens_views
    from ooc_lowrank.mvm import MultiViewMachineRegressor

    d = os.path.join(DATA, "movielens-100k")
    side = dict(user_file=os.path.join(d, "u.user"), item_file=os.path.join(d, "u.item"))
    tr = convert_movielens_views(os.path.join(d, "u1.base.gz"), f"{work}/u1b.zarr",
                                 overwrite=True, **side)
    te = convert_movielens_views(os.path.join(d, "u1.test.gz"), f"{work}/u1t.zarr",
                                 overwrite=True, **side)
    out = {}
    for solver, kw in (("sgd", {}), ("lbfgs", {"max_iter": lbfgs_iter})):
        out[solver] = _run(
            lambda solver=solver, kw=kw: MultiViewMachineRegressor(solver=solver, random_state=0,
                                                                   **kw),
            lambda m: m.fit(tr),
            lambda m: {"rmse": m.evaluate(te)["rmse"]},
        )
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(HERE, "results", "mvm_auto.json"))
    ap.add_argument("--skip-movielens", action="store_true")
    ap.add_argument("--movielens-lbfgs-iter", type=int, default=30)
    ap.add_argument("--small", action="store_true", help="tiny sizes (tests)")
    args = ap.parse_args(argv)
    n = 500 if args.small else 20000
    res = {"benchmark": "mvm_auto", "note": "2-core machine shared with other jobs: seconds "
           "are noisy, compare within a row"}
    res["mfeat_one_class"] = mfeat(rows=200 if args.small else None)
    print("mfeat", json.dumps(res["mfeat_one_class"]), flush=True)
    with tempfile.TemporaryDirectory() as work:
        for dims in ((4, 5, 3), (200, 200, 200)) if not args.small else ((4, 5, 3),):
            key = f"generated_dense_{'x'.join(map(str, dims))}"
            res[key] = generated(dims, n, work)
            print(key, json.dumps(res[key]), flush=True)
        if not args.skip_movielens and not args.small:
            res["movielens_u1_sparse"] = movielens(work, args.movielens_lbfgs_iter)
            print("movielens", json.dumps(res["movielens_u1_sparse"]), flush=True)
    return write_results(res, args.out)


if __name__ == "__main__":
    main()
