"""Records' values stored as sent, over HTTP, Forward and ``windvane import``: JSON numbers' times to the
nanosecond, EventTimes whose nanoseconds no clock gives quarantined, and NaN or Infinity never kept as
``extra`` text that is not JSON.

Real server (``windvane serve``), real sockets, a real SQLite store read back.
"""

from __future__ import annotations

import json
import math
import struct

import msgpack
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from tests.cli.test_serve import column, forward_send, post
from tests.cli.test_serve_http_records import server
from tests.forward_sender import chunk_id
from windvane.cli import cli as windvane_cli

SCHEMA = """
kind = "sensor"
tags = ["app.**"]
extra = "keep"
[[fields]]
name = "seq"
dtype = "int64"
fill = -1
[[fields]]
name = "value"
dtype = "float64"
"""
SECOND = 1709294400  # 2024-03-01T12:00:00Z
NS = 10**9
NOT_JSON = "is not a JSON number: JSON has no NaN or Infinity (send null, or the value as a string)"


_ = server  # a fixture: the server of test_serve_http_records, on the schemas below


@pytest.fixture
def schemas(tmp_path):
    (tmp_path / "schemas").mkdir()
    (tmp_path / "schemas" / "app.toml").write_text(SCHEMA)
    return tmp_path / "schemas"


def _event_time(seconds: int, nanos: int) -> msgpack.ExtType:
    return msgpack.ExtType(0, struct.pack(">II", seconds, nanos))


def _packed(tag: str, entries: list[bytes], cid: str) -> bytes:
    return msgpack.packb([tag, b"".join(entries), {"size": len(entries), "chunk": cid}], use_bin_type=True)


def _extras(url: str, tag: str) -> list[str]:
    return [str(x) for x in column(url, tag, "extra")]


# -- times of JSON numbers ------------------------------------------------------------------------


def test_json_number_times_are_exact_to_the_nanosecond_as_the_docs_say(server, sqlite_url):
    port = server.http_port
    one = b'{"seq": 1, "time": 1709294400.123456789}'
    assert post(port, "/app/t", one, {"Content-Type": "application/json"})[0] == 200
    two = b'[{"seq": 2, "time": 1709294400.123456001}, {"seq": 3, "time": 1709294400.1000000001e0}]'
    assert post(port, "/app/t", two, {"Content-Type": "application/json"})[0] == 200
    ndjson = b'{"seq": 4, "time": 1709294400.999999999}\n{"seq": 5, "time": 1709294400.123456}\n'
    assert post(port, "/app/t", ndjson)[0] == 200
    stream = b'{"seq": 6, "time": 1709294400.000000001}{"seq": 7, "time": 1709294400.5}'
    assert post(port, "/app/t", stream, {"Content-Type": "application/json"})[0] == 200
    assert post(port, "/app/t?time=1709294400.123456789", b'{"seq": 8}\n')[0] == 200
    base = SECOND * NS
    assert column(sqlite_url, "app.t", "seq") == [1, 2, 3, 4, 5, 6, 7, 8]
    assert column(sqlite_url, "app.t", "time") == [
        base + 123456789,
        base + 123456001,
        base + 100000000,
        base + 999999999,
        base + 123456000,
        base + 1,
        base + 500000000,
        base + 123456789,
    ]


# -- EventTime nanoseconds ------------------------------------------------------------------------------


@pytest.mark.parametrize("count", [3, 12], ids=["few", "many"])  # a chunk's times read one by one, and at once
def test_an_event_time_with_nanoseconds_past_a_second_is_quarantined_and_the_chunk_acked(server, sqlite_url, count):
    tag = f"app.et{count}"
    entries = [
        msgpack.packb([_event_time(SECOND, 0xFFFFFFFF if i == 1 else i), {"seq": i}], use_bin_type=True)
        for i in range(count)
    ]
    cid = chunk_id().decode()
    assert forward_send(server.forward_port, _packed(tag, entries, cid), expect_ack=True) == cid.encode()
    assert column(sqlite_url, tag, "seq") == [i for i in range(count) if i != 1]
    assert column(sqlite_url, tag, "time") == [SECOND * NS + i for i in range(count) if i != 1]
    assert column(sqlite_url, tag, "reason", quarantine=True) == [
        f"the event time is an EventTime of {SECOND} s and 4294967295 ns, which is not a time: "
        "its nanoseconds must be 0 to 999999999"
    ]
    assert column(sqlite_url, tag, "raw", quarantine=True) == [entries[1]]


def test_an_event_time_with_nanoseconds_past_a_second_over_http_msgpack_is_quarantined(server, sqlite_url):
    """Fluent Bit's ``Format msgpack`` events ``[[EventTime, metadata], record]``, and wendelin's ``[time, record]``."""
    events = [
        msgpack.packb([[_event_time(SECOND, 0xFFFFFFFF), {}], {"seq": 1}]),
        msgpack.packb([[_event_time(SECOND, 2), {}], {"seq": 2}]),
    ]
    status, _, reply = post(server.http_port, "/app/fb", b"".join(events), {"Content-Type": "application/msgpack"})
    reason = (
        f"the event time is an EventTime of {SECOND} s and 4294967295 ns, which is not a time: "
        "its nanoseconds must be 0 to 999999999"
    )
    assert (status, reply) == (200, {"accepted": 1, "quarantined": 1, "reasons": [reason]})
    assert column(sqlite_url, "app.fb", "seq") == [2]
    assert column(sqlite_url, "app.fb", "time") == [SECOND * NS + 2]
    assert column(sqlite_url, "app.fb", "raw", quarantine=True) == events[:1]
    items = [msgpack.packb([_event_time(SECOND, 10**9), {"seq": 3}]), msgpack.packb([SECOND, {"seq": 4}])]
    status, _, _ = post(
        server.http_port,
        "/x/ingest?reference=app.wv",
        b"".join(items),
        {"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert status == 204
    assert column(sqlite_url, "app.wv", "seq") == [4]
    assert column(sqlite_url, "app.wv", "raw", quarantine=True) == items[:1]
    assert column(sqlite_url, "app.wv", "reason", quarantine=True) == [reason.replace("4294967295", "1000000000")]
    # No schema fixes a time: replay leaves the record where it is rather than store it at its arrival.
    replay = _windvane("quarantine", "replay", "app.fb", "--store", sqlite_url)
    assert replay.exit_code == 0 and "replayed 0 records" in replay.output, replay.output
    assert column(sqlite_url, "app.fb", "seq") == [2]
    assert "1 stays in quarantine" in replay.output and "its time is not a time, which no schema fixes" in replay.output
    assert column(sqlite_url, "app.fb", "raw", quarantine=True) == events[:1]


# -- NaN and Infinity --------------------------------------------------------------------------------


def test_http_json_text_with_nan_or_infinity_is_not_json(server, sqlite_url):
    lines = [b'{"seq": 1, "x": Infinity}', b'{"seq": 2, "value": NaN}', b'{"seq": 3, "x": "NaN", "value": 1.5}']
    status, _, reply = post(server.http_port, "/app/nan", b"\n".join(lines) + b"\n")
    assert status == 200, reply
    reasons = [
        f"line 1 of the NDJSON body is not valid JSON: column 17: Infinity {NOT_JSON}",
        f"line 2 of the NDJSON body is not valid JSON: column 21: NaN {NOT_JSON}",
    ]
    assert reply == {"accepted": 1, "quarantined": 2, "reasons": reasons}
    assert column(sqlite_url, "app.nan", "seq") == [3]
    assert _extras(sqlite_url, "app.nan") == ['{"x":"NaN"}']
    assert column(sqlite_url, "app.nan", "raw", quarantine=True) == lines[:2]
    status, _, reply = post(
        server.http_port, "/app/nan", b'[{"seq": 4, "x": -Infinity}]', {"Content-Type": "application/json"}
    )
    assert status == 400
    assert reply == {
        "error": "bad_json",
        "message": f"the body is not valid JSON: line 1, column 18: -Infinity {NOT_JSON}",
    }


def _undeclared(name: str, found: str) -> str:
    return (
        f"undeclared field {name!r} holds {found}, which JSON (the extra column) cannot hold: "
        "declare it as a float32 or float64 field to store it"
    )


def test_msgpack_nan_is_a_float_value_but_never_extra_text_over_http(server, sqlite_url):
    records = [
        {"seq": 1, "value": math.nan},
        {"seq": 2, "value": -math.inf, "x": 1.0},
        {"seq": 3, "x": math.inf},
        {"seq": 4, "x": {"y": [1.0, math.nan]}},
    ]
    body = b"".join(msgpack.packb(r) for r in records)
    status, _, reply = post(server.http_port, "/app/mp", body, {"Content-Type": "application/msgpack"})
    assert status == 200, reply
    reasons = [
        _undeclared("x", "Infinity"),
        "undeclared field 'x' holds NaN inside it, which JSON (the extra column) cannot hold: "
        "send null or text in its place",
    ]
    assert reply == {"accepted": 2, "quarantined": 2, "reasons": reasons}
    assert column(sqlite_url, "app.mp", "seq") == [1, 2]
    value = column(sqlite_url, "app.mp", "value")
    assert math.isnan(value[0]) and value[1] == -math.inf
    assert _extras(sqlite_url, "app.mp") == ["", '{"x":1.0}']
    assert column(sqlite_url, "app.mp", "raw", quarantine=True) == [msgpack.packb(r) for r in records[2:]]


def test_forward_nan_is_a_float_value_but_never_extra_text(server, sqlite_url):
    records = [{"seq": 1, "value": math.inf}, {"seq": 2, "x": math.nan}, {"seq": 3, "x": -1e400}]
    entries = [msgpack.packb([_event_time(SECOND, i), r], use_bin_type=True) for i, r in enumerate(records)]
    cid = chunk_id().decode()
    assert forward_send(server.forward_port, _packed("app.fw", entries, cid), expect_ack=True) == cid.encode()
    assert column(sqlite_url, "app.fw", "seq") == [1]
    assert column(sqlite_url, "app.fw", "value") == [math.inf]
    assert column(sqlite_url, "app.fw", "reason", quarantine=True) == [
        _undeclared("x", "NaN"),
        _undeclared("x", "-Infinity"),
    ]
    assert column(sqlite_url, "app.fw", "raw", quarantine=True) == entries[1:]


def test_replay_reads_json_as_import_does_exact_times_and_no_nan(sqlite_url, tmp_path, schemas):
    strict = tmp_path / "strict.toml"
    strict.write_text(SCHEMA.replace('extra = "keep"', 'extra = "reject"').replace('name = "value"', 'name = "v"'))
    path = tmp_path / "values.jsonl"
    lines = ['{"time": 1709294400.123456789, "seq": 1, "value": 2.5}', '{"time": 1709294400, "seq": 2, "value": NaN}']
    path.write_text("\n".join(lines) + "\n")
    imported = _windvane("import", str(path), "--store", sqlite_url, "--tag", "app.rp", "--schema", str(strict))
    assert imported.exit_code == 3, imported.output  # 3: rows quarantined
    fixed = _windvane("quarantine", "replay", "app.rp", "--store", sqlite_url, "--schema", str(schemas / "app.toml"))
    assert fixed.exit_code == 0 and "replayed 1 record of" in fixed.output, fixed.output
    assert column(sqlite_url, "app.rp", "seq") == [1]
    assert column(sqlite_url, "app.rp", "value") == [2.5]
    assert column(sqlite_url, "app.rp", "time") == [SECOND * NS + 123456789]
    assert column(sqlite_url, "app.rp", "reason", quarantine=True) == [
        f"line 2: not JSON: byte 40: NaN {NOT_JSON}; replay cannot read this record: its JSON holds NaN, which is not JSON"
    ]


def test_parquet_rows_with_nan_are_quarantined_as_bytes_replay_reads(sqlite_url, tmp_path, schemas):
    """A row of a typed file keeps NaN and infinities in quarantine (as msgpack: JSON has no text for them)."""
    strict = tmp_path / "strict.toml"
    strict.write_text(SCHEMA.replace('extra = "keep"', 'extra = "reject"').replace('name = "value"', 'name = "v"'))
    path = tmp_path / "values.parquet"
    times = pa.array([SECOND * NS, SECOND * NS + 1], pa.timestamp("ns", "UTC"))
    pq.write_table(pa.table({"time": times, "seq": [1, 2], "value": [math.nan, 0.5]}), path)
    imported = _windvane("import", str(path), "--store", sqlite_url, "--tag", "app.pq", "--schema", str(strict))
    assert imported.exit_code == 3, imported.output  # 3: rows quarantined (value is undeclared)
    raws = column(sqlite_url, "app.pq", "raw", quarantine=True)
    assert math.isnan(msgpack.unpackb(raws[0])["value"]) and json.loads(raws[1])["value"] == 0.5
    fixed = _windvane("quarantine", "replay", "app.pq", "--store", sqlite_url, "--schema", str(schemas / "app.toml"))
    assert fixed.exit_code == 0 and "replayed 2 records" in fixed.output, fixed.output
    assert column(sqlite_url, "app.pq", "seq") == [1, 2]
    assert column(sqlite_url, "app.pq", "time") == [SECOND * NS, SECOND * NS + 1]
    value = column(sqlite_url, "app.pq", "value")
    assert math.isnan(value[0]) and value[1] == 0.5


def _windvane(*args: str):
    return CliRunner().invoke(windvane_cli, list(args), catch_exceptions=False)


def test_import_of_json_lines_keeps_no_nan_or_infinity_in_extra(sqlite_url, tmp_path, schemas):
    path = tmp_path / "values.jsonl"
    lines = [
        '{"time": 1709294400.123456789, "seq": 1, "x": 2.5}',
        '{"time": 1709294400, "seq": 2, "x": NaN}',
        '{"time": 1709294400, "seq": 3, "x": 1e999}',
        '{"time": 1709294400, "seq": 4, "value": 1e999}',
    ]
    path.write_text("\n".join(lines) + "\n")
    result = _windvane(
        "import", str(path), "--store", sqlite_url, "--tag", "app.im", "--schema", str(schemas / "app.toml")
    )
    assert result.exit_code == 3, result.output  # 3: rows quarantined
    assert column(sqlite_url, "app.im", "seq") == [1, 4]
    assert column(sqlite_url, "app.im", "time") == [SECOND * NS + 123456789, SECOND * NS]
    assert column(sqlite_url, "app.im", "value")[1] == math.inf
    extras = _extras(sqlite_url, "app.im")
    assert extras[0] == '{"x":2.5}' and all(json.loads(e or "{}") is not None for e in extras)
    assert column(sqlite_url, "app.im", "reason", quarantine=True) == [
        f"line 2: not JSON: byte 36: NaN {NOT_JSON}",
        _undeclared("x", "Infinity"),
    ]
