"""Tags that cannot name a stream are quarantined under a name no sender's tag can take.

A real tag spelled like such a name (``_invalid_tag``, what the quarantine
was once called) is an ordinary stream, and a sender using the reserved
name itself is quarantined with the other unnameable tags, with a reason
saying it is reserved: the two never mix.
"""

from __future__ import annotations

import msgpack
import pytest

from tests.cli.test_serve import column, forward_send, post
from tests.forward_sender import chunk_id, packed_forward
from tests.serve_process import Serve
from windvane import arrays
from windvane.ingest.prepare import INVALID_TAG, tag_problem

T0 = 1_700_000_000_000_000_000

SCHEMA = """
kind = "log"
tags = ["**"]
[[fields]]
name = "seq"
dtype = "int64"
required = true
"""


def test_the_quarantine_name_is_a_stream_name_no_tag_can_take():
    assert arrays.stream_path(INVALID_TAG, quarantine=True)  # the quarantine can exist
    assert "reserved" in tag_problem(INVALID_TAG)
    assert tag_problem("_invalid_tag") is None


def test_a_real_tag_named_like_the_quarantine_does_not_mix_with_it(sqlite_url, tmp_path):
    schemas = tmp_path / "schemas"
    schemas.mkdir()
    (schemas / "all.toml").write_text(SCHEMA)
    sent = {"_invalid_tag": [1, 2], "bad/tag": [3], INVALID_TAG: [4], "a..b": [5]}
    with Serve(sqlite_url, schemas, tmp_path / "serve.log", "--decode-workers", "0") as server:
        for tag, seqs in sent.items():
            cid = chunk_id()
            message = packed_forward(tag, [(T0 + s, {"seq": s}) for s in seqs], cid)
            assert forward_send(server.forward_port, message, expect_ack=True) == cid, server.log()
        status, _, reply = post(server.http_port, "/_invalid_tag", b'{"seq": 6}\n')
        assert status == 200 and reply["accepted"] == 1, reply
        assert server.stop() == 0
    # The real tag is a stream of its own, with nothing quarantined.
    assert column(sqlite_url, "_invalid_tag", "seq") == [1, 2, 6]
    with pytest.raises(arrays.StreamNotFoundError):
        arrays.open_stream(sqlite_url, "_invalid_tag", quarantine=True)
    # The unnameable tags, the reserved name included, are in the quarantine, each record verbatim.
    raw = [msgpack.unpackb(r) for r in column(sqlite_url, INVALID_TAG, "raw", quarantine=True)]
    assert sorted(record[1]["seq"] for record in raw) == [3, 4, 5]
    reasons = column(sqlite_url, INVALID_TAG, "reason", quarantine=True)
    assert sum("reserved" in reason for reason in reasons) == 1
    assert all("cannot name a stream" in reason or "reserved" in reason for reason in reasons), reasons
    # And no stream takes the reserved name.
    with pytest.raises(arrays.StreamNotFoundError):
        arrays.open_stream(sqlite_url, INVALID_TAG)
