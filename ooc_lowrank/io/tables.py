"""Tables (Parquet, CSV, Arrow, pandas / Dask DataFrames) to datasets, with the user's own keys.

Sources (:class:`TableSource`), all read as a stream of Arrow record batches:

* a Parquet or CSV file, a directory of them (Hive partitions become columns), a glob
  (``data/part-*.parquet``), or a list of these; local paths or fsspec URLs (``s3://...`` with
  s3fs installed; the filesystem is handed to ``pyarrow.dataset``);
* a ``pyarrow.Table`` or ``pyarrow.dataset.Dataset``;
* a pandas DataFrame (pandas is imported only then) or a Dask DataFrame (read one partition at
  a time; every pass recomputes the partitions).

Never more than one batch (``batch_rows`` rows, default 2**18) is held, plus small state: the
key vocabularies and 8 bytes per stored row.  Before a read, the columns used are checked in
every file (or partition): present, of a usable type, and of the same type class everywhere
(``int64`` in one file and ``int32`` in another is fine, a string in one and a number in the
other is not).  Columns not used are never read and may differ.

Four targets (``kind``):

``interactions``
    ``(row key, column key[, value][, weight])`` -> an observation store ``"obs"`` (coo) as
    ``convert movielens`` writes, plus ``"weight"`` (coo, same entries) when a weight column is
    given (side data; the estimators do not read it).  Keys of any integer or string type are
    mapped to contiguous indices by **sorted** key order (numbers numerically, strings by their
    UTF-8 bytes), so the indices never depend on the order of files or rows.  The vocabularies
    are stored in the store (``side/rows.parquet``, ``side/cols.parquet``, one column ``key``;
    row ``i`` holds the key of index ``i``) and read back by :func:`read_vocabulary`.
    ``vocabulary_from=STORE`` reuses a training store's vocabularies (a test table then indexes
    the same matrix; an unseen key is an error naming it, or left out with ``unseen="drop"``;
    also for labels and classes).  The input may come in any order: an external sort buckets
    entries by row range into temporary files and sorts each bucket (entries of a row end up
    sorted by column).  Without ``vocabulary_from``: one read of the table.  Tables whose row
    count is known without a read (Parquet footers, Arrow tables) and whose entries take more
    than ``_KEEP_ENTRIES_BYTES`` spill in that read (``_SpillOnce``): both key columns
    numbered in first-seen order side by side (integers through a dense table of ids,
    ``kernels.buckets.intern_dense``, or a hash table when their span is too wide; strings by
    a hash table, ``kernels.hashing.intern_strings``), every entry written at once to the file
    of its row's bucket, a range of an order key of the row keys (the integer, or a string's
    first 8 bytes) cut at quantiles of the first batch, so that a bucket holds a contiguous
    range of the sorted row indices; each bucket's ids are mapped to sorted indices when it is
    loaded (``kernels.buckets.remap_packed``), and a bucket that came out larger than
    ``bucket_nnz`` (a first batch unlike the rest) is re-spilled once into smaller row ranges.
    Smaller tables and tables of unknown size (CSV, DataFrames): the keys interned or counted
    the same way, the values validated and the entries kept in a scratch file; pass 2
    replays them mapped to the sorted indices into the spill below.
    With ``vocabulary_from``: two reads: pass 1 reads the key columns only,
    validates them and builds the vocabularies (dense integer keys counted in an array, Parquet
    string keys read dictionary-encoded and counted per dictionary), pass 2 validates the
    values, maps keys to indices (integers: array lookup or binary search; strings: one hash
    table of the vocabulary, probed once per distinct key of a row group).  Pass 2 then
    spills the records (8-24 bytes each: row and column packed in one int64) with a counting
    sort (kernels ``kernels.buckets``; a thread writes a batch's records while the next is
    built); then every bucket is read once, sorted by a counting
    sort by row and a short sort per row, or (16 entries per row or more) by a radix sort on
    the column then the row (the next bucket in a thread while one is written), and written.  Duplicate
    ``(row, column)`` pairs are an error naming them, unless ``duplicates`` is ``"last"`` (the
    last one read: files in the order given, a glob's or a folder's in sorted path order, rows
    in file order), ``"sum"`` or ``"mean"`` (the weights follow the same rule).
``features``
    numeric columns (``feature_columns``) or one fixed-size list column (``feature_list``) ->
    dense ``"X"``; a list-of-indices column (``feature_indices``, with ``feature_values`` or
    ones) -> csr ``"X"``; a long ``(row, feature, value)`` table (``row_key`` + ``feature_key``
    + ``value``) -> csr ``"X"`` with feature and row vocabularies, through the interactions
    path (its ``duplicates`` rule applies).
``labels``
    a list column of label keys (``label_list``) -> csr 0/1 ``"Y"`` (float32) with the label
    vocabulary (sorted, or the order given by ``labels=``), stored as ``side/labels.parquet``
    and, up to 65536 labels, as the attribute ``label_names``; or a class column
    (``class_column``) -> ``"y"`` ``(n, 1)``: numbers as they are, strings as their rank in
    sorted order (names in the attribute ``class_names``, as ``convert arff`` does).
    ``features`` and ``labels`` may be given together: one pass writes ``X`` and ``Y``/``y``.
``views``
    named groups of columns (``views={"user": [...], "item": [...]}``) -> one csr view each,
    ``X0, X1, ...`` (attribute ``view_names``), and ``y`` from ``target``, for multi-view
    machines.  Float columns (and integer ones listed in ``numeric``) are values; integer,
    string, boolean and dictionary columns are categories, one-hot through a sorted vocabulary
    of the values seen at least ``min_count`` times plus (``other=True``) an 'other' column
    for rare, missing and unseen values; list columns are multi-hot the same way.  With
    ``hash_features=n`` every view has ``n`` columns instead, filled by signed hashing of the
    values (FNV-1a + splitmix64 of the UTF-8 bytes, or splitmix64 of the integer, seeded by
    the column name; the sign from the top bit; collisions add up; nulls get no entry).  The
    settings and vocabularies are stored (attribute ``views``, ``side/view<j>.parquet``);
    ``vocabulary_from=TRAIN_STORE`` converts a test table with exactly the training columns
    (an unseen value goes to 'other', or is an error naming it when there is no 'other').

For the row-aligned kinds, ``row_key`` (optional) stores the row keys in table order as
``side/rows.parquet``; they must be distinct (a repeated key is an error naming it and its
two rows; checked on a 64-bit hash per row, equal hashes re-checked exactly).  Integer keys
are stored as int64: an unsigned 64-bit key above 2**63 - 1 is an error (cast such keys to
strings).

Bad input raises :class:`ConversionError` naming the column, the rule, the value and the fix,
before the store is opened for writing: a missing column, a null key, a non-numeric value
column, a non-finite value, duplicate pairs without a policy, a label list holding nulls, a
column whose type changes between files.  (A row-aligned conversion validates everything in a
first pass, then writes in a second.)  Duplicate pairs without a policy are found by sorting
every bucket before the store writer starts (the sorted buckets are stored back, one extra
write and read of the spill files; with one bucket it is kept in memory).  A store appears only
when complete; an existing store at ``dest`` (``overwrite=True``) stays as it was on an error.

Train / test: :func:`split_table` (or ``convert_table(split_by=..., test_dest=...)``) splits
rows by a hash of key columns or by a column's value; the test store is converted with the
training vocabularies.

Keys back out: :func:`topk_to_parquet` writes top-k predictions with the user's keys.
"""

from __future__ import annotations

import copy
import glob as _glob
import inspect
import os
import threading
from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ._common import (
    ConversionError,
    RowBuckets,
    as_dtype,
    as_opt_int,
    bucket_starts,
    canonical_rows,
    check_range,
    csr_from_parts,
    write_blocks,
)

__all__ = [
    "KINDS",
    "TableSource",
    "convert_csv",
    "convert_parquet",
    "convert_table",
    "predictions_to_parquet",
    "read_vocabulary",
    "split_table",
    "topk_to_parquet",
]

KINDS = ("interactions", "features", "labels", "views")
DUPLICATES = ("error", "last", "sum", "mean")
#: Rows per record batch read (a batch of a few numeric columns is a few MB).
DEFAULT_BATCH_ROWS = 1 << 18
#: kind="views": rows per batch by default, this many values over the number of columns read
#: (each value becomes an entry of about 60 bytes while its rows are built).
VIEW_BATCH_VALUES = 1 << 22
#: Entries per external-sort bucket (32 bytes each while sorting).
DEFAULT_BUCKET_NNZ = 1 << 21
#: Up to this many labels, their names also go to the attribute ``label_names``.
MAX_NAMES_IN_ATTRS = 1 << 16
_SIDE = "side/{}.parquet"


def _err(rule, value=None, fix=None, where=None):
    return ConversionError(where, None, rule, value, fix)


# ----------------------------------------------------------------------------------------------
# sources


def _type_class(t: pa.DataType) -> str:
    if pa.types.is_dictionary(t):
        return _type_class(t.value_type)
    if pa.types.is_integer(t):
        return "integer"
    if pa.types.is_floating(t) or pa.types.is_decimal(t):
        return "float"
    if pa.types.is_boolean(t):
        return "boolean"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "string"
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return "list<" + _type_class(t.value_type) + ">"
    return str(t)


def _has_magic(s: str) -> bool:
    return any(ch in s for ch in "*?[")


def _format_of(path: str, fmt):
    if fmt is not None:
        f = str(fmt).strip().lower()
        if f not in ("parquet", "csv"):
            raise _err("format must be 'parquet' or 'csv'", fmt)
        return f
    low = path.lower()
    for ext in (".gz", ".bz2", ".zst"):
        low = low[: -len(ext)] if low.endswith(ext) else low
    if low.endswith((".csv", ".tsv", ".txt")):
        return "csv"
    return "parquet"


class TableSource:
    """A re-readable stream of record batches from files, Arrow or DataFrames.

    Parameters
    ----------
    src : path, URL, glob, list of these, pyarrow.Table, pyarrow.dataset.Dataset, pandas or
        Dask DataFrame
    format : {"parquet", "csv"}, optional
        For files; default from the first file's extension (``.csv``/``.tsv``: csv, else
        parquet).
    batch_rows : int, optional
        Rows per batch (default 2**18).
    delimiter : str, optional
        CSV field separator (default ``","``, ``"\\t"`` for ``.tsv``).
    """

    def __init__(self, src, *, format=None, batch_rows=None, delimiter=None):  # noqa: A002
        self.batch_rows = as_opt_int(batch_rows, "batch_rows", 1) or DEFAULT_BATCH_ROWS
        self._dataset = self._table = self._ddf = None
        self._filter = None  # (columns, keep(batch, offset) -> bool ndarray), see filtered()
        self.format = None
        if isinstance(src, pa.RecordBatch):
            src = pa.Table.from_batches([src])
        if isinstance(src, pa.Table):
            self._table, self.name = src, "<pyarrow.Table>"
        elif _is_pandas(src):
            self._table = pa.Table.from_pandas(src, preserve_index=False)
            self.name = "<pandas.DataFrame>"
        elif hasattr(src, "npartitions") and hasattr(src, "get_partition"):
            self._ddf, self.name = src, "<dask DataFrame>"
        elif type(src).__module__.startswith("pyarrow._dataset"):
            self._dataset, self.name = src, "<pyarrow.dataset>"
        elif isinstance(src, (pa.RecordBatchReader, Iterator)):
            raise _err(
                "a one-shot stream (RecordBatchReader / iterator) cannot be converted: the "
                "converters read their source more than once",
                type(src).__name__,
                "write it to Parquet first, or pass a pyarrow.Table / dataset",
            )
        else:
            self._open_files(src, format, delimiter)

    # -- files ------------------------------------------------------------------------------
    def _open_files(self, src, fmt, delimiter):
        import pyarrow.dataset as ds

        srcs = [src] if isinstance(src, (str, os.PathLike)) else list(src)
        srcs = [os.fspath(s) for s in srcs]
        if not srcs:
            raise _err("at least one source is required", srcs)
        self.name = ", ".join(srcs)
        is_url = ["://" in s and not s.startswith("file://") for s in srcs]
        fs = None
        if any(is_url) and not all(is_url):
            raise _err(
                "sources must be all local paths or all URLs of one filesystem",
                srcs,
                "convert local and remote files separately, or copy them to one place",
            )
        if any(is_url):
            import fsspec.core

            fs, _ = fsspec.core.url_to_fs(srcs[0])
            paths = [fsspec.core.url_to_fs(s)[1] for s in srcs]
            isdir, glob, exists = fs.isdir, fs.glob, fs.exists
        else:
            paths = [s[len("file://") :] if s.startswith("file://") else s for s in srcs]
            isdir, exists = os.path.isdir, os.path.exists

            def glob(p):
                return _glob.glob(p, recursive=True)

        self.format = _format_of(paths[0], fmt)
        if self.format == "csv":
            import pyarrow.csv as pcsv

            sep = delimiter or ("\t" if paths[0].lower().endswith(".tsv") else ",")
            file_format = ds.CsvFileFormat(parse_options=pcsv.ParseOptions(delimiter=sep))
        else:
            file_format = ds.ParquetFileFormat()
        if len(paths) == 1 and not _has_magic(paths[0]) and isdir(paths[0]):

            def make(schema=None, fmt=file_format):
                return ds.dataset(
                    paths[0], format=fmt, filesystem=fs, partitioning="hive", schema=schema
                )

            self._make = make
            self._dataset = make()
        else:
            files = []
            for p in paths:
                if _has_magic(p):
                    hits = sorted(glob(p))
                    if not hits:
                        raise _err("no file matches the pattern", p, "check the glob", p)
                    files += hits
                elif isdir(p):
                    raise _err(
                        "a directory can only be the single source",
                        p,
                        "pass one directory, or files / globs",
                    )
                elif not exists(p):
                    raise _err("source does not exist", p, "check the path or URL", p)
                else:
                    files.append(p)

            def make(schema=None, fmt=file_format):
                return ds.dataset(files, format=fmt, filesystem=fs, schema=schema)

            self._make = make
            self._dataset = make()
        if not self._dataset.files:
            raise _err("no data files found", self.name, "check the path", self.name)

    # -- schema -----------------------------------------------------------------------------
    @property
    def schema(self) -> pa.Schema:
        if self._table is not None:
            return self._table.schema
        if self._dataset is not None:
            return self._dataset.schema
        if getattr(self, "_ddf_schema", None) is None:  # computes the first partition once
            self._ddf_schema = self._partition(0).schema
        return self._ddf_schema

    def _partition(self, i) -> pa.Table:
        part = self._ddf.get_partition(i).compute()
        return pa.Table.from_pandas(part, preserve_index=False)

    def check(self, columns: dict[str, tuple[str, Sequence[str]]]) -> None:
        """Check each ``column: (role, allowed type classes)`` in every file, before reading.

        Raises a :class:`ConversionError` for a missing column, a type outside the allowed
        classes, or a type class that changes between files.
        """
        schema = self.schema
        for col, (role, allowed) in columns.items():
            if col not in schema.names:
                raise _err(
                    f"{role} column {col!r} is missing from the table",
                    col,
                    f"choose one of the columns {schema.names}",
                    self.name,
                )
            cls = _type_class(schema.field(col).type)
            if not any(cls == a or (a.endswith("*") and cls.startswith(a[:-1])) for a in allowed):
                raise _err(
                    f"{role} column {col!r} has type {schema.field(col).type} ({cls}); "
                    f"it must be {' or '.join(allowed)}",
                    str(schema.field(col).type),
                    "cast the column (e.g. pyarrow.compute.cast / DataFrame.astype)",
                    self.name,
                )
        if self._dataset is None:
            return
        first = None
        import pyarrow.dataset as ds

        promote = set()
        for frag in self._dataset.get_fragments():
            phys = frag.physical_schema
            part_names = set(ds.get_partition_keys(frag.partition_expression))
            for col in columns:
                if col in part_names:
                    continue
                if col not in phys.names:
                    raise _err(
                        f"the schema changes between files: column {col!r} is missing from "
                        f"{frag.path}",
                        phys.names,
                        "convert files with the same columns together",
                        self.name,
                    )
            classes = {c: _type_class(phys.field(c).type) for c in columns if c in phys.names}
            if first is None:
                first = (frag.path, classes)
                continue
            for c, cls in classes.items():
                if {cls, first[1][c]} == {"integer", "float"} and "float" in columns[c][1]:
                    promote.add(c)  # CSV type inference: 1 in one file, 1.5 in another
                elif cls != first[1][c]:
                    raise _err(
                        f"the schema changes between files: column {c!r} is {first[1][c]} in "
                        f"{first[0]} but {cls} in {frag.path}",
                        cls,
                        "cast the column to one type in every file",
                        self.name,
                    )
        if promote and getattr(self, "_make", None) is not None:
            schema = self._dataset.schema
            for c in promote:
                schema = schema.set(schema.get_field_index(c), pa.field(c, pa.float64()))
            self._dataset = self._make(schema)

    def known_rows(self) -> int | None:
        """The number of rows when it costs no read (an Arrow table, Parquet metadata), or
        None (CSV, DataFrames, a filtered source)."""
        if self._filter is not None:
            return None
        if self._table is not None:
            return self._table.num_rows
        if self._dataset is not None and self.format == "parquet":
            return int(self._dataset.count_rows())  # Parquet footers only
        return None

    # -- reading ----------------------------------------------------------------------------
    def filtered(self, columns: Sequence[str], keep) -> TableSource:
        """This source reduced to the rows where ``keep(batch, offset)`` (a bool ndarray per
        record batch holding ``columns``; ``offset``: the batch's first row in the whole table)
        is True; row numbers in later errors count the kept rows."""
        out = copy.copy(self)
        out._filter = (list(columns), keep)
        return out

    def batches(self, columns: Sequence[str], dictionary=()) -> Iterator[pa.RecordBatch]:
        """Record batches holding ``columns`` in source order (one batch in memory at a time).

        ``dictionary``: string columns that Parquet files may hand over dictionary-encoded
        (as written: no string is built per row; the keys of a batch are its dictionary).
        """
        cols = list(dict.fromkeys(columns))
        if self._filter is None:
            yield from self._read(cols, dictionary)
            return
        fcols, keep = self._filter
        offset = 0
        for b in self._read(cols + [c for c in fcols if c not in cols], dictionary):
            mask = keep(b, offset)
            offset += b.num_rows
            if mask.any():
                yield (b if mask.all() else b.filter(pa.array(mask))).select(cols)

    def _read(self, cols: list[str], dictionary=()) -> Iterator[pa.RecordBatch]:
        dataset = self._dataset
        if dictionary and self.format == "parquet" and getattr(self, "_make", None):
            import pyarrow.dataset as ds

            schema = self._dataset.schema
            dictionary = [c for c in dictionary if _type_class(schema.field(c).type) == "string"]
            if dictionary:
                opts = ds.ParquetReadOptions(dictionary_columns=dictionary)
                for c in dictionary:  # the dataset's schema must say what the reader returns
                    i = schema.get_field_index(c)
                    schema = schema.set(i, pa.field(c, pa.dictionary(pa.int32(), pa.string())))
                dataset = self._make(schema, ds.ParquetFileFormat(read_options=opts))
        if self._table is not None:
            yield from self._table.select(cols).to_batches(max_chunksize=self.batch_rows)
        elif dataset is not None:
            yield from dataset.to_batches(
                columns=cols,
                batch_size=self.batch_rows,
                batch_readahead=1,
                fragment_readahead=1,
            )
        else:
            first = None
            for i in range(self._ddf.npartitions):
                t = self._partition(i).select(cols)
                classes = [_type_class(f.type) for f in t.schema]
                if first is None:
                    first = classes
                elif classes != first:
                    raise _err(
                        f"the schema changes between partitions: partition {i} has column "
                        f"types {classes}, partition 0 {first}",
                        classes,
                        "cast the columns to one type in every partition (DataFrame.astype)",
                        self.name,
                    )
                yield from t.to_batches(max_chunksize=self.batch_rows)


def _is_pandas(obj) -> bool:
    mod = type(obj).__module__
    return (mod == "pandas" or mod.startswith("pandas.")) and type(obj).__name__ == "DataFrame"


def as_source(src, **kw) -> TableSource:
    return src if isinstance(src, TableSource) else TableSource(src, **kw)


# ----------------------------------------------------------------------------------------------
# columns of a batch

_KEY = ("integer", "string")
_NUM = ("integer", "float", "boolean")


def _decode(arr):
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    return arr


def _no_nulls(arr, col, role, offset, src):
    if arr.null_count:
        k = int(np.flatnonzero(arr.is_null().to_numpy(zero_copy_only=False))[0])
        raise _err(
            f"{role} column {col!r} holds a null (row {offset + k} of the table)",
            None,
            "drop or fill the rows with missing values before converting",
            src.name,
        )


def _keys(batch, col, role, offset, src, large=True):
    """A key column as int64 or large_string, without nulls; a dictionary column whose
    dictionary is no longer than the batch stays encoded (dictionary normalized).  With
    ``large=False`` a string column stays as read (no copy of its offsets to 64 bits)."""
    arr = batch.column(col)
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if pa.types.is_dictionary(arr.type) and _type_class(arr.dictionary.type) == "string":
        # as read (a Parquet row group's dictionary, shared by its batches): the caches of
        # Vocabulary.index and _VocabBuilder see each dictionary once, however long
        _no_nulls(arr, col, role, offset, src)
        return arr
    if pa.types.is_dictionary(arr.type) and len(arr.dictionary) <= len(arr):
        _no_nulls(arr, col, role, offset, src)
        values = _norm_keys(arr.dictionary, col, role, None, src)
        return pa.DictionaryArray.from_arrays(arr.indices, values)
    arr = _decode(arr)
    _no_nulls(arr, col, role, offset, src)
    if not large and pa.types.is_string(arr.type):
        return arr
    return _norm_keys(arr, col, role, offset, src)


_INT64_MAX = pa.scalar(2**63 - 1, pa.uint64())


def _norm_keys(arr, col=None, role="key", offset=None, src=None):
    """Keys as int64 or large_string; an unsigned 64-bit key above 2**63 - 1 is an error
    (keys are stored as int64), named by ``col`` / ``role`` / row ``offset`` when given."""
    if pa.types.is_uint64(arr.type) and len(arr) and pc.any(pc.greater(arr, _INT64_MAX)).as_py():
        k = int(np.flatnonzero(pc.greater(arr, _INT64_MAX).to_numpy(zero_copy_only=False))[0])
        where = "" if offset is None else f" (row {offset + k} of the table)"
        raise _err(
            f"{role} column {col!r} holds the unsigned 64-bit key {arr[k].as_py()}{where}, "
            "above 2**63 - 1: integer keys are stored as int64",
            arr[k].as_py(),
            "cast the keys to strings, or subtract 2**63 from them (e.g. "
            "pyarrow.compute.cast(col, pa.string()))",
            None if src is None else src.name,
        )
    if pa.types.is_integer(arr.type):
        return arr.cast(pa.int64())
    return arr.cast(pa.large_string())


class _UniqueKeys:
    """Check that the row keys of a row-aligned table are distinct: 8 bytes (a 64-bit hash) per
    row while reading; the rare equal hashes are checked exactly by re-reading the key column."""

    def __init__(self, src, col):
        self.src, self.col, self._hashes = src, col, []

    def add(self, keys) -> None:
        self._hashes.append(hash_keys(keys))

    def check(self) -> None:
        if not self._hashes:
            return
        h = np.sort(np.concatenate(self._hashes))
        self._hashes = []
        dup = np.unique(h[1:][h[1:] == h[:-1]])
        if not dup.size:
            return
        seen, offset = {}, 0
        for batch in self.src.batches([self.col]):
            keys = _keys(batch, self.col, "row key", offset, self.src)
            for k in np.flatnonzero(np.isin(hash_keys(keys), dup)).tolist():
                key = keys[k].as_py()
                if key in seen:
                    raise _err(
                        f"row key column {self.col!r} holds the key {key!r} twice (rows "
                        f"{seen[key]} and {offset + k} of the table); row keys must be distinct",
                        key,
                        "deduplicate the table (one row per key), or convert without row_key",
                        self.src.name,
                    )
                seen[key] = offset + k
            offset += batch.num_rows


def _values(batch, col, role, offset, src) -> np.ndarray:
    """A numeric column as finite float64."""
    arr = _decode(batch.column(col))
    _no_nulls(arr, col, role, offset, src)
    v = arr.cast(pa.float64()).to_numpy(zero_copy_only=False)
    if not np.isfinite(v).all():
        k = int(np.flatnonzero(~np.isfinite(v))[0])
        raise _err(
            f"{role} column {col!r} holds a non-finite value (row {offset + k} of the table)",
            float(v[k]),
            "impute or drop NaN/inf values before converting",
            src.name,
        )
    return v


# ----------------------------------------------------------------------------------------------
# vocabularies


#: Integer keys spread over at most this many values are counted in an array (8 bytes each).
_MAX_DENSE_SPAN = 1 << 24


def _same_array(a, b) -> bool:
    """Whether ``a`` and ``b`` are views of the same memory (one Parquet row group's dictionary
    handed to several batches); exact, since the caller holds ``a`` (its buffers stay alive)."""
    if a is b:
        return True
    if len(a) != len(b) or a.offset != b.offset or a.type != b.type:
        return False
    return [x.address if x is not None else None for x in a.buffers()] == [
        x.address if x is not None else None for x in b.buffers()
    ]


class Vocabulary:
    """Keys (int64 or string) <-> contiguous indices; index ``i`` is ``keys[i]``."""

    def __init__(self, keys: pa.Array):
        self.keys = _norm_keys(_decode(keys))
        self._int = pa.types.is_integer(self.keys.type)
        self._last_dictionary = None  # (dictionary, its indices) of the last batch
        self._lookup = False  # the lookup structures, built by the first index()
        self._lookup_lock = threading.Lock()

    def _build_lookup(self) -> None:
        """The table, binary search or hash table that :meth:`index` probes (built once, on
        first use: a vocabulary only written or read by index needs none); thread-safe."""
        with self._lookup_lock:
            if not self._lookup:
                self._build_lookup_once()
                self._lookup = True

    def _build_lookup_once(self) -> None:
        self._lut = None
        if self._int:
            k = self.keys.to_numpy()
            if k.size and int(k.max()) - int(k.min()) < 8 * k.size + 4096:  # dense ids: a table
                # (4 bytes per slot: 200M-row interactions hold it while Parquet is read)
                self._lo = int(k.min())
                dt = np.int32 if k.size < 2**31 else np.int64
                self._lut = np.full(int(k.max()) - self._lo + 1, -1, dt)
                self._lut[k - self._lo] = np.arange(k.size)
            else:  # binary search (built only then)
                self._order = np.argsort(k, kind="stable")
                self._sorted = k[self._order]
        self._table = None  # strings: (bytes, offsets, hashes, hash table), built once
        if not self._int:
            from ooc_lowrank.kernels.hashing import build_key_table

            data, offsets = _string_parts(self.keys)
            hashes = hash_keys(self.keys)
            table = np.zeros(1 << max(int(2 * len(self.keys)).bit_length(), 4), np.int64)
            build_key_table(hashes, table)
            self._table = (data, offsets, hashes, table)

    def __len__(self) -> int:
        return len(self.keys)

    def index(self, arr) -> np.ndarray:
        """int64 index of every key of ``arr``; -1 for a key not in the vocabulary."""
        if not self._lookup:
            self._build_lookup()
        if pa.types.is_dictionary(arr.type) and not arr.null_count:
            # each distinct key searched once per dictionary (a Parquet row group's, shared by
            # its batches; it never holds more keys than the row group has rows)
            last = self._last_dictionary
            if last is None or not _same_array(last[0], arr.dictionary):
                last = (arr.dictionary, self.index(arr.dictionary))
                self._last_dictionary = last
            return last[1][arr.indices.to_numpy(zero_copy_only=False)]
        arr = _norm_keys(_decode(arr))
        if self._int != pa.types.is_integer(arr.type):
            return np.full(len(arr), -1, np.int64)
        if self._int:
            a = arr.to_numpy()
            if self._lut is not None:
                from ooc_lowrank.kernels.buckets import lookup_dense

                out = np.empty(a.size, np.int64)
                lookup_dense(a, self._lo, self._lut, out)
                return out
            pos = np.minimum(np.searchsorted(self._sorted, a), max(self._sorted.size - 1, 0))
            if self._sorted.size == 0:
                return np.full(a.size, -1, np.int64)
            return np.where(self._sorted[pos] == a, self._order[pos], -1).astype(np.int64)
        # strings: one hash table of the vocabulary, built once (kernel lookup_keys: hash of
        # the query, linear probing, equal hashes confirmed byte by byte)
        from ooc_lowrank.kernels.hashing import lookup_keys

        qdata, qoffsets = _string_parts(arr)
        out = np.empty(len(arr), np.int64)
        lookup_keys(*self._table, qdata, qoffsets, hash_keys(arr), out)
        return out

    def write(self, path) -> None:
        pq.write_table(pa.table({"key": self.keys}), path)


class _VocabBuilder:
    """Distinct keys (and how often each occurs) of a stream of key arrays, merged in bulk.

    Integer keys within a span of ``_MAX_DENSE_SPAN`` values are counted in an array indexed by
    ``key - lowest`` (``np.bincount``: 10x faster than a hash table per batch); keys spread
    wider, and strings, go through ``pyarrow.compute.value_counts`` and a grouped merge.
    """

    def __init__(self):
        self._done = None  # pa.Table (key, n)
        self._pending: list[pa.Table] = []
        self._n_pending = 0
        self._dense = None  # (lowest key, counts) while integer keys stay within a span
        self._hashed = False  # once keys left the span (or are strings): value_counts only
        self._acc = None  # (dictionary, counts): batches sharing one dictionary (a row group)

    @property
    def empty(self) -> bool:
        return (
            self._done is None and not self._pending and self._dense is None and self._acc is None
        )

    def add(self, keys: pa.Array) -> None:
        from ooc_lowrank.kernels.buckets import count_into

        if pa.types.is_dictionary(keys.type) and pa.types.is_integer(keys.type.value_type):
            keys = _decode(keys)
        if not self._hashed and pa.types.is_integer(keys.type):
            if not len(keys):
                return
            k = keys.to_numpy()
            lo, hi = int(k.min()), int(k.max())
            if self._dense is not None:
                lo0, c0 = self._dense
                lo, hi = min(lo, lo0), max(hi, lo0 + c0.size - 1)
            if hi - lo < _MAX_DENSE_SPAN:
                if self._dense is None or lo < lo0 or hi >= lo0 + c0.size:
                    # grow geometrically: O(batch) per batch, not O(span)
                    size = hi - lo + 1 if self._dense is None else max(hi - lo + 1, 2 * c0.size)
                    size = min(size, _MAX_DENSE_SPAN)
                    counts = np.zeros(size, np.int64)
                    if self._dense is not None:
                        counts[lo0 - lo : lo0 - lo + c0.size] = c0
                    self._dense = (lo, counts)
                lo, counts = self._dense
                count_into(k, lo, counts)
                return
            self._hashed = True
            self._dense_to_pending()
        self._hashed = True
        if pa.types.is_dictionary(keys.type) and not keys.null_count:  # count the indices
            d = keys.dictionary
            n = np.bincount(keys.indices.to_numpy(zero_copy_only=False), minlength=len(d))
            if self._acc is not None and _same_array(self._acc[0], d):
                self._acc[1][:] += n
                return
            self._flush_acc()
            self._acc = (d, n)
            return
        else:
            vc = pc.value_counts(_decode(keys))
            self._pending.append(
                pa.table({"key": vc.field("values"), "n": vc.field("counts").cast(pa.int64())})
            )
            self._n_pending += len(vc)
        if self._n_pending > max(1 << 20, 0 if self._done is None else self._done.num_rows):
            self._merge()

    def _flush_acc(self):
        if self._acc is not None:
            d, n = self._acc
            seen = np.flatnonzero(n)
            self._pending.append(pa.table({"key": _norm_keys(d.take(seen)), "n": n[seen]}))
            self._n_pending += seen.size
            self._acc = None

    def _dense_to_pending(self):
        if self._dense is not None:
            lo, counts = self._dense
            nz = np.flatnonzero(counts)
            self._pending.append(pa.table({"key": nz + lo, "n": counts[nz].astype(np.int64)}))
            self._n_pending += nz.size
            self._dense = None

    def _merge(self):
        self._flush_acc()
        parts = ([self._done] if self._done is not None else []) + self._pending
        if parts:  # dictionary_encode + bincount: 5x faster than Table.group_by here
            t = pa.concat_tables(parts)
            enc = pc.dictionary_encode(t.column("key").combine_chunks())
            n = np.bincount(
                enc.indices.to_numpy(zero_copy_only=False),
                weights=t.column("n").to_numpy().astype(np.float64),  # exact below 2**53
                minlength=len(enc.dictionary),
            )
            self._done = pa.table({"key": enc.dictionary, "n": np.rint(n).astype(np.int64)})
        self._pending, self._n_pending = [], 0

    def finish(self) -> tuple[Vocabulary, np.ndarray]:
        """The sorted vocabulary and the count of every key."""
        if self.empty:
            return Vocabulary(pa.array([], pa.int64())), np.zeros(0, np.int64)
        if self._dense is not None and not self._hashed:  # already sorted
            lo, counts = self._dense
            nz = np.flatnonzero(counts)
            return Vocabulary(pa.array(nz + lo)), counts[nz].astype(np.int64)
        self._merge()
        t = self._done.sort_by("key")
        return Vocabulary(t.column("key")), t.column("n").to_numpy().astype(np.int64)


class _StringInterner:
    """Distinct string keys of a stream numbered in first-seen order, with the count of each
    (kernel ``kernels.hashing.intern_strings``: a 64-bit hash per key and one probe of a hash
    table per row; no Python object, no dictionary encoding per batch).  :meth:`finish` sorts
    the keys: the vocabulary and the sorted index of every first-seen id.  ``count=False``:
    no counts, only a byte per key flagging it seen (no random increment per row, 7 bytes
    less per key); :meth:`finish` then reports 1 for every key."""

    def __init__(self, count: bool = True):
        self.n = 0
        self._data = np.empty(1 << 16, np.uint8)
        self._offsets = np.zeros((1 << 12) + 1, np.int64)
        self._hashes = np.empty(1 << 12, np.uint64)
        self._slots = np.zeros((1 << 13, 4), np.uint64)
        self._count = count
        self.counts = np.zeros(1 << 12, np.int64 if count else np.uint8)
        self._unused = False  # whether a key may have been interned unseen (a dictionary's)
        self._last_dictionary = None  # (dictionary, ids of its keys)

    def add(self, keys: pa.Array) -> np.ndarray:
        """First-seen ids (int64) of ``keys`` (large_string, or a dictionary of strings)."""
        from ooc_lowrank.kernels.buckets import count_into

        n0 = self.n
        if pa.types.is_dictionary(keys.type):  # each dictionary interned once (a row group's)
            d, last = keys.dictionary, self._last_dictionary
            if last is None or not _same_array(last[0], d):
                last = self._last_dictionary = (d, self._intern(_norm_keys(_decode(d))))
            ids = last[1][keys.indices.to_numpy(zero_copy_only=False)]
        else:
            ids = self._intern(keys)
        if self.n >= 2**31:  # pragma: no cover - 2**31 distinct keys do not fit in memory here
            raise _err("more than 2**31 - 1 distinct string keys", self.n)
        self._unused |= pa.types.is_dictionary(keys.type)  # its keys may go unused
        if self._count:
            count_into(ids, 0, self.counts)
        elif self._unused:  # a key interned unused may be seen now
            self.counts[ids] = 1
        else:  # every new key was seen
            self.counts[n0 : self.n] = 1
        return ids

    def _grow(self, n_bytes: int) -> None:
        """Twice the room for keys, for key bytes (at least ``n_bytes`` more) and the table."""
        n = self.n
        if n + 1 >= self._hashes.size:
            cap = 2 * self._hashes.size
            self._hashes = np.resize(self._hashes, cap)
            more = np.zeros(cap - self.counts.size, self.counts.dtype)
            self.counts = np.concatenate([self.counts, more])
            self._offsets = np.resize(self._offsets, cap + 1)
        used = int(self._offsets[n])
        if used + n_bytes > self._data.size:
            self._data = np.resize(self._data, max(2 * self._data.size, used + n_bytes))
        if 2 * (n + 1) > self._slots.shape[0]:
            from ooc_lowrank.kernels.hashing import rehash_slots

            size = 2 * self._slots.shape[0]
            self._slots = None  # freed first (the keys are rehashed from their own arrays)
            self._slots = np.zeros((size, 4), np.uint64)
            rehash_slots(self._data, self._offsets, self._hashes, n, self._slots)

    def _intern(self, arr: pa.Array) -> np.ndarray:
        return self._intern_parts(*_string_parts(arr))  # string or large_string: no cast

    def _intern_parts(self, data: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        """First-seen ids of the byte strings ``data`` / ``offsets`` ``(n + 1,)`` (not counted)."""
        from ooc_lowrank.kernels.hashing import hash_strings, intern_strings

        n_arr = offsets.size - 1
        hashes = np.empty(n_arr, np.uint64)
        hash_strings(data, offsets, np.uint64(0), hashes)  # = hash_keys(arr)
        out = np.empty(n_arr, np.int64)
        i = 0
        while True:
            self.n, i = intern_strings(
                data, offsets, hashes, i, self._slots, self._data, self._offsets, self._hashes,
                self.n, out,
            )  # fmt: skip
            if i == n_arr:
                return out
            self._grow(int(offsets[i + 1] - offsets[i]))

    def order_keys(self, i0: int, i1: int) -> np.ndarray:
        """int64 ``(i1 - i0,)``: a key of ids ``i0 .. i1 - 1`` whose order never contradicts
        the sorted order of the strings (kernel ``string_order_keys``: the first 8 bytes)."""
        from ooc_lowrank.kernels.buckets import string_order_keys

        out = np.empty(i1 - i0, np.int64)
        string_order_keys(self._data, self._offsets, i0, i1, out)
        return out

    def finish(self) -> tuple[Vocabulary, np.ndarray, np.ndarray]:
        """(the sorted vocabulary, the count of each of its keys, sorted index of each id);
        keys never counted (in a dictionary, not in the data) are left out (index -1)."""
        n = self.n
        self._slots = self._hashes = None  # the table's memory back before the vocabulary's
        keys = pa.LargeStringArray.from_buffers(
            n, pa.py_buffer(self._offsets[: n + 1].copy()), pa.py_buffer(self._data.copy())
        )
        seen = np.flatnonzero(self.counts[:n])
        order = seen[_sort_strings(keys.take(pa.array(seen)), self.order_keys(0, n)[seen])]
        where = np.full(n, -1, np.int64)
        where[order] = np.arange(order.size)
        return Vocabulary(keys.take(pa.array(order))), self.counts[order], where


def _sort_strings(keys: pa.Array, prefix: np.ndarray) -> np.ndarray:
    """The permutation sorting the strings ``keys`` by their UTF-8 bytes, given ``prefix``
    (int64, their :func:`kernels.buckets.string_order_keys`): a NumPy sort of the prefixes,
    then Arrow's string sort only for runs of equal prefixes (4M keys of up to 8 bytes:
    0.5 s instead of 3.5 s for Arrow's sort of them all)."""
    perm = np.argsort(prefix, kind="stable")
    p = prefix[perm]
    tie = p[1:] == p[:-1]
    if tie.any():  # runs of equal first 8 bytes, contiguous in this order: sorted in place
        run = np.zeros(p.size, bool)
        run[1:] |= tie
        run[:-1] |= tie
        at = np.flatnonzero(run)
        sub = pa.table({"p": p[at], "k": keys.take(pa.array(perm[at]))})
        perm[at] = perm[at][pc.sort_indices(sub, [("p", "ascending"), ("k", "ascending")])]
    return perm


class _IntInterner:
    """Distinct integer keys of a stream numbered in first-seen order, with the count of each,
    as :class:`_StringInterner` does for strings: keys within a span of ``_MAX_DENSE_SPAN``
    values through a dense table of ids (kernel ``kernels.buckets.intern_dense``: one array
    read per key, 4 bytes per value of the span), wider spans through the string interner's
    hash table over the keys' 8 bytes (the ids kept).  ``count=False`` as for
    :class:`_StringInterner`."""

    def __init__(self, count: bool = True):
        self.n = 0
        self._key_of = np.empty(1 << 12, np.int64)
        self._count = count
        self.counts = np.zeros(1 << 12, np.int64 if count else np.uint8)
        self._lo, self._lut = 0, None
        self._hash = None  # a _StringInterner of the keys' bytes, once the span is too wide

    def add(self, keys: pa.Array) -> np.ndarray:
        """First-seen ids (int64) of ``keys`` (int64, or a dictionary of integers)."""
        from ooc_lowrank.kernels.buckets import count_into, intern_dense

        k = np.ascontiguousarray(_decode(keys).to_numpy(), np.int64)
        if not k.size:
            return np.empty(0, np.int64)
        n0 = self.n
        if n0 + k.size > self._key_of.size:  # room for every key of the batch being new
            cap = max(2 * self._key_of.size, n0 + k.size)
            self._key_of = np.resize(self._key_of, cap)
            more = np.zeros(cap - self.counts.size, self.counts.dtype)
            self.counts = np.concatenate([self.counts, more])
        if self._hash is None:
            lo, hi = int(k.min()), int(k.max())
            if self._lut is not None:
                lo, hi = min(lo, self._lo), max(hi, self._lo + self._lut.size - 1)
            if hi - lo < _MAX_DENSE_SPAN:
                if self._lut is None or lo < self._lo or hi >= self._lo + self._lut.size:
                    # grown geometrically (O(batch) per batch), the ids moved along
                    size = hi - lo + 1
                    if self._lut is not None:
                        size = min(max(size, 2 * self._lut.size), _MAX_DENSE_SPAN)
                    lo = max(lo - (size - (hi - lo + 1)) // 2, -(2**63))  # room on both sides
                    lut = np.full(size, -1, np.int32)
                    if self._lut is not None:
                        lut[self._lo - lo : self._lo - lo + self._lut.size] = self._lut
                    self._lo, self._lut = lo, lut
                out = np.empty(k.size, np.int64)
                self.n = intern_dense(k, self._lo, self._lut, n0, self._key_of, out)
            else:  # too wide: the ids so far re-interned in order (0, 1, ...) in a hash table
                self._lut = None
                self._hash = _StringInterner(count=False)
                self._intern_hashed(self._key_of[:n0].copy())
        if self._hash is not None:
            out = self._intern_hashed(k)
            self._key_of[n0 : self.n] = self._hash._data[8 * n0 : 8 * self.n].view(np.int64)
        if self.n >= 2**31:  # pragma: no cover - 2**31 distinct keys do not fit in memory here
            raise _err("more than 2**31 - 1 distinct integer keys", self.n)
        if self._count:
            count_into(out, 0, self.counts)
        else:  # every key interned is seen
            self.counts[n0 : self.n] = 1
        return out

    def _intern_hashed(self, k: np.ndarray) -> np.ndarray:
        ids = self._hash._intern_parts(k.view(np.uint8), np.arange(0, 8 * k.size + 1, 8))
        self.n = self._hash.n
        return ids

    def order_keys(self, i0: int, i1: int) -> np.ndarray:
        """The keys of ids ``i0 .. i1 - 1`` (their own order)."""
        return self._key_of[i0:i1]

    def finish(self) -> tuple[Vocabulary, np.ndarray, np.ndarray]:
        """As :meth:`_StringInterner.finish`: (the sorted vocabulary, the count of each of its
        keys, the sorted index of each id)."""
        n = self.n
        if self._lut is not None:  # the table lists the ids in key order: no sort
            valid = self._lut >= 0
            order = self._lut[valid].astype(np.int64)
        else:
            order = np.argsort(self._key_of[:n], kind="stable")
        self._lut = self._hash = None
        where = np.empty(n, np.int64)
        where[order] = np.arange(n)
        return Vocabulary(pa.array(self._key_of[order])), self.counts[order], where


def _exact_in_float32(t: pa.DataType) -> bool:
    """Whether every value of type ``t`` is a float32 exactly."""
    if pa.types.is_dictionary(t):
        t = t.value_type
    if pa.types.is_integer(t):
        return t.bit_width <= 16
    return pa.types.is_float16(t) or pa.types.is_float32(t) or pa.types.is_boolean(t)


class _Behind:
    """Calls run in one background thread, one at a time, at most one waiting: :meth:`put`
    first waits for the previous call (raising its exception), so that a writer of batches
    holds two at most while the caller builds the next (file writes release the GIL)."""

    def __init__(self, name: str):
        from concurrent.futures import ThreadPoolExecutor

        self._pool = ThreadPoolExecutor(1, thread_name_prefix=name)
        self._pending = None

    def put(self, fn, *args) -> None:
        self.wait()
        self._pending = self._pool.submit(fn, *args)

    def wait(self) -> None:
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        try:
            if exc_type is None:
                self.wait()
        finally:
            self._pool.shutdown(wait=True)
        return False


class _Replay:
    """Records of a pass, replayed in order after it: kept in memory up to ``limit`` records,
    beyond that (all of them) appended to the file ``path``; read back in chunks."""

    def __init__(self, path: str, dtype: np.dtype, limit: int):
        self.path, self.dtype, self.limit = path, np.dtype(dtype), limit
        self._held, self._n, self._file = [], 0, False

    def add(self, rec: np.ndarray) -> None:
        self._n += rec.size
        if not self._file and self._n <= self.limit:
            self._held.append(rec)
            return
        with open(self.path, "ab") as fh:
            for r in self._held + [rec]:
                r.tofile(fh)
        self._held, self._file = [], True

    def __iter__(self) -> Iterator[np.ndarray]:
        yield from self._held
        self._held = []
        if not self._file:
            return
        # chunks of a record batch's size: what pass 2 does with a chunk stays in the caches
        step = min(max(self.limit, 1 << 16), DEFAULT_BATCH_ROWS)
        buf = np.empty(step, self.dtype)
        with open(self.path, "rb") as fh:
            while True:
                got = fh.readinto(memoryview(buf.view(np.uint8)))
                if not got:
                    break
                yield buf[: got // self.dtype.itemsize]
        os.remove(self.path)


class _PairsOnce:
    """Pass 1 of interactions without training vocabularies: the table read once.

    Each key column is counted (int64 keys: :class:`_VocabBuilder`, the keys themselves kept)
    or numbered in first-seen order (strings: :class:`_StringInterner`); values validated; the
    entries (the int64 key or first-seen id of each side, value, weight) kept by a
    :class:`_Replay` in a scratch folder.  :meth:`entries` replays them as vocabulary indices
    once the vocabularies are final (sorted): no second read or decode of the table, no second
    hash of its strings.
    """

    def __init__(self, src, keys_of, cols, value, weight, limit, tmpdir, key_cols):
        from ..storage import scratch_dir

        # a string key's first-seen id fits 32 bits (the interner holds every key in memory)
        fields = [
            (f, "<i4" if _type_class(src.schema.field(c).type) == "string" else "<i8")
            for f, c in zip(("r", "c"), key_cols, strict=True)
        ]
        # values kept in 4 bytes when every batch's type holds only float32 values (a dataset
        # or Arrow table hands every batch over in its one schema; DataFrame partitions may
        # differ): 200M entries of string keys, 3.2 -> 2.4 GB written and read back
        narrow = src._dataset is not None or src._table is not None
        for f, c in (("val", value), ("w", weight)):
            if c is not None:
                exact = narrow and _exact_in_float32(src.schema.field(c).type)
                fields.append((f, "<f4" if exact else "<f8"))
        self._scratch = scratch_dir("ooc_lowrank_table_", tmpdir)
        tmp = self._scratch.__enter__()
        try:
            self._replay = _Replay(os.path.join(tmp, "entries.bin"), np.dtype(fields), limit)
            self.offset = self._read(src, keys_of, cols, value, weight)
        except BaseException:
            self.close()
            raise

    @staticmethod
    def _add(side, arr) -> np.ndarray:
        if isinstance(side, _VocabBuilder):
            arr = _decode(arr)
            side.add(arr)
            return arr.to_numpy()
        return side.add(arr)

    def _read(self, src, keys_of, cols, value, weight) -> int:
        from concurrent.futures import ThreadPoolExecutor

        sides, offset = [None, None], 0
        # the two key columns side by side (the kernels release the GIL): two cores; a batch's
        # entries written while the next is read
        with (
            ThreadPoolExecutor(2, thread_name_prefix="ooc_lowrank_keys") as pool,
            _Behind("ooc_lowrank_replay") as behind,
        ):
            for batch in src.batches(cols):
                keys = keys_of(batch, offset, large=False)  # the interner reads 32-bit offsets
                rec = np.empty(batch.num_rows, self._replay.dtype)
                for k in (0, 1):
                    if sides[k] is None:
                        integer = _type_class(keys[k].type) == "integer"
                        sides[k] = _VocabBuilder() if integer else _StringInterner()
                ids = [pool.submit(self._add, sides[k], keys[k]) for k in (0, 1)]
                if value is not None:
                    rec["val"] = _values(batch, value, "value", offset, src)
                if weight is not None:
                    rec["w"] = _values(batch, weight, "weight", offset, src)
                rec["r"], rec["c"] = ids[0].result(), ids[1].result()
                behind.put(self._replay.add, rec)
                offset += batch.num_rows
        self.vocabularies, self._where, self.counts = [], [], None
        for side in sides if offset else ():
            if isinstance(side, _StringInterner):
                voc, counts, where = side.finish()
            else:
                (voc, counts), where = side.finish(), None
            self.vocabularies.append(voc)
            self._where.append(where)
            if self.counts is None:
                self.counts = counts
        return offset

    def _index(self, k, raw) -> np.ndarray:
        where = self._where[k]
        if where is not None:
            return where[raw]
        return self.vocabularies[k].index(pa.array(np.ascontiguousarray(raw)))

    def entries(self):
        """(row indices, column indices, values or None, weights or None) per chunk, in read
        order; the scratch folder is removed at the end."""
        names = self._replay.dtype.names
        try:
            for rec in self._replay:
                yield (
                    self._index(0, rec["r"]),
                    self._index(1, rec["c"]),
                    rec["val"] if "val" in names else None,
                    rec["w"] if "w" in names else None,
                )
        finally:
            self.close()

    def close(self) -> None:
        if self._scratch is not None:
            self._scratch.__exit__(None, None, None)
            self._scratch = None


def _pair_records(n_rows, n_cols, value, weight, duplicates) -> np.dtype:
    """The spilled record of an interactions entry: (row, col) packed in one word when both
    fit 31 bits, values unless all ones (and not summed), weights if any; 8-byte words."""
    packed = n_rows < 2**31 and n_cols < 2**31
    fields = [("rc", "<i8")] if packed else [("row", "<i8"), ("col", "<i8")]
    if value is not None or duplicates in ("sum", "mean"):
        fields.append(("val", "<f8"))
    if weight is not None:
        fields.append(("w", "<f8"))
    return np.dtype(fields)


class _SpillOnce:
    """Interactions without training vocabularies, the table read once and spilled in that read.

    Every key column is numbered in first-seen order while reading (:class:`_IntInterner`,
    :class:`_StringInterner`) and every entry goes straight to the spill file of its row's
    bucket as a packed record ``row id << 32 | column id`` plus its values (kernel
    ``spill_pairs``).  A bucket is a range of an order key of the row keys (integers: the key;
    strings: their first 8 bytes, kernel ``string_order_keys``) cut at quantiles of the first
    batch's rows, so that every bucket holds a contiguous range of the final, sorted row
    indices, whatever the first-seen ids are.  After the read (:meth:`buckets`) the ids are
    mapped to sorted indices when a bucket is loaded (kernel ``remap_packed``, in place); a
    bucket that came out larger than ``bucket_nnz`` (a first batch unlike the rest, e.g. a
    table sorted by key) is re-spilled once, mapped, into row ranges of at most ``bucket_nnz``
    entries.  Compared with :class:`_PairsOnce` it writes and reads the entries once instead
    of twice (no replay file).  Memory: a batch, the interners (ids and counts per key), one
    bucket.
    """

    def __init__(self, src, keys_of, cols, value, weight, duplicates, bucket_nnz, n_rows, tmpdir):
        from ..storage import scratch_dir

        self.bucket_nnz = int(bucket_nnz)
        self.rec_dtype = _pair_records(0, 0, value, weight, duplicates)  # ids: 31 bits
        # buckets of 3/4 of the limit on average: a few percent of sampling error stays below it
        self.n_buckets = max(1, -(-4 * int(n_rows) // (3 * self.bucket_nnz)))
        self._scratch = scratch_dir("ooc_lowrank_table_", tmpdir)
        self._tmp = self._scratch.__enter__()
        try:
            self._raw = RowBuckets(
                self._tmp, np.arange(self.n_buckets + 1, dtype=np.int64), self.rec_dtype
            )
            self._held = [] if self.n_buckets == 1 else None  # one bucket: kept in memory
            self.offset = self._read(src, keys_of, cols, value, weight)
        except BaseException:
            self._raw.close_files()
            self.close()
            raise

    def _read(self, src, keys_of, cols, value, weight) -> int:
        from concurrent.futures import ThreadPoolExecutor

        from ooc_lowrank.kernels.buckets import spill_pairs

        sides, offset, bounds = [None, None], 0, None
        vfields = [f for f in self.rec_dtype.names if f in ("val", "w")]
        self.totals = np.zeros(self.n_buckets, np.int64)  # records per bucket
        bucket_of = np.empty(1 << 12, np.int32)  # the bucket of every row id
        try:
            # the two key columns interned side by side (the kernels release the GIL); a
            # batch's records written to their files while the next is read
            with (
                ThreadPoolExecutor(2, thread_name_prefix="ooc_lowrank_keys") as pool,
                _Behind("ooc_lowrank_spill") as behind,
            ):
                for batch in src.batches(cols):
                    keys = keys_of(batch, offset, large=False)  # the interner reads 32-bit offsets
                    for k in (0, 1):
                        if sides[k] is None:
                            integer = _type_class(keys[k].type) == "integer"
                            sides[k] = (_IntInterner if integer else _StringInterner)(False)
                    n0 = sides[0].n
                    # interners without counts: the row counts of a bucket are taken from its
                    # records only when it must be re-spilled (no random increment per row)
                    ids = [pool.submit(sides[k].add, keys[k]) for k in (0, 1)]
                    vbits = np.empty((len(vfields), batch.num_rows), np.float64)
                    if value is not None:
                        vbits[0] = _values(batch, value, "value", offset, src)
                    elif "val" in vfields:
                        vbits[0] = 1.0
                    if weight is not None:
                        vbits[-1] = _values(batch, weight, "weight", offset, src)
                    ri, ci = ids[0].result(), ids[1].result()
                    n1 = sides[0].n
                    if n1 > bucket_of.size:
                        bucket_of = np.resize(bucket_of, max(2 * bucket_of.size, n1))
                    order = sides[0].order_keys(n0, n1)
                    if bounds is None and ri.size:  # cut at quantiles of the first batch's rows
                        sample = np.sort(order[ri - n0])
                        cut = (np.arange(1, self.n_buckets) * sample.size) // self.n_buckets
                        bounds = sample[cut] if sample.size else np.zeros(0, np.int64)
                    if n1 > n0:
                        bucket_of[n0:n1] = np.searchsorted(bounds, order, side="right")
                    out = np.empty((ri.size, self.rec_dtype.itemsize // 8), np.int64)
                    part = np.empty(self.n_buckets, np.int64)
                    spill_pairs(ri, ci, True, vbits.view(np.int64), bucket_of, out, part)
                    rec = out.view(self.rec_dtype).reshape(ri.size)
                    self.totals += part
                    if self._held is not None:
                        self._held.append(rec)
                    else:
                        behind.put(self._raw.append_parts, rec, part)
                    offset += batch.num_rows
        finally:
            self._raw.close_files()
        self.vocabularies, self._where, self.counts = [], [], None
        for side in sides:  # both hash tables freed before either vocabulary is sorted
            if isinstance(side, _StringInterner):
                side._slots = None
        for side in sides if offset else ():
            voc, _, where = side.finish()
            self.vocabularies.append(voc)
            # id -> sorted index, 4 bytes per key (read at random per record by remap_packed)
            self._where.append(where.astype(np.int32))
        if offset:
            # the sorted rows of every bucket: a contiguous range (the order keys never
            # contradict the key order), found from the bucket of every row in sorted order
            where = self._where[0]
            seen = np.flatnonzero(where >= 0)
            in_order = np.empty(len(self.vocabularies[0]), np.int64)
            in_order[where[seen]] = bucket_of[seen]
            if in_order.size > 1 and (np.diff(in_order) < 0).any():  # pragma: no cover
                raise AssertionError("row buckets out of key order")
            self.first_row = np.searchsorted(in_order, np.arange(self.n_buckets + 1))
        return offset

    def buckets(self) -> _SpilledBuckets:
        """The buckets by final row range (oversized ones re-spilled), as :class:`RowBuckets`
        serves them to the sort: ``starts``, ``len``, ``load(bi, sort=False)``, ``store``."""
        return _SpilledBuckets(self)

    def close(self) -> None:
        if self._scratch is not None:
            self._scratch.__exit__(None, None, None)
            self._scratch = None


class _SpilledBuckets:
    """The buckets of a :class:`_SpillOnce` read by final row range: ``(source, remap)`` per
    bucket, the source a raw bucket's file (ids mapped to indices when loaded), a part of a
    re-spilled bucket, or a bucket written back by :meth:`store` (already mapped)."""

    def __init__(self, once: _SpillOnce):
        self._once, self._buf = once, None
        self._row_of, self._col_of = once._where
        raw, first = once._raw, once.first_row
        starts, self._items = [0], []
        for b in range(once.n_buckets):
            r0, r1 = int(first[b]), int(first[b + 1])
            if r0 == r1:
                continue
            if once.totals[b] <= once.bucket_nnz or r1 - r0 == 1 or once._held is not None:
                self._items.append(("raw", b))
                starts.append(r1)
                continue
            counts = np.zeros(r1 - r0, np.int64)  # its rows' entries, from its records
            for rec in self._chunks(raw.files[b], once.bucket_nnz):
                self._remap(rec)
                counts += np.bincount((rec["rc"] >> 32) - r0, minlength=r1 - r0)
            sub = bucket_starts(counts, once.bucket_nnz) + r0
            split = RowBuckets(_mkdir(os.path.join(once._tmp, f"split{b}")), sub, once.rec_dtype)
            try:
                for rec in self._chunks(raw.files[b], once.bucket_nnz):
                    self._remap(rec)
                    split.spill(rec, rows=rec["rc"] >> 32)
            finally:
                split.close_files()
            os.remove(raw.files[b])
            for j in range(len(split)):
                self._items.append(("split", split, j))
                starts.append(int(sub[j + 1]))
        self.starts = np.array(starts, np.int64)

    def __len__(self) -> int:
        return len(self._items)

    def _remap(self, rec) -> None:
        from ooc_lowrank.kernels.buckets import remap_packed

        if rec.size:
            remap_packed(rec.view(np.int64).reshape(rec.size, -1), self._row_of, self._col_of)

    def _chunks(self, path, n) -> Iterator[np.ndarray]:
        buf = np.empty(max(n, 1), self._once.rec_dtype)
        with open(path, "rb") as fh:
            while got := fh.readinto(memoryview(buf.view(np.uint8))):
                yield buf[: got // buf.itemsize]

    def load(self, bi: int, sort: bool = False) -> np.ndarray:
        """Bucket ``bi``'s records, rows and columns as final indices, in read order (a view of
        a buffer reused by the next call)."""
        assert not sort
        item = self._items[bi]
        if item[0] == "split":
            return self._load(item[1], item[2])
        if item[0] == "stored":
            rec = np.fromfile(item[1], self._once.rec_dtype)
            os.remove(item[1])
            return rec
        once = self._once
        if once._held is not None:
            rec = np.concatenate([np.empty(0, once.rec_dtype)] + once._held)
            once._held = []
        else:
            rec = self._load(once._raw, item[1])
        self._remap(rec)
        return rec

    def _load(self, buckets: RowBuckets, b: int) -> np.ndarray:
        """``buckets.load(b)`` into the one buffer shared by every load (fresh pages are slow
        and a buffer per re-spilled bucket would add up)."""
        buckets._buf, self._buf = self._buf, None
        try:
            return buckets.load(b, sort=False)
        finally:
            self._buf, buckets._buf = buckets._buf, None

    def store(self, bi: int, rec: np.ndarray) -> None:
        """Write bucket ``bi`` back (mapped, e.g. checked for duplicates), replacing its file."""
        path = os.path.join(self._once._tmp, f"stored{bi:06d}.bin")
        rec.tofile(path)
        self._items[bi] = ("stored", path)

    def close_files(self) -> None:
        pass


def _mkdir(path: str) -> str:
    os.makedirs(path, exist_ok=True)
    return path


def read_vocabulary(store, name: str) -> pa.Array:
    """The keys of vocabulary ``name`` (``"rows"``, ``"cols"``, ``"labels"``) of a store written
    by a table converter: element ``i`` is the key of index ``i``."""
    import io as _io

    from ..storage import read_side_file

    url = getattr(store, "url", store)
    data = read_side_file(url, _SIDE.format(name))
    return pq.read_table(_io.BytesIO(data)).column("key").combine_chunks()


def _fixed_vocabulary(keys, what) -> Vocabulary:
    if isinstance(keys, str):
        keys = [k for k in keys.split(",") if k]
    arr = keys if isinstance(keys, (pa.Array, pa.ChunkedArray)) else pa.array(list(keys))
    arr = _decode(arr)
    if arr.null_count or len(pc.unique(arr)) != len(arr):
        raise _err(f"{what} must be distinct non-null keys", None, f"remove repeats from {what}")
    return Vocabulary(arr)


# ----------------------------------------------------------------------------------------------
# interactions (and long feature tables)


def _sort_pairs(rows, cols, n_rows, n_cols):
    """Sort entries by (row, col), stably (read order within a pair): (permutation, sorted
    rows, sorted cols).

    A counting sort by row, then each row's entries by column (kernel
    ``kernels.buckets.sort_bucket``: O(n) plus short per-row sorts, about 6x faster than
    numpy's sort of one int64 key per entry).
    """
    from ooc_lowrank.kernels.buckets import sort_bucket

    rows = np.ascontiguousarray(rows, dtype=np.int64)
    cols = np.ascontiguousarray(cols, dtype=np.int64)
    ptr = np.empty(n_rows + 1, np.int64)
    perm = np.empty(rows.size, np.int64)
    cols_sorted = np.empty(rows.size, np.int64)
    sort_bucket(rows, cols, n_rows, ptr, perm, cols_sorted)
    return perm, np.repeat(np.arange(n_rows, dtype=np.int64), np.diff(ptr)), cols_sorted


def _merge_pairs(rows, cols, vals, policy, rv: Vocabulary, cv: Vocabulary, roles, src, r0=0):
    """Merge runs of equal (row, col) of entries sorted by (row, col, read order); ``rows``
    count from ``r0``, ``vals`` maps field names to values.  Returns (rows, cols, vals)."""
    if rows.size < 2:
        return rows, cols, vals
    new = np.ones(rows.size, bool)
    new[1:] = (rows[1:] != rows[:-1]) | (cols[1:] != cols[:-1])
    if new.all():
        return rows, cols, vals
    if policy == "error":
        dup = np.flatnonzero(~new)[:3]
        pairs = [(rv.keys[int(rows[k]) + r0].as_py(), cv.keys[int(cols[k])].as_py()) for k in dup]
        raise _err(
            f"duplicate ({roles[0]}, {roles[1]}) pairs: {int((~new).sum())} repeat(s) in one "
            f"bucket, e.g. {pairs}",
            pairs[0],
            "pass duplicates='last', 'sum' or 'mean' (CLI --duplicates sum), or deduplicate "
            "the table",
            src.name,
        )
    starts = np.flatnonzero(new)
    if policy == "last":
        keep = np.r_[starts[1:], rows.size] - 1
        return rows[keep], cols[keep], {f: v[keep] for f, v in vals.items()}
    n = np.diff(np.r_[starts, rows.size]).astype(np.float64)
    out = {}
    for f, v in vals.items():
        total = np.add.reduceat(v, starts)
        out[f] = total / n if policy == "mean" else total
    return rows[starts], cols[starts], out


#: Interactions without training vocabularies keep their entries for a replay (24-40 bytes
#: each, :class:`_PairsOnce`) only up to this many bytes; a larger table whose row count is
#: known (Parquet, Arrow) spills its entries to their row buckets in its one read instead
#: (:class:`_SpillOnce`): past the page cache's dirty limit the kept entries go to disk and
#: back (200M rows: 4.8 GB written and read), the spill is written and read once either way.
#: At 20M rows (480 MB of kept entries) the spill costs less already (busy machine, min of 3
#: CPU-s: int64 keys replay 3.12 / spill 2.90, string keys 6.18 / 5.86, scans 0.71 / 1.60;
#: ``benchmarks/bench_tables_spill.py``, ``benchmarks/results/tables_spill.json``); below
#: 256 MB (about 10M ratings) the kept entries stay in the page cache and both are alike.
_KEEP_ENTRIES_BYTES = 1 << 28


def _spill_once_rows(src: TableSource, n_fields: int) -> int | None:
    """The row count when interactions without training vocabularies spill in their one read
    (:class:`_SpillOnce`: the row count known without a read, and more entries than
    :data:`_KEEP_ENTRIES_BYTES` to keep), else None (:class:`_PairsOnce`); ``n_fields``: value
    and weight columns read."""
    n = src.known_rows()
    return n if n is not None and n * (16 + 8 * n_fields) > _KEEP_ENTRIES_BYTES else None


#: Pass 2 of interactions reads a key column dictionary-encoded only up to this many keys.
_PLAIN_KEYS_ABOVE = 1 << 16
#: ``duplicates`` as the code of kernel ``bucket_csr``.
_POLICY_CODES = {"error": 0, "last": 1, "sum": 2, "mean": 3}


def _convert_pairs(
    src: TableSource,
    dest,
    *,
    row,
    col,
    value,
    weight,
    duplicates,
    vocabulary_from,
    unseen,
    own_rows,
    dtype,
    array,
    kind,
    roles,
    attrs,
    block_rows,
    bucket_nnz,
    tmpdir,
    overwrite,
    progress,
):
    from ooc_lowrank.kernels.buckets import count_into

    from ..storage import scratch_dir  # storage layer; imported lazily

    if duplicates not in DUPLICATES:
        raise _err("duplicates must be one of " + ", ".join(DUPLICATES), duplicates)
    need = {row: (roles[0] + " key", _KEY), col: (roles[1] + " key", _KEY)}
    if value is not None:
        need[value] = ("value", _NUM)
    if weight is not None:
        need[weight] = ("weight", _NUM)
    src.check(need)
    cols = list(need)

    def keys_of(batch, offset, large=True):
        r = _keys(batch, row, roles[0] + " key", offset, src, large)
        return r, _keys(batch, col, roles[1] + " key", offset, src, large)

    # pass 1 (the key columns only): keys validated, vocabularies, entries per row
    known = {}  # the training vocabularies reused: {0: rows, 1: columns}
    if vocabulary_from is not None:
        if not own_rows:
            known[0] = Vocabulary(read_vocabulary(vocabulary_from, "rows"))
        known[1] = Vocabulary(read_vocabulary(vocabulary_from, "cols"))
    builders = {k: _VocabBuilder() for k in (0, 1) if k not in known}
    counts = np.zeros(len(known[0]), np.int64) if 0 in known else None
    offset = dropped = 0
    # without training vocabularies: the table read once; pass 2 replays its entries (with
    # the replay in cache-sized chunks and one spill kernel, keeping the entries of int64 keys
    # costs no more than a second read: 20M rows, busy machine, 4.1-4.5 vs 4.3-5.8 CPU-s),
    # unless the row count is known and the kept entries would outgrow _KEEP_ENTRIES_BYTES:
    # then the entries are spilled to their buckets in that read (_SpillOnce)
    once = spill = None
    if not known:
        n_known = _spill_once_rows(src, len(cols) - 2)
        if n_known is not None:
            spill = _SpillOnce(
                src, keys_of, cols, value, weight, duplicates, bucket_nnz, n_known, tmpdir
            )
        else:
            once = _PairsOnce(src, keys_of, cols, value, weight, bucket_nnz, tmpdir, (row, col))
    from concurrent.futures import ThreadPoolExecutor

    # the two key columns counted or looked up side by side (the kernels release the GIL)
    with ThreadPoolExecutor(2, thread_name_prefix="ooc_lowrank_keys") as pool:
        for batch in () if once or spill else src.batches([row, col], dictionary=(row, col)):
            keys = keys_of(batch, offset)
            idx = {k: voc.index(keys[k]) for k, voc in known.items()}
            ok = np.logical_and.reduce([i >= 0 for i in idx.values()]) if idx else None
            if ok is not None and not ok.all():
                if unseen == "error":
                    side = min(k for k in idx if (idx[k] < 0).any())
                    k = int(np.flatnonzero(idx[side] < 0)[0])
                    bad = keys[side][k].as_py()
                    raise _err(
                        f"{roles[side]} key {bad!r} (row {offset + k} of the table) is not in the "
                        f"vocabulary of {vocabulary_from}",
                        bad,
                        "pass unseen='drop' (CLI --unseen drop), drop rows with keys unseen in "
                        "training, or convert without vocabulary_from",
                        src.name,
                    )
                dropped += int((~ok).sum())
                mask = pa.array(ok)
                keys = [k.filter(mask) for k in keys]
                idx = {k: i[ok] for k, i in idx.items()}
            for f in [pool.submit(b.add, keys[k]) for k, b in builders.items()]:
                f.result()
            if counts is not None:
                count_into(idx[0], 0, counts)
            offset += batch.num_rows
    pass1 = once or spill
    if pass1 is not None:
        offset, counts = pass1.offset, pass1.counts
    if offset == 0:
        if pass1 is not None:
            pass1.close()
        raise _err("the table has no rows", None, "check the source", src.name)
    if pass1 is not None:
        rv, cv = pass1.vocabularies
    else:
        rv, counts = builders[0].finish() if 0 in builders else (known[0], counts)
        cv = builders[1].finish()[0] if 1 in builders else known[1]
    builders.clear()  # their count arrays (up to 8 bytes per key in the span) freed
    n_rows, n_cols = len(rv), len(cv)
    dt = as_dtype(dtype)
    rec_dtype = _pair_records(n_rows, n_cols, value, weight, duplicates)
    packed = rec_dtype.names[0] == "rc"
    vfields = [f for f in rec_dtype.names if f in ("val", "w")]
    with scratch_dir("ooc_lowrank_table_", tmpdir) as tmp, _closing(spill):
        if spill is not None:  # spilled in the read: its buckets by final row range
            buckets = spill.buckets()
            starts = buckets.starts
        else:
            starts = bucket_starts(counts, bucket_nnz)
            buckets = RowBuckets(tmp, starts, rec_dtype)
        # one bucket (at most bucket_nnz entries, or one row): its records stay in memory, as
        # loading its file would hold them anyway; no spill file written and read back
        kept = [] if len(buckets) == 1 and spill is None else None
        # pass 2: values validated, every entry spilled to its row range's file (the store
        # is opened only after this pass: bad values leave nothing behind); without training
        # vocabularies, the entries of pass 1 replayed (already validated)
        # key columns with a vocabulary above _PLAIN_KEYS_ABOVE are read plain here: a Parquet
        # row group's dictionary of that many keys outgrows its 1 MB page and falls back to
        # plain pages, which a read "as dictionary" re-encodes (a hash per row in the reader
        # threads) only to look each distinct key up; the vocabulary's hash table is probed
        # per row instead (20M rows, 400k / 200k string keys: pass 2 12.3 -> 9.4-10.2 CPU-s)
        dict_cols = [c for c, v in ((row, rv), (col, cv)) if len(v) <= _PLAIN_KEYS_ABOVE]

        def entries():
            """(row indices, column indices, values or None, weights or None) per batch."""
            if spill is not None:  # spilled already
                return
            if once is not None:
                yield from once.entries()
                return
            offset = 0
            from concurrent.futures import ThreadPoolExecutor

            # the two key columns looked up side by side (the kernels release the GIL)
            with ThreadPoolExecutor(1, thread_name_prefix="ooc_lowrank_keys") as pool:
                for batch in src.batches(cols, dictionary=dict_cols):
                    r, c = keys_of(batch, offset)
                    ci = pool.submit(cv.index, c)
                    ri = rv.index(r)
                    val = _values(batch, value, "value", offset, src) if value else None
                    w = None if weight is None else _values(batch, weight, "weight", offset, src)
                    yield ri, ci.result(), val, w
                    offset += batch.num_rows

        from ooc_lowrank.kernels.buckets import bucket_of_rows, spill_pairs

        row_bucket = np.empty(n_rows, np.int32 if len(buckets) < 2**31 else np.int64)
        bucket_of_rows(starts, n_rows, row_bucket)
        n_words = rec_dtype.itemsize // 8
        try:
            # the records of a batch written to their buckets' files while the next is built
            with _Behind("ooc_lowrank_spill") as behind:
                for ri, ci, val, w in entries():
                    if dropped:  # unseen="drop": entries of keys unseen in training
                        keep = (ri >= 0) & (ci >= 0)
                        ri, ci = ri[keep], ci[keep]
                        val = None if val is None else val[keep]
                        w = None if w is None else w[keep]
                    # records built and partitioned by bucket in one kernel (kernel spill_pairs)
                    vbits = np.empty((len(vfields), ri.size), np.float64)
                    if "val" in vfields:
                        vbits[0] = 1.0 if val is None else val
                    if weight is not None:
                        vbits[-1] = w
                    out = np.empty((ri.size, n_words), np.int64)
                    part_counts = np.empty(len(buckets), np.int64)
                    spill_pairs(
                        np.ascontiguousarray(ri, np.int64),
                        np.ascontiguousarray(ci, np.int64),
                        packed,
                        vbits.view(np.int64),
                        row_bucket,
                        out,
                        part_counts,
                    )
                    rec = out.view(rec_dtype).reshape(ri.size)
                    if kept is not None:
                        kept.append(rec)
                    else:
                        behind.put(buckets.append_parts, rec, part_counts)
        except BaseException:  # the spill files kept open closed before the folder goes
            buckets.close_files()
            raise
        rv.write(os.path.join(tmp, "rows.parquet"))
        cv.write(os.path.join(tmp, "cols.parquet"))

        work = [np.empty(0, np.int64)]  # bucket_csr's scratch, reused (one bucket at a time)
        idt = np.int32 if n_cols < 2**31 - 1 else np.int64  # the store's index dtype

        def merged_bucket(bi, policy):
            """Bucket ``bi`` sorted by (row, col, read order), its runs of equal (row, col)
            merged by ``policy`` (kernel ``bucket_csr``): (row pointer, cols, {field: values})
            in the store's dtypes; a duplicate under ``"error"`` is named (the slow path, only
            then)."""
            from ooc_lowrank.kernels.buckets import bucket_csr

            r0, r1 = int(starts[bi]), int(starts[bi + 1])
            if kept is not None:
                rec = kept[0] if len(kept) == 1 else np.concatenate([np.empty(0, rec_dtype)] + kept)
                kept.clear()
            else:
                rec = buckets.load(bi, sort=False)
            n, k = rec.size, rec_dtype.itemsize // 8
            words = rec.view(np.int64).reshape(n, k)
            ptr = np.empty(r1 - r0 + 1, np.int64)
            cols = np.empty(n, idt)
            vals = np.empty((len(vfields), n), dt)
            if work[0].size < 4 * n:
                work[0] = np.empty(4 * n, np.int64)
            names = list(rec_dtype.names)
            m = bucket_csr(
                words,
                0,
                0 if packed else 1,
                packed,
                r0,
                r1 - r0,
                words.view(np.float64),
                np.array([names.index(f) for f in vfields], np.int64),
                _POLICY_CODES[policy],
                ptr,
                cols,
                vals,
                work[0],
            )
            if policy == "error" and m < n:  # name the repeats (sorted as sort_bucket does)
                if packed:
                    rows, c = rec["rc"] >> 32, rec["rc"] & 0xFFFFFFFF
                else:
                    rows, c = rec["row"], rec["col"]
                pos, rows, c = _sort_pairs(rows - r0, c, r1 - r0, n_cols)
                _merge_pairs(rows, c, {}, "error", rv, cv, roles, src, r0)
            if policy == "error" and len(buckets) > 1:
                buckets.store(bi, rec)  # checked; merged again in pass 3b
            return ptr, cols[:m], {f: vals[j, :m] for j, f in enumerate(vfields)}

        presorted = {}
        if duplicates == "error":
            # pass 3a: every bucket sorted and checked before the store is opened, so that a
            # duplicate is named before anything is written (one bucket: kept in memory)
            for bi in range(len(buckets)):
                merged = merged_bucket(bi, "error")
                if len(buckets) == 1:
                    presorted[bi] = merged
                del merged

        # pass 3b: every bucket sorted (a checked one stays as it is), duplicates merged, written
        def merged(bi):
            return presorted.pop(bi) if bi in presorted else merged_bucket(bi, duplicates)

        def blocks():
            from concurrent.futures import ThreadPoolExecutor

            # the next bucket sorted and merged (kernels without the GIL) while this one is
            # written: one bucket more in memory, the second core busy
            with ThreadPoolExecutor(1, thread_name_prefix="ooc_lowrank_bucket") as pool:
                nxt = pool.submit(merged, 0)
                for bi in range(len(buckets)):
                    ptr, cols, vals = nxt.result()
                    if bi + 1 < len(buckets):
                        nxt = pool.submit(merged, bi + 1)
                    val = vals["val"] if "val" in vals else np.ones(cols.size)
                    b = {array: csr_from_parts(ptr, cols, val, n_cols, dt)}
                    if weight is not None:
                        b["weight"] = csr_from_parts(ptr, cols, vals["w"], n_cols, dt)
                    yield b

        specs = [(array, kind, n_cols, dt)]
        if weight is not None:
            specs.append(("weight", kind, n_cols, dt))
        attrs = dict(
            attrs,
            shape=[n_rows, n_cols],
            duplicates=duplicates,
            key_order="sorted"
            if vocabulary_from is None
            else (
                f"rows sorted, cols from {vocabulary_from}"
                if own_rows
                else f"from {vocabulary_from}"
            ),
            dropped_unseen=dropped,
            vocabularies={"rows": _SIDE.format("rows"), "cols": _SIDE.format("cols")},
        )
        return write_blocks(
            dest,
            specs,
            blocks(),
            attrs=attrs,
            block_rows=block_rows,
            overwrite=overwrite,
            progress=progress,
            side_files={
                _SIDE.format("rows"): os.path.join(tmp, "rows.parquet"),
                _SIDE.format("cols"): os.path.join(tmp, "cols.parquet"),
            },
        )


# ----------------------------------------------------------------------------------------------
# row-aligned tables: features and labels


class _closing:
    """``close()`` of an object (or None) at the end of a ``with`` block."""

    def __init__(self, obj):
        self.obj = obj

    def __enter__(self):
        return self.obj

    def __exit__(self, *exc):
        if self.obj is not None:
            self.obj.close()
        return False


def _list_parts(arr, col, role, offset, src, allow_null_items=False):
    """(lengths, flat values) of a list column; a null list or a null item is an error."""
    arr = _decode(arr)
    _no_nulls(arr, col, role, offset, src)
    flat = arr.flatten()
    if flat.null_count and not allow_null_items:
        lens = pc.list_value_length(arr).to_numpy(zero_copy_only=False)
        k = int(np.flatnonzero(flat.is_null().to_numpy(zero_copy_only=False))[0])
        row = int(np.searchsorted(np.cumsum(lens), k, side="right"))
        raise _err(
            f"{role} column {col!r}: the list of row {offset + row} of the table holds a null",
            None,
            "remove the nulls from the lists (an empty list is a row without entries)",
            src.name,
        )
    lens = pc.list_value_length(arr).to_numpy(zero_copy_only=False).astype(np.int64)
    return lens, flat


class _RowSpec:
    """What a row-aligned conversion reads and writes; ``validate`` is pass 1."""

    def __init__(
        self,
        src,
        *,
        row_key,
        feature_columns,
        feature_list,
        feature_indices,
        feature_values,
        n_features,
        label_list,
        labels,
        class_column,
        dtype,
        vocabulary_from=None,
        unseen="error",
    ):
        self.src, self.unseen = src, unseen
        self.row_key = row_key
        self.fcols = _names(feature_columns)
        self.flist, self.find, self.fval = feature_list, feature_indices, feature_values
        self.n_features = as_opt_int(n_features, "n_features", 1)
        self.llist, self.ccol = label_list, class_column
        self.dt = as_dtype(dtype)
        self.label_vocab = None if labels is None else _fixed_vocabulary(labels, "labels")
        if self.label_vocab is None and label_list and vocabulary_from is not None:
            self.label_vocab = Vocabulary(read_vocabulary(vocabulary_from, "labels"))
        self.class_vocab = None
        self.vocabulary_from = vocabulary_from
        self.d = None
        need = {}
        if row_key:
            need[row_key] = ("row key", _KEY)
        for c in self.fcols:
            need[c] = ("feature", _NUM)
        if self.flist:
            need[self.flist] = ("feature list", ("list<integer>", "list<float>", "list<boolean>"))
        if self.find:
            need[self.find] = ("feature index list", ("list<integer>",))
        if self.fval:
            need[self.fval] = (
                "feature value list",
                ("list<integer>", "list<float>", "list<boolean>"),
            )
        if self.llist:
            need[self.llist] = ("label list", ("list<integer>", "list<string>"))
        if self.ccol:
            need[self.ccol] = ("class", _NUM + ("string",))
        src.check(need)
        self.columns = list(need)
        self.dictionary = ()
        self.class_is_key = (
            bool(self.ccol) and _type_class(src.schema.field(self.ccol).type) == "string"
        )

    def validate(self):
        """Pass 1: every value checked, vocabularies and sizes found; returns the row count."""
        src = self.src
        lab_b = _VocabBuilder() if self.llist and self.label_vocab is None else None
        if self.class_is_key and self.vocabulary_from is not None:
            self.class_vocab = Vocabulary(read_vocabulary(self.vocabulary_from, "classes"))
        cls_b = _VocabBuilder() if self.class_is_key and self.class_vocab is None else None
        max_index, offset = -1, 0
        unique = _UniqueKeys(src, self.row_key) if self.row_key else None
        for batch in src.batches(self.columns):
            if self.row_key:
                unique.add(_keys(batch, self.row_key, "row key", offset, src))
            for c in self.fcols:
                _values(batch, c, "feature", offset, src)
            if self.flist:
                lens, flat = _list_parts(
                    batch.column(self.flist), self.flist, "feature list", offset, src
                )
                if lens.size and (lens != (self.d or lens[0])).any():
                    k = int(np.flatnonzero(lens != (self.d or lens[0]))[0])
                    raise _err(
                        f"feature list column {self.flist!r} must hold lists of one length; "
                        f"row {offset + k} of the table has {lens[k]}, not {self.d or lens[0]}",
                        int(lens[k]),
                        "pad the lists, or use feature_indices / feature_values for sparse rows",
                        src.name,
                    )
                self.d = self.d or (int(lens[0]) if lens.size else None)
                _flat_values(flat, self.flist, src)
            if self.find:
                lens, flat = _list_parts(
                    batch.column(self.find), self.find, "feature index list", offset, src
                )
                ind = flat.cast(pa.int64()).to_numpy(zero_copy_only=False)
                if ind.size and ind.min() < 0:
                    raise _err(
                        f"feature index list {self.find!r} holds a negative index",
                        int(ind.min()),
                        "indices are 0-based",
                        src.name,
                    )
                max_index = max(max_index, int(ind.max()) if ind.size else -1)
                if self.fval:
                    vl, vflat = _list_parts(
                        batch.column(self.fval), self.fval, "feature value list", offset, src
                    )
                    if (vl != lens).any():
                        k = int(np.flatnonzero(vl != lens)[0])
                        raise _err(
                            f"row {offset + k}: the lists {self.find!r} and {self.fval!r} "
                            "differ in length",
                            (int(lens[k]), int(vl[k])),
                            "give one value per index",
                            src.name,
                        )
                    _flat_values(vflat, self.fval, src)
            if self.llist:
                lens, flat = _list_parts(
                    batch.column(self.llist), self.llist, "label list", offset, src
                )
                if lab_b is not None:
                    lab_b.add(_norm_keys(flat, self.llist, "label list", None, src))
                elif self.unseen == "error":
                    idx = self.label_vocab.index(flat)
                    if (idx < 0).any():
                        bad = flat[int(np.flatnonzero(idx < 0)[0])].as_py()
                        where = self.vocabulary_from or "labels="
                        raise _err(
                            f"label {bad!r} of column {self.llist!r} is not in {where}",
                            bad,
                            "pass unseen='drop' to leave such labels out, add it to labels=, "
                            "or omit labels= / vocabulary_from",
                            src.name,
                        )
            if self.ccol:
                if cls_b is not None:
                    cls_b.add(_keys(batch, self.ccol, "class", offset, src))
                elif self.class_vocab is not None:
                    keys = _keys(batch, self.ccol, "class", offset, src)
                    idx = self.class_vocab.index(keys)
                    if (idx < 0).any():
                        bad = keys[int(np.flatnonzero(idx < 0)[0])].as_py()
                        raise _err(
                            f"class {bad!r} is not in the classes of {self.vocabulary_from}",
                            bad,
                            "drop rows of classes unseen in training",
                            src.name,
                        )
                else:
                    _values(batch, self.ccol, "class", offset, src)
            offset += batch.num_rows
        if offset == 0:
            raise _err("the table has no rows", None, "check the source", src.name)
        if unique is not None:
            unique.check()
        if lab_b is not None:
            self.label_vocab = lab_b.finish()[0]
        if cls_b is not None:
            self.class_vocab = cls_b.finish()[0]
        if self.find:
            if self.n_features is None:
                self.n_features = max_index + 1
            elif max_index >= self.n_features:
                raise _err(
                    f"feature index {max_index} out of range for n_features={self.n_features}",
                    max_index,
                    "pass a larger n_features",
                    src.name,
                )
        return offset

    def outputs(self):
        """(attributes, {name: Vocabulary}) to store."""
        attrs, side = {}, {}
        if self.fcols:
            attrs["feature_names"] = self.fcols
        if self.label_vocab is not None:
            if len(self.label_vocab) <= MAX_NAMES_IN_ATTRS:
                attrs["label_names"] = [str(k) for k in self.label_vocab.keys.to_pylist()]
            side["labels"] = self.label_vocab
        if self.class_vocab is not None:
            attrs["class_names"] = self.class_vocab.keys.to_pylist()
            side["classes"] = self.class_vocab
        return attrs, side

    def specs(self):
        out = []
        if self.fcols or self.flist:
            out.append(("X", "dense", len(self.fcols) or (self.d or 0), self.dt))
        elif self.find:
            out.append(("X", "csr", self.n_features, self.dt))
        if self.llist:
            out.append(("Y", "csr", len(self.label_vocab), np.float32))
        elif self.ccol:
            out.append(("y", "dense", 1, np.float64))
        return out

    def block(self, batch, offset):
        src, n, b = self.src, batch.num_rows, {}
        if self.fcols:
            b["X"] = np.column_stack(
                [_values(batch, c, "feature", offset, src) for c in self.fcols]
            ).astype(self.dt, copy=False)
        elif self.flist:
            _, flat = _list_parts(batch.column(self.flist), self.flist, "", offset, src)
            b["X"] = _flat_values(flat, self.flist, src).reshape(n, self.d).astype(self.dt)
        elif self.find:
            lens, flat = _list_parts(batch.column(self.find), self.find, "", offset, src)
            ind = flat.cast(pa.int64()).to_numpy(zero_copy_only=False)
            if self.fval:
                _, vflat = _list_parts(batch.column(self.fval), self.fval, "", offset, src)
                val = _flat_values(vflat, self.fval, src)
            else:
                val = np.ones(ind.size)
            ptr = np.zeros(n + 1, np.int64)
            np.cumsum(lens, out=ptr[1:])
            nums = np.arange(offset, offset + n)
            ptr, ind, val = canonical_rows(
                src.name, nums, ptr, ind, val, "feature index", dedupe=False
            )
            check_range(
                src.name,
                nums,
                ptr,
                ind,
                self.n_features,
                "feature index",
                "pass a larger n_features",
            )
            b["X"] = csr_from_parts(ptr, ind, val, self.n_features, self.dt)
        if self.llist:
            lens, flat = _list_parts(batch.column(self.llist), self.llist, "", offset, src)
            ind = self.label_vocab.index(flat)
            if (ind < 0).any():  # unseen="drop": labels not in the (training) vocabulary
                rows = np.repeat(np.arange(n), lens)[ind >= 0]
                ind, lens = ind[ind >= 0], np.bincount(rows, minlength=n)
            ptr = np.zeros(n + 1, np.int64)
            np.cumsum(lens, out=ptr[1:])
            nums = np.arange(offset, offset + n)
            ptr, ind, val = canonical_rows(
                src.name, nums, ptr, ind, np.ones(ind.size), "label", dedupe=True
            )
            b["Y"] = csr_from_parts(ptr, ind, val, len(self.label_vocab), np.float32)
        elif self.ccol:
            if self.class_vocab is not None:
                y = self.class_vocab.index(_keys(batch, self.ccol, "class", offset, src))
            else:
                y = _values(batch, self.ccol, "class", offset, src)
            b["y"] = y.astype(np.float64)[:, None]
        return b


def _flat_values(flat, col, src) -> np.ndarray:
    v = flat.cast(pa.float64()).to_numpy(zero_copy_only=False)
    if not np.isfinite(v).all():
        raise _err(
            f"list column {col!r} holds a non-finite value",
            float(v[~np.isfinite(v)][0]),
            "impute or drop NaN/inf values before converting",
            src.name,
        )
    return v


def _colname(v) -> str | None:
    return None if v is None else str(v)


def _names(v) -> list[str]:
    if v is None:
        return []
    if isinstance(v, str):
        return [s.strip() for s in v.split(",") if s.strip()]
    return [str(s) for s in v]


def _convert_rows(spec, dest, *, attrs, block_rows, tmpdir, overwrite, progress):
    """Pass 1 ``spec.validate()``, pass 2 ``spec.block()`` per batch into the writer; the
    spec's vocabularies (``spec.outputs()``) and the row keys become side files."""
    from ..storage import scratch_dir

    n = spec.validate()
    specs = spec.specs()
    extra, side = spec.outputs()
    attrs = dict(attrs, **extra)
    with scratch_dir("ooc_lowrank_table_", tmpdir) as tmp:
        files = {}
        for name, voc in side.items():
            files[_SIDE.format(name)] = os.path.join(tmp, f"{name}.parquet")
            voc.write(files[_SIDE.format(name)])
        writer = None
        if spec.row_key:
            files[_SIDE.format("rows")] = os.path.join(tmp, "rows.parquet")
        attrs["vocabularies"] = {k.split("/")[1].split(".")[0]: k for k in files}

        def blocks():
            nonlocal writer
            offset = 0
            for batch in spec.src.batches(spec.columns, dictionary=spec.dictionary):
                if spec.row_key:
                    keys = _keys(batch, spec.row_key, "row key", offset, spec.src)
                    t = pa.table({"key": _norm_keys(_decode(keys))})
                    if writer is None:
                        writer = pq.ParquetWriter(files[_SIDE.format("rows")], t.schema)
                    writer.write_table(t)
                yield spec.block(batch, offset)
                offset += batch.num_rows
            if writer is not None:
                writer.close()

        try:
            return write_blocks(
                dest,
                specs,
                blocks(),
                attrs=attrs,
                block_rows=block_rows,
                overwrite=overwrite,
                progress=progress,
                expected_rows=n,
                side_files=files,
            )
        finally:
            if writer is not None and writer.is_open:
                writer.close()


# ----------------------------------------------------------------------------------------------
# train / test split


def split_table(
    src, by, *, test_fraction=None, test_values=None, seed=0, **source_options
) -> tuple[TableSource, TableSource]:
    """Split a table into (train, test) sources by a hash of key columns or by a column's value.

    Parameters
    ----------
    src : TableSource or anything :class:`TableSource` reads
    by : str or list of str
        Key columns (integer or string) deciding the side of every row.
    test_fraction : float in (0, 1), optional
        A row goes to test when the 64-bit hash of its ``by`` values (splitmix64 / FNV-1a as
        :func:`hash_keys`, seeded by ``seed``, combined over the columns) falls in the lowest
        ``test_fraction`` of the range.  The hash depends on the values only, not on the table
        or the column name: a key lands on the same side in every table split with the same
        ``seed`` (e.g. a user's ratings, features and labels), whatever their order.  (An
        integer key and the string of its digits hash differently.)
    test_values : list or comma-separated str, optional
        Instead: a row goes to test when its (single) ``by`` value is one of these.
    seed : int, default 0
        Seed of the hash.
    **source_options
        ``format``, ``batch_rows``, ``delimiter`` for :class:`TableSource`.

    Returns
    -------
    train, test : TableSource
        The same files, read with a row filter (the ``by`` columns are read alongside).
    """
    source = as_source(src, **source_options)
    by = _names(by)
    if not by:
        raise _err("by must name at least one key column", by, "e.g. by='user_id'")
    if (test_fraction is None) == (test_values is None):
        raise _err(
            "give exactly one of test_fraction and test_values",
            (test_fraction, test_values),
            "e.g. test_fraction=0.2 (a hash of the key), or test_values=['2024'] (a column's "
            "value)",
        )
    source.check({c: ("split", _KEY) for c in by})
    if test_fraction is not None:
        frac = float(test_fraction)
        if not 0.0 < frac < 1.0:
            raise _err("test_fraction must lie in (0, 1)", test_fraction, "e.g. 0.2")
        limit = np.uint64(min(int(frac * 2.0**64), 2**64 - 1))
        seed = np.uint64(as_opt_int(seed, "seed") or 0)

        def is_test(batch, offset):
            h = np.full(batch.num_rows, seed, np.uint64)
            for c in by:
                h = _splitmix(h ^ hash_keys(_keys(batch, c, "split", offset, source), int(seed)))
            return h < limit

    else:
        if len(by) != 1:
            raise _err("test_values needs one by column", by, "e.g. by='fold'")
        values = _names(test_values) if isinstance(test_values, str) else list(test_values)
        is_int = _type_class(source.schema.field(by[0]).type) == "integer"
        value_set = pa.array(values).cast(pa.int64() if is_int else pa.large_string())

        def is_test(batch, offset):
            keys = _keys(batch, by[0], "split", offset, source)
            return pc.is_in(keys, value_set=value_set).to_numpy(zero_copy_only=False)

    train = source.filtered(by, lambda b, o: ~is_test(b, o))
    test = source.filtered(by, is_test)
    train.name, test.name = f"{source.name} (train split)", f"{source.name} (test split)"
    return train, test


# ----------------------------------------------------------------------------------------------
# views (multi-view machines): one-hot through vocabularies, or signed hashing

_MASK64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def _splitmix(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def hash_keys(arr, seed: int = 0) -> np.ndarray:
    """uint64 hash of every key of ``arr`` (int64: splitmix64 of the value xor ``seed``;
    strings: FNV-1a of the UTF-8 bytes, then splitmix64; kernel ``kernels.hashing``)."""
    from ooc_lowrank.kernels.hashing import hash_strings

    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if pa.types.is_dictionary(arr.type) and len(arr.dictionary) <= len(arr) and not arr.null_count:
        return hash_keys(arr.dictionary, seed)[arr.indices.to_numpy(zero_copy_only=False)]
    arr = _norm_keys(_decode(arr))
    seed = np.uint64(seed)
    if pa.types.is_integer(arr.type):
        return _splitmix(arr.to_numpy().astype(np.uint64) ^ seed)
    data, offsets = _string_parts(arr)
    out = np.empty(len(arr), np.uint64)
    hash_strings(data, offsets, seed, out)
    return out


def _string_parts(arr) -> tuple[np.ndarray, np.ndarray]:
    """(UTF-8 bytes, offsets ``(n + 1,)``) of a large_string (int64 offsets) or string (int32
    offsets) array, from its buffers."""
    n = len(arr)
    bufs = arr.buffers()
    width = np.int32 if pa.types.is_string(arr.type) else np.int64
    offsets = np.frombuffer(bufs[1], width)[arr.offset : arr.offset + n + 1]
    data = np.frombuffer(bufs[2], np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
    return data, np.ascontiguousarray(offsets)


def _name_seed(name: str) -> int:
    return int(hash_keys(pa.array([name]))[0])


def _parse_views(views) -> dict[str, list[str]]:
    if isinstance(views, str):  # CLI: "user=user_id,age;item=movie_id,genres"
        out = {}
        for i, part in enumerate(p for p in views.split(";") if p.strip()):
            name, _, cols = part.rpartition("=")
            out[name.strip() or f"view{i}"] = _names(cols)
        views = out
    elif not isinstance(views, dict):
        views = {f"view{i}": v for i, v in enumerate(views or [])}
    views = {str(k): _names(v) for k, v in views.items()}
    if not views or not all(views.values()):
        raise _err(
            "views must name at least one view with at least one column",
            views,
            "e.g. views={'user': ['user_id', 'age'], 'item': ['movie_id']} "
            "(CLI --views 'user=user_id,age;item=movie_id')",
        )
    return views


def _csr_summed(rows, cols, vals, n, n_cols, dt):
    """CSR ``(n, n_cols)`` of coordinate entries; repeated (row, col) entries are summed.
    (The bucket sort's kernel: a counting sort by row, then each short row by column.)"""
    from ooc_lowrank.kernels.buckets import sort_bucket

    rows = np.ascontiguousarray(rows, dtype=np.int64)
    ptr = np.empty(n + 1, np.int64)
    perm = np.empty(rows.size, np.int64)
    c = np.empty(rows.size, np.int64)
    sort_bucket(rows, np.ascontiguousarray(cols, dtype=np.int64), n, ptr, perm, c)
    v = vals[perm]
    if c.size > 1:
        new = np.ones(c.size, bool)
        new[1:] = c[1:] != c[:-1]
        new[ptr[1:-1][ptr[1:-1] < c.size]] = True  # a row's first entry
        if not new.all():
            st = np.flatnonzero(new)
            row_of = np.repeat(np.arange(n), np.diff(ptr))[st]
            c, v = c[st], np.add.reduceat(v, st)
            ptr = np.zeros(n + 1, np.int64)
            np.cumsum(np.bincount(row_of, minlength=n), out=ptr[1:])
    return csr_from_parts(ptr, c, v, n_cols, dt)


class _ViewSpec:
    """kind="views": named groups of columns -> csr views ``X0..Xk`` (+ ``y``)."""

    def __init__(
        self,
        src,
        *,
        views,
        numeric,
        min_count,
        other,
        hash_features,
        target,
        row_key,
        dtype,
        vocabulary_from,
    ):
        self.src, self.row_key, self.target = src, row_key, target
        self.dt = as_dtype(dtype)
        self.fixed = vocabulary_from
        self.vocab: dict[str, Vocabulary] = {}
        if vocabulary_from is not None:  # the training store's settings and vocabularies
            from ..storage import open_dataset

            st = open_dataset(getattr(vocabulary_from, "url", vocabulary_from)).attrs.get("views")
            if not st:
                raise _err(
                    "vocabulary_from names a store without views settings",
                    vocabulary_from,
                    "pass the store converted with kind='views'",
                )
            self.views, self.types = st["columns"], st["types"]
            self.min_count, self.other, self.hash = st["min_count"], st["other"], st["hash"]
            for col, name in st["vocabularies"].items():
                self.vocab[col] = Vocabulary(read_vocabulary(vocabulary_from, name))
        else:
            self.views = _parse_views(views)
            self.min_count = as_opt_int(min_count, "min_count", 1) or 1
            self.other = bool(other)
            self.hash = as_opt_int(hash_features, "hash_features", 1)
            numeric = set(_names(numeric))
            schema = src.schema
            self.types = {}
            for cols in self.views.values():
                for c in cols:
                    if c not in schema.names:
                        continue  # src.check names it
                    cls = _type_class(schema.field(c).type)
                    if cls == "float" or (c in numeric and cls in _NUM):
                        self.types[c] = "numeric"
                    elif cls in ("list<integer>", "list<string>", "list<boolean>"):
                        self.types[c] = "multi"
                    else:
                        self.types[c] = "category"
        need = {}
        allowed = {
            "numeric": _NUM,
            "category": _KEY + ("boolean",),
            "multi": ("list<integer>", "list<string>", "list<boolean>"),
        }
        for cols in self.views.values():
            for c in cols:
                t = self.types.get(c, "category")
                need[c] = (f"view ({t})", allowed[t])
        if row_key:
            need[row_key] = ("row key", _KEY)
        if target:
            need[target] = ("target", _NUM)
        src.check(need)
        self.columns = list(need)
        self.dictionary = [c for c, t in self.types.items() if t == "category"]

    def _cat_keys(self, batch, col, offset):
        """(row numbers, keys, rows of the null values) of a category / multi column; a
        category column read dictionary-encoded stays so when its dictionary is no longer than
        the batch (vocabularies and hashes then work on the dictionary)."""
        arr = batch.column(col)
        if isinstance(arr, pa.ChunkedArray):
            arr = arr.combine_chunks()
        if not (
            self.types[col] == "category"
            and pa.types.is_dictionary(arr.type)
            and _type_class(arr.type) == "string"
            and (self.hash is None or len(arr.dictionary) <= len(arr))  # hashes: not cached
        ):
            arr = _decode(arr)
        n = batch.num_rows
        if self.types[col] == "multi":
            lens, flat = _list_parts(arr, col, "view (multi)", offset, self.src)
            rows = np.repeat(np.arange(n), lens)
        else:
            flat, rows = arr, np.arange(n)
        null_rows = rows[:0]
        if flat.null_count:
            ok = flat.is_valid().to_numpy(zero_copy_only=False)
            flat, rows, null_rows = flat.filter(pa.array(ok)), rows[ok], rows[~ok]
        if pa.types.is_boolean(flat.type):
            flat = flat.cast(pa.int64())
        elif pa.types.is_integer(flat.type):
            flat = _norm_keys(flat, col, "view (category)", None, self.src)
        return rows, flat, null_rows

    def _unseen(self, col, keys, miss):
        bad = keys[int(np.flatnonzero(miss)[0])].as_py()
        return _err(
            f"value {bad!r} of column {col!r} is not in the vocabulary of {self.fixed} "
            "(converted with other=False)",
            bad,
            "convert the training table with other=True (an 'other' bucket for rare and "
            "unseen values), or drop such rows",
            self.src.name,
        )

    def validate(self):
        builders = {}
        if self.hash is None and self.fixed is None:
            builders = {c: _VocabBuilder() for c, t in self.types.items() if t != "numeric"}
        offset = 0
        unique = _UniqueKeys(self.src, self.row_key) if self.row_key else None
        for batch in self.src.batches(self.columns, dictionary=self.dictionary):
            if self.row_key:
                unique.add(_keys(batch, self.row_key, "row key", offset, self.src))
            if self.target:
                _values(batch, self.target, "target", offset, self.src)
            for c, t in self.types.items():
                if t == "numeric":
                    _values(batch, c, "view (numeric)", offset, self.src)
                    continue
                _, keys, _ = self._cat_keys(batch, c, offset)
                if c in builders and len(keys):
                    builders[c].add(keys if pa.types.is_dictionary(keys.type) else _norm_keys(keys))
                elif self.fixed is not None and self.hash is None and not self.other:
                    miss = self.vocab[c].index(keys) < 0
                    if miss.any():  # no 'other' bucket: named before anything is written
                        raise self._unseen(c, keys, miss)
            offset += batch.num_rows
        if offset == 0:
            raise _err("the table has no rows", None, "check the source", self.src.name)
        if unique is not None:
            unique.check()
        for c, b in builders.items():
            if b.empty:
                self.vocab[c] = Vocabulary(pa.array([], pa.large_string()))
                continue
            voc, counts = b.finish()
            self.vocab[c] = Vocabulary(voc.keys.filter(pa.array(counts >= self.min_count)))
        # column layout: every column's first column in its view
        self.offset, self.width = {}, {}
        for name, cols in self.views.items():
            o = 0
            for c in cols:
                self.offset[name, c] = o
                if self.hash is None:
                    o += 1 if self.types[c] == "numeric" else len(self.vocab[c]) + self.other
            self.width[name] = self.hash if self.hash is not None else o
        return offset

    def specs(self):
        out = [(f"X{v}", "csr", self.width[name], self.dt) for v, name in enumerate(self.views)]
        if self.target:
            out.append(("y", "dense", 1, np.float64))
        return out

    def outputs(self):
        names = {} if self.hash is not None else {c: f"view{j}" for j, c in enumerate(self.vocab)}
        side = {names[c]: self.vocab[c] for c in names}
        settings = {
            "columns": self.views,
            "types": self.types,
            "min_count": self.min_count,
            "other": self.other,
            "hash": self.hash,
            "vocabularies": names,
        }
        return {"view_names": list(self.views), "views": settings}, side

    def block(self, batch, offset):
        n, b = batch.num_rows, {}
        for v, (name, cols) in enumerate(self.views.items()):
            parts = []
            for c in cols:
                o = self.offset[name, c]
                if self.types[c] == "numeric":
                    val = _values(batch, c, "view (numeric)", offset, self.src)
                    rows = np.flatnonzero(val)
                    val = val[rows]
                    if self.hash is None:
                        idx = np.full(rows.size, o)
                    else:
                        h = hash_keys(pa.array([c]))[0]
                        idx = np.full(rows.size, int(h % np.uint64(self.hash)))
                        val = val * (1.0 if h >> np.uint64(63) else -1.0)
                    parts.append((rows, idx, val))
                    continue
                rows, keys, nulls = self._cat_keys(batch, c, offset)
                if self.hash is not None:  # nulls: no entry
                    h = hash_keys(keys, _name_seed(c))
                    idx = (h % np.uint64(self.hash)).astype(np.int64)
                    val = np.where(h >> np.uint64(63), 1.0, -1.0)
                    parts.append((rows, idx, val))
                    continue
                idx = self.vocab[c].index(keys)
                miss = idx < 0
                if miss.any():
                    if self.other:
                        idx[miss] = len(self.vocab[c])
                    elif self.fixed is not None:  # pragma: no cover - validate() raised
                        raise self._unseen(c, keys, miss)
                    else:  # rare (below min_count) without an 'other' bucket: no entry
                        rows, idx = rows[~miss], idx[~miss]
                if self.other and nulls.size:  # missing values: the 'other' bucket
                    rows = np.concatenate([rows, nulls])
                    idx = np.concatenate([idx, np.full(nulls.size, len(self.vocab[c]))])
                parts.append((rows, idx + o, np.ones(rows.size)))
            b[f"X{v}"] = _csr_summed(
                np.concatenate([p[0] for p in parts]),
                np.concatenate([p[1] for p in parts]),
                np.concatenate([p[2] for p in parts]),
                n,
                self.width[name],
                self.dt,
            )
        if self.target:
            b["y"] = _values(batch, self.target, "target", offset, self.src)[:, None]
        return b


# ----------------------------------------------------------------------------------------------
# public entry points


def convert_table(
    src,
    dest,
    *,
    kind=None,
    row_key=None,
    col_key=None,
    value=None,
    weight=None,
    duplicates="error",
    vocabulary_from=None,
    unseen=None,
    own_rows=False,
    split_by=None,
    test_fraction=None,
    test_values=None,
    split_seed=0,
    test_dest=None,
    feature_columns=None,
    feature_list=None,
    feature_indices=None,
    feature_values=None,
    feature_key=None,
    n_features=None,
    label_list=None,
    labels=None,
    class_column=None,
    views=None,
    numeric=None,
    min_count=1,
    other=True,
    hash_features=None,
    target=None,
    format=None,  # noqa: A002 - the file format's name
    delimiter=None,
    dtype="float64",
    block_rows=None,
    batch_rows=None,
    bucket_nnz=None,
    tmpdir=None,
    overwrite=False,
    progress=None,
):
    """Convert a table (files, Arrow, pandas / Dask DataFrame) to a dataset store.

    Parameters
    ----------
    src : path, URL, glob, list of these, pyarrow.Table / dataset, pandas or Dask DataFrame
        The table (see the module doc).
    dest : str
        Store location (local path or fsspec URL).
    kind : {"interactions", "features", "labels", "views"}
        What the table holds: observed entries, feature rows, label rows, or MVM views.
    row_key : str, optional
        Column of row keys (interactions / long features: required; else optional, stored).
    col_key : str, optional
        interactions: the column key column.
    value : str, optional
        interactions / long features: the value column (default: every entry is 1).
    weight : str, optional
        interactions: a weight column, written as the coo array ``weight``.
    duplicates : {"error", "last", "sum", "mean"}, default "error"
        What to do with repeated (row, column) pairs.
    vocabulary_from : str, optional
        Reuse the vocabularies of this (training) store, so that a test table indexes the same
        columns: interactions / long features: rows and columns; labels: labels and classes.
        A key it lacks is an error (see ``unseen``).
    unseen : {"error", "drop"}, optional
        With ``vocabulary_from`` (or ``labels=``): what to do with a key not in the vocabulary:
        an error naming it, or ``"drop"`` (interactions: the entry is left out and counted in
        the attribute ``dropped_unseen``; labels: the label is left out of the row).  Default
        ``"error"``, and ``"drop"`` for the test side of a split.  (Views have the 'other'
        bucket instead; an unseen class is always an error.)
    own_rows : bool, default False
        interactions / long features with ``vocabulary_from``: reuse only the column
        vocabulary; the rows get their own sorted vocabulary (new rows, e.g. cold-start users
        for IMC).  Set for the test side of a split by the row key.
    split_by : str or list of str, optional
        Split the table into a train store (``dest``) and a test store (``test_dest``) by
        these key columns (see :func:`split_table`): the train table is converted first, then
        the test table with ``vocabulary_from=dest`` (its columns, labels, classes and view
        vocabularies are the training ones) and ``unseen="drop"`` unless given.
    test_fraction : float in (0, 1), optional
        Split: the fraction of the hash range of the ``split_by`` values going to test (the
        same key goes to the same side in every table split with the same ``split_seed``).
    test_values : list or comma-separated str, optional
        Split instead by value: rows whose ``split_by`` value is one of these go to test.
    split_seed : int, default 0
        Split: the seed of the key hash.
    test_dest : str, optional
        Split: the test store's location.
    feature_columns : list of str or comma-separated str, optional
        features: numeric columns -> dense X, in this order.
    feature_list : str, optional
        features: a fixed-length list column -> dense X.
    feature_indices : str, optional
        features: a list column of 0-based feature indices -> csr X.
    feature_values : str, optional
        features: the list column of values matching ``feature_indices`` (default ones).
    feature_key : str, optional
        features, long table ``(row_key, feature_key, value)``: the feature key column.
    n_features : int, optional
        features with ``feature_indices``: the number of columns (default largest index + 1).
    label_list : str, optional
        labels: a list column of label keys -> Y.
    labels : list or comma-separated str, optional
        labels: the label vocabulary in column order (default: the sorted distinct labels).
    class_column : str, optional
        labels: a class column -> y.
    views : dict or str, optional
        views: ``{name: [columns]}``, one csr view ``X0, X1, ...`` each (CLI
        ``"user=user_id,age;item=movie_id,genres"``).  Float columns (and those in
        ``numeric``) are values; integer, string, boolean and dictionary columns are
        categories (one-hot); list columns multi-hot.
    numeric : list or comma-separated str, optional
        views: integer columns to take as values, not categories.
    min_count : int, default 1
        views: categories seen fewer times go to the 'other' bucket (or get no entry).
    other : bool, default True
        views: one 'other' column per categorical column, for rare, missing (null) and
        unseen values; without it a test table's unseen value is an error.
    hash_features : int, optional
        views: signed hashing into this many columns per view instead of vocabularies.
    target : str, optional
        views: a numeric column -> y.
    format : {"parquet", "csv"}, optional
        File format (default from the extension).
    delimiter : str, optional
        CSV separator.
    dtype : {"float64", "float32"}, default "float64"
        Dtype of the values / features.
    block_rows : int, optional
        Rows per stored block (default: the writer's choice).
    batch_rows : int, optional
        Rows read at once (default 2**18).
    bucket_nnz : int, optional
        interactions: entries per external-sort bucket (default 2**21, 64 MB while sorting).
    tmpdir : path, optional
        Where spill and vocabulary files go (default: the system temporary folder).
    overwrite : bool, default False
        Replace an existing store at ``dest``.
    progress : callable(rows_done) or None
        Called after every written block.

    Returns
    -------
    dest : str
    """
    if split_by is not None or test_dest is not None:
        return _convert_split(
            src,
            dest,
            test_dest,
            split_by,
            dict(test_fraction=test_fraction, test_values=test_values, seed=split_seed),
            {k: v for k, v in locals().items() if k in _OPTIONS},
        )
    # column names given on the command line may arrive as numbers ("--value 3")
    row_key, col_key, value, weight = map(_colname, (row_key, col_key, value, weight))
    feature_list, feature_indices = map(_colname, (feature_list, feature_indices))
    feature_values, feature_key = map(_colname, (feature_values, feature_key))
    label_list, class_column, target = map(_colname, (label_list, class_column, target))
    if kind not in KINDS:
        raise _err(
            "kind must be one of " + ", ".join(KINDS),
            kind,
            "e.g. kind='interactions' (CLI --kind interactions)",
        )
    unseen = "error" if unseen is None else str(unseen).strip().lower()
    if unseen not in ("error", "drop"):
        raise _err("unseen must be 'error' or 'drop'", unseen, "e.g. unseen='drop'")
    source = as_source(src, format=format, batch_rows=batch_rows, delimiter=delimiter)
    block_rows = as_opt_int(block_rows, "block_rows", 1)
    bucket_nnz = as_opt_int(bucket_nnz, "bucket_nnz", 1) or DEFAULT_BUCKET_NNZ
    attrs = {"source_format": source.format or "table", "source": source.name[:500], "kind": kind}
    common = dict(block_rows=block_rows, tmpdir=tmpdir, overwrite=overwrite, progress=progress)
    if kind == "interactions" or (kind == "features" and feature_key is not None):
        feat = kind == "features"
        other = feature_key if feat else col_key
        if row_key is None or other is None:
            raise _err(
                f"kind={kind!r} needs row_key and {'feature_key' if feat else 'col_key'}",
                (row_key, other),
                "name the key columns, e.g. row_key='user_id', col_key='movie_id'",
            )
        return _convert_pairs(
            source,
            dest,
            row=row_key,
            col=other,
            value=value,
            weight=weight,
            duplicates=duplicates,
            vocabulary_from=vocabulary_from,
            unseen=unseen,
            own_rows=bool(own_rows),
            dtype=dtype,
            array="X" if feat else "obs",
            kind="csr" if feat else "coo",
            roles=("row", "feature" if feat else "column"),
            attrs=attrs,
            bucket_nnz=bucket_nnz,
            **common,
        )
    if kind == "views":
        spec = _ViewSpec(
            source,
            views=views,
            numeric=numeric,
            min_count=min_count,
            other=other,
            hash_features=hash_features,
            target=target,
            row_key=row_key,
            dtype=dtype,
            vocabulary_from=vocabulary_from,
        )
        if batch_rows is None:  # wide tables: about 2**22 values per batch (memory)
            n_values = max(len(spec.columns), 1)
            source.batch_rows = max(1 << 12, min(DEFAULT_BATCH_ROWS, VIEW_BATCH_VALUES // n_values))
        return _convert_rows(spec, dest, attrs=attrs, **common)
    spec = _RowSpec(
        source,
        row_key=row_key,
        feature_columns=feature_columns,
        feature_list=feature_list,
        feature_indices=feature_indices,
        feature_values=feature_values,
        n_features=n_features,
        label_list=label_list,
        labels=labels,
        class_column=class_column,
        dtype=dtype,
        vocabulary_from=vocabulary_from,
        unseen=unseen,
    )
    has_x = bool(spec.fcols or spec.flist or spec.find)
    has_y = bool(spec.llist or spec.ccol)
    if sum(map(bool, (spec.fcols, spec.flist, spec.find))) > 1 or (spec.llist and spec.ccol):
        raise _err(
            "give one feature source (feature_columns, feature_list or feature_indices) "
            "and one label source (label_list or class_column)",
            None,
        )
    if (kind == "features" and not has_x) or (kind == "labels" and not has_y):
        raise _err(
            f"kind={kind!r} needs "
            + (
                "feature_columns, feature_list, feature_indices or feature_key"
                if kind == "features"
                else "label_list or class_column"
            ),
            None,
            "name the column(s) holding them",
        )
    return _convert_rows(spec, dest, attrs=attrs, **common)


#: convert_table's options handed on to the two conversions of a split.
_OPTIONS = (
    "kind row_key col_key value weight duplicates vocabulary_from unseen own_rows "
    "feature_columns feature_list feature_indices feature_values feature_key n_features "
    "label_list labels class_column views numeric min_count other hash_features target dtype "
    "format delimiter batch_rows block_rows bucket_nnz tmpdir overwrite progress"
).split()


def _convert_split(src, dest, test_dest, by, split, options):
    """``convert_table(split_by=...)``: train to ``dest``, then test with its vocabularies."""
    from ..storage import _remove

    if by is None or test_dest is None:
        raise _err(
            "a split needs split_by and test_dest",
            (by, test_dest),
            "e.g. split_by='user_id', test_fraction=0.2, test_dest='test.zarr' (CLI "
            "--split-by user_id --test-fraction 0.2 --test-dest test.zarr)",
        )
    if os.fspath(test_dest) == os.fspath(dest):
        raise _err("test_dest must differ from dest", test_dest, "name another store")
    fmt = {k: options.pop(k) for k in ("format", "batch_rows", "delimiter") if k in options}
    train, test = split_table(src, by, **split, **fmt)
    convert_table(train, dest, **options)
    kind, row_key = options.get("kind"), options.get("row_key")
    pairs = kind == "interactions" or (kind == "features" and options.get("feature_key"))
    test_options = dict(
        options,
        vocabulary_from=dest,
        unseen=options.get("unseen") or "drop",
        own_rows=bool(options.get("own_rows") or (pairs and _names(by) == [str(row_key)])),
    )
    try:
        convert_table(test, test_dest, **test_options)
    except BaseException:
        _remove(os.fspath(dest))  # no half split left behind
        raise
    return dest


def _file_converter(fmt):
    """``convert_parquet`` / ``convert_csv``: :func:`convert_table` with ``format`` fixed (same
    signature and docstring, so ``convert()`` and the CLI's ``--help`` list every option)."""

    def convert(srcs, dest, **options):
        return convert_table(srcs, dest, format=fmt, **options)

    sig = inspect.signature(convert_table)
    convert.__signature__ = sig.replace(
        parameters=[p for name, p in sig.parameters.items() if name != "format"]
    )
    convert.__name__ = convert.__qualname__ = f"convert_{fmt}"
    convert.__doc__ = (
        f"Convert {fmt} files (a file, a directory, a glob, ``s3://...``) to a store.\n"
        + (convert_table.__doc__ or "").split("\n", 1)[-1]
    )
    return convert


convert_parquet = _file_converter("parquet")
convert_csv = _file_converter("csv")


# ----------------------------------------------------------------------------------------------
# keys back out


def _vocab_or_none(url, name):
    from ..storage import StoreError

    try:
        return read_vocabulary(url, name)
    except StoreError:
        return None


def _write_keyed(dest, chunks, rvoc, cvoc) -> str:
    """Stream ``(rows, indices, scores)`` chunks to a Parquet file ``row_key, rank, key, score``;
    a vocabulary that is None leaves the indices as they are."""
    path, fs = os.fspath(dest), None
    if "://" in path and not path.startswith("file://"):
        import fsspec.core

        fs, path = fsspec.core.url_to_fs(path)
    writer = None
    try:
        for rows, indices, scores in chunks:
            n, k = indices.shape
            r = pa.array(np.repeat(np.asarray(rows, dtype=np.int64), k))
            c = pa.array(indices.ravel())
            t = pa.table(
                {
                    "row_key": rvoc.take(r) if rvoc is not None else r,
                    "rank": pa.array(np.tile(np.arange(1, k + 1, dtype=np.int32), n)),
                    "key": cvoc.take(c.cast(pa.int64())) if cvoc is not None else c,
                    "score": pa.array(np.asarray(scores, dtype=np.float64).ravel()),
                }
            )
            if writer is None:
                writer = pq.ParquetWriter(path, t.schema, filesystem=fs)
            writer.write_table(t)
    finally:
        if writer is not None:
            writer.close()
    return os.fspath(dest)


def topk_to_parquet(dest, indices, scores, *, store, rows=None, columns="cols", chunk_rows=1 << 16):
    """Write top-k predictions as Parquet with the user's keys.

    Parameters
    ----------
    dest : path or URL
        The Parquet file written: columns ``row_key``, ``rank`` (1 = best), ``key``,
        ``score``, one row per (row, rank).
    indices : ndarray of shape (n_rows_asked, k), int
        Column (or label) indices, e.g. from ``GreedyLowRank.top_k`` or ``predict_topk``.
    scores : ndarray of shape (n_rows_asked, k)
        Their scores.
    store : str or Dataset
        The converted (training) store holding the vocabularies.
    rows : ndarray of shape (n_rows_asked,), optional
        Row indices the predictions belong to (default ``0..n_rows_asked-1``).
    columns : {"cols", "labels", "classes"}, default "cols"
        Which vocabulary names the indices.
    chunk_rows : int
        Rows of predictions written at a time.

    Returns
    -------
    dest : str
        Row keys are the row indices when the store has no row vocabulary.
    """
    indices = np.asarray(indices)
    scores = np.asarray(scores)
    if indices.ndim != 2 or scores.shape != indices.shape:
        raise _err(
            "indices and scores must be two arrays of one shape (n_rows, k)",
            (indices.shape, scores.shape),
        )
    n = indices.shape[0]
    rows = np.arange(n) if rows is None else np.asarray(rows, dtype=np.int64)
    if rows.shape != (n,):
        raise _err("rows must have one entry per row of indices", rows.shape)
    url = getattr(store, "url", store)
    cvoc = read_vocabulary(url, columns)
    rvoc = _vocab_or_none(url, "rows")
    if indices.size and (indices.min() < 0 or indices.max() >= len(cvoc)):
        raise _err(
            f"indices must lie in [0, {len(cvoc)}) (the {columns} vocabulary)", int(indices.max())
        )
    chunks = (
        (rows[s : s + chunk_rows], indices[s : s + chunk_rows], scores[s : s + chunk_rows])
        for s in range(0, n, chunk_rows)
    )
    return _write_keyed(dest, chunks, rvoc, cvoc)


def predictions_to_parquet(predictions, store, dest) -> str:
    """A prediction store (``labels``, ``scores``; as ``predict --top-k`` writes) to Parquet
    with the keys of ``store`` (the converted table the predictions are for, whose label
    vocabulary is the training one: convert it with ``labels=`` or ``vocabulary_from=``).

    Label keys come from its ``labels`` vocabulary (multi-label), or ``classes`` (class names;
    the predicted values are their ranks), else the predicted values are written as they are;
    row keys from its ``rows`` vocabulary, else the row numbers.  Read block by block.
    """
    from ..storage import open_dataset

    pred = open_dataset(predictions) if isinstance(predictions, (str, os.PathLike)) else predictions
    url = getattr(store, "url", store)
    n = open_dataset(url).n_rows
    if pred.n_rows != n:
        raise _err(
            f"the predictions have {pred.n_rows} rows, the store {n}",
            pred.n_rows,
            "pass the store the predictions were made for",
        )
    rvoc = _vocab_or_none(url, "rows")
    cvoc = _vocab_or_none(url, "labels")
    if cvoc is None:
        cvoc = _vocab_or_none(url, "classes")

    def chunks():
        scores = pred["scores"].iter_blocks()
        for (s, e, lab), (_, _, sc) in zip(pred["labels"].iter_blocks(), scores, strict=True):
            yield np.arange(s, e), (lab.astype(np.int64) if cvoc is not None else lab), sc

    return _write_keyed(dest, chunks(), rvoc, cvoc)
