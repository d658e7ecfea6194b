"""What a transaction does to each oid, and the state it is put back to when the database rolls it back."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .conflicts import ReadChecks
    from .transaction import Transaction
    from .upload import UploadQueue

log = logging.getLogger(__name__)


@dataclass
class Write:
    """What a transaction does to one oid."""

    expected: int  # 0 for a new object
    data_id: int | None = None
    value_tid: int | None = None
    hash: bytes | None = None  # set while the value awaits upload
    check: bool = True  # False for restore, which takes the caller's word


class WriteSet:
    """A transaction's writes, by integer oid: the last write of an oid replaces the ones before."""

    def __init__(self, writes: dict[int, Write] | None = None):
        """The set holding ``writes`` (none by default)."""
        self._writes: dict[int, Write] = {} if writes is None else writes

    def copy(self) -> WriteSet:
        """A set of the same writes, changed independently of this one."""
        # A Write is never changed once made: a new write makes a new one.
        return WriteSet(dict(self._writes))

    def get(self, ioid: int) -> Write | None:
        """The write of ``ioid``, None if the transaction does not write it."""
        return self._writes.get(ioid)

    def set(self, ioid: int, write: Write) -> None:
        """Make ``write`` what the transaction does to ``ioid``."""
        self._writes[ioid] = write

    def __contains__(self, ioid: object) -> bool:
        return ioid in self._writes

    def __iter__(self) -> Iterator[int]:
        return iter(self._writes)

    def items(self) -> Iterator[tuple[int, Write]]:
        """``(oid, write)`` pairs, in the order the oids were first written."""
        return iter(self._writes.items())

    def checked(self) -> list[int]:
        """The oids whose expected serial vote checks."""
        return [oid for oid, w in self._writes.items() if w.check]

    def all_checked(self) -> bool:
        """Whether vote checks the expected serial of every write (none is "the last writer wins")."""
        return all(w.check for w in self._writes.values())


class Rewind:
    """A transaction's state before its first upload, to run vote again after the database rolled it back.

    Only taken while nothing of the transaction is in the database yet (no
    value uploaded early): then the values are all still in memory. What the
    transaction read stays current where the commit lock outlives a rollback
    (a named lock). A cluster's lock ends with the rollback, which means
    another node committed: a transaction whose every write is checked runs
    again all the same (vote checks its serials anew, as ZODB's do), one
    with unchecked writes computed from what it read is left to its caller
    to run again from the start.
    """

    ATTEMPTS = 5

    def __init__(self, txn: Transaction):
        """The rewind point of ``txn`` as it is now."""
        self.txn = txn
        self.writes: WriteSet = txn.writes.copy()
        self.uploads: UploadQueue = txn.uploads.copy()
        self.reads: ReadChecks = txn.reads.copy()
        self.left = self.ATTEMPTS

    @classmethod
    def taken(cls, txn: Transaction) -> Rewind | None:
        """A rewind point of ``txn`` if nothing of it is in the database yet, else None."""
        safe = txn.store_.backend.commit_lock_spans_transactions or txn.writes.all_checked()
        return cls(txn) if txn.uploads.untouched and safe else None

    def after(self, exc: BaseException) -> bool:
        """Put the transaction back as it was if ``exc`` is a rollback worth another attempt; whether it did."""
        txn = self.txn
        if self.left == 0 or txn.session.connection is None or not txn.store_.backend.is_rolled_back(exc):
            return False
        self.left -= 1
        log.warning("the database rolled a transaction back (%s); running it again", exc)
        if not txn.session.begin_again():
            return False
        txn.rewound(self.writes.copy(), self.uploads.copy(), self.reads.copy())
        return True
