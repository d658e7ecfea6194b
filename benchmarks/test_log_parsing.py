"""Regexp log parsing: windvane's vectorised matcher against fluentd's ``in_tail`` and pyarrow's CSV reader.

One nginx access log (:mod:`nginx_log`, ``WINDVANE_BENCH_LOG_BYTES``,
default 16 MiB; 1G for the README's table) is read, in one run, by

- fluentd 1.14.6: ``in_tail`` with ``<parse> @type nginx </parse>`` (fluentd's
  regexp parser with its nginx expression and time format) into ``out_file``
  (JSON lines, file buffer), timed from its start until the output holds
  every line;
- pyarrow: ``csv.read_csv`` of the same bytes, space-delimited, ``"``-quoted,
  status and size as integers, the rest as text: the machine's parse limit;
- windvane: the file read in 32 MiB blocks of whole lines, each block on
  one of a thread per core: split into lines (``split_lines``), matched
  with fluentd's nginx expression (translated from Ruby) by
  :class:`VectorRegexp` (RE2), its time field (``%d/%b/%Y:%H:%M:%S %z``)
  parsed into int64 ns; the same with the matcher forced onto Python's
  ``re``, line by line; and the same with :func:`match_access` in place of
  the matcher (the lines cut at their delimiters with numpy, exactly as the
  expression would, the few it is not sure of matched by RE2); and
  :func:`parse_log` with fluentd's ``nginx`` parser (``fluent_format``):
  what ``windvane import --format nginx`` does before the store, fluentd's
  record rules included.

Lines per second, median of ``WINDVANE_BENCH_ROUNDS`` (3) rounds; each round
runs every target once, in the reverse order of the round before, each
after a ``sync``. With ``--benchmark-disable`` it runs once and writes no
results file::

    WINDVANE_BENCH_LOG_BYTES=1G .venv/bin/python -m pytest benchmarks/test_log_parsing.py \\
        -p no:cacheprovider --benchmark-enable --benchmark-only -s
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pytest
import results_file
from nginx_log import access_log
from sensor_data import parse_size
from test_fluentd_anchor import FLUENTD_VERSION, lines_on_disk, settle, wait_for

from tests.fluent_programs import Program, fluentd_dir
from windvane.connectors.files.logs import parse_log
from windvane.connectors.files.logs.fluent import ParseConfig, fluent_format
from windvane.connectors.files.logs.fluent.access_split import NGINX, match_access
from windvane.connectors.files.logs.fluent.rubyre import ruby_regexp
from windvane.connectors.files.logs.fluent.vector_regexp import VectorRegexp
from windvane.connectors.files.logs.lines import split_lines

LOG_BYTES = parse_size(os.environ.get("WINDVANE_BENCH_LOG_BYTES", "16M"))
ROUNDS = int(os.environ.get("WINDVANE_BENCH_ROUNDS", "3"))
BLOCK_BYTES = 32 << 20
HERE = Path(__file__).parent
pytestmark = pytest.mark.timeout(7200)

TIME_FORMAT = "%d/%b/%Y:%H:%M:%S %z"
CSV_COLUMNS = ("remote", "ident", "user", "time", "zone", "request", "status", "size", "referer", "agent")


def blocks(path: Path) -> Iterator[bytes]:
    """The file in blocks of about ``BLOCK_BYTES`` of whole lines."""
    rest = b""
    with open(path, "rb") as f:
        while data := f.read(BLOCK_BYTES):
            data = rest + data
            cut = data.rfind(b"\n") + 1
            rest = data[cut:]
            yield data[:cut]
    if rest:
        yield rest


def parse_block(matcher: VectorRegexp | None, block: bytes) -> int:
    """Split ``block`` into lines, match them (``None``: :func:`match_access`), parse their time field; the count."""
    lines, bad = split_lines(block, now=0)
    found = matcher.match(lines.text) if matcher is not None else match_access(lines.text, "nginx")
    stamps = pc.strptime(found.columns["time"], format=TIME_FORMAT, unit="ns", error_is_null=True)
    times = stamps.cast(pa.int64())
    assert not found.unmatched.any() and times.null_count == 0 and not bad
    return len(times)


def parse_log_block(block: bytes) -> int:
    """``block`` parsed by :func:`parse_log` as fluentd's nginx parser; the count."""
    parsed = parse_log(NGINX_FORMAT, block)
    assert not parsed.rejected
    return parsed.table.num_rows


NGINX_FORMAT = fluent_format(ParseConfig("nginx"))


def run_windvane(path: Path, count: int, engine: str = "re2") -> float:
    """Lines/s: split, match with fluentd's nginx expression, parse the time, over the whole file.

    ``engine``: ``re2`` or ``python`` (:class:`VectorRegexp`), ``split`` (:func:`match_access`), ``parse_log``
    (:func:`parse_log_block`, all of it). Blocks go to
    one thread per core (two in flight each): every stage runs in Arrow or numpy with the interpreter lock let
    go, except the ``re`` path, which holds it.
    """
    matcher = None
    if engine not in ("split", "parse_log"):
        matcher = VectorRegexp(ruby_regexp(NGINX), threads=1, use_re2=engine == "re2")
        assert matcher.engine == engine, matcher.reason
    threads = os.cpu_count() or 1
    started = time.perf_counter()
    parsed = 0
    with ThreadPoolExecutor(threads) as pool:
        pending: deque[Future[int]] = deque()
        for block in blocks(path):
            if len(pending) >= 2 * threads:
                parsed += pending.popleft().result()
            if engine == "parse_log":
                pending.append(pool.submit(parse_log_block, block))
            else:
                pending.append(pool.submit(parse_block, matcher, block))
        parsed += sum(future.result() for future in pending)
    seconds = time.perf_counter() - started
    assert parsed == count
    return count / seconds


def run_csv(path: Path, count: int) -> float:
    """Lines/s of pyarrow's CSV reader on the same bytes (all cores)."""
    started = time.perf_counter()
    table = pacsv.read_csv(
        path,
        read_options=pacsv.ReadOptions(column_names=list(CSV_COLUMNS)),
        parse_options=pacsv.ParseOptions(delimiter=" ", quote_char='"'),
        convert_options=pacsv.ConvertOptions(
            column_types={name: pa.string() for name in CSV_COLUMNS} | {"status": pa.int16(), "size": pa.int64()}
        ),
    )
    seconds = time.perf_counter() - started
    assert table.num_rows == count
    return count / seconds


def fluentd_config(source: Path, out: Path, workdir: Path) -> str:
    return f"""
<source>
  @type tail
  path {source}
  pos_file {workdir}/in.pos
  read_from_head true
  tag bench.nginx
  <parse>
    @type nginx
  </parse>
</source>
<match bench.**>
  @type file
  path {out}/out.${{chunk_id}}
  append false
  <format>
    @type json
  </format>
  <buffer>
    @type file
    path {workdir}/buffer
    flush_mode interval
    flush_interval 1s
    chunk_limit_size 8m
  </buffer>
</match>
"""


def run_fluentd(path: Path, count: int) -> float:
    """Lines/s of fluentd ``in_tail`` (nginx parser) -> ``out_file``: its start to the last line on disk."""
    workdir = Path(tempfile.mkdtemp(prefix="wvb-logparse-"))
    out = workdir / "out"
    out.mkdir()
    conf = workdir / "fluentd.conf"
    conf.write_text(fluentd_config(path, out, workdir))
    try:
        # Not start_fluentd: on a large file in_tail reads before the worker logs that it runs.
        started = time.perf_counter()
        fluentd = Program(["ruby", "-Ilib", "bin/fluentd", "-c", str(conf)], workdir, "fluentd", cwd=fluentd_dir())
        try:
            done = wait_for(lambda: lines_on_disk(out), count, 3600, "in_tail -> out_file lines")
        finally:
            fluentd.stop()
        return count / (done - started)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def alternate(targets: dict[str, Callable[[], float]], rounds: int) -> dict[str, list[float]]:
    """Each target once a round, in the reverse order of the round before, each after a settle."""
    rates: dict[str, list[float]] = {name: [] for name in targets}
    for r in range(rounds):
        for name in list(targets) if r % 2 == 0 else list(reversed(targets)):
            settle()
            rates[name].append(targets[name]())
    return rates


def test_log_parsing_against_fluentd_and_pyarrow(benchmark, bench_results):
    fluentd_dir()  # skips (fails in CI) where fluentd cannot run
    path, count = access_log(LOG_BYTES)
    targets = {
        "fluentd_in_tail_nginx_out_file": lambda: run_fluentd(path, count),
        "pyarrow_read_csv": lambda: run_csv(path, count),
        "windvane_vector_regexp": lambda: run_windvane(path, count),
        "windvane_python_re": lambda: run_windvane(path, count, "python"),
        "windvane_access_split": lambda: run_windvane(path, count, "split"),
        "windvane_parse_log_nginx": lambda: run_windvane(path, count, "parse_log"),
    }
    rounds = 1 if benchmark.disabled else ROUNDS
    rates: dict[str, list[float]] = {}
    benchmark.pedantic(lambda: rates.update(alternate(targets, rounds)), rounds=1, iterations=1)
    median = {name: float(np.median(v)) for name, v in rates.items()}
    windvane, fast = median["windvane_vector_regexp"], median["windvane_access_split"]
    fluentd, csv = median["fluentd_in_tail_nginx_out_file"], median["pyarrow_read_csv"]
    whole = median["windvane_parse_log_nginx"]
    info = {
        "file_bytes": path.stat().st_size,
        "lines": count,
        "rounds": rounds,
        "fluentd": FLUENTD_VERSION,
        "pyarrow": pa.__version__,
        "lines_per_s": rates,
        "median_lines_per_s": median,
        "windvane_over_fluentd": windvane / fluentd,
        "windvane_over_pyarrow_csv": windvane / csv,
        "windvane_access_split_over_fluentd": fast / fluentd,
        "windvane_access_split_over_pyarrow_csv": fast / csv,
        "windvane_parse_log_nginx_over_fluentd": whole / fluentd,
        "windvane_parse_log_nginx_over_pyarrow_csv": whole / csv,
        "per_round_access_split_over_pyarrow_csv": per_round(rates, "windvane_access_split", "pyarrow_read_csv"),
        "per_round_access_split_over_fluentd": per_round(
            rates, "windvane_access_split", "fluentd_in_tail_nginx_out_file"
        ),
        "goal": "windvane >= 5x fluentd and >= 0.5x pyarrow read_csv",
    }
    publish(benchmark, bench_results, "log_parsing", info)


def per_round(rates: dict[str, list[float]], name: str, baseline: str) -> list[float]:
    """``name``'s rate over ``baseline``'s, round by round (both ran minutes apart at most)."""
    return [a / b for a, b in zip(rates[name], rates[baseline], strict=True)]


def publish(benchmark, bench_results: dict, name: str, info: dict) -> None:
    """Report ``info``: in the benchmark's JSON, the session's results, on stdout, and (timed runs only) in
    ``results-<name>-<date>.json``."""
    benchmark.extra_info.update(info)
    bench_results[name] = info
    print(json.dumps(info, indent=1))
    if not benchmark.disabled:
        write_results(info, name)


def write_results(info: dict, name: str = "log_parsing") -> None:
    """``info`` as ``results-<name>-<date>.json`` beside this file (``_`` in ``name`` written ``-``)."""
    results_file.write(name.replace("_", "-"), {name: info})
