"""`windvane store ...`, run as the installed console script."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

from windvane import neostore

WINDVANE = shutil.which("windvane", path=os.path.dirname(sys.executable)) or "windvane"


def windvane(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([WINDVANE, *args], capture_output=True, text=True, timeout=120)


def test_read_commands_never_create_a_store(tmp_path):
    url = f"sqlite:///{tmp_path}/absent.db"
    said = (
        f"Error: no store at {url}: {tmp_path}/absent.db does not exist "
        "(only writing commands such as import, serve and tail create a store)\n"
    )
    for command in (
        ["store", "info", url],
        ["info", "--store", url],
        ["info", "--store", url, "--json"],
        ["arrays", "ls", url],
        ["arrays", "history", url, "turbine1/vibration"],
        ["store", "pack", url, "--keep-days", "1"],
    ):
        result = windvane(*command)
        assert (result.returncode, result.stdout, result.stderr) == (2, "", said), command
    assert os.listdir(tmp_path) == []  # no file, no -wal, no .lock


def test_read_commands_never_create_a_mariadb_database(mariadb_server):
    import mariadb

    url = f"mariadb://root@/never_made_cli?unix_socket={mariadb_server.socket}"
    said = (
        f"Error: no store in database 'never_made_cli' on the MariaDB server at {mariadb_server.socket}: the "
        "database does not exist (only writing commands such as import, serve and tail create a store)\n"
    )
    for command in (
        ["store", "info", url],
        ["info", "--store", url],
        ["arrays", "ls", url],
        ["store", "pack", url, "--keep-days", "0"],
    ):
        result = windvane(*command)
        assert (result.returncode, result.stdout, result.stderr) == (2, "", said), command
    conn = mariadb.connect(user="root", unix_socket=mariadb_server.socket)
    cur = conn.cursor()
    cur.execute("SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = 'never_made_cli'")
    assert cur.fetchone()[0] == 0
    conn.close()


def test_info_describes_a_store_that_exists(store_url):
    result = windvane("store", "info", store_url)
    assert result.returncode == 2
    if store_url.startswith("sqlite:"):
        assert "does not exist" in result.stderr
    else:  # the test's database exists, empty
        assert f"no store in database '{neostore.parse_url(store_url).database}'" in result.stderr
        assert "it holds no neostore tables" in result.stderr
    with neostore.open(store_url) as store:  # a writer creates it
        assert store.last_transaction() == neostore.ZERO
    result = windvane("store", "info", store_url)
    assert result.returncode == 0, result.stderr
    assert "transactions:    0" in result.stdout
    with neostore.open(store_url) as store:
        txn = store.begin()
        txn.write(store.new_oid(), None, b"x" * 1000)
        txn.vote()
        tid = txn.finish()
    result = windvane("store", "info", store_url)
    assert "transactions:    1" in result.stdout
    assert f"0x{tid.hex()}" in result.stdout


def test_pack_drops_old_revisions(sqlite_url):
    with neostore.open(sqlite_url) as store:
        oid, serial = store.new_oid(), None
        for i in range(3):
            txn = store.begin()
            txn.write(oid, serial, b"revision %d" % i)
            txn.vote()
            serial = txn.finish()
    result = windvane("store", "pack", sqlite_url, "--keep-days", "0")
    assert result.returncode == 0, result.stderr
    assert "removed 2 revisions" in result.stdout and "and 2 values" in result.stdout
    with neostore.open(sqlite_url) as store:
        assert [r.tid for r in store.history(oid, None)] == [serial]
        assert store.load(oid) == (b"revision 2", serial)


def test_pack_says_how_much_disk_it_gave_back(sqlite_url):
    path = neostore.parse_url(sqlite_url).path
    with neostore.open(sqlite_url) as store:
        oid, serial = store.new_oid(), None
        for _ in range(10):
            value = os.urandom(1_000_000)
            txn = store.begin()
            txn.write(oid, serial, value)
            txn.vote()
            serial = txn.finish()
    before = os.path.getsize(path)
    result = windvane("store", "pack", sqlite_url, "--keep-days", "0")
    assert result.returncode == 0, result.stderr
    said = re.search(
        r"^gave back ([\d.]+) MB of disk: the store takes ([\d.]+) MB \(it took ([\d.]+) MB\)$",
        result.stdout,
        re.MULTILINE,
    )
    freed, takes, took = map(float, said.groups())
    assert freed >= 8.9 and abs(took - takes - freed) <= 0.1
    assert takes == round(os.path.getsize(path) / 1e6, 1) and before - os.path.getsize(path) >= 8_900_000
    with neostore.open(sqlite_url) as store:
        assert store.load(oid) == (value, serial)
    result = windvane("store", "pack", sqlite_url, "--no-reclaim", "--vacuum")
    assert result.returncode == 2
    assert "--vacuum gives space back to the file system: drop --no-reclaim" in result.stderr


def test_pack_removes_history_only_as_far_as_told(sqlite_url):
    with neostore.open(sqlite_url) as store:
        oid, serials = store.new_oid(), [None]
        for i in range(3):
            txn = store.begin()
            txn.write(oid, serials[-1], b"revision %d" % i)
            txn.vote()
            serials.append(txn.finish())
    said = (
        "Error: say how much history to keep, with one of --keep-days DAYS (every state of the last DAYS days "
        "stays readable; 0 keeps only the latest) or --before TIME (the states before TIME are removed): "
        "pack removes history for good\n"
    )
    for flags in ([], ["--keep-days", "1", "--before", "2024-01-01"]):
        result = windvane("store", "pack", sqlite_url, *flags)
        assert (result.returncode, result.stdout, result.stderr) == (2, "", said), flags
    result = windvane("store", "pack", sqlite_url, "--before", "yesterday noon")
    assert result.returncode == 2 and "--before 'yesterday noon' is not a time" in result.stderr
    with neostore.open(sqlite_url) as store:  # nothing was removed
        assert [r.tid for r in store.history(oid, None)] == serials[:0:-1] and store.pack_tid() == neostore.ZERO
    # Half way between the first and second commits: the states from the second on stay.
    halfway = (neostore.tids.tid_time(neostore.u64(serials[1])) + neostore.tids.tid_time(neostore.u64(serials[2]))) / 2
    result = windvane("store", "pack", sqlite_url, "--before", f"{halfway:.9f}")
    assert result.returncode == 0, result.stderr
    assert "removed 0 revisions" in result.stdout  # the first revision is the state at the pack point
    result = windvane("store", "pack", sqlite_url, "--keep-days", "1")
    assert result.returncode == 0 and "removed 0 revisions" in result.stdout
    with neostore.open(sqlite_url) as store:
        assert [r.tid for r in store.history(oid, None)] == serials[:0:-1]
        assert serials[1] < store.pack_tid() < serials[2]


@pytest.mark.mariadb  # the connector, not a server
def test_bad_url_exits_2_with_the_reason(tmp_path):
    result = windvane("store", "info", "postgres://host/db")
    assert result.returncode == 2
    assert "unsupported store URL 'postgres://host/db'" in result.stderr
    result = windvane("store", "pack", f"mariadb://root@/db?unix_socket={tmp_path}/absent.sock", "--keep-days", "0")
    assert result.returncode == 1
    assert "cannot connect to MariaDB" in result.stderr and "windvane db start" in result.stderr
