"""Reads at a snapshot by real workloads served by read replicas: a dask computation on worker processes and an
export, on a primary with two asynchronous replicas (``?replicas=`` in the URL).

Which server answered is asked twice over: the ``served`` counters of the Store each reader used (in a dask
worker, the store its unpickled sources share, asked with ``client.run``), and each replica's own count of
SELECT statements (``Com_select``), which must have grown by at least what the counters give it. Every result
equals the one read from the primary alone. With one replica stopped behind (``STOP SLAVE SQL_THREAD``) the
same computations at a newer snapshot give that snapshot's values, served by the other replica, and with both
stopped, by the primary.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from distributed import Client, LocalCluster

from tests.replicas import Replicated, ReplicatedDatabase
from windvane import arrays, neostore
from windvane.arrays.dask_source import shared_store
from windvane.export import export
from windvane.ops.mariadb_server import MariaDBServer
from windvane.ops.replica import wait_for_primary

pytestmark = [pytest.mark.mariadb, pytest.mark.slow, pytest.mark.xdist_group("replicas")]

TAG = "plant.scada"
COLUMNS = [arrays.Column("speed", "float64"), arrays.Column("count", "int64"), arrays.Column("msg", "str")]
CHUNK_ROWS = 128
#: Rows of each append (one commit each): many chunks, a partial last one.
APPEND_ROWS = 300


def rows(start: int, n: int) -> dict[str, np.ndarray | list[str]]:
    """Rows ``start .. start+n`` of the stream: the same values whenever asked for."""
    i = np.arange(start, start + n)
    return {
        "time": 1_700_000_000_000_000_000 + i * 1_000_000,
        "speed": np.sin(i / 11.0) * 20,
        "count": i * 7,
        "msg": [f"reading {k}" for k in i],
    }


def append(url: str, appends: int) -> bytes:
    """Append ``appends`` commits of rows to the stream (created if need be); the tid of the last one."""
    try:
        stream = arrays.open_stream(url, TAG)
    except (arrays.StreamNotFoundError, neostore.StoreNotFoundError):
        stream = arrays.create_stream(url, TAG, COLUMNS, chunk_rows=CHUNK_ROWS)
    with stream:
        for _ in range(appends):
            stream.append(rows(len(stream), APPEND_ROWS))
        assert stream.tid is not None
        return stream.tid


def served_here(url: str) -> dict[str, int]:
    """In a dask worker: what each server has served the store this process's sources share."""
    return dict(shared_store(url).replicas.served)


def selects(server: MariaDBServer) -> int:
    """The SELECT statements ``server`` has run since it started."""
    conn = server.connect()
    try:
        cur = conn.cursor()
        cur.execute("SHOW GLOBAL STATUS LIKE 'Com_select'")
        return int(cur.fetchone()[1])
    finally:
        conn.close()


def sql(server: MariaDBServer, statement: str) -> None:
    conn = server.connect()
    try:
        conn.cursor().execute(statement)
    finally:
        conn.close()


class Reads:
    """The reads at one snapshot through the replicated URL, each against the primary alone, with who served."""

    def __init__(self, servers: Replicated, db: ReplicatedDatabase, client: Client, tmp: Path):
        self.servers, self.db, self.client, self.tmp = servers, db, client, tmp
        self.names = {replica.socket: f"replica {n + 1}" for n, replica in enumerate(servers.replicas)}

    def workers_served(self) -> Counter[str]:
        """Statements served so far for the dask workers, summed over them, by server."""
        total: Counter[str] = Counter()
        for served in self.client.run(served_here, self.db.url).values():
            total.update(served)
        return total

    def dask(self, tid: bytes) -> dict[str, int]:
        """Compute columns of the stream at ``tid`` on the workers; check them against the primary's; return
        how many statements each server served them."""
        before = self.workers_served()
        with arrays.open_stream(self.db.url, TAG, at=tid) as stream:
            speed, count = stream["speed"].to_dask(), stream["count"].to_dask()
            got_speed, got_count, got_sum = self.client.compute([speed, count, speed.sum()], sync=True)
            assert stream["speed"].chunks_loaded == 0, "the client read chunks itself: the workers were to"
        with arrays.open_stream(self.db.primary_url, TAG, at=tid) as alone:
            np.testing.assert_array_equal(got_speed, alone["speed"][:])
            np.testing.assert_array_equal(got_count, alone["count"][:])
            assert got_sum == pytest.approx(float(alone["speed"][:].sum()), rel=1e-12)
            assert len(got_speed) == len(alone)
        after = self.workers_served()
        return self._named(after - before)

    def export(self, tid: bytes, name: str) -> dict[str, int]:
        """Export the stream at ``tid`` to Parquet; check the file against the primary's export; return how
        many statements each server served it."""
        with neostore.open(self.db.url, read_only=True) as store:
            result = export(store, TAG, self.tmp / f"{name}.parquet", "parquet", at=tid, block_bytes=1)
            served = dict(store.replicas.served)
        export(self.db.primary_url, TAG, self.tmp / f"{name}-primary.parquet", "parquet", at=tid, block_bytes=1)
        assert result.tid == tid.hex()
        got = pq.read_table(self.tmp / f"{name}.parquet")
        assert got.equals(pq.read_table(self.tmp / f"{name}-primary.parquet"))
        assert got.num_rows > 0
        return self._named(Counter(served))

    def _named(self, served: Counter[str]) -> dict[str, int]:
        named = {self.names.get(node, node): n for node, n in served.items()}
        return {name: named.get(name, 0) for name in [*self.names.values(), "primary"]}

    def run(self, tid: bytes, name: str) -> tuple[dict[str, int], dict[str, int], dict[str, int]]:
        """The dask computation and the export at ``tid``: the statements each server served either, and the
        SELECTs each replica ran meanwhile (by its own count)."""
        began = {self.names[r.socket]: selects(r) for r in self.servers.replicas}
        by_dask, by_export = self.dask(tid), self.export(tid, name)
        ran = {self.names[r.socket]: selects(r) - began[self.names[r.socket]] for r in self.servers.replicas}
        for replica, count in ran.items():
            assert count >= by_dask[replica] + by_export[replica], (replica, count, by_dask, by_export)
        print(f"{name}: served the dask workers {by_dask}, the export {by_export}; SELECTs run {ran}")
        return by_dask, by_export, ran


@pytest.fixture(scope="module")
def dask_client() -> Iterator[Client]:
    """Two dask worker processes, one thread each: the graph travels to them pickled, and they read."""
    with (
        LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None) as cluster,
        Client(cluster) as client,
    ):
        yield client


def test_dask_and_export_at_a_snapshot_read_from_replicas(replicated_servers, replicated_url, dask_client, tmp_path):
    """Both replicas hold the snapshot: they serve every read at it, which gives the primary's values; with one
    replica stopped behind a newer snapshot, the other serves that one; with both stopped, the primary."""
    servers: Replicated = replicated_servers
    reads = Reads(servers, replicated_url, dask_client, tmp_path)
    first = append(replicated_url.url, 4)
    for replica in servers.replicas:
        wait_for_primary(replica, servers.primary)

    by_dask, by_export, ran = reads.run(first, "first")
    for served in (by_dask, by_export):
        assert served["primary"] == 0, served
        assert served["replica 1"] + served["replica 2"] > 0, served
    assert all(count > 0 for count in ran.values()), ran

    lagging, other = servers.replicas
    sql(lagging, "STOP SLAVE SQL_THREAD")
    try:
        second = append(replicated_url.url, 3)
        wait_for_primary(other, servers.primary)
        by_dask, by_export, _ = reads.run(second, "second")
        for served in (by_dask, by_export):
            assert served["replica 1"] == 0, f"a replica behind the snapshot served a read: {served}"
            assert served["replica 2"] > 0, served
        # The older snapshot is still the lagging replica's to serve: it holds every commit before it.
        assert reads.run(first, "first-again")[0]["primary"] == 0

        sql(other, "STOP SLAVE SQL_THREAD")
        try:
            third = append(replicated_url.url, 2)
            by_dask, by_export, _ = reads.run(third, "third")
            for served in (by_dask, by_export):
                assert served == {"replica 1": 0, "replica 2": 0, "primary": served["primary"]}, served
                assert served["primary"] > 0, served
        finally:
            sql(other, "START SLAVE SQL_THREAD")
    finally:
        sql(lagging, "START SLAVE SQL_THREAD")
