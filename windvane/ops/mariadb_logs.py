"""Quoting the end of a MariaDB log in an error message."""

from __future__ import annotations

import os
from pathlib import Path


def _tail(path: Path, lines: int = 15, since: int = 0) -> str:
    """Return the end of the log ``path`` for an error message, or '' if unreadable.

    Only what was written after byte offset ``since`` counts (the log keeps
    earlier runs).  The server's [ERROR] lines come first: mariadbd's reason
    for stopping is often followed by a screenful of shutdown notes.
    """
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(since, f.tell() - 64 * 1024))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    all_lines = text.splitlines()
    errors = [line for line in all_lines if "[ERROR]" in line][-10:]
    tail = all_lines[-lines:]
    if errors and errors != tail[-len(errors) :]:
        return "\n".join([*errors, "...", *tail])
    return "\n".join(tail)


def with_log(message: str, path: Path, since: int = 0) -> str:
    tail = _tail(path, since=since)
    if not tail:
        return message
    return f"{message}\n--- from {path} ---\n{tail}"
