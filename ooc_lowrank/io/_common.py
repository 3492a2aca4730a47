"""Shared plumbing of the converters: opening files, chunked line reading, errors, writing.

Every converter is a two-stage pipeline:

1. a *parser* that reads the source in bounded chunks (``chunk_bytes`` of text at a time) and
   yields row blocks as ``dict(name -> numpy array | scipy.sparse.csr_matrix)``;
2. :func:`write_blocks`, which appends those blocks to :class:`ooc_lowrank.storage.DatasetWriter`
   (the writer buffers them and cuts them into its own row blocks of ``block_rows`` rows).

The text converters never hold more than one chunk of text plus one row block of parsed values
(the writer adds its own row-block buffer); ``mat`` is the exception, see its module doc.
"""

from __future__ import annotations

import gzip
import inspect
import io
import logging
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, NamedTuple

import numpy as np
import scipy.sparse as sp

from ooc_lowrank._signature import keyword_options, with_signature

logger = logging.getLogger("ooc_lowrank")

#: Default amount of source text parsed at once (characters).  Parsing creates a few Python objects
#: per line and ~16 bytes of numpy arrays per number: peak transient memory is a small multiple.
DEFAULT_CHUNK_BYTES = 1 << 20


class ConversionError(ValueError):
    """A source file cannot be converted: malformed, inconsistent, or an invalid option.

    The message names the file, the line number (when there is one), the rule broken, the value
    found and how to fix it.  Subclass of :class:`ValueError`.
    """

    def __init__(self, path, line, rule, value=None, fix=None):
        self.path, self.line, self.rule, self.value, self.fix = path, line, rule, value, fix
        where = f"{os.fspath(path)}" if path is not None else ""
        if line is not None:
            where += f", line {line}"
        msg = f"{where}: {rule}" if where else rule
        if value is not None:
            msg += f" (got {value!r})"
        if fix:
            msg += f". Fix: {fix}"
        super().__init__(msg)


# ----------------------------------------------------------------------------------------------
# files


def open_text(path) -> io.TextIOBase:
    """Open a local text file for reading; gzip is detected from the magic bytes, not the name."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise ConversionError(
            path, None, "source file does not exist", fix="check the path (sources are local files)"
        )
    if os.path.isdir(path):
        raise ConversionError(path, None, "source is a directory, expected a file")
    with open(path, "rb") as f:
        magic = f.read(2)
    if magic == b"\x1f\x8b":
        raw = gzip.open(path, "rb")
    else:
        raw = open(path, "rb")  # noqa: SIM115 - wrapped and closed by the caller
    return io.TextIOWrapper(raw, encoding="utf-8", errors="replace", newline=None)


def iter_lines(path, f) -> Iterator[tuple[int, str]]:
    """Yield ``(line_number, line)`` from an open text file; turns gzip truncation into errors."""
    lineno = 0
    try:
        for lineno, line in enumerate(f, 1):  # noqa: B007
            yield lineno, line
    except EOFError as e:  # gzip stream cut short
        raise ConversionError(
            path,
            lineno + 1,
            "the file is truncated (compressed stream ended before its end-of-stream marker)",
            str(e),
            "re-download or re-compress the file",
        ) from None
    except (OSError, gzip.BadGzipFile) as e:
        raise ConversionError(path, lineno + 1, "the file cannot be read", str(e)) from None


def iter_rows(
    path,
    f,
    chunk_bytes: int,
    comment: str | None = None,
    first_lineno: int = 1,
) -> Iterator[tuple[Sequence[int], list[str]]]:
    """Read ``f`` in blocks of about ``chunk_bytes`` characters of whole lines.

    Yields ``(line_numbers, texts)``: the stripped non-empty lines of the block (text after a
    ``comment`` marker removed) and their 1-based line numbers.  Never holds more than one block.
    """
    carry = ""
    lineno = first_lineno
    while True:
        try:
            data = f.read(chunk_bytes)
        except EOFError as e:  # gzip stream cut short
            raise ConversionError(
                path,
                lineno,
                "the file is truncated (compressed stream ended before its end-of-stream marker)",
                str(e),
                "re-download or re-compress the file",
            ) from None
        except (OSError, gzip.BadGzipFile) as e:
            raise ConversionError(path, lineno, "the file cannot be read", str(e)) from None
        if not data:
            break
        data = carry + data
        cut = data.rfind("\n")
        if cut < 0:
            carry = data
            continue
        lines = data[:cut].split("\n")
        carry = data[cut + 1 :]
        yield _rows(lines, lineno, comment)
        lineno += len(lines)
    if carry:
        yield _rows([carry], lineno, comment)


def _rows(lines: list[str], first: int, comment: str | None):
    if comment is not None:
        lines = [ln.split(comment, 1)[0] if comment in ln else ln for ln in lines]
    texts = [ln.strip() for ln in lines]
    if all(texts):
        return range(first, first + len(texts)), texts
    return [i for i, t in enumerate(texts, first) if t], [t for t in texts if t]


def parse_numbers(text: str, sep: str, expected: int | None = None) -> np.ndarray | None:
    """Fast C parse of separator-delimited floats; ``None`` when the text is not exactly numbers.

    The caller falls back to a slow per-line parser to locate and describe the error.
    """
    try:
        out = np.fromstring(text, dtype=np.float64, sep=sep)
    except ValueError:
        return None
    if expected is not None and out.size != expected:
        return None
    return out


def fields_per_line(text: str, n_lines: int) -> np.ndarray:
    """Number of whitespace-separated fields on each of the ``n_lines`` lines of ``text``.

    ``text`` is the chunk's lines joined with ``"\\n"``; vectorised over the bytes.
    """
    b = np.frombuffer(text.encode("utf-8", "replace"), dtype=np.uint8)
    nl = b == 10
    sep = nl | (b == 32) | (b == 9) | (b == 13) | (b == 11) | (b == 12)
    start = ~sep
    start[1:] &= sep[:-1]
    line = np.cumsum(nl)
    return np.bincount(line[start], minlength=n_lines)[:n_lines]


def float_token(path, lineno, tok: str, what: str) -> float:
    """Parse one number for the slow (diagnostic) paths, with a clear error."""
    try:
        v = float(tok)
    except ValueError:
        raise ConversionError(
            path, lineno, f"{what} is not a number", tok, "fix or remove the line"
        ) from None
    if not np.isfinite(v):
        raise ConversionError(
            path,
            lineno,
            f"{what} must be finite (NaN/inf are not allowed)",
            tok,
            "impute or drop NaN/inf values before converting",
        )
    return v


def diagnose_lines(path, nums, texts, check_line, rule, fix=None):
    """The slow path of a text chunk the fast (vectorised) parse refused: ``check_line(lineno,
    text)`` on each line raises the first line's :class:`ConversionError`; when every line
    passes on its own (the lines disagree with each other), the chunk is refused at its first
    line with ``rule`` and ``fix``."""
    for lineno, text in zip(nums, texts, strict=True):
        check_line(lineno, text)
    raise ConversionError(path, nums[0] if nums else None, rule, None, fix)


def int_token(path, lineno, tok: str, what: str) -> int:
    """Parse one integer index for the slow (diagnostic) paths, with a clear error."""
    try:
        return int(tok)
    except ValueError:
        try:
            v = float(tok)
        except ValueError:
            v = None
        if v is not None and np.isfinite(v) and v == int(v):
            return int(v)
        raise ConversionError(
            path, lineno, f"{what} must be an integer", tok, "fix or remove the line"
        ) from None


# ----------------------------------------------------------------------------------------------
# options given as strings by the CLI


def as_bool_or_auto(value, name: str):
    """``True`` / ``False`` / ``"auto"`` from a bool, ``None`` or a CLI string."""
    if value is None or isinstance(value, bool):
        return "auto" if value is None else value
    s = str(value).strip().lower()
    if s in ("auto", ""):
        return "auto"
    if s in ("1", "true", "yes", "y", "on"):
        return True
    if s in ("0", "false", "no", "n", "off"):
        return False
    raise ConversionError(None, None, f"option {name}= must be true, false or auto", value)


def as_opt_int(value, name: str, low: int = 0) -> int | None:
    """An optional non-negative integer option (CLI strings accepted)."""
    if value is None:
        return None
    try:
        v = int(value)
    except (TypeError, ValueError):
        raise ConversionError(None, None, f"option {name}= must be an integer", value) from None
    if v < low or (isinstance(value, float) and v != value):
        raise ConversionError(None, None, f"option {name}= must be an integer >= {low}", value)
    return v


def as_dtype(value, name: str = "dtype", default: str = "float64") -> np.dtype:
    """A floating dtype option."""
    dt = np.dtype(default if value is None else value)
    if dt.kind != "f":
        raise ConversionError(
            None,
            None,
            f"option {name}= must be a floating dtype",
            str(value),
            "use float32 or float64",
        )
    return dt


def as_shape(value) -> tuple[int, int] | None:
    """``shape=(rows, cols)`` from a tuple or a CLI string ``"943,1682"`` / ``"943x1682"``."""
    if value is None:
        return None
    if isinstance(value, str):
        parts = value.replace("x", ",").replace("X", ",").replace("(", "").replace(")", "")
        value = [p for p in parts.split(",") if p.strip()]
    try:
        rows, cols = (int(v) for v in value)
    except (TypeError, ValueError):
        raise ConversionError(
            None,
            None,
            "option shape= must be two integers (rows, cols)",
            value,
            "e.g. shape=(943, 1682) or --shape 943,1682",
        ) from None
    if rows < 1 or cols < 1:
        raise ConversionError(None, None, "option shape= must be positive", (rows, cols))
    return rows, cols


def check_sources(srcs, fmt: str, max_count: int | None = None) -> list[str]:
    """Normalise ``srcs`` (one path or a sequence of paths) to a non-empty list of strings."""
    if isinstance(srcs, (str, os.PathLike)):
        srcs = [srcs]
    srcs = [os.fspath(s) for s in srcs]
    if not srcs:
        raise ConversionError(None, None, f"{fmt}: at least one source file is required")
    if max_count is not None and len(srcs) > max_count:
        raise ConversionError(
            None,
            None,
            f"{fmt}: at most {max_count} source file(s) accepted",
            srcs,
            "convert each file to its own store",
        )
    return srcs


# ----------------------------------------------------------------------------------------------
# blocks


def csr_from_parts(
    indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, n_cols: int, dtype
) -> sp.csr_matrix:
    """Build a csr block without scipy re-checking or copying more than needed."""
    n_rows = indptr.size - 1
    idx_dtype = np.int32 if n_cols < 2**31 and indices.size < 2**31 else np.int64
    return sp.csr_matrix(
        (
            np.asarray(data, dtype=dtype),
            np.asarray(indices, dtype=idx_dtype),
            np.asarray(indptr, dtype=idx_dtype),
        ),
        shape=(n_rows, n_cols),
    )


def n_rows_of(block: dict[str, Any]) -> int:
    """Number of rows of an aligned row-block dict."""
    return next(iter(block.values())).shape[0]


def row_ids(ptr: np.ndarray) -> np.ndarray:
    """Row number of every entry of a CSR pointer array."""
    return np.repeat(np.arange(ptr.size - 1), np.diff(ptr))


def canonical_rows(path, nums, ptr, ind, val, what: str, dedupe: bool):
    """Sort indices within rows; duplicates raise (features) or are merged (labels)."""
    if ind.size < 2:
        return ptr, ind, val
    rows = row_ids(ptr)
    d = np.diff(ind)
    same_row = rows[1:] == rows[:-1]
    if np.any((d <= 0) & same_row):
        order = np.lexsort((ind, rows))
        ind, val, rows = ind[order], val[order], rows[order]
        d = np.diff(ind)
        same_row = rows[1:] == rows[:-1]
    dup = (d == 0) & same_row
    if dup.any():
        if not dedupe:
            k = int(np.argmax(dup))
            raise ConversionError(
                path,
                nums[rows[k]],
                f"duplicate {what} in one row",
                int(ind[k]),
                f"each {what} may appear once per line",
            )
        keep = np.concatenate([[True], ~dup])
        ind, val, rows = ind[keep], val[keep], rows[keep]
        ptr = np.zeros_like(ptr)
        np.cumsum(np.bincount(rows, minlength=ptr.size - 1), out=ptr[1:])
    return ptr, ind, val


def check_range(path, nums, ptr, ind, n, what, fix):
    """Raise when a column index of a chunk lies outside ``[0, n)``, naming the line."""
    if ind.size and (ind.min() < 0 or ind.max() >= n):
        k = int(np.argmax((ind < 0) | (ind >= n)))
        row = int(np.searchsorted(ptr, k, side="right") - 1)
        raise ConversionError(path, nums[row], f"{what} out of range [0, {n})", int(ind[k]), fix)


# ----------------------------------------------------------------------------------------------
# writing


ArraySpec = tuple[str, str, int, Any]  # (name, kind: dense|csr|coo, n_cols, dtype)


def write_blocks(
    dest,
    specs: Sequence[ArraySpec],
    blocks: Iterable[dict[str, Any]],
    *,
    attrs: dict[str, Any],
    block_rows: int | None = None,
    overwrite: bool = False,
    progress: Callable[[int], None] | None = None,
    expected_rows: int | None = None,
    side_files: dict[str, str] | None = None,
) -> str:
    """Stream aligned row blocks into a new dataset at ``dest``; returns ``dest``.

    The store appears only when every block was written (the writer renames atomically), so an
    exception raised by the parser mid-way leaves nothing that opens as a valid store.
    ``side_files`` maps ``"side/<name>"`` to local files copied into the store at the end
    (read at close, so they may be completed while the blocks are consumed).
    """
    from ooc_lowrank.storage import DatasetWriter  # storage layer; imported lazily

    done = 0
    with DatasetWriter(
        dest, block_rows=block_rows, attrs=attrs, overwrite=overwrite, expected_rows=expected_rows
    ) as w:  # free disk space: the whole store (rows known) or each block, before writing
        adders = {"dense": w.add_dense, "csr": w.add_csr, "coo": w.add_coo}
        for name, kind, n_cols, dtype in specs:
            adders[kind](name, n_cols=int(n_cols), dtype=np.dtype(dtype).name)
        for rel, path in (side_files or {}).items():
            w.add_file(rel, path)
        # the writer buffers appended rows and cuts them into its own row blocks
        for b in blocks:
            w.append(**b)
            done += n_rows_of(b)
            if progress is not None:
                progress(done)
        if done == 0:  # a 0-row store opens but nothing can be fitted or scored on it
            files = attrs.get("source_files") or []
            raise ConversionError(
                ", ".join(str(f) for f in files) or None,
                None,
                "no rows found in the source (empty file, or only comments/blank lines)",
                None,
                "check the file; a dataset needs at least one row",
            )
        if expected_rows is not None and done != expected_rows:  # pragma: no cover - parser bug
            raise RuntimeError(f"converter wrote {done} rows, expected {expected_rows}")
    logger.info("converted %d rows to %s", done, dest)
    return os.fspath(dest) if isinstance(dest, os.PathLike) else dest


# ----------------------------------------------------------------------------------------------
# external sort by row


def bucket_starts(counts: np.ndarray, bucket_nnz: int) -> np.ndarray:
    """Cut rows into consecutive ranges holding at most ``bucket_nnz`` entries (a row with more
    forms its own range); returns the ``(n_buckets + 1,)`` row boundaries."""
    from ooc_lowrank.kernels.buckets import cut_buckets

    counts = np.ascontiguousarray(counts, dtype=np.int64)
    starts = np.empty(counts.size + 2, np.int64)
    m = cut_buckets(counts, int(bucket_nnz), starts)
    return starts[:m].copy()


class RowBuckets:
    """Spill files of an external bucket sort by row, in a scratch folder ``tmp``.

    :meth:`spill` appends records (a structured array with an int64 field ``"row"``) to the file
    of the row range they fall in, keeping their order; :meth:`load` reads one range back,
    stably sorted by row, and removes its file.  Memory: one spilled chunk, then one bucket.
    """

    def __init__(self, tmp: str, starts: np.ndarray, rec_dtype: np.dtype):
        self.starts = np.asarray(starts, dtype=np.int64)
        self.dtype = np.dtype(rec_dtype)
        self.files = [os.path.join(tmp, f"bucket{b:06d}.bin") for b in range(starts.size - 1)]
        self._buf = None  # load()'s buffer, reused
        self._open: dict[int, Any] = {}  # bucket -> its file, open for appending while spilling

    def __len__(self) -> int:
        return len(self.files)

    def spill(self, rec: np.ndarray, rows: np.ndarray | None = None) -> None:
        """Append the records ``rec`` to their buckets' files (one counting-sort pass);
        ``rows``: their rows, when the records do not hold them as the field ``"row"``."""
        from ooc_lowrank.kernels.buckets import scatter_buckets

        rec = np.ascontiguousarray(rec, dtype=self.dtype)
        rows = rec["row"] if rows is None else rows
        n, k = rec.size, self.dtype.itemsize // 8
        words = self.dtype.itemsize == 8 * k and all(  # records as rows of 8-byte words
            self.dtype.fields[f][0].itemsize == 8 for f in self.dtype.names
        )
        if words and n:
            out = np.empty((n, k), np.int64)
            counts = np.empty(len(self.files), np.int64)
            bounds = self.starts
            scatter_buckets(
                np.ascontiguousarray(rows, np.int64),
                bounds,
                rec.view(np.int64).reshape(n, k),
                out,
                counts,
            )
            rec = out.view(self.dtype).reshape(n)
        else:
            b = np.searchsorted(self.starts, rows, side="right") - 1
            rec = rec.take(np.argsort(b, kind="stable"))
            counts = np.bincount(b, minlength=len(self.files))
        self.append_parts(rec, counts)

    def append_parts(self, rec: np.ndarray, counts: np.ndarray) -> None:
        """Append records already partitioned by bucket (``counts[b]`` of bucket ``b``, bucket
        0 first) to their buckets' files."""
        ends = np.cumsum(counts)
        for bi in np.flatnonzero(counts).tolist():
            fh = self._open.get(bi)
            if fh is None:  # kept open until the first load (one open per bucket, not per batch)
                fh = self._open[bi] = open(self.files[bi], "ab")  # noqa: SIM115
            rec[ends[bi] - counts[bi] : ends[bi]].tofile(fh)

    def close_files(self) -> None:
        """Close the files kept open for appending (done by :meth:`load` and :meth:`store`)."""
        for fh in self._open.values():
            fh.close()
        self._open = {}

    def load(self, bi: int, sort: bool = True) -> np.ndarray:
        """Bucket ``bi`` (its file removed), stably sorted by ``"row"`` or as spilled; with
        ``sort=False`` a view of a buffer reused by the next call (fresh pages are slow)."""
        self.close_files()
        f = self.files[bi]
        if not os.path.exists(f):
            return np.empty(0, dtype=self.dtype)
        size = os.path.getsize(f)
        if self._buf is None or self._buf.size < size:
            self._buf = np.empty(size, np.uint8)
        with open(f, "rb") as fh:
            got = fh.readinto(memoryview(self._buf)[:size])
        if got != size:  # pragma: no cover - the file is ours
            raise OSError(f"short read of {f}: {got} of {size} bytes")
        os.remove(f)
        rec = self._buf[:size].view(self.dtype)
        return rec.take(np.argsort(rec["row"], kind="stable")) if sort else rec

    def store(self, bi: int, rec: np.ndarray) -> None:
        """Write bucket ``bi`` back (e.g. sorted and merged), replacing its file."""
        self.close_files()
        with open(self.files[bi], "wb") as fh:
            rec.tofile(fh)


#: the options every text converter takes (``convert_mat`` has no ``chunk_bytes``)
TEXT_OPTIONS = ("block_rows", "dtype", "chunk_bytes", "overwrite", "progress")

#: numpydoc entries of the options converters share (``{dtype_of}``: what ``dtype`` sets).
_OPTION_DOCS = {
    "block_rows": "block_rows : int, optional\n    Rows per stored block (default: the writer's "
    "choice).",
    "dtype": 'dtype : {{"float64", "float32"}}, default "float64"\n    Dtype of {dtype_of}.',
    "chunk_bytes": "chunk_bytes : int, optional\n    Text parsed at once (default 1 MiB); bounds "
    "the parser's memory.",
    "overwrite": "overwrite : bool, default False\n    Replace an existing store at ``dest``.",
    "progress": "progress : callable(rows_done) or None\n    Called after every written block.",
}


#: the shared options' defaults (the public signature a ``converter`` shows for them)
_OPTION_DEFAULTS = {
    "block_rows": None,
    "dtype": "float64",
    "chunk_bytes": None,
    "overwrite": False,
    "progress": None,
}


class Options(NamedTuple):
    """The shared converter options, validated (what a ``converter`` body receives as ``opts``)."""

    block_rows: int | None
    dtype: np.dtype
    chunk_bytes: int
    overwrite: bool
    progress: Callable[[int], None] | None

    def write(self, dest, specs, blocks, attrs, **kw) -> str:
        """:func:`write_blocks` with these options (``kw``: its further keywords)."""
        return write_blocks(
            dest,
            specs,
            blocks,
            attrs=attrs,
            block_rows=self.block_rows,
            overwrite=self.overwrite,
            progress=self.progress,
            **kw,
        )


def check_options(block_rows, dtype, chunk_bytes, overwrite, progress) -> Options:
    """Validate the shared converter options (CLI strings accepted)."""
    return Options(
        as_opt_int(block_rows, "block_rows", 1),
        as_dtype(dtype),
        as_opt_int(chunk_bytes, "chunk_bytes", 1) or DEFAULT_CHUNK_BYTES,
        overwrite,
        progress,
    )


def _document(fn, names, dtype_of, own) -> None:
    """End ``fn``'s docstring with the entries of the options ``names`` (in that order; ``own``
    maps further names to the converter's own entries) and its ``Returns`` section."""
    if fn.__doc__:  # None under python -OO
        docs = {**_OPTION_DOCS, **(own or {})}
        entries = [docs[n].format(dtype_of=dtype_of) for n in names]
        body = "\n".join("    " + line for e in entries for line in e.split("\n"))
        fn.__doc__ = (
            fn.__doc__.rstrip() + "\n" + body + "\n\n    Returns\n    -------\n    dest : str\n"
        )


def converter(fmt, *names, dtype_of="``X``", own=None, max_count=None):
    """Decorator for a converter ``fn(srcs, dest, opts, *, <its own options>)``.

    The public function takes ``(srcs, dest, *, <its own options>, <the shared options among
    names>)``: it checks ``srcs`` (:func:`check_sources`) and the shared options
    (:func:`check_options`, handed to ``fn`` as ``opts``), so the converters do not each repeat
    the arguments, their checks and their documentation.  ``names`` orders the docstring entries
    (``own`` documents the converter's own ones among them)."""
    shared = [n for n in names if n in _OPTION_DEFAULTS]

    def decorate(fn):
        _document(fn, names, dtype_of, own)
        params = [p for n, p in inspect.signature(fn).parameters.items() if n != "opts"]
        params += keyword_options({n: _OPTION_DEFAULTS[n] for n in shared})

        def body(a):
            srcs = check_sources(a.pop("srcs"), fmt, max_count)
            values = {n: a.pop(n) for n in shared}
            opts = check_options(
                **{n: values.get(n, _OPTION_DEFAULTS[n]) for n in _OPTION_DEFAULTS}
            )
            return fn(srcs, a.pop("dest"), opts, **a)

        return with_signature(fn, params, body)

    return decorate
