"""Export targets: checked before any work, written under a temporary name, then renamed into place.

A target (a file, or a directory for zarr) is written as
``.<name>.tmp-<pid>`` beside it, flushed to disk (every file and directory
of it ``fsync``-ed), renamed to its name, and the directory holding it
``fsync``-ed: a reader, or a run after a crash, sees the whole file or
none. What a killed run leaves is a temporary file, which the next run
writing the same name removes (:func:`remove_stale`).
"""

from __future__ import annotations

import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .errors import TargetExists, TargetUnwritable

_TEMP = ".{}.tmp-"
_FSYNC_THREADS = 16


def temp_path(final: Path) -> Path:
    """Where ``final`` is written before it is renamed into place (this process's own name)."""
    return final.with_name(_TEMP.format(final.name) + str(os.getpid()))


def remove(path: Path) -> None:
    """Remove ``path`` (a file or a directory tree) if it exists."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def remove_stale(final: Path) -> None:
    """Remove temporaries of ``final`` that earlier runs (killed while writing it) left."""
    for stale in final.parent.glob(_TEMP.format(final.name) + "*"):
        remove(stale)


def check_target(final: Path, *, directory: bool, overwrite: bool) -> None:
    """Fail before any work if ``final`` cannot be written: :class:`TargetExists` or :class:`TargetUnwritable`."""
    parent = final.parent
    if not parent.is_dir():
        why = "is not a directory" if parent.exists() else "does not exist"
        raise TargetUnwritable(f"cannot write {final}: {parent} {why}")
    if final.exists() or final.is_symlink():
        if not overwrite:
            raise TargetExists(f"{final} exists; pass --overwrite to replace it, or choose another --to")
        if final.is_dir() and not directory:
            raise TargetUnwritable(f"cannot write {final}: it is a directory (this format writes a file)")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise TargetUnwritable(f"cannot write {final}: no permission to create files in {parent}")


def job_directory(path: Path) -> None:
    """Make sure a job's ``--to`` directory exists; :class:`TargetUnwritable` if it cannot be."""
    if path.exists() and not path.is_dir():
        raise TargetUnwritable(
            f"cannot export into {path}: it is a file; a --job writes its part files into a directory"
        )
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise TargetUnwritable(f"cannot create the export directory {path}: {exc.strerror or exc}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise TargetUnwritable(f"cannot write into {path}: no permission to create files there")


def _fsync(path: Path, *, directory: bool) -> None:
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(path: Path) -> None:
    """Flush ``path`` to disk: the file, or every file and directory under the directory."""
    if not path.is_dir():
        _fsync(path, directory=False)
        return
    todo = [(Path(root) / name, False) for root, _, names in os.walk(path) for name in names]
    todo += [(Path(root), True) for root, _, _ in os.walk(path)]
    # A zarr group is one file per chunk: fsyncs in flight together share the file system's journal commits.
    with ThreadPoolExecutor(_FSYNC_THREADS) as pool:
        list(pool.map(lambda item: _fsync(item[0], directory=item[1]), todo))


def publish(temp: Path, final: Path) -> None:
    """Flush ``temp`` and rename it to ``final`` (replacing what is there), then flush the directory."""
    fsync_tree(temp)
    if final.is_dir() and not final.is_symlink():
        # A directory cannot be renamed over a non-empty one: move the old one aside first.
        old = final.with_name(_TEMP.format(final.name) + f"{os.getpid()}-old")
        os.rename(final, old)
        os.rename(temp, final)
        remove(old)
    else:
        os.replace(temp, final)
    _fsync(final.parent, directory=True)
