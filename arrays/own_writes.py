"""What a transaction wrote: each key's oid and size (None: deleted), listed by directory, in write order."""

from __future__ import annotations

from collections.abc import Iterable


class OwnWrites:
    """The keys one :class:`~arrays.Transaction` wrote (set or deleted), the last write of each.

    Each write has a sequence number: :attr:`mark` and :meth:`since` let a
    writer that keeps state across transactions (a StreamWriter) tell
    whether anything but itself wrote its keys. Not thread-safe: the
    transaction serialises its calls.
    """

    def __init__(self) -> None:
        self._written: dict[str, tuple[bytes, int | None]] = {}  # key -> (oid, size; None = deleted)
        # directory ("a/b/") -> the written keys under it, made when first listed: a transaction that
        # creates thousands of streams checks each path without scanning every key written before.
        self._by_dir: dict[str, set[str]] | None = None
        self._seq: dict[str, int] = {}  # key -> the write count when it was last written
        self._count = 0

    def __contains__(self, key: object) -> bool:
        return key in self._written

    def oid_and_size(self, key: str) -> tuple[bytes, int | None]:
        """The oid ``key`` was written to and its size (None: deleted); KeyError if it was not written."""
        return self._written[key]

    def record(self, key: str, oid: bytes, size: int | None) -> None:
        """``key``'s object ``oid`` was given a value of ``size`` bytes (None: deleted)."""
        self._count += 1
        if self._by_dir is not None and key not in self._written:
            self._index(key)
        self._written[key] = (oid, size)
        self._seq[key] = self._count

    @property
    def mark(self) -> int:
        """The number of writes so far: :meth:`since` tells which keys were written after it."""
        return self._count

    def since(self, mark: int, keys: Iterable[str]) -> bool:
        """Whether any of ``keys`` was written after ``mark`` (0: ever)."""
        seq = self._seq
        for key in keys:  # a loop, not any() over a generator: thousands of writers ask this per commit
            if seq.get(key, 0) > mark:
                return True
        return False

    def oids(self) -> frozenset[bytes]:
        """The oid of every key written."""
        return frozenset(oid for oid, _ in self._written.values())

    def under(self, prefix: str) -> Iterable[str]:
        """The keys written (or deleted) under ``prefix``."""
        if not prefix.endswith("/"):
            return [key for key in self._written if key.startswith(prefix)]
        if self._by_dir is None:
            self._by_dir = {}
            for key in self._written:
                self._index(key)
        return self._by_dir.get(prefix, ())

    def _index(self, key: str) -> None:
        assert self._by_dir is not None
        slash = key.find("/")
        while slash != -1:
            self._by_dir.setdefault(key[: slash + 1], set()).add(key)
            slash = key.find("/", slash + 1)
