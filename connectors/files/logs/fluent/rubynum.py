"""Ruby's String#to_i and #to_f over a column of texts (fluentd's ``types`` integer/float, ``time_type unixtime``)."""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_TO_I = r"^\s*(?P<n>[+-]?\d+(?:_\d+)*)"
_TO_F = r"^\s*(?P<n>[+-]?(?:\d+(?:_\d+)*)?(?:\.\d+(?:_\d+)*)?(?:[eE][+-]?\d+)?)"


def leading(texts: pa.Array, pattern: str) -> pa.Array:
    """Group ``n`` of ``pattern`` in each text; null where it does not match."""
    found = pc.extract_regex(pc.fill_null(texts, ""), pattern)
    return pc.if_else(found.is_valid(), found.field("n"), pa.scalar(None, pa.large_string()))


def ruby_to_i(texts: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """Ruby's ``String#to_i`` of each text (leading blanks, a sign, digits with single ``_``; else 0), and a mask of
    values past int64 (given 0)."""
    digits = pc.replace_substring_regex(pc.replace_substring(leading(texts, _TO_I), "_", ""), r"^\+", "")
    digits = pc.fill_null(digits, "0")
    wide = pc.greater(pc.utf8_length(pc.utf8_ltrim(digits, "+-")), 18).to_numpy(zero_copy_only=False)
    values = [int(v) if w else 0 for v, w in zip(digits.to_pylist(), wide)] if wide.any() else None
    out = pc.cast(pc.if_else(pa.array(wide), "0", digits), pa.int64()).to_numpy(zero_copy_only=False).copy()
    over = np.zeros(len(out), dtype=bool)
    if values is not None:
        for i in np.flatnonzero(wide).tolist():
            if -(2**63) <= values[i] < 2**63:
                out[i] = values[i]
            else:
                over[i] = True
    return out, over


def ruby_integers(values: pa.Array, *, zero_is_null: bool = False) -> pa.Array:
    """Ruby's ``to_i`` of each value as int64: null where the value is null or past int64 (fluentd keeps a bignum;
    a stream column cannot), and with ``zero_is_null`` where it is 0."""
    numbers, over = ruby_to_i(values)
    null = over | ~values.is_valid().to_numpy(zero_copy_only=False)
    if zero_is_null:
        null |= numbers == 0
    return pa.array(numbers, pa.int64(), mask=null)


def ruby_to_f(texts: pa.Array) -> np.ndarray:
    """Ruby's ``String#to_f`` of each text (the longest leading decimal number; else 0.0)."""
    number = pc.replace_substring(pc.fill_null(leading(texts, _TO_F), ""), "_", "")
    values = []
    for text in number.to_pylist():
        while text and text[-1] in "eE+-.":  # "1e", "1." read as far as they are a number
            text = text[:-1]
        try:
            values.append(float(text) if text and text not in "+-" else 0.0)
        except ValueError:
            found = re.match(r"[+-]?\d*\.?\d*", text)
            assert found is not None  # the pattern matches the empty string
            values.append(float(found.group() or 0))
    return np.array(values, dtype=np.float64)
