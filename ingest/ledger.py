"""Idempotency keys committed recently, stored in the same commits as the data they acknowledge.

A Forward chunk resent after a lost ack, or an HTTP request retried with
the same ``Idempotency-Key``, must not be stored twice, even across a
``kill -9`` of the service, and even when the resend reaches another
``windvane serve`` on the same store. So each commit that carries keys also
writes them, in small bucket objects named by second
(``_windvane/ingest/keys/<second>-<part>``), and a service loads the
buckets of its window at start.

A commit adds its keys to the newest bucket, which it rewrites whole; a
bucket holding :data:`BUCKET_KEYS` keys is left as it is and the next
commit starts a new part. Rewriting one bucket per second instead made
each commit copy every key committed before it in that second: with many
commits a second of many keys each (MQTT records a key per message) that
grew quadratically and filled the store's history.

Other processes commit keys too. The ledger knows every bucket committed
up to :attr:`KeyLedger.known`; a commit holding the store's commit lock
(nothing else commits meanwhile) passes the newest commit, its ``head``,
to :meth:`KeyLedger.sync`. When ``head`` is ``known`` (one process, or no
other commit since ours), nothing is read; otherwise the buckets committed
since are read, in a listing of a few seconds' names and one read. That
is exact because a commit names its bucket no earlier than the second of
the head it committed after (:meth:`KeyLedger.to_write`): every bucket
written after ``known`` is named at or after ``known``'s second.
"""

from __future__ import annotations

import collections
import math
import time

import msgpack

from windvane import neostore
from windvane.neostore.tids import p64, tid_time, u64

from .config import CommitterConfig

PREFIX = "_windvane/ingest/keys/"
#: Seconds per listing prefix at load: the names of one block share all but their last 5 digits.
_BLOCK = 100_000
#: Keys a bucket takes before the next commit starts a new one: a rewrite copies at most ~20 KB.
BUCKET_KEYS = 1024
_DIGITS = 12  # of the second in a bucket's name
#: Name prefixes a catch-up lists at most (each a range of seconds sharing its leading digits).
_MAX_PREFIXES = 10


def _name(second: int, part: int = 0) -> str:
    return f"{PREFIX}{second:0{_DIGITS}d}-{part:06d}"


def _second(name: str) -> int:
    """The second a bucket's name holds (a name without a part reads as part 0 of its second)."""
    return int(name[len(PREFIX) :].split("-")[0])


def _part(name: str) -> int:
    rest = name[len(PREFIX) :].split("-")
    return int(rest[1]) if len(rest) > 1 else 0


def _order(name: str) -> tuple[int, int]:
    return _second(name), _part(name)


def _prefixes(first: int, last: int) -> list[str]:
    """At most :data:`_MAX_PREFIXES` name prefixes covering the buckets of seconds ``first..last``."""
    for digits in range(_DIGITS, 0, -1):
        step = 10 ** (_DIGITS - digits)
        if last // step - first // step < _MAX_PREFIXES:
            return [f"{PREFIX}{block:0{digits}d}" for block in range(first // step, last // step + 1)]
    return [PREFIX]


def _after(tid: bytes) -> bytes:
    """The ``before`` bound of a read that sees ``tid`` and everything before it."""
    return p64(u64(tid) + 1)


class KeyLedger:
    """The keys committed in the last ``window`` seconds (at most ``max_keys`` of them)."""

    def __init__(self, window: float = CommitterConfig.key_window, max_keys: int = 2_000_000):
        self.window = window
        self.max_keys = max_keys
        #: Every bucket committed up to this tid is read (or written by us).
        self.known = neostore.ZERO
        self._keys: dict[bytes, int] = {}
        self._order: collections.deque[tuple[int, bytes]] = collections.deque()
        # Where the next commit's keys go, and what that bucket holds (empty: it does not exist).
        # No bucket committed up to ``known`` is named after it.
        self._bucket_second = -1
        self._bucket_part = 0
        self._bucket: list[bytes] = []

    def __contains__(self, key: bytes) -> bool:
        return key in self._keys

    def __len__(self) -> int:
        return len(self._keys)

    def load(self, store: neostore.Store) -> int:
        """Read the buckets of the window from ``store``; returns how many keys were loaded."""
        head = store.last_transaction()
        now = int(time.time())
        oldest = now - int(self.window)
        names = []
        for block in range(oldest // _BLOCK, now // _BLOCK + 1):
            names += self._list(store, [_name(block * _BLOCK)[: len(PREFIX) + 7]], head, oldest)
        last = None
        for name, keys in self._read(store, names, head):
            self._remember(_second(name), keys)
            last = name
        if last is not None:
            # Where the next commit's keys go: a new part, so that buckets of older names are never rewritten.
            self._bucket_second, self._bucket_part, self._bucket = _second(last), _part(last) + 1, []
        self.known = head
        return len(self._keys)

    def sync(self, store: neostore.Store, head: bytes) -> int:
        """Read the buckets committed after :attr:`known` up to ``head``, the newest commit, read holding
        the commit lock; returns how many of their keys were new here (0 without a query if ``head`` is
        :attr:`known`)."""
        if head == self.known:
            return 0
        now = time.time()
        first = max(math.floor(tid_time(u64(self.known))), int(now - self.window))
        last = max(math.floor(tid_time(u64(head))), int(now), self._bucket_second) + 1
        found = [e for e in self._list(store, _prefixes(first, last), head, first) if e.serial > self.known]
        before = len(self._keys)
        newest: tuple[str, list[bytes]] | None = None
        for name, keys in self._read(store, found, head):
            # A bucket read again (another process extended it) holds keys known already: not twice in _order.
            self._remember(_second(name), [k for k in keys if k not in self._keys])
            newest = (name, keys)
        if newest is not None and _order(newest[0]) >= (self._bucket_second, self._bucket_part):
            # Another process's bucket is the newest: extend it (its keys included), or start the next part.
            self._bucket_second, self._bucket_part = _order(newest[0])
            self._bucket = list(newest[1])
        self.known = head
        return len(self._keys) - before

    def to_write(self, keys: list[bytes], head: bytes | None = None) -> tuple[str, bytes, tuple[int, int], list[bytes]]:
        """``(name, value, where, bucket)`` to store with a commit of ``keys``; pass ``where``
        and ``bucket`` to :meth:`committed` once the commit succeeded.

        ``head``: the newest commit, read holding the commit lock (see the
        module docstring); None only where no other process writes keys.
        """
        second = max(int(time.time()), self._bucket_second)
        if head is not None and head != neostore.ZERO:
            second = max(second, math.floor(tid_time(u64(head))))
        if second != self._bucket_second:
            part, bucket = 0, list(keys)
        elif self._bucket and len(self._bucket) + len(keys) > BUCKET_KEYS:
            part, bucket = self._bucket_part + 1, list(keys)
        else:
            part, bucket = self._bucket_part, self._bucket + keys
        return _name(second, part), msgpack.packb(bucket, use_bin_type=True), (second, part), bucket

    def committed(
        self,
        where: tuple[int, int],
        bucket: list[bytes],
        keys: list[bytes],
        tid: bytes | None = None,
        after: bytes | None = None,
    ) -> None:
        """Record that ``keys`` are committed (in the bucket at ``where``, now ``bucket``), in commit
        ``tid`` made holding the commit lock taken after commit ``after`` (see :meth:`advanced`)."""
        (self._bucket_second, self._bucket_part), self._bucket = where, bucket
        self._remember(where[0], keys)
        if tid is not None and after is not None:
            self.advanced(tid, after)

    def advanced(self, tid: bytes, after: bytes) -> None:
        """Our commit ``tid`` (holding the commit lock taken after commit ``after``) is made: if the
        ledger knew every bucket up to ``after``, it knows them up to ``tid`` (no other commit came
        between)."""
        if self.known == after:
            self.known = tid

    # -- reading buckets ------------------------------------------------------------------

    @staticmethod
    def _list(store: neostore.Store, prefixes: list[str], head: bytes, oldest: int) -> list[neostore.NamedRevision]:
        """The buckets under ``prefixes`` as of ``head``, of second ``oldest`` or later."""
        out = []
        for prefix in prefixes:
            for entry in store.list_names(prefix.encode(), before=_after(head)):
                if _second(entry.name.decode()) >= oldest:
                    out.append(entry)
        return out

    @staticmethod
    def _read(
        store: neostore.Store, entries: list[neostore.NamedRevision], head: bytes
    ) -> list[tuple[str, list[bytes]]]:
        """``(name, keys)`` of each of ``entries`` as of ``head``, oldest name first."""
        entries = sorted(entries, key=lambda e: _order(e.name.decode()))
        values = store.load_many([e.oid for e in entries], batch=64, before=_after(head), skip_missing=True)
        return [
            (e.name.decode(), msgpack.unpackb(value)) for e, (value, _) in zip(entries, values) if value is not None
        ]

    def _remember(self, second: int, keys: list[bytes]) -> None:
        for key in keys:
            self._keys[key] = second
            self._order.append((second, key))
        oldest = time.time() - self.window
        while self._order and (self._order[0][0] < oldest or len(self._keys) > self.max_keys):
            second, key = self._order.popleft()
            if self._keys.get(key) == second:
                del self._keys[key]
