"""Imports follow the data: connectors -> ingest -> arrays -> neostore; only the windvane CLI package wires them all."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
LAYERS = ("connectors", "ingest", "arrays", "neostore")
# What each layer may import of the others. connectors hand batches to ingest's interface only: the batch,
# its errors, authentication, parts, and the one rule by which a batch's times are read (ingest.times).
ALLOWED = {
    "neostore": set(),
    "arrays": {"neostore"},
    "ingest": {"arrays", "neostore"},
    "connectors": {"ingest.batch", "ingest.errors", "ingest.auth", "ingest.parts", "ingest.times"},
}


def imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


@pytest.mark.parametrize("layer", LAYERS)
def test_layer_imports_only_what_is_downstream(layer):
    offending = []
    for path in sorted((REPO / layer).rglob("*.py")):
        for name in imported(path):
            top = name.split(".")[0]
            if top == "windvane":
                offending.append(f"{path.relative_to(REPO)} imports {name}")
            elif top in LAYERS and top != layer and not any(
                name == allowed or name.startswith(allowed + ".") or (allowed == top) for allowed in ALLOWED[layer]
            ):
                offending.append(f"{path.relative_to(REPO)} imports {name}")
    assert not offending, "\n".join(offending)
