"""Idempotency keys committed recently, stored in the same commits as the data they acknowledge.

A Forward chunk resent after a lost ack, or an HTTP request retried with
the same ``Idempotency-Key``, must not be stored twice, even across a
``kill -9`` of the service. So each commit that carries keys also writes
them, in small bucket objects named by second
(``_windvane/ingest/keys/<second>-<part>``), and a service loads the
buckets of its window at start.

A commit adds its keys to the newest bucket, which it rewrites whole; a
bucket holding :data:`BUCKET_KEYS` keys is left as it is and the next
commit starts a new part. Rewriting one bucket per second instead made
each commit copy every key committed before it in that second: with many
commits a second of many keys each (MQTT records a key per message) that
grew quadratically and filled the store's history.
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
#: Keys a bucket takes before the next commit starts a new one: a rewrite copies at most ~20 KB.
BUCKET_KEYS = 1024


def _name(second: int, part: int = 0) -> str:
    return f"{PREFIX}{second:012d}-{part:06d}"


def _second(name: str) -> int:
    """The second a bucket's name holds (names without a part were written before parts existed)."""
    return int(name[len(PREFIX):].split("-")[0])


def _part(name: str) -> int:
    rest = name[len(PREFIX):].split("-")
    return int(rest[1]) if len(rest) > 1 else 0


class KeyLedger:
    """The keys committed in the last ``window`` seconds (at most ``max_keys`` of them)."""

    def __init__(self, window: float = 86400.0, max_keys: int = 2_000_000):
        self.window = window
        self.max_keys = max_keys
        self._keys: dict[bytes, int] = {}
        self._order: collections.deque[tuple[int, bytes]] = collections.deque()
        self._bucket_second = -1
        self._bucket_part = 0
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
            names += [e.key for e in snapshot.list(prefix) if _second(e.key) >= oldest]
        values = snapshot.get_many(names)
        last = None
        for name in sorted(values):
            keys = msgpack.unpackb(values[name])
            self._remember(_second(name), keys)
            last = name
        if last is not None:
            # Where the next commit's keys go: a new part, so that buckets of older names are never rewritten.
            self._bucket_second, self._bucket_part, self._bucket = _second(last), _part(last) + 1, []
        return len(self._keys)

    def to_write(self, keys: list[bytes]) -> tuple[str, bytes, tuple[int, int], list[bytes]]:
        """``(name, value, where, bucket)`` to store with a commit of ``keys``; pass ``where``
        and ``bucket`` to :meth:`committed` once the commit succeeded."""
        second = int(time.time())
        if second != self._bucket_second:
            part, bucket = 0, list(keys)
        elif self._bucket and len(self._bucket) + len(keys) > BUCKET_KEYS:
            part, bucket = self._bucket_part + 1, list(keys)
        else:
            part, bucket = self._bucket_part, self._bucket + keys
        return _name(second, part), msgpack.packb(bucket, use_bin_type=True), (second, part), bucket

    def committed(self, where: tuple[int, int], bucket: list[bytes], keys: list[bytes]) -> None:
        """Record that ``keys`` are committed (in the bucket at ``where``, now ``bucket``)."""
        (self._bucket_second, self._bucket_part), self._bucket = where, bucket
        self._remember(where[0], keys)

    def _remember(self, second: int, keys: list[bytes]) -> None:
        for key in keys:
            self._keys[key] = second
            self._order.append((second, key))
        oldest = time.time() - self.window
        while self._order and (self._order[0][0] < oldest or len(self._keys) > self.max_keys):
            second, key = self._order.popleft()
            if self._keys.get(key) == second:
                del self._keys[key]
