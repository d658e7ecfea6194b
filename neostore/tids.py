"""Transaction ids: 8-byte, strictly increasing, ZODB TimeStamp compatible."""

from __future__ import annotations

import struct
import time

from persistent.TimeStamp import TimeStamp

_Q = struct.Struct(">Q")

ZERO = b"\0" * 8


def p64(value: int) -> bytes:
    """Pack an unsigned 64-bit integer into 8 big-endian bytes."""
    return _Q.pack(value)


def u64(value: bytes) -> int:
    """Unpack 8 big-endian bytes into an integer."""
    return int(_Q.unpack(value)[0])


def tid_from_time(seconds: float) -> int:
    """The ZODB TimeStamp of a Unix time, as an integer."""
    gm = time.gmtime(seconds)
    stamp = TimeStamp(*gm[:5], gm.tm_sec + seconds % 1)
    return u64(stamp.raw())


def next_tid(last: int, now: float | None = None) -> int:
    """A tid after ``last``: the current time's, or ``last + 1`` if the clock is behind."""
    candidate = tid_from_time(time.time() if now is None else now)
    return candidate if candidate > last else last + 1


def tid_time(tid: int) -> float:
    """The Unix time a tid stands for."""
    return float(TimeStamp(p64(tid)).timeTime())


def tid_at(when: float) -> bytes:
    """The smallest tid of a commit made after Unix time ``when``.

    ``before=tid_at(t)`` reads what had been committed at time ``t``.
    """
    return p64(tid_from_time(when) + 1)
