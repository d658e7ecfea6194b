"""The blob tier's orphan sweep on the real S3 server: what it deletes, what it keeps, and its races with writers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading

import pytest

from tests.neostore.blobs.conftest import bucket_of, commit_new
from tests.serve_process import REPO
from windvane import neostore
from windvane.neostore.blobs import TIERED, BlobTier
from windvane.neostore.blobs.sweep import sweep

BIG = 300 * 1024  # above the default threshold


def orphan(store: neostore.Store, values: list[bytes]) -> None:
    """Upload ``values`` in a transaction that flushes them, then aborts: objects no row references."""
    txn = store.begin()
    for value in values:
        txn.write(store.new_oid(), None, value)
    txn.vote()
    txn.abort()


def age(s3_env, bucket: str, seconds: float) -> None:
    """Make every object of ``bucket`` look ``seconds`` older to the server (its files' times)."""
    for path in s3_env.objects(bucket):
        then = path.stat().st_mtime - seconds
        os.utime(path, (then, then))


def test_orphans_go_once_older_than_the_grace_referenced_never(tiered_url, s3_env):
    bucket = bucket_of(tiered_url)
    kept = [os.urandom(BIG) for _ in range(3)]
    with neostore.open(tiered_url) as store:
        oids = commit_new(store, kept)
        orphan(store, [os.urandom(BIG) for _ in range(2)])
        assert len(s3_env.objects(bucket)) == 5
        young = sweep(store)  # the default grace: an hour
        assert (young.listed, young.young, young.deleted) == (5, 5, 0)
        age(s3_env, bucket, 2 * 3600)
        stats = sweep(store)
        assert (stats.listed, stats.deleted, stats.referenced, stats.young) == (5, 2, 3, 0)
        assert stats.deleted_bytes >= 2 * BIG
        assert len(s3_env.objects(bucket)) == 3
        assert [store.load(oid)[0] for oid in oids] == kept


def test_objects_of_values_pack_removed_are_deleted(tiered_url, s3_env):
    bucket = bucket_of(tiered_url)
    with neostore.open(tiered_url, blob_grace=0) as store:
        (oid,) = commit_new(store, [os.urandom(BIG)])
        txn = store.begin()
        last = os.urandom(BIG)
        txn.write(oid, store.load(oid)[1], last)
        txn.vote()
        tid = txn.finish()
        assert len(s3_env.objects(bucket)) == 2
        stats = store.pack(tid)
        assert stats.data_deleted == 1
        assert stats.blobs is not None and (stats.blobs.deleted, stats.blobs.referenced) == (1, 1)
        assert len(s3_env.objects(bucket)) == 1
        assert store.load(oid)[0] == last


def test_foreign_keys_are_left_alone(tiered_url, s3_env):
    bucket = bucket_of(tiered_url)
    with neostore.open(tiered_url, blob_grace=0) as store:
        for key in ("README", "ab/notahash", "00/" + "11" * 32):
            store.tier.blobs.put_new(key, b"theirs")
        stats = sweep(store)
    assert (stats.listed, stats.foreign, stats.deleted) == (3, 3, 0)
    assert len(s3_env.objects(bucket)) == 3


class Pause:
    """Stops the first thread that calls ``BlobTier.<method>`` (before or after the real call) until released."""

    def __init__(self, monkeypatch, method: str, *, after: bool):
        self.reached, self.go = threading.Event(), threading.Event()
        real = getattr(BlobTier, method)

        def paused(tier, *args, **kwargs):
            result = real(tier, *args, **kwargs) if after else None
            if not self.reached.is_set():
                self.reached.set()
                assert self.go.wait(60)
            return result if after else real(tier, *args, **kwargs)

        monkeypatch.setattr(BlobTier, method, paused)


def _writer(url: str, values: list[bytes], out: dict) -> None:
    try:
        with neostore.open(url, blob_grace=0) as store:
            out["oids"] = commit_new(store, values)
    except BaseException as exc:  # noqa: BLE001  # whatever ends the writer goes to the test, which asserts
        out["error"] = exc


def test_a_sweep_deleting_a_slow_writers_objects_before_its_commit_makes_it_upload_again(
    tiered_url, s3_env, monkeypatch
):
    bucket = bucket_of(tiered_url)
    values = [os.urandom(BIG) for _ in range(3)]
    with neostore.open(tiered_url, blob_grace=0) as store:
        commit_new(store, [b"small"])  # the schema and the location are there before the race
        pause = Pause(monkeypatch, "upload", after=True)  # uploaded, the commit lock not taken yet
        out: dict = {}
        thread = threading.Thread(target=_writer, args=(tiered_url, values, out))
        thread.start()
        assert pause.reached.wait(60)
        assert len(s3_env.objects(bucket)) == 3
        stats = sweep(store, grace=0)
        assert stats.deleted == 3 and s3_env.objects(bucket) == []
        pause.go.set()
        thread.join(60)
        assert "error" not in out
        assert [store.load(oid)[0] for oid in out["oids"]] == values
        assert len(s3_env.objects(bucket)) == 3
        assert sweep(store, grace=0).deleted == 0


def test_a_sweep_waits_for_a_writer_holding_the_commit_lock(tiered_url, s3_env, monkeypatch):
    bucket = bucket_of(tiered_url)
    values = [os.urandom(BIG) for _ in range(3)]
    with neostore.open(tiered_url, blob_grace=0) as store:
        commit_new(store, [b"small"])
        pause = Pause(monkeypatch, "settle", after=False)  # under the commit lock, its rows not in yet
        out: dict = {}
        writer = threading.Thread(target=_writer, args=(tiered_url, values, out))
        writer.start()
        assert pause.reached.wait(60)
        swept: dict = {}
        sweeper = threading.Thread(target=lambda: swept.update(stats=sweep(store, grace=0)))
        sweeper.start()
        sweeper.join(2)
        assert sweeper.is_alive()  # waiting for the commit lock, not deleting
        assert len(s3_env.objects(bucket)) == 3
        pause.go.set()
        writer.join(60)
        sweeper.join(60)
        assert "error" not in out
        assert (swept["stats"].deleted, swept["stats"].referenced) == (0, 3)
        assert [store.load(oid)[0] for oid in out["oids"]] == values
        assert len(s3_env.objects(bucket)) == 3


CHILD = textwrap.dedent(
    """
    import os, sys, time
    from windvane import neostore
    from windvane.neostore.blobs import BlobTier

    real = BlobTier.settle

    def settle(tier, values):
        print("paused", flush=True)  # uploaded, the commit lock held, no row in
        while True:
            time.sleep(3600)

    BlobTier.settle = settle
    with neostore.open(sys.argv[1]) as store:
        txn = store.begin()
        for n in range(4):
            txn.write(neostore.p64(1000 + n), None, os.urandom(2 << 20))
        txn.vote()
    """
)


def test_kill_9_between_upload_and_commit_leaves_orphans_the_sweep_removes(tiered_url, s3_env):
    bucket = bucket_of(tiered_url)
    with neostore.open(tiered_url) as store:
        commit_new(store, [b"small"])
        before = store.last_transaction()
    child = subprocess.Popen([sys.executable, "-c", CHILD, tiered_url], cwd=REPO, stdout=subprocess.PIPE)
    try:
        assert child.stdout.readline() == b"paused\n"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(30)
    assert len(s3_env.objects(bucket)) == 4
    with neostore.open(tiered_url, blob_grace=0) as store:
        assert store.last_transaction() == before
        with pytest.raises(neostore.POSKeyError):
            store.load(neostore.p64(1000))
        assert store.query(f"SELECT COUNT(*) FROM data WHERE chunks = {TIERED}") == [(0,)]
        stats = sweep(store)
    assert stats.deleted == 4
    assert s3_env.objects(bucket) == []
