"""neostore.Store on real SQLite files and a real MariaDB server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

import windvane.neostore.upload
from windvane import neostore
from windvane.neostore import ZERO, p64
from windvane.neostore.url import Node
from windvane.neostore.values import RAW, ZSTD, value_hash

SENSOR_LIKE = b"".join(b"%08.3f," % (i * 0.001) for i in range(20000))  # compresses well


def commit(store, writes, **meta):
    """Commit ``{oid: (serial, value)}``; return the tid."""
    txn = store.begin(**meta)
    for oid, (serial, value) in writes.items():
        txn.write(oid, serial, value)
    txn.vote()
    return txn.finish()


def raw_rows(store, sql, params=()):
    """Rows straight from the database, bypassing the Store's read path."""
    return store.query(sql, params)


# -- URLs --------------------------------------------------------------------


@pytest.mark.parametrize(
    "url, expected",
    [
        ("sqlite:///rel/x.db", {"scheme": "sqlite", "path": os.path.abspath("rel/x.db")}),
        ("sqlite:////abs/path.db", {"scheme": "sqlite", "path": "/abs/path.db"}),
        (
            "mariadb://u:p%40ss@db.example:3307/wv",
            {"user": "u", "password": "p@ss", "nodes": (Node("db.example", 3307),), "database": "wv"},
        ),
        (
            "mariadb://root@/wv?unix_socket=/run/s.sock&engine=rocksdb",
            {"user": "root", "nodes": (Node(unix_socket="/run/s.sock"),), "database": "wv", "engine": "ROCKSDB"},
        ),
        (
            "mariadb://wv@db1:3306,db2,[fd00::3]:3307/plant",
            {"nodes": (Node("db1", 3306), Node("db2"), Node("fd00::3", 3307)), "replicas": (), "database": "plant"},
        ),
        (
            "mariadb://root@/wv?unix_socket=/a/s.sock,/b/s.sock&replicas=/r/s.sock,r2:3310",
            {
                "nodes": (Node(unix_socket="/a/s.sock"), Node(unix_socket="/b/s.sock")),
                "replicas": (Node(unix_socket="/r/s.sock"), Node("r2", 3310)),
                "display_name": "mariadb:/a/s.sock,/b/s.sock/wv",
            },
        ),
    ],
)
def test_url_syntax(url, expected):
    parsed = neostore.parse_url(url)
    for name, value in expected.items():
        assert getattr(parsed, name) == value
    assert str(parsed) == url


@pytest.mark.parametrize(
    "url, complaint",
    [
        ("postgres://x/y", "unsupported store URL"),
        ("sqlite://host/x.db", "has no host"),
        ("sqlite:///", "names no database file"),
        ("mariadb://u@h/", "name one database"),
        ("mariadb://u@/db", "unix_socket"),
        ("mariadb://u@h/db?engine=myisam", "unknown engine 'myisam'"),
        ("mariadb://u@h:99999/db", "port 1-65535"),
        ("mariadb://u@h1,h2:x/db", "'h2:x' in host is not host or host:port"),
        ("mariadb://u@h1,,h3/db", "host names ''"),
        ("mariadb://u@/db?unix_socket=/a/s,relative", "write an absolute socket path"),
        ("mariadb://u@h/db?replicas=r1:70000", "in replicas is not host or host:port"),
    ],
)
def test_bad_url_names_the_problem(url, complaint):
    with pytest.raises(neostore.InvalidURLError, match=complaint):
        neostore.open(url)


def test_sqlite_in_missing_directory_is_refused(tmp_path):
    with pytest.raises(neostore.DatabaseError, match="does not exist"):
        neostore.open(f"sqlite:///{tmp_path}/nowhere/x.db")


# -- commits and reads ---------------------------------------------------------


def test_new_database_gets_schema_and_round_trips(store_url):
    with neostore.open(store_url) as store:
        assert store.last_transaction() == ZERO
        oid = store.new_oid()
        tid = commit(store, {oid: (None, b"v1")}, user=b"me", description=b"first")
        assert store.load(oid) == (b"v1", tid)
        assert store.last_transaction() == tid
        info = store.transaction_info(tid)
        assert (info.user, info.description, info.packed) == (b"me", b"first", False)
    with neostore.open(store_url) as reopened:  # the schema is found, not recreated
        assert reopened.load(oid) == (b"v1", tid)


def test_a_transaction_binding_and_uploading_tens_of_thousands_of_small_values_commits(store_url):
    # Names and values are looked up in statements of many placeholders; MariaDB drops the connection
    # past about 8,000 of them, so the lookups must be split below that.
    names = [f"streams/plant.hall{i // 1000}.sensor{i:05d}/__rows".encode() for i in range(20_000)]
    with neostore.open(store_url) as store:
        tx = store.begin()
        oids = tx.oids_for(names, create=True)
        assert len(set(oids.values())) == len(names)
        for i, name in enumerate(names):
            tx.write(oids[name], None, b"row %d" % i)
        tid = tx.commit()
        assert store.oids_for(names[::997]) == {n: oids[n] for n in names[::997]}
        assert store.load(oids[names[-1]]) == (b"row 19999", tid)


def test_tids_increase_and_history_is_kept(store_url):
    with neostore.open(store_url) as store:
        oid = store.new_oid()
        tids, serial = [], None
        for i in range(5):
            serial = commit(store, {oid: (serial, b"rev%d" % i)})
            tids.append(serial)
        assert tids == sorted(tids) and len(set(tids)) == 5
        assert [r.tid for r in store.history(oid, size=None)] == tids[::-1]
        assert store.load_serial(oid, tids[1]) == b"rev1"
        assert store.load_before(oid, tids[2]) == (b"rev1", tids[1], tids[2])
        assert store.load_before(oid, p64(neostore.u64(tids[4]) + 1)) == (b"rev4", tids[4], None)
        assert store.load_before(oid, tids[0]) is None
        with pytest.raises(neostore.POSKeyError):
            store.load_before(p64(999_999), tids[0])
        assert [t.tid for t in store.iter_transactions(page=2)] == tids
        assert [t.tid for t in store.iter_transactions(tids[1], tids[3], newest_first=True)] == tids[3:0:-1]
        assert [(t, oids) for t, oids in store.changes_since(tids[2])] == [(tids[3], [oid]), (tids[4], [oid])]


def test_stale_serial_raises_conflict_with_what_resolution_needs(store_url):
    with neostore.open(store_url) as store:
        oid = store.new_oid()
        first = commit(store, {oid: (None, b"a")})
        second = commit(store, {oid: (first, b"b")})
        txn = store.begin()
        txn.write(oid, first, b"c")
        with pytest.raises(neostore.ConflictError) as caught:
            txn.vote()
        assert caught.value.oid == oid
        assert caught.value.serials == (second, first)
        assert store.load(oid) == (b"b", second)
        # The lock was given back: the next writer is not blocked.
        assert commit(store, {oid: (second, b"d")}) > second


def test_resolver_replaces_conflicting_value(store_url):
    with neostore.open(store_url) as store:
        oid = store.new_oid()
        first = commit(store, {oid: (None, b"1")})
        second = commit(store, {oid: (first, b"3")})
        txn = store.begin()
        txn.write(oid, first, b"2")
        seen = []

        def add(oid_, committed, expected, value):
            seen.append((committed, expected))
            base = store.load_serial(oid_, expected)
            return b"%d" % (int(store.load_serial(oid_, committed)) + int(value) - int(base))

        assert txn.vote(resolve=add) == [oid]
        tid = txn.finish()
        assert seen == [(second, first)]
        assert store.load(oid) == (b"4", tid)


def test_new_object_over_existing_oid_conflicts(store_url):
    with neostore.open(store_url) as store:
        oid = store.new_oid()
        commit(store, {oid: (None, b"a")})
        txn = store.begin()
        txn.write(oid, None, b"b")
        with pytest.raises(neostore.ConflictError):
            txn.vote()


def test_two_phase_commit_misuse_is_named(store_url):
    with neostore.open(store_url) as store:
        txn = store.begin()
        with pytest.raises(neostore.TransactionError, match="is open, not voted"):
            txn.finish()
        txn.vote()
        with pytest.raises(neostore.TransactionError, match="is voted, not open"):
            txn.write(store.new_oid(), None, b"x")
        txn.abort()
        txn.abort()  # harmless twice
        with pytest.raises(neostore.TransactionError, match="is aborted"):
            txn.vote()


def test_abort_after_vote_leaves_nothing(store_url):
    with neostore.open(store_url) as store:
        keep = store.new_oid()
        commit(store, {keep: (None, b"kept")})
        txn = store.begin()
        txn.write(store.new_oid(), None, os.urandom(5000))
        txn.write(store.new_oid(), None, b"kept")  # a dedup hit must survive the abort
        txn.vote()
        txn.abort()
        assert store.counts() == {"trans": 1, "obj": 1, "data": 1, "bigdata": 0, "ttrans": 0, "tobj": 0}
        assert store.load(keep)[0] == b"kept"


def test_delete_and_undo_of_creation(store_url):
    with neostore.open(store_url) as store:
        oid = store.new_oid()
        created = commit(store, {oid: (None, b"x")})
        deleted = commit(store, {oid: (created, None)})
        with pytest.raises(neostore.POSKeyError):
            store.load(oid)
        assert store.load_serial(oid, created) == b"x"
        txn = store.begin()
        assert txn.undo(deleted) == [oid]
        txn.vote()
        undone = txn.finish()
        assert store.load(oid) == (b"x", undone)
        # Undo reused the data row instead of copying it.
        assert store.counts()["data"] == 1


def test_undo_of_overwritten_change_is_refused(store_url):
    with neostore.open(store_url) as store:
        oid = store.new_oid()
        t1 = commit(store, {oid: (None, b"a")})
        t2 = commit(store, {oid: (t1, b"b")})
        commit(store, {oid: (t2, b"c")})
        txn = store.begin()
        with pytest.raises(neostore.UndoError, match="modified by a later transaction"):
            txn.undo(t2)
        txn.abort()


def test_oids_are_unique_across_processes(store_url):
    script = textwrap.dedent(
        """
        import json, sys, neostore
        store = neostore.open(sys.argv[1])
        print(json.dumps([neostore.u64(store.new_oid()) for _ in range(300)]))
        """
    )
    procs = [subprocess.Popen([sys.executable, "-c", script, store_url], stdout=subprocess.PIPE) for _ in range(3)]
    seen = []
    for proc in procs:
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0
        seen += json.loads(out)
    assert len(seen) == len(set(seen)) == 900


def test_one_phase_commit_is_visible_in_one_step(store_url):
    with neostore.open(store_url) as store:
        oid, big = store.new_oid(), store.new_oid()
        first = commit(store, {oid: (None, b"a")})
        txn = store.begin(user=b"me", description=b"one phase")
        assert txn.head == first  # the newest commit when the lock was taken
        txn.write(oid, first, b"b")
        txn.write(big, None, os.urandom(400_000))  # a row inserted on its own statement
        tid = txn.commit()
        assert tid > first and txn.state == "finished"
        assert store.load(oid) == (b"b", tid)
        assert len(store.load(big)[0]) == 400_000
        assert [r.tid for r in store.history(oid, size=None)] == [tid, first]
        (info,) = store.iter_transactions(tid, tid)
        assert (info.user, info.description) == (b"me", b"one phase")
        counts = store.counts()
        assert (counts["ttrans"], counts["tobj"], counts["trans"]) == (0, 0, 2)


def test_one_phase_commit_conflict_leaves_nothing(store_url):
    with neostore.open(store_url) as store:
        oid = store.new_oid()
        first = commit(store, {oid: (None, b"a")})
        second = commit(store, {oid: (first, b"b")})
        txn = store.begin()
        txn.write(oid, first, b"c")
        txn.write(store.new_oid(), None, os.urandom(5000))
        with pytest.raises(neostore.ConflictError) as caught:
            txn.commit()
        assert caught.value.serials == (second, first) and txn.state == "aborted"
        assert store.counts() == {"trans": 2, "obj": 2, "data": 2, "bigdata": 0, "ttrans": 0, "tobj": 0}
        assert commit(store, {oid: (second, b"d")}) > second  # the lock was given back


def test_given_digests_name_the_values(store_url):
    with neostore.open(store_url) as store:
        value = os.urandom(50_000)
        txn = store.begin()
        oid = store.new_oid()
        txn.write(oid, None, value, digest=value_hash(value))
        txn.commit()
        assert store.load(oid)[0] == value
        assert raw_rows(store, "SELECT hash FROM data")[0][0] == value_hash(value)


def test_oids_written_beyond_the_allocated_ones_are_never_handed_out(store_url):
    with neostore.open(store_url) as store:
        store.new_oid()  # an allocated block: commits within it need not touch oidgen
        txn = store.begin()
        txn.write(p64(900_000), None, b"chosen")
        txn.commit()
    with neostore.open(store_url) as store:  # a fresh process's view: only oidgen tells
        assert neostore.u64(store.new_oid()) > 900_000


def test_oids_allocated_in_an_aborted_sqlite_transaction_are_not_handed_out_twice(sqlite_url):
    with neostore.open(sqlite_url) as store:
        txn = store.begin()
        txn.lock()  # SQLite: names are bound (and oids allocated) inside the transaction
        txn.oids_for([b"first"], create=True)
        txn.abort()  # the oidgen bump is undone
        txn = store.begin()
        txn.lock()
        kept = set(txn.oids_for([b"second", b"third"], create=True).values())
        txn.commit()
        handed = [p64(o) for o in store.new_oids(300)]
        assert len(set(handed)) == 300 and not kept & set(handed)


def test_restored_oids_are_never_handed_out(store_url):
    with neostore.open(store_url) as store:
        txn = store.begin()
        txn.restore(p64(5000), b"imported")
        txn.vote()
        txn.finish()
        assert neostore.u64(store.new_oid()) > 5000


# -- dedup, compression, big values, corruption ----------------------------------


def test_identical_values_are_stored_once(store_url):
    with neostore.open(store_url) as store:
        value = os.urandom(100_000)
        oids = [store.new_oid() for _ in range(10)]
        commit(store, {oid: (None, value) for oid in oids})
        commit(store, {store.new_oid(): (None, value)})
        counts = store.counts()
        assert (counts["obj"], counts["data"]) == (11, 1)
        assert all(store.load(oid)[0] == value for oid in oids)


@pytest.mark.parametrize("extra", [0, 1])
def test_small_values_each_get_their_own_row_however_many_a_commit_uploads(store_url, extra):
    """Up to ``RETURNING_ROWS`` small values go in one INSERT returning their ids, more in a bulk INSERT
    and a query: either way each value gets its own row, beside a dedup hit and a big value."""
    with neostore.open(store_url) as store:
        shared = b"already stored"
        commit(store, {store.new_oid(): (None, shared)})
        n = windvane.neostore.upload.RETURNING_ROWS + extra
        values = {store.new_oid(): (None, b"small %d" % i) for i in range(n)}
        big = os.urandom(300_000)
        values[store.new_oid()] = (None, big)
        values[store.new_oid()] = (None, shared)
        tid = commit(store, values)
        assert all(store.load(oid) == (value, tid) for oid, (_, value) in values.items())
        assert store.counts()["data"] == n + 2  # the small ones, the big one and the shared one, once


def test_dedup_hit_sends_no_blob(store_url, monkeypatch):
    """A value the database holds is found by hash; its bytes are never uploaded."""
    with neostore.open(store_url) as store:
        value = os.urandom(1_000_000)
        commit(store, {store.new_oid(): (None, value)})
        txn = store.begin()
        txn.write(store.new_oid(), None, value)
        sent = []
        original = windvane.neostore.upload.UploadQueue.insert_values

        def spy(queue, cur, values):
            values = list(values)
            sent.extend(values)
            original(queue, cur, values)

        monkeypatch.setattr(windvane.neostore.upload.UploadQueue, "insert_values", spy)
        txn.vote()
        txn.finish()
        assert sent == []
        assert store.counts()["data"] == 1


def test_compression_kept_only_when_it_shrinks(store_url):
    with neostore.open(store_url) as store:
        small, noise, text = store.new_oid(), store.new_oid(), store.new_oid()
        noise_value = os.urandom(300_000)
        commit(store, {small: (None, b"tiny"), noise: (None, noise_value), text: (None, SENSOR_LIKE)})
        flags = dict(
            (bytes(h), (c, length))
            for h, c, length in raw_rows(store, "SELECT hash, compression, LENGTH(value) FROM data")
        )
        assert flags[value_hash(b"tiny")] == (RAW, 4)
        assert flags[value_hash(noise_value)] == (RAW, len(noise_value))
        compression, stored = flags[value_hash(SENSOR_LIKE)]
        assert compression == ZSTD and stored < len(SENSOR_LIKE) / 2
        assert store.load(text)[0] == SENSOR_LIKE


def test_already_compressed_values_are_not_recompressed(store_url):
    import zstandard

    framed = zstandard.ZstdCompressor().compress(SENSOR_LIKE)
    with neostore.open(store_url) as store:
        oid = store.new_oid()
        commit(store, {oid: (None, framed + b"\0" * 10_000)})  # compressible tail, zstd magic in front
        ((compression,),) = raw_rows(store, "SELECT compression FROM data")
        assert compression == RAW


def test_old_rows_stay_readable_when_settings_change(store_url):
    with neostore.open(store_url, compression_level=19) as store:
        oid = store.new_oid()
        tid = commit(store, {oid: (None, SENSOR_LIKE)})
    with neostore.open(store_url, compression_level=0) as plain:
        other = plain.new_oid()
        commit(plain, {other: (None, SENSOR_LIKE[::-1])})
        assert plain.load(oid) == (SENSOR_LIKE, tid)
        assert sorted(row[0] for row in raw_rows(plain, "SELECT compression FROM data")) == [RAW, ZSTD]


def test_value_above_row_limit_is_split_and_reassembled(sqlite_url):
    value = os.urandom(20 * 1024 * 1024 + 17)
    with neostore.open(sqlite_url) as store:
        oid = store.new_oid()
        tid = commit(store, {oid: (None, value)})
        assert store.counts()["bigdata"] == 3
        assert store.load(oid) == (value, tid)


def test_200_mib_value_round_trips_on_mariadb(mariadb_url):
    # Incompressible, so 200 MiB really travel: 25 rows of 8 MiB.
    value = os.urandom(200 * 1024 * 1024)
    with neostore.open(mariadb_url) as store:
        oid = store.new_oid()
        tid = commit(store, {oid: (None, value)})
        counts = store.counts()
        assert (counts["data"], counts["bigdata"]) == (1, 25)
        loaded, serial = store.load(oid)
        assert serial == tid and loaded == value
        del loaded
        # A second store of the same 200 MiB is a dedup hit: no new chunk rows.
        commit(store, {store.new_oid(): (None, value)})
        assert store.counts()["bigdata"] == 25


def test_corrupt_row_names_oid_and_tid(store_url):
    with neostore.open(store_url) as store:
        oid = store.new_oid()
        tid = commit(store, {oid: (None, b"precious " * 10)})
        other = store.new_oid()
        commit(store, {other: (None, SENSOR_LIKE)})
        # Damage the rows behind the store's back, as a failing disk or a stray UPDATE would.
        conn = store.backend.connect(for_writing=True)
        cur = store.backend.blob_cursor(conn)
        cur.execute(
            "UPDATE data SET value = ? WHERE hash = ?", (b"precious " * 9 + b"precioux ", value_hash(b"precious " * 10))
        )
        cur.execute("UPDATE data SET value = ? WHERE hash = ?", (b"\x28\xb5\x2f\xfd garbage", value_hash(SENSOR_LIKE)))
        conn.commit()
        store.backend.close_connection(conn)
        with pytest.raises(neostore.CorruptDataError) as caught:
            store.load(oid)
        assert caught.value.oid == oid and caught.value.tid == tid
        assert f"0x{oid.hex()}" in str(caught.value) and f"0x{tid.hex()}" in str(caught.value)
        with pytest.raises(neostore.CorruptDataError, match="zstd frame does not decompress"):
            store.load(other)


# -- schema, read-only ----------------------------------------------------------


def test_newer_schema_is_refused_with_advice(store_url):
    with neostore.open(store_url) as store:
        conn = store.backend.connect(for_writing=True)
        conn.cursor().execute("UPDATE config SET value = '99' WHERE name = 'version'")
        conn.commit()
        store.backend.close_connection(conn)
    with pytest.raises(neostore.SchemaVersionError, match=r"schema version 99.*upgrade windvane"):
        neostore.open(store_url)


def test_read_only_store_refuses_writes(store_url):
    with neostore.open(store_url) as store:
        oid = store.new_oid()
        tid = commit(store, {oid: (None, b"x")})
    with neostore.open(store_url, read_only=True) as reader:
        assert reader.load(oid) == (b"x", tid)
        with pytest.raises(neostore.ReadOnlyError):
            reader.begin()
        with pytest.raises(neostore.ReadOnlyError):
            reader.new_oid()
        with pytest.raises(neostore.ReadOnlyError):
            reader.pack(tid)


def test_opens_that_read_never_create_a_sqlite_store(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for options in ({"read_only": True}, {"create": False}, {"read_only": True, "create": True}):
        with pytest.raises(neostore.StoreNotFoundError) as caught:
            neostore.open("sqlite:///absent.db", **options)
        assert str(caught.value) == f"no store at sqlite:///absent.db: {tmp_path}/absent.db does not exist"
    with pytest.raises(neostore.StoreNotFoundError, match=f"no store at .*: {tmp_path}/no/dir.db does not exist"):
        neostore.open(f"sqlite:///{tmp_path}/no/dir.db", create=False)
    assert os.listdir(tmp_path) == []  # no file, no -wal, no .lock
    (tmp_path / "empty.db").write_bytes(b"")
    with pytest.raises(neostore.StoreNotFoundError) as caught:
        neostore.open("sqlite:///empty.db", create=False)
    assert str(caught.value) == f"no store in {tmp_path}/empty.db: it holds no neostore tables"
    assert sorted(os.listdir(tmp_path)) == ["empty.db"] and (tmp_path / "empty.db").stat().st_size == 0
    # Writers create; once it exists, create=False opens it writable.
    with neostore.open("sqlite:///absent.db") as store:
        tid = commit(store, {store.new_oid(): (None, b"x")})
    with neostore.open("sqlite:///absent.db", create=False) as store:
        assert store.last_transaction() == tid and not store.read_only


def test_opens_that_read_never_create_a_mariadb_store(mariadb_server):
    import mariadb

    from tests.conftest import fresh_database

    url = fresh_database(mariadb_server, "never_made")
    conn = mariadb.connect(user="root", unix_socket=mariadb_server.socket)
    cur = conn.cursor()
    cur.execute("DROP DATABASE never_made")
    for options in ({"read_only": True}, {"create": False}):
        with pytest.raises(neostore.StoreNotFoundError) as caught:
            neostore.open(url, **options)
        assert str(caught.value) == (
            f"no store in database 'never_made' on the MariaDB server at "
            f"{mariadb_server.socket}: the database does not exist"
        )
    cur.execute("SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = 'never_made'")
    assert cur.fetchone()[0] == 0
    cur.execute("CREATE DATABASE never_made")
    with pytest.raises(neostore.StoreNotFoundError) as caught:
        neostore.open(url, read_only=True)
    assert str(caught.value) == (
        f"no store in database 'never_made' on the MariaDB server at "
        f"{mariadb_server.socket}: it holds no neostore tables"
    )
    cur.execute("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'never_made'")
    assert cur.fetchone()[0] == 0
    cur.execute("DROP DATABASE never_made")
    conn.close()
    with neostore.open(url) as store:  # a writable open creates the database and the store
        assert store.last_transaction() == ZERO
    with neostore.open(url, read_only=True) as store:
        assert store.last_transaction() == ZERO


@pytest.mark.mariadb  # the connector, not a server
def test_mariadb_without_server_names_the_socket(tmp_path):
    with pytest.raises(neostore.DatabaseError, match=r"cannot connect to MariaDB at .*nosock.*windvane db start"):
        neostore.open(f"mariadb://root@/db?unix_socket={tmp_path}/nosock")


def test_myrocks_engine_is_selectable(mariadb_server):
    import mariadb

    from tests.conftest import fresh_database

    url = fresh_database(mariadb_server, "rocks") + "&engine=rocksdb"
    with neostore.open(url) as store:
        oid = store.new_oid()
        tid = commit(store, {oid: (None, SENSOR_LIKE)})
        assert store.load(oid) == (SENSOR_LIKE, tid)
    conn = mariadb.connect(user="root", unix_socket=mariadb_server.socket, database="rocks")
    cur = conn.cursor()
    cur.execute("SELECT ENGINE FROM information_schema.TABLES WHERE TABLE_SCHEMA='rocks' AND TABLE_NAME='data'")
    assert cur.fetchone()[0].upper() == "ROCKSDB"
    conn.close()


# -- pack ---------------------------------------------------------------------------


def test_pack_removes_invisible_revisions_and_unreferenced_data(store_url):
    with neostore.open(store_url) as store:
        a, b, gone = store.new_oid(), store.new_oid(), store.new_oid()
        t1 = commit(store, {a: (None, b"a1"), b: (None, b"shared"), gone: (None, b"g")})
        t2 = commit(store, {a: (t1, b"a2"), gone: (t1, None)})
        t3 = commit(store, {a: (t2, b"shared")})  # dedups with b's value
        t4 = commit(store, {a: (t3, b"a4")})
        stats = store.pack(t3)
        # a keeps t3 (current at the pack tid) and t4; b keeps t1; gone vanishes.
        assert [r.tid for r in store.history(a, None)] == [t4, t3]
        assert store.load_before(a, t4) == (b"shared", t3, t4)
        assert store.load(b) == (b"shared", t1)
        with pytest.raises(neostore.POSKeyError):
            store.history(gone)
        assert stats.revisions_deleted == 4
        assert store.counts()["data"] == 2  # shared, a4
        assert store.pack_tid() == t3
        assert all(info.packed == (info.tid <= t3) for info in store.iter_transactions())
        txn = store.begin()
        with pytest.raises(neostore.UndoError, match="packed"):
            txn.undo(t2)
        txn.abort()


def test_pack_collects_unreachable_objects_when_given_references(store_url):
    with neostore.open(store_url) as store:
        root, child, orphan = p64(0), store.new_oid(), store.new_oid()

        def refs(value):
            return [bytes.fromhex(h) for h in value.decode().split(",")[1:] if h]

        t1 = commit(
            store,
            {
                root: (None, b"root," + child.hex().encode() + b"," + orphan.hex().encode()),
                child: (None, b"child,"),
                orphan: (None, b"orphan,"),
            },
        )
        t2 = commit(store, {root: (t1, b"root," + child.hex().encode())})
        stats = store.pack(t2, references=refs)
        assert stats.objects_collected == 1
        with pytest.raises(neostore.POSKeyError):
            store.history(orphan)
        assert store.load(child)[0] == b"child,"


PACK_SCRIPT = textwrap.dedent(
    """
    import json, sys, neostore
    store = neostore.open(sys.argv[1])
    stats = store.pack(store.last_transaction())
    # VmHWM, not ru_maxrss: Linux carries ru_maxrss over from the forking parent.
    hwm = next(line for line in open("/proc/self/status") if line.startswith("VmHWM:"))
    print(json.dumps({"rss_kib": int(hwm.split()[1]),
                      "revisions": stats.revisions_deleted, "data": stats.data_deleted,
                      "batches": stats.batches}))
    """
)


def _fill_for_pack(url, objects, revisions, size):
    with neostore.open(url) as store:
        oids = [p64(o) for o in store.new_oids(objects)]
        serials = dict.fromkeys(oids)
        for _ in range(revisions):
            txn = store.begin()
            for oid in oids:
                txn.write(oid, serials[oid], os.urandom(size))
            txn.vote()
            tid = txn.finish()
            serials = dict.fromkeys(oids, tid)


def _pack_in_subprocess(url):
    out = subprocess.run([sys.executable, "-c", PACK_SCRIPT, url], capture_output=True, check=True, timeout=600)
    return json.loads(out.stdout)


@pytest.mark.slow
def test_pack_memory_does_not_grow_with_database_size(sqlite_url, tmp_path):
    """Pack 120 MiB and 480 MiB databases: peak RSS stays put and under 200 MB.

    Both are larger than SQLite's page cache (64 MiB a connection), which is
    a fixed budget; what must not grow is everything else.
    """
    small_url = f"sqlite:///{tmp_path}/small.db"
    _fill_for_pack(small_url, objects=120, revisions=4, size=256 * 1024)
    _fill_for_pack(sqlite_url, objects=480, revisions=4, size=256 * 1024)
    small, large = _pack_in_subprocess(small_url), _pack_in_subprocess(sqlite_url)
    assert (small["revisions"], large["revisions"]) == (360, 1440)
    assert (small["data"], large["data"]) == (360, 1440)
    assert large["rss_kib"] < 200 * 1024
    # Four times the data, no more than 20 MiB more memory.
    assert large["rss_kib"] - small["rss_kib"] < 20 * 1024


def test_load_many_reads_latest_values_in_order(store_url):
    with neostore.open(store_url) as store:
        oids = [store.new_oid() for _ in range(20)]
        values = {oid: os.urandom(3000) + SENSOR_LIKE[: i * 100] for i, oid in enumerate(oids)}
        first = commit(store, {oid: (None, v) for oid, v in values.items()})
        changed = oids[3]
        second = commit(store, {changed: (first, b"new")})
        wanted = oids[::-1]
        got = list(store.load_many(wanted, batch=3))
        assert [v for v, _ in got] == [b"new" if oid == changed else values[oid] for oid in wanted]
        assert [s for _, s in got] == [second if oid == changed else first for oid in wanted]
        with pytest.raises(neostore.POSKeyError):
            list(store.load_many([oids[0], p64(123456)]))
