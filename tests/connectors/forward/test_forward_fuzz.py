"""Fuzzing the Forward decoder: whatever the bytes, it yields messages or raises ForwardError, quickly, in bounded memory."""

from __future__ import annotations

import gzip
import struct
import tracemalloc
from pathlib import Path

import msgpack
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from windvane.connectors.forward import ForwardDecoder, ForwardError

FIXTURES = Path(__file__).parents[2] / "fixtures" / "forward"
SEEDS = [p.read_bytes() for p in sorted(FIXTURES.glob("*.bin"))] + [
    msgpack.packb(["t", gzip.compress(msgpack.packb([1, {"a": 1}]) * 20), {"compressed": "gzip", "chunk": "c"}]),
    msgpack.packb(
        ["t", zstandard.ZstdCompressor().compress(msgpack.packb([1, {"a": 1}]) * 20), {"compressed": "zstd"}]
    ),
    b'["t", 1, {"a": [1, 2, {"b": "c\\\\"}]}, {"chunk": "x"}]',
]
LIMITS = {"chunk_size_limit": 64 << 10, "decompressed_size_limit": 1 << 20}
MEMORY_BOUND = 32 << 20


def run(data: bytes, split: int, limits: dict = LIMITS) -> None:
    decoder = ForwardDecoder(**limits)
    tracemalloc.start()
    try:
        for i in range(0, len(data), split):
            for decoded in decoder.feed(data[i : i + split]):
                assert len(decoded.batch.times) == len(decoded.batch.records)
                for j in range(len(decoded.batch)):
                    decoded.batch.raw_bytes(j)
    except ForwardError:
        pass
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert peak < MEMORY_BOUND, f"decoding {len(data)} bytes peaked at {peak} bytes"


FUZZ = settings(max_examples=400, deadline=2000, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(st.binary(max_size=4096), st.integers(1, 64))
def test_random_bytes(data, split):
    run(data, split)


def _bulk(head: bytes, tail: bytes) -> bytes:
    """A PackedForward message whose str32/bin32 entries (70 kB) the framer gathers in pieces (bulk)."""
    entries = b"".join(msgpack.packb([i, {"blob": b"x" * 7000}]) for i in range(10))
    return head + struct.pack(">I", len(entries)) + entries + tail


#: Bulk messages: str32 entries with an option, bin32 without, nil option; one after a small message.
BULK_SEEDS = [
    _bulk(b"\x93\xa1t\xdb", msgpack.packb({"chunk": "c", "size": 10})),
    _bulk(b"\x92\xa4bulk\xc6", b""),
    _bulk(b"\x93\xa1t\xdb", b"\xc0") + msgpack.packb(["t", 1, {"a": 1}]),
]
BULK_LIMITS = {"chunk_size_limit": 1 << 20, "decompressed_size_limit": 1 << 20}


@st.composite
def mutated(draw, seeds=SEEDS):
    data = bytearray(draw(st.sampled_from(seeds)))
    for _ in range(draw(st.integers(1, 8))):
        op = draw(st.sampled_from(["flip", "insert", "delete", "truncate", "big-length"]))
        pos = draw(st.integers(0, max(len(data) - 1, 0)))
        if op == "flip" and data:
            data[pos] ^= draw(st.integers(1, 255))
        elif op == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=8))
        elif op == "delete" and data:
            del data[pos : pos + draw(st.integers(1, 8))]
        elif op == "truncate":
            del data[pos:]
        elif op == "big-length":
            # Headers claiming huge containers or strings: must not allocate or wait forever.
            data[pos:pos] = draw(
                st.sampled_from(
                    [
                        b"\xdd\x7f\xff\xff\xff",
                        b"\xdf\x7f\xff\xff\xff",
                        b"\xdb\x7f\xff\xff\xff",
                        b"\xc6\xff\xff\xff\xff",
                        b"\xc9\x7f\xff\xff\xff\x00",
                    ]
                )
            )
    return bytes(data)


@FUZZ
@given(mutated(), st.integers(1, 512))
def test_mutated_valid_messages(data, split):
    run(data, split)


def split_decodes_as_whole(data: bytes, split: int, limits: dict) -> list:
    """What ``data`` decodes to whole, checked equal to what it decodes to fed ``split`` bytes at a time."""
    whole = list(ForwardDecoder(**limits).feed(data))
    decoder = ForwardDecoder(**limits)
    pieces = [d for i in range(0, len(data), split) for d in decoder.feed(data[i : i + split])]
    assert [(d.batch.tag, d.batch.records, d.chunk) for d in pieces] == [
        (d.batch.tag, d.batch.records, d.chunk) for d in whole
    ]
    return whole


@FUZZ
@given(st.sampled_from(SEEDS), st.integers(1, 16))
def test_valid_seeds_decode_whole_or_split(data, split):
    split_decodes_as_whole(data, split, LIMITS)


@settings(max_examples=80, deadline=4000, suppress_health_check=[HealthCheck.too_slow])
@given(mutated(BULK_SEEDS), st.integers(512, 80_000))  # finer splits: test_forward_decode's bulk tests
def test_mutated_bulk_messages(data, split):
    run(data, split, BULK_LIMITS)


@FUZZ
@given(st.sampled_from(BULK_SEEDS), st.integers(1, 80_000))
def test_bulk_seeds_decode_whole_or_split(data, split):
    whole = split_decodes_as_whole(data, split, BULK_LIMITS)
    assert len(whole) == (2 if data == BULK_SEEDS[2] else 1)


def test_gzip_bomb_is_bounded():
    bomb = gzip.compress(b"\x00" * (64 << 20))
    data = msgpack.packb(["t", bomb, {"compressed": "gzip"}])
    run(data, 1 << 16)


def test_zstd_bomb_is_bounded():
    bomb = zstandard.ZstdCompressor().compress(b"\x00" * (64 << 20))
    data = msgpack.packb(["t", bomb, {"compressed": "zstd"}])
    run(data, 1 << 16)
