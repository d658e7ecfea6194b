"""A real S3 server for the suite: versitygw over a private directory, on a private port.

versitygw (Apache-2.0) is an S3 gateway that keeps objects as plain files
under ``<dir>/<bucket>/<key>``. It comes from ``../shared/vendor/`` beside the
repository (see its README), or from ``WINDVANE_VERSITYGW``. Outside CI a
missing binary skips the test with that reason; in CI it fails.

The suite's code talks to it only through the S3 API, as it would to AWS
S3, MinIO or Ceph; a test reaches into the directory only to do what a
failing disk or an operator would (corrupt or remove an object).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path

from tests.clients import unavailable
from tests.fluent_programs import VENDOR

ACCESS_KEY = "windvane-test"
SECRET_KEY = "windvane-test-secret"
REGION = "us-east-1"


def versitygw_binary() -> Path:
    """The versitygw executable; skips (fails in CI) where it is missing."""
    where = os.environ.get("WINDVANE_VERSITYGW")
    path = Path(where) if where else VENDOR / "versitygw-1.8.0" / "bin" / "versitygw"
    if not path.exists():
        unavailable(
            f"versitygw not found at {path} (set WINDVANE_VERSITYGW, or build it: "
            "go install github.com/versity/versitygw/cmd/versitygw@v1.8.0)"
        )
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class S3Server:
    """One versitygw process serving ``root``; :meth:`stop` and :meth:`start` again keep its port and data."""

    def __init__(self, root: Path, port: int | None = None):
        self.root = root
        self.port = port or _free_port()
        self.process: subprocess.Popen[bytes] | None = None
        root.mkdir(parents=True, exist_ok=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        """The standard AWS variables a client of this server needs (no endpoint: store URLs name it)."""
        return {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_REGION": REGION}

    def start(self, timeout: float = 20.0) -> None:
        env = dict(os.environ, ROOT_ACCESS_KEY=ACCESS_KEY, ROOT_SECRET_KEY=SECRET_KEY)
        log = open(self.root.parent / f"versitygw-{self.port}.log", "ab")  # the process keeps it open
        self.process = subprocess.Popen(
            [str(versitygw_binary()), "--port", f"127.0.0.1:{self.port}", "posix", str(self.root)],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"versitygw exited with {self.process.returncode}; see its log in {self.root.parent}"
                )
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
            except OSError:
                time.sleep(0.05)
            else:
                return
        raise RuntimeError(f"versitygw did not listen on port {self.port} within {timeout} s")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """Stop the server (``SIGKILL`` to kill it) and wait until it is gone."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def new_bucket(self, prefix: str = "t") -> str:
        """A fresh, empty bucket's name (versitygw's posix backend: a bucket is a directory)."""
        name = f"{prefix}-{uuid.uuid4().hex[:12]}"
        (self.root / name).mkdir()
        return name

    def objects(self, bucket: str) -> list[Path]:
        """The files of a bucket's objects (its own bookkeeping left out)."""
        return sorted(p for p in (self.root / bucket).rglob("*") if p.is_file() and ".sgwtmp" not in p.parts)

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)
