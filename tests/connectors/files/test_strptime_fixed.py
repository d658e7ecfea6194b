"""The fixed-width reading of time formats gives exactly what the regex path gives, text by text."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest

from windvane.connectors.files.logs.fluent.strptime import strptime_ns, strptime_regex
from windvane.connectors.files.logs.fluent.strptime_fixed import fixed_layout
from windvane.connectors.files.logs.fluent.walltime import LocalZone

NOW = 1_700_000_000_123_456_789
MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
FORMATS = {
    "%d/%b/%Y:%H:%M:%S %z": "{d:02}/{b}/{Y:04}:{H:02}:{M:02}:{S:02} {z}",
    "%Y-%m-%d %H:%M:%S": "{Y:04}-{m:02}-{d:02} {H:02}:{M:02}:{S:02}",
    "%Y-%m-%dT%H:%M:%S.%N%z": "{Y:04}-{m:02}-{d:02}T{H:02}:{M:02}:{S:02}.{N}{z}",
    "%Y-%m-%dT%H:%M:%S.%L": "{Y:04}-{m:02}-{d:02}T{H:02}:{M:02}:{S:02}.{N}",
    "%b %d %H:%M:%S": "{b} {d:02} {H:02}:{M:02}:{S:02}",
    "%d.%m.%y %T": "{d:02}.{m:02}.{y:02} {H:02}:{M:02}:{S:02}",
    "%H:%M:%S": "{H:02}:{M:02}:{S:02}",
    "%F %T %Z": "{Y:04}-{m:02}-{d:02} {H:02}:{M:02}:{S:02} {z}",
    "%Y%m%d%H%M%S": "{Y:04}{m:02}{d:02}{H:02}{M:02}{S:02}",
    "%j %Y %I:%M": "{j:03} {Y:04} {H:02}:{M:02}",
}
ZONES = [0, 3600, -19800, LocalZone("Europe/Berlin"), LocalZone("America/New_York", offset=3600, later=True)]


def _zone(rng: random.Random) -> str:
    sign, hours, minutes = rng.choice("+-"), rng.choice([0, 1, 5, 9, 12, 23, 24, 99]), rng.choice([0, 30, 45, 60])
    return f"{sign}{hours:02}{':' if rng.random() < 0.3 else ''}{minutes:02}"


def _text(rng: random.Random, template: str) -> str | None:
    if rng.random() < 0.03:
        return None
    month = rng.choice([*MONTHS, "Xyz", "jAN", "MAY", "Sept"]) if rng.random() < 0.2 else rng.choice(MONTHS)
    fields = {
        "Y": rng.choice([1970, 2000, 2024, 1899, 2262, rng.randrange(0, 10000)]),
        "m": rng.randrange(0, 14),
        "d": rng.choice([1, 28, 29, 30, 31, 32, 0, rng.randrange(1, 29)]),
        "H": rng.randrange(0, 26),
        "M": rng.randrange(0, 61),
        "S": rng.randrange(0, 62),
        "y": rng.randrange(0, 100),
        "j": rng.randrange(0, 368),
        "b": month,
        "N": "".join(rng.choice("0123456789") for _ in range(rng.choice([3, 3, 6, 9, 12]))),
        "z": _zone(rng),
    }
    text = template.format(**fields)
    roll = rng.random()
    if roll < 0.1:  # a wrong byte somewhere
        at = rng.randrange(len(text))
        text = text[:at] + rng.choice("x0 :-é\t/T") + text[at + 1 :]
    elif roll < 0.15:  # longer or shorter
        text = text + rng.choice(["0", " ", "Z", "x"]) if rng.random() < 0.5 else text[:-1]
    return text


@pytest.mark.parametrize("time_format", list(FORMATS))
@pytest.mark.parametrize("seed", range(3))
def test_fixed_layout_reads_what_the_regex_reads(time_format: str, seed: int) -> None:
    rng = random.Random(f"{time_format}{seed}")
    layout = fixed_layout(time_format)
    assert layout is not None
    texts = pa.array([_text(rng, FORMATS[time_format]) for _ in range(3000)], pa.large_string())
    regex = strptime_regex(time_format)
    for zone in ZONES:
        for part in (texts, texts.slice(7, 500)):
            fast, fast_bad = strptime_ns(part, regex, zone, NOW, layout)
            slow, slow_bad = strptime_ns(part, regex, zone, NOW)
            np.testing.assert_array_equal(fast_bad, slow_bad)
            np.testing.assert_array_equal(fast[~fast_bad], slow[~slow_bad])
    rows, _ = layout.read(texts)
    assert len(rows) > 200  # many texts took the fixed path


def test_groups_are_the_regex_groups() -> None:
    for time_format in FORMATS:
        layout = fixed_layout(time_format)
        assert layout is not None
        found = pa.compute.extract_regex(pa.array(["x"]), strptime_regex(time_format)).type
        assert set(layout.groups) == {field.name for field in found}


@pytest.mark.parametrize(
    "time_format", ["%a %b %d", "%s", "%3N", "%I:%M %p", "%Y-%m-%d%n%H", "%N%S", "%bmay", "%B %Y %%"]
)
def test_formats_of_varying_width_have_no_layout(time_format: str) -> None:
    assert fixed_layout(time_format) is None


def test_only_nulls_and_empty_arrays() -> None:
    layout = fixed_layout("%Y-%m-%d")
    regex = strptime_regex("%Y-%m-%d")
    for texts in (pa.array([], pa.large_string()), pa.array([None, None], pa.large_string())):
        fast, bad = strptime_ns(texts, regex, 0, NOW, layout)
        assert bad.all() and len(fast) == len(texts)
