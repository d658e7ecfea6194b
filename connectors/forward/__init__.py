"""A fluentd-compatible Forward protocol v1 server (fluentd's in_forward, for windvane).

* :mod:`.decode`: sans-IO decoding, bytes in, :class:`ingest.batch.Batch` out.
* :mod:`.handshake`: the shared-key/user HELO, PING, PONG exchange.
* :mod:`.server`: :class:`ForwardServer`, asyncio TCP (+TLS) and the UDP heartbeat.
"""

from .decode import INVALID_TIME, Decoded, ForwardDecoder, FrameReader, ack_bytes, decode_message
from .errors import ForwardError, MalformedMessage, OversizeMessage

__all__ = [
    "INVALID_TIME",
    "Decoded",
    "ForwardDecoder",
    "ForwardError",
    "FrameReader",
    "MalformedMessage",
    "OversizeMessage",
    "ack_bytes",
    "decode_message",
]


def __getattr__(name: str):
    # The server pulls in asyncio and ssl; import it only when asked for.
    if name == "ForwardServer":
        from .server import ForwardServer

        return ForwardServer
    raise AttributeError(name)
