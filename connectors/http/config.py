"""The HTTP server's configuration and its defaults, held here once."""

from __future__ import annotations

from dataclasses import dataclass

from windvane.connectors.address import ListenerConfig
from windvane.connectors.limits import Limits


@dataclass(frozen=True)
class HttpConfig(ListenerConfig):
    """Where the HTTP server listens (fluentd's in_http port by default) and the size limits of one request.

    ``body_size_limit`` bounds a request's body as sent (413 past it),
    ``decompressed_size_limit`` its decompressed size; by default only the
    memory budget bounds that (see :func:`connectors.budget.inflate_limit`).
    """

    port: int = 9880
    body_size_limit: int = 32 << 20
    decompressed_size_limit: int = Limits.memory_budget
