"""What a file reader hands to ingest: decoded parts of a file, each with the position just after it.

A reader (``connectors/files``: CSV, Parquet, Arrow IPC, WAV, log formats;
``connectors/tail``) turns a file into :class:`Part` objects;
:mod:`ingest.imports` checks them against the stream's schema and commits
them together with the position of the last, so that an interrupted import
resumes exactly. Plain data only: connectors import this module, never
:mod:`ingest.imports`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgpack
import numpy as np
import pyarrow as pa

#: What a failing pyarrow conversion raises.
CONVERSION_ERRORS = (pa.ArrowInvalid, pa.ArrowNotImplementedError, OverflowError)


@dataclass
class Part:
    """One decoded piece of a file.

    - ``table``: a ``time`` column (int64 ns since the epoch UTC, or a
      timestamp type) and one column per field.
    - ``samples``: for vibration, the rows x channels block instead of field
      columns (``table`` then holds ``time`` only); ``sample_rate`` in Hz.
    - ``rejected``: ``(time_ns, raw_bytes, reason)`` of the rows the reader
      could not decode, kept verbatim.
    - ``raw``: ``raw(i)``, the bytes row ``i`` of ``table`` came from (for
      quarantine); None: the row's values as JSON.
    - ``end``: the position just after this part (byte offset, row or frame
      index, or whatever the reader resumes from): a reader started at
      ``end`` yields exactly the rest.
    - ``nbytes``: the file bytes this part covers (progress and MB/s).
    """

    table: pa.Table
    end: Any
    nbytes: int
    rejected: list[tuple[int, bytes, str]] = field(default_factory=list)
    samples: np.ndarray | None = None
    sample_rate: float | None = None
    raw: Callable[[int], bytes] | None = None


def failing_rows(
    values: pa.Array, convert: Callable[[pa.Array], Any], converted: Callable[[int, Any], None] | None = None
) -> np.ndarray:
    """Sorted indices of the rows of ``values`` that ``convert`` refuses, found by halving.

    Halving costs few conversions when few rows are bad, where converting
    row by row would cost one per row. ``converted(start, result)`` is
    called with the result of each slice that converted.
    """
    bad: list[int] = []

    def visit(start: int, stop: int) -> None:
        try:
            result = convert(values.slice(start, stop - start))
        except CONVERSION_ERRORS:
            if stop - start == 1:
                bad.append(start)
                return
            middle = (start + stop) // 2
            visit(start, middle)
            visit(middle, stop)
            return
        if converted is not None:
            converted(start, result)

    if len(values):
        visit(0, len(values))
    return np.asarray(bad, dtype=np.int64)


def row_bytes(table: pa.Table, i: int) -> bytes:
    """Row ``i`` of ``table`` as the bytes its quarantine keeps: JSON text (times and other values JSON has no
    type for as their text), or msgpack where the row holds NaN or an infinity, which JSON has no text for;
    ``windvane quarantine replay`` reads either."""
    row = table.slice(i, 1).to_pylist()[0]
    try:
        return json.dumps(row, ensure_ascii=False, default=str, separators=(",", ":"), allow_nan=False).encode()
    except ValueError:
        packed: bytes = msgpack.packb(row, default=str)
        return packed
