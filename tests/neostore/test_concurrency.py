"""Concurrency: several processes committing to one store over overlapping objects.

Four writer processes (tests/neostore/store_worker.py ``counters``) increment shared
counters for a while, each transaction expecting the serials it read and
retrying on ConflictError; a reader process meanwhile checks snapshots.
Counters come in pairs and every transaction increments both counters of a
pair by the same step, so any consistent snapshot shows each pair equal.
"""

from __future__ import annotations

import contextlib

import pytest

from tests.neostore.store_worker import Worker, hex_list
from windvane import neostore
from windvane.neostore import u64

MARIADB_SECONDS = 30  # how long the writers run on MariaDB
SQLITE_SECONDS = 5  # ... and on SQLite (one file, one writer at a time)
WRITERS = 4
PAIRS = 10  # 20 counters


def create_counters(store: neostore.Store) -> tuple[list[tuple[bytes, bytes]], bytes]:
    """PAIRS pairs of counters, all 0; returns them and the creating tid."""
    oids = [neostore.p64(oid) for oid in store.new_oids(2 * PAIRS)]
    txn = store.begin(b"test", b"create counters")
    for oid in oids:
        txn.write(oid, None, b"0")
    txn.vote()
    return list(zip(oids[0::2], oids[1::2])), txn.finish()


def run_workload(url: str, seconds: float) -> tuple[list[tuple[bytes, bytes]], bytes, list[dict], dict]:
    """Run WRITERS counter processes and one snapshot reader; return pairs, creating tid, results."""
    with neostore.open(url) as store:
        pairs, created = create_counters(store)
    oids = hex_list([oid for pair in pairs for oid in pair])
    common = ("--pairs", oids, "--seconds", str(seconds))
    with contextlib.ExitStack() as stack:  # kills every process if anything fails
        workers = [stack.enter_context(Worker("counters", url, *common, "--seed", str(n))) for n in range(WRITERS)]
        reader = stack.enter_context(Worker("reader", url, *common))
        for worker in [*workers, reader]:
            worker.expect("ready")
        for worker in [*workers, reader]:  # start together, so they overlap the whole time
            worker.send("go")
        results = [worker.result(timeout=seconds + 120) for worker in workers]
        snapshots = reader.result(timeout=seconds + 120)
    return pairs, created, results, snapshots


def counter_history(store: neostore.Store, oid: bytes) -> list[tuple[int, int]]:
    """[(tid, value)] of every revision of a counter, oldest first."""
    revisions = reversed(store.history(oid, size=None))
    return [(u64(r.tid), int(store.load_serial(oid, r.tid))) for r in revisions]


@pytest.mark.slow
@pytest.mark.parametrize(
    "backend, seconds", [("sqlite", SQLITE_SECONDS), ("mariadb", MARIADB_SECONDS)], ids=["sqlite", "mariadb"]
)
def test_concurrent_increments(backend, seconds, request):
    url = request.getfixturevalue(f"{backend}_url")
    pairs, created, results, snapshots = run_workload(url, seconds)
    print(
        f"{backend}, {seconds} s: commits per writer {[len(r['tids']) for r in results]}, "
        f"conflicts {sum(r['conflicts'] for r in results)}, snapshots read {snapshots['snapshots']} "
        f"({snapshots['distinct']} distinct)"
    )

    # Conflicts happened, and surfaced as ConflictError (the workers catch
    # only that; anything else would have failed them).
    assert sum(r["conflicts"] for r in results) > 0

    # Each worker's tids increase, and no tid was handed out twice.
    worker_tids = [[int(t, 16) for t in r["tids"]] for r in results]
    for tids in worker_tids:
        assert tids == sorted(tids) and len(set(tids)) == len(tids)
    all_tids = sorted(t for tids in worker_tids for t in tids)
    assert len(set(all_tids)) == len(all_tids)
    # A transaction gets a tid above every transaction finished before it began.
    for r in results:
        assert all(int(tid, 16) > int(seen, 16) for tid, seen in zip(r["tids"], r["last_seen"]))

    with neostore.open(url, read_only=True) as store:
        # The trans table holds exactly the creation and the reported commits.
        assert [u64(info.tid) for info in store.iter_transactions()] == [u64(created), *all_tids]

        expected = [sum(r["increments"][i] for r in results) for i in range(PAIRS)]
        for index, pair in enumerate(pairs):
            first, second = (counter_history(store, oid) for oid in pair)
            for history in (first, second):
                # No lost update: the counter counts every successful increment...
                assert history[-1][1] == expected[index]
                # ...and in tid order its revisions go 0, 1, 2, ...: each
                # increment expected the revision before it in tid order,
                # so tids follow the order in which the commits happened.
                assert [value for _, value in history] == list(range(expected[index] + 1))
            # Both counters of a pair changed in the same transactions.
            assert [tid for tid, _ in first] == [tid for tid, _ in second]

    # The reader saw every snapshot consistent, and saw commits land meanwhile.
    assert snapshots["violations"] == []
    assert snapshots["distinct"] > 1
