"""zarr v3: a group directory with one array per column, ``time`` carrying CF units, chunked as the stream.

``xarray.open_zarr(path)`` gives ``time`` as datetime64[ns] and every
column with its dims (``(time, channel)`` for vibration samples);
``zarr.open_group(path)`` gives the int64 ns and the columns as stored.
Strings are zarr's ``string`` (variable-length UTF-8), bytes its
``variable_length_bytes``; an integer column with a missing value
(``missing`` attribute) has it as its ``fill_value`` and CF
``_FillValue``, so xarray reads those rows as NaN; every array keeps the codecs its stream column
has (blosc by default), so the export costs what the stream's own encoding
does. The group's attributes are the stream's, plus ``stream`` (its tag);
metadata is consolidated on close.

Arrays are created as long as the most rows the export can write and cut
to the rows written on close: no metadata rewrite per block. The columns
of a block are encoded and written concurrently. An array whose chunks are
the stream's (same data type, chunk shape, key encoding and codecs: the
stream column's codecs are kept, so every column but one whose codecs zarr
cannot take as given) gets the stream's stored chunks as they are, copied
without decoding (:meth:`Writer.take_stored`), when the export is of whole
chunks (every row from a chunk's start, no time range). Those chunks are
written as files by a few threads while the next block is read: a block's
writes are waited for before the next block's start, so that memory holds
about two blocks.
"""

from __future__ import annotations

import asyncio
import json
import os
import warnings
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pyarrow as pa
import zarr
from zarr.core.dtype import VariableLengthBytes
from zarr.core.sync import sync
from zarr.errors import UnstableSpecificationWarning, ZarrUserWarning
from zarr.storage import LocalStore

from windvane.arrays.metadata import ArrayMeta

from ..blocks import TIME, Layout
from .columns import TIME_ATTRS, ChunkWriter, attribute, column_values, fill_value, time_values

#: What makes a chunk of one zarr v3 array a valid chunk of another, byte for byte.
_CHUNK_FORMAT = ("data_type", "chunk_grid", "chunk_key_encoding", "codecs")
#: Threads writing stored chunks as files: a chunk is a file, and files being created together overlap their
#: file system work.
_WRITE_THREADS = 4


def _put(path: str, data: bytes) -> None:
    """Write ``data`` as the file ``path``, making its directory if need be."""
    try:
        f = open(path, "wb")
    except FileNotFoundError:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        f = open(path, "wb")
    with f:
        f.write(data)


def _chunk_format(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The entries of a zarr.json document that define its chunks' bytes, as JSON values (lists, not tuples)."""
    normalized: dict[str, Any] = json.loads(json.dumps({k: doc.get(k) for k in _CHUNK_FORMAT}))
    return normalized


def same_chunks(array: zarr.Array[Any], stored: ArrayMeta) -> bool:
    """Whether a chunk of the stream array of metadata ``stored`` is, as stored, a chunk of ``array``."""
    return _chunk_format(array.metadata.to_dict()) == _chunk_format(stored.doc)


class Writer(ChunkWriter):
    """Writes a zarr v3 group at ``path``: tables :meth:`write` takes are gathered into the stream's chunks;
    :meth:`close` writes the last (see :class:`export.formats.Writer`)."""

    def __init__(self, path: str, layout: Layout, rows: int):
        super().__init__(layout.chunk_rows)
        self._layout = layout
        self._copied: frozenset[str] = frozenset()  # arrays whose stored chunks are copied, not written here
        self._store = LocalStore(path)
        self._path = path
        self._writes: ThreadPoolExecutor | None = None  # made when stored chunks are copied
        self._writing: list[Future[None]] = []  # the last block's chunk files being written
        chunk = layout.chunk_rows
        attrs = {k: attribute(v) for k, v in {**layout.attrs, "stream": layout.tag}.items()}
        group = zarr.open_group(self._store, mode="w-", zarr_format=3, attributes=attrs)
        with warnings.catch_warnings():
            # variable_length_bytes has no zarr v3 spec yet; zarr writes and reads it all the same.
            warnings.simplefilter("ignore", UnstableSpecificationWarning)
            self._arrays = {
                "time": group.create_array(
                    "time",
                    shape=(rows,),
                    dtype="int64",
                    chunks=(chunk,),
                    dimension_names=("time",),
                    compressors=layout.time_codecs[1:],
                    attributes=TIME_ATTRS,
                )
            }
            for c in layout.columns:
                dtype = "str" if c.kind == "str" else VariableLengthBytes() if c.kind == "bytes" else c.dtype
                attributes = {k: attribute(v) for k, v in c.attrs.items()}
                missing = fill_value(c)
                if missing is not None:  # zarr v3's fill_value is no mask to xarray: CF's _FillValue is
                    attributes["_FillValue"] = missing
                self._arrays[c.key] = group.create_array(
                    c.key,
                    shape=(rows, *c.inner),
                    dtype=dtype,
                    chunks=(chunk, *c.inner),
                    dimension_names=c.dims,
                    serializer=c.codecs[0],
                    compressors=c.codecs[1:],
                    fill_value=missing,
                    attributes=attributes,
                )

    def take_stored(self) -> frozenset[str]:
        """The arrays whose chunks are the stream's (:func:`same_chunks`): copied from now on (see
        :class:`export.formats.StoredChunkWriter`)."""
        stored = self._layout.stored
        self._copied = frozenset(k for k, a in self._arrays.items() if k in stored and same_chunks(a, stored[k]))
        if self._copied:
            self._writes = ThreadPoolExecutor(_WRITE_THREADS, thread_name_prefix="windvane-export-zarr")
        return self._copied

    def write_stored(self, first: int, chunks: Mapping[str, Sequence[bytes | None]]) -> None:
        assert self._writes is not None, "take_stored is asked before the first write"
        self._written()
        for key, values in chunks.items():
            array = self._arrays[key]
            inner = (0,) * (array.ndim - 1)
            for i, value in enumerate(values):
                if value is None:
                    self._fill_chunk(key, first + i)
                else:
                    path = os.path.join(self._path, key, array.metadata.encode_chunk_key((first + i, *inner)))
                    self._writing.append(self._writes.submit(_put, path, value))

    def _written(self) -> None:
        """Wait for the chunk files being written (raising what failed, a full disk say)."""
        writing, self._writing = self._writing, []
        for future in writing:
            future.result()

    def _fill_chunk(self, key: str, index: int) -> None:
        """Chunk ``index`` of ``key`` that the stream never wrote: rows of the stream's fill value, which its
        reader sees there; stored only where this array's own fill value differs."""
        array, stored = self._arrays[key], self._layout.stored[key]
        if json.dumps(array.metadata.to_dict()["fill_value"]) == json.dumps(stored.doc.get("fill_value")):
            return
        rows = self._chunk_rows
        array[index * rows : min((index + 1) * rows, array.shape[0])] = stored.fill_value

    def _append(self, table: pa.Table, start: int, stop: int) -> None:
        values = {} if TIME in self._copied else {TIME: time_values(table)}
        values.update((c.key, column_values(table, c)) for c in self._layout.columns if c.key not in self._copied)
        if not values:
            return

        async def write_all() -> None:
            await asyncio.gather(
                *(self._arrays[name].async_array.setitem(slice(start, stop), data) for name, data in values.items())
            )

        sync(write_all())

    def _finish(self) -> None:
        if self._writes is not None:
            try:
                self._written()
            finally:
                self._writes.shutdown()
        for array in self._arrays.values():
            if array.shape[0] != self._rows:  # the time range left rows out
                array.resize((self._rows, *array.shape[1:]))
        with warnings.catch_warnings():
            # Not in the v3 spec yet, but what xarray looks for first: without it, it warns on every open.
            warnings.simplefilter("ignore", ZarrUserWarning)
            zarr.consolidate_metadata(self._store)
        self._store.close()
