"""Evidence for the Maxide / KernelMaxide defaults (issue 28): a small grid scored by
validation on held-out observed labels of the *training* rows (never the test rows) on every
yahoo set, plus the test ranking loss of each setting only to report it.

Per cell (yahoo set x repetition of the SPEC 4.6 protocol at ``omega``): the rows hold-outs of
``split_observed(Y_obs, 0.25, rep + k, by="rows")`` for ``k < n_splits`` (what
``KernelMaxideCV`` / ``MaxideCV`` use) give a validation ranking loss for every setting of

* ``Maxide(n_components=k, alpha=lam)``, ``k`` in ``--maxide-ks`` (0 = every direction),
* ``KernelMaxide(n_features_map=r, gamma=scale * median, n_components=k, alpha=lam)``, ``k`` in
  ``--km-ks`` (0 = SPEC KM-6, the span form), ``scale`` in ``--scales``, ``r`` in
  ``--landmarks``;

the default is the setting with the lowest mean validation loss relative to each cell's best
(``pick``), the same rule on every dataset.  Records iterations and whether the stop fired.

``Maxide(alpha="auto")`` (issue 28, the default) against fixed weights, on training labels
only: ``--outer`` rows hold-outs of the training rows' observed labels (seeds ``1000 + rep +
o``, not the inner ones) are scored after fitting ``Maxide()`` (its own inner selection) and
``Maxide(alpha=a)`` for ``a`` in ``--fixed`` on the rest; then both on all observed labels,
their test ranking loss (reported only) and process CPU seconds per fit.

    python benchmarks/kernelmaxide_defaults.py --datasets arts business health --reps 0 1 \
        --out benchmarks/results/kernelmaxide_defaults.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np
from sklearn.base import clone

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from ooc_lowrank import datasets, metrics  # noqa: E402
from ooc_lowrank.gimc.features import median_gamma, sample_rows  # noqa: E402
from ooc_lowrank.kernelmaxide import KernelMaxide, Maxide, mask_labels, split_rows  # noqa: E402
from ooc_lowrank.kernelmaxide.cv import split_observed  # noqa: E402


def _settings(a):
    out = [("maxide", k, 0.0, 0, lam) for k in a.maxide_ks for lam in a.maxide_lams or a.lams]
    out += [("kernelmaxide", k, s, r, lam) for k in a.km_ks for s in a.scales
            for r in a.landmarks for lam in a.lams]  # fmt: skip
    return out


def _est(method, k, scale, landmarks, gmed, rep, a):
    if method == "maxide":
        return Maxide(n_components=k or None, alpha=1.0, max_iter=a.max_iter)
    return KernelMaxide(n_features_map=landmarks, gamma=gmed * scale, n_components=k or None,
                        max_iter=a.max_iter, random_state=rep)  # fmt: skip


def run_cell(X, Y, name, rep, a):
    train = split_rows(X.shape[0], 0.1, rep)
    Yobs = mask_labels(Y, a.omega, train=train, random_state=rep)
    rng = np.random.default_rng(np.random.RandomState(rep).randint(2**31 - 1))
    gmed = float(median_gamma(sample_rows(X, 1000, rng)))
    rows = []
    groups = sorted({s[:4] for s in _settings(a)})
    for method, k, scale, landmarks in groups:
        est = _est(method, k, scale, landmarks, gmed, rep, a)
        lams = [s[4] for s in _settings(a) if s[:4] == (method, k, scale, landmarks)]
        res = {lam: {"method": method, "k": k, "gamma_scale": scale, "landmarks": landmarks,
                     "lam": lam} for lam in lams}  # fmt: skip
        for j in range(a.n_splits):
            Yfit, Yval = split_observed(Yobs, 0.25, rep + j, by="rows")
            for lam, e in zip(lams, est._fit_lams(X, Yfit, lams)):
                res[lam][f"val{j}"] = float(e.observed_ranking_loss(X, Yval))
        t0 = time.perf_counter()
        fits = est._fit_lams(X, Yobs, lams)
        seconds = (time.perf_counter() - t0) / len(lams)  # shared setup: per lam, busy machine
        for lam, e in zip(lams, fits):
            S = e.decision_function(X[~train])
            res[lam]["fit_seconds_shared_setup"] = seconds
            res[lam].update(test=float(metrics.ranking_loss(Y[~train], S)), n_iter=e.n_iter_,
                            converged=e.converged_)  # fmt: skip
        rows += [res[lam] for lam in lams]
    for r in rows:
        r["val"] = float(np.mean([r[f"val{j}"] for j in range(a.n_splits)]))
    print(name, rep, flush=True)
    return {"dataset": name, "rep": rep, "omega": a.omega, "gamma_median": gmed, "settings": rows,
            "auto": auto_cell(X, Y, Yobs, train, rep, a)}  # fmt: skip


def auto_cell(X, Y, Yobs, train, rep, a):
    """``Maxide()`` (``alpha="auto"``) vs ``Maxide(alpha=f)``: outer hold-out ranking loss of the
    training labels, then test ranking loss and CPU seconds of the fits on all observed labels."""
    ests = {"auto": Maxide(random_state=rep, max_iter=a.max_iter)}
    ests |= {f"fixed_{f:g}": Maxide(alpha=f, max_iter=a.max_iter) for f in a.fixed}
    out = {key: {} for key in ests}
    for o in range(a.outer):
        Yfit, Yval = split_observed(Yobs, 0.25, 1000 + rep + o, by="rows")
        for key, est in ests.items():
            e = clone(est).fit(X, Yfit)
            out[key][f"outer{o}"] = float(e.observed_ranking_loss(X, Yval))
            if key == "auto":
                out[key][f"outer{o}_alpha"] = e.alpha_
    for key, est in ests.items():
        t0 = time.process_time()
        e = clone(est).fit(X, Yobs)
        out[key]["fit_cpu_seconds"] = time.process_time() - t0
        out[key]["alpha"] = e.alpha_
        out[key]["test"] = float(metrics.ranking_loss(Y[~train], e.decision_function(X[~train])))
        out[key]["outer"] = float(np.mean([out[key][f"outer{o}"] for o in range(a.outer)]))
        if key == "auto":
            out[key]["alpha_scores"] = {f"{k:g}": v for k, v in e.alpha_scores_.items()}
    return out


def _key(r):
    return (r["k"], r["gamma_scale"], r.get("landmarks", 0), r["lam"])


def pick(cells, method):
    """The setting of ``method`` with the lowest mean over cells of (validation - cell best)."""
    keys = {_key(r) for c in cells for r in c["settings"]
            if r["method"] == method}  # fmt: skip
    regret = {}
    for key in keys:
        v = []
        for c in cells:
            own = [r for r in c["settings"] if r["method"] == method]
            best = min(r["val"] for r in own)
            v += [r["val"] - best for r in own if _key(r) == key]
        regret[key] = float(np.mean(v))
    return min(regret, key=regret.get), regret


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--datasets", nargs="+", default=["arts", "business", "health"])
    ap.add_argument("--reps", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--omega", type=int, default=20)
    ap.add_argument("--n-splits", type=int, default=2)
    ap.add_argument("--landmarks", type=int, nargs="+", default=[1000])
    ap.add_argument("--max-iter", type=int, default=100)
    ap.add_argument("--lams", type=float, nargs="+", default=[1.0, 2.0, 4.0, 8.0])
    ap.add_argument("--maxide-ks", type=int, nargs="+", default=[0, 100])
    ap.add_argument("--maxide-lams", type=float, nargs="+", help="Maxide's lams (default --lams)")
    ap.add_argument("--km-ks", type=int, nargs="+", default=[100])
    ap.add_argument("--scales", type=float, nargs="+", default=[1.0, 2.0])
    ap.add_argument("--fixed", type=float, nargs="+", default=[4.0],
                    help="fixed Maxide weights compared with alpha='auto'")  # fmt: skip
    ap.add_argument("--outer", type=int, default=2, help="outer hold-outs for alpha='auto'")
    ap.add_argument("--rows", type=int, help="first rows only (a smoke run)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    cells, t0 = [], time.perf_counter()
    for name in a.datasets:
        X, Y = datasets.load_yahoo(name)
        if a.rows:
            X, Y = X[: a.rows], Y[: a.rows]
        for rep in a.reps:
            cells.append(run_cell(X, Y, name, rep, a))
            out = {"args": vars(a), "cells": cells, "seconds": time.perf_counter() - t0}
            for method in ("maxide", "kernelmaxide"):
                key, regret = pick(cells, method)
                out[f"pick_{method}"] = dict(zip(("k", "gamma_scale", "landmarks", "lam"), key))
                out[f"regret_{method}"] = sorted([[*k, v] for k, v in regret.items()],
                                                 key=lambda row: row[-1])  # fmt: skip
                out[f"test_{method}"] = {f"{c['dataset']}/{c['rep']}": r["test"] for c in cells
                                         for r in c["settings"] if r["method"] == method and
                                         _key(r) == key}  # fmt: skip
            auto = [c["auto"] for c in cells]
            out["auto_summary"] = {key: {"outer": float(np.mean([c[key]["outer"] for c in auto])),
                                         "test": float(np.mean([c[key]["test"] for c in auto]))}
                                   for key in auto[0]}  # fmt: skip
            with open(a.out, "w") as f:
                json.dump(out, f, indent=1)
    print(json.dumps({k: v for k, v in out.items() if k.startswith(("pick", "test", "auto_s"))},
                     indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
