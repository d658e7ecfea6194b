"""Transactions whose outcome a writer did not see: commits in doubt, and votes a dead writer left behind."""

from __future__ import annotations

import logging
import time
from typing import Any

from . import errors
from .backends import Backend
from .pool import retake_commit_lock, rollback_quietly, write_transaction
from .sql import delete_unreferenced_data
from .tids import u64

log = logging.getLogger(__name__)


def transaction_committed(backend: Backend, tid: bytes, timeout: float) -> bool:
    """Whether transaction ``tid`` committed, asked on a new connection once no commit of it can still be
    under way (:meth:`Backend.fence`).

    Retried while the database is out of reach, for up to ``timeout``
    seconds; past that, DatabaseError. See :meth:`Store.transaction_committed`.
    """
    deadline = time.monotonic() + timeout
    delay = 0.1
    while True:
        conn = None
        try:
            conn = backend.connect(for_writing=True)
            backend.fence(conn, max(1.0, deadline - time.monotonic()))
            cur = conn.cursor()
            cur.execute("SELECT 1 FROM trans WHERE tid = ?", (u64(tid),))
            found = cur.fetchone() is not None
            cur.close()
        except Exception as exc:
            retry = isinstance(exc, (errors.DatabaseError, errors.CommitLockTimeout)) or backend.is_connection_lost(exc)
            if not retry:
                raise
            if time.monotonic() + delay > deadline:
                raise errors.DatabaseError(f"the database stayed out of reach for {timeout:g} s: {exc}") from exc
        else:
            return found
        finally:
            if conn is not None:
                backend.close_connection(conn)
        time.sleep(delay)
        delay = min(2 * delay, 2.0)


def discard_unfinished(backend: Backend, conn: Any, timeout: float | None, lock_timeout: float = 60.0) -> None:
    """Drop voted-but-unfinished transactions of dead writers.

    Only the commit-lock holder may call this with ``timeout`` None (if its
    lock lasts one transaction, it is taken again within ``lock_timeout`` s
    for the clean-up); with a ``timeout`` it takes the lock itself, skipping
    the clean-up if another writer holds it that long.
    """
    owns_lock = timeout is not None and timeout >= 0
    if owns_lock:
        assert timeout is not None
        try:
            backend.acquire_commit_lock(conn, timeout)
        except errors.CommitLockTimeout:
            return
    try:
        cur = conn.cursor()
        cur.execute("SELECT tid FROM ttrans")
        stale = [row[0] for row in cur.fetchall()]
        rollback_quietly(conn)
        if not stale:
            return
        retake_commit_lock(backend, conn, lock_timeout)
        with write_transaction(backend, conn):
            cur = conn.cursor()
            for tid in stale:
                log.warning("discarding transaction 0x%016x: voted but never finished (its writer died)", tid)
                cur.execute("SELECT DISTINCT data_id FROM tobj WHERE tid = ? AND data_id IS NOT NULL", (tid,))
                data_ids = [row[0] for row in cur.fetchall()]
                cur.execute("DELETE FROM tobj WHERE tid = ?", (tid,))
                cur.execute("DELETE FROM ttrans WHERE tid = ?", (tid,))
                delete_unreferenced_data(cur, data_ids, backend)
            backend.stamp_commit(cur, None)
    finally:
        if owns_lock:
            backend.release_commit_lock(conn)
