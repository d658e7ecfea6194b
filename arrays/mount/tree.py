"""The file tree of a mount: which path is which snapshot, stream, column or array, and the bytes of its file."""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from concurrent.futures import Future
from dataclasses import dataclass

import numpy as np

from windvane import neostore

from ..bigarray import BigArray
from ..bigarray import open as open_array
from ..keys import Snapshot
from ..metadata import METADATA_KEY, node_type
from ..stream import Stream
from ..stream_registry import list_streams, open_stream
from ..timetravel import snapshot_bound
from ..workers import io_pool
from .config import ARRAYS


@dataclass(frozen=True)
class Column:
    """One file: a column of a stream, or a plain BigArray (``array``, its path), at a snapshot; mappable when
    its dtype has a fixed size."""

    tid: bytes
    tag: str
    name: str
    dtype: np.dtype
    shape: tuple[int, ...]
    chunk_rows: int
    array: str = ""

    @property
    def row_bytes(self) -> int:
        """Bytes of one row: the item size times the sizes of the other axes."""
        return int(self.dtype.itemsize * int(np.prod(self.shape[1:], dtype=np.int64)))

    @property
    def size(self) -> int:
        return self.row_bytes * self.shape[0]

    @property
    def chunk_bytes(self) -> int:
        """Bytes of one stored chunk's rows in the file: the span one decode serves."""
        return self.row_bytes * self.chunk_rows

    def sidecar(self) -> bytes:
        """The JSON that says how to map the file."""
        return (
            json.dumps(
                {
                    "dtype": self.dtype.newbyteorder("<").str,
                    "shape": list(self.shape),
                    "chunk_rows": self.chunk_rows,
                    "tid": f"0x{self.tid.hex()}",
                    **({"array": self.array} if self.array else {"stream": self.tag, "column": self.name}),
                },
                indent=1,
            ).encode()
            + b"\n"
        )


class Snapshots:
    """The streams and arrays of one store at the snapshots a mount serves, opened once each and kept while
    used (the ``keep`` most recently used).

    The kernel asks for a file in pieces far smaller than a chunk, so the
    bytes of the chunks being served are kept (``chunk_cache_bytes``, least
    recently used dropped first) and served as slices of one buffer; a read
    also starts decoding the ``read_ahead`` chunks after it in worker
    threads, so that a sequential reader finds them ready. The window is
    small: what the kernel already read stays in its page cache, and a chunk
    read again after it left the window is found decoded in the array's own
    chunk cache.
    """

    def __init__(
        self, store: neostore.Store, keep: int = 64, chunk_cache_bytes: int = 64 * 1024 * 1024, read_ahead: int = 4
    ):
        self.store = store
        self.keep = keep
        self.chunk_cache_bytes = chunk_cache_bytes
        self.read_ahead = read_ahead
        self._lock = threading.Lock()
        self._chunks: OrderedDict[tuple[Column, int], memoryview] = OrderedDict()
        self._chunks_nbytes = 0
        self._pending: dict[tuple[Column, int], Future[memoryview]] = {}
        self._chunk_reads = 0
        # Keyed by (tid, stream tag) and (tid, ARRAYS + "/" + array path).
        self._opened: OrderedDict[tuple[bytes, str], Stream | BigArray] = OrderedDict()

    def head(self) -> bytes:
        """The newest commit."""
        return self.store.last_transaction()

    def tags(self, tid: bytes) -> list[str]:
        """The streams that exist at ``tid``."""
        return list_streams(self.store, at=tid)

    def _kept(self, key: tuple[bytes, str]) -> Stream | BigArray | None:
        with self._lock:
            found = self._opened.get(key)
            if found is not None:
                self._opened.move_to_end(key)
            return found

    def _keep(self, key: tuple[bytes, str], opened: Stream | BigArray) -> None:
        with self._lock:
            self._opened[key] = opened
            while len(self._opened) > self.keep:
                _, old = self._opened.popitem(last=False)
                old.close()

    def stream(self, tid: bytes, tag: str) -> Stream:
        """Stream ``tag`` as of ``tid``, opened once."""
        found = self._kept((tid, tag))
        if isinstance(found, Stream):
            return found
        opened = open_stream(self.store, tag, at=tid)
        self._keep((tid, tag), opened)
        return opened

    def array(self, tid: bytes, path: str) -> BigArray:
        """Plain BigArray ``path`` as of ``tid``, opened once."""
        key = (tid, f"{ARRAYS}/{path}")
        found = self._kept(key)
        if isinstance(found, BigArray):
            return found
        opened = open_array(self.store, path, at=tid)
        self._keep(key, opened)
        return opened

    def array_entry(self, tid: bytes, path: str) -> Column | str | None:
        """What ``path`` is at ``tid``: the file of a mappable array, ``"group"``, or None (nothing, or an array
        of text or bytes)."""
        raw = Snapshot(self.store, snapshot_bound(self.store, tid)).get(f"{path}/{METADATA_KEY}")
        kind = None if raw is None else node_type(raw)
        if kind == "group":
            return "group"
        if kind != "array":
            return None
        array = self.array(tid, path)
        if array.dtype.hasobject or array.dtype.itemsize == 0 or array.ndim == 0:
            return None
        return Column(tid, "", path.rsplit("/", 1)[-1], array.dtype, array.shape, array.chunks[0], array=path)

    def columns(self, tid: bytes, tag: str) -> dict[str, Column]:
        """The mappable columns of ``tag`` at ``tid`` (``time`` first), by file name."""
        stream = self.stream(tid, tag)
        out = {}
        for name in ["time", *stream.columns]:
            array = stream[name]
            if array.dtype.hasobject or array.dtype.itemsize == 0:
                continue  # text and bytes columns hold values of many sizes: no raw file
            out[name] = Column(tid, tag, name, array.dtype, array.shape, array.chunks[0])
        return out

    def read(self, column: Column, offset: int, size: int) -> bytes | memoryview:
        """``size`` bytes of ``column``'s file from ``offset`` (fewer at its end): a slice of a kept chunk when
        the piece lies in one, as the kernel's requests do."""
        end = min(offset + size, column.size)
        if end <= offset:
            return b""
        span = column.chunk_bytes
        first, last = offset // span, (end - 1) // span
        for ahead in range(last + 1, min(last + 1 + self.read_ahead, -(-column.size // span))):
            self._start(column, ahead)
        if first == last:
            return self.chunk(column, first)[offset - first * span : end - first * span]
        joined = b"".join([self.chunk(column, index) for index in range(first, last + 1)])
        return joined[offset - first * span : end - first * span]

    def kept(self, column: Column, offset: int, size: int) -> memoryview | None:
        """The piece :meth:`read` would give when it lies in one kept chunk (never waits on the store), else
        None."""
        span = column.chunk_bytes
        index, end = offset // span, min(offset + size, column.size)
        if end <= offset or (end - 1) // span != index:
            return None
        with self._lock:
            found = self._chunks.get((column, index))
            if found is None:
                return None
            self._chunks.move_to_end((column, index))
        return found[offset - index * span : end - index * span]

    def chunk(self, column: Column, index: int) -> memoryview:
        """The file's bytes of chunk ``index`` of ``column``: kept, being read ahead, or read now."""
        key = (column, index)
        with self._lock:
            found = self._chunks.get(key)
            if found is not None:
                self._chunks.move_to_end(key)
                return found
            pending = self._pending.get(key)
            mine = pending is None
            if pending is None:
                # The kernel asks for several pieces of one chunk at once: the first decodes, the others wait.
                pending = self._pending[key] = Future()
        if not mine:
            return pending.result()
        try:
            data = self._load(key)
        except BaseException as error:
            pending.set_exception(error)
            raise
        pending.set_result(data)
        return data

    def _start(self, column: Column, index: int) -> None:
        key = (column, index)
        with self._lock:
            if key in self._chunks or key in self._pending:
                return
            self._pending[key] = io_pool().submit(self._load, key)

    def _load(self, key: tuple[Column, int]) -> memoryview:
        column, index = key
        try:
            source = (
                self.array(column.tid, column.array)
                if column.array
                else self.stream(column.tid, column.tag)[column.name]
            )
            rows = source[index * column.chunk_rows : (index + 1) * column.chunk_rows]
            # Little-endian and contiguous: a native little-endian array already is, and is served uncopied.
            raw = np.ascontiguousarray(rows, dtype=column.dtype.newbyteorder("<"))
            data = raw.reshape(-1).view(np.uint8).data
        except BaseException:
            with self._lock:
                self._pending.pop(key, None)
            raise
        with self._lock:
            self._pending.pop(key, None)
            self._chunks[key] = data
            self._chunk_reads += 1
            self._chunks_nbytes += data.nbytes
            while self._chunks_nbytes > self.chunk_cache_bytes and len(self._chunks) > 1:
                _, old = self._chunks.popitem(last=False)
                self._chunks_nbytes -= old.nbytes
        return data

    def stats(self) -> dict[str, int]:
        """What the mount read from the store: ``chunk_reads`` (chunks fetched and decoded) and the chunks kept."""
        with self._lock:
            return {"chunk_reads": self._chunk_reads, "chunks_kept": len(self._chunks)}

    def forget(self, tid: bytes) -> None:
        """Close what is open at ``tid``: its directory is no longer in use."""
        with self._lock:
            keys = [key for key in self._opened if key[0] == tid]
            dropped = [self._opened.pop(key) for key in keys]
            for chunk_key in [key for key in self._chunks if key[0].tid == tid]:
                self._chunks_nbytes -= self._chunks.pop(chunk_key).nbytes
        for opened in dropped:
            opened.close()

    def close(self) -> None:
        with self._lock:
            opened, self._opened = list(self._opened.values()), OrderedDict()
            self._chunks.clear()
            self._chunks_nbytes = 0
        for each in opened:
            each.close()


def tid_name(tid: bytes) -> str:
    """The directory name of snapshot ``tid``."""
    return f"@{tid.hex()}"


def parse_tid_name(name: str) -> bytes | None:
    """The tid a ``@<16 hex>`` directory name stands for, else None."""
    if len(name) == 17 and name[0] == "@":
        try:
            return bytes.fromhex(name[1:])
        except ValueError:
            return None
    return None
