"""A ZODB storage on a neostore Store: ``ZODB.DB(neostore.ZODBStorage(url))``.

The Store does the work (two-phase commit under a cross-process lock,
history, undo, pack with GC); this module maps ZODB's storage API onto it.

MVCC across processes works by polling, as NEO's and RelStorage's clients
do: ZODB calls :meth:`NeoStorage.sync` at every transaction start, which
asks the Store for the transactions committed since the last one this
instance knows of and hands their oids to the DB as invalidations
(:class:`~neostore.invalidations.Invalidations`).
:meth:`NeoStorage.lastTransaction` returns only that cached tid, so a
connection never reads past the invalidations it has been given.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import zope.interface
from ZODB import POSException
from ZODB._compat import loads
from ZODB.BaseStorage import BaseStorage, DataRecord, TransactionRecord
from ZODB.ConflictResolution import ConflictResolvingStorage
from ZODB.interfaces import (
    IExternalGC,
    IMultiCommitStorage,
    IStorage,
    IStorageIteration,
    IStorageRestoreable,
    IStorageUndoable,
    ReadVerifyingStorage,
)

from . import errors
from .invalidations import Invalidations
from .records import TransactionInfo
from .store import Store
from .tids import ZERO, p64, tid_from_time, u64
from .transaction import Transaction
from .url import StoreURL

log = logging.getLogger(__name__)

# The largest tid both engines store (SQLite integers are signed 64-bit);
# ZODB's own "current" bound, maxtid, is this value too.
_MAX_TID = (1 << 63) - 1


def _as_bytes(text: bytes | str) -> bytes:
    """Transaction metadata as bytes (callers may set ``description`` to a str)."""
    return text.encode("utf-8") if isinstance(text, str) else bytes(text)


def _extension_items(extension: bytes) -> dict[str, Any]:
    """The extension dict of a transaction; {} if it cannot be unpickled."""
    if not extension:
        return {}
    try:
        items = loads(extension)
    except Exception:  # noqa: BLE001  # unpickling what foreign code wrote may raise anything; informational only
        return {}
    return items if isinstance(items, dict) else {}


def _history_entries(store: Store, oid: bytes, size: int) -> list[dict[str, Any]]:
    """:meth:`NeoStorage.history`'s entries: the store's revisions as ZODB's dicts, extension keys added."""
    out = []
    for rev in store.history(oid, size):
        entry: dict[str, Any] = {
            "time": rev.time,
            "tid": rev.tid,
            "serial": rev.tid,
            "user_name": rev.user,
            "description": rev.description,
            "size": rev.size,
        }
        for key, value in _extension_items(rev.extension).items():
            entry.setdefault(key, value)
        out.append(entry)
    return out


def _undo_log(
    store: Store, first: int, last: int, filter: Callable[[dict[str, Any]], bool] | None
) -> list[dict[str, Any]]:
    """:meth:`NeoStorage.undoLog`'s entries, newest first; packed transactions end the log."""
    if last < 0:
        last = first - last
    out: list[dict[str, Any]] = []
    index = 0
    if index >= last:
        return out
    for info in store.iter_transactions(newest_first=True, page=max(20, min(last, 1000))):
        if info.packed:
            break
        entry = {"id": bytes(info.tid), "time": info.time, "user_name": info.user, "description": info.description}
        for key, value in _extension_items(info.extension).items():
            entry.setdefault(key, value)
        if filter is not None and not filter(entry):
            continue
        if index >= first:
            out.append(entry)
        index += 1
        if index >= last:
            break
    return out


class NeoTransactionRecord(TransactionRecord):  # type: ignore[misc]  # ZODB is untyped
    """One committed transaction, as ZODB's iterator() yields it.

    ``extension`` is kept as the stored bytes (``extension_bytes``), so a
    copy made with copyTransactionsFrom is byte-identical.
    """

    def __init__(self, store: Store, info: TransactionInfo):
        TransactionRecord.__init__(
            self, bytes(info.tid), "p" if info.packed else " ", info.user, info.description, info.extension
        )
        self._store = store

    def __iter__(self) -> Iterator[DataRecord]:
        # Re-read on every iteration: a record iterator may be consumed twice.
        for record in self._store.records(self.tid):
            yield DataRecord(record.oid, record.tid, record.data, record.data_tid)


@zope.interface.implementer(
    IStorage,
    IMultiCommitStorage,
    IStorageIteration,
    IStorageUndoable,
    IStorageRestoreable,
    IExternalGC,
    ReadVerifyingStorage,
)
class NeoStorage(ConflictResolvingStorage, BaseStorage):  # type: ignore[misc]  # ZODB is untyped
    """ZODB storage over the neostore database at ``url``.

    Options: ``read_only``; ``pack_gc`` (default True: pack collects
    objects unreachable from the root); ``name`` (getName/sortKey, default
    the URL without password); the rest go to :class:`neostore.Store`
    (``compression_level``, ``commit_lock_timeout``, ...).
    """

    _transaction: Any  # the ZODB transaction being committed: BaseStorage's

    def __init__(
        self,
        url: str | StoreURL,
        *,
        read_only: bool = False,
        pack_gc: bool = True,
        name: str | None = None,
        **options: Any,
    ):
        self._store = Store(url, read_only=read_only, **options)
        BaseStorage.__init__(self, name or self._store.url.display_name)
        self._is_read_only = read_only
        self._pack_gc = pack_gc
        self._txn: Transaction | None = None  # the Store transaction of the 2PC in progress
        self._invalidations = Invalidations(self._store)
        self._closed = False

    def __repr__(self) -> str:
        return f"<NeoStorage {self.__name__}>"

    @property
    def backing_store(self) -> Store:
        """The :class:`neostore.Store` this storage keeps its objects in (``store`` is ZODB's method)."""
        return self._store

    @property
    def pack_gc(self) -> bool:
        """Whether pack collects objects unreachable from the root."""
        return self._pack_gc

    # -- lifecycle -------------------------------------------------------------

    def registerDB(self, db: Any) -> None:
        """Remember the DB (an IStorageWrapper) to send it polled invalidations."""
        super().registerDB(db)
        self._invalidations.db = db

    def close(self) -> None:
        """Close the Store's connections. Idempotent."""
        if not self._closed:
            self._closed = True
            self._store.close()

    def cleanup(self) -> None:
        """Old test-framework hook; the database is the caller's to drop."""

    # -- information -----------------------------------------------------------

    def getSize(self) -> int:
        """Bytes of stored values (after compression and dedup)."""
        return self._store.value_size()

    def __len__(self) -> int:
        return self._store.object_count()

    def supportsUndo(self) -> bool:
        """True: transactions can be undone until packed away."""
        return True

    def lastTransaction(self) -> bytes:
        """The newest tid whose invalidations this instance has delivered."""
        self._invalidations.wait_finish()
        return self._invalidations.last_tid

    # -- MVCC: polling for other processes' commits ----------------------------

    def sync(self, force: bool = True) -> None:
        """Deliver invalidations for transactions committed since the last poll."""
        self._invalidations.poll()

    def _wait_finish(self) -> None:
        """Wait for a tpc_finish running in another thread (tid ordering)."""
        self._invalidations.wait_finish()

    # -- reads -----------------------------------------------------------------

    def load(self, oid: bytes, version: str = "") -> tuple[bytes, bytes]:
        """The current ``(data, serial)`` of ``oid`` (pre-MVCC API)."""
        self._wait_finish()
        return self._store.load(oid)

    def getTid(self, oid: bytes) -> bytes:
        """The current serial of ``oid``; POSKeyError if it has none (or was deleted)."""
        return self.load(oid)[1]

    def loadBefore(self, oid: bytes, tid: bytes) -> tuple[bytes, bytes, bytes | None] | None:
        """``(data, serial, next_serial)`` current before ``tid``; None if created later, POSKeyError if none."""
        self._wait_finish()
        before = min(u64(tid), _MAX_TID)
        return self._store.load_before(oid, p64(before))

    def loadSerial(self, oid: bytes, serial: bytes) -> bytes:
        """The data transaction ``serial`` gave ``oid``; POSKeyError if it gave none."""
        self._wait_finish()
        return self._store.load_serial(oid, serial)

    def history(self, oid: bytes, size: int = 1) -> list[dict[str, Any]]:
        """Newest first: dicts with time, tid, serial, user_name, description, size (+ extension)."""
        self._wait_finish()
        return _history_entries(self._store, oid, size)

    def iterator(self, start: bytes | None = None, stop: bytes | None = None) -> Iterator[NeoTransactionRecord]:
        """Transactions with ``start <= tid <= stop`` as of now (later commits are not seen)."""
        last = self._store.last_transaction()
        if stop is None or stop > last:
            stop = last
        return self._iterate(start, stop)

    def _iterate(self, start: bytes | None, stop: bytes) -> Iterator[NeoTransactionRecord]:
        if stop == ZERO:
            return
        for info in self._store.iter_transactions(start, stop):
            yield NeoTransactionRecord(self._store, info)

    # -- undo log ----------------------------------------------------------------

    def undoLog(
        self, first: int = 0, last: int = -20, filter: Callable[[dict[str, Any]], bool] | None = None
    ) -> list[dict[str, Any]]:  # filter: ZODB's name
        """Undoable transactions, newest first, sliced ``[first:last]`` after ``filter``.

        A negative ``last`` means at most ``-last`` entries. Packed
        transactions cannot be undone and end the log.
        """
        return _undo_log(self._store, first, last, filter)

    # -- two-phase commit --------------------------------------------------------

    def new_oid(self) -> bytes:
        """A fresh oid, unique across processes."""
        return self._store.new_oid()

    def tpc_begin(self, transaction: Any, tid: bytes | None = None, status: str = " ") -> None:
        """Start a commit; ``tid`` imposes the transaction id (copyTransactionsFrom).

        ``status`` (FileStorage's packed/undo marker) is accepted and ignored.
        """
        if self._is_read_only:
            raise errors.ReadOnlyError()
        if self._transaction is transaction:
            raise errors.TransactionError("Duplicate tpc_begin calls for same transaction")
        self._commit_lock.acquire()
        try:
            self._txn = self._store.begin(
                _as_bytes(transaction.user),
                _as_bytes(transaction.description),
                transaction.extension_bytes,
                tid=tid,
            )
        except BaseException:
            self._commit_lock.release()
            raise
        self._transaction = transaction

    def _check_transaction(self, transaction: Any) -> Transaction:
        """The Store transaction of ``transaction``, the 2PC in progress; TransactionError if it is another."""
        if transaction is not self._transaction or self._txn is None:
            raise errors.TransactionError(self, transaction)
        return self._txn

    def store(self, oid: bytes, serial: bytes | None, data: bytes, version: str, transaction: Any) -> None:
        """Buffer a new revision; the serial is checked (and conflicts resolved) at vote."""
        if self._is_read_only:
            raise errors.ReadOnlyError()
        txn = self._check_transaction(transaction)
        if version:
            raise errors.Unsupported("versions are not supported")
        txn.write(oid, serial, data)

    def restore(
        self, oid: bytes, serial: bytes, data: bytes | None, version: str, prev_txn: bytes | None, transaction: Any
    ) -> None:
        """Write a revision copied from another storage, without conflict check."""
        if self._is_read_only:
            raise errors.ReadOnlyError()
        txn = self._check_transaction(transaction)
        if version:
            raise errors.Unsupported("versions are not supported")
        txn.restore(oid, data, prev_txn)

    def deleteObject(self, oid: bytes, serial: bytes, transaction: Any) -> None:
        """Delete ``oid`` in this transaction; ConflictError at vote if ``serial`` is not current."""
        if self._is_read_only:
            raise errors.ReadOnlyError()
        txn = self._check_transaction(transaction)
        txn.write(oid, serial, None)

    def checkCurrentSerialInTransaction(self, oid: bytes, serial: bytes, transaction: Any) -> None:
        """Require ``serial`` to stay current; ReadConflictError at vote if it is not."""
        txn = self._check_transaction(transaction)
        txn.check_current(oid, serial)

    def undo(self, transaction_id: bytes, transaction: Any) -> tuple[None, list[bytes]]:
        """Revert the changes of ``transaction_id`` in this transaction; returns (None, oids)."""
        if self._is_read_only:
            raise errors.ReadOnlyError()
        txn = self._check_transaction(transaction)
        return None, txn.undo(transaction_id, self._resolve_undo)

    def tpc_vote(self, transaction: Any) -> list[bytes]:
        """Check serials (resolving conflicts) and make the data durable; returns resolved oids."""
        txn = self._check_transaction(transaction)
        return txn.vote(self._resolve)

    def tpc_finish(self, transaction: Any, f: Callable[[bytes], None] | None = None) -> bytes:
        """Make the transaction visible, call ``f(tid)`` and return the tid."""
        txn = self._check_transaction(transaction)
        try:
            if txn.state == "open":  # callers must vote; be lenient like BaseStorage
                txn.vote(self._resolve)
            tid = self._invalidations.finish(txn, f)
        finally:
            self._end_transaction()
        return tid

    def tpc_abort(self, transaction: Any) -> None:
        """Forget the transaction; ignored if it is not the one being committed."""
        if transaction is not self._transaction:
            return
        try:
            if self._txn is not None:
                self._txn.abort()
        finally:
            self._end_transaction()

    def _end_transaction(self) -> None:
        self._txn = None
        self._transaction = None
        self._commit_lock.release()

    # -- conflict resolution -----------------------------------------------------

    def _resolve(self, oid: bytes, committed: bytes, expected: bytes, data: bytes) -> bytes:
        """Vote-time resolver: ZODB's _p_resolveConflict; ConflictError if it gives up."""
        try:
            resolved: bytes = self.tryToResolveConflict(oid, committed, expected, data)
        except POSException.ConflictError as exc:
            if isinstance(exc, errors.ConflictError):
                raise
            # ZODB gives up with its own ConflictError: the same facts, as neostore's.
            raise errors.ConflictError(exc.message, oid=exc.oid, serials=exc.serials, data=data) from None
        return resolved

    def _resolve_undo(
        self, oid: bytes, current: bytes, undone: bytes, data_before: bytes, committed_data: bytes = b""
    ) -> bytes:
        """Undo-time resolver: an unresolvable undo is an UndoError, not a conflict."""
        try:
            resolved: bytes = self.tryToResolveConflict(oid, current, undone, data_before, committed_data)
        except POSException.ConflictError:
            raise errors.UndoError("Some data were modified by a later transaction", oid) from None
        return resolved

    # -- pack --------------------------------------------------------------------

    def pack(self, t: float, referencesf: Callable[[bytes], Iterable[bytes]], gc: bool | None = None) -> None:
        """Drop revisions invisible at time ``t``; with GC, also unreachable objects.

        A pack time at or before the last pack is a no-op (that state is
        already gone); one past the last transaction packs at that transaction.
        """
        if self._is_read_only:
            raise errors.ReadOnlyError()
        last = self._store.last_transaction()
        if last == ZERO:
            return
        pack_tid = min(p64(tid_from_time(t)), last)
        if pack_tid <= self._store.pack_tid():
            return
        use_gc = self._pack_gc if gc is None else gc
        self._store.pack(pack_tid, references=referencesf if use_gc else None)
