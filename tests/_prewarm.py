"""Compile the slowest Numba kernels' library signatures into the on-disk kernel cache, in a
low-priority background process that ``conftest.py`` starts with the test session.

On a cold cache (a fresh clone: ``.ci/run``) each signature of the fused GLRL pass kernels costs
8-11 s of compilation (``kernels/glrl.py``: one register copy per rank), and the test session
compiles four of them one after the other while its second core mostly idles (most tests are
serial Python).  Compiled here, they are written to the same cache (same installed files, same
``OOC_LOWRANK_NUMBA_CACHE_DIR`` / user cache folder), and the first test that needs one loads it
instead of compiling; a test that gets there first compiles it itself, as without this, so the
results of the tests cannot depend on it.  Set ``OOC_TEST_PREWARM=0`` to switch it off.

After the fused GLRL kernels it runs tiny fits through the public API (GLRL, KernelMaxide on
dense and sparse rows of both dtypes, MVM L-BFGS and SGD, GIMC, a table conversion with string
keys): each compiles the library signatures of the next slowest kernels (1-8 s each on a cold
cache; measured per function with a Numba compile-event recorder).  Each step stands alone: one
that fails (an API that moved) only leaves its kernels to the tests, as without this file.
"""

from __future__ import annotations

import os


def main():
    try:
        os.nice(10)  # the tests come first
    except OSError:
        pass
    for step in (_glrl_fused, _glrl_fit, _kernelmaxide, _mvm, _gimc, _tables):
        try:
            step()
        except Exception:  # noqa: BLE001 - a moved API leaves its kernels to the tests
            pass


def _glrl_fused():
    import numpy as np
    import scipy.sparse as sp

    from ooc_lowrank.glrl import _blocks
    from ooc_lowrank.kernels import glrl as K

    rng = np.random.default_rng(0)
    m, n, t = 7, 5, 2
    U, V, theta = rng.standard_normal((m, t)), rng.standard_normal((n, t)), np.ones(t)
    # the signatures the library compiles: writable int32 CSR blocks of float32 or float64
    # values (what the first tests to need them pass), in the order the test files need them
    for step, dtype in (("power", np.float32), ("power", np.float64), ("full", np.float64),
                        ("full", np.float32), ("econ", np.float64)):  # fmt: skip
        csr = sp.random(m, n, density=0.5, format="csr", random_state=0, dtype=dtype)
        csr.indices = csr.indices.astype(np.int32)
        csr.indptr = csr.indptr.astype(np.int32)
        if step == "power":
            Vv = _blocks.pack_columns(V, np.ones(n))
            _blocks.power_block(0, csr, U, Vv, theta, K.SQUARE, 1.0, np.ones(m))
        elif step == "full":
            _blocks.refit_full_block(0, csr, U, V, theta, K.SQUARE, 1.0)
        else:
            _blocks.refit_econ_block(0, csr, U, V, theta, 0.8, -0.3, K.SQUARE, 1.0)



def _glrl_fit():
    import numpy as np

    from ooc_lowrank import GreedyLowRank

    rng = np.random.default_rng(0)
    cells = rng.choice(600, 200, replace=False)
    rows, cols = cells // 20, cells % 20
    for vals in (rng.standard_normal(200), rng.standard_normal(200).astype(np.float32)):
        g = GreedyLowRank(n_components=2, max_iter=2).fit((rows, cols, vals), shape=(30, 20))
        g.top_k(np.arange(3), k=2)
        g.predict(rows[:5], cols[:5])


def _kernelmaxide():
    import numpy as np
    import scipy.sparse as sp

    from ooc_lowrank import KernelMaxide
    from ooc_lowrank.kernelmaxide import mask_labels
    from ooc_lowrank.metrics import ranking_loss

    rng = np.random.default_rng(0)
    Y = sp.csr_matrix((rng.random((80, 6)) < 0.3).astype(float))
    Yo = mask_labels(Y, omega=50, random_state=0)
    for dtype in (np.float64, np.float32):
        Xs = sp.random(80, 40, density=0.1, format="csr", random_state=0, dtype=dtype)
        for X in (Xs, Xs.toarray()):  # CSR rows and mostly-zero dense rows
            m = KernelMaxide(n_features_map=10, max_iter=3, random_state=0).fit(X, Yo)
            ranking_loss(Y, m.decision_function(X))


def _mvm():
    import numpy as np

    from ooc_lowrank import MultiViewMachineClassifier, MultiViewMachineRegressor

    rng = np.random.default_rng(0)
    X = rng.standard_normal((60, 7))
    MultiViewMachineClassifier(view_sizes=[3, 4], max_iter=3, random_state=0).fit(
        X, rng.integers(0, 3, 60))
    V = [rng.standard_normal((60, 4)), rng.standard_normal((60, 3))]
    MultiViewMachineRegressor(n_components=2, n_epochs=1, solver="sgd", random_state=0).fit(
        V, rng.standard_normal(60))


def _gimc():
    import numpy as np
    import scipy.sparse as sp

    from ooc_lowrank import GIMC

    rng = np.random.default_rng(0)
    Y = sp.csr_matrix((rng.random((60, 5)) < 0.3).astype(np.float32))
    for dtype in (np.float64, np.float32):
        X = rng.standard_normal((60, 6)).astype(dtype)
        GIMC(n_features_map=8, max_iter=2, random_state=0).fit(X, Y)


def _tables():
    import tempfile

    import numpy as np
    import pandas as pd

    from ooc_lowrank.io.tables import convert_table

    rng = np.random.default_rng(0)
    df = pd.DataFrame({"u": [f"u{i}" for i in rng.integers(0, 40, 300)],
                       "i": rng.integers(0, 30, 300), "r": rng.random(300)})  # fmt: skip
    with tempfile.TemporaryDirectory() as d:
        convert_table(df, f"{d}/t.zarr", kind="interactions", row_key="u", col_key="i",
                      value="r", duplicates="last")  # fmt: skip
        # the spill-once path (tables above _KEEP_ENTRIES_BYTES): its kernels, both key types
        from ooc_lowrank.io import tables

        tables._KEEP_ENTRIES_BYTES = 0  # this process only
        for u, i in (("u", "i"), ("i", "u")):
            convert_table(df, f"{d}/s{u}.zarr", kind="interactions", row_key=u, col_key=i,
                          value="r", duplicates="sum", batch_rows=100, bucket_nnz=50)  # fmt: skip


if __name__ == "__main__":
    main()
