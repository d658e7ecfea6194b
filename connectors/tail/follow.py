"""Following a growing log file, whole lines at a time, across rotations, from a position that can be stored.

A :class:`Follower` reads the file at a path as it grows and hands out
:class:`Chunk` objects: whole lines only (a last line without its newline
waits for it) and the position just after them. The position names the
file by device and inode and by a fingerprint of its first bytes (the
blake3 of up to :data:`HEAD_BYTES`; inodes are reused once a file is
deleted), plus the byte offset and line number. Stored with what was made
of the lines, it lets a restarted follower resume exactly.

Rotation, as logrotate does it:

- **rename** (``create``, the default): PATH is renamed (to ``PATH.1``,
  ``PATH-20261123``...) and a new PATH is created. The follower keeps
  reading the renamed file through its open descriptor until it has been
  quiet for ``rotate_wait`` seconds after PATH changed (a writer that has
  not reopened yet still writes there), takes its last line even without a
  newline, then follows the new PATH from its beginning.
- **copytruncate**: PATH is copied to ``PATH.1`` and truncated in place. The
  follower notices PATH is shorter than its offset (or no longer starts
  with the bytes it started with), reads the rest of the copy beside it
  from its offset (the copy is the file whose first bytes match), then
  PATH from 0. Lines written between the copy and the truncation are in
  neither file: that loss window is copytruncate's own (logrotate's manual
  says so) and no reader can close it; prefer ``create``.

On start with a stored position: if PATH is that file (same inode and first
bytes) the follower resumes at the offset (at 0 if PATH became shorter). If
PATH was rotated while stopped, it first finishes the rotated file if it is
still beside PATH, uncompressed (found by inode and first bytes, or first
bytes alone for a copy), then follows PATH from 0. If it is gone, its lines
after the offset are lost: that is logged, and PATH is followed from 0.
Without a stored position, PATH is followed from its beginning.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, BinaryIO

import blake3

from windvane.connectors.files.logs.reader import read_lines

from .config import TailConfig

log = logging.getLogger("windvane.tail")

#: Bytes of a file's start whose hash, with the inode, names it.
HEAD_BYTES = 1024
#: Suffixes of rotated files that are compressed: their bytes are not the log's.
COMPRESSED = (".gz", ".bz2", ".xz", ".zst", ".zip", ".lz4")


@dataclass(frozen=True)
class FilePosition:
    """Where a follower stands: which file (device, inode, first bytes' hash), byte offset and line number."""

    dev: int
    ino: int
    offset: int
    line: int
    head: str  # blake3 hex of the first head_bytes bytes
    head_bytes: int

    def to_dict(self) -> dict[str, Any]:
        """As plain data, for the store (msgpack)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> FilePosition:
        """The position stored as ``doc`` (the committed position's document)."""
        return cls(**{k: doc[k] for k in ("dev", "ino", "offset", "line", "head", "head_bytes")})


@dataclass(frozen=True)
class Chunk:
    """Whole lines read from ``path`` (the followed path, or the rotated file being finished)."""

    data: bytes
    first_line: int
    position: FilePosition  # just after ``data``
    path: str


def _head(f: BinaryIO, size: int) -> str:
    return blake3.blake3(os.pread(f.fileno(), size, 0)).hexdigest()


class _Open:
    """One open file being read: its descriptor, identity, offset, line and fingerprint."""

    def __init__(self, path: str, f: BinaryIO, offset: int = 0, line: int = 1):
        st = os.fstat(f.fileno())
        self.path, self.f, self.dev, self.ino = path, f, st.st_dev, st.st_ino
        self.offset, self.line = offset, line
        f.seek(offset)
        self.head_bytes = min(HEAD_BYTES, max(offset, 0))
        self.head = _head(f, self.head_bytes)

    def position(self) -> FilePosition:
        return FilePosition(self.dev, self.ino, self.offset, self.line, self.head, self.head_bytes)

    def advance(self, data: bytes) -> Chunk:
        first = self.line
        self.offset += len(data)
        self.line += data.count(b"\n")
        if self.head_bytes < HEAD_BYTES and self.offset > self.head_bytes:
            self.head_bytes = min(HEAD_BYTES, self.offset)
            self.head = _head(self.f, self.head_bytes)
        return Chunk(data, first, self.position(), self.path)

    def restart(self) -> None:
        """Read again from the beginning (the file was truncated)."""
        self.offset, self.line, self.head_bytes, self.head = 0, 1, 0, _head(self.f, 0)
        self.f.seek(0)

    def replaced(self) -> bool:
        """Whether the file no longer holds what was read: shorter than the offset, or other first bytes."""
        return os.fstat(self.f.fileno()).st_size < self.offset or _head(self.f, self.head_bytes) != self.head

    def close(self) -> None:
        self.f.close()


def matches(path: str, position: FilePosition, *, same_inode: bool) -> bool:
    """Whether the file at ``path`` continues ``position``: same first bytes, long enough (and same inode)."""
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            if same_inode and (st.st_dev, st.st_ino) != (position.dev, position.ino):
                return False
            return st.st_size >= position.offset and _head(f, position.head_bytes) == position.head
    except OSError:
        return False


def rotated_files(path: str) -> list[str]:
    """Files beside ``path`` whose names extend it (``PATH.1``, ``PATH-20261123``), uncompressed, newest first."""
    p = Path(path)
    try:
        found = [
            e
            for e in os.scandir(p.parent)
            if e.name.startswith(p.name) and e.name != p.name and not e.name.endswith(COMPRESSED) and e.is_file()
        ]
    except OSError:
        return []
    return [e.path for e in sorted(found, key=lambda e: e.stat().st_mtime, reverse=True)]


def find_continuation(path: str, position: FilePosition, *, exclude_inode: bool = False) -> str | None:
    """The file (``path`` or one rotated beside it) that ``position`` was taken in; None if it is gone.

    The same inode and first bytes first; else first bytes alone (a copy).
    ``exclude_inode``: look only for a copy (the file of that inode was
    truncated).
    """
    candidates = [path, *rotated_files(path)]
    for same_inode in (False,) if exclude_inode else (True, False):
        for candidate in candidates:
            if exclude_inode:
                try:
                    st = os.stat(candidate)
                except OSError:
                    continue
                if (st.st_dev, st.st_ino) == (position.dev, position.ino):
                    continue
            if matches(candidate, position, same_inode=same_inode):
                return candidate
    return None


class Follower:
    """Reads the lines of ``path`` as it grows; see the module docstring.

    ``position``: where to resume (a stored :meth:`FilePosition.to_dict`),
    or None. ``rotate_wait``: seconds a renamed file must be quiet before
    the new file is followed. Not thread-safe.
    """

    def __init__(
        self, path: str | Path, position: dict[str, Any] | None = None, *, rotate_wait: float = TailConfig.rotate_wait
    ):
        self.path = str(path)
        self.rotate_wait = rotate_wait
        self._current: _Open | None = None  # the file being read
        self._then_path = False  # after the current file (a rotated one being finished), PATH from 0
        self._changed_at: float | None = None  # when PATH was first seen to be another file
        if position is not None:
            self._resume(FilePosition.from_dict(position))

    @property
    def position(self) -> FilePosition | None:
        """Where reading stands (None before a file was opened)."""
        return self._current.position() if self._current else None

    def _open(self, path: str, offset: int = 0, line: int = 1) -> bool:
        try:
            f = open(path, "rb")  # kept open across reads, closed by _Open.close
        except FileNotFoundError:
            return False
        self._current = _Open(path, f, offset, line)
        return True

    def _resume(self, stored: FilePosition) -> None:
        found = find_continuation(self.path, stored)
        if found is None:
            log.warning(
                "%s: the file of the stored position (inode %d, offset %d) is no longer there (rotated "
                "away and removed or compressed, or truncated, while stopped); lines it held after that "
                "offset, if any, are lost. Following %s from its beginning",
                self.path,
                stored.ino,
                stored.offset,
                self.path,
            )
            return
        if found != self.path:
            log.info("%s was rotated while stopped: finishing %s from offset %d first", self.path, found, stored.offset)
            self._then_path = True
        self._open(found, stored.offset, stored.line)

    def read(self, limit: int = 1 << 20) -> Chunk | None:
        """The next whole lines (up to about ``limit`` bytes), or None if there are none yet."""
        if self._current is None and not self._open(self.path):
            return None
        current = self._current
        assert current is not None  # open before, or just opened
        if not self._then_path and current.replaced():
            self._truncated(current)
            current = self._current
            assert current is not None  # the copy, or the same file read again
        data = read_lines(current.f, limit, final=False)
        if data:
            self._changed_at = None
            return current.advance(data)
        if self._then_path:  # a rotated file, finished: its last line counts without a newline
            return self._switch(current, read_lines(current.f, limit, final=True))
        if not self._path_changed(current):
            return None
        now = time.monotonic()
        if self._changed_at is None:
            self._changed_at = now
        if now - self._changed_at < self.rotate_wait or not os.path.exists(self.path):
            return None
        log.info(
            "%s was rotated (renamed): read the old file to its end (offset %d), following the new one",
            self.path,
            current.offset,
        )
        return self._switch(current, read_lines(current.f, limit, final=True))

    def _switch(self, current: _Open, last: bytes) -> Chunk | None:
        """Take ``last`` from the ``current`` file, then follow PATH from its beginning."""
        chunk = current.advance(last) if last else None
        current.close()
        self._current, self._then_path, self._changed_at = None, False, None
        self._open(self.path)  # if there is none yet, the next read opens it
        return chunk

    def _truncated(self, current: _Open) -> None:
        copy = find_continuation(self.path, current.position(), exclude_inode=True)
        if copy is None:
            log.warning(
                "%s was truncated at offset %d (copytruncate) and no copy beside it holds the rest: "
                "reading it again from its beginning; lines written after offset %d before the "
                "truncation are lost",
                current.path,
                current.offset,
                current.offset,
            )
            current.restart()
            return
        log.info(
            "%s was truncated (copytruncate): finishing the copy %s from offset %d, then %s from 0",
            current.path,
            copy,
            current.offset,
            current.path,
        )
        position = current.position()
        current.close()
        self._open(copy, position.offset, position.line)
        self._then_path = True

    def _path_changed(self, current: _Open) -> bool:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return True
        return (st.st_dev, st.st_ino) != (current.dev, current.ino)

    def close(self) -> None:
        """Close the files being followed; the position stays what it was."""
        if self._current is not None:
            self._current.close()
            self._current = None
