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

import msgpack
import numpy as np
import pytest

from windvane.connectors.forward.decode import ForwardDecoder, decode_message
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


def test_str_records_keep_the_typed_fast_path_and_bin_records_the_checked_one():
    # The msgspec record type reads str only; bin records are checked one by one and store the same.
    from windvane.connectors.forward.decode import decode_packed

    def entries(binary: bool) -> bytes:  # declared fields only: "keep" schemas type no undeclared field
        return b"".join(
            msgpack.packb([_time(*t), _bin(r) if binary else r], use_bin_type=True)
            for t, r in zip(TIMES, ({k: v for k, v in r.items() if k != "host"} for r in RECORDS))
        )

    typed = decode_packed("app.bin", entries(False), 0, record_type(SCHEMA))
    checked = decode_packed("app.bin", entries(True), 0, record_type(SCHEMA))
    assert typed.typed and not checked.typed
    a, b = validate(SCHEMAS, typed).columns.columns, validate(SCHEMAS, checked).columns.columns
    assert a["msg"] == b["msg"] and a["seq"].tolist() == b["seq"].tolist()
