"""``windvane serve`` on a Galera cluster URL keeps every line a real Fluent Bit sends through node failures.

Fluent Bit tails a log that grows while the test runs and sends it with
``out_forward`` and ``Require_ack_response`` into ``windvane serve`` on the
cluster URL of the module's own 3-node cluster. Its own counters (its HTTP
server's ``/api/v1/metrics``) tell what was acknowledged: ``proc_records``
counts the lines of chunks acknowledged, ``retries`` the flushes that were
not and are kept to be sent again.

* The node serve writes through is killed with SIGKILL mid-run: serve stays
  up and goes on through another node, every line is stored once (values in
  the object store), and the killed node, started again, rejoins holding
  the same stream.
* Two of the three nodes are killed mid-run: the cluster loses quorum, serve
  acknowledges nothing and ``/health`` says that no node serves and why,
  node by node, while Fluent Bit keeps its chunks; once the nodes are
  started again the cluster has quorum, ingestion resumes, and every line
  is stored once.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import with_blobs
from tests.connectors.forward.test_fluentbit_forward import FLUENT_BIT_PARSE_NS, TAG, fluent_bit_config
from tests.connectors.forward.test_fluentd_forward import SCHEMAS, check_stream, write_lines
from tests.fluent_programs import Program, start_fluent_bit
from tests.galera import fresh_cluster_database
from tests.ingest.test_health import health
from tests.serve_process import Serve, free_port, start_serve
from windvane.ops.galera import GaleraCluster, GaleraNode

pytestmark = [pytest.mark.crash, pytest.mark.clients, pytest.mark.slow]

LINES = 4000
# Lines written before the failure: the test waits for part of them to be acknowledged, then fails nodes
# while the rest are on their way.
BEFORE = 1500


class GrowingLog(threading.Thread):
    """Appends the events' lines to ``path`` a few at a time, as a program logging would; stops at ``hold``
    lines until ``resume`` is set, then writes on to ``total``."""

    def __init__(self, path: Path, total: int, hold: int, step: int = 100, pause: float = 0.1) -> None:
        super().__init__(daemon=True)
        self.path, self.total, self.hold, self.step, self.pause = path, total, hold, step, pause
        self.resume = threading.Event()
        # The first lines are there before Fluent Bit starts tailing; the others are appended.
        write_lines(path, step)
        self.written = step

    def run(self) -> None:
        while self.written < self.total:
            if self.written >= self.hold:
                self.resume.wait()
            stop = min(self.written + self.step, self.total if self.resume.is_set() else self.hold)
            write_lines(self.path, stop, self.written)
            self.written = stop
            time.sleep(self.pause)


class FluentBitCounts:
    """Fluent Bit's own counters of its forward output, read from its HTTP server."""

    def __init__(self, port: int) -> None:
        self.port = port

    @property
    def service(self) -> str:
        """The [SERVICE] lines that start the HTTP server these counters are read from."""
        return f"HTTP_Server On\n    HTTP_Listen 127.0.0.1\n    HTTP_Port {self.port}"

    def output(self) -> dict[str, int]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/api/v1/metrics", timeout=10) as reply:
            return dict(json.loads(reply.read())["output"]["forward.0"])

    def ready(self) -> bool:
        """Whether the counters are there: Fluent Bit answers 404 until it first gathers them."""
        try:
            self.output()
        except urllib.error.HTTPError as exc:
            if exc.code != 404:
                raise
            return False
        return True

    @property
    def acknowledged(self) -> int:
        """Lines of the chunks the server acknowledged."""
        return self.output()["proc_records"]

    @property
    def retries(self) -> int:
        """Flushes that failed (no acknowledgement), their chunks kept to be sent again."""
        return self.output()["retries"]


def wait_for(condition: Callable[[], bool], timeout: float, what: Callable[[], str]) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not after {timeout} s: {what()}")
        time.sleep(0.2)


def clients_of(node: GaleraNode, database: str) -> int:
    """How many client connections ``node`` has to ``database`` (Galera's own threads left out)."""
    conn = node.connect()
    try:
        cur = conn.cursor()
        cur.execute(
            "SELECT COUNT(*) FROM information_schema.PROCESSLIST "
            "WHERE DB = ? AND USER <> 'system user' AND ID <> CONNECTION_ID()",
            (database,),
        )
        return int(cur.fetchone()[0])
    finally:
        conn.close()


def written_node(cluster: GaleraCluster, database: str, timeout: float = 60) -> GaleraNode:
    """The one running node that serve's connections to ``database`` go to."""
    found: list[GaleraNode] = []

    def one() -> bool:
        found[:] = [node for node in cluster.nodes if node.pid is not None and clients_of(node, database)]
        return len(found) == 1

    wait_for(one, timeout, lambda: f"serve's connections are on {[node.name for node in found]}")
    return found[0]


class Run:
    """serve on ``url`` and Fluent Bit tailing a `GrowingLog` into it, in ``tmp_path``."""

    def __init__(self, tmp_path: Path, url: str) -> None:
        self.url = url
        self.log = GrowingLog(tmp_path / "events.jsonl", LINES, BEFORE)
        port = free_port()
        self.serve: Serve = start_serve(tmp_path, SCHEMAS, store=url, forward=f"127.0.0.1:{port}", timeout=120)
        self.counts = FluentBitCounts(free_port())
        config = fluent_bit_config(tmp_path, self.log.path, port, service=self.counts.service)
        self.fluent_bit: Program = start_fluent_bit(config, tmp_path)
        self.log.start()
        wait_for(self.counts.ready, 30, lambda: self.fluent_bit.log(3000))

    def what(self) -> str:
        return f"{self.counts.output()}\n{self.fluent_bit.log(3000)}\n--- serve ---\n{self.serve.log()}"

    def wait_acknowledged(self, lines: int, timeout: float) -> None:
        wait_for(lambda: self.counts.acknowledged >= lines, timeout, self.what)

    def finish(self) -> None:
        """Wait until every line is acknowledged (Fluent Bit then has nothing left to send), stop both."""
        self.wait_acknowledged(LINES, 240)
        assert self.counts.acknowledged == LINES, self.what()
        assert self.serve.stop() == 0, self.serve.log()

    def close(self) -> None:
        self.log.resume.set()
        self.fluent_bit.stop()
        self.serve.kill()


def test_kill_9_of_the_written_node_mid_run(private_galera, s3_env, tmp_path):
    database = "serve_failover"
    bucket = s3_env.new_bucket()
    blobs = f"blobs=s3://{bucket}/store&endpoint={s3_env.endpoint}&blob_threshold=1"
    url = with_blobs(fresh_cluster_database(private_galera, database), blobs)
    run = Run(tmp_path, url)
    try:
        run.wait_acknowledged(1000, 120)
        killed = written_node(private_galera, database)
        assert killed is private_galera.node(1), "writes go through the first node of the URL that serves"
        assert killed.kill()
        run.log.resume.set()  # the rest of the lines arrive while the node is gone
        run.wait_acknowledged(LINES, 240)
        assert run.serve.process.poll() is None, "serve stays up"
        assert written_node(private_galera, database) is private_galera.node(2)
        assert f"{private_galera.node(2).socket} now serves" in run.serve.log()
        assert killed.pid is None, "every line went through another node"
        run.finish()
    finally:
        run.close()
    assert s3_env.objects(bucket), "the run's values went to the object store"
    check_stream(url, LINES, TAG, time_slack_ns=FLUENT_BIT_PARSE_NS)

    killed.start()
    private_galera.wait_synced()
    check_stream(with_blobs(killed.url(database), blobs), LINES, TAG, time_slack_ns=FLUENT_BIT_PARSE_NS)


def test_losing_quorum_stops_acknowledgements_until_it_returns(private_galera, tmp_path):
    database = "serve_quorum"
    run = Run(tmp_path, fresh_cluster_database(private_galera, database))
    try:
        run.wait_acknowledged(1000, 120)
        assert written_node(private_galera, database) is private_galera.node(1)
        for index in (2, 3):
            assert private_galera.node(index).kill()
        run.log.resume.set()

        # node1 runs on, outside any primary component: no node serves, and /health names each one's reason.
        def failing() -> bool:
            status, body = health(run.serve)
            return status == 503 and "no node of the MariaDB cluster serves" in body.get("reason", "")

        wait_for(failing, 120, run.what)
        _, body = health(run.serve)
        reason = body["reason"]
        assert "node1/mysqld.sock: not part of the primary component" in reason, reason
        assert "node2/mysqld.sock" in reason and "node3/mysqld.sock" in reason, reason
        # Fluent Bit's flushes fail and their chunks are kept for a retry; the retries fail too, and nothing is
        # acknowledged while quorum is lost.
        acknowledged, retries = run.counts.acknowledged, run.counts.retries
        wait_for(lambda: run.counts.retries >= retries + 6, 60, run.what)
        assert run.counts.acknowledged == acknowledged < LINES
        status, body = health(run.serve)
        assert status == 503 and "no node of the MariaDB cluster serves" in body["reason"], body

        private_galera.start(timeout=240)  # node1 forms a primary component again; the others rejoin it
        run.finish()
        assert "commit failed, nothing acknowledged" in run.serve.log()
    finally:
        run.close()
    check_stream(private_galera.url(database), LINES, TAG, time_slack_ns=FLUENT_BIT_PARSE_NS)
