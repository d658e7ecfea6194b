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
    import click

    from windvane.cli import cli

    found: list[list[str]] = []

    def walk(group: click.Group, words: list[str]) -> None:
        ctx = click.Context(group)
        for name in group.list_commands(ctx):
            command = group.get_command(ctx, name)
            assert command is not None, f"`windvane {' '.join([*words, name])}` is listed but not found"
            found.append([*words, name])
            if isinstance(command, click.Group):
                walk(command, [*words, name])

    walk(cli, [])
    return found


@pytest.mark.parametrize("args", [["--help"], ["--version"]], ids=["help", "version"])
def test_the_command_line_starts_without_the_heavy_libraries(args):
    code, loaded, output = loaded_by(*args)
    assert code == 0, output
    assert loaded == [], f"`windvane {' '.join(args)}` imported {loaded}"
    assert ("Usage: windvane" if args == ["--help"] else "windvane, version") in output


def test_version_and_a_command_import_no_other_commands_module():
    """The root group imports a command's module only when the command is named: --version none, serve its own."""
    probe = (
        "import sys, windvane.cli\n"
        "try:\n    windvane.cli.cli.main(sys.argv[1:], prog_name='windvane')\n"
        "except SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith('windvane.cli.')))"
    )
    for args, expected in (
        (["--version"], ["windvane.cli.root"]),
        (["serve", "--help"], ["windvane.cli.root", "windvane.cli.serve"]),
    ):
        done = subprocess.run(
            [sys.executable, "-c", probe, *args], cwd=REPO, capture_output=True, text=True, timeout=60
        )
        assert done.stdout.strip().splitlines()[-1] == repr(expected), done.stdout + done.stderr


def test_every_command_module_is_known_to_the_root_group():
    """A module of windvane/cli that registers commands is in root.COMMAND_MODULES (else its commands vanish)."""
    from windvane.cli.root import COMMAND_MODULES

    modules = {
        path.stem
        for path in (REPO / "windvane" / "cli").glob("*.py")
        if "@cli." in path.read_text(encoding="utf-8") and path.stem != "root"
    }
    assert modules == set(COMMAND_MODULES.values())


def test_every_commands_help_starts_without_the_heavy_libraries():
    names = commands()
    assert ["import"] in names and ["serve"] in names and ["db", "start"] in names
    for words in names:
        code, loaded, output = loaded_by(*words, "--help")
        assert code == 0, output
        assert loaded == [], f"`windvane {' '.join(words)} --help` imported {loaded}"
