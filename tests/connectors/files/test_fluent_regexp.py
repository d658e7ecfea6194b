"""fluentd's regexp and none parsers, with the record rules (time key, null values, types). Expected records are
what fluentd 1.14.6's RegexpParser / NoneParser give for the same lines (run by hand on the vendored fluentd)."""

from __future__ import annotations

import json

import pytest

from windvane.connectors.files.logs import LogOptions, parse_log
from windvane.connectors.files.logs.fluent import PARSERS, ParseConfig, ParseConfigError, fluent_format

NOW = 1_700_000_000_123_456_789


def parse(lines: str, **options):
    config = ParseConfig.from_mapping({"type": "regexp", **options})
    return parse_log(fluent_format(config), lines.encode(), LogOptions(now=NOW, keep_blank=True))


def records(parsed) -> list[dict]:
    return [{k: v for k, v in row.items()} for row in parsed.table.to_pylist()]


def test_registry_has_regexp_and_none() -> None:
    assert {"regexp", "none"} <= set(PARSERS)


def test_types_and_null_values_as_fluentd() -> None:
    parsed = parse(
        'h 12abc 1.5e3 YES a|b||c||\nh - null x\nh "" 0x1A TRUE\nh  abc 1 \nü ٣ 1_5 no\nnope\n',
        expression=r"/^(?<host>[^ ]*) (?<n>[^ ]*) (?<f>[^ ]*) (?<b>[^ ]*)(?: (?<rest>.*))?$/",
        types="n:integer,f:float,b:bool,rest:array:|",
        null_value_pattern="/^(-|NULL)$/i",
        null_empty_string=True,
    )
    rows = records(parsed)
    assert [r["time"] for r in rows] == [NOW] * 5  # no time field: the read time (estimate_current_event)
    assert [{k: v for k, v in r.items() if k != "time"} for r in rows] == [
        {"host": "h", "n": 12, "f": 1500.0, "b": True, "rest": json.dumps(["a", "b", "", "c"])},
        {"host": "h", "n": None, "f": None, "b": False, "rest": None},  # NULL, null: null; 'x' is not true
        {"host": "h", "n": 0, "f": 0.0, "b": True, "rest": None},  # '""' to_i is 0; no rest group: no field
        {"host": "h", "n": None, "f": 0.0, "b": True, "rest": None},  # "" is null (null_empty_string)
        {"host": "ü", "n": 0, "f": 15.0, "b": False, "rest": None},  # an Arabic digit is no digit to Ruby
    ]
    assert [(r.line, r.raw, r.reason) for r in parsed.rejected] == [
        (
            6,
            b"nope",
            "line 6: pattern not matched: the line matches the expression through field 'host', not through 'n'",
        )
    ]


def test_a_blank_line_is_a_line_the_expression_may_not_match() -> None:
    parsed = parse("a\n\nb\n", expression=r"^(?<x>\w)$")
    assert [(r.line, r.raw, r.reason) for r in parsed.rejected] == [
        (2, b"", "line 2: pattern not matched: the line does not match the expression up to its first field 'x'")
    ]
    assert records(parse("\n", expression=r"^(?<x>\w*)$")) == [{"time": NOW, "x": ""}]


def test_null_value_pattern_matches_anywhere_in_the_value() -> None:
    # fluentd searches the value (Regexp#match): "-" makes "a-b" null too
    parsed = parse("a-b x\n", expression=r"(?<a>\S+) (?<b>\S+)", null_value_pattern="-")
    assert records(parsed) == [{"time": NOW, "a": None, "b": "x"}]


def test_the_time_field_is_read_and_removed() -> None:
    parsed = parse(
        "[02/Jan/2020:03:04:05 +0900] ok\n[bad] no\n[] empty\n",
        expression=r"^\[(?<time>[^\]]*)\] (?<msg>.*)$",
        time_format="%d/%b/%Y:%H:%M:%S %z",
    )
    assert records(parsed) == [{"time": 1577901845000000000, "msg": "ok"}]
    assert [r.reason for r in parsed.rejected] == [
        "line 2: invalid time format: value = bad",
        "line 3: invalid time format: value = ",
    ]


def test_keep_time_key_and_time_key() -> None:
    parsed = parse(
        "2020-01-02T03:04:05Z x\n",
        expression=r"^(?<ts>\S+) (?<msg>.*)$",
        time_key="ts",
        time_format="%Y-%m-%dT%H:%M:%S%z",
        keep_time_key=True,
    )
    assert records(parsed) == [{"time": 1577934245000000000, "ts": "2020-01-02T03:04:05Z", "msg": "x"}]
    kept = parse(
        "2020-01-02 x\n", expression=r"^(?<time>\S+) (?<msg>.*)$", time_format="%Y-%m-%d", utc=True, keep_time_key=True
    )
    assert records(kept) == [{"time": 1577923200000000000, "time_text": "2020-01-02", "msg": "x"}]


def test_a_line_without_time_when_estimate_current_event_is_false_is_rejected() -> None:
    parsed = parse(
        "2020-01-02 a\n- b\n",
        expression=r"^(?:(?<time>\d\S+)|-) (?<msg>.*)$",
        time_format="%Y-%m-%d",
        utc=True,
        estimate_current_event=False,
    )
    assert records(parsed) == [{"time": 1577923200000000000, "msg": "a"}]
    assert [r.reason for r in parsed.rejected] == ["line 2: pattern not matched"]


def test_types_time_and_unixtime() -> None:
    parsed = parse(
        "02/Jan/2020 1600000000 nope\n",
        expression=r"^(?<d>\S+) (?<u>\S+) (?<x>\S+)$",
        types="d:time:Asia/Tokyo:%d/%b/%Y,u:time:unixtime,x:time:%Y",
    )
    assert records(parsed) == [{"time": NOW, "d": 1577890800000000000, "u": 1600000000000000000, "x": None}]


def test_ruby_expression_syntax() -> None:
    parsed = parse(
        "ABC-ff x\nabc-FF x\n",
        expression=r"/^(?<word>[a-z]+)-(?<hex>\h+) (?<same>\k<word>)?.*\z/i",
    )
    assert [(r["word"], r["hex"]) for r in records(parsed)] == [("ABC", "ff"), ("abc", "FF")]
    assert parse("x\n", expression=r"(?<a>\w+)").table.column("a").to_pylist() == ["x"]
    assert parse("é\n", expression=r"^(?<a>\w+)$").rejected[0].reason.startswith("line 1: pattern not matched")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "'expression' parameter is required"),
        ({"expression": "(a)"}, "No named captures"),
        ({"expression": "/(?<a>x)/q"}, "invalid regexp"),
        ({"expression": "(?<a>x", "time_format": "%Y"}, "invalid regexp"),
        ({"expression": "(?<a>x)", "types": "a:number"}, "unknown value conversion for key:'a', type:'number'"),
    ],
)
def test_bad_options_are_refused(options: dict, message: str) -> None:
    with pytest.raises(ParseConfigError, match=message):
        parse("x\n", **options)


def test_none_parser() -> None:
    config = ParseConfig("none", message_key="log")
    # blank lines too, and \r\n ends a line (as fluentd's in_tail gives them)
    parsed = parse_log(fluent_format(config), b"a b  \n\n  \n\xc3\xbc \r\n", LogOptions(now=NOW, keep_blank=True))
    assert [r["log"] for r in records(parsed)] == ["a b  ", "", "  ", "ü "]
    assert {r["time"] for r in records(parsed)} == {NOW}
    config = ParseConfig("none", estimate_current_event=False)
    assert [r.reason for r in parse_log(fluent_format(config), b"a\n", LogOptions(now=NOW)).rejected] == [
        "line 1: pattern not matched"
    ]


def test_lines_are_matched_as_bytes_as_in_tail_does() -> None:
    # in_tail reads lines as binary strings: "." is one byte, "ü" two (checked on fluentd's in_tail)
    assert (
        parse("ü|x\nab|c\n", expression=r"^(?<a>.)\|(?<b>.*)$")
        .rejected[0]
        .reason.startswith("line 1: pattern not matched")
    )
    assert records(parse("ü|x\n", expression=r"^(?<a>.{1,2})\|(?<b>.*)$")) == [{"time": NOW, "a": "ü", "b": "x"}]
    assert records(parse("ü\n", expression=r"^(?<a>.)(?<b>.*)$")) == [{"time": NOW, "a": "\\xc3", "b": "\\xbc"}]


def test_a_whole_section_as_in_tail_gave_it() -> None:
    # in_tail + out_file json of fluentd 1.14.6 with this section (its to_fluentd() text) wrote these records
    lines = (
        "a [02/Jan/2020:03:04:05 +0900] 200 hello\nbad\nb [xx] 1 q\nc [02/Jan/2020:03:04:05 Z] x\n"
        "d [02/Jan/2020:03:04:05 +09:00] 12abc -\ne [02/Jan/2020:03:04:05 +0900] 1_000 a-b\nf [] 7 ü\n"
        "g [02/Jan/2020:03:04:05 +0900] 99999999999999999999 \n"
    )
    parsed = parse(
        lines,
        expression=r"/^(?<host>\S+) \[(?<time>[^\]]*)\] (?<code>\S+)? ?(?<msg>.*)$/",
        time_format="%d/%b/%Y:%H:%M:%S %z",
        time_type="mixed",
        time_format_fallbacks=["unixtime", "%Y"],
        keep_time_key=True,
        types="code:integer,msg:array:-",
        null_value_pattern="^-$",
        null_empty_string=True,
        estimate_current_event=False,
        utc=True,
    )
    tokyo, utc = 1577901845000000000, 1577934245000000000
    assert records(parsed) == [
        {"time": tokyo, "host": "a", "time_text": "02/Jan/2020:03:04:05 +0900", "code": 200, "msg": '["hello"]'},
        {"time": utc, "host": "c", "time_text": "02/Jan/2020:03:04:05 Z", "code": 0, "msg": None},
        {"time": tokyo, "host": "d", "time_text": "02/Jan/2020:03:04:05 +09:00", "code": 12, "msg": None},
        {"time": tokyo, "host": "e", "time_text": "02/Jan/2020:03:04:05 +0900", "code": 1000, "msg": '["a", "b"]'},
        # fluentd keeps the bignum 99999999999999999999; an int64 column cannot: null
        {"time": tokyo, "host": "g", "time_text": "02/Jan/2020:03:04:05 +0900", "code": None, "msg": None},
    ]
    assert [r.reason for r in parsed.rejected] == [
        "line 2: pattern not matched: the line matches the expression through field 'host', not through 'time'",
        "line 3: invalid time format: value = xx",
        "line 7: invalid time format: value = ",
    ]


def test_types_array_with_an_empty_delimiter_splits_characters() -> None:
    # fluentd splits types on commas ("tags:array:" keeps an empty delimiter); Ruby's split("") gives characters
    parsed = parse("a,b\n\n", expression=r"/^(?<tags>.*)$/", types="tags:array:,")
    assert [r["tags"] for r in records(parsed)] == [json.dumps(["a", ",", "b"]), json.dumps([])]
