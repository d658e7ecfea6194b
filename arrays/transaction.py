"""Atomic changes to keys: everything a transaction writes appears at once, or never.

A :class:`Transaction` reads the latest committed state overlaid with its
own writes (read your writes). Keys are written last-writer-wins; code that
must read-modify-write (an array's shape on append, ``set_if_not_exists``)
calls :meth:`Transaction.lock` first, which takes neostore's commit lock and
so keeps what it reads current until commit. Values larger than neostore's
flush threshold are uploaded before commit, so a transaction's changes need
not fit in memory.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Concatenate, ParamSpec, TypeVar

from windvane import neostore

from . import row_log
from .keys import Entry, LoggedView, Snapshot, encode_key
from .own_writes import OwnWrites

log = logging.getLogger("windvane.arrays")

#: A set of keys (spelled apart: inside the class, ``set`` is Transaction.set).
_Keys = set[str]

P = ParamSpec("P")
R = TypeVar("R")
S = TypeVar("S", bound="Transaction")


def serialised(method: Callable[Concatenate[S, P], R]) -> Callable[Concatenate[S, P], R]:
    """Run ``method`` holding the transaction's lock: zarr and dask call from many threads."""

    def locked(self: S, /, *args: P.args, **kwargs: P.kwargs) -> R:
        with self._mutex:
            return method(self, *args, **kwargs)

    functools.update_wrapper(locked, method)
    return locked


class Transaction(LoggedView):
    """One atomic set of key changes on a neostore Store. Thread-safe.

    Reads see the head and this transaction's own writes, row logs applied
    (:mod:`arrays.row_log`); writes to the arrays of a group whose log holds
    rows fold it first, unless ``raw=True`` (the caller keeps the log).

    Use :func:`transaction` (a context manager) rather than building one.
    ``message`` and ``metadata`` (plain JSON data) are recorded with the
    commit and shown by :func:`arrays.history`.
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
        self._written = OwnWrites()
        self._gathered: dict[str, tuple[set[str], Callable[[set[str]], None]]] = {}  # see gathered
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
            oid, size = self._written.oid_and_size(key)
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
            return self._written.oid_and_size(key)[1]
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
        for key in {k for prefix in prefixes for k in self._written.under(prefix)}:
            oid, size = self._written.oid_and_size(key)
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

    # -- writing ---------------------------------------------------------------

    @serialised
    def set(self, key: str, value: bytes, *, compress: bool = True, raw: bool = False) -> None:
        """Give ``key`` the value ``value``. ``compress=False`` for bytes a codec already compressed."""
        if not raw:
            self.fold_for([key])
        value = bytes(value)
        oid = self._tx.oids_for([encode_key(key)], create=True)[encode_key(key)]
        self._tx.write(oid, None, value, compress=compress, check=False)
        self._wrote(key, oid, len(value))

    @serialised
    def set_many(
        self,
        items: Mapping[str, bytes],
        *,
        compress: bool = True,
        digests: Mapping[str, bytes] | None = None,
        raw: bool = False,
        oids: Mapping[str, bytes] | None = None,
    ) -> None:
        """Like :meth:`set` for many keys, binding their names in one round trip.

        ``digests``: :func:`neostore.value_hash` of values hashed already (in
        the threads that encoded them); it must be exactly that. ``oids``:
        the oids of keys known to be bound, as :meth:`oids` gave them in this
        transaction: their names are not looked up again.
        """
        if not raw:
            self.fold_for(items)
        known = oids or {}
        names = {k: encode_key(k) for k in items if k not in known}
        bound = self._tx.oids_for(list(names.values()), create=True) if names else {}
        digests = digests or {}
        for key, value in items.items():
            value = bytes(value)
            oid = known[key] if key in known else bound[names[key]]
            self._tx.write(oid, None, value, compress=compress, check=False, digest=digests.get(key))
            self._wrote(key, oid, len(value))

    @serialised
    def bind(self, keys: Iterable[str]) -> None:
        """Bind the names of ``keys`` now, in one round trip, for writes to come.

        A bound name whose object is never written is no object to any
        reader: binding ahead changes nothing visible. What thousands of
        stream creations in one transaction would otherwise bind one stream
        at a time (a database commit each, on MariaDB).
        """
        self._tx.oids_for([encode_key(k) for k in keys], create=True)

    @serialised
    def set_if_not_exists(self, key: str, value: bytes, *, compress: bool = True) -> bool:
        """Set ``key`` only if it does not exist; whether it was set. Atomic across processes."""
        self.lock()
        if self.exists(key) or row_log.is_log_key(key):
            return False
        self.set(key, value, compress=compress)
        return True

    @serialised
    def delete(self, key: str) -> None:
        """Remove ``key``; a missing key is no error."""
        self.delete_many([key])

    @serialised
    def delete_many(self, keys: Iterable[str], *, raw: bool = False) -> None:
        """Remove every key of ``keys`` that exists, with one listing per common prefix."""
        keys = list(dict.fromkeys(keys))
        if not keys:
            return
        if not raw:
            self.fold_for(keys)
        existing = (
            {e.key for e in self.raw_list(os.path.commonprefix(keys))}  # noqa: RUF071 - keys, not paths
            if len(keys) > 1
            else set(k for k in keys if self.raw_size(k) is not None)
        )
        doomed = [k for k in keys if k in existing]
        oids = self._tx.oids_for([encode_key(k) for k in doomed])
        for key in doomed:
            oid = oids[encode_key(key)]
            self._tx.write(oid, None, None, check=False)
            self._wrote(key, oid, None)

    @serialised
    def delete_prefix(self, prefix: str) -> None:
        """Remove every key under ``prefix``, row logs with them (a log left behind would apply to a
        new array later created at the same path)."""
        self.delete_many([e.key for e in self.raw_list(prefix)], raw=True)

    def _wrote(self, key: str, oid: bytes, size: int | None) -> None:
        if row_log.is_log_key(key):
            self._log_checked.discard(row_log.group_of(key))
        self._written.record(key, oid, size)

    # -- row logs ----------------------------------------------------------------

    def fold_for(self, keys: Iterable[str]) -> None:
        """Fold the logs with pending rows of the groups whose arrays ``keys`` belong to."""
        groups = row_log.candidate_groups(keys) - self._log_checked
        if not groups:
            return
        self.lock()  # the log read must be the latest
        found = self.raw_get_many([row_log.log_key(g) for g in groups])
        self._log_checked |= groups
        for group in groups:
            raw = found.get(row_log.log_key(group))
            if raw is not None and row_log.Revision.from_bytes(raw, row_log.log_key(group)).rows:
                self.fold(group)

    @serialised
    def fold(self, group: str) -> bool:
        """Move the pending rows of ``group``'s row log into its arrays' chunks; whether it held any."""
        self.lock()
        key = row_log.log_key(group)
        raw = self.raw_get(key)
        if raw is None:
            return False
        revision = row_log.Revision.from_bytes(raw, key)
        if not revision.rows:
            return False
        writes = row_log.fold_writes(group, revision, self.log_chain(key, revision), self.raw_get_many, neostore.ZERO)
        self.set_many(writes, raw=True)
        self._log_checked.add(group)
        return True

    # -- what this transaction wrote (for writers that keep state across transactions) --

    @serialised
    def write_mark(self) -> int:
        """A mark of the writes so far; :meth:`written_since` tells which keys were written after it."""
        return self._written.mark

    @serialised
    def written_since(self, mark: int, keys: Iterable[str]) -> bool:
        """Whether any of ``keys`` was written (set or deleted) in this transaction after ``mark`` (0: ever)."""
        return self._written.since(mark, keys)

    @serialised
    def oids(self, keys: Iterable[str], *, written_only: bool = False) -> dict[str, bytes]:
        """The oid of each of ``keys`` that has one (written here, or bound before); unbound keys are left out.

        ``written_only``: only keys this transaction wrote (no database read).
        The oid of a key first bound by this transaction is permanent only if it commits.
        """
        keys = list(keys)
        found = {k: self._written.oid_and_size(k)[0] for k in keys if k in self._written}
        rest = [k for k in keys if k not in found]
        if rest and not written_only:
            oids = self._tx.oids_for([encode_key(k) for k in rest])
            found.update((k, oids[encode_key(k)]) for k in rest if encode_key(k) in oids)
        return found

    @serialised
    def written_oids(self) -> frozenset[bytes]:
        """The oids of every object this transaction writes: after commit, exactly what its tid changed."""
        if self._committed_oids is not None:
            return self._committed_oids
        oids = self._written.oids()
        if self.tid is not None:
            self._committed_oids = oids
        return oids

    # -- changes gathered until the commit ------------------------------------------

    @serialised
    def gathered(self, key: str, write: Callable[[_Keys], None]) -> _Keys:
        """A set kept under ``key`` until the commit, when ``write(the set)`` runs first, once.

        For a document that many changes of one transaction add to (the
        stream registry, when a commit creates thousands of streams): each
        change adds to the set, and the document is written once, not
        rewritten whole at every change. The first call's ``write`` is kept.
        """
        found = self._gathered.get(key)
        if found is None:
            found = self._gathered[key] = (set(), write)
        return found[0]

    @serialised
    def gathering(self, key: str) -> frozenset[str]:
        """What :meth:`gathered` holds under ``key`` so far (empty if nothing)."""
        found = self._gathered.get(key)
        return frozenset() if found is None else frozenset(found[0])

    @serialised
    def gathers(self, key: str) -> bool:
        """Whether :meth:`gathered` holds anything under ``key`` (without copying it, unlike :meth:`gathering`)."""
        found = self._gathered.get(key)
        return found is not None and bool(found[0])

    # -- callbacks ---------------------------------------------------------------

    @serialised
    def on_commit(self, callback: Callable[[bytes], None]) -> None:
        """Call ``callback(tid)`` once this transaction has committed (never if it aborts).

        Callbacks run in registration order, after the commit is durable and
        visible; one that raises is logged and does not undo or fail the commit.
        """
        self._on_commit.append(callback)

    @serialised
    def on_abort(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` once if this transaction aborts, or its commit fails."""
        self._on_abort.append(callback)

    def _run_callbacks(self, callbacks: list[Callable[..., None]], *args: Any) -> None:
        self._on_commit, self._on_abort = [], []  # each runs at most once, and only one kind does
        for callback in callbacks:
            try:
                callback(*args)
            except Exception:  # the transaction has ended either way: say so, go on
                log.exception("a transaction callback failed")

    # -- ending ----------------------------------------------------------------

    @serialised
    def commit(self) -> bytes:
        """Make every change visible at once; returns the commit's tid.

        Then runs the :meth:`on_commit` callbacks; if the commit fails, the
        :meth:`on_abort` ones (the error is raised either way).
        """
        try:
            gathered, self._gathered = self._gathered, {}
            for items, write in gathered.values():
                write(items)
            self.tid = self._tx.commit()  # one phase: there is no other resource to vote
        except BaseException:
            self._run_callbacks(self._on_abort)
            raise
        self._run_callbacks(self._on_commit, self.tid)
        return self.tid

    @serialised
    def abort(self) -> None:
        """Forget every change and run the :meth:`on_abort` callbacks. Safe to call more than once."""
        try:
            self._tx.abort()
        finally:
            self._run_callbacks(self._on_abort)


@contextmanager
def transaction(
    url_or_store: str | neostore.Store,
    *,
    message: str = "",
    metadata: Mapping[str, Any] | None = None,
    user: str = "",
) -> Iterator[Transaction]:
    """``with transaction(url, message=...) as tx:`` commits on exit, aborts on an exception.

    A reader opened before the commit sees none of the changes; one opened
    after sees all of them.
    """
    store = neostore.open(url_or_store) if isinstance(url_or_store, str) else url_or_store
    owned = store is not url_or_store
    try:
        tx = Transaction(store, message=message, metadata=metadata, user=user)
        try:
            yield tx
        except BaseException:
            tx.abort()
            raise
        if tx.state == "open":
            tx.commit()
    finally:
        if owned:
            store.close()
