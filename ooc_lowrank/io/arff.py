"""Mulan multi-label ARFF files (dense or sparse rows, plain or gzip) to a dataset.

A Mulan dataset is an ARFF file plus an XML file naming the labels::

    @relation bibtex
    @attribute f0 {0,1}            features: numeric / real / integer / nominal
    ...
    @attribute TAG_web20 {0,1}     labels: the attributes named in the .xml (usually the last L)
    @data
    {0 1,5 1,1838 1}               sparse row: "index value" pairs, omitted values are 0
    0.03,0.08,...,0,1              dense row: one value per attribute

Output arrays:

* ``"X"``: the feature attributes, csr ``(n_samples, n_features)`` for sparse ARFF files, dense
  ``(n_samples, n_features)`` for dense ones (decided by the first data row);
* ``"Y"``: the label attributes as csr 0/1 ``(n_samples, n_labels)`` (float32), columns in the
  order of the XML file;
* or, when the only label attribute is nominal with categories other than ``{0,1}`` (a
  single-label class, e.g. ``@attribute class {sky,grass,path}`` with ``n_labels=1``): ``"y"``
  dense ``(n_samples, 1)`` float64 holding numeric categories as written, or, for named
  categories, the rank of the name in sorted order, the names in the attribute
  ``class_names`` (GIMC then predicts the names).

Attributes ``feature_names`` and ``label_names`` are stored with the dataset.

This is a streaming line parser (the file is never held in memory; ``liac-arff`` loads whole
files, so it is used only by the tests, as an independent reader).  Nominal values map to
their numeric value when every category is a number (as ``{0,1}``), else to the category's
position.  Not supported (clear error): missing values ``?``, ``string``/``date``/``relational``
attributes, instance weights ``{...},{w}``, quoted values containing commas.
"""

from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

import numpy as np

from ._common import (
    TEXT_OPTIONS,
    ConversionError,
    as_opt_int,
    canonical_rows,
    check_range,
    converter,
    csr_from_parts,
    float_token,
    iter_lines,
    iter_rows,
    open_text,
    parse_numbers,
)

__all__ = ["convert_arff", "read_label_names"]

_ATTR_RE = re.compile(
    r"""@attribute\s+('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|[^\s{]+)\s*(.*)$""", re.IGNORECASE
)
_NUMERIC = ("numeric", "real", "integer")


@dataclass
class _Header:
    names: list[str] = field(default_factory=list)
    # per attribute: None for numeric, else {category: value}
    nominal: list[dict | None] = field(default_factory=list)
    data_line: int = 0


def _unquote(s: str) -> str:
    s = s.strip()
    if len(s) >= 2 and s[0] == s[-1] and s[0] in "'\"":
        return s[1:-1].replace("\\'", "'").replace('\\"', '"')
    return s


def read_label_names(xml_path) -> list[str]:
    """Label names of a Mulan ``.xml`` file, in document order (nested labels included)."""
    xml_path = os.fspath(xml_path)
    if not os.path.exists(xml_path):
        raise ConversionError(
            xml_path,
            None,
            "label XML file does not exist",
            fix="pass xml=<dataset>.xml (Mulan's label file) or n_labels=L",
        )
    names = []
    try:
        for _, el in ET.iterparse(xml_path, events=("start",)):
            if el.tag.rsplit("}", 1)[-1] == "label":
                name = el.get("name")
                if name is None:
                    raise ConversionError(
                        xml_path, None, "<label> element without a name attribute"
                    )
                names.append(name)
    except ET.ParseError as e:
        raise ConversionError(xml_path, None, "not a well-formed XML file", str(e)) from None
    if not names:
        raise ConversionError(
            xml_path,
            None,
            "the XML file names no labels",
            fix='Mulan label files hold <label name="..."> elements',
        )
    return names


def _read_header(path, lines) -> _Header:
    h = _Header()
    for lineno, line in lines:
        s = line.strip()
        if not s or s.startswith("%"):
            continue
        low = s[:10].lower()
        if low.startswith("@relation"):
            continue
        if low.startswith("@attribute"):
            m = _ATTR_RE.match(s)
            if not m:
                raise ConversionError(path, lineno, "malformed @attribute line", s[:80])
            name, typ = _unquote(m.group(1)), m.group(2).strip()
            if typ.startswith("{"):
                if not typ.endswith("}"):
                    raise ConversionError(path, lineno, "nominal type must end with '}'", typ[:80])
                cats = [_unquote(c) for c in typ[1:-1].split(",")]
                try:
                    mapping = {c: float(c) for c in cats}
                except ValueError:
                    mapping = {c: float(i) for i, c in enumerate(cats)}
                h.nominal.append(mapping)
            elif typ.lower() in _NUMERIC:
                h.nominal.append(None)
            else:
                raise ConversionError(
                    path,
                    lineno,
                    "unsupported attribute type (numeric, real, "
                    "integer and nominal {...} are supported)",
                    typ[:80],
                )
            h.names.append(name)
            continue
        if low.startswith("@data"):
            h.data_line = lineno
            return h
        raise ConversionError(
            path,
            lineno,
            "unexpected line in the ARFF header",
            s[:80],
            "header lines start with @relation, @attribute, @data or %",
        )
    raise ConversionError(
        path,
        None,
        "no @data section found (not an ARFF file, or truncated header)",
        fix="check the file",
    )


def _data_lines(lines):
    for lineno, line in lines:
        s = line.strip()
        if s and not s.startswith("%"):
            yield lineno, s


class _Layout:
    """Where every attribute goes: an X column, a Y column, or nowhere."""

    def __init__(self, path, header: _Header, label_names, n_labels):
        names = header.names
        n_attr = len(names)
        if label_names is None:
            if n_labels is None or n_labels > n_attr:
                raise ConversionError(
                    path,
                    None,
                    "the label attributes are unknown"
                    if n_labels is None
                    else "n_labels exceeds the number of attributes",
                    n_labels,
                    "pass xml=<dataset>.xml (Mulan) or n_labels=L (the last L "
                    "attributes are the labels)",
                )
            label_names = names[n_attr - n_labels :]
            lab_attr = list(range(n_attr - n_labels, n_attr))
        else:
            pos = {n: i for i, n in enumerate(names)}
            missing = [n for n in label_names if n not in pos]
            if missing:
                raise ConversionError(
                    path,
                    None,
                    f"{len(missing)} label(s) named in the XML file "
                    "are not attributes of the ARFF file",
                    missing[:5],
                    "use the XML file that belongs to this ARFF file",
                )
            lab_attr = [pos[n] for n in label_names]
        self.n_attr = n_attr
        self.label_names = list(label_names)
        self.lab_col = np.full(n_attr, -1, dtype=np.int64)
        self.lab_col[lab_attr] = np.arange(len(lab_attr))
        feat_attr = np.flatnonzero(self.lab_col < 0)
        self.feat_attr = feat_attr
        self.feat_col = np.full(n_attr, -1, dtype=np.int64)
        self.feat_col[feat_attr] = np.arange(feat_attr.size)
        self.lab_attr = np.asarray(lab_attr, dtype=np.int64)
        self.feature_names = [names[i] for i in feat_attr]
        self.d = int(feat_attr.size)
        self.L = len(lab_attr)
        self.nominal = header.nominal
        # the fast vectorised path handles numeric attributes and nominal {0,1}; anything else
        # (other categories, strings) goes through the exact per-line parser
        self.is_nom01 = np.array([m is not None for m in header.nominal], dtype=bool)
        self.all_numeric = all(
            m is None or sorted(_num_items(m)) == [(0.0, 0.0), (1.0, 1.0)] for m in header.nominal
        )
        # one nominal label attribute with categories other than {0, 1}: single-label classes,
        # written as "y" (n, 1).  Numeric categories keep their values; named ones become the
        # rank of the name in sorted order, the names going to attrs["class_names"].
        self.class_names = None
        lab_nom = header.nominal[lab_attr[0]] if len(lab_attr) == 1 else None
        self.single_class = lab_nom is not None and sorted(_num_items(lab_nom)) != [
            (0.0, 0.0),
            (1.0, 1.0),
        ]
        if self.single_class and any(np.isnan(k) for k, _ in _num_items(lab_nom)):
            names_sorted = sorted(lab_nom)
            rank = {c: float(i) for i, c in enumerate(names_sorted)}
            self.class_names = names_sorted
            self.nominal = list(header.nominal)
            self.nominal[lab_attr[0]] = rank
            self.all_numeric = False


def _num_items(m):
    for k, v in m.items():
        try:
            yield float(k), v
        except ValueError:
            yield np.nan, v


def _value(path, lineno, layout: _Layout, attr: int, tok: str) -> float:
    tok = tok.strip()
    if tok == "?":
        raise ConversionError(
            path,
            lineno,
            "missing value '?' is not supported",
            f"attribute {attr}",
            "impute the missing values before converting",
        )
    m = layout.nominal[attr]
    if m is not None:
        t = _unquote(tok)
        if t not in m:
            raise ConversionError(
                path,
                lineno,
                f"value is not a category of nominal attribute {attr}",
                tok,
                f"allowed: {sorted(m)[:10]}",
            )
        return m[t]
    return float_token(path, lineno, tok, f"value of numeric attribute {attr}")


def _slow_row(path, lineno, s, layout: _Layout, sparse: bool):
    """Parse one row exactly; returns (attribute indices, values) or raises a precise error."""
    if s.startswith("{"):
        if not s.endswith("}"):
            msg = (
                "instance weights '{...},{w}' are not supported"
                if "},{" in s.replace(" ", "")
                else "sparse row must end with '}' (truncated line?)"
            )
            raise ConversionError(path, lineno, msg, s[-40:])
        body = s[1:-1].strip()
        idx, val = [], []
        for pair in body.split(",") if body else []:
            parts = pair.split()
            if len(parts) != 2:
                raise ConversionError(
                    path,
                    lineno,
                    "sparse entry must be 'index value'",
                    pair,
                    "the line may be truncated",
                )
            try:
                k = int(parts[0])
            except ValueError:
                raise ConversionError(
                    path, lineno, "sparse index is not an integer", parts[0]
                ) from None
            if not 0 <= k < layout.n_attr:
                raise ConversionError(
                    path,
                    lineno,
                    f"attribute index out of range [0, {layout.n_attr})",
                    k,
                    f"the header declares {layout.n_attr} attributes",
                )
            idx.append(k)
            val.append(_value(path, lineno, layout, k, parts[1]))
        return np.asarray(idx, dtype=np.int64), np.asarray(val, dtype=np.float64)
    fields = s.split(",")
    if len(fields) != layout.n_attr:
        raise ConversionError(
            path,
            lineno,
            f"dense row must have {layout.n_attr} values (one per attribute)",
            f"{len(fields)} values",
            "the line may be truncated or hold a quoted comma",
        )
    vals = [_value(path, lineno, layout, k, t) for k, t in enumerate(fields)]
    return np.arange(layout.n_attr, dtype=np.int64), np.asarray(vals, dtype=np.float64)


def _parse_chunk(path, nums, texts, layout: _Layout, sparse: bool):
    """-> (attr pointer, attr indices, values) for the rows of a chunk (dense rows: all attrs)."""
    n = len(texts)
    if layout.all_numeric:
        if sparse and all(t[0] == "{" and t[-1] == "}" for t in texts):
            bodies = [t[1:-1].strip() for t in texts]
            counts = np.fromiter((b.count(",") + 1 if b else 0 for b in bodies), np.int64, n)
            flat = parse_numbers(" ".join(bodies).replace(",", " "), " ", 2 * int(counts.sum()))
            if flat is not None and np.isfinite(flat).all():
                ind, val = flat[0::2], flat[1::2]
                if ((ind == np.floor(ind)) & (ind >= 0) & (ind < layout.n_attr)).all():
                    ind = ind.astype(np.int64)
                    if not (layout.is_nom01[ind] & (val != 0) & (val != 1)).any():
                        ptr = np.zeros(n + 1, np.int64)
                        np.cumsum(counts, out=ptr[1:])
                        return ptr, ind, val
        elif not sparse and not any(t[0] == "{" for t in texts):
            flat = parse_numbers(",".join(texts), ",", n * layout.n_attr)
            if (
                flat is not None
                and np.isfinite(flat).all()
                and all(t.count(",") == layout.n_attr - 1 for t in texts)
            ):
                m = flat.reshape(n, layout.n_attr)[:, layout.is_nom01]
                if not ((m != 0) & (m != 1)).any():
                    ptr = np.arange(n + 1, dtype=np.int64) * layout.n_attr
                    return ptr, np.tile(np.arange(layout.n_attr, dtype=np.int64), n), flat
    parts = [_slow_row(path, ln, t, layout, sparse) for ln, t in zip(nums, texts, strict=True)]
    ptr = np.zeros(n + 1, np.int64)
    np.cumsum([p[0].size for p in parts], out=ptr[1:])
    ind = np.concatenate([p[0] for p in parts]) if parts else np.zeros(0, np.int64)
    val = np.concatenate([p[1] for p in parts]) if parts else np.zeros(0)
    return ptr, ind, val


def _blocks(path, f, first_lineno, layout: _Layout, sparse: bool, dtype, chunk_bytes):
    """Row blocks ``{"X": ..., "Y": csr}`` of one ARFF file whose header was consumed."""
    for nums, texts in iter_rows(path, f, chunk_bytes, None, first_lineno):
        if texts and any(t[0] == "%" for t in texts):
            keep = [i for i, t in enumerate(texts) if t[0] != "%"]
            nums, texts = [nums[i] for i in keep], [texts[i] for i in keep]
        if not texts:
            continue
        ptr, ind, val = _parse_chunk(path, nums, texts, layout, sparse)
        ptr, ind, val = canonical_rows(path, nums, ptr, ind, val, "attribute index", dedupe=False)
        check_range(
            path,
            nums,
            ptr,
            ind,
            layout.n_attr,
            "attribute index",
            "the header declares fewer attributes",
        )
        rows = np.repeat(np.arange(len(texts)), np.diff(ptr))
        is_lab = layout.lab_col[ind] >= 0
        X = _features(layout, rows, ind, val, ~is_lab, len(texts), sparse, dtype)
        if layout.single_class:  # one class label per row (omitted in a sparse row: 0)
            y = np.zeros((len(texts), 1))
            y[rows[is_lab], 0] = val[is_lab]
            yield {"X": X, "y": y}
            continue
        # labels: 0/1 only; store the ones
        lv = val[is_lab]
        if lv.size and not np.isin(lv, (0.0, 1.0)).all():
            k = int(np.flatnonzero(is_lab)[np.argmax(~np.isin(lv, (0.0, 1.0)))])
            label = layout.label_names[layout.lab_col[ind[k]]]
            raise ConversionError(
                path,
                nums[rows[k]],
                "label values must be 0 or 1",
                f"{val[k]} for label {label}",
                "check that xml=/n_labels= name the label attributes",
            )
        one = is_lab & (val == 1.0)
        lrows, lcols = rows[one], layout.lab_col[ind[one]]
        order = np.lexsort((lcols, lrows))
        lptr = np.zeros(len(texts) + 1, np.int64)
        np.cumsum(np.bincount(lrows, minlength=len(texts)), out=lptr[1:])
        Y = csr_from_parts(lptr, lcols[order], np.ones(lcols.size), layout.L, np.float32)
        yield {"X": X, "Y": Y}


def _features(layout: _Layout, rows, ind, val, fm, n, sparse, dtype):
    """The feature block (csr or dense) of a chunk's parsed attributes ``fm``."""
    if sparse:
        frows, fcols, fval = rows[fm], layout.feat_col[ind[fm]], val[fm]
        order = np.lexsort((fcols, frows))
        fptr = np.zeros(n + 1, np.int64)
        np.cumsum(np.bincount(frows, minlength=n), out=fptr[1:])
        return csr_from_parts(fptr, fcols[order], fval[order], layout.d, dtype)
    X = np.zeros((n, layout.d), dtype=dtype)
    X[rows[fm], layout.feat_col[ind[fm]]] = val[fm]
    return X


def _first_row_is_sparse(path) -> bool:
    with open_text(path) as f:
        lines = iter_lines(path, f)
        _read_header(path, lines)
        for _, s in _data_lines(lines):
            return s.startswith("{")
    return True


@converter("arff", *TEXT_OPTIONS)
def convert_arff(srcs, dest, opts, *, xml=None, n_labels=None):
    """Convert Mulan ARFF files to a dataset (several files are concatenated by rows).

    Parameters
    ----------
    srcs : path or list of paths
        ``.arff`` or ``.arff.gz`` files; with several, their attribute lists must be identical
        (e.g. a train and a test file).
    dest : str
        Store location handed to ``DatasetWriter``.
    xml : path, optional
        Mulan's label file naming the label attributes.  Either ``xml`` or ``n_labels``.
    n_labels : int, optional
        Without ``xml``: the last ``n_labels`` attributes are the labels.
    """
    dt = opts.dtype
    n_labels = as_opt_int(n_labels, "n_labels", 1)
    label_names = read_label_names(xml) if xml is not None else None
    headers = []
    for p in srcs:
        with open_text(p) as f:
            headers.append(_read_header(p, iter_lines(p, f)))
    for p, h in zip(srcs[1:], headers[1:], strict=True):
        if h.names != headers[0].names:
            raise ConversionError(
                p,
                None,
                "attributes differ from those of the first file",
                srcs[0],
                "convert files with different headers separately",
            )
    layout = _Layout(srcs[0], headers[0], label_names, n_labels)
    sparse = _first_row_is_sparse(srcs[0])
    labels = (
        ("y", "dense", 1, np.float64) if layout.single_class else ("Y", "csr", layout.L, np.float32)
    )
    specs = [("X", "csr" if sparse else "dense", layout.d, dt), labels]
    attrs = {
        "source_format": "arff",
        "source_files": [os.path.basename(p) for p in srcs],
        "label_names": layout.label_names,
        "feature_names": layout.feature_names,
    }
    if layout.class_names is not None:
        attrs["class_names"] = layout.class_names

    def blocks():
        for p in srcs:
            with open_text(p) as f:
                h = _read_header(p, iter_lines(p, f))
                yield from _blocks(p, f, h.data_line + 1, layout, sparse, dt, opts.chunk_bytes)

    return opts.write(dest, specs, blocks(), attrs)
