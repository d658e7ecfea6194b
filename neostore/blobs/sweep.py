"""The orphan sweep: delete the blob tier's objects no row references, keeping the rule :mod:`.tier` states.

Objects are listed page by page and judged a batch at a time, so memory is
bounded by the batch, not the bucket. An object is deleted only if it is
older than the grace period and, under the store's commit lock, no ``data``
row with ``chunks = TIERED`` names its (hash, compression); the deletion is
sent before the lock is released. A writer, for its part, checks under the
same lock every object it did not upload less than half a grace ago (see
:meth:`~neostore.blobs.tier.BlobTier.settle`), so no committed row ever
points at an object a sweep removed. Keys the tier did not make are left
alone and counted. A sweep that leaves nothing of the store's drops its
recorded location, so that the store opens without ``?blobs=`` again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._schema import forget_unused_blob_location
from ..pool import locked_transaction
from ..sql import chunked
from .base import ListedBlob
from .location import parse_key
from .tier import TIERED

if TYPE_CHECKING:
    from ..backends.base import Lease
    from ..store import Store

#: Objects judged per batch (one query and one DeleteObjects request under the commit lock).
SWEEP_BATCH = 1000


@dataclass
class SweepStats:
    """What a sweep saw and did."""

    listed: int = 0  # objects listed
    deleted: int = 0  # objects deleted
    deleted_bytes: int = 0
    young: int = 0  # kept: younger than the grace period
    referenced: int = 0  # kept: a row references them
    foreign: int = 0  # kept: keys the tier does not make
    batches: int = 0
    location_forgotten: bool = False  # the store's location dropped: it kept nothing there


def sweep(
    store: Store,
    *,
    grace: float | None = None,
    batch: int = SWEEP_BATCH,
    progress: Callable[[int], None] | None = None,
) -> SweepStats:
    """Delete the objects of ``store``'s tier that no row references and are older than ``grace`` seconds.

    ``grace`` defaults to the tier's (the Store's ``blob_grace``). A grace
    shorter than the longest any writer takes from upload to commit is safe
    only when every writer uses it too: each trusts its own uploads for half
    of its own grace. ``progress(n)`` is called with the objects judged after
    each batch.
    """
    tier = store.tier
    if tier is None:
        raise ValueError("the store has no blob tier")
    stats = SweepStats()
    cutoff = time.time() - (tier.grace if grace is None else grace)
    pending: list[tuple[ListedBlob, tuple[bytes, int]]] = []
    with store.maintenance("blob sweep") as lease, store.pool.writer(transaction=False) as conn:
        for blob in tier.blobs.list():
            stats.listed += 1
            parsed = parse_key(blob.key)
            if parsed is None:
                stats.foreign += 1
            elif blob.modified > cutoff:
                stats.young += 1
            else:
                pending.append((blob, parsed))
            if len(pending) >= batch:
                _sweep_batch(store, conn, pending, stats, lease)
                if progress is not None:
                    progress(len(pending))
                pending = []
        if pending:
            _sweep_batch(store, conn, pending, stats, lease)
            if progress is not None:
                progress(len(pending))
        if not stats.referenced and not stats.young:
            # Nothing of the store's is left there: it opens without ?blobs= again (a writer tiering records it anew).
            with locked_transaction(store.backend, conn, store.commit_lock_timeout, lease) as cur:
                stats.location_forgotten = forget_unused_blob_location(cur)
    return stats


def _sweep_batch(
    store: Store, conn: Any, batch: list[tuple[ListedBlob, tuple[bytes, int]]], stats: SweepStats, lease: Lease
) -> None:
    """Under the commit lock: find which of ``batch`` rows reference, delete the others' objects."""
    backend, tier = store.backend, store.tier
    assert tier is not None
    hashes = sorted({digest for _, (digest, _) in batch})
    referenced: set[tuple[bytes, int]] = set()
    with locked_transaction(backend, conn, store.commit_lock_timeout, lease) as cur:
        for part in chunked(hashes, backend.max_params):
            cur.execute(
                f"SELECT hash, compression FROM data WHERE chunks = {TIERED} AND hash IN {backend.in_list(len(part))}",
                part,
            )
            referenced.update((bytes(digest), compression) for digest, compression in cur.fetchall())
        dead = [blob for blob, parsed in batch if parsed not in referenced]
        # Deleted before the lock is let go: a writer settling meanwhile would see them still there.
        tier.blobs.delete(blob.key for blob in dead)
    stats.batches += 1
    stats.referenced += len(batch) - len(dead)
    stats.deleted += len(dead)
    stats.deleted_bytes += sum(blob.size for blob in dead)
