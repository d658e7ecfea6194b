"""MariaDB through the ``mariadb`` connector (binary protocol: BLOBs travel unescaped)."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import mariadb
from mariadb.constants import ERR, STATUS

from ..errors import DatabaseError, StorageUnavailableError, StoreNotFoundError
from ..url import Node, StoreURL
from .base import Backend, Lease, NodeState, schema_statements
from .ordering import ORDER_TABLES, CertifiedCounter, CommitOrder, NamedLock

log = logging.getLogger(__name__)

# Error codes that mean the connection is gone: server has gone away, lost
# connection during query, can't connect (local or TCP), the connector's read
# or write on a dead socket (5013, 5014: prepared statements meet these); and
# a cluster node that left the primary component or is still joining, which
# refuses every statement (ER_UNKNOWN_COM_ERROR): another node may serve.
_CONNECTION_LOST = {2002, 2003, 2006, 2013, 2055, 1927, 4031, 5013, 5014, ERR.ER_UNKNOWN_COM_ERROR}
# The server has no such variable: it is built without Galera.
_UNKNOWN_VARIABLE = ERR.ER_UNKNOWN_SYSTEM_VARIABLE
# ER_LOCK_DEADLOCK: InnoDB rolled the whole transaction back.
_DEADLOCK = ERR.ER_LOCK_DEADLOCK
# The server failing for now: a lock waited for too long, too many connections, shutting down, a full disk
# or table, a statement killed or past its time limit. The same statements may succeed later.
_TRANSIENT = {
    ERR.ER_LOCK_WAIT_TIMEOUT,
    ERR.ER_CON_COUNT_ERROR,
    ERR.ER_SERVER_SHUTDOWN,
    ERR.ER_DISK_FULL,
    ERR.ER_RECORD_FILE_FULL,
    ERR.ER_QUERY_INTERRUPTED,
    ERR.ER_STATEMENT_TIMEOUT,
}

# The tables pack deletes rows from, so the ones a rebuild can shrink.
_PACKED_TABLES = ("obj", "data", "bigdata")

# What to do about the errors a table rebuild is likely to meet.
_REBUILD_ADVICE = {
    1205: "a transaction kept using the table longer than the rebuild waits; pack again later",
    1799: "more was written to the table meanwhile than innodb_online_alter_log_max_size holds; "
    "pack again when writes are quieter, or raise that setting",
    1021: "the copy needs free disk about the size of the rows left",
    1114: "the copy needs free disk about the size of the rows left",
}


class MariaDBBackend(Backend):
    """A Store database on a MariaDB server, InnoDB by default or MyRocks, or on a Galera cluster.

    The commit lock is the :class:`~neostore.backends.ordering.CommitOrder`
    the server calls for: a ``GET_LOCK`` named after the database on one
    server (released when the holder's connection drops, including on
    ``kill -9``), a certified row on a cluster. Connections go to the URL's
    first node that serves, and stay with it until it fails: then the next
    one that serves takes over, for writers and readers alike. Readers on a
    cluster wait, at each statement, for their node to have applied every
    commit the cluster made before it (``wsrep_sync_wait``): a read never
    sees a state older than one seen before through another node.
    """

    kind = "mariadb"
    driver_errors = (mariadb.Error,)
    single_writer = False  # InnoDB and MyRocks lock rows: other sessions write beside the commit lock holder
    uint_type = "BIGINT UNSIGNED"
    # The TEMPORARY keyword keeps a DROP from ever reaching a real table of that name.
    drop_temporary_table = "DROP TEMPORARY TABLE"
    greatest = "GREATEST"
    insert_ignore = "INSERT IGNORE"
    # Writers run with autocommit off and READ COMMITTED (see connect).
    in_transaction_after_lock = True
    # MariaDB's optimizer may pick a secondary index for "latest revision of
    # an oid" queries on large tables, which makes them crawl; the primary key
    # (oid, tid) is always the right one.
    obj_pk_hint = "FORCE INDEX (PRIMARY)"
    # A statement with about 8,000 placeholders or more (the exact count varies with the values) makes
    # the server drop the connection ("Write error: Broken pipe" from MariaDB Connector/Python 1.1 on
    # MariaDB 10.11): a transaction binding or uploading that many small values at once must not send them in one.
    max_params = 4000
    #: A table is rebuilt when pack removed at least this share of its rows:
    #: a rebuild copies every row left, and InnoDB reuses free pages anyway.
    rebuild_share = 1 / 8
    #: Seconds a rebuild waits, as it starts and as it ends, for the
    #: transactions using its table; statements on that table queue behind it
    #: meanwhile, so this stays short.
    rebuild_lock_wait = 10

    def __init__(self, url: StoreURL, *, create: bool = True, connect_timeout: int = 10, vote_lease: float = 30.0):
        """``vote_lease``: on a cluster, the seconds a transaction that voted keeps others from committing
        before it finishes; a writer that dies between vote and finish holds the store up that long."""
        self.url = url
        self.engine = url.engine
        self.connect_timeout = connect_timeout
        self.nodes: tuple[Node, ...] = url.nodes
        #: The node connections go to (an index into :attr:`nodes`); moves on when it fails.
        self.current = 0
        #: Whether the server is a node of a Galera cluster (known once the database is prepared).
        self.cluster = False
        self.order: CommitOrder = NamedLock(f"windvane.commit.{url.database}", url.database)
        self.vote_lease = vote_lease
        servers = ", ".join(map(str, self.nodes))
        where = "the MariaDB server at" if len(self.nodes) == 1 else "the MariaDB cluster of"
        self.location = f"database {url.database!r} on {where} {servers}"
        self._prepare_database(create)

    def _params(self, node: Node, with_database: bool) -> dict[str, Any]:
        params: dict[str, Any] = {"connect_timeout": self.connect_timeout}
        url = self.url
        if url.user:
            params["user"] = url.user
        if url.password is not None:
            params["password"] = url.password
        if node.unix_socket:
            params["unix_socket"] = node.unix_socket
        else:
            params["host"] = node.host
            if node.port:
                params["port"] = node.port
        if with_database:
            params["database"] = url.database
        return params

    def _raw_connect(self, with_database: bool = True) -> Any:
        """A connection to the first node that serves, from the current one on; the current one moves there."""
        failures: list[str] = []
        reachable = False
        start = self.current
        for step in range(len(self.nodes)):
            index = (start + step) % len(self.nodes)
            node = self.nodes[index]
            try:
                conn = mariadb.connect(**self._params(node, with_database))
            except mariadb.Error as exc:
                reachable = reachable or not self.is_connection_lost(exc)
                failures.append(f"{node}: {exc}")
                continue
            why = self._not_serving(conn)
            if why is not None:
                self.close_connection(conn)
                failures.append(f"{node}: {why}")
                continue
            if index != self.current:
                log.warning("%s: %s now serves (%s)", self.url.display_name, node, "; ".join(failures))
                self.current = index
            return conn
        who = self.url.user or "the current user"
        if len(self.nodes) == 1:
            message = (
                f"cannot connect to MariaDB at {self.nodes[0]} as {who}: {failures[0].partition(': ')[2]}; "
                "is the server running (windvane db start) and the URL right?"
            )
        else:
            message = (
                f"no node of the MariaDB cluster serves {self.url.database!r} to {who}: {'; '.join(failures)}. "
                "A cluster serves while more than half of its nodes are up and joined"
            )
        raise (DatabaseError if reachable else StorageUnavailableError)(message) from None

    def node_states(self) -> list[NodeState]:
        if not self.cluster:
            return []
        states = []
        for index, node in enumerate(self.nodes):
            try:
                conn = mariadb.connect(**self._params(node, with_database=False) | {"connect_timeout": 2})
            except mariadb.Error as exc:
                states.append(NodeState(str(node), index == self.current, "unreachable", "", 0, str(exc)))
                continue
            try:
                status = node_status(conn)
            finally:
                self.close_connection(conn)
            states.append(
                NodeState(
                    str(node),
                    index == self.current,
                    status.get("wsrep_local_state_comment", "unknown"),
                    status.get("wsrep_cluster_status", "unknown"),
                    int(status.get("wsrep_cluster_size", 0)),
                )
            )
        return states

    def _not_serving(self, conn: Any) -> str | None:
        """Why the cluster node of ``conn`` cannot serve (joining, donor, outside the primary component); None
        if it can, or if the server is no cluster node."""
        try:
            status = node_status(conn)
        except mariadb.Error as exc:
            return str(exc)
        if status.get("wsrep_on", "0") in ("0", "OFF"):
            return None
        if status.get("wsrep_ready") != "ON" or status.get("wsrep_cluster_status") != "Primary":
            return f"not part of the primary component ({status.get('wsrep_cluster_status', 'unknown')})"
        if status.get("wsrep_local_state_comment") != "Synced":
            return f"not synced ({status.get('wsrep_local_state_comment', 'unknown')})"
        return None

    def _prepare_database(self, create: bool) -> None:
        """Create the database if ``create`` (else StoreNotFoundError if it is missing), and check the server."""
        conn = self._raw_connect(with_database=False)
        try:
            cur = conn.cursor()
            if create:
                cur.execute(f"CREATE DATABASE IF NOT EXISTS `{self.url.database}`")
            else:
                cur.execute("SELECT 1 FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?", (self.url.database,))
                if cur.fetchone() is None:
                    raise StoreNotFoundError(f"no store in {self.location}: the database does not exist")
            cur.execute("SELECT @@max_allowed_packet")
            (packet,) = cur.fetchone()
            if packet < 2 * self.split_size:
                raise DatabaseError(
                    f"the server's max_allowed_packet is {packet} bytes; neostore needs at least "
                    f"{2 * self.split_size}: set max_allowed_packet=1G in the server configuration "
                    "(see windvane/ops/mariadb.cnf)"
                )
            if self.engine != "InnoDB":
                cur.execute("SELECT SUPPORT FROM information_schema.ENGINES WHERE ENGINE=?", (self.engine,))
                row = cur.fetchone()
                if row is None or row[0] not in ("YES", "DEFAULT"):
                    raise DatabaseError(
                        f"the server has no {self.engine} engine: install mariadb-plugin-rocksdb and "
                        "add plugin-load-add=ha_rocksdb.so to the server configuration"
                    )
            self._choose_order(cur, create)
        finally:
            conn.close()

    def _choose_order(self, cur: Any, create: bool) -> None:
        """On a Galera node: the certified commit order, its row made if the store is (or is to be) there."""
        if node_status(cur.connection)["wsrep_on"] == "0":
            return
        if self.engine != "InnoDB":
            raise DatabaseError(
                f"{self.location}: a Galera cluster replicates InnoDB tables only, not {self.engine}; "
                "keep a MyRocks store on one server with asynchronous replicas (windvane db start --replica-of)"
            )
        self.cluster = True
        self.order = CertifiedCounter(self.url.database, self.vote_lease)
        database = f"`{self.url.database}`"
        cur.execute(
            "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? "
            "AND TABLE_NAME IN ('config', 'commit_order', 'lease')",
            (self.url.database,),
        )
        (tables,) = cur.fetchone()
        if tables == 3 or (tables == 0 and not create):
            return
        cur.execute(f"USE {database}")
        for statement in ORDER_TABLES:
            cur.execute(statement)
        CertifiedCounter.make_row(cur.connection)

    def connect_replica(self, node: Node) -> Any:
        try:
            conn = mariadb.connect(**self._params(node, with_database=True))
        except mariadb.Error as exc:
            raise StorageUnavailableError(f"cannot connect to the replica at {node}: {exc}") from exc
        return self._set_up(conn, for_writing=False, wait_for_cluster=False)

    def connect(self, *, for_writing: bool) -> Any:
        return self._set_up(self._raw_connect(), for_writing=for_writing, wait_for_cluster=True)

    def _set_up(self, conn: Any, *, for_writing: bool, wait_for_cluster: bool) -> Any:
        """``conn`` as a writer (autocommit off) or a reader of the store, its session settings made."""
        # A cluster node may abort an INSERT ... RETURNING after it sent the result's columns (another node's
        # commit wins a key it waits for); the connector then ends the result without an error, and the
        # statements after it run in a new transaction. Plain INSERTs report the abort.
        self.returning = tuple(conn.server_version_info) >= (10, 5) and not self.cluster
        conn.autocommit = not for_writing
        cur = conn.cursor()
        # Each statement sees the latest committed rows: the conflict check
        # after taking the commit lock must not read an older snapshot.
        cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
        cur.execute("SET SESSION sql_mode='TRADITIONAL,NO_ENGINE_SUBSTITUTION'")
        if self.engine == "ROCKSDB":
            # One transaction may write millions of rows (pack, big commits).
            cur.execute("SET SESSION rocksdb_max_row_locks=1073741824")
        cur.close()
        if wait_for_cluster and not for_writing:
            self.read_causally(conn)  # see the class
        return conn

    def read_causally(self, conn: Any) -> None:
        if self.cluster:
            cur = conn.cursor()
            # Bit 1: SELECTs (information_schema's included) wait; SHOW statements do not.
            cur.execute("SET SESSION wsrep_sync_wait = 1")
            cur.close()

    def has_table(self, cur: Any, table: str) -> bool:
        cur.execute(
            "SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?", (table,)
        )
        return cur.fetchone() is not None

    def begin(self, conn: Any) -> None:
        # START TRANSACTION would commit a transaction already open, and with it a row lock holding the
        # commit order: one that is open goes on (each statement reads the latest commits all the same).
        if not conn.server_status & STATUS.IN_TRANS:
            conn.begin()

    def create_schema(self, conn: Any) -> None:
        engine = f" ENGINE={self.engine}"
        statements = schema_statements(
            uint=self.uint_type,
            blob="MEDIUMBLOB",
            hash_type="BINARY(32)",
            name_type="VARBINARY(767)",
            autoinc="AUTO_INCREMENT",
            small_rows=engine,
            big_rows=engine,
        )
        cur = conn.cursor()
        for statement in statements:
            cur.execute(statement)
        conn.commit()

    def acquire_commit_lock(self, conn: Any, timeout: float) -> None:
        self.order.acquire(conn, timeout)

    def release_commit_lock(self, conn: Any) -> None:
        self.order.release(conn)

    @property
    def commit_lock_spans_transactions(self) -> bool:
        return self.order.spans_transactions

    def stamp_commit(self, cur: Any, tid: int | None, *, voted: int | None = None) -> None:
        self.order.stamp(cur, tid, voted=voted)

    def fence(self, conn: Any, timeout: float) -> None:
        self.order.fence(conn, timeout)

    def take_lease(self, name: str, holder: str, seconds: float) -> Lease:
        return self.order.lease(name, holder, seconds, lambda: self.connect(for_writing=True))

    def commit_confirmed(self, conn: Any, tid: int, *, voted: bool = False) -> bool:
        return self.order.confirmed(conn, tid, voted=voted)

    def blob_cursor(self, conn: Any) -> Any:
        # The text protocol escapes every byte of a BLOB parameter; the binary
        # protocol sends it as is.
        return conn.cursor(binary=True)

    def close_connection(self, conn: Any) -> None:
        try:
            conn.close()
        except mariadb.Error:
            pass

    def is_connection_lost(self, exc: BaseException) -> bool:
        return isinstance(exc, mariadb.Error) and getattr(exc, "errno", None) in _CONNECTION_LOST

    def is_rolled_back(self, exc: BaseException) -> bool:
        errno = getattr(exc, "errno", None) if isinstance(exc, mariadb.Error) else None
        # On a cluster a writer may also meet, in a key, a row that another node's commit just applied
        # here: that commit aborts this transaction (certification keeps the first of two writes of one
        # key), which the duplicate reports before the deadlock does.
        return errno == _DEADLOCK or (self.cluster and errno == ERR.ER_DUP_ENTRY)

    def is_transient(self, exc: BaseException) -> bool:
        if isinstance(exc, mariadb.Error) and getattr(exc, "errno", None) in _TRANSIENT:
            return True
        return super().is_transient(exc)

    def describe(self) -> dict[str, str]:
        conn = self._raw_connect()
        try:
            cur = conn.cursor()
            cur.execute("SELECT VERSION()")
            (version,) = cur.fetchone()
        finally:
            conn.close()
        facts = {"backend": "mariadb", "database": self.url.database, "engine": self.engine, "server": version}
        if self.cluster:
            facts["cluster"] = f"{len(self.nodes)} nodes named, writing through {self.nodes[self.current]}"
        return facts

    # -- giving space back -------------------------------------------------------

    def disk_size(self) -> int:
        """The database's .ibd files as the file system sizes them; else the engine's estimate.

        The files' sizes need the PROCESS privilege; without it (or on
        MyRocks, whose files hold every database) the figure is the
        table statistics', which lag behind recent writes.
        """
        with self._session() as cur:
            if self.engine == "InnoDB":
                try:
                    cur.execute(
                        "SELECT COUNT(*), COALESCE(SUM(FILE_SIZE), 0) FROM information_schema.INNODB_SYS_TABLESPACES "
                        "WHERE SUBSTRING_INDEX(NAME, '/', 1) = ?",
                        (_file_name(self.url.database),),
                    )
                    files, size = cur.fetchone()
                    if files:
                        return int(size)
                except mariadb.Error as exc:
                    if self.is_connection_lost(exc):
                        raise
            cur.execute(
                "SELECT COALESCE(SUM(DATA_LENGTH + INDEX_LENGTH + DATA_FREE), 0) FROM information_schema.TABLES "
                "WHERE TABLE_SCHEMA = DATABASE()"
            )
            return int(cur.fetchone()[0])

    def reclaim(self, conn: Any, removed: Mapping[str, int], *, vacuum: bool, lock_timeout: float) -> list[str]:
        """Rebuild, online, the tables that lost a fair share of their rows (with ``vacuum``, all pack deletes from).

        InnoDB: ``ALTER TABLE ... FORCE, ALGORITHM=INPLACE, LOCK=NONE`` copies
        the rows left into a new file while others read and write, then drops
        the old one: with innodb_file_per_table (windvane/ops/mariadb.cnf) that
        gives the space back. MyRocks: ``OPTIMIZE TABLE`` compacts the
        table's key range. Needs no commit lock: MariaDB orders the rebuild
        with the commits itself.
        """
        notes = []
        with self._session() as cur:
            cur.execute(f"SET SESSION lock_wait_timeout = {int(self.rebuild_lock_wait)}")
            for table in self._worth_rebuilding(cur, removed, vacuum):
                try:
                    if self.engine == "InnoDB":
                        cur.execute(f"ALTER TABLE `{table}` FORCE, ALGORITHM=INPLACE, LOCK=NONE")
                    else:
                        cur.execute(f"OPTIMIZE TABLE `{table}`")
                        # MyRocks reports failure as a row, not an error.
                        failed = [row[3] for row in cur.fetchall() if str(row[2]).lower() == "error"]
                        if failed:
                            notes.append(f"table {table} was not compacted: {'; '.join(failed)}")
                except mariadb.Error as exc:
                    if self.is_connection_lost(exc):
                        raise
                    advice = _REBUILD_ADVICE.get(getattr(exc, "errno", 0))
                    notes.append(f"table {table} was not rebuilt: {exc}" + (f" ({advice})" if advice else ""))
        return notes

    def _worth_rebuilding(self, cur: Any, removed: Mapping[str, int], vacuum: bool) -> list[str]:
        if vacuum:
            return list(_PACKED_TABLES)
        tables = []
        for table in _PACKED_TABLES:
            gone = removed.get(table, 0)
            if gone:
                cur.execute(f"SELECT COUNT(*) FROM `{table}`")
                (left,) = cur.fetchone()
                if gone >= self.rebuild_share * (gone + left):
                    tables.append(table)
        return tables

    @contextmanager
    def _session(self) -> Iterator[Any]:
        """A cursor on a connection of its own, in autocommit: nothing it reads or rebuilds stays locked."""
        conn = self._raw_connect()
        try:
            conn.autocommit = True
            yield conn.cursor()
        finally:
            self.close_connection(conn)


def _file_name(name: str) -> str:
    """``name`` as InnoDB spells it in file and tablespace names (letters beyond ASCII are not matched)."""
    return "".join(c if c.isascii() and (c.isalnum() or c == "_") else f"@{ord(c):04x}" for c in name)


#: The status variables that say whether a cluster node serves, and how big its cluster is.
NODE_STATUS = ("wsrep_ready", "wsrep_cluster_status", "wsrep_local_state_comment", "wsrep_cluster_size")


def node_status(conn: Any) -> dict[str, str]:
    """:data:`NODE_STATUS` of the server ``conn`` is connected to, by name, and ``wsrep_on`` (``"0"`` for a
    server that is no cluster node: the others are then absent or meaningless)."""
    cur = conn.cursor()
    try:
        cur.execute("SELECT @@wsrep_on")
        status = {"wsrep_on": str(cur.fetchone()[0])}
    except mariadb.Error as exc:
        if getattr(exc, "errno", None) != _UNKNOWN_VARIABLE:
            raise
        return {"wsrep_on": "0"}
    finally:
        cur.close()
    if status["wsrep_on"] != "0":
        cur = conn.cursor()
        cur.execute(f"SHOW STATUS WHERE Variable_name IN ({','.join('?' * len(NODE_STATUS))})", NODE_STATUS)
        status.update((str(name).lower(), str(value)) for name, value in cur.fetchall())
        cur.close()
    return status
