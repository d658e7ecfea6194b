"""The fluentd oracle itself: every corpus case runs through the real fluentd and comes back complete."""

from __future__ import annotations

import pytest

from tests.connectors.files.fluent_corpus import corpus, fluentd_corpus  # noqa: F401
from tests.connectors.files.fluentd_oracle import NOT_MATCHED, OracleCase, parse_section, ruby_inspect, run_fluentd

CASES = corpus()


def test_ruby_inspect_matches_what_fluentd_logs():
    assert ruby_inspect(b'bad "q" \xc3\xa9 #{x} #y\t\\') == '"bad \\"q\\" \\xC3\\xA9 \\#{x} #y\\t\\\\"'


def test_parse_section_quotes_what_fluentd_would_misread():
    text = parse_section({"type": "regexp", "expression": "/^(?<a>.*)$/i", "types": "a:integer", "x": "a#b"})
    assert text.splitlines() == [
        "<parse>",
        "  @type regexp",
        "  expression /^(?<a>.*)$/i",
        "  types a:integer",
        "  x 'a#b'",
        "</parse>",
    ]


@pytest.mark.clients
@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_oracle_answers_every_line(case, fluentd_corpus):
    outcomes = fluentd_corpus.outcomes[case.name]
    assert outcomes, f"fluentd said nothing about {case.name}"
    if case.parse["type"] != "multiline":
        assert [o.line for o in outcomes] == list(range(len(case.lines)))
    for outcome in outcomes:
        assert (outcome.rejected is None) == bool(outcome.events), outcome
        for event in outcome.events:
            assert isinstance(event.time, int) and isinstance(event.record, dict)
    assert any(o.events for o in outcomes), f"fluentd parsed no line of {case.name}: {outcomes}"


@pytest.mark.clients
def test_oracle_maps_each_line_to_its_outcome(tmp_path):
    lines = [b"1700000000.5 a", b"nope", b"", b"1.000000001 b", b"0 c"]
    parse = parse_section({"type": "regexp", "expression": r"/^(?<time>\d\S*) (?<k>\w)$/", "time_type": "float"})
    json_parse = parse_section({"type": "json", "time_type": "unixtime"})
    got = run_fluentd(
        [OracleCase("re", parse, lines), OracleCase("js", json_parse, [b'{"time": "x"}', b'{"time": 5, "k": 1}'])],
        tmp_path,
    )
    re_outcomes = got["re"]
    assert [(o.line, o.rejected) for o in re_outcomes] == [
        (0, None), (1, NOT_MATCHED), (2, NOT_MATCHED), (3, None), (4, None)
    ]  # fmt: skip
    assert [e.time for o in re_outcomes for e in o.events] == [1_700_000_000_500_000_000, 1_000_000_001, 0]
    assert re_outcomes[0].record == {"k": "a"}
    first, second = got["js"]
    assert first.record == {} and first.events[0].time == 0  # fluentd reads "x" as unixtime 0 ("x".to_i)
    assert second.events[0].time == 5_000_000_000 and second.record == {"k": 1}
