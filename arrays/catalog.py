"""What a store holds: the arrays of a zarr hierarchy, found by their metadata keys."""

from __future__ import annotations

from windvane import neostore

from .keys import Snapshot
from .metadata import METADATA_KEY, node_type


def array_names(url_or_store: str | neostore.Store, prefix: str = "") -> list[str]:
    """The names of the arrays whose names start with ``prefix``, sorted, as of the latest commit."""
    store = neostore.open(url_or_store, read_only=True) if isinstance(url_or_store, str) else url_or_store
    owned = store is not url_or_store
    try:
        snapshot = Snapshot.latest(store)
        suffix = "/" + METADATA_KEY
        candidates = [e.key for e in snapshot.list(prefix) if e.key.endswith(suffix)]
        documents = snapshot.get_many(candidates)
        return [key[: -len(suffix)] for key in candidates if node_type(documents.get(key, b"")) == "array"]
    finally:
        if owned:
            store.close()
