"""windvane's logfmt parser against the reference decoder, Go's ``github.com/go-logfmt/logfmt``.

fluentd has no logfmt parser of its own (see :mod:`tests.connectors.files.logfmt_oracle`): the corpus
``tests/fixtures/logs/logfmt/``, a generated corpus of awkward lines and the shipped ``logfmt`` parser's
samples run through the decoder and through windvane. Each line must be refused by both with the same
message, or give the same pairs; through the whole parser, the record is the pairs (a repeated key keeps
its last value) less the time key, and the refused lines are rejected with the decoder's message.
"""

from __future__ import annotations

import random
import tomllib
from pathlib import Path

import pytest

from tests.connectors.files.fluent_corpus import CorpusCase, load_cases
from tests.connectors.files.logfmt_oracle import decode
from windvane.connectors.files.logs import LogOptions
from windvane.connectors.files.logs.fluent import ParseConfig, fluent_format
from windvane.connectors.files.logs.fluent.logfmt import LogfmtError, logfmt_pairs
from windvane.connectors.files.logs.lines import split_lines
from windvane.parsers import catalog, list_parsers, parser_path, sample_path

pytestmark = pytest.mark.clients

CORPUS = Path(__file__).resolve().parents[2] / "fixtures" / "logs" / "logfmt"
NOW = 1_800_000_000_000_000_000


def shipped_cases() -> list[CorpusCase]:
    """The shipped parsers of type logfmt, as cases of their sample lines."""
    found = []
    for name in list_parsers():
        parse = tomllib.loads(parser_path(name).read_text())
        if parse["type"] == "logfmt":
            lines = [line for line in sample_path(name).read_bytes().split(b"\n") if line]
            found.append(CorpusCase(f"shipped-{name}", f"parsers/{name}.toml", parse, lines))
    return found


CASES = load_cases(CORPUS) + shipped_cases()


PIECES = ["a", "k", "=", '"', "\\", " ", "\t", "\\u00e9", "\\ud83d", "\\ude00", "\\n", "é", "\ufffd", "u", "0"]


def generated_lines(count: int = 3000) -> list[bytes]:
    """Lines of awkward characters (quotes, escapes, ``=``, white space, non-ASCII, U+FFFD), always the same."""
    pick = random.Random(20240301)
    return ["".join(pick.choice(PIECES) for _ in range(pick.randint(0, 12))).encode("utf-8") for _ in range(count)]


def structured_lines(count: int = 3000) -> list[bytes]:
    """Lines of pairs (``k``, ``k=``, ``k=v``, ``k="v w"``, ``k=""``) with white space between or not, some with a
    stray ``=`` or ``"``: mostly lines the parser's Arrow path reads, quoted values included."""
    pick = random.Random(7)
    keys, values = ["a", "k2", "é", "x.y", "t\\"], ["", "1", "é", '""', '"a b"', '"\tx= "', '"\ufffd"', "v\\"]
    lines = []
    for _ in range(count):
        pairs = []
        for _ in range(pick.randint(0, 5)):
            value = pick.choice([*values, None])
            pairs.append(pick.choice(keys) + ("" if value is None else "=" + value))
            pairs.append(pick.choice([" ", "  ", "\t", "" if value and value.endswith('"') else " "]))
        line = "".join(pairs)
        if line and pick.random() < 0.2:
            at = pick.randrange(len(line))
            line = line[:at] + pick.choice(['"', "=", " "]) + line[at:]
        lines.append(line.encode())
    return lines


#: Lines as the parser's Arrow path reads them (quoted values included).
STRUCTURED = structured_lines()


def mine(line: bytes) -> dict:
    try:
        return {"pairs": [list(pair) for pair in logfmt_pairs(line)]}
    except LogfmtError as exc:
        return {"error": str(exc)}


def theirs(result: dict) -> dict:
    return {"error": result["error"]} if "error" in result else {"pairs": result["pairs"]}


def test_the_decoder_and_windvane_read_every_line_alike():
    lines = [line for case in CASES for line in case.lines] + generated_lines() + STRUCTURED
    differ = [
        (line, expected, got)
        for line, result in zip(lines, decode(lines))
        if (got := mine(line)) != (expected := theirs(result))
    ]
    assert not differ, "\n".join(f"{line!r}: go {expected}; windvane {got}" for line, expected, got in differ[:20])


GENERATED = CorpusCase("generated", "test_logfmt_oracle.py", {"type": "logfmt"}, generated_lines() + STRUCTURED)


@pytest.mark.parametrize("case", [*CASES, GENERATED], ids=[case.name for case in [*CASES, GENERATED]])
def test_the_parser_gives_the_decoders_records(case):
    """Through the whole parser: Arrow splits the lines without quotes, the others are decoded one by one."""
    config = ParseConfig.from_mapping(case.parse)
    lines, rejected = split_lines(b"".join(line + b"\n" for line in case.lines), first_line=0, now=NOW, keep_blank=True)
    assert not rejected
    rows = fluent_format(config).parse(lines, LogOptions(now=NOW, written=NOW))
    columns = {name: values.to_pylist() for name, values in rows.columns.items()}
    key = config.effective_time_key
    for i, result in enumerate(decode(case.lines)):
        if "error" in result:
            assert rows.faults.get(i) == result["error"], case.lines[i]
            continue
        expected = dict(result["pairs"])
        has_time = key in expected
        if has_time and not config.keep_time_key:
            del expected[key]
        record = {name: values[i] for name, values in columns.items() if name != "time" and values[i] is not None}
        if i in rows.faults:
            assert has_time and rows.faults[i].startswith("invalid time format"), (case.lines[i], rows.faults[i])
            continue
        assert record == expected, case.lines[i]
        assert (columns["time"][i] != NOW) == has_time, case.lines[i]


def test_the_shipped_logfmt_samples_decode_with_their_fields():
    shipped = [case for case in CASES if case.name.startswith("shipped-")]
    assert shipped, "the shipped library has a logfmt parser"
    for case in shipped:
        fields = catalog()[case.name.removeprefix("shipped-")]["fields"]
        for line, result in zip(case.lines, decode(case.lines)):
            assert "error" not in result, (line, result)
            pairs = dict(result["pairs"])
            assert all(pairs.get(field) for field in fields), (line, fields)
