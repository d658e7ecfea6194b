"""A stream's rows as pyarrow, pandas and xarray tables (:meth:`arrays.Stream.to_arrow` and the others).

Each takes the rows to read as ``start``/``stop``: row numbers (``[start:stop]``,
as a slice) or moments, datetimes, numpy datetime64 or ISO 8601 text (no
zone: UTC), for the rows whose time is in ``[start, stop)``. Time is in
arrival order, not sorted: a time range reads the chunks whose time range
(:meth:`~arrays.Stream.time_ranges`, kept without reading them) meets it,
and keeps their rows in it, in stream order; rows without a time are in
no range.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

import numpy as np

from . import time_index
from .bigarray import BigArray
from .stream_schema import TIME, missing_value
from .times import is_moment, moment_ns


class Exported(Protocol):
    """What an export reads of a stream (:class:`~arrays.Stream`)."""

    @property
    def tag(self) -> str: ...

    @property
    def columns(self) -> list[str]: ...

    @property
    def attrs(self) -> dict[str, Any]: ...

    def __getitem__(self, name: str) -> BigArray: ...

    def name_of(self, key: str) -> str: ...

    def time_ranges(self) -> list[time_index.Range]: ...


#: Row numbers (``int``) or moments (datetime, numpy datetime64, ISO 8601 text); None: from the start, to the end.
Bound = int | datetime | np.datetime64 | str | None


def _window(start: Bound, stop: Bound) -> tuple[int | None, int | None] | None:
    """``[start, stop)`` in ns if either is a moment (None: they are row numbers); TypeError if they mix."""
    if not (is_moment(start) or is_moment(stop)):
        return None
    if not all(value is None or is_moment(value) for value in (start, stop)):
        raise TypeError(
            f"start and stop are both row numbers or both times (datetime, ISO 8601 text), not "
            f"{type(start).__name__} and {type(stop).__name__}"
        )
    return (None if start is None else moment_ns(start, "start"), None if stop is None else moment_ns(stop, "stop"))


def _columns_data(
    stream: Exported, start: Bound, stop: Bound, columns: Sequence[str] | None = None
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    wanted = stream.columns if columns is None else [name for name in stream.columns if name in columns]
    window = _window(start, stop)
    if window is None:
        time = stream[TIME][start:stop]
        return time, {name: stream[name][start:stop] for name in wanted}
    time_array = stream[TIME]
    spans = time_index.overlapping(stream.time_ranges(), time_array.chunks[0], len(time_array), *window)
    picked: list[tuple[int, int, np.ndarray]] = []
    for first, last in spans:
        keep = time_index.in_window(time_array[first:last], *window)
        if keep.any():
            picked.append((first, last, keep))
    names = [TIME, *wanted]
    data = {name: [stream[name][first:last][keep] for first, last, keep in picked] for name in names}
    out = {name: np.concatenate(parts) if parts else stream[name][0:0] for name, parts in data.items()}
    return out.pop(TIME), out


def to_arrow(stream: Exported, start: Bound = None, stop: Bound = None, columns: Sequence[str] | None = None) -> Any:
    """A pyarrow Table of rows ``[start:stop]`` (``time`` and ``columns``, by key, in stream order; None: all).

    ``time`` is ``timestamp[ns, tz=UTC]``; strings ``large_string``,
    bytes ``large_binary``; a column with inner shape ``(a, b)`` is a
    ``fixed_size_list<fixed_size_list<item, b>, a>``. Field metadata
    holds the column's zarr attributes as JSON (key ``b"attrs"``).
    Columns are named by their names (:meth:`~arrays.Stream.name_of`); an integer
    column's :data:`MISSING_ATTR` value is null.
    """
    import pyarrow as pa

    time, read = _columns_data(stream, start, stop, columns)
    fields = [pa.field(TIME, pa.timestamp("ns", tz="UTC"))]
    values = [pa.array(time, type=pa.timestamp("ns", tz="UTC"))]
    for name, data in read.items():
        attrs = stream[name].attrs
        flat = data.reshape(-1)
        if data.dtype.kind == "T":
            arr = pa.array(flat, type=pa.large_string())
        elif data.dtype == object:
            arr = pa.array(flat, type=pa.large_binary())
        else:
            arr = pa.array(flat, mask=_missing(flat, attrs))
        for size in reversed(data.shape[1:]):
            arr = pa.FixedSizeListArray.from_arrays(arr, size)
        fields.append(
            pa.field(stream.name_of(name), arr.type, metadata={b"attrs": json.dumps(attrs)} if attrs else None)
        )
        values.append(arr)
    return pa.Table.from_arrays(values, schema=pa.schema(fields, metadata={b"stream": stream.tag}))


def to_pandas(stream: Exported, start: Bound = None, stop: Bound = None) -> Any:
    """A pandas DataFrame of rows ``[start:stop]``, indexed by ``time`` (``datetime64[ns, UTC]``).

    One column per column of the stream, strings and bytes as object
    columns of ``str`` / ``bytes`` values; a column with an inner shape is
    split into one pandas column per element, named ``name[i]`` (``name[i,j]``).
    Columns are named by their names (:meth:`~arrays.Stream.name_of`); an integer column
    with a :data:`MISSING_ATTR` value is a nullable ``Int64`` (...) column,
    ``<NA>`` where it holds that value.
    """
    import pandas as pd

    time, columns = _columns_data(stream, start, stop)
    index = pd.DatetimeIndex(time.view("datetime64[ns]"), name=TIME).tz_localize("UTC")
    frame: dict[str, Any] = {}
    for key, data in columns.items():
        name = stream.name_of(key)
        if data.dtype.kind == "T":
            data = data.astype(object)
        mask = _missing(data, stream[key].attrs)
        if mask is not None and data.ndim == 1:
            frame[name] = pd.Series(pd.arrays.IntegerArray(data, mask), index=index)
            continue
        if data.ndim == 1:
            frame[name] = pd.Series(data, index=index, dtype=object if data.dtype == object else None)
            continue
        for pos in np.ndindex(*data.shape[1:]):
            frame[f"{name}[{','.join(map(str, pos))}]"] = data[(slice(None), *pos)]
    return pd.DataFrame(frame, index=index)


def to_xarray(stream: Exported, start: Bound = None, stop: Bound = None) -> Any:
    """An xarray Dataset of rows ``[start:stop]``: coordinate ``time`` (datetime64[ns]), one variable per column.

    Variables keep their arrays' dims and attributes; the Dataset's
    attributes are the stream's user attributes. An integer column with a
    :data:`MISSING_ATTR` value is decoded as xarray decodes a CF
    ``_FillValue``: float64, NaN where it holds that value (so ``mean()``
    skips them), its encoding ``{"_FillValue": <value>, "dtype": <int
    dtype>}`` so that ``to_netcdf``/``to_zarr`` store the integers again.
    """
    import xarray as xr

    time, columns = _columns_data(stream, start, stop)
    variables = {stream.name_of(key): _variable(xr, stream[key], data) for key, data in columns.items()}
    coords = {TIME: xr.Variable((TIME,), time.view("datetime64[ns]"))}
    return xr.Dataset(variables, coords=coords, attrs=stream.attrs)


def _variable(xr: Any, array: Any, data: np.ndarray) -> Any:
    """The xarray Variable of a column's rows ``data`` (integers with a missing value masked, as CF does)."""
    attrs = array.attrs
    mask = _missing(data, attrs)
    if mask is None:
        return xr.Variable(array.dims or (TIME,), data, attrs=attrs)
    decoded = data.astype(np.float64)
    decoded[mask] = np.nan
    encoding = {"_FillValue": missing_value(data.dtype, attrs), "dtype": data.dtype}
    return xr.Variable(array.dims or (TIME,), decoded, attrs=attrs, encoding=encoding)


def _missing(data: np.ndarray, attrs: Mapping[str, Any]) -> np.ndarray | None:
    """Where integer column values ``data`` hold the column's :data:`MISSING_ATTR` value (None: it has none)."""
    missing = missing_value(data.dtype, attrs)
    if missing is None:
        return None
    where: np.ndarray = data == missing
    return where
