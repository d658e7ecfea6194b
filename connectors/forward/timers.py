"""A Forward connection's timers: the handshake deadline, the idle and frame timeouts, the budget pass's grace.

* with a shared key, a client that has not completed the handshake within
  ``limits.handshake_timeout`` is closed;
* a connection with nothing received for ``limits.idle_timeout`` seconds
  and nothing owed to it is closed;
* a message must be whole within ``limits.frame_timeout`` seconds of its
  first byte, plus a second per ``limits.frame_min_rate`` bytes received of
  it; the time reading was paused by the server is not counted;
* a connection holding the memory budget's pass that sends nothing for
  :data:`PASS_GRACE` seconds is closed, so the others can go on.

Each closing is counted in the server's
:class:`connectors.listener.ConnectionCounters` and logged with the peer.
"""

from __future__ import annotations

import asyncio
import logging

from .state import ConnectionState

log = logging.getLogger("windvane.connectors.forward")

#: Seconds a connection given the budget's pass (see :mod:`connectors.budget`) may send nothing before it is closed.
PASS_GRACE = 2.0


class Timers(ConnectionState):
    """Arms and checks the connection's handshake, idle and pass timers."""

    def _start_timers(self) -> None:
        """On connect: the handshake deadline when there is a handshake, else the idle timeout."""
        loop = asyncio.get_running_loop()
        limits = self.server.limits
        if self.handshake is not None:
            self.timer = loop.call_later(limits.handshake_timeout, self._handshake_timeout)
        else:
            self.timer = loop.call_later(limits.idle_timeout, self._idle_check)

    def _idle_from_now(self) -> None:
        """The handshake is done: the idle timeout replaces its deadline."""
        if self.timer is not None:
            self.timer.cancel()
        self.timer = asyncio.get_running_loop().call_later(self.server.limits.idle_timeout, self._idle_check)

    def _handshake_timeout(self) -> None:
        if self.handshake is None or self.lost:
            return
        self.server.counters.handshake_timeouts += 1
        log.warning(
            "Forward connection from %s did not complete the handshake in %g s; closing",
            self.peer,
            self.server.limits.handshake_timeout,
        )
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

    def _frame_clock(self, whole: bool) -> None:
        """After a read (``whole``: it completed a message): start the clock of the message now incomplete,
        or stop it when none is."""
        if self.stopped or not self.frames.buffered:
            self.frame_started = None
            return
        if whole or self.frame_started is None:
            self.frame_started = asyncio.get_running_loop().time()
        if self.frame_timer is None:
            self.frame_timer = asyncio.get_running_loop().call_later(self._frame_allowed(), self._frame_check)

    def _frame_allowed(self) -> float:
        """Seconds the message being read may take, from its start, with what was received of it so far."""
        limits = self.server.limits
        return limits.frame_timeout + self.frames.buffered / limits.frame_min_rate

    def _frame_check(self) -> None:
        self.frame_timer = None
        if self.frame_started is None or self.lost or self.stopped:
            return
        loop = asyncio.get_running_loop()
        deadline = self.frame_started + self._frame_allowed()
        if self.paused or loop.time() < deadline:  # paused: the deadline moves on when reading resumes
            self.frame_timer = loop.call_at(max(deadline, loop.time() + 1.0), self._frame_check)
            return
        limits = self.server.limits
        self.server.counters.frame_timeouts += 1
        log.warning(
            "Forward connection from %s sent %d bytes of a message in %.0f s, slower than the frame timeout "
            "allows (%g s and a second per %d bytes: --frame-timeout, --frame-min-rate); closing",
            self.peer,
            self.frames.buffered,
            loop.time() - self.frame_started,
            limits.frame_timeout,
            limits.frame_min_rate,
        )
        self._close_now()

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
            self.peer,
            self.frames.buffered,
            self.budget.limit,
        )
        self._close_now()
