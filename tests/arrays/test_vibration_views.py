"""RMS over time and Welch spectra of stream columns (arrays.vibration_views) on real SQLite streams: RMS against
numpy row by row, cold and warm, after appends and at older snapshots; spectra of known sines, their total power,
their sample rate, the bounded read of long windows, and the errors a user reads."""

from __future__ import annotations

import numpy as np
import pytest

from windvane import arrays
from windvane.arrays import Column
from windvane.arrays import downsample as ds
from windvane.arrays import vibration_views as vv

T0 = 1_700_000_000 * 10**9
CHUNK = 512
RATE = 25_600


@pytest.fixture(autouse=True)
def small_sub_blocks(monkeypatch):
    """Sub-blocks of 16 rows (32 per segment of these small chunks), each test without cached summaries:
    the paths a long stream takes, in a few thousand rows."""
    monkeypatch.setattr(vv, "MIN_SUB_BLOCK_ROWS", 16)
    vv.rms_cache.clear()
    ds.plot_cache.clear()


def make_stream(
    url: str, times: np.ndarray, columns: dict[str, np.ndarray], tag: str = "vib", chunk: int = CHUNK, **attrs
) -> arrays.Stream:
    specs = [Column(name, str(v.dtype), inner=v.shape[1:], attrs=attrs) for name, v in columns.items()]
    stream = arrays.create_stream(url, tag, specs, chunk_rows=chunk)
    stream.append({"time": times, **columns})
    return stream


def reference(times: np.ndarray, values: np.ndarray, width: int, start: int, stop: int) -> tuple[np.ndarray, ...]:
    """Pixel starts, RMS per channel and rows, computed pixel by pixel with numpy, as rms_series says."""
    values = values.reshape(len(values), -1).astype(np.float64)
    bounds = [start + i * (stop - start) // width for i in range(width + 1)]
    starts, rms = [], []
    for p in range(width):
        inside = (times >= bounds[p]) & (times < bounds[p + 1])
        if inside.any():
            starts.append(bounds[p])
            v = values[inside]
            count = (~np.isnan(v)).sum(axis=0)
            squares = np.nansum(v * v, axis=0)
            rms.append(np.sqrt(np.where(count > 0, squares / np.maximum(count, 1), np.nan)))
    in_range = int(((times >= start) & (times < stop)).sum())
    shape = (len(starts), values.shape[1])
    return np.array(starts, dtype=np.int64), np.array(rms, dtype=np.float64).reshape(shape), np.array(in_range)


def check(series: vv.RmsSeries, times: np.ndarray, values: np.ndarray, width: int) -> None:
    want_t, want_rms, rows = reference(times, values, width, series.start_ns, series.stop_ns)
    assert series.rows == int(rows)
    assert series.times.dtype == np.int64 and series.rms.dtype == np.float64
    np.testing.assert_array_equal(series.times, want_t)
    np.testing.assert_allclose(series.rms, want_rms, rtol=1e-9, atol=1e-12)  # NaN where NaN


def random_data(seed: int, n: int, *, ordered: bool, nans: bool) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    times = T0 + np.arange(n) * 39_062  # about 25.6 kHz
    if not ordered:  # blocks of rows arrive out of order, and a few rows far from their neighbours
        blocks = np.array_split(times, 23)
        times = np.concatenate([blocks[i] for i in rng.permutation(len(blocks))])
        times[rng.integers(0, n, n // 50)] = T0 + rng.integers(0, n * 39_062, n // 50)
    values = rng.normal(0, 1, (n, 3)).astype(np.float32)
    if nans:
        values[rng.random((n, 3)) < 0.05] = np.nan
        values[:40, 1] = np.nan  # a channel with no value in the first pixel columns
    return times.astype(np.int64), values


@pytest.mark.parametrize("ordered", [True, False], ids=["sorted", "unsorted"])
@pytest.mark.parametrize("nans", [False, True], ids=["numbers", "nans"])
def test_rms_matches_numpy_cold_and_warm(sqlite_url, ordered, nans):
    n = 12 * CHUNK + 77  # a partial last segment
    times, values = random_data(ordered * 2 + nans, n, ordered=ordered, nans=nans)
    span = n * 39_062
    with make_stream(sqlite_url, times, {"samples": values}) as stream:
        for width in (1, 3, 17, 250, 1500):
            for start, stop in [(None, None), (T0 + span // 10, T0 + span * 7 // 10), (T0 + 999, T0 + 99_999)]:
                cold = vv.rms_series(stream, "samples", width, start, stop)
                if start is None:
                    assert (cold.start_ns, cold.stop_ns) == (int(times.min()), int(times.max()) + 1)
                assert cold.rms.shape == (len(cold.times), 3)
                check(cold, times, values, width)
                check(vv.rms_series(stream, "samples", width, start, stop), times, values, width)
    stats = vv.rms_cache.stats()
    assert stats["summaries"]["hits"] > 0 and stats["edges"]["hits"] > 0  # the warm queries used them


def test_rms_of_a_repeated_query_reads_no_full_chunk(sqlite_url):
    times, values = random_data(3, 8 * CHUNK, ordered=True, nans=False)
    with make_stream(sqlite_url, times, {"samples": values}):
        pass
    for width in (1, 3):  # pixel columns wider than sub-blocks: narrower ones read rows, by design
        vv.rms_cache.clear()
        with arrays.open_stream(sqlite_url, "vib") as cold:
            check(vv.rms_series(cold, "samples", width), times, values, width)
            assert cold["samples"].chunks_loaded == 8
        with arrays.open_stream(sqlite_url, "vib") as warm:
            check(vv.rms_series(warm, "samples", width), times, values, width)
            assert warm["samples"].chunks_loaded == 0 and warm["time"].chunks_loaded == 0


def test_rms_after_appends_and_at_an_older_snapshot(sqlite_url):
    n = 4 * CHUNK + 100
    times, values = random_data(11, n, ordered=True, nans=False)
    width = 40
    with make_stream(sqlite_url, times, {"samples": values}) as stream:
        first_tid = stream.tid
        check(vv.rms_series(stream, "samples", width), times, values, width)
        # Rows filling the partial chunk and new chunks, some earlier than every row so far, louder.
        more_t = np.concatenate([times[-1] + np.arange(1, 3 * CHUNK + 1) * 39_062, T0 - np.arange(1, 51) * 39_062])
        more_v = np.random.default_rng(12).normal(0, 5, (len(more_t), 3)).astype(np.float32)
        stream.append({"time": more_t.astype(np.int64), "samples": more_v})
        all_t, all_v = np.concatenate([times, more_t]), np.concatenate([values, more_v])
        check(vv.rms_series(stream, "samples", width), all_t, all_v, width)
        check(vv.rms_series(stream, "samples", width, int(times[0]), int(times[-1]) + 1), all_t, all_v, width)
        stream["samples"][CHUNK : CHUNK + 10] = np.full((10, 3), -50.0, dtype=np.float32)  # a full chunk rewritten
        all_v[CHUNK : CHUNK + 10] = -50.0
        check(vv.rms_series(stream, "samples", width, int(times[0]), int(times[-1]) + 1), all_t, all_v, width)
    with arrays.open_stream(sqlite_url, "vib", at=first_tid) as old:
        check(vv.rms_series(old, "samples", width), times, values, width)
        check(vv.rms_series(old, "samples", width, int(times[0]), int(times[-1]) + 1), times, values, width)


def test_rms_of_one_dimensional_columns_and_errors(sqlite_url):
    n = 3 * CHUNK
    rng = np.random.default_rng(5)
    times = (T0 + rng.permutation(n) * 1000).astype(np.int64)
    columns = {"f": rng.normal(0, 2, n), "i": rng.integers(-9, 9, n).astype(np.int16), "b": rng.random(n) < 0.3}
    with make_stream(sqlite_url, times, columns) as stream:
        for name, v in columns.items():
            series = vv.rms_series(stream, name, 7)
            assert series.rms.shape == (7, 1)
            check(series, times, v, 7)
        empty = vv.rms_series(stream, "f", 5, T0 - 100, T0)
        assert (empty.rows, empty.times.shape, empty.rms.shape) == (0, (0,), (0, 1))
        with pytest.raises(arrays.ViewError, match=r"width must be 1\.\.10000 pixel columns, not 0") as raised:
            vv.rms_series(stream, "f", 0)
        assert isinstance(raised.value, arrays.ArrayError) and isinstance(raised.value, ValueError)
        with pytest.raises(arrays.ViewError, match="before start_ns"):
            vv.rms_series(stream, "f", 10, T0 + 1, T0)
        with pytest.raises(arrays.ColumnError, match="no column 'nope'"):
            vv.rms_series(stream, "nope", 10)
    with arrays.create_stream(sqlite_url, "logs", [Column("msg", "str")]) as logs:
        logs.append({"time": [T0], "msg": ["hello"]})
        with pytest.raises(arrays.NotPlottable, match="column 'msg' of stream 'logs' holds"):
            vv.rms_series(logs, "msg", 10)
        with pytest.raises(arrays.NotPlottable):
            vv.spectrum(logs, "msg", T0, T0 + 1)


def test_rms_reduced_in_batches_gives_the_same_series(sqlite_url, monkeypatch):
    monkeypatch.setattr(vv, "_FOLD_ITEMS", 50)  # what a long range does: add up as it goes, memory bounded
    times, values = random_data(23, 6 * CHUNK, ordered=False, nans=True)
    with make_stream(sqlite_url, times, {"samples": values}) as stream:
        for width in (3, 40, 400):
            check(vv.rms_series(stream, "samples", width), times, values, width)
            check(vv.rms_series(stream, "samples", width), times, values, width)


# -- spectrum -------------------------------------------------------------------------------------------


def sines(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """25.6 kHz rows: 1 kHz (amplitude 2) on channel 0, 3 kHz (amplitude 1) on channel 1, noise on channel 2."""
    rng = np.random.default_rng(seed)
    t = np.arange(n) / RATE
    values = np.stack(
        [
            2 * np.sin(2 * np.pi * 1000 * t) + 0.5,  # an offset: detrending takes it out
            np.sin(2 * np.pi * 3000 * t + 0.3),
            rng.normal(0, 0.1, n),
        ],
        axis=1,
    ).astype(np.float32)
    times = T0 + np.round(np.arange(n) * 1e9 / RATE).astype(np.int64)
    return times, values


def test_spectrum_of_sines_peaks_at_their_bins_and_keeps_their_power(sqlite_url):
    n = 16 * 4096
    times, values = sines(n)
    with make_stream(sqlite_url, times, {"samples": values}, chunk=8192, sample_rate=RATE, unit="m/s^2") as stream:
        s = vv.spectrum(stream, "samples", T0, T0 + 10**10, nfft=4096)
    assert (s.rows, s.sample_rate, s.segments, s.power.shape) == (n, RATE, 31, (2049, 3))
    assert s.frequencies[0] == 0 and s.frequencies[-1] == RATE / 2 and len(s.frequencies) == 2049
    assert s.frequencies[int(np.argmax(s.power[:, 0]))] == 1000
    assert s.frequencies[int(np.argmax(s.power[:, 1]))] == 3000
    df = s.frequencies[1]
    for channel in range(3):  # Parseval: the density summed over frequency is the variance
        variance = float(np.var(values[:, channel].astype(np.float64)))
        assert abs(float(s.power[:, channel].sum()) * df / variance - 1) < 0.03
    signal = pytest.importorskip("scipy.signal")
    f, p = signal.welch(values.astype(np.float64), RATE, nperseg=4096, axis=0)  # Hann, half overlap, mean detrend
    np.testing.assert_allclose(s.frequencies, f)
    np.testing.assert_allclose(s.power, p, rtol=1e-6, atol=1e-12)


def test_spectrum_rate_from_times_rows_out_of_order_and_a_part_of_the_window(sqlite_url):
    n = 8 * 4096
    times, values = sines(n, seed=1)
    order = np.concatenate([b for b in np.array_split(np.arange(n), 9)[::-1]])  # blocks arrived last first
    with make_stream(sqlite_url, times[order], {"samples": values[order]}, chunk=2048) as stream:
        s = vv.spectrum(stream, "samples", int(times[1000]), int(times[1000 + 5 * 4096]), nfft=1024)
    assert abs(s.sample_rate / RATE - 1) < 1e-4  # no attribute: the median step of the times
    assert s.rows == 5 * 4096 and s.segments == 2 * 5 * 4 - 1
    assert abs(s.frequencies[int(np.argmax(s.power[:, 0]))] - 1000) <= s.frequencies[1]
    assert abs(s.frequencies[int(np.argmax(s.power[:, 1]))] - 3000) <= s.frequencies[1]
    window = values[1000 : 1000 + 5 * 4096].astype(np.float64)
    signal = pytest.importorskip("scipy.signal")
    _, p = signal.welch(window, s.sample_rate, nperseg=1024, axis=0)
    np.testing.assert_allclose(s.power, p, rtol=1e-6, atol=1e-12)


def test_spectrum_of_a_long_window_reads_max_rows_spread_across_it(sqlite_url):
    n = 64 * 1024
    times, values = sines(n, seed=2)
    with make_stream(sqlite_url, times, {"samples": values}, chunk=1024, sample_rate=RATE) as stream:
        s = vv.spectrum(stream, "samples", T0, T0 + 10**10, nfft=256, max_rows=4096)
        assert stream["samples"].chunks_loaded == 4  # four whole segments of storage, not 64
    assert s.rows == 4096 and s.segments == 4 * (2 * 1024 // 256 - 1)  # Welch segments never span two
    assert s.frequencies[int(np.argmax(s.power[:, 0]))] == 1000
    assert s.frequencies[int(np.argmax(s.power[:, 1]))] == 3000
    for channel in range(3):
        variance = float(np.var(values[:, channel].astype(np.float64)))
        assert abs(float(s.power[:, channel].sum()) * s.frequencies[1] / variance - 1) < 0.05


def test_spectrum_of_a_one_dimensional_column_with_nan(sqlite_url):
    n = 4 * 4096
    times, values = sines(n, seed=3)
    v = values[:, 0].astype(np.float64)
    v[[5, 777, 9000]] = np.nan  # taken as the segment's mean: no NaN in the spectrum
    with make_stream(sqlite_url, times, {"v": v}, chunk=4096, sample_rate=RATE) as stream:
        s = vv.spectrum(stream, "v", T0, T0 + 10**10, nfft=2048)
    assert s.power.shape == (1025, 1) and not np.isnan(s.power).any()
    assert s.frequencies[int(np.argmax(s.power[:, 0]))] == 1000


def test_spectrum_errors_say_what_to_change(sqlite_url):
    times, values = sines(3000)
    with make_stream(sqlite_url, times, {"samples": values}, sample_rate=RATE) as stream:
        with pytest.raises(arrays.ViewError, match=r"holds 3000 rows, fewer than nfft=4096: widen the window or lower"):
            vv.spectrum(stream, "samples", T0, T0 + 10**10)
        with pytest.raises(arrays.ViewError, match="holds 0 rows"):
            vv.spectrum(stream, "samples", T0 - 10**9, T0, nfft=64)
        for nfft in (32, 100, 131072):
            with pytest.raises(arrays.ViewError, match=f"nfft must be a power of two from 64 to 65536.*not {nfft}"):
                vv.spectrum(stream, "samples", T0, T0 + 10**10, nfft=nfft)
        with pytest.raises(arrays.ViewError, match=r"max_rows \(100\) must be at least nfft \(128\)"):
            vv.spectrum(stream, "samples", T0, T0 + 10**10, nfft=128, max_rows=100)
        with pytest.raises(TypeError):
            vv.spectrum(stream, "samples", T0, None)  # type: ignore[arg-type]
        s = vv.spectrum(stream, "samples", T0, T0 + 10**10, nfft=2048)  # the window holds enough for this one
        assert (s.rows, s.segments) == (3000, 1)
    same_time = np.full(5000, T0, dtype=np.int64)
    with make_stream(sqlite_url, same_time, {"v": np.ones(5000)}, tag="flat") as flat:
        with pytest.raises(arrays.ViewError, match=r"no sample_rate attribute.*set the column's sample_rate"):
            vv.spectrum(flat, "v", T0, T0 + 1, nfft=64)


# -- scale -------------------------------------------------------------------------------------------------


def vibration_stream(url: str, rows: int, block: int = 1 << 22) -> arrays.Stream:
    """A stream as the vibration schema makes it (32768-row chunks, lz4), ``rows`` rows of 3 float32 channels."""
    codec = {"name": "blosc", "cname": "lz4", "clevel": 5}
    column = Column("samples", "float32", inner=(3,), codec=codec, attrs={"sample_rate": RATE})
    stream = arrays.create_stream(url, "turbine1.vibration", [column], chunk_rows=32768)
    rng = np.random.default_rng(0)
    noise = rng.normal(0, 1, (block, 3)).astype(np.float32)
    for first in range(0, rows, block):
        count = min(block, rows - first)
        t = (T0 + (np.arange(first, first + count) * 1e9 / RATE).astype(np.int64)).astype(np.int64)
        stream.append({"time": t, "samples": noise[:count] * (1 + first / rows)})
    return stream


def test_the_rms_of_a_long_stream_is_the_same_cold_warm_and_in_a_new_view(sqlite_url, monkeypatch):
    """4 M rows at 1,500 px: the summaries a first query leaves answer the next ones alike (the times of such
    queries are benchmarks/test_console_plot.py's business, not a test's)."""
    monkeypatch.setattr(vv, "MIN_SUB_BLOCK_ROWS", 256)  # the module's own sub-blocks
    rows = 1 << 22
    with vibration_stream(sqlite_url, rows):
        pass
    with arrays.open_stream(sqlite_url, "turbine1.vibration") as stream:
        cold = vv.rms_series(stream, "samples", 1500)
        warm = vv.rms_series(stream, "samples", 1500)
    with arrays.open_stream(sqlite_url, "turbine1.vibration") as view:  # a new view: only the cache is warm
        fresh = vv.rms_series(view, "samples", 1500)
    assert cold.rows == warm.rows == fresh.rows == rows
    np.testing.assert_allclose(cold.rms, warm.rms, rtol=1e-12)
    np.testing.assert_allclose(cold.rms, fresh.rms, rtol=1e-12)
    assert len(warm.times) == 1500 and 0.9 < float(warm.rms[0, 0]) < 1.1
