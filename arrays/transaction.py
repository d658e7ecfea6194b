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

import logging
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from windvane import neostore

from . import row_log
from .keys import encode_key
from .transaction_reads import TransactionReads, serialised

log = logging.getLogger("windvane.arrays")

#: A set of keys (spelled apart: inside the class, ``set`` is Transaction.set).
_Keys = set[str]


class Transaction(TransactionReads):
    """One atomic set of key changes on a neostore Store. Thread-safe.

    Reads see the head and this transaction's own writes, row logs applied
    (:mod:`arrays.row_log`); writes to the arrays of a group whose log holds
    rows fold it first, unless ``raw=True`` (the caller keeps the log).

    Use :func:`transaction` (a context manager) rather than building one.
    ``message`` and ``metadata`` (plain JSON data) are recorded with the
    commit and shown by :func:`arrays.history`.
    """

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
    ) -> None:
        """Like :meth:`set` for many keys, binding their names in one round trip.

        ``digests``: :func:`neostore.value_hash` of values hashed already (in
        the threads that encoded them); it must be exactly that.
        """
        if not raw:
            self.fold_for(items)
        names = [encode_key(k) for k in items]
        oids = self._tx.oids_for(names, create=True)
        digests = digests or {}
        for (key, value), name in zip(items.items(), names):
            value = bytes(value)
            oid = oids[name]
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
        self._writes += 1
        if self._by_dir is not None and key not in self._written:
            self._index(key)
        self._written[key] = (oid, size)
        self._write_seq[key] = self._writes

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
        return self._writes

    @serialised
    def written_since(self, mark: int, keys: Iterable[str]) -> bool:
        """Whether any of ``keys`` was written (set or deleted) in this transaction after ``mark`` (0: ever)."""
        seq = self._write_seq
        for key in keys:  # a loop, not any() over a generator: thousands of writers ask this per commit
            if seq.get(key, 0) > mark:
                return True
        return False

    @serialised
    def oids(self, keys: Iterable[str], *, written_only: bool = False) -> dict[str, bytes]:
        """The oid of each of ``keys`` that has one (written here, or bound before); unbound keys are left out.

        ``written_only``: only keys this transaction wrote (no database read).
        The oid of a key first bound by this transaction is permanent only if it commits.
        """
        keys = list(keys)
        found = {k: self._written[k][0] for k in keys if k in self._written}
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
        oids = frozenset(oid for oid, _ in self._written.values())
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
