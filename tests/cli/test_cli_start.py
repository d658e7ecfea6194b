"""`windvane --help`, `--version` and every command's `--help` start without the heavy libraries.

The time it takes is measured in benchmarks/test_cli_start.py; what this
checks is why it is short: the command line imports numpy, zarr, pyarrow,
the arrays and neostore packages, the servers' libraries and asyncio only
inside the commands that use them, so asking for help loads none of them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

HEAVY = (
    "numpy",
    "zarr",
    "pyarrow",
    "pandas",
    "dask",
    "xarray",
    "windvane.arrays",
    "windvane.neostore",
    "aiohttp",
    "msgspec",
    "zstandard",
    "blake3",
    "asyncio",
    "mariadb",
    "paho",
)

#: Runs the CLI with the arguments given, then prints the heavy modules it loaded, as JSON.
PROBE = f"""
import json, sys
import windvane.cli
try:
    windvane.cli.cli.main(sys.argv[1:], prog_name="windvane")
except SystemExit as exc:
    code = exc.code
print(json.dumps({{"code": code, "loaded": sorted(m for m in {HEAVY!r} if m in sys.modules)}}))
"""


def loaded_by(*args: str) -> tuple[int, list[str], str]:
    done = subprocess.run([sys.executable, "-c", PROBE, *args], cwd=REPO, capture_output=True, text=True, timeout=60)
    report = json.loads(done.stdout.strip().splitlines()[-1])
    return report["code"], report["loaded"], done.stdout


def commands() -> list[list[str]]:
    """Every command and group of the CLI, as the words that name it."""
    from windvane.cli import cli

    found: list[list[str]] = []

    def walk(group, words: list[str]) -> None:
        for name, command in group.commands.items():
            found.append([*words, name])
            if hasattr(command, "commands"):
                walk(command, [*words, name])

    walk(cli, [])
    return found


@pytest.mark.parametrize("args", [["--help"], ["--version"]], ids=["help", "version"])
def test_the_command_line_starts_without_the_heavy_libraries(args):
    code, loaded, output = loaded_by(*args)
    assert code == 0, output
    assert loaded == [], f"`windvane {' '.join(args)}` imported {loaded}"
    assert ("Usage: windvane" if args == ["--help"] else "windvane, version") in output


def test_every_commands_help_starts_without_the_heavy_libraries():
    names = commands()
    assert ["import"] in names and ["serve"] in names and ["db", "start"] in names
    for words in names:
        code, loaded, output = loaded_by(*words, "--help")
        assert code == 0, output
        assert loaded == [], f"`windvane {' '.join(words)} --help` imported {loaded}"
