"""Rows of a string or bytes column already serialised: appended without a Python object per value.

zarr's ``vlen-utf8`` and ``vlen-bytes`` codecs store a chunk as a u32 item
count, then one record per item: a little-endian u32 length and the item's
bytes. A :class:`VLenRows` holds the records of some rows and where each
row's record begins. A stream writer's :class:`~arrays.tail.VLenTail`
takes them as they are: a chunk is the count and a run of records, so
slicing rows into chunks is slicing byte ranges, and the chunk bytes are
those :meth:`~arrays.codecs.VLenCodec.encode` makes of the same values.

Built from an Arrow string or binary array (:meth:`VLenRows.from_arrow`)
they cost a pass over the bytes in C++, against a ``str`` or ``bytes``
object per value on the way through numpy. Anything that wants values
gets them from :meth:`VLenRows.to_numpy` (``numpy.asarray`` too):
StringDType for text, an object array of ``bytes`` otherwise; or as a
sequence (an index, iteration, :meth:`VLenRows.tolist`), ``str`` or ``bytes``.

They pickle as their records and offsets, one buffer: ingest's decode
workers hand text columns to the committing process so.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from typing import Any, overload

import numpy as np
from numcodecs.vlen import VLenBytes, VLenUTF8

from .errors import ColumnError


class VLenRows:
    """``len(offsets) - 1`` one-item rows whose records are ``records[offsets[i]:offsets[i + 1]]``.

    ``records``: a bytes-like buffer (not modified while the rows live);
    ``offsets``: non-decreasing int64 byte positions in it. ``text``: the
    items are UTF-8 text (a ``str`` column's), else bytes. Slicing rows
    (``rows[a:b]``) makes a view of the same buffer.
    """

    __slots__ = ("_records", "offsets", "text")

    def __init__(self, records: Any, offsets: np.ndarray, *, text: bool):
        if offsets.ndim != 1 or len(offsets) < 1:
            raise ValueError("VLenRows needs one offset per row and one past the last")
        # A slice's records are its parent's, cast already (slices are made for every batch of a group).
        cast = type(records) is memoryview and records.format == "B" and records.ndim == 1 and records.c_contiguous
        self._records = records if cast else memoryview(records).cast("B")
        self.offsets = offsets
        self.text = text

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @overload
    def __getitem__(self, rows: slice) -> VLenRows: ...

    @overload
    def __getitem__(self, rows: int) -> str | bytes: ...

    def __getitem__(self, rows: slice | int) -> VLenRows | str | bytes:
        """A slice of the rows (a view), or one row's value."""
        if not isinstance(rows, slice):
            row = range(len(self))[rows]  # IndexError beyond the rows; a negative index from the end
            item = bytes(self._records[int(self.offsets[row]) + 4 : int(self.offsets[row + 1])])
            return item.decode("utf-8") if self.text else item
        start, stop, step = rows.indices(len(self))
        if step != 1:
            raise IndexError("VLenRows slices take a step of 1")
        return VLenRows(self._records, self.offsets[start : max(start, stop) + 1], text=self.text)

    def __iter__(self) -> Iterator[str | bytes]:
        return iter(self.tolist())

    def tolist(self) -> list[str | bytes]:
        """The values as a list of ``str`` (text) or ``bytes``."""
        values: list[str | bytes] = self.to_numpy().tolist()
        return values

    def __repr__(self) -> str:
        return f"<VLenRows {len(self)} {'str' if self.text else 'bytes'} rows, {self.nbytes} bytes of records>"

    @property
    def records(self) -> memoryview:
        """The rows' records, in order, as a chunk holds them after its count (no copy)."""
        return self._records[int(self.offsets[0]) : int(self.offsets[-1])]

    @property
    def nbytes(self) -> int:
        return int(self.offsets[-1] - self.offsets[0])

    def to_numpy(self) -> np.ndarray:
        """The values: StringDType for text, an object array of ``bytes`` otherwise."""
        if not len(self):
            return np.empty(0, dtype=np.dtypes.StringDType() if self.text else object)
        serializer = VLenUTF8() if self.text else VLenBytes()
        items: np.ndarray = serializer.decode(b"".join((len(self).to_bytes(4, "little"), self.records)))
        return items.astype(np.dtypes.StringDType()) if self.text else items

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        values = self.to_numpy()
        return values if dtype is None else values.astype(dtype)

    def __reduce__(self) -> tuple[Any, ...]:
        # The rows' records alone cross (a slice's view would otherwise take its whole buffer along).
        return (_rebuilt, (bytes(self.records), self.offsets - self.offsets[0], self.text))

    @classmethod
    def concat(cls, parts: Sequence[VLenRows]) -> VLenRows:
        """The rows of ``parts`` end to end (all text or all bytes): their records joined once."""
        if not parts:
            raise ValueError("VLenRows.concat needs at least one part")
        if len({p.text for p in parts}) > 1:
            raise ColumnError("VLenRows of text and of bytes cannot be joined")
        if len(parts) == 1:
            return parts[0]
        # Starts summed in Python: parts are often a row or two (a trickle), where numpy's calls cost the most.
        starts = list(itertools.accumulate((p.nbytes for p in parts), initial=0))
        offsets = np.concatenate(
            [p.offsets[:-1] - (p.offsets[0] - start) for p, start in zip(parts, starts)]
            + [np.array(starts[-1:], dtype=np.int64)]
        )
        return cls(b"".join([p.records for p in parts]), offsets.astype(np.int64, copy=False), text=parts[0].text)

    @classmethod
    def repeat(cls, value: str | bytes, rows: int) -> VLenRows:
        """``rows`` rows of ``value`` (text if it is a ``str``)."""
        item = value.encode("utf-8") if isinstance(value, str) else value
        record = len(item).to_bytes(4, "little") + item
        return cls(record * rows, np.arange(rows + 1, dtype=np.int64) * len(record), text=isinstance(value, str))

    @classmethod
    def from_arrow(cls, values: Any) -> VLenRows:
        """The rows of a pyarrow string or binary array (large or not, no nulls: fill them first).

        ColumnError for another type or for nulls.
        """
        import pyarrow as pa
        import pyarrow.compute as pc

        kind = values.type
        text = pa.types.is_string(kind) or pa.types.is_large_string(kind)
        if not (text or pa.types.is_binary(kind) or pa.types.is_large_binary(kind)):
            raise ColumnError(f"VLenRows are made of Arrow string or binary arrays, not {kind}")
        if values.null_count:
            raise ColumnError(f"{values.null_count} of the values are null; fill them before making VLenRows")
        if not len(values):
            return cls(b"", np.zeros(1, dtype=np.int64), text=text)
        values = values.cast(pa.large_binary())  # a view of the same bytes (offsets widened if narrow)
        lengths = pc.binary_length(values).to_numpy(zero_copy_only=False).astype("<u4")
        heads = pa.FixedSizeBinaryArray.from_buffers(pa.binary(4), len(values), [None, pa.py_buffer(lengths)])
        # Each record is its length's four bytes then the value: joining the two, element by element, lays
        # the records end to end in the result's data buffer, and its offsets are where each begins.
        joined = pc.binary_join_element_wise(heads.cast(pa.large_binary()), values, pa.scalar(b"", pa.large_binary()))
        offsets = np.frombuffer(joined.buffers()[1], dtype=np.int64, count=len(joined) + 1, offset=joined.offset * 8)
        data = joined.buffers()[2]
        return cls(data if data is not None else b"", offsets, text=text)


def _rebuilt(records: bytes, offsets: np.ndarray, text: bool) -> VLenRows:
    """VLenRows from what they pickle as (:meth:`VLenRows.__reduce__`)."""
    return VLenRows(records, offsets, text=text)
