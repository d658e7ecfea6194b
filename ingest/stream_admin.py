"""Removing, renaming and trimming streams: what ``windvane streams rm / mv / trim`` do.

Each change is one commit. History keeps what it replaced: a read at an
earlier tid (``arrays.open_stream(store, tag, at=tid)``) still sees the
stream, its old name or its dropped rows, until ``windvane store pack``
drops the revisions no reader needs.

A tag's stream, its quarantine stream and its import records (the
positions where ``windvane import`` and ``windvane tail`` resume, and the
content hashes of imported files) go together: removing a
stream removes all three, renaming renames all three.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from windvane import arrays, neostore
from windvane.arrays import stream_edit

from .errors import IngestError
from .imports import PREFIX as POSITIONS

TIME = "time"


class StreamAdminError(IngestError):
    """A stream cannot be removed, renamed or trimmed as asked; the message says why."""


class NoSuchStream(StreamAdminError):
    """The store has no stream (nor quarantine stream) of that tag."""


@dataclass(frozen=True)
class Change:
    """What one command changed, and the commit that did it (None: nothing to do, nothing committed)."""

    tag: str
    rows: int  # rows removed, moved, or dropped by a trim
    quarantined: int  # rows of the quarantine stream removed or moved
    records: int  # import records (positions, content hashes) removed or moved
    tid: bytes | None


def _import_records(tag: str) -> str:
    return f"{POSITIONS}{tag}/"


def _parts(tx: arrays.Transaction, tag: str) -> tuple[bool, bool, list[str]]:
    """Whether ``tag`` has a stream, a quarantine stream, and the keys of its import records."""
    has = [tag in arrays.list_streams(tx, quarantine=q) for q in (False, True)]
    return has[0], has[1], [e.key for e in tx.raw_list(_import_records(tag))]


def _rows(tx: arrays.Transaction, tag: str, present: bool, *, quarantine: bool = False) -> int:
    return len(arrays.open_stream(tx, tag, quarantine=quarantine)) if present else 0


def _existing(tx: arrays.Transaction, tag: str) -> tuple[bool, bool, list[str]]:
    arrays.stream_path(tag)  # InvalidTagError for a tag that cannot be one
    tx.lock()
    stream, quarantine, records = _parts(tx, tag)
    if not (stream or quarantine):
        raise NoSuchStream(f"no stream {tag!r} in the store (windvane streams lists them)")
    return stream, quarantine, records


def remove(store: neostore.Store, tag: str) -> Change:
    """Remove stream ``tag``, its quarantine stream and its import records, in one commit."""
    with arrays.transaction(store, message=f"remove stream {tag}") as tx:
        stream, quarantine, records = _existing(tx, tag)
        rows, quarantined = _rows(tx, tag, stream), _rows(tx, tag, quarantine, quarantine=True)
        for present, q in ((stream, False), (quarantine, True)):
            if present:
                stream_edit.remove(tx, tag, quarantine=q)
        tx.delete_many(records, raw=True)
    return Change(tag, rows, quarantined, len(records), tx.tid)


def rename(store: neostore.Store, old: str, new: str) -> Change:
    """Rename stream ``old`` to ``new`` (its quarantine stream and import records too), in one commit.

    StreamAdminError if ``new`` is taken (by a stream or a quarantine stream) or is ``old``.
    """
    arrays.stream_path(new)
    if new == old:
        raise StreamAdminError(f"stream {old!r} already has that name")
    with arrays.transaction(store, message=f"rename stream {old} to {new}") as tx:
        stream, quarantine, records = _existing(tx, old)
        taken = _parts(tx, new)
        if taken[0] or taken[1]:
            raise StreamAdminError(
                f"there is a stream {new!r} already; remove it first (windvane streams rm {new}) or pick another name"
            )
        moved = []
        for present, q in ((stream, False), (quarantine, True)):
            if present:
                moved.append(
                    stream_edit.refill(tx, old, stream_edit.read_rows(tx, old, quarantine=q), quarantine=q, to=new)
                )
            else:
                moved.append(0)
        values = tx.raw_get_many(records)
        tx.delete_many(records, raw=True)
        tx.set_many({_import_records(new) + key[len(_import_records(old)) :]: value for key, value in values.items()})
    return Change(old, moved[0], moved[1], len(records), tx.tid)


def trim(store: neostore.Store, tag: str, before_ns: int) -> Change:
    """Drop the rows of stream ``tag`` whose time is before ``before_ns`` (ns since the epoch), in one commit.

    Nothing is committed when no row is that old. The quarantine stream is
    left as it is (its records wait for ``windvane quarantine replay``).
    """
    with arrays.transaction(store, message=f"trim stream {tag} before {np.datetime64(before_ns, 'ns')} UTC") as tx:
        stream, _, _ = _existing(tx, tag)
        if not stream:
            raise NoSuchStream(f"tag {tag!r} has a quarantine stream but no stream to trim")
        rows = stream_edit.read_rows(tx, tag)
        keep = rows[TIME] >= before_ns
        dropped = int(len(keep) - np.count_nonzero(keep))
        if not dropped:
            tx.abort()
            return Change(tag, 0, 0, 0, None)
        stream_edit.refill(tx, tag, {name: values[keep] for name, values in rows.items()})
    return Change(tag, dropped, 0, 0, tx.tid)
