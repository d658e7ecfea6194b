"""Changing what streams hold as a whole: refill one with other rows, move it to another tag, remove it.

Each function works inside a :class:`~arrays.Transaction` (taking its
commit lock) and commits nothing itself, so the change becomes visible in
the caller's commit, with whatever else it writes, or not at all. Nothing
is erased from history: an earlier snapshot (``open_stream(..., at=tid)``)
still reads the rows as they were, until a pack drops the revisions.

A stream is refilled by emptying its arrays (their ``zarr.json`` kept, at
length 0, every chunk and the row log deleted) and appending the rows
again: chunks holding the same rows encode to the same bytes, which the
store keeps once. The rows pass through memory, a whole stream at a time.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from typing import Any

import numpy as np

from .errors import StreamExistsError
from .metadata import METADATA_KEY, ArrayMeta, group_document
from .stream_registry import open_stream, registry_key, write_registry
from .stream_schema import REGISTRY_ATTR, TIME, stream_path
from .transaction import Transaction


def read_rows(tx: Transaction, tag: str, *, quarantine: bool = False) -> dict[str, np.ndarray]:
    """Every row of stream ``tag`` as ``{column: values}``, ``time`` first, as ``tx`` sees it (under its lock)."""
    tx.lock()
    stream = open_stream(tx, tag, quarantine=quarantine)
    return {name: stream[name][:] for name in [TIME, *stream.columns]}


def refill(
    tx: Transaction, tag: str, rows: Mapping[str, Any], *, quarantine: bool = False, to: str | None = None
) -> int:
    """Make stream ``tag`` hold exactly ``rows`` (every column, ``time`` included); returns their count.

    With ``to``, the rows go to a new stream ``to`` (same columns, codecs,
    chunks and attributes) and ``tag`` is removed: a rename.
    StreamNotFoundError if there is no stream ``tag``; StreamExistsError if
    something is at ``to``'s path already.
    """
    tx.lock()
    source = open_stream(tx, tag, quarantine=quarantine)
    old_path = source.path
    new_path = old_path if to is None else stream_path(to, quarantine=quarantine)
    if to is not None and to != tag and tx.occupied([f"{new_path}/"]):
        raise StreamExistsError(f"stream {to!r} already exists at {new_path!r}; remove it first or pick another name")
    names = [TIME, *source.columns]
    keys = [f"{old_path}/{METADATA_KEY}", *(f"{old_path}/{name}/{METADATA_KEY}" for name in names)]
    documents = tx.get_many(keys)
    writes = {f"{new_path}/{METADATA_KEY}": documents[keys[0]]}
    for name, key in zip(names, keys[1:]):
        meta = ArrayMeta.from_bytes(documents[key], f"{old_path}/{name}")
        writes[f"{new_path}/{name}/{METADATA_KEY}"] = meta.with_shape((0, *meta.shape[1:])).to_bytes()
    tx.delete_prefix(f"{old_path}/")
    tx.set_many(writes)
    if to is not None and new_path != old_path:
        _unregister(tx, tag, quarantine=quarantine)
        root_key = registry_key(quarantine)
        tx.gathered(root_key, functools.partial(write_registry, tx, root_key)).add(to)
    target = open_stream(tx, to if to is not None else tag, quarantine=quarantine)
    count = len(rows[TIME])
    if count:
        target.append(rows)
    return count


def remove(tx: Transaction, tag: str, *, quarantine: bool = False) -> None:
    """Remove stream ``tag``: every key under its path and its entry in the registry.

    StreamNotFoundError if there is no stream ``tag``.
    """
    tx.lock()
    stream = open_stream(tx, tag, quarantine=quarantine)
    tx.delete_prefix(f"{stream.path}/")
    _unregister(tx, tag, quarantine=quarantine)


def _unregister(tx: Transaction, tag: str, *, quarantine: bool) -> None:
    """Take ``tag`` out of the registry of streams (or quarantine streams)."""
    key = registry_key(quarantine)
    raw = tx.get(key)
    attrs: dict[str, Any] = (json.loads(raw).get("attributes") or {}) if raw is not None else {}
    registry = [t for t in attrs.get(REGISTRY_ATTR) or [] if t != tag]
    tx.set(key, group_document({**attrs, REGISTRY_ATTR: registry}))
