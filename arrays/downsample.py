"""Downsampling a stream's column for a plot: M4 per pixel column, so that the plotted shape survives.

A plot of ``width`` pixel columns over ``[start_ns, stop_ns)`` needs, per
pixel column, only four rows of the column: the first and the last by time,
the least and the greatest value (M4, Jugel et al., VLDB 2014). Drawn as a
line through those points in time order, the plot of millions of rows is
pixel for pixel the plot of all of them, while the browser receives at
most ``4 * width`` points.

Reading every row of a long stream for every plot would cost as much as
reading the stream, so two process-wide caches (:data:`plot_cache`) keep
what does not change:

- **Summaries.** A *segment* is the smallest run of rows whose ``time``
  chunks and value chunks both begin and end at its bounds (usually one
  chunk of each). Once all of a segment's chunks are full, its rows are
  summarised once, per *sub-block* of a few hundred rows, into that
  sub-block's first, last, least and greatest value with their times and
  rows. A pixel column that covers whole sub-blocks takes their summaries.
- **Edges.** A sub-block that straddles a pixel boundary (or the range's
  bounds) is split row by row. The rows of such sub-blocks are kept too,
  so that asking for the same plot again (a console reloading its overview)
  reads nothing but the partial last chunk. Pixel boundaries that move
  (another width, a range that slides with the clock) fall in other
  sub-blocks, whose segments are then read again, though not summarised
  again; a caller that keeps its boundaries at multiples of its pixel
  duration keeps them in place as the range slides.

Where pixel columns are narrower than a few sub-blocks, most sub-blocks
straddle a boundary: the segment's rows are then reduced as they are,
which costs less than splitting sub-blocks one by one.

Both are keyed by the store, the object id, revision (serial) and stored
size of every ``time`` and value chunk of the segment, and what decodes
them (dtype, chunk shape, codecs, fill value): a revision of a neostore
object never changes, so an entry is exact for as long as those revisions
are the ones a view sees, and a chunk rewritten, appended to or filled gets
a new revision and so a new key. Partial segments, and streams read inside
a transaction (whose chunks may have unwritten revisions), are read every
time and never cached.

The plan's parts (:class:`Source`, :func:`column_source`,
:func:`segment_keys`, :func:`overlapping_segments`, :func:`read_ahead`,
:class:`Lru`, :func:`time_bound`) are public: other views of a column
(:mod:`arrays.vibration_views`) summarise segments under the same keys.

Rows of a stream arrive in any time order: everything here works on
``(time, row)`` pairs and takes nothing from the order of rows except to
break ties between equal times (the first row of equal times is the first,
the last row of them the last).
"""

from __future__ import annotations

import math
import os
import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Generic, TypeVar

import numpy as np

from . import time_index
from .bigarray import BigArray
from .errors import ColumnError
from .keys import Entry, Snapshot, next_tid_after
from .stream import Stream
from .stream_schema import TIME
from .times import NO_TIME
from .workers import io_pool

__all__ = [
    "MAX_WIDTH",
    "ChannelError",
    "Lru",
    "NotPlottable",
    "PlotCache",
    "PlotSeries",
    "SegmentKey",
    "Source",
    "column_source",
    "overlapping_segments",
    "plot_cache",
    "plot_series",
    "read_ahead",
    "segment_keys",
    "time_bound",
]

#: The widest plot served, in pixel columns.
MAX_WIDTH = 10_000
#: Rows at most per segment that is summarised and cached; streams whose chunk sizes only line up over
#: more rows are read row by row (their segments would take too much memory to read at once).
MAX_SEGMENT_ROWS = 1 << 22
#: Sub-blocks per segment: fine enough that a pixel column of a long range covers many whole ones,
#: coarse enough that the summaries of a segment stay far smaller than its rows.
SUB_BLOCKS = 512
#: Rows per sub-block at least (a segment of few rows is summarised in fewer sub-blocks).
MIN_SUB_BLOCK_ROWS = 64
#: Items (summaries or rows) gathered before they are reduced into the pixel columns: bounds memory.
_REDUCE_ITEMS = 1 << 20
#: Segments read ahead of the one being reduced.
_READ_AHEAD = 2

_I64_MAX = np.iinfo(np.int64).max
_NO_ROW = np.int64(-1)


class NotPlottable(ColumnError):
    """A column whose values are not numbers or booleans (text, bytes, datetimes, complex): it has no y."""


class ChannelError(ColumnError, IndexError):
    """A channel outside the column's channels (its values' extra dimensions, flattened)."""


@dataclass(frozen=True, eq=False)  # eq=False: numpy arrays have no single truth value to compare by
class PlotSeries:
    """The points of one column to plot over ``[start_ns, stop_ns)``, x ascending.

    ``times`` (int64 ns) and ``values`` (float64, NaN where the value is
    NaN) have one entry per point. ``rows`` counts the stream's rows whose
    time is in the range; ``exact`` says every one of them is a point, as
    it is (``rows <= 4 * width``), rather than the M4 points of the pixel
    columns.
    """

    column: str
    start_ns: int
    stop_ns: int
    times: np.ndarray
    values: np.ndarray
    rows: int
    exact: bool


# -- items: groups of rows reduced to their M4 --------------------------------------------


@dataclass(frozen=True, eq=False)
class _Items:
    """Groups of rows, each reduced to its M4: one row is an item, so is a sub-block, so is a pixel column.

    Per item: ``bucket`` (what it is reduced into: a sub-block or a pixel
    column), ``count`` (its rows), the first row by time (``first_t``,
    ``first_row``, ``first_v``; of equal times, the first row), the last
    (of equal times, the last row), the least and the greatest value
    ignoring NaN (NaN when every value is NaN) with the least time that
    holds it. Rows count from the start of the stream, so items of
    disjoint rows compare.
    """

    bucket: np.ndarray
    count: np.ndarray
    first_t: np.ndarray
    first_row: np.ndarray
    first_v: np.ndarray
    last_t: np.ndarray
    last_row: np.ndarray
    last_v: np.ndarray
    low_t: np.ndarray
    low_v: np.ndarray
    high_t: np.ndarray
    high_v: np.ndarray

    def __len__(self) -> int:
        return len(self.bucket)

    @property
    def nbytes(self) -> int:
        return sum(int(a.nbytes) for a in self.columns())

    def columns(self) -> tuple[np.ndarray, ...]:
        return (
            self.bucket,
            self.count,
            self.first_t,
            self.first_row,
            self.first_v,
            self.last_t,
            self.last_row,
            self.last_v,
            self.low_t,
            self.low_v,
            self.high_t,
            self.high_v,
        )

    def take(self, index: np.ndarray) -> _Items:
        return _Items(*(a[index] for a in self.columns()))

    def owned(self) -> _Items:
        """A copy holding only its own memory (a view would keep the rows it was cut from alive in a cache)."""
        return _Items(*(a.copy() for a in self.columns()))

    def rebucket(self, bucket: np.ndarray) -> _Items:
        return _Items(bucket, *self.columns()[1:])


def _row_items(times: np.ndarray, values: np.ndarray, rows: np.ndarray, bucket: np.ndarray) -> _Items:
    """Each row an item of its own (the arrays are shared, not copied)."""
    ones = np.ones(len(times), dtype=np.int64)
    return _Items(bucket, ones, times, rows, values, times, rows, values, times, values, times, values)


def _concat(parts: Sequence[_Items]) -> _Items:
    if len(parts) == 1:
        return parts[0]
    columns = zip(*(p.columns() for p in parts))
    return _Items(*(np.concatenate(c) for c in columns))


def _reduce(items: _Items) -> _Items:
    """One item per distinct bucket, buckets ascending: the M4 of all the items that fall in it."""
    n = len(items)
    if n == 0:
        return items
    bucket = items.bucket
    if n > 1 and not bool(np.all(bucket[1:] >= bucket[:-1])):
        items = items.take(np.argsort(bucket, kind="stable"))
        bucket = items.bucket
    starts = np.flatnonzero(bucket[1:] != bucket[:-1]) + 1
    if len(starts) == n - 1:
        return items  # every bucket holds one item: nothing to merge
    starts = np.concatenate((np.zeros(1, dtype=np.intp), starts))
    groups = len(starts)
    of = np.repeat(np.arange(groups), np.diff(np.append(starts, n)))

    first_t = np.minimum.reduceat(items.first_t, starts)
    tied = items.first_t == first_t[of]
    first_row = np.minimum.reduceat(np.where(tied, items.first_row, _I64_MAX), starts)
    first_v = _pick(items.first_v, of, tied & (items.first_row == first_row[of]), groups)

    last_t = np.maximum.reduceat(items.last_t, starts)
    tied = items.last_t == last_t[of]
    last_row = np.maximum.reduceat(np.where(tied, items.last_row, _NO_ROW), starts)
    last_v = _pick(items.last_v, of, tied & (items.last_row == last_row[of]), groups)

    low_v = np.fmin.reduceat(items.low_v, starts)  # fmin: NaN only where every value is NaN
    low_t = np.minimum.reduceat(np.where(items.low_v == low_v[of], items.low_t, _I64_MAX), starts)
    high_v = np.fmax.reduceat(items.high_v, starts)
    high_t = np.minimum.reduceat(np.where(items.high_v == high_v[of], items.high_t, _I64_MAX), starts)

    count = np.add.reduceat(items.count, starts)
    return _Items(
        bucket[starts], count, first_t, first_row, first_v, last_t, last_row, last_v, low_t, low_v, high_t, high_v
    )


def _reduce_rows(times: np.ndarray, values: np.ndarray, rows: np.ndarray, bucket: np.ndarray) -> _Items:
    """:func:`_reduce` of rows, each an item: when they come in time and row order, a bucket's first row
    is its first and its last row its last, which saves most of the passes."""
    n = len(times)
    in_order = n > 1 and bool(np.all(times[1:] >= times[:-1])) and bool(np.all(rows[1:] > rows[:-1]))
    if not in_order:
        return _reduce(_row_items(times, values, rows, bucket))
    starts = np.concatenate((np.zeros(1, dtype=np.intp), np.flatnonzero(bucket[1:] != bucket[:-1]) + 1))
    lasts = np.append(starts[1:], n) - 1
    of = np.repeat(np.arange(len(starts)), lasts - starts + 1)
    low_v = np.fmin.reduceat(values, starts)
    low_t = np.minimum.reduceat(np.where(values == low_v[of], times, _I64_MAX), starts)
    high_v = np.fmax.reduceat(values, starts)
    high_t = np.minimum.reduceat(np.where(values == high_v[of], times, _I64_MAX), starts)
    return _Items(
        bucket[starts],
        (lasts - starts + 1).astype(np.int64),
        times[starts],
        rows[starts],
        values[starts],
        times[lasts],
        rows[lasts],
        values[lasts],
        low_t,
        low_v,
        high_t,
        high_v,
    )


def _pick(values: np.ndarray, of: np.ndarray, chosen: np.ndarray, groups: int) -> np.ndarray:
    """Per group, the value of its one chosen item."""
    out = np.empty(groups, dtype=np.float64)
    out[of[chosen]] = values[chosen]
    return out


def _points(pixels: _Items) -> tuple[np.ndarray, np.ndarray]:
    """The M4 points of reduced pixel columns, in time order: per column its first, least, greatest and
    last row, each once (roles that land on the same time and value are one point)."""
    times = np.stack([pixels.first_t, pixels.low_t, pixels.high_t, pixels.last_t], axis=1)
    values = np.stack([pixels.first_v, pixels.low_v, pixels.high_v, pixels.last_v], axis=1)
    keep = np.ones(times.shape, dtype=bool)
    keep[:, 1] = ~np.isnan(pixels.low_v)
    keep[:, 2] = ~np.isnan(pixels.high_v)
    nan = np.isnan(values)
    for later in range(1, 4):
        for earlier in range(later):
            same = (times[:, earlier] == times[:, later]) & (
                (values[:, earlier] == values[:, later]) | (nan[:, earlier] & nan[:, later])
            )
            keep[:, later] &= ~(same & keep[:, earlier])
    order = np.argsort(np.where(keep, times, _I64_MAX), axis=1, kind="stable")
    times = np.take_along_axis(times, order, axis=1)
    values = np.take_along_axis(values, order, axis=1)
    keep = np.take_along_axis(keep, order, axis=1)
    return times[keep], values[keep]


# -- the process-wide caches ------------------------------------------------------------------------

K = TypeVar("K")
V = TypeVar("V")
R = TypeVar("R")


class Lru(Generic[K, V]):
    """Entries up to ``budget`` bytes, least recently used evicted first. Thread-safe."""

    def __init__(self, budget: int):
        self.budget = budget
        self.nbytes = 0
        self.hits = 0
        self.misses = 0
        self._entries: OrderedDict[K, tuple[int, V]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                self.misses += 1
                return None
            self._entries.move_to_end(key)
            self.hits += 1
            return entry[1]

    def put(self, key: K, value: V, size: int) -> None:
        if size > self.budget:
            return
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self.nbytes -= old[0]
            self._entries[key] = (size, value)
            self.nbytes += size
            while self.nbytes > self.budget:
                _, (dropped, _) = self._entries.popitem(last=False)
                self.nbytes -= dropped

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.nbytes = 0

    def stats(self) -> dict[str, int]:
        return {"hits": self.hits, "misses": self.misses, "entries": len(self._entries), "nbytes": self.nbytes}


#: What identifies a full segment's stored bytes and how they decode (see the module's docstring).
SegmentKey = tuple[object, ...]
#: A sub-block's rows with a time: times, values as float64, rows.
_Rows = tuple[np.ndarray, np.ndarray, np.ndarray]


class PlotCache:
    """The summaries of full segments and the rows of the sub-blocks plots split, each up to its budget.

    One per process (:data:`plot_cache`): every view of a stream, at any
    snapshot, shares what it computed. ``stats()`` counts hits and misses.
    """

    def __init__(self, summary_bytes: int, edge_bytes: int):
        self.summaries: Lru[SegmentKey, _Items] = Lru(summary_bytes)
        self.edges: Lru[tuple[SegmentKey, int], _Rows] = Lru(edge_bytes)

    def clear(self) -> None:
        """Drop everything cached (the statistics stay)."""
        self.summaries.clear()
        self.edges.clear()

    def stats(self) -> dict[str, dict[str, int]]:
        return {"summaries": self.summaries.stats(), "edges": self.edges.stats()}


def _budget(name: str, default: int) -> int:
    raw = os.environ.get(name)
    return default if raw is None else int(raw)


#: The process's cache (budgets from ``WINDVANE_PLOT_SUMMARY_BYTES`` and ``WINDVANE_PLOT_EDGE_BYTES``).
plot_cache = PlotCache(
    _budget("WINDVANE_PLOT_SUMMARY_BYTES", 256 << 20),
    _budget("WINDVANE_PLOT_EDGE_BYTES", 128 << 20),
)


# -- the plan: which rows a plot reads, and how ------------------------------------------------------


@dataclass(frozen=True)
class Source:
    """The column as a plot reads it: its arrays, how a row becomes one float, and its segments."""

    stream: Stream
    times: BigArray
    values: BigArray
    channel: int
    channels: int
    length: int
    segment_rows: int
    sub_rows: int
    cacheable: bool

    def read(self, first: int, stop: int) -> _Rows:
        """Rows ``[first, stop)`` that have a time: their times, values as float64 and rows."""
        times = self.times[first:stop]
        if self.values is self.times:
            values = times.astype(np.float64)
        else:
            raw = self.values[first:stop]
            if self.channels > 1 or raw.ndim > 1:
                raw = raw.reshape(len(raw), -1)[:, self.channel]
            values = raw.astype(np.float64)
        rows = np.arange(first, stop, dtype=np.int64)
        timed = times != NO_TIME
        if not bool(timed.all()):
            return times[timed], values[timed], rows[timed]
        return times, values, rows


def column_source(stream: Stream, column: str, channel: int) -> Source:
    times = stream[TIME]
    values = stream[column]
    dtype = values.dtype
    if dtype.kind not in "biuf":
        raise NotPlottable(
            f"column {column!r} of stream {stream.tag!r} holds {dtype} values, which have no place on a "
            "plot's y axis: plot a number or boolean column"
        )
    channels = math.prod(values.shape[1:])
    if isinstance(channel, bool) or not isinstance(channel, (int, np.integer)):
        raise TypeError(f"channel must be an int, not {type(channel).__name__}")
    if not 0 <= channel < channels:
        raise ChannelError(
            f"column {column!r} of stream {stream.tag!r} has {channels} channel(s) "
            f"(row shape {values.shape[1:]}): channel must be 0..{channels - 1}, not {channel}"
        )
    time_rows, value_rows = times.chunks[0], values.chunks[0]
    whole_rows = values.chunks[1:] == values.shape[1:]  # a chunk holds whole rows: its key is (i, 0, ...)
    aligned = math.lcm(time_rows, value_rows)
    cacheable = times.tid is not None and values.tid is not None and whole_rows and aligned <= MAX_SEGMENT_ROWS
    segment_rows = aligned if cacheable else time_rows
    sub_rows = max(MIN_SUB_BLOCK_ROWS, -(-segment_rows // SUB_BLOCKS))
    length = min(len(times), len(values))
    return Source(stream, times, values, int(channel), channels, length, segment_rows, sub_rows, cacheable)


def segment_keys(source: Source, segments: Sequence[int]) -> dict[int, SegmentKey]:
    """The cache key of each of ``segments`` (indices) that is full, read from one listing of the snapshot."""
    rows = source.segment_rows
    full = [s for s in segments if (s + 1) * rows <= source.length]
    if not source.cacheable or not full:
        return {}
    store = source.times.store
    arrays = [source.times] if source.values is source.times else [source.times, source.values]
    listed: dict[str, Entry] = {}
    for a in arrays:  # each at the snapshot it reads (a write through one array moves only that one)
        tid = a.tid
        if tid is None:
            return {}
        listed.update((e.key, e) for e in Snapshot(store, next_tid_after(tid)).raw_list_under([f"{a.name}/"]))
    url = store.url
    where = url.path if url.scheme == "sqlite" else url.text
    decoding = tuple((a.dtype.str, a.chunks, repr(a.codec), repr(a.fill_value)) for a in arrays)
    keys: dict[int, SegmentKey] = {}
    for s in full:
        ids: list[object] = []
        for a in arrays:
            inner = (0,) * (a.ndim - 1)
            per = a.chunks[0]
            for i in range(s * rows // per, (s + 1) * rows // per):
                entry = listed.get(f"{a.name}/{a.meta.chunk_key((i, *inner))}")
                ids.append(None if entry is None else (entry.oid, entry.serial, entry.size))  # None: the fill
        keys[s] = (where, decoding, source.channel, source.sub_rows, tuple(ids))
    return keys


def _summary(source: Source, first: int, rows: _Rows) -> _Items:
    """The sub-block summaries of a segment's rows (sub-blocks without a timed row left out)."""
    times, values, numbers = rows
    size = source.sub_rows
    whole = len(times) // size * size
    if not whole or int(numbers[-1]) - first + 1 != len(numbers) or bool(np.isnan(values[:whole]).any()):
        # Rows without a time left gaps, or NaN needs ignoring: item by item.
        return _reduce(_row_items(times, values, numbers, (numbers - first) // size))
    parts = [_regular_summary(times[:whole], values[:whole], first, size)]
    if whole < len(times):  # the last sub-block is short
        tail = slice(whole, None)
        parts.append(_reduce(_row_items(times[tail], values[tail], numbers[tail], (numbers[tail] - first) // size)))
    return _concat(parts)


def _regular_summary(times: np.ndarray, values: np.ndarray, first: int, size: int) -> _Items:
    """The summaries of sub-blocks of ``size`` rows, every row timed and no value NaN: each sub-block a row
    of a 2-D view, reduced along it (several times faster than item by item)."""
    t = times.reshape(-1, size)
    v = values.reshape(-1, size)
    blocks = np.arange(len(t))
    low_v, high_v = v.min(axis=1), v.max(axis=1)
    if bool(np.all(times[1:] >= times[:-1])):
        # In time order: the first row is the first, the last the last, and the first row holding the
        # least (greatest) value has the least time that does.
        first_i = np.zeros(len(t), dtype=np.intp)
        last_i = np.full(len(t), size - 1, dtype=np.intp)
        low_t = t[blocks, v.argmin(axis=1)]
        high_t = t[blocks, v.argmax(axis=1)]
    else:
        first_i = t.argmin(axis=1)  # the first row of the least time
        last_i = size - 1 - t[:, ::-1].argmax(axis=1)  # the last row of the greatest time
        low_t = np.where(v == low_v[:, None], t, _I64_MAX).min(axis=1)
        high_t = np.where(v == high_v[:, None], t, _I64_MAX).min(axis=1)
    base = first + blocks * size
    count = np.full(len(t), size, dtype=np.int64)
    return _Items(
        blocks.astype(np.int64),
        count,
        t[blocks, first_i],
        (base + first_i).astype(np.int64),
        v[blocks, first_i],
        t[blocks, last_i],
        (base + last_i).astype(np.int64),
        v[blocks, last_i],
        low_t,
        low_v,
        high_t,
        high_v,
    )


class _Pixels:
    """The pixel columns of ``[start, stop)`` and the M4 of what was added to them so far."""

    def __init__(self, start: int, stop: int, width: int):
        self.start, self.stop = start, stop
        span = stop - start
        # Exact integer bounds (Python ints: span * width may pass int64).
        self.inner = np.array([start + i * span // width for i in range(1, width)], dtype=np.int64)
        self.rows = 0
        self._done: _Items | None = None
        self._blocks: list[_Items] = []
        self._raw: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []  # rows and their pixels
        self._pending = 0

    def of(self, times: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.inner, times, side="right").astype(np.int64)

    def add_rows(self, rows: _Rows) -> None:
        times, values, numbers = rows
        inside = (times >= self.start) & (times < self.stop)
        if not bool(inside.all()):
            times, values, numbers = times[inside], values[inside], numbers[inside]
        if len(times):
            self.rows += len(times)
            if len(times) > len(self.inner) and bool(np.all(times[1:] >= times[:-1])):
                # In time order: where each pixel column begins, then one pass to label the rows.
                cuts = np.searchsorted(times, self.inner, side="left")
                pixel = np.repeat(np.arange(len(cuts) + 1), np.diff(cuts, prepend=0, append=len(times)))
            else:
                pixel = self.of(times)
            self._raw.append((times, values, numbers, pixel))
            self._grow(len(times))

    def add_blocks(self, blocks: _Items) -> None:
        """Sub-blocks that each lie inside one pixel column (their buckets are those columns)."""
        if len(blocks):
            self.rows += int(blocks.count.sum())
            self._blocks.append(blocks)
            self._grow(len(blocks))

    def _grow(self, n: int) -> None:
        self._pending += n
        if self._pending >= _REDUCE_ITEMS:
            self._fold()

    def _fold(self) -> None:
        # Sub-blocks and rows each come in time order when the stream's rows do: reduced apart, neither
        # needs sorting; the two results and what was done before are few.
        parts = [] if self._done is None else [self._done]
        if self._blocks:
            parts.append(_reduce(_concat(self._blocks)))
        if self._raw:
            times, values, numbers, pixel = (np.concatenate(c) for c in zip(*self._raw))
            parts.append(_reduce_rows(times, values, numbers, pixel))
        self._done = _reduce(_concat(parts)) if parts else None
        self._blocks, self._raw, self._pending = [], [], 0

    def result(self) -> _Items | None:
        self._fold()
        return self._done


def read_ahead(read: Callable[[int, int], R], spans: Iterable[tuple[int, int]]) -> Iterator[tuple[int, R]]:
    """``(first, read(first, stop))`` of each span of rows, read in the background a few spans ahead
    (memory: a few). ``read`` is :meth:`Source.read` here; other views of a column pass readers of their own."""
    pool = io_pool()
    queue: deque[tuple[int, Future[R]]] = deque()
    try:
        for first, stop in spans:
            queue.append((first, pool.submit(read, first, stop)))
            if len(queue) > _READ_AHEAD:
                first_done, future = queue.popleft()
                yield first_done, future.result()
        while queue:
            first_done, future = queue.popleft()
            yield first_done, future.result()
    finally:
        for _, future in queue:
            future.cancel()


def _split(summary: _Items, pixels: _Pixels) -> tuple[_Items, np.ndarray]:
    """The sub-blocks of ``summary`` that lie inside one pixel column (bucketed by it), and the indices
    of those that straddle a bound and must be split row by row; the others are outside the range."""
    low, high = summary.first_t, summary.last_t  # a sub-block's least and greatest time
    meets = (high >= pixels.start) & (low < pixels.stop)
    inside = meets & (low >= pixels.start) & (high < pixels.stop)
    low_pixel = pixels.of(low)
    inside &= low_pixel == pixels.of(high)
    whole = summary.take(np.flatnonzero(inside)).rebucket(low_pixel[inside])
    return whole, np.flatnonzero(meets & ~inside)


def _block_rows(rows: _Rows, first: int, sub_rows: int, block: int) -> _Rows:
    times, values, numbers = rows
    lo, hi = np.searchsorted(numbers, [first + block * sub_rows, first + (block + 1) * sub_rows])
    # Copies: a view would keep the whole segment's rows alive in the cache that holds it.
    return times[lo:hi].copy(), values[lo:hi].copy(), numbers[lo:hi].copy()


def _concat_rows(parts: Sequence[_Rows]) -> _Rows:
    if len(parts) == 1:
        return parts[0]
    return (
        np.concatenate([p[0] for p in parts]),
        np.concatenate([p[1] for p in parts]),
        np.concatenate([p[2] for p in parts]),
    )


def _rows_nbytes(rows: _Rows) -> int:
    return sum(int(a.nbytes) for a in rows)


def _narrow(straddling: int, blocks: int) -> bool:
    """Whether so many of a segment's sub-blocks straddle pixel bounds that reducing its rows costs less
    than splitting those sub-blocks one by one (and keeping their rows)."""
    return straddling * 4 > blocks


def _downsample(source: Source, segments: list[int], pixels: _Pixels) -> None:
    """Add the rows of ``segments`` in the range to ``pixels``: from summaries where they are cached,
    reading only the segments whose summary or split sub-blocks are not."""
    rows_per = source.segment_rows
    keys = segment_keys(source, segments)
    to_read: list[int] = []
    for s in segments:
        key = keys.get(s)
        summary = None if key is None else plot_cache.summaries.get(key)
        if key is None or summary is None:
            to_read.append(s)
            continue
        whole, straddling = _split(summary, pixels)
        if _narrow(len(straddling), len(summary)):
            to_read.append(s)  # pixel columns narrower than sub-blocks: the rows themselves serve better
            continue
        edges = [plot_cache.edges.get((key, int(summary.bucket[b]))) for b in straddling]
        if any(e is None for e in edges):
            to_read.append(s)
            continue
        pixels.add_blocks(whole)
        if edges:
            pixels.add_rows(_concat_rows([e for e in edges if e is not None]))
    spans = ((s * rows_per, min((s + 1) * rows_per, source.length)) for s in to_read)
    for first, rows in read_ahead(source.read, spans):
        key = keys.get(first // rows_per)
        if key is None:
            pixels.add_rows(rows)
            continue
        summary = plot_cache.summaries.get(key)
        if summary is None:
            summary = _summary(source, first, rows).owned()
            plot_cache.summaries.put(key, summary, summary.nbytes)
        whole, straddling = _split(summary, pixels)
        if _narrow(len(straddling), len(summary)):
            pixels.add_rows(rows)
            continue
        pixels.add_blocks(whole)
        parts = []
        for b in straddling:
            block = int(summary.bucket[b])
            part = _block_rows(rows, first, source.sub_rows, block)
            plot_cache.edges.put((key, block), part, _rows_nbytes(part))
            parts.append(part)
        if parts:
            pixels.add_rows(_concat_rows(parts))


def overlapping_segments(source: Source, start: int, stop: int, ranges: list[time_index.Range]) -> list[int]:
    """The segments whose rows' times may fall in ``[start, stop)``."""
    per = source.segment_rows // source.times.chunks[0]  # time chunks per segment
    count = -(-source.length // source.segment_rows)
    found = []
    for s in range(count):
        if time_index.meets(time_index.span(ranges[s * per : (s + 1) * per]), start, stop):
            found.append(s)
    return found


def _exact(source: Source, segments: list[int], start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
    """Every row in ``[start, stop)`` as it is, by time (of equal times, by row)."""
    rows_per = source.segment_rows
    spans = ((s * rows_per, min((s + 1) * rows_per, source.length)) for s in segments)
    kept: list[_Rows] = []
    for _, (times, values, numbers) in read_ahead(source.read, spans):
        inside = (times >= start) & (times < stop)
        kept.append((times[inside], values[inside], numbers[inside]))
    times, values, _ = _concat_rows(kept) if kept else _empty_rows()
    order = np.argsort(times, kind="stable")  # rows were read in order: ties stay by row
    return times[order], values[order]


def _empty_rows() -> _Rows:
    return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64), np.empty(0, dtype=np.int64)


def time_bound(value: int | None, what: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{what} must be int nanoseconds since the epoch (UTC) or None, not {type(value).__name__}")
    return int(value)


def plot_series(
    stream: Stream,
    column: str,
    width: int,
    start_ns: int | None = None,
    stop_ns: int | None = None,
    channel: int = 0,
) -> PlotSeries:
    """The points that plot ``column`` of ``stream`` over ``[start_ns, stop_ns)`` in ``width`` pixel columns.

    ``stream``: an open :class:`~arrays.Stream` (at any snapshot, or in a
    transaction: then nothing is cached). ``column``: ``"time"`` or one of
    ``stream.columns``, numbers or booleans (NotPlottable otherwise); a
    column with extra dimensions plots ``channel`` of them (flattened;
    ChannelError outside them). ``start_ns``/``stop_ns`` default to the
    stream's time span. ``width``: 1 to :data:`MAX_WIDTH`.

    When at most ``4 * width`` rows are in the range, every one is a point
    (``exact``); otherwise each pixel column gives the M4 of its rows (the
    first and last by time, the least and greatest value), each point at
    its row's time, so the line through them is the plot of every row.
    """
    if isinstance(width, bool) or not isinstance(width, (int, np.integer)):
        raise TypeError(f"width must be an int number of pixel columns, not {type(width).__name__}")
    if not 1 <= width <= MAX_WIDTH:
        raise ValueError(f"width must be 1..{MAX_WIDTH} pixel columns, not {width}")
    width = int(width)
    start, stop = time_bound(start_ns, "start_ns"), time_bound(stop_ns, "stop_ns")
    if start is not None and stop is not None and stop < start:
        raise ValueError(f"stop_ns {stop} is before start_ns {start}")
    source = column_source(stream, column, channel)
    ranges = stream.time_ranges()
    found = time_index.span(ranges)
    if start is None:
        start = found[0] if found is not None else (stop if stop is not None else 0)
    if stop is None:
        stop = max(start, found[1] + 1) if found is not None else start
    empty = np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64)
    segments = overlapping_segments(source, start, stop, ranges) if stop > start else []
    pixels = _Pixels(start, stop, width)
    _downsample(source, segments, pixels)
    if pixels.rows <= 4 * width:
        times, values = _exact(source, segments, start, stop) if pixels.rows else empty
        return PlotSeries(column, start, stop, times, values, pixels.rows, True)
    reduced = pixels.result()
    times, values = _points(reduced) if reduced is not None else empty
    return PlotSeries(column, start, stop, times, values, pixels.rows, False)
