"""What yajl-ruby's ``Yajl.load`` (fluentd's json parser, ``json_parser yajl``, and ``oj`` without Oj) makes of a
line that is not plain JSON.

:func:`yajl_load` is for the lines msgspec refused. yajl reads ``//`` and
``/* */`` comments, numbers past float's range (infinity), and writes an
unpaired surrogate escape as ``?``. A line that ends before its JSON does is
no error to yajl-ruby: it returns what its builder holds at the end (as
fluentd 1.14.6 with Debian's yajl-ruby shows):

- the innermost object or array still open, with the members read so far (a
  number at the very end counts: ``{"a": 12`` is ``{"a": 12}``); a trailing
  ``,`` is no error there;
- but the key, when the line ends after a key and before its value is
  complete (``{"a": tr``): a string, not a record;
- nothing (nil) when no value was begun (an unterminated string at the top).

Anything else that is not JSON is an error (:data:`INVALID`).
"""

from __future__ import annotations

import json
import re
from typing import Any

INVALID: Any = object()
_COMMENT = re.compile(r'("(?:[^"\\]|\\.)*")|/\*.*?\*/|//.*', re.S)  # a string (kept) or a comment
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
_TOKEN = re.compile(
    r"""\s+|/\*.*?\*/|//.*
    |(?P<string>"(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*")
    |(?P<number>-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)(?![0-9.eE+-])
    |(?P<literal>true|false|null)
    |(?P<punct>[{}\[\]:,])""",
    re.S | re.X,
)
# what may still become a token when more text comes: the line ended inside it
_UNFINISHED = re.compile(
    r'"(?:[^"\\\x00-\x1f]|\\.)*\\?|/\*.*|/|-?[0-9]*\.?[0-9]*[eE]?[+-]?|t(?:r(?:u)?)?|f(?:a(?:l(?:s)?)?)?|n(?:u(?:l)?)?'
)


def yajl_load(line: str) -> Any:
    """The value yajl-ruby reads in ``line`` (see the module), or INVALID."""
    text = _COMMENT.sub(lambda m: m.group(1) or " ", line) if "/" in line else line
    try:
        value = json.loads(text, parse_constant=_refuse)
    except ValueError:
        return _partial(line)
    return no_surrogates(value) if has_surrogate(value) else value


def has_surrogate(value: Any) -> bool:
    """Whether a decoded value holds an unpaired surrogate."""
    return _LONE_SURROGATE.search(json.dumps(value, ensure_ascii=False)) is not None


def no_surrogates(value: Any) -> Any:
    """``value`` with each unpaired surrogate written ``?``, as yajl writes it."""
    if isinstance(value, str):
        return _LONE_SURROGATE.sub("?", value)
    if isinstance(value, list):
        return [no_surrogates(v) for v in value]
    if isinstance(value, dict):
        return {no_surrogates(k): no_surrogates(v) for k, v in value.items()}
    return value


def _refuse(name: str) -> Any:
    raise ValueError(name)


def _partial(line: str) -> Any:
    """yajl-ruby's result for a line that is not JSON: what its builder holds where the line ends early, INVALID
    where the line holds an error."""
    builder = _Builder()
    at = 0
    while at < len(line):
        token = _TOKEN.match(line, at)
        if token is None:
            rest = _UNFINISHED.fullmatch(line, at)
            return builder.result() if rest is not None else INVALID
        at = token.end()
        kind = token.lastgroup
        if kind is not None and not builder.take(kind, token.group(kind)):
            return INVALID
    return builder.result()


class _Builder:
    """yajl-ruby's value builder: a stack of open containers (and the key each object waits to fill)."""

    def __init__(self) -> None:
        self.stack: list[list[Any]] = []  # [container, state, key]
        self.done = False
        self.value: Any = None

    def take(self, kind: str, text: str) -> bool:
        """One token; False where it is an error."""
        if self.done:
            return False
        state = self.stack[-1][1] if self.stack else "value"
        if kind == "punct":
            return self._punct(text, state)
        if state == "key" and kind == "string":
            frame = self.stack[-1]
            frame[1], frame[2] = "colon", no_surrogates(json.loads(text))
            return True
        if state != "value":
            return False
        return self._value(json.loads(text) if kind != "string" else no_surrogates(json.loads(text)))

    def _punct(self, text: str, state: str) -> bool:
        frame = self.stack[-1] if self.stack else None
        if text in "{[" and state == "value":
            self.stack.append([{} if text == "{" else [], "key" if text == "{" else "value", None])
            return True
        if frame is None:
            return False
        container, _, _ = frame
        closes = (text == "}" and isinstance(container, dict)) or (text == "]" and isinstance(container, list))
        empty = not container and state in ("key", "value")
        if closes and (state == "next" or empty):
            self.stack.pop()
            return self._value(container)
        if text == ":" and state == "colon":
            frame[1] = "value"
            return True
        if text == "," and state == "next":
            frame[1] = "key" if isinstance(container, dict) else "value"
            return True
        return False

    def _value(self, value: Any) -> bool:
        if not self.stack:
            self.done, self.value = True, value
            return True
        frame = self.stack[-1]
        if isinstance(frame[0], dict):
            frame[0][frame[2]] = value
        else:
            frame[0].append(value)
        frame[1], frame[2] = "next", None
        return True

    def result(self) -> Any:
        """What the builder holds at the end of the line."""
        if self.done:
            return self.value
        if not self.stack:
            return None
        container, state, key = self.stack[-1]
        return key if state in ("colon", "value") and isinstance(container, dict) else container
