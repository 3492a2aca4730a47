"""Table of malformed converter inputs and the error each must raise.

Each case is a dict:

``id``        test id;
``format``    the ``ooc_lowrank.io.convert`` format;
``files``     ``{file name: str | bytes}`` written to a temporary folder;
``srcs``      the source file names (default: the first file);
``options``   converter options; a string value equal to a key of ``files`` is replaced by that
              file's path (e.g. ``xml``);
``exception`` the expected exception type (``ConversionError`` is a ``ValueError``);
``match``     a fragment the message must contain (matched literally).

``tests/test_converters.py`` runs every case and also checks that no store was created.
"""

from __future__ import annotations

import gzip
import io

import numpy as np
import scipy.io as sio

from ooc_lowrank.io import ConversionError


def _gz_truncated(text: str) -> bytes:
    data = gzip.compress(text.encode())
    return data[: len(data) - 30]


def _mat(**arrays) -> bytes:
    buf = io.BytesIO()
    sio.savemat(buf, arrays)
    return buf.getvalue()


_SVM_ROWS = "".join(f"{i % 2} 1:{i}.5 7:0.25 12:1\n" for i in range(400))
_ARFF_HEAD = "@relation t\n@attribute a numeric\n@attribute b numeric\n@attribute L1 {0,1}\n@data\n"
_XML = (
    '<?xml version="1.0" encoding="utf-8"?>\n'
    '<labels xmlns="http://mulan.sourceforge.net/labels"><label name="L1"></label></labels>\n'
)

CASES = [
    # ---- svmlight
    dict(
        id="svm-non-numeric-value",
        format="svmlight",
        files={"a.svm": "1 3:0.5\n-1 3:abc\n"},
        exception=ConversionError,
        match="line 2: feature value is not a number",
    ),
    dict(
        id="svm-nan-value",
        format="svmlight",
        files={"a.svm": "1 3:0.5 4:nan\n"},
        exception=ConversionError,
        match="feature value must be finite",
    ),
    dict(
        id="svm-inf-label",
        format="svmlight",
        files={"a.svm": "1 3:1\ninf 3:1\n"},
        exception=ConversionError,
        match="line 2: label must be finite",
    ),
    dict(
        id="svm-index-out-of-range",
        format="svmlight",
        files={"a.svm": "1 3:1 9:1\n"},
        options=dict(n_features=5, zero_based=False),
        exception=ConversionError,
        match="feature index (after the one-based shift) out of range [0, 5)",
    ),
    dict(
        id="svm-truncated-line",
        format="svmlight",
        files={"a.svm": "1 3:1\n0 3:1 4:"},
        exception=ConversionError,
        match="line 2: feature must be '<index>:<value>'",
    ),
    dict(
        id="svm-truncated-gzip",
        format="svmlight",
        files={"a.svm.gz": _gz_truncated(_SVM_ROWS)},
        exception=ConversionError,
        match="the file is truncated",
    ),
    dict(
        id="svm-duplicate-index",
        format="svmlight",
        files={"a.svm": "1 3:1 3:2\n"},
        exception=ConversionError,
        match="duplicate feature index in one row",
    ),
    dict(
        id="svm-label-list-single-label",
        format="svmlight",
        files={"a.svm": "1,2 3:1\n"},
        options=dict(multilabel=False),
        exception=ConversionError,
        match="label list found in a single-label file",
    ),
    dict(
        id="svm-negative-index",
        format="svmlight",
        files={"a.svm": "1 -3:1\n"},
        exception=ConversionError,
        match="feature index must be >= 0",
    ),
    dict(
        id="svm-missing-file",
        format="svmlight",
        files={},
        srcs=["nope.svm"],
        exception=ConversionError,
        match="source file does not exist",
    ),
    # ---- XC
    dict(
        id="xc-wrong-header",
        format="xc",
        files={"a.txt": "4880 1836\n0 1:1\n"},
        exception=ConversionError,
        match="expected the header 'n_rows n_features n_labels'",
    ),
    dict(
        id="xc-fewer-rows-than-header",
        format="xc",
        files={"a.txt": "3 5 2\n0 1:1\n1 2:1\n"},
        exception=ConversionError,
        match="fewer rows than its header declares",
    ),
    dict(
        id="xc-label-out-of-range",
        format="xc",
        files={"a.txt": "1 5 2\n0,7 1:1\n"},
        exception=ConversionError,
        match="line 2: label index out of range [0, 2)",
    ),
    dict(
        id="xc-feature-out-of-range",
        format="xc",
        files={"a.txt": "1 5 2\n0 5:1\n"},
        exception=ConversionError,
        match="out of range [0, 5)",
    ),
    # ---- ARFF
    dict(
        id="arff-truncated-dense-row",
        format="arff",
        files={"d.arff": _ARFF_HEAD + "1,2,0\n3,4"},
        options=dict(n_labels=1),
        exception=ConversionError,
        match="line 7: dense row must have 3 values",
    ),
    dict(
        id="arff-missing-value",
        format="arff",
        files={"d.arff": _ARFF_HEAD + "1,?,0\n"},
        options=dict(n_labels=1),
        exception=ConversionError,
        match="missing value '?' is not supported",
    ),
    dict(
        id="arff-nan-value",
        format="arff",
        files={"d.arff": _ARFF_HEAD + "1,NaN,0\n"},
        options=dict(n_labels=1),
        exception=ConversionError,
        match="must be finite",
    ),
    dict(
        id="arff-label-not-binary",
        format="arff",
        files={"d.arff": _ARFF_HEAD + "1,2,1\n1,2,7\n"},
        options=dict(n_labels=1),
        exception=ConversionError,
        match="value is not a category of nominal attribute 2",
    ),
    dict(
        id="arff-numeric-label-not-binary",
        format="arff",
        files={"d.arff": _ARFF_HEAD.replace("L1 {0,1}", "L1 numeric") + "1,2,1\n1,2,0.5\n"},
        options=dict(n_labels=1),
        exception=ConversionError,
        match="line 7: label values must be 0 or 1",
    ),
    dict(
        id="arff-sparse-index-out-of-range",
        format="arff",
        files={"d.arff": _ARFF_HEAD + "{0 1,2 1}\n{7 1}\n"},
        options=dict(n_labels=1),
        exception=ConversionError,
        match="attribute index out of range [0, 3)",
    ),
    dict(
        id="arff-truncated-sparse-row",
        format="arff",
        files={"d.arff": _ARFF_HEAD + "{0 1,2 1}\n{0 1,1"},
        options=dict(n_labels=1),
        exception=ConversionError,
        match="sparse row must end with '}'",
    ),
    dict(
        id="arff-xml-label-unknown",
        format="arff",
        files={"d.arff": _ARFF_HEAD.replace("L1", "other") + "1,2,0\n", "d.xml": _XML},
        options=dict(xml="d.xml"),
        exception=ConversionError,
        match="label(s) named in the XML file are not attributes of the ARFF file",
    ),
    dict(
        id="arff-no-data-section",
        format="arff",
        files={"d.arff": "@relation t\n@attribute a numeric\n"},
        options=dict(n_labels=1),
        exception=ConversionError,
        match="no @data section found",
    ),
    dict(
        id="arff-no-labels-given",
        format="arff",
        files={"d.arff": _ARFF_HEAD + "1,2,0\n"},
        exception=ConversionError,
        match="the label attributes are unknown",
    ),
    dict(
        id="arff-string-attribute",
        format="arff",
        files={"d.arff": "@relation t\n@attribute s string\n@data\nabc\n"},
        options=dict(n_labels=1),
        exception=ConversionError,
        match="unsupported attribute type",
    ),
    # ---- ratings / SNAP
    dict(
        id="movielens-id-zero",
        format="movielens",
        files={"u.data": "1\t1\t5\t0\n0\t2\t3\t0\n"},
        exception=ConversionError,
        match="line 2: row id must be >= 1",
    ),
    dict(
        id="movielens-shape-too-small",
        format="movielens",
        files={"u.data": "1\t1\t5\t0\n944\t2\t3\t0\n"},
        options=dict(shape=(943, 1682)),
        exception=ConversionError,
        match="line 2: row id out of range for shape=(943, 1682)",
    ),
    dict(
        id="movielens-truncated-line",
        format="movielens",
        files={"u.data": "1\t1\t5\t0\n2\t3"},
        exception=ConversionError,
        match="line 2: expected at least 3 fields",
    ),
    dict(
        id="movielens-nan-rating",
        format="movielens",
        files={"u.data": "1\t1\tnan\t0\n"},
        exception=ConversionError,
        match="value must be finite",
    ),
    dict(
        id="movielens-non-numeric-id",
        format="movielens",
        files={"ratings.dat": "1::1::5::0\nu2::3::4::0\n"},
        exception=ConversionError,
        match="line 2: row id must be an integer",
    ),
    dict(
        id="snap-bad-sign",
        format="snap",
        files={"e.txt": "# c\n0\t1\t1\n1\t2\t2\n"},
        exception=ConversionError,
        match="line 3: edge sign must be -1 or +1",
    ),
    # ---- MATLAB
    dict(
        id="mat-missing-variable",
        format="mat",
        files={"a.mat": _mat(train_data=np.eye(3))},
        options=dict(variables="X=data"),
        exception=ConversionError,
        match="variable(s) ['data'] not in the file",
    ),
    dict(
        id="mat-labels-not-binary",
        format="mat",
        files={"a.mat": _mat(X=np.eye(4), Y=np.array([[0, 1], [2, 0], [1, 1], [0, 0]]))},
        exception=ConversionError,
        match="label matrix 'Y' must hold only {0, 1} or only {-1, +1}",
    ),
    dict(
        id="mat-nan",
        format="mat",
        files={"a.mat": _mat(X=np.array([[1.0, np.nan]]))},
        exception=ConversionError,
        match="variable 'X' holds NaN/inf at (0, 1)",
    ),
    dict(
        id="mat-not-a-mat-file",
        format="mat",
        files={"a.mat": "hello\n"},
        exception=ConversionError,
        match="not a readable MATLAB .mat file",
    ),
    dict(
        id="mat-no-matching-dimension",
        format="mat",
        files={"a.mat": _mat(X=np.eye(4), Y=np.ones((3, 3)))},
        exception=ConversionError,
        match="has no dimension equal to n_rows=4",
    ),
    # ---- dense text, dispatcher
    dict(
        id="dense-ragged-row",
        format="dense_text",
        files={"s.dat": "1 2 3\n4 5\n"},
        exception=ConversionError,
        match="line 2: expected 3 values",
    ),
    dict(
        id="unknown-format",
        format="xlsx",  # csv is a format now (io.tables)
        files={"a.xlsx": "1,2\n"},
        exception=ConversionError,
        match="unknown format",
    ),
    dict(
        id="unknown-option",
        format="svmlight",
        files={"a.svm": "1 1:1\n"},
        options=dict(xml="x.xml"),
        exception=ConversionError,
        match="unknown option(s)",
    ),
    dict(
        id="bad-option-value",
        format="movielens",
        files={"u.data": "1\t1\t5\t0\n"},
        options=dict(shape="943"),
        exception=ConversionError,
        match="option shape= must be two integers",
    ),
]
