"""`windvane demo`: the real command in a fresh directory, its figures checked against the store and the samples.

The demo runs as the installed console script (it starts its own
`windvane serve` and sends with fluent-logger and urllib). What it prints
is parsed and compared with what arrays reads back, with the SQLite file's
own tables, and with the shipped sample files read here independently.
"""

from __future__ import annotations

import csv
import gzip
import json
import re
import subprocess
import sys
import wave
from collections import Counter
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest

from tests.ops.test_info import sqlite_stored, windvane
from tests.serve_process import free_port
from windvane import arrays
from windvane.ops import demo

SAMPLES = Path(demo.__file__).resolve().parent / "samples"
STREAM_HEADER = re.compile(r"^(stream|quarantine) (\S+)  \((\S+)\)$")


def parse_report(out: str) -> dict[tuple[str, bool], dict]:
    """The streams the demo printed: rows, bytes and each column's dtype and shape."""
    streams: dict[tuple[str, bool], dict] = {}
    current: dict | None = None
    for line in out.splitlines():
        header = STREAM_HEADER.match(line)
        if header:
            current = streams.setdefault((header[2], header[1] == "quarantine"), {"path": header[3], "columns": {}})
        elif current is not None and line.startswith("  rows: "):
            current["rows"] = int(line.split()[1].rstrip(",").replace(",", ""))
        elif current is not None and line.startswith("  bytes: "):
            raw, stored = re.match(r"  bytes: raw ([\d,]+), stored ([\d,]+)", line).groups()
            current["raw"], current["stored"] = int(raw.replace(",", "")), int(stored.replace(",", ""))
        elif current is not None and line.startswith("    "):
            name, dtype, shape, *_ = line.split()
            current["columns"][name] = (dtype, tuple(int(n) for n in shape.split("x")))
        elif not line.strip() or line.startswith("throughput"):
            current = None
    return streams


def scada_rows() -> list[dict[str, str]]:
    with gzip.open(SAMPLES / demo.SCADA_SAMPLE, "rt", newline="") as f:
        return list(csv.DictReader(f))


def log_records() -> list[tuple[bytes, dict]]:
    lines = gzip.decompress((SAMPLES / demo.LOG_SAMPLE).read_bytes()).splitlines()
    return [(line, json.loads(line)) for line in lines]


def time_ns(seconds: float) -> int:
    return int(Decimal(repr(seconds)).scaleb(9))


@pytest.fixture(scope="module")
def ran(tmp_path_factory) -> tuple[Path, str]:
    """`windvane demo` run once in a fresh directory, on ports chosen: (that directory, what it printed)."""
    cwd = tmp_path_factory.mktemp("demo")
    forward, http = free_port(), free_port()
    result = windvane("demo", "--forward-port", str(forward), "--http-port", str(http), cwd=str(cwd))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"creating a fresh store in {cwd}/var/demo.db" in result.stderr
    assert f"windvane serve is up: Forward on 127.0.0.1:{forward}, HTTP on 127.0.0.1:{http}" in result.stderr
    return cwd, result.stdout


def test_printed_streams_are_what_the_store_holds(ran):
    cwd, out = ran
    url = f"sqlite:///{cwd}/var/demo.db"
    printed = parse_report(out)
    scada = Counter(f"turbine.{r['Wind_turbine_name']}.scada" for r in scada_rows() if r["P_avg"])
    empty = Counter(f"turbine.{r['Wind_turbine_name']}.scada" for r in scada_rows() if not r["P_avg"])
    bad_logs = sum(record.get("latency_ms") == "-" for _, record in log_records())
    with wave.open(str(SAMPLES / demo.VIBRATION_SAMPLE)) as w:
        frames = w.getnframes()
    expected = {
        **{(tag, False): n for tag, n in scada.items()},
        **{(tag, True): n for tag, n in empty.items()},
        (demo.VIBRATION_TAG, False): frames,
        (demo.LOG_TAG, False): len(log_records()) - bad_logs,
        (demo.LOG_TAG, True): bad_logs,
    }
    assert {key: s["rows"] for key, s in printed.items()} == expected
    assert sorted(printed) == sorted(
        [(t, False) for t in arrays.list_streams(url)] + [(t, True) for t in arrays.list_streams(url, quarantine=True)]
    )
    for (tag, quarantine), shown in printed.items():
        with arrays.open_stream(url, tag, quarantine=quarantine) as stream:
            assert len(stream) == shown["rows"]
            assert list(shown["columns"]) == ["time", *stream.columns]
            for name, (_, shape) in shown["columns"].items():
                assert shape == stream[name].shape
        prefix = ("quarantine/" if quarantine else "streams/") + tag + "/"
        assert shown["stored"] == sqlite_stored(f"{cwd}/var/demo.db", prefix, latest=True)
    assert printed[(demo.VIBRATION_TAG, False)]["columns"]["samples"] == ("float32", (frames, 3))
    assert printed[(demo.VIBRATION_TAG, False)]["raw"] == frames * (8 + 3 * 4)


def test_printed_store_figures_match_its_tables(ran):
    import sqlite3

    cwd, out = ran
    with sqlite3.connect(f"{cwd}/var/demo.db") as db:
        ((transactions,),) = db.execute("SELECT COUNT(*) FROM trans")
        ((stored,),) = db.execute("SELECT SUM(LENGTH(value)) FROM data")
        ((referenced, distinct),) = db.execute(
            "SELECT SUM(d.size), (SELECT SUM(size) FROM data) FROM obj o JOIN data d ON d.id = o.data_id"
        )
    assert f"transactions:    {transactions:,}\n" in out
    assert f"({stored:,} bytes stored)" in out
    assert f"dedup ratio:     {referenced / distinct:.2f} (" in out
    assert f"{referenced:,} bytes held as {distinct:,} bytes" in out
    rates = [line for line in out.splitlines() if line.startswith(("  send ", "  commit ", "  end to end "))]
    assert len(rates) == 5 and all(re.search(r"[1-9][\d,]* (records|rows)/s", line) for line in rates)


def test_the_throughput_figures_add_up(ran):
    _, out = ran
    commit = re.search(
        r"  commit +\d+ group commits, ([\d,]+) rows; the service was busy with them ([\d.]+) s of the ([\d.]+) s: "
        r"([\d,]+) rows/s",
        out,
    )
    end = re.search(r"  end to end .*: ([\d.]+) s = ([\d.]+) s sending \+ ([\d.]+) s until the last commit", out)
    assert commit is not None and end is not None, out
    rows, busy, of, rate = int(commit[1].replace(",", "")), float(commit[2]), float(commit[3]), commit[4]
    total, sending, after = (Decimal(end[i]) for i in (1, 2, 3))
    assert float(total) == of and 0 < busy <= of  # the service's busy time is part of the end-to-end time
    assert sending + after == total
    shown = int(rate.replace(",", ""))
    assert rows / (busy + 0.0005) - 1 <= shown <= rows / (busy - 0.0005) + 1  # busy is printed rounded
    assert "s summed, more than the time it took: the next group is validated while one commits" in out


def test_first_and_last_records_are_the_samples(ran):
    cwd, _ = ran
    url = f"sqlite:///{cwd}/var/demo.db"
    rows = scada_rows()
    for row in (rows[0], rows[-1]):
        tag = f"turbine.{row['Wind_turbine_name']}.scada"
        with arrays.open_stream(url, tag) as stream:
            got = stream.to_pandas(len(stream) - 1) if row is rows[-1] else stream.to_pandas(0, 1)
        when = datetime.fromisoformat(row["Date_time"]).astimezone(UTC)
        assert got.index[0].to_pydatetime() == when
        for field, column in [
            ("power", "P_avg"),
            ("wind_speed", "Ws_avg"),
            ("pitch", "Ba_avg"),
            ("outdoor_temperature", "Ot_avg"),
            ("wind_direction", "Wa_avg"),
            ("nacelle_angle", "Ya_avg"),
        ]:
            assert got[field].iloc[0] == np.float32(row[column])
        assert json.loads(got["extra"].iloc[0]) == {"vane": float(row["Va_avg"])}
    with arrays.open_stream(url, "turbine.R80711.scada", quarantine=True) as q:
        assert set(q["reason"][:].tolist()) == {"required field 'power' is missing"}
    with wave.open(str(SAMPLES / demo.VIBRATION_SAMPLE)) as w:
        counts = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").reshape(-1, w.getnchannels())
        rate = w.getframerate()
    with arrays.open_stream(url, demo.VIBRATION_TAG) as stream:
        samples, times = stream["samples"], stream["time"]
        np.testing.assert_array_equal(samples[0], counts[0].astype(np.float32) / np.float32(1000))
        np.testing.assert_array_equal(samples[-1], counts[-1].astype(np.float32) / np.float32(1000))
        start = int(datetime(2014, 2, 5, 12, tzinfo=UTC).timestamp()) * 10**9
        assert times[0] == start
        assert times[-1] == start + round((len(counts) - 1) * 10**9 / rate)
    records = log_records()
    good = [(line, r) for line, r in records if r.get("latency_ms") != "-"]
    bad = [(line, r) for line, r in records if r.get("latency_ms") == "-"]
    with arrays.open_stream(url, demo.LOG_TAG) as stream:
        for i, (_, record) in ((0, good[0]), (len(stream) - 1, good[-1])):
            assert stream["time"][i] == time_ns(record["time"])
            for field in ("host", "level", "message", "status"):
                assert stream[field][i] == record[field]
            latency = stream["latency_ms"][i]
            assert np.isnan(latency) if "latency_ms" not in record else latency == np.float32(record["latency_ms"])
            assert json.loads(stream["extra"][i]) == {
                k: v for k, v in record.items() if k not in ("time", "host", "level", "message", "status", "latency_ms")
            }
    with arrays.open_stream(url, demo.LOG_TAG, quarantine=True) as q:
        assert q["raw"][0] == bad[0][0] and q["raw"][-1] == bad[-1][0]  # verbatim, as posted
        assert "latency_ms" in q["reason"][0]


def test_the_notebook_snippet_runs(ran):
    cwd, out = ran
    snippet = out.split("open it in a notebook (from this directory):\n")[1]
    code = "\n".join(line[4:] for line in snippet.splitlines() if line.startswith("    "))
    code += "\nprint(len(scada), vibration.shape, len(log), len(rejected))"
    result = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    printed = parse_report(out)
    assert result.stdout.split() == [
        str(printed[("turbine.R80736.scada", False)]["rows"]),
        "(25600,",
        "3)",
        str(printed[(demo.LOG_TAG, False)]["rows"]),
        str(printed[(demo.LOG_TAG, True)]["rows"]),
    ]


def test_keep_adds_and_a_new_run_starts_afresh(ran):
    cwd, first = ran
    url = f"sqlite:///{cwd}/var/demo.db"
    once = {key: s["rows"] for key, s in parse_report(first).items()}
    kept = windvane("demo", "--keep", cwd=str(cwd))
    assert kept.returncode == 0, kept.stdout + kept.stderr
    assert "adding to the store in" in kept.stderr
    assert {key: s["rows"] for key, s in parse_report(kept.stdout).items()} == {k: 2 * n for k, n in once.items()}
    with arrays.open_stream(url, demo.VIBRATION_TAG) as stream:
        assert len(stream) == 2 * once[(demo.VIBRATION_TAG, False)]
    again = windvane("demo", cwd=str(cwd))
    assert again.returncode == 0, again.stdout + again.stderr
    assert "removed the earlier demo store; creating a fresh store in" in again.stderr
    assert {key: s["rows"] for key, s in parse_report(again.stdout).items()} == once


def test_an_unwritable_directory_exits_2(tmp_path):
    (tmp_path / "file").write_text("not a directory")
    result = windvane("demo", "--dir", "file/var", cwd=str(tmp_path))
    assert result.returncode == 2
    assert f"the demo keeps its store in {tmp_path}/file/var, which cannot be written: Not a directory" in result.stderr


@pytest.mark.crash
def test_what_metrics_count_as_committed_survives_kill_9(tmp_path):
    """The demo stops waiting when /metrics count every row sent: those rows are durable then."""
    url = f"sqlite:///{tmp_path}/demo.db"
    with demo.sample_path("schemas") as schemas:
        service = demo.DemoService(url, schemas, tmp_path / "serve.log")
        try:
            sent, expected = demo.send_scada(service.ports["forward"], demo.silent)
            service.wait_committed(expected)
        finally:
            service.kill()  # SIGKILL: no shutdown, no final commit
    assert sent.records == sum(expected.values()) == len(scada_rows())
    for tag, count in expected.items():
        stored = len(arrays.open_stream(url, tag)) if tag in arrays.list_streams(url) else 0
        quarantined = (
            len(arrays.open_stream(url, tag, quarantine=True))
            if tag in arrays.list_streams(url, quarantine=True)
            else 0
        )
        assert stored + quarantined == count


def test_the_demo_schemas_are_the_repositorys():
    """The demo ships copies of schemas/ (package data must live in a package): they must not drift."""
    shipped = Path(__file__).resolve().parents[2] / "schemas"
    copies = Path(__file__).resolve().parents[2] / "windvane" / "ops" / "samples" / "schemas"
    assert sorted(p.name for p in copies.glob("*.toml")) == sorted(p.name for p in shipped.glob("*.toml"))
    for copy in copies.glob("*.toml"):

        def body(path):
            return [line for line in path.read_text().splitlines() if not line.startswith("#")]

        assert body(copy) == body(shipped / copy.name), copy.name
