"""A writer killed -9 after its uploads: its transaction is not there at all, and the same values commit later.

The child process (a real Python process on the real store and S3 server)
has one tier method wrapped so that it stops at the point named (after the
uploads, before the commit lock; or under the lock, before the rows go in),
says so, and waits to be killed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from tests.neostore.blobs.conftest import bucket_of, commit, new_oids
from tests.serve_process import REPO
from windvane import neostore

CHILD = r"""
import sys, time
from windvane import neostore
from windvane.neostore.blobs.tier import BlobTier

url, where, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
original = getattr(BlobTier, where)

def paused(self, *args):
    result = original(self, *args)
    print("paused", flush=True)
    while True:
        time.sleep(3600)

setattr(BlobTier, where, paused)
store = neostore.open(url)
txn = store.begin()
for i, oid in enumerate(store.new_oids(count)):
    txn.write(neostore.p64(oid), None, bytes([i]) * 300_000 + b"%d" % i)
txn.vote()
"""


def values(count: int) -> list[bytes]:
    return [bytes([i]) * 300_000 + b"%d" % i for i in range(count)]


@pytest.mark.parametrize("where", ["upload", "settle"])
def test_a_writer_killed_after_its_uploads_leaves_no_transaction(tiered_url, s3_env, where):
    with neostore.open(tiered_url):
        pass  # created, the location recorded
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, tiered_url, where, "3"],
        cwd=REPO,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        line = child.stdout.readline()
        assert line == b"paused\n", child.stderr.read()
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.kill()
        child.wait(30)
    bucket = bucket_of(tiered_url)
    assert len(s3_env.objects(bucket)) == 3  # its objects are there, referenced by nothing
    with neostore.open(tiered_url) as store:
        for table in ("trans", "obj", "data", "ttrans", "tobj"):  # nothing of it, not even half-voted rows
            assert store.query(f"SELECT COUNT(*) FROM {table}")[0][0] == 0, table
        oids = new_oids(store, 3)
        tid = commit(store, dict(zip(oids, values(3))))
        # Found there already, so asked for under the lock (the object may be a dead writer's) and kept.
        assert store.tier.requests == {"PUT": 3, "HEAD": 3}
        assert [store.load(oid) for oid in oids] == [(v, tid) for v in values(3)]
    assert len(s3_env.objects(bucket)) == 3
