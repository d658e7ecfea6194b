"""One submission's journey through the committer, and how its outcome reaches its submitter.

A :class:`Submission` is made on the submitter's event loop, queued, taken
into a group by the committer thread and answered from one of the
committer's threads; :class:`Outcomes` sets its receipt or error and wakes
the submitters' event loops once per group.
"""

from __future__ import annotations

import asyncio
import collections
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from .batch import Batch, Receipt, Undecoded
from .prepare import Prepared, Validated


def streams_of(batches: Sequence[Batch | Undecoded]) -> set[str]:
    """The tags of ``batches``."""
    return {b.tag for b in batches}


@dataclass(eq=False, slots=True)  # thousands a second (sensors' chunks): slots make them cheaper to make
class Submission:
    """One ``(batches, key)`` submitted, with what the committer learns of it on the way."""

    batches: Sequence[Batch | Undecoded]
    key: bytes | None
    size: int
    # The submitter's future, on its event loop: outcomes reach it a group at a time (see Outcomes).
    waiter: asyncio.Future[Receipt]
    record_keys: Sequence[bytes] = ()  # committed with the batches, never checked (see GroupCommitter.submit)
    # Set by the committer's threads once, before the waiter hears of it: the receipt or the error.
    receipt: Receipt | None = None
    error: BaseException | None = None
    queued: float = field(default_factory=time.monotonic)
    # The Undecoded items' preparation in a worker (None: none, or prepared in the commit thread) ...
    prepared: Prepared | None = None
    # ... and its result once collected: one list of validated batches per Undecoded item, in order.
    validated: list[list[Validated]] | None = None
    # Why it could not be stored as it is (an internal error): its events then go to quarantine verbatim.
    salvage: str | None = None
    # Its Undecoded items, found once: the decode pool asks for them up to three times a submission.
    _undecoded: list[Undecoded] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._undecoded = [b for b in self.batches if isinstance(b, Undecoded)]

    @property
    def finished(self) -> bool:
        return self.receipt is not None or self.error is not None

    @property
    def streams(self) -> set[str]:
        """The tags its batches are for: the streams its work writes (see :attr:`ingest.metrics.Metrics.failing`)."""
        return streams_of(self.batches)

    def ready(self) -> bool:
        """Whether the commit thread can take it without waiting for a worker."""
        return self.prepared is None or self.prepared.done()

    def undecoded(self) -> list[Undecoded]:
        """Its items that still need decoding."""
        return self._undecoded


@dataclass(eq=False)
class Handoff:
    """One group handed to the commit thread, and what that thread tells the committer thread of it."""

    group: list[Submission]
    written: threading.Event = field(default_factory=threading.Event)  # the group is written (or never will be)
    redo: list[Submission] | None = None  # the commit before failed as a group: these, one by one, first


def _deliver(items: list[Submission]) -> None:
    """On the submitters' event loop: pass each finished submission's outcome to its waiter."""
    for item in items:
        if item.waiter.done():
            continue
        if item.error is not None:
            item.waiter.set_exception(item.error)
        else:
            assert item.receipt is not None, "Outcomes.finish sets a receipt where it sets no error"
            item.waiter.set_result(item.receipt)


class Outcomes:
    """Answers submissions: sets each one's receipt or error, lets go of its key and its bytes, and
    wakes each submitters' event loop once for the whole group.

    ``forget``: called with each answered submission (its key is no longer in
    flight); ``release``: called with each answered submission's size.
    """

    def __init__(self, forget: Callable[[Submission], None], release: Callable[[int], None]):
        self._forget = forget
        self._release = release

    def finish(
        self, group: list[Submission], *, receipts: list[Receipt] | None = None, error: Exception | None = None
    ) -> None:
        """Answer ``group``: each with its receipt (``receipts``, in order) or all with ``error``."""
        for i, item in enumerate(group):
            self._forget(item)
            if error is not None:
                item.receipt, item.error = None, error
            else:
                assert receipts is not None, "finish is given the group's receipts or its error"
                item.receipt, item.error = receipts[i], None
            self._release(item.size)
        # One wake-up of each event loop for the whole group, not one per submission.
        by_loop: dict[asyncio.AbstractEventLoop, list[Submission]] = collections.defaultdict(list)
        for item in group:
            by_loop[item.waiter.get_loop()].append(item)
        for loop, items in by_loop.items():
            try:
                loop.call_soon_threadsafe(_deliver, items)
            except RuntimeError:
                pass  # the loop is closed: nobody waits any more
