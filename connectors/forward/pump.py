"""A Forward connection's pump: frames read are decoded, when a slot is free, and submitted.

Frames are decoded lazily, so memory stays bounded; messages with a
``chunk`` option already read are submitted together in one call, one
submission each; consecutive chunkless messages are merged into one
submission. At most ``max_in_flight`` messages are pending at once; while
none is free the socket is not read. A CompressedPackedForward message's
decompressed size is reserved in the memory budget before it is decoded.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable

from windvane.connectors.budget import Charges, held_for, held_for_message
from windvane.connectors.inflate import inflated_size
from windvane.ingest.batch import Batch

from .acks import Acker, Item
from .budgeted import Admission
from .decode import Decoded, FrameReader, Packed, ack_bytes, decode_message, merge_batches, read_packed
from .errors import ForwardError, OversizeMessage
from .framing import Frame
from .reading import Reading

_MAX_MERGE = 4096  # chunkless messages joined into one submission at most
_MAX_MANY = 1024  # chunk messages handed to the sink in one call at most


class Pump:
    """Decodes what was read and hands it to the acker's sink, a slot at a time.

    ``report`` reports a malformed or oversize message (the connection drops what it read after it and
    stops reading); the other settings are the server's (:class:`.server.ForwardServer`).
    """

    def __init__(
        self,
        reading: Reading,
        frames: FrameReader,
        admission: Admission,
        acker: Acker,
        stats: dict[str, int],
        *,
        max_in_flight: int,
        inflate_limit: int,
        defer: bool,
        record_types: Callable[[str], type | None] | None,
        report: Callable[[ForwardError], None],
    ) -> None:
        self._reading = reading
        self._frames = frames
        self._admission = admission
        self._charges: Charges = admission.charges
        self._acker = acker
        self._stats = stats
        self._max_in_flight = max_in_flight
        self._inflate_limit = inflate_limit
        self._defer = defer
        self._record_types = record_types
        self._report = report
        self._pending: deque[Frame | ForwardError] = deque()  # framed, not yet decoded
        self._carry: tuple[Decoded, int] | None = None  # decoded while merging (and its charge), submitted next

    @property
    def busy(self) -> bool:
        """Whether frames read wait to be decoded and submitted (the connection is not idle then)."""
        return bool(self._pending) or self._carry is not None

    def put(self, item: Frame | ForwardError) -> None:
        """Queue a frame read, or the error that ends what is read."""
        self._pending.append(item)

    def drop_pending(self) -> None:
        """Forget the frames read and not yet decoded (the connection is closing at once)."""
        self._pending.clear()

    def drop(self) -> None:
        """Forget what was read after a malformed or oversize message, and release what it held."""
        for item in self._pending:
            if not isinstance(item, ForwardError):
                self._charges.add("queued", -held_for_message(len(item)))
        self._pending.clear()
        if self._carry is not None:
            self._charges.add("queued", -self._carry[1])
            self._carry = None

    def clear(self) -> None:
        """The connection is done: nothing read is kept (the budget is released as a whole)."""
        self._pending.clear()
        self._carry = None

    async def run(self) -> None:
        """Decode and submit until the connection is done: stopped, and all it read submitted."""
        while True:
            item = await self._next()
            if item is None:
                return
            decoded, charge = item
            json_mode = bool(self._frames.json)
            while self._acker.in_flight_messages >= self._max_in_flight:
                self._reading.pause()
                self._reading.wake.clear()
                await self._reading.wake.wait()
            group = [decoded]
            if decoded.key is None:  # chunkless messages already here: one submission
                charge += self._take_ready(group, _MAX_MERGE - 1, keyed=False)
                items: list[Item] = [(merge_batches([d.batch for d in group]), None)]
                acks: list[bytes | None] = [None]
            else:  # messages with a chunk option already here: one submission each, in one call
                room = min(self._max_in_flight - self._acker.in_flight_messages, _MAX_MANY)
                charge += self._take_ready(group, room - 1, keyed=True)
                items = [([d.batch], d.key) for d in group]
                acks = [ack_bytes(d.chunk, json_mode) if d.chunk is not None else None for d in group]
            del group
            self._charges.move(charge, "queued", "submitted")
            self._charges.settle()
            self._acker.submit(items, acks, charge)
            del decoded, items, item  # what is committed is not kept here once acknowledged

    async def _next(self) -> tuple[Decoded, int] | None:
        """The next decoded message and the bytes it holds in the budget; None when the connection is done."""
        if self._carry is not None:
            carried, self._carry = self._carry, None
            return carried
        while True:
            if not self._pending:
                if self._reading.stopped:
                    return None
                if self._acker.in_flight_messages < self._max_in_flight and not self._admission.paused:
                    self._reading.resume()
                self._reading.wake.clear()
                await self._reading.wake.wait()
                continue
            item = self._pending.popleft()
            if isinstance(item, ForwardError):
                self._report(item)
                return None
            charge = held_for_message(len(item))
            json_mode = bool(self._frames.json)
            try:
                packed = read_packed(item, json_mode)
                compressed = _compressed_entries(packed)
                if compressed is not None:
                    reserved = await self._reserve_inflated(*compressed)
                    if reserved is None:
                        self._charges.add("queued", -charge)
                        return None
                    charge += reserved
                decoded = self._decode(item, json_mode, packed)
            except ForwardError as exc:
                self._charges.add("queued", -charge)
                self._charges.settle()
                self._report(exc)
                return None
            if decoded is None:  # TCP heartbeat (nil), ignored as in in_forward
                self._charges.add("queued", -charge)
                continue
            self._count(decoded)
            return decoded, charge

    def _decode(self, frame: Frame, json_mode: bool, packed: Packed | None) -> Decoded | None:
        """``frame`` decoded as the server is configured to (``packed``: what :func:`read_packed` read of it)."""
        return decode_message(
            frame,
            json_mode=json_mode,
            decompressed_size_limit=self._inflate_limit,
            defer=self._defer,
            packed=packed,
            record_types=self._record_types,
        )

    async def _reserve_inflated(self, tag: str, codec: str, payload: memoryview) -> int | None:
        """Reserve the decompressed size of a compressed message in the budget (found without keeping the
        output: a bomb costs CPU, not memory); None if it is over the limit (reported)."""
        limit = self._inflate_limit
        size = await asyncio.to_thread(inflated_size, payload, (codec,), limit)
        if size > limit:
            self._report(
                OversizeMessage(
                    f"decompressed entries of tag {tag!r} exceed the limit of {limit} bytes (decompressed_size_limit, "
                    f"at most what the memory budget holds decoded)",
                    tag=tag,
                    limit=limit,
                    size=size,
                )
            )
            return None
        return await self._admission.reserve(held_for(size))

    def _take_ready(self, group: list[Decoded], limit: int, *, keyed: bool) -> int:
        """Decode up to ``limit`` frames already read, while they are messages with a chunk option
        (``keyed``) or without one, into ``group``; the budget bytes they hold. The first message of the
        other kind is carried to the next submission; errors and compressed messages are left for
        :meth:`_next` (which reports the one and reserves the other's decompressed size)."""
        charge = 0
        json_mode = bool(self._frames.json)
        while self._pending and limit > 0:
            item = self._pending[0]
            if isinstance(item, ForwardError):
                break  # reported by _next
            try:
                packed = read_packed(item, json_mode)  # read once, for both questions
                if _compressed_entries(packed) is not None:
                    break  # its decompressed size is reserved by _next
                decoded = self._decode(item, json_mode, packed)
            except ForwardError as exc:
                self._pending[0] = exc  # reported by _next, after this submission
                self._charges.add("queued", -held_for_message(len(item)))
                break
            self._pending.popleft()
            if decoded is None:
                self._charges.add("queued", -held_for_message(len(item)))
                continue
            self._count(decoded)
            if (decoded.key is not None) != keyed:
                self._carry = (decoded, held_for_message(len(item)))
                break
            group.append(decoded)
            charge += held_for_message(len(item))
            limit -= 1
        return charge

    def _count(self, decoded: Decoded) -> None:
        self._stats["messages"] += 1
        if isinstance(
            decoded.batch, Batch
        ):  # undecoded entries are counted once committed (:meth:`.acks.Acker.submit`)
            self._stats["events"] += len(decoded.batch)


def _compressed_entries(packed: Packed | None) -> tuple[str, str, memoryview] | None:
    """``(tag, codec, payload)`` of a CompressedPackedForward message as :func:`read_packed` read it, else None."""
    if packed is None:
        return None
    tag, entries, option = packed
    codec = option.get("compressed") if option else None
    if codec is None or codec == "text" or not isinstance(codec, str):
        return None
    return tag, codec, entries
