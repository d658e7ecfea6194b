"""The README, the pages under docs/ and the benchmarks' README: what their examples import exists and is public,
their relative links resolve, and they speak of the project as it is.

`tests/test_readme.py` runs their code blocks; this module reads them:

* every ``import``/``from`` line of a ```python block imports windvane by its
  one namespace (``windvane.<part>``, never a bare ``neostore``), names no
  private module or name (a leading underscore), and names what exists;
* every relative Markdown link names a file of the repository, and its
  ``#anchor``, when it has one, a heading of that file;
* no page cites issue numbers.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

from tests.docs.doc_blocks import PYTHON, code_blocks

REPO = Path(__file__).resolve().parents[2]
PAGES = sorted([REPO / "README.md", REPO / "benchmarks" / "README.md", *(REPO / "docs").glob("*.md")])
# The root folders a reader could import bare, by mistake: installed, they are windvane.<folder>.
ROOT_PACKAGES = frozenset({"neostore", "arrays", "ingest", "connectors", "export"})

_LINK = re.compile(r"(?<!!)\[[^\]]*\]\((?P<target>[^)\s]+)\)")
_HEADING = re.compile(r"^#{1,6}\s+(?P<title>.+?)\s*#*\s*$")
_ISSUE = re.compile(r"\bissues?\s+#?\d+|\(#\d+\)", re.IGNORECASE)


def _ids(path: Path) -> str:
    return str(path.relative_to(REPO))


def imports_of(source: str) -> list[tuple[int, str, list[str]]]:
    """Each absolute import of ``source``: (line, module, imported names; empty for ``import module``)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.append((node.lineno, node.module, [alias.name for alias in node.names]))
    return found


def import_problems(module: str, names: list[str]) -> list[str]:
    """What is wrong with ``from module import names`` (``import module`` when ``names`` is empty) in a page."""
    top = module.split(".")[0]
    if top in ROOT_PACKAGES:
        return [f"{module}: import it as windvane.{module}"]
    if top != "windvane":
        return []  # numpy, xarray, zarr: not the project's to check
    private = [part for part in [*module.split("."), *names] if part.startswith("_")]
    if private:
        return [f"{module}: {', '.join(private)} private"]
    try:
        imported = importlib.import_module(module)
    except ImportError as exc:
        return [f"{module}: {exc}"]
    missing = []
    for name in names:
        if name == "*" or hasattr(imported, name):
            continue
        try:
            importlib.import_module(f"{module}.{name}")
        except ImportError:
            missing.append(f"{module} has no {name}")
    return missing


def slug(title: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[^\w\- ]", "", title.strip().lower())
    return text.replace(" ", "-")


def anchors(doc: Path) -> set[str]:
    found, fenced = set(), False
    for line in doc.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        elif not fenced and (heading := _HEADING.match(line)):
            found.add(slug(heading["title"]))
    return found


def test_the_pages_are_found():
    names = {_ids(page) for page in PAGES}
    assert {"README.md", "benchmarks/README.md", "docs/contributing.md", "docs/serve.md"} <= names


@pytest.mark.parametrize("page", PAGES, ids=_ids)
def test_examples_import_only_public_windvane_names(page):
    problems = [
        f"{block.where(REPO)} (+{line - 1}): {problem}"
        for block in code_blocks(page)
        if block.lang in PYTHON
        for line, module, names in imports_of(block.text)
        for problem in import_problems(module, names)
    ]
    assert not problems, "\n".join(problems)


def broken_links(page: Path) -> list[str]:
    """The relative links of ``page`` to a file that does not exist, or to a heading its file does not have."""
    broken = []
    for match in _LINK.finditer(page.read_text(encoding="utf-8")):
        target = match["target"]
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            broken.append(f"{target}: no {linked}")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{target}: no heading #{anchor} in {linked.name}")
    return broken


@pytest.mark.parametrize("page", PAGES, ids=_ids)
def test_relative_links_resolve(page):
    broken = broken_links(page)
    assert not broken, f"{_ids(page)}:\n" + "\n".join(broken)


@pytest.mark.parametrize("page", PAGES, ids=_ids)
def test_pages_cite_no_issue_numbers(page):
    cited = _ISSUE.findall(page.read_text(encoding="utf-8"))
    assert not cited, f"{_ids(page)}: {cited}"


def test_the_checks_catch_what_they_are_for(tmp_path):
    assert import_problems("neostore", []) == ["neostore: import it as windvane.neostore"]
    assert import_problems("windvane.arrays", ["_private"]) == ["windvane.arrays: _private private"]
    assert import_problems("windvane.arrays", ["no_such_name"]) == ["windvane.arrays has no no_such_name"]
    assert import_problems("windvane", ["arrays", "neostore"]) == []
    assert import_problems("numpy", []) == []
    assert slug("Times: one rule") == "times-one-rule"
    assert slug("Exports: `windvane export`") == "exports-windvane-export"
    page = tmp_path / "page.md"
    (tmp_path / "there.md").write_text("## Here\n", encoding="utf-8")
    page.write_text(
        "# A page\n\n[up](#a-page) [there](there.md#here) [gone](missing.md) [nowhere](there.md#not-here) "
        "[out](https://example.org)\n",
        encoding="utf-8",
    )
    assert [problem.split(":")[0] for problem in broken_links(page)] == ["missing.md", "there.md#not-here"]
