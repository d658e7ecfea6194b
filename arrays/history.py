"""An array's history: the commits that touched it, oldest first."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from windvane import neostore

from .errors import ArrayNotFoundError, InvalidTagError
from .keys import next_tid_after
from .stream_schema import stream_path
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


def _paths(name: str, quarantine: bool) -> list[str]:
    """Where ``name`` may have been written: the quarantine stream's path, or the path itself, then the
    stream's if ``name`` can be a tag."""
    if quarantine:
        return [stream_path(name, quarantine=True)]
    paths = [name.rstrip("/")]
    if "/" not in paths[0]:
        try:
            paths.append(stream_path(name))
        except InvalidTagError:
            pass
    return paths


def history(url_or_store: str | neostore.Store, name: str, *, quarantine: bool = False) -> list[Commit]:
    """The commits that wrote any key of array (or group) ``name``, or of stream ``name``, oldest first.

    ``name`` is an array's or group's path (``"streams/web.gz"``,
    ``"plant/line1"``) or, as every stream function takes it, a stream's
    tag (``"web.gz"``; with ``quarantine``, its quarantine stream's). A
    name that is both (a tag that is also an array at the store's root) is
    the array. After a pack, the commits older than its point are those
    whose revisions it kept (each key's revision as of that point), marked
    ``openable=False``. ArrayNotFoundError if nothing was ever written there.
    """
    store = neostore.open(url_or_store, read_only=True) if isinstance(url_or_store, str) else url_or_store
    owned = store is not url_or_store
    try:
        for path in _paths(name, quarantine):
            # Read after the history: a pack finishing in between then marks the commits it reached, where
            # reading it first would leave them marked openable.
            infos = store.name_history(f"{path}/".encode())
            if infos:
                break
        packed = store.pack_tid()
    finally:
        if owned:
            store.close()
    if not infos:
        raise ArrayNotFoundError(name, "in the store's history (nor a stream of that tag)")
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
