"""The ``ooc-lowrank`` command line: convert, generate, info (fit/evaluate in the method tests)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from conftest import data_file

from ooc_lowrank.cli import _extra_options, main
from ooc_lowrank.storage import open_dataset


def test_extra_option_parsing():
    got = _extra_options(
        [
            "--n-components",
            "500",
            "--gamma",
            "0.1",
            "--shape",
            "943,1682",
            "--learn-features",
            "false",
            "--seed",
            "3",
            "--loss=l1",
            "--flag",
        ]
    )
    assert got == {
        "n_components": 500,
        "gamma": 0.1,
        "shape": (943, 1682),
        "learn_features": False,
        "random_state": 3,
        "loss": "l1",
        "flag": True,
    }


def test_generate_then_info(tmp_path, capsys):
    dest = str(tmp_path / "g.zarr")
    assert (
        main(
            [
                "generate",
                "multilabel",
                dest,
                "--rows",
                "300",
                "--seed",
                "1",
                "--n-features",
                "8",
                "--n-labels",
                "5",
                "--quiet",
            ]
        )
        == 0
    )
    ds = open_dataset(dest)
    assert ds.n_rows == 300 and ds["X"].shape == (300, 8) and ds["Y"].shape == (300, 5)
    capsys.readouterr()
    assert main(["info", dest]) == 0
    out = capsys.readouterr().out
    assert "300 rows" in out and "csr" in out
    # same seed, same data; an existing store is not overwritten without --overwrite
    assert main(["generate", "multilabel", dest, "--rows", "300", "--seed", "1", "-q"]) == 2
    assert "overwrite" in capsys.readouterr().err


def test_convert_svmlight_and_unknown_format(tmp_path, capsys):
    src = tmp_path / "a.svm"
    src.write_text("1 1:0.5 3:1.0\n0 2:2.0\n1 1:1.5\n")
    dest = str(tmp_path / "a.zarr")
    assert main(["convert", "svmlight", str(src), dest, "-q"]) == 0
    X = open_dataset(dest)["X"].read().toarray()
    np.testing.assert_allclose(X, [[0.5, 0, 1.0], [0, 2.0, 0], [1.5, 0, 0]])
    assert main(["convert", "parquet", str(src), str(tmp_path / "b.zarr")]) == 2
    err = capsys.readouterr().err
    assert "unknown format 'parquet'" in err and err.count("\n") == 1


def test_convert_movielens_with_shared_shape(tmp_path):
    base = data_file("movielens-100k", "u1.base.gz")
    test = data_file("movielens-100k", "u1.test.gz")
    for src, name in ((base, "b.zarr"), (test, "t.zarr")):
        assert (
            main(
                [
                    "convert",
                    "movielens",
                    str(src),
                    str(tmp_path / name),
                    "--shape",
                    "943,1682",
                    "-q",
                ]
            )
            == 0
        )
    b, t = open_dataset(str(tmp_path / "b.zarr")), open_dataset(str(tmp_path / "t.zarr"))
    assert b["obs"].shape == t["obs"].shape == (943, 1682)
    assert b["obs"].nnz == 80000 and t["obs"].nnz == 20000


def test_console_script_and_json(tmp_path):
    dest = str(tmp_path / "s.zarr")
    main(["generate", "signed", dest, "--rows", "200", "--seed", "0", "-q"])
    p = subprocess.run(
        [sys.executable, "-m", "ooc_lowrank.cli", "info", dest, "--json"],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 0, p.stderr
    info = json.loads(p.stdout)
    assert info["arrays"]["obs"]["kind"] == "coo" and info["n_rows"] == 200
    p = subprocess.run(
        [sys.executable, "-m", "ooc_lowrank.cli", "info", dest + "x"],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 2 and "Traceback" not in p.stderr and p.stderr.count("\n") == 1


@pytest.mark.parametrize("argv", [["--help"], ["convert", "--help"], ["fit", "--help"]])
def test_help(argv, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 0 and "usage" in capsys.readouterr().out


def test_fit_and_evaluate_glrl_via_cli(tmp_path, capsys):
    train, test = str(tmp_path / "tr.zarr"), str(tmp_path / "te.zarr")
    assert (
        main(
            [
                "generate",
                "lowrank",
                train,
                "--rows",
                "120",
                "--seed",
                "0",
                "--n-cols",
                "80",
                "--rank",
                "3",
                "--n-obs-per-row",
                "40",
                "--n-row-features",
                "0",
                "--n-col-features",
                "0",
                "-q",
            ]
        )
        == 0
    )
    assert (
        main(
            [
                "generate",
                "lowrank",
                test,
                "--rows",
                "120",
                "--seed",
                "0",
                "--n-cols",
                "80",
                "--rank",
                "3",
                "--n-obs-per-row",
                "40",
                "--n-row-features",
                "0",
                "--n-col-features",
                "0",
                "-q",
                "--overwrite",
            ]
        )
        == 0
    )
    model = str(tmp_path / "m")
    assert (
        main(["fit", "glrl", train, model, "--loss", "square", "--rank", "3", "--seed", "0", "-q"])
        == 0
    )
    capsys.readouterr()
    assert main(["evaluate", model, test, "--metrics", "mae,rmse", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert set(res) >= {"mae", "rmse"} and 0 <= res["mae"] <= res["rmse"]
    # unknown parameter: one-line error naming the valid ones
    assert main(["fit", "glrl", train, model, "--rnak", "3"]) == 2
    assert "unknown parameter --rnak" in capsys.readouterr().err


def test_fit_with_eval_store_prints_history(tmp_path, capsys):
    tr, va = str(tmp_path / "tr.zarr"), str(tmp_path / "va.zarr")
    for dest, seed in ((tr, "1"), (va, "2")):
        main(["generate", "multilabel", dest, "--rows", "300", "--seed", seed,
              "--n-features", "8", "--n-labels", "5", "-q"])  # fmt: skip
    capsys.readouterr()
    model = str(tmp_path / "m")
    argv = ["fit", "gimc-lff", tr, model, "--n-components", "8", "--max-iter", "4",
            "--tol", "0", "--eval-store", va, "--eval-every", "2"]  # fmt: skip
    assert main(argv) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("iteration")]
    assert [int(ln.split()[1].rstrip(":")) for ln in lines] == [0, 2, 4]
    assert all("p@1" in ln for ln in lines)
    assert main(["fit", "glrl", tr, str(tmp_path / "g"), "--eval-store", va]) == 2
    assert "--eval-store is for GIMC methods" in capsys.readouterr().err
