"""Transaction ids: 8-byte, strictly increasing, ZODB TimeStamp compatible.

A tid the store hands out is a :class:`Tid`: the 8 bytes themselves (a
``bytes`` subclass, so it goes wherever bytes go), written the way the
command line writes it, ``0x040d6ae3f1dab299``. That hex text is a tid's
canonical text: :func:`as_tid` (and ``Tid(text)``) read it back.
"""

from __future__ import annotations

import re
import struct
import time
from typing import Any

from persistent.TimeStamp import TimeStamp

from .errors import NeoStoreError

_Q = struct.Struct(">Q")
_HEX = re.compile(r"(?:0[xX])?([0-9a-fA-F]{16})")


class TidError(NeoStoreError, ValueError):
    """A value that is no tid: neither 8 bytes nor 16 hex digits (``0x040d6ae3f1dab299``)."""


class Tid(bytes):
    """A transaction id: 8 big-endian bytes, shown as ``0x`` and 16 hex digits.

    ``Tid(value)`` takes 8 bytes or that hex text (the ``0x`` is optional);
    :class:`TidError` for anything else.
    """

    __slots__ = ()

    def __new__(cls, value: Any) -> Tid:
        if isinstance(value, str):
            found = _HEX.fullmatch(value.strip())
            if found is None:
                raise TidError(
                    f"{value!r} is not a tid: write it as 0x and 16 hex digits (0x040d6ae3f1dab299), "
                    "as `windvane` prints it"
                )
            return super().__new__(cls, bytes.fromhex(found.group(1)))
        if not isinstance(value, (bytes, bytearray, memoryview)):
            raise TidError(f"a tid is 8 bytes or its hex text (0x040d6ae3f1dab299), not {type(value).__name__}")
        raw = bytes(value)
        if len(raw) != 8:
            raise TidError(f"a tid is 8 bytes, not {len(raw)}: pass the tid of a commit")
        return super().__new__(cls, raw)

    def __str__(self) -> str:
        return f"0x{self.hex()}"

    def __repr__(self) -> str:
        return f"Tid('{self}')"

    def __reduce__(self) -> tuple[Any, ...]:
        return Tid, (bytes(self),)


def as_tid(value: Any) -> Tid:
    """``value`` (8 bytes, a Tid, or hex text ``0x040d6ae3f1dab299``) as a :class:`Tid`; TidError otherwise."""
    return value if type(value) is Tid else Tid(value)


def looks_like_tid(text: str) -> bool:
    """Whether ``text`` is written as a tid is (``0x`` and 16 hex digits), not as a time."""
    return bool(re.fullmatch(r"0[xX][0-9a-fA-F]{16}", text.strip()))


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


def tid_at(when: float) -> Tid:
    """The smallest tid of a commit made after Unix time ``when``.

    ``before=tid_at(t)`` reads what had been committed at time ``t``.
    """
    return Tid(p64(tid_from_time(when) + 1))
