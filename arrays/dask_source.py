"""What a dask graph of a BigArray holds: the array by store URL, so that other processes read the store themselves.

:meth:`BigArray.to_dask` wraps the array in a :class:`DaskSource`. In the
process that made it, a source reads through the array (its snapshot, its
chunk cache). Pickled - as dask.distributed does to send a graph to its
scheduler and workers, or dask's process scheduler - it carries only the
store's URL (a SQLite path made absolute), the array's name, its
``zarr.json``, its snapshot bound and its cache budget: a few hundred
bytes, never chunk data. Unpickled, it opens nothing until its first read;
then it opens the store, read-only, once per process and URL
(:func:`shared_store`, shared by every source read there and closed at
exit), and reads the same snapshot the original saw, whatever was
committed since. SQLite stores are in WAL mode, so any number of processes
read one file at once.

A view inside a transaction cannot travel: its data lives in that
transaction, in that process (TypeError when pickled).
"""

from __future__ import annotations

import atexit
import os
import threading
from collections.abc import Callable
from typing import Any, Protocol
from urllib.parse import urlsplit

import numpy as np

from windvane import neostore

from .errors import ArrayError

#: What a source carries across processes: (store URL, array name, zarr.json, snapshot bound, cache budget).
SourceState = tuple[str, str, bytes, bytes, int]


class Readable(Protocol):
    """What a source reads through: basic indexing into numpy."""

    def __getitem__(self, key: Any) -> np.ndarray: ...


#: Opens the array a state names, in the process that reads it (a module-level function: pickled by name).
Opener = Callable[[SourceState], Readable]

_stores: dict[tuple[int, str], neostore.Store] = {}
_stores_lock = threading.Lock()


def portable_url(store: neostore.Store) -> str:
    """``store``'s URL as any process on this machine opens it, whatever its working directory."""
    url = store.url
    if url.scheme != "sqlite":
        return url.text
    query = urlsplit(url.text).query
    return f"sqlite:///{url.path}" + (f"?{query}" if query else "")  # url.path is absolute: sqlite:////abs


def shared_store(url: str) -> neostore.Store:
    """The read-only Store of ``url`` that this process shares among unpickled sources (opened on first use).

    Keyed by process id too: a forked child opens its own instead of using
    the parent's connections.
    """
    key = (os.getpid(), url)
    with _stores_lock:
        store = _stores.get(key)
        if store is None:
            store = _stores[key] = neostore.open(url, read_only=True)
        return store


@atexit.register
def close_shared_stores() -> None:
    """Close the stores :func:`shared_store` opened in this process."""
    with _stores_lock:
        mine = [key for key in _stores if key[0] == os.getpid()]
        stores = [_stores.pop(key) for key in mine]
    for store in stores:
        store.close()


class DaskSource:
    """An array-like over one BigArray snapshot for ``dask.array.from_array``: ``shape``, ``dtype``, ``ndim``, ``[key]``.

    ``array``: array ``name`` to read in this process (None once unpickled); ``state``:
    the snapshot to open elsewhere with ``opener`` (None inside a
    transaction, which cannot travel).
    """

    def __init__(
        self,
        array: Readable | None,
        name: str,
        state: SourceState | None,
        shape: tuple[int, ...],
        dtype: Any,
        opener: Opener,
    ):
        self._array = array
        self._state = state
        self._opener = opener
        self._lock = threading.Lock()
        self._name = name
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        self.ndim = len(self.shape)

    def _opened(self) -> Readable:
        with self._lock:
            if self._array is None:
                if self._state is None:
                    raise ArrayError("a DaskSource holds its array or the snapshot to open it by")
                self._array = self._opener(self._state)
            return self._array

    def __getitem__(self, key: Any) -> np.ndarray:
        array = self._array if self._array is not None else self._opened()
        return array[key]

    def __reduce__(self) -> tuple[Any, ...]:
        if self._state is None:
            raise TypeError(
                f"the dask array of {self._name!r} reads a transaction, which lives in this process: "
                "commit it and open the array again (arrays.open(url, name)) to compute elsewhere"
            )
        return (DaskSource, (None, self._name, self._state, self.shape, self.dtype, self._opener))
