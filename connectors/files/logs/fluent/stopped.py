"""Where a line stopped matching a fluentd expression: the top-level fields it matches, and the first it does not.

fluentd says only ``pattern not matched``. A line the expression does not
match is matched again against the expression cut just after each of its
top-level named groups (with the group's quantifier): ``^(?<time>...) (?<level>...)``
cut after ``time``, after ``level``, ... A line that matches a longer cut
matches every shorter one, so the lines are matched against the cuts in
turn, from the first, each cut only against the lines that matched the one
before. The reason then names the last field matched and the first that
is not::

    pattern not matched: the line matches the expression through field 'time', not through 'level'

This is cheap where it is asked: only rejected lines are matched again, on
the same engines as the whole expression (:class:`.line_regexp.LineRegexp`),
and most fail at an early cut. A group nested in another gives no cut, and
an expression with a ``|`` outside any group gives none at all (its cuts
would not be prefixes of it): its lines keep the bare reason.
"""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa

from .config import ParseConfigError
from .line_regexp import LineRegexp
from .records import PATTERN_NOT_MATCHED
from .rubyre import split_flags

_NAMED = re.compile(r"\(\?<([A-Za-z_]\w*)>")
_QUANTIFIER = re.compile(r"(?:[?*+]|\{\d*,?\d*\})[?+]?")


def field_cuts(source: str) -> list[tuple[str, int]]:
    """``(name, end)`` of each top-level named group of the Ruby regexp ``source`` (``end``: just after the group
    and its quantifier), in order; none when a ``|`` stands outside every group."""
    found: list[tuple[str, int]] = []
    opened: list[str | None] = []  # the name of each group open at this point (None: not a named group)
    i = 0
    while i < len(source):
        c = source[i]
        if c == "\\":
            i += 2
        elif c == "[":
            i = _class_end(source, i)
        elif c == "(":
            named = _NAMED.match(source, i)
            opened.append(named.group(1) if named else None)
            i += 1
        elif c == ")":
            name = opened.pop() if opened else None
            i += 1
            if name is not None and not opened:
                quantifier = _QUANTIFIER.match(source, i)
                i = quantifier.end() if quantifier else i
                found.append((name, i))
        elif c == "|" and not opened:
            return []
        else:
            i += 1
    return found


def _class_end(source: str, i: int) -> int:
    """The index just after the character class opening at ``source[i]`` (a ``]`` first in it is literal)."""
    i += 1
    if source[i : i + 1] == "^":
        i += 1
    if source[i : i + 1] == "]":
        i += 1
    while i < len(source) and source[i] != "]":
        i += 2 if source[i] == "\\" else 1
    return i + 1


class WhereStopped:
    """``reasons(lines)``: why each of ``lines`` (which the whole expression does not match) is rejected, naming
    where it stopped matching (see the module)."""

    def __init__(self, expression: str, *, ignorecase: bool = False, multiline: bool = False) -> None:
        self.expression = expression
        self.options = {"ignorecase": ignorecase, "multiline": multiline}
        self._cuts: list[tuple[str, LineRegexp]] | None = None  # made when a line is first rejected

    @property
    def cuts(self) -> list[tuple[str, LineRegexp]]:
        """Each top-level field's name and the expression cut after it."""
        if self._cuts is None:
            source, _ = split_flags(self.expression)
            flags = self.expression[self.expression.rindex("/") + 1 :] if self.expression.startswith("/") else ""
            cuts = []
            for name, end in field_cuts(source):
                try:
                    cuts.append((name, LineRegexp(f"/{source[:end]}/{flags}", **self.options)))
                except ParseConfigError:  # a cut that is no regexp by itself (a comment of an x-flagged one)
                    continue
            self._cuts = cuts  # whole, at once: blocks parsed in threads share the parser
        return self._cuts

    def reasons(self, lines: pa.Array) -> list[str]:
        """The reason of each of ``lines`` (a ``large_string`` array)."""
        cuts = self.cuts
        if not cuts:
            return [PATTERN_NOT_MATCHED] * len(lines)
        reasons = [""] * len(lines)
        going = np.arange(len(lines))
        for k, (name, regexp) in enumerate(cuts):
            failed = regexp.match(lines.take(pa.array(going))).unmatched
            why = (
                f"{PATTERN_NOT_MATCHED}: the line matches the expression through field {cuts[k - 1][0]!r}, "
                f"not through {name!r}"
                if k
                else f"{PATTERN_NOT_MATCHED}: the line does not match the expression up to its first field {name!r}"
            )
            for i in going[failed].tolist():
                reasons[i] = why
            going = going[~failed]
            if not len(going):
                return reasons
        why = f"{PATTERN_NOT_MATCHED}: the line matches the expression through its last field {cuts[-1][0]!r}, not after it"
        for i in going.tolist():
            reasons[i] = why
        return reasons
