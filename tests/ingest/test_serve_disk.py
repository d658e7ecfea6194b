"""A serving store's disk use follows its data: SQLite's write-ahead log stays bounded under many small
commits (``windvane serve`` checkpoints it while idle), and ``windvane store info`` says how big it is."""

from __future__ import annotations

import http.client
import os
import re

import pytest

from tests.cli.test_serve import SCHEMA, column
from tests.neostore.test_wal_bound import wal_size
from tests.ops.test_info import windvane
from tests.serve_process import Serve
from windvane.neostore.backends.sqlite import SQLiteBackend

#: Posts of one event each: their commits' log is several times the bound.
POSTS = 600


@pytest.mark.slow
def test_one_event_posts_keep_the_write_ahead_log_bounded(sqlite_url, tmp_path):
    path = sqlite_url.removeprefix("sqlite:///")
    schemas = tmp_path / "schemas"
    schemas.mkdir()
    (schemas / "app.toml").write_text(SCHEMA)
    largest = 0
    with Serve(sqlite_url, schemas, tmp_path / "serve.log", "--decode-workers", "0", forward=None) as server:
        conn = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=30)
        try:
            for seq in range(POSTS):
                # Few streams, many commits: each commit logs whole pages for one row.
                conn.request("POST", f"/app/s{seq % 3}", b'{"seq": %d}\n' % seq, {"Content-Type": "application/json"})
                reply = conn.getresponse()
                assert reply.status == 200, reply.read()
                reply.read()
                largest = max(largest, wal_size(path))
        finally:
            conn.close()
        # A commit's pages at most past the bound (the committer checkpoints once it is idle).
        assert largest <= SQLiteBackend.wal_limit + (1 << 20), largest
        # The committer may still be checkpointing after the last reply: the sizes before and after.
        before = (os.path.getsize(path), wal_size(path))
        info = windvane("store", "info", sqlite_url)
        after = (os.path.getsize(path), wal_size(path))
        assert info.returncode == 0, info.stderr
        file_size = re.search(r"^file size: +([\d,]+) bytes$", info.stdout, re.M)
        log_size = re.search(r"^write-ahead log: +([\d,]+) bytes \((\S+)-wal", info.stdout, re.M)
        assert file_size and log_size and log_size.group(2) == path, info.stdout
        for i, found in enumerate((file_size, log_size)):
            assert int(found.group(1).replace(",", "")) in (before[i], after[i]), (info.stdout, before, after)
        assert server.stop() == 0
    assert column(sqlite_url, "app.s0", "seq") == list(range(0, POSTS, 3))
