"""The code blocks of the README and the other Markdown documents run as written.

Each document's blocks run in order, in a fresh directory holding what the
README's Quick start leaves behind (its windvane commands, `windvane demo`,
run once per session: ``var/demo.db``), as this checkout's code:

* every ```python block runs there as a script of its own (a reader may
  copy any one of them) and must exit 0;
* every windvane command of a shell block runs there and must exit 0,
  unless one of `EXEMPTIONS` names it.  An exempt command is still checked
  against the CLI: its subcommands and every option it names must exist.

Blocks of other languages (TOML, diagrams) are not programs; commands of
shell blocks that are not windvane (apt-get, pip, pytest) set up a machine.
New blocks are picked up as they are written: nothing here lists them.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import click
import pytest

from tests.docs.doc_blocks import PYTHON, SHELL, Block, Command, code_blocks, markdown_files, windvane_commands
from windvane.cli import cli as windvane_cli

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
QUICK_START = "Quick start"

# This checkout's code, wherever the blocks run.
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}


# The README's log files and the files that stand in for them when its commands run here.
LOG_STAND_INS = {
    "/var/log/nginx/access.log": REPO / "tests" / "fixtures" / "logs" / "readme" / "access.log",
    "/var/log/nginx/error.log": REPO / "parsers" / "nginx_error.log",
    "/var/log/app/app.log": REPO / "parsers" / "python_logging.log",
}


@dataclass(frozen=True)
class Exemption:
    """A narrow rule for windvane commands of the docs that do not run here, and why."""

    name: str
    reason: str
    applies: Callable[[Block, Command], bool]


def _is_synopsis(command: Command) -> bool:
    return any(
        "[" in arg or "]" in arg or "|" in arg or arg.isupper() or arg.partition("=")[2].isupper()
        for arg in command.args
    )


EXEMPTIONS = (
    Exemption(
        "quick start",
        "the `quick_start` fixture runs the Quick start's windvane commands once for all documents; "
        "the rest of those lines installs the machine",
        lambda block, command: block.doc == README and block.section == QUICK_START,
    ),
    Exemption(
        "runs until stopped",
        "`serve` and `console` serve until stopped, `tail` follows a file until stopped, `mount` until unmounted "
        "(tests/cli/test_serve.py, tests/console/test_console_command.py, tests/connectors/tail/test_tail.py and "
        "tests/arrays/test_mount_tree.py run them)",
        lambda block, command: command.args[:1] in (("serve",), ("console",), ("tail",), ("mount",)),
    ),
    Exemption(
        "private MariaDB server",
        "`db start` runs mariadbd with the shipped 1 GiB buffer pool and redo log, and `db status`/`db stop` "
        "speak of that server (tests/ops/test_mariadb_server.py::test_cli_start_status_stop runs all three)",
        lambda block, command: command.args[:1] == ("db",),
    ),
    Exemption(
        "the reader's log files",
        "it reads /var/log/... files of the reader's machine; test_log_commands_run_on_stand_ins runs it with a "
        "stand-in in place of each (tests/fixtures/logs/readme/README.md)",
        lambda block, command: any(arg in LOG_STAND_INS for arg in command.args),
    ),
    Exemption(
        "synopsis",
        "shows the syntax (an optional [part], a choice a|b, an UPPERCASE placeholder), not a command",
        lambda block, command: _is_synopsis(command),
    ),
)


def exemption(block: Block, command: Command) -> Exemption | None:
    return next((rule for rule in EXEMPTIONS if rule.applies(block, command)), None)


def documents() -> list[Path]:
    """The Markdown documents with a block this module runs."""
    return [
        doc
        for doc in markdown_files(REPO)
        if any(block.lang in PYTHON or (block.lang in SHELL and windvane_commands(block)) for block in code_blocks(doc))
    ]


def run_windvane(command: Command, cwd: Path) -> subprocess.CompletedProcess[str]:
    # File patterns are expanded as the shell would, in the directory the command runs in.
    args = [
        arg
        for pattern in command.args
        for arg in (sorted(glob.glob(pattern, root_dir=cwd)) or [pattern] if glob.has_magic(pattern) else [pattern])
    ]
    result = subprocess.run(
        [sys.executable, "-c", "import windvane; windvane.main()", *args],
        cwd=cwd,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, f"line {command.line}: {command.text}\n{result.stdout}{result.stderr}"
    return result


def check_against_cli(command: Command) -> None:
    """The subcommands ``command`` names exist, and so does every option it gives them."""
    cmd: click.Command = windvane_cli
    ctx = click.Context(cmd)
    args = [arg.strip("[]") for arg in command.args]
    while isinstance(cmd, click.Group) and args and not args[0].startswith("-"):
        sub = cmd.get_command(ctx, args[0])
        assert sub is not None, f"line {command.line}: no command {args[0]!r} in {command.text}"
        cmd, args = sub, args[1:]
    known = {opt for param in cmd.params for opt in (*param.opts, *param.secondary_opts)} | {"--help", "-h"}
    named = {arg.partition("=")[0] for arg in args if arg.startswith("-") and arg != "-"}
    assert named <= known, f"line {command.line}: {sorted(named - known)} unknown to `{cmd.name}` in {command.text}"


@pytest.fixture(scope="session")
def quick_start(tmp_path_factory) -> Path:
    """A directory in which the windvane commands of the README's Quick start ran (`windvane demo`)."""
    cwd = tmp_path_factory.mktemp("quick-start")
    commands = [
        command
        for block in code_blocks(README)
        if block.section == QUICK_START and block.lang in SHELL
        for command in windvane_commands(block)
    ]
    assert commands, "the README's Quick start runs no windvane command"
    for command in commands:
        run_windvane(command, cwd)
    return cwd


def test_the_readme_has_blocks_to_run():
    blocks = code_blocks(README)
    assert any(block.lang in PYTHON for block in blocks)
    quick = [c.args for b in blocks if b.section == QUICK_START for c in windvane_commands(b)]
    assert ("demo",) in quick
    assert README in documents()


def test_the_docs_pages_blocks_run_too():
    """Every page under docs/ with a python block or a windvane command is one of the documents run below."""
    pages = [
        page
        for page in sorted((REPO / "docs").glob("*.md"))
        if any(
            block.lang in PYTHON or (block.lang in SHELL and windvane_commands(block)) for block in code_blocks(page)
        )
    ]
    assert {"neostore.md", "arrays.md", "serve.md", "exports.md", "operations.md"} <= {page.name for page in pages}
    assert set(pages) <= set(documents())


def test_blocks_and_commands_are_found_as_a_reader_sees_them(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text(
        "# Title\n\n## Setup\n\n```sh\napt-get install -y x && .venv/bin/windvane demo  # the demo\n```\n\n"
        "- a list item:\n\n  ```python\n  for i in range(2):\n      print(i)\n  ```\n\n"
        "```bash\nwindvane export S --store sqlite:///a.db \\\n    --to out --format csv; windvane info --json\n```\n",
        encoding="utf-8",
    )
    setup, listed, chained = code_blocks(doc)
    assert (setup.lang, setup.line, setup.section) == ("sh", 5, "Setup")
    assert [c.args for c in windvane_commands(setup)] == [("demo",)]
    assert (listed.lang, listed.text) == ("python", "for i in range(2):\n    print(i)\n")
    assert [(c.line, c.args) for c in windvane_commands(chained)] == [
        (17, ("export", "S", "--store", "sqlite:///a.db", "--to", "out", "--format", "csv")),
        (17, ("info", "--json")),
    ]


@pytest.mark.parametrize("doc", documents(), ids=lambda doc: str(doc.relative_to(REPO)))
def test_code_blocks_run_as_written(doc, quick_start, tmp_path):
    shutil.copytree(quick_start, tmp_path, dirs_exist_ok=True)
    for block in code_blocks(doc):
        if block.lang in PYTHON:
            result = subprocess.run(
                [sys.executable, "-c", block.text],
                cwd=tmp_path,
                env=ENV,
                capture_output=True,
                text=True,
                timeout=300,
            )
            assert result.returncode == 0, f"{block.where(REPO)}:\n{block.text}\n{result.stderr}"
        elif block.lang in SHELL:
            for command in windvane_commands(block):
                if exemption(block, command) is None:
                    run_windvane(command, tmp_path)
                else:
                    check_against_cli(command)


def test_log_commands_run_on_stand_ins(quick_start, tmp_path):
    """The README's commands on /var/log files run with stand-ins; each imports every line, none rejected."""
    commands = [
        command
        for block in code_blocks(README)
        if block.lang in SHELL
        for command in windvane_commands(block)
        if any(arg in LOG_STAND_INS for arg in command.args)
    ]
    assert {arg for command in commands for arg in command.args} >= set(LOG_STAND_INS)
    shutil.copytree(quick_start, tmp_path, dirs_exist_ok=True)
    for command in commands:
        args = tuple(str(LOG_STAND_INS.get(arg, arg)) for arg in command.args)
        stand_in = next(Path(arg) for arg in args if Path(arg) in LOG_STAND_INS.values())
        result = run_windvane(Command(command.line, args, command.text), tmp_path)
        count = len(stand_in.read_text().splitlines())
        assert f"{count:,} rows, 0 rejected" in result.stdout + result.stderr, (command.text, result.stdout)


def test_the_tour_prints_the_last_commit_as_the_command_line_writes_tids(quick_start, tmp_path):
    # It printed b'\x04\rj...' where `windvane` writes 0x040d6ae3f1dab299.
    tour = next(b for b in code_blocks(README) if b.section == "A tour" and b.lang in PYTHON)
    shutil.copytree(quick_start, tmp_path, dirs_exist_ok=True)
    result = subprocess.run(
        [sys.executable, "-c", tour.text], cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    last = result.stdout.splitlines()[-1]
    assert re.fullmatch(r"0x[0-9a-f]{16}", last), result.stdout
