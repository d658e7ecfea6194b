"""A broad ``except`` in the library either raises again or says why it must be broad.

``except Exception``, ``except BaseException`` and a bare ``except`` catch the errors nobody thought of.
That is right where the handler cleans up and raises again (bare, or as one of the package's errors), or
where one failure must not stop the rest (a server's connection, a cleanup after a crash) and a comment at
the handler says so. Anything else hides defects, so this test names it.
"""

from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path

from tests.test_code_sizes import FOLDERS, REPO

BROAD = {"Exception", "BaseException"}


def _names(node: ast.expr | None) -> set[str]:
    if node is None:
        return {"BaseException"}
    if isinstance(node, ast.Tuple):
        return {n for element in node.elts for n in _names(element)}
    if isinstance(node, ast.Name):
        return {node.id}
    if isinstance(node, ast.Attribute):
        return {node.attr}
    return set()


def _raises(handler: ast.ExceptHandler) -> bool:
    return any(isinstance(node, ast.Raise) for statement in handler.body for node in ast.walk(statement))


def _comment_lines(source: str) -> set[int]:
    return {
        token.start[0]
        for token in tokenize.generate_tokens(io.StringIO(source).readline)
        if token.type == tokenize.COMMENT
    }


def silent_broad_handlers(path: Path) -> list[int]:
    """Lines of ``path``'s broad handlers that do not raise and carry no comment (on, just above or just in)."""
    source = path.read_text()
    comments = _comment_lines(source)
    found = []
    for node in ast.walk(ast.parse(source, str(path))):
        if not isinstance(node, ast.ExceptHandler) or not (_names(node.type) & BROAD) or _raises(node):
            continue
        explained = {node.lineno - 1, node.lineno, node.lineno + 1} & comments
        if not explained:
            found.append(node.lineno)
    return found


def library_sources() -> list[Path]:
    return [
        path
        for folder in FOLDERS
        for path in sorted((REPO / folder).rglob("*.py"))
        if "__pycache__" not in path.parts and not any(p.is_symlink() for p in path.parents)
    ]


def test_every_broad_except_raises_again_or_says_why() -> None:
    sources = library_sources()
    assert len(sources) > 100  # the walk found the library at all
    silent = [
        f"{path.relative_to(REPO)}:{line}: a broad except that neither raises nor says why it must be broad"
        for path in sources
        for line in silent_broad_handlers(path)
    ]
    assert not silent, "\n".join(silent)
