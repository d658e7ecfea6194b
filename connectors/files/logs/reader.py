"""Log files as :class:`connectors.files.Part` objects for ``windvane import`` and ``windvane tail``.

A part is a block of whole lines parsed by its format. Its ``end`` is
``{"offset": bytes, "line": number}`` just after the block, so an import
resumed from it starts at the next line and keeps numbering lines as the
file does. A compressed file (:mod:`connectors.files.compression`) is read
decompressed; its offsets are the content's. The types of a JSON lines
file's first block (or the stream's, when the import knows them) hold for
the rest of the file, as the CSV reader does. A format whose records span
lines (fluentd's multiline) never has an event cut across parts: the open
last event of a block is read again with the next, and parsed at the end
of the file. A format whose blocks parse alone (:attr:`LogFormat.independent`)
has :data:`PARSE_THREADS` of them parsed at once, in threads (the parsers'
Arrow and numpy work runs without the interpreter lock), and its parts
yielded in order. The blank lines skipped in the parts yielded are counted
(:attr:`LogReader.blank_lines`) for the import's summary.
"""

from __future__ import annotations

import collections
import os
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, BinaryIO

import pyarrow as pa

from .. import Part, ReaderOptions
from ..compression import DataStream, open_data
from . import LogFormat, LogOptions, ParsedLines, log_format, parse_log

#: A line without a newline that grows past this is taken as it is (the log
#: is broken or not line-based); it is parsed, or rejected, like any line.
MAX_LINE = 16 << 20
#: Blocks of a format whose blocks parse alone that are parsed at once: one per core. A parser's own
#: vectorised steps leave a core idle between them (Python's glue, single-threaded Arrow calls); a
#: block beside it fills the gaps.
PARSE_THREADS = os.cpu_count() or 1


def read_lines(f: BinaryIO, limit: int, *, final: bool) -> bytes:
    """Up to ``limit`` bytes of whole lines from ``f``'s position (more if one line is longer, up to MAX_LINE).

    Stops after the last newline read and seeks back to it. ``final``: the
    file is complete, so a last line without a newline is a line too;
    otherwise it waits for its newline (b"" when that is all there is).
    """
    start = f.tell()
    block = f.read(limit)
    eof = len(block) < limit
    while not eof and b"\n" not in block and len(block) < MAX_LINE:  # one line longer than limit
        want = min(limit, MAX_LINE - len(block))
        more = f.read(want)
        eof = len(more) < want
        block += more
    cut = block.rfind(b"\n") + 1
    if (final and eof) or (cut == 0 and len(block) >= MAX_LINE):
        cut = len(block)
    f.seek(start + cut)
    return block[:cut]


def line_blocks(f: DataStream, limit: int) -> Iterator[bytes]:
    """Blocks of whole lines of the rest of ``f``, of about ``limit`` bytes (a line longer than MAX_LINE is cut).

    Reads forward only (what follows a block's last newline is kept for the
    next), so ``f`` may be a decompressing stream. The last line needs no newline.
    """
    carry = b""
    while True:
        chunk = f.read(limit)
        block = carry + chunk
        if not chunk:
            if block:
                yield block
            return
        cut = block.rfind(b"\n") + 1
        if cut == 0 and len(block) < MAX_LINE:  # one line longer than limit: read on
            carry = block
            continue
        cut = cut or len(block)
        carry = block[cut:]
        yield block[:cut]


def to_part(parsed: ParsedLines, end: Any, nbytes: int) -> Part:
    """``parsed`` as the part the import engine commits, ending at position ``end``."""
    rejected = [(r.time, r.raw, r.reason) for r in parsed.rejected]
    return Part(parsed.table, end, nbytes, rejected, raw=parsed.raw)


def known_types(table: pa.Table, types: dict[str, pa.DataType]) -> dict[str, pa.DataType]:
    """``types`` with the types of ``table``'s columns it does not have yet (``time`` aside)."""
    return {**{f.name: f.type for f in table.schema if f.name != "time"}, **types}


class LogReader:
    """``reader(start)`` yields the parts of a log file from position ``start`` (None: its beginning);
    ``blank_lines``: the blank lines skipped in the parts it yielded."""

    def __init__(self, path: str | Path, fmt: LogFormat, options: ReaderOptions):
        self.path = str(path)
        self.format = fmt
        self.block_bytes = options.block_bytes
        self.timezone = options.timezone
        self.types = dict(options.column_types)
        self.threads = PARSE_THREADS if fmt.independent else 1
        self.keep_blank = options.keep_blank_lines
        self.blank_lines = 0
        LogOptions(timezone=self.timezone)  # a bad zone fails now, not at the first block

    def __call__(self, start: dict[str, Any] | None) -> Iterator[Part]:
        offset, line = (int(start["offset"]), int(start["line"])) if start else (0, 1)
        written = os.stat(self.path).st_mtime_ns  # RFC 3164 years: the file's, not today's
        with open_data(self.path) as f:
            f.seek(offset)
            if self.threads > 1:
                yield from self._parts_at_once(f, offset, line, written)
            else:
                yield from self._parts(f, offset, line, written)

    def _parts(self, f: DataStream, offset: int, line: int, written: int) -> Iterator[Part]:
        """The parts of ``f`` from ``offset`` (line ``line``), each block parsed after the one before."""
        data = b""  # an open event (a format that groups lines) is read again with the next block
        for block in line_blocks(f, self.block_bytes):
            data += block
            # an event that grows past MAX_LINE is taken as it is, as a line is
            parsed = self._parse(data, line, written, final=len(data) >= MAX_LINE)
            done = len(data) - parsed.pending
            if done:
                offset, line = offset + done, line + data.count(b"\n", 0, done)
                yield self._to_part(parsed, {"offset": offset, "line": line}, done)
                data = data[done:]
        if data:  # the last event, complete at the end of the file
            parsed = self._parse(data, line, written, final=True)
            offset, line = offset + len(data), line + data.count(b"\n")
            yield self._to_part(parsed, {"offset": offset, "line": line}, len(data))

    def _parts_at_once(self, f: DataStream, offset: int, line: int, written: int) -> Iterator[Part]:
        """What :meth:`_parts` yields, ``self.threads`` blocks parsed at once (a format whose blocks parse alone)."""
        pool = ThreadPoolExecutor(self.threads, thread_name_prefix="windvane-parse")
        ahead: collections.deque[tuple[Future[ParsedLines], dict[str, int], int]] = collections.deque()
        try:
            for block in line_blocks(f, self.block_bytes):
                options = self._options(written)
                parsing = pool.submit(parse_log, self.format, block, options, first_line=line)
                offset, line = offset + len(block), line + block.count(b"\n")
                ahead.append((parsing, {"offset": offset, "line": line}, len(block)))
                if len(ahead) >= self.threads:
                    parsing, end, size = ahead.popleft()
                    yield self._to_part(parsing.result(), end, size)
            while ahead:
                parsing, end, size = ahead.popleft()
                yield self._to_part(parsing.result(), end, size)
        finally:
            pool.shutdown(wait=True, cancel_futures=True)  # closed early: the blocks under way are let finish

    def _options(self, written: int) -> LogOptions:
        return LogOptions(self.timezone, time.time_ns(), self.types, written, self.keep_blank)

    def _to_part(self, parsed: ParsedLines, end: dict[str, int], nbytes: int) -> Part:
        self.blank_lines += parsed.blank
        return to_part(parsed, end, nbytes)

    def _parse(self, data: bytes, line: int, written: int, *, final: bool) -> ParsedLines:
        parsed = parse_log(self.format, data, self._options(written), first_line=line, final=final)
        self.types = known_types(parsed.table, self.types)
        return parsed


def log_reader(name: str | LogFormat) -> Callable[[str, ReaderOptions], LogReader]:
    """``make(path, options)`` for ``connectors.files.formats.register``: a reader of log format ``name`` (or of the
    format itself)."""
    fmt = name if isinstance(name, LogFormat) else log_format(name)
    return lambda path, options: LogReader(path, fmt, options)
