"""The console's query runner: time limit, queue bound, and answers shared between viewers."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from windvane.console.app import Queries
from windvane.console.config import ConsoleConfig
from windvane.console.errors import Busy, TimedOut


async def test_a_read_past_the_time_limit_is_answered_504_and_the_loop_goes_on():
    queries = Queries(ConsoleConfig(threads=1, timeout=0.2))
    release = threading.Event()
    ticks = 0

    async def ticking() -> None:
        nonlocal ticks
        while not release.is_set():
            ticks += 1
            await asyncio.sleep(0.01)

    ticker = asyncio.create_task(ticking())
    with pytest.raises(TimedOut, match=r"longer than 0\.2 s"):
        await queries.run(release.wait, 5)
    release.set()
    await ticker
    assert ticks >= 10  # the event loop (acknowledgements) ran while the read blocked its thread
    queries.close()


async def test_past_the_queue_a_page_is_answered_busy_at_once():
    queries = Queries(ConsoleConfig(threads=1, waiting=1, timeout=5))
    release = threading.Event()
    running = [asyncio.create_task(queries.run(release.wait, 5)) for _ in range(2)]
    await asyncio.sleep(0.05)
    started = time.monotonic()
    with pytest.raises(Busy):
        await queries.run(time.sleep, 0)
    assert time.monotonic() - started < 0.1
    release.set()
    assert await asyncio.gather(*running) == [True, True]
    queries.close()


async def test_viewers_asking_the_same_share_one_read_until_it_is_stale():
    queries = Queries(ConsoleConfig(fresh_seconds=0.3, cost_factor=0))
    calls = 0

    def read() -> int:
        nonlocal calls
        calls += 1
        time.sleep(0.05)
        return calls

    assert await asyncio.gather(*(queries.shared("page", read) for _ in range(10))) == [1] * 10
    assert await queries.shared("page", read) == 1  # fresh: no read
    assert await queries.shared("other", read) == 2  # another key reads
    await asyncio.sleep(0.35)
    assert await queries.shared("page", read) == 3  # stale: read again
    queries.forget()
    assert await queries.shared("page", read) == 4  # forgotten after an action
    queries.close()


async def test_a_dear_read_stays_fresh_for_longer():
    queries = Queries(ConsoleConfig(fresh_seconds=0.01, cost_factor=20))
    calls = 0

    def read() -> int:
        nonlocal calls
        calls += 1
        time.sleep(0.02)  # kept for about 20 x 0.02 = 0.4 s
        return calls

    assert await queries.shared("plot", read) == 1
    await asyncio.sleep(0.1)
    assert await queries.shared("plot", read) == 1
    await asyncio.sleep(0.45)
    assert await queries.shared("plot", read) == 2
    queries.close()


async def test_an_error_reaches_every_asker_and_is_not_kept():
    queries = Queries(ConsoleConfig())

    def fails() -> None:
        time.sleep(0.02)
        raise ValueError("broken")

    results = await asyncio.gather(*(queries.shared("k", fails) for _ in range(3)), return_exceptions=True)
    assert all(isinstance(r, ValueError) for r in results)
    assert await queries.shared("k", lambda: "fine") == "fine"
    queries.close()
