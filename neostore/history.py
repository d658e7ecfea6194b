"""Reading the transaction log: the newest commit, what changed since a tid, each transaction's records."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from . import errors
from .records import Record, TransactionInfo
from .sql import Query
from .tids import ZERO, Tid, p64, u64

_MAX_INT = (1 << 63) - 1


def last_transaction(query: Query) -> bytes:
    """The tid of the newest committed transaction (8 zero bytes if none)."""
    (row,) = query("SELECT MAX(tid) FROM trans", ())
    return Tid(ZERO if row[0] is None else p64(row[0]))


def changes_since(query: Query, tid: bytes, limit: int) -> list[tuple[bytes, list[bytes]]]:
    """Up to ``limit`` transactions committed after ``tid``, oldest first, with the oids each changed."""
    trans = query("SELECT tid FROM trans WHERE tid > ? ORDER BY tid LIMIT ?", (u64(tid), limit))
    if not trans:
        return []
    first, last = trans[0][0], trans[-1][0]
    changed: dict[int, list[bytes]] = {row[0]: [] for row in trans}
    for t, oid in query("SELECT tid, oid FROM obj WHERE tid >= ? AND tid <= ? ORDER BY tid", (first, last)):
        changed[t].append(p64(oid))
    return [(p64(t), oids) for t, oids in changed.items()]


def transaction_info(query: Query, tid: bytes) -> TransactionInfo:
    """The metadata of committed transaction ``tid``; NeoStoreError if there is none."""
    rows = query("SELECT tid, user, description, ext, packed FROM trans WHERE tid = ?", (u64(tid),))
    if not rows:
        raise errors.NeoStoreError(f"no transaction 0x{tid.hex()}")
    return TransactionInfo.from_row(rows[0])


def iter_transactions(
    query: Query, start: bytes | None, stop: bytes | None, *, newest_first: bool, page: int
) -> Iterator[TransactionInfo]:
    """Committed transactions with ``start <= tid <= stop``, read ``page`` at a time."""
    low = 0 if start is None else u64(start)
    high = _MAX_INT if stop is None else min(u64(stop), _MAX_INT)
    order = "DESC" if newest_first else "ASC"
    while low <= high:
        rows = query(
            "SELECT tid, user, description, ext, packed FROM trans WHERE tid >= ? AND tid <= ? "
            f"ORDER BY tid {order} LIMIT ?",
            (low, high, page),
        )
        for row in rows:
            yield TransactionInfo.from_row(row)
        if len(rows) < page:
            return
        if newest_first:
            high = rows[-1][0] - 1
        else:
            low = rows[-1][0] + 1


def records(query: Query, load_serial: Callable[[bytes, bytes], bytes], tid: bytes) -> Iterator[Record]:
    """The object revisions transaction ``tid`` wrote, by oid; values read with ``load_serial`` lazily."""
    rows = query("SELECT oid, data_id, value_tid FROM obj WHERE tid = ? ORDER BY oid", (u64(tid),))
    for oid, data_id, value_tid in rows:
        boid = p64(oid)
        data = None if data_id is None else load_serial(boid, tid)
        yield Record(boid, tid, data, None if value_tid is None else p64(value_tid))
