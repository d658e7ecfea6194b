"""A local Galera cluster (windvane.ops.galera and `windvane db start --cluster N`).

Real servers, no mocks: one 3-node cluster for the module, started by the
CLI as a user would, in a temporary directory.  Each test leaves every node
running and synced (the `cluster` fixture checks), so the tests share it:
nodes are stopped, killed, emptied and started again, and the whole cluster
is stopped and killed and started again, always with the data written
meanwhile checked on every node.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from tests.galera import GALERA_GROUP, TEST_OVERRIDES, log_offset, state_transfer, stop_test_cluster
from windvane.cli import cli as windvane_cli
from windvane.ops.galera import GaleraCluster, GaleraNode
from windvane.ops.mariadb_server import ServerConfigError

pytestmark = [pytest.mark.mariadb, pytest.mark.slow, GALERA_GROUP]


def _db(*args: str) -> Result:
    return CliRunner().invoke(windvane_cli, ["db", *args])


@pytest.fixture(scope="module")
def started() -> Iterator[tuple[GaleraCluster, Result]]:
    """The module's cluster as `windvane db start --cluster 3` started it, and what the command printed."""
    root = tempfile.mkdtemp(prefix="wv-galera-")
    os.chmod(root, 0o711)  # started as root, the nodes run as mysql, which must pass through
    datadir = Path(root) / "cluster"
    try:
        result = _db("start", "--datadir", str(datadir), "--cluster", "3", "--timeout", "300")
        yield GaleraCluster(datadir), result
    finally:
        stop_test_cluster(GaleraCluster(datadir))


@pytest.fixture
def cluster(started) -> GaleraCluster:
    """The module's cluster, every node running and synced."""
    cluster, result = started
    assert result.exit_code == 0, result.output
    cluster.wait_synced(120)
    return cluster


def _write(node: GaleraNode, *rows: int) -> None:
    conn = node.connect("windvane")
    try:
        cur = conn.cursor()
        cur.execute("CREATE TABLE IF NOT EXISTS t (id INT PRIMARY KEY, node VARCHAR(8))")
        for row in rows:
            cur.execute("INSERT INTO t VALUES (?, ?)", (row, node.name))
        conn.commit()
    finally:
        conn.close()


def _rows(node: GaleraNode) -> list[int]:
    conn = node.connect("windvane")
    try:
        cur = conn.cursor()
        # Causal read: the rows every node committed before it, even those this node has yet to apply.
        cur.execute("SET SESSION wsrep_sync_wait = 1")
        cur.execute("SELECT id FROM t ORDER BY id")
        return [row[0] for row in cur.fetchall()]
    finally:
        conn.close()


def _everywhere(cluster: GaleraCluster) -> list[int]:
    """The rows of t, the same on every node (asserted)."""
    seen = [_rows(node) for node in cluster.nodes]
    assert all(rows == seen[0] for rows in seen), seen
    return seen[0]


def _wait_size(node: GaleraNode, size: int) -> None:
    """Wait until ``node`` sees a primary component of ``size`` nodes (a killed one is dropped)."""
    deadline = time.monotonic() + 60
    while (status := node.status()).cluster_size != size or status.cluster_status != "Primary":
        assert time.monotonic() < deadline, status.describe()
        time.sleep(0.2)


def test_cli_starts_a_synced_cluster_and_shows_each_node(started, cluster):
    _, result = started
    url = result.stdout.strip().splitlines()[-1]
    assert (
        url
        == cluster.url()
        == "mariadb://root@/windvane?unix_socket="
        + ",".join(str(cluster.datadir / f"node{i}" / "mysqld.sock") for i in (1, 2, 3))
    )
    assert [node.url() for node in cluster.nodes] == [
        f"mariadb://root@/windvane?unix_socket={cluster.datadir}/node{i}/mysqld.sock" for i in (1, 2, 3)
    ]
    # Started as root, each node runs as mysql, in a directory of its own.
    if os.geteuid() == 0:
        assert {(cluster.datadir / node.name).owner() for node in cluster.nodes} == {"mysql"}

    status = _db("status", "--datadir", str(cluster.datadir))
    assert status.exit_code == 0, status.output
    for i in (1, 2, 3):
        assert f"node{i}: running (pid {cluster.node(i).pid}), Synced, cluster size 3, Primary" in status.output
    assert f"url:     {url}" in status.output

    # Written on one node, read on another.
    _write(cluster.node(1), 1)
    assert _rows(cluster.node(3)) == [1]

    again = _db("start", "--datadir", str(cluster.datadir))
    assert again.exit_code == 0 and again.stdout.strip().splitlines()[-1] == url
    other = _db("start", "--datadir", str(cluster.datadir), "--cluster", "5")
    assert other.exit_code == 2 and "has size 3, not 5" in other.output


def test_a_stopped_node_rejoins_and_receives_what_it_missed(cluster):
    node = cluster.node(2)
    assert node.stop()
    status = _db("status", "--datadir", str(cluster.datadir))
    assert status.exit_code == 1 and "node2: not running" in status.output
    _write(cluster.node(1), 10, 11)

    since = log_offset(node)
    node.start()
    assert state_transfer(node, since) == "IST"
    assert _everywhere(cluster)[-2:] == [10, 11]


@pytest.mark.crash
def test_a_killed_node_rejoins_and_receives_what_it_missed(cluster):
    node = cluster.node(3)
    assert node.kill()
    _wait_size(cluster.node(1), 2)
    _write(cluster.node(1), 20)

    since = log_offset(node)
    node.start()
    # Its position recovered from InnoDB, it needs only the writesets it missed, not a whole copy.
    assert state_transfer(node, since) == "IST"
    assert _everywhere(cluster)[-1] == 20


def test_a_node_that_lost_its_data_rejoins_with_a_whole_copy(cluster):
    node = cluster.node(3)
    assert node.stop()
    shutil.rmtree(cluster.datadir / node.name)  # a new disk
    _write(cluster.node(2), 30)

    node.start()
    assert state_transfer(node, 0) == "SST"
    assert _everywhere(cluster)[-1] == 30


def test_a_full_stop_and_start_starts_from_the_node_stopped_last(cluster):
    _write(cluster.node(3), 40)
    stopped = _db("stop", "--datadir", str(cluster.datadir))
    assert stopped.exit_code == 0, stopped.output
    assert all(node.pid is None for node in cluster.nodes)
    # Nodes stop from the last to node1, which alone is marked safe to start the cluster from.
    assert [node.position().safe_to_bootstrap for node in cluster.nodes] == [True, False, False]

    result = _db("start", "--datadir", str(cluster.datadir))
    assert result.exit_code == 0, result.output
    assert cluster.status().up
    assert _everywhere(cluster)[-1] == 40


@pytest.mark.crash
def test_after_every_node_is_killed_the_cluster_starts_from_the_most_advanced(cluster):
    # node1 dies first; what node2 and node3 commit afterwards exists on them only.
    assert cluster.node(1).kill()
    _wait_size(cluster.node(2), 2)
    _write(cluster.node(2), 50)
    cluster.kill()
    positions = [node.position() for node in cluster.nodes]
    assert not any(p.safe_to_bootstrap for p in positions)
    assert positions[0].seqno < positions[1].seqno == positions[2].seqno

    since = [log_offset(node) for node in cluster.nodes]
    cluster.start(timeout=240)
    # Started from node2: node3 needed nothing, node1 only what it missed.
    assert state_transfer(cluster.node(1), since[0]) == "IST"
    assert _everywhere(cluster)[-1] == 50


def test_a_failed_start_leaves_no_node_running(tmp_path):
    root = tempfile.mkdtemp(prefix="wv-galera-")
    os.chmod(root, 0o711)
    cluster = GaleraCluster(Path(root) / "c", 2, base_port=_free_block(2), overrides=TEST_OVERRIDES)
    # Another program holds node2's group communication port: node1 starts, node2 cannot.
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", cluster.node(2).ports[1]))
        holder.listen()
        try:
            with pytest.raises(ServerConfigError, match="group communication port of node2"):
                cluster.start(timeout=120)
            assert [node.pid for node in cluster.nodes] == [None, None]
            assert cluster.node(1).server.is_initialised()  # it had started
        finally:
            stop_test_cluster(cluster)


def _free_block(size: int) -> int:
    """A base port whose 10*size ports are free now, from the kernel's own choice of one free port."""
    for _ in range(100):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1] // 10 * 10
        if base + 10 * size < 65535 and all(_bindable(base + i) for i in range(10 * size)):
            return base
    raise AssertionError("no free block of ports")


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
