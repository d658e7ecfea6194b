"""How log lines are read: the zone of times written without one, the time now, known column types."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import pyarrow as pa

from windvane.ingest.times import check_zone, local_zone


@dataclass(frozen=True)
class LogOptions:
    """Options of every log format.

    ``timezone``: the IANA zone of times written without one (None: the
    format's default, :attr:`syslog_zone` or :attr:`json_zone`). ``now``: the read time in ns (None: the clock when the
    options are made); lines without a time of their own, and rejected
    lines, get it.
    ``written``: when the log was last written, ns (a file's mtime; None:
    ``now``): RFC 3164's missing year is chosen against it, so an old file
    gets its own year, not today's.
    ``types``: Arrow types of columns the destination stream already has,
    so that a JSON field keeps its type from one block to the next (a value
    that does not fit is rejected rather than the column changed).
    ``keep_blank``: blank lines (empty or whitespace only) are handed to the
    parser as fluentd's in_tail does, not skipped and counted
    (:attr:`..ParsedLines.blank`).
    """

    timezone: str | None = None
    now: int | None = None
    types: Mapping[str, pa.DataType] = field(default_factory=dict)
    written: int | None = None
    keep_blank: bool = False

    def __post_init__(self) -> None:
        if self.timezone:
            check_zone(self.timezone)
        if self.now is None:
            object.__setattr__(self, "now", time.time_ns())
        if self.written is None:
            object.__setattr__(self, "written", self.now)

    @property
    def now_ns(self) -> int:
        """The read time, ns: ``now`` as given, or the clock when the options were made."""
        assert self.now is not None  # set by __post_init__
        return self.now

    @property
    def written_ns(self) -> int:
        """When the log was last written, ns: ``written`` as given, or :attr:`now_ns`."""
        assert self.written is not None  # set by __post_init__
        return self.written

    @property
    def syslog_zone(self) -> str:
        """RFC 3164 times: ``timezone``, else this machine's zone (syslog daemons write local time)."""
        return self.timezone or local_zone()

    @property
    def json_zone(self) -> str:
        """ISO times without a zone in JSON lines: ``timezone``, else UTC, as ``windvane import`` reads files."""
        return self.timezone or "UTC"
