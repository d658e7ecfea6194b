"""The committer's two threads: one takes and prepares groups, the other writes and commits them.

One thread (database calls never run on an event loop) takes whatever has
queued, validates the lot and encodes its chunks ahead; a second thread
writes each group into its transaction and commits it (uploads, waits for
the disk, answers the submitters) meanwhile. What arrives while a group is
encoded waits for the next one rather than joining it: it would be encoded
after the commit before it ends, where nothing overlaps it (measured: 0.72
of the arrays write throughput for vibration on SQLite with late arrivals
joining, 0.90 without).

A committer that *takes turns* with others at the store's commit lock (a
server's workers, each a process with a pipeline of its own) takes,
validates and encodes its next group once its commit has ended instead:
doing so meanwhile would compete for the process's interpreter lock with
the commit, which holds the store's commit lock longer and keeps the other
workers waiting. Done after, it overlaps their commits, and the group holds
all that came during its own.

A round of such committers lasts as long as their commits, and each
commit's length follows the round before it (what came meanwhile). While
the commit lock's cost of what arrives in a second is under a second, each
round is shorter than the one before, so a backlog (the first minute's new
streams, a slow disk) drains. A committer that takes turns therefore never
lingers (below): a linger as long as the last commit would make each round
as long as the last, and a backlog would stay for good.

Many slow streams make commits whose cost is per stream, not per row: each
stream appended to gets its own log revision. So after a *fan-out* commit
(at least :attr:`Pipeline.FANOUT_STREAMS` streams, under
:attr:`Pipeline.FANOUT_ROWS` rows each on average) that took longer than
:attr:`Pipeline.LINGER_ABOVE`, the next group gathers for as long as that
commit took (at most :attr:`Pipeline.MAX_LINGER`) before it is taken, and
each commit that is not one halves that; a lull longer than the wait ends
it. A fan-out commit quicker than that leaves the committer time to spare
(another worker of the server shares the streams, or they are few): waiting
would only delay the acks.

No commit of the pipeline's own tells whether commits fail: a full disk
can take a tiny commit and still fail the work that failed. Only that
work, sent again and committed, clears its failure (see :mod:`ingest.metrics`).
"""

from __future__ import annotations

import collections
import concurrent.futures
import logging
import threading
import time
from dataclasses import dataclass

from windvane import arrays

from .admission import Admission
from .batch import Receipt
from .decoding import DecodePool
from .dedup import Dedup
from .observer import CommitObserver
from .retries import Retries
from .staging import Group, GroupWriter, KeysCommitted, gather
from .submission import Handoff, Outcomes, Submission

log = logging.getLogger("windvane.ingest")


@dataclass
class Parts:
    """The committer's parts the pipeline drives."""

    writer: GroupWriter
    decoding: DecodePool
    dedup: Dedup
    admission: Admission
    outcomes: Outcomes
    retries: Retries
    observer: CommitObserver


class Pipeline:
    """The queue of submissions and the two threads that commit it, in groups of at most
    ``max_group_bytes``, each gathering ``interval`` seconds after its first arrival."""

    #: See "many slow streams" in the module docstring.
    FANOUT_STREAMS = 1000
    FANOUT_ROWS = 4
    MAX_LINGER = 5.0
    #: A commit this quick keeps acks within a second (an event waits for at most the commit under way
    #: and its own), so it is no reason to gather longer.
    LINGER_ABOVE = 0.5

    def __init__(self, parts: Parts, *, interval: float, max_group_bytes: int, takes_turns: bool = False):
        self.parts = parts
        self.interval = interval
        self.max_group_bytes = max_group_bytes
        self.takes_turns = takes_turns  # see the module docstring
        self.queue: collections.deque[Submission] = collections.deque()
        self.closing = False
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        # Commits run here, one at a time, while the committer thread prepares the next group.
        self._commit_thread = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="windvane-commit")
        self._committing: concurrent.futures.Future[list[Submission]] | None = None
        self._handed: Handoff | None = None  # the group handed last, until the committer knows it is written
        self.linger = 0.0  # seconds the next group gathers after a fan-out commit (see the module docstring)
        self._taken = 0.0  # when the last group was taken (time.monotonic)
        self._let_go: threading.Event | None = None  # asked by let_go_of_the_held, set once done

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="windvane-committer", daemon=True)
        self._thread.start()

    def close(self, timeout: float | None) -> None:
        """Commit what is queued, then stop."""
        with self._cond:
            self.closing = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)
        self._commit_thread.shutdown(wait=self._thread is None or not self._thread.is_alive())

    def let_go_of_the_held(self, timeout: float = 10.0) -> None:
        """Have the committer thread, once no commit is under way, let go of the rows the stream writers
        hold (:meth:`ingest.staging.GroupWriter.let_go`), and wait for it at most ``timeout`` seconds: for
        a service idle after a burst, whose streams' row logs keep those rows."""
        done = threading.Event()
        with self._cond:
            if self.closing or self._thread is None:
                return
            self._let_go = done
            self._cond.notify_all()
        done.wait(timeout)

    def _let_go_if_asked(self) -> None:
        with self._cond:
            done, self._let_go = self._let_go, None
        if done is not None:
            try:
                self.parts.writer.let_go()
            finally:
                done.set()

    def enqueue(self, items: list[Submission]) -> None:
        with self._cond:
            self.queue.extend(items)
            self._cond.notify()

    # -- the committer thread ----------------------------------------------------------

    def _run(self) -> None:
        while True:
            first = self._next()
            if first is None:
                if self.closing and not self._commit_ended():
                    break
                self._settle()  # a commit ended while nothing waits: retry it now if it failed as a group
                self._checkpoint_idle()
                self._let_go_if_asked()
                continue
            self._gather_wait(first)
            self._await_turn()
            self._taken = time.monotonic()
            group = self._take()
            try:
                group = self.parts.decoding.collect(group)
                if group:
                    self._commit(group)
            except BaseException as exc:  # noqa: BLE001 - the thread must outlive anything a group does
                self.parts.retries.crashed(group, exc)
            # Not kept while this thread waits for the next: after a burst, the last group's bytes and
            # columns would stay alive until more comes.
            del first, group
        self._settle()

    def _next(self) -> Submission | None:
        """Wait for a submission or an ended commit: the first queued, if any."""
        with self._cond:
            while not self.queue and not self.closing and not self._commit_ended() and self._let_go is None:
                self._cond.wait()
            return self.queue[0] if self.queue else None  # only this thread pops: it stays first

    def _gather_wait(self, first: Submission) -> None:
        """Let the group that ``first`` begins gather (``interval``, or the linger after a fan-out)."""
        if first.queued - self._taken > self.linger:
            self.linger = 0.0  # a lull: whoever comes first after it is not kept waiting
        delay = first.queued + max(self.interval, self.linger) - time.monotonic()
        if delay > 0 and not self.closing:
            time.sleep(delay)
        if first.prepared is not None:
            first.prepared.wait()
        if self.linger and not self.closing:
            self._await_prepared(time.monotonic() + self.linger / 2)

    def _await_prepared(self, deadline: float) -> None:
        """Wait (until ``deadline``, a monotonic time) for the workers to prepare what is queued: after a
        fan-out commit the group was left to gather, and a submission still being prepared would end it."""
        with self._cond:
            futures = {
                id(i.prepared.future): i.prepared
                for i in self.queue
                if i.prepared is not None and not i.prepared.done()
            }
        for prepared in futures.values():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            prepared.wait(remaining)

    def _take(self) -> list[Submission]:
        """Queued submissions in arrival order, up to ``max_group_bytes`` (the first whatever its size) and
        up to the first still being prepared: it joins the next group."""
        group: list[Submission] = []
        with self._cond:
            if not self.queue:
                return group
            group.append(self.queue.popleft())
            size = group[0].size
            while self.queue and size + self.queue[0].size <= self.max_group_bytes and self.queue[0].ready():
                item = self.queue.popleft()
                group.append(item)
                size += item.size
        return group

    def _commit(self, group: list[Submission]) -> None:
        """Validate and encode ``group`` here, then hand it to the commit thread, which writes it into a
        transaction as soon as the commit before ends and commits it; returns once it is handed.

        Validating overlaps the writing of the group handed before, and
        encoding overlaps its commit (the encoding builds on its rows, so it
        waits until they are written), unless the pipeline takes turns with
        other committers (see the module docstring). The commit thread goes from one
        commit straight to writing the next group: handing that over to this
        thread would leave the database idle while it wakes.
        """
        group = self.parts.dedup.drop_committed(
            group, lambda done, receipts: self.parts.outcomes.finish(done, receipts=receipts)
        )
        if not group:
            return
        started = time.perf_counter()
        try:
            gathered = gather(self.parts.writer.schemas, group)
        except Exception as exc:  # noqa: BLE001 - every failure is reported to its submitters
            self._failed(group, exc)
            return
        self._await_written()
        self._await_turn()
        try:
            staged = self.parts.writer.stage(gathered, sum(item.size for item in group))
        except Exception as exc:  # noqa: BLE001 - every failure is reported to its submitters
            self._failed(group, exc)
            return
        handoff = Handoff(group)
        before = self._committing
        self._committing = self._commit_thread.submit(
            self._write_and_commit, group, gathered, staged, before, handoff, started
        )
        self._committing.add_done_callback(self._wake)
        self._handed = handoff

    def _await_turn(self) -> None:
        """A pipeline that takes turns waits for its commit in flight to end before it takes, prepares or
        encodes the next group (see the module docstring)."""
        if self.takes_turns and self._committing is not None:
            concurrent.futures.wait([self._committing])

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

    def _commit_ended(self) -> bool:
        """Whether the commit handed to the commit thread last has ended and is not settled yet."""
        future = self._committing
        return future is not None and future.done()

    def _wake(self, _future: concurrent.futures.Future[list[Submission]]) -> None:
        with self._cond:
            self._cond.notify_all()

    def _settle(self) -> None:
        """Wait for the commit in flight; if it failed as a group, commit its submissions one by one."""
        self._await_written()
        future, self._committing = self._committing, None
        if future is not None:
            self._retry(future.result())

    def _checkpoint_idle(self) -> None:
        """No commit is under way: if nothing is queued either, let the store bound its log
        (:meth:`neostore.Store.checkpoint_idle`), which it does only while no one commits."""
        with self._cond:
            if self.queue or self.closing:
                return
        try:
            self.parts.writer.store.checkpoint_idle()
        except Exception as exc:  # noqa: BLE001 - the log then stays as it is until the next idle moment
            log.warning("the store's log could not be checkpointed while idle: %s", exc)

    def _failed(self, group: list[Submission], exc: Exception) -> None:
        """Preparing ``group`` failed: once the commit in flight is settled, retry it one by one or fail it."""
        self._settle()
        self._retry(self.parts.retries.failed(group, exc))

    def _retry(self, group: list[Submission]) -> None:
        for item in group:
            self._commit([item])
            self._settle()

    # -- the commit thread -------------------------------------------------------------

    def _write_and_commit(
        self,
        group: list[Submission],
        gathered: Group,
        staged: dict[str, arrays.Staged],
        before: concurrent.futures.Future[list[Submission]] | None,
        handoff: Handoff,
        started: float,
    ) -> list[Submission]:
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
            return self._write_then_commit(group, gathered, staged, handoff, started)
        except BaseException as exc:  # noqa: BLE001 - this thread must outlive anything a group does
            self.parts.retries.crashed(group, exc, thread="commit thread")
        finally:
            handoff.written.set()
        return []

    def _write_then_commit(
        self,
        group: list[Submission],
        gathered: Group,
        staged: dict[str, arrays.Staged],
        handoff: Handoff,
        started: float,
    ) -> list[Submission]:
        begun = time.monotonic()
        try:
            tx = self.parts.writer.write(group, gathered, staged)
        except KeysCommitted:
            return group  # committed already, some of them (by another process): sorted out one by one
        except Exception as exc:  # noqa: BLE001 - reported to the submitters
            return self.parts.retries.failed(group, exc)
        finally:
            handoff.written.set()
        if tx is not None:
            try:
                tx.commit()
            except Exception as exc:  # noqa: BLE001 - reported to the submitters
                return self.parts.retries.failed(group, exc)
        # Timed from the commit lock on: waiting for another worker's commit is no cost of this one's.
        locked = time.monotonic() - (gathered.locked or begun)
        self.linger = self._linger_after(gathered, locked)
        self._done(group, gathered, None if tx is None else tx.tid, started, locked)
        return []

    def _linger_after(self, gathered: Group, seconds: float) -> float:
        """How long the next group gathers after ``gathered`` was written and committed in ``seconds``."""
        if self.takes_turns:
            return 0.0  # the others' commits are its rest (see the module docstring)
        streams = len(gathered.rows)
        if streams >= self.FANOUT_STREAMS and seconds > self.LINGER_ABOVE:
            rows = sum(part.rows for parts in gathered.rows.values() for part in parts)
            if rows < self.FANOUT_ROWS * streams:
                return min(seconds, self.MAX_LINGER)
        # Halved, not dropped: one small group between fan-out ones (a lull, a slow worker) must not
        # bring back commits of a row per stream.
        return self.linger / 2 if self.linger > 0.01 else 0.0

    def _done(self, group: list[Submission], gathered: Group, tid: bytes | None, started: float, locked: float) -> None:
        """``group`` is committed (in ``tid``; None: it stored nothing), having held the store's commit lock
        for ``locked`` seconds: record it, answer the submitters."""
        self.parts.writer.committed(gathered, tid)
        seconds = time.perf_counter() - started
        self.parts.admission.measured(sum(item.size for item in group), seconds)
        self.parts.observer.committed(
            gathered, tid, seconds, set().union(*(item.streams for item in group)), locked=locked
        )
        self.parts.outcomes.finish(group, receipts=[Receipt(a, q, tid, reasons=r) for a, q, r in gathered.receipts])
