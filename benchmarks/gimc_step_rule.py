"""GIMC line-search step rule across datasets (issue 25: trials per iteration).

Fits GIMC with each step rule (``gimc.core.STEP_RULES``) on the same data and seed and reports,
per problem and rule: Armijo trials per iteration (``FitResult.trials``), passes, the objective
after every iteration and a held-out metric.  The metric is measured on rows held out of the
*training* split (never a test split: the rule is chosen with this evidence).

Problems (``--only`` a comma list; sizes are arguments):

* ``delicious``: the Delicious-large topic model of ``bench_scale.py delicious`` scaled down
  (``--del-rows`` rows, ``--del-features`` features, ``--del-labels`` labels, 300 non-zeros and
  75 labels a row), GIMC ``features="both"``, ``--del-m``; P@1 on generated held-out rows.
* ``bibtex``: the README's command (GIMC-LFF m = 500, defaults) on 80 % of Bibtex's training
  rows, P@1 on the other 20 %.
* ``demo``: ``ooc-lowrank demo``'s shape (generate_multilabel 40,000 x 100, 50 labels, m = 200,
  alpha = 1, max_iter = 15), P@1 on the generated rows after the first 80 %.
* ``arts`` / ``business``: yahoo sets as multi-label (GIMC-LFF m = 500), 80/20 split.
* ``mfeat`` / ``segment``: multi-class (GIMC-LFF m = 500), 80/20 stratified split, accuracy.

    python benchmarks/gimc_step_rule.py                        # all problems, ~10-20 min busy
    python benchmarks/gimc_step_rule.py --only demo,mfeat --max-iter 5 --out /tmp/s.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))
RESULTS = os.path.join(HERE, "results")


def _split(n, frac=0.8, seed=0, y=None):
    if y is not None:
        from sklearn.model_selection import train_test_split

        tr, va = train_test_split(np.arange(n), train_size=frac, stratify=y, random_state=seed)
        return np.sort(tr), np.sort(va)
    p = np.random.default_rng(seed).permutation(n)
    k = int(frac * n)
    return np.sort(p[:k]), np.sort(p[k:])


def problem_delicious(a):
    import scipy.sparse as sp

    from benchmarks.bench_scale import delicious_chunk

    rng = np.random.default_rng([0, 0, 0])
    n = a.del_rows + a.del_rows // 5
    X, Y = delicious_chunk(rng, n, a.del_features, a.del_labels, 300, 75.0, a.del_topics, 0)
    X, Y = sp.csr_matrix(X), sp.csr_matrix(Y)
    tr, va = np.arange(a.del_rows), np.arange(a.del_rows, n)
    kw = dict(n_features_map=a.del_m, features="both", alpha=a.del_alpha)
    return X[tr], Y[tr], X[va], Y[va], kw, "p@1"


def problem_bibtex(a):
    import tempfile
    from pathlib import Path

    import bibtex_end_to_end as be

    from ooc_lowrank.storage import open_dataset

    work = Path(a.workdir or tempfile.mkdtemp(prefix="steprule-"))
    stores = be.convert(be.data_dir(None) / "bibtex", work / "bibtex")
    ds = open_dataset(stores["train"])
    X, Y = ds["X"].read(), ds["Y"].read()
    tr, va = _split(X.shape[0])
    return X[tr], Y[tr], X[va], Y[va], dict(n_features_map=500), "p@1"


def problem_demo(a):
    import tempfile

    from ooc_lowrank.generators import generate_multilabel
    from ooc_lowrank.storage import open_dataset

    url = os.path.join(a.workdir or tempfile.mkdtemp(prefix="steprule-"), "demo.zarr")
    generate_multilabel(url, n_rows=40_000, n_features=100, n_labels=50, seed=0, overwrite=True)
    ds = open_dataset(url)
    X, Y = ds["X"].read(), ds["Y"].read()
    k = 32_000
    kw = dict(n_features_map=200, alpha=1.0, max_iter=15)
    return X[:k], Y[:k], X[k:], Y[k:], kw, "p@1"


def _yahoo(name):
    def load(a):
        from ooc_lowrank.datasets import load_yahoo

        X, Y = load_yahoo(name)
        tr, va = _split(X.shape[0])
        return X[tr], Y[tr], X[va], Y[va], dict(n_features_map=500), "p@1"

    return load


def _multiclass(name):
    def load(a):
        from sklearn.preprocessing import StandardScaler

        from benchmarks.bench_gimc_multiclass import data_dir, load_dataset

        X, y, _ = load_dataset(name, data_dir())
        tr, va = _split(X.shape[0], y=y)
        sc = StandardScaler().fit(X[tr])
        return sc.transform(X[tr]), y[tr], sc.transform(X[va]), y[va], dict(n_features_map=500), \
            "accuracy"  # fmt: skip

    return load


PROBLEMS = {
    "delicious": problem_delicious,
    "bibtex": problem_bibtex,
    "demo": problem_demo,
    "arts": _yahoo("arts"),
    "business": _yahoo("business"),
    "mfeat": _multiclass("mfeat"),
    "segment": _multiclass("segment"),
}


#: ``--rules quadratic-uncapped``: a rule without ``core.objective_step_cap`` (the first trial
#: at most 2 f / ||g||^2) and without ``core.rejection_bound``'s stop (issue 25).
UNCAPPED = "-uncapped"


def fit_one(X, Y, Xv, Yv, kw, metric, rule, max_iter):
    from ooc_lowrank.gimc import GIMC, core

    from benchmarks.bench_scale import gimc_fit_result, search_record

    uncapped = rule.endswith(UNCAPPED)  # the rule without the first-trial cap and the stop
    old = (core.STEP_RULE, core.objective_step_cap, core.rejection_bound)
    core.STEP_RULE = rule.removesuffix(UNCAPPED)
    if uncapped:
        core.objective_step_cap = lambda f, gnorm2: np.inf
        core.rejection_bound = lambda eta, gnorm2: np.inf
    try:
        kw = dict(kw)
        if max_iter is not None:
            kw["max_iter"] = max_iter
        g = GIMC(random_state=0, **kw)
        t, c = time.perf_counter(), time.process_time()
        with gimc_fit_result() as got:
            g.fit(X, Y)
        wall, cpu = time.perf_counter() - t, time.process_time() - c
    finally:
        core.STEP_RULE, core.objective_step_cap, core.rejection_bound = old
    res = got["result"]
    score = g.evaluate(Xv, [metric], Y=Yv)[metric]
    return {
        "n_iter": res.n_iter,
        "n_passes": res.n_passes,
        **search_record(res),
        "objective": [float(f) for f in res.objective],
        "objective_final": float(res.objective[-1]),
        metric: float(score),
        "cpu_seconds_busy": cpu,
        "wall_seconds_busy": wall,
    }


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--only", default=",".join(PROBLEMS))
    p.add_argument("--rules", default=None,
                   help="comma list (default: all STEP_RULES); a rule + '-uncapped': without "
                        "the first-trial cap and the rejection-bound stop")
    p.add_argument("--max-iter", type=int, default=None, help="default: the estimator's")
    p.add_argument("--del-rows", type=int, default=20_000)
    p.add_argument("--del-features", type=int, default=78_259)
    p.add_argument("--del-labels", type=int, default=20_544)
    p.add_argument("--del-topics", type=int, default=200)
    p.add_argument("--del-m", type=int, default=500)
    p.add_argument("--del-alpha", type=float, default=1.0,
                   help="alpha of the Delicious fit (the full shape's Phi^T Phi is 10x the "
                        "default --del-rows': alpha 0.1 here weighs the ridge as 1.0 there)")
    p.add_argument("--workdir", default=None)
    p.add_argument("--verbose", action="store_true", help="log every iteration (stderr)")
    p.add_argument("--out", default=os.path.join(RESULTS, "gimc_step_rule.json"))
    a = p.parse_args(argv)
    from ooc_lowrank.gimc import core

    if a.verbose:
        import logging

        logging.basicConfig(format="%(asctime)s %(message)s")
        logging.getLogger("ooc_lowrank").setLevel(logging.DEBUG)

    rules = a.rules.split(",") if a.rules else list(core.STEP_RULES)
    out = {"benchmark": "gimc_step_rule", "args": vars(a), "rules": core.STEP_RULES,
           "results": {}}  # fmt: skip
    if os.path.exists(a.out):  # keep other problems' records
        with open(a.out) as fh:
            prev = json.load(fh)
        out["results"] = prev.get("results", {})
    for name in a.only.split(","):
        X, Y, Xv, Yv, kw, metric = PROBLEMS[name](a)
        rec = out["results"].setdefault(name, {})
        rec["shape"] = {"rows": int(X.shape[0]), "features": int(X.shape[1]), "settings": kw}
        for rule in rules:
            r = fit_one(X, Y, Xv, Yv, kw, metric, rule, a.max_iter)
            rec[rule] = r
            print(name, rule, json.dumps({k: v for k, v in r.items()
                                          if k not in ("objective", "step_sizes")}), flush=True)
        with open(a.out, "w") as fh:
            json.dump(out, fh, indent=1)
    return out


if __name__ == "__main__":
    main()
