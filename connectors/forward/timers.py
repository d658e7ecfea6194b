"""A Forward connection's timers: the handshake deadline, and the idle and frame timeouts.

* with a shared key, a client that has not completed the handshake within
  ``limits.handshake_timeout`` is closed;
* a connection with nothing received for ``limits.idle_timeout`` seconds
  and nothing owed to it is closed;
* a message must be whole within ``limits.frame_timeout`` seconds of its
  first byte, plus a second per ``limits.frame_min_rate`` bytes received of
  it; the time reading was paused by the server is not counted.

The memory budget's pass has a timer of its own (:mod:`.budgeted`). Each
closing is counted in the server's :class:`connectors.listener.ConnectionCounters`
and logged with the peer.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from windvane.connectors.limits import Limits
from windvane.connectors.listener import ConnectionCounters

from .decode import FrameReader
from .reading import Reading

log = logging.getLogger("windvane.connectors.forward")


class Timers:
    """Arms and checks a connection's handshake, idle and frame timers; ``close`` closes the connection at once.

    ``busy`` says whether the connection holds something not yet acknowledged (it is not idle then).
    """

    def __init__(
        self,
        limits: Limits,
        counters: ConnectionCounters,
        reading: Reading,
        frames: FrameReader,
        *,
        busy: Callable[[], bool],
        close: Callable[[], None],
    ) -> None:
        self._limits = limits
        self._counters = counters
        self._reading = reading
        self._frames = frames
        self._busy = busy
        self._close = close
        self._timer: asyncio.TimerHandle | None = None  # the handshake or idle timeout
        self._handshaking = False
        # When the message being read started, None between messages, and the reading's paused seconds
        # then (what is paused after it moves its deadline on); the timer that checks it arrives in time.
        self._frame_started: float | None = None
        self._paused_before = 0.0
        self._frame_timer: asyncio.TimerHandle | None = None

    def start(self, *, handshake: bool) -> None:
        """On connect: the handshake deadline when there is a handshake, else the idle timeout."""
        loop = asyncio.get_running_loop()
        self._handshaking = handshake
        if handshake:
            self._timer = loop.call_later(self._limits.handshake_timeout, self._handshake_timeout)
        else:
            self._timer = loop.call_later(self._limits.idle_timeout, self._idle_check)

    def idle_from_now(self) -> None:
        """The handshake is done: the idle timeout replaces its deadline."""
        self._handshaking = False
        if self._timer is not None:
            self._timer.cancel()
        self._timer = asyncio.get_running_loop().call_later(self._limits.idle_timeout, self._idle_check)

    def cancel(self) -> None:
        """The connection is closing: no timer fires any more."""
        for timer in (self._timer, self._frame_timer):
            if timer is not None:
                timer.cancel()

    def _handshake_timeout(self) -> None:
        if not self._handshaking or self._reading.lost:
            return
        self._counters.handshake_timeouts += 1
        log.warning(
            "Forward connection from %s did not complete the handshake in %g s; closing",
            self._reading.peer,
            self._limits.handshake_timeout,
        )
        self._close()

    def _idle_check(self) -> None:
        self._timer = None
        if self._reading.lost:
            return
        loop = asyncio.get_running_loop()
        idle = self._limits.idle_timeout
        deadline = self._reading.last_read + idle
        if self._busy() or loop.time() < deadline:
            self._timer = loop.call_at(max(deadline, loop.time() + min(idle, 1.0)), self._idle_check)
            return
        self._counters.idle_timeouts += 1
        log.info("Forward connection from %s idle for %g s; closing", self._reading.peer, idle)
        self._close()

    def frame_clock(self, whole: bool) -> None:
        """After a read (``whole``: it completed a message): start the clock of the message now incomplete,
        or stop it when none is."""
        if self._reading.stopped or not self._frames.buffered:
            self._frame_started = None
            return
        if whole or self._frame_started is None:
            self._frame_started = asyncio.get_running_loop().time()
            self._paused_before = self._reading.paused_seconds
        if self._frame_timer is None:
            self._frame_timer = asyncio.get_running_loop().call_later(self._frame_allowed(), self._frame_check)

    def _frame_allowed(self) -> float:
        """Seconds the message being read may take, from its start, with what was received of it so far."""
        return self._limits.frame_timeout + self._frames.buffered / self._limits.frame_min_rate

    def _frame_check(self) -> None:
        self._frame_timer = None
        if self._frame_started is None or self._reading.lost or self._reading.stopped:
            return
        loop = asyncio.get_running_loop()
        started = self._frame_started + self._reading.paused_seconds - self._paused_before
        deadline = started + self._frame_allowed()
        if self._reading.paused or loop.time() < deadline:  # paused: the deadline moves on when reading resumes
            self._frame_timer = loop.call_at(max(deadline, loop.time() + 1.0), self._frame_check)
            return
        limits = self._limits
        self._counters.frame_timeouts += 1
        log.warning(
            "Forward connection from %s sent %d bytes of a message in %.0f s, slower than the frame timeout "
            "allows (%g s and a second per %d bytes: --frame-timeout, --frame-min-rate); closing",
            self._reading.peer,
            self._frames.buffered,
            loop.time() - started,
            limits.frame_timeout,
            limits.frame_min_rate,
        )
        self._close()
