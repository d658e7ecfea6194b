"""The `windvane` command line: the root group and, one module per command family, the commands it holds.

Importing this package registers every command on the root group; each
command imports the heavy libraries it needs only when it runs.
"""

from __future__ import annotations

from windvane.cli import arrays, db, export, imports, info, parsers, serve, store, streams  # noqa: F401  (registers)
from windvane.cli.root import cli, main

__all__ = ["cli", "main"]
