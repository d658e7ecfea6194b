"""What a stream is made of: its column descriptions, key rules, group document and the constants of its format."""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .errors import ColumnError, InvalidTagError, StreamError
from .metadata import METADATA_KEY, ArrayMeta, as_stored, storage_dtype

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
RESERVED_ATTRS = ("windvane_stream", "columns")

#: Raw bytes of one chunk of a stream's rows, all its columns together, when
#: its creator names no ``chunk_rows``: object stores serve objects of MiBs
#: well and tens of KiB poorly, and neostore's default blob threshold
#: (``neostore.BLOB_THRESHOLD``) is set from this target, so that the chunk of
#: every column but the smallest of a wide row reaches it and goes to a blob
#: tier. A partial last chunk costs appends nothing (the row log takes each
#: commit's rows), so only readers of the partial chunk pay for its size.
DEFAULT_CHUNK_BYTES = 4 << 20
#: What one text or bytes value is taken to weigh when sizing a stream's chunks (no value is seen yet).
TEXT_VALUE_BYTES = 32
#: Chunk rows derived from bytes are a multiple of this when they can be (tidy boundaries).
_ROWS_STEP = 1024
#: Rows per chunk at most of a stream with text or bytes columns: their values' size is unknown until
#: they come, and a writer holds its stream's partial chunk, so a chunk of long lines must not grow with
#: the bytes estimate's rows.
VARIABLE_CHUNK_ROWS = 16384

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


def missing_value(dtype: np.dtype, attrs: Mapping[str, Any]) -> int | None:
    """The value an integer column of ``dtype`` holds where a value is missing (its :data:`MISSING_ATTR`), or
    None: a column of another kind, or without one. Exports give those rows back as missing."""
    missing = attrs.get(MISSING_ATTR)
    if missing is None or np.dtype(dtype).kind not in "iu" or isinstance(missing, bool):
        return None
    return int(missing)


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
    codec: str | dict[str, Any] | None = None
    attrs: Mapping[str, Any] = field(default_factory=dict, hash=False)
    dims: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        _check_part("column name", self.name)
        if self.name == TIME:
            raise ColumnError("'time' is every stream's own column (int64 ns since the epoch); name yours otherwise")
        storage_dtype(self.dtype)  # UnsupportedArrayError now, not at create_stream
        given: object = self.inner  # a single length is taken too, whatever the annotation says
        lengths = (given,) if isinstance(given, (int, np.integer)) else self.inner
        inner = tuple(int(n) for n in lengths)
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
    def variable(self) -> bool:
        """Whether the column holds text or bytes: values of no fixed size."""
        return storage_dtype(self.dtype).kind in "TOUS"

    @property
    def row_bytes(self) -> int:
        """Raw bytes of one row of this column (text and bytes: :data:`TEXT_VALUE_BYTES` a value)."""
        dtype = storage_dtype(self.dtype)
        item = TEXT_VALUE_BYTES if self.variable else dtype.itemsize
        return item * int(np.prod(self.inner, dtype=np.int64))

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


def chunk_rows_for(columns: Sequence[Column], chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> int:
    """Rows per chunk of a stream of ``time`` and ``columns`` so that a chunk of all of them holds about
    ``chunk_bytes`` raw bytes (a multiple of 1024 rows unless a row is wider than a 1024th of that), and
    :data:`VARIABLE_CHUNK_ROWS` at most with text or bytes columns."""
    width = np.dtype("int64").itemsize + sum(c.row_bytes for c in columns)
    rows = max(1, chunk_bytes // width)
    if any(c.variable for c in columns):
        rows = min(rows, VARIABLE_CHUNK_ROWS)
    return rows - rows % _ROWS_STEP if rows >= _ROWS_STEP else rows


@functools.lru_cache(maxsize=64)
def time_meta(chunk_rows: int) -> ArrayMeta:
    return ArrayMeta.create((0,), "int64", chunks=(chunk_rows,), dims=(TIME,), attributes=TIME_ATTRS)


#: The ``zarr.json`` of a column's array in a new stream, by the column's description: the same for
#: each of the thousands of streams one schema makes, and costly to build (zarr's data type parsing).
_EMPTY_META_LIMIT = 1024
_empty_meta: dict[str, bytes] = {}


def empty_meta_bytes(column: Column, chunk_rows: int) -> bytes:
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
_groups: dict[bytes, dict[str, Any]] = {}


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
                    f"column 'time' of stream {tag!r} takes int64 ns since the epoch or datetime64, not {values.dtype}"
                )
        value = as_stored(values, dtype)
    except (TypeError, ValueError) as exc:
        if isinstance(exc, ColumnError):
            raise
        raise ColumnError(f"column {name!r} of stream {tag!r}: {exc}") from None
    if value.ndim != 1 + len(inner) or value.shape[1:] != tuple(inner):
        raise ColumnError(
            f"column {name!r} of stream {tag!r} takes rows of shape {tuple(inner)}: got an array of shape {value.shape}"
        )
    return value


def group_attrs(raw: bytes, where: str) -> dict[str, Any]:
    """The attributes of a stream's group document (do not modify them); StreamError if it is not a stream."""
    found = _groups.get(raw)
    if found is not None:
        return found
    attrs = _parse_group(raw, where)
    if len(_groups) >= _GROUPS_LIMIT:
        _groups.clear()  # bounded; re-parsing is only slower
    _groups[bytes(raw)] = attrs
    return attrs


def _parse_group(raw: bytes, where: str) -> dict[str, Any]:
    try:
        doc = json.loads(raw)
    except ValueError:
        raise StreamError(f"{where}/zarr.json is not JSON; the stream's metadata is damaged") from None
    attrs = doc.get("attributes") if isinstance(doc, dict) else None
    if doc.get("node_type") != "group" or not isinstance(attrs, dict) or "windvane_stream" not in attrs:
        raise StreamError(f"{where!r} is not a stream (no windvane_stream group there); open it with arrays.open")
    if attrs["windvane_stream"] != STREAM_FORMAT:
        raise StreamError(
            f"stream {where!r} has format {attrs['windvane_stream']!r}; this windvane reads {STREAM_FORMAT}"
        )
    return attrs


def is_stream(group: bytes | None) -> bool:
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
