"""scikit-learn's own estimator checks for the multi-view machines (issue 23 item 9).

Both take ``(X, y)`` with ``X`` one matrix (one view, or the views side by side with
``view_sizes``), so every check applies; the tags say what is true: scipy.sparse input is
native (``input_tags.sparse``), the classifier handles any number of classes itself
(one-vs-rest inside ``fit``)."""

from __future__ import annotations

from sklearn.utils.estimator_checks import parametrize_with_checks

from ooc_lowrank.mvm import MultiViewMachineClassifier, MultiViewMachineRegressor


@parametrize_with_checks(
    [
        MultiViewMachineRegressor(n_components=4, max_iter=30, random_state=0),
        MultiViewMachineClassifier(n_components=4, max_iter=30, random_state=0),
    ]
)
def test_sklearn_compatible(estimator, check):
    check(estimator)
