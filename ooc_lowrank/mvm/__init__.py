"""Multi-view machines (Cao et al. 2016; SPEC section 3): CP-factorized full-order interactions
across views, trained out-of-core by batch L-BFGS (distributed) or AdaGrad SGD (streaming)."""

from ooc_lowrank.mvm.estimator import MultiViewMachineClassifier, MultiViewMachineRegressor

__all__ = ["MultiViewMachineClassifier", "MultiViewMachineRegressor"]
