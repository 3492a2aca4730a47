"""Compile the slowest Numba kernels' library signatures into the on-disk kernel cache, in a
low-priority background process that ``conftest.py`` starts with the test session.

On a cold cache (a fresh clone: ``.ci/run``) each signature of the fused GLRL pass kernels costs
8-11 s of compilation (``kernels/glrl.py``: one register copy per rank), and the test session
compiles four of them one after the other while its second core mostly idles (most tests are
serial Python).  Compiled here, they are written to the same cache (same installed files, same
``OOC_LOWRANK_NUMBA_CACHE_DIR`` / user cache folder), and the first test that needs one loads it
instead of compiling; a test that gets there first compiles it itself, as without this, so the
results of the tests cannot depend on it.  Set ``OOC_TEST_PREWARM=0`` to switch it off.
"""

from __future__ import annotations

import os


def main():
    try:
        os.nice(10)  # the tests come first
    except OSError:
        pass
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


if __name__ == "__main__":
    main()
