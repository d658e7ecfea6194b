"""Named points of the commands that commit, where a kill -9 must lose nothing committed and leave nothing half-done.

The commands call :func:`reached` at each of them; it does nothing. A test
that proves a command's durability starts it in a process whose ``reached``
stops at the point it names (tests/paused_process.py), kills it there and
checks the store. Callers look ``reached`` up on this module at each call
(``checkpoints.reached(...)``) so that such a replacement takes effect.

Checkpoints:

- ``import.before_commit``: ``windvane import`` and ``windvane tail``, a
  commit's rows and position written into its transaction, not committed.
- ``replay.before_commit``: ``windvane quarantine replay``, every write
  made, not committed.
- ``export.before_rename``: ``windvane export``, a file written under its
  temporary name, not yet renamed into place.
- ``export.before_done``: ``windvane export --job``, a part in place, not
  yet recorded as done in the job.
"""

from __future__ import annotations

from typing import Any


def reached(name: str, **facts: Any) -> None:
    """The command is at checkpoint ``name``; ``facts`` say where (the stream, the file...). Does nothing."""
