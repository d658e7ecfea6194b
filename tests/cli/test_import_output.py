"""What `windvane import` prints: a new stream's columns in one line (its schema with --verbose), rows
rejected said as a warning in English, and lines that keep clear of the progress bar on a terminal."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys

from click.testing import CliRunner

from windvane.cli import cli as windvane_cli

T0 = 1_700_000_000_000_000_000
COLUMNS = 40


def run(*args: str):
    return CliRunner().invoke(windvane_cli, ["import", *args], catch_exceptions=False)


def wide_csv(tmp_path) -> str:
    path = tmp_path / "wide.csv"
    header = ",".join(["time", *(f"c{i}" for i in range(COLUMNS))])
    path.write_text(
        header + "\n" + "".join(f"{T0 + r},{','.join(str(r + i) for i in range(COLUMNS))}\n" for r in range(3))
    )
    return str(path)


def test_a_new_stream_is_one_line_and_its_schema_is_printed_with_verbose(sqlite_url, tmp_path):
    path = wide_csv(tmp_path)
    result = run(path, "--store", sqlite_url, "--tag", "wide")
    assert result.exit_code == 0, result.output
    said = [line for line in result.stderr.splitlines() if "is new" in line]
    assert said == [
        f"stream 'wide' is new: {COLUMNS} columns typed from {path} (c0 int64, c1 int64, c2 int64, c3 int64, "
        f"c4 int64, c5 int64, and {COLUMNS - 6} more); --verbose prints the schema, to pin with --schema"
    ]
    assert "[[fields]]" not in result.stderr
    verbose = run(path, "--store", sqlite_url, "--tag", "wide2", "--verbose")
    assert verbose.exit_code == 0, verbose.output
    assert verbose.stderr.count("[[fields]]") == COLUMNS and "save this as wide2.toml" in verbose.stderr


def test_a_partial_import_exits_3_with_a_warning_in_the_singular(sqlite_url, tmp_path):
    path = tmp_path / "mixed.csv"
    path.write_text(f"time,v\n{T0},1\nnoon,2\n")
    result = run(str(path), "--store", sqlite_url, "--tag", "m")
    assert result.exit_code == 3
    assert f"{path}: 1 row, 1 rejected" in result.stdout
    assert "Error" not in result.stderr
    assert result.stderr.splitlines()[-1].startswith(
        "warning: 1 row rejected into the quarantine stream 'quarantine/m'; read it with `windvane export m"
    )


def visible_lines(raw: str) -> list[str]:
    """The lines a terminal shows: each is what follows its last carriage return or erase-line."""
    return [re.split(r"\r|\x1b\[2K", line)[-1] for line in raw.replace("\r\n", "\n").split("\n")]


def test_on_a_terminal_the_new_stream_line_is_not_written_after_the_progress_bar(sqlite_url, tmp_path):
    path = wide_csv(tmp_path)
    leader, follower = pty.openpty()
    done = subprocess.run(
        [sys.executable, "-c", "import windvane; windvane.main()", "import", path, "--store", sqlite_url, "--tag", "w"],
        stdin=subprocess.DEVNULL,
        stdout=follower,
        stderr=follower,
        timeout=120,
    )
    os.close(follower)
    raw = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal is closed and read to its end
            break
        if not chunk:
            break
        raw += chunk
    os.close(leader)
    assert done.returncode == 0, raw
    lines = visible_lines(raw.decode())
    assert any(line.startswith("stream 'w' is new: 40 columns") for line in lines), lines
    assert any(line.startswith(f"{path}: 3 rows, 0 rejected") for line in lines), lines
