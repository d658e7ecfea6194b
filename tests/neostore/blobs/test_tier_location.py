"""A store records where its big values are, and refuses to be opened as if they were elsewhere or nowhere."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from tests.neostore.blobs.conftest import bucket_of, commit
from windvane import neostore


def without_tier(url: str) -> str:
    """``url`` with its blob tier options taken off."""
    base, _, query = url.partition("?")
    kept = [o for o in query.split("&") if o.split("=")[0] not in ("blobs", "endpoint", "blob_threshold")]
    return base + ("?" + "&".join(kept) if kept else "")


@pytest.mark.parametrize("read_only", [False, True])
def test_opening_without_the_recorded_location_is_refused(tiered_url, read_only):
    with neostore.open(tiered_url) as store:
        oid = store.new_oid()
        commit(store, {oid: os.urandom(300_000)})
    recorded = f"s3://{bucket_of(tiered_url)}/store"
    with pytest.raises(neostore.BlobLocationError, match=f"keeps its big values in {recorded}") as caught:
        neostore.open(without_tier(tiered_url), read_only=read_only)
    # The whole URL to use, its endpoint included (the store recorded it with the location).
    assert f"open it as '{neostore.redacted(tiered_url)}'" in str(caught.value)
    assert str(caught.value).endswith("not without ?blobs=")


@pytest.mark.parametrize("read_only", [False, True])
def test_opening_with_another_bucket_or_prefix_is_refused(tiered_url, s3_env, read_only):
    with neostore.open(tiered_url) as store:
        commit(store, {store.new_oid(): os.urandom(300_000)})
    recorded = f"s3://{bucket_of(tiered_url)}/store"
    for other in (f"s3://{s3_env.new_bucket()}/store", f"{recorded}/deeper", f"s3://{bucket_of(tiered_url)}/other"):
        url = tiered_url.replace(f"blobs={recorded}", f"blobs={other}")
        with pytest.raises(neostore.BlobLocationError, match=f"keeps its big values in {recorded}: ") as caught:
            neostore.open(url, read_only=read_only)
        assert f"not with ?blobs={other} " in str(caught.value)
        assert f"open it as '{neostore.redacted(tiered_url)}'" in str(caught.value)


def test_the_location_is_recorded_at_first_writable_open_not_by_a_reader(store_url, blobs_option):
    with neostore.open(store_url) as store:  # a store without a tier
        commit(store, {store.new_oid(): b"x" * 1000})
    tiered = store_url + ("&" if "?" in store_url else "?") + blobs_option
    with neostore.open(tiered, read_only=True):
        pass
    with neostore.open(store_url, read_only=True):  # the reader recorded nothing
        pass
    with neostore.open(tiered):
        pass
    with pytest.raises(neostore.BlobLocationError, match="keeps its big values in s3://"):
        neostore.open(store_url, read_only=True)


def test_the_endpoint_is_not_part_of_the_location(tiered_url, relay):
    """The same bucket reached at another address (a relay, a new DNS name) is the same location."""
    endpoint = tiered_url.split("endpoint=")[1].split("&")[0]
    value = os.urandom(300_000)
    with neostore.open(tiered_url) as store:
        oid = store.new_oid()
        tid = commit(store, {oid: value})
    with neostore.open(tiered_url.replace(endpoint, relay.endpoint), read_only=True) as store:
        assert store.load(oid) == (value, tid)
    assert relay.seen.requests["GET"] == 1


def test_a_sweep_leaving_nothing_drops_the_location_and_a_writer_tiering_records_it_again(tiered_url):
    with neostore.open(tiered_url, blob_grace=0) as writer:
        commit(writer, {writer.new_oid(): b"small"})  # nothing in the object store
        stats = writer.pack(writer.last_transaction())
        assert stats.blobs is not None and stats.blobs.location_forgotten
        with neostore.open(without_tier(tiered_url), read_only=True):  # nothing there: no ?blobs= needed
            pass
        # A writer opened before the sweep tiers a value: the store records where it went.
        commit(writer, {writer.new_oid(): os.urandom(300_000)})
    with pytest.raises(neostore.BlobLocationError, match="keeps its big values in s3://"):
        neostore.open(without_tier(tiered_url), read_only=True)


def test_processes_opening_a_new_store_together_record_its_location_once(tiered_url):
    """The workers of one server open a new store at once: each open succeeds, one location is recorded."""
    script = (
        "import sys, time\n"
        "from windvane import neostore\n"
        "time.sleep(max(0.0, float(sys.argv[2]) - time.time()))\n"
        "neostore.open(sys.argv[1]).close()\n"
    )
    at = time.time() + 3  # after every interpreter has started
    openers = [subprocess.Popen([sys.executable, "-c", script, tiered_url, str(at)]) for _ in range(4)]
    assert [p.wait(timeout=120) for p in openers] == [0] * 4
    with neostore.open(tiered_url) as store:
        assert store.query("SELECT COUNT(*) FROM config WHERE name = 'blobs'") == [(1,)]
