"""`windvane import` and `windvane tail` with fluentd parsers: --parser FILE.toml, --format regexp --expression ...
--time-format ..., --format none, and a schema's [parse] table. In-process (CliRunner) for import, a real process
for tail; real SQLite stores."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from click.testing import CliRunner

from tests.serve_process import REPO
from windvane import arrays
from windvane.cli import cli as windvane_cli

LINES = (
    "192.168.0.1 [02/Jan/2020:03:04:05 +0900] GET 200\n"
    "not an access line\n"
    "10.0.0.2 [02/Jan/2020:03:04:06 +0000] POST 500\n"
)
EXPRESSION = r"/^(?<host>\S+) \[(?<time>[^\]]+)\] (?<method>\S+) (?<code>\d+)$/"
TIME_FORMAT = "%d/%b/%Y:%H:%M:%S.%N %z"


def run(*args: str):
    return CliRunner().invoke(windvane_cli, list(args), catch_exceptions=False)


def stored(url: str, tag: str = "t") -> list[dict]:
    with arrays.open_stream(url, tag) as stream:
        return stream.to_pandas().reset_index().to_dict("records") if len(stream) else []


def quarantined(url: str, tag: str = "t") -> list[tuple[str, bytes]]:
    q = arrays.open_stream(url, tag, quarantine=True)
    return list(zip(q["reason"][:].tolist(), q["raw"][:].tolist()))


def check_access_rows(url: str) -> None:
    rows = stored(url)
    assert [(r["host"], r["method"], r["code"]) for r in rows] == [
        ("192.168.0.1", "GET", 200),
        ("10.0.0.2", "POST", 500),
    ]
    # fluentd's reason, and where the line stopped matching
    why = "line 2: pattern not matched: the line matches the expression through field 'host', not through 'time'"
    assert quarantined(url) == [(why, b"not an access line")]


def parser_toml(tmp_path: Path) -> Path:
    path = tmp_path / "access.toml"
    path.write_text(
        f"type = 'regexp'\nexpression = '{EXPRESSION}'\ntime_format = '%d/%b/%Y:%H:%M:%S %z'\ntypes = 'code:integer'\n"
    )
    return path


def test_import_with_a_parser_file(sqlite_url, tmp_path):
    log = tmp_path / "access.txt"
    log.write_text(LINES)
    result = run("import", str(log), "--store", sqlite_url, "--tag", "t", "--parser", str(parser_toml(tmp_path)))
    assert result.exit_code == 3, result.output  # a line was quarantined
    check_access_rows(sqlite_url)
    with arrays.open_stream(sqlite_url, "t") as stream:
        assert stream["time"][:].tolist() == [1577901845000000000, 1577934246000000000]


def test_import_with_an_inline_expression(sqlite_url, tmp_path):
    log = tmp_path / "access.txt"
    log.write_text(LINES.replace(":05 +", ":05.5 +").replace(":06 +", ":06.250 +"))
    args = ["--format", "regexp", "--expression", EXPRESSION, "--time-format", TIME_FORMAT, "--allow-rejects"]
    result = run("import", str(log), "--store", sqlite_url, "--tag", "t", *args)
    assert result.exit_code == 0, result.output
    with arrays.open_stream(sqlite_url, "t") as stream:
        assert stream["time"][:].tolist() == [1577901845500000000, 1577934246250000000]
        assert stream["code"][:].tolist() == ["200", "500"]  # no types: text, as fluentd keeps it


def test_import_with_the_schemas_parse_table(sqlite_url, tmp_path):
    log = tmp_path / "access.txt"
    log.write_text(LINES)
    schema = tmp_path / "t.toml"
    schema.write_text(
        "kind = 'log'\ntags = ['t']\n"
        "[[fields]]\nname = 'host'\ndtype = 'str'\n[[fields]]\nname = 'method'\ndtype = 'str'\n"
        "[[fields]]\nname = 'code'\ndtype = 'int64'\nrequired = true\n"
        "[parse]\ntype = 'regexp'\n"
        f"expression = '{EXPRESSION}'\ntime_format = '%d/%b/%Y:%H:%M:%S %z'\ntypes = 'code:integer'\n"
    )
    result = run("import", str(log), "--store", sqlite_url, "--tag", "t", "--schema", str(schema))
    assert result.exit_code == 3, result.output
    check_access_rows(sqlite_url)


def test_import_format_none(sqlite_url, tmp_path):
    log = tmp_path / "any.txt"
    log.write_text("first line\n\nsecond ü\n")
    result = run("import", str(log), "--store", sqlite_url, "--tag", "t", "--format", "none")
    assert result.exit_code == 0, result.output
    assert [r["message"] for r in stored(sqlite_url)] == ["first line", "second ü"]  # the blank line skipped


def test_bad_parser_options_exit_2_naming_the_problem(sqlite_url, tmp_path):
    log = tmp_path / "access.txt"
    log.write_text(LINES)
    bad = tmp_path / "bad.toml"
    bad.write_text("type = 'regexp'\nexpresion = 'x'\n")
    cases = [
        (["--parser", str(bad)], "unknown option(s) expresion"),
        (["--format", "regexp"], "'expression' parameter is required"),
        (["--expression", "(x)"], "No named captures"),
        (["--parser", str(parser_toml(tmp_path)), "--expression", "(?<a>x)"], "--parser holds the whole"),
        (["--expression", "(?<a>x)", "--time-format", "%Q"], "unknown directive %Q"),
        (["--parser", "nginx_eror"], "--parser nginx_eror: not a file, and no shipped parser 'nginx_eror'; known: "),
        (["--parser", str(tmp_path / "missing.toml")], "missing.toml: no such file"),
    ]
    for args, message in cases:
        result = run("import", str(log), "--store", sqlite_url, "--tag", "t", *args)
        assert result.exit_code == 2 and message in result.output, (args, result.output)


def test_tail_with_a_parser_file(sqlite_url, tmp_path):
    log = tmp_path / "access.txt"
    log.write_text(LINES)
    command = [sys.executable, "-c", "import windvane; windvane.main()", "tail", str(log), "--store", sqlite_url]
    command += ["--tag", "t", "--parser", str(parser_toml(tmp_path)), "--poll-ms", "50", "--commit-ms", "100"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO, text=True)
    try:
        assert process.stdout.readline().startswith("following"), process.stderr.read()
        deadline = time.monotonic() + 30
        while len(stored(sqlite_url) if _exists(sqlite_url) else []) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(30)
    check_access_rows(sqlite_url)


def _exists(url: str) -> bool:
    try:
        arrays.open_stream(url, "t").close()
    except arrays.StreamNotFoundError:
        return False
    return True


def test_import_with_a_shipped_parser_by_name(sqlite_url, tmp_path):
    from windvane import parsers

    log = tmp_path / "error.log"
    log.write_bytes(parsers.sample_path("nginx_error").read_bytes())
    result = run("import", str(log), "--store", sqlite_url, "--tag", "t", "--parser", "nginx_error")
    assert result.exit_code == 0, result.output
    rows = stored(sqlite_url)
    assert len(rows) == len(log.read_text().splitlines())
    assert rows[0]["level"] == "error" and rows[0]["client"] == "192.0.2.1" and rows[0]["pid"] == 1234


def test_parsers_lists_the_shipped_ones_and_shows_one():
    from windvane import parsers

    listed = run("parsers")
    assert listed.exit_code == 0
    assert [line.split()[0] for line in listed.output.splitlines()] == parsers.list_parsers()
    shown = run("parsers", "nginx_error")
    assert shown.exit_code == 0 and 'type = "regexp"' in shown.output
    assert "#   2024/03/01 12:00:01 [notice] 1#1: signal process started" in shown.output
    unknown = run("parsers", "nope")
    assert unknown.exit_code == 2 and "no shipped parser 'nope'; known: access_extra" in unknown.output
