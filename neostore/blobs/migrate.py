"""Moving a store's existing big values between its database and its blob tier, while writers keep running.

:func:`move_out` sends the values of at least the tier's threshold that the
database holds to the object store; :func:`move_in` brings every tiered
value back. Both work a batch at a time, a batch bounded in bytes: the bytes
travel (upload, or GET and hash check) before the commit lock is taken, then
one short locked transaction rewrites the batch's rows. A row is rewritten
only if it is still as it was read (a pack or another mover may have been
there), so a run killed at any point leaves every value readable, and a
rerun finishes the job. Objects a killed run uploaded, and those ``move_in``
leaves behind (readers in flight may still GET them), are the sweep's
(:mod:`.sweep`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._schema import forget_unused_blob_location
from ..errors import BlobStoreError
from ..pool import locked_transaction
from ..tids import p64
from ..values import EncodedValue
from .tier import TIERED

if TYPE_CHECKING:
    from ..store import Store

#: Stored bytes moved per batch (per locked transaction).
BATCH_BYTES = 64 * 1024 * 1024

#: Rows looked at per query when choosing a batch.
_ROWS = 500


@dataclass
class MoveStats:
    """What a move did: values and their stored bytes moved, in how many batches; whether the location was dropped."""

    values: int = 0
    bytes: int = 0
    batches: int = 0
    location_forgotten: bool = False


Progress = Callable[[int], None]


def to_move(store: Store, out: bool) -> tuple[int, int]:
    """``(values, stored bytes)`` a :func:`move_out` (``out``) or :func:`move_in` would move now."""
    where, params = _where(store, out)
    (count, size), *_ = store.pool.query(f"SELECT COUNT(*), SUM(size) FROM data WHERE {where}", params)
    return int(count), int(size or 0)


def recorded_location(store: Store) -> str | None:
    """The blob location ``store`` records (``s3://bucket/prefix``), None if it keeps no values in one."""
    rows = store.pool.query("SELECT value FROM config WHERE name = 'blobs'")
    return str(rows[0][0]) if rows else None


def _where(store: Store, out: bool) -> tuple[str, tuple[Any, ...]]:
    if out:
        assert store.tier is not None
        return f"chunks <> {TIERED} AND size >= ?", (store.tier.threshold,)
    return f"chunks = {TIERED}", ()


def move_out(store: Store, *, batch_bytes: int | None = None, progress: Progress | None = None) -> MoveStats:
    """Move the database's values of at least the threshold to the tier; ``progress(raw bytes)`` per batch."""
    tier = store.tier
    if tier is None:
        raise BlobStoreError(f"{store.url.display_name} was opened without ?blobs=: say where the values go")
    stats = MoveStats()
    with store.maintenance("moving values to the blob tier"):
        for batch in _batches(store, True, batch_bytes or BATCH_BYTES):
            # A row packed away or moved since the batch was listed has no bytes here: left out.
            found = [(row, _stored(store, row[0], row[4])) for row in batch]
            batch = [row for row, stored in found if stored is not None]
            values = [
                EncodedValue(bytes(row[1]), row[3], row[2], stored) for row, stored in found if stored is not None
            ]
            tier.upload(values)
            with _locked(store) as cur:
                tier.settle(values)
                for (data_id, _, _, _, chunks, _), v in zip(batch, values):
                    cur.execute(
                        f"UPDATE data SET chunks = {TIERED}, value = NULL WHERE id = ? AND chunks = ? AND compression = ?",
                        (data_id, chunks, v.compression),
                    )
                    if cur.rowcount == 1:
                        cur.execute("DELETE FROM bigdata WHERE data_id = ?", (data_id,))
                        stats.values += 1
                        stats.bytes += len(v.stored)
            stats.batches += 1
            if progress is not None:
                progress(sum(row[3] for row in batch))
    return stats


def move_in(store: Store, *, batch_bytes: int | None = None, progress: Progress | None = None) -> MoveStats:
    """Move every tiered value back into the database, then drop the store's blob location if none is left."""
    tier = store.tier
    if tier is None:
        raise BlobStoreError(f"{store.url.display_name} was opened without ?blobs=: say where the values are")
    stats = MoveStats()
    with store.maintenance("moving values back into the database"):
        split = store.backend.split_size
        for batch in _batches(store, False, batch_bytes or BATCH_BYTES):
            stored = list(tier.pool.map(lambda row: _checked(store, row), batch))
            with _locked(store) as cur:
                for (data_id, *_), data in zip(batch, stored):
                    pieces = [data[i : i + split] for i in range(0, len(data), split)] if len(data) > split else []
                    cur.execute(
                        f"UPDATE data SET chunks = ?, value = ? WHERE id = ? AND chunks = {TIERED}",
                        (len(pieces), None if pieces else data, data_id),
                    )
                    if cur.rowcount == 1:
                        for seq, piece in enumerate(pieces):
                            cur.execute(
                                "INSERT INTO bigdata (data_id, seq, value) VALUES (?, ?, ?)", (data_id, seq, piece)
                            )
                        stats.values += 1
                        stats.bytes += len(data)
            stats.batches += 1
            if progress is not None:
                progress(sum(row[3] for row in batch))
        with _locked(store) as cur:
            # Under the lock: a writer still tiering new values keeps the location recorded.
            stats.location_forgotten = forget_unused_blob_location(cur)
    return stats


def _batches(store: Store, out: bool, batch_bytes: int) -> Any:
    """Rows ``(id, hash, compression, size, chunks, None)`` to move, in batches of about ``batch_bytes``."""
    where, params = _where(store, out)
    position = 0
    while True:
        rows = store.pool.query(
            # Without the values: a batch's are read one by one as it goes (bounded by the batch, not by _ROWS).
            f"SELECT id, hash, compression, size, chunks, NULL FROM data WHERE id > ? AND {where} "
            f"ORDER BY id LIMIT {_ROWS}",
            (position, *params),
        )
        if not rows:
            return
        batch: list[Any] = []
        taken = 0
        for row in rows:
            if batch and taken + row[3] > batch_bytes:
                break
            batch.append(row)
            taken += row[3]
        position = batch[-1][0]
        yield batch


def _stored(store: Store, data_id: int, chunks: int) -> bytes | None:
    """The stored bytes of a database-held value (None if the row is gone or no longer holds them)."""
    if not chunks:
        rows = store.pool.query("SELECT value FROM data WHERE id = ?", (data_id,))
        return bytes(rows[0][0]) if rows and rows[0][0] is not None else None
    rows = store.pool.query("SELECT value FROM bigdata WHERE data_id = ? ORDER BY seq", (data_id,))
    # Never upload part of a value under its hash: a value packed away meanwhile has fewer pieces, or none.
    return b"".join(bytes(row[0]) for row in rows) if len(rows) == chunks else None


def _checked(store: Store, row: Any) -> bytes:
    """A tiered row's stored bytes from the object store, checked against the row's hash."""
    _, digest, compression, size = row[:4]
    assert store.tier is not None
    stored = store.tier.fetch(bytes(digest), compression)
    # decode raises CorruptDataError (naming the object) if the bytes are not the value's.
    store.reader.decode(
        p64(0), None, bytes(digest), compression, size, stored, where=store.tier.key(bytes(digest), compression)
    )
    return bytes(stored)


@contextmanager
def _locked(store: Store) -> Iterator[Any]:
    """A short write transaction under the commit lock and the maintenance lease the move holds, on a pooled
    writer: its cursor."""
    with store.maintenance("moving values") as lease, store.pool.writer(transaction=False) as conn:
        with locked_transaction(store.backend, conn, store.commit_lock_timeout, lease) as cur:
            yield cur
