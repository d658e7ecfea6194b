"""A separate process that appends to or reduces a BigArray, for tests/arrays/test_arrays_processes.py.

Run from the repository root as ``python -m tests.arrays.arrays_worker MODE ...``.
(No ``test_`` prefix: pytest must not collect it.) Output is one line per
event, flushed, so the parent can follow along and kill at any point.

Modes:

``append URL NAME --worker K --seconds S``
    Prints ``ready``, waits for ``go`` on stdin, then appends for ``S``
    seconds: append number ``seq`` adds a random number of rows, row ``i``
    being ``(K, seq, i)`` (int64), so the parent can check every append
    landed whole and contiguous. Ends with ``result {"appends": .., "rows": ..}``.

``append-forever URL NAME --rows N``
    Appends blocks of ``N`` rows, row ``j`` holding ``j`` (its own index),
    and after each commit prints ``ack LENGTH TIDHEX``. Runs until killed.

``out-of-core URL NAME --budget BYTES --factor F --columns C``
    Writes an array ``F`` times the cache budget block by block, keeping a
    float64 streaming mean/std per column of what it wrote, then reopens the
    array with ``cache_bytes=BYTES`` and reduces it through ``blocks()``.
    Prints ``result JSON`` with both results and the peak RSS (VmHWM: this
    process's own, not inherited from the parent).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

from windvane import arrays


def peak_rss() -> int:
    """This process's peak resident set size in bytes (VmHWM)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


class Moments:
    """Per-column count, mean and M2 in float64, merged block by block (Chan et al.)."""

    def __init__(self, columns: int):
        self.n = 0
        self.mean = np.zeros(columns)
        self.m2 = np.zeros(columns)

    def add(self, block: np.ndarray) -> None:
        block = block.astype(np.float64)
        k = len(block)
        if not k:
            return
        mean = block.mean(axis=0)
        m2 = ((block - mean) ** 2).sum(axis=0)
        delta = mean - self.mean
        total = self.n + k
        self.mean = self.mean + delta * (k / total)
        self.m2 = self.m2 + m2 + delta**2 * (self.n * k / total)
        self.n = total

    @property
    def std(self) -> np.ndarray:
        return np.sqrt(self.m2 / self.n)


def sensor_rows(start: int, rows: int, columns: int) -> np.ndarray:
    """Rows ``start..start+rows`` of a sensor-like float32 signal (row ``i`` depends on ``i`` only)."""
    i = np.arange(start, start + rows, dtype=np.float64)[:, None]
    channel = np.arange(columns, dtype=np.float64)
    wave = (5 + channel) * np.sin(2 * np.pi * i / (500 + 37 * channel)) + channel
    noise = np.modf(np.sin(i * 12.9898 + channel * 78.233) * 43758.5453)[0]
    return np.round(wave + noise, 3).astype(np.float32)


def append_until(worker: int, seconds: float, max_rows: int, append) -> None:
    """Say "ready", wait for "go", call ``append(appends, n)`` with random ``n`` until ``seconds``
    pass, then print the "result" line the tests read."""
    rng = np.random.default_rng(worker)
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        return
    appends = rows = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        n = int(rng.integers(1, max_rows))
        append(appends, n)
        appends += 1
        rows += n
    print("result " + json.dumps({"worker": worker, "appends": appends, "rows": rows}), flush=True)


def run_append(url: str, name: str, worker: int, seconds: float) -> None:
    with arrays.open(url, name) as a:

        def append(appends: int, n: int) -> None:
            block = np.empty((n, 3), np.int64)
            block[:, 0] = worker
            block[:, 1] = appends
            block[:, 2] = np.arange(n)
            a.append(block)

        append_until(worker, seconds, 250, append)


def run_append_forever(url: str, name: str, rows: int) -> None:
    with arrays.open(url, name) as a:
        while True:
            start = len(a)
            a.append(np.arange(start, start + rows, dtype=np.int64))
            print(f"ack {len(a)} {a.tid.hex()}", flush=True)


def run_out_of_core(url: str, name: str, budget: int, factor: int, columns: int) -> None:
    block_rows = (8 << 20) // (4 * columns)  # 8 MiB blocks
    total_rows = factor * budget // (4 * columns)
    written = Moments(columns)
    with arrays.create(url, name, (0, columns), "float32") as a:
        for start in range(0, total_rows, block_rows):
            block = sensor_rows(start, min(block_rows, total_rows - start), columns)
            written.add(block)
            a.append(block)
    after_write = peak_rss()
    reduced = Moments(columns)
    with arrays.open(url, name, cache_bytes=budget) as a:
        assert a.nbytes == factor * budget, (a.nbytes, factor * budget)
        for _, block in a.blocks():
            reduced.add(block)
        cache = a.cache.stats()
    result = {
        "rows": total_rows,
        "nbytes": factor * budget,
        "written_mean": written.mean.tolist(),
        "written_std": written.std.tolist(),
        "mean": reduced.mean.tolist(),
        "std": reduced.std.tolist(),
        "peak_rss_after_write": after_write,
        "peak_rss": peak_rss(),
        "cache": cache,
    }
    print("result " + json.dumps(result), flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.arrays.arrays_worker")
    parser.add_argument("mode", choices=["append", "append-forever", "out-of-core"])
    parser.add_argument("url")
    parser.add_argument("name")
    parser.add_argument("--worker", type=int, default=0)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--rows", type=int, default=100)
    parser.add_argument("--budget", type=int, default=64 << 20)
    parser.add_argument("--factor", type=int, default=4)
    parser.add_argument("--columns", type=int, default=16)
    args = parser.parse_args(argv)
    if args.mode == "append":
        run_append(args.url, args.name, args.worker, args.seconds)
    elif args.mode == "append-forever":
        run_append_forever(args.url, args.name, args.rows)
    else:
        run_out_of_core(args.url, args.name, args.budget, args.factor, args.columns)


if __name__ == "__main__":
    main()
