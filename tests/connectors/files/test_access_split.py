"""split_access gives, on every line it does not mask, exactly the groups of fluentd's expression.

The oracle is the expression itself (``ruby_regexp`` and Python's ``re``),
group by group, a group that took no part being null. The lines: the
benchmark's generated nginx log, the same lines mutated at random (quotes,
brackets, backslashes, spaces, tabs, dashes, Unicode put in, characters
taken out), and hand-written hostile ones. A masked line must hold nulls;
a line the expression does not match must be masked.
"""

from __future__ import annotations

import random
import re

import numpy as np
import pyarrow as pa
import pytest

from benchmarks.nginx_log import lines as generated_lines
from tests.fluent_programs import fluentd_dir
from windvane.connectors.files.logs.fluent.access_split import KINDS, UnknownAccessKind, match_access, split_access
from windvane.connectors.files.logs.fluent.rubyre import ruby_regexp
from windvane.connectors.files.logs.fluent.vector_regexp import VectorRegexp

TIME = "[26/Nov/2026:10:00:00 +0000]"
HOSTILE = [
    f'1.2.3.4 - - {TIME} "GET /a HTTP/1.1" 200 12 "-" "curl/8"',
    f'1.2.3.4 - - {TIME} "GET /a HTTP/1.1" 200 12',  # no referer nor agent
    f'1.2.3.4 - - {TIME} "GET /a HTTP/1.1" 200 12 "-"',  # referer without agent
    f'1.2.3.4 - - {TIME} "GET /a HTTP/1.1" 200 12 "-" "curl/8" "10.0.0.1, 10.0.0.2"',  # x-forwarded-for
    f'1.2.3.4 - - {TIME} "GET /a HTTP/1.1" 200 12 "-" "curl/8"   "10.0.0.1"',
    f'1.2.3.4 - - {TIME} "GET /a HTTP/1.1" 200 12 "-" "curl/8" 10.0.0.1',
    f'1.2.3.4 - - {TIME} "GET /a HTTP/1.1" 200 12 "-" "curl/8" 10.0.0.1 extra',
    f'1.2.3.4 - - {TIME} "GET /a HTTP/1.1" 200 12 "-" "curl/8" ',
    f'1.2.3.4 - - {TIME} "GET /a HTTP/1.1" 200 12 "-" "curl/8"  x',
    f'1.2.3.4 - - {TIME} "GET /a HTTP/1.1" 200 12 "-" "curl/8" "x" y',
    f'1.2.3.4 - - {TIME} "GET /a HTTP/1.1" 200 12 "-" "curl/8" "x',
    f'1.2.3.4 - - {TIME} "GET /a HTTP/1.1" 200 12 "-" "curl/8"\t"x"',
    f'1.2.3.4 - - {TIME} "GET /a HTTP/1.1" 200 12 "-" "curl/8" "x" "y"',
    f'1.2.3.4 - - {TIME} "GET /a HTTP/1.1" 200 12 "-" "cu"rl/8"',  # a quote inside the agent
    f'1.2.3.4 - - {TIME} "GET /a \\"b\\" HTTP/1.1" 200 12 "-" "curl/8"',  # apache2's escaped quotes
    f'1.2.3.4 - - {TIME} "GET /a HTTP/1.1" 200 12 "r\\"ef" "cu\\"rl"',
    f'1.2.3.4 - - {TIME} "GET /a HTTP/1.1\\" 200 12 "-" "curl/8"',
    f'1.2.3.4 - - {TIME} "GET /a HTTP/1.1" 200 12 "-\\" "curl/8\\"',
    f'1.2.3.4 - - {TIME} "-" 400 0 "-" "-"',  # a request without a space
    f'1.2.3.4 - - {TIME} "-" 400 0 "-" "Foo Bar"',  # where the greedy method swallows its quote
    f'1.2.3.4 - - {TIME} "-" 400 0 " x" "y"',
    f'1.2.3.4 - - {TIME} "-" 400 0 "x" " y"',
    f'1.2.3.4 - - {TIME} "" 400 0 "-" "-"',  # empty request
    f'1.2.3.4 - - {TIME} "GET" 400 0 "-" "-"',
    f'1.2.3.4 - - {TIME} "GET /" 200 0 "-" "-"',  # no protocol
    f'1.2.3.4 - - {TIME} "GET " 200 0 "-" "-"',
    f'1.2.3.4 - - {TIME} "GET  /a" 200 0 "-" "-"',
    f'1.2.3.4 - - {TIME} "GET  " 200 0 "-" "-"',
    f'1.2.3.4 - - {TIME} "GET /a " 200 0 "-" "-"',
    f'1.2.3.4 - - {TIME} "GET /a  HTTP/1.1" 200 0 "-" "-"',
    f'1.2.3.4 - - {TIME} "GET /a b HTTP/1.1" 200 0 "-" "-"',  # a space in the path
    f'1.2.3.4 - - {TIME} " GET /a HTTP/1.1" 200 0 "-" "-"',
    f'1.2.3.4 - - {TIME} "GET\t/a HTTP/1.1" 200 0 "-" "-"',  # tabs
    f'1.2.3.4 - - {TIME} "GET /a\tHTTP/1.1" 200 0 "-" "-"',
    f'1.2.3.4\t- - {TIME} "GET /a HTTP/1.1" 200 0 "-" "-"',
    f'1.2.3.4 - - {TIME} "GET /a HTTP/1.1" 200 0 "-" "Mozilla\t5"',
    f'1.2.3.4 - - {TIME} "GET /a HTTP/1.1" 200 0 "-" "x\ry"',
    f'1.2.3.4 - - {TIME} "GET /a HTTP/1.1" 200 0 "-" "x\ny"',
    f'1.2.3.4 - - {TIME} "GET /a HTTP/1.1"  200 0 "-" "-"',  # extra spaces
    f'1.2.3.4 - - {TIME} "GET /a HTTP/1.1" 200  0 "-" "-"',
    f'1.2.3.4 - - {TIME} "GET /a HTTP/1.1" 200 0  "-" "-"',
    f'1.2.3.4 - - {TIME} "GET /a HTTP/1.1" 200 0 "-"  "-"',
    f'1.2.3.4  - - {TIME} "GET /a HTTP/1.1" 200 0 "-" "-"',
    f'1.2.3.4 - -  {TIME} "GET /a HTTP/1.1" 200 0 "-" "-"',
    f'1.2.3.4 - - {TIME}  "GET /a HTTP/1.1" 200 0 "-" "-"',
    f' 1.2.3.4 - - {TIME} "GET /a HTTP/1.1" 200 0 "-" "-"',
    f'1.2.3.4 - - {TIME} "GET /a HTTP/1.1" 200 0 "-" "-" ',
    f'1.2.3.4 - - {TIME} "GET /a HTTP/1.1" 200 0 "" ""',  # empty referer and agent
    f'1.2.3.4 - - {TIME} "GET /a HTTP/1.1"  0 "-" "-"',  # empty code
    f'1.2.3.4 - - {TIME} "GET /a HTTP/1.1" 200  "-" "-"',
    '1.2.3.4 - - [26/Nov/2026:10:00:00] "GET /a HTTP/1.1" 200 0 "-" "-"',  # brackets
    '1.2.3.4 - - [26/Nov/2026:10:00:00  +0000] "GET /a HTTP/1.1" 200 0 "-" "-"',
    '1.2.3.4 - - [] "GET /a HTTP/1.1" 200 0 "-" "-"',
    '1.2.3.4 - - [[26/Nov] "GET /a HTTP/1.1" 200 0 "-" "-"',
    '1.2.3.4 - - [26/Nov]] "GET /a HTTP/1.1" 200 0 "-" "-"',
    '1.2.3.4 - - [26/Nov] x] "GET /a HTTP/1.1" 200 0 "-" "-"',
    '1.2.3.4 - - 26/Nov "GET /a HTTP/1.1" 200 0 "-" "-"',
    '1.2.3.4 - - [26/Nov "GET /a HTTP/1.1" 200 0 "-" "-"',
    '1.2.3.4 - - [26/Nov "GET /a] "HTTP/1.1" 200 0 "-" "-"',
    '1.2.3.4 - - [26/"Nov] "GET /a HTTP/1.1" 200 0 "-" "-"',
    '1.2.3.4 - - [26/Nov]"GET /a HTTP/1.1" 200 0 "-" "-"',
    f'1.2.3.4 - - {TIME} "GET /a HTTP/1.1" 200 0 "[x]" "]"',
    f'1.2.3.4] - [u] {TIME} "GET /a HTTP/1.1" 200 0 "-" "-"',
    f'1.2"3.4 - - {TIME} "GET /a HTTP/1.1" 200 0 "-" "-"',  # a quote before the request
    f'1.2.3.4 - "user" {TIME} "GET /a HTTP/1.1" 200 0 "-" "-"',
    f'1.2.3.4 - - {TIME} "GET /a HTTP/1.1" 2"0 0 "-" "-"',
    f'2001:db8::1 - - {TIME} "GET /a HTTP/1.1" 200 0 "-" "-"',  # IPv6
    f'2001:0db8:85a3:0000:0000:8a2e:0370:7334 example.com someone {TIME} "GET /a HTTP/2.0" 200 0 "-" "-"',
    f'1.2.3.4 - jörg {TIME} "GET /ü/€ HTTP/1.1" 200 0 "https://例え.jp/" "Mözilla 😀"',  # Unicode
    f'1.2.3.4 - - {TIME} "GËT /a HTTP/1.1" 200 0 "-" "-"',
    f'- - - {TIME} "- - -" - - "-" "-"',  # dashes
    f'- - - {TIME} "-" - -',
    f'1.2.3.4 - - {TIME} "GET /a HTTP/1.1" 200',  # missing fields
    f'1.2.3.4 - - {TIME} "GET /a HTTP/1.1"',
    f'1.2.3.4 - - {TIME} "GET /a HTTP/1.1',
    f"1.2.3.4 - - {TIME}",
    "1.2.3.4 - -",
    "",
    " ",
    '"',
    '""',
    "-",
    f'1.2.3.4 - - {TIME} "GET /a HTTP/1.1" 200 0 "-" "-" "-" "-"',  # extra trailing fields
    f'1.2.3.4 - - {TIME} "GET /a HTTP/1.1" 200 0 "-" "-" x "-"',
    f'1.2.3.4 - - {TIME} "GET /a HTTP/1.1" 200 0 extra',
    f'1.2.3.4 - - {TIME} "GET /a HTTP/1.1" 200 0 "-" x "-"',
    f'1.2.3.4 - - {TIME} "\\x16\\x03\\x01\\x02\\x00" 400 157 "-" "-"',  # binary junk, as nginx writes it
    f'1.2.3.4 - - {TIME} "\\x16\\x03 \\x01\\x02\\x00" 400 157 "-" "-"',
    f'1.2.3.4 - - {TIME} "GET /a\\ HTTP/1.1" 200 0 "-\\" "\\-"',
    f'1.2.3.4 - - {TIME} "GET /a HTTP/1.1" 200 0 "-" "\\"',
    f'1.2.3.4 - - {TIME} "GET /a HTTP/1.1" 200 0 "\\" "\\"',
    f'1.2.3.4 - - {TIME} "GET /a HTTP/1.1" 200 0 "\\"" "x"',
]


def oracle(expression: str, texts: list[str]) -> list[dict[str, str | None] | None]:
    pattern = ruby_regexp(expression)
    found = [pattern.search(text) for text in texts]
    return [m.groupdict() if m else None for m in found]


def check(kind: str, texts: list[str], array: pa.Array | None = None) -> np.ndarray:
    """Every unmasked line exactly as the expression reads it; the mask."""
    expression, names = KINDS[kind]
    columns, unsure = split_access(pa.array(texts, pa.large_string()) if array is None else array, kind)
    assert list(columns) == list(names)
    assert all(column.type == pa.large_string() and len(column) == len(texts) for column in columns.values())
    values = {name: column.to_pylist() for name, column in columns.items()}
    for i, expected in enumerate(oracle(expression, texts)):
        got = {name: values[name][i] for name in names}
        if unsure[i]:
            assert set(got.values()) == {None}, texts[i]
        else:
            assert expected is not None, f"masked not, matched not: {texts[i]!r}"
            assert got == expected, texts[i]
    return unsure


def mutate(rng: random.Random, text: str) -> str:
    """``text`` with one to three random edits where they hurt: delimiters, whitespace, escapes, Unicode."""
    alphabet = ['"', '"', " ", " ", "[", "]", "\\", '\\"', "\t", "-", "x", "ü", '""', "\r"]
    for _ in range(rng.randint(1, 3)):
        at = rng.randrange(len(text) + 1)
        edit = rng.random()
        if edit < 0.5:
            text = text[:at] + rng.choice(alphabet) + text[at:]
        elif edit < 0.8:
            text = text[:at] + text[at + 1 :]
        else:
            text = text[:at] + text[at : at + 1] * 2 + text[at + 1 :]
    return text


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_generated_lines_are_read_exactly_and_almost_none_masked(kind):
    texts = generated_lines(0, 6000).splitlines() + generated_lines(123_456, 2000).splitlines()
    unsure = check(kind, texts)
    assert unsure.mean() < 0.01  # the lines the fast path leaves to the regexp: requests without a space


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_mutated_lines_are_read_exactly_or_masked(kind):
    rng = random.Random(20261126)
    base = generated_lines(7_000, 400).splitlines() + HOSTILE[:20]
    texts = [mutate(rng, rng.choice(base)) for _ in range(12_000)]
    unsure = check(kind, texts)
    assert 0.2 < unsure.mean() < 0.9  # the mutations reach both paths


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_hostile_lines_are_read_exactly_or_masked(kind):
    unsure = check(kind, HOSTILE)
    assert not unsure[0] and not unsure[1]  # the shapes it is for are not masked
    assert unsure[HOSTILE.index(f'1.2.3.4 - - {TIME} "-" 400 0 "-" "Foo Bar"')]


def test_nginx_forwarded_for_shapes_are_read_not_masked():
    texts = [HOSTILE[i] for i in (3, 4, 5, 7)]  # quoted, quoted after spaces, bare, nothing after one space
    assert not check("nginx", texts).any()
    columns, _ = split_access(pa.array(texts), "nginx")
    assert columns["http_x_forwarded_for"].to_pylist() == ["10.0.0.1, 10.0.0.2", "10.0.0.1", "10.0.0.1", ""]


def test_sliced_string_arrays_and_null_lines():
    texts = HOSTILE[:10] + generated_lines(0, 50).splitlines()
    array = pa.array(["x", *texts, None, "y"], pa.string()).slice(1, len(texts) + 1)
    for kind in KINDS:
        columns, unsure = split_access(array, kind)
        assert unsure[-1] and all(column[len(texts)].as_py() is None for column in columns.values())
        check(kind, texts, array.slice(0, len(texts)))


def test_empty_arrays_and_unknown_kinds():
    columns, unsure = split_access(pa.array([], pa.large_string()), "nginx")
    assert len(unsure) == 0 and all(len(column) == 0 for column in columns.values())
    columns, unsure = split_access(pa.array(["", ""], pa.large_string()), "apache2")
    assert unsure.all() and columns["host"].null_count == 2
    with pytest.raises(UnknownAccessKind, match="syslog"):
        split_access(pa.array(["x"]), "syslog")


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_match_access_is_the_expression_on_every_line(kind):
    rng = random.Random(7)
    base = generated_lines(0, 300).splitlines() + HOSTILE
    texts = base + [mutate(rng, rng.choice(base)) for _ in range(3000)] + ["a\nb", 'x - - [t] "GET /\n" 1 2']
    array = pa.array(["skip", *texts], pa.string()).slice(1)
    expected = VectorRegexp(ruby_regexp(KINDS[kind][0]), use_re2=False).match(array)
    found = match_access(array, kind)
    assert found.unmatched.tolist() == expected.unmatched.tolist()
    for name in KINDS[kind][1]:
        assert found.columns[name].to_pylist() == expected.columns[name].to_pylist(), name
    assert len(match_access(pa.array([], pa.large_string()), kind).columns[KINDS[kind][1][0]]) == 0


def test_the_expressions_are_fluentds_own():
    plugins = fluentd_dir() / "lib" / "fluent" / "plugin"
    nginx = re.search(r":expression, (/\^.*\$/)\n", (plugins / "parser_nginx.rb").read_text())
    apache2 = re.search(r"REGEXP = (/\^.*\$/)\n", (plugins / "parser_apache2.rb").read_text())
    assert nginx and nginx.group(1) == KINDS["nginx"][0]
    assert apache2 and apache2.group(1) == KINDS["apache2"][0]
