"""The `windvane` command line: the root group and, one module per command family, the commands it holds.

The root group imports a command's module when the command is named
(root.COMMAND_MODULES), and each command imports the heavy libraries it
needs only when it runs: starting `windvane` loads only what it runs.
"""

from __future__ import annotations

from windvane.cli.root import cli, main

__all__ = ["cli", "main"]
