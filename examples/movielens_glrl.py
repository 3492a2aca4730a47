"""Robust matrix factorisation of MovieLens 100K with nonsmooth GLRL (L1 loss, rank 10).

Converts the u1 fold (``u1.base`` / ``u1.test``) to observation stores that index the same
943 x 1682 matrix, fits ``GreedyLowRank(loss="l1")`` out of core, reports the test MAE, saves and
reloads the model and prints the top-5 movies of a few users.

Data: ``$OOC_LOWRANK_DATA/movielens-100k`` (default ``../shared/data`` relative to the repository
root).  Run: ``python examples/movielens_glrl.py``.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

import ooc_lowrank
from ooc_lowrank.glrl import GreedyLowRank
from ooc_lowrank.io.ratings import convert_movielens

REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("OOC_LOWRANK_DATA", REPO.parent / "shared" / "data")) / "movielens-100k"


def main():
    if not (DATA / "u1.base.gz").exists():
        print(f"skipping: MovieLens 100K not found in {DATA} (set OOC_LOWRANK_DATA)")
        return 0
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    with tempfile.TemporaryDirectory() as tmp:
        train = convert_movielens(
            str(DATA / "u1.base.gz"), f"{tmp}/u1.base.zarr", shape=(943, 1682)
        )
        test = convert_movielens(str(DATA / "u1.test.gz"), f"{tmp}/u1.test.zarr", shape=(943, 1682))
        # start at mean + user and movie biases (2 of the 10 terms), settings chosen on
        # validation splits of the training folds (benchmarks/bench_glrl.py, ML_PARAMS)
        est = GreedyLowRank(
            loss="l1",
            n_components=10,
            init="bias",
            bias_reg=5.0,
            step_size=2.0,
            max_inner=2,
            nu=0.99,
            random_state=0,
            verbose=True,
            callback=lambda it, t, f: print(f"step {it}: L1 objective {f:.1f} ({t:.1f} s)"),
        )
        est.fit(train)
        print("rank-one terms per step:", est.inner_counts_.tolist())
        print("test metrics:", est.evaluate(test, ["mae", "rmse"]))
        est.save(f"{tmp}/model")
        back = ooc_lowrank.load(f"{tmp}/model")
        idx, scores = back.top_k(np.array([0, 1, 2]), k=5)
        for u, (i, s) in enumerate(zip(idx, scores, strict=True)):
            print(f"user {u + 1}: top movies {(i + 1).tolist()} scores {np.round(s, 2).tolist()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
