"""`windvane mount` where FUSE is missing: exit code 2 and a message naming what is missing and the fallback."""

from __future__ import annotations

import os
import subprocess
import sys

from windvane import arrays, neostore

from ..mounts import python


def run_mount(url: str, directory: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "windvane", "mount", url, directory],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, **env},
    )


def test_mount_without_the_fuse_device_exits_2_naming_it_and_the_fallback(tmp_path, sqlite_url):
    neostore.open(sqlite_url).close()
    missing = str(tmp_path / "no-fuse-device")
    result = run_mount(sqlite_url, str(tmp_path / "mnt"), WINDVANE_FUSE_DEVICE=missing)
    assert result.returncode == 2, result.stderr
    assert f"this machine has no {missing}" in result.stderr
    assert "BigArray.blocks()" in result.stderr and "dask" in result.stderr
    assert not (tmp_path / "mnt").exists()


def test_mount_without_pyfuse3_exits_2_saying_how_to_install_it(tmp_path, sqlite_url):
    neostore.open(sqlite_url).close()
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    # A pyfuse3 that fails to import, first on the path: as where the package or libfuse3 is not installed.
    (shadow / "pyfuse3.py").write_text("raise ImportError('libfuse3.so.3: cannot open shared object file')\n")
    result = run_mount(
        sqlite_url, str(tmp_path / "mnt"), PYTHONPATH=os.pathsep.join([str(shadow), os.environ.get("PYTHONPATH", "")])
    )
    assert result.returncode == 2, result.stderr
    assert "pyfuse3 cannot be imported (libfuse3.so.3" in result.stderr
    assert "windvane[mount]" in result.stderr and "BigArray.blocks()" in result.stderr


def test_mmap_without_fuse_raises_mount_error_naming_the_fallback(tmp_path, sqlite_url):
    with neostore.open(sqlite_url) as store:
        arrays.create(store, "lab/grid", (10,), "float64").close()
    code = f"""
from windvane import arrays
from windvane.arrays.mount.client import MountError
with arrays.open({sqlite_url!r}, "lab/grid") as a:
    try:
        a.mmap()
    except MountError as exc:
        print(exc)
"""
    result = python(
        code, timeout=120, WINDVANE_FUSE_DEVICE=str(tmp_path / "none"), WINDVANE_MOUNTS=str(tmp_path / "mounts")
    )
    assert result.returncode == 0, result.stderr
    assert f"FUSE is missing: this machine has no {tmp_path / 'none'}" in result.stdout
    assert "BigArray.blocks()" in result.stdout
