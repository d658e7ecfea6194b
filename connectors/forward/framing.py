"""Framing of a Forward connection's byte stream: top-level messages, each as its own bytes (sans-IO).

:class:`FrameReader` picks msgpack or JSON by the first byte, as fluentd's
in_forward does, and bounds each message by ``chunk_size_limit``; a bulk
message's entries are received in place (:meth:`FrameReader.room`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Literal

import msgpack
import numpy as np

from .config import ForwardConfig
from .errors import MalformedMessage, OversizeMessage
from .msgpack_read import FEED_SLICE, HEAD_BYTES, header_len, unpacker

#: One whole message as :class:`FrameReader` gives it: ``bytes``, or a bulk message's own buffer (a writable
#: ``memoryview``, or a ``bytearray`` when its option went past the room kept for it).
Frame = bytes | bytearray | memoryview


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

    def feed(self, data: bytes) -> Iterator[Frame]:
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

    @property
    def announced(self) -> int | None:
        """The size the incomplete message's header announced (at most: room for its option included), when
        it is a bulk message (see :class:`_Bulk`); None otherwise, its size is known once it is whole."""
        return self._framer.announced if type(self._framer) is _MsgpackFramer else None

    def room(self) -> memoryview | None:
        """Where the next bytes go if they can be received in place: the rest of a bulk message's entries
        (see :class:`_Bulk`); None otherwise (:meth:`feed` them). After receiving into it, call :meth:`filled`."""
        return self._framer.room() if type(self._framer) is _MsgpackFramer else None

    def filled(self, n: int) -> Iterator[memoryview | bytearray]:
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
    message whose header announces bulk entries (:func:`bulk_head`) skips
    both buffers: :class:`_Bulk` gathers it as it arrives.
    """

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._up = unpacker(limit + FEED_SLICE)
        self._buf = bytearray()  # the bytes from offset self._done on
        self._done = 0  # stream offset where the pending message starts
        self._told = False  # whether the pending message's head was read for bulk_head already
        self._bulk: _Bulk | None = None

    @property
    def held(self) -> int:
        """Bytes of an incomplete message held (twice if it is in both buffers)."""
        return len(self._buf) + (self._bulk.held if self._bulk is not None else 0)

    @property
    def announced(self) -> int | None:
        return None if self._bulk is None else self._bulk.size

    def room(self) -> memoryview | None:
        return None if self._bulk is None else self._bulk.room()

    def filled(self, n: int) -> Iterator[memoryview | bytearray]:
        assert self._bulk is not None
        frame = self._bulk.filled(n)
        if frame is not None:
            self._bulk = None
            yield frame

    def feed(self, data: bytes) -> Iterator[Frame]:
        view = memoryview(data)
        while view:
            if self._bulk is not None:
                frame, view = self._bulk.take(view)
                if frame is None:
                    return
                self._bulk = None
                yield frame
                continue
            if not self._buf and self._start_bulk(view[:HEAD_BYTES]) is not None:
                continue
            piece, view = view[:FEED_SLICE], view[FEED_SLICE:]
            yield from self._feed_piece(piece)

    def _start_bulk(self, head: memoryview | bytearray) -> _Bulk | None:
        """Gather the message ``head`` starts with a :class:`_Bulk` if it is a bulk message (raising
        OversizeMessage if it announces more than the limit): that bulk, or None."""
        found = bulk_head(head)
        self._told = found is not None
        if not found:
            return None
        end, items = found
        if end > self._limit:
            raise _oversize(_tag_from_head(bytes(head)), end, self._limit, "message")
        self._bulk = _Bulk(end, items, self._limit, bytes(head))
        return self._bulk

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
                # msgpack's C reader raises FormatError, StackError, ValueError and others for bytes it cannot
                # read: whichever it is, the message is malformed.
                except Exception as exc:
                    raise MalformedMessage(f"unreadable msgpack at byte {up.tell()}: {exc}") from exc
                end = up.tell() - self._done
                size = end - cut
                if size > self._limit:
                    raise _oversize(_tag_from_head(bytes(buf[cut : cut + HEAD_BYTES])), size, self._limit, "message")
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
        bulk = self._start_bulk(buf[:HEAD_BYTES]) if buf and not self._told else None
        if bulk is not None:
            # What the buffers hold of it moves to the bulk (it is not whole: msgpack found it short); both
            # buffers start anew after it.
            bulk.take(memoryview(bytes(buf)))
            self._restart(b"")
            return
        if cut > FEED_SLICE:
            # Both buffers keep the size of the largest message: after a big one, start small ones
            # holding only what follows it (at most this slice).
            self._restart(buf)
        if len(self._buf) > self._limit:
            raise _oversize(
                _tag_from_head(bytes(self._buf[:HEAD_BYTES])), len(self._buf), self._limit, "incomplete message"
            )

    def _restart(self, pending: bytes | bytearray) -> None:
        """New buffers holding only ``pending``, the start of the next message."""
        self._up = unpacker(self._limit + FEED_SLICE)
        self._buf = bytearray(pending)
        if pending:
            self._up.feed(self._buf)
        self._done = 0


#: Entries (a PackedForward message's str32 or bin32) from this size on make a message bulk: it is gathered
#: in one buffer of its own as it arrives (:class:`_Bulk`), not copied through msgpack's buffer and the
#: mirror: the two copies of every byte would take cycles and memory bandwidth from the commit
#: (benchmarks/README.md, ingestion).
_BULK_MIN = 64 << 10


def bulk_head(head: memoryview | bytearray | bytes) -> tuple[int, int] | Literal[False] | None:
    """For the first bytes of a message: ``(where its entries end, its array length)`` if it is ``[tag,
    entries]`` or ``[tag, entries, option]`` with str32/bin32 entries of at least :data:`_BULK_MIN` bytes,
    False if it is not, None if ``head`` is too short to tell."""
    if len(head) < 2:
        return None
    if head[0] not in (0x92, 0x93):
        return False
    found = header_len(head, 1, True, True)
    if found is None:
        return None if len(head) < 6 else False  # 6: the longest str/bin header
    n, pos = found
    pos += n
    if len(head) < pos + 5:
        return None if pos + 5 <= HEAD_BYTES else False
    if head[pos] not in (0xDB, 0xC6):
        return False
    size = int.from_bytes(head[pos + 1 : pos + 5], "big")
    if size < _BULK_MIN:
        return False
    return pos + 5 + size, head[0] & 0x0F


class _Bulk:
    """A bulk message (see :func:`bulk_head`) gathered in one buffer as it arrives.

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
        self._buffer = np.empty(entries_end + (_OPTION_ROOM if items == 3 else 0), dtype=np.uint8).data
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

    @property
    def size(self) -> int:
        """The most the message can be: its entries and the room kept for its option."""
        return len(self._buffer)

    def room(self) -> memoryview | None:
        """Where the entries' next bytes go, to be received in place; None once they are all in."""
        return self._buffer[self.held : self.entries_end] if self.held < self.entries_end else None

    def filled(self, n: int) -> memoryview | bytearray | None:
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
            return None, view[len(view) :]
        self.add(view[:end])
        return self._frame(), view[end:]

    def _option_end(self, view: memoryview) -> int | None:
        """Where the option after the entries ends in ``view`` (None: not in it); read a slice at a time,
        since ``view`` may go on with many messages."""
        if self._option is None:
            self._option = unpacker(self.limit)
        start = self._option_fed
        for offset in range(0, len(view), _OPTION_SLICE):
            piece = view[offset : offset + _OPTION_SLICE]
            self._option.feed(piece)
            self._option_fed += len(piece)
            try:
                self._option.skip()
            except msgpack.OutOfData:
                if self.entries_end + self._option_fed > self.limit:
                    raise _oversize(
                        _tag_from_head(self.head), self.entries_end + self._option_fed, self.limit, "incomplete message"
                    ) from None
                continue
            # Any of msgpack's errors (FormatError, StackError, ValueError, ...) means a malformed option.
            except Exception as exc:
                raise MalformedMessage(
                    f"unreadable msgpack at byte {self.entries_end + self._option.tell()}: {exc}"
                ) from exc
            size = self.entries_end + self._option.tell()
            if size > self.limit:
                raise _oversize(_tag_from_head(self.head), size, self.limit, "message")
            end: int = self._option.tell() - start
            return end
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
    except Exception:  # noqa: BLE001 - whatever the bytes are and msgpack raises, the tag is only for a log line
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
                        f"JSON stream: expected '[' or '{{' where a message starts, got {bytes(buf[pos : pos + 1])!r}"
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
