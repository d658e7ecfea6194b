"""What one Forward connection holds, and how it stops and pauses reading.

:class:`ConnectionState` is the base of the connection's parts (:mod:`.timers`,
:mod:`.budgeted`, :mod:`.authenticate`, :mod:`.pump`, :mod:`.acks`,
:mod:`.connection`): each part reads and changes this state, none holds any
of its own.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import TYPE_CHECKING

from windvane.connectors.budget import Charges, held_for_message

from .decode import Decoded, FrameReader
from .errors import ForwardError, OversizeMessage
from .framing import Frame
from .handshake import Handshake

if TYPE_CHECKING:
    from .server import ForwardServer

log = logging.getLogger("windvane.connectors.forward")


class ConnectionState:
    """One connection's state: frames read, submissions in flight, handshake, timers, budget charges.

    Reading stops for good on an error, EOF or shutdown (:meth:`_stop_reading`);
    it pauses while a slot, the sink or the memory budget holds it back
    (:meth:`_pause`, :meth:`_resume`). The ``wake`` event tells the pump and
    the acker that something changed: new frames, a free slot, or a stop.
    """

    def __init__(self, server: ForwardServer) -> None:
        self.server = server
        self.into_bulk = False  # the last buffer handed to the transport was a bulk message's own
        self.stats = server.counts
        self.budget = server.budget
        self.frames = FrameReader(server.chunk_size_limit)
        self.pending: deque[Frame | ForwardError] = deque()  # framed, not yet decoded
        # Sink calls in arrival order: the task, the ack to send for each message (None: none), the bytes
        # they hold in the budget; and how many messages they carry between them.
        self.inflight: deque[tuple[asyncio.Task[list[bool | None]] | None, list[bytes | None], int]] = deque()
        self.in_flight_messages = 0
        self.acking = True  # False from a message found malformed by the sink on: nothing after it is acked
        self.handshake = Handshake(server.shared_key, server.self_hostname, server.users) if server.shared_key else None
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.stopped = False  # no more reading: error, EOF, shutdown
        self.lost = False
        self.paused = False
        self.budget_paused = False  # waiting for room in the memory budget
        self.has_pass = False  # reading on past the budget's limit until the frame being read is whole
        self.admitted = False  # the bulk message being read was admitted by the memory budget
        self.charges = Charges(server.budget)  # what this connection holds in the memory budget
        self.wake = asyncio.Event()  # new frames, a free slot, or stop
        self.carry: tuple[Decoded, int] | None = None  # decoded while merging (and its charge), submitted next
        loop = asyncio.get_running_loop()
        self.last_read = loop.time()
        self.timer: asyncio.TimerHandle | None = None  # the handshake or idle timeout
        self.pass_timer: asyncio.TimerHandle | None = None  # closes a pass holder that stalls
        # When the message being read started (moved on by the time reading was paused), None between
        # messages; and the timer that checks it arrives in time (frame_timeout, frame_min_rate).
        self.frame_started: float | None = None
        self.paused_at = 0.0
        self.frame_timer: asyncio.TimerHandle | None = None
        self.finished: asyncio.Future[None] = loop.create_future()

    # -- flow control -----------------------------------------------------

    def _pause(self) -> None:
        if not self.paused and not self.lost and self.transport is not None:
            self.paused = True
            self.paused_at = asyncio.get_running_loop().time()
            self.transport.pause_reading()

    def _resume(self) -> None:
        if self.paused and not self.stopped and not self.lost and self.transport is not None:
            self.paused = False
            if self.frame_started is not None:  # the client could not send meanwhile
                self.frame_started += asyncio.get_running_loop().time() - self.paused_at
            self.transport.resume_reading()

    def _stop_reading(self) -> None:
        self.stopped = True
        self._pause()

    def _close_now(self) -> None:
        self._stop_reading()
        self.pending.clear()
        if self.transport is not None and not self.lost:
            self.transport.abort()
        self.wake.set()

    # -- errors -------------------------------------------------------------

    def _report(self, exc: ForwardError) -> None:
        """Log a malformed or oversize message; drop what was read after it and stop reading."""
        if isinstance(exc, OversizeMessage):
            self.stats["oversize"] += 1
            log.error(
                "oversize Forward message from %s, tag %r: over the limit of %d bytes; dropped, no ack, closing: %s",
                self.peer,
                exc.tag,
                exc.limit,
                exc,
            )
        else:
            self.stats["malformed"] += 1
            log.error("malformed Forward message from %s: %s; no ack, closing", self.peer, exc)
        self._drop_pending()
        self._stop_reading()

    def _drop_pending(self) -> None:
        for item in self.pending:
            if not isinstance(item, ForwardError):
                self.charges.add("queued", -held_for_message(len(item)))
        self.pending.clear()
        if self.carry is not None:
            self.charges.add("queued", -self.carry[1])
            self.carry = None
