"""The two views a vibration stream needs beside its waveform: RMS over time, and the power spectrum of a window.

A vibration stream holds ``time`` and ``samples``, a 2-D column of rows
by channels sampled at a fixed rate (the column's ``sample_rate``
attribute). Its waveform is plotted with :func:`arrays.plot_series`; what
an engineer reads first, though, is how the vibration's energy moves over
hours (:func:`rms_series`) and at which frequencies it sits
(:func:`spectrum`). Both take any number column: a 1-D one is one channel.

**RMS over time.** A pixel column's RMS needs only the count and the sum
of squares of its rows' values, and both add up: a long range is the sum
of the sums of the sub-blocks that lie in one pixel column, plus the rows
of the sub-blocks that straddle a pixel boundary. So each full segment
(as :mod:`arrays.downsample` defines it: a run of rows whose chunks begin
and end at its bounds) is summarised once, per sub-block of its rows, into
the sub-block's least and greatest time, its timed rows and, per channel,
its non-NaN values and their sum of squares. The summaries and the rows of
straddling sub-blocks are cached in :data:`rms_cache` under the same keys
as the plot's summaries (each chunk's object id, revision and stored size,
and how it decodes), so an entry is exact for as long as a view sees those
revisions. Partial segments, and streams read in a transaction, are read
every time. Sub-blocks are coarser than the plot's: a sum loses nothing
that M4 would keep, and coarser sub-blocks keep the summaries of a long
stream small.

**Spectrum.** Welch's method with numpy alone (scipy is optional here): the
window's rows in time order are cut into segments of ``nfft`` rows that
overlap by half; each is detrended by its mean, weighted by a Hann window
and transformed; the one-sided power spectral densities are averaged. A
window of more than ``max_rows`` rows is not read whole: whole segments of
storage spread evenly across it, ``max_rows`` rows at most, stand for it,
which keeps a spectrum of a day as cheap as one of a minute.

Rows arrive in any time order: both views take a row's pixel column or
place from its time, never from its position.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import partial

import numpy as np

from . import time_index
from .downsample import (
    MAX_WIDTH,
    Lru,
    SegmentKey,
    Source,
    column_source,
    overlapping_segments,
    read_ahead,
    segment_keys,
    time_bound,
)
from .errors import ArrayError
from .stream import Stream
from .times import NO_TIME

__all__ = [
    "MAX_NFFT",
    "MIN_NFFT",
    "RmsCache",
    "RmsSeries",
    "Spectrum",
    "ViewError",
    "rms_cache",
    "rms_series",
    "spectrum",
]

#: Sub-blocks per segment for RMS: enough that a pixel column of a long range covers many whole ones.
SUB_BLOCKS = 128
#: Rows per RMS sub-block at least: the summaries of a stream stay a small fraction of its rows.
MIN_SUB_BLOCK_ROWS = 256
#: Items (sub-blocks or rows) gathered before they are added into the pixel columns: bounds memory.
_FOLD_ITEMS = 1 << 20
#: The least and greatest ``nfft`` a spectrum takes: below, too few bins to read; above, a segment's FFT
#: and its Hann window outgrow what a console request should compute.
MIN_NFFT = 64
MAX_NFFT = 65536
#: Welch segments transformed at once (bounds the memory of the batch of FFTs).
_FFT_BATCH = 64


class ViewError(ArrayError, ValueError):
    """A view asked for what it cannot give: a width, ``nfft`` or ``max_rows`` out of bounds, a window too short."""


# -- RMS over time ----------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)  # eq=False: numpy arrays have no single truth value to compare by
class RmsSeries:
    """The RMS of each channel of ``column`` per pixel column of ``[start_ns, stop_ns)``.

    ``times`` (int64 ns, ascending) holds the start of each pixel column
    that holds rows (the others are left out, so a gap in the data stays a
    gap on the plot); ``rms`` (float64, ``(len(times), channels)``) the
    root mean square of each channel's values there, NaN ignored (NaN
    where every value of the channel is NaN). ``rows`` counts the rows in
    the range.
    """

    column: str
    start_ns: int
    stop_ns: int
    times: np.ndarray
    rms: np.ndarray
    rows: int


@dataclass(frozen=True, eq=False)
class _Summary:
    """A full segment's sub-blocks that hold a timed row, each as what its RMS needs.

    Per sub-block: ``block`` (its index in the segment), ``low_t`` and
    ``high_t`` (its least and greatest time), ``rows`` (its timed rows),
    and per channel ``count`` (its non-NaN values) and ``squares`` (their
    sum of squares). ``span``, ``total_rows``, ``total_count`` and
    ``total_squares`` are the same for the whole segment: a segment that
    lies in one pixel column is added in one step.
    """

    block: np.ndarray
    low_t: np.ndarray
    high_t: np.ndarray
    rows: np.ndarray
    count: np.ndarray
    squares: np.ndarray
    span: tuple[int, int]
    total_rows: int
    total_count: np.ndarray
    total_squares: np.ndarray

    def __len__(self) -> int:
        return len(self.block)

    @property
    def nbytes(self) -> int:
        arrays = (self.block, self.low_t, self.high_t, self.rows, self.count, self.squares)
        return sum(int(a.nbytes) for a in arrays)


#: Timed rows of a span: times, values (rows by channels, float32 or float64) and row numbers.
_Rows = tuple[np.ndarray, np.ndarray, np.ndarray]


class RmsCache:
    """The RMS summaries of full segments and the rows of the sub-blocks RMS series split, each up to its budget.

    One per process (:data:`rms_cache`), shared by every view of a stream
    at any snapshot, like :data:`arrays.downsample.plot_cache`.
    """

    def __init__(self, summary_bytes: int, edge_bytes: int):
        self.summaries: Lru[SegmentKey, _Summary] = Lru(summary_bytes)
        self.edges: Lru[tuple[SegmentKey, int], tuple[np.ndarray, np.ndarray]] = Lru(edge_bytes)

    def clear(self) -> None:
        """Drop everything cached (the statistics stay)."""
        self.summaries.clear()
        self.edges.clear()

    def stats(self) -> dict[str, dict[str, int]]:
        return {"summaries": self.summaries.stats(), "edges": self.edges.stats()}


#: The process's cache (budgets from ``WINDVANE_RMS_SUMMARY_BYTES`` and ``WINDVANE_RMS_EDGE_BYTES``).
rms_cache = RmsCache(
    int(os.environ.get("WINDVANE_RMS_SUMMARY_BYTES", 128 << 20)),
    int(os.environ.get("WINDVANE_RMS_EDGE_BYTES", 64 << 20)),
)


def _rms_source(stream: Stream, column: str) -> Source:
    """The column as downsample plans it, with RMS sub-blocks: the sub-block size is part of the key, so
    RMS summaries never meet a plot's."""
    source = column_source(stream, column, 0)
    sub_rows = max(MIN_SUB_BLOCK_ROWS, -(-source.segment_rows // SUB_BLOCKS))
    return dataclasses.replace(source, sub_rows=sub_rows)


def _as_float(values: np.ndarray) -> np.ndarray:
    """Float32 stays float32 (cached rows take less memory; squares are summed in float64), the rest float64."""
    return values if values.dtype in (np.float32, np.float64) else values.astype(np.float64)


def _read(source: Source, first: int, stop: int) -> _Rows:
    """Rows ``[first, stop)`` that have a time: their times, every channel's values, and their row numbers."""
    times = source.times[first:stop]
    raw = times if source.values is source.times else source.values[first:stop]
    values = _as_float(raw.reshape(len(raw), -1))
    numbers = np.arange(first, stop, dtype=np.int64)
    timed = times != NO_TIME
    if not bool(timed.all()):
        return times[timed], values[timed], numbers[timed]
    return times, values, numbers


def _squares(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each value's square in float64 (0 where NaN) and whether it counts (1 where not NaN)."""
    squares = np.square(values, dtype=np.float64)
    nan = np.isnan(squares)
    if bool(nan.any()):
        squares[nan] = 0.0
    return squares, (~nan).astype(np.int64)


def _summary(first: int, sub_rows: int, rows: _Rows) -> _Summary:
    """The sub-block summaries of a full segment's timed rows (row numbers ascending, as read)."""
    times, values, numbers = rows
    channels = values.shape[1]
    if not len(times):
        none = np.empty(0, dtype=np.int64)
        zero = np.zeros(channels)
        empty2 = np.empty((0, channels))
        return _Summary(
            none, none, none, none, empty2.astype(np.int32), empty2, (0, -1), 0, zero.astype(np.int64), zero
        )
    block = (numbers - first) // sub_rows
    starts = np.concatenate((np.zeros(1, dtype=np.intp), np.flatnonzero(block[1:] != block[:-1]) + 1))
    squares, counts = _squares(values)
    sums = np.add.reduceat(squares, starts, axis=0)
    count = np.add.reduceat(counts, starts, axis=0).astype(np.int32)
    low_t, high_t = np.minimum.reduceat(times, starts), np.maximum.reduceat(times, starts)
    timed = np.diff(np.append(starts, len(times))).astype(np.int32)
    span = (int(low_t.min()), int(high_t.max()))
    total_count = count.sum(axis=0, dtype=np.int64)
    return _Summary(block[starts], low_t, high_t, timed, count, sums, span, len(times), total_count, sums.sum(axis=0))


class _Pixels:
    """The pixel columns of ``[start, stop)`` and, per column, the rows, counts and sums of squares added."""

    def __init__(self, start: int, stop: int, width: int, channels: int):
        self.start, self.stop = start, stop
        span = stop - start
        # Exact integer bounds (Python ints: span * width may pass int64).
        self.bounds = np.array([start + i * span // width for i in range(width)], dtype=np.int64)
        self.inner = self.bounds[1:]
        self.rows = np.zeros(width, dtype=np.int64)
        self.count = np.zeros((width, channels), dtype=np.int64)
        self.squares = np.zeros((width, channels), dtype=np.float64)
        self._pending: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
        self._items = 0

    def of(self, times: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.inner, times, side="right")

    def of_one(self, time: int) -> int:
        return int(np.searchsorted(self.inner, time, side="right"))

    def add_segment(self, pixel: int, summary: _Summary) -> None:
        self.rows[pixel] += summary.total_rows
        self.count[pixel] += summary.total_count
        self.squares[pixel] += summary.total_squares

    def add_blocks(self, pixel: np.ndarray, rows: np.ndarray, count: np.ndarray, squares: np.ndarray) -> None:
        if len(pixel):
            self._pending.append((pixel, rows, count, squares))
            self._grow(len(pixel))

    def add_rows(self, times: np.ndarray, values: np.ndarray) -> None:
        inside = (times >= self.start) & (times < self.stop)
        if not bool(inside.all()):
            times, values = times[inside], values[inside]
        if len(times):
            squares, counts = _squares(values)
            self._pending.append((self.of(times), np.ones(len(times), dtype=np.int64), counts, squares))
            self._grow(len(times))

    def _grow(self, n: int) -> None:
        self._items += n
        if self._items >= _FOLD_ITEMS:
            self._fold()

    def _fold(self) -> None:
        if not self._pending:
            return
        pixel, rows, count, squares = (np.concatenate(c) for c in zip(*self._pending))
        width = len(self.rows)
        self.rows += np.bincount(pixel, weights=rows, minlength=width).astype(np.int64)
        for c in range(self.count.shape[1]):
            self.count[:, c] += np.bincount(pixel, weights=count[:, c], minlength=width).astype(np.int64)
            self.squares[:, c] += np.bincount(pixel, weights=squares[:, c], minlength=width)
        self._pending, self._items = [], 0

    def series(self, column: str) -> RmsSeries:
        self._fold()
        held = self.rows > 0
        count, squares = self.count[held], self.squares[held]
        mean = np.divide(squares, count, out=np.full(squares.shape, np.nan), where=count > 0)
        return RmsSeries(column, self.start, self.stop, self.bounds[held], np.sqrt(mean), int(self.rows.sum()))


def _narrow(straddling: int, blocks: int) -> bool:
    """Whether so many sub-blocks straddle pixel bounds that adding the segment's rows costs less than
    splitting them (the rule :mod:`arrays.downsample` follows)."""
    return straddling * 4 > blocks


def _add_summary(
    summary: _Summary, key: SegmentKey, pixels: _Pixels, first: int, sub_rows: int, rows: _Rows | None
) -> bool:
    """Add a full segment to ``pixels`` from its summary, the rows of straddling sub-blocks taken from
    ``rows`` (and cached) or from the cache; False, having added nothing, when the rows serve better or
    the cache lacks some."""
    low, high = summary.span
    if high < pixels.start or low >= pixels.stop:
        return True
    if low >= pixels.start and high < pixels.stop:
        pixel = pixels.of_one(low)
        if pixel == pixels.of_one(high):
            pixels.add_segment(pixel, summary)
            return True
    meets = (summary.high_t >= pixels.start) & (summary.low_t < pixels.stop)
    low_pixel = pixels.of(summary.low_t)
    inside = meets & (summary.low_t >= pixels.start) & (summary.high_t < pixels.stop)
    inside &= low_pixel == pixels.of(summary.high_t)
    straddling = summary.block[meets & ~inside]
    if _narrow(len(straddling), len(summary)):
        return False
    edges: list[tuple[np.ndarray, np.ndarray]] = []
    for block in straddling.tolist():
        edge = rms_cache.edges.get((key, block)) if rows is None else _block_rows(rows, first, sub_rows, block)
        if edge is None:
            return False
        if rows is not None:
            rms_cache.edges.put((key, block), edge, int(edge[0].nbytes + edge[1].nbytes))
        edges.append(edge)
    pixels.add_blocks(low_pixel[inside], summary.rows[inside], summary.count[inside], summary.squares[inside])
    for times, values in edges:
        pixels.add_rows(times, values)
    return True


def _block_rows(rows: _Rows, first: int, sub_rows: int, block: int) -> tuple[np.ndarray, np.ndarray]:
    times, values, numbers = rows
    lo, hi = np.searchsorted(numbers, [first + block * sub_rows, first + (block + 1) * sub_rows])
    # Copies: a view would keep the whole segment's rows alive in the cache that holds it.
    return times[lo:hi].copy(), values[lo:hi].copy()


def _accumulate(source: Source, segments: list[int], pixels: _Pixels) -> None:
    """Add the rows of ``segments`` in the range to ``pixels``: from cached summaries where they serve,
    reading only the segments whose summary or straddling rows are not cached."""
    per = source.segment_rows
    keys = segment_keys(source, segments)
    to_read: list[int] = []
    for s in segments:
        key = keys.get(s)
        summary = None if key is None else rms_cache.summaries.get(key)
        if key is None or summary is None or not _add_summary(summary, key, pixels, s * per, source.sub_rows, None):
            to_read.append(s)
    spans = ((s * per, min((s + 1) * per, source.length)) for s in to_read)
    for first, rows in read_ahead(partial(_read, source), spans):
        key = keys.get(first // per)
        if key is not None:
            summary = rms_cache.summaries.get(key)
            if summary is None:
                summary = _summary(first, source.sub_rows, rows)
                rms_cache.summaries.put(key, summary, summary.nbytes)
            if _add_summary(summary, key, pixels, first, source.sub_rows, rows):
                continue
        pixels.add_rows(rows[0], rows[1])


def _range(stream: Stream, start: int | None, stop: int | None) -> tuple[int, int, list[time_index.Range]]:
    """``[start, stop)``, the stream's time span where not given (as :func:`arrays.plot_series` takes it),
    and the time ranges of its chunks."""
    if start is not None and stop is not None and stop < start:
        raise ViewError(f"stop_ns {stop} is before start_ns {start}: give a range that ends after it starts")
    ranges = stream.time_ranges()
    found = time_index.span(ranges)
    if start is None:
        start = found[0] if found is not None else (stop if stop is not None else 0)
    if stop is None:
        stop = max(start, found[1] + 1) if found is not None else start
    return start, stop, ranges


def rms_series(
    stream: Stream, column: str, width: int, start_ns: int | None = None, stop_ns: int | None = None
) -> RmsSeries:
    """The RMS of each channel of ``column`` per pixel column, ``width`` of equal time over ``[start_ns, stop_ns)``.

    ``stream``: an open :class:`~arrays.Stream` (any snapshot; in a
    transaction nothing is cached). ``column``: a number or boolean column
    (:class:`~arrays.NotPlottable` otherwise), of any row shape: its values
    per row, flattened, are its channels. ``start_ns``/``stop_ns`` default
    to the stream's time span. ``width``: 1 to :data:`~arrays.downsample.MAX_WIDTH`.

    A long range costs the sum of cached per-sub-block summaries plus the
    rows of the sub-blocks that straddle a pixel boundary; the first query
    of a segment reads it once.
    """
    if isinstance(width, bool) or not isinstance(width, (int, np.integer)):
        raise TypeError(f"width must be an int number of pixel columns, not {type(width).__name__}")
    if not 1 <= width <= MAX_WIDTH:
        raise ViewError(f"width must be 1..{MAX_WIDTH} pixel columns, not {width}")
    source = _rms_source(stream, column)
    start, stop, ranges = _range(stream, time_bound(start_ns, "start_ns"), time_bound(stop_ns, "stop_ns"))
    pixels = _Pixels(start, stop, int(width), source.channels)
    if stop > start:
        _accumulate(source, overlapping_segments(source, start, stop, ranges), pixels)
    return pixels.series(column)


# -- spectrum -------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Spectrum:
    """The power spectral density of each channel of ``column`` over ``[start_ns, stop_ns)`` (Welch).

    ``frequencies`` (Hz, ``nfft // 2 + 1`` bins from 0 to Nyquist) and
    ``power`` (``(bins, channels)``, the column's unit squared per Hz,
    one-sided: its sum times the bin width is the variance). ``rows``: the
    rows used, all of the window's unless it holds more than ``max_rows``;
    ``segments``: the Welch segments averaged. ``sample_rate``: Hz, the
    column's ``sample_rate`` attribute or, without it, the median step of
    the rows' times.
    """

    column: str
    start_ns: int
    stop_ns: int
    rows: int
    sample_rate: float
    frequencies: np.ndarray
    power: np.ndarray
    segments: int


class _Welch:
    """The running sum of the Hann-windowed periodograms of ``nfft``-row segments, half overlapping."""

    def __init__(self, nfft: int, channels: int):
        self.nfft = nfft
        self.window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(nfft) / nfft)  # periodic Hann, as Welch uses
        self.total = np.zeros((nfft // 2 + 1, channels))
        self.segments = 0

    def add(self, values: np.ndarray) -> None:
        """Add the segments of a run of consecutive rows (time order; float, rows by channels)."""
        n, step = len(values), self.nfft // 2
        if n < self.nfft:
            return
        windows = np.lib.stride_tricks.sliding_window_view(values, self.nfft, axis=0)[::step]  # (segs, ch, nfft)
        for i in range(0, len(windows), _FFT_BATCH):
            batch = windows[i : i + _FFT_BATCH].astype(np.float64)
            mean = np.nanmean(batch, axis=2, keepdims=True) if bool(np.isnan(batch).any()) else None
            if mean is None:
                batch -= batch.mean(axis=2, keepdims=True)
            else:  # a NaN is taken as the segment's mean: it adds no power
                batch = np.nan_to_num(batch - np.nan_to_num(mean), nan=0.0)
            spectra = np.fft.rfft(batch * self.window, axis=2)
            self.total += (np.abs(spectra) ** 2).sum(axis=0).T
            self.segments += len(batch)

    def density(self, sample_rate: float) -> np.ndarray:
        """The averaged one-sided power spectral density (unit^2/Hz)."""
        power = self.total / (max(self.segments, 1) * sample_rate * float(np.sum(self.window**2)))
        power[1:-1] *= 2  # one-sided: the negative frequencies' power (DC and Nyquist have none)
        return power


def _sorted_window(parts: list[_Rows], start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
    """The rows of ``parts`` in ``[start, stop)``, by time (of equal times, by row)."""
    times = np.concatenate([p[0] for p in parts]) if parts else np.empty(0, dtype=np.int64)
    values = np.concatenate([p[1] for p in parts]) if parts else np.empty((0, 1))
    inside = (times >= start) & (times < stop)
    times, values = times[inside], values[inside]
    if len(times) > 1 and not bool(np.all(times[1:] >= times[:-1])):
        order = np.argsort(times, kind="stable")
        times, values = times[order], values[order]
    return times, values


def _segment_spans(source: Source, segments: Iterable[int]) -> Iterator[tuple[int, int]]:
    per = source.segment_rows
    return ((s * per, min((s + 1) * per, source.length)) for s in segments)


def _rows_in(source: Source, segments: list[int], ranges: list[time_index.Range], start: int, stop: int) -> int:
    """How many rows of ``segments`` have a time in ``[start, stop)``: segments whose chunks' times all lie
    in it count whole (rows without a time too, a bound that close is enough), the others are read."""
    per_chunk = source.times.chunks[0]
    chunks = source.segment_rows // per_chunk
    total, straddling = 0, []
    for s in segments:
        found = time_index.span(ranges[s * chunks : (s + 1) * chunks])
        if found is not None and found[0] >= start and found[1] < stop:
            total += min((s + 1) * source.segment_rows, source.length) - s * source.segment_rows
        else:
            straddling.append(s)
    for first, stop_row in _segment_spans(source, straddling):
        times = source.times[first:stop_row]
        total += int(np.count_nonzero((times >= start) & (times < stop)))
    return total


def _check_nfft(nfft: int, max_rows: int) -> None:
    for name, value in (("nfft", nfft), ("max_rows", max_rows)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if not (MIN_NFFT <= nfft <= MAX_NFFT and nfft & (nfft - 1) == 0):
        raise ViewError(f"nfft must be a power of two from {MIN_NFFT} to {MAX_NFFT} (e.g. 4096), not {nfft}")
    if max_rows < nfft:
        raise ViewError(f"max_rows ({max_rows}) must be at least nfft ({nfft}): raise max_rows or lower nfft")


def _sample_rate(source: Source, times: np.ndarray, column: str) -> float:
    """The column's ``sample_rate`` attribute, else the median step of ``times`` (sorted) as a rate."""
    rate = source.values.attrs.get("sample_rate")
    if rate is not None and float(rate) > 0:
        return float(rate)
    step = float(np.median(np.diff(times))) if len(times) > 1 else 0.0
    if step <= 0:
        raise ViewError(
            f"column {column!r} has no sample_rate attribute and its rows' times do not step forward: "
            "set the column's sample_rate attribute (Hz)"
        )
    return 1e9 / step


def spectrum(
    stream: Stream, column: str, start_ns: int, stop_ns: int, nfft: int = 4096, max_rows: int = 1 << 21
) -> Spectrum:
    """The Welch power spectral density of each channel of ``column`` over ``[start_ns, stop_ns)``.

    Segments of ``nfft`` rows (a power of two, :data:`MIN_NFFT` to
    :data:`MAX_NFFT`), half overlapping, each detrended by its mean and
    weighted by a Hann window; ViewError when the window holds fewer than
    ``nfft`` rows. A window of more than ``max_rows`` rows is represented
    by whole segments of storage spread evenly across it, ``max_rows`` rows
    at most (``rows`` and ``segments`` say how many were used): the read
    stays bounded however long the window. Columns as for
    :func:`rms_series`.
    """
    _check_nfft(nfft, max_rows)
    start, stop = time_bound(start_ns, "start_ns"), time_bound(stop_ns, "stop_ns")
    if start is None or stop is None:
        raise TypeError("start_ns and stop_ns must be int nanoseconds since the epoch (UTC)")
    source = column_source(stream, column, 0)
    start, stop, ranges = _range(stream, start, stop)
    segments = overlapping_segments(source, start, stop, ranges) if stop > start else []
    held = _rows_in(source, segments, ranges, start, stop)
    if held < nfft:
        raise ViewError(
            f"the window [{start}, {stop}) of column {column!r} holds {held} rows, fewer than nfft={nfft}: "
            "widen the window or lower nfft"
        )
    read: Callable[[int, int], _Rows] = partial(_read, source)
    welch = _Welch(int(nfft), source.channels)
    if held <= max_rows:
        parts = [rows for _, rows in read_ahead(read, _segment_spans(source, segments))]
        times, values = _sorted_window(parts, start, stop)
        del parts
        rate = _sample_rate(source, times, column)
        welch.add(values)
        used = len(times)
    else:
        used, rate = _sampled(source, segments, start, stop, welch, read, int(max_rows), column)
    frequencies = np.fft.rfftfreq(int(nfft), d=1.0 / rate)
    return Spectrum(column, start, stop, used, rate, frequencies, welch.density(rate), welch.segments)


def _sampled(
    source: Source,
    segments: list[int],
    start: int,
    stop: int,
    welch: _Welch,
    read: Callable[[int, int], _Rows],
    max_rows: int,
    column: str,
) -> tuple[int, float]:
    """Add to ``welch`` runs of whole storage segments spread evenly across ``segments``, ``max_rows`` rows
    at most; each run holds ``nfft`` rows at least and is its own series (no Welch segment spans two).
    Returns the rows used and the sample rate."""
    per = source.segment_rows
    group = -(-welch.nfft // per)  # segments per run
    runs = [segments[i : i + group] for i in range(0, len(segments), group)]
    count = max(1, min(len(runs), max_rows // (group * per)))
    chosen = ((np.arange(count) + 0.5) * len(runs) / count).astype(np.int64).tolist()  # the middles of equal parts
    used, rate = 0, 0.0
    for index in chosen:
        parts = [rows for _, rows in read_ahead(read, _segment_spans(source, runs[index]))]
        times, values = _sorted_window(parts, start, stop)
        if len(times) > max_rows - used:  # a segment larger than max_rows: its first rows stand for it
            times, values = times[: max_rows - used], values[: max_rows - used]
        if len(times) < welch.nfft:
            continue
        if not rate:
            rate = _sample_rate(source, times, column)
        welch.add(values)
        used += len(times)
        if used + welch.nfft > max_rows:
            break
    if not welch.segments:
        raise ViewError(
            f"no run of {welch.nfft} consecutive rows of column {column!r} lies in [{start}, {stop}): "
            "widen the window or lower nfft"
        )
    return used, rate
