"""The library stays in pieces a reader can hold: no function over 60 lines, no class over 300.

Lines are counted from the ``def``/``class`` line to the last line of the body, docstrings and comments
included. ``windvane/`` (the command line and operations helpers) is held to the same limits.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FOLDERS = ("neostore", "arrays", "ingest", "connectors", "export", "windvane")
MAX_FUNCTION = 60
MAX_CLASS = 300


def definitions() -> list[tuple[int, str, str, str]]:
    """(lines, kind, path, qualified name) of every function and class under the library's folders."""
    found = []
    for folder in FOLDERS:
        for path in sorted((REPO / folder).rglob("*.py")):
            if "__pycache__" in path.parts or path.is_symlink() or any(p.is_symlink() for p in path.parents):
                continue
            tree = ast.parse(path.read_text(), str(path))
            found.extend(_walk(tree, str(path.relative_to(REPO)), ""))
    return found


def _walk(node: ast.AST, path: str, prefix: str):
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            kind = "class" if isinstance(child, ast.ClassDef) else "function"
            name = f"{prefix}{child.name}"
            yield child.end_lineno - child.lineno + 1, kind, path, name
            yield from _walk(child, path, name + ".")
        else:
            yield from _walk(child, path, prefix)


def test_no_function_over_60_lines_and_no_class_over_300():
    found = definitions()
    too_long = [
        f"{path}: {kind} {name} has {lines} lines"
        for lines, kind, path, name in found
        if lines > (MAX_CLASS if kind == "class" else MAX_FUNCTION)
    ]
    assert not too_long, "\n".join(too_long)
    largest = {kind: max((d for d in found if d[1] == kind), default=None) for kind in ("class", "function")}
    for kind, (lines, _, path, name) in largest.items():
        print(f"largest {kind}: {path} {name}, {lines} lines")
    assert all(largest.values())  # the walk found the library at all
