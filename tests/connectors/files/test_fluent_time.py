"""fluentd's time parsing (time_format, time_type, timezone, utc): the expected values are what fluentd 1.14.6's
own TimeParser gives for each text (run by hand on the vendored fluentd)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from windvane.connectors.files.logs.fluent import ParseConfig, ParseConfigError, TimeParser
from windvane.connectors.files.logs.fluent.rubynum import ruby_to_f, ruby_to_i

NOW = 1_795_662_245_000_000_000  # 2026-11-26T03:04:05Z
BAD = None


def times(texts: list[str], **options) -> list[int | None]:
    config = ParseConfig("regexp", expression="(?<x>.)", **options)
    values, bad = TimeParser(config).parse(pa.array(texts, pa.large_string()), NOW)
    return [None if b else int(v) for v, b in zip(values.tolist(), bad.tolist())]


@pytest.mark.parametrize(
    ("fmt", "text", "expected"),
    [
        # %N and %L take every digit as the fraction, kept to the nanosecond; what follows is ignored
        ("%Y-%m-%d %H:%M:%S.%N", "2020-01-02 03:04:05.12", 1577934245120000000),
        ("%Y-%m-%d %H:%M:%S.%N", "2020-01-02 03:04:05.123456789123", 1577934245123456789),
        ("%Y-%m-%d %H:%M:%S.%N", "2020-01-02 03:04:05.5x", 1577934245500000000),
        ("%Y-%m-%d %H:%M:%S.%L", "2020-01-02 03:04:05.1234", 1577934245123400000),
        ("%Y-%m-%d %H:%M:%S.%L", "2020-01-02 03:04:05", BAD),
        # Ruby's strptime has no widths: %3N never matches
        ("%Y-%m-%d %H:%M:%S.%3N", "2020-01-02 03:04:05.123", BAD),
        # %z forms
        ("%d/%b/%Y:%H:%M:%S %z", "02/Jan/2020:03:04:05 +0900", 1577901845000000000),
        ("%d/%b/%Y:%H:%M:%S %z", "02/jan/2020:03:04:05 +09:00", 1577901845000000000),
        ("%d/%b/%Y:%H:%M:%S %z", "02/JAN/2020:03:04:05 Z", 1577934245000000000),
        ("%d/%b/%Y:%H:%M:%S %z", "02/Jan/2020:03:04:05 -0130", 1577939645000000000),
        ("%d/%b/%Y:%H:%M:%S %z", "02/Jan/2020:03:04:05 +09", 1577901845000000000),
        ("%d/%b/%Y:%H:%M:%S %z", "02/Jan/2020:03:04:05 UTC", BAD),
        ("%d/%b/%Y:%H:%M:%S %z", "02/Jan/2020:03:04:05", BAD),
        ("%d/%b/%Y:%H:%M:%S %z", "02/January/2020:03:04:05 +0900", 1577901845000000000),
        ("%Y-%m-%d %H:%M:%S %Z", "2020-01-02 03:04:05 JST", 1577934245000000000),
        ("%d/%b/%Y:%H:%M:%S %z", "02/Sep/2020:03:04:05 +9", 1598983445000000000),
        ("%d/%b/%Y:%H:%M:%S %z", "02/Sep/2020:03:04:05 +09:30", 1598981645000000000),
        ("%d/%b/%Y:%H:%M:%S %z", "02/Sep/2020:03:04:05 -00:00", 1599015845000000000),
        ("%d/%b/%Y:%H:%M:%S %z", "02/Sep/2020:03:04:05 +2400", BAD),
        ("%d/%b/%Y:%H:%M:%S %z", "02/Sept/2020:03:04:05 +0900", BAD),
        # %s: seconds since the epoch, a fraction after it ignored
        ("%s", "1600000000", 1600000000000000000),
        ("%s", "1600000000.5", 1600000000000000000),
        ("%s", "-5", -5000000000),
        ("%s", "1600000000123", BAD),  # fluentd: the year 52671; past what int64 ns hold
        ("%s", "16000000001230000000000", BAD),
        # day of the year
        ("%Y %j", "2020 060", 1582934400000000000),
        ("%Y %j", "2019 366", BAD),
        # a space matches any run of white space, or none; the text must start with the time
        ("%Y-%m-%d %H:%M:%S", "2020-01-02   03:04:05", 1577934245000000000),
        ("%Y-%m-%d %H:%M:%S", "2020-01-0203:04:05", 1577934245000000000),
        ("%Y-%m-%d %H:%M:%S", "2020-01-02 03:04:05xyz", 1577934245000000000),
        ("%Y-%m-%d %H:%M:%S", " 2020-01-02 03:04:05", BAD),
        # days past the month's end roll over (up to 31); hour 24, day 32, month 13 do not
        ("%Y-%m-%d %H:%M:%S", "2020-02-30 00:00:00", 1583020800000000000),
        ("%Y-%m-%d %H:%M:%S", "2020-04-31 00:00:00", 1588291200000000000),
        ("%Y-%m-%d %H:%M:%S", "2020-04-32 00:00:00", BAD),
        ("%Y-%m-%d %H:%M:%S", "2020-01-02 24:00:00", BAD),
        ("%Y-%m-%d %H:%M:%S", "2020-1-2 3:4:5", 1577934245000000000),
        ("%Y-%m-%d %H:%M:%S", "20200-01-02 03:04:05", BAD),
        ("%Y-%m-%d %H:%M:%S", "2020-01-02 03:04:60", 1577934300000000000),
        ("%Y-%m-%d %H:%M:%S", "2020-01-02 03:04:61", BAD),
        ("%Y-%m-%d %H:%M:%S", "2020-01-02 003:04:05", BAD),
        ("%Y-%m-%dT%H:%M:%S.%NZ", "2020-01-02T03:04:05.123456Z", 1577934245123456000),
        ("%Y-%m-%dT%H:%M:%S.%N%z", "2020-01-02T03:04:05.123456Z", 1577934245123456000),
        ("%Y-%m-%d %H:%M:%S.%L", "2020-13-01 00:00:00.1", BAD),
        # 12-hour clock, two-digit years, weekday names
        ("%Y-%m-%d %I:%M:%S %p", "2020-01-02 03:04:05 PM", 1577977445000000000),
        ("%Y-%m-%d %I:%M:%S %p", "2020-01-02 12:04:05 AM", 1577923445000000000),
        ("%Y-%m-%d %I:%M:%S %p", "2020-01-02 12:04:05 pm", 1577966645000000000),
        ("%y-%m-%d", "20-01-02", 1577923200000000000),
        ("%y-%m-%d", "70-01-02", 86400000000000),
        ("%a %b %e %H:%M:%S %Y", "Thu Jan  2 03:04:05 2020", 1577934245000000000),
        # missing fields: the current year, January 1st; no date at all: today
        ("%Y", "2020", 1577836800000000000),
        ("%m-%d", "01-02", 1767312000000000000),
        ("%H:%M:%S", "03:04:05", 1795662245000000000),
        ("%iso8601", "2020-01-02T03:04:05.123+09:00", 1577901845123000000),
        ("%iso8601", "2020-01-02T03:04:05Z", 1577934245000000000),
    ],
)
def test_time_format_as_fluentd(fmt: str, text: str, expected: int | None, monkeypatch) -> None:
    monkeypatch.setenv("TZ", "UTC")  # missing fields are the machine's date now
    assert times([text], time_format=fmt, utc=True) == [expected]


def test_unicode_and_empty_texts_are_not_times() -> None:
    assert times(
        ["", "\uff12\uff10\uff12\uff10-01-02 03:04:05", "2020-01-02 03:04:05"],
        time_format="%Y-%m-%d %H:%M:%S",
        utc=True,
    ) == [
        BAD,
        BAD,
        1577934245000000000,
    ]


@pytest.mark.parametrize(
    ("zone", "text", "expected"),
    [
        ("Asia/Tokyo", "2020-01-02 03:04:05", 1577901845000000000),
        ("Europe/Paris", "2020-01-02 03:04:05", 1577930645000000000),  # CET
        ("Europe/Paris", "2020-07-02 03:04:05", 1593651845000000000),  # CEST
        ("+09:00", "2020-01-02 03:04:05", 1577901845000000000),
        ("-0330", "2020-01-02 03:04:05", 1577946845000000000),
    ],
)
def test_timezone_of_times_without_one(zone: str, text: str, expected: int) -> None:
    assert times([text], time_format="%Y-%m-%d %H:%M:%S", timezone=zone) == [expected]


def test_a_written_zone_wins_over_timezone() -> None:
    assert times(["2020-01-02 03:04:05 +09:00"], time_format="%Y-%m-%d %H:%M:%S %z", timezone="Europe/Paris") == [
        1577901845000000000
    ]


def test_timezone_needs_a_time_format() -> None:
    for options in ({"timezone": "Asia/Tokyo"}, {"utc": True}, {"localtime": False}):
        with pytest.raises(ParseConfigError, match="requires time format"):
            ParseConfig("regexp", **options)


def test_unknown_directive_is_refused() -> None:
    with pytest.raises(ParseConfigError, match="unknown directive %Q"):
        times(["x"], time_format="%Q")


def test_unixtime_is_ruby_to_i_seconds() -> None:
    assert times(["1600000000", "1600000000.9", " 16", "abc", "-5"], time_type="unixtime") == [
        1600000000 * 10**9,
        1600000000 * 10**9,
        16 * 10**9,
        0,
        -5 * 10**9,
    ]


def test_float_time() -> None:
    # fluentd: seconds before the first dot, the next ten characters as nanoseconds (shorter padded to nine)
    assert times(["1600000000.123", "1600000000", "1.5.7", "-1.5", "1.1234567891"], time_type="float") == [
        1600000000123000000,
        1600000000000000000,
        1500000000,
        -500000000,
        1000000000 + 1234567891,
    ]


def test_ruby_number_conversions() -> None:
    texts = pa.array(["12abc", "abc", " -7", "1_000", "+5", "0x1A", "", None, "99999999999999999999"])
    numbers, over = ruby_to_i(texts)
    assert numbers.tolist()[:8] == [12, 0, -7, 1000, 5, 0, 0, 0]
    assert over.tolist() == [False] * 8 + [True]
    floats = ruby_to_f(pa.array(["1.5e3", "abc", ".5", "1.", "1e", " -2.5x", "1_0.5"]))
    assert floats.tolist() == [1500.0, 0.0, 0.5, 1.0, 1.0, -2.5, 10.5]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2020-01-02T03:04:05Z", 1577934245000000000),
        ("2020-01-02 03:04:05 +0900", 1577901845000000000),
        ("2020-01-02 03:04:05.5", 1577934245500000000),
        ("Jan 2 03:04:05 2020", 1577934245000000000),
        ("Thu Jan  2 03:04:05 2020", 1577934245000000000),
        ("2020-01-02", 1577923200000000000),
        ("1600000000", BAD),
        ("nonsense", BAD),
        ("", BAD),
        ("Fri, 01 Mar 2024 12:00:00 GMT", 1709294400000000000),
        ("Fri, 01 Mar 2024 12:00:00 +0200", 1709287200000000000),
        ("01 Mar 2024 12:00 UTC", 1709294400000000000),
        ("Fri Mar  1 12:00:00 UTC 2024", 1709294400000000000),
        ("2024/03/01 12:00:00", 1709294400000000000),
        ("2024-03-01 12:00", 1709294400000000000),
        ("2024-03-01T12:00:00.123Z", 1709294400123000000),
        ("2024-03-01T12:00:00-0500", 1709312400000000000),
        ("2024-03-01T12:00:00+05", 1709276400000000000),
        ("2024/03/01T12:00:00.5 +0900", 1709262000500000000),
        ("Fri Mar 1 12:00:00 +0900 2024", 1709262000000000000),
        ("2024-03-0112:00:00", BAD),  # Time.parse wants a space or T between date and time
        ("2024-03-01 12:00:00 EST", BAD),  # Time.parse knows EST (-05:00): not covered, refused
        ("at 2024-03-01 12:00:00", BAD),  # Time.parse picks a time out of a sentence: not covered
    ],
)
def test_no_time_format_reads_what_ruby_time_parse_does(text: str, expected: int | None, monkeypatch) -> None:
    monkeypatch.setenv("TZ", "UTC")  # fluentd's default: the machine's zone
    assert times([text]) == [expected]


def test_localtime_is_the_machines_zone_unless_utc(monkeypatch) -> None:
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    assert times(["2020-01-02 03:04:05"], time_format="%Y-%m-%d %H:%M:%S") == [1577901845000000000]
    assert times(["2020-01-02 03:04:05"]) == [1577901845000000000]
    assert times(["2020-01-02 03:04:05"], time_format="%Y-%m-%d %H:%M:%S", utc=True) == [1577934245000000000]
    assert times(["2020-01-02 03:04:05"], time_format="%Y-%m-%d %H:%M:%S", localtime=False) == [1577934245000000000]


def test_mixed_tries_the_format_then_each_fallback() -> None:
    fallbacks = ("unixtime", "%d/%b/%Y:%H:%M:%S %z", "float")
    texts = ["2020-01-02 03:04:05", "1600000000", "02/Jan/2020:03:04:05 +0900", "1600000000.5", "nope", " 17 "]
    got = times(texts, time_type="mixed", time_format="%Y-%m-%d %H:%M:%S", time_format_fallbacks=fallbacks, utc=True)
    assert got == [
        1577934245000000000,
        1600000000000000000,
        1577901845000000000,
        1600000000500000000,  # fluentd 1.14 reads a "unixtime" fallback as float
        BAD,
        17000000000,
    ]
    with pytest.raises(ParseConfigError, match="time_type is mixed"):
        ParseConfig("regexp", time_type="mixed")


GAP, REPEATED = "2024-03-31 02:30:00", "2024-10-27 02:30:00"  # Paris: skipped by the March change, repeated in October
CEST_0230, CET_0230 = 1729989000000000000, 1729992600000000000  # the two 02:30 of 2024-10-27 in Paris


@pytest.mark.parametrize(
    ("machine", "options", "expected"),
    [
        # localtime: a time in the gap with the offset before it (03:30 CEST); a repeated one the earlier with the
        # strptime gem, the later with Ruby's Time.strptime (%F %T) and Time.parse (no time_format)
        ("Europe/Paris", {"time_format": "%Y-%m-%d %H:%M:%S"}, [1711848600000000000, CEST_0230]),
        ("Europe/Paris", {"time_format": "%F %T"}, [1711848600000000000, CET_0230]),
        ("Europe/Paris", {}, [1711848600000000000, CET_0230]),
        # a named timezone: read in the machine's zone, shifted by the named zone's offset at that instant
        (
            "Europe/Paris",
            {"time_format": "%Y-%m-%d %H:%M:%S", "timezone": "Europe/Paris"},
            [1711848600000000000, CET_0230],
        ),
        ("UTC", {"time_format": "%Y-%m-%d %H:%M:%S", "timezone": "Europe/Paris"}, [1711845000000000000, CET_0230]),
        # a fixed offset: still read in the machine's zone first, its wall clock kept: past the gap (03:30+01:00)
        ("Europe/Paris", {"time_format": "%Y-%m-%d %H:%M:%S", "timezone": "+01:00"}, [1711852200000000000, CET_0230]),
    ],
)
def test_daylight_saving_gap_and_repeated_hour_as_fluentd(machine, options, expected, monkeypatch) -> None:
    monkeypatch.setenv("TZ", machine)
    assert times([GAP, REPEATED], **options) == expected


def test_a_named_timezone_uses_its_offset_at_the_machine_zone_instant(monkeypatch) -> None:
    # 05:00 on New York's March change day, read on a Paris machine: 04:00Z, when New York was still at -05:00
    monkeypatch.setenv("TZ", "Europe/Paris")
    options = {"time_format": "%Y-%m-%d %H:%M:%S", "timezone": "America/New_York"}
    assert times(["2024-03-10 05:00:00"], **options) == [1710064800000000000]


NY_GAP, NY_REPEATED = "2024-03-10 02:30:00", "2024-11-03 01:30:00"  # New York: skipped in March, repeated in November


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        # utc, localtime false, an offset: the machine's wall clock of Ruby's reading (03:30 past the gap), less it
        ({"utc": True}, [1710041400000000000, 1730597400000000000]),
        ({"localtime": False}, [1710041400000000000, 1730597400000000000]),
        ({"timezone": "+00:00"}, [1710041400000000000, 1730597400000000000]),
        ({"timezone": "-0930"}, [1710075600000000000, 1730631600000000000]),
        ({"utc": True, "time_format": "%F %T"}, [1710041400000000000, 1730597400000000000]),
        # a named zone: its offset at the instant the machine's zone gives
        ({"timezone": "Asia/Tokyo"}, [1710009000000000000, 1730565000000000000]),
        # localtime: the gap with the offset before it; the repeated hour the earlier (strptime gem)
        ({}, [1710055800000000000, 1730611800000000000]),
    ],
)
def test_a_zone_reads_the_machines_wall_clock_first(options, expected, monkeypatch) -> None:
    monkeypatch.setenv("TZ", "America/New_York")
    assert times([NY_GAP, NY_REPEATED], **{"time_format": "%Y-%m-%d %H:%M:%S", **options}) == expected


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({}, [1710052200000000000, 0, 5500000000]),
        ({"utc": True}, [1710034200000000000, -18000000000000, -17994500000000]),
        ({"timezone": "+09:00"}, [1710001800000000000, -50400000000000, -50394500000000]),
        ({"timezone": "Asia/Tokyo"}, [1710001800000000000, -50400000000000, -50394500000000]),
    ],
)
def test_epoch_seconds_are_a_machine_zone_time_moved_to_the_zone(options, expected, monkeypatch) -> None:
    # Ruby reads %s as a time of the machine's zone; fluentd moves it like any wall-clock time, unless %z is there
    monkeypatch.setenv("TZ", "America/New_York")
    assert times(["1710052200.0", "0.0", "5.5"], time_format="%s.%N", **options) == expected
    assert times(["0 +0900"], time_format="%s %z", **options) == [0]


def test_iso8601_reads_a_time_without_zone_in_the_machines_zone_whatever_the_options(monkeypatch) -> None:
    monkeypatch.setenv("TZ", "America/New_York")
    texts = [NY_GAP.replace(" ", "T"), NY_REPEATED.replace(" ", "T"), "2024-07-01T12:00:00Z"]
    expected = [1710055800000000000, 1730615400000000000, 1719835200000000000]  # Time.local: the later repeated
    for options in ({}, {"utc": True}, {"timezone": "+09:00"}, {"timezone": "Asia/Tokyo"}):
        assert times(texts, time_format="%iso8601", **options) == expected


SUMMER_NOW = 1_782_907_200_000_000_000  # 2026-07-01T12:00:00Z, New York on daylight saving time


def times_at(now: int, texts: list[str], **options) -> list[int | None]:
    config = ParseConfig("regexp", expression="(?<x>.)", **options)
    values, bad = TimeParser(config).parse(pa.array(texts, pa.large_string()), now)
    return [None if b else int(v) for v, b in zip(values.tolist(), bad.tolist())]


def test_fields_before_the_first_are_the_machines_time_now(monkeypatch) -> None:
    monkeypatch.setenv("TZ", "America/New_York")  # NOW is 2026-11-25 22:04:05 there
    assert times(["03:04:05"], time_format="%H:%M:%S") == [1795593845000000000]
    assert times(["05 10:00"], time_format="%d %H:%M") == [1793890800000000000]  # November, not January


@pytest.mark.parametrize(
    ("now", "options", "expected"),
    [
        # now is standard time: the repeated 01:30 is the later; July's times carry now's -05:00
        (NOW, {}, [1793514600000000000, 1782921600000000000]),
        (NOW, {"utc": True}, [1793496600000000000, 1782903600000000000]),
        # now is daylight saving time: the earlier; -04:00 carried
        (SUMMER_NOW, {}, [1793511000000000000, 1782921600000000000]),
        (SUMMER_NOW, {"utc": True}, [1793496600000000000, 1782907200000000000]),
    ],
)
def test_the_strptime_gem_reads_a_time_without_year_with_now_s_offset(now, options, expected, monkeypatch) -> None:
    monkeypatch.setenv("TZ", "America/New_York")
    syslog = {"time_format": "%b %d %H:%M:%S", **options}
    assert times_at(now, ["Nov  1 01:30:00", "Jul  1 12:00:00"], **syslog) == expected
    # Ruby's Time.strptime (%e %T) carries each time's own offset
    strptime = {"time_format": "%b %e %T", **options}
    assert times_at(now, ["Jul  1 12:00:00"], **strptime) == [
        1782921600000000000 if not options else 1782907200000000000
    ]


@pytest.mark.parametrize(
    ("machine", "name", "expected"),
    [
        ("America/New_York", "EST", 1719853200000000000),  # Ruby's table: -05:00 even in July
        ("America/New_York", "a", 1719831600000000000),  # military, any case: +01:00
        ("America/New_York", "JST", 1719849600000000000),  # unknown: New York's local time (EDT)
        ("Europe/Paris", "CET", 1719831600000000000),  # the machine's January name: +01:00 even in July
        ("Europe/Paris", "JST", 1719828000000000000),  # unknown: Paris's local time (CEST)
        ("UTC", "JST", 1719835200000000000),
    ],
)
def test_zone_names_as_ruby_time_strptime_reads_them(machine, name, expected, monkeypatch) -> None:
    monkeypatch.setenv("TZ", machine)
    assert times([f"2024-07-01 12:00:00 {name}"], time_format="%Y-%m-%d %H:%M:%S %Z", utc=True) == [expected]
