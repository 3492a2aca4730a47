"""Why KernelMaxide-n runs 100 APG iterations and what a faster solve would give (issue 24).

For one yahoo cell (omega = 20 %, split / mask of repetition 0, ``gamma = 2 x`` the median
heuristic, as ``benchmarks/kernelmaxide_speed.py``) this builds the library's Nystrom features
``F`` (1000 landmarks, the fitted ``KernelMaxide`` feature map) and the UT Gram
``G = F_UT^T F_UT = V diag(g) V^T``, then runs the library's APG (``core.apg``, the same
line search, restart and ``1e-5`` stop) on in-memory features in three bases:

* ``km6``: ``F V diag(sqrt g)`` -- SPEC KM-6 itself, exactly the estimator's iterates (the
  span coordinates ``Chat``; curvature ``g^2``);  ``km6_k{k}``: the same on the top ``k``
  eigen-directions (a rank-``k`` Nystrom kernel, still SPEC KM-6's regularizer);
* ``white_k{k}``: ``F V_k diag(1 / sqrt g_k)`` -- orthonormal on UT (Maxide's KM-1 with ``A``
  the top ``k`` left singular vectors of the Nystrom features; a different regularizer:
  ``||S^2 Chat||_*`` in the span coordinates, not ``||Chat||_*``).

Recorded per run: iterations, whether the ``1e-5`` stop fired, objective, accepted ``L``,
test-row ranking loss, rank, CPU seconds of the APG on this in-memory NumPy twin (not the
library's engine: compare counts and losses, not seconds).  Plus the library's ``Maxide``
(``lam = 4``) and ``Maxide()`` defaults for the ranking loss to beat.

    python benchmarks/kernelmaxide_conditioning.py arts business health \
        --out benchmarks/results/kernelmaxide_conditioning.json
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import scipy.sparse as sp
from threadpoolctl import threadpool_limits

from ooc_lowrank import metrics
from ooc_lowrank.datasets import load_yahoo
from ooc_lowrank.gimc.features import median_gamma, sample_rows
from ooc_lowrank.kernelmaxide import KernelMaxide, Maxide, _blocks, core, mask_labels, split_rows


class DensePasses:
    """``core.Passes`` on in-memory features of the UT rows (the APG's only interface)."""

    def __init__(self, F, Y):
        self.F, self.Y, self.count = F, sp.csr_matrix(Y), 0
        self.rows = np.repeat(np.arange(Y.shape[0]), np.diff(self.Y.indptr))

    def _res(self, W):
        return (self.F @ W)[self.rows, self.Y.indices] - self.Y.data

    def grad(self, W):
        self.count += 1
        r = self._res(W)
        R = sp.csr_matrix((r, self.Y.indices, self.Y.indptr), shape=self.Y.shape)
        return 0.5 * float(r @ r), np.asarray((R.T @ self.F).T)

    def losses(self, Ws):
        self.count += 1
        return np.array([0.5 * float(r @ r) for r in map(self._res, Ws)])


def ranking_loss(S, Y, rows):
    s, c = metrics.ranking_loss_block(metrics._positive_csr(sp.csr_matrix(Y)[rows]), S[rows])
    return float(s / c)


def cell(name, omega, long_iters):
    X, Y = load_yahoo(name)
    train = split_rows(X.shape[0], 0.1, 0)
    test = np.setdiff1d(np.arange(X.shape[0]), np.flatnonzero(train))
    Yobs = sp.csr_matrix(mask_labels(Y, omega, train=train, random_state=0))
    g0 = median_gamma(sample_rows(X, 1000, np.random.default_rng(0)))
    est = KernelMaxide(n_features_map=1000, gamma=2 * g0, alpha=2.0, random_state=0, max_iter=0)
    est.fit(X, Yobs)
    Xd = X.toarray() if sp.issparse(X) else np.asarray(X)
    F = _blocks.features(np.asarray(Xd, dtype=np.float64), *est.fmap_.args())
    ut = np.diff(Yobs.indptr) > 0
    Yu = Yobs[ut]
    ev, V = np.linalg.eigh(F[ut].T @ F[ut])
    keep = ev > 1e-13 * ev[-1]
    ev, V = ev[keep][::-1], V[:, keep][:, ::-1]
    s = np.sqrt(ev)
    out = {
        "n": int(X.shape[0]), "n_ut": int(ut.sum()), "n_labels": int(Y.shape[1]),
        "n_observed": int(Yobs.nnz), "r_kept": int(ev.size),
        "gram_eig_max": float(ev[0]), "gram_eig_min": float(ev[-1]),
        "gram_eig_at": {str(k): float(ev[k]) for k in (10, 25, 50, 100, 200) if k < ev.size},
        "runs": [],
    }  # fmt: skip

    def run(basis, B, lam, max_iter):
        p = DensePasses(B[ut], Yu)
        t = time.process_time()
        r = core.apg(p, core.Identity(B.shape[1]), lam, Y.shape[1], 0.5 * Yu.nnz,
                     max_iter=max_iter, n_trials=1)  # fmt: skip
        row = dict(basis=basis, lam=lam, max_iter=max_iter, n_iter=int(r.n_iter),
                   converged=bool(r.converged), objective=float(r.objective[-1]), L=float(r.L),
                   test_ranking_loss=ranking_loss(B @ r.Chat, Y, test),
                   rank=int(np.linalg.matrix_rank(r.Chat)), apg_cpu_seconds=time.process_time() - t)  # fmt: skip
        print(name, json.dumps(row), flush=True)
        out["runs"].append(row)

    km6 = F @ (V * s)
    for it in (10, 20, 50, 100):
        run("km6", km6, 2.0, it)
    for lam in (8.0, 32.0):
        run("km6", km6, lam, 100)
        run("km6", km6, lam, long_iters)
    run("km6", km6, 2.0, long_iters)
    for k in (50, 100):
        run(f"km6_k{k}", F @ (V[:, :k] * s[:k]), 8.0, 100)
    for k in (50, 100, 200):
        Bw = F @ (V[:, :k] / s[:k])
        for lam in (1.0, 2.0, 4.0):
            run(f"white_k{k}", Bw, lam, 100)
    for label, mx in (("maxide_lam4", Maxide(alpha=4.0)), ("maxide_defaults", Maxide())):
        mx.fit(X, Yobs)
        out[label] = dict(n_iter=int(mx.n_iter_), test_ranking_loss=ranking_loss(mx.decision_function(X), Y, test))
        print(name, label, out[label], flush=True)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("datasets", nargs="*", default=["arts"])
    ap.add_argument("--omega", type=float, default=20)
    ap.add_argument("--long-iters", type=int, default=600)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    res = {"setup": dict(omega=a.omega, landmarks=1000, gamma="2 x median heuristic", rep=0,
                         long_iters=a.long_iters)}  # fmt: skip
    with threadpool_limits(1):
        for name in a.datasets:
            res[name] = cell(name, a.omega, a.long_iters)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
