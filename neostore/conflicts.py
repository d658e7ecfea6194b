"""The checks vote makes: every expected serial still current, every read still current; resolution."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import errors
from .sql import chunked
from .tids import p64

if TYPE_CHECKING:
    from .transaction import Resolver, Transaction


class ReadChecks:
    """The serials a transaction requires to still be the latest revision of their oid at vote, writing nothing."""

    def __init__(self, required: dict[int, int] | None = None):
        """Checks of ``required`` (``{oid: serial}``, none by default)."""
        self._required: dict[int, int] = {} if required is None else required

    def copy(self) -> ReadChecks:
        """Checks of the same serials, changed independently of these."""
        return ReadChecks(dict(self._required))

    def require(self, ioid: int, serial: int) -> None:
        """Require ``serial`` to be the latest revision of ``ioid`` at vote."""
        self._required[ioid] = serial

    def check(self, txn: Transaction, cur: Any, resolve: Resolver | None) -> list[bytes]:
        """Check every expected and required serial of ``txn`` against ``obj``; the oids ``resolve`` gave
        new values.

        Raises ReadConflictError for a required read that changed, ConflictError
        for a write whose serial is stale and that ``resolve`` (if any) gave up on.
        """
        writes, backend = txn.writes, txn.store_.backend
        checked = writes.checked()
        reads = [oid for oid in self._required if oid not in writes]
        current: dict[int, int] = {}
        for batch in chunked(checked + reads, backend.max_params):
            cur.execute(f"SELECT oid, MAX(tid) FROM obj WHERE oid IN {backend.in_list(len(batch))} GROUP BY oid", batch)
            current.update(cur.fetchall())
        for oid in reads:
            committed, expected = current.get(oid, 0), self._required[oid]
            if committed != expected:
                raise errors.ReadConflictError(oid=p64(oid), serials=(p64(committed), p64(expected)))
        resolved = []
        for oid in checked:
            write = writes.get(oid)
            assert write is not None
            committed = current.get(oid, 0)
            if committed == write.expected:
                continue
            boid, bcommitted, bexpected = p64(oid), p64(committed), p64(write.expected)
            value = txn.uploads.value_of(cur, write)
            if resolve is not None and value is not None and committed and write.expected:
                # The resolved value replaces the write, its old value unreferenced.
                txn.write(boid, bcommitted, resolve(boid, bcommitted, bexpected, value))
                resolved.append(boid)
                continue
            raise errors.ConflictError(oid=boid, serials=(bcommitted, bexpected), data=value)
        return resolved
