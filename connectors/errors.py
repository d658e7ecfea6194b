"""The root of the errors the connectors raise.

Each connector's errors derive from :class:`ConnectorError` through the
package's own root (:class:`connectors.forward.ForwardError`,
:class:`connectors.http.HttpError`, :class:`connectors.mqtt.MqttError`,
:class:`connectors.files.FileFormatError`, ...). A bad setting or argument is
a :class:`ConnectorConfigError`, a :class:`ValueError` too, so callers that
validate settings with ``except ValueError`` keep working.
"""

from __future__ import annotations

import errno
from typing import ClassVar


class ConnectorError(Exception):
    """Base class of every error a connector raises; the message says what to fix."""


class ConnectorConfigError(ConnectorError, ValueError):
    """A setting or argument a connector cannot work with (a limit below 1, a bad address, ...)."""


class ListenError(ConnectorError, OSError):
    """A listener cannot bind its address; the message names the listener, the address and what to do.

    ``name`` ("Forward", "HTTP") says which listener, for callers that name their own options.
    """

    #: What to do, by the bind's errno.
    ADVICE: ClassVar[dict[int, str]] = {
        errno.EADDRINUSE: "another program listens there: stop it, or choose another port",
        errno.EACCES: "ports below 1024 need privileges: choose a port of 1024 or more",
        errno.EADDRNOTAVAIL: "no network interface of this machine has that address",
    }

    def __init__(self, name: str, address: str, protocol: str, exc: OSError):
        advice = self.ADVICE.get(exc.errno or 0)
        super().__init__(
            f"{name} cannot listen on {address} ({protocol}): {exc.strerror or exc}" + (f"; {advice}" if advice else "")
        )
        self.name = name


class NotStarted(ConnectorError, RuntimeError):
    """Asked for what is known only once the listener started (its port)."""
