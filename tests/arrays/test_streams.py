"""Streams (arrays.stream) on real SQLite files and a real MariaDB server: alignment, atomicity, snapshots, exports."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
import warnings

import numpy as np
import pytest
import zarr

from tests.arrays.stream_worker import COLUMNS as WORKER_COLUMNS
from windvane import arrays, neostore
from windvane.arrays import Column
from windvane.arrays.keys import Snapshot

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COLUMNS = [
    Column("speed", "float32", attrs={"unit": "m/s"}),
    Column("count", "int64"),
    Column("vib", "float64", inner=(3,), dims=("time", "axis")),
    Column("ok", "bool"),
    Column("msg", "str"),
    Column("raw", "bytes"),
]
WORDS = ["", "héllo", "日本語", "x" * 20_000, "tab\tline", "🚀"]


@pytest.fixture(autouse=True)
def _zarr_bytes_warning():
    # zarr warns when *it* opens a variable_length_bytes array (no v3 spec yet); expected here.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=zarr.errors.UnstableSpecificationWarning)
        yield


def rows(start: int, n: int) -> dict[str, object]:
    """Rows ``start..start+n``: each value a function of its row number alone."""
    i = np.arange(start, start + n)
    return {
        "time": 1_700_000_000_000_000_000 + i * 1_000_000,
        "speed": (i * 0.5).astype(np.float32),
        "count": i * 3,
        "vib": np.stack([i, -i, i * 0.25], axis=1).astype(np.float64),
        "ok": i % 3 == 0,
        "msg": [WORDS[k % len(WORDS)] + str(k) for k in i.tolist()],
        "raw": [b"\x00" + k.to_bytes(4, "little") + b"\x00" * (k % 3) for k in i.tolist()],
    }


def check_rows(stream: arrays.Stream, start: int, stop: int) -> None:
    want = rows(start, stop - start)
    for name, values in want.items():
        got = stream[name][start:stop]
        if name in ("msg", "raw"):
            assert got.tolist() == list(values), name
        else:
            np.testing.assert_array_equal(got, values, err_msg=name)


def test_round_trip(store_url):
    with arrays.create_stream(store_url, "turbine-1", COLUMNS, attrs={"site": "north"}, chunk_rows=64) as s:
        assert s.tag == "turbine-1" and s.path == "streams/turbine-1" and len(s) == 0
        assert s.columns == [c.name for c in COLUMNS] and s.attrs == {"site": "north"}
        assert s.append(rows(0, 100)) == 100
        assert s.append(rows(100, 1)) == 101
        assert s.append({k: v[:0] if hasattr(v, "shape") else [] for k, v in rows(0, 0).items()}) == 101
        check_rows(s, 0, 101)
        assert s["speed"].attrs == {"unit": "m/s"} and s["vib"].dims == ("time", "axis")
        assert s["time"].attrs == {"units": "nanoseconds since 1970-01-01T00:00:00Z"}
        assert s["time"].dtype == np.int64 and s["msg"].dtype == np.dtypes.StringDType()
    with arrays.open_stream(store_url, "turbine-1") as again:
        assert len(again) == 101 and all(len(again[n]) == 101 for n in ["time", *again.columns])
        check_rows(again, 0, 101)
    with neostore.open(store_url) as store:
        group = json.loads(Snapshot(store).get("streams/turbine-1/zarr.json"))
    assert group["node_type"] == "group"
    assert group["attributes"] == {"windvane_stream": 1, "columns": [c.name for c in COLUMNS], "site": "north"}


def test_datetime64_time_is_accepted(sqlite_url):
    with arrays.create_stream(sqlite_url, "t", [Column("v", "int8")]) as s:
        when = np.array(["2026-01-01T00:00:00.000000001", "2026-01-01T00:00:01"], dtype="datetime64[ns]")
        s.append({"time": when, "v": [1, 2]})
        np.testing.assert_array_equal(s["time"][:], when.view(np.int64))


def test_many_streams_in_one_transaction_are_atomic(store_url):
    tags = [f"s{k}" for k in range(5)]
    with arrays.transaction(store_url, message="create") as tx:
        for tag in tags:
            arrays.create_stream(tx, tag, COLUMNS, chunk_rows=50)
    with arrays.transaction(store_url, message="batch 1") as tx:
        for k, tag in enumerate(tags):
            stream = arrays.open_stream(tx, tag)
            stream.append(rows(0, 30 + k))
            stream.append(rows(30 + k, 40))  # twice in one transaction: the second reads no metadata
            assert len(stream) == 70 + k
    with pytest.raises(RuntimeError, match="boom"), arrays.transaction(store_url, message="batch 2") as tx:
        for tag in tags:
            arrays.open_stream(tx, tag).append(rows(0, 5))
        raise RuntimeError("boom")
    for k, tag in enumerate(tags):
        with arrays.open_stream(store_url, tag) as s:
            assert len(s) == 70 + k  # batch 2 left nothing behind
            check_rows(s, 0, 70 + k)
    commits = arrays.history(store_url, "streams/s0/time")
    assert [c.message for c in commits] == ["create", "batch 1"]  # oldest first


def test_snapshot_is_one_tid_for_every_array(store_url):
    with arrays.create_stream(store_url, "snap", COLUMNS, chunk_rows=16) as writer:
        writer.append(rows(0, 10))
        reader = arrays.open_stream(store_url, "snap")
        first = reader.tid
        writer.append(rows(10, 7))
        # The reader still sees its snapshot in every array, even columns it never read before.
        assert reader.tid == first and all(len(reader[n]) == 10 for n in ["time", *reader.columns])
        assert reader["msg"][:].tolist() == rows(0, 10)["msg"]
        assert reader.refresh() == writer.tid
        assert all(len(reader[n]) == 17 for n in ["time", *reader.columns])
        check_rows(reader, 0, 17)
        reader.close()


def start_worker(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.arrays.stream_worker", *args],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def read_line(proc: subprocess.Popen, timeout: float = 120.0) -> str:
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    line = proc.stdout.readline() if ready else ""
    if not line:
        proc.kill()
        raise AssertionError(f"worker gave no line within {timeout} s; stderr:\n{proc.stderr.read()}")
    return line.strip()


def check_aligned(stream: arrays.Stream) -> np.ndarray:
    """Every row is the same ``(worker, seq, i)`` in every column; returns the time column."""
    t = stream["time"][:]
    n = len(t)
    assert all(len(stream[c]) == n for c in stream.columns)
    np.testing.assert_array_equal(stream["value"][:], t.astype(np.float64))
    worker, seq, i = t // 10**12, t // 10**6 % 10**6, t % 10**6
    np.testing.assert_array_equal(stream["seq"][:], np.stack([worker * 10**6 + seq, i], axis=1))
    labels = [f"{w}:{s}:{k}" for w, s, k in zip(worker.tolist(), seq.tolist(), i.tolist())]
    assert stream["label"][:].tolist() == labels
    assert stream["raw"][:].tolist() == [x.encode() + b"\x00" for x in labels]
    return t


def race_two_appenders(url: str, mode: str, seconds: int, max_snapshots: int) -> tuple[np.ndarray, list[dict]]:
    """Two worker processes append to stream "shared" (``mode``: "append" or "writer") while this one
    checks snapshots; the final ``time`` column, after checking that every append stayed one run."""
    arrays.create_stream(url, "shared", WORKER_COLUMNS, chunk_rows=100).close()
    workers = [start_worker(mode, url, "shared", "--worker", str(k), "--seconds", str(seconds)) for k in (1, 2)]
    try:
        for proc in workers:
            assert read_line(proc) == "ready"
        for proc in workers:
            proc.stdin.write("go\n")
            proc.stdin.flush()
        snapshots = 0
        while any(proc.poll() is None for proc in workers) and snapshots < max_snapshots:
            with arrays.open_stream(url, "shared") as s:  # one snapshot while they append
                check_aligned(s)
            snapshots += 1
        results = [json.loads(read_line(proc, 60).removeprefix("result ")) for proc in workers]
        for proc in workers:
            assert proc.wait(timeout=60) == 0, proc.stderr.read()
    finally:
        for proc in workers:
            if proc.poll() is None:
                proc.kill()
    with arrays.open_stream(url, "shared") as s:
        t = check_aligned(s)
    print(f"2 stream appenders ({mode}): {results}; {snapshots} consistent snapshots read meanwhile")
    assert all(r["appends"] > 5 for r in results), results
    assert len(t) == sum(r["rows"] for r in results)
    # Each append is one contiguous run: cut where (worker, seq) changes.
    key = t // 10**6
    runs = 1 + int(np.count_nonzero(key[1:] != key[:-1]))
    assert runs == sum(r["appends"] for r in results)
    return t, results


def test_two_processes_append_and_columns_stay_aligned(store_url):
    """Two processes append to one stream while this one reads snapshots: rows never misalign."""
    race_two_appenders(store_url, "append", 6, 200)


def test_time_travel(store_url):
    with arrays.create_stream(store_url, "tt", COLUMNS, chunk_rows=8) as s:
        s.append(rows(0, 5))
        after_five = s.tid
        s.append(rows(5, 20))
    with arrays.open_stream(store_url, "tt", at=after_five) as old:
        assert old.read_only and len(old) == 5 and all(len(old[n]) == 5 for n in ["time", *old.columns])
        check_rows(old, 0, 5)
        with pytest.raises(arrays.ReadOnlyArrayError, match="at="):
            old.append(rows(5, 1))
    with pytest.raises(arrays.StreamNotFoundError, match="did not exist then"):
        arrays.open_stream(store_url, "tt", at=1.0)  # 1970: before it existed


def test_exports_match_numpy(sqlite_url):
    import pandas as pd

    with arrays.create_stream(sqlite_url, "ex", COLUMNS, attrs={"site": "north"}) as s:
        s.append(rows(0, 40))
        want = rows(0, 40)
        table = s.to_arrow(5, 25)
        assert table.column_names == ["time", *s.columns] and table.num_rows == 20
        assert str(table.schema.field("time").type) == "timestamp[ns, tz=UTC]"
        assert str(table.schema.field("msg").type) == "large_string"
        assert str(table.schema.field("vib").type).startswith("fixed_size_list<item: double>[3]")
        np.testing.assert_array_equal(table.column("time").cast("int64").to_numpy(), want["time"][5:25])
        np.testing.assert_array_equal(np.stack(table.column("vib").to_pylist()), want["vib"][5:25])
        assert table.column("msg").to_pylist() == want["msg"][5:25]
        assert table.column("raw").to_pylist() == want["raw"][5:25]
        np.testing.assert_array_equal(table.column("ok").to_numpy(), want["ok"][5:25])

        frame = s.to_pandas()
        assert frame.index.name == "time" and str(frame.index.tz) == "UTC" and len(frame) == 40
        np.testing.assert_array_equal(frame.index.as_unit("ns").asi8, want["time"])
        np.testing.assert_array_equal(frame["speed"].to_numpy(), want["speed"])
        np.testing.assert_array_equal(frame["vib[2]"].to_numpy(), want["vib"][:, 2])
        assert frame["msg"].tolist() == want["msg"] and frame["raw"].tolist() == want["raw"]
        assert frame.index[0] == pd.Timestamp(want["time"][0], unit="ns", tz="UTC")

        ds = s.to_xarray(10)
        assert ds.time.dtype == np.dtype("datetime64[ns]") and ds.sizes == {"time": 30, "axis": 3}
        np.testing.assert_array_equal(ds.time.values.view(np.int64), want["time"][10:])
        assert ds.vib.dims == ("time", "axis") and ds.speed.attrs == {"unit": "m/s"} and ds.attrs == {"site": "north"}
        np.testing.assert_array_equal(ds["count"].values, want["count"][10:])
        assert ds.msg.values.tolist() == want["msg"][10:]


def test_zarr_and_xarray_read_a_stream_group(store_url):
    import xarray as xr

    with arrays.create_stream(store_url, "zx", COLUMNS, chunk_rows=16) as s:
        s.append(rows(0, 50))
    want = rows(0, 50)
    group = zarr.open_group(arrays.ZarrStore(store_url, read_only=True), path="streams/zx", mode="r")
    assert sorted(group.array_keys()) == sorted(want)
    assert group.attrs["windvane_stream"] == 1
    assert group["msg"][...].tolist() == want["msg"] and group["raw"][...].tolist() == want["raw"]
    ds = xr.open_zarr(arrays.ZarrStore(store_url, read_only=True), group="streams/zx", consolidated=False)
    assert ds.time.dtype == np.dtype("datetime64[ns]")  # the units decode as CF time
    np.testing.assert_array_equal(ds.time.values.view(np.int64), want["time"])
    np.testing.assert_array_equal(ds.vib.values, want["vib"])
    assert ds.vib.dims == ("time", "axis") and ds.msg.values.tolist() == want["msg"]


def test_add_column_backfills(store_url):
    with arrays.create_stream(store_url, "grow", [Column("a", "float32")], chunk_rows=8) as s:
        s.append({"time": np.arange(10), "a": np.arange(10)})
        new = [
            s.add_column(Column(name, dtype))
            for name, dtype in [("f", "float64"), ("i", "int32"), ("s", "str"), ("b", "bytes"), ("v", "float32")]
        ]
        assert [len(a) for a in new] == [10] * 5 and s.columns == ["a", "f", "i", "s", "b", "v"]
        assert np.isnan(s["f"][:]).all() and (s["i"][:] == 0).all()
        assert s["s"][:].tolist() == [""] * 10 and s["b"][:].tolist() == [b""] * 10
        with pytest.raises(arrays.ColumnError, match=r"missing column\(s\) \['f', 'i', 's', 'b', 'v'\]"):
            s.append({"time": [10], "a": [1.0]})
        s.append(
            {
                "time": [10, 11],
                "a": [1, 2],
                "f": [0.5, 1.5],
                "i": [7, 8],
                "s": ["x", "y"],
                "b": [b"\x00", b""],
                "v": [1, 2],
            }
        )
        with pytest.raises(arrays.ColumnError, match="already"):
            s.add_column(Column("f", "float64"))
    with arrays.open_stream(store_url, "grow") as again:
        assert len(again) == 12 and again.columns == ["a", "f", "i", "s", "b", "v"]
        np.testing.assert_array_equal(again["f"][9:], [np.nan, 0.5, 1.5])
        assert again["s"][:].tolist() == [""] * 10 + ["x", "y"]
        assert again["b"][-2:].tolist() == [b"\x00", b""]


def test_a_writer_sees_columns_added_by_another(sqlite_url):
    one = arrays.create_stream(sqlite_url, "evolve", [Column("a", "int64")])
    two = arrays.open_stream(sqlite_url, "evolve")
    try:
        one.add_column(Column("b", "int64"))
        with pytest.raises(arrays.ColumnError, match=r"missing column\(s\) \['b'\]"):
            two.append({"time": [1], "a": [1]})  # read under the lock: it knows about b now
        assert two.append({"time": [1], "a": [1], "b": [2]}) == 1
    finally:
        one.close()
        two.close()


def test_errors_are_specific(sqlite_url):
    with arrays.create_stream(sqlite_url, "err", COLUMNS) as s:
        good = rows(0, 3)
        with pytest.raises(arrays.ColumnError, match=r"missing column\(s\) \['msg'\]"):
            s.append({k: v for k, v in good.items() if k != "msg"})
        with pytest.raises(arrays.ColumnError, match=r"unknown column\(s\) \['extra'\].*add_column"):
            s.append({**good, "extra": [1, 2, 3]})
        with pytest.raises(arrays.ColumnError, match=r"differ in length.*'count': 2"):
            s.append({**good, "count": [1, 2]})
        with pytest.raises(arrays.ColumnError, match=r"'vib'.*rows of shape \(3,\).*\(3, 2\)"):
            s.append({**good, "vib": np.zeros((3, 2))})
        with pytest.raises(arrays.ColumnError, match=r"'time'.*int64 ns"):
            s.append({**good, "time": [0.5, 1.5, 2.5]})
        with pytest.raises(arrays.ColumnError, match=r"'raw'.*encode"):
            s.append({**good, "raw": ["a", "b", "c"]})
        with pytest.raises(arrays.ColumnError, match="no column 'nope'"):
            s["nope"]
        assert len(s) == 0 and all(len(s[n]) == 0 for n in ["time", *s.columns])
    for tag in ["", "a/b", "..", "x..y", "tab\there", ".", "zarr.json", 5]:
        with pytest.raises(arrays.InvalidTagError):
            arrays.stream_path(tag)
        with pytest.raises(arrays.InvalidTagError):
            arrays.create_stream(sqlite_url, tag, COLUMNS)
    assert arrays.stream_path("ok tag-1.x") == "streams/ok tag-1.x"
    assert arrays.stream_path("q", quarantine=True) == "quarantine/q"
    with pytest.raises(arrays.StreamExistsError, match="open_stream"):
        arrays.create_stream(sqlite_url, "err", COLUMNS)
    with pytest.raises(arrays.StreamNotFoundError, match="'missing'"):
        arrays.open_stream(sqlite_url, "missing")
    with pytest.raises(arrays.ColumnError, match="more than once"):
        arrays.create_stream(sqlite_url, "dup", [Column("a", "int8"), Column("a", "int16")])
    with pytest.raises(arrays.ColumnError, match="reserved"):
        arrays.create_stream(sqlite_url, "res", COLUMNS, attrs={"columns": []})
    with pytest.raises(arrays.ColumnError, match="'time' is every stream's own column"):
        Column("time", "int64")
    with pytest.raises(arrays.ColumnError, match="dims"):
        Column("v", "float32", inner=(3,), dims=("channel", "time"))
    with pytest.raises(arrays.UnsupportedArrayError):
        Column("v", "object")
    arrays.create(sqlite_url, "streams/plain/time", (0,), "int64").close()
    with pytest.raises(arrays.StreamError, match="not a stream"):
        arrays.open_stream(sqlite_url, "plain")


def test_reading_a_store_that_does_not_exist_creates_none(tmp_path, store_url):
    """open_stream, list_streams, open and history look for a store; create_stream makes one.

    On MariaDB the test's database exists, empty: no neostore table is made in it.
    """
    missing = f"sqlite:///{tmp_path}/absent.db" if store_url.startswith("sqlite:") else store_url
    database = neostore.parse_url(missing).database
    reads = [
        lambda: arrays.open_stream(missing, "turbine1"),
        lambda: arrays.list_streams(missing),
        lambda: arrays.open(missing, "streams/turbine1/time"),
        lambda: arrays.history(missing, "streams/turbine1"),
        lambda: arrays.open_stream(missing, "turbine1", at=time.time()),
    ]
    for read in reads:
        with pytest.raises(neostore.StoreNotFoundError) as caught:
            read()
        if missing.startswith("sqlite:"):
            assert str(caught.value) == f"no store at {missing}: {tmp_path}/absent.db does not exist"
        else:
            assert str(caught.value) == (
                f"no store in database {database!r} on the MariaDB server at "
                f"{neostore.parse_url(missing).unix_socket}: it holds no neostore tables"
            )
    if missing.startswith("sqlite:"):
        assert os.listdir(tmp_path) == []
    else:
        from tests.mariadb import connect

        conn = connect(missing)
        cur = conn.cursor()
        cur.execute("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = ?", (database,))
        assert cur.fetchone()[0] == 0
        conn.close()
    with arrays.create_stream(missing, "turbine1", COLUMNS[:1]) as stream:  # the writing path creates it
        stream.append({"time": [1], "speed": [2.5]})
    with arrays.open_stream(missing, "turbine1") as stream:
        assert stream["speed"][:].tolist() == [2.5]


def test_list_streams(store_url):
    with pytest.raises(neostore.StoreNotFoundError):
        arrays.list_streams(store_url)  # no store yet, and looking makes none
    neostore.open(store_url).close()
    assert arrays.list_streams(store_url) == []
    arrays.create_stream(store_url, "b", COLUMNS).close()
    first = arrays.history(store_url, "streams/b/time")[0].tid
    with arrays.transaction(store_url) as tx:
        arrays.create_stream(tx, "a", COLUMNS)
        arrays.create_stream(tx, "bad", COLUMNS, quarantine=True)
        assert arrays.list_streams(tx) == ["a", "b"]
    assert arrays.list_streams(store_url) == ["a", "b"]
    assert arrays.list_streams(store_url, quarantine=True) == ["bad"]
    assert arrays.list_streams(store_url, at=first) == ["b"]
    with arrays.open_stream(store_url, "bad", quarantine=True) as q:
        assert q.path == "quarantine/bad"
    with pytest.raises(arrays.StreamNotFoundError):
        arrays.open_stream(store_url, "bad")


def test_append_to_20_streams_in_one_transaction(store_url):
    """The ingest pattern: 1,000 rows x 6 columns (2 float, 1 int, 3 str) into 20 streams per transaction."""
    columns = [
        Column("a", "float64"),
        Column("b", "float64"),
        Column("c", "int64"),
        Column("host", "str"),
        Column("request", "str"),
        Column("line", "str"),
    ]
    n = 1000
    with arrays.transaction(store_url) as tx:
        for k in range(20):
            arrays.create_stream(tx, f"s{k}", columns)

    def block(seq: int) -> dict[str, object]:
        t = np.arange(seq * n, (seq + 1) * n, dtype=np.int64)
        return {
            "time": t,
            "a": t * 0.5,
            "b": t * 0.25,
            "c": t,
            "host": [f"host-{i % 17}" for i in range(n)],
            "request": [f"GET /api/v1/items/{i} HTTP/1.1" for i in range(n)],
            "line": [f'level=info msg="request {i} done" dur={i % 97}ms' for i in range(n)],
        }

    seconds = []
    for seq in range(5):
        data = block(seq)
        started = time.perf_counter()
        with arrays.transaction(store_url) as tx:
            for k in range(20):
                arrays.open_stream(tx, f"s{k}").append(data)
        seconds.append(time.perf_counter() - started)
    print(f"20 streams x 1000 rows x 6 columns per transaction: {[round(s * 1000) for s in seconds]} ms")
    with arrays.open_stream(store_url, "s19") as s:
        assert len(s) == 5 * n
        assert s["line"][-1] == block(4)["line"][-1] and s["c"][-1] == 5 * n - 1


def test_thousands_of_streams_created_in_one_transaction(sqlite_url):
    """A plant's first commit creates every sensor's stream: each path is checked against what the
    transaction wrote (not a scan of it), and the registry is written once, at the commit."""
    tags = [f"plant.s{k:04d}" for k in range(2000)]
    store = neostore.open(sqlite_url)
    try:
        arrays.create_stream(store, "plant.s0000", [Column("v", "float64")]).close()
        with pytest.raises(arrays.StreamExistsError):
            with arrays.transaction(store) as tx:
                arrays.create_stream(tx, "plant.s0000", [Column("v", "float64")])
        tx = arrays.Transaction(store)
        for tag in tags[1:]:
            arrays.create_stream(tx, tag, [Column("v", "float64")])
        with pytest.raises(arrays.StreamExistsError):
            arrays.create_stream(tx, tags[7], [Column("v", "float64")])
        assert arrays.list_streams(tx) == tags  # the registry as it will be, before it is written
        assert [e.key for e in tx.list("streams/plant.s0042/")] == [
            "streams/plant.s0042/time/zarr.json",
            "streams/plant.s0042/v/zarr.json",
            "streams/plant.s0042/zarr.json",
        ]
        tx.delete("streams/plant.s0042/v/zarr.json")
        assert [e.key for e in tx.list("streams/plant.s0042/")] == [
            "streams/plant.s0042/time/zarr.json",
            "streams/plant.s0042/zarr.json",
        ]
        assert arrays.list_streams(store) == ["plant.s0000"]  # nothing visible before the commit
        tx.commit()
        assert arrays.list_streams(store) == tags
        registry = [h for h in arrays.history(store, "streams") if h.tid == tx.tid]
        assert len(registry) == 1
    finally:
        store.close()


def test_create_streams_makes_many_at_once_and_refuses_occupied_paths(store_url):
    """``create_streams`` creates thousands of streams in a few reads of the store, each as
    ``create_stream`` would; anything at a path (a stream, or a stray array with no group) refuses the
    whole call, and ``exist_ok`` leaves existing streams as they are."""
    tags = [f"plant.m{k:04d}" for k in range(1200)]
    columns = [Column("v", "float64"), Column("w", "int32", inner=(2,))]
    store = neostore.open(store_url)
    try:
        with arrays.transaction(store) as tx:
            arrays.create_stream(tx, tags[5], columns).append({"time": [5], "v": [0.5], "w": [[1, 2]]})
            arrays.create(tx, "streams/plant.m0900/stray", (1,), "int8")
        for clash, other in [(tags[5], tags[900]), (tags[900], tags[5])]:
            with pytest.raises(arrays.StreamExistsError, match=repr(clash)):
                with arrays.transaction(store) as tx:
                    arrays.create_streams(tx, [t for t in tags if t not in (clash, other)] + [clash], columns)
        with pytest.raises(arrays.StreamExistsError, match=r"'plant.m0005' .*\(and 1 more: \['plant.m0900'\]\)"):
            with arrays.transaction(store) as tx:
                arrays.create_streams(tx, tags, columns)
        assert arrays.list_streams(store) == [tags[5]]  # nothing of the refused calls was kept
        with pytest.raises(arrays.StreamExistsError, match=repr(tags[900])):
            with arrays.transaction(store) as tx:
                arrays.create_streams(tx, tags, columns, exist_ok=True)  # a stray array is not a stream
        fresh = [t for t in tags if t != tags[900]]
        with arrays.transaction(store) as tx:
            arrays.create_streams(tx, fresh, columns, attrs={"site": "north"}, chunk_rows=64, exist_ok=True)
            arrays.open_stream(tx, tags[6]).append({"time": [6], "v": [6.5], "w": [[6, 7]]})
        assert arrays.list_streams(store) == fresh
        with arrays.open_stream(store, tags[5]) as s:  # left as it was
            assert (s["time"][:].tolist(), s["v"][:].tolist(), s["w"][:].tolist()) == ([5], [0.5], [[1, 2]])
            assert "site" not in s.attrs
        with arrays.open_stream(store, tags[6]) as s:
            assert (s["time"][:].tolist(), s["v"][:].tolist(), s["w"][:].tolist()) == ([6], [6.5], [[6, 7]])
            assert s.attrs["site"] == "north" and s["v"].chunks == (64,) and s["w"].chunks == (64, 2)
        with arrays.open_stream(store, tags[-1]) as s:
            assert len(s) == 0 and s.columns == ["v", "w"]
    finally:
        store.close()
