"""BigArray: a chunked ndarray on neostore, stored as a zarr v3 array.

Reads return numpy arrays and load only the chunks they touch, from one
snapshot: a view sees the commit it was opened (or last refreshed) at, and
nothing committed since, until :meth:`BigArray.refresh`. Writes are atomic:
in autocommit mode (an array opened from a URL or Store) each ``append``
or assignment is one commit; an array opened in a
:class:`~arrays.Transaction` joins it.

Appends and assignments take neostore's commit lock first, then read the
latest ``zarr.json`` and the partial chunks they rewrite, so concurrent
writers never lose each other's rows and each append stays contiguous.
An append costs the rows it adds plus the partial last chunk, whatever the
array's size: chunk keys are computed, never listed.
"""

from __future__ import annotations

import itertools
import math
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from windvane import neostore

from .cache import DEFAULT_CACHE_BYTES, ChunkCache
from .errors import ArrayError, ArrayExistsError, ArrayNotFoundError, ReadOnlyArrayError
from .keys import Snapshot, encode_key, next_tid_after
from .metadata import METADATA_KEY, ArrayMeta, as_stored, group_document, node_type
from .selection import AxisSelection, Piece, covers_chunk, normalize, orient, pieces, result_shape, unorient
from .timetravel import At, describe, snapshot_bound
from .transaction import Transaction
from .workers import io_pool, ordered_map, weighted_map, workers

#: Chunks per ``set_many`` call: enough to bind their names in one round trip.
_WRITE_BATCH = 16
#: Raw bytes of chunks being encoded ahead of the database writes: enough to
#: keep the codec threads busy while neostore uploads a batch.
_ENCODE_AHEAD_BYTES = 64 * 1024 * 1024
#: Transactions per ``changes_since`` page when a view catches up.
_CHANGES_PAGE = 10000

Target = str | neostore.Store | Transaction


def _check_name(name: str) -> str:
    if not isinstance(name, str) or not name:
        raise ValueError("an array name is a non-empty string such as 'stream/temperature'")
    parts = name.split("/")
    if any(p in ("", ".", "..") for p in parts) or parts[-1] == METADATA_KEY:
        raise ValueError(f"array name {name!r} must be '/'-separated non-empty parts, without '.', '..' or zarr.json")
    return name


def _resolve(target: Target, *, create: bool = False) -> tuple[neostore.Store, Transaction | None, bool]:
    """``(store, transaction, owns_store)`` for a URL, a Store or a Transaction.

    A URL's store is created only if ``create`` (for what makes arrays); otherwise
    neostore.StoreNotFoundError if there is none.
    """
    if isinstance(target, Transaction):
        if target.state != "open":
            raise ArrayError(f"the transaction is {target.state}; start a new one with arrays.transaction")
        return target.store, target, False
    if isinstance(target, neostore.Store):
        return target, None, False
    if isinstance(target, str):
        return neostore.open(target, create=create), None, True
    raise TypeError(f"expected a store URL, a neostore.Store or an arrays.Transaction, not {type(target).__name__}")


def _previous(before: bytes) -> bytes:
    return neostore.p64(neostore.u64(before) - 1)


@dataclass(frozen=True)
class _View:
    """What a BigArray shows, replaced as a whole so that reads in other threads see one consistent state."""

    meta: ArrayMeta
    raw: bytes  # the zarr.json ``meta`` was parsed from
    before: bytes | None  # the snapshot bound; None inside a transaction (the head plus its own writes)


class StoreOwner:
    """``close()`` and ``with``: close the store opened from a URL; a given Store or Transaction stays open."""

    _owns_store: bool
    _store: neostore.Store

    def close(self) -> None:
        if self._owns_store:
            self._owns_store = False
            self._store.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class BigArray(StoreOwner):
    """An n-dimensional array whose chunks are neostore objects.

    Make one with :func:`arrays.create` or :func:`arrays.open`. Basic
    indexing (integers, slices with any step, ``...``) reads numpy arrays;
    ``a[sel] = x`` and :meth:`append` write. ``cache`` holds decoded chunks
    (``cache.stats()``), ``chunks_loaded`` counts chunk values read from the
    database. Reads are thread-safe (dask runs them in threads).
    """

    def __init__(
        self,
        store: neostore.Store,
        name: str,
        meta: ArrayMeta,
        meta_raw: bytes,
        *,
        before: bytes | None = None,
        transaction: Transaction | None = None,
        read_only: bool = False,
        owns_store: bool = False,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
    ):
        self.name = name
        self.cache = ChunkCache(cache_bytes)
        self.chunks_loaded = 0
        self._store = store
        self._view = _View(meta, meta_raw, before)
        self._tx = transaction
        self._read_only = read_only
        self._owns_store = owns_store
        self._count_lock = threading.Lock()
        self._last_memo: tuple[tuple[bytes, str], np.ndarray | None] | None = None

    # -- what it is ----------------------------------------------------------------

    @property
    def _meta(self) -> ArrayMeta:
        return self._view.meta

    @property
    def _before(self) -> bytes | None:
        return self._view.before

    @property
    def shape(self) -> tuple[int, ...]:
        return self._meta.shape

    @property
    def dtype(self) -> np.dtype:
        return self._meta.dtype

    @property
    def chunks(self) -> tuple[int, ...]:
        """The shape of a stored chunk."""
        return self._meta.chunks

    @property
    def ndim(self) -> int:
        return len(self._meta.shape)

    @property
    def size(self) -> int:
        return math.prod(self._meta.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def fill_value(self) -> Any:
        return self._meta.fill_value

    @property
    def attrs(self) -> dict:
        """The array's zarr attributes (a copy)."""
        return self._meta.attributes

    @property
    def dims(self) -> tuple[str, ...] | None:
        """The dimension names, if the array has them."""
        return self._meta.dims

    @property
    def codec(self) -> list[dict]:
        """The zarr v3 ``codecs`` the chunks are stored with."""
        return self._meta.codec.to_json()

    @property
    def read_only(self) -> bool:
        return self._read_only

    @property
    def tid(self) -> bytes | None:
        """The last commit this view sees (None inside a transaction: it sees the latest)."""
        return None if self._before is None else _previous(self._before)

    @property
    def store(self) -> neostore.Store:
        return self._store

    def __len__(self) -> int:
        return self.shape[0]

    def __repr__(self) -> str:
        where = "in a transaction" if self._before is None else f"at 0x{self.tid.hex()}"
        mode = ", read-only" if self._read_only else ""
        return f"<BigArray {self.name!r} shape={self.shape} dtype={self.dtype} chunks={self.chunks} {where}{mode}>"

    # -- reading -------------------------------------------------------------------

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

        ahead = executor.submit(read, starts[0])
        try:
            for i, start in enumerate(starts):
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
        return da.from_array(
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

    def _decode(self, meta: ArrayMeta, value: bytes, key: str) -> np.ndarray:
        try:
            return meta.codec.decode(value, meta.chunks)
        except Exception as exc:
            raise ArrayError(f"chunk {key!r} does not decode with codecs {meta.codec.names}: {exc}") from None

    def _count(self, n: int) -> None:
        with self._count_lock:
            self.chunks_loaded += n

    def _read(self, view: _View, selection: tuple[AxisSelection, ...]) -> np.ndarray:
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
        chunk = None if value is None else self._decode(meta, value, key)
        self._count(1)
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
        values = self._store.load_many([t[2] for t in todo], before=before, skip_missing=True)
        # A read larger than the cache would only churn it: it bypasses the
        # cache, and whole chunks decode straight into the result.
        bulk = len(todo) * meta.chunk_nbytes > self.cache.budget

        def place(job: tuple[tuple[Piece, str, bytes], tuple[bytes | None, bytes | None]]) -> None:
            (piece, key, oid), (value, serial) = job
            target = out[piece.in_result]
            if value is None:
                target[...] = meta.fill_value
            elif bulk and target.shape == meta.chunks and target.flags.c_contiguous:
                try:
                    meta.codec.decode_into(value, target)
                except Exception as exc:
                    raise ArrayError(f"chunk {key!r} does not decode with codecs {meta.codec.names}: {exc}") from None
            else:
                chunk = self._decode(meta, value, key)
                if not bulk:
                    self.cache.put(oid, serial, chunk)
                target[...] = chunk[piece.in_chunk]

        self._count(len(todo))
        # One chunk (a dask task), or a few small ones: no hand-off to the pool.
        for _ in weighted_map(place, zip(todo, values), len(todo) * meta.chunk_nbytes if len(todo) > 1 else 0):
            pass

    def _fill_from_transaction(self, meta: ArrayMeta, plan: list[Piece], out: np.ndarray) -> None:
        tx = self._live_transaction()
        step = 4 * workers()
        for start in range(0, len(plan), step):
            group = plan[start : start + step]
            keys = [self._key(meta, p.coords) for p in group]
            values = tx.get_many(keys)
            self._count(len(values))

            def place(job: tuple[Piece, str]) -> None:
                piece, key = job
                value = values.get(key)
                if value is None:
                    out[piece.in_result] = meta.fill_value
                else:
                    out[piece.in_result] = self._decode(meta, value, key)[piece.in_chunk]

            for _ in weighted_map(place, zip(group, keys), len(values) * meta.chunk_nbytes):
                pass

    def _live_transaction(self) -> Transaction:
        tx = self._tx
        if tx is None or tx.state != "open":
            raise ArrayError(
                f"the transaction array {self.name!r} was opened in has ended; open it again "
                "(arrays.open) to read or write it"
            )
        return tx

    # -- moving the view -------------------------------------------------------------

    def refresh(self) -> bytes | None:
        """Move the view to the newest commit, keeping cached chunks that did not change; returns its tid."""
        if self._before is None:
            self._reload_meta(self._live_transaction().get(self._meta_key))
            return None
        head = self._store.last_transaction()
        if head != self.tid:
            before = next_tid_after(head)
            raw = Snapshot(self._store, before).get(self._meta_key)
            if raw is None:
                raise ArrayNotFoundError(self.name, "in the newest commit (it was deleted)")
            meta = self._parse_meta(raw)
            self._forget_changes(self.tid, head)
            self._view = _View(meta, raw, before)
        return self.tid

    def _forget_changes(self, since: bytes, until: bytes) -> None:
        """Drop cached chunks of objects changed by commits in ``(since, until]``."""
        if not len(self.cache) or until <= since:
            return
        cursor = since
        while True:
            page = self._store.changes_since(cursor, limit=_CHANGES_PAGE)
            for tid, oids in page:
                if tid > until:
                    return
                self.cache.discard(oids)
                cursor = tid
            if len(page) < _CHANGES_PAGE:
                return

    @property
    def _meta_key(self) -> str:
        return f"{self.name}/{METADATA_KEY}"

    def _parse_meta(self, raw: bytes | None) -> ArrayMeta:
        """The metadata ``raw`` holds (parsed only if it changed); the array must still be the same one."""
        if raw is None:
            raise ArrayNotFoundError(self.name, "any more (it was deleted)")
        if raw == self._view.raw:
            return self._view.meta
        meta = ArrayMeta.from_bytes(raw, self.name)
        if meta.dtype != self._meta.dtype or meta.chunks != self._meta.chunks:
            raise ArrayError(
                f"array {self.name!r} was replaced by one with dtype {meta.dtype} and chunks {meta.chunks}; "
                "open it again"
            )
        return meta

    def _reload_meta(self, raw: bytes | None) -> ArrayMeta:
        meta = self._parse_meta(raw)
        self._view = _View(meta, raw, self._view.before)
        return meta

    # -- writing ---------------------------------------------------------------------

    def __setitem__(self, key: Any, value: Any) -> None:
        self._writable()
        selection = normalize(key, self.shape)
        data = np.broadcast_to(as_stored(value, self.dtype), result_shape(selection))
        full = unorient(data, selection)

        def plan(latest: ArrayMeta) -> tuple[ArrayMeta, tuple[AxisSelection, ...], np.ndarray]:
            return latest, selection, full

        if all(s.count for s in selection):
            self._write(plan, f"write {self.name}", None)

    def append(
        self, values: Any, axis: int = 0, *, message: str | None = None, metadata: Mapping[str, Any] | None = None
    ) -> tuple[int, ...]:
        """Add ``values`` at the end of ``axis``; returns the new shape.

        ``values`` has the array's shape except along ``axis`` (or one
        dimension less: a single row). Only the partial last chunk(s) and
        ``zarr.json`` are rewritten. Concurrent appends from any number of
        processes all land, each contiguous. In autocommit mode this is one
        commit (``message``/``metadata`` describe it; see
        :func:`arrays.history`), after which the view shows that commit.
        """
        ndim = self.ndim
        if not -ndim <= axis < ndim:
            raise ValueError(f"axis {axis} is out of range for a {ndim}-dimensional array")
        axis %= ndim
        data = as_stored(values, self.dtype)
        if data.ndim == ndim - 1:
            data = np.expand_dims(data, axis)
        if data.ndim != ndim:
            raise ValueError(f"cannot append a {data.ndim}-dimensional array to a {ndim}-dimensional one")
        self._check_other_axes(data.shape, self.shape, axis)
        added = data.shape[axis]
        if added == 0:
            return self.shape

        def plan(latest: ArrayMeta) -> tuple[ArrayMeta, tuple[AxisSelection, ...], np.ndarray]:
            self._check_other_axes(data.shape, latest.shape, axis)
            old = latest.shape[axis]
            shape = list(latest.shape)
            shape[axis] = old + added
            selection = tuple(AxisSelection(old if i == axis else 0, n) for i, n in enumerate(data.shape))
            return latest.with_shape(shape), selection, data

        what = f"{added} rows" if axis == 0 else f"{added} along axis {axis}"
        self._write(plan, message or f"append {what} to {self.name}", metadata)
        return self.shape

    @staticmethod
    def _check_other_axes(got: tuple[int, ...], shape: tuple[int, ...], axis: int) -> None:
        for i, (n, m) in enumerate(zip(got, shape)):
            if i != axis and n != m:
                raise ValueError(f"cannot append shape {got} to shape {shape} along axis {axis}: axis {i} differs")

    def _writable(self) -> None:
        if self._read_only:
            raise ReadOnlyArrayError(
                f"array {self.name!r} is a read-only snapshot (opened with at=); open it without at= to write"
            )

    def _write(
        self,
        plan: Callable[[ArrayMeta], tuple[ArrayMeta, tuple[AxisSelection, ...], np.ndarray]],
        message: str,
        metadata: Mapping[str, Any] | None,
    ) -> None:
        """Run one write: lock, read the latest metadata, ``plan`` it, write chunks and metadata, commit."""
        self._writable()
        if self._tx is not None:
            tx = self._live_transaction()
            tx.lock()
            tx.fold_for([self._meta_key])  # a row log's rows move into the chunks this write reads
            raw = tx.get(self._meta_key)
            latest = self._parse_meta(raw)
            meta, selection, value = plan(latest)
            self._store_region(tx, meta, latest.shape, selection, value, cached=False)
            if meta.shape != latest.shape:
                raw = meta.to_bytes()
                tx.set(self._meta_key, raw)
            self._view = _View(meta, raw, None)
            return
        tx = Transaction(self._store, message=message, metadata=metadata)
        try:
            tx.lock()
            # Holding the lock, the head cannot move: drop what others changed
            # since this view, so that after the commit the cache matches it.
            head = self._store.last_transaction()
            self._forget_changes(self.tid, head)
            tx.fold_for([self._meta_key])
            raw = tx.get(self._meta_key)
            latest = self._parse_meta(raw)
            meta, selection, value = plan(latest)
            built, written = self._store_region(tx, meta, latest.shape, selection, value, cached=True)
            if meta.shape != latest.shape:
                raw = meta.to_bytes()
                tx.set(self._meta_key, raw)
            tid = tx.commit()
        except BaseException:
            tx.abort()
            raise
        self._view = _View(meta, raw, next_tid_after(tid))
        oids = self._store.oids_for([encode_key(k) for k in written])
        self.cache.discard(oids.values())
        for key, chunk in built:
            oid = oids.get(encode_key(key))
            if oid is not None:
                self.cache.put(oid, tid, chunk)

    def _store_region(
        self,
        tx: Transaction,
        meta: ArrayMeta,
        old_shape: tuple[int, ...],
        selection: tuple[AxisSelection, ...],
        value: np.ndarray,
        *,
        cached: bool,
    ) -> tuple[list[tuple[str, np.ndarray]], list[str]]:
        """Write ``value`` (ascending, every axis kept) at ``selection`` of an array described by ``meta``.

        Chunks the selection covers are encoded from ``value``; the others
        are read (from the cache when ``cached`` and it holds their latest
        revision), modified and rewritten. Returns the chunks built as new arrays
        (worth caching) and every key written.
        """
        plan, keys, partial = self._region(meta, old_shape, selection)
        old = self._current_chunks(tx, meta, partial, cached)
        built: list[tuple[str, np.ndarray]] = []
        chunks = self._region_chunks(meta, plan, keys, value, old, built)

        codec = meta.codec

        def encode(item: tuple[str, np.ndarray]) -> tuple[str, bytes]:
            return item[0], codec.encode(item[1])

        if len(plan) == 1:  # an append's partial chunk: no hand-off to the pool
            encoded: Iterator[tuple[str, bytes]] = map(encode, chunks)
        else:
            window = max(2 * workers() + 2, _ENCODE_AHEAD_BYTES // max(meta.chunk_nbytes, 1))
            encoded = ordered_map(encode, chunks, window)
        while batch := dict(itertools.islice(encoded, _WRITE_BATCH)):
            tx.set_many(batch, compress=not codec.compressed)
        return built, keys

    def _region(
        self, meta: ArrayMeta, old_shape: tuple[int, ...], selection: tuple[AxisSelection, ...]
    ) -> tuple[list[Piece], list[str], list[str]]:
        """``(pieces, their keys, keys of the existing chunks only partly overwritten)`` of a write.

        The partly overwritten chunks must be read first (read-modify-write);
        :mod:`arrays.stream` batches those reads over many arrays.
        """
        plan = list(pieces(selection, meta.chunks))
        keys = [self._key(meta, p.coords) for p in plan]
        partial = [
            k
            for p, k in zip(plan, keys)
            if not covers_chunk(p, meta.chunks, meta.shape)
            and all(c * size < n for c, size, n in zip(p.coords, meta.chunks, old_shape))
        ]
        return plan, keys, partial

    @staticmethod
    def _region_chunks(
        meta: ArrayMeta,
        plan: list[Piece],
        keys: list[str],
        value: np.ndarray,
        old: Mapping[str, np.ndarray],
        built: list[tuple[str, np.ndarray]],
    ) -> Iterator[tuple[str, np.ndarray]]:
        """``(key, whole chunk)`` to store for each piece; chunks made by copying are added to ``built``."""
        for piece, key in zip(plan, keys):
            part = value[piece.in_result]
            if part.shape == meta.chunks and key not in old:
                yield key, part  # a whole chunk: encoded straight from the caller's data
                continue
            base = old.get(key)
            if base is None:
                chunk = np.full(meta.chunks, meta.fill_value, dtype=meta.codec.work_dtype)
            else:
                chunk = base.copy()
            chunk[piece.in_chunk] = part
            built.append((key, chunk))
            yield key, chunk

    def _current_chunks(
        self, tx: Transaction, meta: ArrayMeta, keys: list[str], cached: bool
    ) -> dict[str, np.ndarray]:
        """The latest decoded chunks of ``keys`` (missing ones left out), for read-modify-write."""
        found: dict[str, np.ndarray] = {}
        if not keys:
            return found
        wanted = keys
        if cached:
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
        if wanted:
            values = tx.get_many(wanted)
            self._count(len(values))
            for key, value in values.items():
                found[key] = self._decode(meta, value, key)
        return found


# -- module functions ----------------------------------------------------------------


def _parents(name: str) -> list[str]:
    parts = name.split("/")
    return ["/".join(parts[:i]) for i in range(len(parts))]


def _create_in(tx: Transaction, name: str, meta: ArrayMeta) -> bytes:
    """Write the array's ``zarr.json`` and any missing parent groups (atomic: the lock is taken)."""
    tx.lock()
    key = f"{name}/{METADATA_KEY}"
    if tx.exists(key) or tx.list(f"{name}/"):
        raise ArrayExistsError(f"{name!r} already exists; open it with arrays.open, or choose another name")
    writes = {}
    for parent in _parents(name):
        parent_key = f"{parent}/{METADATA_KEY}" if parent else METADATA_KEY
        raw = tx.get(parent_key)
        if raw is None:
            writes[parent_key] = group_document()
        elif (kind := node_type(raw)) != "group":
            what = "an array" if kind == "array" else f"a {kind}" if kind else "no zarr node"
            raise ArrayExistsError(f"cannot create {name!r}: {parent!r} is {what}, not a group")
    raw = meta.to_bytes()
    writes[key] = raw
    tx.set_many(writes)
    return raw


def create(
    url_or_tx: Target,
    name: str,
    shape: Sequence[int] | int,
    dtype: Any,
    *,
    chunks: int | Sequence[int] | None = None,
    codec: Any = None,
    fill_value: Any = None,
    dims: Sequence[str] | None = None,
    attributes: Mapping[str, Any] | None = None,
    cache_bytes: int = DEFAULT_CACHE_BYTES,
) -> BigArray:
    """Create array ``name`` and return it, writable.

    From a URL or Store the creation commits at once and the array writes
    in autocommit mode (each ``append``/assignment is a commit); in a
    Transaction everything joins it. ``chunks`` default: whole rows, about
    2 MiB per chunk. ``codec``: see :func:`arrays.codecs.codec_for` (default
    blosc for multi-byte numbers). ``dtype`` ``str`` or ``bytes`` makes a
    variable-length string / bytes array (zarr's ``string`` and
    ``variable_length_bytes``), read back as a ``StringDType`` array / an
    object array of ``bytes``, like zarr does. ``fill_value`` (None): 0,
    ``""`` or ``b""``. ``dims`` names the axes (xarray needs them). Missing parent groups are created. ArrayExistsError if
    anything is at ``name``.
    """
    name = _check_name(name)
    if isinstance(shape, (int, np.integer)):
        shape = (int(shape),)
    meta = ArrayMeta.create(
        shape, dtype, chunks=chunks, codec=codec, fill_value=fill_value, dims=dims, attributes=attributes
    )
    store, tx, owns = _resolve(url_or_tx, create=True)
    try:
        if tx is not None:
            raw = _create_in(tx, name, meta)
            return BigArray(store, name, meta, raw, transaction=tx, cache_bytes=cache_bytes)
        tx = Transaction(store, message=f"create array {name}")
        try:
            raw = _create_in(tx, name, meta)
            tid = tx.commit()
        except BaseException:
            tx.abort()
            raise
        return BigArray(store, name, meta, raw, before=next_tid_after(tid), owns_store=owns, cache_bytes=cache_bytes)
    except BaseException:
        if owns:
            store.close()
        raise


def open(  # noqa: A001 - arrays.open mirrors zarr.open
    url_or_tx: Target,
    name: str,
    *,
    at: At | None = None,
    cache_bytes: int = DEFAULT_CACHE_BYTES,
) -> BigArray:
    """Open array ``name``.

    Without ``at`` the array is writable (autocommit, or within the given
    Transaction) and reads the snapshot of the newest commit until
    :meth:`BigArray.refresh`. ``at`` (a tid, a datetime, a Unix time) opens
    a read-only view of the array as it was then. ArrayNotFoundError if
    there is no array at ``name`` (then); from a URL,
    neostore.StoreNotFoundError if there is no store (none is created).
    """
    name = _check_name(name)
    store, tx, owns = _resolve(url_or_tx)
    key = f"{name}/{METADATA_KEY}"
    try:
        if at is not None:
            before = snapshot_bound(store, at)
            raw = Snapshot(store, before).get(key)
            if raw is None:
                raise ArrayNotFoundError(name, describe(at))
            meta = ArrayMeta.from_bytes(raw, name)
            return BigArray(
                store, name, meta, raw, before=before, read_only=True, owns_store=owns, cache_bytes=cache_bytes
            )
        if tx is not None:
            raw = tx.get(key)
            if raw is None:
                raise ArrayNotFoundError(name)
            return BigArray(store, name, ArrayMeta.from_bytes(raw, name), raw, transaction=tx, cache_bytes=cache_bytes)
        snapshot = Snapshot.latest(store)
        raw = snapshot.get(key)
        if raw is None:
            raise ArrayNotFoundError(name)
        meta = ArrayMeta.from_bytes(raw, name)
        return BigArray(store, name, meta, raw, before=snapshot.before, owns_store=owns, cache_bytes=cache_bytes)
    except BaseException:
        if owns:
            store.close()
        raise
