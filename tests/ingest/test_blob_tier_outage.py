"""The object store stopped under ``windvane serve``: nothing is acknowledged until it is back, then all of it is stored once.

A store URL with ``?blobs=`` and ``blob_threshold=1`` sends every value of
the run (column chunks, row logs, documents) to the suite's real S3 server. A resending Forward
client (out_forward's behaviour) sends 50,000 events; part-way the S3 server
is stopped for 10 s. Uploads then fail and are retried, so no commit can
finish and no chunk is acknowledged; the service itself keeps answering
(``/health``, new connections), as it does while the database is down. Once
the server is started again the client's resends are committed and every
event is in the stream exactly once.
"""

from __future__ import annotations

import socket
import threading
import time

import pytest

from tests.conftest import with_blobs
from tests.forward_sender import ResendingSender
from tests.ingest.test_health import health
from tests.ingest.test_ingest_durability import (  # noqa: F401 - schemas is a fixture
    all_acknowledged_then_stop,
    check_stream,
    make_chunks,
    schemas,
    wait_until,
)
from tests.serve_process import Serve, free_port

EVENTS = 50_000
PER_CHUNK = 500
OUTAGE = 10.0


@pytest.mark.slow
def test_s3_stopped_mid_run(store_url, s3_env, schemas, tmp_path):
    bucket = s3_env.new_bucket()
    # Every value goes to the object store, the row log's and the streams' documents too: each commit
    # then has something to upload, and none can be acknowledged while the server is down. (With a
    # higher threshold, a commit of rows that fill no chunk goes to the database alone, and is
    # rightly acknowledged during the outage.)
    url = with_blobs(store_url, f"blobs=s3://{bucket}/store&endpoint={s3_env.endpoint}&blob_threshold=1")
    chunks, seqs = make_chunks(EVENTS, PER_CHUNK, " " + "x" * 40)
    port = free_port()
    server = Serve(url, schemas, tmp_path / "serve.log", forward=f"127.0.0.1:{port}")
    sender = ResendingSender("127.0.0.1", port, chunks, ack_timeout=3, hold_after=30)
    thread = threading.Thread(target=sender.run, args=(time.monotonic() + 300,))
    try:
        thread.start()
        wait_until(lambda: len(sender.acked) >= 30, 120, "30 acknowledged chunks")
        assert s3_env.objects(bucket), "the run's column chunks went to the object store"
        s3_env.stop()
        try:
            time.sleep(1)  # acks of commits whose uploads were done before the stop may still arrive
            acked_before = sender.acked_ids()
            sender.resume.set()
            time.sleep(OUTAGE)
            assert sender.acked_ids() == acked_before, "a chunk was acknowledged while its values could not be stored"
            assert health(server)[0] in (200, 503), "the service still answers"
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
        finally:
            s3_env.start()
        all_acknowledged_then_stop(server, sender, thread, len(chunks))
    finally:
        server.__exit__(None, None, None)
        thread.join(1)
    assert len(acked_before) < len(chunks)
    check_stream(url, acked_before, seqs, EVENTS)
