"""No module of the package imports, at run time, a module that imports it back (directly or
around a loop): a cycle makes import order matter and hides which layer depends on which. Imports
under `if TYPE_CHECKING:` are not run and do not count; imports inside functions do (they run)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

SRC = Path(__file__).resolve().parents[2] / "src"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in (SRC / "sanbox").rglob("*.py")}


def _type_checking_only(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def run_time_imports(
    tree: ast.AST, type_checking: bool = False
) -> list[ast.Import | ast.ImportFrom]:
    """The imports that run (and, with `type_checking`, those only type checkers see)."""
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _type_checking_only(node) and not type_checking:
            for statement in node.orelse:
                visit(statement)
            return
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def graph(type_checking: bool = False) -> dict[str, set[str]]:
    known = modules()
    edges: dict[str, set[str]] = {name: set() for name in known}
    for name, path in known.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in run_time_imports(ast.parse(path.read_text()), type_checking):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = package
                for _ in range(node.level - 1):
                    base = base.rpartition(".")[0]
                origin = node.module or ""
                if node.level:
                    origin = f"{base}.{origin}" if origin else base
                targets = [
                    f"{origin}.{a.name}" if f"{origin}.{a.name}" in known else origin
                    for a in node.names
                ]
            for target in targets:
                while target and target not in known:  # a name inside a module
                    target = target.rpartition(".")[0]
                if target and target != name and target.startswith("sanbox"):
                    edges[name].add(target)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges[node]):
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            connect(node)
    return found


def test_the_finder_sees_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_package_has_no_run_time_import_cycle() -> None:
    edges = graph()
    assert "sanbox.control.fleet" in edges and edges["sanbox.api.app"]  # the graph is read
    assert cycles(edges) == []


def test_the_plumbing_imports_no_verb() -> None:
    names = [
        "create",
        "lifecycle",
        "pausing",
        "guest",
        "network",
        "computers",
        "images",
        "reconciler",
        "idle",
    ]
    verbs = {f"sanbox.control.{m}" for m in names}
    assert not graph()["sanbox.control.fleet"] & verbs


def test_routes_reach_the_guest_and_the_store_only_through_the_control_plane() -> None:
    edges = graph()
    routes = [name for name in edges if name.startswith("sanbox.api.routes.")]
    assert routes
    for route in routes:
        below = {t for t in edges[route] if t.startswith(("sanbox.host", "sanbox.store"))}
        assert not below, f"{route} imports {below}: go through sanbox.control"


def test_the_host_layer_has_no_cycle_even_for_type_checkers() -> None:
    """Inside `sanbox.host` no module needs one that needs it back, counting the imports only
    type checkers see: each part is given its collaborators, none reaches back into another."""
    edges = graph(type_checking=True)
    host = {
        name: {t for t in targets if t.startswith("sanbox.host")}
        for name, targets in edges.items()
        if name.startswith("sanbox.host")
    }
    assert "sanbox.host.machines.boot" in host and host["sanbox.host.runtime"]  # the graph is read
    assert cycles(host) == []
