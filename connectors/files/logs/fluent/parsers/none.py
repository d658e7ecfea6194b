"""fluentd's ``none`` parser: the whole line in one field, ``message_key`` (default ``message``).

Its time is the read time; with ``estimate_current_event false`` fluentd
gives no time and drops every line (``pattern not matched``), and so does
this. No types or null values apply (fluentd's none parser skips them).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from ...lines import Lines, Rows, add_faults
from ...options import LogOptions
from ..config import ParseConfig
from ..records import PATTERN_NOT_MATCHED


class NoneParser:
    """``parse(lines, options)``: each line as ``{message_key: line}``."""

    def __init__(self, config: ParseConfig):
        self.config = config

    def parse(self, lines: Lines, options: LogOptions) -> Rows:
        """One row per line, the read time and the line."""
        faults: dict[int, str] = {}
        if not self.config.estimate_current_event:
            add_faults(faults, np.ones(len(lines), dtype=bool), PATTERN_NOT_MATCHED)
        time = pa.array(np.full(len(lines), options.now or 0, dtype=np.int64))
        return Rows({"time": time, self.config.message_key: lines.text}, faults)
