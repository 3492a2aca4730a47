"""Semi-supervised clustering of UCI Segment end to end (GIMC Algorithm 2, SPEC 1.5.5 / 1.7).

    python examples/segment_clustering.py                 # 10n constraints, m = 500
    python examples/segment_clustering.py --rows 300 --m 20 --max-iter 3 --lams 1

Steps: convert ``segment.dat`` to a store (the library's ``dense_text`` converter; the CLI
equivalent is ``ooc-lowrank convert dense_text segment.dat segment.zarr``), standardize the 19
features, sample ``c * n`` must-link / cannot-link pairs from the classes (the paper's
protocol; real use would collect them), fit with the default ``alpha="auto"`` (``alpha`` chosen
on 20 % held-out constraints, then a refit on all, inside ``fit``), and compare the pairwise
error (1 - Rand index) with k-means on the same features.
Data: ``$OOC_LOWRANK_DATA/segment/segment.dat`` (default ``../shared/data``).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def data_dir(arg=None) -> Path:
    repo = Path(__file__).resolve().parents[1]
    return Path(arg or os.environ.get("OOC_LOWRANK_DATA", repo.parent / "shared" / "data"))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", default=None)
    p.add_argument("--workdir", default=None)
    p.add_argument("--c", type=float, default=10, help="|Omega| = c * n constraints")
    p.add_argument("--m", type=int, default=500)
    p.add_argument("--max-iter", type=int, default=20)
    p.add_argument("--lams", type=float, nargs="+", default=None,
                   help="candidates for alpha (default: the estimator's alpha='auto')")
    p.add_argument("--rows", type=int, default=None, help="the first ROWS rows only")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    src = data_dir(a.data_dir) / "segment" / "segment.dat"
    if not src.exists():
        print(f"Segment not found at {src}; set OOC_LOWRANK_DATA or pass --data-dir",
              file=sys.stderr)
        return 2
    from sklearn.preprocessing import StandardScaler

    from ooc_lowrank.imc import GIMCClustering, clustering_error, sample_constraints
    from ooc_lowrank.imc.clustering import kmeans_blocks
    from ooc_lowrank.io import convert
    from ooc_lowrank.storage import open_dataset

    store = Path(a.workdir or tempfile.mkdtemp(prefix="segment-")) / "segment.zarr"
    convert("dense_text", [str(src)], str(store), overwrite=True)
    ds = open_dataset(str(store))
    X, y = ds["X"].read(), ds["y"].read()[:, 0].astype(np.int64)
    if a.rows:
        X, y = X[: a.rows], y[: a.rows]
    X = StandardScaler().fit_transform(X)
    n, k = X.shape[0], int(np.unique(y).size)
    cons = sample_constraints(y, int(a.c * n), random_state=a.seed)
    print(f"{store}: n = {n}, d = {X.shape[1]}, {k} classes; {cons[0].size} constraints "
          f"({100 * cons[2].mean():.1f} % must-link)")
    t0 = time.time()
    model = GIMCClustering(n_clusters=k, n_features_map=a.m, max_iter=a.max_iter,
                           alpha="auto" if a.lams is None else a.lams, random_state=a.seed)
    model.fit(X, constraints=cons)
    print("held-out constraint error by lam: "
          + ", ".join(f"{lam:g}: {e:.4f}" for lam, e in model.alpha_scores_.items())
          + f" (selection {model.selection_time_:.1f} s)")
    err = clustering_error(model.labels_, y)
    km, _, _ = kmeans_blocks(X, k, random_state=a.seed)
    print(f"GIMC-LFF (lam = {model.alpha_:g}): pairwise error {err:.4f}   "
          f"k-means: {clustering_error(km, y):.4f}   ({time.time() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
