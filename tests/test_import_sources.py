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
