"""Two-sided inductive matrix completion (LEML-style ALS + CG) and GIMC semi-supervised
clustering (SPEC 1.5, 5.1)."""

from ooc_lowrank.imc.estimator import InductiveMatrixCompletion

__all__ = ["InductiveMatrixCompletion"]
