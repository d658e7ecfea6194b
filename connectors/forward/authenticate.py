"""A Forward connection's shared-key handshake, on the wire (the exchange itself is :mod:`.handshake`'s).

The HELO is sent on connect; until the PING is whole and accepted, a client
may send at most :data:`.handshake.MAX_PING_BYTES` and nothing it sends is
queued as a message. A refused PING is answered, counted (``rejected_auth``),
logged, and ends reading.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import msgpack

from .decode import parse_frame
from .errors import ForwardError
from .framing import Frame
from .handshake import MAX_PING_BYTES
from .timers import Timers

log = logging.getLogger("windvane.connectors.forward")


class Authenticating(Timers):
    """Sends the HELO, bounds what a stranger may send, and checks the PING."""

    def _feed(self, data: bytes) -> None:
        raise NotImplementedError  # the connection's reader (:class:`.connection.Connection`)

    def _greet(self) -> None:
        """On connect, with a shared key: send the HELO."""
        assert self.handshake is not None and self.transport is not None
        self.transport.write(msgpack.packb(self.handshake.helo(), use_bin_type=True))

    def _read_until_authenticated(self, data: bytes) -> bytes:
        """Feed ``data`` up to a PING's worth; what is left once the handshake is over (b"" otherwise)."""
        # Before the handshake, a PING's worth of bytes at most: nothing else is buffered for a stranger.
        room = MAX_PING_BYTES - self.frames.buffered
        self._feed(data[:room])
        if self.stopped or self.handshake is None:
            return data[room:]
        if len(data) >= room:
            self.server.counters.preauth_oversize += 1
            log.warning(
                "Forward connection from %s sent over %d bytes without completing the handshake (a PING is "
                "far smaller); closing",
                self.peer,
                MAX_PING_BYTES,
            )
            self._close_now()
        return b""

    def _check_ping(self, frame: Frame) -> None:
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
            self._idle_from_now()
            log.debug("Forward handshake from %s (%s) accepted", self.peer, pong[3])
            return
        self.stats["rejected_auth"] += 1
        log.warning(
            "Forward handshake from %s refused: %s (client hostname %r, user %r)",
            self.peer,
            pong[2],
            self.handshake.client_hostname,
            self.handshake.username,
        )
        self._stop_reading()
        self.wake.set()


def _serialize(message: Any, json_mode: bool) -> bytes:
    if json_mode:
        return json.dumps(message, default=lambda b: b.decode("latin-1")).encode()
    packed: bytes = msgpack.packb(message, use_bin_type=True)
    return packed
