"""Console plot benchmark: :func:`arrays.downsample.plot_series` against reading the same rows raw.

A stream of ``WINDVANE_BENCH_PLOT_ROWS`` (100,000,000) rows of float64
(a slow sine, noise and rare spikes, one row per millisecond, in time
order) is written once per run, untimed, into a SQLite store in a
temporary directory, in appends of 4 Mi rows. Each round opens the stream
anew, as a console request would, and times, in alternating order:

- ``full``: the stream's whole time span at 1,500 pixel columns (goal
  < 1 s): ``cold`` (the process's plot cache emptied: every chunk read and
  summarised), ``warm`` (the same plot again: summaries and split
  sub-blocks cached), ``new_edges`` (summaries cached, another width each
  round, so every pixel boundary moves and the sub-blocks it splits are
  read), against ``raw``: the time and value columns read whole, chunk by
  chunk with read-ahead (``BigArray.blocks``), what any reader that looks
  at every row pays;
- ``range``: 1,000,000 rows from the middle, not chunk-aligned, at 1,500
  pixel columns (goal < 100 ms): ``cold`` and ``warm`` against ``raw``:
  ``stream["time"][a:b]`` and ``stream["v"][a:b]``.

At 1,500 pixel columns a million rows give pixel columns narrower than a
few sub-blocks, so the range plot reduces the rows themselves, warm or not.

The SQLite file stays in the page cache: cold means nothing of the plot is
cached in the process, not that the disk is read. ``peak_rss_mib_cold`` is
the process's peak resident memory during the cold full-range plots (VmHWM,
reset before each; the most of the rounds), ``peak_rss_growth_mib_cold``
that peak less the resident memory just before the plot (both count the
SQLite file's memory-mapped pages), ``peak_anon_growth_mib_cold`` the
growth of anonymous memory alone, sampled. Seconds are
medians of ``WINDVANE_BENCH_ROUNDS`` (3) rounds; ratios are raw seconds
over plot seconds within a round.
Results go into ``benchmark.extra_info`` and, when timed, into
``results-console-plot-<date>.json`` beside this file::

    .venv/bin/python -m pytest benchmarks/test_console_plot.py --benchmark-enable -s -p no:cacheprovider
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import results_file
from s3_bench import alternate

from windvane import arrays
from windvane.arrays import Column, downsample

HERE = Path(__file__).resolve().parent
ROWS = int(float(os.environ.get("WINDVANE_BENCH_PLOT_ROWS", "100000000")))
ROUNDS = int(os.environ.get("WINDVANE_BENCH_ROUNDS", "3"))
WIDTH = 1500
RANGE_ROWS = min(1_000_000, ROWS // 2)
STEP_NS = 1_000_000  # one row per millisecond
T0 = 1_700_000_000 * 10**9
APPEND_ROWS = 1 << 22
GOALS = {"full": 1.0, "range": 0.1}  # seconds


def signal(first: int, count: int) -> np.ndarray:
    rng = np.random.default_rng(first)
    index = np.arange(first, first + count)
    values = 20 + 5 * np.sin(index / 3.6e6) + rng.normal(0, 0.5, count)
    spikes = rng.random(count) < 1e-6
    values[spikes] += rng.normal(0, 40, int(spikes.sum()))
    return values


@pytest.fixture(scope="module")
def plot_url():
    """The stream, written once (untimed); removed at the end."""
    root = tempfile.mkdtemp(prefix="wvb-plot-", dir="/tmp")
    url = f"sqlite:///{root}/plot.db"
    started = time.perf_counter()
    with arrays.create_stream(url, "plot", [Column("v", "float64")]) as stream:
        for first in range(0, ROWS, APPEND_ROWS):
            count = min(APPEND_ROWS, ROWS - first)
            times = T0 + np.arange(first, first + count, dtype=np.int64) * STEP_NS
            stream.append({"time": times, "v": signal(first, count)})
    print(f"\nwrote {ROWS} rows in {time.perf_counter() - started:.1f} s, {os.path.getsize(f'{root}/plot.db')} bytes")
    yield url
    shutil.rmtree(root, ignore_errors=True)


def seconds(fn: Callable[[], object]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def plot(url: str, width: int, start: int | None = None, stop: int | None = None) -> downsample.PlotSeries:
    with arrays.open_stream(url, "plot") as stream:
        return downsample.plot_series(stream, "v", width, start, stop)


def read_all(url: str) -> int:
    with arrays.open_stream(url, "plot") as stream:
        rows = 0
        for name in ("time", "v"):
            for _, block in stream[name].blocks():
                rows += len(block)
        return rows


def read_range(url: str, first: int, stop: int) -> int:
    with arrays.open_stream(url, "plot") as stream:
        return len(stream["time"][first:stop]) + len(stream["v"][first:stop])


def reset_peak_rss() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def status_mib(field: str) -> float:
    """``field`` (``VmHWM``, ``VmRSS``) of this process, in MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return float("nan")


@contextmanager
def sampled_anon(every: float = 0.005) -> Iterator[list[float]]:
    """The peak of this process's anonymous resident memory (RssAnon, MiB) while the block runs, sampled by a
    thread: VmHWM counts the SQLite file's memory-mapped pages too, which the page cache holds anyway."""
    peak = [status_mib("RssAnon")]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(every):
            peak[0] = max(peak[0], status_mib("RssAnon"))

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield peak
    finally:
        done.set()
        thread.join()
        peak[0] = max(peak[0], status_mib("RssAnon"))


def summarise(times: dict[str, list[float]], baseline: str) -> dict[str, object]:
    medians = {name: float(np.median(v)) for name, v in times.items()}
    ratios = {
        name: [b / s for b, s in zip(times[baseline], v, strict=True)] for name, v in times.items() if name != baseline
    }
    return {
        "seconds": times,
        "median_seconds": medians,
        "raw_over_plot_per_round": ratios,
        "median_raw_over_plot": {name: float(np.median(r)) for name, r in ratios.items()},
    }


RESULTS: dict[str, object] = {}


def publish(benchmark, name: str, info: dict[str, object]) -> None:
    """``info`` in the benchmark's JSON, on stdout and (timed runs only) in the results file beside this one."""
    benchmark.extra_info.update(info)
    RESULTS[name] = info
    print(json.dumps({name: info}, indent=1))
    if benchmark.disabled:
        return
    doc = {
        "numpy": np.__version__,
        "rows": ROWS,
        "width": WIDTH,
        "range_rows": RANGE_ROWS,
        "rounds": ROUNDS,
        "goals_seconds": GOALS,
        "command": "pytest benchmarks/test_console_plot.py --benchmark-enable -s -p no:cacheprovider",
        **RESULTS,
    }
    results_file.write("console-plot", doc)


def test_full_range(benchmark, plot_url):
    rounds = 1 if benchmark.disabled else ROUNDS
    times: dict[str, list[float]] = {}
    checks: dict[str, object] = {}
    memory: dict[str, float] = {}
    widths = iter(range(WIDTH - 1, 0, -1))

    def cold() -> float:
        downsample.plot_cache.clear()
        measured = reset_peak_rss()
        before, anon_before = status_mib("VmRSS"), status_mib("RssAnon")
        with sampled_anon() as anon_peak:
            took = seconds(lambda: checks.update(cold=plot(plot_url, WIDTH)))
        if measured:
            peak = status_mib("VmHWM")
            memory["peak"] = max(peak, memory.get("peak", 0.0))
            memory["growth"] = max(peak - before, memory.get("growth", 0.0))
        memory["anon_growth"] = max(anon_peak[0] - anon_before, memory.get("anon_growth", 0.0))
        return took

    def warm() -> float:
        return seconds(lambda: checks.update(warm=plot(plot_url, WIDTH)))

    def new_edges() -> float:
        return seconds(lambda: plot(plot_url, next(widths)))

    def raw() -> float:
        return seconds(lambda: checks.update(raw_rows=read_all(plot_url)))

    def run() -> None:
        times.update(alternate({"raw": raw, "cold": cold, "warm": warm, "new_edges": new_edges}, rounds))

    benchmark.pedantic(run, rounds=1, iterations=1)
    series_cold, series_warm = checks["cold"], checks["warm"]
    assert isinstance(series_cold, downsample.PlotSeries) and isinstance(series_warm, downsample.PlotSeries)
    assert series_cold.rows == ROWS and checks["raw_rows"] == 2 * ROWS
    assert np.array_equal(series_cold.times, series_warm.times)
    assert np.array_equal(series_cold.values, series_warm.values)
    info = summarise(times, "raw")
    median = info["median_seconds"]
    assert isinstance(median, dict)
    info.update(
        {
            "points": len(series_cold.times),
            "peak_rss_mib_cold": memory.get("peak"),
            "peak_rss_growth_mib_cold": memory.get("growth"),
            "peak_anon_growth_mib_cold": memory.get("anon_growth"),
            "cache": downsample.plot_cache.stats(),
            "goal_seconds": GOALS["full"],
            "goal_met": {name: median[name] < GOALS["full"] for name in ("cold", "warm", "new_edges")},
        }
    )
    publish(benchmark, "full_range", info)


def test_million_row_range(benchmark, plot_url):
    rounds = 1 if benchmark.disabled else ROUNDS
    first = ROWS // 2 + 12_345
    stop = first + RANGE_ROWS
    start_ns, stop_ns = T0 + first * STEP_NS, T0 + stop * STEP_NS
    times: dict[str, list[float]] = {}
    checks: dict[str, object] = {}

    def cold() -> float:
        downsample.plot_cache.clear()
        return seconds(lambda: checks.update(cold=plot(plot_url, WIDTH, start_ns, stop_ns)))

    def warm() -> float:
        return seconds(lambda: checks.update(warm=plot(plot_url, WIDTH, start_ns, stop_ns)))

    def raw() -> float:
        return seconds(lambda: checks.update(raw_rows=read_range(plot_url, first, stop)))

    def run() -> None:
        times.update(alternate({"raw": raw, "cold": cold, "warm": warm}, rounds))

    benchmark.pedantic(run, rounds=1, iterations=1)
    series = checks["cold"]
    assert isinstance(series, downsample.PlotSeries) and series.rows == RANGE_ROWS
    assert checks["raw_rows"] == 2 * RANGE_ROWS
    info = summarise(times, "raw")
    median = info["median_seconds"]
    assert isinstance(median, dict)
    info.update(
        {
            "points": len(series.times),
            "goal_seconds": GOALS["range"],
            "goal_met": {name: median[name] < GOALS["range"] for name in ("cold", "warm")},
        }
    )
    publish(benchmark, "million_row_range", info)
