"""The ``ooc-lowrank`` command line: convert, generate, info (fit/evaluate in the method tests)."""

from __future__ import annotations

import importlib
import inspect
import json
import re
import subprocess
import sys

import numpy as np
import pytest
from conftest import data_file
from sklearn.base import BaseEstimator

from ooc_lowrank._persist import save_model
from ooc_lowrank.cli import FIT_OPTIONS, METHODS, _extra_options, main
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
    assert main(["convert", "xlsx", str(src), str(tmp_path / "b.zarr")]) == 2
    err = capsys.readouterr().err
    assert "unknown format 'xlsx'" in err and err.count("\n") == 1


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
        main(["fit", "glrl", train, model, "--loss", "square", "--n-components", "3", "--seed", "0", "-q"])
        == 0
    )
    capsys.readouterr()
    assert main(["evaluate", model, test, "--metrics", "mae,rmse", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert set(res) >= {"mae", "rmse"} and 0 <= res["mae"] <= res["rmse"]
    # unknown option: one-line error naming the close matches
    assert main(["fit", "glrl", train, model, "--n-componnts", "3"]) == 2
    err = capsys.readouterr().err
    assert "unknown option --n-componnts" in err and "Did you mean --n-components" in err


def test_fit_with_eval_store_prints_history(tmp_path, capsys):
    tr, va = str(tmp_path / "tr.zarr"), str(tmp_path / "va.zarr")
    for dest, seed in ((tr, "1"), (va, "2")):
        main(["generate", "multilabel", dest, "--rows", "300", "--seed", seed,
              "--n-features", "8", "--n-labels", "5", "-q"])  # fmt: skip
    capsys.readouterr()
    model = str(tmp_path / "m")
    argv = ["fit", "gimc-lff", tr, model, "--n-features-map", "8", "--max-iter", "4",
            "--tol", "0", "--eval-store", va, "--eval-every", "2"]  # fmt: skip
    assert main(argv) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("iteration")]
    assert [int(ln.split()[1].rstrip(":")) for ln in lines] == [0, 2, 4]
    assert all("p@1" in ln for ln in lines)
    # the ranking loss from `evaluate` for a GIMC model (any multi-label model)
    assert main(["evaluate", model, va, "--metrics", "ranking_loss,p@1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) >= {"ranking_loss", "p@1"} and 0.0 <= out["ranking_loss"] <= 1.0
    # GreedyLowRank.fit has no eval_set: --eval-store is not one of glrl's options
    assert main(["fit", "glrl", tr, str(tmp_path / "g"), "--eval-store", va]) == 2
    assert "unknown option --eval-store for `ooc-lowrank fit glrl`" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------
# fit METHOD --help: generated from the estimator's signature and docstring
# ---------------------------------------------------------------------------------------------


def _help(argv, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 0
    return capsys.readouterr().out


def _option_block(text, flag):
    """The help lines of option ``flag`` (from its line to the next option line)."""
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if re.match(rf"\s+{re.escape(flag)}\b", ln))
    block = [lines[start]]
    for ln in lines[start + 1 :]:
        if re.match(r"\s+-", ln) or not ln.startswith(" "):
            break
        block.append(ln)
    return " ".join(" ".join(block).split())


def _spelled(v):
    if isinstance(v, (tuple, list)):
        return ",".join(_spelled(x) for x in v)  # the CLI spelling of a sequence
    return "none" if v is None else str(v).lower() if isinstance(v, bool) else str(v)


@pytest.mark.parametrize("method", list(METHODS))
def test_fit_method_help_lists_every_parameter_and_default(method, capsys):
    target, fixed = METHODS[method]
    mod, attr = target.split(":")
    cls = getattr(importlib.import_module(mod), attr)
    out = _help(["fit", method, "--help"], capsys)
    sig = inspect.signature(cls.__init__).parameters
    names = [n for n in sig if n not in ("self", "callback")]
    assert len(names) >= 5  # the signature was read (every estimator has several)
    for name in names:
        block = _option_block(out, "--" + name.replace("_", "-"))
        value = _spelled(fixed.get(name, sig[name].default))
        assert f": {value}]" in block, (name, block)
        assert block.split("]", 1)[1].strip(), f"{name}: no help text"
    fit_sig = inspect.signature(cls.fit).parameters
    for kw, flag in FIT_OPTIONS.items():
        if kw in fit_sig:
            block = _option_block(out, flag)
            assert f"default: {_spelled(fit_sig[kw].default)}]" in block
        else:
            assert flag not in out


def test_fit_help_lists_the_methods(capsys):
    out = _help(["fit", "--help"], capsys)
    for method in METHODS:
        assert re.search(rf"^\s+{method}\s", out, re.M), method


@pytest.mark.parametrize("command", ["convert", "generate"])
def test_convert_and_generate_help_list_every_format_option(command, capsys):
    """`convert --help` / `generate --help` list every keyword option of every format /
    generator with its default, from the functions' signatures."""
    from ooc_lowrank import generators
    from ooc_lowrank import io as ooc_io

    funcs = ooc_io.FORMATS if command == "convert" else generators.GENERATORS
    out = _help([command, "--help"], capsys)
    skip = {"overwrite", "progress", "n_rows", "seed"}
    n = 0
    for key, fn in funcs.items():
        start = out.index(f"  {key}:")
        tail = out[start + len(key) + 3 :]
        if tail.startswith(" as "):
            continue
        section = re.split(r"^  \S", tail, maxsplit=1, flags=re.M)[0]
        for name, prm in inspect.signature(fn).parameters.items():
            if prm.kind is not prm.KEYWORD_ONLY or name in skip:
                continue
            n += 1
            flag = "--" + name.replace("_", "-")
            assert f"{flag} (default {_spelled(prm.default)})" in section, (key, name)
    assert n >= 10  # the signatures were read


class Toy(BaseEstimator):
    """A toy estimator: what a new METHODS line gets for free.

    Parameters
    ----------
    scale : float, default=1.0
        Multiplier of the column means.
    shift : {"none", "mean"}, default="none"
        Shift applied first.
    n_rounds : int or None, default=None
        Rounds to run.
    anything : default=None
        An option whose type the docstring does not say.
    weights : list of float, optional
        Per-column weights.
    flag : bool, default=False
        A switch.
    """

    def __init__(
        self, *, scale=1.0, shift="none", n_rounds=None, anything=None, weights=None, flag=False
    ):
        self.scale, self.shift, self.n_rounds, self.anything = scale, shift, n_rounds, anything
        self.weights, self.flag = weights, flag

    def fit(self, X, y=None, *, checkpoint=None, checkpoint_every=10, other=None):
        """Fit.

        Parameters
        ----------
        X : Dataset
        checkpoint : str or None, default=None
            Where to save the state.
        checkpoint_every : int, default=10
            Iterations between checkpoints.
        other : int, optional
            Not an allow-listed fit keyword: never an option.
        """
        Toy.seen = (self.get_params(), checkpoint, checkpoint_every)
        raise RuntimeError("toy stops here")


def test_one_methods_line_gives_typed_options_and_fit_keywords(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(METHODS, "toy", ("test_cli:Toy", {}))
    out = _help(["fit", "toy", "--help"], capsys)
    for flag in (
        "--scale",
        "--shift",
        "--n-rounds",
        "--weights",
        "--flag",
        "--no-flag",
        "--checkpoint",
        "--checkpoint-every",
    ):
        assert flag in out
    assert "--other" not in out and "[default: 10] Iterations between checkpoints." in out
    tr = str(tmp_path / "tr.zarr")
    main(
        ["generate", "multilabel", tr, "--rows", "50", "--n-features", "3", "--n-labels", "2", "-q"]
    )
    ck = str(tmp_path / "ck")
    argv = [
        "fit",
        "toy",
        tr,
        str(tmp_path / "m"),
        "--scale",
        "3",
        "--n-rounds",
        "1e2",
        "--weights",
        "1,2.5",
        "--flag",
        "--checkpoint",
        ck,
        "--checkpoint-every",
        "4",
    ]
    assert main(argv) == 2 and "toy stops here" in capsys.readouterr().err
    params, got_ck, every = Toy.seen
    assert params == {
        "scale": 3.0,
        "shift": "none",
        "n_rounds": 100,
        "anything": None,
        "weights": (1.0, 2.5),
        "flag": True,
    }
    assert (got_ck, every) == (ck, 4)
    for extra, want in (
        (["--no-flag"], False),
        (["--flag", "false"], False),
        (["--flag", "true"], True),
        (["--shift", "none"], "none"),  # a string choice, not None
        (["--n-rounds", "123456789012345678901"], 123456789012345678901),
        (["--n-rounds", "none"], None),
    ):
        main(["fit", "toy", tr, str(tmp_path / "m"), *extra])
        key = extra[0][2:].removeprefix("no-").replace("-", "_")
        assert Toy.seen[0][key] == want and type(Toy.seen[0][key]) is type(want)
    capsys.readouterr()
    # typed conversion errors name the option, the rule, the value and the fix
    for extra, frag in (
        (["--n-rounds", "2.5"], "--n-rounds must be an integer; got '2.5'. Pass a whole number"),
        (["--scale", "nan"], "--scale must be a finite number; got 'nan'"),
        (["--scale", "inf"], "--scale must be a finite number; got 'inf'"),
        (["--anything", "nan"], "--anything must be a finite number; got 'nan'"),
        (["--flag", "maybe"], "--flag must be true or false; got 'maybe'"),
        (["--weights", "1,x"], "--weights must be a finite number; got 'x'"),
        (["--scael", "2"], "Did you mean --scale"),
    ):
        assert main(["fit", "toy", tr, str(tmp_path / "m"), *extra]) == 2
        err = capsys.readouterr().err
        assert frag in err and err.count("\n") == 1, (extra, err)


class ToyCV(BaseEstimator):
    """A toy search: what `fit` prints for an estimator with ``best_params_``.

    Parameters
    ----------
    cv : int, default=3
        Number of folds.
    """

    def __init__(self, *, cv=3):
        self.cv = cv

    def fit(self, X, Y=None):
        self.best_params_, self.best_score_ = {"alpha": 1.0, "cv": self.cv}, 0.5
        return self

    def format_cv_table(self):
        return "alpha  mean\n1.0    0.5000"

    def save(self, path, *, overwrite=False):
        save_model(path, "ToyCV", self.get_params(), {}, overwrite=overwrite)


def test_fit_prints_the_choice_of_a_search(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(METHODS, "toy-cv", ("test_cli:ToyCV", {}))
    tr = str(tmp_path / "tr.zarr")
    main(
        ["generate", "multilabel", tr, "--rows", "20", "--n-features", "3", "--n-labels", "2", "-q"]
    )
    capsys.readouterr()
    assert main(["fit", "toy-cv", tr, str(tmp_path / "m"), "--cv", "2"]) == 0
    out = capsys.readouterr().out
    assert "chosen by cross-validation: alpha=1.0, cv=2 (mean validation score 0.5000)" in out
    assert "alpha  mean\n1.0    0.5000" in out


def test_mask_labels_then_kernelmaxide_fit_and_ranking_loss(tmp_path, capsys):
    from ooc_lowrank.cli import main
    from ooc_lowrank.storage import open_dataset

    g, m, model = (str(tmp_path / n) for n in ("g.zarr", "m.zarr", "km.model"))
    assert main(["generate", "multilabel", g, "--rows", "300", "--seed", "1", "--n-features",
                 "6", "--n-labels", "5", "-q"]) in (0, None)  # fmt: skip
    assert main(["mask-labels", g, m, "--omega", "20", "--seed", "0", "-q"]) in (0, None)
    ds = open_dataset(m)
    Yo = ds["Y_obs"].read()
    assert set(np.unique(Yo.data)) <= {-1.0, 1.0} and 0 < Yo.nnz < 300 * 5
    assert main(["fit", "kernelmaxide", m, model, "--n-features-map", "30", "-q"]) in (0, None)
    capsys.readouterr()
    assert main(["evaluate", model, m, "--metrics", "ranking_loss", "--json"]) in (0, None)
    out = json.loads(capsys.readouterr().out)
    assert 0.0 <= out["ranking_loss"] < 0.5
    # the built-in selection on the observed labels, from the CLI: its choice and table
    cvm = str(tmp_path / "kmcv.model")
    assert main(["fit", "kernelmaxide-cv", m, cvm, "--n-features-map", "30", "--gamma-scales",
                 "1,4", "--alphas", "0.5,8", "--max-iter", "20"]) in (0, None)  # fmt: skip
    out = capsys.readouterr().out
    assert "chosen by cross-validation: gamma=" in out and "mean ranking loss" in out
    assert main(["evaluate", cvm, m, "--metrics", "ranking_loss", "--json"]) in (0, None)
    assert 0.0 <= json.loads(capsys.readouterr().out)["ranking_loss"] < 0.5
    # the source is never overwritten
    assert main(["mask-labels", g, g, "--omega", "20"]) == 2
    assert open_dataset(g).names == ["X", "Y"] or "Y_obs" not in open_dataset(g).names


# ------------------------------------------------------------------ two-sided IMC and clustering


def _imc_stores(tmp_path):
    """A noise-free rank-2 matrix ``X1 G X2^T`` (60 x 40), 40 % observed, with its side stores."""
    import scipy.sparse as sp

    from ooc_lowrank.storage import write_arrays

    rng = np.random.default_rng(0)
    X1, X2 = rng.normal(size=(60, 5)), rng.normal(size=(40, 4))
    A = X1 @ rng.normal(size=(5, 2)) @ rng.normal(size=(2, 4)) @ X2.T
    seen = rng.random(A.shape) < 0.4
    out = {}
    for name, mask in (("tr", seen), ("te", ~seen)):
        r, c = np.nonzero(mask)
        obs = sp.csr_matrix((A[r, c], (r, c)), shape=A.shape)
        out[name] = str(tmp_path / f"{name}.zarr")
        write_arrays(out[name], {"obs": obs}, kinds={"obs": "coo"})
    for name, X in (("rows", X1), ("cols", X2)):
        out[name] = str(tmp_path / f"{name}.zarr")
        write_arrays(out[name], {"X": X})
    return out, X1, X2


def test_fit_imc_evaluate_predict_as_the_python_api(tmp_path, capsys):
    from ooc_lowrank.imc import InductiveMatrixCompletion

    s, X1, X2 = _imc_stores(tmp_path)
    m = str(tmp_path / "m")
    argv = ["fit", "imc", s["tr"], m, "--row-features", s["rows"], "--col-features", s["cols"],
            "--n-components", "2", "--alpha", "0.001", "--max-iter", "4", "--seed", "0", "-q"]  # fmt: skip
    assert main(argv) == 0
    py = InductiveMatrixCompletion(n_components=2, alpha=0.001, max_iter=4, random_state=0)
    py.fit(s["tr"], X_row=X1, X_col=X2)
    capsys.readouterr()
    assert main(["evaluate", m, s["te"], "--metrics", "mae,rmse", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    want = py.evaluate(s["te"], ["mae", "rmse"])
    assert got["n"] == want["n"] == 60 * 40 - open_dataset(s["tr"])["obs"].nnz
    np.testing.assert_allclose([got["mae"], got["rmse"]], [want["mae"], want["rmse"]], rtol=1e-9)
    assert got["rmse"] < 1e-3  # identity features recover the held-out entries
    # predict: top-k columns of (new) rows from their features, as the model's top_k
    assert main(["predict", m, s["rows"], str(tmp_path / "p.zarr"), "--top-k", "3", "-q"]) == 0
    pred = open_dataset(str(tmp_path / "p.zarr"))
    idx, val = py.top_k(np.arange(60), 3)
    np.testing.assert_array_equal(pred["labels"].read(), idx)
    np.testing.assert_allclose(pred["scores"].read(), val, rtol=1e-5)


def test_fit_imc_needs_side_stores_with_the_right_rows(tmp_path, capsys):
    s, _, _ = _imc_stores(tmp_path)
    m = str(tmp_path / "m")
    assert main(["fit", "imc", s["tr"], m, "--row-features", s["rows"]]) == 2
    assert "--col-features is required" in capsys.readouterr().err
    assert main(["fit", "imc", s["tr"], m, "--row-features", s["cols"], "--col-features",
                 s["cols"]]) == 2  # fmt: skip
    err = capsys.readouterr().err
    assert "--row-features must have one row per row" in err and "has 40 rows" in err
    assert not (tmp_path / "m").exists()


def _blobs(tmp_path):
    from ooc_lowrank.storage import write_arrays

    rng = np.random.default_rng(1)
    y = np.repeat([0, 1, 2], 30)
    X = rng.normal(size=(90, 3)) * 0.3 + 4.0 * np.eye(3)[y]
    path = str(tmp_path / "blobs.zarr")
    write_arrays(path, {"X": X, "y": y[:, None].astype(np.float64)})
    return path, X, y


@pytest.mark.slow  # 8 s: Segment clustering end to end through the CLI
def test_cluster_as_the_python_api(tmp_path, capsys):
    import scipy.sparse as sp

    from ooc_lowrank.imc import GIMCClustering, clustering_error, sample_constraints
    from ooc_lowrank.storage import write_arrays

    feats, X, y = _blobs(tmp_path)
    opts = ["--n-clusters", "3", "--n-features-map", "20", "--max-iter", "5", "--seed", "0"]
    out = str(tmp_path / "lab.zarr")
    assert main(["cluster", feats, out, "--sample-constraints", "5", *opts]) == 0
    assert "pairwise error against the store's labels 0.0000" in capsys.readouterr().out
    cons = sample_constraints(y, 450, random_state=0)
    py = GIMCClustering(n_clusters=3, n_features_map=20, max_iter=5, random_state=0)
    py.fit(X, constraints=cons)
    labels = open_dataset(out)["labels"].read()[:, 0]
    np.testing.assert_array_equal(labels, py.labels_)
    assert clustering_error(labels, y) == 0.0
    # the same (distinct) constraints from an (n, n) observation store: the same clusters
    _, first = np.unique(cons[0] * 90 + cons[1], return_index=True)
    cons = tuple(a[first] for a in cons)  # row-major order, as the store holds them
    py.fit(X, constraints=cons)
    cstore = str(tmp_path / "cons.zarr")
    write_arrays(cstore, {"obs": sp.csr_matrix((cons[2], cons[:2]), shape=(90, 90))},
                 kinds={"obs": "coo"})  # fmt: skip
    out2 = str(tmp_path / "lab2.zarr")
    assert main(["cluster", feats, out2, "--constraints", cstore, *opts, "-q"]) == 0
    np.testing.assert_array_equal(open_dataset(out2)["labels"].read()[:, 0], py.labels_)
    assert clustering_error(py.labels_, y) == 0.0


def test_cluster_refuses_bad_constraints_before_work(tmp_path, capsys):
    feats, _, _ = _blobs(tmp_path)
    out = str(tmp_path / "lab.zarr")
    assert main(["cluster", feats, out]) == 2
    assert "exactly one of them" in capsys.readouterr().err
    assert main(["cluster", feats, out, "--sample-constraints", "0"]) == 2
    assert "--sample-constraints must be > 0" in capsys.readouterr().err
    assert main(["cluster", feats, out, "--sample-constraints", "1", "--n-clusters", "1"]) == 2
    assert "--n-clusters must be >= 2" in capsys.readouterr().err
    assert main(["cluster", feats, out, "--sample-constraints", "1", "--n-cluster", "3"]) == 2
    assert "Did you mean --n-clusters" in capsys.readouterr().err
    assert not (tmp_path / "lab.zarr").exists()


def test_cluster_lam_option_takes_auto_or_a_number():
    # GIMCClustering's alpha defaults to "auto" (a word); on the command line a number must
    # still arrive as a number, not the text "0.5"
    from ooc_lowrank import cli

    _, opts = cli.cluster_options()
    (lam,) = [o for o in opts if o.name == "alpha"]
    assert lam.default == "auto"
    assert cli._convert(lam, "auto") == "auto"
    assert cli._convert(lam, "0.5") == 0.5 and isinstance(cli._convert(lam, "1e-1"), float)
