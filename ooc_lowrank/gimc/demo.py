"""The main job (``ooc-lowrank demo``): generate a multi-label dataset on disk, train GIMC-LFF
and IMC-RFF at the same m on the local scheduler, and print P@1/3/5 and time for both."""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

__all__ = ["run_demo"]


def _fit_block_rows(n_train, n_components):
    """Store blocks sized for the fit, not for the input row: the blocks GIMC gives in-memory
    data (about 16 MB of the float32 feature rows ``Phi``, 2m wide, at least 4 blocks), so the
    cached training rows keep both cores busy.  The store's own default sizes blocks by the
    input row (100 floats + labels): the 32,000 training rows were one block, one core."""
    from ooc_lowrank import engine

    return engine._default_rows(2 * n_components * 4, n_train)


def run_demo(
    workdir=None,
    n_rows=40_000,
    *,
    n_features=100,
    n_labels=50,
    n_components=200,
    max_iter=15,
    alpha="auto",
    seed=0,
    quiet=False,
):
    """Run the demo and return its results.

    Parameters
    ----------
    workdir : str or None
        Where the train/test stores go (a temporary directory, removed afterwards, when None).
    n_rows : int
        Rows generated in total (80% train, 20% test).
    n_features, n_labels, n_components, max_iter, alpha, seed
        Data shape and model settings (same ``m`` for both methods; ``alpha="auto"`` is
        :class:`~ooc_lowrank.gimc.GIMC`'s default: 1.0 for GIMC-LFF, chosen by leave-one-out on
        the training rows for IMC-RFF).
    quiet : bool
        Print nothing.

    Returns
    -------
    dict
        ``{"GIMC-LFF": {"p@1": .., "p@3": .., "p@5": .., "seconds": ..}, "IMC-RFF": {...}, ...}``
    """
    from ooc_lowrank.generators import generate_multilabel
    from ooc_lowrank.gimc import GIMC
    from ooc_lowrank.storage import open_dataset

    say = (lambda *a: None) if quiet else print
    tmp = workdir is None
    root = Path(tempfile.mkdtemp(prefix="ooc-demo-") if tmp else workdir)
    root.mkdir(parents=True, exist_ok=True)
    try:
        t = time.perf_counter()
        n_train = int(0.8 * n_rows)
        # one store (one ground-truth label function); rows [0, n_train) train, the rest test
        br = _fit_block_rows(n_train, n_components)
        url = str(root / "data.zarr")
        shape = dict(n_rows=n_rows, n_features=n_features, n_labels=n_labels)  # 3 labels a row
        generate_multilabel(url, **shape, seed=seed, block_rows=br, overwrite=True)
        ds = open_dataset(url)
        X, Y = ds["X"].to_dask(), ds["Y"].to_dask()
        Xtr, Ytr, Xte, Yte = X[:n_train], Y[:n_train], X[n_train:], Y[n_train:]
        say(
            f"generated {n_rows} rows ({n_train} train / {n_rows - n_train} test), "
            f"{n_features} features, {n_labels} labels in {time.perf_counter() - t:.1f}s ({root})"
        )
        out = {"n_rows": n_rows, "n_components": n_components}
        model = dict(features="fourier", n_features_map=n_components, alpha=alpha)
        for name, learn in (("IMC-RFF", False), ("GIMC-LFF", True)):
            t = time.perf_counter()
            g = GIMC(**model, learn_features=learn, max_iter=max_iter, random_state=seed)
            g.fit(Xtr, Ytr)
            fit_s = time.perf_counter() - t
            res = g.evaluate(Xte, ["p@1", "p@3", "p@5"], Y=Yte)
            res.update(seconds=fit_s, n_iter=g.n_iter_, n_passes=g.n_passes_)
            out[name] = res
        say(
            f"{'method':10s} {'P@1':>7s} {'P@3':>7s} {'P@5':>7s} {'fit s':>7s}  "
            f"(m = {n_components})"
        )
        for name in ("GIMC-LFF", "IMC-RFF"):
            r = out[name]
            say(
                f"{name:10s} {100 * r['p@1']:7.2f} {100 * r['p@3']:7.2f} {100 * r['p@5']:7.2f} "
                f"{r['seconds']:7.1f}"
            )
        return out
    finally:
        if tmp:
            shutil.rmtree(root, ignore_errors=True)
