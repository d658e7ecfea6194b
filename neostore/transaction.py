"""A Transaction: one two-phase commit of a Store, and the parts it owns.

A transaction owns the parts it asks: its :class:`~neostore.writes.WriteSet`,
its :class:`~neostore.upload.UploadQueue` (the values it sends),
its :class:`~neostore.conflicts.ReadChecks` (the serials vote checks) and
its :class:`~neostore.session.Session` (the write connection and the commit
lock it holds). :mod:`~neostore.undo` and :mod:`~neostore.commit` (vote,
commit, finish, abort) are the steps that drive them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from . import commit as _commit
from . import errors
from . import undo as _undo
from .backends import Backend
from .commit import insert_rows, raise_transient
from .conflicts import ReadChecks
from .guard import guarded
from .session import Session
from .tids import p64, u64
from .undo import backpointer
from .upload import UploadQueue
from .values import value_hash
from .writes import Write, WriteSet

if TYPE_CHECKING:
    from .store import Store

#: ``resolve(oid, committed_serial, expected_serial, new_value) -> value``:
#: called at vote for a store whose expected serial is not current any more.
#: ``undo`` passes a fifth argument, the committed value, when that value is
#: the transaction's own pending one (several undos of one object at once).
Resolver = Callable[..., bytes]

_MAX_INT = (1 << 63) - 1


class Transaction:
    """One two-phase commit: ``write``... then ``vote``, then ``finish`` (or ``commit``, or ``abort``).

    Not thread-safe: one thread drives it. From its first upload (or
    :meth:`lock`) to finish or abort it holds the store's commit lock. A
    database driver's error escaping a method is raised as
    :class:`~neostore.errors.DatabaseError`; conflicts as ConflictError,
    calls out of order as TransactionError.
    """

    def __init__(self, store: Store, user: bytes, description: bytes, extension: bytes, tid: bytes | None):
        """An open transaction of ``store`` with this metadata; made by :meth:`Store.begin`."""
        self.store_ = store
        self.user = bytes(user)
        self.description = bytes(description)
        self.extension = bytes(extension)
        self.requested_tid = None if tid is None else u64(tid)
        self.tid: bytes | None = None
        self.state = "open"
        self.writes = WriteSet()
        self.uploads = UploadQueue(store)
        self.reads = ReadChecks()
        self.session = Session(store)

    @property
    def guarded_backend(self) -> Backend:
        """The backend whose driver errors the public methods translate."""
        return self.store_.backend

    # -- the caller's side ---------------------------------------------------

    @guarded
    def write(
        self,
        oid: bytes,
        serial: bytes | None,
        value: bytes | None,
        *,
        compress: bool = True,
        check: bool = True,
        digest: bytes | None = None,
    ) -> None:
        """Set ``oid`` to ``value`` (None deletes it), expecting ``serial`` to be current.

        ``serial`` is None or zero bytes for a new object. The check happens
        at vote; ``check=False`` skips it (the last writer wins). ``digest``:
        :func:`value_hash` of ``value`` if the caller has it (computed where
        it overlaps other work); it must be exactly that, as it names the value.
        Raises TransactionError unless open, InvalidOidError for an oid past
        63 bits; an early upload the database rolled back aborts the
        transaction and raises TransientDatabaseError.
        """
        self._require("open")
        ioid = u64(oid)
        if ioid > _MAX_INT:
            raise errors.InvalidOidError(f"oid 0x{oid.hex()} is beyond the 63-bit range neostore stores")
        expected = 0 if serial is None else u64(serial)
        write = Write(expected)
        previous = self.writes.get(ioid)
        if previous is not None and previous.hash is not None:
            self.uploads.unref(previous.hash)
        if value is not None:
            value = bytes(value) if not isinstance(value, bytes) else value
            if digest is None:
                digest = value_hash(value)
            write.hash = digest
            self.uploads.add(digest, value, compress=compress)
        write.check = check
        self.writes.set(ioid, write)
        if self.uploads.pending_bytes >= self.store_.flush_bytes:
            try:
                self.uploads.flush(self.session)
            except BaseException as exc:
                if self.store_.backend.is_rolled_back(exc):
                    # What was uploaded is gone with the rollback: this transaction cannot go on.
                    self.abort()
                    raise_transient(self, exc)
                raise

    @guarded
    def lock(self) -> None:
        """Take the commit lock now rather than at the first upload.

        Until finish or abort no other transaction can commit, so what this
        one reads of the latest state stays the latest state: the way to
        read-modify-write without conflicts (an array's shape on append).
        """
        self._require("open")
        self.session.writer()

    @guarded
    def oids_for(self, names: Iterable[bytes], *, create: bool = False) -> dict[bytes, bytes]:
        """:meth:`Store.oids_for` on behalf of this transaction, from any thread.

        On a single-writer engine (SQLite) a transaction holding the commit
        lock also holds the one write lock, so its own connection must bind
        the names.
        """
        return self.store_.oids_for(names, create=create, writer=self.session.connection)

    @guarded
    def pending_value(self, oid: bytes) -> tuple[bool, bytes | None]:
        """``(written, value)``: whether this transaction writes ``oid``, and the value it sets.

        Values already uploaded are read back through the write connection,
        so a transaction's changes never have to fit in memory.
        """
        write = self.writes.get(u64(oid))
        if write is None:
            return False, None
        if write.hash is None:
            if write.data_id is None or write.value_tid is None:
                return True, None
            return True, self.store_.load_serial(oid, p64(write.value_tid))
        waiting = self.uploads.waiting(write.hash)
        if waiting is not None:
            return True, waiting
        return True, self.uploads.value_of(self.session.cursor(), write)

    @guarded
    def restore(self, oid: bytes, value: bytes | None, data_tid: bytes | None = None) -> None:
        """Write a revision copied from elsewhere: no conflict check (copyTransactionsFrom)."""
        self._require("open")
        if value is None and data_tid is not None:
            self.writes.set(u64(oid), backpointer(self, u64(oid), u64(data_tid)))
            return
        self.write(oid, None, value, check=False)

    def check_current(self, oid: bytes, serial: bytes) -> None:
        """Require ``serial`` to still be the latest revision of ``oid`` at vote, writing nothing.

        ZODB's checkCurrentSerialInTransaction: vote raises ReadConflictError
        if it is not; the commit lock held from vote to finish keeps it so.
        """
        self._require("open")
        self.reads.require(u64(oid), u64(serial))

    @guarded
    def undo(self, tid: bytes, resolve: Resolver | None = None) -> list[bytes]:
        """Undo transaction ``tid`` (ZODB transactionalUndo); returns the oids it touches.

        Each object ``tid`` changed gets back the value it had before, reusing
        that data row. An object changed since then is resolved through
        ``resolve(oid, current_serial, undone_serial, value_before)`` if given,
        else UndoError. Several undos in one transaction may touch one
        object: each applies to the state the previous one left (then
        ``resolve`` gets that pending value as a fifth argument).
        """
        self._require("open")
        return _undo.undo(self, tid, resolve)

    @guarded
    def vote(self, resolve: Resolver | None = None) -> list[bytes]:
        """Make everything durable; returns the oids whose values ``resolve`` replaced.

        Raises ConflictError (after aborting) when an expected serial is not
        current and ``resolve`` is absent or gives up.
        """
        self._require("open")
        _, resolved = insert_rows(self, resolve, voted=True)
        self.state = "voted"
        return resolved

    @guarded
    def commit(self, resolve: Resolver | None = None) -> bytes:
        """Vote and finish in one database commit; returns the tid.

        For a caller with nothing to vote in between (no other resource
        manager, unlike ZODB's two-phase commit): the rows go straight to
        ``obj`` and ``trans``, one commit (one log flush) instead of two.
        The same checks and errors as :meth:`vote`; on any error nothing is
        visible and the transaction is aborted.
        """
        self._require("open")
        return _commit.commit(self, resolve)

    @guarded
    def finish(self) -> bytes:
        """Make the voted transaction visible; returns its tid. TransactionError unless voted.

        A connection lost during its COMMIT is settled by asking the database
        (see :meth:`Store.transaction_committed`); CommitOutcomeUnknown if it
        stays out of reach.
        """
        self._require("voted")
        return _commit.finish(self)

    @guarded
    def abort(self) -> None:
        """Forget the transaction. Safe to call in any state, more than once."""
        _commit.abort(self)

    def rewound(self, writes: WriteSet, uploads: UploadQueue, reads: ReadChecks) -> None:
        """Go back to a state taken before the first upload (:class:`~neostore.writes.Rewind`), without a tid."""
        self.writes, self.uploads, self.reads, self.tid = writes, uploads, reads, None

    # -- internals -------------------------------------------------------------

    def _require(self, state: str) -> None:
        if self.state != state:
            raise errors.TransactionError(f"the transaction is {self.state}, not {state}")

    @property
    @guarded
    def head(self) -> bytes:
        """The newest committed transaction when this one took the commit lock (taking it now if not yet)."""
        self._require("open")
        self.session.writer()
        return p64(self.session.head)
