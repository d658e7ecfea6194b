"""File import benchmarks: `windvane import`'s engine against pyarrow reading the same file.

For CSV, Parquet and WAV, a file of ``IMPORT_BYTES`` (256 MiB) is generated
once, untimed, in a temporary directory: sensor-like rows (time, 6 float
columns, an int and a short label) for CSV and Parquet, 3-channel float32
at 25.6 kHz for WAV. Each format has two benchmarks, run back to back:

- the baseline: pyarrow reading the whole file (``csv.read_csv``,
  ``parquet.read_table``, numpy's ``fromfile`` of the WAV frames), the
  parse limit of any importer built on it;
- the import: :func:`ingest.imports.import_source` with the format's reader
  into a fresh SQLite store (WAL, ``synchronous=FULL``), committing 32 MiB
  of file per durable commit with its position, as ``windvane import``
  does. ``extra_info["ratio_vs_baseline"]`` is import MB/s over pyarrow MB/s;
- the write limit: the same rows, already decoded, appended with ``arrays``
  into a fresh stream of the same columns in as many commits as the import
  made (``ratio_vs_arrays`` is import MB/s over that), what any importer
  writing into this store pays after parsing.

MB/s = 10^6 file bytes per second, median of ``WINDVANE_BENCH_ROUNDS``
(3) rounds. ``WINDVANE_BENCH_IMPORT_BYTES=32M`` makes a quick run.

:func:`test_goals_side_by_side` measures the import beside its write limit
in one run, CSV and Parquet: each round imports the file into a fresh store
and appends the same decoded rows with ``arrays`` into another (as many
commits), the order reversed each round, the ratio taken within a round
(goals: CSV >= 0.8, Parquet >= 0.9)::

    .venv/bin/python -m pytest benchmarks/test_import.py -p no:cacheprovider --benchmark-enable --benchmark-only
"""

from __future__ import annotations

import os
import shutil
import struct
import tempfile
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from s3_bench import alternate, mbps, per_round
from sensor_data import parse_size
from test_neostore import record, sqlite_url

from windvane import arrays, neostore
from windvane.connectors.files import ReaderOptions
from windvane.connectors.files.formats import format_for
from windvane.ingest import imports, streams
from windvane.ingest.schema import Schema

ROUNDS = int(os.environ.get("WINDVANE_BENCH_ROUNDS", "3"))
IMPORT_BYTES = parse_size(os.environ.get("WINDVANE_BENCH_IMPORT_BYTES", str(256 << 20)))
T0 = 1_700_000_000_000_000_000
WAV_RATE, WAV_CHANNELS = 25_600, 3
ROW_BYTES = 105  # about what one CSV row below takes


def sensor_table(rows: int, offset: int = 0) -> pa.Table:
    rng = np.random.default_rng(offset)
    index = np.arange(offset, offset + rows, dtype=np.int64)
    columns = {"time": pa.array(T0 + index * 100_000_000, pa.timestamp("ns", tz="UTC"))}
    for c in range(6):
        columns[f"v{c}"] = np.round(rng.normal(20 + c, 3, rows), 3)
    columns["state"] = (index % 7).astype(np.int32)
    columns["label"] = pa.array(np.array(["ok", "warn", "alarm", "maintenance"])[index % 4])
    return pa.table(columns)


@pytest.fixture(scope="module")
def files():
    """The three files, generated once (untimed), removed at the end."""
    root = tempfile.mkdtemp(prefix="wvb-import-", dir="/tmp")
    rows = IMPORT_BYTES // ROW_BYTES
    per = 1 << 18
    csv_path, parquet_path, wav_path = (os.path.join(root, n) for n in ("data.csv", "data.parquet", "data.wav"))
    with (
        pacsv.CSVWriter(
            csv_path, sensor_table(1).schema, write_options=pacsv.WriteOptions(quoting_style="none")
        ) as csv_writer,
        pq.ParquetWriter(parquet_path, sensor_table(1).schema) as parquet_writer,
    ):
        for start in range(0, rows, per):
            table = sensor_table(min(per, rows - start), start)
            csv_writer.write_table(table)
            parquet_writer.write_table(table, row_group_size=per)
    frames = IMPORT_BYTES // (4 * WAV_CHANNELS)
    rng = np.random.default_rng(1)
    data = rng.normal(0, 1, (frames, WAV_CHANNELS)).astype("<f4")
    block = 4 * WAV_CHANNELS
    fmt = struct.pack("<HHIIHH", 3, WAV_CHANNELS, WAV_RATE, WAV_RATE * block, block, 32)
    with open(wav_path, "wb") as f:
        f.write(b"RIFF" + struct.pack("<I", 4 + 8 + len(fmt) + 8 + data.nbytes) + b"WAVE")
        f.write(b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", data.nbytes))
        data.tofile(f)
    del data
    yield {"csv": csv_path, "parquet": parquet_path, "wav": wav_path}
    shutil.rmtree(root, ignore_errors=True)


def read_csv(path: str) -> int:
    return pacsv.read_csv(path).num_rows


def read_parquet(path: str) -> int:
    return pq.read_table(path).num_rows


def read_wav(path: str) -> int:
    return len(np.fromfile(path, dtype="<f4", offset=44).reshape(-1, WAV_CHANNELS))


def _imported(path: str, url: str, fmt: str) -> imports.ImportResult:
    with neostore.open(url) as store:
        reader = format_for(path).make(path, ReaderOptions(start=T0))
        # As `windvane import` does: the content hash (a copy is not imported twice) and, for a new
        # stream, the types of the whole file (CSV: a pass before the import) are part of the import.
        return imports.import_source(
            store,
            "bench",
            reader,
            source_id=imports.source_id_for(path),
            identity=imports.fingerprint(path),
            content=imports.content_hash(path),
            name=path,
        )


BASELINES = {"csv": read_csv, "parquet": read_parquet, "wav": read_wav}


@pytest.mark.parametrize("fmt", ["csv", "parquet", "wav"])
def test_pyarrow_read(benchmark, files, bench_results, fmt):
    path = files[fmt]
    rows = benchmark.pedantic(BASELINES[fmt], args=(path,), rounds=ROUNDS, iterations=1, warmup_rounds=1)
    assert rows > 0
    record(benchmark, bench_results, f"read_{fmt}", os.path.getsize(path), what=f"pyarrow reads the {fmt} file")


@pytest.mark.parametrize("fmt", ["csv", "parquet", "wav"])
def test_import(benchmark, files, databases, bench_results, fmt):
    path = files[fmt]
    store_path = {}

    def setup():
        store_path["url"] = sqlite_url(databases.fresh_sqlite(f"import_{fmt}"))
        return (), {}

    def target():
        return _imported(path, store_path["url"], fmt)

    result = benchmark.pedantic(target, setup=setup, rounds=ROUNDS, iterations=1)
    assert result.rejected == 0 and result.rows == len(arrays.open_stream(store_path["url"], "bench"))
    record(
        benchmark,
        bench_results,
        f"import_{fmt}",
        os.path.getsize(path),
        baseline=f"read_{fmt}",
        what=f"windvane import of the {fmt} file into SQLite",
        rows=result.rows,
        commits=result.commits,
    )


@pytest.mark.parametrize("fmt", ["csv", "parquet", "wav"])
def test_arrays_append(benchmark, files, databases, bench_results, fmt):
    """The write limit: the imported rows appended with ``arrays`` directly, as many commits as the import."""
    path = files[fmt]
    source = sqlite_url(databases.fresh_sqlite(f"import_src_{fmt}"))
    result = _imported(path, source, fmt)
    data, schema = _decoded(source)
    rows = len(data["time"])
    state = {}

    def setup():
        state["url"] = sqlite_url(databases.fresh_sqlite(f"import_arrays_{fmt}"))
        return (), {}

    def target():
        _append(state["url"], schema, data, result.commits)

    benchmark.pedantic(target, setup=setup, rounds=ROUNDS, iterations=1)
    assert len(arrays.open_stream(state["url"], "bench")) == rows
    record(
        benchmark,
        bench_results,
        f"arrays_{fmt}",
        os.path.getsize(path),
        what=f"arrays appends the rows of the {fmt} file into SQLite",
        rows=rows,
        commits=result.commits,
    )
    if f"import_{fmt}" in bench_results and f"arrays_{fmt}" in bench_results:
        benchmark.extra_info["import_vs_arrays"] = (
            bench_results[f"import_{fmt}"]["mbps"] / bench_results[f"arrays_{fmt}"]["mbps"]
        )


def _decoded(url: str) -> tuple[dict[str, np.ndarray], Schema]:
    """What an import stored: every column as numpy, and the stream's schema."""
    with neostore.open(url) as store:
        schema = imports.resolve_schema(store, "bench", None)
    assert schema is not None, "the import made the stream"
    with arrays.open_stream(url, "bench") as stream:
        return {name: stream[name][:] for name in ["time", *stream.columns]}, schema


def _append(url: str, schema: Schema, data: dict[str, np.ndarray], commits: int) -> None:
    """The write limit: ``data`` appended into a new stream of ``schema``'s columns in ``commits`` commits."""
    rows = len(data["time"])
    step = -(-rows // max(1, commits))
    stream = arrays.create_stream(url, "bench", streams.schema_columns(schema), chunk_rows=schema.chunk_rows)
    for start in range(0, rows, step):
        stream.append({name: values[start : start + step] for name, values in data.items()})
    stream.close()


GOALS = {"csv": 0.8, "parquet": 0.9}


@pytest.mark.parametrize("fmt", list(GOALS))
def test_goals_side_by_side(benchmark, files, databases, fmt):
    path = files[fmt]
    size = os.path.getsize(path)
    first = _imported(path, sqlite_url(databases.fresh_sqlite(f"goal_first_{fmt}")), fmt)  # untimed
    data, schema = _decoded(sqlite_url(databases.sqlite_path(f"goal_first_{fmt}")))
    databases.drop_sqlite(f"goal_first_{fmt}")
    rounds = 1 if benchmark.disabled else ROUNDS
    rates: dict[str, list[float]] = {}

    # CPU seconds of this process (every thread) per run: on a machine of few cores, what the import must do
    # beyond the arrays write (parsing, typing) bounds the ratio even where the two overlap perfectly.
    cpu: dict[str, list[float]] = {"import": [], "arrays_append": []}

    def counted(name: str, fn: Callable[[], float]) -> float:
        before = os.times()
        rate = fn()
        after = os.times()
        cpu[name].append((after.user - before.user) + (after.system - before.system))
        return rate

    def import_once() -> float:
        url = sqlite_url(databases.fresh_sqlite(f"goal_import_{fmt}"))
        return counted("import", lambda: mbps(size, lambda: _imported(path, url, fmt)))

    def append_once() -> float:
        url = sqlite_url(databases.fresh_sqlite(f"goal_arrays_{fmt}"))
        return counted("arrays_append", lambda: mbps(size, lambda: _append(url, schema, data, first.commits)))

    def run() -> None:
        rates.update(alternate({"import": import_once, "arrays_append": append_once}, rounds))

    benchmark.pedantic(run, rounds=1, iterations=1)
    ratios = per_round(rates, "import", "arrays_append")
    median = float(np.median(ratios))
    benchmark.extra_info.update(
        {
            "format": fmt,
            "file_bytes": size,
            "rows": first.rows,
            "commits": first.commits,
            "rounds": rounds,
            "mb_per_s": rates,
            "median_mb_per_s": {name: float(np.median(v)) for name, v in rates.items()},
            "ratios_per_round": ratios,
            "median_ratio": median,
            "cpu_seconds": cpu,
            "cores": os.cpu_count(),
            "goal": GOALS[fmt],
            "goal_met": median >= GOALS[fmt],
        }
    )
    print(f"\n{fmt}: import over the arrays write limit {median:.2f} (goal {GOALS[fmt]}), per round {ratios}")
