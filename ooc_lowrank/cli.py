"""The ``ooc-lowrank`` command line (a stable contract; see ``ooc-lowrank --help``).

Sub-commands::

    ooc-lowrank convert FORMAT SRC [SRC...] DEST [--xml F] [--shape R,C] [--overwrite] ...
    ooc-lowrank generate KIND DEST --rows N --seed S [--option value ...]
    ooc-lowrank info STORE [--json]
    ooc-lowrank fit METHOD TRAIN_STORE MODEL [--param value ...]
    ooc-lowrank evaluate MODEL TEST_STORE [--metrics p@1,p@3,p@5] [--json]
    ooc-lowrank predict MODEL STORE OUT --top-k K
    ooc-lowrank demo [--rows N] [--workdir DIR]

Options that a converter, generator or estimator accepts but this parser does not list are
passed through: ``--n-components 500`` becomes ``n_components=500``.  Long work shows a progress
bar on a terminal (never when stderr is not a terminal, or with ``--quiet``).  Bad input ends
with a one-line error on stderr and exit code 2 (``--debug`` shows the traceback).
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import sys
import time

#: METHOD -> ("module:Class", fixed constructor parameters)
METHODS = {
    "gimc-lff": ("ooc_lowrank.gimc:GIMC", {"features": "fourier", "learn_features": True}),
    "gimc-lnys": ("ooc_lowrank.gimc:GIMC", {"features": "nystrom", "learn_features": True}),
    "gimc-both": ("ooc_lowrank.gimc:GIMC", {"features": "both", "learn_features": True}),
    "imc-rff": ("ooc_lowrank.gimc:GIMC", {"features": "fourier", "learn_features": False}),
    "imc-nys": ("ooc_lowrank.gimc:GIMC", {"features": "nystrom", "learn_features": False}),
    "glrl": ("ooc_lowrank.glrl:GreedyLowRank", {}),
}

#: CLI spellings that map onto estimator parameter names
ALIASES = {"seed": "random_state"}


class CLIError(Exception):
    """A user error reported as one line."""


def _parse_value(text: str):
    low = text.lower()
    if low in ("true", "yes", "on"):
        return True
    if low in ("false", "no", "off"):
        return False
    if low in ("none", "null"):
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
            raise CLIError(f"unexpected argument {tok!r}; options look like --name value")
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
        out[ALIASES.get(key, key)] = _parse_value(val)
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
        raise CLIError("convert needs at least one SRC and a DEST")
    *srcs, dest = args.paths
    fmt = args.format.replace("-", "_")
    if fmt not in ooc_io.FORMATS:
        raise CLIError(f"unknown format {fmt!r}; choose one of {', '.join(sorted(ooc_io.FORMATS))}")
    opts = dict(extra)
    if args.overwrite:
        opts["overwrite"] = True
    if "shape" in opts and isinstance(opts["shape"], str):
        raise CLIError(f"--shape must be ROWS,COLS integers; got {opts['shape']!r}")
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
        raise CLIError(f"--rows must be >= 1; got {args.rows}")
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
    from .storage import open_dataset

    ds = open_dataset(dest)
    if not args.quiet:
        arrs = ", ".join(
            f"{k} {h.kind} {h.shape[0]}x{h.shape[1]}" for k, h in ((n, ds[n]) for n in ds.names)
        )
        print(f"wrote {dest}: {arrs} in {seconds:.1f} s")


def cmd_info(args, extra):
    from .storage import open_dataset

    if extra:
        raise CLIError(f"info takes no options {sorted(extra)}")
    info = open_dataset(args.store).info()
    if args.json:
        print(json.dumps(info))
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


def cmd_fit(args, extra):
    from .storage import open_dataset

    if args.method not in METHODS:
        raise CLIError(f"unknown method {args.method!r}; choose one of {', '.join(METHODS)}")
    target, fixed = METHODS[args.method]
    cls = _load_class(target)
    valid = set(cls().get_params())
    params = dict(fixed)
    for k, v in extra.items():
        if k not in valid:
            raise CLIError(
                f"unknown parameter --{k.replace('_', '-')} for {args.method}; valid: "
                + ", ".join("--" + p.replace("_", "-") for p in sorted(valid))
            )
        if k in fixed and fixed[k] != v:
            raise CLIError(
                f"--{k.replace('_', '-')} is fixed to {fixed[k]!r} by method {args.method}"
            )
        params[k] = v
    if "verbose" in valid and "verbose" not in extra:
        params["verbose"] = 0 if args.quiet or not sys.stderr.isatty() else 1
    est = cls(**params)
    ds = open_dataset(args.train)
    fit_kw = {}
    if args.eval_store is not None:
        if not args.method.startswith(("gimc", "imc")):
            raise CLIError(f"--eval-store is for GIMC methods; {args.method} does not take it")
        fit_kw = {"eval_set": open_dataset(args.eval_store), "eval_every": args.eval_every}
    t0 = time.perf_counter()
    est.fit(ds, **fit_kw)
    est.save(args.model)
    if fit_kw and not args.quiet:
        for it, scores in est.eval_history_.items():
            vals = "  ".join(f"{k} {v:.4f}" for k, v in scores.items())
            print(f"iteration {it:4d}: {vals}")
    if not args.quiet:
        print(
            f"fitted {args.method} on {args.train} in {time.perf_counter() - t0:.1f} s; "
            f"saved to {args.model}"
        )


def cmd_evaluate(args, extra):
    from ._persist import load
    from .storage import open_dataset

    if extra:
        raise CLIError(f"evaluate takes no options {sorted(extra)}")
    model = load(args.model)
    metrics = [m.strip() for m in args.metrics.split(",") if m.strip()] if args.metrics else None
    res = model.evaluate(open_dataset(args.store), metrics)
    if args.json:
        print(json.dumps(res))
    else:
        for k, v in res.items():
            print(f"{k}\t{v:.4f}" if isinstance(v, float) else f"{k}\t{v}")


def cmd_predict(args, extra):
    from ._persist import load
    from .storage import open_dataset

    model = load(args.model)
    if not hasattr(model, "predict_to_store"):
        raise CLIError(f"{type(model).__name__} models do not support `predict` to a store")
    opts = dict(extra)
    if args.overwrite:
        opts["overwrite"] = True
    model.predict_to_store(open_dataset(args.store), args.out, top_k=args.top_k, **opts)
    if not args.quiet:
        print(f"wrote top-{args.top_k} predictions to {args.out}")


def cmd_demo(args, extra):
    from .gimc.demo import run_demo

    kw = dict(extra)
    if args.rows is not None:
        kw["n_rows"] = args.rows
    run_demo(workdir=args.workdir, quiet=args.quiet, **kw)


# ---------------------------------------------------------------------------------------------
# parser
# ---------------------------------------------------------------------------------------------


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


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ooc-lowrank", description=__doc__.split("\n")[0])
    _common_options(p, suppress=False)
    # the same options are accepted after the sub-command too
    common = argparse.ArgumentParser(add_help=False)
    _common_options(common, suppress=True)
    sub = p.add_subparsers(dest="command", required=True)

    c = sub.add_parser("convert", parents=[common], help="convert a file to a Zarr dataset store")
    c.add_argument("format", help="svmlight, xc, arff, mat, movielens, snap, ...")
    c.add_argument("paths", nargs="+", help="SRC [SRC...] DEST")
    c.add_argument("--overwrite", action="store_true", help="replace an existing DEST")
    c.set_defaults(func=cmd_convert)

    g = sub.add_parser("generate", parents=[common], help="generate a synthetic dataset store")
    g.add_argument("kind")
    g.add_argument("dest")
    g.add_argument("--rows", type=int, required=True)
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--overwrite", action="store_true")
    g.set_defaults(func=cmd_generate)

    i = sub.add_parser("info", parents=[common], help="describe a dataset store")
    i.add_argument("store")
    i.add_argument("--json", action="store_true")
    i.set_defaults(func=cmd_info)

    f = sub.add_parser("fit", parents=[common], help="fit a model and save it")
    f.add_argument("method", help=", ".join(METHODS))
    f.add_argument("train")
    f.add_argument("model")
    f.add_argument(
        "--eval-store",
        default=None,
        help="GIMC methods: a held-out store scored during the fit (printed per iteration)",
    )
    f.add_argument("--eval-every", type=int, default=5, help="score --eval-store every N its")
    f.set_defaults(func=cmd_fit)

    e = sub.add_parser("evaluate", parents=[common], help="evaluate a saved model")
    e.add_argument("model")
    e.add_argument("store")
    e.add_argument("--metrics", default=None, help="comma-separated, e.g. p@1,p@3,p@5 or mae,rmse")
    e.add_argument("--json", action="store_true", help="one JSON object on stdout")
    e.set_defaults(func=cmd_evaluate)

    r = sub.add_parser("predict", parents=[common], help="write top-k predictions to a store")
    r.add_argument("model")
    r.add_argument("store")
    r.add_argument("out")
    r.add_argument("--top-k", type=int, required=True)
    r.add_argument("--overwrite", action="store_true")
    r.set_defaults(func=cmd_predict)

    d = sub.add_parser("demo", parents=[common], help="the main job (GIMC-LFF vs IMC-RFF)")
    d.add_argument("--rows", type=int, default=None)
    d.add_argument("--workdir", default=None)
    d.set_defaults(func=cmd_demo)
    return p


def main(argv=None) -> int:
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.WARNING),
        format="%(levelname)s %(name)s: %(message)s",
    )
    try:
        extra = _extra_options(rest)
        args.func(args, extra)
    except KeyboardInterrupt:
        print("ooc-lowrank: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # one line, no traceback, unless --debug
        if args.debug:
            raise
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        if isinstance(e, KeyError) and msg.startswith(("'", '"')):
            msg = msg[1:-1]
        print(f"ooc-lowrank: error: {msg}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
