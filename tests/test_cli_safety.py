"""Hostile use of the ``ooc-lowrank`` CLI as a table (issue 14: the probe families
"parameters", "locations" and "interruption").

Every row is ``argv + expected exit code + stderr (or stdout) fragment``; every failing row must
also leave the working folder exactly as it was (nothing replaced, no temporary left behind)
and print one line.  Rows marked ``no_work`` must fail before any fitting: the estimators'
``fit`` is replaced by one that raises, so an error found only after a fit shows up as
"fit ran".  Each row of ``ROWS`` failed before the CLI checks it exercises were written;
``GUARDS`` already held then and are kept so that they stay true.  Add rows as probes find
new holes.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import types
from dataclasses import dataclass, field

import fsspec
import numpy as np
import pytest
import scipy.sparse as sp

from ooc_lowrank import _persist
from ooc_lowrank.cli import main
from ooc_lowrank.storage import open_dataset, write_arrays


@dataclass
class Row:
    id: str
    argv: list
    code: int
    err: str = ""  # fragment of stderr
    out: str = ""  # fragment of stdout
    no_work: bool = False  # must fail before any estimator fit
    setup: object = None  # setup(tmp, monkeypatch)
    check: object = None  # check(tmp, out) after the command
    marks: list = field(default_factory=list)


def _json_strict(out):
    def refuse(c):
        raise ValueError(f"not JSON: {c}")

    return json.loads(out, parse_constant=refuse)


def _model_n_components(path, key="n_components"):
    with open(os.path.join(path, "model.json")) as f:
        return json.load(f)["params"][key]


def _interrupt_local_save(tmp, monkeypatch):
    def dump(*a, **k):
        raise KeyboardInterrupt

    fake = types.SimpleNamespace(**{k: getattr(json, k) for k in dir(json) if not k[0] == "_"})
    fake.dump = dump
    monkeypatch.setattr(_persist, "json", fake)


def _memory_model(tmp, monkeypatch):
    fs = fsspec.filesystem("memory")
    if fs.exists("/cli-safety"):
        fs.rm("/cli-safety", recursive=True)
    fs.put(str(tmp / "m"), "/cli-safety/m", recursive=True)


def _interrupt_memory_move(tmp, monkeypatch):
    _memory_model(tmp, monkeypatch)
    from fsspec.implementations.memory import MemoryFileSystem

    orig = MemoryFileSystem.mv

    def mv(self, path1, path2, *a, **k):
        if ".tmp-" in str(path1):
            raise KeyboardInterrupt  # killed while the new model moves into place
        return orig(self, path1, path2, *a, **k)

    monkeypatch.setattr(MemoryFileSystem, "mv", mv)


def _memory_model_intact(tmp, out):
    fs = fsspec.filesystem("memory")
    left = sorted(p.rsplit("/", 1)[-1] for p in fs.ls("/cli-safety", detail=False))
    assert left == ["m"], left  # no .tmp- / .old- siblings left behind
    with fs.open("/cli-safety/m/model.json") as f:
        saved = json.loads(f.read())
    assert saved["params"]["n_features_map"] == 4  # the old model, untouched


def _generate(kind, name, *opts):
    """A setup that writes ``generate KIND`` output (and its ``.cols.zarr`` companion)."""

    def setup(tmp, monkeypatch):
        argv = ["generate", kind, str(tmp / name), "--rows", "30", "--n-cols", "20", *opts, "-q"]
        assert main(argv) == 0

    return setup


def _old_columns_store(tmp, monkeypatch):
    """A companion column store as generators wrote it before issue 23 (features as Y)."""
    rng = np.random.default_rng(1)
    attrs = {"generator": "lowrank.columns"}
    write_arrays(str(tmp / "old.cols.zarr"), {"Y": rng.normal(size=(20, 2))}, attrs=attrs)


def _model_saved(name):
    return lambda tmp, out: os.path.isfile(tmp / name / "model.json")


ROOT = os.geteuid() == 0 if hasattr(os, "geteuid") else False

ROWS = [
    # ---------------------------------------------------------------- parameters
    Row("param-typo-close-match", ["fit", "gimc-lff", "{tr}", "{tmp}/new", "--n-features-mp", "8"],
        2, "unknown option --n-features-mp for `ooc-lowrank fit gimc-lff`. Did you mean "
        "--n-features-map", no_work=True),
    Row("param-abbreviation-refused", ["fit", "gimc-lff", "{tr}", "{tmp}/new", "--n-comp", "8"],
        2, "unknown option --n-comp for", no_work=True),
    Row("param-gamma-nan", ["fit", "gimc-lff", "{tr}", "{tmp}/new", "--gamma", "nan"],
        2, "--gamma must be a finite number; got 'nan'", no_work=True),
    Row("param-alpha-inf", ["fit", "imc-rff", "{tr}", "{tmp}/new", "--alpha", "inf"],
        2, "--alpha must be a finite number; got 'inf'", no_work=True),
    Row("param-glrl-alpha-nan", ["fit", "glrl", "{rtr}", "{tmp}/new", "--alpha", "nan"],
        2, "--alpha must be a finite number; got 'nan'", no_work=True),
    Row("param-int-not-whole", ["fit", "gimc-lff", "{tr}", "{tmp}/new", "--max-iter", "2.5"],
        2, "--max-iter must be an integer; got '2.5'. Pass a whole number", no_work=True),
    Row("param-bool-garbage", ["fit", "gimc-lff", "{tr}", "{tmp}/new", "--normalize-rows", "maybe"],
        2, "--normalize-rows must be true or false; got 'maybe'", no_work=True),
    Row("param-fixed-by-method", ["fit", "gimc-lff", "{tr}", "{tmp}/new", "--features", "nystrom"],
        2, "--features is fixed to fourier by method gimc-lff; got 'nystrom'. Drop the option, "
        "or use method gimc-lnys", no_work=True),
    Row("param-estimator-check-names-the-option", ["fit", "glrl", "{rtr}", "{tmp}/new", "--init",
        "bais"], 2, "--init must be one of"),
    Row("param-method-typo-close-match", ["fit", "glr", "{rtr}", "{tmp}/new"],
        2, "Did you mean glrl", no_work=True),
    Row("param-missing-positional-one-line", ["fit", "gimc-lff", "{tr}"],
        2, "ooc-lowrank fit gimc-lff: the following arguments are required: MODEL", no_work=True),
    Row("param-fit-keyword-method-lacks", ["fit", "glrl", "{rtr}", "{tmp}/new", "--eval-store",
        "{va}"], 2, "unknown option --eval-store for `ooc-lowrank fit glrl`", no_work=True),
    Row("param-evaluate-option-typo", ["evaluate", "{m}", "{va}", "--metric", "p@1"],
        2, "unknown option --metric for `ooc-lowrank evaluate`. Did you mean --metrics"),
    Row("param-no-flag-spelling", ["fit", "gimc-lff", "{tr}", "{tmp}/new", "--no-normalize-rows",
        "--n-features-map", "4", "--max-iter", "1", "-q"], 0,
        check=lambda tmp, out: os.path.isfile(tmp / "new" / "model.json")),
    Row("param-json-never-infinity", ["evaluate", "{gm}", "{rte}", "--metrics", "mae,rmse",
        "--json"], 0, "rmse=inf", check=lambda tmp, out: _json_strict(out)["rmse"] is None,
        marks=[pytest.mark.filterwarnings("ignore:overflow:RuntimeWarning")]),
    Row("param-top-k-zero", ["predict", "{m}", "{va}", "{tmp}/p.zarr", "--top-k", "0"],
        2, "--top-k must be >= 1; got 0"),
    Row("param-top-k-negative", ["predict", "{m}", "{va}", "{tmp}/p.zarr", "--top-k", "-3"],
        2, "--top-k must be >= 1; got -3"),
    Row("param-top-k-above-labels-clipped", ["predict", "{m}", "{va}", "{tmp}/p.zarr", "--top-k",
        "500"], 0, out="wrote top-5 predictions to",
        check=lambda tmp, out: "clipped to the model's 5 labels" in out
        and open_dataset(str(tmp / "p.zarr"))["labels"].shape == (120, 5)),
    # issue 23 item 7: named refusals, JSON errors
    Row("param-log-level-unknown", ["info", "{tr}", "--log-level", "LOUD"],
        2, "--log-level must be one of DEBUG, INFO, WARNING, ERROR, CRITICAL; got 'LOUD'",
        no_work=True),
    Row("param-log-level-after-command", ["fit", "gimc-lff", "{tr}", "{tmp}/new", "--log-level",
        "verbose"], 2, "--log-level must be one of", no_work=True),
    Row("param-eval-metrics-empty", ["fit", "gimc-lff", "{tr}", "{tmp}/new", "--eval-store",
        "{va}", "--eval-metrics", ""], 2, "--eval-metrics must list at least one value (A,B,...)"
        "; got ''. Drop --eval-metrics to use the default", no_work=True),
    Row("param-evaluate-metrics-empty", ["evaluate", "{m}", "{va}", "--metrics", " , "],
        2, "--metrics must name at least one metric; got ' , '"),
    Row("param-json-error-object", ["info", "{tmp}/nothing.zarr", "--json"], 2,
        "no store at this location", out='"error"', check=lambda tmp, out: _json_strict(out)[
            "exit_code"] == 2 and "no store at this location" in _json_strict(out)["error"]),
    Row("param-json-error-object-usage", ["evaluate", "{m}", "--json"], 2,
        "the following arguments are required",
        check=lambda tmp, out: "required" in _json_strict(out)["error"]),
    # ---------------------------------------------------------------- locations
    Row("loc-fit-onto-train-store", ["fit", "gimc-lff", "{tr}", "{tr}"],
        2, "MODEL must not be, contain or lie inside an input", no_work=True),
    Row("loc-fit-onto-train-store-overwrite", ["fit", "gimc-lff", "{tr}", "{tr}", "--overwrite"],
        2, "MODEL must not be, contain or lie inside an input", no_work=True),
    Row("loc-fit-onto-train-store-other-spelling", ["fit", "gimc-lff", "{tr}", "{tmp}/./tr.zarr/",
        "--overwrite"], 2, "MODEL must not be, contain or lie inside an input", no_work=True),
    Row("loc-fit-inside-train-store", ["fit", "gimc-lff", "{tr}", "{tr}/model"],
        2, "MODEL must not be, contain or lie inside an input", no_work=True),
    Row("loc-fit-onto-eval-store", ["fit", "gimc-lff", "{tr}", "{va}", "--eval-store", "{va}",
        "--overwrite"], 2, "MODEL must not be, contain or lie inside an input", no_work=True),
    Row("loc-fit-onto-any-folder", ["fit", "gimc-lff", "{tr}", "{tmp}/folder"],
        2, "MODEL exists and is not an ooc_lowrank model (no model.json)", no_work=True),
    Row("loc-fit-onto-any-folder-overwrite", ["fit", "gimc-lff", "{tr}", "{tmp}/folder",
        "--overwrite"], 2, "MODEL exists and is not an ooc_lowrank model", no_work=True),
    Row("loc-fit-onto-model-needs-overwrite", ["fit", "gimc-lff", "{tr}", "{m}"],
        2, "MODEL already holds a model", no_work=True),
    Row("loc-fit-onto-model-overwrite", ["fit", "gimc-lff", "{tr}", "{m}", "--overwrite",
        "--n-features-map", "6", "--max-iter", "1", "-q"], 0,
        check=lambda tmp, out: _model_n_components(tmp / "m", "n_features_map") == 6),
    Row("loc-fit-under-a-file", ["fit", "gimc-lff", "{tr}", "{tmp}/afile/m"],
        2, "must be under a folder, but", no_work=True),
    Row("loc-fit-unwritable-location", ["fit", "gimc-lff", "{tr}", "/proc/ooc-lowrank-probe/m"],
        2, "MODEL is not writable", no_work=True,
        marks=[pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc")]),
    Row("loc-fit-read-only-folder", ["fit", "gimc-lff", "{tr}", "{tmp}/ro/m"],
        2, "MODEL is not writable", no_work=True,
        setup=lambda tmp, mp: os.chmod(tmp / "ro", 0o555),
        marks=[pytest.mark.skipif(ROOT, reason="root ignores folder permissions")]),
    Row("loc-fit-s3-without-driver", ["fit", "gimc-lff", "{tr}", "s3://bucket/m"],
        2, "MODEL needs a filesystem driver that is not installed", no_work=True,
        marks=[pytest.mark.skipif(bool(__import__("importlib").util.find_spec("s3fs")),
                                  reason="s3fs installed")]),
    Row("loc-fit-unknown-protocol", ["fit", "gimc-lff", "{tr}", "nosuchproto://x/m"],
        2, "MODEL must be a local path or a known fsspec URL", no_work=True),
    Row("loc-convert-overwrite-not-a-store", ["convert", "svmlight", "{tmp}/a.svm",
        "{tmp}/folder", "--overwrite"], 2, "DEST exists and is not an ooc_lowrank store"),
    Row("loc-convert-onto-its-source", ["convert", "svmlight", "{tmp}/a.svm", "{tmp}/a.svm",
        "--overwrite"], 2, "DEST must not be, contain or lie inside an input"),
    Row("loc-generate-overwrite-not-a-store", ["generate", "multilabel", "{tmp}/folder", "--rows",
        "10", "--overwrite"], 2, "DEST exists and is not an ooc_lowrank store"),
    Row("loc-predict-onto-input-store", ["predict", "{m}", "{va}", "{va}", "--top-k", "2",
        "--overwrite"], 2, "OUT must not be, contain or lie inside an input"),
    Row("loc-predict-onto-model", ["predict", "{m}", "{va}", "{m}", "--top-k", "2",
        "--overwrite"], 2, "OUT must not be, contain or lie inside an input"),
    Row("loc-predict-onto-any-folder", ["predict", "{m}", "{va}", "{tmp}/folder", "--top-k", "2",
        "--overwrite"], 2, "OUT exists and is not an ooc_lowrank store"),
    Row("loc-predict-onto-store-needs-overwrite", ["predict", "{m}", "{va}", "{tr}", "--top-k",
        "2"], 2, "OUT already holds a store"),
    Row("loc-url-model-needs-overwrite", ["fit", "gimc-lff", "{tr}", "memory://cli-safety/m"],
        2, "MODEL already holds a model", no_work=True, setup=_memory_model),
    # ---------------------------------------------------------------- two-sided IMC, cluster
    Row("param-imc-without-row-features", ["fit", "imc", "{rtr}", "{tmp}/new"],
        2, "--row-features is required; got None"),
    Row("param-imc-side-rows-disagree", ["fit", "imc", "{rtr}", "{tmp}/new", "--row-features",
        "{cf}", "--col-features", "{cf}"], 2, "--row-features must have one row per row of the "
        "observed matrix: the observations have 30 rows"),
    Row("loc-fit-imc-onto-row-features", ["fit", "imc", "{rtr}", "{rf}", "--row-features", "{rf}",
        "--col-features", "{cf}", "--overwrite"], 2,
        "MODEL must not be, contain or lie inside an input", no_work=True),
    Row("loc-fit-imc-onto-col-features", ["fit", "imc", "{rtr}", "{cf}/m", "--row-features",
        "{rf}", "--col-features", "{cf}"], 2,
        "MODEL must not be, contain or lie inside an input", no_work=True),
    Row("loc-fit-imc-onto-a-store-overwrite", ["fit", "imc", "{rtr}", "{bl}", "--row-features",
        "{rf}", "--col-features", "{cf}", "--overwrite"], 2,
        "MODEL exists and is not an ooc_lowrank model", no_work=True),
    Row("loc-fit-imc-onto-model-overwrite", ["fit", "imc", "{rtr}", "{m}", "--row-features",
        "{rf}", "--col-features", "{cf}", "--overwrite", "--n-components", "3", "--max-iter",
        "1", "-q"], 0, check=lambda tmp, out: _model_n_components(tmp / "m") == 3),
    # issue 23 item 7: the README's `fit imc ... --col-features` on generated companions
    Row("loc-imc-col-features-of-generate-lowrank", ["fit", "imc", "{tmp}/lr.zarr",
        "{tmp}/imc.model", "--row-features", "{tmp}/lr.zarr", "--col-features",
        "{tmp}/lr.cols.zarr", "--n-components", "2", "--max-iter", "1", "-q"], 0,
        setup=_generate("lowrank", "lr.zarr", "--n-col-features", "3"),
        check=_model_saved("imc.model")),
    Row("loc-imc-col-features-of-generate-imc-toy", ["fit", "imc", "{tmp}/toy.zarr",
        "{tmp}/imc.model", "--row-features", "{tmp}/toy.zarr", "--col-features",
        "{tmp}/toy.cols.zarr", "--n-components", "2", "--max-iter", "1", "-q"], 0,
        setup=_generate("imc_toy", "toy.zarr", "--n-features", "4"),
        check=_model_saved("imc.model")),
    Row("loc-imc-col-features-of-an-old-companion", ["fit", "imc", "{rtr}", "{tmp}/imc.model",
        "--row-features", "{rf}", "--col-features", "{tmp}/old.cols.zarr", "--n-components",
        "2", "--max-iter", "1", "-q"], 0, setup=_old_columns_store,
        check=_model_saved("imc.model")),
    Row("loc-cluster-onto-features", ["cluster", "{bl}", "{bl}", "--sample-constraints", "2",
        "--overwrite"], 2, "OUT must not be, contain or lie inside an input", no_work=True),
    Row("loc-cluster-onto-constraints", ["cluster", "{bl}", "{cons}", "--constraints", "{cons}",
        "--overwrite"], 2, "OUT must not be, contain or lie inside an input", no_work=True),
    Row("loc-cluster-onto-model", ["cluster", "{bl}", "{m}", "--sample-constraints", "2",
        "--overwrite"], 2, "OUT exists and is not an ooc_lowrank store", no_work=True),
    Row("loc-cluster-onto-any-folder", ["cluster", "{bl}", "{tmp}/folder", "--sample-constraints",
        "2", "--overwrite"], 2, "OUT exists and is not an ooc_lowrank store", no_work=True),
    Row("loc-cluster-onto-store-needs-overwrite", ["cluster", "{bl}", "{tr}",
        "--sample-constraints", "2"], 2, "OUT already holds a store", no_work=True),
    Row("loc-cluster-onto-store-overwrite", ["cluster", "{bl}", "{tr}", "--constraints", "{cons}",
        "--overwrite", "--max-iter", "1", "--n-features-map", "8", "--seed", "0", "-q"], 0,
        check=lambda tmp, out: open_dataset(str(tmp / "tr.zarr"))["labels"].shape == (40, 1)),
    Row("param-cluster-constraint-values", ["cluster", "{bl}", "{tmp}/new.zarr", "--constraints",
        "{bad}"], 2, "constraints values must be 0 (different cluster) or 1 (same cluster)"),
    Row("param-cluster-constraints-shape", ["cluster", "{bl}", "{tmp}/new.zarr", "--constraints",
        "{rtr}"], 2, "must have one row per row of the observed matrix"),
    # ---------------------------------------------------------------- interruption
    Row("int-local-save-interrupted", ["fit", "gimc-lff", "{tr}", "{m}", "--overwrite",
        "--n-features-map", "6", "--max-iter", "1", "-q"], 130, "interrupted",
        setup=_interrupt_local_save),
    Row("int-url-save-interrupted-keeps-old-model", ["fit", "gimc-lff", "{tr}",
        "memory://cli-safety/m", "--overwrite", "--n-features-map", "6", "--max-iter", "1", "-q"],
        130, "interrupted", setup=_interrupt_memory_move, check=_memory_model_intact),
]  # fmt: skip

GUARDS = [
    Row("guard-method-typo", ["fit", "gimc-lf", "{tr}", "{tmp}/new"],
        2, "unknown method 'gimc-lf'; choose one of", no_work=True),
    Row("guard-interrupted-fit-writes-nothing", ["fit", "gimc-lff", "{tr}", "{tmp}/new"],
        130, "interrupted", setup=lambda tmp, mp: mp.setattr(
            "ooc_lowrank.gimc.estimator.GIMC.fit",
            lambda self, *a, **k: (_ for _ in ()).throw(KeyboardInterrupt))),
]  # fmt: skip


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """Stores and fitted models every row starts from (copied per row)."""
    d = tmp_path_factory.mktemp("cli-safety-base")
    for name, seed, rows in (("tr.zarr", "1", "300"), ("va.zarr", "2", "120")):
        argv = ["generate", "multilabel", str(d / name), "--rows", rows, "--seed", seed,
                "--n-features", "6", "--n-labels", "5", "-q"]  # fmt: skip
        assert main(argv) == 0
    argv = ["fit", "gimc-lff", str(d / "tr.zarr"), str(d / "m"), "--n-features-map", "4",
            "--max-iter", "2", "--seed", "0", "-q"]  # fmt: skip
    assert main(argv) == 0
    rng = np.random.default_rng(0)
    obs = sp.random(30, 20, density=0.5, random_state=0, format="csr")
    obs.data = rng.uniform(1, 5, obs.nnz)
    write_arrays(str(d / "rtr.zarr"), {"obs": obs}, kinds={"obs": "coo"})
    obs.data = obs.data.copy()
    obs.data[0] = 1e200  # its squared error overflows: RMSE = inf
    write_arrays(str(d / "rte.zarr"), {"obs": obs}, kinds={"obs": "coo"})
    assert main(["fit", "glrl", str(d / "rtr.zarr"), str(d / "gm"), "--n-components", "2", "-q"]) == 0
    write_arrays(str(d / "rf.zarr"), {"X": rng.normal(size=(30, 3))})
    write_arrays(str(d / "cf.zarr"), {"X": rng.normal(size=(20, 2))})
    y = np.repeat([0.0, 1.0], 20)[:, None]
    write_arrays(str(d / "bl.zarr"), {"X": rng.normal(size=(40, 2)) + 3 * y, "y": y})
    r, c = np.triu_indices(40, 1)
    pick = rng.choice(r.size, 80, replace=False)
    cons = sp.csr_matrix(((y[r[pick], 0] == y[c[pick], 0]) * 1.0, (r[pick], c[pick])), (40, 40))
    write_arrays(str(d / "cons.zarr"), {"obs": cons}, kinds={"obs": "coo"})
    bad = cons.copy()
    bad.data[0] = 2.0
    write_arrays(str(d / "bad.zarr"), {"obs": bad}, kinds={"obs": "coo"})
    (d / "a.svm").write_text("1 1:0.5 3:1.0\n0 2:2.0\n")
    (d / "folder").mkdir()
    (d / "folder" / "precious.txt").write_text("not a model, not a store")
    (d / "afile").write_text("a file")
    (d / "ro").mkdir()
    return d


def _snapshot(root):
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            p = os.path.join(dirpath, n)
            st = os.lstat(p)
            out[os.path.relpath(p, root)] = (st.st_size, st.st_mtime_ns) if n in filenames else 0
    return out


def _params(rows):
    return [pytest.param(r, id=r.id, marks=r.marks) for r in rows]


def _run(row, base, tmp_path, monkeypatch, capsys):
    tmp = tmp_path / "w"
    shutil.copytree(base, tmp)
    if row.setup is not None:
        row.setup(tmp, monkeypatch)
    if row.no_work:
        from ooc_lowrank.gimc.estimator import GIMC
        from ooc_lowrank.glrl.estimator import GreedyLowRank
        from ooc_lowrank.imc import GIMCClustering, InductiveMatrixCompletion

        for cls in (GIMC, GreedyLowRank, GIMCClustering, InductiveMatrixCompletion):

            @functools.wraps(cls.fit)  # keeps the signature: the CLI derives options from it
            def refuse(self, *a, **k):
                raise AssertionError("fit ran")

            monkeypatch.setattr(cls, "fit", refuse)
    names = {k: str(tmp / v) for k, v in (("tr", "tr.zarr"), ("va", "va.zarr"), ("m", "m"),
             ("gm", "gm"), ("rtr", "rtr.zarr"), ("rte", "rte.zarr"), ("rf", "rf.zarr"),
             ("cf", "cf.zarr"), ("bl", "bl.zarr"), ("cons", "cons.zarr"),
             ("bad", "bad.zarr"))}  # fmt: skip
    argv = [a.format(tmp=tmp, **names) for a in row.argv]
    before = _snapshot(tmp)
    try:
        code = main(argv)
    finally:
        os.chmod(tmp / "ro", 0o755)
    cap = capsys.readouterr()
    assert code == row.code, (argv, cap.err)
    assert row.err in cap.err, cap.err
    assert row.out in cap.out, cap.out
    if code != 0:
        assert cap.err.count("\n") == 1 and "Traceback" not in cap.err, cap.err
        assert _snapshot(tmp) == before, "a failed command changed the working folder"
    if row.check is not None:
        assert row.check(tmp, cap.out) is not False


@pytest.mark.parametrize("row", _params(ROWS))
def test_cli_probe(row, base, tmp_path, monkeypatch, capsys):
    _run(row, base, tmp_path, monkeypatch, capsys)


@pytest.mark.parametrize("row", _params(GUARDS))
def test_cli_guard(row, base, tmp_path, monkeypatch, capsys):
    _run(row, base, tmp_path, monkeypatch, capsys)


def test_probe_table_size():
    families = {r.id.split("-")[0] for r in ROWS}
    assert families == {"param", "loc", "int"} and len(ROWS) >= 40


def test_url_save_interrupted_keeps_old_model(base, monkeypatch):
    """The interruption family below the CLI: ``save`` to an fsspec URL that is interrupted
    while the new model moves into place leaves the old model and no temporary behind."""
    from ooc_lowrank import load

    _interrupt_memory_move(base, monkeypatch)
    est = load(str(base / "m"))
    est.n_features_map = 6  # so that the old and the new model differ
    with pytest.raises(KeyboardInterrupt):
        est.save("memory://cli-safety/m", overwrite=True)
    _memory_model_intact(base, "")


@pytest.mark.skipif(not hasattr(signal, "SIGTERM") or os.name != "posix", reason="POSIX signals")
def test_sigterm_during_a_write_leaves_no_temporary(tmp_path):
    """The interruption family with a real signal: SIGTERM while `generate` streams its store
    ends with exit 143, one line, and nothing left in the destination folder (the temporary
    store is discarded as for Ctrl-C)."""
    out = tmp_path / "out"
    out.mkdir()
    argv = [sys.executable, "-m", "ooc_lowrank.cli", "generate", "multilabel", str(out / "g.zarr"),
            "--rows", "3000000", "--n-features", "20", "--n-labels", "10", "-q"]  # fmt: skip
    p = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(6000):  # until the writer's temporary store exists (or the command ends)
            if any(".tmp-" in n for n in os.listdir(out)) or p.poll() is not None:
                break
            time.sleep(0.02)
        assert p.poll() is None, "generate ended before it could be interrupted"
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 143, err
    assert os.listdir(out) == [], err
    assert err.startswith("ooc-lowrank: terminated") and err.count("\n") == 1, err


def test_a_second_interrupt_cannot_stop_the_cleanup():
    """While the temporaries are removed after Ctrl-C, further SIGINT / SIGTERM are ignored
    (a second Ctrl-C used to stop the cleanup half way with a traceback); the handlers are
    restored afterwards."""
    import os
    import signal

    from ooc_lowrank.cli import _SignalsIgnored

    before = signal.getsignal(signal.SIGINT)
    with _SignalsIgnored():
        os.kill(os.getpid(), signal.SIGINT)  # would raise KeyboardInterrupt here
        os.kill(os.getpid(), signal.SIGTERM)  # would end the process
    assert signal.getsignal(signal.SIGINT) is before


@pytest.mark.skipif(os.name != "posix", reason="POSIX signals")
@pytest.mark.parametrize("module", ["argparse", "numpy", "zarr"])
def test_ctrl_c_while_the_command_imports_is_one_line_and_130(tmp_path, module):
    """Issue 23 item 7: Ctrl-C in the first second of any command (while Python imports the
    command's modules) printed a KeyboardInterrupt traceback.  The console script's first
    import, ``ooc_lowrank``, is light now; ``argparse`` is imported by ``cli`` itself (before
    ``main`` runs), NumPy and Zarr inside ``main``."""
    script = tmp_path / "ooc-lowrank"  # the console script's name
    script.write_text(
        "import os, signal, sys\n"
        "# as from a terminal, even when this test runs in the background (a shell's '&' starts\n"
        "# its children with SIGINT ignored, and Python then installs no Ctrl-C handler)\n"
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        f"MODULE = {module!r}\n"
        "class Interrupt:  # Ctrl-C exactly when MODULE is first imported\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == MODULE:\n"
        "            sys.meta_path.remove(self)\n"
        "            os.kill(os.getpid(), signal.SIGINT)\n"
        "        return None\n"
        "sys.meta_path.insert(0, Interrupt())\n"
        "from ooc_lowrank.cli import main  # as the console script does\n"
        "sys.exit(main())\n"
    )
    p = subprocess.run(
        [sys.executable, str(script), "info", str(tmp_path / "nothing.zarr")],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert p.returncode == 130, p.stderr
    assert "Traceback" not in p.stderr and p.stderr.count("\n") == 1, p.stderr
    assert p.stderr.startswith("ooc-lowrank: interrupted"), p.stderr


def test_import_of_the_command_is_light():
    """The console entry point imports ``ooc_lowrank.cli``: no NumPy, Zarr, Dask or Numba before
    ``main`` runs (so ``main`` owns Ctrl-C during the heavy imports)."""
    code = (
        "import sys, ooc_lowrank.cli; "
        "print([m for m in ('numpy', 'zarr', 'dask', 'numba', 'scipy') if m in sys.modules])"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stdout.strip() == "[]", (p.stdout, p.stderr)


def test_an_error_while_sigterm_unwinds_a_write_is_still_a_termination(
    tmp_path, monkeypatch, capsys
):
    """SIGTERM during a write can surface as another error from the interrupted IO (once in a
    cold-cache CI run: ``[Errno 21] Is a directory`` on the temporary store, reported as
    ``error:`` with exit 2); it is a termination all the same: 143, temporaries removed."""
    from ooc_lowrank import cli, generators

    def interrupted_write(*a, **k):
        try:
            cli._on_sigterm(signal.SIGTERM, None)  # what the signal handler does mid-write
        except cli._Terminated:
            raise OSError(21, "Is a directory", str(tmp_path / ".g.zarr.tmp-1")) from None

    monkeypatch.setattr(generators, "generate", interrupted_write)
    before = signal.getsignal(signal.SIGTERM)
    rc = cli.main(["generate", "multilabel", str(tmp_path / "g.zarr"), "--rows", "10", "-q"])
    err = capsys.readouterr().err
    assert rc == 143, err
    assert err.startswith("ooc-lowrank: terminated") and "Errno" not in err, err
    assert signal.getsignal(signal.SIGTERM) is before
    # and an error without a SIGTERM stays an error (exit 2, one line)
    def failing_write(*a, **k):
        raise OSError(5, "boom")

    monkeypatch.setattr(generators, "generate", failing_write)
    assert cli.main(["generate", "multilabel", str(tmp_path / "h.zarr"), "--rows", "10", "-q"]) == 2
    assert "error: [Errno 5] boom" in capsys.readouterr().err
