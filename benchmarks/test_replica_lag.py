"""How far read replicas fall behind a primary taking Forward ingestion at full speed.

One primary and two replicas made by :mod:`windvane.ops.replica` (the code of ``windvane db start
--replica-of``), the shipped configuration with less memory (`OVERRIDES`: three servers share the
machine), durability on (``sync_binlog=1`` on the primary, ``innodb_flush_log_at_trx_commit=1`` on all
three). ``windvane serve`` on a fresh database of the primary (values in the database) takes Forward
PackedForward chunks of ``PER_CHUNK`` (5,000) log records over 4 connections, 2 chunks in flight each, as
fast as it acknowledges them, for ``SECONDS`` (30); the chunks are built before the clock starts, and each is
sent with a chunk id of its own.

While it runs, a Store opened on the URL naming the replicas (``?replicas=``) asks
:meth:`~windvane.neostore.Store.replica_states` every ``INTERVAL`` (0.1 s): each replica's lag in commits
(the primary's commits it has not applied) and in seconds (between the primary's newest commit and the
replica's). Reported: p50/p99/max of both over the load, per replica and pooled, and the seconds from the
last acknowledgement until both replicas hold every commit.

Side by side, ``ROUNDS`` rounds of each kind (`KINDS`), the order rotating from round to round: the same
ingestion with the replicas replicating and sampled as above, replicating and not sampled, and with
replication stopped on both (``STOP SLAVE``: they neither fetch nor apply; caught up again, untimed,
afterwards). Events a second, and the ratios to the stopped rounds, say what feeding and running two replicas,
and asking them how far behind they are, cost the primary's ingestion on this machine, where all of them
share the cores. Before the rounds, an untimed short load warms the servers.

Run::

    .venv/bin/python -m pytest benchmarks/test_replica_lag.py -p no:cacheprovider \\
        --benchmark-enable --benchmark-only --benchmark-json=/tmp/replica_lag.json

``WINDVANE_BENCH_SECONDS`` and ``WINDVANE_BENCH_ROUNDS`` scale it.
"""

from __future__ import annotations

import base64
import os
import shutil
import socket
import statistics
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import msgpack
import numpy as np
import pytest
from conftest import running, settle_servers
from ingest_load import LOG_SCHEMA, forward_chunk, receive

from tests.mariadb import fresh_database, stop_test_server
from tests.replicas import with_replicas
from tests.serve_process import Serve
from windvane import arrays, neostore
from windvane.ops.mariadb_server import MariaDBServer
from windvane.ops.replica import make_primary, start_replica, wait_for_primary

# Each round of each kind is a server start, a load of SECONDS and a settle: longer than the suite's timeout.
pytestmark = pytest.mark.timeout(3600)

SECONDS = float(os.environ.get("WINDVANE_BENCH_SECONDS", "30"))
ROUNDS = int(os.environ.get("WINDVANE_BENCH_ROUNDS", "3"))
INTERVAL = 0.1
PER_CHUNK = 5000
#: Distinct chunks built before the clock starts, sent in turn (each time with a new chunk id).
POOL = 40
TAG = "bench.logs"
#: The replicas during a round, by its kind: (replicating, sampled by a Store on the replicated URL).
KINDS = {"sampled": (True, True), "unsampled": (True, False), "stopped": (False, False)}

# The shipped configuration (durability included), with a smaller buffer pool and redo log: three servers
# share the machine.
OVERRIDES: dict[str, str | None] = {"innodb_buffer_pool_size": "512M", "innodb_log_file_size": "512M"}


class Servers:
    """The primary and its two replicas, in a short temporary directory (unix socket paths are limited)."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="wvb-lag-", dir="/tmp"))
        self.primary = MariaDBServer(self.root / "p")
        self.replicas: list[MariaDBServer] = []
        self.schemas = self.root / "schemas"
        self.schemas.mkdir()
        (self.schemas / "logs.toml").write_text(LOG_SCHEMA)

    def start(self) -> None:
        self.primary = make_primary(self.root / "p", overrides=OVERRIDES, timeout=300)
        for n in (1, 2):
            self.replicas.append(
                start_replica(
                    self.root / f"r{n}",
                    str(self.root / "p"),
                    overrides=OVERRIDES,
                    primary_overrides=OVERRIDES,
                    timeout=300,
                )
            )

    def stop(self) -> None:
        for server in [*self.replicas, self.primary]:
            stop_test_server(server)
        shutil.rmtree(self.root, ignore_errors=True)

    def replication(self, statement: str) -> None:
        """Run ``statement`` (START or STOP SLAVE) on both replicas."""
        for replica in self.replicas:
            conn = replica.connect()
            try:
                conn.cursor().execute(statement)
            finally:
                conn.close()

    @property
    def names(self) -> dict[str, str]:
        """Each replica's name in the results, by its socket."""
        return {replica.socket: f"replica {n}" for n, replica in enumerate(self.replicas, 1)}

    def replicated(self, url: str) -> str:
        """``url`` (a database of the primary) with ``?replicas=`` naming both replicas."""
        return with_replicas(url, [replica.socket for replica in self.replicas]).url

    def caught_up(self) -> None:
        for replica in self.replicas:
            wait_for_primary(replica, self.primary, timeout=1800)

    def settle(self) -> None:
        """Flush every server's dirty pages (untimed), so that no round pays for the one before."""
        settle_servers([self.primary, *self.replicas])


@pytest.fixture(scope="module")
def servers() -> Iterator[Servers]:
    with running(Servers()) as started:
        yield started


@pytest.fixture(scope="module")
def chunk_bodies() -> list[bytes]:
    """The pool's chunks without their options (the chunk id goes there at each send)."""
    bodies = []
    for k in range(POOL):
        cid, message = forward_chunk(TAG, k * PER_CHUNK, PER_CHUNK)
        options = msgpack.packb({"size": PER_CHUNK, "chunk": cid.decode()})
        assert message.endswith(options)
        bodies.append(message[: -len(options)])
    return bodies


@dataclass
class Sent:
    """What a timed load sent: chunks acknowledged, when the last ack came, errors."""

    chunks: int = 0
    seconds: float = 0.0
    last_ack: float = 0.0
    errors: list[str] = field(default_factory=list)


def forward_for(port: int, bodies: list[bytes], seconds: float, *, connections: int = 4, window: int = 2) -> Sent:
    """Send the pool's chunks in turn over ``connections`` sockets, ``window`` unacknowledged each, for
    ``seconds``; then wait for every ack."""
    sent = Sent()
    lock = threading.Lock()
    start = threading.Barrier(connections + 1)
    deadline = [0.0]

    def run(offset: int) -> None:
        sock = socket.create_connection(("127.0.0.1", port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        unpacker = msgpack.Unpacker(raw=False)
        waiting: set[bytes] = set()
        k, acked = offset, 0
        start.wait()
        try:
            while time.monotonic() < deadline[0] or waiting:
                while time.monotonic() < deadline[0] and len(waiting) < window:
                    cid = base64.encodebytes(os.urandom(16))
                    options = msgpack.packb({"size": PER_CHUNK, "chunk": cid.decode()})
                    sock.sendall(bodies[k % len(bodies)] + options)
                    waiting.add(cid)
                    k += connections
                unpacker.feed(receive(sock))
                for reply in unpacker:
                    waiting.remove(reply["ack"].encode())
                    acked += 1
        except Exception as exc:  # noqa: BLE001 - reported with the result
            with lock:
                sent.errors.append(repr(exc))
        finally:
            sock.close()
            with lock:
                sent.chunks += acked
                sent.last_ack = max(sent.last_ack, time.monotonic())

    threads = [threading.Thread(target=run, args=(n,)) for n in range(connections)]
    for thread in threads:
        thread.start()
    began = time.monotonic()
    deadline[0] = began + seconds
    start.wait()
    for thread in threads:
        thread.join()
    sent.seconds = sent.last_ack - began
    return sent


class Sampler:
    """Asks ``replica_states()`` of a Store on the replicated URL every ``INTERVAL`` in a thread of its own."""

    def __init__(self, url: str, names: dict[str, str]) -> None:
        self.store = neostore.open(url, read_only=True)
        self.names = names  # a replica's name in the results, by the node the URL gives
        self.samples: list[tuple[float, str, int, float]] = []  # (monotonic time, replica, commits, seconds)
        self.errors: list[str] = []
        self.asking: list[float] = []  # seconds each replica_states() took
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stopping.is_set():
            asked = time.monotonic()
            states = self.store.replica_states()
            self.asking.append(time.monotonic() - asked)
            for state in states:
                if state.behind is None or state.lag_seconds is None:
                    self.errors.append(f"{state.node}: {state.error}")
                else:
                    self.samples.append((asked, self.names[state.node], state.behind, state.lag_seconds))
            self.stopping.wait(max(0.0, INTERVAL - (time.monotonic() - asked)))

    def caught_up_at(self, since: float, timeout: float = 600) -> float:
        """The first time after ``since`` at which a sample found every replica holding every commit."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            by_time: dict[float, list[int]] = {}
            for asked, _, behind, _ in list(self.samples):
                if asked >= since:
                    by_time.setdefault(asked, []).append(behind)
            done = [asked for asked, behinds in sorted(by_time.items()) if len(behinds) == 2 and max(behinds) == 0]
            if done:
                return done[0]
            time.sleep(INTERVAL)
        raise TimeoutError(f"the replicas did not catch up within {timeout} s")

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join()
        self.store.close()


def distribution(values: list[float]) -> dict[str, float]:
    return {
        "p50": float(np.percentile(values, 50)),
        "p99": float(np.percentile(values, 99)),
        "max": float(max(values)),
        "samples": len(values),
    }


def stream_rows(url: str) -> int:
    with arrays.open_stream(url, TAG) as stream:
        return len(stream)


@dataclass
class Round:
    """One ingestion: events a second and, with the replicas replicating, what the sampler saw."""

    events_per_s: float
    #: (replica, commits behind, seconds behind) of each sample taken during the load.
    lag: list[tuple[str, int, float]] = field(default_factory=list)
    catch_up_s: float | None = None
    #: Seconds each sample took to ask.
    asking: list[float] = field(default_factory=list)
    commits: int = 0


def ingest(servers: Servers, bodies: list[bytes], name: str, seconds: float, kind: str) -> Round:
    """``windvane serve`` on a fresh database ``name`` taking Forward at full speed for ``seconds``, the
    replicas as ``kind`` says (`KINDS`); every acknowledged event is checked stored."""
    replicating, sampled = KINDS[kind]
    url = fresh_database(servers.primary.url(), name)
    servers.caught_up()
    servers.settle()
    if not replicating:
        servers.replication("STOP SLAVE")
    serve = Serve(url, servers.schemas, servers.root / f"{name}.log", forward="127.0.0.1:0", http=None)
    sampler = Sampler(servers.replicated(url), servers.names) if sampled else None
    try:
        began = time.monotonic()
        sent = forward_for(serve.forward_port, bodies, seconds)
        assert not sent.errors, sent.errors[:3]
        result = Round(sent.chunks * PER_CHUNK / sent.seconds)
        if sampler is not None:
            result.catch_up_s = sampler.caught_up_at(sent.last_ack) - sent.last_ack
            result.lag = [(node, n, s) for asked, node, n, s in sampler.samples if began <= asked <= sent.last_ack]
            assert not sampler.errors, sampler.errors[:3]
            result.asking = sampler.asking
            result.commits = int(sampler.store.query("SELECT COUNT(*) FROM trans")[0][0])
    finally:
        if sampler is not None:
            sampler.stop()
        assert serve.stop() == 0, serve.log()
        if not replicating:
            servers.replication("START SLAVE")
    assert stream_rows(url) == sent.chunks * PER_CHUNK
    return result


def lag_figures(samples: list[tuple[str, int, float]]) -> dict[str, dict[str, float]]:
    return {
        "commits": distribution([float(n) for _, n, _ in samples]),
        "seconds": distribution([s for _, _, s in samples]),
    }


def test_replica_lag_under_forward_ingestion(benchmark, servers: Servers, chunk_bodies: list[bytes]) -> None:
    rounds = 1 if benchmark.disabled else ROUNDS
    seconds = 5.0 if benchmark.disabled else SECONDS
    done: dict[str, list[Round]] = {kind: [] for kind in KINDS}
    ingest(servers, chunk_bodies, "lag_warm_up", 5.0, "sampled")  # untimed: the servers' first touch

    def run() -> None:
        kinds = list(KINDS)
        for r in range(rounds):
            for kind in kinds[r % len(kinds) :] + kinds[: r % len(kinds)]:
                done[kind].append(ingest(servers, chunk_bodies, f"lag_{kind}_{r}", seconds, kind))

    load_before = os.getloadavg()
    benchmark.pedantic(run, rounds=1, iterations=1)
    rates = {kind: [r.events_per_s for r in results] for kind, results in done.items()}
    ratios = {
        kind: [a / b for a, b in zip(rates[kind], rates["stopped"], strict=True)] for kind in ("sampled", "unsampled")
    }
    sampled = done["sampled"]
    pooled = [sample for r in sampled for sample in r.lag]
    benchmark.extra_info.update(
        seconds_of_load=seconds,
        events_per_chunk=PER_CHUNK,
        pairs=rounds,
        interval_s=INTERVAL,
        events_per_s={kind: statistics.median(values) for kind, values in rates.items()},
        events_per_s_rounds=rates,
        pair_ratios=ratios,
        over_stopped={kind: statistics.median(values) for kind, values in ratios.items()},
        commits_per_s_rounds=[r.commits / seconds for r in sampled],
        lag=lag_figures(pooled),
        lag_by_replica={name: lag_figures([s for s in pooled if s[0] == name]) for name in servers.names.values()},
        lag_by_round=[lag_figures(r.lag) for r in sampled],
        asking_s=distribution([s for r in sampled for s in r.asking]),
        catch_up_after_last_ack_s=[r.catch_up_s for r in sampled],
        overrides=OVERRIDES,
        load_average_before_after=[load_before, os.getloadavg()],
    )
    print(benchmark.extra_info)
