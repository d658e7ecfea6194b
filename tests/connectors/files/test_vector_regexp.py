"""VectorRegexp gives what Python's ``re.search`` gives, line by line, on fluentd's own expressions.

The expressions are fluentd's format definitions, as its documentation
(docs.fluentd.org/parser/{apache2,apache_error,nginx,syslog}) and its 1.14.6
parser plugins define them; the lines mix well-formed ones, near misses,
optional parts present and absent, empty quoted fields, Unicode and control
characters.
"""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest

from windvane.connectors.files.logs.fluent.rubyre import ruby_regexp
from windvane.connectors.files.logs.fluent.vector_regexp import (
    BLOCK_LINES,
    RegexpError,
    VectorRegexp,
)

NGINX_DOCS = r"""/^(?<remote>[^ ]*) (?<host>[^ ]*) (?<user>[^ ]*) \[(?<time>[^\]]*)\] "(?<method>\S+)(?: +(?<path>[^\"]*?)(?: +\S*)?)?" (?<code>[^ ]*) (?<size>[^ ]*)(?: "(?<referer>[^\"]*)" "(?<agent>[^\"]*)"(?:\s+(?<http_x_forwarded_for>[^ ]+))?)?$/"""
NGINX_1_14 = r"""/^(?<remote>[^ ]*) (?<host>[^ ]*) (?<user>[^ ]*) \[(?<time>[^\]]*)\] "(?<method>\S+)(?: +(?<path>[^\"]*?)(?: +\S*)?)?" (?<code>[^ ]*) (?<size>[^ ]*)(?: "(?<referer>[^\"]*)" "(?<agent>[^\"]*)"(?:\s+\"?(?<http_x_forwarded_for>[^\"]*)\"?)?)?$/"""
APACHE2 = r"""/^(?<host>[^ ]*) [^ ]* (?<user>[^ ]*) \[(?<time>[^\]]*)\] "(?<method>\S+)(?: +(?<path>(?:[^\"]|\\")*?)(?: +\S*)?)?" (?<code>[^ ]*) (?<size>[^ ]*)(?: "(?<referer>(?:[^\"]|\\")*)" "(?<agent>(?:[^\"]|\\")*)")?$/"""
APACHE_ERROR = r"""/^\[[^ ]* (?<time>[^\]]*)\] \[(?<level>[^\]]*)\](?: \[pid (?<pid>[^\]]*)\])?( \[client (?<client>[^\]]*)\])? (?<message>.*)$/"""
SYSLOG = r"""/^(?<time>[^ ]*\s*[^ ]* [^ ]*) (?<host>[^ ]*) (?<ident>[^ :\[]*)(?:\[(?<pid>[0-9]+)\])?(?:[^\:]*\:)? *(?<message>.*)$/"""
SYSLOG_PRI = r"""/^\<(?<pri>[0-9]+)\>(?<time>[^ ]* {1,2}[^ ]* [^ ]*) (?<host>[^ ]*) (?<ident>[^ :\[]*)(?:\[(?<pid>[0-9]+)\])?(?:[^\:]*\:)? *(?<message>.*)$/"""
SYSLOG_5424 = r"""/(?<host>[!-~]{1,255}) (?<ident>[!-~]{1,48}) (?<pid>[!-~]{1,128}) (?<msgid>[!-~]{1,32}) (?<extradata>(?:\-|(?:\[.*?(?<!\\)\])+))(?: (?<message>.+))?\z/m"""

EXPRESSIONS = {
    "nginx_docs": (NGINX_DOCS, "re2"),
    "nginx_1_14": (NGINX_1_14, "re2"),
    "apache2": (APACHE2, "re2"),
    "apache_error": (APACHE_ERROR, "re2"),
    "syslog": (SYSLOG, "re2"),
    "syslog_pri": (SYSLOG_PRI, "re2"),
    "syslog_rfc5424": (SYSLOG_5424, "python"),  # a lookbehind
}

TEXTS = ["", "-", "x", "é", "日本語", "🙂", "a b", 'q\\"q', "٣٤", "\x0b", "\t", "K", "k"]


def _pick(rng: random.Random, *choices: str) -> str:
    return rng.choice(choices)


def access_line(rng: random.Random) -> str:
    addr = _pick(rng, "127.0.0.1", "10.1.2.3", "::1", "", "ホスト")
    host = _pick(rng, "-", "192.168.0.1", "", "h\x0bh")
    when = _pick(rng, "28/Feb/2013:12:00:00 +0900", "01/Jan/2026:00:00:00 +0000", "", "٣/Feb/2013")
    request = _pick(rng, "GET / HTTP/1.1", "GET", "GET  /a b  HTTP/1.0", "POST /é?q=日本 HTTP/2.0", "-", "", "GET /x ")
    tail = _pick(
        rng,
        "",
        ' "-" "Opera/12.0"',
        ' "" ""',
        ' "http://a/" "Mozilla/5.0 (X11; Linux) 🙂"',
        ' "-" "ua" -',
        ' "-" "ua" "1.2.3.4, 5.6.7.8"',
        ' "-" "ua"\x0b10.0.0.1',
        ' "-" "a\\"b"',
        ' "-"',
    )
    code = _pick(rng, "200", "404", "-", "", "٢٠٠")
    return f'{addr} {host} - [{when}] "{request}" {code} {_pick(rng, "777", "-", "0")}{tail}'


def syslog_line(rng: random.Random) -> str:
    pri = _pick(rng, "<13>", "<6>", "", "<x>")
    when = _pick(rng, "Feb 28 12:00:00", "Feb  8 12:00:00", "2013-02-28T12:00:00Z", "")
    ident = _pick(rng, "sshd[123]:", "cron:", "kernel", "app[x]:", "日本[7]:", "")
    message = _pick(rng, *TEXTS, "Accepted key for ü from ::1", " leading", "a: b: c")
    return f"{pri}{when} {_pick(rng, 'host', '', 'héte')} {ident} {message}"


def other_line(rng: random.Random) -> str:
    five = f"{_pick(rng, 'host', '-')} {_pick(rng, 'app', 'ü')} 1 ID47 "
    extra = _pick(rng, "-", '[a x="1"]', '[a x="\\]"][b y="2"]', "[bad", "")
    error = f"[Wed Oct 11 14:32:52 2000] [error] {_pick(rng, '', '[pid 7] ')}{_pick(rng, '', '[client 1.2.3.4] ')}"
    return _pick(
        rng,
        five + extra + _pick(rng, "", " message 🙂", " "),
        error + _pick(rng, *TEXTS),
        rng.choice(TEXTS) + rng.choice(TEXTS),
        "line\nwith a newline",
        "ends with a newline\n",
    )


def corpus(count: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    makers = (access_line, syslog_line, other_line)
    return [rng.choice(makers)(rng) for _ in range(count)]


def assert_same_as_re(matcher: VectorRegexp, lines: list[str]) -> None:
    got = matcher.match(pa.array(lines, pa.large_string()))
    found = [matcher.pattern.search(line) for line in lines]
    assert got.unmatched.tolist() == [m is None for m in found]
    assert set(got.columns) == set(matcher.pattern.groupindex)
    for name, column in got.columns.items():
        assert column.type == pa.large_string()
        expected = [m.group(name) if m else None for m in found]
        assert column.to_pylist() == expected, name


@pytest.mark.parametrize("name", list(EXPRESSIONS))
def test_fluentd_expressions_match_as_re_does(name):
    expression, engine = EXPRESSIONS[name]
    matcher = VectorRegexp(ruby_regexp(expression))
    assert matcher.engine == engine, matcher.reason
    lines = corpus(3000)
    assert_same_as_re(matcher, lines)
    assert not matcher.match(pa.array(lines, pa.large_string())).unmatched.all()


def test_many_lines_run_in_blocks_on_threads():
    matcher = VectorRegexp(ruby_regexp(NGINX_1_14), threads=2)
    lines = corpus(BLOCK_LINES * 2 + 123, seed=11)
    assert_same_as_re(matcher, lines)


def test_the_python_path_says_why():
    assert "lookbehind" in VectorRegexp(ruby_regexp(SYSLOG_5424)).reason
    assert "backreference" in VectorRegexp(r"(?P<a>x)(?P=a)").reason
    assert "atomic" in VectorRegexp(r"(?P<a>(?>x+))").reason
    assert "possessive" in VectorRegexp(r"(?P<a>x++)").reason
    assert "case" in VectorRegexp(ruby_regexp("/(?<a>k)/i")).reason
    assert "Unicode" in VectorRegexp(r"(?P<a>\d+)").reason  # no re.ASCII: \d is Unicode in re
    assert "repetition" in VectorRegexp(r"(?:(?P<a>x)y)+").reason
    assert VectorRegexp(r"(?P<a>x{2000})").engine == "python"  # RE2 refuses repeats over 1000


@pytest.mark.parametrize(
    "pattern",
    [
        r"(?a)(?P<a>\s+)(?P<b>\S+)",  # RE2's \s has no \v
        r"(?a)(?P<d>\d+)(?P<w>\w*)\b",
        r"(?P<a>x)?(?P<b>y*)(?P<c>z*)?$",  # empty groups, absent groups
        r"^(?:(?P<a>a*)|(?P<b>b*))(?P<c>c?)",  # a branch whose sides can match empty: asked of re again
        r"(?s)(?P<all>.*)",
        r"(?P<x>[^\]\\-]+)(?P<y>[\x00-\x1f\u00e9-\u00ff🙂]*)",
        ruby_regexp(r"/(?<h>\h+)-(?<k>\k<h>)?/"),
        ruby_regexp(r"/(?<a>x{,2})(?<b>\H*)\z/"),
        "(?P<a>k)(?P<b>\u017f)?",
        r"(?x) (?P<a> [a-z]+ ) \s* (?P<b> \d* )",
        r"(?a)(?P<a>\B)(?P<b>x?)",
    ],
)
def test_edge_cases_match_as_re_does(pattern):
    lines = [
        *corpus(800, seed=3),
        "xx",
        "x",
        "y",
        "xyz",
        "",
        "abc",
        "bc",
        "\x0b\x0bv",
        "٣",
        "K\u017f",
        "k\u017f",
        "1f-1f",
        "aa\n",
    ]
    assert_same_as_re(VectorRegexp(pattern), lines)


def test_refused_expressions():
    with pytest.raises(RegexpError):
        VectorRegexp("(?P<a>")
    with pytest.raises(RegexpError):
        VectorRegexp("(a)")


def test_empty_array():
    got = VectorRegexp(ruby_regexp(NGINX_1_14)).match(pa.array([], pa.large_string()))
    assert len(got.unmatched) == 0 and got.unmatched.dtype == np.bool_


def test_sliced_and_tiny_arrays():
    matcher = VectorRegexp(r"(?a)(?P<a>\w*)(?P<b>-)?(?P<c>é*)$")
    lines = pa.array(["é", "a-", "long enough to be out of line é-ééé", "", "x"], pa.large_string())
    for start in range(len(lines)):
        for stop in range(start, len(lines) + 1):
            assert_same_as_re(matcher, lines.slice(start, stop - start).to_pylist())
            got = matcher.match(lines.slice(start, stop - start))
            expected = matcher.match(pa.array(lines.slice(start, stop - start).to_pylist(), pa.large_string()))
            assert {k: v.to_pylist() for k, v in got.columns.items()} == {
                k: v.to_pylist() for k, v in expected.columns.items()
            }


def test_spans_say_where_groups_are_and_defer_to_re_where_re2_does_not_run() -> None:
    regexp = VectorRegexp(r"^(?P<a>[a-z]+) (?P<rest>)")
    found = regexp.spans(pa.array(["ab cd", "x", "é f"], pa.large_string()))
    assert found is not None
    a, rest = found.flatten()  # each group with the lines that did not match null
    assert a.to_pylist() == [[0, 2], None, None]
    assert rest.to_pylist() == [[3, 0], None, None]
    assert regexp.spans(pa.array(["ab\ncd"], pa.large_string())) is None  # a newline: re's reading
    assert VectorRegexp(r"(?P<a>a)(?=b)").spans(pa.array(["ab"], pa.large_string())) is None  # re only
