"""The `windvane store` maintenance commands docs/operations.md shows run as written, on a real SQLite store."""

from __future__ import annotations

import shlex
from pathlib import Path

import numpy as np
from click.testing import CliRunner

from windvane import arrays
from windvane.cli import cli as windvane_cli

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "operations.md"


def shown_commands(prefix: str) -> list[str]:
    """The lines of the page's ```sh blocks that start with ``prefix``, their comments dropped."""
    found, inside = [], False
    for line in PAGE.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            inside = line == "```sh"
        elif inside and line.startswith(prefix):
            found.append(line.split("  #", 1)[0].strip())
    return found


def test_every_pack_shown_runs_as_written(sqlite_url):
    with arrays.create(sqlite_url, "s/x", (0,), "float64") as a:
        a.append(np.arange(10.0))
    commands = shown_commands("windvane store pack")
    assert len(commands) >= 4
    for command in commands:
        words = [
            sqlite_url if word == "URL" else str(REPO / "schemas") if word == "schemas/" else word
            for word in shlex.split(command)[1:]
        ]
        result = CliRunner().invoke(windvane_cli, words)
        assert result.exit_code == 0, f"{command}: {result.output}"
