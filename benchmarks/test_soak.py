"""Soak: ``TAGS`` (100) sensors at one event a second each, plus bulk log traffic, for ``SECONDS`` (1,800).

The shape of a day at a plant, compressed into half an hour: slow sensors
that never stop, and a log shipper that sends a PackedForward chunk of
``BULK_EVENTS`` (10,000) access-log events every ``BULK_EVERY`` (10) seconds
on its own connection, both into one ``windvane serve`` (a real subprocess
with its defaults). Every ``SAMPLE_EVERY`` (30) seconds it records, in
``extra_info["samples"]``: seconds since the start, the bytes received so far
(``wire_bytes``), the store's size (``store_bytes``: the SQLite file and WAL,
or the MariaDB tablespaces), their ratio, and the server's resident memory
(``rss_bytes``, from /proc, and its parts ``rss_anon_bytes``, the process's
own, and ``rss_file_bytes``, mapped files such as SQLite's database).
Storage and memory must follow the data, not the time or the number of
commits: ``growth_over_wire`` levels off, RSS flattens.

Also recorded: ``acked``/``sent`` (every chunk acknowledged), the sensors'
ack latency p50/p99, and ``rss_max_bytes``.

Run (30 minutes per backend; not part of the test suite):

    .venv/bin/python -m pytest benchmarks/test_soak.py -p no:cacheprovider \\
        --benchmark-enable --benchmark-only --benchmark-json=/tmp/soak.json

``WINDVANE_BENCH_SOAK_SECONDS`` shortens it. Without ``--benchmark-enable`` it
runs 6 seconds, as a smoke test.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from pathlib import Path

import msgpack
import numpy as np
import pytest
from ingest_load import LOG_SCHEMA, forward_chunk
from test_ingest import store_for
from test_trickle import SENSOR_SCHEMA, Trickle, _store_bytes, _tag

from tests.serve_process import Serve
from windvane import arrays, neostore

SECONDS = int(os.environ.get("WINDVANE_BENCH_SOAK_SECONDS", "1800"))
TAGS = 100
BULK_EVENTS = 10_000
BULK_EVERY = 10
SAMPLE_EVERY = 30
BULK_TAG = "bench.logs"


def _rss(pid: int) -> dict[str, int]:
    """Resident memory in bytes: all of it, the process's own (anonymous) and mapped files (SQLite maps its
    database: pages read count here, and the kernel can drop them)."""
    wanted = {"VmRSS:": "rss_bytes", "RssAnon:": "rss_anon_bytes", "RssFile:": "rss_file_bytes"}
    found = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            name = line.split(maxsplit=1)[0]
            if name in wanted:
                found[wanted[name]] = int(line.split()[1]) * 1024
    if "rss_bytes" not in found:
        raise RuntimeError(f"no VmRSS for process {pid}")
    return found


class Bulk:
    """The log shipper: one PackedForward chunk of ``BULK_EVENTS`` events every ``BULK_EVERY`` seconds."""

    def __init__(self, seconds: int, every: int):
        self.seconds, self.every = seconds, every
        self.sent = self.acked = self.wire_bytes = self.events = 0

    async def run(self, port: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        unpacker = msgpack.Unpacker(raw=False)
        start = time.monotonic()
        try:
            for n in range(max(1, self.seconds // self.every)):
                delay = start + n * self.every - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                _, message = forward_chunk(BULK_TAG, n * BULK_EVENTS, BULK_EVENTS)
                writer.write(message)
                await writer.drain()
                self.sent += 1
                self.wire_bytes += len(message)
                await self._ack(reader, unpacker)  # one chunk in flight, as a shipper with require_ack_response
                self.acked += 1
                self.events += BULK_EVENTS
        finally:
            writer.close()

    @staticmethod
    async def _ack(reader: asyncio.StreamReader, unpacker: msgpack.Unpacker) -> None:
        for reply in unpacker:
            if "ack" in reply:
                return
        while True:
            data = await reader.read(4096)
            if not data:
                raise ConnectionError("server closed the connection")
            unpacker.feed(data)
            for reply in unpacker:
                if "ack" in reply:
                    return


class Sampler:
    """Store size and RSS every ``every`` seconds while the load runs."""

    def __init__(self, url: str, databases, pid: int, every: float, sources: list):
        self.url, self.databases, self.pid, self.every, self.sources = url, databases, pid, every, sources
        self.samples: list[dict] = []
        self.start = time.monotonic()
        self.base = _store_bytes(url, databases)

    def take(self) -> None:
        wire = sum(s.wire_bytes for s in self.sources)
        grown = _store_bytes(self.url, self.databases) - self.base
        self.samples.append(
            {
                "seconds": round(time.monotonic() - self.start, 1),
                "wire_bytes": wire,
                "store_bytes": grown,
                "growth_over_wire": grown / wire if wire else None,
                **_rss(self.pid),
            }
        )

    async def run(self, until: asyncio.Event) -> None:
        while not until.is_set():
            try:
                await asyncio.wait_for(until.wait(), self.every)
            except TimeoutError:
                pass
            # The database calls block: off the event loop, which the load shares.
            await asyncio.to_thread(self.take)


# Beyond the suite's 300 s per test: the full run is long, and a store that falls behind drains after it.
@pytest.mark.timeout(30 * SECONDS + 900)
@pytest.mark.parametrize("backend", ["sqlite", "mariadb"])
def test_soak(benchmark, request, databases, backend):
    full = request.config.getoption("benchmark_enable", False)
    seconds, every, sample_every = (SECONDS, BULK_EVERY, SAMPLE_EVERY) if full else (6, 2, 2)
    schemas = Path(tempfile.mkdtemp(prefix="wvb-soak-", dir="/tmp"))
    (schemas / "sensor.toml").write_text(SENSOR_SCHEMA)
    (schemas / "logs.toml").write_text(LOG_SCHEMA)
    url = store_for(databases, backend, f"soak_{backend}")
    sensors, bulk = Trickle(TAGS, seconds), Bulk(seconds, every)

    async def run(port: int, sampler: Sampler) -> None:
        done = asyncio.Event()
        sampling = asyncio.create_task(sampler.run(done))
        try:
            await asyncio.gather(sensors.run(port), bulk.run(port))
        finally:
            done.set()
            await sampling

    with Serve(url, schemas, Path(tempfile.gettempdir()) / f"wvb-soak-{backend}.log") as serve:
        sampler = Sampler(url, databases, serve.process.pid, sample_every, [sensors, bulk])
        benchmark.pedantic(lambda: asyncio.run(run(serve.forward_port, sampler)), rounds=1, iterations=1)
        sampler.take()
        stopped = serve.stop(timeout=600)
    samples = sampler.samples
    info = benchmark.extra_info
    info.update(
        seconds=seconds,
        tags=TAGS,
        bulk_events=bulk.events,
        sent=sensors.sent + bulk.sent,
        acked=sensors.acked + bulk.acked,
        errors=sensors.errors[:3],
        latency_p50_ms=float(np.percentile(sensors.latencies, 50) * 1e3) if sensors.latencies else None,
        latency_p99_ms=float(np.percentile(sensors.latencies, 99) * 1e3) if sensors.latencies else None,
        wire_bytes=samples[-1]["wire_bytes"],
        store_growth_bytes=samples[-1]["store_bytes"],
        growth_over_wire=samples[-1]["growth_over_wire"],
        rss_max_bytes=max(s["rss_bytes"] for s in samples),
        samples=samples,
    )
    assert stopped == 0, serve.log()
    assert not sensors.errors, sensors.errors[:3]
    assert sensors.acked == sensors.sent == TAGS * seconds and bulk.acked == bulk.sent
    with neostore.open(url) as store:
        with arrays.open_stream(store, BULK_TAG) as stream:
            assert len(stream) == bulk.events
        for k in (0, TAGS - 1):
            with arrays.open_stream(store, _tag(k)) as stream:
                assert len(stream) == seconds
