"""Durability: kill -9 of a writer at every commit phase, and of mariadbd itself.

No mocks: the writer is a real process (tests/neostore/store_worker.py) that commits
numbered transactions and announces each phase; the test SIGKILLs it at a
chosen phase (or the MariaDB server under it), reopens the store and checks
what the commit protocol promises (neostore/store.py's docstring):

- after open, nothing voted-but-unfinished is left (ttrans/tobj empty);
- every transaction whose ``finish`` returned is there, with exact values;
- no transaction is partly visible: each one writes all the slots or is absent;
- no row is dangling or leaked (obj -> data, trans <-> obj, data <- obj);
- the dead writer's commit lock is gone: a new writer commits at once.
"""

from __future__ import annotations

import os
import random
import time

import pytest

from tests.neostore.store_worker import (
    Worker,
    commit_numbered,
    hex_list,
    parse_value,
    txn_number,
    value_for,
)
from windvane import neostore
from windvane.neostore.backends import backend_for
from windvane.neostore.tids import tid_time

pytestmark = pytest.mark.crash

SLOTS = 8  # objects every numbered transaction writes
SIZE = 4096  # bytes per value (the loops use smaller ones)
ROUNDS = 6  # kills at random moments of a commit loop, per backend


# -- helpers -------------------------------------------------------------------


def seed(url: str) -> list[bytes]:
    """Create the slot objects (transaction number 0); return their oids."""
    with neostore.open(url) as store:
        slots = [neostore.p64(oid) for oid in store.new_oids(SLOTS)]
        commit_numbered(store, slots, 0, SIZE)
    return slots


def writer(url: str, slots: list[bytes], log: str, first: int, *options: str) -> Worker:
    """A commit worker process writing transactions ``first``, ``first + 1``, ..."""
    return Worker("commit", url, "--slots", hex_list(slots), "--log", log, "--first", str(first), *options)


def acknowledged(log: str) -> dict[int, bytes]:
    """{transaction number: tid} of every commit whose finish returned to the worker."""
    if not os.path.exists(log):
        return {}
    with open(log, "rb") as f:
        return {int(number): bytes.fromhex(tid.decode()) for tid, number in (line.split() for line in f)}


def wait_for_commit_lock(url: str) -> None:
    """Wait until the commit lock is free, i.e. its dead holder's lock was dropped.

    SQLite's flock goes with the process (already reaped); MariaDB releases
    a GET_LOCK when it notices the connection closed, a moment after the
    kill. A lock that stays held is a failure: CommitLockTimeout.
    """
    backend = backend_for(neostore.parse_url(url))
    conn = backend.connect(for_writing=True)
    try:
        backend.acquire_commit_lock(conn, 30)
        backend.release_commit_lock(conn)
    finally:
        backend.close_connection(conn)
        backend.close()


def assert_commit_lock_held(url: str, slots: list[bytes]) -> None:
    """Another writer cannot commit: the paused worker holds the commit lock."""
    with neostore.open(url, commit_lock_timeout=0.2) as other:
        with pytest.raises(neostore.CommitLockTimeout):
            commit_numbered(other, slots, 999_999, 16)


def scalar(store: neostore.Store, sql: str) -> int:
    """One number from a raw SQL query on the store's database."""
    conn = store.backend.connect(for_writing=False)
    try:
        cur = conn.cursor()
        cur.execute(sql)
        (value,) = cur.fetchone()
        cur.close()
        return int(value)
    finally:
        store.backend.close_connection(conn)


def assert_no_dangling_rows(store: neostore.Store) -> None:
    dangling = {
        "obj rows whose data row is missing": "SELECT COUNT(*) FROM obj o LEFT JOIN data d ON d.id = o.data_id "
        "WHERE o.data_id IS NOT NULL AND d.id IS NULL",
        "obj rows without their trans row": "SELECT COUNT(*) FROM obj o "
        "WHERE NOT EXISTS (SELECT 1 FROM trans t WHERE t.tid = o.tid)",
        "trans rows without obj rows": "SELECT COUNT(*) FROM trans t "
        "WHERE NOT EXISTS (SELECT 1 FROM obj o WHERE o.tid = t.tid)",
        # Values uploaded by a transaction that was then discarded must go too.
        "data rows nothing references": "SELECT COUNT(*) FROM data d "
        "WHERE NOT EXISTS (SELECT 1 FROM obj o WHERE o.data_id = d.id)",
    }
    found = {what: scalar(store, sql) for what, sql in dangling.items()}
    assert found == dict.fromkeys(dangling, 0)


def visible_transactions(store: neostore.Store, slots: list[bytes]) -> dict[int, bytes]:
    """{number: tid} of the committed transactions, checking each is complete and exact."""
    visible: dict[int, bytes] = {}
    for info in store.iter_transactions():
        number = txn_number(info.description)
        records = list(store.records(info.tid))
        # All or nothing: every slot, each with this transaction's value.
        assert [r.oid for r in records] == slots, f"transaction {number} is partial"
        for index, record in enumerate(records):
            assert parse_value(record.data)[:2] == (number, index)
            assert record.data == value_for(*parse_value(record.data))
        visible[number] = info.tid
    # Each writer commits its numbers in order, so numbers follow tids.
    assert list(visible) == sorted(visible), "transaction numbers out of tid order (or repeated)"
    return visible


def assert_recovered(url: str, slots: list[bytes], log: str) -> dict[int, bytes]:
    """Reopen the store after a kill and check every promise; return {number: tid} visible."""
    wait_for_commit_lock(url)
    # commit_lock_timeout=0: the new writer must not wait for anybody.
    with neostore.open(url, commit_lock_timeout=0) as store:
        counts = store.counts()
        assert (counts["ttrans"], counts["tobj"]) == (0, 0), "open must discard unfinished transactions"
        assert_no_dangling_rows(store)
        visible = visible_transactions(store, slots)
        for number, tid in acknowledged(log).items():
            assert visible.get(number) == tid, f"acknowledged transaction {number} was lost"
        # The current state is the newest transaction's, entirely.
        newest = max(visible)
        current = [store.load(oid) for oid in slots]
        assert [serial for _, serial in current] == [visible[newest]] * SLOTS
        assert [parse_value(value)[:2] for value, _ in current] == [(newest, i) for i in range(SLOTS)]

        # A new writer commits right away, on top of what survived.
        tid = commit_numbered(store, slots, newest + 1, SIZE)
        assert store.last_transaction() == tid
        assert [store.load(oid) for oid in slots] == [(value_for(newest + 1, i, SIZE), tid) for i in range(SLOTS)]
    return visible


# -- a writer killed at each phase -----------------------------------------------


def test_writer_killed_while_uploading(store_url, tmp_path):
    """Values uploaded before vote live in an uncommitted database transaction: they vanish."""
    slots, log = seed(store_url), str(tmp_path / "acknowledged")
    # A tiny flush_bytes makes every write upload its value at once.
    with writer(store_url, slots, log, 1, "--pause-at", "uploading", "--flush-bytes", "1024") as worker:
        worker.expect("paused")
        # The lock is taken by the first upload, not only at vote.
        assert_commit_lock_held(store_url, slots)
        worker.kill()
    visible = assert_recovered(store_url, slots, log)
    assert 1 not in visible


def test_writer_killed_after_vote(store_url, tmp_path):
    """A voted transaction is durable but invisible; its dead writer's rows are discarded."""
    slots, log = seed(store_url), str(tmp_path / "acknowledged")
    with writer(store_url, slots, log, 1, "--pause-at", "voted") as worker:
        worker.expect("paused")
        with neostore.open(store_url, read_only=True) as observer:
            counts = observer.counts()
            assert (counts["ttrans"], counts["tobj"]) == (1, SLOTS), "vote wrote the replay log"
            assert [txn_number(info.description) for info in observer.iter_transactions()] == [0]
            assert all(parse_value(observer.load(oid)[0])[0] == 0 for oid in slots), "vote made nothing visible"
        assert_commit_lock_held(store_url, slots)
        worker.kill()
    visible = assert_recovered(store_url, slots, log)
    assert 1 not in visible


def test_writer_killed_right_after_finish(store_url, tmp_path):
    """Once finish returned, the transaction survives the writer's death."""
    slots, log = seed(store_url), str(tmp_path / "acknowledged")
    with writer(store_url, slots, log, 1, "--pause-at", "finished") as worker:
        words = worker.expect("paused")
        assert words == ["paused", "finished"]
        worker.kill()
    visible = assert_recovered(store_url, slots, log)
    assert visible[1] == acknowledged(log)[1]


def test_writer_killed_during_finish(store_url, tmp_path):
    """Kill a loop of small commits as a finish begins, a few times: each commit is all or nothing."""
    slots, log = seed(store_url), str(tmp_path / "acknowledged")
    seed_value = random.randrange(1 << 30)
    rng = random.Random(seed_value)  # in the failure message, to replay a run
    outcomes = []
    for round_ in range(ROUNDS):
        first = (round_ + 1) * 1000
        target = first + rng.randrange(2, 12)
        with writer(store_url, slots, log, first, "--count", "500", "--size", "300") as worker:
            while int(worker.expect("voted")[1]) < target:
                pass
            # finish follows at once and is one small database commit (well
            # under a millisecond to a few): a delay of 0-2 ms after vote
            # lands before, inside or just after it.
            time.sleep(rng.uniform(0, 0.002))
            worker.kill()
        visible = assert_recovered(store_url, slots, log)
        outcomes.append(target in visible)
        # Everything before the killed transaction had finished.
        assert set(range(first, target)) <= set(visible), f"random seed {seed_value}"
    print(f"killed transaction committed in rounds: {outcomes} (random seed {seed_value})")


# -- the MariaDB server killed under a writer -----------------------------------------

# ``private_server`` (tests/conftest.py) is a server of the test's own: it gets killed.


def test_mariadbd_killed_during_commits(private_server, tmp_path):
    """SIGKILL mariadbd under a committing writer: acknowledged commits survive, stores reconnect."""
    url, log = private_server.url("crash"), str(tmp_path / "acknowledged")
    slots = seed(url)
    # A store of the test process that has live connections when the server dies.
    store = neostore.open(url)
    try:
        assert parse_value(store.load(slots[0])[0])[0] == 0
        commit_numbered(store, slots, 1, SIZE)
        with writer(url, slots, log, 2, "--count", "100000", "--size", "1024", "--retry-errors") as worker:
            for _ in range(10):
                worker.expect("finished")
            # As a finish begins, so the kill lands mid-commit.
            worker.expect("finishing")
            time.sleep(random.uniform(0, 0.003))
            assert private_server.kill()
            private_server.start(timeout=120)  # InnoDB crash recovery
            restarted = time.time()
            # The kill lands inside a commit or between two; in the second
            # case the Store reconnects without an error to report.  Either
            # way the same Store must commit again on the restarted server:
            # five commits whose tids are later than the restart.
            later = 0
            while later < 5:
                words = worker.expect("finished")
                later += tid_time(int(words[2], 16)) > restarted
            worker.kill()

        # The store whose connections died reads and commits again, first try.
        assert parse_value(store.load(slots[0])[0])[1] == 0
        number = max(acknowledged(log)) + 100
        tid = commit_numbered(store, slots, number, SIZE)
        assert store.load(slots[-1]) == (value_for(number, SLOTS - 1, SIZE), tid)
    finally:
        store.close()
    visible = assert_recovered(url, slots, log)
    assert visible[number] == tid
