"""The root of the errors raised by windvane's operations helpers (the private MariaDB server manager)."""

from __future__ import annotations


class OpsError(Exception):
    """Base class of ``windvane.ops`` errors; each message says what to do."""


class ServerError(OpsError):
    """A private MariaDB server could not be started, stopped or queried."""


class ServerNotFoundError(ServerError):
    """The MariaDB server programs (mariadbd, mariadb-install-db) are not installed."""


class ServerConfigError(ServerError):
    """The caller asked for something unusable: a bad data directory or setting."""


class ServerStartError(ServerError):
    """mariadbd or mariadb-install-db failed; the message ends with their log."""


class ServerTimeoutError(ServerError):
    """The server did not become ready, or did not exit, within the time allowed."""


class ClusterError(ServerError):
    """A Galera cluster cannot form or a node cannot join it: no node to join, a node that left during its start."""
