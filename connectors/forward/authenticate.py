"""A Forward connection's shared-key handshake, on the wire (the exchange itself is :mod:`.handshake`'s).

The HELO is sent on connect; until the PING is whole and accepted, a client
may send at most :data:`.handshake.MAX_PING_BYTES` and nothing it sends is
queued as a message. A refused PING is answered, counted (``rejected_auth``),
logged, and ends reading.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

import msgpack

from windvane.connectors.listener import ConnectionCounters

from .decode import FrameReader, parse_frame
from .errors import ForwardError
from .framing import Frame
from .handshake import MAX_PING_BYTES, Handshake
from .reading import Reading

log = logging.getLogger("windvane.connectors.forward")


class Authenticator:
    """Sends the HELO, bounds what a stranger may send, and checks the PING.

    ``feed`` frames bytes read (the connection's reader); ``accepted`` is called once the PING is accepted;
    ``close`` closes the connection at once.
    """

    def __init__(
        self,
        handshake: Handshake,
        reading: Reading,
        frames: FrameReader,
        counters: ConnectionCounters,
        stats: dict[str, int],
        *,
        feed: Callable[[bytes], None],
        accepted: Callable[[], None],
        close: Callable[[], None],
    ) -> None:
        self._handshake = handshake
        self._reading = reading
        self._frames = frames
        self._counters = counters
        self._stats = stats
        self._feed = feed
        self._accepted = accepted
        self._close = close
        self._done = False  # the PING was accepted

    def greet(self) -> None:
        """On connect: send the HELO."""
        self._reading.write(msgpack.packb(self._handshake.helo(), use_bin_type=True))

    def read(self, data: bytes) -> bytes:
        """Feed ``data`` up to a PING's worth; what is left once the handshake is over (b"" otherwise)."""
        # Before the handshake, a PING's worth of bytes at most: nothing else is buffered for a stranger.
        room = MAX_PING_BYTES - self._frames.buffered
        self._feed(data[:room])
        if self._reading.stopped or self._done:
            return data[room:]
        if len(data) >= room:
            self._counters.preauth_oversize += 1
            log.warning(
                "Forward connection from %s sent over %d bytes without completing the handshake (a PING is "
                "far smaller); closing",
                self._reading.peer,
                MAX_PING_BYTES,
            )
            self._close()
        return b""

    def check_ping(self, frame: Frame) -> None:
        """``frame`` is the client's PING: answer it with the PONG; accept it, or stop reading."""
        json_mode = bool(self._frames.json)
        try:
            message = parse_frame(frame, json_mode)
        except ForwardError:
            message = None
        ok, pong = self._handshake.check_ping(message)
        self._reading.write(_serialize(pong, json_mode))
        if ok:
            self._done = True
            self._accepted()
            log.debug("Forward handshake from %s (%s) accepted", self._reading.peer, pong[3])
            return
        self._stats["rejected_auth"] += 1
        log.warning(
            "Forward handshake from %s refused: %s (client hostname %r, user %r)",
            self._reading.peer,
            pong[2],
            self._handshake.client_hostname,
            self._handshake.username,
        )
        self._reading.stop()
        self._reading.wake.set()


def _serialize(message: Any, json_mode: bool) -> bytes:
    if json_mode:
        return json.dumps(message, default=lambda b: b.decode("latin-1")).encode()
    packed: bytes = msgpack.packb(message, use_bin_type=True)
    return packed
