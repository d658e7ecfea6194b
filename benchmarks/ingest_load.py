"""Load for the ingestion benchmarks: pre-encoded Forward chunks and HTTP bodies, sent over loopback.

The payloads are built before the clock starts, so the senders only move
bytes and wait for acknowledgements: what is measured is ``windvane serve``
(decode, validate, group commit, durable ack), not the load generator.
Each chunk's send-to-ack time is recorded for the latency percentiles.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import socket
import struct
import threading
import time
from dataclasses import dataclass, field

import msgpack
import numpy as np

T0 = 1_760_000_000_000_000_000
HOSTS = [f"web-{i:02d}" for i in range(16)]
PATHS = [
    "/api/v1/turbines/R80736/scada",
    "/api/v1/turbines/R80711/vibration",
    "/health",
    "/api/v1/streams",
    "/static/app.js",
    "/login",
]
LEVELS = ["info", "info", "info", "warn", "error", "debug"]


#: The schema of :func:`log_record` (the tag ``bench.logs``).
LOG_SCHEMA = """
kind = "log"
tags = ["bench.logs"]
[[fields]]
name = "host"
dtype = "str"
[[fields]]
name = "level"
dtype = "str"
[[fields]]
name = "message"
dtype = "str"
[[fields]]
name = "status"
dtype = "int32"
fill = -1
[[fields]]
name = "latency_ms"
dtype = "float32"
[[fields]]
name = "request_id"
dtype = "str"
"""


def log_record(i: int) -> dict:
    """A structured access-log record of about 200 bytes as msgpack."""
    path = PATHS[i % len(PATHS)]
    status = 200 if i % 17 else 503
    return {
        "host": HOSTS[i % len(HOSTS)],
        "level": LEVELS[i % len(LEVELS)],
        "message": f"GET {path}?page={i % 97} HTTP/1.1 {status} {1000 + (i * 7919) % 50000} bytes user-agent=fluent-bit/5.1",
        "status": status,
        "latency_ms": round(((i * 2654435761) % 100000) / 1000, 3),
        "request_id": f"{i:016x}",
    }


def event_time(ns: int) -> msgpack.ExtType:
    return msgpack.ExtType(0, struct.pack(">II", ns // 1_000_000_000, ns % 1_000_000_000))


def forward_chunk(tag: str, first: int, count: int, record=log_record) -> tuple[bytes, bytes]:
    """``(chunk id, PackedForward message)`` as fluentd's out_forward sends it (str32 entries)."""
    cid = base64.encodebytes(os.urandom(16))
    packer = msgpack.Packer(use_bin_type=True)
    entries = b"".join(packer.pack([event_time(T0 + i * 1000), record(i)]) for i in range(first, first + count))
    message = (
        b"\x93"
        + packer.pack(tag)
        + b"\xdb"
        + struct.pack(">I", len(entries))
        + entries
        + packer.pack({"size": count, "chunk": cid.decode()})
    )
    return cid, message


def vibration_record(i: int, samples: int, channels: int) -> dict:
    rng = np.random.default_rng(i)
    t = (np.arange(samples) + i * samples) / 25600.0
    block = np.stack(
        [np.sin(2 * np.pi * (50 + 10 * c) * t) + 0.01 * rng.standard_normal(samples) for c in range(channels)], axis=1
    ).astype("<f4")
    return {"samples": block.tobytes()}


def ndjson_body(first: int, count: int) -> bytes:
    """An NDJSON body as fluentd's out_http sends by default (records only, one per line), with a time field."""
    lines = []
    for i in range(first, first + count):
        record = log_record(i)
        record["time"] = (T0 + i * 1000) / 1e9
        lines.append(json.dumps(record, separators=(",", ":")))
    return ("\n".join(lines) + "\n").encode()


def _timed_threads(shares: list, run, start: threading.Barrier) -> float:
    """Run ``run(share)`` in a thread per share, released together by ``start``; the seconds until all end."""
    threads = [threading.Thread(target=run, args=(share,)) for share in shares]
    for t in threads:
        t.start()
    start.wait()
    began = time.perf_counter()
    for t in threads:
        t.join()
    return time.perf_counter() - began


@dataclass
class LoadResult:
    events: int
    seconds: float
    latencies: list[float] = field(default_factory=list)  # send-to-ack seconds per chunk/request
    errors: list[str] = field(default_factory=list)

    def percentile(self, q: float) -> float:
        return float(np.percentile(self.latencies, q)) if self.latencies else float("nan")


def forward_load(
    port: int, chunks: list[tuple[bytes, bytes]], events_per_chunk: int, *, connections: int = 4, window: int = 2
) -> LoadResult:
    """Send ``chunks`` over ``connections`` sockets, ``window`` unacknowledged chunks each; wait for every ack."""
    shares = [s for s in (chunks[i::connections] for i in range(connections)) if s]
    latencies: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(len(shares) + 1)

    def run(share: list[tuple[bytes, bytes]]) -> None:
        sock = socket.create_connection(("127.0.0.1", port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        unpacker = msgpack.Unpacker(raw=False)
        sent: dict[bytes, float] = {}
        mine: list[float] = []
        start.wait()
        try:
            queue = list(share)
            while queue or sent:
                while queue and len(sent) < window:
                    cid, message = queue.pop(0)
                    sent[cid] = time.perf_counter()
                    sock.sendall(message)
                unpacker.feed(receive(sock))
                now = time.perf_counter()
                for reply in unpacker:
                    mine.append(now - sent.pop(reply["ack"].encode()))
        except Exception as exc:  # noqa: BLE001 - reported with the result
            errors.append(repr(exc))
        finally:
            sock.close()
            with lock:
                latencies.extend(mine)

    seconds = _timed_threads(shares, run, start)
    return LoadResult(len(latencies) * events_per_chunk, seconds, latencies, errors)


def receive(sock: socket.socket) -> bytes:
    """The next bytes the server sends; ConnectionError when it closes the connection."""
    data = sock.recv(65536)
    if not data:
        raise ConnectionError("server closed the connection")
    return data


def post_ndjson(conn: http.client.HTTPConnection, path: str, body: bytes) -> None:
    """POST ``body`` as NDJSON; RuntimeError unless the answer is 200."""
    conn.request("POST", path, body, {"Content-Type": "application/x-ndjson"})
    response = conn.getresponse()
    answer = response.read()
    if response.status != 200:
        raise RuntimeError(f"HTTP {response.status}: {answer[:200]!r}")


def http_load(port: int, path: str, bodies: list[bytes], events_per_body: int, *, connections: int = 4) -> LoadResult:
    """POST ``bodies`` (NDJSON) over ``connections`` keep-alive connections; every answer must be 200."""
    shares = [s for s in (bodies[i::connections] for i in range(connections)) if s]
    latencies: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(len(shares) + 1)

    def run(share: list[bytes]) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        mine = []
        start.wait()
        try:
            for body in share:
                sent = time.perf_counter()
                post_ndjson(conn, path, body)
                mine.append(time.perf_counter() - sent)
        except Exception as exc:  # noqa: BLE001 - reported with the result
            errors.append(repr(exc))
        finally:
            conn.close()
            with lock:
                latencies.extend(mine)

    seconds = _timed_threads(shares, run, start)
    return LoadResult(len(latencies) * events_per_body, seconds, latencies, errors)
