"""Where validated columns go: a tag's stream and its quarantine stream, inside one transaction.

A stream is created from its schema the first time its tag is seen; a
field added to the schema later becomes a new column, back-filled. The
quarantine stream of a tag keeps each rejected record's time, the reason,
the bytes it arrived as and the connector it came from.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from typing import Any

import numpy as np

import arrays
import neostore
from arrays import Column, StreamNotFoundError

from .columns import Rejected
from .schema import Schema

#: Text and bytes columns of ingested streams: zstd at level 1. A stream's
#: partial last chunk is recompressed at every commit, and level 1 made that
#: ~30% cheaper than zstd's default (3) on log records at the same size.
TEXT_CODEC = {"name": "zstd", "level": 1}

QUARANTINE_COLUMNS = (
    Column("reason", "str", codec=TEXT_CODEC),
    Column("raw", "bytes", codec=TEXT_CODEC),
    Column("source", "str", codec=TEXT_CODEC),
)
QUARANTINE_CHUNK_ROWS = 4096
#: Stream writers kept by a committer, at most: each holds its stream's pending rows
#: (up to ``chunk_rows`` rows per column), so the least recently used are let go
#: past ``WRITERS_LIMIT`` writers or ``WRITERS_BYTES`` of rows held. A writer let go
#: costs its stream a reload on its next append; nothing of it outlives its commit.
WRITERS_LIMIT = 4096
WRITERS_BYTES = 64 << 20


class StreamWriters:
    """One :class:`arrays.StreamWriter` per stream (and per quarantine stream), kept across commits.

    Sharing one :class:`arrays.ChangeLog` spares each writer a query when
    many tags take turns. At most ``limit`` writers, holding at most
    ``max_bytes`` of rows between them, are kept; one let go only costs its
    stream a reload on its next append. Not thread-safe: the
    committer thread alone uses it.
    """

    def __init__(self, store: neostore.Store, limit: int = WRITERS_LIMIT, max_bytes: int = WRITERS_BYTES):
        self.store = store
        self.limit = limit
        self.max_bytes = max_bytes
        self.changes = arrays.ChangeLog(store)
        self._writers: collections.OrderedDict[tuple[str, bool], arrays.StreamWriter] = collections.OrderedDict()

    def get(self, tag: str, *, quarantine: bool = False) -> arrays.StreamWriter:
        key = (tag, quarantine)
        writer = self._writers.get(key)
        if writer is None:
            writer = arrays.StreamWriter(self.store, tag, quarantine=quarantine, changes=self.changes)
            self._writers[key] = writer
            self._trim()
        else:
            self._writers.move_to_end(key)
        return writer


    def _trim(self) -> None:
        """Let the least recently used writers go until both limits hold (the newest is kept)."""
        writers = self._writers
        while len(writers) > self.limit:
            writers.popitem(last=False)
        held = sum(w.held_bytes for w in writers.values())
        while held > self.max_bytes and len(writers) > 1:
            _, writer = writers.popitem(last=False)
            held -= writer.held_bytes


#: A schema's ``codec = "lz4"``: blosc with lz4 after the byte shuffle. On vibration
#: blocks (noisy float32, 3 channels) it stores within 1% of blosc's default (zstd
#: level 3: ratio 1.27 against 1.28) and encodes 6.7 times faster (3.0 GB/s against
#: 450 MB/s per core), which is what a stream of acknowledged blocks needs.
LZ4_CODEC = {"name": "blosc", "cname": "lz4", "clevel": 5}


def number_codec(schema: Schema) -> str | dict | None:
    """The arrays codec of ``schema``'s number columns: its ``codec``, or lz4 for vibration by default."""
    codec = schema.codec if schema.codec is not None else ("lz4" if schema.kind == "vibration" else None)
    return LZ4_CODEC if codec == "lz4" else codec


def schema_columns(schema: Schema) -> list[Column]:
    """The columns (beside ``time``) of a stream that follows ``schema``."""
    if schema.kind == "vibration":
        v = schema.vibration
        attrs: dict[str, Any] = {"unit": v.unit} if v.unit else {}
        if v.sample_rate is not None:
            attrs["sample_rate"] = v.sample_rate
        return [Column("samples", v.dtype, inner=(v.channels,), codec=number_codec(schema), attrs=attrs,
                       dims=("time", "channel"))]
    columns = [
        # A schema's codec is for numbers; blosc's shuffle has nothing to do on text.
        Column(f.name, f.dtype, codec=TEXT_CODEC if f.dtype in ("str", "bytes") else number_codec(schema),
               attrs={k: v for k, v in (("unit", f.unit), ("description", f.description)) if v})
        for f in schema.fields
    ]
    if schema.extra == "keep":
        columns.append(Column("extra", "str", codec=TEXT_CODEC,
                              attrs={"description": "undeclared fields of the record, as JSON"}))
    return columns


def _stream_attrs(schema: Schema) -> dict[str, Any]:
    return {"schema": schema.name, "kind": schema.kind}


def stage(writers: StreamWriters, tag: str, columns: dict[str, Any]) -> arrays.Staged:
    """``columns`` for :func:`write`, encoded now if ``tag``'s writer can (see :meth:`arrays.StreamWriter.stage`)."""
    return writers.get(tag).stage(columns, fill_missing=True)


def write(tx: arrays.Transaction, writers: StreamWriters, tag: str, schema: Schema,
          columns: dict[str, Any] | list[dict[str, Any]] | arrays.Staged) -> None:
    """Append ``columns`` (or what :func:`stage` made of them) to ``tag``'s stream through its kept writer.

    The stream is created (or given the schema's new columns) first; columns
    of the stream the batch lacks (fields dropped from the schema) get their
    fill value.
    """
    writer = writers.get(tag)
    try:
        have = set(writer.columns(tx))
    except StreamNotFoundError:
        arrays.create_stream(tx, tag, schema_columns(schema), attrs=_stream_attrs(schema),
                             chunk_rows=schema.chunk_rows)
    else:
        new = [column for column in schema_columns(schema) if column.name not in have]
        if new:
            stream = arrays.open_stream(tx, tag)
            for column in new:
                stream.add_column(column)  # the writer sees its group change and reloads
    writer.append(tx, columns, fill_missing=True)


def quarantine(tx: arrays.Transaction, writers: StreamWriters, tag: str, rejected: Sequence[Rejected]) -> None:
    """Append ``rejected`` to ``tag``'s quarantine stream (created on first use) through its kept writer."""
    columns = {
        "time": np.array([r.time for r in rejected], dtype=np.int64),
        "reason": [r.reason for r in rejected],
        "raw": [r.raw for r in rejected],
        "source": [r.source for r in rejected],
    }
    writer = writers.get(tag, quarantine=True)
    try:
        writer.append(tx, columns)
    except StreamNotFoundError:
        arrays.create_stream(tx, tag, QUARANTINE_COLUMNS, attrs={"kind": "quarantine"},
                             chunk_rows=QUARANTINE_CHUNK_ROWS, quarantine=True)
        writer.append(tx, columns)
