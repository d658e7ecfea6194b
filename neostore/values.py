"""How a value becomes the bytes of a ``data`` row, and back.

A value is named by the blake3 hash of the bytes the caller stored, so
identical values deduplicate whatever compression settings wrote them, and a
load checks the whole path (decompression included) against that hash.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import overload

import blake3
import zstandard

from .errors import InvalidOptionError

#: ``data.compression`` flags. Rows keep their flag, so changing settings
#: never makes old rows unreadable.
RAW = 0
ZSTD = 1

# Leading bytes of formats that are already compressed: recompressing them
# costs CPU and gains nothing.
_COMPRESSED_MAGIC = (
    b"\x28\xb5\x2f\xfd",  # zstd frame
    b"\x1f\x8b",  # gzip
    b"\x04\x22\x4d\x18",  # lz4 frame
    b"BZh",  # bzip2
    b"\xfd7zXZ\x00",  # xz
    b"PK\x03\x04",  # zip
    b"\x89PNG",
    b"\xff\xd8\xff",  # jpeg
    b"PAR1",  # parquet
)

# Compression is kept only when it saves at least this fraction: below it,
# decompressing on every read costs more time than the bytes saved.
MIN_GAIN = 1 / 8

# Below this size a value is stored raw without trying: zstd's frame and block headers take about as much
# as it saves, so the result would be thrown away (a slow stream's row log revisions are this small).
_MIN_COMPRESS = 128
# Values larger than this are first probed with a sample, so incompressible
# data (already-compressed chunks with an unknown header) costs one sample.
_PROBE_ABOVE = 256 * 1024
_PROBE_SIZE = 64 * 1024


# With threads, a value compressed while no other is spreads over zstd's worker threads, a job of JOB_BYTES
# each: a commit of one big value then takes several idle cores rather than one. While other values compress too,
# each keeps to its thread: the store's worker threads already use the cores, and a job's buffers cost copies.
# Off by default: where the cores are busy (a server's workers), spreading costs more than it saves.
JOB_BYTES = 1 << 20


def spread_parameters(level: int, threads: int) -> zstandard.ZstdCompressionParameters:
    """zstd's parameters of ``level`` for a value compressed alone: jobs of :data:`JOB_BYTES` on ``threads``
    (zstd writes the same frame whatever their number)."""
    return zstandard.ZstdCompressionParameters.from_level(level, threads=threads, job_size=JOB_BYTES)


# Above this size blake3 hashes with several threads (about twice as fast
# on two cores, and the GIL is released meanwhile).
_THREADED_HASH = 1024 * 1024


def value_hash(value: bytes | memoryview) -> bytes:
    """The 32-byte blake3 hash that names ``value``."""
    if len(value) >= _THREADED_HASH:
        return blake3.blake3(value, max_threads=blake3.blake3.AUTO).digest()
    return blake3.blake3(value).digest()


@dataclass(frozen=True)
class EncodedValue:
    """A value ready to be written: its hash, raw size, flag and stored bytes."""

    hash: bytes
    size: int
    compression: int
    stored: bytes


class ValueCodec:
    """Compression policy: zstd at ``level``, kept only when it saves :data:`MIN_GAIN`.

    ``level=0`` turns compression off. ``threads``: zstd threads a value compressed alone spreads over
    (1: none; see :data:`JOB_BYTES`).
    """

    def __init__(self, level: int = 1, threads: int = 1):
        if not -7 <= level <= 22:
            raise InvalidOptionError(f"zstd level must be between -7 and 22 (0 = off), got {level}")
        if not 1 <= threads <= 64:
            raise InvalidOptionError(f"compression threads must be between 1 and 64, got {threads}")
        self.level = level
        self.threads = threads
        # zstd contexts must not be shared between threads: one set per thread.
        self._contexts = threading.local()
        self._compressing = 0  # values being compressed now, in any thread
        self._compressing_lock = threading.Lock()

    def _context(self) -> threading.local:
        ctx = self._contexts
        if not hasattr(ctx, "decompressor"):
            ctx.compressor = zstandard.ZstdCompressor(level=self.level) if self.level else None
            spread = self.level and self.threads > 1
            ctx.spread = (
                zstandard.ZstdCompressor(compression_params=spread_parameters(self.level, self.threads))
                if spread
                else None
            )
            ctx.probe = zstandard.ZstdCompressor(level=1)
            ctx.decompressor = zstandard.ZstdDecompressor()
        return ctx

    def encode(self, value: bytes, value_hash_: bytes | None = None, compress: bool = True) -> EncodedValue:
        """Encode ``value``; ``value_hash_`` saves rehashing when the caller has it."""
        digest = value_hash_ if value_hash_ is not None else value_hash(value)
        if compress and self._worth_compressing(value):
            packed = self._compress(value)
            if len(packed) <= len(value) * (1 - MIN_GAIN):
                return EncodedValue(digest, len(value), ZSTD, packed)
        return EncodedValue(digest, len(value), RAW, bytes(value))

    def _compress(self, value: bytes) -> bytes:
        """``value`` as a zstd frame: spread over :attr:`threads` when no other value is compressing (the
        frames differ, the value they hold does not)."""
        ctx = self._context()
        if ctx.spread is None or len(value) <= JOB_BYTES:
            packed: bytes = ctx.compressor.compress(value)
            return packed
        with self._compressing_lock:
            alone = self._compressing == 0
            self._compressing += 1
        try:
            packed = (ctx.spread if alone else ctx.compressor).compress(value)
        finally:
            with self._compressing_lock:
                self._compressing -= 1
        return packed

    @overload
    def decode(self, compression: int, stored: bytes, size: int | None = None) -> bytes: ...
    @overload
    def decode(self, compression: int, stored: bytes | memoryview, size: int | None = None) -> bytes | memoryview: ...

    def decode(self, compression: int, stored: bytes | memoryview, size: int | None = None) -> bytes | memoryview:
        """The value a row holds (``stored`` itself when raw). Raises ValueError for an unknown flag or bad frame."""
        if compression == RAW:
            return stored
        if compression == ZSTD:
            try:
                value: bytes = self._context().decompressor.decompress(stored, max_output_size=size or 0)
            except zstandard.ZstdError as exc:
                raise ValueError(f"zstd frame does not decompress: {exc}") from None
            return value
        raise ValueError(f"unknown compression flag {compression}")

    def _worth_compressing(self, value: bytes) -> bool:
        if not self.level or len(value) < _MIN_COMPRESS:
            return False
        head = bytes(value[:8])
        if head.startswith(_COMPRESSED_MAGIC):
            return False
        if len(value) > _PROBE_ABOVE:
            sample = value[:_PROBE_SIZE]
            return len(self._context().probe.compress(sample)) <= (1 - MIN_GAIN) * len(sample)
        return True
