"""MariaDB through the ``mariadb`` connector (binary protocol: BLOBs travel unescaped)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import mariadb
from mariadb.constants import ERR

from ..errors import CommitLockTimeout, DatabaseError, StoreNotFoundError
from ..url import StoreURL
from .base import Backend, schema_statements

# Error codes that mean the connection is gone: server has gone away, lost
# connection during query, can't connect (local or TCP).
_CONNECTION_LOST = {2002, 2003, 2006, 2013, 2055, 1927, 4031}
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
    """A Store database on a MariaDB server, InnoDB by default or MyRocks.

    The commit lock is a ``GET_LOCK`` named after the database: the server
    releases it when the holder's connection drops, including on ``kill -9``.
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

    def __init__(self, url: StoreURL, *, create: bool = True, connect_timeout: int = 10):
        self.url = url
        self.engine = url.engine
        self.connect_timeout = connect_timeout
        self.lock_name = f"windvane.commit.{url.database}"[:64]
        self.location = f"database {url.database!r} on the MariaDB server at {self._server()}"
        self._prepare_database(create)

    def _params(self, with_database: bool = True) -> dict[str, Any]:
        params: dict[str, Any] = {"connect_timeout": self.connect_timeout}
        url = self.url
        if url.user:
            params["user"] = url.user
        if url.password is not None:
            params["password"] = url.password
        if url.unix_socket:
            params["unix_socket"] = url.unix_socket
        else:
            params["host"] = url.host
            if url.port:
                params["port"] = url.port
        if with_database:
            params["database"] = url.database
        return params

    def _server(self) -> str:
        return self.url.unix_socket or f"{self.url.host}:{self.url.port or 3306}"

    def _raw_connect(self, with_database: bool = True) -> Any:
        try:
            return mariadb.connect(**self._params(with_database))
        except mariadb.Error as exc:
            raise DatabaseError(
                f"cannot connect to MariaDB at {self._server()} as {self.url.user or 'the current user'}: {exc}; "
                "is the server running (windvane db start) and the URL right?"
            ) from None

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
        finally:
            conn.close()

    def connect(self, *, for_writing: bool) -> Any:
        conn = self._raw_connect()
        self.returning = tuple(conn.server_version_info) >= (10, 5)
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
        return conn

    def has_table(self, cur: Any, table: str) -> bool:
        cur.execute(
            "SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?", (table,)
        )
        return cur.fetchone() is not None

    def begin(self, conn: Any) -> None:
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
        cur = conn.cursor()
        cur.execute("SELECT GET_LOCK(?, ?)", (self.lock_name, timeout))
        (got,) = cur.fetchone()
        cur.close()
        if got != 1:
            raise CommitLockTimeout(
                f"another writer held the commit lock of database {self.url.database} for more than {timeout:g} s"
            )

    def release_commit_lock(self, conn: Any) -> None:
        cur = conn.cursor()
        cur.execute("SELECT RELEASE_LOCK(?)", (self.lock_name,))
        cur.fetchall()
        cur.close()

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
        return isinstance(exc, mariadb.Error) and getattr(exc, "errno", None) == _DEADLOCK

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
        return {"backend": "mariadb", "database": self.url.database, "engine": self.engine, "server": version}

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
