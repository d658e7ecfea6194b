"""The end of a transaction: vote, commit, finish and abort, and a COMMIT whose outcome the connection lost."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from . import errors
from .indoubt import transaction_committed
from .pool import rollback_quietly, write_transaction
from .sql import chunked, delete_unreferenced_data
from .tids import Tid, next_tid, p64, u64
from .writes import Rewind

if TYPE_CHECKING:
    from .transaction import Resolver, Transaction

log = logging.getLogger(__name__)


def insert_rows(txn: Transaction, resolve: Resolver | None, *, voted: bool) -> tuple[Any, list[bytes]]:
    """Upload, check, take a tid and insert the transaction's rows: into ``ttrans``/``tobj``,
    committed (``voted``), or into ``trans``/``obj`` for the caller to commit. Runs again after a
    rollback by the database when :class:`Rewind` can; otherwise aborts and raises."""
    again = Rewind.taken(txn)
    while True:
        try:
            conn, cur, resolved = _prepare(txn, resolve)
            tid = u64(voted_tid(txn))
            meta = (tid, txn.user, txn.description, txn.extension)
            txn.store_.backend.stamp_commit(cur, tid, voted=tid if voted else None)
            if voted:
                cur.execute("INSERT INTO ttrans (tid, user, description, ext) VALUES (?, ?, ?, ?)", meta)
                sql = "INSERT INTO tobj (tid, oid, data_id, value_tid) VALUES (?, ?, ?, ?)"
                rows = [(tid, oid, txn.uploads.data_id(w), w.value_tid) for oid, w in txn.writes.items()]
            else:
                cur.execute("INSERT INTO trans (tid, packed, user, description, ext) VALUES (?, 0, ?, ?, ?)", meta)
                sql = "INSERT INTO obj (oid, tid, data_id, value_tid) VALUES (?, ?, ?, ?)"
                rows = [(oid, tid, txn.uploads.data_id(w), w.value_tid) for oid, w in txn.writes.items()]
            for batch in chunked(rows, 5000):
                cur.executemany(sql, batch)
            if txn.uploads.orphans:
                delete_unreferenced_data(cur, txn.uploads.inserted, txn.store_.backend)
            if voted:
                conn.commit()
                confirm(txn, conn, voted=True)
                txn.store_.names_settled(conn, committed=True)
            else:
                txn.store_.oids.advance(cur, txn.writes)
        except BaseException as exc:
            if again is not None and again.after(exc):
                continue
            txn.abort()
            raise_transient(txn, exc)
            raise
        else:
            return conn, resolved


def commit(txn: Transaction, resolve: Resolver | None) -> bytes:
    """Vote and finish in one database commit; returns the tid (see :meth:`Transaction.commit`)."""
    conn, _ = insert_rows(txn, resolve, voted=False)
    try:
        conn.commit()
    except BaseException as exc:  # noqa: BLE001  # whatever ended the COMMIT, settle_lost_commit raises it unless it committed
        txn.abort()
        settle_lost_commit(txn, exc)
    else:
        try:
            confirm(txn, conn, voted=False)
        except BaseException:
            txn.abort()
            raise
        txn.store_.names_settled(conn, committed=True)
        txn.session.release()
    txn.state = "finished"
    return voted_tid(txn)


def confirm(txn: Transaction, conn: Any, *, voted: bool) -> None:
    """Raise TransientDatabaseError unless the commit ``conn`` just acknowledged is there
    (:meth:`Backend.commit_confirmed`)."""
    if not txn.store_.backend.commit_confirmed(conn, u64(voted_tid(txn)), voted=voted):
        raise errors.TransientDatabaseError(
            f"the database acknowledged the commit of transaction 0x{voted_tid(txn).hex()} and did not make it "
            "(the cluster aborted it); nothing of it was written: run it again"
        )


def voted_tid(txn: Transaction) -> bytes:
    """The tid the transaction took at vote (TransactionError before)."""
    if txn.tid is None:
        raise errors.TransactionError("the transaction has no tid before vote")
    return txn.tid


def raise_transient(txn: Transaction, exc: BaseException) -> None:
    """Raise TransientDatabaseError from ``exc`` if the database rolled the transaction back."""
    if txn.store_.backend.is_rolled_back(exc):
        raise errors.TransientDatabaseError(
            f"the database rolled this transaction back ({exc}); nothing of it was written: run it again"
        ) from exc


def _prepare(txn: Transaction, resolve: Resolver | None) -> tuple[Any, Any, list[bytes]]:
    """Upload the values, check serials and take a tid: what vote and commit share."""
    txn.uploads.flush(txn.session)
    conn = txn.session.writer()
    cur = txn.session.cursor()
    resolved = txn.reads.check(txn, cur, resolve)
    if resolved:
        txn.uploads.flush(txn.session)
    _assign_tid(txn, cur)
    return conn, cur, resolved


#: Attempts at moving a voted transaction's rows, when the database rolls the move back.
FINISH_ATTEMPTS = 8


def finish(txn: Transaction) -> bytes:
    """Make the voted transaction visible (its rows move from ``ttrans``/``tobj``); returns its tid.

    A move the database rolled back is made again: on a cluster another node's commit may win a row it
    writes (``oidgen``), while what was voted stays voted, and ahead of every other commit."""
    try:
        for attempt in range(1, FINISH_ATTEMPTS + 1):
            try:
                _move_voted_rows(txn)
            except Exception as exc:
                if attempt == FINISH_ATTEMPTS or not txn.store_.backend.is_rolled_back(exc):
                    raise
                rollback_quietly(txn.session.connection)
                log.warning(
                    "the database rolled the finish of 0x%s back (%s); moving it again", voted_tid(txn).hex(), exc
                )
            else:
                break
    except BaseException as exc:  # noqa: BLE001  # whatever ended the COMMIT, settle_lost_commit raises it unless it committed
        txn.session.release(broken=True)
        txn.state = "failed"
        settle_lost_commit(txn, exc)
    else:
        txn.session.release()
    txn.state = "finished"
    return voted_tid(txn)


def _move_voted_rows(txn: Transaction) -> None:
    """Move the voted rows of ``txn`` into ``obj``/``trans`` and commit."""
    store, conn, tid = txn.store_, txn.session.connection, u64(voted_tid(txn))
    if not store.backend.in_transaction_after_lock:
        store.backend.begin(conn)
    cur = txn.session.cursor()
    cur.execute(
        "INSERT INTO trans (tid, packed, user, description, ext) "
        "SELECT tid, 0, user, description, ext FROM ttrans WHERE tid = ?",
        (tid,),
    )
    if cur.rowcount != 1:
        raise errors.TransactionError(f"transaction 0x{voted_tid(txn).hex()} vanished between vote and finish")
    cur.execute(
        "INSERT INTO obj (oid, tid, data_id, value_tid) SELECT oid, tid, data_id, value_tid FROM tobj WHERE tid = ?",
        (tid,),
    )
    cur.execute("DELETE FROM tobj WHERE tid = ?", (tid,))
    cur.execute("DELETE FROM ttrans WHERE tid = ?", (tid,))
    store.oids.advance(cur, txn.writes)
    store.backend.stamp_commit(cur, tid)
    conn.commit()
    confirm(txn, conn, voted=False)


def settle_lost_commit(txn: Transaction, exc: BaseException) -> None:
    """After ``exc`` ended the commit of this transaction: return if it committed after all
    (the connection was lost once the server had made the COMMIT durable), else raise ``exc``.

    Only a lost connection leaves the outcome in doubt; reporting such a
    commit as failed would have the caller store its data a second time.
    """
    if not txn.store_.backend.is_connection_lost(exc):
        raise exc
    tid = voted_tid(txn)
    log.warning(
        "the connection was lost while transaction 0x%s committed; asking the database whether it did", tid.hex()
    )
    try:
        committed = transaction_committed(txn.store_.backend, tid, txn.store_.in_doubt_timeout)
    except errors.DatabaseError as unreachable:
        raise errors.CommitOutcomeUnknown(tid, txn.store_.in_doubt_timeout, unreachable) from exc
    if not committed:
        raise exc
    log.warning("transaction 0x%s committed before the connection was lost", tid.hex())


def abort(txn: Transaction) -> None:
    """Forget the transaction, deleting what it voted. Safe to call in any state, more than once."""
    if txn.state in ("aborted", "finished"):
        return
    conn, voted = txn.session.connection, txn.state == "voted"
    txn.state = "aborted"
    if conn is None:
        return
    broken = False
    try:
        rollback_quietly(conn)
        if voted:
            with write_transaction(txn.store_.backend, conn):
                cur = txn.session.cursor()
                tid = u64(voted_tid(txn))
                cur.execute("DELETE FROM tobj WHERE tid = ?", (tid,))
                cur.execute("DELETE FROM ttrans WHERE tid = ?", (tid,))
                delete_unreferenced_data(cur, txn.uploads.inserted, txn.store_.backend)
                txn.store_.backend.stamp_commit(cur, None)
    except Exception:
        # Broad: whatever failed, the connection is gone (the server died) and the error is logged; the next
        # lock holder discards what was voted.
        broken = True
        log.exception("abort of transaction could not clean up; it will be discarded later")
    finally:
        txn.session.release(broken=broken)


def _assign_tid(txn: Transaction, cur: Any) -> None:
    """Take the tid: the requested one (which must follow the head), else the next after the head."""
    last = txn.session.head  # read when the commit lock was taken, held since
    if txn.requested_tid is not None:
        if txn.requested_tid <= last:
            raise errors.TransactionError(
                f"cannot commit with tid 0x{txn.requested_tid:016x}: it is not after the last transaction 0x{last:016x}"
            )
        tid = txn.requested_tid
    else:
        tid = next_tid(last)
    txn.tid = Tid(p64(tid))
