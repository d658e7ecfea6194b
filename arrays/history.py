"""An array's history: the commits that touched it, oldest first."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from windvane import neostore

from .errors import ArrayNotFoundError
from .keys import next_tid_after
from .timetravel import packed_away


@dataclass(frozen=True)
class Commit:
    """One commit that changed an array: read the array as it left it with ``arrays.open(url, name, at=tid)``.

    ``openable`` is False for a commit older than the store's last pack: the
    state it left was removed, and opening it raises SnapshotError.
    """

    tid: bytes
    time: datetime  # UTC
    message: str
    metadata: dict[str, Any] = field(hash=False)
    user: str
    openable: bool


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

    After a pack, the commits older than its point are those whose revisions
    it kept (each key's revision as of that point), marked ``openable=False``.
    ArrayNotFoundError if nothing was ever written there.
    """
    store = neostore.open(url_or_store, read_only=True) if isinstance(url_or_store, str) else url_or_store
    owned = store is not url_or_store
    try:
        # Read after the history: a pack finishing in between then marks the commits it reached, where
        # reading it first would leave them marked openable.
        infos = store.name_history(f"{name.rstrip('/')}/".encode())
        packed = store.pack_tid()
    finally:
        if owned:
            store.close()
    if not infos:
        raise ArrayNotFoundError(name, "in the store's history")
    return [
        Commit(
            info.tid,
            datetime.fromtimestamp(info.time, tz=UTC),
            info.description.decode("utf-8", "replace"),
            _metadata(info.extension),
            info.user.decode("utf-8", "replace"),
            not packed_away(next_tid_after(info.tid), packed),
        )
        for info in infos
    ]
