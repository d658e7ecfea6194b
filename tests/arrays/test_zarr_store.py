"""arrays.ZarrStore: zarr's own store test-suite, plus what neostore adds (on SQLite and MariaDB; the suite on a
Galera cluster too)."""

from __future__ import annotations

import asyncio
import os
import pickle
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import zarr
from zarr.abc.store import OffsetByteRequest, RangeByteRequest, SuffixByteRequest
from zarr.core.buffer import cpu, default_buffer_prototype
from zarr.testing.store import StoreTests

from windvane import arrays, neostore
from windvane.arrays.errors import SnapshotError
from windvane.arrays.group_commit import Change, GroupCommit
from windvane.arrays.keys import Snapshot
from windvane.arrays.zarr_store import ZarrStore

ROOT = Path(__file__).resolve().parents[2]
PROTO = default_buffer_prototype()


def buf(data: bytes) -> cpu.Buffer:
    return cpu.Buffer.from_bytes(data)


@pytest.fixture
def url(store_url: str) -> str:
    """A fresh store URL whose database already exists."""
    neostore.open(store_url).close()
    return store_url


def commits(url: str) -> int:
    with neostore.open(url) as store:
        return sum(1 for _ in store.iter_transactions())


class TestZarrStoreSuite(StoreTests[ZarrStore, cpu.Buffer]):
    """zarr's StoreTests, with helpers that read and write through neostore directly."""

    store_cls = ZarrStore
    buffer_cls = cpu.Buffer

    @pytest.fixture
    def store_kwargs(self, url: str) -> dict:
        return {"url": url}

    async def set(self, store: ZarrStore, key: str, value: cpu.Buffer) -> None:
        with neostore.open(store.url) as direct, arrays.transaction(direct) as tx:
            tx.set(key, value.to_bytes())

    async def get(self, store: ZarrStore, key: str) -> cpu.Buffer:
        with neostore.open(store.url) as direct:
            value = Snapshot(direct).get(key)
        assert value is not None, f"{key} was not written"
        return buf(value)

    def test_store_repr(self, store: ZarrStore) -> None:
        assert repr(store) == f"ZarrStore({store.url!r})"
        assert repr(store.with_read_only(True)) == f"ZarrStore({store.url!r}, read_only=True)"

    def test_store_supports_writes(self, store: ZarrStore) -> None:
        assert store.supports_writes
        assert store.supports_deletes

    def test_store_supports_listing(self, store: ZarrStore) -> None:
        assert store.supports_listing


class TestZarrStoreSuiteGalera(TestZarrStoreSuite):
    """The same suite once more through the cluster URL of the session's 3-node Galera cluster."""

    @pytest.fixture
    def store_kwargs(self, galera_url: str) -> dict:
        neostore.open(galera_url).close()
        return {"url": galera_url}


# -- atomic set_if_not_exists across processes --------------------------------------


def test_set_if_not_exists_race_between_processes(url: str) -> None:
    racers, keys = 4, 15
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.arrays.zarr_store_worker", url, f"racer-{n}", str(keys)],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for n in range(racers)
    ]
    try:
        for proc in procs:
            assert proc.stdout.readline().strip() == "ready"
        for proc in procs:
            proc.stdin.write("go\n")
            proc.stdin.flush()
        for proc in procs:
            assert proc.stdout.readline().strip() == "done"
            assert proc.wait(timeout=60) == 0
    finally:
        for proc in procs:
            proc.kill()
    names = {f"racer-{n}".encode() for n in range(racers)}
    with neostore.open(url) as store:
        snap = Snapshot(store)
        for i in range(keys):
            key = f"race/{i}"
            assert snap.get(key) in names
            # Exactly one racer wrote the key: every later attempt saw it.
            oid = store.oids_for([key.encode()])[key.encode()]
            assert len(store.history(oid, size=None)) == 1, key


# -- ranged reads are sliced by the database -------------------------------------


def _count_fetched(store: neostore.Store, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Record the bytes each query brings back from the database (a spy: the queries still run)."""
    fetched: list[int] = []
    real = store.pool.query

    def query(sql, params=()):
        rows = real(sql, params)
        fetched.append(sum(len(c) for row in rows for c in row if isinstance(c, (bytes, bytearray, memoryview))))
        return rows

    monkeypatch.setattr(store.pool, "query", query)
    return fetched


async def test_ranged_get_is_served_by_the_database(url: str, monkeypatch) -> None:
    store = await ZarrStore.open(url)
    raw = np.random.default_rng(1).bytes(3 * 1024 * 1024)  # incompressible: stored as is
    await store.set("big", buf(raw))
    fetched = _count_fetched(store.neo_store, monkeypatch)
    for request, expected in [
        (RangeByteRequest(1_000_000, 1_000_100), raw[1_000_000:1_000_100]),
        (OffsetByteRequest(len(raw) - 50), raw[-50:]),
        (SuffixByteRequest(70), raw[-70:]),
        (RangeByteRequest(2_000_000, 9_000_000), raw[2_000_000:]),  # past the end: the rest
    ]:
        fetched.clear()
        got = await store.get("big", PROTO, request)
        assert got.to_bytes() == expected
        # Only the range came back from the database, not the 3 MiB value.
        assert sum(fetched) < len(expected) + 4096, (request, sum(fetched))
    fetched.clear()
    assert (await store.get("big", PROTO)).to_bytes() == raw
    assert sum(fetched) >= len(raw)  # the spy does see whole values
    assert await store.getsize("big") == len(raw)
    assert (await store.get("big", PROTO, SuffixByteRequest(0))).to_bytes() == b""
    assert await store.get("missing", PROTO, RangeByteRequest(0, 4)) is None

    # A value neostore compressed is still sliced correctly (whole-value fallback).
    text = b"sensor,temperature,21.5\n" * 10_000
    await store.set("log", buf(text))
    got = await store.get("log", PROTO, RangeByteRequest(100, 160))
    assert got.to_bytes() == text[100:160]
    store.close()


def test_a_read_only_store_of_a_missing_url_creates_none(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/absent.db"
    for options in ({"read_only": True}, {"at": time.time()}):
        with pytest.raises(neostore.StoreNotFoundError) as caught:
            zarr.open_group(ZarrStore(url, **options), mode="r")
        assert str(caught.value) == f"no store at {url}: {tmp_path}/absent.db does not exist"
    assert os.listdir(tmp_path) == []
    zarr.open_group(ZarrStore(url), mode="a").create_array("x", shape=(3,), dtype="int8")  # a writer creates it
    assert zarr.open_group(ZarrStore(url, read_only=True), mode="r")["x"].shape == (3,)


def test_codec_compressed_chunks_are_stored_raw(sqlite_url: str) -> None:
    """Blosc chunks skip neostore's zstd, so ranged reads of shards stay in the database."""
    store = ZarrStore(sqlite_url)
    data = np.tile(np.arange(1000, dtype="f4"), 100).reshape(100, 1000)
    z = zarr.create_array(
        store,
        name="a",
        shape=data.shape,
        chunks=(50, 1000),
        dtype="f4",
        compressors=zarr.codecs.BloscCodec(cname="zstd", shuffle="shuffle"),
    )
    z[:] = data
    np.testing.assert_array_equal(zarr.open_array(ZarrStore(sqlite_url), path="a")[:], data)
    with neostore.open(sqlite_url) as direct:
        rows = direct.query(
            "SELECT d.compression FROM name n JOIN obj o ON o.oid = n.oid JOIN data d ON d.id = o.data_id "
            "WHERE n.name >= ? AND n.name < ?",
            (b"a/c/", b"a/c0"),
        )
    assert rows and {r[0] for r in rows} == {0}  # RAW


# -- time travel -----------------------------------------------------------------


def test_time_travel_reads_old_values(url: str) -> None:
    z = zarr.create_array(ZarrStore(url), name="t", shape=(20,), chunks=(5,), dtype="i4")
    z[:] = np.arange(20)
    with neostore.open(url) as direct:
        first = direct.last_transaction()
    time.sleep(0.05)
    moment = datetime.now(UTC)
    time.sleep(0.05)
    z[:10] = -1
    z.resize((30,))
    z[20:] = 7

    now = zarr.open_array(ZarrStore(url, read_only=True), path="t")
    assert now.shape == (30,) and now[0] == -1
    for at in (first, moment, moment.replace(tzinfo=None), moment.timestamp()):
        old_store = ZarrStore(url, at=at)
        assert old_store.read_only
        old = zarr.open_array(old_store, path="t")
        assert old.shape == (20,)
        np.testing.assert_array_equal(old[:], np.arange(20))
        with pytest.raises(ValueError, match="read-only mode"):
            old[0] = 5
    with pytest.raises(ValueError, match="snapshot of the past"):
        ZarrStore(url, at=first).with_read_only(False)
    with pytest.raises(SnapshotError):
        ZarrStore(url, at=b"\x01\x02")
    # Before anything was committed, nothing exists.
    assert not asyncio.run(_keys(ZarrStore(url, at=neostore.ZERO)))

    # A time in the future pins the latest commit when the store opens.
    later = ZarrStore(url, at=time.time() + 3600)
    np.testing.assert_array_equal(zarr.open_array(later, path="t")[:10], -1)
    z[:10] = 2
    np.testing.assert_array_equal(zarr.open_array(later, path="t")[:10], -1)

    # A pack removes the history before its tid: reading there is refused.
    with neostore.open(url) as direct:
        direct.pack(direct.last_transaction())
    with pytest.raises(SnapshotError, match="before the last pack"):
        asyncio.run(ZarrStore.open(url, at=first))


async def _keys(store: ZarrStore) -> list[str]:
    return [k async for k in store.list()]


# -- a store bound to a transaction ------------------------------------------------


def test_transaction_store_commits_atomically(url: str) -> None:
    data = np.arange(600, dtype="f8").reshape(60, 10)
    reader = ZarrStore(url, read_only=True)
    before = commits(url)
    with arrays.transaction(url, message="load batch", metadata={"rows": 60}) as tx:
        # Take the commit lock in this thread, as an appender does: zarr's
        # writes then run in other threads and must still get through.
        tx.lock()
        z = zarr.create_array(
            ZarrStore.for_transaction(tx), name="batch", shape=data.shape, chunks=(10, 10), dtype="f8"
        )
        z[:] = data
        # The transaction reads its own writes; nobody else sees them yet.
        np.testing.assert_array_equal(zarr.open_array(ZarrStore.for_transaction(tx), path="batch")[:], data)
        assert not asyncio.run(_keys(reader))
        assert commits(url) == before
    assert commits(url) == before + 1
    np.testing.assert_array_equal(zarr.open_array(reader, path="batch")[:], data)
    with neostore.open(url) as direct:
        info = direct.transaction_info(direct.last_transaction())
    assert info.description == b"load batch"

    with pytest.raises(RuntimeError, match="boom"):
        with arrays.transaction(url, message="doomed") as tx:
            z = zarr.open_array(ZarrStore.for_transaction(tx), path="batch")
            z[:] = 0
            zarr.create_array(ZarrStore.for_transaction(tx), name="other", shape=(5,), chunks=(5,), dtype="i2")[:] = 1
            raise RuntimeError("boom")
    np.testing.assert_array_equal(zarr.open_array(reader, path="batch")[:], data)
    assert not asyncio.run(reader.exists("other/zarr.json"))
    assert commits(url) == before + 1
    # A finished transaction's store refuses writes with a clear message.
    with pytest.raises(ValueError, match="transaction of this store is"):
        asyncio.run(ZarrStore.for_transaction(tx).set("x", buf(b"1")))


def test_transaction_store_is_not_picklable(sqlite_url: str) -> None:
    with arrays.transaction(sqlite_url) as tx:
        with pytest.raises(TypeError, match="bound to a transaction"):
            pickle.dumps(ZarrStore.for_transaction(tx))
        assert ZarrStore.for_transaction(tx) == ZarrStore.for_transaction(tx)
        assert ZarrStore.for_transaction(tx) != ZarrStore(sqlite_url)


# -- xarray ------------------------------------------------------------------------


def test_xarray_round_trip(url: str) -> None:
    rng = np.random.default_rng(3)
    time_index = np.arange(200)
    ds = xr.Dataset(
        {
            "temperature": (("time", "sensor"), rng.normal(20, 2, (200, 4)).astype("f4")),
            "pressure": (("time",), rng.normal(1013, 5, 200)),
        },
        coords={"time": time_index, "sensor": [10, 11, 12, 13]},
        attrs={"site": "north"},
    )
    ds.to_zarr(
        ZarrStore(url), group="stream", mode="w", consolidated=False, encoding={"temperature": {"chunks": (50, 4)}}
    )
    back = xr.open_zarr(ZarrStore(url, read_only=True), group="stream", consolidated=False)
    xr.testing.assert_identical(back.load(), ds)
    np.testing.assert_array_equal(back.temperature.values, ds.temperature.values)


# -- group commit ------------------------------------------------------------------


async def test_concurrent_sets_share_commits(url: str) -> None:
    store = await ZarrStore.open(url)
    before = commits(url)
    values = {f"g/c/{i}": os.urandom(64) + i.to_bytes(4, "big") for i in range(200)}
    await asyncio.gather(*(store.set(k, buf(v)) for k, v in values.items()))
    used = commits(url) - before
    assert 1 <= used <= 20, used
    with neostore.open(url) as direct:
        assert Snapshot(direct).get_many(values) == values

    # delete_dir is one transaction, however many keys it removes.
    before = commits(url)
    await store.delete_dir("g")
    assert commits(url) == before + 1
    assert [k async for k in store.list_prefix("g/")] == []
    store.close()


def test_a_failing_change_fails_alone(url: str) -> None:
    """A batch whose commit fails is retried change by change: only the culprit's caller sees the error."""
    with neostore.open(url) as store:
        group = GroupCommit(store)
        # Hold the commit lock so that the changes below queue up behind the first.
        blocker = arrays.Transaction(neostore.open(url))
        blocker.lock()
        first = group.submit(Change("set", "first", b"1"))
        time.sleep(0.2)
        queued = [group.submit(Change("set", f"ok/{i}", b"v")) for i in range(10)]
        bad = group.submit(Change("rename", "nope", b"v"))  # type: ignore[arg-type]  # an unknown kind on purpose
        blocker.commit()
        blocker.store.close()
        assert first.result(timeout=30) is None
        assert [f.result(timeout=30) for f in queued] == [None] * 10
        with pytest.raises(ValueError, match="unknown change kind"):
            bad.result(timeout=30)
        group.close()
        assert Snapshot(store).get_many([f"ok/{i}" for i in range(10)]) == {f"ok/{i}": b"v" for i in range(10)}


async def test_bad_key_is_refused_before_queueing(sqlite_url: str) -> None:
    store = await ZarrStore.open(sqlite_url)
    with pytest.raises(ValueError, match="name limit"):
        await store.set("x" * 2000, buf(b"v"))
    with pytest.raises(TypeError, match="Buffer"):
        await store.set("k", b"raw bytes")  # type: ignore[arg-type]  # bytes, not a Buffer, on purpose
    store.close()


def test_pickled_store_reopens(sqlite_url: str) -> None:
    store = ZarrStore(sqlite_url, at=1e9)
    clone = pickle.loads(pickle.dumps(store))
    assert clone == store and clone.read_only and clone.before == store.before
    assert repr(clone) == f"ZarrStore({sqlite_url!r}, at=1000000000.0)"
