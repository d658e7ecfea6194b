"""fluentd's ``multiline`` parser, as in_tail runs it: events of several lines, each read by one regexp.

``format1`` ... ``formatN`` (each ``/.../``) are joined into one Ruby
regexp in multiline mode (``.`` matches a newline), matched against the
text of a whole event: its lines joined with ``\\n``. Its named groups are
the record's fields; time, null values and types as :mod:`..records` says
(the time key defaults to ``time``).

How lines make events (:meth:`MultilineParser.group`):

- with ``format_firstline``: a line it matches (searched, not anchored,
  in the line with its newline) starts an event, which takes the lines up
  to the next such line. Lines before the first one belong to no event:
  rejected one by one (fluentd drops them: ``got incomplete line before
  first line``). The last event is open until the file ends (``windvane
  import``), the flush interval passes or the tail stops (``windvane
  tail``), as in_tail flushes it then.
- without it: lines are added to the event until the regexp matches its
  text (with the newline of its last line); the lines after the last such
  event stay open. (fluentd's flush interval runs only with
  ``format_firstline``; ``windvane tail``'s runs in both modes.)

An event's text is searched as Ruby's ``match`` does (over its UTF-8
bytes, not anchored unless the regexp says ``^``); when the match leaves
text (past a newline), the rest is searched again and each match is one
more record of that event, as fluentd loops; a rest that does not match
rejects the event (``pattern not matched``), verbatim, after the records
already read from it. ``unmatched_lines`` has no effect, as under in_tail
(which replaces it with its own ``emit_unmatched_lines``). Lines ending
``\\r\\n`` keep their ``\\r`` inside an event, as in_tail's buffer does
(not at its end).
"""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...lines import Events, Lines, Rows, join_lines
from ...options import LogOptions
from ..config import ParseConfig, ParseConfigError
from ..line_regexp import Groups, text_columns
from ..records import PATTERN_NOT_MATCHED, RecordBuilder
from ..rubyre import ruby_regexp

#: fluentd reads format1 ... format20.
FORMAT_MAX = 20
#: What to do, said after fluentd's message when the section gives no formatN at all.
NO_FORMATS = (
    ": the multiline parser needs format1 (to formatN, joined into one regexp) with (?<name>...) groups, "
    "and format_firstline for where an event starts; e.g. format_firstline = '/^\\d{4}-\\d{2}-\\d{2}/' and "
    "format1 = '/^(?<time>\\S+ \\S+) (?<level>\\w+) (?<message>.*)/'"
)
BEFORE_FIRST_LINE = "got incomplete line before first line"


def _source(value: str, key: str) -> str:
    """The regexp between the slashes of option ``key``; fluentd's error when it has none."""
    if len(value) < 2 or value[0] != "/" or value[-1] != "/":
        raise ParseConfigError(f"format should be Regexp, need //, in {key}: '{value}'")
    return value[1:-1]


class MultilineParser:
    """``group(lines)`` makes events of lines; ``parse(events, options)`` reads each event's records."""

    def __init__(self, config: ParseConfig):
        if len(config.formats) > FORMAT_MAX:
            raise ParseConfigError(f"Invalid formatN found. N should be 1 - {FORMAT_MAX}")
        source = "".join(_source(f, f"format{n}") for n, f in enumerate(config.formats, 1))
        # fluentd's compat options rebuild the regexp with only their own flags (dropping its /m)
        flags = "" if config.ignorecase or config.multiline else "m"
        self.pattern = ruby_regexp(
            f"/{source}/{flags}", ignorecase=config.ignorecase, multiline=config.multiline, binary=True
        )
        if not self.pattern.groupindex:
            raise ParseConfigError(f"Invalid regexp '{source}': No named captures" + ("" if source else NO_FORMATS))
        self.firstline: re.Pattern[bytes] | None = None
        if config.format_firstline is not None:
            self.firstline = ruby_regexp(f"/{_source(config.format_firstline, 'format_firstline')}/", binary=True)
        self.names = list(self.pattern.groupindex)
        self.records = RecordBuilder(config)

    def group(self, lines: Lines) -> Events:
        """The events of ``lines`` (see the module docstring); the last one is open."""
        texts = lines.text.cast(pa.large_binary()).to_pylist()
        if self.firstline is None:
            starts, open_ = self._matched_runs(texts)
            return Events(_events(lines, np.array(starts, np.int64)), {}, open_)
        search = self.firstline.search
        first = np.fromiter((search(t + b"\n") is not None for t in texts), bool, len(texts))
        begins = np.flatnonzero(first)
        before = begins[0] if len(begins) else len(texts)
        stray = dict.fromkeys(range(before), BEFORE_FIRST_LINE)
        return Events(_events(lines, begins), stray, bool(len(begins)))

    def _matched_runs(self, texts: list[bytes]) -> tuple[list[int], bool]:
        """Without a first line: where each event starts (an event ends at the line whose text completes a
        match), and whether lines after the last such event make one more, open, event."""
        starts, start, text = [], 0, b""
        for i, line in enumerate(texts):
            text += line + b"\n"
            if self.pattern.search(text) is not None:
                starts.append(start)
                start, text = i + 1, b""
        return ([*starts, start], True) if start < len(texts) else (starts, False)

    def parse(self, events: Lines, options: LogOptions) -> Rows:
        """The records of each event (one or more; see the module docstring); those that fail are faults."""
        found: list[Groups] = []
        sources: list[int] = []
        faults: dict[int, str] = {}
        missing = (None,) * len(self.names)
        for k, text in enumerate(events.text.cast(pa.large_binary()).to_pylist()):
            for groups in self._records(text):
                if groups is None:
                    faults[len(found)] = PATTERN_NOT_MATCHED
                    groups = missing
                found.append(groups)
                sources.append(k)
        rows = self.records.to_rows(text_columns(self.names, found), len(found), faults, options)
        rows.sources = np.array(sources, np.int64)
        return rows

    def _records(self, text: bytes) -> list[Groups | None]:
        """Each match's groups, matching the rest again after each; None last if a rest does not match."""
        out: list[Groups | None] = []
        numbers = [self.pattern.groupindex[name] for name in self.names]
        while True:
            match = self.pattern.search(text)
            if match is None:
                return [*out, None]
            out.append(tuple(match.group(n) for n in numbers))
            rest = text[match.end() :]
            rest = rest[1:] if rest.startswith(b"\n") else rest
            if not rest or match.end() == 0:  # an empty match would loop for ever (fluentd's does)
                return out
            text = rest


def _events(lines: Lines, starts: np.ndarray) -> Lines:
    """The events starting at ``starts``, as in_tail's buffer holds them: lines that keep the ``\\r`` of a
    ``\\r\\n``, joined with ``\\n``, the last line's ``\\r`` chomped."""
    events = join_lines(lines, starts)
    return Lines(pc.replace_substring_regex(events.text, r"\r$", ""), events.numbers)
