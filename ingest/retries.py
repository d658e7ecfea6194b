"""What a failed commit means for its submissions: retry them one by one, salvage them, or fail them.

A group that fails to commit is retried one submission at a time, so a
submission that cannot be stored fails alone and the others are still
committed. A lone submission that failed for a reason other than the store
(:meth:`Retries.store_failure`) is retried once with every event sent to
quarantine verbatim, so that its sender is answered and not left resending
it for ever; if that fails too, the store is at fault.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from windvane import neostore

from .errors import CommitFailed
from .observer import CommitObserver
from .submission import Submission

log = logging.getLogger("windvane.ingest")


def salvage_reason(exc: BaseException) -> str:
    """The quarantine reason of the events of a submission ``exc`` kept from being stored as it is."""
    text = f"windvane could not store this event as it is ({type(exc).__name__}: {exc})"
    return text.encode("utf-8", "backslashreplace").decode("utf-8")[:2000]


def _streams(group: list[Submission]) -> set[str]:
    """The streams the work of ``group`` writes."""
    return set().union(*(item.streams for item in group))


class Retries:
    """Decides what becomes of the submissions of a failed commit to ``store``; fails them through ``fail``
    (``fail(group, error)`` answers each of ``group`` with ``error``)."""

    def __init__(
        self, observer: CommitObserver, fail: Callable[[list[Submission], Exception], None], store: neostore.Store
    ):
        self._observer = observer
        self._fail = fail
        self._store = store

    def store_failure(self, exc: BaseException) -> bool:
        """Whether ``exc`` says the store could not commit (retrying later may work), rather than that
        something in the submission could not be stored (a bug: retrying the same bytes fails the same way)."""
        if isinstance(exc, (neostore.NeoStoreError, CommitFailed, OSError, MemoryError)):
            return True
        # A database driver's own error escaping unwrapped: the store's backend knows which mean the database
        # fails for now (locked, full, gone) and which the same statements meet again.
        return self._store.is_transient(exc)

    def failed(self, group: list[Submission], exc: Exception) -> list[Submission]:
        """Report a failed commit: the submissions to retry one by one, or none (each has its error)."""
        if isinstance(exc, neostore.CommitOutcomeUnknown):
            # Retrying could store the group twice: its senders resend, and the ledger,
            # read from the store under the next keyed commit's lock, recognises keyed resends.
            self._observer.failed(str(exc), _streams(group))
            log.error("commit failed, nothing acknowledged: %s", exc)
            self._fail(group, CommitFailed(f"{exc}; nothing was acknowledged, send again"))
            return []
        if len(group) > 1:
            log.warning("a group of %d submissions failed to commit (%s); committing them one by one", len(group), exc)
            return group
        item = group[0]
        if item.salvage is None and not self.store_failure(exc):
            self._observer.internal_error("storing", exc)
            item.salvage = salvage_reason(exc)
            return group
        self._observer.failed(f"the store could not commit: {exc}", item.streams)
        log.error("commit failed, nothing acknowledged: %s", exc, exc_info=not self.store_failure(exc))
        self._fail(group, CommitFailed(f"the store could not commit: {exc}"))
        return []

    def crashed(self, group: list[Submission], exc: BaseException, thread: str = "committer") -> None:
        """The ``thread`` caught ``exc``, a bug: fail what of ``group`` is not answered yet."""
        log.critical("the %s failed unexpectedly: %r", thread, exc, exc_info=True)
        self._observer.failed(f"the committer failed unexpectedly: {exc!r}", _streams(group))
        self._fail([i for i in group if not i.finished], CommitFailed(f"the committer failed unexpectedly: {exc!r}"))
