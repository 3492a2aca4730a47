"""Synthetic data generators: seeded, block-size invariant, bounded memory, statistically sane."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import scipy.sparse as sp

from ooc_lowrank import generators as G
from ooc_lowrank.storage import open_dataset

# Small but spanning two generation chunks (GEN_CHUNK_ROWS = 4096) so chunk seams are exercised.
N = 5000
CASES = {
    "multilabel-dense": ("multilabel", dict(n_rows=N, n_features=30, n_labels=20, n_classes=4)),
    "multilabel-sparse": ("multilabel", dict(n_rows=N, n_features=400, density=0.02, n_labels=20)),
    "imc_toy": ("imc_toy", dict(n_rows=300, n_cols=120, obs_frac=0.2)),
    "lowrank": ("lowrank", dict(n_rows=N, n_cols=300, rank=4, density=0.05, link="rbf")),
    "signed": ("signed", dict(n_rows=N, n_obs_per_row=6)),
    "signed-communities": (
        "signed",
        dict(n_rows=N, model="communities", n_communities=3, density=0.002),
    ),
    "multiview": ("multiview", dict(n_rows=N, view_dims=(5, 7, 3), task="classification")),
}


def _content(ds):
    """Every stored value of a dataset (block layout excluded)."""
    out = {"attrs": json.dumps(ds.attrs, sort_keys=True), "names": sorted(ds.names)}
    for name in ds.names:
        h = ds[name]
        b = h.read(0, ds.n_rows)
        out[name] = (b.indptr.copy(), b.indices.copy(), b.data.copy()) if sp.issparse(b) else b
    return out


def _assert_same(a, b):
    assert a.keys() == b.keys()
    for k in a:
        if isinstance(a[k], tuple):
            for x, y in zip(a[k], b[k], strict=True):
                np.testing.assert_array_equal(x, y, err_msg=k)
        elif isinstance(a[k], dict):
            _assert_same(a[k], b[k])
        elif isinstance(a[k], np.ndarray):
            assert a[k].dtype == b[k].dtype
            np.testing.assert_array_equal(a[k], b[k], err_msg=k)
        else:
            assert a[k] == b[k], k


def _gen(tmp_path, case, tag, **over):
    kind, opts = CASES[case]
    dest = str(tmp_path / f"{case}-{tag}.zarr")
    return G.generate(kind, dest, **{**opts, **over})


def _with_columns(ds):
    c = _content(ds)
    if "columns_store" in ds.attrs:
        c["columns"] = _content(G.open_columns(ds))
    return c


@pytest.mark.parametrize("case", list(CASES))
def test_seeded_and_block_size_invariant(tmp_path, case):
    n = CASES[case][1]["n_rows"]
    ref = _gen(tmp_path, case, "a", seed=7, block_rows=1000)
    assert ref.block_rows == 1000
    ref_c = _with_columns(ref)
    for tag, br in (("b", 777), ("c", n)):
        other = _gen(tmp_path, case, tag, seed=7, block_rows=br)
        assert other.block_rows == br
        c = _with_columns(other)
        c["attrs"] = c["attrs"].replace(f"{case}-{tag}", f"{case}-a")
        if "columns" in c:
            c["columns"]["attrs"] = c["columns"]["attrs"].replace(f"{case}-{tag}", f"{case}-a")
        _assert_same(ref_c, c)
    # another seed changes the data
    other = _content(_gen(tmp_path, case, "e", seed=8, block_rows=n))
    name = sorted(n for n in ref.names if n in other)[0]
    a, b = ref_c[name], other[name]
    assert not all(
        np.array_equal(x, y)
        for x, y in zip(
            a if isinstance(a, tuple) else (a,), b if isinstance(b, tuple) else (b,), strict=True
        )
    )


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    base = tmp_path_factory.mktemp("gen")
    out = {}
    for case, (kind, opts) in CASES.items():
        out[case] = G.generate(kind, str(base / f"{case}.zarr"), seed=3, **opts)
    return out


def test_multilabel_dense(stores):
    ds = stores["multilabel-dense"]
    assert ds.attrs["generator"] == "multilabel"
    assert ds.attrs["params"]["n_labels"] == 20 and ds.attrs["gen_chunk_rows"] == G.GEN_CHUNK_ROWS
    assert [(n, ds[n].kind, ds[n].shape, str(ds[n].dtype)) for n in ds.names] == [
        ("X", "dense", (N, 30), "float32"),
        ("Y", "csr", (N, 20), "float32"),
        ("y", "dense", (N, 1), "float64"),
    ]
    Y = ds["Y"].read()
    per_row = np.diff(Y.indptr)
    assert per_row.min() >= 1 and abs(per_row.mean() - 3.0) < 0.2
    assert np.all(Y.data == 1.0)
    rows = np.repeat(np.arange(N), per_row)
    assert np.all(np.diff(Y.indices)[rows[1:] == rows[:-1]] > 0)  # sorted, no duplicate labels
    y = ds["y"].read().ravel()
    assert set(np.unique(y)) == {0.0, 1.0, 2.0, 3.0}
    X = ds["X"].read()
    assert abs(float(X.std()) - 1.0) < 0.15


def test_multilabel_sparse(stores):
    ds = stores["multilabel-sparse"]
    X = ds["X"].read()
    assert ds["X"].kind == "csr" and X.dtype == np.float32
    nnz = np.diff(X.indptr)
    assert nnz.min() >= 1 and abs(nnz.mean() - 0.02 * 400) < 1.5
    norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
    np.testing.assert_allclose(norms, 1.0, rtol=1e-5)
    assert X.has_sorted_indices and np.all(X.data > 0)
    assert np.diff(ds["Y"].read().indptr).min() >= 1


def _p_at_1(scores, Y):
    top = np.argmax(scores, axis=1)
    return float(np.mean(Y[np.arange(len(top)), top] > 0))


def _ridge(F, Y, lam):
    return np.linalg.solve(F.T @ F + lam * np.eye(F.shape[1]), F.T @ Y)


def test_multilabel_labels_are_nonlinear(tmp_path):
    """Ridge on RBF random features beats ridge on the raw features by a clear P@1 margin."""
    n, ntr = 4000, 3000
    ds = G.generate_multilabel(str(tmp_path / "nl.zarr"), n_rows=n, seed=11)
    X = ds["X"].read().astype(np.float64)
    Y = ds["Y"].read().toarray()
    Xl = np.hstack([X, np.ones((n, 1))])
    lin = max(_p_at_1(Xl[ntr:] @ _ridge(Xl[:ntr], Y[:ntr], lam), Y[ntr:]) for lam in (1.0, 10.0))
    rng = np.random.default_rng(0)  # an independent draw, not the generator's own features
    D, g = 1000, ds.attrs["params"]["gamma"]
    om = rng.normal(0, math.sqrt(2 * g), (X.shape[1], D))
    ph = rng.uniform(0, 2 * np.pi, D)
    Phi = math.sqrt(2 / D) * np.cos(X @ om + ph)
    rbf = max(_p_at_1(Phi[ntr:] @ _ridge(Phi[:ntr], Y[:ntr], lam), Y[ntr:]) for lam in (0.01, 0.1))
    majority = Y[:ntr].mean(axis=0).max()
    assert rbf > lin + 0.15, (lin, rbf)
    assert lin > majority  # the linear part is not zero either: a fair comparison


def test_imc_toy(stores):
    ds = stores["imc_toy"]
    cols = G.open_columns(ds)
    assert ds.names == ["X", "obs", "A"] and cols.names == ["X"]  # a feature store (issue 23)
    X, A, Y = ds["X"].read(), ds["A"].read(), cols["X"].read()
    assert X.shape == (300, 50) and Y.shape == (120, 50) and A.shape == (300, 120)
    resid = A - X @ Y.T
    assert abs(resid.std() - 0.1) < 0.01
    assert np.linalg.matrix_rank(X @ Y.T) == 50
    obs = ds["obs"].read()
    assert abs(obs.nnz / A.size - 0.2) < 0.02
    rows = np.repeat(np.arange(300), np.diff(obs.indptr))
    np.testing.assert_array_equal(obs.data, A[rows, obs.indices])


def _check_coo_canonical(h):
    """Sorted by row, strictly increasing columns within a row (so no duplicate (i, j))."""
    b = h.read()
    rows = np.repeat(np.arange(b.shape[0]), np.diff(b.indptr))
    same = rows[1:] == rows[:-1]
    assert np.all(np.diff(b.indices)[same] > 0)
    import zarr

    stored_rows = np.asarray(zarr.open_group(h.url, mode="r")[f"{h.name}/row"][:])
    np.testing.assert_array_equal(stored_rows, rows)
    return b, rows


def test_lowrank(tmp_path):
    ds = G.generate_lowrank(
        str(tmp_path / "lr.zarr"),
        n_rows=3000,
        n_cols=400,
        rank=5,
        noise_std=0.0,
        n_obs_per_row=30,
        seed=2,
    )
    cols = G.open_columns(ds)
    assert sorted(ds.names) == ["U_true", "X", "obs"]
    assert sorted(cols.names) == ["V_true", "X"]
    U, V = ds["U_true"].read(), cols["V_true"].read()
    assert U.shape == (3000, 5) and V.shape == (400, 5)
    assert np.linalg.matrix_rank(U) == 5 and np.linalg.matrix_rank(V) == 5
    M = U @ V.T
    assert np.linalg.matrix_rank(M) == 5 and 0.5 < M.std() < 2.0
    obs, rows = _check_coo_canonical(ds["obs"])
    assert np.all(np.diff(obs.indptr) == 30)
    np.testing.assert_allclose(obs.data, M[rows, obs.indices], rtol=1e-12, atol=1e-12)
    # the linear link: U is a linear function of the stored features
    X = ds["X"].read().astype(np.float64)
    coef, *_ = np.linalg.lstsq(X, U, rcond=None)
    np.testing.assert_allclose(X @ coef, U, atol=1e-6)
    # noise and density
    ds2 = G.generate_lowrank(
        str(tmp_path / "lr2.zarr"),
        n_rows=3000,
        n_cols=400,
        rank=5,
        noise_std=0.3,
        density=0.1,
        seed=2,
        n_row_features=0,
    )
    assert "X" not in ds2.names
    obs2, rows2 = _check_coo_canonical(ds2["obs"])
    assert abs(obs2.nnz / (3000 * 400) - 0.1) < 0.005
    M2 = ds2["U_true"].read() @ G.open_columns(ds2)["V_true"].read().T
    assert abs((obs2.data - M2[rows2, obs2.indices]).std() - 0.3) < 0.01


def test_lowrank_rbf_stores(stores):
    ds = stores["lowrank"]
    _check_coo_canonical(ds["obs"])
    assert ds.attrs["params"]["link"] == "rbf"
    assert np.linalg.matrix_rank(ds["U_true"].read()) == 4


def test_signed_lowrank(stores):
    ds = stores["signed"]
    assert ds["obs"].shape == (N, N)
    obs, rows = _check_coo_canonical(ds["obs"])
    assert set(np.unique(obs.data)) == {-1.0, 1.0}
    assert np.all(np.diff(obs.indptr) == 6)
    assert not np.any(rows == obs.indices)  # no self-loops
    assert abs(np.mean(obs.data > 0) - 0.5) < 0.03  # bias 0: balanced signs
    U, V = ds["U_true"].read(), ds["V_true"].read()
    latent = np.sign(np.einsum("ij,ij->i", U[rows], V[obs.indices]))
    agree = np.mean(latent == obs.data)
    assert abs(agree - 0.95) < 0.015  # flip = 0.05
    # bias shifts the balance
    ds2 = G.generate_signed(ds.url + ".b", n_rows=2000, bias=1.0, seed=1)
    assert 0.7 < np.mean(ds2["obs"].read().data > 0) < 0.9


def test_signed_communities(stores):
    ds = stores["signed-communities"]
    obs, rows = _check_coo_canonical(ds["obs"])
    c = ds["community"].read().ravel()
    assert set(np.unique(c)) == {0.0, 1.0, 2.0}
    assert abs(obs.nnz / (N * (N - 1)) - 0.002) < 0.0002
    expect = np.where(c[rows] == c[obs.indices], 1.0, -1.0)
    assert abs(np.mean(expect == obs.data) - 0.95) < 0.015
    assert abs(np.mean(obs.data > 0) - (1 / 3 * 0.95 + 2 / 3 * 0.05)) < 0.02


def test_multiview(tmp_path, stores):
    ds = stores["multiview"]
    y = ds["y"].read().ravel()
    assert set(np.unique(y)) == {-1.0, 1.0} and abs(np.mean(y > 0) - 0.5) < 0.03
    reg = G.generate_multiview(
        str(tmp_path / "mv.zarr"),
        n_rows=3000,
        view_dims=(4, 6, 3, 2),
        rank=3,
        noise_std=0.05,
        seed=5,
    )
    assert reg.names == ["X0", "X1", "X2", "X3", "y"]
    views = [reg[f"X{p}"].read().astype(np.float64) for p in range(4)]
    assert [v.shape[1] for v in views] == [4, 6, 3, 2]
    thetas = [np.asarray(t) for t in reg.attrs["theta_true"]]
    f = np.ones((3000, 3))
    for th, x in zip(thetas, views, strict=True):  # MVM-9 with z = [x; 1]
        f *= np.hstack([x, np.ones((3000, 1))]) @ th
    resid = reg["y"].read().ravel() - f.sum(axis=1)
    assert abs(resid.std() - 0.05) < 0.005
    assert f.sum(axis=1).std() > 0.2  # the interactions carry signal


def test_dispatcher_progress_and_errors(tmp_path):
    seen = []
    dest = str(tmp_path / "p.zarr")
    ds = G.generate("multiview", dest, n_rows=9000, progress=seen.append)
    assert seen == [4096, 8192, 9000] and ds.n_rows == 9000
    before = sorted(p.name for p in (tmp_path / "p.zarr").rglob("*"))
    with pytest.raises(FileExistsError, match="overwrite"):
        G.generate("multiview", dest, n_rows=10)
    assert sorted(p.name for p in (tmp_path / "p.zarr").rglob("*")) == before
    assert open_dataset(dest).n_rows == 9000
    with pytest.raises(ValueError, match="unknown generator"):
        G.generate("nope", dest, n_rows=10)
    with pytest.raises(TypeError, match="no option.*n_lables.*valid options"):
        G.generate("multilabel", str(tmp_path / "q.zarr"), n_rows=10, n_lables=3)
    with pytest.raises(TypeError, match="seed"):
        G.generate("signed", str(tmp_path / "q.zarr"), n_rows=10, seed=-1)
    with pytest.raises(ValueError, match="either density or n_obs_per_row"):
        G.generate("lowrank", str(tmp_path / "q.zarr"), n_rows=10, density=0.1, n_obs_per_row=3)
    with pytest.raises(ValueError, match="n_rows must be >= 1"):
        G.generate("imc-toy", str(tmp_path / "q.zarr"), n_rows=0)
    assert set(G.GENERATORS) == {"multilabel", "imc_toy", "lowrank", "signed", "multiview"}


# Peak RSS is read from VmHWM: ru_maxrss would carry the pytest parent's RSS through fork+exec
# on Linux and could hide the child's growth.
_MEM_SCRIPT = textwrap.dedent("""
    import json, sys
    from ooc_lowrank import generators as G

    def peak():
        with open("/proc/self/status") as f:
            return next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmHWM:"))

    dest, kind, n_rows = sys.argv[1], sys.argv[2], int(sys.argv[3])
    opts = json.loads(sys.argv[4])
    G.generate(kind, dest + ".warm", n_rows=5000, **opts)  # imports, first-touch, zarr set-up
    base = peak()
    ds = G.generate(kind, dest, n_rows=n_rows, **opts)
    print(json.dumps({"base": base, "peak": peak(), "bytes": ds.info()["bytes_on_disk"]}))
""")


@pytest.mark.parametrize(
    "kind,n_rows,opts",
    [
        # ~200 MB dense float32 + labels.  Memory is O(block_rows + GEN_CHUNK_ROWS) rows: with the
        # default 16 MB blocks the writer's buffers alone are ~50 MB, so use 4096-row (8 MB) blocks
        # to see the bound with a store small enough for a unit test.
        ("multilabel", 100_000, {"n_features": 500, "block_rows": 4096}),
    ],
)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_bounded_memory(tmp_path, kind, n_rows, opts):
    """Peak RSS growth while writing a ~200 MB store stays well under the store's size."""
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            _MEM_SCRIPT,
            str(tmp_path / "big.zarr"),
            kind,
            str(n_rows),
            json.dumps(opts),
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    r = json.loads(out.stdout.strip().splitlines()[-1])
    growth = r["peak"] - r["base"]
    assert r["bytes"] > 150e6, r
    assert growth < 0.4 * r["bytes"], (growth / 2**20, r["bytes"] / 2**20)  # MB


@pytest.mark.parametrize("m,L,k", [(100, 50, 7), (40, 1000, 20), (10, 5, 5), (10, 5, 9), (0, 5, 0)])
@pytest.mark.parametrize("ties", ["none", "one", "many"])
def test_top_columns_equals_the_stable_argsort(m, L, k, ties):
    """The partition-based top-k of the label generator keeps exactly the columns (and order,
    ties by column) of a stable ``argsort(-s)[:, :k]``, so generated stores did not change."""
    from ooc_lowrank.generators import _top_columns

    s = np.random.default_rng(m + L + k).standard_normal((m, L)).astype(np.float32)
    if ties == "one":
        s[:, 3] = s[:, 4]
    elif ties == "many":
        s = np.round(s)
    want = np.argsort(-s, axis=1, kind="stable")[:, : min(k, L)]
    np.testing.assert_array_equal(_top_columns(s, k)[:, : min(k, L)], want)
