"""neostore's connection pool: the one writer() pattern, readers, dead-connection retry, the lock holder."""

from __future__ import annotations

import re
import threading
from pathlib import Path

import pytest

from windvane import neostore
from windvane.neostore.pool import ConnectionPool


def rows(store: neostore.Store, sql: str) -> list[tuple]:
    return store.pool.query(sql)


def next_oid(store: neostore.Store) -> int:
    (row,) = rows(store, "SELECT next_oid FROM oidgen WHERE id = 0")
    return int(row[0])


def test_writer_commits_at_the_end_of_the_block_and_pools_the_connection(store_url):
    with neostore.open(store_url) as store, neostore.open(store_url) as other:
        before = next_oid(other)
        with store.pool.writer() as conn:
            cur = conn.cursor()
            cur.execute("UPDATE oidgen SET next_oid = next_oid + 5 WHERE id = 0")
            cur.close()
        assert next_oid(other) == before + 5
        with store.pool.writer() as again:
            assert again is conn  # given back, and taken again


def test_writer_rolls_back_a_block_that_raises_and_closes_its_connection(store_url):
    with neostore.open(store_url) as store, neostore.open(store_url) as other:
        before = next_oid(other)
        with pytest.raises(RuntimeError, match="the block failed"):
            with store.pool.writer() as conn:
                cur = conn.cursor()
                cur.execute("UPDATE oidgen SET next_oid = next_oid + 5 WHERE id = 0")
                cur.close()
                raise RuntimeError("the block failed")
        assert next_oid(other) == before
        with store.pool.writer() as fresh:
            assert fresh is not conn  # the failed one was closed, not pooled
        # The store goes on: a name binds (through writer()) and its oid comes from oidgen.
        assert len(store.oids_for([b"after/failure"], create=True)) == 1


def test_writer_without_transaction_leaves_the_block_its_own(sqlite_url):
    """``transaction=False`` begins nothing: on SQLite another connection writes meanwhile (pack relies on it)."""
    with neostore.open(sqlite_url) as store, neostore.open(sqlite_url, commit_lock_timeout=5) as other:
        with store.pool.writer(transaction=False) as conn:
            assert not conn.in_transaction
            txn = other.begin()
            txn.write(other.new_oid(), None, b"written while pack's writer is taken")
            txn.commit()


def test_a_pooled_writer_the_server_dropped_is_replaced(mariadb_url):
    with neostore.open(mariadb_url) as store, neostore.open(mariadb_url) as other:
        with store.pool.writer() as conn:
            pass
        killer = other.backend.connect(for_writing=True)
        try:
            killer.cursor().execute(f"KILL {conn.connection_id}")
        finally:
            other.backend.close_connection(killer)
        before = next_oid(other)
        with store.pool.writer() as replaced:
            assert replaced is not conn
            cur = replaced.cursor()
            cur.execute("UPDATE oidgen SET next_oid = next_oid + 1 WHERE id = 0")
            cur.close()
        assert next_oid(other) == before + 1


def test_a_reader_the_server_dropped_is_replaced_and_the_read_run_again(mariadb_url):
    with neostore.open(mariadb_url) as store, neostore.open(mariadb_url) as other:
        txn = store.begin()
        oid = store.new_oid()
        txn.write(oid, None, b"value")
        txn.commit()
        reader = store.pool.reader()
        killer = other.backend.connect(for_writing=True)
        try:
            killer.cursor().execute(f"KILL {reader.connection_id}")
        finally:
            other.backend.close_connection(killer)
        assert store.load(oid)[0] == b"value"
        assert store.pool.reader() is not reader


def test_the_lock_holder_is_the_holding_threads_only(sqlite_url):
    with neostore.open(sqlite_url) as store:
        txn = store.begin()
        txn.lock()
        seen = []
        thread = threading.Thread(target=lambda: seen.append(store.pool.lock_holder()))
        thread.start()
        thread.join()
        assert store.pool.lock_holder() is txn.session.connection and seen == [None]
        txn.abort()
        assert store.pool.lock_holder() is None


def test_a_closed_pool_makes_no_reader_and_closes_writers_given_back(sqlite_url):
    store = neostore.open(sqlite_url)
    pool: ConnectionPool = store.pool
    conn = pool.take_writer()
    store.close()
    with pytest.raises(neostore.NeoStoreError, match="the store is closed"):
        pool.reader()
    pool.give_writer(conn)
    with pytest.raises(Exception, match="closed"):
        conn.execute("SELECT 1")


def test_names_and_pack_use_no_private_part_of_the_store():
    source = Path(neostore.__file__).parent
    private = {name: re.findall(r"\bstore_?\._\w+", (source / name).read_text()) for name in ("names.py", "pack.py")}
    assert private == {"names.py": [], "pack.py": []}


def test_every_write_outside_a_transaction_takes_its_writer_through_writer():
    """Only a Store transaction, which keeps its writer from its first write to its end, takes one by hand."""
    source = Path(neostore.__file__).parent
    takers = [
        f"{path.name}:{number}"
        for path in sorted(source.rglob("*.py"))
        if path.name != "pool.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if "take_writer(" in line
    ]
    assert len(takers) == 1 and takers[0].startswith("session.py:")
