"""A unix-socket relay in front of a MariaDB server that can cut a connection at its COMMIT.

Real bytes between the real connector and the real server: the relay only
reads the client's packets to recognise ``COMMIT`` and then drops the
connection either before passing it on (the server rolls back) or after the
server has answered it (the server committed, the client never hears so).
That is the network failure that leaves a commit's outcome in doubt.

The relay runs in its own process: the connector may hold the GIL while it
waits for the server, so a relay thread in the client's process could not
forward the answer it waits for.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time

COMMIT = b"\x03COMMIT"  # COM_QUERY "COMMIT", what the connector sends for conn.commit()
#: What a neostore transaction's commit writes (its vote's, its finish's or its one-phase commit's row in
#: ``trans``/``ttrans``), sent as text: the COMMITs that follow them are the ones cut. Others (names
#: bound on a connection of their own, each a commit) pass, whatever their timing.
TRANSACTION_ROWS = (b"INSERT INTO trans ", b"INSERT INTO ttrans ")


class CommitCutter:
    """A relay process ``listen`` -> ``upstream`` (unix socket paths). ``arm(mode)``: cut the next COMMIT.

    ``mode`` "before": the COMMIT never reaches the server; "after": it does,
    and its answer is dropped. ``skip``: let that many COMMITs pass first.
    Only a transaction's COMMITs count (see :data:`TRANSACTION_ROWS`).
    With ``down_for``, connections made in that many seconds after the cut
    are closed at once (the server is unreachable). ``cuts``: how many were cut.
    """

    def __init__(self, listen: str, upstream: str):
        self.listen = listen
        self._process = subprocess.Popen(
            [sys.executable, "-m", "tests.ingest.socket_proxy", listen, upstream],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
        )
        assert self._ask("ping") == "pong"

    def _ask(self, line: str) -> str:
        self._process.stdin.write(line + "\n")
        self._process.stdin.flush()
        return self._process.stdout.readline().strip()

    def arm(self, mode: str, *, skip: int = 0, down_for: float = 0.0) -> None:
        assert mode in ("before", "after")
        assert self._ask(f"arm {mode} {skip} {down_for}") == "ok"

    @property
    def cuts(self) -> int:
        return int(self._ask("cuts"))

    def close(self) -> None:
        self._process.kill()
        self._process.wait()
        if os.path.exists(self.listen):
            os.unlink(self.listen)


class _Relay:
    """Relay ``listen`` -> ``upstream`` (unix socket paths), cutting an armed COMMIT; see CommitCutter."""

    def __init__(self, listen: str, upstream: str):
        self.listen, self.upstream = listen, upstream
        self._armed: str | None = None
        self._skip = 0
        self._down_until = 0.0
        self._down_for = 0.0
        self.cuts = 0
        self._lock = threading.Lock()
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        if os.path.exists(listen):
            os.unlink(listen)
        self._sock.bind(listen)
        self._sock.listen(64)
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def arm(self, mode: str, *, skip: int = 0, down_for: float = 0.0) -> None:
        """Cut the COMMIT after the next ``skip`` ones."""
        assert mode in ("before", "after")
        with self._lock:
            self._armed, self._skip, self._down_for = mode, skip, down_for

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._sock.accept()
            except OSError:
                return
            if time.monotonic() < self._down_until:
                client.close()
                continue
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            server.connect(self.upstream)
            _Pair(self, client, server)

    def take_arm(self) -> str | None:
        """At a COMMIT: the mode to cut it in, or None to let it pass (not armed, or one to skip)."""
        with self._lock:
            if self._armed is None:
                return None
            if self._skip > 0:
                self._skip -= 1
                return None
            mode, self._armed = self._armed, None
            if mode is not None:
                self.cuts += 1
                self._down_until = time.monotonic() + self._down_for
            return mode


class _Pair:
    """One relayed connection: a thread per direction."""

    def __init__(self, cutter: _Relay, client: socket.socket, server: socket.socket):
        self.cutter, self.client, self.server = cutter, client, server
        self._drop_reply = False
        self._writes_transaction = False  # a transaction's row was sent since the last COMMIT
        threading.Thread(target=self._up, daemon=True).start()
        threading.Thread(target=self._down, daemon=True).start()

    def _kill(self) -> None:
        for sock in (self.client, self.server):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()

    def _recv_exact(self, n: int) -> bytes | None:
        data = b""
        while len(data) < n:
            part = self.client.recv(n - len(data))
            if not part:
                return None
            data += part
        return data

    def _up(self) -> None:
        """Client to server, a whole packet at a time so that COMMIT is recognised wherever it falls."""
        try:
            while True:
                header = self._recv_exact(4)
                if header is None:
                    break
                body = self._recv_exact(int.from_bytes(header[:3], "little"))
                if body is None:
                    break
                if any(rows in body for rows in TRANSACTION_ROWS):
                    self._writes_transaction = True
                if body == COMMIT:
                    mode = self.cutter.take_arm() if self._writes_transaction else None
                    self._writes_transaction = False
                    if mode == "before":
                        break
                    if mode == "after":
                        self._drop_reply = True  # set before the server can answer
                self.server.sendall(header + body)
        except OSError:
            pass
        if not self._drop_reply:
            self._kill()

    def _down(self) -> None:
        try:
            while True:
                data = self.server.recv(1 << 16)
                if not data:
                    break
                if self._drop_reply:
                    break  # the server's answer to the COMMIT: the client never gets it
                self.client.sendall(data)
        except OSError:
            pass
        self._kill()


def _serve(listen: str, upstream: str) -> None:
    """The relay process: answers control lines on stdin until it is killed or stdin closes."""
    relay = _Relay(listen, upstream)
    for line in sys.stdin:
        words = line.split()
        if words == ["ping"]:
            answer = "pong"
        elif words[0] == "arm":
            relay.arm(words[1], skip=int(words[2]), down_for=float(words[3]))
            answer = "ok"
        else:
            answer = str(relay.cuts)
        print(answer, flush=True)


if __name__ == "__main__":
    _serve(sys.argv[1], sys.argv[2])
