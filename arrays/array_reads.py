"""Reading one array's chunks into numpy results: through the chunk cache at a snapshot, or from a transaction."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import numpy as np

from windvane import neostore

from .array_view import View
from .cache import ChunkCache
from .errors import ArrayError
from .keys import Snapshot, encode_key
from .metadata import ArrayMeta
from .selection import AxisSelection, Piece, orient, pieces
from .transaction import Transaction
from .workers import weighted_map, workers


class ChunkReader:
    """The chunks of array ``name``, read and decoded into results; owns its chunk cache and the count of
    chunk values read from the database. Thread-safe: dask reads in threads."""

    def __init__(self, store: neostore.Store, name: str, cache: ChunkCache):
        self.cache = cache
        self._store = store
        self._name = name
        self._loaded = 0
        self._count_lock = threading.Lock()
        # The last chunk read at a snapshot: ((bound, key), chunk), as a row log may hold its rows.
        self._last_memo: tuple[tuple[bytes, str], np.ndarray | None] | None = None

    @property
    def loaded(self) -> int:
        """Chunk values read from the database so far."""
        return self._loaded

    def count_loaded(self, n: int) -> None:
        """Add ``n`` chunk values read from the database to :attr:`loaded`."""
        with self._count_lock:
            self._loaded += n

    def key(self, meta: ArrayMeta, coords: Sequence[int]) -> str:
        """The key of the chunk at grid ``coords``."""
        return f"{self._name}/{meta.chunk_key(coords)}"

    def decode(
        self, meta: ArrayMeta, value: bytes | memoryview, key: str, into: np.ndarray | None = None
    ) -> np.ndarray:
        """Chunk ``key``'s stored bytes ``value`` decoded (straight ``into`` a whole-chunk array, if given);
        ArrayError naming the chunk if they do not decode."""
        try:
            if into is None:
                return meta.codec.decode(value, meta.chunks)
            meta.codec.decode_into(value, into)
        except Exception as exc:  # noqa: BLE001 - numcodecs raises many kinds; the error names the chunk
            raise ArrayError(f"chunk {key!r} does not decode with codecs {meta.codec.names}: {exc}") from None
        return into

    def stored(self, view: View, first: int, stop: int, transaction: Callable[[], Transaction]) -> list[bytes | None]:
        """The encoded bytes of row chunks ``[first, stop)`` of the array ``view`` shows (None: never written,
        the fill value); ``transaction()`` as for :meth:`read`."""
        meta = view.meta
        if meta.chunks[1:] != meta.shape[1:]:
            raise ArrayError(
                f"array {self._name!r} is chunked along more than its first axis {meta.chunks}: "
                "its chunks are not whole rows"
            )
        inner = (0,) * (len(meta.shape) - 1)
        keys = [self.key(meta, (i, *inner)) for i in range(first, stop)]
        reader = transaction() if view.before is None else Snapshot(self._store, view.before)
        values = reader.get_many(keys)
        self.count_loaded(len(values))
        return [values.get(key) for key in keys]

    def read(
        self, view: View, selection: tuple[AxisSelection, ...], transaction: Callable[[], Transaction]
    ) -> np.ndarray:
        """The ``selection`` of the array ``view`` shows; ``transaction()``: the open transaction a view
        without a snapshot bound reads (asked only when chunks are to be read)."""
        meta = view.meta
        out = np.empty(tuple(s.count for s in selection), dtype=meta.dtype)
        plan = list(pieces(selection, meta.chunks))
        if plan:
            if view.before is None:
                self._fill_from_transaction(transaction(), meta, plan, out)
            else:
                self._fill_from_snapshot(meta, view.before, plan, out)
        return orient(out, selection)

    def _last_chunk(self, meta: ArrayMeta, before: bytes, key: str) -> np.ndarray | None:
        """The decoded last chunk as of ``before``: read through the row log, which may hold its rows."""
        memo = self._last_memo
        if memo is not None and memo[0] == (before, key):
            return memo[1]
        value = Snapshot(self._store, before).get(key)
        chunk = None if value is None else self.decode(meta, value, key)
        self.count_loaded(1)
        self._last_memo = ((before, key), chunk)
        return chunk

    def _fill_from_snapshot(self, meta: ArrayMeta, before: bytes, plan: list[Piece], out: np.ndarray) -> None:
        # Only a partial last chunk can have rows in a row log; full chunks go through the cache.
        last = meta.shape[0] // meta.chunks[0] if meta.shape[0] % meta.chunks[0] else -1
        for piece in [p for p in plan if p.coords[0] == last]:
            chunk = self._last_chunk(meta, before, self.key(meta, piece.coords))
            out[piece.in_result] = meta.fill_value if chunk is None else chunk[piece.in_chunk]
        plan = [p for p in plan if p.coords[0] != last]
        if not plan:
            return
        keys = [self.key(meta, p.coords) for p in plan]
        oids = self._store.oids_for([encode_key(k) for k in keys])
        todo: list[tuple[Piece, str, bytes]] = []
        for piece, key in zip(plan, keys):
            oid = oids.get(encode_key(key))
            chunk = None if oid is None else self.cache.get(oid)
            if oid is None:
                out[piece.in_result] = meta.fill_value  # never written: zarr's fill
            elif chunk is not None:
                out[piece.in_result] = chunk[piece.in_chunk]
            else:
                todo.append((piece, key, oid))
        if not todo:
            return
        # A read larger than the cache would only churn it: it bypasses the
        # cache, and whole chunks decode straight into the result, each in the
        # thread that fetched and checked it.
        if len(todo) * meta.chunk_nbytes > self.cache.budget:
            self._fill_bulk(meta, before, todo, out)
            return
        values = self._store.load_many([t[2] for t in todo], before=before, skip_missing=True)

        def place(job: tuple[tuple[Piece, str, bytes], tuple[bytes | None, bytes | None]]) -> None:
            (piece, key, oid), (value, serial) = job
            target = out[piece.in_result]
            if value is None:
                target[...] = meta.fill_value
            else:
                chunk = self.decode(meta, value, key)
                if serial is not None:  # a value always comes with its serial
                    self.cache.put(oid, serial, chunk)
                target[...] = chunk[piece.in_chunk]

        self.count_loaded(len(todo))
        # One chunk (a dask task), or a few small ones: no hand-off to the pool.
        for _ in weighted_map(place, zip(todo, values), len(todo) * meta.chunk_nbytes if len(todo) > 1 else 0):
            pass

    def _fill_bulk(self, meta: ArrayMeta, before: bytes, todo: list[tuple[Piece, str, bytes]], out: np.ndarray) -> None:
        """Decode the chunks of ``todo`` into ``out``, bypassing the cache, as neostore fetches them."""
        where = {oid: (piece, key) for piece, key, oid in todo}
        found: set[bytes] = set()

        def place(oid: bytes, value: bytes | memoryview, serial: bytes) -> None:
            piece, key = where[oid]
            target = out[piece.in_result]
            found.add(oid)
            if target.shape == meta.chunks and target.flags.c_contiguous:
                self.decode(meta, value, key, into=target)
            else:
                target[...] = self.decode(meta, value, key)[piece.in_chunk]

        self._store.load_each(list(where), place, before=before, skip_missing=True)
        for oid in where.keys() - found:  # written once, removed since: zarr's fill
            out[where[oid][0].in_result] = meta.fill_value
        self.count_loaded(len(todo))

    def _fill_from_transaction(self, tx: Transaction, meta: ArrayMeta, plan: list[Piece], out: np.ndarray) -> None:
        step = 4 * workers()
        for start in range(0, len(plan), step):
            group = plan[start : start + step]
            keys = [self.key(meta, p.coords) for p in group]
            values = tx.get_many(keys)
            self.count_loaded(len(values))

            def place(job: tuple[Piece, str], values: dict[str, bytes] = values) -> None:
                piece, key = job
                value = values.get(key)
                if value is None:
                    out[piece.in_result] = meta.fill_value
                else:
                    out[piece.in_result] = self.decode(meta, value, key)[piece.in_chunk]

            for _ in weighted_map(place, zip(group, keys), len(values) * meta.chunk_nbytes):
                pass

    # -- what a write reads ------------------------------------------------------------

    def latest_chunks(self, tx: Transaction, meta: ArrayMeta, keys: list[str], cached: bool) -> dict[str, np.ndarray]:
        """The latest decoded chunks of ``keys`` (missing ones left out), for read-modify-write in ``tx``.

        ``tx`` holds the commit lock. ``cached``: take a chunk from the cache
        when it holds the head's revision of it (autocommit writes only: a
        transaction's reads must see its own writes).
        """
        found: dict[str, np.ndarray] = {}
        if not keys:
            return found
        wanted = self._uncached(tx, keys, found) if cached else keys
        if wanted:
            values = tx.get_many(wanted)
            self.count_loaded(len(values))
            for key, value in values.items():
                found[key] = self.decode(meta, value, key)
        return found

    def _uncached(self, tx: Transaction, keys: list[str], found: dict[str, np.ndarray]) -> list[str]:
        """Put in ``found`` the chunks of ``keys`` the cache holds at the head's revision; the others to read."""
        oids = self._store.oids_for([encode_key(k) for k in keys])
        wanted = []
        for key in keys:
            oid = oids.get(encode_key(key))
            if oid is None:
                continue  # never written: the fill value
            if tx.written_since(0, [key]):
                wanted.append(key)  # rewritten in this transaction (a folded row log)
                continue
            serial = self.cache.serial(oid)
            if serial is not None:
                # The lock is held, so the head is what this commit builds on:
                # the cached chunk is used only if it is that revision.
                head = self._store.list_names(encode_key(key), exact=True)
                chunk = self.cache.get(oid, head[0].serial) if head else None
                if chunk is not None:
                    found[key] = chunk
                    continue
            wanted.append(key)
        return wanted
