"""Reproduce GIMC Figure 2 on Bibtex: P@3 against m for GIMC-LFF, GIMC-LNYS, IMC-RFF, IMC-NYS.

    python examples/figure2.py                       # m in 100 200 500 1000, writes figure2.png
    python examples/figure2.py --small --out /tmp/f2.png

Data: ``$OOC_LOWRANK_DATA/bibtex`` (default ``../shared/data`` next to the repository).  Every
method uses the same gamma (median heuristic x ``--gamma-scale``) and alpha at each m.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bibtex_end_to_end import convert, data_dir  # noqa: E402

METHODS = {
    "GIMC-LFF": dict(features="fourier", learn_features=True),
    "GIMC-LNYS": dict(features="nystrom", learn_features=True),
    "IMC-RFF": dict(features="fourier", learn_features=False),
    "IMC-NYS": dict(features="nystrom", learn_features=False),
}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", default=None)
    p.add_argument("--workdir", default=None)
    p.add_argument("--small", action="store_true")
    p.add_argument("--m", type=int, nargs="+", default=[100, 200, 500, 1000])
    p.add_argument("--gamma-scale", type=float, default=0.25)
    p.add_argument("--alpha", type=float, default=1.0)
    p.add_argument("--max-iter", type=int, default=30)
    p.add_argument("--out", default="figure2.png")
    args = p.parse_args(argv)

    src = data_dir(args.data_dir) / "bibtex"
    if not (src / "bibtex-train.arff.gz").exists():
        print(
            f"Bibtex not found in {src}; set OOC_LOWRANK_DATA or pass --data-dir", file=sys.stderr
        )
        return 2
    from ooc_lowrank.gimc import GIMC
    from ooc_lowrank.gimc.features import median_gamma, sample_rows
    from ooc_lowrank.storage import open_dataset

    stores = convert(src, Path(args.workdir or tempfile.mkdtemp(prefix="fig2-")))
    tr, te = open_dataset(stores["train"]), open_dataset(stores["test"])
    Xtr, Ytr = tr["X"].read(), tr["Y"].read()
    Xte, Yte = te["X"].read(), te["Y"].read()
    if args.small:
        Xtr, Ytr, Xte, Yte = Xtr[:500], Ytr[:500], Xte[:200], Yte[:200]
        args.m, args.max_iter = [8, 16], 2
    gamma = args.gamma_scale * median_gamma(sample_rows(Xtr, 1000, np.random.default_rng(0)))
    curves = {k: [] for k in METHODS}
    for m in args.m:
        for name, kw in METHODS.items():
            t = time.perf_counter()
            g = GIMC(
                n_features_map=m,
                gamma=gamma,
                alpha=args.alpha,
                max_iter=args.max_iter,
                random_state=0,
                **kw,
            ).fit(Xtr, Ytr)
            p3 = g.evaluate(Xte, ["p@3"], Y=Yte)["p@3"]
            curves[name].append(p3)
            print(
                f"m={m:5d} {name:10s} P@3 {100 * p3:6.2f} ({time.perf_counter() - t:.1f}s)",
                flush=True,
            )
    out = Path(args.out)
    out.with_suffix(".json").write_text(json.dumps({"m": args.m, "gamma": gamma, "curves": curves}))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: wrote only " + str(out.with_suffix(".json")))
        return 0
    fig, ax = plt.subplots(figsize=(5, 4))
    for name, ys in curves.items():
        ax.plot(
            args.m,
            [100 * y for y in ys],
            marker="o",
            label=name,
            linestyle="-" if name.startswith("GIMC") else "--",
        )
    ax.set_xlabel("m (projections / landmarks)")
    ax.set_ylabel("P@3 (%)")
    ax.set_title("Bibtex, GIMC Figure 2")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
