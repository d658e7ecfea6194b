"""Deterministic, sensor-like float32 data for the arrays benchmarks.

The data is a 2-D array ``rows x CHANNELS`` (float32, little-endian) of one
multi-channel acquisition: temperatures, a pressure, three vibration axes, a
mains current and voltage and a shaft speed, each sampled at
``SAMPLE_RATE``. Every channel is

    offset + a1*sin(2*pi*f1*t + p1) + a2*sin(2*pi*f2*t + p2)   (two tones)
           + slow drift + gaussian noise,

converted to the counts of an ADC whose step is a power of two of the
channel's unit (``lsb``; a 24-bit converter over a power-of-two full scale)
and stored as float32. Like recorded sensor data, the high bytes of each
float change slowly and the low ones carry noise, so byte shuffling pays:
at level 3 (BigArray's default) blosc (zstd + byte shuffle) compresses it
2.55x and plain zstd 2.03x (at level 5: 2.78x and 2.14x; see
:func:`compression_ratios`). The issue quotes 2.66 vs 1.99 on real
sensor-like float32.

The array is made of blocks of ``BLOCK_ROWS`` rows (2 MiB each). Block ``i``
depends only on ``(SEED, i)``, so any block can be generated on its own and
the signal is continuous across blocks; no two blocks are equal (no
accidental dedup). ``dataset(TOTAL_BYTES)`` is 1 GiB by default, or
``WINDVANE_BENCH_BYTES`` (e.g. ``64M``).
"""

from __future__ import annotations

import os

import numpy as np
from sensor_data import TOTAL_BYTES, parse_size  # noqa: F401  (one size setting for every benchmark)

CHANNELS = 8
DTYPE = np.dtype("<f4")
ROW_BYTES = CHANNELS * DTYPE.itemsize
BLOCK_BYTES = 2 * 1024 * 1024
BLOCK_ROWS = BLOCK_BYTES // ROW_BYTES  # 65536 rows: also the chunk shape (2 MiB chunks)
SAMPLE_RATE = 1000.0  # Hz
SEED = 20260303

# One row per channel: offset, tone 1 (amplitude, Hz), tone 2 (amplitude, Hz),
# drift per hour, noise sigma in ADC counts, log2 of the ADC step.
_CHANNELS = np.array(
    [
        # offset   a1     f1     a2    f2     drift/h  noise  log2(lsb)
        [62.0, 0.8, 0.02, 0.05, 1.0, 1.5, 3.0, -9],  # bearing temperature, degC
        [21.5, 0.3, 0.01, 0.02, 0.5, 0.4, 3.0, -9],  # ambient temperature, degC
        [4.2, 0.4, 0.7, 0.03, 12.0, 0.05, 3.6, -11],  # oil pressure, bar
        [0.0, 2.5, 24.7, 0.6, 98.3, 0.0, 4.2, -9],  # vibration x, m/s2
        [0.0, 1.8, 24.7, 0.9, 73.9, 0.0, 4.2, -9],  # vibration y, m/s2
        [9.81, 0.7, 49.4, 0.3, 111.1, 0.0, 4.2, -9],  # vibration z, m/s2
        [0.0, 14.0, 50.0, 1.2, 150.0, 0.0, 3.6, -7],  # phase current, A
        [1480.0, 6.0, 0.05, 0.8, 3.3, 12.0, 3.0, -5],  # shaft speed, rpm
    ]
)
OFFSET, A1, F1, A2, F2, DRIFT, NOISE, LOG2_LSB = _CHANNELS.T
LSB = np.exp2(LOG2_LSB)


def _phases(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.uniform(0.0, 2 * np.pi, CHANNELS), rng.uniform(0.0, 2 * np.pi, CHANNELS)


def block(index: int, seed: int = SEED) -> np.ndarray:
    """Block ``index``: rows ``[index * BLOCK_ROWS, (index + 1) * BLOCK_ROWS)``, shape ``(BLOCK_ROWS, CHANNELS)``."""
    p1, p2 = _phases(seed)
    t = ((np.arange(BLOCK_ROWS, dtype=np.float64) + index * BLOCK_ROWS) / SAMPLE_RATE)[:, None]
    two_pi = 2 * np.pi
    signal = OFFSET + DRIFT * (t / 3600.0)
    signal = signal + A1 * np.sin(two_pi * F1 * t + p1)
    signal += A2 * np.sin(two_pi * F2 * t + p2)
    counts = signal / LSB
    counts += np.random.default_rng([seed, index]).standard_normal(counts.shape) * NOISE
    return (np.rint(counts) * LSB).astype(DTYPE)


def blocks_for(total_bytes: int) -> int:
    """How many 2 MiB blocks make ``total_bytes`` (at least one)."""
    return max(1, total_bytes // BLOCK_BYTES)


def rows_for(total_bytes: int) -> int:
    return blocks_for(total_bytes) * BLOCK_ROWS


def dataset(total_bytes: int, seed: int = SEED) -> np.ndarray:
    """The whole array of ``total_bytes``, ``(rows_for(total_bytes), CHANNELS)``, filled block by block."""
    from concurrent.futures import ThreadPoolExecutor

    out = np.empty((rows_for(total_bytes), CHANNELS), dtype=DTYPE)

    def fill(index: int) -> None:
        out[index * BLOCK_ROWS : (index + 1) * BLOCK_ROWS] = block(index, seed)

    # numpy releases the GIL in the heavy parts: one thread per core halves the wait.
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        list(pool.map(fill, range(blocks_for(total_bytes))))
    return out


def digest(array: np.ndarray) -> str:
    """A cheap content checksum (blake3 of the C-contiguous bytes), to compare reads with the source."""
    import blake3

    raw = np.ascontiguousarray(array, dtype=DTYPE).view(np.uint8).reshape(-1)
    return blake3.blake3(raw, max_threads=blake3.blake3.AUTO).hexdigest()


def compression_ratios(data: np.ndarray, clevel: int, sample_blocks: int = 16) -> dict[str, float]:
    """Raw / compressed size over up to ``sample_blocks`` evenly spread 2 MiB blocks of ``data``:
    blosc zstd with byte shuffle (the benchmarks' codec), blosc zstd without shuffle, and plain zstd,
    all at level ``clevel``."""
    from numcodecs import Blosc, Zstd

    n = max(1, len(data) // BLOCK_ROWS)
    picks = sorted({round(i * (n - 1) / max(1, sample_blocks - 1)) for i in range(min(n, sample_blocks))})
    pieces = [np.ascontiguousarray(data[i * BLOCK_ROWS : (i + 1) * BLOCK_ROWS]) for i in picks]
    raw = sum(p.nbytes for p in pieces)
    codecs = {
        "blosc_zstd_shuffle": Blosc(cname="zstd", clevel=clevel, shuffle=Blosc.SHUFFLE),
        "blosc_zstd_noshuffle": Blosc(cname="zstd", clevel=clevel, shuffle=Blosc.NOSHUFFLE),
        "zstd": Zstd(level=clevel),
    }
    # Blosc takes its typesize from the buffer's itemsize: pass float32 arrays, not bytes.
    return {name: raw / sum(len(codec.encode(p)) for p in pieces) for name, codec in codecs.items()}


if __name__ == "__main__":  # a quick look: python benchmarks/array_data.py [size] [clevel]
    import sys
    import time

    size = parse_size(sys.argv[1]) if len(sys.argv) > 1 else 32 * BLOCK_BYTES
    clevel = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    started = time.perf_counter()
    data = dataset(size)
    took = time.perf_counter() - started
    print(f"generated {data.nbytes / 2**20:.0f} MiB in {took:.2f} s ({data.nbytes / took / 1e6:.0f} MB/s)")
    print("first rows:\n", data[:3])
    for name, ratio in compression_ratios(data, clevel).items():
        print(f"{name} (level {clevel}): {ratio:.2f}")
