"""A store on a Galera cluster: writers on different nodes at once, reads on any node, a node that leaves and rejoins.

Real servers (the suite's 3-node cluster, or a module's own for the test
that kills a node), no mocks. Two writers go through two different nodes
(two stores whose URLs list the nodes in different orders) and commit small
transactions at the same time, to one shared counter and to counters of
their own: certification lets one of two concurrent commits win, and the
other is retried, as any caller retries a conflict or a transient error.
The writers either write with the serial they read (a conflict is caught at
vote), or take the commit lock first and write unchecked, as arrays do.
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from tests.galera import fresh_cluster_database, log_offset, node_url, ordered_url, state_transfer
from windvane import neostore
from windvane.neostore import p64, u64

COMMITS = 60  # per writer: half to the shared counter, half to its own
LOOPS = 40  # commit-then-read rounds across nodes


def create_counters(store: neostore.Store, count: int) -> list[bytes]:
    """``count`` new objects holding b"0", in one commit."""
    oids = [p64(oid) for oid in store.new_oids(count)]
    txn = store.begin(b"test", b"create counters")
    for oid in oids:
        txn.write(oid, None, b"0")
    txn.commit()
    return oids


@dataclass
class Writer:
    """One writer's store and what it got acknowledged."""

    store: neostore.Store
    name: bytes
    #: Whether an increment takes the commit lock, reads, and writes unchecked (as arrays do), rather than
    #: writing with the serial it read.
    locked: bool
    #: (tid, oid) of each acknowledged increment, in the order they were acknowledged.
    commits: list[tuple[bytes, bytes]] = field(default_factory=list)
    #: The head the writer read before each acknowledged increment began.
    heads: list[bytes] = field(default_factory=list)
    retries: int = 0

    def increment(self, oid: bytes) -> None:
        """Add one to ``oid``; again from the read on a conflict or transient error."""
        while True:
            head = self.store.last_transaction()
            txn = self.store.begin(self.name, b"increment " + oid.hex().encode())
            try:
                if self.locked:
                    txn.lock()  # nothing commits before this transaction, so what it reads stays the latest
                    value, _ = self.store.load(oid)
                    txn.write(oid, None, b"%d" % (int(value) + 1), check=False)
                    tid = txn.commit()
                else:
                    value, serial = self.store.load(oid)
                    txn.write(oid, serial, b"%d" % (int(value) + 1))
                    txn.vote()
                    tid = txn.finish()
            except neostore.ConflictError:
                self.retries += 1
                continue
            except neostore.NeoStoreError as exc:
                txn.abort()
                if not self.store.is_transient(exc):
                    raise
                self.retries += 1
                continue
            self.commits.append((tid, oid))
            self.heads.append(head)
            return


def run_together(*jobs: Callable[[], None]) -> None:
    """Run ``jobs`` in threads started at one moment; re-raise the first failure."""
    barrier = threading.Barrier(len(jobs))
    failures: list[BaseException] = []

    def run(job: Callable[[], None]) -> None:
        try:
            barrier.wait(timeout=60)
            job()
        except BaseException as exc:  # noqa: BLE001  # any failure of a job thread is the test's failure
            failures.append(exc)

    threads = [threading.Thread(target=run, args=(job,)) for job in jobs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll ``condition`` until it holds; fail after ``timeout`` seconds saying what was awaited."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"waited {timeout:g} s for {what}"
        time.sleep(0.1)


def values_in_tid_order(store: neostore.Store, oid: bytes) -> list[int]:
    """Every revision's value of a counter, oldest first."""
    return [int(store.load_serial(oid, r.tid)) for r in reversed(store.history(oid, size=None))]


def state(store: neostore.Store, oids: list[bytes]) -> tuple[list[neostore.TransactionInfo], list[list]]:
    """What a store reads of its transactions and the objects' histories."""
    return list(store.iter_transactions()), [store.history(oid, size=None) for oid in oids]


@pytest.mark.parametrize(
    "locked",
    [
        pytest.param(False, id="checked"),
        pytest.param(True, id="locked"),
    ],
)
def test_two_writers_on_two_nodes_lose_no_update(galera_cluster, galera_url, locked):
    with neostore.open(galera_url) as store:
        shared, own1, own2 = create_counters(store, 3)
    writers = [
        Writer(neostore.open(ordered_url(galera_cluster, galera_url, 1, 2, 3)), b"writer 1", locked),
        Writer(neostore.open(ordered_url(galera_cluster, galera_url, 2, 3, 1)), b"writer 2", locked),
    ]
    try:
        # Each writer waits after its first commit for the other's: a writer that loses certification and
        # waits to run again could otherwise see the other make all its commits first, and nothing would
        # interleave.
        both_began = threading.Barrier(2)

        def work(writer: Writer, own: bytes) -> Callable[[], None]:
            def increments() -> None:
                for k in range(COMMITS):
                    writer.increment(shared if k % 2 else own)
                    if k == 0:
                        both_began.wait(timeout=60)

            return increments

        run_together(work(writers[0], own1), work(writers[1], own2))
        # Each went through a node of its own the whole time.
        assert [w.store.backend.current for w in writers] == [0, 0]
    finally:
        for writer in writers:
            writer.store.close()
    print(f"retries after a conflict or a transient error: {[w.retries for w in writers]}")

    tids = [[u64(tid) for tid, _ in w.commits] for w in writers]
    everything = sorted(t for mine in tids for t in mine)
    # No tid handed out twice; each writer's tids increase; the two writers' commits interleave.
    assert len(set(everything)) == len(everything) == 2 * COMMITS
    assert all(mine == sorted(mine) for mine in tids)
    assert max(tids[0]) > min(tids[1]) and max(tids[1]) > min(tids[0])
    # A commit gets a tid above every commit the cluster made before it began, whichever node made it.
    for writer in writers:
        assert all(tid > head for (tid, _), head in zip(writer.commits, writer.heads))

    oids = [shared, own1, own2]
    views = []
    for index in (1, 2, 3):
        with neostore.open(node_url(galera_cluster, galera_url, index), read_only=True) as node:
            views.append(state(node, oids))
            # No lost update: each counter counts the increments acknowledged, and in tid order its
            # revisions go 0, 1, 2, ...: each increment read the one before it in tid order.
            for oid, done in ((shared, COMMITS), (own1, COMMITS // 2), (own2, COMMITS // 2)):
                assert values_in_tid_order(node, oid) == list(range(done + 1)), (index, oid.hex())
    transactions = views[0][0]
    assert [u64(info.tid) for info in transactions][1:] == everything
    # Every node holds the same history.
    assert views[1] == views[0] and views[2] == views[0]


def test_a_read_on_another_node_sees_the_commit_just_made(galera_cluster, galera_url):
    with neostore.open(node_url(galera_cluster, galera_url, 1)) as writer:
        (oid,) = create_counters(writer, 1)
        with neostore.open(node_url(galera_cluster, galera_url, 3), read_only=True) as reader:
            for k in range(1, LOOPS + 1):
                txn = writer.begin(b"test", b"round %d" % k)
                txn.write(oid, writer.load(oid)[1], b"%d" % k)
                tid = txn.commit()
                # Node 3 is asked right after node 1 acknowledged: it answers with that commit or a later one.
                assert reader.last_transaction() == tid
                assert reader.load(oid) == (b"%d" % k, tid)
                assert reader.load_before(oid, p64(u64(tid) + 1))[:2] == (b"%d" % k, tid)
                assert reader.transaction_info(tid).description == b"round %d" % k


def test_a_store_is_looked_for_with_reads_that_wait_for_the_node_to_apply_the_cluster(galera_cluster, galera_url):
    # A node applies the others' commits a moment after the cluster certified them: the connection that
    # looks for the store's tables (and makes them) must wait for that, or a store made through another
    # node a moment ago is not found there. Node 2's general log shows what that connection ran.
    neostore.open(node_url(galera_cluster, galera_url, 1)).close()
    admin = galera_cluster.node(2).connect()
    cur = admin.cursor()
    cur.execute("SET GLOBAL log_output = 'TABLE'")
    cur.execute("TRUNCATE mysql.general_log")
    cur.execute("SET GLOBAL general_log = ON")
    try:
        neostore.open(node_url(galera_cluster, galera_url, 2), read_only=True).close()
    finally:
        cur.execute("SET GLOBAL general_log = OFF")
    cur.execute("SELECT thread_id, argument FROM mysql.general_log ORDER BY event_time")
    statements: dict[int, list[str]] = {}
    for thread, argument in cur.fetchall():
        statements.setdefault(thread, []).append(
            bytes(argument).decode() if not isinstance(argument, str) else argument
        )
    admin.close()
    looked = [run for run in statements.values() if any("TABLE_NAME = 'config'" in s for s in run)]
    assert looked, statements
    for run in looked:
        first_look = next(k for k, s in enumerate(run) if "TABLE_NAME = 'config'" in s)
        assert any("wsrep_sync_wait = 1" in s for s in run[:first_look]), run


@pytest.mark.crash
@pytest.mark.slow
@pytest.mark.parametrize("transfer", ["IST", "SST"])
def test_a_node_that_rejoins_serves_reads_only_once_synced(private_galera, transfer):
    """Node 2 is killed and rejoins with what it missed (IST), or with its disk emptied, a whole copy (SST)."""
    cluster = private_galera
    url = fresh_cluster_database(cluster, "rejoin")
    node2 = cluster.node(2)
    # Node 3 takes the writes while node 1, giving node 2 a whole copy, does not serve.
    with neostore.open(ordered_url(cluster, url, 1, 3)) as writer:
        (oid,) = create_counters(writer, 1)
        count = 0

        def commit() -> bytes:
            nonlocal count
            count += 1
            txn = writer.begin(b"test", b"while node 2 is away")
            txn.write(oid, writer.load(oid)[1], b"%d" % count)
            return txn.commit()

        def check_read(tid: bytes) -> int:
            """Read through a new store whose URL lists node 2 first; return the node that served (0: node 2)."""
            with neostore.open(ordered_url(cluster, url, 2, 1, 3), read_only=True) as reader:
                # Never a state older than the one committed, whichever node answers.
                assert reader.last_transaction() == tid
                assert reader.load(oid) == (b"%d" % count, tid)
                return reader.backend.current

        assert check_read(commit()) == 0
        since = log_offset(node2)
        assert node2.kill()
        if transfer == "SST":
            shutil.rmtree(cluster.datadir / node2.name)  # a new disk
            since = 0
        # Until the cluster dropped node 2, writes wait for it; then they go on without it.
        wait_until(lambda: cluster.node(1).status().cluster_size == 2, 60, "node 1 to see node 2 gone")
        for _ in range(10):
            assert check_read(commit()) != 0  # node 2 is down: another serves

        # Node 2 rejoins while the others keep committing: until it is synced, readers skip it.
        starting = threading.Thread(target=node2.start, kwargs={"timeout": 180})
        starting.start()
        served = []
        while starting.is_alive():
            served.append(check_read(commit()))
        starting.join()
        print(f"reads while node 2 rejoined by {transfer}: by node 2, 1, 3: {[served.count(i) for i in range(3)]}")
        assert node2.status().synced
        assert state_transfer(node2, since) == transfer
        # Once synced, node 2 serves, and its snapshots are the others'.
        for _ in range(5):
            assert check_read(commit()) == 0
        with (
            neostore.open(node_url(cluster, url, 2), read_only=True) as on2,
            neostore.open(node_url(cluster, url, 1), read_only=True) as on1,
        ):
            assert state(on2, [oid]) == state(on1, [oid])
            assert values_in_tid_order(on2, oid) == list(range(count + 1))
