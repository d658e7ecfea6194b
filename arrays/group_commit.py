"""Group commit: many small writes from many callers, few neostore commits.

zarr writes an array by gathering one ``set`` per chunk, and a store outside
a transaction must make each ``set`` durable before it returns. A commit per
``set`` would pay a durable commit (an fsync on SQLite, a redo-log flush on
MariaDB) per chunk. Instead callers queue their change with
:meth:`GroupCommit.submit` and wait on the returned future; one committer
thread takes everything queued so far, applies it in arrival order in one
:class:`~arrays.transaction.Transaction`, commits, and resolves the futures
of the changes that commit contained. While it commits, new changes queue
for the next batch: batches grow with the load, and a lone change on an idle
store commits at once.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Literal

from windvane import neostore

from .keys import encode_key
from .transaction import Transaction

log = logging.getLogger(__name__)

Kind = Literal["set", "set_if_not_exists", "delete", "delete_prefix"]


@dataclass
class Change:
    """One queued change; ``future`` resolves once a commit holds it."""

    kind: Kind
    key: str
    value: bytes | memoryview | None = None
    compress: bool = True
    future: Future[Any] = field(default_factory=Future)

    @property
    def nbytes(self) -> int:
        return 0 if self.value is None else len(self.value)


class GroupCommit:
    """Commits the changes of concurrent callers together, in arrival order.

    ``submit`` never blocks on the database: it queues and returns the
    change's future (result: whether a ``set_if_not_exists`` set its key,
    else None). A batch
    is cut at ``max_changes`` changes or ``max_bytes`` of values, so one
    commit never holds an unbounded amount of data.
    """

    def __init__(
        self,
        store: neostore.Store,
        *,
        message: str = "zarr store write",
        max_changes: int = 10_000,
        max_bytes: int = 256 * 1024 * 1024,
    ):
        self.store = store
        self.message = message
        self.max_changes = max_changes
        self.max_bytes = max_bytes
        self._queue: deque[Change] = deque()
        self._lock = threading.Lock()
        self._committer: threading.Thread | None = None
        self._closed = False

    def submit(self, change: Change) -> Future[Any]:
        """Queue ``change``; its future resolves when it is committed (or fails)."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the store is closed; open it again to write")
            self._queue.append(change)
            if self._committer is None:
                # The committer exits when the queue runs dry, so an idle
                # store keeps no thread. Not a daemon: queued changes are
                # committed before the interpreter exits.
                self._committer = threading.Thread(target=self._drain, name="arrays-group-commit")
                self._committer.start()
        return change.future

    def close(self) -> None:
        """Refuse new changes and wait until the queued ones are committed."""
        with self._lock:
            self._closed = True
            committer = self._committer
        if committer is not None and committer is not threading.current_thread():
            committer.join()

    # -- the committer thread ------------------------------------------------

    def _drain(self) -> None:
        try:
            while True:
                with self._lock:
                    batch = self._take()
                    if not batch:
                        self._committer = None
                        return
                self._commit(batch)
        except BaseException:
            with self._lock:
                self._committer = None  # the next submit starts a new committer
            raise

    def _take(self) -> list[Change]:
        batch: list[Change] = []
        size = 0
        while self._queue and len(batch) < self.max_changes:
            if batch and size + self._queue[0].nbytes > self.max_bytes:
                break
            change = self._queue.popleft()
            # A caller that gave up (its task was cancelled) wants nothing
            # done; once running, the future can no longer be cancelled.
            if not change.future.set_running_or_notify_cancel():
                continue
            size += change.nbytes
            batch.append(change)
        return batch

    def _commit(self, batch: list[Change]) -> None:
        try:
            results = self._apply(batch)
        except BaseException as exc:
            if len(batch) > 1 and isinstance(exc, Exception):
                # One bad change must not fail its neighbours: commit each on
                # its own so only the culprit's caller sees the error.
                log.debug("group commit of %d changes failed (%s); retrying one by one", len(batch), exc)
                for change in batch:
                    self._commit([change])
                return
            for change in batch:
                if not change.future.done():
                    change.future.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            return
        for change, result in zip(batch, results):
            change.future.set_result(result)

    def _apply(self, batch: list[Change]) -> list[Any]:
        """Apply ``batch`` in one transaction and commit it; the result of each change."""
        store = self.store
        # Bind every new name in one round trip before the transaction takes
        # the commit lock (each Transaction.set then finds its oid cached).
        names = [encode_key(c.key) for c in batch if c.kind in ("set", "set_if_not_exists")]
        if names:
            store.oids_for(names, create=True)
        tx = Transaction(store, message=self.message, metadata={"changes": len(batch)})
        try:
            results = [apply_change(tx, change) for change in batch]
            tx.commit()
        except BaseException:
            tx.abort()
            raise
        return results


def apply_change(tx: Transaction, change: Change) -> Any:
    """Apply one change to ``tx``; a ``set_if_not_exists`` tells whether it set."""
    if change.kind in ("set", "set_if_not_exists"):
        if change.value is None:
            raise ValueError(f"a {change.kind} change of {change.key!r} carries no value")
        if change.kind == "set":
            tx.set(change.key, bytes(change.value), compress=change.compress)
            return None
        return tx.set_if_not_exists(change.key, bytes(change.value), compress=change.compress)
    if change.kind == "delete":
        tx.delete(change.key)
        return None
    if change.kind == "delete_prefix":
        tx.delete_prefix(change.key)
        return None
    raise ValueError(f"unknown change kind {change.kind!r}")
