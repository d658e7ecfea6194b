"""The Forward server's configuration and its defaults, held here once."""

from __future__ import annotations

from dataclasses import dataclass

from windvane.connectors.address import ListenerConfig
from windvane.connectors.limits import Limits


@dataclass(frozen=True)
class ForwardConfig(ListenerConfig):
    """Where the Forward server listens (fluentd's in_forward port by default), its shared key
    (None: no handshake) and the size limits of one message.

    ``chunk_size_limit`` bounds the bytes of one message, ``decompressed_size_limit``
    the decompressed entries of one CompressedPackedForward message; by default
    only the memory budget bounds those (see :func:`connectors.budget.inflate_limit`).
    """

    port: int = 24224
    shared_key: str | None = None
    chunk_size_limit: int = 64 << 20
    decompressed_size_limit: int = Limits.memory_budget
