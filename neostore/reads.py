"""Reading values: the latest, as of a tid, many at a time, a byte range, a history; each checked against its hash."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, overload

from . import errors
from .backends import Backend
from .blobs.tier import TIERED, BlobTier
from .read_ahead import read_ahead
from .records import Revision
from .sql import VALUE_COLUMNS, Query, Row
from .tids import p64, u64
from .values import RAW, ValueCodec, value_hash

#: ``fn(oid, value, serial)``: what :meth:`ValueReader.load_each` calls with each value.
ValueSink = Callable[[bytes, bytes | memoryview, bytes], None]

# What a damaged or missing object of the blob tier points at.
_OBJECT_CAUSE = "the object was altered or deleted outside neostore, or the object store lost it"


class ValueReader:
    """The read path of a Store: every statement goes through ``query`` (a thread's reader connection).

    ``executor`` checks and decompresses values while the next ones are read.
    """

    def __init__(
        self, query: Query, backend: Backend, codec: ValueCodec, executor: ThreadPoolExecutor, tier: BlobTier | None
    ):
        self.query = query
        self.backend = backend
        self.codec = codec
        self.executor = executor
        self.tier = tier

    def load(self, oid: bytes) -> tuple[bytes, bytes]:
        """The latest ``(value, serial)`` of ``oid``; POSKeyError if it has none."""
        rows = self.query(
            f"SELECT {VALUE_COLUMNS} FROM obj o {self.backend.obj_pk_hint} "
            "LEFT JOIN data d ON d.id = o.data_id WHERE o.oid = ? ORDER BY o.tid DESC LIMIT 1",
            (u64(oid),),
        )
        if not rows or rows[0][1] is None:
            raise errors.POSKeyError(oid)
        return self.row_value(oid, rows[0]), p64(rows[0][0])

    def load_before(self, oid: bytes, before: bytes) -> tuple[bytes, bytes, bytes | None] | None:
        """``(value, serial, next_serial)`` of the revision current just before ``before``.

        None when the object was created at or after ``before``; POSKeyError
        when it does not exist at all or that revision is a deletion.
        ``next_serial`` is None when the revision is still current.
        """
        ioid, ibefore = u64(oid), u64(before)
        rows = self.query(
            f"SELECT {VALUE_COLUMNS}, (SELECT MIN(n.tid) FROM obj n WHERE n.oid = ? AND n.tid >= ?) "
            f"FROM obj o {self.backend.obj_pk_hint} LEFT JOIN data d ON d.id = o.data_id "
            "WHERE o.oid = ? AND o.tid < ? ORDER BY o.tid DESC LIMIT 1",
            (ioid, ibefore, ioid, ibefore),
            before=before,
        )
        if not rows:
            if not self.query("SELECT 1 FROM obj WHERE oid = ? LIMIT 1", (ioid,)):
                raise errors.POSKeyError(oid)
            return None
        row = rows[0]
        if row[1] is None:
            raise errors.POSKeyError(oid)
        return self.row_value(oid, row), p64(row[0]), None if row[7] is None else p64(row[7])

    def load_many(
        self,
        oids: Iterable[bytes],
        *,
        batch: int = 8,
        before: bytes | None = None,
        skip_missing: bool = False,
    ) -> Iterator[tuple[bytes | None, bytes | None]]:
        """``(value, serial)`` of the latest revision of each oid, in order.

        With ``before``, the revision current just before that tid (a
        snapshot read). Rows are read ``batch`` oids per query at first, and
        checked and decompressed in worker threads while the next batch is
        read, so bulk reads are not serialised behind hashing. Once values
        turn out small, batches grow to hold about 8 MiB of values:
        thousands of small documents are read in a few queries. An oid with
        no value raises POSKeyError, or gives ``(None, None)`` with
        ``skip_missing``.
        """
        for serial, future in read_ahead(self, oids, batch, before, skip_missing, self.row_value):
            yield (None if future is None else future.result()), serial

    def load_each(
        self,
        oids: Iterable[bytes],
        fn: ValueSink,
        *,
        before: bytes | None = None,
        skip_missing: bool = False,
    ) -> None:
        """Call ``fn(oid, value, serial)`` for the latest revision (before ``before``) of each oid, in no
        order, in the threads that fetch and check the values; return once every call has returned.

        For callers that place each value on its own (arrays' bulk reads
        decode each chunk into its part of the result): the value is still in
        the cache of the thread that checked it, and no thread hands values
        over in order. Values from the blob tier come as read-only
        memoryviews. ``fn``'s exceptions are raised here; an oid without
        value raises POSKeyError, or is skipped with ``skip_missing``.
        """

        def check_then_call(oid: bytes, row: Row) -> None:
            fn(oid, self.row_value(oid, row, True), p64(row[0]))

        for _, future in read_ahead(self, oids, 8, before, skip_missing, check_then_call):
            if future is not None:
                future.result()

    def load_range(self, oid: bytes, start: int, stop: int | None = None, *, before: bytes | None = None) -> bytes:
        """``value[start:stop]`` of the latest revision (before ``before`` if given).

        A value stored uncompressed is sliced by the database, so only the
        range travels; such a partial read is not checked against the
        value's hash (a whole-value load is). A negative ``start`` counts
        from the end. POSKeyError when the object has no value.
        """
        bound = "" if before is None else " AND tid < ?"
        ioid = u64(oid)
        rows = self.query(
            "SELECT o.tid, o.data_id, d.compression, d.size, d.chunks, d.hash FROM obj o "
            "LEFT JOIN data d ON d.id = o.data_id "
            f"WHERE o.oid = ? AND o.tid = (SELECT MAX(tid) FROM obj WHERE oid = ?{bound})",
            (ioid, ioid) if before is None else (ioid, ioid, u64(before)),
            before=before,
        )
        if not rows or rows[0][1] is None:
            raise errors.POSKeyError(oid)
        tid, data_id, compression, size, chunks, digest = rows[0]
        first, last, _ = slice(start, stop).indices(size)
        if last <= first:
            return b""
        if compression != RAW:
            return self.load_serial(oid, p64(tid))[first:last]
        if chunks == TIERED:
            return self._tiered_range(oid, p64(tid), bytes(digest), first, last)
        if not chunks:
            rows = self.query("SELECT SUBSTR(value, ?, ?) FROM data WHERE id = ?", (first + 1, last - first, data_id))
            if not rows or rows[0][0] is None:  # moved to the blob tier since the row was read
                return self.load_serial(oid, p64(tid))[first:last]
            return bytes(rows[0][0])
        piece = self.backend.split_size
        parts = []
        for seq in range(first // piece, (last - 1) // piece + 1):
            low, high = max(first - seq * piece, 0), min(last - seq * piece, piece)
            rows = self.query(
                "SELECT SUBSTR(value, ?, ?) FROM bigdata WHERE data_id = ? AND seq = ?",
                (low + 1, high - low, data_id, seq),
            )
            if not rows:  # moved to the blob tier since the row was read
                return self.load_serial(oid, p64(tid))[first:last]
            parts.append(bytes(rows[0][0]))
        return b"".join(parts)

    def load_serial(self, oid: bytes, serial: bytes) -> bytes:
        """The value ``oid`` was given by transaction ``serial``."""
        rows = self.query(
            f"SELECT {VALUE_COLUMNS} FROM obj o LEFT JOIN data d ON d.id = o.data_id WHERE o.oid = ? AND o.tid = ?",
            (u64(oid), u64(serial)),
        )
        if not rows or rows[0][1] is None:
            raise errors.POSKeyError(oid)
        return self.row_value(oid, rows[0])

    def load_revisions(self, oid: bytes, after: bytes, before: bytes | None = None) -> list[tuple[bytes, bytes]]:
        """``(serial, value)`` of every revision of ``oid`` committed after ``after`` (and before ``before``),
        oldest first, in one query; deletions are left out.

        For values kept as a chain of revisions, each holding what its
        transaction added: reading the chain costs one round trip, not one
        per revision.
        """
        bound, params = (
            ("", (u64(oid), u64(after))) if before is None else (" AND o.tid < ?", (u64(oid), u64(after), u64(before)))
        )
        rows = self.query(
            f"SELECT {VALUE_COLUMNS} FROM obj o LEFT JOIN data d ON d.id = o.data_id "
            f"WHERE o.oid = ? AND o.tid > ?{bound} ORDER BY o.tid",
            params,
        )
        return [(p64(row[0]), self.row_value(oid, row)) for row in rows if row[1] is not None]

    @overload
    def row_value(self, oid: bytes, row: Row) -> bytes: ...
    @overload
    def row_value(self, oid: bytes, row: Row, buffer: bool) -> bytes | memoryview: ...

    def row_value(self, oid: bytes, row: Row, buffer: bool = False) -> bytes | memoryview:
        """The checked value of a row; with ``buffer``, a tiered one as the memoryview it arrived in."""
        tid, data_id, digest, compression, size, chunks, stored = row[:7]
        if digest is None:
            raise errors.CorruptDataError(oid, p64(tid), f"data row {data_id} is missing")
        if chunks == TIERED:
            value = self._tiered_value(oid, row)
            return value if buffer or isinstance(value, bytes) else bytes(value)
        if chunks:
            stored = self._big_value(data_id, chunks)
            if stored is None:
                moved = self.query("SELECT compression, chunks FROM data WHERE id = ?", (data_id,))
                if moved and moved[0][1] == TIERED:  # moved to the blob tier since the row was read
                    return self._tiered_value(oid, (tid, data_id, digest, moved[0][0], size))
                stored = b""  # the hash check then names the corruption
        return self.decode(oid, p64(tid), bytes(digest), compression, size, stored)

    def _tiered_value(self, oid: bytes, row: Row) -> bytes | memoryview:
        """The value of a row kept in the blob tier, fetched and checked; read from its row if it just moved back."""
        tid, data_id, digest, compression, size = row[:5]
        if self.tier is None:
            raise errors.BlobStoreError(
                f"oid 0x{oid.hex()} is kept in an object store, and this store was opened without one: "
                "open it with the ?blobs=s3://bucket/prefix it was written with"
            )
        key = self.tier.key(bytes(digest), compression)
        try:
            stored = self.tier.fetch(bytes(digest), compression)
        except errors.BlobNotFoundError:
            moved = self.query("SELECT compression, chunks, value FROM data WHERE id = ?", (data_id,))
            if moved and moved[0][1] != TIERED:  # moved back into the database meanwhile
                return self.row_value(oid, (tid, data_id, digest, *moved[0][:1], size, *moved[0][1:]))
            raise errors.CorruptDataError(oid, p64(tid), f"its object {key} is missing", _OBJECT_CAUSE) from None
        return self.decode(oid, p64(tid), bytes(digest), compression, size, stored, where=key)

    def _tiered_range(self, oid: bytes, tid: bytes, digest: bytes, first: int, last: int) -> bytes:
        """``value[first:last]`` of a raw value kept in the blob tier, by one ranged GET."""
        if self.tier is None:
            return self.load_serial(oid, tid)[first:last]  # names what is wrong
        try:
            return self.tier.fetch_range(digest, RAW, first, last)
        except errors.BlobNotFoundError:
            return self.load_serial(oid, tid)[first:last]  # moved back, or missing: load_serial says which

    def _big_value(self, data_id: int, chunks: int) -> bytes | None:
        """A split value's stored bytes; None if its chunks are not all there (moved, or corrupt)."""
        rows = self.query("SELECT value FROM bigdata WHERE data_id = ? ORDER BY seq", (data_id,))
        if len(rows) != chunks:
            return None
        return b"".join(row[0] for row in rows)

    @overload
    def decode(
        self, oid: bytes, tid: bytes | None, digest: bytes, compression: int, size: int, stored: Any
    ) -> bytes: ...
    @overload
    def decode(
        self, oid: bytes, tid: bytes | None, digest: bytes, compression: int, size: int, stored: Any, where: str
    ) -> bytes | memoryview: ...

    def decode(
        self, oid: bytes, tid: bytes | None, digest: bytes, compression: int, size: int, stored: Any, where: str = ""
    ) -> bytes | memoryview:
        """A stored row's value, checked against its hash (CorruptDataError if it differs).

        ``where`` names the object a tiered value came from, for the message;
        such a value, raw, comes back as the buffer it arrived in (no copy).
        """
        source, cause = (f" (object {where})", (_OBJECT_CAUSE,)) if where else ("", ())
        try:
            value = self.codec.decode(compression, stored if where else bytes(stored), size)
        except ValueError as exc:
            raise errors.CorruptDataError(oid, tid, f"{exc}{source}", *cause) from None
        if len(value) != size or value_hash(value) != digest:
            raise errors.CorruptDataError(oid, tid, f"the value does not match its blake3 hash{source}", *cause)
        return value

    def history(self, oid: bytes, size: int | None = 1) -> list[Revision]:
        """The newest ``size`` revisions of ``oid`` (all when None), newest first."""
        limit = "" if size is None else f" LIMIT {int(size)}"
        rows = self.query(
            "SELECT o.tid, d.size, t.user, t.description, t.ext FROM obj o "
            "JOIN trans t ON t.tid = o.tid LEFT JOIN data d ON d.id = o.data_id "
            f"WHERE o.oid = ? ORDER BY o.tid DESC{limit}",
            (u64(oid),),
        )
        if not rows:
            raise errors.POSKeyError(oid)
        return [Revision(p64(r[0]), r[1] or 0, bytes(r[2]), bytes(r[3]), bytes(r[4])) for r in rows]
