"""MQTT messages to events: the topic names the tag, the payload holds the records (sans-IO).

Topic to tag: the topic's levels joined by dots, ``plant1/turbine7/scada``
-> ``plant1.turbine7.scada``, routed by the schemas' tag patterns like any
other source (a topic with empty levels gives a tag that cannot name a
stream: ingest quarantines its records under ``ingest.prepare.INVALID_TAG``).

Payload, by its first byte (after whitespace and a UTF-8 byte order mark):
``{`` or ``[`` is JSON, anything else msgpack. Either holds a map (one
record), an array of maps (one record each), or ``[time, map]`` (one
record at that time); an array element that is itself ``[time, map]`` is
one record at that time too. Elements that are not maps are kept as
records, for ingest to quarantine with the reason and their own bytes.

Event time: the ``time`` of ``[time, map]``; else the record's ``time``
field, else its ``timestamp`` field, which is then removed from the record;
else the arrival time. A time is an ISO 8601 string (no zone: UTC;
fractions to the nanosecond) or a number since the Unix epoch whose
magnitude says the unit: below 1e11 seconds, below 1e14 milliseconds, below
1e17 microseconds, else nanoseconds (so seconds up to the year 5138, and
what JavaScript's ``Date.now()`` sends); msgpack's Timestamp and fluentd's
EventTime are read too. A ``time``/``timestamp`` field that is not a time
stays in the record, which gets the arrival time (as fluentd's in_http
does); an unreadable time in ``[time, map]`` makes the event
:data:`ingest.batch.INVALID_TIME`, which ingest quarantines.

A payload that is neither JSON nor msgpack (or is empty) becomes one
:class:`UnreadablePayload` record with the payload as its bytes: ingest
quarantines it verbatim ("a record must be a map of field names to
values, not UnreadablePayload (invalid JSON: line 1 column 9)").
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import msgpack

from ingest.batch import INVALID_TIME

from ..event_time import time_ns

__all__ = ["Events", "UnreadablePayload", "decode_payload", "time_ns", "topic_to_tag"]

_TIME_FIELDS = ("time", "timestamp")
_SPACE = b" \t\r\n"
_BOM = b"\xef\xbb\xbf"
_JSON_SPACE = re.compile(r"[ \t\r\n]*")
_RAW_DECODE = json.JSONDecoder().raw_decode


def topic_to_tag(topic: str) -> str:
    """``a/b/c`` -> ``a.b.c``."""
    return topic.replace("/", ".")


class UnreadablePayload:
    """The record a payload that cannot be decoded becomes; its repr says why (ingest puts it in the reason)."""

    __slots__ = ("why",)

    def __init__(self, why: str):
        self.why = why

    def __repr__(self) -> str:
        return f"({self.why})"


@dataclass(slots=True)
class Events:
    """The events one payload holds: a time, a record and the bytes it arrived as, for each."""

    times: list[int]
    records: list[Any]
    raws: list[bytes]


def _pair(item: Any) -> tuple[int, Any] | None:
    """(time, record) of a ``[time, map]`` item; None for other shapes."""
    if type(item) is list and len(item) == 2 and type(item[1]) is dict and type(item[0]) is not dict:
        ns = time_ns(item[0])
        return (INVALID_TIME if ns is None else ns), item[1]
    return None


def _record_time(record: Any, arrival_ns: int) -> int:
    """The time of a record from its ``time`` or ``timestamp`` field (removed when used), else ``arrival_ns``."""
    if type(record) is dict:
        for name in _TIME_FIELDS:
            if name in record:
                ns = time_ns(record[name])
                if ns is not None:
                    del record[name]
                    return ns
                break
    return arrival_ns


def _skip_space(text: str, at: int) -> int:
    return _JSON_SPACE.match(text, at).end()


def _json_items(text: str) -> tuple[Any, list[tuple[Any, bytes]] | None]:
    """The JSON document of ``text`` and, if it is an array, its elements with the bytes of each."""
    at = _skip_space(text, 0)
    if not text.startswith("[", at):
        return json.loads(text), None
    items = []
    at = _skip_space(text, at + 1)
    if not text.startswith("]", at):
        while True:
            value, end = _RAW_DECODE(text, at)
            items.append((value, text[at:end].encode("utf-8")))
            at = _skip_space(text, end)
            if text.startswith(",", at):
                at = _skip_space(text, at + 1)
            elif text.startswith("]", at):
                break
            else:
                raise json.JSONDecodeError("Expecting ',' delimiter", text, at)
    if _skip_space(text, at + 1) != len(text):
        raise json.JSONDecodeError("Extra data", text, at + 1)
    return [value for value, _ in items], items


def _msgpack_items(payload: bytes) -> tuple[Any, list[tuple[Any, bytes]] | None]:
    """The msgpack object of ``payload`` and, if it is an array, its elements with the bytes of each."""
    if not (0x90 <= payload[0] <= 0x9F or payload[0] in (0xDC, 0xDD)):
        return msgpack.unpackb(payload, raw=False, strict_map_key=False), None
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=False, max_buffer_size=len(payload))
    unpacker.feed(payload)
    items = []
    for _ in range(unpacker.read_array_header()):
        start = unpacker.tell()
        value = unpacker.unpack()
        items.append((value, payload[start:unpacker.tell()]))
    if unpacker.tell() != len(payload):
        raise msgpack.ExtraData(None, payload[unpacker.tell():])
    return [value for value, _ in items], items


def _why(exc: Exception) -> str:
    """A payload's decoding error in a few words (ingest shows 40 characters of it)."""
    if isinstance(exc, json.JSONDecodeError):
        return f"invalid JSON: line {exc.lineno} column {exc.colno}"
    if isinstance(exc, UnicodeDecodeError):
        return f"JSON that is not UTF-8 (byte {exc.start})"
    if isinstance(exc, RecursionError):
        return "a payload nested too deeply"
    if isinstance(exc, msgpack.ExtraData):
        return f"not JSON nor msgpack: {len(exc.extra)} extra bytes"
    if isinstance(exc, msgpack.OutOfData):
        return "not JSON nor msgpack: truncated"
    return f"not JSON nor msgpack: {type(exc).__name__}"


def decode_payload(payload: bytes, arrival_ns: int) -> Events:
    """The events of one MQTT payload (see the module docstring); never raises."""
    body = payload.lstrip(_SPACE)
    if not body:
        return Events([arrival_ns], [UnreadablePayload("empty payload")], [payload])
    try:
        if body.startswith(_BOM) or body[:1] in (b"{", b"["):
            doc, items = _json_items(payload.decode("utf-8-sig"))
        else:
            doc, items = _msgpack_items(payload)
    except (ValueError, TypeError, msgpack.UnpackException, RecursionError) as exc:  # JSON errors are ValueErrors
        return Events([arrival_ns], [UnreadablePayload(_why(exc))], [payload])
    pair = _pair(doc)
    if items is None or pair is not None:
        time, record = pair if pair is not None else (_record_time(doc, arrival_ns), doc)
        return Events([time], [record], [payload])
    out = Events([], [], [])
    for value, raw in items:
        pair = _pair(value)
        time, record = pair if pair is not None else (_record_time(value, arrival_ns), value)
        out.times.append(time)
        out.records.append(record)
        out.raws.append(raw)
    return out
