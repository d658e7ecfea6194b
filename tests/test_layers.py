"""Imports follow the data: connectors -> ingest -> arrays -> neostore; export reads arrays; only the windvane
command line (``windvane.cli``) and its operations helpers (``windvane.ops``) wire them all.

Each folder at the repository root is installed as ``windvane.<folder>``; a module names the others by that
full name, never by a bare top-level ``neostore`` or ``arrays``, and never imports a name another package
keeps private (a leading underscore, in the module path or the imported name).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.layout import LIBRARY

REPO = Path(__file__).resolve().parent.parent
COMMAND_LINE = ("windvane",)
# What each package may import of the others. connectors hand batches to ingest's interface only: the batch,
# its errors, authentication, parts, and the one rule by which a batch's times are read (ingest.times); and the
# process's C allocator has one owner (ingest.memory), whose memory the connectors give back after a burst.
ALLOWED = {
    "neostore": set(),
    "parsers": set(),  # data (shipped <parse> sections) and the functions that find it
    "arrays": {"neostore"},
    "ingest": {"arrays", "neostore"},
    "export": {"arrays", "neostore", "ingest.times", "ingest.checkpoints"},
    # The web console reads the store, acts through ingest and hands downloads to export.
    "console": {"arrays", "neostore", "ingest", "export"},
    "connectors": {"ingest.batch", "ingest.errors", "ingest.auth", "ingest.parts", "ingest.times", "ingest.memory"},
    "windvane": set(LIBRARY),
}
PACKAGE_OF_FOLDER = {name: f"windvane.{name}" for name in LIBRARY} | {"windvane": "windvane"}


def imported(path: Path) -> list[tuple[str, str | None]]:
    """Each import of ``path`` as (module, imported name or None), relative imports made absolute."""
    folder = path.relative_to(REPO).parts[0]
    if folder not in PACKAGE_OF_FOLDER:  # tests/, benchmarks/: not installed, only absolute imports matter
        here = [folder]
    else:
        here = PACKAGE_OF_FOLDER[folder].split(".")
    here = here + list(path.relative_to(REPO).parent.parts[1:])
    found: list[tuple[str, str | None]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.extend((alias.name, None) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = here[: len(here) - node.level + 1]
                base = ".".join(package + ([node.module] if node.module else []))
            found.extend((base, alias.name) for alias in node.names)
    return found


def package_of(module: str) -> str | None:
    """The repository folder a ``windvane.*`` module lives in, e.g. ``neostore``; None for other distributions."""
    parts = module.split(".")
    if parts[0] != "windvane":
        return None
    if len(parts) > 1 and parts[1] in LIBRARY:
        return parts[1]
    return "windvane"


def sources(folder: str) -> list[Path]:
    return sorted(path for path in (REPO / folder).rglob("*.py") if "__pycache__" not in path.parts)


def allowed(folder: str, target: str, module: str) -> bool:
    if target == folder:
        return True
    inner = module.split(".", 1)[1] if "." in module else ""
    return any(inner == rule or inner.startswith(rule + ".") for rule in ALLOWED[folder])


@pytest.mark.parametrize("folder", LIBRARY + COMMAND_LINE)
def test_package_imports_only_what_is_downstream(folder):
    offending = []
    for path in sources(folder):
        for module, name in imported(path):
            full = f"{module}.{name}" if name and name != "*" else module
            if module.split(".")[0] in LIBRARY:
                offending.append(f"{path.relative_to(REPO)} imports {module} by its bare name, not as windvane.*")
                continue
            target = package_of(full)
            if target is None:
                continue
            if folder != "windvane" and target == "windvane" and full != "windvane":
                offending.append(f"{path.relative_to(REPO)} imports the command line's {full}")
            elif target != "windvane" and not allowed(folder, target, full):
                offending.append(f"{path.relative_to(REPO)} imports {full}")
    assert not offending, "\n".join(offending)


@pytest.mark.parametrize("folder", LIBRARY + COMMAND_LINE + ("tests", "benchmarks"))
def test_no_module_imports_another_packages_private_name(folder):
    offending = []
    for path in sources(folder):
        for module, name in imported(path):
            full = f"{module}.{name}" if name and name != "*" else module
            target = package_of(full)
            if target is None or target == folder:
                continue
            private_module = any(part.startswith("_") and not part.startswith("__") for part in full.split("."))
            private_name = name is not None and name.startswith("_") and not name.startswith("__")
            if private_module or private_name:
                offending.append(f"{path.relative_to(REPO)} imports {full}{'' if name is None else ' ' + name}")
    assert not offending, "\n".join(offending)


def test_every_package_folder_is_installed():
    """pyproject.toml lists packages explicitly (the folders are mapped into one namespace): none forgotten."""
    import tomllib

    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    on_disk = set()
    for folder, package in PACKAGE_OF_FOLDER.items():
        for init in (REPO / folder).rglob("__init__.py"):
            inner = init.parent.relative_to(REPO / folder).parts
            on_disk.add(".".join([package, *inner]))
    assert on_disk == listed, f"missing from pyproject: {sorted(on_disk - listed)}; stale: {sorted(listed - on_disk)}"
    assert {config["package-dir"][package] for package in PACKAGE_OF_FOLDER.values()} == set(PACKAGE_OF_FOLDER)
