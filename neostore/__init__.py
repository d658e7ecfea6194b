"""neostore: a deduplicating, history-preserving object store on MariaDB or SQLite.

Modelled on NEO, Nexedi's ZODB storage: values are BLOBs named by oid, every
commit is a transaction with a ZODB-compatible tid, old revisions stay
readable until packed, identical values are stored once.

>>> store = neostore.open("sqlite:///data.db")
>>> txn = store.begin(description=b"first")
>>> txn.write(store.new_oid(), None, b"hello")
>>> txn.vote(); tid = txn.finish()
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .backends.base import NodeState
from .errors import (
    BlobLocationError,
    BlobNotFoundError,
    BlobStoreError,
    BlobStoreUnavailableError,
    CommitLockTimeout,
    CommitOutcomeUnknown,
    ConflictError,
    CorruptDataError,
    DatabaseError,
    InvalidNameError,
    InvalidOidError,
    InvalidOptionError,
    InvalidURLError,
    NeoStoreError,
    POSKeyError,
    ReadConflictError,
    ReadOnlyError,
    SchemaVersionError,
    StorageUnavailableError,
    StoreNotFoundError,
    TransactionError,
    TransientDatabaseError,
    UndoError,
    Unsupported,
)
from .names import NamedRevision
from .replicas import ReplicaState
from .store import Record, Revision, Store, Transaction, TransactionInfo
from .tids import ZERO, Tid, TidError, as_tid, p64, tid_at, u64
from .url import BLOB_THRESHOLD, StoreURL, parse_url, redacted, with_tier
from .values import value_hash

if TYPE_CHECKING:
    from .zodb import NeoStorage


def open(url: str, **options: Any) -> Store:  # the natural name for the entry point, shadowing a builtin
    """Open the store at ``url``; only a writable open with ``create`` (its default) makes one that is missing.

    ``read_only=True`` or ``create=False`` open an existing store only:
    :class:`StoreNotFoundError` (nothing created: no file, no database) if
    there is none. Writers create (``create`` defaults to ``not read_only``),
    readers pass ``read_only=True`` or, to write to a store that must exist
    already, ``create=False``.

    Other options: ``compression_level`` (zstd level, 0 = off),
    ``compression_threads`` (zstd threads a big value compressed alone
    spreads over; default 1, for machines whose cores are otherwise idle),
    ``commit_lock_timeout`` (seconds), ``flush_bytes`` (upload threshold),
    ``in_doubt_timeout`` (seconds to wait for a server that went away during a
    COMMIT, to learn whether it committed), and for a store with a blob tier
    ``blob_grace`` (seconds an unreferenced object is left alone) and
    ``blob_retry_timeout`` (seconds a failing object store request is retried
    before BlobStoreUnavailableError; default two minutes).
    """
    return Store(url, **options)


def ZODBStorage(url: str, **options: Any) -> NeoStorage:  # named as the class it stands for
    """A ZODB storage over the store at ``url``: ``ZODB.DB(neostore.ZODBStorage(url))``."""
    from .zodb import NeoStorage

    return NeoStorage(url, **options)


__all__ = [
    "BLOB_THRESHOLD",
    "ZERO",
    "BlobLocationError",
    "BlobNotFoundError",
    "BlobStoreError",
    "BlobStoreUnavailableError",
    "CommitLockTimeout",
    "CommitOutcomeUnknown",
    "ConflictError",
    "CorruptDataError",
    "DatabaseError",
    "InvalidNameError",
    "InvalidOidError",
    "InvalidOptionError",
    "InvalidURLError",
    "NamedRevision",
    "NeoStoreError",
    "NodeState",
    "POSKeyError",
    "ReadConflictError",
    "ReadOnlyError",
    "Record",
    "ReplicaState",
    "Revision",
    "SchemaVersionError",
    "StorageUnavailableError",
    "Store",
    "StoreNotFoundError",
    "StoreURL",
    "Tid",
    "TidError",
    "Transaction",
    "TransactionError",
    "TransactionInfo",
    "TransientDatabaseError",
    "UndoError",
    "Unsupported",
    "ZODBStorage",
    "as_tid",
    "open",
    "p64",
    "parse_url",
    "redacted",
    "tid_at",
    "u64",
    "value_hash",
    "with_tier",
]
