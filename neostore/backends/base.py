"""The narrow interface a database engine implements for a Store.

A backend owns connections, the schema, the cross-process commit lock and
the few SQL spellings that differ between engines. Everything else (the
commit protocol, reads, names, pack) is plain SQL in the Store's modules
(:mod:`neostore.transaction` and its helpers, :mod:`neostore.reads`,
:mod:`neostore.names`, :mod:`neostore.pack` ...) that every engine accepts,
written with the spellings and capabilities a :class:`Backend` names.

The commit lock serialises writers across processes: a transaction takes it
at its first write and keeps it until finish or abort, and pack takes it for
one batch at a time. It must be released by the kernel when its holder dies
(``kill -9``), so that a crashed writer never blocks the database.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import DatabaseError
from ..url import Node


@dataclass(frozen=True)
class NodeState:
    """One node of a cluster, as ``windvane info`` and ``/health`` show it."""

    node: str
    #: Whether the store writes through it now.
    written: bool
    #: ``wsrep_local_state_comment`` (Synced, Donor/Desynced, Joining ...), or "unreachable".
    state: str
    #: ``wsrep_cluster_status``: Primary while its part of the cluster has quorum.
    component: str
    #: ``wsrep_cluster_size``: the nodes its part of the cluster holds (0 when unreachable).
    cluster_size: int
    #: Why it cannot be reached, else None.
    error: str | None = None

    @property
    def serving(self) -> bool:
        """Whether it serves reads and writes: synced, in the primary component."""
        return self.state == "Synced" and self.component == "Primary"


class Lease(ABC):
    """The claim of one long operation (pack, blob sweep, tier moves) on a store: one holder at a time.

    A holder that dies gives it up: the engine releases it with the holder's
    connection or file, or, on a cluster, it runs out unless renewed.
    """

    @abstractmethod
    def fence(self, cur: Any) -> None:
        """In the holder's transaction about to commit on ``cur``: LeaseLostError if the lease is not its own
        any more (then the transaction must not commit)."""

    @abstractmethod
    def release(self) -> None:
        """Give the lease up. Harmless after it was lost."""


#: Bumped whenever the schema changes; older databases are migrated or refused.
SCHEMA_VERSION = 2


class Backend(ABC):
    """One database engine.

    What an engine can do, and how it spells what differs, is said by named
    capabilities (the abstract properties below, which a backend sets as
    class attributes): the Store, names and pack ask those, never which
    engine it is, so a new backend that leaves one out cannot be made
    (``TypeError``, naming it) instead of behaving like another engine.
    """

    #: The engine's name, for messages and :meth:`describe` only (``"sqlite"``, ``"mariadb"``).
    kind: str
    #: The largest stored value kept in one row; larger ones are split into
    #: ``bigdata`` chunks of this size.
    split_size: int = 8 * 1024 * 1024
    #: The most ``?`` placeholders one statement may carry.
    max_params: int = 30000
    #: Index hint to force ``obj``'s primary key, where the optimizer needs it.
    obj_pk_hint: str = ""
    #: Whether a writer connection is always inside a transaction (autocommit
    #: off, each statement reading the latest commits): :meth:`begin` after
    #: taking the commit lock is then a round trip that changes nothing.
    in_transaction_after_lock: bool = False
    #: Whether ``INSERT ... RETURNING`` works (SQLite 3.35+, MariaDB 10.5+).
    returning: bool = False
    #: The marker of one statement parameter. neostore writes its statements
    #: with it (qmark style, which both drivers take natively): a backend
    #: whose driver wants another style translates them in its cursors.
    param: str = "?"
    #: The exceptions the engine's driver raises (its ``Error`` root): what
    #: a Store's public methods turn into neostore's DatabaseError.
    driver_errors: tuple[type[BaseException], ...] = ()
    #: Where the store is, as messages name it: the SQLite file's absolute
    #: path, or the MariaDB database and its server (never a password).
    location: str = ""

    @property
    @abstractmethod
    def single_writer(self) -> bool:
        """Whether the database has one writer at a time, whoever holds the commit lock (SQLite's write lock).

        Then the connection of a transaction holding the commit lock is the
        only one that can write until that transaction ends: a write the
        same thread needs meanwhile (allocating oids, binding names) runs on
        that connection, inside that transaction, and is undone with it if
        it rolls back. Otherwise such writes commit on a connection of their own.
        """

    @property
    @abstractmethod
    def greatest(self) -> str:
        """The function that gives the greater of two scalars (``GREATEST`` on MariaDB, ``MAX`` on SQLite)."""

    @property
    @abstractmethod
    def insert_ignore(self) -> str:
        """The ``INSERT`` that skips rows whose key exists (``INSERT IGNORE``, ``INSERT OR IGNORE``)."""

    @property
    @abstractmethod
    def uint_type(self) -> str:
        """The column type of an unsigned 64-bit integer (an oid, a tid) in a temporary table."""

    @property
    @abstractmethod
    def drop_temporary_table(self) -> str:
        """The statement that drops a temporary table, up to the table's name (``IF EXISTS`` may follow)."""

    @abstractmethod
    def connect(self, *, for_writing: bool) -> Any:
        """A new DB-API connection.

        Writers have autocommit off and see the latest committed rows in each
        statement; readers see a consistent state per statement.
        """

    def read_causally(self, conn: Any) -> None:
        """Make each read of ``conn`` wait until its server has applied every commit the database made
        before it. Nothing to do on one server; a cluster node applies the others' commits a moment
        after the cluster certified them."""
        return None  # one server applies its own commits before it answers

    @abstractmethod
    def take_lease(self, name: str, holder: str, seconds: float) -> Lease:
        """The lease ``name`` for ``holder`` (who it is, for messages), kept while the holder lives, on a
        cluster for ``seconds`` at a time; LeaseHeldError, naming the holder, if another has it."""

    def node_states(self) -> list[NodeState]:
        """The state of each node of the cluster the store is on, asked now (empty on a single server)."""
        return []

    def connect_replica(self, node: Node) -> Any:
        """A reader connection to ``node``, an asynchronous replica of the database (engines with servers)."""
        raise DatabaseError(f"{self.kind} stores have no replicas")

    @abstractmethod
    def begin(self, conn: Any) -> None:
        """Start a write transaction on ``conn`` (which holds the commit lock)."""

    @abstractmethod
    def create_schema(self, conn: Any) -> None:
        """Create the tables of :data:`SCHEMA_VERSION` if the database has none."""

    @abstractmethod
    def acquire_commit_lock(self, conn: Any, timeout: float) -> None:
        """Take the commit lock for ``conn``; raise CommitLockTimeout after ``timeout`` s."""

    @abstractmethod
    def release_commit_lock(self, conn: Any) -> None:
        """Give the commit lock back. Harmless when ``conn`` does not hold it."""

    @property
    def commit_lock_spans_transactions(self) -> bool:
        """Whether the commit lock stays held across the commits and rollbacks on its connection (a lock of
        the engine's), or lasts one database transaction (a cluster's row lock): then whoever holds it
        across a commit takes it again, and a voted transaction is marked by :meth:`stamp_commit`."""
        return True

    def stamp_commit(self, cur: Any, tid: int | None, *, voted: int | None = None) -> None:
        """Record, in the transaction about to commit on ``cur`` under the commit lock, that it commits
        ``tid`` (None: rows changed without a tid); ``voted``: the tid of a vote that stays ahead of every
        other commit until it finishes. Engines whose lock alone orders the commits do nothing."""
        return None

    def commit_confirmed(self, conn: Any, tid: int, *, voted: bool = False) -> bool:
        """Whether the commit of ``tid`` that ``conn`` just made is there (``voted``: a vote, in ``ttrans``);
        engines whose COMMIT acknowledgement is enough say yes without asking."""
        return True

    def fence(self, conn: Any, timeout: float) -> None:
        """Return once no commit begun before this call can still become visible, waiting at most
        ``timeout`` s for the commit lock (``conn``: a new writer connection)."""
        self.acquire_commit_lock(conn, timeout)
        self.release_commit_lock(conn)

    @abstractmethod
    def has_table(self, cur: Any, table: str) -> bool:
        """Whether the database has ``table`` (asked without a failing statement)."""

    def in_list(self, count: int) -> str:
        """``(?,?,...)``: ``count`` parameter markers, for an ``IN`` list."""
        return "(" + ",".join([self.param] * count) + ")"

    def ping(self, conn: Any) -> None:
        """One round trip on ``conn``: raises if the connection is dead."""
        cur = conn.cursor()
        cur.execute("SELECT 1")
        cur.fetchall()
        cur.close()

    @abstractmethod
    def disk_size(self) -> int:
        """Bytes the database's files take on disk now."""

    def checkpoint_idle(self) -> bool:
        """Shrink the database's own log if it grew past its bound, while the store's writer has nothing
        to do, without waiting for other writers or readers; whether it did. Engines whose server keeps
        its log bounded do nothing."""
        return False

    @abstractmethod
    def reclaim(self, conn: Any, removed: Mapping[str, int], *, vacuum: bool, lock_timeout: float) -> list[str]:
        """Give the space of deleted rows back to the file system, while others read and write.

        ``removed`` counts the rows just deleted from each table, for engines
        that rebuild a table to shrink it (worth it only when it lost a fair
        share). ``vacuum`` also rewrites what cannot shrink in place. Runs
        outside any transaction; the steps writers must not overlap take the
        commit lock, waiting for it at most ``lock_timeout`` s. Returns, one
        sentence each, what space stays in place and why.
        """

    def blob_cursor(self, conn: Any) -> Any:
        """A cursor that sends BLOB parameters unescaped (binary protocol where it matters)."""
        return conn.cursor()

    @abstractmethod
    def close_connection(self, conn: Any) -> None:
        """Close ``conn`` (and release what it holds), ignoring errors of a dead server."""

    def is_connection_lost(self, exc: BaseException) -> bool:
        """Whether ``exc`` means the server went away (so reconnecting may help)."""
        return False

    def is_unavailable(self, exc: BaseException) -> bool:
        """Whether ``exc`` says the database is out of reach (server gone, file or directory missing)."""
        return self.is_connection_lost(exc)

    def last_insert_id(self, cur: Any) -> int:
        """The id the row ``cur``'s last single-row INSERT made got from its auto-increment column."""
        return int(cur.lastrowid)

    def is_rolled_back(self, exc: BaseException) -> bool:
        """Whether ``exc`` says the database rolled the whole transaction back (running it again may work)."""
        return False

    def is_transient(self, exc: BaseException) -> bool:
        """Whether ``exc`` is this database failing for now (locked, busy, full, out of reach, rolled back), so
        the same work may succeed later; False for an error the same statements meet again (a constraint, a
        syntax error) and for anything that is not the database's."""
        return self.is_rolled_back(exc) or self.is_unavailable(exc)

    def describe(self) -> dict[str, str]:
        """Facts about the engine for ``windvane store info``."""
        return {"backend": self.kind}

    def close(self) -> None:
        """Release what the backend itself holds (not the connections)."""
        return None  # most engines hold nothing but their connections


def schema_statements(
    *, uint: str, blob: str, hash_type: str, name_type: str, autoinc: str, small_rows: str, big_rows: str
) -> list[str]:
    """The CREATE TABLE statements both engines share, in their own type names.

    ``small_rows``/``big_rows`` are the table options for tables of small
    rows and of BLOB rows. Tables (NEO's layout, single-node):

    - ``config``: schema version and settings.
    - ``oidgen``: the next oid to hand out (one row).
    - ``trans``: one row per committed transaction.
    - ``obj``: one row per object revision; ``data_id`` NULL marks a deletion
      or an undone creation; ``value_tid`` is the revision an undo copied.
    - ``data``: deduplicated values, unique by hash; ``value`` is NULL when
      the value is split into ``bigdata`` chunks.
    - ``ttrans``/``tobj``: voted transactions not yet finished (the replay log).
    - ``name``: names bound to oids (added in version 2). A binding never
      changes once made, so it needs no history: whether a named object
      exists at a tid is a question for ``obj``.
    """
    return [
        f"CREATE TABLE IF NOT EXISTS config (name VARCHAR(64) NOT NULL PRIMARY KEY, "
        f"value VARCHAR(255) NOT NULL){small_rows}",
        f"CREATE TABLE IF NOT EXISTS oidgen (id INTEGER NOT NULL PRIMARY KEY, next_oid {uint} NOT NULL){small_rows}",
        f"CREATE TABLE IF NOT EXISTS trans (tid {uint} NOT NULL PRIMARY KEY, "
        f"packed SMALLINT NOT NULL DEFAULT 0, user {blob} NOT NULL, description {blob} NOT NULL, "
        f"ext {blob} NOT NULL){small_rows}",
        f"CREATE TABLE IF NOT EXISTS obj (oid {uint} NOT NULL, tid {uint} NOT NULL, "
        f"data_id {uint} NULL, value_tid {uint} NULL, PRIMARY KEY (oid, tid)){small_rows}",
        "CREATE INDEX IF NOT EXISTS obj_tid ON obj (tid, oid)",
        "CREATE INDEX IF NOT EXISTS obj_data ON obj (data_id)",
        f"CREATE TABLE IF NOT EXISTS data (id {uint} NOT NULL PRIMARY KEY {autoinc}, "
        f"hash {hash_type} NOT NULL, compression SMALLINT NOT NULL, size {uint} NOT NULL, "
        f"chunks INTEGER NOT NULL DEFAULT 0, value {blob} NULL){big_rows}",
        "CREATE UNIQUE INDEX IF NOT EXISTS data_hash ON data (hash)",
        f"CREATE TABLE IF NOT EXISTS bigdata (data_id {uint} NOT NULL, seq INTEGER NOT NULL, "
        f"value {blob} NOT NULL, PRIMARY KEY (data_id, seq)){big_rows}",
        f"CREATE TABLE IF NOT EXISTS ttrans (tid {uint} NOT NULL PRIMARY KEY, "
        f"user {blob} NOT NULL, description {blob} NOT NULL, ext {blob} NOT NULL){small_rows}",
        f"CREATE TABLE IF NOT EXISTS tobj (tid {uint} NOT NULL, oid {uint} NOT NULL, "
        f"data_id {uint} NULL, value_tid {uint} NULL, PRIMARY KEY (tid, oid)){small_rows}",
        "CREATE INDEX IF NOT EXISTS tobj_data ON tobj (data_id)",
        f"CREATE TABLE IF NOT EXISTS name (name {name_type} NOT NULL PRIMARY KEY, oid {uint} NOT NULL){small_rows}",
        "CREATE UNIQUE INDEX IF NOT EXISTS name_oid ON name (oid)",
    ]
