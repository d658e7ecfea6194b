"""The C allocator of a serving process: how glibc's malloc is tuned for it, and when what a burst took is given back.

Python's objects of more than 512 bytes, the bytes read from clients, and
numpy's arrays come from the C library's ``malloc``. glibc keeps what is
freed for reuse; after a burst of large messages that is hundreds of MB,
scattered over its heaps among what is still live, which it never gives
back by itself. :func:`give_back_memory` does (``malloc_trim``), and
:class:`AfterBursts` calls it in a process whose work comes as tasks (a
decode worker) once a burst is over; the connectors' memory budget calls it
in the serving process once it holds no client data.

What concerns glibc is a no-op where the C library is another.
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
import time
from typing import Any

import pyarrow

log = logging.getLogger("windvane.ingest")

#: glibc malloc's thresholds for a serving process, in bytes: blocks up to ``MALLOC_MMAP_THRESHOLD``
#: come from the heap, and up to ``MALLOC_TRIM_THRESHOLD`` free at its top stays there. glibc's own
#: (mmap past 128 KiB, raised as such blocks are freed; the top given back past twice that) make the
#: service fault in fresh pages for most of what it receives; these keep the heap's pages for reuse,
#: and peak RSS under the memory-budget attacks is no higher (tests/ingest/test_memory_budget.py).
#: A ``MALLOC_*`` environment variable set by the user wins.
MALLOC_MMAP_THRESHOLD = 4 << 20
MALLOC_TRIM_THRESHOLD = 64 << 20

#: Heaps (glibc's arenas) the threads of a serving process share. glibc's own limit is eight per core:
#: each thread that allocates while another holds the lock gets an arena of its own, and memory freed
#: in one is reused by that one alone, so a burst leaves a few arenas each holding its share, part of it
#: live and never given back. The threads that allocate much (the event loop, the commit thread) take
#: the interpreter lock to do so, so they rarely contend for malloc's: one heap costs them little.
MALLOC_ARENA_MAX = 1

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _M_ARENA_MAX = -1, -3, -8  # mallopt's parameters, from glibc's malloc.h

#: Bytes of work since memory was last given back from which a burst is followed by giving it back.
TRIM_MIN = 16 << 20


def _glibc() -> ctypes.CDLL | None:
    """The C library if it is glibc, else None."""
    try:
        libc = os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (ValueError, OSError):
        libc = ""
    return ctypes.CDLL(None) if libc.startswith("glibc") else None


def tune_malloc() -> bool:
    """Set :data:`MALLOC_MMAP_THRESHOLD`, :data:`MALLOC_TRIM_THRESHOLD` and :data:`MALLOC_ARENA_MAX` if the
    C library is glibc and the environment sets none of them; whether they were set. Called before the
    process starts its threads: the arenas made before stay."""
    libc = _glibc()
    if libc is None or any(
        k in os.environ for k in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_ARENA_MAX")
    ):
        return False
    return all(
        libc.mallopt(parameter, value)
        for parameter, value in (
            (_M_MMAP_THRESHOLD, MALLOC_MMAP_THRESHOLD),
            (_M_TRIM_THRESHOLD, MALLOC_TRIM_THRESHOLD),
            (_M_ARENA_MAX, MALLOC_ARENA_MAX),
        )
    )


def arrow_buffers_from_malloc() -> bool:
    """Have Arrow's buffers (text columns) come from ``malloc`` in this process, if the C library is glibc
    and ``ARROW_DEFAULT_MEMORY_POOL`` does not choose; whether they now do.

    Arrow's own pool (mimalloc) keeps what a burst freed in the arenas of
    the threads that allocated it (a serving process's committer, a decode
    worker's task thread), which neither ``malloc_trim`` nor a call from
    another thread (the one that gives memory back) reaches.
    """
    if _glibc() is None or "ARROW_DEFAULT_MEMORY_POOL" in os.environ:
        return False
    pyarrow.set_memory_pool(pyarrow.system_memory_pool())
    return True


def give_back_memory() -> bool:
    """Give the memory the C allocator holds free back to the system (glibc's ``malloc_trim``, which returns
    the free pages inside its heaps too, not only their tops); whether the C library could."""
    libc = _glibc()
    if libc is None:
        return False
    released = bool(libc.malloc_trim(0))
    log.debug("memory given back after a burst (malloc_trim: %s)", "some released" if released else "none free")
    return True


class AfterBursts:
    """Gives the memory back once a process's tasks are over: when it has done no task for ``after`` seconds
    and its tasks since it last gave memory back came to :data:`TRIM_MIN` bytes or more.

    Each task is bracketed by :meth:`begin` (with its size in bytes) and
    :meth:`end`, from any thread; a daemon thread waits and gives the memory
    back, adding 1 to ``counter`` (a ``multiprocessing.Value``, so that
    the process that started this one can count it) each time.
    """

    def __init__(self, after: float, counter: Any = None) -> None:
        self.after = after
        self.counter = counter
        self.busy = 0  # tasks under way
        self.burst = 0  # bytes of the tasks since memory was last given back
        self.idle_since = time.monotonic()
        self._changed = threading.Condition()
        threading.Thread(target=self._watch, name="windvane-give-back", daemon=True).start()

    def begin(self, size: int) -> None:
        with self._changed:
            self.busy += 1
            self.burst += size

    def end(self) -> None:
        with self._changed:
            self.busy -= 1
            if not self.busy:
                self.idle_since = time.monotonic()
                self._changed.notify()

    def _watch(self) -> None:
        while True:
            with self._changed:
                while not self._due():
                    self._changed.wait(self._wait())
                self.burst = 0
            give_back_memory()
            if self.counter is not None:
                with self.counter.get_lock():
                    self.counter.value += 1

    def _due(self) -> bool:
        """Whether the memory is to be given back now (called holding the lock)."""
        return not self.busy and self.burst >= TRIM_MIN and time.monotonic() >= self.idle_since + self.after

    def _wait(self) -> float | None:
        """Seconds until :meth:`_due` may become true without a task ending (None: not before one does)."""
        if self.busy or self.burst < TRIM_MIN:
            return None
        return max(0.0, self.idle_since + self.after - time.monotonic())
