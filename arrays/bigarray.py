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

import math
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from typing import Any, Self

import numpy as np

from windvane import neostore

from . import appending
from .array_reads import ChunkReader
from .array_view import ArrayView, View
from .cache import DEFAULT_CACHE_BYTES, ChunkCache
from .dask_source import DaskSource, SourceState, portable_url, shared_store
from .errors import ArrayExistsError, ArrayNotFoundError, ReadOnlyArrayError
from .keys import Snapshot, encode_key, next_tid_after
from .metadata import METADATA_KEY, ArrayMeta, as_stored, group_document, node_type
from .mount.config import Access
from .selection import normalize, result_shape, unorient
from .target import StoreHandle, Target, previous, resolve
from .timetravel import At, describe, snapshot_bound
from .transaction import Transaction
from .workers import io_pool

#: What a write plans under the lock, from the latest metadata: the plan of the region it writes, and the
#: block written there (ascending, every axis kept).
Plan = Callable[[ArrayMeta], tuple[appending.Region, np.ndarray]]


def _check_name(name: str) -> str:
    if not isinstance(name, str) or not name:
        raise ValueError("an array name is a non-empty string such as 'stream/temperature'")
    parts = name.split("/")
    if any(p in ("", ".", "..") for p in parts) or parts[-1] == METADATA_KEY:
        raise ValueError(f"array name {name!r} must be '/'-separated non-empty parts, without '.', '..' or zarr.json")
    return name


class BigArray:
    """An n-dimensional array whose chunks are neostore objects.

    Make one with :func:`arrays.create` or :func:`arrays.open`. Basic
    indexing (integers, slices with any step, ``...``) reads numpy arrays;
    ``a[sel] = x`` and :meth:`append` write. ``cache`` holds decoded chunks
    (``cache.stats()``), ``chunks_loaded`` counts chunk values read from the
    database. Reads are thread-safe (dask runs them in threads).

    What it shows is its :class:`~arrays.array_view.ArrayView`; its chunks are
    read by its :class:`~arrays.array_reads.ChunkReader` (``cache``: a stream
    gives all of its arrays one); the Store is closed with it if it was
    opened from a URL.
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
        cache: ChunkCache | None = None,
    ):
        self.name = name
        self._read_only = read_only
        self._handle = StoreHandle(store, owns=owns_store)
        self._view = ArrayView(store, name, meta, meta_raw, before=before, transaction=transaction)
        self._chunks = ChunkReader(store, name, ChunkCache(cache_bytes) if cache is None else cache)

    # -- what it is ----------------------------------------------------------------

    @property
    def meta(self) -> ArrayMeta:
        """The parsed ``zarr.json`` of this view."""
        return self._view.meta

    @property
    def view(self) -> View:
        """The whole view: metadata, its bytes, the snapshot bound (give it back to :meth:`restore`)."""
        return self._view.current

    @property
    def cache(self) -> ChunkCache:
        """The decoded chunks kept for reads (``cache.stats()``)."""
        return self._chunks.cache

    @property
    def chunks_loaded(self) -> int:
        """Chunk values read from the database so far."""
        return self._chunks.loaded

    @property
    def shape(self) -> tuple[int, ...]:
        """The array's shape as this view sees it."""
        return self.meta.shape

    @property
    def dtype(self) -> np.dtype:
        """The numpy dtype reads return (``StringDType`` for strings, object for bytes)."""
        return self.meta.dtype

    @property
    def chunks(self) -> tuple[int, ...]:
        """The shape of a stored chunk."""
        return self.meta.chunks

    @property
    def ndim(self) -> int:
        """The number of axes."""
        return len(self.meta.shape)

    @property
    def size(self) -> int:
        """The number of elements."""
        return math.prod(self.meta.shape)

    @property
    def nbytes(self) -> int:
        """The bytes the whole array takes decoded (``size * itemsize``)."""
        return self.size * self.dtype.itemsize

    @property
    def fill_value(self) -> Any:
        """What unwritten elements read as."""
        return self.meta.fill_value

    @property
    def attrs(self) -> dict[str, Any]:
        """The array's zarr attributes (a copy)."""
        return self.meta.attributes

    @property
    def dims(self) -> tuple[str, ...] | None:
        """The dimension names, if the array has them."""
        return self.meta.dims

    @property
    def codec(self) -> list[dict[str, Any]]:
        """The zarr v3 ``codecs`` the chunks are stored with."""
        return self.meta.codec.to_json()

    @property
    def read_only(self) -> bool:
        """Whether writes are refused (a snapshot opened with ``at=``)."""
        return self._read_only

    @property
    def tid(self) -> bytes | None:
        """The last commit this view sees (None inside a transaction: it sees the latest)."""
        return self._view.tid

    @property
    def store(self) -> neostore.Store:
        """The neostore Store the array lives in."""
        return self._handle.store

    def __len__(self) -> int:
        return self.shape[0]

    def __repr__(self) -> str:
        before = self._view.before
        where = "in a transaction" if before is None else f"at 0x{previous(before).hex()}"
        mode = ", read-only" if self._read_only else ""
        return f"<BigArray {self.name!r} shape={self.shape} dtype={self.dtype} chunks={self.chunks} {where}{mode}>"

    def close(self) -> None:
        """Close the store if this array opened it from a URL; safe to call more than once."""
        self._handle.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- moving the view -------------------------------------------------------------

    def refresh(self) -> bytes | None:
        """Move the view to the newest commit, keeping cached chunks that did not change; returns its tid."""
        return self._view.refresh(self.cache)

    def restore(self, view: View) -> None:
        """Show ``view`` again (one taken from :attr:`view` of this array), as after a failed write."""
        self._view.replace(view)

    def show(self, raw: bytes, before: bytes | None) -> None:
        """Show the metadata ``raw`` at snapshot bound ``before`` (None: in the transaction).

        ArrayError if ``raw`` describes another array (dtype or chunks changed).
        """
        self._view.show(raw, before)

    def set_meta(self, meta: ArrayMeta, raw: bytes) -> None:
        """Show ``meta`` (whose bytes are ``raw``), just written by this process, at the same snapshot bound."""
        self._view.set_meta(meta, raw)

    def moved_to(self, before: bytes) -> None:
        """Show the same metadata at snapshot bound ``before``: after a commit that wrote exactly it."""
        self._view.moved_to(before)

    def forget_changes(self, since: bytes | None, until: bytes) -> None:
        """Drop cached chunks of objects changed by commits in ``(since, until]`` (``since`` None: a
        transaction's view, which caches nothing it could not see)."""
        self.cache.forget_changes(self.store, since, until)

    # -- reading ---------------------------------------------------------------------

    def __getitem__(self, key: Any) -> np.ndarray:
        view = self._view.current
        return self._chunks.read(view, normalize(key, view.meta.shape), self._view.live_transaction)

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        out = self[...]
        return out if dtype is None else out.astype(dtype, copy=False)

    def stored_chunks(self, first: int, stop: int) -> list[bytes | None]:
        """Row chunks ``[first, stop)`` as stored: their encoded bytes, None for a chunk never written (the fill
        value). Each is what a zarr store of this array's metadata (:attr:`meta`) holds under the chunk's key,
        so that a copy with the same data type, chunk shape and codecs takes it as it is, without decoding
        and encoding again. The array's chunks hold whole rows (its other axes in one chunk)."""
        return self._chunks.stored(self._view.current, first, stop, self._view.live_transaction)

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
        import dask.array as da  # dask loads slowly: only for those who ask for it

        view = self._view.current  # one consistent (meta, raw, before)
        state: SourceState | None = None
        if view.before is None:
            token = uuid.uuid4().hex  # a transaction's view changes with its writes: never reuse results
        else:
            token = f"{view.before.hex()}-{id(self.store):x}"
            state = (portable_url(self.store), self.name, view.raw, view.before, self.cache.budget)
        return da.from_array(  # type: ignore[no-untyped-call]  # dask.array ships no annotations
            DaskSource(self, self.name, state, view.meta.shape, view.meta.dtype, reopen),
            chunks=view.meta.chunks,
            name=f"bigarray-{self.name}-{token}",
            lock=False,
            asarray=False,
            fancy=False,
            meta=np.empty((0,) * len(view.meta.shape), dtype=view.meta.dtype),
        )

    def mmap(self, access: Access = "sequential") -> np.memmap:
        """This view as a read-only ``numpy.memmap`` of the machine's mount of the store (``windvane mount``,
        joined or started): numpy, scipy and scikit-learn read it as any ndarray, page by page, and every
        process mapping it shares one page cache. It stays at this view's commit; after :meth:`refresh`, map
        it again for the newer values. ``access="random"`` for strided or scattered reads (the kernel reads
        only the pages touched). MountError where FUSE is missing (read with :meth:`blocks` or
        :meth:`to_dask` there); text and bytes arrays have no mapping."""
        from .mount.client import map_array  # FUSE's client side loads only for a mapping

        tid = self.tid
        if tid is None:
            raise ReadOnlyArrayError(f"array {self.name!r} is open in a transaction: map it at a snapshot")
        return map_array(self.store.url.text, tid, self.name, access)

    def decode_chunk(self, meta: ArrayMeta, value: bytes | memoryview, key: str) -> np.ndarray:
        """Chunk ``key``'s stored bytes ``value`` decoded; ArrayError naming the chunk if they do not decode."""
        return self._chunks.decode(meta, value, key)

    def count_loaded(self, n: int) -> None:
        """Add ``n`` chunk values read from the database to :attr:`chunks_loaded` (thread-safe)."""
        self._chunks.count_loaded(n)

    def current_chunks(self, tx: Transaction, meta: ArrayMeta, keys: list[str], cached: bool) -> dict[str, np.ndarray]:
        """The latest decoded chunks of ``keys`` (missing ones left out), for read-modify-write in ``tx``.

        ``tx`` holds the commit lock. ``cached``: take a chunk from the cache
        when it holds the head's revision of it (autocommit writes only: a
        transaction's reads must see its own writes).
        """
        return self._chunks.latest_chunks(tx, meta, keys, cached)

    # -- writing ---------------------------------------------------------------------

    def __setitem__(self, key: Any, value: Any) -> None:
        """Write ``value`` (broadcast to the selection's shape) at basic selection ``key``.

        Chunks the selection covers in part are read, modified and rewritten;
        one commit in autocommit mode. ReadOnlyArrayError for a snapshot.
        """
        self._writable()
        selection = normalize(key, self.shape)
        data = np.broadcast_to(as_stored(value, self.dtype), result_shape(selection))
        full = unorient(data, selection)

        def plan(latest: ArrayMeta) -> tuple[appending.Region, np.ndarray]:
            return appending.plan_region(self.name, latest, latest.shape, selection), full

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

        def plan(latest: ArrayMeta) -> tuple[appending.Region, np.ndarray]:
            self._check_other_axes(data.shape, latest.shape, axis)
            return appending.append_region(self.name, latest, data.shape, axis), data

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

    def _write(self, plan: Plan, message: str, metadata: Mapping[str, Any] | None) -> None:
        """Run one write: lock, read the latest metadata, ``plan`` it, write chunks and metadata, commit."""
        self._writable()
        if self._view.in_transaction:
            meta, raw, _, _ = self._write_locked(self._view.live_transaction(), plan, cached=False)
            self._view.replace(View(meta, raw, None))
            return
        store = self.store
        tx = Transaction(store, message=message, metadata=metadata)
        try:
            tx.lock()
            # Holding the lock, the head cannot move: drop what others changed
            # since this view, so that after the commit the cache matches it.
            head = store.last_transaction()
            self.forget_changes(self.tid, head)
            meta, raw, built, written = self._write_locked(tx, plan, cached=True)
            tid = tx.commit()
        except BaseException:
            tx.abort()
            raise
        self._view.replace(View(meta, raw, next_tid_after(tid)))
        oids = store.oids_for([encode_key(k) for k in written])
        self.cache.discard(oids.values())
        for key, chunk in built:
            oid = oids.get(encode_key(key))
            if oid is not None:
                self.cache.put(oid, tid, chunk)

    def _write_locked(
        self, tx: Transaction, plan: Plan, *, cached: bool
    ) -> tuple[ArrayMeta, bytes, list[tuple[str, np.ndarray]], list[str]]:
        """In ``tx``, holding the lock: write what ``plan`` makes of the latest metadata, and the new metadata.

        Chunks the write covers in part are read (from the cache when
        ``cached`` and it holds their latest revision). Returns the metadata
        and its bytes, the chunks built as new arrays (worth caching) and
        every chunk key written.
        """
        tx.lock()
        meta_key = self._view.meta_key
        tx.fold_for([meta_key])  # a row log's rows move into the chunks this write reads
        raw = tx.get(meta_key)
        latest = self._view.parse_meta(raw)
        assert raw is not None  # parse_meta refuses None
        region, value = plan(latest)
        old = self.current_chunks(tx, region.meta, region.partial, cached)
        built: list[tuple[str, np.ndarray]] = []
        jobs = appending.region_jobs(region, value, old, built)
        meta = region.meta
        weight = len(region.keys) * meta.chunk_nbytes if len(region.keys) > 1 else 0
        batches = appending.Batches(tx)
        batches.add(appending.encode(jobs, weight, meta.chunk_nbytes))
        if meta.shape != latest.shape:
            raw = meta.to_bytes()
            batches.flush({meta_key: raw})
        else:
            batches.flush()
        return meta, raw, built, region.keys


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
    store, tx, owns = resolve(url_or_tx, create=True)
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


def open(  # arrays.open mirrors zarr.open
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
    store, tx, owns = resolve(url_or_tx)
    try:
        return _opened(store, tx, owns, name, at, cache_bytes)
    except BaseException:
        if owns:
            store.close()
        raise


def _opened(
    store: neostore.Store, tx: Transaction | None, owns: bool, name: str, at: At | None, cache_bytes: int
) -> BigArray:
    """Array ``name`` of ``store``: as it was ``at`` (read-only), in ``tx``, or at the newest commit."""
    key = f"{name}/{METADATA_KEY}"
    if at is not None:
        before = snapshot_bound(store, at)
        raw = Snapshot(store, before).get(key)
        if raw is None:
            raise ArrayNotFoundError(name, describe(at))
        meta = ArrayMeta.from_bytes(raw, name)
        return BigArray(store, name, meta, raw, before=before, read_only=True, owns_store=owns, cache_bytes=cache_bytes)
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


def reopen(state: SourceState) -> BigArray:
    """The read-only array a :class:`~arrays.dask_source.DaskSource` names, in the process that reads it: its
    snapshot on this process's shared read-only Store of the URL."""
    url, name, raw, before, budget = state
    meta = ArrayMeta.from_bytes(raw, name)
    return BigArray(shared_store(url), name, meta, raw, before=before, read_only=True, cache_bytes=budget)
