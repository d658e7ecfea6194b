"""MariaDB through the ``mariadb`` connector (binary protocol: BLOBs travel unescaped)."""

from __future__ import annotations

from typing import Any

import mariadb

from ..errors import CommitLockTimeout, DatabaseError
from ..url import StoreURL
from .base import Backend, schema_statements

# Error codes that mean the connection is gone: server has gone away, lost
# connection during query, can't connect (local or TCP).
_CONNECTION_LOST = {2002, 2003, 2006, 2013, 2055, 1927, 4031}


class MariaDBBackend(Backend):
    """A Store database on a MariaDB server, InnoDB by default or MyRocks.

    The commit lock is a ``GET_LOCK`` named after the database: the server
    releases it when the holder's connection drops, including on ``kill -9``.
    """

    kind = "mariadb"
    greatest = "GREATEST"
    insert_ignore = "INSERT IGNORE"
    # Writers run with autocommit off and READ COMMITTED (see connect).
    in_transaction_after_lock = True
    # MariaDB's optimizer has picked a secondary index for
    # "latest revision of an oid" queries on large tables (NEO saw 4.8 s to
    # 111 s queries); the primary key (oid, tid) is always the right one.
    obj_pk_hint = "FORCE INDEX (PRIMARY)"
    max_params = 30000

    def __init__(self, url: StoreURL, *, connect_timeout: int = 10):
        self.url = url
        self.engine = url.engine
        self.connect_timeout = connect_timeout
        self.lock_name = f"windvane.commit.{url.database}"[:64]
        self._create_database()

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

    def _raw_connect(self, with_database: bool = True) -> Any:
        try:
            return mariadb.connect(**self._params(with_database))
        except mariadb.Error as exc:
            where = self.url.unix_socket or f"{self.url.host}:{self.url.port or 3306}"
            raise DatabaseError(
                f"cannot connect to MariaDB at {where} as {self.url.user or 'the current user'}: {exc}; "
                "is the server running (windvane db start) and the URL right?"
            ) from None

    def _create_database(self) -> None:
        conn = self._raw_connect(with_database=False)
        try:
            cur = conn.cursor()
            cur.execute(f"CREATE DATABASE IF NOT EXISTS `{self.url.database}`")
            cur.execute("SELECT @@max_allowed_packet")
            (packet,) = cur.fetchone()
            if packet < 2 * self.split_size:
                raise DatabaseError(
                    f"the server's max_allowed_packet is {packet} bytes; neostore needs at least "
                    f"{2 * self.split_size}: set max_allowed_packet=1G in the server configuration "
                    "(see neostore/mariadb.cnf)"
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
            uint="BIGINT UNSIGNED",
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
                f"another writer held the commit lock of database {self.url.database} "
                f"for more than {timeout:g} s"
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

    def describe(self) -> dict[str, str]:
        conn = self._raw_connect()
        try:
            cur = conn.cursor()
            cur.execute("SELECT VERSION()")
            (version,) = cur.fetchone()
        finally:
            conn.close()
        return {"backend": "mariadb", "database": self.url.database, "engine": self.engine, "server": version}
