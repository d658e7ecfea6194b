"""Which objects recent commits changed, remembered so that writers keeping state need not ask each time.

A :class:`~arrays.stream_writer.StreamWriter` keeps a stream's metadata and
partial chunks between transactions and must learn, under the commit lock,
whether any commit since its last one touched them. :class:`ChangeLog`
answers that for every writer of one store in a process: commits made
through it are recorded as they finish (no query), others' are read once
with ``Store.changes_since`` and shared.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Collection, Iterable

import neostore

#: Transactions per ``changes_since`` query.
_PAGE = 1000
#: Pages a single question may read; beyond that the answer is "changed" (a reload is cheaper).
_MAX_PAGES = 8


class ChangeLog:
    """The oids each commit in a window ``(start, known]`` of tids changed, for one store. Thread-safe.

    Complete for its window: every commit in it is listed. ``limit``: the
    most commits kept (older ones are forgotten; questions about them
    answer "changed").
    """

    def __init__(self, store: neostore.Store, *, limit: int = 10000):
        self.store = store
        self.limit = limit
        self._lock = threading.Lock()
        self._tids: list[bytes] = []
        self._oids: list[frozenset[bytes]] = []
        self._start: bytes | None = None
        self._known: bytes | None = None

    def changed(self, since: bytes, head: bytes, oids: Collection[bytes]) -> bool:
        """Whether any commit in ``(since, head]`` changed one of ``oids``.

        ``head`` must be the newest commit (read holding the commit lock, so
        nothing lands in the window while it is read). True also when that
        would take too long to tell.
        """
        if since >= head:
            return False
        with self._lock:
            if self._known is None or since > self._known:
                self._reset(since)
            if since < self._start and not self._extend_back(since):
                return True
            if self._known < head and not self._extend(head):
                return True
            first = bisect.bisect_right(self._tids, since)
            last = bisect.bisect_right(self._tids, head)
            return any(not changed.isdisjoint(oids) for changed in self._oids[first:last])

    def record(self, tid: bytes, oids: Iterable[bytes], after: bytes) -> None:
        """Our own commit ``tid`` changed ``oids``; ``after``: the newest commit when it took the lock.

        Nothing else can have committed between ``after`` and ``tid``, so
        a log complete up to ``after`` becomes complete up to ``tid``.
        Recording the same commit again is harmless.
        """
        with self._lock:
            if self._known is not None and self._known >= tid:
                return
            if self._known != after:
                self._reset(after)
            self._append(tid, frozenset(oids))

    # -- filling the window --------------------------------------------------------

    def _reset(self, at: bytes) -> None:
        self._tids, self._oids = [], []
        self._start = self._known = at

    def _append(self, tid: bytes, oids: frozenset[bytes]) -> None:
        self._tids.append(tid)
        self._oids.append(oids)
        self._known = tid
        if len(self._tids) > self.limit:
            drop = len(self._tids) - self.limit // 2  # trim in halves: amortised O(1)
            self._start = self._tids[drop - 1]
            del self._tids[:drop], self._oids[:drop]

    def _read(self, since: bytes, until: bytes) -> list[tuple[bytes, frozenset[bytes]]] | None:
        """The commits in ``(since, until]``; None if there are too many to read."""
        found: list[tuple[bytes, frozenset[bytes]]] = []
        cursor = since
        for _ in range(_MAX_PAGES):
            page = self.store.changes_since(cursor, limit=_PAGE)
            for tid, oids in page:
                if tid > until:
                    return found
                found.append((tid, frozenset(oids)))
                cursor = tid
            if len(page) < _PAGE or cursor >= until:
                return found
        return None

    def _extend(self, head: bytes) -> bool:
        found = self._read(self._known, head)
        if found is None:
            self._reset(head)
            return False
        for tid, oids in found:
            self._append(tid, oids)
        self._known = head
        return True

    def _extend_back(self, since: bytes) -> bool:
        found = self._read(since, self._start)
        if found is None or len(found) + len(self._tids) > self.limit:
            return False
        self._tids = [t for t, _ in found] + self._tids
        self._oids = [o for _, o in found] + self._oids
        self._start = since
        return True
