"""Timeouts and connection limits of ``windvane serve``: hostile or forgetful clients are closed, others go on.

Each test runs ``windvane serve`` (a subprocess) with short timeouts and
talks to it over plain sockets on loopback. A client's socket timeout is
always well past the server's timeout under test: what is asserted is that
the server closed the connection (and answered what it should), never how
fast.
"""

from __future__ import annotations

import json
import os
import resource
import socket
import time
from pathlib import Path

import msgpack

from tests.hostile import acked, closed_by_server, metrics
from tests.serve_process import Serve
from windvane.connectors.forward.handshake import ping

SCHEMA = """
kind = "log"
tags = ["app.**"]
[[fields]]
name = "message"
dtype = "str"
"""


def start(tmp_path: Path, *args: str) -> Serve:
    schemas = tmp_path / "schemas"
    schemas.mkdir(exist_ok=True)
    (schemas / "app.toml").write_text(SCHEMA)
    return Serve(f"sqlite:///{tmp_path}/store.db", schemas, tmp_path / "serve.log", "--decode-workers", "0", *args)


def connect(port: int, timeout: float = 20) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=timeout)


def handshake(sock: socket.socket, shared_key: str) -> list:
    """The HELO/PING/PONG of a Forward client; the PONG."""
    unpacker = msgpack.Unpacker(raw=False)
    replies = []
    while not replies:
        unpacker.feed(sock.recv(4096))
        replies = list(unpacker)
    sock.sendall(msgpack.packb(ping(replies[0], client_hostname="client", shared_key=shared_key), use_bin_type=True))
    while len(replies) < 2:
        unpacker.feed(sock.recv(4096))
        replies.extend(unpacker)
    return replies[1]


def timeouts(counters: dict[str, float], endpoint: str) -> float:
    return counters[f'windvane_connection_timeouts_total{{endpoint="{endpoint}"}}']


def refused(counters: dict[str, float], endpoint: str) -> float:
    return counters[f'windvane_connections_refused_total{{endpoint="{endpoint}"}}']


def test_forward_handshake_and_idle_timeouts(tmp_path):
    with start(
        tmp_path, "--shared-key", "k3y", "--http-auth", "none", "--handshake-timeout", "1", "--idle-timeout", "2"
    ) as server:
        with connect(server.forward_port) as silent:
            # Never answers the HELO: closed after the handshake timeout.
            assert msgpack.unpackb(silent.recv(4096), raw=False)[0] == "HELO"
            assert closed_by_server(silent)
        with connect(server.forward_port) as client, connect(server.forward_port) as busy:
            # Completes the handshake and sends one event, then nothing: closed once idle.
            assert handshake(client, "k3y")[:2] == ["PONG", True]
            assert acked(client)
            # Keeps sending, each time within the idle timeout: served throughout.
            assert handshake(busy, "k3y")[:2] == ["PONG", True]
            for _ in range(6):
                assert acked(busy)
                time.sleep(0.5)
            assert closed_by_server(client)
            assert acked(busy)
        counters = metrics(server)
        assert server.stop() == 0, server.log()
        log = server.log_path.read_text()
    assert "did not complete the handshake in 1 s; closing" in log
    assert "idle for 2 s; closing" in log
    assert timeouts(counters, "forward") >= 2  # the silent and the idle one (busy may go idle after its last ack)


def http_exchange(sock: socket.socket, request: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send ``request``; read one response (status, headers, body) as HTTP/1.1 with Content-Length."""
    sock.sendall(request)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        assert chunk, f"closed before a response: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    while len(body) < int(headers.get("content-length", 0)):
        body += sock.recv(4096)
    return int(lines[0].split()[1]), headers, body


def test_http_header_body_and_idle_timeouts(tmp_path):
    args = ("--header-timeout", "1", "--body-timeout", "1", "--idle-timeout", "2")
    with start(tmp_path, *args) as server:
        port = server.http_port
        with connect(port) as slow_headers, connect(port) as slow_body:
            slow_headers.sendall(b"POST /app.web HTTP/1.1\r\nHost: windvane\r\n")  # never ends its headers
            status, headers, body = http_exchange(
                slow_body,
                b"POST /app.web HTTP/1.1\r\nHost: windvane\r\nContent-Type: application/json\r\n"
                b'Content-Length: 100\r\n\r\n{"message": ',
            )  # never ends its body
            assert (status, json.loads(body)["error"], headers["connection"].lower()) == (408, "body_timeout", "close")
            assert closed_by_server(slow_body)
            assert closed_by_server(slow_headers)
        with connect(port) as idle, connect(port) as kept_alive:
            status, _, body = http_exchange(
                kept_alive,
                b"POST /app.web HTTP/1.1\r\nHost: windvane\r\nContent-Type: application/json\r\n"
                b'Content-Length: 19\r\n\r\n{"message": "kept"}',
            )
            assert (status, json.loads(body)) == (200, {"accepted": 1, "quarantined": 0})
            assert closed_by_server(kept_alive)  # idle after its request
            assert closed_by_server(idle)  # never sent anything
        counters = metrics(server)
        assert server.stop() == 0, server.log()
        log = server.log_path.read_text()
    assert "HTTP request headers from 127.0.0.1:" in log and "not received within 1 s" in log
    assert timeouts(counters, "http") == 4
    assert counters['windvane_http_responses_total{code="408"}'] == 1


def newcomer_served(port: int) -> bool:
    """Whether a new Forward client is served, trying again a bounded number of times while the server
    catches up with connections closed a moment ago."""
    for _ in range(100):
        with connect(port) as newcomer:
            if acked(newcomer):
                return True
        time.sleep(0.05)
    return False


def test_connections_past_the_limit_are_refused_at_once(tmp_path):
    with start(tmp_path, "--max-connections", "3") as server:
        served = [connect(server.forward_port) for _ in range(3)]
        try:
            assert all(acked(sock) for sock in served)
            with connect(server.forward_port) as excess:
                assert closed_by_server(excess)
            served.pop().close()
            assert newcomer_served(server.forward_port)  # once the server has seen the close
            assert all(acked(sock) for sock in served)
        finally:
            for sock in served:
                sock.close()
        http_clients = [connect(server.http_port) for _ in range(3)]
        with connect(server.http_port) as excess:
            assert closed_by_server(excess)
        for sock in http_clients:
            sock.close()
        for _ in range(100):  # /metrics needs one of the three places back
            try:
                counters = metrics(server)
                break
            except OSError:
                time.sleep(0.05)
        assert server.stop() == 0, server.log()
    assert refused(counters, "forward") >= 1 and refused(counters, "http") >= 1


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_listener_survives_running_out_of_file_descriptors(tmp_path):
    with start(tmp_path) as server:
        pid = server.process.pid
        keeper = connect(server.forward_port)
        assert acked(keeper)
        # Room for a handful of connections more, then none.
        _, hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (open_fds(pid) + 6, hard))
        accepted, refused_at = [], None
        try:
            for attempt in range(40):
                sock = connect(server.forward_port)
                if not acked(sock):
                    sock.close()
                    refused_at = attempt
                    break
                accepted.append(sock)
            assert refused_at is not None, "the descriptors never ran out"
            assert 1 <= len(accepted) <= 6
            # More clients than free descriptors: each is told no at once rather than left hanging.
            for _ in range(5):
                with connect(server.forward_port) as sock:
                    assert closed_by_server(sock)
            assert acked(keeper)  # the connections open are served as before
            assert all(acked(sock) for sock in accepted)
            for sock in accepted[:3]:
                sock.close()
            assert newcomer_served(server.forward_port)  # descriptors come back once the server has seen the closes
            assert acked(keeper)
        finally:
            keeper.close()
            for sock in accepted:
                sock.close()
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (hard, hard))
        counters = metrics(server)
        assert server.stop() == 0, server.log()
        log = server.log_path.read_text()
    assert "accept() out of system resource" not in log
    assert log.count("Forward listener: out of file descriptors") == 1  # warned once, no spin of warnings
    assert refused(counters, "forward") >= 6


def test_forward_message_trickled_a_byte_at_a_time_is_cut_off(tmp_path):
    # Without a shared key, two clients each start a message and feed it a byte every 0.3 s: that keeps the
    # idle timeout from ever firing, and with --max-connections 2 would hold every place. The frame
    # timeout closes them; a newcomer is then served.
    with start(tmp_path, "--max-connections", "2", "--idle-timeout", "6", "--frame-timeout", "1") as server:
        tricklers = [connect(server.forward_port) for _ in range(2)]
        try:
            frame = msgpack.packb(["app.slow", [[int(time.time()), {"message": "x" * 100}]]])
            closed = [False, False]
            for byte in range(len(frame)):
                for i, sock in enumerate(tricklers):
                    try:
                        sock.sendall(frame[byte : byte + 1])
                    except (ConnectionResetError, BrokenPipeError):
                        closed[i] = True
                if all(closed):
                    break
                time.sleep(0.3)
            assert all(closed_by_server(sock) for sock in tricklers)
        finally:
            for sock in tricklers:
                sock.close()
        assert newcomer_served(server.forward_port)
        counters = metrics(server)
        assert server.stop() == 0, server.log()
        log = server.log_path.read_text()
    assert log.count("slower than the frame timeout allows") == 2
    assert timeouts(counters, "forward") >= 2
