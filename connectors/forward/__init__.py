"""A fluentd-compatible Forward protocol v1 server (fluentd's in_forward, for windvane).

* :mod:`.config`: :class:`ForwardConfig`, the server's settings and their defaults.
* :mod:`.decode`: sans-IO decoding, bytes in, :class:`ingest.batch.Batch` out.
* :mod:`.handshake`: the shared-key/user HELO, PING, PONG exchange.
* :mod:`.server`: :class:`ForwardServer`, asyncio TCP (+TLS) and the UDP heartbeat.
* :mod:`.connection`: one client's connection, owning its parts: :mod:`.reading`, :mod:`.authenticate`,
  :mod:`.budgeted`, :mod:`.timers`, :mod:`.pump` and :mod:`.acks`.

The decoder (numpy, msgspec, zstandard) and the server (asyncio, ssl) are
imported when first asked for: the command line reads :class:`ForwardConfig`
without them.
"""

from windvane.connectors.lazy import lazy_attributes

from .config import ForwardConfig
from .errors import ForwardError, MalformedMessage, OversizeMessage

__all__ = [
    "INVALID_TIME",
    "Decoded",
    "ForwardConfig",
    "ForwardDecoder",
    "ForwardError",
    "ForwardServer",
    "FrameReader",
    "MalformedMessage",
    "OversizeMessage",
    "ack_bytes",
    "decode_message",
]

__getattr__ = lazy_attributes(
    __name__,
    {
        **dict.fromkeys(
            ("INVALID_TIME", "Decoded", "ForwardDecoder", "FrameReader", "ack_bytes", "decode_message"), "decode"
        ),
        "ForwardServer": "server",
    },
)
