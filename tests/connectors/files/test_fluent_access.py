"""fluentd's apache2, apache_error and nginx parsers, and the regexp matching they share with the regexp parser.

Expected records are what fluentd 1.14.6 gives for the same lines (the corpus ``apache.toml`` checks them
against the real fluentd); here the rules one by one, the RE2 path against the ``re`` path, and
`windvane import --format nginx|apache2` as a real process into a real SQLite store.
"""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from tests.cli.test_import_process import run_import
from windvane import arrays
from windvane.connectors.files.logs import LogOptions, parse_log
from windvane.connectors.files.logs.fluent import PARSERS, ParseConfig, ParseConfigError, fluent_format
from windvane.connectors.files.logs.fluent.line_regexp import LineRegexp
from windvane.connectors.files.logs.fluent.parsers.apache2 import EXPRESSION as APACHE2
from windvane.connectors.files.logs.fluent.parsers.apache_error import EXPRESSION as APACHE_ERROR
from windvane.connectors.files.logs.fluent.parsers.nginx import EXPRESSION as NGINX

NOW = 1_700_000_000_123_456_789
T0 = 1_709_251_200_000_000_000  # 2024-03-01T00:00:00Z


def parse(kind: str, text: str, **options):
    config = ParseConfig.from_mapping({"type": kind, **options})
    return parse_log(fluent_format(config), text.encode(), LogOptions(now=NOW))


def rows(parsed) -> list[dict]:
    return parsed.table.to_pylist()


def test_registered_with_their_time_key() -> None:
    assert {"apache2", "apache_error", "nginx"} <= set(PARSERS)
    assert all(ParseConfig(kind).effective_time_key == "time" for kind in ("apache2", "apache_error", "nginx"))


def test_apache2_makes_dashes_null_and_numbers_of_code_and_size() -> None:
    parsed = parse(
        "apache2",
        '::1 - frank [01/Mar/2024:00:00:00 +0000] "GET /a\\"b HTTP/1.1" 200 2326 "http://r/" "M \\"x\\""\n'
        '- - - [01/Mar/2024:00:00:01 +0100] "-" - - "-" "-"\n'
        '10.0.0.1 - - [01/Mar/2024:00:00:02 +0000] "GET /x" 0 12abc\n'
        '10.0.0.1 - - [01/Mar/2024:00:00:03 +0000] "GET / HTTP/1.1" 200 5 "-"\n'
        '10.0.0.1 - - [01/Foo/2024:00:00:03 +0000] "GET / HTTP/1.1" 200 5\n',
    )
    assert rows(parsed) == [
        {
            "time": T0,
            "host": "::1",
            "user": "frank",
            "method": "GET",
            "path": '/a\\"b',
            "code": 200,
            "size": 2326,
            "referer": "http://r/",
            "agent": 'M \\"x\\"',
        },
        dict.fromkeys(("host", "user", "path", "code", "size", "referer", "agent"))
        | {"time": T0 + 1_000_000_000 - 3_600_000_000_000, "method": "-"},
        {"time": T0 + 2_000_000_000, "host": "10.0.0.1", "user": None, "method": "GET", "path": "/x"}
        | {"code": None, "size": 12, "referer": None, "agent": None},
    ]
    assert [r.reason for r in parsed.rejected] == [
        "line 4: pattern not matched: the line matches the expression through its last field 'size', not after it",
        "line 5: invalid time format: value = 01/Foo/2024:00:00:03 +0000",
    ]


def test_apache2_ignores_the_regexp_options_but_keeps_the_time_text() -> None:
    line = '1.2.3.4 - - [01/Mar/2024:00:00:00 +0000] "GET / HTTP/1.1" 200 - "" "-"\n'
    options = {"types": "code:string", "null_empty_string": True, "null_value_pattern": "/GET/", "time_key": "host"}
    (row,) = rows(parse("apache2", line, keep_time_key=True, **options))
    assert row == {
        "time": T0,
        "host": "1.2.3.4",
        "user": None,
        "time_text": "01/Mar/2024:00:00:00 +0000",
        "method": "GET",
        "path": "/",
        "code": 200,
        "size": None,
        "referer": "",
        "agent": None,
    }


def test_apache2_needs_a_time_format_for_a_zone_as_fluentd() -> None:
    with pytest.raises(ParseConfigError, match="timezone or utc needs a time_format"):
        fluent_format(ParseConfig("apache2", utc=True))


def test_nginx_keeps_text_and_reads_the_forwarded_for_field() -> None:
    parsed = parse(
        "nginx",
        '1.1.1.1 - - [01/Mar/2024:00:00:00 +0000] "GET / HTTP/1.1" 200 - "-" "curl" "9.9.9.9"\n'
        '1.1.1.1 - - [01/Mar/2024:00:00:00 +0000] "GET / HTTP/1.1" 200 5 "-" "curl" 1.2.3.4, 5.6.7.8\n'
        '1.1.1.1 - - [01/Mar/2024:00:00:00 +0000] "GET / HTTP/1.1" 200 5 "-" "curl"\n'
        '1.1.1.1 - - [01/Mar/2024:00:00:00 +0000] "GET / HTTP/1.1" 200 5\n'
        '1.1.1.1 - - [01/Mar/2024:00:00:00 +0000] "GET / HTTP/1.1" 200 5 "-" "curl" "1" "2"\n',
    )
    got = rows(parsed)
    assert [(r["code"], r["size"], r["user"], r["http_x_forwarded_for"]) for r in got] == [
        ("200", "-", "-", "9.9.9.9"),
        ("200", "5", "-", "1.2.3.4, 5.6.7.8"),
        ("200", "5", "-", None),
        ("200", "5", "-", None),
    ]
    assert [r.reason for r in parsed.rejected] == [
        "line 5: pattern not matched: the line matches the expression through its last field 'size', not after it"
    ]


def test_nginx_takes_types_a_zone_and_its_own_time_format() -> None:
    line = '1.1.1.1 - - [01/Mar/2024:09:00:00 +0900] "GET / HTTP/1.1" 200 - "-" "-"\n'
    (row,) = rows(parse("nginx", line, types="code:integer", null_value_pattern="/^-$/", timezone="Asia/Tokyo"))
    assert (row["time"], row["code"], row["size"], row["referer"]) == (T0, 200, None, None)
    own = parse("nginx", line.replace("01/Mar/2024:09:00:00 +0900", "2024-03-01"), time_format="%Y-%m-%d", utc=True)
    assert rows(own)[0]["time"] == T0
    (row,) = rows(parse("nginx", "a b\n", expression="/^(?<remote>\\S+) (?<message>.*)$/"))
    assert row == {"time": NOW, "remote": "a", "message": "b"}


def test_apache_error_with_and_without_pid_and_client() -> None:
    parsed = parse(
        "apache_error",
        "[Fri Mar 01 00:00:00 2024] [error] [client 1.2.3.4] denied\n"
        "[Fri Mar 01 00:00:00.25 2024] [core:error] [pid 1:tid 2] [client 1.2.3.4:5] AH00126: x\n"
        "[Fri Mar 01 00:00:00 2024] [notice] [pid 7] started\n"
        "[Fri Mar 01 00:00:00 2024] [notice] [client 1.2.3.4] [pid 7] client first\n"
        "[Fri Mar 01 00:00:00 2024] [notice]\n",
    )
    got = [{k: v for k, v in r.items() if k != "time"} for r in rows(parsed)]
    assert got == [
        {"level": "error", "pid": None, "client": "1.2.3.4", "message": "denied"},
        {"level": "core:error", "pid": "1:tid 2", "client": "1.2.3.4:5", "message": "AH00126: x"},
        {"level": "notice", "pid": "7", "client": None, "message": "started"},
        {"level": "notice", "pid": None, "client": "1.2.3.4", "message": "[pid 7] client first"},
    ]
    times = [r["time"] for r in rows(parsed)]
    assert times[1] - times[0] == 250_000_000 and times[0] == times[2] != NOW  # fluentd's default time parsing
    assert [r.reason for r in parsed.rejected] == [
        "line 5: pattern not matched: the line matches the expression through field 'level', not through 'message'"
    ]


@pytest.mark.parametrize("expression", [APACHE2, APACHE_ERROR, NGINX, r"/^(?<a>\w+) (?<b>\d*)(?<c>x)?/"])
def test_the_fixed_expressions_run_on_re2(expression: str) -> None:
    assert LineRegexp(expression).engine == "re2"


def _random_line(rng: random.Random) -> str:
    alphabet = 'ab -[]"/:0123456789é☃ü\t'
    return "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 20)))


@pytest.mark.parametrize(
    "expression",
    [
        r"/^(?<first>.)(?<rest>[^ ]*) (?<msg>.{0,3})/",
        r"/(?<w>\w+)(?: (?<d>\d+))?/",
        r'/^(?<q>"[^"]*")?(?<tail>.*)$/',
        r"/(?<a>[^a-z]{2})(?<b>\S*)$/",
    ],
)
def test_re2_on_ascii_lines_and_bytes_on_the_others_give_re_on_bytes_exactly(expression: str) -> None:
    rng = random.Random(7)
    lines = [_random_line(rng) for _ in range(3000)]
    regexp = LineRegexp(expression)
    assert regexp.engine == "re2"
    text = pa.array(lines, pa.large_string())
    fast, slow = regexp.match(text), regexp.match_bytes(text)
    assert fast.unmatched.tolist() == slow.unmatched.tolist()
    for name in regexp.names:
        assert fast.columns[name].to_pylist() == slow.columns[name].to_pylist(), name


def test_a_pattern_re2_cannot_run_is_matched_by_re() -> None:
    regexp = LineRegexp(r"/^(?<a>\w)\k<a>(?<b>.*)$/")
    assert regexp.engine == "python"
    found = regexp.match(pa.array(["aab", "abb", "üüx"], pa.large_string()))
    assert found.columns["b"].to_pylist() == ["b", None, None]


NGINX_LOG = (
    '10.1.1.1 - bob [01/Mar/2024:00:00:00 +0000] "GET /x?y=1 HTTP/2.0" 404 0 "https://ref/" "curl/8.0" "1.2.3.4"\n'
    '10.1.1.2 - - [01/Mar/2024:00:00:01 +0000] "GET /caf\u00e9 HTTP/1.1" 200 - "-" "-"\n'
    "not an access line\n"
)
APACHE2_LOG = (
    '::1 - frank [01/Mar/2024:00:00:00 +0000] "GET /apache_pb.gif HTTP/1.0" 200 2326 "http://e/" "Mozilla/4.08"\n'
    '10.0.0.2 - - [01/Mar/2024:00:00:01 +0000] "POST /api HTTP/2.0" 500 - "-" "-"\n'
    "not an access line\n"
)


def _stored(url: str, tag: str, names: list[str]) -> list[tuple]:
    with arrays.open_stream(url, tag) as stream:
        columns = [stream[name][:].tolist() for name in names]
    return list(zip(*columns))


def test_import_format_nginx_and_apache2_are_fluentds_parsers(sqlite_url, tmp_path) -> None:
    nginx, apache = tmp_path / "nginx.log", tmp_path / "apache.log"
    nginx.write_text(NGINX_LOG)
    apache.write_text(APACHE2_LOG)
    out = run_import(str(nginx), "--store", sqlite_url, "--tag", "web.nginx", "--format", "nginx", "--allow-rejects")
    assert out.returncode == 0, out.stderr
    out = run_import(
        str(apache), "--store", sqlite_url, "--tag", "web.apache", "--format", "apache2", "--allow-rejects"
    )
    assert out.returncode == 0, out.stderr
    names = ["time", "remote", "host", "user", "path", "code", "size", "http_x_forwarded_for"]
    assert _stored(sqlite_url, "web.nginx", names) == [
        (T0, "10.1.1.1", "-", "bob", "/x?y=1", "404", "0", "1.2.3.4"),
        (T0 + 1_000_000_000, "10.1.1.2", "-", "-", "/caf\u00e9", "200", "-", ""),  # a missing text is ""
    ]
    names = ["time", "host", "user", "method", "code", "size", "referer", "agent"]
    assert _stored(sqlite_url, "web.apache", names) == [
        (T0, "::1", "frank", "GET", 200, 2326, "http://e/", "Mozilla/4.08"),
        (T0 + 1_000_000_000, "10.0.0.2", "", "POST", 500, -(2**63), "", ""),  # null: the columns' fills
    ]
    with arrays.open_stream(sqlite_url, "web.nginx", quarantine=True) as quarantine:
        assert quarantine["raw"][:].tolist() == [b"not an access line"]
