"""Keys over neostore: the byte values of a zarr hierarchy, read at one snapshot.

A key (``"temperature/c/0/3"``) is a neostore name; its value is the named
object's value. :class:`Snapshot` reads either a fixed point of history
(``before`` = the first tid it must not see) or the head (``before=None``:
every call sees the latest commit).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import neostore
from neostore import POSKeyError


@dataclass(frozen=True)
class Entry:
    """One key as a snapshot sees it."""

    key: str
    oid: bytes
    serial: bytes
    size: int


def encode_key(key: str) -> bytes:
    return key.encode("utf-8")


class Snapshot:
    """Read-only access to the keys of ``store`` as of ``before`` (None: the head)."""

    def __init__(self, store: neostore.Store, before: bytes | None = None):
        self.store = store
        self.before = before

    @classmethod
    def latest(cls, store: neostore.Store) -> Snapshot:
        """A snapshot pinned at the newest commit: later commits stay invisible to it."""
        return cls(store, next_tid_after(store.last_transaction()))

    def oid(self, key: str) -> bytes | None:
        return self.store.oids_for([encode_key(key)]).get(encode_key(key))

    def get(self, key: str) -> bytes | None:
        """The value of ``key``, or None if it does not exist."""
        oid = self.oid(key)
        if oid is None:
            return None
        try:
            if self.before is None:
                return self.store.load(oid)[0]
            found = self.store.load_before(oid, self.before)
        except POSKeyError:
            return None
        return None if found is None else found[0]

    def get_many(self, keys: Iterable[str]) -> dict[str, bytes]:
        """The values of those ``keys`` that exist, read in bulk."""
        keys = list(keys)
        oids = self.store.oids_for([encode_key(k) for k in keys])
        present = [k for k in keys if encode_key(k) in oids]
        values = self.store.load_many(
            [oids[encode_key(k)] for k in present], before=self.before, skip_missing=True
        )
        return {k: v for k, (v, _) in zip(present, values) if v is not None}

    def get_range(self, key: str, start: int, stop: int | None = None) -> bytes | None:
        """``value[start:stop]`` (negative ``start``: from the end), sliced by the database."""
        oid = self.oid(key)
        if oid is None:
            return None
        try:
            return self.store.load_range(oid, start, stop, before=self.before)
        except POSKeyError:
            return None

    def list(self, prefix: str = "") -> list[Entry]:
        """The keys under ``prefix`` that exist, sorted, with their sizes."""
        return [
            Entry(r.name.decode("utf-8"), r.oid, r.serial, r.size)
            for r in self.store.list_names(encode_key(prefix), before=self.before)
        ]

    def size(self, key: str) -> int | None:
        """The size of ``key``'s value in bytes, or None if it does not exist."""
        found = self.store.list_names(encode_key(key), before=self.before, exact=True)
        return found[0].size if found else None

    def exists(self, key: str) -> bool:
        return self.size(key) is not None


def next_tid_after(tid: bytes) -> bytes:
    """The ``before`` bound that includes ``tid`` and nothing later."""
    return neostore.p64(neostore.u64(tid) + 1)
