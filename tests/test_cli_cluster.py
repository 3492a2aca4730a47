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
    from ooc_lowrank.storage import write_arrays

    rng = np.random.default_rng(0)  # IMC side features of the 80 x 80 signed store; blobs
    out["sides"] = str(d / "sides.zarr")
    write_arrays(out["sides"], {"X": rng.normal(size=(80, 4))})
    y = np.repeat([0, 1, 2], 30)
    out["blobs"] = str(d / "blobs.zarr")
    write_arrays(out["blobs"], {"X": rng.normal(size=(90, 3)) + 4.0 * np.eye(3)[y],
                                "y": y[:, None].astype(np.float64)})  # fmt: skip
    return out


def _store_for(method, stores):
    if method.startswith(("kernelmaxide", "maxide")):
        return stores["masked"]
    if method.startswith("glrl") or method in ("imc", "imc-lff"):
        return stores["signed"]
    if method.startswith("mvm"):
        return stores["views"]
    return stores["ml"]


def _check_dry_run(out):
    """A memory model (passes, per-worker bytes) and a rough time with its assumptions."""
    passes = out.get("max_passes", out.get("min_passes"))  # Maxide: no cap on line searches
    assert out["worker_bytes"] > 0 and passes >= 1 and out["store_bytes"] > 0
    t = out["rough_time"]
    assert t["passes"] >= 1
    assert t["seconds_per_fit"] == pytest.approx(t["passes"] * t["seconds_per_pass"])
    assert t["seconds_per_pass"] >= t["scheduler_seconds_per_pass"] > 0 and t["flops_per_pass"] > 0
    assert "MB/s" in t["assumptions"] and "GFLOP/s per core" in t["assumptions"]


@pytest.mark.parametrize("method", sorted(METHODS))
def test_dry_run_prints_the_estimate_and_writes_nothing(method, stores, tmp_path, capsys):
    model = tmp_path / "model"
    argv = ["fit", method, _store_for(method, stores), str(model), "--dry-run", "--json"]
    if method in ("imc", "imc-lff"):
        argv += ["--row-features", stores["sides"], "--col-features", stores["sides"]]
    rc = main(argv)
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    out = json.loads(cap.out)
    assert out["method"] == method
    _check_dry_run(out)
    assert not model.exists()


def test_dry_run_of_imc_and_clustering(stores, tmp_path, capsys):
    """IMC and clustering have a memory model; text output states the rough time's assumptions;
    a slower disk makes reading slower; a missing side store is named."""
    argv = ["fit", "imc-lff", stores["signed"], str(tmp_path / "m"), "--row-features",
            stores["sides"], "--col-features", stores["sides"], "--dry-run"]  # fmt: skip
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "rough time:" in text and "assumed:" in text and "a rough guide" in text
    assert main([*argv, "--json"]) == 0
    fast = json.loads(capsys.readouterr().out)
    _check_dry_run(fast)
    assert fast["n_phi"] == [2 * 80, 2 * 80] and fast["passes_per_iteration"]["max"] > 40
    assert main([*argv, "--json", "--disk-mbps", "6"]) == 0
    slow = json.loads(capsys.readouterr().out)["rough_time"]
    fast_read = fast["rough_time"]["read_seconds_per_pass"]
    assert fast_read > 0 and slow["read_seconds_per_pass"] == pytest.approx(100 * fast_read)
    assert main(argv[:6] + ["--dry-run"]) == 2
    assert "--col-features is required for the estimate" in capsys.readouterr().err
    out = tmp_path / "labels.zarr"
    argv = ["cluster", stores["blobs"], str(out), "--sample-constraints", "5", "--n-clusters", "3",
            "--n-features-map", "20", "--dry-run", "--json"]  # fmt: skip
    assert main(argv) == 0
    res = json.loads(capsys.readouterr().out)
    _check_dry_run(res)
    assert res["method"] == "cluster" and res["n_rows"] == res["n_cols"] == 90
    assert res["n_components"] == 3 and res["n_observed"] == 450
    assert not out.exists() and not (tmp_path / "m").exists()


@pytest.mark.parametrize("how", ["flag", "env"])
def test_dry_run_refusal_names_the_option(stores, tmp_path, capsys, cluster_client, how,
                                          monkeypatch):  # fmt: skip
    """A fit too big for the workers is refused with the CLI option that fixes it; the workers
    are those of the cluster named by ``--scheduler`` or by ``DASK_SCHEDULER_ADDRESS`` (the
    fast default-run check of both routes; the slow test below fits through both)."""
    head = ["--scheduler", cluster_client.scheduler.address] if how == "flag" else []
    if how == "env":
        monkeypatch.setenv("DASK_SCHEDULER_ADDRESS", cluster_client.scheduler.address)
    argv = [*head, "fit", "gimc-lff", stores["ml"], str(tmp_path / "m"),
            "--n-features-map", "4000000", "--dry-run"]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "per worker" in err and "--n-features-map (<=" in err
    assert "local scheduler" not in err, err  # the cluster's workers, not this machine
    assert not (tmp_path / "m").exists()


def _glrl_fit(argv_head, store, model):
    argv = [*argv_head, "fit", "glrl", store, model, "--n-components", "3", "--seed", "0", "-q"]
    assert main(argv) == 0
    from ooc_lowrank import load

    return load(model)


# slow: three GLRL fits, two of them on the cluster (the longest default test of this file).
# The default run keeps both routes to the cluster (--scheduler and DASK_SCHEDULER_ADDRESS, by
# test_dry_run_refusal_names_the_option) and a CLI fit on a cluster equal to the threaded one
# (test_local_cluster_fit_equals_threads_and_prints_no_cluster_logs).
@pytest.mark.slow
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


# ------------------------------------------------ the README's real-data commands on a cluster
def _fit_and_evaluate(head, fit_argv, test_store, metrics, tmp_path, capsys, name):
    model = str(tmp_path / name)
    assert main([*head, "fit", *fit_argv[:2], model, *fit_argv[2:], "-q"]) == 0
    capsys.readouterr()
    assert main(["evaluate", model, test_store, "--metrics", metrics, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.slow
@pytest.mark.parametrize("dataset", ["movielens", "bibtex"])
def test_readme_commands_on_a_local_cluster_equal_threads(dataset, tmp_path, capsys):
    """README: ``fit glrl u1.base.zarr --loss l1 --n-components 10 --refit none`` (MAE / RMSE on u1.test)
    and ``fit gimc-lff bibtex-train.zarr --n-features-map 500 --seed 0`` (P@1,3,5 on the test
    split): the same numbers to rounding on ``--local-cluster 2`` as on threads."""
    from conftest import data_file

    if dataset == "movielens":
        stores = {}
        for part in ("u1.base", "u1.test"):
            src = data_file("movielens-100k", f"{part}.gz")
            stores[part] = str(tmp_path / f"{part}.zarr")
            assert main(["convert", "movielens", str(src), stores[part], "--shape", "943,1682",
                         "-q"]) == 0  # fmt: skip
        fit = ["glrl", stores["u1.base"], "--loss", "l1", "--n-components", "10", "--refit", "none"]
        test, metrics, tol = stores["u1.test"], "mae,rmse", 1e-4
    else:
        xml = data_file("bibtex", "bibtex.xml")
        stores = {}
        for part in ("train", "test"):
            src = data_file("bibtex", f"bibtex-{part}.arff.gz")
            stores[part] = str(tmp_path / f"{part}.zarr")
            assert main(["convert", "arff", str(src), stores[part], "--xml", str(xml), "-q"]) == 0
        fit = ["gimc-lff", stores["train"], "--n-features-map", "500", "--seed", "0"]
        test, metrics, tol = stores["test"], "p@1,p@3,p@5", 5e-4
    threads = _fit_and_evaluate([], fit, test, metrics, tmp_path, capsys, "threads")
    cluster = _fit_and_evaluate(["--local-cluster", "2"], fit, test, metrics, tmp_path, capsys,
                                "cluster")  # fmt: skip
    for k in metrics.split(","):
        assert cluster[k] == pytest.approx(threads[k], abs=tol), (k, threads, cluster)
