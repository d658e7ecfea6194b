"""The code blocks of the project's Markdown documents, and the windvane commands in their shell blocks.

`code_blocks` reads the fenced blocks (```lang ... ```) of one document in
order; `windvane_commands` finds the `windvane ...` commands in a shell
block, one per command even where a line chains several with `&&`.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

PYTHON = frozenset({"python", "py", "python3"})
SHELL = frozenset({"sh", "bash", "shell", "console"})

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`\s]*)")

# Tokens that end one shell command and start the next.
_SEPARATORS = frozenset({"&&", "||", ";", "|", "&"})


_HEADING = re.compile(r"^#{1,6}\s+(?P<title>.+?)\s*#*\s*$")


@dataclass(frozen=True)
class Block:
    """A fenced code block: its document, the line of its opening fence (1-based), language, text
    and the title of the section it stands in ('' before the first heading)."""

    doc: Path
    line: int
    lang: str
    text: str
    section: str

    def where(self, root: Path) -> str:
        return f"{self.doc.relative_to(root)}:{self.line}"


@dataclass(frozen=True)
class Command:
    """A windvane command of a shell block: its line in the document and its arguments after `windvane`."""

    line: int
    args: tuple[str, ...]
    text: str


def markdown_files(root: Path) -> list[Path]:
    """The Markdown documents under ``root``, in a stable order, leaving out hidden and installed trees."""
    found: list[Path] = []
    for directory, subdirs, files in os.walk(root):
        subdirs[:] = [d for d in subdirs if not d.startswith(".") and d not in ("node_modules", "__pycache__")]
        found += [Path(directory, name) for name in files if name.endswith(".md")]
    return sorted(found)


def code_blocks(doc: Path) -> list[Block]:
    """The fenced code blocks of ``doc`` in document order, dedented to their fence's indent."""
    blocks: list[Block] = []
    lines = doc.read_text(encoding="utf-8").splitlines()
    section = ""
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if not opening:
            heading = _HEADING.match(lines[i])
            if heading:
                section = heading["title"]
            i += 1
            continue
        indent, fence = len(opening["indent"]), opening["fence"]
        body: list[str] = []
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(fence):
            # A line indented less than its fence loses only the indent it has.
            body.append(lines[j][min(indent, len(lines[j]) - len(lines[j].lstrip())) :])
            j += 1
        blocks.append(Block(doc, i + 1, opening["info"].lower(), "\n".join(body) + "\n", section))
        i = j + 1
    return blocks


def windvane_commands(block: Block) -> list[Command]:
    """The commands of a shell block that run windvane (``windvane ...`` or ``.venv/bin/windvane ...``)."""
    commands: list[Command] = []
    offset = 0
    pending = ""
    lines = block.text.splitlines()
    for n, raw in enumerate(lines):
        if not pending:
            offset = n
        if raw.rstrip().endswith("\\"):
            pending += raw.rstrip()[:-1] + " "
            continue
        text, pending = pending + raw, ""
        # ';' and '&' end a command even where no space does; '|' only as a word of its own
        # (written inside a word it is a choice of a synopsis, `parquet|csv`).
        lexer = shlex.shlex(text, posix=True, punctuation_chars=";&")
        lexer.whitespace_split = True
        tokens = list(lexer)
        segment: list[str] = []
        for token in [*tokens, ";"]:
            if token not in _SEPARATORS:
                segment.append(token)
                continue
            program = segment[0].lstrip("(") if segment else ""
            if program == "windvane" or program.endswith("/windvane"):
                commands.append(Command(block.line + 1 + offset, tuple(segment[1:]), text.strip()))
            segment = []
    return commands
