"""The ``logfmt`` parser (``key=value key2="quoted value" flag``): fluentd users add it as a plugin.

The plugins (fluent-plugin-parser-logfmt and its kin) are not part of
fluentd; this parser reads a line as the reference decoder, Go's
``go-logfmt``, does (see :mod:`..logfmt`, which the test suite checks against
it): each key's value as text (a key without value, or ``key=``, is
``""``), a repeated key keeping its last value, a line the decoder refuses
rejected with its message. Values are text as in every fluentd text parser
(``types`` makes numbers; the Ruby plugin guesses them). The time key
defaults to ``time``, as the plugin's; time, null values and types as
:mod:`..records` says.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...lines import Lines, Rows
from ...options import LogOptions
from ..config import ParseConfig
from ..fieldcols import pair_columns
from ..logfmt import LogfmtError, logfmt_pairs
from ..records import RecordBuilder

#: Lines Arrow splits as the decoder reads them: pairs ``key``, ``key=value`` (then white space or the end) or
#: ``key="value"`` with no backslash; keys without ``"`` or U+FFFD. Other lines are decoded one by one.
_SEP = "[\\x00- ]"
_KEY = '[^\\x00- ="\\x{FFFD}]+'
PLAIN = f'^{_SEP}*(?:{_KEY}="[^"\\\\]*"{_SEP}*|{_KEY}(?:=[^\\x00- ="]*)?(?:{_SEP}+|$))*$'
SEPARATORS = f"{_SEP}+"
_EMPTY, _EQUALS = pa.scalar("", pa.large_string()), pa.scalar("=", pa.large_string())


class LogfmtParser:
    """``parse(lines, options)``: each line's keys and values."""

    def __init__(self, config: ParseConfig):
        self.records = RecordBuilder(config)

    def parse(self, lines: Lines, options: LogOptions) -> Rows:
        """Rows of the lines the decoder reads; the others are faults."""
        text, count = lines.text, len(lines)
        faults: dict[int, str] = {}
        plain = pc.match_substring_regex(text, PLAIN).to_numpy(zero_copy_only=False)
        rows, keys, values = _arrow_pairs(text.filter(pa.array(plain)))
        rows = np.flatnonzero(plain)[rows]
        if not plain.all():
            more_rows, more_keys, more_values = _line_pairs(text, np.flatnonzero(~plain), faults)
            rows = np.concatenate([rows, more_rows])
            keys = pa.concat_arrays([keys, more_keys])
            values = pa.concat_arrays([values, more_values])
        return self.records.to_rows(pair_columns(rows, keys, values, count), count, faults, options)


def _arrow_pairs(text: pa.Array) -> tuple[np.ndarray, pa.Array, pa.Array]:
    """``(line, key, value)`` of every pair of :data:`PLAIN` lines, split by Arrow (``key`` alone: ``""``).

    Split at the quotes, a line is text outside quotes and quoted values in turn; the text before a quoted
    value ends with its ``key=``. The outside text splits into tokens at white space.
    """
    parts = pc.split_pattern(text, '"')
    part_rows = pc.list_parent_indices(parts).to_numpy(zero_copy_only=False)
    starts = parts.offsets.to_numpy()[:-1] - parts.offsets[0].as_py()
    place = np.arange(len(part_rows)) - starts[part_rows]
    sizes = pc.list_value_length(parts).to_numpy(zero_copy_only=False)[part_rows]
    flat = parts.flatten()
    outside = np.flatnonzero(place % 2 == 0)
    tokens = pc.split_pattern_regex(flat.take(pa.array(outside)), SEPARATORS)
    token_part = outside[pc.list_parent_indices(tokens).to_numpy(zero_copy_only=False)]
    token_text = tokens.flatten()
    kept = np.flatnonzero(pc.not_equal(token_text, "").to_numpy(zero_copy_only=False))
    token_part, token_text = token_part[kept], token_text.take(pa.array(kept))
    # the last token of outside text followed by a quoted value is that value's "key="
    last = np.append(token_part[1:] != token_part[:-1], True) if len(kept) else np.zeros(0, dtype=bool)
    keyed = last & (place[token_part] + 1 < sizes[token_part])
    plain = pc.if_else(
        pc.match_substring(token_text, "="), token_text, pc.binary_join_element_wise(token_text, _EMPTY, _EQUALS)
    )
    pairs = pc.split_pattern(plain, "=", max_splits=1)
    quoted = flat.take(pa.array(np.where(keyed, token_part + 1, 0)))
    values = pc.if_else(pa.array(keyed), quoted, pc.list_element(pairs, 1))
    return part_rows[token_part].astype(np.int64), pc.list_element(pairs, 0), values


def _line_pairs(text: pa.Array, hard: np.ndarray, faults: dict[int, str]) -> tuple[np.ndarray, pa.Array, pa.Array]:
    """The same for the lines at ``hard``, decoded one by one (a line the decoder refuses is a fault)."""
    rows: list[int] = []
    keys: list[str] = []
    values: list[str] = []
    data = text.take(pa.array(hard)).cast(pa.large_binary()).to_pylist()
    for i, line in zip(hard.tolist(), data):
        try:
            pairs = logfmt_pairs(line)
        except LogfmtError as exc:
            faults[i] = str(exc)
            continue
        rows += [i] * len(pairs)
        keys += [key for key, _ in pairs]
        values += [value for _, value in pairs]
    return np.array(rows, dtype=np.int64), pa.array(keys, pa.large_string()), pa.array(values, pa.large_string())
