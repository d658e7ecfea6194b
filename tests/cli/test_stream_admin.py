"""`windvane streams` (list, rm, mv, trim) and schema retention applied by `windvane store pack --schemas`,
through the real CLI on real stores: rows, values, what history still shows, exit codes and messages."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
from click.testing import CliRunner

from windvane import arrays, neostore
from windvane.cli import cli as windvane_cli
from windvane.ingest import schema
from windvane.ops import info

S = 1_000_000_000
T0 = 1_714_564_800  # 2024-05-01 12:00:00 UTC, epoch seconds

SCHEMA = """
kind = "sensor"
tags = ["plant.*"]
extra = "reject"
{retention}
[[fields]]
name = "speed"
dtype = "float32"
required = true
[[fields]]
name = "n"
dtype = "int64"
required = true
"""


def cli(*args: str):
    return CliRunner().invoke(windvane_cli, list(args), catch_exceptions=False)


def write_jsonl(path, records: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


def schema_file(tmp_path, retention: str = "") -> str:
    directory = tmp_path / "schemas"
    directory.mkdir(exist_ok=True)
    path = directory / "plant.toml"
    path.write_text(SCHEMA.format(retention=retention))
    return str(path)


def imported(url: str, tmp_path, tag: str, records: list[dict], name: str = "data.jsonl") -> str:
    """Import ``records`` (JSON lines) into stream ``tag`` with the plant schema; the file's path."""
    path = write_jsonl(tmp_path / name, records)
    result = cli("import", path, "--store", url, "--tag", tag, "--schema", schema_file(tmp_path), "--allow-rejects")
    assert result.exit_code == 0, result.output
    return path


def rows(n: int, start: int = 0) -> list[dict]:
    return [{"time": T0 + i, "speed": i / 2, "n": i} for i in range(start, start + n)]


def head(url: str) -> bytes:
    with neostore.open(url) as st:
        return st.last_transaction()


def transactions(url: str) -> int:
    with neostore.open(url) as st:
        return st.counts()["trans"]


def column(url: str, tag: str, name: str, *, at: bytes | None = None, quarantine: bool = False) -> list:
    with arrays.open_stream(url, tag, at=at, quarantine=quarantine) as s:
        return s[name][:].tolist()


def test_streams_lists_rows_time_range_and_stored_bytes(sqlite_url, tmp_path):
    imported(sqlite_url, tmp_path, "plant.a", rows(3), "a.jsonl")
    imported(sqlite_url, tmp_path, "plant.b", [*rows(2), {"time": T0 + 9, "n": 9}], "b.jsonl")
    result = cli("streams", "--store", sqlite_url)
    assert result.exit_code == 0, result.output
    with neostore.open(sqlite_url, read_only=True) as st:
        found = {("quarantine/" if s.quarantine else "") + s.tag: s for s in info.describe_streams(st)}
    lines = result.output.splitlines()
    assert lines[0].split() == ["stream", "rows", "earliest", "latest", "stored", "with", "history"]
    by_name = {line.split()[0]: line.split() for line in lines[1:]}
    assert set(by_name) == {"plant.a", "plant.b", "quarantine/plant.b"}
    assert by_name["plant.a"] == [
        "plant.a",
        "3",
        "2024-05-01",
        "12:00:00",
        "UTC",
        "2024-05-01",
        "12:00:02",
        "UTC",
        f"{found['plant.a'].stored_bytes:,}",
        f"{found['plant.a'].history_bytes:,}",
    ]
    assert by_name["plant.b"][1] == "2"
    assert by_name["quarantine/plant.b"][1] == "1"


def test_streams_show_the_time_range_of_rows_in_arrival_order(sqlite_url):
    # The first and the last row arrived with 2024 times, the rows between with 2026 ones: it showed
    # 2024-03-01 12:00:00 .. 12:00:00.123 for a stream holding rows from 2026.
    first = 1_709_294_400 * 10**9  # 2024-03-01 12:00:00 UTC
    later = 1_796_172_000 * 10**9  # 2026-12-02 00:40:00 UTC
    times = [first, *(later + i * 10**9 for i in range(5)), first + 123_000_000]
    with arrays.create_stream(sqlite_url, "app.mqtt", [arrays.Column("n", "int64")], chunk_rows=2) as s:
        s.append({"time": times, "n": list(range(7))})
    result = cli("streams", "--store", sqlite_url)
    assert result.exit_code == 0, result.output
    line = next(line.split() for line in result.output.splitlines() if line.startswith("app.mqtt "))
    assert line[2:8] == ["2024-03-01", "12:00:00", "UTC", "2026-12-02", "00:40:04", "UTC"]


def test_streams_without_a_store_says_so():
    result = CliRunner(env={"WINDVANE_STORE": None}).invoke(windvane_cli, ["streams"])
    assert result.exit_code == 2
    assert "give the store whose streams to list: --store URL" in result.output


def test_rm_removes_stream_quarantine_and_positions_in_one_commit_history_keeps_them(store_url, tmp_path):
    path = imported(store_url, tmp_path, "plant.a", [*rows(3), {"time": T0 + 7, "n": 7}])
    imported(store_url, tmp_path, "plant.b", rows(2), "b.jsonl")
    before, commits = head(store_url), transactions(store_url)
    result = cli("streams", "rm", "plant.a", "--store", store_url)
    assert result.exit_code == 0, result.output
    assert "removed stream plant.a (3 rows, 1 quarantined record, 2 import records) in commit 0x" in result.output
    assert transactions(store_url) == commits + 1
    assert arrays.list_streams(store_url) == ["plant.b"]
    assert arrays.list_streams(store_url, quarantine=True) == []
    with pytest.raises(arrays.StreamNotFoundError):
        arrays.open_stream(store_url, "plant.a")
    # History still holds it: a read at the earlier tid sees every row and the quarantined record.
    assert column(store_url, "plant.a", "n", at=before) == [0, 1, 2]
    assert column(store_url, "plant.a", "speed", at=before) == [0.0, 0.5, 1.0]
    assert column(store_url, "plant.a", "time", at=before, quarantine=True) == [(T0 + 7) * S]
    assert arrays.list_streams(store_url, at=before) == ["plant.a", "plant.b"]
    assert column(store_url, "plant.b", "n") == [0, 1]  # the other stream is untouched
    # Its import position went with it: importing the file again stores it again.
    again = cli(
        "import", path, "--store", store_url, "--tag", "plant.a", "--schema", schema_file(tmp_path), "--allow-rejects"
    )
    assert again.exit_code == 0 and "already imported" not in again.output, again.output
    assert column(store_url, "plant.a", "n") == [0, 1, 2]


def test_rm_of_no_such_stream_exits_2_naming_it(sqlite_url, tmp_path):
    imported(sqlite_url, tmp_path, "plant.a", rows(1))
    before = head(sqlite_url)
    result = cli("streams", "rm", "plant.zz", "--store", sqlite_url)
    assert result.exit_code == 2
    assert "no stream 'plant.zz' in the store (windvane streams lists them)" in result.output
    assert head(sqlite_url) == before


def test_mv_renames_stream_quarantine_and_positions_history_keeps_the_old_name(store_url, tmp_path):
    path = imported(store_url, tmp_path, "plant.a", [*rows(4), {"time": T0 + 8, "speed": "x", "n": 8}])
    before = head(store_url)
    result = cli("streams", "mv", "plant.a", "plant.renamed", "--store", store_url)
    assert result.exit_code == 0, result.output
    assert "renamed stream plant.a to plant.renamed (4 rows, 1 quarantined record, 2 import records)" in result.output
    assert arrays.list_streams(store_url) == ["plant.renamed"]
    assert arrays.list_streams(store_url, quarantine=True) == ["plant.renamed"]
    assert column(store_url, "plant.renamed", "n") == [0, 1, 2, 3]
    assert column(store_url, "plant.renamed", "time") == [(T0 + i) * S for i in range(4)]
    assert len(column(store_url, "plant.renamed", "raw", quarantine=True)) == 1
    with arrays.open_stream(store_url, "plant.renamed") as s:
        assert s.attrs == {"schema": "plant", "kind": "sensor"}
    assert column(store_url, "plant.a", "n", at=before) == [0, 1, 2, 3]
    with pytest.raises(arrays.StreamNotFoundError):
        arrays.open_stream(store_url, "plant.a")
    # The renamed stream appends as any other, and its import position moved with it.
    again = cli(
        "import",
        path,
        "--store",
        store_url,
        "--tag",
        "plant.renamed",
        "--schema",
        schema_file(tmp_path),
        "--allow-rejects",
    )
    assert again.exit_code == 0 and "already imported" in again.output, again.output
    more = imported(store_url, tmp_path, "plant.renamed", rows(2, start=10), "more.jsonl")
    assert more and column(store_url, "plant.renamed", "n") == [0, 1, 2, 3, 10, 11]


def test_mv_onto_an_existing_stream_exits_2_and_changes_nothing(sqlite_url, tmp_path):
    imported(sqlite_url, tmp_path, "plant.a", rows(2), "a.jsonl")
    imported(sqlite_url, tmp_path, "plant.b", rows(3), "b.jsonl")
    before = head(sqlite_url)
    result = cli("streams", "mv", "plant.a", "plant.b", "--store", sqlite_url)
    assert result.exit_code == 2
    assert "there is a stream 'plant.b' already; remove it first (windvane streams rm plant.b)" in result.output
    assert head(sqlite_url) == before
    bad = cli("streams", "mv", "plant.a", "no/slash", "--store", sqlite_url)
    assert bad.exit_code == 2 and "must be printable and contain no '/'" in bad.output


def test_trim_drops_older_rows_in_one_commit_history_keeps_them(store_url, tmp_path):
    imported(store_url, tmp_path, "plant.a", rows(10))
    before = head(store_url)
    cutoff = "2024-05-01T12:00:04Z"
    result = cli("streams", "trim", "plant.a", "--before", cutoff, "--store", store_url)
    assert result.exit_code == 0, result.output
    assert f"trimmed 4 rows of stream plant.a before {cutoff} in commit 0x" in result.output
    assert column(store_url, "plant.a", "n") == [4, 5, 6, 7, 8, 9]
    assert column(store_url, "plant.a", "speed") == [2.0, 2.5, 3.0, 3.5, 4.0, 4.5]
    assert column(store_url, "plant.a", "time") == [(T0 + i) * S for i in range(4, 10)]
    assert column(store_url, "plant.a", "n", at=before) == list(range(10))
    # Nothing older is left: no commit at all.
    after = head(store_url)
    again = cli("streams", "trim", "plant.a", "--before", str(T0 + 4), "--store", store_url)
    assert again.exit_code == 0
    assert f"nothing to trim: no row of stream plant.a is before {T0 + 4}" in again.output
    assert head(store_url) == after
    imported(store_url, tmp_path, "plant.a", rows(1, start=20), "more.jsonl")
    assert column(store_url, "plant.a", "n") == [4, 5, 6, 7, 8, 9, 20]


def test_trim_with_a_bad_time_exits_2_saying_what_a_time_is(sqlite_url, tmp_path):
    imported(sqlite_url, tmp_path, "plant.a", rows(2))
    result = cli("streams", "trim", "plant.a", "--before", "last tuesday", "--store", sqlite_url)
    assert result.exit_code == 2
    assert "--before 'last tuesday' is not a time: give ISO 8601" in result.output
    assert column(sqlite_url, "plant.a", "n") == [0, 1]


def test_retention_is_a_duration_in_the_schema(tmp_path):
    assert schema.load_schema(schema_file(tmp_path, 'retention = "90d"')).retention == 90 * 86400
    assert schema.load_schema(schema_file(tmp_path, 'retention = "12h"')).retention == 12 * 3600
    assert schema.load_schema(schema_file(tmp_path)).retention is None
    with pytest.raises(schema.SchemaError, match=r"retention '90 days' is not a duration: give a positive number"):
        schema.load_schema(schema_file(tmp_path, 'retention = "90 days"'))


def test_store_pack_with_schemas_trims_by_retention_then_packs_the_rows_away(sqlite_url, tmp_path):
    now = int(time.time())
    days = [40, 31, 20, 1]
    records = [{"time": now - d * 86400, "speed": float(d), "n": d} for d in days]
    imported(sqlite_url, tmp_path, "plant.a", records)
    other = tmp_path / "other.toml"  # a schema outside the directory: nothing there applies to its stream
    other.write_text(SCHEMA.format(retention="").replace('"plant.*"', '"other"'))
    path = write_jsonl(tmp_path / "other.jsonl", records)
    assert cli("import", path, "--store", sqlite_url, "--tag", "other", "--schema", str(other)).exit_code == 0
    before = head(sqlite_url)
    schema_file(tmp_path, 'retention = "30d"')
    result = cli("store", "pack", sqlite_url, "--keep-days", "0", "--schemas", str(tmp_path / "schemas"))
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith("retention: stream plant.a: trimmed 2 rows older than ")
    assert lines[0].endswith(" UTC (schema plant keeps 30d)")
    assert not any("other" in line for line in lines)
    assert column(sqlite_url, "plant.a", "n") == [20, 1]
    assert column(sqlite_url, "other", "n") == [40, 31, 20, 1]
    # The pack that followed dropped the trimmed rows from history too.
    with neostore.open(sqlite_url, read_only=True) as st:
        trimmed = next(s for s in info.describe_streams(st) if s.tag == "plant.a")
    assert trimmed.history_bytes == trimmed.stored_bytes
    with pytest.raises(arrays.ArrayError):
        column(sqlite_url, "plant.a", "n", at=before)


def test_store_pack_with_a_bad_retention_exits_2_and_packs_nothing(sqlite_url, tmp_path):
    imported(sqlite_url, tmp_path, "plant.a", rows(2))
    schema_file(tmp_path, 'retention = "soon"')
    before = head(sqlite_url)
    result = cli("store", "pack", sqlite_url, "--keep-days", "0", "--schemas", str(tmp_path / "schemas"))
    assert result.exit_code == 2
    assert "retention 'soon' is not a duration" in result.output
    assert head(sqlite_url) == before
    assert column(sqlite_url, "plant.a", "n") == [0, 1]
    assert np.array_equal(column(sqlite_url, "plant.a", "n", at=before), [0, 1])


def test_a_running_serve_stores_a_tag_whose_stream_was_renamed_or_removed_under_it(sqlite_url, tmp_path):
    from tests.cli.test_serve import post
    from tests.serve_process import Serve

    schema_file(tmp_path)
    with Serve(sqlite_url, tmp_path / "schemas", tmp_path / "serve.log", "--decode-workers", "0") as server:

        def send(i: int) -> dict:
            status, _, reply = post(server.http_port, "/plant.a", json.dumps(rows(1, start=i)[0]).encode() + b"\n")
            assert status == 200, reply
            return reply

        assert send(1)["accepted"] == 1
        assert cli("streams", "mv", "plant.a", "plant.old", "--store", sqlite_url).exit_code == 0
        reply = send(2)  # the service's writer knew plant.a: the stream is made anew
        assert (reply["accepted"], reply["quarantined"]) == (1, 0), reply
        assert column(sqlite_url, "plant.a", "n") == [2]
        assert cli("streams", "rm", "plant.a", "--store", sqlite_url).exit_code == 0
        reply = send(3)
        assert (reply["accepted"], reply["quarantined"]) == (1, 0), reply
        assert server.stop() == 0
    assert column(sqlite_url, "plant.old", "n") == [1]
    assert column(sqlite_url, "plant.a", "n") == [3]
    assert arrays.list_streams(sqlite_url, quarantine=True) == []
