"""BigArray against numpy, zarr and xarray, on real SQLite files and a real MariaDB server.

Every read is compared with the same operation on a numpy array; writes
are checked by reading back, by zarr, and by what neostore committed.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime

import numpy as np
import pytest
import zarr

from windvane import arrays, neostore
from windvane.arrays.keys import Snapshot

RNG = np.random.default_rng(20260212)


def sensor_block(rows: int, channels: int = 8, start: int = 0, seed: int = 1) -> np.ndarray:
    """Sensor-like float32 rows (tones + noise, quantised to 1e-3): row ``i`` depends on ``i`` alone."""
    row = np.arange(start, start + rows, dtype=np.float64)[:, None]
    freq = np.linspace(0.5, 50.0, channels) * seed
    noise = np.modf(np.sin(row * 12.9898 + np.arange(channels) * 78.233) * 43758.5453)[0] * 0.02
    return np.round(10 * np.sin(2 * np.pi * freq * row / 1000.0) + noise, 3).astype(np.float32)


def last_commit_oids(store: neostore.Store, since: bytes) -> list[bytes]:
    """The oids written by the commits after ``since``."""
    return [oid for _, oids in store.changes_since(since) for oid in oids]


@pytest.fixture
def store(sqlite_url):
    s = neostore.open(sqlite_url)
    yield s
    s.close()


# -- creating and opening ------------------------------------------------------------------


def test_create_and_open(store_url):
    a = arrays.create(
        store_url, "stream/temperature", (0, 8), "float32", dims=("time", "channel"), attributes={"unit": "K"}
    )
    try:
        assert a.shape == (0, 8) and len(a) == 0 and a.ndim == 2
        assert a.dtype == np.float32 and a.name == "stream/temperature"
        assert a.chunks == (65536, 8)  # whole rows, 2 MiB
        assert a.nbytes == 0 and a.attrs == {"unit": "K"} and a.dims == ("time", "channel")
        assert a.codec[1]["name"] == "blosc" and a.codec[1]["configuration"]["shuffle"] == "shuffle"
        a.append(np.ones((10, 8), np.float32))
        assert a.nbytes == 320 and len(a) == 10
        with arrays.open(store_url, "stream/temperature") as again:
            assert again.tid == a.tid
    finally:
        a.close()
    with arrays.open(store_url, "stream/temperature") as b:
        assert b.shape == (10, 8) and b.chunks == (65536, 8) and b.attrs == {"unit": "K"}
        np.testing.assert_array_equal(b[:], np.ones((10, 8), np.float32))
    with pytest.raises(arrays.ArrayExistsError, match="stream/temperature"):
        arrays.create(store_url, "stream/temperature", (1,), "int8")
    with pytest.raises(arrays.ArrayExistsError, match="'stream/temperature' is an array, not a group"):
        arrays.create(store_url, "stream/temperature/inner", (1,), "int8")
    with pytest.raises(arrays.ArrayNotFoundError, match=r"arrays\.create"):
        arrays.open(store_url, "stream/pressure")
    with pytest.raises(arrays.ArrayNotFoundError):
        arrays.open(store_url, "stream")  # a group, not an array
    # The parent groups exist as zarr v3 nodes: zarr sees the hierarchy.
    root = zarr.open_group(arrays.ZarrStore(store_url), mode="r")
    assert list(root.group_keys()) == ["stream"]
    assert list(root["stream"].array_keys()) == ["temperature"]


def test_create_arguments(store):
    assert arrays.create(store, "a", 1000, "int8").codec[1]["name"] == "zstd"
    assert arrays.create(store, "b", (5, 3), ">f8", chunks=2).chunks == (2, 3)
    assert arrays.create(store, "b2", (5, 3), ">f8").dtype == np.dtype("<f8")  # stored little-endian
    big_rows = arrays.create(store, "c", (4, 1024, 1024), "float32")  # 4 MiB rows: split along axis 1
    assert big_rows.chunks == (1, 512, 1024)
    none = arrays.create(store, "d", (4,), "float32", codec="none")
    assert [c["name"] for c in none.codec] == ["bytes"]
    tuned = arrays.create(store, "e", (4,), "float32", codec={"name": "blosc", "clevel": 5, "cname": "lz4"})
    assert tuned.codec[1]["configuration"] == {
        "typesize": 4,
        "cname": "lz4",
        "clevel": 5,
        "shuffle": "shuffle",
        "blocksize": 0,
    }
    with pytest.raises(arrays.UnsupportedArrayError, match="lzma"):
        arrays.create(store, "f", (4,), "float32", codec="lzma")
    with pytest.raises(arrays.UnsupportedArrayError, match="object"):
        arrays.create(store, "g", (4,), object)
    with pytest.raises(ValueError, match="chunks"):
        arrays.create(store, "h", (4, 4), "float32", chunks=(0, 4))
    with pytest.raises(ValueError, match="name"):
        arrays.create(store, "a//b", (4,), "float32")
    with pytest.raises(ValueError, match="fill_value"):
        arrays.create(store, "i", (4,), "int16", fill_value="many")


# -- reading ---------------------------------------------------------------------------------

SELECTIONS_2D = [
    (),
    (Ellipsis,),
    0,
    -1,
    12,
    slice(None),
    slice(3, 17),
    slice(-5, None),
    slice(None, None, 2),
    slice(None, None, -1),
    slice(20, 2, -3),
    slice(1, 40, 7),
    slice(5, 5),
    (slice(None), 0),
    (Ellipsis, -2),
    (slice(2, 9), slice(1, 4)),
    (-3, slice(None, None, -2)),
    (slice(None, None, 11), slice(None, None, 3)),
    (7, 4),
    (slice(30, 1, -9), 2),
    (Ellipsis, slice(0, 5, 4)),
    (slice(39, None), Ellipsis),
]


def test_indexing_matches_numpy(store):
    ref = np.arange(41 * 5, dtype=np.float64).reshape(41, 5)
    a = arrays.create(store, "grid", ref.shape, ref.dtype, chunks=(4, 2))  # edge chunks on both axes
    a[...] = ref
    for sel in SELECTIONS_2D:
        got = a[sel]
        assert type(got) is type(ref[sel]), sel  # an ndarray, or a numpy scalar when every axis is an integer
        np.testing.assert_array_equal(got, ref[sel], err_msg=f"selection {sel!r}")
        assert np.shape(got) == ref[sel].shape, sel
    line = np.arange(100, dtype=np.int32)
    b = arrays.create(store, "line", line.shape, line.dtype, chunks=7)
    b[:] = line
    for sel in [slice(None), slice(95, None), slice(None, None, 13), slice(None, None, -8), -1, 99, 0, slice(6, 8)]:
        np.testing.assert_array_equal(b[sel], line[sel], err_msg=f"selection {sel!r}")
    np.testing.assert_array_equal(b[np.int64(3)], line[3])


def test_basic_indexing_only(store):
    a = arrays.create(store, "x", (10, 3), "float32", chunks=(4, 3))
    for bad in ([1, 2], np.array([0, 1]), np.ones(10, bool), (slice(None), [0]), True):
        with pytest.raises(TypeError, match="basic indexing"):
            a[bad]
    with pytest.raises(TypeError, match="newaxis"):
        a[None]
    with pytest.raises(IndexError, match="out of bounds for axis 0 with size 10"):
        a[10]
    with pytest.raises(IndexError, match="too many indices"):
        a[1, 2, 3]
    with pytest.raises(IndexError, match="single ellipsis"):
        a[..., ...]


def test_reads_load_only_the_chunks_they_touch(store):
    a = arrays.create(store, "x", (100, 3), "float32", chunks=(10, 3))
    a[:] = np.arange(300, dtype=np.float32).reshape(100, 3)
    b = arrays.open(store, "x")
    assert b.chunks_loaded == 0
    b[12:18]
    assert b.chunks_loaded == 1
    b[15:35, 1]
    assert b.chunks_loaded == 3  # chunk 1 came from the cache, chunks 2 and 3 from the database
    b[::50]
    assert b.chunks_loaded == 5
    b[0:100]  # all ten chunks, five of them cached
    assert b.chunks_loaded == 10
    assert b.cache.stats()["hits"] == 1 + 5


def test_missing_chunks_read_as_fill_value(store):
    a = arrays.create(store, "x", (10,), "float64", chunks=4, fill_value=np.nan)
    assert np.isnan(a[:]).all()
    a[5] = 1.5
    expected = np.full(10, np.nan)
    expected[5] = 1.5
    np.testing.assert_array_equal(a[:], expected)
    keys = [e.key for e in Snapshot(store).list("x/c/")]
    assert keys == ["x/c/1"]  # only the chunk written exists


def test_asarray_and_blocks(store):
    ref = sensor_block(1000, 3)
    a = arrays.create(store, "x", (0, 3), "float32", chunks=(64, 3))
    a.append(ref)
    np.testing.assert_array_equal(np.asarray(a), ref)
    assert np.asarray(a, dtype=np.float64).dtype == np.float64
    starts, pieces = zip(*a.blocks(rows=300))
    assert starts == (0, 300, 600, 900)
    np.testing.assert_array_equal(np.concatenate(pieces), ref)
    assert [len(p) for _, p in a.blocks()] == [64] * 15 + [40]  # default: one chunk's rows
    with pytest.raises(ValueError):
        next(a.blocks(rows=0))


# -- writing ---------------------------------------------------------------------------------


def test_setitem_matches_numpy(store):
    ref = np.zeros((23, 7), np.int64)
    a = arrays.create(store, "x", ref.shape, ref.dtype, chunks=(5, 3))
    writes = [
        (Ellipsis, np.arange(23 * 7).reshape(23, 7)),
        ((slice(2, 9), slice(1, 6)), -1),  # broadcast scalar, partial chunks
        ((slice(None, None, -4), 3), np.arange(6)),
        (4, np.arange(7) * 10),
        ((slice(20, None), slice(None)), [[1, 2, 3, 4, 5, 6, 7]]),  # broadcast a row, edge chunks
        ((slice(1, 22, 6), slice(6, 0, -2)), 99),
        ((-1, -1), 123),
    ]
    for sel, value in writes:
        a[sel] = value
        ref[sel] = value
        np.testing.assert_array_equal(a[:], ref, err_msg=f"after writing {sel!r}")
    with pytest.raises(ValueError):
        a[0:2] = np.ones((3, 7))
    b = arrays.open(store, "x")
    np.testing.assert_array_equal(b[:], ref)


def test_setitem_rewrites_only_touched_chunks(store):
    a = arrays.create(store, "x", (100, 4), "float32", chunks=(10, 4))
    a[:] = 1.0
    before = store.last_transaction()
    a[33:35, 1] = 7.0  # inside chunk 3
    assert len(last_commit_oids(store, before)) == 1
    before = store.last_transaction()
    a[9:11] = 2.0  # chunks 0 and 1
    assert len(last_commit_oids(store, before)) == 2
    expected = np.ones((100, 4), np.float32)
    expected[33:35, 1] = 7
    expected[9:11] = 2
    np.testing.assert_array_equal(arrays.open(store, "x")[:], expected)


def test_append_along_axis_0(store_url):
    a = arrays.create(store_url, "log", (0, 3), "int32", chunks=(16, 3))
    ref = np.zeros((0, 3), np.int32)
    try:
        for n in [1, 15, 16, 5, 40, 0, 3]:
            rows = RNG.integers(0, 1000, (n, 3), dtype=np.int32)
            assert a.append(rows) == (len(ref) + n, 3)
            ref = np.concatenate([ref, rows])
            np.testing.assert_array_equal(a[:], ref)
        a.append(np.array([7, 8, 9], np.int32))  # one row
        ref = np.concatenate([ref, [[7, 8, 9]]])
        with arrays.open(store_url, "log") as b:
            np.testing.assert_array_equal(b[:], ref)
        with pytest.raises(ValueError, match="axis 1 differs"):
            a.append(np.zeros((2, 4), np.int32))
    finally:
        a.close()


def test_append_rewrites_only_the_partial_last_chunk(store):
    a = arrays.create(store, "x", (0, 8), "float32", chunks=(100, 8))
    a.append(sensor_block(2550))  # 25 full chunks and a partial one
    before = store.last_transaction()
    a.append(sensor_block(30, start=2550))  # fits in the partial chunk
    written = set(last_commit_oids(store, before))
    names = store.oids_for([b"x/zarr.json", b"x/c/25/0"])
    assert written == set(names.values())
    before = store.last_transaction()
    a.append(sensor_block(130, start=2580))  # fills chunk 25, then chunks 26 and 27
    assert len(last_commit_oids(store, before)) == 1 + 3
    np.testing.assert_array_equal(a[:], sensor_block(2710))


def test_append_along_axis_1(store):
    ref = np.arange(12, dtype=np.float32).reshape(4, 3)
    a = arrays.create(store, "x", ref.shape, ref.dtype, chunks=(3, 2))
    a[:] = ref
    for n in (1, 2, 5):
        cols = RNG.normal(size=(4, n)).astype(np.float32)
        a.append(cols, axis=1)
        ref = np.concatenate([ref, cols], axis=1)
        np.testing.assert_array_equal(a[:], ref)
    a.append(np.ones(4, np.float32), axis=-1)
    np.testing.assert_array_equal(a[:, -1], np.ones(4))
    with pytest.raises(ValueError, match="axis 0 differs"):
        a.append(np.zeros((5, 1), np.float32), axis=1)


# -- dask, xarray, zarr ------------------------------------------------------------------------


def test_dask_computes_in_parallel(store_url):
    import dask

    ref = sensor_block(5000, 4)
    a = arrays.create(store_url, "x", (0, 4), "float32", chunks=(512, 4))
    try:
        a.append(ref)
        d = a.to_dask()
        assert d.chunks[0] == (512,) * 9 + (392,) and d.chunks[1] == (4,)
        with dask.config.set(scheduler="threads", num_workers=4):
            mean, std, total = dask.compute(d.mean(axis=0, dtype="f8"), d.std(axis=0, dtype="f8"), d.sum(dtype="f8"))
            window = d[100:4000:3, 1:3].max().compute()
    finally:
        a.close()
    exact = ref.astype(np.float64)  # float64 sums: equal whatever the order dask adds in
    np.testing.assert_allclose(mean, exact.mean(axis=0), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(std, exact.std(axis=0), rtol=1e-12)
    np.testing.assert_allclose(total, exact.sum(), rtol=1e-12)
    assert window == ref[100:4000:3, 1:3].max()


def test_xarray_opens_a_stream_group(store_url):
    import xarray as xr

    rows = 3000
    time_axis = np.arange(rows, dtype=np.int64) * 1000
    temperature = sensor_block(rows, 4)
    pressure = sensor_block(rows, 1, seed=2)[:, 0]
    with arrays.transaction(store_url, message="stream") as tx:
        arrays.create(tx, "site/stream/time", (0,), "int64", chunks=1000, dims=("time",)).append(time_axis)
        arrays.create(
            tx,
            "site/stream/temperature",
            (0, 4),
            "float32",
            chunks=(1000, 4),
            dims=("time", "channel"),
            attributes={"units": "degC"},
        ).append(temperature)
        arrays.create(tx, "site/stream/pressure", (0,), "float32", chunks=700, dims=("time",)).append(pressure)
    ds = xr.open_zarr(arrays.ZarrStore(store_url, read_only=True), group="site/stream", consolidated=False)
    assert set(ds.data_vars) == {"temperature", "pressure"} and list(ds.coords) == ["time"]
    assert ds.temperature.attrs["units"] == "degC" and ds.temperature.dims == ("time", "channel")
    np.testing.assert_array_equal(ds.time.values, time_axis)
    np.testing.assert_array_equal(ds.temperature.values, temperature)
    np.testing.assert_array_equal(ds.pressure.values, pressure)
    np.testing.assert_allclose(ds.temperature.mean("time").values, temperature.mean(axis=0), atol=1e-5)
    window = ds.sel(time=slice(500_000, 1_000_000))
    np.testing.assert_array_equal(window.pressure.values, pressure[500:1001])


def test_zarr_reads_bigarrays_byte_for_byte(store_url):
    ref = sensor_block(2500, 8)
    a = arrays.create(store_url, "g/x", (0, 8), "float32", chunks=(1000, 8), fill_value=np.nan)
    try:
        a.append(ref)
    finally:
        a.close()
    z = zarr.open_array(arrays.ZarrStore(store_url, read_only=True), path="g/x", mode="r")
    assert z.shape == (2500, 8) and z.chunks == (1000, 8) and np.isnan(z.fill_value)
    np.testing.assert_array_equal(z[...], ref)
    # zarr's own encoding of the same chunks gives the same bytes (so both dedup alike).
    zarr_keys: dict = {}  # what zarr's MemoryStore holds, by key
    mem = zarr.storage.MemoryStore(zarr_keys)
    zarr.create_array(
        mem,
        name="x",
        shape=(2500, 8),
        chunks=(1000, 8),
        dtype="float32",
        fill_value=np.nan,
        compressors=zarr.codecs.BloscCodec(cname="zstd", clevel=3, shuffle="shuffle"),
    )[...] = ref
    with neostore.open(store_url) as s:
        ours = Snapshot(s).get_many([f"g/x/c/{i}/0" for i in range(3)])
    theirs = [zarr_keys[f"x/c/{i}/0"].to_bytes() for i in range(3)]
    assert [ours[f"g/x/c/{i}/0"] for i in range(3)] == theirs


@pytest.mark.parametrize(
    "compressors",
    [None, zarr.codecs.ZstdCodec(level=5), zarr.codecs.GzipCodec(level=3), ()],
    ids=["default", "zstd", "gzip", "uncompressed"],
)
def test_bigarray_reads_and_appends_to_zarr_arrays(sqlite_url, compressors):
    ref = RNG.normal(size=(50, 6))
    kwargs = {} if compressors is None else {"compressors": compressors}
    z = zarr.create_array(
        arrays.ZarrStore(sqlite_url),
        name="z/arr",
        shape=ref.shape,
        chunks=(8, 4),
        dtype="float64",
        fill_value=-1.0,
        **kwargs,
    )
    z[...] = ref
    with arrays.open(sqlite_url, "z/arr") as a:
        assert a.chunks == (8, 4) and a.fill_value == -1.0
        np.testing.assert_array_equal(a[:], ref)
        np.testing.assert_array_equal(a[7:19:3, 3:], ref[7:19:3, 3:])
        more = RNG.normal(size=(5, 6))
        a.append(more)
    z = zarr.open_array(arrays.ZarrStore(sqlite_url, read_only=True), path="z/arr", mode="r")
    np.testing.assert_array_equal(z[...], np.concatenate([ref, more]))


def test_unsupported_zarr_arrays_are_named(sqlite_url):
    zs = arrays.ZarrStore(sqlite_url)
    zarr.create_array(zs, name="sharded", shape=(100,), chunks=(10,), shards=(50,), dtype="int32")
    zarr.create_array(
        zs, name="checked", shape=(10,), chunks=(5,), dtype="int32", compressors=zarr.codecs.Crc32cCodec()
    )
    with pytest.raises(arrays.UnsupportedArrayError, match="sharding_indexed"):
        arrays.open(sqlite_url, "sharded")
    with pytest.raises(arrays.UnsupportedArrayError, match="crc32c"):
        arrays.open(sqlite_url, "checked")
    zarr.create_array(zs, name="words", shape=(3,), chunks=(3,), dtype="U5")  # fixed-width strings
    with pytest.raises(arrays.UnsupportedArrayError, match="not supported"):
        arrays.open(sqlite_url, "words")
    arrays.create(sqlite_url, "ragged", (10,), "int8").close()
    with arrays.transaction(sqlite_url) as tx:
        doc = json.loads(tx.get("ragged/zarr.json"))
        doc["chunk_grid"] = {"name": "rectilinear", "configuration": {"chunk_shapes": [[3, 7]]}}
        tx.set("ragged/zarr.json", json.dumps(doc).encode())
    with pytest.raises(arrays.UnsupportedArrayError, match="rectilinear"):
        arrays.open(sqlite_url, "ragged")


# -- transactions, snapshots, history ----------------------------------------------------------


def test_transaction_is_atomic(store_url):
    with arrays.create(store_url, "s/x", (0, 2), "int64", chunks=(4, 2)) as a:
        a.append(np.zeros((10, 2), np.int64))
    before = arrays.open(store_url, "s/x")
    try:
        with arrays.transaction(store_url, message="ingest batch 7", metadata={"batch": 7, "source": "mqtt"}) as tx:
            x = arrays.open(tx, "s/x")
            x.append(np.ones((5, 2), np.int64))
            x[0] = [3, 3]
            y = arrays.create(tx, "s/y", (3,), "float32")
            y[:] = [1, 2, 3]
            np.testing.assert_array_equal(x[-6:, 0], [0, 1, 1, 1, 1, 1])  # the transaction reads its writes
            with arrays.open(store_url, "s/x") as outside:  # nothing is visible before commit
                assert outside.shape == (10, 2) and outside[0, 0] == 0
            with pytest.raises(arrays.ArrayNotFoundError):
                arrays.open(store_url, "s/y")
        assert before.shape == (10, 2) and before[:].sum() == 0  # a reader opened before sees none of it
        before.refresh()
        assert before.shape == (15, 2) and before[:, 1].sum() == 8
        with arrays.open(store_url, "s/y") as after:
            np.testing.assert_array_equal(after[:], [1, 2, 3])
        with pytest.raises(arrays.ArrayError, match="has ended"):
            x[0]
    finally:
        before.close()
    commits = arrays.history(store_url, "s/x")
    assert [c.message for c in commits] == ["create array s/x", "append 10 rows to s/x", "ingest batch 7"]
    assert commits[-1].metadata == {"batch": 7, "source": "mqtt"}
    assert arrays.history(store_url, "s/y")[-1].tid == commits[-1].tid  # one commit for both arrays


def test_transaction_aborts_on_exception(store_url):
    with arrays.create(store_url, "s/x", (0,), "int16", chunks=8) as a:
        a.append(np.arange(5, dtype=np.int16))
    with pytest.raises(RuntimeError, match="sensor unplugged"):
        with arrays.transaction(store_url, message="doomed") as tx:
            arrays.open(tx, "s/x").append(np.arange(100, dtype=np.int16))
            arrays.create(tx, "s/y", (4,), "int16")
            raise RuntimeError("sensor unplugged")
    with arrays.open(store_url, "s/x") as a:
        np.testing.assert_array_equal(a[:], np.arange(5))
    with pytest.raises(arrays.ArrayNotFoundError):
        arrays.open(store_url, "s/y")
    assert "doomed" not in [c.message for c in arrays.history(store_url, "s/x")]


def test_reader_keeps_its_snapshot_until_refresh(store_url):
    writer = arrays.create(store_url, "x", (0, 4), "float32", chunks=(100, 4))
    reader = None
    try:
        writer.append(sensor_block(250, 4))
        reader = arrays.open(store_url, "x")
        seen = reader[:]
        for i in range(3):
            writer.append(sensor_block(70, 4, start=250 + 70 * i))
            writer[0, 0] = -i
            assert reader.shape == (250, 4)
            np.testing.assert_array_equal(reader[:], seen)
        tid = reader.refresh()
        assert tid == writer.tid and reader.shape == (460, 4)
        expected = sensor_block(460, 4)
        expected[0, 0] = -2
        np.testing.assert_array_equal(reader[:], expected)
    finally:
        writer.close()
        if reader is not None:
            reader.close()


def test_time_travel(store_url):
    a = arrays.create(store_url, "x", (0, 2), "int32", chunks=(3, 2))
    states, tids, times = [], [], []
    try:
        for i in range(4):
            a.append(np.full((i + 1, 2), i, np.int32))
            states.append(a[:])
            tids.append(a.tid)
            time.sleep(0.01)
            times.append(datetime.now(UTC))
            time.sleep(0.01)
        a[0] = [-1, -1]
    finally:
        a.close()
    for state, tid, moment in zip(states, tids, times):
        for at in (tid, moment, moment.timestamp(), moment.replace(tzinfo=None)):
            with arrays.open(store_url, "x", at=at) as old:
                assert old.read_only and old.shape == state.shape
                np.testing.assert_array_equal(old[:], state)
    history = arrays.history(store_url, "x")
    assert [c.tid for c in history[1:5]] == tids
    with arrays.open(store_url, "x", at=history[0].tid) as empty:  # as created
        assert empty.shape == (0, 2)
    with arrays.open(store_url, "x", at=tids[1]) as old:
        with pytest.raises(arrays.ReadOnlyArrayError, match="at="):
            old.append(np.zeros((1, 2), np.int32))
        with pytest.raises(arrays.ReadOnlyArrayError):
            old[0] = 5
    with pytest.raises(arrays.ArrayNotFoundError):
        arrays.open(store_url, "x", at=datetime(2000, 1, 1, tzinfo=UTC))
    with pytest.raises(arrays.SnapshotError, match="8 bytes"):
        arrays.open(store_url, "x", at=b"\x01")
    with pytest.raises(arrays.SnapshotError, match="'yesterday' is not a time"):
        arrays.open(store_url, "x", at="yesterday")


def test_history_lists_commits_with_messages(store):
    a = arrays.create(store, "plant/line1", (0,), "float64", chunks=10)
    other = arrays.create(store, "plant/line10", (0,), "float64", chunks=10)
    a.append(np.ones(3), message="morning shift", metadata={"operator": "ana"})
    other.append(np.ones(3))  # a name that merely shares the prefix: not line1's history
    a.append(np.ones(12))
    with arrays.transaction(store, message="calibration", metadata={"offset": 0.1}, user="lab") as tx:
        b = arrays.open(tx, "plant/line1")
        b[:] = b[:] + 0.1
    commits = arrays.history(store, "plant/line1")
    assert [c.message for c in commits] == [
        "create array plant/line1",
        "morning shift",
        "append 12 rows to plant/line1",
        "calibration",
    ]
    assert commits[1].metadata == {"operator": "ana"} and commits[2].metadata == {}
    assert commits[3].user == "lab" and commits[3].metadata == {"offset": 0.1}
    assert all(c.time.tzinfo is UTC for c in commits)
    assert [c.tid for c in commits] == sorted(c.tid for c in commits)
    assert commits[0].time <= commits[-1].time
    with pytest.raises(arrays.ArrayNotFoundError):
        arrays.history(store, "plant/line2")


# -- the chunk cache -------------------------------------------------------------------------------


def test_cache_keeps_unchanged_chunks_across_refresh(store_url):
    writer = arrays.create(store_url, "x", (0, 4), "float64", chunks=(10, 4))
    reader = None
    try:
        writer.append(np.arange(400, dtype=np.float64).reshape(100, 4))
        reader = arrays.open(store_url, "x")
        reader[:]
        assert reader.chunks_loaded == 10 and reader.cache.stats()["entries"] == 10
        writer[55, 0] = -1.0  # changes chunk 5
        writer.append(np.zeros((15, 4)))  # chunks 10 and 11
        reader.refresh()
        assert reader.cache.stats()["entries"] == 9  # only chunk 5 was dropped
        got = reader[:]
        assert reader.chunks_loaded == 10 + 3  # chunk 5 again, and the two new ones
        assert got[55, 0] == -1.0 and got.shape == (115, 4)
    finally:
        writer.close()
        if reader is not None:
            reader.close()


def test_cache_stays_within_its_budget(store):
    a = arrays.create(store, "x", (0, 8), "float32", chunks=(1024, 8))  # 32 KiB chunks
    a.append(sensor_block(64 * 1024))
    b = arrays.open(store, "x", cache_bytes=10 * 32 * 1024)
    for _ in b.blocks():
        assert b.cache.nbytes <= b.cache.budget
    stats = b.cache.stats()
    assert stats["entries"] == 10 and stats["evictions"] == 64 - 10
    np.testing.assert_array_equal(b[-1024:], sensor_block(1024, start=63 * 1024))


# -- codecs and dedup --------------------------------------------------------------------------------


def test_identical_chunks_are_stored_once(store):
    data = sensor_block(200_000)  # 6.1 MiB
    a = arrays.create(store, "a", (0, 8), "float32")
    a.append(data)
    grown = store.value_size()
    b = arrays.create(store, "b", (0, 8), "float32")
    for start in range(0, len(data), 65536):  # appends of whole chunks: no partial revisions in history
        b.append(data[start : start + 65536])
    c = arrays.create(store, "c", data.shape, "float32")  # one write, no appends
    c[:] = data
    assert store.value_size() - grown < 4096  # the zarr.json documents, nothing more
    stored = Snapshot(store).get_many([f"{n}/c/1/0" for n in "abc"])
    assert len(set(stored.values())) == 1  # deterministic codec: identical bytes
    assert grown < data.nbytes / 1.2  # and blosc did compress


# -- acceptance: dedup of 1 GiB ------------------------------------------------------------------------


@pytest.mark.slow
def test_dedup_of_one_gib(tmp_path):
    """Writing the same 1 GiB into two arrays grows the database by less than 2%."""
    url = f"sqlite:///{tmp_path}/dedup.db"
    path = tmp_path / "dedup.db"
    piece_rows = 2 * 1024 * 1024  # 64 MiB of 8 float32 channels per append
    pieces = 16

    def piece(i: int) -> np.ndarray:
        # A random walk quantised to 0.01 per channel: drifting sensor readings, cheap to make.
        steps = np.random.default_rng((7, i)).integers(-3, 4, (piece_rows, 8), dtype=np.int8)
        return (np.cumsum(steps, axis=0, dtype=np.int32) + 2000 * i).astype(np.float32) * np.float32(0.01)

    def fill(name: str) -> None:
        with arrays.create(url, name, (0, 8), "float32") as a:
            for i in range(pieces):
                a.append(piece(i))

    fill("first")  # closing the last connection checkpoints the WAL into the file
    with neostore.open(url) as s:
        values_first = s.value_size()
    size_first = path.stat().st_size
    fill("second")
    with neostore.open(url) as s:
        values_second = s.value_size()
        with arrays.open(s, "second") as b:
            assert b.shape == (pieces * piece_rows, 8)
            np.testing.assert_array_equal(b[-5:], piece(pieces - 1)[-5:])
    size_second = path.stat().st_size
    growth = (values_second - values_first) / values_first
    file_growth = (size_second - size_first) / size_first
    print(
        f"1 GiB twice: stored values {values_first} -> {values_second} bytes (+{growth:.4%}); "
        f"database file {size_first} -> {size_second} bytes (+{file_growth:.4%})"
    )
    assert values_first > (1 << 30) // 4  # the first copy really is stored (compressed)
    assert growth < 0.02
    assert file_growth < 0.02


def test_reads_larger_than_the_cache_bypass_it(store):
    ref = sensor_block(10_000, 6)
    a = arrays.create(store, "x", (0, 6), "float32", chunks=(1000, 6))  # 24 KB chunks
    a.append(ref)
    b = arrays.open(store, "x", cache_bytes=50_000)  # two chunks
    for sel in [slice(None), slice(999, 8001), slice(None, None, -3), (slice(500, 9500), slice(1, 5))]:
        np.testing.assert_array_equal(b[sel], ref[sel], err_msg=f"selection {sel!r}")
    assert len(b.cache) == 0  # each read was larger than the cache: none of it was kept
    b[2000:2500]
    assert len(b.cache) == 1


def test_two_writers_take_turns(store_url):
    """Each writer's cached partial chunk is used only while nobody else rewrote it."""
    first = arrays.create(store_url, "x", (0, 2), "int32", chunks=(10, 2))
    second = arrays.open(store_url, "x")
    try:
        expected = []
        for i in range(12):
            writer = (first, second)[i % 3 == 2]
            rows = np.full((3, 2), i, np.int32)
            writer.append(rows)
            expected.append(rows)
        np.testing.assert_array_equal(first[:], np.concatenate(expected)[: len(first)])
        second.refresh()
        np.testing.assert_array_equal(second[:], np.concatenate(expected))
        assert first.chunks_loaded > 0  # the partial chunk the other writer changed was read again
    finally:
        first.close()
        second.close()
