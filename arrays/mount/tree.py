"""The file tree of a mount: which path is which snapshot, stream and column, and the bytes of a column file."""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from windvane import neostore

from ..stream import Stream
from ..stream_registry import list_streams, open_stream

#: The name of the directory that follows the newest commit.
HEAD = "head"
#: What a column file's sidecar is called after the column's own name.
SIDECAR = ".json"


@dataclass(frozen=True)
class Column:
    """One column file: a column of a stream at a snapshot, mappable when its dtype has a fixed size."""

    tid: bytes
    tag: str
    name: str
    dtype: np.dtype
    shape: tuple[int, ...]
    chunk_rows: int

    @property
    def row_bytes(self) -> int:
        """Bytes of one row: the item size times the sizes of the other axes."""
        return int(self.dtype.itemsize * int(np.prod(self.shape[1:], dtype=np.int64)))

    @property
    def size(self) -> int:
        return self.row_bytes * self.shape[0]

    def sidecar(self) -> bytes:
        """The JSON that says how to map the file."""
        return (
            json.dumps(
                {
                    "dtype": self.dtype.newbyteorder("<").str,
                    "shape": list(self.shape),
                    "chunk_rows": self.chunk_rows,
                    "tid": f"0x{self.tid.hex()}",
                    "stream": self.tag,
                    "column": self.name,
                },
                indent=1,
            ).encode()
            + b"\n"
        )


class Snapshots:
    """The streams of one store at the snapshots a mount serves, opened once each and kept while used."""

    def __init__(self, store: neostore.Store, keep: int = 64):
        self.store = store
        self.keep = keep
        self._lock = threading.Lock()
        self._streams: OrderedDict[tuple[bytes, str], Stream] = OrderedDict()

    def head(self) -> bytes:
        """The newest commit."""
        return self.store.last_transaction()

    def tags(self, tid: bytes) -> list[str]:
        """The streams that exist at ``tid``."""
        return list_streams(self.store, at=tid)

    def stream(self, tid: bytes, tag: str) -> Stream:
        """Stream ``tag`` as of ``tid``, opened once."""
        key = (tid, tag)
        with self._lock:
            found = self._streams.get(key)
            if found is not None:
                self._streams.move_to_end(key)
                return found
        opened = open_stream(self.store, tag, at=tid)
        with self._lock:
            self._streams[key] = opened
            while len(self._streams) > self.keep:
                _, old = self._streams.popitem(last=False)
                old.close()
        return opened

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

    def read(self, column: Column, offset: int, size: int) -> bytes:
        """``size`` bytes of ``column``'s file from ``offset`` (fewer at its end)."""
        end = min(offset + size, column.size)
        if end <= offset:
            return b""
        first, last = offset // column.row_bytes, -(-end // column.row_bytes)
        rows = self.stream(column.tid, column.tag)[column.name][first:last]
        raw = np.ascontiguousarray(rows, dtype=column.dtype.newbyteorder("<")).tobytes()
        start = offset - first * column.row_bytes
        return raw[start : start + end - offset]

    def close(self) -> None:
        with self._lock:
            streams, self._streams = list(self._streams.values()), OrderedDict()
        for stream in streams:
            stream.close()


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
