"""The import graph of ``ooc_lowrank`` (read with ``ast``, nothing imported): STYLE.md's layers,
imports only point down.  Function-level imports count: they are a circle all the same, only
hidden until the function runs."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "ooc_lowrank"

#: lower module first: engine (the only Dask code) < storage (Zarr stores) < _persist (models)
ORDER = ("ooc_lowrank.engine", "ooc_lowrank.storage", "ooc_lowrank._persist")


def import_graph(package: Path) -> dict[str, set[str]]:
    """``{module: modules of the package it imports}``, at any depth of the source.

    ``from P import a`` imports the submodule ``P.a`` when there is one, otherwise ``P``; the
    parent packages Python runs on the way are not edges (``ooc_lowrank/__init__`` imports its
    estimators lazily)."""
    files = {}
    for path in package.rglob("*.py"):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        files[".".join(parts[:-1] if is_pkg else parts)] = (path, is_pkg)

    def known(name):  # the longest prefix of ``name`` that is a module of the package
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name

    graph = {}
    for mod, (path, is_pkg) in files.items():
        deps = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                deps.update(known(a.name) for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    here = mod.split(".") if is_pkg else mod.split(".")[:-1]
                    here = here[: len(here) - node.level + 1]
                    base = ".".join(here + ([node.module] if node.module else []))
                for a in node.names:
                    sub = f"{base}.{a.name}"
                    deps.add(sub if sub in files else known(base))
        deps.discard("")
        deps.discard(mod)
        graph[mod] = deps
    return graph


def reachable(graph, start) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for dep in graph.get(todo.pop(), ()):
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return seen


def circles_through(graph, modules) -> list[str]:
    """One import path per module of ``modules`` that leads back to itself."""
    out = []
    for mod in modules:
        # breadth-first from mod's imports back to mod, remembering the path
        prev, todo = {d: mod for d in graph.get(mod, ())}, list(graph.get(mod, ()))
        while todo and mod not in prev:
            cur = todo.pop(0)
            for dep in graph.get(cur, ()):
                if dep not in prev:
                    prev[dep] = cur
                    todo.append(dep)
        if mod in prev:
            path, cur = [mod], prev[mod]
            while cur != mod:
                path.append(cur)
                cur = prev[cur]
            out.append(" -> ".join([mod, *reversed(path)]))
    return out


def test_no_import_circle_among_engine_storage_and_persistence():
    graph = import_graph(PACKAGE)
    assert set(ORDER) <= graph.keys(), sorted(graph)
    assert circles_through(graph, ORDER) == []


def test_engine_storage_and_persistence_import_only_downwards():
    graph = import_graph(PACKAGE)
    upward = [
        f"{low} imports {high} (directly or through another module)"
        for i, low in enumerate(ORDER)
        for high in ORDER[i + 1 :]
        if high in reachable(graph, low)
    ]
    assert upward == []


def test_the_import_graph_sees_function_level_and_relative_imports(tmp_path):
    """The checker itself: a circle closed only by a function-level relative import is found."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .sub import b\n")
    (pkg / "sub" / "b.py").write_text("import numpy\n\ndef f():\n    from ..a import x\n")
    graph = import_graph(pkg)
    assert graph["pkg.a"] == {"pkg.sub.b"} and graph["pkg.sub.b"] == {"pkg.a"}
    assert circles_through(graph, ["pkg.a"]) == ["pkg.a -> pkg.sub.b -> pkg.a"]


def test_inputs_still_recognises_engine_blocks_without_importing_the_engine():
    """``_inputs.is_lazy`` knows ``engine.Blocked`` by a class attribute, not an import."""
    import numpy as np

    from ooc_lowrank import engine
    from ooc_lowrank._inputs import is_lazy

    assert "ooc_lowrank.engine" not in import_graph(PACKAGE)["ooc_lowrank._inputs"]
    assert is_lazy(engine.as_blocked(np.ones((6, 2)), block_rows=3))
    assert not is_lazy(np.ones((6, 2)))
