"""Typed field values (what the json and msgpack parsers decode) as fluentd holds them and as windvane stores them.

A parser whose records hold values that are not text gives
:class:`..records.RecordBuilder` a field as a Python list, one value per
line: None, bool, int, float, str, or a list/dict of those (the time key's
list holds :data:`MISSING` where a line lacks the key: fluentd tells a
missing time from a null one). Here:

- :func:`ruby_to_s` is Ruby's ``to_s`` of a value (what fluentd's ``types``
  converters and its time parsers read): ``1.0e+20`` for a float Ruby writes
  with an exponent, ``{"k"=>1}`` for a hash;
- :func:`typed_column` stores one field's values as one Arrow column by the
  kinds it holds in the block: only booleans ``bool``; only integers
  ``int64`` (text, their digits, if one is past int64); numbers (integers and
  floats) ``float64``; only strings text; anything else text: strings as they
  are, anything else as its JSON text (``{"k":[1,"x"]}``, ``true``, ``2.5``).
  fluentd keeps each value's own kind (and a list or a hash as it is); a
  stream column has one type. The kinds are those of the block, so a field
  may be ``int64`` in one block and text in the next: ``types`` (``n:float``,
  ``v:string``) fixes a field's type for every block.
"""

from __future__ import annotations

import json
import math
from typing import Any

import msgspec
import pyarrow as pa
import pyarrow.compute as pc

INT64 = (-(1 << 63), (1 << 63) - 1)
_encode = msgspec.json.Encoder().encode  # compact, UTF-8; as deep as msgspec decodes


class _Missing:
    """A line lacks the field (as opposed to holding null)."""

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


def ruby_float_to_s(value: float) -> str:
    """Ruby's ``Float#to_s``: Python's shortest repr, with ``.0`` in the mantissa (``1.0e+20``), ``Infinity``."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    text = repr(value)
    mantissa, e, exponent = text.partition("e")
    if e and "." not in mantissa:
        return f"{mantissa}.0e{exponent}"
    return text


def ruby_to_s(value: Any) -> str:
    """Ruby's ``to_s`` of a decoded value (nil is ``""``; an array or a hash is its ``inspect``)."""
    if isinstance(value, str):
        return value
    if value is None or value is MISSING:
        return ""
    if isinstance(value, list | dict):
        return ruby_inspect(value)
    return _scalar_to_s(value)


def _scalar_to_s(value: Any) -> str:
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, float):
        return ruby_float_to_s(value)
    return str(value)


def ruby_to_s_column(values: list[Any]) -> pa.Array:
    """:func:`ruby_to_s` of each value (None stays null) as a text column; a column of one kind in one pass."""
    kinds = set(map(type, values))
    if kinds <= {str, type(None)}:
        return pa.array(values, pa.large_string())
    if type(None) in kinds or not kinds <= {int, float}:
        return pa.array([None if v is None else ruby_to_s(v) for v in values], pa.large_string())
    texts = pa.array(list(map(repr, values)), pa.large_string())  # Python's shortest repr is Ruby's, but for
    odd = pc.match_substring_regex(texts, "[en]").to_numpy(zero_copy_only=False)  # 1e+20, nan, inf
    if odd.any():
        texts = pa.array([ruby_float_to_s(values[i]) if odd[i] else t for i, t in enumerate(texts.to_pylist())])
    return texts


def ruby_inspect(value: Any) -> str:
    """Ruby 3.1's ``inspect``: ``{"k"=>[1, nil, "a"]}``."""
    if value is None:
        return "nil"
    if isinstance(value, str):
        text = json.dumps(value, ensure_ascii=False)
        return text.replace("#{", "\\#{").replace("#$", "\\#$").replace("#@", "\\#@")
    if isinstance(value, list):
        return "[" + ", ".join(ruby_inspect(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{ruby_inspect(k)}=>{ruby_inspect(v)}" for k, v in value.items()) + "}"
    return _scalar_to_s(value)


def json_text(value: Any) -> str:
    """A value as the text of a mixed column: a string as it is, anything else as compact JSON."""
    if isinstance(value, str):
        return value
    return _encode(value).decode()


def typed_column(values: list[Any]) -> pa.Array:
    """One field's values (None: null) as one Arrow column, by the kinds they hold (see the module)."""
    kinds = set(map(type, values))
    kinds.discard(type(None))
    if kinds == {bool}:
        return pa.array(values, pa.bool_())
    if kinds == {int}:
        try:
            return pa.array(values, pa.int64())
        except (OverflowError, pa.ArrowInvalid):  # past int64: the digits, exact
            return pa.array([None if v is None else str(v) for v in values], pa.large_string())
    if kinds and kinds <= {int, float}:
        return pa.array([None if v is None else float(v) for v in values], pa.float64())
    if kinds <= {str}:
        return pa.array(values, pa.large_string())
    return pa.array([None if v is None else json_text(v) for v in values], pa.large_string())
