"""Undoing a committed transaction inside another one (ZODB transactionalUndo), and restore's back-pointers."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import errors
from .tids import p64, u64
from .writes import Write

if TYPE_CHECKING:
    from .transaction import Resolver, Transaction


def backpointer(txn: Transaction, ioid: int, data_tid: int) -> Write:
    """A write reusing revision ``data_tid``'s value of ``ioid`` (restore); UndoError if there is none."""
    rows = txn.store_.query("SELECT data_id FROM obj WHERE oid = ? AND tid = ?", (ioid, data_tid))
    if not rows:
        raise errors.UndoError(f"no revision 0x{data_tid:016x} of oid 0x{ioid:016x} to point back to")
    return Write(0, data_id=rows[0][0], value_tid=data_tid, check=False)


def undo(txn: Transaction, tid: bytes, resolve: Resolver | None = None) -> list[bytes]:
    """Undo transaction ``tid`` (ZODB transactionalUndo) in open transaction ``txn``; returns the oids it touches.

    Each object ``tid`` changed gets back the value it had before, reusing
    that data row. An object changed since then is resolved through
    ``resolve(oid, current_serial, undone_serial, value_before)`` if given,
    else UndoError. Several undos in one transaction may touch one
    object: each applies to the state the previous one left (then
    ``resolve`` gets that pending value as a fifth argument).
    """
    txn.session.writer()
    itid = u64(tid)
    cur = txn.session.cursor()
    cur.execute("SELECT value FROM config WHERE name = 'pack_tid'")
    if itid <= int(cur.fetchone()[0]):
        raise errors.UndoError(f"transaction 0x{tid.hex()} was packed away and cannot be undone")
    cur.execute("SELECT oid, data_id FROM obj WHERE tid = ?", (itid,))
    undone = cur.fetchall()
    if not undone:
        cur.execute("SELECT 1 FROM trans WHERE tid = ?", (itid,))
        if not cur.fetchall():
            raise errors.UndoError(f"no transaction 0x{tid.hex()} to undo")
    oids = []
    for ioid, data_id in undone:
        pending = txn.writes.get(ioid)
        if pending is None:
            cur.execute("SELECT tid, data_id FROM obj WHERE oid = ? ORDER BY tid DESC LIMIT 1", (ioid,))
            current_tid, current_data = cur.fetchone()
            same = current_data == data_id
        else:
            # An earlier undo of this transaction changed the object
            # (ZODB undoMultiple): undo against that pending state.
            current_tid = pending.expected
            same = _same_value(cur, pending, data_id)
        cur.execute(
            "SELECT tid, data_id FROM obj WHERE oid = ? AND tid < ? ORDER BY tid DESC LIMIT 1",
            (ioid, itid),
        )
        before = cur.fetchone()
        before_tid, before_data = before if before else (None, None)
        if same:
            # Dedup makes "undo-identical" a comparison of data ids.
            txn.writes.set(ioid, Write(current_tid, data_id=before_data, value_tid=before_tid))
        elif resolve is not None and before_data is not None and before_tid is not None:
            value_before = txn.store_.load_serial(p64(ioid), p64(before_tid))
            if pending is None:
                resolved = resolve(p64(ioid), p64(current_tid), tid, value_before)
            else:
                committed = _pending_value(txn, cur, ioid, pending)
                if committed is None:
                    raise errors.UndoError("Some data were modified by a later transaction", p64(ioid))
                resolved = resolve(p64(ioid), p64(current_tid), tid, value_before, committed)
            txn.write(p64(ioid), p64(current_tid), resolved)
        else:
            raise errors.UndoError("Some data were modified by a later transaction", p64(ioid))
        oids.append(p64(ioid))
    return oids


def _same_value(cur: Any, write: Write, data_id: int | None) -> bool:
    """Whether a pending write sets the value stored in data row ``data_id``."""
    if write.hash is None:
        return write.data_id == data_id
    if data_id is None:
        return False
    cur.execute("SELECT hash FROM data WHERE id = ?", (data_id,))
    row = cur.fetchone()
    return row is not None and bytes(row[0]) == write.hash


def _pending_value(txn: Transaction, cur: Any, ioid: int, write: Write) -> bytes | None:
    """The value a pending write sets (None for a deletion)."""
    if write.hash is not None:
        return txn.uploads.value_of(cur, write)
    if write.data_id is None or write.value_tid is None:
        return None
    return txn.store_.load_serial(p64(ioid), p64(write.value_tid))
