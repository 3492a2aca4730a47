"""Converters: every real file in the data folder against an independent reader and the
statistics of ``shared/data/SOURCES.md``; synthetic formats; malformed inputs; bounded memory.

Independent readers: liac-arff (ARFF), ``scipy.io.loadmat`` (.mat), scikit-learn's
``load_svmlight_file`` (svmlight / multi-label), ``numpy.loadtxt`` (ratings, SNAP, dense text).
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import scipy.io as sio
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from malformed_inputs import CASES

from ooc_lowrank.io import (
    FORMATS,
    ConversionError,
    convert,
    convert_arff,
    convert_mat,
    convert_movielens,
    convert_svmlight,
    convert_xc,
    format_options,
    read_label_names,
)
from ooc_lowrank.storage import open_dataset

REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("OOC_LOWRANK_DATA", REPO.parent / "shared" / "data"))


def need(*parts) -> Path:
    """A real data file, or skip naming the missing file."""
    p = DATA.joinpath(*parts)
    if not p.exists():
        pytest.skip(f"dataset file missing: {p} (set OOC_LOWRANK_DATA to the shared data folder)")
    return p


def read_all(store):
    """Open with full validation and read every array whole (test data is small)."""
    ds = open_dataset(store, verify="full")
    return ds, {k: ds[k].read() for k in ds.names}


def dense(a):
    return a.toarray() if sp.issparse(a) else np.asarray(a)


# ---------------------------------------------------------------------------------------------
# ARFF (Mulan) vs liac-arff
# ---------------------------------------------------------------------------------------------

# folder, file stem, xml, n_rows, d, L, nnz of X (sparse files) or None, label cardinality or None
ARFF_FILES = [
    ("bibtex", "bibtex-train", "bibtex.xml", 4880, 1836, 159, 334250, 2.380),
    ("bibtex", "bibtex-test", "bibtex.xml", 2515, 1836, 159, 173496, 2.444),
    ("emotions", "emotions-train", "emotions.xml", 391, 72, 6, None, None),
    ("emotions", "emotions-test", "emotions.xml", 202, 72, 6, None, None),
    ("enron", "enron-train", "enron.xml", 1123, 1001, 53, None, None),
    ("enron", "enron-test", "enron.xml", 579, 1001, 53, None, None),
    ("scene", "scene-train", "scene.xml", 1211, 294, 6, None, None),
    ("scene", "scene-test", "scene.xml", 1196, 294, 6, None, None),
    ("yeast", "yeast-train", "yeast.xml", 1500, 103, 14, None, None),
    ("yeast", "yeast-test", "yeast.xml", 917, 103, 14, None, None),
    ("medical", "medical-train", "medical.xml", 333, 1449, 45, None, None),
    ("medical", "medical-test", "medical.xml", 645, 1449, 45, None, None),
    ("corel5k", "Corel5k-train-sparse", "Corel5k.xml", 4500, 499, 374, None, 3.522),
    ("corel5k", "Corel5k-test-sparse", "Corel5k.xml", 500, 499, 374, None, 3.526),
]


def liac_arff_matrix(path, sparse):
    """(n, n_attributes) float matrix and attribute names read by liac-arff (whole file)."""
    arff = pytest.importorskip("arff")
    with gzip.open(path, "rt") as f:
        obj = arff.load(f, encode_nominal=True, return_type=arff.COO if sparse else arff.DENSE)
    names = [a[0] for a in obj["attributes"]]
    if sparse:
        data, rows, cols = obj["data"]
        n = max(rows) + 1 if len(rows) else 0
        m = sp.csr_matrix((np.asarray(data, float), (rows, cols)), shape=(n, len(names)))
        return m.toarray(), names
    return np.asarray(obj["data"], dtype=float), names


# bibtex (the largest two files: liac-arff's pure-Python reference takes ~10 s each on the busy
# 2-core machine) runs with -m slow; Corel5k keeps a sparse real file in the default run.
@pytest.mark.parametrize(
    "folder,stem,xml,n,d,L,nnz,card",
    [pytest.param(*a, marks=pytest.mark.slow) if a[0] == "bibtex" else a for a in ARFF_FILES],
    ids=[a[1] for a in ARFF_FILES],
)
def test_arff_real_files(tmp_path, folder, stem, xml, n, d, L, nnz, card):
    src = need(folder, f"{stem}.arff.gz")
    xml_path = need(folder, xml)
    dest = tmp_path / "out.zarr"
    convert("arff", [src], str(dest), xml=str(xml_path))
    ds, arr = read_all(dest)
    assert ds.n_rows == n and ds["X"].shape == (n, d) and ds["Y"].shape == (n, L)
    labels = read_label_names(xml_path)
    assert ds.attrs["label_names"] == labels and len(ds.attrs["feature_names"]) == d
    sparse = ds["X"].kind == "csr"
    M, names = liac_arff_matrix(src, sparse)
    li = [names.index(name) for name in labels]
    fi = [i for i in range(len(names)) if i not in set(li)]
    assert M.shape[0] == n
    np.testing.assert_array_equal(dense(arr["X"]), M[:, fi])
    np.testing.assert_array_equal(dense(arr["Y"]), M[:, li])
    assert arr["Y"].dtype == np.float32 and set(np.unique(arr["Y"].data)) <= {1.0}
    if nnz is not None:
        assert ds["X"].nnz == nnz
    if card is not None:
        assert round(ds["Y"].nnz / n, 3) == card


def test_arff_train_plus_test_is_one_dataset(tmp_path):
    """Several ARFF sources concatenate by rows: bibtex train + test = 7395 instances."""
    tr, te = need("bibtex", "bibtex-train.arff.gz"), need("bibtex", "bibtex-test.arff.gz")
    xml = need("bibtex", "bibtex.xml")
    convert_arff([tr, te], str(tmp_path / "all.zarr"), xml=xml, dtype="float32")
    ds, arr = read_all(tmp_path / "all.zarr")
    assert ds.n_rows == 7395 and ds["X"].nnz == 334250 + 173496
    assert arr["X"].dtype == np.float32
    assert round(ds["Y"].nnz / 7395, 3) == 2.402  # the Mulan table's cardinality


def test_arff_gzip_and_plain_give_the_same_store(tmp_path):
    src = need("emotions", "emotions-train.arff.gz")
    plain = tmp_path / "emotions-train.arff"
    plain.write_bytes(gzip.decompress(src.read_bytes()))
    xml = need("emotions", "emotions.xml")
    convert_arff(src, str(tmp_path / "a.zarr"), xml=xml)
    convert_arff(plain, str(tmp_path / "b.zarr"), xml=xml, chunk_bytes=4096, block_rows=50)
    _, a = read_all(tmp_path / "a.zarr")
    _, b = read_all(tmp_path / "b.zarr")
    np.testing.assert_array_equal(a["X"], b["X"])
    assert (a["Y"] != b["Y"]).nnz == 0


def test_arff_general_features_match_liac(tmp_path):
    """Quoted names, comments, nominal string categories, labels not last, n_labels vs xml."""
    arff = pytest.importorskip("arff")
    text = textwrap.dedent("""\
        % a comment
        @RELATION 'toy data'
        @ATTRIBUTE 'lab a' {0,1}
        @ATTRIBUTE x1 NUMERIC
        @ATTRIBUTE color {red,green,blue}
        @attribute x2 real
        @attribute "lab b" {0,1}
        @DATA
        % rows
        1,0.5,green,-2,0
        0,1e-3,blue,3.25,1

        1,0,red,0,1
        """)
    p = tmp_path / "toy.arff"
    p.write_text(text)
    xml = tmp_path / "toy.xml"
    xml.write_text(
        '<labels xmlns="http://mulan.sourceforge.net/labels">'
        '<label name="lab b"></label><label name="lab a"></label></labels>'
    )
    convert_arff(p, str(tmp_path / "t.zarr"), xml=xml)
    ds, arr = read_all(tmp_path / "t.zarr")
    ref = np.asarray(arff.loads(text, encode_nominal=True)["data"], dtype=float)
    np.testing.assert_array_equal(arr["X"], ref[:, [1, 2, 3]])
    np.testing.assert_array_equal(arr["Y"].toarray(), ref[:, [4, 0]])  # the xml's order
    assert ds.attrs["label_names"] == ["lab b", "lab a"]
    assert ds.attrs["feature_names"] == ["x1", "color", "x2"]


def test_arff_sparse_unsorted_and_explicit_zero(tmp_path):
    text = (
        "@relation s\n@attribute a numeric\n@attribute b numeric\n@attribute c numeric\n"
        "@attribute y1 {0,1}\n@attribute y2 {0,1}\n@data\n"
        "{2 1.5,0 2,4 1}\n{}\n{3 0,1 -1}\n"
    )
    p = tmp_path / "s.arff"
    p.write_text(text)
    convert_arff(p, str(tmp_path / "s.zarr"), n_labels=2)
    _, arr = read_all(tmp_path / "s.zarr")
    np.testing.assert_array_equal(arr["X"].toarray(), [[2, 0, 1.5], [0, 0, 0], [0, -1, 0]])
    np.testing.assert_array_equal(arr["Y"].toarray(), [[0, 1], [0, 0], [0, 0]])
    assert arr["X"].has_sorted_indices


# ---------------------------------------------------------------------------------------------
# MATLAB vs scipy.io.loadmat
# ---------------------------------------------------------------------------------------------


def test_mat_bibtex_xc_split(tmp_path):
    src = need("bibtex", "xc_split", "Bibtex.mat")
    m = sio.loadmat(src)
    for xv, yv, n, nnzx, nnzy in (
        ("X", "Y", 4880, 335439, 11684),
        ("Xtest", "Ytest", 2515, 172307, 6078),
    ):
        dest = tmp_path / f"{xv}.zarr"
        convert("mat", [src], str(dest), variables=f"X={xv},Y={yv}")
        ds, arr = read_all(dest)
        assert ds["X"].shape == (n, 1836) and ds["Y"].shape == (n, 159)
        assert ds["X"].nnz == nnzx and ds["Y"].nnz == nnzy
        assert (arr["X"] != m[xv]).nnz == 0
        assert (arr["Y"] != m[yv].T).nnz == 0  # stored labels x instances: transposed
        assert ds.attrs["transposed"] == ["Y"]


@pytest.mark.parametrize(
    "name,d,L,card",
    [("arts", 462, 26, 1.636), ("Business", 438, 30, 1.588), ("Health", 612, 32, 1.662)],
)
def test_mat_yahoo(tmp_path, name, d, L, card):
    src = need("yahoo", f"{name}.mat")
    m = sio.loadmat(src)
    total = 0
    for part, n in (("train", 2000), ("test", 3000)):
        dest = tmp_path / f"{part}.zarr"
        convert_mat(src, str(dest), variables={"X": f"{part}_data", "Y": f"{part}_target"})
        ds, arr = read_all(dest)
        assert ds["X"].shape == (n, d) and ds["X"].kind == "dense"
        assert ds["Y"].shape == (n, L) and ds["Y"].kind == "csr"
        np.testing.assert_array_equal(arr["X"], m[f"{part}_data"])
        # {-1, +1} targets, labels x instances -> 0/1, instances x labels
        np.testing.assert_array_equal(arr["Y"].toarray(), (m[f"{part}_target"].T == 1))
        total += ds["Y"].nnz
    assert round(total / 5000, 3) == card


def test_mat_handwritten_cell_views(tmp_path):
    src = need("mfeat-handwritten", "handwritten.mat")
    m = sio.loadmat(src)
    convert_mat(src, str(tmp_path / "hw.zarr"))
    ds, arr = read_all(tmp_path / "hw.zarr")
    dims = [240, 76, 216, 47, 64, 6]
    assert ds.names == [f"X{i}" for i in range(6)] + ["y"]
    for i, dv in enumerate(dims):
        assert ds[f"X{i}"].shape == (2000, dv) and ds[f"X{i}"].kind == "dense"
        np.testing.assert_array_equal(arr[f"X{i}"], m["X"][0, i])
    # single column: class ids, kept dense, named "y" like every converter's class labels
    np.testing.assert_array_equal(arr["y"], m["Y"])
    assert np.array_equal(np.bincount(arr["y"][:, 0].astype(int))[1:], [200] * 10)


def test_mat_orientation_options(tmp_path):
    p = tmp_path / "o.mat"
    X = np.arange(12.0).reshape(3, 4)
    sio.savemat(p, {"A": X.T, "B": np.array([[1, 0, 1], [0, 1, 1]])})  # both instances-as-columns
    convert_mat(p, str(tmp_path / "o.zarr"), variables="X=A,Y=B", orientation="columns")
    _, arr = read_all(tmp_path / "o.zarr")
    np.testing.assert_array_equal(arr["X"], X)
    np.testing.assert_array_equal(arr["Y"].toarray(), [[1, 0], [0, 1], [1, 1]])
    convert_mat(
        p,
        str(tmp_path / "p.zarr"),
        variables="X=A,Y=B",
        orientation="X=columns",
        labels=False,
        dtype="float32",
    )
    ds, arr = read_all(tmp_path / "p.zarr")
    assert ds["Y"].kind == "dense" and arr["X"].dtype == np.float32


# ---------------------------------------------------------------------------------------------
# svmlight / XC vs scikit-learn
# ---------------------------------------------------------------------------------------------


def test_svmlight_mushrooms(tmp_path):
    datasets = pytest.importorskip("sklearn.datasets")
    src = need("mushrooms", "mushrooms.gz")
    convert("svmlight", [src], str(tmp_path / "m.zarr"))
    ds, arr = read_all(tmp_path / "m.zarr")
    X_ref, y_ref = datasets.load_svmlight_file(str(src))
    assert ds["X"].shape == (8124, 112) and ds.attrs["zero_based"] is False
    assert (arr["X"] != X_ref).nnz == 0
    np.testing.assert_array_equal(arr["y"][:, 0], y_ref)
    assert np.all(np.diff(arr["X"].indptr) == 21) and set(arr["X"].data) == {1.0}
    assert np.array_equal(np.unique(arr["y"], return_counts=True)[1], [3916, 4208])


def test_dense_text_segment(tmp_path):
    src = need("segment", "segment.dat")
    convert("dense_text", [src], str(tmp_path / "s.zarr"))
    ds, arr = read_all(tmp_path / "s.zarr")
    ref = np.loadtxt(src)
    assert ds["X"].shape == (2310, 19)
    np.testing.assert_array_equal(arr["X"], ref[:, :-1])
    np.testing.assert_array_equal(arr["y"][:, 0], ref[:, -1])
    assert np.array_equal(np.bincount(arr["y"][:, 0].astype(int))[1:], [330] * 7)
    assert np.all(arr["X"][:, 2] == 9)  # region-pixel-count is constant


def _random_svm(rng, n, d, L=None, zero_based=False, comments=True):
    lines = []
    for i in range(n):
        k = int(rng.integers(1, 6))  # never an empty line
        idx = np.sort(rng.choice(d, size=k, replace=False)) + (0 if zero_based else 1)
        vals = np.round(rng.normal(size=k), 4)
        feats = " ".join(f"{j}:{v}" for j, v in zip(idx, vals, strict=True))
        if L is None:
            head = str(int(rng.integers(-1, 2)) or 1)
        else:
            labs = np.sort(rng.choice(L, size=int(rng.integers(0, 4)), replace=False))
            head = ",".join(map(str, labs))
        line = f"{head} {feats}".strip() if head else feats
        if comments and i % 7 == 3:
            line += "  # a comment"
        lines.append(line if line else "")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("chunk_bytes", [700, 1 << 20])
def test_svmlight_multilabel_vs_sklearn(tmp_path, rng, chunk_bytes):
    datasets = pytest.importorskip("sklearn.datasets")
    text = _random_svm(rng, 300, 40, L=9, zero_based=True)
    src = tmp_path / "ml.svm"
    src.write_text(text)
    convert_svmlight(
        src,
        str(tmp_path / "ml.zarr"),
        n_features=40,
        n_labels=9,
        chunk_bytes=chunk_bytes,
        block_rows=57,
    )
    ds, arr = read_all(tmp_path / "ml.zarr")
    X_ref, y_ref = datasets.load_svmlight_file(
        str(src), n_features=40, multilabel=True, zero_based=True
    )
    assert ds.attrs["multilabel"] is True and ds["Y"].shape == (300, 9)
    assert (arr["X"] != X_ref).nnz == 0
    Y_ref = np.zeros((300, 9))
    for i, labs in enumerate(y_ref):
        Y_ref[i, [int(v) for v in labs]] = 1
    np.testing.assert_array_equal(arr["Y"].toarray(), Y_ref)


@pytest.mark.parametrize("zero_based", [True, False])
def test_svmlight_zero_one_based_auto_and_explicit(tmp_path, rng, zero_based):
    datasets = pytest.importorskip("sklearn.datasets")
    text = _random_svm(rng, 200, 30, zero_based=zero_based)
    # make sure auto-detection has the evidence it needs (an index 0 iff zero-based)
    text = ("1 0:1.5 3:2\n" if zero_based else "1 1:1.5 30:2\n") + text
    src = tmp_path / "a.svm"
    src.write_text(text)
    X_ref, y_ref = datasets.load_svmlight_file(str(src), zero_based=zero_based)
    for opt in ("auto", zero_based):
        dest = tmp_path / f"{opt}.zarr"
        convert_svmlight(src, str(dest), zero_based=opt, n_features=X_ref.shape[1])
        ds, arr = read_all(dest)
        assert ds.attrs["zero_based"] is zero_based
        assert (arr["X"] != X_ref).nnz == 0
        np.testing.assert_array_equal(arr["y"][:, 0], y_ref)


def test_svmlight_multilabel_auto_detection_beyond_first_line(tmp_path):
    src = tmp_path / "a.svm"
    src.write_text("3 1:1\n0,2 2:1\n 1:5\n")  # single label first, then a list, then none
    convert_svmlight(src, str(tmp_path / "a.zarr"))
    ds, arr = read_all(tmp_path / "a.zarr")
    assert ds.attrs["multilabel"] is True
    np.testing.assert_array_equal(arr["Y"].toarray(), [[0, 0, 0, 1], [1, 0, 1, 0], [0, 0, 0, 0]])


def test_convert_to_fsspec_memory_url():
    src = need("emotions", "emotions-test.arff.gz")
    url = "memory://converters/emotions-test.zarr"
    convert("arff", [src], url, n_labels=6, overwrite=True)
    ds = open_dataset(url, verify="full")
    assert ds["X"].shape == (202, 72) and ds["Y"].shape == (202, 6)


def test_svmlight_unsorted_indices_and_gzip(tmp_path):
    text = "1 5:1 2:2 9:3\n-1\n+1 1:0.5 # trailing\n\n2 3:-1e-3\n"
    plain, gz = tmp_path / "a.svm", tmp_path / "a.svm.bin"
    plain.write_text(text)
    gz.write_bytes(gzip.compress(text.encode()))  # no .gz suffix: detected from content
    for i, src in enumerate((plain, gz)):
        convert_svmlight(src, str(tmp_path / f"{i}.zarr"))
        ds, arr = read_all(tmp_path / f"{i}.zarr")
        assert ds["X"].shape == (4, 9)
        np.testing.assert_array_equal(arr["y"][:, 0], [1, -1, 1, 2])
        assert arr["X"].has_sorted_indices
        np.testing.assert_array_equal(arr["X"].toarray()[0], [0, 2, 0, 0, 1, 0, 0, 0, 3])


def test_xc_format(tmp_path, rng):
    datasets = pytest.importorskip("sklearn.datasets")
    body = _random_svm(rng, 150, 25, L=7, zero_based=True, comments=False)
    src = tmp_path / "train.txt"
    src.write_text("150 25 7\n" + body)
    (tmp_path / "body.svm").write_text(body)
    convert_xc(src, str(tmp_path / "xc.zarr"), chunk_bytes=100)
    ds, arr = read_all(tmp_path / "xc.zarr")
    assert ds["X"].shape == (150, 25) and ds["Y"].shape == (150, 7)
    X_ref, y_ref = datasets.load_svmlight_file(
        str(tmp_path / "body.svm"), n_features=25, multilabel=True, zero_based=True
    )
    assert (arr["X"] != X_ref).nnz == 0
    assert [tuple(np.flatnonzero(r)) for r in arr["Y"].toarray()] == [
        tuple(int(v) for v in labs) for labs in y_ref
    ]
    # header dimensions can be enlarged (e.g. to align a test file with its train file)
    convert_xc(src, str(tmp_path / "wide.zarr"), n_features=30, n_labels=10)
    ds2, _ = read_all(tmp_path / "wide.zarr")
    assert ds2["X"].shape == (150, 30) and ds2["Y"].shape == (150, 10)


# ---------------------------------------------------------------------------------------------
# ratings / SNAP vs numpy.loadtxt
# ---------------------------------------------------------------------------------------------


def _triples(arr):
    A = arr["obs"]
    rows = np.repeat(np.arange(A.shape[0]), np.diff(A.indptr))
    return rows, A.indices.astype(np.int64), A.data


def test_movielens_u_data(tmp_path):
    src = need("movielens-100k", "u.data.gz")
    convert("movielens", [src], str(tmp_path / "u.zarr"), bucket_nnz=30000)
    ds, arr = read_all(tmp_path / "u.zarr")
    assert ds["obs"].kind == "coo" and ds["obs"].shape == (943, 1682) and ds["obs"].nnz == 100000
    ref = np.loadtxt(src, dtype=np.int64)
    ref = ref[np.argsort(ref[:, 0], kind="stable")]  # by row, file order within a row
    r, c, v = _triples(arr)
    np.testing.assert_array_equal(r, ref[:, 0] - 1)
    np.testing.assert_array_equal(c, ref[:, 1] - 1)
    np.testing.assert_array_equal(v, ref[:, 2])
    assert np.array_equal(np.bincount(v.astype(int))[1:], [6110, 11370, 27145, 34174, 21201])
    import zarr  # the stored row array agrees with indptr

    np.testing.assert_array_equal(zarr.open_group(str(tmp_path / "u.zarr"))["obs/row"][:], r)


def test_movielens_folds_share_shape(tmp_path):
    base, test = need("movielens-100k", "u1.base.gz"), need("movielens-100k", "u1.test.gz")
    full = need("movielens-100k", "u.data.gz")
    convert_movielens(base, str(tmp_path / "b.zarr"), shape=(943, 1682))
    convert_movielens(test, str(tmp_path / "t.zarr"), shape="943,1682", dtype="float32")
    db, ab = read_all(tmp_path / "b.zarr")
    dt, at = read_all(tmp_path / "t.zarr")
    assert db["obs"].shape == dt["obs"].shape == (943, 1682)
    assert db["obs"].nnz == 80000 and dt["obs"].nnz == 20000 and at["obs"].dtype == np.float32
    # base + test as one conversion == u.data as a set of (user, item, rating)
    convert_movielens([base, test], str(tmp_path / "bt.zarr"))
    _, abt = read_all(tmp_path / "bt.zarr")
    convert_movielens(full, str(tmp_path / "u.zarr"))
    _, au = read_all(tmp_path / "u.zarr")

    def as_set(a):
        t = np.stack(_triples(a)).T
        return t[np.lexsort(t.T[::-1])]

    np.testing.assert_array_equal(as_set(abt), as_set(au))


@pytest.mark.slow  # the largest text file (841k edges): ~5 s here
def test_snap_epinions(tmp_path):
    src = need("signed-epinions", "soc-sign-epinions.txt.gz")
    convert("snap", [src], str(tmp_path / "e.zarr"))
    ds, arr = read_all(tmp_path / "e.zarr")
    h = ds["obs"]
    assert h.shape == (131828, 131828) and h.nnz == 841372
    r, c, v = _triples(arr)
    assert (v > 0).sum() == 717667 and (v < 0).sum() == 123705 and (r == c).sum() == 573
    ref = np.loadtxt(src, dtype=np.int64, comments="#")
    ref = ref[np.argsort(ref[:, 0], kind="stable")]
    np.testing.assert_array_equal(r, ref[:, 0])
    np.testing.assert_array_equal(c, ref[:, 1])
    np.testing.assert_array_equal(v, ref[:, 2])


def test_ratings_external_sort_many_buckets(tmp_path, rng):
    """Unsorted input, duplicates, empty rows, ratings.dat '::' format, tiny buckets and chunks."""
    n = 3000
    u = rng.integers(1, 60, size=n)
    i = rng.integers(1, 40, size=n)
    r = rng.integers(1, 6, size=n)
    u[:5], i[:5] = 7, 3  # duplicates of one (user, item)
    src = tmp_path / "ratings.dat"
    src.write_text("".join(f"{a}::{b}::{c}::97\n" for a, b, c in zip(u, i, r, strict=True)))
    convert_movielens(
        src, str(tmp_path / "r.zarr"), shape=(80, 40), bucket_nnz=97, chunk_bytes=333, block_rows=7
    )
    ds, arr = read_all(tmp_path / "r.zarr")
    rows, cols, vals = _triples(arr)
    order = np.argsort(u, kind="stable")
    np.testing.assert_array_equal(rows, u[order] - 1)
    np.testing.assert_array_equal(cols, i[order] - 1)
    np.testing.assert_array_equal(vals, r[order])
    assert ds.n_rows == 80 and np.all(np.diff(arr["obs"].indptr)[60:] == 0)


@settings(
    max_examples=3, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 40),
    chunk_bytes=st.integers(1, 400),
    block_rows=st.integers(4, 50),
)
def test_chunk_invariance(tmp_path_factory, seed, n, chunk_bytes, block_rows):
    """Same arrays whatever the parse chunk and row block sizes (1 char .. whole file)."""
    rng = np.random.default_rng(seed)
    tmp = tmp_path_factory.mktemp("inv")
    svm = tmp / "a.svm"
    svm.write_text(_random_svm(rng, n, 12, L=5, zero_based=True))
    ratings = tmp / "r.data"
    ratings.write_text(
        "".join(
            f"{rng.integers(1, 9)}\t{rng.integers(1, 6)}\t{rng.integers(1, 6)}\t0\n"
            for _ in range(n)
        )
    )
    out = {}
    for tag, kw in (("ref", {}), ("small", dict(chunk_bytes=chunk_bytes, block_rows=block_rows))):
        convert_svmlight(
            svm, str(tmp / f"s{tag}.zarr"), multilabel=True, n_features=12, n_labels=5, **kw
        )
        convert_movielens(ratings, str(tmp / f"r{tag}.zarr"), shape=(9, 6), bucket_nnz=7, **kw)
        out[tag] = (read_all(tmp / f"s{tag}.zarr")[1], read_all(tmp / f"r{tag}.zarr")[1])
    (s_ref, r_ref), (s_small, r_small) = out["ref"], out["small"]
    for name in ("X", "Y"):
        assert (s_ref[name] != s_small[name]).nnz == 0
    for a, b in zip(_triples(r_ref), _triples(r_small), strict=True):
        np.testing.assert_array_equal(a, b)


# ---------------------------------------------------------------------------------------------
# dispatcher, options, progress, atomicity
# ---------------------------------------------------------------------------------------------


def test_formats_and_options_documented():
    assert {"svmlight", "xc", "arff", "mat", "movielens", "snap", "dense_text"} <= set(FORMATS)
    for fmt, fn in FORMATS.items():
        opts = format_options(fmt)
        assert {"block_rows", "dtype", "overwrite", "progress"} <= set(opts), fmt
        for name in opts:
            assert name in fn.__doc__, (fmt, name)


def test_progress_and_overwrite(tmp_path):
    src = tmp_path / "a.svm"
    src.write_text("".join(f"1 {k % 5 + 1}:1\n" for k in range(100)))
    seen = []
    dest = str(tmp_path / "a.zarr")
    convert("svmlight", [src], dest, block_rows=40, chunk_bytes=200, progress=seen.append)
    assert seen and seen[-1] == 100 and seen == sorted(seen)
    with pytest.raises(FileExistsError):
        convert("svmlight", [src], dest)
    convert("svmlight", [src], dest, overwrite=True)


def test_failed_conversion_keeps_existing_store(tmp_path):
    good = tmp_path / "a.svm"
    good.write_text("1 1:1\n2 2:1\n")
    dest = tmp_path / "a.zarr"
    convert_svmlight(good, str(dest))
    before = {p.relative_to(dest): p.read_bytes() for p in dest.rglob("*") if p.is_file()}
    bad = tmp_path / "b.svm"
    bad.write_text("1 1:1\n" * 1000 + "2 2:oops\n")
    with pytest.raises(ConversionError, match="line 1001"):
        convert_svmlight(
            bad,
            str(dest),
            overwrite=True,
            block_rows=300,
            chunk_bytes=2000,
            zero_based=False,
            n_features=2,
            multilabel=False,
        )
    after = {p.relative_to(dest): p.read_bytes() for p in dest.rglob("*") if p.is_file()}
    assert before == after
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_malformed_inputs(tmp_path, case):
    for name, content in case["files"].items():
        p = tmp_path / name
        if isinstance(content, bytes):
            p.write_bytes(content)
        else:
            p.write_text(content)
    srcs = [str(tmp_path / s) for s in case.get("srcs", list(case["files"])[:1])]
    opts = {
        k: (str(tmp_path / v) if isinstance(v, str) and v in case["files"] else v)
        for k, v in case.get("options", {}).items()
    }
    dest = tmp_path / "out.zarr"
    with pytest.raises(case["exception"]) as info:
        convert(case["format"], srcs, str(dest), **opts)
    assert case["match"] in str(info.value)
    assert isinstance(info.value, ValueError)
    assert not dest.exists()


def test_malformed_table_is_big_enough():
    assert len(CASES) >= 8
    assert len({c["format"] for c in CASES}) >= 7


# ---------------------------------------------------------------------------------------------
# bounded memory: files several times larger than the cap, converted in a subprocess
# ---------------------------------------------------------------------------------------------

_MEM_SCRIPT = textwrap.dedent("""
    import json, sys
    from ooc_lowrank.io import convert
    fmt, small, big, dest = sys.argv[1:5]
    opts = json.loads(sys.argv[5])
    def status(key):
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024

    convert(fmt, [small], dest + ".warm", **opts)  # imports, zarr/numcodecs set-up
    try:  # reset the peak-RSS mark (VmHWM) to the current RSS (Linux >= 4.0)
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass  # then the peak includes the warm-up: a conservative measurement
    base = status("VmRSS")
    convert(fmt, [big], dest, **opts)
    print(json.dumps({"base": base, "peak": status("VmHWM")}))
""")

#: Imposed cap on the converter's peak RSS growth; the converted files are >= 4x this size.
CAP_MB = 16


def _write_repeated(path, block: str, target_bytes: int) -> int:
    reps = -(-target_bytes // len(block))
    with open(path, "w") as f:
        for _ in range(reps):
            f.write(block)
    return os.path.getsize(path)


def _run_capped(tmp_path, fmt, small, big, opts):
    """Peak RSS growth (MB) of converting ``big`` in a fresh process, after a warm-up run.

    The peak is the process's VmHWM, not ``getrusage().ru_maxrss``: Linux carries ru_maxrss
    over from the forking parent (the pytest process, hundreds of MB by then) into the child.

    ``MALLOC_ARENA_MAX=2``: without it glibc gives each of zarr's codec threads its own malloc
    arena, and their fragmentation adds a constant ~25 MB of RSS that is not held by the
    converter (measured: 37 MB growth without, 11 MB with, same 40 MB svmlight file).
    """
    env = dict(os.environ, MALLOC_ARENA_MAX="2")
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            _MEM_SCRIPT,
            fmt,
            str(small),
            str(big),
            str(tmp_path / "o.zarr"),
            json.dumps(opts),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    res = json.loads(out.stdout.strip().splitlines()[-1])
    return (res["peak"] - res["base"]) / 2**20


@pytest.mark.slow  # 4 s: peak-memory run of a large svmlight file
def test_bounded_memory_svmlight(tmp_path, rng):
    lines = []
    for _ in range(1000):
        idx = np.sort(rng.choice(5000, 40, replace=False)) + 1
        lines.append(
            f"{int(rng.integers(0, 2))} "
            + " ".join(f"{j}:{v:.4f}" for j, v in zip(idx, rng.random(40), strict=True))
        )
    block = "\n".join(lines) + "\n"
    small, big = tmp_path / "small.svm", tmp_path / "big.svm"
    small.write_text(block)
    size = _write_repeated(big, block, 4 * CAP_MB * 2**20)
    opts = dict(
        n_features=5000, zero_based=False, multilabel=False, block_rows=1000, chunk_bytes=1 << 18
    )
    growth = _run_capped(tmp_path, "svmlight", small, big, opts)
    print(f"svmlight: file {size / 2**20:.0f} MB, peak RSS growth {growth:.1f} MB, cap {CAP_MB}")
    assert size >= 4 * CAP_MB * 2**20
    assert growth < CAP_MB, f"peak RSS grew by {growth:.1f} MB converting a {size >> 20} MB file"
    ds = open_dataset(tmp_path / "o.zarr")
    assert ds.n_rows == 1000 * (size // len(block)) and ds["X"].nnz == 40 * ds.n_rows


@pytest.mark.slow
def test_bounded_memory_ratings(tmp_path, rng):
    n = 20000
    cap = CAP_MB + 4  # the external sort holds bucket buffers besides the writer's block
    block = "".join(
        f"{u}\t{i}\t{r}\t881250949\n"
        for u, i, r in zip(
            rng.integers(1, 5001, n), rng.integers(1, 3001, n), rng.integers(1, 6, n), strict=True
        )
    )
    small, big = tmp_path / "small.data", tmp_path / "big.data"
    small.write_text(block)
    size = _write_repeated(big, block, 4 * cap * 2**20)
    opts = dict(shape=[5000, 3000], block_rows=100, chunk_bytes=1 << 18, bucket_nnz=1 << 16)
    growth = _run_capped(tmp_path, "movielens", small, big, opts)
    print(f"movielens: file {size / 2**20:.0f} MB, peak RSS growth {growth:.1f} MB, cap {cap}")
    assert size >= 4 * cap * 2**20
    assert growth < cap, f"peak RSS grew by {growth:.1f} MB converting a {size >> 20} MB file"
    ds = open_dataset(tmp_path / "o.zarr")
    h = ds["obs"]
    assert h.nnz == n * (size // len(block))
    rows = h.read(0, 50)
    assert rows.shape == (50, 3000)
