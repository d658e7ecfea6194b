"""windvane's fluentd-compatible parsers against the real fluentd 1.14.6, record by record.

Every case of the corpus (``tests/fixtures/logs/fluent/``) runs through fluentd (one process for all, see
:mod:`tests.connectors.files.fluent_corpus`) and through windvane's parser for the same ``<parse>``
options. For each line both must agree: rejected by both, or the same fields with the same values and
types and the same time to the nanosecond. A ``multiline`` case compares its events in order and the
number of rejected buffers.

Normalisations, each a property of windvane's storage, not a tolerance: a null field and an absent one
are the same (a table's columns are shared by all its rows); an event fluentd stamps with its clock
("now": inside the window fluentd ran) must be stamped with the read time windvane was given; a field
``types`` makes a time is compared in whole seconds (fluentd's JSON writes an EventTime so); a field named
``time`` is stored as ``time_text`` (``time`` is the row's time), compared under its own name.

A difference that is accepted is listed in KNOWN with its reason; every other one fails the test.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tests.connectors.files.fluent_corpus import CorpusCase, OracleRun, corpus, fluentd_corpus  # noqa: F401
from tests.connectors.files.fluentd_oracle import Outcome
from windvane.connectors.files.logs import LogOptions, parse_log
from windvane.connectors.files.logs.fluent import ParseConfig, fluent_format
from windvane.connectors.files.logs.fluent.records import KEPT_TIME
from windvane.connectors.files.logs.lines import split_lines

pytestmark = pytest.mark.clients

CASES = corpus()

#: Accepted differences: {case name: {line index (multiline: "events" or "rejected"): why}}.
_ARRAY_AS_JSON = (
    "types array: fluentd gives a list; windvane stores the list as JSON text, since a stream column cannot hold "
    "a list (windvane import refuses a list<string> column)"
)
_NESTED_AS_JSON = (
    "a JSON/msgpack object or array: fluentd keeps it nested; windvane stores its JSON text (a stream column holds "
    "scalars)"
)
_MIXED_KINDS = (
    "a field whose values are of different kinds in one block: fluentd keeps each value's kind; a stream column has "
    "one type: integers with floats are float64, any other mix text (see fluent/values.py)"
)
_BIG_INTEGER = "an integer past int64: fluentd keeps a bignum; windvane stores its digits as text (exact)"
_SEVERAL_MAPS = (
    "several msgpack maps end on one line: fluentd makes one event of each; windvane keeps one row per line and "
    "rejects the line"
)
_NOT_UTF8 = (
    "a line that is not UTF-8: Ruby's JSON reads it (its strings keep the bytes); windvane rejects it before any "
    "parser, as it stores text as UTF-8"
)
_YEAR_PAST_NS = (
    "a time outside 1678-2261: fluentd keeps it (a Ruby Time); a row's time is int64 ns since 1970, which cannot "
    "hold it, so windvane rejects the line (invalid time format) rather than store a wrapped-around time"
)
_ARRAY_BYTES = (
    "; an empty delimiter (fluentd strips a space) splits the value into bytes, as Ruby splits a binary string: "
    "fluentd's items are the lone bytes of a character, windvane's text writes them \\xHH"
)
KNOWN: dict[str, dict[int | str, str]] = {
    "regexp-signed-years": dict.fromkeys((2, 3), _YEAR_PAST_NS),
    "regexp-unixtime-past-ns": dict.fromkeys((1, 2, 3), _YEAR_PAST_NS),
    "regexp-float-time-past-ns": {1: _YEAR_PAST_NS},
    "syslog-not-utf8": {
        0: "a line that is not UTF-8 cannot be a text column: windvane rejects it (with the byte at fault) before any "
        "parser, where fluentd keeps its bytes"
    },
    "tsv-chars-delimiter": {
        2: "an empty delimiter splits in_tail's binary line into bytes: fluentd's values are the two bytes of a "
        "character, not UTF-8 text; windvane's text columns write such a byte \\xHH"
    },
    "regexp-types-time-array": dict.fromkeys((0, 1, 2), _ARRAY_AS_JSON),
    "regexp-types": dict.fromkeys((0, 1, 2, 3), _ARRAY_AS_JSON),
    "regexp-types-array-space": {**dict.fromkeys((0, 2), _ARRAY_AS_JSON), 1: _ARRAY_AS_JSON + _ARRAY_BYTES},
    "json-types-array-empty-delimiter": {1: _ARRAY_AS_JSON, 0: _ARRAY_AS_JSON + _ARRAY_BYTES},
    "apache2-edges": {
        11: "a size past int64: fluentd keeps a Ruby bignum; an int64 column cannot, so it is null (as types integer)"
    },
    "regexp-bytes-and-ascii-lines-together": dict.fromkeys(
        (1, 2),
        "a group that cuts a character in two: fluentd writes its lone bytes as they are; a text column holds "
        "UTF-8, so windvane writes them \\xHH (the same bytes matched, the same other fields)",
    ),
    "json-default": {2: _NESTED_AS_JSON},
    "json-keep-time-key-float": {0: _MIXED_KINDS},
    "json-values": dict.fromkeys((0, 7), _NESTED_AS_JSON),
    "json-big-integers": dict.fromkeys((0, 1, 2), _BIG_INTEGER),
    "json-types-typed": dict.fromkeys((0, 1, 2, 5), _ARRAY_AS_JSON),
    "json-mixed-kinds": {**dict.fromkeys((0, 1, 2, 3), _MIXED_KINDS), 4: _MIXED_KINDS + "; " + _NESTED_AS_JSON},
    "json-truncated": {11: _NESTED_AS_JSON},
    "json-invalid-utf8-ruby-json": {0: _NOT_UTF8},
    "msgpack-maps": {2: _NESTED_AS_JSON},
    "msgpack-values": {0: _NESTED_AS_JSON, 2: _BIG_INTEGER, 4: _NESTED_AS_JSON},
    "msgpack-stream": dict.fromkeys((1, 7), _SEVERAL_MAPS),
    "msgpack-time-float": dict.fromkeys((0, 1), _MIXED_KINDS),
}
SKIPPED = "skipped (blank)"


@contextmanager
def machine_zone(zone: str | None) -> Iterator[None]:
    """This process's local time zone is ``zone`` (``TZ``) meanwhile, as fluentd's was; None: unchanged."""
    if zone is None:
        yield
        return
    before = os.environ.get("TZ")
    os.environ["TZ"] = zone
    time.tzset()
    try:
        yield
    finally:
        if before is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = before
        time.tzset()


def windvane_rows(case: CorpusCase, now: int) -> dict[int, tuple[int, dict] | str]:
    """What windvane makes of each line: (time ns, record without nulls), or why it was rejected/skipped."""
    fmt = fluent_format(ParseConfig.from_mapping(case.parse))
    block = b"".join(line + b"\n" for line in case.lines)
    options = LogOptions(now=now, written=now)
    # blank lines handed to the parser, as --keep-blank-lines does: what fluentd's in_tail does
    lines, rejected = split_lines(block, first_line=0, now=now, keep_blank=True, binary=fmt.binary)
    rows = fmt.parse(lines, options)
    found: dict[int, tuple[int, dict] | str] = {i: SKIPPED for i in range(len(case.lines))}
    found |= {r.line: "rejected: " + r.reason for r in rejected}
    names = [name for name in rows.columns if name != "time"]
    values = {name: rows.columns[name].to_pylist() for name in names}
    times = rows.columns["time"].to_pylist()
    for i, number in enumerate(lines.numbers.tolist()):
        if i in rows.faults:
            found[number] = "rejected: " + rows.faults[i]
        else:
            record = {
                "time" if name == KEPT_TIME else name: values[name][i] for name in names if values[name][i] is not None
            }
            found[number] = (times[i], record)
    return found


def windvane_events(case: CorpusCase, now: int) -> tuple[list[tuple[int, dict]], int]:
    """What windvane makes of a multiline case's file, read whole: its records in order (time ns, record without
    nulls), and how many events or lines it rejected."""
    fmt = fluent_format(ParseConfig.from_mapping(case.parse))
    block = b"".join(line + b"\n" for line in case.lines)
    parsed = parse_log(fmt, block, LogOptions(now=now, written=now))
    rows = [(row.pop("time"), {k: v for k, v in row.items() if v is not None}) for row in parsed.table.to_pylist()]
    return rows, len(parsed.rejected)


def typed(record: dict, seconds: frozenset[str] = frozenset()) -> dict:
    """The record without nulls, each value with its type (1, 1.0 and True differ); ``seconds``: fields whose
    int ns value is shown as whole seconds."""
    return {
        key: (type(value).__name__, value // 1_000_000_000 if key in seconds and isinstance(value, int) else value)
        for key, value in record.items()
        if value is not None
    }


def time_typed(case: CorpusCase) -> frozenset[str]:
    """The fields ``types`` makes times (``name:time[:format]``): fluentd holds an EventTime there, which its
    JSON formatter writes as whole seconds; windvane keeps int ns, compared in seconds."""
    spec = str(case.parse.get("types", ""))
    return frozenset(item.split(":")[0] for item in spec.split(",") if item.split(":")[1:2] == ["time"])


def same_time(fluentd: int, windvane: int, run: OracleRun, now: int) -> bool:
    if run.started - 1_000_000_000 <= fluentd <= run.ended + 1_000_000_000:
        return windvane == now  # fluentd's clock: windvane must use the read time it was given
    return fluentd == windvane


def line_difference(
    outcome: Outcome, mine: tuple[int, dict] | str, run: OracleRun, now: int, seconds: frozenset[str]
) -> str | None:
    """Why fluentd's and windvane's result for one line differ (None: they agree)."""
    if outcome.rejected is not None:
        return (
            None
            if isinstance(mine, str) and mine != SKIPPED
            else f"fluentd rejected ({outcome.rejected}); windvane: {mine}"
        )
    if len(outcome.events) != 1:
        return f"fluentd made {len(outcome.events)} events; windvane: {mine}"
    event = outcome.events[0]
    if isinstance(mine, str):
        return f"fluentd: {event}; windvane {mine}"
    when, record = mine
    if typed(event.record) != typed(record, seconds):
        return f"fields differ: fluentd {typed(event.record)}; windvane {typed(record, seconds)}"
    if not same_time(event.time, when, run, now):
        return f"times differ: fluentd {event.time}; windvane {when}"
    return None


def differences(case: CorpusCase, run: OracleRun) -> dict[int | str, str]:
    now = time.time_ns()
    outcomes = run.outcomes[case.name]
    if case.parse["type"] == "multiline":
        return multiline_differences(outcomes, windvane_events(case, now), run, now, time_typed(case))
    mine = windvane_rows(case, now)
    found: dict[int | str, str] = {}
    for outcome in outcomes:
        assert outcome.line is not None
        why = line_difference(outcome, mine[outcome.line], run, now, time_typed(case))
        if why:
            found[outcome.line] = why
    return found


def multiline_differences(
    outcomes: list[Outcome], mine: tuple[list[tuple[int, dict]], int], run: OracleRun, now: int, seconds: frozenset[str]
) -> dict[int | str, str]:
    found: dict[int | str, str] = {}
    theirs = [o.events[0] for o in outcomes if o.events]
    ours, rejected_by_windvane = mine
    pairs = [(typed(e.record), e.time) for e in theirs], [(typed(r, seconds), t) for t, r in ours]
    if len(pairs[0]) != len(pairs[1]) or any(
        a[0] != b[0] or not same_time(a[1], b[1], run, now) for a, b in zip(*pairs)
    ):
        found["events"] = f"fluentd {pairs[0]}; windvane {pairs[1]}"
    rejected = sum(1 for o in outcomes if o.rejected)
    if rejected != rejected_by_windvane:
        found["rejected"] = f"fluentd rejected {rejected} buffers; windvane {rejected_by_windvane}"
    return found


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_windvane_parses_like_fluentd(case, fluentd_corpus):
    with machine_zone(case.local_zone):
        found = differences(case, fluentd_corpus)
    known = KNOWN.get(case.name, {})
    unexplained = {where: why for where, why in found.items() if where not in known}
    assert not unexplained, "\n".join(f"line {where}: {why}" for where, why in unexplained.items())
    stale = set(known) - set(found)
    assert not stale, f"listed in KNOWN but now the same as fluentd: {sorted(stale, key=str)}"


def test_the_corpus_covers_every_parser_fluentd_has():
    from windvane.connectors.files.logs.fluent.parsers import PARSERS

    plugin_only = {"logfmt"}  # a plugin, not in fluentd: checked against its own oracle (test_logfmt_oracle.py)
    assert {case.parse["type"] for case in CASES} == set(PARSERS) - plugin_only
