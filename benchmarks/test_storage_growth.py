"""Storage growth of small commits: bytes with history against the bytes of the data.

One stream ``time, seq int64, value float64, msg str`` (16,384-row chunks)
gets the same rows three ways: 10,000 commits of 1 row, 1,000 of 100 rows and
100 of 10,000 rows, each commit its own transaction through a kept
``arrays.StreamWriter`` (what ``windvane serve`` does). The baseline, in the
same run, is the same rows appended in one transaction to a fresh store as
encoded chunks (what a fold leaves): the bytes of the current data.

Recorded in ``extra_info``:
- ``history_bytes``: values stored, every revision kept (``Store.value_size``);
- ``data_bytes``: the baseline's values;
- ``ratio``: history / data (goal <= 2, plus a small constant per commit);
- ``per_commit_bytes``: (history - data) / commits;
- ``beyond_2x_per_commit_bytes``: (history - 2 x data) / commits, the constant
  the goal needs (0 when history is within 2x of the data);
- ``file_bytes`` / ``file_wal_bytes``: the SQLite file and its WAL, the store open;
- ``first_ms`` / ``last_ms``: the median commit of the first and the last
  tenth of the commits (goal: flat, ``last_over_first`` near 1).

Run:

    .venv/bin/python -m pytest benchmarks/test_storage_growth.py -p no:cacheprovider \\
        --benchmark-enable --benchmark-only --benchmark-json=/tmp/growth.json

``WINDVANE_BENCH_GROWTH_MARIADB=1`` adds MariaDB. Without ``--benchmark-enable``
each shape runs a hundredth of its commits, as a smoke test.
"""

from __future__ import annotations

import os
import statistics
import time

import numpy as np
import pytest

from windvane import arrays, neostore
from windvane.arrays import Column

BACKENDS = ["sqlite"] + (["mariadb"] if os.environ.get("WINDVANE_BENCH_GROWTH_MARIADB") == "1" else [])
COLUMNS = [Column("seq", "int64"), Column("value", "float64"), Column("msg", "str")]
SHAPES = [(10_000, 1), (1_000, 100), (100, 10_000)]  # (commits, rows per commit)


def _url(databases, backend: str, name: str) -> str:
    if backend == "mariadb":
        return databases.fresh_mariadb(name)
    return f"sqlite:///{databases.fresh_sqlite(name)}"


def _rows(start: int, n: int) -> dict:
    seq = np.arange(start, start + n, dtype=np.int64)
    # Sensor-like values: a slow signal with noise, so that the codecs see real entropy.
    value = np.sin(seq / 500.0) * 20.0 + np.random.default_rng(start).normal(0, 0.1, n)
    return {
        "time": 1_700_000_000_000_000_000 + seq * 1_000_000_000,
        "seq": seq,
        "value": value,
        "msg": [f"turbine 7 reading {i}" for i in seq],
    }


def _file_bytes(url: str) -> dict[str, int]:
    """The SQLite file and its WAL (which SQLite lets grow to ``wal_autocheckpoint`` pages, 64 MiB, and
    reuses: a constant, not data)."""
    if not url.startswith("sqlite:"):
        return {}
    path = url[len("sqlite:///") :]
    return {
        "file" + s.replace("-", "_") + "_bytes": os.path.getsize(path + s)
        for s in ("", "-wal")
        if os.path.exists(path + s)
    }


def _one_shot_bytes(databases, backend: str, total: int) -> int:
    store = neostore.open(_url(databases, backend, f"growth_once_{backend}_{total}"))
    try:
        arrays.create_stream(store, "s", COLUMNS).close()
        # Stream.append writes whole encoded chunks (the partial last one too), as a fold leaves them.
        with arrays.open_stream(store, "s") as stream:
            stream.append(_rows(0, total))
        return store.value_size()
    finally:
        store.close()


@pytest.mark.parametrize("commits,rows", SHAPES, ids=[f"{c}x{r}" for c, r in SHAPES])
@pytest.mark.parametrize("backend", BACKENDS)
def test_history_grows_with_the_data(benchmark, request, databases, backend, commits, rows):
    if not request.config.getoption("benchmark_enable", False):
        commits = max(2, commits // 100)
    data_bytes = _one_shot_bytes(databases, backend, commits * rows)
    url = _url(databases, backend, f"growth_{backend}_{commits}x{rows}")
    store = neostore.open(url)
    arrays.create_stream(store, "s", COLUMNS).close()
    writer = arrays.StreamWriter(store, "s")
    seconds: list[float] = []

    def run() -> None:
        for k in range(commits):
            part = _rows(k * rows, rows)
            started = time.perf_counter()
            with arrays.transaction(store) as tx:
                writer.append(tx, part)
            seconds.append(time.perf_counter() - started)

    try:
        benchmark.pedantic(run, rounds=1, iterations=1)
        history = store.value_size()
        tenth = max(1, commits // 10)
        first, last = statistics.median(seconds[:tenth]), statistics.median(seconds[-tenth:])
        info = benchmark.extra_info
        info.update(
            history_bytes=history,
            data_bytes=data_bytes,
            ratio=history / data_bytes,
            per_commit_bytes=(history - data_bytes) / commits,
            beyond_2x_per_commit_bytes=max(0.0, history - 2 * data_bytes) / commits,
            **_file_bytes(url),
            first_ms=first * 1e3,
            last_ms=last * 1e3,
            last_over_first=last / first,
        )
        with arrays.open_stream(store, "s") as stream:  # what was stored is what was appended
            assert len(stream) == commits * rows
            np.testing.assert_array_equal(stream["seq"][-rows:], np.arange((commits - 1) * rows, commits * rows))
    finally:
        store.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_small_streams_cost_little(benchmark, request, databases, backend):
    """1,000 streams of one row, each made and filled by its own commit (a new tag's first event).

    Recorded: ``file_per_stream_bytes``, the SQLite file (closed, its WAL checkpointed)
    less the rows' values, per stream (goal <= 4 KiB); ``values_per_stream_bytes``.
    """
    streams = 1_000 if request.config.getoption("benchmark_enable", False) else 20
    url = _url(databases, backend, f"small_{backend}")
    store = neostore.open(url)

    def run() -> None:
        for k in range(streams):
            arrays.create_stream(store, f"sensor{k:04d}", COLUMNS).close()
            with arrays.transaction(store) as tx:
                arrays.StreamWriter(store, f"sensor{k:04d}").append(tx, _rows(k, 1))

    try:
        benchmark.pedantic(run, rounds=1, iterations=1)
        values = store.value_size()
        with arrays.open_stream(store, f"sensor{streams - 1:04d}") as stream:
            assert stream["seq"][:].tolist() == [streams - 1]
    finally:
        store.close()
    info = benchmark.extra_info
    info.update(streams=streams, values_per_stream_bytes=values / streams, **_file_bytes(url))
    if "file_bytes" in info:
        info["file_per_stream_bytes"] = (info["file_bytes"] - values) / streams
