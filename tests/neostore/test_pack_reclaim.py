"""Pack gives the disk back: the SQLite file (and its write-ahead log) or the MariaDB tablespaces shrink.

Sizes are measured apart from the code under test, on the files themselves:
SQLite's file (its write-ahead log checkpointed into it first) and the .ibd
files in the private MariaDB server's data directory. Other processes keep
the store open meanwhile: counter writers and a snapshot reader
(tests/neostore/store_worker.py) run through the pack and must end cleanly, with
every increment counted and every snapshot consistent.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import sqlite3
import time

import pytest
import transaction.interfaces

from tests.neostore.store_worker import Worker, hex_list
from tests.neostore.test_concurrency import create_counters
from windvane import neostore
from windvane.neostore import p64
from windvane.neostore.backends.sqlite import SQLiteBackend

MB = 1_000_000
VALUE = 512 * 1024
BIG = 9 * 1024 * 1024  # above the 8 MiB split size: stored as bigdata chunks
WORKER_SECONDS = 3


def write_history(store: neostore.Store, objects: int = 16, revisions: int = 5) -> dict[bytes, bytes]:
    """Revisions of incompressible values (plus a split one); return each object's latest value."""
    oids = [p64(oid) for oid in store.new_oids(objects + 1)]
    serials: dict[bytes, bytes | None] = dict.fromkeys(oids)
    latest: dict[bytes, bytes] = {}
    for revision in range(revisions):
        txn = store.begin(b"test", b"history %d" % revision)
        for n, oid in enumerate(oids):
            if n == objects and revision >= 2:
                continue  # the split value gets two revisions
            latest[oid] = os.urandom(BIG if n == objects else VALUE)
            txn.write(oid, serials[oid], latest[oid])
        txn.vote()
        tid = txn.finish()
        serials.update((oid, tid) for oid in latest)
    return latest


def files_size(url: str, request) -> int:
    """Bytes of the store's files, read from the file system.

    SQLite's write-ahead log is moved into the file first: it is reused, not
    shrunk, as commits come, so its size says how many commits came since
    the last checkpoint, not what the store holds.
    """
    parsed = neostore.parse_url(url)
    if parsed.scheme == "sqlite":
        with contextlib.closing(sqlite3.connect(parsed.path)) as conn:
            assert conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] == 0
        return os.path.getsize(parsed.path)
    datadir = request.getfixturevalue("mariadb_server").datadir
    return sum(path.stat().st_size for path in (datadir / parsed.database).glob("*.ibd"))


def wait_for_a_commit_after(store: neostore.Store, tid: bytes, timeout: float = 60) -> None:
    """Return once another process committed after ``tid``: it is at work."""
    deadline = time.monotonic() + timeout
    while store.last_transaction() == tid:
        assert time.monotonic() < deadline, f"no commit in {timeout} s"
        time.sleep(0.005)


def check_counters(store: neostore.Store, pairs, results: list[dict]) -> None:
    """Every increment every writer made is there, on both counters of its pair."""
    for index, pair in enumerate(pairs):
        expected = sum(r["increments"][index] for r in results)
        assert [int(store.load(oid)[0]) for oid in pair] == [expected, expected]


@pytest.mark.parametrize("backend", ["sqlite", "mariadb"])
def test_pack_gives_the_disk_back_while_others_read_and_write(backend, request):
    url = request.getfixturevalue(f"{backend}_url")
    with neostore.open(url) as store:
        latest = write_history(store)
        # Made last, so on SQLite the counters sit at the end of the file:
        # the pages reclaim moves while the workers use them.
        pairs, _ = create_counters(store)
        before = files_size(url, request)
        oids = hex_list([oid for pair in pairs for oid in pair])
        common = ("--pairs", oids, "--seconds", str(WORKER_SECONDS))
        with contextlib.ExitStack() as stack:  # kills every worker if anything fails
            writers = [stack.enter_context(Worker("counters", url, *common, "--seed", str(n))) for n in range(2)]
            reader = stack.enter_context(Worker("reader", url, *common))
            for worker in [*writers, reader]:
                worker.expect("ready")
            for worker in [*writers, reader]:
                worker.send("go")
            stats = store.pack(
                store.last_transaction(),
                progress=lambda phase, count: (
                    phase == "reclaim" and wait_for_a_commit_after(store, store.last_transaction())
                ),
            )
            txn = store.begin(b"test", b"after the pack")
            txn.write(store.new_oid(), None, b"marker")
            txn.vote()
            after_pack = txn.finish()
            results = [worker.result(timeout=WORKER_SECONDS + 120) for worker in writers]
            snapshots = reader.result(timeout=WORKER_SECONDS + 120)
        after = files_size(url, request)
        during = sum(
            neostore.u64(stats.pack_tid) < int(tid, 16) < neostore.u64(after_pack) for r in results for tid in r["tids"]
        )
        print(
            f"{backend}: files {before / MB:.1f} MB -> {after / MB:.1f} MB; pack reports "
            f"{stats.bytes_freed / MB:.1f} MB freed ({stats.disk_before / MB:.1f} -> {stats.disk_after / MB:.1f}) "
            f"in {stats.seconds:.2f} s; {during} commits of other processes landed meanwhile"
        )

        # Four revisions of 16 values and one of the split value were dropped: ~42.5 MB.
        assert stats.revisions_deleted >= 16 * 4 + 1
        assert stats.notes == []
        assert before - after > 35 * MB
        assert stats.bytes_freed > 35 * MB
        for oid, value in latest.items():
            assert store.load(oid)[0] == value
            assert len(store.history(oid, None)) == 1

        # The other processes kept working through the pack (the progress
        # callback made sure they were at it as reclaim began) and after it.
        assert snapshots["violations"] == [] and snapshots["snapshots"] > 0
        assert during > 0
        assert any(int(tid, 16) > neostore.u64(after_pack) for r in results for tid in r["tids"])
        check_counters(store, pairs, results)
    if backend == "sqlite":
        with contextlib.closing(sqlite3.connect(neostore.parse_url(url).path)) as conn:
            assert conn.execute("PRAGMA auto_vacuum").fetchone()[0] == 2  # incremental, from its creation


def test_sqlite_file_without_incremental_vacuum_is_rewritten_once_when_asked(sqlite_url):
    path = neostore.parse_url(sqlite_url).path
    # A file whose header is written before neostore sets incremental vacuum,
    # like every store made before it did.
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA journal_mode=WAL")
    with neostore.open(sqlite_url) as store:
        kept = write_history(store)
        stats = store.pack(store.last_transaction())
        assert len(stats.notes) == 1
        assert "made without incremental vacuum; pack with --vacuum rewrites it once" in stats.notes[0]
        assert os.path.getsize(path) > 60 * MB  # the space stayed inside the file
        assert os.path.getsize(path + "-wal") == 0  # but not in the write-ahead log

        for vacuum in (True, False):  # rewritten once; from then on a plain pack gives the space back
            latest = write_history(store)
            kept.update(latest)
            stats = store.pack(store.last_transaction(), vacuum=vacuum)
            assert stats.notes == [] and stats.bytes_freed > 35 * MB
            # What is left: the values kept, and a little room for the tables.
            assert os.path.getsize(path) < sum(map(len, kept.values())) + 2 * MB
            assert os.path.getsize(path + "-wal") == 0
            for oid, value in kept.items():
                assert store.load(oid)[0] == value
    with contextlib.closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA auto_vacuum").fetchone()[0] == 2
        assert conn.execute("PRAGMA page_size").fetchone()[0] == 4096  # the size it was made with, kept


def test_a_new_sqlite_store_is_made_with_the_backends_page_size_and_a_value_spanning_pages_reads_back(sqlite_url):
    path = neostore.parse_url(sqlite_url).path
    value = os.urandom(3 * 1024 * 1024 + 5)  # a chain of hundreds of overflow pages
    with neostore.open(sqlite_url) as store:
        (oid,) = (p64(o) for o in store.new_oids(1))
        txn = store.begin()
        txn.write(oid, None, value)
        txn.vote()
        txn.finish()
        assert store.load(oid)[0] == value
    with contextlib.closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA page_size").fetchone()[0] == SQLiteBackend.page_size != 4096
        assert conn.execute("PRAGMA auto_vacuum").fetchone()[0] == 2
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_mariadb_rebuilds_only_tables_that_lost_a_fair_share_unless_asked(mariadb_url, mariadb_server):
    datadir = mariadb_server.datadir / neostore.parse_url(mariadb_url).database

    def inodes() -> dict[str, int]:
        return {name: (datadir / f"{name}.ibd").stat().st_ino for name in ("obj", "data", "bigdata")}

    with neostore.open(mariadb_url) as store:
        oids = [p64(oid) for oid in store.new_oids(20)]
        txn = store.begin()
        for oid in oids:
            txn.write(oid, None, os.urandom(1000))
        txn.vote()
        first = txn.finish()
        txn = store.begin()
        txn.write(oids[0], first, b"second")
        txn.vote()
        txn.finish()
        untouched = inodes()
        stats = store.pack(store.last_transaction())  # one row of 21 in obj, one of 20 in data
        assert (stats.revisions_deleted, stats.data_deleted, stats.notes) == (1, 1, [])
        assert inodes() == untouched
        stats = store.pack(store.last_transaction(), vacuum=True)
        rebuilt = inodes()
        assert all(rebuilt[name] != untouched[name] for name in untouched)  # each is a new file
        assert store.load(oids[0])[0] == b"second" and store.load(oids[1])[0] != b"second"


def test_mariadb_table_in_use_too_long_is_left_as_it_was_and_said(mariadb_url, mariadb_server):
    import mariadb

    with neostore.open(mariadb_url) as store:
        latest = write_history(store, objects=4, revisions=2)
        store.backend.rebuild_lock_wait = 1  # instead of 10 s
        # Another session's open transaction has read `data`: the rebuild
        # cannot take the table from it.
        other = mariadb.connect(
            user="root",
            unix_socket=mariadb_server.socket,
            database=neostore.parse_url(mariadb_url).database,
            autocommit=False,
        )
        try:
            other.cursor().execute("SELECT COUNT(*) FROM data")
            stats = store.pack(store.last_transaction(), vacuum=True)
            other.commit()
        finally:
            other.close()
        assert len(stats.notes) == 1
        assert stats.notes[0].startswith("table data was not rebuilt: Lock wait timeout exceeded")
        assert stats.notes[0].endswith(
            "(a transaction kept using the table longer than the rebuild waits; pack again later)"
        )
        for oid, value in latest.items():
            assert store.load(oid)[0] == value
        stats = store.pack(store.last_transaction(), vacuum=True)  # once the table is free
        assert stats.notes == [] and stats.bytes_freed > 3 * VALUE  # the four values dropped before


class Deadlock:
    """Another session that makes InnoDB roll a neostore transaction back.

    It holds an uncommitted row with the hash of the transaction's second
    value, so the transaction's upload waits on it after inserting the
    first; then it inserts the first value's hash itself: a deadlock, whose
    victim InnoDB picks as the side that did less (this session inserted
    ballast rows first). An online table rebuild during pack ends some
    commits the same way, with the same error.
    """

    def __init__(self, server, url: str):
        import mariadb

        def connect():
            return mariadb.connect(
                user="root", unix_socket=server.socket, database=neostore.parse_url(url).database, autocommit=False
            )

        self.conn, self.probe = connect(), connect()
        self.conn.autocommit = self.probe.autocommit = True
        self.conn.cursor().execute("CREATE TABLE IF NOT EXISTS ballast (n INT PRIMARY KEY)")
        self.conn.autocommit = False

    def hold(self, value: bytes) -> None:
        cur = self.conn.cursor()
        self.conn.begin()
        cur.executemany("INSERT INTO ballast VALUES (?)", [(n,) for n in range(500)])
        self._insert(cur, value)

    def close_the_cycle(self, value: bytes) -> None:
        """Once the transaction waits on the held row: make the cycle, then let go (roll back)."""
        self.wait_for_a_lock_wait()
        self._insert(self.conn.cursor(), value)  # waits until InnoDB rolls the transaction back
        self.conn.rollback()

    def close(self) -> None:
        self.conn.close()
        self.probe.close()

    def wait_for_a_lock_wait(self) -> None:
        """Until neostore's upload has been waiting a while (a two-row insert takes well under a millisecond)."""
        cur = self.probe.cursor()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            cur.execute(
                "SELECT COUNT(*) FROM information_schema.PROCESSLIST "
                "WHERE INFO LIKE 'INSERT INTO data %' AND TIME_MS > 300 AND ID != CONNECTION_ID()"
            )
            if cur.fetchone()[0]:
                return
            time.sleep(0.05)
        raise AssertionError("the transaction never waited on the held row")

    @staticmethod
    def _insert(cur, value: bytes) -> None:
        cur.execute(
            "INSERT INTO data (hash, compression, size, chunks, value) VALUES (?, 0, 1, 0, ?)",
            (neostore.values.value_hash(value), b"not the value"),
        )


def test_a_transaction_the_database_rolls_back_runs_again(mariadb_url, mariadb_server, caplog):
    first, second = os.urandom(1000), os.urandom(1000)
    with neostore.open(mariadb_url) as store, contextlib.closing(Deadlock(mariadb_server, mariadb_url)) as other:
        oids = [p64(oid) for oid in store.new_oids(2)]
        other.hold(second)
        txn = store.begin(b"test", b"rolled back once")
        txn.write(oids[0], None, first)
        txn.write(oids[1], None, second)
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            voting = pool.submit(txn.vote)
            other.close_the_cycle(first)
            voting.result(timeout=60)
        tid = txn.finish()
        assert "the database rolled a transaction back" in caplog.text
        assert [store.load(oid) for oid in oids] == [(first, tid), (second, tid)]
        assert len(store.history(oids[0], None)) == 1


def test_a_rolled_back_transaction_that_uploaded_early_says_run_it_again(mariadb_url, mariadb_server):
    first, second = os.urandom(1000), os.urandom(1000)
    with (
        neostore.open(mariadb_url, flush_bytes=1) as store,
        contextlib.closing(Deadlock(mariadb_server, mariadb_url)) as other,
    ):
        before = store.last_transaction()
        oids = [p64(oid) for oid in store.new_oids(2)]
        other.hold(second)
        txn = store.begin(b"test", b"rolled back after an early upload")
        txn.write(oids[0], None, first)  # uploaded at once (flush_bytes=1): gone with the rollback
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            writing = pool.submit(txn.write, oids[1], None, second)
            other.close_the_cycle(first)
            with pytest.raises(neostore.TransientDatabaseError, match="run it again") as raised:
                writing.result(timeout=60)
        assert isinstance(raised.value, transaction.interfaces.TransientError)  # what retry loops catch
        assert txn.state == "aborted"
        assert store.last_transaction() == before
        # Run again, as the error says: it commits.
        txn = store.begin(b"test", b"again")
        txn.write(oids[0], None, first)
        txn.write(oids[1], None, second)
        txn.vote()
        tid = txn.finish()
        assert [store.load(oid) for oid in oids] == [(first, tid), (second, tid)]
