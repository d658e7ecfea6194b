"""Decoding of HTTP ingestion bodies (connectors.http.decode): every content type, encoding and time rule.

``tests/fixtures/http/`` holds bodies captured from real fluentd 1.14.6 and
Fluent Bit 5.1.1 ``out_http`` in each of their formats (how: its README);
each must decode to the lines of the file the program tailed, at the time
the program gave them. The small constants below have the same shape as
those captures (out_http's json formatter writes ``record.to_json + "\\n"``
per event); the fluent-plugin-wendelin chunk is msgpack ``[EventTime,
record]`` items, EventTime being fixext8 of type 0 holding ``>II``
seconds, nanoseconds.
"""

from __future__ import annotations

import gzip
import json
import struct
import zlib
from pathlib import Path

import msgpack
import pytest
import zstandard

from windvane.connectors.http.decode import decode_in_http, decode_wendelin, decompress, tag_for_path
from windvane.connectors.http.errors import BadRequest, PayloadTooLarge, UnsupportedEncoding

NOW = 1_800_000_000_123_456_789
NS = 1_000_000_000

# out_http defaults (format json, add_newline): application/x-ndjson, one record per line.  Byte for byte.
OUT_HTTP_NDJSON = b'{"message":"hello","level":"info"}\n{"message":"world","level":"warn","code":42}\n'
# out_http json_array true: application/json, the formatted lines joined with "," inside brackets.  Byte for byte.
OUT_HTTP_JSON_ARRAY = b'[{"message":"hello","level":"info"}\n,{"message":"world","level":"warn","code":42}\n]'
OUT_HTTP_RECORDS = [{"message": "hello", "level": "info"}, {"message": "world", "level": "warn", "code": 42}]
# fluent-plugin-wendelin: the raw chunk, [EventTime(1700000000, 123456789), {"temp"=>21.5, "unit"=>"C"}] twice.  Byte for byte.
WENDELIN_ITEM_1 = (
    bytes.fromhex("92d7006553f100075bcd15") + b"\x82\xa4temp\xcb" + struct.pack(">d", 21.5) + b"\xa4unit\xa1C"
)
WENDELIN_ITEM_2 = (
    bytes.fromhex("92d7006553f1010000000a") + b"\x82\xa4temp\xcb" + struct.pack(">d", 22.0) + b"\xa4unit\xa1C"
)
WENDELIN_CHUNK = WENDELIN_ITEM_1 + WENDELIN_ITEM_2


def one(batches):
    assert len(batches) == 1
    return batches[0]


def ndjson(body, **kw):
    return one(decode_in_http(body, "application/x-ndjson", tag="app.log", now_ns=NOW, **kw))


# ---------------------------------------------------------------- fixtures of real senders


def test_out_http_default_ndjson_fixture():
    b = ndjson(OUT_HTTP_NDJSON)
    assert b.tag == "app.log" and b.source == "http" and b.size == len(OUT_HTTP_NDJSON)
    assert list(b.records) == OUT_HTTP_RECORDS
    assert list(b.times) == [NOW, NOW]
    assert b.raw(0) == b'{"message":"hello","level":"info"}'
    assert b.raw(1) == b'{"message":"world","level":"warn","code":42}'


def test_out_http_json_array_fixture():
    b = one(decode_in_http(OUT_HTTP_JSON_ARRAY, "application/json", tag="app.log", now_ns=NOW))
    assert list(b.records) == OUT_HTTP_RECORDS
    assert b.raw(1) == b'{"message":"world","level":"warn","code":42}'


def test_out_http_gzip_fixture():
    body = gzip.compress(OUT_HTTP_NDJSON)
    data = decompress(body, "gzip", 1 << 20)
    b = one(decode_in_http(data, "application/x-ndjson", tag="app.log", now_ns=NOW, size=len(body)))
    assert list(b.records) == OUT_HTTP_RECORDS and b.size == len(body)


FIXTURES = Path(__file__).parents[2] / "fixtures" / "http"
CAPTURED = json.loads((FIXTURES / "requests.json").read_text())


def captured(name: str) -> list:
    """The batch windvane makes of a captured request, decoded as the server decodes it (User-Agent included)."""
    from windvane.connectors.http.app import decode_body

    request = CAPTURED[name]
    headers = request["headers"]
    query = {"time_key": "date"} if headers.get("User-Agent", "").startswith("Fluent-Bit") else {}
    body = (FIXTURES / request["body"]).read_bytes()
    return one(
        decode_body(
            body, False, headers["Content-Type"], headers.get("Content-Encoding"), request["path"], query, 1 << 20, NOW
        )
    )


def source_records(name: str) -> list[dict]:
    return [json.loads(line) for line in (FIXTURES / name).read_text(encoding="utf-8").splitlines()]


@pytest.mark.parametrize("name", [n for n in CAPTURED if n.startswith("fd.")])
def test_captured_fluentd_out_http(name):
    """Every fluentd out_http format gives the tailed lines, the file's ``time`` field as the event time."""
    b = captured(name)
    lines = source_records("fluentd-source.jsonl")
    want_times = [round(line.pop("time") * 10**6) * 1000 for line in lines]
    assert b.tag == "fd." + name.split(".")[1] and b.times == want_times
    if name == "fd.ltsv":  # LTSV carries text
        lines = [{k: str(v) for k, v in line.items()} for line in lines]
    if name == "fd.msgpack":  # fluentd's worker packs text as bin; ingest reads bin as UTF-8 text
        records = [{k.decode(): v.decode() if isinstance(v, bytes) else v for k, v in r.items()} for r in b.records]
    else:
        records = list(b.records)
    assert records == lines
    body = (FIXTURES / CAPTURED[name]["body"]).read_bytes()
    raws = [b.raw(i) for i in range(len(lines))]
    assert all(raw and raw in body for raw in raws) and raws[0] != raws[1] and body.index(raws[1]) >= len(raws[0])


@pytest.mark.parametrize("name", [n for n in CAPTURED if n.startswith("fb.")])
def test_captured_fluent_bit_out_http(name):
    """Every Fluent Bit format gives the tailed lines without ``date``, at the time Fluent Bit read them."""
    b = captured(name)
    assert list(b.records) == source_records("fluent-bit-source.jsonl")
    event_times = captured("fb.msgpack").times  # the EventTimes, to the nanosecond
    assert all(abs(t - e) <= 1000 for t, e in zip(b.times, event_times, strict=True)), (b.times, event_times)
    if name == "fb.msgpack":
        assert b.times == [1795574799110512783, 1795574799110546322]


def test_fluent_bit_date_only_for_fluent_bit_or_when_named():
    body = b'{"date":1700000000.5,"a":1}\n'
    assert ndjson(body).times == [NOW] and ndjson(body).records == [{"date": 1700000000.5, "a": 1}]
    b = one(decode_in_http(body, "application/x-ndjson", tag="t", query={"time_key": "date"}, now_ns=NOW))
    assert b.times == [1_700_000_000_500_000_000] and b.records == [{"a": 1}]
    # A named key is read as ISO 8601 or as a number whose magnitude says the unit (Fluent Bit's epoch_ms).
    body = b'{"ts":"2023-11-14T22:13:20.25+01:00"}\n{"ts":1700000000250}\n{"ts":"soon"}\n'
    b = one(decode_in_http(body, "application/x-ndjson", tag="t", query={"time_key": "ts"}, now_ns=NOW))
    assert b.times == [1_699_996_400_250_000_000, 1_700_000_000_250_000_000, NOW]
    assert b.records == [{}, {}, {"ts": "soon"}] and list(b.faults) == [2]


@pytest.mark.parametrize(
    "content_type, body",
    [
        ("application/json", b'{"time": 1709294400.123456789}'),
        ("application/json", b'[{"time": 1709294400.123456789}]'),
        ("application/json", b'{"time": 1709294400.123456789} {"time": 1709294400.123456789}'),
        ("application/x-ndjson", b'{"time": 1709294400.123456789}\n'),
        ("application/x-www-form-urlencoded", b"json=%7B%22time%22%3A1709294400.123456789%7D"),
    ],
)
def test_json_number_times_are_read_from_their_text(content_type, body):
    (batch,) = decode_in_http(body, content_type, tag="t")
    assert set(batch.times) == {1709294400_123456789}


def test_nan_and_infinity_are_not_json():
    (batch,) = decode_in_http(b'{"a": 1}\n{"a": -Infinity}\n', "application/x-ndjson", tag="t")
    assert batch.faults == {
        1: "line 2 of the NDJSON body is not valid JSON: column 7: -Infinity is not a JSON number: "
        "JSON has no NaN or Infinity (send null, or the value as a string)"
    }
    for body in (b'{"a": NaN}', b'{"a": 1} {"a": Infinity}', b'{"a": "NaN", "b": [Infinity]}'):
        with pytest.raises(BadRequest, match="is not a JSON number"):
            decode_in_http(body, "application/json", tag="t")


def test_json_stream_errors_name_the_place():
    b = one(decode_in_http(b' {"a":1}{"a":2}\n {"a":3} ', "application/json", tag="t", now_ns=NOW))
    assert b.records == [{"a": 1}, {"a": 2}, {"a": 3}] and b.raw(1) == b'{"a":2}' and b.raw(2) == b'{"a":3}'
    with pytest.raises(BadRequest) as err:
        decode_in_http(b'{"a":1}{"a":', "application/json", tag="t")
    assert err.value.code == "bad_json" and "column 13" in err.value.message


def test_ltsv_text_times_and_lines_that_are_not_ltsv():
    body = b"a:1\tb:x:y\ttime:1700000000.000000001\n\nplain\tcolumns\na:2\ttime:2023-11-14T22:13:20Z\n"
    b = one(decode_in_http(body, "text/tab-separated-values", tag="t", now_ns=NOW))
    assert b.records == [{"a": "1", "b": "x:y"}, "plain\tcolumns", {"a": "2"}]
    assert b.times == [1_700_000_000_000_000_001, NOW, 1_700_000_000_000_000_000]
    assert b.raw(1) == b"plain\tcolumns"
    # ?time= wins and the field stays, as text.
    b = one(decode_in_http(b"time:5\ta:1\n", "text/tab-separated-values", tag="t", query={"time": "7"}, now_ns=NOW))
    assert b.times == [7 * NS] and b.records == [{"time": "5", "a": "1"}]


def test_msgpack_events_time_their_records():
    """``[time, map]`` and Fluent Bit's ``[[time, metadata], map]`` give their time; other arrays are flattened."""
    et = msgpack.ExtType(0, struct.pack(">II", 1_700_000_000, 5))
    body = b"".join(
        msgpack.packb(o)
        for o in (
            [[et, {}], {"a": 1}],
            [1_700_000_001, {"a": 2}],
            [{"a": 3}, {"a": 4}],
            {"a": 5, "time": 1_700_000_002},
        )
    )
    b = one(decode_in_http(body, "application/msgpack", tag="t", now_ns=NOW))
    assert b.records == [{"a": 1}, {"a": 2}, {"a": 3}, {"a": 4}, {"a": 5}]
    assert b.times == [1_700_000_000_000_000_005, 1_700_000_001 * NS, NOW, NOW, 1_700_000_002 * NS]
    assert b.raw(0) == msgpack.packb([[et, {}], {"a": 1}]) and b.raw(3) == msgpack.packb({"a": 4})


def test_wendelin_fixture():
    b = one(
        decode_wendelin(
            WENDELIN_CHUNK, "application/x-www-form-urlencoded", query={"reference": "sensor.product"}, now_ns=NOW
        )
    )
    assert b.tag == "sensor.product"
    assert list(b.records) == [{"temp": 21.5, "unit": "C"}, {"temp": 22.0, "unit": "C"}]
    assert list(b.times) == [1700000000 * NS + 123456789, 1700000001 * NS + 10]
    assert b.raw(0) == WENDELIN_ITEM_1 and b.raw(1) == WENDELIN_ITEM_2
    # The same chunk as ERP5 also accepts it: application/octet-stream, and no Content-Type at all.
    for ctype in ("application/octet-stream", None):
        assert one(decode_wendelin(WENDELIN_CHUNK, ctype, query={"reference": "s"}, now_ns=NOW)).records == b.records


def test_wendelin_old_urlencoded_data_chunk():
    from urllib.parse import quote_from_bytes

    body = b"data_chunk=" + quote_from_bytes(WENDELIN_CHUNK).encode()
    b = one(decode_wendelin(body, "application/x-www-form-urlencoded", query={"reference": "s"}, now_ns=NOW))
    assert len(b) == 2 and b.raw(1) == WENDELIN_ITEM_2


def test_wendelin_times_int_float_and_fluent_bit_v2():
    body = (
        msgpack.packb([1700000000, {"a": 1}])
        + msgpack.packb([1700000000.25, {"a": 2}])
        + msgpack.packb([[msgpack.ExtType(0, struct.pack(">II", 5, 6)), {"meta": 1}], {"a": 3}])
    )
    b = one(decode_wendelin(body, None, query={"reference": "s"}, now_ns=NOW))
    assert list(b.times) == [1700000000 * NS, 1700000000 * NS + 250_000_000, 5 * NS + 6]
    assert [r["a"] for r in b.records] == [1, 2, 3]


def test_wendelin_odd_items_are_kept_for_quarantine():
    body = msgpack.packb(["not a time", {"a": 1}]) + msgpack.packb(7) + msgpack.packb([1, 2, 3])
    b = one(decode_wendelin(body, None, query={"reference": "s"}, now_ns=NOW))
    assert list(b.records) == [["not a time", {"a": 1}], 7, [1, 2, 3]]
    assert list(b.times) == [NOW] * 3
    assert b.raw(1) == b"\x07"


@pytest.mark.parametrize(
    ("body", "query", "code"),
    [
        (WENDELIN_CHUNK, {}, "missing_reference"),
        (b"", {"reference": "s"}, "empty_body"),
        (WENDELIN_CHUNK[:-3], {"reference": "s"}, "truncated_body"),
        (b"\xc1", {"reference": "s"}, "bad_msgpack"),
    ],
)
def test_wendelin_errors(body, query, code):
    with pytest.raises(BadRequest) as err:
        decode_wendelin(body, None, query=query)
    assert err.value.code == code


# ---------------------------------------------------------------- content types


def test_json_object_and_non_map_values_are_kept():
    b = one(decode_in_http(b'{"a": 1}', "application/json; charset=utf-8", tag="t", now_ns=NOW))
    assert list(b.records) == [{"a": 1}] and b.raw(0) == b'{"a": 1}'
    b = one(decode_in_http(b'[{"a": 1}, "text", 3, null, [1]]', "application/json", tag="t", now_ns=NOW))
    assert list(b.records) == [{"a": 1}, "text", 3, None, [1]]
    assert [b.raw(i) for i in range(5)] == [b'{"a": 1}', b'"text"', b"3", b"null", b"[1]"]
    assert one(decode_in_http(b'"scalar"', "application/csp-report", tag="t")).records == ["scalar"]


def test_empty_json_array_gives_no_batch():
    assert decode_in_http(b" [ ] ", "application/json", tag="t") == []


def test_ndjson_crlf_blank_lines_and_raw():
    b = ndjson(b'{"a":1}\r\n\r\n   \n{"b":2}\r\n  {"c":3}  \n"x"')
    assert list(b.records) == [{"a": 1}, {"b": 2}, {"c": 3}, "x"]
    assert [b.raw(i) for i in range(4)] == [b'{"a":1}', b'{"b":2}', b'  {"c":3}  ', b'"x"']


def test_ndjson_utf8_and_bom():
    b = ndjson('\ufeff{"name":"Zürich ✓"}\n'.encode())
    assert b.records[0] == {"name": "Zürich ✓"} and b.raw(0) == '{"name":"Zürich ✓"}'.encode()


def test_bad_json_reports_line_and_column():
    """A bad NDJSON line is a fault of its own naming its line; a body with no JSON line at all is a 400."""
    b = ndjson(b'{"a":1}\n\n{"b":}\n{"c":3}\n')
    assert b.records[0] == {"a": 1} and b.records[2] == {"c": 3} and list(b.faults) == [1]
    assert b.faults[1] == "line 3 of the NDJSON body is not valid JSON: column 6: Expecting value"
    assert b.raw(1) == b'{"b":}'
    with pytest.raises(BadRequest) as err:
        ndjson(b'{"a":1} x\nnot json\n')
    assert err.value.code == "bad_json"
    assert err.value.message == (
        "the NDJSON body has no valid JSON line: line 1 of the NDJSON body is not valid JSON: column 9: Extra data"
    )
    with pytest.raises(BadRequest) as err:
        decode_in_http(b'[{"a":1},\n {"b" 2}]', "application/json", tag="t")
    assert err.value.code == "bad_json" and "line 2, column 7" in err.value.message


def test_text_that_is_not_utf8_fails_only_its_record():
    """Invalid UTF-8 in a JSON string reaches ingest surrogate-escaped (ingest quarantines that record alone)."""
    b = ndjson(b'{"a":"\xff"}\n{"a":"ok"}\n{"\xc3":1}\n')
    assert list(b.records) == [{"a": "\udcff"}, {"a": "ok"}, {"\udcc3": 1}]
    assert [b.raw(i) for i in range(3)] == [b'{"a":"\xff"}', b'{"a":"ok"}', b'{"\xc3":1}']
    b = one(decode_in_http(b'[{"a":"caf\xe9"},{"a":"caf\xc3\xa9"}]', "application/json", tag="t"))
    assert list(b.records) == [{"a": "caf\udce9"}, {"a": "caf\u00e9"}] and b.raw(0) == b'{"a":"caf\xe9"}'
    # Bytes that are not UTF-8 outside a string are still a body that is not JSON.
    with pytest.raises(BadRequest) as err:
        ndjson(b'{"a":1}\xff\n')
    assert err.value.code == "bad_json"


@pytest.mark.parametrize("ctype", ["application/msgpack", "application/x-msgpack"])
def test_msgpack_map_array_and_concatenation(ctype):
    m1, m2, m3 = msgpack.packb({"a": 1}), msgpack.packb({"b": b"\x00\xff"}), msgpack.packb("odd")
    b = one(decode_in_http(m1, ctype, tag="t"))
    assert list(b.records) == [{"a": 1}] and b.raw(0) == m1
    b = one(decode_in_http(m1 + m2 + m3, ctype, tag="t"))  # out_http's msgpack format: concatenated records
    assert list(b.records) == [{"a": 1}, {"b": b"\x00\xff"}, "odd"] and [b.raw(i) for i in range(3)] == [m1, m2, m3]
    arr = msgpack.packb([{"a": 1}, {"b": b"\x00\xff"}, "odd"])
    b = one(decode_in_http(arr + m1, ctype, tag="t"))
    assert list(b.records) == [{"a": 1}, {"b": b"\x00\xff"}, "odd", {"a": 1}]
    assert [b.raw(i) for i in range(4)] == [m1, m2, m3, m1]


def test_msgpack_truncated_and_invalid():
    with pytest.raises(BadRequest) as err:
        decode_in_http(msgpack.packb({"a": "long string"})[:-2], "application/msgpack", tag="t")
    assert err.value.code == "truncated_body" and "byte 0" in err.value.message
    with pytest.raises(BadRequest) as err:
        decode_in_http(b"\x81\xa1a\x01\xc1", "application/msgpack", tag="t")
    assert err.value.code == "bad_msgpack" and "byte 4" in err.value.message
    # A str that is not UTF-8 is not a bad body: it reaches ingest surrogate-escaped, as over Forward.
    b = one(decode_in_http(b"\xa2\xff\xfe", "application/msgpack", tag="t"))
    assert list(b.records) == ["\udcff\udcfe"] and b.raw(0) == b"\xa2\xff\xfe"


def test_urlencoded_form_fields():
    b = one(decode_in_http(b"json=%7B%22a%22%3A+1%7D", "application/x-www-form-urlencoded", tag="t"))
    assert list(b.records) == [{"a": 1}]
    b = one(
        decode_in_http(b"ndjson=%7B%22a%22%3A1%7D%0A%7B%22a%22%3A2%7D", "application/x-www-form-urlencoded", tag="t")
    )
    assert list(b.records) == [{"a": 1}, {"a": 2}]
    from urllib.parse import quote_from_bytes

    packed = msgpack.packb([{"a": 1}, {"b": 2}])
    b = one(
        decode_in_http(b"msgpack=" + quote_from_bytes(packed).encode(), "application/x-www-form-urlencoded", tag="t")
    )
    assert list(b.records) == [{"a": 1}, {"b": 2}]
    # in_http's precedence: json, then ndjson, then msgpack.
    b = one(decode_in_http(b'ndjson=%7B%22n%22%3A1%7D&json={"j":1}', "application/x-www-form-urlencoded", tag="t"))
    assert list(b.records) == [{"j": 1}]
    with pytest.raises(BadRequest) as err:
        decode_in_http(b"other=1", "application/x-www-form-urlencoded", tag="t")
    assert err.value.code == "missing_field"


def test_query_fields_like_in_http():
    b = one(decode_in_http(b"", None, tag="t", query={"json": '{"q": 1}'}))
    assert list(b.records) == [{"q": 1}]
    # A form field in the body wins over the query's.
    b = one(decode_in_http(b'json={"b":1}', "application/x-www-form-urlencoded", tag="t", query={"json": '{"q": 1}'}))
    assert list(b.records) == [{"b": 1}]


def test_multipart_form():
    boundary = "----fluentd0123"
    packed = msgpack.packb({"m": b"\r\n--x"})
    body = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="other"\r\n\r\nignored\r\n'
            f'--{boundary}\r\nContent-Disposition: form-data; name="msgpack"; filename="x"\r\n'
            "Content-Type: application/octet-stream\r\n\r\n"
        ).encode()
        + packed
        + f"\r\n--{boundary}--\r\n".encode()
    )
    b = one(decode_in_http(body, f'multipart/form-data; boundary="{boundary}"', tag="t"))
    assert list(b.records) == [{"m": b"\r\n--x"}]
    with pytest.raises(BadRequest) as err:
        decode_in_http(body[:-10], f"multipart/form-data; boundary={boundary}", tag="t")
    assert err.value.code == "bad_multipart"
    with pytest.raises(BadRequest) as err:
        decode_in_http(body, "multipart/form-data", tag="t")
    assert "boundary" in err.value.message


@pytest.mark.parametrize(
    ("body", "ctype", "code"),
    [
        (b'{"a":1}', "text/csv", "unsupported_content_type"),
        (b'{"a":1}', None, "unsupported_content_type"),
        (b"", "application/json", "empty_body"),
        (b"  \n\r\n", "application/x-ndjson", "empty_body"),
        (b"", None, "empty_body"),
    ],
)
def test_body_errors(body, ctype, code):
    with pytest.raises(BadRequest) as err:
        decode_in_http(body, ctype, tag="t")
    assert err.value.code == code and err.value.status == 400


def test_missing_tag():
    with pytest.raises(BadRequest) as err:
        decode_in_http(b"{}", "application/json", tag="")
    assert err.value.code == "missing_tag"


def test_tag_for_path():
    assert tag_for_path("/app/log") == "app.log"
    assert tag_for_path("/app.log") == "app.log"
    assert tag_for_path("/app/log/") == "app.log"
    assert tag_for_path("/a//b") == "a..b"
    assert tag_for_path("/") == ""


# ---------------------------------------------------------------- time rules


def test_time_field_removed_and_used():
    b = ndjson(b'{"time":1700000000,"a":1}\n{"time":1700000000.123456,"a":2}\n{"a":3}\n')
    assert list(b.times) == [1700000000 * NS, 1700000000 * NS + 123456000, NOW]
    assert list(b.records) == [{"a": 1}, {"a": 2}, {"a": 3}]
    assert b.raw(0) == b'{"time":1700000000,"a":1}'  # the arrival bytes keep it


def test_time_field_read_by_the_one_time_rule():
    """ISO 8601 text is a time as over MQTT; a value that is not a time is a fault naming it; null is no time."""
    b = ndjson(
        b'{"time":"2024-01-01T00:00:00Z","a":1}\n{"time":true}\n{"time":null,"a":3}\n{"time":1e300}\n'
        b'{"time":"yesterday"}\n{"time":1700000000000}\n'
    )
    assert list(b.times) == [1704067200 * NS, NOW, NOW, NOW, NOW, 1700000000 * NS]
    assert b.records[0] == {"a": 1} and b.records[2] == {"a": 3} and b.records[5] == {}
    assert sorted(b.faults) == [1, 3, 4]
    assert b.faults[4].startswith("the event time 'yesterday' is not a time")
    assert b.faults[1].startswith("the event time True is not a time")
    assert b.raw(4) == b'{"time":"yesterday"}'  # quarantined as it arrived


def test_query_time_wins_and_keeps_field():
    b = ndjson(b'{"time":1,"a":1}\n', query={"time": "1700000000.123456789"})
    assert list(b.times) == [1700000000 * NS + 123456789]
    assert list(b.records) == [{"time": 1, "a": 1}]
    assert list(ndjson(b"{}", query={"time": "0"}).times) == [NOW]  # in_http: time=0 means now
    for bad in ("abc", "nan", "inf", "1e30"):
        with pytest.raises(BadRequest) as err:
            ndjson(b"{}", query={"time": bad})
        assert err.value.code == "bad_time"


def test_msgpack_event_time_field():
    rec = {"time": msgpack.ExtType(0, struct.pack(">II", 1700000000, 5)), "a": 1}
    b = one(decode_in_http(msgpack.packb(rec), "application/msgpack", tag="t"))
    assert list(b.times) == [1700000000 * NS + 5] and list(b.records) == [{"a": 1}]


# ---------------------------------------------------------------- content encodings


@pytest.mark.parametrize(
    ("encoding", "compress"),
    [
        ("gzip", gzip.compress),
        ("x-gzip", gzip.compress),
        ("deflate", zlib.compress),
        ("deflate", lambda d: zlib.compress(d)[2:-4]),  # raw deflate, as some clients send
        ("zstd", lambda d: zstandard.ZstdCompressor().compress(d)),
        ("identity", lambda d: d),
        ("", lambda d: d),
    ],
)
def test_encodings(encoding, compress):
    assert decompress(compress(OUT_HTTP_NDJSON), encoding, 1 << 20) == OUT_HTTP_NDJSON


def test_stacked_and_multi_member():
    assert decompress(gzip.compress(b"ab") + gzip.compress(b"cd"), "gzip", 100) == b"abcd"
    stacked = zstandard.ZstdCompressor().compress(gzip.compress(b"xyz"))
    assert decompress(stacked, "gzip, zstd", 100) == b"xyz"
    frames = zstandard.ZstdCompressor().compress(b"ab") + zstandard.ZstdCompressor(write_checksum=True).compress(b"cd")
    assert decompress(frames, "zstd", 100) == b"abcd"


@pytest.mark.parametrize(
    ("encoding", "compress"),
    [("gzip", gzip.compress), ("deflate", zlib.compress), ("zstd", lambda d: zstandard.ZstdCompressor().compress(d))],
)
def test_truncated_and_corrupt(encoding, compress):
    packed = compress(b"x" * 5000 + bytes(range(256)) * 40)
    with pytest.raises(BadRequest) as err:
        decompress(packed[: len(packed) // 2], encoding, 1 << 20)
    assert err.value.code == "truncated_body" and "truncated" in err.value.message
    with pytest.raises(BadRequest) as err:
        decompress(b"\x00garbage!" * 3, encoding, 1 << 20)
    assert err.value.code in ("bad_encoding", "truncated_body")


@pytest.mark.parametrize(
    ("encoding", "compress"),
    [("gzip", gzip.compress), ("deflate", zlib.compress), ("zstd", lambda d: zstandard.ZstdCompressor().compress(d))],
)
def test_decompression_limit(encoding, compress):
    bomb = compress(b"\x00" * (4 << 20))
    assert len(decompress(bomb, encoding, 4 << 20)) == 4 << 20
    with pytest.raises(PayloadTooLarge) as err:
        decompress(bomb, encoding, 1 << 20)
    assert err.value.status == 413 and str(1 << 20) in err.value.message


def test_unsupported_encoding():
    with pytest.raises(UnsupportedEncoding) as err:
        decompress(b"x", "br", 100)
    assert err.value.status == 415 and "'br'" in err.value.message


def test_raw_falls_back_for_big_records():
    """Batch.raw_bytes gives the arrival bytes for every record kind."""
    b = one(decode_in_http(json.dumps([{"k": "v" * 1000}, 5]).encode(), "application/json", tag="t"))
    assert b.raw_bytes(0) == json.dumps({"k": "v" * 1000}).encode() and b.raw_bytes(1) == b"5"
