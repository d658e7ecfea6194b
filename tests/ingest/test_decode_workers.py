"""Decoding and validating in worker processes (``--decode-workers``): same answers, same durability.

Malformed bytes found by a worker reach the connector as before (Forward:
no ack, connection closed; HTTP: a 400 naming the problem), quarantined
records keep their verbatim bytes, and a worker killed mid-submission
fails that submission only: the pool is replaced for the next ones.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import multiprocessing
import os
import signal
import socket
import time

import msgpack
import pytest

from windvane import arrays, neostore
from windvane.connectors.forward.decode import decode_entries
from windvane.connectors.forward.errors import MalformedMessage
from windvane.connectors.forward.server import ForwardServer
from windvane.connectors.http.app import HttpServer, make_app
from windvane.ingest import CommitFailed, UndecodableBatch, Undecoded
from windvane.ingest.committer import GroupCommitter
from windvane.ingest.schema import SchemaSet, parse_schema

LOG = parse_schema(
    {
        "kind": "log",
        "tags": ["app.**"],
        "fields": [{"name": "seq", "dtype": "int64", "required": True}, {"name": "msg", "dtype": "str"}],
    },
    name="log",
)
SCHEMAS = SchemaSet((LOG,))
T = 1_700_000_000


@pytest.fixture
def store(store_url):
    s = neostore.open(store_url)
    yield s
    s.close()


@pytest.fixture
def committer(store):
    c = GroupCommitter(store, SCHEMAS, decode_workers=1)
    c.start()
    yield c
    c.close()


def entries(*records: object) -> list[bytes]:
    return [msgpack.packb([T + i, r], use_bin_type=True) for i, r in enumerate(records)]


def packed(tag: str, payload: bytes, chunk: str) -> bytes:
    return msgpack.packb([tag, payload, {"chunk": chunk, "size": 1}], use_bin_type=True)


def undecoded(tag: str, payload: bytes) -> Undecoded:
    return Undecoded(tag, payload, decode_entries, (tag, len(payload), None, 1 << 20), "forward", len(payload))


def read(store, tag: str, quarantine: bool = False) -> dict:
    with arrays.open_stream(store, tag, quarantine=quarantine) as s:
        return {name: s[name][:] for name in ["time", *s.columns]}


def _sleepy_decode(payload: bytes, seconds: float) -> list:
    """A decode function that outlives the test's patience: its worker is killed meanwhile."""
    time.sleep(seconds)
    return []


async def test_worker_decodes_validates_and_quarantines_verbatim_bytes(committer, store):
    assert committer.accepts_undecoded
    good = entries({"seq": 1, "msg": "a"}, {"seq": 2, "msg": "b"})
    bad = entries("not a map")[0]
    receipt = await committer.submit([undecoded("app.w", b"".join([good[0], bad, good[1]]))])
    assert (receipt.accepted, receipt.quarantined) == (2, 1)
    assert list(read(store, "app.w")["seq"]) == [1, 2]
    assert read(store, "app.w", quarantine=True)["raw"][0] == bad  # the bytes it arrived as, from the worker


async def test_malformed_bytes_from_the_worker_carry_the_connector_error(committer):
    with pytest.raises(UndecodableBatch) as info:
        await committer.submit([undecoded("app.w", entries({"seq": 1})[0][:-2])])  # truncated entry
    assert isinstance(info.value.cause, MalformedMessage)
    assert "truncated" in str(info.value)
    receipt = await committer.submit([undecoded("app.w", entries({"seq": 3})[0])])  # later ones still flow
    assert receipt.accepted == 1


@pytest.mark.crash
async def test_a_killed_worker_fails_its_submission_and_the_pool_is_replaced(committer, store):
    # Large enough to go to a worker (smaller submissions are decoded in the committer).
    payload = b"\0" * committer.INLINE_PREPARE_BYTES
    item = Undecoded("app.w", payload, _sleepy_decode, (60.0,), "test", len(payload))
    pending = asyncio.ensure_future(committer.submit([item]))
    await asyncio.sleep(0.5)  # the worker is now inside the sleep
    pids = _worker_pids()
    assert pids
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    with pytest.raises(CommitFailed, match="decode worker died"):
        await asyncio.wait_for(pending, 30)
    receipt = await committer.submit([undecoded("app.w", entries({"seq": 7})[0])])
    assert receipt.accepted == 1
    assert list(read(store, "app.w")["seq"]) == [7]


def _exchange(port: int, messages: list[bytes]) -> bytes:
    """Send ``messages`` on one connection and read until the server closes it."""
    with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
        for m in messages:
            s.sendall(m)
        received = b""
        while True:
            data = s.recv(65536)
            if not data:
                return received
            received += data


async def test_forward_malformed_entries_via_worker_no_ack_and_closed(committer, store, caplog):
    server = ForwardServer(committer, port=0, heartbeat_udp=False)
    await server.start()
    try:
        ok = packed("app.f", b"".join(entries({"seq": 1, "msg": "x"})), "c1")
        broken = packed("app.f", entries({"seq": 2})[0][:-1], "c2")
        after = packed("app.f", b"".join(entries({"seq": 3})), "c3")
        received = await asyncio.to_thread(_exchange, server.port, [ok + broken + after])
    finally:
        await server.close()
    acks = _unpack_all(received)
    assert acks == [{"ack": "c1"}]  # the message before is acked; the malformed one and those after are not
    assert "malformed Forward message from" in caplog.text
    assert next(iter(read(store, "app.f")["seq"])) == 1


def _unpack_all(data: bytes) -> list:
    up = msgpack.Unpacker(raw=False)
    up.feed(data)
    return list(up)


def _post(port: int, body: bytes) -> tuple[int, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
    try:
        conn.request("POST", "/app/h", body, {"Content-Type": "application/x-ndjson"})
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


async def test_http_malformed_body_via_worker_is_a_400_naming_the_problem(committer, store):
    server = HttpServer(make_app(committer), port=0)
    await server.start()
    try:
        status, reply = await asyncio.to_thread(_post, server.port, b'{"seq": \n{"seq": 1\n')
        assert status == 400 and reply["error"] == "bad_json" and "line 1" in reply["message"]
        status, reply = await asyncio.to_thread(_post, server.port, b'{"seq": 1, "msg": "m"}\n["not a map"]\n')
        assert status == 200 and (reply["accepted"], reply["quarantined"]) == (1, 1)
        # A line that is not JSON is quarantined by the worker with its line number; the others are stored.
        status, reply = await asyncio.to_thread(_post, server.port, b'{"seq": 2, "msg": "m"}\n{"seq": \n')
        assert status == 200 and (reply["accepted"], reply["quarantined"]) == (1, 1)
        assert reply["reasons"] == ["line 2 of the NDJSON body is not valid JSON: column 9: Expecting value"]
    finally:
        await server.close()
    assert read(store, "app.h", quarantine=True)["raw"][:2].tolist() == [b'["not a map"]', b'{"seq": ']


def _many_small(chunk: str, pad: int = 0) -> list[tuple[list[Undecoded], bytes]]:
    """Small submissions of two tags, as many sensors' chunks arrive on one connection read: good ones,
    one with a record that does not fit (quarantined), one truncated (undecodable). ``pad``: characters
    added to each good message."""
    items = []
    for k in range(24):
        tag = f"app.s{k % 2}"
        if k == 5:
            payload = b"".join(entries({"seq": k, "msg": "fits"}, {"seq": "not a number"}))
        elif k == 11:
            payload = entries({"seq": k})[0][:-2]
        else:
            payload = b"".join(entries({"seq": k, "msg": f"m{k}" + "x" * pad}, {"seq": 100 + k}))
        items.append(([undecoded(tag, payload)], f"{chunk}-{k}".encode()))
    return items


def _outcome(result) -> tuple:
    if isinstance(result, UndecodableBatch):
        return ("undecodable", type(result.cause).__name__, str(result))
    return ("stored", result.accepted, result.quarantined, result.reasons)


@pytest.mark.parametrize("pad, to_worker", [(1500, True), (0, False)], ids=["to-a-worker", "in-the-committer"])
async def test_many_small_submissions_prepared_together_answer_as_prepared_alone(
    tmp_path, committer, store, pad, to_worker
):
    """At least BATCH_PREPARE_MIN small submissions in one call, INLINE_PREPARE_BYTES between them, go to a
    worker together; fewer bytes (sensors' one-event chunks) are prepared in the committer thread, with
    the rest of their group. Either way each gets what the committer thread makes of it alone, and
    stores the same rows and quarantine."""
    small = _many_small("b", pad)
    assert len(small) >= committer.BATCH_PREPARE_MIN
    assert (sum(len(b.payload) for batches, _ in small for b in batches) >= committer.INLINE_PREPARE_BYTES) is to_worker
    batches, submit_each = [], committer.decoding.preparer.submit_each
    committer.decoding.preparer.submit_each = lambda subs: batches.append(len(subs)) or submit_each(subs)
    together = await committer.submit_many(small)
    assert batches == ([24] if to_worker else [])  # one round trip to a worker for them all, or none
    inline_store = neostore.open(f"sqlite:///{tmp_path}/inline.db")
    inline = GroupCommitter(inline_store, SCHEMAS, decode_workers=0)
    inline.start()
    try:
        alone = [(await inline.submit_many([item]))[0] for item in _many_small("b", pad)]
    finally:
        inline.close()
    try:
        assert [_outcome(r) for r in together] == [_outcome(r) for r in alone]
        assert [_outcome(r)[0] for r in together].count("undecodable") == 1
        assert sum(r.quarantined for r in together if not isinstance(r, UndecodableBatch)) == 1
        for tag, quarantine in (("app.s0", False), ("app.s1", False), ("app.s1", True)):  # s1 got the misfit
            mine, theirs = read(store, tag, quarantine), read(inline_store, tag, quarantine)
            assert mine.keys() == theirs.keys()
            for name in mine:
                assert mine[name].tolist() == theirs[name].tolist(), (tag, quarantine, name)
    finally:
        inline_store.close()


@pytest.mark.crash
async def test_a_killed_worker_fails_the_batch_it_held_and_the_next_one_is_prepared(committer, store):
    payload = entries({"seq": 1, "msg": "x" * (committer.INLINE_PREPARE_BYTES // committer.BATCH_PREPARE_MIN)})[0]
    items = [
        ([Undecoded("app.k", payload, _sleepy_decode, (60.0,), "test", len(payload))], f"k{k}".encode())
        for k in range(committer.BATCH_PREPARE_MIN)
    ]
    pending = asyncio.ensure_future(committer.submit_many(items))
    await asyncio.sleep(0.5)  # the worker is now inside the first sleep
    for pid in _worker_pids():
        os.kill(pid, signal.SIGKILL)
    results = await asyncio.wait_for(pending, 30)
    assert all(isinstance(r, CommitFailed) and "decode worker died" in str(r) for r in results), results
    after = await committer.submit_many(_many_small("after"))
    # 24 submissions of 2 records: one record quarantined, one submission undecodable.
    assert sum(r.accepted for r in after if not isinstance(r, UndecodableBatch)) == 45


def _worker_pids() -> list[int]:
    """The decode workers' process ids: the processes this one started through multiprocessing (its pool's)."""
    return [p.pid for p in multiprocessing.active_children() if p.pid is not None]
