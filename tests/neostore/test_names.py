"""neostore's name index, snapshot reads and ranged reads, on SQLite and MariaDB."""

from __future__ import annotations

import threading

import pytest

from windvane import neostore
from windvane.neostore import p64, u64
from windvane.neostore.values import RAW


def commit(store, writes, **meta):
    """Commit ``{oid: value}`` with no serial checks; return the tid."""
    txn = store.begin(**meta)
    for oid, value in writes.items():
        txn.write(oid, None, value, check=False, compress=False)
    txn.vote()
    return txn.finish()


def after(tid: bytes) -> bytes:
    return p64(u64(tid) + 1)


def test_binding_is_permanent_and_shared_by_every_connection(store_url):
    with neostore.open(store_url) as one, neostore.open(store_url) as two:
        assert one.oids_for([b"a"]) == {}
        bound = one.oids_for([b"a", b"b"], create=True)
        assert len(set(bound.values())) == 2
        assert two.oids_for([b"b", b"a", b"missing"]) == bound
        # A bound name nobody wrote does not exist for readers.
        assert one.list_names(b"") == []


def test_concurrent_binders_of_a_new_name_get_the_same_oid(store_url):
    stores = [neostore.open(store_url) for _ in range(4)]
    results: list[dict] = [{} for _ in stores]
    barrier = threading.Barrier(len(stores))

    def bind(i):
        barrier.wait()
        results[i] = stores[i].oids_for([b"race/%d" % n for n in range(50)], create=True)

    threads = [threading.Thread(target=bind, args=(i,)) for i in range(len(stores))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for store in stores:
        store.close()
    assert all(r == results[0] for r in results) and len(results[0]) == 50


def test_bindings_a_write_transaction_makes_count_only_if_it_commits(store_url, monkeypatch):
    with neostore.open(store_url) as one, neostore.open(store_url) as two:
        old = one.oids_for([b"old"], create=True)[b"old"]
        txn = one.begin()
        txn.lock()  # on SQLite, bindings are then made on the transaction's own connection
        assert txn.oids_for([b"old"]) == {b"old": old}
        txn.oids_for([b"gone"], create=True)
        txn.abort()
        # The aborted transaction's binding never happened there: whoever binds the name next decides its oid.
        gone = two.oids_for([b"gone"], create=True)[b"gone"]
        assert one.oids_for([b"gone"]) == {b"gone": gone}
        txn = one.begin()
        txn.lock()
        kept = txn.oids_for([b"kept"], create=True)[b"kept"]
        txn.write(kept, None, b"value")
        txn.vote()
        txn.finish()
        assert one.oids_for([b"kept"]) == two.oids_for([b"kept"]) == {b"kept": kept}
        # Known now, committed bindings are answered without asking the database.
        asked = []
        query = one.pool.query
        monkeypatch.setattr(one.pool, "query", lambda sql, params=(): (asked.append(sql), query(sql, params))[1])
        assert one.oids_for([b"old", b"gone", b"kept"]) == {b"old": old, b"gone": gone, b"kept": kept}
        assert asked == []
        assert one.oids_for([b"unbound"]) == {} and len(asked) == 1  # the spy sees what does ask


def test_names_longer_than_the_limit_are_refused(sqlite_url):
    with neostore.open(sqlite_url) as store:
        with pytest.raises(ValueError, match="limit is 767"):
            store.oids_for([b"x" * 768], create=True)


def test_list_names_is_a_sorted_prefix_range_at_a_snapshot(store_url):
    with neostore.open(store_url) as store:
        names = [b"a/zarr.json", b"a/c/0", b"a/c/1", b"ab", b"a\xff\xff", b"b/c/0"]
        oids = store.oids_for(names, create=True)
        t1 = commit(store, {oids[n]: n * 3 for n in names})
        t2 = commit(store, {oids[b"a/c/1"]: None, oids[b"a/c/0"]: b"new"})
        listed = store.list_names(b"a/")
        assert [r.name for r in listed] == [b"a/c/0", b"a/zarr.json"]
        assert {r.name: (r.serial, r.size) for r in listed} == {b"a/c/0": (t2, 3), b"a/zarr.json": (t1, 33)}
        # The snapshot before t2 still has a/c/1 and the old a/c/0.
        old = store.list_names(b"a/", before=t2)
        assert [(r.name, r.size) for r in old] == [(b"a/c/0", 15), (b"a/c/1", 15), (b"a/zarr.json", 33)]
        assert store.list_names(b"a/", before=t1) == []
        assert [r.name for r in store.list_names(b"a")] == [b"a/c/0", b"a/zarr.json", b"ab", b"a\xff\xff"]
        assert [r.name for r in store.list_names(b"a\xff")] == [b"a\xff\xff"]
        assert [r.name for r in store.list_names(b"a/c/0", exact=True)] == [b"a/c/0"]
        assert store.list_names(b"a/c", exact=True) == []


def test_name_history_lists_the_commits_that_wrote_under_a_prefix(store_url):
    with neostore.open(store_url) as store:
        oids = store.oids_for([b"x/1", b"x/2", b"y/1"], create=True)
        t1 = commit(store, {oids[b"x/1"]: b"1"}, description=b"first")
        commit(store, {oids[b"y/1"]: b"1"}, description=b"other")
        t3 = commit(store, {oids[b"x/2"]: b"2", oids[b"y/1"]: b"2"}, description=b"both")
        history = store.name_history(b"x/")
        assert [(h.tid, h.description) for h in history] == [(t1, b"first"), (t3, b"both")]


def test_load_many_reads_a_snapshot_and_can_skip_missing_objects(store_url):
    with neostore.open(store_url) as store:
        a, b, c = (store.new_oid() for _ in range(3))
        t1 = commit(store, {a: b"a1", b: b"b1"})
        t2 = commit(store, {a: b"a2", c: b"c2"})
        assert list(store.load_many([a, b])) == [(b"a2", t2), (b"b1", t1)]
        assert list(store.load_many([a, b, c], before=t2, skip_missing=True)) == [
            (b"a1", t1),
            (b"b1", t1),
            (None, None),
        ]
        with pytest.raises(neostore.POSKeyError):
            list(store.load_many([c], before=t2))


def test_load_range_slices_raw_values_in_the_database(store_url):
    with neostore.open(store_url) as store:
        oid, packed = store.new_oid(), store.new_oid()
        value = bytes(range(256)) * 40
        txn = store.begin()
        txn.write(oid, None, value, compress=False)
        txn.write(packed, None, b"0123456789" * 1000)  # compressible: stored zstd
        txn.vote()
        t1 = txn.finish()
        (row,) = store.query(
            "SELECT d.compression FROM obj o JOIN data d ON d.id = o.data_id WHERE o.oid = ?", (u64(oid),)
        )
        assert row[0] == RAW
        for start, stop in [
            (0, 10),
            (100, 3000),
            (-17, None),
            (5000, None),
            (-20000, None),
            (10230, 99999),
            (50, 50),
            (20000, 30000),
        ]:
            assert store.load_range(oid, start, stop) == value[start:stop]
        assert store.load_range(packed, 15, 25) == b"5678901234"
        commit(store, {oid: b"replaced"})
        assert store.load_range(oid, 0, 3) == b"rep"
        assert store.load_range(oid, 0, 3, before=after(t1)) == value[:3]
        with pytest.raises(neostore.POSKeyError):
            store.load_range(store.new_oid(), 0, 1)


def test_load_range_spans_the_pieces_of_a_split_value(sqlite_url):
    with neostore.open(sqlite_url) as store:
        store.backend.split_size = 1000  # this store's values split every 1000 bytes
        oid = store.new_oid()
        value = bytes(range(251)) * 30  # 7530 bytes: 8 pieces
        commit(store, {oid: value})
        assert store.counts()["bigdata"] == 8
        for start, stop in [(0, 7530), (999, 1001), (1000, 2000), (1500, 6500), (-1, None), (3000, 3001)]:
            assert store.load_range(oid, start, stop) == value[start:stop]


def test_unchecked_writes_let_the_last_writer_win(store_url):
    with neostore.open(store_url) as store:
        oid = store.new_oid()
        commit(store, {oid: b"one"})
        stale = store.begin()
        stale.write(oid, None, b"blind", check=False)  # expects "new object", but is not checked
        stale.vote()
        stale.finish()
        assert store.load(oid)[0] == b"blind"
        checked = store.begin()
        checked.write(oid, None, b"checked")
        with pytest.raises(neostore.ConflictError):
            checked.vote()


def test_pending_value_reads_back_a_transactions_own_writes(sqlite_url):
    with neostore.open(sqlite_url, flush_bytes=1000) as store:
        small, big, gone = store.new_oid(), store.new_oid(), store.new_oid()
        txn = store.begin()
        txn.write(small, None, b"small")
        txn.write(big, None, b"B" * 5000)  # past flush_bytes: uploaded before vote
        txn.write(gone, None, None)
        assert txn.pending_value(small) == (True, b"small")
        assert txn.pending_value(big) == (True, b"B" * 5000)
        assert txn.pending_value(gone) == (True, None)
        assert txn.pending_value(store.new_oid()) == (False, None)
        txn.abort()


def test_lock_holds_off_other_writers_until_the_transaction_ends(store_url):
    with neostore.open(store_url) as store, neostore.open(store_url, commit_lock_timeout=0.3) as other:
        # SQLite's writer also holds the database's write lock: allocate first.
        oid = other.new_oid()
        txn = store.begin()
        txn.lock()
        blocked = other.begin()
        blocked.write(oid, None, b"x")
        with pytest.raises(neostore.CommitLockTimeout):
            blocked.vote()
        txn.abort()
        retry = other.begin()
        retry.write(oid, None, b"x")
        retry.vote()
        retry.finish()


def test_a_version_1_database_is_upgraded_when_opened_writable(store_url):
    with neostore.open(store_url) as store:
        oid = store.new_oid()
        commit(store, {oid: b"kept"})
        conn = store.backend.connect(for_writing=True)
        cur = conn.cursor()
        cur.execute("DROP TABLE name")
        cur.execute("UPDATE config SET value = '1' WHERE name = 'version'")
        conn.commit()
        store.backend.close_connection(conn)
    with pytest.raises(neostore.SchemaVersionError, match="open it writable once to upgrade"):
        neostore.open(store_url, read_only=True)
    with neostore.open(store_url) as store:
        assert store.load(oid)[0] == b"kept"
        assert store.oids_for([b"n"], create=True)
    with neostore.open(store_url, read_only=True) as reader:
        assert reader.load(oid)[0] == b"kept"


def test_garbage_collection_keeps_named_objects(store_url):
    with neostore.open(store_url) as store:
        named = store.oids_for([b"arr/zarr.json"], create=True)[b"arr/zarr.json"]
        orphan = store.new_oid()
        commit(store, {p64(0): b"root", named: b"{}", orphan: b"lost"})
        stats = store.pack(store.last_transaction(), references=lambda value: [])
        assert stats.objects_collected == 1
        assert store.load(named)[0] == b"{}"
        with pytest.raises(neostore.POSKeyError):
            store.load(orphan)


def test_an_object_rewritten_in_one_transaction_keeps_only_its_final_value(store_url):
    # flush_bytes=1: every value is uploaded as soon as it is written, so the
    # rewrites leave uploaded rows behind that vote must remove.
    for flush_bytes in (1, 1 << 20):
        with neostore.open(store_url, flush_bytes=flush_bytes) as store:
            before = store.counts()["data"]
            oid, other = store.new_oid(), store.new_oid()
            txn = store.begin()
            for i in range(20):
                txn.write(oid, None, b"v%d.%d," % (flush_bytes, i) * 100, check=False)
            txn.write(other, None, b"v%d.3," % flush_bytes * 100)  # shares a value a rewrite dropped
            txn.vote()
            txn.finish()
            assert store.load(oid)[0] == b"v%d.19," % flush_bytes * 100
            assert store.load(other)[0] == b"v%d.3," % flush_bytes * 100
            assert store.counts()["data"] - before == 2
