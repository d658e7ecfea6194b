"""Without the MariaDB connector the suite still collects every test and runs its SQLite ones.

pytest runs in a subprocess with the ``mariadb`` package made unimportable
the way a missing install makes it: a ``mariadb`` package first on the path
whose import fails with ``No module named 'mariadb'``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import NO_CONNECTOR

REPO = Path(__file__).resolve().parents[1]
SMALL = "tests/neostore/test_store_backends.py"  # SQLite and MariaDB variants, quick


@pytest.fixture
def no_connector(tmp_path) -> dict[str, str]:
    """An environment in which ``import mariadb`` fails as if the connector were not installed."""
    shadow = tmp_path / "no-connector" / "mariadb"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'mariadb'\", name='mariadb')\n")
    path = [str(shadow.parent), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path)}


def pytest_run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def collected(result: subprocess.CompletedProcess[str]) -> list[str]:
    """The test ids collected, parameters cut off (a gzip body's id holds the time it was made)."""
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return [line.split("[")[0] for line in result.stdout.splitlines() if "::" in line]


def test_the_blocked_connector_does_not_import(no_connector):
    probe = subprocess.run([sys.executable, "-c", "import mariadb"], env=no_connector, capture_output=True, text=True)
    assert probe.returncode == 1 and "No module named 'mariadb'" in probe.stderr


@pytest.mark.slow
def test_every_test_is_collected_without_the_connector(no_connector):
    without = collected(pytest_run("--collect-only", "-q", env=no_connector))
    assert without == collected(pytest_run("--collect-only", "-q"))


def test_sqlite_tests_run_and_mariadb_ones_are_skipped_saying_why(no_connector):
    result = pytest_run("-q", "-rs", SMALL, env=no_connector)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert " passed" in result.stdout and " skipped" in result.stdout
    assert NO_CONNECTOR in result.stdout
    assert " failed" not in result.stdout and " error" not in result.stdout


def test_not_mariadb_runs_without_the_connector(no_connector):
    result = pytest_run("-q", "-m", "not mariadb", SMALL, env=no_connector)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert " passed" in result.stdout and " deselected" in result.stdout
    assert " skipped" not in result.stdout and " failed" not in result.stdout
