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
* :class:`ingest.errors.CommitFailed`: logged, no ack, the connection
  stays open (the client resends after its ack timeout).

Memory and time (:class:`connectors.limits.Limits`):

* every byte read and not yet committed is charged to the process's
  :class:`connectors.budget.MemoryBudget` as it arrives: frames, whole or
  not, until their commit is done (:func:`~connectors.budget.held_for` their
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
  nothing owed to it is closed;
* connections are accepted by a :class:`connectors.listener.Listener`: at
  most ``max_connections`` at once, and out of file descriptors it refuses
  new ones and keeps serving the others.

:attr:`ForwardServer.counters` counts timeouts and refused connections,
:attr:`ForwardServer.budget` holds the memory budget's figures.

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
from collections.abc import Iterator, Sequence
from typing import Any

import msgpack

from windvane.connectors.budget import Charges, MemoryBudget, held_for, held_for_message, inflate_limit
from windvane.connectors.inflate import inflated_size
from windvane.connectors.limits import Limits
from windvane.connectors.listener import ConnectionCounters, Listener
from windvane.ingest.auth import Users
from windvane.ingest.batch import Batch, Sink, Undecoded
from windvane.ingest.errors import Backpressure, CommitFailed, UndecodableBatch

from .config import ForwardConfig
from .decode import (
    Decoded,
    FrameReader,
    ack_bytes,
    decode_message,
    merge_batches,
    parse_frame,
    read_packed,
)
from .errors import ForwardError, MalformedMessage, OversizeMessage
from .handshake import MAX_PING_BYTES, Handshake

log = logging.getLogger("windvane.connectors.forward")

#: Bytes read from a socket at once outside bulk messages (asyncio's own reads take at most as much).
READ_SIZE = 256 << 10
_MAX_MERGE = 4096  # chunkless messages joined into one submission at most
_MAX_MANY = 1024  # chunk messages handed to the sink in one call at most
#: Seconds a connection given the budget's pass (see :mod:`connectors.budget`) may send nothing before it is closed.
PASS_GRACE = 2.0


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
    ``limits.memory_budget`` of its own when not given).
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
        self.limits = limits or Limits()
        self.budget = budget or MemoryBudget(self.limits.memory_budget)
        self.inflate_limit = inflate_limit(decompressed_size_limit, self.budget)
        self.counters = ConnectionCounters()
        # Hand packed entries over undecoded when the sink decodes them in worker processes.
        self.defer = bool(getattr(sink, "accepts_undecoded", False))
        # Entries decoded here are decoded as the tag's record type (vibration blocks: without a copy).
        self.record_types = getattr(sink, "record_type", None)
        # What connections read into (see _Connection.get_buffer): one for all, since each read is
        # copied out before the event loop reads another socket.
        self.read_buffer = memoryview(bytearray(READ_SIZE))
        self._listener: Listener | None = None
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
        """Counters: connections (open), messages, events, bytes, acks, malformed, rejected_auth, oversize, ...,
        and the listener's (:class:`connectors.listener.ConnectionCounters`: timeouts, refused, ...)."""
        return dict(self._stats, **self.counters.as_dict(), connections=len(self._connections))

    async def start(self) -> None:
        """Bind TCP, and UDP on the same port for heartbeats; port 0 picks a port free for both."""
        loop = asyncio.get_running_loop()
        for attempt in range(20):
            listener = Listener(
                lambda: _Connection(self), self.host, self.requested_port, name="Forward", ssl=self.ssl,
                max_connections=self.limits.max_connections, handshake_timeout=self.limits.handshake_timeout,
                counters=self.counters,
            )
            await listener.start()
            port = listener.port
            if not self.heartbeat_udp:
                break
            try:
                self._udp, _ = await loop.create_datagram_endpoint(
                    lambda: _Heartbeat(self), local_addr=(self.host, port)
                )
                break
            except OSError:
                listener.close()
                if self.requested_port != 0 or attempt == 19:
                    raise
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
        self.transport = transport  # type: ignore[assignment]

    def datagram_received(self, data: bytes, addr: Any) -> None:
        self.server._stats["heartbeats"] += 1
        if self.transport is not None:
            self.transport.sendto(b"\x00", addr)

    def error_received(self, exc: Exception) -> None:
        log.debug("UDP heartbeat error: %s", exc)


class _Connection(asyncio.BufferedProtocol):
    def __init__(self, server: ForwardServer) -> None:
        self.server = server
        self.into_bulk = False  # the last buffer handed to the transport was a bulk message's own
        self.stats = server._stats
        self.budget = server.budget
        self.frames = FrameReader(server.chunk_size_limit)
        self.pending: deque[bytes | ForwardError] = deque()  # framed, not yet decoded
        # Sink calls in arrival order: the task, the ack to send for each message (None: none), the bytes
        # they hold in the budget; and how many messages they carry between them.
        self.inflight: deque[tuple[asyncio.Task | None, list[bytes | None], int]] = deque()
        self.in_flight_messages = 0
        self.acking = True  # False from a message found malformed by the sink on: nothing after it is acked
        self.handshake = (
            Handshake(server.shared_key, server.self_hostname, server.users) if server.shared_key else None
        )
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.stopped = False  # no more reading: error, EOF, shutdown
        self.lost = False
        self.paused = False
        self.budget_paused = False  # waiting for room in the memory budget
        self.has_pass = False  # reading on past the budget's limit until the frame being read is whole
        self.charges = Charges(server.budget)  # what this connection holds in the memory budget
        self.wake = asyncio.Event()  # new frames, a free slot, or stop
        self.carry: tuple[Decoded, int] | None = None  # decoded while merging (and its charge), submitted next
        loop = asyncio.get_running_loop()
        self.last_read = loop.time()
        self.timer: asyncio.TimerHandle | None = None  # the handshake or idle timeout
        self.pass_timer: asyncio.TimerHandle | None = None  # closes a pass holder that stalls
        self.finished: asyncio.Future = loop.create_future()

    # -- asyncio.Protocol -------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple) and len(peer) >= 2:
            self.peer = f"[{peer[0]}]:{peer[1]}" if ":" in str(peer[0]) else f"{peer[0]}:{peer[1]}"
        self.server._connections.add(self)
        self.stats["connections_total"] += 1
        loop = asyncio.get_running_loop()
        limits = self.server.limits
        if self.handshake is not None:
            self.transport.write(msgpack.packb(self.handshake.helo(), use_bin_type=True))
            self.timer = loop.call_later(limits.handshake_timeout, self._handshake_timeout)
        else:
            self.timer = loop.call_later(limits.idle_timeout, self._idle_check)
        loop.create_task(self._run())

    def get_buffer(self, sizehint: int) -> memoryview:
        # The rest of a bulk message's entries is received where the message is kept (never copied by
        # Python); anything else into the server's read buffer, copied out by buffer_updated at once.
        room = None if self.handshake is not None or self.stopped else self.frames.room()
        self.into_bulk = room is not None
        return room if room is not None else self.server.read_buffer

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
            # Before the handshake, a PING's worth of bytes at most: nothing else is buffered for a stranger.
            room = MAX_PING_BYTES - self.frames.buffered
            self._feed(data[:room])
            if self.stopped or self.handshake is None:
                data = data[room:]
            elif len(data) >= room:
                self.server.counters.preauth_oversize += 1
                log.warning(
                    "Forward connection from %s sent over %d bytes without completing the handshake (a PING is "
                    "far smaller); closing", self.peer, MAX_PING_BYTES,
                )
                self._close_now()
                return
            else:
                return
        if data and not self.stopped:
            self._feed(data)

    def _feed(self, data: bytes) -> None:
        self._take(self.frames.feed(data))

    def _take(self, frames: Iterator[bytes | memoryview | bytearray]) -> None:
        """Queue the ``frames`` the bytes just read complete, and charge the budget for what is held."""
        charged = 0
        try:
            for frame in frames:
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
        # Charged as the whole frame will be (the framer holds it twice meanwhile): a frame that becomes whole
        # adds nothing, so readers resumed together cannot overshoot the budget by finishing their frames.
        held = held_for(self.frames.buffered)
        self.charges.change(queued=charged, partial=held - self.charges.partial)
        if self.has_pass and (charged or not held):  # its frame is whole: the pass is over
            self.has_pass = False
            self.budget.end_pass(self)
        if self.budget.over and not self.has_pass and not self.stopped:
            self.budget_paused = True
            self._pause()
            self.budget.wait(self)
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

    # -- the memory budget --------------------------------------------------

    @property
    def partial_charge(self) -> int:
        """The incomplete frame, as the reader holds it, in the budget (the budget's pass goes to the most)."""
        return self.charges.partial

    def budget_resume(self) -> None:
        self.budget_paused = False
        self.wake.set()  # the pump resumes reading when nothing else holds it back

    def budget_pass(self) -> None:
        self.budget_paused = False
        self.has_pass = True
        self._resume()
        self.last_read = asyncio.get_running_loop().time()
        self._watch_pass()

    def _watch_pass(self) -> None:
        if self.pass_timer is not None:
            self.pass_timer.cancel()
        self.pass_timer = asyncio.get_running_loop().call_later(PASS_GRACE, self._check_pass, self.last_read)

    def _check_pass(self, since: float) -> None:
        self.pass_timer = None
        if not self.has_pass or self.lost:
            return
        if self.last_read > since:
            self._watch_pass()
            return
        self.server.counters.budget_stalls += 1
        log.warning(
            "Forward connection from %s stalled holding an incomplete frame of %d bytes while the memory budget "
            "(%d bytes) is full of incomplete frames; closing it so the others can go on",
            self.peer, self.frames.buffered, self.budget.limit,
        )
        self._close_now()

    def _release_all(self) -> None:
        """The connection is done: whatever it still holds goes back to the budget."""
        self.pending.clear()
        self.carry = None
        self.has_pass = False
        if self.pass_timer is not None:
            self.pass_timer.cancel()
            self.pass_timer = None
        self.budget.forget(self)
        self.charges.release()

    # -- timeouts -----------------------------------------------------------

    def _handshake_timeout(self) -> None:
        if self.handshake is None or self.lost:
            return
        self.server.counters.handshake_timeouts += 1
        log.warning("Forward connection from %s did not complete the handshake in %g s; closing",
                    self.peer, self.server.limits.handshake_timeout)
        self._close_now()

    def _idle_check(self) -> None:
        self.timer = None
        if self.lost:
            return
        loop = asyncio.get_running_loop()
        idle = self.server.limits.idle_timeout
        deadline = self.last_read + idle
        busy = self.pending or self.inflight or self.carry is not None or self.budget_paused or self.has_pass
        if busy or loop.time() < deadline:
            self.timer = loop.call_at(max(deadline, loop.time() + min(idle, 1.0)), self._idle_check)
            return
        self.server.counters.idle_timeouts += 1
        log.info("Forward connection from %s idle for %g s; closing", self.peer, idle)
        self._close_now()

    def _close_now(self) -> None:
        self._stop_reading()
        self.pending.clear()
        if self.transport is not None and not self.lost:
            self.transport.abort()
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
            self.inflight.append((None, None, 0))  # end marker for the acker
            self.wake.set()
            await acker
            if self.timer is not None:
                self.timer.cancel()
            if self.transport is not None and not self.lost:
                self.transport.close()
            self._release_all()
            self.server._connections.discard(self)
            if not self.finished.done():
                self.finished.set_result(None)

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
                items: list[tuple[list[Batch | Undecoded], bytes | None]] = [
                    (merge_batches([d.batch for d in group]), None)]
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
                    reserved = await self._reserve_inflated(item, *compressed)
                    if reserved is None:
                        self.charges.add("queued", -charge)
                        return None
                    charge += reserved
                decoded = decode_message(item, json_mode=json_mode, decompressed_size_limit=self.server.inflate_limit,
                                         defer=self.server.defer, packed=packed,
                                         record_types=self.server.record_types)
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

    async def _reserve_inflated(self, frame: bytes, tag: str, codec: str, payload: memoryview) -> int | None:
        """Reserve the decompressed size of a compressed message in the budget (found without keeping the
        output: a bomb costs CPU, not memory); None if it is over the limit (reported)."""
        limit = self.server.inflate_limit
        size = await asyncio.to_thread(inflated_size, payload, (codec,), limit)
        if size > limit:
            self._report(OversizeMessage(
                f"decompressed entries of tag {tag!r} exceed the limit of {limit} bytes (decompressed_size_limit, "
                f"at most what the memory budget holds decoded)", tag=tag, limit=limit, size=size,
            ))
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
                decoded = decode_message(item, json_mode=json_mode, decompressed_size_limit=self.server.inflate_limit,
                                         defer=self.server.defer, packed=packed,
                                         record_types=self.server.record_types)
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
        if isinstance(decoded.batch, Batch):  # undecoded entries are counted once committed (_submit)
            self.stats["events"] += len(decoded.batch)

    def _check_ping(self, frame: bytes) -> None:
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
            if self.timer is not None:
                self.timer.cancel()
            self.timer = asyncio.get_running_loop().call_later(self.server.limits.idle_timeout, self._idle_check)
            log.debug("Forward handshake from %s (%s) accepted", self.peer, pong[3])
            return
        self.stats["rejected_auth"] += 1
        log.warning(
            "Forward handshake from %s refused: %s (client hostname %r, user %r)",
            self.peer, pong[2], self.handshake.client_hostname, self.handshake.username,
        )
        self._stop_reading()
        self.wake.set()

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

    async def _submit_many(self, items: list[tuple[list[Batch | Undecoded], bytes | None]]) -> list[bool | None]:
        """For each item, whether it is committed (None: found malformed by the sink); never raises."""
        outcomes: list[bool | None] = [False] * len(items)
        todo = list(range(len(items)))
        while todo:
            try:
                results: list[Any] = await self.server.sink.submit_many([items[i] for i in todo])
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the whole call failed: every item with it
                results = [exc] * len(todo)
            retry, delay, failed = [], 0.0, []
            for i, result in zip(todo, results):
                if isinstance(result, Backpressure):
                    retry.append(i)
                    delay = max(delay, result.retry_after)
                elif isinstance(result, UndecodableBatch):
                    # Decoded in a worker: report it as if it had been decoded here.
                    cause = result.cause if isinstance(result.cause, ForwardError) else MalformedMessage(str(result))
                    self._report(cause)
                    self.wake.set()  # the pump sees the connection stopped
                    outcomes[i] = None
                elif isinstance(result, BaseException):
                    failed.append((i, result))
                else:
                    if any(isinstance(b, Undecoded) for b in items[i][0]):
                        self.stats["events"] += result.accepted + result.quarantined
                    outcomes[i] = True
            if failed:
                self._log_failed([items[i] for i, _ in failed], failed[0][1])
            todo = retry
            if todo:
                # Not reading while we wait is what pushes back on the client.
                self._pause()
                await asyncio.sleep(delay)
        return outcomes

    def _log_failed(self, items: list[tuple[list[Batch | Undecoded], bytes | None]], exc: BaseException) -> None:
        """Log the submissions that failed (one line for those of one call), counting each."""
        self.stats["commit_failed"] += len(items)
        keys = [key for _, key in items]
        chunks = repr(keys[0]) if len(keys) == 1 else f"{len(keys)} chunks, {keys[0]!r} first"
        events = _events([b for batches, _ in items for b in batches])
        if isinstance(exc, CommitFailed):
            log.error("commit failed for %s events from %s (%s): %s; not acknowledged, the client resends",
                      events, self.peer, chunks, exc)
        else:
            log.error("sink failed on %s events from %s (%s); not acknowledged", events, self.peer, chunks,
                      exc_info=exc)

    async def _ack_in_order(self) -> None:
        acks: list[bytes] = []  # acks owed, written together: one send for the chunks one commit acknowledged
        while True:
            if acks and not (self.inflight and self.inflight[0][0] is not None and self.inflight[0][0].done()):
                self._write_acks(acks)
                acks = []
            while not self.inflight:
                self.wake.clear()
                await self.wake.wait()
            task, owed, charge = self.inflight[0]
            if task is None:
                self.inflight.popleft()
                self._write_acks(acks)
                return
            outcomes = await task
            self.inflight.popleft()
            self.in_flight_messages -= len(owed)
            del task
            self.charges.add("submitted", -charge)
            self.wake.set()  # a slot is free
            for ok, ack in zip(outcomes, owed):
                if ok is None:
                    self.acking = False  # what was submitted after a malformed message is not acknowledged
                if ok and self.acking and ack is not None:
                    acks.append(ack)

    def _write_acks(self, acks: list[bytes]) -> None:
        if acks and not self.lost and self.transport is not None:
            self.transport.write(b"".join(acks))
            self.stats["acks"] += len(acks)


def _compressed_entries(packed: tuple[str, memoryview, dict | None] | None) -> tuple[str, str, memoryview] | None:
    """``(tag, codec, payload)`` of a CompressedPackedForward message as :func:`read_packed` read it, else None."""
    if packed is None:
        return None
    tag, entries, option = packed
    codec = option.get("compressed") if option else None
    if codec is None or codec == "text" or not isinstance(codec, str):
        return None
    return tag, codec, entries


def _events(batches: Sequence[Batch | Undecoded]) -> str:
    """How many events ``batches`` hold, for logs ("?" when some are undecoded)."""
    if any(isinstance(b, Undecoded) for b in batches):
        return "?"
    return str(sum(len(b) for b in batches))


def _serialize(message: Any, json_mode: bool) -> bytes:
    if json_mode:
        return json.dumps(message, default=lambda b: b.decode("latin-1")).encode()
    return msgpack.packb(message, use_bin_type=True)
