"""``windvane console STORE_URL``: the console of a store nothing is serving, as a real process."""

from __future__ import annotations

import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import numpy as np

from tests.serve_process import REPO
from windvane import arrays


def run_console(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", "import windvane; windvane.main()", "console", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=REPO,
    )


def test_it_serves_a_stores_pages_until_told_to_stop(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'store.db'}"
    stream = arrays.create_stream(url, "line1.speed", [arrays.Column("speed", "float32")])
    stream.append({"time": np.arange(1000, dtype=np.int64) * 1_000_000_000, "speed": np.linspace(0, 1, 1000)})
    stream.close()
    process = run_console(url, "--listen", "127.0.0.1:0")
    try:
        assert process.stdout is not None
        line = process.stdout.readline().decode().strip()
        assert line.startswith("console: http://127.0.0.1:"), line
        base = line.split(" ", 1)[1].rstrip("/")
        with urllib.request.urlopen(base + "/", timeout=30) as page:
            body = page.read().decode()
        assert 'data-tag="line1.speed"' in body and '<td class="n rows">1000</td>' in body
        assert "commit p50" not in body  # nothing ingests here: no commit figures
        with urllib.request.urlopen(base + "/-/console/stream/plot.json?tag=line1.speed&column=speed&width=100") as r:
            assert r.status == 200
    finally:
        process.send_signal(signal.SIGTERM)
        code = process.wait(30)
        for pipe in (process.stdout, process.stderr):
            assert pipe is not None
            pipe.close()
    assert code == 0


def test_a_bad_address_or_a_missing_store_exits_2_naming_it(tmp_path: Path):
    for args, said in [
        ([f"sqlite:///{tmp_path / 'none.db'}"], "no store"),
        ([f"sqlite:///{tmp_path / 'none.db'}", "--listen", "127.0.0.1:99999"], "out of range"),
    ]:
        process = run_console(*args)
        _, err = process.communicate(timeout=60)
        assert process.returncode == 2, (args, err)
        assert said in err.decode().lower(), err
