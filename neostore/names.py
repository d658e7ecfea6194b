"""Names bound to oids: a key space beside the oid space.

A name (bytes, at most 767) is bound to one oid the first time anyone asks
for it, in its own small commit, and stays bound for ever: the binding needs
no history, because whether the named object exists at some tid is what
``obj`` already records (a deletion is a revision without data). Binding a
name that nobody ever writes is therefore invisible and harmless, and two
processes binding the same new name at once both get the same oid.

Listing is a range scan of the ``name`` primary key, so names sort bytewise
and a prefix is a contiguous range.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from .errors import InvalidNameError
from .pool import ConnectionPool
from .records import TransactionInfo
from .sql import Query, chunked
from .tids import p64, u64

#: ``read(sql, params) -> rows``: a read-only statement on the store's latest committed state.
Read = Query

# MyRocks keys are limited to 767 bytes; one limit for every backend.
MAX_NAME = 767
# Prefix ranges listed by one query: SQLite takes at most 500 SELECTs in a compound one.
_RANGES_PER_QUERY = 250


@dataclass(frozen=True)
class NamedRevision:
    """The revision of a named object a snapshot sees."""

    name: bytes
    oid: bytes
    serial: bytes
    size: int


def prefix_end(prefix: bytes) -> bytes | None:
    """The smallest name greater than every name starting with ``prefix`` (None: no bound)."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])


def name_range(prefix: bytes) -> tuple[str, list[bytes]]:
    """The WHERE clause on ``name n`` matching every name under ``prefix``, and its parameters."""
    end = prefix_end(prefix)
    if end is None:
        return "n.name >= ?", [prefix]
    return "n.name >= ? AND n.name < ?", [prefix, end]


class NameIndex:
    """The bindings of one Store, with a cache of those known committed.

    What it needs of its Store: ``pool``, its connections (writers to bind
    names on, and the commit-lock holder of a
    :attr:`~neostore.backends.Backend.single_writer` engine, which must
    bind them itself); ``read``, the Store's read path; ``new_oids(count,
    writer=conn)``, fresh oids as integers, allocated on ``writer`` if given.
    """

    def __init__(self, pool: ConnectionPool, *, read: Read, new_oids: Callable[..., list[int]]):
        self._pool = pool
        self._backend = pool.backend
        self._read = read
        self._new_oids = new_oids
        self._known: dict[bytes, bytes] = {}
        # Bindings made on a write connection (SQLite) that it has not committed yet, by id(connection).
        self._unsettled: dict[int, dict[bytes, bytes]] = {}
        self._lock = threading.Lock()

    def oids_for(self, names: Iterable[bytes], *, create: bool, writer: Any = None) -> dict[bytes, bytes]:
        """The oid bound to each name; unbound names are bound first if ``create``.

        ``writer``: the write connection of the caller's transaction, if any.
        """
        wanted = list(dict.fromkeys(names))
        for name in wanted:
            if len(name) > MAX_NAME:
                raise InvalidNameError(f"name {name[:40]!r}... is {len(name)} bytes; the limit is {MAX_NAME}")
        with self._lock:
            found = {n: self._known[n] for n in wanted if n in self._known}
        missing = [n for n in wanted if n not in found]
        if not missing:
            return found
        active = writer if writer is not None else self._pool.lock_holder()
        if active is not None and self._backend.single_writer:
            # The one writer (SQLite's) is this thread's open transaction: bindings
            # it makes are visible only through it, and vanish if it rolls
            # back, so they are cached only once it commits (see settled);
            # the others it reads were committed before: cached at once.
            with self._lock:
                unsettled = self._unsettled.setdefault(id(active), {})
                found.update((n, unsettled[n]) for n in missing if n in unsettled)
            missing = [n for n in missing if n not in found]
            if missing:
                found.update(self._remember(self._select(active, missing)))
            missing = [n for n in missing if n not in found]
            if missing and create:
                oids = [p64(o) for o in self._new_oids(len(missing), writer=active)]
                self._insert(active, list(zip(missing, oids)))
                found.update(zip(missing, oids))
                with self._lock:
                    unsettled.update(zip(missing, oids))
            return found
        found.update(self._remember(self._select(None, missing)))
        missing = [n for n in wanted if n not in found]
        if missing and create:
            oids = [p64(o) for o in self._new_oids(len(missing))]
            bindings = list(zip(missing, oids))
            self._pool.run_write(lambda conn: self._insert(conn, bindings))
            # Another process may have bound some of them first: read back.
            found.update(self._remember(self._select(None, missing)))
        return found

    def settled(self, writer: Any, *, committed: bool) -> None:
        """``writer`` committed (or rolled back) the bindings it made: cache (or forget) them."""
        with self._lock:
            bindings = self._unsettled.pop(id(writer), None)
            if bindings and committed:
                self._known.update(bindings)

    def _remember(self, bindings: dict[bytes, bytes]) -> dict[bytes, bytes]:
        with self._lock:
            self._known.update(bindings)
        return bindings

    def _select(self, conn: Any, names: list[bytes]) -> dict[bytes, bytes]:
        """Bindings of ``names``, read on ``conn`` (None: the store's reader)."""
        out: dict[bytes, bytes] = {}
        for batch in chunked(names, self._backend.max_params):
            sql = f"SELECT name, oid FROM name WHERE name IN {self._backend.in_list(len(batch))}"
            if conn is None:
                rows = self._read(sql, batch)
            else:
                cur = conn.cursor()
                cur.execute(sql, batch)
                rows = cur.fetchall()
                cur.close()
            out.update((bytes(name), p64(oid)) for name, oid in rows)
        return out

    def _insert(self, conn: Any, bindings: list[tuple[bytes, bytes]]) -> None:
        cur = conn.cursor()
        cur.executemany(
            f"{self._backend.insert_ignore} INTO name (name, oid) VALUES (?, ?)",
            [(name, u64(oid)) for name, oid in bindings],
        )
        cur.close()

    def named(self, prefix: bytes, *, before: bytes | None, exact: bool = False) -> list[NamedRevision]:
        """Named objects under ``prefix`` (named ``prefix`` if ``exact``) that exist in the snapshot."""
        return self._existing([("n.name = ?", [prefix]) if exact else name_range(prefix)], before)

    def list_under(self, prefixes: Iterable[bytes], *, before: bytes | None) -> list[NamedRevision]:
        """Named objects under any of ``prefixes`` that exist in the snapshot, by name: :meth:`named` for many
        prefixes in a few queries (creating thousands of streams checks each path is free)."""
        ranges = [name_range(p) for p in dict.fromkeys(prefixes)]
        if len(ranges) == 1:
            return self._existing(ranges, before)  # sorted, and no name twice
        found: dict[bytes, NamedRevision] = {}
        for start in range(0, len(ranges), _RANGES_PER_QUERY):
            found.update((r.name, r) for r in self._existing(ranges[start : start + _RANGES_PER_QUERY], before))
        return [found[n] for n in sorted(found)]

    def _existing(self, ranges: list[tuple[str, list[bytes]]], before: bytes | None) -> list[NamedRevision]:
        """Named objects existing in the snapshot whose name matches one of ``ranges`` (WHERE clauses)."""
        bound = "" if before is None else " AND m.tid < ?"
        # One SELECT a range, UNION ALL: each is a seek on the name key (an OR of ranges makes SQLite
        # scan every name, its OR optimisation needing rowid tables).
        select = (
            "SELECT n.name, n.oid, o.tid, d.size FROM name n "
            f"JOIN obj o ON o.oid = n.oid AND o.tid = (SELECT MAX(m.tid) FROM obj m WHERE m.oid = n.oid{bound}) "
            "JOIN data d ON d.id = o.data_id WHERE "
        )
        params: list[Any] = []
        for _, ps in ranges:
            params += [u64(before), *ps] if before is not None else ps
        rows = self._read(
            " UNION ALL ".join(select + where for where, _ in ranges) + " ORDER BY 1", params, before=before
        )
        return [NamedRevision(bytes(r[0]), p64(r[1]), p64(r[2]), int(r[3])) for r in rows]

    def ending(self, suffix: bytes) -> dict[bytes, bytes]:
        """Every bound name ending with ``suffix``, with its oid (a scan of all names: for maintenance)."""
        if not suffix:
            raise InvalidNameError("ending() needs a non-empty suffix")
        rows = self._read("SELECT name, oid FROM name WHERE SUBSTR(name, ?) = ?", (-len(suffix), suffix))
        return {bytes(r[0]): p64(r[1]) for r in rows}

    def history(self, prefix: bytes) -> list[TransactionInfo]:
        """Committed transactions that wrote an object named under ``prefix``, oldest first."""
        where, params = name_range(prefix)
        rows = self._read(
            "SELECT t.tid, t.user, t.description, t.ext, t.packed FROM trans t WHERE t.tid IN "
            f"(SELECT o.tid FROM name n JOIN obj o ON o.oid = n.oid WHERE {where}) ORDER BY t.tid",
            params,
        )
        return [TransactionInfo.from_row(row) for row in rows]
