"""``windvane tail``'s defaults, held here once.

Light on purpose (a dataclass only): the command line reads these defaults
for its options and ``--help`` without importing the follower and the
parsers (pyarrow).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TailConfig:
    """How ``windvane tail`` follows, parses and commits when not told otherwise.

    * ``format``: the log format's name when neither ``--format`` nor a
      parser says one.
    * ``commit_lines``: lines per commit at most.
    * ``commit_ms``: ms after a batch's first line was read that it is
      committed at the latest.
    * ``poll_ms``: ms between looks for new lines when there are none.
    * ``max_pending_bytes``: bytes read and not yet committed at most.
    * ``report_seconds``: seconds between progress lines at least.
    * ``flush_seconds``: seconds without a new line after which an open
      multi-line event is complete (fluentd's ``multiline_flush_interval``).
    * ``rotate_wait``: seconds a renamed (rotated) file must be quiet before
      the new file at the path is followed.
    """

    format: str = "jsonl"
    commit_lines: int = 10_000
    commit_ms: float = 1000
    poll_ms: float = 200
    max_pending_bytes: int = 16 << 20
    report_seconds: float = 5.0
    flush_seconds: float = 5.0
    rotate_wait: float = 5.0
