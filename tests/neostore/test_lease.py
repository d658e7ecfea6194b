"""The maintenance lease: one long operation (pack, blob sweep, moving values) at a time, given up by a
holder that dies (at once on one server and SQLite, once it runs out on a cluster), and fencing the
holder's commits on a cluster once another took it over. Real SQLite files, MariaDB server and cluster."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from windvane import neostore
from windvane.neostore.errors import LeaseHeldError, LeaseLostError

HOLDER = textwrap.dedent(
    """
    import sys, time
    from windvane import neostore
    store = neostore.open(sys.argv[1], lease_seconds=float(sys.argv[2]))
    with store.maintenance("pack"):
        print("held", flush=True)
        time.sleep(600)
    """
)


def _hold_in_a_process(url: str, seconds: float = 30.0) -> subprocess.Popen[str]:
    """A process holding the store's maintenance lease (as a pack would) until killed."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, url, str(seconds)], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "held", "the holder did not take the lease"
    return proc


def _commit(store: neostore.Store) -> None:
    txn = store.begin()
    txn.write(store.new_oid(), None, b"x")
    txn.commit()


def test_one_maintenance_at_a_time_and_a_killed_holder_gives_it_up(store_url):
    with neostore.open(store_url) as store:
        _commit(store)
        holder = _hold_in_a_process(store_url)
        try:
            with pytest.raises(LeaseHeldError, match="holds the store's maintenance lease"):
                store.pack(store.last_transaction())
            # Commits go on beside it: the lease keeps maintenance out, not writers.
            _commit(store)
        finally:
            os.killpg(holder.pid, signal.SIGKILL)
            holder.wait()
        # The engine dropped the lease with its holder: no wait.
        stats = store.pack(store.last_transaction())
        assert stats.batches >= 0
        with store.maintenance("sweep"), store.maintenance("nested"):
            pass  # one thread's operations within another share the lease


@pytest.mark.xdist_group("galera")
def test_on_a_cluster_a_dead_holders_lease_runs_out(galera_cluster, galera_url):
    first_node_last = galera_url.replace("unix_socket=", "unix_socket=" + galera_cluster.node(3).socket + ",", 1)
    holder = _hold_in_a_process(galera_url, seconds=2.0)
    try:
        with neostore.open(first_node_last, lease_seconds=2.0) as store:
            _commit(store)
            # A live holder renews its lease: it stays held past its length.
            time.sleep(3)
            with pytest.raises(LeaseHeldError, match=r"pack by pid .* holds the store's maintenance lease"):
                store.pack(store.last_transaction())
            os.killpg(holder.pid, signal.SIGKILL)
            holder.wait()
            deadline = time.monotonic() + 30
            while True:
                try:
                    store.pack(store.last_transaction())
                    break
                except LeaseHeldError:
                    assert time.monotonic() < deadline, "the dead holder's lease never ran out"
                    time.sleep(0.2)
    finally:
        if holder.poll() is None:
            os.killpg(holder.pid, signal.SIGKILL)
            holder.wait()


@pytest.mark.xdist_group("galera")
def test_on_a_cluster_a_holder_whose_lease_was_taken_over_commits_nothing(galera_cluster, galera_url):
    with neostore.open(galera_url) as store:
        oid = store.new_oid()
        for value in (b"old", b"new"):
            txn = store.begin()
            txn.write(oid, None if value == b"old" else store.load(oid)[1], value)
            txn.commit()
        with store.maintenance("pack"):
            # What a node sees once this holder's lease ran out and another process took it.
            conn = galera_cluster.node(2).connect(store.url.database)
            # As the store's own sessions do: the node first applies what the cluster committed (the
            # holder's claim among it), so that the takeover finds the row to take.
            conn.cursor().execute("SET SESSION wsrep_sync_wait = 3")
            for attempt in range(1, 11):
                # The holder's renewal may be certified first (the cluster reports a deadlock): a process
                # taking the lease over tries again.
                try:
                    cur = conn.cursor()
                    cur.execute("UPDATE lease SET holder = 'pack by another process' WHERE name = 'maintenance'")
                    assert cur.rowcount == 1, "the takeover found no lease to take"
                    conn.commit()
                    break
                except conn.OperationalError as exc:
                    assert attempt < 10 and "Deadlock" in str(exc), exc
                    conn.rollback()
            conn.close()
            with pytest.raises(LeaseLostError, match="lease was lost"):
                store.pack(store.last_transaction())
        assert len(store.history(oid, size=None)) == 2, "a pack fenced off by the takeover removed a revision"
