"""`windvane mount`'s file system: a column's raw values as a file at a snapshot, mapped with numpy (real FUSE)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np
import pytest

from windvane import arrays, neostore
from windvane.arrays.mount import client

from ..mounts import python, start_server, stop_server, unmount

pytestmark = pytest.mark.skipif(not os.path.exists("/dev/fuse"), reason="this machine has no /dev/fuse")


@pytest.fixture
def mounted(tmp_path, sqlite_url):
    mountpoint = tmp_path / "mnt"
    mountpoint.mkdir()
    with neostore.open(sqlite_url) as store:
        stream = arrays.create_stream(
            store,
            "vib",
            [arrays.Column("x", "float32"), arrays.Column("samples", "int16", inner=(2,))],
            chunk_rows=1000,
        )
        stream.append(rows(0, 5500))
        stream.close()
    proc = start_server(sqlite_url, mountpoint)
    yield sqlite_url, mountpoint
    stop_server(proc, mountpoint)


def rows(first: int, count: int) -> dict[str, np.ndarray]:
    at = np.arange(first, first + count)
    return {
        "time": at.astype("int64") * 1000,
        "x": (at / 3).astype("float32"),
        "samples": np.stack([at, -at], axis=1).astype("int16"),
    }


def mapped(directory: Path, column: str) -> np.memmap:
    meta = json.loads((directory / f"{column}.json").read_text())
    return np.memmap(directory / column, dtype=meta["dtype"], mode="r", shape=tuple(meta["shape"]))


def test_a_column_file_maps_to_the_columns_values(mounted):
    url, mountpoint = mounted
    head = mountpoint / "head" / "vib"
    with arrays.open_stream(url, "vib") as stream:
        for column in ("time", "x", "samples"):
            assert np.array_equal(np.asarray(mapped(head, column)), stream[column][:])
    assert mapped(head, "samples").shape == (5500, 2)


def test_a_snapshot_file_never_changes_and_head_moves(mounted):
    url, mountpoint = mounted
    old = neostore.open(url, read_only=True)
    tid = old.last_transaction()
    old.close()
    before = mapped(mountpoint / f"@{tid.hex()}" / "vib", "x")
    copy = np.array(before)
    with arrays.open_stream(url, "vib") as stream:
        stream.append(rows(5500, 700))
    assert np.array_equal(np.asarray(before), copy)
    # head follows the commit once the mount's next look at the store has told the kernel to forget it.
    deadline = time.monotonic() + 30
    while mapped(mountpoint / "head" / "vib", "x").shape != (6200,):
        assert time.monotonic() < deadline, "head did not move to the new commit"
        time.sleep(0.05)
    assert np.array_equal(np.asarray(mapped(mountpoint / "head" / "vib", "x"))[:5500], copy)
    del before


def test_stream_mmap_starts_the_machines_mount_and_refresh_maps_newer_rows(tmp_path, sqlite_url, monkeypatch):
    monkeypatch.setenv("WINDVANE_MOUNTS", str(tmp_path / "mounts"))
    with neostore.open(sqlite_url) as store:
        stream = arrays.create_stream(store, "vib", [arrays.Column("x", "float32")], chunk_rows=1000)
        stream.append({"time": np.arange(3000, dtype="int64"), "x": np.arange(3000, dtype="float32")})
        stream.close()
    code = f"""
import numpy as np
from windvane import arrays
from windvane.arrays.mount import client
with arrays.open_stream({sqlite_url!r}, "vib") as s:
    m = s.mmap("x")
    assert m.shape == (3000,) and float(np.add.reduce(m, dtype="float64")) == float(np.arange(3000).sum())
    s.append({{"time": np.arange(3000, 3500, dtype="int64"), "x": np.ones(500, dtype="float32")}})
    assert m.shape == (3000,)
    s.refresh()
    assert s.mmap("x").shape == (3500,)
print(client.mountpoint_of({sqlite_url!r}))
"""
    result = python(code, timeout=120, WINDVANE_MOUNTS=str(tmp_path / "mounts"))
    assert result.returncode == 0, result.stderr
    mountpoint = result.stdout.strip()
    unmount(mountpoint)


def test_an_empty_column_maps_to_an_empty_array_and_an_unknown_access_is_refused(tmp_path, sqlite_url, monkeypatch):
    monkeypatch.setenv("WINDVANE_MOUNTS", str(tmp_path / "mounts"))
    monkeypatch.setattr(client, "RUNTIME", tmp_path / "mounts")
    with neostore.open(sqlite_url) as store:
        arrays.create_stream(store, "vib", [arrays.Column("samples", "int16", inner=(2,))], chunk_rows=1000).close()
    try:
        with arrays.open_stream(sqlite_url, "vib") as stream:
            empty = stream.mmap("samples", access="random")
            assert isinstance(empty, np.memmap) and empty.shape == (0, 2) and empty.dtype == np.dtype("<i2")
            with pytest.raises(ValueError, match="access must be one of 'sequential', 'random', not 'backwards'"):
                stream.mmap("samples", access="backwards")  # type: ignore[arg-type]
    finally:
        unmount(client.mountpoint_of(sqlite_url))
