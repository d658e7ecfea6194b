"""The library's modules import each other without cycles, counting imports inside functions.

A function-level import that exists only to break a cycle hides the cycle; it does not remove it: the two
modules still need each other, and which one loads first decides what works. So the graph here has an edge
for every import of a ``windvane`` module wherever it is written, except under ``if TYPE_CHECKING:`` (those
never run). ``from package import name`` is an edge to the submodule when ``name`` is one, else to the
package itself.

Run as a script to print the cycles of one package: ``python tests/test_imports.py arrays``.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if __name__ == "__main__":
    sys.path.insert(0, str(REPO))

from tests.layout import LIBRARY  # noqa: E402 (after the path when run as a script)

FOLDERS = {name: f"windvane.{name}" for name in LIBRARY} | {"windvane": "windvane"}


def modules() -> dict[str, Path]:
    """Every module of the library by its installed name (``windvane.arrays.bigarray``) and its file."""
    found: dict[str, Path] = {}
    for folder, package in FOLDERS.items():
        root = REPO / folder
        for path in sorted(root.rglob("*.py")):
            inner = path.relative_to(root)
            if "__pycache__" in inner.parts or any((root / part).is_symlink() for part in inner.parts[:1]):
                continue
            parts = [*package.split("."), *inner.with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for other in child.orelse:
                yield from _imports_of(other)
            continue
        yield from _imports_of(child)


def _imports_of(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    if isinstance(node, ast.Import | ast.ImportFrom):
        yield node
    else:
        yield from _imports(node)


def edges(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The library modules that module ``name`` (at ``path``) imports when it runs."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found: set[str] = set()
    for node in _imports(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        found.update(target for target in targets if target in known and target != name)
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
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

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def import_graph() -> dict[str, set[str]]:
    known = modules()
    return {name: edges(name, path, known) for name, path in known.items()}


def describe(component: list[str], graph: dict[str, set[str]]) -> str:
    members = set(component)
    lines = [f"a cycle of {len(component)} modules:"]
    lines += [f"  {name} -> {', '.join(sorted(graph[name] & members))}" for name in component]
    return "\n".join(lines)


def test_the_library_has_no_import_cycles() -> None:
    graph = import_graph()
    assert len(graph) > 100  # the walk found the library at all
    found = cycles(graph)
    assert not found, "\n".join(describe(component, graph) for component in found)


if __name__ == "__main__":
    graph = import_graph()
    prefix = f"windvane.{sys.argv[1]}" if len(sys.argv) > 1 else "windvane"
    for component in cycles(graph):
        if any(name.startswith(prefix) for name in component):
            print(describe(component, graph))
