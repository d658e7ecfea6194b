"""ForwardServer: fluentd in_forward-compatible TCP (+TLS) server and UDP heartbeat, on asyncio.

Per connection (an :class:`asyncio.Protocol`, no StreamReader on the hot path):

* bytes are framed as they arrive (:class:`.decode.FrameReader`); frames are
  decoded lazily, when a submission slot is free, so memory stays bounded;
* each message with a ``chunk`` option is a submission of its own, under
  its chunk id as the idempotency key; those read together are handed to
  the sink in one :meth:`~ingest.batch.Sink.submit_many` call (many slow
  sensors send one small chunk each); consecutive messages without one are
  submitted together; at most ``max_in_flight`` messages per connection
  are pending at once (pipelining; the memory budget bounds them all: a
  client with thousands of tags has one chunk of each waiting while the
  store commits, and a commit of many chunks per stream costs less per
  chunk than one of a chunk each);
* ``{"ack": chunk}`` is written only after ``await sink.submit(...)``
  returned, in the order the chunks arrived;
* while the connection waits for a free slot, or the sink pushes back, the
  socket is not read (``pause_reading``), so TCP pushes back on the client;
* a malformed or oversize message is logged with the peer (and tag and
  limit), is not acknowledged, and closes the connection once the
  messages before it are committed and acknowledged; other connections
  are not affected;
* :class:`ingest.errors.CommitFailed`: logged, no ack; the connection
  reads nothing more and closes once what was submitted before is
  answered, so that the client resends at once over a new connection
  (Fluent Bit waits for an ack without a timeout of its own).

Memory and time (:class:`connectors.limits.Limits`):

* every byte read and not yet committed is charged to the process's
  :class:`connectors.budget.MemoryBudget` before it is read (a bulk
  message for its whole size, from its header; anything else a read the
  budget's room allows at a time): frames, whole or not, until their commit
  is done (:func:`~connectors.budget.held_for` their
  size, what they come to hold decoded and committed), and, before a CompressedPackedForward message
  is decompressed, its decompressed size, found first without keeping the
  output (a bomb costs CPU, not memory; the decompressed limit is at most
  what the budget can hold). Past the budget the connection is not read
  until commits release room; what a submission held is released once it
  is acknowledged;
* with a shared key, a client may send at most :data:`.handshake.MAX_PING_BYTES`
  before its PING is whole, and must complete the handshake within
  ``handshake_timeout``; otherwise it is closed, with the reason logged;
* a connection with nothing received for ``idle_timeout`` seconds and
  nothing owed to it is closed, and so is one whose message does not arrive
  whole within ``frame_timeout`` seconds and a second per ``frame_min_rate``
  bytes of it;
* connections are accepted by a :class:`connectors.listener.Listener`: at
  most ``max_connections`` at once, and out of file descriptors it refuses
  new ones and keeps serving the others.

:attr:`ForwardServer.counters` counts timeouts and refused connections,
:attr:`ForwardServer.budget` holds the memory budget's figures, and
:attr:`ForwardServer.senders` lists each connection (:mod:`connectors.senders`):
its peer and the bytes it sent from the listener, which lists it by its
transport while it is open and among the recently closed after.

When the sink decodes in worker processes (``sink.accepts_undecoded``),
PackedForward and CompressedPackedForward entries are handed over
undecoded (only the framing, tag and options are read here); entries
found malformed there come back as :class:`ingest.errors.UndecodableBatch`
and are reported as any malformed message: no ack for it nor for the
messages after it, the connection closed.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl as ssl_module
from typing import Any, cast

from windvane.connectors.address import host_port
from windvane.connectors.budget import MemoryBudget, inflate_limit
from windvane.connectors.errors import ConnectorConfigError, ListenError, NotStarted
from windvane.connectors.limits import Limits
from windvane.connectors.listener import ConnectionCounters, Listener
from windvane.connectors.senders import Senders
from windvane.ingest.auth import Users
from windvane.ingest.batch import Sink

from .config import ForwardConfig
from .connection import Connection

log = logging.getLogger("windvane.connectors.forward")

#: Bytes read from a socket at once outside bulk messages (asyncio's own reads take at most as much).
READ_SIZE = 256 << 10

#: The server's own counters (:attr:`ForwardServer.stats`), from zero at construction.
_STATS = (
    "connections",
    "connections_total",
    "messages",
    "events",
    "bytes",
    "acks",
    "malformed",
    "rejected_auth",
    "oversize",
    "commit_failed",
    "heartbeats",
)


class ForwardServer:
    """A Forward protocol v1 server handing what it receives to ``sink``.

    ``shared_key`` turns on the HELO/PING/PONG handshake; ``users`` (with
    passwords) adds user auth to it. ``ssl`` serves TLS (the UDP heartbeat
    stays plain, as in fluentd). ``chunk_size_limit`` bounds the bytes of
    one message, ``decompressed_size_limit`` the decompressed entries of
    one CompressedPackedForward message (at most what the memory budget holds decoded:
    :func:`connectors.budget.held_for` of it is the budget).
    ``limits`` sets the connection limits and timeouts; ``budget`` is the
    memory budget, shared with other servers of the process (a budget of
    ``limits.memory_budget`` of its own when not given). ``reuse_port``
    listens (TCP and UDP) beside other processes serving the same port,
    which share its connections and heartbeats.
    """

    def __init__(
        self,
        sink: Sink,
        host: str = ForwardConfig.host,
        port: int = ForwardConfig.port,
        *,
        shared_key: str | None = None,
        users: Users | None = None,
        ssl: ssl_module.SSLContext | None = None,
        self_hostname: str = socket.gethostname(),
        chunk_size_limit: int = ForwardConfig.chunk_size_limit,
        decompressed_size_limit: int = ForwardConfig.decompressed_size_limit,
        max_in_flight: int = 8192,
        heartbeat_udp: bool = True,
        limits: Limits | None = None,
        budget: MemoryBudget | None = None,
        reuse_port: bool = False,
    ) -> None:
        if max_in_flight < 1:
            raise ConnectorConfigError(f"max_in_flight must be at least 1, not {max_in_flight}")
        if users and not shared_key:
            raise ConnectorConfigError("users need a shared_key: Forward user auth is part of the shared-key handshake")
        self.sink = sink
        self.host = host
        self.requested_port = port
        self.shared_key = shared_key
        self.users = users
        self.ssl = ssl
        self.self_hostname = self_hostname
        self.chunk_size_limit = chunk_size_limit
        self.decompressed_size_limit = decompressed_size_limit
        self.max_in_flight = max_in_flight
        self.heartbeat_udp = heartbeat_udp
        self.reuse_port = reuse_port
        self.limits = limits or Limits()
        self.budget = budget or MemoryBudget(self.limits.memory_budget, self.limits.trim_after)
        self.inflate_limit = inflate_limit(decompressed_size_limit, self.budget)
        self.counters = ConnectionCounters()
        #: Who sends: every connection while open, by its transport, and the last ones closed.
        self.senders = Senders("forward")
        # Hand packed entries over undecoded when the sink decodes them in worker processes.
        self.defer = bool(getattr(sink, "accepts_undecoded", False))
        # Entries decoded here are decoded as the tag's record type (vibration blocks: without a copy).
        self.record_types = getattr(sink, "record_type", None)
        # What connections read into (see Connection.get_buffer): one for all, since each read is
        # copied out before the event loop reads another socket.
        self.read_buffer = memoryview(bytearray(READ_SIZE))
        self._listener: Listener | None = None
        self._udp: asyncio.DatagramTransport | None = None
        self._port: int | None = None
        self._connections: set[Connection] = set()
        #: The server's own counters (see :attr:`stats`); its connections and heartbeats add to them.
        self.counts = dict.fromkeys(_STATS, 0)

    @property
    def port(self) -> int:
        """The bound TCP (and UDP heartbeat) port."""
        if self._port is None:
            raise NotStarted("ForwardServer.port is known once start() returned")
        return self._port

    @property
    def stats(self) -> dict[str, int]:
        """Counters: connections (open), messages, events, bytes, acks, malformed, rejected_auth, oversize, ...,
        and the listener's (:class:`connectors.listener.ConnectionCounters`: timeouts, refused, ...)."""
        return dict(self.counts, **self.counters.as_dict(), connections=len(self._connections))

    def connection_opened(self, connection: Connection) -> None:
        """``connection`` is open: it counts in :attr:`stats` and is shut down by :meth:`close`."""
        self._connections.add(connection)

    def connection_closed(self, connection: Connection) -> None:
        """``connection`` is closed and all it held released."""
        self._connections.discard(connection)

    async def start(self) -> None:
        """Bind TCP, and UDP on the same port for heartbeats; port 0 picks a port free for both."""
        loop = asyncio.get_running_loop()
        for attempt in range(20):
            listener = Listener(
                lambda: Connection(self),
                self.host,
                self.requested_port,
                name="Forward",
                ssl=self.ssl,
                max_connections=self.limits.max_connections,
                handshake_timeout=self.limits.handshake_timeout,
                counters=self.counters,
                reuse_port=self.reuse_port,
                senders=self.senders,
            )
            await listener.start()
            port = listener.port
            if not self.heartbeat_udp:
                break
            try:
                self._udp, _ = await loop.create_datagram_endpoint(
                    lambda: _Heartbeat(self), local_addr=(self.host, port), reuse_port=self.reuse_port
                )
                break
            except OSError as exc:
                listener.close()
                if self.requested_port != 0 or attempt == 19:
                    raise ListenError("Forward", host_port(self.host, port), "UDP, for heartbeats", exc) from exc
        self._listener = listener
        self._port = port
        log.info("Forward server listening on %s:%d%s", self.host, port, " (TLS)" if self.ssl else "")

    async def close(self) -> None:
        """Stop accepting; commit and acknowledge what was received; close every connection."""
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        if self._udp is not None:
            self._udp.close()
        connections = list(self._connections)
        for conn in connections:
            conn.shutdown()
        await asyncio.gather(*(conn.finished for conn in connections), return_exceptions=True)


class _Heartbeat(asyncio.DatagramProtocol):
    """UDP heartbeat: any datagram is answered with one 0x00 byte (in_forward's HEARTBEAT_UDP_PAYLOAD)."""

    def __init__(self, server: ForwardServer) -> None:
        self.server = server
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast("asyncio.DatagramTransport", transport)  # a datagram endpoint's own

    def datagram_received(self, data: bytes, addr: Any) -> None:
        self.server.counts["heartbeats"] += 1
        if self.transport is not None:
            self.transport.sendto(b"\x00", addr)

    def error_received(self, exc: Exception) -> None:
        log.debug("UDP heartbeat error: %s", exc)
