"""The decode stage of ``windvane serve`` for chunks as fluentd packs them (bin) beside the same chunks as str.

What a decode worker does with a PackedForward chunk, measured as the
server runs it: the chunk's entries (an :class:`ingest.batch.Undecoded`,
as the Forward connector defers them) go to one worker process of
:class:`ingest.prepare.Preparer`, which decodes them with the tag's record
type, validates them into columns and pickles the columns back; the clock
stops when every chunk's columns are in this process. The chunks are those
of ``benchmarks/test_fluentd_anchor.py`` (5,000 ~200-byte access-log events
each), with field names and text as msgpack bin (fluentd's ``out_forward``)
or as str (Fluent Bit, the client libraries). Every chunk is a new one, as
on the wire (a decode of the same bytes over and over finds them in the
CPU's caches). Each round runs both once, in the reverse order of the
round before; the ratio is the median of the rounds' ``bin / str``.
Goal: bin >= 0.95 of str.

Run: ``.venv/bin/python -m pytest benchmarks/test_bin_decode.py --benchmark-enable -s -p no:cacheprovider``
(``WINDVANE_BENCH_EVENTS``, default 1,000,000, and ``WINDVANE_BENCH_ROUNDS``, default 5, scale it).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
from ingest_load import forward_chunk
from s3_bench import alternate, per_round
from test_fluentd_anchor import ANCHOR_SCHEMA, PER_CHUNK, bin_record

from windvane.connectors.forward.decode import decode_message
from windvane.ingest.batch import Undecoded
from windvane.ingest.prepare import Preparer
from windvane.ingest.schema import load_schemas

EVENTS = int(os.environ.get("WINDVANE_BENCH_EVENTS", "1000000"))
ROUNDS = int(os.environ.get("WINDVANE_BENCH_ROUNDS", "5"))
pytestmark = pytest.mark.timeout(3600)


def undecoded(kind: str) -> list[Undecoded]:
    """The anchor's chunks of ``kind`` ("bin" or "str") as the Forward connector hands them to the workers."""
    record = {"record": bin_record} if kind == "bin" else {}
    items = []
    for first in range(0, EVENTS, PER_CHUNK):
        _, message = forward_chunk("bench.logs", first, PER_CHUNK, **record)
        decoded = decode_message(message, defer=True)
        assert decoded is not None and isinstance(decoded.batch, Undecoded)
        items.append(decoded.batch)
    return items


def test_bin_decode_stage_beside_str(benchmark, bench_results):
    root = Path(tempfile.mkdtemp(prefix="wvb-bin-decode-"))
    (root / "logs.toml").write_text(ANCHOR_SCHEMA)
    schemas = load_schemas(root)
    chunks = {kind: undecoded(kind) for kind in ("bin", "str")}
    preparer = Preparer(schemas, 1)
    preparer.start()

    def stage(kind: str) -> float:
        """Events/s of one worker through the chunks of ``kind`` (each crosses to it pickled: a new copy)."""
        started = time.perf_counter()
        for prepared in [preparer.submit([item]) for item in chunks[kind]]:
            result = prepared.result()
            assert isinstance(result, list) and not result[0][0].rejected and result[0][0].columns is not None
        seconds = time.perf_counter() - started
        return len(chunks[kind]) * PER_CHUNK / seconds

    try:
        assert stage("bin") and stage("str")  # the worker's imports and record types, before the clock
        rates: dict[str, list[float]] = {}
        benchmark.pedantic(
            lambda: rates.update(alternate({kind: lambda k=kind: stage(k) for kind in chunks}, ROUNDS)),
            rounds=1,
            iterations=1,
        )
    finally:
        preparer.close()
    pairs = per_round(rates, "bin", "str")
    info = {
        "events": EVENTS,
        "events_per_chunk": PER_CHUNK,
        "rounds": ROUNDS,
        "events_per_s": rates,
        "median_events_per_s": {kind: float(np.median(v)) for kind, v in rates.items()},
        "pair_ratios": pairs,
        "median_ratio_bin_to_str": float(np.median(pairs)),
        "goal": "bin >= 0.95 of str",
    }
    benchmark.extra_info.update(info)
    bench_results["bin_decode"] = info
    print(json.dumps(info, indent=1))
