"""Group commit: batches from every connection committed together, acknowledged once durable.

:class:`GroupCommitter` is the :class:`~ingest.batch.Sink` connectors submit
to. One thread (database calls never run on an event loop) takes whatever
has queued, validates the lot against the schemas and commits it in one
``arrays.transaction``: each tag's rows to its stream, rejected records to
the tag's quarantine stream, idempotency keys to the ledger. Only then do
the submitters' awaitables resolve. Groups form by themselves under load:
whatever arrives while a commit runs goes into the next one, so a lone
client is answered after one commit and many clients share commits.
``interval`` (seconds, default 0) makes the committer wait that long after
a group's first arrival for more, trading latency for fewer commits.

Commits are pipelined: a second thread writes each group into its
transaction and commits it (uploads, waits for the disk, answers the
submitters) while the committer thread validates the next group and encodes
its chunks ahead (:meth:`arrays.StreamWriter.stage`). What
arrives while that group is encoded waits for the next one rather than
joining it: it would be encoded after the commit before it ends, where
nothing overlaps it (measured: 0.72 of the arrays write throughput for
vibration on SQLite with late arrivals joining, 0.90 without).

Many slow streams make commits whose cost is per stream, not per row:
each stream appended to gets its own log revision. Ten thousand sensors
sending an event a second each would have commits of a row or two per
stream back to back, the commit thread never idle and the event loop
starved of the interpreter lock. So after a *fan-out* commit (at least
:attr:`GroupCommitter.FANOUT_STREAMS` streams, under
:attr:`GroupCommitter.FANOUT_ROWS` rows each on average) the next group
gathers for as long as that commit took (at most
:attr:`GroupCommitter.MAX_LINGER`) before it is taken, and each commit
that is not a fan-out halves that; a lull longer than the wait ends it.
Each stream gets more rows per commit, the commit thread works about half
the time, and what waits already longer (a backlog) is taken at once.

With ``decode_workers`` > 0, submissions of :class:`~ingest.batch.Undecoded`
bytes are decoded and validated in worker processes (:mod:`ingest.prepare`)
as soon as they are submitted, so that work overlaps with the commit of the
group before and leaves the main process's GIL to the event loop and this
thread; groups are then taken in arrival order from the submissions whose
preparation is done. Small ones (see :attr:`GroupCommitter.INLINE_PREPARE_BYTES`),
and all of them without workers, are prepared in this thread, a group's
together (:func:`ingest.prepare.validate_many`).

Memory is bounded: submissions wait (or, with ``wait=False``, raise
:class:`Backpressure`) while ``max_pending_bytes`` are queued. A group that
fails to commit is retried one submission at a time, so a submission that
cannot be stored fails alone and the others are still committed.

Idempotency keys are checked twice: in memory when submitted (the keys
this process committed or read), and, for a group carrying keys, against
the store's ledger while the commit holds the store's commit lock
(:meth:`ingest.ledger.KeyLedger.sync`, which reads nothing unless another
process committed since), so that two services on one store never store
a resent chunk twice.

While commits fail, :attr:`Metrics.failure` says why (``/health`` answers
503); when nothing is queued then, a tiny commit of the time
(:data:`PROBE_KEY`) is tried every ``probe_interval`` seconds, so that
the service reports that the store commits again even with no traffic.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import dataclasses
import json
import logging
import threading
import time
from collections.abc import Sequence
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import Any

from windvane import arrays
from windvane import neostore

from . import streams
from .batch import INVALID_TIME, Batch, Receipt, Undecoded
from .columns import Columns, Rejected, concat_columns
from .config import CommitterConfig
from .errors import Backpressure, CommitFailed, IngestError, UndecodableBatch
from .ledger import KeyLedger
from .metrics import Metrics
from .prepare import INVALID_TAG, Prepared, Preparer, Raised, Validated, prepare_each, valid_tag, validate_many
from .record_types import record_type_for
from .schema import SchemaSet

log = logging.getLogger("windvane.ingest")

__all__ = ["INVALID_TAG", "PROBE_KEY", "GroupCommitter"]

#: What the committer's store check (while commits fail and nothing is queued) writes: the time, as JSON.
PROBE_KEY = "_windvane/ingest/probe"


class _KeysCommitted(IngestError):
    """A key of a group was found committed (by another process) under the commit lock; nothing was written."""


@dataclass(eq=False, slots=True)  # thousands a second (sensors' chunks): slots make them cheaper to make
class _Submission:
    batches: Sequence[Batch | Undecoded]
    key: bytes | None
    size: int
    # The submitter's future, on its event loop: outcomes reach it a group at a time (see _finish).
    waiter: asyncio.Future
    record_keys: Sequence[bytes] = ()  # committed with the batches, never checked (see submit)
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

    @property
    def finished(self) -> bool:
        return self.receipt is not None or self.error is not None

    def ready(self) -> bool:
        """Whether the commit thread can take it without waiting for a worker."""
        return self.prepared is None or self.prepared.done()


@dataclass
class _Group:
    """What one commit writes, gathered from its submissions."""

    rows: dict[str, list[Columns]] = field(default_factory=lambda: collections.defaultdict(list))
    rejected: dict[str, list[Rejected]] = field(default_factory=lambda: collections.defaultdict(list))
    sizes: dict[str, int] = field(default_factory=lambda: collections.defaultdict(int))
    newest: dict[str, int] = field(default_factory=dict)  # per tag, its newest event time (ns) in the group
    receipts: list[tuple[int, int, tuple[str, ...]]] = field(default_factory=list)
    keys: list[bytes] = field(default_factory=list)
    key_write: tuple[tuple[int, int], list[bytes]] | None = None  # the ledger bucket the keys went to, once written
    head: bytes | None = None  # the newest commit when the commit lock was taken, once written
    poisoned: tuple[int, int] = (0, 0)  # (submissions, events) quarantined verbatim (see _salvaged)

    def counts(self) -> tuple[int, int]:
        """(events accepted, events quarantined)."""
        return sum(a for a, _, _ in self.receipts), sum(q for _, q, _ in self.receipts)


@dataclass(eq=False)
class _Handoff:
    """One group handed to the commit thread, and what that thread tells the committer thread of it."""

    group: list[_Submission]
    written: threading.Event = field(default_factory=threading.Event)  # the group is written (or never will be)
    redo: list[_Submission] | None = None  # the commit before failed as a group: these, one by one, first


def _deliver(items: list[_Submission]) -> None:
    """On the submitters' event loop: pass each finished submission's outcome to its waiter."""
    for item in items:
        if item.waiter.done():
            continue
        if item.error is not None:
            item.waiter.set_exception(item.error)
        else:
            item.waiter.set_result(item.receipt)


def _newest(columns: Columns) -> int:
    if columns.newest is not None:
        return columns.newest
    times = columns.columns["time"]
    # One row is the common case (a sensor's chunk): numpy's max costs more than the rest of it.
    return int(times[0]) if len(times) == 1 else int(times.max())


def _store_failure(exc: BaseException) -> bool:
    """Whether ``exc`` says the store could not commit (retrying later may work), rather than that
    something in the submission could not be stored (a bug: retrying the same bytes fails the same way)."""
    if isinstance(exc, (neostore.NeoStoreError, CommitFailed, OSError, MemoryError)):
        return True
    # The database drivers' own errors (sqlite3.Error, mariadb.Error): what they raise is about the
    # database (locked, full, gone), never about the bytes, which neostore binds as opaque values.
    return any(cls.__module__.split(".")[0] in ("sqlite3", "mariadb") for cls in type(exc).__mro__)


def _salvage_reason(exc: BaseException) -> str:
    text = f"windvane could not store this event as it is ({type(exc).__name__}: {exc})"
    return text.encode("utf-8", "backslashreplace").decode("utf-8")[:2000]


def _salvaged(batch: Batch | Undecoded, reason: str) -> Validated:
    """Every event of ``batch`` rejected with ``reason``, verbatim; an :class:`Undecoded` item's bytes as
    one event (they may be what could not be decoded)."""
    tag = batch.tag if valid_tag(batch.tag) else INVALID_TAG
    if isinstance(batch, Undecoded):
        rejected = [Rejected(time.time_ns(), reason, batch.payload, batch.source)]
    else:
        rejected = [Rejected(int(t) if t != INVALID_TIME else time.time_ns(), reason, batch.raw_bytes(i),
                             batch.source) for i, t in enumerate(batch.times)]
    return Validated(tag, batch.size, None, rejected)


class GroupCommitter:
    """Commits submitted batches in groups; see the module docstring."""

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
        probe_interval: float = 5.0,
    ):
        self.store = store
        self.schemas = schemas
        self.interval = interval
        self.max_pending_bytes = max_pending_bytes
        self.max_group_bytes = max_group_bytes
        self.metrics = metrics or Metrics()
        self.probe_interval = probe_interval
        self.ledger = KeyLedger(key_window)
        self._writers = streams.StreamWriters(store)  # kept across commits: no re-reading per commit
        self._queue: collections.deque[_Submission] = collections.deque()
        self._cond = threading.Condition()
        self._pending = 0
        self._room: list[tuple[asyncio.AbstractEventLoop, asyncio.Future]] = []
        self._in_flight: dict[bytes, _Submission] = {}
        self._closing = False
        self._thread: threading.Thread | None = None
        # Commits run here, one at a time, while the committer thread prepares the next group.
        self._commit_thread = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="windvane-commit")
        self._committing: concurrent.futures.Future | None = None
        self._handed: _Handoff | None = None  # the group handed last, until the committer knows it is written
        self._throughput = 50e6  # bytes/s, refined after each commit; sizes Retry-After
        self._linger = 0.0  # seconds the next group gathers after a fan-out commit (see the module docstring)
        self._taken = 0.0  # when the last group was taken (time.monotonic)
        self._preparer = Preparer(schemas, decode_workers) if decode_workers > 0 else None
        self._tracebacks: dict[str, float] = {}  # kind of internal error -> when its traceback was last logged

    @property
    def accepts_undecoded(self) -> bool:
        """Whether connectors should submit :class:`Undecoded` bytes: only when workers decode them."""
        return self._preparer is not None

    def record_type(self, tag: str) -> type | None:
        """The type ``tag``'s records decode as (:mod:`ingest.record_types`), or None; see :class:`Sink`."""
        return record_type_for(self.schemas, tag) if valid_tag(tag) else None

    # -- life cycle ----------------------------------------------------------------

    def start(self) -> None:
        """Load the idempotency ledger and start the commit thread."""
        loaded = self.ledger.load(self.store)
        if loaded:
            log.info("loaded %d idempotency keys committed in the last %.0f s", loaded, self.ledger.window)
        if self._preparer is not None:
            self._preparer.start()
        self._thread = threading.Thread(target=self._run, name="windvane-committer", daemon=True)
        self._thread.start()

    def close(self, timeout: float | None = 30.0) -> None:
        """Commit what is queued, then stop. Later submissions fail with CommitFailed."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)
        self._commit_thread.shutdown(wait=self._thread is None or not self._thread.is_alive())
        if self._preparer is not None:
            self._preparer.close()

    #: See "many slow streams" in the module docstring.
    FANOUT_STREAMS = 1000
    FANOUT_ROWS = 4
    MAX_LINGER = 5.0

    #: Undecoded submissions smaller than this are prepared by the committer thread, not a worker: a
    #: round trip to a worker process costs more than decoding a few events (many slow sensors send
    #: one event per chunk), and the committer validates a group's small ones together.
    INLINE_PREPARE_BYTES = 32 * 1024
    #: ... unless one call submits at least this many, this many bytes between them: they then go to a
    #: worker together, in one round trip. (Sensors' one-event chunks, thousands a second, stay here:
    #: through the workers, their round trips and results held the main process's GIL longer than
    #: validating them together takes.)
    BATCH_PREPARE_MIN = 8

    @property
    def pending_bytes(self) -> int:
        return self._pending

    # -- submitting (event loop side) ---------------------------------------------------

    async def submit(self, batches: Sequence[Batch | Undecoded], *, key: bytes | None = None, wait: bool = True,
                     record_keys: Sequence[bytes] = ()) -> Receipt:
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

    async def submit_many(self, items: Sequence[tuple[Sequence[Batch | Undecoded], bytes | None]], *,
                          wait: bool = True) -> list[Receipt | IngestError]:
        """See :meth:`ingest.batch.Sink.submit_many`."""
        return await self._submit(items, wait)

    async def _submit(self, items: Sequence[tuple[Sequence[Batch | Undecoded], bytes | None]], wait: bool,
                      record_keys: Sequence[bytes] = ()) -> list[Receipt | IngestError]:
        """Queue each ``(batches, key)`` of ``items`` as a submission of its own (reserving their room
        together, waking the committer once); their receipts or errors, in order."""
        if self._closing:
            raise CommitFailed("windvane is shutting down; send again to the restarted service")
        outcomes: list[Any] = [None] * len(items)
        waiting: list[tuple[int, asyncio.Future, bool]] = []  # (index, waiter, a resend of one in flight)
        new: list[tuple[int, int]] = []  # (index, size)
        for i, (batches, key) in enumerate(items):
            if key is not None:
                if key in self.ledger:
                    self.metrics.record_duplicate()
                    outcomes[i] = Receipt(0, 0, None, duplicate=True)
                    continue
                first = self._in_flight.get(key)
                if first is not None:
                    waiting.append((i, first.waiter, True))
                    continue
            new.append((i, sum(b.size or (len(b.payload) if isinstance(b, Undecoded) else 64 * len(b))
                               for b in batches)))
        if new:
            await self._reserve(sum(size for _, size in new), wait)
            loop = asyncio.get_running_loop()
            queued = []
            small: list[tuple[_Submission, list[Undecoded]]] = []  # prepared together, if there are enough
            for i, size in new:
                batches, key = items[i]
                first = self._in_flight.get(key) if key is not None else None
                if first is not None:  # the same key earlier in these items, or sent again while we reserved
                    self._release(size)
                    waiting.append((i, first.waiter, True))
                    continue
                item = _Submission(batches, key, size, loop.create_future(), record_keys)
                undecoded = [b for b in batches if isinstance(b, Undecoded)]
                if (undecoded and self._preparer is not None
                        and sum(len(b.payload) for b in undecoded) >= self.INLINE_PREPARE_BYTES):
                    try:
                        item.prepared = self._preparer.submit(undecoded)  # starts now: overlaps the commit running
                    except (RuntimeError, BrokenProcessPool) as exc:
                        self._release(size)
                        outcomes[i] = CommitFailed(f"the decode workers are unavailable ({exc}); nothing was stored")
                        continue
                elif undecoded and self._preparer is not None:
                    small.append((item, undecoded))
                if key is not None:
                    self._in_flight[key] = item
                queued.append(item)
                waiting.append((i, item.waiter, False))
            if (len(small) >= self.BATCH_PREPARE_MIN
                    and sum(len(b.payload) for _, undecoded in small for b in undecoded) >= self.INLINE_PREPARE_BYTES):
                assert self._preparer is not None
                try:
                    shares = self._preparer.submit_each([undecoded for _, undecoded in small])
                except (RuntimeError, BrokenProcessPool):
                    pass  # prepared in the commit thread, as if they were few
                else:
                    for (item, _), prepared in zip(small, shares):
                        item.prepared = prepared
            with self._cond:
                self._queue.extend(queued)
                self._cond.notify()
        for i, waiter, resent in waiting:
            try:
                # shield: a client that goes away does not cancel a commit other clients share.
                receipt = await asyncio.shield(waiter)
            except IngestError as exc:
                outcomes[i] = exc
                continue
            if resent:
                self.metrics.record_duplicate()
                receipt = dataclasses.replace(receipt, duplicate=True)
            outcomes[i] = receipt
        return outcomes

    async def _reserve(self, size: int, wait: bool) -> None:
        loop = asyncio.get_running_loop()
        while True:
            with self._cond:
                # A submission larger than the whole budget still goes through, alone.
                if self._pending == 0 or self._pending + size <= self.max_pending_bytes:
                    self._pending += size
                    self.metrics.pending_bytes = self._pending
                    return
                if not wait:
                    retry = max(1.0, self._pending / self._throughput)
                    raise Backpressure(
                        f"{self._pending} bytes are waiting to be committed (limit {self.max_pending_bytes}); "
                        f"the store is behind", retry_after=retry)
                room = loop.create_future()
                self._room.append((loop, room))
            await room

    def _release(self, size: int) -> None:
        with self._cond:
            self._pending -= size
            self.metrics.pending_bytes = self._pending
            waiting, self._room = self._room, []
        for loop, room in waiting:
            loop.call_soon_threadsafe(lambda r=room: r.done() or r.set_result(None))

    # -- committing (committer thread) ---------------------------------------------------

    def _run(self) -> None:
        while True:
            probe = False
            with self._cond:
                while not self._queue and not self._closing and not self._commit_ended():
                    # While commits fail, an idle wait ends in a probe commit (see the module docstring).
                    if not self._cond.wait(self.probe_interval if self.metrics.failure is not None else None):
                        probe = True
                        break
                first = self._queue[0] if self._queue else None  # only this thread pops: it stays first
            if first is None:
                if self._closing and not self._commit_ended():
                    break
                self._settle()  # a commit ended while nothing waits: retry it now if it failed as a group
                if probe and self.metrics.failure is not None:
                    self._probe()
                continue
            if first.queued - self._taken > self._linger:
                self._linger = 0.0  # a lull: whoever comes first after it is not kept waiting
            delay = first.queued + max(self.interval, self._linger) - time.monotonic()
            if delay > 0 and not self._closing:
                time.sleep(delay)
            if first.prepared is not None:
                first.prepared.wait()
            if self._linger and not self._closing:
                self._await_prepared(time.monotonic() + self._linger / 2)
            self._taken = time.monotonic()
            group = self._take()
            try:
                group = self._collect(group)
                if group:
                    self._commit(group)
            except BaseException as exc:  # the thread must outlive anything a group does
                log.critical("the committer failed unexpectedly: %r", exc, exc_info=True)
                self.metrics.record_failure(f"the committer failed unexpectedly: {exc!r}")
                self._finish([i for i in group if not i.finished],
                             error=CommitFailed(f"the committer failed unexpectedly: {exc!r}"))
        self._settle()

    def _await_prepared(self, deadline: float) -> None:
        """Wait (until ``deadline``, a monotonic time) for the workers to prepare what is queued: after a
        fan-out commit the group was left to gather, and a submission still being prepared would end it."""
        with self._cond:
            futures = {id(i.prepared.future): i.prepared for i in self._queue
                       if i.prepared is not None and not i.prepared.done()}
        for prepared in futures.values():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            prepared.wait(remaining)

    def _take(self, size: int | None = None) -> list[_Submission]:
        """Queued submissions in arrival order, up to ``max_group_bytes`` (counting ``size`` taken
        already; None: a new group, which takes its first submission whatever its size) and up to the
        first still being prepared: it joins the next group."""
        group: list[_Submission] = []
        with self._cond:
            if size is None and self._queue:
                group.append(self._queue.popleft())
                size = group[0].size
            while (self._queue and size + self._queue[0].size <= self.max_group_bytes
                   and self._queue[0].ready()):
                item = self._queue.popleft()
                group.append(item)
                size += item.size
        return group

    def _collect(self, group: list[_Submission]) -> list[_Submission]:
        """The submissions of ``group`` whose Undecoded items are prepared; the others are failed here."""
        out = []
        undecoded = {id(item): [b for b in item.batches if isinstance(b, Undecoded)] for item in group}
        # Those left to this thread (small, or no workers) are prepared together (see validate_many).
        inline = [item for item in group if item.prepared is None and undecoded[id(item)]]
        here = dict(zip(map(id, inline), prepare_each(self.schemas, [undecoded[id(item)] for item in inline])))
        for item in group:
            if not undecoded[id(item)]:
                out.append(item)
                continue
            error: Exception
            try:
                result = here[id(item)] if item.prepared is None else item.prepared.result()
                if isinstance(result, Raised):
                    raise result.error
            except BrokenProcessPool as exc:
                assert self._preparer is not None
                self._preparer.broken()
                error = CommitFailed(f"a decode worker died while preparing this submission ({exc}); "
                                     f"nothing of it was stored: send it again")
            except concurrent.futures.CancelledError as exc:  # a pool replacement cancelled it
                error = CommitFailed(f"preparing this submission was cancelled ({exc!r}); nothing of it was stored")
            except Exception as exc:  # noqa: BLE001 - a bug in decoding or validating: its records are kept
                self._internal_error("preparing", exc)
                item.salvage = _salvage_reason(exc)
                out.append(item)
                continue
            else:
                if not isinstance(result, UndecodableBatch):
                    item.validated = result
                    out.append(item)
                    continue
                error = result
            self._finish([item], error=error)
        return out

    def _commit(self, group: list[_Submission]) -> None:
        """Validate and encode ``group`` here, then hand it to the commit thread, which writes it into a
        transaction as soon as the commit before ends and commits it; returns once it is handed.

        Validating overlaps the writing of the group handed before, and
        encoding overlaps its commit (the encoding builds on its rows, so it
        waits until they are written). The commit thread goes from one
        commit straight to writing the next group: handing that over to this
        thread would leave the database idle while it wakes.
        """
        group = self._drop_committed(group)
        if not group:
            return
        started = time.perf_counter()
        try:
            gathered = self._gather(group)
        except Exception as exc:  # noqa: BLE001 - every failure is reported to its submitters
            self._settle()
            self._retry(self._failed(group, exc))
            return
        self._await_written()
        # Between commits: the writers of the group before may be committing still.
        self._writers.trim_if_due(sum(item.size for item in group))
        try:
            staged = {tag: streams.stage(self._writers, tag, self._rows(tag, parts))
                      for tag, parts in gathered.rows.items()}
        except Exception as exc:  # noqa: BLE001 - every failure is reported to its submitters
            self._settle()
            self._retry(self._failed(group, exc))
            return
        handoff = _Handoff(group)
        before = self._committing
        self._committing = self._commit_thread.submit(
            self._write_and_commit, group, gathered, staged, before, handoff, started)
        self._committing.add_done_callback(self._wake)
        self._handed = handoff

    def _await_written(self) -> None:
        """Wait until the group handed last is written: what is encoded next builds on its rows. If the
        commit before it failed as a group (so it was not written), retry that one by one, then it."""
        while self._handed is not None:
            handoff, self._handed = self._handed, None
            handoff.written.wait()
            if handoff.redo is not None:
                self._committing = None
                self._retry(handoff.redo)
                self._commit(handoff.group)

    def _rows(self, tag: str, parts: list[Columns]) -> dict[str, Any] | list[dict[str, Any]]:
        """What one append of ``parts`` to ``tag``'s stream takes: vibration blocks are large arrays, passed
        as they are (concatenating them would copy every byte once more); table columns are merged (their
        lists of strings chain cheaply, and one part of many rows encodes each chunk once)."""
        if self.schemas.for_tag(tag).kind == "vibration":
            return [p.columns for p in parts]
        return concat_columns([p.columns for p in parts])

    def _commit_ended(self) -> bool:
        """Whether the commit handed to the commit thread last has ended and is not settled yet."""
        future = self._committing
        return future is not None and future.done()

    def _wake(self, _future: concurrent.futures.Future) -> None:
        with self._cond:
            self._cond.notify_all()

    def _settle(self) -> None:
        """Wait for the commit in flight; if it failed as a group, commit its submissions one by one."""
        self._await_written()
        future, self._committing = self._committing, None
        if future is not None:
            self._retry(future.result())

    def _retry(self, group: list[_Submission]) -> None:
        for item in group:
            self._commit([item])
            self._settle()

    def _drop_committed(self, group: list[_Submission]) -> list[_Submission]:
        """``group`` without the submissions whose key is committed already (each answered as a duplicate).

        Keys reach the ledger while their submissions wait when the ledger
        read them from the store (another process committed them, or a
        commit of ours whose outcome the store could not learn did).
        """
        if not any(item.key is not None and item.key in self.ledger for item in group):
            return group
        done = [item for item in group if item.key is not None and item.key in self.ledger]
        for item in done:
            self.metrics.record_duplicate()
        self._finish(done, receipts=[Receipt(0, 0, None, duplicate=True)] * len(done))
        return [item for item in group if item not in done]

    def _probe(self) -> None:
        """While commits fail and nothing is queued: commit the time alone, so that a store that commits
        again is noticed (and reported healthy) without traffic; one that does not keeps its reason."""
        tx = arrays.Transaction(self.store, message="ingest: store check after failed commits",
                                user="windvane-ingest")
        try:
            head = tx.head()
            tx.set(PROBE_KEY, json.dumps({"time": time.time()}).encode())
            tid = tx.commit()
        except Exception as exc:  # noqa: BLE001 - the store still cannot commit: say why, try again later
            tx.abort()
            self.metrics.record_failure(f"the store could not commit: {exc}", count=False)
            log.warning("the store still cannot commit: %s", exc)
            return
        self.ledger.advanced(tid, head)
        self.metrics.record_recovery()
        log.warning("the store commits again")

    def _internal_error(self, what: str, exc: BaseException) -> None:
        """Log a bug with its traceback (once a minute per kind, so a stream of poisoned input cannot flood
        the log) and count it."""
        self.metrics.record_internal_error()
        kind = f"{what}:{type(exc).__name__}"
        now = time.monotonic()
        if now - self._tracebacks.get(kind, -60.0) >= 60.0:
            self._tracebacks[kind] = now
            log.error("internal error while %s a submission; its events go to quarantine: %r", what, exc,
                      exc_info=exc)
        else:
            log.error("internal error while %s a submission; its events go to quarantine: %r", what, exc)

    def _failed(self, group: list[_Submission], exc: Exception) -> list[_Submission]:
        """Report a failed commit: the submissions to retry one by one, or none (each has its error).

        A lone submission that failed for a reason other than the store
        (:func:`_store_failure`) is retried once with every event sent to
        quarantine verbatim, so that its sender is answered and not left
        resending it for ever; if that fails too, the store is at fault.
        """
        if isinstance(exc, neostore.CommitOutcomeUnknown):
            # Retrying could store the group twice: its senders resend, and the ledger,
            # read from the store under the next keyed commit's lock, recognises keyed resends.
            self.metrics.record_failure(str(exc))
            log.error("commit failed, nothing acknowledged: %s", exc)
            self._finish(group, error=CommitFailed(f"{exc}; nothing was acknowledged, send again"))
            return []
        if len(group) > 1:
            log.warning("a group of %d submissions failed to commit (%s); committing them one by one",
                        len(group), exc)
            return group
        item = group[0]
        if item.salvage is None and not _store_failure(exc):
            self._internal_error("storing", exc)
            item.salvage = _salvage_reason(exc)
            return group
        self.metrics.record_failure(f"the store could not commit: {exc}")
        log.error("commit failed, nothing acknowledged: %s", exc, exc_info=not _store_failure(exc))
        self._finish(group, error=CommitFailed(f"the store could not commit: {exc}"))
        return []

    def _gather(self, group: list[_Submission]) -> _Group:
        out = _Group()
        # Batches decoded already (no workers, or a connector that decodes) are validated together.
        validated = iter(validate_many(self.schemas, [batch for item in group if item.salvage is None
                                                      for batch in item.batches if not isinstance(batch, Undecoded)]))
        for item in group:
            accepted = quarantined = 0
            reasons: dict[str, None] = {}
            prepared = iter(item.validated or ())
            for batch in item.batches:
                if item.salvage is not None:
                    parts = [_salvaged(batch, item.salvage)]
                else:
                    parts = next(prepared) if isinstance(batch, Undecoded) else [next(validated)]
                for part in parts:
                    if part.columns is not None:
                        out.rows[part.tag].append(part.columns)
                        accepted += part.columns.rows
                        out.sizes[part.tag] += part.size
                        if part.columns.rows:
                            newest = _newest(part.columns)
                            if newest > out.newest.get(part.tag, 0):
                                out.newest[part.tag] = newest
                    if part.rejected:
                        tag = part.tag if valid_tag(part.tag) else INVALID_TAG
                        out.rejected[tag].extend(part.rejected)
                        quarantined += len(part.rejected)
                        reasons.update(dict.fromkeys(r.reason for r in part.rejected[:16]))
            out.receipts.append((accepted, quarantined, tuple(reasons)[:8]))
            if item.salvage is not None:
                out.poisoned = (out.poisoned[0] + 1, out.poisoned[1] + quarantined)
            if item.key is not None:
                out.keys.append(item.key)
            out.keys.extend(item.record_keys)
        return out

    def _write(self, group: list[_Submission], gathered: _Group,
               staged: dict[str, arrays.Staged]) -> arrays.Transaction | None:
        """A transaction holding what ``gathered`` (of ``group``) stores (None if it stores nothing), not
        yet committed; :class:`_KeysCommitted` (nothing written) if a key of ``group`` is committed already.

        ``staged``: per tag, the staged append of its rows.
        """
        if not (gathered.rows or gathered.rejected or gathered.keys):
            return None
        events, rejects = gathered.counts()
        tx = arrays.Transaction(self.store, message=f"ingest: {events} events, {rejects} quarantined",
                                metadata={"events": events, "quarantined": rejects,
                                          "submissions": len(gathered.receipts)},
                                user="windvane-ingest")
        try:
            # The commit lock, held from here to the commit: what the ledger reads stays the latest.
            gathered.head = tx.head()
            if gathered.keys:
                self.ledger.sync(self.store, gathered.head)
                # Also keys read by an earlier group's sync, after this group was checked in memory.
                if any(item.key is not None and item.key in self.ledger for item in group):
                    raise _KeysCommitted()
            schemas = {tag: self.schemas.for_tag(tag) for tag in staged}
            streams.ready_unknown(tx, self._writers, schemas)
            for tag, append in staged.items():
                streams.write(tx, self._writers, tag, schemas[tag], append)
            for tag, rejected in gathered.rejected.items():
                streams.quarantine(tx, self._writers, tag, rejected)
            if gathered.keys:
                name, value, where, bucket = self.ledger.to_write(gathered.keys, gathered.head)
                # raw: no array's row log covers the ledger's names (under _windvane/), so there is none
                # to look for: on MariaDB that look was a round trip in every keyed commit.
                tx.set(name, value, raw=True)
                gathered.key_write = (where, bucket)
        except BaseException:
            tx.abort()
            raise
        return tx

    def _write_and_commit(self, group: list[_Submission], gathered: _Group, staged: dict[str, arrays.Staged],
                          before: concurrent.futures.Future | None, handoff: _Handoff,
                          started: float) -> list[_Submission]:
        """In the commit thread: write ``group`` (then set ``handoff.written``), commit it, answer its
        submitters; returns the submissions to retry one by one.

        ``before``: the commit before, done (this thread ran it). If it failed
        as a group, nothing is written: ``handoff.redo`` tells the committer
        thread to retry it, then this group.
        """
        try:
            redo = before.result() if before is not None else []
            if redo:
                handoff.redo = redo
                return []
            begun = time.monotonic()
            try:
                tx = self._write(group, gathered, staged)
            except _KeysCommitted:
                return group  # committed already, some of them (by another process): sorted out one by one
            except Exception as exc:  # noqa: BLE001 - reported to the submitters
                return self._failed(group, exc)
            finally:
                handoff.written.set()
            if tx is not None:
                try:
                    tx.commit()
                except Exception as exc:  # noqa: BLE001 - reported to the submitters
                    return self._failed(group, exc)
            self._linger = self._linger_after(gathered, time.monotonic() - begun)
            self._done(group, gathered, None if tx is None else tx.tid, started)
        except BaseException as exc:  # this thread must outlive anything a group does
            log.critical("the commit thread failed unexpectedly: %r", exc, exc_info=True)
            self.metrics.record_failure(f"the committer failed unexpectedly: {exc!r}")
            self._finish([i for i in group if not i.finished],
                         error=CommitFailed(f"the committer failed unexpectedly: {exc!r}"))
        finally:
            handoff.written.set()
        return []

    def _linger_after(self, gathered: _Group, seconds: float) -> float:
        """How long the next group gathers after ``gathered`` was written and committed in ``seconds``."""
        streams = len(gathered.rows)
        if streams >= self.FANOUT_STREAMS:
            rows = sum(part.rows for parts in gathered.rows.values() for part in parts)
            if rows < self.FANOUT_ROWS * streams:
                return min(seconds, self.MAX_LINGER)
        # Halved, not dropped: one small group between fan-out ones (a lull, a slow worker) must not
        # bring back commits of a row per stream.
        return self._linger / 2 if self._linger > 0.01 else 0.0

    def _done(self, group: list[_Submission], gathered: _Group, tid: bytes | None, started: float) -> None:
        """``group`` is committed (in ``tid``; None: it stored nothing): record it, answer the submitters."""
        if gathered.key_write is not None:
            self.ledger.committed(*gathered.key_write, gathered.keys, tid, gathered.head)
        elif tid is not None and gathered.head is not None:
            self.ledger.advanced(tid, gathered.head)
        seconds = time.perf_counter() - started
        size = sum(item.size for item in group)
        if seconds > 0 and size > 1 << 20:
            self._throughput = 0.8 * self._throughput + 0.2 * (size / seconds)
        per_tag = {}
        for tag in set(gathered.rows) | set(gathered.rejected):
            parts = gathered.rows.get(tag, [])
            per_tag[tag] = (sum(p.rows for p in parts), gathered.sizes.get(tag, 0),
                            len(gathered.rejected.get(tag, ())), gathered.newest.get(tag, 0))
        if tid is not None:  # a group that stored nothing made no commit: it says nothing of the store
            self.metrics.record_commit(per_tag, seconds, poisoned=gathered.poisoned)
        for tag, rejected in gathered.rejected.items():
            # Quarantined records are kept, not lost, but the sender should hear of them.
            log.warning("quarantined %d event(s) of tag %r in commit %s: %s%s", len(rejected), tag,
                        tid.hex() if tid else "-", rejected[0].reason,
                        f" (and {len(rejected) - 1} more)" if len(rejected) > 1 else "")
        self._finish(group, receipts=[Receipt(a, q, tid, reasons=r) for a, q, r in gathered.receipts])

    def _finish(self, group: list[_Submission], *, receipts: list[Receipt] | None = None,
                error: Exception | None = None) -> None:
        for i, item in enumerate(group):
            if item.key is not None and self._in_flight.get(item.key) is item:
                del self._in_flight[item.key]
            item.receipt, item.error = (None, error) if error is not None else (receipts[i], None)
            self._release(item.size)
        # One wake-up of each event loop for the whole group, not one per submission.
        by_loop: dict[asyncio.AbstractEventLoop, list[_Submission]] = collections.defaultdict(list)
        for item in group:
            by_loop[item.waiter.get_loop()].append(item)
        for loop, items in by_loop.items():
            try:
                loop.call_soon_threadsafe(_deliver, items)
            except RuntimeError:
                pass  # the loop is closed: nobody waits any more
