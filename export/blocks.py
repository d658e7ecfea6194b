"""Reading a stream for export: whole chunks at a time, from one snapshot, as Arrow tables.

:func:`layout_of` describes a stream's columns once (what the writers
need to create their files); :func:`read_blocks` yields the rows of a row
range as :class:`Block` objects of whole stream chunks (about
:data:`BLOCK_BYTES` each), the next block read in a thread while the
caller writes the current one. Memory stays at about three blocks
whatever the stream's size. A writer that takes stored chunks as they are
(zarr, where its arrays' chunk format is the stream's) gets them in the
block (:attr:`Block.chunks`), and the table then holds ``time`` and the
columns it writes from values, never decoding the rest: the bytes of a
copied text or bytes column are counted from its stored chunks
(:func:`stored_text_bytes`), decompressed without making a value. Tables are :meth:`arrays.Stream.to_arrow`'s:
``time`` is ``timestamp[ns, tz=UTC]``, strings ``large_string``, bytes
``large_binary``, a column with an inner shape a ``fixed_size_list``.
"""

from __future__ import annotations

import concurrent.futures
import math
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numcodecs.blosc import Blosc
from numcodecs.gzip import GZip
from numcodecs.zstd import Zstd

from windvane import arrays
from windvane.arrays import time_index
from windvane.arrays.metadata import ArrayMeta, item_bytes
from windvane.arrays.stream import QUARANTINE_ROOT
from windvane.arrays.time_index import Range
from windvane.arrays.workers import io_pool

from .times import TimeRange

#: Raw bytes a block aims at (rounded to whole chunks of the stream, at least one).
BLOCK_BYTES = 4 << 20
TIME = "time"
#: The serializers of text and bytes chunks: a u32 count, then each value as a u32 length and its bytes.
_VLEN = ("vlen-utf8", "vlen-bytes")
#: Decompressors of the codecs after such a serializer, by zarr v3 name: each reads its own frames, whatever
#: the configuration they were written with.
_DECOMPRESSORS = {"zstd": Zstd(), "blosc": Blosc(), "gzip": GZip()}


@dataclass(frozen=True)
class ColumnLayout:
    """One column of a stream (``time`` excluded): what a writer needs to declare it."""

    name: str
    dtype: np.dtype  # numpy's; StringDType for strings, object for bytes
    inner: tuple[int, ...]  # the shape of one row's value: () or (channels,)
    dims: tuple[str, ...]  # ("time", ...)
    attrs: dict[str, Any]
    codecs: tuple[
        dict[str, Any], ...
    ] = ()  # the zarr v3 codecs its chunks are stored with: serializer, then compressors

    @property
    def key(self) -> str:
        """The name as an array format's variable name: escaped if the stream's key is (:func:`arrays.column_key`)."""
        return arrays.column_key(self.name)

    @property
    def kind(self) -> str:
        """``"str"``, ``"bytes"`` or ``"number"`` (numbers and bools)."""
        return "str" if self.dtype.kind == "T" else "bytes" if self.dtype == object else "number"


@dataclass(frozen=True)
class Layout:
    """What a stream holds, as writers declare it: its columns, chunking and the Arrow schema of its blocks."""

    tag: str
    quarantine: bool
    attrs: dict[str, Any]
    chunk_rows: int  # of the time column: writers chunk their output alike
    columns: tuple[ColumnLayout, ...]
    schema: pa.Schema = field(repr=False)
    time_codecs: tuple[dict[str, Any], ...] = ()
    #: The stream arrays' metadata as stored, by key (``time`` and the columns' keys): the format of their chunks.
    stored: dict[str, ArrayMeta] = field(default_factory=dict, repr=False)

    @property
    def row_bytes(self) -> int:
        """Estimated raw bytes of one row (variable-length values counted at arrays' estimate)."""
        return 8 + sum(item_bytes(c.dtype) * math.prod(c.inner) for c in self.columns)


def layout_of(stream: arrays.Stream) -> Layout:
    """The :class:`Layout` of ``stream`` as its snapshot sees it."""
    columns = tuple(
        ColumnLayout(
            stream.name_of(key),
            array.dtype,
            tuple(array.shape[1:]),
            tuple(array.dims or (TIME, *(f"{key}_dim{i}" for i in range(1, array.ndim)))),
            array.attrs,
            tuple(array.codec),
        )
        for key, array in ((key, stream[key]) for key in stream.columns)
    )
    quarantine = stream.path.startswith(QUARANTINE_ROOT + "/")
    return Layout(
        stream.tag,
        quarantine,
        stream.attrs,
        stream[TIME].chunks[0],
        columns,
        stream.to_arrow(0, 0).schema,
        tuple(stream[TIME].codec),
        {key: stream[key].meta for key in (TIME, *stream.columns)},
    )


@dataclass(frozen=True)
class Block:
    """The selected rows of stream rows ``[start, stop)``: ``table`` (maybe empty) and their raw bytes; ``chunks``:
    the stored chunks of the block's rows of the arrays asked for as stored, by key."""

    start: int
    stop: int
    table: pa.Table
    nbytes: int
    chunks: dict[str, list[bytes | None]] = field(default_factory=dict)


def block_rows(layout: Layout, block_bytes: int = BLOCK_BYTES) -> int:
    """Rows per block: whole chunks of the stream, about ``block_bytes`` of raw data, at least one chunk."""
    chunks = max(1, block_bytes // max(1, layout.row_bytes * layout.chunk_rows))
    return chunks * layout.chunk_rows


def raw_bytes(layout: Layout, table: pa.Table, counted: Mapping[str, int] | None = None) -> int:
    """The raw bytes of ``table``'s values: number columns' itemsize, text and bytes their length (as info does);
    ``counted``: the bytes of text and bytes columns counted otherwise (the table need not hold them), by name."""
    total: int = 8 * table.num_rows
    for column in layout.columns:
        if column.kind == "number":  # counted from the rows: the table need not hold the column
            total += table.num_rows * math.prod(column.inner) * column.dtype.itemsize
        elif counted is not None and column.name in counted:
            total += counted[column.name]
        elif table.num_rows:
            total += _value_bytes(column, table.column(column.name))
    return total


def _value_bytes(column: ColumnLayout, values: pa.ChunkedArray) -> int:
    """The length of text or bytes ``values`` of ``column`` (with an inner shape: of the leaves)."""
    for _ in column.inner:
        values = pc.list_flatten(values)
    length: int = pc.sum(pc.binary_length(values)).as_py() or 0
    return length


def counts_stored(column: ColumnLayout) -> bool:
    """Whether the bytes of text or bytes ``column`` are counted from its stored chunks
    (:func:`stored_text_bytes`): its codecs are a vlen serializer and decompressors known here."""
    codecs = column.codecs
    return (
        column.kind != "number"
        and bool(codecs)
        and codecs[0].get("name") in _VLEN
        and all(c.get("name") in _DECOMPRESSORS for c in codecs[1:])
    )


def stored_text_bytes(column: ColumnLayout, chunk: bytes) -> int:
    """The length of the values of a stored chunk of ``column`` (:func:`counts_stored`): its serialized size less
    the count and the lengths before the values."""
    raw: Any = chunk
    for codec in reversed(column.codecs[1:]):
        raw = _DECOMPRESSORS[codec["name"]].decode(raw)
    serialized = memoryview(raw).cast("B")
    count = int.from_bytes(serialized[:4], "little")
    return len(serialized) - 4 - 4 * count


def _read_stored(stream: arrays.Stream, layout: Layout, start: int, stop: int, stored: Collection[str]) -> Block:
    """Rows ``[start, stop)`` (whole chunks but the stream's last) with the stored chunks of ``stored``; the table
    leaves out the columns among them whose values are neither written nor needed to count bytes: numbers, and
    text or bytes counted from whole stored chunks (the rows of a partial last chunk are decoded to be counted)."""
    rows = layout.chunk_rows
    first, last = start // rows, -(-stop // rows)
    chunks = {key: stream[key].stored_chunks(first, last) for key in stored}
    whole = (stop - start) // rows  # the block's whole chunks: all but a partial last one
    counted = {
        c.name: sum(stored_text_bytes(c, v) for v in chunks[c.key][:whole] if v is not None)
        for c in layout.columns
        if c.key in stored and counts_stored(c) and None not in chunks[c.key][:whole]
    }
    decoded = [c.key for c in layout.columns if c.key not in stored or (c.kind != "number" and c.name not in counted)]
    if decoded or TIME not in stored:
        table = stream.to_arrow(start, stop, columns=decoded)
    else:  # every array copied: the rows are all the writer and the count of bytes need of the table
        table = pa.table({TIME: pa.nulls(stop - start, layout.schema.field(TIME).type)})
    if counted and start + whole * rows < stop:
        tail = stream.to_arrow(start + whole * rows, stop, columns=[c.key for c in layout.columns if c.name in counted])
        for c in layout.columns:
            if c.name in counted:
                counted[c.name] += _value_bytes(c, tail.column(c.name))
    return Block(start, stop, table, raw_bytes(layout, table, counted), chunks)


def _read(
    stream: arrays.Stream,
    layout: Layout,
    start: int,
    stop: int,
    times: TimeRange,
    ranges: list[Range],
    stored: Collection[str] = (),
) -> Block:
    if stored:
        return _read_stored(stream, layout, start, stop, stored)
    if ranges:
        # The chunks' time ranges (kept beside them) say whether any row can be in the range: if none can,
        # nothing is read. A chunk whose rows have no time is read (--stop alone keeps such rows).
        chunks = ranges[start // layout.chunk_rows : -(-stop // layout.chunk_rows)]
        if all(r is not None and not time_index.meets(r, times.start, times.stop) for r in chunks):
            return Block(start, stop, layout.schema.empty_table(), 0)
    if times.bounded:
        keep = times.mask(stream[TIME][start:stop])
        if keep is not None and not keep.any():
            return Block(start, stop, layout.schema.empty_table(), 0)  # the other columns need not be read
    else:
        keep = None
    table = stream.to_arrow(start, stop)
    if keep is not None:
        table = table.filter(pa.array(keep))
    return Block(start, stop, table, raw_bytes(layout, table))


def read_blocks(
    stream: arrays.Stream,
    layout: Layout,
    start: int,
    stop: int,
    times: TimeRange | None = None,
    rows: int | None = None,
    stored: Collection[str] = (),
) -> Iterator[Block]:
    """The blocks of rows ``[start, stop)`` of ``stream`` (a snapshot), ``rows`` stream rows each, in order.

    Blocks start at multiples of ``rows`` (whole chunks) except the first.
    Only rows whose time is in ``times`` are kept; a block whose chunks'
    time ranges (:meth:`arrays.Stream.time_ranges`) miss ``times`` is not
    read, one none of whose rows is kept reads its ``time`` column only.
    No ``times``: every row. ``stored``: keys of arrays whose stored chunks
    each block carries (:attr:`Block.chunks`; every row, whole chunks:
    ``start`` at a chunk's start, no ``times``).
    """
    times = times if times is not None else TimeRange()
    rows = rows or block_rows(layout)
    if stored and (times.bounded or start % layout.chunk_rows or rows % layout.chunk_rows):
        raise ValueError("stored chunks are read for every row in whole chunks")
    ranges = stream.time_ranges() if times.bounded else []
    bounds = []
    at = start
    while at < stop:
        end = min(stop, (at // rows + 1) * rows)
        bounds.append((at, end))
        at = end
    if not bounds:
        return
    pool = io_pool()
    ahead: concurrent.futures.Future[Block] | None = pool.submit(
        _read, stream, layout, *bounds[0], times, ranges, stored
    )
    try:
        for i in range(len(bounds)):
            assert ahead is not None, "the block of each bound is read ahead"
            block = ahead.result()
            ahead = (
                pool.submit(_read, stream, layout, *bounds[i + 1], times, ranges, stored)
                if i + 1 < len(bounds)
                else None
            )
            yield block
    finally:
        if ahead is not None:
            ahead.cancel()
