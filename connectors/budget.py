"""One memory budget shared by every connection of a process: bytes read from clients and not yet committed.

Connectors charge what they hold, in three kinds:

* ``partial``: an incomplete Forward frame or HTTP body. Only reading more
  of it (or closing the connection) releases it.
* ``queued``: whole frames not yet handed to ingest, and the room reserved
  for a compressed payload's decompressed bytes (:meth:`MemoryBudget.reserve`).
* ``submitted``: handed to ingest; released once committed (or failed).

Forward frames, whole or not, HTTP bodies once whole, and decompressed
payloads are charged :func:`held_for` their size: what they come to hold
until their commit is done, not their size alone. A frame that becomes
whole thus adds only :data:`MESSAGE_OVERHEAD` (:func:`held_for_message`, the
objects a waiting message is made of), so readers resumed together cannot
overshoot the budget by all finishing their frames, and thousands of tiny
pipelined messages are bounded by it as well as a few large ones.

Past :attr:`MemoryBudget.limit`, Forward connections stop being read (they
wait here, :meth:`MemoryBudget.wait`) and HTTP requests are refused with 503.
Two rules keep that from stalling for ever, since what is ``submitted`` is
the only thing a commit releases:

* a reservation that does not fit is granted anyway once nothing is
  submitted and no other reservation is still to be submitted (it then goes
  through alone, as ingest lets a submission larger than its whole limit
  through alone);
* when the budget is full of incomplete frames and nothing is queued or
  submitted, one paused reader, the one holding the most, gets a *pass*:
  it reads on until its frame is whole (or is closed if it stalls).

All methods are called on the event loop; none blocks.
"""

from __future__ import annotations

import asyncio
import collections
from typing import Protocol

from windvane.connectors.errors import ConnectorConfigError

#: What one resumed reader may read before it sees the budget again (asyncio reads 256 KiB at a time).
READ_SIZE = 256 << 10

#: Bytes of memory a message holds per byte of it, from its first byte read to the end of its commit: the
#: framer's two buffers, then its bytes or decoded events, then what the group commit serialises and encodes
#: for its chunks, and what the allocator keeps between them. Measured with 10 MiB events pipelined on 16
#: connections: charging three copies let RSS reach 1.7 times the budget past the idle process, four 1.5.
EXPANSION = 4


#: Bytes a whole message holds beyond its own while it waits for its commit: the objects made for it
#: (frame, decoded batch, submission, waiter, ack). Measured with 10,000 tags each sending a one-event
#: chunk a second, pipelined past what the store committed: RSS rose about 3.6 KiB per message waiting,
#: writers' state included.
MESSAGE_OVERHEAD = 3 << 10


def held_for(size: int) -> int:
    """What a message (or decompressed payload) of ``size`` bytes is charged (:data:`EXPANSION`)."""
    return EXPANSION * size


def held_for_message(size: int) -> int:
    """What a whole message of ``size`` bytes is charged until its commit: :func:`held_for` its bytes and
    :data:`MESSAGE_OVERHEAD`, so that many tiny messages are bounded by the budget too."""
    return held_for(size) + MESSAGE_OVERHEAD


def inflate_limit(configured: int, budget: MemoryBudget) -> int:
    """The decompressed size a payload may have: ``configured``, at most what ``budget`` holds decoded."""
    return min(configured, budget.limit // EXPANSION)


_KINDS = ("partial", "queued", "submitted")


class Reader(Protocol):
    """A connection that waits for the budget with its reading paused."""

    #: Bytes of an incomplete frame it holds (the one with the most gets the pass).
    partial_charge: int

    def budget_resume(self) -> None:
        """There is room again: read on."""

    def budget_pass(self) -> None:
        """Read on past the limit until the frame being read is whole; then :meth:`MemoryBudget.end_pass`."""


class _Held:
    """Bytes held by kind, changed through ``change(**sizes)``; :meth:`add` and :meth:`move` are its two uses."""

    def change(self, **sizes: int) -> None:
        raise NotImplementedError

    def add(self, kind: str, size: int) -> None:
        """Charge ``size`` bytes of ``kind`` (negative: release them)."""
        self.change(**{kind: size})

    def move(self, size: int, src: str, dst: str) -> None:
        """Bytes held change kind (a message is submitted)."""
        if size:
            self.change(**{src: -size, dst: size})


class MemoryBudget(_Held):
    """Bytes held for clients, against ``limit``; see the module docstring.

    Counters for metrics: :attr:`used` (now), :attr:`peak`, :attr:`pauses`
    (times a connection was paused for the budget), :attr:`passes`.
    """

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ConnectorConfigError(f"the memory budget must be at least 1 byte, not {limit}")
        self.limit = limit
        self.partial = 0
        self.queued = 0
        self.submitted = 0
        self.reserved = 0  # granted by reserve() and not yet settled (submitted or dropped)
        self.peak = 0
        self.pauses = 0
        self.passes = 0
        self.pass_holder: Reader | None = None
        self._waiting: dict[Reader, None] = {}  # paused readers, oldest first
        self._reservations: collections.deque[tuple[int, asyncio.Future]] = collections.deque()

    @property
    def used(self) -> int:
        """Bytes held now, of every kind."""
        return self.partial + self.queued + self.submitted

    @property
    def over(self) -> bool:
        """Whether the bytes held reach the limit (readers then wait)."""
        return self.used >= self.limit

    def fits(self, size: int) -> bool:
        """Whether ``size`` more bytes stay within the limit."""
        return self.used + size <= self.limit

    def samples(self) -> list[tuple[str, str, str, dict[str, str], float]]:
        """Metric samples ``(name, help, type, labels, value)``, as ``GET /metrics`` shows them."""
        return [
            (
                "windvane_memory_budget_bytes",
                "Bytes of client data the connectors may hold before it is committed (--memory-budget).",
                "gauge",
                {},
                self.limit,
            ),
            (
                "windvane_memory_held_bytes",
                "Bytes of client data held now and not yet committed, by kind: partial "
                "(incomplete frames and bodies), queued (waiting, or reserved for decompression), submitted.",
                "gauge",
                {"kind": "partial"},
                self.partial,
            ),
            ("windvane_memory_held_bytes", "", "gauge", {"kind": "queued"}, self.queued),
            ("windvane_memory_held_bytes", "", "gauge", {"kind": "submitted"}, self.submitted),
            ("windvane_memory_held_peak_bytes", "The most bytes of client data held at once.", "gauge", {}, self.peak),
            (
                "windvane_memory_budget_pauses_total",
                "Times a Forward connection stopped being read because the memory budget was full.",
                "counter",
                {},
                self.pauses,
            ),
        ]

    # -- charging ------------------------------------------------------------------

    def change(self, **sizes: int) -> None:
        """Charge ``sizes`` bytes by kind (negative: release them), as one change: a frame that becomes whole
        moves its bytes from ``partial`` to ``queued`` without counting them twice or waking anyone between."""
        for kind, size in sizes.items():
            if kind not in _KINDS:
                raise ConnectorConfigError(f"unknown kind of held bytes {kind!r}; expected one of {_KINDS}")
            setattr(self, kind, getattr(self, kind) + size)
        self.peak = max(self.peak, self.used)
        if any(size < 0 for size in sizes.values()):
            self._wake()

    # -- waiting ---------------------------------------------------------------------

    def wait(self, reader: Reader) -> None:
        """``reader`` paused its reading for the budget: resume it once there is room."""
        if reader not in self._waiting:
            self.pauses += 1
            self._waiting[reader] = None
        self._wake()

    def forget(self, reader: Reader) -> None:
        """``reader`` is gone (closed): no resume, no pass for it."""
        self._waiting.pop(reader, None)
        if self.pass_holder is reader:
            self.pass_holder = None
        self._wake()

    def end_pass(self, reader: Reader) -> None:
        """The pass holder's frame is whole: the usual rules again."""
        if self.pass_holder is reader:
            self.pass_holder = None
            self._wake()

    async def reserve(self, size: int) -> None:
        """Wait until ``size`` bytes fit (or nothing else can release room), then charge them as ``queued``;
        :meth:`settle` them once they are submitted or dropped."""
        if not self._reservations and self._grantable(size):
            self._grant(size)
            return
        future = asyncio.get_running_loop().create_future()
        self._reservations.append((size, future))
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self.settle(size)  # granted as the waiter was cancelled: give it back
                self.add("queued", -size)
            raise

    def settle(self, size: int) -> None:
        """Reserved bytes were submitted (or dropped): they no longer keep other reservations waiting."""
        self.reserved -= size
        self._wake()

    def _grantable(self, size: int) -> bool:
        return self.fits(size) or (self.submitted == 0 and self.reserved == 0)

    def _grant(self, size: int) -> None:
        self.reserved += size
        self.add("queued", size)

    def _wake(self) -> None:
        while self._reservations:
            size, future = self._reservations[0]
            if future.done():
                self._reservations.popleft()
                continue
            if not self._grantable(size):
                break
            self._reservations.popleft()
            self._grant(size)
            future.set_result(None)
        if not self.over:
            turns = max(1, (self.limit - self.used) // held_for(READ_SIZE))
            while self._waiting and turns:
                reader = next(iter(self._waiting))
                del self._waiting[reader]
                reader.budget_resume()
                turns -= 1
        elif (
            self.pass_holder is None
            and self._waiting
            and self.queued == 0
            and self.submitted == 0
            and not self._reservations
        ):
            # Only incomplete frames hold the budget: nothing will be released unless one is read on.
            reader = max(self._waiting, key=lambda r: r.partial_charge)
            del self._waiting[reader]
            self.pass_holder = reader
            self.passes += 1
            reader.budget_pass()


class Charges(_Held):
    """What one connection (or request) holds in ``budget``, by kind; :meth:`release` gives all of it back."""

    def __init__(self, budget: MemoryBudget) -> None:
        self.budget = budget
        self.partial = 0
        self.queued = 0
        self.submitted = 0
        self.unsettled = 0  # reserved (and charged as queued), not yet settled

    @property
    def total(self) -> int:
        """Bytes this holder holds now, of every kind."""
        return self.partial + self.queued + self.submitted

    def change(self, **sizes: int) -> None:
        """Charge ``sizes`` bytes by kind, as one change (:meth:`MemoryBudget.change`)."""
        sizes = {kind: size for kind, size in sizes.items() if size}
        if sizes:
            self.budget.change(**sizes)
            for kind, size in sizes.items():
                setattr(self, kind, getattr(self, kind) + size)

    def reserved(self, size: int) -> None:
        """Record ``size`` bytes the budget granted by :meth:`MemoryBudget.reserve` (charged as ``queued``)."""
        self.queued += size
        self.unsettled += size

    def settle(self) -> None:
        """What was reserved is submitted or dropped (see :meth:`MemoryBudget.settle`)."""
        if self.unsettled:
            size, self.unsettled = self.unsettled, 0
            self.budget.settle(size)

    def release(self) -> None:
        """Give back everything still held."""
        self.settle()
        self.change(**{kind: -getattr(self, kind) for kind in _KINDS})
