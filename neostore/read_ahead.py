"""Reading many values ahead: rows a batch at a time, each batch's values fetched and checked in worker threads
while the previous batch is handed back."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from typing import TYPE_CHECKING, TypeVar

from . import errors
from .blobs.tier import TIERED
from .sql import VALUE_COLUMNS, Row
from .tids import p64, u64

if TYPE_CHECKING:
    from .reads import ValueReader

# What a query reads once it has seen how big values are: small documents go thousands
# at a time, chunks a few (memory stays bounded).
_READ_BATCH_BYTES = 8 << 20
# How many times as many bytes of tiered values a batch may ask for: their GETs run in parallel.
_TIER_FLIGHT = 8

T = TypeVar("T")


def read_ahead(
    reader: ValueReader,
    oids: Iterable[bytes],
    batch: int,
    before: bytes | None,
    skip_missing: bool,
    work: Callable[[bytes, Row], T],
) -> Iterator[tuple[bytes | None, Future[T] | None]]:
    """``(serial, future of work(oid, row))`` per oid in order, each batch's work submitted before the
    previous batch is handed back (see :meth:`ValueReader.load_many`)."""
    pool = reader.executor
    pending: list[tuple[bytes | None, Future[T] | None]] = []
    bound = "" if before is None else " AND tid < ?"
    extra = [] if before is None else [u64(before)]
    todo, start, step = list(oids), 0, batch
    while start < len(todo):
        group = todo[start : start + step]
        start += len(group)
        rows, step = _rows_of(reader, group, bound, extra, batch, before)
        submitted: list[tuple[bytes | None, Future[T] | None]] = []
        for oid in group:
            row = rows.get(u64(oid))
            if row is None or row[1] is None:
                if skip_missing:
                    submitted.append((None, None))
                    continue
                raise errors.POSKeyError(oid)
            runner = reader.tier if row[5] == TIERED and reader.tier is not None else pool
            submitted.append((p64(row[0]), runner.submit(work, oid, row)))
        # Hand back the previous batch only now: its checks ran while
        # this batch was being read.
        yield from pending
        pending = submitted
    yield from pending


def _rows_of(
    reader: ValueReader, group: list[bytes], bound: str, extra: list[int], batch: int, before: bytes | None
) -> tuple[dict[int, Row], int]:
    """The value rows of ``group``'s oids (by integer oid), and how many oids the next query should ask for."""
    keys = [u64(oid) for oid in group]
    rows = reader.query(
        f"SELECT o.oid, {VALUE_COLUMNS} FROM obj o "
        "JOIN (SELECT oid, MAX(tid) AS tid FROM obj "
        f"WHERE oid IN {reader.backend.in_list(len(keys))}{bound} GROUP BY oid) m ON m.oid = o.oid AND m.tid = o.tid "
        "LEFT JOIN data d ON d.id = o.data_id",
        keys + extra,
        before=before,
    )
    # Raw sizes; a tiered value's bytes do not come through the query, so more of them
    # (fetched by the tier's threads) may be in flight.
    size = sum((row[5] or 0) // (_TIER_FLIGHT if row[6] == TIERED else 1) for row in rows)
    step = max(batch, min(reader.backend.max_params - 1, _READ_BATCH_BYTES * len(group) // max(size, 1)))
    return {row[0]: row[1:] for row in rows}, step
