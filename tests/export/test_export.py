"""`windvane export`'s engine: every format read back by its own readers equals the stream, value and dtype.

Each format is read with what its users read it with: pyarrow (Parquet,
Arrow IPC, CSV), xarray (zarr, netCDF) and zarr itself (zarr). The streams
hold what the formats find hard: int64 ns times out of order (one before
1970), NaN, infinities, -0.0 and subnormals, uint64 above 2^63, bools, text
with commas, quotes, newlines, non-ASCII and empty values, bytes with NULs
and invalid UTF-8, and a vibration stream's 2-D ``samples`` (time, channel).
Blocks are one chunk each here (``block_bytes=1``), so that every export
crosses many block and chunk boundaries.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
import xarray as xr
import zarr
from numcodecs import Blosc

from tests.serve_process import REPO
from windvane import arrays, neostore
from windvane import export as exporting
from windvane.export import export
from windvane.export.formats.csv_text import bytes_from_text
from windvane.ingest.streams import QUARANTINE_COLUMNS, TEXT_CODEC

# zarr warns that its variable_length_bytes (the bytes columns) has no v3 spec yet, on every read.
pytestmark = pytest.mark.filterwarnings("ignore::zarr.errors.UnstableSpecificationWarning")

T0 = 1_700_000_000_123_456_789
ROWS = 300
CHUNK_ROWS = 64
FORMATS = ["parquet", "arrow", "csv", "zarr", "netcdf"]
EXTENSIONS = {"parquet": ".parquet", "arrow": ".arrow", "csv": ".csv", "zarr": ".zarr", "netcdf": ".nc"}

TEXTS = [
    "",
    "plain",
    "a,b",
    'say "hi"',
    "line1\nline2",
    "crlf\r\nend",
    "ünïcödé ✓ 日本語",
    "  spaced  ",
    "NaN",
    "null",
    '","',
    "\ttab",
]
BLOBS = [b"", b"\x00", b"\xff\xfe\x00raw", b"a,b\n", b'"q"', "é".encode(), b"\x00\x00\x00"]
SPECIAL = [np.nan, np.inf, -np.inf, -0.0, 5e-324, np.finfo(np.float64).max, 0.1]

MIXED_COLUMNS = [
    arrays.Column("speed", "float64", attrs={"unit": "m/s"}),
    arrays.Column("temp", "float32"),
    arrays.Column("level", "int8"),
    arrays.Column("count", "int64"),
    arrays.Column("big", "uint64"),
    arrays.Column("ok", "bool"),
    arrays.Column("msg", "str"),
    arrays.Column("raw", "bytes"),
]


def mixed_rows(start: int, n: int) -> dict:
    """Rows ``start .. start+n`` of the mixed stream: the same values whenever asked for."""
    i = np.arange(start, start + n)
    time = T0 + (i * 37 % 101) * 10**9 + i  # out of order, unique
    time[i == 0] = -1_234_567_891  # before 1970
    speed = np.sin(i / 7.0) * 30
    for k, value in enumerate(SPECIAL):
        speed[i % 50 == k] = value
    return {
        "time": time,
        "speed": speed,
        "temp": (np.cos(i / 5.0) * 40).astype(np.float32),
        "level": (i % 256 - 128).astype(np.int8),
        "count": np.where(i % 3 == 0, np.iinfo(np.int64).min + i, np.iinfo(np.int64).max - i),
        "big": (np.uint64(2**63) + i.astype(np.uint64) * np.uint64(1_000_003)),
        "ok": i % 3 == 1,
        "msg": [TEXTS[k % len(TEXTS)] if k % 5 else f"row {k}, ü" for k in i.tolist()],
        "raw": [BLOBS[k % len(BLOBS)] + (k.to_bytes(2, "little") if k % 4 == 0 else b"") for k in i.tolist()],
    }


def make_mixed(url: str, tag: str = "plant.mixed", rows: int = ROWS) -> None:
    stream = arrays.create_stream(
        url, tag, MIXED_COLUMNS, attrs={"site": "north", "kind": "sensor"}, chunk_rows=CHUNK_ROWS
    )
    stream.append(mixed_rows(0, rows))
    stream.close()


def make_vibration(url: str, tag: str = "plant.vibration", rows: int = ROWS) -> None:
    column = arrays.Column(
        "samples", "float32", inner=(3,), dims=("time", "channel"), attrs={"sample_rate": 25600.0, "unit": "m/s^2"}
    )
    stream = arrays.create_stream(url, tag, [column], attrs={"kind": "vibration"}, chunk_rows=CHUNK_ROWS)
    i = np.arange(rows)
    samples = np.stack([np.sin(i / 3.0), np.cos(i / 5.0), i / 7.0], axis=1).astype(np.float32)
    samples[5] = [np.nan, -0.0, np.inf]
    stream.append({"time": T0 + i * 39_062, "samples": samples})
    stream.close()


def stored(url: str, tag: str, *, quarantine: bool = False) -> dict[str, np.ndarray]:
    """What the stream holds: every column, ``time`` included, as numpy."""
    with arrays.open_stream(url, tag, quarantine=quarantine) as stream:
        return {name: stream[name][:] for name in ["time", *stream.columns]}


def dims_of(url: str, tag: str) -> dict[str, tuple[str, ...]]:
    with arrays.open_stream(url, tag) as stream:
        return {name: stream[name].dims for name in stream.columns}


# -- reading each format back, with its own readers ----------------------------------------------------


def _from_arrow(table: pa.Table, expected: dict[str, np.ndarray]) -> dict:
    assert table.schema.field("time").type == pa.timestamp("ns", tz="UTC")
    got = {"time": table.column("time").cast(pa.int64()).to_numpy()}
    for name, want in expected.items():
        if name == "time":
            continue
        column = table.column(name).combine_chunks()
        if want.dtype.kind == "T":
            assert column.type == pa.large_string()
            got[name] = column.to_pylist()
        elif want.dtype == object:
            assert column.type == pa.large_binary()
            got[name] = column.to_pylist()
        else:
            for size in want.shape[1:]:
                assert column.type == pa.list_(column.type.value_type, size)  # fixed_size_list
                column = column.flatten()
            got[name] = column.to_numpy(zero_copy_only=False).reshape(want.shape)
    return got


def _from_csv(path: str, expected: dict[str, np.ndarray]) -> dict:
    types = {}
    for name, want in expected.items():
        if name == "time":
            if not len(want):  # nothing to infer a type from
                types[name] = pa.timestamp("ns", tz="UTC")
            continue  # inferred: it must come back as timestamp[ns, tz=UTC] without being told
        kind = pa.string() if want.dtype.kind in "TO" else pa.from_numpy_dtype(want.dtype)
        for pos in np.ndindex(*want.shape[1:]):
            types[f"{name}[{','.join(map(str, pos))}]" if pos else name] = kind
    table = pacsv.read_csv(
        path,
        parse_options=pacsv.ParseOptions(newlines_in_values=True),
        convert_options=pacsv.ConvertOptions(column_types=types, null_values=[]),
    )
    assert table.schema.field("time").type == pa.timestamp("ns", tz="UTC")
    got = {"time": table.column("time").cast(pa.int64()).to_numpy()}
    for name, want in expected.items():
        if name == "time":
            continue
        if want.ndim > 1:
            parts = [
                table.column(f"{name}[{','.join(map(str, pos))}]").to_numpy() for pos in np.ndindex(*want.shape[1:])
            ]
            got[name] = np.stack(parts, axis=1).reshape(want.shape)
        elif want.dtype == object:
            got[name] = [bytes_from_text(v) for v in table.column(name).to_pylist()]
        elif want.dtype.kind == "T":
            got[name] = table.column(name).to_pylist()
        else:
            got[name] = table.column(name).to_numpy()
    return got


def _from_xarray(ds: xr.Dataset, expected: dict[str, np.ndarray], dims: dict) -> dict:
    assert ds["time"].dtype == np.dtype("datetime64[ns]")
    got = {"time": ds["time"].values.view(np.int64)}
    for name, want in expected.items():
        if name == "time":
            continue
        variable = ds[name]
        assert variable.dims == dims[name]
        values = variable.values
        if want.dtype == object:  # netCDF: one uint8 array per value; zarr: bytes
            got[name] = [bytes(v) for v in values.tolist()] if values.dtype == object else values.tolist()
        elif want.dtype.kind == "T":
            assert values.dtype.kind in "TUO"
            got[name] = values.tolist()
        else:
            got[name] = values
    return got


def _from_zarr(path: str, expected: dict[str, np.ndarray]) -> dict:
    group = zarr.open_group(path, mode="r")
    assert group["time"].attrs["units"] == "nanoseconds since 1970-01-01T00:00:00Z"
    got = {}
    for name, want in expected.items():
        values = group[name][:]
        got[name] = values.tolist() if want.dtype.kind in "TO" else values
    return got


def read_back(fmt: str, path: str, expected: dict[str, np.ndarray], dims: dict) -> list[dict]:
    """Every reading of the exported file, each a dict like ``expected`` (text and bytes as lists)."""
    if fmt == "parquet":
        return [_from_arrow(pq.read_table(path), expected)]
    if fmt == "arrow":
        with pa.ipc.open_file(path) as reader:
            return [_from_arrow(reader.read_all(), expected)]
    if fmt == "csv":
        return [_from_csv(path, expected)]
    if fmt == "zarr":
        with xr.open_zarr(path) as ds:
            via_xarray = _from_xarray(ds.load(), expected, dims)
        return [via_xarray, _from_zarr(path, expected)]
    with xr.open_dataset(path) as ds:
        return [_from_xarray(ds.load(), expected, dims)]


def assert_same(got: dict, expected: dict[str, np.ndarray]) -> None:
    """Every value and dtype of ``expected`` is in ``got``: floats bit for bit up to NaN, -0.0 kept."""
    assert set(got) == set(expected)
    for name, want in expected.items():
        have = got[name]
        if want.dtype.kind in "TO":
            assert have == want.tolist(), name
            continue
        assert have.dtype == want.dtype, f"{name}: {have.dtype} != {want.dtype}"
        assert have.shape == want.shape, name
        if want.dtype.kind == "f":
            assert np.array_equal(have, want, equal_nan=True), name
            assert np.array_equal(np.signbit(have), np.signbit(want)), f"{name}: the sign of zeros or NaNs"
        else:
            assert np.array_equal(have, want), name


def selected(columns: dict[str, np.ndarray], keep: np.ndarray) -> dict[str, np.ndarray]:
    return {name: values[keep] for name, values in columns.items()}


def target(tmp_path, fmt: str, name: str = "out") -> str:
    return str(tmp_path / f"{name}{EXTENSIONS[fmt]}")


# -- tests -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("kind", ["mixed", "vibration"])
def test_every_format_reads_back_as_the_stream(sqlite_url, tmp_path, fmt, kind):
    tag = f"plant.{kind}"
    (make_mixed if kind == "mixed" else make_vibration)(sqlite_url, tag)
    path = target(tmp_path, fmt)
    calls = []
    result = export(sqlite_url, tag, path, fmt, block_bytes=1, progress=lambda done, total: calls.append((done, total)))
    expected = stored(sqlite_url, tag)
    for got in read_back(fmt, path, expected, dims_of(sqlite_url, tag)):
        assert_same(got, expected)
    assert (result.rows, result.scanned, result.files) == (ROWS, ROWS, [path])
    assert result.file_bytes > 0 and result.nbytes > 8 * ROWS
    assert calls[0] == (0, ROWS) and calls[-1] == (ROWS, ROWS) and len(calls) == 1 + -(-ROWS // CHUNK_ROWS)
    assert sorted(os.listdir(tmp_path)) == [
        "out" + EXTENSIONS[fmt],
        "store.db",
        "store.db.lock",
        "store.db.queue",
    ]  # no temporaries


def test_raw_bytes_count_text_and_bytes_by_their_length(sqlite_url, tmp_path):
    make_mixed(sqlite_url)
    result = export(sqlite_url, "plant.mixed", tmp_path / "x.arrow", "arrow")
    columns = stored(sqlite_url, "plant.mixed")
    text = sum(len(s.encode()) for s in columns["msg"].tolist()) + sum(len(b) for b in columns["raw"].tolist())
    numbers = sum(v.nbytes for name, v in columns.items() if name not in ("msg", "raw"))
    assert result.nbytes == numbers + text


@pytest.mark.parametrize("fmt", FORMATS)
def test_start_stop_select_rows_by_time_in_any_order(sqlite_url, tmp_path, fmt):
    make_mixed(sqlite_url)
    expected = stored(sqlite_url, "plant.mixed")
    start, stop = T0 + 20 * 10**9, T0 + 61 * 10**9  # times are out of order: rows from every block
    keep = (expected["time"] >= start) & (expected["time"] < stop)
    assert 0 < keep.sum() < ROWS and not np.all(np.diff(np.flatnonzero(keep)) == 1)
    path = target(tmp_path, fmt)
    # --start as ISO 8601 with an offset, --stop as epoch seconds
    iso = str(np.datetime64(start - 2 * 3600 * 10**9, "ns")) + "-02:00"
    result = export(
        sqlite_url, "plant.mixed", path, fmt, start=iso, stop=f"{stop // 10**9}.{stop % 10**9:09d}", block_bytes=1
    )
    assert (result.rows, result.scanned) == (keep.sum(), ROWS)
    want = selected(expected, keep)
    for got in read_back(fmt, path, want, dims_of(sqlite_url, "plant.mixed")):
        assert_same(got, want)


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_range_with_no_rows_writes_an_empty_file_of_the_same_columns(sqlite_url, tmp_path, fmt):
    make_mixed(sqlite_url)
    path = target(tmp_path, fmt)
    result = export(sqlite_url, "plant.mixed", path, fmt, start="2100-01-01")
    assert result.rows == 0 and result.files == [path]
    want = {name: values[:0] for name, values in stored(sqlite_url, "plant.mixed").items()}
    for got in read_back(fmt, path, want, dims_of(sqlite_url, "plant.mixed")):
        assert_same(got, want)


def sensor_stream(url: str, tag: str, rows: int) -> int:
    """A stream of sensor-like numbers (times 1 ms apart, a slow sine rounded to 0.01, a counter): its raw bytes."""
    columns = [
        arrays.Column("speed", "float32"),
        arrays.Column("samples", "float64", inner=(2,), dims=("time", "axis")),
        arrays.Column("count", "int32"),
    ]
    with arrays.create_stream(url, tag, columns) as stream:
        i = np.arange(rows)
        speed = np.round(10 + 5 * np.sin(i / 5000.0), 2).astype(np.float32)
        stream.append(
            {
                "time": T0 + i * 10**6,
                "speed": speed,
                "samples": np.stack([speed * 2, -speed], axis=1),
                "count": (i // 1000).astype(np.int32),
            }
        )
    return rows * (8 + 4 + 16 + 4)


@pytest.mark.parametrize("rows", [500, 400_000])
def test_netcdf_is_compressed_and_chunked_by_size(sqlite_url, tmp_path, rows):
    import h5py

    raw = sensor_stream(sqlite_url, "plant.sensor", rows)
    path = target(tmp_path, "netcdf")
    result = export(sqlite_url, "plant.sensor", path, "netcdf")
    assert result.nbytes == raw
    size = os.path.getsize(path)
    assert result.file_bytes == size
    if rows == 500:  # 16 KB of data: HDF5's own metadata and one small chunk per variable
        assert size < raw + 24_000, f"{raw:,} bytes of data took {size:,} bytes"
    else:  # 12.8 MB of data that compresses well
        assert size < raw / 4, f"{raw:,} bytes of data took {size:,} bytes"
    with h5py.File(path, "r") as f:
        for name in ("time", "speed", "samples", "count"):
            variable = f[name]
            assert (variable.compression, variable.compression_opts, variable.shuffle) == ("gzip", 4, True), name
            assert variable.chunks[0] <= rows, f"{name}: chunks of {variable.chunks[0]} rows for {rows} rows"
            chunk_bytes = math.prod(variable.chunks) * variable.dtype.itemsize
            assert chunk_bytes <= 4 << 20, name
            if rows > 100_000:
                assert chunk_bytes >= 1 << 20, f"{name}: chunks of {chunk_bytes:,} bytes"
    expected = stored(sqlite_url, "plant.sensor")
    with xr.open_dataset(path, engine="h5netcdf") as ds:  # netCDF-4 as xarray reads it
        assert ds.attrs["stream"] == "plant.sensor"
        assert_same(_from_xarray(ds.load(), expected, dims_of(sqlite_url, "plant.sensor")), expected)


def test_times_parse_iso_naive_as_utc_and_epoch_seconds_exactly():
    from windvane.export.times import parse_time, time_range

    assert (
        parse_time("2024-05-01") == parse_time("2024-05-01T00:00:00Z") == parse_time(1714521600) == 1714521600 * 10**9
    )
    assert parse_time("2024-05-01T02:00:00.000000001+02:00") == 1714521600 * 10**9 + 1
    assert parse_time("1714521600.000000001") == 1714521600 * 10**9 + 1
    assert parse_time("-1.5") == -1_500_000_000
    for bad in ("noon", "2024-13-01", "", "nan", "1e30"):
        with pytest.raises(exporting.BadTime):
            parse_time(bad)
    with pytest.raises(exporting.BadTime, match="must be before --stop"):
        time_range("2024-05-02", "2024-05-01")


def test_the_export_reads_one_snapshot_while_rows_are_appended(sqlite_url, tmp_path):
    make_mixed(sqlite_url)
    appended = []

    def append_during_the_export(done: int, total: int) -> None:
        if done == CHUNK_ROWS:  # after the first block: another writer commits more rows
            with arrays.open_stream(sqlite_url, "plant.mixed") as other:
                appended.append(other.append(mixed_rows(ROWS, 500)))

    path = tmp_path / "snap.parquet"
    result = export(sqlite_url, "plant.mixed", path, "parquet", block_bytes=1, progress=append_during_the_export)
    assert appended == [ROWS + 500]  # the commit happened mid-export
    assert result.rows == ROWS
    expected = stored(sqlite_url, "plant.mixed")
    want = {name: values[:ROWS] for name, values in expected.items()}
    assert_same(read_back("parquet", str(path), want, {})[0], want)


def test_an_existing_target_is_refused_unless_overwrite(sqlite_url, tmp_path):
    make_mixed(sqlite_url)
    for fmt in ("parquet", "zarr"):
        path = target(tmp_path, fmt)
        export(sqlite_url, "plant.mixed", path, fmt, stop=T0 // 10**9)  # one row: the one before 1970
        with pytest.raises(exporting.TargetExists, match="exists; pass --overwrite"):
            export(sqlite_url, "plant.mixed", path, fmt)
        result = export(sqlite_url, "plant.mixed", path, fmt, overwrite=True)
        assert result.rows == ROWS
        want = stored(sqlite_url, "plant.mixed")
        assert_same(read_back(fmt, path, want, dims_of(sqlite_url, "plant.mixed"))[-1], want)
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".")]  # no temporaries, no old copy left


def test_a_quarantine_stream_exports_with_its_raw_bytes(sqlite_url, tmp_path):
    quarantine = arrays.create_stream(sqlite_url, "plant.mixed", list(QUARANTINE_COLUMNS), quarantine=True)
    quarantine.append(
        {
            "time": [T0, T0 + 1],
            "reason": ["not JSON", "field 'x': 'abc' is no float64"],
            "raw": [b"\x00\xffgarbage", b'{"x": "abc"}'],
            "source": ["http", "forward"],
        }
    )
    quarantine.close()
    with pytest.raises(exporting.UnknownStream, match="add --quarantine to export it"):
        export(sqlite_url, "plant.mixed", tmp_path / "q.arrow", "arrow")
    export(sqlite_url, "plant.mixed", tmp_path / "q.arrow", "arrow", quarantine=True)
    want = stored(sqlite_url, "plant.mixed", quarantine=True)
    assert_same(read_back("arrow", str(tmp_path / "q.arrow"), want, {})[0], want)


def test_a_quarantine_csv_shows_raw_lines_as_text(sqlite_url, tmp_path):
    raws = [
        b"1/1/2022 0:05,1",  # a rejected CSV row, as `windvane import` quarantines it
        'caf\xe9 "au lait"\nsecond line'.encode(),
        b"\x00\xffgarbage",  # not UTF-8
        b"base64:looks encoded",  # text that begins as an encoded cell does
    ]
    quarantine = arrays.create_stream(sqlite_url, "plant.mixed", list(QUARANTINE_COLUMNS), quarantine=True)
    quarantine.append({"time": [T0 + i for i in range(4)], "reason": ["r"] * 4, "raw": raws, "source": ["import"] * 4})
    quarantine.close()
    out = tmp_path / "rejects.csv"
    export(sqlite_url, "plant.mixed", str(out), "csv", quarantine=True)
    lines = out.read_text(encoding="utf-8").splitlines()
    assert lines[1].endswith(',"r","1/1/2022 0:05,1","import"'), lines
    assert lines[2].endswith(',"r","caf\xe9 ""au lait""') and lines[3] == 'second line","import"'
    assert lines[4].endswith(',"r","base64:AP9nYXJiYWdl","import"')
    assert lines[5].endswith(',"r","base64:YmFzZTY0Omxvb2tzIGVuY29kZWQ=","import"')
    table = pacsv.read_csv(out, parse_options=pacsv.ParseOptions(newlines_in_values=True))
    assert [bytes_from_text(v) for v in table.column("raw").to_pylist()] == raws


MEMORY_SCRIPT = textwrap.dedent("""
    import resource, sys
    from windvane import arrays
    from windvane.export import export
    url, fmt, out, mode = sys.argv[1:5]
    export(url, "small", out + ".warm-up", fmt)  # imports the writer, starts the reading threads
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if mode == "whole":  # the control: what the probe sees when the whole stream is in memory at once
        # from the resident size now, not the peak so far: a transient peak of the start-up would hide it
        resident = int(open("/proc/self/statm").read().split()[1]) * resource.getpagesize()
        with arrays.open_stream(url, "big") as stream:
            whole = stream.to_arrow()
        print(whole.nbytes, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - resident)
    else:
        result = export(url, "big", out, fmt)
        print(result.nbytes, (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024)
""")
MEMORY_ROWS = 4_000_000  # 190 MB raw
MAKE_SCRIPT = textwrap.dedent("""
    import sys
    from windvane import arrays
    from tests.export.test_export import MEMORY_ROWS, sensor_block
    columns = [arrays.Column(f"v{c}", "float64") for c in range(4)]
    columns += [arrays.Column("state", "int32"), arrays.Column("label", "str")]
    for tag, rows in (("small", 1000), ("big", MEMORY_ROWS)):
        with arrays.create_stream(sys.argv[1], tag, columns) as stream:
            for start in range(0, rows, 1 << 20):
                stream.append(sensor_block(start, min(1 << 20, rows - start)))
""")


def sensor_block(start: int, n: int) -> dict:
    """Rows of a sensor stream that compresses well, so the SQLite file the reader maps stays small."""
    i = np.arange(start, start + n)
    block = {"time": T0 + i * 10**6}
    for c in range(4):
        block[f"v{c}"] = np.round(np.sin(i / 20_000.0 * (c + 1)), 2)
    block["state"] = (i // 100_000 % 7).astype(np.int32)
    block["label"] = np.array(["ok", "warn", "alarm"], dtype=np.dtypes.StringDType())[i // 100_000 % 3]
    return block


@pytest.fixture(scope="module")
def big_stream(tmp_path_factory) -> str:
    """A stream of 190 MB raw (2.6 MB stored), written by a process that has ended: its SQLite log is checkpointed."""
    url = f"sqlite:///{tmp_path_factory.mktemp('export-memory')}/big.db"
    subprocess.run([sys.executable, "-c", MAKE_SCRIPT, url], cwd=REPO, check=True, timeout=240)
    return url


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["parquet", "netcdf"])
def test_memory_stays_bounded_far_below_the_stream_size(big_stream, tmp_path, fmt):
    raw, growth = _peak_growth(big_stream, fmt, target(tmp_path, fmt), "export")
    assert raw > 180e6
    # Blocks of ~4 MiB, one read ahead, and the writer's buffers: a fraction of the stream.
    assert growth < raw / 3, f"peak RSS grew by {growth / 1e6:.0f} MB exporting {raw / 1e6:.0f} MB"


@pytest.mark.slow
def test_the_memory_probe_sees_a_whole_stream_held(big_stream, tmp_path):
    # The probe is not blind: in a process of its own (no pages an export freed to reuse), holding the stream
    # whole shows.
    held, whole = _peak_growth(big_stream, "parquet", target(tmp_path, "parquet"), "whole")
    assert held > 180e6
    assert whole > held / 2, f"reading the whole stream grew peak RSS by {whole / 1e6:.0f} MB only"


def _peak_growth(url: str, fmt: str, out: str, mode: str) -> tuple[int, int]:
    """Bytes exported (or held, ``mode`` whole) and how much the peak RSS grew meanwhile, in a fresh process."""
    proc = subprocess.run(
        [sys.executable, "-c", MEMORY_SCRIPT, url, fmt, out, mode],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr
    nbytes, growth = map(int, proc.stdout.split())
    return nbytes, growth


@pytest.mark.parametrize("fmt", ["zarr", "netcdf", "xarray"])
def test_missing_integers_are_missing_in_xarray(sqlite_url, tmp_path, fmt):
    # An integer column's missing value (its "missing" attribute, as ingest sets it) read as a real number:
    # the mean of [10, <missing>, 20] came out near -3e18 instead of 15.
    least = int(np.iinfo(np.int64).min)
    columns = [arrays.Column("count", "int64", attrs={"missing": least}), arrays.Column("plain", "int32")]
    with arrays.create_stream(sqlite_url, "counts", columns, chunk_rows=2) as stream:
        stream.append({"time": [T0, T0 + 1, T0 + 2], "count": [10, least, 20], "plain": [1, 2, 3]})
        if fmt == "xarray":
            data = stream.to_xarray()
    if fmt != "xarray":
        path = tmp_path / f"counts{EXTENSIONS[fmt]}"
        export(sqlite_url, "counts", path, fmt)
        data = xr.open_zarr(path) if fmt == "zarr" else xr.open_dataset(path)
    count = data["count"].values
    assert np.isnan(count[1]) and count[[0, 2]].tolist() == [10, 20]
    assert float(data["count"].mean()) == 15.0
    assert data["plain"].dtype == np.int32 and data["plain"].values.tolist() == [1, 2, 3]
    # Written back, the integers are integers again, with the missing value where it was.
    again = tmp_path / "again.nc"
    data.to_netcdf(again)
    with xr.open_dataset(again, mask_and_scale=False) as raw:
        assert raw["count"].dtype == np.int64 and raw["count"].values.tolist() == [10, least, 20]
    if fmt == "zarr":
        group = zarr.open_group(tmp_path / "counts.zarr", mode="r")
        assert group["count"].fill_value == least and group["count"][:].tolist() == [10, least, 20]
    data.close()


def test_zarr_copies_the_stored_chunks_of_arrays_whose_chunk_format_it_keeps(sqlite_url, tmp_path):
    # "coarse" is chunked twice as long as the stream: its chunks are not the export's, so they are encoded again.
    columns = [
        arrays.Column("speed", "float64"),
        arrays.Column("msg", "str"),
        arrays.Column("coarse", "int32", chunk_rows=2 * CHUNK_ROWS, codec="gzip"),
    ]
    rows = mixed_rows(0, ROWS)
    with arrays.create_stream(sqlite_url, "copied", columns, chunk_rows=CHUNK_ROWS) as stream:
        for at in (0, 100, 250):  # the last chunk partly filled, as appends leave it
            part = {name: rows[name][at : at + 150 if at < 250 else ROWS] for name in ("time", "speed", "msg")}
            stream.append({**part, "coarse": np.arange(at, at + len(part["time"]), dtype=np.int32)})
    # Chunk 1 of "speed" stored as blosc at another level than the codec's: the same values in other bytes,
    # which only a copy keeps (encoding the values again gives the codec's own bytes).
    with neostore.open(sqlite_url) as store:
        tx = arrays.Transaction(store, message="chunk 1 at blosc level 9")
        values = rows["speed"][CHUNK_ROWS : 2 * CHUNK_ROWS].astype("<f8").tobytes()
        tx.set(f"{arrays.stream_path('copied')}/speed/c/1", Blosc("zstd", 9, Blosc.SHUFFLE).encode(values))
        tx.commit()
    path = tmp_path / "copied.zarr"
    export(sqlite_url, "copied", path, "zarr", block_bytes=1)
    expected = stored(sqlite_url, "copied")
    group = zarr.open_group(path, mode="r")
    for name, values in expected.items():
        np.testing.assert_array_equal(group[name][:], values, err_msg=name)  # NaN where NaN
    chunks = -(-ROWS // CHUNK_ROWS)
    with arrays.open_stream(sqlite_url, "copied") as stream:
        for name in ("time", "speed", "msg"):  # the stream's stored bytes, file for file
            for i, value in enumerate(stream[name].stored_chunks(0, chunks)):
                assert value is not None and (path / name / "c" / str(i)).read_bytes() == value, (name, i)
        level_9 = stream["speed"].stored_chunks(1, 2)[0]
        coarse = stream["coarse"].stored_chunks(0, 2)
    assert group["coarse"].chunks == (CHUNK_ROWS,)
    assert all(value is not None and (path / "coarse" / "c" / "0").read_bytes() != value for value in coarse)
    # Rows from a time: no chunk is copied (rows are selected), every value the same.
    later = tmp_path / "later.zarr"
    export(sqlite_url, "copied", later, "zarr", start=int(T0 + 50 * 10**9) / 1e9, block_bytes=1)
    keep = expected["time"] >= T0 + 50 * 10**9
    np.testing.assert_array_equal(zarr.open_group(later, mode="r")["speed"][:], expected["speed"][keep])
    ranged = tmp_path / "ranged.zarr"
    export(sqlite_url, "copied", ranged, "zarr", start=int(T0 - 2 * 10**9) / 1e9, block_bytes=1)
    assert (ranged / "speed" / "c" / "1").read_bytes() != level_9 == (path / "speed" / "c" / "1").read_bytes()


@pytest.mark.parametrize("block_bytes", [1, exporting.blocks.BLOCK_BYTES])
def test_zarr_copies_every_chunk_of_a_sensor_stream_value_for_value_and_counts_its_text(
    sqlite_url, tmp_path, block_bytes
):
    # Text and bytes as imports store them (compressed) and as arrays' defaults do; the last chunk partly filled.
    columns = [
        arrays.Column("speed", "float64"),
        arrays.Column("state", "int32"),
        arrays.Column("msg", "str", codec=TEXT_CODEC),
        arrays.Column("note", "str"),
        arrays.Column("raw", "bytes", codec=TEXT_CODEC),
    ]
    rows = mixed_rows(0, ROWS)
    with arrays.create_stream(sqlite_url, "plant.sensor", columns, chunk_rows=CHUNK_ROWS) as stream:
        for at in (0, 130):
            part = {name: rows[name][at : at + 130 if at == 0 else ROWS] for name in ("time", "speed", "msg", "raw")}
            n = len(part["time"])
            stream.append({**part, "state": np.arange(at, at + n, dtype=np.int32), "note": part["msg"][::-1]})
    path = tmp_path / "sensor.zarr"
    result = export(sqlite_url, "plant.sensor", path, "zarr", block_bytes=block_bytes)
    expected = stored(sqlite_url, "plant.sensor")
    group = zarr.open_group(path, mode="r")
    for name, values in expected.items():
        np.testing.assert_array_equal(group[name][:], values, err_msg=name)  # NaN where NaN
    with arrays.open_stream(sqlite_url, "plant.sensor") as stream:
        for name in ("time", "speed", "state", "msg", "note", "raw"):  # every chunk copied as stored
            for i, value in enumerate(stream[name].stored_chunks(0, -(-ROWS // CHUNK_ROWS))):
                assert value is not None and (path / name / "c" / str(i)).read_bytes() == value, (name, i)
    text = sum(len(v.encode()) for name in ("msg", "note") for v in expected[name].tolist())
    text += sum(len(b) for b in expected["raw"].tolist())
    numbers = sum(expected[name].nbytes for name in ("time", "speed", "state"))
    assert result.nbytes == numbers + text == export(sqlite_url, "plant.sensor", tmp_path / "s.arrow", "arrow").nbytes


def test_a_time_range_reads_only_the_chunks_whose_times_meet_it(sqlite_url):
    from windvane.export.blocks import layout_of, read_blocks
    from windvane.export.times import TimeRange

    make_mixed(sqlite_url, rows=ROWS)
    with arrays.open_stream(sqlite_url, "plant.mixed") as stream:
        stream.append({**mixed_rows(ROWS, 2 * CHUNK_ROWS), "time": T0 + 10**12 + np.arange(2 * CHUNK_ROWS)})
    later = TimeRange(T0 + 10**12, None)  # only the last two chunks' rows
    with arrays.open_stream(sqlite_url, "plant.mixed") as stream:
        layout = layout_of(stream)
        blocks = list(read_blocks(stream, layout, 0, len(stream), later, CHUNK_ROWS))
        kept = sum(b.table.num_rows for b in blocks)
        # The earlier chunks were read neither for their times nor for their values.
        assert kept == 2 * CHUNK_ROWS and stream["speed"].chunks_loaded == 3
        assert stream["time"].chunks_loaded <= 4  # the chunks kept, the partial last, and one spanning both
