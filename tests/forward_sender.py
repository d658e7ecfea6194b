"""A Forward client that resends what was not acknowledged, as fluentd's out_forward does.

fluentd's out_forward with ``require_ack_response`` keeps a chunk until its
ack arrives and sends it again (same chunk id) after a lost connection or
an ack timeout. The durability tests need exactly that behaviour across
``kill -9`` of the server, so this sender implements it over a plain socket:
PackedForward messages, str32-framed entries and Base64 chunk ids ending in
a newline, byte for byte what out_forward sends.
"""

from __future__ import annotations

import base64
import os
import socket
import struct
import threading
import time
from dataclasses import dataclass, field

import msgpack


def event_time(ns: int) -> msgpack.ExtType:
    return msgpack.ExtType(0, struct.pack(">II", ns // 1_000_000_000, ns % 1_000_000_000))


def packed_forward(tag: str, events: list[tuple[int, dict]], chunk_id: bytes) -> bytes:
    """One PackedForward message as out_forward frames it (entries as str32, option size and chunk)."""
    entries = b"".join(msgpack.packb([event_time(t), r], use_bin_type=True) for t, r in events)
    packer = msgpack.Packer(use_bin_type=True)
    return (
        b"\x93"
        + packer.pack(tag)
        + b"\xdb"
        + struct.pack(">I", len(entries))
        + entries
        + packer.pack({"size": len(events), "chunk": chunk_id.decode()})
    )


def chunk_id() -> bytes:
    """A chunk id as Ruby's ``Base64.encode64`` gives it: with a trailing newline."""
    return base64.encodebytes(os.urandom(16))


@dataclass
class ResendingSender:
    """Sends every chunk until it is acknowledged; see the module docstring."""

    host: str
    port: int
    chunks: list[tuple[bytes, bytes]]  # (chunk id, message)
    ack_timeout: float = 5.0
    window: int = 4
    # Once this many chunks are acknowledged, send nothing new until ``resume`` is set (acks
    # are still read): a test can then kill something mid-run however fast the server is.
    hold_after: int | None = None
    resume: threading.Event = field(default_factory=threading.Event)
    acked: dict[bytes, float] = field(default_factory=dict)
    sends: int = 0
    reconnects: int = 0
    errors: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def acked_ids(self) -> set[bytes]:
        with self._lock:
            return set(self.acked)

    def _holding(self) -> bool:
        return self.hold_after is not None and len(self.acked) >= self.hold_after and not self.resume.is_set()

    def run(self, deadline: float) -> None:
        """Send until every chunk is acked or ``deadline`` (time.monotonic) passes."""
        while len(self.acked) < len(self.chunks) and time.monotonic() < deadline:
            try:
                sock = socket.create_connection((self.host, self.port), timeout=2)
            except OSError as exc:
                self.errors.append(f"connect: {exc}")
                time.sleep(0.2)
                continue
            try:
                self._session(sock, deadline)
            except (OSError, ValueError) as exc:
                self.errors.append(f"session: {exc!r}")
                self.reconnects += 1
            finally:
                sock.close()

    def _session(self, sock: socket.socket, deadline: float) -> None:
        unpacker = msgpack.Unpacker(raw=False)
        pending = [(cid, msg) for cid, msg in self.chunks if cid not in self.acked]
        in_flight: dict[bytes, float] = {}
        sock.settimeout(0.2)
        while (pending or in_flight) and time.monotonic() < deadline:
            while pending and len(in_flight) < self.window and not self._holding():
                cid, msg = pending.pop(0)
                sock.sendall(msg)
                self.sends += 1
                in_flight[cid] = time.monotonic()
            try:
                data = sock.recv(65536)
            except TimeoutError:
                data = None
            if data == b"":
                raise ConnectionResetError("server closed the connection")
            if data:
                unpacker.feed(data)
                for reply in unpacker:
                    cid = reply["ack"].encode()
                    if in_flight.pop(cid, None) is not None:
                        with self._lock:
                            self.acked[cid] = time.monotonic()
            oldest = min(in_flight.values(), default=None)
            if oldest is not None and time.monotonic() - oldest > self.ack_timeout:
                raise TimeoutError("ack timeout: resending on a new connection")
