"""Whole lines of a log file as one Arrow string array, the bytes copied once.

Every parser starts here: :func:`split_lines` cuts a block of whole lines
into a ``large_string`` array over the block's buffer (the offsets are the
newline positions), strips the line endings (``\\n`` or ``\\r\\n``: one
copy of the bytes, by Arrow) and drops blank lines (the regex asked only of
lines that start like one). A line that is not valid UTF-8 cannot be a
string column; it is rejected, verbatim, with the byte at fault.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


@dataclass(frozen=True, slots=True)
class RejectedLine:
    """A line that could not be read as its format, kept verbatim with why.

    ``time``: nanoseconds since the epoch (UTC), the time the line was read
    (a line that cannot be parsed has no time of its own); ``raw``: the line
    as it is in the file, without its line ending; ``reason`` names the
    line number and the problem; ``line``: that number.
    """

    time: int
    raw: bytes
    reason: str
    line: int = 0


@dataclass(frozen=True, slots=True)
class Lines:
    """The non-blank, valid UTF-8 lines of a block, and their line numbers (``text``: the lines' bytes as they are
    when a format reads binary lines, see :func:`split_lines`)."""

    text: pa.LargeStringArray | pa.LargeBinaryArray
    numbers: np.ndarray  # int64, the line number of each

    def __len__(self) -> int:
        return len(self.text)

    def raw(self, i: int) -> bytes:
        """Line ``i`` as it was in the file (without its line ending)."""
        line = self.text[i].as_py()
        return line if isinstance(line, bytes) else line.encode()

    def take(self, keep: np.ndarray) -> Lines:
        """The lines where the boolean mask ``keep`` is true."""
        return Lines(self.text.filter(pa.array(keep)), self.numbers[keep])

    def pick(self, indices: np.ndarray) -> Lines:
        """The lines at ``indices`` (int, in that order; an index may repeat)."""
        return Lines(self.text.take(pa.array(indices, pa.int64())), self.numbers[indices])


@dataclass(frozen=True, slots=True)
class Events:
    """A block's lines grouped into events, by a format whose records span lines (fluentd's multiline).

    ``events``: each event's lines joined with ``\\n``, numbered by its
    first line (:func:`join_lines`); ``stray``: the index (in the lines) of
    each line that belongs to no event, and why (it is rejected as it is);
    ``open``: the last event may go on in lines not read yet.
    """

    events: Lines
    stray: dict[int, str]
    open: bool


def join_lines(lines: Lines, starts: np.ndarray) -> Lines:
    """The runs of ``lines`` from each index of ``starts`` (ascending) to the next (the last: to the end), each
    joined with ``\\n`` into one entry numbered by its first line; lines before ``starts[0]`` are in none."""
    offsets = np.append(starts, len(lines)).astype(np.int64)
    runs = pa.LargeListArray.from_arrays(pa.array(offsets), lines.text)
    return Lines(pc.binary_join(runs, pa.scalar("\n", pa.large_string())), lines.numbers[starts])


def line_count(block: bytes) -> int:
    """How many lines :func:`split_lines` cuts ``block`` into (a last line without ``\\n`` counts too)."""
    return block.count(b"\n") + (1 if block and block[-1] != 0x0A else 0)


def split_lines(
    block: bytes,
    *,
    first_line: int = 1,
    now: int,
    keep_blank: bool = False,
    keep_cr: bool = False,
    binary: bool = False,
) -> tuple[Lines, list[RejectedLine]]:
    """The lines of ``block`` (a last line without ``\\n`` counts too), and those that are not UTF-8.

    ``first_line`` is the number of the block's first line in its file;
    ``now`` the read time given to rejected lines. ``keep_blank``: blank
    lines are lines too (fluentd's in_tail parses them), not skipped.
    ``keep_cr``: the ``\\r`` of a ``\\r\\n`` ending stays (fluentd keeps it
    inside a multi-line event). ``binary``: the lines are bytes (a binary
    format: msgpack), none rejected for not being UTF-8, and only empty ones
    are blank.
    """
    data = np.frombuffer(block, np.uint8)
    ends = np.flatnonzero(data == 0x0A) + 1
    offsets = np.concatenate(([0], ends, [len(block)] if len(block) and block[-1] != 0x0A else [])).astype(np.int64)
    count = len(offsets) - 1
    chunks = pa.LargeBinaryArray.from_buffers(
        pa.large_binary(), count, [None, pa.py_buffer(offsets), pa.py_buffer(block)]
    )
    numbers = np.arange(first_line, first_line + count, dtype=np.int64)
    rejected: list[RejectedLine] = []
    stripped, lengths = _without_endings(chunks, data, offsets, len(ends), keep_cr)
    starts = offsets[:-1]
    if binary:
        lines = Lines(stripped, numbers)
        return (lines, rejected) if keep_blank else (lines.take(lengths > 0), rejected)  # empty: blank
    try:
        text = stripped.cast(pa.large_string())
    except pa.ArrowInvalid:
        valid = np.ones(count, dtype=bool)
        for i, line in enumerate(chunks.to_pylist()):
            try:
                line.decode()
            except UnicodeDecodeError as exc:
                valid[i] = False
                raw = line.removesuffix(b"\n").removesuffix(b"\r")
                rejected.append(
                    RejectedLine(
                        now,
                        raw,
                        f"line {numbers[i]}: not valid UTF-8 (byte 0x{line[exc.start]:02x} at column {exc.start + 1})",
                        int(numbers[i]),
                    )
                )
        text = stripped.filter(pa.array(valid)).cast(pa.large_string())
        numbers, starts, lengths = numbers[valid], starts[valid], lengths[valid]
    lines = Lines(text, numbers)
    if keep_blank:
        return lines, rejected
    blank = _blank(text, data, starts, lengths)
    return (lines.take(~blank) if blank.any() else lines), rejected


def _without_endings(
    chunks: pa.LargeBinaryArray, data: np.ndarray, offsets: np.ndarray, ended: int, keep_cr: bool
) -> tuple[pa.LargeBinaryArray, np.ndarray]:
    """``chunks`` (the lines with their endings; the first ``ended`` end with ``\\n``) without their ``\\n`` and,
    unless ``keep_cr``, the ``\\r`` before it; and the lengths left."""
    lengths = np.diff(offsets)
    lengths[:ended] -= 1
    stripped = pc.binary_slice(chunks.slice(0, ended), 0, -1)  # Arrow copies the lines, without their last byte
    if ended < len(chunks):  # the last line has no ending
        stripped = pa.concat_arrays([stripped, chunks.slice(ended)])
    if not keep_cr:
        nl = offsets[1 : ended + 1] - 1
        cr = np.zeros(len(chunks), dtype=bool)
        cr[:ended] = (lengths[:ended] > 0) & (data[np.maximum(nl - 1, 0)] == 0x0D)
        if cr.any():
            stripped = pc.if_else(pa.array(cr), pc.binary_slice(stripped, 0, -1), stripped)
            lengths -= cr
    return stripped, lengths


#: first bytes a blank line can start with: ASCII whitespace and separators, and any non-ASCII byte (Unicode spaces)
_MAYBE_BLANK = np.zeros(256, dtype=bool)
_MAYBE_BLANK[[0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x1C, 0x1D, 0x1E, 0x1F, 0x20]] = True
_MAYBE_BLANK[0x80:] = True


def _blank(text: pa.Array, data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Which lines of ``text`` (starting at ``starts`` in ``data``, ``lengths`` long) are blank: empty, or
    whitespace only (the regex asked only of those starting with a byte a space can start with)."""
    blank: np.ndarray = lengths == 0
    maybe = np.flatnonzero(~blank & _MAYBE_BLANK[data[np.minimum(starts, len(data) - 1)]])
    if len(maybe):
        found = pc.match_substring_regex(text.take(pa.array(maybe)), r"^\s*$").to_numpy(zero_copy_only=False)
        blank[maybe[found]] = True
    return blank


@dataclass(slots=True)
class Rows:
    """What a format makes of :class:`Lines`: columns for every line (``time`` first, int64 ns), and faults.

    ``faults`` maps the index of each row that cannot be stored to why
    (without its line number); the caller drops those rows and rejects the
    lines they were read from.
    """

    columns: dict[str, pa.Array]
    faults: dict[int, str]
    #: the line each row was read from, when it is not row i from line i (an event fluentd reads as several records)
    sources: np.ndarray | None = None


def fault_mask(faults: dict[int, str], count: int) -> np.ndarray:
    """A boolean mask, true at the faulty rows."""
    mask = np.zeros(count, dtype=bool)
    mask[list(faults)] = True
    return mask


def add_faults(faults: dict[int, str], mask: np.ndarray, reason: str | Callable[[int], str]) -> None:
    """Record ``reason(i)`` (or the text ``reason``) for each row ``i`` of ``mask`` not already at fault."""
    for i in np.flatnonzero(mask).tolist():
        if i not in faults:
            faults[i] = reason(i) if callable(reason) else reason
