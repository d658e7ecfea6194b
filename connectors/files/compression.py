"""Compressed files (gzip, zstd, bzip2, xz), told by their magic bytes and read as the bytes they hold.

:func:`open_data` gives a file's content as a binary stream, decompressed
as it is read (a buffer at a time, never the whole file in memory). It
seeks forward only: a compressed file is decompressed up to the position
asked for and what comes before it discarded, so a resumed import is
exact, at the cost of decompressing the part already imported again.
A damaged compressed file (truncated, corrupt) raises FileFormatError
naming it as a compressed file.

:func:`data_name` is the name a file would have uncompressed and not
rotated (``x.csv.gz`` is ``x.csv``, ``syslog.1.gz`` is ``syslog``):
what :mod:`connectors.files.formats` tells the format by.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import re
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO, Protocol

import zstandard

from . import FileFormatError

#: Magic bytes at the start of a compressed file, and its compression.
MAGIC = {b"\x1f\x8b": "gzip", b"\x28\xb5\x2f\xfd": "zstd", b"BZh": "bzip2", b"\xfd7zXZ\x00": "xz"}
#: Name suffixes of compressed files (lower case).
SUFFIXES = {".gz": "gzip", ".gzip": "gzip", ".zst": "zstd", ".zstd": "zstd", ".bz2": "bzip2", ".xz": "xz"}
#: What decompressing may raise on a damaged file (gzip.BadGzipFile is an OSError).
_DAMAGED = (EOFError, OSError, zstandard.ZstdError, lzma.LZMAError)
#: Compressed bytes a :class:`ZstdStream` decompresses at a time.
ZSTD_INPUT = 64 << 10
#: logrotate's rotation suffixes: ``.1``, ``.12``, ``-20261126``.
_ROTATION = re.compile(r"(\.\d{1,3}|-\d{8})$")


def compression_of(path: str | Path) -> str | None:
    """``path``'s compression by its first bytes (``"gzip"``, ``"zstd"``, ``"bzip2"``, ``"xz"``), or None."""
    with open(path, "rb") as f:
        head = f.read(max(len(m) for m in MAGIC))
    return next((kind for magic, kind in MAGIC.items() if head.startswith(magic)), None)


def data_name(path: str | Path) -> str:
    """The file name without its compression suffix and logrotate's number (``syslog.1.gz``: ``syslog``)."""
    name = Path(path).name
    suffix = Path(name).suffix.lower()
    if suffix in SUFFIXES:
        name = name[: -len(suffix)]
    return _ROTATION.sub("", name) or name


class DataStream(Protocol):
    """What :func:`open_data` gives: the content read forward (``seek`` forward only when it is compressed)."""

    def read(self, size: int = -1, /) -> bytes: ...

    def seek(self, offset: int, /) -> int: ...

    def tell(self) -> int: ...

    def close(self) -> None: ...


class _Decompressed:
    """A decompressing stream whose damage is a FileFormatError naming the file."""

    def __init__(self, path: str, kind: str, stream: DataStream):
        self.path, self.kind, self.stream = path, kind, stream

    def _damaged(self, exc: Exception) -> FileFormatError:
        return FileFormatError(f"{self.path}: compressed file ({self.kind}) cannot be read: {exc}")

    def read(self, size: int = -1) -> bytes:
        try:
            return self.stream.read(size)
        except _DAMAGED as exc:
            raise self._damaged(exc) from None

    def seek(self, offset: int) -> int:
        """Go forward to ``offset`` of the content (decompressing and dropping what comes before)."""
        try:
            return self.stream.seek(offset)
        except _DAMAGED as exc:
            raise self._damaged(exc) from None

    def tell(self) -> int:
        return self.stream.tell()

    def close(self) -> None:
        self.stream.close()

    def __enter__(self) -> _Decompressed:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ZstdStream:
    """The frames of a zstd file decompressed as they are read; EOFError if the file ends inside a frame.

    zstandard's ``stream_reader`` ends quietly at a truncated frame, which
    would import a cut file as if it were whole; its ``decompressobj`` says
    whether a frame is complete. Input is fed :data:`ZSTD_INPUT` bytes at a
    time, so a block's output stays bounded.
    """

    def __init__(self, path: str):
        self.file = open(path, "rb")  # closed by close()
        self.frame = zstandard.ZstdDecompressor().decompressobj()
        self.in_frame = False  # input of the current frame was fed, its end not reached
        self.buffer = bytearray()
        self.position = 0

    def _fill(self, want: int) -> None:
        while len(self.buffer) < want:
            data = self.file.read(ZSTD_INPUT)
            if not data:
                if self.in_frame:
                    raise EOFError("the file ends inside a zstd frame (truncated)")
                return
            while data:
                self.buffer += self.frame.decompress(data)
                self.in_frame = not self.frame.eof
                data = b""
                if self.frame.eof:  # the next frame (zstd files may hold several) starts after it
                    data = self.frame.unused_data
                    self.frame = zstandard.ZstdDecompressor().decompressobj()

    def read(self, size: int = -1) -> bytes:
        if size < 0:
            parts = []
            while part := self.read(1 << 20):
                parts.append(part)
            return b"".join(parts)
        self._fill(size)
        out = bytes(self.buffer[:size])
        del self.buffer[:size]
        self.position += len(out)
        return out

    def seek(self, offset: int) -> int:
        if offset < self.position:
            raise OSError("a zstd stream seeks forward only")
        while self.position < offset and self.read(min(offset - self.position, 1 << 20)):
            pass
        return self.position

    def tell(self) -> int:
        return self.position

    def close(self) -> None:
        self.file.close()


_OPENERS: dict[str, Callable[[str], DataStream]] = {
    "gzip": lambda p: gzip.open(p, "rb"),
    "zstd": ZstdStream,
    "bzip2": lambda p: bz2.open(p, "rb"),
    "xz": lambda p: lzma.open(p, "rb"),
}


def open_data(path: str | Path) -> BinaryIO | _Decompressed:
    """``path``'s content as a binary stream (``read``, forward ``seek``, ``tell``), decompressed if need be."""
    kind = compression_of(path)
    if kind is None:
        return open(path, "rb")
    return _Decompressed(str(path), kind, _OPENERS[kind](str(path)))
