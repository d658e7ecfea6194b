"""What fluentd's parser base does with the fields a parser found: the time, null values, types.

:func:`to_rows` takes the fields of every line (text columns, null where a
line has no such field; or, from parsers of typed data such as json and
msgpack, lists of values: see :mod:`.values`) and makes windvane's
:class:`Rows`, in fluentd's order:

1. the time: field ``time_key`` read by :class:`.timefmt.TimeParser` and
   removed from the record (kept as text with ``keep_time_key``; a kept
   field named ``time`` is stored as ``time_text``, since ``time`` is the row's
   time). A line whose time is not a time is rejected (fluentd: ``invalid
   time format``); a line without the field gets the read time
   (``estimate_current_event``), or is rejected, ``pattern not matched``,
   as fluentd drops it when that is false;
2. ``null_empty_string`` and ``null_value_pattern`` (a Ruby regexp that
   matches anywhere in the value, as fluentd searches it) make values null;
3. ``types``, as fluentd converts them (conversion never rejects a line):
   ``integer`` Ruby's ``to_i`` (``12abc`` is 12, ``abc`` 0, ``1_000`` 1000) as int64 (null past it),
   ``float`` ``to_f`` as float64, ``bool`` true for ``true``/``yes``/``1``
   (any case), ``string``, ``time[:zone][:format]`` (or ``time:unixtime`` /
   ``time:float``) as int64 ns (null if not a time), ``array[:delimiter]``
   (default ``,``; empty: single bytes, a byte of a character written ``\\xHH``, as Ruby splits
   in_tail's binary value; split as :func:`.rubysplit.ruby_split` does) as a JSON list of text (fluentd
   gives an array; a stream column cannot hold a list: ``windvane import``
   refuses a ``list<string>`` column).

A typed field goes the same way with fluentd's rules for values that are not
text: the time parser takes a string, or for ``float``/``unixtime`` a number
too (anything else rejects the line: ``value must be string``, ``value must
be a string or a number``); null values are strings only; ``types``
converts Ruby's ``to_s`` of the value (``1.0e+20``, ``{"k"=>1}``; a float to
``integer`` truncated; a value that is not a string to a ``time`` with a
format: null). A field without a ``types`` entry is stored by its kinds
(:func:`.values.typed_column`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from windvane.ingest.times import BadZone, check_zone

from ..lines import Rows, add_faults
from ..options import LogOptions
from .config import TIME_TYPES, ParseConfig, ParseConfigError
from .rubynum import ruby_integers, ruby_to_f
from .rubyre import ruby_regexp
from .rubysplit import ruby_split
from .strptime import zone_offset_seconds
from .timefmt import TimeParser
from .values import INT64, MISSING, ruby_to_s, ruby_to_s_column, typed_column

PATTERN_NOT_MATCHED = "pattern not matched"
TYPES = ("string", "integer", "float", "bool", "time", "array")
TRUTHY = ("true", "yes", "1")
KEPT_TIME = "time_text"
#: ``convert(values, now)`` of a ``types`` entry: a column of the field's text to its type.
Converter = Callable[[pa.Array, int], pa.Array]


class RecordBuilder:
    """``to_rows(fields, faults, options)``: a parser's fields to :class:`Rows` as ``config`` says (see module)."""

    def __init__(self, config: ParseConfig):
        self.config = config
        self.time_key = config.effective_time_key
        self.time = TimeParser(config)
        self.null = ruby_regexp(config.null_value_pattern) if config.null_value_pattern else None
        self.converters = {name: _converter(name, spec, config) for name, spec in config.types.items()}

    def to_rows(
        self, fields: dict[str, pa.Array | list[Any]], count: int, faults: dict[int, str], options: LogOptions
    ) -> Rows:
        """Rows of ``count`` lines from their ``fields`` (lines already at fault in ``faults`` stay so); a field is a
        text column, or a list of typed values (see :mod:`.values`)."""
        now = options.now or 0
        fields = dict(fields)
        time = self._times(fields, count, faults, now)
        columns: dict[str, pa.Array] = {"time": pa.array(time, pa.int64())}
        for name, values in fields.items():
            column = KEPT_TIME if name == "time" else name
            if isinstance(values, list):
                columns[column] = self._typed(name, values, now)
                continue
            values = self._nulls(pc.cast(values, pa.large_string()))
            convert = self.converters.get(name)
            columns[column] = convert(values, now) if convert else values
        return Rows(columns, faults)

    def _times(
        self, fields: dict[str, pa.Array | list[Any]], count: int, faults: dict[int, str], now: int
    ) -> np.ndarray:
        key = self.time_key
        values = fields.get(key) if key is not None else None
        if key is None or values is None:
            if not self.config.estimate_current_event:
                add_faults(faults, np.ones(count, dtype=bool), PATTERN_NOT_MATCHED)
            return np.full(count, now, dtype=np.int64)
        if not self.config.keep_time_key:
            del fields[key]
        if isinstance(values, list):
            present = np.array([v is not MISSING for v in values], dtype=bool)
            texts = self._time_texts(values, faults)
        else:
            present = values.is_valid().to_numpy(zero_copy_only=False)
            texts = values
        times, bad = self.time.parse(texts, now)
        bad &= texts.is_valid().to_numpy(zero_copy_only=False)
        add_faults(faults, bad, lambda i: f"invalid time format: value = {texts[i].as_py()}")
        if not self.config.estimate_current_event:
            add_faults(faults, ~present, PATTERN_NOT_MATCHED)
        return np.where(present & ~bad, times, now)

    def _time_texts(self, values: list[Any], faults: dict[int, str]) -> pa.Array:
        """The time key's typed values as the texts the time parser reads; values it refuses (a number where
        fluentd's string time parser wants a string, ...) are faults with fluentd's reason, and null."""
        numbers = self.time.time_type != "string"
        kinds = set(map(type, values))
        if kinds - {type(MISSING)} <= ({str, int, float} if numbers else {str}):  # the usual block
            return ruby_to_s_column([None if v is MISSING else v for v in values] if type(MISSING) in kinds else values)
        texts: list[str | None] = []
        for i, value in enumerate(values):
            if value is MISSING:
                texts.append(None)
            elif isinstance(value, str) or (numbers and isinstance(value, int | float) and not isinstance(value, bool)):
                texts.append(ruby_to_s(value))
            else:
                texts.append(None)
                if i not in faults:
                    faults[i] = _refused_time(value, numbers)
        return pa.array(texts, pa.large_string())

    def _nulls(self, values: pa.Array) -> pa.Array:
        if self.config.null_empty_string:
            values = pc.if_else(pc.equal(values, ""), pa.scalar(None, pa.large_string()), values)
        if self.null is not None:
            search = self.null.search
            null = [v is not None and search(v) is not None for v in values.to_pylist()]
            if any(null):
                values = pc.if_else(pa.array(null), pa.scalar(None, pa.large_string()), values)
        return values

    def _typed(self, name: str, values: list[Any], now: int) -> pa.Array:
        """A typed field: null values, then its ``types`` conversion of each value's Ruby ``to_s`` (a float to
        ``integer`` truncated, as Ruby's ``Float#to_i``; a value that is not a string to a ``time`` with a format:
        null), else stored by its kinds (:func:`.values.typed_column`)."""
        if name == self.time_key:  # a kept time key: MISSING where a line lacks it
            values = [None if v is MISSING else v for v in values]
        if self.config.null_empty_string or self.null is not None:
            values = [None if isinstance(v, str) and self._is_null(v) else v for v in values]
        spec = self.config.types.get(name)
        if spec is None:
            return typed_column(values)
        kind, _, option = spec.partition(":")
        if kind == "integer" and float in set(map(type, values)):
            values = [_truncate(v) if isinstance(v, float) else v for v in values]
        if kind == "time":  # a number only for time:unixtime and time:float; else a string
            kinds = (str, int, float) if option.rpartition(":")[2] in ("unixtime", "float") else (str,)
            values = [v if isinstance(v, kinds) and not isinstance(v, bool) else None for v in values]
        return self.converters[name](ruby_to_s_column(values), now)

    def _is_null(self, value: str) -> bool:
        """Whether a string value is null by ``null_empty_string`` / ``null_value_pattern``."""
        if self.config.null_empty_string and value == "":
            return True
        return self.null is not None and self.null.search(value) is not None


def _refused_time(value: Any, numbers: bool) -> str:
    """fluentd's reason for a time value its time parser refuses (numbers: float/unixtime take numbers too)."""
    if numbers:
        ruby_class = {bool: "TrueClass" if value else "FalseClass", type(None): "NilClass", list: "Array", dict: "Hash"}
        return f"value must be a string or a number: {ruby_to_s(value)}({ruby_class.get(type(value), 'Object')})"
    return f"value must be string: {ruby_to_s(value)}"


def _truncate(value: float) -> int | None:
    """Ruby's ``Float#to_i``, None past int64 (or for NaN, infinity)."""
    if not math.isfinite(value) or not INT64[0] <= value < INT64[1]:
        return None
    return int(value)


def _converter(name: str, spec: str, config: ParseConfig) -> Converter:
    """``convert(values, now)`` for ``types`` entry ``name: spec``; ParseConfigError for an unknown type."""
    kind, _, option = spec.partition(":")
    if kind not in TYPES:
        raise ParseConfigError(f"unknown value conversion for key:{name!r}, type:{kind!r}; known: {', '.join(TYPES)}")
    if kind == "integer":
        return lambda v, now: ruby_integers(v)
    if kind == "float":
        return lambda v, now: _keep_null(v, pa.array(ruby_to_f(v), pa.float64()))
    if kind == "bool":
        return lambda v, now: _keep_null(v, pc.is_in(pc.utf8_lower(v), pa.array(TRUTHY)))
    if kind == "array":
        delimiter = option if spec.count(":") else ","
        return lambda v, now: pa.array(
            [None if s is None else json.dumps(ruby_split(s, delimiter)) for s in v.to_pylist()], pa.large_string()
        )
    if kind == "time":
        return _time_converter(option if ":" in spec else None, config)
    return lambda v, now: v


def _time_converter(option: str | None, config: ParseConfig) -> Converter:
    """``types x:time[:zone][:format]``: int64 ns, null where not a time (fluentd's converter gives nil)."""
    zone, time_format, time_type = None, option, "string"
    if option:
        first, _, rest = option.partition(":")
        if rest and _is_zone(first):
            zone, time_format = first, rest
        if time_format in TIME_TYPES:
            time_type, time_format = time_format, None
    # the section's localtime/utc, but only the converter's own zone (a "time" type without a format and utc or
    # localtime false is refused, as fluentd refuses it)
    parser = TimeParser(config.replace(timezone=zone, time_format=time_format, time_type=time_type))

    def convert(values: pa.Array, now: int) -> pa.Array:
        times, bad = parser.parse(values, now)
        return pa.array(times, pa.int64(), mask=bad | ~values.is_valid().to_numpy(zero_copy_only=False))

    return convert


def _is_zone(text: str) -> bool:
    if zone_offset_seconds(text) is not None:
        return True
    try:
        check_zone(text)
    except BadZone:  # not a zone: the text is the format
        return False
    return True


def _keep_null(source: pa.Array, converted: pa.Array) -> pa.Array:
    """``converted`` with nulls where ``source`` has them (fluentd leaves a null value as it is)."""
    return pc.if_else(source.is_valid(), converted, pa.scalar(None, converted.type))
