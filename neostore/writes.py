"""What a transaction does to each oid, and the state it is put back to when the database rolls it back."""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .pool import rollback_quietly

if TYPE_CHECKING:
    from .transaction import Transaction

log = logging.getLogger(__name__)


@dataclass
class Write:
    """What a transaction does to one oid."""

    expected: int  # 0 for a new object
    data_id: int | None = None
    value_tid: int | None = None
    hash: bytes | None = None  # set while the value awaits upload
    check: bool = True  # False for restore, which takes the caller's word


class Rewind:
    """A transaction's state before its first upload, to run vote again after the database rolled it back.

    Only taken while nothing of the transaction is in the database yet (no
    value uploaded early): then the values are all still in memory and the
    commit lock, a named lock that a rollback leaves held, keeps what the
    transaction read current.
    """

    ATTEMPTS = 5

    def __init__(self, txn: Transaction):
        self.txn = txn
        self.writes = dict(txn._writes)  # a Write is never changed once made: a new write makes a new one
        self.pending = dict(txn._pending)
        self.pending_bytes = txn._pending_bytes
        self.raw = set(txn._pending_raw)
        self.ids = dict(txn._ids)
        self.refs = Counter(txn._refs)
        self.checks = dict(txn._checks)
        self.left = self.ATTEMPTS

    @classmethod
    def taken(cls, txn: Transaction) -> Rewind | None:
        """A rewind point of ``txn`` if nothing of it is in the database yet, else None."""
        # An orphan is an uploaded value no write sets any more: something was uploaded early.
        return cls(txn) if not txn._inserted and not txn._orphans else None

    def after(self, exc: BaseException) -> bool:
        """Put the transaction back as it was if ``exc`` is a rollback worth another attempt; whether it did."""
        txn = self.txn
        if self.left == 0 or txn._conn is None or not txn.store_.backend.is_rolled_back(exc):
            return False
        self.left -= 1
        log.warning("the database rolled a transaction back (%s); running it again", exc)
        try:
            rollback_quietly(txn._conn)
            txn.store_._names.settled(txn._conn, committed=False)
            txn.store_.backend.begin(txn._conn)
        except Exception:
            return False
        txn._writes = dict(self.writes)
        txn._pending, txn._pending_bytes, txn._pending_raw = dict(self.pending), self.pending_bytes, set(self.raw)
        txn._ids, txn._refs, txn._orphans = dict(self.ids), Counter(self.refs), False
        txn._checks, txn._inserted, txn.tid = dict(self.checks), [], None
        return True
