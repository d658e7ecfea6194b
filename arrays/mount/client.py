"""Mapping a column of a stream as a numpy array: joining the machine's mount of the store, or starting it.

One mount serves a store to every process of the machine, so that they share
the kernel's page cache of each snapshot's files. A mount is found by the
store's URL under a runtime directory; one that is not there is started
(``windvane mount``, detached) and waited for.
"""

from __future__ import annotations

import ctypes
import errno
import hashlib
import importlib
import json
import mmap
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from windvane import neostore

from ..errors import ArrayError
from .config import ARRAYS, HEAD, SIDECAR, Access

#: Where the machine's mounts live, one directory per store.
RUNTIME = Path(
    os.environ.get(
        "WINDVANE_MOUNTS", "/run/windvane/mounts" if os.geteuid() == 0 else f"/tmp/windvane-{os.geteuid()}/mounts"
    )
)


#: The FUSE device a mount opens (another path only to try what happens where it is missing).
FUSE_DEVICE = os.environ.get("WINDVANE_FUSE_DEVICE", "/dev/fuse")
#: What reads the same data where no mount can run.
FALLBACK = "read the data without a mount, chunk by chunk with BigArray.blocks() or as a dask array (to_dask())"


class MountError(ArrayError):
    """A column cannot be mapped: FUSE is missing here, or the mount did not come up (the message says which,
    and what reads the same data without it: ``BigArray.blocks()`` or dask)."""


def fuse_missing() -> str | None:
    """What keeps a mount from running on this machine (the device, the permission to open it, pyfuse3), or
    None when nothing does."""
    if not os.path.exists(FUSE_DEVICE):
        return f"this machine has no {FUSE_DEVICE} (load the fuse module, or give the container the device)"
    if not os.access(FUSE_DEVICE, os.R_OK | os.W_OK):
        return f"this user may not open {FUSE_DEVICE} (run as root, or join the group that owns it)"
    try:
        importlib.import_module("pyfuse3")
    except ImportError as exc:
        return f"pyfuse3 cannot be imported ({exc}): apt-get install fuse3 libfuse3-dev, then pip install 'windvane[mount]'"
    return None


def mountpoint_of(url: str) -> Path:
    """The directory the machine's mount of the store at ``url`` serves from."""
    # The store's name (an absolute path, or servers and database): one mount however the URL is spelt.
    digest = hashlib.blake2b(neostore.parse_url(url).display_name.encode(), digest_size=8).hexdigest()
    return RUNTIME / digest


def ensure_mount(url: str, timeout: float = 30.0) -> Path:
    """The mount of ``url``: joined if it runs, started otherwise; MountError if it cannot run here."""
    mountpoint = mountpoint_of(url)
    if _alive(mountpoint):
        return mountpoint
    missing = fuse_missing()
    if missing is not None:
        raise MountError(f"FUSE is missing: {missing}; {FALLBACK}")
    mountpoint.mkdir(parents=True, exist_ok=True)
    log = mountpoint.with_suffix(".log")
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "windvane", "mount", url, str(mountpoint)],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = time.monotonic() + timeout
    while not (mountpoint / HEAD).exists():
        if proc.poll() is not None and not (mountpoint / HEAD).exists():
            raise MountError(f"the mount of {neostore.redacted(url)} exited at start; its log: {log}")
        if time.monotonic() >= deadline:
            raise MountError(f"the mount of {neostore.redacted(url)} did not come up in {timeout:g} s; its log: {log}")
        time.sleep(0.05)
    return mountpoint


def _alive(mountpoint: Path) -> bool:
    """Whether a mount serves at ``mountpoint``; one whose server died (the kernel answers ENOTCONN) is
    unmounted lazily, so that a new server can take the directory."""
    try:
        (mountpoint / HEAD).stat()
    except FileNotFoundError:
        return False
    except OSError as exc:
        if exc.errno != errno.ENOTCONN:
            raise MountError(f"the mount at {mountpoint} cannot be used ({exc.strerror}): unmount it") from exc
        # Lazily: processes that still map the dead server's files keep their (failing) mappings.
        subprocess.run(["umount", "-l", str(mountpoint)], capture_output=True, check=False)
        return False
    return True


#: The kernel's advice (madvise) for each way of reading a mapping: its default reads around and ahead of a
#: fault, which a sequential reader wants.
ADVICE: dict[str, int] = {"sequential": mmap.MADV_NORMAL, "random": mmap.MADV_RANDOM}


def map_column(url: str, tid: bytes, tag: str, column: str, access: Access = "sequential") -> np.memmap:
    """Column ``column`` of stream ``tag`` as of ``tid``, as a read-only memory map of the mount's file."""
    return _mapped(
        url,
        Path(f"@{tid.hex()}", tag, column),
        f"stream {tag!r} has no mappable column {column!r} at 0x{tid.hex()} (text and bytes columns have none)",
        access,
    )


def map_array(url: str, tid: bytes, path: str, access: Access = "sequential") -> np.memmap:
    """Plain BigArray ``path`` as of ``tid``, as a read-only memory map of the mount's file."""
    return _mapped(
        url,
        Path(f"@{tid.hex()}", ARRAYS, path),
        f"array {path!r} has no mapping at 0x{tid.hex()} (text and bytes arrays, and scalars, have none)",
        access,
    )


def _mapped(url: str, relative: Path, missing: str, access: Access) -> np.memmap:
    if access not in ADVICE:
        raise ValueError(f"access must be one of {', '.join(map(repr, ADVICE))}, not {access!r}")
    file = ensure_mount(url) / relative
    try:
        meta = json.loads(file.with_name(file.name + SIDECAR).read_text())
    except FileNotFoundError:
        raise MountError(missing) from None
    shape = tuple(meta["shape"])
    if 0 in shape:
        # An empty file cannot be mapped; an empty array of the same shape is what a mapping of it would be.
        return np.empty(shape, dtype=meta["dtype"]).view(np.memmap)
    mapped = np.memmap(file, dtype=meta["dtype"], mode="r", shape=shape)
    if ADVICE[access] != mmap.MADV_NORMAL:
        _advise(mapped, ADVICE[access])
    return mapped


def _advise(mapped: np.memmap, advice: int) -> None:
    """Tell the kernel how ``mapped`` is read. numpy keeps its ``mmap`` object to itself, so the advice goes to
    the mapping's address through libc; a mapping at offset 0 starts on a page boundary, as madvise wants."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    if libc.madvise(mapped.ctypes.data, mapped.nbytes, advice) != 0:
        error = ctypes.get_errno()
        raise MountError(f"the kernel refused the advice for {mapped.filename}: {os.strerror(error)}")
