"""Extreme Classification repository text format to a dataset.

Layout (as in the XC repository's ``*_data.txt`` / ``train.txt`` files)::

    n_rows n_features n_labels
    l1,l2,... f:v f:v ...
    f:v ...                      (a row without labels)

Feature and label indices are 0-based.  Output: ``"X"`` csr ``(n_rows, n_features)`` and ``"Y"``
csr ``(n_rows, n_labels)`` of 0/1 (float32).  The header's dimensions are enforced: an index
outside them is an error, and a file with fewer or more rows than declared is rejected (a
truncated download), in which case no store is created.
"""

from __future__ import annotations

from ._common import TEXT_OPTIONS, converter
from .svmlight import _convert

__all__ = ["convert_xc"]


@converter("xc", *TEXT_OPTIONS, dtype_of="the ``X`` values")
def convert_xc(srcs, dest, opts, *, zero_based=True, n_features=None, n_labels=None):
    """Convert Extreme Classification repository files (several files are concatenated by rows).

    Parameters
    ----------
    srcs : path or list of paths
        Plain or gzip text files, each starting with the header ``n_rows n_features n_labels``.
    dest : str
        Store location handed to ``DatasetWriter``.
    zero_based : bool or "auto", default True
        Feature indices start at 0 (the repository's convention).
    n_features, n_labels : int, optional
        Override (enlarge) the header's dimensions, e.g. to give train and test files the
        same width.  Default: the first file's header.
    """
    return _convert(srcs, dest, opts, "xc", True, zero_based, True, n_features, n_labels)
