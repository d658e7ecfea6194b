"""Record types: records decoded and checked in C are stored exactly as the record-by-record path stores them."""

from __future__ import annotations

import math

import msgpack
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numcodecs.vlen import VLenUTF8

from windvane.arrays import VLenRows
from windvane.connectors.forward.decode import decode_packed
from windvane.ingest.batch import INVALID_TIME
from windvane.ingest.columns import batch_columns
from windvane.ingest.record_types import record_type
from windvane.ingest.schema import parse_schema

FIELDS = [
    {"name": "seq", "dtype": "int64", "required": True},
    {"name": "msg", "dtype": "str"},
    {"name": "value", "dtype": "float32"},
    {"name": "code", "dtype": "int16", "fill": -1},
    {"name": "ok", "dtype": "bool", "fill": False},
    {"name": "blob", "dtype": "bytes"},
    {"name": "latency-ms", "dtype": "uint8", "fill": 0},  # not an identifier
]
SCHEMAS = {
    extra: parse_schema({"kind": "log", "tags": ["app.**"], "fields": FIELDS, "extra": extra}, name=f"log_{extra}")
    for extra in ("keep", "drop", "reject")
}
EVENT_TIME = msgpack.ExtType(0, (1_700_000_000).to_bytes(4, "big") + (123).to_bytes(4, "big"))


def packed(entries: list) -> bytes:
    return b"".join(msgpack.packb(e, use_bin_type=True) for e in entries)


def same(a, b) -> bool:
    if isinstance(a, VLenRows) or isinstance(b, VLenRows):
        return vlen_records(a) == vlen_records(b)
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and np.array_equal(a, b, equal_nan=a.dtype.kind == "f")
    return type(a) is type(b) and a == b


def vlen_records(column) -> bytes:
    """What a chunk of a text column holds after its item count: zarr's vlen-utf8 of a list's values, a
    VLenRows' records as they are."""
    if isinstance(column, VLenRows):
        return bytes(column.records)
    return VLenUTF8().encode(np.array(column, dtype=object))[4:]


def stored(schema, payload: bytes, typed: bool):
    batch = decode_packed("app.x", payload, len(payload), record_type(schema) if typed else None)
    columns, rejected = batch_columns(schema, batch)
    # Maps with bin names (see ingest.record_types.FieldsRecord) are typed too, but checked by ingest.
    return batch.typed and not (batch.records and type(batch.records[0]) is dict), columns, rejected


def assert_same_storage(schema, payload: bytes, names_as_bin: bool = False) -> bool:
    """Decode ``payload`` both ways; assert they store the same; return whether the typed way was taken.
    ``names_as_bin``: the records' names are msgpack bin, which decode typed as maps that ingest still checks."""
    was_typed, columns, rejected = stored(schema, payload, True)
    _, plain_columns, plain_rejected = stored(schema, payload, False)
    assert rejected == plain_rejected
    assert (columns is None) == (plain_columns is None)
    if columns is not None:
        assert columns.rows == plain_columns.rows
        assert columns.columns.keys() == plain_columns.columns.keys()
        for name in columns.columns:
            assert same(columns.columns[name], plain_columns.columns[name]), name
    if was_typed and schema.kind != "vibration" and not names_as_bin:
        # Only records that fit, with nothing undeclared, take the typed way (times are checked after);
        # a block's frames and rate are checked after too.
        assert all(r.time == INVALID_TIME for r in rejected)
        if plain_columns is not None:
            assert schema.extra == "drop" or all(not x for x in plain_columns.columns.get("extra", []))
    return was_typed


def test_fitting_records_take_the_typed_way_and_store_the_same():
    entries = [
        [
            EVENT_TIME,
            {
                "seq": i,
                "msg": f"m{i}",
                "value": i / 2,
                "code": i,
                "ok": i % 2 == 0,
                "blob": bytes([i]),
                "latency-ms": 200,
            },
        ]
        for i in range(50)
    ]
    entries.append([EVENT_TIME, {"seq": 50}])  # optional fields absent: their fills
    entries.append([EVENT_TIME, {"seq": 51, "msg": None, "value": 3}])  # nil is absent; an int in a float field
    for schema in SCHEMAS.values():
        assert assert_same_storage(schema, packed(entries))


@pytest.mark.parametrize(
    "record",
    [
        {"msg": "no seq"},
        {"seq": None},
        {"seq": 1, "code": 40_000},  # out of int16
        {"seq": 1, "latency-ms": -1},
        {"seq": True},  # bool is not an integer here
        {"seq": 1, "value": False},
        {"seq": 1, "msg": b"bin, not str"},
        {"seq": 1, "blob": "str in a bytes field"},  # stored (encoded) by the checked way
        {"seq": 1, "undeclared": 2},
        {1: 2, "seq": 1},
        "not a map",
        None,
    ],
)
def test_any_misfit_sends_the_batch_the_checked_way(record):
    entries = [[EVENT_TIME, {"seq": 0}], [EVENT_TIME, record]]
    for schema in SCHEMAS.values():
        was_typed = assert_same_storage(schema, packed(entries))
        assert not was_typed or (schema.extra == "drop" and record == {"seq": 1, "undeclared": 2})


@pytest.mark.parametrize(
    "time",
    [
        1_700_000_000,
        1_700_000_000.25,
        0,
        None,
        [EVENT_TIME, {"meta": 1}],
        b"12345678",
        "soon",
        True,
        msgpack.ExtType(1, b"x"),
        2**62,  # the last: seconds beyond int64 nanoseconds
    ],
)
def test_every_time_form_is_read_as_the_checked_way_reads_it(time):
    entries = [[time, {"seq": 1}], [EVENT_TIME, {"seq": 2}]]
    payload = packed(entries)
    _, columns, rejected = stored(SCHEMAS["keep"], payload, True)
    _, plain_columns, plain_rejected = stored(SCHEMAS["keep"], payload, False)
    assert rejected == plain_rejected
    if time in (0, None):  # "now": two decodes, two clocks
        return
    assert same(columns.columns["time"], plain_columns.columns["time"])


def test_invalid_utf8_goes_the_checked_way():
    payload = b"\x92\x01\x82\xa3seq\x01\xa3msg\xa1\xff"  # [1, {"seq": 1, "msg": <0xff>}]
    was_typed = assert_same_storage(SCHEMAS["keep"], payload)
    assert not was_typed


def test_truncated_entries_are_still_refused():
    from windvane.connectors.forward.errors import MalformedMessage

    payload = packed([[EVENT_TIME, {"seq": 1}]])
    with pytest.raises(MalformedMessage, match="truncated"):
        decode_packed("app.x", payload[:-2], 0, record_type(SCHEMAS["keep"]))


VIBRATION = {
    "fixed rate": parse_schema(
        {"kind": "vibration", "tags": ["app.**"], "vibration": {"channels": 3, "sample_rate": 100}}, name="vib_fixed"
    ),
    "rate per block": parse_schema(
        {
            "kind": "vibration",
            "tags": ["app.**"],
            "vibration": {"channels": 2, "samples_field": "s", "rate_field": "hz"},
        },
        name="vib_rated",
    ),
}


def block(rows: int, channels: int, seed: int = 0) -> bytes:
    return np.random.default_rng(seed).standard_normal((rows, channels)).astype("<f4").tobytes()


def test_vibration_blocks_decode_without_a_copy_and_store_the_same():
    fixed, rated = VIBRATION["fixed rate"], VIBRATION["rate per block"]
    payload = packed([[EVENT_TIME, {"samples": block(50, 3, i), "unit": "m/s2"}] for i in range(4)])
    assert assert_same_storage(fixed, payload)
    batch = decode_packed("app.x", payload, len(payload), record_type(fixed), 4)
    assert batch.typed and all(type(r.samples) is memoryview for r in batch.records)
    payload = packed([[EVENT_TIME, {"s": block(20, 2, i), "hz": [25600, 51200.0][i % 2]}] for i in range(3)])
    assert assert_same_storage(rated, payload)


@pytest.mark.parametrize("events", [None, 0, 1, 3, 4, 2**32, -1, "4", True])
def test_a_wrong_count_of_events_from_the_sender_changes_nothing(events):
    """The option's ``size`` saves counting the entries; a wrong one is found out and they are counted."""
    schema = VIBRATION["fixed rate"]
    payload = packed([[EVENT_TIME, {"samples": block(10, 3, i)}] for i in range(3)])
    batch = decode_packed("app.x", payload, len(payload), record_type(schema), events)
    assert batch.typed and len(batch) == 3
    columns, rejected = batch_columns(schema, batch)
    _, plain, _ = stored(schema, payload, False)
    assert not rejected and same(columns.columns["samples"], plain.columns["samples"])


@pytest.mark.parametrize(
    "record",
    [
        {"samples": block(10, 3)[:-1]},  # not whole frames
        {"samples": b""},
        {"samples": None},
        {"samples": "str, not bin"},
        {"samples": [[1.0, 2.0, 3.0]]},  # lists: the checked way
        {"samples": block(10, 3), "sample_rate": 50},  # differs from the schema's
        {"samples": block(10, 3), "sample_rate": True},
        {"samples": block(10, 3), "sample_rate": float("nan")},
        {b"samples": block(10, 3)},  # a bin key, as a sender in ASCII-8BIT writes it
        {"other": 1},
        "not a map",
    ],
)
def test_any_misfit_block_is_stored_or_refused_as_the_checked_way_does(record):
    entries = [[EVENT_TIME, {"samples": block(10, 3)}], [EVENT_TIME, record]]
    assert_same_storage(VIBRATION["fixed rate"], packed(entries))


_blocks = st.one_of(
    st.integers(0, 30).map(lambda n: block(n, 2, n)),
    st.binary(max_size=20),
    st.none(),
    st.text(max_size=4),
    st.lists(st.lists(st.floats(-10, 10), min_size=2, max_size=2), max_size=3),
)
_rates = st.one_of(st.none(), st.integers(-2, 2**64 - 1), st.floats(allow_nan=True), st.booleans(), st.text(max_size=2))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    entries=st.lists(
        st.tuples(
            st.one_of(st.just(EVENT_TIME), st.integers(1, 2**40)),
            st.fixed_dictionaries({"s": _blocks}, optional={"hz": _rates, "x": st.integers(-(2**63), 2**64 - 1)}),
        ).map(list),
        max_size=5,
    )
)
def test_typed_and_checked_ways_store_the_same_blocks(entries):
    assert_same_storage(VIBRATION["rate per block"], packed(entries))


_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.floats(allow_nan=True),
    st.text(max_size=8),
    st.binary(max_size=8),
)
_records = st.one_of(
    st.fixed_dictionaries(
        {"seq": st.integers(-5, 5)},
        optional={name: _values for name in ("msg", "value", "code", "ok", "blob", "latency-ms")},
    ),
    st.fixed_dictionaries(
        {"seq": st.integers(-5, 5)},
        optional={
            "msg": st.text(max_size=4),
            "value": st.floats(-1e6, 1e6) | st.integers(-(2**63), 2**64 - 1),
            "code": st.integers(-100, 100),
        },
    ),
    st.dictionaries(st.sampled_from(["seq", "msg", "other"]), _values, max_size=3),
)
_times = st.one_of(st.just(EVENT_TIME), st.integers(1, 2**40), st.floats(1, 2**40))  # not 0: "now" differs


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(entries=st.lists(st.tuples(_times, _records).map(list), max_size=8), extra=st.sampled_from(sorted(SCHEMAS)))
def test_typed_and_checked_ways_store_the_same(entries, extra):
    assert_same_storage(SCHEMAS[extra], packed(entries))


def _as_bin(value, text_too: bool):
    """``value`` as fluentd's worker packs it: names (and, with ``text_too``, text values) as msgpack bin."""
    if isinstance(value, dict):
        return {_as_bin(k, True): _as_bin(v, text_too) for k, v in value.items()}
    return value.encode("utf-8") if text_too and isinstance(value, str) else value


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    entries=st.lists(st.tuples(_times, _records, st.booleans()), max_size=8),
    extra=st.sampled_from(sorted(SCHEMAS)),
)
def test_records_with_bin_names_and_text_store_as_the_checked_way(entries, extra):
    binary = [[t, _as_bin(r, text_too)] for t, r, text_too in entries]
    assert_same_storage(SCHEMAS[extra], packed(binary), names_as_bin=True)


def test_records_with_bin_names_and_text_take_the_typed_way():
    record = {"seq": 1, "msg": "m", "value": 0.5, "code": 3, "ok": True, "blob": b"\xff", "latency-ms": 1}
    payload = packed([[EVENT_TIME, _as_bin(record, True)]] * 20)
    for schema in SCHEMAS.values():
        batch = decode_packed("app.x", payload, len(payload), record_type(schema))
        assert batch.typed and batch.records[0] == _as_bin(record, True)  # decoded in C as maps with bin names
        columns, rejected = batch_columns(schema, batch)
        assert rejected == [] and columns.columns["msg"].to_numpy().tolist() == ["m"] * 20
        assert_same_storage(schema, payload, names_as_bin=True)


def test_a_float_beyond_float32_is_stored_as_an_infinity_both_ways():
    entries = [[EVENT_TIME, {"seq": 1, "value": 1e300}], [EVENT_TIME, {"seq": 2, "value": -3.4028235677973366e38}]]
    assert assert_same_storage(SCHEMAS["keep"], packed(entries))
    _, columns, rejected = stored(SCHEMAS["keep"], packed(entries), True)
    assert rejected == [] and columns.columns["value"].tolist() == [math.inf, -math.inf]


def test_floats_from_large_integers_round_as_the_checked_way():
    entries = [[EVENT_TIME, {"seq": 1, "value": 2**60 + 2**36 + 1}], [EVENT_TIME, {"seq": 2, "value": 0.1}]]
    assert assert_same_storage(SCHEMAS["keep"], packed(entries))
    _, columns, _ = stored(SCHEMAS["keep"], packed(entries), True)
    assert columns.columns["value"][0] == np.float32(2**60 + 2**36 + 1) and not math.isnan(columns.columns["value"][1])
