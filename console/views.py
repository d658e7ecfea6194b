"""What each page shows, read from the store as plain data: the pages render it, the tests read it.

Every function here blocks (it reads the database) and runs on the
console's query threads (:class:`console.app.Queries`), never on the event
loop. A page reads one snapshot: the overview and the stream page pin the
newest commit when they start (or the revision asked for with ``at=``), so
that what one page shows was true at one moment even while ingestion
commits.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from windvane import arrays, neostore
from windvane.ingest import replay
from windvane.ingest.imports import SchemaMismatch
from windvane.ingest.metrics import COMMIT_HISTOGRAM
from windvane.ingest.schema import Schema
from windvane.ingest.times import iso_text

from .errors import BadQuery, Conflict, NotFound
from .rates import Rates, quantile, sparkline_points

T = TypeVar("T")

#: A metric sample as the serving process gives it: (name, help, type, labels, value).
Sample = tuple[str, str, str, Mapping[str, Any], float]

#: Streams listed on one page of the overview.
PAGE_STREAMS = 50
#: Characters of a quarantined record shown (the rest is cut, and the page says so).
RAW_SHOWN = 2000


@dataclass(frozen=True)
class Source:
    """What the console looks at: the store, what to call it, its health, the serving process's metrics and
    the schema it validates each tag with and who sends to it (None where nothing ingests: ``windvane
    console``; a replay then validates against the schema the stream holds)."""

    store: neostore.Store
    label: str
    health: Callable[[], dict[str, Any]]
    samples: Callable[[], Sequence[Sample]] | None = None
    schema_for: Callable[[str], Schema | None] | None = None
    senders: Callable[[], list[dict[str, Any]]] | None = None


@dataclass(frozen=True)
class StreamRow:
    tag: str
    rows: int
    earliest: str | None
    latest: str | None
    schema: str | None
    rate: float | None
    sparkline: str
    quarantined: int


@dataclass(frozen=True)
class QuarantineRow:
    tag: str
    rows: int
    oldest_age: float | None  # seconds since the oldest quarantined record's time
    reasons: list[tuple[str, int]]


@dataclass(frozen=True)
class Commits:
    """The serving process's commits, from its metrics (all workers)."""

    total: int
    failures: int
    failing: bool
    mean_seconds: float | None
    p50: float | None  # over the last minute when the console has seen one, else since the server started
    p99: float | None
    recent: bool  # whether p50 and p99 are the last minute's
    pending_bytes: int
    budget_bytes: int | None
    held_bytes: int | None
    workers: int


@dataclass(frozen=True)
class SenderRow:
    protocol: str
    peer: str
    user: str | None
    hostname: str | None
    open: bool
    events: int
    acknowledged: int  # chunks (Forward, MQTT) or requests (HTTP)
    bytes: int
    since: float  # seconds since it connected (first seen, for HTTP clients)
    last_ack: float | None  # seconds since its last acknowledgement
    rate: float | None  # events a second over its life
    worker: int | None


#: Senders listed on the overview: the open ones first, then the most recently acknowledged.
SHOWN_SENDERS = 50


@dataclass(frozen=True)
class Overview:
    tid: str
    health: dict[str, Any]
    streams: list[StreamRow]
    total_streams: int
    page: int
    pages: int
    query: str
    quarantines: list[QuarantineRow]
    commits: Commits | None
    senders: list[SenderRow] | None
    total_senders: int


@dataclass(frozen=True)
class ColumnRow:
    name: str
    dtype: str
    shape: list[int]
    plottable: bool

    @property
    def channels(self) -> int:
        """The channels a plot of it chooses from (a vibration block's axes); 1 for a plain column."""
        return self.shape[1] if len(self.shape) == 2 else 1


@dataclass(frozen=True)
class StreamPage:
    tag: str
    at: str | None
    tid: str
    rows: int
    earliest: str | None
    latest: str | None
    schema: str | None
    kind: str | None
    columns: list[ColumnRow]
    raw_bytes: int  # the values its columns refer to now, each reference counted
    distinct_bytes: int  # the same values, each once (what deduplication leaves)
    stored_bytes: int  # those as stored (compressed where it paid)
    history_bytes: int  # every revision's distinct values as stored: what its history takes
    quarantined: int


@dataclass(frozen=True)
class Tail:
    """The newest rows of a stream: ``first`` is the index of the first row shown."""

    columns: list[str]
    rows: list[list[str]]
    first: int
    total: int


@dataclass(frozen=True)
class QuarantinedRecord:
    time: str
    reason: str
    source: str
    raw: str
    cut: bool


@dataclass(frozen=True)
class QuarantinePage:
    tag: str
    rows: int
    oldest_age: float | None
    reasons: list[tuple[str, int]]
    latest: list[QuarantinedRecord]
    stream_exists: bool
    schema: str | None = None
    notes: list[str] = field(default_factory=list)


# -- the overview ---------------------------------------------------------------------------


def totals_from_samples(samples: Sequence[Sample]) -> dict[str, float]:
    """Events committed to each tag, from the serving process's metrics."""
    return {s[3]["tag"]: s[4] for s in samples if s[0] == "windvane_stream_events_total" and "tag" in s[3]}


def commit_buckets(samples: Sequence[Sample]) -> dict[float, float]:
    """The commit-duration histogram of the serving process's metrics: upper bound (seconds) -> commits up to it."""
    name = f"{COMMIT_HISTOGRAM}_bucket"
    return {float(s[3]["le"]): s[4] for s in samples if s[0] == name}


def record(rates: Rates, latency: Rates, samples: Sequence[Sample]) -> None:
    """Keep what the serving process's metrics say now: each tag's events in ``rates``, the commit-duration
    histogram in ``latency``."""
    now = time.time()
    rates.record(now, totals_from_samples(samples))
    latency.record(now, {repr(b): c for b, c in commit_buckets(samples).items()})


def commits_from_samples(samples: Sequence[Sample], latency: Rates) -> Commits:
    """The commit figures of the serving process, from its metrics; quantiles over the last minute that
    ``latency`` (kept by :func:`record`) spans, else since the server started."""
    plain: dict[str, float] = {}
    held = 0.0
    seen_held = False
    for name, _, _, labels, value in samples:
        if name == "windvane_memory_held_bytes":
            held, seen_held = held + value, True
        elif not labels:
            plain[name] = plain.get(name, 0.0) + value
    buckets = commit_buckets(samples)
    grown = latency.growth()
    recent = bool(grown) and any(grown.values()) if grown is not None else False
    if recent and grown is not None:
        buckets = {float(b): c for b, c in grown.items()}
    commits = int(plain.get("windvane_commits_total", 0))
    seconds = plain.get("windvane_commit_seconds_total", 0.0)
    budget = plain.get("windvane_memory_budget_bytes")
    return Commits(
        total=commits,
        failures=int(plain.get("windvane_commit_failures_total", 0)),
        failing=bool(plain.get("windvane_commits_failing", 0)),
        mean_seconds=seconds / commits if commits else None,
        p50=quantile(0.5, buckets),
        p99=quantile(0.99, buckets),
        recent=recent,
        pending_bytes=int(plain.get("windvane_pending_bytes", 0)),
        budget_bytes=None if budget is None else int(budget),
        held_bytes=int(held) if seen_held else None,
        workers=int(plain.get("windvane_workers", 1)),
    )


def overview(source: Source, rates: Rates, latency: Rates, query: str = "", page: int = 1) -> Overview:
    """The overview at the newest commit: health, commits, one page of streams (tags containing ``query``),
    and every quarantine with its reasons."""
    store = source.store
    tid = store.last_transaction()
    health = _health(source)
    commits = None
    if source.samples is not None:
        samples = source.samples()
        record(rates, latency, samples)
        commits = commits_from_samples(samples, latency)
    tags = [t for t in arrays.list_streams(store, at=tid) if query in t] if tid != neostore.ZERO else []
    pages = max(1, -(-len(tags) // PAGE_STREAMS))
    page = min(max(page, 1), pages)
    shown = tags[(page - 1) * PAGE_STREAMS : page * PAGE_STREAMS]
    quarantines = _quarantines(store, tid)
    quarantined = {q.tag: q.rows for q in quarantines}
    rows: list[StreamRow] = []
    counted: dict[str, float] = {}
    for tag in shown:
        with arrays.open_stream(store, tag, at=tid) as stream:
            span = stream.time_span()
            count = len(stream)
            schema = stream.attrs.get("schema")
        counted[tag] = count
        rows.append(
            StreamRow(
                tag=tag,
                rows=count,
                earliest=None if span is None else iso_text(span[0]),
                latest=None if span is None else iso_text(span[1]),
                schema=schema if isinstance(schema, str) else None,
                rate=rates.per_second(tag),
                sparkline=sparkline_points(rates.sparkline(tag)),
                quarantined=quarantined.get(tag, 0),
            )
        )
    if source.samples is None:
        # Nothing ingests here: the streams' rows are the totals whose growth the rates show.
        rates.record(time.time(), counted)
        rows = [
            StreamRow(
                **{**vars(r), "rate": rates.per_second(r.tag), "sparkline": sparkline_points(rates.sparkline(r.tag))}
            )
            for r in rows
        ]
    senders = None if source.senders is None else source.senders()
    return Overview(
        tid.hex(),
        health,
        rows,
        len(tags),
        page,
        pages,
        query,
        quarantines,
        commits,
        None if senders is None else [_sender(s) for s in senders[:SHOWN_SENDERS]],
        0 if senders is None else len(senders),
    )


def _sender(found: dict[str, Any]) -> SenderRow:
    now = time.time()
    life = max(now - found["since"], 1e-9)
    last = found.get("last_ack")
    return SenderRow(
        protocol=found["protocol"],
        peer=found["peer"],
        user=found.get("user"),
        hostname=found.get("hostname"),
        open=bool(found.get("open")),
        events=int(found.get("events", 0)),
        acknowledged=int(found.get("chunks", 0) or found.get("requests", 0)),
        bytes=int(found.get("bytes", 0)),
        since=life,
        last_ack=None if last is None else max(0.0, now - last),
        rate=found.get("events", 0) / life if found.get("events") else None,
        worker=found.get("worker"),
    )


def _health(source: Source) -> dict[str, Any]:
    try:
        return source.health()
    except Exception as exc:  # noqa: BLE001 - the page shows what /health would answer with 503
        return {"status": "unavailable", "message": f"{type(exc).__name__}: {exc}"}


def _quarantines(store: neostore.Store, tid: bytes) -> list[QuarantineRow]:
    if tid == neostore.ZERO:
        return []
    out = []
    for tag in arrays.list_streams(store, quarantine=True, at=tid):
        with arrays.open_stream(store, tag, quarantine=True, at=tid) as q:
            count = len(q)
            if not count:
                continue
            reasons = q["reason"][:].tolist()
            span = q.time_span()
        out.append(QuarantineRow(tag, count, _age(span), replay.summary(tag, reasons).reasons))
    return out


def _age(span: Any) -> float | None:
    return None if span is None else max(0.0, time.time() - span[0] / 1e9)


# -- a stream -------------------------------------------------------------------------------


def _open(store: neostore.Store, tag: str, at: str | None, *, quarantine: bool = False) -> arrays.Stream:
    """The stream at ``at`` (text: a tid as windvane prints it, or a time) or at the newest commit."""
    try:
        return arrays.open_stream(store, tag, at=at or store.last_transaction(), quarantine=quarantine)
    except arrays.StreamNotFoundError:
        what = "quarantine of stream" if quarantine else "stream"
        raise NotFound(f"there is no {what} {tag!r}" + (f" at {at}" if at else "")) from None
    except arrays.SnapshotError as exc:
        raise BadQuery(f"at={at!r}: {exc}") from None


def stream_page(store: neostore.Store, tag: str, at: str | None) -> StreamPage:
    """A stream's figures and columns, as of ``at`` or the newest commit."""
    with _open(store, tag, at) as stream:
        span = stream.time_span()
        attrs = stream.attrs
        columns = [
            ColumnRow(
                name,
                arrays.dtype_name(stream[name].dtype),
                list(stream[name].shape),
                stream[name].dtype.kind in "biuf" and name != "time",
            )
            for name in ["time", *stream.columns]
        ]
        rows, path, tid = len(stream), stream.path, stream.tid
    quarantined = 0
    if tag in arrays.list_streams(store, quarantine=True, at=at or store.last_transaction()):
        with _open(store, tag, at, quarantine=True) as q:
            quarantined = len(q)
    prefix = f"{path}/".encode()
    now = store.value_usage(prefix, latest=True)
    schema, kind = attrs.get("schema"), attrs.get("kind")
    return StreamPage(
        tag=tag,
        at=at,
        tid=(tid or neostore.ZERO).hex(),
        rows=rows,
        earliest=None if span is None else iso_text(span[0]),
        latest=None if span is None else iso_text(span[1]),
        schema=schema if isinstance(schema, str) else None,
        kind=kind if isinstance(kind, str) else None,
        columns=columns,
        raw_bytes=now.referenced_bytes,
        distinct_bytes=now.value_bytes,
        stored_bytes=now.stored_bytes,
        history_bytes=store.value_usage(prefix, latest=False).stored_bytes,
        quarantined=quarantined,
    )


@dataclass(frozen=True)
class Revision:
    tid: str
    time: str
    message: str


def revisions(store: neostore.Store, tag: str, count: int) -> list[Revision]:
    """The last ``count`` commits that changed stream ``tag`` (oldest first) whose state can still be read:
    what the history slider moves between."""
    try:
        commits = arrays.history(store, tag)
    except arrays.ArrayNotFoundError:
        raise NotFound(f"there is no stream {tag!r}") from None
    kept = [c for c in commits if c.openable][-count:]
    return [Revision(f"0x{c.tid.hex()}", c.time.isoformat().replace("+00:00", "Z"), c.message) for c in kept]


def tail(store: neostore.Store, tag: str, count: int) -> Tail:
    """The newest ``count`` rows of a stream (by the order they were stored), each value as text."""
    with _open(store, tag, None) as stream:
        total = len(stream)
        first = max(0, total - count)
        names = ["time", *stream.columns]
        columns = {name: stream[name][first:total] for name in names}
    texts = [_texts(name, values) for name, values in columns.items()]
    return Tail(names, [list(row) for row in zip(*texts)] if texts else [], first, total)


def _texts(name: str, values: Any) -> list[str]:
    if name == "time":
        return [iso_text(int(v)) for v in values]
    out = []
    for v in values:
        if isinstance(v, (bytes, bytearray)):
            out.append(bytes(v).decode("utf-8", "backslashreplace"))
        elif isinstance(v, np.ndarray):
            out.append(np.array2string(v, threshold=8, precision=6))
        else:
            out.append(str(v.item() if isinstance(v, np.generic) else v))
    return out


def plot(
    store: neostore.Store,
    tag: str,
    column: str,
    width: int,
    start_ns: int | None,
    stop_ns: int | None,
    at: str | None,
    channel: int = 0,
) -> dict[str, Any]:
    """A column's points for a plot ``width`` pixels wide (M4: each pixel's first, least, greatest and last
    value), as JSON-ready data: times in seconds, as uPlot takes them."""
    from windvane.arrays.downsample import plot_series

    def draw(stream: arrays.Stream, start: int | None, stop: int | None) -> Any:
        return plot_series(stream, column, width, start, stop, channel=channel)

    series = _across(store, tag, column, width, start_ns, stop_ns, at, draw)
    return {**_timeline(series), "exact": series.exact, "y": _json_floats(series.values)}


def _across(
    store: neostore.Store,
    tag: str,
    column: str,
    width: int,
    start_ns: int | None,
    stop_ns: int | None,
    at: str | None,
    draw: Callable[[arrays.Stream, int | None, int | None], T],
) -> T:
    """What ``draw(stream, start, stop)`` makes of a column across a time range ``width`` pixels wide: the
    stream as of ``at``, a whole stream's range steadied (:func:`_steady_range`), and what the query asked
    wrongly (a column that is not a number, a channel or width out of range) a BadQuery."""
    with _open(store, tag, at) as stream:
        _check_column(stream, tag, column)
        if start_ns is None and stop_ns is None:
            start_ns, stop_ns = _steady_range(stream.time_span(), width)
        try:
            return draw(stream, start_ns, stop_ns)
        except ValueError as exc:  # the arrays' column and view errors are ValueErrors: what was asked is wrong
            raise BadQuery(str(exc)) from None


def _timeline(series: Any) -> dict[str, Any]:
    """What every series over time says of itself, times in seconds."""
    return {
        "column": series.column,
        "start": series.start_ns / 1e9,
        "stop": series.stop_ns / 1e9,
        "rows": series.rows,
        "points": len(series.times),
        "x": (series.times / 1e9).tolist(),
    }


def download(
    store: neostore.Store, tag: str, target: Path, kind: str, start: str | None, stop: str | None, at: str | None
) -> None:
    """Write the rows of ``tag`` whose time is in ``[start, stop)`` (ISO 8601 or Unix seconds, as text) to
    ``target`` as ``kind``, from one snapshot (``at``, or the newest commit)."""
    from windvane import export

    try:
        export.export(
            store,
            tag,
            target,
            kind,
            start=start,
            stop=stop,
            at=at,
        )
    except export.UnknownStream as exc:
        raise NotFound(str(exc)) from None
    except (export.BadTime, export.BadSnapshot) as exc:
        raise BadQuery(str(exc)) from None


def rms(
    store: neostore.Store,
    tag: str,
    column: str,
    width: int,
    start_ns: int | None,
    stop_ns: int | None,
    at: str | None,
) -> dict[str, Any]:
    """A vibration column's RMS per channel over time, one point per pixel column (JSON-ready: seconds)."""
    from windvane.arrays.vibration_views import rms_series

    def draw(stream: arrays.Stream, start: int | None, stop: int | None) -> Any:
        return rms_series(stream, column, width, start, stop)

    series = _across(store, tag, column, width, start_ns, stop_ns, at, draw)
    return {**_timeline(series), "channels": [_json_floats(series.rms[:, c]) for c in range(series.rms.shape[1])]}


def power_spectrum(
    store: neostore.Store, tag: str, column: str, start_ns: int | None, stop_ns: int | None, at: str | None, nfft: int
) -> dict[str, Any]:
    """The power spectral density of a window of a vibration column, per channel (the last second of the
    stream when no window is given)."""
    from windvane.arrays.downsample import NotPlottable
    from windvane.arrays.vibration_views import ViewError, spectrum

    with _open(store, tag, at) as stream:
        _check_column(stream, tag, column)
        span = stream.time_span()
        if span is None:
            raise BadQuery(f"stream {tag!r} holds no rows to take a spectrum of")
        stop = int(span[1]) + 1 if stop_ns is None else stop_ns
        start = stop - 1_000_000_000 if start_ns is None else start_ns
        try:
            found = spectrum(stream, column, start, stop, nfft=nfft)
        except (NotPlottable, ViewError) as exc:
            raise BadQuery(str(exc)) from None
    return {
        "column": found.column,
        "start": found.start_ns / 1e9,
        "stop": found.stop_ns / 1e9,
        "rows": found.rows,
        "segments": found.segments,
        "sample_rate": found.sample_rate,
        "x": found.frequencies.tolist(),
        "channels": [_json_floats(found.power[:, c]) for c in range(found.power.shape[1])],
    }


def _check_column(stream: arrays.Stream, tag: str, column: str) -> None:
    if column != "time" and column not in stream.columns:
        raise NotFound(f"stream {tag!r} has no column {column!r}")


def _json_floats(values: np.ndarray) -> list[float | None]:
    """Floats for JSON, NaN (no value) as null."""
    return [None if v != v else v for v in values.tolist()]


def _steady_range(span: Any, width: int) -> tuple[int | None, int | None]:
    """The range a plot of a whole stream asks for: its span, widened so that each pixel column covers a
    power of two of nanoseconds and begins at a multiple of it.

    A growing stream's span moves with every commit; asked as it is, every
    pixel boundary would move too, and the downsampler would read every
    chunk again for the rows beside them. Widened so, the boundaries stay
    where they are until the span doubles, and repeated plots of a live
    stream read its new rows alone. Each pixel then covers up to twice the
    time it would, never less.
    """
    if span is None:
        return None, None
    first, last = int(span[0]), int(span[1])
    pixel = 1 << max(0, (-(-(last + 1 - first) // width) - 1).bit_length())
    start = first - first % pixel
    return start, max(start + pixel * width, last + 1)


# -- a quarantine ---------------------------------------------------------------------------


def quarantine_page(store: neostore.Store, tag: str, latest: int = 50) -> QuarantinePage:
    """A tag's quarantine at the newest commit: reasons with their counts, and the latest records as they
    arrived (as text; bytes that are not UTF-8 escaped)."""
    tid = store.last_transaction()
    if tid == neostore.ZERO or tag not in arrays.list_streams(store, quarantine=True, at=tid):
        raise NotFound(f"stream {tag!r} has no quarantine")
    with arrays.open_stream(store, tag, quarantine=True, at=tid) as q:
        count = len(q)
        reasons = q["reason"][:].tolist()
        span = q.time_span()
        first = max(0, count - latest)
        part = {name: q[name][first:count] for name in ("time", "reason", "source", "raw")}
    records = []
    for t, reason, source, raw in zip(part["time"], part["reason"], part["source"], part["raw"]):
        text = bytes(raw).decode("utf-8", "backslashreplace") if isinstance(raw, (bytes, bytearray)) else str(raw)
        records.append(
            QuarantinedRecord(iso_text(int(t)), str(reason), str(source), text[:RAW_SHOWN], len(text) > RAW_SHOWN)
        )
    records.reverse()
    exists = tag in arrays.list_streams(store, at=tid)
    schema = None
    if exists:
        with arrays.open_stream(store, tag, at=tid) as stream:
            found = stream.attrs.get("schema")
            schema = found if isinstance(found, str) else None
    return QuarantinePage(tag, count, _age(span), replay.summary(tag, reasons).reasons, records, exists, schema)


def replay_quarantine(source: Source, tag: str) -> replay.ReplayResult:
    """Replay ``tag``'s quarantine against the schema the server validates the tag with now (the fixed one,
    after a fix), else the stream's."""
    schema = source.schema_for(tag) if source.schema_for is not None else None
    try:
        return replay.replay(source.store, tag, schema)
    except replay.NoQuarantine as exc:
        raise NotFound(str(exc)) from None
    except (replay.ReplayError, SchemaMismatch) as exc:
        raise Conflict(str(exc)) from None


def discard_quarantine(store: neostore.Store, tag: str, reason: str | None, expected: int) -> replay.DiscardResult:
    try:
        return replay.discard(store, tag, reason, expected)
    except replay.NoQuarantine as exc:
        raise NotFound(str(exc)) from None
