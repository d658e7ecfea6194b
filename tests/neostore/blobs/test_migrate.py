"""Moving existing values to the blob tier and back, on the real S3 server, with writers running."""

from __future__ import annotations

import os
import threading

from tests.neostore.blobs.conftest import bucket_of, commit_new
from windvane import neostore
from windvane.neostore.blobs import TIERED
from windvane.neostore.blobs.migrate import move_in, move_out, to_move
from windvane.neostore.blobs.sweep import sweep
from windvane.neostore.sql import VALUE_COLUMNS
from windvane.neostore.tids import u64

SIZES = [10, 5000, 256 * 1024, 1 << 20, 9 << 20, 20 << 20]  # 9 and 20 MiB: split into bigdata rows


def tiered_rows(store: neostore.Store) -> int:
    return store.query(f"SELECT COUNT(*) FROM data WHERE chunks = {TIERED}")[0][0]


def test_values_move_to_the_object_store_and_back_exactly(store_url, tiered_url, s3_env):
    values = [os.urandom(n) for n in SIZES]
    with neostore.open(store_url) as store:
        oids = commit_new(store, values)
    with neostore.open(tiered_url, blob_grace=0) as store:
        assert to_move(store, True)[0] == 4
        stats = move_out(store, batch_bytes=4 << 20)
        assert (stats.values, stats.batches) == (4, 3)  # 256 KiB + 1 MiB, 9 MiB, 20 MiB
        assert tiered_rows(store) == 4 and store.query("SELECT COUNT(*) FROM bigdata") == [(0,)]
        assert [v for v, _ in store.load_many(oids)] == values
        assert move_out(store).values == 0  # nothing left to move
    assert len(s3_env.objects(bucket_of(tiered_url))) == 4
    with neostore.open(tiered_url, blob_grace=0) as store:
        stats = move_in(store, batch_bytes=4 << 20)
        assert stats.values == 4 and stats.location_forgotten
        assert tiered_rows(store) == 0
        assert sweep(store).deleted == 4
    with neostore.open(store_url) as store:  # no location recorded any more
        assert [store.load(oid)[0] for oid in oids] == values


def test_a_writer_commits_the_whole_time_a_move_runs(tiered_url, store_url, s3_env):
    with neostore.open(store_url) as store:
        first = commit_new(store, [os.urandom(300 * 1024) for _ in range(12)])
        expected = {oid: store.load(oid)[0] for oid in first}
    stop = threading.Event()
    written: dict[bytes, bytes] = {}
    errors: list[BaseException] = []

    def write() -> None:
        try:
            with neostore.open(tiered_url, blob_grace=0) as writer:
                while not stop.is_set():
                    values = [os.urandom(300 * 1024), os.urandom(100)]
                    written.update(zip(commit_new(writer, values), values))
        except BaseException as exc:  # noqa: BLE001  # whatever ends the thread goes to the test, which asserts
            errors.append(exc)

    with neostore.open(tiered_url, blob_grace=0) as store:
        thread = threading.Thread(target=write)
        thread.start()
        try:
            move_out(store, batch_bytes=600 * 1024)
        finally:
            stop.set()
            thread.join(60)
        assert not errors and written
        expected.update(written)
        assert [v for v, _ in store.load_many(list(expected))] == list(expected.values())
        assert to_move(store, True) == (0, 0)
        stats = move_in(store, batch_bytes=600 * 1024)
        assert stats.location_forgotten
    with neostore.open(store_url) as store:
        assert [v for v, _ in store.load_many(list(expected))] == list(expected.values())


def test_a_read_whose_row_moved_out_under_it_reads_the_object(store_url, tiered_url, s3_env):
    split = [os.urandom(9 << 20), os.urandom(1 << 20)]  # split into bigdata rows, and in one row
    with neostore.open(store_url) as store:
        oids = commit_new(store, split)
    with neostore.open(tiered_url, blob_grace=0) as store:
        columns = VALUE_COLUMNS
        rows = [
            store.query(f"SELECT {columns} FROM obj o JOIN data d ON d.id = o.data_id WHERE o.oid = ?", (u64(oid),))[0]
            for oid in oids
        ]
        assert move_out(store).values == 2  # between the reads of a row and of its bytes
        assert [store.reader.row_value(oid, row) for oid, row in zip(oids, rows)] == split


def test_readers_run_the_whole_time_a_move_runs(store_url, tiered_url, s3_env):
    values = [os.urandom(n) for n in (9 << 20, 300 * 1024, 1 << 20) for _ in range(4)]
    with neostore.open(store_url) as store:
        oids = commit_new(store, values)
    stop = threading.Event()
    seen: list[object] = []

    def read() -> None:
        with neostore.open(tiered_url, blob_grace=0) as reader:
            while not stop.is_set():
                for oid, value in zip(oids, values):
                    try:
                        assert reader.load(oid)[0] == value
                        assert reader.load_range(oid, 1000, 5000) == value[1000:5000]
                        seen.append(True)
                    except BaseException as exc:  # noqa: BLE001  # whatever a read meets goes to the test, which asserts
                        seen.append(exc)

    with neostore.open(tiered_url, blob_grace=0) as store:
        threads = [threading.Thread(target=read) for _ in range(2)]
        for thread in threads:
            thread.start()
        try:
            for _ in range(2):
                move_out(store, batch_bytes=1)
                move_in(store, batch_bytes=1)
        finally:
            stop.set()
            for thread in threads:
                thread.join(60)
    assert seen and all(outcome is True for outcome in seen), [o for o in seen if o is not True][:3]


def test_a_value_losing_pieces_while_it_moves_is_not_uploaded_in_part(store_url, tiered_url, s3_env):
    # A split value whose pieces are not all there when its batch is read (pack removing it meanwhile): nothing
    # may reach the object store under its hash, where a later writer of the same value would trust it.
    value = os.urandom(20 << 20)
    with neostore.open(store_url) as store:
        commit_new(store, [value])
        (data_id, chunks) = store.query("SELECT id, chunks FROM data WHERE size = ?", (len(value),))[0]
        assert chunks == 3
        with store.pool.writer() as conn:
            conn.cursor().execute("DELETE FROM bigdata WHERE data_id = ? AND seq = 2", (data_id,))
    with neostore.open(tiered_url) as store:
        assert move_out(store).values == 0
        assert store.query("SELECT chunks FROM data WHERE id = ?", (data_id,)) == [(3,)]
    assert s3_env.objects(bucket_of(tiered_url)) == []
