"""Private Galera clusters for the test suite.

The suite runs the same `windvane.ops.galera` code that `windvane db start
--cluster N` uses, scaled down like `tests.mariadb`'s servers (a small
buffer pool, redo log and Galera cache: a cluster is three servers) and with
short Galera timeouts, so that a killed node leaves the cluster within
seconds and failover tests stay short.

Typical fixture::

    @pytest.fixture(scope="session")
    def galera_cluster():
        cluster = start_test_cluster()
        yield cluster
        stop_test_cluster(cluster)
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

import pytest

from tests.mariadb import fresh_database
from windvane.neostore import parse_url
from windvane.ops.galera import GaleraCluster, GaleraNode

# Tests of one group run on one xdist worker (with --dist loadgroup): one shared cluster per suite run, and
# clusters of tests' own started one after another, never two workers' clusters at once.
GALERA_GROUP = pytest.mark.xdist_group("galera")

# Each node takes a fraction of the shipped configuration's memory and disk.
TEST_OVERRIDES: dict[str, str | None] = {
    "innodb_buffer_pool_size": "64M",
    "innodb_log_file_size": "48M",
    "innodb_log_buffer_size": "16M",
}

# A killed node is suspected after 3 s and dropped soon after; long enough that a busy two-core machine
# does not drop a live one.
TEST_PROVIDER_OPTIONS = {
    "gcache.size": "16M",
    "evs.suspect_timeout": "PT3S",
    "evs.inactive_timeout": "PT6S",
}

_TRANSFER = re.compile(r"Prepared IST receiver for (\d+)-(\d+)")


def start_test_cluster(size: int = 3, timeout: float = 240) -> GaleraCluster:
    """Start a private test cluster of ``size`` nodes in a new temporary directory; the caller stops it.

    The directory is short (unix socket paths are limited) and open to
    others for passing through: started as root, the nodes run as ``mysql``.
    """
    root = tempfile.mkdtemp(prefix="wv-galera-")
    os.chmod(root, 0o711)
    cluster = GaleraCluster(
        Path(root) / "cluster", size, overrides=TEST_OVERRIDES, provider_options=TEST_PROVIDER_OPTIONS
    )
    try:
        cluster.start(timeout=timeout)
    except BaseException:
        stop_test_cluster(cluster)
        raise
    return cluster


def stop_test_cluster(cluster: GaleraCluster) -> None:
    """Stop every node of ``cluster`` (killing those that do not stop) and remove its directory."""
    try:
        cluster.stop(timeout=60)
    # Whatever the clean stop fails with, no node may outlive the suite.
    except Exception:  # noqa: BLE001
        cluster.kill()
    shutil.rmtree(cluster.datadir.parent, ignore_errors=True)


def fresh_cluster_database(cluster: GaleraCluster, name: str) -> str:
    """(Re)create the empty database ``name`` on ``cluster``; return its cluster URL once every node has it."""
    fresh_database(cluster.node(1).url(), name)
    for node in cluster.nodes:
        conn = node.connect()
        try:
            cur = conn.cursor()
            # A node applies what the others committed a moment later; this read waits until it has (a SELECT:
            # wsrep_sync_wait's first bit covers it, not SHOW statements).
            cur.execute("SET SESSION wsrep_sync_wait = 1")
            cur.execute("SELECT 1 FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?", (name,))
            if not cur.fetchall():
                raise RuntimeError(f"{node.name} does not have database {name} after a causal read")
        finally:
            conn.close()
    return cluster.url(name)


def log_offset(node: GaleraNode) -> int:
    """Where ``node``'s error log ends now: `state_transfer` reads what comes after."""
    try:
        return node.error_log.stat().st_size
    except FileNotFoundError:
        return 0


def state_transfer(node: GaleraNode, since: int) -> str | None:
    """How ``node`` received the cluster's state when it last joined after ``since``: "IST" (the
    writesets it missed), "SST" (a whole copy: the range starts at 0), or None (none needed)."""
    with open(node.error_log, "rb") as f:
        f.seek(since)
        found = _TRANSFER.findall(f.read().decode("utf-8", "replace"))
    if not found:
        return None
    return "SST" if found[-1][0] == "0" else "IST"


def ordered_url(cluster: GaleraCluster, url: str, *order: int) -> str:
    """``url``'s database on ``cluster`` with the nodes ``order`` (numbered from 1), tried in that order: two
    stores whose URLs begin with different nodes write through different nodes."""
    sockets = ",".join(cluster.node(i).socket for i in order)
    return f"mariadb://root@/{parse_url(url).database}?unix_socket={sockets}"


def node_url(cluster: GaleraCluster, url: str, index: int) -> str:
    """``url``'s database on node ``index`` alone: what that node holds, read nowhere else."""
    return cluster.node(index).url(parse_url(url).database)
