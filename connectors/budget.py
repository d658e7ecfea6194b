"""One memory budget shared by every connection of a process: bytes read from clients and not yet committed.

Connectors charge what they hold, in three kinds:

* ``partial``: a Forward frame being read (what it was admitted for, see
  below) or an incomplete HTTP body. Only reading more of it (or closing the
  connection) releases it.
* ``queued``: whole frames not yet handed to ingest, and the room reserved
  for a compressed payload's decompressed bytes (:meth:`MemoryBudget.reserve`).
* ``submitted``: handed to ingest; released once committed (or failed).

Forward frames, HTTP bodies once whole, and decompressed payloads are
charged :func:`held_for` their size: what they come to hold until their
commit is done, not their size alone; a whole message adds
:data:`MESSAGE_OVERHEAD` (:func:`held_for_message`, the objects a waiting
message is made of), so that thousands of tiny pipelined messages are
bounded by the budget as well as a few large ones.

The budget is a bound, not a target: bytes are charged before they are read.

* A Forward message whose header tells its size (PackedForward entries of
  64 KiB or more as str/bin) is *admitted* for all it will hold before its
  body is read (:meth:`MemoryBudget.admit`); until it fits, its connection
  is not read. Any message waiting that fits is admitted, so small chunks
  go on beside a big one waiting, until the oldest has waited
  :data:`ADMISSION_PATIENCE`: then the others wait for it.
* Anything else is read a step at a time, each read no larger than the room
  left at :data:`READ_COST` per byte (:meth:`MemoryBudget.readable`: the most
  one byte can come to hold, messages of at least :data:`SMALL_MESSAGE` bytes
  assumed), and past :attr:`MemoryBudget.limit` its connection stops being
  read (:meth:`MemoryBudget.wait`). HTTP requests are refused with 503.

Three rules keep that from stalling for ever, since what is ``submitted`` is
the only thing a commit releases:

* a message that would hold more than the whole budget is admitted alone,
  once nothing else is held (and admissions after it wait);
* a reservation that does not fit is granted anyway once nothing is
  submitted and no other reservation is still to be submitted (it then goes
  through alone, as ingest lets a submission larger than its whole limit
  through alone);
* when only frames being read hold the budget and none of their connections
  is reading, the oldest admission waiting is granted, or else one paused
  reader, the one holding the most, gets a *pass*: it reads on until its
  frame is whole (or is closed if it stalls).

The bytes held go past the limit only by these rules: by a message or
reservation bigger than the whole budget, or by what the frames already read
held when one was granted past the limit.

After a burst (:data:`~ingest.memory.TRIM_MIN` bytes held at once or more),
once nothing has been held for ``trim_after`` seconds, the memory the
allocator kept is given back to the system
(:func:`ingest.memory.give_back_memory`); the decode workers do the same
after their own bursts (:class:`ingest.memory.AfterBursts`).

All methods are called on the event loop; none blocks.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from windvane.connectors.errors import ConnectorConfigError
from windvane.ingest.memory import TRIM_MIN, give_back_memory

if TYPE_CHECKING:
    from windvane.connectors.http.metrics import SampleFields

#: What one resumed reader may read before it sees the budget again (asyncio reads 256 KiB at a time).
READ_SIZE = 256 << 10

#: Bytes of memory a message holds per byte of it, from its first byte read to the end of its commit: the
#: framer's buffers, then its bytes or decoded events, then what the group commit serialises and encodes
#: for its chunks, and what the allocator keeps between them.
EXPANSION = 4


#: Bytes a whole message holds beyond its own while it waits for its commit: the objects made for it
#: (frame, decoded batch, submission, waiter, ack) and the writers' state, which outweigh a small message's
#: bytes (benchmarks/README.md, memory under hostile clients).
MESSAGE_OVERHEAD = 3 << 10


#: The smallest message a read is charged for in advance (a one-event chunk with its chunk id is larger).
SMALL_MESSAGE = 64

#: The most one byte read may come to hold in the budget when what it belongs to is not known before it is
#: read: :data:`EXPANSION` for itself and its share of the :data:`MESSAGE_OVERHEAD` of a small message.
READ_COST = EXPANSION + MESSAGE_OVERHEAD // SMALL_MESSAGE

#: Seconds a message may wait for its admission while others that fit go first; then they wait for it.
ADMISSION_PATIENCE = 2.0


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

    @property
    def partial_charge(self) -> int:
        """Bytes of an incomplete frame it holds (the one with the most gets the pass)."""

    def budget_resume(self) -> None:
        """There is room again: read on."""

    def budget_admitted(self, size: int) -> None:
        """The message being read was admitted: charge ``size`` bytes (partial) and read it."""

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
    (times a connection was paused for the budget).
    ``trim_after``: seconds after the budget last held nothing that the
    memory freed since a burst is given back (None: never); ``let_go``:
    called first, in a thread, for what keeps the burst's last objects
    alive to let go of them (the decode pool's threads).
    """

    def __init__(self, limit: int, trim_after: float | None = None, let_go: Callable[[], None] | None = None) -> None:
        if limit < 1:
            raise ConnectorConfigError(f"the memory budget must be at least 1 byte, not {limit}")
        self.limit = limit
        self.partial = 0
        self.queued = 0
        self.submitted = 0
        self.reserved = 0  # granted by reserve() and not yet settled (submitted or dropped)
        self.peak = 0
        self.pauses = 0
        self.pass_holder: Reader | None = None
        self._waiting: dict[Reader, None] = {}  # paused readers, oldest first
        self._reservations: collections.deque[tuple[int, asyncio.Future[None]]] = collections.deque()
        # Messages waiting to be admitted, oldest first: their size, and the loop time they began waiting.
        self._admissions: dict[Reader, tuple[int, float]] = {}
        self.trim_after = trim_after
        self._let_go = let_go
        self.trims = 0  # times memory was given back after a burst
        self._burst = 0  # the most held at once since memory was last given back
        self._emptied = 0.0  # loop time the budget last came to hold nothing
        self._trim_timer: asyncio.TimerHandle | None = None

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

    def readable(self, most: int) -> int:
        """Bytes a reader of messages of unknown size may read now, at most ``most``: what the room left
        holds at :data:`READ_COST` each, and at least one byte (a reader reading past the limit is paused
        after its read)."""
        return max(1, min(most, (self.limit - self.used) // READ_COST))

    def samples(self) -> list[SampleFields]:
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
            (
                "windvane_memory_given_back_total",
                "Times the memory freed after a burst was given back to the system (--trim-after).",
                "counter",
                {},
                self.trims,
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
        used = self.used
        self.peak = max(self.peak, used)
        self._burst = max(self._burst, used)
        if any(size < 0 for size in sizes.values()):
            if used == 0 and self._burst >= TRIM_MIN and self.trim_after is not None:
                self._trim_soon()
            self._wake()

    # -- giving memory back ----------------------------------------------------------

    def _trim_soon(self) -> None:
        """Nothing is held after a burst: give the memory back in ``trim_after`` seconds unless more is held then."""
        loop = asyncio.get_running_loop()
        self._emptied = loop.time()
        if self._trim_timer is None:
            assert self.trim_after is not None
            self._trim_timer = loop.call_later(self.trim_after, self._trim)

    def _trim(self) -> None:
        self._trim_timer = None
        assert self.trim_after is not None
        loop = asyncio.get_running_loop()
        if self.used:  # busy again: the next time it holds nothing starts the wait anew
            return
        if loop.time() < self._emptied + self.trim_after:
            self._trim_timer = loop.call_at(self._emptied + self.trim_after, self._trim)
            return
        self._burst = 0
        self.trims += 1
        # In a thread: trimming walks every arena, and the event loop goes on meanwhile.
        loop.run_in_executor(None, self._give_back)

    def _give_back(self) -> None:
        if self._let_go is not None:
            self._let_go()
        give_back_memory()

    # -- waiting ---------------------------------------------------------------------

    def wait(self, reader: Reader) -> None:
        """``reader`` paused its reading for the budget: resume it once there is room."""
        if reader not in self._waiting:
            self.pauses += 1
            self._waiting[reader] = None
        self._wake()

    def admit(self, reader: Reader, size: int) -> bool:
        """Whether ``size`` bytes of a message ``reader`` is about to read fit now; if they do not, they are
        queued and :meth:`Reader.budget_admitted` is called once they do. The caller charges them when True."""
        self._admissions.pop(reader, None)
        if self._admissible(reader, size):
            return True
        self._admissions[reader] = (size, asyncio.get_running_loop().time())
        self.pauses += 1
        self._wake()
        return False

    def _admissible(self, reader: Reader, size: int) -> bool:
        """Whether ``reader``'s message of ``size`` bytes more may be read now (see the module docstring)."""
        if reader.partial_charge + size > self.limit:
            return self.used == reader.partial_charge  # bigger than the whole budget: alone
        if self._admissions:
            first, (first_size, since) = next(iter(self._admissions.items()))
            if first is not reader and (
                first.partial_charge + first_size > self.limit
                or asyncio.get_running_loop().time() - since > ADMISSION_PATIENCE
            ):
                return False  # the oldest goes first: it is bigger than the whole budget, or waited long enough
        return self.fits(size)

    def forget(self, reader: Reader) -> None:
        """``reader`` is gone (closed): no resume, no admission, no pass for it."""
        self._waiting.pop(reader, None)
        self._admissions.pop(reader, None)
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
        for reader, (size, _) in list(self._admissions.items()):
            if self._admissible(reader, size):
                del self._admissions[reader]
                reader.budget_admitted(size)
        if not self.over:
            turns = max(1, (self.limit - self.used) // held_for(READ_SIZE))
            while self._waiting and turns:
                reader = next(iter(self._waiting))
                del self._waiting[reader]
                reader.budget_resume()
                turns -= 1
        if not self._stuck():
            return
        if self._admissions:
            reader = next(iter(self._admissions))
            reader.budget_admitted(self._admissions.pop(reader)[0])
        elif self.over:
            reader = max(self._waiting, key=lambda r: r.partial_charge)
            del self._waiting[reader]
            self.pass_holder = reader
            reader.budget_pass()

    def _stuck(self) -> bool:
        """Whether nothing held can be released: only frames being read hold the budget, and every connection
        reading one waits (see the module docstring)."""
        if (
            self.pass_holder is not None
            or not (self._waiting or self._admissions)
            or self.queued
            or self.submitted
            or self._reservations
        ):
            return False
        waiting = sum(r.partial_charge for r in self._waiting) + sum(r.partial_charge for r in self._admissions)
        return waiting >= self.partial


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
