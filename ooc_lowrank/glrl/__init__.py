"""Greedy low-rank pursuit: GLRL (full refit), EGLRL (economic refit), no refit, R1MP
(square loss + full refit) and nonsmooth GLRL (L1 / hinge) on out-of-core observed entries.

* :mod:`.losses`  - the loss family (value, (sub)gradient, Lipschitz constant)
* :mod:`._blocks` - block functions (one block of observed entries -> small sums)
* :mod:`.core`    - the functional algorithm (:func:`greedy_pursuit` and its
  :class:`PursuitOptions`, :func:`top_triplet`)
* :mod:`.estimator` - :class:`GreedyLowRank` (sklearn style, save/load, evaluate)
* :mod:`.cv` - :class:`GreedyLowRankCV` (K-fold CV over the observed entries)

Names are imported lazily so that Dask workers unpickling :mod:`._blocks` functions do not
import scikit-learn.
"""

from __future__ import annotations

__all__ = [
    "LOSSES",
    "GreedyLowRank",
    "GreedyLowRankCV",
    "GreedyResult",
    "PursuitOptions",
    "get_loss",
    "greedy_pursuit",
    "resolve_greedy_l2",
    "resolve_init",
    "top_triplet",
]

_WHERE = {
    "GreedyResult": "core",
    "greedy_pursuit": "core",
    "PursuitOptions": "core",
    "top_triplet": "core",
    "resolve_init": "core",
    "resolve_greedy_l2": "core",
    "GreedyLowRank": "estimator",
    "GreedyLowRankCV": "cv",
    "LOSSES": "losses",
    "get_loss": "losses",
}


def __getattr__(name):
    if name in _WHERE:
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
    raise AttributeError(f"module 'ooc_lowrank.glrl' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + __all__)
