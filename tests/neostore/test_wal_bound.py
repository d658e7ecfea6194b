"""SQLite's write-ahead log stays bounded while a store is in use: a writer with nothing to commit
checkpoints and empties it once it passes ``SQLiteBackend.wal_limit``, never waiting for another writer
or a reader; on real SQLite files."""

from __future__ import annotations

import contextlib
import os
import sqlite3

from windvane import neostore
from windvane.neostore.backends.sqlite import SQLiteBackend

LIMIT = SQLiteBackend.wal_limit
#: What one :func:`small_commit` adds to the log at most: a few pages of each table and index it touches.
ONE_COMMIT = 1 << 20


def small_commit(store: neostore.Store, oids: list[bytes], n: int) -> None:
    """One commit of a few bytes to each of ``oids``."""
    tx = store.begin(description=b"small")
    for oid in oids:
        tx.write(oid, None, b"value %d of %s" % (n, oid.hex().encode()), check=False)
    tx.commit()


def wal_size(path: str) -> int:
    return os.path.getsize(path + "-wal") if os.path.exists(path + "-wal") else 0


def fill_log(store: neostore.Store, path: str, oids: list[bytes], past: int, start: int = 0) -> int:
    """Small commits until the log holds more than ``past`` bytes; the next commit number."""
    n = start
    while wal_size(path) <= past:
        small_commit(store, oids, n)
        n += 1
    return n


def test_small_commits_with_idle_checkpoints_keep_the_log_bounded(tmp_path):
    path = str(tmp_path / "store.db")
    with neostore.open(f"sqlite:///{path}") as store:
        oids = [store.new_oid() for _ in range(20)]
        # Without idle checkpoints the log grows past the bound (SQLite checkpoints every 64 MiB only).
        first = fill_log(store, path, oids, past=2 * LIMIT)
        assert store.checkpoint_idle() and wal_size(path) == 0
        largest, emptied = 0, 0
        for n in range(first, first + 400):
            small_commit(store, oids, n)
            largest = max(largest, wal_size(path))
            if store.checkpoint_idle():
                emptied += 1
                assert wal_size(path) == 0
        assert emptied >= 2  # the 400 commits' log is several times the bound
        assert largest <= LIMIT + ONE_COMMIT
        assert all(store.load(oid)[0] == b"value %d of %s" % (n, oid.hex().encode()) for oid in oids)
        assert not store.checkpoint_idle()  # under the bound: nothing to do


def test_the_idle_checkpoint_waits_for_no_reader_and_no_writer(tmp_path):
    path = str(tmp_path / "store.db")
    with neostore.open(f"sqlite:///{path}") as store:
        oids = [store.new_oid() for _ in range(20)]
        fill_log(store, path, oids, past=LIMIT)
        # A reader in the middle of a read transaction needs the log's frames: it is not emptied.
        with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as reader:
            reader.execute("BEGIN")
            reader.execute("SELECT COUNT(*) FROM obj").fetchone()
            assert not store.checkpoint_idle()
            assert wal_size(path) > LIMIT
            reader.execute("COMMIT")
        # Another writer (a second store on the file) holds the commit lock: nothing is done.
        with neostore.open(f"sqlite:///{path}") as other:
            backend = other.backend
            with other.pool.writer(transaction=False) as conn:
                backend.acquire_commit_lock(conn, 1.0)
                try:
                    assert not store.checkpoint_idle()
                finally:
                    backend.release_commit_lock(conn)
            assert wal_size(path) > LIMIT
        assert store.checkpoint_idle() and wal_size(path) == 0
        assert store.load(oids[0])[0].startswith(b"value ")


def test_while_big_commits_come_the_log_is_written_over_in_place_and_emptied_once_they_pause(tmp_path):
    path = str(tmp_path / "store.db")
    busy = SQLiteBackend.busy_log_bytes
    with neostore.open(f"sqlite:///{path}") as store:
        oids = [store.new_oid() for _ in range(8)]
        sizes, values = [], {}
        for _ in range(6):  # each commit puts half the busy size in the log: SQLite checkpoints every other one
            tx = store.begin()
            for oid in oids:
                values[oid] = os.urandom(busy // 2 // len(oids))
                tx.write(oid, None, values[oid], check=False)
            tx.commit()
            sizes.append(wal_size(path))
        # Once it holds the busy size the log stays there: a checkpoint cuts it back to that size, never to the
        # idle bound, and the next commits write over it instead of growing it again.
        assert all(busy <= size <= busy + ONE_COMMIT for size in sizes[1:]), sizes
        assert store.checkpoint_idle() and wal_size(path) == 0
        assert all(store.load(oid)[0] == value for oid, value in values.items())
