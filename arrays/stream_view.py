"""A stream's arrays at one snapshot (or in one transaction): loading their metadata together, moving the view."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, Self

from windvane import neostore

from . import time_index
from .bigarray import BigArray
from .cache import DEFAULT_CACHE_BYTES, ChunkCache
from .errors import ColumnError, StreamError, StreamNotFoundError
from .keys import Snapshot, next_tid_after
from .metadata import METADATA_KEY, ArrayMeta
from .stream_schema import NAME_ATTR, RESERVED_ATTRS, TIME, column_key, group_attrs
from .target import StoreHandle, previous
from .transaction import Transaction


class StreamView:
    """The arrays of one stream at one snapshot (or in one transaction), their metadata read together.

    Reads only; :class:`~arrays.Stream` adds the writes. Construction
    reads the stream's documents: StreamNotFoundError if there is none.
    """

    def __init__(
        self,
        store: neostore.Store,
        tag: str,
        path: str,
        *,
        before: bytes | None,
        transaction: Transaction | None,
        read_only: bool = False,
        owns_store: bool = False,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        current: bool = False,
    ):
        self.tag = tag
        self.path = path
        self.cache = ChunkCache(cache_bytes)
        self._store = store
        self._tx = transaction
        self._before = before
        self._read_only = read_only
        self._handle = StoreHandle(store, owns=owns_store)
        self._group_raw = b""
        self._attrs: dict[str, Any] = {}
        self._arrays: dict[str, BigArray] = {}
        self._known_ranges: dict[tuple[int, bytes], time_index.Range] = {}  # computed: chunks without a record
        # Inside a transaction: whether the metadata held was read (or written)
        # while the transaction held the commit lock, so is still the latest.
        self._current = current
        self._load(None)

    # -- what it is ----------------------------------------------------------------

    @property
    def attrs(self) -> dict[str, Any]:
        """The user's attributes of the stream (a deep copy: changing it changes nothing stored)."""
        # A deep copy: the parsed group document is shared by every view of these bytes.
        return copy.deepcopy({k: v for k, v in self._attrs.items() if k not in RESERVED_ATTRS})

    @property
    def columns(self) -> list[str]:
        """The column keys in order, ``time`` left out."""
        return [name for name in self._arrays if name != TIME]

    @property
    def tid(self) -> bytes | None:
        """The last commit this view sees (None inside a transaction: it sees the latest)."""
        return None if self._before is None else previous(self._before)

    @property
    def read_only(self) -> bool:
        """Whether appends are refused (a snapshot opened with ``at=``)."""
        return self._read_only

    def __len__(self) -> int:
        return len(self._arrays[TIME])

    def __getitem__(self, name: str) -> BigArray:
        """The array of column ``name``: its key, or the name an escaped key stands for (:func:`column_key`)."""
        try:
            return self._arrays[name]
        except KeyError:
            pass
        try:
            return self._arrays[column_key(name)]
        except (KeyError, ColumnError):
            raise ColumnError(f"stream {self.tag!r} has no column {name!r}; it has {[TIME, *self.columns]}") from None

    def __contains__(self, name: object) -> bool:
        try:
            return name in self._arrays or column_key(name) in self._arrays  # type: ignore[arg-type]
        except ColumnError:
            return False

    def name_of(self, key: str) -> str:
        """The name of the column stored under ``key``: its ``name`` attribute if its key is escaped, else the key."""
        return self._arrays[key].attrs.get(NAME_ATTR, key) if key != TIME else key

    def __repr__(self) -> str:
        where = "in a transaction" if self._before is None else f"at 0x{previous(self._before).hex()}"
        return f"<Stream {self.tag!r} rows={len(self)} columns={self.columns} {where}>"

    def time_ranges(self) -> list[time_index.Range]:
        """The least and greatest ``time`` of each chunk of rows, in order (None: no row of it has a time).

        Read from the records kept beside the chunks (:mod:`arrays.time_index`):
        only the partial last chunk and chunks written without a record are
        read (each once per view).
        """
        reader = self._live_transaction() if self._before is None else Snapshot(self._store, self._before)
        return time_index.chunk_ranges(reader, self.path, self._arrays[TIME], self._known_ranges)

    def time_span(self) -> time_index.Range:
        """The least and greatest ``time`` of the stream's rows, ns since the epoch (UTC); None if none has one.

        Time is in arrival order: these are not the first and last rows' times.
        """
        return time_index.span(self.time_ranges())

    def close(self) -> None:
        """Close the store if this stream opened it from a URL; safe to call more than once."""
        self._handle.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- loading metadata --------------------------------------------------------------

    def _key(self, name: str) -> str:
        return f"{self.path}/{name}/{METADATA_KEY}"

    @property
    def _group_key(self) -> str:
        return f"{self.path}/{METADATA_KEY}"

    def _read(self, keys: list[str]) -> dict[str, bytes]:
        if self._before is None:
            return self._live_transaction().get_many(keys)
        return Snapshot(self._store, self._before).get_many(keys)

    def _live_transaction(self) -> Transaction:
        tx = self._tx
        if tx is None or tx.state != "open":
            raise StreamError(f"the transaction stream {self.tag!r} was opened in has ended; open it again")
        return tx

    def _load(self, documents: Mapping[str, bytes] | None = None, tx: Transaction | None = None) -> None:
        """(Re)build the column arrays from the group and array documents given; the rest are read.

        From ``tx`` if given (a write holding the lock reads the head), else from the view's snapshot.
        """
        if tx is not None:
            documents = tx.get_many([self._group_key, *(self._key(n) for n in self._arrays)])
        if documents is None or self._group_key not in documents:
            group = self._read([self._group_key]).get(self._group_key)
            if group is None:
                raise StreamNotFoundError(f"no stream {self.tag!r} at {self.path!r}; create it with create_stream")
            documents = {self._group_key: group, **(documents or {})}
        group_raw = documents[self._group_key]
        attrs = group_attrs(group_raw, self.path)
        names = [TIME, *attrs.get("columns", [])]
        missing = [self._key(n) for n in names if self._key(n) not in documents]
        if missing:  # columns added since: one more batched read
            documents = {**documents, **(tx.get_many(missing) if tx is not None else self._read(missing))}
        arrays: dict[str, BigArray] = {}
        for name in names:
            raw = documents.get(self._key(name))
            if raw is None:
                raise StreamError(f"stream {self.tag!r} lists column {name!r} but has no array for it; it is damaged")
            old = self._arrays.get(name)
            if old is not None:
                old.show(raw, self._before)
                arrays[name] = old
                continue
            array = BigArray(
                self._store,
                f"{self.path}/{name}",
                ArrayMeta.from_bytes(raw, f"{self.path}/{name}"),
                raw,
                before=self._before,
                transaction=self._tx,
                read_only=self._read_only,
                cache=self.cache,  # one budget for the whole stream (oids never collide)
            )
            arrays[name] = array
        self._group_raw, self._attrs, self._arrays = group_raw, attrs, arrays

    def refresh(self) -> bytes | None:
        """Move every array to the newest commit, one tid for all; returns it (None in a transaction)."""
        if self._before is None:
            tx = self._live_transaction()
            self._current = tx.locked
            self._load(tx=tx)
            return None
        head = self._store.last_transaction()
        if head != self.tid:
            self._arrays[TIME].forget_changes(self.tid, head)  # the shared cache
            self._before = next_tid_after(head)
            self._load(self._read([self._group_key, *(self._key(n) for n in self._arrays)]))
        return self.tid

    # -- writing ---------------------------------------------------------------------
