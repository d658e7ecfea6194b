"""ForwardServer: fluentd in_forward-compatible TCP (+TLS) server and UDP heartbeat, on asyncio.

Per connection (an :class:`asyncio.Protocol`, no StreamReader on the hot path):

* bytes are framed as they arrive (:class:`.decode.FrameReader`); frames are
  decoded lazily, when a submission slot is free, so memory stays bounded;
* each message with a ``chunk`` option is submitted alone, under its chunk
  id as the idempotency key; consecutive messages without one are
  submitted together; at most ``max_in_flight`` submissions per connection
  are pending at once (pipelining);
* ``{"ack": chunk}`` is written only after ``await sink.submit(...)``
  returned, in the order the chunks arrived;
* while the connection waits for a free slot, or the sink pushes back, the
  socket is not read (``pause_reading``), so TCP pushes back on the client;
* a malformed or oversize message is logged with the peer (and tag and
  limit), is not acknowledged, and closes the connection once the
  messages before it are committed and acknowledged; other connections
  are not affected;
* :class:`ingest.errors.CommitFailed`: logged, no ack, the connection
  stays open (the client resends after its ack timeout).

When the sink decodes in worker processes (``sink.accepts_undecoded``),
PackedForward and CompressedPackedForward entries are handed over
undecoded (only the framing, tag and options are read here); entries
found malformed there come back as :class:`ingest.errors.UndecodableBatch`
and are reported as any malformed message: no ack for it nor for the
messages after it, the connection closed.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import ssl as ssl_module
from collections import deque
from collections.abc import Sequence
from typing import Any

import msgpack

from ingest.auth import Users
from ingest.batch import Batch, Sink, Undecoded
from ingest.errors import Backpressure, CommitFailed, UndecodableBatch

from .decode import (
    DEFAULT_CHUNK_SIZE_LIMIT,
    DEFAULT_DECOMPRESSED_SIZE_LIMIT,
    Decoded,
    FrameReader,
    ack_bytes,
    decode_message,
    merge_batches,
    parse_frame,
)
from .errors import ForwardError, MalformedMessage, OversizeMessage
from .handshake import Handshake

log = logging.getLogger("windvane.connectors.forward")

_MAX_MERGE = 4096  # chunkless messages joined into one submission at most


class ForwardServer:
    """A Forward protocol v1 server handing what it receives to ``sink``.

    ``shared_key`` turns on the HELO/PING/PONG handshake; ``users`` (with
    passwords) adds user auth to it. ``ssl`` serves TLS (the UDP heartbeat
    stays plain, as in fluentd). ``chunk_size_limit`` bounds the bytes of
    one message, ``decompressed_size_limit`` the decompressed entries of
    one CompressedPackedForward message.
    """

    def __init__(
        self,
        sink: Sink,
        host: str = "127.0.0.1",
        port: int = 24224,
        *,
        shared_key: str | None = None,
        users: Users | None = None,
        ssl: ssl_module.SSLContext | None = None,
        self_hostname: str = socket.gethostname(),
        chunk_size_limit: int = DEFAULT_CHUNK_SIZE_LIMIT,
        decompressed_size_limit: int = DEFAULT_DECOMPRESSED_SIZE_LIMIT,
        max_in_flight: int = 8,
        heartbeat_udp: bool = True,
    ) -> None:
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be at least 1, not {max_in_flight}")
        if users and not shared_key:
            raise ValueError("users need a shared_key: Forward user auth is part of the shared-key handshake")
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
        # Hand packed entries over undecoded when the sink decodes them in worker processes.
        self.defer = bool(getattr(sink, "accepts_undecoded", False))
        self._server: asyncio.base_events.Server | None = None
        self._udp: asyncio.DatagramTransport | None = None
        self._port: int | None = None
        self._connections: set[_Connection] = set()
        self._stats = dict.fromkeys(
            (
                "connections", "connections_total", "messages", "events", "bytes", "acks",
                "malformed", "rejected_auth", "oversize", "commit_failed", "heartbeats",
            ),
            0,
        )

    @property
    def port(self) -> int:
        """The bound TCP (and UDP heartbeat) port."""
        if self._port is None:
            raise RuntimeError("ForwardServer.port is known once start() returned")
        return self._port

    @property
    def stats(self) -> dict:
        """Counters: connections (open), messages, events, bytes, acks, malformed, rejected_auth, oversize, ..."""
        return dict(self._stats, connections=len(self._connections))

    async def start(self) -> None:
        """Bind TCP, and UDP on the same port for heartbeats; port 0 picks a port free for both."""
        loop = asyncio.get_running_loop()
        for attempt in range(20):
            server = await loop.create_server(
                lambda: _Connection(self), self.host, self.requested_port, ssl=self.ssl, reuse_address=True
            )
            port = server.sockets[0].getsockname()[1]
            if not self.heartbeat_udp:
                break
            try:
                self._udp, _ = await loop.create_datagram_endpoint(
                    lambda: _Heartbeat(self), local_addr=(self.host, port)
                )
                break
            except OSError:
                server.close()
                await server.wait_closed()
                if self.requested_port != 0 or attempt == 19:
                    raise
        self._server = server
        self._port = port
        log.info("Forward server listening on %s:%d%s", self.host, port, " (TLS)" if self.ssl else "")

    async def close(self) -> None:
        """Stop accepting; commit and acknowledge what was received; close every connection."""
        if self._server is not None:
            self._server.close()
        if self._udp is not None:
            self._udp.close()
        connections = list(self._connections)
        for conn in connections:
            conn.shutdown()
        await asyncio.gather(*(conn.finished for conn in connections), return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None


class _Heartbeat(asyncio.DatagramProtocol):
    """UDP heartbeat: any datagram is answered with one 0x00 byte (in_forward's HEARTBEAT_UDP_PAYLOAD)."""

    def __init__(self, server: ForwardServer) -> None:
        self.server = server
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def datagram_received(self, data: bytes, addr: Any) -> None:
        self.server._stats["heartbeats"] += 1
        if self.transport is not None:
            self.transport.sendto(b"\x00", addr)

    def error_received(self, exc: Exception) -> None:
        log.debug("UDP heartbeat error: %s", exc)


class _Connection(asyncio.Protocol):
    def __init__(self, server: ForwardServer) -> None:
        self.server = server
        self.stats = server._stats
        self.frames = FrameReader(server.chunk_size_limit)
        self.pending: deque[bytes | ForwardError] = deque()  # framed, not yet decoded
        self.inflight: deque[tuple[asyncio.Task, bytes | None]] = deque()  # submissions, in arrival order
        self.acking = True  # False from a message found malformed by the sink on: nothing after it is acked
        self.handshake = (
            Handshake(server.shared_key, server.self_hostname, server.users) if server.shared_key else None
        )
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.stopped = False  # no more reading: error, EOF, shutdown
        self.lost = False
        self.paused = False
        self.wake = asyncio.Event()  # new frames, a free slot, or stop
        self.carry: Decoded | None = None  # decoded while merging, submitted next
        self.finished: asyncio.Future = asyncio.get_running_loop().create_future()

    # -- asyncio.Protocol -------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple) and len(peer) >= 2:
            self.peer = f"[{peer[0]}]:{peer[1]}" if ":" in str(peer[0]) else f"{peer[0]}:{peer[1]}"
        self.server._connections.add(self)
        self.stats["connections_total"] += 1
        if self.handshake is not None:
            self.transport.write(msgpack.packb(self.handshake.helo(), use_bin_type=True))
        asyncio.get_running_loop().create_task(self._run())

    def data_received(self, data: bytes) -> None:
        self.stats["bytes"] += len(data)
        if self.stopped:
            return
        try:
            for frame in self.frames.feed(data):
                self.pending.append(frame)
        except ForwardError as exc:
            self.pending.append(exc)
            self._stop_reading()
        self.wake.set()

    def eof_received(self) -> bool:
        # Keep the transport open for writing: acks of what was received are still due.
        self.stopped = True
        self.wake.set()
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.stopped = True
        self.wake.set()

    # -- flow control -----------------------------------------------------

    def _pause(self) -> None:
        if not self.paused and not self.lost and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()

    def _resume(self) -> None:
        if self.paused and not self.stopped and not self.lost and self.transport is not None:
            self.paused = False
            self.transport.resume_reading()

    def _stop_reading(self) -> None:
        self.stopped = True
        self._pause()

    def shutdown(self) -> None:
        """Server closing: read nothing more, finish what was received."""
        self._stop_reading()
        self.wake.set()

    # -- the pump ---------------------------------------------------------

    async def _run(self) -> None:
        acker = asyncio.get_running_loop().create_task(self._ack_in_order())
        try:
            await self._pump()
        except Exception:
            log.exception("Forward connection from %s failed", self.peer)
        finally:
            self.stopped = True
            self.inflight.append((None, None))  # type: ignore[arg-type]  # end marker for the acker
            self.wake.set()
            await acker
            if self.transport is not None and not self.lost:
                self.transport.close()
            self.server._connections.discard(self)
            if not self.finished.done():
                self.finished.set_result(None)

    async def _pump(self) -> None:
        json_mode = False
        while True:
            decoded = await self._next()
            if decoded is None:
                return
            if isinstance(decoded, list):  # the handshake's answer, already handled
                continue
            json_mode = bool(self.frames.json)
            batches = [decoded.batch]
            if decoded.key is None:
                batches = self._merge_chunkless(batches)
            while len(self.inflight) >= self.server.max_in_flight:
                self._pause()
                self.wake.clear()
                await self.wake.wait()
            ack = ack_bytes(decoded.chunk, json_mode) if decoded.chunk is not None else None
            task = asyncio.get_running_loop().create_task(self._submit(batches, decoded.key))
            self.inflight.append((task, ack))
            self.wake.set()  # the acker

    async def _next(self) -> Decoded | list | None:
        """The next decoded message, or None when the connection is done (closed, EOF, error)."""
        if self.carry is not None:
            decoded, self.carry = self.carry, None
            return decoded
        while True:
            if not self.pending:
                if self.stopped:
                    return None
                if len(self.inflight) < self.server.max_in_flight:
                    self._resume()
                self.wake.clear()
                await self.wake.wait()
                continue
            item = self.pending.popleft()
            if isinstance(item, ForwardError):
                self._report(item)
                return None
            if self.handshake is not None:
                return self._check_ping(item)
            try:
                decoded = decode_message(
                    item, json_mode=bool(self.frames.json), decompressed_size_limit=self.server.decompressed_size_limit,
                    defer=self.server.defer,
                )
            except ForwardError as exc:
                self._report(exc)
                return None
            if decoded is None:  # TCP heartbeat (nil), ignored as in in_forward
                continue
            self._count(decoded)
            return decoded

    def _merge_chunkless(self, batches: list[Batch | Undecoded]) -> list[Batch | Undecoded]:
        # Messages without a chunk that are already here go in the same submission.
        while self.pending and len(batches) < _MAX_MERGE and self.handshake is None:
            item = self.pending[0]
            if isinstance(item, ForwardError):
                break
            try:
                decoded = decode_message(
                    item, json_mode=bool(self.frames.json), decompressed_size_limit=self.server.decompressed_size_limit,
                    defer=self.server.defer,
                )
            except ForwardError as exc:
                self.pending[0] = exc  # reported by _next, after this submission
                break
            self.pending.popleft()
            if decoded is None:
                continue
            self._count(decoded)
            if decoded.key is not None:
                self.carry = decoded
                break
            batches.append(decoded.batch)
        return merge_batches(batches)

    def _count(self, decoded: Decoded) -> None:
        self.stats["messages"] += 1
        if isinstance(decoded.batch, Batch):  # undecoded entries are counted once committed (_submit)
            self.stats["events"] += len(decoded.batch)

    def _check_ping(self, frame: bytes) -> list:
        assert self.handshake is not None and self.transport is not None
        json_mode = bool(self.frames.json)
        try:
            message = parse_frame(frame, json_mode)
        except ForwardError:
            message = None
        ok, pong = self.handshake.check_ping(message)
        self.transport.write(_serialize(pong, json_mode))
        if ok:
            self.handshake = None
            log.debug("Forward handshake from %s (%s) accepted", self.peer, pong[3])
            return pong
        self.stats["rejected_auth"] += 1
        log.warning(
            "Forward handshake from %s refused: %s (client hostname %r, user %r)",
            self.peer, pong[2], self.handshake.client_hostname, self.handshake.username,
        )
        self.pending.clear()
        self._stop_reading()
        return pong

    def _report(self, exc: ForwardError) -> None:
        if isinstance(exc, OversizeMessage):
            self.stats["oversize"] += 1
            log.error(
                "oversize Forward message from %s, tag %r: over the limit of %d bytes; dropped, no ack, closing: %s",
                self.peer, exc.tag, exc.limit, exc,
            )
        else:
            self.stats["malformed"] += 1
            log.error("malformed Forward message from %s: %s; no ack, closing", self.peer, exc)
        self.pending.clear()
        self.carry = None
        self._stop_reading()

    async def _submit(self, batches: Sequence[Batch | Undecoded], key: bytes | None) -> bool | None:
        """Whether the batches are committed (None: found malformed by the sink); never raises."""
        while True:
            try:
                receipt = await self.server.sink.submit(batches, key=key)
                if any(isinstance(b, Undecoded) for b in batches):
                    self.stats["events"] += receipt.accepted + receipt.quarantined
                return True
            except UndecodableBatch as exc:
                # Decoded in a worker: report it as if it had been decoded here.
                cause = exc.cause if isinstance(exc.cause, ForwardError) else MalformedMessage(str(exc))
                self._report(cause)
                self.wake.set()  # the pump sees the connection stopped
                return None
            except Backpressure as exc:
                # Not reading while we wait is what pushes back on the client.
                self._pause()
                await asyncio.sleep(exc.retry_after)
            except CommitFailed as exc:
                self.stats["commit_failed"] += 1
                log.error(
                    "commit failed for %s events from %s (chunk %r): %s; not acknowledged, the client resends",
                    _events(batches), self.peer, key, exc,
                )
                return False
            except asyncio.CancelledError:
                raise
            except Exception:
                self.stats["commit_failed"] += 1
                log.exception("sink failed on events from %s (chunk %r); not acknowledged", self.peer, key)
                return False

    async def _ack_in_order(self) -> None:
        while True:
            while not self.inflight:
                self.wake.clear()
                await self.wake.wait()
            task, ack = self.inflight[0]
            if task is None:
                self.inflight.popleft()
                return
            ok = await task
            self.inflight.popleft()
            self.wake.set()  # a slot is free
            if ok is None:
                self.acking = False  # what was submitted after a malformed message is not acknowledged
            if ok and self.acking and ack is not None and not self.lost and self.transport is not None:
                self.transport.write(ack)
                self.stats["acks"] += 1


def _events(batches: Sequence[Batch | Undecoded]) -> str:
    """How many events ``batches`` hold, for logs ("?" when some are undecoded)."""
    if any(isinstance(b, Undecoded) for b in batches):
        return "?"
    return str(sum(len(b) for b in batches))


def _serialize(message: Any, json_mode: bool) -> bytes:
    if json_mode:
        return json.dumps(message, default=lambda b: b.decode("latin-1")).encode()
    return msgpack.packb(message, use_bin_type=True)
