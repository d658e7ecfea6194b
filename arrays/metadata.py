"""An array's ``zarr.json`` (zarr v3 metadata): building, parsing, and chunk keys.

BigArray stores exactly what zarr-python stores, so zarr and xarray read
its arrays and it reads theirs: ``<name>/zarr.json`` and chunk keys
``<name>/c/<i>/<j>...``. The parsed document is kept whole, and a shape
change rewrites only ``shape``: fields written by other tools survive.
"""

from __future__ import annotations

import json
import math
import threading
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from zarr.core.dtype import (
    VariableLengthBytes,
    VariableLengthUTF8,
    ZDType,
    get_data_type_from_json,
    parse_data_type,
)
from zarr.errors import UnstableSpecificationWarning

from .codecs import STRING, VLEN_BYTES, ChunkCodec, codec_for, codec_from_json, is_vlen
from .errors import ArrayError, ArrayNotFoundError, UnsupportedArrayError

#: wendelin.core's block size: a chunk of about this many bytes by default.
CHUNK_BYTES = 2 * 1024 * 1024

METADATA_KEY = "zarr.json"

#: numpy kinds BigArray reads and writes: booleans, integers, floats, complex, datetimes
#: (plus the variable-length :data:`~arrays.codecs.STRING` and :data:`~arrays.codecs.VLEN_BYTES`).
_KINDS = "biufcmM"

#: What a variable-length item is taken to weigh when sizing chunks and caches
#: (its real size is unknown until it is written).
VLEN_ITEM_BYTES = 64

#: The names that ask for variable-length strings and bytes.
_STRING_NAMES = ("str", "string", "vlen-utf8")
_BYTES_NAMES = ("bytes", "variable_length_bytes", "vlen-bytes")


#: Parsed array documents kept by their raw bytes (:meth:`ArrayMeta.from_bytes`): streams re-read
#: the same ``zarr.json`` every transaction, and parsing one costs more than the read.
_PARSED_LIMIT = 4096
_parsed: dict[bytes, ArrayMeta] = {}
_parsed_lock = threading.Lock()


def dump_json(doc: Any) -> bytes:
    """``doc`` as compact JSON bytes.

    Compact because ``json.dumps`` with ``indent`` runs Python's pure-Python
    encoder, several times slower than the C one, on every append's
    ``zarr.json``; zarr and xarray read any valid JSON.
    """
    return json.dumps(doc, separators=(",", ":")).encode()


def group_document(attributes: Mapping[str, Any] | None = None) -> bytes:
    """The ``zarr.json`` of a zarr v3 group."""
    return dump_json({"attributes": dict(attributes or {}), "zarr_format": 3, "node_type": "group"})


def node_type(raw: bytes) -> str | None:
    """``"array"``, ``"group"``, or None if ``raw`` is not a zarr v3 node document."""
    try:
        doc = json.loads(raw)
    except ValueError:
        return None
    return doc.get("node_type") if isinstance(doc, dict) else None


def storage_dtype(dtype: Any) -> np.dtype:
    """The dtype BigArray stores for ``dtype``: little-endian, of a kind zarr v3 knows.

    ``str`` (or ``"str"``, a numpy StringDType) means variable-length UTF-8
    strings, stored as zarr's ``string`` and read as :data:`~arrays.codecs.STRING`
    (``StringDType()``, what zarr 3.1.6 returns); ``bytes`` (or ``"bytes"``)
    means variable-length bytes, zarr's ``variable_length_bytes``, read as an
    object array of ``bytes``. A bare ``object`` dtype is ambiguous and refused.
    """
    if dtype is str or (isinstance(dtype, str) and dtype in _STRING_NAMES):
        return STRING
    if dtype is bytes or (isinstance(dtype, str) and dtype in _BYTES_NAMES):
        return VLEN_BYTES
    dtype = np.dtype(dtype)
    if dtype.kind == "T":
        return STRING  # the plain StringDType zarr reads (no na_object)
    if dtype.kind in "US" and dtype.itemsize == 0:  # np.dtype(str), np.dtype(bytes): no length given
        return STRING if dtype.kind == "U" else VLEN_BYTES
    if dtype.kind not in _KINDS or dtype.fields is not None or dtype.subdtype is not None:
        raise UnsupportedArrayError(
            f"dtype {dtype} is not supported: use booleans, integers, floats, complex numbers, datetime64, "
            "str (variable-length strings) or bytes (variable-length bytes)"
        )
    little: np.dtype = dtype.newbyteorder("<") if dtype.itemsize > 1 else dtype
    return little


def dtype_name(dtype: np.dtype) -> str:
    """The name a schema gives ``dtype``, and every listing shows: ``str``, ``bytes``, or numpy's name."""
    dtype = np.dtype(dtype)
    if dtype.kind == "T":
        return "str"
    if dtype.kind == "O":
        return "bytes"  # BigArray's only object arrays hold variable-length bytes (storage_dtype)
    return str(dtype)


def item_bytes(dtype: np.dtype) -> int:
    """The bytes one item is taken to weigh: its itemsize, or :data:`VLEN_ITEM_BYTES` for variable length."""
    return VLEN_ITEM_BYTES if is_vlen(dtype) else np.dtype(dtype).itemsize


def _zarr_data_type(dtype: np.dtype) -> Any:
    """zarr's data type object for a storage dtype."""
    if dtype.kind == "T":
        return VariableLengthUTF8()
    if dtype == VLEN_BYTES:
        return VariableLengthBytes()
    return parse_data_type(dtype, zarr_format=3)


@contextmanager
def _quiet_unstable() -> Iterator[None]:
    """Silence zarr's warning that ``variable_length_bytes`` has no zarr v3 spec yet.

    We knowingly write exactly what zarr itself writes and reads back; the
    warning would fire on every bytes array we create or parse.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnstableSpecificationWarning)
        yield


def as_stored(values: Any, dtype: np.dtype) -> np.ndarray:
    """``values`` as an array of ``dtype``, checked for what numpy would let through silently.

    Strings: any array or sequence of ``str`` (numpy's str coercion applies,
    but ``None`` is refused rather than stored as ``"None"``). Bytes: ``bytes``
    items only (numpy would split a ``bytearray`` into integers); ``str`` is
    refused (encode it first). TypeError names the offending type.
    """
    if dtype.kind == "T":
        if isinstance(values, np.ndarray) and values.dtype.kind != "O":
            return values.astype(dtype, copy=False)  # StringDType, str_, numbers: numpy converts in C
        data = np.asarray(values, dtype=object)
        if (data == None).any():  # noqa: E711 - elementwise, in C
            raise TypeError("a string array cannot hold None; use '' for a missing string")
        return data.astype(dtype)
    if dtype == VLEN_BYTES:
        if isinstance(values, np.ndarray) and values.dtype.kind == "S":
            return values.astype(object)  # numpy's fixed-width bytes drop trailing NULs already
        data = np.array(values, dtype=object, copy=None)
        kinds = set(map(type, data.reshape(-1)))  # map() runs in C
        if any(issubclass(k, str) for k in kinds):
            raise TypeError("a bytes array holds bytes, not str: encode the strings first (or use dtype str)")
        bad = sorted(k.__name__ for k in kinds if not issubclass(k, bytes))
        if bad:
            raise TypeError(f"a bytes array holds bytes items, not {', '.join(bad)}")
        return data
    return np.asarray(values, dtype=dtype)


def default_chunks(shape: Sequence[int], dtype: np.dtype) -> tuple[int, ...]:
    """Whole rows, as many as fit in :data:`CHUNK_BYTES`; wider rows are split from axis 1 on."""
    itemsize = item_bytes(dtype)
    trailing = [max(int(n), 1) for n in shape[1:]]
    row_bytes = itemsize * math.prod(trailing)
    if row_bytes <= CHUNK_BYTES:
        return (max(CHUNK_BYTES // row_bytes, 1), *trailing)
    chunks = [1, *trailing]
    axis = 1
    while itemsize * math.prod(chunks) > CHUNK_BYTES and axis < len(chunks):
        if chunks[axis] > 1:
            chunks[axis] = (chunks[axis] + 1) // 2
        else:
            axis += 1
    return tuple(chunks)


def _key_encoder(encoding: Mapping[str, Any]) -> tuple[str, str]:
    """``(prefix, separator)`` of a chunk key encoding; prefix ``"c"`` for zarr v3's default."""
    name = encoding.get("name")
    separator = (encoding.get("configuration") or {}).get("separator", "/" if name == "default" else ".")
    if name not in ("default", "v2") or separator not in ("/", "."):
        raise UnsupportedArrayError(
            f"chunk key encoding {name!r} with separator {separator!r} is not supported "
            "(BigArray reads 'default' and 'v2' with '/' or '.')"
        )
    return ("c" if name == "default" else ""), separator


@dataclass(frozen=True)
class ArrayMeta:
    """A parsed array ``zarr.json``; ``doc`` is the whole document."""

    doc: dict[str, Any]
    shape: tuple[int, ...]
    dtype: np.dtype
    chunks: tuple[int, ...]
    fill_value: Any
    codec: ChunkCodec
    _prefix: str = field(repr=False)
    _separator: str = field(repr=False)
    # ``to_bytes`` around the shape, made on first use and passed on by ``with_shape``:
    # an append rewrites only the shape, and splicing it in is ten times cheaper than dumping.
    _around_shape: tuple[bytes, bytes] | None = field(default=None, repr=False, compare=False)

    # -- building and parsing ------------------------------------------------------

    @classmethod
    def create(
        cls,
        shape: Sequence[int],
        dtype: Any,
        *,
        chunks: int | Sequence[int] | None = None,
        codec: Any = None,
        fill_value: Any = None,
        dims: Sequence[str] | None = None,
        attributes: Mapping[str, Any] | None = None,
    ) -> ArrayMeta:
        """The metadata of a new array (ValueError/UnsupportedArrayError for a bad argument).

        ``fill_value`` None: 0 for numbers (False, the epoch), ``""`` for
        strings, ``b""`` for bytes.
        """
        shape = tuple(int(n) for n in shape)
        if not shape:
            raise ValueError("BigArray needs at least one dimension")
        if any(n < 0 for n in shape):
            raise ValueError(f"shape {shape} has a negative length")
        dtype = storage_dtype(dtype)
        if chunks is None:
            chunks = default_chunks(shape, dtype)
        elif isinstance(chunks, (int, np.integer)):
            chunks = (int(chunks), *(max(n, 1) for n in shape[1:]))
        chunks = tuple(int(c) for c in chunks)
        if len(chunks) != len(shape) or any(c < 1 for c in chunks):
            raise ValueError(f"chunks {chunks} must be {len(shape)} positive lengths, one per axis of {shape}")
        if dims is not None:
            dims = [str(d) for d in dims]
            if len(dims) != len(shape):
                raise ValueError(f"dims {dims} must name each of the {len(shape)} axes")
        zdtype = _zarr_data_type(dtype)
        if fill_value is None:
            fill_value = zdtype.default_scalar() if is_vlen(dtype) else 0
        try:
            fill_json = zdtype.to_json_scalar(zdtype.cast_scalar(fill_value), zarr_format=3)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"fill_value {fill_value!r} is not a {dtype}: {exc}") from None
        with _quiet_unstable():
            data_type = zdtype.to_json(zarr_format=3)
        doc: dict[str, Any] = {
            "shape": list(shape),
            "data_type": data_type,
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(chunks)}},
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
            "fill_value": fill_json,
            "codecs": codec_for(codec, dtype).to_json(),
            "attributes": json.loads(json.dumps(dict(attributes or {}))),
        }
        if dims is not None:
            doc["dimension_names"] = dims
        doc.update({"zarr_format": 3, "node_type": "array", "storage_transformers": []})
        return cls.from_doc(doc)

    @classmethod
    def from_bytes(cls, raw: bytes, name: str = "") -> ArrayMeta:
        """Parse an array's ``zarr.json``; errors say what about it BigArray cannot read.

        Documents are cached by their bytes (an ArrayMeta is immutable, so
        sharing one is safe): a stream reading the same metadata each
        transaction parses it once.
        """
        raw = bytes(raw)
        found = _parsed.get(raw)
        if found is not None:
            return found
        meta = cls._parse(raw, name)
        with _parsed_lock:
            if len(_parsed) >= _PARSED_LIMIT:
                _parsed.clear()  # crude but bounded; re-parsing is only slower
            _parsed[raw] = meta
        return meta

    @classmethod
    def _parse(cls, raw: bytes, name: str) -> ArrayMeta:
        try:
            doc = json.loads(raw)
        except ValueError:
            raise ArrayError(f"{name}/zarr.json is not JSON; the array's metadata is damaged") from None
        if not isinstance(doc, dict):
            raise ArrayError(f"{name}/zarr.json is not a JSON object; the array's metadata is damaged")
        if doc.get("zarr_format") != 3:
            raise UnsupportedArrayError(f"{name} is zarr format {doc.get('zarr_format')!r}; BigArray reads zarr v3")
        if doc.get("node_type") != "array":
            raise ArrayNotFoundError(name, f"(a {doc.get('node_type')} is there)")
        return cls.from_doc(doc, name)

    @classmethod
    def from_doc(cls, doc: dict[str, Any], name: str = "") -> ArrayMeta:
        where = f" (array {name!r})" if name else ""
        grid = doc.get("chunk_grid") or {}
        if grid.get("name") != "regular":
            raise UnsupportedArrayError(
                f"chunk grid {grid.get('name')!r} is not supported{where}; BigArray reads 'regular'"
            )
        if doc.get("storage_transformers"):
            names = [t.get("name") for t in doc["storage_transformers"]]
            raise UnsupportedArrayError(f"storage transformers {names} are not supported{where}")
        try:
            with _quiet_unstable():
                zdtype = get_data_type_from_json(doc["data_type"], zarr_format=3)
        except (KeyError, TypeError, ValueError) as exc:
            raise UnsupportedArrayError(f"data type {doc.get('data_type')!r} is not supported{where}: {exc}") from None
        # Asked as any ZDType: the variable-length ones have narrower parameters than the parser declares.
        kind: ZDType[Any, Any] = zdtype
        dtype: np.dtype
        if isinstance(kind, VariableLengthUTF8):
            dtype = STRING
        elif isinstance(kind, VariableLengthBytes):
            dtype = VLEN_BYTES
        else:
            dtype = storage_dtype(zdtype.to_native_dtype())
        shape = tuple(int(n) for n in doc["shape"])
        chunks = tuple(int(c) for c in grid["configuration"]["chunk_shape"])
        if not shape:
            raise UnsupportedArrayError(f"0-dimensional arrays are not supported{where}; read it with zarr")
        if len(chunks) != len(shape):
            raise ArrayError(f"chunk shape {chunks} does not match shape {shape}{where}")
        prefix, separator = _key_encoder(doc.get("chunk_key_encoding") or {"name": "default"})
        fill: Any = zdtype.from_json_scalar(doc.get("fill_value"), zarr_format=3)
        if not is_vlen(dtype):  # a vlen fill stays a str / bytes (numpy would strip NULs off bytes)
            fill = np.asarray(fill).astype(dtype)[()]
        codec = codec_from_json(doc.get("codecs") or [], dtype)
        return cls(doc, shape, dtype, chunks, fill, codec, prefix, separator)

    def to_bytes(self) -> bytes:
        """The document as compact JSON (see :func:`dump_json`): exactly ``dump_json(self.doc)``."""
        around = self._around_shape
        if around is None:
            marker = "\x00shape\x00"
            text = dump_json({**self.doc, "shape": marker})
            head, _, tail = text.partition(dump_json(marker))
            around = (head, tail)
            object.__setattr__(self, "_around_shape", around)  # a cache: the value is unchanged
        return b"".join((around[0], b"[", ",".join(map(str, self.shape)).encode(), b"]", around[1]))

    def with_shape(self, shape: Sequence[int]) -> ArrayMeta:
        """The same metadata with another shape."""
        doc = {**self.doc, "shape": [int(n) for n in shape]}
        return ArrayMeta(
            doc,
            tuple(doc["shape"]),
            self.dtype,
            self.chunks,
            self.fill_value,
            self.codec,
            self._prefix,
            self._separator,
            self._around_shape,
        )

    # -- facts ---------------------------------------------------------------------

    @property
    def attributes(self) -> dict[str, Any]:
        return dict(self.doc.get("attributes") or {})

    @property
    def dims(self) -> tuple[str, ...] | None:
        names = self.doc.get("dimension_names")
        return None if names is None else tuple(names)

    @property
    def chunk_nbytes(self) -> int:
        """A chunk's decoded size in bytes (estimated with :data:`VLEN_ITEM_BYTES` per variable-length item)."""
        return item_bytes(self.dtype) * math.prod(self.chunks)

    def chunk_key(self, coords: Sequence[int]) -> str:
        """The key of chunk ``coords``, relative to the array (``c/0/3``)."""
        parts = [str(int(c)) for c in coords]
        if self._prefix:
            parts.insert(0, self._prefix)
        return self._separator.join(parts)
