"""Sans-IO decoding of the Fluentd Forward protocol v1: bytes in, :class:`ingest.batch.Batch` out.

Two layers, neither touches a socket:

* :class:`FrameReader` (:mod:`.framing`) splits a connection's byte stream into top-level
  values (msgpack, or JSON when the first byte is ``{`` or ``[``, as
  fluentd's in_forward decides) and enforces ``chunk_size_limit`` on each.
* :func:`decode_message` turns one value into a :class:`Decoded`: a Batch
  of one tag plus the ``chunk`` option to acknowledge, for the four event
  modes (Message, Forward, PackedForward, CompressedPackedForward with
  gzip or zstd).

:class:`ForwardDecoder` chains both for callers without a handshake.

**Malformed vs invalid.** A message is *malformed* (:class:`MalformedMessage`:
the connection is closed, nothing of the message is acknowledged) when
its framing cannot be read: bytes that are not msgpack/JSON, a top-level
value that is not an array (nil is a heartbeat and is skipped), an array
of fewer than 2 or more than 4 elements, a tag that is not a UTF-8
string, entries that are neither an array nor str/bin, a Forward or
PackedForward entry that is not a 2-element ``[time, record]`` array,
packed entries that end inside an entry, a compressed payload that does
not decompress (bad or truncated gzip/zstd, unknown ``compressed``
value), an option that is not a map, a ``chunk`` that is not a string,
a map key msgpack cannot hash, arrays or maps longer than
:data:`MAX_CONTAINER_LEN`, nesting deeper than msgpack's limit.
Everything else is *invalid at most* and reaches ingest in the Batch,
which validates against the tag's schema and quarantines what fails:
records that are not maps (including nil), and times that cannot be read
(strings, maps, out-of-range numbers), whose ``times[i]`` is
:data:`INVALID_TIME`. ``Batch.raw(i)`` returns the verbatim bytes of
packed entries, so a quarantined entry keeps what the client sent.

**Times.** Batch times are int64 nanoseconds since the epoch in an
``array('q')``. Integer seconds and EventTime (ext type 0, fixext8
``D7 00`` or ext8 ``C7 08 00``) are read; Fluent Bit 5's
``[EventTime, {metadata}]`` time form uses its first element (the
metadata map is dropped from the Batch; ``raw(i)`` still holds it); a
float of seconds is accepted (fluent-logger-python sends one from
``emit_with_time`` with a float); 0, an EventTime of second 0, and nil
mean "now", as in in_forward. Any other time is read by windvane's one
time rule (:mod:`ingest.times`: epoch numbers by magnitude, ISO 8601
text); one that is not a time is :data:`INVALID_TIME`, and the Batch's
``faults`` name its value for the quarantine.
"""

from __future__ import annotations

import functools
import json
import struct
import time
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from operator import attrgetter, itemgetter
from typing import Any

import msgpack
import msgspec
import numpy as np

from windvane.ingest.batch import INVALID_TIME, Batch, Undecoded
from windvane.ingest.times import not_a_time, time_ns

from ..json_text import JsonReader
from .bin_text import BinAsStr, takes_text_only
from .config import ForwardConfig
from .decompress import decompress_entries
from .errors import MalformedMessage
from .framing import Frame, FrameReader, bulk_head
from .msgpack_read import (
    HEAD_BYTES,
    MAX_CONTAINER_LEN,
    EventTimeBytes,
    header_len,
    message_ext_hook,
    unpacker,
)

SOURCE = "forward"
_NS = 1_000_000_000
_SECONDS_BELOW = 10**11  # integers below this are seconds by ingest.times' rule (above: ms, us, ns)
_unpack_event_time = struct.Struct(">II").unpack
_first = itemgetter(0)
_second = itemgetter(1)
_code = attrgetter("code")
_data = attrgetter("data")

#: A message's option map (``chunk``, ``size``, ``compressed``), its keys as text (:func:`_text_keys`).
Option = dict[Any, Any]
#: ``(tag, entries, option)`` of a (Compressed)PackedForward message read by the fast path.
Packed = tuple[str, memoryview, Option | None]


def _kind(value: Any) -> str:
    return "nil" if value is None else type(value).__name__


def _time_ns(t: Any) -> int:
    """Nanoseconds of one time value (the slow path; see :func:`_times_ns`): EventTime, in_forward's
    "now" (0, nil, an EventTime of second 0), else windvane's one time rule (:func:`ingest.times.time_ns`)."""
    tt = type(t)
    if tt is list and t:
        # Fluent Bit 5: [EventTime, {metadata}]
        t = t[0]
        tt = type(t)
    if tt is bytes or tt is EventTimeBytes:
        if len(t) != 8:
            return INVALID_TIME
        seconds, nanos = _unpack_event_time(t)
        if nanos >= _NS:
            return INVALID_TIME
        return seconds * _NS + nanos if seconds else time.time_ns()
    if t is None or ((tt is int or tt is float) and t == 0):
        return time.time_ns()
    ns = time_ns(t)
    return INVALID_TIME if ns is None else ns


def _time_faults(times: array[int], values: list[Any]) -> dict[int, str] | None:
    """Why each time of ``times`` that is :data:`INVALID_TIME` is not a time, naming its value; None if none is."""
    if not len(times) or min(times) != INVALID_TIME:
        return None
    return {i: not_a_time(_as_sent(v)) for i, (ns, v) in enumerate(zip(times, values)) if ns == INVALID_TIME}


def _as_sent(t: Any) -> Any:
    """A time value as its quarantine reason names it: an EventTime (its 8 bytes, msgspec's Ext, or Fluent
    Bit's ``[EventTime, {metadata}]``) as msgpack's ExtType, which :func:`ingest.times.not_a_time` reads."""
    if type(t) is list and t and type(t[0]) in (bytes, EventTimeBytes):
        t = t[0]
    if type(t) is msgspec.msgpack.Ext and t.code == 0:
        t = bytes(t.data)
    if type(t) in (bytes, EventTimeBytes) and len(t) == 8:
        return msgpack.ExtType(0, bytes(t))
    return bytes(t) if type(t) is EventTimeBytes else t


def _times_ns(values: list[Any]) -> array[int]:
    """Nanoseconds of a chunk's time values, vectorised when they are all EventTimes or all integer seconds."""
    out = array("q")
    if len(values) < 8:  # a sensor's chunk: numpy's set-up costs more than converting one by one
        out.extend(map(_time_ns, values))
        return out
    types = set(map(type, values))
    ns = None
    if (types == {bytes} or types == {EventTimeBytes}) and set(map(len, values)) == {8}:
        pairs = np.frombuffer(b"".join(values), dtype=">u4").reshape(-1, 2)
        seconds = pairs[:, 0].astype(np.int64)
        ns = seconds * _NS + pairs[:, 1]
        zero = seconds == 0
        if zero.any():  # EventTime of second 0 means "now", as in in_forward (time.to_i == 0)
            ns[zero] = time.time_ns()
        ns[pairs[:, 1] >= _NS] = INVALID_TIME  # nanoseconds no clock gives: the record is quarantined
    elif types == {int} and min(values) > 0 and max(values) < _SECONDS_BELOW:
        ns = np.array(values, dtype=np.int64) * _NS
    if ns is None:
        out.extend(map(_time_ns, values))
    else:
        out.frombytes(ns.astype(np.int64, copy=False).tobytes())
    return out


# ---------------------------------------------------------------------------
# Messages


@dataclass(slots=True)
class Decoded:
    """One decoded Forward message: its events and the ``chunk`` option to acknowledge.

    ``chunk`` is the option's value exactly as it arrived (str or bytes),
    ``key`` its bytes (the idempotency key for :meth:`ingest.batch.Sink.submit`);
    both None when the client asked for no ack.
    """

    batch: Batch | Undecoded  # Undecoded: PackedForward entries left for ingest's workers (``defer``)
    chunk: str | bytes | None
    key: bytes | None
    mode: str  # "message", "forward", "packed" or "compressed"


def parse_frame(frame: Frame, json_mode: bool = False) -> Any:
    """The value of one framed message (msgpack, or JSON text); :class:`MalformedMessage` if unreadable."""
    try:
        if json_mode:
            return _json_message(frame)
        up = unpacker(max(len(frame), 1), message_ext_hook)
        up.feed(frame)
        value = up.unpack()
    except msgpack.OutOfData:
        raise MalformedMessage("unreadable msgpack message: it ends early") from None
    except (ValueError, TypeError, RecursionError, msgpack.UnpackException) as exc:
        raise MalformedMessage(f"unreadable {'JSON' if json_mode else 'msgpack'} message: {exc}") from exc
    if up.tell() != len(frame):
        raise MalformedMessage(f"msgpack message has {len(frame) - up.tell()} bytes after its end")
    return value


def _json_message(frame: Frame) -> Any:
    """A JSON-mode message, read strictly (:mod:`connectors.json_text`), its float times as sent: the exact
    Decimal of one too long for a float64."""
    text = bytes(frame)  # the JSON framer gives bytes: this is the same object
    reader = JsonReader()
    value = reader.loads(text.decode(json.detect_encoding(text), "surrogatepass"))
    exact = reader.exact_numbers()
    if exact is None or type(value) is not list or len(value) < 2:
        return value
    # A float 0 stays one: Forward's "now".
    if type(value[1]) is float and value[1]:  # Message mode: [tag, time, record]
        value[1] = exact(value[1])
    elif type(value[1]) is list:  # Forward mode: [tag, [[time, record], ...]]
        for entry in value[1]:
            if type(entry) is list and entry and type(entry[0]) is float and entry[0]:
                entry[0] = exact(entry[0])
    return value


def read_packed(frame: Frame, json_mode: bool = False) -> Packed | None:
    """``(tag, entries, option)`` of a (Compressed)PackedForward message the fast path reads, else None
    (the general path of :func:`decode_message` reads it); raises what :func:`decode_message` would
    for a bad tag or option. Pass it on to :func:`decode_message` (``packed``) to read the frame once."""
    return None if json_mode else _split_packed(frame)


def decode_message(
    frame: Frame,
    *,
    json_mode: bool = False,
    decompressed_size_limit: int = ForwardConfig.decompressed_size_limit,
    defer: bool = False,
    packed: Packed | None = None,
    record_types: Callable[[str], type | None] | None = None,
) -> Decoded | None:
    """Decode one framed message (from :class:`FrameReader`); None for a heartbeat (nil).

    Raises :class:`MalformedMessage` or :class:`OversizeMessage` (the
    decompressed entries exceed ``decompressed_size_limit``); see the
    module docstring for what is malformed. With ``defer``, a PackedForward
    or CompressedPackedForward message read by the fast path keeps its
    entries undecoded (an :class:`ingest.batch.Undecoded` calling
    :func:`decode_entries`): only the framing, tag and options are read
    here, and errors in the entries are raised where they are decoded.
    ``packed``: what :func:`read_packed` gave for ``frame``, if it was asked.
    ``record_types`` gives a tag's record type (the sink's
    :meth:`~ingest.committer.GroupCommitter.record_type`): PackedForward
    entries decoded here are decoded as it where they fit.
    """
    if not json_mode:
        if packed is None:
            packed = _split_packed(frame)
        if packed is not None:
            tag, entries, option = packed
            if defer and (_compressed(option) or _small_events(entries)):
                return _deferred(tag, entries, option, len(frame), decompressed_size_limit)
            return _packed_message(
                tag, entries, option, len(frame), decompressed_size_limit, record_types, _entries_room(frame, entries)
            )
    return decode_value(
        parse_frame(frame, json_mode), frame, decompressed_size_limit=decompressed_size_limit, record_types=record_types
    )


def decode_value(
    value: Any,
    frame: Frame,
    *,
    decompressed_size_limit: int = ForwardConfig.decompressed_size_limit,
    record_types: Callable[[str], type | None] | None = None,
) -> Decoded | None:
    """Decode a message already parsed into ``value`` from the bytes ``frame``; see :func:`decode_message`."""
    if value is None:
        return None
    if type(value) is not list:
        raise MalformedMessage(f"message is {_kind(value)}, expected an array [tag, ...]")
    n = len(value)
    if n < 2 or n > 4:
        raise MalformedMessage(f"message is an array of {n} elements, expected 2 to 4")
    tag = value[0]
    if type(tag) is bytes:  # bin from a sender in ASCII-8BIT (fluentd's worker): UTF-8 text is the tag
        try:
            tag = tag.decode("utf-8")
        except UnicodeDecodeError:
            raise MalformedMessage(f"tag {tag[:80]!r} is not valid UTF-8") from None
    if type(tag) is not str:
        raise MalformedMessage(f"tag is {_kind(tag)}, expected a string")
    if not tag.isascii():
        try:
            tag.encode("utf-8")
        except UnicodeEncodeError:
            raise MalformedMessage(f"tag {tag!r} is not valid UTF-8") from None
    entries = value[1]
    kind = type(entries)
    size = len(frame)
    if kind is bytes or kind is str:
        if n > 3:
            raise MalformedMessage(f"PackedForward message of tag {tag!r} has {n} elements, expected 2 or 3")
        payload = entries if kind is bytes else entries.encode("utf-8", "surrogateescape")
        return _packed_message(tag, payload, _option(value, 2, tag), size, decompressed_size_limit, record_types)
    if kind is list:
        if n > 3:
            raise MalformedMessage(f"Forward message of tag {tag!r} has {n} elements, expected 2 or 3")
        option = _option(value, 2, tag)
        return _decoded(_decode_forward(tag, entries, _bytes(frame)), option, "forward")
    if n < 3:
        raise MalformedMessage(f"Message-mode message of tag {tag!r} has no record: expected [tag, time, record]")
    option = _option(value, 3, tag)
    times = array("q", (_time_ns(entries),))
    batch = Batch(
        tag, times, [value[2]], _FramesRaw([_bytes(frame)]), SOURCE, size, faults=_time_faults(times, [entries])
    )
    return _decoded(batch, option, "message")


def _bytes(frame: Frame) -> bytes:
    """A Forward or Message-mode message's bytes, for its events' ``raw``: such messages arrive as bytes (a bulk
    buffer holds PackedForward entries), so this is the same object."""
    return bytes(frame)


def _text_keys(option: Option | None) -> Option | None:
    """An option map with bin keys (a sender in ASCII-8BIT) keyed by their text, as in_forward reads them."""
    if not option:
        return option
    for k in option:  # a loop, not all() over a generator: every message of a trickle asks
        if type(k) is not str:
            break
    else:
        return option
    out: Option = {}
    for k, v in option.items():
        if type(k) is bytes:
            k = k.decode("utf-8", "surrogateescape")
        if k == "compressed" and type(v) is bytes:
            v = v.decode("utf-8", "surrogateescape")
        out[k] = v
    return out


def _packed_message(
    tag: str,
    payload: bytes | memoryview,
    option: Option | None,
    size: int,
    limit: int,
    record_types: Callable[[str], type | None] | None = None,
    room: tuple[bytearray | memoryview, int] | None = None,
) -> Decoded:
    compressed = option.get("compressed") if option else None
    mode = "packed"
    if compressed is not None and compressed != "text":
        payload = decompress_entries(payload, compressed, limit, tag)
        mode = "compressed"
        room = None
    record_type = None if record_types is None else record_types(tag)
    events = option.get("size") if option else None
    return _decoded(decode_packed(tag, payload, size, record_type, events, room=room), option, mode)


def _entries_room(
    frame: bytes | bytearray | memoryview, entries: memoryview
) -> tuple[bytearray | memoryview, int] | None:
    """``(frame, where its entries start)`` if ``frame`` is writable (a bulk message, see :class:`_Bulk`)
    and its ``entries`` follow a 5-byte str32/bin32 header, where an array header fits; else None."""
    if not (type(frame) is bytearray or (type(frame) is memoryview and not frame.readonly)):
        return None
    found = bulk_head(frame[:HEAD_BYTES])  # what made the framer gather it in a buffer of its own
    if not found or found[0] > len(frame):
        return None
    return frame, found[0] - len(entries)


def decode_entries(
    payload: bytes,
    tag: str,
    size: int,
    compressed: Any,
    limit: int,
    events: Any = None,
    record_type: type | None = None,
) -> list[Batch]:
    """The Batch of PackedForward ``payload`` (decompressed first if ``compressed``); run by ingest's workers.
    ``events``: the count the sender announced (the option's ``size``), see :func:`decode_packed`."""
    if compressed is not None and compressed != "text":
        payload = decompress_entries(payload, compressed, limit, tag)
    return [decode_packed(tag, payload, size, record_type, events)]


#: Events up to this size go to ingest's decode workers. Larger ones carry bulk
#: binary (vibration blocks), decoded here as views of the frame they arrived in
#: (see _entries_room): handing them to a worker, which copies them out and
#: pickles the arrays back, costs more than decoding them here saves.
DEFER_MAX_EVENT_BYTES = 16 << 10


def _compressed(option: Option | None) -> bool:
    return option is not None and option.get("compressed") not in (None, "text")


def _small_events(entries: memoryview) -> bool:
    """Whether the first packed entry is under :data:`DEFER_MAX_EVENT_BYTES` (read from a prefix only)."""
    if len(entries) <= DEFER_MAX_EVENT_BYTES:
        return True  # so is every entry (most messages: a sensor's few events)
    up = msgpack.Unpacker(None, max_buffer_size=DEFER_MAX_EVENT_BYTES + 1, strict_map_key=False)
    up.feed(entries[: DEFER_MAX_EVENT_BYTES + 1])
    try:
        up.skip()
    except msgpack.OutOfData:
        return False  # the first event does not even fit in the prefix
    except Exception:  # noqa: BLE001 - msgpack's errors have no common base: the worker names the fault
        return True
    end: int = up.tell()
    return end <= DEFER_MAX_EVENT_BYTES


def _deferred(tag: str, entries: memoryview, option: Option | None, size: int, limit: int) -> Decoded:
    compressed = option.get("compressed") if option else None
    mode = "packed" if compressed is None or compressed == "text" else "compressed"
    # bytes(): a memoryview does not pickle, and the copy lets the frame go.
    events = option.get("size") if option else None
    undecoded = Undecoded(
        tag, bytes(entries), decode_entries, (tag, size, compressed, limit, events), SOURCE, size, typed=True
    )
    return _decoded(undecoded, option, mode)


def _decoded(batch: Batch | Undecoded, option: Option | None, mode: str) -> Decoded:
    chunk = option.get("chunk") if option else None
    if chunk is None:
        key = None
    elif type(chunk) is str:
        key = chunk.encode("utf-8", "surrogateescape")
    elif type(chunk) is bytes:
        key = chunk
    else:
        raise MalformedMessage(f"option chunk of tag {batch.tag!r} is {_kind(chunk)}, expected a string")
    return Decoded(batch, chunk, key, mode)


def _split_packed(frame: Frame) -> Packed | None:
    """The PackedForward fast path: read the framing by hand so the entries are sliced, never decoded as str.

    Returns None for anything that is not ``[str tag, str|bin entries, map|nil?]``
    so that the general path (and its error messages) handles it.
    """
    if not frame or frame[0] not in (0x92, 0x93):
        return None
    header = header_len(frame, 1, True, True)
    if header is None:
        return None
    n, pos = header
    raw_tag = bytes(frame[pos : pos + n])
    pos += n
    entries = header_len(frame, pos, True, True)
    if entries is None or len(raw_tag) != n:
        return None
    n, pos = entries
    end = pos + n
    if end > len(frame):
        return None
    try:
        tag = raw_tag.decode("utf-8")
    except UnicodeDecodeError:
        raise MalformedMessage(f"tag {raw_tag!r} is not valid UTF-8") from None
    option = None
    if frame[0] == 0x93:
        option = parse_frame(frame[end:]) if end < len(frame) else None
        if option is not None and type(option) is not dict:
            raise MalformedMessage(f"option of tag {tag!r} is {_kind(option)}, expected a map")
        option = _text_keys(option)
    elif end != len(frame):
        return None
    return tag, memoryview(frame)[pos:end], option


def _option(value: list[Any], index: int, tag: str) -> Option | None:
    if len(value) <= index:
        return None
    option = value[index]
    if option is None or type(option) is dict:
        return _text_keys(option)
    raise MalformedMessage(f"option of tag {tag!r} is {_kind(option)}, expected a map")


def _decode_forward(tag: str, entries: list[Any], frame: bytes) -> Batch:
    for i, entry in enumerate(entries):
        if type(entry) is not list or len(entry) != 2:
            raise MalformedMessage(f"Forward entry {i} of tag {tag!r} is {_kind(entry)}, expected [time, record]")
    stamps = list(map(_first, entries))
    times = _times_ns(stamps)
    return Batch(
        tag,
        times,
        list(map(_second, entries)),
        _ForwardRaw(frame),
        SOURCE,
        len(frame),
        faults=_time_faults(times, stamps),
    )


class _FramesRaw:
    """``Batch.raw`` of Message-mode events: the whole message each arrived as."""

    __slots__ = ("frames",)

    def __init__(self, frames: list[bytes]) -> None:
        self.frames = frames

    def __call__(self, i: int) -> bytes:
        return self.frames[i]


class _ForwardRaw:
    """``Batch.raw`` of Forward-mode entries, located inside the message when first asked for."""

    __slots__ = ("_frame", "_offsets")

    def __init__(self, frame: bytes) -> None:
        self._frame = frame
        self._offsets: array[int] | None = None

    def __call__(self, i: int) -> bytes:
        if self._offsets is None:
            if self._frame[:1] in (b"[", b"{"):  # JSON: the entry's text is not at hand; the whole message is
                return self._frame
            up = unpacker(max(len(self._frame), 1))
            up.feed(self._frame)
            up.read_array_header()
            up.skip()  # tag
            count = up.read_array_header()
            offsets = array("q", [up.tell()])
            for _ in range(count):
                up.skip()
                offsets.append(up.tell())
            self._offsets = offsets
        return self._frame[self._offsets[i] : self._offsets[i + 1]]


def decode_packed(
    tag: str,
    payload: bytes | memoryview,
    size: int = 0,
    record_type: type | None = None,
    events: Any = None,
    *,
    room: tuple[bytearray | memoryview, int] | None = None,
) -> Batch:
    """Decode concatenated msgpack ``[time, record]`` entries (PackedForward) in one Unpacker pass.

    The entries are listed by msgpack in C, checked and split with C-level
    ``map``s, and their times converted in one vectorised step: no Python
    code runs per event on this path. With ``record_type`` (ingest's type
    for the tag's records), entries that all decode as it come back typed
    (:func:`_decode_typed`), the others as plain maps. ``events`` is the
    number of entries the sender announced (the option's ``size``), if any:
    the typed decode trusts it to skip counting them and falls back to
    counting if it is wrong. ``room``: where the typed decode may write
    its array header (see :func:`_entries_room`).
    """
    if record_type is not None:
        batch = _decode_typed(tag, payload, size, record_type, events, room)
        if batch is not None:
            return batch
    up = unpacker(max(len(payload), 1))
    up.feed(payload)
    try:
        entries = list(up)
    except Exception as exc:  # any of msgpack's errors (they share no base) means the entries are malformed
        raise MalformedMessage(
            f"PackedForward entries of tag {tag!r} unreadable at byte {up.tell()} of {len(payload)}: {exc}"
        ) from exc
    try:
        up.read_bytes(1)  # msgpack refuses this while an entry is incomplete (tell() is no help there)
    except ValueError:
        raise MalformedMessage(
            f"PackedForward entries of tag {tag!r} end inside entry {len(entries)}: truncated"
        ) from None
    if entries and (set(map(type, entries)) != {list} or set(map(len, entries)) != {2}):
        for i, entry in enumerate(entries):
            if type(entry) is not list or len(entry) != 2:
                raise MalformedMessage(
                    f"PackedForward entry {i} of tag {tag!r} is {_kind(entry)}"
                    f"{f' of {len(entry)} elements' if type(entry) is list else ''}, expected [time, record]"
                )
    stamps = list(map(_first, entries))
    times = _times_ns(stamps)
    records = list(map(_second, entries))
    return Batch(tag, times, records, _PackedRaw(payload), SOURCE, size, faults=_time_faults(times, stamps))


def _count_entries(payload: bytes | memoryview) -> int | None:
    """How many whole msgpack values ``payload`` holds, or None if it ends inside one or cannot be read."""
    up = msgpack.Unpacker(
        None,
        max_buffer_size=max(len(payload), 1),
        strict_map_key=False,
        max_array_len=MAX_CONTAINER_LEN,
        max_map_len=MAX_CONTAINER_LEN,
    )
    up.feed(payload)
    skip = up.skip
    count = 0
    try:
        while True:
            skip()
            count += 1
    except msgpack.OutOfData:
        return count if up.tell() == len(payload) else None
    except Exception:  # noqa: BLE001 - msgpack's errors share no base: the plain decode names whichever it is
        return None


#: A decoder of framed PackedForward entries: msgspec's, or one that reads their bin as str first.
_EntriesDecoder = msgspec.msgpack.Decoder[list[Any]] | BinAsStr


@functools.lru_cache(maxsize=256)
def _entries_decoders(record_type: type) -> tuple[_EntriesDecoder, ...]:
    """The decoders of entries whose records are ``record_type``, then, for a map type, of entries whose records
    are maps with msgpack bin names, if the type names what those decode as (its ``bin_keyed``, see
    :class:`ingest.record_types.FieldsRecord`; a vibration block's type does not): either decodes in C.

    Between them, where no field of the type takes bytes, the first once
    the records' bin is read as str (:mod:`.bin_text`): fluentd's records,
    names and text all bin, then decode as the type, as if sent as str.
    """
    bin_keyed = getattr(record_type, "bin_keyed", None)
    typed = _entries_of(record_type)
    decoders: list[_EntriesDecoder] = [typed]
    if bin_keyed is not None:
        if takes_text_only(record_type):
            decoders.append(BinAsStr(typed))
        decoders.append(_entries_of(bin_keyed))
    return tuple(decoders)


def _entries_of(kind: Any) -> msgspec.msgpack.Decoder[list[Any]]:
    """The decoder of framed entries whose records are ``kind``."""
    return msgspec.msgpack.Decoder(list[tuple[msgspec.msgpack.Ext | int | float, kind]])


def _decode_typed(
    tag: str,
    payload: bytes | memoryview,
    size: int,
    record_type: type,
    events: Any = None,
    room: tuple[bytearray | memoryview, int] | None = None,
) -> Batch | None:
    """The entries with records of ``record_type`` (maps with msgpack bin names: of its
    ``bin_keyed``), decoded and checked by msgspec in C; None if any does not fit.

    msgspec reads one value, so the entries get an array header in front:
    the count of ``events`` if it is one (a wrong count fails the decode,
    and the entries are then counted), else the entries counted. With
    ``room`` (see :func:`_entries_room`) the header is written over the
    entries' own for the decode, so they are not copied.
    Only EventTimes and numbers are taken as times here; any other time
    form (Fluent Bit's ``[EventTime, metadata]``, nil, bin) goes the plain
    way, which knows them all.
    """
    decoders = _entries_decoders(record_type)
    entries = None
    if type(events) is int and 0 < events < 1 << 32:
        entries = _decode_counted(decoders, payload, events, room)
    if entries is None:
        count = _count_entries(payload)
        if count is None or count == events:
            return None
        entries = _decode_counted(decoders, payload, count, room)
        if entries is None:
            return None
    stamps = list(map(_first, entries))
    if not stamps:
        times = array("q")
    elif set(map(type, stamps)) == {msgspec.msgpack.Ext}:
        if set(map(_code, stamps)) != {0}:
            return None
        times = _times_ns(list(map(_data, stamps)))
    elif msgspec.msgpack.Ext in set(map(type, stamps)):
        return None  # EventTimes mixed with numbers: rare, the plain way converts them one by one
    else:
        times = _times_ns(stamps)
    return Batch(
        tag,
        times,
        list(map(_second, entries)),
        _PackedRaw(payload),
        SOURCE,
        size,
        typed=True,
        faults=_time_faults(times, stamps),
    )


def _decode_counted(
    decoders: tuple[_EntriesDecoder, ...],
    payload: bytes | memoryview,
    count: int,
    room: tuple[bytearray | memoryview, int] | None,
) -> list[Any] | None:
    """``payload`` decoded as an array of ``count`` entries by the first of ``decoders`` it fits, or None if it
    is not one or an entry fits none (invalid UTF-8 included). A struct decoder stops at the first name that is
    bin, a bin-keyed one at the first that is str, so the one that does not fit costs next to nothing."""
    header = b"\xdd" + count.to_bytes(4, "big")
    if room is None:
        return _decode_first(decoders, header + payload)
    frame, start = room
    own = bytes(frame[start - 5 : start])
    frame[start - 5 : start] = header
    try:
        # Decoded blocks (memoryview) keep views of the frame: this view is not released here.
        return _decode_first(decoders, memoryview(frame)[start - 5 : start + len(payload)])
    finally:
        frame[start - 5 : start] = own


def _decode_first(decoders: tuple[_EntriesDecoder, ...], data: bytes | memoryview) -> list[Any] | None:
    for decoder in decoders:
        try:
            return decoder.decode(data)
        except (msgspec.MsgspecError, ValueError):
            continue
    return None


class _PackedRaw:
    """``Batch.raw``: the verbatim bytes of packed entry ``i``.

    Offsets are found only when first asked for (a quarantine is rare), by
    skipping over the entries once, so the decode pass stays lean.
    """

    __slots__ = ("_offsets", "_payload")

    def __init__(self, payload: bytes | memoryview) -> None:
        self._payload = payload
        self._offsets: array[int] | None = None

    def __call__(self, i: int) -> bytes:
        offsets = self._offsets
        if offsets is None:
            up = msgpack.Unpacker(None, max_buffer_size=max(len(self._payload), 1), strict_map_key=False)
            up.feed(self._payload)
            offsets = array("q", [0])
            try:
                while True:
                    up.skip()
                    offsets.append(up.tell())
            except msgpack.OutOfData:
                pass
            self._offsets = offsets
        return bytes(self._payload[offsets[i] : offsets[i + 1]])


# ---------------------------------------------------------------------------
# Acks and a whole-stream decoder


def _str_header(n: int) -> bytes:
    if n < 32:
        return bytes((0xA0 | n,))
    if n < 256:
        return bytes((0xD9, n))
    if n < 65536:
        return b"\xda" + n.to_bytes(2, "big")
    return b"\xdb" + n.to_bytes(4, "big")


def _bin_header(n: int) -> bytes:
    if n < 256:
        return bytes((0xC4, n))
    if n < 65536:
        return b"\xc5" + n.to_bytes(2, "big")
    return b"\xc6" + n.to_bytes(4, "big")


def ack_bytes(chunk: str | bytes, json_mode: bool = False) -> bytes:
    """``{"ack": chunk}`` echoing ``chunk`` byte for byte, as msgpack (str as str, bin as bin) or JSON."""
    if json_mode:
        if isinstance(chunk, bytes):
            chunk = chunk.decode("utf-8", "surrogateescape")
        return json.dumps({"ack": chunk}, ensure_ascii=False).encode("utf-8", "surrogateescape")
    if isinstance(chunk, bytes):
        return b"\x81\xa3ack" + _bin_header(len(chunk)) + chunk
    raw = chunk.encode("utf-8", "surrogateescape")
    return b"\x81\xa3ack" + _str_header(len(raw)) + raw


class ForwardDecoder:
    """A whole stream without a handshake: :meth:`feed` bytes, get :class:`Decoded` messages.

    Errors are those of :class:`FrameReader` and :func:`decode_message`,
    raised after every message before them has been yielded.
    """

    def __init__(
        self,
        *,
        chunk_size_limit: int = ForwardConfig.chunk_size_limit,
        decompressed_size_limit: int = ForwardConfig.decompressed_size_limit,
    ) -> None:
        self.frames = FrameReader(chunk_size_limit)
        self.decompressed_size_limit = decompressed_size_limit

    @property
    def json(self) -> bool | None:
        """Whether the stream is JSON (None until its first byte is read)."""
        return self.frames.json

    def feed(self, data: bytes) -> Iterator[Decoded]:
        """The messages ``data`` completes, decoded (heartbeats skipped); ForwardError on a malformed one."""
        for frame in self.frames.feed(data):
            decoded = decode_message(
                frame, json_mode=bool(self.frames.json), decompressed_size_limit=self.decompressed_size_limit
            )
            if decoded is not None:
                yield decoded


__all__ = [
    "INVALID_TIME",
    "MAX_CONTAINER_LEN",
    "Decoded",
    "ForwardDecoder",
    "FrameReader",
    "ack_bytes",
    "decode_entries",
    "decode_message",
    "decode_packed",
    "decode_value",
    "parse_frame",
]


def merge_batches(batches: list[Batch | Undecoded]) -> list[Batch | Undecoded]:
    """Join consecutive Message-mode batches of one tag (fluent-logger sends one message per event).

    Submitting them as one batch saves ingest a batch per event; other
    batches are kept as they are.
    """
    out: list[Batch | Undecoded] = []
    joined: _Joined | None = None  # out[-1] as our own copy, safe to grow, once something was joined to it
    for batch in batches:
        last = out[-1] if out else None
        if (
            isinstance(last, Batch)
            and isinstance(batch, Batch)
            and last.tag == batch.tag
            and isinstance(last.raw, _FramesRaw)
            and isinstance(batch.raw, _FramesRaw)
        ):
            if joined is None:
                joined = _Joined(last, last.raw)
                out[-1] = joined.batch
            joined.add(batch, batch.raw)
        else:
            out.append(batch)
            joined = None
    return out


class _Joined:
    """A copy of a Message-mode batch that the batches of its tag after it are joined to."""

    def __init__(self, first: Batch, raw: _FramesRaw) -> None:
        self.times = array("q", first.times)
        self.records = list(first.records)
        self.frames = list(raw.frames)
        self.batch = Batch(
            first.tag, self.times, self.records, _FramesRaw(self.frames), first.source, first.size, faults=first.faults
        )

    def add(self, batch: Batch, raw: _FramesRaw) -> None:
        if batch.faults:
            start = len(self.times)
            self.batch.faults = {**(self.batch.faults or {}), **{start + i: why for i, why in batch.faults.items()}}
        self.times.extend(batch.times)
        self.records.extend(batch.records)
        self.frames.extend(raw.frames)
        self.batch.size += batch.size
