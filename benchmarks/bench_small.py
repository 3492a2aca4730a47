"""Small and medium in-memory fits against the in-memory tool a user would try (issue 24).

Every method on its small real dataset, in one process and one run, beside its peer:

==================== ============================================ ===============================
case                 ours                                         peers (same run)
==================== ============================================ ===============================
mvm_mfeat_binary     MVM classifier, one class vs rest, mfeat     scikit-learn ``SVC()``
mvm_mfeat_ovr        ``OneVsRestClassifier(MVM)``, 10 classes      ``SVC()`` (multi-class)
mvm_movielens        the README's MVM command (u1, side views)     myFM ``MyFMRegressor`` rank 10
kernelmaxide_arts    KernelMaxide-n (1000 landmarks), -f, Maxide   one RBF ``SVC`` per label
gimc_bibtex          GIMC-LFF / IMC-RFF, m = 500                   Nystroem(2000) / RBFSampler(2m)
                                                                   + Ridge, median-heuristic gamma
gimc_demo            ``ooc-lowrank demo``'s data and settings      as gimc_bibtex
gimc_big             GIMC-LFF from a generated store, d = 500      none: the throughput reference
clustering_segment   GIMCClustering, 10n constraints, m = 500      KMeans, SpectralClustering
glrl_movielens       the README's GLRL command (L1, rank 10)       Surprise ``SVD``
==================== ============================================ ===============================

Each of our fits is preceded by a warm-up fit of the same estimator at tiny size (Numba
compilation or cache loading, imports, thread pools): its wall seconds and the seconds Numba
spent compiling (``numba:compile`` events) are reported apart as ``warmup``.  Then one timed
fit, counted from outside (``dask.callbacks.Callback``: every local ``dask.compute``, with its
graph's task count and wall window; every block function the engine is handed is wrapped in a
timer), then one profiled fit (``cProfile`` on the main thread) giving the stage breakdown:

* ``block_functions``: wall seconds during which at least one block function handed to the
  engine ran (any thread), plus main-thread seconds in block functions and kernels the driver
  calls itself; ``block_functions_thread_seconds`` the same summed over threads;
* ``scheduler``: wall seconds inside a ``dask.compute`` window with no block function running;
* ``graph_building``: main-thread seconds in the ``dask`` package, entered from the library's
  driver code (estimators, cores, engine, storage), outside compute windows;
* ``driver_linear_algebra``: main-thread seconds in ``numpy.linalg`` / ``scipy.linalg`` /
  ``scipy.sparse.linalg`` called from that driver code (``@`` products of the driver are not
  function calls for the profiler and land in ``other``);
* ``jit_compile``: Numba compilation during the fit (zero once warm);
* ``other``: the rest (validation, conversion, driver products, Python).

The profiled fit runs under the profiler's overhead, so its stage seconds add up to its own
``wall`` (reported), not to the timed fit's.  Structural numbers: ``passes`` (the estimator's
``n_passes_``), ``dask_computes`` and their ``graph_tasks``, ``dask_computes_per_pass`` (the
engine's direct in-memory path builds no graph: zero).  Ratios are ours / peer seconds.

GIMC throughput: GFLOP/s of useful work by ``bench_gimc.iteration_flops`` over the
steady-state seconds of an iteration, for the demo's shape and for ``gimc_big`` (200,000 x 500
by default, ``--big`` for 1M x 500, as in ``bench_gimc.py``); ``summary`` gives their ratio.

Peers that need an install (``pip install "ooc-lowrank[bench]"``: myfm, scikit-surprise) are
recorded as ``{"unavailable": reason}`` when missing; GLRL then falls back to a documented
peer (biases + ``scipy.sparse.linalg.svds`` rank 10 on the residual ratings).

    python benchmarks/bench_small.py                         # writes benchmarks/results/small.json
    python benchmarks/bench_small.py --only gimc_demo,gimc_big --big --out /tmp/g.json
    python benchmarks/bench_small.py --tiny --out /tmp/t.json  # seconds; run by the tests
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import functools
import inspect
import json
import os
import pstats
import shutil
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "examples"))

CASES = (
    "mvm_mfeat_binary",
    "mvm_mfeat_ovr",
    "mvm_movielens",
    "kernelmaxide_arts",
    "gimc_bibtex",
    "gimc_demo",
    "gimc_big",
    "clustering_segment",
    "glrl_movielens",
)
STAGES = (
    "block_functions",
    "scheduler",
    "graph_building",
    "driver_linear_algebra",
    "jit_compile",
    "other",
)
#: engine entry points whose first argument is a block function
ENGINE_ENTRIES = ("map_reduce", "reduce_blocks", "map_rows", "map_rows_compute",
                  "map_rows_persisted")  # fmt: skip


# ------------------------------------------------------------------------ instrumentation
class _Intervals:
    """Thread-safe list of ``(start, end)`` wall intervals."""

    def __init__(self):
        self.items, self._lock = [], threading.Lock()

    def add(self, t0, t1):
        with self._lock:
            self.items.append((t0, t1))


def _union(intervals, windows=None):
    """Length of the union of ``intervals``, each clipped to ``windows`` if given."""
    if windows is not None:
        intervals = [(max(a, s), min(b, e)) for a, b in intervals for s, e in windows]
        intervals = [(a, b) for a, b in intervals if b > a]
    total, end = 0.0, -np.inf
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def _timed_block(fn, record):
    @functools.wraps(fn)
    def block(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            record.add(t0, time.perf_counter())

    block._bench_wrapped = True  # map_reduce calls reduce_blocks: wrap once
    return block


@contextlib.contextmanager
def _wrap_engine(record):
    """Wrap the block function handed to each engine entry point in a wall-interval timer."""
    from ooc_lowrank import engine

    saved = {n: getattr(engine, n) for n in ENGINE_ENTRIES if hasattr(engine, n)}

    def entry(orig):
        @functools.wraps(orig)
        def call(fn, *a, **k):
            if callable(fn) and not getattr(fn, "_bench_wrapped", False):
                fn = _timed_block(fn, record)
            return orig(fn, *a, **k)

        return call

    for n, f in saved.items():
        setattr(engine, n, entry(f))
    try:
        yield
    finally:
        for n, f in saved.items():
            setattr(engine, n, f)


def _dask_counter():
    """A ``dask.callbacks.Callback`` recording each local compute's task count and window."""
    from dask.callbacks import Callback

    class Counter(Callback):
        def __init__(self):
            super().__init__()
            self.tasks, self.windows, self._t = [], [], {}

        def _start(self, dsk):
            self.tasks.append(len(dsk))
            self._t[id(dsk)] = time.perf_counter()

        def _finish(self, dsk, state, errored):
            t0 = self._t.pop(id(dsk), None)
            if t0 is not None:
                self.windows.append((t0, time.perf_counter()))

    return Counter()


@contextlib.contextmanager
def _numba_compile_timer():
    """``res["seconds"]``: wall seconds Numba spent compiling inside the block (cache loads
    are not compiles)."""
    from numba.core import event

    res = {"seconds": 0.0}
    with event.install_timer("numba:compile", lambda s: res.update(seconds=s)):
        yield res


@dataclass
class Probe:
    """Everything recorded around one call."""

    seconds: float = 0.0
    cpu_seconds: float = 0.0
    jit: dict = field(default_factory=dict)
    blocks: _Intervals = field(default_factory=_Intervals)
    counter: object = None
    profile: object = None


def probed(fn, *, profile=False):
    """``(result, Probe)`` of ``fn()`` under the dask counter, the block timers, the Numba
    compile timer and, if ``profile``, ``cProfile`` on this thread."""
    p = Probe(counter=_dask_counter())
    prof = cProfile.Profile() if profile else None
    with _numba_compile_timer() as jit, _wrap_engine(p.blocks), p.counter:
        t0, c0 = time.perf_counter(), time.process_time()
        if prof is not None:
            prof.enable()
        try:
            out = fn()
        finally:
            if prof is not None:
                prof.disable()
            p.seconds = time.perf_counter() - t0
            p.cpu_seconds = time.process_time() - c0
    p.jit, p.profile = jit, prof
    return out, p


def _group(code):
    """The stage a profiled function belongs to, from its file."""
    f = code[0].replace("\\", "/")
    if f == __file__.replace("\\", "/"):
        return "probe"  # the block timers above
    if "/ooc_lowrank/" in f and f.endswith("_blocks.py") or "/kernels/" in f:
        return "block"
    if "/ooc_lowrank/" in f:
        return "driver"
    if "/dask/" in f:
        return "dask"
    # scipy/_lib/_util.py: the batching wrapper scipy (>= 1.15) puts around scipy.linalg
    # functions (eigh, ...), so that the driver's call edge enters the group through it
    if any(s in f for s in ("/numpy/linalg/", "/scipy/linalg/", "/scipy/sparse/linalg/",
                            "/scipy/_lib/_util.py")):  # fmt: skip
        return "linalg"
    return None


def _group_seconds(stats, group, callers_from=("driver",)):
    """Cumulative seconds of a group's functions called directly from ``callers_from`` (by
    default the library's driver code: estimators, cores, engine, storage): each call edge
    that enters the group from there counts once, calls inside the group not again."""
    total = 0.0
    for func, (_, _, _, _, callers) in stats.items():
        if _group(func) != group:
            continue
        for caller, edge in callers.items():
            if _group(caller) in callers_from:
                total += edge[3]
    return total


def breakdown(p: Probe, n_top=12):
    """Stage seconds of a profiled fit (see the module docstring) and the main thread's
    ``n_top`` functions by own time: ``[function, seconds, calls]``."""
    st = pstats.Stats(p.profile).stats
    windows = p.counter.windows
    in_windows = sum(e - s for s, e in windows)
    blocks = p.blocks.items
    # block code the driver runs itself on the main thread, not through an engine entry
    # point (MVM's SGD epochs: blocks read by dask, the kernel called by the driver)
    unwrapped = _group_seconds(st, "block", ("driver", "dask", None))
    out = {
        "wall": p.seconds,
        "block_functions": _union(blocks) + unwrapped,
        "block_functions_thread_seconds": float(sum(b - a for a, b in blocks)) + unwrapped,
        "scheduler": max(0.0, in_windows - _union(blocks, windows)),
        "graph_building": max(0.0, _group_seconds(st, "dask") - in_windows),
        "driver_linear_algebra": _group_seconds(st, "linalg"),
        "jit_compile": p.jit["seconds"],
    }
    out["other"] = max(0.0, p.seconds - sum(out[k] for k in STAGES[:-1]))
    top = sorted(st.items(), key=lambda kv: -kv[1][2])[:n_top]
    out["top_main_thread_tottime"] = [
        [f"{_short(f[0])}:{f[1]}({f[2]})", round(v[2], 4), v[1]] for f, v in top
    ]
    return out


def _short(filename):
    parts = filename.replace("\\", "/").split("/")
    for anchor in ("site-packages", "ooc_lowrank", "kernels"):
        if anchor in parts:
            return "/".join(parts[parts.index(anchor) + (anchor == "site-packages") :])
    return filename


# ------------------------------------------------------------------------------ a run
@dataclass
class Run:
    """One fit to time: ``fit()`` returns a model, ``score(model)`` a dict of metrics,
    ``passes(model)`` the passes over the data (ours), ``warm()`` a tiny fit run first."""

    fit: object
    score: object
    passes: object = None
    warm: object = None
    ours: bool = True


def run_one(run: Run, *, profile=True, log=print):
    rec = {}
    if run.warm is not None:
        _, w = probed(run.warm)
        rec["warmup"] = {"seconds": w.seconds, "jit_compile_seconds": w.jit["seconds"]}
    model, p = probed(run.fit)
    own = model.pop("seconds", None) if isinstance(model, dict) else None
    rec["seconds"] = p.seconds if own is None else own
    rec["cpu_seconds"] = p.cpu_seconds  # all threads of the process (busy-waiting BLAS too)
    rec["metric"] = {k: float(v) for k, v in run.score(model).items()}
    if run.ours:
        rec["passes"] = None if run.passes is None else int(run.passes(model))
        for attr in ("n_iter_", "n_trials_"):  # iterations; GIMC's trials per line-search pass
            if isinstance(getattr(model, attr, None), (int, np.integer)):
                rec[attr.rstrip("_")] = int(getattr(model, attr))
        rec["dask_computes"] = len(p.counter.tasks)
        rec["graph_tasks"] = p.counter.tasks
        rec["graph_tasks_total"] = int(sum(p.counter.tasks))
        rec["dask_computes_per_pass"] = (
            rec["dask_computes"] / rec["passes"] if rec["passes"] else None
        )
        rec["jit_compile_seconds_in_fit"] = p.jit["seconds"]
        rec["block_function_seconds_engine"] = _union(p.blocks.items)
        if profile:
            _, pp = probed(run.fit, profile=True)
            rec["breakdown"] = breakdown(pp)
    log(f"    {rec['seconds']:8.2f} s  {rec['metric']}  passes {rec.get('passes')} "
        f"computes {rec.get('dask_computes')}")  # fmt: skip
    return rec


def run_case(name, ours, peers, *, metric, profile, log, extra=None):
    """``ours`` / ``peers``: ``{label: Run}``; a peer may be a string (why it is unavailable)."""
    out = {"metric": metric, **(extra or {}), "ours": {}, "peers": {}}
    for label, run in peers.items():
        log(f"  [{name}] peer {label}")
        out["peers"][label] = {"unavailable": run} if isinstance(run, str) else run_one(
            run, profile=False, log=log)  # fmt: skip
    for label, run in ours.items():
        log(f"  [{name}] ours {label}")
        rec = run_one(run, profile=profile, log=log)
        measured = {p: r for p, r in out["peers"].items() if r.get("seconds", 0) > 0}
        rec["time_ratio_to_peer"] = {p: rec["seconds"] / r["seconds"] for p, r in measured.items()}
        rec["cpu_ratio_to_peer"] = {
            p: rec["cpu_seconds"] / r["cpu_seconds"]
            for p, r in measured.items()
            if r["cpu_seconds"] > 0
        }
        out["ours"][label] = rec
    return out


def _unavailable(module, pip_name):
    try:
        __import__(module)
    except Exception as e:  # ImportError, or a broken install (myfm needs pkg_resources)
        return f"{pip_name} not importable ({type(e).__name__}: {e}); pip install {pip_name}"
    return None


def _precision(Y, S):
    from benchmarks.bench_gimc import _precision as prec

    return prec(Y, S)


# ------------------------------------------------------------------------------- cases
def case_mvm_mfeat(a, log, *, ovr):
    from sklearn.svm import SVC

    from benchmarks.bench_mvm import load_mfeat
    from ooc_lowrank.mvm import MultiViewMachineClassifier

    Xtr, Xte, ytr, yte, sizes = load_mfeat()
    classes = np.unique(ytr)
    if not ovr:  # one binary class: the first digit against the rest
        ytr, yte = (ytr == classes[0]).astype(int), (yte == classes[0]).astype(int)
    elif a.tiny:
        keep_tr, keep_te = np.isin(ytr, classes[:3]), np.isin(yte, classes[:3])
        Xtr, ytr, Xte, yte = Xtr[keep_tr], ytr[keep_tr], Xte[keep_te], yte[keep_te]
    if a.tiny:
        Xtr, ytr = Xtr[:150], ytr[:150]
    max_iter = 5 if a.tiny else None  # full size: the library's defaults (issues 24 and 28)

    def mvm(it=max_iter):
        kw = {} if it is None else {"max_iter": it}
        return MultiViewMachineClassifier(view_sizes=sizes, solver=a.mvm_solver, random_state=0,
                                          **kw)  # fmt: skip

    def est():  # multi-class inside the classifier: the one-vs-rest models share every pass
        return mvm()

    def passes(m):
        return m.n_passes_

    def acc(m):
        return {"accuracy": m.score(Xte, yte)}

    yb = (ytr == ytr[0]).astype(int)
    ours = {f"MVM ({a.mvm_solver})": Run(lambda: est().fit(Xtr, ytr), acc, passes,
                                         warm=lambda: mvm(3).fit(Xtr[:60], yb[:60]))}  # fmt: skip
    peers = {"sklearn SVC()": Run(lambda: SVC().fit(Xtr, ytr), acc, ours=False)}
    extra = {"n_train": len(ytr), "n_test": len(yte), "view_sizes": sizes,
             "classes": int(np.unique(ytr).size)}  # fmt: skip
    return ours, peers, "accuracy", extra


def case_mvm_movielens(a, log, work):
    import scipy.sparse as sp

    from benchmarks.bench_mvm import DATA
    from ooc_lowrank.io.multiview import convert_movielens_views
    from ooc_lowrank.mvm import MultiViewMachineRegressor

    d = os.path.join(DATA, "movielens-100k")
    side = dict(user_file=os.path.join(d, "u.user"), item_file=os.path.join(d, "u.item"))
    tr = convert_movielens_views(os.path.join(d, "u1.base.gz"), f"{work}/mvm_u1b.zarr",
                                 overwrite=True, **side)  # fmt: skip
    te = convert_movielens_views(os.path.join(d, "u1.test.gz"), f"{work}/mvm_u1t.zarr",
                                 overwrite=True, **side)  # fmt: skip
    kw = dict(n_epochs=1) if a.tiny else {}
    x0, x1, y0 = tr["X0"].read(0, 300), tr["X1"].read(0, 300), tr["y"].read(0, 300)[:, 0]

    ours = {"MVM regressor (README: defaults, seed 0)": Run(
        lambda: MultiViewMachineRegressor(random_state=0, **kw).fit(tr),
        lambda m: {k: v for k, v in m.evaluate(te).items() if k in ("rmse", "mae")},
        lambda m: m.n_passes_,
        warm=lambda: MultiViewMachineRegressor(n_epochs=1, random_state=0).fit([x0, x1], y0),
    )}  # fmt: skip
    why = _unavailable("myfm", "myfm")
    if why is not None:
        peers = {"myFM MyFMRegressor rank 10": why}
    else:
        import myfm

        Xtr = sp.hstack([tr["X0"].read(), tr["X1"].read()], format="csr")
        Xte = sp.hstack([te["X0"].read(), te["X1"].read()], format="csr")
        ytr, yte = tr["y"].read()[:, 0], te["y"].read()[:, 0]
        n_iter, kept = (5, 4) if a.tiny else (200, 190)

        def score(fm):
            p = fm.predict(Xte)
            return {"rmse": np.sqrt(np.mean((p - yte) ** 2)), "mae": np.mean(np.abs(p - yte))}

        peers = {"myFM MyFMRegressor rank 10": Run(
            lambda: myfm.MyFMRegressor(rank=10, random_seed=0).fit(
                Xtr, ytr, n_iter=n_iter, n_kept_samples=kept),
            score, ours=False)}  # fmt: skip
    return ours, peers, "rmse", {"fold": "u1", "n_train": int(tr["y"].shape[0])}


def case_kernelmaxide(a, log):
    from benchmarks.kernelmaxide_yahoo import bsvm_scores, rbf
    from ooc_lowrank import metrics
    from ooc_lowrank.datasets import load_yahoo
    from ooc_lowrank.gimc.features import median_gamma, sample_rows
    from ooc_lowrank.kernelmaxide import KernelMaxide, Maxide, mask_labels, split_rows

    X, Y = load_yahoo("arts")
    if a.tiny:
        X, Y = X[:400], Y[:400]
    train = split_rows(X.shape[0], 0.1, 0)
    test = ~train
    Yobs = mask_labels(Y, 20, train=train, random_state=0)
    landmarks = 50 if a.tiny else 1000
    kw = dict(max_iter=5) if a.tiny else {}

    def rl(m):
        return {"ranking_loss": metrics.ranking_loss(Y[test], m.decision_function(X[test]))}

    def fit(mk):
        return lambda: mk().fit(X, Yobs)

    def warm(mk):
        est = mk().set_params(max_iter=2)
        if getattr(est, "n_features_map", None):
            est.set_params(n_features_map=20)
        return lambda: est.fit(X[:100], Yobs[:100])

    makers = {
        f"KernelMaxide-n (n_landmarks={landmarks})":
            lambda: KernelMaxide(n_features_map=landmarks, random_state=0, **kw),
        "KernelMaxide-f": lambda: KernelMaxide(n_features_map=None, random_state=0, **kw),
        "Maxide()": lambda: Maxide(**kw),
        # the former defaults: SPEC KM-6's span form (100 iterations, the stop does not fire)
        # and Maxide on every direction (docs/kernelmaxide.md section 9)
        f"KernelMaxide-n KM-6 (n_landmarks={landmarks}, n_components=None, lam=1)":
            lambda: KernelMaxide(n_features_map=landmarks, n_components=None, alpha=1.0,
                                 random_state=0, **kw),
        "Maxide(n_components=None, lam=1)": lambda: Maxide(n_components=None, alpha=1.0, **kw),
    }  # fmt: skip
    ours = {k: Run(fit(mk), rl, lambda m: m.n_passes_, warm=warm(mk)) for k, mk in makers.items()}
    g = median_gamma(sample_rows(X, 1000, np.random.default_rng(0)))

    def svc():
        S, _ = bsvm_scores(rbf(X, g), Yobs, 1.0, np.flatnonzero(test))
        return S

    peers = {
        "per-label RBF SVC (C=1, median gamma)": Run(
            svc, lambda S: {"ranking_loss": metrics.ranking_loss(Y[test], S)}, ours=False
        )
    }
    extra = {"shape": list(X.shape), "n_labels": int(Y.shape[1]), "omega": 20,
             "observed": int(Yobs.nnz), "peer_gamma": g,
             "note": "Maxide is the paper's baseline, timed with ours"}  # fmt: skip
    return ours, peers, "ranking_loss", extra


def _gimc_runs(Xtr, Ytr, Xte, Yte, *, m, max_iter, nystroem, extra_fit=None, callback=None):
    """GIMC-LFF / IMC-RFF and the Nystroem / RBFSampler + Ridge peers on in-memory data."""
    from sklearn.kernel_approximation import Nystroem, RBFSampler
    from sklearn.linear_model import Ridge

    from ooc_lowrank.gimc import GIMC
    from ooc_lowrank.gimc.features import median_gamma, sample_rows

    def gimc(learn, **kw):
        return GIMC(n_features_map=m, learn_features=learn, random_state=0,
                    **({"max_iter": max_iter} if max_iter else {}), **kw)  # fmt: skip

    def score(g):
        return g.evaluate(Xte, ["p@1", "p@3", "p@5"], Y=Yte)

    def rff_score(g):  # alpha="auto": the weight chosen on the training rows
        return {**score(g), "alpha_": g.alpha_}

    def warm(learn):
        return lambda: GIMC(n_features_map=8, learn_features=learn, max_iter=2,
                            random_state=0).fit(Xtr[:300], Ytr[:300])  # fmt: skip

    ours = {
        "GIMC-LFF": Run(lambda: gimc(True, callback=callback).fit(Xtr, Ytr), score,
                        lambda g: g.n_passes_, warm=warm(True)),
        "IMC-RFF": Run(lambda: gimc(False).fit(Xtr, Ytr), rff_score, lambda g: g.n_passes_,
                       warm=warm(False)),
        # issue 24: the fixed weight of before alpha="auto" (the default), for the same run
        "IMC-RFF (alpha=1)": Run(lambda: gimc(False, alpha=1.0).fit(Xtr, Ytr), score,
                                 lambda g: g.n_passes_),
    }  # fmt: skip
    ours.update(extra_fit or {})
    gamma = median_gamma(sample_rows(Xtr, 1000, np.random.default_rng(0)))
    Yd = Ytr.toarray() if hasattr(Ytr, "toarray") else np.asarray(Ytr)

    def peer(fmap):
        return lambda: (fmap, Ridge(alpha=1.0).fit(fmap.fit_transform(Xtr), Yd))

    def pscore(fr):
        fmap, ridge = fr
        return _precision(Yte, ridge.predict(fmap.transform(Xte)))

    peers = {
        f"Nystroem({nystroem}) + Ridge": Run(
            peer(Nystroem(gamma=gamma, n_components=nystroem, random_state=0)), pscore,
            ours=False),
        f"RBFSampler({2 * m}) + Ridge": Run(
            peer(RBFSampler(gamma=gamma, n_components=2 * m, random_state=0)), pscore,
            ours=False),
    }  # fmt: skip
    return ours, peers, gamma


def case_gimc_bibtex(a, log, work):
    import bibtex_end_to_end as be

    from ooc_lowrank.storage import open_dataset

    stores = be.convert(be.data_dir(None) / "bibtex", Path(work) / "bibtex")
    tr, te = open_dataset(stores["train"]), open_dataset(stores["test"])
    X, Y, Xte, Yte = tr["X"].read(), tr["Y"].read(), te["X"].read(), te["Y"].read()
    m, nys, it = (32, 100, 2) if a.tiny else (500, 2000, None)
    if a.tiny:
        X, Y, Xte, Yte = X[:500], Y[:500], Xte[:300], Yte[:300]
    ours, peers, gamma = _gimc_runs(X, Y, Xte, Yte, m=m, max_iter=it, nystroem=nys)
    extra = {
        "n_train": int(X.shape[0]),
        "n_test": int(Xte.shape[0]),
        "m": m,
        "peer_gamma_median": gamma,
        "settings": "GIMC defaults (README's bibtex command)",
    }
    return ours, peers, "p@1", extra


def _iteration_marks(fits):
    """A GIMC callback appending, for each fit, ``{iteration: elapsed seconds}`` to ``fits``
    (iteration 0 is the initial pass and starts a fit)."""

    def cb(it, elapsed, obj):
        if it == 0 or not fits:
            fits.append({})
        fits[-1][it] = elapsed

    return cb


def _throughput(fits, n, d, m, nnzA, T):
    """GFLOP/s of the first (timed) fit that reported its iterations."""
    from benchmarks.bench_gimc import iteration_flops, steady_seconds

    if not fits or len(fits[0]) < 2:
        return None
    marks = fits[0]
    _, it_s = steady_seconds(marks)
    flops = iteration_flops(n, d, m, nnzA, T)
    return {
        "seconds_per_iteration": it_s,
        "gflop_per_iteration": flops / 1e9,
        "gflops": flops / it_s / 1e9,
        "n": n,
        "d": d,
        "m": m,
        "nnz_labels": nnzA,
    }


def case_gimc_demo(a, log, work):
    from ooc_lowrank.gimc import GIMC
    from ooc_lowrank.generators import generate_multilabel
    from ooc_lowrank.gimc.demo import run_demo

    defaults = {k: v.default for k, v in inspect.signature(run_demo).parameters.items()}
    n_rows = 2500 if a.tiny else defaults["n_rows"]
    m = 16 if a.tiny else defaults["n_components"]
    it = 3 if a.tiny else defaults["max_iter"]
    ds = generate_multilabel(os.path.join(work, "demo.zarr"), n_rows=n_rows,
                             n_features=defaults["n_features"], n_labels=defaults["n_labels"],
                             seed=defaults["seed"], overwrite=True)  # the demo's data
    n_train = int(0.8 * n_rows)
    X, Y = ds["X"].read(), ds["Y"].read()
    Xtr, Ytr, Xte, Yte = X[:n_train], Y[:n_train], X[n_train:], Y[n_train:]
    marks = []
    Xd, Yd = ds["X"].to_dask(), ds["Y"].to_dask()

    def store_fit():  # as the demo does: Dask arrays read from the store
        return GIMC(n_features_map=m, alpha=defaults["alpha"], max_iter=it,
                    random_state=defaults["seed"]).fit(Xd[:n_train], Yd[:n_train])  # fmt: skip

    extra_fit = {"GIMC-LFF (Dask arrays from the store, as the demo)": Run(
        store_fit, lambda g: g.evaluate(Xte, ["p@1", "p@3", "p@5"], Y=Yte),
        lambda g: g.n_passes_)}  # fmt: skip
    ours, peers, gamma = _gimc_runs(Xtr, Ytr, Xte, Yte, m=m, max_iter=it,
                                    nystroem=100 if a.tiny else 2000, extra_fit=extra_fit,
                                    callback=_iteration_marks(marks))  # fmt: skip
    extra = {"n_train": n_train, "d": defaults["n_features"], "n_labels": defaults["n_labels"],
             "m": m, "max_iter": it, "peer_gamma_median": gamma, "_marks": marks,
             "_shape": (n_train, defaults["n_features"], m, int(Ytr.nnz))}  # fmt: skip
    return ours, peers, "p@1", extra


def case_gimc_big(a, log, work):
    from benchmarks.bench_gimc import ensure_store
    from ooc_lowrank.gimc import GIMC
    from ooc_lowrank.storage import open_dataset

    n = 1_000_000 if a.big else a.big_rows
    d, m, L, it = (50, 16, 50, 2) if a.tiny else (500, 500, 1000, 3)
    if a.tiny:
        n = 4000
    t = time.perf_counter()
    ds = open_dataset(ensure_store(a.workdir or work, n, d, L, lambda s: log("  " + s)))
    log(f"  store ready in {time.perf_counter() - t:.1f}s")
    marks = []

    def fit():
        return GIMC(n_features_map=m, max_iter=it, tol=0.0, random_state=0,
                    callback=_iteration_marks(marks)).fit(ds)  # fmt: skip

    def warm():
        return GIMC(n_features_map=8, max_iter=1, random_state=0).fit(
            ds["X"].read(0, 2000), ds["Y"].read(0, 2000)
        )

    ours = {"GIMC-LFF (store, resident)": Run(fit, lambda g: {"objective": g.objective_[-1]},
                                              lambda g: g.n_passes_, warm=warm)}  # fmt: skip
    extra = {"n": n, "d": d, "m": m, "n_labels": L, "max_iter": it,
             "peer_note": "no peer: the throughput reference of gimc_demo",
             "_marks": marks, "_shape": (n, d, m, int(ds["Y"].nnz))}  # fmt: skip
    return ours, {}, "objective", extra


def case_clustering(a, log):
    from sklearn.cluster import KMeans, SpectralClustering

    from benchmarks.bench_gimc_multiclass import data_dir
    from benchmarks.imc_clustering import load_dataset
    from ooc_lowrank.imc import GIMCClustering, clustering_error, sample_constraints

    X, y, _ = load_dataset("segment", data_dir())
    if a.tiny:
        idx = np.sort(np.random.default_rng(0).choice(X.shape[0], 300, replace=False))
        X, y = X[idx], y[idx]
    n, k = X.shape[0], int(np.unique(y).size)
    cons = sample_constraints(y, 10 * n, random_state=0)
    m, kw = (20, dict(max_iter=3, n_init=1)) if a.tiny else (500, {})
    n_init = 2 if a.tiny else 10

    def err(labels):
        return {"error": clustering_error(labels, y)}

    def est(mm=m, **extra):
        return GIMCClustering(n_clusters=k, features="fourier", learn_features=True,
                              n_features_map=mm, random_state=0, **{**kw, **extra})  # fmt: skip

    warm = lambda: est(8, max_iter=2, alpha=1.0).fit(  # noqa: E731
        X[:100], constraints=sample_constraints(y[:100], 200, random_state=0))
    # issue 24's row: lam fixed at 1.0; issue 28's: the default lam="auto" (selection + refit)
    ours = {f"GIMCClustering (GIMC-LFF, m = {m}, 10n)": Run(
        lambda: est(alpha=1.0).fit(X, constraints=cons), lambda e: err(e.labels_),
        lambda e: e.imc_.n_passes_, warm=warm),
        f"GIMCClustering (GIMC-LFF, m = {m}, 10n), default lam='auto'": Run(
        lambda: est().fit(X, constraints=cons),
        lambda e: {**err(e.labels_), "lam": e.alpha_, "selection_seconds": e.selection_time_},
        lambda e: e.imc_.n_passes_ + e.selection_passes_, warm=warm)}  # fmt: skip
    peers = {
        f"KMeans(n_init={n_init}), raw features": Run(
            lambda: KMeans(n_clusters=k, n_init=n_init, random_state=0).fit(X),
            lambda e: err(e.labels_), ours=False),
        "SpectralClustering(affinity='nearest_neighbors'), raw features": Run(
            lambda: SpectralClustering(n_clusters=k, affinity="nearest_neighbors",
                                       random_state=0).fit(X),
            lambda e: err(e.labels_), ours=False),
    }  # fmt: skip
    extra = {
        "n": n,
        "d": int(X.shape[1]),
        "k": k,
        "constraints": 10 * n,
        "m": m,
        "note": "peers ignore the constraints (time reference; error for context); "
        "SpectralClustering's default rbf affinity (gamma = 1) finds 2 clusters "
        "here (error 0.85 on a 300-row subset): nearest_neighbors instead",
    }
    return ours, peers, "error", extra


def _svds_peer(train, test, rank):
    """Fallback GLRL peer: global mean + regularized row / column biases, then a rank-``rank``
    truncated SVD (``scipy.sparse.linalg.svds``) of the residual ratings (unobserved = 0)."""
    import scipy.sparse as sp
    from scipy.sparse.linalg import svds

    r, c, v = train
    shape = (int(max(r.max(), test[0].max())) + 1, int(max(c.max(), test[1].max())) + 1)
    mu = v.mean()
    bu = np.bincount(r, v - mu, shape[0]) / (np.bincount(r, minlength=shape[0]) + 5)
    bi = np.bincount(c, v - mu - bu[r], shape[1]) / (np.bincount(c, minlength=shape[1]) + 5)
    R = sp.csr_matrix((v - mu - bu[r] - bi[c], (r, c)), shape=shape)
    U, s, Vt = svds(R, k=rank, random_state=0)
    tr, tc, tv = test
    p = np.clip(mu + bu[tr] + bi[tc] + np.einsum("ij,j,ij->i", U[tr], s, Vt.T[tc]), 1, 5)
    return {"mae": np.mean(np.abs(p - tv)), "rmse": np.sqrt(np.mean((p - tv) ** 2))}


def case_glrl(a, log, work):
    from benchmarks.bench_glrl import DEFAULT_DATA, _surprise_svd, _warmup
    from ooc_lowrank.datasets import load_movielens
    from ooc_lowrank.glrl import GreedyLowRank
    from ooc_lowrank.io.ratings import convert_movielens

    d = DEFAULT_DATA / "movielens-100k"
    tr = os.path.join(work, "glrl_u1.base.zarr")
    te = os.path.join(work, "glrl_u1.test.zarr")
    convert_movielens(str(d / "u1.base.gz"), tr, shape=(943, 1682), overwrite=True)
    convert_movielens(str(d / "u1.test.gz"), te, shape=(943, 1682), overwrite=True)
    rank = 2 if a.tiny else 10

    ours = {f"GLRL (README: loss l1, rank {rank}, refit none)": Run(
        lambda: GreedyLowRank(loss="l1", n_components=rank, refit="none", random_state=0).fit(tr),
        lambda g: {k: v for k, v in g.evaluate(te, ["mae", "rmse"]).items() if k != "n"},
        lambda g: g.n_passes_, warm=_warmup,
    )}  # fmt: skip
    why = _unavailable("surprise", "scikit-surprise")
    if why is None:

        def svd():
            res = _surprise_svd(d, "u1", work)
            return {"seconds": res["svd_time_s"], "mae": res["svd_mae"], "rmse": res["svd_rmse"]}

        peers = {"Surprise SVD() (fit seconds)": Run(svd, lambda r: r, ours=False)}
    else:
        train, test = load_movielens(d / "u1.base.gz"), load_movielens(d / "u1.test.gz")
        peers = {"Surprise SVD()": why, f"biases + scipy svds rank {rank} (fallback)": Run(
            lambda: _svds_peer(train, test, rank), lambda r: r, ours=False)}  # fmt: skip
    return ours, peers, "mae", {"fold": "u1"}


# -------------------------------------------------------------------------------- main
def _write(path, res):
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(res, indent=1, default=float))
    os.replace(tmp, path)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tiny", action="store_true", help="tiny sizes (the tests)")
    p.add_argument("--only", default=None, help="comma-separated cases: " + ",".join(CASES))
    p.add_argument("--out", default=str(HERE / "results" / "small.json"))
    p.add_argument("--big", action="store_true", help="gimc_big at 1M x 500 (a 2 GB store)")
    p.add_argument("--big-rows", type=int, default=200_000, help="gimc_big rows without --big")
    p.add_argument("--mvm-solver", default="auto", help="MVM solver on mfeat (default: the library default)")
    p.add_argument("--no-profile", action="store_true", help="skip the profiled fits")
    p.add_argument("--workdir", default=None, help="keep generated stores here (reused)")
    p.add_argument("--note", default=None, help="stored as the result's note (conditions)")
    p.add_argument("--quiet", action="store_true")
    a = p.parse_args(argv)
    only = CASES if a.only is None else tuple(c.strip() for c in a.only.split(","))
    bad = sorted(set(only) - set(CASES))
    if bad:
        p.error(f"--only: unknown case(s) {bad}; choose from {', '.join(CASES)}")
    log = (lambda *_: None) if a.quiet else functools.partial(print, flush=True)

    from threadpoolctl import threadpool_info, threadpool_limits

    import ooc_lowrank

    res = {
        "benchmark": "small",
        "tiny": a.tiny,
        "note": a.note,
        "command": "python benchmarks/bench_small.py " + " ".join(argv or sys.argv[1:]),
        "machine": {"cpus": os.cpu_count(), "loadavg_start": os.getloadavg(),
                    "blas": [{k: i.get(k) for k in ("internal_api", "num_threads")}
                             for i in threadpool_info() if i.get("user_api") == "blas"]},
        "version": ooc_lowrank.__version__ if hasattr(ooc_lowrank, "__version__") else None,
        "stages": list(STAGES),
        "cases": {},
    }  # fmt: skip
    work = tempfile.mkdtemp(prefix="bench-small-")
    makers = {
        "mvm_mfeat_binary": lambda: case_mvm_mfeat(a, log, ovr=False),
        "mvm_mfeat_ovr": lambda: case_mvm_mfeat(a, log, ovr=True),
        "mvm_movielens": lambda: case_mvm_movielens(a, log, work),
        "kernelmaxide_arts": lambda: case_kernelmaxide(a, log),
        "gimc_bibtex": lambda: case_gimc_bibtex(a, log, work),
        "gimc_demo": lambda: case_gimc_demo(a, log, work),
        "gimc_big": lambda: case_gimc_big(a, log, work),
        "clustering_segment": lambda: case_clustering(a, log),
        "glrl_movielens": lambda: case_glrl(a, log, work),
    }
    t_all = time.perf_counter()
    with contextlib.ExitStack() as stack:
        stack.callback(shutil.rmtree, work, ignore_errors=True)
        if a.tiny:  # structure, not speed: one BLAS / OpenMP thread stays quick on a busy machine
            stack.enter_context(threadpool_limits(1))
        for name in only:
            log(f"[{name}]")
            t = time.perf_counter()
            try:
                ours, peers, metric, extra = makers[name]()
                marks, shape = extra.pop("_marks", None), extra.pop("_shape", None)
                rec = run_case(name, ours, peers, metric=metric, profile=not a.no_profile,
                               log=log, extra=extra)  # fmt: skip
            except FileNotFoundError as e:
                res["cases"][name] = {"skipped": f"data missing: {e}; set OOC_LOWRANK_DATA"}
                log(f"  skipped: {e}")
                continue
            except Exception as e:  # recorded and shown; the other cases still run
                res["cases"][name] = {"error": repr(e), "traceback": traceback.format_exc()}
                log(traceback.format_exc())
                continue
            if marks is not None:  # the timed fit's iterations, not the profiled one's
                (first,) = [r for r in rec["ours"].values() if "n_trials" in r][:1]
                rec["throughput"] = _throughput(marks, *shape, first["n_trials"])
            rec["seconds_case"] = time.perf_counter() - t
            rec["loadavg_end"] = os.getloadavg()
            res["cases"][name] = rec
            _write(a.out, res)
    res["summary"] = summary(res)
    res["seconds_total"] = time.perf_counter() - t_all
    _write(a.out, res)
    return res


def summary(res):
    """One entry per (case, ours): seconds, metric, passes, computes, the time and CPU ratios to
    each peer; and the GIMC throughput ratio demo / big."""
    out = {}
    for name, c in res["cases"].items():
        for label, r in c.get("ours", {}).items():
            out[f"{name}: {label}"] = {
                "seconds": r["seconds"],
                c["metric"]: r["metric"].get(c["metric"]),
                "passes": r["passes"],
                "dask_computes": r["dask_computes"],
                "time_ratio_to_peer": r["time_ratio_to_peer"],
                "cpu_ratio_to_peer": r["cpu_ratio_to_peer"],
            }
    demo = res["cases"].get("gimc_demo", {}).get("throughput")
    big = res["cases"].get("gimc_big", {}).get("throughput")
    if demo and big:
        out["gimc_throughput_demo_over_big"] = demo["gflops"] / big["gflops"]
    return out


if __name__ == "__main__":
    main()
