"""`windvane import` through the real CLI (click's CliRunner, real files, real SQLite stores).

What a user sees: the exit code when rows are quarantined, compressed files
(gzip, zstd, rotated logs), the same content under another path, and
several WAV recordings placed end to end by ``--start``.
"""

from __future__ import annotations

import gzip

import numpy as np
import pytest
import zstandard
from click.testing import CliRunner

import arrays
import windvane

T0 = 1_700_000_000_000_000_000


def run(*args: str):
    return CliRunner().invoke(windvane.cli, ["import", *args], catch_exceptions=False)


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
    assert ("2 rows rejected into the quarantine stream 'quarantine/t'; read them with "
            f"`windvane export t --quarantine --store {sqlite_url} --to rejects.csv --format csv`; "
            "--allow-rejects makes this exit 0") in result.stderr
    assert stream_rows(sqlite_url, "t") == 1 and stream_rows(sqlite_url, "t", quarantine=True) == 2
    q = arrays.open_stream(sqlite_url, "t", quarantine=True)
    assert q["raw"][:].tolist() == [f"{T0 + 1},x".encode(), f"{T0 + 2},y".encode()]


def test_allow_rejects_exits_0_and_still_says_where_they_are(sqlite_url, tmp_path):
    path = tmp_path / "mixed.csv"
    path.write_text(f"time,v\n{T0},1\nnoon,2\n{T0 + 2},3\n")
    result = run(str(path), "--store", sqlite_url, "--tag", "m", "--allow-rejects")
    assert result.exit_code == 0, result.output
    assert f"{path}: 2 rows, 1 rejected" in result.stdout
    assert "1 rows rejected into the quarantine stream 'quarantine/m'" in result.stderr
    assert arrays.open_stream(sqlite_url, "m")["v"][:].tolist() == [1, 3]


# -- several WAV recordings and one --start: end to end -----------------------------------------------------


def test_several_wavs_with_one_start_are_placed_end_to_end(sqlite_url, tmp_path):
    from tests.test_import_formats import write_wav

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
    assert result.stdout == (f"{copy}: already imported: the same content as {original}; nothing imported "
                             "(--again imports it again)\n")
    assert stream_rows(sqlite_url, "d") == 1000
    again = run(str(copy), "--store", sqlite_url, "--tag", "d", "--again")
    assert again.exit_code == 0 and f"{copy}: 1,000 rows, 0 rejected" in again.stdout
    assert arrays.open_stream(sqlite_url, "d")["id"][:].tolist() == list(range(1000)) * 2
    same_path = run(str(original), "--store", sqlite_url, "--tag", "d")
    assert same_path.exit_code == 0 and "already imported, nothing new" in same_path.stdout
    other_tag = run(str(copy), "--store", sqlite_url, "--tag", "d2")  # another stream: its own imports
    assert other_tag.exit_code == 0 and stream_rows(sqlite_url, "d2") == 1000


def test_a_copy_of_a_file_whose_import_was_killed_resumes_it(sqlite_url, tmp_path):
    from tests.test_imports import big_csv, paused, stored_ids

    original, copy = tmp_path / "big.csv", tmp_path / "moved.csv"
    big_csv(original, 60_000)
    process = paused(str(original), "--store", sqlite_url, "--tag", "b", "--commit-mb", "1", before_commit=2)
    process.kill()
    process.wait(30)
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
    import neostore
    from connectors.files import ReaderOptions
    from connectors.files.csv import csv_reader
    from ingest import imports

    original, copy = tmp_path / "old.csv", tmp_path / "old-copy.csv"
    original.write_text(csv_text(10))
    copy.write_bytes(original.read_bytes())
    with neostore.open(sqlite_url) as store:  # as the engine is driven without content (windvane tail's way)
        imports.import_source(store, "o", csv_reader(str(original), ReaderOptions()),
                              source_id=imports.source_id_for(original), identity=imports.fingerprint(original))
    result = run(str(original), "--store", sqlite_url, "--tag", "o")
    assert result.exit_code == 0 and "already imported, nothing new" in result.stdout
    result = run(str(copy), "--store", sqlite_url, "--tag", "o")
    assert result.exit_code == 0 and f"the same content as {original}; nothing imported" in result.stdout
    assert stream_rows(sqlite_url, "o") == 10
