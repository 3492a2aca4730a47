"""The CLI on a dask.distributed cluster (``--scheduler``, ``DASK_SCHEDULER_ADDRESS``,
``--local-cluster``) and ``fit METHOD --dry-run`` for every method."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ooc_lowrank.cli import METHODS, main
from ooc_lowrank.storage import open_dataset


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """One small training store per kind of method input."""
    d = tmp_path_factory.mktemp("cli_cluster")
    out = {k: str(d / f"{k}.zarr") for k in ("ml", "masked", "signed", "views")}
    gen = [
        ["generate", "multilabel", out["ml"], "--rows", "300", "--n-features", "6",
         "--n-labels", "5"],
        ["generate", "signed", out["signed"], "--rows", "80"],
        ["generate", "multiview", out["views"], "--rows", "200"],
    ]  # fmt: skip
    for argv in gen:
        assert main([*argv, "--seed", "1", "-q"]) == 0
    assert main(["mask-labels", out["ml"], out["masked"], "--omega", "30", "-q"]) == 0
    return out


def _store_for(method, stores):
    if method.startswith(("kernelmaxide", "maxide")):
        return stores["masked"]
    if method.startswith(("glrl", "imc")) and not method.startswith("imc-"):
        return stores["signed"]
    if method.startswith("mvm"):
        return stores["views"]
    return stores["ml"]


@pytest.mark.parametrize("method", sorted(METHODS))
def test_dry_run_prints_the_estimate_and_writes_nothing(method, stores, tmp_path, capsys):
    model = tmp_path / "model"
    argv = ["fit", method, _store_for(method, stores), str(model), "--dry-run", "--json"]
    rc = main(argv)
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    out = json.loads(cap.out)
    assert out["method"] == method
    # a memory model (passes, per-worker bytes) or, where a method has none, the store's size
    assert ("worker_bytes" in out and "max_passes" in out) or out.get("memory_model") is None
    assert out.get("store_bytes", 0) > 0
    assert not model.exists()


def test_dry_run_refusal_names_the_option(stores, tmp_path, capsys, cluster_client):
    """A fit too big for the workers is refused with the CLI option that fixes it."""
    argv = ["--scheduler", cluster_client.scheduler.address, "fit", "gimc-lff", stores["ml"],
            str(tmp_path / "m"), "--n-components", "4000000", "--dry-run"]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "per worker" in err and "--n-components (<=" in err
    assert not (tmp_path / "m").exists()


def _glrl_fit(argv_head, store, model):
    argv = [*argv_head, "fit", "glrl", store, model, "--rank", "3", "--seed", "0", "-q"]
    assert main(argv) == 0
    from ooc_lowrank import load

    return load(model)


def test_fit_on_a_scheduler_address_equals_threads(stores, tmp_path, monkeypatch, cluster_client):
    addr = cluster_client.scheduler.address

    def transitions():
        return cluster_client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.transition_counter)

    local = _glrl_fit([], stores["signed"], str(tmp_path / "local"))
    before = transitions()
    flag = _glrl_fit(["--scheduler", addr], stores["signed"], str(tmp_path / "flag"))
    assert transitions() > before  # the cluster did the work
    before = transitions()
    monkeypatch.setenv("DASK_SCHEDULER_ADDRESS", addr)
    env = _glrl_fit([], stores["signed"], str(tmp_path / "env"))
    for m in (flag, env):
        rows, cols = np.array([0, 1, 5]), np.array([3, 4, 7])
        np.testing.assert_allclose(m.predict(rows, cols), local.predict(rows, cols), rtol=1e-9)
    assert transitions() > before


def test_local_cluster_and_bad_options(stores, tmp_path, capsys):
    assert main(["--local-cluster", "0", "info", stores["ml"]]) == 2
    assert "--local-cluster must be between 1 and 256" in capsys.readouterr().err
    assert main(["--local-cluster", "2", "--scheduler", "tcp://127.0.0.1:1", "info",
                 stores["ml"]]) == 2  # fmt: skip
    assert "cannot be combined" in capsys.readouterr().err
    assert open_dataset(stores["ml"]).n_rows == 300


def test_local_cluster_fit_equals_threads_and_prints_no_cluster_logs(stores, tmp_path, capsys):
    local = _glrl_fit([], stores["signed"], str(tmp_path / "local"))
    capsys.readouterr()
    on_cluster = _glrl_fit(["--local-cluster", "1"], stores["signed"], str(tmp_path / "lc"))
    err = capsys.readouterr().err
    assert "distributed" not in err and "Traceback" not in err, err
    rows, cols = np.array([0, 2, 9]), np.array([1, 5, 3])
    np.testing.assert_allclose(on_cluster.predict(rows, cols), local.predict(rows, cols), rtol=1e-9)
