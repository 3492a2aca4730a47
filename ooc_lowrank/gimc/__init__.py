"""GIMC: goal-directed inductive matrix completion (multi-label / multi-class learning).

* :class:`GIMC`: the estimator (GIMC-LFF, GIMC-LNYS, "both"; IMC-RFF / IMC-NYS with
  ``learn_features=False``).
* :class:`FourierFeatures`, :class:`NystromFeatures`: the feature maps as transformers.
* :func:`ooc_lowrank.gimc.core.fit_gimc`: the functional core (math of SPEC 1.3-1.4).

The estimators are imported lazily: Dask workers unpickle block functions from
:mod:`ooc_lowrank.gimc._blocks`, and importing this package must not pull scikit-learn (about
50 MB of resident memory) into every worker.
"""

from __future__ import annotations

__all__ = ["GIMC", "GIMCCV", "FourierFeatures", "NystromFeatures"]


def __getattr__(name):
    if name == "GIMC":
        from ooc_lowrank.gimc.estimator import GIMC

        return GIMC
    if name == "GIMCCV":  # K-fold cross-validation of gamma x alpha x iterations
        from ooc_lowrank.gimc.cv import GIMCCV

        return GIMCCV
    if name in ("FourierFeatures", "NystromFeatures"):
        from ooc_lowrank.gimc import features

        return getattr(features, name)
    raise AttributeError(f"module 'ooc_lowrank.gimc' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + __all__)
