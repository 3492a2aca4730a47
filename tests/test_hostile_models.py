"""Hostile models and numeric hazards: a table-driven probe suite that grows.

Three tables:

* ``MODEL_CASES``: a saved model (``model.json`` + ``arrays.npz``) is tampered with on disk, or a
  loaded estimator's fitted attributes are mutated in memory; loading (file rows) or every
  prediction entry point (memory rows) must raise the expected exception with a message
  fragment.  Before the fix some of these **segfaulted** (Numba kernels indexing past the
  factors), so the whole table runs in a child process: a crash fails its row instead of
  killing pytest, and the child restarts at the next row.
* ``PARAM_CASES``: non-finite float hyperparameters are errors at the start of ``fit``.
* ``HAZARD_CASES``: data whose scale overflows (a feature value of 1e300) stop the fit with an
  error naming the likely cause instead of returning an all-NaN model.

Add a row to grow the suite; the row count is reported by ``test_probe_count``.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

HERE = Path(__file__).resolve()


# --------------------------------------------------------------------------- tamper helpers


def _json(fn):
    """Tamper that edits the parsed ``model.json`` document in place."""

    def tamper(path):
        p = os.path.join(path, "model.json")
        with open(p) as f:
            doc = json.load(f)
        fn(doc)
        with open(p, "w") as f:
            json.dump(doc, f)

    return tamper


def _npz(fn):
    """Tamper that edits the dict of arrays of ``arrays.npz``."""

    def tamper(path):
        p = os.path.join(path, "arrays.npz")
        with np.load(p, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        fn(arrays)
        buf = io.BytesIO()
        np.savez(buf, **arrays)
        with open(p, "wb") as f:
            f.write(buf.getvalue())

    return tamper


def _raw(name, fn):
    """Tamper that rewrites the bytes of one file."""

    def tamper(path):
        p = os.path.join(path, name)
        with open(p, "rb") as f:
            data = f.read()
        with open(p, "wb") as f:
            f.write(fn(data))

    return tamper


def _set(arrays, name, value):
    arrays[name] = value


def _nan_at(a):
    a = a.astype(np.float64).copy()
    a.flat[a.size // 2] = np.nan
    return a


def _inf_at(a):
    a = a.astype(np.float64).copy()
    a.flat[0] = np.inf
    return a


def _npy_bytes(a):
    buf = io.BytesIO()
    np.save(buf, a)
    return buf.getvalue()


def _npz_with_object():
    """An archive whose member is a pickled object array (must never be unpickled)."""
    buf = io.BytesIO()
    np.savez(buf, coef=np.array([{"evil": 1}], dtype=object))
    return buf.getvalue()


def _attr(name, fn):
    """Memory tamper: ``est.name = fn(est.name)``."""

    def tamper(est):
        setattr(est, name, fn(getattr(est, name)))

    return tamper


@dataclass(frozen=True)
class Case:
    name: str
    model: str  # "gimc" (multi-label Fourier), "gimc-nys" (IMC-NYS, has M0), "gimc-mc", "glrl"
    where: str  # "file" (tamper the saved model, error at load) or "memory" (error at predict)
    tamper: object
    exc: type | None  # None: the model must load and predict as the original
    fragment: str = ""


def _parts(doc):
    return doc["extra"]["parts"]


MODEL_CASES = [
    # ----------------------------------------------------------------- controls
    Case("gimc-untouched", "gimc", "file", lambda p: None, None),
    Case("gimc-nys-untouched", "gimc-nys", "file", lambda p: None, None),
    Case("gimc-mc-untouched", "gimc-mc", "file", lambda p: None, None),
    Case("glrl-untouched", "glrl", "file", lambda p: None, None),
    # ----------------------------------------------------------------- GIMC metadata edits
    Case(
        "gimc-n_features_in-larger",
        "gimc",
        "file",
        _json(lambda d: d["extra"].update(n_features_in=d["extra"]["n_features_in"] + 3)),
        ValueError,
        "'components'",
    ),
    Case(
        "gimc-n_features_in-smaller",
        "gimc",
        "file",
        _json(lambda d: d["extra"].update(n_features_in=2)),
        ValueError,
        "'components'",
    ),
    Case(
        "gimc-n_labels-larger",
        "gimc",
        "file",
        _json(lambda d: d["extra"].update(n_labels=d["extra"]["n_labels"] + 5)),
        ValueError,
        "'coef'",
    ),
    Case(
        "gimc-n_labels-smaller",
        "gimc",
        "file",
        _json(lambda d: d["extra"].update(n_labels=1)),
        ValueError,
        "'coef'",
    ),
    Case(
        "gimc-part-m-larger",
        "gimc",
        "file",
        _json(lambda d: _parts(d)[0].__setitem__(1, _parts(d)[0][1] + 5)),
        ValueError,
        "'components'",
    ),
    Case(
        "gimc-part-m-smaller",
        "gimc",
        "file",
        _json(lambda d: _parts(d)[0].__setitem__(1, 3)),
        ValueError,
        "'components'",
    ),
    Case(
        "gimc-part-m-zero",
        "gimc",
        "file",
        _json(lambda d: _parts(d)[0].__setitem__(1, 0)),
        ValueError,
        "parts",
    ),
    Case(
        "gimc-part-kind-unknown",
        "gimc",
        "file",
        _json(lambda d: _parts(d)[0].__setitem__(0, "wavelet")),
        ValueError,
        "parts",
    ),
    Case(
        "gimc-part-gamma-nan",
        "gimc",
        "file",
        _json(lambda d: _parts(d)[0].__setitem__(2, float("nan"))),
        ValueError,
        "gamma",
    ),
    Case(
        "gimc-part-gamma-string",
        "gimc",
        "file",
        _json(lambda d: _parts(d)[0].__setitem__(2, "wide")),
        ValueError,
        "gamma",
    ),
    Case(
        "gimc-parts-missing",
        "gimc",
        "file",
        _json(lambda d: d["extra"].pop("parts")),
        ValueError,
        "extra.parts",
    ),
    Case(
        "gimc-parts-not-a-list",
        "gimc",
        "file",
        _json(lambda d: d["extra"].update(parts="fourier")),
        ValueError,
        "extra.parts",
    ),
    Case(
        "gimc-parts-empty",
        "gimc",
        "file",
        _json(lambda d: d["extra"].update(parts=[])),
        ValueError,
        "extra.parts",
    ),
    Case(
        "gimc-n_labels-string",
        "gimc",
        "file",
        _json(lambda d: d["extra"].update(n_labels="many")),
        ValueError,
        "extra.n_labels",
    ),
    Case(
        "gimc-multilabel-string",
        "gimc",
        "file",
        _json(lambda d: d["extra"].update(multilabel="yes")),
        ValueError,
        "extra.multilabel",
    ),
    Case(
        "gimc-extra-null",
        "gimc",
        "file",
        _json(lambda d: d.update(extra=None)),
        ValueError,
        "'extra'",
    ),
    Case(
        "gimc-params-null",
        "gimc",
        "file",
        _json(lambda d: d.update(params=None)),
        ValueError,
        "'params'",
    ),
    Case(
        "gimc-params-unknown-key",
        "gimc",
        "file",
        _json(lambda d: d["params"].update(bogus=1)),
        ValueError,
        "bogus",
    ),
    Case(
        "gimc-params-gamma-nan",
        "gimc",
        "file",
        _json(lambda d: d["params"].update(gamma=float("nan"))),
        ValueError,
        "gamma must be finite",
    ),
    Case(
        "gimc-params-alpha-string",
        "gimc",
        "file",
        _json(lambda d: d["params"].update(alpha="big")),
        ValueError,
        "alpha",
    ),
    Case(
        "gimc-estimator-unknown",
        "gimc",
        "file",
        _json(lambda d: d.update(estimator="Pickled")),
        ValueError,
        "unknown estimator",
    ),
    Case(
        "gimc-format-version",
        "gimc",
        "file",
        _json(lambda d: d.update(format_version=99)),
        ValueError,
        "version",
    ),
    Case(
        "gimc-classes-wrong-length",
        "gimc",
        "file",
        _npz(lambda a: _set(a, "classes", a["classes"][:-1])),
        ValueError,
        "'classes'",
    ),
    Case(
        "gimc-mc-classes-wrong-length",
        "gimc-mc",
        "file",
        _json(lambda d: d["extra"]["classes"].pop()),
        ValueError,
        "extra.classes",
    ),
    Case(
        "gimc-mc-classes-not-strings",
        "gimc-mc",
        "file",
        _json(lambda d: d["extra"]["classes"].__setitem__(0, {"x": 1})),
        ValueError,
        "extra.classes",
    ),
    Case(
        "gimc-mc-n_labels-vs-classes",
        "gimc-mc",
        "file",
        _json(lambda d: d["extra"].update(n_labels=d["extra"]["n_labels"] + 1)),
        ValueError,
        "'coef'",
    ),
    # ----------------------------------------------------------------- GIMC array edits
    Case(
        "gimc-components-narrowed",
        "gimc",
        "file",
        _npz(lambda a: _set(a, "components", a["components"][:, :-3])),
        ValueError,
        "'components'",
    ),
    Case(
        "gimc-components-fewer-rows",
        "gimc",
        "file",
        _npz(lambda a: _set(a, "components", a["components"][:-1])),
        ValueError,
        "'components'",
    ),
    Case(
        "gimc-coef-fewer-columns",
        "gimc",
        "file",
        _npz(lambda a: _set(a, "coef", a["coef"][:, :-1])),
        ValueError,
        "'coef'",
    ),
    Case(
        "gimc-coef-fewer-rows",
        "gimc",
        "file",
        _npz(lambda a: _set(a, "coef", a["coef"][:-2])),
        ValueError,
        "'coef'",
    ),
    Case(
        "gimc-coef-flattened",
        "gimc",
        "file",
        _npz(lambda a: _set(a, "coef", a["coef"].ravel())),
        ValueError,
        "'coef'",
    ),
    Case(
        "gimc-coef-int-dtype",
        "gimc",
        "file",
        _npz(lambda a: _set(a, "coef", a["coef"].astype(np.int64))),
        ValueError,
        "dtype",
    ),
    Case(
        "gimc-coef-complex-dtype",
        "gimc",
        "file",
        _npz(lambda a: _set(a, "coef", a["coef"].astype(np.complex128))),
        ValueError,
        "dtype",
    ),
    Case(
        "gimc-components-float16",
        "gimc",
        "file",
        _npz(lambda a: _set(a, "components", a["components"].astype(np.float16))),
        ValueError,
        "dtype",
    ),
    Case(
        "gimc-components-nan",
        "gimc",
        "file",
        _npz(lambda a: _set(a, "components", _nan_at(a["components"]))),
        ValueError,
        "finite",
    ),
    Case(
        "gimc-coef-inf",
        "gimc",
        "file",
        _npz(lambda a: _set(a, "coef", _inf_at(a["coef"]))),
        ValueError,
        "finite",
    ),
    Case(
        "gimc-coef-missing",
        "gimc",
        "file",
        _npz(lambda a: a.pop("coef")),
        ValueError,
        "'coef'",
    ),
    Case(
        "gimc-objective-2d",
        "gimc",
        "file",
        _npz(lambda a: _set(a, "objective", a["objective"][:, None])),
        ValueError,
        "'objective'",
    ),
    Case(
        "gimc-extra-array",
        "gimc",
        "file",
        _npz(lambda a: _set(a, "payload", np.zeros(3))),
        ValueError,
        "'payload'",
    ),
    Case(
        "gimc-M0-wrong-shape",
        "gimc-nys",
        "file",
        _npz(lambda a: _set(a, "M0", a["M0"][:-1])),
        ValueError,
        "'M0'",
    ),
    Case(
        "gimc-M0-missing",
        "gimc-nys",
        "file",
        _npz(lambda a: a.pop("M0")),
        ValueError,
        "'M0'",
    ),
    Case(
        "gimc-M0-nan",
        "gimc-nys",
        "file",
        _npz(lambda a: _set(a, "M0", _nan_at(a["M0"]))),
        ValueError,
        "finite",
    ),
    # ----------------------------------------------------------------- GIMC file-level damage
    Case(
        "gimc-json-truncated",
        "gimc",
        "file",
        _raw("model.json", lambda b: b[: len(b) // 2]),
        ValueError,
        "model.json",
    ),
    Case(
        "gimc-json-a-list",
        "gimc",
        "file",
        _raw("model.json", lambda b: b"[1, 2, 3]"),
        ValueError,
        "model.json",
    ),
    Case(
        "gimc-json-trailing-garbage",
        "gimc",
        "file",
        _raw("model.json", lambda b: b + b"\x00garbage"),
        ValueError,
        "model.json",
    ),
    Case(
        "gimc-npz-garbage",
        "gimc",
        "file",
        _raw("arrays.npz", lambda b: b"not a zip archive at all" * 10),
        ValueError,
        "arrays.npz",
    ),
    Case(
        "gimc-npz-truncated",
        "gimc",
        "file",
        _raw("arrays.npz", lambda b: b[: len(b) // 2]),
        ValueError,
        "arrays.npz",
    ),
    Case(
        "gimc-json-binary",
        "gimc",
        "file",
        _raw("model.json", lambda b: b"\xff\xfe\x00\x81" * 20),
        ValueError,
        "model.json",
    ),
    Case(
        "gimc-json-estimator-number",
        "gimc",
        "file",
        _json(lambda d: d.update(estimator=7)),
        ValueError,
        "'estimator'",
    ),
    Case(
        "gimc-npz-single-npy",
        "gimc",
        "file",
        _raw("arrays.npz", lambda b: _npy_bytes(np.zeros(3))),
        ValueError,
        "arrays.npz",
    ),
    Case(
        "gimc-npz-object-array",
        "gimc",
        "file",
        _raw("arrays.npz", lambda b: _npz_with_object()),
        ValueError,
        "arrays.npz",
    ),
    Case(
        "gimc-npz-missing",
        "gimc",
        "file",
        lambda p: os.remove(os.path.join(p, "arrays.npz")),
        FileNotFoundError,
        "arrays.npz",
    ),
    # ----------------------------------------------------------------- GIMC in-memory mutation
    Case(
        "gimc-mem-components-narrowed",
        "gimc",
        "memory",
        _attr("components_", lambda a: a[:, :-3]),
        ValueError,
        "components_",
    ),
    Case(
        "gimc-mem-components-fewer-rows",
        "gimc",
        "memory",
        _attr("components_", lambda a: a[:-1]),
        ValueError,
        "components_",
    ),
    Case(
        "gimc-mem-coef-fewer-rows",
        "gimc",
        "memory",
        _attr("coef_", lambda a: a[:-2]),
        ValueError,
        "coef_",
    ),
    Case(
        "gimc-mem-coef-fewer-columns",
        "gimc",
        "memory",
        _attr("coef_", lambda a: a[:, :-1]),
        ValueError,
        "coef_",
    ),
    Case(
        "gimc-mem-components-list",
        "gimc",
        "memory",
        _attr("components_", lambda a: a.tolist()),
        TypeError,
        "components_",
    ),
    Case(
        "gimc-mem-classes-short",
        "gimc-mc",
        "memory",
        _attr("classes_", lambda a: a[:-1]),
        ValueError,
        "classes_",
    ),
    # ----------------------------------------------------------------- GLRL metadata edits
    Case(
        "glrl-shape-rows-larger",
        "glrl",
        "file",
        _json(
            lambda d: d["extra"].update(shape=[d["extra"]["shape"][0] * 50, d["extra"]["shape"][1]])
        ),
        ValueError,
        "'U'",
    ),
    Case(
        "glrl-shape-rows-smaller",
        "glrl",
        "file",
        _json(lambda d: d["extra"].update(shape=[3, d["extra"]["shape"][1]])),
        ValueError,
        "'U'",
    ),
    Case(
        "glrl-shape-cols-larger",
        "glrl",
        "file",
        _json(lambda d: d["extra"].update(shape=[d["extra"]["shape"][0], 10**6])),
        ValueError,
        "'V'",
    ),
    Case(
        "glrl-shape-three-entries",
        "glrl",
        "file",
        _json(lambda d: d["extra"].update(shape=[*d["extra"]["shape"], 4])),
        ValueError,
        "extra.shape",
    ),
    Case(
        "glrl-shape-negative",
        "glrl",
        "file",
        _json(lambda d: d["extra"].update(shape=[-5, 3])),
        ValueError,
        "extra.shape",
    ),
    Case(
        "glrl-shape-string",
        "glrl",
        "file",
        _json(lambda d: d["extra"].update(shape="30x20")),
        ValueError,
        "extra.shape",
    ),
    Case(
        "glrl-shape-missing",
        "glrl",
        "file",
        _json(lambda d: d["extra"].pop("shape")),
        ValueError,
        "extra.shape",
    ),
    Case(
        "glrl-n_iter-missing",
        "glrl",
        "file",
        _json(lambda d: d["extra"].pop("n_iter")),
        ValueError,
        "extra.n_iter",
    ),
    Case(
        "glrl-params-n_components-string",
        "glrl",
        "file",
        _json(lambda d: d["params"].update(n_components="ten")),
        ValueError,
        "n_components",
    ),
    Case(
        "glrl-params-alpha-nan",
        "glrl",
        "file",
        _json(lambda d: d["params"].update(alpha=float("nan"))),
        ValueError,
        "alpha must be finite",
    ),
    Case(
        "glrl-params-not-a-dict",
        "glrl",
        "file",
        _json(lambda d: d.update(params=[1, 2])),
        ValueError,
        "'params'",
    ),
    # ----------------------------------------------------------------- GLRL array edits
    Case(
        "glrl-U-fewer-rows",
        "glrl",
        "file",
        _npz(lambda a: _set(a, "U", a["U"][:-4])),
        ValueError,
        "'U'",
    ),
    Case(
        "glrl-V-fewer-columns",
        "glrl",
        "file",
        _npz(lambda a: _set(a, "V", a["V"][:, :-1])),
        ValueError,
        "'V'",
    ),
    Case(
        "glrl-theta-shortened",
        "glrl",
        "file",
        _npz(lambda a: _set(a, "theta", a["theta"][:-1])),
        ValueError,
        "'theta'",
    ),
    Case(
        "glrl-theta-longer",
        "glrl",
        "file",
        _npz(lambda a: _set(a, "theta", np.append(a["theta"], [1.0, 2.0]))),
        ValueError,
        "'theta'",
    ),
    Case(
        "glrl-U-1d",
        "glrl",
        "file",
        _npz(lambda a: _set(a, "U", a["U"].ravel())),
        ValueError,
        "'U'",
    ),
    Case(
        "glrl-U-int-dtype",
        "glrl",
        "file",
        _npz(lambda a: _set(a, "U", a["U"].astype(np.int32))),
        ValueError,
        "dtype",
    ),
    Case(
        "glrl-V-float16",
        "glrl",
        "file",
        _npz(lambda a: _set(a, "V", a["V"].astype(np.float16))),
        ValueError,
        "dtype",
    ),
    Case(
        "glrl-theta-bool",
        "glrl",
        "file",
        _npz(lambda a: _set(a, "theta", a["theta"] > 0)),
        ValueError,
        "dtype",
    ),
    Case(
        "glrl-V-nan",
        "glrl",
        "file",
        _npz(lambda a: _set(a, "V", _nan_at(a["V"]))),
        ValueError,
        "finite",
    ),
    Case(
        "glrl-theta-inf",
        "glrl",
        "file",
        _npz(lambda a: _set(a, "theta", _inf_at(a["theta"]))),
        ValueError,
        "finite",
    ),
    Case(
        "glrl-V-missing",
        "glrl",
        "file",
        _npz(lambda a: a.pop("V")),
        ValueError,
        "'V'",
    ),
    Case(
        "glrl-objective_path-2d",
        "glrl",
        "file",
        _npz(lambda a: _set(a, "objective_path", a["objective_path"][:, None])),
        ValueError,
        "'objective_path'",
    ),
    Case(
        "glrl-extra-array",
        "glrl",
        "file",
        _npz(lambda a: _set(a, "evil", np.arange(4))),
        ValueError,
        "'evil'",
    ),
    Case(
        "glrl-inner_counts-float",
        "glrl",
        "file",
        _npz(lambda a: _set(a, "inner_counts", a["inner_counts"] + 0.5)),
        ValueError,
        "'inner_counts'",
    ),
    Case(
        "glrl-n_observed-negative",
        "glrl",
        "file",
        _json(lambda d: d["extra"].update(n_observed=-3)),
        ValueError,
        "extra.n_observed",
    ),
    Case(
        "glrl-json-truncated",
        "glrl",
        "file",
        _raw("model.json", lambda b: b[:-7]),
        ValueError,
        "model.json",
    ),
    Case(
        "glrl-json-empty",
        "glrl",
        "file",
        _raw("model.json", lambda b: b""),
        ValueError,
        "model.json",
    ),
    Case(
        "glrl-npz-trailing-garbage",  # zip tolerates it; every member's CRC still checks out
        "glrl",
        "file",
        _raw("arrays.npz", lambda b: b + b"GARBAGE" * 10),
        None,
    ),
    Case(
        "glrl-npz-prepended-junk",  # numpy would read it as a pickle and suggest allow_pickle
        "glrl",
        "file",
        _raw("arrays.npz", lambda b: b"JUNK" + b),
        ValueError,
        "no zip header",
    ),
    Case(
        "glrl-npz-truncated",
        "glrl",
        "file",
        _raw("arrays.npz", lambda b: b[: len(b) - 40]),
        ValueError,
        "arrays.npz",
    ),
    # ----------------------------------------------------------------- GLRL in-memory mutation
    Case(
        "glrl-mem-U-fewer-rows",
        "glrl",
        "memory",
        _attr("U_", lambda a: a[:2]),
        ValueError,
        "U_",
    ),
    Case(
        "glrl-mem-V-fewer-rows",
        "glrl",
        "memory",
        _attr("V_", lambda a: a[:2]),
        ValueError,
        "V_",
    ),
    Case(
        "glrl-mem-theta-longer",
        "glrl",
        "memory",
        _attr("theta_", lambda a: np.append(a, [1.0] * 5)),
        ValueError,
        "theta_",
    ),
    Case(
        "glrl-mem-shape-larger",
        "glrl",
        "memory",
        _attr("shape_", lambda s: (s[0] * 100, s[1] * 100)),
        ValueError,
        "U_",
    ),
    Case(
        "glrl-mem-U-1d",
        "glrl",
        "memory",
        _attr("U_", lambda a: a.ravel()),
        ValueError,
        "U_",
    ),
    Case(
        "glrl-mem-V-list",
        "glrl",
        "memory",
        _attr("V_", lambda a: a.tolist()),
        TypeError,
        "V_",
    ),
]


# --------------------------------------------------------------------------- fitted models


def _data(seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((60, 5))
    Y = (rng.random((60, 4)) < 0.3).astype(np.float64)
    Y[:, 0] = 1.0
    y = np.array(["a", "b", "c"])[rng.integers(0, 3, 60)]
    m, n = 30, 20
    r = rng.integers(0, m, 300)
    c = rng.integers(0, n, 300)
    v = rng.standard_normal(300)
    return X, Y, y, (r, c, v), (m, n)


def _build_models(root):
    """Fit and save one model of each kind under ``root``; return their directories."""
    from ooc_lowrank.gimc import GIMC
    from ooc_lowrank.glrl import GreedyLowRank

    X, Y, y, obs, shape = _data()
    out = {}
    GIMC(n_features_map=6, max_iter=2, random_state=0).fit(X, Y).save(root / "gimc")
    GIMC(features="nystrom", n_features_map=6, learn_features=False, random_state=0).fit(X, Y).save(
        root / "gimc-nys"
    )
    GIMC(n_features_map=6, max_iter=2, random_state=0).fit(X, y).save(root / "gimc-mc")
    GreedyLowRank(n_components=3, duplicates="keep", random_state=0).fit(obs, shape=shape).save(
        root / "glrl"
    )
    for k in ("gimc", "gimc-nys", "gimc-mc", "glrl"):
        out[k] = root / k
    return out


def _entry_points(est, model):
    """``[(name, call)]``: every prediction entry point of a model, each returning floats."""
    X, Y, y, (r, c, v), shape = _data()
    if model.startswith("glrl"):
        return [
            ("predict", lambda: est.predict(r, c)),
            ("top_k", lambda: est.top_k(np.arange(shape[0]), 3)[1]),
            ("evaluate", lambda: [est.evaluate((r, c, v))[k] for k in ("rmse", "mae")]),
        ]
    Yev = y if model == "gimc-mc" else Y
    return [
        ("decision_function", lambda: est.decision_function(X)),
        ("predict_topk", lambda: est.predict_topk(X, 2)[1]),
        ("evaluate", lambda: list(est.evaluate(X, Y=Yev).values())),
    ]


def _exercise(est, model):
    """All entry points of a model; one flat float array."""
    return np.concatenate([np.ravel(call()) for _, call in _entry_points(est, model)])


def _raised(e, **more):
    mro = [t.__name__ for t in type(e).__mro__]
    return {"outcome": "raised", "type": type(e).__name__, "mro": mro, "msg": str(e), **more}


def _probe(case, model_dir, work):
    """Run one case; return ``{"outcome": "raised"|"ok", ...}`` (run in the child).

    File rows: the error must come from ``load``.  Memory rows: **every** entry point must
    raise (``not_raised`` lists those that did not)."""
    import ooc_lowrank

    dest = os.path.join(work, case.name)
    shutil.copytree(model_dir, dest)
    if case.where == "memory":
        est = ooc_lowrank.load(dest)
        case.tamper(est)
        first, not_raised = None, []
        for name, call in _entry_points(est, case.model):
            try:
                call()
                not_raised.append(name)
            except Exception as e:  # noqa: BLE001 - the probe reports every exception
                first = first or e
        if first is not None:
            return _raised(first, not_raised=not_raised)
        out = _exercise(est, case.model)
    else:
        try:
            case.tamper(dest)
            est = ooc_lowrank.load(dest)
            out = _exercise(est, case.model)
        except Exception as e:  # noqa: BLE001
            return _raised(e)
    ref = _exercise(ooc_lowrank.load(model_dir), case.model)
    return {
        "outcome": "ok",
        "finite": bool(np.isfinite(out).all()),
        "same": bool(out.shape == ref.shape and np.allclose(out, ref, equal_nan=True)),
    }


def _child_main(model_root, work, start):
    """Child process: run the cases from index ``start``, one JSON line each, flushed before
    and after, so that the parent knows which row crashed the process."""
    import warnings

    warnings.simplefilter("ignore")
    dirs = {k: os.path.join(model_root, k) for k in ("gimc", "gimc-nys", "gimc-mc", "glrl")}
    for i in range(start, len(MODEL_CASES)):
        case = MODEL_CASES[i]
        print(json.dumps({"start": i}), flush=True)
        res = _probe(case, dirs[case.model], work)
        print(json.dumps({"done": i, **res}), flush=True)


@pytest.fixture(scope="module")
def probe_results(tmp_path_factory):
    """Run ``MODEL_CASES`` in child processes; a crashing row is recorded, the rest go on."""
    root = tmp_path_factory.mktemp("hostile_models")
    _build_models(root)
    results, start = {}, 0
    code = (
        "import sys, importlib.util as u;"
        f"s = u.spec_from_file_location('hostile_probe', {str(HERE)!r});"
        "m = u.module_from_spec(s); sys.modules['hostile_probe'] = m; s.loader.exec_module(m);"
        "m._child_main(sys.argv[1], sys.argv[2], int(sys.argv[3]))"
    )
    env = dict(os.environ, OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1")
    while start < len(MODEL_CASES):
        work = tmp_path_factory.mktemp("probe")
        proc = subprocess.run(
            [sys.executable, "-c", code, str(root), str(work), str(start)],
            capture_output=True,
            text=True,
            env=env,
            timeout=600,
        )
        last = None
        for line in proc.stdout.splitlines():
            if not line.startswith("{"):
                continue
            d = json.loads(line)
            if "start" in d:
                last = d["start"]
            else:
                results[d.pop("done")] = d
        if proc.returncode == 0:
            break
        if last is None or last in results:
            raise RuntimeError(f"probe child failed outside a case:\n{proc.stderr[-3000:]}")
        results[last] = {
            "outcome": "crashed",
            "returncode": proc.returncode,
            "stderr": proc.stderr[-2000:],
        }
        start = last + 1
    return results


@pytest.mark.parametrize("i", range(len(MODEL_CASES)), ids=[c.name for c in MODEL_CASES])
def test_hostile_model(probe_results, i):
    case = MODEL_CASES[i]
    res = probe_results[i]
    assert res["outcome"] != "crashed", (
        f"{case.name}: the process crashed (return code {res['returncode']}):\n{res['stderr']}"
    )
    if case.exc is None:
        assert res["outcome"] == "ok", f"{case.name}: unexpected error {res}"
        assert res["finite"] and res["same"], f"{case.name}: predictions changed: {res}"
        return
    assert res["outcome"] == "raised", (
        f"{case.name}: expected {case.exc.__name__} containing {case.fragment!r}; the model "
        f"loaded and predicted (finite={res['finite']}, same as the original={res['same']})"
    )
    assert case.exc.__name__ in res["mro"], f"{case.name}: wrong exception {res}"
    assert case.fragment in res["msg"], f"{case.name}: message lacks {case.fragment!r}: {res}"
    assert not res.get("not_raised"), f"{case.name}: entry points that did not raise: {res}"
    if case.where == "file":
        # a load error names the model location, so a user knows which file to look at
        assert case.name in res["msg"], f"{case.name}: message does not name the model: {res}"


# --------------------------------------------------------------------------- parameters

PARAM_CASES = [
    ("gimc", "gamma", float("nan")),
    ("gimc", "gamma", float("inf")),
    ("gimc", "alpha", float("inf")),
    ("gimc", "alpha", float("nan")),
    ("gimc", "tol", float("nan")),
    ("gimc", "tol", float("inf")),
    ("glrl", "alpha", float("nan")),
    ("glrl", "alpha", float("inf")),
    ("glrl", "step_size", float("nan")),
    ("glrl", "step_size", float("inf")),
    ("glrl", "power_tol", float("nan")),
    ("glrl", "huber_delta", float("inf")),
    ("glrl", "nu", float("nan")),
    ("glrl", "bias_reg", float("inf")),
    ("glrl", "bias_reg", np.float32("nan")),
]


@pytest.mark.parametrize(
    "model,param,value", PARAM_CASES, ids=[f"{m}-{p}-{v}" for m, p, v in PARAM_CASES]
)
def test_nonfinite_parameter(model, param, value, monkeypatch):
    from ooc_lowrank import engine
    from ooc_lowrank.gimc import GIMC
    from ooc_lowrank.glrl import GreedyLowRank

    X, Y, y, obs, shape = _data()
    calls = []
    # the data are first touched by engine.as_blocked (both estimators): it must not be reached
    monkeypatch.setattr(engine, "as_blocked", lambda *a, **k: calls.append(1) or 1 / 0)
    if model == "gimc":
        est = GIMC(n_features_map=4, max_iter=1, **{param: value})
        with pytest.raises(ValueError) as ei:
            est.fit(X, Y)
    else:
        est = GreedyLowRank(n_components=3, duplicates="keep", **{param: value})
        with pytest.raises(ValueError) as ei:
            est.fit(obs, shape=shape)
    msg = str(ei.value)
    assert f"{param} must be finite" in msg, msg
    assert "nan" in msg.lower() or "inf" in msg.lower(), msg
    assert calls == [], "the error must come before any pass over the data"


# --------------------------------------------------------------------------- numeric hazards


def _gimc_memory_1e300(tmp_path):
    from ooc_lowrank.gimc import GIMC

    X, Y, *_ = _data()
    X[7, 2] = 1e300
    GIMC(n_features_map=4, max_iter=2, random_state=0).fit(X, Y)


def _gimc_memory_float32_1e30(tmp_path):
    from ooc_lowrank.gimc import GIMC

    X, Y, *_ = _data()
    X = X.astype(np.float32)
    X[7, 2] = 1e30
    GIMC(n_features_map=4, max_iter=2, random_state=0).fit(X, Y)


def _gimc_memory_sparse_1e300(tmp_path):
    from ooc_lowrank.gimc import GIMC

    X, Y, *_ = _data()
    X[7, 2] = -1e300
    GIMC(n_features_map=4, max_iter=2, gamma=0.5, random_state=0).fit(sp.csr_matrix(X), Y)


def _gimc_store_1e300(tmp_path):
    from ooc_lowrank.gimc import GIMC
    from ooc_lowrank.storage import write_arrays

    X, Y, *_ = _data()
    X[7, 2] = 1e300
    ds = write_arrays(str(tmp_path / "s.zarr"), {"X": X, "Y": sp.csr_matrix(Y)}, block_rows=16)
    GIMC(n_features_map=4, max_iter=2, random_state=0).fit(ds)


def _gimc_store_1e300_gamma_given(tmp_path):
    from ooc_lowrank.gimc import GIMC
    from ooc_lowrank.storage import write_arrays

    X, Y, *_ = _data()
    X[7, 2] = 1e300
    ds = write_arrays(str(tmp_path / "s.zarr"), {"X": X, "Y": sp.csr_matrix(Y)}, block_rows=16)
    GIMC(features="nystrom", n_features_map=4, max_iter=2, gamma=0.5, random_state=0).fit(ds)


def _gimc_core_nonfinite_stats(tmp_path):
    """The functional core alone (no estimator-side input checks): a projection that
    overflows to inf makes the Fourier features NaN, and the fit stops."""
    from ooc_lowrank import engine
    from ooc_lowrank.gimc import _blocks, core

    X, Y, *_ = _data()
    X[7, 2] = 1e308
    spec = _blocks.FeatureSpec.build([("fourier", 4, 0.5, None, True)])
    U0 = np.random.default_rng(0).standard_normal((5, 4))
    U0[2] = 10.0  # X[7] @ U0 = 1e309 -> inf
    core.fit_gimc(
        engine.as_blocked(X, block_rows=16),
        engine.as_blocked(sp.csr_matrix(Y), block_rows=16),
        U0,
        spec,
        alpha=1.0,
        n_labels=4,
        codes=False,
        max_iter=2,
    )


def _glrl_memory_1e300(tmp_path):
    from ooc_lowrank.glrl import GreedyLowRank

    *_, (r, c, v), shape = _data()
    v = v.copy()
    v[5] = 1e300
    GreedyLowRank(n_components=3, duplicates="keep").fit((r, c, v), shape=shape)


def _glrl_store_1e300(tmp_path):
    from ooc_lowrank.glrl import GreedyLowRank
    from ooc_lowrank.storage import write_arrays

    *_, (r, c, v), shape = _data()
    v = v.copy()
    v[5] = 1e300
    M = sp.coo_matrix((v, (r, c)), shape=shape).tocsr()
    M.sum_duplicates()
    ds = write_arrays(str(tmp_path / "o.zarr"), {"obs": M}, kinds={"obs": "coo"}, block_rows=8)
    GreedyLowRank(n_components=3).fit(ds)


def _glrl_bias_init_1e300(tmp_path):
    from ooc_lowrank.glrl import GreedyLowRank

    *_, (r, c, v), shape = _data()
    v = v.copy()
    v[5] = 1e300
    GreedyLowRank(n_components=4, init="bias", duplicates="keep").fit((r, c, v), shape=shape)


HAZARD_CASES = [
    ("gimc-memory-1e300", _gimc_memory_1e300, ValueError, "1e+300"),
    ("gimc-memory-float32-1e30", _gimc_memory_float32_1e30, ValueError, "1e+30"),
    ("gimc-memory-sparse-1e300", _gimc_memory_sparse_1e300, ValueError, "1e+300"),
    ("gimc-store-1e300", _gimc_store_1e300, ValueError, "Scale or normalize X"),
    (
        "gimc-store-1e300-gamma-given",
        _gimc_store_1e300_gamma_given,
        ValueError,
        "Scale or normalize X",
    ),
    ("gimc-core-nonfinite-stats", _gimc_core_nonfinite_stats, FloatingPointError, "NaN or inf"),
    ("glrl-memory-1e300", _glrl_memory_1e300, FloatingPointError, "scale of the observed values"),
    ("glrl-store-1e300", _glrl_store_1e300, FloatingPointError, "scale of the observed values"),
    ("glrl-bias-init-1e300", _glrl_bias_init_1e300, FloatingPointError, "scale of the observed"),
]


@pytest.mark.parametrize("name,fn,exc,fragment", HAZARD_CASES, ids=[h[0] for h in HAZARD_CASES])
def test_numeric_hazard(name, fn, exc, fragment, tmp_path):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # overflow warnings on the way
        with pytest.raises(exc) as ei:
            fn(tmp_path)
    assert fragment in str(ei.value), str(ei.value)


def test_probe_count():
    """The suite's size, for the record (grows with every row)."""
    n = len(MODEL_CASES) + len(PARAM_CASES) + len(HAZARD_CASES)
    assert n >= 100, n


def test_predict_to_store_refuses_top_k_zero(tmp_path):
    """``top_k=0`` used to write a store with 0-column arrays; now an error before any work."""
    from ooc_lowrank.gimc import GIMC

    X, Y, *_ = _data()
    est = GIMC(n_features_map=4, max_iter=1, random_state=0).fit(X, Y)
    with pytest.raises(ValueError, match="top_k must be >= 1; got 0"):
        est.predict_to_store(X, str(tmp_path / "p.zarr"), top_k=0)
    assert not (tmp_path / "p.zarr").exists()


def test_nystrom_store_with_a_huge_value_outside_the_init_sample_is_an_error(tmp_path):
    # the init check sees only 1000 sampled rows; every block's squared norms are checked too
    from ooc_lowrank import GIMC
    from ooc_lowrank._validation import NonFiniteError
    from ooc_lowrank.storage import write_arrays

    rng = np.random.default_rng(0)
    X = rng.standard_normal((6000, 5))
    X[3001, 2] = 1e300
    Y = sp.csr_matrix((rng.random((6000, 3)) < 0.3).astype(np.float32))
    ds = write_arrays(str(tmp_path / "h.zarr"), {"X": X, "Y": Y}, block_rows=1000)
    with pytest.raises(NonFiniteError, match="squared norm"):
        GIMC(features="nystrom", n_features_map=8, max_iter=1, random_state=0).fit(ds)


# ---------------------------------------------------------------- issue 23 item 10: sizes that
# cannot work are refused before any work, naming the parameter that fixes them


@pytest.mark.parametrize("rank", [200, 31, 10**12])
def test_glrl_refuses_a_rank_above_what_the_shape_allows(rank):
    """``rank=200`` on a 40 x 30 matrix gave ``U_`` of shape (40, 200); ``rank=10**12`` on
    MovieLens ran without end.  A rank above min(n_rows, n_cols) is refused, as scikit-learn's
    TruncatedSVD does."""
    from ooc_lowrank.glrl import GreedyLowRank

    rng = np.random.default_rng(0)
    M = sp.random(40, 30, density=0.3, random_state=0, format="coo")
    M.data = rng.normal(size=M.nnz)
    with pytest.raises(ValueError, match=r"n_components must be <= min\(n_rows, n_cols\) = 30 for the "
                       r"40 x 30 observed matrix.*Use n_components <= 30"):  # fmt: skip
        GreedyLowRank(n_components=rank, max_iter=2).fit((M.row, M.col, M.data), shape=M.shape)
    est = GreedyLowRank(n_components=30, max_iter=2).fit((M.row, M.col, M.data), shape=M.shape)
    assert est.U_.shape[1] <= 30


def test_local_fit_that_cannot_fit_in_memory_is_refused_before_any_work(monkeypatch):
    """``fit gimc-lff ... --n-features-map 100000`` failed after 26 s with NumPy's "Unable to
    allocate 149. GiB"; the local scheduler now refuses it before any pass, as a distributed
    client did, and names the parameter and the value that would fit."""
    from ooc_lowrank import engine
    from ooc_lowrank._estimate import WorkerMemoryError
    from ooc_lowrank.gimc import GIMC

    passes = []
    monkeypatch.setattr(engine, "compute", lambda *a, **k: passes.append(1) or 1 / 0)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 5))
    Y = (rng.random((200, 4)) < 0.3).astype(float)
    for m in (100_000, 10**30):
        with pytest.raises(WorkerMemoryError, match=r"GIMC would need about .* more than the "
                           r".* of memory available on this machine \(local scheduler.*Use a "
                           r"smaller n_features_map \(<= \d+\)"):  # fmt: skip
            GIMC(n_features_map=m, max_iter=1).fit(X, Y)
    assert passes == []


def test_local_memory_verdict_uses_the_available_memory(monkeypatch):
    """The local verdict is against psutil's available memory: with 1 MiB available, a small
    fit that needs more is refused, and ``estimate`` says so (``fits`` False, ``memory_cap``)."""
    from ooc_lowrank import _estimate
    from ooc_lowrank.glrl import GreedyLowRank

    M = sp.random(300, 200, density=0.2, random_state=0, format="coo")
    est = GreedyLowRank(n_components=20, max_iter=1)
    e = est.estimate((M.row, M.col, M.data), shape=M.shape)
    assert e["fits"] is True and e["memory_cap"] > 0 and e["worker_memory_limit"] is None
    monkeypatch.setattr(_estimate, "_available_memory", lambda: 2**10)
    e = est.estimate((M.row, M.col, M.data), shape=M.shape)
    assert e["fits"] is False and e["memory_cap"] == 2**10
    with pytest.raises(MemoryError, match="GreedyLowRank would need about .* available on this"):
        est.fit((M.row, M.col, M.data), shape=M.shape)
