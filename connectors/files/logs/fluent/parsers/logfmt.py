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

#: Lines Arrow cannot split as the decoder reads them: a quote, U+FFFD (refused in a key), a token that starts
#: with ``=`` or holds two (refused). The others are tokens between runs of bytes at or below a space.
HARD = '["\\x{FFFD}]|(^|[\\x00- ])=|=[^\\x00- ]*='
SEPARATORS = "[\\x00- ]+"
_EMPTY, _EQUALS = pa.scalar("", pa.large_string()), pa.scalar("=", pa.large_string())


class LogfmtParser:
    """``parse(lines, options)``: each line's keys and values."""

    def __init__(self, config: ParseConfig):
        self.records = RecordBuilder(config)

    def parse(self, lines: Lines, options: LogOptions) -> Rows:
        """Rows of the lines the decoder reads; the others are faults."""
        text, count = lines.text, len(lines)
        faults: dict[int, str] = {}
        hard = pc.match_substring_regex(text, HARD).to_numpy(zero_copy_only=False)
        rows, keys, values = _arrow_pairs(text.filter(pa.array(~hard)))
        rows = np.flatnonzero(~hard)[rows]
        if hard.any():
            more_rows, more_keys, more_values = _line_pairs(text, np.flatnonzero(hard), faults)
            rows = np.concatenate([rows, more_rows])
            keys = pa.concat_arrays([keys, more_keys])
            values = pa.concat_arrays([values, more_values])
        return self.records.to_rows(pair_columns(rows, keys, values, count), count, faults, options)


def _arrow_pairs(text: pa.Array) -> tuple[np.ndarray, pa.Array, pa.Array]:
    """``(line, key, value)`` of every token of lines without quotes, split by Arrow (``key`` alone: ``""``)."""
    tokens = pc.split_pattern_regex(text, SEPARATORS)
    rows = pc.list_parent_indices(tokens).to_numpy(zero_copy_only=False)
    flat = tokens.flatten()
    kept = pc.not_equal(flat, "")
    flat, rows = flat.filter(kept), rows[kept.to_numpy(zero_copy_only=False)]
    flat = pc.if_else(pc.match_substring(flat, "="), flat, pc.binary_join_element_wise(flat, _EMPTY, _EQUALS))
    pairs = pc.split_pattern(flat, "=", max_splits=1)
    return rows.astype(np.int64), pc.list_element(pairs, 0), pc.list_element(pairs, 1)


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
