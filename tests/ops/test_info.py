"""`windvane info` and neostore's value accounting, on real SQLite files and the real MariaDB server.

The store is filled with arrays; what `windvane info` prints (text and
--json, run as the installed console script) is checked against what
arrays reads back and, on SQLite, against the database's own tables.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys

import numpy as np
import pytest

from windvane import arrays, ingest, neostore

WINDVANE = shutil.which("windvane", path=os.path.dirname(sys.executable)) or "windvane"
T0 = 1_700_000_000 * 10**9
COLUMNS = [
    arrays.Column("power", "float32"),
    arrays.Column("axes", "int16", inner=(3,)),
    arrays.Column("message", "str"),
    arrays.Column("raw", "bytes"),
]


def windvane(*args: str, cwd: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([WINDVANE, *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def rows(start: int, n: int) -> dict:
    """``n`` rows of :data:`COLUMNS` from row ``start``: deterministic, so two streams can hold the same."""
    i = np.arange(start, start + n)
    return {
        "time": T0 + i * 10**9,
        "power": (i * 0.5).astype("float32"),
        "axes": np.stack([i, -i, i % 7], axis=1).astype("int16"),
        "message": [f"événement {k}" for k in i],
        "raw": [bytes([k % 256]) * (k % 5) for k in i],
    }


def fill(url: str) -> None:
    """Streams "a" and "copy" with the same 300 rows (appended in two commits), and a quarantine stream."""
    for tag in ("a", "copy"):
        with arrays.create_stream(url, tag, COLUMNS, attrs={"schema": "demo", "kind": "sensor"}, chunk_rows=128) as s:
            s.append(rows(0, 200))
            s.append(rows(200, 100))
    with arrays.create_stream(url, "a", [arrays.Column("reason", "str")], quarantine=True) as q:
        q.append({"time": [T0, T0 + 5], "reason": ["missing power", "bad axes"]})


def sqlite_stored(path: str, prefix: str, *, latest: bool) -> int:
    """Bytes of the distinct values the (latest) revisions of names under ``prefix`` refer to, read with sqlite3."""
    latest_only = "AND o.tid = (SELECT MAX(m.tid) FROM obj m WHERE m.oid = o.oid)" if latest else ""
    with sqlite3.connect(path) as db:
        ((total,),) = db.execute(
            "SELECT COALESCE(SUM(LENGTH(value)), 0) FROM data WHERE id IN (SELECT o.data_id FROM obj o "
            f"JOIN name n ON n.oid = o.oid WHERE substr(n.name, 1, ?) = ? {latest_only})",
            (len(prefix), prefix.encode()),
        ).fetchall()
    return total


def test_info_json_describes_every_stream(store_url):
    fill(store_url)
    result = windvane("info", "--store", store_url, "--json")
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    streams = {(s["tag"], s["quarantine"]): s for s in found["streams"]}
    assert sorted(streams) == [("a", False), ("a", True), ("copy", False)]
    a = streams[("a", False)]
    assert (a["rows"], a["schema"], a["kind"], a["path"]) == (300, "demo", "sensor", "streams/a")
    assert (a["earliest_time"], a["latest_time"]) == (T0, T0 + 299 * 10**9)
    columns = {c["name"]: c for c in a["columns"]}
    assert list(columns) == ["time", "power", "axes", "message", "raw"]
    with arrays.open_stream(store_url, "a") as stream:
        for name, column in columns.items():
            assert column["shape"] == list(stream[name].shape)
            assert column["chunks"] == list(stream[name].chunks)
    assert [columns[n]["dtype"] for n in columns] == ["int64", "float32", "int16", "str", "bytes"]
    assert columns["axes"]["shape"] == [300, 3]
    assert columns["power"]["raw_bytes"] == 300 * 4 and columns["axes"]["raw_bytes"] == 300 * 3 * 2
    expected = rows(0, 300)
    assert columns["message"]["raw_bytes"] == sum(len(m.encode()) for m in expected["message"])
    assert columns["raw"]["raw_bytes"] == sum(map(len, expected["raw"]))
    assert a["raw_bytes"] == sum(c["raw_bytes"] for c in a["columns"])
    # The appends rewrote partial chunks: the history holds more than the latest revisions.
    assert 0 < a["stored_bytes"] < a["history_bytes"]
    q = streams[("a", True)]
    assert (q["rows"], q["path"], q["earliest_time"], q["latest_time"]) == (2, "quarantine/a", T0, T0 + 5)
    # "copy" holds the same values: it takes the same bytes, stored once, and dedup counts them twice.
    copy = streams[("copy", False)]
    assert copy["stored_bytes"] == a["stored_bytes"] and copy["raw_bytes"] == a["raw_bytes"]
    assert found["referenced_bytes"] > found["value_bytes"] and found["dedup_ratio"] == pytest.approx(
        found["referenced_bytes"] / found["value_bytes"]
    )
    history = arrays.history(store_url, "quarantine/a")
    assert found["last_commit"]["tid"] == history[-1].tid.hex()
    assert found["last_commit"]["message"] == history[-1].message
    with neostore.open(store_url) as store:
        counts = store.counts()
        assert (found["transactions"], found["revisions"], found["values"]) == (
            counts["trans"],
            counts["obj"],
            counts["data"],
        )
        assert found["stored_bytes"] == store.value_size()
    if store_url.startswith("sqlite:"):
        path = neostore.parse_url(store_url).path
        assert a["stored_bytes"] == sqlite_stored(path, "streams/a/", latest=True)
        assert a["history_bytes"] == sqlite_stored(path, "streams/a/", latest=False)
        assert columns["message"]["stored_bytes"] == sqlite_stored(path, "streams/a/message/", latest=True)


def test_info_text_names_streams_rows_and_shapes(sqlite_url):
    fill(sqlite_url)
    result = windvane("info", "--store", sqlite_url)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "streams: 2, quarantine streams: 1" in out
    assert "stream a  (streams/a)" in out and "quarantine a  (quarantine/a)" in out
    assert "  rows: 300, 2023-11-14 22:13:20 UTC .. 2023-11-14 22:18:19 UTC" in out
    assert "  rows: 2, 2023-11-14 22:13:20 UTC .. 2023-11-14 22:13:20.000000005 UTC" in out
    axes = next(line.split() for line in out.splitlines() if line.strip().startswith("axes "))
    assert axes[:4] == ["axes", "int16", "300x3", "blosc"]
    assert "dedup ratio:" in out and "last commit:     0x" in out
    # `store info` describes the store the same way, without the streams.
    plain = windvane("store", "info", sqlite_url)
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout.splitlines() == out.split("\n\nstreams:")[0].splitlines()


def test_rows_without_a_time_are_said_to_have_none(tmp_path, sqlite_url):
    # A row whose time cannot be read goes to the quarantine stream without one.
    (tmp_path / "a.csv").write_text("time,speed\n2024-01-01T00:00:00,1.5\nyesterday,2.5\n")
    result = windvane("import", str(tmp_path / "a.csv"), "--store", sqlite_url, "--tag", "t1", "--allow-rejects")
    assert result.returncode == 0 and "a.csv: 1 row, 1 rejected" in result.stdout, result.stderr
    # Rows without a time on both ends of a stream, over several chunks, in arrival order (not time order): the
    # span is the least and greatest time of the rows that have one (it showed the first row's after the last's).
    no_time = ingest.INVALID_TIME
    with arrays.create_stream(sqlite_url, "mixed", [arrays.Column("v", "int8")], chunk_rows=2) as s:
        s.append({"time": [no_time, no_time, no_time, T0 + 5, T0 + 3, no_time, no_time], "v": list(range(7))})
    text = windvane("info", "--store", sqlite_url)
    assert text.returncode == 0, text.stderr
    blocks = {block.splitlines()[0]: block.splitlines()[1] for block in text.stdout.split("\n\n")[2:]}
    assert blocks["quarantine t1  (quarantine/t1)"] == "  rows: 1, no time"
    assert blocks["stream t1  (streams/t1)"] == "  rows: 1, 2024-01-01 00:00:00 UTC .. 2024-01-01 00:00:00 UTC"
    assert blocks["stream mixed  (streams/mixed)"] == (
        "  rows: 7, 2023-11-14 22:13:20.000000003 UTC .. 2023-11-14 22:13:20.000000005 UTC"
    )
    found = json.loads(windvane("info", "--store", sqlite_url, "--json").stdout)
    spans = {(s["tag"], s["quarantine"]): (s["earliest_time"], s["latest_time"]) for s in found["streams"]}
    assert spans == {
        ("t1", True): (None, None),
        ("t1", False): (1704067200 * 10**9,) * 2,
        ("mixed", False): (T0 + 3, T0 + 5),
    }


def test_info_refuses_what_is_not_a_store(tmp_path):
    result = windvane("info", "--store", "postgres://host/db")
    assert result.returncode == 2
    assert "unsupported store URL 'postgres://host/db'" in result.stderr
    result = windvane("info", "--store", "sqlite:///absent.db", cwd=str(tmp_path))
    assert result.returncode == 2
    assert f"no store at sqlite:///absent.db: {tmp_path}/absent.db does not exist" in result.stderr
    assert not (tmp_path / "absent.db").exists()  # info never creates one


def test_value_usage_counts_shared_values_once(store_url):
    random = np.random.default_rng(7)
    a, b = random.bytes(3000), random.bytes(5000)  # incompressible: stored as they are
    big = random.bytes(9 << 20)  # above neostore's 8 MiB: kept in bigdata rows
    with neostore.open(store_url) as store:
        named = store.oids_for([b"x/1", b"x/2", b"y/1"], create=True)
        txn = store.begin()
        txn.write(named[b"x/1"], None, a)
        txn.write(named[b"x/2"], None, a)  # the same value: one data row
        txn.write(named[b"y/1"], None, big)
        txn.vote()
        first = txn.finish()
        txn = store.begin()
        txn.write(named[b"x/1"], first, b)
        txn.vote()
        txn.finish()
        every = store.value_usage()
        assert (every.references, every.values) == (4, 3)
        assert every.referenced_bytes == 2 * len(a) + len(b) + len(big)
        assert every.value_bytes == every.stored_bytes == len(a) + len(b) + len(big)
        assert every.dedup_ratio == pytest.approx(every.referenced_bytes / every.value_bytes)
        under_x = store.value_usage(b"x/")
        assert (under_x.references, under_x.values, under_x.stored_bytes) == (3, 2, len(a) + len(b))
        latest = store.value_usage(b"x/", latest=True)
        assert (latest.references, latest.values, latest.referenced_bytes, latest.stored_bytes) == (
            2,
            2,
            len(a) + len(b),
            len(a) + len(b),
        )
        assert store.value_usage(b"z/") == neostore.store.ValueUsage(0, 0, 0, 0, 0)
        assert store.value_usage(b"z/").dedup_ratio == 1.0
