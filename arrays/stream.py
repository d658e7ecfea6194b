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
import functools
import json
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from windvane import neostore

from .bigarray import BigArray, StoreOwner, Target, _resolve, _View
from .cache import DEFAULT_CACHE_BYTES, ChunkCache
from .errors import (
    ArrayError,
    ColumnError,
    InvalidTagError,
    ReadOnlyArrayError,
    StreamError,
    StreamExistsError,
    StreamNotFoundError,
)
from . import row_log
from .keys import Snapshot, encode_key, next_tid_after
from .metadata import (
    METADATA_KEY,
    ArrayMeta,
    as_stored,
    dump_json,
    group_document,
    item_bytes,
    node_type,
    storage_dtype,
)
from .selection import AxisSelection
from .timetravel import At, describe, snapshot_bound
from .transaction import Transaction
from .workers import ordered_map, weighted_map

#: The stream format written in the group's attributes.
STREAM_FORMAT = 1
#: The time column: int64 nanoseconds since the Unix epoch, UTC. The units are
#: spelled the CF way xarray decodes (it refuses the abbreviation "ns"), so
#: ``xr.open_zarr`` gives ``time`` as datetime64[ns].
TIME = "time"
TIME_ATTRS = {"units": "nanoseconds since 1970-01-01T00:00:00Z"}
#: Where streams live: accepted data, and data that failed validation.
STREAMS_ROOT = "streams"
QUARANTINE_ROOT = "quarantine"
#: The attribute of a root group listing its streams' tags.
REGISTRY_ATTR = "windvane_streams"
_RESERVED_ATTRS = ("windvane_stream", "columns")
#: Chunks per ``set_many`` call (binding their names in one round trip).
_WRITE_BATCH = 64
#: Encode in the thread pool only when an append's chunks weigh more than this:
#: below it the hand-off costs more than the parallelism saves.
_PARALLEL_BYTES = 1 << 20


#: The longest tag or column name, in UTF-8 bytes (a file name's limit). Two of them and a chunk
#: key stay well within the store's name limit (neostore's ``MAX_NAME``, 767 bytes).
MAX_PART_BYTES = 255


def _check_part(what: str, name: Any, error: type[Exception] = InvalidTagError) -> str:
    """``name`` if it can be one path segment of a zarr key, else ``error`` saying why."""
    if not isinstance(name, str) or not name:
        raise error(f"a {what} is a non-empty string, not {name!r}")
    if "/" in name or ".." in name or name in (".", METADATA_KEY) or not name.isprintable():
        raise error(
            f"{what} {name!r} must be printable and contain no '/' or '..' (and not be '.' or {METADATA_KEY!r})"
        )
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        raise error(f"{what} {name!r} is not valid UTF-8 text") from None
    if size > MAX_PART_BYTES:
        raise error(f"{what} {name[:40]!r}... is {size} bytes of UTF-8; the limit is {MAX_PART_BYTES}")
    return name


#: The column attribute holding a column's name when its key had to be escaped (:func:`column_key`).
NAME_ATTR = "name"
#: The column attribute naming the value a column holds where a value is missing: an integer column's
#: exports (:meth:`Stream.to_arrow`, ``to_pandas``) give those rows back as missing (null, ``<NA>``).
MISSING_ATTR = "missing"
#: What :func:`column_key` escapes in a name that cannot be a key as it is (besides unprintable characters).
_ESCAPED = frozenset("%/.")


def column_key(name: str) -> str:
    """The key (path segment) of a column called ``name``: ``name`` itself when it can be one, else escaped.

    A name that is no valid segment (it holds ``/`` or ``..`` or an
    unprintable character, or is ``.`` or ``zarr.json``) has each ``%``,
    ``/``, ``.`` and unprintable character replaced by ``%XX``, the
    uppercase hex of each of its UTF-8 bytes: ``"Water flow [l/s]"`` is
    stored as ``"Water flow [l%2Fs]"``. The one rule for names and keys;
    the name itself is kept in the column's ``name`` attribute. ColumnError
    for a name that is not text, empty, or too long (:data:`MAX_PART_BYTES`).
    """
    try:
        return _check_part("column name", name, ColumnError)
    except ColumnError:
        if not isinstance(name, str) or not name:
            raise
    escaped = "".join(_escape(c) if c in _ESCAPED or not c.isprintable() else c for c in name)
    return _check_part("column name", escaped, ColumnError)


def _escape(char: str) -> str:
    return "".join(f"%{b:02X}" for b in char.encode("utf-8", "surrogatepass"))


def stream_path(tag: str, *, quarantine: bool = False) -> str:
    """``"streams/<tag>"`` (or ``"quarantine/<tag>"``); InvalidTagError for a tag that cannot be a path segment."""
    return f"{QUARANTINE_ROOT if quarantine else STREAMS_ROOT}/{_check_part('stream tag', tag)}"


@dataclass(frozen=True)
class Column:
    """One column of a stream: an array ``<stream path>/<name>`` whose rows follow the time axis.

    ``dtype``: a numpy dtype string (``"float32"``, ``"int64"``, ``"bool"``,
    ...), ``"str"`` (variable-length strings) or ``"bytes"``. ``inner``:
    the trailing shape of one row. ``chunk_rows``: rows per chunk (default:
    the stream's). ``codec``: as :func:`arrays.create`'s. ``attrs``: zarr
    attributes. ``dims``: axis names, ``("time", ...)``; default ``("time",
    "<name>_dim1", ...)``. ColumnError/InvalidTagError for a bad field.
    """

    name: str
    dtype: str
    inner: tuple[int, ...] = ()
    chunk_rows: int | None = None
    codec: str | dict | None = None
    attrs: Mapping[str, Any] = field(default_factory=dict, hash=False)
    dims: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        _check_part("column name", self.name)
        if self.name == TIME:
            raise ColumnError("'time' is every stream's own column (int64 ns since the epoch); name yours otherwise")
        storage_dtype(self.dtype)  # UnsupportedArrayError now, not at create_stream
        inner = (self.inner,) if isinstance(self.inner, (int, np.integer)) else self.inner
        inner = tuple(int(n) for n in inner)
        if any(n < 1 for n in inner):
            raise ColumnError(f"column {self.name!r}: inner shape {inner} must be positive lengths")
        object.__setattr__(self, "inner", inner)
        if self.chunk_rows is not None and int(self.chunk_rows) < 1:
            raise ColumnError(f"column {self.name!r}: chunk_rows must be >= 1, not {self.chunk_rows}")
        if self.dims is not None:
            dims = tuple(str(d) for d in self.dims)
            if len(dims) != 1 + len(inner) or dims[0] != TIME:
                raise ColumnError(
                    f"column {self.name!r}: dims {dims} must name {1 + len(inner)} axes, the first 'time'"
                )
            object.__setattr__(self, "dims", dims)

    @property
    def all_dims(self) -> tuple[str, ...]:
        """The axis names the array gets."""
        if self.dims is not None:
            return self.dims
        return (TIME, *(f"{self.name}_dim{i}" for i in range(1, 1 + len(self.inner))))

    def meta(self, default_rows: int, rows: int = 0) -> ArrayMeta:
        """The metadata of this column's array, ``rows`` long (unwritten rows read as the fill value)."""
        dtype = storage_dtype(self.dtype)
        # Missing values of a back-filled column: NaN for floats, NaT for datetimes, else 0 / "" / b"".
        fill = np.nan if dtype.kind in "fc" else np.datetime64("NaT") if dtype.kind in "mM" else None
        return ArrayMeta.create(
            (rows, *self.inner),
            self.dtype,  # as given: storage_dtype refuses the object dtype "bytes" becomes
            chunks=(int(self.chunk_rows or default_rows), *self.inner),
            codec=self.codec,
            fill_value=fill,
            dims=self.all_dims,
            attributes=self.attrs,
        )


@functools.lru_cache(maxsize=64)
def _time_meta(chunk_rows: int) -> ArrayMeta:
    return ArrayMeta.create((0,), "int64", chunks=(chunk_rows,), dims=(TIME,), attributes=TIME_ATTRS)


#: The ``zarr.json`` of a column's array in a new stream, by the column's description: the same for
#: each of the thousands of streams one schema makes, and costly to build (zarr's data type parsing).
_EMPTY_META_LIMIT = 1024
_empty_meta: dict[str, bytes] = {}


def _empty_meta_bytes(column: Column, chunk_rows: int) -> bytes:
    key = f"{chunk_rows} {column!r}"  # the repr shows every field, attributes as they are now
    found = _empty_meta.get(key)
    if found is None:
        found = column.meta(chunk_rows).to_bytes()
        if len(_empty_meta) >= _EMPTY_META_LIMIT:
            _empty_meta.clear()
        _empty_meta[key] = found
    return found


#: Parsed group documents by their bytes: a stream's group is re-read every transaction.
_GROUPS_LIMIT = 1024
_groups: dict[bytes, dict] = {}


def coerce_column(tag: str, name: str, values: Any, dtype: np.dtype, inner: tuple[int, ...]) -> np.ndarray:
    """``values`` as rows of column ``name`` (of ``dtype``, rows of shape ``inner``); ColumnError saying why not.

    ``time`` takes integers (ns since the epoch) or datetime64, converted to int64 ns.
    """
    try:
        if name == TIME:
            values = np.asarray(values)
            if values.dtype.kind == "M":
                values = values.astype("datetime64[ns]").view(np.int64)
            elif values.dtype.kind not in "iu" and values.size:
                raise ColumnError(
                    f"column 'time' of stream {tag!r} takes int64 ns since the epoch or datetime64, "
                    f"not {values.dtype}"
                )
        value = as_stored(values, dtype)
    except (TypeError, ValueError) as exc:
        if isinstance(exc, ColumnError):
            raise
        raise ColumnError(f"column {name!r} of stream {tag!r}: {exc}") from None
    if value.ndim != 1 + len(inner) or value.shape[1:] != tuple(inner):
        raise ColumnError(
            f"column {name!r} of stream {tag!r} takes rows of shape {tuple(inner)}: "
            f"got an array of shape {value.shape}"
        )
    return value


def _group_attrs(raw: bytes | None, where: str) -> dict:
    """The attributes of a stream's group document (do not modify them); StreamError if it is not a stream."""
    found = _groups.get(raw) if raw is not None else None
    if found is not None:
        return found
    attrs = _parse_group(raw, where)
    if len(_groups) >= _GROUPS_LIMIT:
        _groups.clear()  # bounded; re-parsing is only slower
    _groups[bytes(raw)] = attrs
    return attrs


def _parse_group(raw: bytes | None, where: str) -> dict:
    try:
        doc = json.loads(raw)
    except ValueError:
        raise StreamError(f"{where}/zarr.json is not JSON; the stream's metadata is damaged") from None
    attrs = doc.get("attributes") if isinstance(doc, dict) else None
    if doc.get("node_type") != "group" or not isinstance(attrs, dict) or "windvane_stream" not in attrs:
        raise StreamError(f"{where!r} is not a stream (no windvane_stream group there); open it with arrays.open")
    if attrs["windvane_stream"] != STREAM_FORMAT:
        raise StreamError(f"stream {where!r} has format {attrs['windvane_stream']!r}; this windvane reads {STREAM_FORMAT}")
    return attrs


def _is_stream(group: bytes | None) -> bool:
    """Whether ``group`` (a zarr.json) is a stream's group (of any format)."""
    try:
        attrs = json.loads(group).get("attributes") if group is not None else None
    except (ValueError, AttributeError):
        return False
    return isinstance(attrs, dict) and "windvane_stream" in attrs


def check_column_names(tag: str, missing: list[str], unknown: list[str], have: list[str]) -> None:
    """Raise :class:`ColumnError` naming the ``missing`` and ``unknown`` columns of an append, if any."""
    if missing or unknown:
        parts = []
        if missing:
            parts.append(f"missing column(s) {missing}")
        if unknown:
            parts.append(f"unknown column(s) {unknown} (add them first with Stream.add_column)")
        raise ColumnError(f"append to stream {tag!r}: {'; '.join(parts)}; it has {have}")


class Stream(StoreOwner):
    """The arrays of one stream at one snapshot (or in one transaction). Make it with create/open_stream.

    ``tag``, ``path``; ``attrs``: the user's attributes (a copy); ``columns``:
    the column keys in order, without ``time`` (a column's name, unless
    :func:`column_key` escaped it: :meth:`name_of` gives it back);
    ``stream[name]``: the BigArray of a column by key or name (``"time"``
    included), all sharing one chunk cache of ``cache_bytes``.
    ``len(stream)``: its rows. Exports (``to_arrow``, ``to_pandas``,
    ``to_xarray``) name the columns by their names.
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
    ):
        self.tag = tag
        self.path = path
        self.cache = ChunkCache(cache_bytes)
        self._store = store
        self._tx = transaction
        self._before = before
        self._read_only = read_only
        self._owns_store = owns_store
        self._group_raw = b""
        self._attrs: dict = {}
        self._arrays: dict[str, BigArray] = {}
        # Inside a transaction: whether the metadata held was read (or written)
        # while the transaction held the commit lock, so is still the latest.
        self._current = False

    # -- what it is ----------------------------------------------------------------

    @property
    def attrs(self) -> dict:
        # A deep copy: the parsed group document is shared by every view of these bytes.
        return copy.deepcopy({k: v for k, v in self._attrs.items() if k not in _RESERVED_ATTRS})

    @property
    def columns(self) -> list[str]:
        return [name for name in self._arrays if name != TIME]

    @property
    def tid(self) -> bytes | None:
        """The last commit this view sees (None inside a transaction: it sees the latest)."""
        return None if self._before is None else neostore.p64(neostore.u64(self._before) - 1)

    @property
    def read_only(self) -> bool:
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
        try:
            return name in self._arrays or column_key(name) in self._arrays  # type: ignore[arg-type]
        except ColumnError:
            return False

    def name_of(self, key: str) -> str:
        """The name of the column stored under ``key``: its ``name`` attribute if its key is escaped, else the key."""
        return self._arrays[key].attrs.get(NAME_ATTR, key) if key != TIME else key

    def __repr__(self) -> str:
        where = "in a transaction" if self._before is None else f"at 0x{self.tid.hex()}"
        return f"<Stream {self.tag!r} rows={len(self)} columns={self.columns} {where}>"

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
        attrs = _group_attrs(group_raw, self.path)
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
                old._view = _View(old._parse_meta(raw), raw, self._before)
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
                cache_bytes=0,
            )
            array.cache = self.cache  # one budget for the whole stream (oids never collide)
            arrays[name] = array
        self._group_raw, self._attrs, self._arrays = group_raw, attrs, arrays

    def refresh(self) -> bytes | None:
        """Move every array to the newest commit, one tid for all; returns it (None in a transaction)."""
        if self._before is None:
            tx = self._live_transaction()
            self._current = tx._locked  # noqa: SLF001 - same package: is the lock held?
            self._load(tx=tx)
            return None
        head = self._store.last_transaction()
        if head != self.tid:
            self._arrays[TIME]._forget_changes(self.tid, head)  # the shared cache
            self._before = next_tid_after(head)
            self._load(self._read([self._group_key, *(self._key(n) for n in self._arrays)]))
        return self.tid

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
        check_column_names(self.tag, [n for n in expected if n not in columns],
                           [n for n in columns if n not in self._arrays], expected)
        data = {name: coerce_column(self.tag, name, columns[name], array.dtype, array.shape[1:])
                for name, array in self._arrays.items()}
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
            self._arrays[TIME]._forget_changes(self.tid, head)
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

    def _saved(self) -> tuple:
        """What a failed autocommit write restores: the view read before it took the lock."""
        return self._group_raw, self._attrs, dict(self._arrays), {n: a._view for n, a in self._arrays.items()}

    def _restore(self, saved: tuple) -> None:
        self._group_raw, self._attrs, self._arrays, views = saved
        for name, view in views.items():
            self._arrays[name]._view = view

    def _moved_to(self, tid: bytes) -> None:
        """After our own commit ``tid``: every array's view is at it (its metadata is what we wrote)."""
        self._before = next_tid_after(tid)
        for array in self._arrays.values():
            view = array._view
            array._view = _View(view.meta, view.raw, self._before)

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
        start = lengths[TIME]
        jobs = []
        partial_keys: list[str] = []
        for name, array in self._arrays.items():
            latest = array._meta
            meta = latest.with_shape((start + n, *latest.shape[1:]))
            value = data[name]
            selection = tuple(AxisSelection(start if i == 0 else 0, k) for i, k in enumerate(value.shape))
            plan, keys, partial = array._region(meta, latest.shape, selection)
            jobs.append((array, meta, plan, keys, partial, value))
            partial_keys += partial
        old = self._partial_chunks(tx, jobs, partial_keys, cached)
        built: list[tuple[str, np.ndarray]] = []
        written: list[str] = []

        def chunks() -> Iterator[tuple[str, np.ndarray, Any]]:
            for array, meta, plan, keys, _, value in jobs:
                written.extend(keys)
                for key, chunk in array._region_chunks(meta, plan, keys, value, old, built):
                    yield key, chunk, meta.codec

        def encode(item: tuple[str, np.ndarray, Any]) -> tuple[str, bytes, bool]:
            key, chunk, codec = item
            return key, codec.encode(chunk), codec.compressed

        weight = sum(item_bytes(a.dtype) * math.prod(m.chunks) * len(p) for a, m, p, *_ in jobs)
        encoded = ordered_map(encode, chunks()) if weight > _PARALLEL_BYTES else map(encode, chunks())
        # One set_many per batch of chunks neostore should (not) compress: a
        # codec's output is compressed already, "none" chunks are not.
        batches: dict[bool, dict[str, bytes]] = {True: {}, False: {}}
        for key, value, compressed in encoded:
            batch = batches[not compressed]
            batch[key] = value
            if len(batch) >= _WRITE_BATCH:
                tx.set_many(batch, compress=not compressed)
                batch.clear()
        for array, meta, *_ in jobs:
            raw = meta.to_bytes()
            batches[True][f"{array.name}/{METADATA_KEY}"] = raw  # small JSON: neostore compresses it
            array._view = _View(meta, raw, None if self._tx is not None else array._view.before)
        for compress, batch in batches.items():
            if batch:
                tx.set_many(batch, compress=compress)
        return built, written

    def _partial_chunks(self, tx: Transaction, jobs: list, keys: list[str], cached: bool) -> dict[str, np.ndarray]:
        """The decoded chunks an append rewrites, read in one request (or from the cache in autocommit)."""
        if not keys:
            return {}
        if cached:
            found: dict[str, np.ndarray] = {}
            for array, meta, _, _, partial, _ in jobs:
                if partial:
                    found.update(array._current_chunks(tx, meta, partial, True))
            return found
        values = tx.get_many(keys)
        owner = {k: (array, meta) for array, meta, _, _, partial, _ in jobs for k in partial}

        def decode(key: str) -> tuple[str, np.ndarray]:
            array, meta = owner[key]
            return key, array._decode(meta, values[key], key)

        present = [k for k in keys if k in values]
        for array, _meta, *_ in jobs:
            array._count(sum(1 for k in present if owner[k][0] is array))
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

    def _columns_data(self, start: int, stop: int | None) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        time = self._arrays[TIME][start:stop]
        return time, {name: self._arrays[name][start:stop] for name in self.columns}

    def to_arrow(self, start: int = 0, stop: int | None = None) -> Any:
        """A pyarrow Table of rows ``[start:stop]``.

        ``time`` is ``timestamp[ns, tz=UTC]``; strings ``large_string``,
        bytes ``large_binary``; a column with inner shape ``(a, b)`` is a
        ``fixed_size_list<fixed_size_list<item, b>, a>``. Field metadata
        holds the column's zarr attributes as JSON (key ``b"attrs"``).
        Columns are named by their names (:meth:`name_of`); an integer
        column's :data:`MISSING_ATTR` value is null.
        """
        import pyarrow as pa

        time, columns = self._columns_data(start, stop)
        fields = [pa.field(TIME, pa.timestamp("ns", tz="UTC"))]
        values = [pa.array(time, type=pa.timestamp("ns", tz="UTC"))]
        for name, data in columns.items():
            attrs = self._arrays[name].attrs
            flat = data.reshape(-1)
            if data.dtype.kind == "T":
                arr = pa.array(flat, type=pa.large_string())
            elif data.dtype == object:
                arr = pa.array(flat, type=pa.large_binary())
            else:
                arr = pa.array(flat, mask=_missing(flat, attrs))
            for size in reversed(data.shape[1:]):
                arr = pa.FixedSizeListArray.from_arrays(arr, size)
            fields.append(pa.field(self.name_of(name), arr.type,
                                   metadata={b"attrs": json.dumps(attrs)} if attrs else None))
            values.append(arr)
        return pa.Table.from_arrays(values, schema=pa.schema(fields, metadata={b"stream": self.tag}))

    def to_pandas(self, start: int = 0, stop: int | None = None) -> Any:
        """A pandas DataFrame of rows ``[start:stop]``, indexed by ``time`` (``datetime64[ns, UTC]``).

        One column per column of the stream, strings and bytes as object
        columns of ``str`` / ``bytes`` values; a column with an inner shape is
        split into one pandas column per element, named ``name[i]`` (``name[i,j]``).
        Columns are named by their names (:meth:`name_of`); an integer column
        with a :data:`MISSING_ATTR` value is a nullable ``Int64`` (...) column,
        ``<NA>`` where it holds that value.
        """
        import pandas as pd

        time, columns = self._columns_data(start, stop)
        index = pd.DatetimeIndex(time.view("datetime64[ns]"), name=TIME).tz_localize("UTC")
        frame: dict[str, Any] = {}
        for key, data in columns.items():
            name = self.name_of(key)
            if data.dtype.kind == "T":
                data = data.astype(object)
            mask = _missing(data, self._arrays[key].attrs)
            if mask is not None and data.ndim == 1:
                frame[name] = pd.Series(pd.arrays.IntegerArray(data, mask), index=index)
                continue
            if data.ndim == 1:
                frame[name] = pd.Series(data, index=index, dtype=object if data.dtype == object else None)
                continue
            for pos in np.ndindex(*data.shape[1:]):
                frame[f"{name}[{','.join(map(str, pos))}]"] = data[(slice(None), *pos)]
        return pd.DataFrame(frame, index=index)

    def to_xarray(self, start: int = 0, stop: int | None = None) -> Any:
        """An xarray Dataset of rows ``[start:stop]``: coordinate ``time`` (datetime64[ns]), one variable per column.

        Variables keep their arrays' dims and attributes; the Dataset's
        attributes are the stream's user attributes.
        """
        import xarray as xr

        time, columns = self._columns_data(start, stop)
        variables = {
            self.name_of(key): xr.Variable(self._arrays[key].dims or (TIME,), data, attrs=self._arrays[key].attrs)
            for key, data in columns.items()
        }
        coords = {TIME: xr.Variable((TIME,), time.view("datetime64[ns]"))}
        return xr.Dataset(variables, coords=coords, attrs=self.attrs)


# -- module functions ----------------------------------------------------------------


def _missing(data: np.ndarray, attrs: Mapping[str, Any]) -> np.ndarray | None:
    """Where integer column values ``data`` hold the column's :data:`MISSING_ATTR` value (None: it has none)."""
    missing = attrs.get(MISSING_ATTR)
    if missing is None or data.dtype.kind not in "iu" or isinstance(missing, bool):
        return None
    return data == missing


def _root_key(quarantine: bool) -> str:
    return f"{QUARANTINE_ROOT if quarantine else STREAMS_ROOT}/{METADATA_KEY}"


def _create_in(tx: Transaction, tags: Sequence[str], columns: Sequence[Column], attrs: dict, chunk_rows: int, *,
               quarantine: bool, exist_ok: bool = False) -> None:
    """Write the streams' groups and arrays, and add them to the root group's registry, holding the lock.

    Reads the store a few times for all ``tags`` together: what a plant's
    first minute (thousands of new streams in one commit) needs.
    """
    tx.lock()
    paths = {tag: stream_path(tag, quarantine=quarantine) for tag in tags}
    if exist_ok:
        groups = tx.raw_get_many([f"{path}/{METADATA_KEY}" for path in paths.values()])
        paths = {tag: path for tag, path in paths.items() if not _is_stream(groups.get(f"{path}/{METADATA_KEY}"))}
    if not paths:
        return
    taken = tx.occupied([f"{path}/" for path in paths.values()])
    if taken:
        clashes = [t for t, path in paths.items() if f"{path}/" in taken]
        more = f" (and {len(clashes) - 1} more: {clashes[1:6]})" if len(clashes) > 1 else ""
        raise StreamExistsError(f"stream {clashes[0]!r} already exists at {paths[clashes[0]]!r}{more}; "
                                "open it with open_stream")
    root_key = _root_key(quarantine)
    writes: dict[str, bytes] = {}
    if not tx.gathers(root_key):  # the first stream this transaction creates there: check the parents
        parents = tx.get_many([METADATA_KEY, root_key])
        if METADATA_KEY not in parents:
            writes[METADATA_KEY] = group_document()
        elif node_type(parents[METADATA_KEY]) != "group":
            raise StreamExistsError("the store's root is not a zarr group; streams cannot be created in it")
        root = parents.get(root_key)
        if root is not None and node_type(root) != "group":
            raise StreamExistsError(f"{root_key.rsplit('/', 1)[0]!r} is not a zarr group; streams cannot live in it")
    group = group_document({"windvane_stream": STREAM_FORMAT, "columns": [c.name for c in columns], **attrs})
    time_meta = _time_meta(chunk_rows).to_bytes()
    metas = [_empty_meta_bytes(column, chunk_rows) for column in columns]
    for path in paths.values():
        group_key, time_key, *column_keys, _log_key = _stream_keys(path, columns)
        writes[group_key] = group
        writes[time_key] = time_meta
        writes.update(zip(column_keys, metas))
    tx.set_many(writes)
    # The registry is written once, at the commit: a commit creating thousands of streams rewrites it once.
    tx.gathered(root_key, functools.partial(_write_registry, tx, root_key)).update(paths)


def _write_registry(tx: Transaction, root_key: str, tags: set[str]) -> None:
    """Add ``tags`` to the registry of streams in the group ``root_key`` (creating the group)."""
    root = tx.get(root_key)
    root_attrs: dict = (json.loads(root).get("attributes") or {}) if root is not None else {}
    registry = root_attrs.get(REGISTRY_ATTR) or []
    tx.set(root_key, group_document({**root_attrs, REGISTRY_ATTR: sorted({*registry, *tags})}))


def stream_keys(tags: Iterable[str], columns: Sequence[Column], *, quarantine: bool = False) -> list[str]:
    """The keys creating streams ``tags`` with ``columns`` writes, and those their first appends write (the
    row log, the first chunks): for :meth:`Transaction.bind` and :meth:`Transaction.read_ahead`, ahead of
    readying many streams."""
    # Stream arrays use the default chunk key encoding, as time's does.
    firsts = [f"{name}/{_time_meta(1).chunk_key((0,) * ndim)}"
              for name, ndim in [(TIME, 1), *((c.name, 1 + len(c.inner)) for c in columns)]]
    keys: list[str] = []
    for tag in tags:
        path = stream_path(tag, quarantine=quarantine)
        keys += _stream_keys(path, columns)
        keys += [f"{path}/{first}" for first in firsts]
    return keys


def _stream_keys(path: str, columns: Sequence[Column]) -> list[str]:
    """The group's key, ``time``'s and each column's array metadata key, the row log's key."""
    return [f"{path}/{METADATA_KEY}", f"{path}/{TIME}/{METADATA_KEY}",
            *(f"{path}/{column.name}/{METADATA_KEY}" for column in columns), row_log.log_key(path)]


def create_stream(
    target: Target,
    tag: str,
    columns: Sequence[Column],
    *,
    attrs: Mapping[str, Any] | None = None,
    chunk_rows: int = 16384,
    quarantine: bool = False,
    cache_bytes: int = DEFAULT_CACHE_BYTES,
) -> Stream:
    """Create stream ``tag`` with ``time`` and ``columns``, empty, and return it writable.

    From a URL or Store the creation commits at once (the stream then
    appends in autocommit mode); in a Transaction it joins it.
    ``chunk_rows``: rows per chunk of columns that do not say. ``attrs``:
    plain JSON data, stored in the group's zarr attributes. StreamExistsError
    if anything is at the stream's path; ColumnError for duplicate columns
    or reserved attribute names.
    """
    path = stream_path(tag, quarantine=quarantine)
    columns, attrs = _checked_spec(repr(tag), columns, attrs, chunk_rows)
    store, tx, owns = _resolve(target, create=True)
    try:
        if tx is not None:
            _create_in(tx, [tag], columns, attrs, int(chunk_rows), quarantine=quarantine)
            stream = Stream(store, tag, path, before=None, transaction=tx, cache_bytes=cache_bytes)
            stream._current = True
            stream._load(None)
            return stream
        tx = Transaction(store, message=f"create stream {tag}")
        try:
            _create_in(tx, [tag], columns, attrs, int(chunk_rows), quarantine=quarantine)
            tid = tx.commit()
        except BaseException:
            tx.abort()
            raise
        stream = Stream(
            store, tag, path, before=next_tid_after(tid), transaction=None, owns_store=owns, cache_bytes=cache_bytes
        )
        stream._load(None)
        return stream
    except BaseException:
        if owns:
            store.close()
        raise


def create_streams(
    tx: Transaction,
    tags: Iterable[str],
    columns: Sequence[Column],
    *,
    attrs: Mapping[str, Any] | None = None,
    chunk_rows: int = 16384,
    quarantine: bool = False,
    exist_ok: bool = False,
) -> None:
    """Create streams ``tags`` in ``tx``, each as :func:`create_stream` would with the same arguments.

    For thousands of streams at once: the store is read a few times for
    all of them, and no Stream is opened (open one with :func:`open_stream`
    in the same transaction). ``exist_ok``: tags that are streams already
    are left as they are. StreamExistsError (nothing created) if anything
    else is at a stream's path.
    """
    tags = list(dict.fromkeys(tags))
    columns, attrs = _checked_spec(", ".join(map(repr, tags[:3])), columns, attrs, chunk_rows)
    _create_in(tx, tags, columns, attrs, int(chunk_rows), quarantine=quarantine, exist_ok=exist_ok)


def _checked_spec(tag: str, columns: Sequence[Column], attrs: Mapping[str, Any] | None, chunk_rows: int
                  ) -> tuple[list[Column], dict]:
    """``columns`` and ``attrs`` as streams store them; ColumnError for what they cannot take."""
    columns = list(columns)
    if not all(isinstance(c, Column) for c in columns):
        raise TypeError("creating a stream takes a sequence of arrays.Column")
    names = [c.name for c in columns]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ColumnError(f"stream {tag}: column names {duplicates} appear more than once")
    attrs = json.loads(json.dumps(dict(attrs or {})))
    reserved = [k for k in attrs if k in _RESERVED_ATTRS]
    if reserved:
        raise ColumnError(f"stream attributes {reserved} are reserved by windvane; name them otherwise")
    if int(chunk_rows) < 1:
        raise ColumnError(f"chunk_rows must be >= 1, not {chunk_rows}")
    return columns, attrs


def open_stream(
    target: Target,
    tag: str,
    *,
    at: At | None = None,
    quarantine: bool = False,
    cache_bytes: int = DEFAULT_CACHE_BYTES,
) -> Stream:
    """Open stream ``tag``: every array at one snapshot (the newest, or ``at``), or in the given Transaction.

    Without ``at`` the stream is writable (autocommit from a URL/Store; in a
    Transaction, joining it). ``at`` (a tid, a datetime, a Unix time) opens
    it read-only as it was then. StreamNotFoundError if there is no stream
    ``tag`` (then); from a URL, neostore.StoreNotFoundError if there is no
    store (opening never creates one: :func:`create_stream` does).
    """
    path = stream_path(tag, quarantine=quarantine)
    store, tx, owns = _resolve(target)
    try:
        if at is not None:
            stream = Stream(
                store, tag, path, before=snapshot_bound(store, at), transaction=None, read_only=True,
                owns_store=owns, cache_bytes=cache_bytes,
            )
        elif tx is not None:
            stream = Stream(store, tag, path, before=None, transaction=tx, cache_bytes=cache_bytes)
            stream._current = tx._locked  # noqa: SLF001 - read under the lock: no re-read at append
        else:
            stream = Stream(
                store, tag, path, before=Snapshot.latest(store).before, transaction=None, owns_store=owns,
                cache_bytes=cache_bytes,
            )
        try:
            stream._load(None)
        except StreamNotFoundError:
            if at is not None:
                raise StreamNotFoundError(f"no stream {tag!r} at {path!r} {describe(at)}: it did not exist then") from None
            raise
        return stream
    except BaseException:
        if owns:
            store.close()
        raise


def list_streams(target: Target, *, quarantine: bool = False, at: At | None = None) -> list[str]:
    """The tags of the streams (or quarantined streams), sorted, as of the newest commit or ``at``.

    Reads the one registry document ``create_stream`` maintains: no scan.
    From a URL, neostore.StoreNotFoundError if there is no store (none is created).
    """
    store, tx, owns = _resolve(target)
    try:
        key = _root_key(quarantine)
        if at is None and tx is not None:
            raw = tx.get(key)
        else:
            before = snapshot_bound(store, at) if at is not None else Snapshot.latest(store).before
            raw = Snapshot(store, before).get(key)
        pending = tx.gathering(key) if at is None and tx is not None else frozenset()
        attrs = (json.loads(raw).get("attributes") or {}) if raw is not None else {}
        return sorted({*(attrs.get(REGISTRY_ATTR) or []), *pending})
    finally:
        if owns:
            store.close()
