"""`windvane mount`'s tree beyond streams: plain BigArrays by path, BigArray.mmap, and snapshot directories
dropped when unused (real FUSE, the mount run by its command)."""

from __future__ import annotations

import json
import os
import time

import numpy as np
import pytest

from windvane import arrays, neostore

from ..mounts import python, start_server, stop_server, unmount

pytestmark = pytest.mark.skipif(not os.path.exists("/dev/fuse"), reason="this machine has no /dev/fuse")


@pytest.fixture
def served(tmp_path, sqlite_url):
    """``windvane mount`` of a store holding a 2-D array ``lab/grid``, looking at the store every 0.05 s and
    dropping snapshot directories unused for 0.3 s; yields the URL, the mountpoint and the server's log."""
    with neostore.open(sqlite_url) as store:
        with arrays.create(store, "lab/grid", (0, 3), "float64", chunks=(1000, 3)) as grid:
            grid.append(np.arange(2500 * 3, dtype="float64").reshape(2500, 3))
    mountpoint, log = tmp_path / "mnt", tmp_path / "mount.log"
    proc = start_server(sqlite_url, mountpoint, "--poll", "0.05", "--idle", "0.3", log=log)
    yield sqlite_url, mountpoint, log
    stop_server(proc, mountpoint)


def last_tid(url: str) -> bytes:
    with neostore.open(url, read_only=True) as store:
        return store.last_transaction()


def test_a_plain_bigarray_is_a_file_at_its_path_with_its_full_shape(served):
    url, mountpoint, _ = served
    snapshot = mountpoint / f"@{last_tid(url).hex()}"
    assert "arrays" in os.listdir(snapshot)
    meta = json.loads((snapshot / "arrays" / "lab" / "grid.json").read_text())
    assert meta["dtype"] == "<f8" and meta["shape"] == [2500, 3] and meta["array"] == "lab/grid"
    mapped = np.memmap(snapshot / "arrays" / "lab" / "grid", dtype="<f8", mode="r", shape=(2500, 3))
    with arrays.open(url, "lab/grid") as grid:
        assert np.array_equal(mapped, grid[:])
    assert not (snapshot / "arrays" / "lab" / "nothing").exists()
    assert (snapshot / "arrays" / "lab").is_dir()
    del mapped


def test_an_unused_snapshot_directory_is_forgotten_and_a_mapped_one_is_kept(served):
    url, mountpoint, log = served
    old = last_tid(url)
    held = np.memmap(mountpoint / f"@{old.hex()}" / "arrays" / "lab" / "grid", dtype="<f8", mode="r")
    with arrays.open(url, "lab/grid") as grid:
        grid.append(np.ones((10, 3)))
    middle = last_tid(url)
    assert os.path.getsize(mountpoint / f"@{middle.hex()}" / "arrays" / "lab" / "grid") == 2510 * 3 * 8
    with arrays.open(url, "lab/grid") as grid:
        grid.append(np.ones((10, 3)))
    deadline = time.monotonic() + 30
    while f"snapshot @{middle.hex()} forgotten" not in log.read_text():
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.05)
    # The snapshot still mapped keeps its inodes and serves its bytes; the forgotten one comes back on lookup.
    assert f"snapshot @{old.hex()} forgotten" not in log.read_text()
    assert float(held[-3:].sum()) == float(np.arange(7497, 7500).sum())
    assert os.path.getsize(mountpoint / f"@{middle.hex()}" / "arrays" / "lab" / "grid") == 2510 * 3 * 8
    del held


def test_bigarray_mmap_maps_its_snapshot_and_refresh_maps_the_new_one(tmp_path, sqlite_url):
    with neostore.open(sqlite_url) as store:
        arrays.create(store, "lab/level", (0,), "int32", chunks=(1000,)).close()
    code = f"""
import numpy as np
from windvane import arrays
from windvane.arrays.mount import client
with arrays.open({sqlite_url!r}, "lab/level") as a:
    a.append(np.arange(4000, dtype="int32"))
    m = a.mmap()
    a.append(np.arange(100, dtype="int32"))
    assert m.shape == (4000,) and int(m.sum(dtype="int64")) == int(np.arange(4000).sum())
    a.refresh()
    assert np.array_equal(a.mmap()[-100:], np.arange(100))
print(client.mountpoint_of({sqlite_url!r}))
"""
    result = python(code, timeout=120, WINDVANE_MOUNTS=str(tmp_path / "mounts"))
    assert result.returncode == 0, result.stderr
    unmount(result.stdout.strip())
