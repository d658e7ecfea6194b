"""`windvane serve --workers 2`: two processes on one store and one port (real sockets, real SQLite).

Which worker a connection lands on is the kernel's choice; the tests find
out with ``ss`` (the process owning each accepted socket) and open
connections until both workers hold some.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import msgpack
import numpy as np
import pytest

from tests.forward_sender import ResendingSender, chunk_id, packed_forward
from tests.serve_process import Serve, event_schema, free_port, start_serve
from windvane import arrays

pytestmark = pytest.mark.crash

TAG = "wk.events"
SCHEMAS = {"events.toml": event_schema("wk.**")}
T0 = 1_750_000_000_000_000_000


def get_json(serve: Serve, path: str) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{serve.http_port}{path}", timeout=30) as reply:
        return json.loads(reply.read())


def metric(serve: Serve, line_start: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{serve.http_port}/metrics", timeout=30) as reply:
        for line in reply.read().decode().splitlines():
            if line.startswith(line_start + " "):
                return float(line.split()[-1])
    raise AssertionError(f"no metric {line_start}")


def worker_pids(serve: Serve) -> list[int]:
    workers = get_json(serve, "/health")["workers"]
    assert [w["status"] for w in workers] == ["ok", "ok"], workers
    return [w["pid"] for w in workers]


def owners(port: int) -> dict[int, int]:
    """Each client port connected to the server's ``port`` -> the pid of the worker that accepted it."""
    out = subprocess.run(
        ["ss", "-tnpH", "state", "established", f"( sport = :{port} )"], capture_output=True, text=True, check=True
    ).stdout
    found = {}
    for line in out.splitlines():
        peer = line.split()[3]  # Recv-Q Send-Q Local Peer Process (state given: no state column)
        pid = re.search(r"pid=(\d+)", line)
        if pid:
            found[int(peer.rpartition(":")[2])] = int(pid.group(1))
    return found


def connections_on_both(serve: Serve, most: int = 64) -> dict[int, socket.socket]:
    """Open Forward connections until both workers hold one; one connection per worker pid."""
    pids = set(worker_pids(serve))
    opened: list[socket.socket] = []
    per_pid: dict[int, socket.socket] = {}
    for _ in range(most):
        sock = socket.create_connection(("127.0.0.1", serve.forward_port), timeout=30)
        opened.append(sock)
        deadline = time.monotonic() + 10
        port = sock.getsockname()[1]
        while port not in (seen := owners(serve.forward_port)) and time.monotonic() < deadline:
            time.sleep(0.02)
        per_pid.setdefault(seen[port], sock)
        if set(per_pid) == pids:
            break
    for sock in opened:
        if sock not in per_pid.values():
            sock.close()
    assert set(per_pid) == pids, f"{most} connections all landed on {set(per_pid)}"
    return per_pid


def ack_of(sock: socket.socket) -> bytes:
    unpacker = msgpack.Unpacker(raw=False)
    while True:
        unpacker.feed(sock.recv(65536))
        for reply in unpacker:
            return reply["ack"].encode()


def stored_seqs(url: str) -> np.ndarray:
    with arrays.open_stream(url, TAG) as stream:
        return stream["seq"][:]


def test_a_chunk_sent_to_both_workers_is_stored_once_and_health_and_metrics_answer_for_both(tmp_path, store_url):
    serve = start_serve(tmp_path, SCHEMAS, "--workers", "2", store=store_url)
    try:
        per_pid = connections_on_both(serve)
        cid = chunk_id()
        message = packed_forward(TAG, [(T0 + i, {"seq": i, "msg": "m", "value": 1.0}) for i in range(100)], cid)
        for sock in per_pid.values():  # the same chunk, resent to the other worker after the first ack
            sock.sendall(message)
            assert ack_of(sock) == cid
        other = chunk_id()
        sock = next(iter(per_pid.values()))
        sock.sendall(packed_forward(TAG, [(T0 + 100, {"seq": 100, "msg": "m", "value": 1.0})], other))
        assert ack_of(sock) == other
        # Whichever worker answers, it answers for both.
        for _ in range(4):
            health = get_json(serve, "/health")
            assert health["status"] == "ok" and [w["worker"] for w in health["workers"]] == [0, 1]
            assert metric(serve, "windvane_workers") == 2
            assert metric(serve, "windvane_duplicate_submissions_total") == 1
            assert metric(serve, f'windvane_stream_events_total{{tag="{TAG}"}}') == 101
        for sock in per_pid.values():
            sock.close()
        assert serve.stop() == 0, serve.log()
    finally:
        serve.__exit__(None, None, None)
    assert sorted(stored_seqs(serve.url)) == list(range(101))


#: Each chunk id made by :func:`make_chunks` -> the seqs of its events.
SEQS: dict[bytes, range] = {}


def make_chunks(senders: int, chunks: int, per_chunk: int) -> list[list[tuple[bytes, bytes]]]:
    """Per sender, its ``chunks`` PackedForward chunks of ``per_chunk`` events; seqs count across all."""
    out = []
    for s in range(senders):
        mine = []
        for c in range(chunks):
            first = (s * chunks + c) * per_chunk
            events = [(T0 + i, {"seq": i, "msg": f"event {i}", "value": 0.5}) for i in range(first, first + per_chunk)]
            cid = chunk_id()
            SEQS[cid] = range(first, first + per_chunk)
            mine.append((cid, packed_forward(TAG, events, cid)))
        out.append(mine)
    return out


def senders_holding(
    port: int, chunks: list[list[tuple[bytes, bytes]]], held: int, *, ack_timeout: float, run_for: float
) -> tuple[list[ResendingSender], list[threading.Thread]]:
    """A resending sender per list of ``chunks``, each running in a thread, once each has ``held`` chunks
    acknowledged and holds the rest (until its ``resume`` is set)."""
    clients = [ResendingSender("127.0.0.1", port, mine, ack_timeout=ack_timeout, hold_after=held) for mine in chunks]
    threads = [threading.Thread(target=c.run, args=(time.monotonic() + run_for,)) for c in clients]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 120
    while not all(len(c.acked) >= held for c in clients):
        assert time.monotonic() < deadline, [len(c.acked) for c in clients]
        time.sleep(0.02)
    return clients, threads


def test_kill_9_of_one_worker_mid_run_loses_nothing_the_other_goes_on_and_it_is_started_again(tmp_path):
    senders, chunks, per_chunk = 6, 40, 250
    port = free_port()
    serve = start_serve(tmp_path, SCHEMAS, "--workers", "2", forward=f"127.0.0.1:{port}")
    clients: list[ResendingSender] = []
    threads: list[threading.Thread] = []
    try:
        clients, threads = senders_holding(
            port, make_chunks(senders, chunks, per_chunk), 10, ack_timeout=3, run_for=240
        )
        held = owners(port)
        # The kernel spreads the connections between the workers at random: the victim is one holding some.
        victim, survivor = sorted(worker_pids(serve), key=lambda pid: -list(held.values()).count(pid))
        os.kill(victim, signal.SIGKILL)
        acked_before = sum(len(c.acked) for c in clients)
        for client in clients:
            client.resume.set()
        for thread in threads:
            thread.join(240)
        assert all(len(c.acked) == chunks for c in clients), [c.errors[-3:] for c in clients]
        # The survivor took the run over; the killed worker's successor answers once it has started.
        deadline = time.monotonic() + 120
        health = get_json(serve, "/health")
        while any(w["status"] != "ok" for w in health["workers"]):
            assert time.monotonic() < deadline, health
            time.sleep(0.1)
            health = get_json(serve, "/health")
        assert health["status"] == "ok", health
        by_index = {w["worker"]: w for w in health["workers"]}
        restarted = [w for w in by_index.values() if w["pid"] not in (victim, survivor)]
        assert len(restarted) == 1 and restarted[0]["restarts"] == 1, health["workers"]
        assert survivor in {w["pid"] for w in by_index.values()}
        assert metric(serve, "windvane_worker_restarts_total") == 1
        assert serve.stop() == 0, serve.log()
    finally:
        serve.__exit__(None, None, None)
        for client in clients:
            client.resume.set()
    assert victim in held.values(), "the killed worker held connections of the run"
    assert acked_before < senders * chunks, "the kill came after the end of the run"
    seqs = stored_seqs(serve.url)
    counts = np.bincount(seqs, minlength=senders * chunks * per_chunk)
    assert counts.min() == 1 and counts.max() == 1, "every event once"


def test_sigterm_stops_every_worker_after_committing_what_it_acknowledged(tmp_path):
    port = free_port()
    serve = start_serve(tmp_path, SCHEMAS, "--workers", "2", forward=f"127.0.0.1:{port}")
    clients: list[ResendingSender] = []
    threads: list[threading.Thread] = []
    try:
        clients, threads = senders_holding(port, make_chunks(4, 20, 200), 5, ack_timeout=10, run_for=60)
        pids = worker_pids(serve)
        assert serve.stop() == 0, serve.log()
    finally:
        serve.__exit__(None, None, None)
        for client in clients:
            client.resume.set()
        for thread in threads:
            thread.join(90)
    for pid in pids:
        assert not os.path.exists(f"/proc/{pid}"), f"worker {pid} outlived the server"
    stored = stored_seqs(serve.url)
    assert len(np.unique(stored)) == len(stored), "every event once"
    acked = [s for client in clients for cid in client.acked for s in SEQS[cid]]
    assert acked and not set(acked) - set(stored.tolist()), "every acknowledged event is stored"


def test_kill_9_of_the_server_ends_its_workers(tmp_path):
    serve = start_serve(tmp_path, SCHEMAS, "--workers", "2")
    pids = worker_pids(serve)
    serve.kill()
    deadline = time.monotonic() + 10
    while any(os.path.exists(f"/proc/{pid}") and "zombie" not in status(pid) for pid in pids):
        assert time.monotonic() < deadline, f"workers {pids} outlived the killed server"
        time.sleep(0.02)


def status(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/status") as f:
            return f.read().lower()
    except FileNotFoundError:
        return "zombie"


def test_by_default_one_worker_per_core_serves(tmp_path):
    cores = len(os.sched_getaffinity(0))
    with start_serve(tmp_path, SCHEMAS, workers=None) as serve:
        health = get_json(serve, "/health")
        if cores == 1:
            assert "workers" not in health  # the command's own process serves
        else:
            assert [w["worker"] for w in health["workers"]] == list(range(cores))
            assert all(w["status"] == "ok" for w in health["workers"])
        assert serve.stop() == 0, serve.log()


def test_a_second_server_on_the_ports_of_one_with_workers_is_refused_not_joined(tmp_path):
    (tmp_path / "first").mkdir()
    with start_serve(tmp_path / "first", SCHEMAS, "--workers", "2", store=f"sqlite:///{tmp_path / 'a.db'}") as first:
        second = subprocess.run(
            [
                sys.executable,
                "-m",
                "windvane",
                "serve",
                "--store",
                f"sqlite:///{tmp_path / 'b.db'}",
                "--schemas",
                str(tmp_path / "first" / "schemas"),
                "--forward",
                f"127.0.0.1:{first.forward_port}",
                "--http",
                "off",
                "--workers",
                "2",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert second.returncode == 2, second.stderr
        assert f"Forward cannot listen on 127.0.0.1:{first.forward_port} (TCP): Address already in use" in second.stderr
        assert "--forward HOST:PORT, or --forward off" in second.stderr
        assert first.stop() == 0, first.log()
