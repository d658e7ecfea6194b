"""A store on a 3-node Galera cluster: Forward ingestion against one MariaDB server, and failover.

Both with values in the object store: the store URLs carry the blob tier
(``?blobs=`` on a versitygw, :mod:`s3_bench`) with ``blob_threshold`` at
`BLOB_THRESHOLD` bytes, so that the column chunks go to the bucket and the
databases hold the metadata.  The cluster is what ``windvane db start
--cluster 3`` starts (:class:`windvane.ops.galera.GaleraCluster` with its
defaults: each node's share of memory, Galera's suspect timeout of 5 s); the
single server runs the same node settings (`NODE_OVERRIDES`) without Galera.

1. ``test_forward_cluster_vs_single``: ``EVENTS`` (1,000,000) log records
   in PackedForward chunks of ``PER_CHUNK`` (5,000) over 4 connections with 2
   chunks in flight each (:func:`ingest_load.forward_load`, as
   ``test_ingest.py``), into ``windvane serve`` on a fresh database of each,
   ``ROUNDS`` pairs, each pair run back to back in alternating order. Goal:
   the median of the pairs' ratios (cluster / single events a second) >= 0.5.
   The commit latency is the store's: each ``Transaction.commit`` of the
   serving process is timed (a ``sitecustomize`` of the run wraps it, see
   `COMMIT_TIMER`) and p50/p99 reported for both.
2. ``test_failover_kill_written_node``: ``windvane serve`` on the cluster
   URL under a steady load (`SteadySender`: 2 connections, 2 chunks of
   ``FAILOVER_CHUNK`` events in flight each, a lost connection reconnected
   and its unacknowledged chunks sent again, as out_forward does). ``KILLS``
   (10) times: ``kill -9`` of the node the service writes to (the node
   holding its connections), then a new chunk sent at once on a connection of
   its own; the failover time is from the kill to that chunk's ack, which can
   only have been committed through another node. The killed node is
   started again and the cluster waited for until synced before the next
   kill. Goal: <= 10 s each; min/median/max reported.  Afterwards the stream
   holds every chunk sent exactly once.

Run::

    .venv/bin/python -m pytest benchmarks/test_cluster.py -p no:cacheprovider \\
        --benchmark-enable --benchmark-only --benchmark-json=/tmp/cluster.json

``WINDVANE_BENCH_EVENTS``, ``WINDVANE_BENCH_ROUNDS`` and ``WINDVANE_BENCH_KILLS`` scale it down.
"""

from __future__ import annotations

import os
import shutil
import socket
import statistics
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import msgpack
import numpy as np
import pytest
from conftest import running, settle_servers
from ingest_load import LOG_SCHEMA, forward_chunk, forward_load, receive
from s3_bench import s3_server

from tests.galera import fresh_cluster_database, stop_test_cluster
from tests.mariadb import fresh_database, stop_test_server
from tests.s3 import S3Server
from tests.serve_process import Serve
from windvane import arrays
from windvane.neostore.url import with_tier
from windvane.ops.galera import NODE_OVERRIDES, PROVIDER_OPTIONS, GaleraCluster, GaleraNode
from windvane.ops.mariadb_server import MariaDBServer

ROUNDS = int(os.environ.get("WINDVANE_BENCH_ROUNDS", "3"))
EVENTS = int(os.environ.get("WINDVANE_BENCH_EVENTS", "1000000"))
KILLS = int(os.environ.get("WINDVANE_BENCH_KILLS", "10"))
PER_CHUNK = 5000
FAILOVER_CHUNK = 100
TAG = "bench.logs"
#: Values of at least this many bytes go to the bucket: every column chunk of the log stream.
BLOB_THRESHOLD = 1024
FAILOVER_GOAL_S = 10.0
RATIO_GOAL = 0.5

#: Wraps ``Transaction.commit`` in a process whose environment names a file to append each commit's
#: seconds to; written as the ``sitecustomize`` of the serving processes of this module.
COMMIT_TIMER = """
import os

_PATH = os.environ.get("WINDVANE_BENCH_COMMIT_LOG")
if _PATH:
    import functools
    import time

    from windvane.neostore.transaction import Transaction

    _commit = Transaction.commit

    @functools.wraps(_commit)
    def _timed(self, *args, **kwargs):
        began = time.perf_counter()
        try:
            return _commit(self, *args, **kwargs)
        finally:
            with open(_PATH, "a") as f:
                f.write(f"{time.perf_counter() - began}\\n")

    Transaction.commit = _timed
"""


class Servers:
    """The cluster, the single server and the S3 server, under one short temporary directory.

    The directory is open to others for passing through: started as root,
    the cluster's nodes run as ``mysql``.
    """

    def __init__(self, s3: S3Server) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="wvb-cl-", dir="/tmp"))
        os.chmod(self.root, 0o711)
        self.s3 = s3
        self.cluster = GaleraCluster(self.root / "cluster", 3)
        self.single = MariaDBServer(self.root / "single", overrides=NODE_OVERRIDES)
        self.schemas = self.root / "schemas"
        self.schemas.mkdir()
        (self.schemas / "logs.toml").write_text(LOG_SCHEMA)
        self.timer = self.root / "timer"
        self.timer.mkdir()
        (self.timer / "sitecustomize.py").write_text(COMMIT_TIMER)

    def start(self) -> None:
        self.single.start(timeout=300)
        self.cluster.start(timeout=600)

    def stop(self) -> None:
        stop_test_cluster(self.cluster)
        stop_test_server(self.single)
        shutil.rmtree(self.root, ignore_errors=True)

    def fresh_store(self, kind: str, name: str) -> str:
        """A fresh database on ``kind`` ("single" or "cluster") with a fresh bucket for its values; its URL."""
        if kind == "cluster":
            url = fresh_cluster_database(self.cluster, name)
        else:
            url = fresh_database(self.single.url(), name)
        bucket = self.s3.new_bucket(name.replace("_", "-"))
        return with_tier(url, f"s3://{bucket}/store", self.s3.endpoint, BLOB_THRESHOLD)

    def settle(self) -> None:
        """Flush every server's dirty pages (untimed), so that no round pays for the one before."""
        settle_servers([self.single, *(node.server for node in self.cluster.nodes)])

    def serve(self, url: str, name: str, commit_log: Path | None = None) -> Serve:
        """``windvane serve`` on ``url``; with ``commit_log``, each store commit's seconds appended to it."""
        saved = os.environ.get("PYTHONPATH")
        paths = [str(self.timer), *filter(None, [saved])]
        os.environ["PYTHONPATH"] = os.pathsep.join(paths)
        if commit_log is not None:
            os.environ["WINDVANE_BENCH_COMMIT_LOG"] = str(commit_log)
        try:
            return Serve(url, self.schemas, self.root / f"{name}.log", forward="127.0.0.1:0", http=None, timeout=120)
        finally:
            os.environ.pop("WINDVANE_BENCH_COMMIT_LOG", None)
            if saved is None:
                os.environ.pop("PYTHONPATH", None)
            else:
                os.environ["PYTHONPATH"] = saved


@pytest.fixture(scope="module")
def servers() -> Iterator[Servers]:
    with s3_server() as s3, running(Servers(s3)) as started:
        yield started


@pytest.fixture(scope="module")
def log_chunks() -> list[tuple[bytes, bytes]]:
    return [forward_chunk(TAG, first, PER_CHUNK) for first in range(0, EVENTS, PER_CHUNK)]


def stream_rows(url: str) -> int:
    with arrays.open_stream(url, TAG) as stream:
        return len(stream)


def objects_in(s3: S3Server, url: str) -> int:
    bucket = url.split("blobs=s3://", 1)[1].split("/", 1)[0]
    return len(s3.objects(bucket))


def percentiles(seconds: list[float]) -> dict[str, float]:
    return {
        "p50_ms": float(np.percentile(seconds, 50) * 1e3),
        "p99_ms": float(np.percentile(seconds, 99) * 1e3),
        "count": len(seconds),
    }


def test_forward_cluster_vs_single(benchmark, servers: Servers, log_chunks) -> None:
    rounds = 1 if benchmark.disabled else ROUNDS
    kinds = ["single", "cluster"]
    rates: dict[str, list[float]] = {kind: [] for kind in kinds}
    latencies: dict[str, list[float]] = {kind: [] for kind in kinds}
    commits: dict[str, list[float]] = {kind: [] for kind in kinds}
    objects: dict[str, list[int]] = {kind: [] for kind in kinds}
    events = len(log_chunks) * PER_CHUNK

    def one(kind: str, r: int) -> None:
        name = f"fwd_{kind}_{r}"
        url = servers.fresh_store(kind, name)
        servers.settle()
        commit_log = servers.root / f"{name}.commits"
        serve = servers.serve(url, name, commit_log)
        try:
            result = forward_load(serve.forward_port, log_chunks, PER_CHUNK)
        finally:
            assert serve.stop() == 0, serve.log()
        assert not result.errors, result.errors[:3]
        assert stream_rows(url) == events
        rates[kind].append(result.events / result.seconds)
        latencies[kind] += result.latencies
        commits[kind] += [float(line) for line in commit_log.read_text().split()]
        objects[kind].append(objects_in(servers.s3, url))

    def run() -> None:
        for r in range(rounds):
            for kind in kinds if r % 2 == 0 else list(reversed(kinds)):
                one(kind, r)

    load_before = os.getloadavg()
    benchmark.pedantic(run, rounds=1, iterations=1)
    ratios = [c / s for c, s in zip(rates["cluster"], rates["single"], strict=True)]
    ratio = statistics.median(ratios)
    benchmark.extra_info.update(
        events=events,
        events_per_chunk=PER_CHUNK,
        pairs=rounds,
        events_per_s={kind: statistics.median(values) for kind, values in rates.items()},
        events_per_s_rounds=rates,
        pair_ratios=ratios,
        cluster_over_single=ratio,
        goal_ratio=RATIO_GOAL,
        goal_met=ratio >= RATIO_GOAL,
        commit_latency={kind: percentiles(values) for kind, values in commits.items()},
        ack_latency={kind: percentiles(values) for kind, values in latencies.items()},
        bucket_objects_per_round=objects,
        blob_threshold=BLOB_THRESHOLD,
        node_overrides=NODE_OVERRIDES,
        provider_options=PROVIDER_OPTIONS,
        load_average_before_after=[load_before, os.getloadavg()],
    )
    print(benchmark.extra_info)


class Sender:
    """One Forward connection that resends what it has not had acknowledged when the connection is lost."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.sock: socket.socket | None = None
        self.unpacker = msgpack.Unpacker(raw=False)
        self.pending: dict[bytes, bytes] = {}  # chunk id -> message, in sending order

    def connect(self) -> None:
        self.close()
        self.sock = socket.create_connection(("127.0.0.1", self.port), timeout=60)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.unpacker = msgpack.Unpacker(raw=False)
        for message in self.pending.values():
            self.sock.sendall(message)

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def send(self, chunk: tuple[bytes, bytes]) -> None:
        cid, message = chunk
        self.pending[cid.strip()] = message
        try:
            if self.sock is None:
                raise ConnectionError("not connected")
            self.sock.sendall(message)
        except OSError:
            self.reconnect()

    def reconnect(self) -> None:
        deadline = time.monotonic() + 300
        while True:
            try:
                self.connect()
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
            else:
                return

    def acks(self) -> list[bytes]:
        """Wait for the next acknowledgements; the chunk ids they acknowledge (none after a reconnect)."""
        try:
            assert self.sock is not None
            self.unpacker.feed(receive(self.sock))
        except OSError:
            self.reconnect()
            return []
        done = [reply["ack"].encode().strip() for reply in self.unpacker]
        for cid in done:
            self.pending.pop(cid, None)
        return done


class SteadySender:
    """``connections`` threads sending chunks of ``FAILOVER_CHUNK`` events, ``window`` in flight each, until
    stopped; then they wait for every ack."""

    def __init__(self, port: int, *, connections: int = 2, window: int = 2) -> None:
        self.port, self.window = port, window
        self.next_first = 0
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.acked: list[float] = []  # each ack's monotonic time
        self.sent = 0
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(connections)]
        for thread in self.threads:
            thread.start()

    def _chunk(self) -> tuple[bytes, bytes]:
        with self.lock:
            first = self.next_first
            self.next_first += FAILOVER_CHUNK
            self.sent += 1
        return forward_chunk(TAG, first, FAILOVER_CHUNK)

    def _run(self) -> None:
        sender = Sender(self.port)
        sender.reconnect()
        while not self.stopping.is_set() or sender.pending:
            while not self.stopping.is_set() and len(sender.pending) < self.window:
                sender.send(self._chunk())
            done = sender.acks()
            now = time.monotonic()
            with self.lock:
                self.acked += [now] * len(done)
        sender.close()

    def acks_since(self, since: float) -> int:
        with self.lock:
            return sum(1 for t in self.acked if t >= since)

    def stop(self, timeout: float = 300) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(timeout)
            assert not thread.is_alive(), "the steady sender's chunks were not all acknowledged"


def written_node(cluster: GaleraCluster, database: str) -> GaleraNode:
    """The node holding the most client connections to ``database``: where the store writes."""
    counts = {}
    for node in cluster.nodes:
        conn = node.connect()
        try:
            cur = conn.cursor()
            cur.execute(
                "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE DB = ? AND USER = 'root'", (database,)
            )
            counts[node.name] = int(cur.fetchone()[0])
        finally:
            conn.close()
    best = max(cluster.nodes, key=lambda node: counts[node.name])
    if counts[best.name] == 0:
        raise RuntimeError(f"no node holds a connection to {database}: {counts}")
    return best


def first_ack(sender: Sender, chunk: tuple[bytes, bytes]) -> float:
    """Send ``chunk``; the monotonic time its ack arrived (resent after a lost connection)."""
    sender.send(chunk)
    cid = chunk[0].strip()
    while cid in sender.pending:
        sender.acks()
    return time.monotonic()


def test_failover_kill_written_node(benchmark, servers: Servers) -> None:
    kills = 1 if benchmark.disabled else KILLS
    name = "failover"
    url = servers.fresh_store("cluster", name)
    cluster = servers.cluster
    serve = servers.serve(url, name)
    steady = SteadySender(serve.forward_port)
    seconds: list[float] = []
    killed: list[str] = []
    rejoin: list[float] = []
    probe_first = 1 << 40  # the probes' events are numbered apart from the steady load's
    load_before = os.getloadavg()
    try:

        def run() -> None:
            for k in range(kills):
                started = time.monotonic()
                while steady.acks_since(time.monotonic() - 1) < 5:  # ingestion going on
                    if time.monotonic() - started > 120:
                        raise TimeoutError(f"no steady acknowledgements before kill {k + 1}:\n{serve.log()}")
                    time.sleep(0.1)
                node = written_node(cluster, name)
                chunk = forward_chunk(TAG, probe_first + k * FAILOVER_CHUNK, FAILOVER_CHUNK)
                sender = Sender(serve.forward_port)
                sender.reconnect()
                try:
                    began = time.monotonic()
                    node.kill()
                    seconds.append(first_ack(sender, chunk) - began)
                finally:
                    sender.close()
                killed.append(node.name)
                restarted = time.monotonic()
                node.start(timeout=600)
                cluster.wait_synced(timeout=600)
                rejoin.append(time.monotonic() - restarted)

        benchmark.pedantic(run, rounds=1, iterations=1)
    finally:
        steady.stop()
        stopped = serve.stop()
    rows = stream_rows(url)
    expected = (steady.sent + len(seconds)) * FAILOVER_CHUNK
    benchmark.extra_info.update(
        kills=len(seconds),
        failover_s=seconds,
        failover_min_s=min(seconds),
        failover_median_s=statistics.median(seconds),
        failover_max_s=max(seconds),
        goal_s=FAILOVER_GOAL_S,
        goal_met=max(seconds) <= FAILOVER_GOAL_S,
        killed_nodes=killed,
        rejoin_s=rejoin,
        steady_chunks=steady.sent,
        rows_expected=expected,
        rows_stored=rows,
        provider_options=PROVIDER_OPTIONS,
        load_average_before_after=[load_before, os.getloadavg()],
    )
    print(benchmark.extra_info)
    assert stopped == 0, serve.log()
    assert rows == expected, f"{rows} rows stored for {expected} events sent and acknowledged"
