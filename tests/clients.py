"""The Fluentd project's client libraries, as programs the acceptance tests run.

Every driver sends COUNT events to a Forward server, event ``i`` being
``{"seq": i, "msg": event_msg(i), "value": i * 0.5}`` at
``event_time_ns(i)``, waits for every ack it asked for, prints a one-line JSON
summary and exits 0 only if all events were sent (and acknowledged).

- ``python``: PyPI ``fluent-logger`` (``fluent.sender``), run by this module
  (``python -m tests.clients python HOST PORT TAG COUNT Message``).
- ``fluent-logger``: npm ``fluent-logger`` 3.4, ``tests/clients/node/send-fluent-logger.js``.
- ``fluent-org``: npm ``@fluent-org/logger`` 1.0, ``tests/clients/node/send-fluent-org.js``.
- ``go``: Go ``github.com/fluent/fluent-logger-golang`` 1.10, built from
  ``tests/clients/go`` as ``windvane-go-client`` next to the Python interpreter.

The Node packages and the Go programs are built by ``scripts/test install``
(see tests/clients/README.md). Run outside CI, a missing or stale build is
done here on first use by ``scripts/test clients``, if npm or go is
installed; a missing toolchain skips the tests that need it. With ``CI``
set, both are failures: CI never skips a client.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CLIENTS = REPO / "tests" / "clients"
NODE_DIR = CLIENTS / "node"
GO_DIR = CLIENTS / "go"
# Next to the interpreter (the venv's bin/), where scripts/test builds it.
GO_CLIENT = Path(sys.executable).parent / "windvane-go-client"
LOGFMT_DIR = CLIENTS / "logfmt"
LOGFMT_ORACLE = Path(sys.executable).parent / "windvane-logfmt-oracle"

BASE_SECONDS = 1_700_000_000
STEP_NS = 1_000_123  # event i is at BASE_SECONDS s + i * 1.000123 ms

TEST_SCRIPT = REPO / "scripts" / "test"
#: The virtual environment the script builds the clients into: this interpreter's.
VENV = Path(sys.executable).parent.parent
# Held while building: test workers in parallel would otherwise build the same client at once.
BUILD_LOCK = VENV / ".windvane-clients.lock"
#: scripts/test's exit code when the toolchain a client needs (npm, go) is missing.
NO_TOOLCHAIN = 3


# -- the events ----------------------------------------------------------------


def event_msg(i: int) -> str:
    """Event ``i``'s text: ASCII, Latin-1, CJK and a symbol, then 0-49 filler bytes."""
    return f"event {i:06d} Grüße Köln température °C 温度センサー ✓ " + "xyz"[i % 3] * (i % 50)


def event_time_ns(i: int) -> int:
    """Event ``i``'s time, nanoseconds since the epoch."""
    return BASE_SECONDS * 10**9 + i * STEP_NS


def expected_events(count: int, time_unit_ns: int = 1) -> dict:
    """The columns a stream must hold after ``count`` events.

    ``time_unit_ns`` is the precision the client sends time with: 1 for
    EventTime, 10**9 for clients that send integer seconds.
    """
    import numpy as np

    seq = np.arange(count, dtype=np.int64)
    times = np.array([event_time_ns(i) for i in range(count)], dtype=np.int64)
    return {
        "seq": seq,
        "msg": [event_msg(i) for i in range(count)],
        "value": seq.astype(np.float64) * 0.5,
        "time": times // time_unit_ns * time_unit_ns,
    }


# -- finding (and, outside CI, building) the clients ---------------------------


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def unavailable(reason: str):
    """Skip with ``reason``; in CI, fail instead (CI never skips a client)."""
    if in_ci():
        pytest.fail(f"{reason} (CI is set: `scripts/test install` must have installed and built every client)")
    pytest.skip(reason)


def _script_clients(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(TEST_SCRIPT), "clients", *args],
        env={**os.environ, "VENV": str(VENV)},
        capture_output=True,
        text=True,
        timeout=600,
    )


def built(client: str) -> None:
    """Make sure ``client`` (``node``, ``go`` or ``logfmt``) is built and newer than its sources.

    Outside CI ``scripts/test clients`` builds it if needed; a missing
    toolchain skips. In CI nothing is built: a missing or stale client fails.
    """
    if in_ci():
        proc = _script_clients("--check", client)
        if proc.returncode != 0:
            unavailable(proc.stderr.strip() or f"the {client} client is not built")
        return
    with open(BUILD_LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        proc = _script_clients(client)
    if proc.returncode == NO_TOOLCHAIN:
        unavailable(proc.stderr.strip().splitlines()[-1].removeprefix("scripts/test: "))
    if proc.returncode != 0:
        pytest.fail(
            f"building the {client} client failed (scripts/test clients {client}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )


def node_binary() -> str:
    """The ``node`` executable, with the Node clients installed (built here if needed)."""
    node = shutil.which("node")
    if node is None:
        unavailable("node not installed")
    built("node")
    return node


def go_client() -> str:
    """The built Go driver (built here if needed)."""
    return go_program(GO_DIR, GO_CLIENT, "the Go client")


def go_program(source: Path, program: Path, what: str) -> str:
    """``program``, built from the Go module in ``source`` (built here if missing or older than its sources)."""
    built(source.name)
    if not program.exists():
        pytest.fail(f"scripts/test clients {source.name} built no {program} ({what})")
    return str(program)


def driver_command(client: str) -> list[str]:
    """The command that runs ``client``'s driver, before its arguments."""
    if client == "python":
        return [sys.executable, "-m", "tests.clients", "python"]
    if client == "fluent-logger":
        return [node_binary(), str(NODE_DIR / "send-fluent-logger.js")]
    if client == "fluent-org":
        return [node_binary(), str(NODE_DIR / "send-fluent-org.js")]
    if client == "go":
        return [go_client()]
    raise ValueError(f"unknown client {client!r}")


# -- running them ----------------------------------------------------------------


@dataclass
class Run:
    """One driver run: its exit code, parsed summary and output."""

    returncode: int
    summary: dict | None
    stdout: str
    stderr: str
    seconds: float
    argv: list[str] = field(default_factory=list)

    def describe(self) -> str:
        return (
            f"{' '.join(self.argv)}\nexit {self.returncode} after {self.seconds:.1f} s\n"
            f"stdout: {self.stdout[-2000:]}\nstderr: {self.stderr[-4000:]}"
        )


def run_client(
    client: str,
    host: str,
    port: int,
    tag: str,
    count: int,
    mode: str,
    *,
    ack: bool = False,
    shared_key: str | None = None,
    hostname: str | None = None,
    username: str | None = None,
    password: str | None = None,
    tls_ca: str | os.PathLike | None = None,
    batch: int | None = None,
    ack_timeout_ms: int | None = None,
    timeout: float = 120,
) -> Run:
    """Run ``client``'s driver to completion; never raises on a failed send."""
    argv = [*driver_command(client), host, str(port), tag, str(count), mode]
    if ack:
        argv.append("--ack")
    if shared_key is not None:
        argv += ["--shared-key", shared_key]
    if hostname is not None:
        argv += ["--hostname", hostname]
    if username is not None:
        argv += ["--username", username]
    if password is not None:
        argv += ["--password", password]
    if tls_ca is not None:
        argv += ["--tls-ca", str(tls_ca)]
    if batch is not None:
        argv += ["--batch", str(batch)]
    # fluent-logger-golang v1.9.0 (the version Debian 12's Go can build) has no ack
    # deadline of its own: its driver is bounded by --timeout alone.
    if ack_timeout_ms is not None and client != "go":
        argv += ["--ack-timeout", str(ack_timeout_ms)]
    argv += ["--timeout", str(timeout)]
    started = time.monotonic()
    try:
        proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=timeout + 30)
        returncode, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as exc:
        returncode = -9
        stdout = (exc.stdout or b"").decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        stderr = (exc.stderr or b"").decode(errors="replace") if isinstance(exc.stderr, bytes) else (exc.stderr or "")
    seconds = time.monotonic() - started
    summary = None
    for line in reversed(stdout.splitlines()):
        if line.startswith("{"):
            try:
                summary = json.loads(line)
            except ValueError:
                pass
            break
    return Run(returncode, summary, stdout, stderr, seconds, argv)


# -- the Python driver ---------------------------------------------------------


def _python_main(argv: list[str]) -> int:
    """PyPI fluent-logger: Message mode, EventTime with nanoseconds, no ack (it has none)."""
    import argparse

    from fluent import sender

    parser = argparse.ArgumentParser(prog="python -m tests.clients python")
    parser.add_argument("host")
    parser.add_argument("port", type=int)
    parser.add_argument("tag")
    parser.add_argument("count", type=int)
    parser.add_argument("mode", choices=["Message"])
    parser.add_argument("--timeout", type=float, default=120)
    args = parser.parse_args(argv)

    from importlib.metadata import version

    summary = {
        "client": "fluent-logger (PyPI)",
        "version": version("fluent-logger"),
        "mode": args.mode,
        "tag": args.tag,
        "count": args.count,
        "ack": False,
        "tls": False,
        "sent": 0,
        "acked": None,
        "seconds": None,
        "errors": [],
    }
    started = time.monotonic()
    logger = sender.FluentSender(
        None,
        host=args.host,
        port=args.port,
        timeout=args.timeout,
        nanosecond_precision=True,
        buffer_overflow_handler=lambda pending: summary["errors"].append(f"{len(pending)} bytes never sent"),
    )
    for i in range(args.count):
        record = {"seq": i, "msg": event_msg(i), "value": i * 0.5}
        if not logger.emit_with_time(args.tag, sender.EventTime.from_unix_nano(event_time_ns(i)), record):
            summary["errors"].append(repr(logger.last_error))
            break
        summary["sent"] += 1
    logger.close()  # sends what is still buffered, or reports it to the overflow handler
    summary["seconds"] = time.monotonic() - started
    summary["ok"] = not summary["errors"] and summary["sent"] == args.count
    print(json.dumps(summary), flush=True)
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] != "python":
        sys.exit("usage: python -m tests.clients python HOST PORT TAG COUNT Message")
    sys.exit(_python_main(sys.argv[2:]))
