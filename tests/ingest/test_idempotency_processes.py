"""Idempotency across processes: a resent chunk reaching another ``windvane serve`` on the same store.

Each service keeps the keys it committed in memory, but the check that
counts is made holding the store's commit lock against the ledger in the
store (:mod:`ingest.ledger`): two real ``windvane serve`` processes on one
store (an SQLite file, a database of the suite's MariaDB) store a chunk id
or an ``Idempotency-Key`` once, however it is resent between them, and
acknowledge it each time.
"""

from __future__ import annotations

import threading

from tests.cli.test_serve import column, forward_send, post, schemas  # noqa: F401 - schemas is a fixture
from tests.forward_sender import chunk_id, packed_forward
from tests.ingest.test_committer import read
from tests.ingest.test_health import metric, metrics
from tests.serve_process import Serve
from windvane import neostore
from windvane.ingest import Batch
from windvane.ingest.committer import GroupCommitter
from windvane.ingest.ledger import KeyLedger
from windvane.ingest.schema import SchemaSet, parse_schema

T0 = 1_700_000_000_000_000_000


def _duplicates(server: Serve) -> float:
    return metric(metrics(server), "windvane_duplicate_submissions_total")


def _two(store_url: str, schemas, tmp_path) -> tuple[Serve, Serve]:
    # One decoding process each: the two services and the test share 2 cores.
    a = Serve(store_url, schemas, tmp_path / "a.log", "--decode-workers", "0")
    try:
        b = Serve(store_url, schemas, tmp_path / "b.log", "--decode-workers", "0")
    except BaseException:
        a.kill()
        raise
    return a, b


def test_a_chunk_resent_to_a_b_a_is_stored_once_and_acknowledged_each_time(store_url, schemas, tmp_path):
    a, b = _two(store_url, schemas, tmp_path)
    with a, b:
        cid = chunk_id()
        message = packed_forward("app.resent", [(T0 + i, {"seq": i}) for i in range(3)], cid)
        body = b'{"seq": 10}\n{"seq": 11}\n'
        replies = []
        # Both services were started before anything was committed: B learns of A's commits from the store.
        for server in (a, b, a):
            assert forward_send(server.forward_port, message, expect_ack=True) == cid, server.log()
            status, _, reply = post(server.http_port, "/app/posted", body, {"Idempotency-Key": "retry-1"})
            assert status == 200, reply
            replies.append(reply)
        assert [r.get("duplicate", False) for r in replies] == [False, True, True]
        assert replies[0]["accepted"] == 2
        assert _duplicates(a) == 2
        assert _duplicates(b) == 2
        # B keeps its own commits working beside A's.
        other = chunk_id()
        assert (
            forward_send(b.forward_port, packed_forward("app.resent", [(T0 + 5, {"seq": 5})], other), expect_ack=True)
            == other
        )
        assert a.stop() == 0 and b.stop() == 0
    assert column(store_url, "app.resent", "seq") == [0, 1, 2, 5]
    assert column(store_url, "app.posted", "seq") == [10, 11]


def test_chunks_sent_to_both_services_at_once_are_each_stored_once(sqlite_url, schemas, tmp_path):
    chunks = [(chunk_id(), i) for i in range(16)]
    messages = [(cid, packed_forward("app.race", [(T0 + i, {"seq": i})], cid)) for cid, i in chunks]
    a, b = _two(sqlite_url, schemas, tmp_path)
    with a, b:
        acks: dict[str, list[bytes]] = {"a": [], "b": []}

        def send(name: str, server: Serve) -> None:
            for _, message in messages:
                acks[name].append(forward_send(server.forward_port, message, expect_ack=True, timeout=30))

        threads = [threading.Thread(target=send, args=item) for item in (("a", a), ("b", b))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        expected = [cid for cid, _ in messages]
        assert acks["a"] == expected and acks["b"] == expected, (a.log(), b.log())
        duplicates = _duplicates(a) + _duplicates(b)
        assert duplicates == len(chunks)
        assert a.stop() == 0 and b.stop() == 0
    assert sorted(column(sqlite_url, "app.race", "seq")) == list(range(16))


SCHEMAS = SchemaSet(
    [
        parse_schema(
            {"kind": "log", "tags": ["m.**"], "fields": [{"name": "v", "dtype": "int64", "required": True}]}, name="m"
        )
    ]
)


def _batch(i: int) -> Batch:
    return Batch("m.a", [T0 + i], [{"v": i}], source="test", size=16)


async def test_two_committers_share_the_ledger_without_losing_each_others_keys(sqlite_url):
    # Two services' committers (each its own Store, as two processes have) take turns on one store.
    stores = [neostore.open(sqlite_url), neostore.open(sqlite_url)]
    committers = [GroupCommitter(s, SCHEMAS) for s in stores]
    for c in committers:
        c.start()
    try:
        for i in range(40):
            first = await committers[i % 2].submit([_batch(i)], key=b"k%d" % i)
            again = await committers[(i + 1) % 2].submit([_batch(i)], key=b"k%d" % i)
            assert not first.duplicate and again.duplicate
        alone = GroupCommitter(stores[0], SCHEMAS, key_window=3600)
    finally:
        for c in committers:
            c.close()
    # Every key of both is in the store: neither rewrote a bucket without the other's keys.
    restarted = KeyLedger()
    assert restarted.load(stores[0]) == 40
    assert all(b"k%d" % i in restarted for i in range(40))
    # Alone on the store, its ledger follows its own commits: it knows every bucket up to the newest
    # commit, so the check under the next commit's lock reads nothing.
    alone.start()
    try:
        for i in range(40, 45):
            assert (await alone.submit([_batch(i)], key=b"k%d" % i)).accepted == 1
        assert alone.ledger.known == stores[0].last_transaction()
        assert (await alone.submit([_batch(3)], key=b"k3")).duplicate
    finally:
        alone.close()
    assert read(stores[0], "m.a")["v"].tolist() == list(range(45))
    for s in stores:
        s.close()
