"""What the network connectors allow a client: memory, connections, time. The defaults are held here, once.

* ``memory_budget``: bytes read from clients and not yet committed, shared by
  every Forward and HTTP connection (:mod:`connectors.budget`).
* ``max_connections``: connections open at once on one listener; more are
  closed at accept (:mod:`connectors.listener`).
* ``handshake_timeout``: seconds to complete the TLS handshake, and the
  Forward HELO/PING/PONG when a shared key is set.
* ``idle_timeout``: seconds a connection may stay open with nothing received
  and nothing owed to it (no message waiting for its commit). Five minutes:
  fluentd's in_forward never closes an idle connection and out_forward keeps
  one open between flushes (its buffers flush every 60 s by default) and
  waits up to 190 s for an ack (``ack_response_timeout``), so anything
  shorter than those would cut healthy keepalive connections. The same
  timeout closes idle HTTP keep-alive connections.
* ``header_timeout``: seconds an HTTP request's headers may take, from their
  first byte (in_http closes idle keep-alive sockets after 10 s).
* ``body_timeout``: seconds an HTTP request's body may take, once its headers
  are in; past it the request is answered 408 and the connection closed.
* ``frame_timeout`` and ``frame_min_rate``: a Forward message, once its first
  byte arrived, must be whole within ``frame_timeout`` seconds plus one
  second per ``frame_min_rate`` bytes received of it (the time the server
  itself held reading back is not counted); otherwise the connection is
  closed. A client trickling bytes thus cannot hold a connection (and its
  place under ``max_connections``) for ever, while a big chunk on a slow
  link is given the time its size needs at the minimum rate.
* ``trim_after``: seconds after the memory budget last held nothing that the
  memory freed since a burst is given back to the system
  (:func:`ingest.memory.give_back_memory`).
"""

from __future__ import annotations

from dataclasses import dataclass

from windvane.connectors.errors import ConnectorConfigError
from windvane.ingest.batch import PENDING_BYTES


@dataclass(frozen=True)
class Limits:
    """Limits of the Forward and HTTP servers; see the module docstring."""

    memory_budget: int = PENDING_BYTES
    max_connections: int = 1000
    handshake_timeout: float = 10.0
    idle_timeout: float = 300.0
    header_timeout: float = 10.0
    body_timeout: float = 60.0
    frame_timeout: float = 60.0
    frame_min_rate: int = 64 << 10
    trim_after: float = 10.0

    def __post_init__(self) -> None:
        for name in ("memory_budget", "max_connections", "frame_min_rate"):
            if getattr(self, name) < 1:
                raise ConnectorConfigError(f"{name} must be at least 1, not {getattr(self, name)}")
        seconds = ("handshake_timeout", "idle_timeout", "header_timeout", "body_timeout", "frame_timeout", "trim_after")
        for name in seconds:
            if not getattr(self, name) > 0:
                raise ConnectorConfigError(f"{name} must be a positive number of seconds, not {getattr(self, name)}")
