"""Creating a store's tables, and bringing an older schema up to date, when a Store opens."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from . import errors
from .backends import SCHEMA_VERSION
from .indoubt import discard_unfinished
from .pool import rollback_quietly, write_transaction

if TYPE_CHECKING:
    from .store import Store

log = logging.getLogger(__name__)


def prepare_database(store: Store) -> None:
    """Make the database ready for ``store``: create, refuse or upgrade its schema; discard dead writers' votes.

    Raises StoreNotFoundError when there is no store and ``store.create`` is
    false, SchemaVersionError when the schema is newer than this neostore's,
    or older and the store is read-only.
    """
    backend = store.backend
    conn = backend.connect(for_writing=True)
    try:
        version = schema_version(store, conn.cursor())
        if version is None:
            if not store.create:
                raise errors.StoreNotFoundError(f"no store in {backend.location}: it holds no neostore tables")
            version = _create_database(store, conn)
        if version > SCHEMA_VERSION:
            raise errors.SchemaVersionError(
                f"{store.url} has schema version {version}, newer than this neostore's "
                f"{SCHEMA_VERSION}: upgrade windvane to open it"
            )
        elif version < SCHEMA_VERSION:
            if store.read_only:
                raise errors.SchemaVersionError(
                    f"{store.url} has schema version {version}; this neostore needs {SCHEMA_VERSION}: "
                    "open it writable once to upgrade it"
                )
            _upgrade_database(store, conn, version)
        check_blob_location(store, conn)
        if not store.read_only:
            discard_unfinished(backend, conn, timeout=0)
    finally:
        backend.close_connection(conn)


def _create_database(store: Store, conn: Any) -> int:
    """Create the schema once, even when several processes open a new database at once."""
    backend = store.backend
    backend.acquire_commit_lock(conn, store.commit_lock_timeout)
    try:
        version = schema_version(store, conn.cursor())
        if version is None:
            backend.create_schema(conn)
            _init_rows(store, conn)
            version = SCHEMA_VERSION
    finally:
        backend.release_commit_lock(conn)
    return version


def _upgrade_database(store: Store, conn: Any, version: int) -> None:
    """Bring an older schema up to date. Version 2 only added tables."""
    backend = store.backend
    backend.acquire_commit_lock(conn, store.commit_lock_timeout)
    try:
        current = schema_version(store, conn.cursor())
        if current is not None and current < SCHEMA_VERSION:
            log.info("upgrading %s from schema version %d to %d", store.url, version, SCHEMA_VERSION)
            backend.create_schema(conn)
            with write_transaction(backend, conn):
                cur = conn.cursor()
                cur.execute("UPDATE config SET value = ? WHERE name = 'version'", (str(SCHEMA_VERSION),))
    finally:
        backend.release_commit_lock(conn)


def schema_version(store: Store, cur: Any) -> int | None:
    """The schema version the database holds, None if it has no neostore tables."""
    # Ask whether the table exists rather than catch a failing SELECT:
    # the MariaDB connector keeps a failed statement's exception, and with
    # it the connection, alive.
    if not store.backend.has_table(cur, "config"):
        rollback_quietly(cur.connection)
        return None
    cur.execute("SELECT value FROM config WHERE name='version'")
    row = cur.fetchone()
    rollback_quietly(cur.connection)
    return int(row[0]) if row else None


def _init_rows(store: Store, conn: Any) -> None:
    with write_transaction(store.backend, conn):
        cur = conn.cursor()
        cur.execute("SELECT COUNT(*) FROM config WHERE name='version'")
        if cur.fetchone()[0] == 0:
            cur.execute("INSERT INTO config (name, value) VALUES ('version', ?)", (str(SCHEMA_VERSION),))
            cur.execute("INSERT INTO config (name, value) VALUES ('pack_tid', '0')")
            cur.execute("INSERT INTO oidgen (id, next_oid) VALUES (0, 1)")


def check_blob_location(store: Store, conn: Any) -> None:
    """Refuse a URL whose ``blobs=`` differs from where the store keeps its big values; record it on first use.

    A store has one blob location, kept in its ``config`` table. Opening it
    without that location, or with another, would leave values unreadable
    or split between two places: refused with the location to give.
    """
    cur = conn.cursor()
    cur.execute("SELECT value FROM config WHERE name = 'blobs'")
    row = cur.fetchone()
    rollback_quietly(conn)
    recorded = row[0] if row else None
    wanted = store.url.blobs
    if recorded == wanted or (recorded is None and (wanted is None or store.read_only)):
        return
    if recorded is None:
        with write_transaction(store.backend, conn):
            conn.cursor().execute("INSERT INTO config (name, value) VALUES ('blobs', ?)", (wanted,))
        return
    raise errors.BlobStoreError(
        f"{store.url.display_name} keeps its big values in {recorded}: open it with "
        f"?blobs={recorded} (and its endpoint), "
        + ("not without it" if wanted is None else f"not {wanted}; windvane store tier moves them")
    )
