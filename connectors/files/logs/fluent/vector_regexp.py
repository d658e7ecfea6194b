"""A regular expression with named groups, run over a whole Arrow array of lines at once.

:class:`VectorRegexp` takes a Python pattern (``re`` syntax, named groups;
:func:`~.rubyre.ruby_regexp` translates fluentd's Ruby expressions) and gives, for
a ``large_string`` array of lines, one string column per named group and the
mask of lines that did not match: what ``re.search`` gives line by line,
exactly (a group that took no part in the match is null, as ``re`` gives
``None``; so is every group of a line that did not match).

Two paths, chosen once, up front (:attr:`VectorRegexp.engine`, and
:attr:`VectorRegexp.reason` when it is ``"python"``):

- ``"re2"``: the pattern is rewritten from its parse tree into RE2 syntax
  with the same meaning and run by ``pyarrow.compute.extract_regex_span``
  (which tells a group that took no part from an empty one), over blocks of
  lines on as many threads as there are cores (Arrow lets go of the
  interpreter lock); the spans become string columns with numpy, without
  going through Python objects. Lines holding a newline (where ``$`` and
  ``.`` differ between the engines) go to ``re``.
- ``"python"``: ``re`` on every line, for what RE2 cannot run or would run
  differently: backreferences, lookaround, atomic groups and possessive
  repeats, conditionals, case-insensitive matching (RE2 folds Unicode case
  where ``re.ASCII`` does not), Unicode ``\\d \\w \\s \\b``, named groups
  inside a repetition, or a pattern RE2 refuses (too large a repeat count).
"""

from __future__ import annotations

import os
import re
import re._constants as sre  # type: ignore[import-not-found]  # the parse tree of ``re`` is the one exact reading of a Python pattern
import re._parser as sre_parse  # type: ignore[import-not-found]  # as re._constants: not in the stubs
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .config import ParseConfigError

#: Lines per block handed to one thread; blocks run on ``os.cpu_count()`` threads.
BLOCK_LINES = 1 << 16


class RegexpError(ParseConfigError):
    """The expression is not a regular expression this module can run (with why)."""


@dataclass(frozen=True, slots=True)
class Matches:
    """The named groups of every line (``large_string``, null where absent), and the lines that did not match."""

    columns: dict[str, pa.Array]
    unmatched: np.ndarray  # bool, one per line


class Unsupported(RegexpError):
    """Raised while rewriting: RE2 cannot run this pattern as ``re`` does (the message says why)."""


@dataclass
class _Rewrite:
    """State of one rewrite of a parse tree into RE2 syntax."""

    ascii: bool
    names: dict[int, str]
    repeat_depth: int = 0
    non_boundary: bool = False  # \B: re (before 3.14) finds none in "", RE2 one


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


def _charset(rw: _Rewrite, items: list[tuple[Any, Any]]) -> str:
    out: list[str] = []
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


def _group(rw: _Rewrite, av: tuple[Any, ...]) -> str:
    group, add_flags, del_flags, body = av
    if add_flags or del_flags:
        raise Unsupported("flags set inside the pattern for a part of it")
    name = rw.names.get(group) if group else None
    if name and rw.repeat_depth:
        raise Unsupported(f"group {name!r} inside a repetition")
    text = _emit(rw, body)
    return f"(?P<{name}>{text})" if name else f"(?:{text})"


_COUNTS = {(0, sre.MAXREPEAT): "*", (1, sre.MAXREPEAT): "+", (0, 1): "?"}


def _repeat(rw: _Rewrite, op: object, av: tuple[Any, ...]) -> str:
    low, high, body = av
    lazy = "?" if op is sre.MIN_REPEAT else ""
    count = _COUNTS.get((low, high)) or (f"{{{low},}}" if high is sre.MAXREPEAT else f"{{{low},{high}}}")
    rw.repeat_depth += high != 1
    try:
        text = _emit(rw, body)
    finally:
        rw.repeat_depth -= high != 1
    single = len(body) == 1 and body[0][0] in (sre.LITERAL, sre.NOT_LITERAL, sre.ANY, sre.IN, sre.CATEGORY)
    return f"{text if single else f'(?:{text})'}{count}{lazy}"


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
            rw.non_boundary |= av is sre.AT_NON_BOUNDARY
            out.append(_AT[av])
        elif op is sre.BRANCH:
            out.append("(?:" + "|".join(_emit(rw, alt) for alt in av[1]) + ")")
        elif op is sre.SUBPATTERN:
            out.append(_group(rw, av))
        elif op in (sre.MAX_REPEAT, sre.MIN_REPEAT):
            out.append(_repeat(rw, op, av))
        else:
            raise Unsupported(f"{op} {av}")
    return "".join(out)


_VIEW_REACH = (1 << 31) - 16


def _twelve_bytes(data: np.ndarray, start: np.ndarray) -> np.ndarray:
    """The 12 bytes of ``data`` from each of ``start`` (zeros past its end), one row each."""
    if len(data) < 12:
        data = np.concatenate([data, np.zeros(12, np.uint8)])
    last = len(data) - 12
    rows: np.ndarray = np.lib.stride_tricks.sliding_window_view(data, 12)[np.minimum(start, last)]
    for i in np.flatnonzero(start > last).tolist():  # the few that start in the buffer's last 11 bytes
        tail = data[start[i] :]
        rows[i] = np.concatenate([tail, np.zeros(12 - len(tail), np.uint8)])
    return rows


def substrings(lines: pa.Array, spans: pa.FixedSizeListArray) -> pa.Array:
    """The parts of ``lines`` (``large_string``) that ``spans`` ([start, length] in bytes, or null) name.

    Built as a ``string_view`` array over the lines' own bytes (a view of up
    to 12 bytes holds them, a longer one points at them), then cast to
    ``large_string`` by Arrow: no Python object per value.
    """
    count = len(lines)
    buffers = lines.buffers()
    if not count or buffers[2] is None:
        return pa.array([None if span is None else "" for span in spans.to_pylist()], pa.large_string())
    if buffers[2].size > _VIEW_REACH:
        if count > 1 and lines.nbytes > _VIEW_REACH:  # views hold int32 offsets: cut in halves
            half = count // 2
            parts = [substrings(lines.slice(*cut), spans.slice(*cut)) for cut in ((0, half), (half, None))]
            return pa.concat_arrays(parts)
        lines = lines.take(pa.array(np.arange(count)))  # only this array's bytes, in a buffer of their own
        buffers = lines.buffers()
    line_starts = np.frombuffer(buffers[1], np.int64)[lines.offset : lines.offset + count]
    data = np.frombuffer(buffers[2], np.uint8)
    values = spans.values
    pairs = np.frombuffer(values.buffers()[1], np.int64)[values.offset : values.offset + 2 * count]
    pairs = pairs.reshape(count, 2).copy()
    valid = spans.is_valid().to_numpy(zero_copy_only=False) if spans.null_count else None
    if valid is not None:
        pairs[~valid] = 0  # a null span's slots hold nothing meaningful
    start, length = line_starts + pairs[:, 0], pairs[:, 1]
    views = np.zeros((count, 4), np.int32)
    views[:, 0] = length
    inline = views.view(np.uint8).reshape(count, 16)
    inline[:, 4:] = _twelve_bytes(data, start)
    inline[:, 4:][np.arange(12)[None, :] >= length[:, None]] = 0
    long = length > 12
    views[long, 2] = 0  # buffer index: the lines' data (after the 4-byte prefix kept in place)
    views[long, 3] = start[long]
    validity = pa.array(valid).buffers()[1] if valid is not None else None
    array = pa.Array.from_buffers(pa.string_view(), count, [validity, pa.py_buffer(views), buffers[2]])
    return array.cast(pa.large_string())


def to_re2(pattern: re.Pattern[str]) -> tuple[str, _Rewrite]:
    """``pattern`` in RE2 syntax with the same meaning on lines without a newline, and what the rewrite saw.

    Raises :class:`Unsupported` (saying why) where RE2 would not match as ``re`` does.
    """
    if pattern.flags & re.IGNORECASE:
        raise Unsupported("case-insensitive matching (RE2 folds Unicode case, re.ASCII does not)")
    tree = sre_parse.parse(pattern.pattern, pattern.flags)
    rw = _Rewrite(ascii=bool(tree.state.flags & re.ASCII), names={v: k for k, v in pattern.groupindex.items()})
    text = _emit(rw, tree)
    return ("(?s)" if pattern.flags & re.DOTALL else "") + text, rw


class VectorRegexp:
    """``pattern``'s named groups for every line of an array (see the module's text for the two paths).

    ``threads``: how many blocks of lines RE2 runs at once (default: the
    cores); ``use_re2=False`` takes the ``re`` path whatever the pattern.
    """

    def __init__(self, pattern: str | re.Pattern[str], threads: int | None = None, *, use_re2: bool = True) -> None:
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
        self._empty_lines_to_re = False
        if not use_re2:
            self.reason = "asked for re"
            return
        if not hasattr(pc, "extract_regex_span"):
            self.reason = "pyarrow has no extract_regex_span (pyarrow 20 or later has)"
            return
        try:
            self.re2, rewrite = to_re2(self.pattern)
            self._empty_lines_to_re = rewrite.non_boundary
            pc.extract_regex_span(pa.array([""], pa.large_string()), self.re2)  # RE2 refuses what it cannot compile
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
        spans = {found.type.field(k).name: column for k, column in enumerate(found.flatten())}
        columns = {name: substrings(lines, spans[name]) for name in self.names}
        redo = pc.match_substring(lines, "\n").to_numpy(zero_copy_only=False)
        if self._empty_lines_to_re:
            redo |= pc.equal(pc.binary_length(lines), 0).to_numpy(zero_copy_only=False)
        if redo.any():
            return self._python(lines, redo, Matches(columns, unmatched))
        return Matches(columns, unmatched)

    def spans(self, lines: pa.Array) -> pa.StructArray | None:
        """RE2's ``[start, length]`` (bytes) of each named group in each line of ``lines`` (``large_string``): a
        struct, null where the line did not match (``flatten()`` gives each group with those nulls), a group null
        where it took no part; None where the ``re`` path would be taken (then ask :meth:`match`). For a caller
        that needs where a group is, not only its text."""
        if self.re2 is None or pc.any(pc.match_substring(lines, "\n")).as_py():
            return None
        if self._empty_lines_to_re and pc.any(pc.equal(pc.binary_length(lines), 0)).as_py():
            return None
        return self._extract(lines)

    def _extract(self, lines: pa.Array) -> pa.StructArray:
        assert self.re2 is not None
        blocks = [lines.slice(start, BLOCK_LINES) for start in range(0, len(lines), BLOCK_LINES)]
        if len(blocks) < 2 or self.threads < 2:
            return pc.extract_regex_span(lines, self.re2)
        with ThreadPoolExecutor(self.threads) as pool:
            parts = list(pool.map(lambda block: pc.extract_regex_span(block, self.re2), blocks))
        return pa.concat_arrays(parts)

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
