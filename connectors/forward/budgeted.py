"""A Forward connection as a reader of the memory budget (:class:`connectors.budget.Reader`).

A message whose header announces its size (a bulk message) is admitted for
all it will hold before its body is read (:meth:`Admission.charge` asks the
budget, :meth:`~Admission.budget_admitted` is its answer when it had to
wait); anything else is read in steps the budget's room allows
(:meth:`Admission.read_size`) and charged as it arrives. Past the budget the
connection stops reading until the budget calls :meth:`~Admission.budget_resume`
(room was released) or :meth:`~Admission.budget_pass` (every reader waits on an
incomplete frame: the one holding the largest reads on until its frame is whole).
A connection holding the pass that sends nothing for :data:`PASS_GRACE` seconds
is closed, so the others can go on.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from windvane.connectors.budget import Charges, MemoryBudget, held_for, held_for_message
from windvane.connectors.listener import ConnectionCounters

from .decode import FrameReader
from .reading import Reading

log = logging.getLogger("windvane.connectors.forward")

#: Seconds a connection given the budget's pass (see :mod:`connectors.budget`) may send nothing before it is closed.
PASS_GRACE = 2.0


class Admission:
    """What a connection holds in the memory budget (:attr:`charges`), and the budget's callbacks to it.

    ``close`` closes the connection at once (a pass holder that stalls).
    """

    def __init__(
        self,
        budget: MemoryBudget,
        counters: ConnectionCounters,
        reading: Reading,
        frames: FrameReader,
        *,
        close: Callable[[], None],
    ) -> None:
        self._budget = budget
        self._counters = counters
        self._reading = reading
        self._frames = frames
        self._close = close
        self.charges = Charges(budget)  # what the connection holds in the memory budget
        self._paused = False  # waiting for room in the memory budget
        self._has_pass = False  # reading on past the budget's limit until the frame being read is whole
        self._admitted = False  # the bulk message being read was admitted by the memory budget
        self._pass_timer: asyncio.TimerHandle | None = None  # closes a pass holder that stalls

    @property
    def paused(self) -> bool:
        """Whether reading waits for room in the budget."""
        return self._paused

    @property
    def admitted(self) -> bool:
        """Whether the bulk message being read was admitted: its entries are received where it is kept."""
        return self._admitted

    @property
    def partial_charge(self) -> int:
        """The incomplete frame, as the reader holds it, in the budget (the budget's pass goes to the most)."""
        return self.charges.partial

    @property
    def holding(self) -> bool:
        """Whether the connection waits for the budget or reads past it (it is not idle then)."""
        return self._paused or self._has_pass

    def budget_resume(self) -> None:
        """Room was released: reading may resume."""
        self._paused = False
        self._reading.wake.set()  # the pump resumes reading when nothing else holds it back

    def budget_admitted(self, size: int) -> None:
        """The bulk message being read was admitted: ``size`` bytes more are its, and it is read on."""
        self.charges.add("partial", size)
        self._admitted = True
        self.budget_resume()

    def budget_pass(self) -> None:
        """Read on past the budget until the frame being read is whole (closed if it stalls)."""
        self._paused = False
        self._has_pass = True
        self._reading.resume()
        self._reading.touch()
        self._watch_pass()

    def read_size(self, most: int, *, authenticating: bool) -> int:
        """Bytes the next read may take into the server's buffer: what the budget's room allows (a reader
        with the pass, or in its handshake, reads on)."""
        if self._has_pass or authenticating:
            return most
        return self._budget.readable(most)

    def charge(self, charged: int, whole: bool) -> None:
        """Charge ``charged`` bytes of whole frames just queued (``whole``: at least one frame was completed)
        and the incomplete frame; ask for a bulk message's admission; pause when over."""
        if whole:
            self._admitted = False
        announced = self._frames.announced
        held = (
            held_for_message(announced) if announced is not None and self._admitted else held_for(self._frames.buffered)
        )
        self.charges.change(queued=charged, partial=held - self.charges.partial)
        if self._has_pass and (charged or not self._frames.buffered):  # its frame is whole: the pass is over
            self._has_pass = False
            self._budget.end_pass(self)
        if self._reading.stopped:
            return
        if announced is not None and not self._admitted:
            size = held_for_message(announced) - self.charges.partial
            if self._budget.admit(self, size):
                self.charges.add("partial", size)
                self._admitted = True
            elif not self._admitted:  # queued (not granted at once by the budget's own rules)
                self._paused = True
                self._reading.pause()
        elif self._budget.over and not self._has_pass and announced is None:  # an admitted message is read on
            self._paused = True
            self._reading.pause()
            self._budget.wait(self)

    async def reserve(self, size: int) -> int:
        """Wait for ``size`` bytes of room in the budget and hold them (a message's decompressed size); ``size``."""
        await self._budget.reserve(size)
        self.charges.reserved(size)
        return size

    def release_all(self) -> None:
        """The connection is done: whatever it still holds goes back to the budget."""
        self._has_pass = False
        if self._pass_timer is not None:
            self._pass_timer.cancel()
            self._pass_timer = None
        self._budget.forget(self)
        self.charges.release()

    def _watch_pass(self) -> None:
        if self._pass_timer is not None:
            self._pass_timer.cancel()
        self._pass_timer = asyncio.get_running_loop().call_later(PASS_GRACE, self._check_pass, self._reading.last_read)

    def _check_pass(self, since: float) -> None:
        self._pass_timer = None
        if not self._has_pass or self._reading.lost:
            return
        if self._reading.last_read > since:
            self._watch_pass()
            return
        self._counters.budget_stalls += 1
        log.warning(
            "Forward connection from %s stalled holding an incomplete frame of %d bytes while the memory budget "
            "(%d bytes) is full of incomplete frames; closing it so the others can go on",
            self._reading.peer,
            self._frames.buffered,
            self._budget.limit,
        )
        self._close()
