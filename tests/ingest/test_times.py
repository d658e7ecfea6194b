"""windvane's one time rule (ingest.times): what is a time, what is not, and the reason naming the value."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import msgpack
import numpy as np
import pyarrow as pa
import pytest

from windvane.ingest.times import BadZone, check_zone, iso_column_ns, not_a_time, time_ns

NS = 10**9
T0 = 1_700_000_000 * NS  # 2023-11-14T22:13:20Z


@pytest.mark.parametrize(
    "value, ns",
    [
        (1700000000, T0),
        (1700000000.25, T0 + 250_000_000),
        (1700000000.123456, T0 + 123_456_000),
        (1700000000000, T0),
        (1700000000000000, T0),
        (1700000000000000000, T0),
        (-1.5, -1_500_000_000),
        (Decimal("1700000000.000000001"), T0 + 1),
        ("1700000000", T0),
        (" 1700000000.5 ", T0 + 500_000_000),
        ("2023-11-14T22:13:20Z", T0),
        ("2023-11-14 22:13:20", T0),
        ("2023-11-14T23:13:20+01:00", T0),
        ("2023-11-14T23:13:20+0100", T0),
        ("2023-11-14T22:13:20,5-02:00", T0 + 2 * 3600 * NS + 500_000_000),
        ("2023-11-14T22:13:20.123456789Z", T0 + 123456789),
        ("2023-11-14", T0 - (22 * 3600 + 13 * 60 + 20) * NS),
        ("2023-11-14T22:13", T0 - 20 * NS),
        (msgpack.Timestamp(1700000000, 7), T0 + 7),
        (msgpack.ExtType(0, (1700000000).to_bytes(4, "big") + b"\0\0\0\x09"), T0 + 9),
        (datetime(2023, 11, 14, 22, 13, 20, tzinfo=UTC), T0),
        (datetime(2023, 11, 14, 22, 13, 20), T0),
    ],
)
def test_times(value, ns):
    assert time_ns(value) == ns


@pytest.mark.parametrize(
    "value",
    [
        True,
        None,
        float("nan"),
        float("inf"),
        "yesterday",
        "2023-13-01",
        10**30,
        "1e400",
        [1],
        {"t": 1},
        msgpack.ExtType(1, b"12345678"),
        msgpack.ExtType(0, (1700000000).to_bytes(4, "big") + (10**9).to_bytes(4, "big")),
        "2023-11-14T25:00:00",
    ],
)
def test_not_times(value):
    assert time_ns(value) is None


def test_the_reason_names_the_value():
    assert not_a_time("yesterday") == (
        "the event time 'yesterday' is not a time: give epoch seconds, ms, us or "
        "ns, ISO 8601 text (2024-05-01T12:00:00Z) or a fluentd EventTime"
    )
    assert not_a_time("x" * 200).startswith("the event time 'xxx") and "..." in not_a_time("x" * 200)


def test_iso_columns_read_times_without_a_zone_in_the_zone_given():
    text = pa.array(
        [
            "2024-07-01T12:00:00",
            "2024-07-01T12:00:00Z",
            "2024-07-01T14:00:00+0200",
            "nope",
            None,
            "2024-07-01",
            " 2024-07-01T06:00:00-06:00 ",
        ]
    )
    ns, bad = iso_column_ns(text, "Europe/Paris")
    noon = int(np.datetime64("2024-07-01T12:00:00", "ns").astype(np.int64))
    assert list(bad) == [False, False, False, True, True, False, False]
    assert list(ns[:3]) == [noon - 2 * 3600 * NS, noon, noon]
    assert list(ns[5:]) == [noon - 14 * 3600 * NS, noon]  # a date alone: its midnight in the zone
    assert list(iso_column_ns(text[:1], "UTC")[0]) == [noon]


def test_unknown_zones_are_refused_by_name():
    assert check_zone("Europe/Paris") == "Europe/Paris"
    with pytest.raises(BadZone, match="unknown time zone 'Mars/Olympus'"):
        check_zone("Mars/Olympus")
