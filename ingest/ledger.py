"""Idempotency keys committed recently, stored in the same commits as the data they acknowledge.

A Forward chunk resent after a lost ack, or an HTTP request retried with
the same ``Idempotency-Key``, must not be stored twice, even across a
``kill -9`` of the service. So each commit that carries keys also writes
them, in one small object per second (``_windvane/ingest/keys/<second>``),
and a service loads the buckets of its window at start.
"""

from __future__ import annotations

import collections
import time

import msgpack
import neostore
from arrays import Snapshot

PREFIX = "_windvane/ingest/keys/"
#: Seconds per listing prefix: the names of one block share all but their last 5 digits.
_BLOCK = 100_000


def _name(second: int) -> str:
    return f"{PREFIX}{second:012d}"


class KeyLedger:
    """The keys committed in the last ``window`` seconds (at most ``max_keys`` of them)."""

    def __init__(self, window: float = 86400.0, max_keys: int = 2_000_000):
        self.window = window
        self.max_keys = max_keys
        self._keys: dict[bytes, int] = {}
        self._order: collections.deque[tuple[int, bytes]] = collections.deque()
        self._bucket_second = -1
        self._bucket: list[bytes] = []

    def __contains__(self, key: bytes) -> bool:
        return key in self._keys

    def __len__(self) -> int:
        return len(self._keys)

    def load(self, store: neostore.Store) -> int:
        """Read the buckets of the window from ``store``; returns how many keys were loaded."""
        now = int(time.time())
        oldest = now - int(self.window)
        snapshot = Snapshot(store)
        names: list[str] = []
        for block in range(oldest // _BLOCK, now // _BLOCK + 1):
            prefix = _name(block * _BLOCK)[: len(PREFIX) + 7]
            names += [e.key for e in snapshot.list(prefix) if int(e.key[len(PREFIX):]) >= oldest]
        values = snapshot.get_many(names)
        for name in sorted(values):
            second = int(name[len(PREFIX):])
            keys = msgpack.unpackb(values[name])
            self._remember(second, keys)
            self._bucket_second, self._bucket = second, list(keys)
        return len(self._keys)

    def to_write(self, keys: list[bytes]) -> tuple[str, bytes, int, list[bytes]]:
        """``(name, value, second, bucket)`` to store with a commit of ``keys``; pass ``second``
        and ``bucket`` to :meth:`committed` once the commit succeeded."""
        second = int(time.time())
        bucket = (self._bucket if second == self._bucket_second else []) + keys
        return _name(second), msgpack.packb(bucket, use_bin_type=True), second, bucket

    def committed(self, second: int, bucket: list[bytes], keys: list[bytes]) -> None:
        """Record that ``keys`` are committed (in ``second``'s bucket, now ``bucket``)."""
        self._bucket_second, self._bucket = second, bucket
        self._remember(second, keys)

    def _remember(self, second: int, keys: list[bytes]) -> None:
        for key in keys:
            self._keys[key] = second
            self._order.append((second, key))
        oldest = time.time() - self.window
        while self._order and (self._order[0][0] < oldest or len(self._keys) > self.max_keys):
            second, key = self._order.popleft()
            if self._keys.get(key) == second:
                del self._keys[key]
