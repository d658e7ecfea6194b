"""A RAM-bounded LRU cache of decoded chunks, keyed by oid and checked by serial.

An entry is ``oid -> (serial, chunk)``: the chunk as the revision
``serial`` of object ``oid`` decodes. A view that moves to a newer
snapshot drops only the oids that changed in between
(:meth:`~ChunkCache.forget_changes`), so unchanged chunks survive a refresh.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from windvane import neostore

#: The default RAM budget of a view's cache.
DEFAULT_CACHE_BYTES = 256 * 1024 * 1024

#: Transactions per ``changes_since`` page when a view catches up.
_CHANGES_PAGE = 10000


class ChunkCache:
    """Decoded chunks up to ``budget`` bytes, least recently used evicted first. Thread-safe.

    Chunks are stored read-only: callers copy out of them, never into them.
    ``hits``, ``misses`` and ``evictions`` count since creation.
    """

    def __init__(self, budget: int = DEFAULT_CACHE_BYTES):
        if budget < 0:
            raise ValueError(f"the cache budget must be >= 0 bytes, not {budget}")
        self.budget = int(budget)
        self.nbytes = 0
        self.hits = 0
        self.misses = 0
        self.evictions = 0
        self._entries: OrderedDict[bytes, tuple[bytes, np.ndarray]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, oid: bytes) -> bool:
        return oid in self._entries

    def get(self, oid: bytes, serial: bytes | None = None) -> np.ndarray | None:
        """The cached chunk of ``oid`` (of revision ``serial`` if given), or None."""
        with self._lock:
            entry = self._entries.get(oid)
            if entry is None or (serial is not None and entry[0] != serial):
                self.misses += 1
                return None
            self._entries.move_to_end(oid)
            self.hits += 1
            return entry[1]

    def serial(self, oid: bytes) -> bytes | None:
        """The revision cached for ``oid``, without counting a hit or a miss."""
        entry = self._entries.get(oid)
        return None if entry is None else entry[0]

    def put(self, oid: bytes, serial: bytes, chunk: np.ndarray) -> None:
        """Cache ``chunk`` (made read-only) unless it alone exceeds the budget."""
        size = chunk.nbytes
        if size > self.budget:
            return
        chunk.flags.writeable = False
        with self._lock:
            old = self._entries.pop(oid, None)
            if old is not None:
                self.nbytes -= old[1].nbytes
            self._entries[oid] = (serial, chunk)
            self.nbytes += size
            while self.nbytes > self.budget:
                _, (_, dropped) = self._entries.popitem(last=False)
                self.nbytes -= dropped.nbytes
                self.evictions += 1

    def discard(self, oids: Iterable[bytes]) -> int:
        """Forget the chunks of ``oids`` (they changed); how many were cached."""
        dropped = 0
        with self._lock:
            for oid in oids:
                entry = self._entries.pop(oid, None)
                if entry is not None:
                    self.nbytes -= entry[1].nbytes
                    dropped += 1
        return dropped

    def forget_changes(self, store: neostore.Store, since: bytes | None, until: bytes) -> None:
        """Drop the chunks of objects changed by commits of ``store`` in ``(since, until]`` (``since``
        None: a transaction's view, which caches nothing it could not see)."""
        if since is None or not len(self) or until <= since:
            return
        cursor = since
        while True:
            page = store.changes_since(cursor, limit=_CHANGES_PAGE)
            for tid, oids in page:
                if tid > until:
                    return
                self.discard(oids)
                cursor = tid
            if len(page) < _CHANGES_PAGE:
                return

    def clear(self) -> None:
        """Drop every cached chunk (the statistics stay)."""
        with self._lock:
            self._entries.clear()
            self.nbytes = 0

    def stats(self) -> dict[str, int]:
        """Counters and occupancy, for tests and tuning."""
        return {
            "hits": self.hits,
            "misses": self.misses,
            "evictions": self.evictions,
            "entries": len(self._entries),
            "nbytes": self.nbytes,
            "budget": self.budget,
        }
