"""The write connection a transaction holds, with the commit lock, from its first upload to finish or abort."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .indoubt import discard_unfinished

if TYPE_CHECKING:
    from .transaction import Transaction


def writer(txn: Transaction) -> Any:
    """The write connection, holding the commit lock inside an open transaction."""
    if txn._conn is not None:
        return txn._conn
    store = txn.store_
    conn = store.pool.take_writer(
        first_step=lambda conn: store.backend.acquire_commit_lock(conn, store.commit_lock_timeout)
    )
    conn._holds_commit_lock = True
    txn._conn = conn
    store.pool.hold(conn)
    try:
        if not store.backend.in_transaction_after_lock:
            store.backend.begin(conn)
        unfinished = _read_head(txn, conn)
        if unfinished:
            discard_unfinished(store.backend, conn, timeout=None)
            store.backend.begin(conn)
    except BaseException:
        release(txn, broken=True)
        raise
    return conn


def _read_head(txn: Transaction, conn: Any) -> bool:
    """Note the newest commit (:attr:`head`); whether voted-but-unfinished transactions wait to be discarded.

    One round trip for both, inside the transaction: under the commit
    lock nothing commits but this transaction, so the head stays the
    head (and the tid is taken from it without asking again).
    """
    cur = conn.cursor()
    cur.execute("SELECT (SELECT MAX(tid) FROM trans), (SELECT 1 FROM ttrans LIMIT 1)")
    head, unfinished = cur.fetchone()
    cur.close()
    txn._head = head or 0
    return unfinished is not None


def release(txn: Transaction, *, broken: bool = False) -> None:
    """Close the transaction's cursors, release the commit lock and give its connection back (closed if ``broken``)."""
    cursors, txn._cursors = txn._cursors, []
    for cur in cursors:
        try:
            cur.close()
        except Exception:
            pass  # already closed, or the connection is dead: nothing left to free
    conn, txn._conn = txn._conn, None
    if conn is None:
        return
    store = txn.store_
    store._names.settled(conn, committed=False)  # bindings it made and did not commit were rolled back
    store.pool.let_go(conn)
    conn._holds_commit_lock = False
    try:
        store.backend.release_commit_lock(conn)
    except Exception:
        broken = True
    store.pool.give_writer(conn, broken=broken)
