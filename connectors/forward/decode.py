"""Sans-IO decoding of the Fluentd Forward protocol v1: bytes in, :class:`ingest.batch.Batch` out.

Two layers, neither touches a socket:

* :class:`FrameReader` splits a connection's byte stream into top-level
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
import re
import struct
import time
import zlib
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from operator import attrgetter, itemgetter
from typing import Any

import msgpack
import msgspec
import numpy as np
import zstandard

from windvane.ingest.batch import INVALID_TIME, Batch, Undecoded
from windvane.ingest.times import not_a_time, time_ns

from .config import ForwardConfig
from .errors import MalformedMessage, OversizeMessage

SOURCE = "forward"
"""``times[i]`` of an event whose time could not be read (ingest quarantines it)."""
MAX_CONTAINER_LEN = 1 << 20
"""Longest msgpack array or map accepted. msgpack allocates a container when
it reads its header, so this bounds what a few hostile bytes can allocate."""

_NS = 1_000_000_000
_SECONDS_BELOW = 10**11  # integers below this are seconds by ingest.times' rule (above: ms, us, ns)
_FEED_SLICE = 1 << 20  # at most this much is fed to an Unpacker between limit checks
_HEAD = 512  # bytes kept of a pending message to name its tag if it is too big
_unpack_event_time = struct.Struct(">II").unpack
_first = itemgetter(0)
_second = itemgetter(1)
_code = attrgetter("code")
_data = attrgetter("data")


def _ext_hook(code: int, data: bytes, _ext: Any = msgpack.ExtType) -> Any:
    # EventTime (ext 0) stays its 8 payload bytes: the packed loop converts all
    # of a chunk's times at once (numpy), so no per-event object is made here.
    # Other ext types keep their code.
    return data if code == 0 else _ext(code, data)


class _EventTime(bytes):
    """An EventTime's 8 bytes outside packed entries, where a plain bytes would read as PackedForward entries."""

    __slots__ = ()


def _message_ext_hook(code: int, data: bytes, _ext: Any = msgpack.ExtType) -> Any:
    return _EventTime(data) if code == 0 else _ext(code, data)


def _unpacker(max_buffer_size: int, ext_hook: Any = _ext_hook) -> msgpack.Unpacker:
    # surrogateescape: binary inside a str (out_forward's str32 entries, gzip
    # included) survives the str round trip byte for byte.
    return msgpack.Unpacker(
        None,
        raw=False,
        unicode_errors="surrogateescape",
        ext_hook=ext_hook,
        strict_map_key=False,
        max_buffer_size=max_buffer_size,
        max_str_len=(1 << 32) - 1,
        max_bin_len=(1 << 32) - 1,
        max_ext_len=(1 << 32) - 1,
        max_array_len=MAX_CONTAINER_LEN,
        max_map_len=MAX_CONTAINER_LEN,
    )


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
    if tt is bytes or tt is _EventTime:
        if len(t) != 8:
            return INVALID_TIME
        seconds, nanos = _unpack_event_time(t)
        return seconds * _NS + nanos if seconds else time.time_ns()
    if t is None or ((tt is int or tt is float) and t == 0):
        return time.time_ns()
    ns = time_ns(t)
    return INVALID_TIME if ns is None else ns


def _time_faults(times: array, values: list) -> dict[int, str] | None:
    """Why each time of ``times`` that is :data:`INVALID_TIME` is not a time, naming its value; None if none is."""
    if not len(times) or min(times) != INVALID_TIME:
        return None
    return {i: not_a_time(bytes(v) if type(v) is _EventTime else v)
            for i, (ns, v) in enumerate(zip(times, values)) if ns == INVALID_TIME}


def _times_ns(values: list) -> array:
    """Nanoseconds of a chunk's time values, vectorised when they are all EventTimes or all integer seconds."""
    out = array("q")
    if len(values) < 8:  # a sensor's chunk: numpy's set-up costs more than converting one by one
        out.extend(map(_time_ns, values))
        return out
    types = set(map(type, values))
    ns = None
    if (types == {bytes} or types == {_EventTime}) and set(map(len, values)) == {8}:
        pairs = np.frombuffer(b"".join(values), dtype=">u4").reshape(-1, 2)
        seconds = pairs[:, 0].astype(np.int64)
        ns = seconds * _NS + pairs[:, 1]
        zero = seconds == 0
        if zero.any():  # EventTime of second 0 means "now", as in in_forward (time.to_i == 0)
            ns[zero] = time.time_ns()
    elif types == {int} and min(values) > 0 and max(values) < _SECONDS_BELOW:
        ns = np.array(values, dtype=np.int64) * _NS
    if ns is None:
        out.extend(map(_time_ns, values))
    else:
        out.frombytes(ns.astype(np.int64, copy=False).tobytes())
    return out


# ---------------------------------------------------------------------------
# Framing


class FrameReader:
    """Split one connection's bytes into top-level messages, each as its own bytes.

    The first byte picks the format for the connection's whole life, as in
    in_forward: ``{`` or ``[`` JSON (:attr:`json` is then True), anything
    else msgpack. :meth:`feed` yields the bytes of each message completed
    by ``data`` (decode them with :func:`decode_message`): ``bytes``, or a
    writable ``memoryview`` for a bulk message (see :class:`_Bulk`, and
    :meth:`room` to receive one in place); it then raises
    :class:`OversizeMessage` if a message, complete or not, exceeds
    ``chunk_size_limit`` bytes, or :class:`MalformedMessage` if the bytes
    cannot be framed. Messages before the error are yielded first. After an
    error the reader is unusable. Memory: at most twice the limit (msgpack's
    buffer and the copy messages are cut from).
    """

    def __init__(self, chunk_size_limit: int = ForwardConfig.chunk_size_limit) -> None:
        self.chunk_size_limit = chunk_size_limit
        self.json: bool | None = None
        self._framer: _MsgpackFramer | _JsonFramer | None = None

    def feed(self, data: bytes) -> Iterator[bytes | memoryview | bytearray]:
        """The frames ``data`` completes; the first byte read tells msgpack from JSON.
        MalformedMessage or OversizeMessage when the bytes cannot be framed."""
        if not data:
            return
        if self._framer is None:
            self.json = data[:1] in (b"{", b"[")
            self._framer = _JsonFramer(self.chunk_size_limit) if self.json else _MsgpackFramer(self.chunk_size_limit)
        yield from self._framer.feed(data)

    @property
    def buffered(self) -> int:
        """Bytes of an incomplete message held (msgpack holds them twice, its buffer and the copy, unless the
        message is bulk)."""
        return 0 if self._framer is None else self._framer.held

    def room(self) -> memoryview | None:
        """Where the next bytes go if they can be received in place: the rest of a bulk message's entries
        (see :class:`_Bulk`); None otherwise (:meth:`feed` them). After receiving into it, call :meth:`filled`."""
        return self._framer.room() if type(self._framer) is _MsgpackFramer else None

    def filled(self, n: int) -> Iterator[memoryview]:
        """``n`` bytes were received into :meth:`room`: yields the message they complete, if they do."""
        assert type(self._framer) is _MsgpackFramer
        yield from self._framer.filled(n)


def _oversize(tag: str | None, size: int, limit: int, what: str) -> OversizeMessage:
    return OversizeMessage(
        f"{what} of tag {tag!r} is {size} bytes, over the limit of {limit} bytes (chunk_size_limit)",
        tag=tag,
        limit=limit,
        size=size,
    )


class _MsgpackFramer:
    """Finds message boundaries with msgpack's ``skip`` (no objects built) and cuts them from a mirror buffer.

    Decoding a whole message with one Unpacker would turn out_forward's
    str32 entries (binary msgpack, not UTF-8) into a surrogate-escaped str
    and back, which costs more than decoding the entries themselves. A
    message whose header announces bulk entries (:func:`_bulk_head`) skips
    both buffers: :class:`_Bulk` gathers it as it arrives.
    """

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._up = _unpacker(limit + _FEED_SLICE)
        self._buf = bytearray()  # the bytes from offset self._done on
        self._done = 0  # stream offset where the pending message starts
        self._told = False  # whether the pending message's head was read for _bulk_head already
        self._bulk: _Bulk | None = None

    @property
    def held(self) -> int:
        """Bytes of an incomplete message held (twice if it is in both buffers)."""
        return len(self._buf) + (self._bulk.held if self._bulk is not None else 0)

    def room(self) -> memoryview | None:
        return None if self._bulk is None else self._bulk.room()

    def filled(self, n: int) -> Iterator[memoryview]:
        assert self._bulk is not None
        frame = self._bulk.filled(n)
        if frame is not None:
            self._bulk = None
            yield frame

    def feed(self, data: bytes) -> Iterator[bytes | memoryview | bytearray]:
        view = memoryview(data)
        while view:
            if self._bulk is not None:
                frame, view = self._bulk.take(view)
                if frame is None:
                    return
                self._bulk = None
                yield frame
                continue
            if not self._buf and self._start_bulk(view[:_HEAD]):
                continue
            piece, view = view[:_FEED_SLICE], view[_FEED_SLICE:]
            yield from self._feed_piece(piece)

    def _start_bulk(self, head: memoryview | bytearray) -> bool:
        """Gather the message ``head`` starts with a :class:`_Bulk` if it is a bulk message (raising
        OversizeMessage if it announces more than the limit); whether it is."""
        found = _bulk_head(head)
        self._told = found is not None
        if not found:
            return False
        end, items = found
        if end > self._limit:
            raise _oversize(_tag_from_head(bytes(head)), end, self._limit, "message")
        self._bulk = _Bulk(end, items, self._limit, bytes(head))
        return True

    def _feed_piece(self, piece: memoryview) -> Iterator[bytes]:
        up = self._up
        buf = self._buf
        up.feed(piece)
        buf += piece
        cut = 0
        try:
            while True:
                try:
                    up.skip()
                except msgpack.OutOfData:
                    break
                except Exception as exc:  # msgpack's own: FormatError, StackError, ValueError
                    raise MalformedMessage(f"unreadable msgpack at byte {up.tell()}: {exc}") from exc
                end = up.tell() - self._done
                size = end - cut
                if size > self._limit:
                    raise _oversize(_tag_from_head(bytes(buf[cut : cut + _HEAD])), size, self._limit, "message")
                with memoryview(buf) as whole:  # one copy, not a bytearray slice and then bytes of it
                    frame = bytes(whole[cut:end])
                yield frame
                del frame
                cut = end
                self._told = False
        finally:
            if cut:
                del buf[:cut]
                self._done += cut
        if buf and not self._told and self._start_bulk(buf[:_HEAD]):
            # What the buffers hold of it moves to the bulk (it is not whole: msgpack found it short); both
            # buffers start anew after it.
            self._bulk.take(memoryview(bytes(buf)))
            self._restart(b"")
            return
        if cut > _FEED_SLICE:
            # Both buffers keep the size of the largest message: after a big one, start small ones
            # holding only what follows it (at most this slice).
            self._restart(buf)
        if len(self._buf) > self._limit:
            raise _oversize(_tag_from_head(bytes(self._buf[:_HEAD])), len(self._buf), self._limit,
                            "incomplete message")

    def _restart(self, pending: bytes | bytearray) -> None:
        """New buffers holding only ``pending``, the start of the next message."""
        self._up = _unpacker(self._limit + _FEED_SLICE)
        self._buf = bytearray(pending)
        if pending:
            self._up.feed(self._buf)
        self._done = 0


#: Entries (a PackedForward message's str32 or bin32) from this size on make a message bulk: it is gathered
#: in one buffer of its own as it arrives (:class:`_Bulk`), not copied through msgpack's buffer and the
#: mirror. Two copies of every byte fewer made ``windvane serve`` store vibration blocks 12% faster on 2 cores, where
#: the copies take cycles and memory bandwidth from the commit (README, ingestion performance).
_BULK_MIN = 64 << 10


def _bulk_head(head: memoryview | bytearray | bytes) -> tuple[int, int] | bool | None:
    """For the first bytes of a message: ``(where its entries end, its array length)`` if it is ``[tag,
    entries]`` or ``[tag, entries, option]`` with str32/bin32 entries of at least :data:`_BULK_MIN` bytes,
    False if it is not, None if ``head`` is too short to tell."""
    if len(head) < 2:
        return None
    if head[0] not in (0x92, 0x93):
        return False
    found = _header_len(head, 1, True, True)
    if found is None:
        return None if len(head) < 6 else False  # 6: the longest str/bin header
    n, pos = found
    pos += n
    if len(head) < pos + 5:
        return None if pos + 5 <= _HEAD else False
    if head[pos] not in (0xDB, 0xC6):
        return False
    size = int.from_bytes(head[pos + 1 : pos + 5], "big")
    if size < _BULK_MIN:
        return False
    return pos + 5 + size, head[0] & 0x0F


class _Bulk:
    """A bulk message (see :func:`_bulk_head`) gathered in one buffer as it arrives.

    The buffer has the announced size but is not written before bytes
    arrive (numpy's ``empty``: no page is touched), so memory grows with
    what was received, which the budget charges. A reader may receive the
    entries straight into it (:meth:`room`, :meth:`filled`): they are then
    never copied by Python. The frame it gives is a writable view of the
    buffer (see :func:`_entries_room`).
    """

    def __init__(self, entries_end: int, items: int, limit: int, head: bytes) -> None:
        self.entries_end = entries_end
        self.items = items
        self.limit = limit
        self.head = head
        self._buffer = memoryview(np.empty(entries_end + (_OPTION_ROOM if items == 3 else 0), dtype=np.uint8))
        self._past: bytearray | None = None  # an option longer than the room left for it
        self.held = 0
        self._option: msgpack.Unpacker | None = None  # reads where the option after the entries ends
        self._option_fed = 0

    def add(self, piece: memoryview) -> None:
        end = self.held + len(piece)
        fit = max(0, min(end, len(self._buffer)) - self.held)
        self._buffer[self.held : self.held + fit] = piece[:fit]
        if fit < len(piece):
            if self._past is None:
                self._past = bytearray()
            self._past += piece[fit:]
        self.held = end

    def room(self) -> memoryview | None:
        """Where the entries' next bytes go, to be received in place; None once they are all in."""
        return self._buffer[self.held : self.entries_end] if self.held < self.entries_end else None

    def filled(self, n: int) -> memoryview | None:
        """``n`` bytes were received into :meth:`room`: the message if it is whole."""
        self.held += n
        return self._frame() if self.held == self.entries_end and self.items == 2 else None

    def take(self, view: memoryview) -> tuple[memoryview | bytearray | None, memoryview]:
        """Add the bytes of the message at the start of ``view``: ``(the message, the bytes after it)``
        once it is whole, else ``(None, an empty view)``."""
        missing = self.entries_end - self.held
        if missing > 0:
            self.add(view[:missing])
            view = view[missing:]
            if self.held < self.entries_end:
                return None, view
        if self.items == 2:
            return self._frame(), view
        end = self._option_end(view)
        if end is None:
            self.add(view)
            return None, view[len(view):]
        self.add(view[:end])
        return self._frame(), view[end:]

    def _option_end(self, view: memoryview) -> int | None:
        """Where the option after the entries ends in ``view`` (None: not in it); read a slice at a time,
        since ``view`` may go on with many messages."""
        if self._option is None:
            self._option = _unpacker(self.limit)
        start = self._option_fed
        for offset in range(0, len(view), _OPTION_SLICE):
            piece = view[offset : offset + _OPTION_SLICE]
            self._option.feed(piece)
            self._option_fed += len(piece)
            try:
                self._option.skip()
            except msgpack.OutOfData:
                if self.entries_end + self._option_fed > self.limit:
                    raise _oversize(_tag_from_head(self.head), self.entries_end + self._option_fed, self.limit,
                                    "incomplete message") from None
                continue
            except Exception as exc:  # msgpack's own: FormatError, StackError, ValueError
                raise MalformedMessage(
                    f"unreadable msgpack at byte {self.entries_end + self._option.tell()}: {exc}") from exc
            size = self.entries_end + self._option.tell()
            if size > self.limit:
                raise _oversize(_tag_from_head(self.head), size, self.limit, "message")
            return self._option.tell() - start
        return None

    def _frame(self) -> memoryview | bytearray:
        if self._past is None:
            return self._buffer[: self.held]
        return bytearray(self._buffer) + self._past  # an option past the room: one copy (never seen from a sender)


#: Bytes kept after a bulk message's entries for its option (a chunk id, a size, a compression: tens of bytes).
_OPTION_ROOM = 4096
_OPTION_SLICE = 4 << 10  # an option map (chunk id, size, compressed) is tens of bytes


def _tag_from_head(head: bytes) -> str | None:
    """The tag of a message from its first bytes, or None if they do not show one."""
    up = msgpack.Unpacker(raw=False, unicode_errors="replace", max_buffer_size=len(head) + 1)
    up.feed(head)
    try:
        up.read_array_header()
        tag = up.unpack()
    except Exception:  # whatever the bytes are, the tag is only for the log line
        return None
    return tag if isinstance(tag, str) else None


_JSON_SPECIAL = re.compile(rb'["\\\[\]{}]')
_JSON_SPACE = b" \t\r\n"


class _JsonFramer:
    """Finds where each top-level JSON array/object ends by counting brackets outside strings."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._buf = bytearray()
        self._scan = 0  # where scanning resumes
        self._start = -1  # start of the current value in the buffer, -1 between values
        self._depth = 0
        self._in_string = False

    @property
    def held(self) -> int:
        """Bytes of an incomplete message held."""
        return len(self._buf)

    def feed(self, data: bytes) -> Iterator[bytes]:
        buf = self._buf
        buf += data
        pos = self._scan
        while True:
            if self._start < 0:
                while pos < len(buf) and buf[pos] in _JSON_SPACE:
                    pos += 1
                if pos == len(buf):
                    break
                if buf[pos] not in b"[{":
                    raise MalformedMessage(
                        f"JSON stream: expected '[' or '{{' where a message starts, got {bytes(buf[pos:pos + 1])!r}"
                    )
                self._start = pos
                self._depth = 1
                self._in_string = False
                pos += 1
            m = _JSON_SPECIAL.search(buf, pos)
            if m is None:
                pos = len(buf)
                break
            c = buf[m.start()]
            pos = m.end()
            if self._in_string:
                if c == 0x5C:  # backslash: skip the escaped byte
                    if pos >= len(buf):
                        pos -= 1  # rescan the backslash once the escaped byte arrives
                        break
                    pos += 1
                elif c == 0x22:
                    self._in_string = False
                continue
            if c == 0x22:
                self._in_string = True
            elif c == 0x5B or c == 0x7B:
                self._depth += 1
            else:  # ] or }
                self._depth -= 1
                if self._depth == 0:
                    text = bytes(buf[self._start : pos])
                    self._start = -1
                    if len(text) > self._limit:
                        raise _oversize(None, len(text), self._limit, "JSON message")
                    yield text
        keep = self._start if self._start >= 0 else len(buf)
        if self._start >= 0 and len(buf) - self._start > self._limit:
            raise _oversize(None, len(buf) - self._start, self._limit, "incomplete JSON message")
        del buf[:keep]
        self._scan = pos - keep
        if self._start >= 0:
            self._start = 0


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


def parse_frame(frame: bytes, json_mode: bool = False) -> Any:
    """The value of one framed message (msgpack, or JSON text); :class:`MalformedMessage` if unreadable."""
    try:
        if json_mode:
            return json.loads(frame)
        up = _unpacker(max(len(frame), 1), _message_ext_hook)
        up.feed(frame)
        value = up.unpack()
    except msgpack.OutOfData:
        raise MalformedMessage("unreadable msgpack message: it ends early") from None
    except (ValueError, TypeError, RecursionError, msgpack.UnpackException) as exc:
        raise MalformedMessage(f"unreadable {'JSON' if json_mode else 'msgpack'} message: {exc}") from exc
    if up.tell() != len(frame):
        raise MalformedMessage(f"msgpack message has {len(frame) - up.tell()} bytes after its end")
    return value


def read_packed(frame: bytes, json_mode: bool = False) -> tuple[str, memoryview, dict | None] | None:
    """``(tag, entries, option)`` of a (Compressed)PackedForward message the fast path reads, else None
    (the general path of :func:`decode_message` reads it); raises what :func:`decode_message` would
    for a bad tag or option. Pass it on to :func:`decode_message` (``packed``) to read the frame once."""
    return None if json_mode else _split_packed(frame)


def decode_message(
    frame: bytes,
    *,
    json_mode: bool = False,
    decompressed_size_limit: int = ForwardConfig.decompressed_size_limit,
    defer: bool = False,
    packed: tuple[str, memoryview, dict | None] | None = None,
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
            return _packed_message(tag, entries, option, len(frame), decompressed_size_limit, record_types,
                                   _entries_room(frame, entries))
    return decode_value(parse_frame(frame, json_mode), frame, decompressed_size_limit=decompressed_size_limit,
                        record_types=record_types)


def decode_value(
    value: Any, frame: bytes, *, decompressed_size_limit: int = ForwardConfig.decompressed_size_limit,
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
        return _decoded(_decode_forward(tag, entries, frame), option, "forward")
    if n < 3:
        raise MalformedMessage(f"Message-mode message of tag {tag!r} has no record: expected [tag, time, record]")
    option = _option(value, 3, tag)
    times = array("q", (_time_ns(entries),))
    batch = Batch(tag, times, [value[2]], _FramesRaw([frame]), SOURCE, size, faults=_time_faults(times, [entries]))
    return _decoded(batch, option, "message")


def _text_keys(option: dict | None) -> dict | None:
    """An option map with bin keys (a sender in ASCII-8BIT) keyed by their text, as in_forward reads them."""
    if not option or all(type(k) is str for k in option):
        return option
    out = {}
    for k, v in option.items():
        if type(k) is bytes:
            k = k.decode("utf-8", "surrogateescape")
        if k == "compressed" and type(v) is bytes:
            v = v.decode("utf-8", "surrogateescape")
        out[k] = v
    return out


def _packed_message(tag: str, payload: bytes, option: dict | None, size: int, limit: int,
                    record_types: Callable[[str], type | None] | None = None,
                    room: tuple[bytearray | memoryview, int] | None = None) -> Decoded:
    compressed = option.get("compressed") if option else None
    mode = "packed"
    if compressed is not None and compressed != "text":
        payload = _decompress(payload, compressed, limit, tag)
        mode = "compressed"
        room = None
    record_type = None if record_types is None else record_types(tag)
    events = option.get("size") if option else None
    return _decoded(decode_packed(tag, payload, size, record_type, events, room=room), option, mode)


def _entries_room(frame: bytes | bytearray | memoryview, entries: memoryview
                  ) -> tuple[bytearray | memoryview, int] | None:
    """``(frame, where its entries start)`` if ``frame`` is writable (a bulk message, see :class:`_Bulk`)
    and its ``entries`` follow a 5-byte str32/bin32 header, where an array header fits; else None."""
    if not (type(frame) is bytearray or (type(frame) is memoryview and not frame.readonly)):
        return None
    found = _bulk_head(frame[:_HEAD])  # what made the framer gather it in a buffer of its own
    if not found or found[0] > len(frame):
        return None
    return frame, found[0] - len(entries)


def decode_entries(payload: bytes, tag: str, size: int, compressed: Any, limit: int,
                   record_type: type | None = None) -> list[Batch]:
    """The Batch of PackedForward ``payload`` (decompressed first if ``compressed``); run by ingest's workers."""
    if compressed is not None and compressed != "text":
        payload = _decompress(payload, compressed, limit, tag)
    return [decode_packed(tag, payload, size, record_type)]


#: Events up to this size go to ingest's decode workers. Larger ones carry bulk
#: binary (vibration blocks), decoded here as views of the frame they arrived in
#: (see _entries_room): handing them to a worker and pickling the arrays back
#: costs more than it saves (measured with 300 KB blocks when they were still
#: copied: 142-155 MB/s decoded here, 99-110 MB/s through a worker).
DEFER_MAX_EVENT_BYTES = 16 << 10


def _compressed(option: dict | None) -> bool:
    return bool(option) and option.get("compressed") not in (None, "text")


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
    except Exception:  # noqa: BLE001 - unreadable: the worker will say how, as for any deferred message
        return True
    return up.tell() <= DEFER_MAX_EVENT_BYTES


def _deferred(tag: str, entries: memoryview, option: dict | None, size: int, limit: int) -> Decoded:
    compressed = option.get("compressed") if option else None
    mode = "packed" if compressed is None or compressed == "text" else "compressed"
    # bytes(): a memoryview does not pickle, and the copy lets the frame go.
    undecoded = Undecoded(tag, bytes(entries), decode_entries, (tag, size, compressed, limit), SOURCE, size, typed=True)
    return _decoded(undecoded, option, mode)


def _decoded(batch: Batch | Undecoded, option: dict | None, mode: str) -> Decoded:
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


def _header_len(frame: bytes, pos: int, str_ok: bool, bin_ok: bool) -> tuple[int, int] | None:
    """(length, position after the header) of a str/bin header at ``pos``, or None if it is not one."""
    if pos >= len(frame):
        return None
    b = frame[pos]
    if str_ok and 0xA0 <= b <= 0xBF:
        return b & 0x1F, pos + 1
    if (str_ok and b == 0xD9) or (bin_ok and b == 0xC4):
        width = 1
    elif (str_ok and b == 0xDA) or (bin_ok and b == 0xC5):
        width = 2
    elif (str_ok and b == 0xDB) or (bin_ok and b == 0xC6):
        width = 4
    else:
        return None
    end = pos + 1 + width
    if end > len(frame):
        return None
    return int.from_bytes(frame[pos + 1 : end], "big"), end


def _split_packed(frame: bytes) -> tuple[str, memoryview, dict | None] | None:
    """The PackedForward fast path: read the framing by hand so the entries are sliced, never decoded as str.

    Returns None for anything that is not ``[str tag, str|bin entries, map|nil?]``
    so that the general path (and its error messages) handles it.
    """
    if not frame or frame[0] not in (0x92, 0x93):
        return None
    header = _header_len(frame, 1, True, True)
    if header is None:
        return None
    n, pos = header
    raw_tag = bytes(frame[pos : pos + n])
    pos += n
    entries = _header_len(frame, pos, True, True)
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


def _option(value: list, index: int, tag: str) -> dict | None:
    if len(value) <= index:
        return None
    option = value[index]
    if option is None or type(option) is dict:
        return _text_keys(option)
    raise MalformedMessage(f"option of tag {tag!r} is {_kind(option)}, expected a map")


def _decode_forward(tag: str, entries: list, frame: bytes) -> Batch:
    for i, entry in enumerate(entries):
        if type(entry) is not list or len(entry) != 2:
            raise MalformedMessage(f"Forward entry {i} of tag {tag!r} is {_kind(entry)}, expected [time, record]")
    stamps = list(map(_first, entries))
    times = _times_ns(stamps)
    return Batch(tag, times, list(map(_second, entries)), _ForwardRaw(frame), SOURCE, len(frame),
                 faults=_time_faults(times, stamps))


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
        self._offsets: array | None = None

    def __call__(self, i: int) -> bytes:
        if self._offsets is None:
            if self._frame[:1] in (b"[", b"{"):  # JSON: the entry's text is not at hand; the whole message is
                return self._frame
            up = _unpacker(max(len(self._frame), 1))
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


def decode_packed(tag: str, payload: bytes | memoryview, size: int = 0, record_type: type | None = None,
                  events: Any = None, *, room: tuple[bytearray | memoryview, int] | None = None) -> Batch:
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
    up = _unpacker(max(len(payload), 1))
    up.feed(payload)
    try:
        entries = list(up)
    except Exception as exc:  # msgpack's own errors
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
    up = msgpack.Unpacker(None, max_buffer_size=max(len(payload), 1), strict_map_key=False,
                          max_array_len=MAX_CONTAINER_LEN, max_map_len=MAX_CONTAINER_LEN)
    up.feed(payload)
    skip = up.skip
    count = 0
    try:
        while True:
            skip()
            count += 1
    except msgpack.OutOfData:
        return count if up.tell() == len(payload) else None
    except Exception:  # noqa: BLE001 - msgpack's own errors: the plain decode names them
        return None


@functools.lru_cache(maxsize=256)
def _entries_decoder(record_type: type) -> msgspec.msgpack.Decoder:
    return msgspec.msgpack.Decoder(list[tuple[msgspec.msgpack.Ext | int | float, record_type]])


def _decode_typed(tag: str, payload: bytes | memoryview, size: int, record_type: type,
                  events: Any = None, room: tuple[bytearray | memoryview, int] | None = None) -> Batch | None:
    """The entries with records of ``record_type``, decoded and checked by msgspec in C; None if any does not fit.

    msgspec reads one value, so the entries get an array header in front:
    the count of ``events`` if it is one (a wrong count fails the decode,
    and the entries are then counted), else the entries counted. With
    ``room`` (see :func:`_entries_room`) the header is written over the
    entries' own for the decode, so they are not copied.
    Only EventTimes and numbers are taken as times here; any other time
    form (Fluent Bit's ``[EventTime, metadata]``, nil, bin) goes the plain
    way, which knows them all.
    """
    decoder = _entries_decoder(record_type)
    entries = None
    if type(events) is int and 0 < events < 1 << 32:
        entries = _decode_counted(decoder, payload, events, room)
    if entries is None:
        count = _count_entries(payload)
        if count is None or count == events:
            return None
        entries = _decode_counted(decoder, payload, count, room)
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
    return Batch(tag, times, list(map(_second, entries)), _PackedRaw(payload), SOURCE, size, typed=True,
                 faults=_time_faults(times, stamps))


def _decode_counted(decoder: msgspec.msgpack.Decoder, payload: bytes | memoryview, count: int,
                    room: tuple[bytearray | memoryview, int] | None) -> list | None:
    """``payload`` decoded by ``decoder`` as an array of ``count`` entries, or None if it is not one or an
    entry does not fit (invalid UTF-8 included)."""
    header = b"\xdd" + count.to_bytes(4, "big")
    try:
        if room is None:
            return decoder.decode(header + payload)
        frame, start = room
        own = bytes(frame[start - 5 : start])
        frame[start - 5 : start] = header
        try:
            # Decoded blocks (memoryview) keep views of the frame: this view is not released here.
            return decoder.decode(memoryview(frame)[start - 5 : start + len(payload)])
        finally:
            frame[start - 5 : start] = own
    except (msgspec.MsgspecError, ValueError):
        return None


class _PackedRaw:
    """``Batch.raw``: the verbatim bytes of packed entry ``i``.

    Offsets are found only when first asked for (a quarantine is rare), by
    skipping over the entries once, so the decode pass stays lean.
    """

    __slots__ = ("_payload", "_offsets")

    def __init__(self, payload: bytes | memoryview) -> None:
        self._payload = payload
        self._offsets: array | None = None

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


def _decompress(payload: bytes, codec: Any, limit: int, tag: str) -> bytes:
    if codec == "gzip":
        return _gunzip(payload, limit, tag)
    if codec == "zstd":
        return _unzstd(payload, limit, tag)
    raise MalformedMessage(f"option compressed of tag {tag!r} is {codec!r}: expected 'text', 'gzip' or 'zstd'")


def _too_big(tag: str, limit: int, size: int) -> OversizeMessage:
    return OversizeMessage(
        f"decompressed entries of tag {tag!r} exceed the limit of {limit} bytes (decompressed_size_limit)",
        tag=tag,
        limit=limit,
        size=size,
    )


def _gunzip(payload: bytes, limit: int, tag: str) -> bytes:
    """Decompress every concatenated gzip member (fluentd and Fluent Bit may send several), at most ``limit`` bytes."""
    out = bytearray()
    data: bytes = payload
    member = 0
    while data:
        d = zlib.decompressobj(wbits=31)
        try:
            out += d.decompress(data, limit + 1 - len(out))
            while d.unconsumed_tail and len(out) <= limit:
                out += d.decompress(d.unconsumed_tail, limit + 1 - len(out))
        except zlib.error as exc:
            raise MalformedMessage(f"gzip member {member} of tag {tag!r} is not valid gzip: {exc}") from exc
        if len(out) > limit:
            raise _too_big(tag, limit, len(out))
        if not d.eof:
            raise MalformedMessage(f"gzip member {member} of tag {tag!r} is truncated")
        data = d.unused_data
        member += 1
    return bytes(out)


def _unzstd(payload: bytes | memoryview, limit: int, tag: str) -> bytes:
    """Decompress every concatenated zstd frame, at most ``limit`` bytes.

    zstandard's streaming reader bounds the output (no bomb) but returns a
    truncated frame's prefix silently, so the frames' block headers are
    walked first to check that every frame is complete.
    """
    problem = _zstd_incomplete(memoryview(payload))
    if problem:
        raise MalformedMessage(f"zstd payload of tag {tag!r} is {problem}")
    out = bytearray()
    try:
        reader = zstandard.ZstdDecompressor().stream_reader(payload, read_across_frames=True)
        while True:
            piece = reader.read(min(1 << 20, limit + 1 - len(out)))
            if not piece:
                break
            out += piece
            if len(out) > limit:
                raise _too_big(tag, limit, len(out))
    except zstandard.ZstdError as exc:
        raise MalformedMessage(f"zstd payload of tag {tag!r} is not valid zstd: {exc}") from exc
    return bytes(out)


def _zstd_incomplete(data: memoryview) -> str | None:
    """Why the zstd frames in ``data`` are not complete (RFC 8878 framing), or None if they are."""
    pos, end = 0, len(data)
    while pos < end:
        if end - pos < 4:
            return "truncated (a frame header is cut)"
        magic = int.from_bytes(data[pos : pos + 4], "little")
        if 0x184D2A50 <= magic <= 0x184D2A5F:  # skippable frame
            if end - pos < 8:
                return "truncated (a skippable frame header is cut)"
            pos += 8 + int.from_bytes(data[pos + 4 : pos + 8], "little")
            continue
        if magic != 0xFD2FB528:
            return "not zstd (bad frame magic)"
        pos += 4
        if pos >= end:
            return "truncated (a frame header is cut)"
        descriptor = data[pos]
        pos += 1
        single_segment = (descriptor >> 5) & 1
        fcs_flag = descriptor >> 6
        pos += (0 if single_segment else 1) + (0, 1, 2, 4)[descriptor & 3]
        pos += (1 if single_segment else 0, 2, 4, 8)[fcs_flag]
        while True:
            if pos + 3 > end:
                return "truncated (a block header is cut)"
            header = int.from_bytes(data[pos : pos + 3], "little")
            pos += 3
            block_type = (header >> 1) & 3
            if block_type == 3:
                return "not zstd (reserved block type)"
            pos += 1 if block_type == 1 else header >> 3  # RLE blocks hold one byte
            if pos > end:
                return "truncated (a block is cut)"
            if header & 1:  # last block
                break
        if (descriptor >> 2) & 1:  # content checksum
            pos += 4
        if pos > end:
            return "truncated (the checksum is cut)"
    return None


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
        if type(chunk) is bytes:
            chunk = chunk.decode("utf-8", "surrogateescape")
        return json.dumps({"ack": chunk}, ensure_ascii=False).encode("utf-8", "surrogateescape")
    if type(chunk) is bytes:
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
    owned: list[bool] = []  # whether out[i] is our own copy, safe to grow
    for batch in batches:
        last = out[-1] if out else None
        if (
            isinstance(last, Batch)
            and isinstance(batch, Batch)
            and last.tag == batch.tag
            and isinstance(last.raw, _FramesRaw)
            and isinstance(batch.raw, _FramesRaw)
        ):
            if not owned[-1]:
                last = Batch(
                    last.tag, array("q", last.times), list(last.records), _FramesRaw(list(last.raw.frames)),
                    last.source, last.size, faults=last.faults,
                )
                out[-1] = last
                owned[-1] = True
            if batch.faults:
                last.faults = {**(last.faults or {}), **{len(last.times) + i: why for i, why in batch.faults.items()}}
            last.times.extend(batch.times)
            last.records.extend(batch.records)
            last.raw.frames.extend(batch.raw.frames)
            last.size += batch.size
        else:
            out.append(batch)
            owned.append(False)
    return out
