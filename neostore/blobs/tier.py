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
period. A writer, under the commit lock, inserts the rows of the objects its
process sent less than half a grace period ago and checks every other object
first (one HEAD, sent again if gone). So a row never points at an object a
sweep deleted, whatever the timing, as long as clocks disagree by less than
half the grace period.

A writer preparing its next commit may send that commit's values ahead
(:meth:`BlobTier.upload_ahead`, through ``Store.send_ahead``); the commit
then waits for those uploads rather than sending the values again.
"""

from __future__ import annotations

import functools
import math
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor, wait
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

#: Objects this process wrote that it remembers (hash, flag, when): enough for the values of the
#: commits being prepared and made at once; one forgotten is asked for again, never wrongly trusted.
RECENT_OBJECTS = 65536

S = TypeVar("S")
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
        # hash -> (compression, monotonic time of the upload that wrote it, -inf if it was there already)
        self._recent: OrderedDict[bytes, tuple[int, float]] = OrderedDict()
        self._in_flight: dict[bytes, Future[bool]] = {}  # uploads sent ahead, not finished

    @property
    def location(self) -> str:
        return self.blobs.location

    def holds(self, size: int) -> bool:
        """Whether a value of ``size`` raw bytes goes to the tier."""
        return size >= self.threshold

    def key(self, digest: bytes, compression: int) -> str:
        """The full key (location included) of a value, for messages."""
        return f"{self.blobs.location}/{blob_key(digest, compression)}"

    def upload(self, values: Iterable[EncodedValue]) -> None:
        """Send ``values`` (unless their keys exist), many at once, and remember each as :meth:`sent`."""
        started = time.monotonic()
        futures = [(v, self.pool.submit(self._put, v)) for v in values]
        for value, future in futures:
            # An object found there already may be a dead writer's, old enough for a sweep to take:
            # remembered as old, so that settle asks for it.
            self._remember(value.hash, value.compression, started if future.result() else -math.inf)

    def upload_ahead(self, values: Iterable[EncodedValue]) -> None:
        """Start sending ``values`` and return at once; :meth:`wait_ahead` waits for them.

        A failed upload is only forgotten: the transaction that writes the
        value sends it again (and reports the failure if it persists).
        """
        started = time.monotonic()
        for value in values:
            with self._counting:
                if value.hash in self._in_flight:
                    continue
                future = self.pool.submit(self._put, value)
                self._in_flight[value.hash] = future
            future.add_done_callback(functools.partial(self._landed, value, started))

    def _landed(self, value: EncodedValue, started: float, future: Future[bool]) -> None:
        if future.exception() is None:
            self._remember(value.hash, value.compression, started if future.result() else -math.inf)
        with self._counting:
            self._in_flight.pop(value.hash, None)

    def wait_ahead(self, digests: Iterable[bytes]) -> None:
        """Wait until the uploads sent ahead for ``digests`` have ended (whether or not they succeeded)."""
        with self._counting:
            futures = [f for f in map(self._in_flight.get, digests) if f is not None]
        wait(futures)

    def _remember(self, digest: bytes, compression: int, when: float) -> None:
        with self._counting:
            self._recent[digest] = (compression, when)
            self._recent.move_to_end(digest)
            while len(self._recent) > RECENT_OBJECTS:
                self._recent.popitem(last=False)

    def sent(self, digest: bytes) -> int | None:
        """The compression flag of the object this process sent for ``digest`` less than half a grace
        period ago (no sweep may delete it yet), None if there is none."""
        with self._counting:
            found = self._recent.get(digest)
        if found is None or found[1] <= time.monotonic() - self.grace / 2:
            return None
        return found[0]

    def _put(self, value: EncodedValue) -> bool:
        self._count("PUT")
        return self.blobs.put_new(blob_key(value.hash, value.compression), value.stored)

    def settle(self, values: list[EncodedValue]) -> None:
        """Under the commit lock, before their rows go in: make sure every object of ``values`` is there.

        Objects this process sent less than half a grace period ago are (no
        sweep may delete them yet); the others are asked for (HEAD), and sent
        again if a sweep removed them.
        """
        doubtful = [v for v in values if self.sent(v.hash) != v.compression]
        there = self.map(self._exists, doubtful)
        self.upload([v for v, found in zip(doubtful, there) if not found])

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

    def map(self, fn: Callable[[S], T], items: list[S]) -> list[T]:
        """``[fn(item) for item in items]``, on the tier's request threads."""
        return list(self.pool.map(fn, items))

    def close(self) -> None:
        self.pool.shutdown(wait=True)
        self.blobs.close()
