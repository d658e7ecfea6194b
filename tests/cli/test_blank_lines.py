"""Blank lines (empty or whitespace only) in real logs: `windvane import` and `windvane tail` skip and count them
under every format, fluentd's parsers too (fluentd's in_tail would quarantine each one); --keep-blank-lines hands
them to the parser as fluentd does, with fluentd's reasons. Real SQLite stores; tail as a real process; fluentd's
own reasons from the real fluentd (the corpus run)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from tests.connectors.files.fluent_corpus import fluentd_corpus  # noqa: F401 - a fixture
from tests.serve_process import REPO
from windvane import arrays
from windvane.cli import cli as windvane_cli
from windvane.connectors.files.logs import LogOptions, parse_log
from windvane.connectors.files.logs.fluent import ParseConfig, fluent_format

SYSLOG = (
    "Mar  1 12:00:00 web1 sshd[1234]: Accepted publickey for root from 192.0.2.10 port 51234 ssh2\n"
    "\n"
    "Mar  1 12:00:05 web1 sshd[1235]: Failed password for invalid user admin from 203.0.113.7 port 40222 ssh2\n"
    "   \n"
    "\t\r\n"
    "Mar  1 12:00:06 web1 CRON[3000]: pam_unix(cron:session): session closed for user root\n"
    "\n"
)
ACCESS = (
    '192.0.2.1 - - [01/Mar/2024:12:00:00 +0000] "GET / HTTP/1.1" 200 612 "-" "curl/8.5.0"\n'
    "\n\n"
    '192.0.2.2 - bob [01/Mar/2024:12:00:01 +0000] "POST /login HTTP/1.1" 302 0 "https://example.com/" "Mozilla/5.0"\n'
    " \n"
)
JSONL = '{"time": "2024-03-01T12:00:00Z", "msg": "a"}\n\n  \n{"time": "2024-03-01T12:00:01Z", "msg": "b"}\n'


def run(*args: str):
    return CliRunner().invoke(windvane_cli, list(args), catch_exceptions=False)


def count(url: str, quarantine: bool = False) -> int:
    with arrays.open_stream(url, "t", quarantine=quarantine) as stream:
        return len(stream)


@pytest.mark.parametrize(
    ("text", "args", "rows", "blank"),
    [
        (SYSLOG, ["--format", "syslog"], 3, 4),
        (SYSLOG, ["--format", "syslog3164"], 3, 4),
        (SYSLOG, ["--parser", "auth"], 3, 4),
        (SYSLOG, ["--format", "none"], 3, 4),
        (SYSLOG, ["--format", "regexp", "--expression", r"/^(?<month>\w+) +(?<rest>.*)$/"], 3, 4),
        (ACCESS, ["--format", "nginx"], 2, 3),
        (ACCESS, ["--format", "apache2"], 2, 3),
        (ACCESS, ["--format", "combined"], 2, 3),
        (JSONL, ["--format", "json"], 2, 2),
        (JSONL, ["--format", "jsonl"], 2, 2),
        ("first\n\nsecond\n", ["--format", "none"], 2, 1),
    ],
    ids=["syslog", "syslog3164", "auth", "none", "regexp", "nginx", "apache2", "combined", "json", "jsonl", "one"],
)
def test_import_skips_and_counts_blank_lines(sqlite_url, tmp_path, text, args, rows, blank):
    log = tmp_path / "app.log"
    log.write_text(text)
    result = run("import", str(log), "--store", sqlite_url, "--tag", "t", *args)
    assert result.exit_code == 0, result.output  # only blank lines would have been rejected
    assert f"{rows} rows, 0 rejected, {blank} blank {'line' if blank == 1 else 'lines'} skipped" in result.output
    assert count(sqlite_url) == rows


def test_keep_blank_lines_quarantines_them_with_fluentds_reason(sqlite_url, tmp_path):
    log = tmp_path / "auth.log"
    log.write_text(SYSLOG)
    result = run("import", str(log), "--store", sqlite_url, "--tag", "t", "--format", "syslog", "--keep-blank-lines")
    assert result.exit_code == 3, result.output
    assert "3 rows, 4 rejected" in result.output and "blank lines skipped" not in result.output
    with arrays.open_stream(sqlite_url, "t", quarantine=True) as q:
        assert q["raw"][:].tolist() == [b"", b"   ", b"\t", b""]
        assert q["reason"][:].tolist()[0] == "line 2: invalid line found: undefined method `+' for nil:NilClass"


def test_keep_blank_lines_keeps_them_as_rows_where_the_parser_reads_them(sqlite_url, tmp_path):
    log = tmp_path / "any.txt"
    log.write_text("first line\n\n second ü\n")
    result = run("import", str(log), "--store", sqlite_url, "--tag", "t", "--format", "none", "--keep-blank-lines")
    assert result.exit_code == 0, result.output
    with arrays.open_stream(sqlite_url, "t") as stream:
        assert stream["message"][:].tolist() == ["first line", "", " second ü"]


@pytest.mark.clients
def test_kept_blank_lines_get_the_reason_the_real_fluentd_gives(fluentd_corpus):
    lines = [b"Mar  1 00:00:00 host sshd[42]: before", b"", b"   ", b"\t", b"Mar  1 00:00:01 host sshd[42]: after"]
    ruby = "undefined method `+' for nil:NilClass"
    theirs = [o.rejected for o in fluentd_corpus.outcomes["syslog-blank-lines"]]
    assert [ruby in (why or "") for why in theirs] == [False, True, True, True, False], theirs
    fmt = fluent_format(ParseConfig("syslog"))
    kept = parse_log(fmt, b"\n".join(lines) + b"\n", LogOptions(keep_blank=True), first_line=0)
    assert [r.reason for r in kept.rejected] == [f"line {n}: invalid line found: {ruby}" for n in (1, 2, 3)]
    skipped = parse_log(fmt, b"\n".join(lines) + b"\n", first_line=0)
    assert (skipped.table.num_rows, skipped.rejected, skipped.blank) == (2, [], 3)


def tail_once(log, url: str, *args: str) -> str:
    """Run `windvane tail` on ``log`` until its first commit is reported, stop it with SIGTERM; its output."""
    command = [sys.executable, "-c", "import windvane; windvane.main()", "tail", str(log), "--store", url]
    command += ["--tag", "t", "--poll-ms", "50", "--commit-ms", "100", *args]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO, text=True)
    line = ""
    try:
        assert process.stdout.readline().startswith("following"), process.stderr.read()
        deadline = time.monotonic() + 30
        while "committed" not in line and time.monotonic() < deadline:
            line = process.stdout.readline()
    finally:
        process.send_signal(signal.SIGTERM)
        out, _ = process.communicate(timeout=30)
    assert process.returncode == 0
    return line + out


def test_tail_skips_and_counts_blank_lines(sqlite_url, tmp_path):
    log = tmp_path / "auth.log"
    log.write_text(SYSLOG)
    out = tail_once(log, sqlite_url, "--format", "syslog")
    assert "committed 3 rows, 0 rejected (3 and 0 in all), 4 blank lines skipped (4 in all)" in out
    assert count(sqlite_url) == 3


def test_tail_keep_blank_lines_hands_them_to_the_parser(sqlite_url, tmp_path):
    log = tmp_path / "auth.log"
    log.write_text(SYSLOG)
    out = tail_once(log, sqlite_url, "--format", "syslog", "--keep-blank-lines")
    assert "committed 3 rows, 4 rejected (3 and 4 in all); at line 8" in out and "blank" not in out
    assert (count(sqlite_url), count(sqlite_url, quarantine=True)) == (3, 4)
