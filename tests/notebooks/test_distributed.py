"""The vibration notebook runs unchanged on a dask.distributed cluster whose workers read the store themselves.

A real ``LocalCluster`` of 3 worker processes (one thread each) serves the
notebook through ``WINDVANE_DASK_SCHEDULER``; its results must be those of
the single-process run. The graph the client sends holds the store's URL,
not chunk data, and the workers open the SQLite file themselves, several at
once.
"""

from __future__ import annotations

import os
import pickle

import numpy as np
import pytest
from distributed import Client, LocalCluster

from tests.notebooks.test_notebooks import full_chunks, make_demo_store, results_of, run_notebook
from windvane import arrays
from windvane.ops import demo

# One worker runs the module: its tests share the demo store (a module fixture).
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("distributed")]

#: Float agreement: float64 results of the same computation, rounded differently at most.
RTOL = 1e-9


def store_file_open(path: str) -> bool:
    """Whether this process (a worker, under ``client.run``) has the file ``path`` open."""
    path = os.path.realpath(path)
    return any(os.path.realpath(f"/proc/self/fd/{fd}") == path for fd in os.listdir("/proc/self/fd"))


@pytest.fixture(scope="module")
def demo_store(tmp_path_factory) -> str:
    return make_demo_store(tmp_path_factory)


@pytest.fixture
def cluster():
    """A fresh cluster per test: which workers have the store open says what that test did."""
    with (
        LocalCluster(n_workers=3, processes=True, threads_per_worker=1, dashboard_address=None) as cluster,
        Client(cluster) as client,
    ):
        yield cluster, client


def test_the_vibration_notebook_gives_the_same_results_on_the_cluster(demo_store, cluster):
    path = demo_store[len("sqlite:///") :]
    assert not any(cluster[1].run(store_file_open, path).values())
    local = results_of(run_notebook("vibration", demo_store))
    remote = results_of(run_notebook("vibration", demo_store, WINDVANE_DASK_SCHEDULER=cluster[0].scheduler_address))
    assert (local["scheduler"], remote["scheduler"]) == ("threads", "distributed")
    # The notebook's own process read every chunk alone; on the cluster it read none: the workers did.
    assert local["chunks_read_here"] >= full_chunks(demo_store) > 0 and remote["chunks_read_here"] == 0
    # What is discrete is exact: the same graph is built either way, and the same chunks are read.
    for key in (
        "rows",
        "sample_rate",
        "stream_bytes",
        "cache_bytes",
        "shaft_hz_measured",
        "spectrum_peak_hz",
        "fault_hz",
        "detected_fault",
        "detected_peak_hz",
        "harmonics",
    ):
        assert remote[key] == local[key], key
    # Floats agree to rounding: most runs are bit for bit, but not all (numpy's FFT and reductions may take
    # other vectorised paths on buffers aligned differently in another process: last-bit differences seen).
    np.testing.assert_allclose(remote["rms_windows"], local["rms_windows"], rtol=RTOL)
    np.testing.assert_allclose(remote["rms_overall"], local["rms_overall"], rtol=RTOL)
    for key in ("band_energy", "band_db"):
        for name, values in local[key].items():
            np.testing.assert_allclose(remote[key][name], values, rtol=RTOL, err_msg=f"{key} {name}")
    for name, value in local["sums"].items():
        assert remote["sums"][name] == pytest.approx(value, rel=RTOL), name
    assert remote["detected_fault"] == "BPFO"
    assert any(cluster[1].run(store_file_open, path).values())


def test_every_worker_reads_the_sqlite_file_itself(demo_store, cluster):
    _, client = cluster
    path = demo_store[len("sqlite:///") :]
    with arrays.open_stream(demo_store, demo.VIBRATION_TAG) as stream:
        samples = stream["samples"]
        x = samples.to_dask()
        expected = samples[:].astype(np.float64)
    # What the client sends: the source by URL, a few hundred bytes, not the 600 kB of samples.
    graph = dict(x.__dask_graph__())
    assert len(pickle.dumps(graph)) < 4096 < samples.nbytes // 100
    assert not any(client.run(store_file_open, path).values())
    # One slice per worker, pinned to it, all submitted at once: three processes read the file concurrently.
    workers = sorted(client.scheduler_info()["workers"])
    bounds = np.linspace(0, len(expected), len(workers) + 1).astype(int)
    futures = [
        client.compute(x[lo:hi].astype(np.float64).sum(axis=0), workers=[w])
        for w, lo, hi in zip(workers, bounds[:-1], bounds[1:])
    ]
    sums = client.gather(futures)
    for got, lo, hi in zip(sums, bounds[:-1], bounds[1:]):
        np.testing.assert_allclose(got, expected[lo:hi].sum(axis=0), rtol=RTOL)
    opened = client.run(store_file_open, path)
    assert sorted(opened) == workers and all(opened.values()), opened
