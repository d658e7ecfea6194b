"""windvane: the command line.

This package only wires the layers together (argument parsing, messages, exit
codes); the work is done in the neostore package.  Exit codes: 0 success,
1 failure (or "not running" for `db status`), 2 bad input or a missing
prerequisite (among them a store that does not exist: commands that only
read, and `store pack`, never create one), 3 `import` quarantined rows
(without --allow-rejects).
"""

from __future__ import annotations

from windvane.cli import cli, main

__all__ = ["cli", "main"]
