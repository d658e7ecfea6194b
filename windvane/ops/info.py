"""What a store holds, stream by stream, as plain data: what ``windvane info`` and ``windvane demo`` print.

:func:`describe` reads the store only (through arrays and neostore) and
returns a :class:`StoreInfo`; :func:`to_json` makes it JSON data and
:func:`report_lines` the text the commands print. Byte figures:

- **raw**: what a stream's arrays hold uncompressed: ``nbytes`` of number
  columns (from their metadata), the UTF-8 or byte length of every value
  of text and bytes columns (those columns are read to measure them).
- **stored**: the distinct values the stream's latest revisions refer to,
  as the database holds them (after the codecs, neostore's compression and
  dedup). **history**: the same for every revision of the stream, the
  partial chunks each append rewrote included: what the store holds for
  it until a pack drops what nobody can see.
- **dedup ratio** (whole store): the bytes every revision refers to,
  counted once per revision, over the bytes of the distinct values.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np

from windvane import arrays, neostore
from windvane.neostore.store import ValueUsage

#: Rows of a text column read at a time to measure it.
_MEASURE_ROWS = 65_536


@dataclass(frozen=True)
class ColumnInfo:
    """One array of a stream."""

    name: str
    dtype: str  # numpy's name, "str" or "bytes"
    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    codec: str  # the compressors after serialisation, "+"-joined ("none")
    raw_bytes: int
    stored_bytes: int


@dataclass(frozen=True)
class StreamInfo:
    """One stream (or quarantine stream) at the latest commit. Times are ns since the epoch, UTC."""

    tag: str
    quarantine: bool
    path: str
    schema: str | None
    kind: str | None
    rows: int
    # The least and greatest time of its rows (rows arrive in any time order), from the time records kept per
    # chunk (arrays.time_index); None if no row has a time.
    earliest_time: int | None
    latest_time: int | None
    columns: tuple[ColumnInfo, ...]  # "time" first
    raw_bytes: int
    stored_bytes: int
    history_bytes: int


@dataclass(frozen=True)
class CommitInfo:
    """A committed transaction."""

    tid: str  # hex
    time: float  # Unix time
    user: str
    message: str


@dataclass(frozen=True)
class StoreInfo:
    """The whole store: engine facts, row counts, bytes, dedup, last commit, and every stream."""

    backend: dict[str, str]
    transactions: int
    revisions: int
    values: int
    stored_bytes: int  # every value the database holds, as stored
    references: int  # revisions that refer to a value
    referenced_bytes: int  # their values' sizes, once per revision
    value_bytes: int  # the distinct values' sizes, each once, before neostore's compression
    dedup_ratio: float
    last_commit: CommitInfo | None
    packed_up_to: CommitInfo | None
    streams: tuple[StreamInfo, ...] | None  # None: not looked at
    #: The nodes of the cluster the store is on (empty on one server) and its read replicas.
    nodes: tuple[neostore.NodeState, ...] = ()
    replicas: tuple[neostore.ReplicaState, ...] = ()


def describe(store: neostore.Store, *, streams: bool = True) -> StoreInfo:
    """Everything :class:`StoreInfo` says about ``store``, as of its latest commit (its streams if ``streams``)."""
    counts = store.counts()
    usage = store.value_usage()
    last, packed = store.last_transaction(), store.pack_tid()
    found = describe_streams(store) if streams else None
    return StoreInfo(
        backend=dict(store.backend.describe()),
        transactions=counts["trans"],
        revisions=counts["obj"],
        values=counts["data"],
        stored_bytes=store.value_size(),
        references=usage.references,
        referenced_bytes=usage.referenced_bytes,
        value_bytes=usage.value_bytes,
        dedup_ratio=usage.dedup_ratio,
        last_commit=_commit(store, last),
        packed_up_to=_commit(store, packed),
        streams=found,
        nodes=tuple(store.node_states()),
        replicas=tuple(store.replica_states()),
    )


def describe_streams(store: neostore.Store) -> tuple[StreamInfo, ...]:
    """Every stream of ``store``, then every quarantine stream, each sorted by tag, as of its latest commit."""
    return tuple(
        _stream(store, tag, quarantine)
        for quarantine in (False, True)
        for tag in arrays.list_streams(store, quarantine=quarantine)
    )


def _commit(store: neostore.Store, tid: bytes) -> CommitInfo | None:
    if tid == neostore.ZERO:
        return None
    try:
        info = store.transaction_info(tid)
    except neostore.NeoStoreError:  # a pack tid need not be a transaction's
        return CommitInfo(tid.hex(), neostore.tids.tid_time(neostore.u64(tid)), "", "")
    return CommitInfo(
        tid.hex(), info.time, info.user.decode("utf-8", "replace"), info.description.decode("utf-8", "replace")
    )


def _usage(store: neostore.Store, prefix: str, *, latest: bool) -> ValueUsage:
    return store.value_usage(prefix.encode("utf-8"), latest=latest)


def _stream(store: neostore.Store, tag: str, quarantine: bool) -> StreamInfo:
    with arrays.open_stream(store, tag, quarantine=quarantine) as stream:
        rows = len(stream)
        columns = tuple(_column(store, stream, name) for name in ["time", *stream.columns])
        span = stream.time_span()
        attrs = stream.attrs
        path = stream.path
    return StreamInfo(
        tag=tag,
        quarantine=quarantine,
        path=path,
        schema=attrs.get("schema"),
        kind=attrs.get("kind"),
        rows=rows,
        earliest_time=None if span is None else span[0],
        latest_time=None if span is None else span[1],
        columns=columns,
        raw_bytes=sum(c.raw_bytes for c in columns),
        stored_bytes=_usage(store, f"{path}/", latest=True).stored_bytes,
        history_bytes=_usage(store, f"{path}/", latest=False).stored_bytes,
    )


def _column(store: neostore.Store, stream: arrays.Stream, name: str) -> ColumnInfo:
    array = stream[name]
    kind = array.dtype.kind
    return ColumnInfo(
        name=name,
        dtype=arrays.dtype_name(array.dtype),
        shape=tuple(array.shape),
        chunks=tuple(array.chunks),
        codec="+".join(c["name"] for c in array.codec[1:]) or "none",  # after the serialiser
        raw_bytes=_text_bytes(array) if kind in "TO" else array.nbytes,
        stored_bytes=_usage(store, f"{stream.path}/{name}/", latest=True).stored_bytes,
    )


def _text_bytes(array: arrays.BigArray) -> int:
    """The UTF-8 (or byte) length of every value of a text (or bytes) column, read block by block."""
    total = 0
    for _, block in array.blocks(rows=_MEASURE_ROWS):
        items = block.reshape(-1).tolist()
        total += len("".join(items).encode("utf-8")) if array.dtype.kind == "T" else len(b"".join(items))
    return total


def to_json(info: StoreInfo) -> dict[str, Any]:
    """``info`` as JSON data (times in ns and Unix seconds, tids in hex)."""
    return dataclasses.asdict(info)


def _span(stream: StreamInfo) -> tuple[str, str] | None:
    """The earliest and latest time of ``stream``'s rows as text; None if no row has a time."""
    if stream.earliest_time is None or stream.latest_time is None:
        return None
    return _when(stream.earliest_time, ns=True), _when(stream.latest_time, ns=True)


def _when(ns_or_seconds: float, *, ns: bool = False) -> str:
    """A UTC time as text: to the second for Unix seconds, to the finest unit it needs for ``ns``."""
    if not ns:
        return datetime.fromtimestamp(ns_or_seconds, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    value = int(ns_or_seconds)
    unit = next(u for u, per in (("s", 10**9), ("ms", 10**6), ("us", 10**3), ("ns", 1)) if value % per == 0)
    return str(np.datetime64(value, "ns").astype(f"datetime64[{unit}]")).replace("T", " ") + " UTC"


def _commit_text(commit: CommitInfo | None) -> str:
    if commit is None:
        return "none"
    message = f" {commit.message!r}" if commit.message else ""
    return f"0x{commit.tid} ({_when(commit.time)}){message}"


def report_lines(info: StoreInfo) -> Iterator[str]:
    """The text report of ``info``: the store, then one block per stream (if it looked at them)."""
    for name, value in info.backend.items():
        yield f"{name + ':':<17}{value}"
    yield f"{'transactions:':<17}{info.transactions:,}"
    yield f"{'revisions:':<17}{info.revisions:,}"
    yield f"{'values:':<17}{info.values:,} ({info.stored_bytes:,} bytes stored)"
    yield (
        f"{'dedup ratio:':<17}{info.dedup_ratio:.2f} ({info.references:,} references to "
        f"{info.referenced_bytes:,} bytes held as {info.value_bytes:,} bytes of distinct values)"
    )
    yield f"{'last commit:':<17}{_commit_text(info.last_commit)}"
    yield f"{'packed up to:':<17}{_commit_text(info.packed_up_to)}"
    yield from cluster_lines(info.nodes, info.replicas)
    if info.streams is None:
        return
    quarantined = sum(s.quarantine for s in info.streams)
    yield ""
    yield f"streams: {len(info.streams) - quarantined}, quarantine streams: {quarantined}"
    for s in info.streams:
        yield ""
        yield f"{'quarantine' if s.quarantine else 'stream'} {s.tag}  ({s.path})"
        times = _span(s)
        span = f", {times[0]} .. {times[1]}" if times else ", no time" if s.rows else ""
        yield f"  rows: {s.rows:,}{span}"
        ratio = f" ({s.raw_bytes / s.stored_bytes:.2f}x)" if s.stored_bytes else ""
        yield (f"  bytes: raw {s.raw_bytes:,}, stored {s.stored_bytes:,}{ratio}, with history {s.history_bytes:,}")
        for c in s.columns:
            shape = "x".join(map(str, c.shape))
            yield (
                f"    {c.name:<20} {c.dtype:<8} {shape:<12} {c.codec:<6} raw {c.raw_bytes:>11,}  "
                f"stored {c.stored_bytes:>11,}"
            )


def cluster_lines(nodes: tuple[neostore.NodeState, ...], replicas: tuple[neostore.ReplicaState, ...]) -> Iterator[str]:
    """One line per cluster node (which one is written to, its state) and per replica (its lag)."""
    for n in nodes:
        state = n.error if n.error else f"{n.state}, {n.component}, cluster size {n.cluster_size}"
        yield f"{'node:':<17}{n.node}{'  (written to)' if n.written else ''}: {state}"
    for r in replicas:
        if r.error is not None:
            yield f"{'replica:':<17}{r.node}: unreachable ({r.error})"
        else:
            yield f"{'replica:':<17}{r.node}: {r.behind:,} commits, {r.lag_seconds:.1f} s behind"


def stream_table_lines(found: tuple[StreamInfo, ...]) -> Iterator[str]:
    """One line per stream (quarantine streams as ``quarantine/<tag>``): rows, time range, bytes stored."""
    if not found:
        yield "no streams"
        return
    names = [f"quarantine/{s.tag}" if s.quarantine else s.tag for s in found]
    spans = [_span(s) or ("-", "-") for s in found]
    width = max(len("stream"), *map(len, names))
    at = max(len("earliest"), *(len(t) for span in spans for t in span))
    yield f"{'stream':<{width}}  {'rows':>12}  {'earliest':<{at}}  {'latest':<{at}}  {'stored':>14}  {'with history':>14}"
    for name, (earliest, latest), s in zip(names, spans, found):
        yield (
            f"{name:<{width}}  {s.rows:>12,}  {earliest:<{at}}  {latest:<{at}}  {s.stored_bytes:>14,}  "
            f"{s.history_bytes:>14,}"
        )
