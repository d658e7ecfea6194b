"""A zarr v3 store over neostore: zarr keys are named objects, with history.

:class:`ZarrStore` is a ``zarr.abc.store.Store``: zarr, xarray and dask read
and write through it like any other store, and in exchange get neostore's
guarantees. Chunk bytes are deduplicated by content; ranged reads are sliced
by the database; listings are range scans of the name index; every change
is durable and visible when its coroutine returns, yet concurrent changes
share one commit (:mod:`arrays.group_commit`). ``at=`` opens a read-only
snapshot of the past (time travel), and :meth:`ZarrStore.for_transaction`
binds a store to an :class:`arrays.Transaction`, whose commit or abort then
covers what zarr wrote.
"""

from __future__ import annotations

import asyncio
import os
import threading
import weakref
from collections.abc import AsyncIterator, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any, TypeVar

from zarr.abc.store import (
    ByteRequest,
    OffsetByteRequest,
    RangeByteRequest,
    Store,
    SuffixByteRequest,
)
from zarr.core.buffer import Buffer, BufferPrototype, default_buffer_prototype

from windvane import neostore

from .group_commit import Change, GroupCommit, Kind, apply_change
from .keys import Snapshot, encode_key
from .timetravel import At, parse_at, snapshot_bound
from .transaction import Transaction

__all__ = ["ZarrStore"]

T = TypeVar("T")

# Threads per URL for database work: zarr runs up to ``async.concurrency``
# (default 10) requests at once; a bounded pool also bounds the reader
# connections neostore opens (one per thread).
_DB_THREADS = 8

_MAX_KEY = 1024  # neostore's name limit


# -- the neostore Store shared by the ZarrStores of one URL -------------------


class _Shared:
    """One process's neostore Store on a URL, its database threads and group committer."""

    def __init__(self, url: str, *, create: bool):
        self.pid = os.getpid()
        self.store = neostore.open(url, create=create)
        self.executor = ThreadPoolExecutor(_DB_THREADS, thread_name_prefix="arrays-zarr")
        self.group = GroupCommit(self.store)
        # Runs when the last ZarrStore using this lets go of it (close() or
        # garbage collection). Nothing can be in flight then: every pending
        # call holds its ZarrStore, which holds this.
        weakref.finalize(self, _close_shared, self.pid, self.store, self.executor, self.group)


def _close_shared(pid: int, store: neostore.Store, executor: ThreadPoolExecutor, group: GroupCommit) -> None:
    if os.getpid() != pid:
        return  # inherited by a forked child: the connections are the parent's
    group.close()
    executor.shutdown(wait=False)
    store.close()


_shared: weakref.WeakValueDictionary[str, _Shared] = weakref.WeakValueDictionary()
_shared_lock = threading.Lock()


def _acquire(url: str, *, create: bool) -> _Shared:
    """The shared Store of ``url``; a missing store is created only if ``create`` (else StoreNotFoundError)."""
    with _shared_lock:
        found = _shared.get(url)
        if found is None:
            found = _shared[url] = _Shared(url, create=create)
        return found


def _reset_after_fork() -> None:
    # A forked child must not use its parent's connections or threads
    # (a store on a URL acquires again when it finds a parent's _Shared).
    global _shared, _shared_lock
    _shared = weakref.WeakValueDictionary()
    _shared_lock = threading.Lock()


os.register_at_fork(after_in_child=_reset_after_fork)


# -- helpers -------------------------------------------------------------------


def _before_bound(at: At | None) -> bytes | None:
    """The ``before`` bound (first tid not visible) for ``at``; None for the head."""
    return None if at is None else parse_at(at)


def _codec_compressed(value: memoryview) -> bool:
    """Whether ``value`` is a blosc frame, which neostore's zstd would not shrink.

    neostore already recognises zstd and gzip frames by their magic bytes;
    a blosc (v1 format) frame has none, but its 16-byte header ends with the
    frame's own length. A raw chunk that happens to look like one is merely
    stored uncompressed.
    """
    return len(value) >= 16 and value[0] == 2 and int.from_bytes(value[12:16], "little") == len(value)


def _slice_of(byte_range: ByteRequest | None) -> tuple[int, int | None] | None:
    """``(start, stop)`` of a byte request, as for ``value[start:stop]``; None for the whole value."""
    if byte_range is None:
        return None
    if isinstance(byte_range, RangeByteRequest):
        if byte_range.start < 0 or byte_range.end < byte_range.start:
            raise ValueError(f"invalid byte range {byte_range}: need 0 <= start <= end")
        return byte_range.start, byte_range.end
    if isinstance(byte_range, OffsetByteRequest):
        if byte_range.offset < 0:
            raise ValueError(f"invalid byte range {byte_range}: the offset must be >= 0")
        return byte_range.offset, None
    if isinstance(byte_range, SuffixByteRequest):
        if byte_range.suffix < 0:
            raise ValueError(f"invalid byte range {byte_range}: the suffix must be >= 0")
        # value[-0:] would be the whole value, not its last 0 bytes.
        return (-byte_range.suffix, None) if byte_range.suffix else (0, 0)
    raise TypeError(f"Unexpected byte_range, got {byte_range}.")


def _check_key(key: str) -> None:
    if not isinstance(key, str):
        raise TypeError(f"a zarr key is a str, not {type(key).__name__}")
    if len(encode_key(key)) > _MAX_KEY:
        raise ValueError(f"key {key[:40]!r}... is longer than neostore's {_MAX_KEY}-byte name limit")


def _dir_prefix(prefix: str) -> str:
    """``prefix`` as a directory: ``""`` for the root, else ending in ``/``."""
    prefix = prefix.rstrip("/")
    return prefix + "/" if prefix else ""


# -- where a store reads and writes ------------------------------------------------


class _OnUrl:
    """Where a ZarrStore on a URL reads and writes: this process's shared Store of the URL (acquired on
    first use, and again in a forked child), the snapshot its reads see, group commit for its writes."""

    def __init__(self, url: str, *, at: At | None, before: bytes | None, create: bool):
        self._url = url
        self._at = at
        self._before = before
        self._create = create
        self._pinned: bytes | None = None  # the bound reads use, fixed at open
        self._shared: _Shared | None = None

    @property
    def before(self) -> bytes | None:
        return self._pinned or self._before

    def shared(self) -> _Shared:
        """This process's shared neostore Store for the URL, acquired on first use."""
        shared = self._shared
        if shared is None or shared.pid != os.getpid():
            shared = _acquire(self._url, create=self._create)
            if self._at is not None and self._pinned is None:
                # A time still in the future pins the latest commit, so the
                # snapshot does not move; a time before the last pack fails.
                self._pinned = snapshot_bound(shared.store, self._at)
            self._shared = shared
        return shared

    @property
    def store(self) -> neostore.Store:
        return self.shared().store

    def open(self) -> None:
        """Acquire the shared Store now (and pin the snapshot): a missing store fails here."""
        self.shared()

    def reader(self) -> Snapshot:
        store = self.shared().store  # pins the snapshot on first use
        return Snapshot(store, self._pinned)

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.shared().executor, fn, *args)

    async def write(self, change: Change) -> Any:
        return await asyncio.wrap_future(self.shared().group.submit(change))

    def write_sync(self, change: Change) -> Any:
        return self.shared().group.submit(change).result()

    def let_go(self) -> None:
        self._shared = None


class _InTransaction:
    """Where a ZarrStore bound to a transaction reads and writes: the transaction itself."""

    before: bytes | None = None

    def __init__(self, tx: Transaction):
        self.tx = tx

    @property
    def store(self) -> neostore.Store:
        return self.tx.store

    def open(self) -> None:
        pass  # the transaction is open already

    def reader(self) -> Transaction:
        return self.tx

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.to_thread(fn, *args)

    async def write(self, change: Change) -> Any:
        return await asyncio.to_thread(apply_change, self.tx, change)

    def write_sync(self, change: Change) -> Any:
        return apply_change(self.tx, change)

    def let_go(self) -> None:
        pass  # the transaction's store is its owner's


# -- the store -------------------------------------------------------------------


def _change(kind: Kind, key: str, value: Buffer | None) -> Change:
    """The change a write of ``value`` (None: a deletion) to ``key`` makes."""
    _check_key(key)
    view = None
    if value is not None:
        if not isinstance(value, Buffer):
            raise TypeError(f"ZarrStore.set takes a zarr Buffer, not {type(value).__name__}")
        view = memoryview(value.as_buffer_like()).cast("B")
    # Chunks a codec compressed are stored as they are: neostore's zstd
    # would only spend time, and raw values are what ranged reads slice.
    compress = view is None or not _codec_compressed(view)
    return Change(kind, key, view, compress)


def _fetch(reader: Any, key: str, byte_range: ByteRequest | None) -> bytes | None:
    """The bytes of ``key`` ``byte_range`` asks for, read with ``reader`` (a Snapshot or Transaction)."""
    bounds = _slice_of(byte_range)
    if bounds is None:
        value: bytes | None = reader.get(key)
    elif bounds == (0, 0):
        value = b"" if reader.exists(key) else None
    else:
        value = reader.get_range(key, *bounds)
    return value


class ZarrStore(Store):
    """A zarr v3 store whose keys are neostore named objects.

    ``ZarrStore(url)`` reads the latest commit at every call and writes with
    group commit: each ``set``/``delete`` is durable and visible to every
    process when it returns. ``read_only=True`` refuses writes. ``at=`` (a
    tid, a datetime (naive means UTC) or a Unix time) reads the store as it
    was then and is always read-only. :meth:`for_transaction` gives a store
    whose reads see, and whose writes join, an open :class:`arrays.Transaction`.

    ZarrStores of one process on one URL share a neostore Store, closed when
    the last of them is closed or collected. A read-only one (``at=``
    included) never creates a store: its first use raises
    neostore.StoreNotFoundError if there is none.
    """

    supports_writes: bool = True
    supports_deletes: bool = True
    supports_listing: bool = True

    def __init__(
        self,
        url: str,
        *,
        read_only: bool = False,
        at: bytes | datetime | float | None = None,
    ) -> None:
        if not isinstance(url, str):
            raise TypeError(f"ZarrStore takes a store URL (str), not {type(url).__name__}")
        neostore.parse_url(url)  # a bad URL fails here, not at the first read
        before = _before_bound(at)
        super().__init__(read_only=read_only or before is not None)
        self.url = url
        self.at = at
        self._before = before
        self._place: _OnUrl | _InTransaction = _OnUrl(url, at=at, before=before, create=not self.read_only)

    @classmethod
    def for_transaction(cls, tx: Transaction, *, read_only: bool = False) -> ZarrStore:
        """A store bound to ``tx``: reads see its writes, writes join it (commit or abort with it)."""
        self = cls.__new__(cls)
        Store.__init__(self, read_only=read_only)
        self.url = str(tx.store.url)
        self.at = None
        self._before = None
        self._place = _InTransaction(tx)
        self._is_open = True
        return self

    # -- identity ------------------------------------------------------------

    @property
    def before(self) -> bytes | None:
        """The first tid this store does not see (None: it follows the head)."""
        return self._place.before

    @property
    def transaction(self) -> Transaction | None:
        """The transaction this store is bound to, if any."""
        place = self._place
        return place.tx if isinstance(place, _InTransaction) else None

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, ZarrStore)
            and self.url == other.url
            and self.read_only == other.read_only
            and self._before == other._before
            and self.transaction is other.transaction
        )

    def __hash__(self) -> int:
        return hash((self.url, self.read_only, self._before, id(self.transaction)))

    def __repr__(self) -> str:
        url = repr(neostore.redacted(self.url))
        flag = ", read_only=True" if self.read_only and self._before is None else ""
        tx = self.transaction
        if tx is not None:
            return f"ZarrStore.for_transaction(<{tx.state} transaction on {url}>{flag})"
        if self._before is not None:
            return f"ZarrStore({url}, at={self.at!r})"
        return f"ZarrStore({url}{flag})"

    def __getstate__(self) -> dict[str, Any]:
        if self.transaction is not None:
            raise TypeError(
                "a ZarrStore bound to a transaction cannot be pickled: the transaction lives in "
                "this process; commit it and pickle ZarrStore(url) instead"
            )
        return {"url": self.url, "read_only": self._read_only and self._before is None, "at": self.at}

    def __setstate__(self, state: dict[str, Any]) -> None:
        ZarrStore.__init__(self, state["url"], read_only=state["read_only"], at=state["at"])

    def with_read_only(self, read_only: bool = False) -> ZarrStore:
        """The same location with another ``read_only`` setting (not opened)."""
        tx = self.transaction
        if tx is not None:
            return ZarrStore.for_transaction(tx, read_only=read_only)
        if self._before is not None and not read_only:
            raise ValueError(f"{self!r} is a snapshot of the past and cannot be written; open ZarrStore(url) to write")
        return ZarrStore(self.url, read_only=read_only, at=self.at)

    def _check_writable(self) -> None:
        if self.read_only:
            # zarr (and its test-suite) match this message's start.
            where = (
                f"a snapshot at={self.at!r}; open it without at= to write"
                if self._before is not None
                else "open it with read_only=False to write"
            )
            raise ValueError(f"store was opened in read-only mode and does not support writing ({where})")
        tx = self.transaction
        if tx is not None and tx.state != "open":
            raise ValueError(f"the transaction of this store is {tx.state}; start a new one to write")

    # -- lifecycle -------------------------------------------------------------

    async def _open(self) -> None:
        if self._is_open:
            raise ValueError("store is already open")
        await asyncio.to_thread(self._open_sync)

    def _open_sync(self) -> None:
        self._place.open()
        self._is_open = True

    async def _ensure_open(self) -> None:
        if not self._is_open:
            await self._open()

    def _ensure_open_sync(self) -> None:
        if not self._is_open:
            self._open_sync()

    def close(self) -> None:
        """Let go of the shared neostore Store (closed once no ZarrStore uses it)."""
        self._place.let_go()
        if self.transaction is None:
            self._is_open = False

    # -- plumbing ----------------------------------------------------------------

    @property
    def neo_store(self) -> neostore.Store:
        """The neostore Store under this ZarrStore (shared with other ZarrStores of the URL)."""
        return self._place.store

    def _read(self, fn: Callable[[Any], T]) -> T:
        """Run ``fn(reader)`` in this thread; the reader sees what this store should."""
        return fn(self._place.reader())

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run database work off the event loop."""
        await self._ensure_open()
        return await self._place.run(fn, *args)

    # -- reading -------------------------------------------------------------------

    def _get(self, key: str, prototype: BufferPrototype | None, byte_range: ByteRequest | None) -> Buffer | None:
        value = self._read(lambda r: _fetch(r, key, byte_range))
        return None if value is None else (prototype or default_buffer_prototype()).buffer.from_bytes(value)

    async def get(
        self, key: str, prototype: BufferPrototype | None = None, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        """The value of ``key`` (or the requested bytes of it), None if it does not exist.

        Ranged requests are sliced by the database for values stored
        uncompressed (as codec-compressed chunks are), so only the range is read.
        """
        _slice_of(byte_range)  # reject a malformed request before any I/O
        return await self._run(self._get, key, prototype, byte_range)

    def get_sync(
        self, key: str, *, prototype: BufferPrototype | None = None, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        """:meth:`get` for synchronous callers (runs in the calling thread)."""
        self._ensure_open_sync()
        return self._get(key, prototype, byte_range)

    async def get_partial_values(
        self, prototype: BufferPrototype, key_ranges: Iterable[tuple[str, ByteRequest | None]]
    ) -> list[Buffer | None]:
        """The requested values or ranges, in order (None for missing keys)."""
        return list(await asyncio.gather(*(self.get(k, prototype, r) for k, r in key_ranges)))

    async def exists(self, key: str) -> bool:
        """Whether ``key`` holds a value (as this store sees the keys)."""
        return await self._run(lambda: self._read(lambda r: r.exists(key)))

    async def getsize(self, key: str) -> int:
        """The size of ``key``'s value, read from the index (the value is not loaded)."""
        size = await self._run(lambda: self._read(lambda r: r.size(key)))
        if size is None:
            raise FileNotFoundError(key)
        return int(size)

    async def getsize_prefix(self, prefix: str) -> int:
        """The total size of the values under ``prefix``, from one index scan."""
        entries = await self._run(lambda: self._read(lambda r: r.list(_dir_prefix(prefix))))
        return sum(e.size for e in entries)

    # -- listing ---------------------------------------------------------------------

    async def _keys(self, prefix: str) -> list[str]:
        entries = await self._run(lambda: self._read(lambda r: r.list(prefix)))
        return [e.key for e in entries]

    async def list(self) -> AsyncIterator[str]:
        """Every key, sorted."""
        for key in await self._keys(""):
            yield key

    async def list_prefix(self, prefix: str) -> AsyncIterator[str]:
        """Every key starting with ``prefix``, sorted (one range scan of the name index)."""
        for key in await self._keys(prefix):
            yield key

    async def list_dir(self, prefix: str) -> AsyncIterator[str]:
        """The immediate children of ``prefix``: keys and pseudo-directories, without ``/``."""
        base = _dir_prefix(prefix)
        children = dict.fromkeys(key[len(base) :].split("/", 1)[0] for key in await self._keys(base))
        for child in children:
            if child:
                yield child

    # -- writing ---------------------------------------------------------------------

    def _prepare(self, kind: Kind, key: str, value: Buffer | None) -> Change:
        self._check_writable()
        return _change(kind, key, value)

    async def _write(self, kind: Kind, key: str, value: Buffer | None = None) -> Any:
        change = self._prepare(kind, key, value)
        await self._ensure_open()
        return await self._place.write(change)

    def _write_sync(self, kind: Kind, key: str, value: Buffer | None = None) -> Any:
        change = self._prepare(kind, key, value)
        self._ensure_open_sync()
        return self._place.write_sync(change)

    async def set(self, key: str, value: Buffer) -> None:
        """Give ``key`` the value ``value``: durable and visible when this returns."""
        await self._write("set", key, value)

    def set_sync(self, key: str, value: Buffer) -> None:
        """:meth:`set` for synchronous callers (runs in the calling thread)."""
        self._write_sync("set", key, value)

    async def set_if_not_exists(self, key: str, value: Buffer) -> None:
        """Set ``key`` unless it exists; atomic across processes (under the commit lock)."""
        await self._write("set_if_not_exists", key, value)

    async def delete(self, key: str) -> None:
        """Remove ``key``; a missing key is no error."""
        await self._write("delete", key)

    def delete_sync(self, key: str) -> None:
        """:meth:`delete` for synchronous callers (runs in the calling thread)."""
        self._write_sync("delete", key)

    async def delete_dir(self, prefix: str) -> None:
        """Remove every key under the directory ``prefix``, in one transaction."""
        await self._write("delete_prefix", _dir_prefix(prefix))

    async def clear(self) -> None:
        """Remove every key (history keeps the old values until a pack)."""
        await self.delete_dir("")
