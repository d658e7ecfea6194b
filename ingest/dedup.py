"""Idempotency keys at the committer: the ledger's committed keys and the keys of submissions in flight.

Keys are checked twice: in memory when submitted (the keys this process
committed or read, and those of submissions queued or committing: a resend
waits for the first one's outcome), and, for a group carrying keys, against
the store's ledger while the commit holds the store's commit lock
(:meth:`ingest.ledger.KeyLedger.sync`, which reads nothing unless another
process committed since), so that two services on one store never store a
resent chunk twice.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from .batch import Receipt
from .ledger import KeyLedger
from .observer import CommitObserver
from .submission import Submission

#: What a submission whose key is committed already is answered.
DUPLICATE = Receipt(0, 0, None, duplicate=True)


class Dedup:
    """The keys committed (``ledger``) and in flight; a duplicate found is told to ``observer``."""

    def __init__(self, ledger: KeyLedger, observer: CommitObserver):
        self.ledger = ledger
        self._observer = observer
        self._in_flight: dict[bytes, Submission] = {}

    def committed(self, key: bytes | None, streams: Iterable[str] = ()) -> bool:
        """Whether ``key``, a submission's for ``streams``, is committed already (as far as this process
        knows); counts it if so."""
        if key is None or key not in self.ledger:
            return False
        self._observer.duplicate(streams)
        return True

    def in_flight(self, key: bytes | None) -> Submission | None:
        """The submission queued or committing under ``key``, if any."""
        return self._in_flight.get(key) if key is not None else None

    def track(self, item: Submission) -> None:
        """``item`` is queued: a resend of its key waits for its outcome."""
        if item.key is not None:
            self._in_flight[item.key] = item

    def forget(self, item: Submission) -> None:
        """``item`` is answered: its key is no longer in flight."""
        if item.key is not None and self._in_flight.get(item.key) is item:
            del self._in_flight[item.key]

    def any_committed(self, group: list[Submission]) -> bool:
        """Whether the key of a submission of ``group`` is committed already."""
        return any(item.key is not None and item.key in self.ledger for item in group)

    def drop_committed(
        self, group: list[Submission], finish: Callable[[list[Submission], list[Receipt]], None]
    ) -> list[Submission]:
        """``group`` without the submissions whose key is committed already (each answered as a duplicate
        through ``finish``).

        Keys reach the ledger while their submissions wait when the ledger
        read them from the store (another process committed them, or a
        commit of ours whose outcome the store could not learn did).
        """
        if not self.any_committed(group):
            return group
        done = [item for item in group if item.key is not None and item.key in self.ledger]
        for item in done:
            self._observer.duplicate(item.streams)
        finish(done, [DUPLICATE] * len(done))
        return [item for item in group if item not in done]
