"""Time in the arrays API: readable tids, ``at=`` as the command line writes it, history by stream tag,
time-range reads and the per-chunk time ranges behind them, on real SQLite files."""

from __future__ import annotations

import pickle

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
    when = arrays.history(sqlite_url, "web.gz")[-2].time  # the commit of the first append
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
