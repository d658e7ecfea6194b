"""SQL pieces the Store, its transactions and pack share."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from .backends import Backend

T = TypeVar("T")

#: One row a statement returned.
Row = tuple[Any, ...]


class Query(Protocol):
    """``query(sql, params) -> rows``: a read-only statement on the store's latest committed state; with
    ``before``, a statement that reads only commits made before that tid (a replica may serve it)."""

    def __call__(self, sql: str, params: Iterable[Any] = (), /, *, before: bytes | None = None) -> list[Row]: ...


def chunked(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    """``items`` in consecutive slices of at most ``size``."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


def delete_unreferenced_data(
    cur: Any, data_ids: Iterable[int], backend: Backend, removed: Counter[str] | None = None
) -> int:
    """Delete the given data rows that no revision (finished or voted) references; return how many.

    ``removed``, if given, counts the rows deleted per table (split values' chunks too).
    """
    deleted = 0
    for batch in chunked(sorted(set(data_ids)), backend.max_params // 2):
        marks = backend.in_list(len(batch))
        cur.execute(
            f"SELECT id FROM data WHERE id IN {marks} "
            "AND NOT EXISTS (SELECT 1 FROM obj WHERE obj.data_id = data.id) "
            "AND NOT EXISTS (SELECT 1 FROM tobj WHERE tobj.data_id = data.id)",
            batch,
        )
        dead = [row[0] for row in cur.fetchall()]
        if dead:
            marks = backend.in_list(len(dead))
            cur.execute(f"DELETE FROM bigdata WHERE data_id IN {marks}", dead)
            if removed is not None:
                removed["bigdata"] += max(cur.rowcount, 0)
                removed["data"] += len(dead)
            cur.execute(f"DELETE FROM data WHERE id IN {marks}", dead)
            deleted += len(dead)
    return deleted


#: The columns of a value row, as :meth:`ValueReader.row_value` takes them (``o``: obj, ``d``: data).
VALUE_COLUMNS = "o.tid, o.data_id, d.hash, d.compression, d.size, d.chunks, d.value"
