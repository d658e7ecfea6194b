"""Group commit: batches from every connection committed together, acknowledged once durable.

:class:`GroupCommitter` is the :class:`~ingest.batch.Sink` connectors submit
to. Its committer thread takes whatever has queued, validates the lot
against the schemas and commits it in one ``arrays.transaction``: each
tag's rows to its stream, rejected records to the tag's quarantine stream,
idempotency keys to the ledger. Only then do the submitters' awaitables
resolve. Groups form by themselves under load: whatever arrives while a
commit runs goes into the next one, so a lone client is answered after one
commit and many clients share commits. ``interval`` (seconds, default 0)
makes the committer wait that long after a group's first arrival for more,
trading latency for fewer commits.

The work is split among the committer's parts, each in its module:

- :mod:`ingest.admission`: the bound on queued bytes (waiting, or
  :class:`~ingest.errors.Backpressure` with ``wait=False``);
- :mod:`ingest.dedup`: idempotency keys, committed (the ledger) and in flight;
- :mod:`ingest.decoding`: decoding and validating :class:`~ingest.batch.Undecoded`
  bytes, in ``decode_workers`` processes or the committer thread;
- :mod:`ingest.staging`: a group gathered per tag, staged and written;
- :mod:`ingest.pipeline`: the committer and commit threads and fan-out
  lingering;
- :mod:`ingest.retries`: a failed group retried one submission at a time;
- :mod:`ingest.observer`: what is counted in :class:`Metrics` (``/metrics``;
  until the work of a failed commit is committed, :attr:`Metrics.failing`
  says which streams fail and why, and ``/health`` answers 503) and logged.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Sequence
from typing import Any

from windvane import neostore

from .admission import Admission
from .batch import Batch, Receipt, Undecoded
from .config import CommitterConfig
from .decoding import DecodePool
from .dedup import Dedup
from .errors import CommitFailed, IngestError
from .ledger import KeyLedger
from .metrics import Metrics
from .observer import CommitObserver
from .pipeline import Parts, Pipeline
from .prepare import INVALID_TAG, valid_tag
from .record_types import record_type_for
from .retries import Retries
from .schema import SchemaSet
from .staging import GroupWriter
from .submission import Outcomes, Submission, streams_of

log = logging.getLogger("windvane.ingest")

__all__ = ["INVALID_TAG", "GroupCommitter"]

#: (index in the call's items, the waiter, whether it is a resend of a submission in flight)
_Waiting = tuple[int, asyncio.Future[Receipt], bool]


def _size(batches: Sequence[Batch | Undecoded]) -> int:
    """The bytes a submission of ``batches`` reserves."""
    return sum(b.size or (len(b.payload) if isinstance(b, Undecoded) else 64 * len(b)) for b in batches)


class GroupCommitter:
    """Commits submitted batches in groups; see the module docstring.

    :meth:`start` before submitting, :meth:`close` to commit what is queued
    and stop. :meth:`submit` and :meth:`submit_many` run on any event loop;
    their receipts come once the batches are durable (or as duplicates).
    ``metrics`` is the service's :class:`Metrics`, which the committer keeps.
    """

    #: See :attr:`ingest.decoding.DecodePool.INLINE_PREPARE_BYTES` and ``BATCH_PREPARE_MIN``.
    INLINE_PREPARE_BYTES = DecodePool.INLINE_PREPARE_BYTES
    BATCH_PREPARE_MIN = DecodePool.BATCH_PREPARE_MIN

    def __init__(
        self,
        store: neostore.Store,
        schemas: SchemaSet,
        *,
        interval: float = CommitterConfig.interval,
        max_pending_bytes: int = CommitterConfig.max_pending_bytes,
        max_group_bytes: int = CommitterConfig.max_group_bytes,
        key_window: float = CommitterConfig.key_window,
        metrics: Metrics | None = None,
        decode_workers: int = 0,
        trim_after: float | None = CommitterConfig.trim_after,
        takes_turns: bool = CommitterConfig.takes_turns,
    ):
        self.store = store
        self.schemas = schemas
        self.observer = CommitObserver(metrics)
        self.metrics = self.observer.metrics
        self.ledger = KeyLedger(key_window)
        self.dedup = Dedup(self.ledger, self.observer)
        self.admission = Admission(max_pending_bytes, self.observer)
        self.outcomes = Outcomes(self.dedup.forget, self.admission.release)
        fail = lambda group, error: self.outcomes.finish(group, error=error)  # noqa: E731
        self.decoding = DecodePool(schemas, decode_workers, self.observer, fail, trim_after)
        parts = Parts(
            GroupWriter(store, schemas, self.ledger),
            self.decoding,
            self.dedup,
            self.admission,
            self.outcomes,
            Retries(self.observer, fail, store),
            self.observer,
        )
        self.pipeline = Pipeline(parts, interval=interval, max_group_bytes=max_group_bytes, takes_turns=takes_turns)

    @property
    def accepts_undecoded(self) -> bool:
        """Whether connectors should submit :class:`Undecoded` bytes: only when workers decode them."""
        return self.decoding.preparer is not None

    def record_type(self, tag: str) -> type | None:
        """The type ``tag``'s records decode as (:mod:`ingest.record_types`), or None; see :class:`Sink`."""
        return record_type_for(self.schemas, tag) if valid_tag(tag) else None

    @property
    def pending_bytes(self) -> int:
        """Bytes received and not yet answered."""
        return self.admission.pending

    # -- life cycle ----------------------------------------------------------------

    def start(self, *, workers: bool = True) -> None:
        """Load the idempotency ledger and start the commit thread, and the decode workers unless ``workers`` is
        False: then :meth:`start_workers` (or the first submission one takes) starts them."""
        loaded = self.ledger.load(self.store)
        if loaded:
            log.info("loaded %d idempotency keys committed in the last %.0f s", loaded, self.ledger.window)
        if workers:
            self.decoding.start()
        self.pipeline.start()

    def start_workers(self) -> None:
        """Start the decode workers (in the background: each imports the decoders and loads the schemas)."""
        self.decoding.start()

    def let_go_of_the_last(self) -> None:
        """After a burst, with nothing submitted for a while: let go of what still holds its last objects,
        the decode pool's threads (:meth:`ingest.decoding.DecodePool.let_go_of_the_last`) and the rows the
        stream writers hold (:meth:`ingest.pipeline.Pipeline.let_go_of_the_held`), so that giving the
        memory back returns them too. Blocks (seconds at most): call it from a thread of its own."""
        self.decoding.let_go_of_the_last()
        self.pipeline.let_go_of_the_held()

    def close(self, timeout: float | None = 30.0) -> None:
        """Commit what is queued, then stop. Later submissions fail with CommitFailed."""
        self.pipeline.close(timeout)
        self.decoding.close()

    # -- submitting (event loop side) ---------------------------------------------------

    async def submit(
        self,
        batches: Sequence[Batch | Undecoded],
        *,
        key: bytes | None = None,
        wait: bool = True,
        record_keys: Sequence[bytes] = (),
    ) -> Receipt:
        """See :meth:`ingest.batch.Sink.submit`.

        ``record_keys`` are idempotency keys committed with the batches but not
        checked first: a connector that gathers many messages into one
        submission (MQTT) records each message's key, so that a later resend of
        one of them, submitted alone under its ``key``, is recognised.
        """
        outcome = (await self._submit([(batches, key)], wait, record_keys))[0]
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    async def submit_many(
        self, items: Sequence[tuple[Sequence[Batch | Undecoded], bytes | None]], *, wait: bool = True
    ) -> list[Receipt | IngestError]:
        """See :meth:`ingest.batch.Sink.submit_many`."""
        return await self._submit(items, wait)

    async def _submit(
        self,
        items: Sequence[tuple[Sequence[Batch | Undecoded], bytes | None]],
        wait: bool,
        record_keys: Sequence[bytes] = (),
    ) -> list[Receipt | IngestError]:
        """Queue each ``(batches, key)`` of ``items`` as a submission of its own (reserving their room
        together, waking the committer once); their receipts or errors, in order."""
        if self.pipeline.closing:
            raise CommitFailed("windvane is shutting down; send again to the restarted service")
        outcomes: list[Any] = [None] * len(items)
        waiting: list[_Waiting] = []
        new: list[tuple[int, int]] = []  # (index, size)
        for i, (batches, key) in enumerate(items):
            if self.dedup.committed(key, streams_of(batches)):
                outcomes[i] = Receipt(0, 0, None, duplicate=True)
                continue
            first = self.dedup.in_flight(key)
            if first is not None:
                waiting.append((i, first.waiter, True))
                continue
            new.append((i, _size(batches)))
        if new:
            await self.admission.reserve(sum(size for _, size in new), wait)
            self._queue(items, new, record_keys, outcomes, waiting)
        await self._await_outcomes(waiting, outcomes)
        return outcomes

    def _queue(
        self,
        items: Sequence[tuple[Sequence[Batch | Undecoded], bytes | None]],
        new: list[tuple[int, int]],
        record_keys: Sequence[bytes],
        outcomes: list[Any],
        waiting: list[_Waiting],
    ) -> None:
        """Queue the ``new`` of ``items`` (their room reserved), starting their preparation ahead."""
        loop = asyncio.get_running_loop()
        queued = []
        for i, size in new:
            batches, key = items[i]
            first = self.dedup.in_flight(key)
            if first is not None:  # the same key earlier in these items, or sent again while we reserved
                self.admission.release(size)
                waiting.append((i, first.waiter, True))
                continue
            item = Submission(batches, key, size, loop.create_future(), record_keys)
            error = self.decoding.prepare_ahead(item)
            if error is not None:
                self.admission.release(size)
                outcomes[i] = error
                continue
            self.dedup.track(item)
            queued.append(item)
            waiting.append((i, item.waiter, False))
        self.decoding.prepare_small_ahead(queued)
        self.pipeline.enqueue(queued)

    async def _await_outcomes(self, waiting: list[_Waiting], outcomes: list[Any]) -> None:
        for i, waiter, resent in waiting:
            try:
                # shield: a client that goes away does not cancel a commit other clients share.
                receipt = await asyncio.shield(waiter)
            except IngestError as exc:
                outcomes[i] = exc
                continue
            if resent:
                self.observer.duplicate()
                receipt = dataclasses.replace(receipt, duplicate=True)
            outcomes[i] = receipt
