"""IMC-RFF (``GIMC(learn_features=False)``): the ridge weight ``alpha=1`` against
``alpha="auto"`` (leave-one-out top-1 selection on the training rows, issue 24), beside
RBFSampler(2m, median-heuristic gamma) + Ridge(alpha=1), on the datasets of issue 24.

Per dataset and gamma scale (multiplier of the median heuristic; 0.125 is the library default):
test P@1 (multi-label) or accuracy (multi-class) and fit seconds of IMC-RFF with ``alpha=1``
and ``alpha="auto"`` (the chosen alpha and its leave-one-out rate, computed on training rows
only; the test rows are only scored), and of the peer.  ``alpha="auto"`` at the default
gamma scale also scores the median heuristic's width (gamma scale 1) where
``core.width_selection`` allows it (the demo shape); the run "widths scored" scores it on
every dataset, to show what the size gate skips: ``gamma_scale_`` is the width chosen,
``loo_top1_per_gamma_scale`` the best leave-one-out rate of each width.  Seconds are wall
time of one fit after a warm-up; on a busy machine they are noise (the file records the CPU
seconds too).

    python benchmarks/imc_rff_alpha.py   # the six datasets of issue 24 and five more

Data: ``$OOC_LOWRANK_DATA`` (default ``../shared/data``); the demo shape is generated
(32,000 training rows x 100, 50 labels, m = 200, as ``bench_small.py``'s ``gimc_demo``).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))


def load(name, workdir, demo_rows):
    """(X_train, Y_train, X_test, Y_test, m): Y a CSR 0/1 matrix or a class vector."""
    if name == "demo":
        from ooc_lowrank.generators import generate_multilabel

        ds = generate_multilabel(str(Path(workdir) / "demo.zarr"), n_rows=demo_rows,
                                 n_features=100, n_labels=50, seed=0, overwrite=True)  # fmt: skip
        X, Y = ds["X"].read(), sp.csr_matrix(ds["Y"].read())
        n = int(0.8 * demo_rows)
        return X[:n], Y[:n], X[n:], Y[n:], 200
    if name in ("mfeat", "segment"):  # 70/30 split, standardized on the training rows
        import bench_gimc_multiclass as bm

        X, y, _ = bm.load_dataset(name, bm.data_dir())
        p = np.random.default_rng(0).permutation(len(y))
        tr, te = p[: int(0.7 * len(y))], p[int(0.7 * len(y)) :]
        Xtr, Xte = bm.standardize(X[tr], X[te])
        return Xtr, y[tr], Xte, y[te], 500
    import gimc_defaults as gd

    return (*gd.load(name, gd.data_dir(), workdir), 500)


def top1(Y, S, classes=None):
    """P@1 (CSR labels) or accuracy (class vector) of the scores ``S``."""
    top = np.argmax(S, axis=1)
    if classes is not None:
        return float(np.mean(classes[top] == Y))
    return float(np.asarray(Y[np.arange(Y.shape[0]), top]).mean())


def timed(fn):
    t, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - t, time.process_time() - c


def run(name, gamma_scales, workdir, demo_rows, log):
    from sklearn.kernel_approximation import RBFSampler
    from sklearn.linear_model import Ridge

    from ooc_lowrank.gimc import GIMC
    from ooc_lowrank.gimc.features import median_gamma, sample_rows

    Xtr, Ytr, Xte, Yte, m = load(name, workdir, demo_rows)
    classes = np.unique(Ytr) if Ytr.ndim == 1 else None
    GIMC(n_features_map=8, learn_features=False, alpha="auto").fit(Xtr[:300], Ytr[:300])  # JIT
    out = {"n_train": int(Xtr.shape[0]), "n_test": int(Xte.shape[0]), "d": int(Xtr.shape[1]),
           "m": m, "metric": "accuracy" if classes is not None else "p@1", "runs": {}}  # fmt: skip
    from ooc_lowrank.gimc import core

    gate = core.WIDTH_ROWS_PER_COST
    g0 = None
    for gs, alpha, widths in [(gs, a, False) for gs in gamma_scales for a in (1.0, "auto")] + [
        (min(gamma_scales), "auto", True)
    ]:
        # widths: the extra kernel width of alpha="auto" scored on every dataset, whatever
        # core.width_selection says (what the size gate skips on the small ones)
        core.WIDTH_ROWS_PER_COST = 0 if widths else gate
        try:
            g, wall, cpu = timed(lambda: GIMC(n_features_map=m, learn_features=False,  # noqa: B023
                                              gamma_scale=gs, alpha=alpha,  # noqa: B023
                                              random_state=0).fit(Xtr, Ytr))  # fmt: skip
        finally:
            core.WIDTH_ROWS_PER_COST = gate
        g0 = g0 or g.gamma_[0] / gs  # the median heuristic's gamma
        r = {"test": top1(Yte, g.decision_function(Xte), classes), "seconds_busy": wall,
             "cpu_seconds": cpu, "alpha_": g.alpha_, "n_passes": g.n_passes_,
             "gamma_scale_": g.gamma_[0] / g0,
             "loo_top1": max(g.alpha_scores_.values()) if g.alpha_scores_ else None,
             "loo_top1_per_gamma_scale": {round(k / g0, 6): v
                                          for k, v in g.gamma_scores_.items()}}  # fmt: skip
        key = f"IMC-RFF gamma_scale={gs} alpha={alpha}" + (" widths scored" if widths else "")
        out["runs"][key] = r
        log(f"{name} {key}: test {r['test']:.4f} alpha_ {r['alpha_']:.3g} gamma_scale_ "
            f"{r['gamma_scale_']:.3g} {wall:.2f}s ({cpu:.2f} CPU s)")  # fmt: skip
    gamma = median_gamma(sample_rows(Xtr, 1000, np.random.default_rng(0)))
    Ad = (Ytr[:, None] == classes[None, :]).astype(float) if classes is not None else Ytr.toarray()

    def peer():
        f = RBFSampler(gamma=gamma, n_components=2 * m, random_state=0)
        return f, Ridge(alpha=1.0).fit(f.fit_transform(Xtr), Ad)

    (f, ridge), wall, cpu = timed(peer)
    r = {"test": top1(Yte, ridge.predict(f.transform(Xte)), classes), "seconds_busy": wall,
         "cpu_seconds": cpu}  # fmt: skip
    out["runs"][f"RBFSampler({2 * m}, median gamma) + Ridge(1)"] = r
    log(f"{name} peer: test {r['test']:.4f} {wall:.2f}s ({cpu:.2f} CPU s)")
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--datasets", nargs="+",
                    default=["demo", "bibtex", "yahoo-arts", "yahoo-business", "mfeat", "segment",
                             "scene", "yeast", "emotions", "medical", "enron"])
    ap.add_argument("--gamma-scales", nargs="+", type=float, default=[0.125, 1.0])
    ap.add_argument("--demo-rows", type=int, default=40_000)
    ap.add_argument("--loo-rows", type=int, default=None,
                    help="rows scored by alpha='auto' (default: core.LOO_ROWS)")
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--json", default=str(REPO / "benchmarks" / "results" / "imc_rff_alpha.json"))
    a = ap.parse_args(argv)
    from ooc_lowrank.gimc import core

    if a.loo_rows:
        core.LOO_ROWS = int(a.loo_rows)
    res = {"note": "test scores only reported; alpha='auto' selects on training rows; seconds "
                   "are wall time on a busy machine (other jobs running), CPU seconds beside",
           "loo_rows": core.LOO_ROWS, "datasets": {}}  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        for name in a.datasets:
            res["datasets"][name] = run(name, a.gamma_scales, a.workdir or tmp, a.demo_rows,
                                        lambda s: print(s, flush=True))  # fmt: skip
    Path(a.json).write_text(json.dumps(res, indent=1) + "\n")
    return res


if __name__ == "__main__":
    main()
