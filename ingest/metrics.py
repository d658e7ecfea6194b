"""Counters of what ingestion did, per stream, as plain data for ``GET /metrics``, and whether commits fail.

Only the committer's threads write them (after each commit); readers take a
copy under the lock, so a scrape never sees half a commit. :attr:`Metrics.failure`
is set by a commit that fails and cleared by the next that succeeds: what
``GET /health`` reports.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field


@dataclass
class StreamCounters:
    """What was committed to one stream since the service started; written under :class:`Metrics`' lock."""

    events: int = 0  # events committed to the stream
    bytes: int = 0  # bytes the committed batches arrived as
    commits: int = 0  # commits that touched the stream
    rejects: int = 0  # events sent to the tag's quarantine stream
    lag_seconds: float = 0.0  # commit time minus the newest event time of the last commit
    last_commit: float = 0.0  # Unix time of the last commit


@dataclass(frozen=True)
class CommitFailure:
    """Commits fail: why (the last failure's error), since when (Unix time), how many in a row."""

    reason: str
    since: float
    failures: int


@dataclass
class Metrics:
    """Per-tag counters plus the committer's own."""

    streams: dict[str, StreamCounters] = field(default_factory=lambda: defaultdict(StreamCounters))
    commits: int = 0
    failed_commits: int = 0
    internal_errors: int = 0  # submissions a bug kept from storing as they were (their events went to quarantine)
    poisoned_submissions: int = 0  # submissions committed with every event quarantined verbatim (after a bug)
    poisoned_events: int = 0  # the events of those submissions
    duplicates: int = 0
    commit_seconds: float = 0.0  # total time spent committing
    pending_bytes: int = 0
    started: float = field(default_factory=time.time)
    failure: CommitFailure | None = None  # set while commits fail; replaced whole, so read it without the lock
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def record_commit(
        self, per_tag: dict[str, tuple[int, int, int, int]], seconds: float, poisoned: tuple[int, int] = (0, 0)
    ) -> None:
        """``per_tag``: tag -> (events, bytes, rejects, newest event time in ns); ``poisoned``: (submissions,
        events) of the commit quarantined verbatim. A commit clears :attr:`failure`."""
        now = time.time()
        with self._lock:
            self.commits += 1
            self.commit_seconds += seconds
            self.poisoned_submissions += poisoned[0]
            self.poisoned_events += poisoned[1]
            self.failure = None
            for tag, (events, size, rejects, newest) in per_tag.items():
                c = self.streams[tag]
                c.events += events
                c.bytes += size
                c.rejects += rejects
                c.commits += 1
                c.last_commit = now
                if newest:
                    c.lag_seconds = now - newest / 1e9

    def record_failure(self, reason: str, *, count: bool = True) -> None:
        """A commit failed because of ``reason``; ``count=False`` for the committer's own store check,
        which is not a commit of anyone's data."""
        with self._lock:
            if count:
                self.failed_commits += 1
            previous = self.failure
            self.failure = CommitFailure(
                reason, previous.since if previous else time.time(), (previous.failures if previous else 0) + count
            )

    def record_recovery(self) -> None:
        """The store committed again (the committer's store check): commits no longer fail."""
        with self._lock:
            self.failure = None

    def record_internal_error(self) -> None:
        with self._lock:
            self.internal_errors += 1

    def record_duplicate(self) -> None:
        with self._lock:
            self.duplicates += 1

    def samples(self) -> list[tuple[str, str, str, dict[str, str], float]]:
        """Prometheus samples: ``(name, help, type, labels, value)``."""
        with self._lock:
            streams = {tag: StreamCounters(**vars(c)) for tag, c in self.streams.items()}
            out = [
                ("windvane_commits_total", "Group commits made.", "counter", {}, self.commits),
                (
                    "windvane_commit_failures_total",
                    "Group commits that failed (nothing acknowledged).",
                    "counter",
                    {},
                    self.failed_commits,
                ),
                (
                    "windvane_commits_failing",
                    "1 while commits fail (from a failed commit to the next that "
                    "succeeds; GET /health answers 503 meanwhile), else 0.",
                    "gauge",
                    {},
                    int(self.failure is not None),
                ),
                (
                    "windvane_internal_errors_total",
                    "Submissions an internal error kept from being stored as they "
                    "were; their events went to quarantine verbatim (see the log for the traceback).",
                    "counter",
                    {},
                    self.internal_errors,
                ),
                (
                    "windvane_poisoned_submissions_total",
                    "Submissions committed with every event quarantined verbatim "
                    "because they could not be prepared or stored as they were.",
                    "counter",
                    {},
                    self.poisoned_submissions,
                ),
                ("windvane_poisoned_events_total", "Events of those submissions.", "counter", {}, self.poisoned_events),
                (
                    "windvane_duplicate_submissions_total",
                    "Submissions whose idempotency key was already committed.",
                    "counter",
                    {},
                    self.duplicates,
                ),
                ("windvane_commit_seconds_total", "Time spent committing.", "counter", {}, self.commit_seconds),
                ("windvane_pending_bytes", "Bytes received and not yet committed.", "gauge", {}, self.pending_bytes),
            ]
        return out + _stream_samples(streams)


#: The per-stream samples: (name, help, type, the :class:`StreamCounters` attribute).
_PER_STREAM = [
    ("windvane_stream_events_total", "Events committed to the stream.", "counter", "events"),
    ("windvane_stream_bytes_total", "Bytes of committed events, as received.", "counter", "bytes"),
    ("windvane_stream_commits_total", "Commits that touched the stream.", "counter", "commits"),
    ("windvane_stream_rejects_total", "Events quarantined with a reason.", "counter", "rejects"),
    (
        "windvane_stream_lag_seconds",
        "Commit time minus the newest event time of the last commit.",
        "gauge",
        "lag_seconds",
    ),
]


def _stream_samples(streams: dict[str, StreamCounters]) -> list[tuple[str, str, str, dict[str, str], float]]:
    """The Prometheus samples of each stream's counters, labelled by tag: each metric's, tags in order."""
    return [
        (name, help_text, kind, {"tag": tag}, getattr(c, attr))
        for name, help_text, kind, attr in _PER_STREAM
        for tag, c in sorted(streams.items())
    ]
