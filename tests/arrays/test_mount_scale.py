"""`windvane mount` at scale and under failure: a 64 GiB stream, two readers, a writer, a killed server, a damaged
chunk (real FUSE, real SQLite, readers in processes of their own: a fault on a mapping must not stop pytest)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from windvane import arrays, neostore
from windvane.arrays.mount import client

from ..mounts import PRELUDE, python, start_server, stop_server, unmount

pytestmark = pytest.mark.skipif(not os.path.exists("/dev/fuse"), reason="this machine has no /dev/fuse")

#: Rows of one chunk of the big stream's float64 column (1 MiB), and how many distinct chunks it repeats.
CHUNK = 1 << 17
DISTINCT = 5
BIG = 64 << 30
STRIDE = 1_000_000


MAP = """
def mapped(path):
    meta = json.load(open(path + ".json"))
    return np.memmap(path, dtype=meta["dtype"], mode="r", shape=tuple(meta["shape"]))
"""


def build_big(url: str) -> None:
    """Stream ``big``: a float64 column of 64 GiB whose chunks repeat ``DISTINCT`` stored ones (dedup keeps the
    store small); written as chunks copied by key in one transaction, as appending them would encode each."""
    with neostore.open(url) as store:
        stream = arrays.create_stream(store, "big", [arrays.Column("v", "float64")], chunk_rows=CHUNK)
        rows = DISTINCT * CHUNK
        stream.append({"time": np.zeros(rows, "int64"), "v": np.arange(rows, dtype="float64")})
        stream.close()
        chunks = BIG // 8 // CHUNK
        with arrays.transaction(store, message="the distinct chunks repeated") as tx:
            stored = {
                part: [tx.raw_get(f"streams/big/{part}/{k}") or b"" for k in range(DISTINCT)]
                for part in ("v/c", "time/c", "__times")
            }
            for first in range(DISTINCT, chunks, 8192):
                batch = range(first, min(chunks, first + 8192))
                items = {f"streams/big/{part}/{i}": stored[part][i % DISTINCT] for part in stored for i in batch}
                tx.set_many(items, compress=False, raw=True)
            for column in ("v", "time"):
                meta = json.loads(tx.raw_get(f"streams/big/{column}/zarr.json") or b"{}")
                meta["shape"] = [chunks * CHUNK]
                tx.set(f"streams/big/{column}/zarr.json", json.dumps(meta).encode(), raw=True)


def test_a_64_gib_stream_maps_and_reduces_to_the_values_read_chunk_by_chunk(tmp_path, sqlite_url, monkeypatch):
    monkeypatch.setenv("WINDVANE_MOUNTS", str(tmp_path / "mounts"))
    monkeypatch.setattr(client, "RUNTIME", tmp_path / "mounts")
    build_big(sqlite_url)
    assert Path(sqlite_url.removeprefix("sqlite:///")).stat().st_size < 256 << 20
    with arrays.open_stream(sqlite_url, "big") as stream:
        column = stream["v"]
        assert column.nbytes == BIG
        # The reference, read through the store without the mount: only the chunks the strides touch.
        every = column[::STRIDE]
        across = column[12345 :: 1 << 20]
    code = """
import psutil
from windvane import arrays
with arrays.open_stream(sys.argv[1], "big") as stream:
    # Strided reads: the kernel reads only the pages touched, not far ahead of each.
    m = stream.mmap("v", access="random")
every = np.asarray(m)[::int(sys.argv[2])]
# A reduction across the whole mapping: one column of it seen as rows of 2**20 values.
across = np.add.reduce(np.asarray(m).reshape(-1, 1 << 20)[:, 12345])
print(json.dumps({"shape": list(m.shape), "every_sum": float(every.sum()), "every": every[:50].tolist(),
                  "across_sum": float(across), "rss": psutil.Process().memory_info().rss}))
"""
    mountpoint = client.mountpoint_of(sqlite_url)
    try:
        result = python(code, sqlite_url, str(STRIDE))
        assert result.returncode == 0, result.stderr
        got = json.loads(result.stdout)
        stats = json.loads((mountpoint / ".stats").read_text())
    finally:
        unmount(mountpoint)
    assert got["shape"] == [BIG // 8]
    assert got["every_sum"] == float(every.sum())
    assert got["every"] == every[:50].tolist()
    assert got["across_sum"] == float(np.add.reduce(across))
    # The mapping holds only the pages the strides touched, and the mount served little more than those.
    assert got["rss"] < 2 << 30
    assert stats["bytes_served"] < 1 << 30


def test_two_processes_mapping_one_snapshot_read_the_store_once_and_see_the_same_bytes(tmp_path, sqlite_url):
    with neostore.open(sqlite_url) as store:
        stream = arrays.create_stream(store, "vib", [arrays.Column("x", "float32")], chunk_rows=1 << 16)
        stream.append({"time": np.arange(1 << 20, dtype="int64"), "x": np.random.default_rng(1).random(1 << 20)})
        stream.close()
        tid = store.last_transaction()
    mountpoint = tmp_path / "mnt"
    proc = start_server(sqlite_url, mountpoint)
    try:
        path = str(mountpoint / f"@{tid.hex()}" / "vib" / "x")
        code = MAP + "import hashlib\nprint(hashlib.sha256(np.asarray(mapped(sys.argv[1])).tobytes()).hexdigest())"
        first = python(code, path)
        after_first = json.loads((mountpoint / ".stats").read_text())
        second = python(code, path)
        stats = json.loads((mountpoint / ".stats").read_text())
    finally:
        stop_server(proc, mountpoint)
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    assert first.stdout == second.stdout
    with arrays.open_stream(sqlite_url, "vib") as stream:
        import hashlib

        assert first.stdout.strip() == hashlib.sha256(stream["x"][:].astype("<f4").tobytes()).hexdigest()
    # Each of the column's 16 chunks came from the store once; the second reader was served by the page cache,
    # so the mount served it nothing. The first reader may be served a page twice when the kernel's read-ahead
    # and the reader's own fault ask for it at once, so its bytes are counted as at least the file's.
    assert stats["chunk_reads"] == 16
    assert after_first["bytes_served"] >= (1 << 20) * 4
    assert stats["bytes_served"] == after_first["bytes_served"]
    assert stats["reads"] == after_first["reads"]


def test_a_mapping_at_an_older_tid_never_changes_while_a_writer_commits(tmp_path, sqlite_url, monkeypatch):
    monkeypatch.setenv("WINDVANE_MOUNTS", str(tmp_path / "mounts"))
    monkeypatch.setattr(client, "RUNTIME", tmp_path / "mounts")
    with neostore.open(sqlite_url) as store:
        stream = arrays.create_stream(store, "vib", [arrays.Column("x", "float64")], chunk_rows=1000)
        stream.append({"time": np.arange(5000, dtype="int64"), "x": np.arange(5000, dtype="float64")})
        stream.close()
    code = """
from windvane import arrays
with arrays.open_stream(sys.argv[1], "vib") as s:
    m = s.mmap("x")
    before = np.array(m)
    print("mapped", flush=True)
    for line in sys.stdin:  # the writer committed once more
        assert np.array_equal(np.asarray(m), before) and m.shape == (5000,)
        print("same", flush=True)
    s.refresh()
    newer = s.mmap("x")
    print(json.dumps({"rows": newer.shape[0], "tail": float(newer[-1])}), flush=True)
"""
    env = {**os.environ, "WINDVANE_MOUNTS": str(tmp_path / "mounts")}
    proc = subprocess.Popen(
        [sys.executable, "-c", PRELUDE + code, sqlite_url],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        assert proc.stdout.readline() == "mapped\n"
        with arrays.open_stream(sqlite_url, "vib") as writer:
            for round in range(3):
                first = 5000 + round * 700
                # Rewrites the last, partial chunk of the reader's snapshot as well as adding new ones.
                writer.append(
                    {"time": np.arange(first, first + 700, dtype="int64"), "x": -np.ones(700, dtype="float64")}
                )
                proc.stdin.write("committed\n")
                proc.stdin.flush()
                assert proc.stdout.readline() == "same\n"
        proc.stdin.close()
        assert json.loads(proc.stdout.readline()) == {"rows": 7100, "tail": -1.0}
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        unmount(client.mountpoint_of(sqlite_url))


def test_a_reader_gets_an_error_when_the_mount_is_killed_and_a_new_mount_serves_again(
    tmp_path, sqlite_url, monkeypatch
):
    monkeypatch.setenv("WINDVANE_MOUNTS", str(tmp_path / "mounts"))
    monkeypatch.setattr(client, "RUNTIME", tmp_path / "mounts")
    with neostore.open(sqlite_url) as store:
        # 64 MiB: the page read last lies beyond what the kernel reads ahead of the first.
        stream = arrays.create_stream(store, "vib", [arrays.Column("x", "float64")], chunk_rows=1 << 16)
        stream.append({"time": np.arange(1 << 23, dtype="int64"), "x": np.arange(1 << 23, dtype="float64")})
        stream.close()
    mountpoint = client.mountpoint_of(sqlite_url)
    server = start_server(sqlite_url, mountpoint)
    code = (
        MAP
        + """
m = mapped(sys.argv[1])
print(float(m[0]), flush=True)
sys.stdin.readline()  # the mount is killed
outcome = {}
try:
    os.stat(sys.argv[1])
    outcome["stat"] = "ok"
except OSError as exc:
    outcome["stat"] = exc.errno
try:
    with open(sys.argv[1], "rb") as f:
        f.seek(1 << 20)
        f.read(4096)
    outcome["read"] = "ok"
except OSError as exc:
    outcome["read"] = exc.errno
print(json.dumps(outcome), flush=True)
float(m[-1])  # a page nobody read: the kernel cannot fill it
print("read a dead page", flush=True)
"""
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", PRELUDE + code, str(mountpoint / "head/vib/x")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        assert proc.stdout.readline() == "0.0\n"
        server.send_signal(signal.SIGKILL)
        server.wait(30)
        proc.stdin.write("go\n")
        proc.stdin.flush()
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    import errno

    outcome = json.loads(out.splitlines()[0])
    assert outcome == {"stat": errno.ENOTCONN, "read": errno.ENOTCONN}
    # The mapping's unread page raises SIGBUS: the reader ends with it, it does not hang.
    assert proc.returncode == -signal.SIGBUS, (proc.returncode, out, err)
    assert "read a dead page" not in out
    # ensure_mount finds the dead mount, unmounts it and starts a new server that serves again.
    try:
        with arrays.open_stream(sqlite_url, "vib") as stream:
            assert float(stream.mmap("x")[-1]) == float((1 << 23) - 1)
    finally:
        unmount(mountpoint)


def test_a_damaged_chunk_reads_as_an_error_not_as_wrong_numbers(tmp_path, sqlite_url):
    with neostore.open(sqlite_url) as store:
        stream = arrays.create_stream(store, "vib", [arrays.Column("x", "float64")], chunk_rows=1 << 14)
        stream.append({"time": np.arange(1 << 16, dtype="int64"), "x": np.arange(1 << 16, dtype="float64")})
        stream.close()
        with arrays.transaction(store) as tx:
            value = tx.raw_get("streams/vib/x/c/2")
            tx.abort()
    assert value is not None
    path = sqlite_url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as conn:
        (stored,) = conn.execute("SELECT value FROM data WHERE hash = ?", (neostore.value_hash(value),)).fetchone()
        damaged = bytearray(stored)
        damaged[len(damaged) // 2] ^= 0xFF
        conn.execute("UPDATE data SET value = ? WHERE hash = ?", (bytes(damaged), neostore.value_hash(value)))
    mountpoint = tmp_path / "mnt"
    proc = start_server(sqlite_url, mountpoint)
    try:
        file = str(mountpoint / "head" / "vib" / "x")
        code = (
            """
out = {}
with open(sys.argv[1], "rb") as f:
    out["good"] = np.frombuffer(f.read(8 << 14), "<f8")[-1].item()
    try:
        f.seek(2 * (8 << 14))
        out["damaged"] = np.frombuffer(f.read(8 << 14), "<f8").tolist()[:3]
    except OSError as exc:
        out["damaged"] = exc.errno
print(json.dumps(out), flush=True)
"""
            + MAP
            + """
mapped(sys.argv[1])[2 << 14]
print("read the damaged page", flush=True)
"""
        )
        result = python(code, file, timeout=120)
    finally:
        stop_server(proc, mountpoint)
    import errno

    assert json.loads(result.stdout.splitlines()[0]) == {"good": float((1 << 14) - 1), "damaged": errno.EIO}
    assert result.returncode == -signal.SIGBUS and "read the damaged page" not in result.stdout
