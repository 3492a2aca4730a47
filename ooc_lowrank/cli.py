"""The ``ooc-lowrank`` command line (a stable contract; see ``ooc-lowrank --help``).

Sub-commands::

    ooc-lowrank convert FORMAT SRC [SRC...] DEST [--xml F] [--shape R,C] [--overwrite] ...
    ooc-lowrank generate KIND DEST --rows N --seed S [--option value ...]
    ooc-lowrank info STORE [--json]
    ooc-lowrank fit METHOD TRAIN_STORE MODEL [--param value ...] [--overwrite]
    ooc-lowrank evaluate MODEL TEST_STORE [--metrics p@1,p@3,p@5] [--json]
    ooc-lowrank predict MODEL STORE OUT --top-k K [--overwrite]
    ooc-lowrank cluster FEATURES_STORE OUT (--constraints STORE | --sample-constraints C)
                        [--n-clusters K] [--param value ...] [--overwrite]
    ooc-lowrank demo [--rows N] [--workdir DIR]

Every command runs its work on the local threaded scheduler, or on a dask.distributed cluster
with ``--scheduler ADDRESS`` (or the environment variable ``DASK_SCHEDULER_ADDRESS``, as Dask's
own tools read it) or ``--local-cluster N`` (N local worker processes).  ``fit METHOD ...
--dry-run`` (and ``cluster ... --dry-run``) prints the estimate of the fit (passes, memory per
worker, bytes read, a rough time with its assumptions) and exits.

``fit METHOD`` takes one option per parameter of the method's estimator, derived from the
estimator's signature and its numpydoc ``Parameters`` section (``fit METHOD --help`` lists them
with their defaults); a few ``fit`` keywords (:data:`FIT_OPTIONS`) become options too when the
estimator's ``fit`` has them.  An option the method does not have is an error naming the close
matches.  ``convert`` and ``generate`` pass options they do not list to the converter or
generator: ``--n-labels 5`` becomes ``n_labels=5``.

Outputs never destroy anything else: ``fit`` writes MODEL only if nothing is there, or a saved
model is there and ``--overwrite`` is given; ``convert``, ``generate`` and ``predict`` do the same
for stores; no output may be (or contain, or lie inside) one of the command's inputs.  These
rules and the writability of the output location are checked before any work.

Long work shows a progress bar on a terminal (never when stderr is not a terminal, or with
``--quiet``).  Bad input ends with a one-line error on stderr and exit code 2 (``--debug`` shows
the traceback); with ``--json`` the error is also printed on stdout as one JSON object
``{"error": MESSAGE, "exit_code": CODE}``.  An interrupt (also while the command's modules are
imported) exits with 130, SIGTERM with 143, in both cases after removing the temporaries of
unfinished writes.  ``--log-level`` takes DEBUG, INFO, WARNING, ERROR or CRITICAL.
"""

from __future__ import annotations

import signal
import sys


def _interrupted_early(signum, frame):
    """Ctrl-C before :func:`main` runs (while Python imports this module): one line, 130."""
    sys.stderr.write("ooc-lowrank: interrupted\n")
    raise SystemExit(130)


# Run as the ``ooc-lowrank`` command, Ctrl-C during the imports below ends with one line, not a
# traceback (``import ooc_lowrank`` itself is light; :func:`main` takes over before the heavy
# imports).  Imported as a library module, the handlers are left alone.
if sys.argv and sys.argv[0].replace("\\", "/").rsplit("/", 1)[-1].startswith("ooc-lowrank"):
    try:
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            signal.signal(signal.SIGINT, _interrupted_early)
    except ValueError:  # not the main thread
        pass

import argparse  # noqa: E402
import contextlib  # noqa: E402
import difflib  # noqa: E402
import importlib  # noqa: E402
import inspect  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
import uuid  # noqa: E402
import warnings  # noqa: E402
from dataclasses import dataclass  # noqa: E402

#: METHOD -> ("module:Class", fixed constructor parameters).  Adding a method is one line here:
#: its options, help and type conversions come from the class's signature and docstring.
METHODS = {
    "gimc-lff": ("ooc_lowrank.gimc:GIMC", {"features": "fourier", "learn_features": True}),
    "gimc-lnys": ("ooc_lowrank.gimc:GIMC", {"features": "nystrom", "learn_features": True}),
    "gimc-both": ("ooc_lowrank.gimc:GIMC", {"features": "both", "learn_features": True}),
    "imc-rff": ("ooc_lowrank.gimc:GIMC", {"features": "fourier", "learn_features": False}),
    "imc-nys": ("ooc_lowrank.gimc:GIMC", {"features": "nystrom", "learn_features": False}),
    "gimc-lff-cv": ("ooc_lowrank.gimc:GIMCCV", {"features": "fourier", "learn_features": True}),
    "gimc-lnys-cv": ("ooc_lowrank.gimc:GIMCCV", {"features": "nystrom", "learn_features": True}),
    "imc-rff-cv": ("ooc_lowrank.gimc:GIMCCV", {"features": "fourier", "learn_features": False}),
    "glrl": ("ooc_lowrank.glrl:GreedyLowRank", {}),
    "glrl-cv": ("ooc_lowrank.glrl:GreedyLowRankCV", {}),
    "kernelmaxide": ("ooc_lowrank.kernelmaxide:KernelMaxide", {}),
    "kernelmaxide-f": ("ooc_lowrank.kernelmaxide:KernelMaxide", {"n_features_map": None}),
    "kernelmaxide-cv": ("ooc_lowrank.kernelmaxide:KernelMaxideCV", {}),
    "maxide": ("ooc_lowrank.kernelmaxide:Maxide", {}),
    "maxide-cv": ("ooc_lowrank.kernelmaxide:MaxideCV", {}),
    "mvm": ("ooc_lowrank.mvm:MultiViewMachineRegressor", {}),
    "mvm-classifier": ("ooc_lowrank.mvm:MultiViewMachineClassifier", {}),
    "imc": ("ooc_lowrank.imc:InductiveMatrixCompletion", {}),
    "imc-lff": (
        "ooc_lowrank.imc:InductiveMatrixCompletion",
        {"row_map": "fourier", "col_map": "fourier", "learn_features": True},
    ),
}

#: the estimator behind ``cluster`` (options derived from it, as for ``fit``)
CLUSTER = "ooc_lowrank.imc:GIMCClustering"

#: ``fit`` keywords offered as options when the estimator's ``fit`` has them: keyword -> flag.
#: Keywords a given estimator lacks are simply not offered (harmless).
FIT_OPTIONS = {
    "eval_set": "--eval-store",
    "eval_every": "--eval-every",
    "eval_metrics": "--eval-metrics",
    "checkpoint": "--checkpoint",
    "checkpoint_every": "--checkpoint-every",
    "X_row": "--row-features",
    "X_col": "--col-features",
}

#: extra spellings of parameter options
ALIASES = {"random_state": ["--seed"]}

#: parameters never offered on the command line (set by the CLI itself or not expressible)
_NOT_OPTIONS = {"callback"}

#: spellings accepted for booleans and for None
_TRUE, _FALSE, _NONE = ("true", "yes", "on", "1"), ("false", "no", "off", "0"), ("none", "null")


class CLIError(Exception):
    """A user error reported as one line."""


def _error(name, rule, value, fix):
    """A :class:`CLIError` naming the argument, the rule, the value received and the fix."""
    return CLIError(f"{name} {rule}; got {value!r}. {fix}")


def _close(word, candidates):
    """`` Did you mean --x?`` for the closest candidates (empty when none is close)."""
    near = difflib.get_close_matches(word, list(candidates), n=3, cutoff=0.6)
    return f" Did you mean {' or '.join(near)}?" if near else ""


# ---------------------------------------------------------------------------------------------
# options derived from an estimator's signature and numpydoc docstring
# ---------------------------------------------------------------------------------------------


def _doc_params(obj) -> dict:
    """``{name: (type_spec, one_line_help)}`` from the numpydoc ``Parameters`` section of
    ``obj``'s docstring.  Grouped entries (``a, b : int, float``) give each name its own type
    when the counts match, else the shared one."""
    doc = inspect.getdoc(obj) or ""
    lines = doc.splitlines()
    out: dict = {}
    try:
        i = next(
            k
            for k in range(len(lines) - 1)
            if lines[k].strip() == "Parameters" and set(lines[k + 1].strip()) == {"-"}
        )
    except StopIteration:
        return out
    i += 2
    names, typ, desc = [], "", []

    def flush():
        text = " ".join(desc).strip()
        text = re.sub(r":\w+:`~?([^`]*)`", r"\1", text.replace("``", ""))
        first = re.split(r"(?<!e\.g\.)(?<!i\.e\.)(?<=\.)\s", text, maxsplit=1)[0] if text else ""
        types = [t.strip() for t in typ.split(",")]
        for j, n in enumerate(names):
            t = types[j] if len(names) > 1 and len(types) == len(names) else typ
            out[n] = (t.strip(), first)

    while i < len(lines):
        line = lines[i]
        if i + 1 < len(lines) and line.strip() and set(lines[i + 1].strip()) == {"-"}:
            break  # next section
        if line and not line[0].isspace():
            flush()
            head, _, typ = line.partition(":")
            names = [n.strip() for n in head.split(",") if n.strip()]
            typ = re.sub(r",?\s*default\s*[=:].*$", "", typ.strip())
            desc = []
        elif line.strip():
            desc.append(line.strip())
        elif desc:
            desc.append("\n")  # paragraph break ends the first sentence search below
        i += 1
    flush()
    for n, (t, h) in out.items():
        h = h.split("\n")[0].strip()
        out[n] = (t, h if len(h) <= 120 else h[:117].rsplit(" ", 1)[0] + " ...")
    return out


@dataclass
class _Option:
    """One command-line option of a method: an estimator parameter or a fit keyword."""

    name: str  # Python name
    flags: list  # ["--n-components"] (+ aliases)
    default: object
    kind: str  # bool | int | float | str | list | store | path | any
    choices: tuple = ()
    optional: bool = False  # accepts "none"
    item: str = "str"  # element kind of a list
    help: str = ""
    fit_keyword: bool = False
    fixed: bool = False

    @property
    def flag(self):
        return self.flags[0]


def _kind(name, default, typ):
    """(kind, choices, optional, item) from the default's type, else the docstring type."""
    low = typ.lower()
    choices = tuple(a or b for a, b in re.findall(r'"([^"]*)"|\'([^\']*)\'', typ.split("}")[0]))
    choices = choices if typ.strip().startswith("{") else ()
    bare = re.sub(r'"[^"]*"|\'[^\']*\'', "", low)  # a quoted "none" is a string choice
    optional = default is None or "none" in bare or "optional" in bare
    word = lambda w: re.search(rf"\b{w}\b", low) is not None  # noqa: E731
    item = "float" if word("float") else "int" if word("int") else "str"
    if isinstance(default, bool):
        return "bool", (), optional, item
    if isinstance(default, int):
        return ("float" if word("float") else "int"), (), optional, item
    if isinstance(default, float):
        return "float", (), optional, item
    if isinstance(default, (tuple, list)):
        kind_item = "float" if any(isinstance(v, float) for v in default) else item
        return "list", (), optional, kind_item
    if isinstance(default, str):
        return "str", choices, optional, item
    if name in ("eval_set",) or word("store") or word("dataset"):
        return "store", (), optional, item
    if choices:
        return "str", choices, optional, item
    if word("list") or word("sequence") or "array-like" in low:
        return "list", (), optional, item
    if word("bool"):
        return "bool", (), optional, item
    if word("float"):
        return "float", (), optional, item
    if word("int"):
        return "int", (), optional, item
    if word("path") or word("str"):
        return "path", (), optional, item
    return "any", (), optional, item


def _cli_text(value):
    """How a value is spelled on the command line (used for defaults in --help)."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (tuple, list)):
        return ",".join(_cli_text(v) for v in value)
    return str(value)


def _options_from(func, doc, defaults, fixed, *, only=None) -> list:
    """Options for the keyword parameters of ``func`` (an ``__init__`` or a ``fit``), with
    help from ``doc``'s docstring (the class for ``__init__``, as numpydoc puts it), in the
    docstring's order (an estimator's signature starts with the shared parameter groups of
    ``_base``; its docstring with the method's own), the undocumented ones last."""
    docs = _doc_params(doc)
    order = {name: i for i, name in enumerate(docs)}
    params = sorted(
        inspect.signature(func).parameters.items(), key=lambda kv: order.get(kv[0], len(order))
    )
    opts = []
    for name, p in params:
        if p.kind not in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD) or name == "self":
            continue
        if only is not None and name not in only:
            continue
        if only is None and (name in _NOT_OPTIONS or p.default is p.empty):
            continue
        typ, text = docs.get(name, ("", ""))
        default = fixed.get(name, defaults.get(name, p.default))
        if "callable" in typ.lower() or callable(default):
            continue
        kind, choices, optional, item = _kind(name, default, typ)
        flag = only[name] if only is not None else "--" + name.replace("_", "-")
        opts.append(
            _Option(
                name,
                [flag, *ALIASES.get(name, [])],
                default,
                kind,
                choices,
                optional,
                item,
                text or f"({typ or 'type not documented'}; no description in the docstring)",
                fit_keyword=only is not None,
                fixed=name in fixed,
            )
        )
    return opts


def _kwargs_epilog(title: str, funcs: dict, skip=("overwrite", "progress")) -> str:
    """``--help`` text listing each format's / generator's keyword options (from the function
    signatures and numpydoc docstrings, so help and code cannot drift)."""
    lines = [title]
    seen = {}
    for key, fn in funcs.items():
        if fn in seen:  # an alias (libsvm = svmlight)
            lines.append(f"  {key}: as {seen[fn]}")
            continue
        seen[fn] = key
        docs = _doc_params(fn)
        lines.append(f"  {key}:")
        for name, prm in inspect.signature(fn).parameters.items():
            if prm.kind is not prm.KEYWORD_ONLY or name in skip:
                continue
            flag = "--" + name.replace("_", "-")
            text = docs.get(name, ("", ""))[1]
            default = _cli_text(prm.default)
            lines.append(f"    {flag} (default {default}){': ' + text if text else ''}")
    return "\n".join(lines)


def method_options(method: str) -> tuple:
    """``(cls, fixed, options)`` for a METHOD (imports the estimator)."""
    target, fixed = METHODS[method]
    cls = _load_class(target)
    defaults = cls().get_params()
    opts = _options_from(cls.__init__, cls, defaults, fixed)
    fit_kw = {k: v for k, v in FIT_OPTIONS.items() if k in inspect.signature(cls.fit).parameters}
    opts += _options_from(cls.fit, cls.fit, {}, {}, only=fit_kw)
    return cls, fixed, opts


def _convert(opt: _Option, text):
    """The typed value of ``text`` for ``opt`` (a CLIError naming the rule otherwise)."""
    if opt.kind == "bool" and isinstance(text, bool):
        return text
    text = str(text)
    low = text.strip().lower()
    if opt.optional and low in _NONE:
        return None

    def bad(rule, fix):
        return _error(opt.flag, rule, text, fix)

    if opt.kind == "bool":
        if low in _TRUE or low in _FALSE:
            return low in _TRUE
        no = "--no-" + opt.flag[2:]
        raise bad("must be true or false", f"Use {opt.flag} / {no}, or {opt.flag} true|false")
    if opt.kind in ("int", "float"):
        return _number(opt.flag, text, opt.kind)
    if opt.kind == "list":
        items = tuple(
            _number(opt.flag, t, opt.item) if opt.item != "str" else t.strip()
            for t in text.split(",")
            if t.strip()
        )
        if not items:
            raise bad(
                "must list at least one value (A,B,...)",
                f"Drop {opt.flag} to use the default ({_cli_text(opt.default)})",
            )
        return items
    # choices listed in a docstring are shown in --help but not enforced here: the estimator
    # validates its own values (a docstring may lag behind it) before reading any data
    if opt.kind == "str" and opt.item in ("int", "float") and _numeric(text):
        return _number(opt.flag, text, opt.item)  # a word or a number, e.g. lam "auto" | 0.5
    if opt.kind == "any":
        val = _parse_value(text)
        if isinstance(val, float) and not math.isfinite(val):
            raise _error(opt.flag, "must be a finite number", text, f"Pass e.g. {opt.flag} 1")
        return val
    return text




def _numeric(text):
    """Whether ``text`` reads as a number, ``inf`` and ``nan`` included (so that a word-or-number
    option refuses them as numbers instead of passing them on as words)."""
    try:
        float(text)
    except ValueError:
        return False
    return True


def _number(flag, text, kind):
    if kind == "int" and re.fullmatch(r"\s*[+-]?\d+\s*", text):
        return int(text)  # exact, however large
    try:
        val = float(text)
    except ValueError:
        val = None
    if val is None or not math.isfinite(val):
        raise _error(flag, "must be a finite number", text, f"Pass e.g. {flag} 1")
    if kind == "int":
        if not val.is_integer():
            raise _error(flag, "must be an integer", text, f"Pass a whole number, e.g. {flag} 10")
        return int(val)
    return val


# ---------------------------------------------------------------------------------------------
# outputs: never destroy an input or something that is not ours; check writability first
# ---------------------------------------------------------------------------------------------


def _is_url(loc):
    from .storage import _is_url

    return _is_url(str(loc))


def _norm(loc):
    from .storage import _norm

    return _norm(loc)


def _fs(loc, arg):
    import fsspec.core

    try:
        return fsspec.core.url_to_fs(str(loc))
    except ImportError as e:
        raise _error(
            arg,
            "needs a filesystem driver that is not installed",
            str(loc),
            f"{e}".split("\n")[0].rstrip(".") + "; install it (s3://: pip install "
            "'ooc-lowrank[s3]') or write to a local path",
        ) from None
    except ValueError as e:
        raise _error(arg, "must be a local path or a known fsspec URL", str(loc), str(e)) from None


def _exists(loc, arg):
    if not _is_url(loc):
        return os.path.lexists(_norm(loc))
    fs, p = _fs(loc, arg)
    return fs.exists(p)


def _is_ours(loc, arg, what):
    """Whether ``loc`` holds an ooc_lowrank ``what`` ("model" or "store")."""
    from ._persist import is_model
    from .storage import is_store

    if _is_url(loc):
        _fs(loc, arg)  # a missing filesystem driver is an error naming ARG
    return (is_model if what == "model" else is_store)(_norm(loc))


def check_output(loc, arg, what, *, overwrite, inputs=()):
    """Refuse to write ``what`` ("model" or "store") at ``loc`` unless nothing is there, or a
    ``what`` is there and ``overwrite``; refuse any overlap with ``inputs``; check that the
    location is writable.  Raises :class:`CLIError`; does no work otherwise."""
    from .storage import overlapping_input

    inp = overlapping_input(loc, inputs)
    if inp is not None:
        raise _error(
            arg,
            f"must not be, contain or lie inside an input of this command ({inp})",
            str(loc),
            f"Write the {what} to another path",
        )
    if _exists(loc, arg):
        if not _is_ours(loc, arg, what):
            marker = "model.json" if what == "model" else "zarr.json with ooc_lowrank metadata"
            raise _error(
                arg,
                f"exists and is not an ooc_lowrank {what} (no {marker}), so it is never replaced",
                str(loc),
                "Choose a new path, or remove it yourself if it is really disposable",
            )
        if not overwrite:
            raise _error(
                arg,
                f"already holds a {what}",
                str(loc),
                "Pass --overwrite to replace it, or choose another path",
            )
    _check_writable(loc, arg)
    _remember_output(loc)


#: (folder, temporary-name prefix, names already there) of this command's local outputs
_OUTPUTS: list = []


def _remember_output(loc):
    """Note the folder of a local output so that an interrupt can remove the temporaries
    (``.NAME.tmp-*``, as the store writer and the model save name them) that this command
    created there, and only those."""
    if _is_url(loc):
        return
    path = _norm(loc)
    folder, prefix = os.path.dirname(path), f".{os.path.basename(path)}.tmp-"
    before = set(os.listdir(folder)) if os.path.isdir(folder) else set()
    _OUTPUTS.append((folder, prefix, before))


def _remove_temporaries():
    """After an interrupt: stop Zarr's IO thread (writes in flight could re-create a removed
    temporary), then remove the temporaries this command created."""
    logging.getLogger("asyncio").setLevel(logging.CRITICAL)  # tasks cut short by the stop
    warnings.filterwarnings("ignore", message="coroutine .* was never awaited")
    if "zarr" in sys.modules:
        try:
            from zarr.core.sync import cleanup_resources

            cleanup_resources()
        except Exception:  # best effort: a zarr without it still gets the removal below
            pass
    # Look again until none is left (bounded): on a loaded machine a temporary was left behind
    # after SIGTERM in about 1 of 6 runs of test_sigterm_during_a_write_leaves_no_temporary
    # (0 of 24 with this loop).  Likely cause, not proven: a write still in flight in another
    # thread adds a file while rmtree walks the folder, and rmtree(ignore_errors) then leaves it.
    for _ in range(50):
        left = [
            os.path.join(folder, name)
            for folder, prefix, before in _OUTPUTS
            if os.path.isdir(folder)
            for name in set(os.listdir(folder)) - before
            if name.startswith(prefix)
        ]
        if not left:
            break
        for path in left:
            shutil.rmtree(path, ignore_errors=True)
        time.sleep(0.02)


def _check_writable(loc, arg):
    """Create and remove a probe next to ``loc`` (the nearest existing folder, locally)."""
    if _is_url(loc):
        fs, p = _fs(loc, arg)
        probe = f"{p.rstrip('/')}.write-check-{uuid.uuid4().hex[:8]}"
        try:
            fs.pipe(probe, b"")
            fs.rm(probe)
        except Exception as e:  # credentials, permissions, missing bucket: all say the same
            raise _error(
                arg,
                "is not writable",
                str(loc),
                f"Writing a probe failed: {type(e).__name__}: {e}".split("\n")[0],
            ) from None
        return
    parent = os.path.dirname(_norm(loc))
    while not os.path.lexists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise _error(
            arg,
            f"must be under a folder, but {parent} is a file",
            str(loc),
            "Choose a path whose parent is a folder",
        )
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".ooc-lowrank-write-check-", dir=parent))
    except OSError as e:
        raise _error(
            arg,
            f"is not writable (cannot create files in {parent}: {e.strerror})",
            str(loc),
            "Choose a writable location",
        ) from None


def _json_safe(obj, where, warnings):
    """Replace non-finite floats by None (JSON has no Infinity/NaN), noting where."""
    if isinstance(obj, float) and not math.isfinite(obj):
        warnings.append(f"{where}={obj}")
        return None
    if isinstance(obj, dict):
        return {
            k: _json_safe(v, f"{where}.{k}" if where else str(k), warnings) for k, v in obj.items()
        }
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v, f"{where}[{i}]", warnings) for i, v in enumerate(obj)]
    return obj


def _print_json(obj):
    """Print strict JSON; non-finite numbers become null with a one-line warning on stderr."""
    notes: list = []
    safe = _json_safe(obj, "", notes)
    if notes:
        print(
            f"ooc-lowrank: warning: not finite, printed as null: {', '.join(notes)}",
            file=sys.stderr,
        )
    print(json.dumps(safe, allow_nan=False))


# ---------------------------------------------------------------------------------------------
# free-form options of convert / generate
# ---------------------------------------------------------------------------------------------


def _parse_value(text: str):
    low = text.lower()
    if low in ("true", "yes", "on"):
        return True
    if low in ("false", "no", "off"):
        return False
    if low in _NONE:
        return None
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    if "," in text:
        parts = [p for p in text.split(",") if p]
        vals = [_parse_value(p) for p in parts]
        if all(isinstance(v, (int, float)) for v in vals):
            return tuple(vals)
    return text


def _extra_options(tokens: list[str]) -> dict:
    """``['--n-components', '500', '--flag']`` -> ``{'n_components': 500, 'flag': True}``."""
    out, i = {}, 0
    while i < len(tokens):
        tok = tokens[i]
        if not tok.startswith("--") or tok == "--":
            raise _error("option", "must look like --name value", tok, "Write --name value")
        key = tok[2:]
        if "=" in key:
            key, val = key.split("=", 1)
            i += 1
        elif i + 1 < len(tokens) and not tokens[i + 1].startswith("--"):
            val = tokens[i + 1]
            i += 2
        else:
            val = "true"
            i += 1
        key = key.replace("-", "_")
        out[{"seed": "random_state"}.get(key, key)] = _parse_value(val)
    return out


def _progress(args, total=None, desc=""):
    """A callable(done) updating a tqdm bar, or None when quiet / not a terminal."""
    if args.quiet or not sys.stderr.isatty():
        return None, lambda: None
    from tqdm import tqdm

    bar = tqdm(total=total, desc=desc, unit="rows", file=sys.stderr, leave=False)
    state = {"n": 0}

    def update(done):
        bar.update(done - state["n"])
        state["n"] = done

    return update, bar.close


def _load_class(target):
    mod, attr = target.split(":")
    return getattr(importlib.import_module(mod), attr)


# ---------------------------------------------------------------------------------------------
# commands
# ---------------------------------------------------------------------------------------------


def cmd_convert(args, extra):
    from . import io as ooc_io

    if len(args.paths) < 2:
        raise _error(
            "paths", "must be SRC [SRC...] DEST", args.paths, "Give a source file and a destination"
        )
    *srcs, dest = args.paths
    fmt = args.format.replace("-", "_")
    if fmt not in ooc_io.FORMATS:
        raise CLIError(
            f"unknown format {fmt!r}; choose one of {', '.join(sorted(ooc_io.FORMATS))}."
            + _close(fmt, ooc_io.FORMATS)
        )
    opts = dict(extra)
    if "shape" in opts and isinstance(opts["shape"], str):
        raise _error(
            "--shape", "must be ROWS,COLS integers", opts["shape"], "E.g. --shape 943,1682"
        )
    inputs = srcs + [v for k, v in opts.items() if k == "xml" and isinstance(v, str)]
    check_output(dest, "DEST", "store", overwrite=args.overwrite, inputs=inputs)
    if args.overwrite:
        opts["overwrite"] = True
    update, close = _progress(args, desc=f"convert {fmt}")
    if update is not None:
        opts["progress"] = update
    t0 = time.perf_counter()
    try:
        ooc_io.convert(fmt, srcs, dest, **opts)
    finally:
        close()
    _report_store(dest, args, time.perf_counter() - t0)


def cmd_generate(args, extra):
    from . import generators

    kind = args.kind.replace("-", "_")
    if kind not in generators.GENERATORS:
        raise CLIError(
            f"unknown generator {kind!r}; choose one of {', '.join(sorted(generators.GENERATORS))}"
        )
    if args.rows < 1:
        raise _error(
            "--rows", "must be >= 1", args.rows, "Pass the number of rows, e.g. --rows 1000"
        )
    check_output(args.dest, "DEST", "store", overwrite=args.overwrite)
    opts = dict(extra)
    if args.overwrite:
        opts["overwrite"] = True
    update, close = _progress(args, total=args.rows, desc=f"generate {kind}")
    if update is not None:
        opts["progress"] = update
    t0 = time.perf_counter()
    try:
        generators.generate(kind, args.dest, n_rows=args.rows, seed=args.seed, **opts)
    finally:
        close()
    _report_store(args.dest, args, time.perf_counter() - t0)


def _report_store(dest, args, seconds):
    from .storage import open_written

    ds = open_written(dest)
    if not args.quiet:
        arrs = ", ".join(
            f"{k} {h.kind} {h.shape[0]}x{h.shape[1]}" for k, h in ((n, ds[n]) for n in ds.names)
        )
        print(f"wrote {dest}: {arrs} in {seconds:.1f} s")


def cmd_mask_labels(args, extra):
    from .kernelmaxide.masking import mask_labels_store

    check_output(args.dest, "DEST", "store", overwrite=args.overwrite, inputs=[args.src])
    mask_labels_store(
        args.src,
        args.dest,
        args.omega,
        test_fraction=args.test_fraction,
        random_state=args.seed,
        labels=args.labels,
        overwrite=args.overwrite,
    )
    if not args.quiet:
        print(
            f"wrote {args.dest}: Y_obs with {args.omega}% of each label's positives and negatives"
        )


def cmd_info(args, extra):
    from .storage import open_dataset

    info = open_dataset(args.store).info()
    if args.json:
        _print_json(info)
        return
    print(
        f"{info['store']}: {info['n_rows']} rows in {info['n_blocks']} blocks of "
        f"{info['block_rows']} rows, {info['bytes_on_disk'] / 2**20:.1f} MiB on disk"
    )
    for name, a in info["arrays"].items():
        nnz = "" if a["nnz"] is None else f" nnz={a['nnz']}"
        print(f"  {name:12s} {a['kind']:6s} {a['shape'][0]} x {a['shape'][1]} {a['dtype']}{nnz}")
    if info["attrs"]:
        print(f"  attrs: {', '.join(sorted(info['attrs']))}")


def _option_values(args, opts, fixed, method):
    """``(params, fit_kw)``: the typed values of the options given on the command line."""
    params, fit_kw = dict(fixed), {}
    for opt in opts:
        text = getattr(args, "opt_" + opt.name, None)
        if text is None:
            continue
        val = _convert(opt, text)
        if opt.fixed and val != fixed[opt.name]:
            others = [
                m
                for m, (t, f) in METHODS.items()
                if t == METHODS[method][0] and f.get(opt.name) == val
            ]
            raise _error(
                opt.flag,
                f"is fixed to {_cli_text(fixed[opt.name])} by method {method}",
                text,
                "Drop the option" + (f", or use method {' / '.join(others)}" if others else ""),
            )
        (fit_kw if opt.fit_keyword else params)[opt.name] = val
    return params, fit_kw


def _fit_naming_options(est, opts, *args, **kw):
    """``est.fit(*args, **kw)``; the estimator's own validation errors name the option."""
    try:
        return est.fit(*args, **kw)
    except (ValueError, TypeError) as e:
        word, sep, rest = str(e).partition(" ")
        flags = {o.name: o.flag for o in opts}
        if word in flags and sep:
            raise CLIError(f"{flags[word]} {rest}") from e
        raise
    except MemoryError as e:  # refused before any work: "a smaller n_components (<= k)"
        msg = str(e)
        if "Nothing was computed" not in msg:
            raise
        for o in opts:  # the fixes in the options' spelling
            msg = msg.replace(f"a smaller {o.name} (", f"a smaller {o.flag} (")
            msg = msg.replace(f"({o.name} <= ", f"({o.flag} <= ")
        raise CLIError(msg) from e


def cluster_options() -> tuple:
    """``(cls, options)`` of the ``cluster`` command (imports the estimator)."""
    cls = _load_class(CLUSTER)
    return cls, _options_from(cls.__init__, cls, cls().get_params(), {})


def _class_labels(ds):
    """A dataset's one-column class labels (``y``, or a one-column ``Y``) or None."""
    for name in ("y", "Y"):
        if name in ds.names and ds[name].shape[1] == 1 and ds[name].kind == "dense":
            return ds[name].read()[:, 0]
    return None


def cmd_cluster(args, extra):
    """Semi-supervised clustering (GIMC, Algorithm 2) of the rows of FEATURES_STORE's ``X``."""
    import numpy as np

    from .storage import DatasetWriter, open_dataset

    cls, opts = cluster_options()
    params, _ = _option_values(args, opts, {}, None)
    given = [a for a in (args.constraints, args.sample_constraints) if a is not None]
    if len(given) != 1:
        raise _error(
            "--constraints / --sample-constraints",
            "must be given, exactly one of them",
            f"{len(given)} given",
            "Pass --constraints STORE (an n x n observation store of 1 = same cluster, "
            "0 = different; e.g. `convert movielens pairs.txt STORE --one-based false --shape "
            "n,n`) or --sample-constraints C (C * n pairs labelled from the store's y)",
        )
    c = args.sample_constraints
    if c is not None and not (math.isfinite(c) and c > 0):
        raise _error("--sample-constraints", "must be > 0", c, "Pass e.g. --sample-constraints 10")
    inputs = [args.features] + ([args.constraints] if args.constraints else [])
    if not args.dry_run:
        check_output(args.out, "OUT", "store", overwrite=args.overwrite, inputs=inputs)
    ds = open_dataset(args.features)
    y = _class_labels(ds)
    if c is not None:
        from .imc import sample_constraints

        if y is None:
            raise _error(
                "--sample-constraints",
                f"needs class labels y in FEATURES_STORE (it has {list(ds.names)})",
                c,
                "Convert the features with their labels, or pass --constraints STORE",
            )
        cons = sample_constraints(
            y, max(1, int(round(c * y.size))), random_state=args.constraint_seed
        )
    else:
        cons = open_dataset(args.constraints)
    est = cls(**params)
    if args.dry_run:
        _dry_run(args, est, ds, opts, {"constraints": cons})
        return
    t0 = time.perf_counter()
    _fit_naming_options(est, opts, ds, constraints=cons)
    check_output(args.out, "OUT", "store", overwrite=args.overwrite, inputs=inputs)
    labels = est.labels_.reshape(-1, 1)
    br = int(ds.block_rows)
    attrs = {"model": "GIMCClustering", "n_clusters": int(est.n_clusters)}
    with DatasetWriter(args.out, block_rows=br, overwrite=args.overwrite, attrs=attrs) as w:
        w.add_dense("labels", n_cols=1, dtype="int64")
        for s in range(0, labels.shape[0], br):
            w.append(labels=labels[s : s + br])
    if not args.quiet:
        from .imc import clustering_error

        note = ""
        if y is not None:
            note = f"; pairwise error against the store's labels {clustering_error(labels, y):.4f}"
        sizes = np.bincount(est.labels_, minlength=int(est.n_clusters))
        print(
            f"clustered {labels.shape[0]} rows into {int(est.n_clusters)} clusters (sizes "
            f"{', '.join(map(str, sizes))}) in {time.perf_counter() - t0:.1f} s{note}; labels "
            f"written to {args.out}"
        )


def cmd_fit(args, extra):
    from .storage import open_dataset

    cls, fixed, opts = method_options(args.method)
    params, fit_kw = _option_values(args, opts, fixed, args.method)
    stores = {
        o.name: (o.flag, params.get(o.name, fit_kw.get(o.name))) for o in opts if o.kind == "store"
    }
    inputs = [args.train] + [v for _, v in stores.values() if isinstance(v, str)]
    # every check that needs no data comes first: nothing is read before MODEL is known good
    for o in opts:
        if o.kind == "path" and isinstance(fit_kw.get(o.name, params.get(o.name)), str):
            p = fit_kw.get(o.name, params.get(o.name))
            if _norm(p) in {_norm(x) for x in inputs} or _norm(p) == _norm(args.model):
                raise _error(
                    o.flag,
                    "must differ from MODEL and the input stores",
                    p,
                    "Choose a separate path",
                )
    if not args.dry_run:
        check_output(args.model, "MODEL", "model", overwrite=args.overwrite, inputs=inputs)
    ds = open_dataset(args.train)
    for name, (_flag, loc) in stores.items():
        if isinstance(loc, str):
            target = fit_kw if name in fit_kw else params
            target[name] = open_dataset(loc)
    if "verbose" in params and getattr(args, "opt_verbose", None) is None:
        params["verbose"] = type(params["verbose"])(not args.quiet and sys.stderr.isatty())
    est = cls(**params)
    if args.dry_run:
        _dry_run(args, est, ds, opts, fit_kw)
        return
    t0 = time.perf_counter()
    try:
        _fit_naming_options(est, opts, ds, **fit_kw)
    except MemoryError as e:  # the estimate's refusal: name the options, not the parameters
        raise CLIError(_flags_for_params(str(e), opts)) from e
    # again: something may have appeared at MODEL during a long fit
    check_output(args.model, "MODEL", "model", overwrite=args.overwrite, inputs=inputs)
    est.save(args.model, overwrite=args.overwrite)
    best = getattr(est, "best_params_", None)  # a search (scikit-learn's naming): say its choice
    if best is not None and not args.quiet:
        score = getattr(est, "best_score_", None)
        print(
            "chosen by cross-validation: "
            + ", ".join(f"{k}={v}" for k, v in best.items())
            + (f" (mean validation score {score:.4f})" if score is not None else "")
        )
        if hasattr(est, "format_cv_table"):
            print(est.format_cv_table())
    history = getattr(est, "eval_history_", None)
    if history and not args.quiet:
        for it, scores in history.items():
            vals = "  ".join(f"{k} {v:.4f}" for k, v in scores.items())
            print(f"iteration {it:4d}: {vals}")
    if not args.quiet:
        print(
            f"fitted {args.method} on {args.train} in {time.perf_counter() - t0:.1f} s; "
            f"saved to {args.model}"
        )


def _flags_for_params(text, opts):
    """``text`` with the estimator's parameter names written as the command's options."""
    for o in opts:
        text = re.sub(rf"\b{re.escape(o.name)}\b(?= \(<=|=)", o.flag, text)
    return text


def _imc_dry_estimate(est, fit_kw, ds):
    """The IMC estimate of ``fit imc* --dry-run`` / ``cluster --dry-run`` (metadata only: the
    observations and features are blocked, not read)."""
    from . import engine
    from ._estimate import imc_estimate
    from .imc import InductiveMatrixCompletion
    from .imc.estimator import _side_blocked, observations

    if "constraints" in fit_kw:  # GIMCClustering: an IMC of the n x n constraints, X both sides
        n = int(ds["X"].shape[0])
        imc = InductiveMatrixCompletion(
            n_components=est.n_clusters, row_map=est.features, col_map=est.features,
            n_features_map=est.n_features_map, learn_features=est.learn_features,
            max_iter=est.max_iter, cg_iter=est.cg_iter, block_rows=est.block_rows,
            cache_bytes=est.cache_bytes,
        )  # fmt: skip
        cons = fit_kw["constraints"]
        obs, shape = observations(cons, None if hasattr(cons, "names") else (n, n), est.block_rows)
        X_row = X_col = ds
        flags = ("FEATURES_STORE", "FEATURES_STORE")
    else:
        imc = est
        obs, shape = observations(ds, None, est.block_rows)
        X_row, X_col = fit_kw.get("X_row"), fit_kw.get("X_col")
        flags = ("--row-features", "--col-features")
    sides = []
    for X, n, what, flag in ((X_row, shape[0], "row", flags[0]), (X_col, shape[1], "column",
                                                                   flags[1])):  # fmt: skip
        if X is None:
            raise _error(flag, "is required for the estimate", None,
                         f"Pass the {what} features store (n, d)")  # fmt: skip
        sides.append(_side_blocked(X, n, what, flag, est.block_rows))
    return imc_estimate(imc, obs, *sides, client=engine.active_client(),
                        method=type(est).__name__)  # fmt: skip


def _candidate(est):
    """``est`` itself, or for a search (``...CV``) one candidate: its base estimator with the
    search's scalar parameters (grids and the search's own ``refit`` left at the base's
    defaults)."""
    name = type(est).__name__
    if not name.endswith("CV") or hasattr(est, "estimate"):
        return est
    import numpy as np

    base = getattr(importlib.import_module(type(est).__module__.rsplit(".", 1)[0]), name[:-2], None)
    if base is None:
        return est
    keys = base().get_params()
    kept = {k: v for k, v in est.get_params().items()
            if k in keys and k != "refit"
            and not isinstance(v, (list, tuple, np.ndarray))}  # fmt: skip
    return base(**kept)


def _dry_run(args, est, ds, opts, fit_kw):
    """``fit ... --dry-run`` / ``cluster ... --dry-run``: the estimate of memory, passes and a
    rough time (nothing read but metadata, and multi-view SGD's timed slice of the store;
    nothing written)."""
    from . import engine
    from ._estimate import rough_time

    def plain(v):
        return v.item() if hasattr(v, "item") and getattr(v, "ndim", 1) == 0 else v

    one = _candidate(est)
    if hasattr(one, "estimate"):
        out = dict(one.estimate(ds, client=engine.active_client()))
        if one is not est:
            out["note"] = (f"one candidate fit of the search ({type(one).__name__}, grid "
                           "parameters at their defaults); the search fits one per fold and "
                           "grid point")  # fmt: skip
    else:  # IMC and clustering: the IMC model of ooc_lowrank._estimate
        out = dict(_imc_dry_estimate(est, fit_kw, ds))
    out = {k: plain(v) for k, v in out.items()}
    out["rough_time"] = rough_time(
        out,
        disk_bytes_per_s=None if args.disk_mbps is None else 1e6 * args.disk_mbps,
        gflops_per_core=args.gflops,
    )
    out["method"] = getattr(args, "method", None) or "cluster"
    fits = out.get("fits")
    if args.json:
        _print_json(out)
    else:
        for k, v in out.items():
            if k == "rough_time":
                continue
            if isinstance(v, int) and str(k).endswith("bytes"):
                v = f"{v / 2**20:.1f} MiB"
            print(f"{k:>28s}: {v}")
        t = out["rough_time"]
        print(
            f"{'rough time':>28s}: {_seconds(t['seconds_per_fit'])} for {t['passes']} passes, "
            f"{_seconds(t['seconds_per_pass'])} per pass (reading "
            f"{_seconds(t['read_seconds_per_pass'])}, compute "
            f"{_seconds(t['compute_seconds_per_pass'])}, scheduler "
            f"{_seconds(t['scheduler_seconds_per_pass'])})"
        )
        print(f"{'assumed':>28s}: {t['assumptions']}")
    if fits is False:
        from ._estimate import check_fits

        try:
            check_fits(out)
        except MemoryError as e:
            raise CLIError(_flags_for_params(str(e), opts)) from None


def _seconds(t):
    return f"{t:.3g} s" if t < 600 else f"{t / 60:.3g} min" if t < 36000 else f"{t / 3600:.3g} h"


def cmd_evaluate(args, extra):
    from ._persist import load
    from .storage import open_dataset

    metrics = None
    if args.metrics is not None:
        metrics = [m.strip() for m in args.metrics.split(",") if m.strip()]
        if not metrics:
            raise _error(
                "--metrics", "must name at least one metric", args.metrics,
                "Pass e.g. --metrics p@1,p@3 (or mae,rmse), or drop it for the model's defaults",
            )  # fmt: skip
    model = load(args.model)
    res = model.evaluate(open_dataset(args.store), metrics)
    if args.json:
        _print_json(res)
    else:
        for k, v in res.items():
            print(f"{k}\t{v:.4f}" if isinstance(v, float) else f"{k}\t{v}")


def cmd_predict(args, extra):
    """``--top-k K``: K >= 1; a K above the model's number of labels is clipped to it (the
    store and the message say the K written)."""
    from ._persist import load
    from .storage import open_dataset

    if args.top_k < 1:
        raise _error(
            "--top-k", "must be >= 1", args.top_k, "Pass the labels to keep per row, e.g. --top-k 5"
        )
    check_output(
        args.out, "OUT", "store", overwrite=args.overwrite, inputs=[args.model, args.store]
    )
    if args.parquet and os.path.exists(args.parquet) and not args.overwrite:
        raise _error(
            "--parquet", "must not exist", args.parquet, "Pass --overwrite to replace the file"
        )
    model = load(args.model)
    if not hasattr(model, "predict_to_store"):
        raise _error(
            "MODEL",
            "must support `predict` to a store (GIMC and IMC models do)",
            type(model).__name__,
            "Use `evaluate`, or the Python API's predict/top_k",
        )
    model.predict_to_store(
        open_dataset(args.store), args.out, top_k=args.top_k, overwrite=args.overwrite
    )
    k = open_dataset(args.out)["labels"].shape[1]
    if args.parquet:  # keys back out: the STORE's row / label vocabularies (table converters)
        from .io import predictions_to_parquet

        predictions_to_parquet(args.out, args.store, args.parquet)
    if not args.quiet:
        note = (
            f" (--top-k {args.top_k} clipped to the model's {k} labels)" if k < args.top_k else ""
        )
        extra_out = f" and {args.parquet}" if args.parquet else ""
        print(f"wrote top-{k} predictions to {args.out}{extra_out}{note}")


def cmd_demo(args, extra):
    from .gimc.demo import run_demo

    kw = dict(extra)
    if args.rows is not None:
        kw["n_rows"] = args.rows
    run_demo(workdir=args.workdir, quiet=args.quiet, **kw)


# ---------------------------------------------------------------------------------------------
# parser
# ---------------------------------------------------------------------------------------------


class _ArgumentError(Exception):
    """argparse's complaint, turned into the CLI's one-line error."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line and exit code 2 through main(), not usage + message
        raise _ArgumentError(f"{self.prog}: {message}. Fix: see `{self.prog} --help`")


class _BoolAction(argparse.Action):
    """``--flag`` (true), ``--flag true|false``, ``--no-flag`` (false)."""

    def __call__(self, parser, namespace, values, option_string=None):
        if option_string and option_string.startswith("--no-"):
            if values is not None:
                raise _ArgumentError(
                    f"{option_string} takes no value; got {values!r}. Fix: use "
                    f"--{option_string[5:]} {values}"
                )
            values = False
        setattr(namespace, self.dest, True if values is None else values)


_METAVAR = {
    "int": "INT",
    "float": "FLOAT",
    "list": "A,B,...",
    "store": "STORE",
    "path": "PATH",
    "str": "TEXT",
    "any": "VALUE",
    "bool": "BOOL",
}


def _add_method_options(mp, method):
    _add_options(mp, *method_options(method), method)


def _add_options(mp, cls, fixed, opts, method):
    first = (inspect.getdoc(cls) or cls.__name__).splitlines()[0]
    mp.description = f"{cls.__module__}.{cls.__name__}: {first}" + (
        " Fixed by this method: " + ", ".join(f"{k}={_cli_text(v)}" for k, v in fixed.items())
        if fixed
        else ""
    )
    groups = {
        False: mp.add_argument_group(f"{cls.__name__} parameters"),
        True: mp.add_argument_group(f"{cls.__name__}.fit options"),
    }
    for o in opts:
        tag = (
            f"fixed by {method}: {_cli_text(o.default)}"
            if o.fixed
            else f"default: {_cli_text(o.default)}"
        )
        help_ = f"[{tag}] {o.help}".replace("%", "%%")
        kw = {"dest": "opt_" + o.name, "default": None, "help": help_}
        if o.kind == "bool":
            flags = o.flags + ["--no-" + f[2:] for f in o.flags]
            groups[o.fit_keyword].add_argument(
                *flags, action=_BoolAction, nargs="?", metavar="true|false", **kw
            )
        else:
            mv = "{" + ",".join(o.choices) + "}" if o.choices else _METAVAR[o.kind]
            groups[o.fit_keyword].add_argument(*o.flags, metavar=mv, **kw)


def _common_options(parser, suppress):
    kw = {"default": argparse.SUPPRESS} if suppress else {}
    parser.add_argument(
        "--quiet", "-q", action="store_true", help="no progress bars or summaries", **kw
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks", **kw)
    parser.add_argument(
        "--log-level",
        help="logging level (INFO shows the engine's caching decisions)",
        **({"default": "WARNING"} if not suppress else kw),
    )
    parser.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="run the work on the dask.distributed scheduler at ADDRESS (e.g. "
        "tcp://10.0.0.1:8786); default: the environment variable DASK_SCHEDULER_ADDRESS, "
        "else the local threaded scheduler",
        **({"default": None} if not suppress else kw),
    )
    parser.add_argument(
        "--local-cluster",
        metavar="N",
        type=int,
        help="run the work on a local dask.distributed cluster of N worker processes "
        "(the cores shared among them); for testing a cluster setup on one machine",
        **({"default": None} if not suppress else kw),
    )


def build_parser(method: str | None = None, cluster: bool = False) -> argparse.ArgumentParser:
    """The parser; ``fit METHOD``'s options are built (importing the estimator) only for
    ``method``, and ``cluster``'s only when ``cluster``, so that other commands start fast."""
    kw = {"allow_abbrev": False}
    p = _Parser(prog="ooc-lowrank", description=__doc__.split("\n")[0], **kw)
    _common_options(p, suppress=False)
    # the same options are accepted after the sub-command too
    common = _Parser(add_help=False, **kw)
    _common_options(common, suppress=True)
    sub = p.add_subparsers(dest="command", required=True)
    sp = lambda name, **a: sub.add_parser(name, parents=[common], **kw, **a)  # noqa: E731

    from . import generators
    from . import io as ooc_io

    c = sp(
        "convert",
        help="convert a file to a Zarr dataset store",
        epilog=_kwargs_epilog("options of each format (after SRC... DEST):", ooc_io.FORMATS),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    c.add_argument("format", help="svmlight, xc, arff, mat, movielens, snap, ...")
    c.add_argument("paths", nargs="+", help="SRC [SRC...] DEST")
    c.add_argument("--overwrite", action="store_true", help="replace an existing store at DEST")
    c.set_defaults(func=cmd_convert, passthrough=True)

    g = sp(
        "generate",
        help="generate a synthetic dataset store",
        epilog=_kwargs_epilog(
            "options of each kind (after DEST):",
            generators.GENERATORS,
            ("overwrite", "progress", "n_rows", "seed"),
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    g.add_argument("kind")
    g.add_argument("dest")
    g.add_argument("--rows", type=int, required=True)
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--overwrite", action="store_true", help="replace an existing store at DEST")
    g.set_defaults(func=cmd_generate, passthrough=True)

    i = sp("info", help="describe a dataset store")
    i.add_argument("store")
    i.add_argument("--json", action="store_true", help="one JSON object on stdout")
    i.set_defaults(func=cmd_info)

    def _add_dry_run_options(parser, what):
        parser.add_argument(
            "--dry-run",
            action="store_true",
            help=f"print the {what}'s estimate (passes, memory per worker, bytes read, a rough "
            "time) and exit; nothing is fitted or written",
        )
        parser.add_argument("--json", action="store_true", help="with --dry-run: one JSON object")
        parser.add_argument(
            "--disk-mbps",
            type=float,
            default=None,
            help="with --dry-run: the storage's read bandwidth in MB/s for the rough time "
            "(default 600, this project's measured local disk)",
        )
        parser.add_argument(
            "--gflops",
            type=float,
            default=None,
            help="with --dry-run: useful GFLOP/s per core for the rough time (default 20)",
        )

    f = sp(
        "fit",
        help="fit a model and save it",
        description="Fit METHOD on TRAIN_STORE and save the model to MODEL. "
        "`ooc-lowrank fit METHOD --help` lists the method's parameters.",
    )
    methods = f.add_subparsers(dest="method", metavar="METHOD", required=True)
    for name, (target, fixed) in METHODS.items():
        what = target.split(":")[1] + (
            f" ({', '.join(f'{k}={_cli_text(v)}' for k, v in fixed.items())})" if fixed else ""
        )
        mp = methods.add_parser(name, parents=[common], help=what, **kw)
        mp.add_argument("train", metavar="TRAIN_STORE")
        mp.add_argument("model", metavar="MODEL")
        mp.add_argument(
            "--overwrite",
            action="store_true",
            help="replace a model already saved at MODEL (nothing else is replaced)",
        )
        _add_dry_run_options(mp, "fit")
        if name == method:
            _add_method_options(mp, name)
        mp.set_defaults(func=cmd_fit)

    e = sp("evaluate", help="evaluate a saved model")
    e.add_argument("model")
    e.add_argument("store")
    e.add_argument("--metrics", default=None, help="comma-separated, e.g. p@1,p@3,p@5 or mae,rmse")
    e.add_argument(
        "--json", action="store_true", help="one JSON object on stdout (non-finite values as null)"
    )
    e.set_defaults(func=cmd_evaluate)

    r = sp("predict", help="write top-k predictions to a store")
    r.add_argument("model")
    r.add_argument("store")
    r.add_argument("out")
    r.add_argument(
        "--top-k", type=int, required=True, help=">= 1; clipped to the model's number of labels"
    )
    r.add_argument("--overwrite", action="store_true", help="replace an existing store at OUT")
    r.add_argument(
        "--parquet",
        metavar="FILE",
        default=None,
        help="also write the top-k as Parquet (row_key, rank, key, score) with the keys of "
        "STORE's vocabularies (a store converted from a table)",
    )
    r.set_defaults(func=cmd_predict)

    cl = sp(
        "cluster",
        help="semi-supervised clustering (GIMC) of a feature store, labels to a store",
        description="Cluster the rows of FEATURES_STORE (its array X) under must-link (1) / "
        "cannot-link (0) constraints with GIMC (Algorithm 2) and write the cluster of every "
        "row to OUT (dense int64 array `labels`). The options below are GIMCClustering's.",
    )
    cl.add_argument("features", metavar="FEATURES_STORE")
    cl.add_argument("out", metavar="OUT")
    cl.add_argument(
        "--constraints",
        metavar="STORE",
        default=None,
        help="an (n, n) observation store (coo array obs) of 0/1 values",
    )
    cl.add_argument(
        "--sample-constraints",
        metavar="C",
        type=float,
        default=None,
        help="instead: C * n random pairs labelled by the class labels y of FEATURES_STORE",
    )
    cl.add_argument(
        "--constraint-seed", type=int, default=0, help="seed of --sample-constraints (default 0)"
    )
    cl.add_argument("--overwrite", action="store_true", help="replace an existing store at OUT")
    _add_dry_run_options(cl, "clustering")
    if cluster:
        cls, opts = cluster_options()
        _add_options(cl, cls, {}, opts, "cluster")
    cl.set_defaults(func=cmd_cluster)

    ml = sp(
        "mask-labels",
        help="hide labels as in the missing-label protocol (KernelMaxide)",
        description="Write DEST: the arrays of SRC plus Y_obs (observed labels: +1 / -1, the "
        "rest missing) and train (1 for training rows). For each label, OMEGA%% of the training "
        "positives and OMEGA%% of its training negatives stay observed.",
    )
    ml.add_argument("src", metavar="SRC")
    ml.add_argument("dest", metavar="DEST")
    ml.add_argument("--omega", type=float, required=True, help="percent observed, in (0, 100]")
    ml.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    ml.add_argument(
        "--test-fraction", type=float, default=0.0, help="rows held out as test (no labels)"
    )
    ml.add_argument("--labels", default="Y", help="label array of SRC (default Y)")
    ml.add_argument("--overwrite", action="store_true", help="replace an existing store at DEST")
    ml.set_defaults(func=cmd_mask_labels)

    d = sp("demo", help="the main job (GIMC-LFF vs IMC-RFF)")
    d.add_argument("--rows", type=int, default=None)
    d.add_argument("--workdir", default=None)
    d.set_defaults(func=cmd_demo, passthrough=True)
    return p


_VALUED_COMMON = ("--log-level", "--scheduler", "--local-cluster")


def _words(argv, n=2):
    """The first ``n`` words of argv that are not options (nor --log-level's value)."""
    words, skip = [], False
    for tok in argv:
        if skip:
            skip = False
        elif tok in _VALUED_COMMON:
            skip = True
        elif not tok.startswith("-"):
            words.append(tok)
        if len(words) == n:
            break
    return words


def _fit_method(argv):
    """The METHOD word of ``fit METHOD ...`` in argv, or None."""
    words = _words(argv)
    return words[1] if len(words) == 2 and words[0] == "fit" else None


def _unknown(parser, args, rest):
    """The one-line error for options no parser took (close matches named)."""
    cmd = args.command + (f" {args.method}" if getattr(args, "method", None) else "")
    sub = parser._ooc_sub.get(cmd)  # the sub-parser whose options apply
    known = [s for a in sub._actions for s in a.option_strings] if sub else []
    tok = rest[0]
    if tok.startswith("-"):
        name = tok.split("=")[0]
        return CLIError(
            f"unknown option {name} for `ooc-lowrank {cmd}`.{_close(name, known)} "
            f"`ooc-lowrank {cmd} --help` lists the options"
        )
    return CLIError(
        f"unexpected argument {tok!r} for `ooc-lowrank {cmd}`; see `ooc-lowrank {cmd} --help`"
    )


def _index_subparsers(parser):
    out = {}
    for a in parser._subparsers._group_actions if parser._subparsers else []:
        for name, sp in a.choices.items():
            out[name] = sp
            for b in sp._actions:
                if isinstance(b, argparse._SubParsersAction):
                    out.update({f"{name} {m}": mp for m, mp in b.choices.items()})
    parser._ooc_sub = out


_log = logging.getLogger("ooc_lowrank")


@contextlib.contextmanager
def _cluster(args):
    """The Dask scheduler the command's work runs on: ``--scheduler ADDRESS`` (or
    ``DASK_SCHEDULER_ADDRESS``), ``--local-cluster N``, else the local threaded scheduler.
    A client is the default scheduler (the engine finds it) until the command ends."""
    address = getattr(args, "scheduler", None) or os.environ.get("DASK_SCHEDULER_ADDRESS")
    n_local = getattr(args, "local_cluster", None)
    if address and n_local is not None:
        raise _error(
            "--local-cluster",
            "cannot be combined with a scheduler address (--scheduler or "
            "DASK_SCHEDULER_ADDRESS)",
            n_local,
            "Give one of the two",
        )
    if n_local is not None and not 1 <= n_local <= 256:
        raise _error("--local-cluster", "must be between 1 and 256 workers", n_local, "")
    if not address and n_local is None:
        yield None
        return
    try:
        import distributed
    except ImportError as e:  # pragma: no cover - a dependency of the package
        raise CLIError("--scheduler / --local-cluster need dask.distributed installed") from e
    quiet = not logging.getLogger("ooc_lowrank").isEnabledFor(logging.INFO)
    if quiet:  # the cluster's INFO lines (workers starting and stopping) only with --log-level INFO
        _set_levels(("distributed",), logging.WARNING)
    cluster = None
    try:
        if n_local is not None:
            threads = max(1, (os.cpu_count() or 1) // n_local)
            cluster = distributed.LocalCluster(
                n_workers=n_local,
                threads_per_worker=threads,
                processes=True,
                dashboard_address=None,
            )
            address = cluster.scheduler_address
        try:
            client = distributed.Client(address, timeout="30s", set_as_default=True)
        except OSError as e:
            raise _error(
                "--scheduler",
                "must be the address of a running dask.distributed scheduler",
                address,
                f"Start one (`dask scheduler`) or check the address ({e})",
            ) from None
        try:
            _log.info("running on the dask.distributed scheduler at %s", address)
            yield client
        finally:
            if quiet:  # connections cut by the shutdown are no news to the user
                _set_levels(("distributed", "tornado", "asyncio"), logging.CRITICAL)
            client.close()
    finally:
        if cluster is not None:
            cluster.close()


def _set_levels(prefixes, level):
    """Raise the level of the loggers named ``prefix`` or ``prefix.*`` (those that exist) to
    ``level``; the CLI process ends after the command, nothing else logs there."""
    names = [n for n in logging.root.manager.loggerDict if n.split(".")[0] in prefixes]
    for name in {*prefixes, *names}:
        lg = logging.getLogger(name)
        if lg.getEffectiveLevel() < level:
            lg.setLevel(level)


class _Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread so that writers discard their temporaries."""


#: Set when SIGTERM arrived in this command: an error raised while the interrupted work unwinds
#: (a write cut short, e.g. ``[Errno 21] Is a directory`` on the temporary store once in a
#: cold-cache CI run) is then still a termination (143, temporaries removed), not an error (2).
_SIGTERM_SEEN = [False]


def _on_sigterm(signum, frame):
    _SIGTERM_SEEN[0] = True
    raise _Terminated


def main(argv=None) -> int:
    as_script = argv is None
    argv = sys.argv[1:] if argv is None else list(argv)
    debug = "--debug" in argv
    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _on_sigterm) if in_main else None
    if in_main and signal.getsignal(signal.SIGINT) is _interrupted_early:
        # from here on, Ctrl-C is a KeyboardInterrupt that _main turns into one line and 130
        # (after removing temporaries); the heavy imports all happen inside _main
        signal.signal(signal.SIGINT, signal.default_int_handler)
    rc = None
    _SIGTERM_SEEN[0] = False
    try:
        rc = _main(argv, debug)
        return rc
    finally:
        if in_main:
            signal.signal(signal.SIGTERM, previous)
            if as_script and rc in (130, 143):
                # the process exits now: a second Ctrl-C while Python joins the worker
                # threads would only print a traceback
                signal.signal(signal.SIGINT, signal.SIG_IGN)


class _SignalsIgnored:
    """Ctrl-C and SIGTERM ignored (main thread only) while the temporaries are removed, so a
    second interrupt cannot stop the cleanup half way or print a traceback."""

    def __enter__(self):
        self.saved = None
        if threading.current_thread() is threading.main_thread():
            sigs = (signal.SIGINT, signal.SIGTERM)
            self.saved = [(s, signal.signal(s, signal.SIG_IGN)) for s in sigs]
        return self

    def __exit__(self, *exc):
        for s, h in self.saved or ():
            signal.signal(s, h)
        return False


def _wants_json(argv) -> bool:
    """``--json`` among the options (before a ``--``)."""
    for tok in argv:
        if tok == "--":
            return False
        if tok == "--json":
            return True
    return False


def _fail(message, rc, as_json):
    """The one-line error on stderr; with ``--json`` also a JSON error object on stdout."""
    print(f"ooc-lowrank: {message}", file=sys.stderr)
    if as_json:
        print(json.dumps({"error": message.removeprefix("error: "), "exit_code": rc}))
    return rc


_LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def _log_level(text):
    """The logging level named by ``--log-level`` (a CLIError for anything else)."""
    name = str(text).strip().upper()
    if name not in _LOG_LEVELS:
        raise _error(
            "--log-level", f"must be one of {', '.join(_LOG_LEVELS)}", text,
            "Pass e.g. --log-level INFO (any case)",
        )  # fmt: skip
    return getattr(logging, name)


def _main(argv, debug) -> int:
    _OUTPUTS.clear()
    as_json = _wants_json(argv)
    try:
        method = _fit_method(argv)
        if method is not None and method not in METHODS:
            raise CLIError(
                f"unknown method {method!r}; choose one of {', '.join(METHODS)}."
                + _close(method, METHODS)
            )
        parser = build_parser(method, cluster=_words(argv, 1) == ["cluster"])
        _index_subparsers(parser)
        args, rest = parser.parse_known_args(argv)
        logging.basicConfig(
            level=_log_level(args.log_level),
            format="%(levelname)s %(name)s: %(message)s",
        )
        if rest and not getattr(args, "passthrough", False):
            raise _unknown(parser, args, rest)
        extra = _extra_options(rest)
        with _cluster(args):
            args.func(args, extra)
    except (KeyboardInterrupt, Exception) as e:  # Ctrl-C, or SIGTERM (_Terminated)
        term = isinstance(e, _Terminated) or _SIGTERM_SEEN[0]
        if not (term or isinstance(e, KeyboardInterrupt)):
            if debug:
                raise
            msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            if isinstance(e, KeyError) and msg.startswith(("'", '"')):
                msg = msg[1:-1]
            return _fail(f"error: {msg}", 2, as_json)
        with _SignalsIgnored():
            _remove_temporaries()
        what = "terminated (SIGTERM)" if term else "interrupted"
        return _fail(f"{what}; temporary files removed", 143 if term else 130, as_json)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
