"""Decompressing a CompressedPackedForward message's entries (gzip, zstd) within a size limit."""

from __future__ import annotations

import zlib
from typing import Any

import zstandard

from .errors import MalformedMessage, OversizeMessage


def decompress_entries(payload: bytes | memoryview, codec: Any, limit: int, tag: str) -> bytes:
    """``payload`` decompressed by ``codec`` ("gzip" or "zstd"); OversizeMessage past ``limit`` bytes,
    MalformedMessage if it does not decompress or the codec is unknown."""
    if codec == "gzip":
        return _gunzip(payload, limit, tag)
    if codec == "zstd":
        return _unzstd(payload, limit, tag)
    raise MalformedMessage(f"option compressed of tag {tag!r} is {codec!r}: expected 'text', 'gzip' or 'zstd'")


def _too_big(tag: str, limit: int, size: int) -> OversizeMessage:
    return OversizeMessage(
        f"decompressed entries of tag {tag!r} exceed the limit of {limit} bytes (decompressed_size_limit)",
        tag=tag,
        limit=limit,
        size=size,
    )


def _gunzip(payload: bytes | memoryview, limit: int, tag: str) -> bytes:
    """Decompress every concatenated gzip member (fluentd and Fluent Bit may send several), at most ``limit`` bytes."""
    out = bytearray()
    data: bytes | memoryview = payload
    member = 0
    while data:
        d = zlib.decompressobj(wbits=31)
        try:
            out += d.decompress(data, limit + 1 - len(out))
            while d.unconsumed_tail and len(out) <= limit:
                out += d.decompress(d.unconsumed_tail, limit + 1 - len(out))
        except zlib.error as exc:
            raise MalformedMessage(f"gzip member {member} of tag {tag!r} is not valid gzip: {exc}") from exc
        if len(out) > limit:
            raise _too_big(tag, limit, len(out))
        if not d.eof:
            raise MalformedMessage(f"gzip member {member} of tag {tag!r} is truncated")
        data = d.unused_data
        member += 1
    return bytes(out)


def _unzstd(payload: bytes | memoryview, limit: int, tag: str) -> bytes:
    """Decompress every concatenated zstd frame, at most ``limit`` bytes.

    zstandard's streaming reader bounds the output (no bomb) but returns a
    truncated frame's prefix silently, so the frames' block headers are
    walked first to check that every frame is complete.
    """
    problem = _zstd_incomplete(memoryview(payload))
    if problem:
        raise MalformedMessage(f"zstd payload of tag {tag!r} is {problem}")
    out = bytearray()
    try:
        reader = zstandard.ZstdDecompressor().stream_reader(payload, read_across_frames=True)
        while True:
            piece = reader.read(min(1 << 20, limit + 1 - len(out)))
            if not piece:
                break
            out += piece
            if len(out) > limit:
                raise _too_big(tag, limit, len(out))
    except zstandard.ZstdError as exc:
        raise MalformedMessage(f"zstd payload of tag {tag!r} is not valid zstd: {exc}") from exc
    return bytes(out)


def _zstd_incomplete(data: memoryview) -> str | None:
    """Why the zstd frames in ``data`` are not complete (RFC 8878 framing), or None if they are."""
    pos, end = 0, len(data)
    while pos < end:
        if end - pos < 4:
            return "truncated (a frame header is cut)"
        magic = int.from_bytes(data[pos : pos + 4], "little")
        if 0x184D2A50 <= magic <= 0x184D2A5F:  # skippable frame
            if end - pos < 8:
                return "truncated (a skippable frame header is cut)"
            pos += 8 + int.from_bytes(data[pos + 4 : pos + 8], "little")
            continue
        if magic != 0xFD2FB528:
            return "not zstd (bad frame magic)"
        pos += 4
        if pos >= end:
            return "truncated (a frame header is cut)"
        descriptor = data[pos]
        pos += 1
        single_segment = (descriptor >> 5) & 1
        fcs_flag = descriptor >> 6
        pos += (0 if single_segment else 1) + (0, 1, 2, 4)[descriptor & 3]
        pos += (1 if single_segment else 0, 2, 4, 8)[fcs_flag]
        while True:
            if pos + 3 > end:
                return "truncated (a block header is cut)"
            header = int.from_bytes(data[pos : pos + 3], "little")
            pos += 3
            block_type = (header >> 1) & 3
            if block_type == 3:
                return "not zstd (reserved block type)"
            pos += 1 if block_type == 1 else header >> 3  # RLE blocks hold one byte
            if pos > end:
                return "truncated (a block is cut)"
            if header & 1:  # last block
                break
        if (descriptor >> 2) & 1:  # content checksum
            pos += 4
        if pos > end:
            return "truncated (the checksum is cut)"
    return None
