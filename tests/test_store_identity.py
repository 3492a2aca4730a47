"""Store identity: a store replaced while it is read stops the reader with StoreReplacedError.

Every store version carries a ``store_id`` drawn at creation; each block read checks that the
store under the path is still the version opened (issue 23, item 2), so a fit never mixes the
blocks of two stores into one model.
"""

from __future__ import annotations

import pickle
import uuid

import numpy as np
import pytest
import scipy.sparse as sp
import zarr

from ooc_lowrank import GIMC, StoreError
from ooc_lowrank.storage import open_dataset, rebuild_manifest, write_arrays

REPLACED = "was replaced while being read"


def _arrays(seed, n=120, d=6, L=5, density=0.3):
    r = np.random.default_rng(seed)
    X = r.standard_normal((n, d)).astype(np.float32)
    Y = r.random((n, L)) < density
    Y[np.arange(n), r.integers(0, L, n)] = True  # every row has a label
    return X, sp.csr_matrix(Y.astype(np.float32))


def _write(url, seed, **kw):
    X, Y = _arrays(seed, **kw)
    return write_arrays(url, {"X": X, "Y": Y}, block_rows=30, overwrite=True)


def _replace_after_first_iteration(url, seed=1, **kw):
    """A GIMC callback that overwrites the store (as ``convert --overwrite`` does) once."""

    def cb(it, elapsed, obj):
        if it == 1:
            _write(url, seed, **kw)

    return cb


@pytest.mark.parametrize(
    "shape",
    [{}, {"density": 0.6}],
    ids=["same-shaped", "other-structure"],
)
def test_store_replaced_between_passes_stops_the_fit(tmp_path, shape):
    url = str(tmp_path / "d.zarr")
    _write(url, 0)
    g = GIMC(
        n_features_map=8, max_iter=3, cache_bytes=0, random_state=0,
        callback=_replace_after_first_iteration(url, **shape),
    )  # fmt: skip
    with pytest.raises(StoreError, match=REPLACED) as info:
        g.fit(url)
    err = info.value
    assert type(err).__name__ == "StoreReplacedError"
    assert err.old_id != err.new_id and err.new_id == open_dataset(url).store_id
    assert "indptr" not in str(err) and "corrupt" not in str(err)


def _read_replace_read(url, h, replace):
    assert h.read(0, 30).shape[0] == 30
    replace()
    with pytest.raises(StoreError, match=REPLACED):
        h.read(30, 60)


@pytest.mark.parametrize("array", ["X", "Y"])
def test_block_read_after_replacement_is_refused_local_and_memory(tmp_path, array):
    for url in (str(tmp_path / "d.zarr"), f"memory://ident-{uuid.uuid4().hex}/d.zarr"):
        ds = _write(url, 0)
        assert ds.store_id and ds.store_id == open_dataset(url).store_id
        _read_replace_read(url, ds[array], lambda url=url: _write(url, 1))
        # a pickled handle (as sent to a distributed worker) carries the opened version
        h = pickle.loads(pickle.dumps(open_dataset(url)[array]))
        _read_replace_read(url, h, lambda url=url: _write(url, 2, density=0.6))


def test_removed_store_is_named_as_such(tmp_path):
    import shutil

    url = str(tmp_path / "d.zarr")
    h = _write(url, 0)["Y"]
    h.read(0, 30)
    shutil.rmtree(url)
    with pytest.raises(StoreError, match=r"replaced while being read \(identity \w+ -> removed"):
        h.read(30, 60)


def test_unchanged_store_reads_and_new_writes_get_new_identities(tmp_path):
    url = str(tmp_path / "d.zarr")
    ids = {_write(url, 0).store_id for _ in range(3)}
    assert len(ids) == 3  # even identical contents: a new version each write
    h = open_dataset(url)["Y"]
    first = h.read(0, 30).toarray()
    assert np.array_equal(h.read(0, 30).toarray(), first)


def test_store_without_identity_opens_reads_and_survives_rebuild_manifest(tmp_path):
    url = str(tmp_path / "d.zarr")
    X, _ = _arrays(0)
    _write(url, 0)
    g = zarr.open_group(url, mode="r+")
    meta = dict(g.attrs["ooc_lowrank"])
    del meta["store_id"], meta["manifest"]  # as written before identities and manifests
    g.attrs["ooc_lowrank"] = meta
    with pytest.warns(UserWarning, match="rebuild_manifest"):
        ds = open_dataset(url)
    assert ds.store_id.startswith("legacy-")
    h = ds["X"]
    assert np.array_equal(h.read(0, 30), X[:30])
    rebuild_manifest(url)  # rewrites the metadata in place: the same store
    assert np.array_equal(h.read(30, 60), X[30:60])
    _write(url, 1)  # a real replacement is still seen
    with pytest.raises(StoreError, match=REPLACED):
        h.read(60, 90)


def test_checkpoint_of_a_replaced_store_is_refused(tmp_path):
    from ooc_lowrank._checkpoint import CheckpointMismatchError

    url, ck = str(tmp_path / "d.zarr"), str(tmp_path / "ck")
    _write(url, 0)
    kw = dict(n_features_map=8, max_iter=3, cache_bytes=0, random_state=0)

    def crash(it, elapsed, obj):
        if it == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        GIMC(**kw, callback=crash).fit(url, checkpoint=ck, checkpoint_every=1)
    _write(url, 1)  # same shape, other data: resuming would mix the two stores
    with pytest.raises(CheckpointMismatchError, match=r"data\.X\.store_id is '\w+' there"):
        GIMC(**kw).fit(url, checkpoint=ck)
