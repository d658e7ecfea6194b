"""Chunked ndarrays on neostore: BigArray, a zarr v3 store, transactions and time travel.

>>> a = arrays.create(url, "stream/temperature", (0, 8), "float32", dims=("time", "channel"))
>>> a.append(block)                      # one atomic commit
>>> a[-10:].mean(axis=0)                 # loads only the last chunk
>>> old = arrays.open(url, "stream/temperature", at=arrays.history(url, "stream/temperature")[0].tid)
>>> s = arrays.create_stream(url, "turbine1", [arrays.Column("speed", "float32"), arrays.Column("msg", "str")])
>>> s.append({"time": t_ns, "speed": v, "msg": lines})   # every column, one commit
>>> w = arrays.StreamWriter(store, "turbine1")           # keeps state across transactions
>>> with arrays.transaction(store) as tx: w.append(tx, {"time": t_ns, "speed": v, "msg": lines})
"""

from __future__ import annotations

from .bigarray import BigArray, create, open
from .cache import ChunkCache
from .catalog import array_names
from .changes import ChangeLog
from .downsample import ChannelError, NotPlottable, PlotSeries, plot_series
from .errors import (
    ArrayError,
    ArrayExistsError,
    ArrayNotFoundError,
    ColumnError,
    InvalidTagError,
    ReadOnlyArrayError,
    SnapshotError,
    StreamError,
    StreamExistsError,
    StreamNotFoundError,
    TimeError,
    UnsupportedArrayError,
)
from .history import Commit, history
from .keys import Entry, Snapshot
from .metadata import dtype_name
from .stream import Stream
from .stream_registry import create_stream, create_streams, list_streams, open_stream, stream_keys
from .stream_schema import DEFAULT_CHUNK_BYTES, VARIABLE_CHUNK_ROWS, Column, chunk_rows_for, column_key, stream_path
from .stream_writer import Staged, StreamWriter
from .transaction import Transaction, transaction
from .vibration_views import RmsSeries, Spectrum, ViewError, rms_series, spectrum
from .vlen_rows import VLenRows
from .zarr_store import ZarrStore

__all__ = [
    "DEFAULT_CHUNK_BYTES",
    "VARIABLE_CHUNK_ROWS",
    "ArrayError",
    "ArrayExistsError",
    "ArrayNotFoundError",
    "BigArray",
    "ChangeLog",
    "ChannelError",
    "ChunkCache",
    "Column",
    "ColumnError",
    "Commit",
    "Entry",
    "InvalidTagError",
    "NotPlottable",
    "PlotSeries",
    "ReadOnlyArrayError",
    "RmsSeries",
    "Snapshot",
    "SnapshotError",
    "Spectrum",
    "Staged",
    "Stream",
    "StreamError",
    "StreamExistsError",
    "StreamNotFoundError",
    "StreamWriter",
    "TimeError",
    "Transaction",
    "UnsupportedArrayError",
    "VLenRows",
    "ViewError",
    "ZarrStore",
    "array_names",
    "chunk_rows_for",
    "column_key",
    "create",
    "create_stream",
    "create_streams",
    "dtype_name",
    "history",
    "list_streams",
    "open",
    "open_stream",
    "plot_series",
    "rms_series",
    "spectrum",
    "stream_keys",
    "stream_path",
    "transaction",
]
