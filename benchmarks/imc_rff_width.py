"""IMC-RFF (``GIMC(learn_features=False, alpha="auto")``): which kernel width the
leave-one-out rate on the training rows prefers, against the number of rows per feature.

Per dataset and map size ``m`` (D = 2m features, so n / D from about 0.3 to 640), for gamma
scales 0.125 .. 2 (multipliers of the median heuristic; the library scores 0.125 and 1 on
large data, ``core.width_selection``): the best leave-one-out top-1 rate (training rows) and
the test P@1 / accuracy at the alpha chosen.  The question it answers: is the width a rule of
n / D could set (it is not: the width the leave-one-out rate prefers stays per dataset as
n / D moves over two decades), or must it be scored on the data.

    python benchmarks/imc_rff_width.py

Data as ``imc_rff_alpha.py``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

SCALES = (0.125, 0.25, 0.5, 1.0, 2.0)
SIZES = (25, 50, 100, 200, 500)
DATASETS = ["demo", "bibtex", "yahoo-arts", "yahoo-business", "mfeat", "segment", "scene",
            "yeast", "emotions", "medical", "enron"]  # fmt: skip


def run(name, workdir, demo_rows, log, sizes=SIZES, scales=SCALES):
    """``{m: {"n_per_feature", "loo_top1": [per scale], "test": [per scale]}}``."""
    import imc_rff_alpha as ira

    from ooc_lowrank.gimc import GIMC, core

    Xtr, Ytr, Xte, Yte, _ = ira.load(name, workdir, demo_rows)
    classes = np.unique(Ytr) if Ytr.ndim == 1 else None
    out = {}
    gate = core.WIDTH_ROWS_PER_COST
    core.WIDTH_ROWS_PER_COST = 10**12  # one width per fit: the scale given
    try:
        for m in sizes:
            loo, test = [], []
            for gs in scales:
                g = GIMC(n_features_map=m, learn_features=False, gamma_scale=gs, alpha="auto",
                         random_state=0).fit(Xtr, Ytr)  # fmt: skip
                loo.append(max(g.alpha_scores_.values()))
                test.append(ira.top1(Yte, g.decision_function(Xte), classes))
            r = {"n_per_feature": Xtr.shape[0] / (2 * m), "loo_top1": loo, "test": test,
                 "loo_best_scale": scales[int(np.argmax(loo))]}  # fmt: skip
            out[m] = r
            log(f"{name} m={m} n/D={r['n_per_feature']:.1f} loo "
                + " ".join(f"{v:.4f}" for v in loo) + f" -> {r['loo_best_scale']} | test "
                + " ".join(f"{v:.4f}" for v in test))  # fmt: skip
    finally:
        core.WIDTH_ROWS_PER_COST = gate
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--datasets", nargs="+", default=DATASETS)
    ap.add_argument("--demo-rows", type=int, default=40_000)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--json", default=str(REPO / "benchmarks" / "results" / "imc_rff_width.json"))
    a = ap.parse_args(argv)
    res = {"note": "leave-one-out rates on training rows; test scores only reported",
           "gamma_scales": list(SCALES), "datasets": {}}  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        for name in a.datasets:
            res["datasets"][name] = run(name, a.workdir or tmp, a.demo_rows,
                                        lambda s: print(s, flush=True))  # fmt: skip
    Path(a.json).write_text(json.dumps(res, indent=1) + "\n")
    return res


if __name__ == "__main__":
    main()
