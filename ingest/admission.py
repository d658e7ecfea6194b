"""Admission: how many received bytes may wait for their commit, and what a submitter over that hears.

Memory is bounded: submissions wait (or, with ``wait=False``, raise
:class:`~ingest.errors.Backpressure`, with a ``Retry-After`` sized by the
recent commit throughput) while ``max_pending_bytes`` are queued.
"""

from __future__ import annotations

import asyncio
import threading

from .errors import Backpressure
from .observer import CommitObserver


class Admission:
    """The bytes reserved by submissions not yet answered, bounded by ``max_pending_bytes``.

    :meth:`reserve` runs on a submitter's event loop, :meth:`release` on any
    thread; a submission larger than the whole budget still goes through, alone.
    """

    def __init__(self, max_pending_bytes: int, observer: CommitObserver):
        self.max_pending_bytes = max_pending_bytes
        self._observer = observer
        self._lock = threading.Lock()
        self._pending = 0
        self._room: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self._throughput = 50e6  # bytes/s, refined after each commit; sizes Retry-After

    @property
    def pending(self) -> int:
        """Bytes reserved and not yet released."""
        return self._pending

    async def reserve(self, size: int, wait: bool) -> None:
        """Reserve ``size`` bytes, waiting for room (``wait=False``: raising Backpressure instead)."""
        loop = asyncio.get_running_loop()
        while True:
            with self._lock:
                if self._pending == 0 or self._pending + size <= self.max_pending_bytes:
                    self._pending += size
                    self._observer.pending(self._pending)
                    return
                if not wait:
                    retry = max(1.0, self._pending / self._throughput)
                    raise Backpressure(
                        f"{self._pending} bytes are waiting to be committed (limit {self.max_pending_bytes}); "
                        f"the store is behind",
                        retry_after=retry,
                    )
                room: asyncio.Future[None] = loop.create_future()
                self._room.append((loop, room))
            await room

    def release(self, size: int) -> None:
        """``size`` reserved bytes are answered: wake whoever waits for room."""
        with self._lock:
            self._pending -= size
            self._observer.pending(self._pending)
            waiting, self._room = self._room, []
        for loop, room in waiting:
            loop.call_soon_threadsafe(_open, room)

    def measured(self, size: int, seconds: float) -> None:
        """A group of ``size`` bytes took ``seconds`` from validation to commit: refine the throughput."""
        if seconds > 0 and size > 1 << 20:
            self._throughput = 0.8 * self._throughput + 0.2 * (size / seconds)


def _open(room: asyncio.Future[None]) -> None:
    """On the waiter's event loop: tell it there may be room (once: a room already told stays as it is)."""
    if not room.done():
        room.set_result(None)
