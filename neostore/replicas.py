"""Snapshot reads from asynchronous replicas (``?replicas=``), never older than the snapshot asked for.

A read at a snapshot (``before``: the first tid it must not see) needs every
commit made before that tid. The primary commits in tid order and a replica
applies them in the same order, so a replica that holds the newest commit
before the snapshot holds them all: the read goes to it. A replica that has
not got there yet, or cannot be reached, is passed over; with none left the
primary serves. Reads of the latest state always go to the primary.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from .backends import Backend
from .sql import Row
from .tids import tid_time, u64
from .url import Node

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReplicaState:
    """What one replica holds, against the primary: for ``windvane info`` and ``/health``."""

    node: str
    #: The newest commit the replica holds (0: none), or None when it cannot be reached.
    head: int | None
    #: Commits of the primary the replica has not applied yet, None when it cannot be reached.
    behind: int | None
    #: Seconds between the primary's newest commit and the replica's, None when it cannot be reached.
    lag_seconds: float | None
    #: Why it cannot be reached, else None.
    error: str | None = None


class ReplicaReads:
    """The replicas of one Store and what each is known to hold. Thread-safe: connections are per thread."""

    #: Seconds a replica that failed is left alone before it is tried again.
    retry_after = 5.0
    #: Snapshots whose newest commit is remembered (a snapshot's is asked of the primary once).
    remembered = 256

    def __init__(
        self,
        nodes: Sequence[Node],
        backend: Backend,
        connect: Callable[[Node], Any],
        primary: Callable[[str, Iterable[Any]], list[Row]],
    ):
        """``connect(node)``: a reader connection to that replica; ``primary``: the primary's read path."""
        self.nodes = tuple(nodes)
        self.backend = backend
        self._connect = connect
        self._primary = primary
        self._local = threading.local()
        self._lock = threading.Lock()
        self._connections: list[Any] = []
        self._reached = dict.fromkeys(self.nodes, 0)
        self._failed_at: dict[Node, float] = {}
        self._needs: OrderedDict[int, int] = OrderedDict()
        self._turn = 0
        #: Statements each replica served, and those the primary served for want of a replica.
        self.served: dict[str, int] = {str(node): 0 for node in self.nodes} | {"primary": 0}

    def query(self, sql: str, params: Iterable[Any], before: bytes) -> list[Row] | None:
        """Rows of ``sql`` from a replica holding every commit before ``before``; None if none does now."""
        need = self._needed(u64(before))
        params = tuple(params)
        for node in self._in_turn():
            if self._reached[node] < need and self._head(node) < need:
                continue
            conn = self._connection(node)
            if conn is None:
                continue
            try:
                cur = conn.cursor()
                cur.execute(sql, params)
                rows: list[Row] = cur.fetchall()
                cur.close()
            except Exception as exc:
                if not self.backend.is_connection_lost(exc):
                    raise
                self._fail(node, exc)
                continue
            self.served[str(node)] += 1
            return rows
        self.served["primary"] += 1
        return None

    def states(self) -> list[ReplicaState]:
        """Each replica's :class:`ReplicaState`, asked now."""
        rows = self._primary("SELECT COALESCE(MAX(tid), 0) FROM trans", ())
        primary = int(rows[0][0])
        states = []
        for node in self.nodes:
            self._failed_at.pop(node, None)  # asked on purpose: a recent failure does not hide it
            head = self._head(node)
            error = self._failure(node)
            if error is not None:
                states.append(ReplicaState(str(node), None, None, None, error))
                continue
            (behind,) = self._primary("SELECT COUNT(*) FROM trans WHERE tid > ?", (head,))[0]
            lag = max(0.0, tid_time(primary) - tid_time(head)) if head and primary else 0.0
            states.append(ReplicaState(str(node), head, int(behind), lag))
        return states

    def close(self) -> None:
        """Close every replica connection."""
        with self._lock:
            conns, self._connections = self._connections, []
        for conn in conns:
            self.backend.close_connection(conn)

    def _needed(self, before: int) -> int:
        """The newest commit before ``before`` on the primary (0: none): what a replica must hold."""
        with self._lock:
            need = self._needs.get(before)
            if need is not None:
                self._needs.move_to_end(before)
                return need
        rows = self._primary("SELECT COALESCE(MAX(tid), 0) FROM trans WHERE tid < ?", (before,))
        need = int(rows[0][0])
        with self._lock:
            self._needs[before] = need
            while len(self._needs) > self.remembered:
                self._needs.popitem(last=False)
        return need

    def _in_turn(self) -> list[Node]:
        """The replicas to try, each read starting with the next one, those that failed lately left out."""
        with self._lock:
            self._turn = (self._turn + 1) % len(self.nodes)
            turn = self._turn
        now = time.monotonic()
        ordered = self.nodes[turn:] + self.nodes[:turn]
        return [n for n in ordered if now - self._failed_at.get(n, -self.retry_after) >= self.retry_after]

    def _head(self, node: Node) -> int:
        """The newest commit ``node`` holds now (0 if none, or if it cannot be reached), remembered."""
        conn = self._connection(node)
        if conn is None:
            return 0
        try:
            cur = conn.cursor()
            cur.execute("SELECT COALESCE(MAX(tid), 0) FROM trans")
            head = int(cur.fetchone()[0])
            cur.close()
        except Exception as exc:  # noqa: BLE001  # whatever the replica answers, the primary serves instead
            self._fail(node, exc)
            return 0
        with self._lock:
            self._reached[node] = max(self._reached[node], head)
        return head

    def _connection(self, node: Node) -> Any | None:
        """This thread's connection to ``node``, made now if needed; None if it cannot be made."""
        conns: dict[Node, Any] = self._local.__dict__.setdefault("conns", {})
        conn = conns.get(node)
        if conn is not None:
            return conn
        try:
            conn = self._connect(node)
        except Exception as exc:  # noqa: BLE001  # a replica out of reach is passed over, whatever the reason
            self._fail(node, exc)
            return None
        conns[node] = conn
        with self._lock:
            self._connections.append(conn)
        return conn

    def _fail(self, node: Node, exc: BaseException) -> None:
        """Leave ``node`` alone for a while after ``exc``, dropping this thread's connection to it."""
        conns: dict[Node, Any] = self._local.__dict__.setdefault("conns", {})
        conn = conns.pop(node, None)
        if conn is not None:
            with self._lock:
                if conn in self._connections:
                    self._connections.remove(conn)
            self.backend.close_connection(conn)
        if node not in self._failed_at:
            log.warning("replica %s does not serve reads (%s); the primary serves them meanwhile", node, exc)
        self._failed_at[node] = time.monotonic()
        self._local.__dict__.setdefault("errors", {})[node] = f"{type(exc).__name__}: {exc}"

    def _failure(self, node: Node) -> str | None:
        """Why ``node`` failed in this thread, if it did since it was last asked."""
        if node not in self._failed_at:
            return None
        errors: dict[Node, str] = self._local.__dict__.get("errors", {})
        return errors.get(node, "unreachable")
