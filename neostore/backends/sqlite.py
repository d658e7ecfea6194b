"""SQLite: the embedded default. WAL journal, one writer at a time, many readers.

The write-ahead log (``<file>-wal``) takes every page a commit changes, so
it grows far faster than the data: small commits change a few pages of
each index for a few rows. SQLite moves it into the file every
``wal_autocheckpoint`` pages but never shrinks it by itself. While writers
work, a store lets it hold :attr:`SQLiteBackend.busy_log_bytes` (a
checkpoint then truncates it to that size, ``journal_size_limit``), and
the next commits write over it in place; a writer with nothing to do
checkpoints and empties a log past :attr:`SQLiteBackend.wal_limit`
(:meth:`SQLiteBackend.checkpoint_idle`).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import sqlite3
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any
from urllib.parse import quote

from ..errors import CommitLockTimeout, DatabaseError, LeaseHeldError, StorageUnavailableError, StoreNotFoundError
from ..url import StoreURL
from .base import Backend, Lease, schema_statements

# SQLite failing for now: busy or locked by another connection, out of memory, an I/O error, a full disk,
# a file it cannot open, a lock protocol race. The same statements may succeed later.
_TRANSIENT_CODES = {
    sqlite3.SQLITE_BUSY,
    sqlite3.SQLITE_LOCKED,
    sqlite3.SQLITE_NOMEM,
    sqlite3.SQLITE_IOERR,
    sqlite3.SQLITE_FULL,
    sqlite3.SQLITE_CANTOPEN,
    sqlite3.SQLITE_PROTOCOL,
}


class _Connection(sqlite3.Connection):
    """A connection that can carry its commit lock's file descriptors (see :class:`_CommitLock`)."""

    lock_fd: int | None = None
    queue_fd: int | None = None


def _open_lock_file(path: str) -> int:
    return os.open(path, os.O_RDWR | os.O_CREAT, 0o644)


class _CommitLock:
    """The commit lock of one SQLite file, across processes: an ``flock`` on ``<file>.lock``, taken in
    turn through a second one on ``<file>.queue``.

    A writer that finds the lock held waits for it holding the queue, in the
    kernel, which wakes it as soon as the holder lets go. The holder cannot
    take the lock straight back (it must pass the queue first), so writers
    that commit one group after another in several processes take turns.
    The wait runs in a thread of its own so that it can time out; a wait
    given up keeps its own descriptors and lets go of both locks once it
    has them.
    """

    def __init__(self, lock_path: str, queue_path: str):
        self.lock_path = lock_path
        self.queue_path = queue_path

    def acquire(self, conn: _Connection, timeout: float) -> bool:
        """Take the lock for ``conn`` within ``timeout`` seconds; False if it could not."""
        if conn.lock_fd is None or conn.queue_fd is None:
            conn.lock_fd, conn.queue_fd = _open_lock_file(self.lock_path), _open_lock_file(self.queue_path)
        if _try_flock(conn.queue_fd):
            if _try_flock(conn.lock_fd):
                fcntl.flock(conn.queue_fd, fcntl.LOCK_UN)
                return True
            holding_queue = True
        else:
            holding_queue = False  # another writer waits first
        if timeout <= 0:  # a try, which waits for nothing
            if holding_queue:
                fcntl.flock(conn.queue_fd, fcntl.LOCK_UN)
            return False
        wait = _LockWait(conn.lock_fd, conn.queue_fd, holding_queue)
        if wait.finished(timeout):
            return True
        conn.lock_fd = conn.queue_fd = None  # the wait given up owns them now
        return False

    @staticmethod
    def release(conn: _Connection) -> None:
        if conn.lock_fd is not None:
            fcntl.flock(conn.lock_fd, fcntl.LOCK_UN)

    @staticmethod
    def close(conn: _Connection) -> None:
        for fd in (conn.lock_fd, conn.queue_fd):
            if fd is not None:
                os.close(fd)
        conn.lock_fd = conn.queue_fd = None


def _try_flock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


class _LockWait:
    """One wait for the commit lock in the kernel, in a thread: the queue first (unless held), then the lock."""

    def __init__(self, lock_fd: int, queue_fd: int, holding_queue: bool):
        self._fds = (lock_fd, queue_fd)
        self._holding_queue = holding_queue
        self._done = threading.Event()
        self._given_up = False
        self._error: OSError | None = None
        self._guard = threading.Lock()
        threading.Thread(target=self._run, name="windvane-commit-lock-wait", daemon=True).start()

    def finished(self, timeout: float) -> bool:
        """Whether the lock is held within ``timeout`` seconds (raising what the wait raised)."""
        done = self._done.wait(timeout)
        with self._guard:
            if not done and not self._done.is_set():
                self._given_up = True
                return False
        if self._error is not None:
            raise self._error
        return True

    def _run(self) -> None:
        lock_fd, queue_fd = self._fds
        try:
            if not self._holding_queue:
                fcntl.flock(queue_fd, fcntl.LOCK_EX)
            try:
                fcntl.flock(lock_fd, fcntl.LOCK_EX)
            finally:
                fcntl.flock(queue_fd, fcntl.LOCK_UN)
        except OSError as exc:
            self._error = exc
        with self._guard:
            if not self._given_up:
                self._done.set()
                return
        for fd in self._fds:  # closing lets go of the locks they hold
            os.close(fd)


class SQLiteBackend(Backend):
    """A Store database in one SQLite file.

    The commit lock is an ``flock`` on ``<file>.lock``, taken in turn through
    ``<file>.queue`` (:class:`_CommitLock`): the kernel drops both when the
    holder dies, so a writer killed mid-commit never wedges the file.
    """

    kind = "sqlite"
    single_writer = True  # one write transaction at a time per file: the commit lock holder's
    uint_type = "BIGINT"
    drop_temporary_table = "DROP TABLE"  # temporary tables live in the "temp" schema, dropped like any other
    greatest = "MAX"
    # OSError: the commit lock's file, beside the database's.
    driver_errors = (sqlite3.Error, OSError)
    insert_ignore = "INSERT OR IGNORE"
    returning = sqlite3.sqlite_version_info >= (3, 35)
    # SQLite 3.32+ allows 32766 host parameters per statement.
    max_params = 30000
    #: Bytes of a page of a new store. Big values are chains of overflow
    #: pages, each with its header and, under incremental auto-vacuum, its
    #: entry in a pointer-map page: twice SQLite's default halves both, while
    #: a commit of a few small rows still writes few bytes to the log.
    #: An existing file keeps the size it was made with.
    page_size = 8192
    #: Free pages one incremental-vacuum step gives back, under the commit
    #: lock: 32 MiB of 8 KiB pages keeps each step (and a writer's wait)
    #: short, and the write-ahead log it fills small.
    vacuum_step_pages = 4096
    #: Seconds the final checkpoint waits for readers still on the
    #: write-ahead log; writers wait as long, so well below their lock timeout.
    checkpoint_wait = 5.0
    #: Bytes of write-ahead log a writer at work keeps: SQLite checkpoints
    #: each time the log holds this much, and cuts it back to this size.
    busy_log_bytes = 64 << 20
    #: Bytes the write-ahead log is bounded at once writing pauses: an idle
    #: writer checkpoints and empties it once it is larger (see the module docstring).
    wal_limit = 4 << 20

    def __init__(self, url: StoreURL, *, create: bool = True, busy_timeout: float = 60.0, synchronous: str = "FULL"):
        self.path = url.path
        self.location = url.path
        self.lock_path = url.path + ".lock"
        self._commit_lock = _CommitLock(self.lock_path, url.path + ".queue")
        self.create = create
        self.busy_timeout = busy_timeout
        # FULL: a commit survives power loss, not only a process crash, which
        # is what an acknowledgement promises.
        self.synchronous = synchronous.upper()
        if not create:
            if not os.path.isfile(self.path):
                raise StoreNotFoundError(f"no store at {url}: {self.path} does not exist")
            return
        directory = os.path.dirname(self.path)
        if not os.path.isdir(directory):
            raise DatabaseError(f"cannot create {self.path}: directory {directory} does not exist")

    def connect(self, *, for_writing: bool) -> Any:
        try:
            # Without ``create`` the file is opened in mode rw: SQLite never makes it, not even when it
            # vanished since the check in __init__.
            conn = sqlite3.connect(
                f"file:{quote(self.path)}?mode={'rwc' if self.create else 'rw'}",
                uri=True,
                timeout=self.busy_timeout,
                isolation_level=None,
                check_same_thread=False,
                factory=_Connection,
            )
            if for_writing and self.create and _pragma(conn, "page_count") == 0:
                # Both take effect only in a file with no table yet, and only
                # before WAL is set: new stores can then give freed pages back to
                # the file system without a rewrite (see reclaim), and keep their
                # page size. Asked of an existing file they wait for the write
                # lock without a busy handler: only new files are asked.
                try:
                    conn.execute(f"PRAGMA page_size={self.page_size}")
                    conn.execute("PRAGMA auto_vacuum=INCREMENTAL")
                except sqlite3.OperationalError:
                    pass  # another connection is making the file, and sets it itself
            if self.create:
                # Persistent: a store's file is in WAL mode for good; a file this did not make is left as it is.
                conn.execute("PRAGMA journal_mode=WAL")
            if for_writing:
                # Debian's SQLite overwrites every freed page with zeros: pack
                # would write all it frees through the log and into the file,
                # needing free disk of that size just when the disk is full.
                # Reclaim cuts free pages off the file instead.
                conn.execute("PRAGMA secure_delete=FAST")
            conn.execute(f"PRAGMA synchronous={self.synchronous}")
            # Checkpoints stall the writer that triggers them; bigger steps
            # mean fewer stalls when BLOBs stream in. The log they leave is
            # written over in place by the next commits: a log cut shorter
            # grows again, and every fsync of a growing file commits the file
            # system's journal as well.
            busy_pages = self.busy_log_bytes // _pragma(conn, "page_size")
            conn.execute(f"PRAGMA wal_autocheckpoint={busy_pages}")
            conn.execute(f"PRAGMA journal_size_limit={self.busy_log_bytes}")
            # A writer's cache stays small: big values pass through it page by
            # page, and a cache larger than the CPU's own makes every page of
            # them a cold one; the index pages a writer looks up stay in the
            # operating system's cache between its commits.
            conn.execute(f"PRAGMA cache_size={-8192 if for_writing else -65536}")
            if not for_writing:
                # Readers map the file: a BLOB is copied once (into the
                # Python bytes) instead of twice, 1.45x the read throughput
                # here. SQLite clamps this to its compile-time maximum.
                conn.execute(f"PRAGMA mmap_size={1 << 36}")
        except sqlite3.DatabaseError as exc:
            unavailable = self.is_unavailable(exc)
            cls = StorageUnavailableError if unavailable else DatabaseError
            raise cls(f"cannot open SQLite database {self.path}: {exc}") from None
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
        if not self._commit_lock.acquire(conn, timeout):
            raise CommitLockTimeout(f"another writer held the commit lock of {self.path} for more than {timeout:g} s")

    def release_commit_lock(self, conn: Any) -> None:
        self._commit_lock.release(conn)

    def take_lease(self, name: str, holder: str, seconds: float) -> Lease:
        return FileLease(f"{self.path}.{name}.lease", name, holder)

    def is_unavailable(self, exc: BaseException) -> bool:
        # No server to lose: the file, its directory or its lock file vanished or cannot be opened.
        if isinstance(exc, OSError):
            return True
        return isinstance(exc, sqlite3.OperationalError) and any(
            text in str(exc) for text in ("unable to open", "disk I/O error", "no such table")
        )

    def is_transient(self, exc: BaseException) -> bool:
        # The primary result code (the low byte of an extended one) says what kind of failure it is.
        code = getattr(exc, "sqlite_errorcode", None)
        if isinstance(exc, sqlite3.Error) and code is not None and code & 0xFF in _TRANSIENT_CODES:
            return True
        return super().is_transient(exc)

    def close_connection(self, conn: Any) -> None:
        self._commit_lock.close(conn)
        conn.close()

    def describe(self) -> dict[str, str]:
        return {
            "backend": "sqlite",
            "file": self.path,
            "sqlite": sqlite3.sqlite_version,
            "file size": f"{_file_size(self.path):,} bytes",
            "write-ahead log": f"{self.log_size():,} bytes ({self.path}-wal, bounded at {self.wal_limit:,})",
        }

    # -- giving space back -------------------------------------------------------

    def disk_size(self) -> int:
        return _file_size(self.path) + self.log_size()

    def log_size(self) -> int:
        """Bytes of the write-ahead log (none while no connection is open)."""
        return _file_size(self.path + "-wal")

    def checkpoint_idle(self) -> bool:
        """Past :attr:`wal_limit`, move the write-ahead log into the file and empty it; whether it did.

        Never waits: not for the commit lock (a writer holds it, so the
        writer is not idle), nor for readers still on the log (then only
        what they no longer need is moved, and the log shrinks at a later
        checkpoint).
        """
        if self.log_size() <= self.wal_limit:
            return False
        conn = self.connect(for_writing=True)
        try:
            return not self._truncate_wal(conn, lock_timeout=0.0, wait=0.0)
        except CommitLockTimeout:
            return False
        finally:
            self.close_connection(conn)

    def reclaim(self, conn: Any, removed: Mapping[str, int], *, vacuum: bool, lock_timeout: float) -> list[str]:
        """Move pages off the end of the file into free ones and cut it, a step at a time.

        That needs incremental auto-vacuum, which a file only gets when it is
        created (stores made by this version) or rewritten whole. The rewrite
        (``vacuum``) holds the commit lock throughout, so it runs only when
        asked. Then a checkpoint moves the write-ahead log into the file and
        truncates the log.
        """
        notes = []
        mode = _pragma(conn, "auto_vacuum")
        try:
            if mode == _INCREMENTAL:
                self._incremental_vacuum(conn, lock_timeout)
            elif mode == _NONE and vacuum:
                notes += self._vacuum(conn, lock_timeout)
            elif mode == _NONE:
                free = _pragma(conn, "freelist_count") * _pragma(conn, "page_size")
                if free:
                    notes.append(
                        f"{free / 1e6:.1f} MB stay free inside {self.path} for new data: the file was made without "
                        "incremental vacuum; pack with --vacuum rewrites it once so that packs give space back "
                        "(writers wait meanwhile)"
                    )
            return notes + self._truncate_wal(conn, lock_timeout, self.checkpoint_wait)
        except CommitLockTimeout as exc:
            # What pack deleted is committed: only the giving back waits for a later pack.
            return [*notes, f"space not given back yet: {exc}; pack again to give it back"]

    def _incremental_vacuum(self, conn: Any, lock_timeout: float) -> None:
        free = _pragma(conn, "freelist_count")
        while free:
            with self._locked(conn, lock_timeout):
                # executescript steps the pragma to its end (execute would stop
                # after one page) and runs the three statements as one batch.
                conn.executescript(f"BEGIN IMMEDIATE; PRAGMA incremental_vacuum({self.vacuum_step_pages}); COMMIT;")
            left = _pragma(conn, "freelist_count")
            if left >= free:
                return  # pages are freed as fast as this gives them back: leave them to the next pack
            free = left

    def _vacuum(self, conn: Any, lock_timeout: float) -> list[str]:
        live = (_pragma(conn, "page_count") - _pragma(conn, "freelist_count")) * _pragma(conn, "page_size")
        # A copy goes to SQLite's temporary directory, then through the
        # write-ahead log back into the file: the live pages twice.
        needed: dict[int, list[Any]] = {}  # device -> [a directory on it, bytes needed there]
        for directory in (os.path.dirname(self.path), _temp_directory()):
            needed.setdefault(os.stat(directory).st_dev, [directory, 0])[1] += live + live // 10
        for directory, size in needed.values():
            free = shutil.disk_usage(directory).free
            if free < size:
                return [
                    f"{self.path} was not rewritten: that needs {size / 1e6:.1f} MB free in {directory}, "
                    f"which has {free / 1e6:.1f} MB"
                ]
        with self._locked(conn, lock_timeout):
            conn.execute("PRAGMA auto_vacuum=INCREMENTAL")
            conn.execute("VACUUM")
        return []

    def _truncate_wal(self, conn: Any, lock_timeout: float, wait: float) -> list[str]:
        """Checkpoint the write-ahead log and truncate it, under the commit lock, waiting ``wait`` seconds
        for readers still on it; what stays, as a note."""
        with self._locked(conn, lock_timeout):
            conn.execute(f"PRAGMA busy_timeout={int(wait * 1000)}")
            try:
                busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            finally:
                conn.execute(f"PRAGMA busy_timeout={int(self.busy_timeout * 1000)}")
        if busy:
            return [f"readers kept using {self.path}-wal: the file and its log shrink at a later checkpoint"]
        return []

    @contextmanager
    def _locked(self, conn: Any, timeout: float) -> Iterator[None]:
        self.acquire_commit_lock(conn, timeout)
        try:
            yield
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        finally:
            self.release_commit_lock(conn)


_NONE, _INCREMENTAL = 0, 2  # PRAGMA auto_vacuum values


def _file_size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except FileNotFoundError:
        return 0


def _pragma(conn: Any, name: str) -> int:
    return int(conn.execute(f"PRAGMA {name}").fetchone()[0])


def _temp_directory() -> str:
    """Where SQLite writes temporary files, searched in its own order."""
    for directory in (os.environ.get("SQLITE_TMPDIR"), os.environ.get("TMPDIR"), "/var/tmp", "/usr/tmp", "/tmp"):
        if directory and os.path.isdir(directory) and os.access(directory, os.W_OK | os.X_OK):
            return directory
    return "."


class FileLease(Lease):
    """A lease as an exclusive lock on a file beside the database, which the kernel drops with its holder."""

    def __init__(self, path: str, name: str, holder: str):
        self.fd: int | None = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            with os.fdopen(self.fd, "r") as held:
                other = held.read().strip() or "another process"
            self.fd = None
            raise LeaseHeldError(
                f"{other} holds the store's {name} lease ({path}): one long operation (pack, blob sweep, "
                "moving values) runs at a time"
            ) from None
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, holder.encode(), 0)

    def fence(self, cur: Any) -> None:
        return None  # the lock is held until released or its holder dies: it cannot be taken over

    def release(self) -> None:
        fd, self.fd = self.fd, None
        if fd is not None:
            os.ftruncate(fd, 0)
            os.close(fd)
