"""``windvane mount`` benchmarks: reading a column through its memory-mapped file beside reading it without FUSE.

One stream ``bench`` with a float32 column ``x`` of 8 channels (rows x 8,
2 MiB chunks of 65,536 rows), ``TOTAL_BYTES`` of it (4 GiB by default,
``WINDVANE_BENCH_MOUNT_BYTES``), made of the first ``DISTINCT`` blocks of
:mod:`array_data` over and over so that the store keeps a few of them
(deduplicated values) and the data is made in seconds. Every chunk is still
decoded and hash-checked on its own. zarr's ``LocalStore`` holds the same
chunks with the same codec (blosc zstd level 3, byte shuffle), one file each.

Per round, in an order that rotates from round to round:

- ``mapping``: ``np.add.reduce`` over the whole ``np.memmap`` of
  ``@<tid>/bench/x``, served by a mount started for the round (its caches
  empty) after the kernel's page cache is dropped, the store's file read
  back into it (untimed) so that the store is as warm as for the others.
- ``blocks``: the same sum over ``BigArray.blocks()`` of a freshly opened
  stream (after the same dropping and warming).
- ``zarr``: the same sum over the LocalStore array's chunks, chunk by chunk
  (after the same dropping and warming of its directory).

After the mapping's cold round, a second process maps the same file and sums
it (warm: the page cache the first read filled) and says how long it took.
Then, with the page cache dropped again and a fresh mount, ``PAGES`` random
4 KiB pages are touched one by one: the latency of each.

Goals: mapping >= 0.8 of blocks; the warm second process >= 5x the cold read.
Ratios and latencies go into ``benchmark.extra_info``. Run (as root, with
``/dev/fuse``):

    .venv/bin/python -m pytest benchmarks/test_mount.py -p no:cacheprovider \\
        --benchmark-enable --benchmark-only --benchmark-json=/tmp/mount.json
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import array_data
import numpy as np
import pytest
import zarr
from sensor_data import parse_size
from zarr.codecs import BloscCodec

from windvane import arrays, neostore

pytestmark = [
    pytest.mark.skipif(
        not os.path.exists("/dev/fuse") or os.geteuid() != 0, reason="needs /dev/fuse and root (to drop the page cache)"
    ),
    pytest.mark.timeout(3600),  # making 4 GiB twice and reading it a dozen times outlasts the suite's timeout
]

TOTAL_BYTES = parse_size(os.environ.get("WINDVANE_BENCH_MOUNT_BYTES", "4G"))
ROUNDS = int(os.environ.get("WINDVANE_BENCH_ROUNDS", "3"))
DISTINCT = 16
ROWS = array_data.BLOCK_ROWS
PAGES = 2000
SLAB = 32  # blocks appended per commit (64 MiB)

SECOND_READER = """
import json, sys, time
import numpy as np
meta = json.load(open(sys.argv[1] + ".json"))
m = np.memmap(sys.argv[1], dtype=meta["dtype"], mode="r", shape=tuple(meta["shape"]))
start = time.perf_counter()
total = float(np.add.reduce(m.reshape(-1), dtype="float64"))
print(json.dumps({"seconds": time.perf_counter() - start, "sum": total}))
"""


def blocks_count() -> int:
    return max(1, TOTAL_BYTES // array_data.BLOCK_BYTES)


def block(index: int) -> np.ndarray:
    return array_data.block(index % DISTINCT)


@pytest.fixture(scope="module")
def workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="wvm-", dir="/var/tmp") as root:
        yield Path(root)


@pytest.fixture(scope="module")
def data(workdir: Path) -> dict[str, object]:
    """The stream in a SQLite store and the same chunks in a LocalStore, made once; the expected sum."""
    url = f"sqlite:///{workdir / 'store.db'}"
    count = blocks_count()
    with neostore.open(url) as store:
        stream = arrays.create_stream(
            store, "bench", [arrays.Column("x", "float32", inner=(array_data.CHANNELS,))], chunk_rows=ROWS
        )
        for first in range(0, count, SLAB):
            slab = np.concatenate([block(i) for i in range(first, min(first + SLAB, count))])
            start = first * ROWS
            stream.append({"time": np.arange(start, start + len(slab), dtype="int64"), "x": slab})
        stream.close()
        tid = store.last_transaction()
    local = zarr.create_array(
        zarr.storage.LocalStore(workdir / "zarr"),
        name="x",
        shape=(count * ROWS, array_data.CHANNELS),
        dtype=array_data.DTYPE,
        chunks=(ROWS, array_data.CHANNELS),
        compressors=BloscCodec(cname="zstd", clevel=3, shuffle="shuffle", typesize=4),
        fill_value=0.0,
        zarr_format=3,
    )
    for index in range(count):
        local[index * ROWS : (index + 1) * ROWS] = block(index)
    expected = sum(float(np.add.reduce(block(i).reshape(-1), dtype="float64")) for i in range(DISTINCT)) * (
        count // DISTINCT
    ) + sum(float(np.add.reduce(block(i).reshape(-1), dtype="float64")) for i in range(count % DISTINCT))
    return {"url": url, "tid": tid, "expected": expected, "count": count}


def drop_page_cache(*warm: Path) -> None:
    """Drop the kernel's page cache, then read ``warm`` (files, or every file under a directory) back into it."""
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("1\n")
    for root in warm:
        for path in [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file()):
            with open(path, "rb") as f:
                while f.read(16 << 20):
                    pass


class Mount:
    """``windvane mount`` of the benchmark's store at ``directory``, for one round."""

    def __init__(self, url: str, directory: Path):
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self.proc = subprocess.Popen([sys.executable, "-m", "windvane", "mount", url, str(directory)])
        deadline = time.monotonic() + 60
        while not (directory / "head").exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the mount did not come up")
            time.sleep(0.05)

    def file(self, tid: bytes) -> Path:
        return self.directory / f"@{tid.hex()}" / "bench" / "x"

    def close(self) -> None:
        subprocess.run(["umount", str(self.directory)], check=False)
        self.proc.wait(60)


def mapped(path: Path) -> np.memmap:
    meta = json.loads(Path(f"{path}.json").read_text())
    return np.memmap(path, dtype=meta["dtype"], mode="r", shape=tuple(meta["shape"]))


def sum_mapping(path: Path) -> float:
    return float(np.add.reduce(mapped(path).reshape(-1), dtype="float64"))


def sum_blocks(url: str) -> float:
    with arrays.open_stream(url, "bench") as stream:
        return sum(float(np.add.reduce(b.reshape(-1), dtype="float64")) for _, b in stream["x"].blocks())


def sum_zarr(path: Path) -> float:
    local = zarr.open_array(zarr.storage.LocalStore(path, read_only=True), path="x")
    rows = local.shape[0]
    return sum(
        float(np.add.reduce(local[start : start + ROWS].reshape(-1), dtype="float64")) for start in range(0, rows, ROWS)
    )


def test_mount_sequential_and_random_reads(benchmark, data, workdir):
    """Cold sequential read through the mapping beside blocks() and LocalStore; the warm second process; random
    4 KiB pages."""
    url, tid, expected = str(data["url"]), bytes(data["tid"]), float(data["expected"])  # type: ignore[arg-type]
    nbytes = int(data["count"]) * array_data.BLOCK_BYTES  # type: ignore[call-overload]
    store_file, zarr_dir = workdir / "store.db", workdir / "zarr"
    seconds: dict[str, list[float]] = {"mapping": [], "blocks": [], "zarr": []}
    warm: list[float] = []

    def timed(name: str, run: Callable[[], float]) -> None:
        start = time.perf_counter()
        total = run()
        seconds[name].append(time.perf_counter() - start)
        assert total == pytest.approx(expected, rel=1e-9), name

    def mapping_round() -> None:
        mount = Mount(url, workdir / "mnt")
        try:
            drop_page_cache(store_file)
            timed("mapping", lambda: sum_mapping(mount.file(tid)))
            second = subprocess.run(
                [sys.executable, "-c", SECOND_READER, str(mount.file(tid))],
                capture_output=True,
                text=True,
                check=True,
            )
            warm.append(json.loads(second.stdout)["seconds"])
        finally:
            mount.close()

    def blocks_round() -> None:
        drop_page_cache(store_file)
        timed("blocks", lambda: sum_blocks(url))

    def zarr_round() -> None:
        drop_page_cache(zarr_dir)
        timed("zarr", lambda: sum_zarr(zarr_dir))

    order = [mapping_round, blocks_round, zarr_round]
    for round_index in range(ROUNDS):
        shift = round_index % len(order)
        for run in order[shift:] + order[:shift]:
            run()

    latencies = random_page_latencies(url, tid, workdir / "mnt", nbytes)
    # The benchmark's own timing: one more cold read through the mapping, for pytest-benchmark's table.
    benchmark.pedantic(mapping_round, rounds=1, iterations=1)

    mbps = {name: nbytes / statistics.median(times) / 1e6 for name, times in seconds.items()}
    cold = statistics.median(seconds["mapping"])
    benchmark.extra_info.update(
        {
            "bytes": nbytes,
            "rounds": ROUNDS,
            "seconds": seconds,
            "mbps": mbps,
            "mapping_over_blocks": mbps["mapping"] / mbps["blocks"],
            "mapping_over_zarr": mbps["mapping"] / mbps["zarr"],
            "blocks_over_zarr": mbps["blocks"] / mbps["zarr"],
            "warm_second_process_seconds": warm,
            "warm_over_cold": cold / statistics.median(warm),
            "page_latency_ms": {
                "p50": float(np.percentile(latencies, 50)) * 1e3,
                "p99": float(np.percentile(latencies, 99)) * 1e3,
                "max": float(np.max(latencies)) * 1e3,
                "pages": len(latencies),
            },
        }
    )


def random_page_latencies(url: str, tid: bytes, directory: Path, nbytes: int) -> np.ndarray:
    """Seconds to read one byte of each of ``PAGES`` random 4 KiB pages of the mapping, cold (fresh mount, page
    cache dropped)."""
    mount = Mount(url, directory)
    try:
        drop_page_cache(Path(url.removeprefix("sqlite:///")))
        raw = np.memmap(mount.file(tid), dtype=np.uint8, mode="r")
        pages = np.random.default_rng(7).integers(0, nbytes // 4096, PAGES) * 4096
        out = np.empty(PAGES)
        for i, offset in enumerate(pages):
            start = time.perf_counter()
            int(raw[offset])
            out[i] = time.perf_counter() - start
        del raw
        return out
    finally:
        mount.close()
