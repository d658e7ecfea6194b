"""``at=``: a point of history (a tid, a datetime, ISO 8601 text, a Unix time) as a snapshot bound.

A snapshot is read with ``before`` = the first tid it must not see. A tid
(8 bytes, or the hex text the command line prints, ``0x040d6ae3f1dab299``)
means "as that commit left it" (the commit included); a time means "what
had been committed then". Naive datetimes and ISO text without a zone are
taken as UTC, like tids.
"""

from __future__ import annotations

import numbers
from datetime import datetime

import numpy as np

from windvane import neostore

from .errors import SnapshotError, TimeError
from .keys import next_tid_after
from .times import NS, moment_ns

At = bytes | datetime | str | float | int


def describe(at: At) -> str:
    """``at`` as words for error messages."""
    if isinstance(at, (bytes, bytearray)):
        return f"at tid 0x{bytes(at).hex()}"
    return f"at {at}"


def parse_at(at: At) -> bytes:
    """The ``before`` bound ``at`` names, without asking the store.

    SnapshotError if it is malformed (a tid of another length, text that is
    neither a tid nor a time); TypeError if it is of a type ``at=`` does not take.
    """
    if isinstance(at, (bytes, bytearray)) or (isinstance(at, str) and neostore.tids.looks_like_tid(at)):
        try:
            return next_tid_after(neostore.as_tid(at))
        except neostore.TidError as exc:
            raise SnapshotError(f"{exc} (arrays.history lists them)") from None
    if isinstance(at, (datetime, np.datetime64, str)):
        try:
            ns = moment_ns(at, "at=")
        except TimeError as exc:
            raise SnapshotError(f"{exc}; or a tid as `windvane` prints it (0x040d6ae3f1dab299)") from None
        return neostore.tid_at(ns / NS)
    number: object = at  # numpy's numbers too, which the annotation leaves out
    if isinstance(number, numbers.Real) and not isinstance(at, bool):
        return neostore.tid_at(float(number))
    raise TypeError(
        f"at= takes a tid (8 bytes or 0x and 16 hex digits), a datetime, ISO 8601 text or a Unix time, "
        f"not {type(at).__name__}"
    )


def packed_away(before: bytes, packed: bytes) -> bool:
    """Whether the snapshot ``before`` reads was removed by a pack up to tid ``packed`` (``Store.pack_tid()``).

    A pack up to P keeps what a reader sees from P on: the snapshot bounded by
    ``before`` is gone if ``before <= P``; the commit with tid T can be opened
    (``at=T``, bound T + 1) only if ``T >= P``.
    """
    return packed != neostore.ZERO and before <= packed


def snapshot_bound(store: neostore.Store, at: At) -> bytes:
    """The ``before`` bound that reads ``store`` as it was at ``at``.

    A time in the future reads the latest commit (and never a later one).
    SnapshotError if ``at`` is malformed or older than the last pack (that
    state was removed).
    """
    before = parse_at(at)
    latest = next_tid_after(store.last_transaction())
    if before > latest:
        before = latest
    packed = store.pack_tid()
    if packed_away(before, packed):
        raise SnapshotError(
            f"{describe(at)} is before the last pack (tid 0x{packed.hex()}): that state was removed; read a later point"
        )
    return before
