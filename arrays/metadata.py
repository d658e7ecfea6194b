"""An array's ``zarr.json`` (zarr v3 metadata): building, parsing, and chunk keys.

BigArray stores exactly what zarr-python stores, so zarr and xarray read
its arrays and it reads theirs: ``<name>/zarr.json`` and chunk keys
``<name>/c/<i>/<j>...``. The parsed document is kept whole, and a shape
change rewrites only ``shape``: fields written by other tools survive.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from zarr.core.dtype import get_data_type_from_json, parse_data_type

from .codecs import ChunkCodec, codec_for, codec_from_json
from .errors import ArrayError, ArrayNotFoundError, UnsupportedArrayError

#: wendelin.core's block size: a chunk of about this many bytes by default.
CHUNK_BYTES = 2 * 1024 * 1024

METADATA_KEY = "zarr.json"

#: numpy kinds BigArray reads and writes: booleans, integers, floats, complex, datetimes.
_KINDS = "biufcmM"


def group_document(attributes: Mapping[str, Any] | None = None) -> bytes:
    """The ``zarr.json`` of a zarr v3 group."""
    doc = {"attributes": dict(attributes or {}), "zarr_format": 3, "node_type": "group"}
    return json.dumps(doc, indent=2).encode()


def node_type(raw: bytes) -> str | None:
    """``"array"``, ``"group"``, or None if ``raw`` is not a zarr v3 node document."""
    try:
        doc = json.loads(raw)
    except ValueError:
        return None
    return doc.get("node_type") if isinstance(doc, dict) else None


def storage_dtype(dtype: Any) -> np.dtype:
    """The dtype BigArray stores for ``dtype``: little-endian, of a kind zarr v3 knows."""
    dtype = np.dtype(dtype)
    if dtype.kind not in _KINDS or dtype.fields is not None or dtype.subdtype is not None:
        raise UnsupportedArrayError(
            f"dtype {dtype} is not supported: use booleans, integers, floats, complex numbers or datetime64"
        )
    return dtype.newbyteorder("<") if dtype.itemsize > 1 else dtype


def default_chunks(shape: Sequence[int], dtype: np.dtype) -> tuple[int, ...]:
    """Whole rows, as many as fit in :data:`CHUNK_BYTES`; wider rows are split from axis 1 on."""
    itemsize = np.dtype(dtype).itemsize
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

    doc: dict
    shape: tuple[int, ...]
    dtype: np.dtype
    chunks: tuple[int, ...]
    fill_value: Any
    codec: ChunkCodec
    _prefix: str = field(repr=False)
    _separator: str = field(repr=False)

    # -- building and parsing ------------------------------------------------------

    @classmethod
    def create(
        cls,
        shape: Sequence[int],
        dtype: Any,
        *,
        chunks: int | Sequence[int] | None = None,
        codec: Any = None,
        fill_value: Any = 0,
        dims: Sequence[str] | None = None,
        attributes: Mapping[str, Any] | None = None,
    ) -> ArrayMeta:
        """The metadata of a new array (ValueError/UnsupportedArrayError for a bad argument)."""
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
        zdtype = parse_data_type(dtype, zarr_format=3)
        try:
            fill_json = zdtype.to_json_scalar(zdtype.cast_scalar(fill_value), zarr_format=3)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"fill_value {fill_value!r} is not a {dtype}: {exc}") from None
        doc: dict[str, Any] = {
            "shape": list(shape),
            "data_type": zdtype.to_json(zarr_format=3),
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
        """Parse an array's ``zarr.json``; errors say what about it BigArray cannot read."""
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
    def from_doc(cls, doc: dict, name: str = "") -> ArrayMeta:
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
            zdtype = get_data_type_from_json(doc["data_type"], zarr_format=3)
        except (KeyError, TypeError, ValueError) as exc:
            raise UnsupportedArrayError(f"data type {doc.get('data_type')!r} is not supported{where}: {exc}") from None
        dtype = storage_dtype(zdtype.to_native_dtype())
        shape = tuple(int(n) for n in doc["shape"])
        chunks = tuple(int(c) for c in grid["configuration"]["chunk_shape"])
        if not shape:
            raise UnsupportedArrayError(f"0-dimensional arrays are not supported{where}; read it with zarr")
        if len(chunks) != len(shape):
            raise ArrayError(f"chunk shape {chunks} does not match shape {shape}{where}")
        prefix, separator = _key_encoder(doc.get("chunk_key_encoding") or {"name": "default"})
        fill = np.asarray(zdtype.from_json_scalar(doc.get("fill_value"), zarr_format=3)).astype(dtype)[()]
        codec = codec_from_json(doc.get("codecs") or [], dtype)
        return cls(doc, shape, dtype, chunks, fill, codec, prefix, separator)

    def to_bytes(self) -> bytes:
        return json.dumps(self.doc, indent=2).encode()

    def with_shape(self, shape: Sequence[int]) -> ArrayMeta:
        """The same metadata with another shape."""
        doc = {**self.doc, "shape": [int(n) for n in shape]}
        return ArrayMeta(
            doc, tuple(doc["shape"]), self.dtype, self.chunks, self.fill_value, self.codec,
            self._prefix, self._separator,
        )

    # -- facts ---------------------------------------------------------------------

    @property
    def attributes(self) -> dict:
        return dict(self.doc.get("attributes") or {})

    @property
    def dims(self) -> tuple[str, ...] | None:
        names = self.doc.get("dimension_names")
        return None if names is None else tuple(names)

    @property
    def chunk_nbytes(self) -> int:
        return self.dtype.itemsize * math.prod(self.chunks)

    def chunk_key(self, coords: Sequence[int]) -> str:
        """The key of chunk ``coords``, relative to the array (``c/0/3``)."""
        parts = [str(int(c)) for c in coords]
        if self._prefix:
            parts.insert(0, self._prefix)
        return self._separator.join(parts)

    def chunk_grid(self) -> tuple[int, ...]:
        """How many chunks span each axis."""
        return tuple(-(-n // c) for n, c in zip(self.shape, self.chunks))
