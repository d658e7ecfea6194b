"""How long the ``windvane`` command takes before it does anything: ``--version`` and ``--help`` (goal:
under 0.3 s each), and ``windvane serve`` from its start to its "ready" line on an existing store (goal:
under 1 s).

Every round starts the installed entry point in a new process, as a user's
shell does; the baseline, in the same run, is the bare interpreter
(``python -c pass``), the floor no Python command goes below. Recorded in
``extra_info``: the median seconds, the baseline's, and whether the goal is
met. The store serve opens holds the demo's vibration recording and SCADA
week, imported once; serve runs with its defaults (decode workers on).

Run:

    .venv/bin/python -m pytest benchmarks/test_cli_start.py -p no:cacheprovider \\
        --benchmark-enable --benchmark-only --benchmark-json=/tmp/cli.json
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

GOAL_SECONDS = 0.3
SERVE_GOAL_SECONDS = 1.0
SERVE_ROUNDS = 10
SAMPLES = Path(__file__).resolve().parents[1] / "windvane" / "ops" / "samples"
ROUNDS = 20
COMMAND = os.path.join(os.path.dirname(sys.executable), "windvane")


def _run(argv: list[str]) -> None:
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def interpreter_seconds() -> list[float]:
    """The bare interpreter's start, measured as the rounds below are (filled by the first test)."""
    return []


@pytest.mark.parametrize(
    "argv",
    [[sys.executable, "-c", "pass"], [COMMAND, "--version"], [COMMAND, "--help"]],
    ids=["python", "version", "help"],
)
def test_cli_start(benchmark, argv: list[str], interpreter_seconds: list[float]) -> None:
    benchmark.pedantic(_run, args=(argv,), rounds=ROUNDS, iterations=1, warmup_rounds=2)
    if benchmark.disabled:  # --benchmark-disable: the command ran once and succeeded; nothing was timed
        return
    median = statistics.median(benchmark.stats.stats.data)
    info = benchmark.extra_info
    info["median_s"] = median
    if argv[0] == sys.executable:
        interpreter_seconds.append(median)
        return
    info["goal_s"] = GOAL_SECONDS
    info["goal_met"] = median < GOAL_SECONDS
    if interpreter_seconds:
        info["interpreter_s"] = interpreter_seconds[0]
        info["over_interpreter_s"] = median - interpreter_seconds[0]


@pytest.fixture(scope="module")
def existing_store(tmp_path_factory) -> str:
    """A store holding the demo's vibration recording and SCADA week, as `windvane import` leaves them."""
    url = f"sqlite:///{tmp_path_factory.mktemp('serve-start')}/store.db"
    for args in (
        [str(SAMPLES / "vibration_R80736_drive_train.wav"), "--tag", "turbine.R80736.vibration"],
        [str(SAMPLES / "scada_la_haute_borne_2014-02-03.csv.gz"), "--tag", "turbine.scada"],
    ):
        extra = ["--time-column", "Date_time"] if "scada" in args[0] else []
        _run([COMMAND, "import", *args, *extra, "--store", url])
    return url


class Serving:
    """One ``windvane serve`` process per round: started and waited for until "ready" (timed), stopped after."""

    def __init__(self, url: str):
        self.url = url
        self.process: subprocess.Popen | None = None

    def stop(self) -> None:
        if self.process is not None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(60)
            self.process.stdout.close()
            self.process = None

    def start(self) -> None:
        argv = [COMMAND, "serve", "--store", self.url, "--schemas", str(SAMPLES / "schemas")]
        argv += ["--forward", "127.0.0.1:0", "--http", "127.0.0.1:0", "--http-auth", "none"]
        self.process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 120
        while self.process.stdout.readline().strip() != b"ready":
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"windvane serve did not get ready (exit code {self.process.poll()})")


def test_serve_start_to_ready(benchmark, existing_store: str, interpreter_seconds: list[float]) -> None:
    serving = Serving(existing_store)
    try:
        benchmark.pedantic(serving.start, setup=serving.stop, rounds=SERVE_ROUNDS, iterations=1, warmup_rounds=1)
    finally:
        serving.stop()
    if benchmark.disabled:
        return
    median = statistics.median(benchmark.stats.stats.data)
    info = benchmark.extra_info
    info.update(median_s=median, goal_s=SERVE_GOAL_SECONDS, goal_met=median < SERVE_GOAL_SECONDS)
    if interpreter_seconds:
        info["interpreter_s"] = interpreter_seconds[0]
