"""Delimited dense numeric text (UCI style, e.g. Statlog ``segment.dat``) to a dataset.

Every line holds the same number of numbers separated by whitespace (default) or ``delimiter``;
one column (default: the last) is the class label.  Output: ``"X"`` dense
``(n_samples, n_features)`` and ``"y"`` dense ``(n_samples, 1)`` float64 (no ``"y"`` with
``label_column=None``).  Streams in chunks of ``chunk_bytes``.
"""

from __future__ import annotations

import os

import numpy as np

from ._common import (
    TEXT_OPTIONS,
    ConversionError,
    as_opt_int,
    converter,
    diagnose_lines,
    fields_per_line,
    float_token,
    iter_lines,
    iter_rows,
    open_text,
    parse_numbers,
)

__all__ = ["convert_dense_text"]


def _split(t, delimiter):
    return t.split() if delimiter is None else t.split(delimiter)


def _first_width(path, delimiter, comments, skip_rows):
    with open_text(path) as f:
        for lineno, line in iter_lines(path, f):
            t = line.split(comments, 1)[0].strip() if comments else line.strip()
            if lineno > skip_rows and t:
                return len(_split(t, delimiter))
    raise ConversionError(path, None, "no data rows found (empty file?)")


def _parse(path, nums, texts, k, delimiter):
    n = len(texts)
    text = "\n".join(texts)
    if delimiter is not None:
        text = text.replace(delimiter, " ")
    flat = parse_numbers(text, " ", n * k)
    if flat is not None and np.isfinite(flat).all() and (fields_per_line(text, n) == k).all():
        return flat.reshape(n, k)

    def check_line(lineno, t):
        fields = _split(t, delimiter)
        if len(fields) != k:
            raise ConversionError(
                path,
                lineno,
                f"expected {k} values (as on the first row)",
                f"{len(fields)} values",
                "the line may be truncated",
            )
        for tok in fields:
            float_token(path, lineno, tok.strip(), "value")

    diagnose_lines(path, nums, texts, check_line, "malformed numbers near this line")


@converter("dense_text", *TEXT_OPTIONS)
def convert_dense_text(
    srcs, dest, opts, *, label_column=-1, delimiter=None, comments="#", skip_rows=0
):
    """Convert dense delimited text (several files are concatenated by rows).

    Parameters
    ----------
    srcs : path or list of paths
        Plain or gzip text files.
    dest : str
        Store location handed to ``DatasetWriter``.
    label_column : int or None, default -1
        Column holding the class label (negative counts from the end); ``None``: no label.
    delimiter : str, optional
        Field separator; default any whitespace.
    comments : str, default "#"
        Text after this marker is ignored.
    skip_rows : int, default 0
        Header lines to skip at the top of every file.
    """
    dt = opts.dtype
    skip_rows = as_opt_int(skip_rows, "skip_rows", 0) or 0
    if isinstance(label_column, str):
        label_column = None if label_column.strip().lower() in ("", "none") else int(label_column)
    if delimiter is not None and (delimiter == "" or delimiter.isspace()):
        delimiter = None  # any whitespace
    k = _first_width(srcs[0], delimiter, comments, skip_rows)
    if label_column is not None:
        if not -k <= label_column < k:
            raise ConversionError(
                srcs[0], None, f"label_column out of range for {k} columns", label_column
            )
        label_column %= k
    d = k - (label_column is not None)
    specs = [("X", "dense", d, dt)]
    if label_column is not None:
        specs.append(("y", "dense", 1, np.float64))
    feat = [j for j in range(k) if j != label_column]

    def blocks():
        for path in srcs:
            with open_text(path) as f:
                for _ in range(skip_rows):
                    f.readline()
                for nums, texts in iter_rows(
                    path, f, opts.chunk_bytes, comments or None, skip_rows + 1
                ):
                    if not texts:
                        continue
                    m = _parse(path, nums, texts, k, delimiter)
                    b = {"X": m[:, feat].astype(dt)}
                    if label_column is not None:
                        b["y"] = m[:, [label_column]]
                    yield b

    attrs = {
        "source_format": "dense_text",
        "source_files": [os.path.basename(p) for p in srcs],
        "label_column": label_column,
    }
    return opts.write(dest, specs, blocks(), attrs)
