"""Which objects recent commits changed, remembered so that writers keeping state need not ask each time.

A :class:`~arrays.stream_writer.StreamWriter` keeps a stream's metadata and
partial chunks between transactions and must learn, under the commit lock,
whether any commit since its last one touched them. :class:`ChangeLog`
answers that for every writer of one store in a process: commits made
through it are recorded as they finish (no query), others' are read once
with ``Store.changes_since`` and shared.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Iterable

from windvane import neostore

#: Transactions per ``changes_since`` query.
_PAGE = 1000
#: Pages a single question may read; beyond that the answer is "changed" (a reload is cheaper).
_MAX_PAGES = 8
_NEVER = b""  # orders before every tid: "not changed in the window"


class ChangeLog:
    """Which objects the commits in a window ``(start, known]`` of tids changed, for one store. Thread-safe.

    Complete for its window: every commit in it is accounted for. It keeps
    each object's newest change in the window, so its memory follows the
    objects changed (a plant's thousands of streams), not the number of
    commits times the objects each touched. ``limit``: the most objects
    kept; past it the window starts afresh at the newest commit (questions
    about the commits before answer "changed").
    """

    def __init__(self, store: neostore.Store, *, limit: int = 1_000_000):
        self.store = store
        self.limit = limit
        self._lock = threading.Lock()
        self._last: dict[bytes, bytes] = {}  # oid -> the newest commit in the window that changed it
        # The window (start, known]; b"" sorts before every tid: nothing is known yet.
        self._start = b""
        self._known = b""

    def __len__(self) -> int:
        """The objects it keeps an entry for (what its memory follows)."""
        with self._lock:
            return len(self._last)

    def changed(self, since: bytes, head: bytes, oids: Collection[bytes]) -> bool:
        """Whether any commit in ``(since, head]`` changed one of ``oids``.

        ``head`` must be the newest commit (read holding the commit lock, so
        nothing lands in the window while it is read). True also when that
        would take too long to tell.
        """
        if since >= head:
            return False
        with self._lock:
            if since > self._known:
                self._reset(since)
            if since < self._start and not self._extend_back(since):
                return True
            if self._known < head and not self._extend(head):
                return True
            last = self._last
            # Changes after ``head`` cannot exist yet: ``head`` is the newest commit. A loop, not any()
            # over a generator: every writer of a commit asks.
            for oid in oids:
                if last.get(oid, _NEVER) > since:
                    return True
            return False

    def record(self, tid: bytes, oids: Iterable[bytes], after: bytes) -> None:
        """Our own commit ``tid`` changed ``oids``; ``after``: the newest commit when it took the lock.

        Nothing else can have committed between ``after`` and ``tid``, so
        a log complete up to ``after`` becomes complete up to ``tid``.
        Recording the same commit again is harmless.
        """
        with self._lock:
            if self._known >= tid:
                return
            if self._known != after:
                self._reset(after)
            self._append(tid, oids)

    # -- filling the window --------------------------------------------------------

    def _reset(self, at: bytes) -> None:
        self._last = {}
        self._start = self._known = at

    def _append(self, tid: bytes, oids: Iterable[bytes]) -> None:
        """Commit ``tid``, newer than any in the window, changed ``oids``."""
        self._last.update(dict.fromkeys(oids, tid))
        self._known = tid
        if len(self._last) > self.limit:
            self._reset(tid)

    def _read(self, since: bytes, until: bytes) -> list[tuple[bytes, list[bytes]]] | None:
        """The commits in ``(since, until]``, oldest first; None if there are too many to read."""
        found: list[tuple[bytes, list[bytes]]] = []
        cursor = since
        for _ in range(_MAX_PAGES):
            page = self.store.changes_since(cursor, limit=_PAGE)
            for tid, oids in page:
                if tid > until:
                    return found
                found.append((tid, oids))
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
        if found is None:
            return False
        last = self._last
        for tid, oids in found:
            for oid in oids:
                if oid not in last:  # a change in the window is newer than any before it
                    last[oid] = tid
        if len(last) > self.limit:
            self._reset(self._known)
            return False
        self._start = since
        return True
