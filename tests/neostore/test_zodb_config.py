"""The ``<neostore>`` ZConfig section: ZODB configuration files can open a NeoStorage."""

from __future__ import annotations

import pytest
import transaction
import ZConfig
import ZODB.config
from persistent.mapping import PersistentMapping
from ZODB import POSException

from windvane.neostore.zodb import NeoStorage


def _config(url: str, extra: str = "") -> str:
    return f"""
%import windvane.neostore
<zodb>
  <neostore>
    url {url}
    {extra}
  </neostore>
</zodb>
"""


@pytest.mark.parametrize("backend", ["sqlite", "mariadb"])
def test_database_from_string_commits_and_reopens(backend: str, request) -> None:
    url = request.getfixturevalue(f"{backend}_url")
    db = ZODB.config.databaseFromString(_config(url))
    try:
        assert isinstance(db.storage, NeoStorage)
        assert not db.storage.isReadOnly()
        with db.transaction() as conn:
            conn.root()["config"] = PersistentMapping(value=42)
    finally:
        db.close()

    # A second database from the same configuration sees the committed data.
    db = ZODB.config.databaseFromString(_config(url))
    try:
        with db.transaction() as conn:
            assert conn.root()["config"]["value"] == 42
    finally:
        db.close()


@pytest.mark.parametrize("backend", ["sqlite", "mariadb"])
def test_section_options_reach_the_storage(backend: str, request) -> None:
    url = request.getfixturevalue(f"{backend}_url")
    ZODB.config.databaseFromString(_config(url)).close()  # create the database

    extra = (
        "read-only true\n    pack-gc false\n    name configured\n    compression-level 0\n"
        "    compression-threads 2\n    commit-lock-timeout 5"
    )
    storage = ZODB.config.storageFromString(
        f"%import windvane.neostore\n<neostore>\n  url {url}\n  {extra}\n</neostore>\n"
    )
    try:
        assert storage.isReadOnly()
        assert storage.getName() == storage.sortKey() == "configured"
        assert storage.pack_gc is False
        assert storage.backing_store.commit_lock_timeout == 5.0
        assert storage.backing_store.codec.level == 0
        assert storage.backing_store.codec.threads == 2
        with pytest.raises(POSException.ReadOnlyError):
            storage.new_oid()
    finally:
        storage.close()


def test_defaults_and_name_without_password(mariadb_url: str) -> None:
    storage = ZODB.config.storageFromString(
        f"%import windvane.neostore\n<neostore>\n  url {mariadb_url}\n</neostore>\n"
    )
    try:
        assert not storage.isReadOnly() and storage.pack_gc is True
        assert storage.getName().startswith("mariadb:") and "@" not in storage.getName()
    finally:
        storage.close()


def test_url_is_required() -> None:
    with pytest.raises(ZConfig.ConfigurationError, match="url"):
        ZODB.config.storageFromString("%import windvane.neostore\n<neostore>\n</neostore>\n")


def test_bad_url_is_reported() -> None:
    with pytest.raises(ValueError, match="unsupported store URL"):
        ZODB.config.storageFromString("%import windvane.neostore\n<neostore>\n  url postgres://x/y\n</neostore>\n")


def test_transaction_through_configured_database(sqlite_url: str) -> None:
    """The configured DB is an ordinary ZODB database: the global transaction manager works."""
    db = ZODB.config.databaseFromString(_config(sqlite_url))
    try:
        conn = db.open()
        conn.root()["n"] = 1
        transaction.commit()
        conn.root()["n"] = 2
        transaction.abort()
        assert conn.root()["n"] == 1
        conn.close()
    finally:
        db.close()
