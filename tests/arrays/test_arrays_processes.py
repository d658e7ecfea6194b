"""BigArray across OS processes: concurrent appenders, out-of-core reduction, kill -9 during appends.

Workers are separate Python processes (``python -m tests.arrays.arrays_worker``,
see that module); nothing is shared with them but the database.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys

import numpy as np
import pytest

from windvane import arrays

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def start_worker(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.arrays.arrays_worker", *args],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def read_line(proc: subprocess.Popen, timeout: float = 120.0) -> str:
    """The worker's next stdout line; fails with its stderr if it dies or stays silent."""
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    line = proc.stdout.readline() if ready else ""
    if not line:
        proc.kill()
        raise AssertionError(f"worker gave no line within {timeout} s; stderr:\n{proc.stderr.read()}")
    return line.strip()


def result_of(proc: subprocess.Popen, timeout: float = 300.0) -> dict:
    line = read_line(proc, timeout)
    assert line.startswith("result "), line
    assert proc.wait(timeout=60) == 0, proc.stderr.read()
    return json.loads(line[len("result ") :])


@pytest.mark.slow
def test_four_processes_append_concurrently(mariadb_url):
    """4 processes append to one array for 20 s: every append lands, whole and contiguous."""
    with arrays.create(mariadb_url, "log", (0, 3), "int64", chunks=(500, 3)):
        pass
    workers = [start_worker("append", mariadb_url, "log", "--worker", str(k), "--seconds", "20") for k in range(4)]
    try:
        for proc in workers:
            assert read_line(proc) == "ready"
        for proc in workers:  # all start together
            proc.stdin.write("go\n")
            proc.stdin.flush()
        results = [result_of(proc) for proc in workers]
    finally:
        for proc in workers:
            if proc.poll() is None:
                proc.kill()
    with arrays.open(mariadb_url, "log") as a:
        data = a[:]
    total_rows = sum(r["rows"] for r in results)
    total_appends = sum(r["appends"] for r in results)
    print(f"4 appenders, 20 s on MariaDB: {total_appends} appends, {total_rows} rows; per worker {results}")
    assert all(r["appends"] > 10 for r in results), results  # they really overlapped
    assert data.shape == (total_rows, 3)
    # Cut the array where (worker, seq) changes: each run must be one whole append.
    change = np.flatnonzero(np.any(data[1:, :2] != data[:-1, :2], axis=1)) + 1
    starts = np.concatenate([[0], change])
    lengths = np.diff(np.concatenate([starts, [len(data)]]))
    runs = data[starts, :2]
    assert len(starts) == total_appends, "an append was split or merged with another"
    for k, result in enumerate(results):
        mine = runs[:, 0] == k
        assert sorted(runs[mine, 1].tolist()) == list(range(result["appends"]))
    rows_in_append = data[:, 2]
    expected = np.arange(len(data)) - np.repeat(starts, lengths)  # 0..n-1 within each run
    np.testing.assert_array_equal(rows_in_append, expected)
    # Each worker's appends land in its own order.
    for k in range(4):
        seqs = runs[runs[:, 0] == k, 1]
        assert (np.diff(seqs) > 0).all()


@pytest.mark.slow
def test_out_of_core_reduction_stays_within_budget(mariadb_url):
    """Reduce an array 4x the cache budget through blocks(): exact results, RSS under budget + 150 MB."""
    budget = 64 << 20
    proc = start_worker("out-of-core", mariadb_url, "big", "--budget", str(budget), "--factor", "4")
    result = result_of(proc)
    print(
        f"out-of-core: {result['nbytes'] >> 20} MiB array, cache budget {budget >> 20} MiB, "
        f"peak RSS {result['peak_rss'] / 2**20:.0f} MiB "
        f"(after writing: {result['peak_rss_after_write'] / 2**20:.0f} MiB), "
        f"cache {result['cache']}"
    )
    assert result["nbytes"] == 4 * budget
    np.testing.assert_allclose(result["mean"], result["written_mean"], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(result["std"], result["written_std"], rtol=1e-12)
    assert result["cache"]["nbytes"] <= budget and result["cache"]["evictions"] > 0
    assert result["peak_rss"] < budget + 150 * 2**20


@pytest.mark.crash
def test_append_survives_kill_9(store_url):
    """SIGKILL during appends: the array reopens at an acknowledged length (or one append more), intact."""
    rows = 100
    with arrays.create(store_url, "log", (0,), "int64", chunks=256):
        pass
    proc = start_worker("append-forever", store_url, "log", "--rows", str(rows))
    acked = []
    try:
        while len(acked) < 30:
            line = read_line(proc)
            assert line.startswith("ack "), line
            acked.append(int(line.split()[1]))
        os.kill(proc.pid, signal.SIGKILL)
        # Whatever was printed before the kill counts as acknowledged too.
        for line in proc.stdout.read().splitlines():
            if line.startswith("ack "):
                acked.append(int(line.split()[1]))
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    with arrays.open(store_url, "log") as a:
        length = len(a)
        data = a[:]
    # The commit of the append in flight may have landed before its ack was printed.
    assert length in (acked[-1], acked[-1] + rows), (length, acked[-3:])
    np.testing.assert_array_equal(data, np.arange(length))
    assert acked == list(range(rows, rows * (len(acked) + 1), rows))


def test_streaming_moments_equal_numpy():
    """The worker's float64 streaming mean/std (both sides of the out-of-core check use it) equal numpy's."""
    from tests.arrays.arrays_worker import Moments, sensor_rows

    data = sensor_rows(0, 10_000, 5)
    moments = Moments(5)
    for start in range(0, len(data), 3_333):
        moments.add(data[start : start + 3_333])
    exact = data.astype(np.float64)
    np.testing.assert_allclose(moments.mean, exact.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(moments.std, exact.std(axis=0), rtol=1e-12)
