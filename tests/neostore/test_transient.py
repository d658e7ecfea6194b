"""Which of a database's real errors say the store fails for now (the same work may succeed later), asked of
the store that meets them: a lock held by another connection, a killed connection, against a constraint or a
syntax error, which the same statements meet again."""

import sqlite3

import pytest

from windvane import neostore


def _raised(cur, sql: str, params=()) -> BaseException:
    """The error ``sql`` raises on ``cur`` (it must raise one of its database's errors)."""
    if isinstance(cur, (sqlite3.Connection, sqlite3.Cursor)):
        expected: type[BaseException] = sqlite3.Error
    else:
        import mariadb  # late: without the connector the suite still collects this module

        expected = mariadb.Error
    with pytest.raises(expected) as caught:
        cur.execute(sql, params)
    return caught.value


def test_sqlite_a_locked_database_is_transient_a_constraint_or_syntax_error_is_not(sqlite_url):
    with neostore.open(sqlite_url) as store:
        holder = sqlite3.connect(store.url.path, isolation_level=None)
        other = sqlite3.connect(store.url.path, timeout=0, isolation_level=None)
        try:
            holder.execute("BEGIN IMMEDIATE")  # the write lock, held by a second real connection
            locked = _raised(other, "INSERT INTO config (name, value) VALUES ('spare', '1')")
            assert isinstance(locked, sqlite3.OperationalError) and "locked" in str(locked)
            assert store.is_transient(locked)
            holder.execute("ROLLBACK")
            duplicate = _raised(other, "INSERT INTO config (name, value) VALUES ('pack_tid', '1')")
            assert isinstance(duplicate, sqlite3.IntegrityError)
            assert not store.is_transient(duplicate)
            syntax = _raised(other, "SELEC 1")
            assert isinstance(syntax, sqlite3.OperationalError) and "syntax" in str(syntax)
            assert not store.is_transient(syntax)
        finally:
            holder.close()
            other.close()


def test_sqlite_a_commit_the_lock_keeps_out_is_transient_through_the_store_s_own_error(sqlite_url):
    """The driver's error reaches the caller as neostore's DatabaseError: the store judges it by its cause."""
    with neostore.open(sqlite_url, busy_timeout=0.05) as store:
        holder = sqlite3.connect(store.url.path, isolation_level=None)
        try:
            holder.execute("BEGIN IMMEDIATE")
            txn = store.begin()
            txn.write((1).to_bytes(8, "big"), None, b"value")  # an oid of its own: new_oid would write
            with pytest.raises(neostore.DatabaseError) as failed:
                txn.commit()
            assert isinstance(failed.value.__cause__, sqlite3.OperationalError)
            assert store.is_transient(failed.value)
        finally:
            holder.close()
    assert not store.is_transient(neostore.ConflictError(oid=b"\0" * 8, serials=(b"\0" * 8, b"\0" * 8)))
    assert not store.is_transient(ValueError("not the store's"))


def test_mariadb_a_lock_wait_timeout_or_a_killed_connection_is_transient_a_constraint_or_syntax_error_is_not(
    mariadb_url,
):
    import mariadb  # late: without the connector the suite still collects this module

    with neostore.open(mariadb_url) as store:
        holder = store.backend.connect(for_writing=True)
        other = store.backend.connect(for_writing=True)
        try:
            hold, cur = holder.cursor(), other.cursor()
            store.backend.begin(holder)
            hold.execute("UPDATE config SET value = value WHERE name = 'pack_tid'")  # a row lock, held
            cur.execute("SET SESSION innodb_lock_wait_timeout = 1")
            store.backend.begin(other)
            waited = _raised(cur, "UPDATE config SET value = value WHERE name = 'pack_tid'")
            assert isinstance(waited, mariadb.Error) and waited.errno == 1205  # ER_LOCK_WAIT_TIMEOUT
            assert store.is_transient(waited)
            holder.rollback()
            other.rollback()
            duplicate = _raised(cur, "INSERT INTO config (name, value) VALUES ('pack_tid', '1')")
            assert isinstance(duplicate, mariadb.Error) and duplicate.errno == 1062  # ER_DUP_ENTRY
            assert not store.is_transient(duplicate)
            syntax = _raised(cur, "SELEC 1")
            assert isinstance(syntax, mariadb.Error) and syntax.errno == 1064  # ER_PARSE_ERROR
            assert not store.is_transient(syntax)
            cur.execute("SELECT CONNECTION_ID()")
            (victim,) = cur.fetchone()
            hold.execute(f"KILL {int(victim)}")
            killed = _raised(cur, "SELECT 1")
            assert isinstance(killed, mariadb.Error)
            assert store.is_transient(killed)
        finally:
            store.backend.close_connection(holder)
            store.backend.close_connection(other)
