"""Stream append benchmarks: small commits through a kept ``arrays.StreamWriter`` vs a fresh ``open_stream``.

1. one row per commit (what ingest does for clients that wait for each ack)
   to a stream ``time, seq int64, msg str, value float64, extra str``
   (16384-row chunks) whose partial last chunk holds ``PARTIAL`` rows
   (0, 4k, 12k). Recorded: the median commit in ``extra_info["median_ms"]``.
   Goal: writer <= 1.5 ms on SQLite, whatever the partial chunk holds.
2. 1,000 rows x 6 columns (2 float64, 1 int64, 3 str) to each of 20 streams
   in one transaction. Goal: writer <= 40 ms on SQLite.
3. Many slow sensors' commit: one row to each of 1,000 of 10,000 streams in
   a transaction, staged first, against neostore alone committing as many
   objects of the row log revisions' size, alternating (no goal: what the
   commit lock is held for, an append at a time).

Each pair runs the baseline (``open_stream`` per transaction, the old path)
first in the same session; the writer's ``extra_info["speedup"]`` is the
baseline's median over its own. Run:

    .venv/bin/python -m pytest benchmarks/test_stream_append.py -p no:cacheprovider \\
        --benchmark-enable --benchmark-only --benchmark-json=/tmp/stream.json

``WINDVANE_BENCH_STREAM_MARIADB=1`` adds MariaDB (the session's shipped-config server).
Without ``--benchmark-enable`` every case runs a few commits, as a smoke test.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable

import numpy as np
import pytest

from windvane import arrays, neostore
from windvane.arrays import Column, row_log

BACKENDS = ["sqlite"] + (["mariadb"] if os.environ.get("WINDVANE_BENCH_STREAM_MARIADB") == "1" else [])
PATHS = ["open_stream", "writer"]  # baseline first: the writer's speedup refers to it
EVENT_COLUMNS = [Column("seq", "int64"), Column("msg", "str"), Column("value", "float64"), Column("extra", "str")]
WIDE_COLUMNS = [
    Column("a", "float64"),
    Column("b", "float64"),
    Column("c", "int64"),
    Column("host", "str"),
    Column("request", "str"),
    Column("line", "str"),
]
COMMITS = int(os.environ.get("WINDVANE_BENCH_STREAM_COMMITS", "300"))
WIDE_COMMITS = int(os.environ.get("WINDVANE_BENCH_STREAM_WIDE_COMMITS", "20"))


def _url(databases, backend: str, name: str) -> str:
    if backend == "mariadb":
        return databases.fresh_mariadb(name)
    return f"sqlite:///{databases.fresh_sqlite(name)}"


def _appender(store: neostore.Store, path: str, tag: str) -> Callable[[arrays.Transaction, dict], None]:
    if path == "writer":
        writer = arrays.StreamWriter(store, tag)
        return writer.append
    return lambda tx, columns: arrays.open_stream(tx, tag).append(columns)


def _event(i: int) -> dict:
    return {
        "time": np.array([i], dtype=np.int64),
        "seq": np.array([i]),
        "msg": [f"event {i}"],
        "value": np.array([i * 0.5]),
        "extra": [""],
    }


def _record(benchmark, bench_results: dict, key: str, path: str, seconds: list[float]) -> None:
    median = statistics.median(seconds)
    benchmark.extra_info["median_ms"] = median * 1e3
    benchmark.extra_info["p90_ms"] = float(np.percentile(seconds, 90)) * 1e3
    bench_results[(key, path)] = median
    baseline = bench_results.get((key, "open_stream"))
    if path == "writer" and baseline:
        benchmark.extra_info["speedup"] = baseline / median


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("partial", [0, 4000, 12000])
@pytest.mark.parametrize("backend", BACKENDS)
def test_one_row_per_commit(benchmark, databases, bench_results, backend, partial, path):
    store = neostore.open(_url(databases, backend, f"one_{backend}_{partial}_{path}"))
    try:
        arrays.create_stream(store, "events", EVENT_COLUMNS).close()
        append = _appender(store, path, "events")
        if partial:
            i = np.arange(partial)
            with arrays.transaction(store) as tx:
                append(
                    tx,
                    {
                        "time": i,
                        "seq": i,
                        "msg": [f"event {k}" for k in range(partial)],
                        "value": i * 0.5,
                        "extra": [""] * partial,
                    },
                )
        commits = COMMITS if not benchmark.disabled else 5
        state = {"next": partial}
        seconds: list[float] = []

        def run() -> None:
            for _ in range(commits):
                i = state["next"]
                started = time.perf_counter()
                with arrays.transaction(store, message="event") as tx:
                    append(tx, _event(i))
                seconds.append(time.perf_counter() - started)
                state["next"] = i + 1

        benchmark.pedantic(run, rounds=1, iterations=1)
        _record(benchmark, bench_results, f"one-{backend}-{partial}", path, seconds)
        with arrays.open_stream(store, "events") as s:
            assert len(s) == state["next"] and s["msg"][-1] == f"event {state['next'] - 1}"
    finally:
        store.close()


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_20_streams_1000_rows(benchmark, databases, bench_results, backend, path):
    store = neostore.open(_url(databases, backend, f"wide_{backend}_{path}"))
    n = 1000
    try:
        with arrays.transaction(store) as tx:
            for k in range(20):
                arrays.create_stream(tx, f"s{k}", WIDE_COLUMNS).close()
        appenders = [_appender(store, path, f"s{k}") for k in range(20)]

        def block(seq: int) -> dict:
            t = np.arange(seq * n, (seq + 1) * n, dtype=np.int64)
            return {
                "time": t,
                "a": t * 0.5,
                "b": t * 0.25,
                "c": t,
                "host": [f"host-{i % 17}" for i in range(n)],
                "request": [f"GET /api/v1/items/{seq * n + i} HTTP/1.1" for i in range(n)],
                "line": [f'level=info msg="request {i} done" dur={i % 97}ms' for i in range(n)],
            }

        commits = WIDE_COMMITS if not benchmark.disabled else 2
        data = [block(seq) for seq in range(commits)]
        seconds: list[float] = []

        def run() -> None:
            for columns in data:
                started = time.perf_counter()
                with arrays.transaction(store, message="20 streams") as tx:
                    for append in appenders:
                        append(tx, columns)
                seconds.append(time.perf_counter() - started)

        benchmark.pedantic(run, rounds=1, iterations=1)
        _record(benchmark, bench_results, f"wide-{backend}", path, seconds)
        with arrays.open_stream(store, "s19") as s:
            assert len(s) == commits * n and s["line"][-1] == data[-1]["line"][-1]
    finally:
        store.close()


FAN_STREAMS = int(os.environ.get("WINDVANE_BENCH_FAN_STREAMS", "10000"))
FAN_GROUP = 1000
FAN_ROUNDS = 20
SENSOR_COLUMNS = [Column("value", "float64"), Column("status", "int32"), Column("extra", "str")]


@pytest.mark.parametrize("backend", BACKENDS)
def test_fan_out_one_row_to_many_streams(benchmark, databases, backend):
    """Many slow sensors' commit: one row to each of 1,000 of 10,000 streams in a transaction, staged first
    (as ingest does, outside the commit lock); timed from the transaction's start to its commit's end,
    which is the time it holds the commit lock. Baseline, alternating with it: neostore alone committing
    1,000 new revisions of as many objects, of the row log revisions' size (the floor under arrays).
    ``extra_info``: ``writer_us_per_append``, ``floor_us_per_object`` (medians), ``over_floor``."""
    streams = FAN_STREAMS if not benchmark.disabled else 200
    group = min(FAN_GROUP, streams // 4)
    rounds = FAN_ROUNDS if not benchmark.disabled else 2
    store = neostore.open(_url(databases, backend, f"fan_{backend}"))
    try:
        tags = [f"plant.hall{k // 1000}.sensor{k:05d}" for k in range(streams)]
        with arrays.transaction(store) as tx:
            arrays.create_streams(tx, tags, SENSOR_COLUMNS)
        changes = arrays.ChangeLog(store)
        writers = [arrays.StreamWriter(store, tag, changes=changes) for tag in tags]
        floor_oids = [neostore.p64(oid) for oid in store.new_oids(group)]
        rng = np.random.default_rng(7)
        state = {"second": 0}

        def writer_round() -> float:
            second = state["second"] = state["second"] + 1
            start = (second * group) % streams
            row = {
                "time": np.array([second * 1_000_000_000], dtype=np.int64),
                "value": np.array([20.5]),
                "status": np.array([0], dtype=np.int32),
                "extra": [""],
            }
            staged = [(w, w.stage(row)) for w in writers[start : start + group]]
            started = time.perf_counter()
            with arrays.transaction(store, message="fan-out") as tx:
                for writer, append in staged:
                    writer.append(tx, append)
            return (time.perf_counter() - started) / group

        def floor_round() -> float:
            values = [rng.bytes(revision_size) for _ in range(group)]
            started = time.perf_counter()
            txn = store.begin()
            for oid, value in zip(floor_oids, values):
                txn.write(oid, None, value, check=False)
            txn.commit()  # one database commit, as an arrays transaction makes
            return (time.perf_counter() - started) / group

        for _ in range(2 * streams // group):  # every writer loads its stream, twice over
            writer_round()
        log = row_log.log_key(arrays.stream_path(tags[0]))
        revision_size = len(arrays.Snapshot(store).raw_get_many([log])[log])
        timings: dict[str, list[float]] = {"writer": [], "floor": []}

        def run() -> None:
            for r in range(rounds):
                order = ("writer", "floor") if r % 2 == 0 else ("floor", "writer")
                for name in order:
                    timings[name].append(writer_round() if name == "writer" else floor_round())

        benchmark.pedantic(run, rounds=1, iterations=1)
        writer_us = statistics.median(timings["writer"]) * 1e6
        floor_us = statistics.median(timings["floor"]) * 1e6
        benchmark.extra_info.update(
            writer_us_per_append=writer_us,
            floor_us_per_object=floor_us,
            over_floor=writer_us / floor_us,
            streams=streams,
            group=group,
            revision_bytes=revision_size,
            pairs=[[w * 1e6, f * 1e6] for w, f in zip(timings["writer"], timings["floor"])],
        )
        with arrays.open_stream(store, tags[group]) as s:
            assert len(s) == sum(1 for k in range(1, state["second"] + 1) if (k * group) % streams == group)
    finally:
        store.close()
