"""fluentd's ``json`` parser: each line one JSON object, its members the record's fields.

The time key defaults to ``time``, read as ``time_type float`` unless a
``time_format`` is given (then ``string``), as fluentd's json parser does: a
number or a string there (``float``/``unixtime``), a string only (``string``),
anything else rejects the line (``value must be ...``). Values keep their kind
(see :mod:`..values` for how a column stores them); duplicate keys: the last
value wins.

``json_parser`` says which Ruby library reads the line; they differ in what
they accept:

- ``yajl``: ``//`` and ``/* */`` comments; a ``\\ud800`` without its pair
  becomes ``?``; no ``NaN``/``Infinity``; a line that ends early is what
  yajl-ruby built so far (:mod:`..yajl`);
- ``oj`` (the default): fluentd falls back to yajl when the Oj gem is missing,
  as it is with the fluentd this is checked against (Debian's): read as yajl
  (a fluentd with Oj may differ on lines that are not plain JSON);
- ``json`` (Ruby's ``JSON.load``): ``/* */`` comments only, ``NaN``,
  ``Infinity`` and ``-Infinity``, an unpaired surrogate is an error; an object
  with a ``json_class`` member is made into that class by ``JSON.load``, not a
  record: windvane rejects it.

A line that is not a JSON object is rejected: not JSON, empty, ``null`` or
``false`` as ``pattern not matched``; an array, a number, a string or ``true``
with the error fluentd's in_tail gives it (fluentd hands such a value on as a
record, which fails where in_tail adds to it).

Lines are decoded one at a time with msgspec (in one pass while every line is
plain JSON), not as a block with ``pyarrow.json``: that one infers
timestamps from strings, fails a whole block on one bad line or one change
of kind, and has no bignums; msgspec keeps duplicate keys as fluentd does
(the last wins) and reads exactly what JSON allows, the rest going to yajl's
or Ruby's rules above.
"""

from __future__ import annotations

import json
import re
from itertools import chain, repeat
from typing import Any

import msgspec

from ...lines import Lines, Rows
from ...options import LogOptions
from ..config import ParseConfig, ParseConfigError
from ..records import PATTERN_NOT_MATCHED, RecordBuilder
from ..values import MISSING, ruby_to_s
from ..yajl import INVALID, has_surrogate, yajl_load

JSON_PARSERS = ("oj", "yajl", "json")
TOO_DEEP: Any = object()  # a value nested past Python's recursion limit
_decode = msgspec.json.Decoder().decode
_C_COMMENT = re.compile(r'("(?:[^"\\]|\\.)*")|/\*.*?\*/', re.S)  # a string (kept) or a /* */ comment


class JSONParser:
    """``parse(lines, options)``: each line's JSON object as a record."""

    def __init__(self, config: ParseConfig):
        if config.json_parser not in JSON_PARSERS:
            raise ParseConfigError(f"valid options are oj,yajl,json but got {config.json_parser}")
        self.ruby_json = config.json_parser == "json"
        self.time_key = config.effective_time_key
        self.records = RecordBuilder(config)

    def parse(self, lines: Lines, options: LogOptions) -> Rows:
        """Rows of the lines that are JSON objects; the others are faults."""
        texts = lines.text.to_pylist()
        try:
            values = list(map(_decode, texts))  # the usual block: every line plain JSON
        except (msgspec.DecodeError, RecursionError):
            values = [self._decode(text) for text in texts]
        faults: dict[int, str] = {}
        if set(map(type, values)) != {dict} or self.ruby_json:
            for i, value in enumerate(values):
                if type(value) is not dict or (self.ruby_json and "json_class" in value):
                    faults[i] = _not_a_record(value)
                    values[i] = {}
        return self.records.to_rows(record_fields(values, self.time_key), len(lines), faults, options)

    def _decode(self, line: str) -> Any:
        """One line's JSON value as the chosen library reads it (INVALID: an error)."""
        try:
            try:
                return _decode(line)
            except msgspec.DecodeError:
                return self._ruby_json(line) if self.ruby_json else yajl_load(line)
        except RecursionError:
            return TOO_DEEP

    def _ruby_json(self, line: str) -> Any:
        """Ruby's JSON.load: /* */ comments, NaN and Infinity; an unpaired surrogate is an error."""
        text = _C_COMMENT.sub(lambda m: m.group(1) or " ", line) if "/*" in line else line
        try:
            value = json.loads(text)
        except ValueError:
            return INVALID
        return INVALID if has_surrogate(value) else value


def record_fields(records: list[dict[str, Any]], time_key: str | None) -> dict[str, list[Any]]:
    """The records' fields (in the order first seen) as lists of values, None where a record lacks one (the time
    key: MISSING)."""
    names = dict.fromkeys(chain.from_iterable(records))
    fields = {name: list(map(dict.get, records, repeat(name))) for name in names if name != time_key}
    if time_key in names:
        fields[time_key] = list(map(dict.get, records, repeat(time_key), repeat(MISSING)))
    return fields


def _not_a_record(value: Any) -> str:
    """fluentd's reason for a line whose JSON is not an object."""
    if value is TOO_DEEP:
        return "nested deeper than windvane reads (fluentd reads it)"
    if value is INVALID or value is None or value is False:
        return PATTERN_NOT_MATCHED
    if isinstance(value, dict):
        return f"json_class {ruby_to_s(value['json_class'])}: Ruby's JSON.load makes that object, not a record"
    if isinstance(value, str):
        return "string not matched (the line is a JSON string, not an object)"
    if isinstance(value, list) or type(value) is int:
        kind = "an array" if isinstance(value, list) else "a number"
        return f"no implicit conversion of String into Integer (the line is {kind}, not an object)"
    ruby_class = "TrueClass" if value is True else "Float"
    return f"undefined method `[]' for {ruby_to_s(value)}:{ruby_class} (the line is not a JSON object)"
