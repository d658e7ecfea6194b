"""``windvane demo``: run the service on a fresh embedded store, send it the shipped samples, report what it stored.

The samples (``windvane/ops/samples/``, sources in its README) go in as they
would from the field, through real clients: the SCADA week and the
vibration recording over the Forward protocol with the Fluentd project's
Python client (fluent-logger), the access log over HTTP as gzipped NDJSON
(what fluentd's in_http takes) with the standard library's client. The
service is a ``windvane serve`` process of its own (ingest never imports
the connectors); it is stopped cleanly (SIGTERM: it commits what it
received) before :func:`windvane.ops.info.describe` reads the store, so every
figure about what is stored comes from the store, not from what was sent.

fluent-logger has no acknowledgements: the demo knows that everything it
sent over Forward is committed when the service's ``/metrics`` count it
(stored or quarantined). HTTP answers each request after its commit.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import gzip
import json
import os
import re
import selectors
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import wave
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from windvane import neostore
from windvane.console.config import ConsoleConfig
from windvane.ingest.errors import IngestError

from .info import StoreInfo, describe

SCADA_SAMPLE = "scada_la_haute_borne_2014-02-03.csv.gz"
VIBRATION_SAMPLE = "vibration_R80736_drive_train.wav"
LOG_SAMPLE = "access_log_web1.ndjson.gz"

#: The SCADA file's columns, by the schema field each becomes (``Va_avg``, not in the schema, goes to ``extra``).
SCADA_FIELDS = {
    "power": "P_avg",
    "wind_speed": "Ws_avg",
    "pitch": "Ba_avg",
    "outdoor_temperature": "Ot_avg",
    "wind_direction": "Wa_avg",
    "nacelle_angle": "Ya_avg",
    "vane": "Va_avg",
}
VIBRATION_TAG = "turbine.R80736.vibration"
#: The recording's int16 counts per m/s^2 (its README); streams hold m/s^2 as float32.
COUNTS_PER_MS2 = 1000
#: When the recording was taken (the WAV file does not say): within the SCADA week.
VIBRATION_START_NS = int(datetime(2014, 2, 5, 12, 0, tzinfo=UTC).timestamp()) * 10**9
#: Frames per Forward record: 100 ms at 25.6 kHz, as a data logger sends blocks.
VIBRATION_BLOCK = 2560
LOG_TAG = "nginx.web1.access"
LOG_LINES_PER_REQUEST = 500
#: How long the service may take to start, to commit what it was sent, and to stop.
SERVICE_TIMEOUT = 60.0

_METRIC_LINE = re.compile(r'^(\w+)(?:\{tag="([^"]*)"\})? (\S+)$')


class DemoError(IngestError):
    """A step of the demo failed; the message says which, and where the service's log is."""


class DemoDirectoryError(DemoError):
    """The demo's directory cannot be created or written."""


class Progress(Protocol):
    """What the demo reports sending to: ``update(n)`` after each ``n`` records or samples (click's bar is one)."""

    def update(self, n: int) -> None: ...


#: ``progress(label=..., length=...)``: a context manager giving a :class:`Progress` (``click.progressbar`` fits).
ProgressFactory = Callable[..., contextlib.AbstractContextManager[Progress]]


class _Silent:
    def update(self, n: int) -> None:
        pass


@contextlib.contextmanager
def silent(label: str, length: int) -> Iterator[Progress]:
    """The progress of a demo nobody watches: a :data:`ProgressFactory` that shows nothing."""
    yield _Silent()


@dataclass(frozen=True)
class Sent:
    """What one source sent, and how fast. ``seconds`` run from its first send to its last (HTTP: last answer)."""

    source: str
    via: str
    records: int  # events sent: SCADA rows, vibration blocks, log lines
    bytes: int  # as the service received them (its metrics), or as posted (HTTP bodies)
    seconds: float

    @property
    def records_per_second(self) -> float:
        return self.records / self.seconds if self.seconds else 0.0


@dataclass(frozen=True)
class DemoResult:
    """What the demo did and what the store holds after the service stopped."""

    url: str  # the store, absolute
    notebook_url: str  # the same store as the notebook snippet names it (relative to the working directory if under it)
    log_path: str  # the service's log
    sent: tuple[Sent, ...]
    commits: int  # group commits the service made
    commit_seconds: float  # each group's time from validation to commit, summed (groups overlap)
    busy_seconds: float  # time the service had at least one group between validation and commit
    committed_rows: (
        int  # rows it committed, stored or quarantined (an event is a row; a vibration block, a row per sample)
    )
    committed_bytes: int  # the bytes they arrived as
    end_to_end_seconds: float  # first record sent to last committed
    sending_seconds: float  # first record sent to the last source's end (the rest of end to end: the last commits)
    info: StoreInfo


def sample_path(name: str) -> contextlib.AbstractContextManager[Path]:
    """A file (or the ``schemas`` folder) of ``windvane/ops/samples/`` as a path: package data, installed with windvane."""
    return resources.as_file(resources.files("windvane.ops") / "samples" / name)


def scada_events() -> list[tuple[str, int, dict[str, float | None]]]:
    """The SCADA sample as ``(tag, Unix seconds, record)``; an empty cell is None (the record then lacks it)."""
    with sample_path(SCADA_SAMPLE) as path, gzip.open(path, "rt", newline="") as f:
        rows = list(csv.DictReader(f))
    return [
        (
            f"turbine.{row['Wind_turbine_name']}.scada",
            int(datetime.fromisoformat(row["Date_time"]).timestamp()),
            {field: float(row[column]) if row[column] else None for field, column in SCADA_FIELDS.items()},
        )
        for row in rows
    ]


def vibration_samples() -> tuple[np.ndarray, int]:
    """The recording as (frames x 3 float32 m/s^2, sample rate)."""
    with sample_path(VIBRATION_SAMPLE) as path, wave.open(str(path), "rb") as w:
        channels, rate = w.getnchannels(), w.getframerate()
        counts = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").reshape(-1, channels)
    return counts.astype(np.float32) / np.float32(COUNTS_PER_MS2), rate


def log_lines() -> list[bytes]:
    """The access log's lines (JSON objects, each with its ``time`` in Unix seconds)."""
    with sample_path(LOG_SAMPLE) as path:
        return gzip.decompress(path.read_bytes()).splitlines()


# -- the service -------------------------------------------------------------------------


class DemoService:
    """``windvane serve`` as a child process on local ports (0: a free one); its log goes to ``log_path``."""

    def __init__(self, url: str, schemas: Path, log_path: Path, ports: tuple[int, int] = (0, 0)):
        forward_port, http_port = ports
        self.log_path = log_path
        command = [
            sys.executable,
            "-c",
            "import windvane; windvane.main()",
            "serve",
            "--store",
            url,
            "--schemas",
            str(schemas),
            "--forward",
            f"127.0.0.1:{forward_port}",
            "--http",
            f"127.0.0.1:{http_port}",
            # One process: the demo's figures say how long one pipeline was busy within the time the run
            # took (workers' busy times add up beyond it), and its few connections would keep one busy.
            "--workers",
            "1",
            "--log-level",
            "warning",
        ]
        with open(log_path, "wb") as log:
            # Unbuffered: a buffered reader could hold "ready" while select() waits on the empty pipe.
            self.process = subprocess.Popen(
                command,
                stdout=subprocess.PIPE,
                stderr=log,
                stdin=subprocess.DEVNULL,
                bufsize=0,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        assert self.process.stdout is not None, "stdout=PIPE gives a pipe"
        self.output = self.process.stdout
        self.ports = self._wait_ready()

    def _wait_ready(self) -> dict[str, int]:
        """The ports it printed (``forward: HOST:PORT``) before ``ready``."""
        ports: dict[str, int] = {}
        deadline = time.monotonic() + SERVICE_TIMEOUT
        with selectors.DefaultSelector() as selector:
            selector.register(self.output, selectors.EVENT_READ)
            while True:
                if not selector.select(max(0.0, deadline - time.monotonic())):
                    self.kill()
                    raise DemoError(f"windvane serve did not start within {SERVICE_TIMEOUT:g} s; see {self.log_path}")
                line = self.output.readline().decode().strip()
                if line == "ready":
                    return ports
                if not line and self.process.poll() is not None:
                    raise DemoError(
                        f"windvane serve exited with code {self.process.returncode} at start:\n{self.log_tail()}"
                    )
                name, _, address = line.partition(": ")
                if address:
                    ports[name] = int(address.split()[0].rpartition(":")[2])  # then "auth: ..."

    def log_tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:]

    def metrics(self) -> dict[str, dict[str, float]]:
        """``GET /metrics`` as ``{metric: {tag or "": value}}``."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ports['http']}/metrics", timeout=10) as reply:
            text = reply.read().decode()
        out: dict[str, dict[str, float]] = {}
        for line in text.splitlines():
            found = _METRIC_LINE.match(line)
            if found:
                name, tag, value = found.groups()
                out.setdefault(name, {})[tag or ""] = float(value)
        return out

    def wait_committed(self, expected: dict[str, int]) -> dict[str, dict[str, float]]:
        """Poll ``/metrics`` until every tag of ``expected`` has its rows committed; the metrics then."""
        deadline = time.monotonic() + SERVICE_TIMEOUT
        while True:
            metrics = self.metrics()
            short = {
                tag: (_committed(metrics, tag), rows)
                for tag, rows in expected.items()
                if _committed(metrics, tag) < rows
            }
            if not short:
                return metrics
            if time.monotonic() > deadline:
                missing = ", ".join(f"{tag} {done} of {rows}" for tag, (done, rows) in sorted(short.items()))
                raise DemoError(
                    f"the service did not commit everything sent over Forward within {SERVICE_TIMEOUT:g} s "
                    f"({missing}); see {self.log_path}"
                )
            time.sleep(0.05)

    def stop(self) -> None:
        """SIGTERM: it stops taking data, commits what it received and exits 0."""
        self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(SERVICE_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.kill()
            raise DemoError(f"windvane serve did not stop within {SERVICE_TIMEOUT:g} s; see {self.log_path}") from None
        self.output.close()
        if code != 0:
            raise DemoError(f"windvane serve stopped with exit code {code}:\n{self.log_tail()}")

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.output.close()


# -- sending -----------------------------------------------------------------------------


def _fluent_sender(port: int) -> Any:
    from fluent.sender import FluentSender  # the Fluentd project's client, a dependency of windvane

    return FluentSender("", host="127.0.0.1", port=port, timeout=10.0)


def _emit(sender: Any, tag: str, when: Any, record: dict[str, Any]) -> None:
    if not sender.emit_with_time(tag, when, record):
        raise DemoError(f"fluent-logger could not send {tag} to 127.0.0.1:{sender.port}: {sender.last_error}")


def send_scada(port: int, progress: ProgressFactory) -> tuple[Sent, dict[str, int]]:
    """Send the SCADA week over Forward, one Message per 10-minute row.

    Returns what was sent and the events expected in each tag (stored or quarantined).
    """
    events = scada_events()
    sender = _fluent_sender(port)
    with progress(label="SCADA, 4 turbines    Forward", length=len(events)) as bar:
        start = time.perf_counter()
        for i, (tag, when, record) in enumerate(events, 1):
            _emit(sender, tag, when, record)
            if i % 100 == 0:
                bar.update(100)
        bar.update(len(events) % 100)
        sender.close()
        seconds = time.perf_counter() - start
    return (
        Sent("SCADA, 4 turbines", "Forward (fluent-logger)", len(events), 0, seconds),
        dict(Counter(tag for tag, _, _ in events)),
    )


def send_vibration(port: int, progress: ProgressFactory) -> tuple[Sent, dict[str, int]]:
    """Send the recording over Forward in 100 ms blocks (float32 bytes, EventTime).

    Returns what was sent and the rows expected (a row per sample).
    """
    from fluent.sender import EventTime

    samples, rate = vibration_samples()
    sender = _fluent_sender(port)
    starts = range(0, len(samples), VIBRATION_BLOCK)
    with progress(label="vibration, 25.6 kHz  Forward", length=len(samples)) as bar:
        start = time.perf_counter()
        for first in starts:
            block = samples[first : first + VIBRATION_BLOCK]
            when = EventTime.from_unix_nano(VIBRATION_START_NS + first * 10**9 // rate)
            _emit(sender, VIBRATION_TAG, when, {"samples": block.astype("<f4").tobytes(), "sample_rate": rate})
            bar.update(len(block))
        sender.close()
        seconds = time.perf_counter() - start
    source = f"vibration, {len(starts)} blocks of {VIBRATION_BLOCK:,} samples"
    return Sent(source, "Forward (fluent-logger)", len(starts), 0, seconds), {VIBRATION_TAG: len(samples)}


def send_log(port: int, progress: ProgressFactory) -> Sent:
    """POST the access log as gzipped NDJSON, 500 lines a request.

    Each answer comes after the commit and counts what was stored and
    quarantined: every line must be one or the other.
    """
    lines = log_lines()
    url = f"http://127.0.0.1:{port}/{LOG_TAG.replace('.', '/')}"
    posted = 0
    with progress(label="access log           HTTP   ", length=len(lines)) as bar:
        start = time.perf_counter()
        for first in range(0, len(lines), LOG_LINES_PER_REQUEST):
            part = lines[first : first + LOG_LINES_PER_REQUEST]
            body = gzip.compress(b"\n".join(part) + b"\n", mtime=0)
            request = urllib.request.Request(
                url,
                data=body,
                method="POST",
                headers={"Content-Type": "application/x-ndjson", "Content-Encoding": "gzip"},
            )
            try:
                with urllib.request.urlopen(request, timeout=SERVICE_TIMEOUT) as reply:
                    answer = json.load(reply)
            except urllib.error.HTTPError as exc:
                raise DemoError(
                    f"POST {url} answered {exc.code}: {exc.read()[:500].decode(errors='replace')}"
                ) from None
            if answer["accepted"] + answer["quarantined"] != len(part):
                raise DemoError(f"POST {url}: {len(part)} lines sent, the service answered {answer}")
            posted += len(body)
            bar.update(len(part))
        seconds = time.perf_counter() - start
    return Sent("access log", "HTTP NDJSON, gzip (urllib)", len(lines), posted, seconds)


def _committed(metrics: dict[str, dict[str, float]], tag: str) -> int:
    """Rows of ``tag`` the service committed, stored or quarantined."""
    return int(
        sum(
            metrics.get(name, {}).get(tag, 0)
            for name in ("windvane_stream_events_total", "windvane_stream_rejects_total")
        )
    )


# -- the demo ----------------------------------------------------------------------------


def prepare(directory: Path, *, keep: bool, say: Callable[[str], None]) -> Path:
    """Create ``directory`` and check it takes files; remove the demo store unless ``keep``; ``say`` which.

    Returns the store's path. :class:`DemoDirectoryError` if the directory
    cannot be made or written.
    """
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as exc:
        raise DemoDirectoryError(
            f"the demo keeps its store in {directory}, which cannot be written: "
            f"{exc.strerror or exc}; choose another with --dir"
        ) from None
    path = directory / "demo.db"
    removed = False
    if not keep:
        for suffix in ("", "-wal", "-shm"):
            old = Path(f"{path}{suffix}")
            if old.exists():
                old.unlink()
                removed = True
    if keep and path.exists():
        say(f"adding to the store in {path} (--keep)")
    else:
        say(f"{'removed the earlier demo store; ' if removed else ''}creating a fresh store in {path}")
    return path


def _notebook_url(path: Path) -> str:
    relative = os.path.relpath(path)
    return f"sqlite:///{relative}" if not relative.startswith("..") else f"sqlite:///{path}"


def run(
    directory: str | Path = "var",
    *,
    keep: bool = False,
    progress: ProgressFactory = silent,
    say: Callable[[str], None] = lambda line: None,
    ports: tuple[int, int] = (0, 0),
) -> DemoResult:
    """Serve a store in ``directory``/demo.db (afresh unless ``keep``), send the samples, stop, describe the store.

    ``say`` gets a line per step, ``progress`` makes a bar per source; the service listens on 127.0.0.1 at
    ``ports`` (Forward, HTTP; 0: a free one). Raises :class:`DemoDirectoryError` for an unusable directory,
    :class:`DemoError` if the service fails to start, take, commit or stop.
    """
    directory = Path(directory).absolute()
    path = prepare(directory, keep=keep, say=say)
    url = f"sqlite:///{path}"
    log_path = directory / "demo-serve.log"
    with sample_path("schemas") as schemas:
        service = DemoService(url, schemas, log_path, ports)
        try:
            say(
                f"windvane serve is up: Forward on 127.0.0.1:{service.ports['forward']}, "
                f"HTTP on 127.0.0.1:{service.ports['http']} (log: {log_path})"
            )
            started = time.perf_counter()
            scada, scada_rows = send_scada(service.ports["forward"], progress)
            vibration, vibration_rows = send_vibration(service.ports["forward"], progress)
            log = send_log(service.ports["http"], progress)
            sending = time.perf_counter() - started
            metrics = service.wait_committed({**scada_rows, **vibration_rows})
            end_to_end = time.perf_counter() - started
            say("everything sent is committed; stopping the service")
            service.stop()
        except BaseException:  # Ctrl-C too: the service the demo started must not outlive it
            service.kill()
            raise
    received = metrics.get("windvane_stream_bytes_total", {})
    sent = (
        dataclasses.replace(scada, bytes=int(sum(received.get(tag, 0) for tag in scada_rows))),
        dataclasses.replace(vibration, bytes=int(received.get(VIBRATION_TAG, 0))),
        log,
    )
    with neostore.open(url, read_only=True) as store:
        info = describe(store)
    return DemoResult(
        url=url,
        notebook_url=_notebook_url(path),
        log_path=str(log_path),
        sent=sent,
        commits=int(metrics.get("windvane_commits_total", {}).get("", 0)),
        commit_seconds=metrics.get("windvane_commit_seconds_total", {}).get("", 0.0),
        busy_seconds=metrics.get("windvane_commit_busy_seconds_total", {}).get("", 0.0),
        committed_rows=sum(_committed(metrics, tag) for tag in received),
        committed_bytes=int(sum(received.values())),
        end_to_end_seconds=end_to_end,
        sending_seconds=sending,
        info=info,
    )


def throughput_lines(result: DemoResult) -> Iterator[str]:
    """The rates of each stage: sending per source, committing, end to end."""
    yield "throughput (send: Forward until fluent-logger has written the socket, it waits for no ack;"
    yield "            HTTP until the last answer, which comes after its commit):"
    for s in result.sent:
        rate = f"{s.bytes / s.seconds / 1e6:.1f} MB/s" if s.seconds else "-"
        yield (
            f"  send        {s.source:<38} {s.via:<27} {s.records:>6,} records in {s.seconds:6.3f} s: "
            f"{s.records_per_second:>9,.0f} records/s, {rate}"
        )
    busy, total = result.busy_seconds, result.end_to_end_seconds
    if busy:
        yield (
            f"  commit      {result.commits:,} group commits, {result.committed_rows:,} rows; the service was busy "
            f"with them {busy:.3f} s of the {total:.3f} s: {result.committed_rows / busy:,.0f} rows/s, "
            f"{result.committed_bytes / busy / 1e6:.1f} MB/s"
        )
        yield (
            f"              (each group from validation to commit: {result.commit_seconds:.3f} s summed, more "
            "than the time it took: the next group is validated while one commits)"
        )
    sending = round(result.sending_seconds, 3)  # the printed parts add up to the printed whole
    yield (
        f"  end to end  first record sent to last committed: {total:.3f} s = {sending:.3f} s sending "
        f"+ {round(total, 3) - sending:.3f} s until the last commit: {result.committed_rows / total:,.0f} rows/s"
    )


def notebook_lines(result: DemoResult) -> Iterator[str]:
    """How to look at what the demo stored: the web console, then a snippet for a notebook (or any Python)."""
    url = result.notebook_url
    yield f"look at it in a browser: windvane console {url}   then open http://{ConsoleConfig.listen}/"
    yield "  (streams, plots, the quarantine; `windvane serve` shows the same at / on its HTTP port)"
    yield ""
    yield "open it in a notebook (from this directory):"
    yield ""
    yield "    from windvane import arrays"
    yield f'    scada = arrays.open_stream("{url}", "turbine.R80736.scada").to_pandas()'
    yield f'    vibration = arrays.open_stream("{url}", "{VIBRATION_TAG}")["samples"][:25600]   # 1 s x 3 axes'
    yield f'    log = arrays.open_stream("{url}", "{LOG_TAG}").to_pandas()'
    yield f'    rejected = arrays.open_stream("{url}", "{LOG_TAG}", quarantine=True).to_pandas()[["reason", "raw"]]'
    yield ""
    yield "analyses of this store, from the repository: notebooks/ (vibration, sensors, logs);"
    yield "a stream out to a file (parquet, arrow, csv, zarr, netcdf; --job NAME for incremental runs):"
    yield f"  windvane export turbine.R80736.scada --store {url} --to scada.parquet --format parquet"
