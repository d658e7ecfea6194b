"""A Forward connection as a reader of the memory budget (:class:`connectors.budget.Reader`).

What the connection reads is charged as it arrives (:meth:`Budgeted._charge`);
past the budget it stops reading until the budget calls :meth:`~Budgeted.budget_resume`
(room was released) or :meth:`~Budgeted.budget_pass` (every reader waits on an
incomplete frame: the one holding the largest reads on until its frame is whole).
"""

from __future__ import annotations

import asyncio

from windvane.connectors.budget import held_for

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

    def budget_pass(self) -> None:
        """Read on past the budget until the frame being read is whole (closed if it stalls)."""
        self.budget_paused = False
        self.has_pass = True
        self._resume()
        self.last_read = asyncio.get_running_loop().time()
        self._watch_pass()

    def _charge(self, charged: int) -> None:
        """Charge ``charged`` bytes of whole frames just queued and the incomplete frame; pause when over."""
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
