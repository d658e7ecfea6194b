"""A Forward connection as a reader of the memory budget (:class:`connectors.budget.Reader`).

A message whose header announces its size (a bulk message) is admitted for
all it will hold before its body is read (:meth:`Budgeted._charge` asks the
budget, :meth:`~Budgeted.budget_admitted` is its answer when it had to
wait); anything else is read in steps the budget's room allows
(:meth:`Budgeted._read_size`) and charged as it arrives. Past the budget the
connection stops reading until the budget calls :meth:`~Budgeted.budget_resume`
(room was released) or :meth:`~Budgeted.budget_pass` (every reader waits on an
incomplete frame: the one holding the largest reads on until its frame is whole).
"""

from __future__ import annotations

import asyncio

from windvane.connectors.budget import held_for, held_for_message

from .timers import Timers


class Budgeted(Timers):
    """The budget's callbacks, and the charging of what the connection holds."""

    @property
    def partial_charge(self) -> int:
        """The incomplete frame, as the reader holds it, in the budget (the budget's pass goes to the most)."""
        return self.charges.partial

    def budget_resume(self) -> None:
        """Room was released: reading may resume."""
        self.budget_paused = False
        self.wake.set()  # the pump resumes reading when nothing else holds it back

    def budget_admitted(self, size: int) -> None:
        """The bulk message being read was admitted: ``size`` bytes more are its, and it is read on."""
        self.charges.add("partial", size)
        self.admitted = True
        self.budget_resume()

    def budget_pass(self) -> None:
        """Read on past the budget until the frame being read is whole (closed if it stalls)."""
        self.budget_paused = False
        self.has_pass = True
        self._resume()
        self.last_read = asyncio.get_running_loop().time()
        self._watch_pass()

    def _read_size(self, most: int) -> int:
        """Bytes the next read may take into the server's buffer: what the budget's room allows (a reader
        with the pass, or in its handshake, reads on)."""
        if self.has_pass or self.handshake is not None:
            return most
        return self.budget.readable(most)

    def _charge(self, charged: int, whole: bool) -> None:
        """Charge ``charged`` bytes of whole frames just queued (``whole``: at least one frame was completed)
        and the incomplete frame; ask for a bulk message's admission; pause when over."""
        if whole:
            self.admitted = False
        announced = self.frames.announced
        held = (
            held_for_message(announced) if announced is not None and self.admitted else held_for(self.frames.buffered)
        )
        self.charges.change(queued=charged, partial=held - self.charges.partial)
        if self.has_pass and (charged or not self.frames.buffered):  # its frame is whole: the pass is over
            self.has_pass = False
            self.budget.end_pass(self)
        if self.stopped:
            return
        if announced is not None and not self.admitted:
            size = held_for_message(announced) - self.charges.partial
            if self.budget.admit(self, size):
                self.charges.add("partial", size)
                self.admitted = True
            elif not self.admitted:  # queued (not granted at once by the budget's own rules)
                self.budget_paused = True
                self._pause()
        elif self.budget.over and not self.has_pass and announced is None:  # an admitted message is read on
            self.budget_paused = True
            self._pause()
            self.budget.wait(self)

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
