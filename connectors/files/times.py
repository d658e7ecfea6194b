"""Time columns of files to int64 nanoseconds since the epoch, UTC, by windvane's one time rule.

The rule is :mod:`ingest.times`'s, applied a whole column at a time:

- ISO 8601 text with a zone (``Z``, ``+01:00``, ``+0100``) is an instant;
  without one it is a wall-clock time in ``zone`` (``windvane import
  --timezone``; default UTC: guessing the machine's zone would make the
  same file import differently on two machines). A date alone is its
  midnight. Fractions down to nanoseconds are kept.
- Numbers are epoch times; the unit is ``time_unit`` if given, else chosen
  by the magnitude of the first value (:func:`ingest.times.unit_for`).
  Integers are exact; fractional numbers are rounded to the microsecond (a
  float64 holds no more of an epoch time).
- Timestamp and date columns (Parquet, Arrow) are converted as they are;
  timestamps without a zone are wall-clock times in ``zone`` too.

A value that is none of these (or missing) makes its row rejected, with a
reason naming the value, by the reader.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from windvane.ingest.parts import failing_rows
from windvane.ingest.times import NS_PER_UNIT as UNITS
from windvane.ingest.times import epoch_column_ns, iso_column_ns, wall_to_utc
from windvane.ingest.times import unit_for as magnitude_unit

from . import FileFormatError

#: Column names taken as the time column, in this order, when none is named.
TIME_NAMES = ("time", "timestamp", "ts", "datetime", "date")
_NUMBER = r"^\s*-?\d+(\.\d*)?([eE][+-]?\d+)?\s*$"


def find_time_column(names: Sequence[str], wanted: str | None, where: str) -> str:
    """The time column among ``names``: ``wanted``, or the first of :data:`TIME_NAMES` present."""
    if wanted is not None:
        if wanted not in names:
            raise FileFormatError(f"{where}: no column {wanted!r} (--time-column); the columns are {list(names)}")
        return wanted
    lowered = {n.lower(): n for n in names}
    for name in TIME_NAMES:
        if name in lowered:
            return lowered[name]
    raise FileFormatError(
        f"{where}: no time column (one of {', '.join(TIME_NAMES)}); the columns are "
        f"{list(names)}: name it with --time-column"
    )


def unit_for(values: pa.Array, unit: str | None) -> str:
    """``unit``, or the epoch unit the magnitude of the first non-null value suggests."""
    if unit is not None:
        if unit not in UNITS:
            raise FileFormatError(f"time unit {unit!r} is not one of {', '.join(UNITS)}")
        return unit
    valid = values.drop_null()
    return magnitude_unit(float(valid[0].as_py()) if len(valid) else 0.0)


def _mixed(values: pa.Array, numeric: np.ndarray, unit: str | None, zone: str) -> pa.Array:
    """Text holding epoch numbers (where ``numeric``) and other text: the numbers by :func:`_convert`,
    the rest as ISO 8601; values that are neither are null."""
    times = np.zeros(len(values), dtype=np.int64)
    bad = np.zeros(len(values), dtype=bool)
    at = np.flatnonzero(numeric)
    numbers = _convert(values.take(pa.array(at)), unit, zone)
    times[at] = numbers.fill_null(0).to_numpy()
    bad[at] = numbers.is_null().to_numpy(zero_copy_only=False)
    at = np.flatnonzero(~numeric)
    text_times, text_bad = iso_column_ns(values.take(pa.array(at)), zone)
    times[at], bad[at] = text_times, text_bad
    return pa.array(times, mask=bad)


def _convert(values: pa.Array, unit: str | None, zone: str) -> pa.Array:
    type_ = values.type
    if pa.types.is_dictionary(type_):
        values, type_ = values.dictionary_decode(), type_.value_type
    if pa.types.is_timestamp(type_) or pa.types.is_date(type_):
        zoned = pa.types.is_timestamp(type_) and type_.tz is not None
        ns = pc.cast(pc.cast(values, pa.timestamp("ns", tz=type_.tz if zoned else None)), pa.int64())
        if zoned or zone == "UTC":
            return ns
        return pa.array(wall_to_utc(ns.fill_null(0).to_numpy(), zone), mask=ns.is_null().to_numpy(zero_copy_only=False))
    if pa.types.is_integer(type_) or pa.types.is_floating(type_):
        return epoch_column_ns(values, unit_for(values, unit))
    if pa.types.is_string(type_) or pa.types.is_large_string(type_) or pa.types.is_string_view(type_):
        numeric = pc.fill_null(pc.match_substring_regex(values, _NUMBER), True)
        if len(values) and pc.all(numeric).as_py():
            numbers = pc.cast(pc.utf8_trim_whitespace(values), pa.float64())
            if pc.all(pc.fill_null(pc.match_substring_regex(values, r"^\s*-?\d+\s*$"), True)).as_py():
                numbers = pc.cast(pc.utf8_trim_whitespace(values), pa.int64())
            return epoch_column_ns(numbers, unit_for(numbers, unit))
        if len(values) and pc.any(numeric).as_py():
            # Epoch numbers among text (a log's "noon", a spreadsheet's "n/a"): each value read as what it is.
            return _mixed(values, numeric.to_numpy(zero_copy_only=False), unit, zone)
        times, bad = iso_column_ns(values, zone)
        return pa.array(times, mask=bad)
    raise FileFormatError(f"a time column of type {type_} is neither text, a number nor a timestamp")


def time_ns(
    values: pa.Array | pa.ChunkedArray, unit: str | None = None, zone: str = "UTC"
) -> tuple[np.ndarray, np.ndarray]:
    """``(times, bad)``: int64 ns since the epoch per value, and the indices of values that are not times.

    ``unit``: the epoch unit of numbers (None: by magnitude); ``zone``: the
    zone of ISO 8601 text written without one. Rows at
    ``bad`` (unparseable or missing) hold 0 in ``times``.
    """
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks() if values.num_chunks != 1 else values.chunk(0)
    try:
        converted = _convert(values, unit, zone)
        bad = np.flatnonzero(converted.is_null().to_numpy(zero_copy_only=False))
        return converted.fill_null(0).to_numpy(), bad
    except (pa.ArrowInvalid, OverflowError):
        pass
    # Some values are not times: find them by halving (few conversions for few bad values).
    times = np.zeros(len(values), dtype=np.int64)
    nulls: list[np.ndarray] = []

    def converted(start: int, got: pa.Array) -> None:
        times[start : start + len(got)] = got.fill_null(0).to_numpy()
        nulls.append(start + np.flatnonzero(got.is_null().to_numpy(zero_copy_only=False)))

    bad = np.concatenate([failing_rows(values, lambda v: _convert(v, unit, zone), converted), *nulls])
    return times, np.sort(bad).astype(np.int64)
