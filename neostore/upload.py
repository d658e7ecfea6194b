"""Sending a transaction's values to the database: once each, found by hash if already there, compressed.

Values wait in memory (``Transaction._pending``) until vote or until they
pass ``flush_bytes``; then those the database lacks are encoded (in the
store's worker threads when there are many) and inserted in bulk.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ._schema import keep_blob_location
from .blobs.tier import TIERED
from .session import writer
from .sql import Row, chunked
from .values import RAW, EncodedValue

if TYPE_CHECKING:
    from .store import Store
    from .transaction import Transaction

#: Pending bytes below which values are compressed in the calling thread.
INLINE_ENCODE_BYTES = 1 << 20

#: Bytes per bulk INSERT: small enough to keep compression and upload
#: overlapping, large enough that round trips do not count.
INSERT_BATCH_BYTES = 8 * 1024 * 1024

#: Rows at least this large go one statement each: measured on MariaDB,
#: 2 MiB values insert faster that way (about 590 MB/s) than in one bulk
#: statement (about 460 MB/s); small rows gain from bulk statements.
PER_ROW_BYTES = 256 * 1024

#: Small rows up to this many go in one INSERT ... RETURNING their ids (a group commit's metadata);
#: more (thousands of slow streams' logs) in one bulk statement, then a query for their ids.
RETURNING_ROWS = 64


def unref(txn: Transaction, digest: bytes) -> None:
    """A rewritten object no longer sets this value: drop it if no other write does.

    An object rewritten many times in one transaction (an array's last
    chunk on repeated appends) then uploads only its final value; one
    uploaded before the rewrite is deleted at vote.
    """
    txn._refs[digest] -= 1
    if txn._refs[digest] > 0:
        return
    del txn._refs[digest]
    value = txn._pending.pop(digest, None)
    if value is not None:
        txn._pending_bytes -= len(value)
        txn._pending_raw.discard(digest)
    else:
        txn._orphans = True


def flush(txn: Transaction) -> None:
    """Upload pending values, sending none the database already holds.

    With a blob tier, the big values go to the object store first, before
    the commit lock is taken (:mod:`~neostore.blobs.tier` says why that is
    safe); only their rows are written under it.
    """
    if not txn._pending:
        return
    store = txn.store_
    pending, raw = txn._pending, txn._pending_raw
    txn._pending, txn._pending_bytes, txn._pending_raw = {}, 0, set()
    encoded = send_to_tier(store, pending, raw) if store.tier is not None else {}
    writer(txn)
    cur = txn._cursor()
    backend = store.backend
    hashes = list(pending)
    for batch in chunked(hashes, backend.max_params):
        cur.execute(f"SELECT hash, id FROM data WHERE hash IN {backend.in_list(len(batch))}", batch)
        for digest, data_id in cur.fetchall():
            txn._ids[bytes(digest)] = data_id
    missing = [h for h in hashes if h not in txn._ids]
    if not missing:
        return
    codec = store.codec

    def encode(h: bytes) -> EncodedValue:
        return encoded[h] if h in encoded else codec.encode(pending[h], h, compress=h not in raw)

    if store.tier is not None:
        big = [h for h in missing if store.tier.holds(len(pending[h]))]
        if big:
            insert_tiered(txn, cur, [encode(h) for h in big])
            missing = [h for h in missing if not store.tier.holds(len(pending[h]))]
    if sum(len(pending[h]) for h in missing if h not in raw) < INLINE_ENCODE_BYTES:
        # A few small values, or values the caller compressed already (nothing to do but frame
        # them): handing them to the pool costs more than encoding them here.
        values: Iterable[EncodedValue] = map(encode, missing)
    else:
        # The pool compresses ahead while the values it has finished are
        # being inserted: compression and database work overlap.
        values = store._encoder.map(encode, missing)
    insert_values(txn, cur, values)


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
        known.update(bytes(row[0]) for row in store._read(query, batch))
    big = [h for h in big if h not in known]
    codec = store.codec

    def encode(h: bytes) -> EncodedValue:
        if h in raw and tier.sent(h) == RAW:
            return EncodedValue(h, len(pending[h]), RAW, pending[h])  # what encode gives, without the copy
        return codec.encode(pending[h], h, compress=h not in raw)

    encoded = {v.hash: v for v in store._encoder.map(encode, big)}
    unsent = [v for v in encoded.values() if tier.sent(v.hash) != v.compression]
    if ahead:
        tier.upload_ahead(unsent)
    else:
        tier.upload(unsent)
    return encoded


def insert_tiered(txn: Transaction, cur: Any, values: list[EncodedValue]) -> None:
    """Insert the rows of values kept in the blob tier, once their objects are sure to be there."""
    tier = txn.store_.tier
    assert tier is not None
    tier.settle(values)
    keep_blob_location(txn.store_, cur)
    rows = [(v.hash, v.compression, v.size) for v in values]
    cur.executemany(f"INSERT INTO data (hash, compression, size, chunks, value) VALUES (?, ?, ?, {TIERED}, NULL)", rows)
    _took_ids(txn, cur, [row[0] for row in rows])


def insert_values(txn: Transaction, cur: Any, values: Iterable[EncodedValue]) -> None:
    """Insert encoded values: big ones split into chunks, small ones in bulk batches."""
    split_size = txn.store_.backend.split_size
    batch: list[Row] = []
    batch_bytes = 0
    for v in values:
        if len(v.stored) > split_size:
            _insert_big(txn, cur, v)
            continue
        batch.append((v.hash, v.compression, v.size, v.stored))
        batch_bytes += len(v.stored)
        if batch_bytes >= INSERT_BATCH_BYTES:
            _insert_small(txn, cur, batch)
            batch, batch_bytes = [], 0
    if batch:
        _insert_small(txn, cur, batch)


def _insert_small(txn: Transaction, cur: Any, rows: list[Row]) -> None:
    """Insert rows that fit in one ``data`` row each, noting the id each got."""
    backend = txn.store_.backend
    insert, row_values = "INSERT INTO data (hash, compression, size, chunks, value) VALUES ", "(?, ?, ?, 0, ?)"
    big = [row for row in rows if len(row[3]) >= PER_ROW_BYTES]
    if big:
        blob_cur = backend.blob_cursor(cur.connection)
        for row in big:
            blob_cur.execute(insert + row_values, row)
            # One row per statement: its id comes back with it, no query needed.
            _took(txn, [(row[0], backend.last_insert_id(blob_cur))])
        blob_cur.close()
    small = [row for row in rows if len(row[3]) < PER_ROW_BYTES]
    if 0 < len(small) <= RETURNING_ROWS and backend.returning:
        # One statement that returns their ids: on MariaDB each statement is a round trip.
        cur.execute(
            insert + ", ".join([row_values] * len(small)) + " RETURNING hash, id",
            [field for row in small for field in row],
        )
        _took(txn, cur.fetchall())
    elif small:
        cur.executemany(insert + row_values, small)
        _took_ids(txn, cur, [row[0] for row in small])


def _took_ids(txn: Transaction, cur: Any, hashes: list[bytes]) -> None:
    """Look up and remember the data ids of rows this transaction just inserted in bulk, by their hashes."""
    backend = txn.store_.backend
    for part in chunked(hashes, backend.max_params):
        cur.execute(f"SELECT hash, id FROM data WHERE hash IN {backend.in_list(len(part))}", part)
        _took(txn, cur.fetchall())


def _took(txn: Transaction, inserted: Iterable[tuple[bytes, int]]) -> None:
    """Remember the data ids of values this transaction inserted, by their hash."""
    for digest, data_id in inserted:
        txn._ids[bytes(digest)] = data_id
        txn._inserted.append(data_id)


def _insert_big(txn: Transaction, cur: Any, value: EncodedValue) -> None:
    """Insert a value larger than a row holds: a ``data`` row without value, its chunks in ``bigdata``."""
    size = txn.store_.backend.split_size
    stored = memoryview(value.stored)
    starts = range(0, len(stored), size)
    cur.execute(
        "INSERT INTO data (hash, compression, size, chunks, value) VALUES (?, ?, ?, ?, NULL)",
        (value.hash, value.compression, value.size, len(starts)),
    )
    cur.execute("SELECT id FROM data WHERE hash = ?", (value.hash,))
    (data_id,) = cur.fetchone()
    blob_cur = txn.store_.backend.blob_cursor(cur.connection)
    for seq, start in enumerate(starts):
        # One piece in memory at a time: a 200 MiB value is not copied whole.
        piece = bytes(stored[start : start + size])
        blob_cur.execute("INSERT INTO bigdata (data_id, seq, value) VALUES (?, ?, ?)", (data_id, seq, piece))
    blob_cur.close()
    txn._ids[value.hash] = data_id
    txn._inserted.append(data_id)
