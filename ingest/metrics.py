"""Counters of what ingestion did, per stream, as plain data for ``GET /metrics``, and whether commits fail.

Only the committer's threads write them (after each commit); readers take a
copy under the lock, so a scrape never sees half a commit.

Whether commits fail is kept per stream: a submission that fails to commit
marks each stream it writes failing (:attr:`Metrics.failing`), and only a
later commit of work for that stream (its sender's resend) clears it. A
commit of other streams, or of a few bytes, says nothing of the work that
failed: a full disk can still take a small commit, and a stream whose data
cannot be read back fails every append while others commit. A failure of
work that names no stream is cleared by any commit. ``GET /health``
answers 503 while anything fails.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

#: One Prometheus sample: (name, help, type, labels, value), as the /metrics endpoint renders it.
MetricSample = tuple[str, str, str, dict[str, str], float]


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

    def again(self, reason: str) -> CommitFailure:
        """This failure after one more, for ``reason``."""
        return CommitFailure(reason, self.since, self.failures + 1)


#: The upper bounds (seconds) of the commit-duration histogram's buckets; a last one, +Inf, takes the rest.
COMMIT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
COMMIT_HISTOGRAM = "windvane_commit_duration_seconds"

#: The key of :attr:`Metrics.failing` for failed work that names no stream.
NO_STREAM = ""


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
    commit_seconds: float = 0.0  # each group's time from validation to commit, summed (groups overlap)
    busy_seconds: float = 0.0  # time at least one group was between validation and commit (their union)
    _busy_until: float = field(default=0.0, repr=False)  # when the group recorded last was committed (monotonic)
    locked_seconds: float = 0.0  # each commit's time from taking the store's commit lock to its end, summed
    # Commits per duration bucket (COMMIT_BUCKETS, then +Inf), not cumulative: a scrape adds them up.
    commit_durations: list[int] = field(default_factory=lambda: [0] * (len(COMMIT_BUCKETS) + 1))
    pending_bytes: int = 0
    started: float = field(default_factory=time.time)
    # While commits fail: the failure as a whole (the last reason, since the first); None otherwise.
    failure: CommitFailure | None = None
    # Each stream whose failed work is not committed yet -> its failure (NO_STREAM: work naming none).
    # Both are replaced whole, so read them without the lock.
    failing: dict[str, CommitFailure] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def record_commit(
        self,
        per_tag: dict[str, tuple[int, int, int, int]],
        seconds: float,
        *,
        poisoned: tuple[int, int],
        locked: float,
    ) -> None:
        """``per_tag``: tag -> (events, bytes, rejects, newest event time in ns); ``seconds``: from validation
        to commit; ``poisoned``: (submissions, events) of the commit quarantined verbatim; ``locked``: how long
        it held the store's commit lock. A commit clears a failure that names no stream."""
        now, ended = time.time(), time.monotonic()
        with self._lock:
            self.commits += 1
            self.commit_seconds += seconds
            self.commit_durations[bisect.bisect_left(COMMIT_BUCKETS, seconds)] += 1
            self.locked_seconds += locked
            # Groups are committed in order, and the next is validated while one commits: only the part of
            # this group's time after the one before was committed adds to the busy time.
            self.busy_seconds += ended - max(ended - seconds, self._busy_until)
            self._busy_until = ended
            self.poisoned_submissions += poisoned[0]
            self.poisoned_events += poisoned[1]
            self._settle((NO_STREAM,))
            for tag, (events, size, rejects, newest) in per_tag.items():
                c = self.streams[tag]
                c.events += events
                c.bytes += size
                c.rejects += rejects
                c.commits += 1
                c.last_commit = now
                if newest:
                    c.lag_seconds = now - newest / 1e9

    def record_failure(self, reason: str, streams: Iterable[str] = ()) -> None:
        """A commit of work for ``streams`` (none: work that names no stream) failed because of ``reason``."""
        now = time.time()
        with self._lock:
            self.failed_commits += 1
            failing = dict(self.failing)
            for stream in set(streams) or {NO_STREAM}:
                failing[stream] = failing[stream].again(reason) if stream in failing else CommitFailure(reason, now, 1)
            self.failing = failing
            self.failure = self.failure.again(reason) if self.failure else CommitFailure(reason, now, 1)

    def record_committed(self, streams: Iterable[str]) -> dict[str, CommitFailure]:
        """Work for ``streams`` is committed (or found committed already): those that failed no longer do;
        they are returned with the failure each had."""
        with self._lock:
            return self._settle(streams)

    def _settle(self, streams: Iterable[str]) -> dict[str, CommitFailure]:
        """Under the lock: ``streams`` no longer fail; those that did, with their failures."""
        settled = {stream: self.failing[stream] for stream in streams if stream in self.failing}
        if settled:
            self.failing = {s: f for s, f in self.failing.items() if s not in settled}
            if not self.failing:
                self.failure = None
        return settled

    def record_internal_error(self) -> None:
        with self._lock:
            self.internal_errors += 1

    def record_duplicate(self) -> None:
        with self._lock:
            self.duplicates += 1

    @property
    def commits_failing(self) -> int:
        """1 while commits fail (:attr:`failure` is set), else 0."""
        return int(self.failure is not None)

    def samples(self) -> list[MetricSample]:
        """Prometheus samples: ``(name, help, type, labels, value)``."""
        with self._lock:
            streams = {tag: StreamCounters(**vars(c)) for tag, c in self.streams.items()}
            out: list[MetricSample] = [
                (name, help_text, kind, {}, getattr(self, attr)) for name, help_text, kind, attr in _TOTALS
            ]
            durations = list(self.commit_durations)
            total_seconds = self.commit_seconds
        return (
            out
            + _histogram_samples(durations, total_seconds)
            + _stream_samples(streams)
            + _failing_samples(set(streams), self.failing)
        )


#: The committer's own samples: (name, help, type, the :class:`Metrics` attribute).
_TOTALS = [
    ("windvane_commits_total", "Group commits made.", "counter", "commits"),
    (
        "windvane_commit_failures_total",
        "Group commits that failed (nothing acknowledged).",
        "counter",
        "failed_commits",
    ),
    (
        "windvane_commits_failing",
        "1 while commits fail (from a failed commit until the work that failed is "
        "committed; GET /health answers 503 meanwhile), else 0.",
        "gauge",
        "commits_failing",
    ),
    (
        "windvane_internal_errors_total",
        "Submissions an internal error kept from being stored as they "
        "were; their events went to quarantine verbatim (see the log for the traceback).",
        "counter",
        "internal_errors",
    ),
    (
        "windvane_poisoned_submissions_total",
        "Submissions committed with every event quarantined verbatim "
        "because they could not be prepared or stored as they were.",
        "counter",
        "poisoned_submissions",
    ),
    ("windvane_poisoned_events_total", "Events of those submissions.", "counter", "poisoned_events"),
    (
        "windvane_duplicate_submissions_total",
        "Submissions whose idempotency key was already committed.",
        "counter",
        "duplicates",
    ),
    (
        "windvane_commit_seconds_total",
        "Each group's time from validation to commit, summed; groups overlap (the next is validated "
        "while one commits), so this grows faster than the clock.",
        "counter",
        "commit_seconds",
    ),
    (
        "windvane_commit_busy_seconds_total",
        "Time at least one group was being validated, written or committed (summed over a server's workers).",
        "counter",
        "busy_seconds",
    ),
    (
        "windvane_commit_lock_seconds_total",
        "Time commits held the store's commit lock, from taking it to their end (summed over a server's "
        "workers). Only one commit holds it at a time, so its rate is the share of the store's commit "
        "capacity in use: near 1, commits queue for the lock and acknowledgements wait.",
        "counter",
        "locked_seconds",
    ),
    ("windvane_pending_bytes", "Bytes received and not yet committed.", "gauge", "pending_bytes"),
]


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


def _histogram_samples(durations: list[int], seconds: float) -> list[MetricSample]:
    """The commit-duration histogram's samples: cumulative buckets by ``le``, then its sum and count."""
    help_text = (
        "Each group commit's time from validation to commit: how long its events waited for their "
        "acknowledgement once validated."
    )
    out: list[MetricSample] = []
    running = 0
    for bound, count in zip([*(f"{b:g}" for b in COMMIT_BUCKETS), "+Inf"], durations, strict=True):
        running += count
        out.append((f"{COMMIT_HISTOGRAM}_bucket", help_text, "histogram", {"le": bound}, running))
    out.append((f"{COMMIT_HISTOGRAM}_sum", help_text, "histogram", {}, seconds))
    out.append((f"{COMMIT_HISTOGRAM}_count", help_text, "histogram", {}, running))
    return out


def _stream_samples(streams: dict[str, StreamCounters]) -> list[MetricSample]:
    """The Prometheus samples of each stream's counters, labelled by tag: each metric's, tags in order."""
    return [
        (name, help_text, kind, {"tag": tag}, getattr(c, attr))
        for name, help_text, kind, attr in _PER_STREAM
        for tag, c in sorted(streams.items())
    ]


def _failing_samples(streams: set[str], failing: dict[str, CommitFailure]) -> list[MetricSample]:
    """``windvane_stream_commits_failing`` of every stream committed to or failing, by tag."""
    help_text = "1 while work for the stream failed to commit and is not committed yet (GET /health names it), else 0."
    return [
        ("windvane_stream_commits_failing", help_text, "gauge", {"tag": tag}, int(tag in failing))
        for tag in sorted((streams | set(failing)) - {NO_STREAM})
    ]
