"""Object storage for real: a local S3-compatible server (moto in server mode, with IAM-checked
credentials) on 127.0.0.1.

Convert / write a store to ``s3://``, fit from ``s3://`` on a 2-worker LocalCluster, predict
to ``s3://``, the completion-marker-last rule under an interrupted write, and a clear error
for missing or wrong credentials.  Skipped (with the reason) when moto or s3fs is missing or
the server does not start.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
import scipy.sparse as sp

pytest.importorskip("s3fs", reason="s3fs is not installed (pip install 'ooc-lowrank[test]')")
pytest.importorskip("moto", reason="moto[server] is not installed (pip install 'moto[server]')")
pytest.importorskip("boto3", reason="boto3 (a moto dependency) is not installed")

from ooc_lowrank import StoreError  # noqa: E402
from ooc_lowrank.storage import (  # noqa: E402
    DatasetWriter,
    StoreAccessError,
    open_dataset,
    write_arrays,
)

BUCKET = "ooc-test"
_CRED_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _clear_s3fs_cache():
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()


@pytest.fixture(scope="module")
def s3():
    """A moto S3 server with credential checks; AWS_* env set for this process and for the
    processes it starts (the LocalCluster's workers).  Yields the endpoint URL."""
    import boto3

    port = _free_port()
    env = dict(os.environ, INITIAL_NO_AUTH_ACTION_COUNT="3")  # then every request is signed
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                pytest.skip(f"moto server exited at start (code {proc.returncode})")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.skip(f"moto server did not listen on 127.0.0.1:{port} within 30 s")
                time.sleep(0.1)
        kw = dict(endpoint_url=url, region_name="us-east-1")
        iam = boto3.client("iam", aws_access_key_id="boot", aws_secret_access_key="boot", **kw)
        iam.create_user(UserName="ooc")
        iam.put_user_policy(
            UserName="ooc",
            PolicyName="all",
            PolicyDocument='{"Version": "2012-10-17", "Statement": [{"Effect": "Allow", '
            '"Action": "*", "Resource": "*"}]}',
        )
        key = iam.create_access_key(UserName="ooc")["AccessKey"]
        saved = {k: os.environ.get(k) for k in (*_CRED_ENV, "AWS_ENDPOINT_URL_S3", "AWS_REGION")}
        os.environ.update(
            AWS_ACCESS_KEY_ID=key["AccessKeyId"],
            AWS_SECRET_ACCESS_KEY=key["SecretAccessKey"],
            AWS_ENDPOINT_URL_S3=url,
            AWS_REGION="us-east-1",
        )
        os.environ.pop("AWS_SESSION_TOKEN", None)
        os.environ.pop("AWS_PROFILE", None)
        _clear_s3fs_cache()
        import s3fs

        s3fs.S3FileSystem().mkdir(BUCKET)
        try:
            yield url
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            _clear_s3fs_cache()
    finally:
        proc.terminate()
        proc.wait(10)


def _set_worker_env(env):
    """Run on each worker: set (value) or unset (None) environment variables."""
    for k, v in env.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    _clear_s3fs_cache()


@pytest.fixture
def s3_cluster(s3, cluster_client):
    """The session's 2-worker LocalCluster with this server's AWS_* variables set on its
    workers for the test (removed afterwards)."""
    import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import us
    keys = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL_S3", "AWS_REGION")
    cluster_client.run(_set_worker_env, {k: os.environ[k] for k in keys})
    try:
        yield cluster_client
    finally:
        cluster_client.run(_set_worker_env, dict.fromkeys(keys))
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


def _data(seed=0, n=90, d=5, L=4):
    r = np.random.default_rng(seed)
    X = r.standard_normal((n, d))
    Y = sp.csr_matrix((r.random((n, L)) < 0.35).astype(np.float32))
    return X, Y


@pytest.fixture(scope="module")
def train(s3):
    """``(url, X, Y)``: one small store (2 row blocks) written once to s3 for several tests
    (each request to the local server costs ~30 ms on a busy machine)."""
    X, Y = _data(seed=1, n=120)
    url = f"s3://{BUCKET}/train.zarr"
    write_arrays(url, {"X": X, "Y": Y}, block_rows=60)
    return url, X, Y


def test_convert_and_write_stores_to_s3(s3, train, tmp_path):
    from ooc_lowrank.io import convert

    url, X, Y = train  # written by write_arrays (DatasetWriter)
    w = open_dataset(url, verify="full")
    np.testing.assert_array_equal(w["X"].read(), X)
    np.testing.assert_array_equal(w["Y"].read().toarray(), Y.toarray())
    lines = []
    for i in range(40):
        labels = ",".join(str(j) for j in Y[i].indices)
        feats = " ".join(f"{j + 1}:{X[i, j]:.6g}" for j in range(X.shape[1]))
        lines.append(f"{labels} {feats}")
    src = tmp_path / "toy.svm"
    src.write_text("\n".join(lines) + "\n")
    dest = f"s3://{BUCKET}/conv.zarr"
    convert("svmlight", [str(src)], dest, multilabel=True, n_labels=Y.shape[1])
    local = tmp_path / "conv.zarr"
    convert("svmlight", [str(src)], str(local), multilabel=True, n_labels=Y.shape[1])
    ds, ref = open_dataset(dest, verify="full"), open_dataset(str(local))
    assert ds.names == ref.names and ds.n_rows == 40 and ds.attrs == ref.attrs
    for name in ds.names:
        a, b = ds[name].read(), ref[name].read()
        if sp.issparse(a):
            a, b = a.toarray(), b.toarray()
        np.testing.assert_array_equal(a, b)


# slow: the workers import s3fs and compile GIMC's kernels (cold cache) for this test alone.
# Reading and writing s3 stores is tested in process by the other tests here, and a fit on the
# session's LocalCluster equal to the threaded fit by test_engine / test_cluster_alignment.
@pytest.mark.slow
def test_fit_from_s3_on_a_local_cluster_and_predict_to_s3(s3, train, s3_cluster):
    import dask

    from ooc_lowrank.gimc import GIMC

    url, X, Y = train
    kw = dict(n_features_map=6, max_iter=2, tol=0.0, random_state=0)
    local = GIMC(**kw).fit(open_dataset(url))
    with dask.config.set(scheduler=s3_cluster):
        est = GIMC(**kw).fit(open_dataset(url))  # the workers read the blocks from s3
        out = est.predict_to_store(open_dataset(url), f"s3://{BUCKET}/pred.zarr", top_k=2)
    np.testing.assert_allclose(est.coef_, local.coef_, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(est.components_, local.components_, rtol=1e-9, atol=1e-12)
    pred = open_dataset(out, verify="full")
    assert pred.n_rows == X.shape[0] and pred.attrs["top_k"] == 2
    labels, _ = local.predict_topk(X, k=2)
    np.testing.assert_array_equal(pred["labels"].read(), labels)


def _write(url, X, *, overwrite=False, fail_after=None, block_rows=20):
    with DatasetWriter(url, block_rows=block_rows, overwrite=overwrite) as w:
        w.add_dense("X", n_cols=X.shape[1], dtype="float32")
        for i, s in enumerate(range(0, X.shape[0], block_rows)):
            if fail_after is not None and i == fail_after:
                raise RuntimeError("simulated crash mid-write")
            w.append(X=X[s : s + block_rows])


def _listing(prefix):
    import s3fs

    fs = s3fs.S3FileSystem()
    fs.invalidate_cache()
    return sorted(p for p in fs.find(f"{BUCKET}") if p.startswith(f"{BUCKET}/{prefix}"))


class _FlakyCopies:
    """An fsspec filesystem proxy whose ``copy`` fails at the ``n``-th call (a lost
    connection while a finished store is copied into place)."""

    def __init__(self, fs, n):
        self._fs, self._n, self.calls = fs, n, 0

    def __getattr__(self, name):
        return getattr(self._fs, name)

    def copy(self, *a, **k):
        self.calls += 1
        if self.calls == self._n:
            raise ConnectionError("simulated network loss during commit")
        return self._fs.copy(*a, **k)


def test_interrupted_writes_leave_no_valid_store_and_keep_the_old_one(s3, train, monkeypatch):
    from ooc_lowrank import storage

    keep, X_old, _ = train
    X_new, _ = _data(seed=3, n=60)
    before = _listing("train.zarr")
    # 1. a writer that raises mid-way over an existing store: the old store is intact
    with pytest.raises(RuntimeError, match="simulated crash"):
        _write(keep, X_new, overwrite=True, fail_after=1)
    np.testing.assert_array_equal(open_dataset(keep, verify="full")["X"].read(), X_old)
    assert _listing("train.zarr") == before
    assert _listing(".train.zarr") == []  # the temporary store was removed
    # 2. a writer that raises mid-way at a new URL: nothing that opens as a store
    fresh = f"s3://{BUCKET}/fresh.zarr"
    with pytest.raises(RuntimeError, match="simulated crash"):
        _write(fresh, X_new, fail_after=1)
    with pytest.raises(StoreError, match="no store at this location"):
        open_dataset(fresh)
    # 3. the commit (copy into place) interrupted after some files: the root metadata holding
    #    the completion marker is copied last, so the partial copy never opens as valid
    real_fs = storage._fs
    monkeypatch.setattr(
        storage, "_fs", lambda loc: (_FlakyCopies(real_fs(loc)[0], 3), real_fs(loc)[1])
    )
    with pytest.raises(ConnectionError):
        _write(fresh, X_new)
    monkeypatch.setattr(storage, "_fs", real_fs)
    partial = _listing("fresh.zarr")
    assert partial and not any(p.endswith("fresh.zarr/zarr.json") for p in partial), partial
    with pytest.raises(StoreError):  # ... no store that opens as valid
        open_dataset(fresh)


@pytest.fixture
def credentials(monkeypatch):
    """Change the AWS credentials for one test (the s3fs instance cache is cleared around)."""

    def set_(**env):
        for k in _CRED_ENV:
            monkeypatch.delenv(k, raising=False)
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        _clear_s3fs_cache()

    yield set_
    monkeypatch.undo()
    _clear_s3fs_cache()


def test_missing_or_wrong_credentials_give_a_clear_error(s3, train, credentials, tmp_path):
    url, X, _ = train
    good_key = os.environ["AWS_ACCESS_KEY_ID"]
    cases = {
        "wrong": dict(AWS_ACCESS_KEY_ID=good_key, AWS_SECRET_ACCESS_KEY="not-the-secret"),
        "missing": dict(
            AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"),
            AWS_CONFIG_FILE=str(tmp_path / "none"),
            AWS_EC2_METADATA_DISABLED="true",
        ),
    }
    for case, env in cases.items():
        credentials(**env)
        for action in ("open", "write"):
            with pytest.raises(StoreAccessError) as e:
                if action == "open":
                    open_dataset(url)
                else:
                    write_arrays(f"s3://{BUCKET}/new-{case}.zarr", {"X": X})
            msg = str(e.value)
            assert isinstance(e.value, PermissionError), (case, action)
            assert f"s3://{BUCKET}/" in msg and "credentials" in msg, (case, action, msg)
            assert "AWS_ACCESS_KEY_ID" in msg and "AWS_ENDPOINT_URL_S3" in msg, msg
            assert e.value.__cause__ is None and e.value.__suppress_context__, (case, action)


def test_checkpoint_on_s3_resumes_to_the_same_model(s3):
    from ooc_lowrank.glrl import GreedyLowRank

    r = np.random.default_rng(6)
    M = r.standard_normal((30, 2)) @ r.standard_normal((2, 25))
    rows, cols = np.nonzero(r.random(M.shape) < 0.5)
    X, shape = (rows, cols, M[rows, cols]), M.shape
    kw = dict(n_components=5, power_iter=4, random_state=0)
    ref = GreedyLowRank(**kw).fit(X, shape=shape)

    def crash(it, elapsed, obj):
        if it == 3:
            raise KeyboardInterrupt

    ck = f"s3://{BUCKET}/fit.ckpt"
    with pytest.raises(KeyboardInterrupt):
        GreedyLowRank(**kw, callback=crash).fit(X, shape=shape, checkpoint=ck, checkpoint_every=1)
    files = [p.rsplit("/", 1)[-1] for p in _listing("fit.ckpt")]
    assert "state.json" in files and len(files) == 2, files  # state + one arrays file
    res = GreedyLowRank(**kw).fit(X, shape=shape, checkpoint=ck, checkpoint_every=1)
    np.testing.assert_array_equal(res.U_, ref.U_)
    np.testing.assert_array_equal(res.theta_, ref.theta_)


def test_table_converters_read_s3_for_every_kind(s3, tmp_path):
    """Parquet (a glob, a Hive-partitioned folder) and CSV on s3://, one kind each; the store
    written to s3:// and its vocabularies read back from there."""
    import pyarrow as pa
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq
    import s3fs

    from ooc_lowrank.io import convert, read_vocabulary

    fs = s3fs.S3FileSystem()
    base = f"{BUCKET}/tables"
    for k in range(2):
        t = pa.table({"u": [f"u{k}", "u9"], "i": [k, 5 + k], "r": [1.0 + k, 3.0]})
        with fs.open(f"{base}/ratings/part-{k}.parquet", "wb") as f:
            pq.write_table(t, f)
        t = pa.table({"doc": [f"d{k}"], "tags": [["x", "y"][: k + 1]]})
        with fs.open(f"{base}/docs/year={2020 + k}/p.parquet", "wb") as f:
            pq.write_table(t, f)
    with fs.open(f"{base}/feat.csv", "wb") as f:
        pcsv.write_csv(pa.table({"a": [1.0, 2.0], "b": [3, 4]}), f)
    dest = f"s3://{BUCKET}/tables/obs.zarr"
    convert(
        "parquet",
        f"s3://{base}/ratings/*.parquet",
        dest,
        kind="interactions",
        row_key="u",
        col_key="i",
        value="r",
    )
    assert read_vocabulary(dest, "rows").to_pylist() == ["u0", "u1", "u9"]
    assert open_dataset(dest)["obs"].read().toarray().tolist() == [
        [1, 0, 0, 0],
        [0, 2, 0, 0],
        [0, 0, 3, 3],
    ]
    convert(
        "parquet",
        f"s3://{base}/docs",
        str(tmp_path / "l.zarr"),
        kind="labels",
        label_list="tags",
        class_column=None,
        row_key="doc",
    )
    lab = open_dataset(tmp_path / "l.zarr")
    assert lab["Y"].read().toarray().tolist() == [[1, 0], [1, 1]]
    assert lab.attrs["label_names"] == ["x", "y"]
    convert(
        "csv",
        f"s3://{base}/feat.csv",
        str(tmp_path / "f.zarr"),
        kind="features",
        feature_columns="a,b",
    )
    assert open_dataset(tmp_path / "f.zarr")["X"].read().tolist() == [[1, 3], [2, 4]]
    convert(
        "parquet",
        f"s3://{base}/ratings",
        str(tmp_path / "v.zarr"),
        kind="views",
        views="user=u;item=i",
        target="r",
    )
    v = open_dataset(tmp_path / "v.zarr")
    assert v["X0"].shape == (4, 4) and v["y"].read().ravel().tolist() == [1.0, 3.0, 2.0, 3.0]

def test_store_replaced_on_s3_while_read_is_named(s3):
    url = f"s3://{BUCKET}/replaced.zarr"
    X, _ = _data(seed=3, n=60)
    _write(url, X, overwrite=True)
    h = open_dataset(url)["X"]
    np.testing.assert_array_equal(h.read(0, 20), X[:20].astype(np.float32))
    _write(url, X[::-1].copy(), overwrite=True)  # same shape, other values, a new identity
    with pytest.raises(StoreError, match="was replaced while being read"):
        h.read(20, 40)
