"""A test hook of the commands that commit: stop before a given commit, its writes made, to be killed there."""

from __future__ import annotations

import os
import sys
import time


def pause_if_asked(variable: str, commit_number: int, what: str) -> None:
    """If the environment variable ``variable`` is ``commit_number``, say ``<what>: paused before commit N``
    on stderr and wait forever (for the test to kill the process with the commit's writes in flight)."""
    wanted = os.environ.get(variable)
    if wanted and int(wanted) == commit_number:
        print(f"{what}: paused before commit {commit_number}", file=sys.stderr, flush=True)
        while True:
            time.sleep(3600)
