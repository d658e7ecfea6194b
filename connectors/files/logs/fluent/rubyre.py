"""Ruby regular expressions as fluentd reads them (``/.../imx`` or bare), translated to Python's :mod:`re`.

fluentd's ``expression`` and ``null_value_pattern`` are Ruby regexps:
``(?<name>...)`` groups, ``\\k<name>`` back references, ``\\h`` hex digits,
``\\A`` / ``\\z`` / ``\\Z`` anchors. ``^`` and ``$`` are always line anchors
in Ruby (Python's MULTILINE), ``\\d \\w \\s`` ASCII only (Python's ASCII),
Ruby's ``m`` flag is Python's DOTALL; ``i`` and ``x`` are the same. A
regexp between slashes may end with those flags, as fluentd's config
parser allows.
"""

from __future__ import annotations

import re
from typing import Any

from .config import ParseConfigError

_FLAGS = {"i": re.IGNORECASE, "m": re.DOTALL, "x": re.VERBOSE}
_TOKEN = re.compile(r"\\u[0-9a-fA-F]{4}|\\.|\(\?<(?=[A-Za-z_])|\[|\]")
_ESCAPES = {r"\h": "[0-9a-fA-F]", r"\H": "[^0-9a-fA-F]", r"\z": r"\Z", r"\Z": r"(?=\n?\Z)"}


def split_flags(text: str) -> tuple[str, int]:
    """``/source/flags`` (or a bare source) as the source and Python flags; ParseConfigError on a stray slash."""
    if not text.startswith("/"):
        return text, 0
    right = text.rindex("/")
    if right == 0 or right < len(text) - 3 or set(text[right + 1 :]) - set(_FLAGS):
        raise ParseConfigError(f"invalid regexp: missing right slash or unknown flags: {text}")
    flags = 0
    for letter in text[right + 1 :]:
        flags |= _FLAGS[letter]
    return text[1:right], flags


def translate(source: str, *, binary: bool = False) -> str:
    """A Ruby regexp source as a Python one (named groups, back references, ``\\h``, ``\\z``, ``\\Z``;
    ``binary``: for a pattern of bytes, ``\\uHHHH`` as its UTF-8 bytes)."""
    out, i, in_class = [], 0, False
    for token in _TOKEN.finditer(source):
        out.append(source[i : token.start()])
        text = token.group()
        if text == "(?<":
            text = "(?<" if in_class else "(?P<"
        elif text == "[":
            in_class = True
        elif text == "]":
            in_class = False
        elif text in _ESCAPES and not in_class:
            text = _ESCAPES[text]
        elif text == r"\h":
            text = "0-9a-fA-F"
        elif binary and text.startswith(r"\u"):
            text = "".join(f"\\x{b:02x}" for b in chr(int(text[2:], 16)).encode())
        out.append(text)
        i = token.end()
    out.append(source[i:])
    return re.sub(r"\\k<(\w+)>", r"(?P=\1)", "".join(out))


def ruby_regexp(
    text: str, *, ignorecase: bool = False, multiline: bool = False, binary: bool = False
) -> re.Pattern[Any]:
    """The compiled Python equivalent of fluentd regexp option ``text``; ParseConfigError if it does not compile.

    ``binary``: a pattern of bytes, for UTF-8 lines as bytes, as in_tail
    matches them (it reads lines as binary strings: ``.`` is one byte, so
    ``^.$`` does not match ``ü``).
    """
    source, flags = split_flags(text)
    flags |= re.MULTILINE | re.ASCII
    if ignorecase:
        flags |= re.IGNORECASE
    if multiline:
        flags |= re.DOTALL
    try:
        pattern = translate(source, binary=binary)
        return re.compile(pattern.encode() if binary else pattern, flags)
    except re.error as exc:
        raise ParseConfigError(f"invalid regexp {text!r}: {exc}") from None
