"""fluentd's nginx and apache2 expressions on a whole array of access-log lines, without a regexp engine.

:func:`split_access` gives, for a ``large_string`` array of lines, the text
of every named group of fluentd 1.14.6's ``nginx`` or ``apache2`` expression
(:data:`NGINX`, :data:`APACHE2`), and a mask of the lines it is not sure of.
Contract: for every line not masked, each group is byte for byte what
``ruby_regexp(expression).search(line)`` gives, a group that took no part
being null; masked lines hold nulls everywhere and are the caller's to send
through the expression itself (:class:`.vector_regexp.VectorRegexp`). A
line that does not match the expression at all is masked too.
:func:`match_access` does that: it gives what ``VectorRegexp.match`` gives
for every line.

How: the positions of the delimiters (``"`` ``␣`` and control bytes) are
found once over the block's bytes with numpy (``]`` in the few bytes after
``[``); each line is accepted only in one of the shapes below, where the
expression can match in one way only (so backtracking cannot choose
another), every check vectorised:

- ``R H U [T] "REQ" C S`` (2 quotes), ``... "REF" "AG"`` (6 quotes, the
  last ending the line), nginx also ``... "AG" "X"`` (8) and ``... "AG" X``;
  ``R H U C S`` without a space, ``T`` without ``]`` (and under 48 bytes),
  ``REQ REF AG X`` without ``"``: the line holds no other quote;
- no control byte (``\\t`` ``\\n`` ``\\r`` ... where ``\\s`` and ``\\S`` and
  ``$`` would differ) anywhere; apache2: no backslash before a quote (its
  ``\\"`` escapes);
- ``REQ`` starts with no space and holds one or two spaces (``GET /p HTTP/1.1``,
  ``GET /p``): method up to the first, path as the lazy group leaves it. A
  request without a space (``"-"``, binary junk) is masked: there, the greedy
  method can swallow its closing quote and the expression match elsewhere.

Each group is cut from the lines' own buffer: an array over it whose
offsets are the group's bounds, line after line, then a ``take``: no
regexp engine runs on the lines it splits, and the few it masks go to RE2
(benchmarks/README.md, log parsing).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .config import ParseConfigError
from .rubyre import ruby_regexp
from .vector_regexp import Matches, VectorRegexp

#: fluentd 1.14.6's expressions (parser_nginx.rb, parser_apache2.rb), as fluentd writes them.
NGINX = (
    r'/^(?<remote>[^ ]*) (?<host>[^ ]*) (?<user>[^ ]*) \[(?<time>[^\]]*)\] "(?<method>\S+)(?: +(?<path>[^\"]*?)'
    r'(?: +\S*)?)?" (?<code>[^ ]*) (?<size>[^ ]*)(?: "(?<referer>[^\"]*)" "(?<agent>[^\"]*)"'
    r"(?:\s+\"?(?<http_x_forwarded_for>[^\"]*)\"?)?)?$/"
)
APACHE2 = (
    r'/^(?<host>[^ ]*) [^ ]* (?<user>[^ ]*) \[(?<time>[^\]]*)\] "(?<method>\S+)(?: +(?<path>(?:[^\"]|\\")*?)'
    r'(?: +\S*)?)?" (?<code>[^ ]*) (?<size>[^ ]*)(?: "(?<referer>(?:[^\"]|\\")*)" "(?<agent>(?:[^\"]|\\")*)")?$/'
)
#: The expression and the named groups of each kind, in the order they stand in a line.
KINDS = {
    "nginx": (NGINX, ("remote", "host", "user", "time", "method", "path", "code", "size", "referer", "agent",
                      "http_x_forwarded_for")),
    "apache2": (APACHE2, ("host", "user", "time", "method", "path", "code", "size", "referer", "agent")),
}  # fmt: skip
_QUOTE, _SPACE, _CLOSE, _BACKSLASH = 0x22, 0x20, 0x5D, 0x5C
#: How far after ``[`` the ``]`` is looked for (nginx's and apache's time is 26 bytes): a line with a longer time
#: is left to the expression.
_TIME_REACH = 48


class UnknownAccessKind(ParseConfigError):
    """:func:`split_access` knows ``nginx`` and ``apache2`` only."""


@dataclass(frozen=True, slots=True)
class _Scan:
    """Where the delimiters of a block of lines are (positions relative to its first byte)."""

    data: np.ndarray  # uint8, the lines' bytes
    starts: np.ndarray  # int64, each line's first byte
    ends: np.ndarray  # int64, each line's end (exclusive)
    quotes: np.ndarray  # positions of '"'
    spaces: np.ndarray  # positions of ' '
    quote_index: np.ndarray  # per line (and one past the last): index in quotes of its first quote
    space_index: np.ndarray  # the same in spaces

    def windows(self, at: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
        """The ``width`` bytes from each of ``at`` (moved back to fit in the block), one row each, and where each
        starts."""
        data = self.data if len(self.data) >= width else np.concatenate([self.data, np.zeros(width, np.uint8)])
        start = np.clip(at, 0, len(data) - width)
        return np.lib.stride_tricks.sliding_window_view(data, width)[start], start

    def byte(self, at: np.ndarray) -> np.ndarray:
        """The bytes at ``at``."""
        return self.data.take(at, mode="clip")  # every use reads within the block, or where clipping cannot pass


def _pick(positions: np.ndarray, index: np.ndarray) -> np.ndarray:
    """``positions[index]``, the last where ``index`` is past the end (every use checks that it is not)."""
    if not len(positions):
        return np.full(len(index), -2, np.int64)
    return positions.take(index, mode="clip")


def _lines_holding(offsets: np.ndarray, positions: np.ndarray, count: int) -> np.ndarray:
    """The mask of the lines (bounded by ``offsets``) that hold any of ``positions``."""
    mask = np.zeros(count, dtype=bool)
    if len(positions):
        mask[np.searchsorted(offsets, positions, side="right") - 1] = True
    return mask


def _scan(lines: pa.LargeStringArray, kind: str) -> tuple[_Scan, np.ndarray]:
    """The delimiters of ``lines``, and the mask of lines no shape can hold (control bytes, escapes, nulls)."""
    count = len(lines)
    buffers = lines.buffers()
    offsets = np.frombuffer(buffers[1], np.int64)[lines.offset : lines.offset + count + 1]
    base = int(offsets[0])
    data = (
        np.frombuffer(buffers[2], np.uint8)[base : int(offsets[-1])]
        if buffers[2] is not None
        else np.zeros(0, np.uint8)
    )
    rel = offsets - base
    if not len(data):  # only empty lines: no delimiter, every line masked
        data = np.full(1, ord("x"), np.uint8)
    quotes = np.flatnonzero(data == _QUOTE)
    spaces = np.flatnonzero(data == _SPACE)
    scan = _Scan(
        data, rel[:-1], rel[1:], quotes, spaces,
        np.searchsorted(quotes, rel), np.searchsorted(spaces, rel),
    )  # fmt: skip
    unsure = ~lines.is_valid().to_numpy(zero_copy_only=False) if lines.null_count else np.zeros(count, dtype=bool)
    control = data < 0x0E  # \t \n \v \f \r: where \s, \S and $ see more than a space (and NUL..BS, for safety)
    if control.any():
        unsure |= _lines_holding(rel, np.flatnonzero(control), count)
    if kind == "apache2" and len(quotes):
        escaped = quotes[(quotes > 0) & (data[np.maximum(quotes - 1, 0)] == _BACKSLASH)]
        unsure |= _lines_holding(rel, escaped, count)
    return scan, unsure


Bounds = tuple[np.ndarray, np.ndarray]  # start and end (exclusive) of a group in each line


def _prefix(scan: _Scan, q1: np.ndarray) -> tuple[np.ndarray, list[Bounds]]:
    """``R H U [T] "``: the first three spaces, ``[`` after the third, the first ``]`` then just before ``␣"``."""
    first = scan.space_index[:-1]
    s1, s2, s3 = (_pick(scan.spaces, first + k) for k in range(3))
    window, at = scan.windows(s3 + 2, _TIME_REACH)  # the time and what follows
    closes = window == _CLOSE
    found = closes.argmax(axis=1)
    bracket = np.where(closes[np.arange(len(at)), found] & (at == s3 + 2), at + found, -2)  # the first ']' after '['
    ok = (first + 2 < scan.space_index[1:]) & (scan.byte(s3 + 1) == ord("[")) & (bracket == q1 - 2)
    ok &= scan.byte(q1 - 1) == _SPACE
    return ok, [(scan.starts, s1), (s1 + 1, s2), (s2 + 1, s3), (s3 + 2, q1 - 2)]


def _request(scan: _Scan, q1: np.ndarray, q2: np.ndarray) -> tuple[np.ndarray, list[Bounds], np.ndarray]:
    """``"REQ"`` with one or two spaces, not first: method and path as the lazy group cuts them.

    After ``(?<method>\\S+)``, `` +`` takes every space, then ``path`` stops
    where what is left is `` +\\S*``: before the last run of spaces, if there
    is non-space text between the two runs, else at the end of ``REQ``.
    Also the index (in the spaces) of the first space after ``REQ``.
    """
    at, after = np.searchsorted(scan.spaces, q1), np.searchsorted(scan.spaces, q2)
    inside = after - at
    first, last = _pick(scan.spaces, at), _pick(scan.spaces, after - 1)
    ok = ((inside == 1) | (inside == 2)) & (first != q1 + 1)
    apart = (inside == 2) & (last != first + 1)
    path = (np.where((inside == 2) & ~apart, last + 1, first + 1), np.where(apart, last, q2))
    return ok, [(q1 + 1, first), path], after


def _tail(
    scan: _Scan, quotes: list[np.ndarray], after: np.ndarray, kind: str
) -> tuple[np.ndarray, list[Bounds], list[np.ndarray]]:
    """``" C S`` then the end, or ``"REF" "AG"`` (nginx: and ``"X"`` or ``X``): the groups and which are absent."""
    q2, q3, q4, q5, q6 = quotes[1:]
    count = np.diff(scan.quote_index)
    ends = scan.ends
    gap = _pick(scan.spaces, after + 1)  # between code and size
    opening = _pick(scan.spaces, after) == q2 + 1
    short = opening & (count == 2) & (scan.space_index[1:] == after + 2)
    full = opening & (count >= 6) & (after + 2 < scan.space_index[1:]) & (_pick(scan.spaces, after + 2) == q3 - 1)
    full &= (scan.byte(q4 + 1) == _SPACE) & (q5 == q4 + 2)
    exact = full & (count == 6) & (q6 == ends - 1)
    groups = [(q2 + 2, gap), (gap + 1, np.where(short, ends, q3 - 1)), (q3 + 1, q4), (q5 + 1, q6)]
    absent = [short, short]
    if kind == "apache2":
        return short | exact, groups, absent
    # (?:\s+"?(?<x>[^"]*)"?)?$ after the agent: `` X`` (one space, X without quotes) or ``␣+"X"``
    bare = full & (count == 6) & (q6 + 1 < ends) & (scan.byte(q6 + 1) == _SPACE)
    bare &= (q6 + 2 == ends) | (scan.byte(q6 + 2) != _SPACE)
    start, end, quoted = q6 + 2, ends, np.zeros(len(ends), dtype=bool)
    eight = np.flatnonzero(full & (count == 8))
    if len(eight):  # "X" after spaces only, ending the line
        q7, q8 = (_pick(scan.quotes, scan.quote_index[eight] + k) for k in (6, 7))
        spaces = np.searchsorted(scan.spaces, q7) - np.searchsorted(scan.spaces, q6[eight])
        good = (q8 == ends[eight] - 1) & (q7 > q6[eight] + 1) & (spaces == q7 - q6[eight] - 1)
        rows, end = eight[good], ends.copy()
        quoted[rows], start[rows], end[rows] = True, q7[good] + 1, q8[good]
    groups.append((start, end))
    absent.append(~(bare | quoted))
    return short | exact | bare | quoted, groups, absent


def _fast(lines: pa.LargeStringArray, kind: str) -> tuple[_Scan, np.ndarray, list[Bounds], list[np.ndarray]]:
    """The lines in a shape it knows (``ok``), each group's bounds in them, and where a group is absent."""
    scan, unsure = _scan(lines, kind)
    quotes = [_pick(scan.quotes, scan.quote_index[:-1] + k) for k in range(6)]
    ok_prefix, prefix = _prefix(scan, quotes[0])
    ok_request, request, after = _request(scan, quotes[0], quotes[1])
    ok_tail, tail, absent = _tail(scan, quotes, after, kind)
    ok = ok_prefix & ok_request & ok_tail & ~unsure
    if kind == "apache2":
        del prefix[1]  # the ident field is no group
    bounds = prefix + request + tail
    return scan, ok, bounds, [~ok for _ in range(len(bounds) - len(absent))] + [a | ~ok for a in absent]


def _check(lines: pa.Array, kind: str) -> tuple[pa.LargeStringArray, tuple[str, ...]]:
    if kind not in KINDS:
        raise UnknownAccessKind(f"no access-log splitter for {kind!r} (known: {', '.join(KINDS)})")
    return (lines.cast(pa.large_string()) if lines.type != pa.large_string() else lines), KINDS[kind][1]


def split_access(lines: pa.Array, kind: str) -> tuple[dict[str, pa.Array], np.ndarray]:
    """The named groups of fluentd's ``kind`` expression (``"nginx"`` or ``"apache2"``) in each of ``lines``.

    ``lines``: a string or large_string array (a null line is masked).
    Returns one ``large_string`` column per group of :data:`KINDS` ``[kind]``
    (in that order) and ``unsure``, a boolean array: where it is false the
    columns hold exactly what ``ruby_regexp(expression).search(line)`` gives
    (null for a group that took no part); where it is true they hold nulls
    and the caller must run the expression on those lines (or call
    :func:`match_access`, which does).
    """
    lines, names = _check(lines, kind)
    if not len(lines) or lines.buffers()[2] is None:  # no line, or only empty ones
        return {name: pa.nulls(len(lines), pa.large_string()) for name in names}, np.ones(len(lines), dtype=bool)
    scan, ok, bounds, skips = _fast(lines, kind)
    return dict(zip(names, _cut(lines, scan.starts, bounds, skips), strict=True)), ~ok


def match_access(lines: pa.Array, kind: str) -> Matches:
    """What ``VectorRegexp(ruby_regexp(KINDS[kind][0])).match(lines)`` gives, the lines it is sure of split here.

    ``lines``: a string or large_string array without nulls. The others are
    matched by RE2 (by Python's ``re`` where a line holds a newline), their
    groups cut from the same buffer in the same pass. One thread; numpy and
    Arrow let go of the interpreter lock, so blocks can run on threads.
    """
    lines, names = _check(lines, kind)
    if not len(lines) or lines.buffers()[2] is None:
        return _matcher(kind).match(lines)
    scan, ok, bounds, skips = _fast(lines, kind)
    rows = np.flatnonzero(~ok)
    unmatched = np.zeros(len(lines), dtype=bool)
    patch = None
    if len(rows):
        starts, ends, missing, unmatched[rows] = _slow(lines.take(pa.array(rows)), kind)
        patch = (rows, starts + scan.starts[rows], ends + scan.starts[rows])
        for skip, absent in zip(skips, missing, strict=True):
            skip[rows] = absent
    return Matches(dict(zip(names, _cut(lines, scan.starts, bounds, skips, patch), strict=True)), unmatched)


@functools.cache
def _matcher(kind: str) -> VectorRegexp:
    return VectorRegexp(ruby_regexp(KINDS[kind][0]))


def _slow(lines: pa.LargeStringArray, kind: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The groups of ``lines`` by the expression itself: starts and ends (bytes into each line, a row per group),
    where each group is absent, and the lines it does not match."""
    matcher, names, count = _matcher(kind), KINDS[kind][1], len(lines)
    starts, ends = np.zeros((2, len(names), count), np.int64)
    missing = np.ones((len(names), count), dtype=bool)
    matched = np.zeros(count, dtype=bool)
    python = np.ones(count, dtype=bool)
    if matcher.re2 is not None:  # RE2 reads $ and . otherwise on a line holding a newline: re reads those
        python = pc.match_substring(lines, "\n").to_numpy(zero_copy_only=False)
        found = pc.extract_regex_span(lines, matcher.re2)
        matched = found.is_valid().to_numpy(zero_copy_only=False)
        for k, name in enumerate(names):
            spans = found.field(name)
            at = spans.values.offset + 2 * spans.offset
            pairs = np.frombuffer(spans.values.buffers()[1], np.int64)[at : at + 2 * count].reshape(count, 2)
            starts[k], ends[k] = pairs[:, 0], pairs[:, 0] + pairs[:, 1]
            missing[k] = ~spans.is_valid().to_numpy(zero_copy_only=False) | ~matched
    for i in np.flatnonzero(python).tolist():
        text = lines[i].as_py()
        found_re = matcher.pattern.search(text)
        matched[i] = found_re is not None
        for k, name in enumerate(names):
            start, end = found_re.span(name) if found_re is not None else (-1, -1)
            missing[k, i] = start < 0
            starts[k, i] = len(text[: max(start, 0)].encode())
            ends[k, i] = starts[k, i] + len(text[max(start, 0) : max(end, 0)].encode())
    return starts, ends, missing, ~matched


def _cut(
    lines: pa.LargeStringArray,
    line_starts: np.ndarray,
    bounds: list[Bounds],
    skips: list[np.ndarray],
    patch: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
) -> list[pa.Array]:
    """Each group's text, cut from the lines' buffer, null where ``skips`` says.

    Per group, one ``large_string`` array over that buffer whose values are
    the group and the text up to the group in the next line (its offsets
    are the bounds, in turn), and a ``take`` of every other value. A
    skipped line's bounds (which may be anything) become its start, as
    Arrow wants offsets in order. ``patch``: rows, and their starts and
    ends (a row per group), put in place of ``bounds`` there.
    """
    count = len(lines)
    base = np.frombuffer(lines.buffers()[1], np.int64)[lines.offset]  # bounds count from the first line
    every_other = np.arange(0, 2 * count, 2, dtype=np.int64)
    columns = []
    for k, ((start, end), skip) in enumerate(zip(bounds, skips, strict=True)):
        if skip.all():
            columns.append(pa.nulls(count, pa.large_string()))
            continue
        offsets = np.empty(2 * count, np.int64)
        np.add(start, base, out=offsets[0::2])
        np.add(end, base, out=offsets[1::2])
        if patch is not None:
            rows, starts, ends = patch
            offsets[2 * rows], offsets[2 * rows + 1] = starts[k] + base, ends[k] + base
        if skip.any():
            offsets.reshape(count, 2)[skip] = line_starts[skip, None] + base
        pieces = pa.Array.from_buffers(
            pa.large_string(), 2 * count - 1, [None, pa.py_buffer(offsets), lines.buffers()[2]]
        )
        columns.append(pieces.take(pa.array(every_other, mask=skip) if skip.any() else pa.array(every_other)))
    return columns
