"""The shipped parser library (``parsers/``, installed as ``windvane.parsers``): every sample line of every
parser parses in the real fluentd 1.14.6 (logfmt: in the reference logfmt decoder, see
``tests/connectors/files/test_logfmt_oracle.py``) and gives the fields its catalog entry promises.

fluentd runs once for the corpus and the shipped parsers (``tests/connectors/files/fluent_corpus.py``); the
differential test compares windvane's parsers with it on the same samples.
"""

from __future__ import annotations

import tomllib

import pytest

from tests.connectors.files.fluent_corpus import NOT_IN_FLUENTD, fluentd_corpus  # noqa: F401 (a fixture, used by name)
from windvane.parsers import ParserNotFound, catalog, list_parsers, parser_path, sample_path

NAMES = list_parsers()
#: The parsers fluentd checks; the others (logfmt) are checked against their own oracle (test_logfmt_oracle.py).
FLUENTD_NAMES = [name for name in NAMES if tomllib.loads(parser_path(name).read_text())["type"] not in NOT_IN_FLUENTD]


def samples(name: str) -> list[bytes]:
    return [line for line in sample_path(name).read_bytes().split(b"\n") if line]


def test_every_parser_has_its_section_samples_and_entry():
    on_disk = {path.stem for path in parser_path(NAMES[0]).parent.glob("*.toml")} - {"catalog"}
    assert on_disk == set(NAMES)
    for name in NAMES:
        assert tomllib.loads(parser_path(name).read_text())["type"]
        assert len(samples(name)) >= 3, name
        assert catalog()[name]["title"] and catalog()[name]["fields"], name
    with pytest.raises(ParserNotFound, match="known: access_extra"):
        parser_path("no-such-format")


@pytest.mark.clients
@pytest.mark.parametrize("name", FLUENTD_NAMES)
def test_fluentd_parses_every_sample(name, fluentd_corpus):
    lines = samples(name)
    entry = catalog()[name]
    for outcome in fluentd_corpus.outcomes[f"shipped-{name}"]:
        line = lines[outcome.line]
        assert outcome.rejected is None, f"{name}: fluentd rejected {line!r}: {outcome.rejected}"
        record = outcome.record
        missing = [field for field in entry["fields"] if record.get(field) in (None, "")]
        assert not missing, f"{name}: {line!r} gives no {missing}: {record}"
        # not stamped with the read time (a year-less time in the current year may be ahead of it)
        own_time = abs(outcome.events[0].time - fluentd_corpus.started) > 60 * 10**9
        assert own_time == entry.get("own_time", True), f"{name}: {line!r} time {outcome.events[0].time}"
