"""More hold-outs and a finer ``gamma`` grid for KernelMaxide-n's selector (issue 9, selector
noise), on the cells of ``benchmarks/results/kernelmaxide_selection.json`` (reps 0 and 1 only).

That file holds, per cell (yahoo set x omega x repetition of the SPEC 4.6 protocol), every
setting of the grid gamma scales {1, 2, 4} x lam {0.5, 2, 8, 32} scored on one rows hold-out
(``split_observed(..., rep, by="rows")``, the seed ``KernelMaxideCV(random_state=rep)`` uses
for its first split) and on the test rows.  This script adds, per cell,

* the rows hold-outs of seeds ``rep + 1`` and ``rep + 2`` (the second and third split of
  ``KernelMaxideCV(n_splits=3, random_state=rep)``), ranking loss and squared error, for every
  setting;
* the settings with gamma scales 1.5 and 3: all three hold-outs and the test rows.

``--base`` extends a file of this script's own cells instead, e.g. with the wider grids of
docs/kernelmaxide.md section 6b (``--extra-lams 0.015625 0.0625 0.25 --only-groups 1 2 4``, then
``--new-scales 8 16 --only-groups 8 16 --only-lams 0.5 2 8 32``).

The test scores only judge the selectors (:func:`regret_table`); nothing is chosen from them.

    python benchmarks/kernelmaxide_selection_splits.py --cells 0::2 --out a.json
    python benchmarks/kernelmaxide_selection_splits.py --table a.json b.json
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

from ooc_lowrank import datasets, metrics  # noqa: E402
from ooc_lowrank.kernelmaxide import KernelMaxide, Maxide, mask_labels, split_rows  # noqa: E402
from ooc_lowrank.kernelmaxide.cv import split_observed  # noqa: E402

BASE = os.path.join(HERE, "results", "kernelmaxide_selection.json")
NEW_SCALES = (1.5, 3.0)
BASE_LAMS = (0.5, 2.0, 8.0, 32.0)  # KernelMaxide-n's grid of the base file
LOW_LAMS = (2.0**-6, 2.0**-4, 2.0**-2, 0.5, 2.0, 8.0, 32.0)  # with --extra-lams 2^-6 2^-4 2^-2


def run_cell(X, Y, base, a):
    rep, omega = base["rep"], base["omega"]
    train = split_rows(X.shape[0], 0.1, rep)
    Yobs = mask_labels(Y, omega, train=train, random_state=rep)
    out = {k: base[k] for k in ("dataset", "omega", "rep", "gamma_median") if k in base}
    key = "gamma_scale" if a.method == "kernelmaxide" else "k"
    rows = {(s[key], s["lam"]): dict(s) if "rows0" in s else
            {key: s[key], "lam": s["lam"], "rows0": s["holdout_rows"],
             "rows0_sq": s["holdout_rows_sq"], "test": s["test"]}
            for s in base["settings"]}  # fmt: skip
    lams = sorted({lam for _, lam in rows} | set(a.extra_lams or ()))
    t0 = time.perf_counter()
    new = set(a.new_scales or NEW_SCALES) if a.method == "kernelmaxide" else set()
    groups = sorted({g for g, _ in rows} | new)
    if a.only_groups:
        groups = [g for g in groups if g in a.only_groups]
    if a.only_lams:
        lams = [lam for lam in lams if lam in a.only_lams]
    for g in groups:
        for lam in lams:
            rows.setdefault((g, lam), {key: g, "lam": lam})
        # one setup per (labels, gamma or k), one APG per lam: the same models as separate fits
        if a.method == "kernelmaxide":
            est = KernelMaxide(n_features_map=a.landmarks, gamma=base["gamma_median"] * g,
                               max_iter=a.max_iter, random_state=rep)  # fmt: skip
        else:
            est = Maxide(n_components=g or None, max_iter=a.max_iter, random_state=rep)
        for k in range(a.n_splits):
            todo = [lam for lam in lams if f"rows{k}" not in rows[g, lam]]
            if todo:
                Yfit, Yval = split_observed(Yobs, 0.25, rep + k, by="rows")
                for lam, e in zip(todo, est._fit_lams(X, Yfit, todo)):
                    rows[g, lam][f"rows{k}"] = float(e.observed_ranking_loss(X, Yval))
                    rows[g, lam][f"rows{k}_sq"] = float(e.observed_squared_error(X, Yval))
        todo = [lam for lam in lams if "test" not in rows[g, lam]]
        for lam, e in zip(todo, est._fit_lams(X, Yobs, todo) if todo else []):
            S = e.decision_function(X[~train])
            rows[g, lam]["test"] = float(metrics.ranking_loss(Y[~train], S))
    out["settings"] = sorted(rows.values(), key=lambda r: (r[key], r["lam"]))
    out["seconds"] = time.perf_counter() - t0
    print(out["dataset"], omega, rep, f"{out['seconds']:.0f}s", flush=True)
    return out


def compute(a):
    with open(a.base or BASE) as f:
        base = json.load(f)
    base_cells = (
        base["cells"]
        if "cells" in base
        else base["methods"]["kernelmaxide_n" if a.method == "kernelmaxide" else "maxide"]["cells"]
    )
    cells = base_cells[slice(*[int(p) if p else None for p in a.cells.split(":")])]
    data, done = {}, []
    if os.path.exists(a.out):  # resume
        done = json.load(open(a.out))["cells"]
    have = {(c["dataset"], c["omega"], c["rep"]) for c in done}
    for c in cells:
        if (c["dataset"], c["omega"], c["rep"]) in have:
            continue
        if c["dataset"] not in data:
            data[c["dataset"]] = datasets.load_yahoo(c["dataset"])
        done.append(run_cell(*data[c["dataset"]], c, a))
        with open(a.out, "w") as f:
            json.dump({"settings": vars(a), "cells": done}, f, indent=1)


def _key(settings):
    return "gamma_scale" if "gamma_scale" in settings[0] else "k"


def _own(settings, groups, lams=None):
    key = _key(settings)
    return [
        s
        for s in settings
        if (groups is None or s[key] in groups) and (lams is None or s["lam"] in lams)
    ]


def pick(settings, groups, n_splits, score="", one_se=False, lams=BASE_LAMS):
    """The setting a hold-out selector chooses among those whose gamma scale (KernelMaxide) or
    k (Maxide) is in ``groups`` (None: all) and whose ``lam`` is in ``lams`` (None: all): the
    lowest mean over splits ``0..n_splits-1``
    (first of ties, grid order); ``one_se``: the largest ``lam`` (then the first in grid order)
    whose mean is within one standard error of the best."""
    cand = _own(settings, groups, lams)
    vals = np.array([[s[f"rows{k}{score}"] for k in range(n_splits)] for s in cand])
    mean = np.nanmean(vals, axis=1)
    i = int(np.nanargmin(mean))
    if not one_se:
        return cand[i]
    se = np.nanstd(vals[i], ddof=1) / np.sqrt(n_splits) if n_splits > 1 else 0.0
    ok = [j for j in range(len(cand)) if mean[j] <= mean[i] + se]
    return cand[max(ok, key=lambda j: (cand[j]["lam"], -j))]


SELECTORS = {
    # name: (gamma scales or None for all k, n_splits, score suffix, one-standard-error rule)
    "kernelmaxide": {
        "1 split, scales 1/2/4 (current default)": ((1, 2, 4), 1, "", False),
        "2 splits, scales 1/2/4": ((1, 2, 4), 2, "", False),
        "3 splits, scales 1/2/4": ((1, 2, 4), 3, "", False),
        "3 splits, scales 1/2/4, 1-SE": ((1, 2, 4), 3, "", True),
        "3 splits, scales 1/2/4, squared error": ((1, 2, 4), 3, "_sq", False),
        "1 split, scales 1/1.5/2/3/4": ((1, 1.5, 2, 3, 4), 1, "", False),
        "2 splits, scales 1/1.5/2/3/4": ((1, 1.5, 2, 3, 4), 2, "", False),
        "3 splits, scales 1/1.5/2/3/4": ((1, 1.5, 2, 3, 4), 3, "", False),
        "3 splits, scales 1/1.5/2/3/4, 1-SE": ((1, 1.5, 2, 3, 4), 3, "", True),
        "3 splits, scales 1/1.5/2/3/4, squared error": ((1, 1.5, 2, 3, 4), 3, "_sq", False),
        # the wider grids (--extra-lams 2^-6 2^-4 2^-2, --new-scales 8 16)
        "3 splits, scales 1/2/4, lams 2^-6..2^5": ((1, 2, 4), 3, "", False, LOW_LAMS),
        "3 splits, scales 1/2/4, lams 2^-2..2^5": ((1, 2, 4), 3, "", False, LOW_LAMS[2:]),
        "1 split, scales 1/2/4, lams 2^-6..2^5": ((1, 2, 4), 1, "", False, LOW_LAMS),
        "3 splits, scales 1/2/4/8": ((1, 2, 4, 8), 3, "", False),
        "3 splits, scales 1/2/4/8/16": ((1, 2, 4, 8, 16), 3, "", False),
    },
    "maxide": {
        "1 split (current default)": (None, 1, "", False),
        "2 splits": (None, 2, "", False),
        "3 splits": (None, 3, "", False),
        "3 splits, 1-SE": (None, 3, "", True),
        "3 splits, squared error": (None, 3, "_sq", False),
    },
}


def regret_table(cells):
    """Per selector: fits of the search, mean / median / max regret over the cells against the
    best of *its own* grid on test and against the best of the whole measured grid, and the
    mean regret on the Arts cells."""
    key = _key(cells[0]["settings"])
    out = {}
    for name, (groups, n_splits, score, one_se, *lams) in SELECTORS[
        "kernelmaxide" if key == "gamma_scale" else "maxide"
    ].items():
        lams = lams[0] if lams else (BASE_LAMS if key == "gamma_scale" else None)
        reg, reg_all, arts, picks = [], [], [], []
        for c in cells:
            own = _own(c["settings"], groups, lams)
            p = pick(c["settings"], groups, n_splits, score, one_se, lams)
            r = p["test"] - min(s["test"] for s in own)
            reg.append(r)
            reg_all.append(p["test"] - min(s["test"] for s in c["settings"]))
            if c["dataset"] == "arts":
                arts.append(r)
            picks.append({"dataset": c["dataset"], "omega": c["omega"], "rep": c["rep"],
                          key: p[key], "lam": p["lam"], "test": p["test"], "regret": r})  # fmt: skip
        out[name] = {
            "fits": len(own) * n_splits + 1,
            "mean": float(np.mean(reg)), "median": float(np.median(reg)), "max": float(np.max(reg)),
            "mean_vs_whole_grid_best": float(np.mean(reg_all)), "arts_mean": float(np.mean(arts)),
            "mean_test": float(np.mean([q["test"] for q in picks])), "picks": picks,
        }  # fmt: skip
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cells", default="::", help="slice of the base file's cells, e.g. 0::2")
    ap.add_argument("--n-splits", type=int, default=3)
    ap.add_argument("--method", choices=["kernelmaxide", "maxide"], default="kernelmaxide")
    ap.add_argument("--landmarks", type=int, default=1000)
    ap.add_argument("--max-iter", type=int, default=100)
    ap.add_argument("--out", help="result JSON of this slice")
    ap.add_argument("--base", help="cells to extend (default: kernelmaxide_selection.json); a "
                    "file of this script's own cells keeps what they hold")
    ap.add_argument("--extra-lams", type=float, nargs="+", help="lam values added to the grid")
    ap.add_argument("--new-scales", type=float, nargs="+", help=f"default {NEW_SCALES}")
    ap.add_argument("--only-lams", type=float, nargs="+", help="lam values computed")
    ap.add_argument("--only-groups", type=float, nargs="+",
                    help="gamma scales (or k) for which missing settings are computed")
    ap.add_argument("--table", nargs="+", help="merge result JSONs and print the regret table")
    ap.add_argument("--table-out", help="write the merged cells and the table here")
    a = ap.parse_args(argv)
    if not a.table:
        return compute(a)
    cells = [c for p in a.table for c in json.load(open(p))["cells"]]
    tab = regret_table(cells)
    print(f"{len(cells)} cells")
    for name, t in tab.items():
        print(f"{name:45s} fits {t['fits']:3d}  regret mean {t['mean']:.4f} "
              f"median {t['median']:.4f} max {t['max']:.4f}  "
              f"vs whole grid {t['mean_vs_whole_grid_best']:.4f}  arts {t['arts_mean']:.4f}  "
              f"test {t['mean_test']:.4f}")  # fmt: skip
    if a.table_out:
        with open(a.table_out, "w") as f:
            json.dump({"benchmark": "kernelmaxide_selection_splits", "cells": cells, "table": tab}, f, indent=1)


if __name__ == "__main__":
    main()
