"""``HOST:PORT`` addresses of the listening connectors (Forward, HTTP)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Self

from windvane.connectors.errors import ConnectorConfigError
from windvane.connectors.tls import TlsConfig


class AddressError(ConnectorConfigError):
    """An address that is not ``HOST:PORT`` with a port in 0-65535."""


def parse_address(text: str, default_port: int) -> tuple[str, int]:
    """``HOST:PORT``, ``:PORT``, ``HOST`` or ``[v6]:PORT`` as ``(host, port)``; raises :class:`AddressError`."""
    text = text.strip()
    host, sep, port = text.rpartition(":") if not text.endswith("]") else (text, "", "")
    if not sep:
        host, port = text, str(default_port)
    host = host.strip("[]") or "0.0.0.0"
    try:
        number = int(port)
    except ValueError:
        raise AddressError(f"address {text!r}: the port {port!r} is not a number (expected HOST:PORT)") from None
    if not 0 <= number <= 65535:
        raise AddressError(f"address {text!r}: port {number} is out of range 0-65535")
    return host, number


def host_port(host: str, port: int) -> str:
    """``HOST:PORT`` (``[v6]:PORT``), as :func:`parse_address` reads it."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


@dataclass(frozen=True)
class ListenerConfig:
    """Where a listening connector listens, and with which TLS (None: plain TCP). Port 0: any free port."""

    host: str = "127.0.0.1"
    port: int = 0
    tls: TlsConfig | None = None

    @property
    def address(self) -> str:
        """``HOST:PORT`` (``[v6]:PORT``), as :func:`parse_address` reads it."""
        return host_port(self.host, self.port)

    @classmethod
    def at(cls, address: str, **settings: Any) -> Self:
        """The configuration listening at ``address`` (``HOST:PORT``; the port defaults to the class's)."""
        host, port = parse_address(address, cls.port)
        return cls(host=host, port=port, **settings)
