"""SQLite: the embedded default. WAL journal, one writer at a time, many readers."""

from __future__ import annotations

import fcntl
import os
import sqlite3
import time
from typing import Any

from ..errors import CommitLockTimeout, DatabaseError
from ..url import StoreURL
from .base import Backend, schema_statements


class _Connection(sqlite3.Connection):
    """A connection that can carry its commit-lock file descriptor."""

    lock_fd: int | None = None


class SQLiteBackend(Backend):
    """A Store database in one SQLite file.

    The commit lock is an ``flock`` on ``<file>.lock``: the kernel drops it
    when the holder dies, so a writer killed mid-commit never wedges the file.
    """

    kind = "sqlite"
    greatest = "MAX"
    # SQLite 3.32+ allows 32766 host parameters per statement.
    max_params = 30000

    def __init__(self, url: StoreURL, *, busy_timeout: float = 60.0, synchronous: str = "FULL"):
        self.path = url.path
        self.lock_path = url.path + ".lock"
        self.busy_timeout = busy_timeout
        # FULL: a commit survives power loss, not only a process crash, which
        # is what an acknowledgement promises.
        self.synchronous = synchronous.upper()
        directory = os.path.dirname(self.path)
        if not os.path.isdir(directory):
            raise DatabaseError(f"cannot create {self.path}: directory {directory} does not exist")

    def connect(self, *, for_writing: bool) -> Any:
        try:
            conn = sqlite3.connect(
                self.path,
                timeout=self.busy_timeout,
                isolation_level=None,
                check_same_thread=False,
                factory=_Connection,
            )
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={self.synchronous}")
            # Checkpoints stall the writer that triggers them; bigger steps
            # mean fewer stalls when BLOBs stream in.
            conn.execute("PRAGMA wal_autocheckpoint=16384")
            conn.execute("PRAGMA cache_size=-65536")
            if not for_writing:
                # Readers map the file: a BLOB is copied once (into the
                # Python bytes) instead of twice, 1.45x the read throughput
                # here. SQLite clamps this to its compile-time maximum.
                conn.execute(f"PRAGMA mmap_size={1 << 36}")
        except sqlite3.DatabaseError as exc:
            raise DatabaseError(f"cannot open SQLite database {self.path}: {exc}") from None
        return conn

    def has_table(self, cur: Any, table: str) -> bool:
        cur.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table,))
        return cur.fetchone() is not None

    def begin(self, conn: Any) -> None:
        conn.execute("BEGIN IMMEDIATE")

    def create_schema(self, conn: Any) -> None:
        statements = schema_statements(
            uint="INTEGER",
            blob="BLOB",
            hash_type="BLOB",
            name_type="BLOB",
            autoinc="",
            small_rows=" WITHOUT ROWID",
            big_rows="",
        )
        conn.execute("BEGIN IMMEDIATE")
        try:
            for statement in statements:
                conn.execute(statement)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def acquire_commit_lock(self, conn: Any, timeout: float) -> None:
        if conn.lock_fd is None:
            conn.lock_fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + timeout
        delay = 0.0005
        while True:
            try:
                fcntl.flock(conn.lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise CommitLockTimeout(
                        f"another writer held the commit lock of {self.path} for more than {timeout:g} s"
                    ) from None
                time.sleep(delay)
                delay = min(delay * 2, 0.02)

    def release_commit_lock(self, conn: Any) -> None:
        if conn.lock_fd is not None:
            fcntl.flock(conn.lock_fd, fcntl.LOCK_UN)

    def close_connection(self, conn: Any) -> None:
        if conn.lock_fd is not None:
            os.close(conn.lock_fd)
            conn.lock_fd = None
        conn.close()

    def describe(self) -> dict[str, str]:
        return {"backend": "sqlite", "file": self.path, "sqlite": sqlite3.sqlite_version}
