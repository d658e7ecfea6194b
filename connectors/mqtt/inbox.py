"""Inbox: messages handed from paho's network thread to the event loop, within a byte budget.

The network thread hands each delivery over with :meth:`Inbox.put`, waiting
while the bytes received and not yet committed are at the budget (the socket is not
read meanwhile, so TCP pushes back on the broker); the event loop waits
for arrivals (:meth:`Inbox.wait`), takes them in order (:meth:`Inbox.popleft`)
and releases what they held once their commit is settled (:meth:`Inbox.release`).
"""

from __future__ import annotations

import asyncio
import collections
import threading
from dataclasses import dataclass

from .decode import Events


@dataclass(slots=True)
class Delivery:
    """One message as received: its events, and what acknowledging it takes."""

    tag: str
    events: Events
    size: int
    mid: int
    qos: int
    dup: bool
    key: bytes | None  # QoS 1 messages with events only
    connection: int  # the connection it arrived on; only that connection may acknowledge it

    @property
    def checked(self) -> bool:
        """Whether its key is checked: a redelivered QoS 1 message (DUP set) that may be committed already."""
        return self.dup and self.key is not None


class Inbox:
    """Deliveries received and not yet committed, at most about ``max_bytes`` of them; :attr:`loop` is the event
    loop to wake (None: none yet)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.loop: asyncio.AbstractEventLoop | None = None
        self._deliveries: collections.deque[Delivery] = collections.deque()
        self._room = threading.Condition()  # the network thread waits here while the budget is spent
        self._buffered = 0  # bytes received and not yet committed
        self._closed = False
        self._wake_scheduled = False
        self._arrived = asyncio.Event()

    def put(self, delivery: Delivery) -> None:
        """Queue ``delivery`` once the budget has room and wake the event loop (network thread); dropped, not
        acknowledged, if the inbox is closed meanwhile."""
        with self._room:
            while self._buffered >= self.max_bytes and not self._closed:
                self._room.wait()  # the socket is not read meanwhile: TCP pushes back on the broker
            if self._closed:
                return
            self._buffered += delivery.size
        self._deliveries.append(delivery)
        if not self._wake_scheduled and self.loop is not None:
            self._wake_scheduled = True
            self.loop.call_soon_threadsafe(self._wake)

    def _wake(self) -> None:
        self._wake_scheduled = False
        self._arrived.set()

    async def wait(self) -> None:
        """Until deliveries were put since the last wait."""
        await self._arrived.wait()
        self._arrived.clear()

    def __len__(self) -> int:
        return len(self._deliveries)

    def popleft(self) -> Delivery:
        """The oldest delivery, taken out (the budget still counts it until :meth:`release`)."""
        return self._deliveries.popleft()

    def release(self, nbytes: int) -> None:
        """Give back the budget ``nbytes`` of taken deliveries held (their commit is settled)."""
        with self._room:
            self._buffered -= nbytes
            self._room.notify_all()

    def close(self) -> None:
        """Take no more deliveries; a network thread waiting for room returns."""
        with self._room:
            self._closed = True
            self._room.notify_all()
