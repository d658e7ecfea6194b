"""Log formats (connectors/files/logs): every format round-trips exactly, bad lines come back verbatim with why."""

from __future__ import annotations

import datetime as dt
import json
import random
from zoneinfo import ZoneInfo

import pyarrow as pa
import pytest

from windvane.connectors.files.logs import LogFormatError, LogOptions, log_format, parse_log
from windvane.connectors.files.logs.access import unescape
from windvane.ingest.times import BadZone

NS = 10**9
# 2026-11-23 12:00:00 UTC: "now" for every parse, so RFC 3164's missing year is fixed.
NOW = 1795435200 * NS
PARIS = "Europe/Paris"
MONTHS = "Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec".split()
# Text that tempts every parser: quotes, backslashes, brackets, colons, escapes, non-ASCII, emoji, tabs.
TRICKY = [
    'a "quoted" word',
    "back\\slash",
    "brackets ] [x]",
    "colon: here",
    "é ü ñ 中文",
    "emoji 🎉",
    "tab\there",
    "\\x22 literally",
    "equals = sign",
    "  leading",
    "trailing  ",
    "percent %s %d",
]


def text(rng: random.Random, *, spaces: bool = True) -> str:
    pieces = [*rng.sample(TRICKY, 3), rng.choice(["x", "yz", "0"]) * rng.randint(1, 4)]
    out = " ".join(pieces)
    return out if spaces else out.replace(" ", "_").replace("\t", "_")


def options(**kw) -> LogOptions:
    return LogOptions(now=NOW, **kw)


def rows(parsed) -> list[dict]:
    return parsed.table.to_pylist()


# -- RFC 3164 ---------------------------------------------------------------------------------------


def bsd_stamp(ns: int, zone: str) -> str:
    wall = dt.datetime.fromtimestamp(ns / NS, ZoneInfo(zone))
    return f"{MONTHS[wall.month - 1]} {wall.day:2d} {wall:%H:%M:%S}"


def unambiguous(ns: int, zone: str) -> bool:
    """The wall-clock time of ``ns`` in ``zone`` names only that instant (not the repeated DST hour)."""
    wall = dt.datetime.fromtimestamp(ns / NS, ZoneInfo(zone)).replace(tzinfo=None)
    return all(int(wall.replace(tzinfo=ZoneInfo(zone), fold=f).timestamp()) == ns // NS for f in (0, 1))


def test_rfc3164_hand_written_lines():
    block = (
        b"<34>Oct 11 22:14:15 mymachine su[123]: 'su root' failed for lonvick on /dev/pts/8\n"
        b"Oct  1 02:00:00 host kernel: [    0.000000] Linux version 6.1\r\n"
        b"Nov 23 13:30:00 host no tag here, just a message\n"
        b"\n   \n"
        b"2026-03-01T10:00:00.123456+02:00 host2 systemd[1]: Started \xc3\xa9t\xc3\xa9.\n"
        b"<191>Jan  5 00:00:01 h app:\n"
    )
    got = rows(parse_log("syslog3164", block, options(timezone=PARIS)))
    paris = ZoneInfo(PARIS)
    assert got == [
        {
            "time": int(dt.datetime(2026, 10, 11, 22, 14, 15, tzinfo=paris).timestamp()) * NS,
            "facility": 4,
            "severity": 2,
            "hostname": "mymachine",
            "app_name": "su",
            "pid": "123",
            "message": "'su root' failed for lonvick on /dev/pts/8",
        },
        {
            "time": int(dt.datetime(2026, 10, 1, 2, 0, 0, tzinfo=paris).timestamp()) * NS,
            "facility": -1,
            "severity": -1,
            "hostname": "host",
            "app_name": "kernel",
            "pid": "",
            "message": "[    0.000000] Linux version 6.1",
        },
        {
            "time": int(dt.datetime(2026, 11, 23, 13, 30, tzinfo=paris).timestamp()) * NS,
            "facility": -1,
            "severity": -1,
            "hostname": "host",
            "app_name": "",
            "pid": "",
            "message": "no tag here, just a message",
        },
        {
            "time": int(dt.datetime(2026, 3, 1, 8, tzinfo=dt.UTC).timestamp()) * NS + 123456000,
            "facility": -1,
            "severity": -1,
            "hostname": "host2",
            "app_name": "systemd",
            "pid": "1",
            "message": "Started été.",
        },
        {
            "time": int(dt.datetime(2026, 1, 5, 0, 0, 1, tzinfo=paris).timestamp()) * NS,
            "facility": 23,
            "severity": 7,
            "hostname": "h",
            "app_name": "app",
            "pid": "",
            "message": "",
        },
    ]


def test_rfc3164_year_rolls_back_for_dates_ahead_of_now():
    # Read on 2026-11-23 12:00 UTC: Nov 24 13:00 is more than a day ahead, so last year's;
    # Nov 24 00:30 is within the day's slack.
    block = b"Dec 31 23:59:59 h a: last year\nNov 24 13:00:00 h a: tomorrow\nNov 24 00:30:00 h a: slack\n"
    got = rows(parse_log("syslog3164", block, options(timezone="UTC")))
    years = [dt.datetime.fromtimestamp(r["time"] / NS, dt.UTC).year for r in got]
    assert years == [2025, 2025, 2026]


def test_rfc3164_daylight_saving_edges():
    # Paris, 2026: clocks go 02:00 -> 03:00 on Mar 29 and 03:00 -> 02:00 on Oct 25.
    block = b"Mar 29 02:30:00 h a: never happened\nOct 25 02:30:00 h a: happened twice\n"
    got = rows(parse_log("syslog3164", block, options(timezone=PARIS)))
    utc = [dt.datetime.fromtimestamp(r["time"] / NS, dt.UTC).strftime("%m-%d %H:%M") for r in got]
    assert utc == ["03-29 01:00", "10-25 00:30"]  # the jump's instant; the first of the two 02:30s (CEST)


def test_rfc3164_round_trip_generated():
    rng = random.Random(3164)
    expected, lines = [], []
    while len(expected) < 300:
        ns = NOW - rng.randint(0, 360 * 86400) * NS
        if not unambiguous(ns, PARIS):
            continue
        pri = rng.choice([None, rng.randint(0, 191)])
        pid = rng.choice(["", str(rng.randint(1, 99999))])
        row = {
            "time": ns,
            "facility": -1 if pri is None else pri // 8,
            "severity": -1 if pri is None else pri % 8,
            "hostname": rng.choice(["web-1", "db.example.org", "10.0.0.7", "hôte"]),
            "app_name": rng.choice(["sshd", "CRON", "kernel", "my.app-2", "postfix/smtpd"]),
            "pid": pid,
            "message": text(rng),
        }
        head = "" if pri is None else f"<{pri}>"
        tag = row["app_name"] + (f"[{pid}]" if pid else "")
        lines.append(f"{head}{bsd_stamp(ns, PARIS)} {row['hostname']} {tag}: {row['message']}")
        expected.append(row)
    parsed = parse_log("syslog3164", "\n".join(lines).encode(), options(timezone=PARIS))
    assert parsed.rejected == []
    assert rows(parsed) == expected
    assert parsed.table.schema.types == list(log_format("syslog3164").columns.values())


# -- RFC 5424 ---------------------------------------------------------------------------------------


def sd_text(elements: dict[str, dict[str, str]]) -> str:
    def escape(v: str) -> str:
        return v.replace("\\", "\\\\").replace('"', '\\"').replace("]", "\\]")

    return (
        "".join(
            f"[{sd_id}" + "".join(f' {k}="{escape(v)}"' for k, v in params.items()) + "]"
            for sd_id, params in elements.items()
        )
        or "-"
    )


def rfc3339(ns: int, offset_minutes: int, digits: int) -> str:
    zone = dt.timezone(dt.timedelta(minutes=offset_minutes))
    wall = dt.datetime.fromtimestamp(ns // NS, zone)
    fraction = f".{ns % NS:09d}"[: digits + 1] if digits else ""
    sign, minutes = ("+" if offset_minutes >= 0 else "-"), abs(offset_minutes)
    suffix = "Z" if offset_minutes == 0 else f"{sign}{minutes // 60:02d}:{minutes % 60:02d}"
    return f"{wall:%Y-%m-%dT%H:%M:%S}{fraction}{suffix}"


def test_rfc5424_hand_written_lines():
    block = (
        b'<165>1 2003-10-11T22:14:15.003Z mymachine.example.com evntslog - ID47 [exampleSDID@32473 iut="3" '
        b'eventSource="Appli\\"cation" eventID="1011"][examplePriority@32473 class="high"] '
        b"\xef\xbb\xbfAn application event log entry...\n"
        b"<34>1 2003-08-24T05:14:15.000003-07:00 192.0.2.1 myproc 8710 - - %% It's time to make the do-nuts.\n"
        b'<13>1 - - - - - [x a="1" a="2" b="\\]\\\\"]\n'
    )
    got = rows(parse_log("syslog5424", block, options()))
    assert got[0] == {
        "time": 1065910455003000000,
        "facility": 20,
        "severity": 5,
        "version": 1,
        "hostname": "mymachine.example.com",
        "app_name": "evntslog",
        "pid": "",
        "msgid": "ID47",
        "structured_data": json.dumps(
            {
                "exampleSDID@32473": {"iut": "3", "eventSource": 'Appli"cation', "eventID": "1011"},
                "examplePriority@32473": {"class": "high"},
            },
            separators=(",", ":"),
        ),
        "message": "An application event log entry...",
    }
    assert got[1]["time"] == 1061727255000003000 and got[1]["message"] == "%% It's time to make the do-nuts."
    assert (got[1]["pid"], got[1]["msgid"], got[1]["structured_data"]) == ("8710", "", "")
    assert got[2]["time"] == NOW and got[2]["hostname"] == "" and got[2]["message"] == ""
    assert json.loads(got[2]["structured_data"]) == {"x": {"a": ["1", "2"], "b": "]\\"}}


def test_rfc5424_round_trip_generated():
    rng = random.Random(5424)
    expected, lines = [], []
    for _ in range(300):
        ns = rng.randint(0, 2_000_000_000) * NS + rng.randint(0, 999_999) * 1000
        offset = rng.choice([0, 60, -420, 330, 345, -210])
        pri = rng.randint(0, 191)
        elements = {
            f"id{k}@{rng.randint(1, 99999)}": {f"p{j}": text(rng) for j in range(rng.randint(0, 3))}
            for k in range(rng.choice([0, 0, 1, 2]))
        }
        nil = rng.random() < 0.2
        row = {
            "time": ns,
            "facility": pri // 8,
            "severity": pri % 8,
            "version": 1,
            "hostname": "" if nil else rng.choice(["web-1", "db.example.org", "::1"]),
            "app_name": "" if nil else rng.choice(["nginx", "my.app", "a/b"]),
            "pid": "" if nil else rng.choice(["42", "worker-3", "0017"]),
            "msgid": "" if nil else rng.choice(["ID47", "audit"]),
            "structured_data": json.dumps(elements, ensure_ascii=False, separators=(",", ":")) if elements else "",
            "message": rng.choice(["", text(rng)]),
        }
        fields = [row[k] or "-" for k in ("hostname", "app_name", "pid", "msgid")]
        bom = "\ufeff" if rng.random() < 0.3 and row["message"] else ""
        line = f"<{pri}>1 {rfc3339(ns, offset, 6)} {' '.join(fields)} {sd_text(elements)}"
        lines.append(line + (f" {bom}{row['message']}" if row["message"] or rng.random() < 0.5 else ""))
        expected.append(row)
    parsed = parse_log("syslog5424", ("\n".join(lines) + "\n").encode(), options())
    assert parsed.rejected == []
    assert rows(parsed) == expected


# -- combined access logs ----------------------------------------------------------------------------


def nginx_escape(value: str) -> str:
    """nginx's log escaping (escape=default): '"', '\\', bytes below 0x20 and above 0x7e as \\xHH."""
    return "".join(chr(b) if 0x20 <= b <= 0x7E and b not in (0x22, 0x5C) else f"\\x{b:02X}" for b in value.encode())


def apache_escape(value: str) -> str:
    """Apache's ap_escape_logitem: \\" \\\\ \\n \\t ..., other control and non-ASCII bytes as \\xhh."""
    named = {0x22: '\\"', 0x5C: "\\\\", 0x0A: "\\n", 0x0D: "\\r", 0x09: "\\t", 0x08: "\\b", 0x0B: "\\v"}
    return "".join(named.get(b) or (chr(b) if 0x20 <= b <= 0x7E else f"\\x{b:02x}") for b in value.encode())


def test_combined_hand_written_lines():
    block = (
        b'127.0.0.1 - frank [10/Oct/2000:13:55:36 -0700] "GET /apache_pb.gif HTTP/1.0" 200 2326 '
        b'"http://www.example.com/start.html" "Mozilla/4.08 [en] (Win98; I ;Nav)"\n'
        b'::1 - - [01/Jan/2024:00:00:00 +0530] "POST /caf\\xC3\\xA9?q=\\x22x\\x22 HTTP/2.0" 201 - "-" '
        b'"curl/8.0" "10.1.2.3" 0.004\n'
        b'10.0.0.1 - - [23/Nov/2026:12:00:00 +0000] "\\x16\\x03\\x01\\x02\\x00\\x01" 400 157 "-" "-"\n'
        b'10.0.0.2 - - [23/Nov/2026:12:00:00 +0000] "-" 408 0\n'
    )
    got = rows(parse_log("combined", block, options()))
    assert got[0] == {
        "time": 971211336 * NS,
        "remote_addr": "127.0.0.1",
        "ident": "",
        "remote_user": "frank",
        "method": "GET",
        "path": "/apache_pb.gif",
        "protocol": "HTTP/1.0",
        "status": 200,
        "bytes_sent": 2326,
        "referer": "http://www.example.com/start.html",
        "user_agent": "Mozilla/4.08 [en] (Win98; I ;Nav)",
        "rest": "",
    }
    assert got[1]["time"] == (1704067200 - 19800) * NS
    assert (got[1]["path"], got[1]["bytes_sent"], got[1]["referer"], got[1]["rest"]) == (
        '/café?q="x"',
        0,
        "",
        '"10.1.2.3" 0.004',
    )
    assert (got[2]["method"], got[2]["path"], got[2]["status"]) == ("", "\x16\x03\x01\x02\x00\x01", 400)
    assert (got[3]["method"], got[3]["path"], got[3]["referer"], got[3]["user_agent"]) == ("", "", "", "")


def test_access_log_unescape_keeps_bytes_that_are_not_utf8_escaped():
    assert unescape('\\xC3\\xA9 \\"q\\" a\\\\b \\n') == 'é "q" a\\b \n'
    assert unescape("\\xFF ok") == "\\xff ok"


@pytest.mark.parametrize("escape", [nginx_escape, apache_escape])
def test_combined_round_trip_generated(escape):
    rng = random.Random(escape.__name__)
    expected, lines = [], []
    for _ in range(300):
        offset = rng.choice([0, 60, -420, 330, 345, -210, 840])
        ns = rng.randint(0, 2_000_000_000) * NS
        zone = dt.timezone(dt.timedelta(minutes=offset))
        wall = dt.datetime.fromtimestamp(ns // NS, zone)
        sign = "+" if offset >= 0 else "-"
        stamp = (
            f"{wall.day:02d}/{MONTHS[wall.month - 1]}/{wall.year}:{wall:%H:%M:%S} "
            f"{sign}{abs(offset) // 60:02d}{abs(offset) % 60:02d}"
        )
        row = {
            "time": ns,
            "remote_addr": rng.choice(["192.0.2.1", "2001:db8::1", "unix:"]),
            "ident": "",
            "remote_user": rng.choice(["", "frank", "jörg"]),
            "method": rng.choice(["GET", "POST", "PROPFIND"]),
            "path": "/" + text(rng),
            "protocol": rng.choice(["HTTP/1.0", "HTTP/1.1", "HTTP/2.0"]),
            "status": rng.choice([200, 204, 301, 404, 500]),
            "bytes_sent": rng.choice([0, 1, 2**40]),
            "referer": rng.choice(["", 'https://example.org/ä?x="1"']),
            "user_agent": text(rng),
            "rest": "",
        }
        request = f"{row['method']} {row['path']} {row['protocol']}"
        user = escape(row["remote_user"]) or "-"
        lines.append(
            f'{row["remote_addr"]} - {user} [{stamp}] "{escape(request)}" {row["status"]} '
            f'{row["bytes_sent"] or "-"} "{escape(row["referer"]) or "-"}" "{escape(row["user_agent"])}"'
        )
        expected.append(row)
    parsed = parse_log("combined", "\n".join(lines).encode(), options())
    assert parsed.rejected == []
    assert rows(parsed) == expected


# -- JSON lines -------------------------------------------------------------------------------------


def test_json_lines_hand_written():
    block = (
        '{"time": "2024-01-01T00:00:00.123456789Z", "level": "info", "n": 1, "nested": {"a": [1, 2.50, null]}}\n'
        '{"ts": 1700000000.123456789, "level": "warn", "n": 2, "msg": "caf\u00e9 \\"q\\" \\u2603"}\n'
        '{"@timestamp": 1700000000123, "level": "err", "n": 3, "a b": "odd key", "extra": 5}\n'
        '{"timestamp": "2024-06-01T12:00:00+02:00", "level": "x", "n": 4, "ok": true, "time": null}\n'
        '{"timestamp": "2024-06-01 12:00:00", "level": "naive", "n": 5}\n'
        '{"level": "no time", "n": 6}\n'
    ).encode()
    parsed = parse_log("jsonl", block, options())
    assert parsed.rejected == []
    got = rows(parsed)
    assert [r["time"] for r in got] == [
        1704067200123456789,
        1700000000123456789,
        1700000000123000000,
        1717236000 * NS,
        1717243200 * NS,
        NOW,
    ]
    assert [r["level"] for r in got] == ["info", "warn", "err", "x", "naive", "no time"]
    assert got[0]["nested"] == '{"a":[1,2.50,null]}' and got[1]["nested"] is None
    assert got[1]["msg"] == 'café "q" \u2603'
    assert json.loads(got[2]["other_keys"]) == {"a b": "odd key", "extra": 5} and got[0]["other_keys"] == ""
    assert got[3]["ok"] is True
    assert parsed.table.schema.field("n").type == pa.int64()
    # --timezone applies to ISO times without a zone
    naive = parse_log("jsonl", b'{"time": "2024-06-01 12:00:00"}\n', options(timezone=PARIS))
    assert rows(naive)[0]["time"] == 1717236000 * NS


def test_json_lines_round_trip_generated():
    rng = random.Random(8259)
    kinds = {"host": "str", "status": "int", "latency": "float", "ok": "bool", "tags": "json", "msg": "str"}
    expected, lines = [], []
    for _ in range(300):
        ns = rng.randint(0, 2_000_000_000) * NS + rng.randint(0, NS - 1)
        record = {}
        for key, kind in kinds.items():
            if rng.random() < 0.15:
                continue
            record[key] = {
                "str": lambda: text(rng),
                "int": lambda: rng.randint(-(2**63), 2**63 - 1),
                "float": lambda: rng.choice([rng.uniform(-1e6, 1e6), 1e-300, -0.0, 5e300, 1.5]),
                "bool": lambda: rng.random() < 0.5,
                "json": lambda: {"list": [text(rng), 1, None], "k": {"é": rng.random()}},
            }[kind]()
        key = rng.choice(["time", "timestamp", "@timestamp", "ts"])
        # An RFC 3339 string, or epoch seconds with nine decimals as a JSON number written by hand (no float rounds it).
        stamp = rng.choice([f'"{rfc3339(ns, rng.choice([0, 60, -420]), 9)}"', f"{ns // NS}.{ns % NS:09d}"])
        body = json.dumps(record, ensure_ascii=rng.random() < 0.5)
        line = f'{{"{key}": {stamp}' + (", " + body[1:] if record else "}")
        lines.append(line)
        expected.append((ns, record))
    parsed = parse_log("jsonl", "\n".join(lines).encode(), options())
    assert parsed.rejected == []
    got = rows(parsed)
    assert [r["time"] for r in got] == [ns for ns, _ in expected]
    for row, (_, record) in zip(got, expected):
        for key, kind in kinds.items():
            value = row[key]
            if kind == "json" and value is not None:
                value = json.loads(value)
            assert value == record.get(key), key


# -- bad lines: kept verbatim, with why ------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, line, reason",
    [
        ("syslog3164", b"not a syslog line", "not an RFC 3164 syslog line"),
        ("syslog3164", b"<200>Oct 11 22:14:15 h a: x", "PRI 200 is out of range 0-191"),
        ("syslog3164", b"Feb 30 22:14:15 h a: x", "no such date or time: 'Feb 30 22:14:15'"),
        ("syslog3164", b"Oct 11 25:14:15 h a: x", "no such date or time: 'Oct 11 25:14:15'"),
        ("syslog3164", b"2026-13-01T00:00:00Z h a: x", "'2026-13-01T00:00:00Z' is not an RFC 3339 time"),
        ("syslog3164", b"Oct 11 22:14:15 h a: caf\xe9", "not valid UTF-8 (byte 0xe9 at column 25)"),
        ("syslog5424", b"<34>Oct 11 22:14:15 h a: x", "not an RFC 5424 syslog line"),
        ("syslog5424", b'<34>1 - h a p m [x a="1"][x b="2"] m', "structured data element 'x' appears twice"),
        ("syslog5424", b"<34>1 - h a p m [x a=unquoted] m", "not an RFC 5424 syslog line"),
        ("syslog5424", b"<34>1 yesterday h a p m - m", "'yesterday' is not an RFC 3339 time"),
        ("combined", b"GET / HTTP/1.1", "not a combined or common access log line"),
        ("combined", b'1.2.3.4 - - [10/Oct/2000:13:55:36] "GET / HTTP/1.1" 200 1', "is not a time"),
        ("combined", b'1.2.3.4 - - [10/Foo/2000:13:55:36 +0000] "GET / HTTP/1.1" 200 1', "is not a time"),
        ("jsonl", b'{"a": 1', "not JSON"),
        ("jsonl", b"[1, 2]", "a JSON array, not an object"),
        ("jsonl", b'{"time": true}', "field 'time': a boolean is not a time"),
        ("jsonl", b'{"time": "soon"}', "field 'time': 'soon' is not an ISO 8601 time"),
        ("jsonl", b'{"ts": 1e300}', "field 'ts': 1E+300 is out of the range of times"),
        ("jsonl", b'{"n": "text"}', "field 'n': a string where the column holds integers (int64)"),
        ("jsonl", b'{"n": 18446744073709551615}', "field 'n': 18446744073709551615 does not fit in int64"),
    ],
)
def test_bad_lines_are_rejected_verbatim_with_the_reason(name, line, reason):
    good = {
        "syslog3164": b"Oct 11 22:14:15 h a: fine",
        "syslog5424": b"<34>1 - h a p m - fine",
        "combined": b'1.2.3.4 - - [10/Oct/2000:13:55:36 +0000] "GET / HTTP/1.1" 200 1',
        "jsonl": b'{"n": 1, "m": "fine"}',
    }[name]
    parsed = parse_log(name, good + b"\n" + line + b"\r\n" + good + b"\n", options(), first_line=10)
    assert parsed.table.num_rows == 2
    assert [(r.raw, r.line, r.time) for r in parsed.rejected] == [(line, 11, NOW)]
    assert parsed.rejected[0].reason.startswith("line 11: ") and reason in parsed.rejected[0].reason
    assert [parsed.raw(i) for i in range(2)] == [good, good]


def test_json_lines_keep_the_stream_column_types():
    # The stream holds "n" as float64: integers are welcome, text is not.
    parsed = parse_log("jsonl", b'{"n": 1}\n{"n": "x"}\n', options(types={"n": pa.float64()}))
    assert rows(parsed) == [{"time": NOW, "n": 1.0}]
    assert "field 'n': a string where the column holds numbers (float64)" in parsed.rejected[0].reason


def test_unknown_format_and_zone_are_named():
    with pytest.raises(LogFormatError, match="unknown log format 'gelf'; known: jsonl, syslog"):
        log_format("gelf")
    with pytest.raises(BadZone, match="unknown time zone 'Mars/Olympus'"):
        LogOptions(timezone="Mars/Olympus")


# -- windvane import of a log file: kill -9 mid-file, resume ----------------------------------------------


@pytest.mark.crash
def test_import_of_an_access_log_killed_mid_file_resumes_exactly(store_url, tmp_path):
    from tests.cli.test_import_process import paused, run_import
    from tests.paused_process import kill
    from windvane import arrays, neostore
    from windvane.ingest import imports

    path = tmp_path / "access.log"
    lines = []
    for i in range(30_000):  # ~3 MB: three 1 MiB commits
        if i % 1000 == 999:
            lines.append(f"garbage line {i}")
        else:
            lines.append(
                f"10.0.{i % 256}.1 - - [23/Nov/2026:12:{i // 60 % 60:02d}:{i % 60:02d} +0100] "
                f'"GET /item/{i}?q=%22caf\\xC3\\xA9%22 HTTP/1.1" 200 {i} "-" "agent \\"{i}\\""'
            )
    path.write_text("\n".join(lines) + "\n")
    args = (str(path), "--store", store_url, "--tag", "web.access", "--format", "combined", "--commit-mb", "1")
    process = paused(*args, before_commit=2)
    kill(process)
    first = len(arrays.open_stream(store_url, "web.access"))
    assert 0 < first < 29_970
    done = run_import(*args)
    assert done.returncode == 3, done.stderr  # garbage lines were quarantined
    assert "resumed from position {'offset': " in done.stdout
    assert "rows rejected into the quarantine stream 'quarantine/web.access'" in done.stderr
    with arrays.open_stream(store_url, "web.access") as s:
        table = s.to_pandas()
    good = [i for i in range(30_000) if i % 1000 != 999]
    assert table["path"].tolist() == [f"/item/{i}?q=%22café%22" for i in good]
    assert table["user_agent"].tolist() == [f'agent "{i}"' for i in good]
    assert table["bytes_sent"].tolist() == good
    with arrays.open_stream(store_url, "web.access", quarantine=True) as q:
        rejected = q.to_pandas()
    bad = [i for i in range(30_000) if i % 1000 == 999]
    assert rejected["raw"].tolist() == [f"garbage line {i}".encode() for i in bad]
    assert [r.split(":")[0] for r in rejected["reason"]] == [f"line {i + 1}" for i in bad]
    with neostore.open(store_url) as store:
        position = imports.read_position(store, "web.access", imports.source_id_for(path))
    assert (position.rows, position.rejected) == (len(good), len(bad))  # both runs, nothing twice
    assert position.value == {"offset": path.stat().st_size, "line": 30_001}


@pytest.mark.parametrize("name", ["combined", "nginx"])
def test_blocks_parsed_at_once_give_the_parts_parsed_one_by_one(tmp_path, name):
    """A format whose blocks parse alone has them parsed a thread each: the same parts, in order, with the
    same ends, rejected lines and line numbers, from the start or resumed; closed early, it stops."""
    from windvane.connectors.files import ReaderOptions
    from windvane.connectors.files.logs.fluent import ParseConfig, fluent_format
    from windvane.connectors.files.logs.reader import LogReader

    lines = []
    for i in range(3000):
        if i % 97 == 5:
            lines.append(f"garbage ünïcødé line {i}")
        elif i % 101 == 7:
            lines.append("")
        else:
            lines.append(
                f'10.0.{i % 256}.1 - - [23/Nov/2026:12:{i // 60 % 60:02d}:{i % 60:02d} +0100] "GET /é/{i} HTTP/1.1" '
                f'200 {i} "-" "agent {i}"'
            )
    path = tmp_path / "access.log"
    path.write_text("\n".join(lines))  # the last line has no newline
    fmt = fluent_format(ParseConfig.from_mapping({"type": "nginx"})) if name == "nginx" else log_format(name)
    assert fmt.independent
    at_once = LogReader(path, fmt, ReaderOptions(block_bytes=8 << 10))
    one_by_one = LogReader(path, fmt, ReaderOptions(block_bytes=8 << 10))
    at_once.threads, one_by_one.threads = 3, 1

    def described(parts):
        return [(p.end, p.nbytes, p.table.to_pylist(), [(raw, why) for _, raw, why in p.rejected]) for p in parts]

    want = described(one_by_one(None))
    assert len(want) > 10 and any(rejected for *_, rejected in want)
    assert want[-1][0] == {"offset": path.stat().st_size, "line": 3000}
    assert described(at_once(None)) == want
    resumed = described(at_once(want[4][0]))  # blocks cut from there: compare the rows
    assert [row for part in resumed for row in part[2]] == [row for part in want[5:] for row in part[2]]
    assert [r for part in resumed for r in part[3]] == [r for part in want[5:] for r in part[3]]
    assert resumed[-1][0] == want[-1][0]
    parts = at_once(None)
    assert described([next(parts), next(parts)]) == want[:2]
    parts.close()
