"""The root of the errors raised by windvane's operations helpers (the private MariaDB server manager)."""

from __future__ import annotations


class OpsError(Exception):
    """Base class of ``windvane.ops`` errors; each message says what to do."""
