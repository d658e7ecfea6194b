"""Real fluentd 1.14.6 and Fluent Bit 5.1.1 ``out_http`` deliver into ``windvane serve --http``, in every format.

Each program tails one JSON-lines file of text in many scripts (quotes, a
backslash, ``:``, an emoji, empty strings now and then) and posts it with
HTTP Basic authentication (``windvane serve --users``), flushing every
second, in several formats at once: one process per program, one output
(and so one tag, one stream) per format. Each test then checks one stream
against the file: the count, the order, every value, and the time.

* fluentd, with its supervisor (the worker in ASCII-8BIT): ``out_http``
  with its default format (JSON lines, ``application/x-ndjson``),
  ``json_array true`` (``application/json``), ``<format> @type msgpack``
  (``application/x-msgpack``, keys and values as msgpack bin) and
  ``<format> @type ltsv`` (``text/tab-separated-values``). The file's
  ``time`` field (float seconds) stays in the record (``keep_time_key``),
  out_http sends it, and windvane takes it as the event time: stored times
  must equal the file's to the nanosecond (LTSV carries text, so its stream
  has ``str`` fields and the values are compared as fluentd prints them).
* Fluent Bit, with its defaults otherwise: no ``Format`` at all (5.1.1
  then sends JSON, not msgpack as its documentation says), ``Format
  json``, ``json_lines``, ``json_stream`` (each adds a ``date`` key,
  ``json_date_format double``), ``json_lines`` with ``json_date_format
  iso8601`` and ``java_sql_timestamp``, and ``msgpack`` (``[[EventTime,
  {}], record]`` items). The tail's time is when Fluent Bit read the line, so the times
  are checked against the msgpack stream's (EventTime, nanoseconds): the
  same record's ``date`` must agree within a microsecond, all of them lie
  within the run's wall-clock window, and ``date`` is never left in the
  record (the schemas reject undeclared fields).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from tests.fluent_programs import Program, start_fluent_bit, start_fluentd
from tests.serve_process import Serve, event_schema, free_port, start_serve
from windvane import arrays, neostore

# One worker runs the module: its tests share one fluentd run and one Fluent Bit run (module fixtures).
pytestmark = [pytest.mark.clients, pytest.mark.timeout(300), pytest.mark.xdist_group("fluent_http")]

COUNT = 3000
USER, PASSWORD = "alice", "s3cret-pässword"
BASE_US = 1_767_225_600 * 10**6  # 2026-01-01T00:00:00Z, in microseconds
WAIT = 90  # seconds for every stream of a run to be complete

# Every field required, no other field allowed.
TYPED_SCHEMA = event_schema("fd.**", "fb.**", extra="reject", required=("seq", "msg", "value"))
# LTSV carries text only.
LTSV_SCHEMA = event_schema("fd.ltsv", extra="reject", required=("seq", "msg", "value"), dtype="str")

FLUENTD_FORMATS = {  # tag -> out_http options
    "fd.ndjson": "",
    "fd.array": "json_array true",
    "fd.msgpack": "<format>\n      @type msgpack\n    </format>",
    "fd.ltsv": "<format>\n      @type ltsv\n    </format>",
}
FLUENT_BIT_FORMATS = {  # tag -> out_http options
    "fb.msgpack": "Format msgpack",
    # No Format: Fluent Bit 5.1.1 then sends what Format json sends (a JSON array, application/json,
    # with the date key), although its documentation says msgpack is the default.
    "fb.default": "",
    "fb.json": "Format json",
    "fb.json_lines": "Format json_lines",
    "fb.json_stream": "Format json_stream",
    "fb.iso8601": "Format json_lines\n    json_date_format iso8601",
    "fb.java_sql": "Format json_lines\n    json_date_format java_sql_timestamp",
}


# -- the file ------------------------------------------------------------------------


def line_text(i: int) -> str:
    """Text of line ``i``: scripts, quotes, a backslash, a colon, an emoji; empty now and then."""
    if i % 97 == 0:
        return ""
    return f'event {i} Grüße "Köln" \\ température: °C 温度センサー ✓ 🌬️ k:v ' + "abc"[i % 3] * (i % 40)


def line_time_us(i: int) -> int:
    return BASE_US + i * 1_003  # 1.003 ms apart: six decimals, never a whole second in a row


def seconds_text(us: int) -> str:
    return f"{us // 10**6}.{us % 10**6:06d}"


def write_lines(path: Path, count: int, *, with_time: bool) -> None:
    # The time as a JSON number with six decimals: written by hand, as a logging library would.
    with open(path, "w", encoding="utf-8") as f:
        for i in range(count):
            text = json.dumps({"seq": i, "msg": line_text(i), "value": i * 0.5}, ensure_ascii=False)
            if with_time:
                text = text[:-1] + f', "time": {seconds_text(line_time_us(i))}}}'
            f.write(text + "\n")


# -- a run: windvane serve, one program, every format ------------------------------------


@dataclass
class Run:
    url: str
    started_ns: int = 0
    finished_ns: int = 0
    program_log: str = ""
    serve_log: str = ""
    waited: dict = field(default_factory=dict)

    def describe(self) -> str:
        return (
            f"rows (stream, quarantine): {self.waited}\n--- program ---\n{self.program_log[-5000:]}\n"
            f"--- windvane serve ---\n{self.serve_log[-3000:]}"
        )


def rows(url: str, tag: str, quarantine: bool = False) -> int:
    store = neostore.open(url, read_only=True)
    try:
        with arrays.open_stream(store, tag, quarantine=quarantine) as s:
            return len(s)
    except Exception:  # noqa: BLE001 - the stream appears with the first commit
        return 0
    finally:
        store.close()


def serve_with_users(tmp_path: Path) -> Serve:
    users = tmp_path / "users.toml"
    users.write_text(f'[users.{USER}]\npassword = "{PASSWORD}"\n')
    schemas = {"0-ltsv.toml": LTSV_SCHEMA, "1-typed.toml": TYPED_SCHEMA}
    return start_serve(tmp_path, schemas, "--users", str(users), forward=None, http=f"127.0.0.1:{free_port()}")


def deliver(tmp_path: Path, tags: list[str], start) -> Run:
    """Start ``windvane serve``, then the program (``start(port)``); wait until each tag has COUNT rows or quarantined."""
    with serve_with_users(tmp_path) as serve:
        run = Run(serve.url)
        run.started_ns = time.time_ns()
        program: Program = start(serve.http_port)
        try:
            deadline = time.monotonic() + WAIT
            while True:
                run.waited = {t: (rows(run.url, t), rows(run.url, t, quarantine=True)) for t in tags}
                if all(a + q >= COUNT for a, q in run.waited.values()) or time.monotonic() > deadline:
                    break
                time.sleep(0.5)
            run.finished_ns = time.time_ns()
        finally:
            program.stop()
            run.program_log = program.log(200_000)
        code = serve.stop()
        run.serve_log = serve.log()
        assert code == 0, f"windvane serve exited {code}\n{run.describe()}"
    return run


def read(run: Run, tag: str) -> dict:
    """The stream's columns; asserts it holds COUNT rows and that nothing was quarantined."""
    assert run.waited.get(tag, (0, 0)) == (COUNT, 0), f"{tag}: not every line landed as a row\n{run.describe()}"
    store = neostore.open(run.url, read_only=True)
    try:
        with arrays.open_stream(store, tag) as s:
            assert len(s) == COUNT
            return {k: s[k][:] for k in ("seq", "msg", "value", "time")}
    finally:
        store.close()


def check_values(tag: str, got: dict, *, text: bool = False) -> None:
    """Count, order and values as in the file (as text for LTSV, as fluentd's to_s prints them)."""
    seq, msg, value = got["seq"], got["msg"], got["value"]
    if text:
        assert list(seq) == [str(i) for i in range(COUNT)], f"{tag}: seq"
        assert list(value) == [repr(i * 0.5) for i in range(COUNT)], f"{tag}: value"
    else:
        assert seq.dtype == np.int64 and value.dtype == np.float64
        np.testing.assert_array_equal(seq, np.arange(COUNT), err_msg=f"{tag}: lines missing, repeated or out of order")
        np.testing.assert_array_equal(value, np.arange(COUNT) * 0.5, err_msg=f"{tag}: value")
    want = [line_text(i) for i in range(COUNT)]
    bad = [i for i in range(COUNT) if str(msg[i]) != want[i]]
    assert not bad, f"{tag}: {len(bad)} msg differ, first line {bad[0]}: {str(msg[bad[0]])!r} != {want[bad[0]]!r}"


# -- fluentd ---------------------------------------------------------------------------


def fluentd_config(source: Path, port: int) -> str:
    stores = "".join(
        f"""
  <store>
    @type http
    endpoint http://127.0.0.1:{port}/{tag.replace(".", "/")}
    {options}
    <auth>
      method basic
      username {USER}
      password {PASSWORD}
    </auth>
    <buffer>
      flush_interval 1s
      chunk_limit_size 128k
      retry_wait 1s
    </buffer>
  </store>"""
        for tag, options in FLUENTD_FORMATS.items()
    )
    return f"""
<source>
  @type tail
  path {source}
  pos_file {source}.pos
  read_from_head true
  tag fd.source
  <parse>
    @type json
    keep_time_key true
  </parse>
</source>
<match fd.source>
  @type copy
{stores}
</match>
"""


@pytest.fixture(scope="module")
def fluentd_run(tmp_path_factory) -> Run:
    tmp_path = tmp_path_factory.mktemp("fluentd_http")
    source = tmp_path / "events.jsonl"
    write_lines(source, COUNT, with_time=True)
    return deliver(tmp_path, list(FLUENTD_FORMATS), lambda port: start_fluentd(fluentd_config(source, port), tmp_path))


@pytest.mark.parametrize("tag", list(FLUENTD_FORMATS))
def test_fluentd_out_http(fluentd_run, tag):
    got = read(fluentd_run, tag)
    check_values(tag, got, text=tag == "fd.ltsv")
    want = np.array([line_time_us(i) * 1000 for i in range(COUNT)], dtype=np.int64)
    bad = np.flatnonzero(got["time"] != want)
    assert bad.size == 0, (
        f"{tag}: {bad.size} times differ from the file's, first line {bad[0]}: "
        f"{int(got['time'][bad[0]])} != {int(want[bad[0]])}"
    )


def test_fluentd_logged_no_error(fluentd_run):
    """No request was refused (out_http drops a chunk answered 4xx, with an error in its log)."""
    assert "[error]" not in fluentd_run.program_log, fluentd_run.describe()


# -- Fluent Bit ------------------------------------------------------------------------


def fluent_bit_config(source: Path, parsers: Path, port: int) -> str:
    outputs = "".join(
        f"""
[OUTPUT]
    Name http
    Match fb.source
    Host 127.0.0.1
    Port {port}
    URI /{tag.replace(".", "/")}
    http_User {USER}
    http_Passwd {PASSWORD}
    {options}
"""
        for tag, options in FLUENT_BIT_FORMATS.items()
    )
    return f"""
[SERVICE]
    Flush 1
    Log_Level info
    Parsers_File {parsers}

[INPUT]
    Name tail
    Path {source}
    Read_from_Head true
    Parser json
    Tag fb.source
{outputs}"""


@pytest.fixture(scope="module")
def fluent_bit_run(tmp_path_factory) -> Run:
    tmp_path = tmp_path_factory.mktemp("fluent_bit_http")
    source = tmp_path / "events.jsonl"
    write_lines(source, COUNT, with_time=False)
    parsers = tmp_path / "parsers.conf"
    parsers.write_text("[PARSER]\n    Name json\n    Format json\n")
    return deliver(
        tmp_path,
        list(FLUENT_BIT_FORMATS),
        lambda port: start_fluent_bit(fluent_bit_config(source, parsers, port), tmp_path),
    )


@pytest.fixture(scope="module")
def fluent_bit_event_times(fluent_bit_run) -> np.ndarray:
    """The msgpack stream's times: each record's EventTime, which the JSON formats' ``date`` carries too."""
    times = read(fluent_bit_run, "fb.msgpack")["time"]
    return times


def test_fluent_bit_msgpack(fluent_bit_run):
    """``Format msgpack``: ``[[EventTime, {}], record]`` items, the time to the nanosecond."""
    got = read(fluent_bit_run, "fb.msgpack")
    check_values("fb.msgpack", got)
    t = got["time"]
    assert t.dtype == np.int64
    assert fluent_bit_run.started_ns <= t.min() and t.max() <= fluent_bit_run.finished_ns, (
        f"times outside the run: {t.min()}..{t.max()} not in {fluent_bit_run.started_ns}..{fluent_bit_run.finished_ns}"
    )
    assert np.all(np.diff(t) >= 0), "the tail reads lines in order: its times never go back"
    assert np.any(t % 1000 != 0), "nanoseconds kept"


@pytest.mark.parametrize("tag", [t for t in FLUENT_BIT_FORMATS if t != "fb.msgpack"])
def test_fluent_bit_json_formats(fluent_bit_run, fluent_bit_event_times, tag):
    """The JSON formats' ``date`` is the event time (to its microsecond) and is not kept in the record."""
    got = read(fluent_bit_run, tag)
    check_values(tag, got)
    t = got["time"]
    assert np.any(t % 10**9 != 0), "sub-second precision kept"
    diff = np.abs(t - fluent_bit_event_times)
    worst = int(np.argmax(diff))
    assert diff[worst] <= 1000, (
        f"{tag}: line {worst} stored at {int(t[worst])}, its EventTime is "
        f"{int(fluent_bit_event_times[worst])}: the date was not taken as the time"
    )


def test_fluent_bit_logged_no_error(fluent_bit_run):
    log = fluent_bit_run.program_log
    assert "[error]" not in log and "[warn]" not in log, fluent_bit_run.describe()
