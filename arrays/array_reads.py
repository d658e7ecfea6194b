"""Reading a BigArray: chunks loaded through the cache, or a transaction, into numpy results."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from typing import Any

import numpy as np

from .array_view import ArrayView, View
from .errors import ArrayError
from .keys import Snapshot, encode_key
from .metadata import ArrayMeta
from .selection import AxisSelection, Piece, normalize, orient, pieces
from .workers import io_pool, weighted_map, workers


class ArrayReads(ArrayView):
    """Basic indexing, block iteration and dask arrays over an :class:`ArrayView`."""

    def __getitem__(self, key: Any) -> np.ndarray:
        view = self._view
        return self._read(view, normalize(key, view.meta.shape))

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        out = self[...]
        return out if dtype is None else out.astype(dtype, copy=False)

    def blocks(self, rows: int | None = None) -> Iterator[tuple[int, np.ndarray]]:
        """``(start, block)`` for consecutive blocks of ``rows`` rows along axis 0 (default: a chunk's rows).

        ``block`` is ``self[start:start + rows]``. Memory stays bounded by
        two blocks plus the cache budget whatever the array's size: the next
        block is read while the caller works on the current one. The shape
        is taken when iteration starts.
        """
        rows = self.chunks[0] if rows is None else int(rows)
        if rows < 1:
            raise ValueError(f"rows must be >= 1, not {rows}")
        total = self.shape[0]
        starts = range(0, total, rows)
        if not starts:
            return
        executor = io_pool()

        def read(start: int) -> np.ndarray:
            return self[start : min(start + rows, total)]

        ahead: Future[np.ndarray] | None = executor.submit(read, starts[0])
        try:
            for i, start in enumerate(starts):
                assert ahead is not None  # one is submitted for every start
                block = ahead.result()
                ahead = executor.submit(read, starts[i + 1]) if i + 1 < len(starts) else None
                yield start, block
        finally:
            if ahead is not None:
                ahead.cancel()

    def to_dask(self) -> Any:
        """A dask array over this view, one task per stored chunk, read in parallel threads.

        Its graph holds the array by store URL and snapshot, not by data: on a
        dask.distributed cluster each worker opens the store and reads the
        chunks itself (:mod:`arrays.dask_source`).
        """
        import dask.array as da

        from .dask_source import DaskSource

        if self._before is None:
            token = uuid.uuid4().hex  # a transaction's view changes with its writes: never reuse results
        else:
            token = f"{self._before.hex()}-{id(self._store):x}"
        return da.from_array(  # type: ignore[no-untyped-call]  # dask.array ships no annotations
            DaskSource.of(self),
            chunks=self.chunks,
            name=f"bigarray-{self.name}-{token}",
            lock=False,
            asarray=False,
            fancy=False,
            meta=np.empty((0,) * self.ndim, dtype=self.dtype),
        )

    def _key(self, meta: ArrayMeta, coords: Sequence[int]) -> str:
        return f"{self.name}/{meta.chunk_key(coords)}"

    def _read(self, view: View, selection: tuple[AxisSelection, ...]) -> np.ndarray:
        meta = view.meta
        out = np.empty(tuple(s.count for s in selection), dtype=meta.dtype)
        plan = list(pieces(selection, meta.chunks))
        if plan:
            if view.before is None:
                self._fill_from_transaction(meta, plan, out)
            else:
                self._fill_from_snapshot(meta, view.before, plan, out)
        return orient(out, selection)

    def _last_chunk(self, meta: ArrayMeta, before: bytes, key: str) -> np.ndarray | None:
        """The decoded last chunk as of ``before``: read through the row log, which may hold its rows."""
        memo = self._last_memo
        if memo is not None and memo[0] == (before, key):
            return memo[1]
        value = Snapshot(self._store, before).get(key)
        chunk = None if value is None else self.decode_chunk(meta, value, key)
        self.count_loaded(1)
        self._last_memo = ((before, key), chunk)
        return chunk

    def _fill_from_snapshot(self, meta: ArrayMeta, before: bytes, plan: list[Piece], out: np.ndarray) -> None:
        # Only a partial last chunk can have rows in a row log; full chunks go through the cache.
        last = meta.shape[0] // meta.chunks[0] if meta.shape[0] % meta.chunks[0] else -1
        for piece in [p for p in plan if p.coords[0] == last]:
            chunk = self._last_chunk(meta, before, self._key(meta, piece.coords))
            out[piece.in_result] = meta.fill_value if chunk is None else chunk[piece.in_chunk]
        plan = [p for p in plan if p.coords[0] != last]
        if not plan:
            return
        keys = [self._key(meta, p.coords) for p in plan]
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
                chunk = self.decode_chunk(meta, value, key)
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
                try:
                    meta.codec.decode_into(value, target)
                except Exception as exc:
                    raise ArrayError(f"chunk {key!r} does not decode with codecs {meta.codec.names}: {exc}") from None
            else:
                target[...] = self.decode_chunk(meta, value, key)[piece.in_chunk]

        self._store.load_each(list(where), place, before=before, skip_missing=True)
        for oid in where.keys() - found:  # written once, removed since: zarr's fill
            out[where[oid][0].in_result] = meta.fill_value
        self.count_loaded(len(todo))

    def _fill_from_transaction(self, meta: ArrayMeta, plan: list[Piece], out: np.ndarray) -> None:
        tx = self._live_transaction()
        step = 4 * workers()
        for start in range(0, len(plan), step):
            group = plan[start : start + step]
            keys = [self._key(meta, p.coords) for p in group]
            values = tx.get_many(keys)
            self.count_loaded(len(values))

            def place(job: tuple[Piece, str], values: dict[str, bytes] = values) -> None:
                piece, key = job
                value = values.get(key)
                if value is None:
                    out[piece.in_result] = meta.fill_value
                else:
                    out[piece.in_result] = self.decode_chunk(meta, value, key)[piece.in_chunk]

            for _ in weighted_map(place, zip(group, keys), len(values) * meta.chunk_nbytes):
                pass
