"""ooc_lowrank: out-of-core low-rank learning on Zarr stores with Numba kernels and Dask.

Methods: GIMC (goal-directed inductive matrix completion), GLRL/EGLRL (greedy low-rank pursuit),
KernelMaxide and multi-view machines.  Data lives in chunked Zarr v3 stores
(:mod:`ooc_lowrank.storage`), streams in row blocks through the engine
(:mod:`ooc_lowrank.engine`), and only small state (factors, Gram matrices) lives in memory.
"""

from __future__ import annotations

import logging

from ._blas import prefer_avx512_openblas

prefer_avx512_openblas()  # before anything imports NumPy (OpenBLAS reads it when it loads)

# Everything else is imported on first use (module __getattr__ below): ``import ooc_lowrank``
# stays light, so the ``ooc-lowrank`` command (whose entry point imports this package first)
# handles Ctrl-C itself before NumPy, Zarr or Dask load (issue 23: a traceback otherwise).
_LAZY = {
    "load": "._persist",
    "OOCLowRankWarning": "._validation",
    "StoreError": "._validation",
    "DatasetWriter": ".storage",
    "open_dataset": ".storage",
    "estimate_memory": "._estimate",
    "GIMC": ".gimc",
    "GIMCCV": ".gimc",
    "InductiveMatrixCompletion": ".imc",
    "GIMCClustering": ".imc",
    "GreedyLowRank": ".glrl",
    "GreedyLowRankCV": ".glrl",
    "MultiViewMachineRegressor": ".mvm",
    "MultiViewMachineClassifier": ".mvm",
    "KernelMaxide": ".kernelmaxide",
    "Maxide": ".kernelmaxide",
}

__version__ = "0.1.0"

logging.getLogger("ooc_lowrank").addHandler(logging.NullHandler())

__all__ = [
    "DatasetWriter",
    "OOCLowRankWarning",
    "StoreError",
    "__version__",
    "load",
    "open_dataset",
]


def __getattr__(name):  # lazy access to everything (the estimators import numba kernels)
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module 'ooc_lowrank' has no attribute {name!r}")
