"""``/health`` tells the truth: 503 naming the reason and the streams while commits fail, 200 only once
the work that failed is committed.

The failures are real: a ``windvane serve`` on SQLite whose file size limit
(RLIMIT_FSIZE, set on the running process with prlimit) is 0, so that every
write to its files fails as on a full disk; a store on a small tmpfs of the
test's own, filled up; a stream whose stored rows were altered in the
database file; a MariaDB server of the test's own, stopped and started
again. ``/metrics`` counts the failed commits and the poisoned submissions,
and the connections the endpoints timed out or refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import resource
import socket
import sqlite3
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import msgpack
import numpy as np
import pytest

from tests.cli.test_serve import SCHEMA, column, post
from tests.forward_sender import chunk_id, packed_forward
from tests.ingest.test_committer import SCHEMAS, batch, read
from tests.serve_process import Serve
from windvane import arrays, neostore
from windvane.ingest import Batch
from windvane.ingest.committer import GroupCommitter


@pytest.fixture
def schemas(tmp_path) -> Path:
    """A schema directory with :data:`tests.cli.test_serve.SCHEMA` (tags ``app.**``)."""
    (tmp_path / "schemas").mkdir()
    (tmp_path / "schemas" / "app.toml").write_text(SCHEMA)
    return tmp_path / "schemas"


def health(server: Serve) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.http_port}/health", timeout=30) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def metrics(server: Serve) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.http_port}/metrics", timeout=30) as reply:
        return reply.read().decode()


def metric(text: str, name: str) -> float:
    found = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
    assert found, f"{name} not in /metrics"
    return float(found.group(1))


def send(server: Serve, seq: int) -> tuple[int, dict]:
    status, _, reply = post(server.http_port, "/app/health", b'{"seq": %d}\n' % seq)
    return status, reply


def assert_failing(server: Serve, failures: int, streams: dict[str, str]) -> dict:
    """/health is 503 naming each of ``streams`` (tag -> what its reason says); /metrics agrees."""
    status, body = health(server)
    assert status == 503, body
    assert body["status"] == "failing" and body["error"] == "commits_failing"
    assert body["reason"] in body["message"] and set(body["streams"]) == set(streams), body
    assert body["failing_streams"] == len(streams)
    text = metrics(server)
    for tag, reason in streams.items():
        assert repr(tag) in body["message"] and reason in body["streams"][tag]["reason"], body
        assert metric(text, f'windvane_stream_commits_failing{{tag="{tag}"}}') == 1
    assert metric(text, "windvane_commits_failing") == 1
    assert metric(text, "windvane_commit_failures_total") == failures
    return body


def assert_healthy(server: Serve) -> None:
    status, body = health(server)
    assert status == 200 and body["status"] == "ok" and "error" not in body, body
    text = metrics(server)
    assert metric(text, "windvane_commits_failing") == 0
    assert "windvane_stream_commits_failing{" in text and not re.search(
        r"^windvane_stream_commits_failing.* 1$", text, re.M
    )


def test_sqlite_that_cannot_write_is_503_until_the_failed_work_is_committed(sqlite_url, schemas, tmp_path):
    with Serve(sqlite_url, schemas, tmp_path / "serve.log", "--decode-workers", "0") as server:
        assert send(server, 1)[0] == 200
        assert_healthy(server)
        text = metrics(server)
        for endpoint in ("forward", "http"):  # wired, counted by the servers themselves
            assert f'windvane_connection_timeouts_total{{endpoint="{endpoint}"}} 0' in text
            assert f'windvane_connections_refused_total{{endpoint="{endpoint}"}} 0' in text
        pid = server.process.pid
        limits = resource.prlimit(pid, resource.RLIMIT_FSIZE)
        # Every write to a file now fails (EFBIG; Python ignores SIGXFSZ), as on a full disk.
        resource.prlimit(pid, resource.RLIMIT_FSIZE, (0, limits[1]))
        try:
            status, reply = send(server, 2)
            assert status == 500 and reply["error"] == "commit_failed", reply
            first = assert_failing(server, 1, {"app.health": "could not commit"})
            assert send(server, 3)[0] == 500
            assert (
                assert_failing(server, 2, {"app.health": "could not commit"})["failing_since"] == first["failing_since"]
            )
        finally:
            resource.prlimit(pid, resource.RLIMIT_FSIZE, limits)
        # The store commits again, but what failed is not stored until its sender sends it again:
        # another stream's commit says nothing of it.
        assert post(server.http_port, "/app/other", b'{"seq": 1}\n')[0] == 200
        assert_failing(server, 2, {"app.health": "could not commit"})
        assert send(server, 4)[0] == 200
        assert_healthy(server)
        assert server.stop() == 0
    assert column(sqlite_url, "app.health", "seq") == [1, 4]


@pytest.fixture
def small_disk(tmp_path) -> Iterator[Path]:
    """A file system of 8 MiB of the test's own (a tmpfs, mounted as root), that can fill up for real."""
    path = tmp_path / "disk"
    path.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "windvane-test", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=True)


def _fill(directory: Path, leave: int) -> Path:
    """A file filling the file system of ``directory`` but ``leave`` bytes (about)."""
    filler = directory / "filler"
    with open(filler, "wb") as f:
        with contextlib.suppress(OSError):  # ENOSPC: full
            while True:
                f.write(bytes(65536))
                f.flush()
    os.truncate(filler, max(0, os.path.getsize(filler) - leave))
    return filler


def test_full_disk_is_503_until_the_failed_work_is_committed(small_disk, schemas, tmp_path):
    url = f"sqlite:///{small_disk}/store.db"
    big = json.dumps({"seq": 1, "message": os.urandom(300_000).hex()}).encode() + b"\n"
    with Serve(url, schemas, tmp_path / "serve.log", "--decode-workers", "0", forward=None) as server:
        assert send(server, 1)[0] == 200
        filler = _fill(small_disk, leave=256 << 10)
        status, reply = post(server.http_port, "/app/big", big)[::2]
        assert status == 500 and "disk is full" in reply["message"], reply
        # A small commit still fits on the disk: it says nothing of the work that did not.
        assert send(server, 2)[0] == 200
        assert_failing(server, 1, {"app.big": "disk is full"})
        os.remove(filler)
        assert post(server.http_port, "/app/big", big)[0] == 200
        assert_healthy(server)
        assert "work for stream 'app.big' is committed again" in server.log()
        assert server.stop() == 0
    assert column(url, "app.health", "seq") == [1, 2] and column(url, "app.big", "seq") == [1]


def _damage_row_log(url: str, tag: str) -> Callable[[], None]:
    """Alter the stored bytes of the latest rows of stream ``tag`` in the database file (as a failing disk
    would); the function that puts them back."""
    with neostore.open(url) as store:
        name = f"streams/{tag}/__rows".encode()
        oid = neostore.u64(store.oids_for([name])[name])
    path = url.removeprefix("sqlite:///")
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        data_id, value = conn.execute(
            "SELECT d.id, d.value FROM obj o JOIN data d ON d.id = o.data_id WHERE o.oid = ? ORDER BY o.tid DESC",
            (oid,),
        ).fetchone()
        conn.execute("UPDATE data SET value = ? WHERE id = ?", (bytes([value[0] ^ 0xFF]) + value[1:], data_id))

    def repair() -> None:
        with contextlib.closing(sqlite3.connect(path)) as conn, conn:
            conn.execute("UPDATE data SET value = ? WHERE id = ?", (value, data_id))

    return repair


def test_stream_with_a_corrupt_chunk_is_503_while_other_streams_commit(sqlite_url, schemas, tmp_path):
    log = tmp_path / "serve.log"
    with Serve(sqlite_url, schemas, log, "--decode-workers", "0", forward=None) as server:
        assert send(server, 1)[0] == 200
        assert server.stop() == 0
    repair = _damage_row_log(sqlite_url, "app.health")
    with Serve(sqlite_url, schemas, log, "--decode-workers", "0", forward=None) as server:
        for seq in (2, 3):
            status, reply = send(server, seq)
            assert status == 500 and "does not match its blake3 hash" in reply["message"], reply
            # Commits to other streams go on between the failed appends: the stream still fails.
            assert post(server.http_port, "/app/other", b'{"seq": %d}\n' % seq)[0] == 200
            body = assert_failing(server, seq - 1, {"app.health": "does not match its blake3 hash"})
            assert body["streams"]["app.health"]["failed_commits"] == seq - 1
        assert metric(metrics(server), 'windvane_stream_commits_failing{tag="app.other"}') == 0
        repair()
        assert send(server, 4)[0] == 200
        assert_healthy(server)
        assert server.stop() == 0
    assert column(sqlite_url, "app.health", "seq") == [1, 4] and column(sqlite_url, "app.other", "seq") == [2, 3]


def test_mariadb_down_is_503_until_a_commit_succeeds(private_server, schemas, tmp_path):
    url = private_server.url("health")
    with Serve(url, schemas, tmp_path / "serve.log", "--decode-workers", "0") as server:
        assert send(server, 1)[0] == 200
        assert_healthy(server)
        private_server.stop(timeout=60)
        try:
            status, reply = send(server, 2)
            assert status == 500 and reply["error"] == "commit_failed", reply
            assert_failing(server, 1, {"app.health": "could not commit"})
        finally:
            private_server.start(timeout=120)
        deadline = time.monotonic() + 60
        while (status := send(server, 3)[0]) != 200 and time.monotonic() < deadline:
            time.sleep(0.5)  # the first commits may still meet the server starting
        assert status == 200
        assert_healthy(server)
        assert server.stop() == 0
    assert column(url, "app.health", "seq") == [1, 3]


async def test_metrics_count_poisoned_submissions_and_a_success_clears_the_failure(sqlite_url):
    # A stream made with 2 channels cannot take the schema's 3-channel blocks: the submission is
    # committed with its events quarantined verbatim (poisoned), beside a normal one.
    with neostore.open(sqlite_url) as store:
        arrays.create_stream(store, "vib.x", [arrays.Column("samples", "float32", inner=(2,))])
        committer = GroupCommitter(store, SCHEMAS)
        committer.start()
        block = np.zeros((4, 3), dtype="<f4").tobytes()
        try:
            committer.metrics.record_failure("the store could not commit: an earlier failure")
            poisoned = await committer.submit([Batch("vib.x", [7, 8], [{"samples": block}, {"samples": block}])])
            fine = await committer.submit([batch("app.fine", 0, 3)])
        finally:
            committer.close()
        assert (poisoned.accepted, poisoned.quarantined, fine.accepted) == (0, 2, 3)
        samples = {name: value for name, _, _, labels, value in committer.metrics.samples() if not labels}
        assert samples["windvane_poisoned_submissions_total"] == 1
        assert samples["windvane_poisoned_events_total"] == 2
        assert samples["windvane_internal_errors_total"] == 1
        assert samples["windvane_commit_failures_total"] == 1 and samples["windvane_commits_failing"] == 0
        assert committer.metrics.failure is None
        assert [msgpack.unpackb(r)[0] for r in read(store, "vib.x", quarantine=True)["raw"]] == [7, 8]


async def test_metrics_count_the_time_commits_hold_the_commit_lock_within_their_time(sqlite_url):
    # Two committers on one SQLite store take turns at its commit lock: each counts only the time it
    # held it, never its wait for the other's commit.
    with neostore.open(sqlite_url) as store:
        committers = [GroupCommitter(store, SCHEMAS) for _ in range(2)]
        for committer in committers:
            committer.start()
        began = time.monotonic()
        try:
            for round_ in range(3):
                receipts = await asyncio.gather(
                    *(c.submit([batch(f"app.lock{i}", round_ * 100, 100)]) for i, c in enumerate(committers))
                )
                assert [r.accepted for r in receipts] == [100, 100]
        finally:
            for committer in committers:
                committer.close()
        elapsed = time.monotonic() - began
        totals = [{name: value for name, _, _, labels, value in c.metrics.samples() if not labels} for c in committers]
    for sample in totals:
        assert sample["windvane_commits_total"] == 3
        assert 0 < sample["windvane_commit_lock_seconds_total"] <= sample["windvane_commit_seconds_total"]
    # One commit holds the lock at a time: what both held adds up to no more than the time it all took.
    assert sum(sample["windvane_commit_lock_seconds_total"] for sample in totals) <= elapsed


def _closed_by_server(sock: socket.socket) -> bool:
    """Whether the server closed ``sock`` (waiting for it at most the socket's timeout)."""
    try:
        return sock.recv(1024) == b""
    except ConnectionResetError:
        return True


def test_metrics_count_timeouts_and_refused_connections(sqlite_url, schemas, tmp_path):
    args = ("--decode-workers", "0", "--max-connections", "2", "--header-timeout", "1")
    with Serve(sqlite_url, schemas, tmp_path / "serve.log", *args) as server:
        cid = chunk_id()
        message = packed_forward("app.held", [(1_700_000_000_000_000_000, {"seq": 1})], cid)
        held = []
        try:
            for _ in range(2):  # the most Forward connections allowed, each known open by its ack
                sock = socket.create_connection(("127.0.0.1", server.forward_port), timeout=30)
                held.append(sock)
                sock.sendall(message)
                assert msgpack.unpackb(sock.recv(1024))["ack"] == cid.decode()
            with socket.create_connection(("127.0.0.1", server.forward_port), timeout=30) as extra:
                assert _closed_by_server(extra)  # one too many: closed at once
            with socket.create_connection(("127.0.0.1", server.http_port), timeout=30) as slow:
                slow.sendall(b"POST /app/slow HTTP/1.1\r\nHost: x\r\n")  # and the rest never comes
                assert _closed_by_server(slow)  # after the header timeout
            text = metrics(server)
        finally:
            for sock in held:
                sock.close()
        assert metric(text, 'windvane_connections_refused_total{endpoint="forward"}') == 1
        assert metric(text, 'windvane_connection_timeouts_total{endpoint="http"}') == 1
        assert metric(text, 'windvane_connections_refused_total{endpoint="http"}') == 0
        assert metric(text, 'windvane_connection_timeouts_total{endpoint="forward"}') == 0
        assert server.stop() == 0
    assert column(sqlite_url, "app.held", "seq") == [1]  # sent twice under one chunk id: stored once
