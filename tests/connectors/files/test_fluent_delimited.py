"""fluentd's csv, tsv and ltsv parsers and the logfmt parser, without fluentd: Ruby's splitting and CSV rules,
the Arrow path against the line-by-line one, and the records. Expected values are what fluentd 1.14.6 (Ruby
3.1, csv 3.2) gives for the same lines (the differential test checks the corpus against the real fluentd)."""

from __future__ import annotations

import random

import pytest

from windvane.connectors.files.logs import LogOptions, parse_log
from windvane.connectors.files.logs.fluent import PARSERS, ParseConfig, ParseConfigError, fluent_format
from windvane.connectors.files.logs.fluent.config import TIME_KEY_DEFAULTS
from windvane.connectors.files.logs.fluent.rubycsv import MalformedCSV, csv_line, fast_line
from windvane.connectors.files.logs.fluent.rubysplit import ruby_split

NOW = 1_700_000_000_123_456_789
SECOND = 1_000_000_000


def parse(text: str | bytes, **options):
    config = ParseConfig.from_mapping(options)
    data = text.encode() if isinstance(text, str) else text
    return parse_log(fluent_format(config), data, LogOptions(now=NOW, keep_blank=True))


def records(parsed) -> list[dict]:
    return [{k: v for k, v in row.items() if v is not None} for row in parsed.table.to_pylist()]


def rejected(parsed) -> list[tuple[int, str]]:
    return [(r.line, r.reason) for r in parsed.rejected]


def test_registered_with_their_time_keys() -> None:
    assert {"csv", "tsv", "ltsv", "logfmt"} <= set(PARSERS)
    assert [TIME_KEY_DEFAULTS[t] for t in ("csv", "tsv", "ltsv", "logfmt")] == [None, None, "time", "time"]


@pytest.mark.parametrize(
    ("text", "separator", "limit", "ruby"),
    [
        ("a\tb\t", "\t", 0, ["a", "b"]),
        ("a\tb\t", "\t", 3, ["a", "b", ""]),
        ("a\tb\tc\td", "\t", 2, ["a", "b\tc\td"]),
        ("", "\t", 3, []),
        (" a  b  c ", " ", 2, ["a", "b  c "]),
        ("a ", " ", 2, ["a", ""]),
        ("  ", " ", 2, [""]),
        ("a\tb c", " ", 0, ["a", "b", "c"]),
        ("ab", "", 3, ["a", "b", ""]),
        ("é", "", 0, ["\\xc3", "\\xa9"]),
    ],
)
def test_ruby_split(text, separator, limit, ruby) -> None:
    assert ruby_split(text, separator, limit) == ruby


@pytest.mark.parametrize(
    ("line", "fields"),
    [
        ('a,"b,c","d""e"', ["a", "b,c", 'd"e']),
        ('"",,x,', ["", None, "x", None]),
        ('"cr\rin",x\ry,"z', ["cr\rin", "x"]),  # a carriage return ends the row outside quotes
        ("\rx", [None]),
        ("", None),
    ],
)
def test_csv_line(line, fields) -> None:
    assert csv_line(line, ",") == fields


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('"open', "Unclosed quoted field in line 1."),
        ('a,"b""', "Unclosed quoted field in line 1."),
        ('"a" ,b', "Any value after quoted field isn't allowed in line 1."),
        ('a"b', "Illegal quoting in line 1."),
        (' "a"', "Illegal quoting in line 1."),
    ],
)
def test_malformed_csv(line, message) -> None:
    with pytest.raises(MalformedCSV, match=message):
        csv_line(line, ",")


def test_fast_engine_mends_quotes_its_own_way() -> None:
    assert fast_line('"a,b,c",d', ",") == ["a,b,c", "d"]
    assert fast_line('"open,x', ",") == ["open,"]  # joined to the end, then first and last character dropped
    assert fast_line('"""q""",a""b,"x"y', ",") == ['"q"', 'a""b', '"x"y']
    assert fast_line(",,", ",") == [None, None, None]


def test_csv_records_keys_and_faults() -> None:
    parsed = parse(
        '1700000000,a,b,extra\n1700000001,"x, y"\n,z\n1700000002,"bad\n\n',
        type="csv",
        keys="time,k1,k2",
        time_key="time",
        time_type="unixtime",
    )
    assert records(parsed) == [
        {"time": 1700000000 * SECOND, "k1": "a", "k2": "b"},
        {"time": 1700000001 * SECOND, "k1": "x, y"},
    ]
    assert rejected(parsed) == [
        (3, "line 3: value must be a string or a number: (NilClass)"),
        (4, "line 4: Unclosed quoted field in line 1."),
        (5, "line 5: wrong argument type NilClass (must respond to :each)"),  # fluentd fails on a blank line
    ]


def test_csv_fast_engine_keeps_extra_values_under_the_empty_name() -> None:
    parsed = parse('a,b,c,d\n"x,y"\n', type="csv", keys="k1,k2", parser_engine="fast")
    assert records(parsed) == [{"time": NOW, "k1": "a", "k2": "b", "": "d"}, {"time": NOW, "k1": "x,y"}]
    with pytest.raises(ParseConfigError, match="valid options are normal,fast but got quick"):
        fluent_format(ParseConfig.from_mapping({"type": "csv", "keys": "a", "parser_type": "quick"}))
    with pytest.raises(ParseConfigError, match="'keys' parameter is required"):
        fluent_format(ParseConfig.from_mapping({"type": "csv"}))


def test_csv_normal_engine_refuses_every_line_with_a_non_ascii_delimiter() -> None:
    # fluentd's CSV cannot convert the delimiter to in_tail's binary lines: Encoding::UndefinedConversionError for
    # every line (seen with the vendored fluentd; no corpus case: the oracle wants a case to parse some line)
    parsed = parse("a\u2603b\nab\n", type="csv", keys="k1,k2", delimiter="\u2603")
    assert rejected(parsed) == [(n, f"line {n}: U+2603 from UTF-8 to ASCII-8BIT") for n in (1, 2)]


def expected_csv(line: str, engine: str, keys: list[str]) -> dict | None:
    """The record fluentd makes of ``line`` (None: rejected), from the line-by-line readers."""
    if engine == "fast":
        values = fast_line(line, ",")
        record = dict(zip(keys, values))
        return record | ({"": values[-1]} if len(values) > len(keys) else {})
    try:
        values = csv_line(line, ",")
    except MalformedCSV:
        return None
    return None if values is None else dict(zip(keys, values + [None] * len(keys)))


@pytest.mark.parametrize("engine", ["normal", "fast"])
def test_arrow_and_python_csv_read_as_the_line_by_line_reader(engine) -> None:
    pick = random.Random(7)
    chars = ["a", ",", '"', '""', "\u00e9", " ", "\r"]
    lines = ["".join(pick.choice(chars) for _ in range(pick.randint(0, 9))) for _ in range(3000)]
    config = ParseConfig.from_mapping({"type": "csv", "keys": "a,b,c", "parser_engine": engine})
    parsed = parse_log(fluent_format(config), "\n".join(lines).encode() + b"\n", LogOptions(now=NOW, keep_blank=True))
    # in_tail, as split_lines, takes "\r\n" for the line's end
    expected = [expected_csv(line.removesuffix("\r"), engine, ["a", "b", "c"]) for line in lines]
    assert {r.line - 1 for r in parsed.rejected} == {n for n, e in enumerate(expected) if e is None}
    got = [{k: v for k, v in row.items() if k != "time" and v is not None} for row in parsed.table.to_pylist()]
    assert got == [{k: v for k, v in e.items() if v is not None} for e in expected if e is not None]


def test_tsv_last_key_takes_the_rest_and_missing_values_are_nil() -> None:
    parsed = parse("a\tb\tc\td\na\n", type="tsv", keys="k1,k2,k3")
    assert records(parsed) == [{"time": NOW, "k1": "a", "k2": "b", "k3": "c\td"}, {"time": NOW, "k1": "a"}]
    parsed = parse("x\n", type="tsv", keys="k,time", time_key="time", time_format="%Y")
    assert rejected(parsed) == [(1, "line 1: value must be string: ")]
    assert records(parse("  a   b  c\n", type="tsv", keys="k1,k2", delimiter=" ")) == [
        {"time": NOW, "k1": "a", "k2": "b  c"}
    ]


def test_ltsv_labels() -> None:
    parsed = parse(
        "time:2024-03-01 00:00:00\ta:1\ta:2\tb:\tnovalue\tc:x:y\n:e\n",
        type="ltsv",
        time_format="%Y-%m-%d %H:%M:%S",
        timezone="+00:00",
    )
    assert records(parsed) == [
        {"time": 1709251200 * SECOND, "a": "2", "b": "", "c": "x:y"},
        {"time": NOW, "": "e"},
    ]
    assert records(parse("a=1  b=2,c=3\n", type="ltsv", delimiter_pattern="/[ ,]+/", label_delimiter="=")) == [
        {"time": NOW, "a": "1", "b": "2", "c": "3"}
    ]
    parsed = parse("caf\u00e9\u2192x\tplain\u2192y\n", type="ltsv", label_delimiter="\u2192")
    assert rejected(parsed) == [(1, "line 1: incompatible character encodings: ASCII-8BIT and UTF-8")]


def test_logfmt_records_and_refusals() -> None:
    parsed = parse(
        'time=1700000000 level=info msg="hello \\"you\\"" flag a=1 a=2\nk=a=b\n',
        type="logfmt",
        time_type="unixtime",
    )
    assert records(parsed) == [
        {"time": 1700000000 * SECOND, "level": "info", "msg": 'hello "you"', "flag": "", "a": "2"}
    ]
    assert rejected(parsed) == [(2, "line 2: logfmt syntax error at pos 4 on line 1: unexpected '='")]


def test_ltsv_arrow_and_line_by_line_agree() -> None:
    pick = random.Random(11)
    lines = [
        "".join(pick.choice(["a", ":", "\t", "é", "b", " "]) for _ in range(pick.randint(0, 12))) for _ in range(2000)
    ]
    data = "\n".join(lines).encode() + b"\n"
    arrow = parse(data, type="ltsv", time_key="none")  # a tab: Arrow splits
    by_line = parse(data, type="ltsv", time_key="none", delimiter_pattern="/\t/")  # a regexp: line by line
    assert records(arrow) == records(by_line)
    assert [{k: v for k, v in row.items() if k != "time"} for row in records(arrow)][:3] == [
        {k: v for k, v in (p.split(":", 1) for p in line.split("\t") if ":" in p)} for line in lines[:3]
    ]
