"""What the mount's tests share: a real `windvane mount` started and stopped, and Python run in a process of its
own (a fault on a mapping must not stop pytest; a page fault waits for the server, never on pytest's GIL)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

#: The prelude of every reader's code.
PRELUDE = "import json, os, sys\nimport numpy as np\n"


def start_server(url: str, mountpoint: Path, *options: str, log: Path | None = None) -> subprocess.Popen[bytes]:
    """``windvane mount url mountpoint *options``, once its ``head`` is there; its output to ``log`` if given."""
    mountpoint.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "windvane", "mount", url, str(mountpoint), *options]
    with open(log or os.devnull, "wb") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT if log else None)
    deadline = time.monotonic() + 30
    while not (mountpoint / "head").exists():
        shown = log.read_text() if log else ""
        assert proc.poll() is None and time.monotonic() < deadline, f"the mount did not come up {shown}"
        time.sleep(0.05)
    return proc


def unmount(mountpoint: Path | str) -> None:
    """Unmount lazily: a mapping still open does not keep the mount behind."""
    subprocess.run(["umount", "-l", str(mountpoint)], check=False, capture_output=True)


def stop_server(proc: subprocess.Popen[bytes], mountpoint: Path) -> None:
    unmount(mountpoint)
    if proc.poll() is None:
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def python(code: str, *args: str, timeout: float = 300, **env: str) -> subprocess.CompletedProcess[str]:
    """``code`` (after :data:`PRELUDE`) run in a process of its own with ``args`` as sys.argv[1:] and ``env``
    added to the environment."""
    return subprocess.run(
        [sys.executable, "-c", PRELUDE + code, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, **env},
    )
