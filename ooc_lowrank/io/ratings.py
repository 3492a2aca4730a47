"""Observed-entry files (MovieLens ratings, SNAP signed edge lists) to a COO dataset.

Inputs, one observation per line:

* MovieLens 100K ``u.data`` / ``u1.base`` ...: ``user<TAB>item<TAB>rating<TAB>timestamp``;
  ML-1M/10M ``ratings.dat``: ``user::item::rating::timestamp``.  Ids are 1-based.
* SNAP signed networks (``soc-sign-epinions.txt``...): ``# `` comment lines, then
  ``from<TAB>to<TAB>sign`` with 0-based node ids and sign in {-1, +1}.

Output: one array ``"obs"`` of kind ``coo`` with shape ``(n_rows, n_cols)`` (users x items, or
source x target nodes), entries sorted by row (within a row: file order), 0-based ids,
value = rating or sign.  Duplicate ``(row, col)`` pairs are kept as written.  Columns after the
third (timestamps) are ignored.

Without ``shape=``, the matrix is as large as the largest ids, which must be plausible: each
dimension (largest id + 1) at most ``max(2**20, 100 x number of entries)`` and below
``2**31 - 1``.  A larger id raises :class:`ConversionError` naming the file, the line and the
id; pass ``shape=`` (CLI ``--shape ROWS,COLS``) when such ids are intended.

Sorting by row in bounded memory is an external bucket sort:

1. a validating scan counts the entries of every row (memory: one int64 per row);
2. rows are cut into consecutive ranges ("buckets") holding at most ``bucket_nnz`` entries each
   (a single row with more entries forms its own bucket);
3. a second pass appends every parsed chunk's entries to one binary spill file per bucket
   (``tmpdir``), so nothing but one chunk is in memory;
4. each bucket is loaded, stably sorted by row, and appended to the store in row order.

Peak memory is about ``chunk_bytes`` of text + one bucket (``bucket_nnz`` x 24 bytes, twice while
sorting) + one row block in the writer + 8 bytes per row; the spill files take 24 bytes per
entry on disk and are removed afterwards.
"""

from __future__ import annotations

import os

import numpy as np

from ._common import (
    ConversionError,
    RowBuckets,
    as_opt_int,
    as_shape,
    bucket_starts,
    converter,
    csr_from_parts,
    diagnose_lines,
    fields_per_line,
    float_token,
    int_token,
    iter_rows,
    open_text,
    parse_numbers,
)

__all__ = ["convert_movielens", "convert_snap"]

#: Default number of entries per sort bucket (24 bytes each on disk and in memory).
DEFAULT_BUCKET_NNZ = 1 << 21
#: Without ``shape=``, a dimension inferred from the largest id may be at most
#: ``max(ID_FLOOR, ID_FACTOR x entries)`` and below ``2**31 - 1``: a larger id is almost
#: always a typo (4e9 would ask for 30 GiB of row counters, 1e8 write an 800 MB index).
ID_FLOOR = 1 << 20
ID_FACTOR = 100
_ID_HARD = 2**31 - 1
_REC = np.dtype([("row", "<i8"), ("col", "<i8"), ("val", "<f8")])


def _diagnose(path, nums, texts, min_fields, offset, signs):
    def check_line(lineno, t):
        parts = t.split()
        if len(parts) < min_fields:
            raise ConversionError(
                path,
                lineno,
                f"expected at least {min_fields} fields (row id, column id, value)",
                t[:80],
                "the line may be truncated or use another separator",
            )
        for what, tok in (("row id", parts[0]), ("column id", parts[1])):
            v = int_token(path, lineno, tok, what)
            if v < offset:
                raise ConversionError(
                    path,
                    lineno,
                    f"{what} must be >= {offset} ({'1' if offset else '0'}-based ids)",
                    v,
                    "check one_based=",
                )
        v = float_token(path, lineno, parts[2], "value")
        if signs and v not in (-1.0, 1.0):
            raise ConversionError(path, lineno, "edge sign must be -1 or +1", parts[2])
        for tok in parts[3:]:
            float_token(path, lineno, tok, "extra field (timestamp)")

    diagnose_lines(
        path,
        nums,
        texts,
        check_line,
        "inconsistent number of fields near this line",
        "every line must have the same number of fields",
    )


def _parse(path, nums, texts, offset, signs):
    """-> (row, col, value) arrays of a chunk (0-based ids), validated."""
    n = len(texts)
    flat = None
    text = "\n".join(texts)
    if "::" in text:  # ML-1M/10M ratings.dat
        text = text.replace("::", "\t")
        texts = [t.replace("::", "\t") for t in texts]
    k = len(texts[0].split())
    if k >= 3:
        flat = parse_numbers(text, " ", n * k)
    if flat is None or (fields_per_line(text, n) != k).any():
        _diagnose(path, nums, texts, 3, offset, signs)
    m = flat.reshape(n, k)
    r, c, v = m[:, 0], m[:, 1], m[:, 2]
    bad = (
        ~np.isfinite(m).all(axis=1)
        | (r != np.floor(r))
        | (c != np.floor(c))
        | (r < offset)
        | (c < offset)
    )
    if signs:
        bad |= (v != 1.0) & (v != -1.0)
    if bad.any():
        i = int(np.argmax(bad))
        _diagnose(path, nums[i : i + 1], texts[i : i + 1], 3, offset, signs)
    return r.astype(np.int64) - offset, c.astype(np.int64) - offset, v.copy()


def _implausible_id(what, mx, where, offset, nnz, bound):
    path, line = where
    rule = (
        f"{what} id {mx + offset} is beyond 2**31 - 1"
        if bound is None
        else f"{what} id {mx + offset} is implausibly large for {nnz} entries without shape= "
        f"(an inferred dimension may be at most max(2**20, {ID_FACTOR} x entries) = {bound})"
    )
    raise ConversionError(
        path,
        line,
        rule,
        mx + offset,
        "fix the id on this line if it is a typo; if the ids are right, pass the matrix size "
        "explicitly: shape=(rows, cols) (CLI: --shape ROWS,COLS)",
    )


def _chunks(srcs, chunk_bytes, offset, signs, comment):
    for path in srcs:
        with open_text(path) as f:
            for nums, texts in iter_rows(path, f, chunk_bytes, comment):
                if texts:
                    yield path, nums, _parse(path, nums, texts, offset, signs)


def _convert(srcs, dest, opts, *, fmt, offset, signs, comment, shape, bucket_nnz, tmpdir, square):
    shape = as_shape(shape)
    dt, chunk_bytes = opts.dtype, opts.chunk_bytes
    bucket_nnz = as_opt_int(bucket_nnz, "bucket_nnz", 1) or DEFAULT_BUCKET_NNZ

    # pass 1: validate, count entries per row, find the largest ids.  Without shape=, the
    # per-row counters grow only up to the plausible bound of the entries seen so far; rows
    # beyond it are counted sparsely until the final bound is known (no 30 GiB allocation
    # for one typo'd id before it can be reported).
    counts = np.zeros(shape[0] if shape else 1024, dtype=np.int64)
    overflow = []
    max_r = max_c = -1
    where_r = where_c = None
    nnz = 0
    for path, nums, (r, c, _) in _chunks(srcs, chunk_bytes, offset, signs, comment):
        if r.size == 0:
            continue
        nnz += r.size
        ir, ic = int(np.argmax(r)), int(np.argmax(c))
        if r[ir] > max_r:
            max_r, where_r = int(r[ir]), (path, nums[ir])
        if c[ic] > max_c:
            max_c, where_c = int(c[ic]), (path, nums[ic])
        if not shape:
            for what, mx, where in (("row", max_r, where_r), ("column", max_c, where_c)):
                if mx >= _ID_HARD:
                    _implausible_id(what, mx, where, offset, nnz, None)
            cap = max(ID_FLOOR, ID_FACTOR * nnz)
            big = r >= cap
            if big.any():
                overflow.append(np.unique(r[big], return_counts=True))
                r = r[~big]
                if r.size == 0:
                    continue
            max_small = int(r.max())
            if max_small >= counts.size:
                new = min(max(max_small + 1, 2 * counts.size), cap)
                counts = np.concatenate([counts, np.zeros(new - counts.size, np.int64)])
            counts += np.bincount(r, minlength=counts.size)
            continue
        if shape and max_r >= shape[0]:
            raise ConversionError(
                *where_r,
                f"row id out of range for shape={shape}",
                max_r + offset,
                "pass a larger shape= or omit it",
            )
        if shape and max_c >= shape[1]:
            raise ConversionError(
                *where_c,
                f"column id out of range for shape={shape}",
                max_c + offset,
                "pass a larger shape= or omit it",
            )
        if max_r >= counts.size:
            counts = np.concatenate(
                [counts, np.zeros(max(max_r + 1, 2 * counts.size) - counts.size, np.int64)]
            )
        counts += np.bincount(r, minlength=counts.size)
    if not shape:
        bound = max(ID_FLOOR, ID_FACTOR * nnz)
        for what, mx, where in (("row", max_r, where_r), ("column", max_c, where_c)):
            if mx + 1 > bound:
                _implausible_id(what, mx, where, offset, nnz, bound)
    if shape:
        n_rows, n_cols = shape
    elif square:
        n_rows = n_cols = max(max_r, max_c) + 1
    else:
        n_rows, n_cols = max_r + 1, max_c + 1
    if n_rows > counts.size:
        counts = np.concatenate([counts, np.zeros(n_rows - counts.size, np.int64)])
    counts = counts[:n_rows]
    for rows_u, cnt in overflow:
        np.add.at(counts, rows_u, cnt)
    if nnz == 0 and not shape:
        raise ConversionError(
            srcs[0],
            None,
            "no observations found (empty file?)",
            None,
            "pass shape=(rows, cols) to write an empty matrix",
        )

    starts = bucket_starts(counts, bucket_nnz)

    attrs = {
        "source_format": fmt,
        "source_files": [os.path.basename(p) for p in srcs],
        "one_based": bool(offset),
        "shape": [int(n_rows), int(n_cols)],
    }
    from ooc_lowrank.storage import scratch_dir  # storage layer; imported lazily

    # the spill folder goes away on success, errors and SIGTERM; after a SIGKILL the next
    # conversion removes it (its name carries the pid)
    with scratch_dir("ooc_lowrank_sort_", tmpdir) as tmp:
        # pass 2: spill every entry to its bucket file
        buckets = RowBuckets(tmp, starts, _REC)
        for _, _, (r, c, v) in _chunks(srcs, chunk_bytes, offset, signs, comment):
            rec = np.empty(r.size, dtype=_REC)
            rec["row"], rec["col"], rec["val"] = r, c, v
            buckets.spill(rec)
            del rec

        def blocks():
            for bi in range(len(buckets)):
                r0, r1 = int(starts[bi]), int(starts[bi + 1])
                rec = buckets.load(bi)
                ptr = np.zeros(r1 - r0 + 1, np.int64)
                np.cumsum(counts[r0:r1], out=ptr[1:])
                yield {"obs": csr_from_parts(ptr, rec["col"], rec["val"], n_cols, dt)}

        return opts.write(dest, [("obs", "coo", n_cols, dt)], blocks(), attrs)


#: the ratings converters' own option entries (the shared ones come from ``converter``)
_RATINGS_DOCS = {
    "shape": "shape : (int, int) or str, optional\n"
    "    ``(n_rows, n_cols)`` of the observed matrix; ids must be below it.  Default: the\n"
    "    largest ids in the files + 1.  Give it to make separately converted files (train/test)\n"
    "    index the same matrix, e.g. ``shape=(943, 1682)`` for MovieLens 100K.",
    "chunk_bytes": "chunk_bytes : int, optional\n    Text parsed at once (default 1 MiB).",
    "bucket_nnz": "bucket_nnz : int, optional\n"
    "    Entries per external-sort bucket (default 2**21, about 48 MB while sorting).",
    "tmpdir": "tmpdir : path, optional\n"
    "    Where the spill files go (default: the system temporary folder).",
}
_OPTIONS = (
    "shape",
    "dtype",
    "block_rows",
    "chunk_bytes",
    "bucket_nnz",
    "tmpdir",
    "overwrite",
    "progress",
)


@converter("movielens", *_OPTIONS, dtype_of="the values", own=_RATINGS_DOCS)
def convert_movielens(
    srcs, dest, opts, *, shape=None, one_based=True, bucket_nnz=None, tmpdir=None
):
    """Convert MovieLens rating files (``u.data``, ``u1.base``, ``ratings.dat``) to ``"obs"``.

    Several files are merged into one matrix (entries of each row in file order).

    Parameters
    ----------
    srcs : path or list of paths
        Plain or gzip files; fields separated by tabs/spaces or ``::``.
    dest : str
        Store location handed to ``DatasetWriter``.
    one_based : bool, default True
        Ids in the file start at 1 (MovieLens); they are stored 0-based.
    """
    return _convert_ratings("movielens", locals(), signs=False)


@converter("snap", *_OPTIONS, dtype_of="the values", own=_RATINGS_DOCS)
def convert_snap(
    srcs, dest, opts, *, shape=None, square=True, one_based=False, bucket_nnz=None, tmpdir=None
):
    """Convert SNAP signed edge lists (``from to sign``, ``#`` comments) to ``"obs"``.

    Rows are source nodes, columns target nodes; values are the signs (-1/+1; anything else is
    an error).  Self-loops and repeated edges are kept.  Without ``shape`` the matrix is the
    square adjacency ``(n, n)`` with ``n`` = largest node id + 1 (``square=False``: rows and
    columns sized separately from the largest source / target ids).

    Parameters
    ----------
    srcs : path or list of paths
        Plain or gzip edge lists.
    dest : str
        Store location handed to ``DatasetWriter``.
    square : bool, default True
        Size rows and columns alike (nodes are both sources and targets).
    one_based : bool, default False
        SNAP ids are 0-based.
    """
    return _convert_ratings("snap", locals(), signs=True)


def _convert_ratings(fmt, args, *, signs):
    """Run ``_convert`` with a public converter's arguments ``args`` (its ``locals()``)."""
    offset = 1 if _bool(args["one_based"]) else 0
    square = _bool(args["square"]) if "square" in args else False
    return _convert(
        args["srcs"],
        args["dest"],
        args["opts"],
        fmt=fmt,
        offset=offset,
        signs=signs,
        comment="#",
        **{k: args[k] for k in ("shape", "bucket_nnz", "tmpdir")},
        square=square,
    )


def _bool(v):
    if isinstance(v, str):
        s = v.strip().lower()
        if s in ("1", "true", "yes", "on"):
            return True
        if s in ("0", "false", "no", "off"):
            return False
        raise ConversionError(None, None, "option one_based= must be true or false", v)
    return bool(v)
