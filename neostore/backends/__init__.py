"""Database engines a Store runs on."""

from __future__ import annotations

from typing import Any

from ..errors import DatabaseError
from ..url import StoreURL
from .base import SCHEMA_VERSION, Backend
from .sqlite import SQLiteBackend


def backend_for(url: StoreURL, **options: Any) -> Backend:
    """The backend for a parsed URL; ``create=False`` (an option of both) makes no file or database."""
    if url.scheme == "sqlite":
        return SQLiteBackend(url, **options)
    try:
        from .mariadb import MariaDBBackend  # the connector loads only for MariaDB stores, and may be missing
    except ImportError as exc:
        if exc.name != "mariadb":
            raise
        raise DatabaseError(
            f"{url} needs the MariaDB connector: pip install 'windvane[mariadb]' "
            "(it builds against libmariadb-dev: apt-get install libmariadb-dev gcc python3-dev)"
        ) from None
    return MariaDBBackend(url, **options)


__all__ = ["SCHEMA_VERSION", "Backend", "backend_for"]
