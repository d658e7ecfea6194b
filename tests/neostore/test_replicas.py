"""Snapshot reads served by asynchronous replicas: never older than the snapshot, the primary serving when
no replica has reached it (real primary and replicas, replicating with GTIDs)."""

from __future__ import annotations

import threading

import pytest

from windvane import neostore
from windvane.neostore import p64, u64

pytestmark = [pytest.mark.mariadb, pytest.mark.xdist_group("replicas")]


def _sql(server, statement: str) -> None:
    conn = server.connect()
    try:
        conn.cursor().execute(statement)
    finally:
        conn.close()


def test_a_read_at_a_snapshot_never_sees_an_older_state_while_replicas_lag(replicated_servers, replicated_url):
    """Write, then read at the new snapshot at once, many times, with one replica stopped behind and the
    other applying as it goes: every read sees the write, and the replicas serve some of them."""
    lagging = replicated_servers.replicas[0]
    with neostore.open(replicated_url.url) as store:
        oid = store.new_oid()
        txn = store.begin()
        txn.write(oid, None, b"0")
        serial = txn.commit()
        _sql(lagging, "STOP SLAVE SQL_THREAD")
        try:
            for n in range(1, 201):
                txn = store.begin()
                txn.write(oid, serial, str(n).encode())
                serial = txn.commit()
                before = p64(u64(serial) + 1)
                value, at, _ = store.load_before(oid, before)
                assert (value, at) == (str(n).encode(), serial)
                [(many, _)] = list(store.load_many([oid], before=before))
                assert many == str(n).encode()
            served = dict(store.replicas.served)
            states = {state.node: state for state in store.replica_states()}
        finally:
            _sql(lagging, "START SLAVE SQL_THREAD")
    assert states[lagging.socket].behind >= 200, "the stopped replica was ahead of what it could have applied"
    assert served[lagging.socket] == 0, "a replica behind the snapshot served a read"
    assert served[replicated_servers.replicas[1].socket] > 0, "the replica that kept up served nothing"
    assert served["primary"] > 0


def test_reads_of_old_snapshots_go_to_replicas_from_many_threads(replicated_servers, replicated_url):
    """Readers in threads at fixed snapshots: each sees its snapshot's values, from the replicas once they
    have caught up."""
    with neostore.open(replicated_url.url) as store:
        oids = [store.new_oid() for _ in range(20)]
        snapshots = []
        for round_ in range(5):
            txn = store.begin()
            for oid in oids:
                txn.write(oid, None if round_ == 0 else store.load(oid)[1], f"{round_}".encode())
            snapshots.append((round_, p64(u64(txn.commit()) + 1)))
        failures: list[str] = []

        def read(round_: int, before: bytes) -> None:
            for _ in range(20):
                for value, _ in store.load_many(oids, before=before):
                    if value != str(round_).encode():
                        failures.append(f"snapshot {round_} read {value!r}")

        threads = [threading.Thread(target=read, args=snap) for snap in snapshots]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert failures == []
        assert sum(n for node, n in store.replicas.served.items() if node != "primary") > 0


def test_a_replica_out_of_reach_is_passed_over(replicated_url):
    """A replica named in the URL that does not answer: the primary serves, the state says why."""
    url = replicated_url.url + ",127.0.0.1:1"
    with neostore.open(url) as store:
        oid = store.new_oid()
        txn = store.begin()
        txn.write(oid, None, b"here")
        tid = txn.commit()
        assert store.load_before(oid, p64(u64(tid) + 1))[0] == b"here"
        [gone] = [state for state in store.replica_states() if state.node == "127.0.0.1:1"]
        assert gone.head is None and gone.error
