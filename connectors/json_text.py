"""JSON text as RFC 8259 defines it, for the connectors that read JSON (HTTP bodies, MQTT payloads, Forward's JSON mode).

Python's :mod:`json` reads ``NaN``, ``Infinity`` and ``-Infinity``, which
are not JSON (fluentd's parsers and ``windvane import``'s refuse them):
here they are a :class:`json.JSONDecodeError` at their line and column,
like any other text that is not JSON.

A JSON number is exact decimal text, a float64 is not: ``1709294400.123456789``
reads as ``1709294400.1234567``. :class:`JsonReader` keeps the text of each
number of a time's magnitude that its float64 does not hold, so that a time is read
from what was sent (:meth:`JsonReader.exact`), while records keep plain
floats.
"""

from __future__ import annotations

import json
import json.scanner
import re
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from .errors import ConnectorError

__all__ = ["JsonConstant", "JsonReader", "constant_at", "constant_error", "not_a_number", "skip_space"]

# A string (skipped whole), or a constant outside any string.
_CONSTANT = re.compile(r'"(?:[^"\\]|\\.)*"|(-?Infinity|NaN)', re.DOTALL)
_SPACE = re.compile(r"[ \t\n\r]*")
# Decimal digits every float64 round-trips: a number's text no longer than this is its float's shortest repr.
_FLOAT_DIGITS = 15
# The magnitude below which no number is read as a time to the nanosecond (1970-01-12 in epoch seconds).
_TIMES_FROM = 1e6


class JsonConstant(ConnectorError):
    """Raised by :attr:`JsonReader.scan_once` where the text holds NaN or an infinity; :func:`constant_error`
    gives the error at its position."""


def skip_space(text: str, at: int) -> int:
    """Where the JSON whitespace from ``at`` on ends in ``text`` (``at`` when there is none)."""
    found = _SPACE.match(text, at)
    assert found is not None  # the pattern matches the empty string
    return found.end()


def _refuse(name: str) -> Any:
    raise JsonConstant(name)


def constant_at(text: str, start: int = 0) -> tuple[int, str] | None:
    """Where the first NaN or infinity outside a string is in ``text`` from ``start`` on, and which; None: none."""
    for found in _CONSTANT.finditer(text, start):
        if found.group(1):
            return found.start(1), found.group(1)
    return None


def not_a_number(name: str) -> str:
    """Why the constant ``name`` (NaN, Infinity, -Infinity) is not JSON, and what to send instead."""
    return f"{name} is not a JSON number: JSON has no NaN or Infinity (send null, or the value as a string)"


def constant_error(text: str, start: int = 0) -> json.JSONDecodeError:
    """The error for the first NaN or infinity in ``text`` from ``start`` on, at its position."""
    pos, name = constant_at(text, start) or (start, "NaN or Infinity")
    return json.JSONDecodeError(not_a_number(name), text, pos)


class JsonReader:
    """Strict JSON for one body: NaN and infinities refused at their position, long numbers' text kept.

    One reader per body: it holds the text of the body's long numbers (and
    the floats read from them) until it is dropped.
    """

    def __init__(self) -> None:
        # id(float) -> (the float, its text); the float is held so that its id names it alone.
        self._texts: dict[int, tuple[float, str]] = {}
        decoder = json.JSONDecoder(parse_float=self._float, parse_constant=_refuse)
        self._decode = decoder.decode
        self._raw_decode = decoder.raw_decode
        #: The C scanner itself, ``scan_once(text, index) -> (value, end)`` (StopIteration: no value there);
        #: a NaN or infinity raises :class:`JsonConstant`.
        # typeshed types the context as a scanner; the C scanner reads only the decoder's parse_* and strict.
        self.scan_once = json.scanner.make_scanner(decoder)  # type: ignore[arg-type]

    def _float(self, text: str) -> float:
        value = float(text)
        # Kept only where a time may lose by the float: a time's magnitude, and a text that is not the float's
        # shortest one (what JSON writers give, random sensor values included: those cost no memory).
        if len(text) > _FLOAT_DIGITS and not -_TIMES_FROM < value < _TIMES_FROM and repr(value) != text:
            self._texts[id(value)] = (value, text)
        return value

    def text(self, value: Any) -> str | None:
        """The text this reader read the float ``value`` from, where a float64 does not hold it exactly and it
        may be a time (1e6 or more: 1970-01-12 in epoch seconds); else None (``repr(value)`` is then as good)."""
        entry = self._texts.get(id(value))
        return entry[1] if entry is not None and entry[0] is value else None

    def texts(self) -> Callable[[Any], str | None] | None:
        """:meth:`text`, or None if no number read so far was that long."""
        return self.text if self._texts else None

    def exact(self, value: Any) -> Any:
        """``value`` as sent: the exact :class:`~decimal.Decimal` of a float :meth:`text` knows the text of; any
        other value as it is."""
        text = self.text(value)
        return value if text is None else Decimal(text)

    def exact_numbers(self) -> Callable[[Any], Any] | None:
        """:meth:`exact`, or None if no number read so far was too long for a float64 (every value is as sent)."""
        return self.exact if self._texts else None

    def loads(self, text: str) -> Any:
        """The one JSON value of ``text`` (white space around it allowed), or :class:`json.JSONDecodeError`."""
        try:
            return self._decode(text)
        except JsonConstant:
            raise constant_error(text) from None

    def raw_decode(self, text: str, index: int) -> tuple[Any, int]:
        """The JSON value starting at ``index`` of ``text`` and where it ends, or :class:`json.JSONDecodeError`."""
        try:
            return self._raw_decode(text, index)
        except JsonConstant:
            raise constant_error(text, index) from None
