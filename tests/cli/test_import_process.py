"""`windvane import` as a real process: resume after kill -9 and Ctrl-C, finished files, changed files, CLI errors.

The kill tests stop the importer at its N-th checkpoint ``import.before_commit``
(tests/paused_process.py), with that commit's rows already written into the
open transaction. The test kills it there, so the kill always lands
mid-file with uncommitted rows in flight.
"""

from __future__ import annotations

import signal
import subprocess
import sys

import numpy as np
import pytest

from tests import paused_process
from tests.serve_process import REPO
from windvane import arrays, neostore
from windvane.ingest import imports

T0 = 1_700_000_000_000_000_000


def run_import(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    command = [sys.executable, "-c", "import windvane; windvane.main()", "import", *args]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=timeout)


def paused(*args: str, before_commit: int) -> subprocess.Popen:
    """A `windvane import` stopped before commit ``before_commit`` (its rows written, not committed)."""
    return paused_process.paused("import.before_commit", "import", *args, times=before_commit)


def big_csv(path, rows: int) -> None:
    ids = np.arange(rows)
    text = "\n".join(f"{T0 + i * 1000},{i},{i * 0.5},row {i}" for i in ids)
    path.write_text("time,id,half,label\n" + text + "\n")


def stored_ids(url: str, tag: str) -> list[int]:
    return arrays.open_stream(url, tag)["id"][:].tolist()


@pytest.mark.crash
def test_kill_9_mid_import_then_resume_stores_every_row_once(store_url, tmp_path):
    path = tmp_path / "big.csv"
    rows = 120_000  # ~4.6 MB: about 10 parts of 512 KiB, 5 commits of 1 MiB
    big_csv(path, rows)
    args = (str(path), "--store", store_url, "--tag", "big", "--commit-mb", "1")
    process = paused(*args, before_commit=3)
    paused_process.kill(process)  # SIGKILL: no cleanup, commit 3 written but never committed
    with neostore.open(store_url) as store:
        position = imports.read_position(store, "big", imports.source_id_for(path))
    committed = stored_ids(store_url, "big")
    assert 0 < len(committed) < rows and committed == list(range(len(committed)))
    assert position.rows == len(committed) and 0 < position.value < path.stat().st_size
    done = run_import(*args)
    assert done.returncode == 0, done.stderr
    assert f"resumed from position {position.value}" in done.stdout
    assert stored_ids(store_url, "big") == list(range(rows))  # every row, once, in order
    again = run_import(*args)
    assert again.returncode == 0 and "already imported, nothing new" in again.stdout
    assert len(arrays.open_stream(store_url, "big")) == rows


def test_ctrl_c_aborts_the_commit_in_flight_and_resumes(sqlite_url, tmp_path):
    path = tmp_path / "big.csv"
    big_csv(path, 60_000)
    args = (str(path), "--store", sqlite_url, "--tag", "int", "--commit-mb", "1")
    process = paused(*args, before_commit=2)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130 and b"run the same command again to resume" in err
    first = stored_ids(sqlite_url, "int")
    assert 0 < len(first) < 60_000
    assert run_import(*args).returncode == 0
    assert stored_ids(sqlite_url, "int") == list(range(60_000))


def test_appended_rows_are_imported_on_the_next_run(sqlite_url, tmp_path):
    path = tmp_path / "log.csv"
    path.write_text(f"time,id,half,label\n{T0},0,0.0,a\n")
    args = (str(path), "--store", sqlite_url, "--tag", "grow")
    assert run_import(*args).returncode == 0
    with path.open("a") as f:
        f.write(f"{T0 + 1},1,0.5,b\n")
    out = run_import(*args)
    assert out.returncode == 0 and "1 row, " in out.stdout
    assert stored_ids(sqlite_url, "grow") == [0, 1]


def test_a_changed_file_is_not_resumed_unless_restarted(sqlite_url, tmp_path):
    path = tmp_path / "data.csv"
    path.write_text(f"time,id,half,label\n{T0},0,0.0,a\n")
    args = (str(path), "--store", sqlite_url, "--tag", "changed")
    assert run_import(*args).returncode == 0
    path.write_text(f"time,id,half,label\n{T0 + 5},5,2.5,new\n")
    refused = run_import(*args)
    assert refused.returncode == 2 and "has changed since" in refused.stderr and "--restart" in refused.stderr
    assert stored_ids(sqlite_url, "changed") == [0]
    assert run_import(*args, "--restart").returncode == 0
    assert stored_ids(sqlite_url, "changed") == [0, 5]


def test_several_files_and_formats_into_one_stream(sqlite_url, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    first = tmp_path / "a.csv"
    first.write_text(f"time,id,half,label\n{T0},0,0.0,a\n")
    second = tmp_path / "b.parquet"
    pq.write_table(pa.table({"time": [T0 + 1], "id": [1], "half": [0.5], "label": ["b"]}), second)
    out = run_import(str(first), str(second), "--store", sqlite_url, "--tag", "mixed")
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("1 row, 0 rejected") == 2
    assert stored_ids(sqlite_url, "mixed") == [0, 1]


def test_commit_part_keeps_any_position_value(sqlite_url):
    """What `windvane tail` relies on: a dict position, committed with the rows, read back."""
    import pyarrow as pa

    from windvane.connectors.files import Part

    schema = imports.infer_schema("tail.x", Part(pa.table({"time": [T0], "msg": ["a"]}), 0, 0))
    position = {"inode": 1234, "offset": 99, "fingerprint": "abc"}
    with neostore.open(sqlite_url) as store:
        writers = imports.streams.StreamWriters(store)
        part = Part(
            pa.table({"time": [T0, T0 + 1], "msg": ["a", "ü"]}),
            99,
            99,
            rejected=[(T0 + 2, b"garbage line", "not JSON")],
        )
        done = imports.commit_part(writers, "tail.x", schema, part, "src", position, identity={"dev": 1})
        assert (done.rows, done.rejected) == (2, 1) and done.tid is not None
        got = imports.read_position(store, "tail.x", "src")
    assert (got.value, got.identity, got.rows, got.rejected) == (position, {"dev": 1}, 2, 1)
    assert arrays.open_stream(sqlite_url, "tail.x")["msg"][:].tolist() == ["a", "ü"]
    q = arrays.open_stream(sqlite_url, "tail.x", quarantine=True)
    assert q["raw"][:].tolist() == [b"garbage line"] and q["reason"][:].tolist() == ["not JSON"]


@pytest.mark.parametrize(
    "make,message",
    [
        (lambda d: [str(d / "missing.csv")], "does not exist"),
        (lambda d: [str(d / "x.unknown")], "cannot tell the format from the extension '.unknown'"),
        (lambda d: [str(d / "x.csv"), "--format", "yaml"], "unknown format 'yaml'"),
        (lambda d: [str(d / "notime.csv")], "no time column"),
        (lambda d: [str(d / "x.csv"), "--schema", str(d / "bad.toml")], "kind 'nope' is not one of"),
        (lambda d: [str(d / "x.csv"), "--start", "noon"], "--start 'noon' is not an ISO 8601 time"),
    ],
)
def test_cli_errors_exit_2_with_a_clear_message(sqlite_url, tmp_path, make, message):
    (tmp_path / "x.unknown").write_text("?")
    (tmp_path / "x.csv").write_text(f"time,v\n{T0},1\n")
    (tmp_path / "notime.csv").write_text("a,b\n1,2\n")
    (tmp_path / "bad.toml").write_text('kind = "nope"\ntags = ["x"]\n')
    out = run_import(*make(tmp_path), "--store", sqlite_url, "--tag", "t")
    assert out.returncode == 2 and message in out.stderr, out.stderr


def test_cli_schema_mismatch_with_the_stream_exits_2(sqlite_url, tmp_path):
    path = tmp_path / "x.csv"
    path.write_text(f"time,v\n{T0},1.5\n")
    assert run_import(str(path), "--store", sqlite_url, "--tag", "typed").returncode == 0
    schema = tmp_path / "s.toml"
    schema.write_text('kind = "log"\ntags = ["typed"]\n[[fields]]\nname = "v"\ndtype = "str"\n')
    out = run_import(str(path), "--store", sqlite_url, "--tag", "typed", "--schema", str(schema))
    assert out.returncode == 2 and "other types for column(s) v (float64 in the stream, str here)" in out.stderr
