"""MovieLens 100K with user and item side views, end to end with multi-view machines.

Converts a fold (``u1.base`` / ``u1.test`` by default) into two-view stores (user: one-hot id,
age bucket, gender, occupation; item: one-hot id, genres), holds out 10% of the training rows as
a validation set, fits the MVM regressor with both solvers (defaults otherwise; early stopping
on the validation set), prints test RMSE / MAE and writes a PNG of validation RMSE per epoch
(SGD) and per iteration (L-BFGS).

    python examples/movielens_mvm.py [--data DIR] [--fold 1] [--out DIR] [--max-rows N]

``--max-rows`` keeps the first N training rows (the tests run it small).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np

import ooc_lowrank as ool
from ooc_lowrank.io.multiview import convert_movielens_views
from ooc_lowrank.mvm import MultiViewMachineRegressor


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default_data = os.path.join(
        os.environ.get("OOC_LOWRANK_DATA", os.path.join(os.path.dirname(__file__), "..", "..",
                                                       "shared", "data")), "movielens-100k")
    ap.add_argument("--data", default=default_data, help="folder with u.user, u.item, uN.base/test")
    ap.add_argument("--fold", type=int, default=1, help="fold 1..5 (default 1)")
    ap.add_argument("--out", default=None, help="folder for stores and the PNG (default: a temp dir)")
    ap.add_argument("--max-rows", type=int, default=None, help="keep the first N training rows")
    args = ap.parse_args(argv)
    out = args.out or tempfile.mkdtemp(prefix="mvm-movielens-")
    os.makedirs(out, exist_ok=True)

    def src(name):
        for cand in (name, name + ".gz"):
            p = os.path.join(args.data, cand)
            if os.path.exists(p):
                return p
        raise SystemExit(f"missing {name} in {args.data} (set OOC_LOWRANK_DATA or --data)")

    side = dict(user_file=src("u.user"), item_file=src("u.item"))
    train = convert_movielens_views(src(f"u{args.fold}.base"), os.path.join(out, "train.zarr"),
                                    overwrite=True, **side)
    test = convert_movielens_views(src(f"u{args.fold}.test"), os.path.join(out, "test.zarr"),
                                   overwrite=True, **side)
    n = train.n_rows if args.max_rows is None else min(args.max_rows, train.n_rows)
    rng = np.random.default_rng(0)
    val_mask = rng.random(n) < 0.1
    X = [train[f"X{p}"].read(0, n) for p in range(2)]
    y = train["y"].read(0, n)[:, 0]
    tr, va = ~val_mask, val_mask
    curves, results = {}, {}
    for solver in ("sgd", "lbfgs"):
        t = time.perf_counter()
        m = MultiViewMachineRegressor(solver=solver, random_state=0)
        m.fit([x[tr] for x in X], y[tr], eval_set=([x[va] for x in X], y[va]))
        secs = time.perf_counter() - t
        curves[solver] = np.sqrt(m.validation_path_)
        results[solver] = dict(m.evaluate(test), seconds=round(secs, 2), iterations=m.n_iter_,
                               best_iteration=m.best_iter_)
        print(f"{solver:6s} test RMSE {results[solver]['rmse']:.4f}  MAE "
              f"{results[solver]['mae']:.4f}  ({secs:.1f} s, {m.n_iter_} iterations, best "
              f"{m.best_iter_})")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 4))
        for solver, c in curves.items():
            ax.plot(np.arange(1, c.size + 1), c, marker="o", ms=3,
                    label=f"{solver} ({'epoch' if solver == 'sgd' else 'iteration'})")
        ax.set_xlabel("epoch (SGD) / iteration (L-BFGS)")
        ax.set_ylabel("validation RMSE")
        ax.set_title(f"MVM on MovieLens 100K u{args.fold}, user + item views")
        ax.legend()
        png = os.path.join(out, "movielens_mvm_validation.png")
        fig.tight_layout()
        fig.savefig(png, dpi=100)
        print(f"wrote {png}")
    except ImportError:
        print("matplotlib is not installed: no PNG (pip install 'ooc-lowrank[bench]')")
    return results


if __name__ == "__main__":
    main()
    raise SystemExit(0)
