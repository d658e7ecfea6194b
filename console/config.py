"""The console's settings and their defaults, held here once (light: the command line reads it without the
server's imports)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ConsoleConfig:
    """How the console runs: its query threads, how long a query may take, how many may wait, how often its
    pages refresh, how many rows the tail and the quarantine show, and how often a serving process's
    rates are sampled, how many downloads run at once, how many of a stream's last commits its history
    slider offers; where ``windvane console`` listens unless told."""

    listen: str = "127.0.0.1:8080"
    threads: int = 2
    timeout: float = 10.0
    waiting: int = 16
    refresh_seconds: float = 1.0
    tail_rows: int = 20
    quarantine_rows: int = 50
    sample_seconds: float = 10.0
    downloads: int = 2
    revisions: int = 200
