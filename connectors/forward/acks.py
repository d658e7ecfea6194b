"""A Forward connection's submissions and acknowledgements.

Each submission is one :meth:`~ingest.batch.Sink.submit_many` call; its
outcome per message is committed, failed (logged, no ack, the connection
closed once what was submitted before is answered: the client resends) or
malformed (found so by a decode worker: reported, nothing after it
acknowledged). Acks are written in the order
the messages arrived, those one commit acknowledged in one send; the
budget bytes a submission held are released once it is done.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from windvane.connectors.budget import Charges
from windvane.connectors.senders import Sender
from windvane.ingest.batch import Batch, Sink, Undecoded
from windvane.ingest.errors import Backpressure, CommitFailed, UndecodableBatch

from .errors import ForwardError, MalformedMessage
from .reading import Reading

log = logging.getLogger("windvane.connectors.forward")

#: One submission: the batches of a message (or of merged chunkless messages) and its idempotency key.
Item = tuple[list[Batch | Undecoded], bytes | None]


class Acker:
    """Submits to the sink, retrying on backpressure, and writes the acks in order.

    ``charges`` are the connection's in the memory budget (a submission's are released once it is done);
    ``report`` reports a message the sink found malformed (the connection stops reading); ``failed`` tells
    the connection that a commit failed (it stops reading, and closes once what it submitted is answered).
    """

    def __init__(
        self,
        sink: Sink,
        reading: Reading,
        charges: Charges,
        stats: dict[str, int],
        *,
        report: Callable[[ForwardError], None],
        failed: Callable[[], None],
    ) -> None:
        self._sink = sink
        self._reading = reading
        self._charges = charges
        self._stats = stats
        self._report = report
        self._failed = failed
        # Sink calls in arrival order: the task, the ack to send for each message (None: none), the bytes
        # they hold in the budget; and how many messages they carry between them.
        self._inflight: deque[tuple[asyncio.Task[list[bool | None]] | None, list[bytes | None], int]] = deque()
        self._in_flight_messages = 0
        self._acking = True  # False from a message found malformed by the sink on: nothing after it is acked
        #: The connection's row in the senders table (None: not listed): events committed, chunks acknowledged.
        self.sender: Sender | None = None

    @property
    def in_flight_messages(self) -> int:
        """Messages submitted and not yet acknowledged (the pump submits while they are fewer than its slots)."""
        return self._in_flight_messages

    @property
    def busy(self) -> bool:
        """Whether submissions are awaited or acks owed (the connection is not idle then)."""
        return bool(self._inflight)

    def submit(self, items: list[Item], acks: list[bytes | None], charge: int) -> None:
        """Hand ``items`` to the sink in one call; ``acks`` are written once they are committed and
        ``charge`` (their bytes in the budget) is released once the call is done."""
        task = asyncio.get_running_loop().create_task(self._submit_many(items))
        self._inflight.append((task, acks, charge))
        self._in_flight_messages += len(items)
        self._reading.wake.set()  # the acker

    def end(self) -> None:
        """Nothing more is submitted: :meth:`ack_in_order` returns once all submitted is acknowledged."""
        self._inflight.append((None, [], 0))
        self._reading.end()

    async def _submit_many(self, items: list[Item]) -> list[bool | None]:
        """For each item, whether it is committed (None: found malformed by the sink); never raises."""
        outcomes: list[bool | None] = [False] * len(items)
        todo = list(range(len(items)))
        sender = self.sender
        committed = 0
        while todo:
            try:
                results: list[Any] = await self._sink.submit_many([items[i] for i in todo])
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - whatever the sink raised, every item failed with it (logged)
                results = [exc] * len(todo)
            retry, delay, failed = [], 0.0, []
            for i, result in zip(todo, results):
                if isinstance(result, Backpressure):
                    retry.append(i)
                    delay = max(delay, result.retry_after)
                elif isinstance(result, UndecodableBatch):
                    # Decoded in a worker: report it as if it had been decoded here.
                    cause = result.cause if isinstance(result.cause, ForwardError) else MalformedMessage(str(result))
                    self._report(cause)
                    self._reading.wake.set()  # the pump sees the connection stopped
                    outcomes[i] = None
                elif isinstance(result, BaseException):
                    failed.append((i, result))
                else:
                    if any(isinstance(b, Undecoded) for b in items[i][0]):
                        self._stats["events"] += result.accepted + result.quarantined
                    committed += result.accepted + result.quarantined
                    outcomes[i] = True
            if failed:
                self._log_failed([items[i] for i, _ in failed], failed[0][1])
                self._failed()
            todo = retry
            if todo:
                # Not reading while we wait is what pushes back on the client.
                self._reading.pause()
                await asyncio.sleep(delay)
        if sender is not None and committed:
            sender.events += committed
            sender.last_ack = time.time()
        return outcomes

    def _log_failed(self, items: list[Item], exc: BaseException) -> None:
        """Log the submissions that failed (one line for those of one call), counting each."""
        self._stats["commit_failed"] += len(items)
        keys = [key for _, key in items]
        chunks = repr(keys[0]) if len(keys) == 1 else f"{len(keys)} chunks, {keys[0]!r} first"
        events = _events([b for batches, _ in items for b in batches])
        if isinstance(exc, CommitFailed):
            log.error(
                "commit failed for %s events from %s (%s): %s; not acknowledged, closing: the client resends",
                events,
                self._reading.peer,
                chunks,
                exc,
            )
        else:
            log.error(
                "sink failed on %s events from %s (%s); not acknowledged, closing",
                events,
                self._reading.peer,
                chunks,
                exc_info=exc,
            )

    async def ack_in_order(self) -> None:
        """Await the submissions in arrival order and write their acks, until the end marker (task None)."""
        acks: list[bytes] = []  # acks owed, written together: one send for the chunks one commit acknowledged
        inflight = self._inflight
        wake = self._reading.wake
        while True:
            if acks and not (inflight and inflight[0][0] is not None and inflight[0][0].done()):
                self._write_acks(acks)
                acks = []
            while not inflight:
                wake.clear()
                await wake.wait()
            task, owed, charge = inflight[0]
            if task is None:
                inflight.popleft()
                self._write_acks(acks)
                return
            outcomes = await task
            inflight.popleft()
            self._in_flight_messages -= len(owed)
            del task
            self._charges.add("submitted", -charge)
            wake.set()  # a slot is free
            for ok, ack in zip(outcomes, owed):
                if ok is None:
                    self._acking = False  # what was submitted after a malformed message is not acknowledged
                if ok and self._acking and ack is not None:
                    acks.append(ack)

    def _write_acks(self, acks: list[bytes]) -> None:
        if acks and not self._reading.lost and self._reading.transport is not None:
            self._reading.write(b"".join(acks))
            self._stats["acks"] += len(acks)
            if self.sender is not None:
                self.sender.chunks += len(acks)


def _events(batches: Sequence[Batch | Undecoded]) -> str:
    """How many events ``batches`` hold, for logs ("?" when some are undecoded)."""
    decoded = [b for b in batches if isinstance(b, Batch)]
    if len(decoded) < len(batches):
        return "?"
    return str(sum(map(len, decoded)))
