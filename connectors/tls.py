"""The TLS certificate and key the listening connectors (Forward, HTTP) serve with."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from windvane.connectors.errors import ConnectorConfigError

if TYPE_CHECKING:
    import ssl


class TlsError(ConnectorConfigError):
    """A certificate chain or key that cannot be loaded."""


@dataclass(frozen=True)
class TlsConfig:
    """A PEM certificate chain and its private key."""

    cert: str
    key: str

    def server_context(self) -> ssl.SSLContext:
        """A server TLS context of :attr:`cert` and :attr:`key`; raises :class:`TlsError` if they do not load."""
        import ssl  # only a server that serves TLS needs it

        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        try:
            context.load_cert_chain(self.cert, self.key)
        except (OSError, ssl.SSLError) as exc:
            raise TlsError(f"cannot load the TLS certificate {self.cert} with key {self.key}: {exc}") from exc
        return context
