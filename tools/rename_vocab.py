r"""Codemod for issue 29 (one parameter vocabulary): rename estimator parameters, re-runnable.

    python tools/rename_vocab.py [paths...]      # default: ooc_lowrank tests benchmarks examples

Idempotent (running it twice changes nothing the second time).  It edits, with exact source
positions from the AST (no reformatting, word-bounded, per class):

1. keyword arguments of calls to a renamed estimator, ``GIMC(n_components=...)`` ->
   ``GIMC(n_features_map=...)`` (the callee's name decides: ``n_components`` stays on IMC);
2. inside the body of a renamed estimator's class (and its private bases): ``__init__``'s
   parameter names and their uses, ``self.old`` / ``cls.old`` / ``est.old`` attributes, keyword
   arguments of ``super().__init__`` / ``self._estimator(...)`` calls, string constants equal to
   the old name (``check_scalar(..., "lam")``), and in its strings / docstrings the forms
   ````old````, ``old=``, ``old :`` (a numpydoc heading) and, for the names that cannot be
   prose, every word-bounded ``old``.

Run it from the repository root after merging ``ooc_lowrank/_persist.py`` (its
``RENAMED_PARAMS`` is the table of the renames), then ``git diff`` and the tests; the hand edits
of the vocab29 branch (below) are merged as usual.

What it does not do (done by hand in the vocab29 branch; on newly merged code, look for them
with ``git grep -nE "\b(lam|lams|rank|l2|l2s|n_landmarks|n_factors|reg_weight)\b"`` and the
flags ``--lam --rank --l2 --n-landmarks --n-factors --reg-weight``, and ``n_components`` near
GIMC): keyword dicts whose target it cannot see (``kw = dict(rank=3)`` ... ``GreedyLowRank(**kw)``,
``cls(n_factors=3)`` with a variable class), ``get_params()`` / ``best_params_`` keys and
error-message regexes in tests, CLI flags in argv lists, Markdown, ``cli.py``'s preset dicts,
``_estimate.py``'s suggestion names, the module-level helpers of ``imc/clustering.py``
(``check_lam`` / ``select_lam``), and the translation table for old model files
(``ooc_lowrank/_persist.py::RENAMED_PARAMS``).
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
try:
    from ooc_lowrank._persist import RENAMED_PARAMS  # noqa: E402 (the one table of the renames)
except ImportError:  # a tree without the vocab29 branch's ooc_lowrank/_persist.py
    sys.exit("ooc_lowrank._persist.RENAMED_PARAMS is missing: merge the vocab29 branch's "
             "ooc_lowrank/_persist.py first, then re-run tools/rename_vocab.py")

# class -> {old public name: new public name}
RENAMES = {cls: dict(table) for cls, table in RENAMED_PARAMS.items()}
# private bases whose bodies hold the public parameters of their subclasses
RENAMES["_MaxideBase"] = {**RENAMES["KernelMaxide"]}
RENAMES["_ObservedSearch"] = {**RENAMES["KernelMaxideCV"], "lam": "alpha"}
# the CV estimators build their base estimator from keyword dicts and string keys
RENAMES["KernelMaxideCV"]["lam"] = "alpha"
RENAMES["MaxideCV"]["lam"] = "alpha"
RENAMES["GreedyLowRankCV"]["l2"] = "alpha"
RENAMES["GIMCCV"]["n_components"] = "n_features_map"
RENAMES["_BaseMVM"] = RENAMES["MultiViewMachineRegressor"]
# fitted attributes named after a renamed parameter (unique names: renamed on any object)
ATTRIBUTES = {"lam_": "alpha_", "lam_scores_": "alpha_scores_"}
RENAMES["GIMCClustering"] = {**RENAMES["GIMCClustering"], **ATTRIBUTES}
# per file: exact string literals that are a renamed parameter's name (grid keys of GLRL's CV)
LITERALS = {
    "ooc_lowrank/glrl/cv.py": {'"l2"': '"alpha"', '"l2s"': '"alphas"'},
    # the classifier's docstring is the regressor's with its own reg_weight / tol paragraphs
    "ooc_lowrank/mvm/estimator.py": {
        '"    reg_weight : "': '"    alpha : "',
        '"""    reg_weight : float': '"""    alpha : float',
        "(chosen with ``reg_weight``)": "(chosen with ``alpha``)",
        "the classifier's reg_weight and tol": "the classifier's alpha and tol",
    },
    "ooc_lowrank/gimc/estimator.py": {"(block_rows / n_components": "(block_rows / n_features_map"},
    # the fixes of GreedyLowRank's rank checks ("rank" is prose elsewhere)
    "ooc_lowrank/glrl/estimator.py": {
        '"Use rank >= 1': '"Use n_components >= 1',
        'f"Use rank <= {most}"': 'f"Use n_components <= {most}"',
        "``rank <= min(n_rows, n_cols)``": "``n_components <= min(n_rows, n_cols)``",
    },
}
# (class, method) whose ``dict(...)`` calls build the parameters of the estimator of the class
DICT_BUILDERS = {("GreedyLowRankCV", "base_params")}
# names that are ordinary words in prose: only ``x``, x=, "x :" forms in strings
PROSE_WORDS = {"rank", "l2", "n_components"}
OBJECT_NAMES = {"self", "cls", "est", "estimator", "model"}


def _offsets(src):
    starts, pos = [0], 0
    for line in src.splitlines(keepends=True):
        pos += len(line)
        starts.append(pos)
    return starts


def _string_edit(text, mapping, exact_prose=True):
    """The renamed forms inside one string literal's source text (``exact_prose``: also a
    literal equal to a prose-word name, as in ``check_scalar(self.rank, "rank")``)."""
    for old, new in mapping.items():
        o = re.escape(old)
        text = re.sub(rf"``{o}``", f"``{new}``", text)
        text = re.sub(rf"(?<![\w.\-]){o}(?==)", new, text)
        text = re.sub(rf"(?m)^(\s*){o}(\s*:)", rf"\g<1>{new}\g<2>", text)
        text = re.sub(rf"(?m)^(\s*(?:\w+, )*){o}(?=(, \w+)*\s*$)", rf"\g<1>{new}", text)
        if old not in PROSE_WORDS:
            text = re.sub(rf"(?<![\w\-]){o}(?![\w\-])", new, text)
        if exact_prose or old not in PROSE_WORDS:
            text = re.sub(rf"(['\"]){o}\1", rf"\g<1>{new}\g<1>", text)
    return text


def _field_edit(text, mapping):
    """``{self.old}`` inside an f-string field (the field's own edit is lost to the overlap)."""
    for old, new in mapping.items():
        text = re.sub(rf"\b({'|'.join(OBJECT_NAMES)})\.{re.escape(old)}\b", rf"\1.{new}", text)
    return text


class _Collector(ast.NodeVisitor):
    def __init__(self):
        self.edits = []  # (lineno, col, old, new) name edits
        self.strings = []  # (node, mapping)
        self.stack = []
        self.call_args = set()  # ids of string literals passed directly to a call
        self.classes, self.funcs = [], []

    def _mapping(self):
        return self.stack[-1] if self.stack else None

    def visit_ClassDef(self, node):
        self.stack.append(RENAMES.get(node.name, self._mapping()))
        self.classes.append(node.name)
        self.generic_visit(node)
        self.classes.pop()
        self.stack.pop()

    def visit_FunctionDef(self, node):
        m = self._mapping()
        if m and node.name == "__init__":
            for a in node.args.args + node.args.kwonlyargs:
                if a.arg in m:
                    self.edits.append((a.lineno, a.col_offset, a.arg, m[a.arg]))
            params = {a.arg for a in node.args.args + node.args.kwonlyargs}
            for sub in ast.walk(node):
                if isinstance(sub, ast.Name) and sub.id in m and sub.id in params | set(m):
                    self.edits.append((sub.lineno, sub.col_offset, sub.id, m[sub.id]))
        self.funcs.append(node.name)
        self.generic_visit(node)
        self.funcs.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Attribute(self, node):
        if node.attr in ATTRIBUTES:
            end = node.end_col_offset
            self.edits.append((node.end_lineno, end - len(node.attr), node.attr,
                               ATTRIBUTES[node.attr]))
        m = self._mapping()
        if (m and node.attr in m and isinstance(node.value, ast.Name)
                and node.value.id in OBJECT_NAMES):
            end = node.end_col_offset
            self.edits.append((node.end_lineno, end - len(node.attr), node.attr, m[node.attr]))
        self.generic_visit(node)

    def visit_Call(self, node):
        f = node.func
        name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
        m = RENAMES.get(name)
        if m is None and name in ("__init__", "_estimator", "set_params") and self._mapping():
            m = self._mapping()
        if (name == "dict" and self.classes and self.funcs
                and (self.classes[-1], self.funcs[-1]) in DICT_BUILDERS):
            m = {k: v for k, v in self._mapping().items()}
        self.call_args.update(id(a) for a in node.args if isinstance(a, ast.Constant))
        if m and not name.startswith("_") or (m and name in ("__init__", "_estimator")):
            for kw in node.keywords:
                if kw.arg in m:
                    self.edits.append((kw.lineno, kw.col_offset, kw.arg, m[kw.arg]))
        self.generic_visit(node)

    def visit_Constant(self, node):
        m = self._mapping()
        if m and isinstance(node.value, str):
            self.strings.append((node, m))

    def visit_JoinedStr(self, node):
        m = self._mapping()
        if m:
            self.strings.append((node, m))
        else:
            self.generic_visit(node)  # calls inside fields; the literal parts are not edited


def rewrite(src):
    tree = ast.parse(src)
    c = _Collector()
    c.visit(tree)
    starts = _offsets(src)
    spans = []  # (start, end, replacement)
    for line, col, old, new in c.edits:
        # col_offset is in UTF-8 bytes; convert on the line
        raw = src[starts[line - 1]:starts[line]].encode("utf-8")
        s = starts[line - 1] + len(raw[:col].decode("utf-8"))
        if src[s:s + len(old)] == old:
            spans.append((s, s + len(old), new))
    for node, m in c.strings:
        if getattr(node, "lineno", None) is None:
            continue
        a = starts[node.lineno - 1] + len(
            src[starts[node.lineno - 1]:].encode("utf-8")[:node.col_offset].decode("utf-8"))
        b = starts[node.end_lineno - 1] + len(
            src[starts[node.end_lineno - 1]:].encode("utf-8")[:node.end_col_offset]
            .decode("utf-8"))
        text = src[a:b]
        if isinstance(node, ast.JoinedStr):  # only the literal parts: skip {...} fields
            parts = re.split(r"(\{[^{}]*\})", text)
            new_text = "".join(_field_edit(p, m) if p.startswith("{") else _string_edit(p, m)
                               for p in parts)
        else:
            new_text = _string_edit(text, m, id(node) in c.call_args)
        if new_text != text:
            spans.append((a, b, new_text))
    spans = sorted(set(spans))
    out, pos = [], 0
    for s, e, r in spans:
        if s < pos:  # nested (a name inside an f-string field already edited): skip
            continue
        out.append(src[pos:s])
        out.append(r)
        pos = e
    out.append(src[pos:])
    return "".join(out)


def rewrite_file(path, src):
    new = rewrite(src)
    for key, table in LITERALS.items():
        if Path(path).as_posix().endswith(key):
            for old, lit in table.items():
                new = re.sub(rf"(?<![\w.]){re.escape(old)}", lit, new)
    return new


def main(argv):
    roots = argv or ["ooc_lowrank", "tests", "benchmarks", "examples"]
    me = Path(__file__).resolve()
    changed = 0
    for root in roots:
        paths = [Path(root)] if root.endswith(".py") else sorted(Path(root).rglob("*.py"))
        for p in paths:
            if p.resolve() == me:
                continue
            src = p.read_text(encoding="utf-8")
            new = rewrite_file(p, src)
            if new != src:
                ast.parse(new)  # never write a file that does not parse
                p.write_text(new, encoding="utf-8")
                changed += 1
                print(f"rewrote {p}")
    print(f"{changed} files changed")


if __name__ == "__main__":
    main(sys.argv[1:])
