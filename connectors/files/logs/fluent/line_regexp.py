"""A fluentd regexp (``expression``) matched against lines as in_tail matches it: over each line's UTF-8 bytes.

in_tail hands the parser binary strings, so ``.`` and ``[^ ]`` take one
byte, not one character: a group may end inside a character (its bytes
are then kept, those that are not UTF-8 written ``\\xHH``). On a line of
ASCII characters bytes and characters are the same thing, so those lines
run on :class:`.vector_regexp.VectorRegexp` (RE2 over the whole Arrow
array, the pattern read with ASCII ``\\d \\w \\s``), or for fluentd's nginx
and apache2 expressions on :func:`.access_split.match_access`, which gives
the same groups at a CSV reader's pace; the other lines, and
every line when RE2 cannot run the pattern as ``re`` does, run on a bytes
pattern with ``re``, line by line.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .access_split import KINDS, match_access
from .rubyre import ruby_regexp
from .vector_regexp import Matches, VectorRegexp

#: A regexp's named groups of one record, in the order of its names: bytes, or None for a group that took no part.
Groups = tuple[bytes | None, ...]

ACCESS_KINDS = {expression: kind for kind, (expression, _) in KINDS.items()}


class LineRegexp:
    """``match(lines)``: ``expression``'s named groups in each line, as fluentd's regexp parser finds them.

    ``names``: the named groups, in the order of the expression.
    """

    def __init__(self, expression: str, *, ignorecase: bool = False, multiline: bool = False) -> None:
        self.bytes_pattern = ruby_regexp(expression, ignorecase=ignorecase, multiline=multiline, binary=True)
        self.names = list(self.bytes_pattern.groupindex)
        self.vector: VectorRegexp | None = None
        # fluentd's nginx and apache2 expressions: their ASCII lines cut without a regexp engine
        self.access_kind = None if ignorecase or multiline else ACCESS_KINDS.get(expression)
        if self.names:
            text = ruby_regexp(expression, ignorecase=ignorecase, multiline=multiline)
            vector = VectorRegexp(text)
            self.vector = vector if vector.engine == "re2" else None

    @property
    def engine(self) -> str:
        """``"re2"`` (ASCII lines on RE2, the others on ``re``) or ``"python"`` (every line on ``re``)."""
        return "re2" if self.vector is not None else "python"

    def match(self, lines: pa.Array) -> Matches:
        """The named groups of each of ``lines`` (a ``large_string`` array without nulls), null where absent."""
        if self.vector is None:
            return self.match_bytes(lines)
        ascii_lines = pc.string_is_ascii(lines)
        if ascii_lines.false_count == 0:
            return self._ascii(lines)
        fast = ascii_lines.to_numpy(zero_copy_only=False)
        slow = ~fast
        found = self._ascii(lines.filter(ascii_lines))
        other = self.match_bytes(lines.filter(pa.array(slow)))
        unmatched = np.empty(len(lines), dtype=bool)
        unmatched[fast], unmatched[slow] = found.unmatched, other.unmatched
        columns = {name: _merge(fast, found.columns[name], other.columns[name]) for name in self.names}
        return Matches(columns, unmatched)

    def _ascii(self, lines: pa.Array) -> Matches:
        """The groups of ASCII ``lines``: cut by :mod:`.access_split` for its expressions, else RE2."""
        if self.access_kind is not None:
            return match_access(lines, self.access_kind)
        assert self.vector is not None
        return self.vector.match(lines)

    def match_bytes(self, lines: pa.Array) -> Matches:
        """What :meth:`match` gives, found by ``re`` on each line's bytes (the way for lines RE2 cannot take)."""
        search, numbers = self.bytes_pattern.search, [self.bytes_pattern.groupindex[name] for name in self.names]
        missing = (None,) * len(numbers)
        found: list[Groups] = []
        unmatched = np.zeros(len(lines), dtype=bool)
        for i, line in enumerate(lines.cast(pa.large_binary()).to_pylist()):
            match = search(line)
            if match is None:
                unmatched[i] = True
                found.append(missing)
            else:
                found.append(match.group(*numbers) if len(numbers) > 1 else (match.group(numbers[0]),))
        return Matches(text_columns(self.names, found), unmatched)


def _merge(first: np.ndarray, values: pa.Array, others: pa.Array) -> pa.Array:
    """One column: ``values`` in order where ``first`` is true, ``others`` in order where it is false."""
    order = np.empty(len(first), dtype=np.int64)
    order[first] = np.arange(len(values))
    order[~first] = len(values) + np.arange(len(others))
    return pa.concat_arrays([values, others.cast(values.type)]).take(pa.array(order))


def text_columns(names: list[str], found: list[Groups]) -> dict[str, pa.Array]:
    """The groups ``found`` (a tuple of bytes or None per record, in the order of ``names``) as a text column
    per name."""
    columns = list(zip(*found)) if found else [() for _ in names]
    return {name: _text(column) for name, column in zip(names, columns)}


def _text(values: tuple[bytes | None, ...]) -> pa.Array:
    """A group's bytes of each line as text (bytes that are not UTF-8 written ``\\xHH``)."""
    column = pa.array(values, pa.large_binary())
    try:
        return column.cast(pa.large_string())
    except pa.ArrowInvalid:
        text = [None if v is None else v.decode("utf-8", "backslashreplace") for v in values]
        return pa.array(text, pa.large_string())
