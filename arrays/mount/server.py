"""The FUSE server of ``windvane mount``: a pyfuse3 file system over :class:`~arrays.mount.tree.Snapshots`.

It runs in a process of its own, never in a process that maps its files: a
page fault on a mapping waits for this server, which would wait for the
interpreter lock the faulting thread holds. Reads of the store run in worker
threads, so several requests are served at once.
"""

from __future__ import annotations

import errno
import logging
import stat
from dataclasses import dataclass
from typing import Any

import pyfuse3
import trio

from .tree import HEAD, SIDECAR, Column, Snapshots, parse_tid_name, tid_name

log = logging.getLogger(__name__)

_DIR = stat.S_IFDIR | 0o555
_FILE = stat.S_IFREG | 0o444


@dataclass(frozen=True)
class Node:
    """What an inode stands for: the root, ``head``, a snapshot, a stream, or a column's file or sidecar."""

    kind: str  # "root", "head", "snapshot", "stream", "column", "sidecar"
    tid: bytes = b""
    tag: str = ""
    column: Column | None = None


class MountFS(pyfuse3.Operations):
    """Inodes are handed out as paths are looked up and kept for the mount's life."""

    enable_writeback_cache = False

    def __init__(self, snapshots: Snapshots):
        super().__init__()
        self.snapshots = snapshots
        self._nodes: dict[int, Node] = {pyfuse3.ROOT_INODE: Node("root")}
        self._inodes: dict[Node, int] = {Node("root"): pyfuse3.ROOT_INODE}

    def _inode(self, node: Node) -> int:
        found = self._inodes.get(node)
        if found is None:
            found = len(self._nodes) + 1
            self._nodes[found] = node
            self._inodes[node] = found
        return found

    def _node(self, inode: int) -> Node:
        try:
            return self._nodes[inode]
        except KeyError:
            raise pyfuse3.FUSEError(errno.ENOENT) from None

    async def _children(self, node: Node) -> dict[str, Node]:
        snaps = self.snapshots
        if node.kind == "root":
            head = await trio.to_thread.run_sync(snaps.head)
            return {HEAD: Node("head", head), tid_name(head): Node("snapshot", head)}
        if node.kind in ("head", "snapshot"):
            tags = await trio.to_thread.run_sync(snaps.tags, node.tid)
            return {tag: Node("stream", node.tid, tag) for tag in tags}
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
        text = name.decode("utf-8", "surrogateescape")
        if parent.kind == "root":
            tid = parse_tid_name(text)
            if tid is not None:
                return await self.getattr(self._inode(Node("snapshot", tid)))
        child = (await self._children(parent)).get(text)
        if child is None:
            raise pyfuse3.FUSEError(errno.ENOENT)
        return await self.getattr(self._inode(child))

    async def getattr(self, inode: int, ctx: Any = None) -> pyfuse3.EntryAttributes:
        node = self._node(inode)
        entry = pyfuse3.EntryAttributes()
        entry.st_ino = inode
        # A snapshot never changes: the kernel may keep what it learnt; head is asked again each time.
        fixed = node.kind != "head" and node.kind != "root"
        entry.attr_timeout = entry.entry_timeout = 3600 if fixed else 0
        if node.column is None:
            entry.st_mode, entry.st_size = _DIR, 0
        elif node.kind == "column":
            entry.st_mode, entry.st_size = _FILE, node.column.size
        else:
            entry.st_mode, entry.st_size = _FILE, len(node.column.sidecar())
        return entry

    async def opendir(self, inode: int, ctx: Any) -> int:
        return inode

    async def readdir(self, inode: int, start_id: int, token: Any) -> None:
        children = sorted((await self._children(self._node(inode))).items())
        for index, (name, child) in enumerate(children[start_id:], start_id + 1):
            attrs = await self.getattr(self._inode(child))
            if not pyfuse3.readdir_reply(token, name.encode("utf-8", "surrogateescape"), attrs, index):
                break

    async def open(self, inode: int, flags: int, ctx: Any) -> pyfuse3.FileInfo:
        node = self._node(inode)
        if node.column is None:
            raise pyfuse3.FUSEError(errno.EISDIR)
        info = pyfuse3.FileInfo(fh=inode)
        info.keep_cache = True  # a snapshot's bytes never change: pages cached by one process serve all
        return info

    async def read(self, fh: int, offset: int, size: int) -> bytes:
        node = self._node(fh)
        assert node.column is not None
        if node.kind == "sidecar":
            return node.column.sidecar()[offset : offset + size]
        try:
            return await trio.to_thread.run_sync(self.snapshots.read, node.column, offset, size)
        except Exception:
            # Broad: whatever the store raised (a damaged chunk, the database out of reach), the reader gets
            # EIO for this page and the log says why; the mount serves the rest.
            log.exception("reading %s/%s at %d failed", node.tag, node.column.name, offset)
            raise pyfuse3.FUSEError(errno.EIO) from None


def serve(snapshots: Snapshots, mountpoint: str) -> None:
    """Mount at ``mountpoint`` and serve until unmounted (or interrupted)."""
    options = set(pyfuse3.default_options) | {"fsname=windvane", "ro"}
    pyfuse3.init(MountFS(snapshots), mountpoint, options)
    try:
        trio.run(pyfuse3.main)
    finally:
        pyfuse3.close(unmount=True)
