"""One Forward connection: an :class:`asyncio.BufferedProtocol` reading frames and running its parts.

Bytes are framed as they arrive (:class:`.decode.FrameReader`); a bulk
message's entries are received straight where the message is kept. The
connection owns its parts, each holding its own state:

* :class:`.reading.Reading`: the transport; pausing, resuming and stopping reading;
* :class:`.authenticate.Authenticator`: the shared-key handshake on the wire;
* :class:`.budgeted.Admission`: admission by the memory budget, its charges and its callbacks;
* :class:`.timers.Timers`: the handshake, idle and frame timeouts;
* :class:`.pump.Pump`: decoding frames read and submitting them;
* :class:`.acks.Acker`: awaiting submissions and acknowledging them in order.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, cast

from windvane.connectors.budget import held_for_message
from windvane.connectors.senders import Sender

from .acks import Acker
from .authenticate import Authenticator
from .budgeted import Admission
from .decode import FrameReader
from .errors import ForwardError, OversizeMessage
from .framing import Frame
from .handshake import Handshake
from .pump import Pump
from .reading import Reading
from .timers import Timers

if TYPE_CHECKING:
    from .server import ForwardServer

log = logging.getLogger("windvane.connectors.forward")


class Connection(asyncio.BufferedProtocol):
    """A client's connection to a :class:`.server.ForwardServer`.

    Reads while a submission slot and room in the memory budget are free;
    acknowledges each chunk once committed, in arrival order; on a malformed
    or oversize message stops reading and closes once what came before it
    is committed and acknowledged; on a failed commit stops reading and
    closes once what was submitted is answered. :attr:`finished` is done once the
    connection is closed and all it held is released.
    """

    def __init__(self, server: ForwardServer) -> None:
        self._server = server
        self._stats = server.counts
        self._read_buffer = server.read_buffer
        self._into_bulk = False  # the last buffer handed to the transport was a bulk message's own
        self._frames = frames = FrameReader(server.chunk_size_limit)
        self._reading = reading = Reading()
        self._admission = Admission(server.budget, server.counters, reading, frames, close=self._close_now)
        self._acker = Acker(
            server.sink, reading, self._admission.charges, self._stats, report=self._report, failed=self._commit_failed
        )
        self._pump = Pump(
            reading,
            frames,
            self._admission,
            self._acker,
            self._stats,
            max_in_flight=server.max_in_flight,
            inflate_limit=server.inflate_limit,
            defer=server.defer,
            record_types=server.record_types,
            report=self._report,
        )
        self._timers = Timers(server.limits, server.counters, reading, frames, busy=self._busy, close=self._close_now)
        # The handshake (None without a shared key): once accepted, it names the sender's user and hostname.
        self._handshake = (
            Handshake(server.shared_key, server.self_hostname, server.users) if server.shared_key else None
        )
        # The connection's row in the server's senders table, listed by its transport (None: not listed).
        self._sender: Sender | None = None
        # The handshake while it is not done (None without a shared key, and once the PING is accepted).
        self._auth = (
            Authenticator(
                self._handshake,
                reading,
                frames,
                server.counters,
                self._stats,
                feed=self._feed,
                accepted=self._authenticated,
                close=self._close_now,
            )
            if self._handshake is not None
            else None
        )
        self.finished: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    # -- asyncio.Protocol -------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A TCP listener's connections have stream transports.
        self._reading.attach(cast("asyncio.Transport", transport))
        self._sender = self._acker.sender = self._server.senders.get(transport)
        self._server.connection_opened(self)
        self._stats["connections_total"] += 1
        if self._auth is not None:
            self._auth.greet()
        self._timers.start(handshake=self._auth is not None)
        asyncio.get_running_loop().create_task(self._run())

    def get_buffer(self, sizehint: int) -> memoryview:
        # The rest of an admitted bulk message's entries is received where the message is kept (never
        # copied by Python); anything else into the server's read buffer, as much as the memory budget
        # allows, copied out by buffer_updated at once.
        authenticating = self._auth is not None
        room = None if authenticating or self._reading.stopped or not self._admission.admitted else self._frames.room()
        self._into_bulk = room is not None
        if room is not None:
            return room
        buffer = self._read_buffer
        return buffer[: self._admission.read_size(len(buffer), authenticating=authenticating)]

    def buffer_updated(self, nbytes: int) -> None:
        if not self._into_bulk:
            self.data_received(bytes(self._read_buffer[:nbytes]))
            return
        self._into_bulk = False
        self._stats["bytes"] += nbytes
        self._reading.touch()
        if not self._reading.stopped:
            self._take(self._frames.filled(nbytes))

    def data_received(self, data: bytes) -> None:
        self._stats["bytes"] += len(data)
        self._reading.touch()
        if self._reading.stopped:
            return
        if self._auth is not None:
            data = self._auth.read(data)
        if data and not self._reading.stopped:
            self._feed(data)

    def eof_received(self) -> bool:
        # Keep the transport open for writing: acks of what was received are still due.
        self._reading.end()
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        self._reading.lose()

    def shutdown(self) -> None:
        """Server closing: read nothing more, finish what was received."""
        self._reading.stop()
        self._reading.wake.set()

    # -- reading ------------------------------------------------------------

    def _feed(self, data: bytes) -> None:
        self._take(self._frames.feed(data))

    def _take(self, frames: Iterator[Frame]) -> None:
        """Queue the ``frames`` the bytes just read complete, and charge the budget for what is held."""
        charged = 0
        whole = False
        put = self._pump.put
        try:
            for frame in frames:
                whole = True
                if self._auth is not None:
                    self._auth.check_ping(frame)
                    if self._reading.stopped:
                        break
                    continue
                put(frame)
                charged += held_for_message(len(frame))
        except ForwardError as exc:
            put(exc)
            self._reading.stop()
        self._admission.charge(charged, whole)
        self._timers.frame_clock(whole)
        self._reading.wake.set()

    def _authenticated(self) -> None:
        """The PING was accepted: what follows is read as messages, idle from now."""
        self._auth = None
        self._timers.idle_from_now()
        if self._sender is not None and self._handshake is not None:
            self._sender.user = self._handshake.username or None
            self._sender.hostname = self._handshake.client_hostname or None

    # -- stopping -----------------------------------------------------------

    def _busy(self) -> bool:
        """Whether the connection holds something not yet acknowledged, or waits on the budget (not idle)."""
        return self._pump.busy or self._acker.busy or self._admission.holding

    def _close_now(self) -> None:
        self._reading.stop()
        self._pump.drop_pending()
        self._reading.abort()
        self._reading.wake.set()

    def _report(self, exc: ForwardError) -> None:
        """Log a malformed or oversize message; drop what was read after it and stop reading."""
        if isinstance(exc, OversizeMessage):
            self._stats["oversize"] += 1
            log.error(
                "oversize Forward message from %s, tag %r: over the limit of %d bytes; dropped, no ack, closing: %s",
                self._reading.peer,
                exc.tag,
                exc.limit,
                exc,
            )
        else:
            self._stats["malformed"] += 1
            log.error("malformed Forward message from %s: %s; no ack, closing", self._reading.peer, exc)
        self._pump.drop()
        self._reading.stop()

    def _commit_failed(self) -> None:
        """A commit failed (its chunks are not acknowledged): drop what was read and not yet submitted, and stop
        reading. The connection closes once what was submitted is answered, so that the client resends at once
        over a new connection: a client waiting for an ack may have no timeout of its own (Fluent Bit has none)."""
        self._pump.drop()
        self._reading.stop()
        self._reading.wake.set()

    # -- the connection's life ----------------------------------------------

    async def _run(self) -> None:
        acker = asyncio.get_running_loop().create_task(self._acker.ack_in_order())
        try:
            await self._pump.run()
        except Exception:  # a fault of one connection, whatever it is, is logged and ends that connection only
            log.exception("Forward connection from %s failed", self._reading.peer)
        finally:
            self._acker.end()
            await acker
            self._timers.cancel()
            self._reading.close()
            self._pump.clear()
            self._admission.release_all()
            self._server.connection_closed(self)
            if not self.finished.done():
                self.finished.set_result(None)
