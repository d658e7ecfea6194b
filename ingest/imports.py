"""File imports: decoded parts of a file committed with the position reached, so an interrupted import resumes exactly.

A reader (``connectors/files``: CSV, Parquet, Arrow IPC, WAV, log formats)
turns a file into :class:`Part` objects, each the rows of one piece of the
file and the position just after it. This module checks them against the
stream's schema and commits them, in the SAME transaction as a small
position record, ``_windvane/ingest/imports/<tag>/<source id>`` (msgpack:
``position``, ``identity``, ``updated``, ``rows``, ``rejected``). So what
is stored and the position that says so are committed together or not at
all: after a kill -9 the next run reads the position and asks the reader
for what follows it; no row is stored twice or skipped.

- :func:`commit_parts` / :func:`commit_part`: one transaction of rows,
  quarantined rows (with their reasons) and the position. The position is
  any msgpack-able value (the importer's: an int, a byte offset or row
  index; ``windvane tail``'s: a dict of inode, offset, fingerprint).
- :func:`read_position`: the position record of a source, or None.
- :func:`import_source`: the driver. Reads the stored position, checks the
  file is the one it was taken from (:func:`fingerprint`), resumes, reads
  parts in a thread one step ahead of the commits, and commits at least
  :attr:`.config.ImportConfig.commit_bytes` of the file per transaction.

A source is known by its path (its position record) and by its content:
``_windvane/ingest/imports/<tag>/content/<blake3 of the whole file>``
(msgpack: ``source``, ``name``, ``done``) is committed with each of its
commits, ``done`` with the last. The same bytes under another path are then
not imported again (:attr:`ImportResult.duplicate_of`), or, if their import
was interrupted, resume where it stopped.

Schemas (:func:`resolve_schema`): an explicit schema wins; else the
existing stream's columns define it (:func:`stream_schema`); else the
whole file's types do, as its reader finds them, or the first part's
(:func:`infer_schema`); every inferred field is optional, a missing integer
or bool stored as its fill (:func:`missing_fill`). Each column is cast to its
field's dtype value by value: numbers to any number type when the value
fits exactly (an int64 into float64, 3.0 into an int32; 3.5 into an int
does not, nor 300 into an int8), text parsed as the field's type ("abc" is
no float64), floats to narrower floats rounded. Rows with a value that does
not fit, or without a required value, go verbatim to the tag's quarantine
stream with a reason naming the column and the value; the other rows are
stored. A column whose type cannot become the field's at all (numbers for
a ``str`` field, text for ``bool``, nested lists) is a :class:`SchemaMismatch`,
as is an explicit schema that contradicts the existing stream's columns:
nothing is imported, rather than silently cast.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import blake3
import msgpack
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from windvane import arrays, neostore
from windvane.arrays.stream import MISSING_ATTR

from . import checkpoints, streams
from .columns import Rejected, non_finite_reason, vibration_of
from .config import ImportConfig
from .errors import IngestError
from .parts import Part, failing_rows, row_bytes
from .schema import KINDS, NUMERIC_DTYPES, VIBRATION_DTYPES, Field, Kind, Schema, Vibration

PREFIX = "_windvane/ingest/imports/"
#: Bytes of a file's start whose hash identifies it (with its size) for resuming.
HEAD_BYTES = 64 << 10
#: Parts a reader thread may hold ready ahead of the commits (bounds memory).
READ_AHEAD = 2
TIME = "time"
#: What the quarantine stream names as the source of rejected rows.
SOURCE = "import"
#: Why a row without a time is quarantined.
NO_TIME = "the row has no time"


class SchemaMismatch(IngestError):
    """A file's column cannot be stored in its stream's column (or a schema contradicts the stream)."""


class SourceChanged(IngestError):
    """A file partly imported before is not the same file now; resuming would mix two files."""


#: A reader: ``reader(start)`` yields the parts of a source from position ``start`` (None: its beginning).
Reader = Callable[[Any], Iterator[Part]]


# -- positions -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Position:
    """Where the import of one source stands, as committed with its rows."""

    value: Any  # the reader's position: where to resume
    identity: Any  # what identifies the source's content (:func:`fingerprint` for files)
    updated: float  # Unix time of the commit
    rows: int = 0  # rows stored from this source, over all runs
    rejected: int = 0  # rows quarantined from this source, over all runs


def position_key(tag: str, source_id: str) -> str:
    """The key of a source's position record."""
    return f"{PREFIX}{tag}/{source_id}"


def _decode_position(raw: bytes | None) -> Position | None:
    if raw is None:
        return None
    doc = msgpack.unpackb(raw, raw=False)
    return Position(
        doc["position"], doc.get("identity"), doc.get("updated", 0.0), doc.get("rows", 0), doc.get("rejected", 0)
    )


def read_position(store: neostore.Store | arrays.Transaction, tag: str, source_id: str) -> Position | None:
    """The committed position of ``source_id`` for ``tag`` (in ``store``, or as transaction ``store`` sees it)."""
    key = position_key(tag, source_id)
    if isinstance(store, arrays.Transaction):
        return _decode_position(store.get(key))
    return _decode_position(arrays.Snapshot(store).get(key))


def content_key(tag: str, content: str) -> str:
    """The key of the record of which source of ``tag`` has content ``content`` (a :func:`content_hash`)."""
    return f"{PREFIX}{tag}/content/{content}"


@dataclass(frozen=True)
class SeenContent:
    """A source of the same content imported before."""

    source_id: str
    name: str  # its path, for messages
    done: bool  # imported to its end


def read_content(store: neostore.Store, tag: str, content: str) -> SeenContent | None:
    """The source of ``tag`` whose content was ``content`` when it was imported, or None."""
    raw = arrays.Snapshot(store).get(content_key(tag, content))
    if raw is None:
        return None
    doc = msgpack.unpackb(raw, raw=False)
    return SeenContent(doc["source"], doc.get("name", ""), bool(doc.get("done")))


def _content_record(source_id: str, name: str, done: bool) -> bytes:
    packed: bytes = msgpack.packb({"source": source_id, "name": name, "done": done}, use_bin_type=True)
    return packed


def content_hash(path: str | Path) -> str:
    """The blake3 of the whole file, read through a memory map by several threads (never all in memory)."""
    digest = blake3.blake3(max_threads=blake3.blake3.AUTO)
    digest.update_mmap(os.fspath(path))
    return digest.hexdigest()


def source_id_for(path: str | Path) -> str:
    """The source id of a file: the hash of its absolute path (moving the file makes it a new source)."""
    return blake3.blake3(os.path.abspath(path).encode()).hexdigest()[:32]


def fingerprint(path: str | Path, head_bytes: int = HEAD_BYTES) -> dict[str, Any]:
    """A file's identity: its size and the blake3 of its first ``head_bytes`` bytes."""
    with open(path, "rb") as f:
        head = f.read(head_bytes)
        size = os.fstat(f.fileno()).st_size
    return {"size": size, "head_bytes": len(head), "head": blake3.blake3(head).hexdigest()}


def same_file(stored: Any, path: str | Path) -> bool:
    """Whether ``path`` still starts as the file ``stored`` (a :func:`fingerprint`) was taken of, and is no shorter.

    A file that grew (rows appended) is the same file: resuming imports the new rows.
    """
    if not isinstance(stored, dict) or "head" not in stored:
        return False
    now = fingerprint(path, int(stored.get("head_bytes", HEAD_BYTES)))
    return bool(now["head"] == stored["head"] and now["size"] >= int(stored.get("size", 0)))


# -- schemas ---------------------------------------------------------------------------------------


_ARROW_DTYPES = {
    "bool": pa.bool_(),
    "int8": pa.int8(),
    "int16": pa.int16(),
    "int32": pa.int32(),
    "int64": pa.int64(),
    "uint8": pa.uint8(),
    "uint16": pa.uint16(),
    "uint32": pa.uint32(),
    "uint64": pa.uint64(),
    "float32": pa.float32(),
    "float64": pa.float64(),
    "str": pa.string(),
    "bytes": pa.binary(),
}


def arrow_types(schema: Schema) -> dict[str, pa.DataType]:
    """The arrow type of each field of ``schema``: what a text reader (CSV) should parse each column as."""
    return {f.name: _ARROW_DTYPES[f.dtype] for f in schema.fields}


def _field_dtype(name: str, type_: pa.DataType) -> str:
    """The schema dtype inferred for a column of arrow type ``type_``."""
    if pa.types.is_dictionary(type_):
        type_ = type_.value_type
    if pa.types.is_string(type_) or pa.types.is_large_string(type_) or pa.types.is_string_view(type_):
        return "str"
    if pa.types.is_binary(type_) or pa.types.is_large_binary(type_) or pa.types.is_fixed_size_binary(type_):
        return "bytes"
    if pa.types.is_timestamp(type_):
        return "int64"  # ns since the epoch, as the time column
    if pa.types.is_float16(type_):
        return "float32"
    dtype = (
        str(type_.to_pandas_dtype().__name__)
        if (pa.types.is_integer(type_) or pa.types.is_floating(type_) or pa.types.is_boolean(type_))
        else ""
    )
    if dtype in NUMERIC_DTYPES:
        return dtype
    raise SchemaMismatch(
        f"column {name!r} has type {type_}, which a stream column cannot hold; "
        "convert it (to numbers or text) or pass --schema"
    )


def missing_fill(dtype: str) -> Any:
    """What an inferred field of ``dtype`` stores for a missing value: the smallest signed integer (the largest
    unsigned), False for bool, None for the others (floats store NaN, text "")."""
    if dtype == "bool":
        return False
    if dtype.startswith("int"):
        return int(np.iinfo(dtype).min)
    if dtype.startswith("uint"):
        return int(np.iinfo(dtype).max)
    return None


def infer_schema(tag: str, part: Part, types: Mapping[str, pa.DataType] | None = None) -> Schema:
    """The schema a stream gets from its first part when none is given.

    A vibration part (``samples``): kind ``vibration`` with its channels,
    dtype and sample rate. A table: one field per column beside ``time``,
    in order, typed as ``types`` says (a reader's types for the whole
    file), else as the part's column (timestamps: int64 ns); kind ``log``
    if any column is text, else ``sensor``. Every field is optional: a
    missing value is stored as :func:`missing_fill` (floats NaN, text "").
    ``extra = "reject"``: a later part with other columns has its rows
    quarantined rather than a column silently dropped.
    """
    if part.samples is not None:
        samples = np.asarray(part.samples)
        dtype = samples.dtype.name
        if samples.ndim != 2 or dtype not in VIBRATION_DTYPES:
            raise SchemaMismatch(
                f"samples of shape {samples.shape} and dtype {dtype} cannot be a vibration stream "
                f"(2-D, one of {', '.join(VIBRATION_DTYPES)})"
            )
        return Schema(
            tag, Kind.VIBRATION, (tag,), extra="reject", vibration=Vibration(samples.shape[1], dtype, part.sample_rate)
        )
    fields = []
    keys: dict[str, str] = {}
    for column in part.table.schema:
        if column.name == TIME:
            continue
        type_ = (types or {}).get(column.name, column.type)
        dtype = _field_dtype(column.name, type_ if not pa.types.is_null(type_) else pa.float64())
        try:
            key = arrays.column_key(column.name)
        except arrays.ColumnError as exc:
            raise SchemaMismatch(f"{exc}; name the column otherwise with --rename OLD=NEW") from None
        if key in keys:
            raise SchemaMismatch(
                f"columns {keys[key]!r} and {column.name!r} would both be stored as {key!r} "
                "(see the import section of the README); rename one with --rename OLD=NEW"
            )
        keys[key] = column.name
        fields.append(Field(column.name, dtype, fill=missing_fill(dtype)))
    return Schema(tag, Kind.of_table(any(f.dtype == "str" for f in fields)), (tag,), tuple(fields), extra="reject")


def _stored_dtype(dtype: np.dtype) -> str:
    if dtype.kind == "T":
        return "str"
    if dtype == np.dtype(object):
        return "bytes"
    return dtype.name


def stream_schema(store: neostore.Store, tag: str) -> Schema | None:
    """The schema an existing stream's columns imply (as :func:`infer_schema` would have made it), or None."""
    try:
        stream = arrays.open_stream(store, tag, cache_bytes=0)
    except arrays.StreamNotFoundError:
        return None
    attrs = stream.attrs
    name = attrs.get("schema", tag)
    chunk_rows = stream["time"].chunks[0]
    if attrs.get("kind") == Kind.VIBRATION or (stream.columns == ["samples"] and stream["samples"].ndim == 2):
        samples = stream["samples"]
        rate = samples.attrs.get("sample_rate")
        vibration = Vibration(
            samples.shape[1], samples.dtype.name, None if rate is None else float(rate), samples.attrs.get("unit", "")
        )
        return Schema(name, Kind.VIBRATION, (tag,), extra="reject", chunk_rows=chunk_rows, vibration=vibration)
    fields = []
    for column in stream.columns:
        if column == "extra":
            continue
        dtype = _stored_dtype(stream[column].dtype)
        fill = stream[column].attrs.get(MISSING_ATTR)
        # An integer or bool column that names no value for missing ones cannot store a missing one: required.
        required = fill is None and dtype not in ("str", "bytes") and not dtype.startswith("float")
        fields.append(Field(stream.name_of(column), dtype, required=required, fill=fill))
    extra = "keep" if "extra" in stream.columns else "reject"
    stored = attrs.get("kind", Kind.SENSOR)  # a table stream's kind (one of another name reads as a sensor's)
    kind = Kind(stored) if stored in KINDS else Kind.SENSOR
    return Schema(name, kind, (tag,), tuple(fields), extra=extra, chunk_rows=chunk_rows)


def check_against_stream(schema: Schema, existing: Schema) -> None:
    """SchemaMismatch if ``schema`` gives a column of the existing stream another type (or kind)."""
    if schema.holds_blocks != existing.holds_blocks:
        raise SchemaMismatch(
            f"schema {schema.name!r} is kind {schema.kind} but stream {existing.tags[0]!r} is a {existing.kind} stream"
        )
    if schema.holds_blocks:
        a, b = vibration_of(schema), vibration_of(existing)
        if (a.channels, a.dtype) != (b.channels, b.dtype):
            raise SchemaMismatch(
                f"stream {existing.tags[0]!r} holds {b.channels} channels of {b.dtype}; "
                f"this import has {a.channels} of {a.dtype}"
            )
        if a.sample_rate is not None and b.sample_rate is not None and a.sample_rate != b.sample_rate:
            raise SchemaMismatch(
                f"stream {existing.tags[0]!r} is sampled at {b.sample_rate:g} Hz; this import at {a.sample_rate:g} Hz"
            )
        return
    clashes = [
        f"{f.name} ({there.dtype} in the stream, {f.dtype} here)"
        for f in schema.fields
        if (there := existing.field(f.name)) and there.dtype != f.dtype
    ]
    if clashes:
        raise SchemaMismatch(
            f"stream {existing.tags[0]!r} has other types for column(s) {', '.join(clashes)}; "
            "import into another --tag or fix the schema"
        )


def resolve_schema(store: neostore.Store, tag: str, schema: Schema | None) -> Schema | None:
    """The schema to import ``tag`` with: ``schema`` (checked against the stream), else the stream's, else None.

    None means: infer it from the first part (:func:`infer_schema`).
    """
    existing = stream_schema(store, tag)
    if schema is not None and existing is not None:
        check_against_stream(schema, existing)
    return schema if schema is not None else existing


# -- casting a part to its schema ---------------------------------------------------------------------


def _describe(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _numeric_cast(target: pa.DataType) -> Callable[[pa.Array], pa.Array]:
    """A cast to ``target`` that refuses what would change a value (floats to floats may round)."""

    def cast(values: pa.Array) -> pa.Array:
        if pa.types.is_floating(target) and (pa.types.is_floating(values.type) or pa.types.is_integer(values.type)):
            # Rounding to the field's float precision is what a float32 field asks for.
            return pc.cast(values, target, safe=False)
        return pc.cast(values, target, safe=True)

    return cast


def _column(f: Field, values: pa.ChunkedArray) -> tuple[pa.Array, np.ndarray, str]:
    """``values`` cast to ``f``'s type, the indices of rows that cannot be, and what they are not."""
    values = values.combine_chunks() if values.num_chunks != 1 else values.chunk(0)
    if pa.types.is_dictionary(values.type):
        values = values.dictionary_decode()
    target = _ARROW_DTYPES[f.dtype]
    source = values.type
    text = pa.types.is_string(source) or pa.types.is_large_string(source) or pa.types.is_string_view(source)
    if pa.types.is_timestamp(source) and f.dtype == "int64":
        values, source = pc.cast(values, pa.timestamp("ns", tz=source.tz)).view(pa.int64()), pa.int64()
    if f.dtype == "str":
        if not text:
            raise SchemaMismatch(f"column {f.name!r} is {source} in the file but {f.name!r} is a str field")
        cast: Callable[[pa.Array], pa.Array] = lambda v: pc.cast(v, target)  # noqa: E731
    elif f.dtype == "bytes":
        if not (
            text
            or pa.types.is_binary(source)
            or pa.types.is_large_binary(source)
            or pa.types.is_fixed_size_binary(source)
        ):
            raise SchemaMismatch(f"column {f.name!r} is {source} in the file but {f.name!r} is a bytes field")
        cast = lambda v: pc.cast(v, target)  # noqa: E731
    elif f.dtype == "bool":
        if not (pa.types.is_boolean(source) or text):
            raise SchemaMismatch(f"column {f.name!r} is {source} in the file but {f.name!r} is a bool field")
        cast = lambda v: pc.cast(v, target)  # noqa: E731
    else:
        if not (pa.types.is_integer(source) or pa.types.is_floating(source) or text or pa.types.is_null(source)):
            raise SchemaMismatch(f"column {f.name!r} is {source} in the file but {f.name!r} is a {f.dtype} field")
        cast = _numeric_cast(target)
    try:
        return cast(values), np.empty(0, dtype=np.int64), ""
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OverflowError):
        bad = failing_rows(values, cast)
    keep = np.ones(len(values), dtype=bool)
    keep[bad] = False
    return cast(values.filter(pa.array(keep))), bad, f"is not a {f.dtype}"


def _numpy_column(f: Field, values: pa.Array) -> np.ndarray | arrays.VLenRows:
    """A cast column (nulls already refused or allowed) as what a stream append takes, nulls filled.

    Text and bytes become :class:`arrays.VLenRows`: the records their chunks hold, made from the
    Arrow buffers in one pass, without a Python object per value."""
    if values.null_count:
        fill = f.fill if f.fill is not None else {"str": "", "bytes": b""}.get(f.dtype)
        if fill is None and f.is_float:
            fill = float("nan")
        values = pc.fill_null(values, pa.scalar(fill, type=values.type))
    if f.dtype in ("str", "bytes"):
        return arrays.VLenRows.from_arrow(values)
    numbers: np.ndarray = values.to_numpy(zero_copy_only=False)
    return numbers


def _time_ns(table: pa.Table) -> np.ndarray:
    """The part's ``time`` column as int64 ns (nulls as -1, rejected before)."""
    time = table.column(TIME)
    if pa.types.is_timestamp(time.type):
        time = pc.cast(time, pa.timestamp("ns", tz=time.type.tz)).cast(pa.int64())
    else:
        time = pc.cast(time, pa.int64())
    ns: np.ndarray = time.fill_null(-1).to_numpy()
    return ns


def part_columns(schema: Schema, part: Part, source: str = SOURCE) -> tuple[dict[str, Any] | None, list[Rejected]]:
    """``part`` as the columns :func:`ingest.streams.write` takes, and the rows it rejects (reader's included).

    Raises :class:`SchemaMismatch` for a column that cannot be the field's
    type at all, or a vibration block of other channels, dtype or rate.
    """
    rejected = [Rejected(int(t), reason, bytes(raw), source) for t, raw, reason in part.rejected]
    table = part.table
    if TIME not in table.column_names:
        raise SchemaMismatch(f"a part has no {TIME!r} column; it has {table.column_names}")
    time = _time_ns(table)
    if schema.holds_blocks:
        return _vibration_columns(schema, part, time), rejected
    if part.samples is not None:
        raise SchemaMismatch(f"a block of samples cannot go into the {schema.kind} stream of schema {schema.name!r}")
    n = table.num_rows
    reasons: dict[int, str] = {}
    raw = part.raw or (lambda i: row_bytes(table, i))
    missing_time = np.flatnonzero(table.column(TIME).is_null().to_numpy(zero_copy_only=False))
    for at in missing_time:
        reasons[int(at)] = NO_TIME
    cast, kept = _cast_fields(schema, table, reasons)
    undeclared = [c for c in table.column_names if c != TIME and schema.field(c) is None]
    if undeclared and schema.extra == "reject":
        declared = ", ".join(f.name for f in schema.fields) or "none"
        why = f"undeclared field(s) {', '.join(undeclared)} (schema {schema.name} declares: {declared})"
        for i in range(n):
            reasons.setdefault(i, why)
    extras = _extra_json(table, undeclared, reasons) if schema.extra == "keep" else None
    rejected += [
        Rejected(int(time[i]) if time[i] != -1 else 0, reasons[i], bytes(raw(i)), source) for i in sorted(reasons)
    ]
    if len(reasons) == n:
        return None, rejected
    good = np.delete(np.arange(n), np.fromiter(reasons, dtype=np.int64, count=len(reasons)))
    columns: dict[str, Any] = {TIME: time if not reasons else time[good]}
    for f in schema.fields:
        columns[f.name] = _good_values(f, cast, kept, good, bool(reasons))
    if extras is not None:
        columns["extra"] = extras[good] if reasons else extras
    return columns, rejected


def _cast_fields(
    schema: Schema, table: pa.Table, reasons: dict[int, str]
) -> tuple[dict[str, pa.Array], dict[str, np.ndarray]]:
    """Each of ``schema``'s fields in ``table`` cast to its type, the rows that cannot be added to
    ``reasons`` (row -> why); and, per field that lost rows, the row indices its cast array holds."""
    n = table.num_rows
    cast: dict[str, pa.Array] = {}
    kept: dict[str, np.ndarray] = {}  # field -> row indices its cast array holds (absent: all)
    for f in schema.fields:
        if f.name not in table.column_names:
            if f.required:
                why = f"required field {f.name!r} is missing (the file has no column {f.name!r})"
                for i in range(n):
                    reasons.setdefault(i, why)
            continue
        column = table.column(f.name)
        values, bad, what = _column(f, column)
        original = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
        for i in bad:
            reasons.setdefault(int(i), f"field {f.name!r}: {_describe(original[int(i)].as_py())} {what}")
        holds = np.delete(np.arange(n), bad) if len(bad) else None  # the rows ``values`` holds
        if f.required and values.null_count:
            for j in np.flatnonzero(values.is_null().to_numpy(zero_copy_only=False)):
                reasons.setdefault(int(j if holds is None else holds[j]), f"required field {f.name!r} is missing")
        cast[f.name] = values
        if holds is not None:
            kept[f.name] = holds
    return cast, kept


def _good_values(
    f: Field, cast: dict[str, pa.Array], kept: dict[str, np.ndarray], good: np.ndarray, some_rejected: bool
) -> np.ndarray | arrays.VLenRows:
    """Field ``f``'s column of the ``good`` rows (all missing if the part has no such column)."""
    if f.name not in cast:
        return _numpy_column(f, pa.nulls(len(good), _ARROW_DTYPES[f.dtype]))
    values = cast[f.name]
    # Positions in ``values`` of the good rows (it lacks this field's own bad rows).
    if some_rejected:
        at = good if f.name not in kept else np.searchsorted(kept[f.name], good)
        values = values.take(pa.array(at))
    return _numpy_column(f, values)


def _extra_json(table: pa.Table, names: list[str], reasons: dict[int, str]) -> np.ndarray:
    """The columns ``names`` of each row as JSON text; a row holding NaN or an infinity, which JSON has no
    text for, gets its reason in ``reasons`` (row -> why)."""
    import json

    if not names:
        return np.full(table.num_rows, "", dtype=np.dtypes.StringDType())
    texts = []
    for i, row in enumerate(table.select(names).to_pylist()):
        fields = {k: v for k, v in row.items() if v is not None}
        try:
            texts.append(json.dumps(fields, ensure_ascii=False, default=str, separators=(",", ":"), allow_nan=False))
        except ValueError:
            reasons.setdefault(i, non_finite_reason(fields))
            texts.append("")
    return np.array(texts, dtype=np.dtypes.StringDType())


def _vibration_columns(schema: Schema, part: Part, time: np.ndarray) -> dict[str, Any]:
    v = vibration_of(schema)
    samples = np.asarray(part.samples)
    if samples.ndim != 2 or samples.shape[1] != v.channels:
        raise SchemaMismatch(
            f"the file has {samples.shape[1] if samples.ndim == 2 else samples.shape} channels; "
            f"stream schema {schema.name!r} holds {v.channels}"
        )
    if not np.can_cast(samples.dtype, v.dtype, "safe"):
        raise SchemaMismatch(f"samples of {samples.dtype} do not fit the stream's {v.dtype} exactly")
    if v.sample_rate is not None and part.sample_rate is not None and part.sample_rate != v.sample_rate:
        raise SchemaMismatch(
            f"the file is sampled at {part.sample_rate:g} Hz; stream schema {schema.name!r} at {v.sample_rate:g} Hz"
        )
    if len(samples) != len(time):
        raise SchemaMismatch(f"a part has {len(time)} times for {len(samples)} samples")
    return {TIME: time, "samples": samples.astype(v.dtype, copy=False)}


# -- committing -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Committed:
    """What one commit of parts stored."""

    rows: int
    rejected: int
    tid: bytes | None
    reasons: tuple[str, ...] = ()  # distinct rejection reasons (the first few)


def write_parts(
    tx: arrays.Transaction,
    writers: streams.StreamWriters,
    tag: str,
    schema: Schema,
    parts: Sequence[Part],
    source_id: str,
    position: Any,
    identity: Any = None,
    *,
    source: str = SOURCE,
    records: Mapping[str, bytes] | None = None,
) -> Committed:
    """Write ``parts`` (checked, see :func:`part_columns`), the position record and ``records`` into ``tx``.

    Does not commit. ``records``: other small records (key: value) that
    belong to the same commit.
    """
    columns, rejected = [], []
    for part in parts:
        got, bad = part_columns(schema, part, source)
        if got is not None and len(got[TIME]):
            columns.append(got)
        rejected += bad
    rows = sum(len(c[TIME]) for c in columns)
    if columns:
        streams.write(tx, writers, tag, schema, columns if len(columns) > 1 else columns[0])
    if rejected:
        streams.quarantine(tx, writers, tag, rejected)
    before = read_position(tx, tag, source_id)
    total_rows = rows + (before.rows if before else 0)
    total_rejected = len(rejected) + (before.rejected if before else 0)
    tx.set(
        position_key(tag, source_id),
        msgpack.packb(
            {
                "position": position,
                "identity": identity,
                "updated": time.time(),
                "rows": total_rows,
                "rejected": total_rejected,
            },
            use_bin_type=True,
        ),
    )
    for key, value in (records or {}).items():
        tx.set(key, value)
    return Committed(rows, len(rejected), None, tuple(dict.fromkeys(r.reason for r in rejected[:64]))[:8])


def commit_parts(
    writers: streams.StreamWriters,
    tag: str,
    schema: Schema,
    parts: Sequence[Part],
    source_id: str,
    position: Any,
    identity: Any = None,
    *,
    source: str = SOURCE,
    message: str = "",
    records: Mapping[str, bytes] | None = None,
) -> Committed:
    """Commit ``parts`` of ``tag``'s source ``source_id`` and its new ``position`` in one transaction.

    Rows that fit ``schema`` go to the stream, the others (and the parts'
    own rejected rows) verbatim to the quarantine stream with the reason;
    ``position`` (any msgpack-able value) and ``identity`` to the position
    record, and ``records`` as they are. All of it commits, or none.
    """
    tx = arrays.Transaction(
        writers.store, message=message or f"import {tag}", user="windvane-import", metadata={"source": source_id}
    )
    try:
        done = write_parts(
            tx, writers, tag, schema, parts, source_id, position, identity, source=source, records=records
        )
        checkpoints.reached("import.before_commit", tag=tag, source_id=source_id, position=position)
        tid = tx.commit()
    except BaseException:
        if tx.state == "open":
            tx.abort()
        raise
    return Committed(done.rows, done.rejected, tid, done.reasons)


def commit_part(
    writers: streams.StreamWriters,
    tag: str,
    schema: Schema,
    part: Part,
    source_id: str,
    position: Any,
    identity: Any = None,
    *,
    source: str = SOURCE,
) -> Committed:
    """:func:`commit_parts` of one part."""
    return commit_parts(writers, tag, schema, [part], source_id, position, identity, source=source)


# -- the driver -------------------------------------------------------------------------------------------


@dataclass
class ImportResult:
    """What :func:`import_source` did."""

    rows: int = 0  # stored in the stream by this run
    rejected: int = 0  # quarantined by this run
    nbytes: int = 0  # file bytes read by this run
    seconds: float = 0.0
    resumed_from: Any = None  # the stored position this run started from (None: the beginning)
    commits: int = 0
    schema: Schema | None = None
    inferred: bool = False  # whether this run inferred ``schema`` (the stream is new)
    reasons: list[str] = field(default_factory=list)  # distinct rejection reasons (the first few)
    duplicate_of: str | None = None  # the source of the same content imported (or begun) before, by name

    @property
    def mbps(self) -> float:
        return self.nbytes / self.seconds / 1e6 if self.seconds > 0 else 0.0


def _read_ahead(parts: Iterator[Part], out: queue.Queue[tuple[str, Any]], stop: threading.Event) -> None:
    """Reader thread: parse the next parts while the main thread commits (pyarrow releases the GIL)."""
    try:
        for part in parts:
            while not stop.is_set():
                try:
                    out.put(("part", part), timeout=0.1)
                    break
                except queue.Full:
                    continue
            if stop.is_set():
                return
        out.put(("end", None))
    except BaseException as exc:  # noqa: BLE001 - handed to the committing thread, which raises it
        out.put(("error", exc))


def import_source(
    store: neostore.Store,
    tag: str,
    reader: Reader,
    *,
    source_id: str,
    identity: Any = None,
    schema: Schema | None = None,
    progress: Callable[[int], None] | None = None,
    same_source: Callable[[Any], bool] | None = None,
    restart: bool = False,
    commit_bytes: int = ImportConfig.commit_bytes,
    writers: streams.StreamWriters | None = None,
    content: str | None = None,
    name: str = "",
    again: bool = False,
) -> ImportResult:
    """Import ``reader``'s parts into stream ``tag``, resuming from the stored position of ``source_id``.

    ``schema``: the stream's schema, or None to use the existing stream's or
    infer one (:func:`infer_schema`: from the types of the whole source if
    the reader has a ``file_types()`` method saying them, as the readers of
    tables do, else from the first part). ``identity`` is
    stored with every position; ``same_source(stored_identity)`` says
    whether the source is still the one a stored position was taken of
    (e.g. :func:`same_file`): if not, :class:`SourceChanged`, unless
    ``restart`` (import from the beginning; rows stored before stay).
    ``progress(nbytes)`` is called after each commit with the bytes it
    covered. Parts are committed ``commit_bytes`` (at least) at a time, a
    reader thread parsing one step ahead. Interrupted (an exception,
    Ctrl-C), the commit in progress is aborted: what was committed, with its
    position, stands, and the next run resumes there.

    ``content`` (:func:`content_hash`) and ``name`` (the path, for
    messages) are recorded with the commits. A source not begun under its
    own id whose content was imported to its end before imports nothing
    (``duplicate_of`` names the other); one whose content's import was
    interrupted resumes that import. ``again``: import from the beginning,
    whatever was imported before (rows stored before stay).
    """
    started = time.perf_counter()
    writers = writers or streams.StreamWriters(store)
    schema = resolve_schema(store, tag, schema)
    stored = None if again else read_position(store, tag, source_id)
    start = _resume_from(tag, stored, same_source, restart)
    result = ImportResult(resumed_from=start, schema=schema)
    if content is not None and start is None and not again:
        followed = _follow_content(store, tag, content, source_id, result)
        if followed is None:
            result.seconds = time.perf_counter() - started
            return result
        source_id, start = followed, result.resumed_from
    run = _Run(store, writers, tag, source_id, identity, content, name, result)
    try:
        run.commit_all(reader, start, progress, commit_bytes)
    finally:
        result.seconds = time.perf_counter() - started
    return result


def _resume_from(tag: str, stored: Position | None, same_source: Callable[[Any], bool] | None, restart: bool) -> Any:
    """Where an import resumes given the ``stored`` position (None: from the beginning)."""
    if stored is None:
        return None
    if same_source is not None and not same_source(stored.identity):
        if not restart:
            raise SourceChanged(
                f"the source was partly imported into {tag!r} before (up to {stored.value}), but it has changed "
                "since (its first bytes or size differ); run with --restart to import it from the beginning "
                "(rows imported before stay in the stream)"
            )
        return None
    return stored.value


def _follow_content(store: neostore.Store, tag: str, content: str, source_id: str, result: ImportResult) -> str | None:
    """The source id to import ``content`` under, following an import of the same content begun before.

    None if that import reached the end (nothing to import); ``result.duplicate_of``
    then names its source, as it does when the import goes on where another
    source's stopped (``result.resumed_from``).
    """
    seen = read_content(store, tag, content)
    if seen is not None and seen.done:
        result.duplicate_of = seen.name
        return None
    if seen is not None and seen.source_id != source_id:
        # The same bytes, partly imported from another path: go on where that import stopped.
        result.duplicate_of, source_id = seen.name, seen.source_id
        other = read_position(store, tag, source_id)
        result.resumed_from = other.value if other is not None else None
    return source_id


@dataclass
class _Run:
    """One import's commits: parts read ahead by a thread, committed ``commit_bytes`` at a time."""

    store: neostore.Store
    writers: streams.StreamWriters
    tag: str
    source_id: str
    identity: Any
    content: str | None
    name: str
    result: ImportResult

    def records(self, done: bool) -> dict[str, bytes]:
        """The content record to commit with the parts (``done``: the source is imported to its end)."""
        if self.content is None:
            return {}
        return {content_key(self.tag, self.content): _content_record(self.source_id, self.name, done)}

    def commit_all(self, reader: Reader, start: Any, progress: Callable[[int], None] | None, commit_bytes: int) -> None:
        """Read ``reader`` from ``start`` in a thread and commit its parts here."""
        file_types = getattr(reader, "file_types", None)
        types = file_types() if self.result.schema is None and file_types is not None else None
        ready: queue.Queue[tuple[str, Any]] = queue.Queue(maxsize=READ_AHEAD)
        stop = threading.Event()
        thread = threading.Thread(
            target=_read_ahead, args=(reader(start), ready, stop), name="windvane-import-read", daemon=True
        )
        thread.start()
        try:
            self._commit_ready(ready, types, progress, commit_bytes)
        finally:
            stop.set()

    def _commit_ready(
        self, ready: queue.Queue[tuple[str, Any]], types: Any, progress: Callable[[int], None] | None, commit_bytes: int
    ) -> None:
        result = self.result
        pending: list[Part] = []
        pending_bytes = 0
        marked = False
        while True:
            kind, item = ready.get()
            if kind == "error":
                raise item
            if kind == "part":
                pending.append(item)
                pending_bytes += item.nbytes
                if pending_bytes < commit_bytes:
                    continue
            if pending:
                if result.schema is None:
                    result.schema = infer_schema(self.tag, pending[0], types)
                    result.inferred = True
                schema = result.schema
                marked = kind == "end"  # the last commit records the content as imported
                _commit(
                    self.writers, self.tag, schema, pending, self.source_id, self.identity, result, self.records(marked)
                )
                if progress is not None:
                    progress(pending_bytes)
                result.nbytes += pending_bytes
                pending, pending_bytes = [], 0
            if kind == "end":
                if self.content is not None and not marked:
                    _mark_done(self.store, self.tag, self.content, self.source_id, self.name)
                return


def _mark_done(store: neostore.Store, tag: str, content: str, source_id: str, name: str) -> None:
    """Record that ``content`` was imported to its end (when no commit of rows said so)."""
    seen = read_content(store, tag, content)
    if seen is not None and seen.done and seen.source_id == source_id:
        return
    tx = arrays.Transaction(store, message=f"import {tag}: {name} imported", user="windvane-import")
    try:
        tx.set(content_key(tag, content), _content_record(source_id, name, True))
        tx.commit()
    except BaseException:
        if tx.state == "open":
            tx.abort()
        raise


def _commit(
    writers: streams.StreamWriters,
    tag: str,
    schema: Schema,
    parts: list[Part],
    source_id: str,
    identity: Any,
    result: ImportResult,
    records: Mapping[str, bytes],
) -> None:
    done = commit_parts(writers, tag, schema, parts, source_id, parts[-1].end, identity, records=records)
    result.commits += 1
    result.rows += done.rows
    result.rejected += done.rejected
    for reason in done.reasons:
        if reason not in result.reasons and len(result.reasons) < 8:
            result.reasons.append(reason)
