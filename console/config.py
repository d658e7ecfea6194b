"""The console's settings and their defaults, held here once (light: the command line reads it without the
server's imports)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ConsoleConfig:
    """How the console runs."""

    listen: str = "127.0.0.1:8080"  # where `windvane console` listens unless told: this machine only
    threads: int = 2  # the query threads
    timeout: float = 10.0  # seconds a query may take before its page is answered 504
    waiting: int = 16  # queries that may wait for a thread before pages are answered 503
    refresh_seconds: float = 1.0  # how often the pages' live parts refresh
    fresh_seconds: float = 2.0  # how long an answer is given again to whoever asks the same, at least
    cost_factor: float = 50.0  # ... and at least this many times as long as the answer took to read
    answers_kept: int = 256  # answers kept for that
    tail_rows: int = 20  # rows the live tail shows
    quarantine_rows: int = 50  # quarantined records a quarantine page shows
    sample_seconds: float = 10.0  # how often a serving process's metrics are sampled when nobody looks
    downloads: int = 2  # downloads made at once
    revisions: int = 200  # a stream's last commits the history slider offers
