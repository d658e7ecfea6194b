"""The reading half of an arrays Transaction: the head overlaid with its own writes, under its mutex."""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Concatenate, ParamSpec, TypeVar

from windvane import neostore

from . import row_log
from .keys import Entry, LoggedView, Snapshot, encode_key

P = ParamSpec("P")
R = TypeVar("R")
S = TypeVar("S", bound="TransactionReads")


def serialised(method: Callable[Concatenate[S, P], R]) -> Callable[Concatenate[S, P], R]:
    """Run ``method`` holding the transaction's lock: zarr and dask call from many threads."""

    def locked(self: S, /, *args: P.args, **kwargs: P.kwargs) -> R:
        with self._mutex:
            return method(self, *args, **kwargs)

    functools.update_wrapper(locked, method)
    return locked


class TransactionReads(LoggedView):
    """What a :class:`~arrays.Transaction` reads: the head as of its lock, and its own writes over it.

    Holds the transaction's state; :class:`~arrays.Transaction` adds the writes and the end.
    """

    def __init__(
        self,
        store: neostore.Store,
        *,
        message: str = "",
        metadata: Mapping[str, Any] | None = None,
        user: str = "",
    ):
        self.store = store
        self.message = message
        self.metadata = dict(metadata or {})
        self._head = Snapshot(store, None)
        ext = json.dumps(self.metadata, sort_keys=True).encode() if self.metadata else b""
        self._tx = store.begin(user.encode(), message.encode(), ext)
        self._written: dict[str, tuple[bytes, int | None]] = {}  # key -> (oid, size; None = deleted)
        # directory ("a/b/") -> the written keys under it, made when first listed: a transaction that
        # creates thousands of streams checks each path without scanning every key written before.
        self._by_dir: dict[str, set[str]] | None = None
        self._gathered: dict[str, tuple[set[str], Callable[[set[str]], None]]] = {}  # see gathered
        # key -> the write count when it was last written: lets a StreamWriter
        # tell whether anything but itself wrote its keys in this transaction.
        self._write_seq: dict[str, int] = {}
        self._writes = 0
        self._on_commit: list[Callable[[bytes], None]] = []
        self._on_abort: list[Callable[[], None]] = []
        self._locked = False
        self._log_checked: set[str] = set()  # groups whose log holds no rows in this transaction
        self._mutex = threading.RLock()
        self.tid: bytes | None = None
        self._committed_oids: frozenset[bytes] | None = None  # written_oids once committed: asked by every writer
        self._ahead: dict[str, bytes | None] = {}  # key -> its head value (None: absent), see read_ahead

    # -- reading (head + own writes) -----------------------------------------

    @property
    def state(self) -> str:
        """``open``, ``finished`` (committed) or ``aborted``."""
        return self._tx.state

    @serialised
    def raw_get(self, key: str) -> bytes | None:
        """The stored value of ``key`` (row logs not applied): this transaction's write, else the head's; None if absent."""
        if key in self._written:
            oid, size = self._written[key]
            return None if size is None else self._tx.pending_value(oid)[1]
        if key in self._ahead:
            return self._ahead[key]
        return self._head.raw_get(key)

    @serialised
    def raw_get_many(self, keys: Iterable[str]) -> dict[str, bytes]:
        """Like :meth:`raw_get` for many keys, in one round trip for those not written here; absent keys left out."""
        keys = list(keys)
        own = [k for k in keys if k in self._written or k in self._ahead]
        found = self._head.raw_get_many([k for k in keys if k not in self._written and k not in self._ahead])
        for key in own:
            value = self.raw_get(key)
            if value is not None:
                found[key] = value
        return found

    @serialised
    def read_ahead(self, keys: Iterable[str]) -> None:
        """Take the commit lock and read ``keys`` now, in one round trip: later reads of them in this
        transaction (values, sizes, absence) are answered from memory.

        Under the lock the head cannot change, so what was read stays what
        the head holds; this transaction's own writes still win. What
        readying thousands of streams at once needs instead of a few reads
        per stream.
        """
        self.lock()
        wanted = [k for k in dict.fromkeys(keys) if k not in self._written and k not in self._ahead]
        found = self._head.raw_get_many(wanted)
        self._ahead.update((key, found.get(key)) for key in wanted)

    @serialised
    def raw_get_range(self, key: str, start: int, stop: int | None = None) -> bytes | None:
        """Bytes ``[start:stop]`` of ``key``'s stored value (None if absent); the database slices uncompressed values."""
        if key in self._written:
            value = self.raw_get(key)
            return None if value is None else value[start:stop]
        return self._head.raw_get_range(key, start, stop)

    @serialised
    def raw_size(self, key: str) -> int | None:
        """The size of ``key``'s stored value, None if absent; values are not loaded."""
        if key in self._written:
            return self._written[key][1]
        if key in self._ahead:
            value = self._ahead[key]
            return None if value is None else len(value)
        return self._head.raw_size(key)

    @serialised
    def log_chain(self, key: str, current: row_log.Revision) -> list[row_log.Revision]:
        """The committed revisions of row log ``key`` whose rows are pending in ``current``, oldest first."""
        # Earlier revisions are committed ones (a transaction writes a key once).
        return self._head.log_chain(key, current)

    @serialised
    def raw_list_under(self, prefixes: Iterable[str]) -> list[Entry]:
        """Keys under ``prefixes`` as stored with this transaction's writes, sorted (serials of own writes
        are zero)."""
        prefixes = list(dict.fromkeys(prefixes))
        entries = {e.key: e for e in self._head.raw_list_under(prefixes)}
        for key in {k for prefix in prefixes for k in self._written_under(prefix)}:
            oid, size = self._written[key]
            if size is None:
                entries.pop(key, None)
            else:
                entries[key] = Entry(key, oid, neostore.ZERO, size)
        return [entries[k] for k in sorted(entries, key=encode_key)]

    @property
    def locked(self) -> bool:
        """Whether this transaction holds the commit lock (from :meth:`lock` to its end)."""
        return self._locked

    @serialised
    def lock(self) -> None:
        """Hold the commit lock from now to commit/abort: reads stay current."""
        if not self._locked:
            self._tx.lock()
            self._locked = True

    @serialised
    def head(self) -> bytes:
        """The newest commit when this transaction took the commit lock (taking it now if not yet).

        Under the lock nothing else commits, so this is the latest state
        without asking the database again.
        """
        self.lock()
        return self._tx.head

    def _written_under(self, prefix: str) -> Iterable[str]:
        """The keys this transaction wrote (or deleted) under ``prefix``."""
        if not prefix.endswith("/"):
            return [key for key in self._written if key.startswith(prefix)]
        if self._by_dir is None:
            self._by_dir = {}
            for key in self._written:
                self._index(key)
        return self._by_dir.get(prefix, ())

    def _index(self, key: str) -> None:
        assert self._by_dir is not None
        slash = key.find("/")
        while slash != -1:
            self._by_dir.setdefault(key[: slash + 1], set()).add(key)
            slash = key.find("/", slash + 1)
