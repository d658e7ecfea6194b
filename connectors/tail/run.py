"""The loop of ``windvane tail``: read lines as they come, parse them, commit them with the position.

Lines are committed in batches: every ``commit_lines`` lines, or
``commit_ms`` after the first line of a batch was read, or when
``max_pending_bytes`` are waiting, whichever comes first (memory stays
bounded however fast the file grows). Each commit stores the rows and the
position after the last of them together (the ``commit`` function given),
so a follower restarted after a kill -9 resumes exactly after the last
committed line. A move to another file with nothing to commit (a rotation)
commits the new position alone. Setting ``stop`` reads the whole lines
already in the file once more (up to ``max_pending_bytes``), commits all
that was read and returns.

A format whose records span lines (fluentd's multiline) leaves its open
last event uncommitted (the position stays before it) until the next
event starts, or no line has come for ``flush_seconds``, or the tail
stops (in_tail's ``multiline_flush_interval`` and shutdown): then it is
parsed as complete. A move to another file completes it too.

Blank lines are skipped and counted (the progress line says how many)
unless ``keep_blank_lines`` hands them to the parser.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from windvane.connectors.files import Part
from windvane.connectors.files.logs import LogFormat, LogOptions, log_format, parse_log
from windvane.connectors.files.logs.reader import MAX_LINE, known_types, to_part

from .config import TailConfig
from .follow import Chunk, FilePosition, Follower

#: ``commit(parts, position)`` stores ``parts`` and ``position`` (plain data) in one transaction;
#: returns (rows stored, rows quarantined).
Commit = Callable[[list[Part], dict[str, Any]], tuple[int, int]]


@dataclass(frozen=True)
class TailSettings:
    """How ``windvane tail`` reads and commits; see the module docstring (the defaults: :class:`.config.TailConfig`)."""

    format: str | LogFormat  # a format's name, or the format (a fluentd parser: logs.fluent.fluent_format)
    timezone: str | None = None
    commit_lines: int = TailConfig.commit_lines
    commit_ms: float = TailConfig.commit_ms
    poll_ms: float = TailConfig.poll_ms
    max_pending_bytes: int = TailConfig.max_pending_bytes
    report_seconds: float = TailConfig.report_seconds  # at most one progress line per this many seconds
    types: dict[str, pa.DataType] = field(default_factory=dict)  # the stream's column types, if it exists
    # an open multi-line event with no line after it this long is complete
    flush_seconds: float = TailConfig.flush_seconds
    keep_blank_lines: bool = False  # blank lines go to the parser (fluentd's in_tail), not skipped and counted

    def __post_init__(self) -> None:
        if not isinstance(self.format, LogFormat):
            log_format(self.format)  # an unknown format or zone fails before anything is read
        LogOptions(timezone=self.timezone)


class StopFlag:
    """When the loop should stop, for a signal handler to set: setting it takes no lock.

    A :class:`threading.Event` set in a handler can deadlock: the handler
    runs in the main thread, and if the signal lands while that thread is
    inside the event's ``wait`` holding its lock, ``set`` waits for that
    lock for ever. Waiting here is sleeping in short steps instead.
    """

    def __init__(self) -> None:
        self._set = False

    def set(self) -> None:
        """Ask the loop to stop (safe from a signal handler)."""
        self._set = True

    def is_set(self) -> bool:
        """Whether a stop was asked for."""
        return self._set

    def wait(self, timeout: float) -> bool:
        """Sleep up to ``timeout`` seconds, ending within 10 ms once set; whether it is set."""
        end = time.monotonic() + timeout
        while not self._set and (left := end - time.monotonic()) > 0:
            time.sleep(min(left, 0.01))
        return self._set


@dataclass
class TailTotals:
    """What a run of the loop committed."""

    rows: int = 0
    rejected: int = 0
    lines: int = 0
    blank: int = 0  # blank lines skipped
    commits: int = 0
    position: FilePosition | None = None


class Tailer:
    """Runs the follow-parse-commit loop of one file; ``echo`` prints progress lines."""

    def __init__(
        self,
        follower: Follower,
        settings: TailSettings,
        commit: Commit,
        echo: Callable[[str], None] = print,
        committed: FilePosition | None = None,
    ):
        self.follower = follower
        self.settings = settings
        self.commit = commit
        self.echo = echo
        self.types = dict(settings.types)
        self.totals = TailTotals(position=committed)
        self._pending: list[Part] = []
        self._pending_lines = 0
        self._pending_blank = 0
        self._pending_bytes = 0
        self._first_at = 0.0
        self._open: Chunk | None = None  # the bytes of an open event, as a chunk ending where it ends
        self._open_at = 0.0  # when a line last came while an event was open
        self._reported = (-float("inf"), 0, 0, 0)  # when, rows, rejected, blank at the last progress line

    def run(self, stop: StopFlag | threading.Event) -> TailTotals:
        """Follow until ``stop`` is set; then commit what was read and return the totals."""
        s = self.settings
        while True:
            stopping = stop.is_set()
            chunk = self.follower.read(max(64 << 10, s.max_pending_bytes - self._pending_bytes))
            if chunk is not None:
                self._read(chunk)
            now = time.monotonic()
            if self._open is not None and (stopping or now - self._open_at >= s.flush_seconds):
                self._parse(self._open, final=True)
            due = self._pending and (
                stopping
                or self._pending_lines >= s.commit_lines
                or self._pending_bytes >= s.max_pending_bytes
                or now - self._first_at >= s.commit_ms / 1000
            )
            position = self.follower.position
            if due:
                self._commit(self._pending[-1].end)
            elif position is not None and not self._pending and self._open is None and position != self.totals.position:
                self._commit(position.to_dict())  # read on with nothing to commit: the new position is stored
            if stopping:
                self._report(force=True)
                return self.totals
            if chunk is None:
                stop.wait(s.poll_ms / 1000)

    def _read(self, chunk: Chunk) -> None:
        """Parse ``chunk`` after the open event, if any (of the same file: another file's completes it first)."""
        held = self._open
        if held is not None and (held.position.dev, held.position.ino) != (chunk.position.dev, chunk.position.ino):
            self._parse(held, final=True)
        elif held is not None:
            chunk = Chunk(held.data + chunk.data, held.first_line, chunk.position, chunk.path)
        self._open_at = time.monotonic()
        self._parse(chunk, final=len(chunk.data) >= MAX_LINE)  # an event past MAX_LINE is taken as it is

    def _parse(self, chunk: Chunk, *, final: bool) -> None:
        options = LogOptions(
            self.settings.timezone, time.time_ns(), self.types, keep_blank=self.settings.keep_blank_lines
        )
        parsed = parse_log(self.settings.format, chunk.data, options, first_line=chunk.first_line, final=final)
        self.types = known_types(parsed.table, self.types)
        self._open, done = None, len(chunk.data) - parsed.pending
        if parsed.pending:  # the open event: the position committed stays before it
            rest = chunk.data[done:]
            self._open = Chunk(rest, chunk.position.line - rest.count(b"\n"), chunk.position, chunk.path)
        if not done:
            return
        end = dataclasses.replace(
            chunk.position,
            offset=chunk.position.offset - parsed.pending,
            line=chunk.first_line + chunk.data.count(b"\n", 0, done),
        )
        if not self._pending:
            self._first_at = time.monotonic()
        self._pending.append(to_part(parsed, end.to_dict(), done))
        self._pending_lines += parsed.table.num_rows + len(parsed.rejected)
        self._pending_blank += parsed.blank
        self._pending_bytes += done

    def _commit(self, position: dict[str, Any]) -> None:
        rows, rejected = self.commit(self._pending, position)
        t = self.totals
        t.rows, t.rejected, t.lines, t.commits = (
            t.rows + rows,
            t.rejected + rejected,
            t.lines + self._pending_lines,
            t.commits + 1,
        )
        t.blank += self._pending_blank
        t.position = FilePosition.from_dict(position)
        self._pending, self._pending_lines, self._pending_blank, self._pending_bytes = [], 0, 0, 0
        self._report()

    def _report(self, force: bool = False) -> None:
        when, rows, rejected, blank = self._reported
        now = time.monotonic()
        t = self.totals
        if (t.rows, t.rejected, t.blank) == (rows, rejected, blank) and not force:
            return
        if force or now - when >= self.settings.report_seconds:
            where = f"line {t.position.line}, offset {t.position.offset}" if t.position else "nothing read"
            skipped = f", {t.blank - blank:,} blank lines skipped ({t.blank:,} in all)" if t.blank else ""
            self.echo(
                f"committed {t.rows - rows:,} rows, {t.rejected - rejected:,} rejected "
                f"({t.rows:,} and {t.rejected:,} in all){skipped}; at {where}"
            )
            self._reported = (now, t.rows, t.rejected, t.blank)
