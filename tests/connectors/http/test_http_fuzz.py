"""Fuzzing the HTTP decoders: whatever arrives, they return batches or raise HttpError, nothing else.

Hangs are caught by pytest-timeout; hypothesis' per-example deadline is off
(the machine is shared: no timing asserts). ``WINDVANE_FUZZ_EXAMPLES`` sets
the examples per test (300 by default).
"""

from __future__ import annotations

import gzip
import json
import os
import zlib

import msgpack
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from windvane.connectors.http.decode import decode_in_http, decode_wendelin, decompress
from windvane.connectors.http.errors import HttpError

# WINDVANE_FUZZ_EXAMPLES=5000 fuzzes longer.
SETTINGS = settings(
    max_examples=int(os.environ.get("WINDVANE_FUZZ_EXAMPLES", "300")),
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
CONTENT_TYPES = st.sampled_from(
    [
        None,
        "",
        "application/json",
        "application/x-ndjson",
        "application/msgpack",
        "application/x-msgpack",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=b",
        "multipart/form-data",
        "text/plain",
        "application/json; charset=utf-8",
    ]
)
ENCODINGS = st.sampled_from([None, "", "gzip", "deflate", "zstd", "identity", "br", "gzip, zstd", "x-gzip"])
QUERIES = st.dictionaries(
    st.sampled_from(["time", "json", "ndjson", "msgpack", "reference"]), st.text(max_size=20), max_size=3
)

# JSON values as RFC 8259 has them: NaN and the infinities are not JSON (a line holding one is quarantined).
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=12,
)
msgpack_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats()
    | st.text(max_size=10)
    | st.binary(max_size=10),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=12,
)


def check(call):
    """Run one decode; it must return a list of batches whose raw bytes are all reachable, or raise HttpError."""
    try:
        batches = call()
    except HttpError as exc:
        assert exc.status in (400, 413, 415) and exc.code and exc.message
        return None
    for batch in batches:
        assert len(batch.times) == len(batch.records)
        for i in range(len(batch)):
            assert isinstance(batch.raw_bytes(i), bytes)
            assert isinstance(batch.times[i], int)
    return batches


@SETTINGS
@given(body=st.binary(max_size=300), ctype=CONTENT_TYPES, query=QUERIES)
def test_in_http_random_bytes(body, ctype, query):
    check(lambda: decode_in_http(body, ctype, tag="t", query=query))


@SETTINGS
@given(body=st.binary(max_size=300), ctype=CONTENT_TYPES, query=QUERIES)
def test_wendelin_random_bytes(body, ctype, query):
    check(lambda: decode_wendelin(body, ctype, query=query))


@SETTINGS
@given(body=st.binary(max_size=300), encoding=ENCODINGS, limit=st.integers(0, 1000))
def test_decompress_random_bytes(body, encoding, limit):
    try:
        decompress(body, encoding, limit)
    except HttpError as exc:
        assert exc.status in (400, 413, 415)


@SETTINGS
@given(
    data=st.binary(max_size=300),
    encoding=st.sampled_from(["gzip", "deflate", "zstd"]),
    cut=st.integers(0, 400),
    flip=st.integers(0, 400),
)
def test_decompress_damaged_streams(data, encoding, cut, flip):
    packed = {"gzip": gzip.compress, "deflate": zlib.compress, "zstd": zstandard.ZstdCompressor().compress}[encoding](
        data
    )
    damaged = bytearray(packed[: cut % (len(packed) + 1)])
    if damaged:
        damaged[flip % len(damaged)] ^= 0x55
    try:
        out = decompress(bytes(damaged), encoding, 1 << 16)
    except HttpError as exc:
        assert exc.status in (400, 413)
    else:
        assert isinstance(out, bytes)
    assert decompress(packed, encoding, 1 << 16) == data


@SETTINGS
@given(values=st.lists(json_values, max_size=6), junk=st.binary(max_size=5), where=st.integers(0, 1000))
def test_ndjson_near_valid(values, junk, where):
    lines = [json.dumps(v).encode() for v in values]
    body = b"\n".join(lines)
    batches = check(lambda: decode_in_http(body, "application/x-ndjson", tag="t"))
    if values:  # every line decodes, and its raw bytes are the line
        assert batches is not None and [batches[0].raw(i) for i in range(len(values))] == lines
    at = where % (len(body) + 1)
    check(lambda: decode_in_http(body[:at] + junk + body[at:], "application/x-ndjson", tag="t"))


@SETTINGS
@given(values=st.lists(msgpack_values, max_size=6), cut=st.integers(0, 1000))
def test_msgpack_near_valid(values, cut):
    body = b"".join(msgpack.packb(v) for v in values)
    check(lambda: decode_in_http(body, "application/msgpack", tag="t"))
    check(lambda: decode_in_http(body[: cut % (len(body) + 1)], "application/msgpack", tag="t"))
    items = b"".join(msgpack.packb([v, v]) for v in values)
    check(lambda: decode_wendelin(items, None, query={"reference": "r"}))
    check(lambda: decode_wendelin(items[: cut % (len(items) + 1)], None, query={"reference": "r"}))


def test_deep_nesting_is_a_bad_request():
    for body, ctype in [
        (b"[" * 100_000, "application/json"),
        (b"[" * 100_000, "application/x-ndjson"),
        (b"\x91" * 100_000, "application/msgpack"),
    ]:
        check(lambda body=body, ctype=ctype: decode_in_http(body, ctype, tag="t"))


def test_unhashable_msgpack_map_key_is_a_bad_request():
    """Found by the fuzzer: a map whose key is a map."""
    check(lambda: decode_in_http(b"", None, tag="t", query={"msgpack": "\x8400000\x800"}))
    check(lambda: decode_in_http(b"\x81\x80\x01", "application/msgpack", tag="t"))
