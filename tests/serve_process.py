"""``windvane serve`` as a real subprocess, for tests that talk to it over sockets or kill it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from windvane.connectors.address import ListenerConfig

REPO = Path(__file__).resolve().parent.parent
#: Where its listeners listen unless told: the default host, any free port.
ANY_PORT = ListenerConfig(port=0).address


def free_port() -> int:
    """A TCP port that is free on 127.0.0.1 now (and for UDP too, for the Forward heartbeat)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
            try:
                u.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port


class Serve:
    """One ``windvane serve`` process; its log goes to ``log_path``."""

    def __init__(
        self,
        store: str,
        schemas: str | Path,
        log_path: str | Path,
        *args: str,
        forward: str | None = ANY_PORT,
        http: str | None = ANY_PORT,
        timeout: float = 60,
    ):
        self.log_path = Path(log_path)
        command = [
            sys.executable,
            "-c",
            "import windvane; windvane.main()",
            "serve",
            "--store",
            store,
            "--schemas",
            str(schemas),
            "--forward",
            forward or "off",
            "--http",
            http or "off",
            *args,
        ]
        self._log = open(self.log_path, "ab")
        self.process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=self._log, cwd=REPO, env={**os.environ, "PYTHONUNBUFFERED": "1"}
        )
        self.addresses: dict[str, tuple[str, int]] = {}
        self.lines: list[str] = []  # what it printed up to "ready"
        deadline = time.monotonic() + timeout
        while True:
            line = self.process.stdout.readline().decode().strip()
            if line:
                self.lines.append(line)
            if line == "ready":
                break
            if not line and self.process.poll() is not None:
                raise RuntimeError(f"windvane serve exited with {self.process.returncode}:\n{self.log()}")
            if ": " in line:
                name, _, address = line.partition(": ")
                host, _, port = address.split()[0].rpartition(":")  # then "auth: ..."
                self.addresses[name] = (host, int(port))
            if time.monotonic() > deadline:
                self.kill()
                raise TimeoutError(f"windvane serve not ready after {timeout} s:\n{self.log()}")

    @property
    def forward_port(self) -> int:
        return self.addresses["forward"][1]

    @property
    def http_port(self) -> int:
        return self.addresses["http"][1]

    def log(self) -> str:
        """The end of the process's log (it may still be running)."""
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")[-4000:]

    def kill(self) -> None:
        """``kill -9``: no shutdown, no final commit."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)
        self._log.close()

    def stop(self, timeout: float = 60) -> int:
        """SIGTERM, then the exit code (0 after a clean shutdown)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout)
        finally:
            self._log.close()
        return code

    def __enter__(self) -> Serve:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self.process.poll() is None:
            self.kill()
