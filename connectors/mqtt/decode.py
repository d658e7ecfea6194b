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

JSON is RFC 8259's: ``NaN`` and ``Infinity`` make a payload not JSON, and a
number's time is read from its text, exact to the nanosecond.

Event time: the ``time`` of ``[time, map]``; else the record's ``time``
field, else its ``timestamp`` field, which is then removed from the record;
else the arrival time. Each is read by windvane's one time rule,
:mod:`ingest.times` (epoch numbers by magnitude, ISO 8601 text, msgpack
Timestamp, fluentd EventTime). A time that is not a time makes its record
quarantined, verbatim, with a reason naming the value
(:attr:`Events.faults`).

A payload that is neither JSON nor msgpack (or is empty) becomes one
event with no record, the payload as its bytes and a fault saying why:
ingest quarantines it verbatim with that reason ("unreadable MQTT payload
(invalid JSON: line 1 column 9)").
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import msgpack

from windvane.ingest.batch import INVALID_TIME
from windvane.ingest.times import not_a_time, time_ns

from ..json_text import JsonReader, skip_space

__all__ = ["UNREADABLE", "Events", "decode_payload", "topic_to_tag"]

_TIME_FIELDS = ("time", "timestamp")
#: How the quarantine reason of a payload that cannot be decoded begins (why follows, in parentheses).
UNREADABLE = "unreadable MQTT payload"
_SPACE = b" \t\r\n"
_BOM = b"\xef\xbb\xbf"


def topic_to_tag(topic: str) -> str:
    """``a/b/c`` -> ``a.b.c``."""
    return topic.replace("/", ".")


@dataclass(slots=True)
class Events:
    """The events one payload holds: a time, a record and the bytes it arrived as, for each.

    ``faults``: index -> why, for the records whose time is not a time.
    """

    times: list[int]
    records: list[Any]
    raws: list[bytes]
    faults: dict[int, str] = field(default_factory=dict)


def _pair(item: Any) -> tuple[int, Any, str | None] | None:
    """(time, record, fault) of a ``[time, map]`` item; None for other shapes."""
    if type(item) is list and len(item) == 2 and type(item[1]) is dict and type(item[0]) is not dict:
        ns = time_ns(item[0])
        return (INVALID_TIME, item[1], not_a_time(item[0])) if ns is None else (ns, item[1], None)
    return None


def _timed(item: Any, arrival_ns: int) -> tuple[int, Any, str | None]:
    """(time, record, fault) of a payload item: a ``[time, map]`` pair or a record timed by its fields."""
    pair = _pair(item)
    if pair is not None:
        return pair
    if type(item) is dict:
        for name in _TIME_FIELDS:
            if name in item:
                ns = time_ns(item[name])
                if ns is None:
                    return arrival_ns, item, not_a_time(item[name])
                del item[name]
                return ns, item, None
    return arrival_ns, item, None


def _json_items(text: str) -> tuple[Any, list[tuple[Any, bytes]] | None]:
    """The JSON document of ``text`` (RFC 8259's, :mod:`connectors.json_text`) and, if it is an array, its
    elements with the bytes of each; times as sent (:func:`_exact_times`)."""
    reader = JsonReader()
    doc, items = _json_parts(text, reader)
    exact = reader.exact_numbers()
    if exact is not None:
        for item in (doc, *doc) if type(doc) is list else (doc,):  # the payload's [time, map], or its items'
            _exact_times(item, exact)
    return doc, items


def _exact_times(item: Any, exact: Any) -> None:
    """``item``'s float time (of ``[time, map]``, or its time field) replaced by the exact number sent."""
    if type(item) is list and len(item) == 2 and type(item[0]) is float:
        item[0] = exact(item[0])
    elif type(item) is dict:
        for name in _TIME_FIELDS:
            if type(item.get(name)) is float:
                item[name] = exact(item[name])


def _json_parts(text: str, reader: JsonReader) -> tuple[Any, list[tuple[Any, bytes]] | None]:
    at = skip_space(text, 0)
    if not text.startswith("[", at):
        return reader.loads(text), None
    items = []
    at = skip_space(text, at + 1)
    if not text.startswith("]", at):
        while True:
            value, end = reader.raw_decode(text, at)
            items.append((value, text[at:end].encode("utf-8")))
            at = skip_space(text, end)
            if text.startswith(",", at):
                at = skip_space(text, at + 1)
            elif text.startswith("]", at):
                break
            else:
                raise json.JSONDecodeError("Expecting ',' delimiter", text, at)
    if skip_space(text, at + 1) != len(text):
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
        items.append((value, payload[start : unpacker.tell()]))
    if unpacker.tell() != len(payload):
        raise msgpack.ExtraData(None, payload[unpacker.tell() :])
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


def _unreadable(payload: bytes, arrival_ns: int, why: str) -> Events:
    """The one event of a payload that cannot be decoded: no record, its fault saying why."""
    return Events([arrival_ns], [None], [payload], {0: f"{UNREADABLE} ({why})"})


def decode_payload(payload: bytes, arrival_ns: int) -> Events:
    """The events of one MQTT payload (see the module docstring); never raises."""
    body = payload.lstrip(_SPACE)
    if not body:
        return _unreadable(payload, arrival_ns, "empty")
    try:
        if body.startswith(_BOM) or body[:1] in (b"{", b"["):
            doc, items = _json_items(payload.decode("utf-8-sig"))
        else:
            doc, items = _msgpack_items(payload)
    except (ValueError, TypeError, msgpack.UnpackException, RecursionError) as exc:  # JSON errors are ValueErrors
        return _unreadable(payload, arrival_ns, _why(exc))
    out = Events([], [], [])
    for value, raw in [(doc, payload)] if items is None or _pair(doc) is not None else items:
        time, record, fault = _timed(value, arrival_ns)
        if fault is not None:
            out.faults[len(out.records)] = fault
        out.times.append(time)
        out.records.append(record)
        out.raws.append(raw)
    return out
