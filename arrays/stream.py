"""Streams: the columns of one data source as BigArrays sharing a time axis, appended row by row.

A stream ``tag`` is a zarr v3 group at ``streams/<tag>`` (``quarantine/<tag>``
for data that failed validation) holding one BigArray per column, all with
the same first axis: ``time`` (int64, ns since the Unix epoch, UTC) and the
columns. zarr and xarray read the group directly::

    s = arrays.create_stream(url, "turbine1", [Column("speed", "float32"), Column("msg", "str")])
    s.append({"time": t_ns, "speed": v, "msg": lines})   # one commit, every column
    s.to_pandas()

Invariants:

- **Rows stay aligned.** :meth:`Stream.append` adds the same rows to every
  array in one transaction, after taking neostore's commit lock and
  re-reading every array's length under it: concurrent appenders in any
  number of processes never interleave rows differently across columns.
- **One snapshot.** A stream opened from a URL/Store, or at ``at=``, reads
  all of its arrays at one tid bound, so their lengths agree.
- **Cheap appends in a transaction.** Opened from an
  :class:`~arrays.Transaction`, appends join it; the metadata of all of a
  stream's arrays is read in one batched request per transaction (none at
  all if it was read while the transaction already held the lock), and the
  partial last chunks of all columns in one more. Nothing is listed.

The group's attributes hold ``{"windvane_stream": 1, "columns": [...]}``
plus the user's; the ``streams`` group's ``windvane_streams`` attribute
lists the tags, so :func:`list_streams` reads one document instead of
scanning every chunk key.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any, Self

import numpy as np

from windvane import neostore

from . import appending, stream_export, time_index
from .array_view import View
from .bigarray import BigArray
from .cache import DEFAULT_CACHE_BYTES, ChunkCache
from .errors import ArrayError, ColumnError, ReadOnlyArrayError, StreamError, StreamNotFoundError
from .keys import Snapshot, encode_key, next_tid_after
from .metadata import METADATA_KEY, ArrayMeta, dump_json, item_bytes
from .mount.config import Access
from .stream_schema import (
    MAX_PART_BYTES,
    MISSING_ATTR,
    NAME_ATTR,
    QUARANTINE_ROOT,
    REGISTRY_ATTR,
    RESERVED_ATTRS,
    STREAM_FORMAT,
    STREAMS_ROOT,
    TIME,
    TIME_ATTRS,
    Column,
    check_column_names,
    coerce_column,
    column_key,
    group_attrs,
    stream_path,
)
from .target import StoreHandle, previous
from .transaction import Transaction
from .workers import weighted_map

__all__ = [
    "MAX_PART_BYTES",
    "MISSING_ATTR",
    "NAME_ATTR",
    "QUARANTINE_ROOT",
    "REGISTRY_ATTR",
    "STREAMS_ROOT",
    "STREAM_FORMAT",
    "TIME",
    "TIME_ATTRS",
    "Column",
    "Stream",
    "check_column_names",
    "coerce_column",
    "column_key",
    "stream_path",
]

#: What a failed autocommit write restores (see Stream._saved).
_Saved = tuple[bytes, dict[str, Any], dict[str, BigArray], dict[str, View]]


class Stream:
    """The arrays of one stream at one snapshot (or in one transaction). Make it with create/open_stream.

    ``tag``, ``path``; ``attrs``: the user's attributes (a copy); ``columns``:
    the column keys in order, without ``time`` (a column's name, unless
    :func:`column_key` escaped it: :meth:`name_of` gives it back);
    ``stream[name]``: the BigArray of a column by key or name (``"time"``
    included), all sharing one chunk cache of ``cache_bytes``.
    ``len(stream)``: its rows. Exports (``to_arrow``, ``to_pandas``,
    ``to_xarray``) name the columns by their names.

    Construction reads the stream's documents: StreamNotFoundError if there
    is none.
    """

    def __init__(
        self,
        store: neostore.Store,
        tag: str,
        path: str,
        *,
        before: bytes | None,
        transaction: Transaction | None,
        read_only: bool = False,
        owns_store: bool = False,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        current: bool = False,
    ):
        self.tag = tag
        self.path = path
        self.cache = ChunkCache(cache_bytes)
        self._store = store
        self._tx = transaction
        self._before = before
        self._read_only = read_only
        self._handle = StoreHandle(store, owns=owns_store)
        self._group_raw = b""
        self._attrs: dict[str, Any] = {}
        self._arrays: dict[str, BigArray] = {}
        self._known_ranges: dict[tuple[int, bytes], time_index.Range] = {}  # computed: chunks without a record
        # Inside a transaction: whether the metadata held was read (or written)
        # while the transaction held the commit lock, so is still the latest.
        self._current = current
        self._load(None)

    # -- what it is ----------------------------------------------------------------

    @property
    def attrs(self) -> dict[str, Any]:
        """The user's attributes of the stream (a deep copy: changing it changes nothing stored)."""
        # A deep copy: the parsed group document is shared by every view of these bytes.
        return copy.deepcopy({k: v for k, v in self._attrs.items() if k not in RESERVED_ATTRS})

    @property
    def columns(self) -> list[str]:
        """The column keys in order, ``time`` left out."""
        return [name for name in self._arrays if name != TIME]

    @property
    def tid(self) -> bytes | None:
        """The last commit this view sees (None inside a transaction: it sees the latest)."""
        return None if self._before is None else previous(self._before)

    @property
    def read_only(self) -> bool:
        """Whether appends are refused (a snapshot opened with ``at=``)."""
        return self._read_only

    def __len__(self) -> int:
        return len(self._arrays[TIME])

    def __getitem__(self, name: str) -> BigArray:
        """The array of column ``name``: its key, or the name an escaped key stands for (:func:`column_key`)."""
        try:
            return self._arrays[name]
        except KeyError:
            pass
        try:
            return self._arrays[column_key(name)]
        except (KeyError, ColumnError):
            raise ColumnError(f"stream {self.tag!r} has no column {name!r}; it has {[TIME, *self.columns]}") from None

    def __contains__(self, name: object) -> bool:
        if name in self._arrays:
            return True
        if not isinstance(name, str):
            return False  # no column is named by anything but text
        try:
            return column_key(name) in self._arrays
        except ColumnError:
            return False

    def name_of(self, key: str) -> str:
        """The name of the column stored under ``key``: its ``name`` attribute if its key is escaped, else the key."""
        return self._arrays[key].attrs.get(NAME_ATTR, key) if key != TIME else key

    def __repr__(self) -> str:
        where = "in a transaction" if self._before is None else f"at 0x{previous(self._before).hex()}"
        return f"<Stream {self.tag!r} rows={len(self)} columns={self.columns} {where}>"

    def time_ranges(self) -> list[time_index.Range]:
        """The least and greatest ``time`` of each chunk of rows, in order (None: no row of it has a time).

        Read from the records kept beside the chunks (:mod:`arrays.time_index`):
        only the partial last chunk and chunks written without a record are
        read (each once per view).
        """
        reader = self._live_transaction() if self._before is None else Snapshot(self._store, self._before)
        return time_index.chunk_ranges(reader, self.path, self._arrays[TIME], self._known_ranges)

    def time_span(self) -> time_index.Range:
        """The least and greatest ``time`` of the stream's rows, ns since the epoch (UTC); None if none has one.

        Time is in arrival order: these are not the first and last rows' times.
        """
        return time_index.span(self.time_ranges())

    def close(self) -> None:
        """Close the store if this stream opened it from a URL; safe to call more than once."""
        self._handle.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- loading metadata --------------------------------------------------------------

    def _key(self, name: str) -> str:
        return f"{self.path}/{name}/{METADATA_KEY}"

    @property
    def _group_key(self) -> str:
        return f"{self.path}/{METADATA_KEY}"

    def _read(self, keys: list[str]) -> dict[str, bytes]:
        if self._before is None:
            return self._live_transaction().get_many(keys)
        return Snapshot(self._store, self._before).get_many(keys)

    def _live_transaction(self) -> Transaction:
        tx = self._tx
        if tx is None or tx.state != "open":
            raise StreamError(f"the transaction stream {self.tag!r} was opened in has ended; open it again")
        return tx

    def _load(self, documents: Mapping[str, bytes] | None = None, tx: Transaction | None = None) -> None:
        """(Re)build the column arrays from the group and array documents given; the rest are read.

        From ``tx`` if given (a write holding the lock reads the head), else from the view's snapshot.
        """
        if tx is not None:
            documents = tx.get_many([self._group_key, *(self._key(n) for n in self._arrays)])
        if documents is None or self._group_key not in documents:
            group = self._read([self._group_key]).get(self._group_key)
            if group is None:
                raise StreamNotFoundError(f"no stream {self.tag!r} at {self.path!r}; create it with create_stream")
            documents = {self._group_key: group, **(documents or {})}
        group_raw = documents[self._group_key]
        attrs = group_attrs(group_raw, self.path)
        names = [TIME, *attrs.get("columns", [])]
        missing = [self._key(n) for n in names if self._key(n) not in documents]
        if missing:  # columns added since: one more batched read
            documents = {**documents, **(tx.get_many(missing) if tx is not None else self._read(missing))}
        arrays: dict[str, BigArray] = {}
        for name in names:
            raw = documents.get(self._key(name))
            if raw is None:
                raise StreamError(f"stream {self.tag!r} lists column {name!r} but has no array for it; it is damaged")
            old = self._arrays.get(name)
            if old is not None:
                old.show(raw, self._before)
                arrays[name] = old
                continue
            array = BigArray(
                self._store,
                f"{self.path}/{name}",
                ArrayMeta.from_bytes(raw, f"{self.path}/{name}"),
                raw,
                before=self._before,
                transaction=self._tx,
                read_only=self._read_only,
                cache=self.cache,  # one budget for the whole stream (oids never collide)
            )
            arrays[name] = array
        self._group_raw, self._attrs, self._arrays = group_raw, attrs, arrays

    def refresh(self) -> bytes | None:
        """Move every array to the newest commit, one tid for all; returns it (None in a transaction)."""
        if self._before is None:
            tx = self._live_transaction()
            self._current = tx.locked
            self._load(tx=tx)
            return None
        head = self._store.last_transaction()
        if head != self.tid:
            self._arrays[TIME].forget_changes(self.tid, head)  # the shared cache
            self._before = next_tid_after(head)
            self._load(self._read([self._group_key, *(self._key(n) for n in self._arrays)]))
        return self.tid

    def mmap(self, name: str, access: Access = "sequential") -> np.memmap:
        """Column ``name`` at this snapshot as a read-only ``numpy.memmap`` of the machine's mount of the store
        (``windvane mount``, joined or started): numpy, scipy and scikit-learn read it as any ndarray, page by
        page, and every process mapping it shares one page cache. After :meth:`refresh`, map it again for
        the newer rows. ``access="random"`` for strided or scattered reads: the kernel then reads only the
        pages touched instead of far ahead of each. MountError where FUSE is missing; text and bytes columns
        have no mapping."""
        from .mount.client import map_column  # FUSE's client side loads only for a mapping

        if self.tid is None:
            raise ReadOnlyArrayError(f"stream {self.tag!r} is open in a transaction: map it at a snapshot")
        key = name if name in self._arrays else column_key(name)
        return map_column(self._store.url.text, self.tid, self.tag, key, access)

    # -- writing ---------------------------------------------------------------------

    def _writable(self) -> None:
        if self._read_only:
            raise ReadOnlyArrayError(
                f"stream {self.tag!r} is a read-only snapshot (opened with at=); open it without at= to append"
            )

    def _coerce(self, columns: Mapping[str, Any]) -> tuple[dict[str, np.ndarray], int]:
        """Every column as an array of its dtype and row shape, all of one length ``n``; ColumnError otherwise."""
        if not isinstance(columns, Mapping):
            raise TypeError(f"append takes a mapping of column name to values, not {type(columns).__name__}")
        expected = list(self._arrays)
        check_column_names(
            self.tag, [n for n in expected if n not in columns], [n for n in columns if n not in self._arrays], expected
        )
        data = {
            name: coerce_column(self.tag, name, columns[name], array.dtype, array.shape[1:])
            for name, array in self._arrays.items()
        }
        lengths = {name: len(v) for name, v in data.items()}
        if len(set(lengths.values())) > 1:
            raise ColumnError(f"append to stream {self.tag!r}: the columns differ in length: {lengths}")
        return data, lengths[TIME]

    def _latest(self, tx: Transaction) -> None:
        """Under the lock: make the arrays' metadata the latest (one batched read unless already current)."""
        if self._current:
            return
        self._load(tx=tx)
        self._current = True

    def append(
        self, columns: Mapping[str, Any], *, message: str | None = None, metadata: Mapping[str, Any] | None = None
    ) -> int:
        """Add ``n`` rows to every array of the stream atomically; returns the new length.

        ``columns`` maps every column name, ``"time"`` included, to ``n``
        values (``time``: int64 ns since the epoch, UTC, or datetime64).
        ColumnError names missing/unknown columns and mismatched lengths or
        row shapes, before anything is written. In autocommit mode this is
        one commit (``message``/``metadata`` describe it); in a transaction
        it joins it.
        """
        self._writable()
        try:
            data, n = self._coerce(columns)
        except ColumnError:
            if all(name in self._arrays for name in columns):
                raise
            # Columns this view does not know: perhaps added since by another
            # writer; decided under the lock, against the latest metadata.
            data, n = {}, len(next(iter(columns.values()), ()))
        if self._tx is not None:
            tx = self._live_transaction()
            tx.lock()
            tx.fold(self.path)  # the row log's rows move into the chunks this append reads
            self._latest(tx)
            if set(data) != set(self._arrays):  # the columns changed before the lock
                data, n = self._coerce(columns)
            if n:
                self._write_rows(tx, data, n, cached=False)
            return len(self)
        if n == 0 and data:
            return len(self)
        tx = Transaction(self._store, message=message or f"append {n} rows to stream {self.tag}", metadata=metadata)
        saved = self._saved()
        try:
            tx.lock()
            # Holding the lock the head cannot move: drop what others changed
            # since this view, so that after the commit the cache matches it.
            head = self._store.last_transaction()
            self._arrays[TIME].forget_changes(self.tid, head)
            tx.fold(self.path)
            self._load(tx=tx)
            if set(data) != set(self._arrays):  # the columns changed since this view
                data, n = self._coerce(columns)
            built, written = self._write_rows(tx, data, n, cached=True) if n else ([], [])
            tid = tx.commit()
        except BaseException:
            tx.abort()
            self._restore(saved)
            raise
        self._moved_to(tid)
        oids = self._store.oids_for([encode_key(k) for k in written])
        self.cache.discard(oids.values())
        for key, chunk in built:
            oid = oids.get(encode_key(key))
            if oid is not None:
                self.cache.put(oid, tid, chunk)
        return len(self)

    def _saved(self) -> _Saved:
        """What a failed autocommit write restores: the view read before it took the lock."""
        return self._group_raw, self._attrs, dict(self._arrays), {n: a.view for n, a in self._arrays.items()}

    def _restore(self, saved: _Saved) -> None:
        self._group_raw, self._attrs, self._arrays, views = saved
        for name, view in views.items():
            self._arrays[name].restore(view)

    def _moved_to(self, tid: bytes) -> None:
        """After our own commit ``tid``: every array's view is at it (its metadata is what we wrote)."""
        self._before = next_tid_after(tid)
        for array in self._arrays.values():
            array.moved_to(self._before)

    def _write_rows(
        self, tx: Transaction, data: dict[str, np.ndarray], n: int, *, cached: bool
    ) -> tuple[list[tuple[str, np.ndarray]], list[str]]:
        """Append ``data`` (``n`` rows per array) in ``tx``, which holds the lock and whose metadata is loaded.

        Returns the chunks built by copying (worth caching) and every chunk key written.
        """
        lengths = {name: len(array) for name, array in self._arrays.items()}
        if len(set(lengths.values())) > 1:
            raise StreamError(
                f"the arrays of stream {self.tag!r} differ in length {lengths}: something wrote them outside "
                "Stream.append; cut them to one length before appending"
            )
        regions = {
            name: appending.append_region(array.name, array.meta, data[name].shape)
            for name, array in self._arrays.items()
        }
        old = self._partial_chunks(tx, regions, cached)
        built: list[tuple[str, np.ndarray]] = []
        filled: list[tuple[int, np.ndarray]] = []  # the time chunks this append fills: their records
        jobs = (
            job
            for name, region in regions.items()
            for job in appending.region_jobs(region, data[name], old, built, filled if name == TIME else None)
        )
        weight = sum(item_bytes(r.meta.dtype) * math.prod(r.meta.chunks) * len(r.keys) for r in regions.values())
        batches = appending.Batches(tx)
        batches.add(appending.encode(jobs, weight))
        documents = time_index.records(self.path, filled)
        for name, region in regions.items():
            raw = region.meta.to_bytes()
            documents[f"{region.name}/{METADATA_KEY}"] = raw
            self._arrays[name].set_meta(region.meta, raw)
        batches.flush(documents)
        return built, [key for region in regions.values() for key in region.keys]

    def _partial_chunks(
        self, tx: Transaction, regions: dict[str, appending.Region], cached: bool
    ) -> dict[str, np.ndarray]:
        """The decoded chunks an append rewrites, read in one request (or from the cache in autocommit)."""
        keys = [key for region in regions.values() for key in region.partial]
        if not keys:
            return {}
        if cached:
            found: dict[str, np.ndarray] = {}
            for name, region in regions.items():
                if region.partial:
                    found.update(self._arrays[name].current_chunks(tx, region.meta, region.partial, True))
            return found
        values = tx.get_many(keys)
        owner = {k: (self._arrays[name], region.meta) for name, region in regions.items() for k in region.partial}

        def decode(key: str) -> tuple[str, np.ndarray]:
            array, meta = owner[key]
            return key, array.decode_chunk(meta, values[key], key)

        present = [k for k in keys if k in values]
        for array in self._arrays.values():
            array.count_loaded(sum(1 for k in present if owner[k][0] is array))
        weight = sum(owner[k][1].chunk_nbytes for k in present)
        return dict(weighted_map(decode, present, weight))

    def add_column(self, column: Column) -> BigArray:
        """Add ``column`` to the stream, as long as the stream, every row the fill value; returns its array.

        The fill value is NaN for floats (NaT for datetimes), else 0, ``""`` or
        ``b""``. Nothing but the metadata is written: unwritten chunks read as
        the fill value. ColumnError if the stream has that column already.
        """
        self._writable()
        if not isinstance(column, Column):
            raise TypeError(f"add_column takes a Column, not {type(column).__name__}")
        if self._tx is not None:
            tx = self._live_transaction()
            tx.lock()
            self._latest(tx)
            self._add_column_in(tx, column)
            return self._arrays[column.name]
        tx = Transaction(self._store, message=f"add column {column.name} to stream {self.tag}")
        saved = self._saved()
        try:
            tx.lock()
            self._load(tx=tx)
            self._add_column_in(tx, column)
            tid = tx.commit()
        except BaseException:
            tx.abort()
            self._restore(saved)
            raise
        self.refresh()  # every array to one snapshot, ours or later
        if self.tid is not None and self.tid < tid:
            raise ArrayError(f"stream {self.tag!r} did not see its own commit 0x{tid.hex()}")
        return self._arrays[column.name]

    def _add_column_in(self, tx: Transaction, column: Column) -> None:
        if column.name in self._arrays:
            raise ColumnError(f"stream {self.tag!r} has a column {column.name!r} already")
        key = self._key(column.name)
        if tx.exists(key):
            raise ColumnError(f"{self.path}/{column.name} exists but is not a column of stream {self.tag!r}")
        default_rows = self._arrays[TIME].chunks[0]
        meta = column.meta(default_rows, rows=len(self))
        doc = json.loads(self._group_raw)
        doc["attributes"]["columns"] = [*self.columns, column.name]
        group_raw = dump_json(doc)
        raw = meta.to_bytes()
        tx.set_many({self._group_key: group_raw, key: raw})
        self._load({self._group_key: group_raw, key: raw})

    # -- exporting ---------------------------------------------------------------------

    def to_arrow(
        self, start: stream_export.Bound = None, stop: stream_export.Bound = None, columns: Sequence[str] | None = None
    ) -> Any:
        """A pyarrow Table of rows ``[start:stop]``, or of the rows whose time is in ``[start, stop)`` when they are
        times (datetimes, ISO 8601 text); ``time`` and ``columns`` (keys; None: all): see
        :func:`arrays.stream_export.to_arrow`."""
        return stream_export.to_arrow(self, start, stop, columns)

    def to_pandas(self, start: stream_export.Bound = None, stop: stream_export.Bound = None) -> Any:
        """A pandas DataFrame of rows ``[start:stop]``, or of the rows whose time is in ``[start, stop)`` when they are
        times (datetimes, ISO 8601 text): see :func:`arrays.stream_export.to_pandas`."""
        return stream_export.to_pandas(self, start, stop)

    def to_xarray(self, start: stream_export.Bound = None, stop: stream_export.Bound = None) -> Any:
        """An xarray Dataset of rows ``[start:stop]``, or of the rows whose time is in ``[start, stop)`` when they are
        times (datetimes, ISO 8601 text): see :func:`arrays.stream_export.to_xarray`."""
        return stream_export.to_xarray(self, start, stop)
