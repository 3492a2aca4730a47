"""Write the results tables of the README and ``docs/results.md`` from ``benchmarks/results/``.

A generated block sits between two marker comments in a markdown file::

    <!-- results:NAME -->
    ...generated, do not edit by hand...
    <!-- /results:NAME -->

and is rendered from ``benchmarks/report_templates/NAME.md`` (the ``index`` and ``small`` blocks are
built by code: the list of results files, every fit of ``small.json``).  A template is markdown
with fields ``{{FILE:KEY.KEY...|FORMAT}}``:
the value at that key path of ``benchmarks/results/FILE.json``, formatted with Python's FORMAT
(``.2f``, ``.1%`` ...).  ``{{FILE:PATH / FILE:PATH|FORMAT}}`` renders the ratio of two values
(an operand may be a number: ``{{FILE:store_bytes / 1e9|.1f}}`` GB).
A key may itself contain dots (``"P@1"`` does not, but the lookup takes the longest key that
matches), so any key a results file has can be named.

Usage::

    python benchmarks/report.py            # rewrite the generated blocks in place
    python benchmarks/report.py --check    # exit 1 (and show a diff) when a block is stale

The default test run calls ``--check`` (``tests/test_report.py``): a results file that changes
without its table, or a table edited by hand, fails the tests.
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results"
TEMPLATES = REPO / "benchmarks" / "report_templates"
#: markdown files that carry generated blocks
TARGETS = (REPO / "README.md", REPO / "docs" / "results.md")

_BLOCK = re.compile(
    r"(<!-- results:(?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /results:(?P=name) -->)", re.S
)
_FIELD = re.compile(r"\{\{(?P<expr>[^{}|]+?)(?:\|(?P<fmt>[^{}]*))?\}\}")
_REF = re.compile(r"^\s*(?P<file>[\w.-]+):(?P<path>.+?)\s*$")


class ReportError(ValueError):
    """A template names a results file or key that does not exist."""


def _load(name, cache):
    if name not in cache:
        path = RESULTS / f"{name}.json"
        if not path.is_file():
            raise ReportError(
                f"results file {path.relative_to(REPO)} named by a template does not exist; "
                f"fix the template or run the benchmark that writes it"
            )
        cache[name] = json.loads(path.read_text())
    return cache[name]


def _lookup(obj, parts, where):
    """Value at ``parts`` (a list of dot-separated pieces) in ``obj``; longest key match first."""
    if not parts:
        return obj
    if isinstance(obj, list):
        return _lookup(obj[int(parts[0])], parts[1:], where)
    if isinstance(obj, dict):
        for n in range(len(parts), 0, -1):
            key = ".".join(parts[:n])
            if key in obj:
                return _lookup(obj[key], parts[n:], where)
    raise ReportError(f"{where}: no key {'.'.join(parts)!r} in the results file; fix the template")


def _value(ref, cache):
    try:
        return float(ref)  # a constant operand, e.g. ``FILE:bytes / 1e9``
    except ValueError:
        pass
    m = _REF.match(ref)
    if m is None:
        raise ReportError(f"field {ref!r} is not FILE:KEY.KEY...; fix the template")
    return _lookup(_load(m["file"], cache), m["path"].split("."), ref.strip())


def render_template(text, cache=None):
    """``text`` with every ``{{...}}`` field replaced by its formatted value."""
    cache = {} if cache is None else cache

    def field(m):
        refs = m["expr"].split(" / ")
        vals = [_value(r, cache) for r in refs]
        v = vals[0] if len(vals) == 1 else vals[0] / vals[1]
        return format(v, m["fmt"] or "")

    return _FIELD.sub(field, text)


def _index_table():
    """One row per results file: its benchmark and the command or note it records."""
    rows = ["| results file | benchmark | recorded command or note |", "|---|---|---|"]
    for path in sorted(RESULTS.glob("*.json")):
        d = json.loads(path.read_text())
        d = d if isinstance(d, dict) else {}
        bench = d.get("benchmark", "")
        what = d.get("command") or d.get("note") or ""
        what = " ".join(str(what).split()).replace("|", "\\|")
        rows.append(f"| `{path.name}` | {bench} | {what} |")
    return "\n".join(rows) + "\n"


def _small_table():
    """Every fit of ``small.json`` (``bench_small.py``): seconds, passes, metrics; ours, peers."""
    d = json.loads((RESULTS / "small.json").read_text())
    rows = ["| case | fit | ours / peer | seconds | passes | metrics |", "|---" * 6 + "|"]
    for case, c in d["cases"].items():
        for side in ("ours", "peers"):
            for fit, r in c.get(side, {}).items():
                metrics = ", ".join(f"{k} {v:.4g}" for k, v in r.get("metric", {}).items())
                passes = r.get("passes", "")
                who = "ours" if side == "ours" else "peer"
                rows.append(f"| {case} | {fit} | {who} | {r['seconds']:.3f} | "
                            f"{passes} | {metrics} |")
    return "\n".join(rows) + "\n"


#: blocks generated from the results files by code rather than from a template
_BUILT_IN = {"index": _index_table, "small": _small_table}


def render_block(name, cache=None):
    """The generated body of block ``name``."""
    if name in _BUILT_IN:
        return _BUILT_IN[name]()
    tpl = TEMPLATES / f"{name}.md"
    if not tpl.is_file():
        raise ReportError(
            f"generated block {name!r} has no template {tpl.relative_to(REPO)}; add the template "
            f"or remove the <!-- results:{name} --> markers"
        )
    return render_template(tpl.read_text(), cache)


def render_file(text, cache=None):
    """``text`` with every generated block re-rendered."""
    cache = {} if cache is None else cache
    return _BLOCK.sub(lambda m: m[1] + render_block(m["name"], cache) + m[4], text)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true",
                   help="do not write; exit 1 when a generated block differs from the results")
    a = p.parse_args(argv)
    stale = []
    cache = {}
    for path in TARGETS:
        old = path.read_text()
        new = render_file(old, cache)
        if new == old:
            continue
        stale.append(path)
        if a.check:
            rel = str(path.relative_to(REPO))
            sys.stdout.writelines(difflib.unified_diff(
                old.splitlines(True), new.splitlines(True), rel + " (committed)",
                rel + " (from benchmarks/results)"))
        else:
            path.write_text(new)
            print(f"rewrote {path.relative_to(REPO)}")
    if a.check and stale:
        print(f"\nstale generated tables in {', '.join(str(s.relative_to(REPO)) for s in stale)}: "
              f"run python benchmarks/report.py and commit the result", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
