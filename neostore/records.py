"""What a Store hands back about its history: transactions, revisions, records, value usage."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .tids import Tid, p64, tid_time, u64


class _Stamped:
    """Something named by a tid, which also says when it was committed."""

    tid: bytes

    @property
    def time(self) -> float:
        """The Unix time of the commit."""
        return tid_time(u64(self.tid))


@dataclass(frozen=True)
class TransactionInfo(_Stamped):
    """A committed transaction's metadata."""

    tid: bytes
    user: bytes
    description: bytes
    extension: bytes
    packed: bool

    @classmethod
    def from_row(cls, row: tuple[Any, ...]) -> TransactionInfo:
        """From a ``trans`` row read as ``tid, user, description, ext, packed``."""
        return cls(Tid(p64(row[0])), bytes(row[1]), bytes(row[2]), bytes(row[3]), bool(row[4]))


@dataclass(frozen=True)
class Record:
    """One object revision of a transaction. ``data`` is None for a deletion."""

    oid: bytes
    tid: bytes
    data: bytes | None
    data_tid: bytes | None


@dataclass(frozen=True)
class Revision(_Stamped):
    """One entry of an object's history."""

    tid: bytes
    size: int
    user: bytes
    description: bytes
    extension: bytes


@dataclass(frozen=True)
class ValueUsage:
    """What committed revisions refer to, and what their distinct values take: see :meth:`Store.value_usage`."""

    references: int  # revisions that refer to a value (deletions refer to none)
    referenced_bytes: int  # the sizes of their values, once per revision: what keeping every copy would take
    values: int  # distinct values among them
    value_bytes: int  # the sizes of those values, each once, before compression
    stored_bytes: int  # the bytes of those values as stored (compressed where that paid)

    @property
    def dedup_ratio(self) -> float:
        """``referenced_bytes / value_bytes``: what storing each value once saves (1.0 for nothing)."""
        return self.referenced_bytes / self.value_bytes if self.value_bytes else 1.0
