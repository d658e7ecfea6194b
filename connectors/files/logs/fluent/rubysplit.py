"""Ruby's ``String#split`` as fluentd's tsv, ltsv and csv (fast) parsers call it, and its encoding clash.

:func:`ruby_split` splits on a text separator: ``limit`` 0 drops trailing
empty fields, a positive ``limit`` makes at most that many fields (the last
holds the rest), a negative one keeps every field; the empty text gives no
field at all. A single space splits as awk does (runs of ASCII white space,
leading white space skipped); an empty separator splits into bytes (in_tail's
lines are binary strings: a byte of a multi-byte character is written ``\\xHH``).

in_tail reads lines as binary Ruby strings while options are UTF-8: a
separator with non-ASCII characters cannot meet a line with non-ASCII bytes
(:func:`clashes`, fluentd's error :data:`INCOMPATIBLE`).
"""

from __future__ import annotations

import re

#: What Ruby raises when a UTF-8 separator with non-ASCII characters meets a binary line with non-ASCII bytes.
INCOMPATIBLE = "incompatible character encodings: ASCII-8BIT and UTF-8"
_AWK_SPACE = re.compile(r"[ \t\n\v\f\r]+")
_AWK_FIELD = re.compile(r"[^ \t\n\v\f\r]+")


def ruby_split(text: str, separator: str, limit: int = 0) -> list[str]:
    """``text.split(separator, limit)`` as Ruby does it (see module)."""
    if not text:
        return []
    if limit == 1:
        return [text]
    if separator == " ":
        parts = _awk_split(text, limit)
    elif separator == "":
        parts = _chars(text, limit)
    else:
        parts = text.split(separator, limit - 1 if limit > 0 else -1)
    if limit == 0:
        while parts and parts[-1] == "":
            parts.pop()
    return parts


def _awk_split(text: str, limit: int) -> list[str]:
    """Fields between runs of ASCII white space; with a positive ``limit`` the last is the rest (maybe empty)."""
    parts: list[str] = []
    at = 0
    for match in _AWK_FIELD.finditer(text):
        if limit > 0 and len(parts) == limit - 1:
            return [*parts, text[match.start() :]]
        parts.append(match.group())
        at = match.end()
    if limit != 0 and _AWK_SPACE.match(text, at) and (limit < 0 or len(parts) < limit):
        parts.append("")  # Ruby keeps the empty rest after trailing white space when a limit is given
    elif limit != 0 and not parts:
        parts.append("")
    return parts


def _chars(text: str, limit: int) -> list[str]:
    """Single characters of the binary line, so bytes (one that is part of a character written ``\\xHH``); with a
    limit, the last field is the rest, empty when the bytes ran out first."""
    data = text.encode()
    units = [data[n : n + 1].decode(errors="backslashreplace") for n in range(len(data))]
    if limit == 0:
        return units
    if 0 < limit <= len(data):
        return [*units[: limit - 1], data[limit - 1 :].decode(errors="backslashreplace")]
    return [*units, ""]


def clashes(text: str, separator: str) -> bool:
    """Whether Ruby refuses to look for ``separator`` in ``text`` (:data:`INCOMPATIBLE`)."""
    return not separator.isascii() and not text.isascii()
