"""JSON lines (one JSON object per line, NDJSON) to columns: the object's own fields, and its time.

- **Time**: the first of ``time``, ``timestamp``, ``@timestamp``, ``ts``
  the object holds (not null) becomes the ``time`` column and leaves the
  fields (so does a null ``time``). An ISO 8601 / RFC 3339 string is read
  with its zone (without one, in the log's zone, ``--timezone``); a
  number is epoch time whose magnitude says its unit, read as decimal text
  (exact to the nanosecond): windvane's one time rule, :mod:`ingest.times`.
  An object with
  none of these keys gets the time it was read. Anything else under the
  chosen key rejects the line.
- **Fields** become columns in the order first seen: booleans ``bool``,
  integers ``int64``, numbers with a fraction (or integers and fractions
  mixed) ``float64``, strings ``string``, objects and arrays ``string``
  holding their JSON text. A field missing from a line is null there
  (``windvane import`` and ``tail`` infer the stream's schema from the
  first block: give ``--schema`` for fields that come and go). A
  value whose kind differs from its column's (a string where the column
  holds numbers; a column's type comes from the destination stream when it
  exists, else from the first line holding the field) rejects its line.
- Keys that cannot be column names (``[A-Za-z_][A-Za-z0-9_.-]*``, not
  ``time``, ``extra`` or ``other_keys``) are kept in an ``other_keys``
  column as a JSON object ("" in lines without any).

JSON is RFC 8259's: a line holding ``NaN`` or ``Infinity`` is not JSON
and is rejected (as over HTTP, :mod:`connectors.json_text`).

Lines are decoded one at a time with msgspec rather than as a block with
``pyarrow.json``: the latter turns strings that look like times into
timestamps (the text is then not what the log holds), and one bad line or
one change of type fails its whole block.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa

from windvane.connectors.json_text import constant_at, not_a_number
from windvane.ingest.times import iso_column_ns, time_ns

from .lines import Lines, Rows
from .options import LogOptions

TIME_KEYS = ("time", "timestamp", "@timestamp", "ts")
COLUMN_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")
OTHER_KEYS = "other_keys"
RESERVED = frozenset({"time", "extra", OTHER_KEYS})
#: One JSON line's object.
Record = dict[str, Any]
INT64 = (-(1 << 63), (1 << 63) - 1)

_decode = msgspec.json.Decoder(float_hook=Decimal).decode
_encode = msgspec.json.Encoder(decimal_format="number").encode

_KIND = {bool: "bool", int: "int", Decimal: "float", str: "str", dict: "json", list: "json"}
_TYPE = {
    "bool": pa.bool_(),
    "int": pa.int64(),
    "float": pa.float64(),
    "str": pa.large_string(),
    "json": pa.large_string(),
}
_HOLDS = {
    "bool": "booleans",
    "int": "integers (int64)",
    "float": "numbers (float64)",
    "str": "strings",
    "json": "JSON objects and arrays",
    "unsupported": "values JSON cannot give",
}
_JSON_NAME = {list: "array", int: "number", Decimal: "number", str: "string", bool: "boolean", type(None): "null"}
_KIND_NAME = {
    "bool": "a boolean",
    "int": "an integer",
    "float": "a number with a fraction",
    "str": "a string",
    "json": "an object or array",
}


def _accepted(t: pa.DataType) -> frozenset[str]:
    """The value kinds a column of Arrow type ``t`` takes."""
    if pa.types.is_boolean(t):
        return frozenset({"bool"})
    if pa.types.is_integer(t):
        return frozenset({"int"})
    if pa.types.is_floating(t):
        return frozenset({"int", "float"})
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return frozenset({"str", "json"})
    return frozenset()


def _take_time(record: Record, i: int, time: np.ndarray, iso: list[tuple[int, str, str]]) -> str | None:
    """Move ``record``'s time key into ``time[i]`` (or ``iso``); the fault, if its value is no time."""
    key = next((k for k in TIME_KEYS if record.get(k) is not None), None)
    value = record.pop(key) if key is not None else None
    record.pop("time", None)
    if key is None:
        return None
    kind = type(value)
    if isinstance(value, str):  # JSON's text is str itself, never a subclass
        iso.append((i, key, value))
        return None
    if kind is int or kind is Decimal:
        ns = time_ns(value)
        if ns is not None:
            time[i] = ns
            return None
        return f"field {key!r}: {value} is out of the range of times"
    return (
        f"field {key!r}: {_KIND_NAME.get(_KIND.get(kind, ''), 'null')} is not a time "
        f"(expected epoch seconds or an ISO 8601 string)"
    )


_AT_BYTE = re.compile(r"\(byte (\d+)\)")


def _not_json(text: str, exc: msgspec.DecodeError) -> str:
    """msgspec's message for a line that is not JSON, or, where it stopped at NaN or an infinity, what those are."""
    at_byte, found = _AT_BYTE.search(str(exc)), constant_at(text)
    if at_byte and found:
        start = len(text[: found[0]].encode())
        # msgspec stops at -Infinity's I, after the sign
        if int(at_byte.group(1)) in (start, start + found[1].startswith("-")):
            return f"byte {start}: {not_a_number(found[1])}"
    return str(exc)


def parse_json_lines(lines: Lines, options: LogOptions) -> Rows:
    """JSON lines to a ``time`` column and one column per field; see the module docstring."""
    count = len(lines)
    faults: dict[int, str] = {}
    records: list[Record | None] = [None] * count
    time = np.full(count, options.now_ns, dtype=np.int64)
    iso: list[tuple[int, str, str]] = []
    for i, text in enumerate(lines.text.to_pylist()):
        try:
            record = _decode(text)
        except msgspec.DecodeError as exc:
            faults[i] = f"not JSON: {_not_json(text, exc)}"
            continue
        if type(record) is not dict:
            faults[i] = f"a JSON {_JSON_NAME.get(type(record), 'value')}, not an object"
            continue
        fault = _take_time(record, i, time, iso)
        if fault:
            faults[i] = fault
        else:
            records[i] = record
    if iso:
        values, bad = iso_column_ns(pa.array([t for _, _, t in iso], pa.large_string()), options.json_zone)
        for (i, key, text), ns, wrong in zip(iso, values.tolist(), bad.tolist()):
            if wrong:
                faults[i] = f"field {key!r}: {text!r} is not an ISO 8601 time"
                records[i] = None
            else:
                time[i] = ns
    kinds = _column_kinds(records, options)
    _check(records, kinds, lines, faults)
    columns: dict[str, Any] = {"time": pa.array(time)}
    extras = []
    for name, kind in kinds.items():
        columns[name] = _column([record.get(name) if record else None for record in records], kind)
    for i in range(count):
        record = records[i]  # None where faulted
        odd = {k: v for k, v in record.items() if not _is_column(k)} if record else {}
        extras.append(_encode(odd).decode() if odd else "")
    if any(extras):
        columns[OTHER_KEYS] = pa.array(extras, pa.large_string())
    return Rows(columns, faults)


def _is_column(key: str) -> bool:
    return key not in RESERVED and COLUMN_NAME.match(key) is not None


def _column_kinds(records: list[Record | None], options: LogOptions) -> dict[str, str]:
    """Each column's kind: the stream's type if known, else the first value's (int and float together: float)."""
    first: dict[str, str] = {}
    seen: dict[str, set[str]] = {}
    for record in records:
        for key, value in (record or {}).items():
            kind = _KIND.get(type(value))
            if kind is None or not _is_column(key):
                continue
            first.setdefault(key, kind)
            seen.setdefault(key, set()).add(kind)
    out = {}
    for key, kind in first.items():
        known = options.types.get(key)
        if known is not None:
            accepted = _accepted(known)
            out[key] = (
                "float"
                if "float" in accepted
                else "int"
                if "int" in accepted
                else "bool"
                if "bool" in accepted
                else "str"
                if accepted
                else "unsupported"
            )
        elif kind in ("int", "float") and seen[key] >= {"int", "float"}:
            out[key] = "float"
        else:
            out[key] = kind
    return out


def _check(records: list[Record | None], kinds: dict[str, str], lines: Lines, faults: dict[int, str]) -> None:
    """Fault each record with a value its column cannot hold (and drop it from ``records``)."""
    for i, record in enumerate(records):
        if record is None:
            continue
        for key, value in record.items():
            kind = _KIND.get(type(value))
            want = kinds.get(key)
            if kind is None or want is None:
                continue
            fits = kind == want or (want == "float" and kind == "int") or (want == "str" and kind == "json")
            if fits and kind == "int" and want == "int" and not INT64[0] <= value <= INT64[1]:
                faults[i] = f"field {key!r}: {value} does not fit in int64"
                break
            if not fits:
                faults[i] = f"field {key!r}: {_KIND_NAME[kind]} where the column holds {_HOLDS.get(want, want)}"
                break
        if i in faults:
            records[i] = None


def _column(values: list[Any], kind: str) -> pa.Array:
    if kind in ("json", "str"):
        values = [v if v is None or type(v) is str else _encode(v).decode() for v in values]
    elif kind == "float":
        values = [None if v is None else float(v) for v in values]
    return pa.array(values, _TYPE.get(kind, pa.large_string()))
