"""A private Mosquitto broker for tests: its own port, configuration, persistence directory and log.

:class:`Mosquitto` runs the system's ``mosquitto`` (Debian's package) on a
free local port with persistence on, so that a subscriber's session and
its unacknowledged QoS 1 messages survive a broker restart, and with no
limit on the messages queued per client (mosquitto's default drops a
session's QoS 1 messages beyond 1,000, which would lose what a publisher
sends while the subscriber is down). ``stop()`` shuts it down cleanly (it
writes its persistence file); ``start()`` again on the same port resumes it.
"""

from __future__ import annotations

import getpass
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from tests.serve_process import free_port

MOSQUITTO = shutil.which("mosquitto") or "/usr/sbin/mosquitto"

CONFIG = """\
listener {port} 127.0.0.1
allow_anonymous true
# When run as root, mosquitto changes to this user; the current user keeps the directory writable.
user {user}
persistence true
persistence_location {directory}/
persistence_file mosquitto.db
# Large: the default (1000) silently drops a stopped subscriber's QoS 1 messages beyond it.
max_queued_messages 1000000
log_dest file {directory}/mosquitto.log
log_type error
log_type warning
log_type notice
log_type information
connection_messages true
"""


class Mosquitto:
    """A mosquitto process on 127.0.0.1:``port`` keeping its state in ``directory``."""

    def __init__(self, directory: str | Path, port: int | None = None):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.config_path = self.directory / "mosquitto.conf"
        self.config_path.write_text(CONFIG.format(port=self.port, user=getpass.getuser(), directory=self.directory))
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"mqtt://127.0.0.1:{self.port}"

    def start(self, timeout: float = 20) -> Mosquitto:
        """Start the broker and wait until it accepts connections."""
        self.process = subprocess.Popen(
            [MOSQUITTO, "-c", str(self.config_path)],
            stdout=subprocess.DEVNULL,
            stderr=open(self.directory / "stderr.log", "ab"),
        )
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"mosquitto exited with {self.process.returncode}:\n{self.log()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
            except OSError:
                if time.monotonic() > deadline:
                    self.kill()
                    raise TimeoutError(f"mosquitto not listening after {timeout} s:\n{self.log()}") from None
                time.sleep(0.05)
            else:
                return self

    def stop(self, timeout: float = 30) -> None:
        """SIGTERM: mosquitto saves its sessions and queued messages, then exits."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(timeout)

    def kill(self) -> None:
        """``kill -9``: what was not saved yet is lost by the broker."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(30)

    def log(self) -> str:
        """The end of the broker's log."""
        text = ""
        for name in ("stderr.log", "mosquitto.log"):
            path = self.directory / name
            if path.exists():
                text += path.read_text(errors="replace")[-3000:]
        return text

    def __enter__(self) -> Mosquitto:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.kill()
