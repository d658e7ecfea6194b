"""Text as msgpack bin in every Forward mode, on both decode paths, stores what the same text as str stores.

fluentd's worker runs in ASCII-8BIT, so what ``in_tail`` reads is packed as
bin: field names, text values, and possibly the tag. The captured frames
in ``fixtures/forward`` show it; here every mode is built both ways and the
stored columns compared.
"""

from __future__ import annotations

import base64
import gzip
import struct
from pathlib import Path

import msgpack
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.ingest.test_record_types import FIELDS
from windvane.connectors.forward.bin_text import as_str
from windvane.connectors.forward.decode import ForwardDecoder, decode_message, decode_packed
from windvane.connectors.forward.errors import MalformedMessage
from windvane.ingest.columns import batch_columns
from windvane.ingest.prepare import prepare, validate
from windvane.ingest.record_types import record_type
from windvane.ingest.schema import SchemaSet, parse_schema

SCHEMA = parse_schema(
    {
        "kind": "log",
        "tags": ["app.**"],
        "extra": "keep",
        "fields": [
            {"name": "seq", "dtype": "int64", "required": True},
            {"name": "msg", "dtype": "str"},
            {"name": "value", "dtype": "float64"},
        ],
    },
    name="app",
)
SCHEMAS = SchemaSet([SCHEMA])
FIXTURES = Path(__file__).parents[2] / "fixtures" / "forward"
RECORDS = [{"seq": i, "msg": f"event {i} Grüße 温度 ✓", "value": i / 8, "host": f"web-{i % 3}"} for i in range(50)]
TIMES = [(1_767_225_600 + i, i * 1000) for i in range(50)]


def _bin(value):
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, dict):
        return {_bin(k): _bin(v) for k, v in value.items()}
    return value


def _time(seconds: int, nanos: int) -> msgpack.ExtType:
    return msgpack.ExtType(0, struct.pack(">II", seconds, nanos))


def _entries(binary: bool) -> bytes:
    return b"".join(
        msgpack.packb([_time(*t), _bin(r) if binary else r], use_bin_type=True) for t, r in zip(TIMES, RECORDS)
    )


def _frames(mode: str, binary: bool, tag_as_bin: bool) -> bytes:
    tag = b"app.bin" if tag_as_bin else "app.bin"
    option = {"chunk": base64.encodebytes(b"c" * 16).decode()}
    if mode == "message":
        return b"".join(
            msgpack.packb([tag, _time(*t), _bin(r) if binary else r], use_bin_type=True) for t, r in zip(TIMES, RECORDS)
        )
    if mode == "forward":
        entries = [[_time(*t), _bin(r) if binary else r] for t, r in zip(TIMES, RECORDS)]
        return msgpack.packb([tag, entries, option], use_bin_type=True)
    payload = _entries(binary)
    if mode == "compressed":
        payload = gzip.compress(payload)
        option = {**option, "compressed": "gzip"}
    # out_forward's framing: the entries as str32, the option after them
    return (
        b"\x93"
        + msgpack.packb(tag, use_bin_type=True)
        + b"\xdb"
        + struct.pack(">I", len(payload))
        + payload
        + msgpack.packb(option)
    )


def _stored(frames: bytes, defer: bool) -> dict:
    columns: dict = {}
    decoder = ForwardDecoder()
    for frame in decoder.frames.feed(frames):
        decoded = decode_message(frame, defer=defer)
        batch = decoded.batch
        parts = prepare(SCHEMAS, [batch])[0] if not hasattr(batch, "records") else [validate(SCHEMAS, batch)]
        for part in parts:
            assert part.rejected == [], part.rejected[0].reason
            for name, values in part.columns.columns.items():
                columns.setdefault(name, []).extend(list(values))
    return columns


@pytest.mark.parametrize("mode", ["message", "forward", "packed", "compressed"])
@pytest.mark.parametrize("defer", [False, True], ids=["in-place", "worker-path"])
@pytest.mark.parametrize("tag_as_bin", [False, True], ids=["str-tag", "bin-tag"])
def test_bin_text_stores_as_str_text(mode, defer, tag_as_bin):
    expected = _stored(_frames(mode, False, False), defer)
    got = _stored(_frames(mode, True, tag_as_bin), defer)
    assert got == expected
    assert got["msg"][7] == "event 7 Grüße 温度 ✓" and got["extra"][7] == '{"host":"web-1"}'
    assert np.array(got["time"]).tolist() == [s * 10**9 + n for s, n in TIMES]


def _packed(records: list[dict], binary: bool) -> bytes:
    return b"".join(
        msgpack.packb([_time(*t), _bin(r) if binary else r], use_bin_type=True) for t, r in zip(TIMES, records)
    )


def _typed_and_checked(schema, payload: bytes) -> tuple:
    """``payload`` decoded with the schema's record type and without: (typed?, columns, rejected) of each."""
    out = []
    for kind in (record_type(schema), None):
        batch = decode_packed("app.bin", payload, len(payload), kind)
        columns, rejected = batch_columns(schema, batch)
        out.append((batch.typed, columns, rejected))
    return tuple(out)


def _lists(columns) -> dict:
    return {name: list(values) if isinstance(values, list) else values.tolist() for name, values in columns.items()}


#: The declared fields only: a record with an undeclared field takes the checked path either way.
DECLARED = [{k: v for k, v in r.items() if k != "host"} for r in RECORDS]


def test_bin_records_take_the_typed_path_and_store_what_str_records_store():
    (str_typed, str_columns, _), _ = _typed_and_checked(SCHEMA, _packed(DECLARED, False))
    (bin_typed, bin_columns, rejected), (_, checked, _) = _typed_and_checked(SCHEMA, _packed(DECLARED, True))
    assert str_typed and bin_typed and rejected == []
    assert _lists(bin_columns.columns) == _lists(str_columns.columns) == _lists(checked.columns)
    assert bin_columns.columns["msg"][7] == "event 7 Grüße 温度 ✓" and type(bin_columns.columns["msg"][7]) is str


def test_invalid_utf8_in_bin_text_is_quarantined_verbatim_as_the_checked_path_does():
    records = [dict(r) for r in DECLARED]
    records[3]["msg"] = "caf\udce9 \udcff".encode("utf-8", "surrogateescape")  # Latin-1 bytes, not UTF-8
    payload = b"".join(
        msgpack.packb([_time(*t), {_bin(k): _bin(v) if type(v) is str else v for k, v in r.items()}], use_bin_type=True)
        for t, r in zip(TIMES, records)
    )
    (_, columns, rejected), (_, checked_columns, checked_rejected) = _typed_and_checked(SCHEMA, payload)
    assert rejected == checked_rejected and len(rejected) == 1
    entry = msgpack.packb([_time(*TIMES[3]), _bin(records[3])], use_bin_type=True)
    assert rejected[0].raw == entry
    assert rejected[0].reason == "field 'msg': bytes that are not valid UTF-8 text (bytes b'caf\\xe9 \\xff')"
    assert columns.rows == 49 and _lists(columns.columns) == _lists(checked_columns.columns)


def test_non_text_bin_in_a_bytes_column_is_stored_as_its_bytes():
    schema = parse_schema(
        {
            "kind": "log",
            "tags": ["app.**"],
            "fields": [{"name": "seq", "dtype": "int64", "required": True}, {"name": "blob", "dtype": "bytes"}],
        },
        name="blobs",
    )
    records = [{"seq": i, "blob": bytes([0xFF, i, 0x00, 0xC4])} for i in range(50)]
    payload = b"".join(
        msgpack.packb([_time(*t), {k.encode(): v for k, v in r.items()}], use_bin_type=True)
        for t, r in zip(TIMES, records)
    )
    (typed, columns, rejected), (_, checked, _) = _typed_and_checked(schema, payload)
    assert typed and rejected == []
    assert columns.columns["blob"] == [r["blob"] for r in records] == checked.columns["blob"]


def test_bin_names_with_str_values_store_what_str_records_store():
    payload = b"".join(
        msgpack.packb([_time(*t), {k.encode(): v for k, v in r.items()}], use_bin_type=True)
        for t, r in zip(TIMES, DECLARED)
    )
    (_, columns, rejected), (_, checked, _) = _typed_and_checked(SCHEMA, payload)
    (_, str_columns, _), _ = _typed_and_checked(SCHEMA, _packed(DECLARED, False))
    assert rejected == [] and _lists(columns.columns) == _lists(str_columns.columns) == _lists(checked.columns)


def test_a_missing_or_undeclared_bin_named_field_is_kept_as_the_checked_path_keeps_it():
    records = [dict(r) for r in DECLARED]
    del records[4]["value"]
    records[9]["host"] = "web-9"
    (_, columns, rejected), (_, checked, checked_rejected) = _typed_and_checked(SCHEMA, _packed(records, True))
    assert rejected == checked_rejected == []
    assert repr(_lists(columns.columns)) == repr(_lists(checked.columns))  # repr: nan equals nan
    assert columns.columns["extra"][9] == '{"host":"web-9"}' and np.isnan(columns.columns["value"][4])


@pytest.mark.parametrize("fixture", ["fluentd_packed_text.bin", "fluentd_packed_gzip.bin"])
def test_fluentds_own_chunks_decode_typed_and_store_as_the_checked_path(fixture):
    # Captured from fluentd 1.14.6: names and text as bin. Its two records hold different fields, so
    # ingest takes their columns the checked way; both ways store the same.
    schema = parse_schema(
        {
            "kind": "log",
            "tags": ["**"],
            "extra": "keep",
            "fields": [{"name": "message", "dtype": "str", "required": True}, {"name": "host", "dtype": "str"}],
        },
        name="captured",
    )
    frame = (FIXTURES / fixture).read_bytes()
    stored = []
    for kind in (record_type(schema), None):
        decoded = decode_message(frame, record_types=lambda tag, kind=kind: kind)
        assert decoded.batch.typed == (kind is not None)
        stored.append(batch_columns(schema, decoded.batch))
    (columns, rejected), (checked, checked_rejected) = stored
    assert rejected == checked_rejected == []
    assert _lists(columns.columns) == _lists(checked.columns)
    assert columns.columns["message"] == ["GET /index.html 200", "café olé ✓"]


@pytest.mark.parametrize("size", [50, 49, 51, "fifty", None])
def test_a_deferred_chunk_is_stored_whole_whatever_count_its_sender_announced(size):
    payload = _packed(DECLARED, True)
    option = {"chunk": "c2l6ZQ==", **({} if size is None else {"size": size})}
    frame = b"\x93" + msgpack.packb("app.bin") + b"\xdb" + struct.pack(">I", len(payload)) + payload
    decoded = decode_message(frame + msgpack.packb(option), defer=True)
    (part,) = prepare(SCHEMAS, [decoded.batch])[0]
    assert part.rejected == [] and part.columns.rows == 50
    assert part.columns.columns["seq"].tolist() == list(range(50))


#: Text and numbers only: fluentd's records decode as this type once their bin is read as str (bin_text).
TEXT_ONLY = parse_schema(
    {
        "kind": "log",
        "tags": ["app.**"],
        "fields": [f for f in FIELDS if f["dtype"] != "bytes"] + [{"name": "note", "dtype": "str", "fill": "none"}],
    },
    name="text_only",
)
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.floats(allow_nan=False),
    st.text(max_size=300),  # past 255 bytes: str16 / bin16
    st.binary(max_size=4),
)
_text_records = st.fixed_dictionaries(
    {"seq": st.integers(-(2**40), 2**40)},
    optional={
        "msg": st.text(max_size=300) | _scalars,
        "value": st.floats(-1e6, 1e6),
        "code": _scalars,
        "ok": st.booleans(),
        "note": st.text(max_size=3),
        "other": _scalars,
    },
)
_times = st.one_of(st.just(_time(1_767_225_600, 5)), st.integers(1, 2**40), st.floats(1, 2**40))


def _entries_of(records: list, times: list, binary: bool) -> bytes:
    return b"".join(msgpack.packb([t, _bin(r) if binary else r], use_bin_type=True) for t, r in zip(times, records))


def _stored_both_ways(schema, payload: bytes) -> tuple:
    """(typed?, columns as lists, rejected) of ``payload`` decoded with the record type, then without."""
    out = []
    for kind in (record_type(schema), None):
        batch = decode_packed("app.bin", payload, len(payload), kind)
        columns, rejected = batch_columns(schema, batch)
        typed = batch.typed and not (batch.records and type(batch.records[0]) is dict)
        out.append((typed, None if columns is None else _lists(columns.columns), rejected))
    return tuple(out)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(entries=st.lists(st.tuples(_times, _text_records), min_size=1, max_size=12))
def test_bin_records_read_as_str_store_and_quarantine_what_str_records_and_the_checked_path_do(entries):
    """Names and text as bin, the typed decode reads them as str (bin_text) where the records are flat: what
    it stores and quarantines (verbatim, with the same reasons) is what the checked path does with the same
    bytes; where every record fits, what it stores is what the same records sent as str store."""
    times, records = [t for t, _ in entries], [r for _, r in entries]
    binary = _entries_of(records, times, True)
    (typed, columns, rejected), (_, checked, checked_rejected) = _stored_both_ways(TEXT_ONLY, binary)
    assert rejected == checked_rejected
    assert repr(columns) == repr(checked)  # repr: nan equals nan
    (str_typed, str_columns, str_rejected), _ = _stored_both_ways(TEXT_ONLY, _entries_of(records, times, False))
    if str_typed:  # every record fits the type as str: as bin too, read as str (times are checked after)
        assert typed and repr(columns) == repr(str_columns)
        assert [(r.time, r.reason) for r in rejected] == [(r.time, r.reason) for r in str_rejected]


def test_bin_read_as_str_takes_every_length_of_header():
    records = [{"seq": i, "msg": "é" * n, "note": "x" * n} for i, n in enumerate((0, 31, 32, 255, 300, 70_000))]
    times = [_time(*t) for t in TIMES[: len(records)]]
    binary, text = _entries_of(records, times, True), _entries_of(records, times, False)
    header = b"\xdd" + len(records).to_bytes(4, "big")
    assert msgpack.unpackb(as_str(header + binary)) == msgpack.unpackb(header + text)  # bin8, 16, 32 read as str
    batch = decode_packed("app.bin", binary, len(binary), record_type(TEXT_ONLY))
    assert batch.typed and type(batch.records[0]) is record_type(TEXT_ONLY)
    columns, rejected = batch_columns(TEXT_ONLY, batch)
    assert rejected == [] and columns.columns["msg"].tolist() == [r["msg"] for r in records]


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    entries=st.lists(st.tuples(_times, _text_records), min_size=1, max_size=6),
    at=st.integers(min_value=0),
    byte=st.integers(0, 255),
    cut=st.integers(min_value=0),
)
def test_bin_as_str_of_damaged_entries_refuses_them_or_changes_only_bin_headers(entries, at, byte, cut):
    """What a hostile sender makes of fluentd's entries (a byte changed, the end cut off anywhere, lengths
    that point past the end): the walk stays within them and either refuses them or turns bin headers into
    their str twins, nothing else."""
    records, times = [r for _, r in entries], [t for t, _ in entries]
    data = bytearray(b"\xdd" + len(records).to_bytes(4, "big") + _entries_of(records, times, True))
    data[at % len(data)] = byte
    damaged = memoryview(data)[: len(data) - cut % len(data)]  # a view, as of a frame's entries
    try:
        out = as_str(damaged)
    except ValueError:
        return
    assert len(out) == len(damaged)
    changed = [i for i in range(len(out)) if out[i] != damaged[i]]
    assert all(damaged[i] in (0xC4, 0xC5, 0xC6) and out[i] == damaged[i] + 0x15 for i in changed)


@pytest.mark.parametrize(
    "entry",
    [
        [_time(1, 0), {b"seq": 1, b"tags": [b"a"]}],  # a value that is an array
        [_time(1, 0), {b"seq": 1, b"meta": {b"k": b"v"}}],  # a value that is a map
        [[_time(1, 0), {}], {b"seq": 1}],  # Fluent Bit's [EventTime, metadata]
        [_time(1, 0), {f"f{i}".encode(): i for i in range(16)}],  # 16 fields: a map16
        [_time(1, 0), {b"seq": msgpack.ExtType(5, b"x")}],  # an ext value
        [_time(1, 0), b"not a map"],
    ],
)
def test_records_bin_as_str_does_not_read_are_refused_by_it_and_decode_as_they_are(entry):
    payload = msgpack.packb([_time(1, 0), {b"seq": 1}], use_bin_type=True) + msgpack.packb(entry, use_bin_type=True)
    with pytest.raises(ValueError):
        as_str(b"\xdd" + (2).to_bytes(4, "big") + payload)
    (_, columns, rejected), (_, checked, checked_rejected) = _stored_both_ways(TEXT_ONLY, payload)
    assert rejected == checked_rejected and repr(columns) == repr(checked)


def test_a_value_nested_beyond_msgspecs_depth_is_refused_by_bin_as_str_and_malformed_as_before():
    deep = b"\x92" + msgpack.packb(_time(1, 0)) + b"\x82\xc4\x03seq\x01\xc4\x01x" + b"\x91" * 100_000 + b"\xc0"
    payload = msgpack.packb([_time(1, 0), {b"seq": 1}], use_bin_type=True) + deep
    with pytest.raises(ValueError):
        as_str(b"\xdd" + (2).to_bytes(4, "big") + payload)
    with pytest.raises(MalformedMessage, match="unreadable at byte"):
        decode_packed("app.bin", payload, len(payload), record_type(TEXT_ONLY))
