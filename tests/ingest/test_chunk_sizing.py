"""Stream chunks sized by bytes: the shipped schemas' streams, a WAV import into a tiered store, slow streams."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from tests.conftest import with_blobs
from tests.connectors.files.test_import_formats import write_wav
from tests.neostore.blobs.conftest import bucket_of
from windvane import arrays, neostore
from windvane.cli import cli as windvane_cli
from windvane.ingest.schema import load_schemas
from windvane.ingest.streams import StreamWriters, schema_columns, write
from windvane.neostore.blobs import TIERED

SCHEMAS = load_schemas(Path(__file__).resolve().parents[2] / "schemas")
T0 = 1_764_547_200_000_000_000  # 2025-12-01T00:00:00Z


def one_record(schema_name: str) -> dict[str, list]:
    """One row of each column of a shipped schema's stream."""
    schema = next(s for s in SCHEMAS if s.name == schema_name)
    columns: dict[str, list] = {"time": [T0]}
    for column in schema_columns(schema):
        if column.dtype == "str":
            columns[column.name] = ["x"]
        else:
            columns[column.name] = [np.zeros(column.inner, dtype=column.dtype)]
    return columns


@pytest.mark.parametrize("schema_name", ["turbine_scada", "server_logs"])
def test_a_schema_without_chunk_rows_gets_chunks_of_its_row_width(sqlite_url, schema_name):
    schema = next(s for s in SCHEMAS if s.name == schema_name)
    assert schema.chunk_rows is None
    columns = schema_columns(schema)
    width = 8 + sum(c.row_bytes for c in columns)  # time, then the columns
    with neostore.open(sqlite_url) as store:
        writers = StreamWriters(store)
        with arrays.transaction(store) as tx:
            write(tx, writers, "t", schema, one_record(schema_name))
        with arrays.open_stream(store, "t") as stream:
            rows = stream["time"].chunks[0]
            assert all(stream[c.name].chunks[0] == rows for c in columns)
            assert len(stream) == 1
    assert rows == arrays.chunk_rows_for(columns) and rows % 1024 == 0
    if any(c.variable for c in columns):
        # Text values weigh what they come as: the rows stop at the cap however narrow the estimate.
        assert rows == min(arrays.VARIABLE_CHUNK_ROWS, arrays.DEFAULT_CHUNK_BYTES // width // 1024 * 1024)
    else:
        assert arrays.DEFAULT_CHUNK_BYTES / 2 < rows * width <= arrays.DEFAULT_CHUNK_BYTES
    numbers = [c for c in columns if c.dtype != "str"]
    assert numbers and all(rows * c.row_bytes >= neostore.BLOB_THRESHOLD for c in numbers)


def test_the_shipped_vibration_schema_keeps_chunks_a_few_forward_blocks_long_that_clear_the_tier(sqlite_url):
    schema = next(s for s in SCHEMAS if s.name == "turbine_vibration")
    assert schema.chunk_rows == 32768
    with neostore.open(sqlite_url) as store:
        with arrays.transaction(store) as tx:
            write(tx, StreamWriters(store), "t", schema, one_record("turbine_vibration"))
        with arrays.open_stream(store, "t") as stream:
            assert {stream[c].chunks[0] for c in ["time", *stream.columns]} == {32768}
            assert stream["samples"].dtype.itemsize * 3 * 32768 >= neostore.BLOB_THRESHOLD


def test_a_schema_that_names_chunk_rows_keeps_them(sqlite_url):
    schema = dataclasses.replace(next(s for s in SCHEMAS if s.name == "turbine_scada"), chunk_rows=1000)
    with neostore.open(sqlite_url) as store:
        with arrays.transaction(store) as tx:
            write(tx, StreamWriters(store), "t", schema, one_record("turbine_scada"))
        with arrays.open_stream(store, "t") as stream:
            assert {stream[c].chunks[0] for c in ["time", *stream.columns]} == {1000}


def test_a_wav_import_into_a_tiered_store_puts_its_values_in_the_bucket(sqlite_url, blobs_option, s3_env, tmp_path):
    """Defaults only: the chunks of a 3-channel float32 recording are large enough for the tier."""
    frames = 5 * arrays.chunk_rows_for([arrays.Column("samples", "float32", inner=(3,))]) + 1000
    t = np.arange(frames) / 25_600
    rng = np.random.default_rng(7)
    tones = np.sin(2 * np.pi * np.outer(t, [50.0, 120.0, 310.0]))
    samples = (tones + 0.1 * rng.standard_normal((frames, 3))).astype(np.float32)
    path = tmp_path / "drive.wav"
    write_wav(path, samples, 25_600)
    url = with_blobs(sqlite_url, blobs_option)
    result = CliRunner().invoke(windvane_cli, ["import", str(path), "--store", url, "--tag", "vib"])
    assert result.exit_code == 0, result.output
    with neostore.open(url) as store:
        tiered, total = store.query(
            f"SELECT SUM(CASE WHEN chunks = {TIERED} THEN size ELSE 0 END), SUM(size) FROM data"
        )[0]
    assert tiered >= 0.9 * total, (tiered, total)
    assert s3_env.objects(bucket_of(url))
    stream = arrays.open_stream(url, "vib")
    np.testing.assert_array_equal(stream["samples"][:], samples)


def test_one_row_commits_to_a_stream_of_default_chunks_store_what_they_append(sqlite_url):
    """A slow sensor: the bytes a commit adds do not grow with the rows already in its partial chunk."""
    schema = next(s for s in SCHEMAS if s.name == "turbine_scada")
    record = one_record("turbine_scada")
    with neostore.open(sqlite_url) as store:
        writers = StreamWriters(store)
        stored = []
        for i in range(400):
            with arrays.transaction(store) as tx:
                write(tx, writers, "slow", schema, {**record, "time": [T0 + i]})
            if i in (49, 99, 349, 399):
                stored.append(store.value_size())
        early, late = stored[1] - stored[0], stored[3] - stored[2]
        assert late <= early * 1.2, (early, late)  # a rewrite of the partial chunk grows with each row
        with arrays.open_stream(store, "slow") as stream:
            assert stream["time"].chunks[0] > 400 and len(stream) == 400
            assert stream["time"][:].tolist() == [T0 + i for i in range(400)]
