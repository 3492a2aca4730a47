"""Two-sided inductive matrix completion (LEML-style ALS + CG) and GIMC semi-supervised
clustering (SPEC 1.5, 5.1)."""

from ooc_lowrank.imc.clustering import (
    GIMCClustering,
    clustering_error,
    constraint_error,
    sample_constraints,
)
from ooc_lowrank.imc.estimator import InductiveMatrixCompletion

__all__ = [
    "GIMCClustering",
    "InductiveMatrixCompletion",
    "clustering_error",
    "constraint_error",
    "sample_constraints",
]
