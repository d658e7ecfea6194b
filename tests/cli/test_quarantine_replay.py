"""`windvane quarantine ls` and `windvane quarantine replay`: records quarantined by a schema go, once the schema
is fixed, into their stream, exactly once, through the real CLI on real stores.

The kill tests run `windvane quarantine replay` as a real process on a large
quarantine and kill it with SIGKILL: once stopped at its checkpoint
``replay.before_commit`` (tests/paused_process.py), where every write of
the replay is made and the commit is not, and once as
it starts validating the records it read (it says so on stderr). The next run moves every record
exactly once.
"""

from __future__ import annotations

import json
import subprocess
import sys

import msgpack
import pytest

from tests import paused_process
from tests.cli.test_serve import forward_send, post
from tests.cli.test_stream_admin import SCHEMA, T0, S, cli
from tests.forward_sender import chunk_id, packed_forward
from tests.serve_process import REPO, Serve
from windvane import arrays, neostore

STRICT = SCHEMA.format(retention="")
#: The fix: the field the records carry is declared (a new column, back-filled for the rows stored before).
FIXED = (
    STRICT
    + """
[[fields]]
name = "temp"
dtype = "float32"
"""
)
#: A "fix" that contradicts the stream: n as text.
CONTRADICTING = STRICT.replace('name = "n"\ndtype = "int64"', 'name = "n"\ndtype = "str"')


def schema(tmp_path, text: str, name: str) -> str:
    path = tmp_path / f"{name}.toml"
    path.write_text(text)
    return str(path)


def record(i: int) -> dict:
    """Record i: with temp (undeclared by STRICT); every 10th lacks the required speed (no schema fix helps)."""
    r = {"time": T0 + i, "n": i, "temp": 20 + i / 4}
    if i % 10:
        r["speed"] = i / 2
    return r


def quarantined(url: str, tmp_path, count: int, start: int = 0) -> None:
    """Import records ``start`` to ``start + count`` with STRICT: all quarantined, verbatim."""
    path = tmp_path / f"records-{start}.jsonl"
    path.write_text("".join(json.dumps(record(i)) + "\n" for i in range(start, start + count)))
    result = cli(
        "import",
        str(path),
        "--store",
        url,
        "--tag",
        "plant.a",
        "--schema",
        schema(tmp_path, STRICT, "strict"),
        "--allow-rejects",
    )
    assert result.exit_code == 0 and f"0 rows, {count:,} rejected" in result.output, result.output


def column(url: str, name: str, *, quarantine: bool = False, at: bytes | None = None) -> list:
    with arrays.open_stream(url, "plant.a", quarantine=quarantine, at=at) as s:
        return s[name][:].tolist()


def head(url: str) -> bytes:
    with neostore.open(url) as st:
        return st.last_transaction()


def assert_moved_exactly_once(url: str, count: int) -> None:
    """Every record that fits is in the stream once, with its values; every other stays quarantined, once."""
    fits = [i for i in range(count) if i % 10]
    assert column(url, "n") == fits
    assert column(url, "time") == [(T0 + i) * S for i in fits]
    assert column(url, "speed") == [i / 2 for i in fits]
    assert column(url, "temp") == [20 + i / 4 for i in fits]
    stay = [i for i in range(count) if i % 10 == 0]
    assert [json.loads(raw)["n"] for raw in column(url, "raw", quarantine=True)] == stay
    assert set(column(url, "reason", quarantine=True)) == {"required field 'speed' is missing"}


def test_ls_counts_each_tags_records_by_reason(sqlite_url, tmp_path):
    quarantined(sqlite_url, tmp_path, 30)
    result = cli("quarantine", "ls", "--store", sqlite_url)
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        "quarantine/plant.a: 30 records",
        "          27  undeclared field(s) temp (schema strict declares: speed, n)",
        "           3  required field 'speed' is missing",
    ]
    assert cli("quarantine", "ls", "plant.a", "--store", sqlite_url).output == result.output
    missing = cli("quarantine", "ls", "plant.zz", "--store", sqlite_url)
    assert missing.exit_code == 2
    assert "stream 'plant.zz' has no quarantine (windvane quarantine ls lists those there are)" in missing.output


def test_ls_of_a_store_that_does_not_exist_exits_2_and_creates_none(tmp_path):
    url = f"sqlite:///{tmp_path}/none.db"
    result = cli("quarantine", "ls", "--store", url)
    assert result.exit_code == 2 and "none.db does not exist" in result.output
    assert not (tmp_path / "none.db").exists()


def test_replay_moves_what_fits_in_one_commit_and_again_moves_nothing(store_url, tmp_path):
    quarantined(store_url, tmp_path, 50)
    before = head(store_url)
    result = cli("quarantine", "replay", "plant.a", "--schema", schema(tmp_path, FIXED, "fixed"), "--store", store_url)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith("replayed 45 records of quarantine/plant.a into stream plant.a in commit 0x")
    assert lines[0].endswith("; 5 stay in quarantine")
    assert lines[1:] == ["           5  required field 'speed' is missing"]
    assert_moved_exactly_once(store_url, 50)
    # The quarantine as it was is still in history, and the stream did not exist then.
    assert len(column(store_url, "raw", quarantine=True, at=before)) == 50
    with pytest.raises(arrays.StreamNotFoundError):
        arrays.open_stream(store_url, "plant.a", at=before)
    # Again: nothing fits that did not, nothing is committed, nothing is stored twice.
    after = head(store_url)
    again = cli("quarantine", "replay", "plant.a", "--schema", schema(tmp_path, FIXED, "fixed"), "--store", store_url)
    assert again.exit_code == 0
    assert (
        "replayed 0 records of quarantine/plant.a into stream plant.a (nothing changed, nothing committed); "
        "5 stay in quarantine" in again.output
    )
    assert head(store_url) == after
    assert_moved_exactly_once(store_url, 50)
    # Without --schema, the schema is what the stream's columns imply, as `windvane import` infers one:
    # a float column takes a missing value as NaN, so every record fits.
    quarantined(store_url, tmp_path, 10, start=50)
    third = cli("quarantine", "replay", "plant.a", "--store", store_url)
    assert third.exit_code == 0, third.output
    assert "replayed 15 records" in third.output and "; 0 stay in quarantine" in third.output
    missing = [i for i in range(50) if i % 10 == 0]
    assert column(store_url, "n") == [i for i in range(50) if i % 10] + missing + list(range(50, 60))
    assert [str(v) for v in column(store_url, "speed")[-15:]] == ["nan"] * 6 + [str(i / 2) for i in range(51, 60)]
    assert column(store_url, "raw", quarantine=True) == []


def test_replay_into_an_existing_stream_back_fills_the_column_the_fix_adds(sqlite_url, tmp_path):
    path = tmp_path / "fine.jsonl"
    path.write_text("".join(json.dumps({"time": T0 - i, "speed": 9.5, "n": -i}) + "\n" for i in (2, 1)))
    strict = schema(tmp_path, STRICT, "strict")
    assert cli("import", str(path), "--store", sqlite_url, "--tag", "plant.a", "--schema", strict).exit_code == 0
    quarantined(sqlite_url, tmp_path, 3)
    result = cli("quarantine", "replay", "plant.a", "--schema", schema(tmp_path, FIXED, "fixed"), "--store", sqlite_url)
    assert result.exit_code == 0 and "replayed 2 records" in result.output, result.output
    assert column(sqlite_url, "n") == [-2, -1, 1, 2]
    assert [str(v) for v in column(sqlite_url, "temp")] == ["nan", "nan", "20.25", "20.5"]


def test_replay_errors_exit_2_naming_the_problem(sqlite_url, tmp_path):
    missing = cli("quarantine", "replay", "plant.a", "--store", sqlite_url)
    assert missing.exit_code == 2
    assert "does not exist (only writing commands such as import, serve and tail create a store)" in missing.output
    neostore.open(sqlite_url).close()  # an empty store
    nothing = cli("quarantine", "replay", "plant.a", "--store", sqlite_url)
    assert nothing.exit_code == 2
    assert "stream 'plant.a' has no quarantine" in nothing.output
    quarantined(sqlite_url, tmp_path, 10)
    before = head(sqlite_url)
    no_schema = cli("quarantine", "replay", "plant.a", "--store", sqlite_url)
    assert no_schema.exit_code == 2
    assert "there is no stream 'plant.a' to take the schema from: give one with --schema" in no_schema.output
    assert (
        cli(
            "quarantine", "replay", "plant.a", "--schema", schema(tmp_path, FIXED, "fixed"), "--store", sqlite_url
        ).exit_code
        == 0
    )
    quarantined(sqlite_url, tmp_path, 10, start=10)
    middle = head(sqlite_url)
    clash = cli(
        "quarantine", "replay", "plant.a", "--schema", schema(tmp_path, CONTRADICTING, "bad"), "--store", sqlite_url
    )
    assert clash.exit_code == 2
    assert "stream 'plant.a' has other types for column(s) n (int64 in the stream, str here)" in clash.output
    assert head(sqlite_url) == middle and before != middle
    assert len(column(sqlite_url, "raw", quarantine=True)) == 1 + 10


def test_replay_reads_records_that_arrived_over_forward_and_http(sqlite_url, tmp_path):
    schemas = tmp_path / "schemas"
    schemas.mkdir()
    (schemas / "strict.toml").write_text(STRICT)
    with Serve(sqlite_url, schemas, tmp_path / "serve.log", "--decode-workers", "0") as server:
        cid = chunk_id()
        events = [((T0 + i) * S, {"speed": i / 2, "n": i, "temp": 1.5}) for i in (1, 2)]
        assert forward_send(server.forward_port, packed_forward("plant.a", events, cid), expect_ack=True) == cid
        body = json.dumps({"time": T0 + 3, "speed": 1.5, "n": 3, "temp": 2.5}).encode() + b"\n"
        status, _, reply = post(server.http_port, "/plant.a", body)
        assert status == 200 and reply["quarantined"] == 1, reply
        assert server.stop() == 0
    raws = column(sqlite_url, "raw", quarantine=True)
    assert msgpack.unpackb(raws[0])[1] == {"speed": 0.5, "n": 1, "temp": 1.5}  # verbatim Forward entries ...
    assert raws[2] == body.strip()  # ... and the HTTP line
    result = cli("quarantine", "replay", "plant.a", "--schema", schema(tmp_path, FIXED, "fixed"), "--store", sqlite_url)
    assert result.exit_code == 0 and "replayed 3 records" in result.output, result.output
    assert column(sqlite_url, "n") == [1, 2, 3]
    assert column(sqlite_url, "time") == [(T0 + i) * S for i in (1, 2, 3)]
    assert column(sqlite_url, "temp") == [1.5, 1.5, 2.5]
    assert column(sqlite_url, "raw", quarantine=True) == []


def test_replay_keeps_what_it_cannot_read_with_its_reason_and_commits_nothing_when_nothing_fits(sqlite_url, tmp_path):
    path = tmp_path / "access.log"
    path.write_text("GET / HTTP/1.1\n")
    strict = schema(tmp_path, STRICT, "strict")
    args = ("--store", sqlite_url, "--tag", "plant.a", "--schema", strict, "--allow-rejects")
    result = cli("import", str(path), "--format", "combined", *args)
    assert result.exit_code == 0 and "1 rejected" in result.output, result.output
    [original] = column(sqlite_url, "reason", quarantine=True)
    assert original.startswith("line 1: not a combined or common access log line (")
    before = head(sqlite_url)
    again = cli("quarantine", "replay", "plant.a", "--schema", strict, "--store", sqlite_url)
    assert again.exit_code == 0, again.output
    assert (
        "replayed 0 records" in again.output
        and "(nothing changed, nothing committed); 1 stays in quarantine" in again.output
    )
    said = f"{original}; replay cannot read this record: its bytes are not one msgpack or JSON object"
    assert said in again.output
    assert head(sqlite_url) == before and column(sqlite_url, "reason", quarantine=True) == [original]
    # With records that move, the unreadable one stays with its line and reason, replay's beside them, once.
    quarantined(sqlite_url, tmp_path, 3, start=1)
    for _ in range(2):
        moved = cli(*replay_args(sqlite_url, tmp_path))
        assert moved.exit_code == 0, moved.output
        assert column(sqlite_url, "reason", quarantine=True) == [said]
    assert column(sqlite_url, "n") == [1, 2, 3]


def replay_args(url: str, tmp_path) -> tuple[str, ...]:
    return "quarantine", "replay", "plant.a", "--schema", schema(tmp_path, FIXED, "fixed"), "--store", url


def replay_process(url: str, tmp_path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", "import windvane; windvane.main()", *replay_args(url, tmp_path)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def replay_done(url: str, tmp_path) -> str:
    process = replay_process(url, tmp_path)
    out, err = process.communicate(timeout=300)
    assert process.returncode == 0, err
    return out.decode()


BIG = 20_000


@pytest.mark.crash
@pytest.mark.parametrize("backend", ["mariadb", "sqlite"])
def test_kill_9_before_the_replay_commits_then_again_moves_every_record_once(backend, request, tmp_path):
    url = request.getfixturevalue(f"{backend}_url")
    quarantined(url, tmp_path, BIG)
    before = head(url)
    process = paused_process.paused("replay.before_commit", *replay_args(url, tmp_path))
    paused_process.kill(process)  # SIGKILL with every write of the replay made and none committed
    assert head(url) == before
    assert len(column(url, "raw", quarantine=True)) == BIG
    with pytest.raises(arrays.StreamNotFoundError):
        arrays.open_stream(url, "plant.a")
    assert "replayed 18,000 records" in replay_done(url, tmp_path)
    assert_moved_exactly_once(url, BIG)
    assert "replayed 0 records" in replay_done(url, tmp_path)
    assert_moved_exactly_once(url, BIG)


@pytest.mark.crash
def test_kill_9_while_replay_runs_then_again_moves_every_record_once(mariadb_url, tmp_path):
    quarantined(mariadb_url, tmp_path, BIG)
    before = head(mariadb_url)
    process = replay_process(mariadb_url, tmp_path)
    line = process.stderr.readline()
    assert line == f"replaying {BIG:,} quarantined records of plant.a ...\n".encode(), line + process.stderr.read()
    paused_process.kill(process)  # SIGKILL while it validates and writes the records it read
    assert head(mariadb_url) == before
    assert "replayed 18,000 records" in replay_done(mariadb_url, tmp_path)
    assert_moved_exactly_once(mariadb_url, BIG)
