"""Which parser reads a log file: `windvane parsers --detect FILE`.

The file's first lines (`--sample` of them, at most :data:`SAMPLE_BYTES`,
decompressed as `import` reads them; blank lines are skipped as `import`
skips them) are parsed by every candidate: the shipped parsers
(:mod:`windvane.parsers`), windvane's own log formats and fluentd's parsers
that need no options (:data:`FLUENTD_DEFAULTS`). ``ltsv`` and ``logfmt``
make keys of any text, so a line counts as read by them only if it has
their shape (:data:`SHAPES`). The candidates are ranked by the lines they
read, then by the lines they give a time of their own (a parser that
stamps a line with the time it is read reads less of it), then by the
values they fill (the more specific parser first), then by name. Each
comes with the lines it rejected, with the parser's reason (``pattern not
matched`` says where the line stopped matching).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

import pyarrow.compute as pc

from windvane import parsers
from windvane.connectors.files.compression import open_data
from windvane.connectors.files.logs import LOG_FORMATS, LogFormat, LogOptions, RejectedLine, parse_log
from windvane.connectors.files.logs.fluent import ParseConfig, fluent_format
from windvane.connectors.files.logs.lines import line_count

#: The most bytes read for the lines sampled, whatever their number.
SAMPLE_BYTES = 8 << 20
#: fluentd's parsers that read lines with their defaults alone (regexp, csv, tsv and multiline need options;
#: none reads any line; msgpack reads binary streams).
FLUENTD_DEFAULTS = ("nginx", "apache2", "apache_error", "syslog", "json", "ltsv", "logfmt")
#: The lines a parser that reads nearly any text (as keys without values) really reads: by its format's type.
SHAPES = {
    "ltsv": r"^[^\t:]+:[^\t]*(?:\t[^\t:]+:[^\t]*)+$",  # two label:value fields or more, between tabs
    "logfmt": r"(?:^|\s)[\w.-]+=(?:\S|$)",  # a key=value pair
}


@dataclass(frozen=True)
class Candidate:
    """A parser to try: its name, how `import` and `tail` are told to use it, and the format itself."""

    name: str
    option: str  # "--parser NAME" or "--format NAME"
    format: LogFormat


@dataclass
class Result:
    """What one candidate made of the sample."""

    candidate: Candidate
    matched: int = 0  # lines read
    timed: int = 0  # lines read with a time of their own (not the time they were read)
    filled: int = 0  # values the rows hold (not null), the time aside
    missed: list[RejectedLine] = field(default_factory=list)  # the lines rejected, in file order


@dataclass
class Detection:
    """The sample (its non-blank lines and the blank ones skipped) and every candidate's result, best first."""

    sampled: int
    blank: int
    results: list[Result]


def candidates() -> list[Candidate]:
    """The shipped parsers, then windvane's own log formats, then fluentd's parsers that need no options."""
    found = [
        Candidate(name, f"--parser {name}", fluent_format(ParseConfig.from_toml(str(parsers.parser_path(name)))))
        for name in parsers.list_parsers()
    ]
    found += [Candidate(name, f"--format {name}", fmt) for name, fmt in LOG_FORMATS.items()]
    found += [Candidate(name, f"--format {name}", fluent_format(ParseConfig(name))) for name in FLUENTD_DEFAULTS]
    return found


def sample(path: str, lines: int) -> bytes:
    """The first ``lines`` lines of ``path`` (decompressed), whole, at most :data:`SAMPLE_BYTES` of them (one
    longer line is taken cut)."""
    with open_data(path) as f:
        data = f.read(SAMPLE_BYTES)
    end, seen = 0, 0
    while seen < lines:
        newline = data.find(b"\n", end)
        if newline < 0:
            if len(data) < SAMPLE_BYTES or not end:  # the file's last line, or one line past the bytes read
                end = len(data)
            break
        end, seen = newline + 1, seen + 1
    return data[:end]


def detect(path: str, lines: int) -> Detection:
    """Every candidate's result on the first ``lines`` lines of ``path``, best first (see the module)."""
    block = sample(path, lines)
    now = time.time_ns()
    options = LogOptions(now=now, written=os.stat(path).st_mtime_ns)
    results, blank = [], 0
    for candidate in candidates():
        parsed = parse_log(candidate.format, block, options)
        blank = parsed.blank
        table = parsed.table
        shape = SHAPES.get(candidate.format.name.removeprefix("fluent:"))
        if shape is not None and table.num_rows:
            table = table.filter(pc.match_substring_regex(parsed.lines, shape))
        rejected = {r.line for r in parsed.rejected}
        result = Result(candidate, missed=parsed.rejected)
        result.matched = min(table.num_rows, line_count(block) - blank - len(rejected))
        result.timed = int(pc.sum(pc.not_equal(table["time"], now)).as_py() or 0) if table.num_rows else 0
        result.filled = sum(len(table[name]) - table[name].null_count for name in table.column_names if name != "time")
        results.append(result)
    results.sort(key=lambda r: (-r.matched, -r.timed, -r.filled, r.candidate.name))
    return Detection(line_count(block) - blank, blank, results)
