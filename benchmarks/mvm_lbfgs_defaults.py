"""Evidence for the L-BFGS defaults of ``MultiViewMachineClassifier`` (``reg_weight``, ``tol``):
validation accuracy on held-out folds **of the training half** of mfeat-handwritten (one-vs-rest
over 10 classes, 6 dense standardized views, 649 columns), with iterations, passes and the fit
time next to scikit-learn ``SVC()`` fitted on the same fold in the same process (a ratio, so a
busy machine matters less).  The test half is scored once, for the chosen default only (it
chooses nothing).  Results: ``benchmarks/results/mvm_lbfgs_defaults.json``; the rule:
``docs/mvm.md``.

    python benchmarks/mvm_lbfgs_defaults.py [--folds 3] [--grid 1e-3:1e-6,1e-2:1e-3,...]
        [--rows N] [--out FILE]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

try:
    from benchmarks.bench_mvm import HERE, load_mfeat, write_results
except ImportError:  # run as a script from benchmarks/
    from bench_mvm import HERE, load_mfeat, write_results

GRID = "1e-3:1e-6,1e-3:1e-4,1e-3:1e-3,1e-2:1e-6,1e-2:1e-4,1e-2:1e-3,3e-2:1e-3"


def _timed(fit):
    t = time.perf_counter()
    m = fit()
    return m, time.perf_counter() - t


def main(argv=None):
    from sklearn.model_selection import StratifiedKFold
    from sklearn.svm import SVC

    from ooc_lowrank.mvm import MultiViewMachineClassifier

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--folds", type=int, default=3)
    p.add_argument("--grid", default=GRID, help="reg_weight:tol pairs, comma-separated")
    p.add_argument("--rows", type=int, default=None, help="a seeded subset of mfeat (tests)")
    p.add_argument("--max-iter", type=int, default=None, help="default: the library's")
    p.add_argument("--out", default=os.path.join(HERE, "results", "mvm_lbfgs_defaults.json"))
    a = p.parse_args(argv)
    Xtr, Xte, ytr, yte, sizes = load_mfeat(a.rows)
    grid = [tuple(float(v) for v in g.split(":")) for g in a.grid.split(",")]
    extra = {} if a.max_iter is None else {"max_iter": a.max_iter}

    def mvm(reg, tol):
        return MultiViewMachineClassifier(view_sizes=sizes, alpha=reg, tol=tol,
                                          random_state=0, **extra)

    mvm(*grid[0]).set_params(max_iter=2).fit(Xtr, ytr)  # warm the JIT
    folds = list(StratifiedKFold(a.folds, shuffle=True, random_state=0).split(Xtr, ytr))
    rows = []
    for reg, tol in grid:
        per = []
        for tr, va in folds:
            m, s = _timed(lambda tr=tr: mvm(reg, tol).fit(Xtr[tr], ytr[tr]))
            svc, s_svc = _timed(lambda tr=tr: SVC().fit(Xtr[tr], ytr[tr]))
            per.append(dict(accuracy=float(m.score(Xtr[va], ytr[va])), n_iter=int(m.n_iter_),
                            passes=int(m.n_passes_), seconds=round(s, 3),
                            svc_seconds=round(s_svc, 3),
                            svc_accuracy=float(svc.score(Xtr[va], ytr[va]))))
        mean = {k: float(np.mean([f[k] for f in per])) for k in per[0]}
        mean["ratio_to_svc"] = float(np.mean([f["seconds"] / f["svc_seconds"] for f in per]))
        rows.append(dict(reg_weight=reg, tol=tol, mean=mean, folds=per))
        print(f"reg_weight {reg:g} tol {tol:g}: " + ", ".join(
            f"{k} {v:.4g}" for k, v in mean.items()), flush=True)
    default = MultiViewMachineClassifier()
    m, s = _timed(lambda: MultiViewMachineClassifier(view_sizes=sizes, random_state=0, **extra)
                  .fit(Xtr, ytr))
    svc, s_svc = _timed(lambda: SVC().fit(Xtr, ytr))
    test = dict(reg_weight=default.alpha, tol=default.tol,
                accuracy=float(m.score(Xte, yte)), n_iter=int(m.n_iter_),
                passes=int(m.n_passes_), seconds=round(s, 3), svc_seconds=round(s_svc, 3),
                svc_accuracy=float(svc.score(Xte, yte)))
    print("library defaults on the test half:", test, flush=True)
    res = dict(benchmark="mvm_lbfgs_defaults", rows=a.rows, folds=a.folds,
               n_train=int(len(ytr)), loadavg=list(os.getloadavg()), validation=rows,
               defaults_on_test=test)
    return write_results(res, a.out)


if __name__ == "__main__":
    main()
