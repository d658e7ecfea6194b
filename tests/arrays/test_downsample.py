"""Downsampling for plots (arrays.downsample): M4 points against a brute-force reference on real SQLite
streams, exact mode, errors, and summaries that never outlive the chunks they were computed from."""

from __future__ import annotations

import numpy as np
import pytest

from windvane import arrays, neostore
from windvane.arrays import Column
from windvane.arrays import downsample as ds

T0 = 1_700_000_000 * 10**9
CHUNK = 256  # small chunks: many segments, several sub-blocks each, in a few thousand rows


@pytest.fixture(autouse=True)
def fresh_cache():
    """Each test starts without summaries, so what it counts is its own."""
    ds.plot_cache.clear()


def make_stream(url: str, times: np.ndarray, columns: dict[str, np.ndarray], tag: str = "plot") -> arrays.Stream:
    specs = [Column(name, str(v.dtype), inner=v.shape[1:]) for name, v in columns.items()]
    stream = arrays.create_stream(url, tag, specs, chunk_rows=CHUNK)
    stream.append({"time": times, **columns})
    return stream


def reference(
    times: np.ndarray, values: np.ndarray, width: int, start: int, stop: int
) -> tuple[np.ndarray, np.ndarray, int, bool]:
    """M4 computed row by row, pixel by pixel, as the module's docstring and plot_series' say."""
    rows = np.arange(len(times))
    inside = (times >= start) & (times < stop)
    t, v, r = times[inside], values[inside].astype(np.float64), rows[inside]
    if len(t) <= 4 * width:
        order = np.argsort(t, kind="stable")
        return t[order], v[order], len(t), True
    edges = [start + i * (stop - start) // width for i in range(width + 1)]
    out: list[tuple[int, float]] = []
    for p in range(width):
        m = (t >= edges[p]) & (t < edges[p + 1])
        if not m.any():
            continue
        tp, vp, rp = t[m], v[m], r[m]
        i = np.lexsort((rp, tp))[0]  # least time, then first row
        j = np.lexsort((-rp, -tp))[0]  # greatest time, then last row
        roles: list[tuple[int, float] | None] = [(int(tp[i]), float(vp[i]))]
        ok = ~np.isnan(vp)
        if ok.any():
            low, high = vp[ok].min(), vp[ok].max()
            roles.append((int(tp[ok][vp[ok] == low].min()), float(low)))
            roles.append((int(tp[ok][vp[ok] == high].min()), float(high)))
        roles.append((int(tp[j]), float(vp[j])))
        kept: list[tuple[int, float]] = []
        for role in roles:
            if role is None:
                continue
            if any(k[0] == role[0] and (k[1] == role[1] or (np.isnan(k[1]) and np.isnan(role[1]))) for k in kept):
                continue
            kept.append(role)
        kept.sort(key=lambda point: point[0])
        out.extend(kept)
    return (
        np.array([p[0] for p in out], dtype=np.int64),
        np.array([p[1] for p in out], dtype=np.float64),
        len(t),
        False,
    )


def check(series: ds.PlotSeries, times: np.ndarray, values: np.ndarray, width: int) -> None:
    want_t, want_v, rows, exact = reference(times, values, width, series.start_ns, series.stop_ns)
    assert (series.rows, series.exact) == (rows, exact)
    assert series.times.dtype == np.int64 and series.values.dtype == np.float64
    np.testing.assert_array_equal(series.times, want_t)
    np.testing.assert_array_equal(series.values, want_v)  # NaN where NaN
    assert np.all(np.diff(series.times) >= 0)
    assert len(series.times) <= 4 * width or exact


def random_data(seed: int, n: int, *, ordered: bool, nans: bool) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    if ordered:  # in time order, a third of the rows at the time of the row before: ties broken by row
        times = T0 + np.sort(rng.integers(0, 2 * n // 3, n)) * (10**9 // n)
    else:
        times = T0 + rng.integers(0, 10**9, n)
        times[rng.integers(0, n, n // 20)] = times[0]  # equal times far apart in rows
    values = np.round(rng.normal(0, 1, n), 1)  # few distinct values: equal minima at several times
    if nans:
        values[rng.random(n) < 0.1] = np.nan
        values[: CHUNK // 2] = np.nan  # a sub-block of NaN only
    return times.astype(np.int64), values


@pytest.mark.parametrize("ordered", [True, False], ids=["sorted", "unsorted"])
@pytest.mark.parametrize("nans", [False, True], ids=["numbers", "nans"])
def test_m4_matches_the_reference_cold_and_warm(sqlite_url, ordered, nans):
    n = 9 * CHUNK + 77  # a partial last chunk
    times, values = random_data(ordered * 2 + nans, n, ordered=ordered, nans=nans)
    ds.plot_cache.clear()  # the cache is the process's: others' entries must not crowd this test's out
    before = ds.plot_cache.stats()
    with make_stream(sqlite_url, times, {"v": values}) as stream:
        for width in (1, 3, 17, 250, 600, 5000):
            for start, stop in [(None, None), (T0 + 10**8, T0 + 7 * 10**8), (T0 + 3 * 10**8 + 1, T0 + 3 * 10**8 + 999)]:
                cold = ds.plot_series(stream, "v", width, start, stop)
                if start is None:
                    assert (cold.start_ns, cold.stop_ns) == (int(times.min()), int(times.max()) + 1)
                check(cold, times, values, width)
                warm = ds.plot_series(stream, "v", width, start, stop)
                check(warm, times, values, width)
    stats = ds.plot_cache.stats()
    # The warm queries used the summaries, and, where rows lie in time order, the rows kept at pixel edges.
    assert stats["summaries"]["hits"] > before["summaries"]["hits"]
    if ordered:
        assert stats["edges"]["hits"] > before["edges"]["hits"]


def test_exact_mode_returns_every_row_by_time(sqlite_url):
    times = np.array([T0 + 5, T0 + 1, T0 + 3, T0 + 1, T0 + 9], dtype=np.int64)
    values = np.array([1.0, 2.0, np.nan, 4.0, 5.0])
    with make_stream(sqlite_url, times, {"v": values}) as stream:
        series = ds.plot_series(stream, "v", 2)
        assert series.exact and series.rows == 5
        assert series.times.tolist() == [T0 + 1, T0 + 1, T0 + 3, T0 + 5, T0 + 9]
        np.testing.assert_array_equal(series.values, [2.0, 4.0, np.nan, 1.0, 5.0])
        assert (series.start_ns, series.stop_ns, series.column) == (T0 + 1, T0 + 10, "v")
        half = ds.plot_series(stream, "v", 1, T0 + 3, T0 + 9)  # stop is exclusive
        assert half.times.tolist() == [T0 + 3, T0 + 5] and half.rows == 2


def test_one_row_empty_ranges_and_ranges_outside_the_data(sqlite_url):
    with make_stream(sqlite_url, np.array([T0], dtype=np.int64), {"v": np.array([2.5])}) as stream:
        one = ds.plot_series(stream, "v", 1)
        assert (one.times.tolist(), one.values.tolist(), one.rows, one.exact) == ([T0], [2.5], 1, True)
        assert (one.start_ns, one.stop_ns) == (T0, T0 + 1)
        for start, stop in [(T0, T0), (T0 + 1, T0 + 100), (0, T0)]:
            series = ds.plot_series(stream, "v", 10, start, stop)
            assert (len(series.times), len(series.values), series.rows) == (0, 0, 0)
            assert (series.start_ns, series.stop_ns) == (start, stop)
    times, values = random_data(7, 3 * CHUNK, ordered=True, nans=False)
    with make_stream(sqlite_url, times, {"v": values}, tag="many") as stream:
        after = ds.plot_series(stream, "v", 5, int(times.max()) + 1, int(times.max()) + 10**9)
        assert after.rows == 0 and len(after.times) == 0
    with arrays.create_stream(sqlite_url, "none", [Column("v", "float64")]) as empty:
        series = ds.plot_series(empty, "v", 100)
        assert series.rows == 0 and len(series.times) == 0 and series.start_ns == series.stop_ns


def test_integer_bool_time_and_channel_columns(sqlite_url):
    n = 5 * CHUNK
    rng = np.random.default_rng(3)
    times = np.sort(T0 + rng.integers(0, 10**9, n)).astype(np.int64)
    columns = {
        "i": rng.integers(-1000, 1000, n).astype(np.int32),
        "b": rng.random(n) < 0.5,
        "vib": rng.normal(0, 1, (n, 3)).astype(np.float32),
    }
    with make_stream(sqlite_url, times, columns) as stream:
        for width in (4, 90):
            check(ds.plot_series(stream, "i", width), times, columns["i"], width)
            check(ds.plot_series(stream, "b", width), times, columns["b"], width)
            check(ds.plot_series(stream, "time", width), times, times, width)
            for channel in range(3):
                series = ds.plot_series(stream, "vib", width, channel=channel)
                check(series, times, columns["vib"][:, channel], width)
        with pytest.raises(ds.ChannelError, match=r"3 channel\(s\).*0\.\.2, not 3") as raised:
            ds.plot_series(stream, "vib", 10, channel=3)
        assert isinstance(raised.value, IndexError) and isinstance(raised.value, arrays.ArrayError)
        with pytest.raises(ds.ChannelError, match=r"0\.\.0, not 1"):
            ds.plot_series(stream, "i", 10, channel=1)
        with pytest.raises(arrays.ColumnError, match="no column 'nope'"):
            ds.plot_series(stream, "nope", 10)


def test_text_and_bytes_columns_are_not_plottable(sqlite_url):
    specs = [Column("msg", "str"), Column("raw", "bytes")]
    with arrays.create_stream(sqlite_url, "logs", specs) as stream:
        stream.append({"time": [T0], "msg": ["hello"], "raw": [b"\x00"]})
        for column in ("msg", "raw"):
            with pytest.raises(ds.NotPlottable, match=f"column '{column}' of stream 'logs' holds") as raised:
                ds.plot_series(stream, column, 10)
            assert isinstance(raised.value, arrays.ArrayError)


@pytest.mark.parametrize("width", [0, -1, 10_001])
def test_width_outside_its_bounds(sqlite_url, width):
    with make_stream(sqlite_url, np.array([T0], dtype=np.int64), {"v": np.array([1.0])}) as stream:
        with pytest.raises(ValueError, match=r"width must be 1\.\.10000 pixel columns"):
            ds.plot_series(stream, "v", width)
        with pytest.raises(TypeError):
            ds.plot_series(stream, "v", 2.5)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="before start_ns"):
            ds.plot_series(stream, "v", 10, T0 + 1, T0)


def test_appends_and_rewrites_never_meet_stale_summaries(sqlite_url):
    rng = np.random.default_rng(11)
    n = 4 * CHUNK + 100  # the last chunk partial
    times = (T0 + np.arange(n) * 1000).astype(np.int64)
    values = rng.normal(0, 1, n)
    width = 40
    with make_stream(sqlite_url, times, {"v": values}) as stream:
        first_tid = stream.tid
        check(ds.plot_series(stream, "v", width), times, values, width)
        # Rows into the partial chunk (filling it) and into new chunks, some earlier than every row so far.
        more_t = np.concatenate([T0 + np.arange(n, n + 3 * CHUNK) * 1000, T0 - np.arange(1, 51) * 1000])
        more_v = rng.normal(5, 1, len(more_t))
        stream.append({"time": more_t.astype(np.int64), "v": more_v})
        all_t, all_v = np.concatenate([times, more_t]), np.concatenate([values, more_v])
        check(ds.plot_series(stream, "v", width), all_t, all_v, width)
        check(ds.plot_series(stream, "v", width, int(times[0]), int(times[-1]) + 1), all_t, all_v, width)
        # A full chunk rewritten in place: same rows, new values.
        stream["v"][CHUNK : CHUNK + 10] = np.full(10, -50.0)
        all_v[CHUNK : CHUNK + 10] = -50.0
        check(ds.plot_series(stream, "v", width, int(times[0]), int(times[-1]) + 1), all_t, all_v, width)
    with arrays.open_stream(sqlite_url, "plot") as latest:
        check(ds.plot_series(latest, "v", width, int(times[0]), int(times[-1]) + 1), all_t, all_v, width)
    with arrays.open_stream(sqlite_url, "plot", at=first_tid) as old:
        check(ds.plot_series(old, "v", width), times, values, width)
        check(ds.plot_series(old, "v", width, int(times[0]), int(times[-1]) + 1), times, values, width)


def test_unaligned_chunks_and_a_transaction_read_right(sqlite_url):
    rng = np.random.default_rng(5)
    n = 1500
    times = (T0 + rng.permutation(n) * 7).astype(np.int64)
    values = rng.normal(0, 1, n)
    specs = [Column("v", "float64", chunk_rows=96), Column("w", "float64", chunk_rows=100_003)]
    with arrays.create_stream(sqlite_url, "odd", specs, chunk_rows=CHUNK) as stream:
        stream.append({"time": times, "v": values, "w": values * 2})
        for width in (3, 50):
            check(
                ds.plot_series(stream, "v", width), times, values, width
            )  # segments of both chunk sizes' least common multiple
            check(ds.plot_series(stream, "w", width), times, values * 2, width)  # no common bound: not cached
    with neostore.open(sqlite_url) as store, arrays.transaction(store) as tx:
        stream = arrays.open_stream(tx, "odd")
        stream.append({"time": np.array([T0 - 1], dtype=np.int64), "v": [100.0], "w": [1.0]})
        series = ds.plot_series(stream, "v", 50)  # sees its own uncommitted rows
        check(series, np.append(times, T0 - 1), np.append(values, 100.0), 50)


def test_a_plot_asked_again_reads_no_full_chunk(sqlite_url):
    times = (T0 + np.arange(8 * CHUNK) * 1000).astype(np.int64)  # full chunks only, in time order
    values = np.random.default_rng(13).normal(0, 1, len(times))
    with make_stream(sqlite_url, times, {"v": values}):
        pass
    for width in (2, 5):  # pixel columns wider than sub-blocks: narrower ones read rows, by design
        ds.plot_cache.clear()
        with arrays.open_stream(sqlite_url, "plot") as cold:
            first = ds.plot_series(cold, "v", width)
            assert cold["v"].chunks_loaded == 8  # every chunk read once, summarised
        with arrays.open_stream(sqlite_url, "plot") as warm:  # a new view: only the process's cache is warm
            again = ds.plot_series(warm, "v", width)
            assert warm["v"].chunks_loaded == 0 and warm["time"].chunks_loaded == 0
        check(again, times, values, width)
        assert np.array_equal(first.times, again.times) and np.array_equal(first.values, again.values)


def test_rows_without_a_time_and_short_sub_blocks(sqlite_url):
    rng = np.random.default_rng(17)
    n = 1000
    times = (T0 + np.arange(n) * 1000).astype(np.int64)
    values = rng.normal(0, 1, n)
    times[rng.integers(0, n, 30)] = -(1 << 63)  # arrays.times.NO_TIME: rows without a time are never plotted
    with arrays.create_stream(sqlite_url, "gaps", [Column("v", "float64")], chunk_rows=100) as stream:
        stream.append({"time": times, "v": values})
        timed = times != -(1 << 63)
        for width in (2, 7, 60):
            series = ds.plot_series(stream, "v", width)
            assert (series.start_ns, series.stop_ns) == (int(times[timed].min()), int(times[timed].max()) + 1)
            check(series, times, values, width)
    no_gaps = times.copy()
    no_gaps[~timed] = T0 + 10**6 + np.arange(int((~timed).sum()))  # whole sub-blocks and a short last one
    with arrays.create_stream(sqlite_url, "short", [Column("v", "float64")], chunk_rows=100) as stream:
        stream.append({"time": no_gaps, "v": values})
        for width in (2, 7):
            check(ds.plot_series(stream, "v", width), no_gaps, values, width)
            check(ds.plot_series(stream, "v", width), no_gaps, values, width)


def test_rows_reduced_in_batches_give_the_same_points(sqlite_url, monkeypatch):
    monkeypatch.setattr(ds, "_REDUCE_ITEMS", 100)  # what a long range does: reduce as it goes, memory bounded
    for ordered in (True, False):
        times, values = random_data(23 + ordered, 6 * CHUNK, ordered=ordered, nans=True)
        with make_stream(sqlite_url, times, {"v": values}, tag=f"batches{ordered:d}") as stream:
            for width in (3, 40, 400):
                check(ds.plot_series(stream, "v", width), times, values, width)
