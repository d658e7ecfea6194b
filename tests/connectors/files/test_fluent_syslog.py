"""fluentd's syslog parser: records, times and rejections as fluentd 1.14.6 gives them (the differential test checks
the same against the real fluentd), and the column-at-once road against the line-by-line one."""

from __future__ import annotations

import calendar
import os
import random
import time
from collections.abc import Iterator

import pytest

from windvane.connectors.files.logs import LogOptions, parse_log
from windvane.connectors.files.logs.fluent import PARSERS, ParseConfig, ParseConfigError, fluent_format
from windvane.connectors.files.logs.fluent.config import TIME_KEY_DEFAULTS
from windvane.connectors.files.logs.fluent.parsers.syslog import SyslogParser
from windvane.connectors.files.logs.lines import split_lines

NOW = 1_700_000_000_000_000_000  # 2023-11-14T22:13:20Z
SECOND = 1_000_000_000


@pytest.fixture
def zone(request) -> Iterator[None]:
    """The machine's zone is ``request.param`` (default UTC) meanwhile (fluentd reads year-less times in it)."""
    before = os.environ.get("TZ")
    os.environ["TZ"] = getattr(request, "param", "UTC")
    time.tzset()
    yield
    if before is None:
        del os.environ["TZ"]
    else:
        os.environ["TZ"] = before
    time.tzset()


def parse(lines: list[str], now: int = NOW, **options):
    config = ParseConfig.from_mapping({"type": "syslog", **options})
    return parse_log(fluent_format(config), "".join(line + "\n" for line in lines).encode(), LogOptions(now=now))


def records(parsed) -> list[dict]:
    return [{k: v for k, v in row.items() if v is not None} for row in parsed.table.to_pylist()]


def reasons(parsed) -> list[str]:
    return [r.reason for r in parsed.rejected]


def utc(text: str) -> int:
    return calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%S")) * SECOND


def test_registered_with_fluentd_defaults() -> None:
    assert PARSERS["syslog"] is SyslogParser
    assert TIME_KEY_DEFAULTS["syslog"] == "time"
    assert ParseConfig("syslog").with_priority is False  # fluentd 1.14's parser default (in_syslog's is true)
    assert "with_priority true" in ParseConfig("syslog", with_priority=True).to_fluentd()


@pytest.mark.parametrize("options", [{"message_format": "rfc3339"}, {"parser_type": "fast"}])
def test_unknown_choices_are_refused(options) -> None:
    with pytest.raises(ParseConfigError, match="valid options are"):
        SyslogParser(ParseConfig("syslog", **options))


def test_timezone_without_time_format_is_fine_for_syslog() -> None:
    ParseConfig("syslog", timezone="Asia/Tokyo")  # syslog has a default time_format
    with pytest.raises(ParseConfigError):
        ParseConfig("regexp", timezone="Asia/Tokyo")


@pytest.mark.parametrize("engine", ["regexp", "string"])
def test_rfc3164_record_and_year_from_the_clock(zone, engine) -> None:
    parsed = parse(["Feb 28 12:00:00 192.168.0.1 fluentd[11111]: [error] Syslog test"], parser_type=engine)
    assert records(parsed) == [
        {
            "time": utc("2023-02-28T12:00:00"),
            "host": "192.168.0.1",
            "ident": "fluentd",
            "pid": "11111",
            "message": "[error] Syslog test",
        }
    ]


@pytest.mark.parametrize("zone", ["Asia/Tokyo"], indirect=True)
def test_the_year_is_the_machines_local_one(zone) -> None:
    new_year_in_tokyo = utc("2024-12-31T23:30:00")  # already 2025 there
    parsed = parse(["Mar  1 09:00:00 host app: x"], now=new_year_in_tokyo)
    assert records(parsed)[0]["time"] == utc("2025-03-01T00:00:00")


@pytest.mark.parametrize("zone", ["Europe/Paris"], indirect=True)
def test_a_yearless_summer_time_read_in_winter_as_utc_is_an_hour_off_as_in_fluentd(zone) -> None:
    winter = utc("2023-01-15T12:00:00")
    parsed = parse(["Jul  1 12:00:00 host app: summer", "Jan  2 12:00:00 host app: winter"], now=winter, utc=True)
    # fluentd: the strptime gem's Time has the machine's offset now (+01:00), not July's (+02:00)
    assert [r["time"] for r in records(parsed)] == [utc("2023-07-01T11:00:00"), utc("2023-01-02T12:00:00")]


def test_priority_is_an_integer_and_required_when_asked(zone) -> None:
    lines = ["<0>Mar  1 00:00:00 h a: zero", "<191>Mar  1 00:00:00 h a: max", "Mar  1 00:00:00 h a: none"]
    for engine in ("regexp", "string"):
        parsed = parse(lines, with_priority=True, parser_type=engine)
        assert [r["pri"] for r in records(parsed)] == [0, 191]
        assert reasons(parsed) == ["line 3: pattern not matched"]
    assert reasons(parse(["<13>Mar  1 00:00:00 h a: x"]))[0].startswith("line 1: invalid line found: invalid time")


def test_engines_differ_where_fluentds_do(zone) -> None:
    line = "Mar  1 00:00:00 host app message"
    assert records(parse([line]))[0] | {"time": 0} == {"time": 0, "host": "host", "ident": "app", "message": "message"}
    string = parse([line], parser_type="string", support_colonless_ident=False)
    assert records(string)[0]["message"] == "app message"
    assert reasons(parse(["Mar  1 00:00:00 host app] x"], parser_type="string")) == [
        "line 1: invalid line found: undefined method `-' for nil:NilClass"
    ]


@pytest.mark.parametrize("engine", ["regexp", "string"])
def test_rfc5424_fields_nil_values_and_times(engine) -> None:
    lines = [
        '<16>1 2013-02-28T12:00:00.003Z 192.168.0.1 fluentd 11111 ID24224 [exampleSDID@20224 iut="3"] Hi, from Fluentd!',
        "<16>1 2024-03-01T00:00:00+01:00 host app - - -",
        "<16>1 2024-03-01T00:00:00.123456789Z host app 1 ID - nanoseconds",
        "<16>1 - host app - - - nil time",
    ]
    parsed = parse(lines, message_format="rfc5424", with_priority=True, parser_type=engine)
    assert records(parsed) == [
        {
            "time": utc("2013-02-28T12:00:00") + 3_000_000,
            "pri": 16,
            "host": "192.168.0.1",
            "ident": "fluentd",
            "pid": "11111",
            "msgid": "ID24224",
            "extradata": '[exampleSDID@20224 iut="3"]',
            "message": "Hi, from Fluentd!",
        },
        {"time": utc("2024-02-29T23:00:00"), "pri": 16, "host": "host", "ident": "app", "pid": "-", "msgid": "-"}
        | {"extradata": "-"},
        {"time": utc("2024-03-01T00:00:00") + 123456789, "pri": 16, "host": "host", "ident": "app", "pid": "1"}
        | {"msgid": "ID", "extradata": "-", "message": "nanoseconds"},
    ]
    assert reasons(parsed) == ["line 4: invalid line found: invalid time format: value = -"]


def test_auto_tells_the_protocols_apart_per_line(zone) -> None:
    parsed = parse(
        ["<16>1 2013-02-28T12:00:00Z h app 1 ID - five", "<6>Feb 28 12:00:00 h app[1]: three", "garbage"],
        message_format="auto",
        with_priority=True,
        keep_time_key=True,
    )
    rows = records(parsed)
    assert [(r["pri"], r["message"], r.get("msgid"), r["time_text"]) for r in rows] == [
        (16, "five", "ID", "2013-02-28T12:00:00Z"),
        (6, "three", None, "Feb 28 12:00:00"),
    ]
    assert reasons(parsed) == ["line 3: pattern not matched"]


def test_types_and_null_values_do_not_apply_as_in_fluentd(zone) -> None:
    parsed = parse(["Mar  1 00:00:00 - app[12]: -"], types="pid:integer", null_value_pattern="/^-$/")
    assert records(parsed)[0] | {"time": 0} == {"time": 0, "host": "-", "ident": "app", "pid": "12", "message": "-"}


_ODD = [" ", "  ", ":", "]:", "[", "]", "[7]", "-", "\\", "é", "\r", "<>", "<1a>", '[a@1 x="y\\]"]', "] "]


def _odd_lines(count: int) -> list[str]:
    """RFC 3164 and 5424 lines from random parts, some odd, and some with an odd piece put anywhere."""
    rng = random.Random(7)

    def pick(*choices: str) -> str:
        return rng.choice(choices)

    out = []
    for _ in range(count):
        pri = pick("", "<13>", "<0>", "<191>", "<1000>", "<abc>", "<>")
        if rng.random() < 0.5:
            stamp = pick("Mar  1 00:00:00", "Mar 01 00:00:00", "Mar  1 00:00:00.25", "Mar   1 00:00:00", "Foo  1 0:0:0")
            tag = pick("app:", "app[12]:", "app[12]", "app", "a:b:", "app]:", "app[x]y:", ":", "", "[1]:")
            line = pri + stamp + pick(" ", "  ") + pick("host", "hôte", "") + pick(" ", "  ", "") + tag
        else:
            stamp = pick("2024-03-01T00:00:00Z", "2024-03-01T00:00:00.123+01:00", "-", "2024-03-01T00:00:00")
            fields = " ".join(pick("h", "app", "1", "ID", "-", "", "x" * 60) for _ in range(rng.randint(2, 5)))
            sd = pick("-", "[a@1]", '[a@1 x="\\]"][b@2]', "[]", "[a@1]x]", "x", "")
            head = pick("", "", "<13>1 ", "<191>12 ", "<16>0 ", "<abc>1 ", "<>1 ", "<1000>1 ", "<13>", "<13>1\t")
            line = head + stamp + " " + fields + " " + sd
        line += pick("", " ", " message: text", " é ☃", " [x]: y", "\r")
        if rng.random() < 0.3:
            at = rng.randint(0, len(line))
            line = line[:at] + rng.choice(_ODD) + line[at:]
        out.append(line)
    return [line for line in out if line.strip()]


@pytest.mark.parametrize("engine", ["regexp", "string"])
@pytest.mark.parametrize("message_format", ["rfc3164", "rfc5424", "auto"])
@pytest.mark.parametrize("priority", [False, True])
@pytest.mark.parametrize("colonless", [True, False])
@pytest.mark.parametrize("formats", [{}, {"time_format": "%b  %d %H:%M:%S", "rfc5424_time_format": "%Y-%m-%d %H"}])
def test_the_column_road_reads_as_the_line_road(zone, engine, message_format, priority, colonless, formats) -> None:
    config = ParseConfig(
        "syslog",
        parser_type=engine,
        message_format=message_format,
        with_priority=priority,
        support_colonless_ident=colonless,
        **formats,
    )
    lines, _ = split_lines("".join(line + "\n" for line in _odd_lines(3000)).encode(), now=NOW, keep_blank=True)
    fast = SyslogParser(config)
    slow = SyslogParser(config)
    slow.regexps = slow.stamps = {False: None, True: None}
    a, b = fast.parse(lines, LogOptions(now=NOW)), slow.parse(lines, LogOptions(now=NOW))
    assert a.faults == b.faults
    kept = [i for i in range(len(lines)) if i not in a.faults]  # a rejected line's values are no one's
    assert {k: [v[i] for i in kept] for k, v in a.columns.items()} == {
        k: [v[i] for i in kept] for k, v in b.columns.items()
    }
    assert formats or len(lines) - len(a.faults) > 5  # not all rejected (the lines are in the default formats)


def test_parser_engine_is_fluentds_name_for_parser_type() -> None:
    assert ParseConfig.from_mapping({"type": "syslog", "parser_engine": "string"}).parser_type == "string"


def test_windvane_import_stores_rfc5424_lines_read_as_fluentd(sqlite_url, tmp_path) -> None:
    from click.testing import CliRunner

    from windvane import arrays
    from windvane.cli import cli

    log = tmp_path / "app.log"
    log.write_text(
        '<165>1 2003-10-11T22:14:15.003Z h app 1 ID [a@1 x="y"] café\n'
        "<16>1 2003-10-11T22:14:16Z h app - - -\n"
        "not syslog\n"
    )
    parser = tmp_path / "syslog.toml"
    parser.write_text("type = 'syslog'\nmessage_format = 'rfc5424'\nwith_priority = true\n")
    result = CliRunner().invoke(cli, ["import", str(log), "--store", sqlite_url, "--tag", "t", "--parser", str(parser)])
    assert result.exit_code == 3, result.output  # a line was quarantined
    with arrays.open_stream(sqlite_url, "t") as stream:
        rows = stream.to_pandas().reset_index().to_dict("records")
    assert next((r["pri"], r["pid"], r["extradata"], r["message"]) for r in rows) == (165, "1", '[a@1 x="y"]', "café")
    assert rows[1]["pid"] == "-" and not rows[1]["message"]  # no message (the stream's text column holds it empty)
    assert [r["time"].value if hasattr(r["time"], "value") else r["time"] for r in rows] == [
        utc("2003-10-11T22:14:15") + 3_000_000,
        utc("2003-10-11T22:14:16"),
    ]
    quarantine = arrays.open_stream(sqlite_url, "t", quarantine=True)
    assert quarantine["reason"][:].tolist() == ["line 3: pattern not matched"]
