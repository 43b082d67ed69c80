"""The package's import graph, read from the source with ``ast`` (nothing is imported): no
circle, the pipelines know nothing of the autoscaler, the library nothing of the experiment
or the CLI. Imports inside functions count: they are dependencies too, only later."""

from __future__ import annotations

import ast
from pathlib import Path

import streamscale

ROOT = Path(streamscale.__file__).parent
PACKAGE = "streamscale"


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _owner(name: str) -> str | None:
    """The package module ``name`` lives in (a module, or the package defining the name)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(name: str) -> set[str]:
    """The package's modules that module ``name`` imports, anywhere in its body."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            for alias in node.names:
                # ``from pkg import mod`` imports the module; ``from mod import name`` the module.
                full = f"{module}.{alias.name}"
                targets.add(full if full in MODULES else module)
    owners = {_owner(t) for t in targets if t == PACKAGE or t.startswith(PACKAGE + ".")}
    return {o for o in owners if o is not None and o != name}


GRAPH = {name: imports_of(name) for name in MODULES}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _under(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def test_the_graph_is_read() -> None:
    assert "streamscale.class_archives" in GRAPH["streamscale.cluster"]  # from pkg import mod
    assert "streamscale.autoscale.policy" in GRAPH["streamscale.autoscale.controller"]
    assert "streamscale.autoscale.attach" in GRAPH["streamscale"]  # inside a function


def test_a_circle_is_found() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_circle() -> None:
    assert _cycles(GRAPH) == []


def test_pipelines_import_nothing_of_the_autoscaler() -> None:
    found = {
        name: sorted(t for t in targets if _under(t, "streamscale.autoscale"))
        for name, targets in GRAPH.items()
        if _under(name, "streamscale.pipelines")
    }
    assert {name: targets for name, targets in found.items() if targets} == {}


def test_the_library_imports_neither_the_experiment_nor_the_cli() -> None:
    outside = ("streamscale.experiment", "streamscale.cli")
    found = {
        name: sorted(t for t in targets if any(_under(t, o) for o in outside))
        for name, targets in GRAPH.items()
        if not any(_under(name, o) for o in outside)
    }
    assert {name: targets for name, targets in found.items() if targets} == {}
