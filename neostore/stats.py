"""What a store holds: row counts, object count, value sizes and how well they deduplicate."""

from __future__ import annotations

from collections.abc import Sequence

from .names import name_range
from .records import ValueUsage
from .sql import Query
from .tids import Tid, p64


def value_size(query: Query) -> int:
    """Bytes of values held, as stored (after compression and dedup)."""
    (row,) = query("SELECT COALESCE(SUM(LENGTH(value)), 0) FROM data", ())
    (big,) = query("SELECT COALESCE(SUM(LENGTH(value)), 0) FROM bigdata", ())
    return int(row[0]) + int(big[0])


def value_usage(query: Query, prefix: bytes | None, *, latest: bool) -> ValueUsage:
    """What the values of committed revisions take; see :meth:`Store.value_usage`."""
    joins, clauses, params = "", [], []
    if prefix is not None:
        where, name_params = name_range(prefix)
        joins, clauses, params = " JOIN name n ON n.oid = o.oid", [where], list(name_params)
    if latest:
        clauses.append("o.tid = (SELECT MAX(m.tid) FROM obj m WHERE m.oid = o.oid)")
    where_sql = f" WHERE {' AND '.join(clauses)}" if clauses else ""
    (refs,) = query(
        f"SELECT COUNT(*), COALESCE(SUM(d.size), 0) FROM obj o JOIN data d ON d.id = o.data_id{joins}{where_sql}",
        params,
    )
    # A big value's row holds no value: its bytes are its bigdata rows'.
    (distinct,) = query(
        "SELECT COUNT(*), COALESCE(SUM(d.size), 0), COALESCE(SUM(COALESCE(LENGTH(d.value), "
        "(SELECT SUM(LENGTH(b.value)) FROM bigdata b WHERE b.data_id = d.id))), 0) FROM data d "
        f"WHERE d.id IN (SELECT o.data_id FROM obj o{joins}{where_sql})",
        params,
    )
    return ValueUsage(int(refs[0]), int(refs[1]), int(distinct[0]), int(distinct[1]), int(distinct[2]))


def object_count(query: Query) -> int:
    """How many objects exist now (their latest revision is not a deletion)."""
    (row,) = query(
        "SELECT COUNT(*) FROM obj o WHERE o.data_id IS NOT NULL "
        "AND o.tid = (SELECT MAX(n.tid) FROM obj n WHERE n.oid = o.oid)",
        (),
    )
    return int(row[0])


_COUNTED: Sequence[str] = ("trans", "obj", "data", "bigdata", "ttrans", "tobj")


def counts(query: Query) -> dict[str, int]:
    """Row counts of the main tables."""
    out = {}
    for table in _COUNTED:
        (row,) = query(f"SELECT COUNT(*) FROM {table}", ())
        out[table] = int(row[0])
    return out


def pack_tid(query: Query) -> bytes:
    """The tid of the latest completed pack (zero bytes if never packed)."""
    (row,) = query("SELECT value FROM config WHERE name = 'pack_tid'", ())
    return Tid(p64(int(row[0])))
