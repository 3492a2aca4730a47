"""GIMC: goal-directed inductive matrix completion (multi-label / multi-class learning).

* :class:`GIMC`: the estimator (GIMC-LFF, GIMC-LNYS, "both"; IMC-RFF / IMC-NYS with
  ``learn_features=False``).
* :class:`FourierFeatures`, :class:`NystromFeatures`: the feature maps as transformers.
* :func:`ooc_lowrank.gimc.core.fit_gimc`: the functional core (math of SPEC 1.3-1.4).
"""

from ooc_lowrank.gimc.estimator import GIMC
from ooc_lowrank.gimc.features import FourierFeatures, NystromFeatures

__all__ = ["GIMC", "FourierFeatures", "NystromFeatures"]
