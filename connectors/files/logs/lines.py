"""Whole lines of a log file as one Arrow string array, without copying the bytes.

Every parser starts here: :func:`split_lines` cuts a block of whole lines
into a ``large_string`` array that shares the block's buffer (the offsets
are the newline positions), strips the line endings (``\\n`` or ``\\r\\n``)
and drops blank lines. A line that is not valid UTF-8 cannot be a string
column; it is rejected, verbatim, with the byte at fault.
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
    """The non-blank, valid UTF-8 lines of a block, and their line numbers."""

    text: pa.LargeStringArray
    numbers: np.ndarray  # int64, the line number of each

    def __len__(self) -> int:
        return len(self.text)

    def raw(self, i: int) -> bytes:
        """Line ``i`` as it was in the file (without its line ending)."""
        return self.text[i].as_py().encode()

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


def split_lines(
    block: bytes, *, first_line: int = 1, now: int, keep_blank: bool = False, keep_cr: bool = False
) -> tuple[Lines, list[RejectedLine]]:
    """The lines of ``block`` (a last line without ``\\n`` counts too), and those that are not UTF-8.

    ``first_line`` is the number of the block's first line in its file;
    ``now`` the read time given to rejected lines. ``keep_blank``: blank
    lines are lines too (fluentd's in_tail parses them), not skipped.
    ``keep_cr``: the ``\\r`` of a ``\\r\\n`` ending stays (fluentd keeps it
    inside a multi-line event).
    """
    data = np.frombuffer(block, np.uint8)
    ends = np.flatnonzero(data == 0x0A) + 1
    offsets = np.concatenate(([0], ends, [len(block)] if len(block) and block[-1] != 0x0A else [])).astype(np.int64)
    count = len(offsets) - 1
    binary = pa.LargeBinaryArray.from_buffers(
        pa.large_binary(), count, [None, pa.py_buffer(offsets), pa.py_buffer(block)]
    )
    numbers = np.arange(first_line, first_line + count, dtype=np.int64)
    rejected: list[RejectedLine] = []
    try:
        text = binary.cast(pa.large_string())
    except pa.ArrowInvalid:
        valid = np.ones(count, dtype=bool)
        for i, line in enumerate(binary.to_pylist()):
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
        text = binary.filter(pa.array(valid)).cast(pa.large_string())
        numbers = numbers[valid]
    text = pc.replace_substring_regex(text, r"\n$" if keep_cr else r"\r?\n$", "")
    lines = Lines(text, numbers)
    if keep_blank:
        return lines, rejected
    blank = pc.match_substring_regex(text, r"^\s*$").to_numpy(zero_copy_only=False)
    return (lines.take(~blank) if blank.any() else lines), rejected


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
