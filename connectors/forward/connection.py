"""One Forward connection: an :class:`asyncio.BufferedProtocol` reading frames and running its parts.

Bytes are framed as they arrive (:class:`.decode.FrameReader`); a bulk
message's entries are received straight where the message is kept. The
connection's parts, each a module of its own:

* :mod:`.state`: what the connection holds; pausing and stopping reading;
* :mod:`.authenticate`: the shared-key handshake on the wire;
* :mod:`.budgeted`: admission by the memory budget, charging it, and its callbacks;
* :mod:`.timers`: the handshake, idle, frame and budget-pass timeouts;
* :mod:`.pump`: decoding frames read and submitting them;
* :mod:`.acks`: awaiting submissions and acknowledging them in order.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import cast

from windvane.connectors.budget import held_for_message

from .authenticate import Authenticating
from .budgeted import Budgeted
from .errors import ForwardError
from .framing import Frame
from .pump import Pumping

log = logging.getLogger("windvane.connectors.forward")


class Connection(Authenticating, Budgeted, Pumping, asyncio.BufferedProtocol):
    """A client's connection to a :class:`.server.ForwardServer`.

    Reads while a submission slot and room in the memory budget are free;
    acknowledges each chunk once committed, in arrival order; on a malformed
    or oversize message stops reading and closes once what came before it
    is committed and acknowledged. :attr:`finished` is done once the
    connection is closed and all it held is released.
    """

    # -- asyncio.Protocol -------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast("asyncio.Transport", transport)  # a TCP listener's connections have stream transports
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple) and len(peer) >= 2:
            self.peer = f"[{peer[0]}]:{peer[1]}" if ":" in str(peer[0]) else f"{peer[0]}:{peer[1]}"
        self.server.connection_opened(self)
        self.stats["connections_total"] += 1
        if self.handshake is not None:
            self._greet()
        self._start_timers()
        asyncio.get_running_loop().create_task(self._run())

    def get_buffer(self, sizehint: int) -> memoryview:
        # The rest of an admitted bulk message's entries is received where the message is kept (never
        # copied by Python); anything else into the server's read buffer, as much as the memory budget
        # allows, copied out by buffer_updated at once.
        room = None if self.handshake is not None or self.stopped or not self.admitted else self.frames.room()
        self.into_bulk = room is not None
        if room is not None:
            return room
        buffer = self.server.read_buffer
        return buffer[: self._read_size(len(buffer))]

    def buffer_updated(self, nbytes: int) -> None:
        if not self.into_bulk:
            self.data_received(bytes(self.server.read_buffer[:nbytes]))
            return
        self.into_bulk = False
        self.stats["bytes"] += nbytes
        self.last_read = asyncio.get_running_loop().time()
        if not self.stopped:
            self._take(self.frames.filled(nbytes))

    def data_received(self, data: bytes) -> None:
        self.stats["bytes"] += len(data)
        self.last_read = asyncio.get_running_loop().time()
        if self.stopped:
            return
        if self.handshake is not None:
            data = self._read_until_authenticated(data)
        if data and not self.stopped:
            self._feed(data)

    def eof_received(self) -> bool:
        # Keep the transport open for writing: acks of what was received are still due.
        self.stopped = True
        self.wake.set()
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.stopped = True
        self.wake.set()

    def shutdown(self) -> None:
        """Server closing: read nothing more, finish what was received."""
        self._stop_reading()
        self.wake.set()

    # -- reading ------------------------------------------------------------

    def _feed(self, data: bytes) -> None:
        self._take(self.frames.feed(data))

    def _take(self, frames: Iterator[Frame]) -> None:
        """Queue the ``frames`` the bytes just read complete, and charge the budget for what is held."""
        charged = 0
        whole = False
        try:
            for frame in frames:
                whole = True
                if self.handshake is not None:
                    self._check_ping(frame)
                    if self.stopped:
                        break
                    continue
                self.pending.append(frame)
                charged += held_for_message(len(frame))
        except ForwardError as exc:
            self.pending.append(exc)
            self._stop_reading()
        self._charge(charged, whole)
        self._frame_clock(whole)
        self.wake.set()

    # -- the connection's life ----------------------------------------------

    async def _run(self) -> None:
        acker = asyncio.get_running_loop().create_task(self._ack_in_order())
        try:
            await self._pump()
        except Exception:  # a fault of one connection, whatever it is, is logged and ends that connection only
            log.exception("Forward connection from %s failed", self.peer)
        finally:
            self.stopped = True
            self.inflight.append((None, [], 0))  # end marker for the acker
            self.wake.set()
            await acker
            for timer in (self.timer, self.frame_timer):
                if timer is not None:
                    timer.cancel()
            if self.transport is not None and not self.lost:
                self.transport.close()
            self._release_all()
            self.server.connection_closed(self)
            if not self.finished.done():
                self.finished.set_result(None)
