"""Chunk codecs: an ndarray chunk to stored bytes and back, byte-compatible with zarr v3.

A chunk is serialised by zarr's ``bytes`` codec (C order, little-endian
unless the metadata says otherwise), then passed through zero or more
bytes-to-bytes compressors. The compressors are numcodecs' own (the ones
zarr uses), called directly: they release the GIL, so chunks encode and
decode in parallel threads, and zarr reads what we write and vice versa.

Defaults, chosen so identical chunks give identical bytes (neostore then
stores them once):

- ``"blosc"`` for numeric types wider than one byte: zstd inside blosc with
  byte shuffle, clevel 3, automatic block size, one internal thread. Byte
  shuffle groups the bytes of equal significance, which is what makes
  sensor samples compress better than plain zstd does. clevel 3 because it
  sits at the knee on such data: a lower level compresses clearly less, a
  higher one (zarr's default is 5) encodes several times slower for a
  little more, and decoding is about as fast at every level. Blosc output
  depends only on the input and these parameters (the block size is
  derived from them), so it is deterministic.
- ``"zstd"`` (level 3) for one-byte types (bool, int8, uint8), where byte
  shuffle has nothing to regroup.
- ``"none"``: the ``bytes`` codec alone; neostore then compresses the value
  itself when that pays.

Variable-length strings and bytes (dtypes :data:`STRING` and
:data:`VLEN_BYTES`) are serialised by zarr's ``vlen-utf8`` / ``vlen-bytes``
codecs instead of ``bytes`` (numcodecs' Cython ``VLenUTF8``/``VLenBytes``:
a little-endian u32 item count, then u32 length + payload per item), then
``zstd`` by default, exactly what ``zarr.create_array(dtype=str)`` writes,
so both produce identical, deterministic chunk bytes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numcodecs
import numpy as np
import zstandard
from numcodecs.blosc import Blosc
from numcodecs.gzip import GZip
from numcodecs.vlen import VLenBytes, VLenUTF8
from numcodecs.zstd import Zstd

from .errors import UnsupportedArrayError

# Our threads run codecs in parallel, so blosc must not start threads of its
# own (zarr sets the same at import; with it blosc uses a private context).
numcodecs.blosc.use_threads = False

BLOSC_DEFAULTS = {"cname": "zstd", "clevel": 3, "shuffle": "shuffle", "blocksize": 0}
ZSTD_LEVEL = 3
_SHUFFLES = {"noshuffle": Blosc.NOSHUFFLE, "shuffle": Blosc.SHUFFLE, "bitshuffle": Blosc.BITSHUFFLE}
_CNAMES = ("lz4", "lz4hc", "blosclz", "snappy", "zlib", "zstd")

#: The dtype of variable-length UTF-8 string arrays: what zarr 3.1.6 returns for its ``string`` arrays.
STRING = np.dtypes.StringDType()
#: The dtype of variable-length bytes arrays (each item a ``bytes``): what zarr returns for ``variable_length_bytes``.
VLEN_BYTES = np.dtype(object)
#: The zarr v3 array-to-bytes codec of each variable-length dtype's kind.
_VLEN_SERIALIZERS = {"T": "vlen-utf8", "O": "vlen-bytes"}
#: zarr's own default compressor for variable-length data: zstd level 0 (zstd's default, level 3).
VLEN_ZSTD = {"level": 0, "checksum": False}


def is_vlen(dtype: np.dtype) -> bool:
    """Whether ``dtype`` is a variable-length string or bytes dtype (items of any length)."""
    return np.dtype(dtype).kind in _VLEN_SERIALIZERS


def _blosc(config: Mapping[str, Any], dtype: np.dtype) -> tuple[dict[str, Any], Any]:
    config = {**BLOSC_DEFAULTS, **config}
    cname, shuffle = config["cname"], config["shuffle"]
    if cname not in _CNAMES:
        raise UnsupportedArrayError(f"blosc cname {cname!r} is unknown; use one of {', '.join(_CNAMES)}")
    if shuffle not in _SHUFFLES:
        raise UnsupportedArrayError(f"blosc shuffle {shuffle!r} is unknown; use one of {', '.join(_SHUFFLES)}")
    conf = {
        "typesize": int(config.get("typesize", dtype.itemsize)),
        "cname": cname,
        "clevel": int(config["clevel"]),
        "shuffle": shuffle,
        "blocksize": int(config.get("blocksize", 0)),
    }
    codec = Blosc(cname, conf["clevel"], _SHUFFLES[shuffle], conf["blocksize"], typesize=conf["typesize"])
    return {"name": "blosc", "configuration": conf}, codec


def _zstd(config: Mapping[str, Any], dtype: np.dtype) -> tuple[dict[str, Any], Any]:
    conf = {"level": int(config.get("level", 0)), "checksum": bool(config.get("checksum", False))}
    return {"name": "zstd", "configuration": conf}, Zstd(level=conf["level"], checksum=conf["checksum"])


def _gzip(config: Mapping[str, Any], dtype: np.dtype) -> tuple[dict[str, Any], Any]:
    conf = {"level": int(config.get("level", 5))}
    return {"name": "gzip", "configuration": conf}, GZip(conf["level"])


_COMPRESSORS = {"blosc": _blosc, "zstd": _zstd, "gzip": _gzip}


class ChunkCodec:
    """Encodes chunks of one dtype: the ``bytes`` codec, then ``compressors`` in order.

    Thread-safe: numcodecs codecs keep no state between calls.
    """

    def __init__(self, dtype: np.dtype, endian: str | None, compressors: Sequence[tuple[dict[str, Any], Any]]):
        self.dtype = np.dtype(dtype)
        self.endian = endian
        # The dtype of the serialised bytes; arrays handed out are little-endian.
        self._wire = self.dtype.newbyteorder(">" if endian == "big" else "<")
        self._steps = list(compressors)

    @property
    def work_dtype(self) -> np.dtype:
        """The dtype of decoded chunks (what caches hold and writes modify): the array's, except for strings."""
        return self.dtype

    @property
    def compressed(self) -> bool:
        """Whether encoded chunks are already compressed (neostore need not try again)."""
        return bool(self._steps)

    @property
    def names(self) -> list[str]:
        return [spec["name"] for spec, _ in self._steps]

    def to_json(self) -> list[dict[str, Any]]:
        """The ``codecs`` list of the array's ``zarr.json``."""
        first: dict[str, Any] = {"name": "bytes"}
        if self.endian is not None:
            first["configuration"] = {"endian": self.endian}
        return [first] + [spec for spec, _ in self._steps]

    def encode(self, chunk: np.ndarray) -> bytes:
        """The stored bytes of ``chunk`` (a full chunk: edge chunks come padded)."""
        data = np.ascontiguousarray(chunk, dtype=self._wire)
        buf: Any = data.reshape(-1).view(np.uint8)
        for _, codec in self._steps:
            buf = codec.encode(buf)
        return bytes(buf)

    def decode_into(self, data: bytes | memoryview, out: np.ndarray) -> None:
        """Decode a whole chunk straight into ``out`` (C-contiguous, the chunk's shape and dtype).

        Saves the copy from a decoded buffer when a read covers whole chunks.
        ValueError if the sizes disagree.
        """
        size = self._decoded_size(data)
        if size is None or self._wire != self.dtype or not out.flags.c_contiguous:
            out[...] = self.decode(data, out.shape)
            return
        if size != out.nbytes:
            raise ValueError(f"a chunk decodes to {size} bytes; its shape {out.shape} holds {out.nbytes}")
        try:
            self._steps[0][1].decode(data, out=out.reshape(-1).view(np.uint8))
        except (RuntimeError, ValueError) as exc:
            raise ValueError(f"a chunk does not decode: {exc}") from None

    def _decoded_size(self, data: bytes | memoryview) -> int | None:
        """The decoded size a single blosc or zstd step announces in its header (None: unknown)."""
        if len(self._steps) != 1:
            return None
        name = self._steps[0][0]["name"]
        try:
            if name == "blosc":  # blosc1 header: version, versionlz, flags, typesize, nbytes (u32 LE), ...
                return int.from_bytes(bytes(data[4:8]), "little") if len(data) >= 16 else None
            if name == "zstd":
                size = zstandard.frame_content_size(data)
                return size if size >= 0 else None
        except (RuntimeError, ValueError, zstandard.ZstdError):
            return None
        return None

    def decode(self, data: bytes | memoryview, shape: tuple[int, ...]) -> np.ndarray:
        """The chunk of ``shape`` stored as ``data``; ValueError if the sizes disagree."""
        buf: Any = data
        for _, codec in reversed(self._steps):
            buf = codec.decode(buf)
        raw = np.frombuffer(buf, dtype=self._wire)
        expected = int(np.prod(shape, dtype=np.int64))
        if raw.size != expected:
            raise ValueError(f"a chunk decoded to {raw.size} items; its shape {shape} holds {expected}")
        if self._wire != self.dtype:
            raw = raw.astype(self.dtype)
        return raw.reshape(shape)


class VLenCodec(ChunkCodec):
    """Encodes chunks of variable-length strings (:data:`STRING`) or bytes (:data:`VLEN_BYTES`).

    ``vlen-utf8``/``vlen-bytes`` then ``compressors``. The serialisers are
    numcodecs' Cython loops, so a chunk costs no Python-level work per item;
    they are stateless, hence thread-safe. Decoded chunks are object
    arrays of ``str``/``bytes`` (:attr:`work_dtype`): VLenUTF8 encodes
    those much faster than StringDType arrays, and an append's
    read-modify-write of the partial last chunk then converts only the
    rows it adds. Reads convert to StringDType when they copy into the
    result, as zarr does.
    """

    def __init__(self, dtype: np.dtype, compressors: Sequence[tuple[dict[str, Any], Any]]):
        self.dtype = np.dtype(dtype)
        self.endian = None
        self._wire = self.dtype
        self._steps = list(compressors)
        self._serializer_name = _VLEN_SERIALIZERS[self.dtype.kind]
        self._serializer = VLenUTF8() if self.dtype.kind == "T" else VLenBytes()

    def to_json(self) -> list[dict[str, Any]]:
        return [{"name": self._serializer_name, "configuration": {}}] + [spec for spec, _ in self._steps]

    def encode(self, chunk: np.ndarray) -> bytes:
        # VLenUTF8 reads StringDType arrays directly (and gives the same bytes as for object arrays).
        buf: Any = self._serializer.encode(np.ascontiguousarray(chunk).reshape(-1))
        for _, codec in self._steps:
            buf = codec.encode(buf)
        return bytes(buf)

    def serialize_items(self, items: np.ndarray) -> bytes:
        """The serialised ``items`` (an object array of ``str``/``bytes``) without the leading item count.

        A chunk's serialised form is the u32 count followed by these
        per-item records, so records of consecutive runs of items concatenate:
        :meth:`encode_serialized` then gives exactly :meth:`encode`'s bytes.
        """
        return bytes(memoryview(self._serializer.encode(items.reshape(-1)))[4:])

    def encode_serialized(self, count: int, *records: bytes | memoryview) -> bytes:
        """The stored bytes of a chunk of ``count`` items whose records (:meth:`serialize_items`) are ``records``."""
        buf: Any = b"".join((count.to_bytes(4, "little"), *records))
        for _, codec in self._steps:
            buf = codec.encode(buf)
        return bytes(buf)

    def deserialize_items(self, records: bytes, count: int) -> np.ndarray:
        """The ``count`` items :meth:`serialize_items` made ``records`` of, as an object array."""
        decoded: np.ndarray = self._serializer.decode(b"".join((count.to_bytes(4, "little"), records)))
        return decoded

    def decode_into(self, data: bytes | memoryview, out: np.ndarray) -> None:
        out[...] = self.decode(data, out.shape)

    def decode(self, data: bytes | memoryview, shape: tuple[int, ...]) -> np.ndarray:
        buf: Any = data
        for _, codec in reversed(self._steps):
            buf = codec.decode(buf)
        items = self._serializer.decode(buf)
        expected = int(np.prod(shape, dtype=np.int64))
        if items.size != expected:
            raise ValueError(f"a chunk decoded to {items.size} items; its shape {shape} holds {expected}")
        reshaped: np.ndarray = items.reshape(shape)
        return reshaped

    @property
    def work_dtype(self) -> np.dtype:
        return VLEN_BYTES


def shuffled(items: np.ndarray) -> bytes:
    """The bytes of ``items`` byte-shuffled (the k-th byte of every item together), as blosc's
    shuffle: a general compressor then finds the runs slowly varying numbers have in their high bytes."""
    data = np.ascontiguousarray(items)
    return data.view(np.uint8).reshape(-1, data.dtype.itemsize).T.tobytes()


def unshuffled(raw: bytes, itemsize: int) -> bytes:
    """The inverse of :func:`shuffled` for items of ``itemsize`` bytes (ValueError if ``raw`` is not whole items)."""
    return np.frombuffer(raw, dtype=np.uint8).reshape(itemsize, -1).T.tobytes()


def default_codec_name(dtype: np.dtype) -> str:
    """``blosc`` for multi-byte numbers, ``zstd`` for one-byte types (see the module notes)."""
    return "blosc" if np.dtype(dtype).itemsize > 1 else "zstd"


def codec_for(spec: str | Mapping[str, Any] | Sequence[Mapping[str, Any]] | None, dtype: np.dtype) -> ChunkCodec:
    """The codec ``create(codec=spec)`` asks for.

    ``spec``: None (the dtype's default), ``"blosc"``, ``"zstd"``, ``"gzip"``,
    ``"none"``, a dict ``{"name": "blosc", "clevel": 5, ...}`` overriding
    parameters, or a zarr v3 ``codecs`` list.
    """
    dtype = np.dtype(dtype)
    if spec is None:
        spec = {"name": "zstd", **VLEN_ZSTD} if is_vlen(dtype) else default_codec_name(dtype)
    if isinstance(spec, (list, tuple)):
        return codec_from_json(list(spec), dtype)
    if isinstance(spec, str):
        params: dict[str, Any] = {}
        name = spec
    elif isinstance(spec, Mapping):
        params = dict(spec)
        name = params.pop("name", None)
        if name is None:
            raise ValueError(f"codec {spec!r} needs a 'name' (blosc, zstd, gzip or none)")
    else:
        raise TypeError(f"codec must be a name, a dict or a zarr codecs list, not {type(spec).__name__}")
    endian = "little" if dtype.itemsize > 1 else None
    item = np.dtype("u1") if is_vlen(dtype) else dtype  # serialised strings are a byte stream

    def make(steps: list[tuple[dict[str, Any], Any]]) -> ChunkCodec:
        return VLenCodec(dtype, steps) if is_vlen(dtype) else ChunkCodec(dtype, endian, steps)

    if name == "none":
        return make([])
    if name == "blosc":
        return make([_blosc(params, item)])
    if name == "zstd":
        return make([_zstd({"level": ZSTD_LEVEL, **params}, item)])
    if name == "gzip":
        return make([_gzip(params, item)])
    raise UnsupportedArrayError(f"codec {name!r} is not supported; use blosc, zstd, gzip or none")


def codec_from_json(codecs: list[Mapping[str, Any]], dtype: np.dtype) -> ChunkCodec:
    """The codec a ``zarr.json``'s ``codecs`` list describes; UnsupportedArrayError names what is not read."""
    if not codecs:
        raise UnsupportedArrayError("the array has an empty codecs list; zarr v3 needs an array-to-bytes codec")
    first, rest = codecs[0], codecs[1:]
    if is_vlen(dtype):
        expected = _VLEN_SERIALIZERS[np.dtype(dtype).kind]
        if first.get("name") != expected:
            raise UnsupportedArrayError(
                f"codec {first.get('name')!r} is not supported for {dtype} items by BigArray "
                f"(it reads {expected!r} first); read this array with zarr"
            )
        return VLenCodec(dtype, _compressors(rest, np.dtype("u1")))
    if first.get("name") != "bytes":
        raise UnsupportedArrayError(
            f"codec {first.get('name')!r} is not supported by BigArray (it reads arrays whose first codec "
            "is 'bytes': no sharding or transpose); read this array with zarr"
        )
    endian = (first.get("configuration") or {}).get("endian")
    if endian not in (None, "little", "big"):
        raise UnsupportedArrayError(f"bytes codec endian {endian!r} is unknown")
    if endian is None and np.dtype(dtype).itemsize > 1:
        raise UnsupportedArrayError("the bytes codec has no endian for a multi-byte data type")
    return ChunkCodec(dtype, endian, _compressors(rest, np.dtype(dtype)))


def _compressors(rest: list[Mapping[str, Any]], dtype: np.dtype) -> list[tuple[dict[str, Any], Any]]:
    """The bytes-to-bytes steps of a ``codecs`` list (everything after the array-to-bytes codec)."""
    steps = []
    for spec in rest:
        name = spec.get("name")
        make = _COMPRESSORS.get(name) if isinstance(name, str) else None
        if make is None:
            raise UnsupportedArrayError(
                f"codec {name!r} is not supported by BigArray (it reads blosc, zstd and gzip); "
                "read this array with zarr"
            )
        steps.append(make(spec.get("configuration") or {}, dtype))
    return steps
