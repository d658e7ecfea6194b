"""An array's history: the commits that touched it, oldest first."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import neostore

from .errors import ArrayNotFoundError


@dataclass(frozen=True)
class Commit:
    """One commit that changed an array: read the array as it left it with ``arrays.open(url, name, at=tid)``."""

    tid: bytes
    time: datetime  # UTC
    message: str
    metadata: dict[str, Any] = field(hash=False)
    user: str


def _metadata(extension: bytes) -> dict[str, Any]:
    """The JSON metadata :class:`arrays.Transaction` records; other writers' extensions read as ``{}``."""
    if not extension:
        return {}
    try:
        found = json.loads(extension)
    except ValueError:  # e.g. a pickled ZODB extension
        return {}
    return found if isinstance(found, dict) else {}


def history(url_or_store: str | neostore.Store, name: str) -> list[Commit]:
    """The commits that wrote any key of array (or group) ``name``, oldest first.

    ArrayNotFoundError if nothing was ever written there.
    """
    owned = isinstance(url_or_store, str)
    store = neostore.open(url_or_store, read_only=True) if owned else url_or_store
    try:
        infos = store.name_history(f"{name.rstrip('/')}/".encode())
    finally:
        if owned:
            store.close()
    if not infos:
        raise ArrayNotFoundError(name, "in the store's history")
    return [
        Commit(
            info.tid,
            datetime.fromtimestamp(info.time, tz=timezone.utc),
            info.description.decode("utf-8", "replace"),
            _metadata(info.extension),
            info.user.decode("utf-8", "replace"),
        )
        for info in infos
    ]
