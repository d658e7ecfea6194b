"""The write connection a transaction holds, with the commit lock, from its first upload to finish or abort."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .indoubt import discard_unfinished
from .pool import retake_commit_lock, rollback_quietly

if TYPE_CHECKING:
    from .store import Store


class Session:
    """A transaction's write connection and the cursors opened on it; the commit lock is held while it is."""

    def __init__(self, store: Store):
        """No connection yet: :meth:`writer` takes one from ``store``'s pool."""
        self.store = store
        self._conn: Any = None
        self._cursors: list[Any] = []  # opened on the connection, closed before it goes back to the pool
        self._head = 0  # MAX(tid) when the commit lock was taken

    @property
    def connection(self) -> Any:
        """The write connection held, or None before the first upload and after release."""
        return self._conn

    @property
    def head(self) -> int:
        """The newest committed tid when the commit lock was taken (0 before, or on an empty store)."""
        return self._head

    def writer(self) -> Any:
        """The write connection, holding the commit lock inside an open transaction (taken at the first call)."""
        if self._conn is not None:
            return self._conn
        store = self.store
        conn = store.pool.take_writer(
            first_step=lambda conn: store.backend.acquire_commit_lock(conn, store.commit_lock_timeout)
        )
        self._conn = conn
        store.pool.hold(conn)
        try:
            if not store.backend.in_transaction_after_lock:
                store.backend.begin(conn)
            if self._read_head(conn):
                discard_unfinished(store.backend, conn, timeout=None, lock_timeout=store.commit_lock_timeout)
                self._begin_locked(conn)
        except BaseException:
            self.release(broken=True)
            raise
        return conn

    def _read_head(self, conn: Any) -> bool:
        """Note the newest commit (:attr:`head`); whether voted-but-unfinished transactions wait to be discarded.

        One round trip for both, inside the transaction: under the commit
        lock nothing commits but this transaction, so the head stays the
        head (and the tid is taken from it without asking again).
        """
        cur = conn.cursor()
        cur.execute("SELECT (SELECT MAX(tid) FROM trans), (SELECT 1 FROM ttrans LIMIT 1)")
        head, unfinished = cur.fetchone()
        cur.close()
        self._head = head or 0
        return unfinished is not None

    def cursor(self) -> Any:
        """A cursor on the write connection; :meth:`release` closes it.

        A cursor left to the garbage collector may be finalised after its
        connection went back to the pool (an exception's traceback keeps it
        alive): MariaDB's statement close then runs on a connection another
        thread is using and desynchronises it ("Commands out of sync").
        """
        cur = self._conn.cursor()
        self._cursors.append(cur)
        return cur

    def _begin_locked(self, conn: Any) -> None:
        """Begin a transaction on ``conn`` after one ended, holding the commit lock again if it lasted that one
        (then what committed meanwhile moved the head: it is read again)."""
        backend = self.store.backend
        retake_commit_lock(backend, conn, self.store.commit_lock_timeout)
        backend.begin(conn)
        if not backend.commit_lock_spans_transactions:
            self._read_head(conn)

    def begin_again(self) -> bool:
        """After the database rolled the transaction back: begin anew on the connection, holding the commit
        lock; whether it could."""
        conn = self._conn
        try:
            rollback_quietly(conn)
            self.store.names_settled(conn, committed=False)
            self._begin_locked(conn)
        except Exception:  # noqa: BLE001  # whatever failed, the caller raises the rollback that brought it here
            return False
        return True

    def release(self, *, broken: bool = False) -> None:
        """Close the cursors, release the commit lock and give the connection back (closed if ``broken``)."""
        cursors, self._cursors = self._cursors, []
        for cur in cursors:
            try:
                cur.close()
            except Exception:  # noqa: BLE001  # already closed, or the connection is dead: nothing left to free
                pass
        conn, self._conn = self._conn, None
        if conn is None:
            return
        store = self.store
        store.names_settled(conn, committed=False)  # bindings it made and did not commit were rolled back
        store.pool.let_go(conn)
        try:
            store.backend.release_commit_lock(conn)
        except Exception:  # noqa: BLE001  # a lock the database cannot release dies with the connection, closed here
            broken = True
        store.pool.give_writer(conn, broken=broken)
