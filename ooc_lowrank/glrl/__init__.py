"""Greedy low-rank pursuit: GLRL (full refit), EGLRL (economic refit), no refit, R1MP
(square loss + full refit) and nonsmooth GLRL (L1 / hinge) on out-of-core observed entries.

* :mod:`.losses`  - the loss family (value, (sub)gradient, Lipschitz constant)
* :mod:`._blocks` - block functions (one block of observed entries -> small sums)
* :mod:`.core`    - the functional algorithm (:func:`greedy_pursuit`, :func:`top_triplet`)
* :mod:`.estimator` - :class:`GreedyLowRank` (sklearn style, save/load, evaluate)
"""

from .core import GreedyResult, greedy_pursuit, top_triplet
from .estimator import GreedyLowRank
from .losses import LOSSES, get_loss

__all__ = ["LOSSES", "GreedyLowRank", "GreedyResult", "get_loss", "greedy_pursuit", "top_triplet"]
