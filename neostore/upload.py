"""Sending a transaction's values to the database: once each, found by hash if already there, compressed.

Values wait in memory (a transaction's :class:`UploadQueue`) until vote or
until they pass ``flush_bytes``; then those the database lacks are encoded
(in the store's worker threads when there are many) and inserted in bulk.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ._schema import keep_blob_location
from .blobs.tier import TIERED
from .errors import TransientDatabaseError
from .sql import Row, chunked
from .values import RAW, EncodedValue

if TYPE_CHECKING:
    from .session import Session
    from .store import Store
    from .writes import Write

#: Pending bytes below which values are compressed in the calling thread.
INLINE_ENCODE_BYTES = 1 << 20

#: Bytes per bulk INSERT: small enough to keep compression and upload
#: overlapping, large enough that round trips do not count.
INSERT_BATCH_BYTES = 8 * 1024 * 1024

#: Rows at least this large go one statement each: on MariaDB a big row
#: inserts faster alone than inside one bulk statement, while small rows gain
#: from bulk statements.
PER_ROW_BYTES = 256 * 1024

#: Small rows up to this many go in one INSERT ... RETURNING their ids (a group commit's metadata);
#: more (thousands of slow streams' logs) in one bulk statement, then a query for their ids.
RETURNING_ROWS = 64


class UploadQueue:
    """The values a transaction sets: those waiting in memory for their upload, and the data ids of those the
    database holds (uploaded by this transaction or found there by hash)."""

    def __init__(self, store: Store):
        """An empty queue of a transaction of ``store``."""
        self.store = store
        self._pending: dict[bytes, bytes] = {}  # hash -> value awaiting upload
        self._pending_bytes = 0
        self._raw: set[bytes] = set()  # hashes of values the caller marked incompressible
        self._ids: dict[bytes, int] = {}  # hash -> data.id, for uploaded or found values
        self._refs: Counter[bytes] = Counter()  # hash -> how many writes set that value
        self._orphans = False  # an uploaded value is not set by any write any more
        self._inserted: list[int] = []  # data ids this transaction created

    def copy(self) -> UploadQueue:
        """A queue holding what this one holds, changed independently of it."""
        other = UploadQueue(self.store)
        other._pending, other._pending_bytes, other._raw = dict(self._pending), self._pending_bytes, set(self._raw)
        other._ids, other._refs, other._orphans = dict(self._ids), Counter(self._refs), self._orphans
        other._inserted = list(self._inserted)
        return other

    @property
    def pending_bytes(self) -> int:
        """Bytes of the values waiting for their upload."""
        return self._pending_bytes

    @property
    def untouched(self) -> bool:
        """Whether nothing of the transaction is in the database yet (no value was uploaded early)."""
        # An orphan is an uploaded value no write sets any more: something was uploaded early.
        return not self._inserted and not self._orphans

    @property
    def orphans(self) -> bool:
        """Whether a value this transaction uploaded is not set by any of its writes any more."""
        return self._orphans

    @property
    def inserted(self) -> list[int]:
        """The data ids of the rows this transaction created."""
        return list(self._inserted)

    def add(self, digest: bytes, value: bytes, *, compress: bool) -> None:
        """A write sets ``value``, named ``digest``: queue it unless the database holds it or it is queued."""
        self._refs[digest] += 1
        if digest not in self._ids and digest not in self._pending:
            self._pending[digest] = value
            self._pending_bytes += len(value)
            if not compress:
                self._raw.add(digest)

    def unref(self, digest: bytes) -> None:
        """A rewritten object does not set this value any more: drop it if no other write does.

        An object rewritten many times in one transaction (an array's last
        chunk on repeated appends) then uploads only its final value; one
        uploaded before the rewrite is deleted at vote.
        """
        self._refs[digest] -= 1
        if self._refs[digest] > 0:
            return
        del self._refs[digest]
        value = self._pending.pop(digest, None)
        if value is not None:
            self._pending_bytes -= len(value)
            self._raw.discard(digest)
        else:
            self._orphans = True

    def waiting(self, digest: bytes) -> bytes | None:
        """The value named ``digest`` if it waits for its upload, else None."""
        return self._pending.get(digest)

    def data_id(self, write: Write) -> int | None:
        """The data row ``write`` sets, once its value is uploaded."""
        return self._ids[write.hash] if write.hash is not None else write.data_id

    def value_of(self, cur: Any, write: Write) -> bytes | None:
        """The new value of a write, from memory or (once uploaded) from its row."""
        if write.hash is None:
            return None
        if write.hash in self._pending:
            return self._pending[write.hash]
        store = self.store
        cur.execute("SELECT compression, size, chunks, value FROM data WHERE hash = ?", (write.hash,))
        compression, size, chunks, stored = cur.fetchone()
        if chunks == TIERED and store.tier is not None:
            stored = store.tier.fetch(write.hash, compression)
        elif chunks:
            cur.execute("SELECT value FROM bigdata WHERE data_id = ? ORDER BY seq", (self._ids[write.hash],))
            stored = b"".join(row[0] for row in cur.fetchall())
        return store.codec.decode(compression, bytes(stored), size)

    def flush(self, session: Session) -> None:
        """Upload pending values through ``session``, sending none the database already holds.

        With a blob tier, the big values go to the object store first, before
        the commit lock is taken (:mod:`~neostore.blobs.tier` says why that is
        safe); only their rows are written under it.
        """
        if not self._pending:
            return
        store = self.store
        pending, raw = self._pending, self._raw
        self._pending, self._pending_bytes, self._raw = {}, 0, set()
        encoded = send_to_tier(store, pending, raw) if store.tier is not None else {}
        session.writer()
        cur = session.cursor()
        backend = store.backend
        hashes = list(pending)
        for batch in chunked(hashes, backend.max_params):
            cur.execute(f"SELECT hash, id FROM data WHERE hash IN {backend.in_list(len(batch))}", batch)
            for digest, data_id in cur.fetchall():
                self._ids[bytes(digest)] = data_id
        missing = [h for h in hashes if h not in self._ids]
        if not missing:
            return
        codec = store.codec

        def encode(h: bytes) -> EncodedValue:
            return encoded[h] if h in encoded else codec.encode(pending[h], h, compress=h not in raw)

        if store.tier is not None:
            big = [h for h in missing if store.tier.holds(len(pending[h]))]
            if big:
                self.insert_tiered(cur, [encode(h) for h in big])
                missing = [h for h in missing if not store.tier.holds(len(pending[h]))]
        if len(missing) == 1 or sum(len(pending[h]) for h in missing if h not in raw) < INLINE_ENCODE_BYTES:
            # One value (no insert to overlap its encoding with), a few small ones, or values the caller
            # compressed already (nothing to do but frame them): handing them to the pool costs more than
            # encoding them here.
            values: Iterable[EncodedValue] = map(encode, missing)
        else:
            # The pool compresses ahead while the values it has finished are
            # being inserted: compression and database work overlap.
            values = store.encoder.map(encode, missing)
        self.insert_values(cur, values)

    def insert_tiered(self, cur: Any, values: list[EncodedValue]) -> None:
        """Insert the rows of values kept in the blob tier, once their objects are sure to be there."""
        tier = self.store.tier
        assert tier is not None
        tier.settle(values)
        keep_blob_location(self.store, cur)
        rows = [(v.hash, v.compression, v.size) for v in values]
        cur.executemany(
            f"INSERT INTO data (hash, compression, size, chunks, value) VALUES (?, ?, ?, {TIERED}, NULL)", rows
        )
        self._took_ids(cur, [row[0] for row in rows])

    def insert_values(self, cur: Any, values: Iterable[EncodedValue]) -> None:
        """Insert encoded values: big ones split into chunks, small ones in bulk batches."""
        split_size = self.store.backend.split_size
        batch: list[Row] = []
        batch_bytes = 0
        for v in values:
            if len(v.stored) > split_size:
                self._insert_big(cur, v)
                continue
            batch.append((v.hash, v.compression, v.size, v.stored))
            batch_bytes += len(v.stored)
            if batch_bytes >= INSERT_BATCH_BYTES:
                self._insert_small(cur, batch)
                batch, batch_bytes = [], 0
        if batch:
            self._insert_small(cur, batch)

    def _insert_small(self, cur: Any, rows: list[Row]) -> None:
        """Insert rows that fit in one ``data`` row each, noting the id each got."""
        backend = self.store.backend
        insert, row_values = "INSERT INTO data (hash, compression, size, chunks, value) VALUES ", "(?, ?, ?, 0, ?)"
        big = [row for row in rows if len(row[3]) >= PER_ROW_BYTES]
        if big:
            blob_cur = backend.blob_cursor(cur.connection)
            for row in big:
                blob_cur.execute(insert + row_values, row)
                # One row per statement: its id comes back with it, no query needed.
                self._took([(row[0], backend.last_insert_id(blob_cur))])
            blob_cur.close()
        small = [row for row in rows if len(row[3]) < PER_ROW_BYTES]
        if 0 < len(small) <= RETURNING_ROWS and backend.returning:
            # One statement that returns their ids: on MariaDB each statement is a round trip.
            cur.execute(
                insert + ", ".join([row_values] * len(small)) + " RETURNING hash, id",
                [field for row in small for field in row],
            )
            returned = cur.fetchall()
            _check_inserted(len(small), len(returned))
            self._took(returned)
        elif small:
            cur.executemany(insert + row_values, small)
            self._took_ids(cur, [row[0] for row in small])

    def _took_ids(self, cur: Any, hashes: list[bytes]) -> None:
        """Look up and remember the data ids of rows this transaction just inserted in bulk, by their hashes."""
        backend = self.store.backend
        for part in chunked(hashes, backend.max_params):
            cur.execute(f"SELECT hash, id FROM data WHERE hash IN {backend.in_list(len(part))}", part)
            found = cur.fetchall()
            _check_inserted(len(part), len(found))
            self._took(found)

    def _took(self, inserted: Iterable[tuple[bytes, int]]) -> None:
        """Remember the data ids of values this transaction inserted, by their hash."""
        for digest, data_id in inserted:
            self._ids[bytes(digest)] = data_id
            self._inserted.append(data_id)

    def _insert_big(self, cur: Any, value: EncodedValue) -> None:
        """Insert a value larger than a row holds: a ``data`` row without value, its chunks in ``bigdata``."""
        size = self.store.backend.split_size
        stored = memoryview(value.stored)
        starts = range(0, len(stored), size)
        cur.execute(
            "INSERT INTO data (hash, compression, size, chunks, value) VALUES (?, ?, ?, ?, NULL)",
            (value.hash, value.compression, value.size, len(starts)),
        )
        cur.execute("SELECT id FROM data WHERE hash = ?", (value.hash,))
        (data_id,) = cur.fetchone()
        blob_cur = self.store.backend.blob_cursor(cur.connection)
        for seq, start in enumerate(starts):
            # One piece in memory at a time: a value of hundreds of MiB is not copied whole.
            piece = bytes(stored[start : start + size])
            blob_cur.execute("INSERT INTO bigdata (data_id, seq, value) VALUES (?, ?, ?)", (data_id, seq, piece))
        blob_cur.close()
        self._took([(value.hash, data_id)])


def send_to_tier(
    store: Store, pending: dict[bytes, bytes], raw: set[bytes], *, ahead: bool = False
) -> dict[bytes, EncodedValue]:
    """Upload the values of ``pending`` the tier holds and the database lacks, without any lock.

    ``raw``: the hashes of values the caller marked incompressible. A value
    this process sent recently is not sent again. Returns every big value
    encoded, for the rows (``{hash: encoded}``). ``ahead``: start the
    uploads and return (:meth:`Store.send_ahead`).
    """
    tier = store.tier
    assert tier is not None
    big = [h for h, v in pending.items() if tier.holds(len(v))]
    if not big:
        return {}
    if not ahead:
        tier.wait_ahead(big)
    backend, known = store.backend, set[bytes]()
    for batch in chunked(big, backend.max_params):
        query = f"SELECT hash FROM data WHERE hash IN {backend.in_list(len(batch))}"
        known.update(bytes(row[0]) for row in store.query(query, batch))
    big = [h for h in big if h not in known]
    codec = store.codec

    def encode(h: bytes) -> EncodedValue:
        if h in raw and tier.sent(h) == RAW:
            return EncodedValue(h, len(pending[h]), RAW, pending[h])  # what encode gives, without the copy
        return codec.encode(pending[h], h, compress=h not in raw)

    encoded = {v.hash: v for v in store.encoder.map(encode, big)}
    unsent = [v for v in encoded.values() if tier.sent(v.hash) != v.compression]
    if ahead:
        tier.upload_ahead(unsent)
    else:
        tier.upload(unsent)
    return encoded


def _check_inserted(inserted: int, found: int) -> None:
    """Raise TransientDatabaseError unless the ``inserted`` rows just inserted are all ``found``.

    They are missing when a cluster aborted the transaction while the rows
    went in, and the driver did not report it: what follows would otherwise
    run, and commit, in a transaction of its own.
    """
    if found != inserted:
        raise TransientDatabaseError(
            f"the database lost {inserted - found} of the {inserted} values just inserted (the cluster aborted "
            "the transaction); nothing of it was written: run it again"
        )
