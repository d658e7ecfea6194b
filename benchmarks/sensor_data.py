"""Deterministic, sensor-like benchmark data: float32 samples cut into 2 MiB values.

Each value is a block of ``FRAMES`` consecutive frames of ``CHANNELS``
float32 channels (row-major, little-endian: ``frames x channels``), like a
chunk of a Wendelin data array fed by a multi-channel acquisition board.
Every channel is

    offset + a1*sin(2*pi*f1*t + p1) + a2*sin(2*pi*f2*t + p2)   (two tones)
           + slow drift (linear + a sine with a period of hours)
           + gaussian noise,

quantised to the ADC's resolution (``RESOLUTION``, 1e-3 units) and stored
as float32. The channel parameters come from ``SEED``; the noise of value
``i`` from ``(SEED, i)``, so any value can be generated on its own, the
stream is continuous across values, and no two values are equal (no
accidental dedup).

Values are generated one at a time (``iter_values``), so only the values
kept by the caller occupy memory: ``dataset(1 << 30)`` holds exactly one
copy of the 1 GiB (512 values) plus one value's temporaries.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import numpy as np

VALUE_BYTES = 2 * 1024 * 1024
CHANNELS = 8
FRAMES = VALUE_BYTES // (4 * CHANNELS)  # 65536 frames per value
SAMPLE_RATE = 1000.0  # Hz
RESOLUTION = 1e-3
SEED = 20260212


def parse_size(text: str) -> int:
    """``"1073741824"``, ``"64M"``, ``"1G"``, ``"512K"`` -> bytes (binary units)."""
    text = text.strip().upper().removesuffix("IB").removesuffix("B")
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    number = text[:-1] if scale != 1 else text
    return int(float(number) * scale)


#: Bytes of data each benchmark moves: 1 GiB (512 values), or WINDVANE_BENCH_BYTES.
TOTAL_BYTES = parse_size(os.environ.get("WINDVANE_BENCH_BYTES", str(1 << 30)))


def _channel_parameters(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "offset": rng.uniform(-50.0, 50.0, CHANNELS),
        "a1": rng.uniform(0.5, 20.0, CHANNELS),
        "f1": rng.uniform(0.05, 5.0, CHANNELS),  # Hz
        "p1": rng.uniform(0.0, 2 * np.pi, CHANNELS),
        "a2": rng.uniform(0.05, 2.0, CHANNELS),
        "f2": rng.uniform(10.0, 120.0, CHANNELS),  # Hz: vibration, mains hum
        "p2": rng.uniform(0.0, 2 * np.pi, CHANNELS),
        "drift": rng.uniform(-1e-3, 1e-3, CHANNELS),  # units per second
        "slow_a": rng.uniform(0.5, 5.0, CHANNELS),
        "slow_f": rng.uniform(1 / 7200, 1 / 1800, CHANNELS),  # a period of 0.5-2 hours
        "noise": rng.uniform(0.002, 0.05, CHANNELS),  # sigma, a few ADC steps
    }


_PARAMS: dict[int, dict[str, np.ndarray]] = {}


def value(index: int, seed: int = SEED) -> bytes:
    """Value number ``index`` of the stream: ``VALUE_BYTES`` bytes of float32 frames."""
    out = (np.rint(_signal(index, seed) / RESOLUTION) * RESOLUTION).astype("<f4").tobytes()
    assert len(out) == VALUE_BYTES
    return out


def counts(index: int, seed: int = SEED) -> bytes:
    """Value number ``index`` as the acquisition board delivers it: the same samples as int32 counts of
    ``RESOLUTION``. Its float32 form saves about a tenth under zstd level 1, this one about a third."""
    out = np.rint(_signal(index, seed) / RESOLUTION).astype("<i4").tobytes()
    assert len(out) == VALUE_BYTES
    return out


def counts_dataset(total_bytes: int, seed: int = SEED) -> list[bytes]:
    """The values of ``total_bytes`` as int32 counts (:func:`counts`), as a list."""
    return [counts(index, seed) for index in range(count_for(total_bytes))]


def _signal(index: int, seed: int) -> np.ndarray:
    """The frames of value ``index`` before quantisation, ``FRAMES x CHANNELS`` float64."""
    params = _PARAMS.get(seed)
    if params is None:
        params = _PARAMS[seed] = _channel_parameters(seed)
    t = ((np.arange(FRAMES, dtype=np.float64) + index * FRAMES) / SAMPLE_RATE)[:, None]
    two_pi = 2 * np.pi
    signal = params["offset"] + params["drift"] * t
    signal = signal + params["a1"] * np.sin(two_pi * params["f1"] * t + params["p1"])
    signal += params["a2"] * np.sin(two_pi * params["f2"] * t + params["p2"])
    signal += params["slow_a"] * np.sin(two_pi * params["slow_f"] * t)
    rng = np.random.default_rng([seed, index])
    signal += rng.normal(0.0, 1.0, signal.shape) * params["noise"]
    return signal


def count_for(total_bytes: int) -> int:
    """How many values make ``total_bytes`` (at least one)."""
    return max(1, total_bytes // VALUE_BYTES)


def iter_values(total_bytes: int, start: int = 0, seed: int = SEED) -> Iterator[bytes]:
    """The values making up ``total_bytes``, generated one by one."""
    for index in range(start, start + count_for(total_bytes)):
        yield value(index, seed)


def dataset(total_bytes: int, seed: int = SEED) -> list[bytes]:
    """All values of ``total_bytes`` as a list (one copy in memory)."""
    return list(iter_values(total_bytes, seed=seed))


if __name__ == "__main__":  # a quick look at the data and its compressibility
    import time
    import zlib

    import zstandard

    n = int(os.environ.get("N", "8"))
    started = time.perf_counter()
    values = dataset(n * VALUE_BYTES)
    took = time.perf_counter() - started
    print(f"generated {n} values in {took:.2f} s ({n * VALUE_BYTES / took / 1e6:.0f} MB/s)")
    sample = np.frombuffer(values[0], dtype="<f4").reshape(FRAMES, CHANNELS)
    print("first frames:\n", sample[:3])
    print("distinct values:", len(set(values)) == len(values))
    for name, compress in (
        ("zstd-3", zstandard.ZstdCompressor(level=3).compress),
        ("zlib-6", lambda b: zlib.compress(b, 6)),
    ):
        started = time.perf_counter()
        sizes = [len(compress(v)) for v in values]
        took = time.perf_counter() - started
        print(f"{name}: ratio {sum(sizes) / (n * VALUE_BYTES):.3f}, {n * VALUE_BYTES / took / 1e6:.0f} MB/s")
