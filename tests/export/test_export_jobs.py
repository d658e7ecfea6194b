"""Incremental export jobs: each row exported exactly once, across rounds of ingestion and across kill -9.

The kill tests run `windvane export --job` as a real process stopped at a
checkpoint (tests/paused_process.py): ``export.before_rename`` with its part
written under a temporary name, ``export.before_done`` with the part in
place but not yet recorded as done. The test kills it there with SIGKILL,
ingests more rows, runs the job again and reads every part file back.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import pytest

from tests import paused_process
from tests.export.test_export import (
    MIXED_COLUMNS,
    assert_same,
    dims_of,
    make_mixed,
    mixed_rows,
    read_back,
    stored,
)
from tests.serve_process import REPO
from windvane import arrays, neostore
from windvane import export as exporting
from windvane.export import export, jobs, read_job

pytestmark = pytest.mark.filterwarnings("ignore::zarr.errors.UnstableSpecificationWarning")

TAG = "plant.mixed"
PART = re.compile(r"part-(\d{12})-(\d{12})\.")


def append(url: str, start: int, n: int) -> None:
    with arrays.open_stream(url, TAG) as stream:
        assert len(stream) == start
        stream.append(mixed_rows(start, n))


def parts(directory) -> list[tuple[int, int, str]]:
    """The part files in ``directory`` as (first row, stop row, path), in row order; nothing else may be there."""
    names = sorted(os.listdir(directory))
    assert all(PART.match(n) for n in names), names  # no temporaries left behind
    return [(int(m[1]), int(m[2]), str(directory / n)) for n in names for m in [PART.match(n)]]


def assert_exported_exactly_once(url: str, directory, fmt: str) -> None:
    """The part files hold every row of the stream once: contiguous ranges from 0, each file its range's rows."""
    expected = stored(url, TAG)
    dims = dims_of(url, TAG)
    at = 0
    for first, stop, path in parts(directory):
        assert first == at, f"rows {at}..{first} are in no part, or in two"
        want = {name: values[first:stop] for name, values in expected.items()}
        for got in read_back(fmt, path, want, dims):
            assert_same(got, want)
        at = stop
    assert at == len(expected["time"])


@pytest.mark.parametrize("fmt", ["parquet", "csv", "zarr", "netcdf", "arrow"])
def test_three_rounds_of_ingest_then_export_export_each_row_once_sqlite(sqlite_url, tmp_path, fmt):
    three_rounds(sqlite_url, tmp_path, fmt)


def test_three_rounds_of_ingest_then_export_export_each_row_once_mariadb(mariadb_url, tmp_path):
    three_rounds(mariadb_url, tmp_path, "parquet")


def three_rounds(url: str, tmp_path, fmt: str) -> None:
    make_mixed(url, TAG, rows=100)
    out = tmp_path / "parts"
    total = 100
    for number, more in enumerate((0, 250, 77), start=1):
        if more:
            append(url, total, more)
            total += more
        result = export(url, TAG, out, fmt, job="nightly", block_bytes=1)
        assert (result.first_row, result.stop_row, result.rows) == (total - (more or 100), total, more or 100)
        assert result.files == [
            str(out / exporting.part_name(exporting.format_named(fmt), total - (more or 100), total))
        ]
        assert_exported_exactly_once(url, out, fmt)
        with neostore.open(url) as store:
            job = read_job(store, "nightly")
        assert (job.exported, job.pending, job.runs, job.rows, job.files) == (total, None, number, total, number)
    again = export(url, TAG, out, fmt, job="nightly")  # nothing new: nothing written, nothing recorded
    assert (again.rows, again.files, again.first_row, again.stop_row) == (0, [], total, total)
    assert len(parts(out)) == 3


def paused(url: str, out, stage: str) -> subprocess.Popen:
    """`windvane export --job` stopped at its checkpoint ``export.<stage>``."""
    return paused_process.paused(
        f"export.{stage}", "export", TAG, "--store", url, "--to", str(out), "--format", "parquet", "--job", "hourly"
    )


def run_job(url: str, out) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "import windvane; windvane.main()",
            "export",
            TAG,
            "--store",
            url,
            "--to",
            str(out),
            "--format",
            "parquet",
            "--job",
            "hourly",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.crash
@pytest.mark.parametrize(
    "stage,backend", [("before_done", "sqlite"), ("before_done", "mariadb"), ("before_rename", "sqlite")]
)
def test_kill_9_between_writing_and_recording_then_rerun_exports_each_row_once(request, tmp_path, stage, backend):
    url = request.getfixturevalue(f"{backend}_url")
    make_mixed(url, TAG, rows=120)
    out = tmp_path / "parts"
    first = run_job(url, out)  # a finished run first: the killed one is the job's second
    assert first.returncode == 0, first.stderr
    append(url, 120, 200)
    process = paused(url, out, stage)
    paused_process.kill(process)
    name = exporting.part_name(exporting.format_named("parquet"), 120, 320)
    with neostore.open(url) as store:
        job = read_job(store, "hourly")
    assert job.exported == 120 and job.pending == jobs.Pending(120, 320, name)  # the intent, not the completion
    left = sorted(os.listdir(out))
    if stage == "before_done":
        assert left == [exporting.part_name(exporting.format_named("parquet"), 0, 120), name]
    else:  # the part was never renamed into place: only its temporary is there
        assert name not in left and any(n.startswith(f".{name}.tmp-") for n in left)
    append(url, 320, 55)  # more rows arrive before the rerun
    done = run_job(url, out)
    assert done.returncode == 0, done.stderr
    assert "after redoing rows 120 to 320 an interrupted run left" in done.stdout
    assert "job hourly: rows 320 to 375" in done.stdout
    assert_exported_exactly_once(url, out, "parquet")
    assert [p[:2] for p in parts(out)] == [(0, 120), (120, 320), (320, 375)]
    with neostore.open(url) as store:
        job = read_job(store, "hourly")
    assert (job.exported, job.pending, job.runs, job.rows, job.files) == (375, None, 3, 375, 3)


def test_a_job_runs_with_its_stream_format_and_directory_only(sqlite_url, tmp_path):
    make_mixed(sqlite_url, TAG, rows=50)
    make_mixed(sqlite_url, "plant.other", rows=5)
    export(sqlite_url, TAG, tmp_path / "a", "parquet", job="j")
    for args, what in (
        ((TAG, tmp_path / "a", "csv"), "format 'parquet' (this run: 'csv')"),
        (("plant.other", tmp_path / "a", "parquet"), "stream 'plant.mixed' (this run: 'plant.other')"),
        ((TAG, tmp_path / "b", "parquet"), "target"),
        ((TAG, tmp_path / "a", "parquet", {"start": "2024-01-01"}), "start None"),
    ):
        with pytest.raises(exporting.JobMismatch, match=re.escape(what)):
            export(sqlite_url, *args[:3], job="j", **(args[3] if len(args) > 3 else {}))
    assert not (tmp_path / "b").exists()


def test_a_job_with_a_time_range_advances_past_rows_outside_it(sqlite_url, tmp_path):
    make_mixed(sqlite_url, TAG, rows=100)
    expected = stored(sqlite_url, TAG)
    start = int(np.sort(expected["time"])[40])
    seconds = f"{start // 10**9}.{start % 10**9:09d}"  # epoch seconds, exact to the ns
    first = export(sqlite_url, TAG, tmp_path, "arrow", job="late", start=seconds)
    assert first.rows == np.count_nonzero(expected["time"] >= start)
    append(sqlite_url, 100, 10)  # rows 100..110: mixed_rows puts them at T0 + ~(37 i % 101) s, some before start
    second = export(sqlite_url, TAG, tmp_path, "arrow", job="late", start=seconds)
    times = stored(sqlite_url, TAG)["time"][100:]
    assert second.rows == np.count_nonzero(times >= start)
    with neostore.open(sqlite_url) as store:
        assert read_job(store, "late").exported == 110


def test_a_job_whose_stream_shrank_is_refused(sqlite_url, tmp_path):
    make_mixed(sqlite_url, TAG, rows=100)
    export(sqlite_url, TAG, tmp_path, "parquet", job="j")
    with arrays.transaction(sqlite_url, message="replace the stream") as tx:  # the stream is replaced by a shorter one
        tx.delete_many([e.key for e in tx.list(f"{arrays.stream_path(TAG)}/")])
    stream = arrays.create_stream(sqlite_url, TAG, MIXED_COLUMNS)
    stream.append(mixed_rows(0, 30))
    stream.close()
    with pytest.raises(exporting.StreamShrank, match="has 30 rows but job 'j' already exported its rows up to 100"):
        export(sqlite_url, TAG, tmp_path, "parquet", job="j")


def test_two_runs_of_one_job_at_once_cannot_both_record(sqlite_url, tmp_path):
    make_mixed(sqlite_url, TAG, rows=10)
    export(sqlite_url, TAG, tmp_path, "parquet", job="j")
    with neostore.open(sqlite_url) as store:
        seen = read_job(store, "j")  # what a second run read before the first one recorded its next part
        mine = jobs.Pending(10, 20, "part-000000000010-000000000020.parquet")
        jobs.begin(store, seen, mine)
        with pytest.raises(exporting.JobBusy, match="run one export of a job at a time"):
            jobs.begin(store, seen, jobs.Pending(10, 25, "part-000000000010-000000000025.parquet"))
        jobs.finish(store, "j", mine, rows=10, files=1)
        with pytest.raises(exporting.JobBusy):
            jobs.finish(store, "j", mine, rows=10, files=1)  # recorded once only
        assert read_job(store, "j").exported == 20
