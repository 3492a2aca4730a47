"""Seconds per fit of KernelMaxide-n, KernelMaxide-f and Maxide on one yahoo cell, in one
process (paper Figure 1: KernelMaxide-n close to or faster than Maxide).

Arts by default, omega = 20 %, split / mask of repetition 0, fixed hyperparameters
(``gamma = 2 x`` the median heuristic, ``lam = 2``; Maxide ``lam = 4``), 100 APG iterations
at most.  One warm-up fit of each (Numba compilation, imports) is not timed; then ``--repeats``
timed fits each, interleaved, with the load average beside them; CPU seconds of the process
too (all work runs in this process, single-threaded BLAS and Numba: on a loaded machine the
CPU time is the cost, the wall time mostly the wait for a core).  Also records iterations and
engine passes (structural counts that do not depend on the load), and the final objective.
``--plain-too``: also KernelMaxide-n and Maxide with plain FISTA (``restart=None`` in
``core.apg``; the default is the adaptive restart), before / after in the same process.
``kernelmaxide_n_orthonormal``: KernelMaxide-n with ``n_components=100`` (the orthonormal
kernel basis, an [E] variant; docs/kernelmaxide.md section 8).  The test-row ranking loss of
every method is recorded beside its time.

    python benchmarks/kernelmaxide_speed.py --out benchmarks/results/kernelmaxide_speed.json
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import time
from unittest import mock

import numpy as np

from ooc_lowrank.datasets import load_yahoo
from ooc_lowrank.gimc.features import median_gamma, sample_rows
from ooc_lowrank.kernelmaxide import KernelMaxide, Maxide, core, mask_labels, split_rows


class Plain:
    """``mk()`` fitted with plain FISTA (no momentum restart)."""

    apg = functools.partial(core.apg, restart=None)

    def __init__(self, mk):
        self.est = mk()

    def fit(self, X, Y):
        with mock.patch.object(core, "apg", self.apg):
            self.est.fit(X, Y)
        self.n_iter_, self.n_passes_ = self.est.n_iter_, self.est.n_passes_
        self.objective_ = self.est.objective_
        return self


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dataset", default="arts")
    ap.add_argument("--omega", type=float, default=20)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=None)
    ap.add_argument("--plain-too", action="store_true")
    a = ap.parse_args()
    X, Y = load_yahoo(a.dataset)
    train = split_rows(X.shape[0], 0.1, 0)
    test = np.setdiff1d(np.arange(X.shape[0]), np.flatnonzero(train))
    Yobs = mask_labels(Y, a.omega, train=train, random_state=0)
    g = 2 * median_gamma(sample_rows(X, 1000, np.random.default_rng(0)))
    makers = {
        "kernelmaxide_n": lambda: KernelMaxide(n_features_map=1000, gamma=g, alpha=2.0, random_state=0),
        "kernelmaxide_n_orthonormal": lambda: KernelMaxide(
            n_features_map=1000, gamma=g, alpha=2.0, n_components=100, random_state=0
        ),
        "kernelmaxide_f": lambda: KernelMaxide(n_features_map=None, gamma=g, alpha=2.0, random_state=0),
        "maxide": lambda: Maxide(alpha=4.0),
    }
    if a.plain_too:
        makers["kernelmaxide_n_plain"] = functools.partial(Plain, makers["kernelmaxide_n"])
        makers["maxide_plain"] = functools.partial(Plain, makers["maxide"])
    for mk in makers.values():  # warm-up
        mk().fit(X, Yobs)
    out = {k: {"seconds": [], "cpu_seconds": [], "load": []} for k in makers}
    for _ in range(a.repeats):
        for name, mk in makers.items():
            est = mk()
            t, c = time.perf_counter(), time.process_time()
            est.fit(X, Yobs)
            out[name]["seconds"].append(time.perf_counter() - t)
            out[name]["cpu_seconds"].append(time.process_time() - c)
            out[name]["load"].append(os.getloadavg()[0])
            out[name].update(n_iter=est.n_iter_, n_passes=est.n_passes_,
                             objective=float(est.objective_[-1]))  # fmt: skip
            fitted = getattr(est, "est", est)  # Plain wraps the estimator
            rl = fitted.evaluate(X[test], "ranking_loss", Y=Y[test])["ranking_loss"]
            out[name]["test_ranking_loss"] = rl
    for name in makers:
        out[name]["median_seconds"] = float(np.median(out[name]["seconds"]))
        out[name]["median_cpu_seconds"] = float(np.median(out[name]["cpu_seconds"]))
    for key in ("seconds", "cpu_seconds"):
        base = out["maxide"][f"median_{key}"]
        out[f"ratio_to_maxide_{key}"] = {k: out[k][f"median_{key}"] / base for k in makers}
    out["setup"] = dict(dataset=a.dataset, omega=a.omega, shape=list(X.shape),
                        n_labels=int(Y.shape[1]), n_observed=int(Yobs.nnz))  # fmt: skip
    print(json.dumps(out, indent=1))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
