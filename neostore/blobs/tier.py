"""A store's blob tier: which values go to the object store, sending them there, and reading them back.

The database row of a value kept in the tier has ``chunks = TIERED`` and no
value; the bytes (compressed as the row's flag says) are the object under
:func:`~neostore.blobs.location.blob_key`. Values are uploaded before the
transaction that references them takes the commit lock, so the object store's
slowness never holds other writers up, and a crash in between leaves only
objects no row references, which :mod:`~neostore.blobs.sweep` deletes.

Why the rows can be trusted (the rule :mod:`~neostore.blobs.sweep` keeps
too): the sweep deletes an object only under the commit lock, after seeing
that no row references it, and only once the object is older than the grace
period. A writer, under the commit lock, inserts the rows of the objects it
uploaded less than half a grace period ago and checks every other object
first (one HEAD, uploaded again if gone). So a row never points at an object
a sweep deleted, whatever the timing, as long as clocks disagree by less than
half the grace period.
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

from ..values import EncodedValue
from .base import BlobStore
from .location import blob_key

#: ``data.chunks`` of a value kept in the blob tier.
TIERED = -1

#: How long an unreferenced object is left alone by the sweep: uploads in flight are younger than this.
GRACE_SECONDS = 3600.0

#: Requests in flight at once, per store.
REQUESTS_IN_FLIGHT = 16

T = TypeVar("T")


class BlobTier:
    """Values of at least ``threshold`` bytes kept in ``blobs``; uploads and reads run ``workers`` at a time."""

    def __init__(
        self,
        blobs: BlobStore,
        threshold: int,
        *,
        grace: float = GRACE_SECONDS,
        workers: int = REQUESTS_IN_FLIGHT,
    ):
        self.blobs = blobs
        self.threshold = threshold
        self.grace = grace
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="neostore-blobs")
        #: Requests sent, by kind: what the dedup benchmarks and tests count.
        self.requests: Counter[str] = Counter()
        self._counting = threading.Lock()

    @property
    def location(self) -> str:
        return self.blobs.location

    def holds(self, size: int) -> bool:
        """Whether a value of ``size`` raw bytes goes to the tier."""
        return size >= self.threshold

    def key(self, digest: bytes, compression: int) -> str:
        """The full key (location included) of a value, for messages."""
        return f"{self.blobs.location}/{blob_key(digest, compression)}"

    def upload(self, values: Iterable[EncodedValue]) -> dict[bytes, float]:
        """Send ``values`` (unless their keys exist), many at once: ``{hash: when}`` for each.

        ``when`` is the monotonic time before the request was sent, or
        ``-inf`` for an object that was there already: it may be a dead
        writer's, old enough for a sweep to take, so :meth:`settle` checks it.
        """
        started = time.monotonic()
        futures = [(v.hash, self.pool.submit(self._put, v)) for v in values]
        return {digest: started if future.result() else -math.inf for digest, future in futures}

    def _put(self, value: EncodedValue) -> bool:
        self._count("PUT")
        return self.blobs.put_new(blob_key(value.hash, value.compression), value.stored)

    def settle(self, values: Iterable[EncodedValue], uploaded: dict[bytes, float]) -> None:
        """Under the commit lock, before their rows go in: make sure every object of ``values`` is there.

        Objects this process wrote less than half a grace period ago are
        (no sweep may delete them yet); the others are asked for, and sent
        again if a sweep removed them.
        """
        fresh_after = time.monotonic() - self.grace / 2
        doubtful = [v for v in values if uploaded.get(v.hash, -math.inf) <= fresh_after]
        if not doubtful:
            return
        missing = [v for v, there in zip(doubtful, self.map(self._exists, doubtful)) if not there]
        self.upload(missing)

    def _exists(self, value: EncodedValue) -> bool:
        self._count("HEAD")
        return self.blobs.exists(blob_key(value.hash, value.compression))

    def fetch(self, digest: bytes, compression: int) -> bytes | memoryview:
        """The stored bytes of a value, possibly as a read-only view (BlobNotFoundError if its object is gone)."""
        self._count("GET")
        return self.blobs.get(blob_key(digest, compression))

    def fetch_range(self, digest: bytes, compression: int, start: int, stop: int) -> bytes:
        """``stored[start:stop]`` of a value, only that range transferred."""
        self._count("GET")
        return self.blobs.get_range(blob_key(digest, compression), start, stop)

    def _count(self, method: str) -> None:
        with self._counting:
            self.requests[method] += 1

    def submit(self, fn: Callable[..., T], *args: object) -> Future[T]:
        """Run ``fn(*args)`` on the tier's request threads."""
        return self.pool.submit(fn, *args)

    def map(self, fn: Callable[[EncodedValue], T], values: list[EncodedValue]) -> list[T]:
        return list(self.pool.map(fn, values))

    def close(self) -> None:
        self.pool.shutdown(wait=True)
        self.blobs.close()
