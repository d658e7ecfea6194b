"""`windvane import` through the real CLI (click's CliRunner, real files, real SQLite stores).

What a user sees: the exit code when rows are quarantined, compressed files
(gzip, zstd, rotated logs), the same content under another path, and
several WAV recordings placed end to end by ``--start``.
"""

from __future__ import annotations

import bz2
import gzip
import lzma

import numpy as np
import pytest
import zstandard
from click.testing import CliRunner

from windvane import arrays
from windvane.cli import cli as windvane_cli

T0 = 1_700_000_000_000_000_000


def run(*args: str):
    return CliRunner().invoke(windvane_cli, ["import", *args], catch_exceptions=False)


def stream_rows(url: str, tag: str, *, quarantine: bool = False) -> int:
    try:
        return len(arrays.open_stream(url, tag, quarantine=quarantine))
    except arrays.StreamNotFoundError:
        return 0


def csv_text(rows: int, first: int = 0) -> str:
    return "time,id,label\n" + "".join(f"{T0 + i * 1000},{i},row {i}\n" for i in range(first, first + rows))


# -- rows quarantined: a non-zero exit unless --allow-rejects ---------------------------------------------


def test_an_import_whose_every_row_is_rejected_exits_3_and_says_where_they_are(sqlite_url, tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text(f"time,v\n{T0},1\n")
    assert run(str(path), "--store", sqlite_url, "--tag", "t").exit_code == 0
    bad = tmp_path / "worse.csv"
    bad.write_text(f"time,v\n{T0 + 1},x\n{T0 + 2},y\n")
    result = run(str(bad), "--store", sqlite_url, "--tag", "t")
    assert result.exit_code == 3, result.output
    assert f"{bad}: 0 rows, 2 rejected" in result.stdout
    assert (
        "2 rows rejected into the quarantine stream 'quarantine/t'; read them with "
        f"`windvane export t --quarantine --store {sqlite_url} --to rejects.csv --format csv`; "
        "--allow-rejects makes this exit 0"
    ) in result.stderr
    assert stream_rows(sqlite_url, "t") == 1 and stream_rows(sqlite_url, "t", quarantine=True) == 2
    q = arrays.open_stream(sqlite_url, "t", quarantine=True)
    assert q["raw"][:].tolist() == [f"{T0 + 1},x".encode(), f"{T0 + 2},y".encode()]


def test_allow_rejects_exits_0_and_still_says_where_they_are(sqlite_url, tmp_path):
    path = tmp_path / "mixed.csv"
    path.write_text(f"time,v\n{T0},1\nnoon,2\n{T0 + 2},3\n")
    result = run(str(path), "--store", sqlite_url, "--tag", "m", "--allow-rejects")
    assert result.exit_code == 0, result.output
    assert f"{path}: 2 rows, 1 rejected" in result.stdout
    assert "warning: 1 row rejected into the quarantine stream 'quarantine/m'; read it with" in result.stderr
    assert arrays.open_stream(sqlite_url, "m")["v"][:].tolist() == [1, 3]


# -- several WAV recordings and one --start: end to end -----------------------------------------------------


def test_several_wavs_with_one_start_are_placed_end_to_end(sqlite_url, tmp_path):
    from tests.connectors.files.test_import_formats import write_wav

    first, second = tmp_path / "a.wav", tmp_path / "b.wav"
    write_wav(first, np.arange(12, dtype=np.int16).reshape(6, 2), 4)  # 6 frames at 4 Hz: 1.5 s
    write_wav(second, np.arange(100, 108, dtype=np.int16).reshape(4, 2), 4)
    result = run(str(first), str(second), "--store", sqlite_url, "--tag", "vib", "--start", "2025-06-01T08:00:00")
    assert result.exit_code == 0, result.output
    start = int(np.datetime64("2025-06-01T08:00:00", "ns").view(np.int64))
    stream = arrays.open_stream(sqlite_url, "vib")
    assert stream["time"][:].tolist() == [start + i * 250_000_000 for i in range(10)]  # b starts at 1.5 s
    assert stream["samples"][:, 0].tolist() == [0, 2, 4, 6, 8, 10, 100, 102, 104, 106]


# -- the same content under another path -------------------------------------------------------------------


def test_a_copy_under_another_name_is_not_imported_again_unless_again(sqlite_url, tmp_path):
    original, copy = tmp_path / "day.csv", tmp_path / "day-copy.csv"
    original.write_text(csv_text(1000))
    copy.write_bytes(original.read_bytes())
    assert run(str(original), "--store", sqlite_url, "--tag", "d").exit_code == 0
    result = run(str(copy), "--store", sqlite_url, "--tag", "d")
    assert result.exit_code == 0, result.output
    assert result.stdout == (
        f"{copy}: already imported: the same content as {original}; nothing imported (--again imports it again)\n"
    )
    assert stream_rows(sqlite_url, "d") == 1000
    again = run(str(copy), "--store", sqlite_url, "--tag", "d", "--again")
    assert again.exit_code == 0 and f"{copy}: 1,000 rows, 0 rejected" in again.stdout
    assert arrays.open_stream(sqlite_url, "d")["id"][:].tolist() == list(range(1000)) * 2
    same_path = run(str(original), "--store", sqlite_url, "--tag", "d")
    assert same_path.exit_code == 0 and "already imported, nothing new" in same_path.stdout
    other_tag = run(str(copy), "--store", sqlite_url, "--tag", "d2")  # another stream: its own imports
    assert other_tag.exit_code == 0 and stream_rows(sqlite_url, "d2") == 1000


@pytest.mark.crash
def test_a_copy_of_a_file_whose_import_was_killed_resumes_it(sqlite_url, tmp_path):
    from tests.cli.test_import_process import big_csv, paused, stored_ids
    from tests.paused_process import kill

    original, copy = tmp_path / "big.csv", tmp_path / "moved.csv"
    big_csv(original, 60_000)
    process = paused(str(original), "--store", sqlite_url, "--tag", "b", "--commit-mb", "1", before_commit=2)
    kill(process)
    first = len(stored_ids(sqlite_url, "b"))
    assert 0 < first < 60_000
    copy.write_bytes(original.read_bytes())
    original.unlink()
    result = run(str(copy), "--store", sqlite_url, "--tag", "b", "--commit-mb", "1")
    assert result.exit_code == 0, result.output
    assert f"where the import of the same content as {original} stopped" in result.stdout
    assert f"{copy}: {60_000 - first:,} rows" in result.stdout
    assert stored_ids(sqlite_url, "b") == list(range(60_000))  # every row once


def test_a_finished_import_without_its_content_recorded_records_it_when_run_again(sqlite_url, tmp_path):
    from windvane import neostore
    from windvane.connectors.files import ReaderOptions
    from windvane.connectors.files.csv import csv_reader
    from windvane.ingest import imports

    original, copy = tmp_path / "old.csv", tmp_path / "old-copy.csv"
    original.write_text(csv_text(10))
    copy.write_bytes(original.read_bytes())
    with neostore.open(sqlite_url) as store:  # as the engine is driven without content (windvane tail's way)
        imports.import_source(
            store,
            "o",
            csv_reader(str(original), ReaderOptions()),
            source_id=imports.source_id_for(original),
            identity=imports.fingerprint(original),
        )
    result = run(str(original), "--store", sqlite_url, "--tag", "o")
    assert result.exit_code == 0 and "already imported, nothing new" in result.stdout
    result = run(str(copy), "--store", sqlite_url, "--tag", "o")
    assert result.exit_code == 0 and f"the same content as {original}; nothing imported" in result.stdout
    assert stream_rows(sqlite_url, "o") == 10


# -- compressed files --------------------------------------------------------------------------------------


def gz(data: bytes) -> bytes:
    return gzip.compress(data)


def zst(data: bytes) -> bytes:
    return zstandard.ZstdCompressor().compress(data)


def syslog_lines(n: int) -> bytes:
    return b"".join(f"2026-03-01T10:00:{i % 60:02d}+00:00 host{i} app[{i}]: message {i}\n".encode() for i in range(n))


def jsonl_lines(n: int) -> bytes:
    return b"".join(f'{{"time": {T0 + i}, "n": {i}, "msg": "m{i}"}}\n'.encode() for i in range(n))


@pytest.mark.parametrize(
    "name,compress,content,column,values",
    [
        ("day.csv.gz", gz, csv_text(500).encode(), "id", list(range(500))),
        ("day.csv.zst", zst, csv_text(500).encode(), "id", list(range(500))),
        ("frames.csv.zst", lambda d: zst(d[:3001]) + zst(d[3001:]), csv_text(500).encode(), "id", list(range(500))),
        ("day.csv.bz2", bz2.compress, csv_text(500).encode(), "id", list(range(500))),
        ("day.csv.xz", lzma.compress, csv_text(500).encode(), "id", list(range(500))),
        ("events.jsonl.gz", gz, jsonl_lines(300), "n", list(range(300))),
        ("events.jsonl.zst", zst, jsonl_lines(300), "n", list(range(300))),
        ("syslog.1.gz", gz, syslog_lines(200), "message", [f"message {i}" for i in range(200)]),
        (
            "access.log.2.gz",
            gz,
            b"".join(
                f'10.0.0.{i} - - [23/Nov/2026:12:00:{i:02d} +0100] "GET /p/{i} HTTP/1.1" 200 {i} "-" "a"\n'.encode()
                for i in range(50)
            ),
            "path",
            [f"/p/{i}" for i in range(50)],
        ),
    ],
    ids=[
        "csv-gzip",
        "csv-zstd",
        "csv-zstd-two-frames",
        "csv-bzip2",
        "csv-xz",
        "jsonl-gzip",
        "jsonl-zstd",
        "rotated-syslog",
        "rotated-access-log",
    ],
)
def test_compressed_files_are_read_and_their_format_told_through_the_suffix(
    sqlite_url, tmp_path, name, compress, content, column, values
):
    path = tmp_path / name
    path.write_bytes(compress(content))
    result = run(str(path), "--store", sqlite_url, "--tag", "c")
    assert result.exit_code == 0, result.output
    assert f"{path}: {len(values):,} rows, 0 rejected" in result.stdout
    assert arrays.open_stream(sqlite_url, "c")[column][:].tolist() == values


def test_compression_is_told_by_the_magic_bytes_not_the_name(sqlite_url, tmp_path):
    path = tmp_path / "export.csv"  # gzip content under a plain name: not its bytes as column names
    path.write_bytes(gz(csv_text(20).encode()))
    result = run(str(path), "--store", sqlite_url, "--tag", "m")
    assert result.exit_code == 0, result.output
    assert arrays.open_stream(sqlite_url, "m").columns == ["id", "label"]
    assert arrays.open_stream(sqlite_url, "m")["label"][:].tolist() == [f"row {i}" for i in range(20)]


@pytest.mark.parametrize(
    "name,content,message",
    [
        (
            "blob.gz",
            gz(b"time,v\n1,2\n"),
            "blob.gz: compressed file (gzip) holding 'blob'; cannot tell the format from the extension '(none)'",
        ),
        (
            "table.parquet.gz",
            gz(b"PAR1"),
            "table.parquet.gz: compressed file (gzip); the parquet reader seeks in its file, so decompress it first",
        ),
        (
            "cut.csv.gz",
            gz(csv_text(2000).encode())[:3000],
            "cut.csv.gz: compressed file (gzip) cannot be read: Compressed file ended before the end-of-stream marker",
        ),
        (
            "cut.csv.zst",
            zst(csv_text(2000).encode())[:3000],
            "cut.csv.zst: compressed file (zstd) cannot be read: the file ends inside a zstd frame (truncated)",
        ),
    ],
    ids=["unknown", "parquet", "cut-gzip", "cut-zstd"],
)
def test_compressed_files_that_cannot_be_read_say_so(sqlite_url, tmp_path, name, content, message):
    path = tmp_path / name
    path.write_bytes(content)
    result = run(str(path), "--store", sqlite_url, "--tag", "x")
    assert result.exit_code == 2 and message in result.stderr, result.output
    assert "Traceback" not in result.output


@pytest.mark.crash
@pytest.mark.parametrize("compress,suffix", [(gz, ".gz"), (zst, ".zst")])
def test_a_killed_import_of_a_compressed_file_resumes_exactly(sqlite_url, tmp_path, compress, suffix):
    from tests.cli.test_import_process import big_csv, paused, stored_ids
    from tests.paused_process import kill

    plain = tmp_path / "big.csv"
    big_csv(plain, 60_000)  # ~2.6 MB of CSV: several 1 MiB commits
    path = tmp_path / f"big.csv{suffix}"
    path.write_bytes(compress(plain.read_bytes()))
    plain.unlink()
    args = (str(path), "--store", sqlite_url, "--tag", "z", "--commit-mb", "1")
    process = paused(*args, before_commit=2)
    kill(process)
    first = len(stored_ids(sqlite_url, "z"))
    assert 0 < first < 60_000
    result = run(*args)
    assert result.exit_code == 0, result.output
    assert f"{path}: {60_000 - first:,} rows, 0 rejected" in result.stdout and "resumed from position" in result.stdout
    assert stored_ids(sqlite_url, "z") == list(range(60_000))  # every row once, in order
