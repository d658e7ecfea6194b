"""The partial last chunk of a stream column, kept between appends so that an append need not read it.

An append to an array chunked by rows (each chunk spans every axis but the
first, as every stream column is) rewrites the chunk holding the last rows
and adds new ones. A :class:`Tail` holds what it needs for that: the
array's metadata and the rows of its partial last chunk, decoded for numbers,
serialised (zarr's ``vlen-utf8``/``vlen-bytes`` records) for strings and
bytes, so that neither decoding nor re-serialising the rows already there is
paid again. The chunks it produces are byte-for-byte those of
:meth:`~arrays.codecs.ChunkCodec.encode` of the whole chunk, as
:class:`~arrays.bigarray.BigArray` writes them.

A Tail is only as current as whoever keeps it checks (see
:mod:`arrays.stream_writer`); it never reads the database itself.

A Tail may :meth:`~Tail.shed` the rows it holds (when they are stored
elsewhere, as a row log holds them): it then holds only the rows appended
after, enough to say what an append added (:meth:`~Tail.serialised_since`)
but not to encode the chunk. An append that would need the shed rows
raises :class:`RowsShed`, before anything changes; whoever keeps the Tail
then makes it afresh with every row.
"""

from __future__ import annotations

import copy
import functools
import math
from typing import Any

import numpy as np

from .appending import ChunkJob
from .codecs import VLenCodec, shuffled
from .errors import ArrayError, ColumnError
from .metadata import ArrayMeta
from .stream_schema import coerce_column
from .vlen_rows import VLenRows

#: What a Tail takes as rows: an array of the stored dtype, or (string and bytes arrays) rows serialised already.
Rows = np.ndarray | VLenRows


class RowsShed(ArrayError):
    """An append needs rows a Tail has shed (its partial chunk fills, or is rewritten whole)."""


def _cannot_encode(name: str) -> bytes:
    raise RowsShed(f"{name}: its partial chunk cannot be encoded, the rows before were let go")


def row_chunked(meta: ArrayMeta) -> bool:
    """Whether every chunk spans all axes but the first (the only layout a Tail handles)."""
    return tuple(meta.chunks[1:]) == tuple(meta.shape[1:])


class Tail:
    """The state of one row-chunked array ``name`` between appends; make it with :func:`tail_for`.

    ``meta`` is the array's metadata (its shape counts the rows written,
    those of appends not yet committed included).
    """

    def __init__(self, name: str, meta: ArrayMeta):
        self.name = name
        self._meta = meta
        # The length is kept apart from ``meta``: a trickling stream appends one row at a time to
        # thousands of Tails, and a new ArrayMeta per append costs more than the rest of it.
        self._length = meta.shape[0]
        self._inner = tuple(meta.shape[1:])
        self._rows_per_chunk = meta.chunks[0]
        self._zeros = (0,) * (len(meta.shape) - 1)
        self._shed = 0  # rows of the partial chunk before this one are not held (see shed)
        self._known_key: tuple[int, str] | None = None  # (index, key) of the chunk whose key was asked last

    @property
    def meta(self) -> ArrayMeta:
        """The array's metadata, its shape counting every row appended."""
        if self._meta.shape[0] != self._length:
            self._meta = self._meta.with_shape((self._length, *self._inner))
        return self._meta

    @property
    def length(self) -> int:
        return self._length

    @property
    def rows_per_chunk(self) -> int:
        return self._rows_per_chunk

    @property
    def partial_key(self) -> str | None:
        """The key of the chunk only partly filled (None when the length is a multiple of the chunk rows)."""
        if self.length % self._rows_per_chunk == 0:
            return None
        return self.chunk_key(self.length // self._rows_per_chunk)

    def chunk_keys(self, start: int, stop: int) -> list[str]:
        """The keys of chunks ``start`` to ``stop`` (excluded), written or not."""
        return [self._key(index) for index in range(start, stop)]

    def chunk_key(self, index: int) -> str:
        known = self._known_key
        if known is None or known[0] != index:  # appends ask for the partial chunk's key again and again
            known = self._known_key = (index, self._key(index))
        return known[1]

    def _key(self, index: int) -> str:
        return f"{self.name}/{self._meta.chunk_key((index, *self._zeros))}"

    def coerce(self, tag: str, column: str, values: Any) -> Rows:
        """``values`` as rows of this array (ColumnError saying why not)."""
        if (
            type(values) is np.ndarray
            and values.dtype == self._meta.dtype
            and values.shape[1:] == self._inner
            and values.ndim == len(self._inner) + 1
        ):
            return values  # what ingest passes: rows as stored already (the general path would conclude so, slowly)
        return coerce_column(tag, column, values, self._meta.dtype, self._inner)

    def blank(self, rows: int) -> np.ndarray:
        """``rows`` rows of the fill value."""
        meta = self._meta
        return np.full((rows, *self._inner), meta.fill_value, dtype=meta.codec.work_dtype)

    def fills(self, rows: int) -> bool:
        """Whether appending ``rows`` rows fills the partial chunk."""
        return self.length % self._rows_per_chunk + rows >= self._rows_per_chunk

    def shed(self) -> int:
        """Let go of the rows held (the caller keeps them elsewhere); returns the bytes freed."""
        freed = self.held_bytes
        self._shed = self.length % self._rows_per_chunk
        self._drop_rows()
        return freed

    def _drop_rows(self) -> None:
        raise NotImplementedError

    def forget_before(self, row: int) -> None:
        """:meth:`serialised_since` will not be asked for rows before ``row``: let go of what only they need."""

    def append(self, value: Rows, *, encoded: bool = True) -> list[ChunkJob]:
        """Add ``value``'s rows (coerced by :meth:`coerce`): the chunks to store, in order.

        Advances the state at once; the caller drops the Tail if storing fails.
        A job encodes its chunk as the Tail holds it then: encode it before a
        later call changes that chunk, or let the later call's job for the
        same key (which sees both calls' rows) take its place. ``encoded``
        False: the partial chunk's job will not be encoded (a row log keeps
        its rows), so a Tail that shed rows can take them; :class:`RowsShed`
        (nothing changed) if it cannot.
        """
        if self._shed and (encoded or self.fills(len(value))):
            raise RowsShed(f"{self.name}: the rows of its partial chunk were let go; make the Tail afresh")
        jobs = []
        length, pos, total = self.length, 0, len(value)
        per_chunk = self._rows_per_chunk
        while pos < total:
            index, start = divmod(length, per_chunk)
            take = min(per_chunk - start, total - pos)
            jobs.append(self._put(index, start, value[pos : pos + take]))
            pos += take
            length += take
        self._length = length
        return jobs

    def extend(self, value: Rows) -> None:
        """Add ``value``'s rows (coerced), which fill no chunk, making no job: what :meth:`append` does
        with ``encoded`` False when no chunk fills, without the jobs nobody would encode (a row log
        stores the rows). ValueError, before anything changes, if they would fill the chunk."""
        if self.fills(len(value)):
            raise ValueError(f"{self.name}: {len(value)} rows fill the partial chunk; append them")
        if len(value):
            self._hold(self._length % self._rows_per_chunk, value)
            self._length += len(value)

    def _hold(self, start: int, rows: Rows) -> None:
        """Keep ``rows``, from row ``start`` of the partial chunk on (they do not fill it)."""
        raise NotImplementedError

    def _put(self, index: int, start: int, rows: Rows) -> ChunkJob:
        raise NotImplementedError

    @property
    def held_bytes(self) -> int:
        """Bytes of rows this Tail holds in memory (its partial chunk)."""
        raise NotImplementedError

    @property
    def remembered_starts(self) -> int:
        """How many rows where appends began it remembers, for :meth:`serialised_since` (numbers need none:
        any row of the partial chunk will do)."""
        return 0

    def serialised_since(self, row: int) -> bytes:
        """The rows from ``row`` (in the partial last chunk, where an append began) to the end, as a
        row log keeps them (:func:`arrays.row_log.deserialise` reads them back)."""
        raise NotImplementedError

    def serialised(self, rows: Rows) -> bytes:
        """``rows`` (coerced) as a row log keeps them: what :meth:`serialised_since` gives once they are
        appended, for the row they begin at. Changes nothing."""
        raise NotImplementedError

    def _in_partial(self, row: int) -> int:
        """``row``'s index in the partial last chunk (ValueError if it is not in it)."""
        start = self.length - self.length % self._rows_per_chunk
        if not start <= row <= self.length:
            raise ValueError(f"{self.name}: row {row} is not in the partial last chunk [{start}, {self.length})")
        return row - start

    def copy(self) -> Tail:
        """An independent Tail in the same state: appending to one leaves the other as it was."""
        return copy.copy(self)


def _numbers(rows: Rows) -> np.ndarray:
    if not isinstance(rows, np.ndarray):  # coerce gives numbers as arrays: this is a caller's mistake
        raise TypeError(f"a numeric array takes rows as an ndarray, not {type(rows).__name__}")
    return rows


class NumberTail(Tail):
    """A numeric (bool, int, float, complex, datetime) array: the partial chunk, decoded and writable."""

    def __init__(self, name: str, meta: ArrayMeta, partial: np.ndarray | None):
        super().__init__(name, meta)
        # Written in place by later appends: ours alone (a copy of what was decoded).
        self._chunk = None if partial is None or self.partial_key is None else np.array(partial, copy=True)

    def _put(self, index: int, start: int, rows: Rows) -> ChunkJob:
        rows = _numbers(rows)
        meta = self._meta
        codec = meta.codec
        end = start + len(rows)
        full = end == self._rows_per_chunk
        if start == 0:
            self._shed = 0
        first = self._shed  # the held rows begin there (0 unless shed)
        if start == 0 and full:
            chunk = rows  # a whole chunk: encoded straight from the caller's rows
            self._chunk = None
        else:
            self._hold(start, rows)
            held = self._chunk
            assert held is not None  # _hold made it
            chunk = held
            if full:
                self._chunk = None  # the next append starts a new chunk
        if first:
            encode = functools.partial(_cannot_encode, self.name)
        elif len(chunk) == self._rows_per_chunk:
            encode = functools.partial(codec.encode, chunk)
        else:
            encode = functools.partial(self._encode_padded, chunk)
        values = chunk if full and not first else None
        weight = math.prod(meta.chunks) * chunk.itemsize
        return ChunkJob(self.chunk_key(index), encode, weight, codec.compressed, full, index, values)

    def _hold(self, start: int, rows: Rows) -> None:
        rows = _numbers(rows)
        if start == 0:
            self._shed = 0
        first, end = self._shed, start + len(rows)  # the held rows begin at ``first`` (0 unless shed)
        if start == first or self._chunk is None:
            self._chunk = self._grown(None, end - first)
        elif len(self._chunk) < end - first:
            self._chunk = self._grown(self._chunk, end - first)
        self._chunk[start - first : end - first] = rows

    def _grown(self, old: np.ndarray | None, rows: int) -> np.ndarray:
        """Room for at least ``rows`` rows, ``old``'s first, the fill value past them. Grown by doubling,
        up to a chunk: a trickling stream holds what it has, not a whole chunk (thousands of streams may
        be kept). A quarter of a chunk or more takes the whole chunk at once: bulk appends would
        otherwise copy what they hold again when the next one fills it."""
        have = 0 if old is None else len(old)
        per_chunk = self._rows_per_chunk
        capacity = per_chunk if 4 * rows >= per_chunk else min(per_chunk, max(rows, 2 * have, 64))
        meta = self._meta
        out = np.empty((capacity, *meta.chunks[1:]), dtype=meta.codec.work_dtype)
        if old is not None:
            out[:have] = old
        out[have:] = meta.fill_value
        return out

    def _encode_padded(self, rows: np.ndarray) -> bytes:
        """The partial chunk ``rows`` begin, encoded at the chunk's full shape (fill value past them)."""
        return self._meta.codec.encode(self._grown(rows, self._rows_per_chunk))

    def serialised_since(self, row: int) -> bytes:
        first = self._in_partial(row)
        end = self.length % self._rows_per_chunk
        if first == end:
            return b""
        if first < self._shed:
            raise RowsShed(f"{self.name}: row {row} was let go")
        assert self._chunk is not None  # rows past the shed ones are held
        return shuffled(self._chunk[first - self._shed : end - self._shed])

    def serialised(self, rows: Rows) -> bytes:
        return shuffled(np.asarray(_numbers(rows), dtype=self._meta.codec.work_dtype)) if len(rows) else b""

    @property
    def held_bytes(self) -> int:
        return 0 if self._chunk is None else self._chunk.nbytes

    def _drop_rows(self) -> None:
        self._chunk = None

    def copy(self) -> NumberTail:
        twin: NumberTail = copy.copy(self)
        if self._chunk is not None:
            twin._chunk = self._chunk.copy()  # filled in place by appends
        return twin


class VLenTail(Tail):
    """A string or bytes array: the serialised records of the partial chunk's rows.

    Re-serialising the thousands of items already in the chunk costs more
    than the rest of an append; concatenating their records does not. Rows
    that come serialised already (:class:`~arrays.vlen_rows.VLenRows`) are
    taken as their records: a whole chunk of them is encoded without a copy.
    """

    def __init__(self, name: str, meta: ArrayMeta, partial: np.ndarray | None):
        super().__init__(name, meta)
        codec = meta.codec
        if not isinstance(codec, VLenCodec):
            raise TypeError(f"{name}: a VLenTail needs a variable-length codec, not {type(codec).__name__}")
        self._codec: VLenCodec = codec
        self._items_per_row = math.prod(meta.chunks[1:])
        self._fill = codec.serialize_items(np.array([meta.fill_value], dtype=object))
        start = self.length % self._rows_per_chunk
        self._records = b""
        if start and partial is not None:
            self._records = codec.serialize_items(np.ascontiguousarray(partial[:start], dtype=object))
        elif start:  # the chunk was never written: its rows read as the fill value
            self._records = self._fill * (start * self._items_per_row)
        # Where the records of a row begin, for each row an append began or ended at.
        self._bounds = {0: 0, start: len(self._records)}

    def coerce(self, tag: str, column: str, values: Any) -> Rows:
        # The common cases: rows serialised already (VLenRows: what ingest gives), taken as they are; a
        # list of str, straight to an object array, which is what the serialiser takes. Anything else
        # goes through the general conversion (numpy's str coercion, checks).
        dtype = self._meta.dtype
        inner = self._inner
        if type(values) is VLenRows:
            if inner or values.text != (dtype.kind == "T"):
                takes = f"rows of shape {inner} of {dtype}" if inner else str(dtype)
                raise ColumnError(f"column {column!r} of stream {tag!r} takes {takes}, not {values!r}")
            return values
        if dtype.kind == "T" and isinstance(values, list) and not inner:
            if set(map(type, values)) <= {str}:
                out = np.empty(len(values), dtype=object)
                out[:] = values
                return out
        value = super().coerce(tag, column, values)
        assert isinstance(value, np.ndarray)  # the base class makes VLenRows of nothing
        return value if value.dtype == object else value.astype(object)

    def _serialised(self, rows: Rows) -> bytes | memoryview:
        """The records of ``rows`` (a view when they come serialised)."""
        if type(rows) is VLenRows:
            return rows.records
        return self._codec.serialize_items(np.ascontiguousarray(rows, dtype=object))

    def _hold(self, start: int, rows: Rows) -> None:
        records = self._serialised(rows)
        if start == 0:
            # Held across appends, so ours (a view would keep a whole append's buffer alive).
            self._records, self._bounds, self._shed = bytes(records), {0: 0}, 0
        else:
            self._records += records
        self._bounds[start + len(rows)] = len(self._records)

    def _put(self, index: int, start: int, rows: Rows) -> ChunkJob:
        codec = self._codec
        end = start + len(rows)
        full = end == self._rows_per_chunk
        records: bytes | memoryview
        if start == 0 and full:
            records = self._serialised(rows)  # a whole chunk: encoded straight from the rows' records
            self._shed = 0
        else:
            self._hold(start, rows)
            records = self._records
        fills = (self._rows_per_chunk - end) * self._items_per_row
        if self._shed:
            encode = functools.partial(_cannot_encode, self.name)
        else:
            # The filler is made when the chunk is encoded: most appends' jobs never are (a row log takes them).
            encode = functools.partial(
                _encode_records, codec, self._rows_per_chunk * self._items_per_row, records, self._fill, fills
            )
        weight = len(records) + len(self._fill) * fills
        if full:
            self._records, self._bounds = b"", {0: 0}
        return ChunkJob(self.chunk_key(index), encode, weight, codec.compressed, full)

    def serialised_since(self, row: int) -> bytes:
        first = self._in_partial(row)
        try:
            return self._records[self._bounds[first] :]
        except KeyError:
            raise ValueError(f"{self.name}: row {row} is not where an append began") from None

    def serialised(self, rows: Rows) -> bytes:
        return bytes(self._serialised(rows))

    @property
    def held_bytes(self) -> int:
        return len(self._records)

    @property
    def remembered_starts(self) -> int:
        return len(self._bounds)

    def _drop_rows(self) -> None:
        # The records held begin at the shed row (serialised_since looks bounds up by row).
        self._records, self._bounds = b"", {self._shed: 0}

    def forget_before(self, row: int) -> None:
        # One bound per append: without this they would pile up until the chunk fills.
        first = row - (self.length - self.length % self._rows_per_chunk)
        if first > 0 and len(self._bounds) > 2:
            self._bounds = {at: offset for at, offset in self._bounds.items() if at >= first}

    def copy(self) -> VLenTail:
        twin: VLenTail = copy.copy(self)
        twin._bounds = dict(self._bounds)
        return twin


def _encode_records(codec: VLenCodec, count: int, records: bytes | memoryview, fill: bytes, fills: int) -> bytes:
    """The chunk of ``count`` items whose first records are ``records``, the rest ``fills`` times ``fill``."""
    return codec.encode_serialized(count, records, fill * fills)


def tail_for(name: str, meta: ArrayMeta, partial: np.ndarray | None) -> Tail:
    """The Tail of array ``name`` described by ``meta``, whose partial last chunk decodes to ``partial``.

    ``partial`` None: no partial chunk, or it was never written (its rows
    read as the fill value). ColumnError if the array is not row-chunked.
    """
    if not row_chunked(meta):
        raise ColumnError(f"{name} is chunked across its inner axes {meta.chunks}; appends need whole-row chunks")
    if isinstance(meta.codec, VLenCodec):
        return VLenTail(name, meta, partial)
    return NumberTail(name, meta, partial)
