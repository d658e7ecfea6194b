"""logfmt lines (``key=value key2="quoted value" flag``) read as the reference decoder reads them.

The reference is Go's ``github.com/go-logfmt/logfmt`` decoder (the test
suite runs it as the oracle): :func:`logfmt_pairs` gives the same keys and
values, in line order, and refuses the same lines with the same message
(``logfmt syntax error at pos N on line 1: unexpected '='``, ``invalid
key``, ``unterminated quoted value``, ``invalid quoted value``; ``pos`` counts
bytes from 1).

Rules: bytes up to a space (anything at or below ``' '``) are separators; a
key runs to ``=`` or a separator and holds no ``"`` (nor U+FFFD); a key
alone or ``key=`` has the empty value; an unquoted value runs to a separator
and holds no ``=`` or ``"``; a quoted value runs to the next unescaped ``"``,
and when it has a backslash its escapes are JSON's (plus ``\\'``; a lone
surrogate is U+FFFD) and it may hold no control character.
"""

from __future__ import annotations

import re

from ..errors import LineError

_KEY_END = re.compile(rb'[\x00- ="]')
_VALUE_END = re.compile(rb'[\x00- ="]')
_QUOTE_END = re.compile(rb'\\.|"', re.S)
_ESCAPES = {ord('"'): '"', ord("\\"): "\\", ord("/"): "/", ord("'"): "'"}
_ESCAPES |= {ord("b"): "\b", ord("f"): "\f", ord("n"): "\n", ord("r"): "\r", ord("t"): "\t"}
_HEX4 = re.compile(rb"\\u([0-9A-Fa-f]{4})")


class LogfmtError(LineError):
    """The line is not logfmt (the message is the reference decoder's)."""


def _error(at: int, message: str) -> LogfmtError:
    return LogfmtError(f"logfmt syntax error at pos {at + 1} on line 1: {message}")


def _unexpected(data: bytes, at: int) -> LogfmtError:
    return _error(at, f"unexpected '{chr(data[at])}'")


#: One pair of a line the quick path reads: a key (no byte of U+FFFD's first, to be safe), then maybe ``=`` and
#: a value, quoted without backslashes or unquoted. Anything else goes the careful way (:func:`_scan`).
_PAIR = re.compile(rb'[\x00- ]*([^\x00- ="\xef]+)(?:=(?:"([^"\\]*)"|([^\x00- ="]*)))?')
_TRAILING = re.compile(rb"[\x00- ]*")


def logfmt_pairs(data: bytes) -> list[tuple[str, str]]:
    """The ``(key, value)`` pairs of one line's UTF-8 bytes, in order (repeats kept); LogfmtError."""
    pairs: list[tuple[str, str]] = []
    at = 0
    for match in _PAIR.finditer(data):
        if match.start() != at:
            return _scan(data)
        key, quoted, plain = match.groups()
        value = quoted if quoted is not None else plain
        pairs.append((key.decode(), value.decode() if value else ""))
        at = match.end()
    if _TRAILING.fullmatch(data, at) is None:
        return _scan(data)
    return pairs


def _scan(data: bytes) -> list[tuple[str, str]]:
    """:func:`logfmt_pairs` byte by byte, as the decoder does, for the lines the quick path does not read."""
    pairs: list[tuple[str, str]] = []
    at, size = 0, len(data)
    while True:
        while at < size and data[at] <= 0x20:
            at += 1
        if at >= size:
            return pairs
        end = _KEY_END.search(data, at)
        stop = end.start() if end else size
        if stop < size and data[stop] == 0x22:  # '"'
            raise _unexpected(data, stop)
        if stop < size and data[stop] == 0x3D and stop == at:  # '=' with no key before it
            raise _unexpected(data, stop)
        key = data[at:stop].decode()
        if "\ufffd" in key:
            raise _error(stop, "invalid key")
        if stop >= size or data[stop] != 0x3D:
            pairs.append((key, ""))
            at = stop
            continue
        value, at = _value(data, stop + 1)
        pairs.append((key, value))


def _value(data: bytes, at: int) -> tuple[str, int]:
    """The value that starts at ``at`` (just past ``=``) and where it ends."""
    if at >= len(data) or data[at] <= 0x20:
        return "", at
    if data[at] == 0x22:
        return _quoted(data, at)
    end = _VALUE_END.search(data, at)
    stop = end.start() if end else len(data)
    if stop < len(data) and data[stop] in (0x3D, 0x22):
        raise _unexpected(data, stop)
    return data[at:stop].decode(), stop


def _quoted(data: bytes, at: int) -> tuple[str, int]:
    """A quoted value whose opening quote is at ``at``, and the position past its closing quote."""
    escaped = False
    for match in _QUOTE_END.finditer(data, at + 1):
        if match.group() != b'"':
            escaped = True
            continue
        end = match.end()
        body = data[at + 1 : end - 1]
        if not escaped:
            return body.decode(), end
        text = _unescape(body)
        if text is None:
            raise _error(end, "invalid quoted value")
        return text, end
    raise _error(len(data), "unterminated quoted value")


def _unescape(body: bytes) -> str | None:
    """JSON's unescaping of a quoted value's body (None: an escape or a control character it refuses)."""
    out: list[str] = []
    at, size = 0, len(body)
    while at < size:
        slash = body.find(b"\\", at)
        plain = body[at : size if slash < 0 else slash]
        if any(byte < 0x20 or byte == 0x22 for byte in plain):
            return None
        out.append(plain.decode())
        if slash < 0:
            break
        if slash + 1 >= size:
            return None
        kind = body[slash + 1]
        if kind == ord("u"):
            char, at = _unicode(body, slash)
            if char is None:
                return None
            out.append(char)
        elif kind in _ESCAPES:
            out.append(_ESCAPES[kind])
            at = slash + 2
        else:
            return None
    return "".join(out)


def _unicode(body: bytes, at: int) -> tuple[str | None, int]:
    """The character of the ``\\uXXXX`` escape at ``at`` (a surrogate pair taken whole, a lone one U+FFFD)."""
    first = _HEX4.match(body, at)
    if first is None:
        return None, at
    code = int(first.group(1), 16)
    if not 0xD800 <= code <= 0xDFFF:
        return chr(code), at + 6
    second = _HEX4.match(body, at + 6)
    low = int(second.group(1), 16) if second else -1
    if code < 0xDC00 and 0xDC00 <= low <= 0xDFFF:
        return chr(0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)), at + 12
    return "\ufffd", at + 6
