"""fluentd's json and msgpack parsers in windvane. The expected values are what fluentd 1.14.6 (with Debian's
yajl-ruby, Ruby's json 2.6.1 and msgpack 1.4.2) makes of the same lines under in_tail; the differential test
(``test_fluentd_differential.py``) checks the corpus against the real fluentd."""

from __future__ import annotations

import msgpack
import pyarrow as pa
import pytest

from windvane.connectors.files.logs import LogOptions, parse_log
from windvane.connectors.files.logs.fluent import ParseConfig, ParseConfigError, fluent_format
from windvane.connectors.files.logs.fluent.parsers import PARSERS
from windvane.connectors.files.logs.fluent.values import ruby_float_to_s, ruby_inspect, typed_column
from windvane.connectors.files.logs.fluent.yajl import INVALID, yajl_load
from windvane.connectors.files.logs.lines import split_lines

NOW = 1_800_000_000 * 10**9


def parse(lines: list[bytes], **options):
    """Each line's (time, record without nulls) or its fault, and the columns' types."""
    fmt = fluent_format(ParseConfig.from_mapping({"type": "json", **options}))
    found, _ = split_lines(b"".join(line + b"\n" for line in lines), now=NOW, keep_blank=True, binary=fmt.binary)
    rows = fmt.parse(found, LogOptions(now=NOW, written=NOW))
    values = {name: column.to_pylist() for name, column in rows.columns.items()}
    out = []
    for i in range(len(found)):
        if i in rows.faults:
            out.append(rows.faults[i])
        else:
            record = {k: v[i] for k, v in values.items() if k != "time" and v[i] is not None}
            out.append((values["time"][i], record))
    return out, {name: column.type for name, column in rows.columns.items()}


def records(lines, **options):
    return parse([line.encode() if isinstance(line, str) else line for line in lines], **options)[0]


def test_registered_with_fluentds_defaults():
    assert {"json", "msgpack"} <= set(PARSERS)
    assert ParseConfig("json").effective_time_key == "time"
    assert ParseConfig("msgpack").effective_time_key is None  # fluentd's msgpack parser has no time key
    # the json parser's time_type is float, string once a time_format is given; an explicit one stays
    assert ParseConfig("json").time_type == "float"
    assert ParseConfig("json", time_format="%s").time_type == "string"
    assert ParseConfig.from_mapping({"type": "json", "time_type": "string"}).time_type == "string"
    assert "time_type string" in ParseConfig.from_mapping({"type": "json", "time_type": "string"}).to_fluentd()
    assert ParseConfig("regexp").time_type == "string"
    with pytest.raises(ParseConfigError, match="oj,yajl,json"):
        fluent_format(ParseConfig("json", json_parser="simdjson"))


def test_values_keep_their_kind():
    out, types = parse([b'{"s": "x", "i": 1, "f": 1.5, "b": true, "n": null, "o": {"k": [1, null]}, "a": []}'])
    assert out == [(NOW, {"s": "x", "i": 1, "f": 1.5, "b": True, "o": '{"k":[1,null]}', "a": "[]"})]
    assert (types["i"], types["f"], types["b"], types["s"]) == (pa.int64(), pa.float64(), pa.bool_(), pa.large_string())


def test_duplicate_keys_unicode_and_escapes():
    out = records(['{"a": 1, "a": 2, "u": "\\u00e9\\ud83d\\ude00 \\u0000", "": "empty"}'])
    assert out == [(NOW, {"a": 2, "u": "é😀 \x00", "": "empty"})]


def test_mixed_kinds_make_text_numbers_float():
    out, types = parse([b'{"v": 1, "n": 1}', b'{"v": "a", "n": 2.5}', b'{"v": true}', b'{"v": {"k": 1}}'])
    assert [r[1].get("v") for r in out] == ["1", "a", "true", '{"k":1}']
    assert [r[1].get("n") for r in out] == [1.0, 2.5, None, None]
    assert (types["v"], types["n"]) == (pa.large_string(), pa.float64())


def test_big_integers_are_exact_text():
    assert typed_column([1, 2**64, None]).to_pylist() == ["1", "18446744073709551616", None]
    assert typed_column([1, -(2**63)]).type == pa.int64()
    assert typed_column([None, None]).null_count == 2


def test_lines_that_are_not_objects_are_rejected():
    lines = ["[1, 2]", '"s"', "5", "1.5", "null", "true", "false", "not json", '{"a": 1} {"b": 2}', "{'a': 1}"]
    lines += ['{"a": 1,}', '{"a": 01}', '{"a": NaN}', '{"a": "raw\ttab"}', "\ufeff{}", "", "   "]
    out = records(lines)
    assert all(isinstance(r, str) for r in out), out
    assert out[0].startswith("no implicit conversion of String into Integer")
    assert out[1].startswith("string not matched")
    assert out[5].startswith("undefined method `[]' for true:TrueClass")
    assert out[4] == out[6] == out[7] == out[15] == "pattern not matched"


def test_yajl_reads_comments_surrogates_and_partial_lines():
    assert yajl_load('{"a": 1} // c') == {"a": 1}
    assert yajl_load('/* c */ {"a": "// kept"}') == {"a": "// kept"}
    assert yajl_load('{"a": "\\ud800x"}') == {"a": "?x"}
    assert yajl_load('{"a": 1e400}') == {"a": float("inf")}
    # a line that ends early: the innermost open container, or the key waiting for its value
    assert yajl_load('{"a": 1') == {"a": 1}
    assert yajl_load('{"a": 1,') == {"a": 1}
    assert yajl_load('{"a": {"b": 1') == {"b": 1}
    assert yajl_load('{"a": [1, 2') == [1, 2]
    assert yajl_load('{"a": tr') == "a"
    assert yajl_load('{"a": 12') == {"a": 12}
    assert yajl_load("{") == {}
    assert yajl_load('"abc') is None
    assert yajl_load('{"a": 1 /* open') == {"a": 1}
    for bad in ('{"a": 1}}', '{"a": 1]', '{"a": 1 x', '{"a": NaN}', '{"a": 1,}', "[1,]"):
        assert yajl_load(bad) is INVALID, bad


def test_nesting_too_deep_for_python_is_rejected_not_a_crash():
    deep = '{"a": ' + "[" * 5000 + "]" * 5000 + "}"
    assert records([deep, '{"b": 1}']) == ["nested deeper than windvane reads (fluentd reads it)", (NOW, {"b": 1})]
    assert records(['{"a": ' + "[" * 900 + "]" * 900 + "}"])[0][1]["a"] == "[" * 900 + "]" * 900


def test_ruby_json_parser_differs_from_yajl():
    lines = ['{"a": 1} // c', '/* c */ {"b": 2}', '{"c": "\\ud800"}', '{"json_class": "String", "raw": [97]}']
    lines += ['{"d": NaN}', '{"e": 1']
    out = records(lines, json_parser="json")
    assert out[0] == "pattern not matched" and out[1] == (NOW, {"b": 2}) and out[2] == "pattern not matched"
    assert out[3].startswith("json_class String")
    assert out[4][1]["d"] != out[4][1]["d"]  # NaN (fluentd then fails to write it)
    assert out[5] == "pattern not matched"
    assert records(lines, json_parser="oj")[0] == (NOW, {"a": 1})  # oj without the Oj gem is yajl


def test_time_float_is_rubys_to_s_split_at_the_dot():
    lines = ['{"time": 1700000000.987654321}', '{"time": 1e20}', '{"time": 0.000001}', '{"time": -1.5}']
    lines += ['{"time": "1700000000.5.7"}', '{"time": "abc"}', '{"time": true}', '{"time": null}', "{}"]
    out = records(lines)
    assert [r[0] if isinstance(r, tuple) else r for r in out] == [
        1_700_000_000_987_654_200,
        1_000_000_000,  # 1.0e+20
        1_000_000_000,  # 1.0e-06
        -500_000_000,  # -1 s + 0.5 s
        1_700_000_000_500_000_000,
        0,
        "value must be a string or a number: true(TrueClass)",
        "value must be a string or a number: (NilClass)",
        NOW,
    ]


def test_time_string_refuses_numbers():
    out = records(['{"time": 1700000000}', '{"time": "1700000000"}', '{"time": 1.5}'], time_format="%s")
    assert out == ["value must be string: 1700000000", (1_700_000_000 * 10**9, {}), "value must be string: 1.5"]
    out = records(['{"time": 1700000000.9}', '{"time": false}'], time_type="unixtime")
    assert out == [(1_700_000_000 * 10**9, {}), "value must be a string or a number: false(FalseClass)"]


def test_keep_time_key_keeps_the_value():
    out, types = parse([b'{"ts": 1700000000.25, "m": 1}'], time_key="ts", keep_time_key=True)
    assert out == [(1_700_000_000_250_000_000, {"ts": 1700000000.25, "m": 1})] and types["ts"] == pa.float64()


def test_no_estimate_rejects_lines_without_time():
    out = records(['{"m": 1}', '{"time": 5, "m": 2}'], estimate_current_event=False)
    assert out == ["pattern not matched", (5 * 10**9, {"m": 2})]


def test_types_convert_rubys_to_s_of_each_value():
    lines = [
        '{"a": 1.7, "b": 2, "c": 1, "d": {"x": [1, null]}, "e": [1, 2], "f": 1700000000, "g": 1.5}',
        '{"a": true, "b": true, "c": 1.0, "d": 1e20, "e": 3, "f": "2024-01-01T00:00:00Z", "g": true}',
        '{"a": "12x", "b": [1], "c": "YES", "d": false, "e": null, "f": [1], "g": "5"}',
    ]
    types = "a:integer,b:float,c:bool,d:string,e:array,f:time,g:time:unixtime"
    out = [r[1] for r in records(lines, types=types)]
    assert out[0] == {"a": 1, "b": 2.0, "c": True, "d": '{"x"=>[1, nil]}', "e": '["[1", " 2]"]', "g": 10**9}
    assert out[1] == {"a": 0, "b": 0.0, "c": False, "d": "1.0e+20", "e": '["3"]', "f": 1_704_067_200 * 10**9}
    assert out[2] == {"a": 12, "b": 0.0, "c": True, "d": "false", "g": 5 * 10**9}
    assert "f" not in out[0]  # a number is no string time: null (time:unixtime takes it: 1.5.to_i)


def test_null_values_apply_to_strings_only():
    out = records(['{"a": "-", "b": "", "c": 0, "d": "0"}'], null_value_pattern="^-$|^0$", null_empty_string=True)
    assert out == [(NOW, {"c": 0})]


def test_ruby_to_s_and_inspect():
    assert [ruby_float_to_s(x) for x in (1e20, 1e16, 1e15, 1e-5, 1e-4, 1.5, float("inf"))] == [
        "1.0e+20", "1.0e+16", "1000000000000000.0", "1.0e-05", "0.0001", "1.5", "Infinity"
    ]  # fmt: skip
    assert ruby_inspect({"k": [1, None, "a#{b}", 1.0, True]}) == '{"k"=>[1, nil, "a\\#{b}", 1.0, true]}'


# -- msgpack: the lines' bytes are one stream, as in_tail feeds fluentd's unpacker


def unpack(lines: list[bytes], **options):
    fmt = fluent_format(ParseConfig.from_mapping({"type": "msgpack", **options}))
    parsed = parse_log(
        fmt, b"".join(line + b"\n" for line in lines), LogOptions(now=NOW, written=NOW, keep_blank=True), first_line=0
    )
    return parsed.table.to_pylist(), [(r.line, r.reason) for r in parsed.rejected]


def test_msgpack_maps_are_records_without_a_time_key():
    pack = msgpack.packb
    rows, rejected = unpack([pack({"time": 1, "msg": "hi"}), pack({"n": 7, "b": b"\xc3\xa9", 1: [1, b"x"]})])
    assert rows == [
        {"time": NOW, "time_text": 1, "msg": "hi", "n": None, "b": None, "1": None},
        {"time": NOW, "time_text": None, "msg": None, "n": 7, "b": "é", "1": '[1,"x"]'},
    ]
    assert rejected == []


def test_msgpack_lines_are_not_utf8_text():
    rows, rejected = unpack([msgpack.packb({"s": "caf\u00e9", "f": 1.5, "z": None})])
    assert rows == [{"time": NOW, "s": "café", "f": 1.5, "z": None}] and rejected == []


def test_msgpack_stream_runs_across_lines():
    one = msgpack.packb({"a": 1})
    # a map cut at a 0x0a byte continues on the next line without it (fluentd says nothing of the first part)
    cut = msgpack.packb({"k": "x\ny"})
    head, tail = cut.split(b"\n")
    rows, rejected = unpack([head, tail + b"z"])
    assert rows == [{"time": NOW, "k": "xyz"}]  # "x\ny" is three bytes: the next line's z ends it
    assert rejected == [(0, "line 0: incomplete msgpack object (fluentd reads the rest with the next line)")]
    # not a map: rejected; what follows it waits for the next line, which then holds two maps
    rows, rejected = unpack([b"\x05" + one, one, b"\xc1", one])
    assert [r for r, _ in rejected] == [0, 1, 2]
    assert rejected[1][1].startswith("line 1: 2 msgpack maps on one line")
    assert rejected[2][1].startswith("line 2: invalid byte")
    assert rows == [{"time": NOW, "a": 1}]  # the stream goes on after the invalid byte


def test_msgpack_unknown_extension_stops_the_stream():
    one = msgpack.packb({"a": 1})
    ext = msgpack.packb({"e": msgpack.ExtType(5, b"x")})
    rows, rejected = unpack([one, ext, one])
    assert rows == [{"time": NOW, "a": 1}]
    assert rejected == [(1, "line 1: unexpected extension type"), (2, "line 2: unexpected extension type")]
    event_time = msgpack.packb({"e": msgpack.ExtType(0, (1700000000).to_bytes(4, "big") + (5).to_bytes(4, "big"))})
    assert unpack([event_time])[0] == [{"time": NOW, "e": 1700000000}]  # fluentd's EventTime: its seconds


def test_msgpack_time_key_and_crlf():
    line = msgpack.packb({"t": "1700000000.5", "m": 1})
    rows, rejected = unpack([line, msgpack.packb({"t": 5})], time_key="t", time_type="float")
    assert [r["time"] for r in rows] == [1_700_000_000_500_000_000, 5 * 10**9] and rejected == []
    assert unpack([b"", line])[1] == [(0, "line 0: no msgpack object (fluentd ignores the line)")]
    # in_tail drops \r\n: a line ending in 0x0d loses that byte
    rows, rejected = unpack([msgpack.packb({"a": 1}) + b"\r", msgpack.packb({"b": 13})[:-1] + b"\r"])
    assert rows == [{"time": NOW, "a": 1}]
    assert rejected == [(1, "line 1: incomplete msgpack object (fluentd reads the rest with the next line)")]


# -- end to end: windvane import


def import_file(url: str, path, *args: str):
    from click.testing import CliRunner

    from windvane.cli import cli

    return CliRunner().invoke(cli, ["import", str(path), "--store", url, "--tag", "t", *args], catch_exceptions=False)


def test_import_json_keeps_value_types(sqlite_url, tmp_path):
    from windvane import arrays

    log = tmp_path / "app.json"
    log.write_text('{"time": 1700000000.5, "status": 200, "ok": true, "msg": "a"}\n[1]\n{"status": 500, "ok": false}\n')
    result = import_file(sqlite_url, log, "--format", "json")
    assert result.exit_code == 3, result.output  # a line was quarantined
    with arrays.open_stream(sqlite_url, "t") as stream:
        assert stream["time"][:].tolist()[0] == 1_700_000_000_500_000_000
        assert stream["status"][:].tolist() == [200, 500] and stream["ok"][:].tolist() == [True, False]
    quarantine = arrays.open_stream(sqlite_url, "t", quarantine=True)
    assert quarantine["raw"][:].tolist() == [b"[1]"]


def test_import_msgpack_reads_the_files_bytes(sqlite_url, tmp_path):
    from windvane import arrays

    log = tmp_path / "app.msgpack"
    log.write_bytes(b"\n".join([msgpack.packb({"n": 1, "s": "é"}), b"\xc1", msgpack.packb({"n": 2, "s": "x"})]) + b"\n")
    result = import_file(sqlite_url, log, "--format", "msgpack")
    assert result.exit_code == 3, result.output
    with arrays.open_stream(sqlite_url, "t") as stream:
        assert stream["n"][:].tolist() == [1, 2] and stream["s"][:].tolist() == ["é", "x"]
    quarantine = arrays.open_stream(sqlite_url, "t", quarantine=True)
    assert quarantine["raw"][:].tolist() == [b"\xc1"]
