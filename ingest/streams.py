"""Where validated columns go: a tag's stream and its quarantine stream, inside one transaction.

A stream is created from its schema the first time its tag is seen; a
field added to the schema later becomes a new column, back-filled. The
quarantine stream of a tag keeps each rejected record's time, the reason,
the bytes it arrived as and the connector it came from.
"""

from __future__ import annotations

import collections
import functools
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from windvane import arrays, neostore
from windvane.arrays import Column, StreamNotFoundError, column_key
from windvane.arrays.stream import MISSING_ATTR, NAME_ATTR, TIME

from .columns import Rejected, vibration_of
from .schema import Field, Schema

#: Text and bytes columns of ingested streams: zstd at level 1. A stream's
#: partial last chunk is recompressed at every commit, and level 1 makes that
#: cheaper than zstd's default (3) on log records, at about the same size.
TEXT_CODEC = {"name": "zstd", "level": 1}

QUARANTINE_COLUMNS = (
    Column("reason", "str", codec=TEXT_CODEC),
    Column("raw", "bytes", codec=TEXT_CODEC),
    Column("source", "str", codec=TEXT_CODEC),
)
QUARANTINE_CHUNK_ROWS = 4096
#: Stream writers kept by a committer, at most, and the bytes of pending rows they
#: may hold between them. A writer holds its stream's metadata and the rows of
#: its partial last chunk (up to ``chunk_rows`` rows per column); past
#: ``WRITERS_BYTES`` the least recently used let their rows go (the streams' row
#: logs keep them: one read when the chunk fills), so a plant's thousands of slow
#: streams keep their writers. Past ``WRITERS_LIMIT`` writers the least recently
#: used is let go: its stream is read afresh on its next append.
WRITERS_LIMIT = 65536
WRITERS_BYTES = 64 << 20


class StreamWriters:
    """One :class:`arrays.StreamWriter` per stream (and per quarantine stream), kept across commits.

    Sharing one :class:`arrays.ChangeLog` spares each writer a query when
    many tags take turns. At most ``limit`` writers are kept; :meth:`trim`,
    called between commits, holds their rows to ``max_bytes``. Not
    thread-safe: the committer thread alone uses it.
    """

    def __init__(self, store: neostore.Store, limit: int = WRITERS_LIMIT, max_bytes: int = WRITERS_BYTES):
        self.store = store
        self.limit = limit
        self.max_bytes = max_bytes
        self.changes = arrays.ChangeLog(store)
        self._writers: collections.OrderedDict[tuple[str, bool], arrays.StreamWriter] = collections.OrderedDict()
        self._trimmed = 0.0  # when the rows held were last looked at (perf_counter) ...
        self._untrimmed = 0  # ... and the bytes appended since (see trim_if_due)

    def __len__(self) -> int:
        return len(self._writers)

    def get(self, tag: str, *, quarantine: bool = False) -> arrays.StreamWriter:
        key = (tag, quarantine)
        writer = self._writers.get(key)
        if writer is None:
            writer = arrays.StreamWriter(self.store, tag, quarantine=quarantine, changes=self.changes)
            self._writers[key] = writer
            if len(self._writers) > self.limit:
                self._writers.popitem(last=False)
        else:
            self._writers.move_to_end(key)
        return writer

    def held_bytes(self) -> int:
        """Bytes of rows the writers hold between them."""
        return sum(w.held_bytes for w in self._writers.values())

    def trim_if_due(self, appended: int) -> int:
        """:meth:`trim`, if it is due now that ``appended`` more bytes are about to be appended; the bytes freed.

        A look costs a few µs per writer: it comes after a while (a second,
        longer with thousands of writers, whose rows grow slowly: each holds
        a chunk at most), or sooner once the bytes appended since the last
        reach half of ``max_bytes`` (big events must not pile up between looks).
        """
        self._untrimmed += appended
        now = time.perf_counter()
        if now - self._trimmed < max(1.0, len(self._writers) / 2000) and self._untrimmed < self.max_bytes // 2:
            return 0
        self._trimmed, self._untrimmed = now, 0
        return self.trim()

    def trim(self, target: int | None = None) -> int:
        """Past ``max_bytes`` of rows held, bring them to half of it (or to ``target`` bytes, whatever they
        are): the least recently used writers shed their rows or, when their stream keeps no row log, are
        let go. Returns the bytes freed."""
        held = self.held_bytes()
        if target is None:
            if held <= self.max_bytes:
                return 0
            target = self.max_bytes // 2
        freed = 0
        for key, writer in list(self._writers.items()):
            if held - freed <= target:
                break
            shed = writer.shed()
            if not shed and writer.held_bytes and len(self._writers) > 1:
                shed = writer.held_bytes
                del self._writers[key]
            freed += shed
        return freed


#: A schema's ``codec = "lz4"``: blosc with lz4 after the byte shuffle. On vibration
#: blocks (noisy float32, 3 channels) it stores about as small as blosc's default
#: (zstd level 3) and encodes several times faster, which is what a stream of
#: acknowledged blocks needs.
LZ4_CODEC = {"name": "blosc", "cname": "lz4", "clevel": 5}


def number_codec(schema: Schema) -> str | dict[str, Any] | None:
    """The arrays codec of ``schema``'s number columns: its ``codec``, or lz4 for vibration by default."""
    codec = schema.codec if schema.codec is not None else schema.kind.default_codec
    return LZ4_CODEC if codec == "lz4" else codec


def schema_columns(schema: Schema) -> list[Column]:
    """The columns (beside ``time``) of a stream that follows ``schema``."""
    if schema.holds_blocks:
        v = vibration_of(schema)
        attrs: dict[str, Any] = {"unit": v.unit} if v.unit else {}
        if v.sample_rate is not None:
            attrs["sample_rate"] = v.sample_rate
        return [
            Column(
                "samples",
                v.dtype,
                inner=(v.channels,),
                codec=number_codec(schema),
                attrs=attrs,
                dims=("time", "channel"),
            )
        ]
    columns = [
        # A schema's codec is for numbers; blosc's shuffle has nothing to do on text.
        Column(
            column_key(f.name),
            f.dtype,
            codec=TEXT_CODEC if f.dtype in ("str", "bytes") else number_codec(schema),
            attrs=_field_attrs(f),
        )
        for f in schema.fields
    ]
    if schema.extra == "keep":
        columns.append(
            Column("extra", "str", codec=TEXT_CODEC, attrs={"description": "undeclared fields of the record, as JSON"})
        )
    return columns


def _field_attrs(f: Field) -> dict[str, Any]:
    """The attributes of a field's column: unit, description, its name if its key is escaped, and the value an
    integer or bool column stores for a missing one (:data:`MISSING_ATTR`)."""
    attrs: dict[str, Any] = {k: v for k, v in (("unit", f.unit), ("description", f.description)) if v}
    if column_key(f.name) != f.name:
        attrs[NAME_ATTR] = f.name
    if (f.is_int or f.dtype == "bool") and f.fill is not None:
        attrs[MISSING_ATTR] = f.fill
    return attrs


@functools.lru_cache(maxsize=4096)
def _key_of(name: str) -> str:
    return column_key(name) if name != TIME else name


def keyed(columns: Any) -> Any:
    """``columns`` (a mapping of field name to values, or a list of them) by column key (:func:`arrays.column_key`)."""
    if isinstance(columns, (list, tuple)):
        return [keyed(c) for c in columns]
    if not isinstance(columns, Mapping) or all(_key_of(name) == name for name in columns):
        return columns
    return {_key_of(name): values for name, values in columns.items()}


@functools.lru_cache(maxsize=1024)
def _column_names(schema: Schema) -> frozenset[str]:
    """The names of :func:`schema_columns` (asked at every append: schemas are few, appends many)."""
    return frozenset(c.name for c in schema_columns(schema))


def _stream_attrs(schema: Schema) -> dict[str, Any]:
    return {"schema": schema.name, "kind": schema.kind.value}


def stage(writers: StreamWriters, tag: str, columns: dict[str, Any] | list[dict[str, Any]]) -> arrays.Staged:
    """``columns`` for :func:`write`, encoded now if ``tag``'s writer can (see :meth:`arrays.StreamWriter.stage`)."""
    return writers.get(tag).stage(keyed(columns), fill_missing=True)


def ready_unknown(tx: arrays.Transaction, writers: StreamWriters, schemas: Mapping[str, Schema]) -> None:
    """Ready together the streams of ``schemas`` (tag -> schema) whose writers know nothing yet: a plant's
    first minute makes thousands of new streams in a commit, a restart finds thousands unread.

    Their names are bound and their documents read in a round trip or two,
    and the missing streams are created together, so that each writer then
    loads from memory. One at a time, each stream would cost a few round
    trips and, on MariaDB, a database commit to bind its names.
    """
    unknown: dict[Schema, list[str]] = {}
    for tag, schema in schemas.items():
        if writers.get(tag).held_columns is None:
            unknown.setdefault(schema, []).append(tag)
    if sum(map(len, unknown.values())) <= 8:  # a stream or two: readying them as they are written costs the same
        return
    columns = {schema: schema_columns(schema) for schema in unknown}
    keys = [key for schema, tags in unknown.items() for key in arrays.stream_keys(tags, columns[schema])]
    tx.bind(keys)
    tx.read_ahead(keys)
    for schema, tags in unknown.items():
        arrays.create_streams(
            tx, tags, columns[schema], attrs=_stream_attrs(schema), chunk_rows=schema.chunk_rows, exist_ok=True
        )


def write(
    tx: arrays.Transaction,
    writers: StreamWriters,
    tag: str,
    schema: Schema,
    columns: dict[str, Any] | list[dict[str, Any]] | arrays.Staged,
) -> None:
    """Append ``columns`` (or what :func:`stage` made of them) to ``tag``'s stream through its kept writer.

    The stream is created (or given the schema's new columns) first; columns
    of the stream the batch lacks (fields dropped from the schema) get their
    fill value.
    """
    writer = writers.get(tag)
    held = writer.held_columns  # has every column of the schema already: no look at the store needed
    if held is None or not _column_names(schema) <= held:
        try:
            have = set(writer.columns(tx))
        except StreamNotFoundError:
            _create(tx, tag, schema)
        else:
            stream = None
            for column in schema_columns(schema):
                if column.name not in have:
                    if stream is None:
                        stream = arrays.open_stream(tx, tag)
                    stream.add_column(column)  # the writer sees its group change and reloads
    columns = keyed(columns)
    try:
        writer.append(tx, columns, fill_missing=True)
    except StreamNotFoundError:  # removed or renamed since the writer last wrote (windvane streams rm / mv)
        _create(tx, tag, schema)
        writer.append(tx, columns, fill_missing=True)


def _create(tx: arrays.Transaction, tag: str, schema: Schema) -> None:
    arrays.create_stream(tx, tag, schema_columns(schema), attrs=_stream_attrs(schema), chunk_rows=schema.chunk_rows)


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
        arrays.create_stream(
            tx, tag, QUARANTINE_COLUMNS, attrs={"kind": "quarantine"}, chunk_rows=QUARANTINE_CHUNK_ROWS, quarantine=True
        )
        writer.append(tx, columns)
