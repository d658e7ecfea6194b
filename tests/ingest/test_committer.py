"""The group committer: durable, grouped, idempotent, bounded, and a failure fails alone.

Everything runs against real SQLite files and the suite's real MariaDB.
"""

from __future__ import annotations

import asyncio

import msgpack
import numpy as np
import pytest

from windvane import arrays, neostore
from windvane.ingest import Backpressure, Batch, CommitFailed
from windvane.ingest.committer import INVALID_TAG, GroupCommitter
from windvane.ingest.schema import SchemaSet, parse_schema

LOG = parse_schema(
    {
        "kind": "log",
        "tags": ["app.**"],
        "fields": [
            {"name": "seq", "dtype": "int64", "required": True},
            {"name": "msg", "dtype": "str"},
            {"name": "value", "dtype": "float64"},
        ],
    },
    name="log",
)
VIB = parse_schema(
    {"kind": "vibration", "tags": ["vib.**"], "vibration": {"channels": 3, "sample_rate": 100}}, name="vib"
)
SCHEMAS = SchemaSet((LOG, VIB))


def batch(tag: str, start: int, n: int, **extra) -> Batch:
    records = [{"seq": i, "msg": f"event {i} é", "value": i / 4, **extra} for i in range(start, start + n)]
    return Batch(
        tag, [1_700_000_000_000_000_000 + i for i in range(start, start + n)], records, source="test", size=100 * n
    )


@pytest.fixture
def store(store_url):
    s = neostore.open(store_url)
    yield s
    s.close()


def committer(store, **options) -> GroupCommitter:
    c = GroupCommitter(store, SCHEMAS, **options)
    c.start()
    return c


def read(store, tag, quarantine=False):
    with arrays.open_stream(store, tag, quarantine=quarantine) as s:
        return {name: s[name][:] for name in ["time", *s.columns]}


async def test_concurrent_submissions_share_a_commit_and_are_stored_exactly(store):
    c = committer(store, interval=0.05)
    try:
        receipts = await asyncio.gather(
            *(c.submit([batch("app.a", i * 100, 100)]) for i in range(10)), c.submit([batch("app.b", 0, 7)])
        )
    finally:
        c.close()
    assert {r.tid for r in receipts} == {receipts[0].tid}, "one group commit for all of them"
    assert all(r.accepted == 100 for r in receipts[:10]) and receipts[10].accepted == 7
    a = read(store, "app.a")
    order = np.argsort(a["seq"])  # submissions may be grouped in any order; each keeps its own
    assert sorted(a["seq"].tolist()) == list(range(1000))
    assert a["time"][order].tolist() == [1_700_000_000_000_000_000 + i for i in range(1000)]
    assert list(a["msg"][order]) == [f"event {i} é" for i in range(1000)]
    assert a["value"][order].tolist() == [i / 4 for i in range(1000)]
    assert read(store, "app.b")["seq"].tolist() == list(range(7))
    assert c.metrics.streams["app.a"].events == 1000


async def test_after_a_fan_out_commit_the_next_group_gathers_for_as_long_as_it_took(store):
    """Many slow streams: a commit of at least FANOUT_STREAMS streams, under FANOUT_ROWS rows each, that
    took longer than LINGER_ABOVE makes the next group gather for as long as that commit took (what arrives
    meanwhile shares one commit); a quicker one does not; a commit that is not a fan-out halves the wait,
    and a lull longer than the wait ends it."""
    c = committer(store)
    c.pipeline.FANOUT_STREAMS = 60  # the class's 1,000 scaled down
    try:
        # The committer thread may take the first submissions before the event loop has queued the others:
        # a wait after the first arrival makes the 60 one group whatever the threads' timing.
        c.interval = 0.5
        c.pipeline.LINGER_ABOVE = 60.0  # no commit here takes a minute: each is quick enough
        quick = await asyncio.gather(*(c.submit([batch(f"app.f{k:03d}", 200 + k, 1)]) for k in range(60)))
        assert len({r.tid for r in quick}) == 1
        assert c.pipeline.linger == 0.0
        c.pipeline.LINGER_ABOVE = 0.0  # every commit is slow enough
        fan_out = await asyncio.gather(*(c.submit([batch(f"app.f{k:03d}", k, 1)]) for k in range(60)))
        c.interval = 0.0
        assert len({r.tid for r in fan_out}) == 1
        assert 0 < c.pipeline.linger <= c.pipeline.MAX_LINGER
        c.pipeline.linger = 2.0  # as if that commit had taken two seconds: the wait is long enough to observe
        first = asyncio.ensure_future(c.submit([batch("app.g0", 0, 1)]))
        await asyncio.sleep(0.3)  # well inside the wait
        second = await c.submit([batch("app.g1", 0, 1)])
        assert (await first).tid == second.tid  # gathered together
        assert c.pipeline.linger == 1.0  # two streams: not a fan-out, the wait halves
        while c.pipeline.linger:  # commits that are not fan-outs bring it down to nothing
            await c.submit([batch("app.g2", 0, 1)])
        await asyncio.gather(*(c.submit([batch(f"app.f{k:03d}", 100 + k, 1)]) for k in range(60)))
        c.pipeline.linger = 0.3  # a fan-out again, then nothing for longer than its wait
        await asyncio.sleep(1.0)
        await c.submit([batch("app.g2", 1, 1)])
        assert c.pipeline.linger == 0.0  # ended by the lull, not halved
    finally:
        c.close()
    assert sorted(arrays.list_streams(store)) == [f"app.f{k:03d}" for k in range(60)] + ["app.g0", "app.g1", "app.g2"]


async def test_a_committer_taking_turns_prepares_its_next_group_once_its_commit_has_ended(store):
    """A server's workers take turns at the store's commit lock: each takes, validates and encodes its next
    group after its commit, not while it holds that lock; every submission is committed all the same."""
    c = committer(store, takes_turns=True)
    events: list[str] = []
    writer, observer, decoding = c.pipeline.parts.writer, c.pipeline.parts.observer, c.pipeline.parts.decoding
    stage, committed, collect = writer.stage, observer.committed, decoding.collect

    def staging(*args, **kwargs):
        events.append("stage")
        return stage(*args, **kwargs)

    def collecting(*args, **kwargs):
        events.append("collect")
        return collect(*args, **kwargs)

    def recording(*args, **kwargs):
        committed(*args, **kwargs)
        events.append("committed")

    writer.stage, observer.committed, decoding.collect = staging, recording, collecting
    try:
        pending = []
        for k in range(30):  # arriving while groups before them commit
            pending.append(asyncio.ensure_future(c.submit([batch(f"app.t{k % 3}", k * 2000, 2000)])))
            await asyncio.sleep(0.002)
        receipts = await asyncio.gather(*pending)
    finally:
        c.close()
    assert len({r.tid for r in receipts}) > 1  # several groups
    for step in ("collect", "stage"):
        for k, at in enumerate(i for i, e in enumerate(events) if e == step):
            assert events[:at].count("committed") == k, events  # every group before it committed already
    assert sum(len(read(store, f"app.t{k}")["seq"]) for k in range(3)) == 30 * 2000


async def test_a_committer_taking_turns_never_lingers_after_a_fan_out_commit(store):
    """The others' commits are the rest of a committer that takes turns: after a slow fan-out commit its
    next group is taken as soon as it can be, so that a backlog drains (see ``ingest.pipeline``)."""
    c = committer(store, takes_turns=True)
    c.pipeline.FANOUT_STREAMS, c.pipeline.LINGER_ABOVE = 60, 0.0  # every commit of 60 streams is a slow fan-out
    try:
        c.interval = 0.5  # the 60 arrive as one group
        fan_out = await asyncio.gather(*(c.submit([batch(f"app.f{k:03d}", k, 1)]) for k in range(60)))
        assert len({r.tid for r in fan_out}) == 1
        assert c.pipeline.linger == 0.0
    finally:
        c.close()
    assert len(arrays.list_streams(store)) == 60


async def test_rows_of_one_submission_stay_contiguous(store):
    c = committer(store, interval=0.02)
    try:
        await asyncio.gather(*(c.submit([batch("app.a", i * 50, 50)]) for i in range(20)))
    finally:
        c.close()
    seq = read(store, "app.a")["seq"]
    for start in range(0, 1000, 50):
        block = seq[start : start + 50]
        assert block.tolist() == list(range(block[0], block[0] + 50))


async def test_bad_records_go_to_quarantine_and_the_rest_is_stored(store):
    c = committer(store)
    raw = [b"r0", b"r1", b"r2"]
    records = [{"seq": 1}, {"seq": "two"}, {"seq": 3}]
    try:
        receipt = await c.submit([Batch("app.q", [1, 2, 3], records, raw=raw.__getitem__, source="forward")])
    finally:
        c.close()
    assert (receipt.accepted, receipt.quarantined) == (2, 1)
    assert "field 'seq': expected int64, got str 'two'" in receipt.reasons[0]
    assert read(store, "app.q")["seq"].tolist() == [1, 3]
    q = read(store, "app.q", quarantine=True)
    assert q["time"].tolist() == [2]
    assert list(q["raw"]) == [b"r1"] and list(q["source"]) == ["forward"]
    assert "expected int64" in q["reason"][0]
    assert c.metrics.streams["app.q"].rejects == 1


async def test_unrouted_and_unnameable_tags_are_quarantined(store):
    c = committer(store)
    try:
        r1 = await c.submit([batch("nobody.knows", 0, 2)])
        r2 = await c.submit([batch("bad/tag", 0, 1)])
        r3 = await c.submit([batch("app.ok", 0, 1)])
    finally:
        c.close()
    assert (r1.accepted, r1.quarantined) == (0, 2)
    assert "no schema matches tag 'nobody.knows'" in r1.reasons[0]
    unrouted = read(store, "nobody.knows", quarantine=True)
    assert [msgpack.unpackb(r)[1]["seq"] for r in unrouted["raw"]] == [0, 1]
    assert "cannot name a stream" in read(store, INVALID_TAG, quarantine=True)["reason"][0]
    assert r3.accepted == 1 and r2.quarantined == 1


async def test_idempotency_key_stores_once_even_across_restarts(store):
    c = committer(store)
    try:
        first = await c.submit([batch("app.k", 0, 10)], key=b"chunk-1\n")
        again = await c.submit([batch("app.k", 0, 10)], key=b"chunk-1\n")
    finally:
        c.close()
    assert first.accepted == 10 and not first.duplicate
    assert again.duplicate and again.accepted == 0
    # A new process on the same store (as after kill -9 and restart) still knows the key.
    c2 = committer(store)
    try:
        after_restart = await c2.submit([batch("app.k", 0, 10)], key=b"chunk-1\n")
        other = await c2.submit([batch("app.k", 10, 5)], key=b"chunk-2\n")
    finally:
        c2.close()
    assert after_restart.duplicate and not other.duplicate
    assert read(store, "app.k")["seq"].tolist() == list(range(15))


async def test_resubmission_while_in_flight_waits_for_the_first(store):
    c = committer(store, interval=0.2)
    try:
        first, second = await asyncio.gather(
            c.submit([batch("app.f", 0, 3)], key=b"k"), c.submit([batch("app.f", 0, 3)], key=b"k")
        )
    finally:
        c.close()
    assert not first.duplicate and second.duplicate and second.tid == first.tid
    assert read(store, "app.f")["seq"].tolist() == [0, 1, 2]


async def test_backpressure_bounds_what_is_queued(store):
    c = committer(store, interval=0.3, max_pending_bytes=1000)
    try:
        pending = asyncio.ensure_future(c.submit([batch("app.p", 0, 8)]))  # 800 bytes queued
        await asyncio.sleep(0.05)
        with pytest.raises(Backpressure) as info:
            await c.submit([batch("app.p", 8, 8)], wait=False)
        assert info.value.retry_after >= 1 and "waiting to be committed" in str(info.value)
        # wait=True waits for room instead, and is then committed too.
        waited = await c.submit([batch("app.p", 8, 8)])
        assert (await pending).accepted == 8 and waited.accepted == 8
    finally:
        c.close()
    assert read(store, "app.p")["seq"].tolist() == list(range(16))


async def test_a_submission_that_cannot_be_stored_goes_to_quarantine_alone(store, caplog):
    # A stream that already exists with 2 channels cannot take the schema's 3-channel blocks: retrying
    # the same bytes would fail the same way, so the event is kept verbatim in quarantine and answered.
    arrays.create_stream(store, "vib.x", [arrays.Column("samples", "float32", inner=(2,))])
    c = committer(store, interval=0.1)
    block = np.zeros((4, 3), dtype="<f4").tobytes()
    try:
        results = await asyncio.gather(
            c.submit([Batch("vib.x", [7], [{"samples": block}])]),
            c.submit([batch("app.fine", 0, 5)]),
            return_exceptions=True,
        )
    finally:
        c.close()
    assert (results[0].accepted, results[0].quarantined) == (0, 1)
    assert "ColumnError" in results[0].reasons[0] and "shape (2,)" in results[0].reasons[0]
    assert results[1].accepted == 5
    assert read(store, "app.fine")["seq"].tolist() == list(range(5))
    q = read(store, "vib.x", quarantine=True)
    assert q["time"].tolist() == [7]
    assert msgpack.unpackb(q["raw"][0]) == [7, {"samples": block}]
    assert (c.metrics.failed_commits, c.metrics.internal_errors) == (0, 1)
    logged = [r for r in caplog.records if "internal error while storing" in r.getMessage()]
    assert len(logged) == 1 and logged[0].exc_info is not None  # the traceback, for the bug report
    assert ("windvane_internal_errors_total", 1) in [(n, v) for n, _, _, _, v in c.metrics.samples()]


async def test_vibration_blocks_are_stored_as_sample_rows(store):
    c = committer(store)
    blocks = [np.random.default_rng(i).random((50, 3), dtype=np.float32) for i in range(3)]
    try:
        receipt = await c.submit(
            [Batch("vib.t1", [i * 1_000_000_000 for i in range(3)], [{"samples": b.tobytes()} for b in blocks])]
        )
    finally:
        c.close()
    assert receipt.accepted == 150
    with arrays.open_stream(store, "vib.t1") as s:
        np.testing.assert_array_equal(s["samples"][:], np.concatenate(blocks))
        assert s["samples"].attrs["sample_rate"] == 100
        assert s["time"][:52].tolist()[49:] == [490_000_000, 1_000_000_000, 1_010_000_000]


async def test_close_commits_what_is_queued_then_refuses(store):
    c = committer(store, interval=0.2)
    pending = asyncio.ensure_future(c.submit([batch("app.c", 0, 4)]))
    await asyncio.sleep(0.01)
    await asyncio.to_thread(c.close)
    assert (await pending).accepted == 4
    with pytest.raises(CommitFailed, match="shutting down"):
        await c.submit([batch("app.c", 4, 1)])


def test_a_field_added_to_the_schema_becomes_a_back_filled_column_of_a_kept_writers_stream(store):
    """A kept writer knows its stream's columns without a look at the store; a schema with a field the stream
    lacks still gets its column, back-filled with the column's fill value, and later rows fill it."""
    from windvane.ingest import streams

    fields = [{"name": "value", "dtype": "float64"}]
    before = parse_schema({"kind": "sensor", "tags": ["plant.**"], "fields": fields}, name="sensor")
    after = parse_schema(
        {"kind": "sensor", "tags": ["plant.**"], "fields": [*fields, {"name": "status", "dtype": "int32", "fill": -1}]},
        name="sensor",
    )
    writers = streams.StreamWriters(store)
    for second, schema in enumerate([before, before, after, after]):
        row = {"time": np.array([second], dtype=np.int64), "value": np.array([second / 10])}
        if schema is after:
            row["status"] = np.array([second], dtype=np.int32)
        with arrays.transaction(store) as tx:
            streams.write(tx, writers, "plant.s", schema, row)
        assert writers.get("plant.s").held_columns >= {"value"}
    got = read(store, "plant.s")
    assert got["time"].tolist() == [0, 1, 2, 3]
    assert got["value"].tolist() == [0.0, 0.1, 0.2, 0.3]
    with arrays.open_stream(store, "plant.s") as stream:
        fill = stream["status"].fill_value
    assert got["status"].tolist() == [fill, fill, 2, 3]


def test_many_streams_keep_their_writers_within_the_bound_on_rows_held(store):
    """Past its byte bound, the writers shed their rows rather than being let go: each stream is read once,
    then again only when a chunk fills (its rows come back from the row log), and every row is exact."""
    from windvane.ingest import streams

    schema = parse_schema(
        {
            "kind": "sensor",
            "tags": ["plant.**"],
            "chunk_rows": 16,
            "fields": [{"name": "value", "dtype": "float64"}, {"name": "note", "dtype": "str"}],
        },
        name="sensor",
    )
    tags = [f"plant.s{k:02d}" for k in range(50)]
    writers = streams.StreamWriters(store, max_bytes=8192)
    rounds = 40
    for second in range(rounds):
        with arrays.transaction(store) as tx:
            for k, tag in enumerate(tags):
                streams.write(
                    tx,
                    writers,
                    tag,
                    schema,
                    {
                        "time": np.array([second], dtype=np.int64),
                        "value": np.array([k + second / 100]),
                        "note": [f"{tag} at {second}"],
                    },
                )
        writers.trim()
        assert writers.held_bytes() <= writers.max_bytes
    assert len(writers) == len(tags)
    # Read twice by the first write (it finds no stream, creates it, appends); a writer that shed its rows
    # reads them back at each of the two appends that filled a chunk of 16 rows, and at no other.
    loads = {writers.get(tag).loads for tag in tags}
    assert loads <= set(range(2, 3 + rounds // 16)) and max(loads) == 2 + rounds // 16, loads
    for k, tag in enumerate(tags):
        got = read(store, tag)
        assert got["time"].tolist() == list(range(rounds))
        assert got["value"].tolist() == [k + s / 100 for s in range(rounds)]
        assert got["note"].tolist() == [f"{tag} at {s}" for s in range(rounds)]


def test_streams_new_to_their_writers_are_readied_together_then_written_from_memory(store, monkeypatch):
    """``ready_unknown`` binds the names of the group's streams new to their writers and creates the
    missing ones in a few reads for all of them; their writes then read nothing more from the store.
    Nothing of them exists for a reader until the commit, and then each stream holds exactly its rows."""
    from windvane.ingest import streams

    tags = [f"app.new{k:03d}" for k in range(300)]
    with arrays.transaction(store) as tx:  # one of them exists already, with a row
        arrays.create_stream(tx, tags[7], streams.schema_columns(LOG))
        streams.write(
            tx,
            streams.StreamWriters(store),
            tags[7],
            LOG,
            {"time": np.array([-1], dtype=np.int64), "seq": np.array([-1]), "msg": ["old"], "value": np.array([0.5])},
        )
    writers = streams.StreamWriters(store)
    reads = []
    query = store.pool.query  # every read of the store runs through its pool
    monkeypatch.setattr(store.pool, "query", lambda sql, params=(): reads.append(sql) or query(sql, params))
    with arrays.transaction(store) as tx:
        streams.ready_unknown(tx, writers, {tag: LOG for tag in tags})
        readying, readiness = len(reads), list(reads)
        keys = arrays.stream_keys(tags, streams.schema_columns(LOG))
        assert set(tx.oids(keys)) == set(keys)  # bound
        assert arrays.list_streams(tx) == tags  # created in the transaction
        assert arrays.list_streams(store) == [tags[7]]  # and no object of the new ones exists for readers yet
        del reads[:]
        for k, tag in [*enumerate(tags[:7]), *enumerate(tags[8:], 8), (7, tags[7])]:
            streams.write(
                tx,
                writers,
                tag,
                LOG,
                {
                    "time": np.array([k], dtype=np.int64),
                    "seq": np.array([k]),
                    "msg": [f"m{k}"],
                    "value": np.array([k / 2]),
                },
            )
            if k == 299:
                assert reads == []  # each new stream's writer loaded from what was read ahead or written
    assert readying <= 12, readiness  # a few statements for 300 streams (binding, reading, path checks)
    assert arrays.list_streams(store) == tags
    for k, tag in enumerate(tags):
        got = read(store, tag)
        old = ([-1], ["old"], [0.5]) if k == 7 else ([], [], [])
        assert (got["seq"].tolist(), got["msg"].tolist(), got["value"].tolist()) == (
            old[0] + [k],
            old[1] + [f"m{k}"],
            old[2] + [k / 2],
        )
    # Their writers know them now: the next group binds nothing for them.
    assert all(writers.get(tag).held_columns is not None for tag in tags)


async def test_idle_after_a_burst_the_stream_writers_let_go_of_the_rows_they_hold(store):
    # Each stream's writer holds the rows of its partial last chunk between commits, here 8 MiB of
    # messages: after a burst they would stay in memory until the chunk fills. Let go of, they are
    # still there: the stream's row log keeps them, and appends go on from them.
    c = committer(store)
    try:
        await c.submit([batch("app.a", 0, 8, msg="x" * (1 << 20))])
        held = c.pipeline.parts.writer.held_bytes
        await asyncio.to_thread(c.let_go_of_the_last)
        let_go = c.pipeline.parts.writer.held_bytes
        await c.submit([batch("app.a", 8, 2)])
    finally:
        c.close()
    assert held >= 8 << 20 and let_go == 0
    a = read(store, "app.a")
    assert a["seq"].tolist() == list(range(10))
    assert list(a["msg"]) == ["x" * (1 << 20)] * 8 + ["event 8 é", "event 9 é"]
