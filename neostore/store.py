"""The Store: named byte values with history, committed in two phases.

Objects are named by 8-byte oids. Every commit gets a strictly increasing
8-byte tid (a ZODB TimeStamp). Values are deduplicated by content hash and
compressed when that shrinks them. Readers see only finished transactions.

Commit protocol (NEO's, on one database):

1. ``store`` buffers values; past ``flush_bytes`` they are uploaded early,
   inside a database transaction that is not yet committed.
2. The first upload (or ``vote``) takes the cross-process commit lock; it is
   held until ``finish`` or ``abort``, so tids are handed out in commit order
   and pack cannot prune a row a writer has just deduplicated against.
3. ``vote`` checks every expected serial against the latest revision, writes
   the revisions to ``tobj`` and the metadata to ``ttrans``, and commits: all
   the data is durable, none of it visible.
4. ``finish`` moves the voted rows into ``obj``/``trans`` in one small commit
   (no BLOBs travel): the transaction becomes visible at once, entirely.

A writer killed between vote and finish leaves ``ttrans`` rows behind; the
next process to take the commit lock discards them (and data only they
referenced), so a transaction is either entirely there or not at all.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

from . import errors, history, stats
from ._schema import prepare_database
from .backends import Backend, backend_for
from .backends.base import Lease, NodeState
from .blobs import open_tier
from .blobs.tier import GRACE_SECONDS
from .guard import guarded
from .indoubt import transaction_committed
from .names import NamedRevision, NameIndex
from .oids import OidAllocator
from .pack import PackStats, pack
from .pool import ConnectionPool
from .reads import ValueReader, ValueSink
from .records import Record, Revision, TransactionInfo, ValueUsage
from .replicas import ReplicaReads, ReplicaState
from .sql import Row
from .tids import as_tid, p64
from .transaction import Resolver, Transaction
from .upload import send_to_tier
from .url import StoreURL, parse_url
from .values import ValueCodec

__all__ = ["Record", "Resolver", "Revision", "Store", "Transaction", "TransactionInfo", "ValueUsage"]


class Store:
    """A history-preserving object store on one database. Thread-safe.

    Use :func:`neostore.open` to make one. ``backend`` (its database
    engine) and ``pool`` (its connections, a
    :class:`~neostore.pool.ConnectionPool`) are for neostore's own modules.
    A database driver's error escaping a method is raised as
    :class:`~neostore.errors.DatabaseError` (StorageUnavailableError when the
    database is out of reach); every error raised is a NeoStoreError.
    With a blob tier (``?blobs=``), ``blob_retry_timeout`` bounds how long a
    failing object store request is retried (seconds; None: two minutes)
    before :class:`~neostore.errors.BlobStoreUnavailableError`.
    """

    def __init__(
        self,
        url: str | StoreURL,
        *,
        read_only: bool = False,
        create: bool | None = None,
        compression_level: int = 1,
        compression_threads: int = 1,
        commit_lock_timeout: float = 60.0,
        flush_bytes: int = 64 * 1024 * 1024,
        in_doubt_timeout: float = 180.0,
        blob_grace: float = GRACE_SECONDS,
        blob_retry_timeout: float | None = None,
        lease_seconds: float = 30.0,
        backend: Backend | None = None,
        **backend_options: Any,
    ):
        self.url = url if isinstance(url, StoreURL) else parse_url(url)
        self.read_only = read_only
        # One rule: only a writable open asked to create makes a store (see neostore.open).
        self.create = not read_only if create is None else bool(create) and not read_only
        self.codec = ValueCodec(compression_level, compression_threads)
        self.commit_lock_timeout = commit_lock_timeout
        self.flush_bytes = flush_bytes
        # Long enough for a killed server to restart and finish crash recovery.
        self.in_doubt_timeout = in_doubt_timeout
        #: On a cluster, how long a long operation's lease lasts unless its holder renews it (it does while it
        #: lives): what a holder that died keeps the next one waiting.
        self.lease_seconds = lease_seconds
        self._leases = threading.local()
        self.backend = backend or backend_for(self.url, create=self.create, **backend_options)
        #: Where values of at least ``url.blob_threshold`` bytes go (``?blobs=``), None without a blob tier.
        self.tier = open_tier(self.url, grace=blob_grace, retry=blob_retry_timeout)
        self.pool = ConnectionPool(self.backend)
        self.oids = OidAllocator(self.pool, self.backend)
        #: The worker threads that compress values to upload and check values read.
        self.encoder = ThreadPoolExecutor(max_workers=2, thread_name_prefix="neostore-encode")
        #: The asynchronous replicas snapshot reads may go to (``?replicas=``), None without any.
        self.replicas = (
            ReplicaReads(self.url.replicas, self.backend, self.backend.connect_replica, self.pool.query)
            if self.url.replicas
            else None
        )
        self.reader = ValueReader(self.query, self.backend, self.codec, self.encoder, self.tier)
        self._names = NameIndex(self.pool, read=self.query, new_oids=self.new_oids)
        prepare_database(self)

    @property
    def guarded_backend(self) -> Backend:
        """The backend whose driver errors the public methods translate."""
        return self.backend

    def query(self, sql: str, params: Iterable[Any] = (), /, *, before: bytes | None = None) -> list[Row]:
        """Rows of a read-only statement on the latest committed state, on this thread's reader
        (:meth:`ConnectionPool.query`): the one read path of a store, for neostore's modules and tools.

        ``before``: the statement reads only commits made before that tid (a snapshot read), so a replica
        holding all of them may serve it (:class:`~neostore.replicas.ReplicaReads`)."""
        if before is not None and self.replicas is not None:
            rows = self.replicas.query(sql, params, before)
            if rows is not None:
                return rows
        return self.pool.query(sql, params)

    @guarded
    def node_states(self) -> list[NodeState]:
        """The state of each node of the cluster the store is on (empty on a single server or SQLite)."""
        return self.backend.node_states()

    @guarded
    def replica_states(self) -> list[ReplicaState]:
        """How far each replica of ``?replicas=`` is behind the primary (empty without replicas)."""
        return [] if self.replicas is None else self.replicas.states()

    @guarded
    def transaction_committed(self, tid: bytes, *, timeout: float | None = None) -> bool:
        """Whether transaction ``tid`` committed, once no commit of it can still be under way.

        The session that commits holds the commit lock, which the server
        releases only when that session ends: its COMMIT is then durable or
        rolled back (by crash recovery if the server was killed). So the
        answer is read under the commit lock, on a new connection, retried
        while the database is out of reach for up to ``timeout`` seconds
        (default :attr:`in_doubt_timeout`); past that, DatabaseError.
        """
        return transaction_committed(self.backend, tid, self.in_doubt_timeout if timeout is None else timeout)

    def is_transient(self, exc: BaseException) -> bool:
        """Whether ``exc``, raised by this store or its database's driver, says the store fails for now (locked,
        busy, full, out of reach, rolled back): the same work may succeed later. False for an error the same
        work meets again (a constraint, a syntax error) and for anything that is not the store's.

        A :class:`~neostore.errors.DatabaseError` is judged by the driver's error it was raised from
        (:meth:`Backend.is_transient`).
        """
        transient = (errors.TransientDatabaseError, errors.StorageUnavailableError, errors.CommitLockTimeout)
        if isinstance(exc, transient):
            return True
        if isinstance(exc, errors.DatabaseError) and exc.__cause__ is not None:
            return self.backend.is_transient(exc.__cause__)
        return self.backend.is_transient(exc)

    def close(self) -> None:
        """Close every connection. Transactions still open are abandoned."""
        self.pool.closed = True  # no new reader, while the encoder's last reads finish
        self.encoder.shutdown(wait=True)
        self.pool.close()
        if self.tier is not None:
            self.tier.close()
        if self.replicas is not None:
            self.replicas.close()
        self.backend.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- writing ---------------------------------------------------------------

    def new_oid(self) -> bytes:
        """A fresh oid, never handed out before by any process; ReadOnlyError on a read-only store."""
        return p64(self.new_oids(1)[0])

    @guarded
    def new_oids(self, count: int, *, writer: Any = None) -> list[int]:
        """``count`` fresh oids as integers (allocated in blocks, safe across processes).

        ``writer``: the write connection of a transaction of the caller's,
        which must do the allocation on a :attr:`~neostore.backends.Backend.single_writer` engine.
        Raises ReadOnlyError on a read-only store.
        """
        if self.read_only:
            raise errors.ReadOnlyError()
        return self.oids.new_oids(count, writer=writer)

    @guarded
    def send_ahead(self, values: Mapping[bytes, bytes]) -> None:
        """Start uploading values a transaction will soon write as incompressible (``{value_hash(value): value}``).

        Those the blob tier takes and the database lacks go, without a lock; it returns with the uploads under
        way, so they overlap the commit before. The transaction writing them waits for them, sends nothing more.
        """
        if self.tier is not None and values:
            send_to_tier(self, dict(values), set(values), ahead=True)

    def begin(
        self, user: bytes = b"", description: bytes = b"", extension: bytes = b"", *, tid: bytes | None = None
    ) -> Transaction:
        """Start a transaction. ``tid`` (restore/copy only) imposes the tid. ReadOnlyError on a read-only store."""
        if self.read_only:
            raise errors.ReadOnlyError()
        return Transaction(self, user, description, extension, tid)

    # -- reading ---------------------------------------------------------------

    @guarded
    def load(self, oid: bytes) -> tuple[bytes, bytes]:
        """The latest ``(value, serial)`` of ``oid``; POSKeyError if it has none, CorruptDataError if damaged."""
        return self.reader.load(oid)

    @guarded
    def load_before(self, oid: bytes, before: bytes) -> tuple[bytes, bytes, bytes | None] | None:
        """``(value, serial, next_serial)`` of the revision current just before ``before``: :meth:`ValueReader.load_before`."""
        return self.reader.load_before(oid, before)

    @guarded
    def load_many(
        self,
        oids: Iterable[bytes],
        *,
        batch: int = 8,
        before: bytes | None = None,
        skip_missing: bool = False,
    ) -> Iterator[tuple[bytes | None, bytes | None]]:
        """``(value, serial)`` of the latest revision (before ``before``) of each oid, in order.

        An oid with no value raises POSKeyError, or gives ``(None, None)``
        with ``skip_missing``. See :meth:`ValueReader.load_many`.
        """
        yield from self.reader.load_many(oids, batch=batch, before=before, skip_missing=skip_missing)

    @guarded
    def load_each(self, oids: Iterable[bytes], fn: ValueSink, **bounds: Any) -> None:
        """Call ``fn(oid, value, serial)`` for the latest revision of each oid, in no order, in the threads that
        fetch the values; ``bounds``: ``before``, ``skip_missing``. See :meth:`ValueReader.load_each`."""
        self.reader.load_each(oids, fn, **bounds)

    @guarded
    def load_range(self, oid: bytes, start: int, stop: int | None = None, *, before: bytes | None = None) -> bytes:
        """``value[start:stop]`` of the latest revision (before ``before``): :meth:`ValueReader.load_range`."""
        return self.reader.load_range(oid, start, stop, before=before)

    @guarded
    def load_serial(self, oid: bytes, serial: bytes) -> bytes:
        """The value ``oid`` was given by transaction ``serial``; POSKeyError if none."""
        return self.reader.load_serial(oid, serial)

    @guarded
    def load_revisions(self, oid: bytes, after: bytes, before: bytes | None = None) -> list[tuple[bytes, bytes]]:
        """``(serial, value)`` of every revision after ``after`` (and before ``before``), oldest first."""
        return self.reader.load_revisions(oid, after, before)

    def decode(self, oid: bytes, tid: bytes | None, digest: bytes, compression: int, size: int, stored: Any) -> bytes:
        """A stored row's value, checked against its hash (CorruptDataError if it differs)."""
        return self.reader.decode(oid, tid, digest, compression, size, stored)

    @guarded
    def history(self, oid: bytes, size: int | None = 1) -> list[Revision]:
        """The newest ``size`` revisions of ``oid`` (all when None), newest first; POSKeyError if none."""
        return self.reader.history(oid, size)

    # -- names -------------------------------------------------------------------

    @guarded
    def oids_for(self, names: Iterable[bytes], *, create: bool = False, writer: Any = None) -> dict[bytes, bytes]:
        """The oid bound to each name (see :mod:`neostore.names`).

        Unbound names are left out, or bound to fresh oids if ``create``:
        a binding commits at once and is permanent, and a bound name whose
        object was never written does not exist for any reader. ``writer``:
        the write connection of the caller's transaction, if it holds one.
        """
        if create and self.read_only:
            raise errors.ReadOnlyError()
        return self._names.oids_for(names, create=create, writer=writer)

    def names_settled(self, writer: Any, *, committed: bool) -> None:
        """A transaction's write connection ``writer`` committed (or rolled back) the name bindings it made."""
        self._names.settled(writer, committed=committed)

    @guarded
    def list_names(
        self, prefix: bytes = b"", *, before: bytes | None = None, exact: bool = False
    ) -> list[NamedRevision]:
        """Named objects under ``prefix`` (or named exactly that) that exist before ``before``, by name."""
        return self._names.named(prefix, before=before, exact=exact)

    @guarded
    def list_names_under(self, prefixes: Iterable[bytes], *, before: bytes | None = None) -> list[NamedRevision]:
        """Named objects under any of ``prefixes`` that exist before ``before``, by name, in few queries."""
        return self._names.list_under(prefixes, before=before)

    @guarded
    def names_ending(self, suffix: bytes) -> dict[bytes, bytes]:
        """Every bound name ending with ``suffix``, with its oid; scans all names."""
        return self._names.ending(suffix)

    @guarded
    def name_history(self, prefix: bytes) -> list[TransactionInfo]:
        """Committed transactions that wrote an object named under ``prefix``, oldest first."""
        return self._names.history(prefix)

    # -- history and statistics ----------------------------------------------------

    @guarded
    def last_transaction(self) -> bytes:
        """The tid of the newest committed transaction (8 zero bytes if none)."""
        return history.last_transaction(self.query)

    @guarded
    def changes_since(self, tid: bytes, limit: int = 10000) -> list[tuple[bytes, list[bytes]]]:
        """Transactions committed after ``tid``, oldest first, with the oids each changed.

        At most ``limit`` transactions: call again from the last one returned.
        """
        return history.changes_since(self.query, tid, limit)

    @guarded
    def transaction_info(self, tid: bytes | str) -> TransactionInfo:
        """The metadata of committed transaction ``tid`` (its bytes or its text, ``0x040d6ae3f1dab299``);
        NeoStoreError if there is none."""
        return history.transaction_info(self.query, as_tid(tid))

    @guarded
    def iter_transactions(
        self, start: bytes | None = None, stop: bytes | None = None, *, newest_first: bool = False, page: int = 100
    ) -> Iterator[TransactionInfo]:
        """Committed transactions with ``start <= tid <= stop``, read page by page."""
        yield from history.iter_transactions(self.query, start, stop, newest_first=newest_first, page=page)

    @guarded
    def records(self, tid: bytes | str) -> Iterator[Record]:
        """The object revisions transaction ``tid`` (bytes or text) wrote, by oid; values load lazily."""
        yield from history.records(self.query, self.load_serial, as_tid(tid))

    @guarded
    def value_size(self) -> int:
        """Bytes of values held, as stored (after compression and dedup)."""
        return stats.value_size(self.query)

    @guarded
    def value_usage(self, prefix: bytes | None = None, *, latest: bool = False) -> ValueUsage:
        """What the values of committed revisions take: every revision, or each object's ``latest`` one.

        ``prefix``: only objects named under it (as :meth:`list_names`); None:
        every object. A value shared by several revisions counts once in
        ``values``, ``value_bytes`` and ``stored_bytes``, once per revision in
        ``referenced_bytes``. Reads every revision in range: for reports, not
        for hot paths.
        """
        return stats.value_usage(self.query, prefix, latest=latest)

    @guarded
    def object_count(self) -> int:
        """How many objects exist now (their latest revision is not a deletion)."""
        return stats.object_count(self.query)

    @guarded
    def counts(self) -> dict[str, int]:
        """Row counts of the main tables (for tests and ``windvane store info``)."""
        return stats.counts(self.query)

    @guarded
    def pack_tid(self) -> bytes:
        """The tid of the latest completed pack (zero bytes if never packed)."""
        return stats.pack_tid(self.query)

    # -- maintenance -------------------------------------------------------------

    @contextmanager
    def maintenance(self, what: str) -> Iterator[Lease]:
        """The store's maintenance lease around the block, for ``what`` (pack, blob sweep, moving values): one
        such operation runs at a time, and a holder that dies gives it up (:meth:`Backend.take_lease`).
        LeaseHeldError, naming the holder, when another process runs one. Taken once per thread: an
        operation within another (the sweep of a pack) shares it."""
        held: Lease | None = getattr(self._leases, "held", None)
        if held is not None:
            yield held
            return
        lease = self._take_lease(f"{what} by pid {os.getpid()} on {socket.gethostname()}")
        self._leases.held = lease
        try:
            yield lease
        finally:
            self._leases.held = None
            lease.release()

    @guarded
    def _take_lease(self, holder: str) -> Lease:
        return self.backend.take_lease("maintenance", holder, self.lease_seconds)

    @guarded
    def checkpoint_idle(self) -> bool:
        """For a writer with nothing to commit: shrink the database's log past its bound (SQLite's
        write-ahead log: :meth:`SQLiteBackend.checkpoint_idle`); whether it did."""
        return not self.read_only and self.backend.checkpoint_idle()

    @guarded
    def pack(
        self, tid: bytes, references: Callable[[bytes], Iterable[bytes]] | None = None, **options: Any
    ) -> PackStats:
        """Remove what is invisible at ``tid`` and give the disk back; see :func:`neostore.pack.pack`."""
        return pack(self, tid, references=references, **options)
