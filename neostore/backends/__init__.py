"""Database engines a Store runs on."""

from __future__ import annotations

from typing import Any

from ..url import StoreURL
from .base import SCHEMA_VERSION, Backend


def backend_for(url: StoreURL, **options: Any) -> Backend:
    """The backend for a parsed URL; ``create=False`` (an option of both) makes no file or database."""
    if url.scheme == "sqlite":
        from .sqlite import SQLiteBackend

        return SQLiteBackend(url, **options)
    try:
        from .mariadb import MariaDBBackend
    except ImportError as exc:
        if exc.name != "mariadb":
            raise
        from ..errors import DatabaseError

        raise DatabaseError(
            f"{url} needs the MariaDB connector: pip install 'windvane[mariadb]' "
            "(it builds against libmariadb-dev: apt-get install libmariadb-dev gcc python3-dev)"
        ) from None
    return MariaDBBackend(url, **options)


__all__ = ["SCHEMA_VERSION", "Backend", "backend_for"]
