"""`windvane` as a process stopped at a checkpoint (:mod:`ingest.checkpoints`), for the tests that kill -9 it there.

Run from the repository root as ``python -m tests.paused_process CHECKPOINT N ARGS...``:
it runs ``windvane ARGS`` with :func:`ingest.checkpoints.reached` replaced,
so that the N-th time the command reaches ``CHECKPOINT`` it says
``paused at CHECKPOINT`` on stderr and waits there, for the test to kill
it. (No ``test_`` prefix: pytest must not collect it.) :func:`paused`
starts one and returns it once it waits.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from tests.serve_process import REPO

PAUSED = b"paused at "


def pausing_at(checkpoint: str, times: int) -> Callable[..., None]:
    """A ``reached`` that waits forever the ``times``-th time it is called with ``checkpoint``."""
    seen = 0

    def reached(name: str, **facts: Any) -> None:
        nonlocal seen
        if name != checkpoint:
            return
        seen += 1
        if seen == times:
            print(f"{PAUSED.decode()}{name} {facts}", file=sys.stderr, flush=True)
            while True:
                time.sleep(3600)

    return reached


def kill(process: subprocess.Popen) -> None:
    """SIGKILL ``process`` where it waits, then reap it and close its pipes."""
    process.kill()
    process.communicate(timeout=30)


def paused(checkpoint: str, *args: str, times: int = 1) -> subprocess.Popen:
    """``windvane ARGS`` stopped the ``times``-th time it reaches ``checkpoint``; AssertionError if it ends first."""
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.paused_process", checkpoint, str(times), *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    said = []
    for line in process.stderr:  # ends if the process does
        if line.startswith(PAUSED):
            return process
        said.append(line)
    process.wait(30)
    out = process.stdout.read()
    process.stdout.close()
    process.stderr.close()
    raise AssertionError(
        f"windvane {' '.join(args)} ended ({process.returncode}) before reaching {checkpoint} "
        f"#{times}: {out!r} {b''.join(said)!r}"
    )


def main() -> None:
    import signal

    from windvane.ingest import checkpoints

    # The tests send SIGINT as a terminal's Ctrl-C does; a suite started as a shell's background job
    # inherits SIGINT ignored, which Python keeps, so the default handler is put back.
    signal.signal(signal.SIGINT, signal.default_int_handler)

    checkpoint, times, *args = sys.argv[1:]
    checkpoints.reached = pausing_at(checkpoint, int(times))
    sys.argv = ["windvane", *args]
    import windvane

    windvane.main()


if __name__ == "__main__":
    main()
