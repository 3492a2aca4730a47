"""svmlight / libsvm text files (single-label and multi-label) to a dataset.

Line grammar (``#`` starts a comment that runs to the end of the line)::

    <label> <index>:<value> <index>:<value> ...          single-label, e.g. ``+1 3:0.5 17:1``
    <l1>,<l2>,... <index>:<value> ...                    multi-label,  e.g. ``2,7 3:0.5``
    <index>:<value> ...                                  multi-label row without labels

Output arrays:

* ``"X"``: csr ``(n_samples, n_features)``, indices sorted within each row;
* single-label: ``"y"``: dense ``(n_samples, 1)`` float64 holding the labels as written;
* multi-label: ``"Y"``: csr ``(n_samples, n_labels)`` of 0/1 (float32); label ``l`` is column ``l``
  (labels are 0-based non-negative integers, as in the Extreme Classification repository).

The file is read twice when something must be learned from it first (``n_features``, ``n_labels``,
``zero_based="auto"``, ``multilabel="auto"``): one validating scan that keeps only counters, then
the writing pass.  Both passes hold one chunk of text (``chunk_bytes``) plus one row block.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from ._common import (
    TEXT_OPTIONS,
    ConversionError,
    as_bool_or_auto,
    as_opt_int,
    canonical_rows,
    check_range,
    converter,
    csr_from_parts,
    diagnose_lines,
    float_token,
    int_token,
    iter_lines,
    iter_rows,
    open_text,
    parse_numbers,
)

__all__ = ["convert_svmlight"]


@dataclass
class _Chunk:
    """One parsed chunk of rows (raw file indices, before the zero/one-based shift)."""

    nums: list[int]  # line number of each row
    ind_ptr: np.ndarray  # (n+1,) feature pointer
    ind: np.ndarray  # raw feature indices, float64 holding integers
    val: np.ndarray  # feature values
    lab_ptr: np.ndarray | None  # (n+1,) label pointer (multi-label) or None
    lab: np.ndarray  # labels: (n,) single-label, flat (multi-label)


@dataclass
class _Stats:
    n_rows: int = 0
    nnz: int = 0
    min_index: float = np.inf
    max_index: float = -np.inf
    max_label: float = -1.0
    n_label_entries: int = 0
    multilabel_seen: bool = False


def _parse_chunk(path, nums, texts, multilabel: bool) -> _Chunk:
    """Parse a chunk with vectorised C parsing; fall back to :func:`_diagnose` on any problem."""
    heads: list[str] = []
    rests: list[str] = []
    counts = np.empty(len(texts), dtype=np.int64)
    lab_counts = np.empty(len(texts), dtype=np.int64) if multilabel else None
    for i, t in enumerate(texts):
        parts = t.split(None, 1)
        head = parts[0]
        if ":" in head:  # no label on this row
            if not multilabel:
                _diagnose(path, nums, texts, multilabel)
            head, rest = "", t
        else:
            rest = parts[1] if len(parts) > 1 else ""
        if multilabel:
            lab_counts[i] = head.count(",") + 1 if head else 0
            if head:
                heads.append(head)
        else:
            heads.append(head)
        rests.append(rest)
        counts[i] = rest.count(":")
    total = int(counts.sum())
    flat = parse_numbers(" ".join(rests).replace(":", " "), " ", 2 * total)
    if multilabel:
        lab = parse_numbers(",".join(heads), ",", int(lab_counts.sum()))
    else:
        lab = parse_numbers(" ".join(heads), " ", len(heads))
    if flat is None or lab is None:
        _diagnose(path, nums, texts, multilabel)
    ind, val = flat[0::2], flat[1::2]
    bad = ~np.isfinite(flat)
    bad_lab = ~np.isfinite(lab)
    if bad.any() or bad_lab.any() or (ind != np.floor(ind)).any() or (ind < 0).any():
        _diagnose(path, nums, texts, multilabel)
    if multilabel and lab.size and ((lab != np.floor(lab)).any() or lab.min() < 0):
        _diagnose(path, nums, texts, multilabel)
    ind_ptr = np.zeros(len(texts) + 1, dtype=np.int64)
    np.cumsum(counts, out=ind_ptr[1:])
    lab_ptr = None
    if multilabel:
        lab_ptr = np.zeros(len(texts) + 1, dtype=np.int64)
        np.cumsum(lab_counts, out=lab_ptr[1:])
    return _Chunk(nums, ind_ptr, ind, val, lab_ptr, lab)


def _diagnose(path, nums, texts, multilabel: bool):
    """Slow line-by-line parse of a chunk that failed the fast path; raises the first error."""
    def check_line(lineno, t):
        parts = t.split()
        head = parts[0]
        feats = parts[1:]
        if ":" in head:
            if not multilabel:
                raise ConversionError(
                    path,
                    lineno,
                    "the line has no label (first token is a feature)",
                    head,
                    "single-label svmlight needs "
                    "'<label> <index>:<value> ...'; use multilabel=True for "
                    "rows without labels",
                )
            feats = parts
        elif multilabel:
            for tok in head.split(","):
                if tok == "":
                    raise ConversionError(
                        path,
                        lineno,
                        "empty label in label list",
                        head,
                        "write labels as 'l1,l2,...' without empty entries",
                    )
                v = float_token(path, lineno, tok, "label")
                if v != int(v) or v < 0:
                    raise ConversionError(
                        path, lineno, "multi-label labels must be non-negative integers", tok
                    )
        else:
            if "," in head:
                raise ConversionError(
                    path,
                    lineno,
                    "label list found in a single-label file",
                    head,
                    "pass multilabel=True (or leave it on auto)",
                )
            float_token(path, lineno, head, "label")
        for tok in feats:
            k, sep, v = tok.partition(":")
            if not sep or not k or not v or ":" in v:
                raise ConversionError(
                    path,
                    lineno,
                    "feature must be '<index>:<value>'",
                    tok,
                    "the line may be truncated or use another separator",
                )
            idx = int_token(path, lineno, k, "feature index")
            if idx < 0:
                raise ConversionError(path, lineno, "feature index must be >= 0", tok)
            float_token(path, lineno, v, "feature value")

    diagnose_lines(
        path,
        nums,
        texts,
        check_line,
        "malformed svmlight data near this line",
        "check the separators (space between pairs, ':' inside a pair)",
    )


def _iter_file_chunks(path, multilabel: bool, chunk_bytes: int, header: bool):
    """Yield ``(header_tuple_or_None, _Chunk)``; with ``header`` the first line is ``n d L``."""
    with open_text(path) as f:
        head = None
        first_data = 1
        if header:
            for lineno, line in iter_lines(path, f):
                text = line.split("#", 1)[0].strip()
                if text:
                    head = _parse_header(path, lineno, text)
                    first_data = lineno + 1
                    break
            if head is None:
                raise ConversionError(path, None, "the file is empty; expected a header 'n d L'")
        yield head, None
        for nums, texts in iter_rows(path, f, chunk_bytes, "#", first_data):
            if texts:
                yield head, _parse_chunk(path, nums, texts, multilabel)


_MULTILABEL_RULES = ("label list found", "the line has no label")


def _parse_header(path, lineno, text):
    parts = text.split()
    if len(parts) != 3 or any(":" in p for p in parts):
        raise ConversionError(
            path,
            lineno,
            "expected the header 'n_rows n_features n_labels'",
            text,
            "XC-format files start with three integers, e.g. '4880 1836 "
            "159'; use format 'svmlight' for files without header",
        )
    vals = [int_token(path, lineno, p, "header field") for p in parts]
    if min(vals) < 0:
        raise ConversionError(path, lineno, "header fields must be >= 0", text)
    return tuple(vals)


def _detect_multilabel(path) -> bool:
    """True when the first data line's label token contains ',' or is missing."""
    with open_text(path) as f:
        for _, line in iter_lines(path, f):
            t = line.split("#", 1)[0].strip()
            if t:
                head = t.split(None, 1)[0]
                return "," in head or ":" in head
    return False


def _scan(srcs, multilabel, chunk_bytes, header) -> _Stats:
    st = _Stats()
    for path in srcs:
        for _, ch in _iter_file_chunks(path, multilabel, chunk_bytes, header):
            if ch is None:
                continue
            st.n_rows += len(ch.nums)
            st.nnz += ch.ind.size
            if ch.ind.size:
                st.min_index = min(st.min_index, float(ch.ind.min()))
                st.max_index = max(st.max_index, float(ch.ind.max()))
            if multilabel and ch.lab.size:
                st.max_label = max(st.max_label, float(ch.lab.max()))
                st.n_label_entries += ch.lab.size
    return st


def iter_blocks(
    srcs,
    *,
    offset: int,
    multilabel: bool,
    n_features: int,
    n_labels: int | None,
    dtype,
    chunk_bytes: int,
    header: bool = False,
    index_fix: str = "",
    label_fix: str = "",
) -> Iterator[dict]:
    """Yield row blocks ``{"X": csr, "y"|"Y": ...}`` of the given svmlight / XC files."""
    for path in srcs:
        declared_rows = None
        rows_seen = 0
        for head, ch in _iter_file_chunks(path, multilabel, chunk_bytes, header):
            if ch is None:
                if head is not None:
                    declared_rows, hd, hl = head
                    if hd > n_features or hl > n_labels:
                        raise ConversionError(
                            path,
                            1,
                            "header dimensions exceed n_features / n_labels",
                            head,
                            "convert files with different "
                            "dimensions separately or pass larger values",
                        )
                continue
            if offset and ch.ind.size and ch.ind.min() < offset:
                k = int(np.argmin(ch.ind))
                row = int(np.searchsorted(ch.ind_ptr, k, side="right") - 1)
                raise ConversionError(
                    path,
                    ch.nums[row],
                    "feature index 0 in a file read as one-based",
                    0,
                    "pass zero_based=True (or 'auto')",
                )
            ind = ch.ind.astype(np.int64) - offset
            ptr, ind, val = canonical_rows(
                path, ch.nums, ch.ind_ptr, ind, ch.val, "feature index", dedupe=False
            )
            check_range(
                path,
                ch.nums,
                ptr,
                ind,
                n_features,
                f"feature index (after the {'one' if offset else 'zero'}-based shift)",
                index_fix,
            )
            block = {"X": csr_from_parts(ptr, ind, val, n_features, dtype)}
            if multilabel:
                lab = ch.lab.astype(np.int64)
                lptr, lab, _ = canonical_rows(
                    path, ch.nums, ch.lab_ptr, lab, lab, "label", dedupe=True
                )
                check_range(path, ch.nums, lptr, lab, n_labels, "label index", label_fix)
                block["Y"] = csr_from_parts(lptr, lab, np.ones(lab.size), n_labels, np.float32)
            else:
                block["y"] = ch.lab.reshape(-1, 1)
            rows_seen += len(ch.nums)
            if declared_rows is not None and rows_seen > declared_rows:
                raise ConversionError(
                    path,
                    ch.nums[declared_rows - (rows_seen - len(ch.nums))],
                    "more rows than the header declares",
                    declared_rows,
                    "fix the header's first number",
                )
            yield block
        if declared_rows is not None and rows_seen != declared_rows:
            raise ConversionError(
                path,
                None,
                "the file has fewer rows than its header declares (truncated file?)",
                f"{rows_seen} rows, header says {declared_rows}",
                "re-download the file or fix the header",
            )


@converter("svmlight", *TEXT_OPTIONS, dtype_of="the ``X`` values")
def convert_svmlight(
    srcs, dest, opts, *, zero_based="auto", multilabel="auto", n_features=None, n_labels=None
):
    """Convert svmlight / libsvm files to a dataset (several files are concatenated by rows).

    Parameters
    ----------
    srcs : path or list of paths
        Text files, plain or gzip (detected from the content).
    dest : str
        Store location (local path or fsspec URL) handed to ``DatasetWriter``.
    zero_based : bool or "auto", default "auto"
        Whether feature indices start at 0.  ``"auto"`` (as scikit-learn): zero-based when some
        feature index in the files is 0, else one-based (the LIBSVM convention).
    multilabel : bool or "auto", default "auto"
        Multi-label rows ``l1,l2 f:v``.  ``"auto"``: multi-label when some line's label token
        contains ``,`` or is missing (found by the validating scan, which then always runs; pass
        ``multilabel=False`` with ``n_features`` and ``zero_based`` to read a file only once).
    n_features : int, optional
        Number of feature columns ``d``; an index >= ``d`` is an error.  Default: max index + 1.
    n_labels : int, optional
        Multi-label only: number of label columns ``L``.  Default: max label + 1.
    """
    args = (zero_based, multilabel, n_features, n_labels)
    return _convert(srcs, dest, opts, "svmlight", False, *args)


def _convert(srcs, dest, opts, fmt, header, zero_based, multilabel, n_features, n_labels):
    """Convert svmlight (``header=False``) or XC (``header=True``) files."""
    zero_based = as_bool_or_auto(zero_based, "zero_based")
    multilabel = as_bool_or_auto(multilabel, "multilabel")
    n_features = as_opt_int(n_features, "n_features", 1)
    n_labels = as_opt_int(n_labels, "n_labels", 1)
    dt, chunk_bytes = opts.dtype, opts.chunk_bytes
    heads = []
    if header:
        for p in srcs:
            it = _iter_file_chunks(p, True, chunk_bytes, True)
            heads.append(next(it)[0])
            it.close()
        n_features = heads[0][1] if n_features is None else n_features
        n_labels = heads[0][2] if n_labels is None else n_labels
        multilabel = True
    guessed = multilabel == "auto"
    if guessed:
        multilabel = _detect_multilabel(srcs[0])
    stats = None
    if (
        zero_based == "auto"
        or n_features is None
        or (multilabel and n_labels is None)
        or (guessed and not multilabel)
    ):
        try:
            stats = _scan(srcs, multilabel, chunk_bytes, header)
        except ConversionError as e:
            # the first line looked single-label but a later one is multi-label: rescan
            if not (guessed and not multilabel and e.rule.startswith(_MULTILABEL_RULES)):
                raise
            multilabel = True
            stats = _scan(srcs, multilabel, chunk_bytes, header)
    if zero_based == "auto":
        zero_based = bool(stats.nnz == 0 or stats.min_index == 0)
    offset = 0 if zero_based else 1
    if n_features is None:
        n_features = max(int(stats.max_index) + 1 - offset, 1) if stats.nnz else 1
    if multilabel and n_labels is None:
        n_labels = max(int(stats.max_label) + 1, 1)
    specs = [("X", "csr", n_features, dt)]
    specs.append(
        ("Y", "csr", n_labels, np.float32) if multilabel else ("y", "dense", 1, np.float64)
    )
    attrs = {
        "source_format": fmt,
        "source_files": [os.path.basename(p) for p in srcs],
        "zero_based": zero_based,
        "multilabel": bool(multilabel),
    }
    blocks = iter_blocks(
        srcs,
        offset=offset,
        multilabel=multilabel,
        n_features=n_features,
        n_labels=n_labels,
        dtype=dt,
        chunk_bytes=chunk_bytes,
        header=header,
        index_fix=f"pass n_features > the largest index (now {n_features}) or check zero_based "
        f"(now {zero_based})",
        label_fix=f"pass n_labels > the largest label (now {n_labels})",
    )
    return opts.write(dest, specs, blocks, attrs, expected_rows=stats.n_rows if stats else None)
