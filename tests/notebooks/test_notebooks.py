"""The notebooks under notebooks/ run top to bottom on a fresh demo store, and what they find is right.

Each notebook is executed with nbclient in a real kernel of this Python
(``WINDVANE_STORE`` names a store that ``windvane demo`` filled, once per
module). Its last cell prints its results as JSON; they are checked against
the store and against the shipped sample files, read here independently.
"""

from __future__ import annotations

import csv
import gzip
import json
import os
import re
import subprocess
import wave
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import nbformat
import numpy as np
import pytest
from nbclient import NotebookClient

from tests.ops.test_info import windvane
from windvane import arrays
from windvane.ops import demo

# One worker runs the module: its tests share the executed notebooks (module fixtures).
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("notebooks")]

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
SAMPLES = Path(demo.__file__).resolve().parent / "samples"
NAMES = ("vibration", "sensors", "logs", "vibration_mmap")
#: The synthetic recording's defect (windvane/ops/samples/make_samples.py): outer race, 3.57 orders of a 25 Hz shaft.
BPFO_HZ = 3.57 * 25.0


def run_notebook(name: str, store_url: str, **env: str) -> nbformat.NotebookNode:
    """Execute ``notebooks/<name>.ipynb`` in a fresh kernel with ``WINDVANE_STORE=store_url`` (and ``env``)."""
    nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    kernel_env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}  # ipykernel then picks inline
    kernel_env.update(WINDVANE_STORE=store_url, **env)
    client = NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOKS)}})
    client.execute(env=kernel_env)  # raises CellExecutionError naming the cell if any cell fails
    return nb


def outputs(nb: nbformat.NotebookNode) -> list[dict]:
    return [out for cell in nb.cells if cell.cell_type == "code" for out in cell.get("outputs", [])]


def results_of(nb: nbformat.NotebookNode) -> dict:
    """The JSON the last code cell printed."""
    last = [cell for cell in nb.cells if cell.cell_type == "code"][-1]
    text = "".join(out["text"] for out in last["outputs"] if out["output_type"] == "stream")
    return json.loads(text)


def make_demo_store(tmp_path_factory) -> str:
    """``windvane demo`` run in a fresh directory: the URL of the store it filled (absolute)."""
    cwd = tmp_path_factory.mktemp("demo")
    result = windvane("demo", cwd=str(cwd))
    assert result.returncode == 0, result.stdout + result.stderr
    return f"sqlite:///{cwd}/var/demo.db"


@pytest.fixture(scope="module")
def demo_store(tmp_path_factory) -> str:
    return make_demo_store(tmp_path_factory)


@pytest.fixture(scope="module")
def executed(demo_store, tmp_path_factory) -> Iterator[dict[str, nbformat.NotebookNode]]:
    # The mounts a notebook's mmap starts live here, and are unmounted (their servers then exit) at the end.
    mounts = tmp_path_factory.mktemp("mounts")
    yield {name: run_notebook(name, demo_store, WINDVANE_MOUNTS=str(mounts)) for name in NAMES}
    for mountpoint in mounts.iterdir():
        if mountpoint.is_dir():
            subprocess.run(["umount", str(mountpoint)], check=False)


@pytest.mark.parametrize("name", NAMES)
def test_notebooks_are_committed_without_outputs_and_read_the_store_url(name):
    nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    nbformat.validate(nb)
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    assert nb.cells[0].cell_type == "markdown"
    assert all(not cell.outputs and cell.execution_count is None for cell in code)
    parameters = next(cell.source for cell in code[:2] if "STORE_URL" in cell.source)
    assert 'STORE_URL = os.environ.get("WINDVANE_STORE", "sqlite:///../var/demo.db")' in parameters


@pytest.mark.parametrize("name", NAMES)
def test_notebooks_run_without_errors_and_plot(executed, name):
    found = outputs(executed[name])
    assert not [out for out in found if out["output_type"] == "error"]
    images = [out for out in found if "image/png" in out.get("data", {})]
    assert len(images) >= 3, f"{name} shows {len(images)} plots"


def full_chunks(store_url: str) -> int:
    """The full chunks of the demo's vibration samples and times: what a reader of the whole stream loads."""
    with arrays.open_stream(store_url, demo.VIBRATION_TAG) as stream:
        return sum(len(stream) // stream[name].chunks[0] for name in ("samples", "time"))


def vibration_frames() -> tuple[np.ndarray, int]:
    """The demo's vibration recording read from its WAV file: frames x channels of int16, and the rate."""
    with wave.open(str(SAMPLES / demo.VIBRATION_SAMPLE)) as w:
        return np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").reshape(-1, w.getnchannels()), w.getframerate()


def test_vibration_finds_the_outer_race_fault_out_of_core(executed, demo_store):
    results = results_of(executed["vibration"])
    frames, rate = vibration_frames()
    with arrays.open_stream(demo_store, demo.VIBRATION_TAG) as stream:
        assert results["rows"] == len(stream) == len(frames)
    assert results["sample_rate"] == rate
    # Out of core: the stream does not fit the cache, and this process read the chunks from the store.
    assert results["stream_bytes"] > results["cache_bytes"]
    assert results["scheduler"] == "threads" and results["chunks_read_here"] >= full_chunks(demo_store)
    # RMS per axis, from the WAV file: the values the demo stored (float32 m/s^2) squared in float64.
    samples = (frames.astype(np.float32) / np.float32(demo.COUNTS_PER_MS2)).astype(np.float64)
    np.testing.assert_allclose(results["rms_overall"], np.sqrt((samples**2).mean(axis=0)), rtol=1e-9)
    assert len(results["rms_windows"]) == len(frames) // (rate // 10)
    assert results["shaft_hz_measured"] == 25.0
    assert results["spectrum_peak_hz"] == [575.0, 575.0, 575.0]  # the gear mesh, 23 teeth x 25 Hz
    # The fault: BPFO, at the frequency the generator put in, far above every other band, with harmonics.
    assert results["detected_fault"] == "BPFO"
    assert abs(results["detected_peak_hz"] - BPFO_HZ) <= 1.0
    assert abs(results["fault_hz"]["BPFO"] - BPFO_HZ) < 0.015 * BPFO_HZ
    db = {name: np.mean(v) for name, v in results["band_db"].items()}
    assert db["BPFO"] > 20 and all(db["BPFO"] - v > 15 for name, v in db.items() if name != "BPFO")
    assert results["harmonics"][:3] == [1, 2, 3]
    # The defect is radial: the axial channel (z) sees least of it.
    energy = results["band_energy"]["BPFO"]
    assert energy[2] < min(energy[0], energy[1])


def test_vibration_mmap_runs_scipy_on_the_mapped_column(executed, demo_store):
    results = results_of(executed["vibration_mmap"])
    # Where the machine has FUSE the column is mapped; elsewhere the notebook says so and reads blocks.
    assert results["mapped"] is os.path.exists("/dev/fuse")
    assert results["same_as_blocks"] is True
    frames, rate = vibration_frames()
    with arrays.open_stream(demo_store, demo.VIBRATION_TAG) as stream:
        assert results["rows"] == len(stream) == len(frames)
    assert results["sample_rate"] == rate
    samples = (frames.astype(np.float32) / np.float32(demo.COUNTS_PER_MS2)).astype(np.float64)
    np.testing.assert_allclose(results["rms_overall"], np.sqrt((samples**2).mean(axis=0)), rtol=1e-9)
    assert results["spectrum_peak_hz"] == [575.0, 575.0, 575.0]  # the gear mesh, 23 teeth x 25 Hz
    # The envelope's strongest line is the outer-race defect the generator put in.
    assert abs(results["envelope_peak_hz"] - BPFO_HZ) <= 1.0
    assert abs(results["bpfo_hz"] - BPFO_HZ) < 0.015 * BPFO_HZ


def scada_rows() -> list[dict[str, str]]:
    with gzip.open(SAMPLES / demo.SCADA_SAMPLE, "rt", newline="") as f:
        return list(csv.DictReader(f))


def test_sensors_counts_resamples_and_flags(executed, demo_store):
    results = results_of(executed["sensors"])
    rows = scada_rows()
    names = sorted({r["Wind_turbine_name"] for r in rows})
    assert results["turbines"] == names
    for name in names:
        with arrays.open_stream(demo_store, f"turbine.{name}.scada") as stream:
            assert (
                results["rows"][name]
                == len(stream)
                == sum(r["Wind_turbine_name"] == name and r["P_avg"] != "" for r in rows)
            )
        power = [np.float32(r["P_avg"]) for r in rows if r["Wind_turbine_name"] == name and r["P_avg"]]
        assert results["energy_mwh"][name] == pytest.approx(
            float(np.sum(power, dtype=np.float64)) / 6 / 1000, rel=1e-12
        )
    assert results["quarantined"] == {"R80711": 4, "R80721": 0, "R80736": 0, "R80790": 0}
    assert results["hourly_points"] == dict.fromkeys(names, 7 * 24)
    assert results["incomplete_hours"]["R80711"] == 2  # 14:00 and 15:00 on 2014-02-07 lack rows
    # The hourly means, from the CSV grouped by UTC hour.
    hourly: dict[datetime, list[float]] = {}
    turbine = results["hourly_power_kw"]["turbine"]
    for r in rows:
        if r["Wind_turbine_name"] == turbine and r["P_avg"]:
            when = datetime.fromisoformat(r["Date_time"]).astimezone(UTC).replace(minute=0)
            hourly.setdefault(when, []).append(float(np.float32(r["P_avg"])))
    expected = [np.mean(v) for _, v in sorted(hourly.items())]
    np.testing.assert_allclose(results["hourly_power_kw"]["values"], expected, rtol=1e-12)
    # The flags: R80711 restarting after its outage is among them, and each flagged row is what the CSV says.
    flagged = {(f["turbine"], f["time"]): f for f in results["flagged"]}
    assert ("R80711", "2014-02-07T15:20:00") in flagged and ("R80711", "2014-02-07T15:30:00") in flagged
    by_key = {
        (
            r["Wind_turbine_name"],
            datetime.fromisoformat(r["Date_time"]).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S"),
        ): r
        for r in rows
    }
    for key, f in flagged.items():
        assert f["z"] < -4
        assert f["pitch"] == pytest.approx(float(np.float32(by_key[key]["Ba_avg"])))
        assert float(by_key[key]["Ws_avg"]) > 4
    assert results["flagged_feathered"] == sum(f["pitch"] > 30 for f in results["flagged"]) >= 5
    assert sum(results["flagged_per_turbine"].values()) == len(flagged)


def test_logs_error_rates_match_the_sample_file(executed):
    results = results_of(executed["logs"])
    records = [json.loads(line) for line in gzip.decompress((SAMPLES / demo.LOG_SAMPLE).read_bytes()).splitlines()]
    status = Counter(r["status"] for r in records)
    errors = sum(r["status"] >= 500 for r in records)
    assert results["lines"] == len(records) == 3000
    assert results["status_counts"] == {str(k): v for k, v in sorted(status.items())}
    assert results["errors_5xx"] == errors > 0
    assert results["error_rate"] == errors / len(records)
    assert results["client_error_rate"] == sum(400 <= r["status"] < 500 for r in records) / len(records)
    # Every server error was quarantined (latency "-"): the notebook found them there.
    assert results["errors_5xx_stored"] == 0
    assert results["quarantined"] == sum(r.get("latency_ms") == "-" for r in records) == errors
    services: dict[str, list[int]] = {}
    for r in records:
        service = r["path"].split("?")[0].split("/")[1]
        services.setdefault(service, []).append(r["status"])
    assert results["per_service"] == {
        name: {
            "requests": len(s),
            "errors_5xx": sum(x >= 500 for x in s),
            "error_rate": sum(x >= 500 for x in s) / len(s),
        }
        for name, s in services.items()
    }
    assert results["per_host"] == {"web1": {"requests": len(records), "errors_5xx": errors}}
    scada_api = sum(bool(re.fullmatch(r"/api/turbines/R\d+/scada", r["path"].split("?")[0])) for r in records)
    assert results["top_paths"]["/api/turbines/{turbine}/scada"] == scada_api
    assert list(results["top_paths"].values()) == sorted(results["top_paths"].values(), reverse=True)
