"""Streams in a store with a blob tier and default settings: what lands in the bucket, and how fast.

A stream's chunks are sized by bytes (``arrays.DEFAULT_CHUNK_BYTES`` of raw
rows) and the tier's default threshold (``neostore.BLOB_THRESHOLD``) is set
from that size; nothing here names ``chunk_rows`` or ``blob_threshold``. One
versitygw (:mod:`s3_bench`) and SQLite (WAL, the store's defaults).

1. import: a WAV of ``WINDVANE_BENCH_TIER_BYTES`` (64 MiB) of 3-channel
   float32 at 25.6 kHz (tones with noise) by ``windvane import`` (click's
   CliRunner, in this process) into ``sqlite:///...?blobs=s3://...`` and
   into plain SQLite, alternating. Recorded: the share of the stream's value
   bytes held in the bucket (goal >= 0.9: asserted, it is a count, not a
   timing), the bytes in the bucket and in the SQLite file, and each
   import's MB/s with the tiered one's ratio to SQLite's (after one untimed
   import, which loads the command's modules).
2. read: the tiered stream's ``samples`` read whole (the column whose
   chunks are the bucket's objects; through one ``arrays.open_stream`` with
   no chunk cache: fetched, hash-checked, decoded into the result) against
   raw ranged GETs (``obstore.get_range``) of the bucket's objects, 16 at
   once, their bodies dropped, alternating; goal >= 0.8. Also ``time`` and
   ``samples`` together (``time`` from SQLite), as a reader of the whole
   stream sees it. MB/s of the objects' bytes throughout.
3. Forward: the same bytes of vibration blocks (4 blocks of 25,600 x 3
   float32 a chunk, as ``benchmarks/test_ingest.py`` sends them, 4
   connections, acknowledged after the durable commit) into ``windvane
   serve`` with a vibration schema that names no ``chunk_rows``, on a fresh
   ``sqlite+s3`` store and a fresh SQLite store in pairs of rounds, the
   order alternating. Goal: the median of the pairs' ratios >= 0.9.
4. What MiB chunks cost a bulk writer: the same Forward load into plain
   SQLite with the default chunks against 32,768-row chunks (the size
   whose chunks every acknowledged chunk fills), pairs alternating; no
   goal, the price recorded.

Run::

    .venv/bin/python -m pytest benchmarks/test_tiered_streams.py -p no:cacheprovider \\
        --benchmark-enable --benchmark-only -s --benchmark-json=/tmp/tiered.json

``WINDVANE_BENCH_TIER_BYTES=16MiB`` scales it down; ``WINDVANE_BENCH_ROUNDS`` (3) sets the rounds.
"""

from __future__ import annotations

import os
import shutil
import struct
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import obstore
import pytest
from click.testing import CliRunner
from ingest_load import forward_chunk, forward_load, vibration_record
from s3_bench import CONCURRENCY, ROUNDS, alternate, mbps, per_round, raw_store, run_all, s3_server
from sensor_data import parse_size
from test_ingest import VIB_BLOCKS_PER_CHUNK as BLOCKS_PER_CHUNK
from test_ingest import VIB_CHANNELS as CHANNELS
from test_ingest import VIB_SAMPLES as BLOCK_SAMPLES
from test_ingest import VIB_SCHEMA as SCHEMA

from tests.s3 import S3Server
from tests.serve_process import Serve
from windvane import arrays, neostore
from windvane.cli import cli as windvane_cli
from windvane.neostore.blobs import TIERED

pytestmark = pytest.mark.timeout(7200)
TIER_BYTES = parse_size(os.environ.get("WINDVANE_BENCH_TIER_BYTES", str(64 << 20)))
RATE = 25_600
TAG = "bench.vibration"  # VIB_SCHEMA's


class Work:
    """The S3 server, a work directory, and fresh stores (tiered or not) on request."""

    def __init__(self, server: S3Server):
        self.server = server
        self.dir = Path(tempfile.mkdtemp(prefix="wvb-tiered-", dir="/tmp"))

    def store(self, tiered: bool) -> tuple[str, str | None, Path]:
        """``(url, bucket or None, SQLite file)`` of a fresh store."""
        path = self.dir / f"{uuid.uuid4().hex[:8]}.db"
        url = f"sqlite:///{path}"
        if not tiered:
            return url, None, path
        bucket = self.server.new_bucket("tiered")
        return f"{url}?blobs=s3://{bucket}/store&endpoint={self.server.endpoint}", bucket, path

    def drop(self, bucket: str | None, path: Path) -> None:
        if bucket is not None:
            shutil.rmtree(self.server.root / bucket, ignore_errors=True)
        for f in path.parent.glob(path.name + "*"):
            f.unlink()

    def bucket_bytes(self, bucket: str) -> int:
        return sum(p.stat().st_size for p in self.server.objects(bucket))


@pytest.fixture(scope="module")
def work() -> Iterator[Work]:
    with s3_server() as server:
        w = Work(server)
        try:
            yield w
        finally:
            shutil.rmtree(w.dir, ignore_errors=True)


def side_by_side(
    benchmark, baseline: tuple[str, Callable[[], float]], measured: tuple[str, Callable[[], float]], rounds: int
) -> tuple[dict[str, list[float]], list[float]]:
    """The two targets (MB/s) alternating, under the benchmark's clock: the rates by name and each round's
    measured / baseline."""
    rates: dict[str, list[float]] = {}
    benchmark.pedantic(lambda: rates.update(alternate(dict([baseline, measured]), rounds)), rounds=1, iterations=1)
    return rates, per_round(rates, measured[0], baseline[0])


def vibration_chunks() -> tuple[list[tuple[bytes, bytes]], int]:
    """``TIER_BYTES`` of vibration blocks as Forward chunks, and the rows they make."""
    blocks = max(BLOCKS_PER_CHUNK, TIER_BYTES // (BLOCK_SAMPLES * CHANNELS * 4))
    chunks = [
        forward_chunk(TAG, first, BLOCKS_PER_CHUNK, record=lambda i: vibration_record(i, BLOCK_SAMPLES, CHANNELS))
        for first in range(0, blocks, BLOCKS_PER_CHUNK)
    ]
    return chunks, len(chunks) * BLOCKS_PER_CHUNK * BLOCK_SAMPLES


def forward_into(work: Work, url: str, schemas: Path, chunks: list[tuple[bytes, bytes]], rows: int) -> float:
    """Seconds to send ``chunks`` to a fresh ``windvane serve`` on ``url`` and have them acknowledged."""
    serve = Serve(url, schemas, work.dir / "serve.log", http=None)
    try:
        result = forward_load(serve.forward_port, chunks, BLOCKS_PER_CHUNK)
    finally:
        assert serve.stop() == 0, serve.log()
    assert not result.errors, result.errors[:3]
    with arrays.open_stream(url, TAG) as stream:
        assert len(stream) == rows
    return result.seconds


def schemas_dir(work: Work, name: str, text: str) -> Path:
    where = work.dir / name
    where.mkdir(exist_ok=True)
    (where / "vibration.toml").write_text(text)
    return where


def write_wav(path: Path, nbytes: int) -> int:
    """A float32 WAV of about ``nbytes`` of samples (three tones with noise); its frames."""
    frames = nbytes // (4 * CHANNELS)
    rng = np.random.default_rng(20261207)
    t = np.arange(frames) / RATE
    samples = np.sin(2 * np.pi * np.outer(t, [50.0, 120.0, 310.0])) + 0.1 * rng.standard_normal((frames, CHANNELS))
    data = samples.astype("<f4").tobytes()
    block = 4 * CHANNELS
    fmt = struct.pack("<HHIIHH", 3, CHANNELS, RATE, RATE * block, block, 32)
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", len(data)) + data
    path.write_bytes(b"RIFF" + struct.pack("<I", len(body)) + body)
    return frames


def import_wav(url: str, wav: Path) -> float:
    started = time.perf_counter()
    result = CliRunner().invoke(windvane_cli, ["import", str(wav), "--store", url, "--tag", TAG])
    seconds = time.perf_counter() - started
    assert result.exit_code == 0, result.output
    return wav.stat().st_size / seconds / 1e6


def tiered_share(url: str) -> tuple[int, int]:
    """``(value bytes in the bucket, value bytes in all)`` of the store."""
    with neostore.open(url) as store:
        tiered, total = store.query(
            f"SELECT SUM(CASE WHEN chunks = {TIERED} THEN size ELSE 0 END), SUM(size) FROM data"
        )[0]
    return int(tiered or 0), int(total)


def test_vibration_wav_into_a_tiered_store(benchmark, work, bench_results):
    wav = work.dir / "drive.wav"
    frames = write_wav(wav, TIER_BYTES)
    rounds = 1 if benchmark.disabled else ROUNDS
    shares: list[dict] = []
    kept: list[tuple[str, str, Path]] = []  # the first tiered store: the reads read it

    def one(tiered: bool) -> float:
        url, bucket, path = work.store(tiered)
        rate = import_wav(url, wav)
        if tiered:
            in_bucket, total = tiered_share(url)
            shares.append(
                {
                    "value_bytes_in_bucket": in_bucket,
                    "value_bytes": total,
                    "share": in_bucket / total,
                    "bucket_file_bytes": work.bucket_bytes(bucket),
                    "sqlite_file_bytes": sum(f.stat().st_size for f in path.parent.glob(path.name + "*")),
                }
            )
            if not kept and bucket is not None:
                kept.append((url, bucket, path))
                return rate
        work.drop(bucket, path)
        return rate

    warm_url, _, warm_path = work.store(False)
    import_wav(warm_url, wav)
    work.drop(None, warm_path)
    rates, ratios = side_by_side(
        benchmark, ("import_sqlite", lambda: one(False)), ("import_sqlite_s3", lambda: one(True)), rounds
    )
    info = {
        "wav_bytes": wav.stat().st_size,
        "frames": frames,
        "chunk_rows": arrays.chunk_rows_for([arrays.Column("samples", "float32", inner=(CHANNELS,))]),
        "blob_threshold": neostore.BLOB_THRESHOLD,
        "rounds": rounds,
        "mb_per_s": rates,
        "import_s3_over_sqlite_per_round": ratios,
        "import_s3_over_sqlite": float(np.median(ratios)),
        "stores": shares,
        "share_in_bucket": min(s["share"] for s in shares),
        "goal_share": 0.9,
    }
    benchmark.extra_info.update(info)
    bench_results["tiered_vibration_import"] = info
    print(
        f"tiered vibration import: {info['share_in_bucket']:.3f} of the value bytes in the bucket; "
        f"import sqlite+s3 / sqlite {info['import_s3_over_sqlite']:.2f}"
    )
    assert info["share_in_bucket"] >= 0.9, shares

    # 2. reads of that stream against raw GETs of its objects
    url, bucket, path = kept[0]
    raw = raw_store(work.server, bucket, "store")
    objects = [(m["path"], m["size"]) for batch in obstore.list(raw) for m in batch]
    object_bytes = sum(size for _, size in objects)

    reader = arrays.open_stream(url, TAG, cache_bytes=0)  # no cache: every round reads the objects again

    def read_samples() -> float:
        got: list[int] = []
        rate = mbps(object_bytes, lambda: got.append(reader["samples"][:].shape[0]))
        assert got == [frames]
        return rate

    def read_stream() -> float:
        got: list[int] = []
        rate = mbps(object_bytes, lambda: got.extend([reader["time"][:].size, reader["samples"][:].shape[0]]))
        assert got == [frames, frames]
        return rate

    def read_raw() -> float:
        def get(i: int) -> None:
            key, size = objects[i]
            assert len(obstore.get_range(raw, key, start=0, end=size)) == size

        return mbps(object_bytes, lambda: run_all(get, len(objects)))

    read_stream()  # untimed: first touches of memory and connections fall on neither side
    read_raw()
    reads = alternate(
        {"read_samples": read_samples, "read_raw_get_range": read_raw, "read_stream_with_time": read_stream}, rounds
    )
    reader.close()
    read_ratios = per_round(reads, "read_samples", "read_raw_get_range")
    read_info = {
        "objects": len(objects),
        "object_bytes": object_bytes,
        "concurrency": CONCURRENCY,
        "mb_per_s": reads,
        "read_over_raw_per_round": read_ratios,
        "read_over_raw": float(np.median(read_ratios)),
        "read_with_time_over_raw": float(np.median(per_round(reads, "read_stream_with_time", "read_raw_get_range"))),
        "goal_ratio": 0.8,
    }
    benchmark.extra_info["read"] = read_info
    bench_results["tiered_vibration_read"] = read_info
    print(
        f"tiered stream read / raw GETs: samples {read_info['read_over_raw']:.2f}, "
        f"with time {read_info['read_with_time_over_raw']:.2f} ({len(objects)} objects)"
    )
    work.drop(bucket, path)


def test_vibration_forward_into_a_tiered_store(benchmark, work, bench_results):
    chunks, rows = vibration_chunks()
    nbytes = rows * CHANNELS * 4
    schemas = schemas_dir(work, "schemas", SCHEMA)
    pairs = 1 if benchmark.disabled else 2 * ROUNDS
    in_bucket: list[int] = []

    def one(tiered: bool) -> float:
        url, bucket, path = work.store(tiered)
        seconds = forward_into(work, url, schemas, chunks, rows)
        if bucket is not None:
            in_bucket.append(work.bucket_bytes(bucket))
        work.drop(bucket, path)
        return nbytes / seconds / 1e6

    rates, ratios = side_by_side(
        benchmark, ("forward_sqlite", lambda: one(False)), ("forward_sqlite_s3", lambda: one(True)), pairs
    )
    info = {
        "bytes": nbytes,
        "chunks": len(chunks),
        "pairs": pairs,
        "mb_per_s": rates,
        "s3_over_sqlite_per_pair": ratios,
        "s3_over_sqlite": float(np.median(ratios)),
        "bucket_file_bytes": in_bucket,
        "goal_ratio": 0.9,
    }
    benchmark.extra_info.update(info)
    bench_results["tiered_vibration_forward"] = info
    print(f"Forward vibration sqlite+s3 / sqlite: {info['s3_over_sqlite']:.2f}")
    assert all(in_bucket), "no value reached the blob tier"


def test_vibration_forward_default_chunks_against_small_ones(benchmark, work, bench_results):
    """What MiB chunks cost a bulk writer on plain SQLite: an acknowledged chunk (1.2 MB) fills no default
    chunk, so its rows go to the row log first and into their chunk with a later commit; 32,768-row
    chunks fill in every commit."""
    chunks, rows = vibration_chunks()
    nbytes = rows * CHANNELS * 4
    default = schemas_dir(work, "schemas", SCHEMA)
    small = schemas_dir(work, "schemas-small", SCHEMA.replace("[vibration]", "chunk_rows = 32768\n[vibration]"))
    pairs = 1 if benchmark.disabled else 2 * ROUNDS

    def one(schemas: Path) -> float:
        url, _, path = work.store(False)
        seconds = forward_into(work, url, schemas, chunks, rows)
        work.drop(None, path)
        return nbytes / seconds / 1e6

    rates, ratios = side_by_side(
        benchmark, ("forward_32768_rows", lambda: one(small)), ("forward_default_chunks", lambda: one(default)), pairs
    )
    info = {"bytes": nbytes, "pairs": pairs, "mb_per_s": rates, "default_over_small_per_pair": ratios}
    info["default_over_small"] = float(np.median(ratios))
    benchmark.extra_info.update(info)
    bench_results["vibration_forward_default_chunks"] = info
    print(f"Forward vibration on SQLite, default chunks / 32,768 rows: {info['default_over_small']:.2f}")
