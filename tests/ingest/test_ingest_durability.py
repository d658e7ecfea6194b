"""An acknowledgement means committed: kill -9 of ``windvane serve`` and of mariadbd mid-run.

A resending Forward client (out_forward's behaviour, :mod:`tests.forward_sender`)
sends 200,000 events in 200 acknowledged chunks. The server, or the
database under it, is killed with SIGKILL part-way and started again; the
client resends whatever was not acknowledged. Afterwards every event
acknowledged before the kill is in the stream, and every event is there
exactly once (a chunk whose ack was lost is recognised by its chunk id).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest

from tests.forward_sender import ResendingSender, chunk_id, packed_forward
from tests.serve_process import Serve, free_port
from windvane import arrays

pytestmark = pytest.mark.crash

EVENTS = 200_000
PER_CHUNK = 1000
T0 = 1_750_000_000_000_000_000

SCHEMA = """
kind = "log"
tags = ["durable.**"]
[[fields]]
name = "seq"
dtype = "int64"
required = true
[[fields]]
name = "msg"
dtype = "str"
"""


@pytest.fixture
def schemas(tmp_path) -> Path:
    d = tmp_path / "schemas"
    d.mkdir()
    (d / "durable.toml").write_text(SCHEMA)
    return d


def make_chunks(
    total: int = EVENTS, per_chunk: int = PER_CHUNK, padding: str = ""
) -> tuple[list[tuple[bytes, bytes]], dict[bytes, range]]:
    """``total`` events numbered by ``seq``, ``per_chunk`` to a PackedForward chunk; the chunks and their seqs."""
    chunks, seqs = [], {}
    for start in range(0, total, per_chunk):
        cid = chunk_id()
        events = [
            (T0 + i * 1000, {"seq": i, "msg": f"event number {i}{padding}"}) for i in range(start, start + per_chunk)
        ]
        chunks.append((cid, packed_forward("durable.run", events, cid)))
        seqs[cid] = range(start, start + per_chunk)
    return chunks, seqs


def wait_until(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def all_acknowledged_then_stop(server: Serve, sender: ResendingSender, thread: threading.Thread, chunks: int) -> None:
    """Wait for ``sender`` to have all its ``chunks`` acknowledged, then stop the service, which must exit cleanly."""
    thread.join(300)
    assert not thread.is_alive() and len(sender.acked) == chunks, (sender.errors[-5:], server.log())
    assert server.stop() == 0, server.log()


def check_stream(url: str, acked_before: set[bytes], seqs: dict[bytes, range], total: int = EVENTS) -> None:
    """Every one of ``total`` events stored once with its time, those of ``acked_before``'s chunks among them."""
    with arrays.open_stream(url, "durable.run") as stream:
        seq = stream["seq"][:]
        time_ns = stream["time"][:]
        msg = stream["msg"][-3:]
    counts = np.bincount(seq, minlength=total)
    assert counts.max() == 1, f"{int((counts > 1).sum())} events stored more than once"
    lost = [s for cid in acked_before for s in seqs[cid] if counts[s] == 0]
    assert not lost, f"{len(lost)} acknowledged events are missing"
    assert len(seq) == total, "the client resent until everything was acknowledged"
    order = np.argsort(seq)
    assert (time_ns[order] == T0 + np.arange(total) * 1000).all()
    assert all(m.startswith("event number ") for m in msg)


def test_kill_9_of_serve_mid_run(store_url, schemas, tmp_path):
    chunks, seqs = make_chunks()
    port = free_port()
    address = f"127.0.0.1:{port}"
    log = tmp_path / "serve.log"
    server = Serve(store_url, schemas, log, forward=address, http=None)
    sender = ResendingSender("127.0.0.1", port, chunks, ack_timeout=10, hold_after=60)
    thread = threading.Thread(target=sender.run, args=(time.monotonic() + 240,))
    try:
        thread.start()
        wait_until(lambda: len(sender.acked) >= 60, 120, "60 acknowledged chunks")
        server.kill()
        acked_before = sender.acked_ids()
        assert len(acked_before) < len(chunks), "the kill came before the end of the run"
        sender.resume.set()  # sends to the dead server, then to the new one
        server = Serve(store_url, schemas, log, forward=address, http=None)
        thread.join(240)
        assert not thread.is_alive() and len(sender.acked) == len(chunks), sender.errors[-5:]
        assert server.stop() == 0, server.log()
    finally:
        server.__exit__(None, None, None)
        thread.join(1)
    assert sender.reconnects >= 1 and sender.sends > len(chunks) - len(acked_before)
    check_stream(store_url, acked_before, seqs)


def test_kill_9_of_mariadbd_mid_run(private_server, schemas, tmp_path):
    url = private_server.url("ingest")
    chunks, seqs = make_chunks()
    port = free_port()
    server = Serve(url, schemas, tmp_path / "serve.log", forward=f"127.0.0.1:{port}", http=None)
    sender = ResendingSender("127.0.0.1", port, chunks, ack_timeout=3, hold_after=60)
    thread = threading.Thread(target=sender.run, args=(time.monotonic() + 300,))
    try:
        thread.start()
        wait_until(lambda: len(sender.acked) >= 60, 120, "60 acknowledged chunks")
        private_server.kill()
        acked_before = sender.acked_ids()
        assert len(acked_before) < len(chunks)
        sender.resume.set()
        time.sleep(1)  # commits fail meanwhile: nothing is acknowledged
        private_server.start(timeout=120)  # InnoDB crash recovery
        all_acknowledged_then_stop(server, sender, thread, len(chunks))
    finally:
        server.__exit__(None, None, None)
        thread.join(1)
    # The outage reached the committer: commits failed while mariadbd was down (a lone one, or a group retried
    # one by one once it was back), or the kill cut a COMMIT off and the store asked, once the server was
    # back, whether it had committed (then nothing else ran meanwhile to fail).
    log = server.log()
    assert any(
        sign in log for sign in ("commit failed", "failed to commit", "the connection was lost while transaction")
    ), log
    check_stream(url, acked_before, seqs)
