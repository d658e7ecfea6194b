"""The root of the errors the connectors raise.

Each connector's errors derive from :class:`ConnectorError` through the
package's own root (:class:`connectors.forward.ForwardError`,
:class:`connectors.http.HttpError`, :class:`connectors.mqtt.MqttError`,
:class:`connectors.files.FileFormatError`, ...). A bad setting or argument is
a :class:`ConnectorConfigError`, a :class:`ValueError` too, so callers that
validate settings with ``except ValueError`` keep working.
"""

from __future__ import annotations


class ConnectorError(Exception):
    """Base class of every error a connector raises; the message says what to fix."""


class ConnectorConfigError(ConnectorError, ValueError):
    """A setting or argument a connector cannot work with (a limit below 1, a bad address, ...)."""


class NotStarted(ConnectorError, RuntimeError):
    """Asked for what is known only once the listener started (its port)."""
