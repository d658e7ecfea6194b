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

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from . import errors
from .backends import SCHEMA_VERSION, Backend, backend_for
from .names import NamedRevision, NameIndex
from .names import _range as _name_range  # the name-prefix WHERE clause list_names uses
from .pool import ConnectionPool, rollback_quietly, write_transaction
from .records import Record, Revision, TransactionInfo, ValueUsage
from .sql import chunked, delete_unreferenced_data, placeholders
from .tids import ZERO, next_tid, p64, u64
from .url import StoreURL, parse_url
from .values import RAW, EncodedValue, ValueCodec, value_hash

log = logging.getLogger(__name__)

#: ``resolve(oid, committed_serial, expected_serial, new_value) -> value``:
#: called at vote for a store whose expected serial is no longer current.
#: ``undo`` passes a fifth argument, the committed value, when that value is
#: the transaction's own pending one (several undos of one object at once).
Resolver = Callable[..., bytes]

_MAX_INT = (1 << 63) - 1
# What load_many reads in one query once it has seen how big values are: small documents go thousands
# at a time, chunks a few (memory stays bounded).
_READ_BATCH_BYTES = 8 << 20


@dataclass
class _Write:
    """What a transaction does to one oid."""

    expected: int  # 0 for a new object
    data_id: int | None = None
    value_tid: int | None = None
    hash: bytes | None = None  # set while the value awaits upload
    check: bool = True  # False for restore, which takes the caller's word


class _Rewind:
    """A transaction's state before its first upload, to run vote again after the database rolled it back.

    Only taken while nothing of the transaction is in the database yet (no
    value uploaded early): then the values are all still in memory and the
    commit lock, a named lock that a rollback leaves held, keeps what the
    transaction read current.
    """

    ATTEMPTS = 5

    def __init__(self, txn: Transaction):
        self.txn = txn
        self.writes = dict(txn._writes)  # a _Write is never changed once made: a new write makes a new one
        self.pending = dict(txn._pending)
        self.pending_bytes = txn._pending_bytes
        self.raw = set(txn._pending_raw)
        self.ids = dict(txn._ids)
        self.refs = Counter(txn._refs)
        self.checks = dict(txn._checks)
        self.left = self.ATTEMPTS

    @classmethod
    def taken(cls, txn: Transaction) -> _Rewind | None:
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


class Store:
    """A history-preserving object store on one database. Thread-safe.

    Use :func:`neostore.open` to make one. ``backend`` (its database
    engine) and ``pool`` (its connections, a
    :class:`~neostore.pool.ConnectionPool`) are for neostore's own modules.
    """

    def __init__(
        self,
        url: str | StoreURL,
        *,
        read_only: bool = False,
        create: bool | None = None,
        compression_level: int = 1,
        commit_lock_timeout: float = 60.0,
        flush_bytes: int = 64 * 1024 * 1024,
        in_doubt_timeout: float = 180.0,
        backend: Backend | None = None,
        **backend_options: Any,
    ):
        self.url = url if isinstance(url, StoreURL) else parse_url(url)
        self.read_only = read_only
        # One rule: only a writable open asked to create makes a store (see neostore.open).
        self.create = not read_only if create is None else bool(create) and not read_only
        self.codec = ValueCodec(compression_level)
        self.commit_lock_timeout = commit_lock_timeout
        self.flush_bytes = flush_bytes
        # Long enough for a killed server to restart and finish crash recovery.
        self.in_doubt_timeout = in_doubt_timeout
        self.backend = backend or backend_for(self.url, create=self.create, **backend_options)
        self.pool = ConnectionPool(self.backend)
        self._oid_lock = threading.Lock()
        self._oid_block: list[int] = []
        # Oids below this were handed out by a committed oidgen bump: a commit writing
        # only such oids need not advance oidgen (see Transaction._advance_oidgen).
        self._oid_horizon = 0
        self._encoder = ThreadPoolExecutor(max_workers=2, thread_name_prefix="neostore-encode")
        # Names read through _query, looked up at each call: the one read path of a store.
        self._names = NameIndex(self.pool, read=lambda sql, params=(): self._query(sql, params),
                                new_oids=self.new_oids)
        self._prepare_database()

    # -- setup ---------------------------------------------------------------

    def _prepare_database(self) -> None:
        conn = self.backend.connect(for_writing=True)
        try:
            cur = conn.cursor()
            version = self._schema_version(cur)
            if version is None:
                if not self.create:
                    raise errors.StoreNotFoundError(
                        f"no store in {self.backend.location}: it holds no neostore tables"
                    )
                version = self._create_database(conn)
            if version > SCHEMA_VERSION:
                raise errors.SchemaVersionError(
                    f"{self.url} has schema version {version}, newer than this neostore's "
                    f"{SCHEMA_VERSION}: upgrade windvane to open it"
                )
            elif version < SCHEMA_VERSION:
                if self.read_only:
                    raise errors.SchemaVersionError(
                        f"{self.url} has schema version {version}; this neostore needs {SCHEMA_VERSION}: "
                        "open it writable once to upgrade it"
                    )
                self._upgrade_database(conn, version)
            if not self.read_only:
                self._discard_unfinished(conn, timeout=0)
        finally:
            self.backend.close_connection(conn)

    def _create_database(self, conn: Any) -> int:
        """Create the schema once, even when several processes open a new database at once."""
        self.backend.acquire_commit_lock(conn, self.commit_lock_timeout)
        try:
            version = self._schema_version(conn.cursor())
            if version is None:
                self.backend.create_schema(conn)
                self._init_rows(conn)
                version = SCHEMA_VERSION
        finally:
            self.backend.release_commit_lock(conn)
        return version

    def _upgrade_database(self, conn: Any, version: int) -> None:
        """Bring an older schema up to date. Version 2 only added tables."""
        self.backend.acquire_commit_lock(conn, self.commit_lock_timeout)
        try:
            if self._schema_version(conn.cursor()) < SCHEMA_VERSION:
                log.info("upgrading %s from schema version %d to %d", self.url, version, SCHEMA_VERSION)
                self.backend.create_schema(conn)
                with write_transaction(self.backend, conn):
                    cur = conn.cursor()
                    cur.execute("UPDATE config SET value = ? WHERE name = 'version'", (str(SCHEMA_VERSION),))
        finally:
            self.backend.release_commit_lock(conn)

    def _schema_version(self, cur: Any) -> int | None:
        # Ask whether the table exists rather than catch a failing SELECT:
        # the MariaDB connector keeps a failed statement's exception, and with
        # it the connection, alive.
        if not self.backend.has_table(cur, "config"):
            rollback_quietly(cur.connection)
            return None
        cur.execute("SELECT value FROM config WHERE name='version'")
        row = cur.fetchone()
        rollback_quietly(cur.connection)
        return int(row[0]) if row else None

    def _init_rows(self, conn: Any) -> None:
        with write_transaction(self.backend, conn):
            cur = conn.cursor()
            cur.execute("SELECT COUNT(*) FROM config WHERE name='version'")
            if cur.fetchone()[0] == 0:
                cur.execute("INSERT INTO config (name, value) VALUES ('version', ?)", (str(SCHEMA_VERSION),))
                cur.execute("INSERT INTO config (name, value) VALUES ('pack_tid', '0')")
                cur.execute("INSERT INTO oidgen (id, next_oid) VALUES (0, 1)")

    # -- connections -----------------------------------------------------------

    def _query(self, sql: str, params: Iterable = ()) -> list[tuple]:
        """Rows of a read-only statement, on this thread's reader: :meth:`ConnectionPool.query`."""
        return self.pool.query(sql, params)

    def transaction_committed(self, tid: bytes, *, timeout: float | None = None) -> bool:
        """Whether transaction ``tid`` committed, once no commit of it can still be under way.

        The session that commits holds the commit lock, which the server
        releases only when that session ends: its COMMIT is then durable or
        rolled back (by crash recovery if the server was killed). So the
        answer is read under the commit lock, on a new connection, retried
        while the database is out of reach for up to ``timeout`` seconds
        (default :attr:`in_doubt_timeout`); past that, DatabaseError.
        """
        timeout = self.in_doubt_timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        delay = 0.1
        while True:
            conn = None
            try:
                conn = self.backend.connect(for_writing=True)
                self.backend.acquire_commit_lock(conn, max(1.0, deadline - time.monotonic()))
                cur = conn.cursor()
                cur.execute("SELECT 1 FROM trans WHERE tid = ?", (u64(tid),))
                found = cur.fetchone() is not None
                cur.close()
                self.backend.release_commit_lock(conn)
                return found
            except Exception as exc:
                retry = isinstance(exc, (errors.DatabaseError, errors.CommitLockTimeout)) or \
                    self.backend.is_connection_lost(exc)
                if not retry:
                    raise
                if time.monotonic() + delay > deadline:
                    raise errors.DatabaseError(f"the database stayed out of reach for {timeout:g} s: {exc}") from exc
            finally:
                if conn is not None:
                    self.backend.close_connection(conn)
            time.sleep(delay)
            delay = min(2 * delay, 2.0)

    def close(self) -> None:
        """Close every connection. Transactions still open are abandoned."""
        self.pool.closed = True  # no new reader, while the encoder's last reads finish
        self._encoder.shutdown(wait=True)
        self.pool.close()
        self.backend.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- oids ------------------------------------------------------------------

    def new_oid(self) -> bytes:
        """A fresh oid, never handed out before by any process."""
        return p64(self.new_oids(1)[0])

    def new_oids(self, count: int, *, writer: Any = None) -> list[int]:
        """``count`` fresh oids as integers (allocated in blocks, safe across processes).

        ``writer``: the write connection of a transaction of the caller's,
        which must do the allocation on a :attr:`~neostore.backends.Backend.single_writer` engine.
        """
        if self.read_only:
            raise errors.ReadOnlyError()
        with self._oid_lock:
            if len(self._oid_block) < count:
                active = writer if writer is not None else self.pool.lock_holder()
                if active is not None and self.backend.single_writer:
                    # One writer (SQLite): this thread's open write transaction
                    # would block a second connection, so allocate inside it. If it
                    # aborts, the bump is undone and oidgen hands the same oids out
                    # again: so take exactly what is needed, and keep no block.
                    need = count - len(self._oid_block)
                    first = self._bump_oidgen(active, need)
                    self._oid_block.extend(range(first, first + need))
            while len(self._oid_block) < count:
                want = max(count - len(self._oid_block), 64)
                first = self._allocate_oids(want)
                self._oid_block.extend(range(first, first + want))
            taken, self._oid_block = self._oid_block[:count], self._oid_block[count:]
            return taken

    def _allocate_oids(self, count: int) -> int:
        """``count`` oids in a commit of their own."""
        with self.pool.writer() as conn:
            first = self._bump_oidgen(conn, count)
        # Committed on its own: oidgen stays at least here (it never goes back).
        self._oid_horizon = max(self._oid_horizon, first + count)
        return first

    @staticmethod
    def _bump_oidgen(conn: Any, count: int) -> int:
        cur = conn.cursor()
        cur.execute("UPDATE oidgen SET next_oid = next_oid + ? WHERE id = 0", (count,))
        cur.execute("SELECT next_oid FROM oidgen WHERE id = 0")
        (after,) = cur.fetchone()
        cur.close()
        return after - count

    # -- writing ---------------------------------------------------------------

    def begin(
        self,
        user: bytes = b"",
        description: bytes = b"",
        extension: bytes = b"",
        *,
        tid: bytes | None = None,
    ) -> Transaction:
        """Start a transaction. ``tid`` (restore/copy only) imposes the tid."""
        if self.read_only:
            raise errors.ReadOnlyError()
        return Transaction(self, user, description, extension, tid)

    def _discard_unfinished(self, conn: Any, timeout: float) -> None:
        """Drop voted-but-unfinished transactions of dead writers.

        Only the commit-lock holder may call this (or it takes the lock with
        ``timeout``, skipping the clean-up if another writer is active).
        """
        owns_lock = timeout is not None and timeout >= 0 and not getattr(conn, "_holds_commit_lock", False)
        if owns_lock:
            try:
                self.backend.acquire_commit_lock(conn, timeout)
            except errors.CommitLockTimeout:
                return
        try:
            cur = conn.cursor()
            cur.execute("SELECT tid FROM ttrans")
            stale = [row[0] for row in cur.fetchall()]
            rollback_quietly(conn)
            if not stale:
                return
            with write_transaction(self.backend, conn):
                cur = conn.cursor()
                for tid in stale:
                    log.warning("discarding transaction 0x%016x: voted but never finished (its writer died)", tid)
                    cur.execute("SELECT DISTINCT data_id FROM tobj WHERE tid = ? AND data_id IS NOT NULL", (tid,))
                    data_ids = [row[0] for row in cur.fetchall()]
                    cur.execute("DELETE FROM tobj WHERE tid = ?", (tid,))
                    cur.execute("DELETE FROM ttrans WHERE tid = ?", (tid,))
                    delete_unreferenced_data(cur, data_ids, self.backend.max_params)
        finally:
            if owns_lock:
                self.backend.release_commit_lock(conn)

    # -- reading ---------------------------------------------------------------

    _VALUE_COLUMNS = "o.tid, o.data_id, d.hash, d.compression, d.size, d.chunks, d.value"

    def load(self, oid: bytes) -> tuple[bytes, bytes]:
        """The latest ``(value, serial)`` of ``oid``; POSKeyError if it has none."""
        rows = self._query(
            f"SELECT {self._VALUE_COLUMNS} FROM obj o {self.backend.obj_pk_hint} "
            "LEFT JOIN data d ON d.id = o.data_id WHERE o.oid = ? ORDER BY o.tid DESC LIMIT 1",
            (u64(oid),),
        )
        if not rows or rows[0][1] is None:
            raise errors.POSKeyError(oid)
        return self._value(oid, rows[0]), p64(rows[0][0])

    def load_before(self, oid: bytes, before: bytes) -> tuple[bytes, bytes, bytes | None] | None:
        """``(value, serial, next_serial)`` of the revision current just before ``before``.

        None when the object was created at or after ``before``; POSKeyError
        when it does not exist at all or that revision is a deletion.
        ``next_serial`` is None when the revision is still current.
        """
        ioid, ibefore = u64(oid), u64(before)
        rows = self._query(
            f"SELECT {self._VALUE_COLUMNS}, (SELECT MIN(n.tid) FROM obj n WHERE n.oid = ? AND n.tid >= ?) "
            f"FROM obj o {self.backend.obj_pk_hint} LEFT JOIN data d ON d.id = o.data_id "
            "WHERE o.oid = ? AND o.tid < ? ORDER BY o.tid DESC LIMIT 1",
            (ioid, ibefore, ioid, ibefore),
        )
        if not rows:
            if not self._query("SELECT 1 FROM obj WHERE oid = ? LIMIT 1", (ioid,)):
                raise errors.POSKeyError(oid)
            return None
        row = rows[0]
        if row[1] is None:
            raise errors.POSKeyError(oid)
        return self._value(oid, row), p64(row[0]), None if row[7] is None else p64(row[7])

    def load_many(
        self, oids: Iterable[bytes], *, batch: int = 8, before: bytes | None = None, skip_missing: bool = False
    ) -> Iterator[tuple[bytes | None, bytes | None]]:
        """``(value, serial)`` of the latest revision of each oid, in order.

        With ``before``, the revision current just before that tid (a
        snapshot read). Rows are read ``batch`` oids per query at first, and
        checked and decompressed in worker threads while the next batch is
        read, so bulk reads are not serialised behind hashing. Once values
        turn out small, batches grow to hold about ``_READ_BATCH_BYTES``:
        thousands of small documents are read in a few queries. An oid with
        no value raises POSKeyError, or gives ``(None, None)`` with
        ``skip_missing``.
        """
        pool = self._encoder
        pending: list[tuple[bytes, Any]] = []
        bound = "" if before is None else " AND tid < ?"
        extra = [] if before is None else [u64(before)]
        todo, start, step = list(oids), 0, batch
        while start < len(todo):
            group = todo[start : start + step]
            start += len(group)
            keys = [u64(oid) for oid in group]
            rows = self._query(
                f"SELECT o.oid, {self._VALUE_COLUMNS} FROM obj o "
                "JOIN (SELECT oid, MAX(tid) AS tid FROM obj "
                f"WHERE oid IN {placeholders(len(keys))}{bound} GROUP BY oid) m ON m.oid = o.oid AND m.tid = o.tid "
                "LEFT JOIN data d ON d.id = o.data_id",
                keys + extra,
            )
            by_oid = {row[0]: row[1:] for row in rows}
            size = sum(row[5] or 0 for row in rows)  # raw sizes
            step = max(batch, min(self.backend.max_params - 1, _READ_BATCH_BYTES * len(group) // max(size, 1)))
            decoded = []
            for oid, key in zip(group, keys):
                row = by_oid.get(key)
                if row is None or row[1] is None:
                    if skip_missing:
                        decoded.append((None, None))
                        continue
                    raise errors.POSKeyError(oid)
                decoded.append((p64(row[0]), pool.submit(self._value, oid, row)))
            # Hand back the previous batch only now: its checks ran while
            # this batch was being read.
            for serial, future in pending:
                yield (None if future is None else future.result()), serial
            pending = decoded
        for serial, future in pending:
            yield (None if future is None else future.result()), serial

    def load_range(self, oid: bytes, start: int, stop: int | None = None, *, before: bytes | None = None) -> bytes:
        """``value[start:stop]`` of the latest revision (before ``before`` if given).

        A value stored uncompressed is sliced by the database, so only the
        range travels; such a partial read is not checked against the
        value's hash (a whole-value load is). A negative ``start`` counts
        from the end. POSKeyError when the object has no value.
        """
        bound = "" if before is None else " AND tid < ?"
        ioid = u64(oid)
        rows = self._query(
            "SELECT o.tid, o.data_id, d.compression, d.size, d.chunks FROM obj o "
            "LEFT JOIN data d ON d.id = o.data_id "
            f"WHERE o.oid = ? AND o.tid = (SELECT MAX(tid) FROM obj WHERE oid = ?{bound})",
            (ioid, ioid) if before is None else (ioid, ioid, u64(before)),
        )
        if not rows or rows[0][1] is None:
            raise errors.POSKeyError(oid)
        tid, data_id, compression, size, chunks = rows[0]
        first, last, _ = slice(start, stop).indices(size)
        if last <= first:
            return b""
        if compression != RAW:
            return self.load_serial(oid, p64(tid))[first:last]
        if not chunks:
            (row,) = self._query("SELECT SUBSTR(value, ?, ?) FROM data WHERE id = ?", (first + 1, last - first, data_id))
            return bytes(row[0])
        piece = self.backend.split_size
        parts = []
        for seq in range(first // piece, (last - 1) // piece + 1):
            low, high = max(first - seq * piece, 0), min(last - seq * piece, piece)
            (row,) = self._query(
                "SELECT SUBSTR(value, ?, ?) FROM bigdata WHERE data_id = ? AND seq = ?",
                (low + 1, high - low, data_id, seq),
            )
            parts.append(bytes(row[0]))
        return b"".join(parts)

    def load_serial(self, oid: bytes, serial: bytes) -> bytes:
        """The value ``oid`` was given by transaction ``serial``."""
        rows = self._query(
            f"SELECT {self._VALUE_COLUMNS} FROM obj o LEFT JOIN data d ON d.id = o.data_id "
            "WHERE o.oid = ? AND o.tid = ?",
            (u64(oid), u64(serial)),
        )
        if not rows or rows[0][1] is None:
            raise errors.POSKeyError(oid)
        return self._value(oid, rows[0])

    def load_revisions(self, oid: bytes, after: bytes, before: bytes | None = None) -> list[tuple[bytes, bytes]]:
        """``(serial, value)`` of every revision of ``oid`` committed after ``after`` (and before ``before``),
        oldest first, in one query; deletions are left out.

        For values kept as a chain of revisions, each holding what its
        transaction added: reading the chain costs one round trip, not one
        per revision.
        """
        bound, params = ("", (u64(oid), u64(after))) if before is None else (
            " AND o.tid < ?", (u64(oid), u64(after), u64(before)))
        rows = self._query(
            f"SELECT {self._VALUE_COLUMNS} FROM obj o LEFT JOIN data d ON d.id = o.data_id "
            f"WHERE o.oid = ? AND o.tid > ?{bound} ORDER BY o.tid",
            params,
        )
        return [(p64(row[0]), self._value(oid, row)) for row in rows if row[1] is not None]

    def _value(self, oid: bytes, row: tuple) -> bytes:
        tid, data_id, digest, compression, size, chunks, stored = row[:7]
        if digest is None:
            raise errors.CorruptDataError(oid, p64(tid), f"data row {data_id} is missing")
        if chunks:
            stored = self._big_value(data_id, chunks)
        return self.decode(oid, p64(tid), bytes(digest), compression, size, stored)

    def _big_value(self, data_id: int, chunks: int) -> bytes:
        rows = self._query("SELECT value FROM bigdata WHERE data_id = ? ORDER BY seq", (data_id,))
        if len(rows) != chunks:
            return b""  # the hash check then names the corruption
        return b"".join(row[0] for row in rows)

    def decode(self, oid: bytes, tid: bytes | None, digest: bytes, compression: int, size: int, stored: Any) -> bytes:
        """A stored row's value, checked against its hash (CorruptDataError if it differs)."""
        try:
            value = self.codec.decode(compression, bytes(stored), size)
        except ValueError as exc:
            raise errors.CorruptDataError(oid, tid, str(exc)) from None
        if len(value) != size or value_hash(value) != digest:
            raise errors.CorruptDataError(oid, tid, "the value does not match its blake3 hash")
        return value

    def history(self, oid: bytes, size: int | None = 1) -> list[Revision]:
        """The newest ``size`` revisions of ``oid`` (all when None), newest first."""
        limit = "" if size is None else f" LIMIT {int(size)}"
        rows = self._query(
            "SELECT o.tid, d.size, t.user, t.description, t.ext FROM obj o "
            "JOIN trans t ON t.tid = o.tid LEFT JOIN data d ON d.id = o.data_id "
            f"WHERE o.oid = ? ORDER BY o.tid DESC{limit}",
            (u64(oid),),
        )
        if not rows:
            raise errors.POSKeyError(oid)
        return [Revision(p64(r[0]), r[1] or 0, bytes(r[2]), bytes(r[3]), bytes(r[4])) for r in rows]

    # -- names -------------------------------------------------------------------

    def oids_for(self, names: Iterable[bytes], *, create: bool = False) -> dict[bytes, bytes]:
        """The oid bound to each name (see :mod:`neostore.names`).

        Unbound names are left out, or bound to fresh oids if ``create``:
        a binding commits at once and is permanent, and a bound name whose
        object was never written does not exist for any reader.
        """
        if create and self.read_only:
            raise errors.ReadOnlyError()
        return self._names.oids_for(names, create=create)

    def list_names(
        self, prefix: bytes = b"", *, before: bytes | None = None, exact: bool = False
    ) -> list[NamedRevision]:
        """Named objects under ``prefix`` (or named exactly that) that exist before ``before``, by name."""
        return self._names.list(prefix, before=before, exact=exact)

    def list_names_under(self, prefixes: Iterable[bytes], *, before: bytes | None = None) -> list[NamedRevision]:
        """Named objects under any of ``prefixes`` that exist before ``before``, by name, in few queries."""
        return self._names.list_under(prefixes, before=before)

    def names_ending(self, suffix: bytes) -> dict[bytes, bytes]:
        """Every bound name ending with ``suffix``, with its oid; scans all names."""
        return self._names.ending(suffix)

    def name_history(self, prefix: bytes) -> list[TransactionInfo]:
        """Committed transactions that wrote an object named under ``prefix``, oldest first."""
        return self._names.history(prefix)

    def last_transaction(self) -> bytes:
        """The tid of the newest committed transaction (8 zero bytes if none)."""
        (row,) = self._query("SELECT MAX(tid) FROM trans")
        return ZERO if row[0] is None else p64(row[0])

    def changes_since(self, tid: bytes, limit: int = 10000) -> list[tuple[bytes, list[bytes]]]:
        """Transactions committed after ``tid``, oldest first, with the oids each changed.

        At most ``limit`` transactions: call again from the last one returned.
        """
        trans = self._query("SELECT tid FROM trans WHERE tid > ? ORDER BY tid LIMIT ?", (u64(tid), limit))
        if not trans:
            return []
        first, last = trans[0][0], trans[-1][0]
        changed: dict[int, list[bytes]] = {row[0]: [] for row in trans}
        for t, oid in self._query("SELECT tid, oid FROM obj WHERE tid >= ? AND tid <= ? ORDER BY tid", (first, last)):
            changed[t].append(p64(oid))
        return [(p64(t), oids) for t, oids in changed.items()]

    def transaction_info(self, tid: bytes) -> TransactionInfo:
        rows = self._query("SELECT tid, user, description, ext, packed FROM trans WHERE tid = ?", (u64(tid),))
        if not rows:
            raise errors.NeoStoreError(f"no transaction 0x{tid.hex()}")
        return TransactionInfo.from_row(rows[0])

    def iter_transactions(
        self, start: bytes | None = None, stop: bytes | None = None, *, newest_first: bool = False, page: int = 100
    ) -> Iterator[TransactionInfo]:
        """Committed transactions with ``start <= tid <= stop``, read page by page."""
        low = 0 if start is None else u64(start)
        high = _MAX_INT if stop is None else min(u64(stop), _MAX_INT)
        order = "DESC" if newest_first else "ASC"
        while low <= high:
            rows = self._query(
                "SELECT tid, user, description, ext, packed FROM trans WHERE tid >= ? AND tid <= ? "
                f"ORDER BY tid {order} LIMIT ?",
                (low, high, page),
            )
            for row in rows:
                yield TransactionInfo.from_row(row)
            if len(rows) < page:
                return
            if newest_first:
                high = rows[-1][0] - 1
            else:
                low = rows[-1][0] + 1

    def records(self, tid: bytes) -> Iterator[Record]:
        """The object revisions transaction ``tid`` wrote, by oid; values load lazily."""
        itid = u64(tid)
        rows = self._query(
            "SELECT oid, data_id, value_tid FROM obj WHERE tid = ? ORDER BY oid", (itid,)
        )
        for oid, data_id, value_tid in rows:
            boid = p64(oid)
            data = None if data_id is None else self.load_serial(boid, tid)
            yield Record(boid, tid, data, None if value_tid is None else p64(value_tid))

    def value_size(self) -> int:
        """Bytes of values held, as stored (after compression and dedup)."""
        (row,) = self._query("SELECT COALESCE(SUM(LENGTH(value)), 0) FROM data")
        (big,) = self._query("SELECT COALESCE(SUM(LENGTH(value)), 0) FROM bigdata")
        return int(row[0]) + int(big[0])

    def value_usage(self, prefix: bytes | None = None, *, latest: bool = False) -> ValueUsage:
        """What the values of committed revisions take: every revision, or each object's ``latest`` one.

        ``prefix``: only objects named under it (as :meth:`list_names`); None:
        every object. A value shared by several revisions counts once in
        ``values``, ``value_bytes`` and ``stored_bytes``, once per revision in
        ``referenced_bytes``. Reads every revision in range: for reports, not
        for hot paths.
        """
        joins, clauses, params = "", [], []
        if prefix is not None:
            where, params = _name_range(prefix)
            joins, clauses = " JOIN name n ON n.oid = o.oid", [where]
        if latest:
            clauses.append("o.tid = (SELECT MAX(m.tid) FROM obj m WHERE m.oid = o.oid)")
        where_sql = f" WHERE {' AND '.join(clauses)}" if clauses else ""
        (refs,) = self._query(
            f"SELECT COUNT(*), COALESCE(SUM(d.size), 0) FROM obj o JOIN data d ON d.id = o.data_id{joins}{where_sql}",
            params,
        )
        # A big value's row holds no value: its bytes are its bigdata rows'.
        (distinct,) = self._query(
            "SELECT COUNT(*), COALESCE(SUM(d.size), 0), COALESCE(SUM(COALESCE(LENGTH(d.value), "
            "(SELECT SUM(LENGTH(b.value)) FROM bigdata b WHERE b.data_id = d.id))), 0) FROM data d "
            f"WHERE d.id IN (SELECT o.data_id FROM obj o{joins}{where_sql})",
            params,
        )
        return ValueUsage(int(refs[0]), int(refs[1]), int(distinct[0]), int(distinct[1]), int(distinct[2]))

    def object_count(self) -> int:
        """How many objects exist now (their latest revision is not a deletion)."""
        (row,) = self._query(
            "SELECT COUNT(*) FROM obj o WHERE o.data_id IS NOT NULL "
            "AND o.tid = (SELECT MAX(n.tid) FROM obj n WHERE n.oid = o.oid)"
        )
        return int(row[0])

    def counts(self) -> dict[str, int]:
        """Row counts of the main tables (for tests and ``windvane store info``)."""
        out = {}
        for table in ("trans", "obj", "data", "bigdata", "ttrans", "tobj"):
            (row,) = self._query(f"SELECT COUNT(*) FROM {table}")
            out[table] = int(row[0])
        return out

    def pack_tid(self) -> bytes:
        """The tid of the latest completed pack (zero bytes if never packed)."""
        (row,) = self._query("SELECT value FROM config WHERE name = 'pack_tid'")
        return p64(int(row[0]))

    # -- maintenance -------------------------------------------------------------

    def pack(self, tid: bytes, references: Callable[[bytes], Iterable[bytes]] | None = None, **options: Any):
        """Remove what is invisible at ``tid`` and give the disk back; see :func:`neostore.pack.pack`."""
        from .pack import pack

        return pack(self, tid, references=references, **options)


class Transaction:
    """One two-phase commit: ``store``... then ``vote``, then ``finish`` (or ``abort``)."""

    def __init__(self, store: Store, user: bytes, description: bytes, extension: bytes, tid: bytes | None):
        self.store_ = store
        self.user = bytes(user)
        self.description = bytes(description)
        self.extension = bytes(extension)
        self.requested_tid = None if tid is None else u64(tid)
        self.tid: bytes | None = None
        self.state = "open"
        self._writes: dict[int, _Write] = {}
        self._pending: dict[bytes, bytes] = {}  # hash -> value awaiting upload
        self._pending_bytes = 0
        self._pending_raw: set[bytes] = set()  # hashes of values the caller marked incompressible
        self._ids: dict[bytes, int] = {}  # hash -> data.id, for uploaded or found values
        self._head = 0  # MAX(tid) when the commit lock was taken (see _read_head)
        self._inserted: list[int] = []  # data ids this transaction created
        self._refs: Counter[bytes] = Counter()  # hash -> how many writes set that value
        self._orphans = False  # an uploaded value is no longer set by any write
        self._checks: dict[int, int] = {}  # oid -> serial that must still be current at vote
        self._conn: Any = None
        self._cursors: list[Any] = []  # opened on _conn, closed before it goes back to the pool

    # -- the caller's side ---------------------------------------------------

    def write(
        self, oid: bytes, serial: bytes | None, value: bytes | None, *, compress: bool = True, check: bool = True,
        digest: bytes | None = None,
    ) -> None:
        """Set ``oid`` to ``value`` (None deletes it), expecting ``serial`` to be current.

        ``serial`` is None or zero bytes for a new object. The check happens
        at vote; ``check=False`` skips it (the last writer wins). ``digest``:
        :func:`value_hash` of ``value`` if the caller has it (computed where
        it overlaps other work); it must be exactly that, as it names the value.
        """
        self._require("open")
        ioid = u64(oid)
        if ioid > _MAX_INT:
            raise errors.InvalidOidError(f"oid 0x{oid.hex()} is beyond the 63-bit range neostore stores")
        expected = 0 if serial is None else u64(serial)
        write = _Write(expected)
        previous = self._writes.get(ioid)
        if previous is not None and previous.hash is not None:
            self._unref(previous.hash)
        if value is not None:
            value = bytes(value) if not isinstance(value, bytes) else value
            if digest is None:
                digest = value_hash(value)
            write.hash = digest
            self._refs[digest] += 1
            if digest not in self._ids and digest not in self._pending:
                self._pending[digest] = value
                self._pending_bytes += len(value)
                if not compress:
                    self._pending_raw.add(digest)
        write.check = check
        self._writes[ioid] = write
        if self._pending_bytes >= self.store_.flush_bytes:
            try:
                self._flush()
            except BaseException as exc:
                if self.store_.backend.is_rolled_back(exc):
                    # What was uploaded is gone with the rollback: this transaction cannot go on.
                    self.abort()
                    self._raise_transient(exc)
                raise

    def _unref(self, digest: bytes) -> None:
        """A rewritten object no longer sets this value: drop it if no other write does.

        An object rewritten many times in one transaction (an array's last
        chunk on repeated appends) then uploads only its final value; one
        uploaded before the rewrite is deleted at vote.
        """
        self._refs[digest] -= 1
        if self._refs[digest] > 0:
            return
        del self._refs[digest]
        value = self._pending.pop(digest, None)
        if value is not None:
            self._pending_bytes -= len(value)
            self._pending_raw.discard(digest)
        else:
            self._orphans = True

    def lock(self) -> None:
        """Take the commit lock now rather than at the first upload.

        Until finish or abort no other transaction can commit, so what this
        one reads of the latest state stays the latest state: the way to
        read-modify-write without conflicts (an array's shape on append).
        """
        self._require("open")
        self._writer()

    def oids_for(self, names: Iterable[bytes], *, create: bool = False) -> dict[bytes, bytes]:
        """:meth:`Store.oids_for` on behalf of this transaction, from any thread.

        On a single-writer engine (SQLite) a transaction holding the commit
        lock also holds the one write lock, so its own connection must bind
        the names.
        """
        return self.store_._names.oids_for(names, create=create, writer=self._conn)

    def pending_value(self, oid: bytes) -> tuple[bool, bytes | None]:
        """``(written, value)``: whether this transaction writes ``oid``, and the value it sets.

        Values already uploaded are read back through the write connection,
        so a transaction's changes never have to fit in memory.
        """
        write = self._writes.get(u64(oid))
        if write is None:
            return False, None
        if write.hash is None:
            if write.data_id is None:
                return True, None
            return True, self.store_.load_serial(oid, p64(write.value_tid))
        if write.hash in self._pending:
            return True, self._pending[write.hash]
        return True, self._value_of(self._cursor(), write)

    def restore(self, oid: bytes, value: bytes | None, data_tid: bytes | None = None) -> None:
        """Write a revision copied from elsewhere: no conflict check (copyTransactionsFrom)."""
        self._require("open")
        if value is None and data_tid is not None:
            self._writes[u64(oid)] = self._backpointer(u64(oid), u64(data_tid))
            return
        self.write(oid, None, value, check=False)

    def check_current(self, oid: bytes, serial: bytes) -> None:
        """Require ``serial`` to still be the latest revision of ``oid`` at vote, writing nothing.

        ZODB's checkCurrentSerialInTransaction: vote raises ReadConflictError
        if it is not; the commit lock held from vote to finish keeps it so.
        """
        self._require("open")
        self._checks[u64(oid)] = u64(serial)

    def _backpointer(self, ioid: int, data_tid: int) -> _Write:
        rows = self.store_._query("SELECT data_id FROM obj WHERE oid = ? AND tid = ?", (ioid, data_tid))
        if not rows:
            raise errors.UndoError(f"no revision 0x{data_tid:016x} of oid 0x{ioid:016x} to point back to")
        return _Write(0, data_id=rows[0][0], value_tid=data_tid, check=False)

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
        self._writer()
        itid = u64(tid)
        cur = self._cursor()
        cur.execute("SELECT value FROM config WHERE name = 'pack_tid'")
        if itid <= int(cur.fetchone()[0]):
            raise errors.UndoError(f"transaction 0x{tid.hex()} was packed away and cannot be undone")
        cur.execute("SELECT oid, data_id FROM obj WHERE tid = ?", (itid,))
        undone = cur.fetchall()
        if not undone:
            cur.execute("SELECT 1 FROM trans WHERE tid = ?", (itid,))
            if not cur.fetchall():
                raise errors.UndoError(f"no transaction 0x{tid.hex()} to undo")
        oids = []
        for ioid, data_id in undone:
            pending = self._writes.get(ioid)
            if pending is None:
                cur.execute(
                    "SELECT tid, data_id FROM obj WHERE oid = ? ORDER BY tid DESC LIMIT 1", (ioid,)
                )
                current_tid, current_data = cur.fetchone()
                same = current_data == data_id
            else:
                # An earlier undo of this transaction changed the object
                # (ZODB undoMultiple): undo against that pending state.
                current_tid = pending.expected
                same = self._same_value(cur, pending, data_id)
            cur.execute(
                "SELECT tid, data_id FROM obj WHERE oid = ? AND tid < ? ORDER BY tid DESC LIMIT 1",
                (ioid, itid),
            )
            before = cur.fetchone()
            before_tid, before_data = before if before else (None, None)
            if same:
                # Dedup makes "undo-identical" a comparison of data ids.
                self._writes[ioid] = _Write(current_tid, data_id=before_data, value_tid=before_tid)
            elif resolve is not None and before_data is not None:
                value_before = self.store_.load_serial(p64(ioid), p64(before_tid))
                if pending is None:
                    resolved = resolve(p64(ioid), p64(current_tid), tid, value_before)
                else:
                    committed = self._pending_value(cur, ioid, pending)
                    if committed is None:
                        raise errors.UndoError("Some data were modified by a later transaction", p64(ioid))
                    resolved = resolve(p64(ioid), p64(current_tid), tid, value_before, committed)
                self.write(p64(ioid), p64(current_tid), resolved)
            else:
                raise errors.UndoError("Some data were modified by a later transaction", p64(ioid))
            oids.append(p64(ioid))
        return oids

    def _same_value(self, cur: Any, write: _Write, data_id: int | None) -> bool:
        """Whether a pending write sets the value stored in data row ``data_id``."""
        if write.hash is None:
            return write.data_id == data_id
        if data_id is None:
            return False
        cur.execute("SELECT hash FROM data WHERE id = ?", (data_id,))
        row = cur.fetchone()
        return row is not None and bytes(row[0]) == write.hash

    def _pending_value(self, cur: Any, ioid: int, write: _Write) -> bytes | None:
        """The value a pending write sets (None for a deletion)."""
        if write.hash is not None:
            return self._value_of(cur, write)
        if write.data_id is None or write.value_tid is None:
            return None
        return self.store_.load_serial(p64(ioid), p64(write.value_tid))

    def vote(self, resolve: Resolver | None = None) -> list[bytes]:
        """Make everything durable; returns the oids whose values ``resolve`` replaced.

        Raises ConflictError (after aborting) when an expected serial is not
        current and ``resolve`` is absent or gives up.
        """
        self._require("open")
        _, resolved = self._insert_rows(resolve, voted=True)
        self.state = "voted"
        return resolved

    def commit(self, resolve: Resolver | None = None) -> bytes:
        """Vote and finish in one database commit; returns the tid.

        For a caller with nothing to vote in between (no other resource
        manager, unlike ZODB's two-phase commit): the rows go straight to
        ``obj`` and ``trans``, one commit (one log flush) instead of two.
        The same checks and errors as :meth:`vote`; on any error nothing is
        visible and the transaction is aborted.
        """
        self._require("open")
        conn, _ = self._insert_rows(resolve, voted=False)
        try:
            conn.commit()
        except BaseException as exc:
            self.abort()
            self._settle_lost_commit(exc)
        else:
            self.store_._names.settled(conn, committed=True)
            self._release()
        self.state = "finished"
        return self.tid

    def _insert_rows(self, resolve: Resolver | None, *, voted: bool) -> tuple[Any, list[bytes]]:
        """Upload, check, take a tid and insert the transaction's rows: into ``ttrans``/``tobj``,
        committed (``voted``), or into ``trans``/``obj`` for the caller to commit. Runs again after a
        rollback by the database when :class:`_Rewind` can; otherwise aborts and raises."""
        again = _Rewind.taken(self)
        while True:
            try:
                conn, cur, resolved = self._prepare(resolve)
                tid = u64(self.tid)
                meta = (tid, self.user, self.description, self.extension)
                if voted:
                    cur.execute("INSERT INTO ttrans (tid, user, description, ext) VALUES (?, ?, ?, ?)", meta)
                    sql = "INSERT INTO tobj (tid, oid, data_id, value_tid) VALUES (?, ?, ?, ?)"
                    rows = [(tid, oid, self._data_id(w), w.value_tid) for oid, w in self._writes.items()]
                else:
                    cur.execute("INSERT INTO trans (tid, packed, user, description, ext) VALUES (?, 0, ?, ?, ?)", meta)
                    sql = "INSERT INTO obj (oid, tid, data_id, value_tid) VALUES (?, ?, ?, ?)"
                    rows = [(oid, tid, self._data_id(w), w.value_tid) for oid, w in self._writes.items()]
                for batch in chunked(rows, 5000):
                    cur.executemany(sql, batch)
                if self._orphans:
                    delete_unreferenced_data(cur, self._inserted, self.store_.backend.max_params)
                if voted:
                    conn.commit()
                    self.store_._names.settled(conn, committed=True)
                else:
                    self._advance_oidgen(cur)
                return conn, resolved
            except BaseException as exc:
                if again is not None and again.after(exc):
                    continue
                self.abort()
                self._raise_transient(exc)
                raise

    def _raise_transient(self, exc: BaseException) -> None:
        if self.store_.backend.is_rolled_back(exc):
            raise errors.TransientDatabaseError(
                f"the database rolled this transaction back ({exc}); nothing of it was written: run it again"
            ) from exc

    def _prepare(self, resolve: Resolver | None) -> tuple[Any, Any, list[bytes]]:
        """Upload the values, check serials and take a tid: what vote and commit share."""
        self._flush()
        conn = self._writer()
        cur = self._cursor()
        resolved = self._check_serials(cur, resolve)
        if resolved:
            self._flush()
        self._assign_tid(cur)
        return conn, cur, resolved

    def _advance_oidgen(self, cur: Any) -> None:
        if self._writes:
            # Oids chosen by the caller (restore, imports) must never be handed out again.
            top = max(self._writes) + 1
            if top <= self.store_._oid_horizon:
                return  # oidgen is past them already: they were handed out by it
            cur.execute(
                f"UPDATE oidgen SET next_oid = {self.store_.backend.greatest}(next_oid, ?) WHERE id = 0", (top,)
            )

    def finish(self) -> bytes:
        """Make the voted transaction visible; returns its tid."""
        self._require("voted")
        store, conn, tid = self.store_, self._conn, u64(self.tid)
        try:
            store.backend.begin(conn)
            cur = self._cursor()
            cur.execute(
                "INSERT INTO trans (tid, packed, user, description, ext) "
                "SELECT tid, 0, user, description, ext FROM ttrans WHERE tid = ?",
                (tid,),
            )
            if cur.rowcount != 1:
                raise errors.TransactionError(
                    f"transaction 0x{self.tid.hex()} vanished between vote and finish"
                )
            cur.execute(
                "INSERT INTO obj (oid, tid, data_id, value_tid) "
                "SELECT oid, tid, data_id, value_tid FROM tobj WHERE tid = ?",
                (tid,),
            )
            cur.execute("DELETE FROM tobj WHERE tid = ?", (tid,))
            cur.execute("DELETE FROM ttrans WHERE tid = ?", (tid,))
            self._advance_oidgen(cur)
            conn.commit()
        except BaseException as exc:
            self._release(broken=True)
            self.state = "failed"
            self._settle_lost_commit(exc)
        else:
            self._release()
        self.state = "finished"
        return self.tid

    def _settle_lost_commit(self, exc: BaseException) -> None:
        """After ``exc`` ended the commit of this transaction: return if it committed after all
        (the connection was lost once the server had made the COMMIT durable), else raise ``exc``.

        Only a lost connection leaves the outcome in doubt; reporting such a
        commit as failed would have the caller store its data a second time.
        """
        if not self.store_.backend.is_connection_lost(exc):
            raise exc
        log.warning("the connection was lost while transaction 0x%s committed; asking the database whether it did",
                    self.tid.hex())
        try:
            committed = self.store_.transaction_committed(self.tid, timeout=self.store_.in_doubt_timeout)
        except errors.DatabaseError as unreachable:
            raise errors.CommitOutcomeUnknown(self.tid, self.store_.in_doubt_timeout, unreachable) from exc
        if not committed:
            raise exc
        log.warning("transaction 0x%s committed before the connection was lost", self.tid.hex())

    def abort(self) -> None:
        """Forget the transaction. Safe to call in any state, more than once."""
        if self.state in ("aborted", "finished"):
            return
        conn, voted = self._conn, self.state == "voted"
        self.state = "aborted"
        if conn is None:
            return
        broken = False
        try:
            rollback_quietly(conn)
            if voted:
                with write_transaction(self.store_.backend, conn):
                    cur = self._cursor()
                    tid = u64(self.tid)
                    cur.execute("DELETE FROM tobj WHERE tid = ?", (tid,))
                    cur.execute("DELETE FROM ttrans WHERE tid = ?", (tid,))
                    delete_unreferenced_data(cur, self._inserted, self.store_.backend.max_params)
        except Exception:
            # The connection is gone (the server died): the next lock holder
            # discards what was voted.
            broken = True
            log.exception("abort of transaction could not clean up; it will be discarded later")
        finally:
            self._release(broken=broken)

    # -- internals -------------------------------------------------------------

    def _require(self, state: str) -> None:
        if self.state != state:
            raise errors.TransactionError(f"the transaction is {self.state}, not {state}")

    def _writer(self) -> Any:
        """The write connection, holding the commit lock inside an open transaction."""
        if self._conn is not None:
            return self._conn
        store = self.store_
        conn = store.pool.take_writer(
            first_step=lambda conn: store.backend.acquire_commit_lock(conn, store.commit_lock_timeout)
        )
        conn._holds_commit_lock = True
        self._conn = conn
        store.pool.hold(conn)
        try:
            if not store.backend.in_transaction_after_lock:
                store.backend.begin(conn)
            unfinished = self._read_head(conn)
            if unfinished:
                store._discard_unfinished(conn, timeout=None)
                store.backend.begin(conn)
        except BaseException:
            self._release(broken=True)
            raise
        return conn

    def _read_head(self, conn: Any) -> bool:
        """Note the newest commit (:attr:`head`); whether voted-but-unfinished transactions wait to be discarded.

        One round trip for both, inside the transaction: under the commit
        lock nothing commits but this transaction, so the head stays the
        head (and the tid is taken from it without asking again).
        """
        cur = conn.cursor()
        cur.execute("SELECT (SELECT MAX(tid) FROM trans), (SELECT 1 FROM ttrans LIMIT 1)")
        head, unfinished = cur.fetchone()
        cur.close()
        self._head = head or 0
        return unfinished is not None

    @property
    def head(self) -> bytes:
        """The newest committed transaction when this one took the commit lock (taking it now if not yet)."""
        self._require("open")
        self._writer()
        return p64(self._head)

    def _cursor(self) -> Any:
        """A cursor on the write connection; ``_release`` closes it.

        A cursor left to the garbage collector may be finalised after its
        connection went back to the pool (an exception's traceback keeps it
        alive): MariaDB's statement close then runs on a connection another
        thread is using and desynchronises it ("Commands out of sync").
        """
        cur = self._conn.cursor()
        self._cursors.append(cur)
        return cur

    def _release(self, *, broken: bool = False) -> None:
        cursors, self._cursors = self._cursors, []
        for cur in cursors:
            try:
                cur.close()
            except Exception:
                pass  # already closed, or the connection is dead: nothing left to free
        conn, self._conn = self._conn, None
        if conn is None:
            return
        store = self.store_
        store._names.settled(conn, committed=False)  # bindings it made and did not commit were rolled back
        store.pool.let_go(conn)
        conn._holds_commit_lock = False
        try:
            store.backend.release_commit_lock(conn)
        except Exception:
            broken = True
        store.pool.give_writer(conn, broken=broken)

    def _flush(self) -> None:
        """Upload pending values, sending none the database already holds."""
        if not self._pending:
            return
        self._writer()
        cur = self._cursor()
        backend = self.store_.backend
        pending, raw = self._pending, self._pending_raw
        self._pending, self._pending_bytes, self._pending_raw = {}, 0, set()
        hashes = list(pending)
        for batch in chunked(hashes, backend.max_params):
            cur.execute(f"SELECT hash, id FROM data WHERE hash IN {placeholders(len(batch))}", batch)
            for digest, data_id in cur.fetchall():
                self._ids[bytes(digest)] = data_id
        missing = [h for h in hashes if h not in self._ids]
        if not missing:
            return
        codec = self.store_.codec

        def encode(h: bytes) -> EncodedValue:
            return codec.encode(pending[h], h, compress=h not in raw)

        if sum(len(pending[h]) for h in missing if h not in raw) < self.INLINE_ENCODE_BYTES:
            # A few small values, or values the caller compressed already (nothing to do but frame
            # them): handing them to the pool costs more than encoding them here.
            encoded: Iterable[EncodedValue] = map(encode, missing)
        else:
            # The pool compresses ahead while the values it has finished are
            # being inserted: compression and database work overlap.
            encoded = self.store_._encoder.map(encode, missing)
        self._insert_values(cur, encoded)

    #: Pending bytes below which values are compressed in the calling thread.
    INLINE_ENCODE_BYTES = 1 << 20

    #: Bytes per bulk INSERT: small enough to keep compression and upload
    #: overlapping, large enough that round trips do not count.
    INSERT_BATCH_BYTES = 8 * 1024 * 1024

    def _insert_values(self, cur: Any, values: Iterable[EncodedValue]) -> None:
        split_size = self.store_.backend.split_size
        batch: list[tuple] = []
        batch_bytes = 0
        for v in values:
            if len(v.stored) > split_size:
                self._insert_big(cur, v)
                continue
            batch.append((v.hash, v.compression, v.size, v.stored))
            batch_bytes += len(v.stored)
            if batch_bytes >= self.INSERT_BATCH_BYTES:
                self._insert_small(cur, batch)
                batch, batch_bytes = [], 0
        if batch:
            self._insert_small(cur, batch)

    #: Rows at least this large go one statement each: measured on MariaDB,
    #: 2 MiB values insert faster that way (about 590 MB/s) than in one bulk
    #: statement (about 460 MB/s); small rows gain from bulk statements.
    PER_ROW_BYTES = 256 * 1024

    #: Small rows up to this many go in one INSERT ... RETURNING their ids (a group commit's metadata);
    #: more (thousands of slow streams' logs) in one bulk statement, then a query for their ids.
    RETURNING_ROWS = 64

    def _insert_small(self, cur: Any, rows: list[tuple]) -> None:
        insert, row_values = "INSERT INTO data (hash, compression, size, chunks, value) VALUES ", "(?, ?, ?, 0, ?)"
        big = [row for row in rows if len(row[3]) >= self.PER_ROW_BYTES]
        if big:
            blob_cur = self.store_.backend.blob_cursor(cur.connection)
            for row in big:
                blob_cur.execute(insert + row_values, row)
                # One row per statement: its id comes back with it, no query needed.
                self._took([(row[0], blob_cur.lastrowid)])
            blob_cur.close()
        small = [row for row in rows if len(row[3]) < self.PER_ROW_BYTES]
        if 0 < len(small) <= self.RETURNING_ROWS and self.store_.backend.returning:
            # One statement that returns their ids: on MariaDB each statement is a round trip.
            cur.execute(insert + ", ".join([row_values] * len(small)) + " RETURNING hash, id",
                        [field for row in small for field in row])
            self._took(cur.fetchall())
        elif small:
            cur.executemany(insert + row_values, small)
            for hashes in chunked([row[0] for row in small], self.store_.backend.max_params):
                cur.execute(f"SELECT hash, id FROM data WHERE hash IN {placeholders(len(hashes))}", hashes)
                self._took(cur.fetchall())

    def _took(self, inserted: Iterable[tuple[bytes, int]]) -> None:
        """Remember the data ids of values this transaction inserted, by their hash."""
        for digest, data_id in inserted:
            self._ids[bytes(digest)] = data_id
            self._inserted.append(data_id)

    def _insert_big(self, cur: Any, value: EncodedValue) -> None:
        size = self.store_.backend.split_size
        stored = memoryview(value.stored)
        starts = range(0, len(stored), size)
        cur.execute(
            "INSERT INTO data (hash, compression, size, chunks, value) VALUES (?, ?, ?, ?, NULL)",
            (value.hash, value.compression, value.size, len(starts)),
        )
        cur.execute("SELECT id FROM data WHERE hash = ?", (value.hash,))
        (data_id,) = cur.fetchone()
        blob_cur = self.store_.backend.blob_cursor(cur.connection)
        for seq, start in enumerate(starts):
            # One piece in memory at a time: a 200 MiB value is not copied whole.
            piece = bytes(stored[start : start + size])
            blob_cur.execute("INSERT INTO bigdata (data_id, seq, value) VALUES (?, ?, ?)", (data_id, seq, piece))
        blob_cur.close()
        self._ids[value.hash] = data_id
        self._inserted.append(data_id)

    def _data_id(self, write: _Write) -> int | None:
        return self._ids[write.hash] if write.hash is not None else write.data_id

    def _check_serials(self, cur: Any, resolve: Resolver | None) -> list[bytes]:
        checked = [oid for oid, w in self._writes.items() if w.check]
        reads = [oid for oid in self._checks if oid not in self._writes]
        current: dict[int, int] = {}
        for batch in chunked(checked + reads, self.store_.backend.max_params):
            cur.execute(
                f"SELECT oid, MAX(tid) FROM obj WHERE oid IN {placeholders(len(batch))} GROUP BY oid", batch
            )
            current.update(cur.fetchall())
        for oid in reads:
            committed, expected = current.get(oid, 0), self._checks[oid]
            if committed != expected:
                raise errors.ReadConflictError(oid=p64(oid), serials=(p64(committed), p64(expected)))
        resolved = []
        for oid in checked:
            write = self._writes[oid]
            committed = current.get(oid, 0)
            if committed == write.expected:
                continue
            boid, bcommitted, bexpected = p64(oid), p64(committed), p64(write.expected)
            value = self._value_of(cur, write)
            if resolve is not None and value is not None and committed and write.expected:
                new_value = resolve(boid, bcommitted, bexpected, value)
                self._writes[oid] = _Write(committed)
                self._unref(write.hash)
                self.write(boid, bcommitted, new_value)
                resolved.append(boid)
                continue
            raise errors.ConflictError(oid=boid, serials=(bcommitted, bexpected), data=value)
        return resolved

    def _value_of(self, cur: Any, write: _Write) -> bytes | None:
        """The new value of a write, from memory or (once uploaded) from its row."""
        if write.hash is None:
            return None
        if write.hash in self._pending:
            return self._pending[write.hash]
        cur.execute("SELECT compression, size, chunks, value FROM data WHERE hash = ?", (write.hash,))
        compression, size, chunks, stored = cur.fetchone()
        if chunks:
            cur.execute("SELECT value FROM bigdata WHERE data_id = ? ORDER BY seq", (self._ids[write.hash],))
            stored = b"".join(row[0] for row in cur.fetchall())
        return self.store_.codec.decode(compression, bytes(stored), size)

    def _assign_tid(self, cur: Any) -> None:
        last = self._head  # read when the commit lock was taken, which we hold since
        if self.requested_tid is not None:
            if self.requested_tid <= last:
                raise errors.TransactionError(
                    f"cannot commit with tid 0x{self.requested_tid:016x}: "
                    f"it is not after the last transaction 0x{last:016x}"
                )
            tid = self.requested_tid
        else:
            tid = next_tid(last)
        self.tid = p64(tid)
