"""The state of a BigArray: its metadata and snapshot, replaced as a whole; chunk decoding and view moves."""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from windvane import neostore

from .cache import DEFAULT_CACHE_BYTES, ChunkCache
from .errors import ArrayError, ArrayNotFoundError
from .keys import Snapshot, next_tid_after
from .metadata import METADATA_KEY, ArrayMeta
from .target import StoreOwner, previous
from .transaction import Transaction

#: Transactions per ``changes_since`` page when a view catches up.
_CHANGES_PAGE = 10000


@dataclass(frozen=True)
class View:
    """What a BigArray shows, replaced as a whole so that reads in other threads see one consistent state."""

    meta: ArrayMeta
    raw: bytes  # the zarr.json ``meta`` was parsed from
    before: bytes | None  # the snapshot bound; None inside a transaction (the head plus its own writes)


class ArrayView(StoreOwner):
    """What a BigArray shows (its metadata, at a snapshot or in a transaction) and how that view moves.

    The view is replaced as a whole (:class:`View`), so reads in other
    threads see one consistent state.
    """

    def __init__(
        self,
        store: neostore.Store,
        name: str,
        meta: ArrayMeta,
        meta_raw: bytes,
        *,
        before: bytes | None = None,
        transaction: Transaction | None = None,
        read_only: bool = False,
        owns_store: bool = False,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
    ):
        self.name = name
        self.cache = ChunkCache(cache_bytes)
        self.chunks_loaded = 0
        self._store = store
        self._view = View(meta, meta_raw, before)
        self._tx = transaction
        self._read_only = read_only
        self._owns_store = owns_store
        self._count_lock = threading.Lock()
        self._last_memo: tuple[tuple[bytes, str], np.ndarray | None] | None = None

    # -- what it is ----------------------------------------------------------------

    @property
    def meta(self) -> ArrayMeta:
        """The parsed ``zarr.json`` of this view."""
        return self._view.meta

    @property
    def view(self) -> View:
        """The whole view: metadata, its bytes, the snapshot bound (give it back to :meth:`restore`)."""
        return self._view

    def restore(self, view: View) -> None:
        """Show ``view`` again (one taken from :attr:`view` of this array), as after a failed write."""
        self._view = view

    def show(self, raw: bytes, before: bytes | None) -> None:
        """Show the metadata ``raw`` at snapshot bound ``before`` (None: in the transaction).

        ArrayError if ``raw`` describes another array (dtype or chunks changed).
        """
        self._view = View(self.parse_meta(raw), raw, before)

    def set_meta(self, meta: ArrayMeta, raw: bytes) -> None:
        """Show ``meta`` (whose bytes are ``raw``), just written by this process, at the same snapshot bound."""
        self._view = View(meta, raw, self._view.before)

    def moved_to(self, before: bytes) -> None:
        """Show the same metadata at snapshot bound ``before``: after a commit that wrote exactly it."""
        view = self._view
        self._view = View(view.meta, view.raw, before)

    @property
    def _before(self) -> bytes | None:
        return self._view.before

    @property
    def shape(self) -> tuple[int, ...]:
        """The array's shape as this view sees it."""
        return self.meta.shape

    @property
    def dtype(self) -> np.dtype:
        """The numpy dtype reads return (``StringDType`` for strings, object for bytes)."""
        return self.meta.dtype

    @property
    def chunks(self) -> tuple[int, ...]:
        """The shape of a stored chunk."""
        return self.meta.chunks

    @property
    def ndim(self) -> int:
        """The number of axes."""
        return len(self.meta.shape)

    @property
    def size(self) -> int:
        """The number of elements."""
        return math.prod(self.meta.shape)

    @property
    def nbytes(self) -> int:
        """The bytes the whole array takes decoded (``size * itemsize``)."""
        return self.size * self.dtype.itemsize

    @property
    def fill_value(self) -> Any:
        """What unwritten elements read as."""
        return self.meta.fill_value

    @property
    def attrs(self) -> dict[str, Any]:
        """The array's zarr attributes (a copy)."""
        return self.meta.attributes

    @property
    def dims(self) -> tuple[str, ...] | None:
        """The dimension names, if the array has them."""
        return self.meta.dims

    @property
    def codec(self) -> list[dict[str, Any]]:
        """The zarr v3 ``codecs`` the chunks are stored with."""
        return self.meta.codec.to_json()

    @property
    def read_only(self) -> bool:
        """Whether writes are refused (a snapshot opened with ``at=``)."""
        return self._read_only

    @property
    def tid(self) -> bytes | None:
        """The last commit this view sees (None inside a transaction: it sees the latest)."""
        return None if self._before is None else previous(self._before)

    @property
    def store(self) -> neostore.Store:
        """The neostore Store the array lives in."""
        return self._store

    def __len__(self) -> int:
        return self.shape[0]

    def __repr__(self) -> str:
        where = "in a transaction" if self._before is None else f"at 0x{previous(self._before).hex()}"
        mode = ", read-only" if self._read_only else ""
        return f"<BigArray {self.name!r} shape={self.shape} dtype={self.dtype} chunks={self.chunks} {where}{mode}>"

    def _key(self, meta: ArrayMeta, coords: Sequence[int]) -> str:
        return f"{self.name}/{meta.chunk_key(coords)}"

    def decode_chunk(self, meta: ArrayMeta, value: bytes | memoryview, key: str) -> np.ndarray:
        """Chunk ``key``'s stored bytes ``value`` decoded; ArrayError naming the chunk if they do not decode."""
        try:
            return meta.codec.decode(value, meta.chunks)
        except Exception as exc:
            raise ArrayError(f"chunk {key!r} does not decode with codecs {meta.codec.names}: {exc}") from None

    def count_loaded(self, n: int) -> None:
        """Add ``n`` chunk values read from the database to :attr:`chunks_loaded` (thread-safe)."""
        with self._count_lock:
            self.chunks_loaded += n

    def _live_transaction(self) -> Transaction:
        tx = self._tx
        if tx is None or tx.state != "open":
            raise ArrayError(
                f"the transaction array {self.name!r} was opened in has ended; open it again "
                "(arrays.open) to read or write it"
            )
        return tx

    # -- moving the view -------------------------------------------------------------

    def refresh(self) -> bytes | None:
        """Move the view to the newest commit, keeping cached chunks that did not change; returns its tid."""
        if self._before is None:
            self._reload_meta(self._live_transaction().get(self._meta_key))
            return None
        head = self._store.last_transaction()
        if head != self.tid:
            before = next_tid_after(head)
            raw = Snapshot(self._store, before).get(self._meta_key)
            if raw is None:
                raise ArrayNotFoundError(self.name, "in the newest commit (it was deleted)")
            meta = self.parse_meta(raw)
            self.forget_changes(self.tid, head)
            self._view = View(meta, raw, before)
        return self.tid

    def forget_changes(self, since: bytes | None, until: bytes) -> None:
        """Drop cached chunks of objects changed by commits in ``(since, until]`` (``since`` None: a
        transaction's view, which caches nothing it could not see)."""
        if since is None or not len(self.cache) or until <= since:
            return
        cursor = since
        while True:
            page = self._store.changes_since(cursor, limit=_CHANGES_PAGE)
            for tid, oids in page:
                if tid > until:
                    return
                self.cache.discard(oids)
                cursor = tid
            if len(page) < _CHANGES_PAGE:
                return

    @property
    def _meta_key(self) -> str:
        return f"{self.name}/{METADATA_KEY}"

    def parse_meta(self, raw: bytes | None) -> ArrayMeta:
        """The metadata ``raw`` holds (parsed only if it changed); the array must still be the same one."""
        if raw is None:
            raise ArrayNotFoundError(self.name, "any more (it was deleted)")
        if raw == self._view.raw:
            return self._view.meta
        meta = ArrayMeta.from_bytes(raw, self.name)
        if meta.dtype != self.meta.dtype or meta.chunks != self.meta.chunks:
            raise ArrayError(
                f"array {self.name!r} was replaced by one with dtype {meta.dtype} and chunks {meta.chunks}; "
                "open it again"
            )
        return meta

    def _reload_meta(self, raw: bytes | None) -> ArrayMeta:
        if raw is None:
            raise ArrayNotFoundError(self.name, "any more (it was deleted)")
        self.show(raw, self._view.before)
        return self._view.meta
