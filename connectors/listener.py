"""A TCP listener whose accepting the connectors control: a connection limit, and file descriptors running out.

asyncio's own ``create_server`` accepts whatever comes and, when the process
has no file descriptor left (EMFILE), logs "accept() out of system
resource" every second while the clients waiting to be accepted hang.
:class:`Listener` instead:

* closes a connection at once, at accept, when ``max_connections`` are open
  on this listener (counted in :attr:`ConnectionCounters.refused_over_limit`);
* keeps one spare descriptor; out of descriptors, it gives the spare up to
  accept the waiting client and close it at once, then takes the spare back
  (counted in :attr:`ConnectionCounters.refused_out_of_fds`, logged once a
  minute), so clients hear "no" instead of hanging, the connections open
  are served as usual, and accepting resumes by itself once descriptors
  are free again;
* gives TLS clients ``handshake_timeout`` seconds to complete the handshake;
* with ``senders``, lists each connection there (:mod:`connectors.senders`)
  from its start to its end, keyed by its transport, with the bytes it
  sends: the server finds a connection's sender by its transport.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import resource
import socket
import ssl as ssl_module
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, cast

from windvane.connectors.address import host_port
from windvane.connectors.errors import ConnectorConfigError, ListenError, NotStarted
from windvane.connectors.senders import Sender, Senders

log = logging.getLogger("windvane.connectors")

_OUT_OF_RESOURCES = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)
_ACCEPTS_PER_WAKEUP = 100  # as asyncio's backlog loop: other connections get their turn in between
_RETRY_DELAY = 0.5  # seconds before accepting again when not even the spare descriptor helped
_WARN_EVERY = 60.0  # seconds between two warnings of one kind


@dataclass
class ConnectionCounters:
    """Counters of a listener's connections, for metrics; each only grows."""

    accepted: int = 0
    refused_over_limit: int = 0  # closed at accept: max_connections were open
    refused_out_of_fds: int = 0  # closed at accept: the process had no file descriptor left
    handshake_timeouts: int = 0  # TLS, or the Forward HELO/PING/PONG, not completed in time
    handshake_failures: int = 0  # TLS handshakes that failed otherwise
    idle_timeouts: int = 0  # closed after the idle timeout with nothing received or owed
    header_timeouts: int = 0  # HTTP: a request's headers did not arrive in time
    body_timeouts: int = 0  # HTTP: a request's body did not arrive in time (answered 408)
    frame_timeouts: int = 0  # Forward: a message did not arrive whole in time (frame_timeout, frame_min_rate)
    preauth_oversize: int = 0  # Forward: more than a PING's worth of bytes sent before the handshake
    budget_stalls: int = 0  # Forward: closed stalling an incomplete frame while the memory budget was full
    budget_refusals: int = 0  # HTTP: answered 503 because the memory budget was full

    @property
    def timeouts(self) -> int:
        """Connections closed because a handshake, header, body, frame or idle timeout expired."""
        return (
            self.handshake_timeouts
            + self.idle_timeouts
            + self.header_timeouts
            + self.body_timeouts
            + self.frame_timeouts
        )

    @property
    def refused(self) -> int:
        """Connections closed at accept: the connection limit was reached, or no descriptor was left."""
        return self.refused_over_limit + self.refused_out_of_fds

    def as_dict(self) -> dict[str, int]:
        """Every counter, and the two sums :attr:`timeouts` and :attr:`refused` (what ``/metrics`` shows)."""
        return {**asdict(self), "timeouts": self.timeouts, "refused": self.refused}


class ProtocolProxy(asyncio.Protocol):
    """Passes every event of a connection to ``inner``, the protocol that serves it; subclasses watch them."""

    def __init__(self, inner: asyncio.Protocol) -> None:
        self.inner = inner

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()


class _Tracked(ProtocolProxy):
    """Tells the listener when the connection ends."""

    def __init__(self, inner: asyncio.Protocol, listener: Listener) -> None:
        super().__init__(inner)
        self.listener = listener
        self.made = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.made = True
        super().connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self.listener.connection_ended()
        super().connection_lost(exc)


class _TrackedBuffered(_Tracked, asyncio.BufferedProtocol):
    """:class:`_Tracked` for a protocol that reads into its own buffers (asyncio.BufferedProtocol)."""

    def __init__(self, inner: asyncio.BufferedProtocol, listener: Listener) -> None:
        # The proxy's data_received is never called for a buffered protocol: the events it passes on
        # (made, EOF, lost, writing paused) are the same for both kinds.
        super().__init__(cast("asyncio.Protocol", inner), listener)
        self.buffered = inner

    def get_buffer(self, sizehint: int) -> Any:
        return self.buffered.get_buffer(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        self.buffered.buffer_updated(nbytes)


class _Watched(_Tracked):
    """:class:`_Tracked` that also lists the connection among the listener's senders, with the bytes it sends."""

    sender: Sender

    def __init__(self, inner: asyncio.Protocol, listener: Listener, senders: Senders) -> None:
        super().__init__(inner, listener)
        self.senders = senders
        self.transport: asyncio.BaseTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.sender = self.senders.open(transport, _peer(transport))
        super().connection_made(transport)

    def data_received(self, data: bytes) -> None:
        self.sender.bytes += len(data)
        self.inner.data_received(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.transport is not None:
            self.senders.close(self.transport)
        super().connection_lost(exc)


class _WatchedBuffered(_Watched, _TrackedBuffered):
    """:class:`_Watched` for a protocol that reads into its own buffers (asyncio.BufferedProtocol)."""

    def __init__(self, inner: asyncio.BufferedProtocol, listener: Listener, senders: Senders) -> None:
        # _Watched's, then _TrackedBuffered's (the next in the order of bases) with the buffered protocol.
        super().__init__(cast("asyncio.Protocol", inner), listener, senders)
        self.buffered = inner

    def buffer_updated(self, nbytes: int) -> None:
        self.sender.bytes += nbytes
        self.buffered.buffer_updated(nbytes)


def _peer(transport: asyncio.BaseTransport) -> str:
    """``host:port`` of the client of ``transport`` ("?" when the socket has no address to tell)."""
    peer = transport.get_extra_info("peername")
    return host_port(str(peer[0]), peer[1]) if isinstance(peer, tuple) and len(peer) >= 2 else "?"


class Listener:
    """Accepts TCP connections on ``host:port`` for ``protocol_factory``; see the module docstring.

    ``name`` names the listener in logs ("Forward", "HTTP"); ``reuse_port``
    shares the address with other processes listening on it the same way. :attr:`open` is
    the number of connections open; :attr:`counters` what was refused and why. ``senders`` lists
    the connections (see the module docstring).
    """

    def __init__(
        self,
        protocol_factory: Callable[[], asyncio.Protocol | asyncio.BufferedProtocol],
        host: str,
        port: int,
        *,
        name: str,
        max_connections: int,
        handshake_timeout: float,
        ssl: ssl_module.SSLContext | None = None,
        counters: ConnectionCounters | None = None,
        backlog: int = 1024,
        reuse_port: bool = False,
        senders: Senders | None = None,
    ) -> None:
        if max_connections < 1:
            raise ConnectorConfigError(f"max_connections must be at least 1, not {max_connections}")
        self.protocol_factory = protocol_factory
        self.host = host
        self.requested_port = port
        self.name = name
        self.max_connections = max_connections
        self.handshake_timeout = handshake_timeout
        self.ssl = ssl
        self.counters = counters or ConnectionCounters()
        self.backlog = backlog
        #: Bind with SO_REUSEPORT: processes serving one address each listen on it, and the kernel spreads
        #: the connections between them.
        self.reuse_port = reuse_port
        #: Where each connection is listed while open, and for a while after (None: nowhere).
        self.senders = senders
        self.open = 0
        self._sockets: list[socket.socket] = []
        self._spare: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._warned: dict[str, float] = {}
        self._retry: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def port(self) -> int:
        """The bound port (of the first socket); NotStarted before :meth:`start` returned."""
        if not self._sockets:
            raise NotStarted("the listener's port is known once start() returned")
        port: int = self._sockets[0].getsockname()[1]
        return port

    async def start(self) -> None:
        """Bind and listen (every address ``host`` resolves to), and start accepting."""
        self._loop = asyncio.get_running_loop()
        infos = await self._loop.getaddrinfo(
            self.host or None, self.requested_port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
        seen = set()
        address: Any = (self.host, self.requested_port)
        try:
            for family, kind, proto, _, address in infos:
                if (family, address) in seen:
                    continue
                seen.add((family, address))
                sock = socket.socket(family, kind, proto)
                self._sockets.append(sock)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if self.reuse_port:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                sock.bind(address)
                sock.listen(self.backlog)
                sock.setblocking(False)
        except OSError as exc:
            self._close_sockets()
            raise ListenError(self.name, host_port(*address[:2]), "TCP", exc) from exc
        self._spare = _open_spare()
        for sock in self._sockets:
            self._loop.add_reader(sock.fileno(), self._accept, sock)

    def close(self) -> None:
        """Stop accepting (the connections open are the connector's to close)."""
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None
        self._close_sockets()
        if self._spare is not None:
            os.close(self._spare)
            self._spare = None

    def _close_sockets(self) -> None:
        for sock in self._sockets:
            if self._loop is not None and sock.fileno() >= 0:
                self._loop.remove_reader(sock.fileno())
            sock.close()
        self._sockets = []

    # -- accepting ---------------------------------------------------------------------

    def _accept(self, sock: socket.socket) -> None:
        for _ in range(_ACCEPTS_PER_WAKEUP):
            try:
                conn, _ = sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:
                continue
            except OSError as exc:
                if exc.errno in _OUT_OF_RESOURCES:
                    if not self._refuse_without_fds(sock, exc):
                        return
                    continue
                log.error("%s listener: accept failed: %s", self.name, exc)  # noqa: TRY400 - the OS's reason says it all
                return
            if self.open >= self.max_connections:
                self.counters.refused_over_limit += 1
                self._warn(
                    "limit",
                    "%s listener: %d connections are open, the most allowed (--max-connections); "
                    "refusing new ones (%d so far)",
                    self.name,
                    self.open,
                    self.counters.refused_over_limit,
                )
                conn.close()
                continue
            self.counters.accepted += 1
            self.open += 1
            conn.setblocking(False)
            task = asyncio.get_running_loop().create_task(self._serve(conn))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _refuse_without_fds(self, sock: socket.socket, exc: OSError) -> bool:
        """Out of descriptors: accept one waiting client with the spare and close it; whether that worked."""
        refused = False
        if self._spare is not None:
            os.close(self._spare)
            self._spare = None
            try:
                conn, _ = sock.accept()
            except OSError:
                pass
            else:
                conn.close()
                refused = True
                self.counters.refused_out_of_fds += 1
            self._spare = _open_spare()
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        self._warn(
            "fds",
            "%s listener: out of file descriptors (%s; RLIMIT_NOFILE %d, %d connections open here): "
            "refusing new connections until some close (%d so far)",
            self.name,
            os.strerror(exc.errno or 0),
            soft,
            self.open,
            self.counters.refused_out_of_fds,
        )
        if refused:
            return True
        # Not even the spare helped: stop watching the socket a moment rather than spin on it.
        assert self._loop is not None
        for s in self._sockets:
            self._loop.remove_reader(s.fileno())
        self._retry = self._loop.call_later(_RETRY_DELAY, self._resume_accepting)
        return False

    def _resume_accepting(self) -> None:
        self._retry = None
        assert self._loop is not None
        if self._spare is None:
            self._spare = _open_spare()
        for sock in self._sockets:
            self._loop.add_reader(sock.fileno(), self._accept, sock)

    async def _serve(self, conn: socket.socket) -> None:
        inner = self.protocol_factory()
        tracked: _Tracked
        senders = self.senders
        if isinstance(inner, asyncio.BufferedProtocol):
            tracked = _TrackedBuffered(inner, self) if senders is None else _WatchedBuffered(inner, self, senders)
        else:
            tracked = _Tracked(inner, self) if senders is None else _Watched(inner, self, senders)
        loop = asyncio.get_running_loop()
        try:
            if self.ssl is None:
                await loop.connect_accepted_socket(lambda: tracked, conn)
            else:
                await loop.connect_accepted_socket(
                    lambda: tracked, conn, ssl=self.ssl, ssl_handshake_timeout=self.handshake_timeout
                )
        # A TLS handshake fails with ssl, OS and asyncio errors alike: each is one client's failure, which
        # must not end the listener's serving.
        except Exception as exc:  # noqa: BLE001
            if isinstance(exc, ConnectionAbortedError) and "handshake" in str(exc).lower():
                self.counters.handshake_timeouts += 1
            else:
                self.counters.handshake_failures += 1
            log.info("%s listener: TLS handshake with a client failed: %s", self.name, exc)
            conn.close()
            if not tracked.made:
                self.connection_ended()

    def connection_ended(self) -> None:
        """A connection it accepted ended: its place under ``max_connections`` is free."""
        self.open -= 1

    def _warn(self, kind: str, message: str, *args: Any) -> None:
        now = time.monotonic()
        if now - self._warned.get(kind, -_WARN_EVERY) >= _WARN_EVERY:
            self._warned[kind] = now
            log.warning(message, *args)


def _open_spare() -> int | None:
    try:
        return os.open(os.devnull, os.O_RDONLY)
    except OSError:
        return None
