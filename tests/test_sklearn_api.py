"""scikit-learn's estimator checks for the estimators whose input is not ``(X, y)``.

``GIMC`` and ``GIMCCV`` run every check (``tests/test_gimc.py``), the multi-view machines in
their own suite.  The others take observations, observed labels or constraints: the checks
that fit do not apply (each docstring's Notes say why), the API checks below do.
"""

from __future__ import annotations

import pytest
from sklearn.utils import estimator_checks as ec

from ooc_lowrank import (
    GIMCClustering,
    GreedyLowRank,
    GreedyLowRankCV,
    InductiveMatrixCompletion,
    KernelMaxide,
    Maxide,
)
from ooc_lowrank.kernelmaxide import KernelMaxideCV, MaxideCV

NOT_XY = [
    GreedyLowRank,
    GreedyLowRankCV,
    InductiveMatrixCompletion,
    GIMCClustering,
    KernelMaxide,
    Maxide,
    KernelMaxideCV,
    MaxideCV,
]

#: the checks that need no fit: construction, parameters, cloning, tags
API_CHECKS = [
    "check_estimator_cloneable",
    "check_estimator_repr",
    "check_no_attributes_set_in_init",
    "check_parameters_default_constructible",
    "check_get_params_invariance",
    "check_set_params",
    "check_valid_tag_types",
    "check_estimator_tags_renamed",
    "check_mixin_order",
]


@pytest.mark.parametrize("check", API_CHECKS)
@pytest.mark.parametrize("cls", NOT_XY, ids=lambda c: c.__name__)
def test_api_checks(cls, check):
    getattr(ec, check)(cls.__name__, cls())


@pytest.mark.parametrize("cls", NOT_XY, ids=lambda c: c.__name__)
def test_docstring_says_which_checks_do_not_apply(cls):
    doc = cls.__doc__
    assert "scikit-learn's estimator checks" in doc and "do not apply" in doc
