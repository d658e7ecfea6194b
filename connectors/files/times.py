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

With a ``time_format`` (``windvane import --time-format``), text is read
by that strptime layout instead (Arrow's ``strptime``, the one
``pyarrow.csv``'s ``timestamp_parsers`` use: ``%m/%d/%Y %H:%M``; ``%z``
reads an offset, text without one is a wall-clock time in ``zone``).

A value that is none of these (or missing) makes its row rejected, with a
reason naming the value, by the reader.

A file without a time column takes its rows' times from elsewhere
(``--time-from``, :func:`made_times`): ``arrival``, the wall clock when the
row's block is read; ``row``, ``--start`` plus the row's number in the file
(from 0, rejected rows counted) times ``--row-interval``.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from windvane.connectors.files_config import FilesConfig
from windvane.ingest.parts import failing_rows
from windvane.ingest.times import NS_PER_UNIT as UNITS
from windvane.ingest.times import epoch_column_ns, iso_column_ns, wall_to_utc
from windvane.ingest.times import unit_for as magnitude_unit

from . import FileFormatError, ReaderOptions

#: Column names taken as the time column, in this order, when none is named.
TIME_NAMES = ("time", "timestamp", "ts", "datetime", "date")
_NUMBER = r"^\s*-?\d+(\.\d*)?([eE][+-]?\d+)?\s*$"


def find_time_column(
    names: Sequence[str], wanted: str | None, where: str, time_from: str = FilesConfig.time_from
) -> str | None:
    """The time column among ``names``: ``wanted``, or the first of :data:`TIME_NAMES` present; None if the times
    come from elsewhere (``time_from`` ``arrival`` or ``row``: then no column may be named ``time``)."""
    if time_from != "column":
        if "time" in names:
            raise FileFormatError(
                f"{where}: --time-from {time_from} makes each row's time, and the file has a column 'time' "
                "already: keep it under another name with --rename time=NAME, or read it with --time-from column"
            )
        return None
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
        f"{list(names)}: name it with --time-column, or give rows the time they are read (--time-from arrival) "
        "or one by their row number (--time-from row --start TIME)"
    )


#: The directives of Arrow's strptime (C's, as its vendored musl strptime reads them).
_DIRECTIVES = frozenset("aAbBcCdDeFgGhHIjmMnprRStTUVwWxXyYzZ%")


def check_layout(layout: str) -> str:
    """``layout`` if it is a strptime layout with a directive, all of them Arrow's; FileFormatError otherwise."""
    found = re.findall(r"%([EO]?.)", layout)
    unknown = [d for d in found if d[-1] not in _DIRECTIVES]
    if not found or unknown:
        what = f"unknown directive %{unknown[0]}" if unknown else "no directive (%Y, %m, %d, %H, %M, %S, %z, ...)"
        raise FileFormatError(f"--time-format {layout!r}: {what}")
    return layout


def made_times(options: ReaderOptions, rows: np.ndarray) -> np.ndarray:
    """The times of the rows numbered ``rows`` (from 0 in the file) of a file without a time column, by
    ``options.time_from``: ``arrival``, now; ``row``, ``options.start + row * options.row_interval``."""
    if options.time_from == "arrival":
        return np.full(len(rows), time.time_ns(), dtype=np.int64)
    if options.start is None:
        raise FileFormatError("--time-from row needs --start: the time of row 0")
    return options.start + rows.astype(np.int64) * options.row_interval


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


def _convert(values: pa.Array, unit: str | None, zone: str, layout: str | None = None) -> pa.Array:
    type_ = values.type
    if pa.types.is_dictionary(type_):
        values, type_ = values.dictionary_decode(), type_.value_type
    if layout is not None and _is_text(type_):
        values = pc.strptime(pc.utf8_trim_whitespace(values), format=layout, unit="ns", error_is_null=True)
        type_ = values.type
    if pa.types.is_timestamp(type_) or pa.types.is_date(type_):
        zoned = pa.types.is_timestamp(type_) and type_.tz is not None
        ns = pc.cast(pc.cast(values, pa.timestamp("ns", tz=type_.tz if zoned else None)), pa.int64())
        if zoned or zone == "UTC":
            return ns
        return pa.array(wall_to_utc(ns.fill_null(0).to_numpy(), zone), mask=ns.is_null().to_numpy(zero_copy_only=False))
    if pa.types.is_integer(type_) or pa.types.is_floating(type_):
        return epoch_column_ns(values, unit_for(values, unit))
    if _is_text(type_):
        zoned = _zoned_iso(values)
        if zoned is not None:
            return zoned
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


def _zoned_iso(values: pa.Array) -> pa.Array | None:
    """Text that is all ISO 8601 times with a zone (or null), what most files hold, as int64 ns: Arrow casts it
    at once; None if any value is anything else (then each is read as what it is)."""
    try:
        ns: pa.Array = pc.cast(values, pa.timestamp("ns", tz="UTC")).cast(pa.int64())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    return ns


def _is_text(type_: pa.DataType) -> bool:
    return bool(pa.types.is_string(type_) or pa.types.is_large_string(type_) or pa.types.is_string_view(type_))


def time_ns(
    values: pa.Array | pa.ChunkedArray, unit: str | None = None, zone: str = "UTC", layout: str | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """``(times, bad)``: int64 ns since the epoch per value, and the indices of values that are not times.

    ``unit``: the epoch unit of numbers (None: by magnitude); ``zone``: the
    zone of text written without one; ``layout``: the strptime format of
    text (None: ISO 8601 or epoch numbers). Rows at
    ``bad`` (unparseable or missing) hold 0 in ``times``.
    """
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks() if values.num_chunks != 1 else values.chunk(0)
    try:
        converted = _convert(values, unit, zone, layout)
        if not converted.null_count:
            return converted.to_numpy(), np.empty(0, dtype=np.int64)
        bad = np.flatnonzero(converted.is_null().to_numpy(zero_copy_only=False))
        return converted.fill_null(0).to_numpy(), bad
    except (pa.ArrowInvalid, OverflowError):
        pass
    # Some values are not times: find them by halving (few conversions for few bad values).
    times = np.zeros(len(values), dtype=np.int64)
    nulls: list[np.ndarray] = []

    def keep(start: int, got: pa.Array) -> None:
        times[start : start + len(got)] = got.fill_null(0).to_numpy()
        nulls.append(start + np.flatnonzero(got.is_null().to_numpy(zero_copy_only=False)))

    bad = np.concatenate([failing_rows(values, lambda v: _convert(v, unit, zone, layout), keep), *nulls])
    return times, np.sort(bad).astype(np.int64)
