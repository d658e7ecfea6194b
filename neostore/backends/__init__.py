"""Database engines a Store runs on."""

from __future__ import annotations

from ..url import StoreURL
from .base import SCHEMA_VERSION, Backend


def backend_for(url: StoreURL, **options) -> Backend:
    """The backend for a parsed URL."""
    if url.scheme == "sqlite":
        from .sqlite import SQLiteBackend

        return SQLiteBackend(url, **options)
    from .mariadb import MariaDBBackend

    return MariaDBBackend(url, **options)


__all__ = ["Backend", "SCHEMA_VERSION", "backend_for"]
