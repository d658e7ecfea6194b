"""The checks vote makes: every expected serial still current, every read still current; resolution."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import errors
from .blobs.tier import TIERED
from .sql import chunked
from .tids import p64
from .upload import unref
from .writes import Write

if TYPE_CHECKING:
    from .transaction import Resolver, Transaction


def check_serials(txn: Transaction, cur: Any, resolve: Resolver | None) -> list[bytes]:
    """Check every expected and required serial against ``obj``; the oids ``resolve`` gave new values.

    Raises ReadConflictError for a required read that changed, ConflictError
    for a write whose serial is stale and that ``resolve`` (if any) gave up on.
    """
    checked = [oid for oid, w in txn._writes.items() if w.check]
    reads = [oid for oid in txn._checks if oid not in txn._writes]
    current: dict[int, int] = {}
    for batch in chunked(checked + reads, txn.store_.backend.max_params):
        cur.execute(
            f"SELECT oid, MAX(tid) FROM obj WHERE oid IN {txn.store_.backend.in_list(len(batch))} GROUP BY oid", batch
        )
        current.update(cur.fetchall())
    for oid in reads:
        committed, expected = current.get(oid, 0), txn._checks[oid]
        if committed != expected:
            raise errors.ReadConflictError(oid=p64(oid), serials=(p64(committed), p64(expected)))
    resolved = []
    for oid in checked:
        write = txn._writes[oid]
        committed = current.get(oid, 0)
        if committed == write.expected:
            continue
        boid, bcommitted, bexpected = p64(oid), p64(committed), p64(write.expected)
        value = value_of(txn, cur, write)
        if resolve is not None and value is not None and committed and write.expected:
            new_value = resolve(boid, bcommitted, bexpected, value)
            txn._writes[oid] = Write(committed)
            if write.hash is not None:
                unref(txn, write.hash)
            txn.write(boid, bcommitted, new_value)
            resolved.append(boid)
            continue
        raise errors.ConflictError(oid=boid, serials=(bcommitted, bexpected), data=value)
    return resolved


def value_of(txn: Transaction, cur: Any, write: Write) -> bytes | None:
    """The new value of a write, from memory or (once uploaded) from its row."""
    if write.hash is None:
        return None
    if write.hash in txn._pending:
        return txn._pending[write.hash]
    cur.execute("SELECT compression, size, chunks, value FROM data WHERE hash = ?", (write.hash,))
    compression, size, chunks, stored = cur.fetchone()
    if chunks == TIERED and txn.store_.tier is not None:
        stored = txn.store_.tier.fetch(write.hash, compression)
    elif chunks:
        cur.execute("SELECT value FROM bigdata WHERE data_id = ? ORDER BY seq", (txn._ids[write.hash],))
        stored = b"".join(row[0] for row in cur.fetchall())
    return txn.store_.codec.decode(compression, bytes(stored), size)
