"""How many bytes a compressed payload decompresses to, found in constant memory, before it is decompressed.

A connector reserves that many bytes of its memory budget before the
payload is decompressed for real (here or in a decode worker), so a
decompression bomb costs CPU only: its output streams through a window of
:data:`WINDOW` bytes and is dropped, and counting stops past ``cap``.
Corrupt or truncated data is not reported here: the count is then what
decompressed before the fault, and the real decoder names the fault.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Iterator
from typing import IO, cast

import zstandard

WINDOW = 1 << 20  # output bytes produced, and dropped, at a time


def inflated_size(payload: bytes | memoryview, codings: Iterable[str], cap: int) -> int:
    """Bytes ``payload`` gives once ``codings`` are undone (applied in order, undone in reverse);
    counting stops at the first byte past ``cap`` (the result is then ``cap + 1``).

    Codings: ``gzip``/``x-gzip`` (concatenated members too), ``deflate``
    (zlib-wrapped or raw), ``zstd`` (several frames), ``identity``; an unknown
    coding counts as identity (the decoder refuses it).
    """
    pieces: Iterator[bytes | memoryview] = iter((payload,))
    for coding in reversed([c.strip().lower() for c in codings if c.strip()]):
        if coding in ("gzip", "x-gzip"):
            pieces = _zlib(pieces, 31)
        elif coding == "deflate":
            pieces = _zlib(pieces, None)
        elif coding == "zstd":
            pieces = _zstd(pieces)
    total = 0
    try:
        for piece in pieces:
            total += len(piece)
            if total > cap:
                return cap + 1
    except (zlib.error, zstandard.ZstdError):
        pass
    return total


def _zlib(source: Iterator[bytes | memoryview], wbits: int | None) -> Iterator[bytes]:
    d = None
    for data in source:
        while data:
            if d is None:
                if wbits is None:  # deflate: zlib-wrapped as RFC 9110 says, or raw as some clients send
                    head = bytes(data[:2])
                    wrapped = len(head) == 2 and head[0] & 0x0F == 8 and ((head[0] << 8) | head[1]) % 31 == 0
                    d = zlib.decompressobj(15 if wrapped else -15)
                else:
                    d = zlib.decompressobj(wbits)
            out = d.decompress(data, WINDOW)
            stuck = not out and len(d.unconsumed_tail) == len(data)
            data = d.unconsumed_tail
            if out:
                yield out
            if d.eof:
                data = d.unused_data
                d = None  # the next gzip member, if any
            elif stuck:
                return
    while d is not None and not d.eof:  # output still pending inside the decompressor
        out = d.decompress(b"", WINDOW)
        if not out:
            break
        yield out


def _zstd(source: Iterator[bytes | memoryview]) -> Iterator[bytes]:
    # The stream reader bounds each read's output (decompressobj would not) and crosses frames.
    # The stubs name IO[bytes]; the stream reader calls only read(size), all _Chained has.
    chained = cast(IO[bytes], _Chained(source))
    reader = zstandard.ZstdDecompressor().stream_reader(chained, read_across_frames=True)
    while True:
        out = reader.read(WINDOW)
        if not out:
            return
        yield out


class _Chained:
    """A file-like ``read`` over an iterator of byte pieces (the output of the coding applied after)."""

    def __init__(self, source: Iterator[bytes | memoryview]) -> None:
        self._source = source
        self._head = memoryview(b"")

    def read(self, size: int = -1) -> bytes:
        while not self._head:
            piece = next(self._source, None)
            if piece is None:
                return b""
            self._head = memoryview(piece)
        n = len(self._head) if size is None or size < 0 else size
        out, self._head = self._head[:n], self._head[n:]
        return bytes(out)
