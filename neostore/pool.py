"""The connections of one Store: a reader per thread, pooled writers, and each thread's commit-lock holder.

This is the interface the Store's helpers (:mod:`neostore.names`,
:mod:`neostore.pack`) write through, so that every write that is not a
Store transaction takes a writer, begins, commits or rolls back, and gives
the writer back the same way: :meth:`ConnectionPool.writer`.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from .backends import Backend
from .backends.base import Lease
from .errors import NeoStoreError

T = TypeVar("T")


def rollback_quietly(conn: Any) -> None:
    """Roll ``conn``'s transaction back, ignoring a connection that is dead already (there is nothing to undo)."""
    try:
        conn.rollback()
    except Exception:  # noqa: BLE001  # any driver's error of a dead connection: nothing is left to undo
        pass


@contextmanager
def write_transaction(backend: Backend, conn: Any) -> Iterator[None]:
    """A write transaction on ``conn`` around the block: begun, committed at its end, rolled back if it raises."""
    backend.begin(conn)
    try:
        yield
        conn.commit()
    except BaseException:
        rollback_quietly(conn)
        raise


@contextmanager
def locked_transaction(backend: Backend, conn: Any, timeout: float, lease: Lease | None = None) -> Iterator[Any]:
    """A write transaction on ``conn`` under the commit lock (taken within ``timeout`` seconds): its cursor.

    The lock is let go once the transaction has committed or rolled back:
    what a batch of pack, the blob sweep or a migration does under it is
    never seen half done. The commit is stamped in the commit order, so that
    on a cluster it conflicts with any commit made meanwhile on another node;
    and with the ``lease`` of the long operation it belongs to, so that it
    never commits once another process took that lease over.
    """
    backend.acquire_commit_lock(conn, timeout)
    try:
        with write_transaction(backend, conn):
            cur = conn.cursor()
            yield cur
            if lease is not None:
                lease.fence(cur)
            backend.stamp_commit(cur, None)
    finally:
        backend.release_commit_lock(conn)


def retake_commit_lock(backend: Backend, conn: Any, timeout: float) -> None:
    """After a commit or rollback on ``conn``, whose transaction held the commit lock: the lock again, if
    it lasted that one transaction (:attr:`Backend.commit_lock_spans_transactions`)."""
    if not backend.commit_lock_spans_transactions:
        backend.acquire_commit_lock(conn, timeout)


class ConnectionPool:
    """The DB-API connections of one Store. Thread-safe.

    Readers: one per thread, kept until :meth:`close`. Writers: taken for a
    write and given back after it; a connection that failed is closed
    instead. A thread whose transaction holds the commit lock registers its
    connection (:meth:`hold`), for the writes it makes meanwhile on a
    :attr:`Backend.single_writer` engine. Once ``closed`` is set no reader
    is made and writers given back are closed.
    """

    def __init__(self, backend: Backend):
        self.backend = backend
        self.closed = False
        self._local = threading.local()
        self._readers: list[Any] = []
        self._writers: list[Any] = []
        self._lock = threading.Lock()

    # -- readers -----------------------------------------------------------------

    def reader(self) -> Any:
        """This thread's read connection (made at its first read); NeoStoreError once the pool is closed."""
        conn = getattr(self._local, "reader", None)
        if conn is None:
            if self.closed:
                raise NeoStoreError("the store is closed")
            conn = self.backend.connect(for_writing=False)
            self._local.reader = conn
            with self._lock:
                self._readers.append(conn)
        return conn

    def query(self, sql: str, params: Iterable[Any] = ()) -> list[tuple[Any, ...]]:
        """Run a read-only statement on this thread's reader connection; its rows.

        A connection the server dropped (it restarted) is replaced and the
        statement run once more on the new one: a read changes nothing, so
        repeating it is safe, and callers never see a restart that is over.
        """
        params = tuple(params)
        attempt = 1
        while True:
            conn = self.reader()
            cur = conn.cursor()
            try:
                cur.execute(sql, params)
                rows: list[tuple[Any, ...]] = cur.fetchall()
            except Exception as exc:
                if not self.backend.is_connection_lost(exc):
                    raise
                self._drop_reader(conn)
                if attempt == 2:
                    raise
                attempt += 1
            else:
                return rows
            finally:
                try:
                    cur.close()
                except Exception:  # noqa: BLE001  # a dead connection's cursor; the real error is the one raised
                    pass

    def _drop_reader(self, conn: Any) -> None:
        self._local.reader = None
        with self._lock:
            if conn in self._readers:
                self._readers.remove(conn)
        self.backend.close_connection(conn)

    # -- writers -----------------------------------------------------------------

    @contextmanager
    def writer(self, *, transaction: bool = True) -> Iterator[Any]:
        """A writer connection for the ``with`` block, given back to the pool after it.

        ``transaction=True``: the block runs in a write transaction begun on
        it, committed when the block ends, rolled back if it raises.
        ``transaction=False``: the block runs its own transactions on it (a
        ping checks it is alive first). Either way a connection the server
        dropped is replaced before the block, and one whose block raised is
        closed, not pooled: it may be dead or mid-transaction.
        """
        conn = self.take_writer(first_step=self.backend.begin if transaction else self.backend.ping)
        try:
            yield conn
            if transaction:
                conn.commit()
        except BaseException:
            rollback_quietly(conn)
            self.give_writer(conn, broken=True)
            raise
        self.give_writer(conn)

    def run_write(self, work: Callable[[Any], T], *, attempts: int = 8) -> T:
        """``work(conn)`` in a write transaction of its own (:meth:`writer`), run again when the database
        rolls it back: on a cluster, two nodes writing one row at once commit one of the writes and roll
        the other back. ``work`` must do nothing but its statements, as it may run more than once."""
        for attempt in range(1, attempts + 1):
            try:
                with self.writer() as conn:
                    return work(conn)
            except Exception as exc:
                if attempt == attempts or not self.backend.is_rolled_back(exc):
                    raise
            # A short random pause, so that the same writers do not meet again at once.
            time.sleep(random.uniform(0, 0.01 * attempt))
        raise AssertionError("unreachable: the last attempt returns or raises")

    def take_writer(self, first_step: Callable[[Any], object] | None = None) -> Any:
        """A writer connection from the pool (or a new one), after ``first_step(conn)`` succeeded on it.

        For a writer kept beyond one block (a Store transaction); give it
        back with :meth:`give_writer`. Pooled connections die when the server
        restarts. When ``first_step`` finds a pooled connection dead, the
        pool is emptied (its other connections died too) and ``first_step``
        runs again on a new connection: it did nothing on the dead one, so
        that is safe.
        """
        while True:
            with self._lock:
                pooled = self._writers.pop() if self._writers else None
            conn = pooled if pooled is not None else self.backend.connect(for_writing=True)
            if first_step is None:
                return conn
            try:
                first_step(conn)
            except BaseException as exc:
                lost = self.backend.is_connection_lost(exc)
                self.give_writer(conn, broken=lost)
                if not lost or pooled is None:
                    raise
            else:
                return conn
            with self._lock:
                dead, self._writers = self._writers, []
            for conn in dead:
                self.backend.close_connection(conn)

    def give_writer(self, conn: Any, *, broken: bool = False) -> None:
        """Put a writer taken with :meth:`take_writer` back, or close it if ``broken`` or the pool is closed."""
        if broken or self.closed:
            self.backend.close_connection(conn)
            return
        with self._lock:
            self._writers.append(conn)

    # -- the commit-lock holder ----------------------------------------------------

    def lock_holder(self) -> Any | None:
        """The writer connection this thread's transaction holds the commit lock on, if any."""
        return getattr(self._local, "lock_holder", None)

    def hold(self, conn: Any) -> None:
        """Record that this thread's transaction holds the commit lock on ``conn``."""
        self._local.lock_holder = conn

    def let_go(self, conn: Any) -> None:
        """This thread's transaction on ``conn`` no longer holds the commit lock."""
        if getattr(self._local, "lock_holder", None) is conn:
            self._local.lock_holder = None

    def close(self) -> None:
        """Close every connection; readers and writers taken later fail, writers given back are closed."""
        self.closed = True
        with self._lock:
            conns, self._readers, self._writers = self._readers + self._writers, [], []
        for conn in conns:
            self.backend.close_connection(conn)
