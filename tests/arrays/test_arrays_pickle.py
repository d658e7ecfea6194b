"""Dask arrays of BigArrays travel by store URL: another process reopens the store and reads the same snapshot.

A pickled ``to_dask()`` array is unpickled and computed in a real
subprocess started in another working directory (so a relative SQLite URL
must have been made absolute), after the original store moved on.
"""

from __future__ import annotations

import pickle
import subprocess
import sys

import numpy as np
import pytest

from windvane import arrays

# Unpickle a dask array from stdin, show whether the store file is open before and after computing it.
CHILD = r"""
import os, pickle, sys
import numpy as np

def store_open(path):
    return any(os.path.realpath(f"/proc/self/fd/{fd}") == path for fd in os.listdir("/proc/self/fd"))

path = sys.argv[1]
x = pickle.loads(sys.stdin.buffer.read())
before = store_open(path)
value = np.asarray(x.compute(scheduler="threads"))
print(before, store_open(path), x.shape, value.tobytes().hex())
"""


def run_child(x, cwd, path: str = "") -> tuple[bool, bool, np.ndarray]:
    """Compute the pickled ``x`` in a subprocess in ``cwd``: (store open before compute, after, the values)."""
    result = subprocess.run(
        [sys.executable, "-c", CHILD, path], input=pickle.dumps(x), capture_output=True, cwd=cwd, timeout=120
    )
    assert result.returncode == 0, result.stderr.decode()
    words = result.stdout.decode().split()
    values = np.frombuffer(bytes.fromhex(words[-1]), dtype=x.dtype).reshape(x.shape)
    return words[0] == "True", words[1] == "True", values


def test_a_pickled_dask_array_is_computed_in_another_process(store_url, tmp_path):
    data = np.arange(40_000 * 3, dtype="int64").reshape(-1, 3)
    a = arrays.create(store_url, "v/samples", (0, 3), "int64", chunks=(4096, 3))
    a.append(data)
    x = a.to_dask()
    assert len(pickle.dumps(x)) < 4096 < data.nbytes // 100  # the URL and the snapshot, not the chunks
    _, _, values = run_child(x[100:30_000].sum(axis=0, keepdims=True), str(tmp_path))
    np.testing.assert_array_equal(values, data[100:30_000].sum(axis=0, keepdims=True))
    a.close()


def test_a_relative_sqlite_url_is_made_absolute_and_nothing_opens_before_a_read(tmp_path, monkeypatch):
    (tmp_path / "here").mkdir()
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    data = np.arange(10_000, dtype="int64")
    with arrays.create("sqlite:///rel.db", "a", (0,), "int64", chunks=1000) as a:
        a.append(data)
        x = a.to_dask()
    before, after, values = run_child(x, str(tmp_path / "elsewhere"), str(tmp_path / "here" / "rel.db"))
    assert (before, after) == (False, True)  # unpickling opened nothing; the first read opened the store
    np.testing.assert_array_equal(values, data)
    assert not (tmp_path / "elsewhere" / "rel.db").exists()


def test_the_other_process_reads_the_snapshot_the_array_was_pickled_at(sqlite_url, tmp_path):
    a = arrays.create(sqlite_url, "a", (0,), "float64", chunks=100)
    a.append(np.ones(250))
    payload = a.to_dask()
    a.append(np.full(500, 2.0))  # commits after the snapshot
    a[:10] = -1.0  # rewrites a chunk the snapshot holds
    _, _, values = run_child(payload, str(tmp_path))
    np.testing.assert_array_equal(values, np.ones(250))
    a.refresh()
    assert a.shape == (750,) and a[0] == -1.0
    a.close()


def test_a_transactions_dask_array_refuses_to_travel(sqlite_url):
    with arrays.transaction(sqlite_url) as tx:
        a = arrays.create(tx, "t", (0,), "int32", chunks=10)
        a.append(np.arange(25, dtype="int32"))
        x = a.to_dask()
        np.testing.assert_array_equal(x.compute(scheduler="threads"), np.arange(25))  # in this process it reads
        with pytest.raises(TypeError, match="reads a transaction, which lives in this process"):
            pickle.dumps(x)
