"""fluentd's multiline parser: events of lines, the open last event, `windvane import` and `windvane tail` of it.

The parser alone (no fluentd: the differential test compares it with fluentd), then the readers: blocks never
cut an event (LogReader with tiny blocks; `windvane import` into a real SQLite store across its block size), and
`windvane tail` completes its last event after the flush interval and when it stops.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.serve_process import REPO
from windvane import arrays
from windvane.cli import cli as windvane_cli
from windvane.connectors.files import ReaderOptions
from windvane.connectors.files.logs import LogOptions, parse_log
from windvane.connectors.files.logs.fluent import ParseConfig, ParseConfigError, fluent_format
from windvane.connectors.files.logs.reader import LogReader

NOW = 1_700_000_000_000_000_000
T0 = 1_709_294_400_000_000_000  # 2024-03-01 12:00:00 UTC
JAVA = {
    "type": "multiline",
    "format_firstline": r"/^\d{4}-\d{2}-\d{2}/",
    "format1": r"/^(?<time>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}) \[(?<thread>[^\]]+)\] (?<level>\w+) (?<message>.*)/",
    "time_format": "%Y-%m-%d %H:%M:%S",
    "timezone": "UTC",
}
JAVA_LINES = (
    "2024-03-01 12:00:00 [main] ERROR boom\n"
    "java.lang.RuntimeException: bad\n"
    "    at a.b.C.method(C.java:10)\n"
    "\n"
    "2024-03-01 12:00:01 [main] INFO recovered\n"
    "2024-03-01 12:00:02 [worker-1] WARN caf\u00e9\n"
    "  continued\n"
)


def parse(section: dict, text: str | bytes, **kwargs):
    block = text.encode() if isinstance(text, str) else text
    return parse_log(fluent_format(ParseConfig.from_mapping(section)), block, LogOptions(now=NOW), **kwargs)


def rows(parsed) -> list[dict]:
    return parsed.table.to_pylist()


def test_java_stack_traces_are_one_record_each_with_their_lines():
    parsed = parse(JAVA, JAVA_LINES)
    assert rows(parsed) == [
        {
            "time": T0,
            "thread": "main",
            "level": "ERROR",
            "message": "boom\njava.lang.RuntimeException: bad\n    at a.b.C.method(C.java:10)\n",
        },
        {"time": T0 + 1_000_000_000, "thread": "main", "level": "INFO", "message": "recovered"},
        {"time": T0 + 2_000_000_000, "thread": "worker-1", "level": "WARN", "message": "caf\u00e9\n  continued"},
    ]
    assert parsed.rejected == [] and parsed.pending == 0
    assert (
        parsed.raw(0)
        == b"2024-03-01 12:00:00 [main] ERROR boom\njava.lang.RuntimeException: bad\n    at a.b.C.method(C.java:10)\n"
    )


def test_python_traceback_with_milliseconds():
    section = {
        "type": "multiline",
        "format_firstline": r"/^\d{4}-\d{2}-\d{2} /",
        "format1": r"/^(?<time>\S+ \S+) (?<level>[A-Z]+) (?<logger>[^:]+): (?<message>.*)/",
        "time_format": "%Y-%m-%d %H:%M:%S,%L",
        "utc": True,
    }
    text = (
        "2024-03-01 12:00:00,123 ERROR app.main: request failed\n"
        "Traceback (most recent call last):\n"
        '  File "/srv/app/main.py", line 42, in handle\n'
        "    return 1 / 0\n"
        "ZeroDivisionError: division by zero\n"
        "2024-03-01 12:00:01,456 INFO app.main: ok\n"
    )
    got = rows(parse(section, text))
    assert [(r["time"], r["logger"], r["message"].splitlines()[-1]) for r in got] == [
        (T0 + 123_000_000, "app.main", "ZeroDivisionError: division by zero"),
        (T0 + 1_456_000_000, "app.main", "ok"),
    ]


def test_crlf_lines_keep_their_cr_inside_an_event_as_in_tails_buffer_does():
    parsed = parse(
        JAVA, "2024-03-01 12:00:00 [main] ERROR boom\r\n  at x\r\n\r\n2024-03-01 12:00:01 [main] INFO ok\r\n"
    )
    assert [r["message"] for r in rows(parsed)] == ["boom\r\n  at x\r\n", "ok"]


def test_lines_before_the_first_firstline_are_rejected_one_by_one():
    parsed = parse(JAVA, "    at lost(L.java:1)\n\n" + JAVA_LINES, first_line=10)
    assert [(r.line, r.raw, r.reason) for r in parsed.rejected] == [
        (10, b"    at lost(L.java:1)", "line 10: got incomplete line before first line"),
        (11, b"", "line 11: got incomplete line before first line"),
    ]
    assert parsed.table.num_rows == 3


def test_an_event_that_does_not_match_is_rejected_verbatim_with_its_first_line():
    text = "2024-03-01 12:00:00 [main] INFO ok\n2024-03-01 12:00:01 main INFO no brackets\n  more\n"
    parsed = parse(JAVA, text)
    assert parsed.table.num_rows == 1
    [bad] = parsed.rejected
    assert (bad.line, bad.raw, bad.reason, bad.time) == (
        2,
        b"2024-03-01 12:00:01 main INFO no brackets\n  more",
        "line 2: pattern not matched",
        NOW,
    )


def test_a_bad_time_rejects_the_event():
    parsed = parse(JAVA, "2024-13-45 99:99:99 [main] ERROR x\n  at y\n")
    assert [r.reason for r in parsed.rejected] == ["line 1: invalid time format: value = 2024-13-45 99:99:99"]


def test_the_open_last_event_is_left_for_the_next_block():
    block = JAVA_LINES.encode()
    parsed = parse(JAVA, block, final=False, first_line=5)
    last = b"2024-03-01 12:00:02 [worker-1] WARN caf\xc3\xa9\n  continued\n"
    assert parsed.table.num_rows == 2 and parsed.pending == len(last) and block.endswith(last)
    rest = parse(JAVA, last + b"  more\n", first_line=11)  # the reader gives it again with what follows
    assert rows(rest)[0]["message"] == "caf\u00e9\n  continued\n  more"


def test_a_line_that_is_not_utf8_in_the_open_event_is_rejected_once_it_is_read_again():
    block = b"2024-03-01 12:00:00 [main] INFO a\n2024-03-01 12:00:01 [main] INFO b\n\xff bad\n"
    parsed = parse(JAVA, block, final=False)
    assert parsed.rejected == [] and parsed.table.num_rows == 1
    again = parse(JAVA, block[len(block) - parsed.pending :], first_line=2)
    assert [r.line for r in again.rejected] == [3] and rows(again)[0]["message"] == "b"


def test_without_format_firstline_an_event_ends_where_the_regexp_first_matches():
    section = {
        "type": "multiline",
        "format1": r"/^(?<time>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}) (?<message>[^\n]*)\n(?<detail>[^\n]+)/",
        "time_format": "%Y-%m-%d %H:%M:%S",
        "timezone": "UTC",
    }
    text = "2024-03-01 12:00:00 hello\ndetail one\n2024-03-01 12:00:01 bye\ndetail two\n2024-03-01 12:00:02 alone\n"
    parsed = parse(section, text)
    assert [(r["message"], r["detail"]) for r in rows(parsed)] == [("hello", "detail one"), ("bye", "detail two")]
    assert [(r.line, r.reason) for r in parsed.rejected] == [(5, "line 5: pattern not matched")]  # at the end
    open_ = parse(section, text, final=False)
    assert open_.rejected == [] and open_.pending == len("2024-03-01 12:00:02 alone\n")


def test_several_formats_types_and_the_time_key():
    section = {
        "type": "multiline",
        "format_firstline": "/^pid=/",
        "format1": r"/^pid=(?<pid>\S+) elapsed=(?<elapsed>\S+) at=(?<at>\S+)\n/",
        "format2": r"/user=(?<user>\w+)\n/",
        "format3": "/note=(?<note>.*)/",
        "types": "pid:integer,elapsed:float",
        "time_key": "at",
        "time_format": "%Y-%m-%dT%H:%M:%S%z",
        "null_empty_string": True,
    }
    text = "pid=42 elapsed=1.5 at=2024-03-01T13:00:00+0100\nuser=alice\nnote=\n"
    assert rows(parse(section, text)) == [{"time": T0, "pid": 42, "elapsed": 1.5, "user": "alice", "note": None}]


def test_a_match_that_leaves_text_reads_the_rest_again_as_fluentd_loops():
    section = {"type": "multiline", "format_firstline": "/^BEGIN/", "format1": r"/^(?<key>\w+)=(?<value>[^\n]*)/"}
    parsed = parse(section, "BEGIN 1\na=1\nb=two\nBEGIN 2\nc=3\nnot a pair\n")
    assert [(r["key"], r["value"], r["time"]) for r in rows(parsed)] == [
        ("a", "1", NOW),
        ("b", "two", NOW),
        ("c", "3", NOW),
    ]
    assert [parsed.raw(i) for i in range(3)] == [b"BEGIN 1\na=1\nb=two"] * 2 + [b"BEGIN 2\nc=3\nnot a pair"]
    assert [(r.line, r.raw) for r in parsed.rejected] == [(4, b"BEGIN 2\nc=3\nnot a pair")]


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"format1": "^(?<a>x)"}, "format should be Regexp, need //, in format1: '^(?<a>x)'"),
        ({"format1": "/(?<a>x)/", "format2": "y"}, "need //, in format2"),
        ({"format1": "/x/"}, "Invalid regexp 'x': No named captures"),
        ({}, "No named captures"),
        ({"format1": "/(?<a>x)/", "format_firstline": "^x"}, "need //, in format_firstline"),
        ({f"format{n}": f"/(?<a{n}>x)/" for n in range(1, 22)}, "N should be 1 - 20"),
    ],
)
def test_bad_options_are_refused_with_fluentds_message(section, message):
    with pytest.raises(ParseConfigError, match=re.escape(message)):
        fluent_format(ParseConfig.from_mapping({"type": "multiline", **section}))


def java_log(count: int) -> tuple[str, list[str]]:
    """``count`` events of 1 to 5 lines (event i has i % 5 continuation lines), and each event's message."""
    lines, messages = [], []
    for i in range(count):
        stamp = f"2024-03-01 12:{i // 60 % 60:02d}:{i % 60:02d}"
        extra = [f"    at frame{i}.f{k}(F.java:{k})" for k in range(i % 5)]
        lines += [f"{stamp} [main] ERROR event {i}", *extra]
        messages.append("\n".join([f"event {i}", *extra]))
    return "".join(line + "\n" for line in lines), messages


def test_the_reader_never_cuts_an_event_across_blocks(tmp_path):
    text, messages = java_log(200)
    path = tmp_path / "app.log"
    path.write_text(text)
    reader = LogReader(path, fluent_format(ParseConfig.from_mapping(JAVA)), ReaderOptions(block_bytes=97))
    parts = list(reader(None))
    assert len(parts) > 20
    assert [m for p in parts for m in p.table.column("message").to_pylist()] == messages
    ends = [p.end["offset"] for p in parts]
    assert ends[-1] == len(text.encode()) and sum(p.nbytes for p in parts) == ends[-1]
    assert all(text.encode()[end:].startswith(b"2024-") for end in ends[:-1])  # each part ends before an event
    middle = parts[len(parts) // 2].end  # an import resumed there reads the rest, numbering lines as the file
    rest = list(reader(middle))
    done = sum(p.table.num_rows for p in parts[: len(parts) // 2 + 1])
    assert [m for p in rest for m in p.table.column("message").to_pylist()] == messages[done:]


def test_import_gives_one_record_per_event_across_its_blocks(tmp_path, sqlite_url):
    text, messages = java_log(16_000)  # over 3 x 512 KiB: --commit-mb 1 reads it in several blocks
    data = text.encode()
    assert len(data) > 3 * (1 << 19) and data[data.rfind(b"\n", 0, 1 << 19) + 1 :].startswith(b"    at ")  # straddles
    path = tmp_path / "app.log"
    path.write_text("orphan before any event\n" + text)
    parser = java_parser(tmp_path)
    args = ["import", str(path), "--store", sqlite_url, "--tag", "t", "--parser", str(parser), "--commit-mb", "1"]
    result = CliRunner().invoke(windvane_cli, [*args, "--allow-rejects"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    with arrays.open_stream(sqlite_url, "t") as stream:
        frame = stream.to_pandas()
    assert frame["message"].tolist() == messages
    assert frame["thread"].tolist() == ["main"] * len(messages)
    with arrays.open_stream(sqlite_url, "t", quarantine=True) as q:
        assert list(zip(q["reason"][:].tolist(), q["raw"][:].tolist())) == [
            ("line 1: got incomplete line before first line", b"orphan before any event")
        ]


def stored_messages(url: str) -> list[str]:
    try:
        with arrays.open_stream(url, "t") as stream:
            return stream.to_pandas()["message"].tolist() if len(stream) else []
    except arrays.StreamNotFoundError:
        return []


def start_tail(path: Path, url: str, parser: Path, flush: str) -> subprocess.Popen:
    command = [sys.executable, "-c", "import windvane; windvane.main()", "tail", str(path), "--store", url]
    command += ["--tag", "t", "--parser", str(parser), "--poll-ms", "50", "--commit-ms", "100"]
    command += ["--multiline-flush-interval", flush, "--rotate-wait", "0.3"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO, text=True)
    assert process.stdout.readline().startswith("following"), process.stderr.read()
    return process


def wait_rows(url: str, count: int, timeout: float = 30) -> list[str]:
    deadline = time.monotonic() + timeout
    while len(got := stored_messages(url)) < count and time.monotonic() < deadline:
        time.sleep(0.05)
    return got


def test_tail_completes_the_last_event_after_the_flush_interval_and_at_stop(tmp_path, sqlite_url):
    path, parser = tmp_path / "app.log", java_parser(tmp_path)
    text, messages = java_log(4)
    path.write_text(text)
    process = start_tail(path, sqlite_url, parser, "0.5")
    try:
        assert wait_rows(sqlite_url, 4) == messages  # the fourth, open, event once no line came for 0.5 s
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(30)
    more, _ = java_log(7)
    with open(path, "a") as f:
        f.write(more[len(text) :])
    process = start_tail(path, sqlite_url, parser, "600")  # never flushed by time: the stop completes it
    try:
        assert wait_rows(sqlite_url, 6, timeout=10)[4:] == java_log(7)[1][4:6]
        time.sleep(0.3)
        assert len(stored_messages(sqlite_url)) == 6  # the seventh is open, and stays so
    finally:
        process.send_signal(signal.SIGTERM)
        out, _ = process.communicate(timeout=30)
    assert process.returncode == 0, out
    assert stored_messages(sqlite_url) == java_log(7)[1]


def java_parser(tmp_path: Path) -> Path:
    parser = tmp_path / "java.toml"
    parser.write_text("".join(f"{k} = '{v}'\n" for k, v in JAVA.items()))
    return parser


@pytest.mark.crash
def test_tail_killed_with_an_open_event_reads_it_again_on_restart(tmp_path, sqlite_url):
    path, parser = tmp_path / "app.log", java_parser(tmp_path)
    text, messages = java_log(5)
    first = text[: text.index("2024-03-01 12:00:03")]  # three events, the third open
    path.write_text(first)
    process = start_tail(path, sqlite_url, parser, "600")
    try:
        assert wait_rows(sqlite_url, 2) == messages[:2]
        time.sleep(0.3)  # the commit of the two is done, the third is held
    finally:
        process.kill()
        process.wait(30)
    with open(path, "a") as f:
        f.write(text[len(first) :])
    process = start_tail(path, sqlite_url, parser, "600")
    try:
        wait_rows(sqlite_url, 4)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(30)
    assert stored_messages(sqlite_url) == messages  # the third once, whole, and the fifth at the stop


def test_tail_completes_the_open_event_of_a_rotated_file(tmp_path, sqlite_url):
    path, parser = tmp_path / "app.log", java_parser(tmp_path)
    text, messages = java_log(5)
    cut = text.index("2024-03-01 12:00:03")
    path.write_text(text[:cut])
    process = start_tail(path, sqlite_url, parser, "600")
    try:
        assert wait_rows(sqlite_url, 2) == messages[:2]
        writer = open(path, "a")  # a logger holding the file across the rename adds a line to the open event
        path.rename(tmp_path / "app.log.1")
        writer.write("    at late(L.java:9)\n")
        writer.close()
        path.write_text(text[cut:])
        got = wait_rows(sqlite_url, 4)  # the old file's last event, complete once the new file is read
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(30)
    assert got[:4] == [*messages[:2], messages[2] + "\n    at late(L.java:9)", messages[3]]
    assert stored_messages(sqlite_url)[4:] == messages[4:]
