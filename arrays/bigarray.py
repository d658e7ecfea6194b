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

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from . import appending
from .array_reads import ArrayReads
from .array_view import View
from .cache import DEFAULT_CACHE_BYTES
from .errors import ArrayExistsError, ArrayNotFoundError, ReadOnlyArrayError
from .keys import Snapshot, encode_key, next_tid_after
from .metadata import METADATA_KEY, ArrayMeta, as_stored, group_document, node_type
from .selection import normalize, result_shape, unorient
from .target import Target, resolve
from .timetravel import At, describe, snapshot_bound
from .transaction import Transaction

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


class BigArray(ArrayReads):
    """An n-dimensional array whose chunks are neostore objects.

    Make one with :func:`arrays.create` or :func:`arrays.open`. Basic
    indexing (integers, slices with any step, ``...``) reads numpy arrays;
    ``a[sel] = x`` and :meth:`append` write. ``cache`` holds decoded chunks
    (``cache.stats()``), ``chunks_loaded`` counts chunk values read from the
    database. Reads are thread-safe (dask runs them in threads).
    """

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
        if self._tx is not None:
            meta, raw, _, _ = self._write_locked(self._live_transaction(), plan, cached=False)
            self._view = View(meta, raw, None)
            return
        tx = Transaction(self._store, message=message, metadata=metadata)
        try:
            tx.lock()
            # Holding the lock, the head cannot move: drop what others changed
            # since this view, so that after the commit the cache matches it.
            head = self._store.last_transaction()
            self.forget_changes(self.tid, head)
            meta, raw, built, written = self._write_locked(tx, plan, cached=True)
            tid = tx.commit()
        except BaseException:
            tx.abort()
            raise
        self._view = View(meta, raw, next_tid_after(tid))
        oids = self._store.oids_for([encode_key(k) for k in written])
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
        tx.fold_for([self._meta_key])  # a row log's rows move into the chunks this write reads
        raw = tx.get(self._meta_key)
        latest = self.parse_meta(raw)
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
            batches.flush({self._meta_key: raw})
        else:
            batches.flush()
        return meta, raw, built, region.keys

    def current_chunks(self, tx: Transaction, meta: ArrayMeta, keys: list[str], cached: bool) -> dict[str, np.ndarray]:
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
                found[key] = self.decode_chunk(meta, value, key)
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
    store, tx, owns = resolve(url_or_tx)
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
