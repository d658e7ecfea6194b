"""Exceptions raised by neostore.

They subclass ZODB's exceptions where one exists, so code written against
ZODB (conflict retries, POSKeyError handling) works unchanged on a Store.
"""

from __future__ import annotations

from transaction.interfaces import TransientError
from ZODB import POSException


class NeoStoreError(Exception):
    """Base class of errors that are neostore's own."""


class InvalidURLError(NeoStoreError, ValueError):
    """A store URL that does not follow neostore's URL syntax."""


class StoreNotFoundError(NeoStoreError):
    """No store exists where the URL points, and the open was not one that creates it.

    Only ``neostore.open(url)`` with ``create`` true (the default of a
    writable open) makes a store; ``read_only`` opens and ``create=False``
    never do. The message names what was looked at: the absolute path of
    the SQLite file, or the MariaDB database and its server.
    """


class SchemaVersionError(NeoStoreError):
    """The database holds a schema this version of neostore cannot use."""


class DatabaseError(NeoStoreError):
    """The backend database failed in a way neostore cannot recover from."""


class TransientDatabaseError(DatabaseError, TransientError):
    """The database rolled the transaction back on its own (InnoDB chose it as a deadlock's victim,
    as it may while pack rebuilds a table online); nothing of it was written. Running the same
    transaction again works: ZODB's and ``transaction``'s retry loops do so."""


class CommitOutcomeUnknown(DatabaseError):
    """The connection was lost during a COMMIT, and the database stayed out of reach too long to learn
    whether that transaction committed. ``tid`` is the transaction's; ask
    :meth:`neostore.Store.transaction_committed` once the database is back."""

    def __init__(self, tid: bytes, seconds: float, cause: BaseException):
        self.tid = tid
        super().__init__(
            f"the connection to the database was lost while transaction 0x{tid.hex()} committed, and the "
            f"database could not be reached for {seconds:g} s to learn whether it did ({cause}); once it is "
            "back, Store.transaction_committed(tid) tells"
        )


class CorruptDataError(NeoStoreError, POSException.StorageError):
    """A stored value does not match its hash (or cannot be decompressed)."""

    def __init__(self, oid: bytes, tid: bytes | None, detail: str):
        self.oid = oid
        self.tid = tid
        tid_text = tid.hex() if tid is not None else "?"
        super().__init__(
            f"corrupt value for oid 0x{oid.hex()} at tid 0x{tid_text}: {detail}; "
            "the database row was altered outside neostore or the disk is failing"
        )


class ConflictError(POSException.ConflictError):
    """The serial a store was based on is no longer the current one.

    Carries ``oid``, ``serials`` = (committed serial, expected serial) and
    ``data`` (the new value), which is what ZODB conflict resolution needs.
    """

    def __init__(self, message=None, object=None, oid=None, serials=None, data=None):  # noqa: A002
        # ZODB reads a class name out of ``data`` as if it were a pickle; a
        # Store holds any bytes, so a value that is not one must not make
        # the error itself fail.
        super().__init__(message, object, oid, serials)
        self.data = data
        if data is not None:
            from ZODB.utils import get_pickle_metadata

            try:
                self.class_name = ".".join(get_pickle_metadata(data))
            except Exception:
                self.class_name = "bytes"


class ReadOnlyError(POSException.ReadOnlyError):
    """A write was attempted on a store opened read-only."""


class POSKeyError(POSException.POSKeyError):
    """The object does not exist (at the requested point in time)."""


class UndoError(POSException.UndoError):
    """A transaction cannot be undone."""


class TransactionError(NeoStoreError, POSException.StorageTransactionError):
    """The two-phase commit calls were made out of order."""


class CommitLockTimeout(NeoStoreError, POSException.StorageError):
    """Another writer held the commit lock for longer than the timeout."""
