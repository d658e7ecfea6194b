"""`windvane import`'s times as a real process: ``--timezone`` for times written without a zone, and the
year RFC 3164 syslog lines get from the file's modification time, not from today."""

from __future__ import annotations

import datetime as dt
import os

import pyarrow as pa
import pyarrow.parquet as pq

from tests.cli.test_import_process import run_import
from windvane import arrays

NS = 10**9


def ns(text: str) -> int:
    return int(dt.datetime.fromisoformat(text).timestamp()) * NS


def times(url: str, tag: str) -> list[int]:
    with arrays.open_stream(url, tag) as stream:
        return stream["time"][:].tolist()


def test_timezone_applies_to_csv_and_jsonl_times_without_a_zone(sqlite_url, tmp_path):
    csv = tmp_path / "paris.csv"
    csv.write_text("time,v\n2024-07-01T12:00:00,1\n2024-07-01T12:00:00Z,2\n2024-01-15 08:30:00,3\n")
    out = run_import(str(csv), "--store", sqlite_url, "--tag", "paris", "--timezone", "Europe/Paris")
    assert out.returncode == 0, out.stderr
    assert times(sqlite_url, "paris") == [
        ns("2024-07-01T10:00:00+00:00"),
        ns("2024-07-01T12:00:00+00:00"),
        ns("2024-01-15T07:30:00+00:00"),
    ]
    jsonl = tmp_path / "ny.jsonl"
    jsonl.write_text('{"time": "2024-07-01T12:00:00", "v": 1}\n{"time": "2024-07-01T12:00:00+00:00", "v": 2}\n')
    out = run_import(str(jsonl), "--store", sqlite_url, "--tag", "ny", "--timezone", "America/New_York")
    assert out.returncode == 0, out.stderr
    assert times(sqlite_url, "ny") == [ns("2024-07-01T16:00:00+00:00"), ns("2024-07-01T12:00:00+00:00")]
    parquet = tmp_path / "naive.parquet"
    pq.write_table(
        pa.table({"time": pa.array([ns("2024-07-01T12:00:00+00:00")], pa.timestamp("ns")), "v": [1]}), parquet
    )
    out = run_import(str(parquet), "--store", sqlite_url, "--tag", "naive", "--timezone", "Asia/Tokyo")
    assert out.returncode == 0, out.stderr
    assert times(sqlite_url, "naive") == [ns("2024-07-01T03:00:00+00:00")]


def test_time_format_reads_table_time_columns(sqlite_url, tmp_path):
    rows = "time,v\n1/1/2022 0:05,1\n7/1/2022 13:10,2\n13/45/2022 0:00,3\n"
    csv = tmp_path / "us.csv"
    csv.write_text(rows)
    out = run_import(str(csv), "--store", sqlite_url, "--tag", "plain")
    assert out.returncode == 3 and "'1/1/2022 0:05' is not a time" in out.stdout  # what the user saw
    layout = ("--time-format", "%m/%d/%Y %H:%M", "--timezone", "Europe/Paris", "--allow-rejects")
    want = [ns("2022-01-01T00:05:00+01:00"), ns("2022-07-01T13:10:00+02:00")]
    tsv = tmp_path / "us.tsv"
    tsv.write_text(rows.replace(",", "\t"))
    text = tmp_path / "us.parquet"
    pq.write_table(pa.table({"time": ["1/1/2022 0:05", "7/1/2022 13:10", "13/45/2022 0:00"], "v": [1, 2, 3]}), text)
    for tag, path, extra in (
        ("csv", csv, ()),
        ("as_csv", csv, ("--format", "csv")),
        ("tsv", tsv, ()),
        ("pq", text, ()),
    ):
        out = run_import(str(path), "--store", sqlite_url, "--tag", tag, *layout, *extra)
        assert out.returncode == 0, out.stderr
        assert "2 rows, 1 rejected" in out.stdout and "'13/45/2022 0:00' is not a time" in out.stdout, out.stdout
        assert times(sqlite_url, tag) == want
    with arrays.open_stream(sqlite_url, "csv", quarantine=True) as quarantine:
        assert quarantine["raw"][:].tolist() == [b"13/45/2022 0:00,3"]
        assert quarantine["reason"][:].tolist() == [
            "column 'time': '13/45/2022 0:00' is not a time (--time-format '%m/%d/%Y %H:%M')"
        ]
    zoned = tmp_path / "zoned.csv"
    zoned.write_text("time,v\n01.02.2022 10:00 +0300,1\n")
    out = run_import(str(zoned), "--store", sqlite_url, "--tag", "zoned", "--time-format", "%d.%m.%Y %H:%M %z")
    assert out.returncode == 0, out.stderr
    assert times(sqlite_url, "zoned") == [ns("2022-02-01T07:00:00+00:00")]


def test_a_time_format_without_a_known_directive_exits_2(sqlite_url, tmp_path):
    csv = tmp_path / "x.csv"
    csv.write_text("time,v\n1/1/2022 0:05,1\n")
    for layout, message in (("%Q/%m", "unknown directive %Q"), ("m/d/Y", "no directive")):
        out = run_import(str(csv), "--store", sqlite_url, "--tag", "x", "--time-format", layout)
        assert out.returncode == 2 and f"--time-format {layout!r}: {message}" in out.stderr, out.stderr


def test_an_unknown_timezone_exits_2_naming_it(sqlite_url, tmp_path):
    csv = tmp_path / "x.csv"
    csv.write_text("time,v\n2024-07-01T12:00:00,1\n")
    out = run_import(str(csv), "--store", sqlite_url, "--tag", "x", "--timezone", "Mars/Olympus")
    assert out.returncode == 2 and "unknown time zone 'Mars/Olympus'" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr


def test_rfc3164_years_come_from_the_files_modification_time(sqlite_url, tmp_path):
    log = tmp_path / "messages.1"
    log.write_text("<13>Dec 24 18:00:00 host app: the year before\n<13>Mar 10 06:00:00 host app: that spring\n")
    written = dt.datetime(2019, 3, 15, 12, 0, tzinfo=dt.UTC).timestamp()
    os.utime(log, (written, written))
    out = run_import(str(log), "--store", sqlite_url, "--tag", "old", "--format", "syslog3164", "--timezone", "UTC")
    assert out.returncode == 0, out.stderr
    assert times(sqlite_url, "old") == [ns("2018-12-24T18:00:00+00:00"), ns("2019-03-10T06:00:00+00:00")]
    assert (
        f"{log}: RFC 3164 times carry no year: taken in 2019, the year of the file's modification time "
        "(2019-03-15); lines dated after that, in 2018"
    ) in out.stdout
