"""KernelMaxide and Maxide (Xu & Zhou 2018; SPEC 4): multi-label learning with missing labels.

* :mod:`.masking`: the observed-label representation (+1 / -1 stored, missing not stored) and
  the paper's masking protocol.
* :mod:`.core`: the APG of the corrected Algorithm 1 in the factored span form (engine passes).
* :mod:`.estimator`: the scikit-learn estimators :class:`KernelMaxide` and :class:`Maxide`
  (imported lazily, so Dask workers that unpickle block functions do not load scikit-learn).
* :mod:`.cv`: :class:`KernelMaxideCV` / :class:`MaxideCV`, parameters chosen on held-out
  observed labels (lazy too).
"""

from .masking import check_observed_labels, mask_labels, mask_labels_store, split_rows

__all__ = [
    "KernelMaxide",
    "KernelMaxideCV",
    "Maxide",
    "MaxideCV",
    "check_observed_labels",
    "mask_labels",
    "mask_labels_store",
    "split_rows",
]


def __getattr__(name):
    if name in ("KernelMaxide", "Maxide"):
        from . import estimator

        return getattr(estimator, name)
    if name in ("KernelMaxideCV", "MaxideCV"):
        from . import cv

        return getattr(cv, name)
    raise AttributeError(f"module 'ooc_lowrank.kernelmaxide' has no attribute {name!r}")
