"""The thread pool that encodes and decodes chunks in parallel.

numcodecs' compressors release the GIL, so threads use every core. Work is
submitted through :func:`ordered_map`, which keeps at most ``window`` items
in flight: memory stays bounded however many chunks a call touches. Never
call :func:`ordered_map` from inside a pool task (the pool could fill with
tasks waiting for each other).
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

_pools: dict[str, ThreadPoolExecutor] = {}
_pool_lock = threading.Lock()


_WORKERS = max(os.cpu_count() or 1, 1)


def workers() -> int:
    """How many codec threads run at once: one per core."""
    return _WORKERS


def _shared_pool(name: str) -> ThreadPoolExecutor:
    """The process-wide pool ``name`` (one thread per core), created on first use."""
    with _pool_lock:
        if name not in _pools:
            _pools[name] = ThreadPoolExecutor(max_workers=workers(), thread_name_prefix=f"arrays-{name}")
        return _pools[name]


def pool() -> ThreadPoolExecutor:
    """The process-wide codec pool."""
    return _shared_pool("codec")


def ordered_map(fn: Callable[[T], R], items: Iterable[T], window: int | None = None) -> Iterator[R]:
    """``map(fn, items)`` run in the pool, results in order, at most ``window`` in flight.

    Abandoning the iterator cancels what has not started.
    """
    window = window or 2 * workers() + 2
    executor = pool()
    futures: deque[Future[R]] = deque()
    try:
        for item in items:
            futures.append(executor.submit(fn, item))
            if len(futures) >= window:
                yield futures.popleft().result()
        while futures:
            yield futures.popleft().result()
    finally:
        for future in futures:
            future.cancel()


#: Work on fewer bytes than this runs in the calling thread: handing a task to
#: the pool and waking a thread costs tens of microseconds, more than a small
#: chunk takes to encode or decode.
INLINE_BYTES = 1 << 20


def weighted_map(fn: Callable[[T], R], items: Iterable[T], weight: int, window: int | None = None) -> Iterator[R]:
    """``map(fn, items)`` in the calling thread if ``weight`` (the bytes the work touches) is below
    :data:`INLINE_BYTES`, else :func:`ordered_map`. Results in order either way."""
    if weight < INLINE_BYTES:
        return map(fn, items)
    return ordered_map(fn, items, window)


def io_pool() -> ThreadPoolExecutor:
    """A small pool that reads ahead (``BigArray.blocks``).

    Separate from the codec pool, whose tasks it waits on, and long-lived:
    neostore keeps one database connection per reading thread.
    """
    return _shared_pool("readahead")
