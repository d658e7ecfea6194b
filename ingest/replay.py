"""Quarantined records, looked at, replayed and discarded: what ``windvane quarantine ls / replay`` and the
web console do.

:func:`replay` validates every record of a tag's quarantine stream again,
against a (fixed) schema, and in **one commit** appends those that fit to
the tag's stream and rewrites the quarantine stream without them; the
records that still do not fit stay, with the reason they fail now
(nothing is committed when none fits). The
commit lock is held from the first read to the commit, so nothing else
commits in between: a replay run twice, or run again after it was killed,
never stores a record twice and never loses one.

A quarantined record is replayed from the bytes it arrived as, which
replay reads as a record when they hold one msgpack object or one JSON
object: a map (the record), ``[time, record]`` (a Forward entry, a
fluent-plugin-wendelin item) or ``[tag, time, record(, options)]`` (a
Forward message). Its time is its ``time`` field when it has one (epoch
seconds or ISO 8601, as fluentd's in_http and ``windvane import`` read
it; the field is dropped from the record, as the connectors drop the field
they read the time from), else the time the quarantine stream recorded.
Records quarantined because their time was unreadable stay: no schema
fixes a time. Bytes replay cannot read (a CSV or log line, a whole Forward
message of many entries) stay with the reason they were quarantined for
(their line number with it), and why replay cannot read them beside it.
:func:`discard` deletes a tag's quarantined records (those of one reason,
or all) in one commit under the same lock; history keeps them until
``store pack``. It deletes only as many as the caller saw, or none: a
console user confirms a count, and records that arrived since are not
theirs to delete.
"""

from __future__ import annotations

import collections
import json
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import msgpack
import numpy as np

from windvane import arrays, neostore
from windvane.arrays import stream_edit

from . import checkpoints, streams
from .batch import Batch
from .columns import BAD_TIME, batch_columns
from .errors import IngestError
from .imports import NO_TIME, resolve_schema
from .schema import Schema
from .times import time_ns as read_time

#: Reasons no schema can fix: the record's time could not be read.
TIME_REASONS = frozenset({BAD_TIME, NO_TIME})
#: The ``source`` replay names in validation (each record keeps its own in quarantine).
SOURCE = "replay"
#: The commonest reasons ``quarantine ls`` and ``replay`` report.
TOP_REASONS = 5
#: What joins a record's quarantine reason and why replay cannot read it (kept beside it, never instead).
UNREADABLE = "; replay cannot read this record: "


class ReplayError(IngestError):
    """A quarantine cannot be replayed as asked; the message says why."""


class NoQuarantine(ReplayError):
    """The tag has no quarantine stream."""


class QuarantineChanged(ReplayError):
    """The records a discard was asked for are not the ones there now: nothing was discarded."""


@dataclass(frozen=True)
class Summary:
    """A tag's quarantine stream: its records, and how many fail for each reason (commonest first)."""

    tag: str
    rows: int
    reasons: list[tuple[str, int]]


@dataclass(frozen=True)
class ReplayResult:
    """What a replay did: records moved to the stream, records left (and why), the commit (None: no change)."""

    tag: str
    replayed: int
    remaining: Summary
    tid: bytes | None


def record_of(raw: bytes) -> tuple[Any, int | None, str | None]:
    """``(record, time, None)`` for quarantined bytes that hold a record replay reads, else ``(None, None, why
    not)`` (said after :data:`UNREADABLE`). ``time`` (ns since the epoch) is the record's ``time`` field, read
    as the connectors and imports read it (epoch seconds or ISO 8601, a JSON number to the nanosecond), or
    None when it has none. A record whose time, in the field or before it (``[time, record]``), is not a
    time is not read: no schema fixes it, and the time it was quarantined at is only when it arrived."""
    try:
        obj = msgpack.unpackb(raw, raw=False, strict_map_key=False)
    except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError):
        try:
            obj = _json_object(raw)
        except _NotJson as exc:
            return None, None, str(exc)
        except (ValueError, UnicodeDecodeError):
            return None, None, "its bytes are not one msgpack or JSON object"
        if type(obj) is not dict:
            return None, None, f"the JSON holds a {type(obj).__name__}, not an object"
    head = None
    if type(obj) is list and len(obj) == 2:
        head, obj = obj
    elif type(obj) is list and len(obj) in (3, 4) and type(obj[0]) is str:
        head, obj = obj[1], obj[2]
    if type(head) is list and head:  # Fluent Bit's [EventTime, {metadata}]
        head = head[0]
    # 0 and nil: "now" to Forward, whose arrival time the quarantine keeps.
    if head is not None and head != 0 and read_time(head) is None:
        return None, None, _NO_TIME_FIX
    if type(obj) is not dict:
        return obj, None, None
    when = next((obj[k] for k in ("time", b"time") if k in obj), None)
    if when is not None and read_time(when) is None:
        return None, None, _NO_TIME_FIX
    return {k: v for k, v in obj.items() if k not in ("time", b"time")}, read_time(when), None


_NO_TIME_FIX = "its time is not a time, which no schema fixes"


class _NotJson(ValueError):
    """JSON text holding NaN or an infinity, which are not JSON."""


def _not_json(name: str) -> Any:
    raise _NotJson(f"its JSON holds {name}, which is not JSON")


def _json_object(raw: bytes) -> Any:
    """The JSON value of ``raw`` as RFC 8259 has it (NaN and Infinity are a ValueError), its numbers floats but
    for an object's ``time``, kept as the exact Decimal written."""
    value = json.loads(raw, parse_float=Decimal, parse_constant=_not_json)
    if type(value) is dict:
        return {k: v if k == "time" else _floats(v) for k, v in value.items()}
    return _floats(value)


def _floats(value: Any) -> Any:
    """``value`` with every Decimal (nested ones too) the float JSON's number is read as elsewhere."""
    if type(value) is Decimal:
        return float(value)
    if type(value) is dict:
        return {k: _floats(v) for k, v in value.items()}
    if type(value) is list:
        return [_floats(v) for v in value]
    return value


def summary(tag: str, reasons: Any) -> Summary:
    """The :class:`Summary` of a quarantine whose records have ``reasons``."""
    counts = collections.Counter(reasons)
    return Summary(tag, sum(counts.values()), counts.most_common())


def summarize(store: neostore.Store, tag: str | None = None) -> list[Summary]:
    """Every quarantine stream (or ``tag``'s) with its count of records per reason; NoQuarantine if ``tag`` has none."""
    tags = arrays.list_streams(store, quarantine=True)
    if tag is not None:
        if tag not in tags:
            raise NoQuarantine(f"stream {tag!r} has no quarantine (windvane quarantine ls lists those there are)")
        tags = [tag]
    found = []
    for t in tags:
        with arrays.open_stream(store, t, quarantine=True) as q:
            found.append(summary(t, q["reason"][:].tolist()))
    return found


def _revalidate(schema: Schema, tag: str, rows: dict[str, np.ndarray]) -> tuple[Any, np.ndarray, np.ndarray]:
    """``(columns that fit or None, which rows fit, each row's reason now)`` for the quarantine ``rows``."""
    n = len(rows["time"])
    reasons = rows["reason"].astype(object)
    fits = np.zeros(n, dtype=bool)
    candidates: list[int] = []
    records: list[Any] = []
    times: list[int] = []
    for i, (raw, reason) in enumerate(zip(rows["raw"], reasons)):
        if reason in TIME_REASONS:
            continue
        record, time_ns, why = record_of(raw)
        if why is not None:
            # The reason it was quarantined (its line, what was wrong) stays; a later replay replaces only its own part.
            reasons[i] = reason.split(UNREADABLE)[0] + UNREADABLE + why
        else:
            candidates.append(i)
            records.append(record)
            times.append(int(rows["time"][i]) if time_ns is None else time_ns)
    if not candidates:
        return None, fits, reasons
    asked: list[int] = []  # batch indices, in the order batch_columns asks for the bytes of the records it rejects

    def raw_of(j: int) -> bytes:
        asked.append(j)
        raw: bytes = rows["raw"][candidates[j]]
        return raw

    batch = Batch(tag, times, records, raw=raw_of, source=SOURCE)
    columns, rejected = batch_columns(schema, batch)
    if len(asked) != len(rejected):
        raise ReplayError(f"replay lost track of the records it rejects ({len(asked)} asked, {len(rejected)} rejected)")
    fits[candidates] = True
    for j, r in zip(asked, rejected):
        fits[candidates[j]] = False
        reasons[candidates[j]] = r.reason
    return columns, fits, reasons


def replay(
    store: neostore.Store, tag: str, schema: Schema | None = None, started: Callable[[int], None] | None = None
) -> ReplayResult:
    """Move the records of ``tag``'s quarantine that fit ``schema`` (default: the stream's) into its stream.

    One commit, none if no record fits; the records that stay get the reason
    they fail now (those replay cannot read keep the one they were
    quarantined for, replay's beside it). ``started(records)`` is called
    once the quarantine is read, before any is validated. NoQuarantine if ``tag`` has no
    quarantine stream; ReplayError if there is neither ``schema`` nor a
    stream to take one from; :class:`ingest.imports.SchemaMismatch` if
    ``schema`` gives a column of the stream another type.
    """
    schema = resolve_schema(store, tag, schema)
    with arrays.transaction(store, message=f"replay quarantine {tag}") as tx:
        tx.lock()
        if tag not in arrays.list_streams(tx, quarantine=True):
            raise NoQuarantine(f"stream {tag!r} has no quarantine (windvane quarantine ls lists those there are)")
        if schema is None:
            raise ReplayError(f"there is no stream {tag!r} to take the schema from: give one with --schema")
        rows = stream_edit.read_rows(tx, tag, quarantine=True)
        if started is not None:
            started(len(rows["time"]))
        columns, fits, reasons = _revalidate(schema, tag, rows)
        stay = ~fits
        if fits.any():
            streams.write(tx, streams.StreamWriters(store), tag, schema, columns.columns)
            stream_edit.refill(
                tx,
                tag,
                {
                    "time": rows["time"][stay],
                    "reason": reasons[stay].tolist(),
                    "raw": rows["raw"][stay],
                    "source": rows["source"][stay],
                },
                quarantine=True,
            )
            checkpoints.reached("replay.before_commit", tag=tag)
        else:
            tx.abort()
    return ReplayResult(tag, int(fits.sum()), summary(tag, reasons[stay].tolist()), tx.tid)


@dataclass(frozen=True)
class DiscardResult:
    """What a discard did: records deleted, records left (and why), the commit (None: no change)."""

    tag: str
    discarded: int
    remaining: Summary
    tid: bytes | None


def discard(store: neostore.Store, tag: str, reason: str | None = None, expected: int | None = None) -> DiscardResult:
    """Delete the records of ``tag``'s quarantine whose reason is ``reason`` (all of them when None), in one
    commit under the commit lock.

    ``expected``: how many records the caller means to delete (the count it
    showed); when the quarantine holds another number of them now,
    :class:`QuarantineChanged` and nothing is deleted. NoQuarantine if
    ``tag`` has no quarantine stream.
    """
    what = "every record" if reason is None else f"the records quarantined for {reason!r}"
    with arrays.transaction(store, message=f"discard quarantine {tag}: {what}") as tx:
        tx.lock()
        if tag not in arrays.list_streams(tx, quarantine=True):
            raise NoQuarantine(f"stream {tag!r} has no quarantine (windvane quarantine ls lists those there are)")
        rows = stream_edit.read_rows(tx, tag, quarantine=True)
        reasons = rows["reason"].astype(object)
        gone = np.ones(len(reasons), dtype=bool) if reason is None else reasons == reason
        count = int(gone.sum())
        if expected is not None and count != expected:
            raise QuarantineChanged(
                f"the quarantine of {tag!r} holds {count} of {what} now, not the {expected} asked for: "
                "nothing was discarded; look again and confirm the new count"
            )
        stay = ~gone
        if count:
            stream_edit.refill(tx, tag, {name: values[stay] for name, values in rows.items()}, quarantine=True)
        else:
            tx.abort()
    return DiscardResult(tag, count, summary(tag, reasons[stay].tolist()), tx.tid)
