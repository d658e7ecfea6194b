"""Pack: drop what no reader at or after a tid can see, in bounded batches.

Every phase walks a table by key range, a batch at a time. Each batch takes
the commit lock and commits, so memory does not grow with the database and
writers wait for at most one batch. Readers never wait: they see each batch
either not yet applied or applied, and a revision visible at or after the
pack tid is never touched.

With ``references`` (a function listing the oids a value refers to), pack
also collects objects unreachable from the root (oid 0) or a name as of the pack tid.
The mark set lives in a temporary table, not in memory.

Last, pack gives the space of what it deleted back to the file system, as
the backend can while others read and write (see ``Backend.reclaim``).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .backends.base import Lease
from .blobs.sweep import SweepStats, sweep
from .errors import ReadOnlyError
from .pool import locked_transaction, rollback_quietly
from .sql import delete_unreferenced_data
from .tids import p64, u64

if TYPE_CHECKING:
    from .store import Store


@dataclass
class PackStats:
    """What a pack removed, and how it went."""

    pack_tid: bytes
    revisions_deleted: int = 0
    objects_collected: int = 0
    data_deleted: int = 0
    batches: int = 0
    seconds: float = 0.0
    disk_before: int = 0  # bytes the database's files took as pack began
    disk_after: int = 0  # ... and as it ended
    notes: list[str] = field(default_factory=list)  # space not given back, and why
    blobs: SweepStats | None = None  # the blob tier's sweep, with a tier

    @property
    def bytes_freed(self) -> int:
        """Disk given back to the file system (0 when writes meanwhile grew the files more)."""
        return max(0, self.disk_before - self.disk_after)


class _Batcher:
    """Adapts the batch size so one batch takes about ``target`` seconds."""

    def __init__(self, target: float, start: int = 1000, low: int = 100, high: int = 20000):
        self.target, self.size, self.low, self.high = target, start, low, high

    def record(self, seconds: float, done: int) -> None:
        if done and seconds > 0:
            rate = done / seconds
            self.size = int(min(self.high, max(self.low, rate * self.target)))


def pack(
    store: Store,
    tid: bytes,
    *,
    references: Callable[[bytes], Iterable[bytes]] | None = None,
    keep: Mapping[bytes, bytes] | None = None,
    reclaim: bool = True,
    vacuum: bool = False,
    batch_seconds: float = 0.1,
    progress: Callable[[str, int], None] | None = None,
) -> PackStats:
    """Remove revisions invisible at ``tid`` and data nothing references.

    ``keep`` maps oids to a tid: their revisions committed after it stay,
    visible or not (a value kept as a chain of revisions, each holding what
    its commit added, needs them). ``reclaim`` then gives the freed space
    back to the file system; ``vacuum`` also rewrites what cannot shrink in
    place (a SQLite file made without incremental vacuum: writers wait;
    on MariaDB, every table pack deletes from, however little it lost).
    ``progress(phase, count)`` is called after each batch, and with phase
    ``"reclaim"`` as that step begins.

    Of ``store`` pack uses its public side only: ``pool`` (one writer for
    the whole pack, reads), ``backend``, ``commit_lock_timeout``,
    ``read_only``, ``load_serial`` and ``tier`` (whose unreferenced objects
    :func:`~neostore.blobs.sweep.sweep` deletes last, phase ``"blobs"``).
    """
    if store.read_only:
        raise ReadOnlyError()
    started = time.monotonic()
    pack_tid = u64(tid)
    stats = PackStats(pack_tid=tid)
    with store.maintenance("pack") as lease, store.pool.writer(transaction=False) as conn:
        stats.disk_before = store.backend.disk_size()
        job = _Pack(store, conn, pack_tid, stats, batch_seconds, progress, lease)
        job.keep = {u64(oid): u64(after) for oid, after in (keep or {}).items()}
        if references is not None:
            job.collect_garbage(references)
        job.drop_old_revisions()
        job.mark_packed()
        job.prune_data()
        job.record()
        if store.tier is not None:
            # After the data rows are pruned: the objects of the values pack removed go too.
            stats.blobs = sweep(store, progress=lambda n: job.progress("blobs", n))
        if reclaim:
            job.progress("reclaim", 0)
            removed = {**job.removed, "obj": stats.revisions_deleted}
            stats.notes = store.backend.reclaim(conn, removed, vacuum=vacuum, lock_timeout=store.commit_lock_timeout)
        stats.disk_after = store.backend.disk_size()
    stats.seconds = time.monotonic() - started
    return stats


class _Pack:
    def __init__(
        self,
        store: Store,
        conn: Any,
        pack_tid: int,
        stats: PackStats,
        target: float,
        progress: Callable[[str, int], None] | None,
        lease: Lease,
    ):
        self.store, self.conn, self.pack_tid, self.stats = store, conn, pack_tid, stats
        self.lease = lease
        self.backend = store.backend
        self.target = target
        self.progress = progress or (lambda phase, count: None)
        self.keep: dict[int, int] = {}
        self.removed: Counter[str] = Counter()  # data and bigdata rows deleted (obj rows: the stats')

    @contextmanager
    def batch(self) -> Iterator[Any]:
        """One locked, committed batch."""
        with locked_transaction(self.backend, self.conn, self.store.commit_lock_timeout, self.lease) as cur:
            yield cur
        self.stats.batches += 1

    def drop_old_revisions(self) -> None:
        """Per oid, keep the newest revision at or before the pack tid (none if a deletion)."""
        batcher = _Batcher(self.target)
        position = -1
        while True:
            began = time.monotonic()
            with self.batch() as cur:
                cur.execute(
                    "SELECT oid, MAX(tid) FROM obj WHERE oid > ? AND tid <= ? GROUP BY oid ORDER BY oid LIMIT ?",
                    (position, self.pack_tid, batcher.size),
                )
                newest = cur.fetchall()
                if not newest:
                    return
                position = newest[-1][0]
                keep = self.keep
                bounds = [(oid, min(tid, keep[oid] + 1) if oid in keep else tid) for oid, tid in newest]
                cur.executemany("DELETE FROM obj WHERE oid = ? AND tid < ?", bounds)
                deleted = max(cur.rowcount, 0)
                oids = [oid for oid, _ in newest]
                cur.execute(
                    f"SELECT oid, tid FROM obj WHERE oid IN {self.backend.in_list(len(oids))} "
                    "AND tid <= ? AND data_id IS NULL",
                    (*oids, self.pack_tid),
                )
                deletions = cur.fetchall()
                if deletions:
                    cur.executemany("DELETE FROM obj WHERE oid = ? AND tid = ?", deletions)
                    deleted += len(deletions)
            self.stats.revisions_deleted += deleted
            batcher.record(time.monotonic() - began, len(newest))
            self.progress("revisions", len(newest))

    def mark_packed(self) -> None:
        position = -1
        while True:
            with self.batch() as cur:
                cur.execute(
                    "SELECT tid FROM trans WHERE tid > ? AND tid <= ? ORDER BY tid LIMIT 5000",
                    (position, self.pack_tid),
                )
                tids = cur.fetchall()
                if not tids:
                    return
                cur.execute(
                    "UPDATE trans SET packed = 1 WHERE tid >= ? AND tid <= ? AND packed = 0",
                    (tids[0][0], tids[-1][0]),
                )
                position = tids[-1][0]

    def prune_data(self) -> None:
        """Delete data rows no revision references (found by index, not refcount)."""
        batcher = _Batcher(self.target)
        position = 0
        while True:
            began = time.monotonic()
            with self.batch() as cur:
                cur.execute("SELECT id FROM data WHERE id > ? ORDER BY id LIMIT ?", (position, batcher.size))
                ids = [row[0] for row in cur.fetchall()]
                if not ids:
                    return
                position = ids[-1]
                self.stats.data_deleted += delete_unreferenced_data(cur, ids, self.backend, self.removed)
            batcher.record(time.monotonic() - began, len(ids))
            self.progress("data", len(ids))

    def record(self) -> None:
        with self.batch() as cur:
            cur.execute("SELECT value FROM config WHERE name = 'pack_tid'")
            previous = int(cur.fetchone()[0])
            cur.execute("UPDATE config SET value = ? WHERE name = 'pack_tid'", (str(max(previous, self.pack_tid)),))

    # -- garbage collection -----------------------------------------------------

    def collect_garbage(self, references: Callable[[bytes], Iterable[bytes]]) -> None:
        """Delete every object not reachable, as of the pack tid, from oid 0.

        Objects written after the pack tid count as roots too, so what a
        concurrent transaction made reachable again is kept.
        """
        cur = self.conn.cursor()
        cur.execute(f"{self.backend.drop_temporary_table} IF EXISTS temp_packmark")
        cur.execute(
            f"CREATE TEMPORARY TABLE temp_packmark (oid {self.backend.uint_type} NOT NULL PRIMARY KEY, "
            "done SMALLINT NOT NULL)"
        )
        self.conn.commit()
        try:
            self._mark_roots(cur, since=self.pack_tid)
            self._mark_reachable(cur, references)
            self._sweep(cur, references)
        finally:
            rollback_quietly(self.conn)
            cur = self.conn.cursor()
            cur.execute(f"{self.backend.drop_temporary_table} temp_packmark")
            self.conn.commit()

    def _mark_roots(self, cur: Any, since: int) -> int:
        cur.execute(f"{self.backend.insert_ignore} INTO temp_packmark (oid, done) VALUES (0, 0)")
        # Named objects are roots: their names reach them, not a reference.
        cur.execute(f"{self.backend.insert_ignore} INTO temp_packmark (oid, done) SELECT oid, 0 FROM name")
        cur.execute(
            f"{self.backend.insert_ignore} INTO temp_packmark (oid, done) SELECT DISTINCT oid, 0 FROM obj WHERE tid > ?",
            (since,),
        )
        self.conn.commit()
        return int(cur.rowcount)

    def _mark_reachable(self, cur: Any, references: Callable[[bytes], Iterable[bytes]]) -> None:
        while True:
            cur.execute("SELECT oid FROM temp_packmark WHERE done = 0 ORDER BY oid LIMIT 500")
            frontier = [row[0] for row in cur.fetchall()]
            if not frontier:
                return
            found: set[int] = set()
            for oid in frontier:
                for value in self._live_values(oid):
                    found.update(u64(ref) for ref in references(value))
            cur.executemany("UPDATE temp_packmark SET done = 1 WHERE oid = ?", [(oid,) for oid in frontier])
            if found:
                cur.executemany(
                    f"{self.backend.insert_ignore} INTO temp_packmark (oid, done) VALUES (?, 0)",
                    [(oid,) for oid in sorted(found)],
                )
            self.conn.commit()
            self.progress("mark", len(frontier))

    def _live_values(self, oid: int) -> Iterator[bytes]:
        """Values of ``oid`` a reader at or after the pack tid can still see."""
        rows = self.store.pool.query(
            "SELECT tid FROM obj WHERE oid = ? AND data_id IS NOT NULL AND "
            "(tid > ? OR tid = (SELECT MAX(tid) FROM obj WHERE oid = ? AND tid <= ?))",
            (oid, self.pack_tid, oid, self.pack_tid),
        )
        for (tid,) in rows:
            yield self.store.load_serial(p64(oid), p64(tid))

    def _sweep(self, cur: Any, references: Callable[[bytes], Iterable[bytes]]) -> None:
        position = -1
        batcher = _Batcher(self.target)
        while True:
            began = time.monotonic()
            with self.batch() as bcur:
                # Objects written since marking began are roots too.
                bcur.execute(
                    "SELECT o.oid FROM obj o LEFT JOIN temp_packmark m ON m.oid = o.oid "
                    "WHERE o.oid > ? AND m.oid IS NULL GROUP BY o.oid HAVING MAX(o.tid) <= ? "
                    "ORDER BY o.oid LIMIT ?",
                    (position, self.pack_tid, batcher.size),
                )
                dead = [row[0] for row in bcur.fetchall()]
                if not dead:
                    return
                position = dead[-1]
                bcur.execute(f"DELETE FROM obj WHERE oid IN {self.backend.in_list(len(dead))}", dead)
                self.stats.revisions_deleted += max(bcur.rowcount, 0)
                self.stats.objects_collected += len(dead)
            batcher.record(time.monotonic() - began, len(dead))
            self.progress("sweep", len(dead))
