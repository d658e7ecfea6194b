"""Text columns from what the delimited parsers (csv, tsv, ltsv, logfmt) find in each line.

:func:`assemble` puts the values Arrow splits and those split line by line
back in line order; :func:`nth_columns` takes the ``n``-th item of every
line's list of values (an Arrow list array, as ``split_pattern`` makes it),
:func:`pair_columns` the values of ``(line, key, value)`` triples; both give
null where a line has no such value. :func:`nil_time_faults` rejects the
lines whose time field is there but nil, as fluentd's time parser refuses it.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..lines import add_faults
from .config import ParseConfig


def nth_columns(lists: pa.ListArray, width: int) -> tuple[list[pa.Array], np.ndarray]:
    """The first ``width`` items of each list as ``width`` text columns (null past a list's end or for a null
    list), and each list's length (0 for a null one)."""
    lengths = pc.fill_null(pc.list_value_length(lists), 0).to_numpy(zero_copy_only=False).astype(np.int64)
    starts, flat = _starts(lists), pc.cast(lists.flatten(), pa.large_string())
    return [_items(flat, starts + n, lengths > n) for n in range(width)], lengths


def last_column(lists: pa.ListArray, lengths: np.ndarray, where: np.ndarray) -> pa.Array:
    """The last item of each list where the boolean mask ``where`` is true (null elsewhere)."""
    return _items(pc.cast(lists.flatten(), pa.large_string()), _starts(lists) + lengths - 1, where)


def _starts(lists: pa.ListArray) -> np.ndarray:
    """Where each list's items start in its flattened items."""
    starts: np.ndarray = lists.offsets.to_numpy()[:-1].astype(np.int64) - lists.offsets[0].as_py()
    return starts


def _items(flat: pa.Array, at: np.ndarray, where: np.ndarray) -> pa.Array:
    """``flat``'s item at ``at`` where ``where`` is true, null elsewhere."""
    if not where.any():
        return pa.nulls(len(at), pa.large_string())
    return flat.take(pa.array(np.where(where, at, 0), pa.int64(), mask=~where))


def empty_as_nil(lists: pa.ListArray) -> pa.ListArray:
    """``lists`` with each empty text item null (Ruby's CSV reads an empty unquoted value as nil)."""
    flat = lists.values.slice(lists.offsets[0].as_py(), len(lists.flatten()))
    flat = pc.if_else(pc.equal(flat, ""), pa.scalar(None, flat.type), flat)
    offsets = pc.subtract(lists.offsets, lists.offsets[0])
    return pa.ListArray.from_arrays(offsets, flat, mask=lists.is_null())


def assemble(
    text: pa.Array,
    simple: np.ndarray,
    arrow_split: Callable[[pa.Array], pa.ListArray],
    lines_split: Callable[[list[int], list[str]], list[list[str | None] | None]],
) -> pa.ListArray:
    """Each line's values, in line order: ``arrow_split`` of the lines where ``simple`` is true (all at once),
    ``lines_split(indexes, lines)`` of the others (None for a line: no values, a null list)."""
    if simple.all():
        return arrow_split(text)
    hard = np.flatnonzero(~simple)
    found = lines_split(hard.tolist(), text.take(pa.array(hard)).to_pylist())
    easy = arrow_split(text.filter(pa.array(simple)))
    order = np.empty(len(text), dtype=np.int64)
    order[np.flatnonzero(simple)] = np.arange(len(easy))
    order[hard] = np.arange(len(easy), len(text))
    return pa.concat_arrays([easy, pa.array(found, easy.type)]).take(pa.array(order))


def pair_columns(rows: np.ndarray, keys: pa.Array, values: pa.Array, count: int) -> dict[str, pa.Array]:
    """One text column per key from ``(row, key, value)`` triples (a row's triples in line order): a key repeated in
    a row keeps its last value, as a Ruby Hash or Go map; null where a row lacks the key. Keys in first-seen order."""
    if not len(keys):
        return {}
    coded = pc.dictionary_encode(keys)
    names = coded.dictionary.to_pylist()
    ids = coded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    # the last triple of each (row, key): the first in reverse order
    pair = rows.astype(np.int64) * len(names) + ids
    _, first_from_end = np.unique(pair[::-1], return_index=True)
    last = np.sort(len(pair) - 1 - first_from_end)
    values = pc.cast(values, pa.large_string())
    columns = {}
    for n, name in enumerate(names):
        chosen = last[ids[last] == n]
        index = np.zeros(count, dtype=np.int64)
        where = np.zeros(count, dtype=bool)
        index[rows[chosen]] = chosen
        where[rows[chosen]] = True
        columns[name] = values.take(pa.array(index, mask=~where))
    return columns


def nil_time_reason(config: ParseConfig) -> str:
    """What fluentd's time parser says of a time field that is there but nil."""
    if config.time_type in ("unixtime", "float"):
        return "value must be a string or a number: (NilClass)"
    return "value must be string: "


def nil_time_faults(config: ParseConfig, nil: np.ndarray, faults: dict[int, str]) -> None:
    """Reject the lines of boolean mask ``nil``, whose time field is there without a value, with fluentd's reason."""
    add_faults(faults, nil, nil_time_reason(config))
