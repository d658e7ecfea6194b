"""Making, opening and listing streams: their groups and arrays, and the registry of tags in the root group."""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from . import row_log
from .cache import DEFAULT_CACHE_BYTES
from .errors import ColumnError, StreamExistsError, StreamNotFoundError
from .keys import Snapshot, next_tid_after
from .metadata import METADATA_KEY, group_document, node_type
from .stream import Stream
from .stream_schema import (
    QUARANTINE_ROOT,
    REGISTRY_ATTR,
    RESERVED_ATTRS,
    STREAM_FORMAT,
    STREAMS_ROOT,
    TIME,
    Column,
    chunk_rows_for,
    empty_meta_bytes,
    is_stream,
    stream_path,
    time_meta,
)
from .target import Target, resolve
from .timetravel import At, describe, snapshot_bound
from .transaction import Transaction


def registry_key(quarantine: bool) -> str:
    """The key of the root group whose attributes list the streams (or quarantined streams)."""
    return f"{QUARANTINE_ROOT if quarantine else STREAMS_ROOT}/{METADATA_KEY}"


def _create_in(
    tx: Transaction,
    tags: Sequence[str],
    columns: Sequence[Column],
    attrs: dict[str, Any],
    chunk_rows: int,
    *,
    quarantine: bool,
    exist_ok: bool = False,
) -> None:
    """Write the streams' groups and arrays, and add them to the root group's registry, holding the lock.

    Reads the store a few times for all ``tags`` together: what a plant's
    first minute (thousands of new streams in one commit) needs.
    """
    tx.lock()
    paths = {tag: stream_path(tag, quarantine=quarantine) for tag in tags}
    if exist_ok:
        groups = tx.raw_get_many([f"{path}/{METADATA_KEY}" for path in paths.values()])
        paths = {tag: path for tag, path in paths.items() if not is_stream(groups.get(f"{path}/{METADATA_KEY}"))}
    if not paths:
        return
    taken = tx.occupied([f"{path}/" for path in paths.values()])
    if taken:
        clashes = [t for t, path in paths.items() if f"{path}/" in taken]
        more = f" (and {len(clashes) - 1} more: {clashes[1:6]})" if len(clashes) > 1 else ""
        raise StreamExistsError(
            f"stream {clashes[0]!r} already exists at {paths[clashes[0]]!r}{more}; open it with open_stream"
        )
    root_key = registry_key(quarantine)
    writes: dict[str, bytes] = {}
    if not tx.gathers(root_key):  # the first stream this transaction creates there: check the parents
        parents = tx.get_many([METADATA_KEY, root_key])
        if METADATA_KEY not in parents:
            writes[METADATA_KEY] = group_document()
        elif node_type(parents[METADATA_KEY]) != "group":
            raise StreamExistsError("the store's root is not a zarr group; streams cannot be created in it")
        root = parents.get(root_key)
        if root is not None and node_type(root) != "group":
            raise StreamExistsError(f"{root_key.rsplit('/', 1)[0]!r} is not a zarr group; streams cannot live in it")
    group = group_document({"windvane_stream": STREAM_FORMAT, "columns": [c.name for c in columns], **attrs})
    time_raw = time_meta(chunk_rows).to_bytes()
    metas = [empty_meta_bytes(column, chunk_rows) for column in columns]
    for path in paths.values():
        group_key, time_key, *column_keys, _log_key = _stream_keys(path, columns)
        writes[group_key] = group
        writes[time_key] = time_raw
        writes.update(zip(column_keys, metas))
    tx.set_many(writes)
    # The registry is written once, at the commit: a commit creating thousands of streams rewrites it once.
    tx.gathered(root_key, functools.partial(write_registry, tx, root_key)).update(paths)


def write_registry(tx: Transaction, root_key: str, tags: set[str]) -> None:
    """Add ``tags`` to the registry of streams in the group ``root_key`` (creating the group)."""
    root = tx.get(root_key)
    root_attrs: dict[str, Any] = (json.loads(root).get("attributes") or {}) if root is not None else {}
    registry = root_attrs.get(REGISTRY_ATTR) or []
    tx.set(root_key, group_document({**root_attrs, REGISTRY_ATTR: sorted({*registry, *tags})}))


def stream_keys(tags: Iterable[str], columns: Sequence[Column], *, quarantine: bool = False) -> list[str]:
    """The keys creating streams ``tags`` with ``columns`` writes, and those their first appends write (the
    row log, the first chunks): for :meth:`Transaction.bind` and :meth:`Transaction.read_ahead`, ahead of
    readying many streams."""
    # Stream arrays use the default chunk key encoding, as time's does.
    firsts = [
        f"{name}/{time_meta(1).chunk_key((0,) * ndim)}"
        for name, ndim in [(TIME, 1), *((c.name, 1 + len(c.inner)) for c in columns)]
    ]
    keys: list[str] = []
    for tag in tags:
        path = stream_path(tag, quarantine=quarantine)
        keys += _stream_keys(path, columns)
        keys += [f"{path}/{first}" for first in firsts]
    return keys


def _stream_keys(path: str, columns: Sequence[Column]) -> list[str]:
    """The group's key, ``time``'s and each column's array metadata key, the row log's key."""
    return [
        f"{path}/{METADATA_KEY}",
        f"{path}/{TIME}/{METADATA_KEY}",
        *(f"{path}/{column.name}/{METADATA_KEY}" for column in columns),
        row_log.log_key(path),
    ]


def create_stream(
    target: Target,
    tag: str,
    columns: Sequence[Column],
    *,
    attrs: Mapping[str, Any] | None = None,
    chunk_rows: int | None = None,
    quarantine: bool = False,
    cache_bytes: int = DEFAULT_CACHE_BYTES,
) -> Stream:
    """Create stream ``tag`` with ``time`` and ``columns``, empty, and return it writable.

    From a URL or Store the creation commits at once (the stream then
    appends in autocommit mode); in a Transaction it joins it.
    ``chunk_rows``: rows per chunk of columns that do not say; by default
    :func:`chunk_rows_for` the columns (chunks of about
    :data:`DEFAULT_CHUNK_BYTES` raw bytes). ``attrs``:
    plain JSON data, stored in the group's zarr attributes. StreamExistsError
    if anything is at the stream's path; ColumnError for duplicate columns
    or reserved attribute names.
    """
    path = stream_path(tag, quarantine=quarantine)
    columns, attrs, rows = _checked_spec(repr(tag), columns, attrs, chunk_rows)
    store, tx, owns = resolve(target, create=True)
    try:
        if tx is not None:
            _create_in(tx, [tag], columns, attrs, rows, quarantine=quarantine)
            return Stream(store, tag, path, before=None, transaction=tx, cache_bytes=cache_bytes, current=True)
        tx = Transaction(store, message=f"create stream {tag}")
        try:
            _create_in(tx, [tag], columns, attrs, rows, quarantine=quarantine)
            tid = tx.commit()
        except BaseException:
            tx.abort()
            raise
        return Stream(
            store, tag, path, before=next_tid_after(tid), transaction=None, owns_store=owns, cache_bytes=cache_bytes
        )
    except BaseException:
        if owns:
            store.close()
        raise


def create_streams(
    tx: Transaction,
    tags: Iterable[str],
    columns: Sequence[Column],
    *,
    attrs: Mapping[str, Any] | None = None,
    chunk_rows: int | None = None,
    quarantine: bool = False,
    exist_ok: bool = False,
) -> None:
    """Create streams ``tags`` in ``tx``, each as :func:`create_stream` would with the same arguments.

    For thousands of streams at once: the store is read a few times for
    all of them, and no Stream is opened (open one with :func:`open_stream`
    in the same transaction). ``exist_ok``: tags that are streams already
    are left as they are. StreamExistsError (nothing created) if anything
    else is at a stream's path.
    """
    tags = list(dict.fromkeys(tags))
    columns, attrs, rows = _checked_spec(", ".join(map(repr, tags[:3])), columns, attrs, chunk_rows)
    _create_in(tx, tags, columns, attrs, rows, quarantine=quarantine, exist_ok=exist_ok)


def _checked_spec(
    tag: str, columns: Sequence[Column], attrs: Mapping[str, Any] | None, chunk_rows: int | None
) -> tuple[list[Column], dict[str, Any], int]:
    """``columns``, ``attrs`` and the rows per chunk as streams store them; ColumnError for what they cannot
    take."""
    columns = list(columns)
    if not all(isinstance(c, Column) for c in columns):
        raise TypeError("creating a stream takes a sequence of arrays.Column")
    names = [c.name for c in columns]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ColumnError(f"stream {tag}: column names {duplicates} appear more than once")
    plain: dict[str, Any] = json.loads(json.dumps(dict(attrs or {})))
    reserved = [k for k in plain if k in RESERVED_ATTRS]
    if reserved:
        raise ColumnError(f"stream attributes {reserved} are reserved by windvane; name them otherwise")
    rows = chunk_rows_for(columns) if chunk_rows is None else int(chunk_rows)
    if rows < 1:
        raise ColumnError(f"chunk_rows must be >= 1, not {chunk_rows}")
    return columns, plain, rows


def open_stream(
    target: Target,
    tag: str,
    *,
    at: At | None = None,
    quarantine: bool = False,
    cache_bytes: int = DEFAULT_CACHE_BYTES,
) -> Stream:
    """Open stream ``tag``: every array at one snapshot (the newest, or ``at``), or in the given Transaction.

    Without ``at`` the stream is writable (autocommit from a URL/Store; in a
    Transaction, joining it). ``at`` (a tid, a datetime, a Unix time) opens
    it read-only as it was then. StreamNotFoundError if there is no stream
    ``tag`` (then); from a URL, neostore.StoreNotFoundError if there is no
    store (opening never creates one: :func:`create_stream` does).
    """
    path = stream_path(tag, quarantine=quarantine)
    store, tx, owns = resolve(target)
    try:
        if at is not None:
            try:
                return Stream(
                    store,
                    tag,
                    path,
                    before=snapshot_bound(store, at),
                    transaction=None,
                    read_only=True,
                    owns_store=owns,
                    cache_bytes=cache_bytes,
                )
            except StreamNotFoundError:
                raise StreamNotFoundError(
                    f"no stream {tag!r} at {path!r} {describe(at)}: it did not exist then"
                ) from None
        if tx is not None:
            # Read under the lock, the metadata needs no re-read at append.
            return Stream(store, tag, path, before=None, transaction=tx, cache_bytes=cache_bytes, current=tx.locked)
        return Stream(
            store,
            tag,
            path,
            before=Snapshot.latest(store).before,
            transaction=None,
            owns_store=owns,
            cache_bytes=cache_bytes,
        )
    except BaseException:
        if owns:
            store.close()
        raise


def list_streams(target: Target, *, quarantine: bool = False, at: At | None = None) -> list[str]:
    """The tags of the streams (or quarantined streams), sorted, as of the newest commit or ``at``.

    Reads the one registry document ``create_stream`` maintains: no scan.
    From a URL, neostore.StoreNotFoundError if there is no store (none is created).
    """
    store, tx, owns = resolve(target)
    try:
        key = registry_key(quarantine)
        if at is None and tx is not None:
            raw = tx.get(key)
        else:
            before = snapshot_bound(store, at) if at is not None else Snapshot.latest(store).before
            raw = Snapshot(store, before).get(key)
        pending = tx.gathering(key) if at is None and tx is not None else frozenset()
        attrs = (json.loads(raw).get("attributes") or {}) if raw is not None else {}
        return sorted({*(attrs.get(REGISTRY_ATTR) or []), *pending})
    finally:
        if owns:
            store.close()
