"""Nothing is overwritten unasked, and nothing that is not ours is ever replaced: model saves,
store writers (``mask_labels_store``) and checkpoints refuse a store, a model, a user folder or a
file at their destination before any work, leaving it byte-identical."""

import os
import pathlib
import uuid

import numpy as np
import pytest
import scipy.sparse as sp

import ooc_lowrank
from ooc_lowrank.kernelmaxide import KernelMaxide, mask_labels, mask_labels_store
from ooc_lowrank.storage import open_dataset, write_arrays


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 5))
    Y = (rng.random((60, 4)) < 0.4).astype(float)
    return X, Y, mask_labels(Y, 50, random_state=0)


@pytest.fixture(scope="module")
def model(data):
    X, _, Yobs = data
    return KernelMaxide(n_features_map=20, max_iter=3, random_state=0).fit(X, Yobs)


def _snapshot(path):
    path = pathlib.Path(path)
    if path.is_file():
        return path.read_bytes()
    return {
        str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()
    }


def _siblings(path):
    path = pathlib.Path(path)
    return sorted(n for n in os.listdir(path.parent) if n.startswith(f".{path.name}."))


def _make(kind, path, data):
    """A store, a user folder or a regular file at ``path``."""
    if kind == "store":
        write_arrays(str(path), {"X": data[0]})
    elif kind == "folder":
        path.mkdir()
        (path / "thesis.txt").write_text("years of work")
    else:
        path.write_text("years of work")


@pytest.mark.parametrize("overwrite", [False, True])
@pytest.mark.parametrize("kind", ["store", "folder", "file"])
def test_save_never_replaces_what_is_not_a_model(model, data, tmp_path, kind, overwrite):
    dest = tmp_path / "dest"
    _make(kind, dest, data)
    before = _snapshot(dest)
    with pytest.raises(FileExistsError, match="path exists and is not an ooc_lowrank model"):
        model.save(dest, overwrite=overwrite)
    assert _snapshot(dest) == before
    assert _siblings(dest) == []  # no .dest.old-* / .dest.tmp-* left


def test_save_replaces_a_model_only_when_asked(model, data, tmp_path):
    X, _, Yobs = data
    dest = tmp_path / "m"
    model.save(dest)
    before = _snapshot(dest)
    other = KernelMaxide(n_features_map=20, alpha=0.25, max_iter=3, random_state=0).fit(X, Yobs)
    with pytest.raises(FileExistsError, match="pass overwrite=True"):
        other.save(dest)
    assert _snapshot(dest) == before
    other.save(dest, overwrite=True)
    assert ooc_lowrank.load(dest).alpha == 0.25
    assert _siblings(dest) == []


def test_save_to_a_url_never_replaces_what_is_not_a_model(model, data):
    import fsspec

    fs = fsspec.filesystem("memory")
    root = f"memory://overwrite-safety-{uuid.uuid4().hex[:8]}"
    store, folder = f"{root}/store", f"{root}/folder"
    write_arrays(store, {"X": data[0]})
    fs.pipe_file(f"{folder[len('memory://'):]}/thesis.txt", b"years of work")
    snap = {p: fs.cat_file(p) for p in fs.find(root)}
    for dest in (store, folder):
        for overwrite in (False, True):
            with pytest.raises(FileExistsError, match="is not an ooc_lowrank model"):
                model.save(dest, overwrite=overwrite)
    assert {p: fs.cat_file(p) for p in fs.find(root)} == snap
    model.save(f"{root}/m")
    with pytest.raises(FileExistsError, match="pass overwrite=True"):
        model.save(f"{root}/m")
    model.save(f"{root}/m", overwrite=True)
    assert type(ooc_lowrank.load(f"{root}/m")) is KernelMaxide
    fs.rm(root, recursive=True)


@pytest.fixture()
def label_store(data, tmp_path):
    X, Y, _ = data
    url = str(tmp_path / "ml")
    write_arrays(url, {"X": X.astype(np.float32), "Y": sp.csr_matrix(Y, dtype=np.float32)})
    return url


def test_mask_labels_store_never_replaces_a_model(model, label_store, tmp_path):
    dest = tmp_path / "m"
    model.save(dest)
    before = _snapshot(dest)
    with pytest.raises(FileExistsError, match="dest exists and is not an ooc_lowrank store"):
        mask_labels_store(label_store, str(dest), 20, overwrite=True)
    assert _snapshot(dest) == before
    src = _snapshot(label_store)
    with pytest.raises(ValueError, match="must not be, contain or lie inside the input store"):
        mask_labels_store(label_store, label_store, 20, overwrite=True)
    assert _snapshot(label_store) == src


def test_mask_labels_store_accepts_pathlike(label_store, tmp_path):
    out = mask_labels_store(pathlib.Path(label_store), tmp_path / "mm", 20, random_state=0)
    ds = open_dataset(str(out))
    assert {"X", "Y", "Y_obs", "train"} <= set(ds.names)


@pytest.mark.parametrize("kind", ["store", "model", "folder"])
def test_checkpoint_refuses_a_foreign_folder_before_any_work(model, data, tmp_path, kind):
    X, _, Yobs = data
    ck = tmp_path / "ck"
    if kind == "model":
        model.save(ck)
    else:
        _make(kind, ck, data)
    before = _snapshot(ck)
    calls = []
    est = KernelMaxide(n_features_map=20, max_iter=3, callback=lambda *a: calls.append(a))
    with pytest.raises(ValueError, match="checkpoint exists and is not an ooc_lowrank checkpoint"):
        est.fit(X, Yobs, checkpoint=ck)
    assert calls == [] and not hasattr(est, "coef_")
    assert _snapshot(ck) == before


def test_checkpoint_into_an_empty_folder_is_fine(data, tmp_path):
    X, _, Yobs = data
    ck = tmp_path / "ck"
    ck.mkdir()
    KernelMaxide(n_features_map=20, max_iter=3, random_state=0).fit(X, Yobs, checkpoint=ck)
    assert (ck / "state.json").is_file()
    # and resuming from that (non-empty) checkpoint is fine too
    KernelMaxide(n_features_map=20, max_iter=4, random_state=0).fit(X, Yobs, checkpoint=ck)


def test_predict_to_store_refuses_its_input_and_existing_stores_before_any_work(
    tmp_path, data, monkeypatch
):
    """``predict_to_store`` (GIMC, IMC) refuses to write onto (or into) its own input store even
    with ``overwrite=True``, and an existing store without it, before predicting anything."""
    from ooc_lowrank import GIMC, engine
    from ooc_lowrank.imc import InductiveMatrixCompletion

    X, Y, _ = data
    src = str(tmp_path / "src.zarr")
    write_arrays(src, {"X": X.astype(np.float32), "Y": sp.csr_matrix(Y, dtype=np.float32)})
    gimc = GIMC(n_features_map=10, max_iter=2, random_state=0).fit(X, Y)
    rng = np.random.default_rng(1)
    rows, cols = rng.integers(0, 60, 200), rng.integers(0, 30, 200)
    imc = InductiveMatrixCompletion(n_components=2, max_iter=2, random_state=0).fit(
        (rows, cols, rng.random(200)), X_row=X, X_col=rng.random((30, 3)), shape=(60, 30)
    )
    other = str(tmp_path / "other.zarr")
    write_arrays(other, {"X": X.astype(np.float32)})
    before = _snapshot(src), _snapshot(other)

    def no_work(*a, **k):
        raise AssertionError("predicted before checking the destination")

    monkeypatch.setattr(engine, "compute", no_work)
    for est in (gimc, imc):
        monkeypatch.setattr(est, "transform_rows", no_work, raising=False)
        for dest, kw, exc in [
            (src, {"overwrite": True}, ValueError),
            (src + "/sub", {"overwrite": True}, ValueError),
            (other, {}, FileExistsError),
        ]:
            with pytest.raises(exc, match="out_url|already exists"):
                est.predict_to_store(src, dest, **kw)
    assert (_snapshot(src), _snapshot(other)) == before


def _dead_pid():
    import subprocess
    import sys

    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_save_reaps_temporaries_of_killed_saves_but_not_live_ones(model, tmp_path):
    """Issue 23 item 6: a SIGKILL during ``save(..., overwrite=True)`` leaves a hidden
    ``.NAME.tmp-*`` folder; the next save to the same path removes it (the writer is dead),
    as store writes do, and leaves a live writer's temporary alone."""
    from ooc_lowrank.storage import _host_tag

    dest = tmp_path / "m.model"
    model.save(dest)
    host = _host_tag()
    dead = tmp_path / f".m.model.tmp-{_dead_pid()}-{host}-0123abcd"
    live = tmp_path / f".m.model.tmp-{os.getppid()}-{host}-4567cdef"  # a live process
    dead_old = tmp_path / f".m.model.old-{_dead_pid()}-{host}-89abcdef"
    for d in (dead, live, dead_old):
        d.mkdir()
        (d / "arrays.npz").write_bytes(b"x" * 1000)
    model.save(dest, overwrite=True)
    assert _siblings(dest) == sorted([live.name])
    assert isinstance(ooc_lowrank.load(dest), KernelMaxide)
