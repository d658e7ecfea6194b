"""How long the ``windvane`` command takes before it does anything: ``--version`` and ``--help``.

Goal: under 0.3 s each. Every round starts the installed entry point in a
new process, as a user's shell does; the baseline, in the same run, is the
bare interpreter (``python -c pass``), the floor no Python command goes
below. Recorded in ``extra_info``: the median seconds, the baseline's, and
whether the goal is met.

Run:

    .venv/bin/python -m pytest benchmarks/test_cli_start.py -p no:cacheprovider \\
        --benchmark-enable --benchmark-only --benchmark-json=/tmp/cli.json
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys

import pytest

GOAL_SECONDS = 0.3
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
