"""The FUSE server of ``windvane mount``: a pyfuse3 file system over :class:`~arrays.mount.tree.Snapshots`.

It runs in a process of its own, never in a process that maps its files: a
page fault on a mapping waits for this server, which would wait for the
interpreter lock the faulting thread holds. Reads of the store run in worker
threads, so several requests are served at once.

``head`` follows the store: a task looks at the store's last commit every
``poll`` seconds and, when it moved, tells the kernel to forget the ``head``
entry (FUSE notify), so the next lookup of ``head`` finds the new snapshot.
Files under ``@<tid>`` never change and need no notify. A snapshot directory
nobody looked at for ``idle`` seconds is dropped from the kernel's cache the
same way; once the kernel forgets its inodes, what the server opened for it
is closed.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import stat
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyfuse3
import trio

from .config import ARRAYS, HEAD, SIDECAR, MountConfig
from .tree import Column, Snapshots, parse_tid_name, tid_name

log = logging.getLogger(__name__)

_DIR = stat.S_IFDIR | 0o555
_FILE = stat.S_IFREG | 0o444
#: The read-only file at the mount's root whose JSON counts what the mount read from the store and served.
STATS = ".stats"
#: How far the kernel reads ahead of a sequential reader of a file (a few chunks of the usual size).
READ_AHEAD_KIB = 8192
#: How long the kernel may keep what it learnt of a node that never changes.
_FOREVER = 3600.0


@dataclass(frozen=True)
class Node:
    """What an inode stands for: the root, ``head``, a snapshot, a stream, an ``arrays`` directory (``tag`` is
    the group's path), or a file or its sidecar."""

    kind: str  # "root", "head", "snapshot", "stream", "arrays", "column", "sidecar", "stats"
    tid: bytes = b""
    tag: str = ""
    column: Column | None = field(default=None, compare=True)


class MountFS(pyfuse3.Operations):
    """Inodes are handed out as paths are looked up and dropped when the kernel forgets them."""

    enable_writeback_cache = False

    def __init__(self, snapshots: Snapshots, config: MountConfig | None = None):
        super().__init__()
        self.snapshots = snapshots
        self.config = config or MountConfig()
        self._nodes: dict[int, Node] = {pyfuse3.ROOT_INODE: Node("root")}
        self._inodes: dict[Node, int] = {Node("root"): pyfuse3.ROOT_INODE}
        self._lookups: dict[int, int] = {}
        self._next = pyfuse3.ROOT_INODE + 1
        self._head = snapshots.head()
        self._used: dict[bytes, float] = {}  # tid -> when a request last touched it (time.monotonic)
        self._reads = 0
        self._bytes_served = 0

    def stats(self) -> bytes:
        """The JSON of ``.stats``: what was read from the store and what was served, since the mount started."""
        counts = {**self.snapshots.stats(), "reads": self._reads, "bytes_served": self._bytes_served}
        return json.dumps(counts).encode() + b"\n"

    # -- inodes ------------------------------------------------------------------------

    def _inode(self, node: Node) -> int:
        found = self._inodes.get(node)
        if found is None:
            found, self._next = self._next, self._next + 1
            self._nodes[found] = node
            self._inodes[node] = found
        return found

    def _node(self, inode: int) -> Node:
        try:
            node = self._nodes[inode]
        except KeyError:
            raise pyfuse3.FUSEError(errno.ENOENT) from None
        if node.tid:
            self._used[node.tid] = time.monotonic()
        return node

    def _entry(self, node: Node) -> pyfuse3.EntryAttributes:
        """The attributes of ``node``, counted as one more lookup the kernel holds."""
        inode = self._inode(node)
        self._lookups[inode] = self._lookups.get(inode, 0) + 1
        return self._attributes(inode, node)

    async def forget(self, inode_list: Sequence[tuple[int, int]]) -> None:
        tids = set()
        for inode, count in inode_list:
            left = self._lookups.get(inode, 0) - count
            if left > 0 or inode == pyfuse3.ROOT_INODE:
                self._lookups[inode] = max(left, 0)
                continue
            self._lookups.pop(inode, None)
            node = self._nodes.pop(inode, None)
            if node is not None:
                del self._inodes[node]
                tids.add(node.tid)
        live = {node.tid for node in self._nodes.values()}
        for tid in tids - live - {b"", self._head}:
            log.info("snapshot %s forgotten", tid_name(tid))
            self._used.pop(tid, None)
            self.snapshots.forget(tid)

    # -- following the store -----------------------------------------------------------

    async def follow(self) -> None:
        """Every ``poll`` seconds: tell the kernel to forget ``head`` if the store moved, and snapshot
        directories unused for ``idle`` seconds."""
        while True:
            await trio.sleep(self.config.poll)
            try:
                head = await trio.to_thread.run_sync(self.snapshots.head)
            except Exception:
                # Broad: the store out of reach (a restarting server) must not end the mount; the next poll
                # tries again and reads in between report their own errors.
                log.exception("looking at the store's last commit failed")
                continue
            if head != self._head:
                self._head = head
                pyfuse3.invalidate_entry_async(pyfuse3.ROOT_INODE, HEAD.encode(), ignore_enoent=True)
            stale = time.monotonic() - self.config.idle
            for tid, used in list(self._used.items()):
                if used < stale and tid != head:
                    del self._used[tid]
                    pyfuse3.invalidate_entry_async(pyfuse3.ROOT_INODE, tid_name(tid).encode(), ignore_enoent=True)

    # -- the tree ------------------------------------------------------------------------

    async def _child(self, parent: Node, name: str) -> Node | None:
        snaps = self.snapshots
        if parent.kind == "root":
            if name == STATS:
                return Node("stats")
            if name == HEAD:
                # The store's newest commit, not the last one announced: follow() still tells the kernel to
                # forget any head entry it keeps from before (a listing may have cached one).
                return Node("head", await trio.to_thread.run_sync(snaps.head))
            tid = parse_tid_name(name)
            return None if tid is None else Node("snapshot", tid)
        if parent.kind in ("head", "snapshot") and name == ARRAYS:
            return Node("arrays", parent.tid)
        if parent.kind == "arrays":
            return await self._array_child(parent, name)
        return (await self._children(parent)).get(name)

    async def _array_child(self, parent: Node, name: str) -> Node | None:
        path = f"{parent.tag}/{name}" if parent.tag else name
        found = await trio.to_thread.run_sync(self.snapshots.array_entry, parent.tid, path)
        if found == "group":
            return Node("arrays", parent.tid, path)
        if isinstance(found, Column):
            return Node("column", parent.tid, path, found)
        if name.endswith(SIDECAR):
            file = await self._array_child(parent, name[: -len(SIDECAR)])
            if file is not None and file.kind == "column":
                return Node("sidecar", file.tid, file.tag, file.column)
        return None

    async def _children(self, node: Node) -> dict[str, Node]:
        """What a directory lists (an ``arrays`` directory lists nothing: its arrays appear when looked up)."""
        snaps = self.snapshots
        if node.kind == "root":
            head = await trio.to_thread.run_sync(snaps.head)
            return {HEAD: Node("head", head), tid_name(head): Node("snapshot", head), STATS: Node("stats")}
        if node.kind in ("head", "snapshot"):
            tags = await trio.to_thread.run_sync(snaps.tags, node.tid)
            return {ARRAYS: Node("arrays", node.tid)} | {tag: Node("stream", node.tid, tag) for tag in tags}
        if node.kind == "arrays":
            return {}
        if node.kind == "stream":
            columns = await trio.to_thread.run_sync(snaps.columns, node.tid, node.tag)
            out: dict[str, Node] = {}
            for name, column in columns.items():
                out[name] = Node("column", node.tid, node.tag, column)
                out[name + SIDECAR] = Node("sidecar", node.tid, node.tag, column)
            return out
        raise pyfuse3.FUSEError(errno.ENOTDIR)

    async def lookup(self, parent_inode: int, name: bytes, ctx: Any = None) -> pyfuse3.EntryAttributes:
        parent = self._node(parent_inode)
        if parent.column is not None:
            raise pyfuse3.FUSEError(errno.ENOTDIR)
        child = await self._child(parent, name.decode("utf-8", "surrogateescape"))
        if child is None:
            raise pyfuse3.FUSEError(errno.ENOENT)
        return self._entry(child)

    def _attributes(self, inode: int, node: Node) -> pyfuse3.EntryAttributes:
        entry = pyfuse3.EntryAttributes()
        entry.st_ino = inode
        # Everything but the root never changes: the kernel may keep it (head is forgotten by notify).
        entry.attr_timeout = entry.entry_timeout = 0 if node.kind in ("root", "stats") else _FOREVER
        if node.kind == "stats":
            entry.st_mode, entry.st_size = _FILE, len(self.stats())
        elif node.column is None:
            entry.st_mode, entry.st_size = _DIR, 0
        elif node.kind == "column":
            entry.st_mode, entry.st_size = _FILE, node.column.size
        else:
            entry.st_mode, entry.st_size = _FILE, len(node.column.sidecar())
        return entry

    async def getattr(self, inode: int, ctx: Any = None) -> pyfuse3.EntryAttributes:
        return self._attributes(inode, self._node(inode))

    async def opendir(self, inode: int, ctx: Any) -> int:
        return inode

    async def readdir(self, inode: int, start_id: int, token: Any) -> None:
        children = sorted((await self._children(self._node(inode))).items())
        for index, (name, child) in enumerate(children[start_id:], start_id + 1):
            child_inode = self._inode(child)
            if not pyfuse3.readdir_reply(
                token, name.encode("utf-8", "surrogateescape"), self._attributes(child_inode, child), index
            ):
                break
            self._lookups[child_inode] = self._lookups.get(child_inode, 0) + 1

    async def open(self, inode: int, flags: int, ctx: Any) -> pyfuse3.FileInfo:
        node = self._node(inode)
        if node.kind == "stats":
            # Counters change with every read: no page cache, and reads past the size getattr gave are served.
            return pyfuse3.FileInfo(fh=inode, direct_io=True)
        if node.column is None:
            raise pyfuse3.FUSEError(errno.EISDIR)
        info = pyfuse3.FileInfo(fh=inode)
        info.keep_cache = True  # a snapshot's bytes never change: pages cached by one process serve all
        return info

    # pyfuse3 replies with any buffer (it takes the result's buffer), though its stub says bytes: a slice of a
    # kept chunk goes to the kernel uncopied.
    async def read(self, fh: int, offset: int, size: int) -> bytes | memoryview:  # type: ignore[override]
        node = self._node(fh)
        if node.kind == "stats":
            return self.stats()[offset : offset + size]
        if node.column is None:
            raise pyfuse3.FUSEError(errno.EISDIR)
        if node.kind == "sidecar":
            return node.column.sidecar()[offset : offset + size]
        # Most of a sequential reader's requests fall in a chunk already decoded: served here, without a thread.
        kept = self.snapshots.kept(node.column, offset, size)
        try:
            data = (
                kept
                if kept is not None
                else await trio.to_thread.run_sync(self.snapshots.read, node.column, offset, size)
            )
        except Exception:
            # Broad: whatever the store raised (a damaged chunk, the database out of reach), the reader gets
            # EIO for this page and the log says why; the mount serves the rest.
            log.exception("reading %s at %d failed", node.column.array or f"{node.tag}/{node.column.name}", offset)
            raise pyfuse3.FUSEError(errno.EIO) from None
        self._reads += 1
        self._bytes_served += len(data)
        return data


async def _widen_read_ahead_soon(mountpoint: str) -> None:
    # In a thread, once the loop runs: it reads the mount table and sysfs, which may be slow.
    await trio.to_thread.run_sync(widen_read_ahead, mountpoint)


async def _main(fs: MountFS, mountpoint: str) -> None:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(fs.follow)
        nursery.start_soon(_widen_read_ahead_soon, mountpoint)
        await pyfuse3.main()
        nursery.cancel_scope.cancel()


def widen_read_ahead(mountpoint: str, kib: int = READ_AHEAD_KIB) -> None:
    """Let the kernel read ``kib`` ahead of a reader of the mount's files, in requests of up to ``max_pages``.

    The kernel reads a FUSE file ahead by its device's ``read_ahead_kb`` (128 KiB unless told): one request
    at a time of a small piece, each a round trip to this server. libfuse takes no ``max_read`` or
    ``max_readahead`` from pyfuse3's options, so the setting goes through sysfs once the file system is
    mounted. Without the right to write it (not root) the mount works with the kernel's default.
    """
    # The device number comes from the mount table: a stat of the mount point would wait for this very server.
    where = os.path.realpath(mountpoint)
    devices = [
        fields[2]
        for fields in (line.split() for line in Path("/proc/self/mountinfo").read_text().splitlines())
        if fields[4] == where
    ]
    setting = Path(f"/sys/class/bdi/{devices[-1] if devices else 'unknown'}/read_ahead_kb")
    try:
        setting.write_text(f"{kib}\n")
    except OSError as error:
        log.warning("read-ahead of the mount left at the kernel's default: cannot write %s (%s)", setting, error)


def serve(snapshots: Snapshots, mountpoint: str, config: MountConfig | None = None) -> None:
    """Mount at ``mountpoint`` and serve until unmounted (or interrupted)."""
    options = set(pyfuse3.default_options) | {"fsname=windvane", "ro"}
    fs = MountFS(snapshots, config)
    pyfuse3.init(fs, mountpoint, options)
    try:
        trio.run(_main, fs, mountpoint)
    finally:
        pyfuse3.close(unmount=True)
