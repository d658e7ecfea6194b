"""``at=``: a point of history (a tid, a datetime, a Unix time) as a snapshot bound.

A snapshot is read with ``before`` = the first tid it must not see. A tid
means "as that commit left it" (the commit included); a time means "what
had been committed then". Naive datetimes are taken as UTC, like tids.
"""

from __future__ import annotations

import numbers
from datetime import UTC, datetime

from windvane import neostore

from .errors import SnapshotError
from .keys import next_tid_after

At = bytes | datetime | float | int


def describe(at: At) -> str:
    """``at`` as words for error messages."""
    if isinstance(at, (bytes, bytearray)):
        return f"at tid 0x{bytes(at).hex()}"
    return f"at {at}"


def parse_at(at: At) -> bytes:
    """The ``before`` bound ``at`` names, without asking the store (SnapshotError if malformed)."""
    if isinstance(at, (bytes, bytearray)):
        if len(at) != 8:
            raise SnapshotError(
                f"a tid is 8 bytes, not {len(at)}: pass the tid of a commit (arrays.history lists them)"
            )
        return next_tid_after(bytes(at))
    if isinstance(at, datetime):
        moment = at if at.tzinfo is not None else at.replace(tzinfo=UTC)
        return neostore.tid_at(moment.timestamp())
    if isinstance(at, numbers.Real) and not isinstance(at, bool):
        return neostore.tid_at(float(at))
    raise SnapshotError(f"at= takes a tid (8 bytes), a datetime or a Unix time, not {type(at).__name__}")


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
