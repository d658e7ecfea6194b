"""`windvane store tier` (and pack's object store sweep), run as processes against the real S3 server."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

from tests.conftest import with_blobs
from tests.neostore.blobs.conftest import bucket_of, commit_new
from tests.serve_process import REPO
from windvane import neostore
from windvane.neostore.blobs import TIERED

BIG = [300 * 1024, 1 << 20, 2 << 20, 700 * 1024, 5 << 20]


def windvane(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "windvane", *args], capture_output=True, text=True, timeout=120, cwd=REPO
    )


def filled(url: str) -> dict[bytes, bytes]:
    values = [os.urandom(n) for n in BIG] + [b"small"]
    with neostore.open(url) as store:
        return dict(zip(commit_new(store, values), values))


def read_all(url: str, expected: dict[bytes, bytes]) -> None:
    with neostore.open(url) as store:
        assert [store.load(oid)[0] for oid in expected] == list(expected.values())


def test_tier_moves_values_out_and_back_with_progress(store_url, blobs_option, s3_env):
    expected = filled(store_url)
    location = blobs_option.split("blobs=")[1].split("&")[0]
    done = windvane("store", "tier", store_url, "--to", location, "--endpoint", s3_env.endpoint)
    assert done.returncode == 0, done.stderr
    assert "moving 5 values to " + location in done.stdout + done.stderr
    assert "moved 5 values" in done.stdout
    tiered = with_blobs(store_url, blobs_option)
    # The whole URL to use, endpoint included: following it reaches the values.
    assert f"open the store as '{neostore.redacted(tiered)}' from now on" in done.stdout
    read_all(tiered, expected)
    refused = windvane("store", "info", store_url)
    assert refused.returncode == 2
    assert f"open it as '{neostore.redacted(tiered)}', not without ?blobs=" in refused.stderr
    back = windvane("store", "tier", tiered, "--to", "db")
    assert back.returncode == 0, back.stderr
    assert f"open the store as '{neostore.redacted(store_url)}' from now on" in back.stdout
    assert f"`windvane store pack '{neostore.redacted(tiered)}' --keep-days DAYS` deletes" in back.stdout
    read_all(store_url, expected)
    assert len(s3_env.objects(bucket_of(tiered))) == 5
    # Nothing references them now: pack (with the tier, grace 0) deletes them.
    packed = windvane("store", "pack", tiered, "--keep-days", "0", "--blob-grace", "0")
    assert packed.returncode == 0, packed.stderr
    assert "object store: deleted 5 unused objects" in packed.stdout
    assert f"open it as '{neostore.redacted(store_url)}' from now on" in packed.stdout
    assert s3_env.objects(bucket_of(tiered)) == []
    # The bucket holds nothing of the store's: it opens without ?blobs= again.
    info = windvane("store", "info", store_url)
    assert info.returncode == 0, info.stderr
    read_all(store_url, expected)


def test_a_url_without_the_stores_location_is_exit_code_2_for_every_command(sqlite_url, blobs_option, s3_env):
    filled(sqlite_url)
    location = blobs_option.split("blobs=")[1].split("&")[0]
    assert windvane("store", "tier", sqlite_url, "--to", location, "--endpoint", s3_env.endpoint).returncode == 0
    hint = f"open it as '{with_blobs(sqlite_url, blobs_option)}', not without ?blobs="
    for args in (
        ["store", "tier", sqlite_url, "--to", "db"],
        ["store", "info", sqlite_url],
        ["info", "--store", sqlite_url],
        ["streams", "ls", "--store", sqlite_url],
        ["export", "s", "--store", sqlite_url, "--to", os.devnull, "--format", "csv"],
        ["store", "pack", sqlite_url, "--keep-days", "0"],
    ):
        refused = windvane(*args)
        assert refused.returncode == 2 and hint in refused.stderr, (args, refused.stderr)


def test_tier_errors_have_their_exit_codes(sqlite_url, blobs_option, s3_env):
    filled(sqlite_url)
    bad = windvane("store", "tier", sqlite_url, "--to", "gs://bucket/x")
    assert bad.returncode == 2 and "give s3://bucket/prefix or db" in bad.stderr
    no_location = windvane("store", "tier", sqlite_url, "--to", "db")
    assert no_location.returncode == 2 and "keeps no values in an object store" in no_location.stderr
    never = windvane("store", "tier", with_blobs(sqlite_url, blobs_option), "--to", "db")
    assert never.returncode == 2 and "keeps no values in an object store" in never.stderr
    twice = windvane("store", "tier", with_blobs(sqlite_url, blobs_option), "--to", "s3://b/p")
    assert twice.returncode == 2 and "--to only" in twice.stderr
    location = blobs_option.split("blobs=")[1].split("&")[0]
    assert windvane("store", "tier", sqlite_url, "--to", location, "--endpoint", s3_env.endpoint).returncode == 0
    other = windvane("store", "tier", sqlite_url, "--to", location + "-other", "--endpoint", s3_env.endpoint)
    assert other.returncode == 2 and f"keeps its big values in {location}" in other.stderr
    elsewhere = with_blobs(sqlite_url, f"blobs={location}-other&endpoint={s3_env.endpoint}")
    wrong = windvane("store", "tier", elsewhere, "--to", "db")
    assert wrong.returncode == 2 and f"keeps its big values in {location}" in wrong.stderr
    grace = windvane("store", "pack", sqlite_url, "--keep-days", "0", "--blob-grace", "soon")
    assert grace.returncode == 2 and "not a duration" in grace.stderr


KILLED = textwrap.dedent(
    """
    import sys, time
    from windvane.neostore.blobs import BlobTier, migrate
    import windvane

    migrate.BATCH_BYTES = 1 << 20  # a batch per value

    real, calls = BlobTier.upload, []

    def upload(tier, values):
        done = real(tier, values)
        calls.append(1)
        if len(calls) == 3:  # two batches moved, the third uploaded and not committed
            print("paused", file=sys.stderr, flush=True)
            while True:
                time.sleep(3600)
        return done

    BlobTier.upload = upload
    sys.argv = ["windvane", *sys.argv[1:]]
    windvane.main()
    """
)


def test_kill_9_midway_then_a_rerun_finishes(store_url, blobs_option, s3_env):
    expected = filled(store_url)
    location = blobs_option.split("blobs=")[1].split("&")[0]
    args = ["store", "tier", store_url, "--to", location, "--endpoint", s3_env.endpoint]
    child = subprocess.Popen([sys.executable, "-c", KILLED, *args], cwd=REPO, stderr=subprocess.PIPE)
    try:
        for line in child.stderr:
            if line == b"paused\n":
                break
        else:
            raise AssertionError("the move ended before its third batch")
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(30)
    tiered = with_blobs(store_url, blobs_option)
    with neostore.open(tiered) as store:
        moved = store.query(f"SELECT COUNT(*) FROM data WHERE chunks = {TIERED}")[0][0]
    assert 0 < moved < 5
    read_all(tiered, expected)  # every value readable, half moved
    rerun = windvane(*args)
    assert rerun.returncode == 0, rerun.stderr
    assert f"moved {5 - moved} values" in rerun.stdout
    read_all(tiered, expected)
