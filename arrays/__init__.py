"""Chunked ndarrays on neostore: BigArray, a zarr v3 store, transactions and time travel.

>>> a = arrays.create(url, "stream/temperature", (0, 8), "float32", dims=("time", "channel"))
>>> a.append(block)                      # one atomic commit
>>> a[-10:].mean(axis=0)                 # loads only the last chunk
>>> old = arrays.open(url, "stream/temperature", at=arrays.history(url, "stream/temperature")[0].tid)
"""

from __future__ import annotations

from .bigarray import BigArray, create, open
from .cache import ChunkCache
from .catalog import array_names
from .errors import (
    ArrayError,
    ArrayExistsError,
    ArrayNotFoundError,
    ReadOnlyArrayError,
    SnapshotError,
    UnsupportedArrayError,
)
from .history import Commit, history
from .keys import Entry, Snapshot
from .transaction import Transaction, transaction
from .zarr_store import ZarrStore

__all__ = [
    "ArrayError",
    "ArrayExistsError",
    "ArrayNotFoundError",
    "BigArray",
    "ChunkCache",
    "Commit",
    "Entry",
    "ReadOnlyArrayError",
    "Snapshot",
    "SnapshotError",
    "Transaction",
    "UnsupportedArrayError",
    "ZarrStore",
    "array_names",
    "create",
    "history",
    "open",
    "transaction",
]
