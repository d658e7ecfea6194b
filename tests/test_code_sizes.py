"""Sizes of the library's functions and classes: reported, and failed only where no reviewer would read on.

A class is as large as the state it owns and the ideas it holds; cutting it into files to meet a number moves
its state away from its owner, which is worse than a long class. So the numbers here are not a target: the
test prints the largest definitions for a reviewer to look at, and fails only far above what a reader can
hold (a function of a few screens, a class of a thousand lines), where a split along named ideas is overdue.

Lines are counted from the ``def``/``class`` line to the last line of the body, docstrings and comments
included. ``windvane/`` (the command line and operations helpers) is held to the same limits. Run as a
script to print the largest: ``python tests/test_code_sizes.py``.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FOLDERS = ("neostore", "arrays", "ingest", "connectors", "export", "windvane")
#: Far above what a reviewer accepts without asking for a split: these fail.
TOO_LONG = {"function": 150, "class": 1000}
#: How many of the largest of each kind the test reports.
REPORTED = 10

Definition = tuple[int, str, str, str]


def definitions() -> list[Definition]:
    """(lines, kind, path, qualified name) of every function and class under the library's folders."""
    found: list[Definition] = []
    for folder in FOLDERS:
        for path in sorted((REPO / folder).rglob("*.py")):
            if "__pycache__" in path.parts or path.is_symlink() or any(p.is_symlink() for p in path.parents):
                continue
            tree = ast.parse(path.read_text(), str(path))
            found.extend(_walk(tree, str(path.relative_to(REPO)), ""))
    return found


def _walk(node: ast.AST, path: str, prefix: str) -> Iterator[Definition]:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            kind = "class" if isinstance(child, ast.ClassDef) else "function"
            name = f"{prefix}{child.name}"
            yield (child.end_lineno or child.lineno) - child.lineno + 1, kind, path, name
            yield from _walk(child, path, name + ".")
        else:
            yield from _walk(child, path, prefix)


def largest(found: list[Definition], kind: str) -> list[Definition]:
    return sorted((d for d in found if d[1] == kind), reverse=True)[:REPORTED]


def report(found: list[Definition]) -> str:
    lines = []
    for kind in TOO_LONG:
        plural = {"function": "functions", "class": "classes"}[kind]
        lines.append(f"largest {plural} (fail above {TOO_LONG[kind]} lines):")
        lines += [f"  {size:5d}  {path} {name}" for size, _, path, name in largest(found, kind)]
    return "\n".join(lines)


def test_no_definition_is_far_too_long_to_read() -> None:
    found = definitions()
    assert {"class", "function"} <= {kind for _, kind, _, _ in found}  # the walk found the library at all
    print(report(found))
    too_long = [
        f"{path}: {kind} {name} has {size} lines: split it where its parts are ideas with names"
        for size, kind, path, name in found
        if size > TOO_LONG[kind]
    ]
    assert not too_long, "\n".join(too_long)


if __name__ == "__main__":
    print(report(definitions()))
    sys.exit(0)
