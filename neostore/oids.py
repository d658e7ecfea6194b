"""Handing out oids: blocks taken from the ``oidgen`` row, safe across processes."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

from .backends import Backend
from .pool import ConnectionPool


class OidAllocator:
    """Fresh oids for one Store. Thread-safe.

    Oids are taken from ``oidgen`` in blocks committed on their own, so no
    two processes ever get the same one. :attr:`horizon`: oids below it were
    handed out by a committed ``oidgen`` bump.
    """

    def __init__(self, pool: ConnectionPool, backend: Backend):
        self.pool = pool
        self.backend = backend
        self.horizon = 0
        self._lock = threading.Lock()
        self._block: list[int] = []

    def new_oids(self, count: int, *, writer: Any = None) -> list[int]:
        """``count`` fresh oids as integers; see :meth:`Store.new_oids` for ``writer``."""
        with self._lock:
            if len(self._block) < count:
                active = writer if writer is not None else self.pool.lock_holder()
                if active is not None and self.backend.single_writer:
                    # One writer (SQLite): this thread's open write transaction
                    # would block a second connection, so allocate inside it. If it
                    # aborts, the bump is undone and oidgen hands the same oids out
                    # again: so take exactly what is needed, and keep no block.
                    need = count - len(self._block)
                    first = bump_oidgen(active, need)
                    self._block.extend(range(first, first + need))
            while len(self._block) < count:
                want = max(count - len(self._block), 64)
                first = self._allocate(want)
                self._block.extend(range(first, first + want))
            taken, self._block = self._block[:count], self._block[count:]
            return taken

    def _allocate(self, count: int) -> int:
        """``count`` oids in a commit of their own."""
        first = self.pool.run_write(lambda conn: bump_oidgen(conn, count))
        # Committed on its own: oidgen stays at least here (it never goes back).
        self.horizon = max(self.horizon, first + count)
        return first

    def advance(self, cur: Any, written: Iterable[int]) -> None:
        """Move ``oidgen`` past the oids a commit on ``cur`` writes, unless it is past them already.

        Oids chosen by the caller (restore, imports) must never be handed out again.
        """
        top = max(written, default=None)
        if top is None or top + 1 <= self.horizon:
            return  # nothing written, or oidgen is past them already: they were handed out by it
        cur.execute(f"UPDATE oidgen SET next_oid = {self.backend.greatest}(next_oid, ?) WHERE id = 0", (top + 1,))


def bump_oidgen(conn: Any, count: int) -> int:
    """Take ``count`` oids from ``oidgen`` in ``conn``'s transaction; the first of them."""
    cur = conn.cursor()
    cur.execute("UPDATE oidgen SET next_oid = next_oid + ? WHERE id = 0", (count,))
    cur.execute("SELECT next_oid FROM oidgen WHERE id = 0")
    (after,) = cur.fetchone()
    cur.close()
    return int(after) - count
