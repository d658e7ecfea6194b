"""Each file format round-trips exactly through the import engine into a real store: values, times, strings."""

from __future__ import annotations

import datetime as dt
import struct

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import pytest

from tests.arrays.test_stream_writer import assert_same_streams
from windvane import arrays, neostore
from windvane.connectors.files import FileFormatError, ReaderOptions
from windvane.connectors.files.arrow import parquet_reader
from windvane.connectors.files.csv import CsvReader
from windvane.connectors.files.formats import format_for
from windvane.connectors.files.wav import wav_reader
from windvane.export import export
from windvane.ingest import imports, streams
from windvane.ingest.schema import parse_schema

T0 = 1_700_000_000_000_000_000  # 2023-11-14T22:13:20Z in ns


def run(url: str, tag: str, reader, path, schema=None, commit_bytes: int = 1):
    """Import through the engine with a commit per part (commit_bytes=1), as `windvane import` does."""
    with neostore.open(url) as store:
        return imports.import_source(
            store,
            tag,
            reader,
            source_id=imports.source_id_for(path),
            identity=imports.fingerprint(path),
            schema=schema,
            same_source=lambda s: imports.same_file(s, path),
            commit_bytes=commit_bytes,
        )


def quarantined(url: str, tag: str) -> list[tuple[str, bytes]]:
    try:
        q = arrays.open_stream(url, tag, quarantine=True)
    except arrays.StreamNotFoundError:
        return []
    return list(zip(q["reason"][:].tolist(), q["raw"][:].tolist()))


# -- CSV ---------------------------------------------------------------------------------------


CSV = (
    "ts,temperature,count,label\n"
    "2024-03-01T12:00:00Z,21.5,1,plain\n"
    '2024-03-01T13:00:00.123456789+01:00,-0.25,2,"comma, inside"\n'
    '2024-03-01 12:00:02,,3,"two\nlines"\r\n'
    "\n"
    "2024-03-01T17:30:03+0530,1e3,4,ünïcødé ✓\n"
    "2024-03-01,7,5,\n"
    '2024-03-01T12:00:05Z,8.125,6,"quote ""q"""\n'
)
CSV_TIMES = [
    "2024-03-01T12:00:00",
    "2024-03-01T12:00:00.123456789",
    "2024-03-01T12:00:02",
    "2024-03-01T12:00:03",
    "2024-03-01T00:00:00",
    "2024-03-01T12:00:05",
]


@pytest.mark.parametrize("block_bytes", [1 << 20, 64])  # one part; a part per row or two (cut mid-file)
def test_csv_round_trip_exact(sqlite_url, tmp_path, block_bytes):
    path = tmp_path / "sensors.csv"
    path.write_bytes(CSV.encode())
    reader = CsvReader(path, ReaderOptions(block_bytes=block_bytes))
    result = run(sqlite_url, "plant.csv", reader, path)
    assert (result.rows, result.rejected) == (6, 0)
    s = arrays.open_stream(sqlite_url, "plant.csv")
    assert s.columns == ["temperature", "count", "label"]
    assert s["time"][:].tolist() == np.array(CSV_TIMES, dtype="datetime64[ns]").view(np.int64).tolist()
    temperature = s["temperature"][:]
    assert temperature.dtype == np.float64
    np.testing.assert_array_equal(temperature, [21.5, -0.25, np.nan, 1000.0, 7.0, 8.125])
    assert s["count"][:].dtype == np.int64 and s["count"][:].tolist() == [1, 2, 3, 4, 5, 6]
    assert s["label"][:].tolist() == ["plain", "comma, inside", "two\nlines", "ünïcødé ✓", "", 'quote "q"']
    assert s.attrs["kind"] == "log"  # a text column: inferred as a log stream


def test_a_csv_windvane_exports_imports_back_to_the_same_values(sqlite_url, tmp_path):
    # Its times are ISO 8601 with an offset (read by one cast), and its text quoted only in some blocks
    # (blocks without a quote are parsed without looking for newlines in values).
    n = 600
    i = np.arange(n)
    labels = np.array([f'line {k}\nsecond, "q"' if k % 97 == 5 else f"ok {k}" for k in i.tolist()], dtype="T")
    columns = [arrays.Column("speed", "float64"), arrays.Column("count", "int64"), arrays.Column("label", "str")]
    speed = np.round(np.sin(i / 7.0) * 30, 6)
    speed[[3, 400]] = [np.nan, -0.0]
    with arrays.create_stream(sqlite_url, "plant.out", columns) as stream:
        stream.append({"time": T0 + i * 123_456_789, "speed": speed, "count": i * 3 - 7, "label": labels})
    path = tmp_path / "out.csv"
    export(sqlite_url, "plant.out", path, "csv")
    result = run(sqlite_url, "plant.back", CsvReader(path, ReaderOptions(block_bytes=2048)), path)
    assert (result.rows, result.rejected) == (n, 0)
    with arrays.open_stream(sqlite_url, "plant.out") as before, arrays.open_stream(sqlite_url, "plant.back") as after:
        assert after.columns == before.columns
        for name in ["time", *before.columns]:
            np.testing.assert_array_equal(after[name][:], before[name][:], err_msg=name)


def test_csv_epoch_units_by_magnitude_and_by_option(sqlite_url, tmp_path):
    for unit, scale in (("s", 10**9), ("ms", 10**6), ("us", 10**3), ("ns", 1)):
        path = tmp_path / f"epoch_{unit}.csv"
        path.write_text("time,v\n" + "".join(f"{T0 // scale + i},{i}\n" for i in range(3)))
        run(sqlite_url, f"epoch.{unit}", CsvReader(path, ReaderOptions()), path)
        assert arrays.open_stream(sqlite_url, f"epoch.{unit}")["time"][:].tolist() == [T0 + i * scale for i in range(3)]
    path = tmp_path / "fractional.csv"
    path.write_text("timestamp,v\n1700000000.123456,1\n1700000000.5,2\n")
    run(sqlite_url, "epoch.frac", CsvReader(path, ReaderOptions()), path)
    assert arrays.open_stream(sqlite_url, "epoch.frac")["time"][:].tolist() == [T0 + 123456000, T0 + 500000000]
    # Small numbers are seconds by magnitude; --time-unit ms says otherwise.
    path = tmp_path / "small.csv"
    path.write_text("time,v\n1000,1\n")
    run(sqlite_url, "epoch.forced", CsvReader(path, ReaderOptions(time_unit="ms")), path)
    assert arrays.open_stream(sqlite_url, "epoch.forced")["time"][:].tolist() == [10**9]


SENSOR_SCHEMA = parse_schema(
    {
        "kind": "sensor",
        "tags": ["plant.*"],
        "fields": [
            {"name": "power", "dtype": "float32", "required": True},
            {"name": "state", "dtype": "int8", "fill": -1},
            {"name": "serial", "dtype": "str"},
        ],
        "extra": "reject",
    },
    name="plant",
)


def test_csv_bad_rows_quarantined_verbatim_with_reasons(sqlite_url, tmp_path):
    lines = [
        b"time,power,state,serial",
        b"2024-01-01T00:00:00Z,1.5,1,007",  # kept: "007" stays text (the schema says str)
        b"2024-01-01T00:00:01Z,abc,1,x",  # power is no float
        b"2024-01-01T00:00:02Z,2.5,3.5,x",  # state is no integer
        b"2024-01-01T00:00:03Z,2.5,300,x",  # state does not fit an int8
        b"2024-01-01T00:00:04Z,,1,x",  # power is required
        b"yesterday,2.5,1,x",  # the time is no time
        b"2024-01-01T00:00:06Z,2.5,1,x,surplus",  # a field too many
        b"2024-01-01T00:00:07Z,3.25,,\xc3\xa9",  # kept: state missing -> its fill
    ]
    path = tmp_path / "plant.csv"
    path.write_bytes(b"\n".join(lines) + b"\n")
    options = ReaderOptions(column_types=imports.arrow_types(SENSOR_SCHEMA))
    result = run(sqlite_url, "plant.a", CsvReader(path, options), path, schema=SENSOR_SCHEMA)
    assert (result.rows, result.rejected) == (2, 6)
    s = arrays.open_stream(sqlite_url, "plant.a")
    assert s["power"][:].tolist() == [1.5, 3.25] and s["power"].dtype == np.float32
    assert s["state"][:].tolist() == [1, -1] and s["serial"][:].tolist() == ["007", "é"]
    reasons = dict((raw, reason) for reason, raw in quarantined(sqlite_url, "plant.a"))
    assert set(reasons) == set(lines[2:8])
    assert reasons[lines[2]] == "field 'power': 'abc' is not a float32"
    assert reasons[lines[3]] == "field 'state': '3.5' is not a int8"
    assert reasons[lines[4]] == "field 'state': '300' is not a int8"
    assert reasons[lines[5]] == "required field 'power' is missing"
    assert "'yesterday' is not a time" in reasons[lines[6]]
    assert reasons[lines[7]] == "5 fields where the header has 4"


def test_csv_types_of_the_whole_file_define_the_stream(sqlite_url, tmp_path):
    """Without a schema the whole file's types define the stream, whatever the block size: 1.5 after 50
    integers in the last block makes the column float64; a word later makes no column text."""
    path = tmp_path / "drift.csv"
    rows = [f"{T0 + i},{i},{i}" for i in range(300)] + [f"{T0 + 300},1.5,err"]
    path.write_text("time,n,m\n" + "\n".join(rows) + "\n")
    result = run(sqlite_url, "drift", CsvReader(path, ReaderOptions(block_bytes=128)), path)
    assert (result.rows, result.rejected) == (300, 1)
    s = arrays.open_stream(sqlite_url, "drift")
    assert s["n"].dtype == np.float64 and s["n"][:].tolist() == list(range(300))
    assert s["m"].dtype == np.int64 and s["m"][:].tolist() == list(range(300))
    assert quarantined(sqlite_url, "drift") == [("field 'm': 'err' is not a int64", f"{T0 + 300},1.5,err".encode())]


def test_schema_contradicting_the_stream_is_refused(sqlite_url, tmp_path):
    path = tmp_path / "a.csv"
    path.write_text("time,power,state,serial\n2024-01-01T00:00:00Z,1,2,x\n")
    run(sqlite_url, "plant.b", CsvReader(path, ReaderOptions()), path)  # inferred: power int64
    with neostore.open(sqlite_url) as store, pytest.raises(imports.SchemaMismatch, match="power"):
        imports.resolve_schema(store, "plant.b", SENSOR_SCHEMA)


def test_csv_without_a_time_column_is_a_clear_error(tmp_path):
    path = tmp_path / "x.csv"
    path.write_text("a,b\n1,2\n")
    with pytest.raises(FileFormatError, match=r"no time column .*--time-column"):
        CsvReader(path, ReaderOptions())
    with pytest.raises(FileFormatError, match="no column 'when'"):
        CsvReader(path, ReaderOptions(time_column="when"))


# -- Parquet and Arrow IPC -------------------------------------------------------------------------


def sample_table(n: int = 1000) -> pa.Table:
    rng = np.random.default_rng(5)
    words = ["", "a", "ünïcødé", "日本語", "with\nnewline", "x" * 300]
    values = rng.normal(size=n)
    values[::7] = np.nan
    return pa.table(
        {
            "when": pa.array(T0 + np.arange(n, dtype=np.int64) * 1_000_001, pa.timestamp("ns", tz="Europe/Paris")),
            "value": pa.array(values, pa.float64(), mask=np.arange(n) % 11 == 0),
            "small": pa.array(np.arange(n) % 120, pa.int8()),
            "big": pa.array(np.arange(n, dtype=np.uint64) * 10**15, pa.uint64()),
            "word": pa.array([words[i % len(words)] for i in range(n)], pa.string()),
            "flag": pa.array(np.arange(n) % 3 == 0),
        }
    )


def check_table_stream(url: str, tag: str, table: pa.Table) -> None:
    s = arrays.open_stream(url, tag)
    assert s.columns == ["value", "small", "big", "word", "flag"]
    assert s["time"][:].tolist() == table.column("when").cast(pa.int64()).to_pylist()
    expected = table.column("value").to_numpy(zero_copy_only=False)
    np.testing.assert_array_equal(s["value"][:], expected)  # nulls and NaN: NaN
    for name, dtype in (("small", np.int8), ("big", np.uint64), ("flag", np.bool_)):
        assert s[name].dtype == dtype and s[name][:].tolist() == table.column(name).to_pylist()
    assert s["word"][:].tolist() == table.column("word").to_pylist()


def test_parquet_round_trip_and_resume_mid_file(store_url, tmp_path):
    table = sample_table()
    path = tmp_path / "data.parquet"
    pq.write_table(table, path, row_group_size=128)
    reader = parquet_reader(str(path), ReaderOptions(time_column="when"))
    # A reader started at a row index yields exactly the rest (what a resumed import asks for).
    rest = pa.concat_tables(p.table for p in reader(300))
    assert rest.column("time").to_pylist() == table.column("when").cast(pa.int64()).to_pylist()[300:]
    assert [p.end for p in reader(300)][-1] == 1000
    result = run(store_url, "pq", reader, path)
    assert (result.rows, result.rejected, result.commits) == (1000, 0, 8)
    check_table_stream(store_url, "pq", table)


@pytest.mark.parametrize("kind", ["file", "stream"])
def test_arrow_ipc_round_trip(sqlite_url, tmp_path, kind):
    table = sample_table()
    path = tmp_path / f"data.{'arrow' if kind == 'file' else 'arrows'}"
    writer = ipc.new_file if kind == "file" else ipc.new_stream
    with pa.OSFile(str(path), "wb") as sink, writer(sink, table.schema) as w:
        for batch in table.to_batches(max_chunksize=300):
            w.write_batch(batch)
    reader = format_for(path).make(str(path), ReaderOptions(time_column="when"))
    assert [p.end for p in reader(450)] == [600, 900, 1000]
    result = run(sqlite_url, "ipc", reader, path)
    assert (result.rows, result.commits) == (1000, 4)
    check_table_stream(sqlite_url, "ipc", table)


def test_text_and_bytes_columns_store_what_lists_of_values_store(sqlite_url, tmp_path):
    """str and bytes fields (nulls filled, unicode, empty values, string, large_string and binary columns,
    rows rejected between them) across parts that start, cross and end chunks: the chunks are those a
    writer stores for the same values as lists, byte for byte."""
    n = 1000
    words = ["", "a", "ünïcødé", "日本語", "with\nnewline", "x" * 300, None]
    texts = [words[i % len(words)] for i in range(n)]
    blobs = [None if i % 5 == 0 else f"b{i}".encode() * (i % 4) for i in range(n)]
    levels = [0.5 if i % 97 == 3 else 1 for i in range(n)]  # 0.5 is no int8: rows rejected
    table = pa.table(
        {
            "when": pa.array(T0 + np.arange(n, dtype=np.int64), pa.int64()),
            "word": pa.array(texts, pa.string()),
            "long": pa.array(texts[::-1], pa.large_string()),
            "blob": pa.array(blobs, pa.binary()),
            "level": pa.array(levels, pa.float64()),
        }
    )
    schema = parse_schema(
        {
            "kind": "log",
            "tags": ["logs"],
            "chunk_rows": 64,
            "fields": [
                {"name": "word", "dtype": "str"},
                {"name": "long", "dtype": "str", "fill": "∅"},
                {"name": "blob", "dtype": "bytes"},
                {"name": "level", "dtype": "int8", "fill": -1},
            ],
            "extra": "reject",
        },
        name="logs",
    )
    path = tmp_path / "logs.parquet"
    pq.write_table(table, path, row_group_size=150)
    result = run(sqlite_url, "logs", parquet_reader(str(path), ReaderOptions(time_column="when")), path, schema)
    kept = [i for i in range(n) if levels[i] == 1]
    assert (result.rows, result.rejected) == (len(kept), n - len(kept))
    want = {
        "time": T0 + np.array(kept, dtype=np.int64),
        "word": [texts[i] or "" for i in kept],
        "long": [texts[::-1][i] if texts[::-1][i] is not None else "∅" for i in kept],
        "blob": [blobs[i] or b"" for i in kept],
        "level": np.ones(len(kept), dtype=np.int8),
    }
    with neostore.open(sqlite_url) as store:
        attrs = {"schema": "logs", "kind": "log"}
        arrays.create_stream(store, "lists", streams.schema_columns(schema), attrs=attrs, chunk_rows=64).close()
        writer = arrays.StreamWriter(store, "lists")
        for start in range(0, len(kept), 100):
            with arrays.transaction(store) as tx:
                writer.append(tx, {name: values[start : start + 100] for name, values in want.items()})
        assert_same_streams(store, "logs", "lists")
    s = arrays.open_stream(sqlite_url, "logs")
    assert s["word"].dtype == np.dtypes.StringDType() and s["word"][:].tolist() == want["word"]
    assert s["long"][:].tolist() == want["long"] and s["blob"][:].tolist() == want["blob"]


def test_parquet_column_types_against_the_stream(sqlite_url, tmp_path):
    """Numbers into a str field: a clear error, nothing stored. Ints into floats: fine; 2.5 into int8: quarantined."""
    path = tmp_path / "plant.parquet"
    times = pa.array([T0, T0 + 1, T0 + 2], pa.int64())
    pq.write_table(pa.table({"time": times, "power": [1, 2, 3], "state": [1.0, 2.5, 3.0], "serial": [7, 8, 9]}), path)
    with pytest.raises(imports.SchemaMismatch, match="'serial' is int64 in the file but 'serial' is a str field"):
        run(sqlite_url, "plant.c", parquet_reader(str(path), ReaderOptions()), path, schema=SENSOR_SCHEMA)
    with pytest.raises(arrays.StreamNotFoundError):
        arrays.open_stream(sqlite_url, "plant.c")
    pq.write_table(
        pa.table({"time": times, "power": [1, 2, 3], "state": [1.0, 2.5, 3.0], "serial": ["a", "b", "c"]}), path
    )
    result = run(sqlite_url, "plant.c", parquet_reader(str(path), ReaderOptions()), path, schema=SENSOR_SCHEMA)
    assert (result.rows, result.rejected) == (2, 1)
    s = arrays.open_stream(sqlite_url, "plant.c")
    assert s["power"][:].tolist() == [1.0, 3.0] and s["state"][:].tolist() == [1, 3]
    [(reason, raw)] = quarantined(sqlite_url, "plant.c")
    assert reason == "field 'state': 2.5 is not a int8" and b'"serial":"b"' in raw


# -- WAV ------------------------------------------------------------------------------------------------


def write_wav(
    path,
    samples: np.ndarray,
    rate: int,
    *,
    bits: int | None = None,
    extensible: bool = False,
    bext_time: str | None = None,
) -> None:
    """A WAV file written byte by byte (RIFF, fmt, optional bext, data) from frames x channels samples."""
    channels = samples.shape[1]
    floating = samples.dtype.kind == "f"
    bits = bits or samples.dtype.itemsize * 8
    if bits == 24:
        le = samples.astype("<i4").view(np.uint8).reshape(-1, 4)[:, :3]
        data = le.tobytes()
    elif bits == 8:
        data = (samples.astype(np.int16) + 128).astype(np.uint8).tobytes()
    else:
        data = samples.astype(samples.dtype.newbyteorder("<")).tobytes()
    tag = 3 if floating else 1
    block = channels * bits // 8
    fmt = struct.pack("<HHIIHH", 0xFFFE if extensible else tag, channels, rate, rate * block, block, bits)
    if extensible:
        guid_tail = b"\x00\x00\x00\x00\x10\x00\x80\x00\x00\xaa\x00\x38\x9b\x71"
        fmt += struct.pack("<HHI", 22, bits, 0) + struct.pack("<H", tag) + guid_tail
    chunks = b"fmt " + struct.pack("<I", len(fmt)) + fmt
    if bext_time is not None:
        body = bytearray(602)
        body[320:338] = bext_time.encode()
        chunks += b"bext" + struct.pack("<I", len(body)) + bytes(body)
    chunks += b"data" + struct.pack("<I", len(data)) + data + (b"\x00" if len(data) % 2 else b"")
    path.write_bytes(b"RIFF" + struct.pack("<I", 4 + len(chunks)) + b"WAVE" + chunks)


@pytest.mark.parametrize(
    "dtype,bits,extensible",
    [
        ("int16", 16, False),
        ("int32", 24, True),
        ("float32", 32, False),
        ("int32", 32, True),
        ("float64", 64, False),
        ("int16", 8, False),
    ],
)
def test_wav_exact_multichannel(sqlite_url, tmp_path, dtype, bits, extensible):
    rng = np.random.default_rng(bits)
    frames, channels, rate = 10_007, 3, 8_000
    if dtype.startswith("float"):
        samples = rng.normal(size=(frames, channels)).astype(dtype)
    else:
        limit = 2 ** (bits - 1)
        samples = rng.integers(-limit, limit, size=(frames, channels)).astype(dtype)
        samples[0] = [-limit, limit - 1, 0]  # the extremes survive sign extension
    path = tmp_path / "rec.wav"
    write_wav(path, samples, rate, bits=bits, extensible=extensible)
    start = int(np.datetime64("2025-06-01T08:00:00", "ns").view(np.int64))
    reader = wav_reader(str(path), ReaderOptions(start=start, block_bytes=8192))
    result = run(sqlite_url, "turbine.vib", reader, path, commit_bytes=16_384)
    assert result.rows == frames and result.commits >= 2
    s = arrays.open_stream(sqlite_url, "turbine.vib")
    stored = s["samples"][:]
    assert stored.dtype == np.dtype(dtype) and stored.shape == (frames, channels)
    np.testing.assert_array_equal(stored, samples)
    assert s["samples"].attrs["sample_rate"] == rate and s.attrs["kind"] == "vibration"
    time = s["time"][:]
    assert time[0] == start and time[rate] == start + 10**9  # one second later, exactly
    np.testing.assert_array_equal(time, start + np.rint(np.arange(frames) * (1e9 / rate)).astype(np.int64))


def test_wav_start_from_bext_then_mtime(sqlite_url, tmp_path):
    samples = np.arange(8, dtype=np.int16).reshape(4, 2)
    path = tmp_path / "bwf.wav"
    write_wav(path, samples, 4, bext_time="2024-05-06" + "07:08:09")
    run(sqlite_url, "bwf", wav_reader(str(path), ReaderOptions()), path)
    expected = int(dt.datetime(2024, 5, 6, 7, 8, 9, tzinfo=dt.UTC).timestamp()) * 10**9
    assert arrays.open_stream(sqlite_url, "bwf")["time"][:].tolist() == [expected + i * 250_000_000 for i in range(4)]
    plain = tmp_path / "plain.wav"
    write_wav(plain, samples, 4)
    mtime = plain.stat().st_mtime_ns
    reader = wav_reader(str(plain), ReaderOptions())
    assert next(reader(None)).table.column("time").to_pylist()[0] == mtime - 10**9  # 4 frames at 4 Hz


def test_wav_into_a_stream_of_other_rate_is_refused(sqlite_url, tmp_path):
    path = tmp_path / "a.wav"
    write_wav(path, np.zeros((10, 3), np.float32), 25_600)
    other = tmp_path / "b.wav"
    write_wav(other, np.zeros((10, 3), np.float32), 48_000)
    run(sqlite_url, "vib", wav_reader(str(path), ReaderOptions(start=T0)), path)
    with pytest.raises(imports.SchemaMismatch, match="48000 Hz"):
        with neostore.open(sqlite_url) as store:
            schema = imports.resolve_schema(store, "vib", None)
        run(sqlite_url, "vib", wav_reader(str(other), ReaderOptions(start=T0)), other, schema=schema)


def test_not_a_wav_is_a_clear_error(tmp_path):
    path = tmp_path / "x.wav"
    path.write_bytes(b"RIFF\x00\x00\x00\x00AVI ")
    with pytest.raises(FileFormatError, match="not a WAV file"):
        wav_reader(str(path), ReaderOptions())
