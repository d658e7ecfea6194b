"""A fault-injecting HTTP relay between an S3 client and the real S3 server, for the blob tier's tests.

It is a real TCP server on a private port: each client connection gets its
own upstream connection, and each HTTP/1.1 request is read whole, passed on
and its answer passed back, so the relay sees what the server saw. It can

- count requests by method and the bytes of the answers' bodies (what the
  server really sent, not what the client says it asked for),
- answer the next N requests itself with ``503 SlowDown`` and the XML error
  body AWS S3 sends, without passing them on,
- stall: hold requests (of one method, or all) until :meth:`release`.

It never changes a request or an answer it passes on. Nothing here mocks the
server: every request it does not refuse reaches versitygw.
"""

from __future__ import annotations

import socket
import threading
from collections import Counter
from dataclasses import dataclass, field

SLOW_DOWN = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n'
    b"<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message>"
    b"<RequestId>relay</RequestId><HostId>relay</HostId></Error>"
)


@dataclass
class Seen:
    """What the relay saw: requests passed on and answered by it, by method; answer body bytes by method."""

    requests: Counter[str] = field(default_factory=Counter)
    refused: Counter[str] = field(default_factory=Counter)
    body_bytes: Counter[str] = field(default_factory=Counter)
    ranges: list[str] = field(default_factory=list)
    peers: list[tuple[str, int]] = field(default_factory=list)
    #: Requests passed on, by the process id of the client that sent them (only with ``track_pids``).
    by_pid: dict[int, Counter[str]] = field(default_factory=dict)


class S3Relay:
    """A relay on ``127.0.0.1:<port>`` to ``upstream_port``; use :attr:`endpoint` as a store URL's endpoint."""

    def __init__(self, upstream_port: int, *, track_pids: bool = False):
        self.upstream = ("127.0.0.1", upstream_port)
        self.track_pids = track_pids
        self.seen = Seen()
        self._lock = threading.Lock()
        self._fail_next = 0
        self._stall: str | None = None  # a method, or "*" for every request
        self._released = threading.Event()
        self._released.set()
        self.stalled = threading.Event()  # set once a request is being held
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._closed = False
        threading.Thread(target=self._accept, daemon=True, name="s3-relay").start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def reset(self) -> Seen:
        """Start counting afresh; what was seen so far."""
        with self._lock:
            seen, self.seen = self.seen, Seen()
        return seen

    def fail_next(self, count: int) -> None:
        """Answer the next ``count`` requests with 503 SlowDown."""
        with self._lock:
            self._fail_next = count

    def stall(self, method: str = "*") -> None:
        """Hold requests of ``method`` ("*": all) before passing them on, until :meth:`release`."""
        self.stalled.clear()
        self._released.clear()
        self._stall = method

    def release(self) -> None:
        self._stall = None
        self._released.set()

    def close(self) -> None:
        self._closed = True
        self.release()
        self._listener.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, peer = self._listener.accept()
            except OSError:
                return
            with self._lock:
                self.seen.peers.append(peer)
            pid = _pid_of(peer) if self.track_pids else None
            threading.Thread(target=self._serve, args=(client, pid), daemon=True).start()

    def _serve(self, client: socket.socket, pid: int | None = None) -> None:
        upstream: socket.socket | None = None
        reader = client.makefile("rb")
        try:
            while True:
                request = _read_message(reader, response_to=None)
                if request is None:
                    return
                method = request.start.split(b" ", 1)[0].decode()
                if self._refuse(method):
                    client.sendall(_slow_down())
                    continue
                if self._stall in ("*", method):
                    self.stalled.set()
                    self._released.wait()
                if upstream is None:
                    upstream = socket.create_connection(self.upstream)
                    upstream_reader = upstream.makefile("rb")
                upstream.sendall(request.raw)
                response = _read_message(upstream_reader, response_to=method)
                if response is None:
                    return
                with self._lock:
                    self.seen.requests[method] += 1
                    self.seen.body_bytes[method] += response.body_size
                    if pid is not None:
                        self.seen.by_pid.setdefault(pid, Counter())[method] += 1
                    if request.headers.get(b"range"):
                        self.seen.ranges.append(request.headers[b"range"].decode())
                client.sendall(response.raw)
        except OSError:
            return  # the server went away: the client sees its connection closed, as without a relay
        finally:
            client.close()
            if upstream is not None:
                upstream.close()

    def _refuse(self, method: str) -> bool:
        with self._lock:
            if self._fail_next <= 0:
                return False
            self._fail_next -= 1
            self.seen.refused[method] += 1
            return True


@dataclass
class _Message:
    start: bytes
    headers: dict[bytes, bytes]
    raw: bytes
    body_size: int


def _read_message(reader, response_to: str | None) -> _Message | None:
    """One HTTP/1.1 request (``response_to`` None) or the answer to a ``response_to`` request; None at EOF."""
    start = reader.readline()
    if not start:
        return None
    lines = [start]
    headers: dict[bytes, bytes] = {}
    while True:
        line = reader.readline()
        if not line:
            return None
        lines.append(line)
        if line in (b"\r\n", b"\n"):
            break
        name, _, value = line.partition(b":")
        headers[name.strip().lower()] = value.strip()
    body = b""
    status = int(start.split(b" ")[1]) if response_to is not None else 0
    bodiless = response_to == "HEAD" or status in (204, 304) or 100 <= status < 200
    if not bodiless and headers.get(b"transfer-encoding", b"").lower() == b"chunked":
        body = _read_chunked(reader)
        size = _chunked_payload(body)
    elif not bodiless and b"content-length" in headers:
        body = reader.read(int(headers[b"content-length"]))
        size = len(body)
    else:
        size = 0
    return _Message(start, headers, b"".join(lines) + body, size)


def _read_chunked(reader) -> bytes:
    out = []
    while True:
        line = reader.readline()
        out.append(line)
        size = int(line.split(b";")[0].strip(), 16)
        if size == 0:
            while True:  # trailers, then the blank line
                trailer = reader.readline()
                out.append(trailer)
                if trailer in (b"\r\n", b"\n", b""):
                    return b"".join(out)
        out.append(reader.read(size + 2))


def _chunked_payload(raw: bytes) -> int:
    total, rest = 0, raw
    while rest:
        line, _, rest = rest.partition(b"\r\n")
        size = int(line.split(b";")[0].strip() or b"0", 16)
        if size == 0:
            break
        total += size
        rest = rest[size + 2 :]
    return total


def _pid_of(peer: tuple[str, int]) -> int | None:
    """The process whose socket is the other end of a connection from ``peer`` (same machine, same user)."""
    import psutil

    for conn in psutil.net_connections(kind="tcp4"):
        if conn.laddr and (conn.laddr.ip, conn.laddr.port) == tuple(peer[:2]) and conn.pid is not None:
            return int(conn.pid)
    return None


def _slow_down() -> bytes:
    return (
        b"HTTP/1.1 503 Slow Down\r\n"
        b"Content-Type: application/xml\r\n"
        b"x-amz-request-id: relay\r\n" + f"Content-Length: {len(SLOW_DOWN)}\r\n".encode() + b"\r\n" + SLOW_DOWN
    )
