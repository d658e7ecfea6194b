"""Many slow sensors: ``TAGS`` (10,000) tags, one event per second each, through ``windvane serve``.

A plant's sensors each send about one event a second. Every tag gets one
PackedForward chunk a second (what fluentd's out_forward sends for a tag's
buffer chunk, ``require_ack_response``), spread over the second in ten slices,
over ``CONNECTIONS`` connections, for ``SECONDS`` (600). The load runs in this
process (asyncio); ``windvane serve`` is a real subprocess with its defaults (one
worker per core), and again with ``--workers 1``.

Recorded in ``extra_info``:
- ``acked`` / ``sent``: chunks acknowledged / sent (keeping up: all of them);
- ``latency_p50_ms`` / ``latency_p99_ms``: send to ack; ``late_p50_ms`` /
  ``late_p99_ms``: the same for chunks sent in the run's second half (the
  first commits create every stream: a backlog the rest must absorb);
- ``late_slices``: slices that started more than a second after their time
  (the load generator fell behind: the figures would then understate);
- ``wire_bytes``: the bytes of the Forward messages sent (the data received);
- ``store_growth_bytes`` and ``growth_over_wire``: the store's growth (the
  SQLite file and WAL, or the MariaDB tablespaces), goal <= 3;
- ``revisions_per_second``: object revisions written per second, and
  ``commits_per_second``;
- ``commit_lock_busy``: the share of the run the store's commit lock was
  held (``windvane_commit_lock_seconds_total``), and ``commit_lock_us_per_chunk``;
- ``server_cpu_seconds`` / ``server_cpu_us_per_chunk``: the CPU time the
  server's processes (its workers and their decode workers) spent during the run;
  ``server_cpu_cores`` and ``load_cpu_cores``: the cores the server and the load
  generator (this process, on the same machine) kept busy on average.

The baseline, ``test_many_slow_sensors_fluentd_baseline``: the same load
into real fluentd (``in_forward`` acknowledging each chunk once it is in a
file buffer, ``out_file``), the field's tool for this traffic. And the floor,
``test_many_slow_sensors_python_floor``: the same load into ``ack_floor.py``,
a CPython process that unpacks each chunk and acknowledges it, storing
nothing (``server_cpu_us_per_chunk`` is what the event loop and msgpack
alone cost).

Run (10 minutes per backend):

    .venv/bin/python -m pytest benchmarks/test_trickle.py -p no:cacheprovider \\
        --benchmark-enable --benchmark-only --benchmark-json=/tmp/trickle.json

``WINDVANE_BENCH_TRICKLE_SECONDS`` and ``WINDVANE_BENCH_TRICKLE_TAGS`` scale it.
Without ``--benchmark-enable`` it runs 5 seconds of 200 tags, as a smoke test.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

import msgpack
import numpy as np
import psutil
import pytest
from ingest_load import event_time
from test_ingest import store_for

from tests.fluent_programs import start_fluentd
from tests.hostile import metrics
from tests.serve_process import Serve
from windvane import arrays, neostore

SECONDS = int(os.environ.get("WINDVANE_BENCH_TRICKLE_SECONDS", "600"))
TAGS = int(os.environ.get("WINDVANE_BENCH_TRICKLE_TAGS", "10000"))
CONNECTIONS = 20
SLICES = 10

SENSOR_SCHEMA = """
kind = "sensor"
tags = ["plant.**"]
[[fields]]
name = "value"
dtype = "float64"
[[fields]]
name = "status"
dtype = "int32"
fill = -1
"""


def _tag(k: int) -> str:
    return f"plant.hall{k // 1000}.sensor{k:05d}"


def _chunk(packer: msgpack.Packer, tag: str, second: int, k: int) -> tuple[bytes, bytes]:
    cid = f"{k:05d}-{second:06d}".encode()
    entry = packer.pack(
        [
            event_time(1_700_000_000_000_000_000 + second * 1_000_000_000),
            {"value": 20.0 + ((k * 7919 + second) % 1000) / 100.0, "status": 0},
        ]
    )
    return cid, packer.pack([tag, entry, {"size": 1, "chunk": cid.decode()}])


class Trickle:
    """The load: counts, latencies and bytes, filled by the connections."""

    def __init__(self, tags: int, seconds: int):
        self.tags, self.seconds = tags, seconds
        self.sent = self.acked = self.wire_bytes = self.late_slices = 0
        self.latencies: list[float] = []
        self.sent_at: list[float] = []  # beside ``latencies``: when each chunk was sent (perf_counter)
        self.started = 0.0  # perf_counter time of the run's start, set when it starts
        self.errors: list[str] = []

    async def run(self, port: int) -> None:
        start = time.monotonic() + 0.5
        self.started = time.perf_counter() + 0.5
        await asyncio.gather(*(self._connection(port, c, start) for c in range(CONNECTIONS)))

    async def _connection(self, port: int, c: int, start: float) -> None:
        mine = list(range(c, self.tags, CONNECTIONS))
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        sent: dict[str, float] = {}
        done = asyncio.Event()
        acks = asyncio.create_task(self._acks(reader, sent, done))
        packer = msgpack.Packer(use_bin_type=True)
        try:
            for second in range(self.seconds):
                for s in range(SLICES):
                    due = start + second + s / SLICES
                    delay = due - time.monotonic()
                    if delay > 0:
                        await asyncio.sleep(delay)
                    elif delay < -1.0:
                        self.late_slices += 1
                    now = time.perf_counter()
                    for k in mine[s::SLICES]:
                        cid, message = _chunk(packer, _tag(k), second, k)
                        sent[cid.decode()] = now
                        writer.write(message)
                        self.sent += 1
                        self.wire_bytes += len(message)
                    await writer.drain()
            done.set()
            if not sent:  # every ack came already: the reader may be waiting for bytes that never come
                acks.cancel()
                await asyncio.gather(acks, return_exceptions=True)
                return
            await asyncio.wait_for(acks, timeout=120 + 10 * self.seconds)  # a store that falls behind still drains
        except Exception as exc:  # noqa: BLE001 - reported with the result
            self.errors.append(repr(exc))
            acks.cancel()
        finally:
            writer.close()

    async def _acks(self, reader: asyncio.StreamReader, sent: dict[str, float], done: asyncio.Event) -> None:
        unpacker = msgpack.Unpacker(raw=False)
        while not (done.is_set() and not sent):
            data = await reader.read(65536)
            if not data:
                raise ConnectionError("server closed the connection")
            unpacker.feed(data)
            now = time.perf_counter()
            for reply in unpacker:
                at = sent.pop(reply["ack"])
                self.latencies.append(now - at)
                self.sent_at.append(at)
                self.acked += 1


def _store_bytes(url: str, databases) -> int:
    if url.startswith("sqlite:"):
        path = url[len("sqlite:///") :]
        return sum(os.path.getsize(path + s) for s in ("", "-wal") if os.path.exists(path + s))
    name = urllib.parse.urlsplit(url).path.strip("/")
    conn = databases.mariadb_connect(name)
    try:
        cur = conn.cursor()
        # The tablespaces' allocated size, free pages included: what the disk holds.
        cur.execute(
            "SELECT COALESCE(SUM(data_length + index_length + data_free), 0) FROM information_schema.tables "
            "WHERE table_schema = ?",
            (name,),
        )
        return int(cur.fetchone()[0])
    finally:
        conn.close()


def _cpu_seconds(pid: int) -> float:
    """CPU time (user + system) of process ``pid`` and its children so far."""
    process = psutil.Process(pid)
    return sum(sum(p.cpu_times()[:2]) for p in [process, *process.children(recursive=True)])


def _p50_p99_ms(latencies: np.ndarray) -> tuple[float | None, float | None]:
    if not latencies.size:
        return None, None
    p50, p99 = np.percentile(latencies, [50, 99]) * 1e3
    return float(p50), float(p99)


def _record(info: dict, load: Trickle, tags: int, seconds: int, elapsed: float, cpu: float) -> None:
    latencies = np.asarray(load.latencies)
    since_start = np.asarray(load.sent_at) - load.started
    # The second half is the steady state: the first commits create every stream, a backlog the rest absorbs.
    overall, late = _p50_p99_ms(latencies), _p50_p99_ms(latencies[since_start >= seconds / 2])
    minute = (since_start // 60).astype(np.int64)
    info.update(
        tags=tags,
        seconds=seconds,
        sent=load.sent,
        acked=load.acked,
        late_slices=load.late_slices,
        latency_p50_ms=overall[0],
        latency_p99_ms=overall[1],
        late_p50_ms=late[0],
        late_p99_ms=late[1],
        # Ack p50 / p99 of the chunks sent in each minute of the run: how latency moves over it.
        latency_by_minute_ms=[_p50_p99_ms(latencies[minute == m]) for m in np.unique(minute)],
        wire_bytes=load.wire_bytes,
        acked_per_second=load.acked / elapsed,
        errors=load.errors[:3],
        server_cpu_seconds=cpu,
        server_cpu_us_per_chunk=cpu / max(load.acked, 1) * 1e6,
    )


# Beyond the suite's 300 s per test: the full run is long, and a store that falls behind drains after it.
@pytest.mark.timeout(30 * SECONDS + 900)
@pytest.mark.parametrize("workers", [pytest.param(1, id="one_process"), pytest.param(None, id="per_core")])
@pytest.mark.parametrize("backend", ["sqlite", "mariadb"])
def test_many_slow_sensors(benchmark, request, databases, backend, workers):
    full = request.config.getoption("benchmark_enable", False)
    tags, seconds = (TAGS, SECONDS) if full else (200, 5)
    schemas = Path(tempfile.mkdtemp(prefix="wvb-trickle-", dir="/tmp"))
    (schemas / "sensor.toml").write_text(SENSOR_SCHEMA)
    name = f"trickle_{backend}_{workers or 'per_core'}"
    url = store_for(databases, backend, name)
    load = Trickle(tags, seconds)
    with Serve(url, schemas, Path(tempfile.gettempdir()) / f"wvb-{name}.log", workers=workers) as serve:
        before = _store_bytes(url, databases)
        cpu, load_cpu = _cpu_seconds(serve.process.pid), time.process_time()
        locked = metrics(serve)["windvane_commit_lock_seconds_total"]
        started = time.monotonic()
        benchmark.pedantic(lambda: asyncio.run(load.run(serve.forward_port)), rounds=1, iterations=1)
        elapsed = time.monotonic() - started
        cpu, load_cpu = _cpu_seconds(serve.process.pid) - cpu, time.process_time() - load_cpu
        locked = metrics(serve)["windvane_commit_lock_seconds_total"] - locked
        grown = _store_bytes(url, databases) - before
        stopped = serve.stop(timeout=600)
    info = benchmark.extra_info
    _record(info, load, tags, seconds, elapsed, cpu)
    # The load shares the machine's cores with the server: what it takes of them says what was left.
    info.update(load_cpu_cores=load_cpu / elapsed, server_cpu_cores=cpu / elapsed)
    info.update(store_growth_bytes=grown, growth_over_wire=grown / load.wire_bytes)
    # The share of the run the store's commit lock was held, and for how long a chunk: near 1, commits
    # queue for the lock whatever the workers do.
    info.update(commit_lock_busy=locked / elapsed, commit_lock_us_per_chunk=locked / max(load.acked, 1) * 1e6)
    store = neostore.open(url)
    try:
        usage = store.value_usage()
        commits, cursor = 0, neostore.ZERO
        while page := store.changes_since(cursor, limit=10_000):
            commits, cursor = commits + len(page), page[-1][0]
        info.update(revisions_per_second=usage.references / elapsed, commits_per_second=commits / elapsed)
        # Figures first (a run that falls behind is worth reading), then the verdict.
        assert stopped == 0, serve.log()
        assert not load.errors, load.errors[:3]
        assert load.acked == load.sent == tags * seconds
        for k in (0, tags - 1):
            with arrays.open_stream(store, _tag(k)) as stream:
                assert len(stream) == seconds
    finally:
        store.close()


FLUENTD_CONFIG = """
<source>
  @type forward
  bind 127.0.0.1
  port {port}
</source>
<match plant.**>
  @type file
  path {out}/plant
  <buffer>
    @type file
    path {out}/buffer
    flush_interval 5s
  </buffer>
</match>
"""


@pytest.mark.timeout(30 * SECONDS + 900)
def test_many_slow_sensors_python_floor(benchmark, request):
    """The same load into ``ack_floor.py``: one CPython process on asyncio that unpacks each chunk and
    acknowledges it, storing nothing. What a chunk costs there is the floor under any Python server's."""
    full = request.config.getoption("benchmark_enable", False)
    tags, seconds = (TAGS, SECONDS) if full else (200, 5)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    floor = Path(__file__).with_name("ack_floor.py")
    with subprocess.Popen([sys.executable, str(floor), str(port)], stdout=subprocess.PIPE, text=True) as server:
        try:
            assert server.stdout is not None and server.stdout.readline() == "ready\n"
            load = Trickle(tags, seconds)
            cpu = _cpu_seconds(server.pid)
            started = time.monotonic()
            benchmark.pedantic(lambda: asyncio.run(load.run(port)), rounds=1, iterations=1)
            elapsed = time.monotonic() - started
            cpu = _cpu_seconds(server.pid) - cpu
        finally:
            server.kill()
    _record(benchmark.extra_info, load, tags, seconds, elapsed, cpu)
    assert not load.errors, load.errors[:3]
    assert load.acked == load.sent == tags * seconds


@pytest.mark.timeout(30 * SECONDS + 900)
def test_many_slow_sensors_fluentd_baseline(benchmark, request, tmp_path):
    """The same load into real fluentd 1.14.6 (``in_forward``, acknowledging each chunk once it is in a
    file buffer, into ``out_file``): the field's own tool on this machine, for the figures beside ours.
    It stores rows, not columns, and never fsyncs: a floor for the work per chunk, not a like for like."""
    full = request.config.getoption("benchmark_enable", False)
    tags, seconds = (TAGS, SECONDS) if full else (200, 5)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    load = Trickle(tags, seconds)
    with start_fluentd(FLUENTD_CONFIG.format(port=port, out=tmp_path), tmp_path) as fluentd:
        cpu = _cpu_seconds(fluentd.process.pid)
        started = time.monotonic()
        benchmark.pedantic(lambda: asyncio.run(load.run(port)), rounds=1, iterations=1)
        elapsed = time.monotonic() - started
        cpu = _cpu_seconds(fluentd.process.pid) - cpu
    _record(benchmark.extra_info, load, tags, seconds, elapsed, cpu)
    assert not load.errors, load.errors[:3]
    assert load.acked == load.sent == tags * seconds
