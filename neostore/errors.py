"""Exceptions raised by neostore.

Every one of them is a :class:`NeoStoreError`. Those with a ZODB meaning
also subclass ZODB's exception (and ``ValueError`` those for bad arguments),
so code written against ZODB (conflict retries, POSKeyError handling) works
unchanged on a Store and on its ZODB storage.
"""

from __future__ import annotations

from transaction.interfaces import TransientError
from ZODB import POSException
from ZODB.utils import get_pickle_metadata


class NeoStoreError(Exception):
    """The root of every error neostore raises: ``except neostore.NeoStoreError`` catches them all."""


class InvalidURLError(NeoStoreError, ValueError):
    """A store URL that does not follow neostore's URL syntax."""


class BlobLocationError(InvalidURLError):
    """The URL's ``?blobs=`` is not where the store keeps its big values (another location, or none).

    The message gives the whole URL to open the store with.
    """


class StoreNotFoundError(NeoStoreError):
    """No store exists where the URL points, and the open was not one that creates it.

    Only ``neostore.open(url)`` with ``create`` true (the default of a
    writable open) makes a store; ``read_only`` opens and ``create=False``
    never do. The message names what was looked at: the absolute path of
    the SQLite file, or the MariaDB database and its server.
    """


class InvalidNameError(NeoStoreError, ValueError):
    """A name (or name suffix) neostore cannot store or look up: too long, or empty where one is needed."""


class InvalidOidError(NeoStoreError, ValueError):
    """An oid outside the range neostore stores (63 bits)."""


class InvalidOptionError(NeoStoreError, ValueError):
    """An option of a Store that is out of its range (the compression level)."""


class SchemaVersionError(NeoStoreError):
    """The database holds a schema this version of neostore cannot use."""


class DatabaseError(NeoStoreError):
    """The backend database failed in a way neostore cannot recover from."""


class StorageUnavailableError(DatabaseError):
    """The database could not be reached or opened: its server went away, its file or directory vanished.

    Raised from a Store's or a Transaction's method in place of the
    driver's error (which is its ``__cause__``); the message names the
    operation and where the store is (never a password).
    """


class TransientDatabaseError(DatabaseError, TransientError):  # type: ignore[misc]  # ZODB is untyped
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


class CorruptDataError(NeoStoreError, POSException.StorageError):  # type: ignore[misc]  # ZODB is untyped
    """A stored value does not match its hash (or cannot be decompressed)."""

    def __init__(
        self,
        oid: bytes,
        tid: bytes | None,
        detail: str,
        cause: str = "the database row was altered outside neostore or the disk is failing",
    ):
        self.oid = oid
        self.tid = tid
        tid_text = tid.hex() if tid is not None else "?"
        super().__init__(f"corrupt value for oid 0x{oid.hex()} at tid 0x{tid_text}: {detail}; {cause}")


class ConflictError(NeoStoreError, POSException.ConflictError):  # type: ignore[misc]  # ZODB is untyped
    """The serial a store was based on is no longer the current one.

    Carries ``oid``, ``serials`` = (committed serial, expected serial) and
    ``data`` (the new value), which is what ZODB conflict resolution needs.
    """

    def __init__(
        self,
        message: str | None = None,
        object: object = None,  # ZODB's keyword
        oid: bytes | None = None,
        serials: tuple[bytes, bytes] | None = None,
        data: bytes | None = None,
    ):
        # ZODB reads a class name out of ``data`` as if it were a pickle; a
        # Store holds any bytes, so a value that is not one must not make
        # the error itself fail.
        # Keywords: ReadConflictError's ZODB base takes ``serials`` third.
        super().__init__(message=message, object=object, oid=oid, serials=serials)  # type: ignore[call-arg]  # the mixins' signatures are not ZODB's
        self.data = data
        if data is not None:
            try:
                self.class_name = ".".join(get_pickle_metadata(data))
            except Exception:  # noqa: BLE001  # unpickling foreign bytes may raise anything; the error must not fail
                self.class_name = "bytes"


class ReadConflictError(ConflictError, POSException.ReadConflictError):  # type: ignore[misc]  # ZODB is untyped
    """An object the transaction required to stay current (``check_current``) changed before vote."""


class ReadOnlyError(NeoStoreError, POSException.ReadOnlyError):  # type: ignore[misc]  # ZODB is untyped
    """A write was attempted on a store opened read-only."""


class POSKeyError(NeoStoreError, POSException.POSKeyError):  # type: ignore[misc]  # ZODB is untyped
    """The object does not exist (at the requested point in time)."""


class UndoError(NeoStoreError, POSException.UndoError):  # type: ignore[misc]  # ZODB is untyped
    """A transaction cannot be undone."""


class Unsupported(NeoStoreError, POSException.Unsupported):  # type: ignore[misc]  # ZODB is untyped
    """A ZODB feature neostore does not have (versions)."""


class TransactionError(NeoStoreError, POSException.StorageTransactionError):  # type: ignore[misc]  # ZODB is untyped
    """The two-phase commit calls were made out of order."""


class CommitLockTimeout(NeoStoreError, POSException.StorageError):  # type: ignore[misc]  # ZODB is untyped
    """Another writer held the commit lock for longer than the timeout."""


class LeaseHeldError(NeoStoreError):
    """Another process runs a long operation of the store (pack, blob sweep, tier moves) and holds its lease.

    A holder that dies gives the lease up: at once on one server or SQLite,
    once the lease runs out on a cluster.
    """


class LeaseLostError(NeoStoreError):
    """A long operation lost its lease (it could not renew it in time, and another process took it over):
    what it committed stays; run it again to finish."""


class BlobStoreError(NeoStoreError):
    """The object store holding a store's big values refused a request (access denied, bad bucket)."""


class BlobStoreUnavailableError(BlobStoreError, StorageUnavailableError):
    """The object store could not be reached, or kept failing (5xx, timeouts) through every retry.

    Nothing of the transaction that met it became visible: values are
    uploaded before their rows are committed. Retrying later works.
    """


class BlobNotFoundError(BlobStoreError):
    """An object store has no object under the key asked for."""
