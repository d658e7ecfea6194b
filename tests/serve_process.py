"""``windvane serve`` as a real subprocess, for tests that talk to it over sockets or kill it.

:func:`start_serve` starts one in a test's directory with the schemas it is
given; :func:`event_schema` is the schema of the events the real senders
(fluentd, Fluent Bit and the Fluentd project's clients, :mod:`tests.clients`)
carry: ``seq``, ``msg`` and ``value``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from windvane.connectors.address import ListenerConfig

REPO = Path(__file__).resolve().parent.parent
#: Where its listeners listen unless told: the default host, any free port.
ANY_PORT = ListenerConfig(port=0).address

#: The fields of the senders' events, in order: ``{"seq": i, "msg": text, "value": x}``.
EVENT_FIELDS = (("seq", "int64"), ("msg", "str"), ("value", "float64"))


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
        workers: int | None = 1,
    ):
        self.url = store
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
            # One process unless told: tests that limit, measure or signal the serving process address it
            # by its pid. The workers' own tests start several (None: the default, one per core).
            *(("--workers", str(workers)) if workers and "--workers" not in args else ()),
            *args,
        ]
        self._log = open(self.log_path, "ab")
        self.process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self._log,
            cwd=REPO,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
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
    def host(self) -> str:
        return self.addresses["forward"][0]

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

    def output(self) -> str:
        """What it printed up to "ready", then the end of its log: for failure messages."""
        return "\n".join(self.lines) + "\n--- log ---\n" + self.log()

    def kill(self) -> None:
        """``kill -9``: no shutdown, no final commit."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)
        self._close_files()

    def stop(self, timeout: float = 60) -> int:
        """SIGTERM, then the exit code (0 after a clean shutdown)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            # Killed, so that a server that ignores SIGTERM outlives no test.
            self.process.kill()
            self.process.wait(30)
            raise
        finally:
            self._close_files()
        return code

    def _close_files(self) -> None:
        """The process has ended: close its log and the pipe it printed its addresses on."""
        self._log.close()
        assert self.process.stdout is not None
        self.process.stdout.close()

    def __enter__(self) -> Serve:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self.process.poll() is None:
            self.kill()


def event_schema(*tags: str, extra: str | None = None, required: tuple[str, ...] = ("seq",), dtype: str = "") -> str:
    """A schema (TOML) for the senders' events on ``tags``: `EVENT_FIELDS`, ``required`` ones required.

    ``extra`` says what becomes of undeclared fields (the schema's default
    when None); ``dtype``, when given, types every field alike (LTSV carries
    text only).
    """
    # A JSON array of plain strings is a TOML array too.
    lines = ['kind = "log"', f"tags = {json.dumps(list(tags))}"]
    if extra is not None:
        lines.append(f'extra = "{extra}"')
    for name, field_dtype in EVENT_FIELDS:
        lines += ["", "[[fields]]", f'name = "{name}"', f'dtype = "{dtype or field_dtype}"']
        if name in required:
            lines.append("required = true")
    return "\n".join(lines) + "\n"


def start_serve(
    directory: Path,
    schemas: Mapping[str, str],
    *args: str,
    store: str | None = None,
    forward: str | None = ANY_PORT,
    http: str | None = ANY_PORT,
    timeout: float = 60,
    workers: int | None = 1,
) -> Serve:
    """``windvane serve`` with ``schemas`` (file name: TOML) in ``directory``/schemas, its log in ``directory``/serve.log.

    ``store`` is a SQLite file in ``directory`` unless given. Started again
    with the same arguments (after a kill), it serves the same store and
    schemas and appends to the same log.
    """
    schemas_dir = directory / "schemas"
    schemas_dir.mkdir(exist_ok=True)
    for name, text in schemas.items():
        (schemas_dir / name).write_text(text)
    store = store or f"sqlite:///{directory / 'store.db'}"
    return Serve(
        store, schemas_dir, directory / "serve.log", *args, forward=forward, http=http, timeout=timeout, workers=workers
    )
