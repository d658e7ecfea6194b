"""Log imports end to end: ``windvane import --format nginx`` against fluentd's ``in_tail`` -> ``out_file``.

One nginx access log (:mod:`nginx_log`, ``WINDVANE_BENCH_LOG_BYTES``,
default 16 MiB; 1G for the README's table) is, in one run,

- imported by the real ``windvane import`` command, a process of its own
  timed from its start to its exit: the file parsed by fluentd's ``nginx``
  parser (``--format nginx``), its records checked against the new
  stream's schema and committed durably to a new SQLite store (WAL,
  ``synchronous=FULL``), 32 MB of file per commit with the position
  reached, as any import does;
- the same with fluentd's ``regexp`` parser given the nginx expression and
  time format on the command line (``--format regexp --expression ...
  --time-format ...``);
- read by fluentd 1.14.6: ``in_tail`` with ``<parse> @type nginx </parse>``
  into ``out_file`` (JSON lines), timed from its start until the output
  holds every line (:func:`test_log_parsing.run_fluentd`, the anchor of the
  log parsing table).

Lines per second, median of ``WINDVANE_BENCH_ROUNDS`` (3) rounds; each round
runs every target once, in the reverse order of the round before, each
after a ``sync``. With ``--benchmark-disable`` it runs once and writes no
results file::

    WINDVANE_BENCH_LOG_BYTES=1G .venv/bin/python -m pytest benchmarks/test_log_import.py \\
        -p no:cacheprovider --benchmark-enable --benchmark-only -s
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
from nginx_log import access_log
from sensor_data import parse_size
from test_fluentd_anchor import FLUENTD_VERSION
from test_log_parsing import TIME_FORMAT, alternate, per_round, publish, run_fluentd

from tests.fluent_programs import fluentd_dir
from windvane import arrays
from windvane.connectors.files.logs.fluent.parsers.nginx import EXPRESSION

LOG_BYTES = parse_size(os.environ.get("WINDVANE_BENCH_LOG_BYTES", "16M"))
ROUNDS = int(os.environ.get("WINDVANE_BENCH_ROUNDS", "3"))
HERE = Path(__file__).parent
FLUENTD = "fluentd_in_tail_nginx_out_file"
pytestmark = pytest.mark.timeout(7200)

#: What each windvane target adds to ``windvane import FILE --store ... --tag web``.
IMPORTS = {
    "windvane_import_nginx": ["--format", "nginx"],
    "windvane_import_regexp": ["--format", "regexp", "--expression", EXPRESSION, "--time-format", TIME_FORMAT],
}


def run_import(path: Path, count: int, options: list[str]) -> float:
    """Lines/s of a ``windvane import`` process into a new SQLite store, from its start to its exit."""
    workdir = Path(tempfile.mkdtemp(prefix="wvb-logimport-"))
    url = f"sqlite:///{workdir}/store.db"
    command = [sys.executable, "-m", "windvane", "import", str(path), "--store", url, "--tag", "web", *options]
    try:
        started = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        seconds = time.perf_counter() - started
        assert done.returncode == 0, done.stderr[-2000:]
        with arrays.open_stream(url, "web") as stream:  # untimed: every line is in the store
            assert len(stream) == count
        return count / seconds
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def test_log_import_against_fluentd(benchmark, bench_results):
    fluentd_dir()  # skips (fails in CI) where fluentd cannot run
    path, count = access_log(LOG_BYTES)
    targets = {FLUENTD: lambda: run_fluentd(path, count)}
    for name, options in IMPORTS.items():
        targets[name] = lambda options=options: run_import(path, count, options)
    rounds = 1 if benchmark.disabled else ROUNDS
    rates: dict[str, list[float]] = {}
    benchmark.pedantic(lambda: rates.update(alternate(targets, rounds)), rounds=1, iterations=1)
    median = {name: float(np.median(v)) for name, v in rates.items()}
    info = {
        "file_bytes": path.stat().st_size,
        "lines": count,
        "rounds": rounds,
        "fluentd": FLUENTD_VERSION,
        "lines_per_s": rates,
        "median_lines_per_s": median,
        **{f"{name}_over_fluentd": median[name] / median[FLUENTD] for name in IMPORTS},
        **{f"per_round_{name}_over_fluentd": per_round(rates, name, FLUENTD) for name in IMPORTS},
        "goal": "windvane import --format nginx >= 5x fluentd in_tail -> out_file",
    }
    publish(benchmark, bench_results, "log_import", info)
