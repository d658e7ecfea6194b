"""A regular expression with named groups, run over a whole Arrow array of lines at once.

:class:`VectorRegexp` takes a Python pattern (``re`` syntax, named groups;
:func:`ruby_to_python` translates fluentd's Ruby expressions) and gives, for
a ``large_string`` array of lines, one string column per named group and the
mask of lines that did not match: what ``re.search`` gives line by line,
exactly (a group that took no part in the match is null, as ``re`` gives
``None``; so is every group of a line that did not match).

Two paths, chosen once, up front (:attr:`VectorRegexp.engine`, and
:attr:`VectorRegexp.reason` when it is ``"python"``):

- ``"re2"``: the pattern is rewritten from its parse tree into RE2 syntax
  with the same meaning and run by ``pyarrow.compute.extract_regex``, over
  blocks of lines on as many threads as there are cores (Arrow lets go of
  the interpreter lock). RE2 cannot tell an empty group from one that did
  not take part; where that matters, the optional part around the group is
  captured too (a hidden marker group), and what no marker can settle is
  looked up again with ``re`` for those lines only. Lines holding a newline
  (where ``$`` and ``.`` differ between the engines) go to ``re`` as well.
- ``"python"``: ``re`` on every line, for what RE2 cannot run or would run
  differently: backreferences, lookaround, atomic groups and possessive
  repeats, conditionals, case-insensitive matching (RE2 folds Unicode case
  where ``re.ASCII`` does not), Unicode ``\\d \\w \\s \\b``, named groups
  inside a repetition, or a pattern RE2 refuses (too large a repeat count).
"""

from __future__ import annotations

import os
import re
import re._constants as sre  # the parse tree of ``re`` is the one exact reading of a Python pattern
import re._parser as sre_parse
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

MARKER = "__wv_marker_"
#: Lines per block handed to one thread; blocks run on ``os.cpu_count()`` threads.
BLOCK_LINES = 1 << 16


class RegexpError(ValueError):
    """The expression is not a regular expression this module can run (with why)."""


@dataclass(frozen=True, slots=True)
class Matches:
    """The named groups of every line (``large_string``, null where absent), and the lines that did not match."""

    columns: dict[str, pa.Array]
    unmatched: np.ndarray  # bool, one per line


class Unsupported(Exception):
    """Raised while rewriting: RE2 cannot run this pattern as ``re`` does (the message says why)."""


@dataclass
class _Rewrite:
    """State of one rewrite of a parse tree into RE2 syntax."""

    ascii: bool
    names: dict[int, str]
    markers: dict[str, str] = field(default_factory=dict)  # group -> marker capturing its optional part
    recheck: set[str] = field(default_factory=set)  # groups whose "" may mean absent: ask ``re``
    absent: set[str] = field(default_factory=set)  # groups that may take no part (never empty when they do)
    layers: list[list[str]] = field(default_factory=list)  # groups met in each enclosing optional part
    repeat_depth: int = 0


def _char(code: int) -> str:
    """One code point as an RE2 literal, inside or outside a class."""
    ch = chr(code)
    if ch.isascii() and ch.isalnum():
        return ch
    if 0x20 < code < 0x7F:
        return "\\" + ch
    return f"\\x{{{code:x}}}"


_ASCII_CATEGORY = {
    sre.CATEGORY_DIGIT: ("\\d", "[0-9]"),
    sre.CATEGORY_NOT_DIGIT: ("\\D", "[^0-9]"),
    sre.CATEGORY_WORD: ("\\w", "[0-9A-Za-z_]"),
    sre.CATEGORY_NOT_WORD: ("\\W", "[^0-9A-Za-z_]"),
    # re.ASCII's \s has \v, RE2's does not; POSIX [:space:] is exactly re's set.
    sre.CATEGORY_SPACE: ("[:space:]", "[[:space:]]"),
    sre.CATEGORY_NOT_SPACE: ("[:^space:]", "[[:^space:]]"),
}
_AT = {
    sre.AT_BEGINNING: "^",
    sre.AT_BEGINNING_STRING: "\\A",
    sre.AT_END: "$",  # RE2's $ is \z: the same on lines without a newline (those go to ``re``)
    sre.AT_END_STRING: "\\z",
    sre.AT_BOUNDARY: "\\b",
    sre.AT_NON_BOUNDARY: "\\B",
}
_NEVER = {
    sre.GROUPREF: "a backreference",
    sre.GROUPREF_EXISTS: "a conditional group",
    sre.ASSERT: "a lookahead or lookbehind",
    sre.ASSERT_NOT: "a negative lookahead or lookbehind",
    sre.ATOMIC_GROUP: "an atomic group",
    sre.POSSESSIVE_REPEAT: "a possessive repeat",
}


def _category(rw: _Rewrite, code: object, inside: bool) -> str:
    if not rw.ascii or code not in _ASCII_CATEGORY:
        raise Unsupported("Unicode \\d, \\w or \\s (re without re.ASCII)")
    return _ASCII_CATEGORY[code][0 if inside else 1]


def _charset(rw: _Rewrite, items: list) -> str:
    out = []
    for op, av in items:
        if op is sre.NEGATE:
            out.insert(0, "^")
        elif op is sre.LITERAL:
            out.append(_char(av))
        elif op is sre.RANGE:
            out.append(f"{_char(av[0])}-{_char(av[1])}")
        elif op is sre.CATEGORY:
            out.append(_category(rw, av, inside=True))
        else:
            raise Unsupported(f"{op} in a character class")
    return "[" + "".join(out) + "]"


def _optional(rw: _Rewrite, body: sre_parse.SubPattern) -> str:
    """An optional part (a branch or a ``?`` body): a marker group around it where one of its groups needs one."""
    rw.layers.append([])
    text = _emit(rw, body)
    groups = rw.layers.pop()
    if not groups:
        return text
    if body.getwidth()[0] == 0:
        rw.recheck.update(groups)  # the part itself can match empty: its marker would not tell either
        return text
    marker = f"{MARKER}{len(set(rw.markers.values()))}"
    rw.markers.update(dict.fromkeys(groups, marker))
    return f"(?P<{marker}>{text})"


def _group(rw: _Rewrite, av: tuple) -> str:
    group, add_flags, del_flags, body = av
    if add_flags or del_flags:
        raise Unsupported("flags set inside the pattern for a part of it")
    name = rw.names.get(group) if group else None
    if name and rw.repeat_depth:
        raise Unsupported(f"group {name!r} inside a repetition")
    text = _emit(rw, body)
    if not name:
        return f"(?:{text})"
    if rw.layers:
        if body.getwidth()[0] == 0:
            rw.layers[-1].append(name)
        else:
            rw.absent.add(name)
    return f"(?P<{name}>{text})"


def _repeat(rw: _Rewrite, op: object, av: tuple) -> str:
    low, high, body = av
    lazy = "?" if op is sre.MIN_REPEAT else ""
    count = f"{{{low},}}" if high is sre.MAXREPEAT else f"{{{low},{high}}}"
    if low == 0 and high == 1:
        return f"(?:{_optional(rw, body)})?{lazy}"
    rw.repeat_depth += high != 1
    try:
        text = _emit(rw, body)
    finally:
        rw.repeat_depth -= high != 1
    return f"(?:{text}){count}{lazy}"


def _emit(rw: _Rewrite, nodes: sre_parse.SubPattern) -> str:
    out = []
    for op, av in nodes:
        if op in _NEVER:
            raise Unsupported(_NEVER[op])
        if op is sre.LITERAL:
            out.append(_char(av))
        elif op is sre.NOT_LITERAL:
            out.append(f"[^{_char(av)}]")
        elif op is sre.ANY:
            out.append(".")
        elif op is sre.IN:
            out.append(_charset(rw, av))
        elif op is sre.CATEGORY:
            out.append(_category(rw, av, inside=False))
        elif op is sre.AT and av in _AT:
            out.append(_AT[av])
        elif op is sre.BRANCH:
            out.append("(?:" + "|".join(_optional(rw, alt) for alt in av[1]) + ")")
        elif op is sre.SUBPATTERN:
            out.append(_group(rw, av))
        elif op in (sre.MAX_REPEAT, sre.MIN_REPEAT):
            out.append(_repeat(rw, op, av))
        else:
            raise Unsupported(f"{op} {av}")
    return "".join(out)


def to_re2(pattern: re.Pattern[str]) -> tuple[str, _Rewrite]:
    """``pattern`` in RE2 syntax with the same meaning, and what reading its groups back needs.

    Raises :class:`Unsupported` (saying why) where RE2 would not match as ``re`` does.
    """
    if pattern.flags & re.IGNORECASE:
        raise Unsupported("case-insensitive matching (RE2 folds Unicode case, re.ASCII does not)")
    tree = sre_parse.parse(pattern.pattern, pattern.flags)
    rw = _Rewrite(ascii=bool(tree.state.flags & re.ASCII), names={v: k for k, v in pattern.groupindex.items()})
    text = _emit(rw, tree)
    return ("(?s)" if pattern.flags & re.DOTALL else "") + text, rw


class VectorRegexp:
    """``pattern``'s named groups for every line of an array (see the module's text for the two paths)."""

    def __init__(self, pattern: str | re.Pattern[str], threads: int | None = None) -> None:
        try:
            self.pattern = re.compile(pattern) if isinstance(pattern, str) else pattern
        except re.error as exc:
            raise RegexpError(f"not a regular expression: {exc}") from exc
        if not self.pattern.groupindex:
            raise RegexpError("the expression has no named group (?P<name>...)")
        self.names = tuple(self.pattern.groupindex)
        self.threads = threads or os.cpu_count() or 1
        self.re2: str | None = None
        self.reason = ""
        try:
            self.re2, self._rw = to_re2(self.pattern)
            pc.extract_regex(pa.array([""], pa.large_string()), self.re2)  # RE2 refuses what it cannot compile
        except (Unsupported, pa.ArrowInvalid) as exc:
            self.re2, self.reason = None, str(exc).splitlines()[0]

    @property
    def engine(self) -> str:
        """``"re2"`` or ``"python"`` (then :attr:`reason` says why)."""
        return "re2" if self.re2 else "python"

    def match(self, lines: pa.Array) -> Matches:
        """The named groups of each line of ``lines`` (a string array without nulls), as ``re.search`` finds them."""
        lines = lines.cast(pa.large_string()) if lines.type != pa.large_string() else lines
        if self.re2 is None:
            return self._python(lines, np.ones(len(lines), dtype=bool), self._empty(len(lines)))
        found = self._extract(lines)
        unmatched = ~found.is_valid().to_numpy(zero_copy_only=False)
        raw = {found.type.field(k).name: column for k, column in enumerate(found.flatten())}
        columns = {name: self._absent_to_null(name, raw, unmatched) for name in self.names}
        redo = pc.match_substring(lines, "\n").to_numpy(zero_copy_only=False)
        for name in self._rw.recheck:
            redo |= ~unmatched & pc.equal(raw[name], "").to_numpy(zero_copy_only=False)
        if redo.any():
            return self._python(lines, redo, Matches(columns, unmatched))
        return Matches(columns, unmatched)

    def _extract(self, lines: pa.Array) -> pa.StructArray:
        assert self.re2 is not None
        blocks = [lines.slice(start, BLOCK_LINES) for start in range(0, len(lines), BLOCK_LINES)]
        if len(blocks) < 2 or self.threads < 2:
            return pc.extract_regex(lines, self.re2)
        with ThreadPoolExecutor(self.threads) as pool:
            parts = list(pool.map(lambda block: pc.extract_regex(block, self.re2), blocks))
        return pa.concat_arrays(parts)

    def _absent_to_null(self, name: str, raw: dict[str, pa.Array], unmatched: np.ndarray) -> pa.Array:
        """Group ``name`` with null where the line did not match or the group took no part in the match."""
        value = raw[name]
        marker = self._rw.markers.get(name)
        if marker is not None:
            absent = pc.equal(raw[marker], "")
        elif name in self._rw.absent:
            absent = pc.equal(value, "")
        else:
            absent = None
        null = pa.array(unmatched) if absent is None else pc.or_(pa.array(unmatched), absent)
        return pc.if_else(null, pa.scalar(None, pa.large_string()), value)

    def _empty(self, count: int) -> Matches:
        nulls = pa.nulls(count, pa.large_string())
        return Matches({name: nulls for name in self.names}, np.ones(count, dtype=bool))

    def _python(self, lines: pa.Array, rows: np.ndarray, base: Matches) -> Matches:
        """``base`` with the lines where ``rows`` is true matched again by ``re``."""
        index = np.flatnonzero(rows)
        texts = lines.take(pa.array(index)).to_pylist()
        search = self.pattern.search
        found = [search(text) for text in texts]
        unmatched = base.unmatched.copy()
        unmatched[index] = [m is None for m in found]
        columns = {}
        for name in self.names:
            values = [m.group(name) if m is not None else None for m in found]
            if len(index) == len(lines):
                columns[name] = pa.array(values, pa.large_string())
                continue
            # Scatter the re results into the RE2 column: pc.replace_with_mask fills the masked rows in order.
            columns[name] = pc.replace_with_mask(
                base.columns[name], pa.array(rows), pa.array(values, pa.large_string())
            )
        return Matches(columns, unmatched)


# -- fluentd's Ruby expressions ---------------------------------------------------------------
# A small translation of the Ruby (Onigmo) syntax fluentd's parsers use, kept here until the
# <parse> configuration code translates expressions itself.

_RUBY_FLAGS = {"i": "i", "m": "s", "x": "x"}  # Ruby's m is Python's DOTALL; ^ $ are always per line in Ruby
_RUBY_ESCAPES = {"h": "[0-9a-fA-F]", "H": "[^0-9a-fA-F]", "z": r"\Z", "Z": r"(?=\n?\Z)"}
_RUBY_CLASS_ESCAPES = {"h": "0-9a-fA-F"}


def _ruby_escape(text: str, i: int, in_class: bool) -> tuple[str, int]:
    """The Python for the escape at ``text[i]`` (a backslash), and the index after it."""
    ch = text[i + 1 : i + 2]
    if ch == "k" and text[i + 2 : i + 3] == "<":
        end = text.index(">", i)
        return f"(?P={text[i + 3 : end]})", end + 1
    table = _RUBY_CLASS_ESCAPES if in_class else _RUBY_ESCAPES
    return table.get(ch, "\\" + ch), i + 2


def ruby_to_python(expression: str) -> str:
    """A Ruby regular expression (``/.../imx`` or bare, as fluentd's ``expression``) as a Python pattern.

    ``(?<name>`` becomes ``(?P<name>``; with named groups a plain ``(`` does
    not capture (as in Ruby); ``\\h``, ``\\z``, ``\\Z``, ``\\k<name>`` and
    ``{,n}`` are rewritten; ``(?a)`` keeps ``\\d \\w \\s \\b`` ASCII as
    Ruby's are. POSIX brackets and ``\\p{...}`` are not translated.
    """
    flags = "a"
    match = re.fullmatch(r"/(.*)/([imx]*)", expression, re.DOTALL)
    if match:
        expression, flags = match.group(1), flags + "".join(_RUBY_FLAGS[f] for f in match.group(2))
    named = re.search(r"\(\?<[A-Za-z_]", expression) is not None
    out, i, in_class = [], 0, False
    while i < len(expression):
        ch = expression[i]
        if ch == "\\":
            piece, i = _ruby_escape(expression, i, in_class)
            out.append(piece)
            continue
        if in_class:
            in_class = ch != "]" or out[-1] in ("[", "[^")
        elif ch == "[":
            in_class = True
            if expression[i + 1 : i + 2] == "^":
                ch, i = "[^", i + 1
        elif ch == "(" and expression[i + 1 : i + 3] == "?<" and expression[i + 3 : i + 4] not in ("=", "!"):
            ch, i = "(?P<", i + 2
        elif ch == "(" and named and expression[i + 1 : i + 2] != "?":
            ch = "(?:"
        elif ch == "{" and expression[i + 1 : i + 2] == ",":
            ch = "{0"
        out.append(ch)
        i += 1
    return f"(?{flags})" + "".join(out)
