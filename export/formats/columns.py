"""What the array formats (zarr, netCDF) share: Arrow columns back to numpy, and writes of whole chunks.

Array formats store chunks; writing whole chunks only (:class:`ChunkWriter`)
spares them reading back and rewriting partial chunks when a time range
leaves blocks of odd lengths.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pyarrow as pa

from windvane.arrays.stream_schema import MISSING_ATTR, missing_value

from ..blocks import ColumnLayout

#: The CF attributes of an exported ``time`` variable: xarray decodes it to datetime64[ns].
TIME_ATTRS: dict[str, Any] = {
    "standard_name": "time",
    "units": "nanoseconds since 1970-01-01T00:00:00Z",
    "calendar": "proleptic_gregorian",
}


def time_values(table: pa.Table) -> np.ndarray:
    """The ``time`` column of ``table`` as int64 ns since the epoch."""
    ns: np.ndarray = table.column("time").combine_chunks().view(pa.int64()).to_numpy()
    return ns


def column_values(table: pa.Table, column: ColumnLayout) -> np.ndarray:
    """Column ``column`` of ``table`` as numpy: rows of shape ``column.inner`` in its dtype; text and bytes as objects."""
    values = table.column(column.name).combine_chunks()
    if values.null_count:  # an integer column's missing values (arrays.stream.MISSING_ATTR): its value for them
        values = values.fill_null(column.attrs[MISSING_ATTR])
    for _ in column.inner:
        values = values.flatten()  # fixed_size_list: the leaves, in row order
    if column.kind == "number":
        flat = values.to_numpy(zero_copy_only=False).astype(column.dtype, copy=False)
    else:
        flat = values.to_numpy(zero_copy_only=False)  # objects: str or bytes
    rows: np.ndarray = flat.reshape((table.num_rows, *column.inner))
    return rows


def fill_value(column: ColumnLayout) -> int | None:
    """The value an integer column holds where a value is missing (arrays.stream.MISSING_ATTR), which array
    formats declare as the variable's fill value (CF ``_FillValue``) so that xarray reads those rows as
    missing (NaN); None for other columns."""
    return missing_value(column.dtype, column.attrs) if column.kind == "number" else None


def attribute(value: Any) -> Any:
    """``value`` as an attribute every array format keeps: text and numbers as they are, the rest as JSON."""
    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
        return value
    return json.dumps(value, ensure_ascii=False)


class ChunkWriter:
    """Base of the array formats' writers: tables arrive in any lengths, :meth:`_append` gets whole chunks.

    Subclasses define ``_append(table, start, stop)`` (write rows ``[start,
    stop)`` of the output; ``start`` is a multiple of ``chunk_rows``) and
    ``_finish()`` (after the last rows).
    """

    def __init__(self, chunk_rows: int):
        self._chunk_rows = chunk_rows
        self._pending: list[pa.Table] = []
        self._count = 0  # rows pending
        self._rows = 0  # rows written

    def write(self, table: pa.Table) -> None:
        if not table.num_rows:
            return
        self._pending.append(table)
        self._count += table.num_rows
        if self._count < self._chunk_rows:
            return
        combined = self._pending[0] if len(self._pending) == 1 else pa.concat_tables(self._pending)
        whole = self._count // self._chunk_rows * self._chunk_rows
        rest = combined.slice(whole)
        # The rest (under a chunk) keeps its block's buffers until the next write: at most two blocks held.
        self._pending, self._count = ([rest] if rest.num_rows else []), rest.num_rows
        self._write_rows(combined.slice(0, whole))

    def _write_rows(self, table: pa.Table) -> None:
        start, self._rows = self._rows, self._rows + table.num_rows
        self._append(table, start, self._rows)

    def close(self) -> None:
        if self._count:
            self._write_rows(pa.concat_tables(self._pending))
        self._pending, self._count = [], 0
        self._finish()

    def _append(self, table: pa.Table, start: int, stop: int) -> None:
        raise NotImplementedError

    def _finish(self) -> None:
        raise NotImplementedError
