"""What the web console costs ingestion, and what its pages weigh, on this machine.

1. Forward ingestion with and without ten console viewers
   (``test_forward_with_console_viewers``): the anchors' bin chunks
   (``WINDVANE_BENCH_EVENTS`` events, 5,000 a chunk, 4 connections, every
   ack awaited) into ``windvane serve`` on SQLite (a worker per core), alone and while ten
   viewers poll the console each second the way its pages do: the overview
   part, the stream's live tail and, every fifth second, a 1,500-pixel plot
   of a column (the pages' own requests, read off the templates; a viewer
   does not render, since browsers run on people's machines, not beside the
   server). Rounds alternate the order; the goal is the median of the
   rounds' ratios ``with / without`` >= 0.95. The viewers' answers and
   their latency are recorded too: the console must keep answering.
2. Page weight and first render in chromium (``test_page_weight_and_first_render``):
   every byte the overview and a stream page load (HTML, scripts, styles),
   and the first contentful paint as chromium reports it, median of five loads.

Run: ``.venv/bin/python -m pytest benchmarks/test_console.py --benchmark-enable -s -p no:cacheprovider``
(``WINDVANE_BENCH_EVENTS`` and ``WINDVANE_BENCH_ROUNDS`` scale it). The figures go to
``benchmarks/results-console-<date>.json``.
"""

from __future__ import annotations

import json
import multiprocessing
import multiprocessing.synchronize
import os
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import results_file
from ingest_load import forward_chunk, forward_load
from test_fluentd_anchor import ANCHOR_SCHEMA, PER_CHUNK, bin_record, settle

from tests.browser import Chromium, browser_page, chromium  # noqa: F401 - chromium is a fixture
from tests.serve_process import ANY_PORT, Serve

EVENTS = int(os.environ.get("WINDVANE_BENCH_EVENTS", "1000000"))
ROUNDS = int(os.environ.get("WINDVANE_BENCH_ROUNDS", "3"))
VIEWERS = 10
GOAL = 0.95
HERE = Path(__file__).parent
pytestmark = pytest.mark.timeout(7200)


@pytest.fixture(scope="module")
def chunks() -> list[tuple[bytes, bytes]]:
    return [forward_chunk("bench.logs", first, PER_CHUNK, record=bin_record) for first in range(0, EVENTS, PER_CHUNK)]


@pytest.fixture(scope="module")
def schemas() -> Path:
    root = Path(tempfile.mkdtemp(prefix="wvb-console-"))
    (root / "logs.toml").write_text(ANCHOR_SCHEMA)
    return root


@pytest.fixture(scope="module")
def results() -> Iterator[dict]:
    found: dict = {}
    yield found
    if found:
        results_file.write("console", found)


def _watch(base: str, count: int, stop: multiprocessing.synchronize.Event, found: multiprocessing.Queue) -> None:
    """``count`` viewers in one process, each with a connection pool of its own as a browser has: the requests
    a console page makes, once a second, until ``stop``; their latencies and failures go to ``found``."""
    import asyncio

    import aiohttp

    paths = ["/-/console/overview", "/-/console/stream/tail?tag=bench.logs&n=20"]
    plot = "/-/console/stream/plot.json?tag=bench.logs&column=latency_ms&width=1500"
    latencies: list[float] = []
    failures: list[str] = []

    async def view(index: int) -> None:
        async with aiohttp.ClientSession(base) as session:
            await asyncio.sleep(index / count)  # spread over the second
            tick = 0
            while not stop.is_set():
                for path in [*paths, *([plot] if tick % 5 == index % 5 else [])]:
                    started = time.perf_counter()
                    try:
                        async with session.get(path, timeout=aiohttp.ClientTimeout(total=30)) as answer:
                            await answer.read()
                            answer.raise_for_status()
                        latencies.append(time.perf_counter() - started)
                    except Exception as exc:  # noqa: BLE001 - counted and reported, never hidden
                        failures.append(f"{path}: {exc}")
                tick += 1
                await asyncio.sleep(1.0)

    async def main() -> None:
        await asyncio.gather(*(view(i) for i in range(count)))

    asyncio.run(main())
    found.put((latencies, failures))


class Viewers:
    """``count`` viewers polling the console at ``base`` once a second until stopped, in a process of their
    own (browsers run apart from the server, and in this process's threads they would take the interpreter
    lock from the load's senders), on asyncio so that their own CPU stays small beside the server's."""

    def __init__(self, base: str, count: int):
        context = multiprocessing.get_context("spawn")
        self.stop = context.Event()
        self.found: multiprocessing.Queue = context.Queue()
        self.process = context.Process(target=_watch, args=(base, count, self.stop, self.found))
        self.latencies: list[float] = []
        self.failures: list[str] = []

    def __enter__(self) -> Viewers:
        self.process.start()
        time.sleep(2)  # the viewers' interpreter starts before the clock does
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop.set()
        latencies, failures = self.found.get(timeout=60)
        self.latencies.extend(latencies)
        self.failures.extend(failures)
        self.process.join()


def run(url: str, schemas: Path, chunks: list, viewers: int) -> tuple[float, Viewers | None]:
    """Events/s of Forward into a fresh ``windvane serve`` on ``url``, first send to last ack, with ``viewers``
    polling its console meanwhile."""
    log = Path(tempfile.gettempdir()) / "wvb-console-serve.log"
    with Serve(url, schemas, log, http=ANY_PORT, workers=None) as serve:  # a worker per core, as deployed
        # The stream exists before the clock starts: the viewers look at it from the first second.
        assert not forward_load(serve.forward_port, chunks[:1], PER_CHUNK).errors
        watching = Viewers(f"http://127.0.0.1:{serve.http_port}", viewers) if viewers else None
        if watching is not None:
            watching.__enter__()
        try:
            result = forward_load(serve.forward_port, chunks[1:], PER_CHUNK)
        finally:
            if watching is not None:
                watching.__exit__()
        assert not result.errors, result.errors[:3]
        assert serve.stop() == 0, serve.log()
    return result.events / result.seconds, watching


def test_forward_with_console_viewers(benchmark, databases, chunks, schemas, results):
    rounds = 1 if benchmark.disabled else ROUNDS
    rates: dict[str, list[float]] = {"alone": [], "viewed": []}
    latencies: list[float] = []
    failures: list[str] = []

    def measure() -> None:
        for r in range(rounds):
            for name in ("alone", "viewed") if r % 2 == 0 else ("viewed", "alone"):
                settle()
                url = f"sqlite:///{databases.fresh_sqlite('console_bench')}"
                rate, watching = run(url, schemas, chunks, VIEWERS if name == "viewed" else 0)
                rates[name].append(rate)
                if watching is not None:
                    latencies.extend(watching.latencies)
                    failures.extend(watching.failures)

    benchmark.pedantic(measure, rounds=1, iterations=1)
    pairs = [v / a for v, a in zip(rates["viewed"], rates["alone"], strict=True)]
    info = {
        "events": EVENTS,
        "viewers": VIEWERS,
        "rounds": rounds,
        "events_per_s": rates,
        "pairs": pairs,
        "viewed_over_alone": float(np.median(pairs)),
        "goal": GOAL,
        "goal_met": float(np.median(pairs)) >= GOAL,
        "viewer_requests": len(latencies),
        "viewer_failures": failures[:10],
        "viewer_latency_p50_s": float(np.percentile(latencies, 50)) if latencies else None,
        "viewer_latency_p99_s": float(np.percentile(latencies, 99)) if latencies else None,
    }
    benchmark.extra_info.update(info)
    results["forward_with_viewers"] = info
    print(json.dumps(info, indent=1))
    assert not failures, failures[:5]  # the console answered every viewer while ingesting


def test_page_weight_and_first_render(chromium: Chromium, databases, chunks, schemas, results):
    url = f"sqlite:///{databases.fresh_sqlite('console_pages')}"
    log = Path(tempfile.gettempdir()) / "wvb-console-pages.log"
    with Serve(url, schemas, log, http=ANY_PORT, workers=1) as serve:
        assert not forward_load(serve.forward_port, chunks[:20], PER_CHUNK).errors
        base = f"http://127.0.0.1:{serve.http_port}"
        pages = {"overview": "/", "stream": "/-/console/stream?tag=bench.logs"}
        figures: dict[str, dict] = {}
        for name, path in pages.items():
            weights, paints = [], []
            for _ in range(5):
                with browser_page(chromium, base) as tab:
                    sizes: dict[str, int] = {}
                    tab.page.on("response", lambda r, sizes=sizes: sizes.__setitem__(r.url, len(r.body())))
                    tab.page.goto(path, wait_until="load")
                    if name == "stream":
                        tab.page.wait_for_selector("#plot canvas")
                    paint = tab.page.evaluate(
                        "performance.getEntriesByName('first-contentful-paint')[0]?.startTime ?? null"
                    )
                    weights.append(sum(v for k, v in sizes.items() if "plot.json" not in k and "/tail" not in k))
                    paints.append(paint)
                assert tab.problems() == []
            figures[name] = {
                "bytes": int(statistics.median(weights)),
                "first_contentful_paint_ms": statistics.median(p for p in paints if p is not None),
            }
        assert serve.stop() == 0
    results["pages"] = figures
    print(json.dumps(figures, indent=1))
