"""Creating a store's tables, and bringing an older schema up to date, when a Store opens."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from . import errors
from .backends import SCHEMA_VERSION
from .blobs.tier import TIERED
from .indoubt import discard_unfinished
from .pool import rollback_quietly, write_transaction
from .url import BLOB_THRESHOLD, redacted, with_tier

if TYPE_CHECKING:
    from .store import Store

log = logging.getLogger(__name__)

#: The ``config`` rows of the blob tier: where the store keeps its big values, and the endpoint last used there.
_LOCATION, _ENDPOINT = "blobs", "blobs_endpoint"


def prepare_database(store: Store) -> None:
    """Make the database ready for ``store``: create, refuse or upgrade its schema; discard dead writers' votes.

    Raises StoreNotFoundError when there is no store and ``store.create`` is
    false, SchemaVersionError when the schema is newer than this neostore's,
    or older and the store is read-only.
    """
    backend = store.backend
    conn = backend.connect(for_writing=True)
    try:
        # A cluster node may not have applied the commits that made the store yet: it would find no store
        # (or make one again). This connection only prepares, and is closed after.
        backend.read_causally(conn)
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


def _init_rows(store: Store, conn: Any, attempts: int = 5) -> None:
    """The first rows of a new store, unless another process wrote them first. On a cluster two nodes may
    write them at once: one of the two is rolled back, and looks again."""
    for attempt in range(1, attempts + 1):
        try:
            with write_transaction(store.backend, conn):
                cur = conn.cursor()
                cur.execute("SELECT COUNT(*) FROM config WHERE name='version'")
                if cur.fetchone()[0] == 0:
                    cur.execute("INSERT INTO config (name, value) VALUES ('version', ?)", (str(SCHEMA_VERSION),))
                    cur.execute("INSERT INTO config (name, value) VALUES ('pack_tid', '0')")
                    cur.execute("INSERT INTO oidgen (id, next_oid) VALUES (0, 1)")
        except Exception as exc:
            if attempt == attempts or not store.backend.is_rolled_back(exc):
                raise
        else:
            return


def check_blob_location(store: Store, conn: Any) -> None:
    """Refuse a URL whose ``blobs=`` differs from where the store keeps its big values; record it on first use.

    A store has one blob location, kept in its ``config`` table with the
    endpoint last used to reach it (only for messages: the same bucket may be
    reached at another address). Opening it without that location, or with
    another, would leave values unreadable or split between two places:
    refused with the URL to give.
    """
    cur = conn.cursor()
    cur.execute(f"SELECT name, value FROM config WHERE name IN ('{_LOCATION}', '{_ENDPOINT}')")
    rows = dict(cur.fetchall())
    rollback_quietly(conn)
    recorded, wanted, endpoint = rows.get(_LOCATION), store.url.blobs, store.url.endpoint
    if recorded is None and (wanted is None or store.read_only):
        return
    if recorded is not None and recorded != wanted:
        raise errors.BlobLocationError(_location_refused(store, recorded, rows.get(_ENDPOINT) or endpoint))
    if store.read_only or (recorded is not None and endpoint == rows.get(_ENDPOINT)):
        return
    # Processes opening a new store together (the workers of one server) may all record it: the first
    # row stands, and a location recorded meanwhile by another opener is checked like one found before.
    insert = f"{store.backend.insert_ignore} INTO config (name, value) VALUES"
    with write_transaction(store.backend, conn):
        cur = conn.cursor()
        if recorded is None:
            cur.execute(f"{insert} ('{_LOCATION}', ?)", (wanted,))
            cur.execute(f"SELECT value FROM config WHERE name = '{_LOCATION}'")
            recorded = cur.fetchone()[0]
            if recorded != wanted:
                raise errors.BlobLocationError(_location_refused(store, recorded, endpoint))
        cur.execute(f"DELETE FROM config WHERE name = '{_ENDPOINT}'")
        if endpoint is not None:
            cur.execute(f"{insert} ('{_ENDPOINT}', ?)", (endpoint,))


def _location_refused(store: Store, recorded: str, endpoint: str | None) -> str:
    """The refusal of a URL without the store's blob location, or with another: the whole URL to use instead."""
    url = store.url
    threshold = url.blob_threshold if url.blob_threshold != BLOB_THRESHOLD else None
    use = redacted(with_tier(url.text, recorded, endpoint, threshold))
    return (
        f"{url.display_name} keeps its big values in {recorded}: open it as '{use}'"
        + ("" if endpoint else " (add &endpoint=http://HOST:PORT unless the object store is AWS S3)")
        + (
            ", not without ?blobs="
            if url.blobs is None
            else f", not with ?blobs={url.blobs} (windvane store tier --to db, then --to the new location, "
            "moves the values)"
        )
    )


def keep_blob_location(store: Store, cur: Any) -> None:
    """Under the commit lock, as rows of tiered values go in: record the location again if it was dropped."""
    cur.execute(
        f"{store.backend.insert_ignore} INTO config (name, value) VALUES ('{_LOCATION}', ?)", (store.url.blobs,)
    )


def forget_unused_blob_location(cur: Any) -> bool:
    """Under the commit lock: drop the store's blob location if no row keeps its value there; whether one was."""
    cur.execute(f"SELECT 1 FROM data WHERE chunks = {TIERED} LIMIT 1")
    if cur.fetchone() is not None:
        return False
    cur.execute(f"DELETE FROM config WHERE name IN ('{_LOCATION}', '{_ENDPOINT}')")
    return bool(cur.rowcount)
