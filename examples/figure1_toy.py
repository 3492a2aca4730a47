"""GIMC Figure 1 (SPEC 1.7 "Toy"): relative completion error against the observed fraction for
MC, IMC, IMC-RFF and GIMC-LFF, written as a PNG (and the numbers as JSON beside it).

    python examples/figure1_toy.py                         # writes figure1_toy.png / .json
    python examples/figure1_toy.py --n 60 --d 10 --rank 4 --fractions 0.1 0.3 --max-iter 2

Problem: ``A = X Y^T + N`` with ``X, Y`` (n x d) i.i.d. N(0, 1) and ``N_ij`` ~ N(0, sigma^2)
(the paper's "N(0, 0.1)" does not say variance or standard deviation; ``--noise`` is the
standard deviation, default 0.1).  A fraction of the entries is observed (uniformly at random);
every method fits rank ``--rank`` (20) two-sided IMC on them and is scored on the whole matrix,
``||P Q^T - A||_F / ||A||_F``:

* MC: no side information (identity features: ``X_row = X_col = I_n``, so ``W``, ``H`` are the
  factors themselves);
* IMC: identity feature maps on the side features ``X`` and ``Y``;
* IMC-RFF: random Fourier features of ``X`` and ``Y`` (``m = --m``), frozen;
* GIMC-LFF: the same features, learned (one Armijo step per iteration on ``U`` and ``V``).

``lam`` is chosen per method and fraction from ``--lams`` by the RMSE on 20 % of the observed
entries held out, then the method is refitted on all of them; the full matrix is only scored.
matplotlib draws the figure; without it the numbers are still printed and written.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np
import scipy.sparse as sp

METHODS = {
    "MC": None,
    "IMC": dict(row_map="identity", col_map="identity"),
    "IMC-RFF": dict(row_map="fourier", col_map="fourier", learn_features=False),
    "GIMC-LFF": dict(row_map="fourier", col_map="fourier", learn_features=True),
}


def toy(n, d, noise, seed):
    rng = np.random.default_rng(seed)
    X, Y = rng.normal(size=(n, d)), rng.normal(size=(n, d))
    return X, Y, X @ Y.T + noise * rng.normal(size=(n, n))


def fit(method, obs, X, Y, shape, *, rank, lam, m, max_iter, seed):
    from ooc_lowrank.imc import InductiveMatrixCompletion

    if method == "MC":
        X = Y = sp.identity(shape[0], format="csr")
    est = InductiveMatrixCompletion(
        n_components=rank, alpha=lam, n_features_map=m, max_iter=max_iter, random_state=seed,
        **(METHODS[method] or {}),
    )
    return est.fit(obs, X_row=X, X_col=Y, shape=shape)


def relative_error(method, A, X, Y, frac, *, lams, holdout=0.2, seed=0, **kw):
    """Observe ``frac`` of ``A``; choose ``lam`` from ``lams`` by the RMSE on ``holdout`` of the
    observed entries, refit on all of them; the error on the whole matrix and the chosen lam."""
    rng = np.random.default_rng(seed + 1)
    r, c = np.nonzero(rng.random(A.shape) < frac)
    v = A[r, c]
    lam = lams[0]
    if len(lams) > 1:
        val = rng.random(r.size) < holdout
        tr = ~val
        rmse = {}
        for cand in lams:
            est = fit(method, (r[tr], c[tr], v[tr]), X, Y, A.shape, lam=cand, seed=seed, **kw)
            rmse[cand] = est.evaluate((r[val], c[val], v[val]), ["rmse"])["rmse"]
        lam = min(rmse, key=rmse.get)
    est = fit(method, (r, c, v), X, Y, A.shape, lam=lam, seed=seed, **kw)
    B = est.row_factors_ @ est.col_factors_.T  # n x n: the toy is small on purpose
    return float(np.linalg.norm(B - A) / np.linalg.norm(A)), lam


def plot(res, fractions, path):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"matplotlib is not installed: no figure written (numbers in {path[:-4]}.json); "
              "pip install matplotlib to draw it", file=sys.stderr)
        return False
    fig, ax = plt.subplots(figsize=(5, 3.6))
    for method, errs in res.items():
        ax.plot([100 * f for f in fractions], errs, marker="o", label=method)
    ax.set_xlabel("observed entries (%)")
    ax.set_ylabel(r"$\|\hat A - A\|_F / \|A\|_F$")
    ax.set_title("Toy problem (GIMC Figure 1)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=200)
    p.add_argument("--d", type=int, default=50)
    p.add_argument("--rank", type=int, default=20)
    p.add_argument("--noise", type=float, default=0.1)
    p.add_argument("--fractions", type=float, nargs="+",
                   default=[0.05, 0.10, 0.15, 0.20, 0.25, 0.30])
    p.add_argument("--m", type=int, default=200, help="Fourier projections per side")
    p.add_argument("--lams", type=float, nargs="+", default=[0.1, 1, 10, 100, 1000],
                   help="lam grid, chosen per method and fraction on 20 %% held-out observed "
                   "entries (one value: no selection)")
    p.add_argument("--max-iter", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="figure1_toy.png")
    a = p.parse_args(argv)
    X, Y, A = toy(a.n, a.d, a.noise, a.seed)
    res = {k: [] for k in METHODS}
    chosen = {k: [] for k in METHODS}
    t0 = time.time()
    for frac in a.fractions:
        for method in METHODS:
            err, lam = relative_error(method, A, X, Y, frac, lams=a.lams, rank=a.rank, m=a.m,
                                      max_iter=a.max_iter, seed=a.seed)
            res[method].append(err)
            chosen[method].append(lam)
        print(f"{100 * frac:5.1f} % observed: "
              + "  ".join(f"{k} {v[-1]:.4f}" for k, v in res.items()), flush=True)
    stem = os.path.splitext(a.out)[0]
    with open(stem + ".json", "w") as f:
        json.dump({"settings": vars(a), "fractions": a.fractions, "relative_error": res,
                   "lam": chosen,
                   "seconds": round(time.time() - t0, 1), "load_avg": os.getloadavg()}, f,
                  indent=1)
    if plot(res, a.fractions, a.out):
        print(f"wrote {a.out} and {stem}.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
