"""`windvane export` on the command line: the summary line, the progress bar, and exit code 2 with a clear message
for every failure a user can fix.

Run in-process with click's CliRunner (the real command, real stores and
files); the kill tests of tests/export/test_export_jobs.py run it as a process.
"""

from __future__ import annotations

import os
import re

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from tests.export.test_export import MIXED_COLUMNS, make_mixed, mixed_rows
from windvane import arrays
from windvane.cli import cli as windvane_cli

TAG = "plant.mixed"


def run(*args: str):
    return CliRunner().invoke(windvane_cli, ["export", *args], catch_exceptions=False)


@pytest.fixture
def store(sqlite_url) -> str:
    make_mixed(sqlite_url, TAG, rows=100)
    make_mixed(sqlite_url, "plant.other", rows=3)
    return sqlite_url


def test_the_summary_line_and_the_progress_bar(store, tmp_path):
    path = tmp_path / "out.parquet"
    result = run(TAG, "--store", store, "--to", str(path), "--format", "parquet")
    assert result.exit_code == 0, result.output
    assert re.fullmatch(
        rf"exported 100 rows of {TAG} \(0\.0 MB raw, 0\.0 MB written\) in \d+\.\d s \(\d+\.\d MB/s\) "
        rf"to 1 file: {re.escape(str(path))}\n",
        result.stdout,
    ), result.stdout
    assert f"exporting {TAG}" in result.stderr  # click's bar, on stderr
    assert pq.read_table(path).num_rows == 100


def test_a_job_says_which_rows_it_covered_and_when_there_is_nothing_new(store, tmp_path):
    args = (TAG, "--store", store, "--to", str(tmp_path / "parts"), "--format", "csv", "--job", "daily")
    first = run(*args)
    assert first.exit_code == 0 and "to 1 file:" in first.stdout and "job daily: rows 0 to 100" in first.stdout
    again = run(*args)
    assert again.exit_code == 0 and again.stdout == f"job daily: nothing new in stream {TAG} since row 100\n"
    assert sorted(os.listdir(tmp_path / "parts")) == ["part-000000000000-000000000100.csv"]


def test_time_range_and_quarantine_options(store, tmp_path):
    from windvane.ingest.streams import QUARANTINE_COLUMNS

    path = tmp_path / "range.arrow"
    result = run(
        TAG,
        "--store",
        store,
        "--to",
        str(path),
        "--format",
        "arrow",
        "--start",
        "2030-01-01T00:00:00+01:00",
        "--stop",
        "1900000000",
    )
    assert result.exit_code == 0, result.output  # an empty range is no error: a file of the columns, no rows
    assert "exported 0 rows" in result.stdout
    with arrays.create_stream(store, TAG, list(QUARANTINE_COLUMNS), quarantine=True) as q:
        q.append({"time": [1], "reason": ["bad"], "raw": [b"\x00"], "source": ["http"]})
    result = run(TAG, "--store", store, "--to", str(tmp_path / "q.csv"), "--format", "csv", "--quarantine")
    assert result.exit_code == 0 and "exported 1 rows" in result.stdout
    assert (tmp_path / "q.csv").read_text().splitlines()[
        1
    ] == '"1970-01-01T00:00:00.000000001+00:00","bad","base64:AA==","http"'


def shrink(url: str) -> None:
    with arrays.transaction(url) as tx:
        tx.delete_many([e.key for e in tx.list(f"{arrays.stream_path(TAG)}/")])
    with arrays.create_stream(url, TAG, MIXED_COLUMNS) as stream:
        stream.append(mixed_rows(0, 10))


CASES = {
    "unknown stream": (
        lambda s, d: ["nope", "--store", s, "--to", f"{d}/x.csv", "--format", "csv"],
        "no stream 'nope' in this store; streams: plant.mixed, plant.other; quarantine streams: none",
    ),
    "unknown store": (
        lambda s, d: [TAG, "--store", f"sqlite:///{d}/missing.db", "--to", f"{d}/x.csv", "--format", "csv"],
        "missing.db does not exist",
    ),
    "unreachable store": (
        lambda s, d: [
            TAG,
            "--store",
            f"mariadb://root@/db?unix_socket={d}/no.sock",
            "--to",
            f"{d}/x.csv",
            "--format",
            "csv",
        ],
        "cannot open the store at mariadb://",
    ),
    "malformed store URL": (
        lambda s, d: [TAG, "--store", "postgres://x/y", "--to", f"{d}/x.csv", "--format", "csv"],
        "cannot open the store at postgres://x/y",
    ),
    "bad TIME": (
        lambda s, d: [TAG, "--store", s, "--to", f"{d}/x.csv", "--format", "csv", "--start", "noon"],
        "--start 'noon' is not a time: give ISO 8601",
    ),
    "start >= stop": (
        lambda s, d: [
            TAG,
            "--store",
            s,
            "--to",
            f"{d}/x.csv",
            "--format",
            "csv",
            "--start",
            "2024-05-02",
            "--stop",
            "2024-05-01T23:00:00+00:00",
        ],
        "--start (2024-05-02T00:00:00.000000000Z) must be before --stop",
    ),
    "unknown format": (
        lambda s, d: [TAG, "--store", s, "--to", f"{d}/x.xls", "--format", "xls"],
        "unknown export format 'xls'; choose one of parquet, arrow, csv, zarr, netcdf",
    ),
    "existing target": (
        lambda s, d: [TAG, "--store", s, "--to", f"{d}/exists.csv", "--format", "csv"],
        "exists.csv exists; pass --overwrite to replace it",
    ),
    "missing directory": (
        lambda s, d: [TAG, "--store", s, "--to", f"{d}/no/such/x.csv", "--format", "csv"],
        "no/such does not exist",
    ),
    "directory is a file": (
        lambda s, d: [TAG, "--store", s, "--to", f"{d}/exists.csv/x.csv", "--format", "csv"],
        "exists.csv is not a directory",
    ),
    "file where a file format needs one": (
        lambda s, d: [TAG, "--store", s, "--to", f"{d}", "--format", "csv", "--overwrite"],
        "is a directory (this format writes a file)",
    ),
    "job into a file": (
        lambda s, d: [TAG, "--store", s, "--to", f"{d}/exists.csv", "--format", "csv", "--job", "j"],
        "it is a file; a --job writes its part files into a directory",
    ),
    "job mismatch": (
        lambda s, d: [TAG, "--store", s, "--to", f"{d}/parts", "--format", "zarr", "--job", "ran"],
        "job 'ran' was run with format 'parquet' (this run: 'zarr')",
    ),
    "stream shrank": (
        lambda s, d: shrink(s) or [TAG, "--store", s, "--to", f"{d}/parts", "--format", "parquet", "--job", "ran"],
        "has 10 rows but job 'ran' already exported its rows up to 100",
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_every_failure_exits_2_naming_the_problem(store, tmp_path, case):
    (tmp_path / "exists.csv").write_text("x\n")
    assert (
        run(TAG, "--store", store, "--to", str(tmp_path / "parts"), "--format", "parquet", "--job", "ran").exit_code
        == 0
    )
    make_args, message = CASES[case]
    result = run(*make_args(store, tmp_path))
    assert result.exit_code == 2, result.output
    assert message in result.stderr, result.stderr
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".")]  # nothing half-written left


def test_at_exports_the_stream_as_it_was(store, tmp_path):
    # `windvane export` had no --at: a past state could only be read from Python.
    before = arrays.history(store, TAG)[-1].tid
    with arrays.open_stream(store, TAG) as stream:
        stream.append(mixed_rows(100, 20))
    commits = arrays.history(store, TAG)
    between = commits[-2].time + (commits[-1].time - commits[-2].time) / 2  # after the first rows, before the rest
    for at in (str(before), between.isoformat(), f"{between.timestamp():.6f}"):
        path = tmp_path / f"at-{len(os.listdir(tmp_path))}.parquet"
        result = run(TAG, "--store", store, "--to", str(path), "--format", "parquet", "--at", at)
        assert result.exit_code == 0, result.output
        assert pq.read_table(path).num_rows == 100, at
    now = tmp_path / "now.parquet"
    assert run(TAG, "--store", store, "--to", str(now), "--format", "parquet").exit_code == 0
    assert pq.read_table(now).num_rows == 120
    refused = {
        "yesterday": "--at 'yesterday' is not a time",
        "0x12": "--at '0x12' is not a time",
        "2001-01-01": f"no stream '{TAG}' in this store at 2001-01-01",
    }
    for at, message in refused.items():
        result = CliRunner().invoke(
            windvane_cli,
            ["export", TAG, "--store", store, "--to", str(tmp_path / "x.csv"), "--format", "csv", "--at", at],
        )
        assert result.exit_code == 2 and message in result.output, (at, result.output)
    result = CliRunner().invoke(
        windvane_cli,
        [
            "export",
            TAG,
            "--store",
            store,
            "--to",
            str(tmp_path / "j"),
            "--format",
            "csv",
            "--job",
            "j",
            "--at",
            str(before),
        ],
    )
    assert result.exit_code == 2 and "use one or the other" in result.output
