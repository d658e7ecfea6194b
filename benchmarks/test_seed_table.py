"""The seed's engine table at size: the same ``SEED_BYTES`` (10 GiB) imported into each engine windvane runs on.

NEO's seed imported 126 GB (120 GB raw, 26.2 GB compressed, 23.7 GB deduplicated) into MariaDB with
TokuDB, InnoDB and RocksDB and reported for each the time and the bytes on disk. This benchmark does the
same with windvane's own import (:func:`ingest.imports.import_source`, as ``windvane import``), into:

- ``sqlite``: a SQLite file (WAL, ``synchronous=FULL``);
- ``innodb``: a private mariadbd with windvane's shipped configuration;
- ``innodb_page_compressed``: the same with ``innodb_compression_default=ON`` (every table page-compressed,
  ``innodb_compression_algorithm`` as set below);
- ``myrocks_zstd``: the same server with MyRocks, its column family compressed with ZSTD, the store
  created with ``&engine=rocksdb``.

The data, generated once (untimed) in ``WINDVANE_BENCH_SEED_DIR`` (default a temporary directory under
/tmp): half sensor Parquet files (time and 8 float32 channels of quantised tones, drift and noise, as
:mod:`sensor_data` makes them) and half vibration WAV files (3 int16 channels at 25.6 kHz), in files of
``FILE_BYTES``. About 15% of each file's blocks of one stream chunk repeat an earlier block's values (a
machine that idles sends the same samples), aligned with the chunks the import makes, so that
deduplication has what the seed's data gave it; times never repeat.

Recorded for each engine in ``extra_info``: the import's seconds and MB/s (raw bytes of the files'
samples and times a second); the bytes on disk (once the engine wrote what it held in memory) after the
import, after ``store pack`` of all history
but the last state (``reclaim``) and after the engine's own rewrite (pack's ``vacuum``: SQLite VACUUM,
``OPTIMIZE TABLE``, which compacts MyRocks); and the store's own count of the values: raw bytes of the
last state (``raw_bytes``), those bytes deduplicated (``distinct_bytes``) and deduplicated and
compressed (``stored_bytes``), and the ratios raw/stored. Disk bytes are the file system's: the SQLite
file and its log, the database's directory (InnoDB), the ``#rocksdb`` directory (MyRocks, one store per
server).

Not in CI (10 GiB per engine takes a long time):

    .venv/bin/python -m pytest benchmarks/test_seed_table.py -p no:cacheprovider \\
        --benchmark-enable --benchmark-only --benchmark-json=/tmp/seed.json

``WINDVANE_BENCH_SEED_BYTES=1G`` makes a smaller run; without ``--benchmark-enable`` it imports 32 MiB
into each engine as a smoke test.
"""

from __future__ import annotations

import os
import shutil
import struct
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sensor_data import parse_size

from tests.mariadb import stop_test_server
from windvane import arrays, neostore
from windvane.connectors.files import ReaderOptions
from windvane.connectors.files.formats import format_for
from windvane.ingest import imports
from windvane.ops.mariadb_server import MariaDBServer, rocksdb_installed

SEED_BYTES = parse_size(os.environ.get("WINDVANE_BENCH_SEED_BYTES", "10G"))
SMOKE_BYTES = 32 << 20
FILE_BYTES = 512 << 20
DUPLICATE_SHARE = 0.15
T0 = 1_700_000_000_000_000_000

SENSOR_CHANNELS, SENSOR_RATE = 8, 1000.0
WAV_CHANNELS, WAV_RATE = 3, 25_600

#: What each engine's server adds to windvane's shipped configuration (None: SQLite, no server).
ENGINES: dict[str, dict[str, str | None] | None] = {
    "sqlite": None,
    "innodb": {},
    "innodb_page_compressed": {"innodb_compression_default": "ON", "innodb_compression_algorithm": "zlib"},
    "myrocks_zstd": {
        "loose-rocksdb_default_cf_options": "compression=kZSTDNotFinalCompression;"
        "bottommost_compression=kZSTDNotFinalCompression",
    },
}


def _sensor_columns() -> list[arrays.Column]:
    return [arrays.Column(f"v{c}", "float32") for c in range(SENSOR_CHANNELS)]


def _block_rows(columns: list[arrays.Column]) -> int:
    """Rows of one chunk of the stream the import makes of these columns: the unit that dedups."""
    return arrays.chunk_rows_for(columns)


def _repeats(blocks: int, seed: int) -> dict[int, int]:
    """Block -> the earlier block whose values it repeats, for about :data:`DUPLICATE_SHARE` of ``blocks``."""
    rng = np.random.default_rng(seed)
    return {i: int(rng.integers(0, i)) for i in range(1, blocks) if rng.random() < DUPLICATE_SHARE}


def _sensor_file(path: Path, first_row: int, rows: int, seed: int) -> None:
    block = _block_rows(_sensor_columns())
    rng = np.random.default_rng(seed)
    freq = rng.uniform(0.05, 120.0, SENSOR_CHANNELS)
    amp = rng.uniform(0.5, 20.0, SENSOR_CHANNELS)
    made: dict[int, np.ndarray] = {}
    repeats = _repeats(-(-rows // block), seed)
    schema = pa.schema(
        [("time", pa.timestamp("ns", tz="UTC")), *((f"v{c}", pa.float32()) for c in range(SENSOR_CHANNELS))]
    )
    with pq.ParquetWriter(path, schema, compression="none") as writer:
        for b, start in enumerate(range(0, rows, block)):
            n = min(block, rows - start)
            if b in repeats and len(made.get(repeats[b], ())) == n:
                values = made[repeats[b]]
            else:
                t = (first_row + start + np.arange(n))[:, None] / SENSOR_RATE
                signal = amp * np.sin(2 * np.pi * freq * t) + rng.normal(0, 0.02, (n, SENSOR_CHANNELS))
                values = (np.rint(signal / 1e-3) * 1e-3).astype("<f4")
                if len(made) < 64:  # earlier blocks to repeat, bounded
                    made[b] = values
            index = first_row + start + np.arange(n, dtype=np.int64)
            columns = {"time": pa.array(T0 + index * 1_000_000, pa.timestamp("ns", tz="UTC"))}
            columns.update({f"v{c}": values[:, c] for c in range(SENSOR_CHANNELS)})
            writer.write_table(pa.table(columns, schema=schema))


def _wav_file(path: Path, frames: int, seed: int) -> None:
    block = _block_rows([arrays.Column("samples", "int16", inner=(WAV_CHANNELS,))])
    rng = np.random.default_rng(seed)
    made: dict[int, np.ndarray] = {}
    repeats = _repeats(-(-frames // block), seed)
    fmt = struct.pack("<HHIIHH", 1, WAV_CHANNELS, WAV_RATE, WAV_RATE * 2 * WAV_CHANNELS, 2 * WAV_CHANNELS, 16)
    data_bytes = frames * 2 * WAV_CHANNELS
    with open(path, "wb") as f:
        f.write(b"RIFF" + struct.pack("<I", 4 + 8 + len(fmt) + 8 + data_bytes) + b"WAVE")
        f.write(b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", data_bytes))
        for b, start in enumerate(range(0, frames, block)):
            n = min(block, frames - start)
            if b in repeats and len(made.get(repeats[b], ())) == n:
                samples = made[repeats[b]]
            else:
                t = (start + np.arange(n))[:, None] / WAV_RATE
                tone = 3000 * np.sin(2 * np.pi * np.array([29.5, 59.0, 141.0]) * t)
                samples = np.rint(tone + rng.normal(0, 200, (n, WAV_CHANNELS))).astype("<i2")
                if len(made) < 64:
                    made[b] = samples
            samples.tofile(f)


@pytest.fixture(scope="module")
def seed_files(request) -> Iterator[list[Path]]:
    """The data's files, half sensor Parquet and half vibration WAV, generated once (untimed)."""
    full = request.config.getoption("benchmark_enable", False)
    total = SEED_BYTES if full else SMOKE_BYTES
    given = os.environ.get("WINDVANE_BENCH_SEED_DIR")
    root = Path(given) if given else Path(tempfile.mkdtemp(prefix="wvb-seed-", dir="/tmp"))
    root.mkdir(parents=True, exist_ok=True)
    per_file = min(FILE_BYTES, total // 2)
    paths = []
    for k in range(max(1, total // 2 // per_file)):
        sensor = root / f"sensor-{k:03d}-{total}.parquet"
        rows = per_file // (8 + 4 * SENSOR_CHANNELS)
        if not sensor.exists():
            _sensor_file(sensor, k * rows, rows, seed=k)
        wav = root / f"vibration-{k:03d}-{total}.wav"
        if not wav.exists():
            _wav_file(wav, per_file // (8 + 2 * WAV_CHANNELS), seed=1000 + k)
        paths += [sensor, wav]
    yield paths
    if not given:
        shutil.rmtree(root, ignore_errors=True)


def _du(path: Path) -> int:
    """Bytes the file system gives ``path`` (a file, or a directory's files)."""
    if path.is_file():
        return path.stat().st_blocks * 512
    return sum(p.stat().st_blocks * 512 for p in path.rglob("*") if p.is_file())


class Engine:
    """A fresh store on one engine, and where its bytes lie on disk."""

    def __init__(self, name: str, root: Path):
        self.name = name
        self.settings = ENGINES[name]
        self.server: MariaDBServer | None = None
        if self.settings is None:
            self.url = f"sqlite:///{root / 'store.db'}"
            self.files = [root / "store.db", root / "store.db-wal"]
            return
        if name.startswith("myrocks") and not rocksdb_installed():
            pytest.skip("MyRocks is not installed (Debian: mariadb-plugin-rocksdb)")
        self.server = MariaDBServer(root / "db", overrides=self.settings)
        url = self.server.start(timeout=300)  # its database "windvane", made for the store
        rocksdb = name.startswith("myrocks")
        self.url = url + ("&" if "?" in url else "?") + "engine=rocksdb" if rocksdb else url
        self.files = [root / "db" / ("#rocksdb" if rocksdb else "windvane")]

    def disk_bytes(self) -> int:
        """The bytes on disk once the engine has written what it holds in memory."""
        self._settle()
        return sum(_du(p) for p in self.files if p.exists())

    def _settle(self) -> None:
        """Have MariaDB write its dirty pages (InnoDB; a page-compressed file is sparse until they are) or
        its memtables (MyRocks) now: the disk otherwise shows what the engine has not written yet."""
        if self.server is None:
            return  # SQLite: every commit is in the file or its log already
        conn = self.server.connect()
        try:
            cur = conn.cursor()
            if self.name.startswith("myrocks"):
                cur.execute("SET GLOBAL rocksdb_force_flush_memtable_now = ON")
                return
            cur.execute("SET GLOBAL innodb_max_dirty_pages_pct_lwm = 0")
            cur.execute("SET GLOBAL innodb_max_dirty_pages_pct = 0")
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline:
                cur.execute("SHOW GLOBAL STATUS LIKE 'Innodb_buffer_pool_pages_dirty'")
                if int(cur.fetchone()[1]) == 0:
                    return
                time.sleep(0.5)
            raise AssertionError("InnoDB did not write its dirty pages within 10 minutes")
        finally:
            conn.close()

    def stop(self) -> None:
        if self.server is not None:
            stop_test_server(self.server, remove=True)


def _import_all(url: str, paths: list[Path]) -> int:
    """Import every file as ``windvane import`` does, each into a stream of its own; the raw bytes imported."""
    raw = 0
    with neostore.open(url) as store:
        for path in paths:
            reader = format_for(str(path)).make(str(path), ReaderOptions(start=T0))
            tag = f"seed.{path.stem.replace('-', '_')}"
            imports.import_source(
                store,
                tag,
                reader,
                source_id=imports.source_id_for(str(path)),
                identity=imports.fingerprint(str(path)),
                content=imports.content_hash(str(path)),
                name=str(path),
            )
            with arrays.open_stream(store, tag) as stream:
                raw += sum(stream[c].nbytes for c in ["time", *stream.columns])
    return raw


@pytest.mark.timeout(6 * 3600)
@pytest.mark.parametrize("engine", list(ENGINES))
def test_seed_table(benchmark, seed_files, engine, tmp_path):
    root = Path(tempfile.mkdtemp(prefix=f"wvb-seed-{engine}-", dir="/tmp"))
    store_engine = Engine(engine, root)
    try:
        started = time.monotonic()
        raw = benchmark.pedantic(lambda: _import_all(store_engine.url, seed_files), rounds=1, iterations=1)
        seconds = time.monotonic() - started
        after_import = store_engine.disk_bytes()
        with neostore.open(store_engine.url) as store:
            last = store.last_transaction()
            store.pack(last, reclaim=True)
            after_pack = store_engine.disk_bytes()
            store.pack(last, reclaim=True, vacuum=True)
            after_rewrite = store_engine.disk_bytes()
            usage = store.value_usage()
            supported = None
            if store_engine.server is not None and engine.startswith("myrocks"):
                conn = store_engine.server.connect()
                try:
                    cur = conn.cursor()
                    cur.execute("SHOW GLOBAL VARIABLES LIKE 'rocksdb_supported_compression_types'")
                    supported = cur.fetchone()[1]
                finally:
                    conn.close()
        benchmark.extra_info.update(
            {
                "engine": engine,
                "settings": store_engine.settings,
                "rocksdb_supported_compression_types": supported,
                "files": len(seed_files),
                "file_bytes": sum(p.stat().st_size for p in seed_files),
                "raw_bytes": raw,
                "seconds": seconds,
                "mb_per_s": raw / seconds / 1e6,
                "disk_after_import": after_import,
                "disk_after_pack": after_pack,
                "disk_after_rewrite": after_rewrite,
                "referenced_bytes": usage.referenced_bytes,
                "distinct_bytes": usage.value_bytes,
                "stored_bytes": usage.stored_bytes,
                "raw_over_stored": raw / max(usage.stored_bytes, 1),
                "raw_over_disk": raw / max(after_rewrite, 1),
            }
        )
        assert usage.stored_bytes < raw
    finally:
        store_engine.stop()
        shutil.rmtree(root, ignore_errors=True)
