"""The fluentd parser corpus (``tests/fixtures/logs/fluent/*.toml``, and the shipped ``parsers/``) and what the
real fluentd makes of it.

:func:`corpus` loads the cases; the session fixture :func:`fluentd_corpus` runs them all through ONE
fluentd (see :mod:`tests.connectors.files.fluentd_oracle`) and hands out the outcomes by case name.
"""

from __future__ import annotations

import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.connectors.files.fluentd_oracle import OracleCase, Outcome, parse_section, run_fluentd
from windvane.parsers import list_parsers, parser_path, sample_path

CORPUS = Path(__file__).resolve().parents[2] / "fixtures" / "logs" / "fluent"
#: Parser types windvane has that fluentd does not (users add them as plugins): checked against their own oracle
#: (logfmt: tests/connectors/files/test_logfmt_oracle.py), never sent to fluentd.
NOT_IN_FLUENTD = frozenset({"logfmt"})
#: The machine's zone for cases that name none: not UTC, so local time is told apart from UTC, and the same
#: wherever the suite runs.
DEFAULT_ZONE = "Europe/Paris"


@dataclass(frozen=True)
class CorpusCase:
    """One case: its name, the file it is in, its ``<parse>`` options (fluentd's names) and its lines."""

    name: str
    source: str
    parse: dict
    lines: list[bytes]
    local_zone: str | None = None  # the machine's zone (TZ) both fluentd and windvane run with

    def oracle(self) -> OracleCase:
        return OracleCase(self.name, parse_section(self.parse), self.lines, self.local_zone)


def _lines(case: dict) -> list[bytes]:
    if "lines_hex" in case:
        return [bytes.fromhex(text) for text in case["lines_hex"]]
    return [text.encode() for text in case["lines"]]


def load_cases(folder: Path) -> list[CorpusCase]:
    """The ``[[case]]`` s of every TOML file in ``folder``, in file then case order."""
    found = []
    for path in sorted(folder.glob("*.toml")):
        for case in tomllib.loads(path.read_text())["case"]:
            found.append(
                CorpusCase(
                    case["name"], path.name, dict(case["parse"]), _lines(case), case.get("local_zone", DEFAULT_ZONE)
                )
            )
    names = [case.name for case in found]
    assert len(set(names)) == len(names), "case names must be unique"
    return found


def shipped_cases() -> list[CorpusCase]:
    """The shipped parser library (``parsers/``) as cases named ``shipped-<name>``: its sample lines (those of a
    type fluentd has)."""
    found = []
    for name in list_parsers():
        lines = [line for line in sample_path(name).read_bytes().split(b"\n") if line]
        parse = tomllib.loads(parser_path(name).read_text())
        if parse["type"] in NOT_IN_FLUENTD:
            continue
        found.append(CorpusCase(f"shipped-{name}", f"parsers/{name}.toml", parse, lines, DEFAULT_ZONE))
    return found


def corpus() -> list[CorpusCase]:
    """The corpus, then the shipped parsers: fluentd runs once for all of them."""
    return load_cases(CORPUS) + shipped_cases()


@dataclass(frozen=True)
class OracleRun:
    """The outcomes by case name, and the wall-clock window (ns) fluentd ran in ("now" times fall inside)."""

    outcomes: dict[str, list[Outcome]]
    started: int
    ended: int


@pytest.fixture(scope="session")
def fluentd_corpus(tmp_path_factory) -> OracleRun:
    started = time.time_ns()
    outcomes = run_fluentd([case.oracle() for case in corpus()], tmp_path_factory.mktemp("fluentd-corpus"))
    return OracleRun(outcomes, started, time.time_ns())
