"""Time in the arrays API: readable tids, ``at=`` as the command line writes it, history by stream tag,
time-range reads and the per-chunk time ranges behind them, on real SQLite files."""

from __future__ import annotations

import pickle
from datetime import UTC, datetime

import numpy as np
import pytest

from windvane import arrays, neostore
from windvane.arrays import Column

T0 = 1_700_000_000 * 10**9
S = 10**9


def test_tids_print_as_the_command_line_writes_them_and_are_read_back(sqlite_url):
    with arrays.create_stream(sqlite_url, "web.gz", [Column("v", "int64")]) as s:
        s.append({"time": [T0], "v": [1]})
    with neostore.open(sqlite_url, read_only=True) as store:
        tid = store.last_transaction()
        text = f"0x{bytes(tid).hex()}"
        # Where a tid is taken, its text is too.
        assert store.transaction_info(text).tid == tid and str(store.transaction_info(tid).tid) == text
        assert [r.oid for r in store.records(text)] == [r.oid for r in store.records(tid)]
    # What the tour printed was b'\x04\rj...'; the command line writes 0x040d6ae3f1dab299.
    assert str(tid) == text and repr(tid) == f"Tid('{text}')"
    assert f"{tid}" == text
    assert isinstance(tid, bytes) and tid == bytes(tid) and len(tid) == 8  # still the bytes it was
    assert neostore.Tid(text) == tid and neostore.Tid(text.upper().replace("0X", "0x")) == tid
    assert neostore.as_tid(bytes(tid)) == tid and neostore.as_tid(bytes(tid).hex()) == tid
    assert pickle.loads(pickle.dumps(tid)) == tid and repr(eval(repr(tid), {"Tid": neostore.Tid})) == repr(tid)
    assert str(arrays.history(sqlite_url, "web.gz")[-1].tid) == text
    with arrays.open_stream(sqlite_url, "web.gz") as s:
        assert str(s.tid) == text
    with pytest.raises(neostore.TidError, match="16 hex digits"):
        neostore.Tid("0x12")
    with pytest.raises(neostore.TidError, match="8 bytes, not 2"):
        neostore.Tid(b"\x01\x02")


def test_at_takes_iso_text_and_hex_tids(sqlite_url):
    with arrays.create_stream(sqlite_url, "web.gz", [Column("v", "int64")]) as s:
        s.append({"time": [T0], "v": [1]})
        first = s.tid
        s.append({"time": [T0 + S], "v": [2]})
    commits = arrays.history(sqlite_url, "web.gz")
    when = commits[-2].time + (commits[-1].time - commits[-2].time) / 2  # between the two appends' commits
    # ISO text raised SnapshotError; every command-line option takes it.
    iso = when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    with arrays.open_stream(sqlite_url, "web.gz", at=iso) as old:
        assert len(old) == 1
    with arrays.open_stream(sqlite_url, "web.gz", at="2200-01-01T00:00:00+02:00") as now:
        assert len(now) == 2
    with arrays.open_stream(sqlite_url, "web.gz", at=str(first)) as old:
        assert len(old) == 1 and old.tid == first
    with arrays.open_stream(sqlite_url, "web.gz", at=np.datetime64(when.replace(tzinfo=None), "us")) as old:
        assert len(old) == 1
    with pytest.raises(arrays.StreamNotFoundError):
        arrays.open_stream(sqlite_url, "web.gz", at="2001-01-01")
    with pytest.raises(arrays.SnapshotError, match="'yesterday' is not a time"):
        arrays.open_stream(sqlite_url, "web.gz", at="yesterday")
    with pytest.raises(arrays.SnapshotError, match="8 bytes, not 1"):
        arrays.open_stream(sqlite_url, "web.gz", at=b"\x01")
    # A wrong type is a TypeError, not a SnapshotError.
    with pytest.raises(TypeError, match="not list"):
        arrays.open_stream(sqlite_url, "web.gz", at=[first])


def test_history_takes_a_stream_tag(sqlite_url):
    with arrays.create_stream(sqlite_url, "web.gz", [Column("v", "int64")]) as s:
        s.append({"time": [T0], "v": [1]}, message="one row")
    by_tag = arrays.history(sqlite_url, "web.gz")
    assert [c.message for c in by_tag] == ["create stream web.gz", "one row"]
    assert by_tag == arrays.history(sqlite_url, "streams/web.gz")
    with pytest.raises(arrays.ArrayNotFoundError, match="nor a stream"):
        arrays.history(sqlite_url, "web.gz", quarantine=True)
    with pytest.raises(arrays.ArrayNotFoundError):
        arrays.history(sqlite_url, "absent")


# Arrival order, not time order: chunk 0 spans 0..9 s, chunk 1 holds a row without a time, chunk 2 is partial.
UNSORTED = np.array([5, 0, 2, 9, 1, 3, None, 7, 4, 8], dtype=object)


def unsorted_times() -> np.ndarray:
    return np.array([arrays.times.NO_TIME if t is None else T0 + t * S for t in UNSORTED], dtype=np.int64)


def expected_ranges(times: np.ndarray, rows: int) -> list:
    out = []
    for first in range(0, len(times), rows):
        chunk = times[first : first + rows]
        chunk = chunk[chunk != arrays.times.NO_TIME]
        out.append((int(chunk.min()), int(chunk.max())) if len(chunk) else None)
    return out


def test_time_ranges_are_kept_per_chunk_and_read_without_reading_chunks(sqlite_url):
    times = unsorted_times()
    with arrays.create_stream(sqlite_url, "a", [Column("v", "int64")], chunk_rows=4) as s:
        s.append({"time": times[:3], "v": np.arange(3)})
        s.append({"time": times[3:], "v": np.arange(3, 10)})
    with neostore.open(sqlite_url) as store:  # the ingest path: a kept writer and its row log
        writer = arrays.StreamWriter(store, "a")
        for first in range(10, 30, 5):
            with arrays.transaction(store) as tx:
                part = times[first % 10 : first % 10 + 5]
                part = np.where(part == arrays.times.NO_TIME, part, part + first * S)
                writer.append(tx, {"time": part, "v": np.arange(5)})
    with arrays.open_stream(sqlite_url, "a") as s:
        ranges = s.time_ranges()
        # The full chunks' ranges come from their records: only the partial last chunk is read.
        assert s["time"].chunks_loaded == 1
        whole = s["time"][:]
        assert len(whole) == 30 and ranges == expected_ranges(whole, 4)
        assert s.time_span() == (int(whole[whole != arrays.times.NO_TIME].min()), int(whole.max()))
        assert s.time_span() != (int(whole[0]), int(whole[-1]))  # not the first and last rows
    # Records are no zarr keys: listings (and so zarr and xarray) leave them out.
    assert not [k for k in arrays.array_names(sqlite_url) if "__times" in k]


def test_chunks_written_without_a_record_are_read_and_still_right(sqlite_url):
    times = unsorted_times()
    with arrays.create_stream(sqlite_url, "old", [Column("v", "int64")], chunk_rows=4) as s:
        s.append({"time": times[:8], "v": np.arange(8)})
    # A store written before records were kept: none at all.
    with arrays.transaction(sqlite_url) as tx:
        tx.delete_prefix("streams/old/__times/")
    # A chunk rewritten by another writer than the stream's: its record is stale, not believed.
    with arrays.open(sqlite_url, "streams/old/time") as time_array:
        time_array[1] = T0 - 100 * S
    with arrays.open_stream(sqlite_url, "old") as s:
        whole = s["time"][:]
        assert whole[1] == T0 - 100 * S
        assert s.time_ranges() == expected_ranges(whole, 4)
        loaded = s["time"].chunks_loaded
        assert s.time_ranges() == expected_ranges(whole, 4)  # computed once per view
        assert s["time"].chunks_loaded == loaded
        s_span = s.time_span()
    assert s_span == (T0 - 100 * S, T0 + 9 * S)
    with arrays.open_stream(sqlite_url, "old") as s:  # appends from here on keep records again
        s.append({"time": times[8:] + 100 * S, "v": [8, 9]})
        assert s.time_ranges() == expected_ranges(s["time"][:], 4)


def test_time_range_reads_pick_the_chunks_that_overlap_and_filter_rows(sqlite_url):
    times = unsorted_times()
    with arrays.create_stream(sqlite_url, "r", [Column("v", "int64")], chunk_rows=4) as s:
        s.append({"time": times, "v": np.arange(10)})
        s.append({"time": T0 + 100 * S + np.arange(8) * S, "v": np.arange(10, 18)})  # chunks 3, 4: later
    start, stop = T0 + 2 * S, T0 + 5 * S
    with arrays.open_stream(sqlite_url, "r") as s:
        loaded = s["v"].chunks_loaded
        frame = s.to_pandas(start=datetime.fromtimestamp(start / S, UTC), stop="2023-11-14T22:13:25Z")
        # Rows 2 (2 s), 5 (3 s), 8 (4 s), in stream order; chunks 3 and 4 were not read.
        assert frame["v"].tolist() == [2, 5, 8]
        assert [t.value for t in frame.index] == [start, T0 + 3 * S, T0 + 4 * S]
        assert s["v"].chunks_loaded - loaded == 3
        table = s.to_arrow(start=np.datetime64(start, "ns"), stop=np.datetime64(stop, "ns"))
        assert table.column("v").to_pylist() == [2, 5, 8]
        dataset = s.to_xarray(start="2023-11-14T22:15:00Z")
        assert dataset["v"].values.tolist() == list(range(10, 18))
        assert s.to_pandas(stop="2023-11-14T22:13:21Z")["v"].tolist() == [1]  # the row without a time: never
        assert len(s.to_pandas(start="2030-01-01")) == 0 and s.to_pandas(start="2030-01-01").columns.tolist() == ["v"]
        assert s.to_pandas(2, 4)["v"].tolist() == [2, 3]  # row numbers, as before
        with pytest.raises(TypeError, match="both row numbers or both times"):
            s.to_pandas(0, "2024-01-01")
        with pytest.raises(arrays.TimeError, match="'soon' is not a time"):
            s.to_pandas(start="soon")
