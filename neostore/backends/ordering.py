"""The commit order of a MariaDB store: what keeps commits one after the other, on one server or a cluster.

A store's writers agree on one order of commits, in which tids strictly
increase. On one server that is a named lock (``GET_LOCK``): the server
grants it to one session at a time and releases it when that session ends,
``kill -9`` included. On a Galera cluster a named lock is local to the node
that granted it, so the order goes through a row every commit updates:
two commits on different nodes then write the same row, and certification
lets exactly one of them commit (the other is rolled back, and retried).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

import mariadb
from mariadb.constants import ERR

from ..errors import CommitLockTimeout, LeaseHeldError, LeaseLostError
from .base import Lease

log = logging.getLogger(__name__)


class CommitOrder(ABC):
    """How a store's commits are put one after the other: taken before a write, stamped in its commit."""

    #: Whether the order stays taken across the commits and rollbacks of the connection holding it (a named
    #: lock), or lasts one database transaction (a row lock): then it is taken again after each.
    spans_transactions: bool

    @abstractmethod
    def acquire(self, conn: Any, timeout: float) -> None:
        """Take the order for ``conn`` (a writer, autocommit off); CommitLockTimeout after ``timeout`` s."""

    @abstractmethod
    def release(self, conn: Any) -> None:
        """Give the order back, once ``conn``'s transaction has ended. Harmless when ``conn`` does not hold it."""

    @abstractmethod
    def stamp(self, cur: Any, tid: int | None, *, voted: int | None = None) -> None:
        """Record, in the transaction about to commit on ``cur``, that it commits ``tid`` (None: a change of
        rows without a tid, as a pack batch makes); ``voted``: the tid of a voted transaction that is to
        stay ahead of every other commit until it finishes."""

    @abstractmethod
    def fence(self, conn: Any, timeout: float) -> None:
        """Return once no commit begun before this call can still become visible (``conn``: a new writer)."""

    def confirmed(self, conn: Any, tid: int, *, voted: bool) -> bool:
        """Whether the commit of ``tid`` that ``conn`` just made is there (``voted``: as a vote, in ``ttrans``)."""
        return True  # a server that acknowledged a COMMIT has made it

    @abstractmethod
    def lease(self, name: str, holder: str, seconds: float, connect: Callable[[], Any]) -> Lease:
        """The lease ``name`` (see :meth:`Backend.take_lease`), held through connections ``connect`` makes."""


class NamedLock(CommitOrder):
    """One server's commit order: a ``GET_LOCK`` named after the database."""

    spans_transactions = True

    def __init__(self, name: str, database: str):
        self.name = name[:64]
        self.database = database

    def acquire(self, conn: Any, timeout: float) -> None:
        cur = conn.cursor()
        cur.execute("SELECT GET_LOCK(?, ?)", (self.name, timeout))
        (got,) = cur.fetchone()
        cur.close()
        if got != 1:
            raise CommitLockTimeout(
                f"another writer held the commit lock of database {self.database} for more than {timeout:g} s"
            )

    def release(self, conn: Any) -> None:
        cur = conn.cursor()
        cur.execute("SELECT RELEASE_LOCK(?)", (self.name,))
        cur.fetchall()
        cur.close()

    def stamp(self, cur: Any, tid: int | None, *, voted: int | None = None) -> None:
        return None  # the lock orders the commits: holding it is the stamp

    def fence(self, conn: Any, timeout: float) -> None:
        # The session committing holds the lock until its COMMIT is durable or rolled back.
        self.acquire(conn, timeout)
        self.release(conn)

    def lease(self, name: str, holder: str, seconds: float, connect: Callable[[], Any]) -> Lease:
        return NamedLease(f"windvane.{name}.{self.database}", name, connect())


#: The tables of the certified order and of leases, created with the store on a cluster.
ORDER_TABLES = (
    "CREATE TABLE IF NOT EXISTS commit_order (id INTEGER NOT NULL PRIMARY KEY, "
    "tid BIGINT UNSIGNED NOT NULL, changes BIGINT UNSIGNED NOT NULL, "
    "voted BIGINT UNSIGNED NULL, voted_until DOUBLE NULL) ENGINE=InnoDB",
    "CREATE TABLE IF NOT EXISTS lease (name VARCHAR(64) NOT NULL PRIMARY KEY, "
    "holder VARCHAR(255) NOT NULL, expires DOUBLE NOT NULL) ENGINE=InnoDB",
)


class CertifiedCounter(CommitOrder):
    """A cluster's commit order: one row that every commit updates, so that certification orders them.

    Writers on one node queue on the row's lock; writers on different nodes
    both write it, and the cluster commits the first to be certified and
    rolls the others back (a deadlock error, which the caller retries). A
    transaction that voted marks the row until it finishes, for at most
    ``vote_lease`` seconds: a writer that died between vote and finish holds
    nobody up for longer, and its vote is then discarded.
    """

    spans_transactions = False
    #: How often a writer looks again at a row marked by a vote that has not finished.
    poll = 0.05

    def __init__(self, database: str, vote_lease: float):
        self.database = database
        self.vote_lease = vote_lease

    def acquire(self, conn: Any, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        cur = conn.cursor()
        try:
            while True:
                wait = max(1, math.ceil(deadline - time.monotonic()))
                try:
                    cur.execute(
                        f"SET STATEMENT innodb_lock_wait_timeout = {wait} FOR "
                        "SELECT voted, voted_until > UNIX_TIMESTAMP(NOW(6)) FROM commit_order WHERE id = 1 FOR UPDATE"
                    )
                except mariadb.Error as exc:
                    if getattr(exc, "errno", None) != ERR.ER_LOCK_WAIT_TIMEOUT:
                        raise
                    raise self._timeout(timeout, "another writer on this node held it") from None
                row = cur.fetchone()
                if row is None:
                    self.make_row(conn)
                    continue
                voted, live = row
                if voted is None or not live:
                    return  # free, or marked by a vote whose writer died: its rows are discarded by the holder
                _rollback(conn)
                if time.monotonic() >= deadline:
                    raise self._timeout(timeout, f"transaction 0x{voted:016x} voted and has not finished")
                time.sleep(self.poll)
        finally:
            cur.close()

    @staticmethod
    def make_row(conn: Any) -> None:
        """Write the order's row unless it is there; a node writing it at the same moment may win."""
        cur = conn.cursor()
        try:
            cur.execute("INSERT IGNORE INTO commit_order (id, tid, changes) VALUES (1, 0, 0)")
            conn.commit()
        except mariadb.Error as exc:
            _rollback(conn)
            if getattr(exc, "errno", None) != ERR.ER_LOCK_DEADLOCK:
                raise
        finally:
            cur.close()

    def _timeout(self, timeout: float, why: str) -> CommitLockTimeout:
        return CommitLockTimeout(f"the commit order of database {self.database} stayed taken for {timeout:g} s: {why}")

    def release(self, conn: Any) -> None:
        # The row lock ends with the transaction; a transaction still open here only read.
        _rollback(conn)

    def stamp(self, cur: Any, tid: int | None, *, voted: int | None = None) -> None:
        # ``changes`` moves at every stamp: a row whose values do not change is not part of the write set,
        # and would not be certified.
        if voted is not None:
            cur.execute(
                "UPDATE commit_order SET tid = GREATEST(tid, ?), changes = changes + 1, voted = ?, "
                "voted_until = UNIX_TIMESTAMP(NOW(6)) + ? WHERE id = 1",
                (voted, voted, self.vote_lease),
            )
            return
        cur.execute(
            "UPDATE commit_order SET tid = GREATEST(tid, ?), changes = changes + 1, voted = NULL, "
            "voted_until = NULL WHERE id = 1",
            (tid or 0,),
        )

    def confirmed(self, conn: Any, tid: int, *, voted: bool) -> bool:
        # A node commits locally before it acknowledges a COMMIT, so a commit it made is visible to the next
        # statement on the same connection. Asked because a transaction the cluster aborted between
        # statements can be acknowledged as committed while nothing of it is (the connector loses the abort).
        cur = conn.cursor()
        try:
            cur.execute(f"SELECT 1 FROM {'ttrans' if voted else 'trans'} WHERE tid = ?", (tid,))
            found = cur.fetchone() is not None
        finally:
            cur.close()
        _rollback(conn)
        return found

    def lease(self, name: str, holder: str, seconds: float, connect: Callable[[], Any]) -> Lease:
        return RowLease(name, holder, seconds, connect)

    def fence(self, conn: Any, timeout: float) -> None:
        # A commit certified before this one is committed on this node when this one is (a node commits
        # in the cluster's order); one not yet certified conflicts with it on the row and never commits.
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.acquire(conn, max(1.0, deadline - time.monotonic()))
                cur = conn.cursor()
                self.stamp(cur, None)
                cur.close()
                conn.commit()
            except mariadb.Error as exc:
                _rollback(conn)
                if getattr(exc, "errno", None) != ERR.ER_LOCK_DEADLOCK or time.monotonic() >= deadline:
                    raise
            else:
                return


def _rollback(conn: Any) -> None:
    """End ``conn``'s transaction, letting go of the row locks it holds; a dead connection holds none."""
    try:
        conn.rollback()
    except mariadb.Error:
        pass


class NamedLease(Lease):
    """A lease as a ``GET_LOCK`` on a connection of its own, which the server drops with its holder."""

    def __init__(self, lock: str, name: str, conn: Any):
        self.conn: Any = conn
        self.lock = lock
        cur = conn.cursor()
        try:
            cur.execute("SELECT GET_LOCK(?, 0), IS_USED_LOCK(?)", (lock, lock))
            got, owner = cur.fetchone()
        finally:
            cur.close()
        if got != 1:
            conn.close()
            self.conn = None
            raise LeaseHeldError(
                f"connection {owner} of the server holds the store's {name} lease (SHOW PROCESSLIST names its "
                "client): one long operation (pack, blob sweep, moving values) runs at a time"
            )

    def fence(self, cur: Any) -> None:
        return None  # the lock is held until released or its holder's connection ends: it cannot be taken over

    def release(self) -> None:
        conn, self.conn = self.conn, None
        if conn is None:
            return
        try:
            # Released before the connection closes: the server ends a closed session a moment later.
            cur = conn.cursor()
            cur.execute("SELECT RELEASE_LOCK(?)", (self.lock,))
            cur.fetchall()
            cur.close()
        except mariadb.Error:
            pass  # a dead connection held the lock no more
        _close(conn)


class RowLease(Lease):
    """A lease as a row (holder, expiry) on a cluster, renewed by a thread while its holder lives.

    Taking it over once it ran out, and each renewal, are certified writes of
    the row: two nodes never both hold it. Each transaction of the holder
    writes the row too (:meth:`fence`), so one that a holder whose lease ran
    out would commit conflicts with the takeover instead.
    """

    def __init__(self, name: str, holder: str, seconds: float, connect: Callable[[], Any]):
        self.name, self.holder, self.seconds = name, holder, seconds
        self._connect = connect
        self._stop = threading.Event()
        self.lost: str | None = None
        conn = connect()
        try:
            self._claim(conn)
        finally:
            _close(conn)
        self._renewer = threading.Thread(target=self._renew, name=f"lease-{name}", daemon=True)
        self._renewer.start()

    def _claim(self, conn: Any) -> None:
        cur = conn.cursor()
        try:
            cur.execute(
                "SELECT holder, expires > UNIX_TIMESTAMP(NOW(6)) FROM lease WHERE name = ? FOR UPDATE", (self.name,)
            )
            row = cur.fetchone()
            if row is not None and row[1] and row[0] != self.holder:
                raise LeaseHeldError(
                    f"{row[0]} holds the store's {self.name} lease: one long operation (pack, blob sweep, "
                    f"moving values) runs at a time; a holder that died gives it up within {self.seconds:g} s"
                )
            cur.execute(
                "INSERT INTO lease (name, holder, expires) VALUES (?, ?, UNIX_TIMESTAMP(NOW(6)) + ?) "
                "ON DUPLICATE KEY UPDATE holder = VALUES(holder), expires = VALUES(expires)",
                (self.name, self.holder, self.seconds),
            )
            conn.commit()
        except mariadb.Error as exc:
            _rollback(conn)
            if getattr(exc, "errno", None) == ERR.ER_LOCK_DEADLOCK:
                raise LeaseHeldError(f"a process on another node took the store's {self.name} lease first") from exc
            raise
        finally:
            cur.close()

    def _extend(self, cur: Any) -> bool:
        cur.execute(
            "UPDATE lease SET expires = UNIX_TIMESTAMP(NOW(6)) + ? WHERE name = ? AND holder = ?",
            (self.seconds, self.name, self.holder),
        )
        return bool(cur.rowcount == 1)

    def _renew(self) -> None:
        """Extend the lease every quarter of its length until released; note when that fails past its end."""
        deadline = time.monotonic() + self.seconds
        while not self._stop.wait(self.seconds / 4):
            try:
                conn = self._connect()
                try:
                    cur = conn.cursor()
                    extended = self._extend(cur)
                    conn.commit()
                finally:
                    _close(conn)
            except Exception as exc:  # noqa: BLE001  # any failure to renew is retried until the lease runs out
                if time.monotonic() >= deadline:
                    self.lost = f"it could not be renewed for {self.seconds:g} s: {exc}"
                    log.warning("the lease of %s is lost: %s", self.name, self.lost)
                    return
                continue
            if not extended:
                self.lost = "another process took it over"
                return
            deadline = time.monotonic() + self.seconds

    def fence(self, cur: Any) -> None:
        if self.lost is None and self._extend(cur):
            return
        raise LeaseLostError(
            f"the store's {self.name} lease was lost ({self.lost or 'another process took it over'}); "
            "what was committed stays: run the operation again"
        )

    def release(self) -> None:
        self._stop.set()
        self._renewer.join()
        try:
            conn = self._connect()
            try:
                conn.cursor().execute("DELETE FROM lease WHERE name = ? AND holder = ?", (self.name, self.holder))
                conn.commit()
            finally:
                _close(conn)
        except mariadb.Error as exc:
            log.warning("the lease of %s runs out on its own: %s", self.name, exc)


def _close(conn: Any) -> None:
    try:
        conn.close()
    except mariadb.Error:
        pass  # already dead: nothing left to close
