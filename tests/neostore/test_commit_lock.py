"""SQLite's commit lock across writers: taken in turn, and given up cleanly when a wait times out.

Each connection holds the lock through descriptors of its own, which the
kernel treats as separate owners, exactly as it treats separate processes.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
from pathlib import Path

import pytest

from windvane import neostore
from windvane.neostore.backends.sqlite import SQLiteBackend
from windvane.neostore.url import parse_url


def _queued(path: Path) -> bool:
    """Whether a writer holds ``path`` (the queue: a writer waits for the lock holding it)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def _until(condition, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


def test_a_writer_waiting_for_the_lock_takes_it_before_its_holder_takes_it_again(tmp_path):
    backend = SQLiteBackend(parse_url(f"sqlite:///{tmp_path}/s.db"))
    holder, waiter = backend.connect(for_writing=True), backend.connect(for_writing=True)
    turns: list[str] = []
    backend.acquire_commit_lock(holder, 5)

    def wait() -> None:
        backend.acquire_commit_lock(waiter, 30)
        turns.append("waiter")
        backend.release_commit_lock(waiter)

    thread = threading.Thread(target=wait)
    thread.start()
    try:
        _until(lambda: _queued(tmp_path / "s.db.queue"), "the waiter to queue")
        backend.release_commit_lock(holder)
        backend.acquire_commit_lock(holder, 30)  # straight back: its turn comes after the waiter's
        turns.append("holder")
        backend.release_commit_lock(holder)
    finally:
        thread.join(30)
    assert turns == ["waiter", "holder"]
    for conn in (holder, waiter):
        backend.close_connection(conn)


def test_a_wait_that_times_out_lets_go_of_the_lock_once_it_has_it(tmp_path):
    backend = SQLiteBackend(parse_url(f"sqlite:///{tmp_path}/s.db"))
    holder, late, next_one = (backend.connect(for_writing=True) for _ in range(3))
    backend.acquire_commit_lock(holder, 5)
    with pytest.raises(neostore.CommitLockTimeout, match=r"held the commit lock of .* for more than 0\.2 s"):
        backend.acquire_commit_lock(late, 0.2)
    backend.release_commit_lock(holder)
    # The wait given up gets the lock as the holder lets go and lets go of it at once: the next writer has it.
    backend.acquire_commit_lock(next_one, 30)
    backend.release_commit_lock(next_one)
    # The connection whose wait timed out takes the lock afresh.
    backend.acquire_commit_lock(late, 30)
    backend.release_commit_lock(late)
    for conn in (holder, late, next_one):
        backend.close_connection(conn)


def test_a_try_that_finds_the_lock_held_waits_for_nothing_and_leaves_the_queue_free(tmp_path):
    backend = SQLiteBackend(parse_url(f"sqlite:///{tmp_path}/s.db"))
    holder, trier = backend.connect(for_writing=True), backend.connect(for_writing=True)
    backend.acquire_commit_lock(holder, 5)
    with pytest.raises(neostore.CommitLockTimeout):
        backend.acquire_commit_lock(trier, 0)
    assert not _queued(tmp_path / "s.db.queue")  # no wait left behind to hold it
    backend.release_commit_lock(holder)
    backend.acquire_commit_lock(trier, 0)  # free now: a try takes it
    backend.release_commit_lock(trier)
    for conn in (holder, trier):
        backend.close_connection(conn)
