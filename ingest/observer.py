"""What the committer tells of its work: counted in :class:`~ingest.metrics.Metrics`, logged when it matters.

The committer's parts notify one :class:`CommitObserver`; it alone turns
their events into counters (what ``GET /metrics`` and ``GET /health``
report) and log lines, so the parts hold no counters of their own.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

from .metrics import Metrics

if TYPE_CHECKING:
    from .staging import Group

log = logging.getLogger("windvane.ingest")


class CommitObserver:
    """Records the committer's events in ``metrics``; safe to call from any of the committer's threads."""

    def __init__(self, metrics: Metrics | None = None):
        self.metrics = metrics or Metrics()
        self._tracebacks: dict[str, float] = {}  # kind of internal error -> when its traceback was last logged

    def pending(self, size: int) -> None:
        """``size`` bytes are received and not yet committed."""
        self.metrics.pending_bytes = size

    def duplicate(self, streams: Iterable[str] = ()) -> None:
        """A submission's idempotency key was committed already (or is being committed); ``streams``: those
        it writes, when its work is known committed."""
        self.metrics.record_duplicate()
        self._settled(streams)

    def failed(self, reason: str, streams: Iterable[str] = ()) -> None:
        """A commit of work for ``streams`` failed: they fail until work for them is committed."""
        self.metrics.record_failure(reason, streams)

    def _settled(self, streams: Iterable[str]) -> None:
        """Work for ``streams`` is committed: those whose earlier work failed no longer fail."""
        for stream, failure in self.metrics.record_committed(streams).items():
            log.warning(
                "work for stream %r is committed again, after %d failed commit(s) over %.0f s",
                stream or "(none named)",
                failure.failures,
                time.time() - failure.since,
            )

    def internal_error(self, what: str, exc: BaseException) -> None:
        """Log a bug with its traceback (once a minute per kind, so a stream of poisoned input cannot flood
        the log) and count it."""
        self.metrics.record_internal_error()
        kind = f"{what}:{type(exc).__name__}"
        now = time.monotonic()
        if now - self._tracebacks.get(kind, -60.0) >= 60.0:
            self._tracebacks[kind] = now
            log.error("internal error while %s a submission; its events go to quarantine: %r", what, exc, exc_info=exc)
        else:
            log.error("internal error while %s a submission; its events go to quarantine: %r", what, exc)

    def committed(
        self, gathered: Group, tid: bytes | None, seconds: float, streams: Iterable[str], *, locked: float
    ) -> None:
        """``gathered``, the work of submissions for ``streams``, is committed in ``tid`` (None: it stored
        nothing, so made no commit) in ``seconds``, ``locked`` of them holding the store's commit lock."""
        per_tag = {}
        for tag in set(gathered.rows) | set(gathered.rejected):
            parts = gathered.rows.get(tag, [])
            per_tag[tag] = (
                sum(p.rows for p in parts),
                gathered.sizes.get(tag, 0),
                len(gathered.rejected.get(tag, ())),
                gathered.newest.get(tag, 0),
            )
        if tid is not None:  # a group that stored nothing made no commit: it says nothing of the store
            self.metrics.record_commit(per_tag, seconds, poisoned=gathered.poisoned, locked=locked)
        self._settled(streams)  # committed, or nothing of it was left to store
        for tag, rejected in gathered.rejected.items():
            # Quarantined records are kept, not lost, but the sender should hear of them.
            log.warning(
                "quarantined %d event(s) of tag %r in commit %s: %s%s",
                len(rejected),
                tag,
                tid.hex() if tid else "-",
                rejected[0].reason,
                f" (and {len(rejected) - 1} more)" if len(rejected) > 1 else "",
            )
