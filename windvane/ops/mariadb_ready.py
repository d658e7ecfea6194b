"""Waiting until a freshly spawned mariadbd accepts connections, or saying why it does not."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from .errors import ServerStartError, ServerTimeoutError
from .mariadb_logs import with_log
from .mariadb_processes import pid_alive


def wait_ready(
    pid: int, proc: subprocess.Popen[bytes] | None, socket: str, error_log: Path, log_offset: int, deadline: float
) -> None:
    """Return once the mariadbd ``pid`` accepts root on ``socket``.

    ``proc`` is its Popen when this process spawned it (None otherwise);
    errors quote ``error_log`` from ``log_offset`` on. Raises ServerStartError
    if it exits or refuses root, ServerTimeoutError at ``deadline`` (monotonic).
    """
    import mariadb  # the connector; imported late so status/stop work without it

    last_error: Exception | None = None
    while True:
        exited = proc.poll() is not None if proc is not None else not pid_alive(pid)
        if exited:
            raise ServerStartError(with_log(f"mariadbd (pid {pid}) exited during startup", error_log, log_offset))
        if os.path.exists(socket):
            try:
                mariadb.connect(user="root", unix_socket=socket, connect_timeout=5).close()
            except mariadb.Error as exc:
                last_error = exc
                if "Access denied" in str(exc):
                    raise ServerStartError(
                        f"the server at {socket} refused root without a password: {exc}. "
                        "This data directory was not created by windvane"
                    ) from exc
            else:
                return
        if time.monotonic() >= deadline:
            raise ServerTimeoutError(
                with_log(
                    f"mariadbd (pid {pid}) did not accept connections on {socket} in time "
                    f"(last error: {last_error}). A server this start spawned is stopped again; "
                    "if crash recovery of a large redo log is slow, start with a longer timeout",
                    error_log,
                    log_offset,
                )
            )
        time.sleep(0.1)
