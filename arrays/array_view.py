"""What a BigArray shows: its metadata at a snapshot (or in a transaction), replaced as a whole, and how it moves."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NoReturn

from windvane import neostore

from .cache import ChunkCache
from .errors import ArrayError, ArrayNotFoundError
from .keys import Snapshot, next_tid_after
from .metadata import METADATA_KEY, ArrayMeta
from .target import previous
from .transaction import Transaction


@dataclass(frozen=True)
class View:
    """What a BigArray shows, replaced as a whole so that reads in other threads see one consistent state."""

    meta: ArrayMeta
    raw: bytes  # the zarr.json ``meta`` was parsed from
    before: bytes | None  # the snapshot bound; None inside a transaction (the head plus its own writes)


class ArrayView:
    """The view of array ``name``: its :class:`View`, and moving it to what the store holds later.

    Inside a transaction (``transaction`` given) the view's bound is None and
    reads go through that transaction while it is open.
    """

    def __init__(
        self,
        store: neostore.Store,
        name: str,
        meta: ArrayMeta,
        raw: bytes,
        *,
        before: bytes | None,
        transaction: Transaction | None,
    ):
        self.name = name
        self._store = store
        self._tx = transaction
        self._current = View(meta, raw, before)

    @property
    def current(self) -> View:
        """The whole view: metadata, its bytes, the snapshot bound."""
        return self._current

    @property
    def meta(self) -> ArrayMeta:
        return self._current.meta

    @property
    def before(self) -> bytes | None:
        """The first tid the view does not see (None: in the transaction)."""
        return self._current.before

    @property
    def tid(self) -> bytes | None:
        """The last commit the view sees (None inside a transaction: it sees the latest)."""
        before = self._current.before
        return None if before is None else previous(before)

    @property
    def in_transaction(self) -> bool:
        """Whether the view was opened in a transaction (its writes join it)."""
        return self._tx is not None

    @property
    def meta_key(self) -> str:
        return f"{self.name}/{METADATA_KEY}"

    def replace(self, view: View) -> None:
        """Show ``view``: one taken from :attr:`current` (as after a failed write), or one just written."""
        self._current = view

    def show(self, raw: bytes | None, before: bytes | None) -> None:
        """Show the metadata ``raw`` at snapshot bound ``before`` (None: in the transaction).

        ArrayNotFoundError if there is none; ArrayError if ``raw`` describes
        another array (dtype or chunks changed).
        """
        if raw is None:
            self._gone()
        self._current = View(self.parse_meta(raw), raw, before)

    def set_meta(self, meta: ArrayMeta, raw: bytes) -> None:
        """Show ``meta`` (whose bytes are ``raw``), just written by this process, at the same snapshot bound."""
        self._current = View(meta, raw, self._current.before)

    def moved_to(self, before: bytes) -> None:
        """Show the same metadata at snapshot bound ``before``: after a commit that wrote exactly it."""
        view = self._current
        self._current = View(view.meta, view.raw, before)

    def live_transaction(self) -> Transaction:
        """The transaction the view was opened in, while it is open; ArrayError otherwise."""
        tx = self._tx
        if tx is None or tx.state != "open":
            raise ArrayError(
                f"the transaction array {self.name!r} was opened in has ended; open it again "
                "(arrays.open) to read or write it"
            )
        return tx

    def refresh(self, cache: ChunkCache) -> bytes | None:
        """Move to the newest commit, dropping from ``cache`` the chunks that changed; returns its tid."""
        if self._current.before is None:
            self.show(self.live_transaction().get(self.meta_key), None)
            return None
        head = self._store.last_transaction()
        if head != self.tid:
            before = next_tid_after(head)
            raw = Snapshot(self._store, before).get(self.meta_key)
            if raw is None:
                raise ArrayNotFoundError(self.name, "in the newest commit (it was deleted)")
            meta = self.parse_meta(raw)
            cache.forget_changes(self._store, self.tid, head)
            self._current = View(meta, raw, before)
        return self.tid

    def parse_meta(self, raw: bytes | None) -> ArrayMeta:
        """The metadata ``raw`` holds (parsed only if it changed); the array must still be the same one."""
        if raw is None:
            self._gone()
        view = self._current
        if raw == view.raw:
            return view.meta
        meta = ArrayMeta.from_bytes(raw, self.name)
        if meta.dtype != view.meta.dtype or meta.chunks != view.meta.chunks:
            raise ArrayError(
                f"array {self.name!r} was replaced by one with dtype {meta.dtype} and chunks {meta.chunks}; "
                "open it again"
            )
        return meta

    def _gone(self) -> NoReturn:
        raise ArrayNotFoundError(self.name, "any more (it was deleted)")
