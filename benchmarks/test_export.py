"""Export benchmarks: `windvane export`'s engine per format against zarr reading the same data.

Two streams are written once per module (untimed) into a SQLite store (WAL,
``synchronous=FULL``), sized by ``EXPORT_BYTES`` (256 MiB):

- **sensor**: ``time``, six float64 columns, an int32 and a short text
  label, the rows :func:`test_import.sensor_table` makes, stored with the
  codecs an import gives them (blosc zstd for numbers, zstd level 1 for
  text); ``EXPORT_BYTES`` of rows (279 MB raw);
- **vibration**: 3-channel float32 at 25.6 kHz (noise), the columns and
  codecs of ``schemas/turbine_vibration.toml`` (blosc lz4, 32768-row
  chunks); ``EXPORT_BYTES`` of samples plus 8 bytes of ``time`` a row (447 MB raw).

The baseline copies each stream's zarr keys, byte for byte, into a zarr v3
group on a ``LocalStore`` directory (untimed); its timed rounds open the
group and read every array fully with zarr. Each export round is
:func:`export.export` of the whole stream to a fresh file (or zarr
directory) in a temporary directory, written atomically (fsync + rename)
as ``windvane export`` does. MB/s = 10^6 raw bytes per second (numbers
their itemsize, text its UTF-8 length), median of ``WINDVANE_BENCH_ROUNDS``
(3) rounds; ``extra_info["ratio_vs_baseline"]`` is export MB/s over the
baseline's::

    .venv/bin/python -m pytest benchmarks/test_export.py -p no:cacheprovider --benchmark-enable --benchmark-only \\
        --benchmark-json=/tmp/export.json

``WINDVANE_BENCH_EXPORT_BYTES=32M`` makes a quick run.

:func:`test_goals_side_by_side` measures the goals with their baselines in
one run, each round running every target once, the order reversed each
round, the ratios taken within a round (medians reported):

- zarr export (the stored chunks copied as they are) over zarr reading the
  LocalStore copy (goal >= 0.9);
- CSV export over ``pyarrow.csv.write_csv`` of the same rows, already in
  memory as one table (``time`` as ``timestamp[ns, tz=UTC]``, a column with
  an inner shape as one column per element, as the export names them),
  written to a file and fsynced (goal >= 0.5). pyarrow formats a zoned
  timestamp value by value through the time zone database; the same table
  with ``time`` as a naive ``timestamp[ns]`` (which it formats fast, without
  the offset) is measured beside it, for the ratio without that cost.
"""

from __future__ import annotations

import os
import shutil
import tempfile

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pytest
import zarr
from s3_bench import alternate, mbps, per_round
from sensor_data import parse_size
from test_import import sensor_table
from test_neostore import record, sqlite_url
from zarr.storage import LocalStore

from windvane import arrays, neostore
from windvane.export import FORMATS, export
from windvane.ingest.schema import load_schema
from windvane.ingest.streams import TEXT_CODEC, schema_columns

ROUNDS = int(os.environ.get("WINDVANE_BENCH_ROUNDS", "3"))
EXPORT_BYTES = parse_size(os.environ.get("WINDVANE_BENCH_EXPORT_BYTES", str(256 << 20)))
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STREAMS = ("sensor", "vibration")
SENSOR_ROW_BYTES = 8 + 6 * 8 + 4 + 3  # time, six float64, an int32, a label of ~3 bytes
VIBRATION_RATE = 25_600
APPEND_ROWS = 1 << 20

pytestmark = [pytest.mark.timeout(3600), pytest.mark.filterwarnings("ignore::zarr.errors.UnstableSpecificationWarning")]


def _sensor(url: str) -> None:
    columns = [arrays.Column(f"v{c}", "float64") for c in range(6)]
    columns += [arrays.Column("state", "int32"), arrays.Column("label", "str", codec=TEXT_CODEC)]
    rows = EXPORT_BYTES // SENSOR_ROW_BYTES
    with arrays.create_stream(url, "bench.sensor", columns, attrs={"kind": "sensor"}) as stream:
        for start in range(0, rows, APPEND_ROWS):
            table = sensor_table(min(APPEND_ROWS, rows - start), start)
            block = {"time": table.column("time").cast(pa.int64()).to_numpy()}
            block.update((name, table.column(name).to_numpy()) for name in table.column_names[1:-1])
            block["label"] = table.column("label").to_numpy(zero_copy_only=False).astype(np.dtypes.StringDType())
            stream.append(block)


def _vibration(url: str) -> None:
    schema = load_schema(os.path.join(REPO, "schemas", "turbine_vibration.toml"))
    rows = EXPORT_BYTES // (4 * schema.vibration.channels)
    rng = np.random.default_rng(6)
    step = 1_000_000_000 / VIBRATION_RATE
    with arrays.create_stream(
        url, "bench.vibration", schema_columns(schema), attrs={"kind": "vibration"}, chunk_rows=schema.chunk_rows
    ) as stream:
        for start in range(0, rows, APPEND_ROWS):
            n = min(APPEND_ROWS, rows - start)
            time = 1_700_000_000_000_000_000 + (np.arange(start, start + n) * step).astype(np.int64)
            samples = rng.normal(0, 1, (n, schema.vibration.channels)).astype(np.float32)
            stream.append({"time": time, "samples": samples})


def _copy_to_local_store(url: str, tag: str, directory: str) -> None:
    """The stream's zarr keys, as stored (same chunks, same codecs), into a LocalStore directory."""
    prefix = f"{arrays.stream_path(tag)}/"
    with neostore.open(url) as store:
        snapshot = arrays.Snapshot.latest(store)
        for entry in snapshot.list(prefix):
            path = os.path.join(directory, entry.key[len(prefix) :])
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(snapshot.get(entry.key))
    with open(os.path.join(directory, "zarr.json"), "wb") as f:
        f.write(b'{"zarr_format": 3, "node_type": "group", "attributes": {}}')


@pytest.fixture(scope="module")
def data():
    """The store with both streams, their LocalStore copies, and a directory for the exports; removed after."""
    root = tempfile.mkdtemp(prefix="wvb-export-", dir="/tmp")
    url = sqlite_url(os.path.join(root, "store.db"))
    _sensor(url)
    _vibration(url)
    copies = {}
    for kind in STREAMS:
        copies[kind] = os.path.join(root, f"{kind}.zarr")
        _copy_to_local_store(url, f"bench.{kind}", copies[kind])
    os.makedirs(os.path.join(root, "out"))
    yield {"url": url, "copies": copies, "out": os.path.join(root, "out"), "raw": {}}
    shutil.rmtree(root, ignore_errors=True)


def read_local_store(directory: str) -> list:
    """Read every array of the group fully with zarr (what is timed); the arrays read."""
    group = zarr.open_group(LocalStore(directory, read_only=True), mode="r")
    return [array[...] for _, array in group.arrays()]


def raw_bytes(values: list) -> int:
    """Numbers' itemsize, text its UTF-8 length, bytes their length: as the export counts them."""
    total = 0
    for array in values:
        if array.dtype.kind in "TO":
            total += sum(len(v.encode() if isinstance(v, str) else v) for v in array.ravel().tolist())
        else:
            total += array.nbytes
    return total


@pytest.mark.parametrize("kind", STREAMS)
def test_zarr_local_store_read(benchmark, data, bench_results, kind):
    values = benchmark.pedantic(
        read_local_store, args=(data["copies"][kind],), rounds=ROUNDS, iterations=1, warmup_rounds=1
    )
    raw = data["raw"][kind] = raw_bytes(values)  # counted after the timed rounds
    del values
    record(
        benchmark,
        bench_results,
        f"zarr_read_{kind}",
        raw,
        what=f"zarr reads every array of the {kind} stream's copy on a LocalStore",
    )


@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize("kind", STREAMS)
def test_export(benchmark, data, bench_results, kind, fmt):
    path = os.path.join(data["out"], f"{kind}{FORMATS[fmt].extension}")

    def setup():
        if os.path.isdir(path):
            shutil.rmtree(path)
        elif os.path.exists(path):
            os.unlink(path)
        return (), {}

    result = benchmark.pedantic(
        lambda: export(data["url"], f"bench.{kind}", path, fmt), setup=setup, rounds=ROUNDS, iterations=1
    )
    assert result.rows == len(arrays.open_stream(data["url"], f"bench.{kind}"))
    if kind in data["raw"]:  # the baseline read the same raw bytes
        assert result.nbytes == data["raw"][kind]
    record(
        benchmark,
        bench_results,
        f"export_{kind}_{fmt}",
        result.nbytes,
        baseline=f"zarr_read_{kind}",
        what=f"export of the {kind} stream as {fmt}",
        rows=result.rows,
        file_bytes=result.file_bytes,
    )


def _flat_table(url: str, tag: str) -> pa.Table:
    """The stream's rows as one table a CSV writer takes: an inner shape as one column per element."""
    with arrays.open_stream(url, tag) as stream:
        table = stream.to_arrow()
    columns = {}
    for name in table.column_names:
        values = table.column(name)
        if pa.types.is_fixed_size_list(values.type):
            columns.update((f"{name}[{i}]", pc.list_element(values, i)) for i in range(values.type.list_size))
        else:
            columns[name] = values
    return pa.table(columns)


def _pyarrow_csv(table: pa.Table, path: str) -> None:
    with open(path, "wb") as f:
        pacsv.write_csv(table, f)
        f.flush()
        os.fsync(f.fileno())


def _fresh(path: str) -> str:
    if os.path.isdir(path):
        shutil.rmtree(path)
    elif os.path.exists(path):
        os.unlink(path)
    return path


GOALS = {"export_zarr": ("zarr_read", 0.9), "export_csv": ("pyarrow_write_csv", 0.5)}


@pytest.mark.parametrize("kind", STREAMS)
def test_goals_side_by_side(benchmark, data, kind):
    tag, out = f"bench.{kind}", data["out"]
    raw = export(data["url"], tag, _fresh(os.path.join(out, "warm.zarr")), "zarr").nbytes  # also warms the cache
    table = _flat_table(data["url"], tag)
    naive = table.set_column(0, "time", table.column("time").cast(pa.timestamp("ns")))
    rounds = 1 if benchmark.disabled else ROUNDS
    rates: dict[str, list[float]] = {}

    def export_to(fmt: str) -> float:
        path = _fresh(os.path.join(out, f"goal{FORMATS[fmt].extension}"))
        return mbps(raw, lambda: export(data["url"], tag, path, fmt))

    def run() -> None:
        rates.update(
            alternate(
                {
                    "zarr_read": lambda: mbps(raw, lambda: read_local_store(data["copies"][kind])),
                    "export_zarr": lambda: export_to("zarr"),
                    "pyarrow_write_csv": lambda: mbps(raw, lambda: _pyarrow_csv(table, _fresh(f"{out}/pa.csv"))),
                    "pyarrow_write_csv_naive_time": lambda: mbps(
                        raw, lambda: _pyarrow_csv(naive, _fresh(f"{out}/pa.csv"))
                    ),
                    "export_csv": lambda: export_to("csv"),
                },
                rounds,
            )
        )

    benchmark.pedantic(run, rounds=1, iterations=1)
    ratios = {name: per_round(rates, name, baseline) for name, (baseline, _) in GOALS.items()}
    median = {name: float(np.median(r)) for name, r in ratios.items()}
    csv_naive = float(np.median(per_round(rates, "export_csv", "pyarrow_write_csv_naive_time")))
    benchmark.extra_info.update(
        {
            "stream": kind,
            "raw_bytes": raw,
            "rounds": rounds,
            "mb_per_s": rates,
            "median_mb_per_s": {name: float(np.median(v)) for name, v in rates.items()},
            "ratios_per_round": ratios,
            "median_ratio": median,
            "goal": {name: goal for name, (_, goal) in GOALS.items()},
            "goal_met": {name: median[name] >= goal for name, (_, goal) in GOALS.items()},
            "export_csv_over_pyarrow_naive_time": csv_naive,
        }
    )
    print(f"\n{kind}: " + "; ".join(f"{n} {median[n]:.2f} (goal {g})" for n, (_, g) in GOALS.items()))
