"""Records to columns: validate a batch against its schema, split what fits from what is rejected.

This is the hot path of ingestion, so each field is checked a whole column
at a time (one pass over the types, one numpy conversion); only a column
that fails the fast check is walked record by record to name the records
at fault. A rejected record is never dropped: it comes back as a
:class:`Rejected` with the reason and the bytes it arrived as, for the
tag's quarantine stream.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from windvane import arrays

from .batch import INVALID_TIME, Batch
from .errors import SchemaError
from .record_types import field_values, record_type
from .schema import Field, Schema, Vibration

_NONE = type(None)
_FLOATS = {float, int}


@dataclass(frozen=True, slots=True)
class Rejected:
    """A record that did not fit its schema, kept verbatim with why."""

    time: int
    reason: str
    raw: bytes
    source: str


def _describe(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 40 else text[:37] + '...'}"


def _cell_error(f: Field, value: Any) -> str | None:
    """Why ``value`` cannot be stored in ``f`` (None if it can)."""
    if value is None:
        return f"required field {f.name!r} is missing" if f.required else None
    t = type(value)
    if f.is_float:
        ok = t in _FLOATS
    elif f.is_int:
        ok = t is int
        if ok:
            info = np.iinfo(f.dtype)
            if not info.min <= value <= info.max:
                return f"field {f.name!r}: {value} does not fit in {f.dtype}"
    elif f.dtype == "bool":
        ok = t is bool
    elif f.dtype == "str":
        ok = t is str
        if ok and not _utf8(value):
            return f"field {f.name!r}: text that is not valid UTF-8 ({_describe(value)})"
        if t is bytes:  # msgpack bin: text when it is UTF-8 (text_values converted those already)
            return f"field {f.name!r}: bytes that are not valid UTF-8 text ({_describe(value)})"
    else:  # bytes
        ok = t is bytes or t is str
        if t is str and not _utf8(value):
            return f"field {f.name!r}: text that is not valid UTF-8 ({_describe(value)})"
    return None if ok else f"field {f.name!r}: expected {f.dtype}, got {_describe(value)}"


def _utf8(text: str) -> bool:
    """Whether ``text`` encodes as UTF-8 (a decoder's surrogate escapes of invalid bytes do not)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _all_utf8(texts: Sequence[Any]) -> bool:
    """Whether every str of ``texts`` encodes as UTF-8, checked in one C pass over their concatenation."""
    try:
        joined = "".join(texts)
    except TypeError:  # None among them
        joined = "".join(t for t in texts if type(t) is str)
    return _utf8(joined)


def text_values(values: list[Any]) -> list[Any]:
    """``values`` with each bytes value that is valid UTF-8 decoded to str; bytes that are not stay bytes.

    Text arrives as msgpack bin from senders that do not know their strings'
    encoding (fluentd's worker runs in ASCII-8BIT): bin that decodes as
    UTF-8 is that text.
    """
    if set(map(type, values)) == {bytes}:
        try:
            return list(map(bytes.decode, values))  # all of them in C, the common case
        except UnicodeDecodeError:
            pass
    out: list[Any] = []
    for v in values:
        if type(v) is bytes:
            try:
                v = v.decode("utf-8")
            except UnicodeDecodeError:
                pass
        out.append(v)
    return out


def _text_keyed(records: Sequence[Any], reasons: dict[int, str]) -> list[Any]:
    """``records`` with bin field names decoded as UTF-8; a record whose names cannot be gets its reason.

    The records of one batch mostly share their field names in one order,
    so each distinct tuple of names is decoded once and the records rebuilt
    in C (``dict(zip(...))``).
    """
    names: dict[tuple[Any, ...], tuple[Any, ...] | str] = {}
    out = list(records)
    for i, r in enumerate(records):
        if i in reasons:
            continue
        keys = tuple(r)
        named = names.get(keys)
        if named is None:
            named = names[keys] = _text_names(keys)
        if type(named) is str:
            reasons[i] = named
        else:
            out[i] = dict(zip(named, r.values()))
    return out


def _text_names(keys: tuple[Any, ...]) -> tuple[Any, ...] | str:
    """``keys`` with bytes decoded as UTF-8, or why one cannot be."""
    out: list[Any] = []
    for k in keys:
        if type(k) is bytes:
            try:
                k = k.decode("utf-8")
            except UnicodeDecodeError:
                return f"field name {_describe(k)} is not valid UTF-8"
        out.append(k)
    return tuple(out)


def _missing(f: Field) -> Any:
    if f.fill is not None:
        return f.fill
    return {"str": "", "bytes": b""}.get(f.dtype, np.nan)


def _column_ok(f: Field, values: list[Any]) -> bool:
    """The fast check: every value of the column is storable as it is."""
    types = set(map(type, values))
    if _NONE in types:
        if f.required:
            return False
        types.discard(_NONE)
    if f.is_float:
        return types <= _FLOATS
    if f.is_int:
        if not types <= {int}:
            return False
        # A required column has no None left here (the check above returned False).
        present = values if f.required else [v for v in values if v is not None]
        info = np.iinfo(f.dtype)
        return not present or (info.min <= min(present) and max(present) <= info.max)
    if f.dtype == "bool":
        return types <= {bool}
    if f.dtype == "str":
        return types <= {str} and _all_utf8(values)
    return types <= {bytes} or (types <= {bytes, str} and _all_utf8(values))


def _to_array(f: Field, values: list[Any]) -> np.ndarray | list[Any]:
    """The stored column for ``values`` (all checked); strings and bytes stay lists."""
    if f.dtype == "str":
        return [("" if f.fill is None else f.fill) if v is None else v for v in values] if None in values else values
    if f.dtype == "bytes":
        return [_missing(f) if v is None else v.encode() if type(v) is str else v for v in values]
    if None in values:
        fill = _missing(f)
        values = [fill if v is None else v for v in values]
    # A number beyond a float32 column's range is stored as an infinity of its sign, as numpy casts it.
    with np.errstate(over="ignore"):
        return np.array(values, dtype=f.dtype)


def _str_key(name: str) -> str:
    return name


@functools.lru_cache(maxsize=1024)
def _bin_key(name: str) -> bytes:
    return name.encode("utf-8")


def _bin_names_only(names: set[Any]) -> bool:
    """Whether ``names`` (a batch's field names) are all bytes of distinct UTF-8 text."""
    if set(map(type, names)) != {bytes}:
        return False
    try:
        list(map(bytes.decode, names))
    except UnicodeDecodeError:
        return False
    return True


def _extras(
    schema: Schema, records: Sequence[dict[Any, Any]], key: Any = _str_key
) -> tuple[list[str], dict[int, str]] | None:
    """Undeclared fields of each record as JSON text ("" for none), and why some records' cannot be;
    None if no record has any. ``key``: a field's name as the records hold it."""
    declared = {key(f.name) for f in schema.fields}
    if set().union(*records) <= declared:
        return None
    out = []
    faults: dict[int, str] = {}
    for j, r in enumerate(records):
        extra = {k: v for k, v in r.items() if k not in declared}
        text, why = _extra_json(extra) if extra else ("", None)
        if why is not None:
            faults[j] = why
        out.append(text)
    return out, faults


def _extra_json(extra: dict[Any, Any]) -> tuple[str, str | None]:
    """``extra`` as JSON text (bin as text, nested bin keys too), or "" and why it cannot be kept."""
    try:
        try:
            text = _dumps(extra)
        except TypeError:  # a map with bin (or other non-str) keys, the record's own or a nested one
            text = _dumps(_json_keys(extra))
    except ValueError:  # NaN or an infinity, under keys of either kind: JSON has no text for them
        return "", non_finite_reason(extra)
    except RecursionError:
        return "", "undeclared fields are nested too deeply to keep as JSON"
    if not _utf8(text):
        return "", "undeclared fields hold text that is not valid UTF-8"
    return text, None


def non_finite_reason(fields: Mapping[Any, Any]) -> str:
    """Why undeclared ``fields`` that hold NaN or an infinity are not kept: the ``extra`` column is JSON text,
    and JSON has no NaN or Infinity."""
    for name, value in fields.items():
        found = _non_finite(value)
        if found is None:
            continue
        shown = name.decode("utf-8", "backslashreplace") if type(name) is bytes else name
        if isinstance(value, float):
            advice = "declare it as a float32 or float64 field to store it"
        else:
            found, advice = f"{found} inside it", "send null or text in its place"
        return f"undeclared field {shown!r} holds {found}, which JSON (the extra column) cannot hold: {advice}"
    return "undeclared fields hold NaN or Infinity, which JSON (the extra column) cannot hold"


def _non_finite(value: Any) -> str | None:
    """``NaN``, ``Infinity`` or ``-Infinity``: the first such float in ``value`` (nested too), as JSON-ish text."""
    if isinstance(value, float):
        if value != value:
            return "NaN"
        return None if -math.inf < value < math.inf else "Infinity" if value > 0 else "-Infinity"
    if isinstance(value, dict):
        value = value.values()
    elif not isinstance(value, (list, tuple)):
        return None
    return next(filter(None, map(_non_finite, value)), None)


def _json_keys(value: Any) -> Any:
    """``value`` with every map key JSON can take: bin decoded as UTF-8 text (escaped where it is not)."""
    if type(value) is dict:
        return {
            (
                k.decode("utf-8", "backslashreplace")
                if type(k) is bytes
                else k
                if k is None or type(k) in (str, int, float, bool)
                else repr(k)
            ): _json_keys(v)
            for k, v in value.items()
        }
    if type(value) is list:
        return [_json_keys(v) for v in value]
    return value


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", "backslashreplace")
    return repr(value)


_dumps = functools.partial(json.dumps, ensure_ascii=False, default=_jsonable, separators=(",", ":"), allow_nan=False)


@dataclass
class Columns:
    """The rows of one batch that fit: ``columns`` maps column name -> values (``time`` included)."""

    rows: int
    columns: dict[str, Any]
    newest: int | None = None  # the newest time, where it is known without scanning ``columns["time"]``


def concat_columns(parts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The columns of ``parts`` end to end, by the names of the first: numpy arrays concatenated, lists of
    str chained (cheaply: no array of objects made), text as records (:class:`arrays.VLenRows`) joined once
    (a list among them made records first). ValueError if a part lacks one of them."""
    if len(parts) == 1:
        return dict(parts[0])
    columns: dict[str, Any] = {}
    for name in parts[0]:
        values = [v for v in (p.get(name) for p in parts) if v is not None]
        if len(values) != len(parts):
            raise ValueError(f"column {name!r} is missing from some batches")
        if isinstance(values[0], np.ndarray):
            columns[name] = np.concatenate(values)
        elif any(type(v) is arrays.VLenRows for v in values):
            text = next(v.text for v in values if type(v) is arrays.VLenRows)
            columns[name] = arrays.VLenRows.concat([_records_of(v, text) for v in values])
        else:
            columns[name] = list(itertools.chain.from_iterable(values))
    return columns


def _records_of(values: arrays.VLenRows | list[Any], text: bool) -> arrays.VLenRows:
    """A str (``text``) or bytes column's values as records (checked already, as every column of
    :class:`Columns` is)."""
    if type(values) is arrays.VLenRows:
        return values
    return arrays.VLenRows.from_arrow(pa.array(values, pa.string() if text else pa.binary()))


def _text_records(f: Field, values: Sequence[Any], encoded: bool = False) -> arrays.VLenRows | None:
    """A str column's values as the records its chunks hold (:class:`arrays.VLenRows`), made in C without a
    Python object per value; None if a value is not text (with ``encoded``: msgpack bin, whose UTF-8 Arrow
    checks) or a required one is missing: the caller then checks them one by one and names the fault.

    Text travels so from the decode workers to the stream writer: the
    records pickle as one buffer, and the writer takes them as they are.
    """
    try:
        column = pa.array(values, pa.binary() if encoded else pa.string())
        if encoded:
            column = column.cast(pa.string())
    except (pa.ArrowInvalid, pa.ArrowTypeError, UnicodeEncodeError):
        return None
    if column.null_count:
        if f.required:
            return None
        column = pc.fill_null(column, "" if f.fill is None else f.fill)
    return arrays.VLenRows.from_arrow(column)


def _typed_table(schema: Schema, batch: Batch) -> Columns:
    """The columns of records of the schema's record type: they fit as they are (see :mod:`.record_types`)."""
    columns: dict[str, Any] = {"time": np.asarray(batch.times, dtype=np.int64)}
    for f, values in zip(schema.fields, field_values(schema, batch.records)):
        text = _text_records(f, values) if f.dtype == "str" else None  # the type's text is UTF-8
        columns[f.name] = _to_array(f, values) if text is None else text
    if schema.extra == "keep":
        columns["extra"] = arrays.VLenRows.repeat("", len(batch))  # the type admits no undeclared field
    return Columns(len(batch), columns)


def _bin_keyed_table(schema: Schema, batch: Batch) -> Columns | None:
    """The columns of records decoded as :data:`.record_types.BinKeyedRecord` if every record holds exactly the
    schema's fields, each storable as it is (bin text that is UTF-8), else None: the checked path names why not.

    In C: every field of a record looked up in one visit to it (records are
    many small maps: a pass per field would fetch each from memory again),
    then a column at a time, text taken as its UTF-8 bytes (:func:`_text_records`).
    """
    records = batch.records
    if set(map(len, records)) != {len(schema.fields)}:
        return None  # a field absent or one not declared: the checked path keeps, drops or rejects it
    try:
        fields = _bin_keyed_fields(schema, records)
    except KeyError:
        return None
    columns: dict[str, Any] = {"time": np.asarray(batch.times, dtype=np.int64)}
    for f, values in zip(schema.fields, fields):
        if f.dtype == "str":
            # Every value UTF-8 bin (or nil where that is allowed), the common case: its records as they came.
            text = _text_records(f, values, encoded=True)
            if text is not None:
                columns[f.name] = text
                continue
            values = text_values(values)  # a number, bytes that are not text: checked below
        if not _column_ok(f, values):
            return None
        columns[f.name] = _to_array(f, values)
    if schema.extra == "keep":
        columns["extra"] = arrays.VLenRows.repeat("", len(records))
    return Columns(len(records), columns)


def _bin_keyed_fields(schema: Schema, records: Sequence[dict[bytes, Any]]) -> list[list[Any]]:
    """Each field's values in ``records`` (maps with bin names), in schema order; KeyError if one lacks one."""
    names = [_bin_key(f.name) for f in schema.fields]
    if len(names) < 2:  # itemgetter of one name gives the value, not a tuple of it
        return [list(map(operator.itemgetter(name), records)) for name in names]
    return list(map(list, zip(*map(operator.itemgetter(*names), records))))


def _table(schema: Schema, batch: Batch) -> tuple[Columns | None, list[Rejected]]:
    records = batch.records
    if batch.typed and type(records[0]) is record_type(schema):
        return _typed_table(schema, batch), []
    if batch.typed and type(records[0]) is dict:  # maps with bin names (see .record_types)
        table = _bin_keyed_table(schema, batch)
        if table is not None:
            return table, []
    reasons: dict[int, str] = {}  # index in the batch -> why the record is rejected
    records, key = _maps(records, reasons)
    # ``origin[j]``: the batch index of the j-th map (identity in the common case).
    origin = range(len(records)) if not reasons else [i for i in range(len(records)) if i not in reasons]
    maps = records if not reasons else [records[i] for i in origin]
    values_of = _field_values(schema, maps, key, origin, reasons)
    extras = _checked_extras(schema, maps, key, origin, reasons)
    rejected = [Rejected(int(batch.times[i]), reasons[i], batch.raw_bytes(i), batch.source) for i in sorted(reasons)]
    if len(rejected) == len(records):
        return None, rejected
    if not reasons:
        survivors = None  # every record fits: columns as they are
        time = np.asarray(batch.times, dtype=np.int64)
    else:
        survivors = [j for j, i in enumerate(origin) if i not in reasons]  # positions in ``maps``
        time = np.asarray([batch.times[origin[j]] for j in survivors], dtype=np.int64)

    def pick(values: list[Any]) -> list[Any]:
        return values if survivors is None else [values[j] for j in survivors]

    columns: dict[str, Any] = {"time": time}
    for f in schema.fields:
        columns[f.name] = _to_array(f, pick(values_of[f.name]))
    if schema.extra == "keep":
        columns["extra"] = pick(extras) if extras is not None else [""] * len(time)
    return Columns(len(time), columns), rejected


def _maps(records: Sequence[Any], reasons: dict[int, str]) -> tuple[Sequence[Any], Any]:
    """``records`` (those that are not maps rejected into ``reasons``) and how a field's name is looked up
    in them."""
    if not all(type(r) is dict for r in records):
        for i, r in enumerate(records):
            if type(r) is not dict:
                reasons[i] = f"a record must be a map of field names to values, not {_describe(r)}"
    key: Callable[[str], Any] = _str_key
    if bytes in set(map(type, itertools.chain.from_iterable(r for r in records if type(r) is dict))):
        # Field names as msgpack bin (fluentd's in_tail): UTF-8 text names the field. Where every
        # name is bin and UTF-8, fields are looked up by their encoded names, records left as they are.
        names = set().union(*(r for r in records if type(r) is dict))
        if _bin_names_only(names):
            key = _bin_key
        else:
            records = _text_keyed(records, reasons)
    return records, key


def _field_values(
    schema: Schema, maps: Sequence[dict[Any, Any]], key: Any, origin: Sequence[int], reasons: dict[int, str]
) -> dict[str, list[Any]]:
    """Each field's values in ``maps``; a value that does not fit its field rejects its record."""
    values_of: dict[str, list[Any]] = {}
    for f in schema.fields:
        name = key(f.name)
        values = [r.get(name) for r in maps]
        if f.dtype == "str" and bytes in set(map(type, values)):
            values = text_values(values)
        if not _column_ok(f, values):
            for j, v in enumerate(values):
                why = _cell_error(f, v)
                if why:
                    reasons.setdefault(origin[j], why)
        values_of[f.name] = values
    return values_of


def _checked_extras(
    schema: Schema, maps: Sequence[dict[Any, Any]], key: Any, origin: Sequence[int], reasons: dict[int, str]
) -> list[str] | None:
    """The undeclared fields of each of ``maps`` as JSON text (None: dropped, or rejected by the schema)."""
    found = _extras(schema, maps, key) if schema.extra != "drop" else None
    if found is None:
        return None
    extras, faults = found
    for j, why in faults.items():
        reasons.setdefault(origin[j], why)
    if extras is not None and schema.extra == "reject":
        declared = ", ".join(f.name for f in schema.fields) or "none"
        for j, text in enumerate(extras):
            if text:
                names = ", ".join(json.loads(text))
                reasons.setdefault(
                    origin[j], f"undeclared field(s) {names} (schema {schema.name} declares: {declared})"
                )
        return None
    return extras


def vibration_of(schema: Schema) -> Vibration:
    """The block layout of ``schema``; SchemaError if it is not a vibration schema."""
    if schema.vibration is None:
        raise SchemaError(
            f"schema {schema.name!r} is kind {schema.kind} and has no [vibration] table: only a vibration "
            "schema's streams hold blocks of samples"
        )
    return schema.vibration


def _samples(v: Vibration, record: Any) -> tuple[np.ndarray, float] | str:
    """A vibration record's block as ``(samples x channels array, sample rate)``, or why it cannot be."""
    if type(record) is not dict:
        return f"a vibration record must be a map with {v.samples_field!r}, not {_describe(record)}"
    if v.samples_field not in record and any(type(k) is bytes for k in record):
        named = _text_names(tuple(record))
        if type(named) is str:
            return named
        record = dict(zip(named, record.values()))
    block = record.get(v.samples_field)
    if block is None:
        return f"vibration record has no {v.samples_field!r} field"
    return _block(v, block, record.get(v.rate_field))


def _block(v: Vibration, block: Any, rate: Any) -> tuple[np.ndarray, float] | str:
    """A block of samples and the rate its record gives (None: none) as ``(samples x channels array, sample
    rate)``, or why they cannot be."""
    if rate is None:
        if v.sample_rate is None:
            return f"vibration record has no {v.rate_field!r} and the schema sets no sample_rate"
        rate = v.sample_rate
    elif type(rate) not in _FLOATS or not rate > 0:
        return f"field {v.rate_field!r}: expected a positive number of samples per second, got {_describe(rate)}"
    elif v.sample_rate is not None and float(rate) != v.sample_rate:
        return f"field {v.rate_field!r}: {rate} differs from the schema's sample_rate {v.sample_rate:g}"
    dtype = np.dtype(v.dtype).newbyteorder("<")
    if isinstance(block, (bytes, bytearray, memoryview)):
        frame = dtype.itemsize * v.channels
        if len(block) % frame:
            return (
                f"field {v.samples_field!r}: {len(block)} bytes is not a whole number of frames of "
                f"{v.channels} x {v.dtype} little-endian ({frame} bytes)"
            )
        samples = np.frombuffer(block, dtype=dtype).reshape(-1, v.channels)
    elif isinstance(block, list):
        try:
            # As for a float32 column: a sample beyond float32's range is an infinity of its sign.
            with np.errstate(over="ignore"):
                samples = np.asarray(block, dtype=v.dtype)
        except (TypeError, ValueError, OverflowError) as exc:
            return f"field {v.samples_field!r}: not a list of numbers ({exc})"
        if samples.ndim == 1 and v.channels == 1:
            samples = samples[:, None]
        if samples.ndim != 2 or samples.shape[1] != v.channels:
            return f"field {v.samples_field!r}: shape {samples.shape} is not (samples, {v.channels})"
    else:
        return f"field {v.samples_field!r}: expected {v.dtype} bytes or a list of lists, got {_describe(block)}"
    if not len(samples):
        return f"field {v.samples_field!r} holds no samples"
    step = 1e9 / float(rate)  # nanoseconds between samples
    if not math.isfinite(step) or (len(samples) - 1) * step >= 2**63:
        return (
            f"field {v.rate_field!r}: {rate} samples per second spaces the block's {len(samples)} samples beyond "
            "the time range of nanoseconds; give the rate in samples per second (Hz)"
        )
    return samples, float(rate)


@functools.lru_cache(maxsize=64)
def _sample_offsets(count: int, rate: float) -> np.ndarray:
    """Nanoseconds from a block's first sample to each of its ``count`` samples (blocks repeat their size)."""
    offsets: np.ndarray = np.rint(np.arange(count) * (1e9 / rate)).astype(np.int64)
    offsets.flags.writeable = False
    return offsets


def _vibration(schema: Schema, batch: Batch) -> tuple[Columns | None, list[Rejected]]:
    rejected: list[Rejected] = []
    starts: list[int] = []
    blocks: list[tuple[np.ndarray, float]] = []
    typed = batch.typed and type(batch.records[0]) is record_type(schema)
    v = vibration_of(schema)
    for i, record in enumerate(batch.records):
        got = _block(v, record.samples, record.rate) if typed else _samples(v, record)
        if isinstance(got, str):
            rejected.append(Rejected(int(batch.times[i]), got, batch.raw_bytes(i), batch.source))
            continue
        starts.append(int(batch.times[i]))
        blocks.append(got)
    if not blocks:
        return None, rejected
    total = sum(len(samples) for samples, _ in blocks)
    time = np.empty(total, dtype=np.int64)
    at = 0
    newest = None
    for start, (samples, rate) in zip(starts, blocks):
        np.add(_sample_offsets(len(samples), rate), start, out=time[at : at + len(samples)])
        at += len(samples)
        if len(samples) and (newest is None or time[at - 1] > newest):
            newest = int(time[at - 1])  # a block's times rise: its last is its newest
    samples = blocks[0][0] if len(blocks) == 1 else np.concatenate([b for b, _ in blocks])
    return Columns(total, {"time": time, "samples": samples}, newest), rejected


BAD_TIME = "the event time is not an integer, a float or an EventTime within range"


def batch_columns(schema: Schema, batch: Batch) -> tuple[Columns | None, list[Rejected]]:
    """Split ``batch`` into the columns of the rows that fit ``schema`` and the records it rejects."""
    if not len(batch):
        return None, []
    faults = batch.faults or {}
    if faults or min(batch.times) == INVALID_TIME:
        good = [i for i, t in enumerate(batch.times) if t != INVALID_TIME and i not in faults]
        rejected = [
            Rejected(
                INVALID_TIME if t == INVALID_TIME else int(t), faults.get(i, BAD_TIME), batch.raw_bytes(i), batch.source
            )
            for i, t in enumerate(batch.times)
            if t == INVALID_TIME or i in faults
        ]
        if not good:
            return None, rejected
        rest = Batch(
            batch.tag,
            [batch.times[i] for i in good],
            [batch.records[i] for i in good],
            raw=(lambda j: batch.raw_bytes(good[j])),
            source=batch.source,
            size=batch.size,
            typed=batch.typed,
        )
        columns, more = batch_columns(schema, rest)
        return columns, rejected + more
    if schema.holds_blocks:
        return _vibration(schema, batch)
    return _table(schema, batch)


def unrouted(batch: Batch, reason: str) -> list[Rejected]:
    """Every record of a batch no schema takes, rejected with ``reason``."""
    faults = batch.faults or {}
    return [
        Rejected(int(t), faults.get(i, reason), batch.raw_bytes(i), batch.source) for i, t in enumerate(batch.times)
    ]
