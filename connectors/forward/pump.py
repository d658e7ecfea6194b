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

from windvane.connectors.budget import held_for, held_for_message
from windvane.connectors.inflate import inflated_size
from windvane.ingest.batch import Batch

from .acks import Acknowledging, Item
from .decode import Decoded, Packed, ack_bytes, decode_message, merge_batches, read_packed
from .errors import ForwardError, OversizeMessage
from .framing import Frame

_MAX_MERGE = 4096  # chunkless messages joined into one submission at most
_MAX_MANY = 1024  # chunk messages handed to the sink in one call at most


class Pumping(Acknowledging):
    """Decodes what was read and hands it to the sink, a slot at a time."""

    async def _pump(self) -> None:
        while True:
            item = await self._next()
            if item is None:
                return
            decoded, charge = item
            json_mode = bool(self.frames.json)
            while self.in_flight_messages >= self.server.max_in_flight:
                self._pause()
                self.wake.clear()
                await self.wake.wait()
            group = [decoded]
            if decoded.key is None:  # chunkless messages already here: one submission
                charge += self._take_ready(group, _MAX_MERGE - 1, keyed=False)
                items: list[Item] = [(merge_batches([d.batch for d in group]), None)]
                acks: list[bytes | None] = [None]
            else:  # messages with a chunk option already here: one submission each, in one call
                room = min(self.server.max_in_flight - self.in_flight_messages, _MAX_MANY)
                charge += self._take_ready(group, room - 1, keyed=True)
                items = [([d.batch], d.key) for d in group]
                acks = [ack_bytes(d.chunk, json_mode) if d.chunk is not None else None for d in group]
            del group
            self.charges.move(charge, "queued", "submitted")
            self.charges.settle()
            task = asyncio.get_running_loop().create_task(self._submit_many(items))
            self.inflight.append((task, acks, charge))
            self.in_flight_messages += len(items)
            del decoded, items, item  # what is committed is not kept here once acknowledged
            self.wake.set()  # the acker

    async def _next(self) -> tuple[Decoded, int] | None:
        """The next decoded message and the bytes it holds in the budget; None when the connection is done."""
        if self.carry is not None:
            carried, self.carry = self.carry, None
            return carried
        while True:
            if not self.pending:
                if self.stopped:
                    return None
                if self.in_flight_messages < self.server.max_in_flight and not self.budget_paused:
                    self._resume()
                self.wake.clear()
                await self.wake.wait()
                continue
            item = self.pending.popleft()
            if isinstance(item, ForwardError):
                self._report(item)
                return None
            charge = held_for_message(len(item))
            json_mode = bool(self.frames.json)
            try:
                packed = read_packed(item, json_mode)
                compressed = _compressed_entries(packed)
                if compressed is not None:
                    reserved = await self._reserve_inflated(*compressed)
                    if reserved is None:
                        self.charges.add("queued", -charge)
                        return None
                    charge += reserved
                decoded = self._decode(item, json_mode, packed)
            except ForwardError as exc:
                self.charges.add("queued", -charge)
                self.charges.settle()
                self._report(exc)
                return None
            if decoded is None:  # TCP heartbeat (nil), ignored as in in_forward
                self.charges.add("queued", -charge)
                continue
            self._count(decoded)
            return decoded, charge

    def _decode(self, frame: Frame, json_mode: bool, packed: Packed | None) -> Decoded | None:
        """``frame`` decoded as the server is configured to (``packed``: what :func:`read_packed` read of it)."""
        return decode_message(
            frame,
            json_mode=json_mode,
            decompressed_size_limit=self.server.inflate_limit,
            defer=self.server.defer,
            packed=packed,
            record_types=self.server.record_types,
        )

    async def _reserve_inflated(self, tag: str, codec: str, payload: memoryview) -> int | None:
        """Reserve the decompressed size of a compressed message in the budget (found without keeping the
        output: a bomb costs CPU, not memory); None if it is over the limit (reported)."""
        limit = self.server.inflate_limit
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
        held = held_for(size)
        await self.budget.reserve(held)
        self.charges.reserved(held)
        return held

    def _take_ready(self, group: list[Decoded], limit: int, *, keyed: bool) -> int:
        """Decode up to ``limit`` frames already read, while they are messages with a chunk option
        (``keyed``) or without one, into ``group``; the budget bytes they hold. The first message of the
        other kind is carried to the next submission; errors and compressed messages are left for
        :meth:`_next` (which reports the one and reserves the other's decompressed size)."""
        charge = 0
        json_mode = bool(self.frames.json)
        while self.pending and limit > 0:
            item = self.pending[0]
            if isinstance(item, ForwardError):
                break  # reported by _next
            try:
                packed = read_packed(item, json_mode)  # read once, for both questions
                if _compressed_entries(packed) is not None:
                    break  # its decompressed size is reserved by _next
                decoded = self._decode(item, json_mode, packed)
            except ForwardError as exc:
                self.pending[0] = exc  # reported by _next, after this submission
                self.charges.add("queued", -held_for_message(len(item)))
                break
            self.pending.popleft()
            if decoded is None:
                self.charges.add("queued", -held_for_message(len(item)))
                continue
            self._count(decoded)
            if (decoded.key is not None) != keyed:
                self.carry = (decoded, held_for_message(len(item)))
                break
            group.append(decoded)
            charge += held_for_message(len(item))
            limit -= 1
        return charge

    def _count(self, decoded: Decoded) -> None:
        self.stats["messages"] += 1
        if isinstance(decoded.batch, Batch):  # undecoded entries are counted once committed (acks._submit_many)
            self.stats["events"] += len(decoded.batch)


def _compressed_entries(packed: Packed | None) -> tuple[str, str, memoryview] | None:
    """``(tag, codec, payload)`` of a CompressedPackedForward message as :func:`read_packed` read it, else None."""
    if packed is None:
        return None
    tag, entries, option = packed
    codec = option.get("compressed") if option else None
    if codec is None or codec == "text" or not isinstance(codec, str):
        return None
    return tag, codec, entries
