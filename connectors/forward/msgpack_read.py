"""Reading msgpack safely: bounded unpackers, EventTime, and a str/bin header read without unpacking.

Shared by the framing (:mod:`.framing`) and the decoding (:mod:`.decode`)
of Forward messages.
"""

from __future__ import annotations

from typing import Any

import msgpack

MAX_CONTAINER_LEN = 1 << 20
"""Longest msgpack array or map accepted. msgpack allocates a container when
it reads its header, so this bounds what a few hostile bytes can allocate."""

FEED_SLICE = 1 << 20  # at most this much is fed to an Unpacker between limit checks
HEAD_BYTES = 512  # bytes kept of a pending message to name its tag if it is too big


def ext_hook(code: int, data: bytes, _ext: Any = msgpack.ExtType) -> Any:
    # EventTime (ext 0) stays its 8 payload bytes: the packed loop converts all
    # of a chunk's times at once (numpy), so no per-event object is made here.
    # Other ext types keep their code.
    return data if code == 0 else _ext(code, data)


class EventTimeBytes(bytes):
    """An EventTime's 8 bytes outside packed entries, where a plain bytes would read as PackedForward entries."""

    __slots__ = ()


def message_ext_hook(code: int, data: bytes, _ext: Any = msgpack.ExtType) -> Any:
    return EventTimeBytes(data) if code == 0 else _ext(code, data)


def unpacker(max_buffer_size: int, ext_hook: Any = ext_hook) -> msgpack.Unpacker:
    # surrogateescape: binary inside a str (out_forward's str32 entries, gzip
    # included) survives the str round trip byte for byte.
    return msgpack.Unpacker(
        None,
        raw=False,
        unicode_errors="surrogateescape",
        ext_hook=ext_hook,
        strict_map_key=False,
        max_buffer_size=max_buffer_size,
        max_str_len=(1 << 32) - 1,
        max_bin_len=(1 << 32) - 1,
        max_ext_len=(1 << 32) - 1,
        max_array_len=MAX_CONTAINER_LEN,
        max_map_len=MAX_CONTAINER_LEN,
    )


def header_len(frame: bytes | bytearray | memoryview, pos: int, str_ok: bool, bin_ok: bool) -> tuple[int, int] | None:
    """(length, position after the header) of a str/bin header at ``pos``, or None if it is not one."""
    if pos >= len(frame):
        return None
    b = frame[pos]
    if str_ok and 0xA0 <= b <= 0xBF:
        return b & 0x1F, pos + 1
    if (str_ok and b == 0xD9) or (bin_ok and b == 0xC4):
        width = 1
    elif (str_ok and b == 0xDA) or (bin_ok and b == 0xC5):
        width = 2
    elif (str_ok and b == 0xDB) or (bin_ok and b == 0xC6):
        width = 4
    else:
        return None
    end = pos + 1 + width
    if end > len(frame):
        return None
    return int.from_bytes(frame[pos + 1 : end], "big"), end
