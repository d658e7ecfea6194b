"""Plain-socket clients for the tests of limits (memory, timeouts, connections) against ``windvane serve``."""

from __future__ import annotations

import socket
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence

import msgpack

from tests.forward_sender import chunk_id, packed_forward
from tests.serve_process import Serve


def metrics(server: Serve) -> dict[str, float]:
    """``GET /metrics`` of ``server`` as ``{'name{labels}': value}``."""
    with urllib.request.urlopen(f"http://127.0.0.1:{server.http_port}/metrics", timeout=30) as reply:
        text = reply.read().decode()
    return {
        line.rpartition(" ")[0]: float(line.rpartition(" ")[2])
        for line in text.splitlines()
        if line and not line.startswith("#")
    }


def read_acks(sock: socket.socket, count: int) -> int:
    """Read acks from ``sock`` until ``count`` came or the server closed it; how many came."""
    acks = 0
    unpacker = msgpack.Unpacker()
    while acks < count:
        data = sock.recv(1 << 16)
        if not data:
            break
        unpacker.feed(data)
        acks += sum(1 for _ in unpacker)
    return acks


def send_and_read_acks(port: int, frames: Sequence[Sequence[bytes]], results: list[int]) -> None:
    """Send every frame (given in pieces) at once, pipelined, then read acks until all came; their count
    goes to ``results``."""
    with socket.create_connection(("127.0.0.1", port), timeout=120) as sock:
        for frame in frames:
            for piece in frame:
                sock.sendall(piece)
        results.append(read_acks(sock, len(frames)))


def acked(sock: socket.socket, tag: str = "app.ok") -> bool:
    """Send one small event with a chunk id on ``sock``: whether it was acknowledged (False: closed by the
    server, before or after it was sent)."""
    try:
        sock.sendall(packed_forward(tag, [(time.time_ns(), {"message": "hello"})], chunk_id()))
        return read_acks(sock, 1) == 1
    except (ConnectionResetError, BrokenPipeError):
        return False


def closed_by_server(sock: socket.socket) -> bool:
    """Read until the server closes ``sock`` (True), or the socket's timeout passes (False)."""
    try:
        while sock.recv(1 << 16):
            pass
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False
    return True


def run_clients(target: Callable[..., None], arguments: Sequence[tuple]) -> None:
    """``target(*args)`` in a thread for each of ``arguments``, all at once; wait for all (at most 3 minutes)."""
    threads = [threading.Thread(target=target, args=args) for args in arguments]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(180)
    assert not any(thread.is_alive() for thread in threads), "clients did not finish"
