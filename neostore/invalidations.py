"""Invalidations: what a :class:`~neostore.zodb.NeoStorage` has told its DB of the commits since it opened.

MVCC across processes works by polling: :meth:`Invalidations.poll` asks the
Store for the transactions committed since :attr:`Invalidations.last_tid`
and hands their oids to the DB. Polling and a local commit's finish are
serialised, so invalidations go out in tid order; while a finish runs,
reads by other threads wait (:meth:`Invalidations.wait_finish`) and then
see the new transaction, never a half-announced one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from .store import Store
from .tids import u64
from .transaction import Transaction

# Transactions fetched per polling query; a long-idle instance loops.
_POLL_PAGE = 10000


class Invalidations:
    """The invalidations of one storage: polled from ``store``, delivered to :attr:`db` (None: none yet)."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.db: Any = None  # the DB (an IStorageWrapper) the storage was registered with
        # The newest tid whose invalidations were delivered (lastTransaction).
        self.last_tid = bytes(store.last_transaction())
        self._lock = threading.Lock()
        # Cleared while finish() runs.
        self._idle = threading.Event()
        self._idle.set()
        self._finisher: int | None = None

    def poll(self) -> None:
        """Deliver invalidations for transactions committed since the last poll."""
        with self._lock:
            self._poll()

    def _poll(self) -> None:
        """Hand newer transactions to the DB, oldest first. Caller holds _lock."""
        while True:
            changes = self._store.changes_since(self.last_tid, limit=_POLL_PAGE)
            for tid, oids in changes:
                if self.db is not None:
                    self.db.invalidate(tid, oids)
                self.last_tid = tid
            if len(changes) < _POLL_PAGE:
                return

    def wait_finish(self) -> None:
        """Wait for a :meth:`finish` running in another thread (tid ordering)."""
        if not self._idle.is_set() and self._finisher != threading.get_ident():
            self._idle.wait()

    def finish(self, txn: Transaction, f: Callable[[bytes], None] | None) -> bytes:
        """Make the voted ``txn`` visible, call ``f(tid)`` and return the tid, announced after all older ones."""
        with self._lock:
            self._finisher = threading.get_ident()
            self._idle.clear()
            try:
                # Others' commits are all older than ours (the storage holds the
                # commit lock since vote): announce them first. The newest commit
                # when the lock was taken is the last one announced: none to ask for.
                if txn.session.head != u64(self.last_tid):
                    self._poll()
                tid = bytes(txn.finish())  # ZODB takes exactly bytes, not a Tid
                if f is not None:
                    f(tid)
                self.last_tid = tid
            finally:
                self._finisher = None
                self._idle.set()
        return tid
