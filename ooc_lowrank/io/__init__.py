"""Streaming converters from the field's file formats to ooc_lowrank datasets (Zarr v3).

``convert(format, srcs, dest, **options)`` dispatches on ``format``; every converter is also
available as a function.  All read plain or gzip files (detected from the content), parse in
bounded chunks, and write through :class:`ooc_lowrank.storage.DatasetWriter`, so the store
appears only when the conversion succeeded.  Malformed input raises :class:`ConversionError`
(a ``ValueError``) naming the file, the line, the rule, the value and the fix.

===================  =============================  ===============================================
format               arrays written                 options (besides block_rows, dtype,
                                                    chunk_bytes, overwrite, progress)
===================  =============================  ===============================================
``svmlight``         X csr; y (n,1) or Y csr 0/1    zero_based ("auto"), multilabel ("auto"),
                                                    n_features, n_labels
``xc``               X csr; Y csr 0/1               zero_based (True), n_features, n_labels
``arff``             X dense|csr; Y csr 0/1, or     xml (Mulan label file) or n_labels
                     y (n,1) for one nominal class
``mat``              as selected (X0..Xk for        variables, orientation, labels
                     cell arrays); Y csr 0/1;
                     one-column class ids as y
``dense_text``       X dense; y (n,1)               label_column (-1), delimiter, comments,
                                                    skip_rows
``movielens``        obs coo (users x items)        shape=(rows, cols), one_based (True),
                                                    bucket_nnz, tmpdir
``movielens_views``  X0 csr (user views), X1 csr    user_file, item_file, occupation_file (default:
                     (item), y (n,1)                beside the ratings), target ("rating"|"binary")
``snap``             obs coo (nodes x nodes)        shape, square (True), one_based (False),
                                                    bucket_nnz, tmpdir
``parquet``,         by kind: obs coo + key         kind (interactions|features|labels|views),
``csv``              vocabularies; X; Y / y;        row_key, col_key, value, duplicates,
                     X0..Xk + y                     feature_columns, label_list, views, ... (see
                                                    ``io.tables``; sources: files, folders, globs,
                                                    s3:// URLs)
===================  =============================  ===============================================

Common options: ``block_rows`` (int, rows per stored block; default the writer's choice),
``dtype`` ("float64" default or "float32"; label matrices are float32 0/1), ``chunk_bytes``
(text parsed at once, default 1 MiB; not for ``mat``), ``overwrite`` (bool),
``progress`` (callable(rows_done) or None).  CLI strings are accepted for every option
(e.g. ``shape="943,1682"``, ``zero_based="auto"``, ``variables="X=train_data,Y=train_target"``).
"""

from __future__ import annotations

import inspect

from ._common import ConversionError
from .arff import convert_arff, read_label_names
from .dense_text import convert_dense_text
from .mat import convert_mat
from .multiview import convert_movielens_views
from .ratings import convert_movielens, convert_snap
from .svmlight import convert_svmlight
from .tables import (
    convert_csv,
    convert_parquet,
    convert_table,
    predictions_to_parquet,
    read_vocabulary,
    split_table,
    topk_to_parquet,
)
from .xc import convert_xc

__all__ = [
    "FORMATS",
    "ConversionError",
    "convert",
    "convert_arff",
    "convert_csv",
    "convert_dense_text",
    "convert_mat",
    "convert_movielens",
    "convert_movielens_views",
    "convert_parquet",
    "convert_snap",
    "convert_svmlight",
    "convert_table",
    "convert_xc",
    "format_options",
    "predictions_to_parquet",
    "read_label_names",
    "read_vocabulary",
    "split_table",
    "topk_to_parquet",
]

#: format name -> converter ``fn(srcs, dest, **options)``; for the CLI.
FORMATS = {
    "svmlight": convert_svmlight,
    "libsvm": convert_svmlight,
    "xc": convert_xc,
    "arff": convert_arff,
    "mat": convert_mat,
    "dense_text": convert_dense_text,
    "movielens": convert_movielens,
    "movielens_views": convert_movielens_views,
    "snap": convert_snap,
    "parquet": convert_parquet,
    "csv": convert_csv,
}


def format_options(fmt: str) -> dict[str, object]:
    """Keyword options of a format's converter and their defaults (for building a CLI)."""
    fn = _lookup(fmt)
    return {
        name: p.default
        for name, p in inspect.signature(fn).parameters.items()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    }


def _lookup(fmt):
    key = str(fmt).strip().lower().replace("-", "_")
    try:
        return FORMATS[key]
    except KeyError:
        raise ConversionError(
            None, None, "unknown format", fmt, f"choose one of {sorted(FORMATS)}"
        ) from None


def convert(format, srcs, dest, **options):  # noqa: A002 - the CLI's word
    """Convert ``srcs`` (one path or a list) in ``format`` to a dataset at ``dest``.

    Parameters
    ----------
    format : str
        One of :data:`FORMATS` (``svmlight``/``libsvm``, ``xc``, ``arff``, ``mat``,
        ``dense_text``, ``movielens``, ``snap``).
    srcs : path or list of paths
        Source files; text formats concatenate several files by rows (``mat``: one file).
    dest : str
        Store location (local path or fsspec URL).
    **options
        The converter's keyword options (see the table in the module doc); an unknown option
        raises ``ConversionError`` listing the valid ones.

    Returns
    -------
    dest : str
    """
    fn = _lookup(format)
    valid = format_options(format)
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise ConversionError(
            None,
            None,
            f"unknown option(s) for format {format!r}",
            unknown,
            f"valid options: {sorted(valid)}",
        )
    return fn(srcs, dest, **options)
